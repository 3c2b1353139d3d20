/* AVX-512 decode (small-M) kernel: FP4 (e2m1) weights at M = 1, the MoE experts' and the
 * FP8 x FP4 projections' decode step; every other case is the AVX2 kernel's
 * (gemm_decode_avx2.c). A row's 16 bytes widen to 16 dwords (vpmovzxbd) and one vpermps of
 * the 16-entry e2m1 table per nibble position gives 16 exact f32 values: 4 instructions per
 * 32 codes, against the AVX2 f16 widening's ~12 (that path measured 44-50 % of DRAM read at
 * M = 1 on Ice Lake, bound by the decoder). The values are exact and normal or zero, and A is
 * e4m3, so each lane runs the canonical fmaf chain unscaled: the bits of the generic kernel.
 *
 * Lane order: with the slot order of ts__pw_slot the low nibbles of the row's bytes are
 * columns 0, 16, 1, 17, ..., 7, 23 and the high ones the same plus 8; the two sums are put
 * back in column order once per sub-block by two vpermt2ps. Two sub-blocks run interleaved
 * (4 independent FMA chains) and are promoted in block order, as in the AVX2 kernel. */
#include "core/internal.h"
#include "gemm/gemm_internal.h"
#include "gemm/gemm_kernels.h"

#include <immintrin.h>

enum { W = TS__GEMM_DW, PF_AHEAD = 6144 };
#define INL static inline __attribute__((always_inline))

/* 16 scales from p (ue8m0 bytes or f32): ts_ue8m0_to_f32 is 2^(e-127), 0 -> 2^-127 (an f32
 * subnormal, only where the weight has a 0 byte), 255 -> NaN. */
INL __m512 scales16(const ts__gemm_dec_args *x, const uint8_t *p) {
    if (!x->sb_u8) return _mm512_loadu_ps((const float *)(const void *)p);
    const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
    __m512i r = _mm512_slli_epi32(e, 23);
    if (!x->sf_normal) {
        r = _mm512_mask_mov_epi32(r, _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()),
                                  _mm512_set1_epi32(0x00400000));
        r = _mm512_mask_mov_epi32(r, _mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(255)),
                                  _mm512_set1_epi32(0x7FC00000));
    }
    return _mm512_castsi512_ps(r);
}

/* acc[0..31] = fmaf(p, sa * sb, acc) for the lane-order sums lo / hi of one sub-block. */
INL void promote(const ts__gemm_dec_args *x, const uint8_t *sbp, float sa, __m512 lo, __m512 hi) {
    const __m512i ia = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i ib = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const __m512 pa = _mm512_permutex2var_ps(lo, ia, hi), pb = _mm512_permutex2var_ps(lo, ib, hi);
    const __m512 s = _mm512_set1_ps(sa);
    const size_t half = x->sb_u8 ? 16 : 64; /* bytes of 16 scales */
    float *c = x->acc;
    _mm512_storeu_ps(c, _mm512_fmadd_ps(pa, _mm512_mul_ps(s, scales16(x, sbp)), _mm512_loadu_ps(c)));
    _mm512_storeu_ps(c + 16, _mm512_fmadd_ps(pb, _mm512_mul_ps(s, scales16(x, sbp + half)),
                                             _mm512_loadu_ps(c + 16)));
}

INL void fma_row(const uint8_t *row, __m512 tab, __m512 xa, __m512 *lo, __m512 *hi) {
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)row));
    /* vpermps reads the low 4 bits of each index lane: the low nibble, then the high one */
    *lo = _mm512_fmadd_ps(xa, _mm512_permutexvar_ps(v, tab), *lo);
    *hi = _mm512_fmadd_ps(xa, _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), tab), *hi);
}

static void fp4_m1(const ts__gemm_dec_args *x) {
    ts__gemm_lut_init();
    const __m512 tab = _mm512_loadu_ps(ts__gemm_lut.e2m1);
    const int sh = ts__dec_sub_shift(x);
    const int64_t len = x->len, g = x->g, rb = x->row_bytes, nsb = ts__ceil_div(len, g);
    const int64_t pfm = 64 / rb - 1; /* one prefetch per 64-byte line */
    for (int64_t s = 0; s < nsb; s += 2) {
        const int64_t n0 = ts__min64(g, len - s * g);
        const int64_t n1 = s + 1 < nsb ? ts__min64(g, len - (s + 1) * g) : 0; /* n1 <= n0 */
        const uint8_t *r0 = ts__dec_sub_rows(x, sh, s), *r1 = n1 ? ts__dec_sub_rows(x, sh, s + 1) : r0;
        const float *a0 = x->a + s * g, *a1 = a0 + g;
        __m512 l0 = _mm512_setzero_ps(), h0 = l0, l1 = l0, h1 = l0;
        int64_t k = 0;
        for (; k < n1; k++) {
            if (!(k & pfm)) {
                _mm_prefetch((const char *)(r0 + k * rb) + PF_AHEAD, _MM_HINT_T0);
                _mm_prefetch((const char *)(r1 + k * rb) + PF_AHEAD, _MM_HINT_T0);
            }
            fma_row(r0 + k * rb, tab, _mm512_set1_ps(a0[k]), &l0, &h0);
            fma_row(r1 + k * rb, tab, _mm512_set1_ps(a1[k]), &l1, &h1);
        }
        for (; k < n0; k++) {
            if (!(k & pfm)) _mm_prefetch((const char *)(r0 + k * rb) + PF_AHEAD, _MM_HINT_T0);
            fma_row(r0 + k * rb, tab, _mm512_set1_ps(a0[k]), &l0, &h0);
        }
        promote(x, ts__dec_sb_ptr(x, sh, s), x->sa[s], l0, h0);
        if (n1) promote(x, ts__dec_sb_ptr(x, sh, s + 1), x->sa[s + 1], l1, h1);
    }
}

void ts__gemm_decode_32__avx512(const ts__gemm_dec_args *x) {
    if (x->fmt == TS_E2M1X2 && x->m == 1 && x->sa) fp4_m1(x);
    else ts__gemm_decode_32__avx2(x);
}
