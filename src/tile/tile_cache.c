/* The tile JIT's disk cache: one file per key, <dir>/<key>.so, each a shared object followed
 * by a trailer (magic, payload length, the key, SHA-256 of payload and key).
 *
 * Entries are loaded as code, so the cache trusts nothing it did not check:
 *  - the directory: its path is resolved once (realpath) and then opened one component at a
 *    time with O_NOFOLLOW from "/", each component owned by root or this user and not
 *    writable by group or others unless sticky (/tmp); the cache directory itself
 *    (<base>/tile-jit) is created 0700 and must be owned by this user and not group- or
 *    other-writable. Only this user (or root) can then change what is under it.
 *  - an entry: opened with openat(dirfd, O_NOFOLLOW) (a symlink is a miss), then checked on
 *    that descriptor: a regular file of this user, not group- or other-writable (else a
 *    refusal naming the path), and a trailer whose hash matches and whose key is the one
 *    asked for (another kernel's valid entry copied under this name is a miss, rebuilt).
 *    The loader then opens it by its path in the checked directory, and the module's own
 *    copy of the key (tsjit__key) is compared once it is loaded.
 *  - the embedded headers are written afresh for every build, into a temporary directory
 *    removed after it, so a header edited in the cache is never compiled.
 * Entries are built in a temporary file in the same directory and renamed into place, so a
 * reader sees either nothing or a whole entry and concurrent builders of the same key simply
 * replace one another. The trailer catches what dlopen would not: a truncated object can
 * still map (section headers sit at the end) and then fault on first use. */
#include "core/internal.h"
#include "tile/tile_jit_internal.h"
#include "tile/tile_sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TRAILER_MAGIC "TSJITv2\n"
#define KEY_HEX 64
#define TRAILER_BYTES (8 + 8 + KEY_HEX + 32)

static char *joinpath(const char *a, const char *b) {
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", a, b);
    return p;
}

/* mkdir -p, mode 0700 for what it creates (checked afterwards, not trusted from here) */
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
    return rc;
}

/* ---- the directory ---- */

static ts_status refuse_dir(bool cache_dir, const char *path, const struct stat *st) {
    if (cache_dir)
        return ts__fail(TS_ERR_IO,
                        "ts_tile_compile: cache directory '%s' (owner uid %u, mode %04o) must be owned by this user and "
                        "not writable by others: its entries are loaded as code",
                        path, (unsigned)st->st_uid, (unsigned)(st->st_mode & 07777));
    return ts__fail(TS_ERR_IO,
                    "ts_tile_compile: directory '%s' above the cache (owner uid %u, mode %04o) must be owned by this user "
                    "or root and not writable by others unless sticky: whoever can write it can replace the cache, "
                    "whose entries are loaded as code",
                    path, (unsigned)st->st_uid, (unsigned)(st->st_mode & 07777));
}

/* Open the absolute, symlink-free `real` from "/" one component at a time (O_NOFOLLOW), each
 * owned by root or this user and not writable by group/others unless sticky. The last
 * component's descriptor in *fd. */
static ts_status open_chain(const char *real, int *fd) {
    *fd = -1;
    char *prefix = malloc(strlen(real) + 2); /* the part opened so far, for messages */
    int cur = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (!prefix || cur < 0) {
        free(prefix);
        if (cur >= 0) close(cur);
        return ts__fail(TS_ERR_IO, "ts_tile_compile: cannot open '/'");
    }
    size_t plen = 0;
    prefix[0] = 0;
    ts_status st = TS_OK;
    const uid_t me = geteuid();
    for (const char *s = real;;) {
        struct stat sb;
        if (fstat(cur, &sb) != 0) {
            st = ts__fail(TS_ERR_IO, "ts_tile_compile: cannot stat '%s': %s", plen ? prefix : "/", strerror(errno));
            break;
        }
        if ((sb.st_uid != 0 && sb.st_uid != me) || ((sb.st_mode & 022) && !(sb.st_mode & S_ISVTX))) {
            st = refuse_dir(false, plen ? prefix : "/", &sb);
            break;
        }
        while (*s == '/') s++;
        if (!*s) break;
        size_t cl = strcspn(s, "/");
        prefix[plen++] = '/';
        memcpy(prefix + plen, s, cl);
        plen += cl;
        prefix[plen] = 0;
        int next = openat(cur, prefix + plen - cl, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (next < 0) {
            st = ts__fail(TS_ERR_IO, "ts_tile_compile: cannot open directory '%s': %s", prefix, strerror(errno));
            break;
        }
        close(cur);
        cur = next;
        s += cl;
    }
    free(prefix);
    if (st != TS_OK) {
        close(cur);
        return st;
    }
    *fd = cur;
    return TS_OK;
}

/* <base>/tile-jit, created 0700, owned by this user and not writable by others. */
static ts_status open_jit_dir(const char *base, ts__tile_cache *c) {
    int rc = mkdirs(base);
    if (rc) return ts__fail(TS_ERR_IO, "ts_tile_compile: cannot create cache directory '%s': %s", base, strerror(rc));
    char *real = realpath(base, NULL);
    if (!real) return ts__fail(TS_ERR_IO, "ts_tile_compile: cannot resolve cache directory '%s': %s", base, strerror(errno));
    int bfd;
    ts_status st = open_chain(real, &bfd);
    if (st != TS_OK) {
        free(real);
        return st;
    }
    if (mkdirat(bfd, "tile-jit", 0700) != 0 && errno != EEXIST) {
        st = ts__fail(TS_ERR_IO, "ts_tile_compile: cannot create cache directory '%s/tile-jit': %s", real, strerror(errno));
    } else {
        c->fd = openat(bfd, "tile-jit", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        c->path = joinpath(strcmp(real, "/") ? real : "", "tile-jit");
        struct stat sb;
        if (!c->path) st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_tile_compile: out of memory");
        else if (c->fd < 0)
            st = ts__fail(TS_ERR_IO, "ts_tile_compile: cannot open cache directory '%s' (a symlink is refused): %s",
                          c->path, strerror(errno));
        else if (fstat(c->fd, &sb) != 0)
            st = ts__fail(TS_ERR_IO, "ts_tile_compile: cannot stat '%s': %s", c->path, strerror(errno));
        else if (sb.st_uid != geteuid() || (sb.st_mode & 022))
            st = refuse_dir(true, c->path, &sb);
    }
    close(bfd);
    free(real);
    if (st != TS_OK) ts__tile_cache_close(c);
    return st;
}

ts_status ts__tile_cache_open(const char *cache_dir, ts__tile_cache *c) {
    memset(c, 0, sizeof *c);
    c->fd = -1;
    const char *env = getenv("TS_TILE_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char *base = NULL;
    if (cache_dir && *cache_dir) base = strdup(cache_dir);
    else if (env && *env) base = strdup(env);
    else if (xdg && xdg[0] == '/') base = joinpath(xdg, "tilestack"); /* XDG: relative values are ignored */
    else if (home && *home) base = joinpath(home, ".cache/tilestack");
    else
        /* never a guessable shared path such as /tmp/tilestack-<uid>: another user could
         * create it first and fill it */
        return ts__fail(TS_ERR_IO, "ts_tile_compile: no cache directory: HOME is not set (set TS_TILE_CACHE_DIR, "
                                   "XDG_CACHE_HOME or HOME, pass ts_tile_options.cache_dir, or use TS_TILE_JIT_NO_CACHE)");
    if (!base) return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_tile_compile: out of memory");
    ts_status st = open_jit_dir(base, c);
    free(base);
    return st;
}

ts_status ts__tile_cache_open_private(ts__tile_cache *c) {
    memset(c, 0, sizeof *c);
    c->fd = -1;
    const char *t = getenv("TMPDIR");
    char tmpl[PATH_MAX];
    snprintf(tmpl, sizeof tmpl, "%s/tilestack-jit-XXXXXX", t && t[0] == '/' && strlen(t) < PATH_MAX - 32 ? t : "/tmp");
    if (!mkdtemp(tmpl)) return ts__fail(TS_ERR_IO, "ts_tile_compile: cannot create a temporary directory '%s': %s", tmpl, strerror(errno));
    /* mkdtemp made it 0700 and ours; the chain above it is checked like a cache's */
    char *real = realpath(tmpl, NULL);
    ts_status st = real ? open_chain(real, &c->fd) : ts__fail(TS_ERR_IO, "ts_tile_compile: cannot resolve '%s'", tmpl);
    if (st == TS_OK) {
        c->path = real;
        c->priv = true;
        real = NULL;
    } else {
        rmdir(tmpl);
    }
    free(real);
    return st;
}

void ts__tile_cache_close(ts__tile_cache *c) {
    if (c->fd >= 0) close(c->fd);
    if (c->priv && c->path) rmdir(c->path); /* empty by then: every build file is removed */
    free(c->path);
    c->path = NULL;
    c->fd = -1;
    c->priv = false;
}

char *ts__tile_cache_tmp(const char *suffix) {
    static atomic_uint g_counter;
    unsigned n = atomic_fetch_add(&g_counter, 1u);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    size_t len = strlen(suffix) + 80;
    char *p = malloc(len);
    if (p)
        snprintf(p, len, "tmp-%ld-%u-%lx%s", (long)getpid(), n,
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
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
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

void ts__tile_cache_remove_headers(const char *dir) {
    /* only what ts__tile_cache_headers creates: the header files and their directories */
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

ts_status ts__tile_cache_headers(const ts__tile_cache *c, char **incdir) {
    *incdir = NULL;
    char *name = ts__tile_cache_tmp(".inc");
    char *tmp = name ? joinpath(c->path, name) : NULL;
    free(name);
    if (!tmp) return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_tile_compile: out of memory");
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
    if (rc) {
        ts__tile_cache_remove_headers(tmp);
        free(tmp);
        return ts__fail(TS_ERR_IO, "ts_tile_compile: cannot write headers to '%s': %s", c->path, strerror(rc));
    }
    *incdir = tmp;
    return TS_OK;
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

static unsigned char *read_fd(int fd, size_t *n) {
    *n = 0;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 0 || st.st_size > (1ll << 30)) return NULL;
    size_t len = (size_t)st.st_size, got = 0;
    unsigned char *buf = malloc(len ? len : 1);
    while (buf && got < len) {
        ssize_t r = pread(fd, buf + got, len - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    if (!buf || got != len) {
        free(buf);
        return NULL;
    }
    *n = len;
    return buf;
}

static void digest(const unsigned char *payload, size_t n, const char *key, uint8_t d[32]) {
    ts__sha256 s;
    ts__sha256_init(&s);
    ts__sha256_update(&s, payload, n);
    ts__sha256_update(&s, key, KEY_HEX);
    ts__sha256_final(&s, d);
}

ts_status ts__tile_cache_seal(int fd, const char *key) {
    size_t n;
    unsigned char *buf = read_fd(fd, &n);
    if (!buf || strlen(key) != KEY_HEX) {
        free(buf);
        return ts__fail(TS_ERR_IO, "ts_tile_compile: cannot read the built object");
    }
    uint8_t tr[TRAILER_BYTES];
    memcpy(tr, TRAILER_MAGIC, 8);
    put_u64(tr + 8, n);
    memcpy(tr + 16, key, KEY_HEX);
    digest(buf, n, key, tr + 16 + KEY_HEX);
    free(buf);
    bool ok = pwrite(fd, tr, sizeof tr, (off_t)n) == (ssize_t)sizeof tr;
    return ok ? TS_OK : ts__fail(TS_ERR_IO, "ts_tile_compile: cannot write the built object's trailer");
}

bool ts__tile_cache_valid_fd(int fd, const char *key) {
    size_t n;
    unsigned char *buf = read_fd(fd, &n);
    if (!buf) return false;
    bool ok = false;
    if (n > TRAILER_BYTES + 4 && !memcmp(buf, "\177ELF", 4) && strlen(key) == KEY_HEX) {
        const uint8_t *tr = buf + n - TRAILER_BYTES;
        if (!memcmp(tr, TRAILER_MAGIC, 8) && get_u64(tr + 8) == n - TRAILER_BYTES &&
            !memcmp(tr + 16, key, KEY_HEX)) {
            uint8_t d[32];
            digest(buf, n - TRAILER_BYTES, key, d);
            ok = !memcmp(d, tr + 16 + KEY_HEX, 32);
        }
    }
    free(buf);
    return ok;
}

bool ts__tile_cache_valid(const char *path, const char *key) {
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return false;
    bool ok = ts__tile_cache_valid_fd(fd, key);
    close(fd);
    return ok;
}

ts_status ts__tile_cache_lookup(const ts__tile_cache *c, const char *key, bool *hit) {
    *hit = false;
    char name[KEY_HEX + 8];
    snprintf(name, sizeof name, "%s.so", key);
    /* O_NOFOLLOW: a symlink planted as an entry is a miss (the rebuild renames over the link
     * itself); O_NONBLOCK: a FIFO planted there cannot hang the open */
    int fd = openat(c->fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return TS_OK;
    struct stat st;
    ts_status s = TS_OK;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        /* not a file: a miss; the rename of the rebuild replaces it (or names the problem) */
    } else if (st.st_uid != geteuid()) {
        s = ts__fail(TS_ERR_IO, "ts_tile_compile: cache entry '%s/%s' is owned by uid %u, not by this user (uid %u): refusing to load it",
                     c->path, name, (unsigned)st.st_uid, (unsigned)geteuid());
    } else if (st.st_mode & 022) {
        s = ts__fail(TS_ERR_IO, "ts_tile_compile: cache entry '%s/%s' is writable by group or others (mode %04o): refusing to load it",
                     c->path, name, (unsigned)(st.st_mode & 07777));
    } else {
        *hit = ts__tile_cache_valid_fd(fd, key);
    }
    close(fd);
    return s;
}
