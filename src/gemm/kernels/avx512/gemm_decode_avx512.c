/* AVX-512 decode (small-M) kernel: FP4 (e2m1) weights at M = 1, the MoE experts' and the
 * FP8 x FP4 projections' decode step, and e4m3 / e2m1 / bf16 weights at 2 <= M <= 48
 * (below); e4m3 and bf16 at M = 1 (which stream at DRAM speed there already) take the AVX2
 * kernel's (gemm_decode_avx2.c). At M = 1 a row's 16 bytes widen to 16 dwords (vpmovzxbd)
 * and one vpermps of the 16-entry e2m1 table per nibble position gives 16 exact f32 values:
 * 4 instructions per 32 codes, against the AVX2 f16 widening's ~12 (that path measured 44-50 %
 * of DRAM read at M = 1 on Ice Lake, bound by the decoder). The values are exact and normal
 * or zero, and A is e4m3, so each lane runs the canonical fmaf chain unscaled: the bits of
 * the generic kernel.
 *
 * Lane order: with the slot order of ts__pw_slot the low nibbles of the row's bytes are
 * columns 0, 16, 1, 17, ..., 7, 23 and the high ones the same plus 8; the two sums are put
 * back in column order once per sub-block by two vpermt2ps. Two sub-blocks run interleaved
 * (4 independent FMA chains) and are promoted in block order, as in the AVX2 kernel. */
#include "core/internal.h"
#include "gemm/gemm_internal.h"
#include "gemm/gemm_kernels.h"
#include "numerics/kernels/avx512/cvt_avx512_inl.h"

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

/* ---- two or more rows (e4m3 and e2m1) ----
 * A packed row's 32 values decode into two zmm in slot order (lo: slots 0..15, hi: 16..31;
 * e4m3 through f16 as the AVX2 kernel, each value decode(code) * 2^-8, undone exactly at the
 * promotion; e2m1 exact through the table) and feed up to GMAX rows at once (2 zmm sums per
 * row, 24 for 12 rows). Above GMAX rows each sub-block's rows are decoded once into an L1
 * buffer in column order and the row groups run over it. Each lane is one column's fmaf
 * chain as in every other kernel, so the bits are the generic kernel's. */
enum { GMAX = 12, STAGE_ROWS = 128 };

/* One packed row -> lo / hi in slot order. */
INL void dec_row(const uint8_t *row, int fmt, int nanfix, __m512 tab, __m512 *lo, __m512 *hi) {
    if (fmt == TS_E4M3) {
        ts__avx512_e4m3x32_f16(_mm256_loadu_si256((const __m256i *)(const void *)row), nanfix, lo, hi);
    } else {
        const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)row));
        *lo = _mm512_permutexvar_ps(v, tab);
        *hi = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), tab);
    }
}

/* Slot-order sums -> columns 0..15 (c0) and 16..31 (c1). e4m3: slot 4 (c % 8) + c / 8 holds
 * column c; e2m1: low nibbles are columns 0, 16, 1, 17, .., high ones the same + 8. */
INL void unperm(int fmt, __m512 lo, __m512 hi, __m512 *c0, __m512 *c1) {
    if (fmt == TS_E4M3) {
        const __m512i i0 = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
        const __m512i i1 = _mm512_setr_epi32(2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31);
        *c0 = _mm512_permutex2var_ps(lo, i0, hi), *c1 = _mm512_permutex2var_ps(lo, i1, hi);
    } else {
        const __m512i i0 = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        const __m512i i1 = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
        *c0 = _mm512_permutex2var_ps(lo, i0, hi), *c1 = _mm512_permutex2var_ps(lo, i1, hi);
    }
}

/* acc row c (columns 0..31) = fmaf(p * unscale, sa * sb, acc), p in column order. */
INL void promote_cols(float *c, __m512 p0, __m512 p1, __m512 unscale, float sa, __m512 sb0,
                      __m512 sb1) {
    const __m512 s = _mm512_set1_ps(sa);
    _mm512_storeu_ps(c, _mm512_fmadd_ps(_mm512_mul_ps(p0, unscale), _mm512_mul_ps(s, sb0),
                                        _mm512_loadu_ps(c)));
    _mm512_storeu_ps(c + 16, _mm512_fmadd_ps(_mm512_mul_ps(p1, unscale), _mm512_mul_ps(s, sb1),
                                             _mm512_loadu_ps(c + 16)));
}

/* Rows i0 .. i0 + R - 1 of sub-block s: acc += p * unscale * (sa * sb), p in column order. */
INL void promote_group(const ts__gemm_dec_args *x, int R, int64_t i0, int64_t s, int sh,
                       __m512 p[][2], __m512 unscale) {
    const uint8_t *sbp = ts__dec_sb_ptr(x, sh, s);
    const __m512 sb0 = scales16(x, sbp), sb1 = scales16(x, sbp + (x->sb_u8 ? 16 : 64));
    for (int i = 0; i < R; i++)
        promote_cols(x->acc + (i0 + i) * W, p[i][0], p[i][1], unscale, x->sa[s * x->m + i0 + i], sb0, sb1);
}

/* Rows i0 .. i0 + R - 1 over one sub-block s of n packed rows at r, decoded as they stream. */
INL void rows_direct(const ts__gemm_dec_args *x, int fmt, int nanfix, int R, int64_t i0,
                     const uint8_t *r, int64_t s, int64_t n, int sh, __m512 tab, __m512 unscale) {
    const int64_t m = x->m, rb = x->row_bytes, pfm = 64 / rb - 1;
    const float *a = x->a + s * x->g * m + i0;
    __m512 p[GMAX][2];
    for (int i = 0; i < GMAX; i++) p[i][0] = _mm512_setzero_ps(), p[i][1] = _mm512_setzero_ps();
    for (int64_t k = 0; k < n; k++, a += m) {
        if (!(k & pfm)) _mm_prefetch((const char *)(r + k * rb) + PF_AHEAD, _MM_HINT_T0);
        __m512 lo, hi;
        dec_row(r + k * rb, fmt, nanfix, tab, &lo, &hi);
#pragma GCC unroll 12
        for (int i = 0; i < R; i++) {
            const __m512 xa = _mm512_set1_ps(a[i]);
            p[i][0] = _mm512_fmadd_ps(xa, lo, p[i][0]);
            p[i][1] = _mm512_fmadd_ps(xa, hi, p[i][1]);
        }
    }
    for (int i = 0; i < R; i++) unperm(fmt, p[i][0], p[i][1], &p[i][0], &p[i][1]);
    promote_group(x, R, i0, s, sh, p, unscale);
}

/* The same over a staged sub-block (column order, buf[k * 32 + c]). */
INL void rows_staged(const ts__gemm_dec_args *x, int R, int64_t i0, const float *buf, int64_t s,
                     int64_t n, int sh, __m512 unscale) {
    const int64_t m = x->m;
    const float *a = x->a + s * x->g * m + i0;
    __m512 p[GMAX][2];
    for (int i = 0; i < GMAX; i++) p[i][0] = _mm512_setzero_ps(), p[i][1] = _mm512_setzero_ps();
    for (int64_t k = 0; k < n; k++, a += m) {
        const __m512 b0 = _mm512_load_ps(buf + k * W), b1 = _mm512_load_ps(buf + k * W + 16);
#pragma GCC unroll 12
        for (int i = 0; i < R; i++) {
            const __m512 xa = _mm512_set1_ps(a[i]);
            p[i][0] = _mm512_fmadd_ps(xa, b0, p[i][0]);
            p[i][1] = _mm512_fmadd_ps(xa, b1, p[i][1]);
        }
    }
    promote_group(x, R, i0, s, sh, p, unscale);
}

/* R as a constant in each instance, so the sums stay in registers. */
#define TS__DEC_ROWS_SWITCH(CALL)                                                              \
    switch (R) {                                                                               \
    case 1: CALL(1); break;  case 2: CALL(2); break;   case 3: CALL(3); break;                 \
    case 4: CALL(4); break;  case 5: CALL(5); break;   case 6: CALL(6); break;                 \
    case 7: CALL(7); break;  case 8: CALL(8); break;   case 9: CALL(9); break;                 \
    case 10: CALL(10); break; case 11: CALL(11); break; default: CALL(12); break;              \
    }

INL void scaled_rows(const ts__gemm_dec_args *x, int fmt, int nanfix) {
    _Alignas(64) float buf[STAGE_ROWS * W];
    ts__gemm_lut_init();
    const __m512 tab = _mm512_loadu_ps(ts__gemm_lut.e2m1);
    const __m512 unscale = _mm512_set1_ps(fmt == TS_E4M3 ? 0x1p8f : 1.0f);
    const int sh = ts__dec_sub_shift(x);
    const int64_t len = x->len, g = x->g, m = x->m, rb = x->row_bytes, nsb = ts__ceil_div(len, g);
    const int64_t ng = ts__ceil_div(m, GMAX), pfm = 64 / rb - 1;
    for (int64_t s = 0; s < nsb; s++) {
        const int64_t n = ts__min64(g, len - s * g);
        const uint8_t *r = ts__dec_sub_rows(x, sh, s);
        if (ng > 1) { /* decode once for all row groups */
            for (int64_t k = 0; k < n; k++) {
                if (!(k & pfm)) _mm_prefetch((const char *)(r + k * rb) + PF_AHEAD, _MM_HINT_T0);
                __m512 lo, hi, c0, c1;
                dec_row(r + k * rb, fmt, nanfix, tab, &lo, &hi);
                unperm(fmt, lo, hi, &c0, &c1);
                _mm512_store_ps(buf + k * W, c0);
                _mm512_store_ps(buf + k * W + 16, c1);
            }
        }
        for (int64_t gi = 0, i0 = 0; gi < ng; gi++) {
            /* rows spread evenly over the groups: 13 -> 7 + 6, 16 -> 8 + 8 */
            const int64_t R = (m - i0) / (ng - gi) + ((m - i0) % (ng - gi) != 0);
#define TS__DIRECT(r_) rows_direct(x, fmt, nanfix, r_, i0, r, s, n, sh, tab, unscale)
#define TS__STAGED(r_) rows_staged(x, r_, i0, buf, s, n, sh, unscale)
            if (ng == 1) TS__DEC_ROWS_SWITCH(TS__DIRECT)
            else TS__DEC_ROWS_SWITCH(TS__STAGED)
#undef TS__DIRECT
#undef TS__STAGED
            i0 += R;
        }
    }
}

/* ---- bf16 weights, two or more rows: plain chains, acc = fmaf(a, b, acc) for k ascending ----
 * A row of 32 bf16 (column order) widens to two zmm; rows in groups of up to GMAX, K in
 * chunks of STAGE_ROWS rows, so a second group finds the chunk in L1; each group's sums are
 * the accumulator rows themselves (loaded and stored around a chunk: the chain continues). */
INL void bf16_rows(const ts__gemm_dec_args *x, int R, int64_t i0, int64_t k0, int64_t n) {
    const int64_t m = x->m, rb = x->row_bytes;
    const uint8_t *r = (const uint8_t *)x->bp + k0 * rb;
    const float *a = x->a + k0 * m + i0;
    __m512 p[GMAX][2];
    for (int i = 0; i < GMAX; i++) {
        const float *c = x->acc + (i0 + (i < R ? i : 0)) * W;
        p[i][0] = _mm512_loadu_ps(c), p[i][1] = _mm512_loadu_ps(c + 16);
    }
    for (int64_t k = 0; k < n; k++, r += rb, a += m) {
        _mm_prefetch((const char *)r + PF_AHEAD, _MM_HINT_T0);
        const __m512 b0 = ts__avx512_bf16_decode(_mm256_loadu_si256((const __m256i *)(const void *)r));
        const __m512 b1 = ts__avx512_bf16_decode(_mm256_loadu_si256((const __m256i *)(const void *)(r + 32)));
#pragma GCC unroll 12
        for (int i = 0; i < R; i++) {
            const __m512 xa = _mm512_set1_ps(a[i]);
            p[i][0] = _mm512_fmadd_ps(xa, b0, p[i][0]);
            p[i][1] = _mm512_fmadd_ps(xa, b1, p[i][1]);
        }
    }
    for (int i = 0; i < R; i++) {
        float *c = x->acc + (i0 + i) * W;
        _mm512_storeu_ps(c, p[i][0]), _mm512_storeu_ps(c + 16, p[i][1]);
    }
}

static void plain_bf16_rows(const ts__gemm_dec_args *x) {
    const int64_t m = x->m, ng = ts__ceil_div(m, GMAX);
    for (int64_t k0 = 0; k0 < x->len; k0 += STAGE_ROWS) {
        const int64_t n = ts__min64(STAGE_ROWS, x->len - k0);
        for (int64_t gi = 0, i0 = 0; gi < ng; gi++) {
            const int64_t R = (m - i0) / (ng - gi) + ((m - i0) % (ng - gi) != 0);
#define TS__BF16(r_) bf16_rows(x, r_, i0, k0, n)
            TS__DEC_ROWS_SWITCH(TS__BF16)
#undef TS__BF16
            i0 += R;
        }
    }
}

void ts__gemm_decode_32__avx512(const ts__gemm_dec_args *x) {
    const bool fp8 = x->fmt == TS_E4M3, fp4 = x->fmt == TS_E2M1X2;
    if (fp4 && x->m == 1 && x->sa) fp4_m1(x);
    /* M = 1 e4m3 streams at DRAM speed on the AVX2 kernel already; sub-blocks of more than
     * STAGE_ROWS values (not a DeepGEMM recipe) stay there too */
    else if ((fp8 || fp4) && x->m >= 2 && x->sa && x->g <= STAGE_ROWS) {
        if (fp4) scaled_rows(x, TS_E2M1X2, 0);
        else if (x->nan_free) scaled_rows(x, TS_E4M3, 0);
        else scaled_rows(x, TS_E4M3, 1);
    } else if (x->fmt == TS_BF16 && x->m >= 2 && !x->sa && !x->blk_bytes) {
        plain_bf16_rows(x);
    } else ts__gemm_decode_32__avx2(x);
}
