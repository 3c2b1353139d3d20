/* Mega MoE's own expert GEMM (src/ep/mega_moe_gemm.c, the AVX2 integer kernel and its generic
 * reference) against ts_m_grouped_fp8_fp4_gemm_contiguous_packed on the same packed weight,
 * bit for bit: rows 1..16 (every row-group shape), odd expert counts and panel counts, packed
 * ue8m0 weight scales (with and without the bytes 0 / 255) and f32 power-of-two ones, A blocks
 * the integer sum takes and blocks it must leave to the f32 chain (values spanning 2^17, e4m3
 * NaN codes), empty (all-zero) blocks, threads 1 and 3; then the fused call end to end with
 * the kernel forced on at every expert size against the unfused path (the default uses it for
 * 1-2 rows only). Each rank runs the same local checks. */
#include "ep/mega_moe_gemm.h"
#include "ep_test_util.h"
#include "tilestack/gemm.h"

#include <math.h>

/* e4m3 byte by mode: 0 plain (values >= 1: the integer sum takes every block), 1 spanning
 * (subnormals beside 448: the f32 chain), 2 some NaN codes, 3 a mix with zero blocks. */
static uint8_t a_code(ts_prng *r, int mode, int64_t k) {
    uint8_t u = (uint8_t)ts_prng_u32(r);
    if (mode == 0 || mode == 3) {
        if (((u >> 3) & 15) < 7) u |= 0x38; /* exponent >= 7: value >= 1 */
        if ((u & 0x7F) == 0x7F) u = 0x40;
        if (mode == 3 && (k / 32) % 3 == 1) u = (k & 1) ? 0x80 : 0x00; /* +-0 blocks */
        return u;
    }
    if (mode == 1) {
        if (k % 32 == 5) return (uint8_t)((u & 0x80) | 0x01); /* 2^-9 */
        if (k % 32 == 6) return (uint8_t)((u & 0x80) | 0x7E); /* 448 */
        if ((u & 0x7F) == 0x7F) u = 0x41;
        return u;
    }
    if (k % 97 == 3) return (u & 1) ? 0x7F : 0xFF;
    if ((u & 0x7F) == 0x7F) u = 0x42;
    return u;
}

static void check_shape(ts_test_ctx *ts_t_, int64_t G, int64_t N, int64_t K, int sfkind, int amode, uint64_t seed) {
    ts_prng r = ts_prng_seed(seed);
    uint8_t *q = malloc((size_t)(G * N * K / 2));
    for (int64_t i = 0; i < G * N * K / 2; i++) q[i] = (uint8_t)ts_prng_u32(&r);
    ts_tensor tq = ts_tensor_3d(q, TS_E2M1X2, G, N, K / 2);
    ts_packed_weight *pw = NULL;
    const int64_t rb[2] = {1, 32};
    if (sfkind < 2) {
        int32_t *sf = malloc((size_t)(G * N * K / 128) * 4);
        for (int64_t i = 0; i < G * N * K / 128; i++) {
            uint32_t w = 0;
            for (int j = 0; j < 4; j++) {
                uint32_t b = 118 + (ts_prng_u32(&r) % 8);
                if (sfkind == 1 && ts_prng_u32(&r) % 50 == 0) b = (ts_prng_u32(&r) & 1) ? 0 : 255;
                w |= b << (8 * j);
            }
            sf[i] = (int32_t)w;
        }
        ts_tensor ts = ts_tensor_3d(sf, TS_I32, G, N, K / 128);
        TS_CHECK_STATUS(ts_gemm_prepack_b(&tq, &ts, rb, false, &pw), TS_OK);
        free(sf);
    } else {
        float *sf = malloc((size_t)(G * N * K / 32) * 4);
        for (int64_t i = 0; i < G * N * K / 32; i++) sf[i] = ldexpf(1.0f, (int)(ts_prng_u32(&r) % 9) - 8);
        ts_tensor ts = ts_tensor_3d(sf, TS_F32, G, N, K / 32);
        TS_CHECK_STATUS(ts_gemm_prepack_b(&tq, &ts, rb, false, &pw), TS_OK);
        free(sf);
    }
    free(q);
    if (!pw) return;
    static const int ms[] = {1, 2, 3, 4, 5, 7, 9, 16};
    for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
        const int64_t m = ms[mi];
        TS_CHECK(ts__mega_moe_gemm_fits(pw, m));
        uint8_t *a = malloc((size_t)(m * K));
        int32_t *sa = malloc((size_t)(m * K / 128) * 4);
        for (int64_t i = 0; i < m; i++)
            for (int64_t k = 0; k < K; k++) a[i * K + k] = a_code(&r, amode, k);
        for (int64_t i = 0; i < m * K / 128; i++) sa[i] = (int32_t)(0x7C7D7E7Fu + (ts_prng_u32(&r) & 0x03030303u));
        uint16_t *want = malloc((size_t)(m * N) * 2), *got = malloc((size_t)(m * N) * 2);
        int32_t *ends = malloc((size_t)G * 4);
        void *scr = malloc(ts__mega_moe_gemm_scratch(m, K));
        for (int64_t e = 0; e < G; e++) {
            for (int64_t g = 0; g < G; g++) ends[g] = g < e ? 0 : (int32_t)m;
            ts_tensor ta = ts_tensor_2d(a, TS_E4M3, m, K), tsa = ts_tensor_2d(sa, TS_I32, m, K / 128);
            ts_tensor td = ts_tensor_2d(want, TS_BF16, m, N), gl = ts_tensor_1d(ends, TS_I32, G);
            static const int64_t rc[3] = {1, 1, 32};
            TS_CHECK_STATUS(ts_m_grouped_fp8_fp4_gemm_contiguous_packed(&ta, &tsa, pw, &td, &gl, rc, NULL, NULL, NULL,
                                                                        false, true, false),
                            TS_OK);
            for (int variant = 0; variant < 3; variant++) {
                const int thr = ts_get_num_threads();
                ts_set_num_threads(variant == 2 ? 3 : 1);
                memset(got, 0xA5, (size_t)(m * N) * 2);
                ts__mega_moe_gemm(pw, e, a, sa, m, got, N, scr, variant == 1);
                ts_set_num_threads(thr);
                TS_CHECK_MSG(!memcmp(got, want, (size_t)(m * N) * 2),
                             "G %lld N %lld K %lld sf %d a %d m %lld expert %lld %s: bits differ from the grouped GEMM",
                             (long long)G, (long long)N, (long long)K, sfkind, amode, (long long)m, (long long)e,
                             variant == 1 ? "generic" : variant == 2 ? "3 threads" : "avx2");
            }
        }
        free(a), free(sa), free(want), free(got), free(ends), free(scr);
    }
    ts_packed_weight_destroy(pw);
}

TS_TEST(mega_moe_gemm_matches_grouped) {
    check_shape(ts_t_, 3, 96, 384, 0, 0, 1);
    check_shape(ts_t_, 2, 32, 128, 0, 1, 2);
    check_shape(ts_t_, 3, 64, 256, 1, 3, 3);
    check_shape(ts_t_, 1, 160, 512, 2, 0, 4);
    check_shape(ts_t_, 2, 32, 256, 2, 1, 5);
    check_shape(ts_t_, 2, 64, 128, 0, 2, 6);
}

TS_TEST(mega_moe_gemm_rejects_other_weights) {
    /* fits only e2m1 with gran_k 32 and 1..16 rows */
    ts_prng r = ts_prng_seed(9);
    uint8_t q[2 * 32 * 64];
    for (size_t i = 0; i < sizeof q; i++) q[i] = (uint8_t)ts_prng_u32(&r);
    int32_t sf[2 * 32 * 1];
    for (size_t i = 0; i < 2 * 32; i++) sf[i] = 0x7F7F7F7F;
    ts_tensor tq = ts_tensor_3d(q, TS_E2M1X2, 2, 32, 64), ts = ts_tensor_3d(sf, TS_I32, 2, 32, 1);
    ts_packed_weight *pw = NULL;
    const int64_t rb[2] = {1, 32}, rb128[2] = {1, 128};
    TS_CHECK_STATUS(ts_gemm_prepack_b(&tq, &ts, rb, false, &pw), TS_OK);
    TS_CHECK(ts__mega_moe_gemm_fits(pw, 1) && ts__mega_moe_gemm_fits(pw, 16));
    TS_CHECK(!ts__mega_moe_gemm_fits(pw, 0) && !ts__mega_moe_gemm_fits(pw, 17));
    ts_packed_weight_destroy(pw);
    pw = NULL;
    ts_tensor t8 = ts_tensor_3d(q, TS_E4M3, 2, 32, 64);
    float sf8[2 * 32];
    for (int i = 0; i < 64; i++) sf8[i] = 1.0f;
    ts_tensor ts8 = ts_tensor_3d(sf8, TS_F32, 2, 32, 1);
    TS_CHECK_STATUS(ts_gemm_prepack_b(&t8, &ts8, rb128, false, &pw), TS_OK);
    TS_CHECK(!ts__mega_moe_gemm_fits(pw, 1));
    ts_packed_weight_destroy(pw);
    TS_CHECK(!ts__mega_moe_gemm_fits(NULL, 1));
}
