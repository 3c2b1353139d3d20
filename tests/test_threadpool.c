/* Thread pool, static partitioning and scratch arenas. */
#include "ts_test.h"

#include "core/internal.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Restores the thread count a test changed, so test order does not matter. */
typedef struct { int saved; } threads_guard;
static threads_guard threads_save(void) { return (threads_guard){ts_get_num_threads()}; }
static void threads_restore(threads_guard g) { (void)ts_set_num_threads(g.saved); }

/* ---- coverage: every index exactly once, chunks contiguous, grain multiples ---- */

#define MAX_CHUNKS 64

typedef struct {
    int64_t n, grain;
    atomic_uchar *hits;
    int64_t begin[MAX_CHUNKS], end[MAX_CHUNKS];
    atomic_int calls;
    atomic_int bad;
} cover_ctx;

static void cover_fn(void *vctx, int64_t begin, int64_t end, int tid) {
    cover_ctx *c = vctx;
    atomic_fetch_add(&c->calls, 1);
    if (tid < 0 || tid >= MAX_CHUNKS || begin < 0 || end > c->n || begin >= end) {
        atomic_fetch_add(&c->bad, 1);
        return;
    }
    c->begin[tid] = begin;
    c->end[tid] = end;
    for (int64_t i = begin; i < end; i++) atomic_fetch_add(&c->hits[i], 1);
}

/* Runs one parallel_for and checks the partition; fills begin/end for later comparison. */
static void check_cover(ts_test_ctx *ts_t_, int64_t n, int64_t grain, int threads,
                        int64_t *begin_out, int64_t *end_out, int *nchunks_out) {
    TS_CHECK_STATUS(ts_set_num_threads(threads), TS_OK);
    cover_ctx *c = calloc(1, sizeof *c);
    c->n = n;
    c->grain = grain;
    c->hits = calloc((size_t)(n > 0 ? n : 1), 1);
    for (int t = 0; t < MAX_CHUNKS; t++) c->begin[t] = c->end[t] = -1;
    ts__parallel_for(n, grain, cover_fn, c);
    int64_t g = grain < 1 ? 1 : grain;
    int64_t nblocks = n > 0 ? n / g + (n % g != 0) : 0;
    int64_t expect_chunks = nblocks < threads ? nblocks : threads;
    TS_CHECK_MSG(atomic_load(&c->calls) == expect_chunks && atomic_load(&c->bad) == 0,
                 "n=%" PRId64 " grain=%" PRId64 " threads=%d: %d calls (want %" PRId64 "), %d bad",
                 n, grain, threads, atomic_load(&c->calls), expect_chunks, atomic_load(&c->bad));
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; i++) wrong += c->hits[i] != 1;
    TS_CHECK_MSG(wrong == 0, "n=%" PRId64 " grain=%" PRId64 " threads=%d: %" PRId64
                 " indices not covered exactly once", n, grain, threads, wrong);
    /* Chunk t follows chunk t-1; all but the last are whole grains. */
    int64_t pos = 0;
    for (int t = 0; t < expect_chunks && t < MAX_CHUNKS; t++) {
        TS_CHECK_MSG(c->begin[t] == pos, "chunk %d begins at %" PRId64 ", want %" PRId64, t,
                     c->begin[t], pos);
        if (t + 1 < expect_chunks)
            TS_CHECK_MSG((c->end[t] - c->begin[t]) % g == 0,
                         "chunk %d of n=%" PRId64 " grain=%" PRId64 " is not whole grains", t, n, g);
        pos = c->end[t];
    }
    if (begin_out) {
        for (int t = 0; t < MAX_CHUNKS; t++) {
            begin_out[t] = c->begin[t];
            end_out[t] = c->end[t];
        }
        *nchunks_out = (int)expect_chunks;
    }
    free(c->hits);
    free(c);
}

TS_TEST(threadpool_parallel_for_covers_each_index_once) {
    threads_guard g = threads_save();
    static const int64_t ns[] = {0, 1, 2, 3, 5, 7, 8, 63, 64, 65, 100, 1000, 4097, 100003};
    static const int64_t grains[] = {0, 1, 2, 3, 16, 64, 1000, INT64_MAX / 2, INT64_MAX};
    static const int threads[] = {1, 2, 3, 4, 7, 8, 16};
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t b = 0; b < sizeof grains / sizeof grains[0]; b++)
            for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++)
                check_cover(ts_t_, ns[a], grains[b], threads[t], NULL, NULL, NULL);
    threads_restore(g);
}

TS_TEST(threadpool_partition_is_static) {
    threads_guard g = threads_save();
    int64_t b0[MAX_CHUNKS], e0[MAX_CHUNKS], b1[MAX_CHUNKS], e1[MAX_CHUNKS];
    int n0, n1;
    check_cover(ts_t_, 10007, 16, 5, b0, e0, &n0);
    for (int rep = 0; rep < 50; rep++) {
        /* A different configuration in between must not leave state behind. */
        check_cover(ts_t_, 333, 7, 3, NULL, NULL, NULL);
        check_cover(ts_t_, 10007, 16, 5, b1, e1, &n1);
        TS_CHECK_EQ_INT(n0, n1);
        for (int t = 0; t < n0; t++) {
            TS_CHECK_EQ_INT(b0[t], b1[t]);
            TS_CHECK_EQ_INT(e0[t], e1[t]);
        }
    }
    /* Balanced: 10007 / 16 = 626 grains over 5 chunks -> 126,125,125,125,125 grains. */
    TS_CHECK_EQ_INT(e0[0] - b0[0], 126 * 16);
    TS_CHECK_EQ_INT(e0[1] - b0[1], 125 * 16);
    TS_CHECK_EQ_INT(e0[4], 10007);
    threads_restore(g);
}

/* ---- nesting: inner calls run inline on the calling thread with the same ranges ---- */

typedef struct {
    pthread_t owner;
    atomic_int inner_other_thread;
    atomic_long inner_sum;
} inner_ctx;

static void inner_fn(void *vctx, int64_t begin, int64_t end, int tid) {
    inner_ctx *c = vctx;
    (void)tid;
    if (!pthread_equal(c->owner, pthread_self())) atomic_fetch_add(&c->inner_other_thread, 1);
    for (int64_t i = begin; i < end; i++) atomic_fetch_add(&c->inner_sum, (long)i);
}

typedef struct {
    atomic_int bad;
    atomic_long total;
} outer_ctx;

static void outer_fn(void *vctx, int64_t begin, int64_t end, int tid) {
    outer_ctx *o = vctx;
    (void)tid;
    for (int64_t i = begin; i < end; i++) {
        inner_ctx c = {.owner = pthread_self()};
        atomic_init(&c.inner_other_thread, 0);
        atomic_init(&c.inner_sum, 0);
        ts__parallel_for(100, 1, inner_fn, &c);
        if (atomic_load(&c.inner_other_thread)) atomic_fetch_add(&o->bad, 1);
        atomic_fetch_add(&o->total, atomic_load(&c.inner_sum));
    }
}

TS_TEST(threadpool_nested_runs_inline) {
    threads_guard g = threads_save();
    TS_CHECK_STATUS(ts_set_num_threads(4), TS_OK);
    outer_ctx o;
    atomic_init(&o.bad, 0);
    atomic_init(&o.total, 0);
    ts__parallel_for(16, 1, outer_fn, &o);
    TS_CHECK_EQ_INT(atomic_load(&o.bad), 0);
    TS_CHECK_EQ_INT(atomic_load(&o.total), 16L * (99 * 100 / 2));
    threads_restore(g);
}

/* ---- parallel_run ---- */

typedef struct {
    atomic_int seen[64];
    atomic_int bad_n;
    int want_n;
} run_ctx;

static void run_fn(void *vctx, int tid, int nthreads) {
    run_ctx *c = vctx;
    if (nthreads != c->want_n || tid < 0 || tid >= 64) {
        atomic_fetch_add(&c->bad_n, 1);
        return;
    }
    atomic_fetch_add(&c->seen[tid], 1);
}

TS_TEST(threadpool_parallel_run_each_tid_once) {
    threads_guard g = threads_save();
    static const int pool[] = {1, 2, 4, 8};
    static const int req[] = {1, 2, 3, 4, 8, 13, 64};
    for (size_t a = 0; a < 4; a++)
        for (size_t b = 0; b < sizeof req / sizeof req[0]; b++) {
            TS_CHECK_STATUS(ts_set_num_threads(pool[a]), TS_OK);
            run_ctx *c = calloc(1, sizeof *c);
            c->want_n = req[b];
            ts__parallel_run(req[b], run_fn, c);
            TS_CHECK_EQ_INT(atomic_load(&c->bad_n), 0);
            for (int t = 0; t < req[b]; t++)
                TS_CHECK_MSG(atomic_load(&c->seen[t]) == 1, "pool %d req %d: tid %d ran %d times",
                             pool[a], req[b], t, atomic_load(&c->seen[t]));
            free(c);
        }
    ts__parallel_run(0, run_fn, NULL); /* nothing to run: must not call fn */
    threads_restore(g);
}

/* ---- thread count API ---- */

TS_TEST(threadpool_set_get_threads) {
    threads_guard g = threads_save();
    TS_CHECK(g.saved >= 1);
    TS_CHECK_STATUS(ts_set_num_threads(3), TS_OK);
    TS_CHECK_EQ_INT(ts_get_num_threads(), 3);
    TS_CHECK_STATUS(ts_set_num_threads(1), TS_OK);
    TS_CHECK_EQ_INT(ts_get_num_threads(), 1);
    TS_CHECK_STATUS(ts_set_num_threads(0), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "ts_set_num_threads") != NULL);
    TS_CHECK_STATUS(ts_set_num_threads(-5), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_set_num_threads(1 << 20), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_set_num_threads(INT32_MIN), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_EQ_INT(ts_get_num_threads(), 1); /* failures leave the setting alone */
    threads_restore(g);
    TS_CHECK_EQ_INT(ts_get_num_threads(), g.saved);
}

/* ---- scratch ---- */

typedef struct {
    void *first[64], *again[64], *small[64];
    atomic_int bad;
} scratch_ctx;

static void scratch_task(void *vctx, int tid, int nthreads) {
    scratch_ctx *c = vctx;
    (void)nthreads;
    unsigned char *p = ts__scratch(tid, 1000);
    if (!p || ((uintptr_t)p & 63) != 0) atomic_fetch_add(&c->bad, 1);
    if (p) memset(p, tid, 1000); /* ASan catches a short arena */
    c->first[tid] = p;
}

static void scratch_task_again(void *vctx, int tid, int nthreads) {
    scratch_ctx *c = vctx;
    (void)nthreads;
    c->again[tid] = ts__scratch(tid, 1000);
    c->small[tid] = ts__scratch(tid, 10);
}

TS_TEST(threadpool_scratch_aligned_grows_and_reuses) {
    threads_guard g = threads_save();
    /* Serial code: level-0 arena. */
    unsigned char *a = ts__scratch(0, 100);
    TS_CHECK(a != NULL && ((uintptr_t)a & 63) == 0);
    TS_CHECK(ts__scratch(0, 50) == a);  /* no reallocation for a smaller request */
    TS_CHECK(ts__scratch(0, 100) == a);
    unsigned char *b = ts__scratch(0, (size_t)3 << 20);
    TS_CHECK(b != NULL && ((uintptr_t)b & 63) == 0);
    if (b) memset(b, 1, (size_t)3 << 20);
    TS_CHECK(ts__scratch(0, 1) == b);  /* stays grown */
    TS_CHECK(ts__scratch(0, 0) == b);

    /* Tasks: one arena per running thread, distinct from the driver's level-0 arena. */
    TS_CHECK_STATUS(ts_set_num_threads(4), TS_OK);
    scratch_ctx *c = calloc(1, sizeof *c);
    ts__parallel_run(4, scratch_task, c);
    ts__parallel_run(4, scratch_task_again, c);
    TS_CHECK_EQ_INT(atomic_load(&c->bad), 0);
    for (int t = 0; t < 4; t++) {
        TS_CHECK(c->first[t] != (void *)b);
        TS_CHECK(c->again[t] == c->first[t]); /* warm: no allocation */
        TS_CHECK(c->small[t] == c->first[t]);
        for (int u = 0; u < t; u++) TS_CHECK(c->first[t] != c->first[u]);
    }
    TS_CHECK(ts__scratch(0, 1) == b); /* the driver's scratch survived its tasks */
    free(c);
    threads_restore(g);
}

TS_TEST(threadpool_aligned_alloc) {
    static const size_t sizes[] = {0, 1, 63, 64, 65, 4096, (size_t)9 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        unsigned char *p = ts__aligned_alloc(sizes[i]);
        TS_CHECK(p != NULL && ((uintptr_t)p & 63) == 0);
        if (p && sizes[i]) {
            p[0] = 1;
            p[sizes[i] - 1] = 2;
        }
        ts__aligned_free(p);
    }
    ts__aligned_free(NULL);
    TS_CHECK(ts__aligned_alloc(SIZE_MAX) == NULL);
}

/* ---- stress and oversubscription ---- */

static void sum_fn(void *vctx, int64_t begin, int64_t end, int tid) {
    atomic_long *s = vctx;
    (void)tid;
    long acc = 0;
    for (int64_t i = begin; i < end; i++) acc += (long)i;
    atomic_fetch_add(s, acc);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Many tiny fork-joins, at each thread count including more threads than cores. The bound is
 * a hang guard (two minutes for what takes milliseconds; a loaded 2-core host once took
 * over 20 s at 8 threads), not a timing assertion. */
TS_TEST(threadpool_stress_tiny_calls) {
    threads_guard g = threads_save();
    static const int threads[] = {2, 3, 8};
    for (size_t k = 0; k < 3; k++) {
        TS_CHECK_STATUS(ts_set_num_threads(threads[k]), TS_OK);
        double t0 = now_s();
        long bad = 0;
        int iters = 5000;
        for (int it = 0; it < iters; it++) {
            atomic_long s;
            atomic_init(&s, 0);
            int64_t n = 1 + it % 37;
            ts__parallel_for(n, 1, sum_fn, &s);
            bad += atomic_load(&s) != n * (n - 1) / 2;
        }
        double dt = now_s() - t0;
        TS_CHECK_EQ_INT(bad, 0);
        TS_CHECK_MSG(dt < 120.0, "%d threads: %d tiny calls took %.2f s", threads[k], iters, dt);
        printf("    %d threads: %.1f us per tiny parallel_for\n", threads[k], dt / iters * 1e6);
    }
    threads_restore(g);
}

/* Two user threads using the pool at once: each must get correct, complete results. */
typedef struct {
    int iters;
    long bad;
} user_thread_arg;

static void *user_thread(void *varg) {
    user_thread_arg *a = varg;
    for (int it = 0; it < a->iters; it++) {
        atomic_long s;
        atomic_init(&s, 0);
        int64_t n = 100 + it % 50;
        ts__parallel_for(n, 3, sum_fn, &s);
        a->bad += atomic_load(&s) != n * (n - 1) / 2;
        void *p = ts__scratch(0, 256 + (size_t)(it % 3) * 4096);
        if (!p) a->bad++;
    }
    return NULL;
}

TS_TEST(threadpool_concurrent_user_threads) {
    threads_guard g = threads_save();
    TS_CHECK_STATUS(ts_set_num_threads(3), TS_OK);
    pthread_t th[3];
    user_thread_arg args[3] = {{2000, 0}, {2000, 0}, {2000, 0}};
    for (int i = 0; i < 3; i++) TS_CHECK(pthread_create(&th[i], NULL, user_thread, &args[i]) == 0);
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 3; i++) TS_CHECK_EQ_INT(args[i].bad, 0);
    threads_restore(g);
}

/* Resizing between calls, including from 8 threads down to 1 and back. */
TS_TEST(threadpool_resize_between_calls) {
    threads_guard g = threads_save();
    static const int seq[] = {8, 1, 4, 2, 8, 3, 1, 5};
    for (int rep = 0; rep < 4; rep++)
        for (size_t k = 0; k < sizeof seq / sizeof seq[0]; k++)
            check_cover(ts_t_, 1000, 1, seq[k], NULL, NULL, NULL);
    threads_restore(g);
}

/* fork() in a process that has a live pool: the child gets a working pool of its own. */
TS_TEST(threadpool_fork_child_has_working_pool) {
    threads_guard g = threads_save();
    TS_CHECK_STATUS(ts_set_num_threads(3), TS_OK);
    atomic_long s;
    atomic_init(&s, 0);
    ts__parallel_for(1000, 1, sum_fn, &s); /* pool is live */
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        atomic_long s2;
        atomic_init(&s2, 0);
        ts__parallel_for(1000, 1, sum_fn, &s2);
        _exit(atomic_load(&s2) == 999L * 1000 / 2 ? 0 : 1);
    }
    TS_CHECK(pid > 0);
    int st = 0;
    if (pid > 0) {
        /* Bounded wait so a deadlocked child fails the test instead of hanging the suite. */
        int done = 0;
        for (int i = 0; i < 1000 && !done; i++) {
            if (waitpid(pid, &st, WNOHANG) == pid) done = 1;
            else usleep(10000);
        }
        if (!done) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
        }
        TS_CHECK_MSG(done && WIFEXITED(st) && WEXITSTATUS(st) == 0, "child failed or hung");
    }
    threads_restore(g);
}
