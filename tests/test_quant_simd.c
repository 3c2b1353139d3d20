/* Generic vs SIMD quantiser paths (every one that runs here: avx2, avx512, ...) on random bit
 * patterns: every SIMD fast path and its fall-backs (NaN / inf / subnormal / zero blocks, odd
 * shapes, block tails) must give the generic bits, at several thread counts. Inputs come from
 * tests/ts_prng.h; nothing golden. */
#include "ts_prng.h"
#include "ts_test.h"

#include "tilestack/numerics.h"
#include "tilestack/quant.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Runs `call_a` on the generic path into out_a and `call_b` on every SIMD path that runs here
 * (avx2, avx512, ...) into out_b (both `bytes` long, pre-filled with the same junk), threads
 * 1..3, and checks the bytes agree; with sf_bytes > 0, also the scales sf_a / sf_b. */
#define QS_SAME_SF(ctx_bytes, out_a, out_b, sf_bytes, sf_a, sf_b, call_a, call_b, what)            \
    do {                                                                                        \
        int isas_[TS_ISA_COUNT_];                                                               \
        const int nisa_ = ts_test_isas(isas_);                                                  \
        for (int ii_ = 0; ii_ < nisa_; ii_++) {                                                 \
            if (isas_[ii_] == TS_ISA_GENERIC) continue;                                         \
            const char *isa_ = ts_isa_name((ts_isa)isas_[ii_]);                                 \
            for (int th_ = 1; th_ <= 3; th_++) {                                                \
                ts_set_num_threads(th_);                                                        \
                memset(out_a, 0x5A, ctx_bytes);                                                 \
                memset(out_b, 0x5A, ctx_bytes);                                                 \
                TS_CHECK_STATUS(ts_set_isa(TS_ISA_GENERIC), TS_OK);                             \
                TS_CHECK_STATUS(call_a, TS_OK);                                                 \
                TS_CHECK_STATUS(ts_set_isa((ts_isa)isas_[ii_]), TS_OK);                         \
                TS_CHECK_STATUS(call_b, TS_OK);                                                 \
                TS_CHECK_MSG(memcmp(out_a, out_b, ctx_bytes) == 0, "%s: generic and %s differ (threads %d)", \
                             what, isa_, th_);                                                  \
                TS_CHECK_MSG((sf_bytes) == 0 || memcmp(sf_a, sf_b, (sf_bytes)) == 0,            \
                             "%s: scales differ (generic and %s, threads %d)", what, isa_, th_); \
            }                                                                                   \
        }                                                                                       \
    } while (0)
#define QS_SAME(ctx_bytes, out_a, out_b, call_a, call_b, what) \
    QS_SAME_SF(ctx_bytes, out_a, out_b, 0, out_a, out_b, call_a, call_b, what)

/* Whether a SIMD path runs here (the tests compare it with the generic one). */
static bool qs_have_simd(void) {
    int isas[TS_ISA_COUNT_];
    return ts_test_isas(isas) > 1;
}

/* A scale: mostly ordinary positive values, sometimes 0, negative, subnormal, huge (256 * s
 * overflows), inf or NaN. */
static float qs_scale(ts_prng *p) {
    uint32_t u = ts_prng_u32(p), b;
    switch (u % 16) {
    case 0: b = 0; break;
    case 1: b = 0x7F800000u; break;
    case 2: b = 0x7FC00001u | (u & 0x80000000u); break;
    case 3: b = (u >> 8) & 0x7FFFFFu; break;                 /* subnormal */
    case 4: b = 0x7C000000u | ((u >> 8) & 0x7FFFFFu); break; /* >= 2^121 */
    case 5: b = 0xBF000000u | ((u >> 8) & 0x7FFFFFu); break; /* negative */
    default: b = ((100u + (u >> 4) % 40u) << 23) | ((u >> 8) & 0x7FFFFFu); break;
    }
    float f;
    memcpy(&f, &b, 4);
    return f;
}

/* Cast-back of both formats, f32 and packed scales, every output kind, gran shapes with
 * block tails, odd fp4 gran_k and row-block scales. */
TS_TEST(quant_simd_cast_back_random_bits) {
    const ts_isa isa0 = ts_get_isa();
    if (!qs_have_simd()) return;
    const int saved_threads = ts_get_num_threads();
    const int64_t m = 12, n = 2 * 203; /* n: not a multiple of 16 or 32 */
    ts_prng p = ts_prng_seed(777);
    uint8_t *q = malloc((size_t)(m * n));
    for (int64_t i = 0; i < m * n; i++) {
        uint32_t u = ts_prng_u32(&p);
        /* rows 0..5 hold no e4m3 NaN codes (the fast path), the rest any byte */
        q[i] = (uint8_t)u;
        if (i / n < 6 && (q[i] & 0x7F) == 0x7F) q[i] ^= 1;
    }
    const int64_t sfmax = m * n;
    float *sf = malloc((size_t)sfmax * 4);
    for (int64_t i = 0; i < sfmax; i++) {
        sf[i] = qs_scale(&p);
        if (i % 3 == 0) sf[i] = (float)(1 + i % 7) * 0.015625f; /* many all-fast blocks */
    }
    uint8_t *oa = malloc((size_t)(m * n) * 4), *ob = malloc((size_t)(m * n) * 4);
    static const ts_dtype outs[3] = {TS_BF16, TS_F16, TS_F32};
    static const int64_t grans[][2] = {{1, 128}, {1, 32}, {3, 48}, {1, 7}, {4, 1}, {1, 16}};
    for (int fp4 = 0; fp4 < 2; fp4++) {
        for (size_t gi = 0; gi < sizeof grans / sizeof grans[0]; gi++) {
            const int64_t gmn = grans[gi][0], gk = grans[gi][1];
            const int64_t mb = (m + gmn - 1) / gmn, nb = (n + gk - 1) / gk;
            for (int packed = 0; packed < 2; packed++) {
                ts_tensor st = packed ? ts_tensor_2d(sf, TS_UE8M0X4, mb, (nb + 3) / 4)
                                      : ts_tensor_2d(sf, TS_F32, mb, nb);
                ts_tensor xt = fp4 ? ts_tensor_2d(q, TS_E2M1X2, m, n / 2) : ts_tensor_2d(q, TS_E4M3, m, n);
                for (int o = 0; o < 3; o++) {
                    const size_t bytes = (size_t)(m * n) * ts_dtype_size(outs[o]);
                    ts_tensor ta = ts_tensor_2d(oa, outs[o], m, n), tb = ts_tensor_2d(ob, outs[o], m, n);
                    char what[96];
                    snprintf(what, sizeof what, "cast_back fp%d gran (%lld,%lld) packed %d out %s", fp4 ? 4 : 8,
                             (long long)gmn, (long long)gk, packed, ts_dtype_name(outs[o]));
                    if (fp4)
                        QS_SAME(bytes, oa, ob, ts_cast_back_from_fp4(&xt, &st, gmn, gk, &ta),
                                ts_cast_back_from_fp4(&xt, &st, gmn, gk, &tb), what);
                    else
                        QS_SAME(bytes, oa, ob, ts_cast_back_from_fp8(&xt, &st, gmn, gk, &ta),
                                ts_cast_back_from_fp8(&xt, &st, gmn, gk, &tb), what);
                }
            }
        }
    }
    ts_set_num_threads(saved_threads);
    ts_set_isa(isa0);
    free(q), free(sf), free(oa), free(ob);
}

/* One row of bf16 bit patterns in one regime: 0 random finite bits with subnormals and zeros,
 * 1 narrow range (few binades), 2 like 1 with an inf or NaN in some blocks, 3 e2m1 grid points
 * and midpoints times 2^k (exact ties under ue8m0 scales, near-ties otherwise), 4 all zero but
 * a few tiny values. */
static void qs_fill_row(uint16_t *x, int64_t n, int regime, int k, ts_prng *p) {
    static const float grid[] = {0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f, 2.0f, 2.5f, 3.0f, 3.5f, 4.0f, 5.0f, 6.0f};
    for (int64_t j = 0; j < n; j++) {
        uint32_t u = ts_prng_u32(p);
        uint16_t h = (uint16_t)u;
        switch (regime) {
        case 0:
            if ((u >> 16) % 8 == 0) h &= 0x807F;
            if ((u >> 16) % 8 == 1) h &= 0x8000;
            if ((h & 0x7F80) == 0x7F80) h ^= 0x4000;
            break;
        case 1:
        case 2:
            h = (uint16_t)((h & 0x807F) | (0x3E00 + (((u >> 20) & 7) << 7)));
            if (regime == 2 && (u >> 24) % 61 == 0) h = (u >> 30) & 1 ? 0x7F80 : 0xFFC1;
            break;
        case 3:
            h = ts_f32_to_bf16(grid[(u >> 8) % 14] * (float)(1 << k) * ((u >> 31) ? -1.0f : 1.0f));
            if ((u >> 4) % 23 == 0) h = ts_f32_to_bf16(6.0f * (float)(1 << k)); /* pin amax */
            break;
        default:
            h = (u >> 8) % 97 == 0 ? (uint16_t)(u & 0x80FF) : (uint16_t)(u & 0x8000);
            break;
        }
        x[j] = h;
    }
}

/* Rows cycle through the regimes. */
static void qs_fill_bf16(uint16_t *x, int64_t m, int64_t n, uint64_t seed) {
    ts_prng p = ts_prng_seed(seed);
    for (int64_t r = 0; r < m; r++) qs_fill_row(x + r * n, n, (int)(r % 5), (int)(r % 7), &p);
}

/* Per-block FP8 over tiles that are mixed finite (e4m3 subnormal products), all narrow-range
 * (the AVX2 integer path), narrow with one all-zero row, narrow with inf / NaN, and a short
 * last block-row; n spans two column strips and ends in a short block. */
TS_TEST(quant_simd_fp8_block_random_bits) {
    const ts_isa isa0 = ts_get_isa();
    if (!qs_have_simd()) return;
    const int saved_threads = ts_get_num_threads();
    const int64_t m = 128 * 3 + 40, n = 128 * 70 + 50;
    uint16_t *x = malloc((size_t)(m * n) * 2);
    float *xf = malloc((size_t)(m * n) * 4);
    ts_prng p = ts_prng_seed(2024);
    for (int64_t r = 0; r < m; r++) {
        static const int mixed[4] = {0, 1, 3, 4}; /* finite: the tile bounds pick the route */
        int regime = r < 128 ? mixed[r % 4] : r < 256 ? 1 : r < 384 ? (r == 300 ? 4 : 1) : (int)(1 + r % 2);
        qs_fill_row(x + r * n, n, regime, 0, &p);
    }
    for (int64_t i = 0; i < m * n; i++) xf[i] = ts_bf16_to_f32(x[i]);
    uint8_t *qa = malloc((size_t)(m * n)), *qb = malloc((size_t)(m * n));
    float *sa = malloc((size_t)(m * n) * 4), *sb = malloc((size_t)(m * n) * 4);
    static const int64_t grans[] = {128, 64, 100};
    for (int f32 = 0; f32 < 2; f32++) {
        ts_tensor xt = f32 ? ts_tensor_2d(xf, TS_F32, m, n) : ts_tensor_2d(x, TS_BF16, m, n);
        ts_tensor ta = ts_tensor_2d(qa, TS_E4M3, m, n), tb = ts_tensor_2d(qb, TS_E4M3, m, n);
        for (size_t gi = 0; gi < sizeof grans / sizeof grans[0]; gi++) {
            const int64_t g = grans[gi];
            if (f32 && g != 128) continue;
            for (int ue = 0; ue < 2; ue++) {
                ts_tensor ssa = ts_tensor_2d(sa, TS_F32, (m + g - 1) / g, (n + g - 1) / g);
                ts_tensor ssb = ts_tensor_2d(sb, TS_F32, (m + g - 1) / g, (n + g - 1) / g);
                char what[96];
                snprintf(what, sizeof what, "per_block %s g %lld ue8m0 %d", f32 ? "f32" : "bf16", (long long)g, ue);
                QS_SAME_SF((size_t)(m * n), qa, qb, (size_t)(ssa.shape[0] * ssa.shape[1]) * 4, sa, sb,
                           ts_per_block_cast_to_fp8(&xt, ue, g, &ta, &ssa), ts_per_block_cast_to_fp8(&xt, ue, g, &tb, &ssb),
                           what);
            }
        }
    }
    ts_set_num_threads(saved_threads);
    ts_set_isa(isa0);
    free(x), free(xf), free(qa), free(qb), free(sa), free(sb);
}

/* Per-channel FP8: columns of mixed regimes (rows cycle through them, so every column mixes
 * them too), then narrow-range groups, a group with an inf column (inv 0: inf * 0) and a NaN;
 * n spans two column strips plus a tail shorter than 32; bf16, f16 and f32. */
TS_TEST(quant_simd_fp8_channel_random_bits) {
    const ts_isa isa0 = ts_get_isa();
    if (!qs_have_simd()) return;
    const int saved_threads = ts_get_num_threads();
    const int64_t g = 32, m = g * 6, n = 1024 * 2 + 77;
    uint16_t *x = malloc((size_t)(m * n) * 2), *xh = malloc((size_t)(m * n) * 2);
    float *xf = malloc((size_t)(m * n) * 4);
    ts_prng p = ts_prng_seed(31337);
    for (int64_t r = 0; r < m; r++) qs_fill_row(x + r * n, n, r < 2 * g ? (int)(r % 5) : 1, 1, &p);
    x[(3 * g + 5) * n + 100] = 0x7F80;       /* +inf */
    x[(4 * g + 7) * n + 1500] = 0xFF80;      /* -inf */
    x[(5 * g + 1) * n + 2100] = 0x7FC0;      /* NaN, in the tail columns */
    for (int64_t i = 0; i < m * n; i++) {
        xf[i] = ts_bf16_to_f32(x[i]);
        xh[i] = ts_f32_to_f16(xf[i] * 0.001f);
    }
    uint8_t *qa = malloc((size_t)(m * n)), *qb = malloc((size_t)(m * n));
    float *sa = malloc((size_t)(m / g * n) * 4), *sb = malloc((size_t)(m / g * n) * 4);
    const void *srcs[3] = {x, xh, xf};
    static const ts_dtype sdt[3] = {TS_BF16, TS_F16, TS_F32};
    for (int si = 0; si < 3; si++) {
        ts_tensor xt = ts_tensor_2d((void *)srcs[si], sdt[si], m, n);
        ts_tensor ta = ts_tensor_2d(qa, TS_E4M3, m, n), tb = ts_tensor_2d(qb, TS_E4M3, m, n);
        for (int ue = 0; ue < 2; ue++) {
            ts_tensor ssa = ts_tensor_2d(sa, TS_F32, m / g, n), ssb = ts_tensor_2d(sb, TS_F32, m / g, n);
            char what[96];
            snprintf(what, sizeof what, "per_channel %s ue8m0 %d", ts_dtype_name(sdt[si]), ue);
            QS_SAME_SF((size_t)(m * n), qa, qb, (size_t)(m / g * n) * 4, sa, sb,
                       ts_per_channel_cast_to_fp8(&xt, ue, g, &ta, &ssa), ts_per_channel_cast_to_fp8(&xt, ue, g, &tb, &ssb),
                       what);
        }
    }
    ts_set_num_threads(saved_threads);
    ts_set_isa(isa0);
    free(x), free(xh), free(xf), free(qa), free(qb), free(sa), free(sb);
}

/* Per-token FP4 in both rules over gran_k that take the chunked AVX2 path (multiples of 32),
 * the per-block path (16, 48 with tails) and the odd-gran_k framework path; bf16, f16 and f32
 * sources; f32 and packed scales. */
TS_TEST(quant_simd_fp4_random_bits) {
    const ts_isa isa0 = ts_get_isa();
    if (!qs_have_simd()) return;
    const int saved_threads = ts_get_num_threads();
    const int64_t m = 20, n = 2 * 1100; /* 2200: not a multiple of 32, 64 or 48 */
    uint16_t *xb = malloc((size_t)(m * n) * 2);
    float *xf = malloc((size_t)(m * n) * 4);
    uint16_t *xh = malloc((size_t)(m * n) * 2);
    qs_fill_bf16(xb, m, n, 99);
    for (int64_t i = 0; i < m * n; i++) {
        xf[i] = ts_bf16_to_f32(xb[i]);
        xh[i] = ts_f32_to_f16(xf[i] * 0.01f);
    }
    uint8_t *qa = malloc((size_t)(m * n / 2)), *qb = malloc((size_t)(m * n / 2));
    float *sa = malloc((size_t)(m * n) * 4), *sb = malloc((size_t)(m * n) * 4);
    static const int64_t grans[] = {32, 64, 128, 16, 48, 7};
    const void *srcs[3] = {xb, xh, xf};
    static const ts_dtype sdt[3] = {TS_BF16, TS_F16, TS_F32};
    for (int si = 0; si < 3; si++) {
        ts_tensor xt = ts_tensor_2d((void *)srcs[si], sdt[si], m, n);
        ts_tensor ta = ts_tensor_2d(qa, TS_E2M1X2, m, n / 2), tb = ts_tensor_2d(qb, TS_E2M1X2, m, n / 2);
        for (size_t gi = 0; gi < sizeof grans / sizeof grans[0]; gi++) {
            const int64_t g = grans[gi], nb = (n + g - 1) / g;
            if (si > 0 && g != 32 && g != 48) continue;
            for (int mode = 0; mode < 6; mode++) { /* rule x {f32, ue8m0 f32, ue8m0 packed} */
                const ts_fp4_rounding rule = mode % 2 ? TS_FP4_ROUND_RNE : TS_FP4_ROUND_DEEPGEMM;
                const bool ue = mode >= 2, packed = mode >= 4;
                ts_tensor ssa = packed ? ts_tensor_2d(sa, TS_UE8M0X4, m, (nb + 3) / 4) : ts_tensor_2d(sa, TS_F32, m, nb);
                ts_tensor ssb = packed ? ts_tensor_2d(sb, TS_UE8M0X4, m, (nb + 3) / 4) : ts_tensor_2d(sb, TS_F32, m, nb);
                char what[96];
                snprintf(what, sizeof what, "fp4 %s g %lld rule %d ue8m0 %d packed %d", ts_dtype_name(sdt[si]),
                         (long long)g, (int)rule, ue, packed);
                QS_SAME_SF((size_t)(m * n / 2), qa, qb, (size_t)(ssa.shape[0] * ssa.shape[1]) * 4, sa, sb,
                           ts_per_token_cast_to_fp4(&xt, ue, g, packed, rule, &ta, &ssa),
                           ts_per_token_cast_to_fp4(&xt, ue, g, packed, rule, &tb, &ssb), what);
            }
        }
    }
    ts_set_num_threads(saved_threads);
    ts_set_isa(isa0);
    free(xb), free(xf), free(xh), free(qa), free(qb), free(sa), free(sb);
}
