/* Internal interfaces of the tile JIT: compiler driver (tile_jit_cc.c), disk cache
 * (tile_cache.c) and the headers embedded at build time (generated tile_jit_headers.c). */
#ifndef TS_TILE_JIT_INTERNAL_H
#define TS_TILE_JIT_INTERNAL_H

#include "tilestack/core.h"

#include <stdbool.h>
#include <stddef.h>

/* ---- the headers generated C includes, as they were when the library was built ---- */
typedef struct ts__tile_jit_header {
    const char *name; /* relative include path, e.g. "tile/tile_rt.h" */
    const unsigned char *data;
    size_t len;
} ts__tile_jit_header;
extern const ts__tile_jit_header ts__tile_jit_headers[];
extern const int ts__tile_jit_nheaders;

/* ---- compiler driver ---- */
/* Resolve `cc` (a path, or a name searched on PATH) to an executable file: malloc'd path.
 * TS_ERR_UNSUPPORTED naming it when not found. */
ts_status ts__tile_cc_resolve(const char *cc, char **path);
/* Identity of the compiler for cache keys: resolved real path, size, mtime and the output of
 * `cc --version` (run once per process per binary). malloc'd. */
ts_status ts__tile_cc_identity(const char *path, char **id);
/* Run argv (argv[0] the resolved path, no shell) with stdin from /dev/null and stdout+stderr
 * captured (*output malloc'd, at most 1 MiB kept). *exit_code: the exit status, or 128 +
 * signal. TS_ERR_UNSUPPORTED when it cannot be started. */
ts_status ts__tile_cc_run(char *const argv[], int *exit_code, char **output);

/* ---- disk cache ---- */
/* The JIT's directory (<cache_dir>/tile-jit), created (mode 0700) if missing: malloc'd. */
ts_status ts__tile_cache_dir(const char *cache_dir, char **dir);
/* SHA-256 hex of the embedded headers (names and contents), computed once. */
const char *ts__tile_cache_headers_hash(void);
/* Write the embedded headers under <dir>/inc-<hash16> (atomically: a temp dir renamed into
 * place) unless present; *incdir malloc'd. */
ts_status ts__tile_cache_headers(const char *dir, char **incdir);
/* A unique temporary path in dir: "<dir>/tmp-<pid>-<n>-<rand><suffix>", malloc'd. */
char *ts__tile_cache_tmp(const char *dir, const char *suffix);
/* Append the entry trailer (magic, payload length, SHA-256 of the payload) to a freshly
 * built object. */
ts_status ts__tile_cache_seal(const char *path);
/* True when `path` is a complete entry: ELF magic, trailer present, length and hash match. */
bool ts__tile_cache_valid(const char *path);

#endif
