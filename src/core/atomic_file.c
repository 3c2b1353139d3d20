/* Atomic output files (atomic_file.h): mkstemp beside the destination, then rename. */
#include "core/atomic_file.h"
#include "core/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The directory part of `path` ("." when it has none), malloc'ed. */
static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    if (slash == path) return strdup("/");
    size_t n = (size_t)(slash - path);
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, path, n);
        d[n] = 0;
    }
    return d;
}

static void clear(ts__atomic_file *af) {
    free(af->tmp);
    free(af->dst);
    af->f = NULL;
    af->tmp = af->dst = NULL;
}

ts_status ts__atomic_open(ts__atomic_file *af, const char *path) {
    memset(af, 0, sizeof *af);
    if (!path || !*path) return ts__fail(TS_ERR_INVALID_ARGUMENT, "output path is empty");
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return ts__fail(TS_ERR_IO, "cannot write %s: it is a directory", path);
    char *dir = dir_of(path);
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    size_t len = (dir ? strlen(dir) : 0) + strlen(base) + 16;
    af->tmp = malloc(len);
    af->dst = strdup(path);
    if (!dir || !af->tmp || !af->dst) {
        free(dir);
        clear(af);
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "output file %s: path copies", path);
    }
    /* A dot name, so a crashed writer's leftover is hidden, and the same directory, so the
     * rename never crosses file systems. */
    snprintf(af->tmp, len, "%s/.%s.XXXXXX", dir, base);
    free(dir);
    int fd = mkstemp(af->tmp);
    if (fd < 0) {
        int e = errno;
        clear(af);
        return ts__fail(TS_ERR_IO, "cannot write %s: %s", path, strerror(e));
    }
    mode_t um = umask(0);
    umask(um);
    if (fchmod(fd, 0644 & ~um) != 0 || !(af->f = fdopen(fd, "wb"))) {
        int e = errno;
        close(fd);
        unlink(af->tmp);
        clear(af);
        return ts__fail(TS_ERR_IO, "cannot write %s: %s", path, strerror(e));
    }
    return TS_OK;
}

ts_status ts__atomic_commit(ts__atomic_file *af) {
    if (!af->f) return ts__fail(TS_ERR_IO, "output file was not opened");
    int e = 0;
    if (ferror(af->f)) e = EIO;
    if (!e && fflush(af->f) != 0) e = errno;
    if (!e && fsync(fileno(af->f)) != 0) e = errno;
    if (fclose(af->f) != 0 && !e) e = errno;
    af->f = NULL;
    if (!e && rename(af->tmp, af->dst) != 0) e = errno;
    if (e) {
        unlink(af->tmp);
        ts_status st = ts__fail(TS_ERR_IO, "cannot write %s: %s (the previous file, if any, is unchanged)",
                                af->dst, strerror(e));
        clear(af);
        return st;
    }
    clear(af);
    return TS_OK;
}

void ts__atomic_abort(ts__atomic_file *af) {
    if (af->f) fclose(af->f);
    if (af->tmp) unlink(af->tmp);
    clear(af);
}

bool ts__same_file(const char *a, const char *b) {
    struct stat sa, sb;
    if (!a || !b || stat(a, &sa) != 0 || stat(b, &sb) != 0) return false;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

ts_status ts__check_output_path(const char *path) {
    if (!path || !*path) return ts__fail(TS_ERR_INVALID_ARGUMENT, "output path is empty");
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return ts__fail(TS_ERR_IO, "cannot write %s: it is a directory", path);
    char *dir = dir_of(path);
    if (!dir) return ts__fail(TS_ERR_OUT_OF_MEMORY, "output path %s", path);
    int ok = stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
    int e = ok ? (access(dir, W_OK | X_OK) == 0 ? 0 : errno) : ENOENT;
    ts_status r = e ? ts__fail(TS_ERR_IO, "cannot write %s: directory %s: %s", path, dir, strerror(e))
                    : TS_OK;
    free(dir);
    return r;
}
