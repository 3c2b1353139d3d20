/* tilestack numerics: bit-exact low-precision formats.
 *
 * Scalar conversions are the reference; bulk converters (generic C and AVX2, chosen at run
 * time) are bit-identical to them. Rounding is round-to-nearest-even unless stated. */
#ifndef TILESTACK_NUMERICS_H
#define TILESTACK_NUMERICS_H

#include "tilestack/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* bf16: RNE; NaN stays NaN and is quieted (sign kept); overflow rounds to inf. */
TS_API uint16_t ts_f32_to_bf16(float x);
TS_API float ts_bf16_to_f32(uint16_t h);

/* IEEE binary16: RNE, subnormals kept, overflow to inf, NaN quieted (top payload bits kept,
 * as F16C). Decoding (here and for bf16) widens exactly, NaN payload included. */
TS_API uint16_t ts_f32_to_f16(float x);
TS_API float ts_f16_to_f32(uint16_t h);

/* float8_e4m3fn (as torch / ml_dtypes): RNE; |x| rounding above 448 and inf give NaN
 * (sign kept: 0x7F / 0xFF); NaN gives NaN. The _sat variant clamps finite values and inf to
 * +-448 before rounding (the TileKernels / saturating convention); NaN still gives NaN. */
TS_API uint8_t ts_f32_to_e4m3(float x);
TS_API uint8_t ts_f32_to_e4m3_sat(float x);
TS_API float ts_e4m3_to_f32(uint8_t v);

/* float8_e5m2: RNE, overflow to inf, NaN gives 0x7E | sign (as ml_dtypes); _sat clamps to
 * +-57344. e4m3/e5m2 NaN codes decode to 0x7FC00000 | sign. */
TS_API uint8_t ts_f32_to_e5m2(float x);
TS_API uint8_t ts_f32_to_e5m2_sat(float x);
TS_API float ts_e5m2_to_f32(uint8_t v);

/* e2m1 (fp4), code in the low 4 bits: {0,0.5,1,1.5,2,3,4,6}, bit 3 = sign; code 8 (-0)
 * decodes to -0.0f. ts_f32_to_e2m1 is RNE with saturation to +-6 (OCP MX rule, TileKernels);
 * NaN encodes as +6 (0x7): e2m1 has no NaN. -0 and values rounding to 0 keep their sign. */
TS_API uint8_t ts_f32_to_e2m1(float x);
TS_API float ts_e2m1_to_f32(uint8_t code);
/* DeepGEMM's quantiser rule: the code counts the midpoints {0.25,0.75,1.25,1.75,2.5,3.5,5}
 * strictly exceeded by |x| (ties round down), saturating at 6; the sign bit is set only for
 * x < 0 with a non-zero code; NaN encodes as 0x7 (as torch.bucketize places NaN last). */
TS_API uint8_t ts_f32_to_e2m1_dg(float x);

/* ue8m0: byte e means 2^(e-127); e = 255 is NaN. Decoding e = 0 gives 2^-127. */
TS_API float ts_ue8m0_to_f32(uint8_t e);
/* Exponent byte of x, which must be a positive power of two >= 2^-127 (bits >> 23 of its
 * float32); returns 255 for anything else (negative, zero, non-power-of-two, inf, NaN). */
TS_API uint8_t ts_f32_to_ue8m0(float x);
/* DeepGEMM ceil_to_ue8m0: 2^(exponent(|x|) + (mantissa != 0)), exponent clamped to [1,254]. */
TS_API float ts_ceil_to_ue8m0(float x);
/* Four ue8m0 bytes <-> one int32, byte j (LSB first) = element j. */
TS_API int32_t ts_pack_ue8m0x4(const uint8_t e[4]);
TS_API void ts_unpack_ue8m0x4(int32_t w, uint8_t e[4]);

/* E5M6 (TileKernels): 12 bits = 1 sign, 5 exponent (bias 15), 6 mantissa; max 65024, has
 * inf/NaN like f16 (the top 12 bits of an f16). Encoding, as TileKernels' float_to_e5m6:
 * h = f16 bits of x with round-toward-zero (CUDA __float2half_rz: finite overflow gives
 * +-65504, every NaN gives 0x7FFF), v = h >> 4, then v += ((v & 1) + (bits(x) & 0x1FFFF) >
 * 0x10000). This is RNE in the f16 normal range; elsewhere the rule is applied literally
 * (see docs/numerics.md). Decoding widens (v << 4) as an f16. Eight values pack into three
 * uint32 words most-significant first: value i occupies bits [84-12i, 96-12i) of the 96-bit
 * number w[0]*2^64 + w[1]*2^32 + w[2] (value 0 = top 12 bits of w[0]). */
TS_API uint16_t ts_f32_to_e5m6(float x);
TS_API float ts_e5m6_to_f32(uint16_t v);
TS_API void ts_e5m6_pack8(const uint16_t v[8], uint32_t w[3]);
TS_API void ts_e5m6_unpack8(const uint32_t w[3], uint16_t v[8]);

/* Bulk conversion of n values, threaded, SIMD where available; bit-identical to the scalar
 * functions above. Supported pairs: f32 -> {bf16, f16, e4m3, e5m2, e2m1x2, e5m6x8} and
 * {bf16, f16, e4m3, e5m2, e2m1x2, e5m6x8, ue8m0} -> f32, plus bf16 -> e4m3 / e2m1x2.
 * For e2m1x2, n counts values (must be even; bytes = n/2). For e5m6x8, n must be a multiple
 * of 8 (bytes = 3n/2). e4m3 encoding here is the non-saturating ts_f32_to_e4m3. src and dst
 * must not overlap (TS_ERR_ALIASING) and must be aligned to their element size
 * (TS_ERR_ALIGNMENT); NULL is accepted only when n == 0. */
TS_API ts_status ts_convert(const void *src, ts_dtype src_dtype, void *dst, ts_dtype dst_dtype,
                            int64_t n);

#ifdef __cplusplus
}
#endif
#endif
