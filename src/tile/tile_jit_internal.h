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

/* ---- disk cache (tile_cache.c; its head comment says what is checked and why) ---- */
typedef struct ts__tile_cache {
    char *path; /* the directory's real absolute path: what the compiler is given, never
                 * starting with '-' */
    int fd;     /* the directory, opened component by component with O_NOFOLLOW and checked */
    bool priv;  /* a private temporary directory (TS_TILE_JIT_NO_CACHE), removed on close */
} ts__tile_cache;
/* <cache_dir>/tile-jit, cache_dir from the option, else $TS_TILE_CACHE_DIR, else
 * $XDG_CACHE_HOME/tilestack (absolute values only), else $HOME/.cache/tilestack, else
 * TS_ERR_IO saying so. Created 0700 if missing; TS_ERR_IO naming the path when it or a
 * directory above it could be changed by another user. */
ts_status ts__tile_cache_open(const char *cache_dir, ts__tile_cache *c);
/* A fresh mkdtemp directory under $TMPDIR (absolute) or /tmp, removed by close. */
ts_status ts__tile_cache_open_private(ts__tile_cache *c);
void ts__tile_cache_close(ts__tile_cache *c);
/* SHA-256 hex of the embedded headers (names and contents), computed once. */
const char *ts__tile_cache_headers_hash(void);
/* Write the embedded headers into a fresh temporary directory in the cache (one per build,
 * so what is compiled is what the library holds); *incdir its malloc'd path. */
ts_status ts__tile_cache_headers(const ts__tile_cache *c, char **incdir);
void ts__tile_cache_remove_headers(const char *incdir);
/* A unique temporary name "tmp-<pid>-<n>-<rand><suffix>" (relative to the directory), malloc'd. */
char *ts__tile_cache_tmp(const char *suffix);
/* Append the entry trailer (magic, payload length, key, SHA-256 of payload and key) to the
 * freshly built object open at fd. key: 64 hex digits. */
ts_status ts__tile_cache_seal(int fd, const char *key);
/* True when the file at fd (or path, opened O_NOFOLLOW) is a complete entry for `key`: ELF
 * magic, trailer present, length, key and hash match. */
bool ts__tile_cache_valid_fd(int fd, const char *key);
bool ts__tile_cache_valid(const char *path, const char *key);
/* <key>.so in the directory: *hit when it is a valid entry for key. A symlink, a missing,
 * corrupt or other key's entry is a miss; one not owned by this user or writable by others
 * is TS_ERR_IO naming it. */
ts_status ts__tile_cache_lookup(const ts__tile_cache *c, const char *key, bool *hit);

#endif
