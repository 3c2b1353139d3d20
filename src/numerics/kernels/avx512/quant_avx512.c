/* AVX-512 quantiser kernels: bit-identical to kernels/generic/quant_generic.c.
 *
 * One always-inlined body per operation, specialised by source kind (bf16 / f16 / f32) through
 * a constant argument, 16 f32 lanes (32 for the |x| max on 16-bit sources), and tails as one
 * more step with lane masks. The per-lane rules are those of the AVX2 kernels: |x| max as an
 * integer max of |x| bits (order-free, NaN sorts last), encode by the primitives of
 * cvt_avx512_inl.h, whose e4m3 mode TS__E4M3_QUANT gives NaN products the quantisers' 0x7F, so
 * no block needs a NaN-free fast path or a scalar fallback. Scales are the shared scalar rules
 * of quant_kernels.h, one per block. */
#include "numerics/quant_kernels.h"
#include "numerics/kernels/avx512/cvt_avx512_inl.h"

enum { K_BF16 = TS__QSRC_BF16, K_F16 = TS__QSRC_F16, K_F32 = TS__QSRC_F32 };

/* r (<= 16) source values from element j as f32. f16 widens by vcvtph2ps, which quiets a
 * signalling NaN: only NaN-ness matters where these values go (a NaN product encodes the same). */
TS__AVX512_INL __m512 load16(const void *x, int64_t j, int64_t r, const int kind) {
    const __mmask16 m = ts__avx512_lanes16(r);
    if (kind == K_F32) return _mm512_maskz_loadu_ps(m, (const float *)x + j);
    const __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)x + j);
    return kind == K_BF16 ? ts__avx512_bf16_decode(h) : _mm512_cvtph_ps(h);
}

/* |x| as f32 bits, exactly as the generic ab_* (f16 widened exactly, NaN payload kept). */
TS__AVX512_INL __m512i absbits16(const void *x, int64_t j, int64_t r, const int kind) {
    const __mmask16 m = ts__avx512_lanes16(r);
    if (kind == K_F32) return ts__avx512_absbits(_mm512_maskz_loadu_ps(m, (const float *)x + j));
    const __m256i h = _mm256_and_si256(_mm256_maskz_loadu_epi16(m, (const uint16_t *)x + j), _mm256_set1_epi16(0x7FFF));
    return kind == K_BF16 ? _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)
                          : _mm512_castps_si512(ts__avx512_f16_decode(h));
}

/* ---- |x| max ---- */

/* max |x| bits of n 16-bit values (bf16 / f16 patterns): 32 lanes; nonan drops NaN lanes
 * (|h| above the format's inf). */
TS__AVX512_INL uint32_t hmax16(const uint16_t *p, int64_t n, const int nonan, const uint16_t inf) {
    const __m512i absm = _mm512_set1_epi16(0x7FFF), vinf = _mm512_set1_epi16((short)inf);
    __m512i m0 = _mm512_setzero_si512(), m1 = _mm512_setzero_si512();
    int64_t j = 0;
    for (; j + 64 <= n; j += 64) {
        __m512i a0 = _mm512_and_si512(_mm512_loadu_si512((const void *)(p + j)), absm);
        __m512i a1 = _mm512_and_si512(_mm512_loadu_si512((const void *)(p + j + 32)), absm);
        if (nonan) {
            a0 = _mm512_maskz_mov_epi16(_mm512_cmple_epu16_mask(a0, vinf), a0);
            a1 = _mm512_maskz_mov_epi16(_mm512_cmple_epu16_mask(a1, vinf), a1);
        }
        m0 = _mm512_max_epu16(m0, a0);
        m1 = _mm512_max_epu16(m1, a1);
    }
    for (; j < n; j += 32) {
        __m512i a = _mm512_and_si512(_mm512_maskz_loadu_epi16(ts__avx512_lanes32(n - j), p + j), absm);
        if (nonan) a = _mm512_maskz_mov_epi16(_mm512_cmple_epu16_mask(a, vinf), a);
        m0 = _mm512_max_epu16(m0, a);
    }
    m0 = _mm512_max_epu16(m0, m1);
    const __m512i w = _mm512_max_epu32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(m0)),
                                       _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(m0, 1)));
    return _mm512_reduce_max_epu32(w);
}

TS__AVX512_INL uint32_t absmax_k(const void *x, int64_t n, const int kind, const int nonan) {
    if (kind == K_BF16) return hmax16((const uint16_t *)x, n, nonan, 0x7F80) << 16;
    /* |x| bits order the same in f16 and f32, so widening the max gives the f32 max */
    if (kind == K_F16) return ts__bits_from_f32(ts_f16_to_f32((uint16_t)hmax16((const uint16_t *)x, n, nonan, 0x7C00)));
    const uint32_t *p = (const uint32_t *)x;
    const __m512i vinf = _mm512_set1_epi32(0x7F800000);
    __m512i m0 = _mm512_setzero_si512(), m1 = _mm512_setzero_si512();
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
        __m512i a0 = absbits16(p, j, 16, K_F32), a1 = absbits16(p, j + 16, 16, K_F32);
        if (nonan) {
            a0 = _mm512_maskz_mov_epi32(_mm512_cmple_epu32_mask(a0, vinf), a0);
            a1 = _mm512_maskz_mov_epi32(_mm512_cmple_epu32_mask(a1, vinf), a1);
        }
        m0 = _mm512_max_epu32(m0, a0);
        m1 = _mm512_max_epu32(m1, a1);
    }
    for (; j < n; j += 16) {
        __m512i a = absbits16(p, j, n - j, K_F32);
        if (nonan) a = _mm512_maskz_mov_epi32(_mm512_cmple_epu32_mask(a, vinf), a);
        m0 = _mm512_max_epu32(m0, a);
    }
    return _mm512_reduce_max_epu32(_mm512_max_epu32(m0, m1));
}

TS__AVX512_INL void absmax_cols_k(const void *x, int64_t n, uint32_t *acc, const int kind) {
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 m = ts__avx512_lanes16(n - j);
        const __m512i a = _mm512_max_epu32(absbits16(x, j, n - j, kind), _mm512_maskz_loadu_epi32(m, acc + j));
        _mm512_mask_storeu_epi32(acc + j, m, a);
    }
}

/* ---- e4m3 ---- */

/* 64 codes of f32(x[j]) * inv (or inv[j] when cols) from element j, r of them stored. */
TS__AVX512_INL void enc64(const void *x, int64_t j, int64_t r, __m512 vi, const float *inv, uint8_t *q,
                          const int kind) {
    __m512 y[4];
    for (int k = 0; k < 4; k++) {
        const __m512 v = load16(x, j + 16 * k, r - 16 * k, kind);
        const __m512 s = inv ? _mm512_maskz_loadu_ps(ts__avx512_lanes16(r - 16 * k), inv + j + 16 * k) : vi;
        y[k] = _mm512_mul_ps(v, s);
    }
    _mm512_mask_storeu_epi8(q + j, ts__avx512_lanes64(r), ts__avx512_e4m3x64_encode(y, TS__E4M3_QUANT));
}

TS__AVX512_INL void enc_e4m3_k(const void *x, int64_t n, float inv, const float *invs, uint8_t *q, const int kind) {
    const __m512 vi = _mm512_set1_ps(inv);
    int64_t j = 0;
    for (; j + 64 <= n; j += 64) enc64(x, j, 64, vi, invs, q, kind);
    if (j < n) enc64(x, j, n - j, vi, invs, q, kind);
}

TS__AVX512_INL const void *at(const void *x, int64_t j, const int kind) {
    return (const char *)x + (size_t)j * (kind == K_F32 ? 4 : 2);
}

TS__AVX512_INL void fp8_row_k(const void *x, int64_t n, int64_t gran_k, bool ue8m0, uint8_t *q, float *sf,
                              const int kind) {
    for (int64_t b = 0, j0 = 0; j0 < n; b++, j0 += gran_k) {
        const int64_t len = n - j0 < gran_k ? n - j0 : gran_k;
        const float s = ts__fp8_scale(absmax_k(at(x, j0, kind), len, kind, 0), ue8m0);
        enc_e4m3_k(at(x, j0, kind), len, 1.0f / s, NULL, q + j0, kind);
        sf[b] = s;
    }
}

/* per-block tiles: the plain |x| max (no private bound: amin 0) and the run encoder */
TS__AVX512_INL void blk_stats_k(const void *x, int64_t n, int64_t g, uint32_t *amax, uint32_t *amin, const int kind) {
    for (int64_t b = 0, j0 = 0; j0 < n; b++, j0 += g) {
        const uint32_t a = absmax_k(at(x, j0, kind), n - j0 < g ? n - j0 : g, kind, 0);
        amax[b] = a > amax[b] ? a : amax[b];
        amin[b] = 0;
    }
}

TS__AVX512_INL void blk_enc_k(const void *x, int64_t n, int64_t g, const float *inv, uint8_t *q, const int kind) {
    for (int64_t b = 0, j0 = 0; j0 < n; b++, j0 += g)
        enc_e4m3_k(at(x, j0, kind), n - j0 < g ? n - j0 : g, inv[b], NULL, q + j0, kind);
}

/* ---- e2m1 (n even) ---- */

TS__AVX512_INL void enc32_e2m1(const void *x, int64_t j, int64_t r, __m512 vi, uint8_t *q, const int dg,
                               const int kind) {
    const __m128i lo = ts__avx512_e2m1_pack16(ts__avx512_e2m1_codes(_mm512_mul_ps(load16(x, j, r, kind), vi), dg));
    const __m128i hi =
        ts__avx512_e2m1_pack16(ts__avx512_e2m1_codes(_mm512_mul_ps(load16(x, j + 16, r - 16, kind), vi), dg));
    _mm_mask_storeu_epi8(q + j / 2, ts__avx512_lanes16(r / 2), _mm_unpacklo_epi64(lo, hi));
}

TS__AVX512_INL void enc_e2m1_k(const void *x, int64_t n, float inv, const int dg, uint8_t *q, const int kind) {
    const __m512 vi = _mm512_set1_ps(inv);
    n &= ~(int64_t)1; /* as the generic loop: pairs only */
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) enc32_e2m1(x, j, 32, vi, q, dg, kind);
    if (j < n) enc32_e2m1(x, j, n - j, vi, q, dg, kind);
}

TS__AVX512_INL void fp4_row_k(const void *x, int64_t n, int64_t gran_k, bool ue8m0, bool rne, uint8_t *q, float *sf,
                              uint8_t *e, const int kind) {
    for (int64_t b = 0, j0 = 0; j0 < n; b++, j0 += gran_k) {
        const int64_t len = n - j0 < gran_k ? n - j0 : gran_k;
        const ts__fp4_scale_t s = ts__fp4_scale(absmax_k(at(x, j0, kind), len, kind, rne), ue8m0, rne);
        if (rne) enc_e2m1_k(at(x, j0, kind), len, s.inv, 0, q + j0 / 2, kind);
        else enc_e2m1_k(at(x, j0, kind), len, s.inv, 1, q + j0 / 2, kind);
        sf[b] = s.sf;
        e[b] = s.e;
    }
}

/* ---- cast-back: out[j] = kind(decode(q[j]) * s), a NaN product stored as the canonical NaN ---- */

/* r (<= 16) f32 values rounded to the output kind and stored at element j. */
TS__AVX512_INL void store16(void *out, int64_t j, int64_t r, __m512 v, const int kind) {
    const __mmask16 m = ts__avx512_lanes16(r);
    if (kind == K_F32) _mm512_mask_storeu_ps((float *)out + j, m, v);
    else if (kind == K_BF16) _mm512_mask_cvtepi32_storeu_epi16((uint16_t *)out + j, m, ts__avx512_bf16_codes(v));
    else _mm256_mask_storeu_epi16((uint16_t *)out + j, m, ts__avx512_f16_encode(v));
}

TS__AVX512_INL __m512 canon_nan(__m512 v, __mmask16 also) {
    const __mmask16 nan = also | ts__avx512_nan_a(ts__avx512_absbits(v));
    return _mm512_mask_mov_ps(v, nan, _mm512_castsi512_ps(_mm512_set1_epi32((int)TS__CANON_NAN_BITS)));
}

/* r (<= 16) codes from element j; in full steps r is a constant and the masks fold away */
TS__AVX512_INL void dec16_e4m3(const uint8_t *q, int64_t j, int64_t r, __m512 k, bool fast, void *out, const int kind) {
    const __m128i by = _mm_maskz_loadu_epi8(ts__avx512_lanes16(r), q + j);
    const __m512 v = fast ? ts__avx512_e4m3x16_mul(by, k) : _mm512_mul_ps(ts__avx512_e4m3x16_decode(by), k);
    store16(out, j, r, canon_nan(v, ts__avx512_e4m3x16_nan(by)), kind);
}

TS__AVX512_INL void dec_e4m3_k(const uint8_t *q, int64_t n, int64_t gk, const float *s, void *out, const int kind) {
    for (int64_t b = 0, j0 = 0; j0 < n; b++, j0 += gk) {
        const int64_t j1 = n - j0 < gk ? n : j0 + gk;
        /* with 256 * s finite (exact) one multiply of the f16 reading rounds decode * s once;
         * else decode, then multiply (the NaN codes' lanes are canonical either way) */
        const bool fast = (ts__bits_from_f32(s[b] * 256.0f) & 0x7FFFFFFFu) < 0x7F800000u;
        const __m512 k = _mm512_set1_ps(fast ? s[b] * 256.0f : s[b]);
        int64_t j = j0;
        for (; j + 16 <= j1; j += 16) dec16_e4m3(q, j, 16, k, fast, out, kind);
        if (j < j1) dec16_e4m3(q, j, j1 - j, k, fast, out, kind);
    }
}

TS__AVX512_INL void dec32_e2m1(const uint8_t *q, int64_t j, int64_t r, __m512 vs, void *out, const int kind) {
    __m512 d[2];
    /* j0 and gk are even: the run starts on a byte */
    ts__avx512_e2m1x32_decode(_mm_maskz_loadu_epi8(ts__avx512_lanes16((r + 1) / 2), q + j / 2), d, 1);
    store16(out, j, r, canon_nan(_mm512_mul_ps(d[0], vs), 0), kind);
    if (r > 16) store16(out, j + 16, r - 16, canon_nan(_mm512_mul_ps(d[1], vs), 0), kind);
}

TS__AVX512_INL void dec_e2m1_k(const uint8_t *q, int64_t n, int64_t gk, const float *s, void *out, const int kind) {
    for (int64_t b = 0, j0 = 0; j0 < n; b++, j0 += gk) {
        const int64_t j1 = n - j0 < gk ? n : j0 + gk;
        const __m512 vs = _mm512_set1_ps(s[b]);
        int64_t j = j0;
        for (; j + 32 <= j1; j += 32) dec32_e2m1(q, j, 32, vs, out, kind);
        if (j < j1) dec32_e2m1(q, j, j1 - j, vs, out, kind);
    }
}

/* ---- the table: one thin wrapper per entry and source kind ---- */

#define TS__DEF_AVX512(SFX, KIND)                                                                          \
    static uint32_t absmax_##SFX(const void *x, int64_t n) { return absmax_k(x, n, KIND, 0); }                 \
    static uint32_t absmax_nonan_##SFX(const void *x, int64_t n) { return absmax_k(x, n, KIND, 1); }           \
    static void absmax_cols_##SFX(const void *x, int64_t n, uint32_t *acc) { absmax_cols_k(x, n, acc, KIND); } \
    static void enc_e4m3_##SFX(const void *x, int64_t n, float inv, uint8_t *q) {                             \
        enc_e4m3_k(x, n, inv, NULL, q, KIND);                                                                  \
    }                                                                                                          \
    static void enc_e4m3_cols_##SFX(const void *x, int64_t n, const float *inv, uint8_t *q) {                 \
        enc_e4m3_k(x, n, 0.0f, inv, q, KIND);                                                                  \
    }                                                                                                          \
    static void fp8_row_##SFX(const void *x, int64_t n, int64_t gran_k, bool ue8m0, uint8_t *q, float *sf) {  \
        fp8_row_k(x, n, gran_k, ue8m0, q, sf, KIND);                                                           \
    }                                                                                                          \
    static void blk_stats_##SFX(const void *x, int64_t n, int64_t g, uint32_t *amax, uint32_t *amin) {        \
        blk_stats_k(x, n, g, amax, amin, KIND);                                                                \
    }                                                                                                          \
    static void blk_enc_##SFX(const void *x, int64_t n, int64_t g, const uint32_t *amax, const uint32_t *amin, \
                              const float *inv, uint8_t *q) {                                                  \
        (void)amax, (void)amin;                                                                                \
        blk_enc_k(x, n, g, inv, q, KIND);                                                                      \
    }                                                                                                          \
    static void enc_e2m1_##SFX(const void *x, int64_t n, float inv, bool dg, uint8_t *q) {                    \
        if (dg) enc_e2m1_k(x, n, inv, 1, q, KIND);                                                             \
        else enc_e2m1_k(x, n, inv, 0, q, KIND);                                                                \
    }                                                                                                          \
    static void fp4_row_##SFX(const void *x, int64_t n, int64_t gran_k, bool ue8m0, bool rne, uint8_t *q,     \
                              float *sf, uint8_t *e) {                                                         \
        fp4_row_k(x, n, gran_k, ue8m0, rne, q, sf, e, KIND);                                                   \
    }                                                                                                          \
    static void dec_e4m3_##SFX(const uint8_t *q, int64_t n, int64_t gk, const float *s, void *out) {          \
        dec_e4m3_k(q, n, gk, s, out, KIND);                                                                    \
    }                                                                                                          \
    static void dec_e2m1_##SFX(const uint8_t *q, int64_t n, int64_t gk, const float *s, void *out) {          \
        dec_e2m1_k(q, n, gk, s, out, KIND);                                                                    \
    }

TS__DEF_AVX512(bf16, K_BF16)
TS__DEF_AVX512(f16, K_F16)
TS__DEF_AVX512(f32, K_F32)

/* bf16 per-token rows in the shapes the AVX2 table has chunked kernels for (FP8 gran 128, FP4
 * gran % 32 == 0: block stats for up to 64 blocks, the scales 8 per vector, then the codes from
 * L1, in 16-bit lanes) stay on those: one scale and one division per block, as above, measured
 * 0.8x (FP8) and 0.5x (FP4) of them here (docs/performance.md). Same bits either way. */
static void fp8_row_bf16_sel(const void *x, int64_t n, int64_t gran_k, bool ue8m0, uint8_t *q, float *sf) {
    if (gran_k == 128) ts__quant_kernels_avx2[TS__QSRC_BF16].fp8_row(x, n, gran_k, ue8m0, q, sf);
    else fp8_row_bf16(x, n, gran_k, ue8m0, q, sf);
}
static void fp4_row_bf16_sel(const void *x, int64_t n, int64_t gran_k, bool ue8m0, bool rne, uint8_t *q, float *sf,
                             uint8_t *e) {
    if (gran_k % 32 == 0) ts__quant_kernels_avx2[TS__QSRC_BF16].fp4_row(x, n, gran_k, ue8m0, rne, q, sf, e);
    else fp4_row_bf16(x, n, gran_k, ue8m0, rne, q, sf, e);
}

#define TS__AVX512_ENTRY_ROWS(SFX, FP8_ROW, FP4_ROW)                                                      \
    {.absmax = absmax_##SFX, .absmax_cols = absmax_cols_##SFX, .enc_e4m3 = enc_e4m3_##SFX,                    \
     .enc_e4m3_cols = enc_e4m3_cols_##SFX, .fp8_row = FP8_ROW, .blk_stats = blk_stats_##SFX,                  \
     .blk_enc = blk_enc_##SFX, .absmax_nonan = absmax_nonan_##SFX, .enc_e2m1 = enc_e2m1_##SFX,                \
     .fp4_row = FP4_ROW, .dec_e4m3 = dec_e4m3_##SFX, .dec_e2m1 = dec_e2m1_##SFX}
#define TS__AVX512_ENTRY(SFX) TS__AVX512_ENTRY_ROWS(SFX, fp8_row_##SFX, fp4_row_##SFX)

const ts__quant_kernels ts__quant_kernels_avx512[TS__QSRC_COUNT] = {
    [TS__QSRC_BF16] = TS__AVX512_ENTRY_ROWS(bf16, fp8_row_bf16_sel, fp4_row_bf16_sel),
    [TS__QSRC_F16] = TS__AVX512_ENTRY(f16),
    [TS__QSRC_F32] = TS__AVX512_ENTRY(f32),
};
