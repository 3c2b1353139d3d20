/* AVX-512 bulk converters: the 16-lane primitives of cvt_avx512_inl.h over whole blocks, and
 * the same block step once more with lane masks for the tail (no scalar tail). E5M6 and ue8m0
 * stay on the generic kernels, as on the AVX2 path (rare and small). */
#include "numerics/cvt_kernels.h"
#include "numerics/kernels/avx512/cvt_avx512_inl.h"

#define GEN(p) ts__cvt_kernels_generic[p]

/* Runs STEP(s, d, i, r) on blocks of W values, then once on the r < W left: the step masks its
 * loads and stores with r, and in the main loop r == W is a constant, so the masks fold away. */
#define TS__BLOCKS(W, STEP)                                       \
    do {                                                          \
        int64_t i_ = 0;                                           \
        for (; i_ + (W) <= n; i_ += (W)) STEP(s, d, i_, (W));     \
        if (i_ < n) STEP(s, d, i_, n - i_);                       \
    } while (0)

/* ---- f32 / bf16 -> e4m3: 64 values per step ---- */

TS__AVX512_INL void f32_e4m3_step(const float *s, uint8_t *d, int64_t i, int64_t r) {
    __m512 x[4];
    for (int k = 0; k < 4; k++) x[k] = _mm512_maskz_loadu_ps(ts__avx512_lanes16(r - 16 * k), s + i + 16 * k);
    _mm512_mask_storeu_epi8(d + i, ts__avx512_lanes64(r), ts__avx512_e4m3x64_encode(x, TS__E4M3_PLAIN));
}
static void ts__cvt_f32_e4m3__avx512(const void *src, void *dst, int64_t n) {
    const float *s = (const float *)src;
    uint8_t *d = (uint8_t *)dst;
    TS__BLOCKS(64, f32_e4m3_step);
}

TS__AVX512_INL __m512 bf16x16_load(const uint16_t *p, int64_t r) {
    return ts__avx512_bf16_decode(_mm256_maskz_loadu_epi16(ts__avx512_lanes16(r), p));
}

TS__AVX512_INL void bf16_e4m3_step(const uint16_t *s, uint8_t *d, int64_t i, int64_t r) {
    __m512 x[4];
    for (int k = 0; k < 4; k++) x[k] = bf16x16_load(s + i + 16 * k, r - 16 * k);
    _mm512_mask_storeu_epi8(d + i, ts__avx512_lanes64(r), ts__avx512_e4m3x64_encode(x, TS__E4M3_PLAIN));
}
static void ts__cvt_bf16_e4m3__avx512(const void *src, void *dst, int64_t n) {
    const uint16_t *s = (const uint16_t *)src;
    uint8_t *d = (uint8_t *)dst;
    TS__BLOCKS(64, bf16_e4m3_step);
}

/* ---- f32 -> e5m2, bf16, f16 ---- */

TS__AVX512_INL void f32_e5m2_step(const float *s, uint8_t *d, int64_t i, int64_t r) {
    __m512i c[4];
    for (int k = 0; k < 4; k++)
        c[k] = ts__avx512_e5m2_codes(_mm512_maskz_loadu_ps(ts__avx512_lanes16(r - 16 * k), s + i + 16 * k), 0);
    _mm512_mask_storeu_epi8(d + i, ts__avx512_lanes64(r), ts__avx512_pack_u8x64(c));
}
static void ts__cvt_f32_e5m2__avx512(const void *src, void *dst, int64_t n) {
    const float *s = (const float *)src;
    uint8_t *d = (uint8_t *)dst;
    TS__BLOCKS(64, f32_e5m2_step);
}

TS__AVX512_INL void f32_bf16_step(const float *s, uint16_t *d, int64_t i, int64_t r) {
    const __m512i lo = ts__avx512_bf16_codes(_mm512_maskz_loadu_ps(ts__avx512_lanes16(r), s + i));
    const __m512i hi = ts__avx512_bf16_codes(_mm512_maskz_loadu_ps(ts__avx512_lanes16(r - 16), s + i + 16));
    _mm512_mask_storeu_epi16(d + i, ts__avx512_lanes32(r), ts__avx512_pack_u16x32(lo, hi));
}
static void ts__cvt_f32_bf16__avx512(const void *src, void *dst, int64_t n) {
    const float *s = (const float *)src;
    uint16_t *d = (uint16_t *)dst;
    TS__BLOCKS(32, f32_bf16_step);
}

TS__AVX512_INL void f32_f16_step(const float *s, uint16_t *d, int64_t i, int64_t r) {
    const __mmask16 m = ts__avx512_lanes16(r);
    _mm256_mask_storeu_epi16(d + i, m, ts__avx512_f16_encode(_mm512_maskz_loadu_ps(m, s + i)));
}
static void ts__cvt_f32_f16__avx512(const void *src, void *dst, int64_t n) {
    const float *s = (const float *)src;
    uint16_t *d = (uint16_t *)dst;
    TS__BLOCKS(16, f32_f16_step);
}

/* ---- f32 / bf16 -> e2m1x2: 32 values (16 bytes) per step; n is even ---- */

TS__AVX512_INL void f32_e2m1_step(const float *s, uint8_t *d, int64_t i, int64_t r) {
    const __m128i lo = ts__avx512_e2m1_pack16(ts__avx512_e2m1_codes(_mm512_maskz_loadu_ps(ts__avx512_lanes16(r), s + i), 0));
    const __m128i hi = ts__avx512_e2m1_pack16(
        ts__avx512_e2m1_codes(_mm512_maskz_loadu_ps(ts__avx512_lanes16(r - 16), s + i + 16), 0));
    _mm_mask_storeu_epi8(d + i / 2, ts__avx512_lanes16(r / 2), _mm_unpacklo_epi64(lo, hi));
}
static void ts__cvt_f32_e2m1x2__avx512(const void *src, void *dst, int64_t n) {
    const float *s = (const float *)src;
    uint8_t *d = (uint8_t *)dst;
    TS__BLOCKS(32, f32_e2m1_step);
}

TS__AVX512_INL void bf16_e2m1_step(const uint16_t *s, uint8_t *d, int64_t i, int64_t r) {
    const __m128i lo = ts__avx512_e2m1_pack16(ts__avx512_e2m1_codes(bf16x16_load(s + i, r), 0));
    const __m128i hi = ts__avx512_e2m1_pack16(ts__avx512_e2m1_codes(bf16x16_load(s + i + 16, r - 16), 0));
    _mm_mask_storeu_epi8(d + i / 2, ts__avx512_lanes16(r / 2), _mm_unpacklo_epi64(lo, hi));
}
static void ts__cvt_bf16_e2m1x2__avx512(const void *src, void *dst, int64_t n) {
    const uint16_t *s = (const uint16_t *)src;
    uint8_t *d = (uint8_t *)dst;
    TS__BLOCKS(32, bf16_e2m1_step);
}

/* ---- decoders ---- */

/* 64 codes per step: one NaN test of the 64 bytes; when none holds a NaN code (real data), the
 * lanes need no fix-up. Same bits either way. */
TS__AVX512_INL void e4m3_f32_step(const uint8_t *s, float *d, int64_t i, int64_t r) {
    const __m512i b = _mm512_maskz_loadu_epi8(ts__avx512_lanes64(r), s + i);
    const __mmask64 nan = _mm512_cmpeq_epi8_mask(_mm512_or_si512(b, _mm512_set1_epi8((char)0x80)),
                                                 _mm512_set1_epi8((char)0xFF));
    const __m512 k256 = _mm512_set1_ps(256.0f);
    const __m128i q[4] = {_mm512_castsi512_si128(b), _mm512_extracti32x4_epi32(b, 1),
                          _mm512_extracti32x4_epi32(b, 2), _mm512_extracti32x4_epi32(b, 3)};
    for (int k = 0; k < 4; k++) {
        __m512 v = ts__avx512_e4m3x16_mul(q[k], k256);
        if (nan) v = ts__avx512_qnan_keep_sign(v, (__mmask16)(nan >> (16 * k)));
        _mm512_mask_storeu_ps(d + i + 16 * k, ts__avx512_lanes16(r - 16 * k), v);
    }
}
static void ts__cvt_e4m3_f32__avx512(const void *src, void *dst, int64_t n) {
    const uint8_t *s = (const uint8_t *)src;
    float *d = (float *)dst;
    TS__BLOCKS(64, e4m3_f32_step);
}

TS__AVX512_INL void e5m2_f32_step(const uint8_t *s, float *d, int64_t i, int64_t r) {
    const __m128i b = _mm_maskz_loadu_epi8(ts__avx512_lanes16(r), s + i);
    _mm512_mask_storeu_ps(d + i, ts__avx512_lanes16(r), ts__avx512_e5m2x16_decode(b));
}
static void ts__cvt_e5m2_f32__avx512(const void *src, void *dst, int64_t n) {
    const uint8_t *s = (const uint8_t *)src;
    float *d = (float *)dst;
    TS__BLOCKS(16, e5m2_f32_step);
}

TS__AVX512_INL void e2m1_f32_step(const uint8_t *s, float *d, int64_t i, int64_t r) {
    __m512 o[2];
    ts__avx512_e2m1x32_decode(_mm_maskz_loadu_epi8(ts__avx512_lanes16(r / 2), s + i / 2), o, 0);
    _mm512_mask_storeu_ps(d + i, ts__avx512_lanes16(r), o[0]);
    _mm512_mask_storeu_ps(d + i + 16, ts__avx512_lanes16(r - 16), o[1]);
}
static void ts__cvt_e2m1x2_f32__avx512(const void *src, void *dst, int64_t n) {
    const uint8_t *s = (const uint8_t *)src;
    float *d = (float *)dst;
    TS__BLOCKS(32, e2m1_f32_step);
}

TS__AVX512_INL void bf16_f32_step(const uint16_t *s, float *d, int64_t i, int64_t r) {
    _mm512_mask_storeu_ps(d + i, ts__avx512_lanes16(r), bf16x16_load(s + i, r));
    _mm512_mask_storeu_ps(d + i + 16, ts__avx512_lanes16(r - 16), bf16x16_load(s + i + 16, r - 16));
}
static void ts__cvt_bf16_f32__avx512(const void *src, void *dst, int64_t n) {
    const uint16_t *s = (const uint16_t *)src;
    float *d = (float *)dst;
    TS__BLOCKS(32, bf16_f32_step);
}

TS__AVX512_INL void f16_f32_step(const uint16_t *s, float *d, int64_t i, int64_t r) {
    const __mmask16 m = ts__avx512_lanes16(r);
    _mm512_mask_storeu_ps(d + i, m, ts__avx512_f16_decode(_mm256_maskz_loadu_epi16(m, s + i)));
}
static void ts__cvt_f16_f32__avx512(const void *src, void *dst, int64_t n) {
    const uint16_t *s = (const uint16_t *)src;
    float *d = (float *)dst;
    TS__BLOCKS(16, f16_f32_step);
}

static void ts__cvt_f32_e5m6x8__avx512(const void *src, void *dst, int64_t n) {
    GEN(TS__CVT_F32_E5M6X8)(src, dst, n);
}
static void ts__cvt_e5m6x8_f32__avx512(const void *src, void *dst, int64_t n) {
    GEN(TS__CVT_E5M6X8_F32)(src, dst, n);
}
static void ts__cvt_ue8m0_f32__avx512(const void *src, void *dst, int64_t n) {
    GEN(TS__CVT_UE8M0_F32)(src, dst, n);
}

const ts__cvt_fn ts__cvt_kernels_avx512[TS__CVT_PAIR_COUNT] = {
    [TS__CVT_F32_BF16] = ts__cvt_f32_bf16__avx512,
    [TS__CVT_F32_F16] = ts__cvt_f32_f16__avx512,
    [TS__CVT_F32_E4M3] = ts__cvt_f32_e4m3__avx512,
    [TS__CVT_F32_E5M2] = ts__cvt_f32_e5m2__avx512,
    [TS__CVT_F32_E2M1X2] = ts__cvt_f32_e2m1x2__avx512,
    [TS__CVT_F32_E5M6X8] = ts__cvt_f32_e5m6x8__avx512,
    [TS__CVT_BF16_F32] = ts__cvt_bf16_f32__avx512,
    [TS__CVT_F16_F32] = ts__cvt_f16_f32__avx512,
    [TS__CVT_E4M3_F32] = ts__cvt_e4m3_f32__avx512,
    [TS__CVT_E5M2_F32] = ts__cvt_e5m2_f32__avx512,
    [TS__CVT_E2M1X2_F32] = ts__cvt_e2m1x2_f32__avx512,
    [TS__CVT_E5M6X8_F32] = ts__cvt_e5m6x8_f32__avx512,
    [TS__CVT_UE8M0_F32] = ts__cvt_ue8m0_f32__avx512,
    [TS__CVT_BF16_E4M3] = ts__cvt_bf16_e4m3__avx512,
    [TS__CVT_BF16_E2M1X2] = ts__cvt_bf16_e2m1x2__avx512,
};
