/* ts_convert: every ISA path (generic, AVX2, AVX-512), every thread count 1..4, odd lengths and unaligned
 * pointers, all bit-identical to the scalar reference; and bad-input codes. */
#include "tilestack/numerics.h"
#include "ts_prng.h"
#include "ts_test.h"

#include <stdlib.h>

typedef struct { ts_dtype s, d; int sw, dw; } pair_t; /* bytes per value x2 (packed e2m1 = 1) */
static const pair_t k_pairs[] = {
    {TS_F32, TS_BF16, 8, 4},    {TS_F32, TS_F16, 8, 4},     {TS_F32, TS_E4M3, 8, 2},
    {TS_F32, TS_E5M2, 8, 2},    {TS_F32, TS_E2M1X2, 8, 1},  {TS_F32, TS_E5M6X8, 8, 3},
    {TS_BF16, TS_F32, 4, 8},    {TS_F16, TS_F32, 4, 8},     {TS_E4M3, TS_F32, 2, 8},
    {TS_E5M2, TS_F32, 2, 8},    {TS_E2M1X2, TS_F32, 1, 8},  {TS_E5M6X8, TS_F32, 3, 8},
    {TS_UE8M0, TS_F32, 2, 8},   {TS_BF16, TS_E4M3, 4, 2},   {TS_BF16, TS_E2M1X2, 4, 1},
};

static float bf(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* Scalar reference for n values of a pair. */
static void reference(const pair_t *p, const void *src, void *dst, int64_t n) {
    const float *sf = src;
    const uint16_t *s16 = src;
    const uint8_t *s8 = src;
    float *df = dst;
    uint16_t *d16 = dst;
    uint8_t *d8 = dst;
    for (int64_t i = 0; i < n; i++) {
        float x = p->s == TS_F32 ? sf[i] : p->s == TS_BF16 ? ts_bf16_to_f32(s16[i]) : 0.0f;
        switch (p->d) {
        case TS_BF16: d16[i] = ts_f32_to_bf16(x); break;
        case TS_F16: d16[i] = ts_f32_to_f16(x); break;
        case TS_E4M3: d8[i] = ts_f32_to_e4m3(x); break;
        case TS_E5M2: d8[i] = ts_f32_to_e5m2(x); break;
        case TS_E2M1X2:
            if (i % 2 == 0) d8[i / 2] = ts_f32_to_e2m1(x);
            else d8[i / 2] |= (uint8_t)(ts_f32_to_e2m1(x) << 4);
            break;
        case TS_E5M6X8:
            if (i % 8 == 7) {
                uint16_t v[8];
                uint32_t w[3];
                for (int j = 0; j < 8; j++) v[j] = ts_f32_to_e5m6(sf[i - 7 + j]);
                ts_e5m6_pack8(v, w);
                memcpy(d8 + (i - 7) / 8 * 12, w, 12);
            }
            break;
        case TS_F32:
            switch (p->s) {
            case TS_BF16: df[i] = ts_bf16_to_f32(s16[i]); break;
            case TS_F16: df[i] = ts_f16_to_f32(s16[i]); break;
            case TS_E4M3: df[i] = ts_e4m3_to_f32(s8[i]); break;
            case TS_E5M2: df[i] = ts_e5m2_to_f32(s8[i]); break;
            case TS_UE8M0: df[i] = ts_ue8m0_to_f32(s8[i]); break;
            case TS_E2M1X2: df[i] = ts_e2m1_to_f32((uint8_t)(s8[i / 2] >> (4 * (i % 2)))); break;
            case TS_E5M6X8: {
                uint32_t w[3];
                uint16_t v[8];
                memcpy(w, s8 + i / 8 * 12, 12);
                ts_e5m6_unpack8(w, v);
                df[i] = ts_e5m6_to_f32(v[i % 8]);
                break;
            }
            default: break;
            }
            break;
        default: break;
        }
    }
}

/* Source data: random bit patterns with specials mixed in; f32 sources also get values
 * near the small formats' ranges so rounding paths are exercised, not only NaN/huge. */
static void fill_src(ts_prng *p, const pair_t *pr, unsigned char *buf, int64_t n) {
    size_t bytes = (size_t)(n * pr->sw / 2);
    for (size_t i = 0; i < bytes; i++) buf[i] = (unsigned char)ts_prng_u32(p);
    if (pr->s == TS_F32) {
        float *f = (float *)buf;
        static const uint32_t sp[] = {0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000,
                                      0xFF800001, 0x00000001, 0x43E80000, 0x41200000};
        for (int64_t i = 0; i < n; i++) {
            uint32_t r = ts_prng_u32(p);
            if (r % 4 == 0) f[i] = ts_prng_uniform(p) * (float)(1 << (r >> 8) % 20) * 0x1p-12f;
            else if (r % 4 == 1) f[i] = bf(sp[(r >> 8) % 9]);
            else if (r % 4 == 2) f[i] = ts_prng_uniform(p) * 8.0f;
        }
    }
}

TS_TEST(convert_bulk_matches_scalar) {
    /* every tail length 0..40 of the 16- to 64-value SIMD steps, then longer runs */
    int64_t lens[41 + 11];
    for (int i = 0; i <= 40; i++) lens[i] = i;
    static const int64_t longer[] = {63, 64, 65, 96, 127, 129, 200, 1000, 4104, 40000, 100008};
    memcpy(lens + 41, longer, sizeof longer);
    ts_prng p = ts_prng_seed(42);
    int saved = ts_get_num_threads();
    ts_isa saved_isa = ts_get_isa();
    int isas[TS_ISA_COUNT_];
    const int nisa = ts_test_isas(isas); /* every runnable path: generic, avx2, avx512, ... */
    size_t cap = 100008 * 8 + 64;
    (void)cap;
    unsigned char *src = malloc(cap), *ref = malloc(cap), *out = malloc(cap);
    for (size_t pi = 0; pi < sizeof k_pairs / sizeof k_pairs[0]; pi++) {
        const pair_t *pr = &k_pairs[pi];
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            int64_t n = lens[li];
            if ((pr->s == TS_E5M6X8 || pr->d == TS_E5M6X8) && n % 8) continue;
            if ((pr->s == TS_E2M1X2 || pr->d == TS_E2M1X2) && n % 2) continue;
            int mis = (int)(li % 3); /* element-aligned, but not vector-aligned, offsets */
            unsigned char *s = src + 4 * mis, *o = out + 4 * (mis ^ 1);
            fill_src(&p, pr, s, n);
            size_t obytes = (size_t)(n * pr->dw / 2);
            memset(ref, 0xA5, obytes);
            reference(pr, s, ref, n);
            for (int ii = 0; ii < nisa; ii++) {
                if (ts_set_isa((ts_isa)isas[ii]) != TS_OK) continue;
                for (int t = 1; t <= 4; t++) {
                    ts_set_num_threads(t);
                    memset(o, 0x5A, obytes + 1);
                    TS_CHECK_STATUS(ts_convert(s, pr->s, o, pr->d, n), TS_OK);
                    int bad = memcmp(o, ref, obytes) != 0;
                    TS_CHECK_MSG(!bad, "%s->%s n=%lld isa=%s threads=%d differs from scalar",
                                 ts_dtype_name(pr->s), ts_dtype_name(pr->d), (long long)n,
                                 ts_isa_name((ts_isa)isas[ii]), t);
                    TS_CHECK_MSG(o[obytes] == 0x5A, "%s->%s n=%lld wrote past the end",
                                 ts_dtype_name(pr->s), ts_dtype_name(pr->d), (long long)n);
                }
            }
        }
    }
    ts_set_isa(saved_isa);
    ts_set_num_threads(saved);
    free(src);
    free(ref);
    free(out);
}

/* Every code of every 8/16-bit source format through each path. */
TS_TEST(convert_bulk_exhaustive_decode) {
    uint16_t *codes = malloc(65536 * 2);
    for (uint32_t i = 0; i < 65536; i++) codes[i] = (uint16_t)i;
    float *ref = malloc(65536 * 4), *out = malloc(65536 * 4);
    uint8_t c8[256];
    for (int i = 0; i < 256; i++) c8[i] = (uint8_t)i;
    ts_isa saved_isa = ts_get_isa();
    int isas[TS_ISA_COUNT_];
    const int nisa = ts_test_isas(isas);
    for (int ii = 0; ii < nisa; ii++) {
        if (ts_set_isa((ts_isa)isas[ii]) != TS_OK) continue;
        for (uint32_t i = 0; i < 65536; i++) ref[i] = ts_bf16_to_f32((uint16_t)i);
        TS_CHECK_STATUS(ts_convert(codes, TS_BF16, out, TS_F32, 65536), TS_OK);
        TS_CHECK(!memcmp(ref, out, 65536 * 4));
        for (uint32_t i = 0; i < 65536; i++) ref[i] = ts_f16_to_f32((uint16_t)i);
        TS_CHECK_STATUS(ts_convert(codes, TS_F16, out, TS_F32, 65536), TS_OK);
        TS_CHECK(!memcmp(ref, out, 65536 * 4));
        for (int i = 0; i < 256; i++) ref[i] = ts_e4m3_to_f32((uint8_t)i);
        TS_CHECK_STATUS(ts_convert(c8, TS_E4M3, out, TS_F32, 256), TS_OK);
        TS_CHECK(!memcmp(ref, out, 256 * 4));
        for (int i = 0; i < 256; i++) ref[i] = ts_e5m2_to_f32((uint8_t)i);
        TS_CHECK_STATUS(ts_convert(c8, TS_E5M2, out, TS_F32, 256), TS_OK);
        TS_CHECK(!memcmp(ref, out, 256 * 4));
        for (int i = 0; i < 512; i++) ref[i] = ts_e2m1_to_f32((uint8_t)(c8[i / 2] >> (4 * (i % 2))));
        TS_CHECK_STATUS(ts_convert(c8, TS_E2M1X2, out, TS_F32, 512), TS_OK);
        TS_CHECK(!memcmp(ref, out, 512 * 4));
        /* every bf16 value encoded through the bf16 -> e4m3 / e2m1x2 paths */
        uint8_t *e = (uint8_t *)ref, *g = (uint8_t *)out;
        for (uint32_t i = 0; i < 65536; i++) e[i] = ts_f32_to_e4m3(ts_bf16_to_f32((uint16_t)i));
        TS_CHECK_STATUS(ts_convert(codes, TS_BF16, g, TS_E4M3, 65536), TS_OK);
        TS_CHECK(!memcmp(e, g, 65536));
        for (uint32_t i = 0; i < 65536; i += 2)
            e[i / 2] = (uint8_t)(ts_f32_to_e2m1(ts_bf16_to_f32((uint16_t)i)) |
                                 ts_f32_to_e2m1(ts_bf16_to_f32((uint16_t)(i + 1))) << 4);
        TS_CHECK_STATUS(ts_convert(codes, TS_BF16, g, TS_E2M1X2, 65536), TS_OK);
        TS_CHECK(!memcmp(e, g, 32768));
    }
    ts_set_isa(saved_isa);
    free(codes);
    free(ref);
    free(out);
}

/* The AVX2 e4m3 paths pack and clamp 32 lanes at a time and peel the decode's destination to
 * 32 bytes: every code at every destination offset, and f32 inputs at and one ulp either side
 * of every e4m3 rounding midpoint (ties, the 464 overflow edge, the subnormal range), plus
 * inf, NaNs whose int32 view is barely negative, -0 and f32 denormals, both signs. */
TS_TEST(convert_bulk_e4m3_edges) {
    ts_isa saved_isa = ts_get_isa();
    uint8_t c8[256 + 8];
    float out[256 + 8], ref[256];
    for (int i = 0; i < 256; i++) ref[i] = ts_e4m3_to_f32((uint8_t)i);
    enum { NE = 127 * 3 * 2 + 16 * 2 };
    uint32_t in[NE];
    int k = 0;
    for (int m = 0; m < 127; m++) { /* midpoint between code m and m + 1 (m = 126: 464) */
        float lo = ts_e4m3_to_f32((uint8_t)m), hi = m < 126 ? ts_e4m3_to_f32((uint8_t)(m + 1)) : 480.0f;
        float mid = lo + (hi - lo) * 0.5f;
        uint32_t b;
        memcpy(&b, &mid, 4);
        for (int d = -1; d <= 1; d++)
            for (int sg = 0; sg < 2; sg++) in[k++] = (b + (uint32_t)d) | (uint32_t)sg << 31;
    }
    static const uint32_t sp[16] = {0, 1, 0x007FFFFF, 0x00800000, 0x3AFFFFFF, 0x3B000000,
                                    0x3C7FFFFF, 0x3C800000, 0x43E00000, 0x43F00000, 0x43F00001,
                                    0x7F7FFFFF, 0x7F800000, 0x7F800001, 0x7FC00000, 0x7FFFFFFF};
    for (int i = 0; i < 16; i++)
        for (int sg = 0; sg < 2; sg++) in[k++] = sp[i] | (uint32_t)sg << 31;
    uint8_t want[NE], got[NE + 1];
    for (int i = 0; i < NE; i++) {
        float f;
        memcpy(&f, &in[i], 4);
        want[i] = ts_f32_to_e4m3(f);
    }
    int isas[TS_ISA_COUNT_];
    const int nisa = ts_test_isas(isas);
    for (int ii = 0; ii < nisa; ii++) {
        if (ts_set_isa((ts_isa)isas[ii]) != TS_OK) continue;
        const char *isa = ts_isa_name((ts_isa)isas[ii]);
        for (int off = 0; off < 8; off++) {
            for (int i = 0; i < 256; i++) c8[off + i] = (uint8_t)i;
            TS_CHECK_STATUS(ts_convert(c8 + off, TS_E4M3, out + off, TS_F32, 256 - off), TS_OK);
            TS_CHECK_MSG(!memcmp(out + off, ref, (size_t)(256 - off) * 4), "decode off=%d isa=%s",
                         off, isa);
        }
        for (int off = 0; off < 4; off++) { /* shifts which lanes of a 32-block hold what */
            memset(got, 0x5A, sizeof got);
            TS_CHECK_STATUS(ts_convert(in + off, TS_F32, got, TS_E4M3, NE - off), TS_OK);
            TS_CHECK_MSG(!memcmp(got, want + off, (size_t)(NE - off)), "encode off=%d isa=%s",
                         off, isa);
            TS_CHECK(got[NE - off] == 0x5A);
        }
    }
    ts_set_isa(saved_isa);
}

TS_TEST(convert_bulk_bad_input) {
    float f[16] = {0};
    uint8_t b[64];
    memset(b, 0x77, sizeof b);
    TS_CHECK_STATUS(ts_convert(NULL, TS_F32, b, TS_E4M3, 4), TS_ERR_NULL_POINTER);
    TS_CHECK_STATUS(ts_convert(f, TS_F32, NULL, TS_E4M3, 4), TS_ERR_NULL_POINTER);
    TS_CHECK_STATUS(ts_convert(NULL, TS_F32, NULL, TS_E4M3, 0), TS_OK);
    TS_CHECK_STATUS(ts_convert(f, TS_F32, b, TS_I32, 4), TS_ERR_UNSUPPORTED);
    TS_CHECK_STATUS(ts_convert(f, TS_E4M3, b, TS_E5M2, 4), TS_ERR_UNSUPPORTED);
    TS_CHECK_STATUS(ts_convert(f, (ts_dtype)99, b, TS_F32, 4), TS_ERR_DTYPE);
    TS_CHECK_STATUS(ts_convert(f, TS_F32, b, (ts_dtype)-1, 4), TS_ERR_DTYPE);
    TS_CHECK_STATUS(ts_convert(f, TS_F32, b, TS_E4M3, -1), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_convert(f, TS_F32, b, TS_E2M1X2, 3), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_convert(b, TS_E2M1X2, f, TS_F32, 5), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_convert(f, TS_F32, b, TS_E5M6X8, 12), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_convert(f, TS_F32, b, TS_E4M3, INT64_MAX / 2), TS_ERR_OVERFLOW);
    TS_CHECK_STATUS(ts_convert(b, TS_E5M6X8, f, TS_F32, INT64_MAX / 8 * 8), TS_ERR_OVERFLOW);
    TS_CHECK_STATUS(ts_convert(f, TS_F32, (uint8_t *)f + 8, TS_E4M3, 16), TS_ERR_ALIASING);
    TS_CHECK(strstr(ts_last_error(), "overlap") != NULL);
    TS_CHECK_STATUS(ts_convert((uint8_t *)f + 1, TS_F32, b, TS_E4M3, 4), TS_ERR_ALIGNMENT);
    TS_CHECK_STATUS(ts_convert(f, TS_F32, b + 1, TS_BF16, 4), TS_ERR_ALIGNMENT);
    TS_CHECK_STATUS(ts_convert(b, TS_E4M3, b + 33, TS_F32, 4), TS_ERR_ALIGNMENT);
    TS_CHECK_STATUS(ts_convert(f, TS_F32, b, TS_E2M1X2, 3), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "n = 3") != NULL);
    for (size_t i = 0; i < sizeof b; i++) TS_CHECK(b[i] == 0x77); /* outputs untouched */
}
