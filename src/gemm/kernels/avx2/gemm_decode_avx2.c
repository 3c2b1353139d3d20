/* AVX2/FMA decode (small-M) kernel: one 32-column panel, B decoded straight from the packed
 * weight rows into four ymm (8 columns each) per K value, two A rows at a time (8 independent
 * FMA chains, enough to cover the FMA latency). Lanes run across columns only, so each lane
 * performs the scalar fmaf chain of the generic kernel.
 *
 * e4m3 rows are widened to the f16 of value * 2^-8 (vcvtph2ps, no multiply) and the A value
 * is multiplied by 256 instead: A is e4m3 or e2m1 here, so a * 256 is exact, and the product
 * (256a)(b/256) = ab is exact either way, so every fma rounds the same real number. e2m1 rows
 * decode to 2b (small integers) and A is halved, likewise exact. With more
 * than two rows, each K block is decoded once into an L1 buffer of f32 rows and the rows are
 * read from there, so the decode is not repeated per row pair. */
#include "core/internal.h"
#include "gemm/gemm_kernels.h"
#include "numerics/kernels/avx2/cvt_avx2_inl.h"

#include <immintrin.h>

enum { W = TS__GEMM_DW, STAGE = 128, PF_AHEAD = 1536 };

#define INL static inline __attribute__((always_inline))

/* 16 e4m3 codes -> f16 of value * 2^-8 widened to f32 (ts__avx2_e4m3x16_decode without the
 * final multiply); nanfix swaps magnitude 0x7F for the f16 quiet NaN. */
INL void e4m3x16_div256(__m128i bytes, int nanfix, __m256 out[2]) {
    __m256i t = _mm256_slli_epi16(_mm256_cvtepi8_epi16(bytes), 7);
    __m256i h = _mm256_and_si256(t, _mm256_set1_epi16((short)0xBF80));
    if (nanfix) {
        __m256i nan = _mm256_cmpeq_epi16(_mm256_or_si256(t, _mm256_set1_epi16((short)0xC000)),
                                         _mm256_set1_epi16((short)0xFF80));
        h = _mm256_add_epi16(h, _mm256_and_si256(nan, _mm256_set1_epi16(0x7E00 - 0x3F80)));
    }
    out[0] = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    out[1] = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}

/* 32 e2m1 codes of one row (layout of ts__pw_e2m1_pos) -> 2 x value, columns 8t..8t+7 in
 * out[t]. Both nibble halves come from one broadcast load and a per-lane shift; a pshufb
 * table gives 2 x value as a signed byte (an integer: 0, 1, 2, 3, 4, 6, 8, 12; -0 as 0);
 * byte t of every 32-bit lane is column 8t + lane, sign-extended by two shifts, so no
 * shuffle widens the bytes. The A value is halved instead (exact: A is e4m3 or e2m1). */
INL void e2m1x32_times2(const uint8_t *row, __m256 out[4]) {
    __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)row));
    v = _mm256_and_si256(_mm256_srlv_epi32(v, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)),
                         _mm256_set1_epi8(0x0F));
    const __m256i lut = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,
                                         0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    const __m256i x = _mm256_shuffle_epi8(lut, v);
    out[0] = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(x, 24), 24));
    out[1] = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(x, 16), 24));
    out[2] = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(x, 8), 24));
    out[3] = _mm256_cvtepi32_ps(_mm256_srai_epi32(x, 24));
}

/* One K row of the panel -> columns 0..7, 8..15, 16..23, 24..31 (e4m3: value / 256, e2m1:
 * value * 2). */
INL void load_b(int fmt, int nanfix, const uint8_t *row, __m256 b[4]) {
    switch (fmt) {
    case TS_E4M3:
        e4m3x16_div256(_mm_loadu_si128((const __m128i *)row), nanfix, b);
        e4m3x16_div256(_mm_loadu_si128((const __m128i *)(row + 16)), nanfix, b + 2);
        break;
    case TS_E2M1X2: e2m1x32_times2(row, b); break;
    case TS_BF16:
        for (int t = 0; t < 4; t++)
            b[t] = ts__avx2_bf16_decode(_mm_loadu_si128((const __m128i *)(row + 16 * t)));
        break;
    default:
        for (int t = 0; t < 4; t++) b[t] = _mm256_loadu_ps((const float *)row + 8 * t);
        break;
    }
}

/* ts_ue8m0_to_f32 of 8 bytes: 2^(e-127); e = 0 is the subnormal 2^-127, 255 NaN. */
INL __m256 ue8m0x8(const uint8_t *p) {
    __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    __m256i r = _mm256_slli_epi32(e, 23);
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x00400000),
                           _mm256_cmpeq_epi32(e, _mm256_setzero_si256()));
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC00000),
                           _mm256_cmpeq_epi32(e, _mm256_set1_epi32(255)));
    return _mm256_castsi256_ps(r);
}

INL void load_sb(const ts__gemm_dec_args *x, int64_t s, __m256 sb[4]) {
    if (x->sb_u8) {
        const uint8_t *p = (const uint8_t *)x->sb + s * x->sb_step;
        for (int t = 0; t < 4; t++) sb[t] = ue8m0x8(p + 8 * t);
    } else {
        const float *p = (const float *)x->sb + s * x->sb_step;
        for (int t = 0; t < 4; t++) sb[t] = _mm256_loadu_ps(p + 8 * t);
    }
}

/* acc row += p * (sa * sb): the scale product rounded to f32 first, as the canonical order. */
INL void promote(float *c, const __m256 p[4], float sa, const __m256 sb[4]) {
    const __m256 s = _mm256_set1_ps(sa);
    for (int t = 0; t < 4; t++)
        _mm256_storeu_ps(c + 8 * t, _mm256_fmadd_ps(p[t], _mm256_mul_ps(s, sb[t]),
                                                    _mm256_loadu_ps(c + 8 * t)));
}

INL __m256 a_value(int fmt, const float *a) {
    __m256 v = _mm256_broadcast_ss(a);
    if (fmt == TS_E4M3) return _mm256_mul_ps(v, _mm256_set1_ps(256.0f));
    if (fmt == TS_E2M1X2) return _mm256_mul_ps(v, _mm256_set1_ps(0.5f));
    return v;
}

INL void dec_run(const ts__gemm_dec_args *x, const int fmt, const int nanfix) {
    const int64_t m = x->m, rb = x->row_bytes, len = x->len;
    const uint8_t *bp = (const uint8_t *)x->bp;
    const bool scaled = x->sa != NULL;
    const int64_t g = scaled ? x->g : len;
    for (int64_t k0 = 0, s = 0; k0 < len; k0 += g, s++) {
        const int64_t k1 = k0 + g < len ? k0 + g : len;
        __m256 sb[4];
        if (scaled) load_sb(x, s, sb);
        for (int64_t i0 = 0; i0 < m; i0 += 2) {
            float *c0 = x->acc + i0 * W, *c1 = c0 + W;
            const float *a = x->a + i0;
            if (i0 + 1 < m) {
                __m256 p0[4], p1[4];
                for (int t = 0; t < 4; t++) {
                    p0[t] = scaled ? _mm256_setzero_ps() : _mm256_loadu_ps(c0 + 8 * t);
                    p1[t] = scaled ? _mm256_setzero_ps() : _mm256_loadu_ps(c1 + 8 * t);
                }
                for (int64_t k = k0; k < k1; k++) {
                    const uint8_t *row = bp + k * rb;
                    if (fmt != TS_F32) _mm_prefetch((const char *)row + PF_AHEAD, _MM_HINT_T0);
                    __m256 b[4];
                    load_b(fmt, nanfix, row, b);
                    const __m256 a0 = a_value(fmt, a + k * m), a1 = a_value(fmt, a + k * m + 1);
                    for (int t = 0; t < 4; t++) p0[t] = _mm256_fmadd_ps(a0, b[t], p0[t]);
                    for (int t = 0; t < 4; t++) p1[t] = _mm256_fmadd_ps(a1, b[t], p1[t]);
                }
                if (scaled) {
                    promote(c0, p0, x->sa[s * m + i0], sb);
                    promote(c1, p1, x->sa[s * m + i0 + 1], sb);
                } else {
                    for (int t = 0; t < 4; t++) {
                        _mm256_storeu_ps(c0 + 8 * t, p0[t]);
                        _mm256_storeu_ps(c1 + 8 * t, p1[t]);
                    }
                }
            } else {
                __m256 p0[4];
                for (int t = 0; t < 4; t++)
                    p0[t] = scaled ? _mm256_setzero_ps() : _mm256_loadu_ps(c0 + 8 * t);
                for (int64_t k = k0; k < k1; k++) {
                    const uint8_t *row = bp + k * rb;
                    if (fmt != TS_F32) _mm_prefetch((const char *)row + PF_AHEAD, _MM_HINT_T0);
                    __m256 b[4];
                    load_b(fmt, nanfix, row, b);
                    const __m256 a0 = a_value(fmt, a + k * m);
                    for (int t = 0; t < 4; t++) p0[t] = _mm256_fmadd_ps(a0, b[t], p0[t]);
                }
                if (scaled) promote(c0, p0, x->sa[s * m + i0], sb);
                else
                    for (int t = 0; t < 4; t++) _mm256_storeu_ps(c0 + 8 * t, p0[t]);
            }
        }
    }
}

/* More than two rows: decode each block (at most STAGE rows) once into f32 rows in L1. */
static void dec_staged(const ts__gemm_dec_args *x, int nanfix) {
    _Alignas(32) float buf[STAGE * W];
    const bool scaled = x->sa != NULL;
    const int64_t step = scaled ? x->g : STAGE;
    const uint8_t *bp = (const uint8_t *)x->bp;
    const size_t sb_es = x->sb_u8 ? 1 : 4;
    for (int64_t k0 = 0, s = 0; k0 < x->len; k0 += step, s++) {
        const int64_t kc = x->len - k0 < step ? x->len - k0 : step;
        for (int64_t k = 0; k < kc; k++) {
            const uint8_t *row = bp + (k0 + k) * x->row_bytes;
            _mm_prefetch((const char *)row + PF_AHEAD, _MM_HINT_T0);
            __m256 b[4];
            switch (x->fmt) {
            case TS_E4M3:
                load_b(TS_E4M3, nanfix, row, b);
                for (int t = 0; t < 4; t++) b[t] = _mm256_mul_ps(b[t], _mm256_set1_ps(256.0f));
                break;
            case TS_E2M1X2:
                load_b(TS_E2M1X2, 0, row, b);
                for (int t = 0; t < 4; t++) b[t] = _mm256_mul_ps(b[t], _mm256_set1_ps(0.5f));
                break;
            default: load_b(TS_BF16, 0, row, b); break;
            }
            for (int t = 0; t < 4; t++) _mm256_store_ps(buf + k * W + 8 * t, b[t]);
        }
        ts__gemm_dec_args y = *x;
        y.fmt = TS_F32;
        y.bp = buf;
        y.row_bytes = 4 * W;
        y.len = kc;
        y.a = x->a + k0 * x->m;
        if (scaled) {
            y.sa = x->sa + s * x->m;
            y.sb = (const char *)x->sb + (size_t)(s * x->sb_step) * sb_es;
        }
        dec_run(&y, TS_F32, 0);
    }
}

void ts__gemm_decode_32__avx2(const ts__gemm_dec_args *x) {
    if (x->m > 2 && x->fmt != TS_F32) {
        dec_staged(x, x->fmt == TS_E4M3 && !x->nan_free);
        return;
    }
    switch (x->fmt) {
    case TS_E4M3:
        if (x->nan_free) dec_run(x, TS_E4M3, 0);
        else dec_run(x, TS_E4M3, 1);
        break;
    case TS_E2M1X2: dec_run(x, TS_E2M1X2, 0); break;
    case TS_BF16: dec_run(x, TS_BF16, 0); break;
    default: dec_run(x, TS_F32, 0); break;
    }
}
