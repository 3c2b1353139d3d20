/* AVX2 combine row kernels: 16 values per step, same bits as the generic ones (an f32 add
 * is exact-rounded either way; the bf16 rounding is the same integer recipe). */
#include "ep/ep_kernels.h"

#include <immintrin.h>

static inline __m256 load8(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

void ts__ep_acc_bf16__avx2(float *acc, const uint16_t *p, int64_t n, int first) {
    int64_t j = 0;
    if (first) {
        const __m256 z = _mm256_setzero_ps();
        for (; j + 16 <= n; j += 16) {
            _mm256_storeu_ps(acc + j, _mm256_add_ps(z, load8(p + j)));
            _mm256_storeu_ps(acc + j + 8, _mm256_add_ps(z, load8(p + j + 8)));
        }
    } else {
        for (; j + 16 <= n; j += 16) {
            _mm256_storeu_ps(acc + j, _mm256_add_ps(_mm256_loadu_ps(acc + j), load8(p + j)));
            _mm256_storeu_ps(acc + j + 8, _mm256_add_ps(_mm256_loadu_ps(acc + j + 8), load8(p + j + 8)));
        }
    }
    if (j < n) ts__ep_acc_bf16__generic(acc + j, p + j, n - j, first);
}

static inline __m256i round8(__m256 a) {
    const __m256i u = _mm256_castps_si256(a);
    const __m256i hi = _mm256_srli_epi32(u, 16);
    const __m256i rne =
        _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)),
                                           _mm256_and_si256(hi, _mm256_set1_epi32(1))),
                          16);
    const __m256i nan = _mm256_or_si256(_mm256_and_si256(hi, _mm256_set1_epi32(0x8000)), _mm256_set1_epi32(0x7FC0));
    /* |u| > inf bits: a signed compare is right, both sides are non-negative */
    const __m256i is_nan =
        _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)), _mm256_set1_epi32(0x7F800000));
    return _mm256_blendv_epi8(rne, nan, is_nan);
}

void ts__ep_store_bf16__avx2(uint16_t *o, const float *acc, int64_t n) {
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        const __m256i lo = round8(_mm256_loadu_ps(acc + j)), hi = round8(_mm256_loadu_ps(acc + j + 8));
        /* values are <= 0xFFFF, so the unsigned saturating pack is exact; fix the lane order */
        const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8);
        _mm256_storeu_si256((__m256i *)(o + j), packed);
    }
    if (j < n) ts__ep_store_bf16__generic(o + j, acc + j, n - j);
}
