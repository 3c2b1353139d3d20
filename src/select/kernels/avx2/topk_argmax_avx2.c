/* k = 1 on AVX2: per block of BLK values only a running vector max (and a NaN test), so the
 * pass runs at load speed; a block whose max beats the best so far (about ln(blocks) times for
 * random rows, every block for ascending ones: still from L1) is searched for the first lane
 * equal to its max. Equal values therefore resolve to the lowest index, and -0 == +0 as in the
 * entry keys: the same entry as the generic kernels. */
#include "select/topk_internal.h"

#include <immintrin.h>
#include <math.h>

#define BLK 1024 /* values per block: 4 KB of f32, in L1 for the search */
/* Software prefetch this many bytes ahead: on top of the hardware prefetcher it lifts a stream
 * from DRAM (measured 64 x 129280 f32: 1.58 - 2.0 -> 1.36 - 1.51 ms, min of 30; 8 KB ahead
 * was no better than none) and costs two uops per 128 bytes from cache. */
#define PF_BYTES 16384

static inline float hmax_ps(__m256 a) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

/* First j in [0, n) (n a multiple of 8) with f[j] == m; one exists. */
static inline int64_t first_eq_ps(const float *f, int64_t n, float m) {
    const __m256 t = _mm256_set1_ps(m);
    for (int64_t j = 0; j < n; j += 8) {
        unsigned e = (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(f + j), t, _CMP_EQ_OQ));
        if (e) return j + __builtin_ctz(e);
    }
    return n - 1; /* not reached */
}

uint64_t ts__topk_argmax_f32__avx2(const void *x, int64_t n, uint32_t idx0, int *nan) {
    const float *f = (const float *)x;
    float best = -INFINITY;
    int64_t at = -1, i = 0;
    for (; i + BLK <= n; i += BLK) {
        __m256 a0 = _mm256_loadu_ps(f + i), a1 = _mm256_loadu_ps(f + i + 8);
        __m256 a2 = _mm256_loadu_ps(f + i + 16), a3 = _mm256_loadu_ps(f + i + 24);
        /* unordered(a, b): a or b is NaN, two lanes per compare */
        __m256 un = _mm256_or_ps(_mm256_cmp_ps(a0, a1, _CMP_UNORD_Q), _mm256_cmp_ps(a2, a3, _CMP_UNORD_Q));
        for (int64_t j = i + 32; j < i + BLK; j += 32) {
            _mm_prefetch((const char *)(f + j) + PF_BYTES, _MM_HINT_T0);
            _mm_prefetch((const char *)(f + j) + PF_BYTES + 64, _MM_HINT_T0);
            const __m256 v0 = _mm256_loadu_ps(f + j), v1 = _mm256_loadu_ps(f + j + 8);
            const __m256 v2 = _mm256_loadu_ps(f + j + 16), v3 = _mm256_loadu_ps(f + j + 24);
            un = _mm256_or_ps(un, _mm256_or_ps(_mm256_cmp_ps(v0, v1, _CMP_UNORD_Q),
                                               _mm256_cmp_ps(v2, v3, _CMP_UNORD_Q)));
            a0 = _mm256_max_ps(a0, v0);
            a1 = _mm256_max_ps(a1, v1);
            a2 = _mm256_max_ps(a2, v2);
            a3 = _mm256_max_ps(a3, v3);
        }
        if (!_mm256_testz_ps(un, un)) {
            *nan = 1;
            return 0;
        }
        const float m = hmax_ps(_mm256_max_ps(_mm256_max_ps(a0, a1), _mm256_max_ps(a2, a3)));
        if (m > best || at < 0) { /* strict: an equal max in a later block loses */
            best = m;
            at = i + first_eq_ps(f + i, BLK, m);
        }
    }
    return ts__topk_argmax_f32_tail(f, i, n, best, at, idx0, nan);
}

/* bf16 as signed-order int16 keys (-0 -> +0, magnitude bits of negatives flipped): 16 per
 * vpmaxsw. NaN keys lie above +inf's (0x7f80) or below -inf's (-32641), so a running min and
 * max of the keys also detect NaN. */
static inline __m256i key16(__m256i v) {
    const __m256i negz = _mm256_set1_epi16((short)0x8000), mag = _mm256_set1_epi16(0x7fff);
    v = _mm256_andnot_si256(_mm256_cmpeq_epi16(v, negz), v);
    return _mm256_xor_si256(v, _mm256_and_si256(_mm256_srai_epi16(v, 15), mag));
}

static inline int16_t hmax_epi16(__m256i a) {
    __m128i m = _mm_max_epi16(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    m = _mm_max_epi16(m, _mm_srli_si128(m, 8));
    m = _mm_max_epi16(m, _mm_srli_si128(m, 4));
    m = _mm_max_epi16(m, _mm_srli_si128(m, 2));
    return (int16_t)_mm_cvtsi128_si32(m);
}

static inline int16_t hmin_epi16(__m256i a) {
    __m128i m = _mm_min_epi16(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    m = _mm_min_epi16(m, _mm_srli_si128(m, 8));
    m = _mm_min_epi16(m, _mm_srli_si128(m, 4));
    m = _mm_min_epi16(m, _mm_srli_si128(m, 2));
    return (int16_t)_mm_cvtsi128_si32(m);
}


uint64_t ts__topk_argmax_bf16__avx2(const void *x, int64_t n, uint32_t idx0, int *nan) {
    const uint16_t *u = (const uint16_t *)x;
    const int16_t key_ninf = -32641, key_pinf = 0x7f80;
    int32_t best = INT32_MIN;
    int64_t at = -1, i = 0;
    for (; i + BLK <= n; i += BLK) {
        __m256i a0 = key16(_mm256_loadu_si256((const __m256i *)(u + i)));
        __m256i a1 = key16(_mm256_loadu_si256((const __m256i *)(u + i + 16)));
        __m256i lo = _mm256_min_epi16(a0, a1);
        for (int64_t j = i + 32; j < i + BLK; j += 32) {
            _mm_prefetch((const char *)(u + j) + PF_BYTES, _MM_HINT_T0);
            const __m256i v0 = key16(_mm256_loadu_si256((const __m256i *)(u + j)));
            const __m256i v1 = key16(_mm256_loadu_si256((const __m256i *)(u + j + 16)));
            a0 = _mm256_max_epi16(a0, v0);
            a1 = _mm256_max_epi16(a1, v1);
            lo = _mm256_min_epi16(lo, _mm256_min_epi16(v0, v1));
        }
        const int16_t m = hmax_epi16(_mm256_max_epi16(a0, a1));
        if (m > key_pinf || hmin_epi16(lo) < key_ninf) {
            *nan = 1;
            return 0;
        }
        if (m > best) { /* best starts below every key: the first block always enters */
            best = m;
            const __m256i t = _mm256_set1_epi16(m);
            for (int64_t j = i;; j += 16) {
                unsigned e = (unsigned)_mm256_movemask_epi8(
                    _mm256_cmpeq_epi16(key16(_mm256_loadu_si256((const __m256i *)(u + j))), t));
                if (e) {
                    at = j + (__builtin_ctz(e) >> 1);
                    break;
                }
            }
        }
    }
    return ts__topk_argmax_bf16_tail(u, i, n, best, at, idx0, nan);
}
