/* Machine probes: the rooflines every bench row is measured against (cpu_anchors.md §1.6).
 * Each probe runs on `threads` worker threads pinned one per CPU, released together by a
 * barrier; the figure is the best of a few repetitions after one warm-up, because a probe
 * estimates a ceiling, not a typical run. */
#include "bench.h"
#include "core/internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#define TS__PROBE_MAX_THREADS 256

typedef enum probe_kind { PROBE_FMA, PROBE_DPBF16, PROBE_READ, PROBE_MEMCPY } probe_kind;

typedef struct probe_job {
    probe_kind kind;
    int threads, reps;
    bool avx2;               /* READ: the ymm reduction */
    ts_isa fma_isa;          /* FMA: whose chains (generic C, ymm, zmm) */
    int64_t fma_iters;       /* per thread per repetition */
    const char *src;         /* READ / MEMCPY: thread t uses [t*slice, (t+1)*slice) */
    char *dst;
    size_t slice;
    int passes;              /* READ: passes over the slice per repetition */
    pthread_barrier_t bar;
    double t0, best_s;
    float sink[TS__PROBE_MAX_THREADS];
} probe_job;

typedef struct probe_arg {
    probe_job *job;
    int tid;
} probe_arg;

float ts__probe_fma_generic(int64_t iters) {
    /* 64 independent lanes (8 chains of 8) so an SSE build still overlaps add latency. */
    volatile float seed[3] = {1.0f, 0.9999999f, 1e-7f};
    float acc[64];
    for (int j = 0; j < 64; j++) acc[j] = seed[0] + (float)j * 0.01f;
    const float m = seed[1], c = seed[2];
    for (int64_t i = 0; i < iters; i++)
        for (int j = 0; j < 64; j++) acc[j] = acc[j] * m + c;
    float s = 0;
    for (int j = 0; j < 64; j++) s += acc[j];
    return s;
}

float ts__probe_read_generic(const void *p, size_t bytes) {
    /* Integer sums: they vectorise under the baseline ISA and have 1-cycle latency. */
    const uint64_t *q = (const uint64_t *)p;
    size_t n = bytes / 8;
    uint64_t s[8] = {0};
    for (size_t i = 0; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) s[j] += q[i + j];
    uint64_t t = 0;
    for (int j = 0; j < 8; j++) t ^= s[j];
    return (float)(t & 0xffff);
}

/* Pin to the tid-th CPU this thread may run on (its inherited affinity mask), so probes honour
 * taskset, cpusets and mpirun --bind-to. Best effort: a failure leaves the thread unpinned. */
static void pin_to_cpu(int tid) {
    cpu_set_t allowed, set;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
    int count = CPU_COUNT(&allowed);
    if (count <= 0) return;
    int want = tid % count;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &allowed) || want-- > 0) continue;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set);
        return;
    }
}

static void *probe_worker(void *p) {
    probe_arg *a = (probe_arg *)p;
    probe_job *j = a->job;
    int tid = a->tid;
    pin_to_cpu(tid);
    float sink = 0;
    for (int r = 0; r <= j->reps; r++) { /* r == 0 is the warm-up */
        pthread_barrier_wait(&j->bar);
        if (tid == 0) j->t0 = ts__now_s();
        switch (j->kind) {
        case PROBE_FMA:
#ifdef TS_HAVE_AVX512_KERNELS
            if (j->fma_isa == TS_ISA_AVX512) { sink += ts__probe_fma_avx512(j->fma_iters); break; }
#endif
#ifdef TS_HAVE_AVX2_KERNELS
            if (j->fma_isa == TS_ISA_AVX2) { sink += ts__probe_fma_avx2(j->fma_iters); break; }
#endif
            sink += ts__probe_fma_generic(j->fma_iters);
            break;
        case PROBE_DPBF16:
#ifdef TS_HAVE_AVX512BF16_KERNELS
            sink += ts__probe_dpbf16_avx512bf16(j->fma_iters);
#endif
            break;
        case PROBE_READ: {
            const char *s = j->src + (size_t)tid * j->slice;
            for (int k = 0; k < j->passes; k++) {
#ifdef TS_HAVE_AVX2_KERNELS
                if (j->avx2) { sink += ts__probe_read_avx2(s, j->slice); continue; }
#endif
                sink += ts__probe_read_generic(s, j->slice);
            }
            break;
        }
        case PROBE_MEMCPY:
            memcpy(j->dst + (size_t)tid * j->slice, j->src + (size_t)tid * j->slice, j->slice);
            break;
        }
        pthread_barrier_wait(&j->bar);
        if (tid == 0 && r > 0) {
            double dt = ts__now_s() - j->t0;
            if (j->best_s <= 0 || dt < j->best_s) j->best_s = dt;
        }
    }
    j->sink[tid] = sink;
    return NULL;
}

/* Best time of one repetition over all threads; <= 0 if threads could not be started. */
static double probe_run(probe_job *j) {
    pthread_t th[TS__PROBE_MAX_THREADS];
    probe_arg args[TS__PROBE_MAX_THREADS];
    j->best_s = 0;
    if (pthread_barrier_init(&j->bar, NULL, (unsigned)j->threads) != 0) return 0;
    int started = 0;
    for (int t = 0; t < j->threads; t++) {
        args[t].job = j;
        args[t].tid = t;
        if (pthread_create(&th[t], NULL, probe_worker, &args[t]) != 0) break;
        started++;
    }
    if (started != j->threads) {
        /* Cannot release a barrier sized for more threads; this only happens when the system
         * refuses threads, where no figure would be trustworthy anyway. */
        fprintf(stderr, "tilestack bench: could not start %d probe threads\n", j->threads);
        exit(1);
    }
    for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
    pthread_barrier_destroy(&j->bar);
    return j->best_s;
}

static bool use_avx2(void) {
#ifdef TS_HAVE_AVX2_KERNELS
    const ts_cpu_info *ci = ts_get_cpu_info();
    return ci && ci->has_avx2 && ci->has_fma;
#else
    return false;
#endif
}

/* One large buffer, shared by every thread count's DRAM and memcpy probes: faulting in
 * 256 MiB costs about as much as the probes themselves. */
static char *g_big;
static size_t g_big_bytes;

static char *big_buffer(size_t bytes) {
    if (g_big && g_big_bytes >= bytes) return g_big;
    free(g_big);
    g_big = NULL;
    g_big_bytes = 0;
    /* 2 MiB alignment lets transparent huge pages back it, as a production allocator would. */
    char *p = aligned_alloc((size_t)2 << 20, bytes);
    if (!p) return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, bytes, MADV_HUGEPAGE);
#endif
    /* Non-zero fill: zero pages may be shared copy-on-write, which would flatter the read. */
    memset(p, 1, bytes);
    g_big = p;
    g_big_bytes = bytes;
    return p;
}

static double read_gbps(int threads, bool avx2, const char *buf, size_t slice, int passes,
                        int reps) {
    probe_job j;
    memset(&j, 0, sizeof j);
    j.kind = PROBE_READ;
    j.threads = threads;
    j.reps = reps;
    j.avx2 = avx2;
    j.src = buf;
    j.slice = slice;
    j.passes = passes;
    double s = probe_run(&j);
    return s > 0 ? (double)slice * passes * threads / s * 1e-9 : 0;
}

/* Flops per iteration of each path's FMA probe kernel; 0 where this build has none. */
static double fma_flops_per_iter(ts_isa isa) {
    switch (isa) {
    case TS_ISA_GENERIC: return 64.0 * 2;
#ifdef TS_HAVE_AVX2_KERNELS
    case TS_ISA_AVX2: return 12.0 * 8 * 2;
#endif
#ifdef TS_HAVE_AVX512_KERNELS
    case TS_ISA_AVX512: return TS__PROBE_ZMM_CHAINS * 16.0 * 2;
#endif
    default: return 0;
    }
}

/* One path's FP32 FMA peak at `threads`, GFLOP/s; 0 if the path cannot run here (its probe
 * kernel would fault) or has no probe kernel. */
static double fma_peak(ts_isa isa, int threads, int reps, bool quick) {
    const double fpi = fma_flops_per_iter(isa);
    if (fpi <= 0 || !ts__isa_runnable(isa)) return 0;
    probe_job j;
    memset(&j, 0, sizeof j);
    j.kind = PROBE_FMA;
    j.threads = threads;
    j.reps = reps;
    j.fma_isa = isa;
    /* ~30-50 ms (quick) or ~100-150 ms per repetition at the path's speed: the generic chains
     * run at a fraction of the ymm rate (a third of the work), zmm at about twice (twice). */
    const double flops = (quick ? 3e9 : 1e10) * (isa == TS_ISA_GENERIC ? 1.0 / 3 : 1.0) *
                         (isa == TS_ISA_AVX512 ? 2.0 : 1.0);
    j.fma_iters = (int64_t)(flops / fpi);
    double s = probe_run(&j);
    return s > 0 ? fpi * (double)j.fma_iters * threads / s * 1e-9 : 0;
}

/* The vdpbf16ps peak at `threads`, GFLOP/s (2 flops per product); 0 where the CPU lacks
 * AVX512_BF16, the avx512 path cannot run or the build has no such kernels. */
static double dpbf16_peak(int threads, int reps, bool quick) {
#ifdef TS_HAVE_AVX512BF16_KERNELS
    const ts_cpu_info *ci = ts_get_cpu_info();
    if (!ci || !ci->has_avx512bf16 || !ts__isa_runnable(TS_ISA_AVX512)) return 0;
    const double fpi = TS__PROBE_DPBF16_CHAINS * 64.0;
    probe_job j;
    memset(&j, 0, sizeof j);
    j.kind = PROBE_DPBF16;
    j.threads = threads;
    j.reps = reps;
    j.fma_iters = (int64_t)((quick ? 6e9 : 2e10) * 2 / fpi); /* ~2x the zmm FMA rate */
    double s = probe_run(&j);
    return s > 0 ? fpi * (double)j.fma_iters * threads / s * 1e-9 : 0;
#else
    (void)threads, (void)reps, (void)quick;
    return 0;
#endif
}

/* Probed figures per thread count (every path's peak), and the per-path views handed out. */
static ts__machine g_cache[TS__PROBE_MAX_THREADS + 1];
static bool g_cached[TS__PROBE_MAX_THREADS + 1];
static ts__machine g_view[TS_ISA_COUNT_][TS__PROBE_MAX_THREADS + 1];

static const ts__machine *view(int threads) {
    ts_isa isa = ts_get_isa();
    if ((unsigned)isa >= TS_ISA_COUNT_) isa = TS_ISA_GENERIC;
    ts__machine *v = &g_view[isa][threads];
    *v = g_cache[threads];
    v->isa = isa;
    v->fma_peak_gflops = v->fma_peak_isa_gflops[isa];
    return v;
}

const ts__machine *ts__probe_machine(int threads, bool quick) {
    if (threads < 1) threads = 1;
    if (threads > TS__PROBE_MAX_THREADS) threads = TS__PROBE_MAX_THREADS;
    if (g_cached[threads]) return view(threads);

    ts__machine *m = &g_cache[threads];
    memset(m, 0, sizeof *m);
    m->threads = threads;
    const bool avx2 = use_avx2();
    const int reps = quick ? 3 : 5;
    const ts_cpu_info *ci = ts_get_cpu_info();
    const size_t l2 = (ci && ci->l2_bytes > 0) ? (size_t)ci->l2_bytes : (size_t)512 << 10;
    const size_t l3 = (ci && ci->l3_bytes > 0) ? (size_t)ci->l3_bytes : (size_t)32 << 20;
    /* Threads may all share one L3 instance (one CCX): size the L3 probe for one instance. */
    const size_t l3_one = (ci && ci->l3_instance_bytes > 0) ? (size_t)ci->l3_instance_bytes : l3;

    /* FMA: every runnable path's own peak. Each probe's warm-up repetition (tens of ms) also
     * lets the core settle at the clock its instruction mix gets (Intel cores lower it for
     * heavy zmm work), so the order of the paths does not matter. */
    for (int i = TS_ISA_COUNT_ - 1; i >= 0; i--)
        m->fma_peak_isa_gflops[i] = fma_peak((ts_isa)i, threads, reps, quick);
    m->dpbf16_peak_gflops = dpbf16_peak(threads, reps, quick);

    /* DRAM: >= 8x L3 in all so no cache level holds a meaningful part of it. */
    size_t dram = l3 * 8;
    if (dram < ((size_t)256 << 20)) dram = (size_t)256 << 20;
    dram -= dram % ((size_t)threads * 2 * 4096);
    char *big = big_buffer(dram);
    if (big) {
        m->dram_read_gbps = read_gbps(threads, avx2, big, dram / threads, 1, reps);
        /* memcpy: first half -> second half (each >= 4x L3); bytes read + written. */
        probe_job j;
        memset(&j, 0, sizeof j);
        j.kind = PROBE_MEMCPY;
        j.threads = threads;
        j.reps = reps;
        j.src = big;
        j.dst = big + dram / 2;
        j.slice = dram / 2 / threads;
        double s = probe_run(&j);
        if (s > 0) m->memcpy_gbps = 2.0 * (double)j.slice * threads / s * 1e-9;

        /* L3: ~half of one instance in all, split over the threads (they share it). */
        size_t s3 = l3_one / 2 / threads;
        s3 -= s3 % 256;
        m->l3_read_gbps = read_gbps(threads, avx2, big, s3, quick ? 8 : 16, reps);
        /* L2: ~half of each thread's own L2; ~64-128 MiB read per thread per repetition. */
        size_t s2 = l2 / 2;
        s2 -= s2 % 256;
        int passes = (int)(((size_t)(quick ? 64 : 128) << 20) / s2);
        m->l2_read_gbps = read_gbps(threads, avx2, big, s2, passes, reps);
    }
    g_cached[threads] = true;
    return view(threads);
}
