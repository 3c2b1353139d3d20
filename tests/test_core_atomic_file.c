/* Atomic output files (src/core/atomic_file.c): a committed write replaces the file whole, a
 * failed or aborted one leaves the previous file as it was and no temporary behind. */
#include "ts_test.h"

#include "core/atomic_file.h"

#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static void write_text(const char *path, const char *s) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs(s, f);
        fclose(f);
    }
}

static int read_text(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = 0;
    fclose(f);
    return (int)n;
}

/* Entries of `dir` besides . and .. */
static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    char p[512];
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

TS_TEST(atomic_file_commit_abort_and_failed_write) {
    char dir[] = "/tmp/ts_atomic_XXXXXX";
    TS_CHECK(mkdtemp(dir) != NULL);
    char path[256], buf[256];
    snprintf(path, sizeof path, "%s/out.bin", dir);
    write_text(path, "old contents");

    ts__atomic_file af;
    TS_CHECK_STATUS(ts__atomic_open(&af, path), TS_OK);
    fputs("new", af.f);
    /* Before the commit the destination still reads the old bytes. */
    TS_CHECK(read_text(path, buf, sizeof buf) > 0 && !strcmp(buf, "old contents"));
    TS_CHECK_STATUS(ts__atomic_commit(&af), TS_OK);
    TS_CHECK(read_text(path, buf, sizeof buf) == 3 && !strcmp(buf, "new"));
    TS_CHECK_EQ_INT(count_entries(dir), 1);

    TS_CHECK_STATUS(ts__atomic_open(&af, path), TS_OK);
    fputs("partial", af.f);
    ts__atomic_abort(&af);
    TS_CHECK(read_text(path, buf, sizeof buf) == 3 && !strcmp(buf, "new"));
    TS_CHECK_EQ_INT(count_entries(dir), 1);

    /* A write that fails half way (here: the file size limit, as `ulimit -f`) is reported
     * and does not touch the previous file. */
    struct rlimit old;
    getrlimit(RLIMIT_FSIZE, &old);
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = old;
    lim.rlim_cur = 4096;
    if (setrlimit(RLIMIT_FSIZE, &lim) == 0) {
        TS_CHECK_STATUS(ts__atomic_open(&af, path), TS_OK);
        static char big[65536];
        memset(big, 'x', sizeof big);
        fwrite(big, 1, sizeof big, af.f);
        TS_CHECK_STATUS(ts__atomic_commit(&af), TS_ERR_IO);
        TS_CHECK(strstr(ts_last_error(), path) != NULL);
        setrlimit(RLIMIT_FSIZE, &old);
        TS_CHECK(read_text(path, buf, sizeof buf) == 3 && !strcmp(buf, "new"));
        TS_CHECK_EQ_INT(count_entries(dir), 1);
    }
    signal(SIGXFSZ, prev);

    /* Bad destinations are named before anything is written. */
    TS_CHECK_STATUS(ts__atomic_open(&af, dir), TS_ERR_IO);
    TS_CHECK(strstr(ts_last_error(), "directory") != NULL);
    TS_CHECK_STATUS(ts__atomic_open(&af, "/nonexistent-dir-ts/x.json"), TS_ERR_IO);
    TS_CHECK_STATUS(ts__check_output_path("/nonexistent-dir-ts/x.json"), TS_ERR_IO);
    TS_CHECK(strstr(ts_last_error(), "/nonexistent-dir-ts") != NULL);
    TS_CHECK_STATUS(ts__check_output_path(dir), TS_ERR_IO);
    TS_CHECK_STATUS(ts__check_output_path(path), TS_OK);
    TS_CHECK_STATUS(ts__atomic_open(&af, ""), TS_ERR_INVALID_ARGUMENT);

    /* The same file under another name (a link) is recognised. */
    char link_path[256];
    snprintf(link_path, sizeof link_path, "%s/link.bin", dir);
    TS_CHECK(symlink(path, link_path) == 0);
    TS_CHECK(ts__same_file(path, link_path));
    TS_CHECK(!ts__same_file(path, dir));
    TS_CHECK(!ts__same_file(path, "/nonexistent-dir-ts/x"));
    remove_tree(dir);
}
