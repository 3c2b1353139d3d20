/* FlashMLA tile kernels, AVX-512: QK^T on four 16-row strips x 6 tokens (24 zmm accumulators,
 * 4 q loads + 6 k broadcasts per 24 FMAs; 3 or 2 strips for the rest, a lone strip 16 rows x 12
 * tokens), PV on 6 rows x 64 columns (24 accumulators, 4 v loads + 6 p broadcasts per 24 FMAs;
 * 4-row rests 4 x 64), the online softmax over 16 rows per vector and the token decoders 32
 * values a step. Rows (QK) or columns (PV) run across the lanes only, so each lane performs
 * exactly the generic kernel's scalar fmaf chain, in ascending d (QK) or t (PV); the exp is the
 * generic polynomial with the same operations per lane, the sums run in the same order and the
 * decoders round as the generic ones: the bits equal kernels/generic/mla_generic.c (and AVX2).
 * The row operations of the finish / merge steps are the AVX2 ones.
 *
 * Tile shapes follow the loads: on the Ice Lake server this was tuned on, 12 zmm FMAs beside 8
 * loads (2 strips x 6 tokens, the AVX2 kernel's shape widened) run at ~83% of the FMA peak, with
 * 6 loads or fewer per 12 FMAs at ~97-100%. */
#include "../../flash_mla_internal.h"
#include "tilestack/numerics.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

/* mla_exp on 16 lanes: the same operation sequence (rint as roundscale to nearest even). */
AI __m512 mla_exp16(__m512 x) {
    const __mmask16 ok = _mm512_cmp_ps_mask(x, _mm512_set1_ps(TS__MLA_EXP_MIN), _CMP_GE_OQ);
    x = _mm512_max_ps(x, _mm512_set1_ps(TS__MLA_EXP_MIN)); /* keeps 2^n normal on dead lanes */
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(TS__MLA_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-TS__MLA_LN2_HI), x);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(-TS__MLA_LN2_LO), r);
    __m512 p = _mm512_set1_ps(TS__MLA_C7);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(TS__MLA_C6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(TS__MLA_C5));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(TS__MLA_C4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(TS__MLA_C3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(TS__MLA_C2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps(ok, p, _mm512_castsi512_ps(e));
}

/* ---- QK ---- */

/* ns strips (1..4) x nt tokens (ns * nt <= 24): st[t][row] = scale * (fma chain over d from
 * +0). q: the first strip's packed rows ([dk][16]); strip i is i * dk * 16 floats on. */
AI void qk_tile(int ns, int nt, const float *q, const float *k, int64_t dk, int64_t ks,
                float scale, float *o, int64_t rp) {
    __m512 acc[24];
    for (int i = 0; i < ns * nt; i++) acc[i] = _mm512_setzero_ps();
    int64_t d = 0;
    do { /* dk >= 1: no zero-trip path (with one, gcc keeps acc on the stack) */
        __m512 a[4];
        for (int s = 0; s < ns; s++) a[s] = _mm512_load_ps(q + s * dk * TS__MLA_RS + d * TS__MLA_RS);
        for (int t = 0; t < nt; t++) {
            __m512 b = _mm512_set1_ps(k[t * ks + d]);
            for (int s = 0; s < ns; s++) acc[t * ns + s] = _mm512_fmadd_ps(a[s], b, acc[t * ns + s]);
        }
    } while (++d < dk);
    const __m512 vs = _mm512_set1_ps(scale);
    for (int t = 0; t < nt; t++)
        for (int s = 0; s < ns; s++)
            _mm512_storeu_ps(o + t * rp + s * TS__MLA_RS, _mm512_mul_ps(acc[t * ns + s], vs));
}

/* One function per shape, each register-allocated on its own: inlined into the strip loops,
 * gcc runs out of registers for the 4 x 6 tile (24 accumulators + 4 q + 1 k) and spills q
 * (QK at ~65% of the FMA peak instead of ~97%). The same for PV below. */
#define QK_SHAPE(NS, NT)                                                                       \
    __attribute__((noinline)) static void qk_##NS##x##NT(const float *q, const float *k,       \
                                                         int64_t dk, int64_t ks, float scale, \
                                                         float *o, int64_t rp) {              \
        qk_tile(NS, NT, q, k, dk, ks, scale, o, rp);                                           \
    }
QK_SHAPE(4, 6)
QK_SHAPE(3, 6)
QK_SHAPE(2, 6)
QK_SHAPE(1, 12)
QK_SHAPE(1, 6)

static void qk_avx512(const float *qs, int64_t rp, const float *k, int64_t dk, int64_t ks,
                      int64_t n, float scale, float *st) {
    const int64_t nstrip = rp / TS__MLA_RS;
    int64_t s = 0;
    /* strip groups outer: a group's packed q is reused by every 6-token micro-tile; groups of
     * 4 strips, a rest of 3 or 2 (5 as 3 + 2), a lone strip only when there is one in all */
#define QK_GROUP(NS)                                                                           \
    do {                                                                                       \
        for (int64_t t0 = 0; t0 < n; t0 += TS__MLA_MT)                                         \
            qk_##NS##x6(qs + s * dk * TS__MLA_RS, k + t0 * ks, dk, ks, scale,                  \
                        st + t0 * rp + s * TS__MLA_RS, rp);                                    \
        s += NS;                                                                               \
    } while (0)
    while (nstrip - s >= 4 && nstrip - s != 5) QK_GROUP(4);
    if (nstrip - s == 5 || nstrip - s == 3) QK_GROUP(3);
    if (nstrip - s == 2) QK_GROUP(2);
#undef QK_GROUP
    if (s < nstrip) { /* a lone strip: 12 tokens per micro-tile, then a 6-token tail */
        const float *q = qs + s * dk * TS__MLA_RS;
        int64_t t0 = 0;
        for (; t0 + 2 * TS__MLA_MT <= n; t0 += 2 * TS__MLA_MT)
            qk_1x12(q, k + t0 * ks, dk, ks, scale, st + t0 * rp + s * TS__MLA_RS, rp);
        for (; t0 < n; t0 += TS__MLA_MT)
            qk_1x6(q, k + t0 * ks, dk, ks, scale, st + t0 * rp + s * TS__MLA_RS, rp);
    }
}

/* ---- softmax ---- */

static void softmax_avx512(float *st, int64_t rp, int64_t n, const int32_t *pos,
                           const int32_t *lim, float *m, float *l, float *alpha) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int64_t r = 0; r < rp; r += 16) {
        __m512i vl = _mm512_loadu_si512(lim + r);
        __m512 mt = ninf;
        for (int64_t t = 0; t < n; t++) {
            /* masked when pos > lim */
            __mmask16 bad = _mm512_cmpgt_epi32_mask(_mm512_set1_epi32(pos[t]), vl);
            __m512 s = _mm512_mask_mov_ps(_mm512_loadu_ps(st + t * rp + r), bad, ninf);
            _mm512_storeu_ps(st + t * rp + r, s);
            mt = _mm512_max_ps(s, mt);
        }
        __m512 mo = _mm512_loadu_ps(m + r);
        __m512 mn = _mm512_max_ps(mo, mt);
        __mmask16 none = _mm512_cmp_ps_mask(mn, ninf, _CMP_EQ_OQ);
        __m512 a = _mm512_mask_mov_ps(mla_exp16(_mm512_sub_ps(mo, mn)), none, _mm512_set1_ps(1.0f));
        __m512 sum = _mm512_setzero_ps();
        for (int64_t t = 0; t < n; t++) {
            __m512 s = _mm512_loadu_ps(st + t * rp + r);
            __mmask16 live = _mm512_cmp_ps_mask(s, ninf, _CMP_NEQ_OQ);
            __m512 p = _mm512_maskz_mov_ps(live, mla_exp16(_mm512_sub_ps(s, mn)));
            _mm512_storeu_ps(st + t * rp + r, p);
            sum = _mm512_add_ps(sum, p);
        }
        _mm512_storeu_ps(l + r, _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(l + r), a), sum));
        _mm512_storeu_ps(m + r, mn);
        _mm512_storeu_ps(alpha + r, a);
    }
}

/* ---- PV ---- */

/* mr rows x 16 * nv columns of o = o*alpha + sum_t p[t][row] v[t][col] (mr * nv <= 24). */
AI void pv_tile(int mr, int nv, const float *st, int64_t rp, const float *v, int64_t vstride,
                int64_t n, const float *alpha, float *o) {
    __m512 acc[24];
    for (int i = 0; i < mr; i++) {
        __m512 a = _mm512_set1_ps(alpha[i]);
        for (int j = 0; j < nv; j++)
            acc[i * nv + j] = _mm512_mul_ps(_mm512_loadu_ps(o + i * TS__MLA_DV + 16 * j), a);
    }
    int64_t t = 0;
    do { /* n >= 6: no zero-trip path (with one, gcc keeps acc on the stack) */
        __m512 x[4];
        for (int j = 0; j < nv; j++) x[j] = _mm512_loadu_ps(v + t * vstride + 16 * j);
        const float *p = st + t * rp;
        for (int i = 0; i < mr; i++) {
            __m512 b = _mm512_set1_ps(p[i]);
            for (int j = 0; j < nv; j++) acc[i * nv + j] = _mm512_fmadd_ps(b, x[j], acc[i * nv + j]);
        }
    } while (++t < n);
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nv; j++) _mm512_storeu_ps(o + i * TS__MLA_DV + 16 * j, acc[i * nv + j]);
}

#define PV_SHAPE(MR, NV)                                                                       \
    __attribute__((noinline)) static void pv_##MR##x##NV(const float *st, int64_t rp,          \
                                                         const float *v, int64_t vstride,     \
                                                         int64_t n, const float *alpha,       \
                                                         float *o) {                          \
        pv_tile(MR, NV, st, rp, v, vstride, n, alpha, o);                                      \
    }
PV_SHAPE(6, 4)
PV_SHAPE(4, 4)

static void pv_avx512(const float *st, int64_t rp, const float *v, int64_t vstride, int64_t n,
                      const float *alpha, float *o, const void *const *pf, int64_t npf) {
    /* 6 x 64 tiles (10 loads per 24 FMAs), then 4 x 64 ones: rp is a multiple of 16, so
     * rp % 6 is 0, 2 or 4 and a 2-row rest becomes two 4-row blocks */
    const int64_t rem = rp % 6, full = rem == 2 ? rp - 8 : rp - rem;
    const int64_t nblk = full / 6 + (rp - full) / 4;
    /* row blocks outer, as pv_avx2 (column blocks outer, which keep a V slice in L1 but
     * stream o, measured the same in the kernel alone and ~3% slower in sparse decode); the
     * next tile's token lines are requested a slice after each row block */
    int64_t blk = 0, done = 0;
    int64_t r = 0;
    for (; r < full; r += 6) {
        for (int64_t c = 0; c < TS__MLA_DV; c += 64)
            pv_6x4(st + r, rp, v + c, vstride, n, alpha + r, o + r * TS__MLA_DV + c);
        for (int64_t want = npf * ++blk / nblk; done < want; done++)
            __builtin_prefetch(pf[done], 0, 2);
    }
    for (; r < rp; r += 4) {
        for (int64_t c = 0; c < TS__MLA_DV; c += 64)
            pv_4x4(st + r, rp, v + c, vstride, n, alpha + r, o + r * TS__MLA_DV + c);
        for (int64_t want = npf * ++blk / nblk; done < want; done++)
            __builtin_prefetch(pf[done], 0, 2);
    }
}

/* ---- token decoders: as the AVX2 ones (see dec_scaled in mla_avx2.c), 32 values a step ---- */

/* 32 e4m3 bytes -> f16 bits of value * 2^-8 (exact, subnormals included); with `nan`, magnitude
 * 0x7F becomes the f16 quiet NaN (sign kept), which vcvtph2ps widens to 0x7FC00000 | sign. */
AI __m512i e4m3x32_h(const uint8_t *src, int nan) {
    __m512i t = _mm512_slli_epi16(_mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)src)), 7);
    __m512i h = _mm512_and_si512(t, _mm512_set1_epi16((short)0xBF80));
    if (nan) {
        __mmask32 m = _mm512_cmpeq_epi16_mask(_mm512_or_si512(t, _mm512_set1_epi16((short)0xC000)),
                                              _mm512_set1_epi16((short)0xFF80));
        h = _mm512_mask_add_epi16(h, m, h, _mm512_set1_epi16(0x7E00 - 0x3F80));
    }
    return h;
}

/* bf16(x) widened back to f32: RNE, NaN -> 0x7FC0 | sign (ts_f32_to_bf16) */
AI __m512 bf16_round16(__m512 x) {
    __m512i u = _mm512_castps_si512(x);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_and_si512(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), lsb)),
                                 _mm512_set1_epi32((int)0xFFFF0000u));
    __m512i qn = _mm512_or_si512(_mm512_and_si512(u, _mm512_set1_epi32((int)0x80000000u)),
                                 _mm512_set1_epi32(0x7FC00000));
    return _mm512_castsi512_ps(_mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), qn));
}

/* n (a multiple of 64) e4m3 bytes times sc: bf16(e4m3 * bf16(sc)); a power-of-two scale in
 * [2^-117, 2^119] over bytes with no NaN code makes both roundings exact, and one multiply by
 * 256 * sc of the f16 widening gives the same bits. */
AI void dec_scaled(const uint8_t *src, int n, float sc, float *dst) {
    uint32_t b;
    memcpy(&b, &sc, 4);
    const uint32_t e = (b >> 23) & 0xFF;
    int fast = (b & 0x7FFFFF) == 0 && e >= 10 && e <= 246;
    for (int i = 0; fast && i < n; i += 64)
        fast = _mm512_cmpeq_epi8_mask(_mm512_or_si512(_mm512_loadu_si512(src + i),
                                                      _mm512_set1_epi8((char)0x80)),
                                      _mm512_set1_epi8((char)0xFF)) == 0;
    if (fast) {
        const __m512 k = _mm512_set1_ps(256.0f * sc);
        for (int i = 0; i < n; i += 32) {
            __m512i h = e4m3x32_h(src + i, 0);
            _mm512_storeu_ps(dst + i, _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(h)), k));
            _mm512_storeu_ps(dst + i + 16, _mm512_mul_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1)), k));
        }
        return;
    }
    const __m512 vs = bf16_round16(_mm512_set1_ps(sc)), k = _mm512_set1_ps(256.0f);
    for (int i = 0; i < n; i += 32) {
        __m512i h = e4m3x32_h(src + i, 1);
        __m512 x0 = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(h)), k);
        __m512 x1 = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1)), k);
        _mm512_storeu_ps(dst + i, bf16_round16(_mm512_mul_ps(x0, vs)));
        _mm512_storeu_ps(dst + i + 16, bf16_round16(_mm512_mul_ps(x1, vs)));
    }
}

/* 16 bf16 -> f32 */
AI __m512 bf16x16(const void *src) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)src)), 16));
}

static void dec_v32_avx512(const uint8_t *tok, float *dst) {
    for (int j = 0; j < 4; j++) {
        float sc;
        memcpy(&sc, tok + 512 + 4 * j, 4);
        dec_scaled(tok + 128 * j, 128, sc, dst + 128 * j);
    }
    for (int i = 0; i < 64; i += 16) _mm512_storeu_ps(dst + 512 + i, bf16x16(tok + 528 + 2 * i));
}

static void dec_model1_avx512(const uint8_t *data, const uint8_t *scales, float *dst) {
    for (int j = 0; j < 7; j++) dec_scaled(data + 64 * j, 64, ts_ue8m0_to_f32(scales[j]), dst + 64 * j);
    for (int i = 0; i < 64; i += 16) _mm512_storeu_ps(dst + 448 + i, bf16x16(data + 448 + 2 * i));
}

static void dec_bf16_avx512(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, bf16x16(src + i));
    for (; i < n; i++) {
        uint32_t u = (uint32_t)src[i] << 16;
        memcpy(dst + i, &u, 4);
    }
}

const ts__mla_kernels ts__mla_kernels_avx512 = {
    qk_avx512,
    softmax_avx512,
    pv_avx512,
    dec_v32_avx512,
    dec_model1_avx512,
    dec_bf16_avx512,
    ts__mla_row_to_bf16__avx2,
    ts__mla_row_axpy__avx2,
};
