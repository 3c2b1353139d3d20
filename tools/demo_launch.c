/* R > 1: this process starts `mpirun --oversubscribe -np R <this binary> demo <args>
 * --rank-mode` as an argument vector (posix_spawn, never a shell, so no argument is
 * re-interpreted) and waits for it. mpirun owns the ranks: when one dies it tears the job down
 * and exits non-zero, which becomes this command's exit code. */
#include "demo.h"

#include <errno.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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

int ts__demo_launch(const ts__demo_opts *o, int argc, char **argv) {
    char mpirun[4096], self[4096];
    if (!ts__demo_find_program("mpirun", mpirun, sizeof mpirun)) {
        fprintf(stderr, "tilestack demo: --ranks %d needs mpirun, which is not on PATH (install "
                "Open MPI, or use --ranks 1)\n", o->ranks);
        return 1;
    }
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        fprintf(stderr, "tilestack demo: cannot find this program's path (/proc/self/exe: %s)\n",
                strerror(errno));
        return 1;
    }
    self[n] = 0;

    char np[16], thr[16];
    snprintf(np, sizeof np, "%d", o->ranks);
    snprintf(thr, sizeof thr, "%d", o->threads);
    const int cores = ts__demo_cores();
    /* mpirun binds each rank to one core by default at small R; a rank running more threads
     * than that would time-share its one core, so let the OS place them instead. */
    const bool unbind = o->threads > 1 || o->ranks > cores;
    char **av = calloc((size_t)argc + 16, sizeof *av);
    if (!av) {
        fprintf(stderr, "tilestack demo: out of memory\n");
        return 1;
    }
    int k = 0;
    av[k++] = mpirun;
    av[k++] = "--oversubscribe";
    if (unbind) av[k++] = "--bind-to", av[k++] = "none";
    av[k++] = "-np";
    av[k++] = np;
    av[k++] = self;
    av[k++] = "demo";
    for (int i = 0; i < argc; i++) av[k++] = argv[i];
    av[k++] = "--threads"; /* resolved here, so every rank uses the same count */
    av[k++] = thr;
    av[k++] = "--rank-mode";
    av[k] = NULL;

    /* Environment: ours, plus Open MPI's opt-in to run as root (containers, CI). */
    size_t ne = 0;
    while (environ[ne]) ne++;
    char **env = calloc(ne + 3, sizeof *env);
    if (!env) {
        free(av);
        fprintf(stderr, "tilestack demo: out of memory\n");
        return 1;
    }
    size_t m = 0;
    for (size_t i = 0; i < ne; i++)
        if (strncmp(environ[i], "OMPI_ALLOW_RUN_AS_ROOT", 22)) env[m++] = environ[i];
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
    pid_t pid;
    const int rc = posix_spawn(&pid, mpirun, NULL, NULL, av, env);
    free(av);
    free(env);
    if (rc != 0) {
        fprintf(stderr, "tilestack demo: cannot start %s: %s\n", mpirun, strerror(rc));
        return 1;
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            fprintf(stderr, "tilestack demo: waiting for mpirun: %s\n", strerror(errno));
            return 1;
        }
    }
    if (WIFEXITED(status)) {
        const int code = WEXITSTATUS(status);
        if (code != 0 && code != 2)
            fprintf(stderr, "tilestack demo: the %d-rank run failed (mpirun exit status %d)\n",
                    o->ranks, code);
        return code == 0 ? 0 : code == 2 ? 2 : 1;
    }
    if (WIFSIGNALED(status))
        fprintf(stderr, "tilestack demo: mpirun was killed by signal %d\n", WTERMSIG(status));
    return 1;
}
