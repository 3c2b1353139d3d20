/* The tile JIT's compiler driver: find the compiler, identify it, run it with an argument
 * vector (posix_spawn, never a shell) and capture what it prints. */
#include "core/internal.h"
#include "tile/tile_jit_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static bool is_exec_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, X_OK) == 0;
}

ts_status ts__tile_cc_resolve(const char *cc, char **path) {
    *path = NULL;
    if (!cc[0]) return ts__fail(TS_ERR_UNSUPPORTED, "ts_tile_compile: the C compiler name is empty");
    if (strchr(cc, '/')) {
        if (!is_exec_file(cc))
            return ts__fail(TS_ERR_UNSUPPORTED, "ts_tile_compile: C compiler '%s' not found or not executable (set TS_TILE_CC)", cc);
        *path = strdup(cc);
        return *path ? TS_OK : ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_tile_compile: out of memory");
    }
    const char *env = getenv("PATH");
    const char *p = env && *env ? env : "/usr/local/bin:/usr/bin:/bin";
    size_t cl = strlen(cc);
    while (*p) {
        size_t dl = strcspn(p, ":");
        char *cand = malloc(dl + cl + 3);
        if (!cand) return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_tile_compile: out of memory");
        if (dl) {
            memcpy(cand, p, dl);
            cand[dl] = '/';
            memcpy(cand + dl + 1, cc, cl + 1);
        } else {
            snprintf(cand, dl + cl + 3, "./%s", cc); /* empty PATH entry: the current dir */
        }
        if (is_exec_file(cand)) {
            *path = cand;
            return TS_OK;
        }
        free(cand);
        p += dl;
        if (*p == ':') p++;
    }
    return ts__fail(TS_ERR_UNSUPPORTED, "ts_tile_compile: C compiler '%s' not found on PATH (set TS_TILE_CC)", cc);
}

ts_status ts__tile_cc_run(char *const argv[], int *exit_code, char **output) {
    *output = NULL;
    *exit_code = -1;
    int fds[2];
    if (pipe(fds) != 0) return ts__fail(TS_ERR_UNSUPPORTED, "ts_tile_compile: pipe failed: %s", strerror(errno));
    /* the read end must not leak into children other threads spawn */
    fcntl(fds[0], F_SETFD, FD_CLOEXEC);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    posix_spawn_file_actions_addclose(&fa, fds[1]);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        return ts__fail(TS_ERR_UNSUPPORTED, "ts_tile_compile: cannot run '%s': %s", argv[0], strerror(rc));
    }
    size_t cap = 4096, len = 0;
    const size_t keep = (size_t)1 << 20;
    char *buf = malloc(cap);
    bool oom = !buf;
    for (;;) {
        char tmp[4096];
        ssize_t n = read(fds[0], tmp, sizeof tmp);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        if (oom || len >= keep) continue; /* keep draining so the child never blocks */
        size_t take = (size_t)n < keep - len ? (size_t)n : keep - len;
        if (len + take + 1 > cap) {
            while (len + take + 1 > cap) cap *= 2;
            char *nb = realloc(buf, cap);
            if (!nb) {
                oom = true;
                continue;
            }
            buf = nb;
        }
        memcpy(buf + len, tmp, take);
        len += take;
    }
    close(fds[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (oom) {
        free(buf);
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_tile_compile: out of memory");
    }
    buf[len] = 0;
    *output = buf;
    *exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
    return TS_OK;
}

/* `--version` output per binary, remembered for the process: a cache hit must not pay for a
 * compiler start. Keyed by path + size + mtime, so a replaced binary is asked again. */
typedef struct id_memo {
    char *key;
    char *id;
    struct id_memo *next;
} id_memo;
static pthread_mutex_t g_id_lock = PTHREAD_MUTEX_INITIALIZER;
static id_memo *g_ids;

ts_status ts__tile_cc_identity(const char *path, char **id) {
    *id = NULL;
    char *real = realpath(path, NULL);
    struct stat st;
    if (!real || stat(real, &st) != 0) {
        free(real);
        return ts__fail(TS_ERR_UNSUPPORTED, "ts_tile_compile: cannot stat C compiler '%s'", path);
    }
    char key[4200];
    snprintf(key, sizeof key, "%s|%s|%lld|%lld.%09ld", path, real, (long long)st.st_size,
             (long long)st.st_mtim.tv_sec, (long)st.st_mtim.tv_nsec);
    free(real);
    pthread_mutex_lock(&g_id_lock);
    for (id_memo *m = g_ids; m; m = m->next)
        if (!strcmp(m->key, key)) {
            *id = strdup(m->id);
            pthread_mutex_unlock(&g_id_lock);
            return *id ? TS_OK : ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_tile_compile: out of memory");
        }
    pthread_mutex_unlock(&g_id_lock);
    char *argv[] = {(char *)path, "--version", NULL};
    int code;
    char *out = NULL;
    ts_status s = ts__tile_cc_run(argv, &code, &out);
    if (s != TS_OK) return s;
    /* a compiler that does not know --version still has an identity: its file */
    size_t n = strlen(key) + strlen(out) + 32;
    char *full = malloc(n);
    if (!full) {
        free(out);
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_tile_compile: out of memory");
    }
    snprintf(full, n, "%s\n%d\n%s", key, code, out);
    free(out);
    id_memo *m = malloc(sizeof *m);
    if (m) {
        m->key = strdup(key);
        m->id = strdup(full);
        if (m->key && m->id) {
            pthread_mutex_lock(&g_id_lock);
            m->next = g_ids;
            g_ids = m;
            pthread_mutex_unlock(&g_id_lock);
        } else {
            free(m->key);
            free(m->id);
            free(m);
        }
    }
    *id = full;
    return TS_OK;
}
