/* Suite `gemm`: dense FP8 x FP8, FP8 x FP4 and BF16 GEMMs (D = A·Bᵀ, bf16 D) on DeepSeek
 * shapes, against this machine's FMA peak and DRAM bandwidth and against OpenBLAS in the same
 * run.
 *
 * Rows (issue 3, "Must reach"):
 *   compute  M in {512, 2048} x (N, K) in {(4096,7168), (7168,2048), (2112,7168), (4096,4096)}:
 *            roofline = FMA peak (flops = 2MNK); baseline = OpenBLAS cblas_sgemm on f32 copies
 *            of the same operands, same thread count (timed once per shape and thread count);
 *   decode   M in {1, 4, 16} x the same (N, K) + (7168, 16384): roofline = DRAM read of the
 *            weight + weight-scale bytes (with the flops bound too: max of both times, so M = 16
 *            rows that are compute-bound here are judged on FMA peak); weights rotate among
 *            enough copies to span 2 x L3, so every call reads them from DRAM; baseline =
 *            OpenBLAS sgemv (M = 1) or sgemm on f32 weights, rotated the same way. Decode rows
 *            use weights pre-packed with ts_gemm_prepack_b ("decode packed"), plus one FP8 row on
 *            the plain [N, K] weight ("decode plain").
 * Recipes: FP8 = e4m3 x e4m3 with f32 scales (1, 128, 128); FP8xFP4 = e4m3 A (1, 128) x
 * packed e2m1 B (1, 32), packed ue8m0 scales (the SM100 route); BF16 = plain bf16.
 * Peers: besides OpenBLAS, oneDNN's f32 and bf16 matmul on the same values when the build
 * found oneDNN (TS_HAVE_DNNL); each row's ratio is against the strongest (fastest) baseline
 * timed for its shape and thread count, and the JSON lists them all.
 * TS_BENCH_FILTER=substring keeps only the rows whose "name shape" contains it. */
#include "bench.h"

#include "core/internal.h"
#include "gemm/gemm_internal.h"
#include "gemm/gemm_kernels.h"
#include "tilestack/gemm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef TS_HAVE_OPENBLAS
#include <cblas.h>
/* Declared by OpenBLAS's own cblas.h, but not by the reference header the alternatives
 * system may install as <cblas.h>. */
void openblas_set_num_threads(int num_threads);
#endif

#define SUITE "gemm"

/* K_FP8_PLAIN: decode rows only, K_FP8 on the plain [N, K] weight (the other decode rows
 * use pre-packed weights). */
typedef enum gemm_kind { K_FP8, K_FP8_FP4, K_BF16, K_FP8_PLAIN, K_COUNT } gemm_kind;

static const struct {
    const char *name, *dtype;
} g_kinds[K_COUNT] = {
    {"fp8_gemm_nt", "e4m3 x e4m3, f32 sf (1,128,128) -> bf16"},
    {"fp8_fp4_gemm_nt", "e4m3 (1,128) x e2m1 (1,32), ue8m0x4 sf -> bf16"},
    {"bf16_gemm_nt", "bf16 x bf16 -> bf16"},
    {"fp8_gemm_nt", "e4m3 x e4m3, f32 sf (1,128,128) -> bf16, plain [N,K] weight"},
};

/* ---- inputs ---- */

static ts__bench_rng g_rng = {0x243f6a8885a308d3ull};
static inline uint64_t rng64(void) { return ts__bench_rng_next(&g_rng); }

/* Random bytes; e4m3 NaN codes (0x7f, 0xff) are nudged down, fp4 takes any byte. */
static void fill_codes(uint8_t *p, int64_t n, bool e4m3) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t r = rng64();
        memcpy(p + i, &r, 8);
    }
    for (; i < n; i++) p[i] = (uint8_t)rng64();
    if (e4m3)
        for (i = 0; i < n; i++)
            if ((p[i] & 0x7f) == 0x7f) p[i]--;
}

static void fill_bf16(uint16_t *p, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t r = (uint32_t)(rng64() >> 20);
        p[i] = (uint16_t)(((r >> 31) << 15) | ((120u + (r & 7u)) << 7) | ((r >> 3) & 0x7fu));
    }
}

/* f32 scales: powers of two in [2^-10, 2^-7]; packed ue8m0: bytes 117..120 (same range). */
static void fill_sf(void *p, int64_t n, bool packed) {
    if (packed) {
        uint8_t *b = (uint8_t *)p;
        for (int64_t i = 0; i < 4 * n; i++) b[i] = (uint8_t)(117 + (rng64() & 3));
    } else {
        float *f = (float *)p;
        for (int64_t i = 0; i < n; i++) f[i] = ldexpf(1.0f, -10 + (int)(rng64() & 3));
    }
}

static void *balloc(size_t bytes) { return aligned_alloc(64, (bytes + 63) & ~(size_t)63); }

/* ---- one problem: operands for a kind, with `ncopies` copies of the weights ---- */

/* Enough for 2 x L3 of the smallest decode weight (FP4 [2112, 7168], 7.6 MiB) on a 260 MiB
 * L3; rows that still fit in 2 x L3 are judged on l3_read (ts__bench_roof). */
#define MAX_COPIES 72

typedef struct gemm_problem {
    gemm_kind kind;
    int64_t m, n, k;
    int ncopies, next;
    void *a, *sfa, *sfb, *d;
    void *b[MAX_COPIES];
    ts_tensor ta, tsfa, tsfb, td, tb[MAX_COPIES];
    bool packed; /* decode rows: pw[i] = ts_gemm_prepack_b of copy i */
    ts_packed_weight *pw[MAX_COPIES];
    int64_t recipe_a[2], recipe_b[2];
    double weight_bytes; /* one copy of B + sfb */
} gemm_problem;

static void problem_free(gemm_problem *p) {
    free(p->a), free(p->sfa), free(p->sfb), free(p->d);
    for (int i = 0; i < p->ncopies; i++) free(p->b[i]), ts_packed_weight_destroy(p->pw[i]);
    memset(p, 0, sizeof *p);
}

/* min_total_bytes: weight copies until their sum reaches it (0: one copy). */
static bool problem_init(gemm_problem *p, gemm_kind kind0, int64_t m, int64_t n, int64_t k,
                         double min_total_bytes, bool packed) {
    memset(p, 0, sizeof *p);
    const gemm_kind kind = kind0 == K_FP8_PLAIN ? K_FP8 : kind0;
    p->kind = kind, p->m = m, p->n = n, p->k = k;
    const int64_t kb128 = ts__ceil_div(k, 128);
    size_t a_bytes, b_bytes;
    int64_t sfa_n = 0, sfb_n = 0; /* 4-byte elements */
    switch (kind) {
    case K_FP8:
        a_bytes = (size_t)(m * k), b_bytes = (size_t)(n * k);
        sfa_n = m * kb128, sfb_n = ts__ceil_div(n, 128) * kb128;
        break;
    case K_FP8_FP4:
        a_bytes = (size_t)(m * k), b_bytes = (size_t)(n * (k / 2));
        sfa_n = m * ts__ceil_div(kb128, 4), sfb_n = n * ts__ceil_div(ts__ceil_div(k, 32), 4);
        break;
    default:
        a_bytes = (size_t)(m * k) * 2, b_bytes = (size_t)(n * k) * 2;
        break;
    }
    p->weight_bytes = (double)b_bytes + 4.0 * (double)sfb_n;
    p->ncopies = 1;
    while (p->ncopies < MAX_COPIES && (double)p->ncopies * p->weight_bytes < min_total_bytes)
        p->ncopies++;
    p->a = balloc(a_bytes);
    p->d = balloc((size_t)(m * n) * 2);
    if (sfa_n) p->sfa = balloc((size_t)sfa_n * 4), p->sfb = balloc((size_t)sfb_n * 4);
    bool ok = p->a && p->d && (!sfa_n || (p->sfa && p->sfb));
    for (int i = 0; i < p->ncopies; i++) ok = ok && (p->b[i] = balloc(b_bytes)) != NULL;
    if (!ok) {
        problem_free(p);
        return false;
    }
    memset(p->d, 0, (size_t)(m * n) * 2);
    switch (kind) {
    case K_FP8:
        fill_codes(p->a, m * k, true);
        fill_sf(p->sfa, sfa_n, false);
        fill_sf(p->sfb, sfb_n, false);
        p->ta = ts_tensor_2d(p->a, TS_E4M3, m, k);
        p->tsfa = ts_tensor_2d(p->sfa, TS_F32, m, kb128);
        p->tsfb = ts_tensor_2d(p->sfb, TS_F32, ts__ceil_div(n, 128), kb128);
        for (int i = 0; i < p->ncopies; i++) {
            fill_codes(p->b[i], n * k, true);
            p->tb[i] = ts_tensor_2d(p->b[i], TS_E4M3, n, k);
        }
        break;
    case K_FP8_FP4:
        fill_codes(p->a, m * k, true);
        fill_sf(p->sfa, sfa_n, true);
        fill_sf(p->sfb, sfb_n, true);
        p->ta = ts_tensor_2d(p->a, TS_E4M3, m, k);
        p->tsfa = ts_tensor_2d(p->sfa, TS_I32, m, ts__ceil_div(kb128, 4));
        p->tsfb = ts_tensor_2d(p->sfb, TS_I32, n, sfb_n / n);
        p->recipe_a[0] = 1, p->recipe_a[1] = 128, p->recipe_b[0] = 1, p->recipe_b[1] = 32;
        for (int i = 0; i < p->ncopies; i++) {
            fill_codes(p->b[i], n * (k / 2), false);
            p->tb[i] = ts_tensor_2d(p->b[i], TS_E2M1X2, n, k / 2);
        }
        break;
    default:
        fill_bf16(p->a, m * k);
        p->ta = ts_tensor_2d(p->a, TS_BF16, m, k);
        for (int i = 0; i < p->ncopies; i++) {
            fill_bf16(p->b[i], n * k);
            p->tb[i] = ts_tensor_2d(p->b[i], TS_BF16, n, k);
        }
        break;
    }
    p->td = ts_tensor_2d(p->d, TS_BF16, m, n);
    p->packed = packed;
    for (int i = 0; packed && i < p->ncopies; i++) {
        const bool bf16 = kind == K_BF16;
        if (ts_gemm_prepack_b(&p->tb[i], bf16 ? NULL : &p->tsfb,
                              kind == K_FP8_FP4 ? p->recipe_b : NULL, false, &p->pw[i]) != TS_OK) {
            problem_free(p);
            return false;
        }
        /* Only the packed copy is read from now on. */
        free(p->b[i]);
        p->b[i] = NULL;
    }
    return true;
}

static ts_status run_problem(void *ctx) {
    gemm_problem *p = (gemm_problem *)ctx;
    const ts_tensor *b = &p->tb[p->next];
    const ts_packed_weight *pw = p->pw[p->next];
    p->next = (p->next + 1) % p->ncopies;
    if (p->packed) {
        if (p->kind == K_BF16) return ts_bf16_gemm_nt_packed(&p->ta, pw, &p->td, NULL, NULL);
        return ts_fp8_fp4_gemm_nt_packed(&p->ta, &p->tsfa, pw, &p->td, NULL, NULL,
                                         p->kind == K_FP8_FP4 ? p->recipe_a : NULL,
                                         p->kind == K_FP8_FP4 ? p->recipe_b : NULL, NULL, false);
    }
    switch (p->kind) {
    case K_FP8:
        return ts_fp8_gemm_nt(&p->ta, &p->tsfa, b, &p->tsfb, &p->td, NULL, NULL, NULL, NULL,
                              NULL, false);
    case K_FP8_FP4:
        return ts_fp8_fp4_gemm_nt(&p->ta, &p->tsfa, b, &p->tsfb, &p->td, NULL, NULL, p->recipe_a,
                                  p->recipe_b, NULL, false);
    default: return ts_bf16_gemm_nt(&p->ta, b, &p->td, NULL, NULL);
    }
}

/* ---- the baselines: f32 copies of the operands' values (OpenBLAS, oneDNN f32), and bf16
 * copies of them (oneDNN bf16; e4m3 / e2m1 / bf16 values are exact in bf16) ---- */

typedef struct blas_problem {
    int64_t m, n, k;
    int ncopies, next;
    float *a, *c, *b[MAX_COPIES];
    int ncopies16;
    uint16_t *a16, *c16, *b16[MAX_COPIES]; /* NULL: no bf16 peer */
} blas_problem;

static void blas_free(blas_problem *p) {
    free(p->a), free(p->c), free(p->a16), free(p->c16);
    for (int i = 0; i < p->ncopies; i++) free(p->b[i]);
    for (int i = 0; i < p->ncopies16; i++) free(p->b16[i]);
    memset(p, 0, sizeof *p);
}

/* bf16 copies of bp's f32 operands, spanning min_total_bytes like the f32 ones. */
static bool blas_init_bf16(blas_problem *bp, int max_copies, double min_total_bytes) {
    const int64_t mk = bp->m * bp->k, nk = bp->n * bp->k;
    bp->ncopies16 = 1;
    while (bp->ncopies16 < max_copies && (double)bp->ncopies16 * 2.0 * (double)nk < min_total_bytes)
        bp->ncopies16++;
    bp->a16 = balloc((size_t)mk * 2);
    bp->c16 = balloc((size_t)(bp->m * bp->n) * 2);
    bool ok = bp->a16 && bp->c16 && ts_convert(bp->a, TS_F32, bp->a16, TS_BF16, mk) == TS_OK;
    for (int i = 0; i < bp->ncopies16 && ok; i++) {
        ok = (bp->b16[i] = balloc((size_t)nk * 2)) != NULL;
        ok = ok && ts_convert(bp->b[i % bp->ncopies], TS_F32, bp->b16[i], TS_BF16, nk) == TS_OK;
    }
    if (!ok) {
        free(bp->a16), free(bp->c16);
        for (int i = 0; i < bp->ncopies16; i++) free(bp->b16[i]);
        bp->a16 = bp->c16 = NULL;
        memset(bp->b16, 0, sizeof bp->b16);
        bp->ncopies16 = 0;
    }
    return ok;
}

/* The values of src's A and weight copies (unscaled: the time does not depend on them); the
 * f32 weights rotate over enough copies to span min_total_bytes as well. */
static bool blas_init(blas_problem *bp, const gemm_problem *src, double min_total_bytes) {
    memset(bp, 0, sizeof *bp);
    bp->m = src->m, bp->n = src->n, bp->k = src->k;
    const int64_t mk = src->m * src->k, nk = src->n * src->k;
    ts_dtype dt = src->kind == K_BF16 ? TS_BF16 : TS_E4M3;
    ts_dtype bt = src->kind == K_FP8_FP4 ? TS_E2M1X2 : dt;
    bp->ncopies = 1;
    while (bp->ncopies < src->ncopies && (double)bp->ncopies * 4.0 * (double)nk < min_total_bytes)
        bp->ncopies++;
    bp->a = balloc((size_t)mk * 4);
    bp->c = balloc((size_t)(src->m * src->n) * 4);
    bool ok = bp->a && bp->c;
    for (int i = 0; i < bp->ncopies; i++) ok = ok && (bp->b[i] = balloc((size_t)nk * 4)) != NULL;
    ok = ok && ts_convert(src->a, dt, bp->a, TS_F32, mk) == TS_OK;
    for (int i = 0; i < bp->ncopies && ok; i++) {
        if (!src->b[i]) { /* only the packed copy was kept: the time does not need the values */
            memset(bp->b[i], 0, (size_t)nk * 4);
            continue;
        }
        ok = ts_convert(src->b[i], bt, bp->b[i], TS_F32, nk) == TS_OK;
    }
    if (!ok) {
        blas_free(bp);
        return false;
    }
    memset(bp->c, 0, (size_t)(src->m * src->n) * 4);
    return true;
}

#ifdef TS_HAVE_OPENBLAS
static ts_status run_blas(void *ctx) {
    blas_problem *p = (blas_problem *)ctx;
    const float *b = p->b[p->next];
    p->next = (p->next + 1) % p->ncopies;
    if (p->m == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)p->n, (int)p->k, 1.0f, b, (int)p->k, p->a, 1,
                    0.0f, p->c, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)p->m, (int)p->n, (int)p->k, 1.0f,
                    p->a, (int)p->k, b, (int)p->k, 0.0f, p->c, (int)p->n);
    return TS_OK;
}
#endif

/* ---- rows ---- */

typedef struct gemm_env {
    const ts__bench_opts *opts;
    const char *filter;
    double l3_bytes;
    int failures;
} gemm_env;

/* The baselines of one shape at one thread count: names and median times (0: not run). */
enum { BL_OPENBLAS, BL_DNNL_F32, BL_DNNL_BF16, BL_COUNT };
typedef struct baselines {
    const char *name[BL_COUNT];
    double s[BL_COUNT];
    char impl[BL_COUNT][160]; /* oneDNN's implementation, or why it did not run */
    int best;                /* index of the fastest, -1 if none ran */
} baselines;

/* A baseline's median; under --quick, one that takes more than 0.25 s a call (oneDNN's bf16
 * matmul without AVX512_BF16 hardware) gets 1 warm-up + 3 timed calls instead of >= 7. */
static ts_status time_peer(ts__bench_fn fn, void *ctx, bool quick, ts__timing *t) {
    if (quick) {
        double a = ts__now_s();
        TS__RETURN_IF_ERROR(fn(ctx));
        if (ts__now_s() - a > 0.25) {
            double s[3];
            for (int i = 0; i < 3; i++) {
                a = ts__now_s();
                TS__RETURN_IF_ERROR(fn(ctx));
                s[i] = ts__now_s() - a;
            }
            const double lo = s[0] < s[1] ? s[0] : s[1], hi = s[0] < s[1] ? s[1] : s[0];
            t->median_s = s[2] < lo ? lo : s[2] > hi ? hi : s[2];
            t->min_s = s[2] < lo ? s[2] : lo;
            t->runs = 3;
            t->inner = 1;
            return TS_OK;
        }
    }
    return ts__bench_time(fn, ctx, quick, t);
}

/* Time every baseline available for bp at `threads`. */
static void time_baselines(const gemm_env *env, blas_problem *bp, int threads, baselines *bl) {
    memset(bl, 0, sizeof *bl);
    bl->best = -1;
    bl->name[BL_OPENBLAS] = bp->m == 1 ? "openblas_sgemv" : "openblas_sgemm";
    bl->name[BL_DNNL_F32] = "onednn_f32";
    bl->name[BL_DNNL_BF16] = "onednn_bf16";
    ts__timing bt;
#ifdef TS_HAVE_OPENBLAS
    openblas_set_num_threads(threads);
    bp->next = 0;
    if (time_peer(run_blas, bp, env->opts->quick, &bt) == TS_OK) bl->s[BL_OPENBLAS] = bt.median_s;
#endif
#ifdef TS_HAVE_DNNL
    for (int v = BL_DNNL_F32; v <= BL_DNNL_BF16; v++) {
        const bool bf16 = v == BL_DNNL_BF16;
        if (bf16 && !bp->a16) continue;
        char why[128];
        ts__dnnl_mm *mm = ts__dnnl_mm_create(bp->m, bp->n, bp->k, bf16, bf16 ? (void *)bp->a16 : bp->a,
                                             bf16 ? (void *const *)bp->b16 : (void *const *)bp->b,
                                             bf16 ? bp->ncopies16 : bp->ncopies,
                                             bf16 ? (void *)bp->c16 : bp->c, threads, why, sizeof why);
        if (!mm) {
            snprintf(bl->impl[v], sizeof bl->impl[v], "not run: %s", why);
            continue;
        }
        snprintf(bl->impl[v], sizeof bl->impl[v], "%s", ts__dnnl_mm_impl(mm));
        if (time_peer(ts__dnnl_mm_run, mm, env->opts->quick, &bt) == TS_OK) bl->s[v] = bt.median_s;
        ts__dnnl_mm_destroy(mm);
    }
#endif
    (void)env, (void)bp, (void)threads, (void)bt;
    for (int i = 0; i < BL_COUNT; i++)
        if (bl->s[i] > 0 && (bl->best < 0 || bl->s[i] < bl->s[bl->best])) bl->best = i;
}

static void print_baselines(const baselines *bl, int threads) {
    if (bl->best < 0) return;
    printf("  %-28s %d thread%s:", "baselines", threads, threads == 1 ? "" : "s");
    int n = 0;
    for (int i = 0; i < BL_COUNT; i++) {
        if (bl->s[i] <= 0 && !bl->impl[i][0]) continue;
        if (bl->s[i] > 0) printf("%s %s %.3f ms", n++ ? "," : "", bl->name[i], bl->s[i] * 1e3);
        else printf("%s %s", n++ ? "," : "", bl->name[i]);
        if (bl->impl[i][0]) printf(" (%s)", bl->impl[i]);
    }
    printf("; ratio vs %s\n", bl->name[bl->best]);
}

static void report(gemm_env *env, ts__bench_row *row, ts_status st, const baselines *bl) {
    const double base_s = bl && bl->best >= 0 ? bl->s[bl->best] : 0;
    const char *base_name = bl && bl->best >= 0 ? bl->name[bl->best] : NULL;
    row->nbaselines = 0;
    for (int i = 0; bl && i < BL_COUNT; i++)
        if (bl->s[i] > 0) {
            row->baseline_names[row->nbaselines] = bl->name[i];
            row->baseline_all_seconds[row->nbaselines++] = bl->s[i];
        }
    row->suite = SUITE;
    if (st != TS_OK) {
        char why[256];
        const char *detail = ts_last_error();
        snprintf(why, sizeof why, "%s%s%s%s", ts_status_str(st), detail[0] ? " (" : "", detail,
                 detail[0] ? ")" : "");
        row->baseline = NULL;
        ts__bench_report_error(env->opts, row, why);
        if (st != TS_ERR_UNSUPPORTED) env->failures++;
        return;
    }
    row->baseline = base_s > 0 ? base_name : NULL;
    row->baseline_seconds = base_s;
    ts__bench_report(env->opts, row);
}

static void oom(gemm_env *env, const char *what) {
    fprintf(stderr, "tilestack bench: out of memory for %s\n", what);
    env->failures++;
}

/* One (M, N, K): every wanted kind at every thread count, with one OpenBLAS baseline per
 * thread count. decode: weights rotate over 2 x L3 and the roofline is DRAM. */
/* A compute row's roofline: the vdpbf16ps peak where the FP8 / FP4 GEMM runs those kernels
 * (avx512 path, AVX512_BF16, more rows than the decode path takes), else the path's FMA peak. */
static ts__roof compute_roof(int kind, int64_t m) {
    const bool scaled = kind == K_FP8 || kind == K_FP8_FP4;
    return scaled && m > TS__GEMM_SMALL_M && ts__gemm_select_dp_kernels() ? TS__ROOF_DPBF16
                                                                         : TS__ROOF_FMA;
}

static void shape_rows(gemm_env *env, int64_t m, int64_t n, int64_t k, bool decode,
                       const int *threads, int nthreads) {
    char shape[64];
    snprintf(shape, sizeof shape, "[%lld,%lld,%lld]", (long long)m, (long long)n, (long long)k);
    char names[K_COUNT][48];
    bool want[K_COUNT], any = false;
    for (int kd = 0; kd < K_COUNT; kd++) {
        snprintf(names[kd], sizeof names[kd], "%s%s", g_kinds[kd].name,
                 !decode ? "" : kd == K_FP8_PLAIN ? " decode plain" : " decode packed");
        want[kd] = (decode || kd != K_FP8_PLAIN) &&
                   ts__bench_wanted(env->filter, names[kd], shape);
        any = any || want[kd];
    }
    if (!any) return;
    const double span = decode ? 2.0 * env->l3_bytes : 0.0;
    gemm_problem probs[K_COUNT];
    memset(probs, 0, sizeof probs);
    int first = -1;
    for (int kd = 0; kd < K_COUNT; kd++) {
        if (!want[kd]) continue;
        if (!problem_init(&probs[kd], (gemm_kind)kd, m, n, k, span, decode && kd != K_FP8_PLAIN)) {
            oom(env, shape);
            want[kd] = false;
            continue;
        }
        if (first < 0) first = kd;
    }
    blas_problem bp;
    memset(&bp, 0, sizeof bp);
    bool have_blas = false;
#if defined(TS_HAVE_OPENBLAS) || defined(TS_HAVE_DNNL)
    if (first >= 0) have_blas = blas_init(&bp, &probs[first], span);
#endif
#ifdef TS_HAVE_DNNL
    if (have_blas) (void)blas_init_bf16(&bp, probs[first].ncopies, span);
#endif
    for (int t = 0; t < nthreads; t++) {
        (void)ts_set_num_threads(threads[t]);
        baselines bl;
        bool timed = false;
        memset(&bl, 0, sizeof bl);
        bl.best = -1;
        for (int kd = 0; kd < K_COUNT; kd++) {
            if (!want[kd]) continue;
            ts__bench_row row = {0};
            row.name = names[kd];
            row.shape = shape;
            row.dtype = g_kinds[kd].dtype;
            row.threads = threads[t];
            row.flops = 2.0 * (double)m * (double)n * (double)k;
            row.bytes = decode ? probs[kd].weight_bytes : 0;
            row.set_bytes = decode ? probs[kd].weight_bytes * probs[kd].ncopies : 0;
            row.roof = decode ? TS__ROOF_DRAM : compute_roof(kd, m);
            ts_status st = ts__bench_time(run_problem, &probs[kd], env->opts->quick, &row.t);
            /* The baseline runs after the first kernel row so its threads never spin while
             * ours are timed for the rest of this thread count. */
            if (have_blas && !timed) {
                time_baselines(env, &bp, threads[t], &bl);
                timed = true;
                (void)ts_set_num_threads(threads[t]);
            }
            report(env, &row, st, &bl);
        }
        print_baselines(&bl, threads[t]);
    }
    blas_free(&bp);
    for (int kd = 0; kd < K_COUNT; kd++) problem_free(&probs[kd]);
}

static const int64_t g_nk[][2] = {{4096, 7168}, {7168, 2048}, {2112, 7168}, {4096, 4096},
                                  {7168, 16384}};

static void print_machines(const ts__bench_opts *opts, const int *threads, int nthreads) {
    for (int t = 0; t < nthreads; t++)
        ts__bench_print_machine(stdout, ts__probe_machine(threads[t], opts->quick));
}

static void env_init(gemm_env *env, const ts__bench_opts *opts) {
    memset(env, 0, sizeof *env);
    env->opts = opts;
    env->filter = getenv("TS_BENCH_FILTER");
    const ts_cpu_info *ci = ts_get_cpu_info();
    env->l3_bytes = (ci && ci->l3_bytes > 0) ? (double)ci->l3_bytes : 32.0 * (1 << 20);
}

int ts__suite_gemm(const ts__bench_opts *opts) {
    int threads[2];
    int nthreads = ts__bench_thread_list(opts, threads);
    print_machines(opts, threads, nthreads);
    printf("\nsuite gemm (ISA %s); frac = share of the roofline (fma_peak of the %s path: compute "
           "rows; dpbf16_peak: FP8 / FP4 compute rows on the vdpbf16ps kernels; dram_read: decode "
           "rows, weight + scale bytes, or the FMA bound when larger);\n"
           "ratio = the strongest baseline's time / time (OpenBLAS f32, oneDNN f32 and bf16 matmul "
           "on copies of the operands' values; all listed after each shape)\n",
           opts->isa_name ? opts->isa_name : "?", opts->isa_name ? opts->isa_name : "?");
#ifndef TS_HAVE_OPENBLAS
    printf("(built without OpenBLAS: no OpenBLAS baseline)\n");
#endif
#ifdef TS_HAVE_DNNL
    {
        char v[96];
        ts__dnnl_version(v, sizeof v);
        printf("(peers: %s)\n", v);
    }
#else
    printf("(built without oneDNN: no oneDNN baselines)\n");
#endif
    ts__bench_table_header(stdout);
    gemm_env env;
    env_init(&env, opts);
    if (opts->quick) {
        /* One compute and one decode shape: the whole --quick suite stays well under a minute. */
        shape_rows(&env, 512, 4096, 4096, false, threads, nthreads);
        shape_rows(&env, 1, 4096, 7168, true, threads, nthreads);
    } else {
        static const int64_t cm[] = {512, 2048}, dm[] = {1, 4, 16};
        for (size_t s = 0; s < 4; s++)
            for (size_t i = 0; i < 2; i++)
                shape_rows(&env, cm[i], g_nk[s][0], g_nk[s][1], false, threads, nthreads);
        for (size_t s = 0; s < 5; s++)
            for (size_t i = 0; i < 3; i++)
                shape_rows(&env, dm[i], g_nk[s][0], g_nk[s][1], true, threads, nthreads);
    }
    if (ts__suite_gemm_moe(opts, threads, nthreads)) env.failures++;
    return env.failures ? 1 : 0;
}

/* `tilestack demo`: one dense FP8 GEMM (a short prefill chunk through one projection). */
int ts__gemm_tour(const ts__bench_opts *opts, int threads) {
    gemm_env env;
    env_init(&env, opts);
    env.filter = "fp8_gemm_nt ";
    ts__bench_table_header(stdout);
    shape_rows(&env, 256, 2048, 2048, false, &threads, 1);
    return env.failures ? 1 : 0;
}
