/* f32 dot products (model_kernels.h), AVX-512: the 16 lanes in one zmm per row, eight rows per
 * weight load (eight independent FMA chains, as the AVX2 kernel's 2 x 4); fma in the generic
 * kernel's order (same bits). */
#include "../../model_kernels.h"

#include <immintrin.h>

/* rows r .. r + R - 1 */
static inline __attribute__((always_inline)) void dot_rows(const float *w, int64_t k, const float *x,
                                                           int64_t ldx, float *y, int64_t ldy, int R) {
    const int64_t k16 = k & ~(int64_t)15;
    __m512 a[8];
    for (int q = 0; q < R; q++) a[q] = _mm512_setzero_ps();
    for (int64_t i = 0; i < k16; i += 16) {
        const __m512 wv = _mm512_loadu_ps(w + i);
        for (int q = 0; q < R; q++) a[q] = _mm512_fmadd_ps(_mm512_loadu_ps(x + q * ldx + i), wv, a[q]);
    }
    for (int q = 0; q < R; q++) {
        float acc[16];
        _mm512_storeu_ps(acc, a[q]);
        const float *xr = x + q * ldx;
        int l = 0;
        for (int64_t i = k16; i < k; i++, l++) acc[l] = __builtin_fmaf(xr[i], w[i], acc[l]);
        y[q * ldy] = ts__model_dot_reduce16(acc);
    }
}

void ts__model_dot_rows__avx512(const float *w, int64_t k, const float *x, int64_t m, int64_t ldx,
                                float *y, int64_t ldy) {
    int64_t r = 0;
    for (; r + 8 <= m; r += 8) dot_rows(w, k, x + r * ldx, ldx, y + r * ldy, ldy, 8);
    for (; r + 4 <= m; r += 4) dot_rows(w, k, x + r * ldx, ldx, y + r * ldy, ldy, 4);
    for (; r < m; r++) dot_rows(w, k, x + r * ldx, ldx, y + r * ldy, ldy, 1);
}
