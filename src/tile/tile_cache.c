/* The tile JIT's disk cache: one file per key, <dir>/<key>.so, each a shared object followed
 * by a trailer (magic, payload length, SHA-256 of the payload). Entries are built in a temp
 * file in the same directory and renamed into place, so a reader sees either nothing or a
 * whole entry and concurrent builders of the same key simply replace one another. The
 * trailer catches what dlopen would not: a truncated object can still map (section headers
 * sit at the end) and then fault on first use. */
#include "core/internal.h"
#include "tile/tile_jit_internal.h"
#include "tile/tile_sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TRAILER_MAGIC "TSJITv1\n"
#define TRAILER_BYTES (8 + 8 + 32)

static char *joinpath(const char *a, const char *b) {
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", a, b);
    return p;
}

/* mkdir -p, mode 0700 for what it creates */
static int mkdirs(const char *path) {
    char *p = strdup(path);
    if (!p) return ENOMEM;
    int rc = 0;
    for (char *s = p + 1;; s++) {
        if (*s == '/' || !*s) {
            char c = *s;
            *s = 0;
            if (mkdir(p, 0700) != 0 && errno != EEXIST) {
                rc = errno;
                break;
            }
            *s = c;
            if (!c) break;
        }
    }
    free(p);
    if (!rc) {
        struct stat st;
        if (stat(path, &st) != 0) rc = errno;
        else if (!S_ISDIR(st.st_mode)) rc = ENOTDIR;
    }
    return rc;
}

ts_status ts__tile_cache_dir(const char *cache_dir, char **dir) {
    *dir = NULL;
    char *base = NULL;
    if (cache_dir && *cache_dir) base = strdup(cache_dir);
    else if (getenv("TS_TILE_CACHE_DIR") && *getenv("TS_TILE_CACHE_DIR")) base = strdup(getenv("TS_TILE_CACHE_DIR"));
    else if (getenv("HOME") && *getenv("HOME")) base = joinpath(getenv("HOME"), ".cache/tilestack");
    else {
        char tmp[64];
        snprintf(tmp, sizeof tmp, "/tmp/tilestack-cache-%ld", (long)getuid());
        base = strdup(tmp);
    }
    if (!base) return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_tile_compile: out of memory");
    char *d = joinpath(base, "tile-jit");
    free(base);
    if (!d) return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_tile_compile: out of memory");
    int rc = mkdirs(d);
    if (rc) {
        ts_status s = ts__fail(TS_ERR_IO, "ts_tile_compile: cannot create cache directory '%s': %s", d, strerror(rc));
        free(d);
        return s;
    }
    /* the entries are loaded as code: someone else's (or a shared writable) dir is refused */
    struct stat st;
    if (stat(d, &st) != 0 || st.st_uid != geteuid() || (st.st_mode & 022)) {
        ts_status s = ts__fail(TS_ERR_IO, "ts_tile_compile: cache directory '%s' must be owned by this user and not writable by others", d);
        free(d);
        return s;
    }
    *dir = d;
    return TS_OK;
}

char *ts__tile_cache_tmp(const char *dir, const char *suffix) {
    static atomic_uint g_counter;
    unsigned n = atomic_fetch_add(&g_counter, 1u);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    size_t len = strlen(dir) + strlen(suffix) + 80;
    char *p = malloc(len);
    if (p)
        snprintf(p, len, "%s/tmp-%ld-%u-%lx%s", dir, (long)getpid(), n,
                 (unsigned long)(ts.tv_nsec ^ ((unsigned long)ts.tv_sec << 20)), suffix);
    return p;
}

/* ---- embedded headers ---- */

static pthread_once_t g_hash_once = PTHREAD_ONCE_INIT;
static char g_hash[65];

static void hash_headers(void) {
    ts__sha256 s;
    uint8_t d[32];
    ts__sha256_init(&s);
    for (int i = 0; i < ts__tile_jit_nheaders; i++) {
        const ts__tile_jit_header *h = &ts__tile_jit_headers[i];
        uint64_t len = h->len;
        ts__sha256_update(&s, h->name, strlen(h->name) + 1);
        ts__sha256_update(&s, &len, sizeof len);
        ts__sha256_update(&s, h->data, h->len);
    }
    ts__sha256_final(&s, d);
    ts__sha256_to_hex(d, g_hash);
}

const char *ts__tile_cache_headers_hash(void) {
    pthread_once(&g_hash_once, hash_headers);
    return g_hash;
}

static int write_file(const char *path, const void *data, size_t n) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return errno;
    const char *p = data;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = errno ? errno : EIO;
            close(fd);
            return e;
        }
        p += w;
        n -= (size_t)w;
    }
    return close(fd) == 0 ? 0 : errno;
}

static void remove_tree(const char *dir) {
    /* only what write_headers creates: the header files and their directories */
    for (int i = ts__tile_jit_nheaders - 1; i >= 0; i--) {
        char *f = joinpath(dir, ts__tile_jit_headers[i].name);
        if (!f) continue;
        unlink(f);
        char *slash = strrchr(f, '/');
        while (slash && slash > f + strlen(dir)) {
            *slash = 0;
            rmdir(f); /* fails while not empty: fine */
            slash = strrchr(f, '/');
        }
        free(f);
    }
    rmdir(dir);
}

ts_status ts__tile_cache_headers(const char *dir, char **incdir) {
    *incdir = NULL;
    char name[32];
    snprintf(name, sizeof name, "inc-%.16s", ts__tile_cache_headers_hash());
    char *final = joinpath(dir, name);
    if (!final) return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_tile_compile: out of memory");
    struct stat st;
    if (stat(final, &st) == 0 && S_ISDIR(st.st_mode)) {
        *incdir = final;
        return TS_OK;
    }
    char *tmp = ts__tile_cache_tmp(dir, ".inc");
    if (!tmp) {
        free(final);
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_tile_compile: out of memory");
    }
    int rc = mkdir(tmp, 0700) == 0 ? 0 : errno;
    for (int i = 0; !rc && i < ts__tile_jit_nheaders; i++) {
        char *f = joinpath(tmp, ts__tile_jit_headers[i].name);
        if (!f) {
            rc = ENOMEM;
            break;
        }
        char *slash = strrchr(f, '/');
        *slash = 0;
        rc = mkdirs(f);
        *slash = '/';
        if (!rc) rc = write_file(f, ts__tile_jit_headers[i].data, ts__tile_jit_headers[i].len);
        free(f);
    }
    ts_status s = TS_OK;
    if (!rc && rename(tmp, final) != 0) {
        /* another process put the same headers in place first */
        if (!(stat(final, &st) == 0 && S_ISDIR(st.st_mode))) rc = errno;
        remove_tree(tmp);
    } else if (rc) {
        remove_tree(tmp);
    }
    if (rc) s = ts__fail(TS_ERR_IO, "ts_tile_compile: cannot write headers to '%s': %s", dir, strerror(rc));
    free(tmp);
    if (s != TS_OK) free(final);
    else *incdir = final;
    return s;
}

/* ---- entry trailer ---- */

static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static unsigned char *read_all(const char *path, size_t *n) {
    *n = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 0 || st.st_size > (1ll << 30)) {
        close(fd);
        return NULL;
    }
    size_t len = (size_t)st.st_size, got = 0;
    unsigned char *buf = malloc(len ? len : 1);
    while (buf && got < len) {
        ssize_t r = read(fd, buf + got, len - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (!buf || got != len) {
        free(buf);
        return NULL;
    }
    *n = len;
    return buf;
}

ts_status ts__tile_cache_seal(const char *path) {
    size_t n;
    unsigned char *buf = read_all(path, &n);
    if (!buf) return ts__fail(TS_ERR_IO, "ts_tile_compile: cannot read '%s'", path);
    uint8_t tr[TRAILER_BYTES], d[32];
    ts__sha256 s;
    ts__sha256_init(&s);
    ts__sha256_update(&s, buf, n);
    ts__sha256_final(&s, d);
    free(buf);
    memcpy(tr, TRAILER_MAGIC, 8);
    put_u64(tr + 8, n);
    memcpy(tr + 16, d, 32);
    int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    bool ok = fd >= 0 && write(fd, tr, sizeof tr) == (ssize_t)sizeof tr;
    if (fd >= 0 && close(fd) != 0) ok = false;
    return ok ? TS_OK : ts__fail(TS_ERR_IO, "ts_tile_compile: cannot write '%s'", path);
}

bool ts__tile_cache_valid(const char *path) {
    size_t n;
    unsigned char *buf = read_all(path, &n);
    if (!buf) return false;
    bool ok = false;
    if (n > TRAILER_BYTES + 4 && !memcmp(buf, "\177ELF", 4)) {
        const uint8_t *tr = buf + n - TRAILER_BYTES;
        if (!memcmp(tr, TRAILER_MAGIC, 8) && get_u64(tr + 8) == n - TRAILER_BYTES) {
            uint8_t d[32];
            ts__sha256 s;
            ts__sha256_init(&s);
            ts__sha256_update(&s, buf, n - TRAILER_BYTES);
            ts__sha256_final(&s, d);
            ok = !memcmp(d, tr + 16, 32);
        }
    }
    free(buf);
    return ok;
}
