/* R > 1: this process starts `mpirun --oversubscribe -np R <this binary> CMD <args> <token>`
 * (CMD: demo, generate or chat) as an argument vector (fork + exec, never a shell, so no
 * argument is re-interpreted) and waits for it. mpirun owns the ranks: when one dies it tears
 * the job down and exits non-zero, which becomes this command's exit code.
 *
 * No orphans: mpirun is this process's child in its own process group, with PR_SET_PDEATHSIG
 * set to SIGTERM (posix_spawn cannot set it), so if this process is killed, even by SIGKILL,
 * mpirun gets SIGTERM and does its own orderly teardown (ranks killed, its /dev/shm segments
 * removed). SIGTERM / SIGINT / SIGHUP sent to this process are forwarded to mpirun once (its
 * own process group keeps a terminal's Ctrl-C from reaching it twice, which Open MPI takes as
 * "terminate now, skip the cleanup"); this process then dies of the same signal.
 *
 * Rank mode is internal: a per-run random token goes both into the ranks' environment and as
 * their last argument. Only a process holding both is a rank; a user's --rank-mode is an
 * unknown option.
 *
 * stdin: mpirun runs in a background process group, which must not read the terminal (SIGTTIN
 * would stop it), so its stdin is /dev/null, or, for `chat`, a pipe this process fills from
 * its own stdin (a thread copying until end of input); mpirun forwards it to rank 0. */
#include "demo.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

extern char **environ;

int ts__demo_cores(void) {
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

bool ts__demo_find_program(const char *name, char *path, size_t cap) {
    const char *env = getenv("PATH");
    if (!env || !*env) env = "/usr/local/bin:/usr/bin:/bin";
    const char *p = env;
    while (*p) {
        const char *colon = strchr(p, ':');
        const size_t len = colon ? (size_t)(colon - p) : strlen(p);
        if (len > 0 && len + strlen(name) + 2 <= cap) {
            memcpy(path, p, len);
            path[len] = '/';
            strcpy(path + len + 1, name);
            struct stat sb;
            if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && access(path, X_OK) == 0)
                return true;
        }
        if (!colon) break;
        p = colon + 1;
    }
    return false;
}

#define TS__DEMO_RANK_ENV "TILESTACK_DEMO_RANK_TOKEN"

/* 32 hex digits from /dev/urandom (clock and pid if it cannot be read: the token only has
 * to be unguessable by accident, it guards no secret). */
static void make_token(char *out, size_t cap) {
    unsigned char b[16];
    const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    const bool ok = fd >= 0 && read(fd, b, sizeof b) == (ssize_t)sizeof b;
    if (fd >= 0) close(fd);
    if (!ok) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        unsigned long long x = (unsigned long long)ts.tv_nsec * 6364136223846793005ull ^
                               (unsigned long long)ts.tv_sec ^ ((unsigned long long)getpid() << 32);
        for (size_t i = 0; i < sizeof b; i++, x = x * 6364136223846793005ull + 1442695040888963407ull)
            b[i] = (unsigned char)(x >> 56);
    }
    snprintf(out, cap, "rank-");
    for (size_t i = 0; i < sizeof b && strlen(out) + 3 <= cap; i++)
        snprintf(out + strlen(out), cap - strlen(out), "%02x", b[i]);
}

bool ts__demo_take_rank_token(int *argc, char **argv) {
    const char *want = getenv(TS__DEMO_RANK_ENV);
    if (!want || strlen(want) < 16 || *argc < 1 || strcmp(argv[*argc - 1], want) != 0) return false;
    (*argc)--;
#ifdef __linux__
    /* Open MPI's ranks end by themselves when mpirun dies, unless they are stopped: SIGKILL
     * also reaches a stopped one. (If mpirun died before this line, MPI_Init fails.) */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
    return true;
}

static volatile sig_atomic_t g_child, g_signal;
/* serve drains on SIGTERM / SIGINT: they reach its ranks as SIGUSR1, which mpirun forwards
 * without tearing the job down (it kills the job on SIGTERM itself) */
static int g_drain_signal;

static void forward(int sig) {
    g_signal = sig;
    if (g_child > 0) kill(g_child, g_drain_signal && sig != SIGHUP ? g_drain_signal : sig);
}

static const int g_forwarded[] = {SIGTERM, SIGINT, SIGHUP};

/* Child side, between fork and exec: only async-signal-safe calls. mpirun gets the
 * dispositions this process was started with (an ignored SIGHUP under nohup stays ignored). */
static void exec_mpirun(const char *mpirun, char **av, char **env, pid_t parent, const sigset_t *old,
                        const struct sigaction *old_sa, int in_fd) {
    for (size_t i = 0; i < sizeof g_forwarded / sizeof *g_forwarded; i++) sigaction(g_forwarded[i], &old_sa[i], NULL);
    setpgid(0, 0);
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGTERM);
#endif
    if (getppid() != parent) _exit(127); /* the launcher died before the line above */
    /* a background process group must not read the terminal (SIGTTIN would stop mpirun):
     * /dev/null, or the pipe the launcher fills */
    const int fd = in_fd >= 0 ? in_fd : open("/dev/null", O_RDONLY);
    if (fd >= 0 && fd != STDIN_FILENO) dup2(fd, STDIN_FILENO), close(fd);
    sigprocmask(SIG_SETMASK, old, NULL);
    execve(mpirun, av, env);
    static const char msg[] = "tilestack: cannot start mpirun (execve failed)\n";
    if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0) { /* nothing else to do */ }
    _exit(127);
}

/* Waits for mpirun. After a forwarded signal mpirun gets 20 s to tear the job down (serve's
 * drain: 150 s), then SIGKILL (a stuck teardown must not keep this process alive forever). */
static int wait_mpirun(pid_t pid, int *status) {
    double signalled_at = -1;
    for (;;) {
        const pid_t w = waitpid(pid, status, g_signal ? WNOHANG : 0);
        if (w == pid) return 0;
        if (w < 0 && errno != EINTR) return -1;
        if (g_signal) {
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            const double t = (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
            if (signalled_at < 0) signalled_at = t;
            else if (t - signalled_at > (g_drain_signal ? 150 : 20)) kill(pid, SIGKILL);
            struct timespec ts = {0, 50 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
}

/* The chat's stdin into mpirun's: copied until end of input (or until mpirun stops reading),
 * then the pipe is closed, which mpirun passes on to rank 0 as end of input. */
static void *copy_stdin(void *arg) {
    const int out = (int)(intptr_t)arg;
    char buf[4096];
    for (;;) {
        const ssize_t got = read(STDIN_FILENO, buf, sizeof buf);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        for (ssize_t done = 0; done < got;) {
            const ssize_t w = write(out, buf + done, (size_t)(got - done));
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) goto end;
            done += w;
        }
    }
end:
    close(out);
    return NULL;
}

int ts__demo_launch(const ts__demo_opts *o, int argc, char **argv) {
    return ts__launch_ranks("demo", o->ranks, o->threads, false, argc, argv);
}

int ts__launch_ranks(const char *cmd, int ranks, int threads, bool pass_stdin, int argc, char **argv) {
    g_drain_signal = !strcmp(cmd, "serve") ? SIGUSR1 : 0;
    char mpirun[4096], self[4096];
    if (!ts__demo_find_program("mpirun", mpirun, sizeof mpirun)) {
        fprintf(stderr, "tilestack %s: --ranks %d needs mpirun, which is not on PATH (install "
                "Open MPI, or use --ranks 1)\n", cmd, ranks);
        return 1;
    }
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        fprintf(stderr, "tilestack %s: cannot find this program's path (/proc/self/exe: %s)\n",
                cmd, strerror(errno));
        return 1;
    }
    self[n] = 0;

    char np[16], thr[16];
    snprintf(np, sizeof np, "%d", ranks);
    snprintf(thr, sizeof thr, "%d", threads);
    const int cores = ts__demo_cores();
    /* mpirun binds each rank to one core by default at small R; a rank running more threads
     * than that would time-share its one core, so let the OS place them instead. */
    const bool unbind = threads > 1 || ranks > cores;
    char **av = calloc((size_t)argc + 16, sizeof *av);
    if (!av) {
        fprintf(stderr, "tilestack %s: out of memory\n", cmd);
        return 1;
    }
    int k = 0;
    av[k++] = mpirun;
    av[k++] = "--oversubscribe";
    if (unbind) av[k++] = "--bind-to", av[k++] = "none";
    av[k++] = "-x"; /* the token reaches ranks on other nodes too */
    av[k++] = TS__DEMO_RANK_ENV;
    av[k++] = "-np";
    av[k++] = np;
    av[k++] = self;
    av[k++] = (char *)cmd;
    for (int i = 0; i < argc; i++) av[k++] = argv[i];
    av[k++] = "--threads"; /* resolved here, so every rank uses the same count */
    av[k++] = thr;
    char token[64], token_env[96];
    make_token(token, sizeof token);
    snprintf(token_env, sizeof token_env, "%s=%s", TS__DEMO_RANK_ENV, token);
    av[k++] = token; /* last: ts__demo_take_rank_token looks there */
    av[k] = NULL;

    /* Environment: ours, plus Open MPI's opt-in to run as root (containers, CI). */
    size_t ne = 0;
    while (environ[ne]) ne++;
    char **env = calloc(ne + 5, sizeof *env);
    if (!env) {
        free(av);
        fprintf(stderr, "tilestack %s: out of memory\n", cmd);
        return 1;
    }
    size_t m = 0;
    for (size_t i = 0; i < ne; i++)
        if (strncmp(environ[i], "OMPI_ALLOW_RUN_AS_ROOT", 22) &&
            strncmp(environ[i], TS__DEMO_RANK_ENV "=", sizeof TS__DEMO_RANK_ENV) &&
            strncmp(environ[i], TS__RANKS_TTY_ENV "=", sizeof TS__RANKS_TTY_ENV))
            env[m++] = environ[i];
    env[m++] = token_env;
    /* what the ranks cannot see for themselves: whether this process's stdin / stdout are a
     * terminal (chat's prompt, the escaping of control characters; docs/models.md) */
    char tty_env[64];
    snprintf(tty_env, sizeof tty_env, "%s=%d%d", TS__RANKS_TTY_ENV, isatty(STDIN_FILENO) == 1,
             isatty(STDOUT_FILENO) == 1);
    env[m++] = tty_env;
    if (geteuid() == 0) {
        env[m++] = "OMPI_ALLOW_RUN_AS_ROOT=1";
        env[m++] = "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1";
    } else {
        for (size_t i = 0; i < ne; i++)
            if (!strncmp(environ[i], "OMPI_ALLOW_RUN_AS_ROOT", 22)) env[m++] = environ[i];
    }
    env[m] = NULL;

    fflush(stdout);
    fflush(stderr);
    /* Signals are blocked across fork so that one arriving now is forwarded once the child's
     * pid is known (and never runs the handler in the child before exec). */
    sigset_t block, old_mask;
    sigemptyset(&block);
    for (size_t i = 0; i < sizeof g_forwarded / sizeof *g_forwarded; i++) sigaddset(&block, g_forwarded[i]);
    sigprocmask(SIG_BLOCK, &block, &old_mask);
    struct sigaction sa, old_sa[3];
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = forward; /* no SA_RESTART: waitpid returns EINTR */
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < 3; i++) {
        sigaction(g_forwarded[i], NULL, &old_sa[i]);
        if (old_sa[i].sa_handler != SIG_IGN) sigaction(g_forwarded[i], &sa, NULL); /* ignored stays so */
    }
    int pipe_fd[2] = {-1, -1};
    if (pass_stdin && pipe(pipe_fd) != 0) pipe_fd[0] = pipe_fd[1] = -1;
    if (pipe_fd[1] >= 0) fcntl(pipe_fd[1], F_SETFD, FD_CLOEXEC); /* mpirun must not hold it open */
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid == 0) exec_mpirun(mpirun, av, env, parent, &old_mask, old_sa, pipe_fd[0]);
    const int fork_errno = errno;
    free(av);
    free(env);
    if (pipe_fd[0] >= 0) close(pipe_fd[0]);
    if (pid > 0 && pipe_fd[1] >= 0) {
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        /* signals stay with the main thread, which forwards them */
        sigset_t all, prev;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &prev);
        if (pthread_create(&th, &at, copy_stdin, (void *)(intptr_t)pipe_fd[1]) != 0) close(pipe_fd[1]);
        pthread_sigmask(SIG_SETMASK, &prev, NULL);
        pthread_attr_destroy(&at);
    } else if (pipe_fd[1] >= 0) {
        close(pipe_fd[1]);
    }
    if (pid > 0) {
        setpgid(pid, pid); /* as the child does: whichever runs first */
        g_child = pid;
    }
    sigprocmask(SIG_SETMASK, &old_mask, NULL);
    if (pid < 0) {
        for (size_t i = 0; i < 3; i++) sigaction(g_forwarded[i], &old_sa[i], NULL);
        fprintf(stderr, "tilestack %s: cannot start %s: %s\n", cmd, mpirun, strerror(fork_errno));
        return 1;
    }
    int status = 0;
    const int wrc = wait_mpirun(pid, &status);
    g_child = 0;
    for (size_t i = 0; i < 3; i++) sigaction(g_forwarded[i], &old_sa[i], NULL);
    if (wrc != 0) {
        fprintf(stderr, "tilestack %s: waiting for mpirun: %s\n", cmd, strerror(errno));
        return 1;
    }
    if (g_signal && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        /* ended from outside: end as the signal would have ended this process (unless the
         * ranks handled it and finished cleanly, as serve's drain does) */
        fprintf(stderr, "tilestack %s: ended by signal %d (forwarded to mpirun)\n", cmd, (int)g_signal);
        signal(g_signal, SIG_DFL);
        raise(g_signal);
        return 1;
    }
    if (WIFEXITED(status)) {
        const int code = WEXITSTATUS(status);
        if (code != 0 && code != 2)
            fprintf(stderr, "tilestack %s: the %d-rank run failed (mpirun exit status %d)\n",
                    cmd, ranks, code);
        return code == 0 ? 0 : code == 2 ? 2 : 1;
    }
    if (WIFSIGNALED(status))
        fprintf(stderr, "tilestack %s: mpirun was killed by signal %d\n", cmd, WTERMSIG(status));
    return 1;
}
