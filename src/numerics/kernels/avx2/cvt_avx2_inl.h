/* AVX2 format-conversion primitives, shared by the bulk converters (cvt_avx2.c) and the
 * AVX2 quantisers. Include only from files built with -mavx2 -mfma -mf16c.
 *
 * Every primitive is bit-identical to the scalar reference in src/numerics/convert_scalar.c
 * (same NaN, overflow, subnormal and tie rules). Encoders do the tiny-magnitude case with an
 * add of a power-of-two "magic" constant, so they assume the default round-to-nearest MXCSR
 * mode (as every float multiply in the library does); DAZ/FTZ change no result. Decoders
 * build subnormal results from small integers, so they never read denormals either.
 * Signatures are stable: other modules depend on them. */
#ifndef TS_CVT_AVX2_INL_H
#define TS_CVT_AVX2_INL_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define TS__AVX2_INL static inline __attribute__((always_inline))

/* ======================= encoders: 8 x f32 -> codes in 32-bit lanes ======================= */

/* e4m3 magnitude codes from |x| bits `a` (sign cleared), before the clamp: RNE; every value
 * past 448 (> 464), inf and NaN gives a code above 0x7E, and every code is a non-negative
 * int32 (at most 0x440), so either an unsigned min or a signed-saturating pack clamps it. */
TS__AVX2_INL __m256i ts__avx2_e4m3_mag_raw(__m256i a) {
    /* normal range: round the f32 bits at bit 20; the exponent rebias (127 -> 7) rides in the
     * rounding constant. Below 2^-6 the sum wraps, but those lanes take the other path. */
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(a, 20), _mm256_set1_epi32(1));
    __m256i cn = _mm256_add_epi32(_mm256_add_epi32(a, lsb),
                                  _mm256_set1_epi32(0x7FFFF - (int)(960u << 20)));
    cn = _mm256_srli_epi32(cn, 20);
    /* |x| < 2^-6 (subnormal range): quantum 2^-9 is the ulp of 2^14, so the FPU add rounds */
    __m256 sm = _mm256_add_ps(_mm256_castsi256_ps(a), _mm256_set1_ps(16384.0f));
    __m256i cs = _mm256_sub_epi32(_mm256_castps_si256(sm), _mm256_set1_epi32(0x46800000));
    __m256i tiny = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x3C800000), a);
    return _mm256_blendv_epi8(cn, cs, tiny);
}

/* e4m3 magnitude codes from |x| bits `a` (sign cleared): RNE; past 448 (> 464), inf and NaN
 * all give 0x7F. */
TS__AVX2_INL __m256i ts__avx2_e4m3_mag(__m256i a) {
    return _mm256_min_epu32(ts__avx2_e4m3_mag_raw(a), _mm256_set1_epi32(0x7F));
}

/* ts_f32_to_e4m3 on 8 lanes: codes 0..0xFF in 32-bit lanes. */
TS__AVX2_INL __m256i ts__avx2_e4m3_codes(__m256 x) {
    __m256i u = _mm256_castps_si256(x);
    __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
    __m256i s = _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80));
    return _mm256_or_si256(ts__avx2_e4m3_mag(a), s);
}

/* ts_f32_to_e4m3_sat on 8 lanes: |x| and inf clamped to 448 first; NaN -> 0x7F | sign. */
TS__AVX2_INL __m256i ts__avx2_e4m3_sat_codes(__m256 x) {
    __m256i u = _mm256_castps_si256(x);
    __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
    __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000));
    a = _mm256_blendv_epi8(_mm256_min_epu32(a, _mm256_set1_epi32(0x43E00000)), a, nan);
    __m256i s = _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80));
    return _mm256_or_si256(ts__avx2_e4m3_mag(a), s);
}

/* e5m2 magnitude: RNE; finite overflow and inf -> 0x7C; NaN -> 0x7E. `sat` clamps to 57344. */
TS__AVX2_INL __m256i ts__avx2_e5m2_mag(__m256i a, int sat) {
    __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000));
    if (sat) a = _mm256_min_epu32(a, _mm256_set1_epi32(0x47600000));
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(a, 21), _mm256_set1_epi32(1));
    __m256i cn = _mm256_add_epi32(a, _mm256_add_epi32(_mm256_set1_epi32(0xFFFFF), lsb));
    cn = _mm256_sub_epi32(_mm256_srli_epi32(cn, 21), _mm256_set1_epi32(112 << 2));
    /* |x| < 2^-14: quantum 2^-16 is the ulp of 2^7 */
    __m256 sm = _mm256_add_ps(_mm256_castsi256_ps(a), _mm256_set1_ps(128.0f));
    __m256i cs = _mm256_sub_epi32(_mm256_castps_si256(sm), _mm256_set1_epi32(0x43000000));
    __m256i tiny = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x38800000), a);
    __m256i c = _mm256_blendv_epi8(cn, cs, tiny);
    c = _mm256_min_epu32(c, _mm256_set1_epi32(0x7C));
    return _mm256_blendv_epi8(c, _mm256_set1_epi32(0x7E), nan);
}

/* ts_f32_to_e5m2 (sat = 0) / ts_f32_to_e5m2_sat (sat = 1) on 8 lanes. */
TS__AVX2_INL __m256i ts__avx2_e5m2_codes(__m256 x, int sat) {
    __m256i u = _mm256_castps_si256(x);
    __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
    __m256i s = _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80));
    return _mm256_or_si256(ts__avx2_e5m2_mag(a, sat), s);
}

/* ts_f32_to_e2m1 (RNE, saturating at 6, sign kept on zero, NaN -> 0x7) on 8 lanes: codes
 * 0..15 in 32-bit lanes. RNE at the seven midpoints is a strict or non-strict compare,
 * depending on which neighbour has the even code. */
TS__AVX2_INL __m256i ts__avx2_e2m1_codes(__m256 x) {
    __m256i u = _mm256_castps_si256(x);
    __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
    __m256 ax = _mm256_castsi256_ps(a);
    __m256i c = _mm256_setzero_si256();
#define TS__E2M1_STEP(v, op) \
    c = _mm256_sub_epi32(c, _mm256_castps_si256(_mm256_cmp_ps(ax, _mm256_set1_ps(v), op)))
    TS__E2M1_STEP(0.25f, _CMP_GT_OQ);
    TS__E2M1_STEP(0.75f, _CMP_GE_OQ);
    TS__E2M1_STEP(1.25f, _CMP_GT_OQ);
    TS__E2M1_STEP(1.75f, _CMP_GE_OQ);
    TS__E2M1_STEP(2.5f, _CMP_GT_OQ);
    TS__E2M1_STEP(3.5f, _CMP_GE_OQ);
    TS__E2M1_STEP(5.0f, _CMP_GT_OQ);
    __m256i s = _mm256_and_si256(_mm256_srli_epi32(u, 28), _mm256_set1_epi32(0x8));
    c = _mm256_or_si256(c, s);
    __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000));
    return _mm256_blendv_epi8(c, _mm256_set1_epi32(0x7), nan);
}

/* ts_f32_to_e2m1_dg (DeepGEMM strict thresholds, ties down; sign only when x < 0 and the
 * code is non-zero; NaN -> 0x7) on 8 lanes. */
TS__AVX2_INL __m256i ts__avx2_e2m1_dg_codes(__m256 x) {
    __m256i u = _mm256_castps_si256(x);
    __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
    __m256 ax = _mm256_castsi256_ps(a);
    __m256i c = _mm256_setzero_si256();
    TS__E2M1_STEP(0.25f, _CMP_GT_OQ);
    TS__E2M1_STEP(0.75f, _CMP_GT_OQ);
    TS__E2M1_STEP(1.25f, _CMP_GT_OQ);
    TS__E2M1_STEP(1.75f, _CMP_GT_OQ);
    TS__E2M1_STEP(2.5f, _CMP_GT_OQ);
    TS__E2M1_STEP(3.5f, _CMP_GT_OQ);
    TS__E2M1_STEP(5.0f, _CMP_GT_OQ);
#undef TS__E2M1_STEP
    __m256i nz = _mm256_xor_si256(_mm256_cmpeq_epi32(c, _mm256_setzero_si256()),
                                  _mm256_set1_epi32(-1));
    __m256i s = _mm256_and_si256(_mm256_srli_epi32(u, 28), _mm256_set1_epi32(0x8));
    c = _mm256_or_si256(c, _mm256_and_si256(s, nz));
    __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000));
    return _mm256_blendv_epi8(c, _mm256_set1_epi32(0x7), nan);
}

/* ts_f32_to_bf16 on 8 lanes: RNE, NaN -> 0x7FC0 | sign; codes in the low 16 bits of lanes. */
TS__AVX2_INL __m256i ts__avx2_bf16_codes(__m256 x) {
    __m256i u = _mm256_castps_si256(x);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb)), 16);
    __m256i qn = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u, 16),
                                                  _mm256_set1_epi32(0x8000)),
                                 _mm256_set1_epi32(0x7FC0));
    __m256 xx = _mm256_castsi256_ps(u);
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(xx, xx, _CMP_UNORD_Q));
    return _mm256_blendv_epi8(r, qn, nan);
}

/* ---------------- narrowing stores of code lanes ---------------- */

/* Four vectors of 8 byte codes (values in 0..255 in 32-bit lanes, vector k = elements
 * 8k..8k+7) -> 32 bytes in element order. */
TS__AVX2_INL __m256i ts__avx2_pack_u8x32(__m256i c0, __m256i c1, __m256i c2, __m256i c3) {
    __m256i p01 = _mm256_packus_epi32(c0, c1); /* lanes interleave by 128-bit halves */
    __m256i p23 = _mm256_packus_epi32(c2, c3);
    __m256i b = _mm256_packus_epi16(p01, p23);
    return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* ts_f32_to_e4m3 of 32 floats (x0 = elements 0..7, ...) -> 32 codes in element order. Cheaper
 * than four ts__avx2_e4m3_codes + ts__avx2_pack_u8x32: the signed-saturating packs clamp the
 * raw magnitudes to 0x7F, and packing the raw f32 bits the same way leaves every lane's sign
 * in bit 7 (a negative int32 stays negative through both packs), so no per-lane clamp or
 * sign shuffling is needed. */
TS__AVX2_INL __m256i ts__avx2_e4m3x32_encode(__m256 x0, __m256 x1, __m256 x2, __m256 x3) {
    const __m256i abs = _mm256_set1_epi32(0x7FFFFFFF);
    __m256i u0 = _mm256_castps_si256(x0), u1 = _mm256_castps_si256(x1);
    __m256i u2 = _mm256_castps_si256(x2), u3 = _mm256_castps_si256(x3);
    __m256i m0 = ts__avx2_e4m3_mag_raw(_mm256_and_si256(u0, abs));
    __m256i m1 = ts__avx2_e4m3_mag_raw(_mm256_and_si256(u1, abs));
    __m256i m2 = ts__avx2_e4m3_mag_raw(_mm256_and_si256(u2, abs));
    __m256i m3 = ts__avx2_e4m3_mag_raw(_mm256_and_si256(u3, abs));
    __m256i m = _mm256_packs_epi16(_mm256_packs_epi32(m0, m1), _mm256_packs_epi32(m2, m3));
    __m256i sg = _mm256_packs_epi16(_mm256_packs_epi32(u0, u1), _mm256_packs_epi32(u2, u3));
    __m256i c = _mm256_or_si256(m, _mm256_and_si256(sg, _mm256_set1_epi8((char)0x80)));
    /* the packs work per 128-bit half: dword j holds elements 0..3 of x_j, dword 4 + j its
     * elements 4..7 */
    return _mm256_permutevar8x32_epi32(c, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* 8 byte codes in 32-bit lanes -> 8 bytes (element order) in the low 64 bits. */
TS__AVX2_INL __m128i ts__avx2_pack_u8x8(__m256i c) {
    __m128i lo = _mm256_castsi256_si128(c), hi = _mm256_extracti128_si256(c, 1);
    __m128i w = _mm_packus_epi32(lo, hi);
    return _mm_packus_epi16(w, w);
}

/* Two vectors of 16-bit codes in 32-bit lanes (elements 0..7, 8..15) -> 16 u16 in order. */
TS__AVX2_INL __m256i ts__avx2_pack_u16x16(__m256i c0, __m256i c1) {
    return _mm256_permute4x64_epi64(_mm256_packus_epi32(c0, c1), 0xD8);
}

/* 8 e2m1 codes (0..15 in 32-bit lanes, element order) -> 4 bytes, element 2i in the low
 * nibble of byte i. */
TS__AVX2_INL uint32_t ts__avx2_e2m1_pack8(__m256i c) {
    __m256i p = _mm256_or_si256(c, _mm256_srli_epi64(c, 28)); /* byte 0 of each qword */
    __m256i g = _mm256_shuffle_epi8(
        p, _mm256_setr_epi8(0, 8, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                            0, 8, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1));
    uint32_t lo = (uint32_t)_mm_cvtsi128_si32(_mm256_castsi256_si128(g)) & 0xFFFFu;
    uint32_t hi = (uint32_t)_mm_cvtsi128_si32(_mm256_extracti128_si256(g, 1)) & 0xFFFFu;
    return lo | (hi << 16);
}

/* ======================= decoders: codes -> 8 x f32 ======================= */

/* ts_e4m3_to_f32 of 8 codes held in 32-bit lanes, sign-extended from the byte
 * (_mm256_cvtepi8_epi32) so that bit 31 is the sign; bits 0..6 are the magnitude. */
TS__AVX2_INL __m256 ts__avx2_e4m3_decode(__m256i v) {
    __m256i m = _mm256_and_si256(v, _mm256_set1_epi32(0x7F));
    /* place e/m under the f32 exponent/mantissa and rebias by 120 (normal codes) */
    __m256i nb = _mm256_add_epi32(_mm256_slli_epi32(m, 20), _mm256_set1_epi32(120 << 23));
    /* subnormal codes m < 8 (m * 2^-9): an 8-entry in-register table, no denormal math */
    const __m256 subtab = _mm256_setr_ps(0.0f, 0x1p-9f, 0x2p-9f, 0x3p-9f, 0x4p-9f, 0x5p-9f,
                                         0x6p-9f, 0x7p-9f);
    __m256 sb = _mm256_permutevar8x32_ps(subtab, m);
    __m256i sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(8), m);
    __m256i r = _mm256_blendv_epi8(nb, _mm256_castps_si256(sb), sub);
    __m256i nan = _mm256_cmpeq_epi32(m, _mm256_set1_epi32(0x7F));
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC00000), nan);
    __m256i s = _mm256_and_si256(v, _mm256_set1_epi32((int)0x80000000u));
    return _mm256_castsi256_ps(_mm256_or_si256(r, s));
}

/* 8 e4m3 bytes at p -> 8 floats. */
TS__AVX2_INL __m256 ts__avx2_e4m3x8_load_decode(const uint8_t *p) {
    return ts__avx2_e4m3_decode(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* ts_e4m3_to_f32 of 16 codes -> out[0] (elements 0..7), out[1] (8..15). Cheaper per value than
 * ts__avx2_e4m3_decode: in 16-bit lanes the code's sign goes to bit 15 and its 7 magnitude
 * bits under the f16 exponent/mantissa, an f16 equal to the e4m3 value times 2^-8 (biases 15
 * vs 7), subnormals included, which vcvtph2ps widens exactly; the multiply by 2^8 is exact.
 * Magnitude 0x7F would read as 480, so it is swapped for the f16 quiet NaN 0x7E00 | sign,
 * which widens to 0x7FC00000 | sign as the reference returns, and a NaN times 256 keeps its
 * bits. No denormal is read or produced (the smallest f16 here, 2^-17, is a normal f32). */
TS__AVX2_INL void ts__avx2_e4m3x16_decode(__m128i bytes, __m256 out[2]) {
    __m256i t = _mm256_slli_epi16(_mm256_cvtepi8_epi16(bytes), 7); /* s s m6..m0 0000000 */
    __m256i h = _mm256_and_si256(t, _mm256_set1_epi16((short)0xBF80));
    __m256i nan = _mm256_cmpeq_epi16(_mm256_or_si256(t, _mm256_set1_epi16((short)0xC000)),
                                     _mm256_set1_epi16((short)0xFF80));
    h = _mm256_add_epi16(h, _mm256_and_si256(nan, _mm256_set1_epi16(0x7E00 - 0x3F80)));
    const __m256 k = _mm256_set1_ps(256.0f);
    out[0] = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), k);
    out[1] = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), k);
}

/* decode(code) * k for 16 codes known to hold no NaN code (0x7F / 0xFF), as
 * ts__avx2_e4m3x16_decode: the f16 of the code is decode(code) * 2^-8 exactly, so with
 * k = 256 * s (exact while finite) one multiply rounds decode(code) * s once, as the scalar
 * product does. */
TS__AVX2_INL void ts__avx2_e4m3x16_decode_nonan_mul(__m128i bytes, __m256 k, __m256 out[2]) {
    __m256i t = _mm256_slli_epi16(_mm256_cvtepi8_epi16(bytes), 7);
    __m256i h = _mm256_and_si256(t, _mm256_set1_epi16((short)0xBF80));
    out[0] = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), k);
    out[1] = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), k);
}

/* ts__avx2_e4m3x16_decode for inputs known to hold no NaN code (0x7F / 0xFF): the NaN
 * fix-up is a third of the work, and real tensors almost never contain NaN. */
TS__AVX2_INL void ts__avx2_e4m3x16_decode_nonan(__m128i bytes, __m256 out[2]) {
    ts__avx2_e4m3x16_decode_nonan_mul(bytes, _mm256_set1_ps(256.0f), out);
}

/* True if any of the 64 bytes is an e4m3 NaN code. */
TS__AVX2_INL int ts__avx2_e4m3x64_has_nan(__m256i b0, __m256i b1) {
    const __m256i sign = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi8((char)0xFF);
    __m256i n0 = _mm256_cmpeq_epi8(_mm256_or_si256(b0, sign), ones);
    __m256i n1 = _mm256_cmpeq_epi8(_mm256_or_si256(b1, sign), ones);
    return !_mm256_testz_si256(_mm256_or_si256(n0, n1), _mm256_or_si256(n0, n1));
}

/* ts_e5m2_to_f32 of 8 codes in 32-bit lanes. */
TS__AVX2_INL __m256 ts__avx2_e5m2_decode(__m256i v) {
    __m256i m = _mm256_and_si256(v, _mm256_set1_epi32(0x7F));
    __m256i nb = _mm256_add_epi32(_mm256_slli_epi32(m, 21), _mm256_set1_epi32(112 << 23));
    __m256 sb = _mm256_mul_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(0x1p-16f));
    __m256i sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(4), m);
    __m256i r = _mm256_blendv_epi8(nb, _mm256_castps_si256(sb), sub);
    __m256i inf = _mm256_cmpeq_epi32(m, _mm256_set1_epi32(0x7C));
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7F800000), inf);
    __m256i nan = _mm256_cmpgt_epi32(m, _mm256_set1_epi32(0x7C));
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC00000), nan);
    __m256i s = _mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x80)), 24);
    return _mm256_castsi256_ps(_mm256_or_si256(r, s));
}

/* ts_e2m1_to_f32 of 8 codes in 32-bit lanes (low 4 bits read). */
TS__AVX2_INL __m256 ts__avx2_e2m1_decode(__m256i v) {
    const __m256 tab = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
    __m256 m = _mm256_permutevar8x32_ps(tab, v); /* uses index bits 0..2 only */
    __m256i s = _mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x8)), 28);
    return _mm256_or_ps(m, _mm256_castsi256_ps(s));
}

/* 16 packed e2m1 bytes (32 values) -> 32 floats in element order, out[0..3]. The f32 bit
 * patterns of e2m1 values are zero below bit 16, so two pshufb lookups (bytes 2 and 3 of
 * the float) per code build them without a gather. */
TS__AVX2_INL void ts__avx2_e2m1x32_decode_tab(__m128i bytes, __m256 out[4], int plus_zero) {
    const __m256i t2 = _mm256_setr_epi8(0, 0, (char)0x80, (char)0xC0, 0, 0x40, (char)0x80,
                                        (char)0xC0, 0, 0, (char)0x80, (char)0xC0, 0, 0x40,
                                        (char)0x80, (char)0xC0, 0, 0, (char)0x80, (char)0xC0,
                                        0, 0x40, (char)0x80, (char)0xC0, 0, 0, (char)0x80,
                                        (char)0xC0, 0, 0x40, (char)0x80, (char)0xC0);
    const char z8 = plus_zero ? 0 : (char)0x80; /* code 8: -0, or +0 when asked */
    const __m256i t3 = _mm256_setr_epi8(
        0, 0x3F, 0x3F, 0x3F, 0x40, 0x40, 0x40, 0x40, z8, (char)0xBF, (char)0xBF,
        (char)0xBF, (char)0xC0, (char)0xC0, (char)0xC0, (char)0xC0, 0, 0x3F, 0x3F, 0x3F, 0x40,
        0x40, 0x40, 0x40, z8, (char)0xBF, (char)0xBF, (char)0xBF, (char)0xC0,
        (char)0xC0, (char)0xC0, (char)0xC0);
    /* The in-lane unpacks below leave 128-bit lane 1 holding values 4..7 of each output
     * vector. Instead of fixing that with lane-crossing permutes on the 4 outputs, the input
     * bytes are pre-arranged once: lane 0 takes bytes {0,1,4,5,8,9,12,13} (value groups
     * 0,2,4,6) and lane 1 bytes {2,3,6,7,10,11,14,15} (groups 1,3,5,7). */
    const __m256i arrange = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1,
                                             -1, -1, 2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1,
                                             -1, -1, -1, -1, -1);
    const __m256i lo4 = _mm256_set1_epi8(0x0F);
    __m256i x = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(bytes), arrange);
    __m256i lo = _mm256_and_si256(x, lo4);
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), lo4);
    __m256i codes = _mm256_unpacklo_epi8(lo, hi);
    __m256i b2 = _mm256_shuffle_epi8(t2, codes), b3 = _mm256_shuffle_epi8(t3, codes);
    __m256i wl = _mm256_unpacklo_epi8(b2, b3), wh = _mm256_unpackhi_epi8(b2, b3);
    __m256i z = _mm256_setzero_si256();
    out[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, wl));
    out[1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, wl));
    out[2] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, wh));
    out[3] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, wh));
}

TS__AVX2_INL void ts__avx2_e2m1x32_decode(__m128i bytes, __m256 out[4]) {
    ts__avx2_e2m1x32_decode_tab(bytes, out, 0);
}

/* As ts__avx2_e2m1x32_decode, but code 8 (-0) gives +0, as upstream's dequantisation. */
TS__AVX2_INL void ts__avx2_e2m1x32_decode_pz(__m128i bytes, __m256 out[4]) {
    ts__avx2_e2m1x32_decode_tab(bytes, out, 1);
}

/* ts_bf16_to_f32 of 8 bf16 (u16 in memory order). */
TS__AVX2_INL __m256 ts__avx2_bf16_decode(__m128i h) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* ts_f16_to_f32 of 8 f16: vcvtph2ps quiets signalling NaNs, the reference widens exactly,
 * so the quiet bit is cleared again where the input lacked it. */
TS__AVX2_INL __m256 ts__avx2_f16_decode(__m128i h) {
    __m256 r = _mm256_cvtph_ps(h);
    __m256i w = _mm256_cvtepu16_epi32(h);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x7FFF)),
                                     _mm256_set1_epi32(0x7C00));
    __m256i q = _mm256_and_si256(w, _mm256_set1_epi32(0x200));
    __m256i snan = _mm256_and_si256(_mm256_cmpeq_epi32(q, _mm256_setzero_si256()), nan);
    __m256i clr = _mm256_and_si256(snan, _mm256_set1_epi32(0x00400000));
    return _mm256_andnot_ps(_mm256_castsi256_ps(clr), r);
}

/* ts_f32_to_f16 of 8 floats: vcvtps2ph in RNE already follows the reference (NaN quieted,
 * top payload bits kept). */
TS__AVX2_INL __m128i ts__avx2_f16_encode(__m256 x) {
    return _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

#endif
