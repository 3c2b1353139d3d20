/* FP4 quantisers (DeepGEMM strict thresholds and TileKernels RNE), cast-back and transpose. */
#include "test_quant_common.h"

TS_TEST(quant_fp4_golden) { qt_run_golden(ts_t_, QOP_FP4_DG, QOP_FP4_RNE, false); }

TS_TEST(quant_fp4_rules) {
    /* amax 6 -> sf 1: codes follow the strict thresholds (ties down) */
    float x[32] = {6, 0.25f, 0.26f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 5.01f, -0.2f, -0.3f, NAN};
    uint8_t q[16];
    float sf;
    ts_tensor xt = ts_tensor_2d(x, TS_F32, 1, 32), qt = ts_tensor_2d(q, TS_E2M1X2, 1, 16),
              st = ts_tensor_2d(&sf, TS_F32, 1, 1);
    x[12] = 0.0f;
    TS_CHECK_STATUS(ts_per_token_cast_to_fp4(&xt, false, 32, false, TS_FP4_ROUND_DEEPGEMM, &qt, &st), TS_OK);
    TS_CHECK(sf == 1.0f);
    TS_CHECK_EQ_INT(q[0], 0x07);        /* 6 -> 7, 0.25 -> 0 (tie down) */
    TS_CHECK_EQ_INT(q[1], 0x11);        /* 0.26 -> 1, 0.75 -> 1 */
    TS_CHECK_EQ_INT(q[2], 0x32);        /* 1.25 -> 2, 1.75 -> 3 */
    TS_CHECK_EQ_INT(q[3], 0x54);        /* 2.5 -> 4, 3.5 -> 5 */
    TS_CHECK_EQ_INT(q[4], 0x76);        /* 5 -> 6, 5.01 -> 7 */
    TS_CHECK_EQ_INT(q[5], 0x90);        /* -0.2 -> 0 (no sign), -0.3 -> 0x9 */
    TS_CHECK_STATUS(ts_per_token_cast_to_fp4(&xt, false, 32, false, TS_FP4_ROUND_RNE, &qt, &st), TS_OK);
    TS_CHECK_EQ_INT(q[0], 0x07);        /* RNE: 0.25 ties to even 0 */
    TS_CHECK_EQ_INT(q[1], 0x21);        /* 0.26 -> 0.5, 0.75 -> 1.0 (tie to even) */
    TS_CHECK_EQ_INT(q[5], 0x98);        /* -0.2 -> -0 (code 8), -0.3 -> -0.5 */
    /* NaN: DeepGEMM code 7 (bucketize puts NaN last) and sf NaN; TileKernels skips it in amax */
    x[12] = NAN;
    TS_CHECK_STATUS(ts_per_token_cast_to_fp4(&xt, false, 32, false, TS_FP4_ROUND_DEEPGEMM, &qt, &st), TS_OK);
    TS_CHECK(sf != sf);
    TS_CHECK_EQ_INT(q[6], 0x77);
    TS_CHECK_STATUS(ts_per_token_cast_to_fp4(&xt, false, 32, false, TS_FP4_ROUND_RNE, &qt, &st), TS_OK);
    TS_CHECK(sf == 1.0f);
    TS_CHECK_EQ_INT(q[6] & 0xF, 0x7);
}

TS_TEST(quant_fp4_cast_back_and_transpose) {
    const int64_t m = 6, n = 100;
    float *v = qt_make_values(3, m, n, TS_F32, false);
    uint8_t q[6 * 50], t[100 * 3], tt[6 * 50];
    float sf[6 * 4], out[6 * 100];
    int32_t psf[6];
    ts_tensor x = ts_tensor_2d(v, TS_F32, m, n), qt = ts_tensor_2d(q, TS_E2M1X2, m, n / 2),
              st = ts_tensor_2d(sf, TS_F32, m, 4), ot = ts_tensor_2d(out, TS_F32, m, n);
    TS_CHECK_STATUS(ts_per_token_cast_to_fp4(&x, true, 32, false, TS_FP4_ROUND_DEEPGEMM, &qt, &st), TS_OK);
    TS_CHECK_STATUS(ts_cast_back_from_fp4(&qt, &st, 1, 32, &ot), TS_OK);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            uint8_t c = (q[i * 50 + j / 2] >> (4 * (j & 1))) & 0xF;
            float d = c == 8 ? 0.0f : ts_e2m1_to_f32(c);
            TS_CHECK(out[i * n + j] == d * sf[i * 4 + j / 32]);
        }
    ts_tensor pst = ts_tensor_2d(psf, TS_UE8M0X4, m, 1);
    float out2[6 * 100];
    ts_tensor ot2 = ts_tensor_2d(out2, TS_F32, m, n);
    TS_CHECK_STATUS(ts_per_token_cast_to_fp4(&x, true, 32, true, TS_FP4_ROUND_DEEPGEMM, &qt, &pst), TS_OK);
    TS_CHECK_STATUS(ts_cast_back_from_fp4(&qt, &pst, 1, 32, &ot2), TS_OK);
    TS_CHECK(memcmp(out, out2, sizeof out) == 0);
    /* code 8 decodes to +0 (upstream), packed byte 0 -> 0.0, 255 -> inf */
    uint8_t neg0 = 0x88;
    int32_t w = (int32_t)0x000000FFu;
    float o2[2];
    ts_tensor q1 = ts_tensor_2d(&neg0, TS_E2M1X2, 1, 1), s1 = ts_tensor_2d(&w, TS_UE8M0X4, 1, 1),
              o1 = ts_tensor_2d(o2, TS_F32, 1, 2);
    uint8_t one = 0x22; /* 1.0, 1.0 */
    TS_CHECK_STATUS(ts_cast_back_from_fp4(&q1, &s1, 1, 32, &o1), TS_OK);
    TS_CHECK(o2[0] != o2[0] || o2[0] == 0.0f); /* 0 * inf = NaN */
    q1.data = &one;
    TS_CHECK_STATUS(ts_cast_back_from_fp4(&q1, &s1, 1, 32, &o1), TS_OK);
    TS_CHECK(isinf(o2[0]) && isinf(o2[1]));
    w = 0;
    TS_CHECK_STATUS(ts_cast_back_from_fp4(&q1, &s1, 1, 32, &o1), TS_OK);
    TS_CHECK(o2[0] == 0.0f && !signbit(o2[0]));
    /* transpose twice is the identity; element (i, j) moves to (j, i) */
    ts_tensor tt1 = ts_tensor_2d(t, TS_E2M1X2, n, m / 2), tt2 = ts_tensor_2d(tt, TS_E2M1X2, m, n / 2);
    TS_CHECK_STATUS(ts_transpose_packed_fp4(&qt, &tt1), TS_OK);
    TS_CHECK_STATUS(ts_transpose_packed_fp4(&tt1, &tt2), TS_OK);
    TS_CHECK(memcmp(q, tt, sizeof q) == 0);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++)
            TS_CHECK(((q[i * 50 + j / 2] >> (4 * (j & 1))) & 0xF) == ((t[j * 3 + i / 2] >> (4 * (i & 1))) & 0xF));
    ts_tensor odd = ts_tensor_2d(q, TS_E2M1X2, 5, 50);
    TS_CHECK_STATUS(ts_transpose_packed_fp4(&odd, &tt1), TS_ERR_SHAPE);
    free(v);
}

TS_TEST(quant_fp4_bad_input) {
    float x[2 * 64] = {0};
    uint8_t q[2 * 32 + 8];
    float sf[8];
    memset(q, 0xA5, sizeof q);
    memset(sf, 0xA5, sizeof sf);
    uint8_t qc[sizeof q];
    memcpy(qc, q, sizeof q);
    ts_tensor xt = ts_tensor_2d(x, TS_F32, 2, 64), qt = ts_tensor_2d(q, TS_E2M1X2, 2, 32),
              st = ts_tensor_2d(sf, TS_F32, 2, 2);
    TS_CHECK_STATUS(ts_per_token_cast_to_fp4(&xt, false, 32, true, TS_FP4_ROUND_DEEPGEMM, &qt, &st), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_per_token_cast_to_fp4(&xt, false, 0, false, TS_FP4_ROUND_DEEPGEMM, &qt, &st), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_per_token_cast_to_fp4(&xt, false, 32, false, (ts_fp4_rounding)7, &qt, &st), TS_ERR_INVALID_ARGUMENT);
    ts_tensor odd = ts_tensor_2d(x, TS_F32, 2, 63);
    TS_CHECK_STATUS(ts_per_token_cast_to_fp4(&odd, false, 32, false, TS_FP4_ROUND_DEEPGEMM, &qt, &st), TS_ERR_SHAPE);
    ts_tensor b = qt;
    b.dtype = TS_E4M3;
    TS_CHECK_STATUS(ts_per_token_cast_to_fp4(&xt, false, 32, false, TS_FP4_ROUND_DEEPGEMM, &b, &st), TS_ERR_DTYPE);
    b = qt; b.shape[1] = 64;
    TS_CHECK_STATUS(ts_per_token_cast_to_fp4(&xt, false, 32, false, TS_FP4_ROUND_DEEPGEMM, &b, &st), TS_ERR_SHAPE);
    TS_CHECK_STATUS(ts_per_token_cast_to_fp4(NULL, false, 32, false, TS_FP4_ROUND_DEEPGEMM, &qt, &st), TS_ERR_NULL_POINTER);
    TS_CHECK(memcmp(q, qc, sizeof q) == 0);
    for (int i = 0; i < 8; i++) { uint32_t u; memcpy(&u, &sf[i], 4); TS_CHECK(u == 0xA5A5A5A5u); }
}
