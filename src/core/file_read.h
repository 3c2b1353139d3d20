/* Reading untrusted files: opened as regular files only (a directory, FIFO or device such as
 * /dev/zero is refused by name, never read until memory runs out), size-capped before a byte
 * is read, read whole with pread. Used by the safetensors / checkpoint readers, the tokenizer
 * and the CLI's input files. Not installed. */
#ifndef TILESTACK_FILE_READ_H
#define TILESTACK_FILE_READ_H

#include "tilestack/core.h"

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

/* Opens `name` relative to dirfd (AT_FDCWD for a path) read-only; with follow_links false a
 * final symbolic link is refused. TS_ERR_IO naming `shown` for a missing file, a link where
 * none may be, or anything but a regular file. *st receives its fstat. */
ts_status ts__open_regular(int dirfd, const char *name, const char *shown, bool follow_links,
                           int *fd, struct stat *st);

/* len bytes at offset off, retrying short reads; false on an error or end of file. */
bool ts__pread_all(int fd, void *buf, size_t len, long long off);

/* The whole file (at most cap bytes: TS_ERR_INVALID_ARGUMENT naming the size beyond it),
 * malloc'ed and NUL-terminated. */
ts_status ts__read_file_capped(int dirfd, const char *name, const char *shown, size_t cap,
                               bool follow_links, char **buf, size_t *len);

#endif
