/* k = 1 on AVX-512: the AVX2 kernels' block scheme (a running vector max and NaN test per
 * block of BLK values; a block whose max beats the best so far is searched for the first lane
 * equal to it) with zmm and compares into mask registers. Equal values resolve to the lowest
 * index and -0 == +0: the same entry as the generic kernels. */
#include "select/topk_internal.h"

#include <immintrin.h>
#include <math.h>

#define BLK 1024
#define PF_BYTES 16384

/* First j in [0, n) (n a multiple of 16) with f[j] == m; one exists. */
static inline int64_t first_eq_ps(const float *f, int64_t n, float m) {
    const __m512 t = _mm512_set1_ps(m);
    for (int64_t j = 0; j < n; j += 16) {
        const unsigned e = (unsigned)_mm512_cmp_ps_mask(_mm512_loadu_ps(f + j), t, _CMP_EQ_OQ);
        if (e) return j + __builtin_ctz(e);
    }
    return n - 1; /* not reached */
}

uint64_t ts__topk_argmax_f32__avx512(const void *x, int64_t n, uint32_t idx0, int *nan) {
    const float *f = (const float *)x;
    float best = -INFINITY;
    int64_t at = -1, i = 0;
    for (; i + BLK <= n; i += BLK) {
        __m512 a0 = _mm512_loadu_ps(f + i), a1 = _mm512_loadu_ps(f + i + 16);
        __m512 a2 = _mm512_loadu_ps(f + i + 32), a3 = _mm512_loadu_ps(f + i + 48);
        /* unordered(a, b): a or b is NaN, two lanes per compare */
        __mmask16 un = _mm512_kor(_mm512_cmp_ps_mask(a0, a1, _CMP_UNORD_Q), _mm512_cmp_ps_mask(a2, a3, _CMP_UNORD_Q));
        for (int64_t j = i + 64; j < i + BLK; j += 64) {
            for (int q = 0; q < 4; q++) _mm_prefetch((const char *)(f + j) + PF_BYTES + 64 * q, _MM_HINT_T0);
            const __m512 v0 = _mm512_loadu_ps(f + j), v1 = _mm512_loadu_ps(f + j + 16);
            const __m512 v2 = _mm512_loadu_ps(f + j + 32), v3 = _mm512_loadu_ps(f + j + 48);
            un = _mm512_kor(un, _mm512_kor(_mm512_cmp_ps_mask(v0, v1, _CMP_UNORD_Q),
                                           _mm512_cmp_ps_mask(v2, v3, _CMP_UNORD_Q)));
            a0 = _mm512_max_ps(a0, v0);
            a1 = _mm512_max_ps(a1, v1);
            a2 = _mm512_max_ps(a2, v2);
            a3 = _mm512_max_ps(a3, v3);
        }
        if (un) {
            *nan = 1;
            return 0;
        }
        const float m = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(a0, a1), _mm512_max_ps(a2, a3)));
        if (m > best || at < 0) { /* strict: an equal max in a later block loses */
            best = m;
            at = i + first_eq_ps(f + i, BLK, m);
        }
    }
    return ts__topk_argmax_f32_tail(f, i, n, best, at, idx0, nan);
}

/* bf16 as signed-order int16 keys (as the dense kernels': |bits| for non-negatives and -0,
 * 0x7fff - bits for the other negatives), 32 per vpmaxsw. NaN keys lie above +inf's (0x7f80)
 * or below -inf's (-32641), so a running min and max of the keys also detect NaN. */
static inline __m512i key32(__m512i v) {
    const __m512i mag = _mm512_set1_epi16(0x7fff), negz = _mm512_set1_epi16((short)0x8000);
    return _mm512_mask_sub_epi16(_mm512_and_si512(v, mag), _mm512_cmpgt_epu16_mask(v, negz), mag, v);
}


static inline int16_t hmax_epi16(__m512i a) {
    __m256i m = _mm256_max_epi16(_mm512_castsi512_si256(a), _mm512_extracti64x4_epi64(a, 1));
    __m128i q = _mm_max_epi16(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
    q = _mm_max_epi16(q, _mm_srli_si128(q, 8));
    q = _mm_max_epi16(q, _mm_srli_si128(q, 4));
    q = _mm_max_epi16(q, _mm_srli_si128(q, 2));
    return (int16_t)_mm_cvtsi128_si32(q);
}

uint64_t ts__topk_argmax_bf16__avx512(const void *x, int64_t n, uint32_t idx0, int *nan) {
    const uint16_t *u = (const uint16_t *)x;
    const __m512i kninf = _mm512_set1_epi16(-32641), kpinf = _mm512_set1_epi16(0x7f80);
    int32_t best = INT32_MIN;
    int64_t at = -1, i = 0;
    for (; i + BLK <= n; i += BLK) {
        __m512i a0 = key32(_mm512_loadu_si512((const void *)(u + i)));
        __m512i a1 = key32(_mm512_loadu_si512((const void *)(u + i + 32)));
        __m512i lo = _mm512_min_epi16(a0, a1);
        for (int64_t j = i + 64; j < i + BLK; j += 64) {
            _mm_prefetch((const char *)(u + j) + PF_BYTES, _MM_HINT_T0);
            _mm_prefetch((const char *)(u + j) + PF_BYTES + 64, _MM_HINT_T0);
            const __m512i v0 = key32(_mm512_loadu_si512((const void *)(u + j)));
            const __m512i v1 = key32(_mm512_loadu_si512((const void *)(u + j + 32)));
            a0 = _mm512_max_epi16(a0, v0);
            a1 = _mm512_max_epi16(a1, v1);
            lo = _mm512_min_epi16(lo, _mm512_min_epi16(v0, v1));
        }
        const __m512i hi = _mm512_max_epi16(a0, a1);
        if (_mm512_cmpgt_epi16_mask(hi, kpinf) | _mm512_cmplt_epi16_mask(lo, kninf)) {
            *nan = 1;
            return 0;
        }
        const int16_t m = hmax_epi16(hi);
        if (m > best) { /* best starts below every key: the first block always enters */
            best = m;
            const __m512i t = _mm512_set1_epi16(m);
            for (int64_t j = i;; j += 32) {
                const uint32_t e = (uint32_t)_mm512_cmpeq_epi16_mask(key32(_mm512_loadu_si512((const void *)(u + j))), t);
                if (e) {
                    at = j + __builtin_ctz(e);
                    break;
                }
            }
        }
    }
    return ts__topk_argmax_bf16_tail(u, i, n, best, at, idx0, nan);
}
