/* The AVX2 decoders of packed e4m3 / e2m1 weight rows shared by the decode GEMM kernel
 * (gemm_decode_avx2.c) and Mega MoE's f32 chain (mega_moe_gemm_avx2.c).
 *
 * e4m3 / e2m1 codes become f16 bit patterns in 16-bit lanes (a shift pair and a mask: e4m3
 * magnitude << 7, e2m1 magnitude << 9, sign in bit 15) and vcvtph2ps widens them: the code
 * read as an f16 is b * 2^-8 (e4m3) or b * 2^-14 (e2m1), exactly, and the code's subnormals
 * are f16 subnormals, which vcvtph2ps turns into normal f32 without a microcode assist (an
 * earlier decoder placed the codes straight into f32 bit fields, b * 2^-120: e4m3 subnormals
 * and e2m1 0.5 were then f32 subnormals, and every FMA reading one took a ~100-cycle assist on
 * Intel cores, 20-90x the step time; Zen 3 takes none). Every product a * b * 2^-8 (or 2^-14)
 * and every partial sum is the canonical one times that power of two and stays normal (A is
 * e4m3 / e2m1, so a nonzero product is >= 2^-26), so the chain rounds as the canonical one;
 * the sum is multiplied back (exact) before acc = fmaf(p, sa * sb, acc).
 *
 * Lane order: with the slot order of ts__pw_slot (32-bit lane L of a row holds columns L,
 * 8 + L, 16 + L, 24 + L) the even bytes (e2m1: low nibbles) of a row's 16-bit lanes are
 * columns 0, 16, 1, 17, ..., 7, 23 and the odd bytes the same plus 8; ts__dec_unperm puts each pair of
 * vectors back in column order (two shuffles a vector, once per sub-block, not per row).
 * e4m3 code magnitude 0x7F is patched to the quiet NaN unless the weight is NaN-free. */
#ifndef TILESTACK_GEMM_DEC_AVX2_INL_H
#define TILESTACK_GEMM_DEC_AVX2_INL_H

#include "tilestack/core.h"

#include <immintrin.h>
#include <stdint.h>

#define TS__DEC_INL static inline __attribute__((always_inline))

/* e4m3 code magnitude 0x7F (f16 bits 0x3F80 here) -> the f16 quiet NaN 0x7E00 (f32
 * 0x7FC00000 after widening, the generic path's NaN), sign kept. */
TS__DEC_INL __m256i ts__dec_nan_patch(__m256i z) {
    const __m256i mag = _mm256_set1_epi16(0x3F80);
    const __m256i nan = _mm256_cmpeq_epi16(_mm256_and_si256(z, _mm256_set1_epi16(0x7F80)), mag);
    return _mm256_xor_si256(z, _mm256_and_si256(nan, _mm256_set1_epi16(0x3F80 ^ 0x7E00)));
}

/* Half h of a row as f32 in lane order: h = 0 (even bytes / low nibbles) -> o[0] = columns
 * 0, 16, 1, 17, 2, 18, 3, 19 and o[1] = 4, 20, ..., 7, 23; h = 1 -> the same plus 8. */
TS__DEC_INL void ts__dec_half(const uint8_t *row, int fmt, int nanfix, int h, int pshuf, __m256 o[2]) {
    __m256i z;
    if (fmt == TS_E4M3) {
        /* code byte in bits 15..8, then >> 1 (arithmetic): sign in 15, magnitude in 13..7 */
        const __m256i v = _mm256_loadu_si256((const __m256i *)row);
        z = _mm256_and_si256(_mm256_srai_epi16(h ? v : _mm256_slli_epi16(v, 8), 1),
                             _mm256_set1_epi16((short)0xBF80));
        if (nanfix) z = ts__dec_nan_patch(z);
    } else {
        __m256i y;
        if (pshuf) {
            /* byte w of the row -> high byte of 16-bit lane w (one pshufb on the broadcast row
             * saves the widening shift; the control vector costs a register the 6-row groups
             * need, so they zero-extend) */
            const __m256i ctrl = _mm256_setr_epi8(-128, 0, -128, 1, -128, 2, -128, 3, -128, 4, -128, 5,
                                                  -128, 6, -128, 7, -128, 8, -128, 9, -128, 10, -128, 11,
                                                  -128, 12, -128, 13, -128, 14, -128, 15);
            y = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)row)),
                                    ctrl);
        } else {
            y = _mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)row)), 8);
        }
        /* nibble in bits 15..12, then >> 3 (arithmetic): sign in 15, magnitude in 11..9 */
        z = _mm256_and_si256(_mm256_srai_epi16(h ? y : _mm256_slli_epi16(y, 4), 3),
                             _mm256_set1_epi16((short)0x8E00));
    }
    o[0] = _mm256_cvtph_ps(_mm256_castsi256_si128(z));
    o[1] = _mm256_cvtph_ps(_mm256_extracti128_si256(z, 1));
}

/* (o0, o1) of dec_half h -> columns 8h .. 8h + 7 (*lo) and 16 + 8h .. 23 + 8h (*hi). */
TS__DEC_INL void ts__dec_unperm(__m256 o0, __m256 o1, __m256 *lo, __m256 *hi) {
    *lo = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(o0, o1, 0x88)), 0xD8));
    *hi = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(o0, o1, 0xDD)), 0xD8));
}

#endif
