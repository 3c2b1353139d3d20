/* Generic vs AVX2 quantiser paths on random bit patterns: every SIMD fast path and its
 * fall-backs (NaN / inf / subnormal / zero blocks, odd shapes, block tails) must give the
 * generic bits, at several thread counts. Inputs come from tests/ts_prng.h; nothing golden. */
#include "ts_prng.h"
#include "ts_test.h"

#include "tilestack/numerics.h"
#include "tilestack/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Runs `call` with the generic path into out_a and with AVX2 into out_b (both `bytes` long,
 * pre-filled with the same junk), threads 1..3, and checks the bytes agree. */
#define QS_SAME(ctx_bytes, out_a, out_b, call_a, call_b, what)                                  \
    do {                                                                                        \
        for (int th_ = 1; th_ <= 3; th_++) {                                                    \
            ts_set_num_threads(th_);                                                            \
            memset(out_a, 0x5A, ctx_bytes);                                                     \
            memset(out_b, 0x5A, ctx_bytes);                                                     \
            TS_CHECK_STATUS(ts_set_isa(TS_ISA_GENERIC), TS_OK);                                 \
            TS_CHECK_STATUS(call_a, TS_OK);                                                     \
            TS_CHECK_STATUS(ts_set_isa(TS_ISA_AVX2), TS_OK);                                    \
            TS_CHECK_STATUS(call_b, TS_OK);                                                     \
            TS_CHECK_MSG(memcmp(out_a, out_b, ctx_bytes) == 0, "%s: generic and AVX2 differ (threads %d)", \
                         what, th_);                                                            \
        }                                                                                       \
    } while (0)

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
    if (ts_set_isa(TS_ISA_AVX2) != TS_OK) return;
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
    ts_set_isa(TS_ISA_AVX2);
    free(q), free(sf), free(oa), free(ob);
}
