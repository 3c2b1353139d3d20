/* MQA logits kernels, AVX-512. A zmm holds the 16 heads of one pass (one slab row of qt), so
 * the micro-tile is four passes x 6 keys (24 zmm accumulators, 4 loads + 6 broadcasts per 24
 * FMAs; 2 passes x 6 keys, the AVX2 shape widened, would be 8 loads per 12 FMAs, which this
 * core runs at ~83% of its FMA peak); rests take 3 or 2 passes, a single pass 16 heads x 12
 * keys. Every lane is still one (head, key) scalar fmaf chain along D, and the epilogue adds
 * the relu'd heads into the 8 lane partials in the canonical order (per key: pass p's heads
 * 0..7, then 8..15, then pass p + 1's), with ymm FMAs on the two halves; the key decoder does
 * the generic decode 32 values a step: the same bits as the generic and AVX2 kernels. */
#include "attention/mqa_logits_internal.h"

#include <immintrin.h>

#define AI static inline __attribute__((always_inline))

/* part[key] = fmaf(relu(x) halves, w halves, part[key]) in the canonical order. */
AI __m256 epi_pass(__m256 p, __m512 x, __m512 w) {
    const __m512 r = _mm512_max_ps(x, _mm512_setzero_ps()); /* NaN and -0 give +0 */
    p = _mm256_fmadd_ps(_mm512_castps512_ps256(r), _mm512_castps512_ps256(w), p);
    return _mm256_fmadd_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(r), 1)),
                           _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(w), 1)), p);
}

/* np passes (1..4, adjacent slabs) x nk keys (np * nk <= 24); w: the passes' weights. */
AI void tile(int np, int nk, const float *slab, int64_t d, const float *w, const float *kp,
             float *part, int first) {
    __m512 c[24];
    for (int i = 0; i < np * nk; i++) c[i] = _mm512_setzero_ps();
    int64_t dd = 0;
    do { /* d >= 32: no zero-trip path (with one, gcc keeps c on the stack) */
        __m512 a[4];
        for (int i = 0; i < np; i++) a[i] = _mm512_load_ps(slab + (i * d + dd) * TS__MQA_HB);
        for (int j = 0; j < nk; j++) {
            __m512 b = _mm512_set1_ps(kp[j * d + dd]);
            for (int i = 0; i < np; i++) c[j * np + i] = _mm512_fmadd_ps(a[i], b, c[j * np + i]);
        }
    } while (++dd < d);
    for (int j = 0; j < nk; j++) {
        __m256 p = first ? _mm256_setzero_ps() : _mm256_load_ps(part + j * 8);
        for (int i = 0; i < np; i++) p = epi_pass(p, c[j * np + i], _mm512_loadu_ps(w + i * TS__MQA_HB));
        _mm256_store_ps(part + j * 8, p);
    }
}

/* One function per shape, register-allocated on its own (see mla_avx512.c). */
#define MQA_SHAPE(NP, NK)                                                                      \
    __attribute__((noinline)) static void tile_##NP##x##NK(const float *slab, int64_t d,       \
                                                           const float *w, const float *kp,   \
                                                           float *part, int first) {          \
        tile(NP, NK, slab, d, w, kp, part, first);                                             \
    }
MQA_SHAPE(4, 6)
MQA_SHAPE(3, 6)
MQA_SHAPE(2, 6)
MQA_SHAPE(1, 12)
MQA_SHAPE(1, 6)

static void heads_avx512(const float *qt, const float *w, int64_t hp, int64_t d, const float *k,
                         int64_t n, float *part, float *v) {
    const int64_t npass = hp / TS__MQA_HB;
    int64_t pass = 0;
    /* groups of 4 passes (64 heads: 4 q loads + 6 broadcasts per 24 FMAs), a rest of 3 or 2
     * (5 as 3 + 2), a lone pass only when there is one in all; passes ascend, so each lane
     * partial still adds its heads in the canonical order */
#define MQA_GROUP(NP)                                                                          \
    do {                                                                                       \
        for (int64_t j = 0; j < n; j += TS__MQA_NR)                                            \
            tile_##NP##x6(qt + pass * d * TS__MQA_HB, d, w + pass * TS__MQA_HB, k + j * d,     \
                          part + j * 8, pass == 0);                                            \
        pass += NP;                                                                            \
    } while (0)
    while (npass - pass >= 4 && npass - pass != 5) MQA_GROUP(4);
    if (npass - pass == 5 || npass - pass == 3) MQA_GROUP(3);
    if (npass - pass == 2) MQA_GROUP(2);
#undef MQA_GROUP
    if (pass < npass) { /* one pass in all (hp = 16) */
        const float *slab = qt + pass * d * TS__MQA_HB;
        int64_t j = 0;
        for (; j + 2 * TS__MQA_NR <= n; j += 2 * TS__MQA_NR)
            tile_1x12(slab, d, w + pass * TS__MQA_HB, k + j * d, part + j * 8, pass == 0);
        for (; j < n; j += TS__MQA_NR)
            tile_1x6(slab, d, w + pass * TS__MQA_HB, k + j * d, part + j * 8, pass == 0);
    }
    for (int64_t j = 0; j < n; j++) {
        __m256 p = _mm256_load_ps(part + j * 8);
        __m128 t = _mm_add_ps(_mm256_castps256_ps128(p), _mm256_extractf128_ps(p, 1));
        __m128 u = _mm_add_ps(t, _mm_movehl_ps(t, t));
        v[j] = _mm_cvtss_f32(_mm_add_ss(u, _mm_shuffle_ps(u, u, 1)));
    }
}

/* 32 e4m3 bytes -> 32 floats, as ts__avx2_e4m3x16_decode: each code placed under the f16
 * exponent / mantissa is its value times 2^-8 (subnormals included), widened exactly by
 * vcvtph2ps; magnitude 0x7F becomes the f16 quiet NaN (sign kept). */
AI void e4m3x32(const uint8_t *src, __m512 out[2]) {
    __m512i t = _mm512_slli_epi16(_mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)src)), 7);
    __m512i h = _mm512_and_si512(t, _mm512_set1_epi16((short)0xBF80));
    __mmask32 nan = _mm512_cmpeq_epi16_mask(_mm512_or_si512(t, _mm512_set1_epi16((short)0xC000)),
                                            _mm512_set1_epi16((short)0xFF80));
    h = _mm512_mask_add_epi16(h, nan, h, _mm512_set1_epi16(0x7E00 - 0x3F80));
    const __m512 k = _mm512_set1_ps(256.0f);
    out[0] = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(h)), k);
    out[1] = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1)), k);
}

/* 16 e2m1x2 bytes -> 32 floats (element 2i in the low nibble of byte i; code 8 gives +0). */
AI void e2m1x32(const uint8_t *src, __m512 out[2]) {
    const __m512 tab = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, 0.0f,
                                      -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
    __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)src));
    /* 16-bit halves of each dword: the low nibble (element 2i), then the high one (2i + 1) */
    __m512i c = _mm512_or_si512(_mm512_and_si512(b, _mm512_set1_epi32(0x0F)),
                                _mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0xF0)), 12));
    out[0] = _mm512_permutexvar_ps(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(c)), tab);
    out[1] = _mm512_permutexvar_ps(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(c, 1)), tab);
}

static void decode_avx512(const uint8_t *src, int64_t row_bytes, int64_t n, int64_t d, int fp4,
                          const float *sf, int64_t sf_ld, float *dst) {
    for (int64_t j = 0; j < n; j++) {
        const uint8_t *s = src + j * row_bytes;
        float *o = dst + j * d;
        for (int64_t b = 0; b < d / 32; b++) {
            __m512 x[2];
            if (fp4)
                e2m1x32(s + b * 16, x);
            else
                e4m3x32(s + b * 32, x);
            if (sf) {
                __m512 m = _mm512_set1_ps(sf[j * sf_ld + b]);
                x[0] = _mm512_mul_ps(x[0], m);
                x[1] = _mm512_mul_ps(x[1], m);
            }
            _mm512_storeu_ps(o + b * 32, x[0]);
            _mm512_storeu_ps(o + b * 32 + 16, x[1]);
        }
    }
}

const ts__mqa_kernels ts__mqa_kernels_avx512 = {"avx512", heads_avx512, decode_avx512};
