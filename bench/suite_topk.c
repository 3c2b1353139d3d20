/* Suite `topk`: DeepSelect top-k against a torch.topk-like CPU baseline in the same run.
 *
 * Rows (upstream's two uses, tests/test.py --perf-only):
 *   indexer  bf16, i32 indices, unsorted, no values, k in {512, 2048}, batch in {1, 8, 64},
 *            N in {8192, 65536, 1048576};
 *   sampler  f32, i64 indices, sorted, with values, N = 129280, k in {1, 20, 512}, batch 1/64.
 * bytes = input read + outputs written; roofline = DRAM read bandwidth when the batch's input
 * exceeds L3, else L3 read bandwidth (the input is re-read every call, so it stays cached).
 * Baseline ("torch-like"): what aten's topk_impl_loop does per row: build (value, index) pairs,
 * then a heap partial sort (std::partial_sort: its k come out sorted) when k * 64 <= n, else
 * quickselect (nth_element: median-of-3 Hoare partitions, insertion sort below 16) plus a sort
 * of the k when sorted; rows spread over threads. It is slightly kinder than aten: values are
 * converted to f32 once (aten compares bf16 through conversions) and the comparator has no NaN
 * test (aten's puts NaN first).
 * TS_BENCH_FILTER=substring keeps only the rows whose "name shape" contains it; with a filter
 * the whole row set is eligible even under --quick (quick then only shortens the timing). */
#include "bench.h"

#include "core/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SUITE "topk"

static ts__bench_rng g_rng = {0x2545f4914f6cdd1dull};
static inline uint32_t rng32(void) { return (uint32_t)(ts__bench_rng_next(&g_rng) >> 16); }

/* Score-like values: roughly bell-shaped (sum of two uniforms), a few binades. */
static float score(void) {
    float a = (float)(rng32() & 0xffffff) / 16777216.0f, b = (float)(rng32() & 0xffffff) / 16777216.0f;
    return (a + b - 1.0f) * 8.0f;
}

/* ---- the baseline ---- */

typedef struct vi { float v; int32_t i; } vi;

static inline void vi_swap(vi *a, vi *b) { vi t = *a; *a = *b; *b = t; }

/* min-heap on v (the root is the weakest kept) */
static void sift_down(vi *h, int64_t n, int64_t i) {
    for (;;) {
        int64_t l = 2 * i + 1, m = i;
        if (l < n && h[l].v < h[m].v) m = l;
        if (l + 1 < n && h[l + 1].v < h[m].v) m = l + 1;
        if (m == i) return;
        vi_swap(&h[i], &h[m]);
        i = m;
    }
}

static void insertion_desc(vi *a, int64_t n) {
    for (int64_t i = 1; i < n; i++) {
        vi x = a[i];
        int64_t j = i;
        while (j > 0 && a[j - 1].v < x.v) { a[j] = a[j - 1]; j--; }
        a[j] = x;
    }
}

static float median3(float a, float b, float c) {
    if (a < b) { float t = a; a = b; b = t; }
    if (b < c) { b = c; }
    return a < b ? a : b;
}

/* Hoare partition around a median-of-3 pivot, descending; returns the split point. */
static int64_t partition_desc(vi *a, int64_t n) {
    float p = median3(a[0].v, a[n / 2].v, a[n - 1].v);
    int64_t i = -1, j = n;
    for (;;) {
        do i++; while (a[i].v > p);
        do j--; while (a[j].v < p);
        if (i >= j) return j + 1;
        vi_swap(&a[i], &a[j]);
    }
}

static void sort_desc(vi *a, int64_t n) {
    while (n > 16) {
        int64_t s = partition_desc(a, n);
        if (s < n - s) { sort_desc(a, s); a += s; n -= s; }
        else { sort_desc(a + s, n - s); n = s; }
    }
    insertion_desc(a, n);
}

/* nth_element: the k largest end up in a[0..k). */
static void select_desc(vi *a, int64_t n, int64_t k) {
    while (n > 16) {
        int64_t s = partition_desc(a, n);
        if (k <= s) n = s;
        else { a += s; k -= s; n -= s; }
    }
    insertion_desc(a, n);
}

typedef struct base_ctx {
    const void *in;
    bool bf16, sorted, i64, rv;
    int64_t batch, n, k;
    void *idx, *val;
} base_ctx;

static void base_rows(void *p, int64_t begin, int64_t end, int tid) {
    base_ctx *c = (base_ctx *)p;
    vi *q = (vi *)ts__scratch(tid, (size_t)c->n * sizeof(vi));
    if (!q) return;
    for (int64_t r = begin; r < end; r++) {
        for (int64_t i = 0; i < c->n; i++) {
            float v;
            if (c->bf16) {
                uint32_t u = (uint32_t)((const uint16_t *)c->in)[r * c->n + i] << 16;
                memcpy(&v, &u, 4);
            } else {
                v = ((const float *)c->in)[r * c->n + i];
            }
            q[i].v = v;
            q[i].i = (int32_t)i;
        }
        const int64_t k = c->k, n = c->n;
        if (k * 64 <= n) { /* std::partial_sort: heap of the first k, then sorted (always, as
                            * partial_sort does, even when torch is not asked for sorted) */
            for (int64_t i = k / 2 - 1; i >= 0; i--) sift_down(q, k, i);
            for (int64_t i = k; i < n; i++)
                if (q[i].v > q[0].v) { q[0] = q[i]; sift_down(q, k, 0); }
            sort_desc(q, k);
        } else {
            select_desc(q, n, k);
            if (c->sorted) sort_desc(q, k);
        }
        for (int64_t j = 0; j < k; j++) {
            if (c->i64) ((int64_t *)c->idx)[r * k + j] = q[j].i;
            else ((int32_t *)c->idx)[r * k + j] = q[j].i;
            if (c->rv) ((float *)c->val)[r * k + j] = q[j].v;
        }
    }
}

static ts_status run_base(void *p) {
    base_ctx *c = (base_ctx *)p;
    ts__parallel_for(c->batch, 1, base_rows, c);
    return TS_OK;
}

typedef struct topk_ctx {
    ts_tensor in, idx, val;
    int64_t k;
    ts_topk_options o;
} topk_ctx;

static ts_status run_topk(void *p) {
    topk_ctx *c = (topk_ctx *)p;
    return ts_topk(&c->in, c->k, &c->o, NULL, NULL, c->o.return_value ? &c->val : NULL, &c->idx);
}

typedef struct topk_env {
    const ts__bench_opts *opts;
    void *in, *idx, *val;
    int64_t l3;
    const char *filter;
    int failures;
} topk_env;

static void one_row(topk_env *env, const char *name, bool bf16, bool sorted, bool i64, bool rv,
                    int64_t batch, int64_t n, int64_t k, int threads) {
    const ts__bench_opts *opts = env->opts;
    char shape[64];
    snprintf(shape, sizeof shape, "%lldx%lld k%lld", (long long)batch, (long long)n, (long long)k);
    if (!ts__bench_wanted(env->filter, name, shape)) return;
    ts__bench_row row;
    memset(&row, 0, sizeof row);
    row.suite = SUITE;
    row.name = name;
    row.shape = shape;
    row.dtype = bf16 ? "bf16" : "f32";
    row.threads = threads;
    const double in_bytes = (double)batch * (double)n * (bf16 ? 2 : 4);
    row.bytes = in_bytes + (double)batch * (double)k * ((i64 ? 8 : 4) + (rv ? (bf16 ? 2 : 4) : 0));
    /* The input is re-read by every call: a DRAM row only when it exceeds 2 x L3. */
    row.roof = in_bytes > ts__bench_dram_set_bytes() ? TS__ROOF_DRAM : TS__ROOF_L3;

    topk_ctx c;
    c.in = ts_tensor_2d(env->in, bf16 ? TS_BF16 : TS_F32, batch, n);
    c.idx = ts_tensor_2d(env->idx, i64 ? TS_I64 : TS_I32, batch, k);
    c.val = ts_tensor_2d(env->val, bf16 ? TS_BF16 : TS_F32, batch, k);
    c.k = k;
    c.o = ts_topk_default_options();
    c.o.sorted = sorted;
    c.o.return_value = rv;
    c.o.indices_type = i64 ? TS_I64 : TS_I32;
    (void)ts_set_num_threads(threads);
    ts_status st = ts__bench_time(run_topk, &c, opts->quick, &row.t);
    if (st != TS_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s (%s)", ts_status_str(st), ts_last_error());
        ts__bench_report_error(opts, &row, why);
        env->failures++;
        return;
    }
    base_ctx b = {env->in, bf16, sorted, i64, rv, batch, n, k, env->idx, env->val};
    ts__timing bt;
    if (ts__bench_time(run_base, &b, opts->quick, &bt) == TS_OK) {
        row.baseline = "torch-like";
        row.baseline_seconds = bt.median_s;
    }
    ts__bench_report(opts, &row);
}

int ts__suite_topk(const ts__bench_opts *opts) {
    int threads[2];
    int nthreads = ts__bench_thread_list(opts, threads);
    for (int t = 0; t < nthreads; t++)
        ts__bench_print_machine(stdout, ts__probe_machine(threads[t], opts->quick));
    const ts_cpu_info *ci = ts_get_cpu_info();
    topk_env env;
    memset(&env, 0, sizeof env);
    env.opts = opts;
    env.filter = getenv("TS_BENCH_FILTER");
    env.l3 = (ci && ci->l3_bytes > 0) ? ci->l3_bytes : (int64_t)32 << 20;
    printf("\nsuite topk (ISA %s, L3 %lld MiB); frac = share of the roofline (L3 if the input fits in 2 x L3, "
           "else DRAM); ratio = torch-like time / time\n",
           opts->isa_name ? opts->isa_name : "?", (long long)(env.l3 >> 20));
    ts__bench_table_header(stdout);

    const int64_t max_in = (int64_t)64 << 21; /* 64 x 1M bf16 = 128 MiB >= 64 x 129280 f32 */
    env.in = aligned_alloc(64, (size_t)max_in);
    env.idx = aligned_alloc(64, (size_t)64 * 4096 * 8);
    env.val = aligned_alloc(64, (size_t)64 * 4096 * 4);
    if (!env.in || !env.idx || !env.val) {
        fprintf(stderr, "tilestack bench: out of memory\n");
        free(env.in); free(env.idx); free(env.val);
        return 1;
    }
    const bool quick = opts->quick && !env.filter;
    {
        uint16_t *p = (uint16_t *)env.in;
        for (int64_t i = 0; i < max_in / 2; i++) {
            float f = score();
            uint32_t u;
            memcpy(&u, &f, 4);
            p[i] = (uint16_t)(u >> 16);
        }
    }
    const int64_t ks[] = {512, 2048}, bs[] = {1, 8, 64}, ns[] = {8192, 65536, 1048576};
    for (int t = 0; t < nthreads; t++)
        for (int ki = 0; ki < 2; ki++)
            for (int bi = 0; bi < 3; bi++)
                for (int ni = 0; ni < 3; ni++) {
                    if (quick && (ki == 1 || bi == 1 || ni == 0)) continue;
                    one_row(&env, "indexer", true, false, false, false, bs[bi], ns[ni], ks[ki], threads[t]);
                }
    {
        float *p = (float *)env.in;
        for (int64_t i = 0; i < 64 * 129280; i++) p[i] = score();
    }
    const int64_t sk[] = {1, 20, 512}, sb[] = {1, 64};
    for (int t = 0; t < nthreads; t++)
        for (int ki = 0; ki < 3; ki++)
            for (int bi = 0; bi < 2; bi++) {
                if (quick && ki == 1) continue;
                one_row(&env, "sampler", false, true, true, true, sb[bi], 129280, sk[ki], threads[t]);
            }
    free(env.in);
    free(env.idx);
    free(env.val);
    return env.failures ? 1 : 0;
}
