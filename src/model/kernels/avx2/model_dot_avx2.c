/* f32 dot products (model_kernels.h), AVX2: lanes 0-7 and 8-15 in two vectors per row, four
 * rows per weight load; fma in the generic kernel's order (same bits). */
#include "../../model_kernels.h"

#include <immintrin.h>

void ts__model_dot_rows__avx2(const float *w, int64_t k, const float *x, int64_t m, int64_t ldx,
                              float *y, int64_t ldy) {
    const int64_t k16 = k & ~(int64_t)15;
    int64_t r = 0;
    for (; r + 4 <= m; r += 4) {
        const float *xr[4] = {x + r * ldx, x + (r + 1) * ldx, x + (r + 2) * ldx, x + (r + 3) * ldx};
        __m256 a[4], b[4];
        for (int q = 0; q < 4; q++) a[q] = b[q] = _mm256_setzero_ps();
        for (int64_t i = 0; i < k16; i += 16) {
            const __m256 w0 = _mm256_loadu_ps(w + i), w1 = _mm256_loadu_ps(w + i + 8);
            for (int q = 0; q < 4; q++) {
                a[q] = _mm256_fmadd_ps(_mm256_loadu_ps(xr[q] + i), w0, a[q]);
                b[q] = _mm256_fmadd_ps(_mm256_loadu_ps(xr[q] + i + 8), w1, b[q]);
            }
        }
        for (int q = 0; q < 4; q++) {
            float acc[16];
            _mm256_storeu_ps(acc, a[q]);
            _mm256_storeu_ps(acc + 8, b[q]);
            int l = 0;
            for (int64_t i = k16; i < k; i++, l++) acc[l] = __builtin_fmaf(xr[q][i], w[i], acc[l]);
            y[(r + q) * ldy] = ts__model_dot_reduce16(acc);
        }
    }
    for (; r < m; r++) {
        const float *xr = x + r * ldx;
        __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
        for (int64_t i = 0; i < k16; i += 16) {
            a = _mm256_fmadd_ps(_mm256_loadu_ps(xr + i), _mm256_loadu_ps(w + i), a);
            b = _mm256_fmadd_ps(_mm256_loadu_ps(xr + i + 8), _mm256_loadu_ps(w + i + 8), b);
        }
        float acc[16];
        _mm256_storeu_ps(acc, a);
        _mm256_storeu_ps(acc + 8, b);
        int l = 0;
        for (int64_t i = k16; i < k; i++, l++) acc[l] = __builtin_fmaf(xr[i], w[i], acc[l]);
        y[r * ldy] = ts__model_dot_reduce16(acc);
    }
}
