/* AVX2 bulk converters: the vector primitives of cvt_avx2_inl.h over whole blocks, the
 * generic kernel for the tail (and for E5M6 / ue8m0, which are rare and small). */
#include "numerics/cvt_kernels.h"
#include "numerics/kernels/avx2/cvt_avx2_inl.h"

#include <string.h>

#define GEN(p) ts__cvt_kernels_generic[p]

static void ts__cvt_f32_e4m3__avx2(const void *src, void *dst, int64_t n) {
    const float *s = (const float *)src;
    uint8_t *d = (uint8_t *)dst;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        _mm256_storeu_si256((__m256i *)(d + i),
                            ts__avx2_e4m3x32_encode(_mm256_loadu_ps(s + i), _mm256_loadu_ps(s + i + 8),
                                                    _mm256_loadu_ps(s + i + 16),
                                                    _mm256_loadu_ps(s + i + 24)));
    GEN(TS__CVT_F32_E4M3)(s + i, d + i, n - i);
}

static void ts__cvt_bf16_e4m3__avx2(const void *src, void *dst, int64_t n) {
    const uint16_t *s = (const uint16_t *)src;
    uint8_t *d = (uint8_t *)dst;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256 x[4];
        for (int k = 0; k < 4; k++)
            x[k] = ts__avx2_bf16_decode(_mm_loadu_si128((const __m128i *)(s + i + 8 * k)));
        _mm256_storeu_si256((__m256i *)(d + i), ts__avx2_e4m3x32_encode(x[0], x[1], x[2], x[3]));
    }
    GEN(TS__CVT_BF16_E4M3)(s + i, d + i, n - i);
}

static void ts__cvt_f32_e5m2__avx2(const void *src, void *dst, int64_t n) {
    const float *s = (const float *)src;
    uint8_t *d = (uint8_t *)dst;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i c[4];
        for (int k = 0; k < 4; k++) c[k] = ts__avx2_e5m2_codes(_mm256_loadu_ps(s + i + 8 * k), 0);
        _mm256_storeu_si256((__m256i *)(d + i), ts__avx2_pack_u8x32(c[0], c[1], c[2], c[3]));
    }
    GEN(TS__CVT_F32_E5M2)(s + i, d + i, n - i);
}

static void ts__cvt_f32_bf16__avx2(const void *src, void *dst, int64_t n) {
    const float *s = (const float *)src;
    uint16_t *d = (uint16_t *)dst;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i c0 = ts__avx2_bf16_codes(_mm256_loadu_ps(s + i));
        __m256i c1 = ts__avx2_bf16_codes(_mm256_loadu_ps(s + i + 8));
        _mm256_storeu_si256((__m256i *)(d + i), ts__avx2_pack_u16x16(c0, c1));
    }
    GEN(TS__CVT_F32_BF16)(s + i, d + i, n - i);
}

static void ts__cvt_f32_f16__avx2(const void *src, void *dst, int64_t n) {
    const float *s = (const float *)src;
    uint16_t *d = (uint16_t *)dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i), ts__avx2_f16_encode(_mm256_loadu_ps(s + i)));
    GEN(TS__CVT_F32_F16)(s + i, d + i, n - i);
}

static void ts__cvt_f32_e2m1x2__avx2(const void *src, void *dst, int64_t n) {
    const float *s = (const float *)src;
    uint8_t *d = (uint8_t *)dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint32_t w = ts__avx2_e2m1_pack8(ts__avx2_e2m1_codes(_mm256_loadu_ps(s + i)));
        memcpy(d + i / 2, &w, 4);
    }
    GEN(TS__CVT_F32_E2M1X2)(s + i, d + i / 2, n - i);
}

static void ts__cvt_bf16_e2m1x2__avx2(const void *src, void *dst, int64_t n) {
    const uint16_t *s = (const uint16_t *)src;
    uint8_t *d = (uint8_t *)dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = ts__avx2_bf16_decode(_mm_loadu_si128((const __m128i *)(s + i)));
        uint32_t w = ts__avx2_e2m1_pack8(ts__avx2_e2m1_codes(x));
        memcpy(d + i / 2, &w, 4);
    }
    GEN(TS__CVT_BF16_E2M1X2)(s + i, d + i / 2, n - i);
}

static void ts__cvt_e4m3_f32__avx2(const void *src, void *dst, int64_t n) {
    const uint8_t *s = (const uint8_t *)src;
    float *d = (float *)dst;
    int64_t i = 0;
    /* a few values through the generic kernel first, so the 32-byte stores (4 bytes out per
     * byte in: the heavier stream) don't split cache lines */
    if (((uintptr_t)d & 3) == 0) {
        int64_t head = (int64_t)((32 - ((uintptr_t)d & 31)) & 31) / 4;
        i = head < n ? head : n;
        GEN(TS__CVT_E4M3_F32)(s, d, i);
    }
    __m256 o[8];
    for (; i + 64 <= n; i += 64) {
        __m256i b0 = _mm256_loadu_si256((const __m256i *)(s + i));
        __m256i b1 = _mm256_loadu_si256((const __m256i *)(s + i + 32));
        /* Same bits either way; the branch only skips the NaN fix-up when there is none. */
        if (!ts__avx2_e4m3x64_has_nan(b0, b1)) {
            for (int k = 0; k < 4; k++)
                ts__avx2_e4m3x16_decode_nonan(_mm_loadu_si128((const __m128i *)(s + i + 16 * k)), o + 2 * k);
        } else {
            for (int k = 0; k < 4; k++)
                ts__avx2_e4m3x16_decode(_mm_loadu_si128((const __m128i *)(s + i + 16 * k)), o + 2 * k);
        }
        for (int k = 0; k < 8; k++) _mm256_storeu_ps(d + i + 8 * k, o[k]);
    }
    for (; i + 16 <= n; i += 16) {
        ts__avx2_e4m3x16_decode(_mm_loadu_si128((const __m128i *)(s + i)), o);
        _mm256_storeu_ps(d + i, o[0]);
        _mm256_storeu_ps(d + i + 8, o[1]);
    }
    GEN(TS__CVT_E4M3_F32)(s + i, d + i, n - i);
}

static void ts__cvt_e5m2_f32__avx2(const void *src, void *dst, int64_t n) {
    const uint8_t *s = (const uint8_t *)src;
    float *d = (float *)dst;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m128i b = _mm_loadu_si128((const __m128i *)(s + i));
        _mm256_storeu_ps(d + i, ts__avx2_e5m2_decode(_mm256_cvtepu8_epi32(b)));
        _mm256_storeu_ps(d + i + 8,
                         ts__avx2_e5m2_decode(_mm256_cvtepu8_epi32(_mm_srli_si128(b, 8))));
    }
    GEN(TS__CVT_E5M2_F32)(s + i, d + i, n - i);
}

static void ts__cvt_e2m1x2_f32__avx2(const void *src, void *dst, int64_t n) {
    const uint8_t *s = (const uint8_t *)src;
    float *d = (float *)dst;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256 o[4];
        ts__avx2_e2m1x32_decode(_mm_loadu_si128((const __m128i *)(s + i / 2)), o);
        for (int k = 0; k < 4; k++) _mm256_storeu_ps(d + i + 8 * k, o[k]);
    }
    GEN(TS__CVT_E2M1X2_F32)(s + i / 2, d + i, n - i);
}

static void ts__cvt_bf16_f32__avx2(const void *src, void *dst, int64_t n) {
    const uint16_t *s = (const uint16_t *)src;
    float *d = (float *)dst;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i h = _mm256_loadu_si256((const __m256i *)(s + i));
        /* unpack with zeros puts each bf16 in the top half of a dword; lanes stay in order
         * within 128-bit halves, so a lane swap restores element order */
        __m256i lo = _mm256_unpacklo_epi16(_mm256_setzero_si256(), h);
        __m256i hi = _mm256_unpackhi_epi16(_mm256_setzero_si256(), h);
        _mm256_storeu_si256((__m256i *)(d + i), _mm256_permute2x128_si256(lo, hi, 0x20));
        _mm256_storeu_si256((__m256i *)(d + i + 8), _mm256_permute2x128_si256(lo, hi, 0x31));
    }
    GEN(TS__CVT_BF16_F32)(s + i, d + i, n - i);
}

static void ts__cvt_f16_f32__avx2(const void *src, void *dst, int64_t n) {
    const uint16_t *s = (const uint16_t *)src;
    float *d = (float *)dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i, ts__avx2_f16_decode(_mm_loadu_si128((const __m128i *)(s + i))));
    GEN(TS__CVT_F16_F32)(s + i, d + i, n - i);
}

static void ts__cvt_f32_e5m6x8__avx2(const void *src, void *dst, int64_t n) {
    GEN(TS__CVT_F32_E5M6X8)(src, dst, n);
}
static void ts__cvt_e5m6x8_f32__avx2(const void *src, void *dst, int64_t n) {
    GEN(TS__CVT_E5M6X8_F32)(src, dst, n);
}
static void ts__cvt_ue8m0_f32__avx2(const void *src, void *dst, int64_t n) {
    GEN(TS__CVT_UE8M0_F32)(src, dst, n);
}

const ts__cvt_fn ts__cvt_kernels_avx2[TS__CVT_PAIR_COUNT] = {
    [TS__CVT_F32_BF16] = ts__cvt_f32_bf16__avx2,
    [TS__CVT_F32_F16] = ts__cvt_f32_f16__avx2,
    [TS__CVT_F32_E4M3] = ts__cvt_f32_e4m3__avx2,
    [TS__CVT_F32_E5M2] = ts__cvt_f32_e5m2__avx2,
    [TS__CVT_F32_E2M1X2] = ts__cvt_f32_e2m1x2__avx2,
    [TS__CVT_F32_E5M6X8] = ts__cvt_f32_e5m6x8__avx2,
    [TS__CVT_BF16_F32] = ts__cvt_bf16_f32__avx2,
    [TS__CVT_F16_F32] = ts__cvt_f16_f32__avx2,
    [TS__CVT_E4M3_F32] = ts__cvt_e4m3_f32__avx2,
    [TS__CVT_E5M2_F32] = ts__cvt_e5m2_f32__avx2,
    [TS__CVT_E2M1X2_F32] = ts__cvt_e2m1x2_f32__avx2,
    [TS__CVT_E5M6X8_F32] = ts__cvt_e5m6x8_f32__avx2,
    [TS__CVT_UE8M0_F32] = ts__cvt_ue8m0_f32__avx2,
    [TS__CVT_BF16_E4M3] = ts__cvt_bf16_e4m3__avx2,
    [TS__CVT_BF16_E2M1X2] = ts__cvt_bf16_e2m1x2__avx2,
};
