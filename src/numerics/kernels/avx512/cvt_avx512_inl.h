/* AVX-512 format-conversion primitives (16 f32 lanes), shared by the bulk converters
 * (cvt_avx512.c), the AVX-512 quantisers and the EP kernels. Include only from files built
 * with the AVX-512 flags (F/BW/VL/DQ; no VBMI, BF16 or FP16 instruction is used, so every
 * AVX-512 server CPU runs them).
 *
 * Every primitive is bit-identical to the scalar reference in src/numerics/convert_scalar.c and
 * follows the recipes of the AVX2 primitives (kernels/avx2/cvt_avx2_inl.h), with compares into
 * mask registers instead of blend vectors. No FP instruction takes a denormal operand or makes
 * a denormal result for inputs that are normal in their format: the one FPU step of the
 * encoders (the add that rounds e4m3 / e5m2 subnormal codes) runs masked to the lanes that need
 * it and are normal f32 (masked-off lanes raise no flag), NaN and range tests are integer
 * compares on |x| bits, and the decoders read e4m3 / e5m2 codes as f16 (vcvtph2ps widens f16
 * subnormals exactly and raises no DE). Tails use masked loads and stores: the masked-off lanes
 * are zeros, which no step turns into a denormal. */
#ifndef TS_CVT_AVX512_INL_H
#define TS_CVT_AVX512_INL_H

#include <immintrin.h>
#include <stdint.h>

#define TS__AVX512_INL static inline __attribute__((always_inline))

/* ---------------- tail masks: the first r lanes (r may be <= 0 or past the width) ---------------- */
TS__AVX512_INL __mmask16 ts__avx512_lanes16(int64_t r) {
    return r <= 0 ? 0 : r >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << r) - 1u);
}
TS__AVX512_INL __mmask32 ts__avx512_lanes32(int64_t r) {
    return r <= 0 ? 0 : r >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << r) - 1u);
}
TS__AVX512_INL __mmask64 ts__avx512_lanes64(int64_t r) {
    return r <= 0 ? 0 : r >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << r) - 1;
}

TS__AVX512_INL __m512i ts__avx512_absbits(__m512 x) {
    return _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7FFFFFFF));
}
/* lanes of |x| bits a that hold a NaN */
TS__AVX512_INL __mmask16 ts__avx512_nan_a(__m512i a) {
    return _mm512_cmpgt_epu32_mask(a, _mm512_set1_epi32(0x7F800000));
}
/* r with the lanes of m replaced by the quiet NaN 0x7FC00000 carrying r's sign */
TS__AVX512_INL __m512 ts__avx512_qnan_keep_sign(__m512 r, __mmask16 m) {
    /* (r & sign) | qnan: ternary-logic table 0xEA = (A & B) | C */
    return _mm512_castsi512_ps(_mm512_mask_ternarylogic_epi32(_mm512_castps_si512(r), m,
                                                              _mm512_set1_epi32((int)0x80000000u),
                                                              _mm512_set1_epi32(0x7FC00000), 0xEA));
}

/* ======================= encoders: 16 x f32 -> codes in 32-bit lanes ======================= */

/* e4m3 magnitude codes from |x| bits a, before the clamp (as ts__avx2_e4m3_mag_raw): RNE at
 * f32 bit 20 with the rebias in the constant; below 2^-6 (e4m3 subnormal codes) the FPU add
 * of 2^14 rounds at the quantum 2^-9. f32 subnormal inputs round to code 0 and skip the add. */
TS__AVX512_INL __m512i ts__avx512_e4m3_mag_raw(__m512i a) {
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(a, 20), _mm512_set1_epi32(1));
    __m512i c = _mm512_add_epi32(_mm512_add_epi32(a, lsb), _mm512_set1_epi32(0x7FFFF - (int)(960u << 20)));
    c = _mm512_srli_epi32(c, 20);
    const __mmask16 tiny = _mm512_cmplt_epu32_mask(a, _mm512_set1_epi32(0x3C800000));
    if (tiny) { /* rare in real data: skip the masked work when no lane needs it */
        const __mmask16 tn = _mm512_mask_cmpge_epu32_mask(tiny, a, _mm512_set1_epi32(0x00800000));
        const __m512 sm = _mm512_maskz_add_ps(tn, _mm512_castsi512_ps(a), _mm512_set1_ps(16384.0f));
        c = _mm512_mask_mov_epi32(c, tiny, _mm512_setzero_si512());
        c = _mm512_mask_sub_epi32(c, tn, _mm512_castps_si512(sm), _mm512_set1_epi32(0x46800000));
    }
    return c;
}

/* Encoder modes of ts__avx512_e4m3x64_encode. */
enum {
    TS__E4M3_PLAIN = 0, /* ts_f32_to_e4m3: NaN and |x| > 464 -> 0x7F | sign */
    TS__E4M3_QUANT = 1, /* the quantisers' rule: as plain, but NaN -> 0x7F without sign */
    TS__E4M3_SAT = 2,   /* ts_f32_to_e4m3_sat: |x| (inf included) clamped to 448 first */
};

/* e4m3 codes of 64 floats (x[k] = elements 16k..16k+15) -> 64 bytes in element order. The
 * signed-saturating packs clamp the raw magnitudes to 0x7F and carry each lane's sign (the f32
 * bits packed the same way stay negative), as ts__avx2_e4m3x32_encode. */
TS__AVX512_INL __m512i ts__avx512_e4m3x64_encode(const __m512 x[4], const int mode) {
    __m512i m[4], u[4];
    for (int k = 0; k < 4; k++) {
        u[k] = _mm512_castps_si512(x[k]);
        __m512i a = ts__avx512_absbits(x[k]);
        if (mode == TS__E4M3_SAT)
            a = _mm512_mask_min_epu32(a, _mm512_cmple_epu32_mask(a, _mm512_set1_epi32(0x7F800000)), a,
                                      _mm512_set1_epi32(0x43E00000));
        if (mode == TS__E4M3_QUANT) u[k] = _mm512_mask_mov_epi32(u[k], ts__avx512_nan_a(a), a);
        m[k] = ts__avx512_e4m3_mag_raw(a);
    }
    const __m512i mg = _mm512_packs_epi16(_mm512_packs_epi32(m[0], m[1]), _mm512_packs_epi32(m[2], m[3]));
    const __m512i sg = _mm512_packs_epi16(_mm512_packs_epi32(u[0], u[1]), _mm512_packs_epi32(u[2], u[3]));
    const __m512i c = _mm512_ternarylogic_epi32(mg, sg, _mm512_set1_epi8((char)0x80), 0xF8); /* A | (B & C) */
    /* the packs work per 128-bit lane: dword 4k + j holds elements 4k..4k+3 of x[j] */
    return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), c);
}

/* Four vectors of 16 byte codes (0..255 in 32-bit lanes, vector k = elements 16k..16k+15) ->
 * 64 bytes in element order. */
TS__AVX512_INL __m512i ts__avx512_pack_u8x64(const __m512i c[4]) {
    const __m512i b = _mm512_packus_epi16(_mm512_packus_epi32(c[0], c[1]), _mm512_packus_epi32(c[2], c[3]));
    return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), b);
}

/* Two vectors of 16 u16 codes in 32-bit lanes (elements 0..15, 16..31) -> 32 u16 in order. */
TS__AVX512_INL __m512i ts__avx512_pack_u16x32(__m512i lo, __m512i hi) {
    return _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), _mm512_packus_epi32(lo, hi));
}

/* ts_f32_to_e5m2 (sat = 0) / ts_f32_to_e5m2_sat (sat = 1) of 16 floats, as ts__avx2_e5m2_mag:
 * RNE at bit 21, finite overflow and inf -> 0x7C, NaN -> 0x7E | sign; below 2^-14 the add of
 * 2^7 rounds at the quantum 2^-16 (f32 subnormals give 0 without it). */
TS__AVX512_INL __m512i ts__avx512_e5m2_codes(__m512 x, const int sat) {
    const __m512i u = _mm512_castps_si512(x);
    __m512i a = ts__avx512_absbits(x);
    const __mmask16 nan = ts__avx512_nan_a(a);
    if (sat) a = _mm512_min_epu32(a, _mm512_set1_epi32(0x47600000));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(a, 21), _mm512_set1_epi32(1));
    __m512i c = _mm512_add_epi32(a, _mm512_add_epi32(_mm512_set1_epi32(0xFFFFF), lsb));
    c = _mm512_sub_epi32(_mm512_srli_epi32(c, 21), _mm512_set1_epi32(112 << 2));
    const __mmask16 tiny = _mm512_cmplt_epu32_mask(a, _mm512_set1_epi32(0x38800000));
    if (tiny) {
        const __mmask16 tn = _mm512_mask_cmpge_epu32_mask(tiny, a, _mm512_set1_epi32(0x00800000));
        const __m512 sm = _mm512_maskz_add_ps(tn, _mm512_castsi512_ps(a), _mm512_set1_ps(128.0f));
        c = _mm512_mask_mov_epi32(c, tiny, _mm512_setzero_si512());
        c = _mm512_mask_sub_epi32(c, tn, _mm512_castps_si512(sm), _mm512_set1_epi32(0x43000000));
    }
    c = _mm512_min_epu32(c, _mm512_set1_epi32(0x7C));
    c = _mm512_mask_mov_epi32(c, nan, _mm512_set1_epi32(0x7E));
    return _mm512_or_si512(c, _mm512_and_si512(_mm512_srli_epi32(u, 24), _mm512_set1_epi32(0x80)));
}

/* e2m1 codes of 16 floats in 32-bit lanes. dg = 0: ts_f32_to_e2m1 (RNE, saturating at 6, sign
 * kept on zero, NaN -> 0x7); dg = 1: ts_f32_to_e2m1_dg (strict thresholds, ties down, sign only
 * on non-zero codes, NaN -> 0x7). The thresholds are compared as integers on |x| bits (the
 * order of non-negative floats), so no FP compare sees the input. */
TS__AVX512_INL __m512i ts__avx512_e2m1_codes(__m512 x, const int dg) {
    const __m512i u = _mm512_castps_si512(x), a = ts__avx512_absbits(x), one = _mm512_set1_epi32(1);
    /* 0.25 0.75 1.25 1.75 2.5 3.5 5.0; RNE: >= where the upper neighbour has the even code */
    static const int32_t thr[7] = {0x3E800000, 0x3F400000, 0x3FA00000, 0x3FE00000,
                                   0x40200000, 0x40600000, 0x40A00000};
    __m512i c = _mm512_setzero_si512();
    for (int t = 0; t < 7; t++) {
        const __m512i vt = _mm512_set1_epi32(thr[t]);
        const __mmask16 m = (!dg && (t & 1)) ? _mm512_cmpge_epu32_mask(a, vt) : _mm512_cmpgt_epu32_mask(a, vt);
        c = _mm512_mask_add_epi32(c, m, c, one);
    }
    const __m512i s = _mm512_and_si512(_mm512_srli_epi32(u, 28), _mm512_set1_epi32(0x8));
    c = dg ? _mm512_mask_or_epi32(c, _mm512_test_epi32_mask(c, c), c, s) : _mm512_or_si512(c, s);
    return _mm512_mask_mov_epi32(c, ts__avx512_nan_a(a), _mm512_set1_epi32(0x7));
}

/* 16 e2m1 codes (32-bit lanes, low nibble) -> 8 bytes, element 2i in the low nibble of byte i:
 * each odd lane's code moves next to its even neighbour inside the qword, then vpmovqb. */
TS__AVX512_INL __m128i ts__avx512_e2m1_pack16(__m512i c) {
    return _mm512_cvtepi64_epi8(_mm512_or_si512(c, _mm512_srli_epi64(c, 28)));
}

/* ts_f32_to_bf16 of 16 floats (RNE, NaN -> 0x7FC0 | sign), codes in the low 16 bits of lanes. */
TS__AVX512_INL __m512i ts__avx512_bf16_codes(__m512 x) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i hi = _mm512_srli_epi32(u, 16);
    const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), lsb)), 16);
    const __m512i qn = _mm512_ternarylogic_epi32(hi, _mm512_set1_epi32(0x8000), _mm512_set1_epi32(0x7FC0), 0xEA);
    return _mm512_mask_mov_epi32(r, ts__avx512_nan_a(ts__avx512_absbits(x)), qn);
}

/* ts_f32_to_f16 of 16 floats: vcvtps2ph in RNE follows the reference (see the AVX2 helper). */
TS__AVX512_INL __m256i ts__avx512_f16_encode(__m512 x) {
    return _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

/* ======================= decoders ======================= */

/* ts_bf16_to_f32 of 16 bf16 (integer shift: bf16 subnormals never reach the FPU). */
TS__AVX512_INL __m512 ts__avx512_bf16_decode(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* ts_f16_to_f32 of 16 f16: vcvtph2ps quiets signalling NaNs, the reference widens exactly, so
 * the quiet bit (set by the conversion) is cleared again where the input lacked it. */
TS__AVX512_INL __m512 ts__avx512_f16_decode(__m256i h) {
    const __m512 r = _mm512_cvtph_ps(h);
    const __m512i w = _mm512_cvtepu16_epi32(h);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(w, _mm512_set1_epi32(0x7FFF)),
                                                  _mm512_set1_epi32(0x7C00));
    const __mmask16 snan = _mm512_mask_testn_epi32_mask(nan, w, _mm512_set1_epi32(0x200));
    return _mm512_castsi512_ps(_mm512_mask_xor_epi32(_mm512_castps_si512(r), snan, _mm512_castps_si512(r),
                                                     _mm512_set1_epi32(0x00400000)));
}

/* The 16 lanes of 16 e4m3 bytes that hold a NaN code (0x7F / 0xFF). */
TS__AVX512_INL __mmask16 ts__avx512_e4m3x16_nan(__m128i bytes) {
    return _mm_cmpeq_epi8_mask(_mm_or_si128(bytes, _mm_set1_epi8((char)0x80)), _mm_set1_epi8((char)0xFF));
}

/* decode(code) * k of 16 e4m3 codes, NaN codes excepted (their lanes hold garbage): in 16-bit
 * lanes the sign goes to bit 15 and the 7 magnitude bits under the f16 exponent / mantissa, an
 * f16 equal to the e4m3 value times 2^-8 (subnormals included), which vcvtph2ps widens exactly;
 * with k = 256 * s (exact while finite) one multiply rounds decode(code) * s once. */
TS__AVX512_INL __m512 ts__avx512_e4m3x16_mul(__m128i bytes, __m512 k) {
    const __m256i t = _mm256_slli_epi16(_mm256_cvtepi8_epi16(bytes), 7);
    return _mm512_mul_ps(_mm512_cvtph_ps(_mm256_and_si256(t, _mm256_set1_epi16((short)0xBF80))), k);
}

/* 32 e4m3 codes -> decode(code) * 2^-8 in two zmm, lo = bytes 0..15, hi = 16..31: the f16
 * route of ts__avx512_e4m3x16_mul, 32 codes per integer op (the GEMM packer and decode
 * kernel). nanfix: NaN codes give the f16 NaN 0x7E00 | sign, so f32 0x7FC00000 | sign after
 * any exact scaling, as ts_e4m3_to_f32; without it their lanes hold garbage. */
TS__AVX512_INL void ts__avx512_e4m3x32_f16(__m256i bytes, const int nanfix, __m512 *lo, __m512 *hi) {
    __m512i h = _mm512_and_si512(_mm512_slli_epi16(_mm512_cvtepi8_epi16(bytes), 7),
                                 _mm512_set1_epi16((short)0xBF80));
    if (nanfix) { /* f16 0x3F80 | sign -> 0x7E00 | sign */
        const __mmask32 nan = _mm512_cmpeq_epi16_mask(_mm512_or_si512(h, _mm512_set1_epi16((short)0x8000)),
                                                      _mm512_set1_epi16((short)0xBF80));
        h = _mm512_mask_add_epi16(h, nan, h, _mm512_set1_epi16(0x7E00 - 0x3F80));
    }
    *lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
    *hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
}

/* ts_e4m3_to_f32 of 16 codes. */
TS__AVX512_INL __m512 ts__avx512_e4m3x16_decode(__m128i bytes) {
    return ts__avx512_qnan_keep_sign(ts__avx512_e4m3x16_mul(bytes, _mm512_set1_ps(256.0f)),
                                     ts__avx512_e4m3x16_nan(bytes));
}

/* ts_e5m2_to_f32 of 16 codes: an e5m2 byte is the top byte of the f16 of the same value, so
 * vcvtph2ps widens it exactly (inf included); NaN codes get the reference's 0x7FC00000 | sign. */
TS__AVX512_INL __m512 ts__avx512_e5m2x16_decode(__m128i bytes) {
    const __m512 r = _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(bytes), 8));
    const __mmask16 nan = _mm_cmpgt_epu8_mask(_mm_and_si128(bytes, _mm_set1_epi8(0x7F)), _mm_set1_epi8(0x7C));
    return ts__avx512_qnan_keep_sign(r, nan);
}

/* 16 packed e2m1 bytes (32 values) -> out[0] (elements 0..15), out[1] (16..31): nibbles to
 * 32-bit lanes, a 16-entry table lookup (vpermps), and a qword interleave of the even / odd
 * elements. plus_zero: code 8 (-0) gives +0, as upstream's dequantisation. */
TS__AVX512_INL void ts__avx512_e2m1x32_decode(__m128i bytes, __m512 out[2], const int plus_zero) {
    const __m512 tab = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, plus_zero ? 0.0f : -0.0f,
                                      -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
    const __m512i w = _mm512_cvtepu8_epi32(bytes);
    const __m512 lo = _mm512_permutexvar_ps(w, tab); /* vpermps reads index bits 0..3 only */
    const __m512 hi = _mm512_permutexvar_ps(_mm512_srli_epi32(w, 4), tab);
    /* per 128-bit lane k: unpacklo = elements 8k..8k+3, unpackhi = 8k+4..8k+7 */
    const __m512i a = _mm512_castps_si512(_mm512_unpacklo_ps(lo, hi));
    const __m512i b = _mm512_castps_si512(_mm512_unpackhi_ps(lo, hi));
    out[0] = _mm512_castsi512_ps(_mm512_permutex2var_epi64(a, _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11), b));
    out[1] = _mm512_castsi512_ps(_mm512_permutex2var_epi64(a, _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15), b));
}

#endif
