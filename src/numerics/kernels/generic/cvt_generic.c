/* Portable bulk converters: loops over the scalar reference, which is the definition. */
#include "numerics/cvt_kernels.h"
#include "tilestack/numerics.h"

#include <string.h>

#define TS__CVT_LOOP(name, TI, TO, fn)                                   \
    static void name(const void *src, void *dst, int64_t n) {           \
        const TI *s = (const TI *)src;                                   \
        TO *d = (TO *)dst;                                               \
        for (int64_t i = 0; i < n; i++) d[i] = fn(s[i]);                 \
    }

TS__CVT_LOOP(ts__cvt_f32_bf16__generic, float, uint16_t, ts_f32_to_bf16)
TS__CVT_LOOP(ts__cvt_f32_f16__generic, float, uint16_t, ts_f32_to_f16)
TS__CVT_LOOP(ts__cvt_f32_e4m3__generic, float, uint8_t, ts_f32_to_e4m3)
TS__CVT_LOOP(ts__cvt_f32_e5m2__generic, float, uint8_t, ts_f32_to_e5m2)
TS__CVT_LOOP(ts__cvt_bf16_f32__generic, uint16_t, float, ts_bf16_to_f32)
TS__CVT_LOOP(ts__cvt_f16_f32__generic, uint16_t, float, ts_f16_to_f32)
TS__CVT_LOOP(ts__cvt_e4m3_f32__generic, uint8_t, float, ts_e4m3_to_f32)
TS__CVT_LOOP(ts__cvt_e5m2_f32__generic, uint8_t, float, ts_e5m2_to_f32)
TS__CVT_LOOP(ts__cvt_ue8m0_f32__generic, uint8_t, float, ts_ue8m0_to_f32)

static inline uint8_t bf16_to_e4m3(uint16_t h) { return ts_f32_to_e4m3(ts_bf16_to_f32(h)); }
TS__CVT_LOOP(ts__cvt_bf16_e4m3__generic, uint16_t, uint8_t, bf16_to_e4m3)

static void ts__cvt_f32_e2m1x2__generic(const void *src, void *dst, int64_t n) {
    const float *s = (const float *)src;
    uint8_t *d = (uint8_t *)dst;
    for (int64_t i = 0; i < n / 2; i++)
        d[i] = (uint8_t)(ts_f32_to_e2m1(s[2 * i]) | (ts_f32_to_e2m1(s[2 * i + 1]) << 4));
}

static void ts__cvt_bf16_e2m1x2__generic(const void *src, void *dst, int64_t n) {
    const uint16_t *s = (const uint16_t *)src;
    uint8_t *d = (uint8_t *)dst;
    for (int64_t i = 0; i < n / 2; i++)
        d[i] = (uint8_t)(ts_f32_to_e2m1(ts_bf16_to_f32(s[2 * i])) |
                         (ts_f32_to_e2m1(ts_bf16_to_f32(s[2 * i + 1])) << 4));
}

static void ts__cvt_e2m1x2_f32__generic(const void *src, void *dst, int64_t n) {
    const uint8_t *s = (const uint8_t *)src;
    float *d = (float *)dst;
    for (int64_t i = 0; i < n / 2; i++) {
        d[2 * i] = ts_e2m1_to_f32(s[i] & 0xF);
        d[2 * i + 1] = ts_e2m1_to_f32(s[i] >> 4);
    }
}

/* The packed stream is read and written through memcpy: words need not be aligned. */
static void ts__cvt_f32_e5m6x8__generic(const void *src, void *dst, int64_t n) {
    const float *s = (const float *)src;
    uint8_t *d = (uint8_t *)dst;
    for (int64_t g = 0; g < n / 8; g++) {
        uint16_t v[8];
        uint32_t w[3];
        for (int j = 0; j < 8; j++) v[j] = ts_f32_to_e5m6(s[8 * g + j]);
        ts_e5m6_pack8(v, w);
        memcpy(d + 12 * g, w, 12);
    }
}

static void ts__cvt_e5m6x8_f32__generic(const void *src, void *dst, int64_t n) {
    const uint8_t *s = (const uint8_t *)src;
    float *d = (float *)dst;
    for (int64_t g = 0; g < n / 8; g++) {
        uint16_t v[8];
        uint32_t w[3];
        memcpy(w, s + 12 * g, 12);
        ts_e5m6_unpack8(w, v);
        for (int j = 0; j < 8; j++) d[8 * g + j] = ts_e5m6_to_f32(v[j]);
    }
}

const ts__cvt_fn ts__cvt_kernels_generic[TS__CVT_PAIR_COUNT] = {
    [TS__CVT_F32_BF16] = ts__cvt_f32_bf16__generic,
    [TS__CVT_F32_F16] = ts__cvt_f32_f16__generic,
    [TS__CVT_F32_E4M3] = ts__cvt_f32_e4m3__generic,
    [TS__CVT_F32_E5M2] = ts__cvt_f32_e5m2__generic,
    [TS__CVT_F32_E2M1X2] = ts__cvt_f32_e2m1x2__generic,
    [TS__CVT_F32_E5M6X8] = ts__cvt_f32_e5m6x8__generic,
    [TS__CVT_BF16_F32] = ts__cvt_bf16_f32__generic,
    [TS__CVT_F16_F32] = ts__cvt_f16_f32__generic,
    [TS__CVT_E4M3_F32] = ts__cvt_e4m3_f32__generic,
    [TS__CVT_E5M2_F32] = ts__cvt_e5m2_f32__generic,
    [TS__CVT_E2M1X2_F32] = ts__cvt_e2m1x2_f32__generic,
    [TS__CVT_E5M6X8_F32] = ts__cvt_e5m6x8_f32__generic,
    [TS__CVT_UE8M0_F32] = ts__cvt_ue8m0_f32__generic,
    [TS__CVT_BF16_E4M3] = ts__cvt_bf16_e4m3__generic,
    [TS__CVT_BF16_E2M1X2] = ts__cvt_bf16_e2m1x2__generic,
};
