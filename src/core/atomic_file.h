/* Atomic output files: every file tilestack writes (weights, generated C, JSON reports, plots,
 * cache entries) is written to a temporary file in the destination's own directory and renamed
 * over the destination only once every byte is written and flushed, so a write that fails half
 * way (disk full, `ulimit -f`, a signal) leaves the previous file intact. Not installed. */
#ifndef TILESTACK_ATOMIC_FILE_H
#define TILESTACK_ATOMIC_FILE_H

#include "tilestack/core.h"

#include <stdbool.h>
#include <stdio.h>

typedef struct ts__atomic_file {
    FILE *f;   /* write through this stream */
    char *tmp; /* the temporary file beside the destination */
    char *dst; /* the destination */
} ts__atomic_file;

/* Creates the temporary file (mode 0644 less the umask, like fopen) beside `path`.
 * TS_ERR_IO naming the path (and errno's text) when the directory is not writable. */
ts_status ts__atomic_open(ts__atomic_file *af, const char *path);

/* Flushes, fsyncs and closes the stream, then renames the temporary file over the destination.
 * On any failure (including an earlier write error on the stream) the temporary file is
 * removed, the destination is left as it was, and TS_ERR_IO names the cause. */
ts_status ts__atomic_commit(ts__atomic_file *af);

/* Closes and removes the temporary file; the destination is untouched. Safe after a failed
 * open or a commit (then a no-op). */
void ts__atomic_abort(ts__atomic_file *af);

/* True when both paths exist and name the same file (device and inode, links followed):
 * an output that is one of the run's inputs is refused before anything is written. */
bool ts__same_file(const char *a, const char *b);

/* TS_OK when `path` could be created or replaced: its directory exists and is writable and
 * `path` is not a directory. Lets a tool refuse a bad output path before a long run, not
 * after it. */
ts_status ts__check_output_path(const char *path);

#endif
