/* f32 dot products with double accumulation (model_kernels.h), AVX2: lanes 0-3 and 4-7 in two
 * double vectors, products and sums unfused as in the generic code (same bits). */
#include "../../model_kernels.h"

#include <immintrin.h>

void ts__model_dot_rows__avx2(const float *w, int64_t k, const float *x, int64_t m, int64_t ldx,
                              float *y, int64_t ldy) {
    const int64_t k8 = k & ~(int64_t)7;
    int64_t r = 0;
    /* two rows at a time share each weight load */
    for (; r + 2 <= m; r += 2) {
        const float *x0 = x + r * ldx, *x1 = x0 + ldx;
        __m256d a0 = _mm256_setzero_pd(), b0 = _mm256_setzero_pd();
        __m256d a1 = _mm256_setzero_pd(), b1 = _mm256_setzero_pd();
        for (int64_t i = 0; i < k8; i += 8) {
            const __m256 wv = _mm256_loadu_ps(w + i);
            const __m256d wl = _mm256_cvtps_pd(_mm256_castps256_ps128(wv));
            const __m256d wh = _mm256_cvtps_pd(_mm256_extractf128_ps(wv, 1));
            const __m256 xv0 = _mm256_loadu_ps(x0 + i), xv1 = _mm256_loadu_ps(x1 + i);
            a0 = _mm256_add_pd(a0, _mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(xv0)), wl));
            b0 = _mm256_add_pd(b0, _mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(xv0, 1)), wh));
            a1 = _mm256_add_pd(a1, _mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(xv1)), wl));
            b1 = _mm256_add_pd(b1, _mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(xv1, 1)), wh));
        }
        double acc[2][8];
        _mm256_storeu_pd(acc[0], a0);
        _mm256_storeu_pd(acc[0] + 4, b0);
        _mm256_storeu_pd(acc[1], a1);
        _mm256_storeu_pd(acc[1] + 4, b1);
        for (int q = 0; q < 2; q++) {
            const float *xr = q ? x1 : x0;
            double *a = acc[q];
            int l = 0;
            for (int64_t i = k8; i < k; i++, l++) a[l] += (double)xr[i] * (double)w[i];
            y[(r + q) * ldy] = (float)(((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])));
        }
    }
    if (r < m) ts__model_dot_rows__generic(w, k, x + r * ldx, m - r, ldx, y + r * ldy, ldy);
}
