/* AVX-512 low-latency row kernels: same bits as the generic ones (one FMA per value,
 * lane-wise; the group amax is an integer max of |x| bits, which orders non-NaN values as the
 * float max does and needs no order). Tails are masked steps. */
#include "ep/ep_ll_kernels.h"
#include "numerics/kernels/avx512/cvt_avx512_inl.h"

TS__AVX512_INL void fma_bf16_step(float *acc, const uint16_t *y, __m512 vw, int64_t j, int64_t r) {
    const __mmask16 m = ts__avx512_lanes16(r);
    const __m512 v = ts__avx512_bf16_decode(_mm256_maskz_loadu_epi16(m, y + j));
    _mm512_mask_storeu_ps(acc + j, m, _mm512_fmadd_ps(v, vw, _mm512_maskz_loadu_ps(m, acc + j)));
}

void ts__ep_ll_fma_bf16__avx512(float *acc, const uint16_t *y, float w, int64_t n) {
    const __m512 vw = _mm512_set1_ps(w);
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
        fma_bf16_step(acc, y, vw, j, 16);
        fma_bf16_step(acc, y, vw, j + 16, 16);
    }
    for (; j < n; j += 16) fma_bf16_step(acc, y, vw, j, n - j);
}

TS__AVX512_INL void fma_f32_step(float *acc, const float *y, __m512 vw, int64_t j, int64_t r) {
    const __mmask16 m = ts__avx512_lanes16(r);
    const __m512 v = _mm512_maskz_loadu_ps(m, y + j);
    _mm512_mask_storeu_ps(acc + j, m, _mm512_fmadd_ps(v, vw, _mm512_maskz_loadu_ps(m, acc + j)));
}

void ts__ep_ll_fma_f32__avx512(float *acc, const float *y, float w, int64_t n) {
    const __m512 vw = _mm512_set1_ps(w);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) fma_f32_step(acc, y, vw, j, 16);
    if (j < n) fma_f32_step(acc, y, vw, j, n - j);
}

void ts__ep_ll_cast__avx512(const uint16_t *x, int64_t hidden, int round_scale, uint8_t *q, float *scale_inv) {
    for (int64_t g = 0; g < hidden / 128; g++) {
        const uint16_t *xg = x + g * 128;
        __m512 v[8];
        /* amax starts at upstream's 1e-4 margin; NaN lanes drop out (they never win, as fmaxf) */
        __m512i m = _mm512_castps_si512(_mm512_set1_ps(1e-4f));
        for (int i = 0; i < 8; i++) {
            v[i] = ts__avx512_bf16_decode(_mm256_loadu_si256((const __m256i *)(const void *)(xg + 16 * i)));
            const __m512i a = ts__avx512_absbits(v[i]);
            m = _mm512_mask_max_epu32(m, _mm512_cmple_epu32_mask(a, _mm512_set1_epi32(0x7F800000)), m, a);
        }
        const uint32_t amax = _mm512_reduce_max_epu32(m);
        float scale;
        ts__ep_ll_fp8_scales(((union { uint32_t u; float f; }){amax}).f, round_scale, &scale, &scale_inv[g]);
        const __m512 vs = _mm512_set1_ps(scale);
        for (int i = 0; i < 8; i += 4) {
            const __m512 y[4] = {_mm512_mul_ps(v[i], vs), _mm512_mul_ps(v[i + 1], vs), _mm512_mul_ps(v[i + 2], vs),
                                 _mm512_mul_ps(v[i + 3], vs)};
            _mm512_storeu_si512((void *)(q + g * 128 + 16 * i), ts__avx512_e4m3x64_encode(y, TS__E4M3_SAT));
        }
    }
}
