/* Persistent fork-join thread pool.
 *
 * One pool per process, created lazily by the first parallel call and resized (between
 * calls) when ts_set_num_threads changes the count. The calling thread takes part as tid 0;
 * workers are tids 1..P-1. A fork-join publishes one job by bumping a generation word, runs
 * chunk 0 itself, then waits until every participating worker has acknowledged.
 *
 * Waiting is spin-then-block on Linux futexes: a short bounded spin keeps back-to-back calls
 * cheap on an idle machine, and blocking keeps oversubscribed runs (several MPI ranks per
 * node, or more threads than cores) from burning the cores the other threads need.
 *
 * Partitioning is static: chunk t covers the same range for the same (n, grain, count) no
 * matter which thread runs it, when, or whether it ran inline, so results cannot depend on
 * scheduling. Chunk t is not always run by the thread with that index (nested calls, a busy
 * pool, or fewer workers than chunks run several chunks on one thread), so tasks must never
 * wait for one another. */
#include "core/internal.h"
#include "core/pool.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

/* Far above any real core count; bounds the static worker table and catches garbage. */
#define TS__MAX_THREADS 1024
/* Bits of the generation word that carry the number of workers taking part in a job. */
#define GEN_ACTIVE_BITS 11
#define GEN_ACTIVE_MASK ((1u << GEN_ACTIVE_BITS) - 1u)
/* Bounded wait before blocking: about 2000 pauses (a few to a few tens of microseconds,
 * depending on the core's pause latency), then a few sched_yield rounds, which hand the core
 * to a runnable thread if there is one and otherwise return at once. */
#define SPIN_ITERS 2000
#define YIELD_ITERS 16
/* When threads outnumber cores a pause-spinning thread holds the core its partner needs, and
 * a futex round trip costs tens of microseconds (more under a hypervisor); yielding lets the
 * partner run and still catches the next job without a wake-up. Measured on 2 vCPUs (KVM),
 * tiny fork-join with 3 / 8 threads: ~50 / ~75 us blocking at once, ~5 / ~12 us this way. */
#define SPIN_ITERS_OVERSUBSCRIBED 20
#define YIELD_ITERS_OVERSUBSCRIBED 64

_Thread_local int ts__tls_depth;
_Thread_local int ts__tls_tid;
static _Thread_local int tls_is_worker;

typedef struct job {
    ts__range_fn range_fn; /* parallel_for job when non-NULL, else task_fn */
    ts__task_fn task_fn;
    void *ctx;
    int64_t n, grain, nblocks;
    int nchunks;
    int stride; /* number of threads taking part: thread p runs chunks p, p+stride, ... */
} job;

typedef struct worker_arg {
    int tid;
    unsigned start_gen;
} worker_arg;

static struct {
    pthread_mutex_t mu; /* one fork-join at a time; guards resizing and the job */
    pthread_t threads[TS__MAX_THREADS];
    worker_arg args[TS__MAX_THREADS];
    int nworkers;       /* workers alive */
    int sized_for;      /* thread count the pool was last sized for (-1: never) */
    int spin;
    int yields;
    job job;
    atomic_uint gen;     /* (sequence << GEN_ACTIVE_BITS) | active workers; futex word */
    atomic_uint pending; /* participating workers not yet done; futex word */
    atomic_int sleepers; /* workers blocked, or about to block, on gen */
    atomic_int caller_sleeping;
    atomic_int stop;
} g_pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .sized_for = -1};

static atomic_int g_num_threads; /* 0 until resolved */
static pthread_once_t g_threads_once = PTHREAD_ONCE_INIT;
static pthread_once_t g_pool_once = PTHREAD_ONCE_INIT;
static int g_fork_locked;

#if !defined(__linux__)
static pthread_mutex_t g_wait_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_wait_cv = PTHREAD_COND_INITIALIZER;
#endif

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

/* Block while *addr == val (may return spuriously). */
static void wait_on(atomic_uint *addr, unsigned val) {
#if defined(__linux__)
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
#else
    pthread_mutex_lock(&g_wait_mu);
    if (atomic_load(addr) == val) pthread_cond_wait(&g_wait_cv, &g_wait_mu);
    pthread_mutex_unlock(&g_wait_mu);
#endif
}

static void wake_all(atomic_uint *addr) {
#if defined(__linux__)
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
    (void)addr;
    pthread_mutex_lock(&g_wait_mu);
    pthread_cond_broadcast(&g_wait_cv);
    pthread_mutex_unlock(&g_wait_mu);
#endif
}

/* ---- thread count ---- */

static int available_cpus(void) {
#if defined(__linux__) && defined(CPU_COUNT)
    /* Respect an affinity mask (taskset, mpirun --bind-to): it is what this process owns. */
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int c = CPU_COUNT(&set);
        if (c > 0) return c;
    }
#endif
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    if (c < 1) return 1;
    return c > TS__MAX_THREADS ? TS__MAX_THREADS : (int)c;
}

static void resolve_num_threads(void) {
    int n = available_cpus();
    const char *env = getenv("TS_NUM_THREADS");
    if (env && *env) {
        char *end = NULL;
        long v = strtol(env, &end, 10);
        if (end && *end == '\0' && v >= 1 && v <= TS__MAX_THREADS)
            n = (int)v;
        else
            fprintf(stderr,
                    "tilestack: ignoring TS_NUM_THREADS=\"%s\" (want an integer in [1, %d]); "
                    "using %d\n",
                    env, TS__MAX_THREADS, n);
    }
    atomic_store(&g_num_threads, n);
}

int ts_get_num_threads(void) {
    int n = atomic_load_explicit(&g_num_threads, memory_order_relaxed);
    if (n > 0) return n;
    pthread_once(&g_threads_once, resolve_num_threads);
    return atomic_load(&g_num_threads);
}

ts_status ts_set_num_threads(int n) {
    if (n < 1 || n > TS__MAX_THREADS)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_set_num_threads: n = %d is not in [1, %d]", n,
                        TS__MAX_THREADS);
    /* Resolve first so a later lazy resolution cannot overwrite this value. */
    pthread_once(&g_threads_once, resolve_num_threads);
    /* Takes effect at the next top-level parallel call; a running job keeps its workers. */
    atomic_store(&g_num_threads, n);
    return TS_OK;
}

/* ---- running chunks ---- */

static void run_chunk(const job *j, int t) {
    int saved_tid = ts__tls_tid;
    ts__tls_tid = t;
    ts__tls_depth++;
    if (j->range_fn) {
        /* Balanced split of whole grains: the first (nblocks % nchunks) chunks get one more. */
        int64_t base = j->nblocks / j->nchunks, rem = j->nblocks % j->nchunks;
        int64_t b0 = t * base + (t < rem ? t : rem);
        int64_t b1 = b0 + base + (t < rem ? 1 : 0);
        int64_t begin = b0 * j->grain;
        int64_t end = b1 >= j->nblocks ? j->n : b1 * j->grain;
        j->range_fn(j->ctx, begin, end, t);
    } else {
        j->task_fn(j->ctx, t, j->nchunks);
    }
    ts__tls_depth--;
    ts__tls_tid = saved_tid;
}

static void run_inline(const job *j) {
    for (int t = 0; t < j->nchunks; t++) run_chunk(j, t);
}

static unsigned wait_new_gen(unsigned seen) {
    int spin = g_pool.spin;
    for (int i = 0; i < spin; i++) {
        unsigned g = atomic_load_explicit(&g_pool.gen, memory_order_acquire);
        if (g != seen) return g;
        cpu_relax();
    }
    for (int i = 0; i < g_pool.yields; i++) {
        unsigned g = atomic_load_explicit(&g_pool.gen, memory_order_acquire);
        if (g != seen) return g;
        sched_yield();
    }
    for (;;) {
        /* Dekker pairing with publish(): either the publisher sees sleepers > 0 and wakes us,
         * or we see its new generation here (both sides are seq_cst). */
        atomic_fetch_add(&g_pool.sleepers, 1);
        if (atomic_load(&g_pool.gen) == seen) wait_on(&g_pool.gen, seen);
        atomic_fetch_sub(&g_pool.sleepers, 1);
        unsigned g = atomic_load_explicit(&g_pool.gen, memory_order_acquire);
        if (g != seen) return g;
    }
}

static void *worker_main(void *argp) {
    const worker_arg *arg = argp;
    int tid = arg->tid;
    unsigned seen = arg->start_gen;
    tls_is_worker = 1;
    for (;;) {
        seen = wait_new_gen(seen);
        if (atomic_load_explicit(&g_pool.stop, memory_order_acquire)) break;
        if ((unsigned)tid > (seen & GEN_ACTIVE_MASK)) continue; /* not needed for this job */
        const job *j = &g_pool.job;
        for (int t = tid; t < j->nchunks; t += j->stride) run_chunk(j, t);
        /* Past this decrement the job may be replaced: touch nothing of it. */
        if (atomic_fetch_sub(&g_pool.pending, 1) == 1 && atomic_load(&g_pool.caller_sleeping))
            wake_all(&g_pool.pending);
    }
    return NULL;
}

static void publish(int active) {
    unsigned g = atomic_load_explicit(&g_pool.gen, memory_order_relaxed);
    unsigned next = (((g >> GEN_ACTIVE_BITS) + 1u) << GEN_ACTIVE_BITS) | (unsigned)active;
    atomic_store(&g_pool.gen, next);
    if (atomic_load(&g_pool.sleepers) > 0) wake_all(&g_pool.gen);
}

static void wait_done(void) {
    int spin = g_pool.spin;
    for (int i = 0; i < spin; i++) {
        if (atomic_load_explicit(&g_pool.pending, memory_order_acquire) == 0) return;
        cpu_relax();
    }
    for (int i = 0; i < g_pool.yields; i++) {
        if (atomic_load_explicit(&g_pool.pending, memory_order_acquire) == 0) return;
        sched_yield();
    }
    atomic_store(&g_pool.caller_sleeping, 1);
    for (;;) {
        unsigned p = atomic_load(&g_pool.pending);
        if (p == 0) break;
        wait_on(&g_pool.pending, p);
    }
    atomic_store(&g_pool.caller_sleeping, 0);
}

/* Caller holds g_pool.mu and no job is in flight. */
static void stop_workers(void) {
    if (g_pool.nworkers == 0) return;
    atomic_store(&g_pool.stop, 1);
    publish(0);
    wake_all(&g_pool.gen); /* also reaches a worker between its sleepers check and futex */
    for (int i = 0; i < g_pool.nworkers; i++) pthread_join(g_pool.threads[i], NULL);
    g_pool.nworkers = 0;
    atomic_store(&g_pool.stop, 0);
    atomic_store(&g_pool.sleepers, 0);
}

static void pool_atexit(void) {
    /* Quiet shutdown for valgrind/ASan. Skip it when it cannot be done safely: exit() from
     * inside a task, or another thread mid-job (the process is going away anyway). */
    if (tls_is_worker || ts__tls_depth > 0) return;
    if (pthread_mutex_trylock(&g_pool.mu) != 0) return;
    stop_workers();
    g_pool.sized_for = -1;
    pthread_mutex_unlock(&g_pool.mu);
}

/* fork(): only the forking thread exists in the child, so the child starts a fresh pool on
 * its first parallel call. The prepare handler waits for a job in flight on another thread
 * so the child does not inherit a half-published job; a fork from inside a task skips that
 * (the pool's lock is held by this very thread). */
static void atfork_prepare(void) {
    g_fork_locked = 0;
    if (ts__tls_depth == 0 && !tls_is_worker) {
        pthread_mutex_lock(&g_pool.mu);
        g_fork_locked = 1;
    }
}
static void atfork_parent(void) {
    if (g_fork_locked) pthread_mutex_unlock(&g_pool.mu);
}
static void atfork_child(void) {
    pthread_mutex_init(&g_pool.mu, NULL);
    g_pool.nworkers = 0;
    g_pool.sized_for = -1;
    atomic_store(&g_pool.pending, 0);
    atomic_store(&g_pool.sleepers, 0);
    atomic_store(&g_pool.caller_sleeping, 0);
    atomic_store(&g_pool.stop, 0);
    g_fork_locked = 0;
}

static void pool_register(void) {
    atexit(pool_atexit);
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* Caller holds g_pool.mu. Resizes only when the requested count changed, so a failing
 * pthread_create is not retried on every call. */
static void pool_resize(int nthreads) {
    if (g_pool.sized_for == nthreads) return;
    stop_workers();
    g_pool.sized_for = nthreads;
    g_pool.spin = nthreads > available_cpus() ? SPIN_ITERS_OVERSUBSCRIBED : SPIN_ITERS;
    g_pool.yields = nthreads > available_cpus() ? YIELD_ITERS_OVERSUBSCRIBED : YIELD_ITERS;
    unsigned g0 = atomic_load(&g_pool.gen);
    for (int i = 0; i < nthreads - 1; i++) {
        g_pool.args[i].tid = i + 1;
        g_pool.args[i].start_gen = g0;
        if (pthread_create(&g_pool.threads[i], NULL, worker_main, &g_pool.args[i]) != 0) break;
        g_pool.nworkers = i + 1;
    }
}

static void fork_join(job *j) {
    /* Nested call (from inside any task) or another user thread owns the pool: run here.
     * Same chunks, same ranges, so the results are the same. */
    if (ts__tls_depth > 0 || pthread_mutex_trylock(&g_pool.mu) != 0) {
        run_inline(j);
        return;
    }
    pthread_once(&g_pool_once, pool_register);
    pool_resize(ts_get_num_threads());
    int active = g_pool.nworkers < j->nchunks - 1 ? g_pool.nworkers : j->nchunks - 1;
    if (active < 1) {
        pthread_mutex_unlock(&g_pool.mu);
        run_inline(j);
        return;
    }
    j->stride = active + 1;
    g_pool.job = *j;
    atomic_store_explicit(&g_pool.pending, (unsigned)active, memory_order_relaxed);
    publish(active);
    for (int t = 0; t < j->nchunks; t += j->stride) run_chunk(&g_pool.job, t);
    wait_done();
    pthread_mutex_unlock(&g_pool.mu);
}

void ts__parallel_for(int64_t n, int64_t grain, ts__range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    job j = {0};
    j.range_fn = fn;
    j.ctx = ctx;
    j.n = n;
    j.grain = grain;
    j.nblocks = n / grain + (n % grain != 0); /* no overflow for huge grain */
    int64_t nt = ts_get_num_threads();
    j.nchunks = (int)(j.nblocks < nt ? j.nblocks : nt);
    if (j.nchunks <= 1) {
        j.nchunks = 1;
        run_inline(&j);
        return;
    }
    fork_join(&j);
}

void ts__parallel_run(int nthreads, ts__task_fn fn, void *ctx) {
    if (nthreads <= 0) return;
    job j = {0};
    j.task_fn = fn;
    j.ctx = ctx;
    j.nchunks = nthreads;
    if (nthreads == 1) {
        run_inline(&j);
        return;
    }
    fork_join(&j);
}

/* One task on each pool thread, the caller included: worker p runs task p (stride = the
 * thread count), so per-thread state such as the MXCSR flags can be set or read everywhere.
 * ts__parallel_run gives no such promise (a busy pool or a nested call runs it inline), so
 * this waits for the pool instead of running inline, and refuses nested calls. */
int ts__pool_on_each_thread(ts__task_fn fn, void *ctx) {
    if (ts__tls_depth > 0 || tls_is_worker) return -1;
    pthread_mutex_lock(&g_pool.mu);
    pthread_once(&g_pool_once, pool_register);
    pool_resize(ts_get_num_threads());
    const int active = g_pool.nworkers;
    job j = {0};
    j.task_fn = fn;
    j.ctx = ctx;
    j.nchunks = active + 1;
    j.stride = active + 1;
    g_pool.job = j;
    if (active > 0) {
        atomic_store_explicit(&g_pool.pending, (unsigned)active, memory_order_relaxed);
        publish(active);
    }
    run_chunk(&g_pool.job, 0);
    if (active > 0) wait_done();
    pthread_mutex_unlock(&g_pool.mu);
    return active + 1;
}
