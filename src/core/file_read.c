/* Reading untrusted files (file_read.h). */
#include "core/file_read.h"
#include "core/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

ts_status ts__open_regular(int dirfd, const char *name, const char *shown, bool follow_links,
                           int *fd_out, struct stat *st) {
    *fd_out = -1;
    const int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | (follow_links ? 0 : O_NOFOLLOW));
    if (fd < 0) {
        const int e = errno;
        return ts__fail(TS_ERR_IO, "%s: cannot open (%s)", shown,
                        e == ELOOP && !follow_links ? "a symbolic link where a file was expected"
                                                    : strerror(e));
    }
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
        close(fd);
        return ts__fail(TS_ERR_IO, "%s: not a regular file", shown);
    }
    *fd_out = fd;
    return TS_OK;
}

bool ts__pread_all(int fd, void *buf, size_t len, long long off) {
    char *p = buf;
    while (len) {
        const ssize_t r = pread(fd, p, len, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        p += r, len -= (size_t)r, off += r;
    }
    return true;
}

ts_status ts__read_file_capped(int dirfd, const char *name, const char *shown, size_t cap,
                               bool follow_links, char **buf, size_t *len) {
    *buf = NULL;
    *len = 0;
    int fd = -1;
    struct stat st;
    TS__RETURN_IF_ERROR(ts__open_regular(dirfd, name, shown, follow_links, &fd, &st));
    if ((uint64_t)st.st_size > cap) {
        close(fd);
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: %lld bytes, more than the %zu accepted",
                        shown, (long long)st.st_size, cap);
    }
    char *b = malloc((size_t)st.st_size + 1);
    const bool ok = b && ts__pread_all(fd, b, (size_t)st.st_size, 0);
    close(fd);
    if (!ok) {
        free(b);
        return ts__fail(b ? TS_ERR_IO : TS_ERR_OUT_OF_MEMORY, "%s: read failed", shown);
    }
    b[st.st_size] = 0;
    *buf = b;
    *len = (size_t)st.st_size;
    return TS_OK;
}
