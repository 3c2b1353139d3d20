/* Shared helpers of the FlashMLA tests: a float64 attention oracle, upstream's comparator
 * (kernelkit check_is_allclose: inf/NaN positions equal, abs-or-rel per element, cosine diff),
 * and bf16 / random-input helpers. */
#ifndef TEST_FLASH_MLA_COMMON_H
#define TEST_FLASH_MLA_COMMON_H

#include "ts_prng.h"
#include "ts_test.h"
#include "tilestack/tilestack.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static inline float fm_bf(uint16_t h) { return ts_bf16_to_f32(h); }
static inline uint16_t fm_tobf(float x) { return ts_f32_to_bf16(x); }

/* q ~ U(-1,1) * amp rounded to bf16 */
static inline void fm_fill_bf16(ts_prng *p, uint16_t *x, int64_t n, float amp) {
    for (int64_t i = 0; i < n; i++) x[i] = fm_tobf(ts_prng_uniform(p) * amp);
}

static inline uint16_t fm_bf16_nan(void) { return 0x7FC0; }
static inline int64_t fm_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Oracle for one row: logits scale * <q, k_t> over d dims (float64), softmax over the n valid
 * tokens, out = sum p_t v_t (first 512 dims) times 1/(1+exp(sink - lse)); empty -> out 0,
 * lse +inf. k rows are float (already the dequantised bf16 values). Returns max logit. */
static inline double fm_ref_row(const float *q, const float *const *k, int64_t n, int64_t d,
                                double scale, int has_sink, double sink, double *out,
                                double *lse) {
    for (int c = 0; c < 512; c++) out[c] = 0.0;
    if (n == 0) {
        *lse = INFINITY;
        return -INFINITY;
    }
    double *lg = (double *)malloc((size_t)n * sizeof(double));
    double mx = -INFINITY;
    for (int64_t t = 0; t < n; t++) {
        double s = 0.0;
        for (int64_t j = 0; j < d; j++) s += (double)q[j] * (double)k[t][j];
        lg[t] = s * scale;
        if (lg[t] > mx) mx = lg[t];
    }
    double sum = 0.0;
    for (int64_t t = 0; t < n; t++) sum += exp(lg[t] - mx);
    *lse = mx + log(sum);
    double f = has_sink ? 1.0 / (1.0 + exp(sink - *lse)) : 1.0;
    for (int64_t t = 0; t < n; t++) {
        double w = exp(lg[t] - *lse) * f;
        for (int c = 0; c < 512; c++) out[c] += w * (double)k[t][c];
    }
    free(lg);
    return mx;
}

/* check_is_allclose over n values (ans float, ref double). Returns 1 if it passes. */
typedef struct fm_cmp {
    int64_t n, bad;
    double sum_ar, sum_aa, sum_rr, worst_abs;
    int pos_mismatch;
} fm_cmp;

static inline void fm_cmp_add(fm_cmp *c, double a, double r, double abs_tol, double rel_tol) {
    c->n++;
    int ca = isnan(a) ? 1 : isinf(a) ? (a > 0 ? 2 : 3) : 0;
    int cr = isnan(r) ? 1 : isinf(r) ? (r > 0 ? 2 : 3) : 0;
    if (ca != cr) {
        c->pos_mismatch++;
        return;
    }
    if (ca) return;
    double e = fabs(a - r);
    if (e > c->worst_abs) c->worst_abs = e;
    if (!(e < abs_tol || e / (fabs(r) + 1e-6) < rel_tol)) c->bad++;
    c->sum_ar += a * r;
    c->sum_aa += a * a;
    c->sum_rr += r * r;
}

static inline double fm_cmp_cos(const fm_cmp *c) {
    if (c->sum_rr < 1e-12) return 0.0;
    return 1.0 - 2.0 * c->sum_ar / (c->sum_aa + c->sum_rr);
}

#define FM_CHECK_CMP(c, cos_tol, what)                                                      \
    do {                                                                                     \
        TS_CHECK_MSG((c).pos_mismatch == 0, "%s: %d inf/NaN position mismatches", what,      \
                     (c).pos_mismatch);                                                      \
        TS_CHECK_MSG((c).bad == 0, "%s: %lld of %lld beyond tolerance (worst abs %.3g)", what, \
                     (long long)(c).bad, (long long)(c).n, (c).worst_abs);                    \
        TS_CHECK_MSG(fm_cmp_cos(&(c)) <= (cos_tol), "%s: cos diff %.3g", what,               \
                     fm_cmp_cos(&(c)));                                                      \
    } while (0)

/* The outputs of ts_flash_mla_with_kvcache for b requests of s_q queries x h_q heads, twice:
 * what a call writes and a first run's copy to compare with. */
typedef struct fm_outs {
    int64_t no, nl;              /* values in out, in lse */
    uint16_t *out, *out0;        /* bf16 [b, s_q, h_q, 512] */
    float *lse, *lse0;           /* f32 [b, h_q, s_q] */
    ts_tensor to, tl, to0, tl0;  /* over out, lse, out0, lse0 */
} fm_outs;

static inline void fm_outs_make(fm_outs *o, int64_t b, int64_t sq, int64_t hq) {
    o->no = b * sq * hq * 512;
    o->nl = b * hq * sq;
    o->out = (uint16_t *)malloc((size_t)o->no * 2);
    o->out0 = (uint16_t *)malloc((size_t)o->no * 2);
    o->lse = (float *)malloc((size_t)o->nl * 4);
    o->lse0 = (float *)malloc((size_t)o->nl * 4);
    o->to = ts_tensor_make(o->out, TS_BF16, 4, (int64_t[]){b, sq, hq, 512});
    o->tl = ts_tensor_3d(o->lse, TS_F32, b, hq, sq);
    o->to0 = ts_tensor_make(o->out0, TS_BF16, 4, (int64_t[]){b, sq, hq, 512});
    o->tl0 = ts_tensor_3d(o->lse0, TS_F32, b, hq, sq);
}

static inline void fm_outs_free(fm_outs *o) {
    free(o->out);
    free(o->out0);
    free(o->lse);
    free(o->lse0);
}

/* One output buffer of a determinism check: live is what the call writes, first receives the
 * first run's bytes (callers compare later results against it). */
typedef struct fm_buf {
    void *live, *first;
    size_t bytes;
    const char *name;
} fm_buf;

/* ts_flash_mla_with_kvcache with fixed arguments, as a run for fm_check_isa_threads */
typedef struct fm_kvcache_run {
    ts_flash_mla_kvcache_args a;
    ts_tensor *out, *lse;
} fm_kvcache_run;

static inline ts_status fm_kvcache_run_fn(void *ctx) {
    fm_kvcache_run *r = (fm_kvcache_run *)ctx;
    return ts_flash_mla_with_kvcache(&r->a, r->out, r->lse);
}

/* Runs run(ctx) under each ISA path this build and CPU can run (ts_test_isas: generic first) at 1, 2 and 3
 * threads, clearing the live buffers before every run so that an unwritten output shows; every
 * run after the first must reproduce its bytes exactly. Restores the thread count and ISA. */
static inline void fm_check_isa_threads(ts_test_ctx *ts_t_, ts_status (*run)(void *ctx),
                                        void *ctx, const fm_buf *bufs, int nbuf) {
    int saved_t = ts_get_num_threads();
    ts_isa saved_isa = ts_get_isa();
    int first = 1;
    int isas[TS_ISA_COUNT_];
    const int nisa = ts_test_isas(isas);
    for (int ii = 0; ii < nisa; ii++) {
        const int isa = isas[ii];
        if (ts_set_isa((ts_isa)isa) != TS_OK) continue;
        for (int t = 1; t <= 3; t++) {
            ts_set_num_threads(t);
            for (int i = 0; i < nbuf; i++) memset(bufs[i].live, 0, bufs[i].bytes);
            TS_CHECK_STATUS(run(ctx), TS_OK);
            for (int i = 0; i < nbuf; i++) {
                if (first)
                    memcpy(bufs[i].first, bufs[i].live, bufs[i].bytes);
                else
                    TS_CHECK_MSG(memcmp(bufs[i].first, bufs[i].live, bufs[i].bytes) == 0,
                                 "%s differs (isa %s, %d threads)", bufs[i].name,
                                 ts_isa_name((ts_isa)isa), t);
            }
            first = 0;
        }
    }
    ts_set_num_threads(saved_t);
    ts_set_isa(saved_isa);
}

#endif
