/* Scalar reference conversions. Everything is integer bit manipulation on the float32
 * pattern, so results never depend on the FPU rounding mode or on MXCSR DAZ/FTZ; the bulk
 * kernels (generic and AVX2) must reproduce these bits exactly. */
#include "tilestack/numerics.h"

#include <string.h>

static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* Magnitude code of the RNE rounding of a finite |x| (f32 bits `a`, sign cleared) into a
 * format with `mbits` mantissa bits and exponent bias `bias`, with subnormals and no upper
 * bound: a result past the format's largest finite code means overflow, which each caller
 * resolves its own way (inf, NaN or saturation). One routine for every small format keeps
 * the tie and subnormal handling identical across them. */
static inline uint32_t rne_mag(uint32_t a, int mbits, int bias) {
    int e = (int)(a >> 23);
    uint32_t mant = a & 0x7FFFFFu;
    if (e == 0) e = 1; /* f32 subnormal: same scale as e = 1 without the implicit bit */
    else mant |= 0x800000u;
    int te = e - 127 + bias; /* target biased exponent if the result were normal */
    int shift = 23 - mbits;
    if (te < 1) shift += 1 - te; /* target subnormal: coarser quantum */
    if (shift > 25) return 0;    /* below half the smallest subnormal: rounds to 0 */
    uint32_t q = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    /* q carries the implicit bit for normals, so (te-1)<<mbits + q is the code and a
     * mantissa carry bumps the exponent by itself. */
    return te < 1 ? q : ((uint32_t)(te - 1) << mbits) + q;
}

/* ---- bf16 ---- */
uint16_t ts_f32_to_bf16(float x) {
    uint32_t u = f2u(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)(((u >> 16) & 0x8000u) | 0x7FC0u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
float ts_bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

/* ---- f16 ---- */
uint16_t ts_f32_to_f16(float x) {
    uint32_t u = f2u(x), a = u & 0x7FFFFFFFu, s = (u >> 16) & 0x8000u;
    /* NaN keeps its top payload bits and gets the quiet bit, as F16C's vcvtps2ph does. */
    if (a > 0x7F800000u) return (uint16_t)(s | 0x7E00u | ((a >> 13) & 0x3FFu));
    if (a >= 0x477FF000u) return (uint16_t)(s | 0x7C00u); /* >= 65520 (incl. inf) */
    return (uint16_t)(s | rne_mag(a, 10, 15));
}
/* Exact widening (NaN payload and signalling bit kept, as numpy and torch do). */
float ts_f16_to_f32(uint16_t h) {
    uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1F) return u2f(s | 0x7F800000u | (m << 13));
    if (e != 0) return u2f(s | ((e + 112u) << 23) | (m << 13));
    if (m == 0) return u2f(s);
    int p = 31 - __builtin_clz(m); /* subnormal m * 2^-24: normalise on its top bit */
    return u2f(s | ((uint32_t)(p + 103) << 23) | ((m << (23 - p)) & 0x7FFFFFu));
}

/* ---- e4m3fn ---- */
static inline uint8_t e4m3_core(uint32_t u, uint32_t a) {
    uint32_t s = (u >> 24) & 0x80u;
    if (a > 0x7F800000u) return (uint8_t)(s | 0x7Fu);
    uint32_t c = rne_mag(a >= 0x7F800000u ? 0x7F000000u : a, 3, 7);
    return (uint8_t)(s | (c > 0x7Eu ? 0x7Fu : c)); /* past 448 (i.e. > 464, and inf): NaN */
}
uint8_t ts_f32_to_e4m3(float x) { uint32_t u = f2u(x); return e4m3_core(u, u & 0x7FFFFFFFu); }
uint8_t ts_f32_to_e4m3_sat(float x) {
    uint32_t u = f2u(x), a = u & 0x7FFFFFFFu;
    if (a <= 0x7F800000u && a > 0x43E00000u) a = 0x43E00000u; /* clamp |x| (incl. inf) to 448 */
    return e4m3_core(u, a);
}
float ts_e4m3_to_f32(uint8_t v) {
    uint32_t s = (uint32_t)(v & 0x80u) << 24, m = v & 0x7Fu;
    if (m == 0x7F) return u2f(s | 0x7FC00000u);
    if (m >= 8) return u2f(s | ((m << 20) + (120u << 23)));
    return u2f(s | f2u((float)m * 0x1p-9f)); /* subnormal: m * 2^-9, exact */
}

/* ---- e5m2 ---- */
static inline uint8_t e5m2_core(uint32_t u, uint32_t a) {
    uint32_t s = (u >> 24) & 0x80u;
    if (a > 0x7F800000u) return (uint8_t)(s | 0x7Eu); /* canonical quiet NaN, as ml_dtypes */
    uint32_t c = rne_mag(a >= 0x7F800000u ? 0x7F000000u : a, 2, 15);
    return (uint8_t)(s | (c > 0x7Bu ? 0x7Cu : c));
}
uint8_t ts_f32_to_e5m2(float x) { uint32_t u = f2u(x); return e5m2_core(u, u & 0x7FFFFFFFu); }
uint8_t ts_f32_to_e5m2_sat(float x) {
    uint32_t u = f2u(x), a = u & 0x7FFFFFFFu;
    if (a <= 0x7F800000u && a > 0x47600000u) a = 0x47600000u; /* 57344 */
    return e5m2_core(u, a);
}
float ts_e5m2_to_f32(uint8_t v) {
    uint32_t s = (uint32_t)(v & 0x80u) << 24, m = v & 0x7Fu;
    if (m > 0x7C) return u2f(s | 0x7FC00000u);
    if (m == 0x7C) return u2f(s | 0x7F800000u);
    if (m >= 4) return u2f(s | ((m << 21) + (112u << 23)));
    return u2f(s | f2u((float)m * 0x1p-16f));
}

/* ---- e2m1 ---- */
static const float k_e2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                 -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
uint8_t ts_f32_to_e2m1(float x) {
    uint32_t u = f2u(x), a = u & 0x7FFFFFFFu, s = (u >> 28) & 0x8u;
    if (a > 0x7F800000u) return 0x7u;
    if (a >= 0x40C00000u) return (uint8_t)(s | 0x7u); /* |x| >= 6 (incl. inf) saturates */
    return (uint8_t)(s | rne_mag(a, 1, 1));
}
float ts_e2m1_to_f32(uint8_t code) { return k_e2m1[code & 0xFu]; }
uint8_t ts_f32_to_e2m1_dg(float x) {
    uint32_t u = f2u(x), a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return 0x7u;
    float ax = u2f(a);
    uint8_t c = (uint8_t)((ax > 0.25f) + (ax > 0.75f) + (ax > 1.25f) + (ax > 1.75f) + (ax > 2.5f) +
                          (ax > 3.5f) + (ax > 5.0f));
    return (uint8_t)(c | ((u >> 31) && c ? 0x8u : 0u));
}

/* ---- ue8m0 ---- */
float ts_ue8m0_to_f32(uint8_t e) {
    if (e == 255) return u2f(0x7FC00000u);
    if (e == 0) return u2f(0x00400000u); /* 2^-127 is an f32 subnormal */
    return u2f((uint32_t)e << 23);
}
uint8_t ts_f32_to_ue8m0(float x) {
    uint32_t u = f2u(x);
    if (u == 0x00400000u) return 0;
    if ((u & 0x7FFFFFu) || (u >> 31) || (u >> 23) == 0 || (u >> 23) == 255) return 255;
    return (uint8_t)(u >> 23);
}
float ts_ceil_to_ue8m0(float x) {
    uint32_t a = f2u(x) & 0x7FFFFFFFu;
    uint32_t e = (a >> 23) + ((a & 0x7FFFFFu) != 0);
    if (e < 1) e = 1;
    if (e > 254) e = 254;
    return u2f(e << 23);
}
int32_t ts_pack_ue8m0x4(const uint8_t e[4]) {
    uint32_t w = (uint32_t)e[0] | ((uint32_t)e[1] << 8) | ((uint32_t)e[2] << 16) |
                 ((uint32_t)e[3] << 24);
    int32_t r;
    memcpy(&r, &w, 4);
    return r;
}
void ts_unpack_ue8m0x4(int32_t w, uint8_t e[4]) {
    uint32_t u;
    memcpy(&u, &w, 4);
    for (int j = 0; j < 4; j++) e[j] = (uint8_t)(u >> (8 * j));
}

/* ---- E5M6 (TileKernels float_to_e5m6) ---- */
/* CUDA __float2half_rz: truncation; finite overflow gives +-65504; every NaN gives 0x7FFF
 * (sign dropped), inf stays inf. */
static inline uint32_t f16_rz_bits(uint32_t u) {
    uint32_t a = u & 0x7FFFFFFFu, s = (u >> 16) & 0x8000u;
    if (a > 0x7F800000u) return 0x7FFFu;
    if (a == 0x7F800000u) return s | 0x7C00u;
    if (a >= 0x47800000u) return s | 0x7BFFu;
    int e = (int)(a >> 23);
    if (e >= 113) return s | ((uint32_t)(e - 112) << 10) | ((a >> 13) & 0x3FFu);
    if (e < 103) return s;
    return s | ((0x800000u | (a & 0x7FFFFFu)) >> (126 - e));
}
uint16_t ts_f32_to_e5m6(float x) {
    uint32_t u = f2u(x);
    uint32_t v = f16_rz_bits(u) >> 4;
    /* Upstream rounds with the 17 low f32 bits whatever the f16 exponent, so the rule is
     * exact RNE only in the f16 normal range; kept literally for byte equality. */
    if ((v & 1u) + (u & 0x1FFFFu) > 0x10000u) v++;
    return (uint16_t)(v & 0xFFFu);
}
float ts_e5m6_to_f32(uint16_t v) { return ts_f16_to_f32((uint16_t)((v & 0xFFFu) << 4)); }
void ts_e5m6_pack8(const uint16_t v[8], uint32_t w[3]) {
    uint32_t h[8];
    for (int i = 0; i < 8; i++) h[i] = v[i] & 0xFFFu;
    w[0] = (h[0] << 20) | (h[1] << 8) | (h[2] >> 4);
    w[1] = (h[2] << 28) | (h[3] << 16) | (h[4] << 4) | (h[5] >> 8);
    w[2] = (h[5] << 24) | (h[6] << 12) | h[7];
}
void ts_e5m6_unpack8(const uint32_t w[3], uint16_t v[8]) {
    v[0] = (uint16_t)(w[0] >> 20);
    v[1] = (uint16_t)((w[0] >> 8) & 0xFFFu);
    v[2] = (uint16_t)(((w[0] << 4) | (w[1] >> 28)) & 0xFFFu);
    v[3] = (uint16_t)((w[1] >> 16) & 0xFFFu);
    v[4] = (uint16_t)((w[1] >> 4) & 0xFFFu);
    v[5] = (uint16_t)(((w[1] << 8) | (w[2] >> 24)) & 0xFFFu);
    v[6] = (uint16_t)((w[2] >> 12) & 0xFFFu);
    v[7] = (uint16_t)(w[2] & 0xFFFu);
}
