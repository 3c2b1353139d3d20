/* AVX2 quantiser kernels: bit-identical to kernels/generic/quant_generic.c.
 *
 * The per-token FP8 block is one pass over registers: a 128-value bf16 block is 8 ymm loads,
 * |x| max on the raw 16-bit patterns (integer max orders every non-NaN value and puts NaN
 * last, like the generic path), then widen, scale and encode from the same registers. Blocks
 * that hold inf or NaN take the exact generic route, which keeps the fast path free of NaN
 * fix-ups: with finite x and sf >= amax / 448, every product is finite and at most ~448. */
#include "numerics/quant_kernels.h"
#include "numerics/kernels/avx2/cvt_avx2_inl.h"

#include <immintrin.h>

/* Pack 4 x 8 codes (32-bit lanes, 0..255) into 32 bytes in element order. */
static inline __m256i pack_codes32(__m256i c0, __m256i c1, __m256i c2, __m256i c3) {
    __m256i p01 = _mm256_packus_epi32(c0, c1);
    __m256i p23 = _mm256_packus_epi32(c2, c3);
    __m256i b = _mm256_packus_epi16(p01, p23);
    return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* e4m3 codes of y with NaN lanes forced to 0x7F (the generic ts__enc_e4m3_scaled rule). */
static inline __m256i e4m3_scaled_codes(__m256 y) {
    __m256i c = ts__avx2_e4m3_codes(y);
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(y, y, _CMP_UNORD_Q));
    return _mm256_blendv_epi8(c, _mm256_set1_epi32((int)TS__E4M3_NAN), nan);
}

static inline __m256 bf16x8_to_f32(__m128i h) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline uint32_t hmax_epu16(__m256i v) {
    __m128i m = _mm_max_epu16(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    /* minpos on the complement gives the max */
    m = _mm_xor_si128(m, _mm_set1_epi16(-1));
    return (~(uint32_t)_mm_cvtsi128_si32(_mm_minpos_epu16(m))) & 0xFFFFu;
}

static inline uint32_t hmax_epu32(__m256i v) {
    __m128i m = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
    return (uint32_t)_mm_cvtsi128_si32(m);
}

/* ---- bf16 ---- */

static uint32_t absmax_bf16(const void *x, int64_t n) {
    const uint16_t *p = (const uint16_t *)x;
    const __m256i mask = _mm256_set1_epi16(0x7FFF);
    __m256i m = _mm256_setzero_si256();
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        m = _mm256_max_epu16(m, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(p + j)), mask));
    uint32_t r = hmax_epu16(m);
    for (; j < n; j++) {
        uint32_t a = p[j] & 0x7FFFu;
        r = a > r ? a : r;
    }
    return r << 16;
}

static void enc_e4m3_bf16(const void *x, int64_t n, float inv, uint8_t *q) {
    const uint16_t *p = (const uint16_t *)x;
    const __m256 vi = _mm256_set1_ps(inv);
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
        __m256i c[4];
        for (int t = 0; t < 4; t++) {
            __m256 v = bf16x8_to_f32(_mm_loadu_si128((const __m128i *)(p + j + 8 * t)));
            c[t] = e4m3_scaled_codes(_mm256_mul_ps(v, vi));
        }
        _mm256_storeu_si256((__m256i *)(q + j), pack_codes32(c[0], c[1], c[2], c[3]));
    }
    for (; j < n; j++) q[j] = ts__enc_e4m3_scaled(ts_bf16_to_f32(p[j]) * inv);
}

/* Finite 128-value block entirely in registers. */
static float fp8_block128_bf16(const uint16_t *p, bool ue8m0, uint8_t *q) {
    __m256i r[8];
    const __m256i mask = _mm256_set1_epi16(0x7FFF);
    __m256i m = _mm256_setzero_si256();
    for (int t = 0; t < 8; t++) {
        r[t] = _mm256_loadu_si256((const __m256i *)(p + 16 * t));
        m = _mm256_max_epu16(m, _mm256_and_si256(r[t], mask));
    }
    uint32_t amax = hmax_epu16(m);
    if (amax >= 0x7F80u) return ts__qk_fp8_block_bf16__generic(p, 128, ue8m0, q);
    float sf = ts__fp8_scale(amax << 16, ue8m0);
    const __m256 vi = _mm256_set1_ps(1.0f / sf);
    for (int t = 0; t < 8; t += 2) {
        __m256 v0 = bf16x8_to_f32(_mm256_castsi256_si128(r[t]));
        __m256 v1 = bf16x8_to_f32(_mm256_extracti128_si256(r[t], 1));
        __m256 v2 = bf16x8_to_f32(_mm256_castsi256_si128(r[t + 1]));
        __m256 v3 = bf16x8_to_f32(_mm256_extracti128_si256(r[t + 1], 1));
        __m256i c0 = ts__avx2_e4m3_codes(_mm256_mul_ps(v0, vi));
        __m256i c1 = ts__avx2_e4m3_codes(_mm256_mul_ps(v1, vi));
        __m256i c2 = ts__avx2_e4m3_codes(_mm256_mul_ps(v2, vi));
        __m256i c3 = ts__avx2_e4m3_codes(_mm256_mul_ps(v3, vi));
        _mm256_storeu_si256((__m256i *)(q + 16 * t), pack_codes32(c0, c1, c2, c3));
    }
    return sf;
}

static float fp8_block_bf16(const void *x, int64_t n, bool ue8m0, uint8_t *q) {
    if (n == 128) return fp8_block128_bf16((const uint16_t *)x, ue8m0, q);
    float sf = ts__fp8_scale(absmax_bf16(x, n), ue8m0);
    enc_e4m3_bf16(x, n, 1.0f / sf, q);
    return sf;
}

/* ---- f32 ---- */

static uint32_t absmax_f32(const void *x, int64_t n) {
    const uint32_t *p = (const uint32_t *)x;
    const __m256i mask = _mm256_set1_epi32(0x7FFFFFFF);
    __m256i m = _mm256_setzero_si256();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        m = _mm256_max_epu32(m, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(p + j)), mask));
    uint32_t r = hmax_epu32(m);
    for (; j < n; j++) {
        uint32_t a = p[j] & 0x7FFFFFFFu;
        r = a > r ? a : r;
    }
    return r;
}

static void enc_e4m3_f32(const void *x, int64_t n, float inv, uint8_t *q) {
    const float *p = (const float *)x;
    const __m256 vi = _mm256_set1_ps(inv);
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
        __m256i c[4];
        for (int t = 0; t < 4; t++)
            c[t] = e4m3_scaled_codes(_mm256_mul_ps(_mm256_loadu_ps(p + j + 8 * t), vi));
        _mm256_storeu_si256((__m256i *)(q + j), pack_codes32(c[0], c[1], c[2], c[3]));
    }
    for (; j < n; j++) q[j] = ts__enc_e4m3_scaled(p[j] * inv);
}

static float fp8_block_f32(const void *x, int64_t n, bool ue8m0, uint8_t *q) {
    float sf = ts__fp8_scale(absmax_f32(x, n), ue8m0);
    enc_e4m3_f32(x, n, 1.0f / sf, q);
    return sf;
}

/* ---- f16: amax on raw half bits, encode after F16C widening ---- */

static uint32_t absmax_f16(const void *x, int64_t n) {
    const uint16_t *p = (const uint16_t *)x;
    const __m256i mask = _mm256_set1_epi16(0x7FFF);
    __m256i m = _mm256_setzero_si256();
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        m = _mm256_max_epu16(m, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(p + j)), mask));
    uint32_t r = hmax_epu16(m);
    for (; j < n; j++) {
        uint32_t a = p[j] & 0x7FFFu;
        r = a > r ? a : r;
    }
    /* |x| bits order the same in f16 and f32, so widening the max gives the f32 max. */
    return ts__bits_from_f32(ts_f16_to_f32((uint16_t)r));
}

static void enc_e4m3_f16(const void *x, int64_t n, float inv, uint8_t *q) {
    const uint16_t *p = (const uint16_t *)x;
    const __m256 vi = _mm256_set1_ps(inv);
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
        __m256i c[4];
        for (int t = 0; t < 4; t++) {
            __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + j + 8 * t)));
            c[t] = e4m3_scaled_codes(_mm256_mul_ps(v, vi));
        }
        _mm256_storeu_si256((__m256i *)(q + j), pack_codes32(c[0], c[1], c[2], c[3]));
    }
    for (; j < n; j++) q[j] = ts__enc_e4m3_scaled(ts_f16_to_f32(p[j]) * inv);
}

static float fp8_block_f16(const void *x, int64_t n, bool ue8m0, uint8_t *q) {
    float sf = ts__fp8_scale(absmax_f16(x, n), ue8m0);
    enc_e4m3_f16(x, n, 1.0f / sf, q);
    return sf;
}

const ts__quant_kernels ts__quant_kernels_avx2[TS__QSRC_COUNT] = {
    [TS__QSRC_BF16] = {absmax_bf16, ts__qk_absmax_cols_bf16__generic, enc_e4m3_bf16,
                       ts__qk_enc_e4m3_cols_bf16__generic, fp8_block_bf16},
    [TS__QSRC_F16] = {absmax_f16, ts__qk_absmax_cols_f16__generic, enc_e4m3_f16,
                      ts__qk_enc_e4m3_cols_f16__generic, fp8_block_f16},
    [TS__QSRC_F32] = {absmax_f32, ts__qk_absmax_cols_f32__generic, enc_e4m3_f32,
                      ts__qk_enc_e4m3_cols_f32__generic, fp8_block_f32},
};
