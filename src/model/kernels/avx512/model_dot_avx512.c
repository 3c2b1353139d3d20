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

/* ---- four weight rows at once (prefill chunks: m >= 4) ----
 * A 4 x 4 block of (weight row, x row) sums in 16 zmm: per 16 values 4 weight and 4 x loads
 * feed 16 FMAs (the one-row kernel above needs R + 1 loads for R), so the block runs at the
 * FMA rate instead of the load rate. Each sum is the same lane chain as above; the 16 sums
 * are then reduced together by the pairwise tree of ts__model_dot_reduce16, one level per
 * shuffle pair (lanes i and i + 8, then i and i + 4, i and i + 2, i and i + 1, lower index
 * first), so the bits are the generic kernel's. */

/* a[o], o = 4 j + q (weight row j, x row q) -> lanes 4 q + j of the result. */
static inline __attribute__((always_inline)) __m512 reduce16x16(const __m512 a[16]) {
    __m512 l1[8], l2[4], l3[2];
    for (int p = 0; p < 8; p++) /* t[i] = a[i] + a[i + 8]: outputs 2p | 2p + 1 */
        l1[p] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * p], a[2 * p + 1], 0x44),
                              _mm512_shuffle_f32x4(a[2 * p], a[2 * p + 1], 0xEE));
    for (int q = 0; q < 4; q++) /* u[i] = t[i] + t[i + 4]: one output per 128-bit lane */
        l2[q] = _mm512_add_ps(_mm512_shuffle_f32x4(l1[2 * q], l1[2 * q + 1], 0x88),
                              _mm512_shuffle_f32x4(l1[2 * q], l1[2 * q + 1], 0xDD));
    for (int r = 0; r < 2; r++) /* v[i] = u[i] + u[i + 2] */
        l3[r] = _mm512_add_ps(_mm512_shuffle_ps(l2[2 * r], l2[2 * r + 1], 0x44),
                              _mm512_shuffle_ps(l2[2 * r], l2[2 * r + 1], 0xEE));
    /* v[0] + v[1]: 128-bit lane q holds outputs q, 4 + q, 8 + q, 12 + q */
    return _mm512_add_ps(_mm512_shuffle_ps(l3[0], l3[1], 0x88), _mm512_shuffle_ps(l3[0], l3[1], 0xDD));
}

void ts__model_dot_4w__avx512(const float *w, int64_t k, const float *x, int64_t m, int64_t ldx,
                              float *y, int64_t ldy) {
    const int64_t k16 = k & ~(int64_t)15;
    const __mmask16 tail = (__mmask16)((1u << (k - k16)) - 1);
    int64_t r = 0;
    for (; r + 4 <= m; r += 4) {
        const float *xr = x + r * ldx;
        __m512 a[16];
        for (int o = 0; o < 16; o++) a[o] = _mm512_setzero_ps();
        for (int64_t i = 0; i < k16; i += 16) {
            __m512 xv[4];
            for (int q = 0; q < 4; q++) xv[q] = _mm512_loadu_ps(xr + q * ldx + i);
            for (int j = 0; j < 4; j++) {
                const __m512 wv = _mm512_loadu_ps(w + j * k + i);
                for (int q = 0; q < 4; q++) a[4 * j + q] = _mm512_fmadd_ps(xv[q], wv, a[4 * j + q]);
            }
        }
        if (tail) /* the k % 16 tail into lanes 0.., the other lanes untouched */
            for (int j = 0; j < 4; j++) {
                const __m512 wv = _mm512_maskz_loadu_ps(tail, w + j * k + k16);
                for (int q = 0; q < 4; q++)
                    a[4 * j + q] = _mm512_mask3_fmadd_ps(
                        _mm512_maskz_loadu_ps(tail, xr + q * ldx + k16), wv, a[4 * j + q], tail);
            }
        const __m512 s = reduce16x16(a);
        _mm_storeu_ps(y + r * ldy, _mm512_extractf32x4_ps(s, 0));
        _mm_storeu_ps(y + (r + 1) * ldy, _mm512_extractf32x4_ps(s, 1));
        _mm_storeu_ps(y + (r + 2) * ldy, _mm512_extractf32x4_ps(s, 2));
        _mm_storeu_ps(y + (r + 3) * ldy, _mm512_extractf32x4_ps(s, 3));
    }
    for (int j = 0; j < 4 && r < m; j++)
        ts__model_dot_rows__avx512(w + j * k, k, x + r * ldx, m - r, ldx, y + r * ldy + j, ldy);
}
