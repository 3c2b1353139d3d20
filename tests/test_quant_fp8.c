/* FP8 quantisers: golden vectors (tests/gen/gen_quant.py), NaN/inf rules, cast-back, bad input. */
#include "test_quant_common.h"

TS_TEST(quant_fp8_golden) { qt_run_golden(ts_t_, QOP_FP8_TOKEN, QOP_FP8_CHANNEL, true); }

static uint32_t f2u_(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* NaN / inf rules, hand-derived from the torch formulas. */
TS_TEST(quant_fp8_nonfinite_rules) {
    float x[4][128];
    memset(x, 0, sizeof x);
    x[0][0] = 1.0f; x[0][5] = NAN; x[0][6] = -2.0f;      /* NaN block */
    x[1][0] = INFINITY; x[1][1] = -3.0f; x[1][2] = 0.5f;  /* inf block */
    /* row 2 all zero */
    x[3][0] = -448.0f; x[3][1] = 1.0f;                    /* plain */
    uint8_t q[4][128];
    float sf[4];
    for (int ue = 0; ue < 2; ue++) {
        ts_tensor xt = ts_tensor_2d(x, TS_F32, 4, 128), qt = ts_tensor_2d(q, TS_E4M3, 4, 128),
                  st = ts_tensor_2d(sf, TS_F32, 4, 1);
        TS_CHECK_STATUS(ts_per_token_cast_to_fp8(&xt, ue, 128, false, &qt, &st), TS_OK);
        if (!ue) {
            TS_CHECK_EQ_INT(f2u_(sf[0]), 0x7FFFFFFF);          /* amax NaN -> sf canonical NaN */
            TS_CHECK_EQ_INT(q[0][0], 0x7F);
            TS_CHECK_EQ_INT(q[0][6], 0x7F);                     /* every product NaN -> 0x7F */
            TS_CHECK(isinf(sf[1]));                              /* sf = inf, 1/sf = 0 */
            TS_CHECK_EQ_INT(q[1][0], 0x7F);                     /* inf * 0 = NaN */
            TS_CHECK_EQ_INT(q[1][1], 0x80);                     /* -3 * 0 = -0 */
            TS_CHECK_EQ_INT(q[1][2], 0x00);
            TS_CHECK(sf[2] == 1e-4f / 448.0f);                  /* clamp */
            TS_CHECK_EQ_INT(q[2][0], 0);
            TS_CHECK(sf[3] == 1.0f);
            TS_CHECK_EQ_INT(q[3][0], 0xFE);
        } else {
            TS_CHECK(sf[0] == 0x1p127f);                         /* ceil_to_ue8m0(NaN) = 2^127 */
            TS_CHECK_EQ_INT(q[0][0], 0x00);                     /* 1 * 2^-127 rounds to 0 */
            TS_CHECK_EQ_INT(q[0][5], 0x7F);
            TS_CHECK_EQ_INT(q[0][6], 0x80);
            TS_CHECK(sf[1] == 0x1p127f);                         /* ceil_to_ue8m0(inf) = 2^127 */
            TS_CHECK_EQ_INT(q[1][0], 0x7F);                     /* inf * 2^-127 = inf -> NaN code */
            TS_CHECK(sf[2] == 0x1p-22f);                         /* 1e-4/448 = 2.23e-7 -> 2^-22 */
            TS_CHECK(sf[3] == 1.0f);
        }
    }
}

/* Per-token and per-block results for a row must not depend on the other rows or on the
 * thread count: same bits for row 7 alone and inside a larger batch. */
TS_TEST(quant_fp8_batch_invariant) {
    const int64_t m = 37, n = 7168;
    float *v = qt_make_values(77, m, n, TS_BF16, true);
    uint16_t *xb = (uint16_t *)qt_make_input(v, m * n, TS_BF16);
    uint8_t *q = (uint8_t *)malloc((size_t)(m * n)), q1[7168];
    float sf[37 * 56], sf1[56];
    ts_tensor x = ts_tensor_2d(xb, TS_BF16, m, n), qt = ts_tensor_2d(q, TS_E4M3, m, n),
              st = ts_tensor_2d(sf, TS_F32, m, 56);
    TS_CHECK_STATUS(ts_per_token_cast_to_fp8(&x, false, 128, false, &qt, &st), TS_OK);
    ts_tensor x1 = ts_tensor_2d(xb + 7 * n, TS_BF16, 1, n), q1t = ts_tensor_2d(q1, TS_E4M3, 1, n),
              s1t = ts_tensor_2d(sf1, TS_F32, 1, 56);
    TS_CHECK_STATUS(ts_per_token_cast_to_fp8(&x1, false, 128, false, &q1t, &s1t), TS_OK);
    TS_CHECK(memcmp(q1, q + 7 * n, (size_t)n) == 0);
    TS_CHECK(memcmp(sf1, sf + 7 * 56, sizeof sf1) == 0);
    free(v); free(xb); free(q);
}

/* Strided views: row stride > n for x and x_fp8, MN-major (transposed) scale output. */
TS_TEST(quant_fp8_strided_views) {
    const int64_t m = 5, n = 300, xs = 320, qs = 333;
    float *v = qt_make_values(5, m, n, TS_F32, false);
    float *xp = (float *)calloc((size_t)(m * xs), 4);
    for (int64_t r = 0; r < m; r++) memcpy(xp + r * xs, v + r * n, (size_t)n * 4);
    uint8_t qref[5 * 300], qp[5 * 333];
    float sref[5 * 3], smn[3 * 8];
    ts_tensor x = ts_tensor_2d(v, TS_F32, m, n), q = ts_tensor_2d(qref, TS_E4M3, m, n),
              s = ts_tensor_2d(sref, TS_F32, m, 3);
    TS_CHECK_STATUS(ts_per_token_cast_to_fp8(&x, false, 128, false, &q, &s), TS_OK);
    ts_tensor x2 = x, q2 = q, s2 = s;
    x2.data = xp; x2.strides[0] = xs;
    q2.data = qp; q2.strides[0] = qs;
    s2.data = smn; s2.strides[0] = 1; s2.strides[1] = 8; /* MN-major, TMA-aligned */
    TS_CHECK_STATUS(ts_per_token_cast_to_fp8(&x2, false, 128, false, &q2, &s2), TS_OK);
    for (int64_t r = 0; r < m; r++) {
        TS_CHECK(memcmp(qp + r * qs, qref + r * n, (size_t)n) == 0);
        for (int64_t b = 0; b < 3; b++) TS_CHECK(smn[b * 8 + r] == sref[r * 3 + b]);
    }
    free(v); free(xp);
}

TS_TEST(quant_fp8_cast_back) {
    /* per-token round trip, and the decode * sf rule checked against the scalar functions */
    const int64_t m = 9, n = 300;
    float *v = qt_make_values(9, m, n, TS_F32, false);
    uint8_t q[9 * 300];
    float sf[9 * 3], out[9 * 300];
    int32_t psf[9];
    ts_tensor x = ts_tensor_2d(v, TS_F32, m, n), qt = ts_tensor_2d(q, TS_E4M3, m, n),
              st = ts_tensor_2d(sf, TS_F32, m, 3), ot = ts_tensor_2d(out, TS_F32, m, n);
    TS_CHECK_STATUS(ts_per_token_cast_to_fp8(&x, true, 128, false, &qt, &st), TS_OK);
    TS_CHECK_STATUS(ts_cast_back_from_fp8(&qt, &st, 1, 128, &ot), TS_OK);
    for (int64_t i = 0; i < m * n; i++)
        TS_CHECK_MSG(out[i] == ts_e4m3_to_f32(q[i]) * sf[(i / n) * 3 + (i % n) / 128], "at %lld", (long long)i);
    /* packed scales decode to the same values */
    ts_tensor pst = ts_tensor_2d(psf, TS_UE8M0X4, m, 1);
    float out2[9 * 300];
    ts_tensor ot2 = ts_tensor_2d(out2, TS_F32, m, n);
    TS_CHECK_STATUS(ts_per_token_cast_to_fp8(&x, true, 128, true, &qt, &pst), TS_OK);
    TS_CHECK_STATUS(ts_cast_back_from_fp8(&qt, &pst, 1, 128, &ot2), TS_OK);
    TS_CHECK(memcmp(out, out2, sizeof out) == 0);
    for (int64_t r = 0; r < m; r++) TS_CHECK_EQ_INT(((uint32_t)psf[r] >> 24) & 0xFF, 0); /* missing byte 3 = 0 */
    double diff = 1;
    ts_tensor vt = ts_tensor_2d(v, TS_F32, m, n);
    TS_CHECK_STATUS(ts_calc_diff(&vt, &ot, &diff), TS_OK);
    TS_CHECK(diff < 1e-3);
    /* bf16 output rounds the f32 product */
    uint16_t ob[9 * 300];
    ts_tensor obt = ts_tensor_2d(ob, TS_BF16, m, n);
    TS_CHECK_STATUS(ts_cast_back_from_fp8(&qt, &pst, 1, 128, &obt), TS_OK);
    for (int64_t i = 0; i < m * n; i++) TS_CHECK(ob[i] == ts_f32_to_bf16(out[i]));
    /* per-block (128,128) */
    float bsf[1 * 3];
    ts_tensor bst = ts_tensor_2d(bsf, TS_F32, 1, 3);
    TS_CHECK_STATUS(ts_per_block_cast_to_fp8(&x, false, 128, &qt, &bst), TS_OK);
    TS_CHECK_STATUS(ts_cast_back_from_fp8(&qt, &bst, 128, 128, &ot), TS_OK);
    for (int64_t i = 0; i < m * n; i++) TS_CHECK(out[i] == ts_e4m3_to_f32(q[i]) * bsf[(i % n) / 128]);
    free(v);
}

/* Each bad input gives its own code and leaves the canary-filled outputs untouched. */
TS_TEST(quant_fp8_bad_input) {
    uint16_t xb[4 * 256];
    memset(xb, 0x3F, sizeof xb);
    uint8_t q[4 * 256 + 64];
    float sf[64];
    memset(q, 0xA5, sizeof q);
    memset(sf, 0xA5, sizeof sf);
    uint8_t qc[sizeof q];
    float sc[64];
    memcpy(qc, q, sizeof q);
    memcpy(sc, sf, sizeof sf);
    ts_tensor x = ts_tensor_2d(xb, TS_BF16, 4, 256), qt = ts_tensor_2d(q, TS_E4M3, 4, 256),
              st = ts_tensor_2d(sf, TS_F32, 4, 2);
#define EXPECT(call, code)                                                   \
    do {                                                                     \
        TS_CHECK_STATUS(call, code);                                         \
        TS_CHECK(strlen(ts_last_error()) > 0);                               \
        TS_CHECK(memcmp(q, qc, sizeof q) == 0 && memcmp(sf, sc, sizeof sf) == 0); \
    } while (0)
    EXPECT(ts_per_token_cast_to_fp8(NULL, false, 128, false, &qt, &st), TS_ERR_NULL_POINTER);
    EXPECT(ts_per_token_cast_to_fp8(&x, false, 128, false, NULL, &st), TS_ERR_NULL_POINTER);
    EXPECT(ts_per_token_cast_to_fp8(&x, false, 128, false, &qt, NULL), TS_ERR_NULL_POINTER);
    TS_CHECK(strstr(ts_last_error(), "sf") != NULL);
    ts_tensor b = x;
    b.data = NULL;
    EXPECT(ts_per_token_cast_to_fp8(&b, false, 128, false, &qt, &st), TS_ERR_NULL_POINTER);
    b = x; b.dtype = TS_I32;
    EXPECT(ts_per_token_cast_to_fp8(&b, false, 128, false, &qt, &st), TS_ERR_DTYPE);
    TS_CHECK(strstr(ts_last_error(), "'x'") != NULL);
    b = qt; b.dtype = TS_E5M2;
    EXPECT(ts_per_token_cast_to_fp8(&x, false, 128, false, &b, &st), TS_ERR_DTYPE);
    TS_CHECK(strstr(ts_last_error(), "x_fp8") != NULL);
    b = st; b.dtype = TS_BF16;
    EXPECT(ts_per_token_cast_to_fp8(&x, false, 128, false, &qt, &b), TS_ERR_DTYPE);
    EXPECT(ts_per_token_cast_to_fp8(&x, true, 128, true, &qt, &st), TS_ERR_DTYPE); /* packed needs i32 */
    b = qt; b.shape[1] = 255;
    EXPECT(ts_per_token_cast_to_fp8(&x, false, 128, false, &b, &st), TS_ERR_SHAPE);
    b = st; b.shape[1] = 3;
    EXPECT(ts_per_token_cast_to_fp8(&x, false, 128, false, &qt, &b), TS_ERR_SHAPE);
    b = x; b.ndim = 3; b.shape[2] = 1; b.strides[2] = 1;
    EXPECT(ts_per_token_cast_to_fp8(&b, false, 128, false, &qt, &st), TS_ERR_SHAPE);
    b = x; b.shape[0] = 2; b.shape[1] = 256; b.strides[0] = 1; b.strides[1] = 2;
    EXPECT(ts_per_token_cast_to_fp8(&b, false, 128, false, &qt, &st), TS_ERR_STRIDE);
    b = qt; b.strides[1] = 2;
    EXPECT(ts_per_token_cast_to_fp8(&x, false, 128, false, &b, &st), TS_ERR_STRIDE);
    b = st; b.data = (char *)sf + 2;
    EXPECT(ts_per_token_cast_to_fp8(&x, false, 128, false, &qt, &b), TS_ERR_ALIGNMENT);
    b = x; b.data = (char *)xb + 1;
    EXPECT(ts_per_token_cast_to_fp8(&b, false, 128, false, &qt, &st), TS_ERR_ALIGNMENT);
    EXPECT(ts_per_token_cast_to_fp8(&x, false, 0, false, &qt, &st), TS_ERR_INVALID_ARGUMENT);
    EXPECT(ts_per_token_cast_to_fp8(&x, false, -128, false, &qt, &st), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "gran_k") != NULL);
    EXPECT(ts_per_token_cast_to_fp8(&x, false, 128, true, &qt, &st), TS_ERR_INVALID_ARGUMENT);
    b = x; b.shape[0] = INT64_C(1) << 40; b.shape[1] = INT64_C(1) << 40; b.strides[0] = INT64_C(1) << 40;
    EXPECT(ts_per_token_cast_to_fp8(&b, false, 128, false, &qt, &st), TS_ERR_OVERFLOW);
    b = qt; b.strides[0] = 100; /* rows overlap */
    EXPECT(ts_per_token_cast_to_fp8(&x, false, 128, false, &b, &st), TS_ERR_STRIDE);
    b = st; b.strides[0] = 1; b.strides[1] = 2; /* (4,2) with strides (1,2): elements collide */
    EXPECT(ts_per_token_cast_to_fp8(&x, false, 128, false, &qt, &b), TS_ERR_STRIDE);
    ts_tensor alias = ts_tensor_2d(xb, TS_E4M3, 4, 256);
    EXPECT(ts_per_token_cast_to_fp8(&x, false, 128, false, &alias, &st), TS_ERR_ALIASING);
    /* per-block / per-channel */
    ts_tensor sb = ts_tensor_2d(sf, TS_F32, 1, 2);
    EXPECT(ts_per_block_cast_to_fp8(&x, false, 0, &qt, &sb), TS_ERR_INVALID_ARGUMENT);
    b = sb; b.shape[0] = 4;
    EXPECT(ts_per_block_cast_to_fp8(&x, false, 128, &qt, &b), TS_ERR_SHAPE);
    ts_tensor sc2 = ts_tensor_2d(sf, TS_F32, 1, 256);
    EXPECT(ts_per_channel_cast_to_fp8(&x, false, 128, &qt, &sc2), TS_ERR_SHAPE); /* 4 rows % 128 */
    /* cast back */
    float outb[4 * 256];
    memset(outb, 0xA5, sizeof outb);
    ts_tensor ot = ts_tensor_2d(outb, TS_F32, 4, 256);
    TS_CHECK_STATUS(ts_cast_back_from_fp8(&qt, &st, 0, 128, &ot), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_cast_back_from_fp8(&x, &st, 1, 128, &ot), TS_ERR_DTYPE);
    b = ot; b.dtype = TS_E4M3;
    TS_CHECK_STATUS(ts_cast_back_from_fp8(&qt, &st, 1, 128, &b), TS_ERR_DTYPE);
    b = st; b.shape[1] = 1;
    TS_CHECK_STATUS(ts_cast_back_from_fp8(&qt, &b, 1, 128, &ot), TS_ERR_SHAPE);
    for (size_t i = 0; i < sizeof outb / 4; i++) {
        uint32_t u;
        memcpy(&u, &outb[i], 4);
        TS_CHECK(u == 0xA5A5A5A5u);
    }
#undef EXPECT
}

/* Generic and AVX2 per-token paths on adversarial blocks: random finite bf16 bit patterns
 * mixed with tiny, zero and huge values, so every fast/slow branch of the AVX2 kernel runs;
 * every other SIMD path that runs here (avx512, ...) is compared with the generic one too. */
TS_TEST(quant_fp8_generic_vs_avx2_random_bits) {
    const ts_isa saved = ts_get_isa();
    int isas[TS_ISA_COUNT_];
    const int nisa = ts_test_isas(isas);
    if (nisa < 2) return; /* no SIMD path here */
    const int64_t m = 64, n = 7168 + 96;
    uint16_t *x = (uint16_t *)malloc((size_t)(m * n) * 2);
    ts_prng p = ts_prng_seed(4242);
    for (int64_t i = 0; i < m * n; i++) {
        uint32_t u = ts_prng_u32(&p);
        uint16_t h = (uint16_t)u;
        switch ((u >> 16) % 8) {
        case 0: h &= 0x807F; break;              /* bf16 subnormal or zero */
        case 1: h = (uint16_t)(h & 0x8000); break; /* +-0 */
        default: break;
        }
        if ((h & 0x7F80) == 0x7F80 && (i % 97) != 0) h ^= 0x4000; /* mostly finite */
        if ((i / n) % 2 == 0) /* narrow range rows: the all-normal fast path */
            h = (uint16_t)((h & 0x807F) | (0x3F00 + (((u >> 20) & 3) << 7)));
        x[i] = h;
    }
    uint8_t *q1 = (uint8_t *)malloc((size_t)(m * n)), *q2 = (uint8_t *)malloc((size_t)(m * n));
    float *s1 = (float *)malloc((size_t)m * 57 * 4), *s2 = (float *)malloc((size_t)m * 57 * 4);
    ts_tensor xt = ts_tensor_2d(x, TS_BF16, m, n);
    for (int ii = 0; ii < nisa; ii++)
    for (int ue = 0; ue < 2; ue++) {
        const ts_isa simd = (ts_isa)isas[ii];
        if (simd == TS_ISA_GENERIC) continue;
        ts_tensor a = ts_tensor_2d(q1, TS_E4M3, m, n), b = ts_tensor_2d(q2, TS_E4M3, m, n);
        ts_tensor sa = ts_tensor_2d(s1, TS_F32, m, 57), sb = ts_tensor_2d(s2, TS_F32, m, 57);
        TS_CHECK_STATUS(ts_set_isa(TS_ISA_GENERIC), TS_OK);
        TS_CHECK_STATUS(ts_per_token_cast_to_fp8(&xt, ue, 128, false, &a, &sa), TS_OK);
        TS_CHECK_STATUS(ts_set_isa(simd), TS_OK);
        TS_CHECK_STATUS(ts_per_token_cast_to_fp8(&xt, ue, 128, false, &b, &sb), TS_OK);
        TS_CHECK_MSG(memcmp(q1, q2, (size_t)(m * n)) == 0, "per_token 128 ue8m0 %d: generic and %s differ", ue, ts_isa_name(simd));
        TS_CHECK_MSG(memcmp(s1, s2, (size_t)m * 57 * 4) == 0, "per_token 128 ue8m0 %d: scales, %s", ue, ts_isa_name(simd));
        /* gran_k 32 and per-block go through the general run encoder */
        ts_tensor sa32 = ts_tensor_2d(s1, TS_F32, m / 8, 227), sb32 = ts_tensor_2d(s2, TS_F32, m / 8, 227);
        ts_tensor x8 = ts_tensor_2d(x, TS_BF16, m / 8, n), a8 = ts_tensor_2d(q1, TS_E4M3, m / 8, n),
                  b8 = ts_tensor_2d(q2, TS_E4M3, m / 8, n);
        TS_CHECK_STATUS(ts_set_isa(TS_ISA_GENERIC), TS_OK);
        TS_CHECK_STATUS(ts_per_token_cast_to_fp8(&x8, ue, 32, false, &a8, &sa32), TS_OK);
        TS_CHECK_STATUS(ts_set_isa(simd), TS_OK);
        TS_CHECK_STATUS(ts_per_token_cast_to_fp8(&x8, ue, 32, false, &b8, &sb32), TS_OK);
        TS_CHECK_MSG(memcmp(q1, q2, (size_t)(m / 8 * n)) == 0, "per_token 32 ue8m0 %d: generic and %s differ", ue, ts_isa_name(simd));
        TS_CHECK_MSG(memcmp(s1, s2, (size_t)(m / 8) * 227 * 4) == 0, "per_token 32 ue8m0 %d: scales, %s", ue, ts_isa_name(simd));
        ts_tensor pa = ts_tensor_2d(s1, TS_F32, 1, 57), pb = ts_tensor_2d(s2, TS_F32, 1, 57);
        ts_tensor xb = ts_tensor_2d(x, TS_BF16, m, n), qa = ts_tensor_2d(q1, TS_E4M3, m, n),
                  qb = ts_tensor_2d(q2, TS_E4M3, m, n);
        TS_CHECK_STATUS(ts_set_isa(TS_ISA_GENERIC), TS_OK);
        TS_CHECK_STATUS(ts_per_block_cast_to_fp8(&xb, ue, 128, &qa, &pa), TS_OK);
        TS_CHECK_STATUS(ts_set_isa(simd), TS_OK);
        TS_CHECK_STATUS(ts_per_block_cast_to_fp8(&xb, ue, 128, &qb, &pb), TS_OK);
        TS_CHECK_MSG(memcmp(q1, q2, (size_t)(m * n)) == 0, "per_block ue8m0 %d: generic and %s differ", ue, ts_isa_name(simd));
        TS_CHECK_MSG(memcmp(s1, s2, 57 * 4) == 0, "per_block ue8m0 %d: scales, %s", ue, ts_isa_name(simd));
    }
    ts_set_isa(saved);
    free(x); free(q1); free(q2); free(s1); free(s2);
}
