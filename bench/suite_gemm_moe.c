/* MoE grouped GEMM rows of the gemm suite (issue 3, "MoE grouped"): FP8 x FP4 m-grouped
 * GEMMs as a decode-time MoE layer runs them, with weights pre-packed by ts_gemm_prepack_b.
 *
 * Rows: layout in {contiguous (psum layout, the default mk alignment 128; gap rows are neither
 * read nor written), masked} x G in {8, 32, 64} experts x expected rows per expert E in
 * {4, 32, 256} x (N, K) in {(4096, 4096), (4096, 2048)}. Expert g gets
 * E + (((3g) mod 5) - 2) * E / 4 rows (E/2 .. 3E/2, deterministic). A is e4m3 with 1 x 128
 * per-token packed ue8m0 scales (recipe_a (1, 128)), B packed e2m1 with (1, 32) packed ue8m0
 * scales (recipe_b (1, 32)), D bf16.
 * frac = roofline time / time, the roofline being the larger of the FMA-peak time for
 * 2 * rows * N * K flops and the DRAM-read time for the bytes that must move: every expert's
 * packed weight and scales plus the activations and their scales. Weights rotate over enough
 * copies to span 2 x L3, so each call reads them from DRAM.
 * Calls above 100 GFLOP (seconds each) are skipped, and calls over 0.25 s are timed with one
 * warm-up and 3 runs instead of the harness's >= 7 (both said in the output). --quick: the
 * G = 8, E = 4, (4096, 4096) rows only. TS_BENCH_FILTER=substring keeps the rows whose
 * "name shape" contains it, as in suite_gemm.c. */
#include "bench.h"

#include "core/internal.h"
#include "tilestack/gemm.h"

#include <stdlib.h>
#include <string.h>

#define SUITE "gemm"
#define MAX_COPIES 4
#define SKIP_FLOPS 100e9
#define LIGHT_S 0.25

static ts__bench_rng g_rng = {0x9e3779b97f4a7c15ull};

static void fill_bytes(uint8_t *p, int64_t n, bool e4m3) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t r = ts__bench_rng_next(&g_rng);
        memcpy(p + i, &r, 8);
    }
    for (; i < n; i++) p[i] = (uint8_t)ts__bench_rng_next(&g_rng);
    if (e4m3)
        for (i = 0; i < n; i++)
            if ((p[i] & 0x7f) == 0x7f) p[i]--;
}

/* Packed ue8m0 words: bytes 118..121 (scales 2^-9 .. 2^-6). */
static void fill_sf(int32_t *p, int64_t n) {
    uint8_t *b = (uint8_t *)p;
    for (int64_t i = 0; i < 4 * n; i++) b[i] = (uint8_t)(118 + (ts__bench_rng_next(&g_rng) & 3));
}

static void *balloc(size_t bytes) { return aligned_alloc(64, (bytes + 63) & ~(size_t)63); }

static int64_t rows_of(int64_t e, int64_t g) { return e + (((3 * g) % 5) - 2) * e / 4; }

/* The experts' weights (ncopies packed copies) for one (G, N, K). */
typedef struct moe_weights {
    int64_t g, n, k;
    int ncopies, next;
    ts_packed_weight *pw[MAX_COPIES];
    double bytes; /* one copy: packed values + scales as the unpacked tensors count them */
} moe_weights;

static void weights_free(moe_weights *w) {
    for (int i = 0; i < w->ncopies; i++) ts_packed_weight_destroy(w->pw[i]);
    memset(w, 0, sizeof *w);
}

static bool weights_init(moe_weights *w, int64_t g, int64_t n, int64_t k, double span) {
    memset(w, 0, sizeof *w);
    w->g = g, w->n = n, w->k = k;
    const int64_t sfk = ts__ceil_div(ts__ceil_div(k, 32), 4);
    const size_t b_bytes = (size_t)(g * n * (k / 2)), s_words = (size_t)(g * n * sfk);
    w->bytes = (double)b_bytes + 4.0 * (double)s_words;
    w->ncopies = 1;
    while (w->ncopies < MAX_COPIES && (double)w->ncopies * w->bytes < span) w->ncopies++;
    uint8_t *b = (uint8_t *)balloc(b_bytes);
    int32_t *sf = (int32_t *)balloc(s_words * 4);
    bool ok = b && sf;
    const int64_t rb[2] = {1, 32};
    for (int i = 0; ok && i < w->ncopies; i++) {
        fill_bytes(b, (int64_t)b_bytes, false);
        fill_sf(sf, (int64_t)s_words);
        ts_tensor tb = ts_tensor_3d(b, TS_E2M1X2, g, n, k / 2);
        ts_tensor ts = ts_tensor_3d(sf, TS_I32, g, n, sfk);
        ok = ts_gemm_prepack_b(&tb, &ts, rb, false, &w->pw[i]) == TS_OK;
    }
    free(b), free(sf);
    if (!ok) weights_free(w);
    return ok;
}

/* One call's activations and outputs for a layout and expected rows E. */
typedef struct moe_call {
    moe_weights *w;
    bool masked;
    int64_t rows, m_sum, m_max;
    uint8_t *a;
    int32_t *sfa, *lay;
    uint16_t *d;
    ts_tensor ta, tsfa, td, tlay;
    int64_t expected;
} moe_call;

static void call_free(moe_call *c) {
    free(c->a), free(c->sfa), free(c->lay), free(c->d);
    memset(c, 0, sizeof *c);
}

static bool call_init(moe_call *c, moe_weights *w, bool masked, int64_t e) {
    memset(c, 0, sizeof *c);
    c->w = w, c->masked = masked, c->expected = e;
    const int64_t g = w->g, k = w->k, n = w->n, sfk = ts__ceil_div(ts__ceil_div(k, 128), 4);
    const int64_t al = ts_get_mk_alignment_for_contiguous_layout();
    c->lay = (int32_t *)balloc((size_t)g * 4);
    if (!c->lay) return false;
    int64_t end = 0;
    for (int64_t q = 0; q < g; q++) {
        const int64_t r = rows_of(e, q);
        c->rows += r;
        c->m_max = ts__max64(c->m_max, r);
        if (masked) {
            c->lay[q] = (int32_t)r;
        } else {
            end = ts__align(end, al) + r;
            c->lay[q] = (int32_t)end;
        }
    }
    c->m_sum = masked ? g * c->m_max : end;
    c->a = (uint8_t *)balloc((size_t)(c->m_sum * k));
    c->sfa = (int32_t *)balloc((size_t)(c->m_sum * sfk) * 4);
    c->d = (uint16_t *)balloc((size_t)(c->m_sum * n) * 2);
    if (!c->a || !c->sfa || !c->d) {
        call_free(c);
        return false;
    }
    fill_bytes(c->a, c->m_sum * k, true);
    fill_sf(c->sfa, c->m_sum * sfk);
    memset(c->d, 0, (size_t)(c->m_sum * n) * 2);
    if (masked) {
        c->ta = ts_tensor_3d(c->a, TS_E4M3, g, c->m_max, k);
        c->tsfa = ts_tensor_3d(c->sfa, TS_I32, g, c->m_max, sfk);
        c->td = ts_tensor_3d(c->d, TS_BF16, g, c->m_max, n);
    } else {
        c->ta = ts_tensor_2d(c->a, TS_E4M3, c->m_sum, k);
        c->tsfa = ts_tensor_2d(c->sfa, TS_I32, c->m_sum, sfk);
        c->td = ts_tensor_2d(c->d, TS_BF16, c->m_sum, n);
    }
    c->tlay = ts_tensor_1d(c->lay, TS_I32, g);
    return true;
}

static ts_status run_call(void *ctx) {
    moe_call *c = (moe_call *)ctx;
    moe_weights *w = c->w;
    const ts_packed_weight *pw = w->pw[w->next];
    w->next = (w->next + 1) % w->ncopies;
    static const int64_t ra[2] = {1, 128}, rb[2] = {1, 32};
    if (c->masked)
        return ts_m_grouped_fp8_fp4_gemm_masked_packed(&c->ta, &c->tsfa, pw, &c->td, &c->tlay,
                                                      c->expected, NULL, ra, rb, NULL, false);
    return ts_m_grouped_fp8_fp4_gemm_contiguous_packed(&c->ta, &c->tsfa, pw, &c->td, &c->tlay,
                                                      NULL, ra, rb, NULL, false, true, false);
}

static int cmp_double(const void *x, const void *y) {
    const double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* The harness's timer, or for calls over LIGHT_S one warm-up and 3 timed runs. */
static ts_status time_call(moe_call *c, bool quick, ts__timing *t, bool *light) {
    double t0 = ts__now_s();
    TS__RETURN_IF_ERROR(run_call(c));
    const double first = ts__now_s() - t0;
    *light = first > LIGHT_S;
    if (!*light) return ts__bench_time(run_call, c, quick, t);
    double s[3];
    for (int i = 0; i < 3; i++) {
        t0 = ts__now_s();
        TS__RETURN_IF_ERROR(run_call(c));
        s[i] = ts__now_s() - t0;
    }
    qsort(s, 3, sizeof s[0], cmp_double);
    t->median_s = s[1], t->min_s = s[0], t->runs = 3, t->inner = 1;
    return TS_OK;
}

int ts__suite_gemm_moe(const ts__bench_opts *opts, const int *threads, int nthreads) {
    static const int64_t gs[3] = {8, 32, 64}, es[3] = {4, 32, 256};
    static const int64_t nk[2][2] = {{4096, 4096}, {4096, 2048}};
    const char *filter = getenv("TS_BENCH_FILTER");
    const ts_cpu_info *ci = ts_get_cpu_info();
    const double span = 2.0 * ((ci && ci->l3_bytes > 0) ? (double)ci->l3_bytes : 32.0 * (1 << 20));
    static const char *names[2] = {"m_grouped_fp8_fp4 contiguous packed",
                                   "m_grouped_fp8_fp4 masked packed"};
    const char *dtype = "e4m3 (1,128) x e2m1 (1,32), ue8m0x4 sf -> bf16";
    printf("\nMoE grouped FP8xFP4 (packed weights; shape [G experts x E expected rows (actual "
           "rows), N, K]; contiguous = psum layout); frac = roofline (max of FMA time and DRAM "
           "time for weights + scales + activations) / time.\n");
    if (opts->quick) printf("(--quick: only G = 8, E = 4, (4096, 4096))\n");
    ts__bench_table_header(stdout);
    int failures = 0;
    for (int s = 0; s < 2; s++)
        for (int gi = 0; gi < 3; gi++) {
            const int64_t G = gs[gi], N = nk[s][0], K = nk[s][1];
            if (opts->quick && (s > 0 || gi > 0)) continue;
            char shapes[3][64];
            bool any = false;
            for (int ei = 0; ei < 3; ei++) {
                int64_t rows = 0;
                for (int64_t q = 0; q < G; q++) rows += rows_of(es[ei], q);
                snprintf(shapes[ei], sizeof shapes[ei], "[%lldx%lld(%lld),%lld,%lld]",
                         (long long)G, (long long)es[ei], (long long)rows, (long long)N,
                         (long long)K);
                if (opts->quick && ei > 0) continue;
                for (int l = 0; l < 2; l++)
                    any = any || ts__bench_wanted(filter, names[l], shapes[ei]);
            }
            if (!any) continue;
            moe_weights w;
            if (!weights_init(&w, G, N, K, span)) {
                fprintf(stderr, "tilestack bench: out of memory for the MoE weights G=%lld\n",
                        (long long)G);
                failures++;
                continue;
            }
            for (int ei = 0; ei < 3; ei++) {
                if (opts->quick && ei > 0) continue;
                for (int l = 0; l < 2; l++) {
                    if (!ts__bench_wanted(filter, names[l], shapes[ei])) continue;
                    moe_call c;
                    if (!call_init(&c, &w, l == 1, es[ei])) {
                        fprintf(stderr, "tilestack bench: out of memory for %s\n", shapes[ei]);
                        failures++;
                        continue;
                    }
                    const double flops = 2.0 * (double)c.rows * (double)N * (double)K;
                    const double act = (double)c.rows * (double)K +
                                       4.0 * (double)c.rows * (double)ts__ceil_div(K, 512);
                    if (flops > SKIP_FLOPS) {
                        printf("%-34s %-22s skipped: %.0f GFLOP per call (seconds per call)\n",
                               names[l], shapes[ei], flops * 1e-9);
                        call_free(&c);
                        continue;
                    }
                    for (int t = 0; t < nthreads; t++) {
                        (void)ts_set_num_threads(threads[t]);
                        ts__bench_row row;
                        memset(&row, 0, sizeof row);
                        row.suite = SUITE;
                        row.name = names[l];
                        row.shape = shapes[ei];
                        row.dtype = dtype;
                        row.threads = threads[t];
                        row.flops = flops;
                        row.bytes = w.bytes + act;
                        row.set_bytes = w.bytes * w.ncopies + act;
                        row.roof = TS__ROOF_DRAM;
                        bool light = false;
                        ts_status st = time_call(&c, opts->quick, &row.t, &light);
                        if (st != TS_OK) {
                            ts__bench_report_error(opts, &row, ts_last_error());
                            failures++;
                            continue;
                        }
                        ts__bench_report(opts, &row);
                        if (light) printf("  (timed with 1 warm-up + 3 runs: %.2f s per call)\n",
                                          row.t.median_s);
                    }
                    call_free(&c);
                }
            }
            weights_free(&w);
        }
    return failures ? 1 : 0;
}
