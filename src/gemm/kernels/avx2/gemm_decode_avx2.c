/* AVX2/FMA decode (small-M) kernel: one 32-column panel, B decoded straight from the packed
 * weight rows into ymm registers (8 columns each), A broadcast per row. Lanes run across
 * columns only, so each lane performs the scalar fmaf chain of the generic kernel.
 *
 * e4m3 / e2m1 codes are widened through f16 (gemm_dec_avx2_inl.h: no subnormal f32 operand
 * ever), in a lane order that ts__dec_unperm restores once per sub-block.
 *
 * Shapes: one row: two sub-blocks interleaved (8 independent FMA chains, the block sums are
 * independent), each promoted in block order; two rows: one full row of B feeds both (8
 * chains); three or more: the panel in two halves of 16 columns, each half decoded once per
 * group of up to GMAX = 6 rows (2 chains per row), so B never goes through memory as f32;
 * above 12 rows (6 for e2m1) each sub-block is decoded once into an L1 buffer of f32.
 * bf16 and f32 rows (plain weights, bf16 GEMMs) keep the straightforward path. */
#include "core/internal.h"
#include "gemm/gemm_kernels.h"
#include "gemm/kernels/avx2/gemm_dec_avx2_inl.h"
#include "numerics/kernels/avx2/cvt_avx2_inl.h"

#include <immintrin.h>
#include <string.h>

/* PF_AHEAD: software prefetch distance on the weight stream, about 6 KiB: at ~20 GB/s and
 * ~100 ns DRAM latency a shorter one (1.5 KiB tried) leaves the stream waiting; 6-12 KiB
 * gave 17.5-18 GB/s at M = 1 (prefetcht0; t1 / t2 no better). */
enum { W = TS__GEMM_DW, STAGE = 128, PF_AHEAD = 6144, GMAX = 6 };
#define PFX(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)

#define INL static inline __attribute__((always_inline))

/* ---------------------------------------------------------------- e4m3 / e2m1 */

/* p[2h + t] = fmaf(xa, o[t] of half h, p[2h + t]) (lane order). */
INL void fma_half(const uint8_t *row, int fmt, int nanfix, int h, __m256 xa, __m256 p[4]) {
    __m256 o[2];
    ts__dec_half(row, fmt, nanfix, h, 1, o);
    p[2 * h] = _mm256_fmadd_ps(xa, o[0], p[2 * h]);
    p[2 * h + 1] = _mm256_fmadd_ps(xa, o[1], p[2 * h + 1]);
}

/* ts_ue8m0_to_f32 of 8 bytes: 2^(e-127); e = 0 is the subnormal 2^-127, 255 NaN. */
INL __m256 ue8m0x8(const uint8_t *p, int normal) {
    __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    __m256i r = _mm256_slli_epi32(e, 23);
    if (normal) return _mm256_castsi256_ps(r);
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x00400000),
                           _mm256_cmpeq_epi32(e, _mm256_setzero_si256()));
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC00000),
                           _mm256_cmpeq_epi32(e, _mm256_set1_epi32(255)));
    return _mm256_castsi256_ps(r);
}

INL void load_sb(const ts__gemm_dec_args *x, int sh, int64_t s, __m256 sb[4]) {
    const uint8_t *p = ts__dec_sb_ptr(x, sh, s);
    for (int t = 0; t < 4; t++)
        sb[t] = x->sb_u8 ? ue8m0x8(p + 8 * t, x->sf_normal) : _mm256_loadu_ps((const float *)p + 8 * t);
}

/* acc[8t..] = fmaf(p * unscale, sa * sb, acc) for columns 8t .. 8t + 7. */
INL void promote1(float *c, __m256 p, __m256 unscale, float sa, __m256 sb) {
    const __m256 s = _mm256_mul_ps(_mm256_set1_ps(sa), sb);
    _mm256_storeu_ps(c, _mm256_fmadd_ps(_mm256_mul_ps(p, unscale), s, _mm256_loadu_ps(c)));
}

/* promote1 of the four lane-order sums of a full row (fma_half's p) into columns 0..31. */
INL void promote_row(float *c, const __m256 p[4], __m256 unscale, float sa, const __m256 sb[4]) {
    for (int h = 0; h < 2; h++) {
        __m256 lo, hi;
        ts__dec_unperm(p[2 * h], p[2 * h + 1], &lo, &hi);
        promote1(c + 8 * h, lo, unscale, sa, sb[h]);
        promote1(c + 16 + 8 * h, hi, unscale, sa, sb[2 + h]);
    }
}

/* One row (m == 1): sub-blocks in pairs, interleaved. */
INL void scaled_m1(const ts__gemm_dec_args *x, int fmt, int nanfix, __m256 unscale, int sh) {
    const int64_t len = x->len, g = x->g, rb = x->row_bytes, nsb = ts__ceil_div(len, g);
    const int64_t pfm = 64 / rb - 1; /* one prefetch per 64-byte line */
    const float *a = x->a;
    float *c = x->acc;
    for (int64_t s = 0; s < nsb; s += 2) {
        const int64_t n0 = ts__min64(g, len - s * g);
        const int64_t n1 = s + 1 < nsb ? ts__min64(g, len - (s + 1) * g) : 0; /* n1 <= n0 */
        const uint8_t *r0 = ts__dec_sub_rows(x, sh, s), *r1 = n1 ? ts__dec_sub_rows(x, sh, s + 1) : r0;
        const float *a0 = a + s * g, *a1 = a0 + g;
        __m256 p0[4], p1[4];
        for (int t = 0; t < 4; t++) p0[t] = _mm256_setzero_ps(), p1[t] = _mm256_setzero_ps();
        int64_t k = 0;
        for (; k < n1; k++) {
            if (!(k & pfm)) {
                PFX((const char *)(r0 + k * rb) + PF_AHEAD);
                PFX((const char *)(r1 + k * rb) + PF_AHEAD);
            }
            /* half rows, each consumed at once: few live registers, no spilled sums */
            const __m256 x0 = _mm256_broadcast_ss(a0 + k), x1 = _mm256_broadcast_ss(a1 + k);
            fma_half(r0 + k * rb, fmt, nanfix, 0, x0, p0);
            fma_half(r1 + k * rb, fmt, nanfix, 0, x1, p1);
            fma_half(r0 + k * rb, fmt, nanfix, 1, x0, p0);
            fma_half(r1 + k * rb, fmt, nanfix, 1, x1, p1);
        }
        for (; k < n0; k++) {
            if (!(k & pfm)) PFX((const char *)(r0 + k * rb) + PF_AHEAD);
            const __m256 x0 = _mm256_broadcast_ss(a0 + k);
            fma_half(r0 + k * rb, fmt, nanfix, 0, x0, p0);
            fma_half(r0 + k * rb, fmt, nanfix, 1, x0, p0);
        }
        __m256 sb[4];
        load_sb(x, sh, s, sb);
        promote_row(c, p0, unscale, x->sa[s], sb);
        if (n1) {
            load_sb(x, sh, s + 1, sb);
            promote_row(c, p1, unscale, x->sa[s + 1], sb);
        }
    }
}

/* Two rows (m == 2): one decoded row feeds both. */
INL void scaled_m2(const ts__gemm_dec_args *x, int fmt, int nanfix, __m256 unscale, int sh) {
    const int64_t len = x->len, g = x->g, rb = x->row_bytes, nsb = ts__ceil_div(len, g);
    const int64_t pfm = 64 / rb - 1;
    for (int64_t s = 0; s < nsb; s++) {
        const int64_t n = ts__min64(g, len - s * g);
        const uint8_t *r = ts__dec_sub_rows(x, sh, s);
        const float *a = x->a + s * g * 2;
        __m256 p0[4], p1[4];
        for (int t = 0; t < 4; t++) p0[t] = _mm256_setzero_ps(), p1[t] = _mm256_setzero_ps();
        for (int64_t k = 0; k < n; k++) {
            if (!(k & pfm)) PFX((const char *)(r + k * rb) + PF_AHEAD);
            const __m256 x0 = _mm256_broadcast_ss(a + 2 * k), x1 = _mm256_broadcast_ss(a + 2 * k + 1);
            for (int h = 0; h < 2; h++) {
                __m256 o[2];
                ts__dec_half(r + k * rb, fmt, nanfix, h, 1, o);
                p0[2 * h] = _mm256_fmadd_ps(x0, o[0], p0[2 * h]);
                p0[2 * h + 1] = _mm256_fmadd_ps(x0, o[1], p0[2 * h + 1]);
                p1[2 * h] = _mm256_fmadd_ps(x1, o[0], p1[2 * h]);
                p1[2 * h + 1] = _mm256_fmadd_ps(x1, o[1], p1[2 * h + 1]);
            }
        }
        __m256 sb[4];
        load_sb(x, sh, s, sb);
        promote_row(x->acc, p0, unscale, x->sa[s * 2], sb);
        promote_row(x->acc + W, p1, unscale, x->sa[s * 2 + 1], sb);
    }
}

/* Rows i0 .. i0 + R - 1 (R <= 4), half h of the panel, one sub-block of n rows. */
INL void group_half(const ts__gemm_dec_args *x, int fmt, int nanfix, __m256 unscale, int R,
                    int64_t i0, int h, const uint8_t *r, int64_t s, int64_t n, int sh, int pf) {
    const int64_t m = x->m, rb = x->row_bytes;
    const float *a = x->a + s * x->g * m + i0;
    __m256 p[6][2];
    for (int i = 0; i < 6; i++) p[i][0] = _mm256_setzero_ps(), p[i][1] = _mm256_setzero_ps();
    int64_t k = 0;
    if (fmt == TS_E4M3 && R < 6) {
        /* two rows = one 64-byte line of B per step: one prefetch per step, no per-row test
         * (3-5 rows: 2-4% per row; the 6-row and e2m1 loops measured no better this way) */
        const uint8_t *rk = r;
        const float *ak = a;
        for (; k + 2 <= n; k += 2, rk += 2 * rb, ak += 2 * m) {
            if (pf) PFX((const char *)rk + PF_AHEAD);
            for (int u = 0; u < 2; u++) {
                __m256 o[2];
                ts__dec_half(rk + u * rb, fmt, nanfix, h, 0, o);
                const float *au = ak + u * m;
                for (int i = 0; i < R; i++) {
                    const __m256 xa = _mm256_broadcast_ss(au + i);
                    p[i][0] = _mm256_fmadd_ps(xa, o[0], p[i][0]);
                    p[i][1] = _mm256_fmadd_ps(xa, o[1], p[i][1]);
                }
            }
        }
    }
    const int64_t pfm = 64 / rb - 1;
    for (; k < n; k++) {
        if (pf && !(k & pfm)) PFX((const char *)(r + k * rb) + PF_AHEAD);
        __m256 o[2];
        ts__dec_half(r + k * rb, fmt, nanfix, h, 0, o);
        for (int i = 0; i < R; i++) {
            const __m256 xa = _mm256_broadcast_ss(a + k * m + i);
            p[i][0] = _mm256_fmadd_ps(xa, o[0], p[i][0]);
            p[i][1] = _mm256_fmadd_ps(xa, o[1], p[i][1]);
        }
    }
    /* back in column order: c0 = 8h .. 8h + 7, c1 = 16 + 8h ... The scales are decoded
     * here, after the loop: kept live across it, gcc spilled a sum (R = 6: 5.2 -> 8.4 ns per
     * row). */
    const int c0 = 8 * h, c1 = 16 + 8 * h;
    const uint8_t *sp = ts__dec_sb_ptr(x, sh, s);
    __m256 sbh[2];
    for (int t = 0; t < 2; t++) {
        const int c = t ? c1 : c0;
        sbh[t] = x->sb_u8 ? ue8m0x8(sp + c, x->sf_normal) : _mm256_loadu_ps((const float *)sp + c);
    }
    for (int i = 0; i < R; i++) {
        const float sa = x->sa[s * m + i0 + i];
        float *c = x->acc + (i0 + i) * W;
        __m256 lo, hi;
        ts__dec_unperm(p[i][0], p[i][1], &lo, &hi);
        promote1(c + c0, lo, unscale, sa, sbh[0]);
        promote1(c + c1, hi, unscale, sa, sbh[1]);
    }
}

INL void group_halves(const ts__gemm_dec_args *x, int fmt, int nanfix, __m256 unscale, int h,
                      const uint8_t *r, int64_t s, int64_t n, int sh) {
    const int64_t m = x->m, ng = ts__ceil_div(m, GMAX);
    for (int64_t gi = 0, i0 = 0; gi < ng; gi++) {
        /* rows spread evenly over the groups: 7 -> 4 + 3, 8 -> 4 + 4, 13 -> 5 + 4 + 4 */
        const int64_t R = (m - i0) / (ng - gi) + ((m - i0) % (ng - gi) != 0);
        const int pf = h == 0 && gi == 0;
        switch (R) {
        case 1: group_half(x, fmt, nanfix, unscale, 1, i0, h, r, s, n, sh, pf); break;
        case 2: group_half(x, fmt, nanfix, unscale, 2, i0, h, r, s, n, sh, pf); break;
        case 3: group_half(x, fmt, nanfix, unscale, 3, i0, h, r, s, n, sh, pf); break;
        case 4: group_half(x, fmt, nanfix, unscale, 4, i0, h, r, s, n, sh, pf); break;
        case 5: group_half(x, fmt, nanfix, unscale, 5, i0, h, r, s, n, sh, pf); break;
        default: group_half(x, fmt, nanfix, unscale, 6, i0, h, r, s, n, sh, pf); break;
        }
        i0 += R;
    }
}

INL void scaled_many(const ts__gemm_dec_args *x, int fmt, int nanfix, __m256 unscale, int sh) {
    const int64_t len = x->len, g = x->g, nsb = ts__ceil_div(len, g);
    for (int64_t s = 0; s < nsb; s++) {
        const int64_t n = ts__min64(g, len - s * g);
        const uint8_t *r = ts__dec_sub_rows(x, sh, s);
        /* the half index is a constant in each call: immediate shift counts in dec_half */
        group_halves(x, fmt, nanfix, unscale, 0, r, s, n, sh);
        group_halves(x, fmt, nanfix, unscale, 1, r, s, n, sh);
    }
}

/* Rows i0 .. i0 + R - 1 (R <= 6), column half hh (columns 16 hh .. 16 hh + 15), one
 * sub-block of n staged rows: the 6 x 16 micro-kernel shape over the f32 bits in buf. */
INL void staged_group(const ts__gemm_dec_args *x, __m256 unscale, int R, int64_t i0, int hh,
                      const float *buf, int64_t s, int64_t n, int sh) {
    const int64_t m = x->m;
    const float *a = x->a + s * x->g * m + i0;
    __m256 p[6][2];
    for (int i = 0; i < 6; i++) p[i][0] = _mm256_setzero_ps(), p[i][1] = _mm256_setzero_ps();
    const float *b = buf + 16 * hh;
    for (int64_t k = 0; k < n; k++, b += W, a += m) {
        const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
        for (int i = 0; i < R; i++) {
            const __m256 xa = _mm256_broadcast_ss(a + i);
            p[i][0] = _mm256_fmadd_ps(xa, b0, p[i][0]);
            p[i][1] = _mm256_fmadd_ps(xa, b1, p[i][1]);
        }
    }
    const uint8_t *sp = ts__dec_sb_ptr(x, sh, s);
    __m256 sbh[2];
    for (int t = 0; t < 2; t++) {
        const int c = 16 * hh + 8 * t;
        sbh[t] = x->sb_u8 ? ue8m0x8(sp + c, x->sf_normal) : _mm256_loadu_ps((const float *)sp + c);
    }
    for (int i = 0; i < R; i++) {
        const float sa = x->sa[s * m + i0 + i];
        float *c = x->acc + (i0 + i) * W + 16 * hh;
        promote1(c, p[i][0], unscale, sa, sbh[0]);
        promote1(c + 8, p[i][1], unscale, sa, sbh[1]);
    }
}

/* More than GMAX rows: each sub-block's rows are decoded once into an L1 buffer of f32 bits
 * (column order; the same bits dec_half gives, still scaled by 2^-8 / 2^-14) and every
 * group of <= 6 rows runs over it, instead of decoding B again per row group: the decode
 * is paid once per panel row rather than once per 6 rows. Same products, same order per
 * column, so the same bits. */
INL void scaled_staged(const ts__gemm_dec_args *x, int fmt, int nanfix, __m256 unscale, int sh) {
    _Alignas(32) float buf[128 * W];
    const int64_t len = x->len, g = x->g, m = x->m, rb = x->row_bytes, nsb = ts__ceil_div(len, g);
    const int64_t ng = ts__ceil_div(m, GMAX), pfm = 64 / rb - 1;
    for (int64_t s = 0; s < nsb; s++) {
        const int64_t n = ts__min64(g, len - s * g);
        const uint8_t *r = ts__dec_sub_rows(x, sh, s);
        for (int64_t k = 0; k < n; k++) {
            if (!(k & pfm)) PFX((const char *)(r + k * rb) + PF_AHEAD);
            float *d = buf + k * W;
            for (int h = 0; h < 2; h++) {
                __m256 o[2], lo, hi;
                ts__dec_half(r + k * rb, fmt, nanfix, h, 0, o);
                ts__dec_unperm(o[0], o[1], &lo, &hi);
                _mm256_store_ps(d + 8 * h, lo);
                _mm256_store_ps(d + 16 + 8 * h, hi);
            }
        }
        for (int hh = 0; hh < 2; hh++)
            for (int64_t gi = 0, i0 = 0; gi < ng; gi++) {
                const int64_t R = (m - i0) / (ng - gi) + ((m - i0) % (ng - gi) != 0);
                switch (R) {
                case 1: staged_group(x, unscale, 1, i0, hh, buf, s, n, sh); break;
                case 2: staged_group(x, unscale, 2, i0, hh, buf, s, n, sh); break;
                case 3: staged_group(x, unscale, 3, i0, hh, buf, s, n, sh); break;
                case 4: staged_group(x, unscale, 4, i0, hh, buf, s, n, sh); break;
                case 5: staged_group(x, unscale, 5, i0, hh, buf, s, n, sh); break;
                default: staged_group(x, unscale, 6, i0, hh, buf, s, n, sh); break;
                }
                i0 += R;
            }
    }
}

INL void scaled_run(const ts__gemm_dec_args *x, int fmt, int nanfix) {
    /* p' = p * 2^-8 (e4m3) or 2^-14 (e2m1) */
    const __m256 unscale = _mm256_set1_ps(fmt == TS_E4M3 ? 0x1p8f : 0x1p14f);
    const int sh = ts__dec_sub_shift(x);
    if (x->m == 1) scaled_m1(x, fmt, nanfix, unscale, sh);
    else if (x->m == 2) scaled_m2(x, fmt, nanfix, unscale, sh);
    /* staged above 6 rows for e2m1 (7-12 rows: 0.86-0.97x the time, 10 rows 1.04x), above
     * 12 for e4m3 (cheaper to decode: 7-12 rows staged were 1.09-1.16x) */
    else if (x->m <= (fmt == TS_E4M3 ? 2 * GMAX : GMAX) || x->g > 128)
        scaled_many(x, fmt, nanfix, unscale, sh);
    else scaled_staged(x, fmt, nanfix, unscale, sh);
}

void ts__gemm_pw_rows_f32__avx2(const uint8_t *row, int64_t row_bytes, int fmt, bool nan_free,
                                int64_t n, int half, float *dst, int64_t ld) {
    if (fmt == TS_BF16) {
        for (int64_t k = 0; k < n; k++, row += row_bytes) {
            const uint8_t *q = row + 32 * half;
            _mm256_storeu_ps(dst + k * ld, ts__avx2_bf16_decode(_mm_loadu_si128((const __m128i *)q)));
            _mm256_storeu_ps(dst + k * ld + 8,
                             ts__avx2_bf16_decode(_mm_loadu_si128((const __m128i *)(q + 16))));
        }
        return;
    }
    /* back from b * 2^-8 (e4m3) / b * 2^-14 (e2m1): exact, the decoded values are normal or 0 */
    const __m256 up = _mm256_set1_ps(fmt == TS_E4M3 ? 0x1p8f : 0x1p14f);
    for (int64_t k = 0; k < n; k++, row += row_bytes) {
        for (int h = 0; h < 2; h++) { /* columns 16 half + 8h .. 16 half + 8h + 7 */
            __m256 o[2], c[2];
            if (fmt == TS_E4M3 && !nan_free) ts__dec_half(row, TS_E4M3, 1, h, 0, o);
            else if (fmt == TS_E4M3) ts__dec_half(row, TS_E4M3, 0, h, 0, o);
            else ts__dec_half(row, TS_E2M1X2, 0, h, 0, o);
            ts__dec_unperm(o[0], o[1], &c[0], &c[1]);
            _mm256_storeu_ps(dst + k * ld + 8 * h, _mm256_mul_ps(c[half], up));
        }
    }
}

/* ---------------------------------------------------------------- bf16 / f32 rows */

INL void load_b(int fmt, const uint8_t *row, __m256 b[4]) {
    if (fmt == TS_BF16) {
        for (int t = 0; t < 4; t++)
            b[t] = ts__avx2_bf16_decode(_mm_loadu_si128((const __m128i *)(row + 16 * t)));
    } else {
        for (int t = 0; t < 4; t++) b[t] = _mm256_loadu_ps((const float *)row + 8 * t);
    }
}

/* Promote with the plain scales (f32 rows: p is the canonical sum). */
INL void promote(float *c, const __m256 p[4], float sa, const __m256 sb[4]) {
    const __m256 s = _mm256_set1_ps(sa);
    for (int t = 0; t < 4; t++)
        _mm256_storeu_ps(c + 8 * t, _mm256_fmadd_ps(p[t], _mm256_mul_ps(s, sb[t]),
                                                    _mm256_loadu_ps(c + 8 * t)));
}

/* Rows in pairs over contiguous rows (blk_bytes == 0). */
INL void dec_run(const ts__gemm_dec_args *x, const int fmt) {
    const int64_t m = x->m, rb = x->row_bytes, len = x->len;
    const uint8_t *bp = (const uint8_t *)x->bp;
    const bool scaled = x->sa != NULL;
    const int64_t g = scaled ? x->g : len;
    for (int64_t k0 = 0, s = 0; k0 < len; k0 += g, s++) {
        const int64_t k1 = k0 + g < len ? k0 + g : len;
        __m256 sb[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                        _mm256_setzero_ps()};
        if (scaled) load_sb(x, 0, s, sb);
        for (int64_t i0 = 0; i0 < m; i0 += 2) {
            float *c0 = x->acc + i0 * W, *c1 = c0 + W;
            const float *a = x->a + i0;
            const bool two = i0 + 1 < m;
            __m256 p0[4], p1[4];
            for (int t = 0; t < 4; t++) {
                p0[t] = scaled ? _mm256_setzero_ps() : _mm256_loadu_ps(c0 + 8 * t);
                p1[t] = scaled || !two ? _mm256_setzero_ps() : _mm256_loadu_ps(c1 + 8 * t);
            }
            for (int64_t k = k0; k < k1; k++) {
                const uint8_t *row = bp + k * rb;
                if (fmt != TS_F32) _mm_prefetch((const char *)row + PF_AHEAD, _MM_HINT_T0);
                __m256 b[4];
                load_b(fmt, row, b);
                const __m256 a0 = _mm256_broadcast_ss(a + k * m);
                for (int t = 0; t < 4; t++) p0[t] = _mm256_fmadd_ps(a0, b[t], p0[t]);
                if (two) {
                    const __m256 a1 = _mm256_broadcast_ss(a + k * m + 1);
                    for (int t = 0; t < 4; t++) p1[t] = _mm256_fmadd_ps(a1, b[t], p1[t]);
                }
            }
            if (scaled) {
                promote(c0, p0, x->sa[s * m + i0], sb);
                if (two) promote(c1, p1, x->sa[s * m + i0 + 1], sb);
            } else {
                for (int t = 0; t < 4; t++) {
                    _mm256_storeu_ps(c0 + 8 * t, p0[t]);
                    if (two) _mm256_storeu_ps(c1 + 8 * t, p1[t]);
                }
            }
        }
    }
}

/* bf16 with more than two rows: each chunk decoded once into f32 rows in L1. */
static void dec_staged_bf16(const ts__gemm_dec_args *x) {
    _Alignas(32) float buf[STAGE * W];
    const uint8_t *bp = (const uint8_t *)x->bp;
    for (int64_t k0 = 0; k0 < x->len; k0 += STAGE) {
        const int64_t kc = x->len - k0 < STAGE ? x->len - k0 : STAGE;
        for (int64_t k = 0; k < kc; k++) {
            const uint8_t *row = bp + (k0 + k) * x->row_bytes;
            _mm_prefetch((const char *)row + PF_AHEAD, _MM_HINT_T0);
            __m256 b[4];
            load_b(TS_BF16, row, b);
            for (int t = 0; t < 4; t++) _mm256_store_ps(buf + k * W + 8 * t, b[t]);
        }
        ts__gemm_dec_args y = *x;
        y.fmt = TS_F32;
        y.bp = buf;
        y.row_bytes = 4 * W;
        y.len = kc;
        y.a = x->a + k0 * x->m;
        dec_run(&y, TS_F32);
    }
}

void ts__gemm_decode_32__avx2(const ts__gemm_dec_args *x) {
    switch (x->fmt) {
    case TS_E4M3:
        if (x->nan_free) scaled_run(x, TS_E4M3, 0);
        else scaled_run(x, TS_E4M3, 1);
        break;
    case TS_E2M1X2: scaled_run(x, TS_E2M1X2, 0); break;
    case TS_BF16:
        if (x->m > 2) dec_staged_bf16(x);
        else dec_run(x, TS_BF16);
        break;
    default: dec_run(x, TS_F32); break;
    }
}
