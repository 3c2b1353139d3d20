/* mHC's per-element double arithmetic (model_kernels.h), AVX-512: eight doubles per vector,
 * each element's products and sums in the generic code's order with separate multiplies and
 * adds (the build has -ffp-contract=off; no FMA here), the double -> float rounding of
 * vcvtpd2ps (RNE, as the C cast) and ts_f32_to_bf16 of the result: the same bits. */
#include "../../model_kernels.h"

#include "numerics/kernels/avx512/cvt_avx512_inl.h"

#include <immintrin.h>

/* 16 bf16 at p -> two vectors of 8 doubles (exact) */
static inline __attribute__((always_inline)) void load16_pd(const uint16_t *p, __m512d *lo,
                                                           __m512d *hi) {
    const __m512 f = ts__avx512_bf16_decode(_mm256_loadu_si256((const __m256i *)(const void *)p));
    *lo = _mm512_cvtps_pd(_mm512_castps512_ps256(f));
    *hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(f), 1)));
}

/* bf16((float)lo | (float)hi) -> 16 codes at o */
static inline __attribute__((always_inline)) void store16_bf16(uint16_t *o, __m512d lo,
                                                              __m512d hi) {
    const __m512 f = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)),
                                        _mm512_cvtpd_ps(hi), 1);
    _mm256_storeu_si256((__m256i *)(void *)o, _mm512_cvtepi32_epi16(ts__avx512_bf16_codes(f)));
}

void ts__model_hc_post_row__avx512(const uint16_t *f, const uint16_t *X, int64_t hc, int64_t D,
                                   const double *post, const double *comb, uint16_t *out) {
    const int64_t D16 = D & ~(int64_t)15;
    for (int64_t j = 0; j < hc; j++) {
        const __m512d pj = _mm512_set1_pd(post[j]);
        uint16_t *o = out + j * D;
        for (int64_t d = 0; d < D16; d += 16) {
            __m512d lo, hi, xl, xh;
            load16_pd(f + d, &lo, &hi);
            lo = _mm512_mul_pd(pj, lo);
            hi = _mm512_mul_pd(pj, hi);
            for (int64_t i = 0; i < hc; i++) {
                const __m512d c = _mm512_set1_pd(comb[i * hc + j]);
                load16_pd(X + i * D + d, &xl, &xh);
                lo = _mm512_add_pd(lo, _mm512_mul_pd(c, xl));
                hi = _mm512_add_pd(hi, _mm512_mul_pd(c, xh));
            }
            store16_bf16(o + d, lo, hi);
        }
        if (D16 < D) ts__model_hc_post_cols__generic(f, X, hc, D, post, comb, j, D16, D, o);
    }
}

void ts__model_collapse__avx512(const double *pre, const float *x, int64_t hc, int64_t D,
                                uint16_t *y) {
    const int64_t D16 = D & ~(int64_t)15;
    for (int64_t d = 0; d < D16; d += 16) {
        __m512d lo = _mm512_setzero_pd(), hi = lo;
        for (int64_t s = 0; s < hc; s++) {
            const __m512d p = _mm512_set1_pd(pre[s]);
            const __m512d xl = _mm512_cvtps_pd(_mm256_loadu_ps(x + s * D + d));
            const __m512d xh = _mm512_cvtps_pd(_mm256_loadu_ps(x + s * D + d + 8));
            /* acc = pre[0] * x, then acc += pre[s] * x: the first term is no add to +0 */
            lo = s ? _mm512_add_pd(lo, _mm512_mul_pd(p, xl)) : _mm512_mul_pd(p, xl);
            hi = s ? _mm512_add_pd(hi, _mm512_mul_pd(p, xh)) : _mm512_mul_pd(p, xh);
        }
        store16_bf16(y + d, lo, hi);
    }
    if (D16 < D) ts__model_collapse_cols__generic(pre, x, hc, D, D16, D, y);
}
