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

/* run fn under every (isa, threads) pair and compare the output bytes with the first run */
#define FM_ISA_COUNT 2

#endif
