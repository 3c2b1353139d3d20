/* AVX2 low-latency row kernels: same bits as the generic ones (one FMA per value, lane-wise;
 * the amax reduction is a max, so its order does not matter). */
#include "ep/ep_ll_kernels.h"
#include "numerics/kernels/avx2/cvt_avx2_inl.h"

#include <immintrin.h>

static inline __m256 load_bf16x8(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)), 16));
}

void ts__ep_ll_fma_bf16__avx2(float *acc, const uint16_t *y, float w, int64_t n) {
    const __m256 vw = _mm256_set1_ps(w);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        _mm256_storeu_ps(acc + j, _mm256_fmadd_ps(load_bf16x8(y + j), vw, _mm256_loadu_ps(acc + j)));
        _mm256_storeu_ps(acc + j + 8, _mm256_fmadd_ps(load_bf16x8(y + j + 8), vw, _mm256_loadu_ps(acc + j + 8)));
    }
    if (j < n) ts__ep_ll_fma_bf16__generic(acc + j, y + j, w, n - j);
}

void ts__ep_ll_fma_f32__avx2(float *acc, const float *y, float w, int64_t n) {
    const __m256 vw = _mm256_set1_ps(w);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(acc + j, _mm256_fmadd_ps(_mm256_loadu_ps(y + j), vw, _mm256_loadu_ps(acc + j)));
    if (j < n) ts__ep_ll_fma_f32__generic(acc + j, y + j, w, n - j);
}

void ts__ep_ll_cast__avx2(const uint16_t *x, int64_t hidden, int round_scale, uint8_t *q, float *scale_inv) {
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    for (int64_t g = 0; g < hidden / 128; g++) {
        const uint16_t *xg = x + g * 128;
        __m256 v[16];
        __m256 m = _mm256_set1_ps(1e-4f);
        for (int i = 0; i < 16; i++) {
            v[i] = load_bf16x8(xg + 8 * i);
            /* max(a, m) returns m when a is NaN: NaN never wins, as in the generic path */
            m = _mm256_max_ps(_mm256_and_ps(v[i], absm), m);
        }
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
        float scale;
        ts__ep_ll_fp8_scales(_mm_cvtss_f32(h), round_scale, &scale, &scale_inv[g]);
        const __m256 vs = _mm256_set1_ps(scale);
        for (int i = 0; i < 16; i += 4) {
            const __m256i c = ts__avx2_pack_u8x32(
                ts__avx2_e4m3_sat_codes(_mm256_mul_ps(v[i], vs)), ts__avx2_e4m3_sat_codes(_mm256_mul_ps(v[i + 1], vs)),
                ts__avx2_e4m3_sat_codes(_mm256_mul_ps(v[i + 2], vs)), ts__avx2_e4m3_sat_codes(_mm256_mul_ps(v[i + 3], vs)));
            _mm256_storeu_si256((__m256i *)(void *)(q + g * 128 + 8 * i), c);
        }
    }
}
