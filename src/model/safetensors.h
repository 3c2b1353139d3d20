/* safetensors files and Hugging Face checkpoint directories, memory-mapped (docs/models.md).
 *
 * A safetensors file: 8-byte little-endian header length N, N bytes of JSON naming each
 * tensor's dtype, shape and [begin, end) byte offsets into the data that follows, and an
 * optional "__metadata__" object of strings. Everything is checked before the data is mapped:
 * the header length against a cap and the file size, the JSON (strict, no duplicate keys), each
 * dtype, shape (at most TS__ST_MAX_DIMS dims, no overflow) and offsets (inside the data, sizes
 * matching dtype x shape, no overlap, no hole, as the format requires). Not installed. */
#ifndef TILESTACK_SAFETENSORS_H
#define TILESTACK_SAFETENSORS_H

#include "tilestack/core.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TS__ST_MAX_DIMS 8
#define TS__ST_MAX_HEADER_BYTES (INT64_C(100) << 20) /* the reference library's own limit */

typedef struct ts__st_tensor {
    const char *name;
    ts_dtype dtype;
    int ndim;
    int64_t shape[TS__ST_MAX_DIMS];
    uint64_t begin, end; /* in the data section */
    const void *data;    /* into the mapping */
} ts__st_tensor;

typedef struct ts__st_file {
    char *path; /* for messages */
    void *map;
    size_t map_len;
    ts__st_tensor *t; /* sorted by name */
    size_t n;
    char *names; /* the tensors' names, NUL-separated */
} ts__st_file;

/* Opens `name` relative to the directory fd `dirfd` (AT_FDCWD for a path), maps it read-only.
 * `path` names it in messages. TS_ERR_IO for a missing / unreadable / non-regular file,
 * TS_ERR_INVALID_ARGUMENT for a malformed one, TS_ERR_UNSUPPORTED for a dtype tilestack has
 * no type for; every message names the file and, where one is at fault, the tensor. */
ts_status ts__st_open(int dirfd, const char *name, const char *path, ts__st_file **out);
void ts__st_close(ts__st_file *f);
/* The tensor called `name`, or NULL. */
const ts__st_tensor *ts__st_find(const ts__st_file *f, const char *name);
/* The safetensors name of a dtype ("F8_E4M3", ...); "?" for one the format has no name for. */
const char *ts__st_dtype_name(ts_dtype t);

/* ---- a Hugging Face checkpoint directory (hf_checkpoint.c) ----
 * config.json plus model.safetensors, or model.safetensors.index.json naming the shards. Shard
 * names are plain file names in the directory (no '/', no "..", no control byte); a shard that
 * is a symbolic link is followed only when it stays inside the directory or, for a Hugging
 * Face cache snapshot (.../snapshots/REV/), inside that repository's blobs/ folder. */
#define TS__HF_MAX_CONFIG_BYTES (INT64_C(1) << 20)
#define TS__HF_MAX_INDEX_BYTES (INT64_C(64) << 20)

typedef struct ts__hf_dir {
    char *path;
    char *real;    /* canonical path */
    int dirfd;     /* held open: later members (tokenizer.json) come from the same directory */
    char *config; /* config.json, NUL-terminated */
    size_t config_len;
    ts__st_file **shards;
    size_t n_shards;
    size_t n_tensors; /* over all shards */
} ts__hf_dir;

ts_status ts__hf_open(const char *dir, ts__hf_dir **out);
void ts__hf_close(ts__hf_dir *d);
/* A small member file of the directory (tokenizer.json, generation_config.json), under the
 * same link rule as the shards, at most `cap` bytes, NUL-terminated (malloc'ed). */
ts_status ts__hf_read_member(const ts__hf_dir *d, int dirfd, const char *name, size_t cap,
                             char **buf, size_t *len);
/* The tensor called `name` in whichever shard holds it, or NULL. */
const ts__st_tensor *ts__hf_find(const ts__hf_dir *d, const char *name);

#endif
