/* FlashMLA tile kernels, AVX2 + FMA: register-blocked QK^T (16 rows x 6 tokens) and PV (6 rows
 * x 16 columns) micro-kernels and the vectorised online softmax, bit-identical to
 * kernels/generic/mla_generic.c (same fma chains, same exp polynomial, same sum order). */
#include "../../flash_mla_internal.h"
#include "tilestack/numerics.h"
#include "../../../numerics/kernels/avx2/cvt_avx2_inl.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

static inline __attribute__((always_inline)) __m256 mla_exp8(__m256 x) {
    __m256 ok = _mm256_cmp_ps(x, _mm256_set1_ps(TS__MLA_EXP_MIN), _CMP_GE_OQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(TS__MLA_EXP_MIN)); /* keeps 2^n normal on dead lanes */
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(TS__MLA_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-TS__MLA_LN2_HI), x);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(-TS__MLA_LN2_LO), r);
    __m256 p = _mm256_set1_ps(TS__MLA_C7);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(TS__MLA_C6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(TS__MLA_C5));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(TS__MLA_C4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(TS__MLA_C3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(TS__MLA_C2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), ok);
}

static void qk_avx2(const float *qs, int64_t rp, const float *k, int64_t dk, int64_t ks,
                    int64_t n, float scale, float *st) {
    const __m256 vs = _mm256_set1_ps(scale);
    /* row strips outer: a strip's packed q (dk x 16 floats) is reused by every micro-tile */
    for (int64_t s = 0; s < rp / TS__MLA_RS; s++) {
        const float *q = qs + s * dk * TS__MLA_RS;
        for (int64_t t0 = 0; t0 < n; t0 += TS__MLA_MT) {
            const float *k0 = k + t0 * ks;
            __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00,
                   a21 = a00, a30 = a00, a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00;
            for (int64_t d = 0; d < dk; d++) {
                __m256 q0 = _mm256_load_ps(q + d * TS__MLA_RS);
                __m256 q1 = _mm256_load_ps(q + d * TS__MLA_RS + 8);
                __m256 b;
                b = _mm256_broadcast_ss(k0 + d);
                a00 = _mm256_fmadd_ps(q0, b, a00);
                a01 = _mm256_fmadd_ps(q1, b, a01);
                b = _mm256_broadcast_ss(k0 + ks + d);
                a10 = _mm256_fmadd_ps(q0, b, a10);
                a11 = _mm256_fmadd_ps(q1, b, a11);
                b = _mm256_broadcast_ss(k0 + 2 * ks + d);
                a20 = _mm256_fmadd_ps(q0, b, a20);
                a21 = _mm256_fmadd_ps(q1, b, a21);
                b = _mm256_broadcast_ss(k0 + 3 * ks + d);
                a30 = _mm256_fmadd_ps(q0, b, a30);
                a31 = _mm256_fmadd_ps(q1, b, a31);
                b = _mm256_broadcast_ss(k0 + 4 * ks + d);
                a40 = _mm256_fmadd_ps(q0, b, a40);
                a41 = _mm256_fmadd_ps(q1, b, a41);
                b = _mm256_broadcast_ss(k0 + 5 * ks + d);
                a50 = _mm256_fmadd_ps(q0, b, a50);
                a51 = _mm256_fmadd_ps(q1, b, a51);
            }
            float *o = st + t0 * rp + s * TS__MLA_RS;
            _mm256_storeu_ps(o, _mm256_mul_ps(a00, vs));
            _mm256_storeu_ps(o + 8, _mm256_mul_ps(a01, vs));
            _mm256_storeu_ps(o + rp, _mm256_mul_ps(a10, vs));
            _mm256_storeu_ps(o + rp + 8, _mm256_mul_ps(a11, vs));
            _mm256_storeu_ps(o + 2 * rp, _mm256_mul_ps(a20, vs));
            _mm256_storeu_ps(o + 2 * rp + 8, _mm256_mul_ps(a21, vs));
            _mm256_storeu_ps(o + 3 * rp, _mm256_mul_ps(a30, vs));
            _mm256_storeu_ps(o + 3 * rp + 8, _mm256_mul_ps(a31, vs));
            _mm256_storeu_ps(o + 4 * rp, _mm256_mul_ps(a40, vs));
            _mm256_storeu_ps(o + 4 * rp + 8, _mm256_mul_ps(a41, vs));
            _mm256_storeu_ps(o + 5 * rp, _mm256_mul_ps(a50, vs));
            _mm256_storeu_ps(o + 5 * rp + 8, _mm256_mul_ps(a51, vs));
        }
    }
}

static void softmax_avx2(float *st, int64_t rp, int64_t n, const int32_t *pos,
                         const int32_t *lim, float *m, float *l, float *alpha) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    for (int64_t r = 0; r < rp; r += 8) {
        __m256i vl = _mm256_loadu_si256((const __m256i *)(lim + r));
        __m256 mt = ninf;
        for (int64_t t = 0; t < n; t++) {
            /* masked when pos > lim */
            __m256i bad = _mm256_cmpgt_epi32(_mm256_set1_epi32(pos[t]), vl);
            __m256 s = _mm256_blendv_ps(_mm256_loadu_ps(st + t * rp + r), ninf,
                                        _mm256_castsi256_ps(bad));
            _mm256_storeu_ps(st + t * rp + r, s);
            mt = _mm256_max_ps(s, mt);
        }
        __m256 mo = _mm256_loadu_ps(m + r);
        __m256 mn = _mm256_max_ps(mo, mt);
        __m256 none = _mm256_cmp_ps(mn, ninf, _CMP_EQ_OQ);
        __m256 a = _mm256_blendv_ps(mla_exp8(_mm256_sub_ps(mo, mn)), _mm256_set1_ps(1.0f), none);
        __m256 sum = _mm256_setzero_ps();
        for (int64_t t = 0; t < n; t++) {
            __m256 s = _mm256_loadu_ps(st + t * rp + r);
            __m256 live = _mm256_cmp_ps(s, ninf, _CMP_NEQ_OQ);
            __m256 p = _mm256_and_ps(mla_exp8(_mm256_sub_ps(s, mn)), live);
            _mm256_storeu_ps(st + t * rp + r, p);
            sum = _mm256_add_ps(sum, p);
        }
        _mm256_storeu_ps(l + r, _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(l + r), a), sum));
        _mm256_storeu_ps(m + r, mn);
        _mm256_storeu_ps(alpha + r, a);
    }
}

/* MR rows x 16 columns of o = o*alpha + sum_t p[t][row] v[t][col]. */
static inline __attribute__((always_inline)) void pv_block(int mr, const float *st, int64_t rp,
                                                           const float *v, int64_t vstride,
                                                           int64_t n, const float *alpha,
                                                           float *o) {
    __m256 acc[6][2];
    for (int i = 0; i < mr; i++) {
        __m256 a = _mm256_broadcast_ss(alpha + i);
        acc[i][0] = _mm256_mul_ps(_mm256_loadu_ps(o + i * TS__MLA_DV), a);
        acc[i][1] = _mm256_mul_ps(_mm256_loadu_ps(o + i * TS__MLA_DV + 8), a);
    }
    for (int64_t t = 0; t < n; t++) {
        __m256 v0 = _mm256_loadu_ps(v + t * vstride), v1 = _mm256_loadu_ps(v + t * vstride + 8);
        const float *p = st + t * rp;
        for (int i = 0; i < mr; i++) {
            __m256 b = _mm256_broadcast_ss(p + i);
            acc[i][0] = _mm256_fmadd_ps(b, v0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(b, v1, acc[i][1]);
        }
    }
    for (int i = 0; i < mr; i++) {
        _mm256_storeu_ps(o + i * TS__MLA_DV, acc[i][0]);
        _mm256_storeu_ps(o + i * TS__MLA_DV + 8, acc[i][1]);
    }
}

static void pv_avx2(const float *st, int64_t rp, const float *v, int64_t vstride, int64_t n,
                    const float *alpha, float *o, const void *const *pf, int64_t npf) {
    /* rp is a multiple of 16, so rp % 6 is 0, 2 or 4: a 2-row tail (4 accumulators, bound by
     * the fma latency) is avoided by ending with two 4-row blocks instead of 6 + 2 */
    const int64_t rem = rp % 6, full = rem == 2 ? rp - 8 : rp - rem;
    const int64_t nblk = full / 6 + (rp - full) / 4;
    /* the next tile's token lines are requested a slice after each row block: spread over
     * PV they arrive while it computes (issued at once they overflow the miss queue, issued
     * before the decode loop they arrive too late: b1 h_q128 decode 0.55 -> 0.23 ms a call) */
    int64_t blk = 0, done = 0;
    /* row blocks outer: the block's probabilities stay in L1 while V streams from L2 in
     * order (measured ~10% faster than column blocks outer) */
    int64_t r = 0;
    for (; r < full; r += 6) {
        for (int64_t c = 0; c < TS__MLA_DV; c += 16)
            pv_block(6, st + r, rp, v + c, vstride, n, alpha + r, o + r * TS__MLA_DV + c);
        for (int64_t want = npf * ++blk / nblk; done < want; done++)
            __builtin_prefetch(pf[done], 0, 2);
    }
    for (; r < rp; r += 4) {
        for (int64_t c = 0; c < TS__MLA_DV; c += 16)
            pv_block(4, st + r, rp, v + c, vstride, n, alpha + r, o + r * TS__MLA_DV + c);
        for (int64_t want = npf * ++blk / nblk; done < want; done++)
            __builtin_prefetch(pf[done], 0, 2);
    }
}

/* n (a multiple of 64) e4m3 bytes times scale sc, as the generic path: bf16(e4m3 * bf16(sc)).
 * When sc is a power of two in [2^-117, 2^119] and no byte is a NaN code, both roundings are
 * exact and one multiply by 256 * sc (folded into the f16 widening) gives the same bits; other
 * scales take the rounding path. */
static inline __attribute__((always_inline)) void dec_scaled(const uint8_t *src, int n, float sc,
                                                              float *dst) {
    uint32_t b;
    memcpy(&b, &sc, 4);
    const uint32_t e = (b >> 23) & 0xFF;
    int fast = (b & 0x7FFFFF) == 0 && e >= 10 && e <= 246;
    for (int i = 0; fast && i < n; i += 64)
        fast = !ts__avx2_e4m3x64_has_nan(_mm256_loadu_si256((const __m256i *)(src + i)),
                                         _mm256_loadu_si256((const __m256i *)(src + i + 32)));
    if (fast) {
        const __m256 k = _mm256_set1_ps(256.0f * sc);
        for (int i = 0; i < n; i += 16) {
            __m256 x[2];
            ts__avx2_e4m3x16_decode_nonan_mul(_mm_loadu_si128((const __m128i *)(src + i)), k, x);
            _mm256_storeu_ps(dst + i, x[0]);
            _mm256_storeu_ps(dst + i + 8, x[1]);
        }
        return;
    }
    const __m256 vs = _mm256_set1_ps(ts_bf16_to_f32(ts_f32_to_bf16(sc)));
    for (int i = 0; i < n; i += 16) {
        __m256 x[2];
        ts__avx2_e4m3x16_decode(_mm_loadu_si128((const __m128i *)(src + i)), x);
        for (int h = 0; h < 2; h++)
            _mm256_storeu_ps(dst + i + 8 * h,
                             _mm256_castsi256_ps(_mm256_slli_epi32(
                                 ts__avx2_bf16_codes(_mm256_mul_ps(x[h], vs)), 16)));
    }
}

static void dec_v32_avx2(const uint8_t *tok, float *dst) {
    for (int j = 0; j < 4; j++) {
        float sc;
        memcpy(&sc, tok + 512 + 4 * j, 4);
        dec_scaled(tok + 128 * j, 128, sc, dst + 128 * j);
    }
    for (int i = 0; i < 64; i += 8)
        _mm256_storeu_ps(dst + 512 + i,
                         ts__avx2_bf16_decode(_mm_loadu_si128((const __m128i *)(tok + 528 + 2 * i))));
}

static void dec_model1_avx2(const uint8_t *data, const uint8_t *scales, float *dst) {
    for (int j = 0; j < 7; j++)
        dec_scaled(data + 64 * j, 64, ts_ue8m0_to_f32(scales[j]), dst + 64 * j);
    for (int i = 0; i < 64; i += 8)
        _mm256_storeu_ps(dst + 448 + i, ts__avx2_bf16_decode(
                                            _mm_loadu_si128((const __m128i *)(data + 448 + 2 * i))));
}

static void dec_bf16_avx2(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, ts__avx2_bf16_decode(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) {
        uint32_t u = (uint32_t)src[i] << 16;
        memcpy(dst + i, &u, 4);
    }
}

void ts__mla_row_to_bf16__avx2(const float *o, float f, uint16_t *out) {
    const __m256 vf = _mm256_set1_ps(f);
    for (int c = 0; c < TS__MLA_DV; c += 16) {
        __m256i a = ts__avx2_bf16_codes(_mm256_mul_ps(_mm256_loadu_ps(o + c), vf));
        __m256i b = ts__avx2_bf16_codes(_mm256_mul_ps(_mm256_loadu_ps(o + c + 8), vf));
        /* codes < 2^16: packus keeps them; the lane interleave is undone by the permute */
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
        _mm256_storeu_si256((__m256i *)(out + c), p);
    }
}

void ts__mla_row_axpy__avx2(const float *x, float w, float *y) {
    const __m256 vw = _mm256_set1_ps(w);
    for (int c = 0; c < TS__MLA_DV; c += 8)
        _mm256_storeu_ps(y + c, _mm256_add_ps(_mm256_loadu_ps(y + c),
                                              _mm256_mul_ps(_mm256_loadu_ps(x + c), vw)));
}

const ts__mla_kernels ts__mla_kernels_avx2 = {
    qk_avx2,
    softmax_avx2,
    pv_avx2,
    dec_v32_avx2,
    dec_model1_avx2,
    dec_bf16_avx2,
    ts__mla_row_to_bf16__avx2,
    ts__mla_row_axpy__avx2,
};
