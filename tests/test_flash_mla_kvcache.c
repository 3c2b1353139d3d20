/* FlashMLA FP8 KV cache helpers: V32 / MODEL1 byte layouts against an independent transcription
 * of upstream's tests/quant.py rule, dequantisation, round trips, and the abs -> paged index
 * conversion against brute force; bad input leaves outputs untouched. */
#include "test_flash_mla_common.h"

static float ref_scale(const uint16_t *x, int n) {
    double amax = 0.0;
    for (int i = 0; i < n; i++) amax = fmax(amax, fabs((double)fm_bf(x[i])));
    float s = (float)(amax / 448.0);
    if (s < 1e-4f) s = 1e-4f;
    return (float)ldexp(1.0, (int)ceil(log2((double)s)));
}

static void check_layout(ts_test_ctx *ts_t_, ts_mla_kv_layout L, int64_t nb, int64_t P,
                         uint64_t seed) {
    const int64_t d = ts_mla_kv_head_dim(L), tb = ts_mla_kv_token_bytes(L);
    const int tile = L == TS_MLA_KV_V32 ? 128 : 64, nt = L == TS_MLA_KV_V32 ? 4 : 7;
    /* padded block stride (as upstream's tests), non-contiguous source rows */
    const int64_t bstride = P * tb + 40, sstride = d + 8;
    uint16_t *x = (uint16_t *)malloc((size_t)(nb * P * sstride) * 2);
    ts_prng p = ts_prng_seed(seed);
    for (int64_t i = 0; i < nb * P * sstride; i++) {
        float v = ts_prng_uniform(&p) * 0.3f;
        if (ts_prng_u32(&p) % 97 == 0) v *= 1e-5f; /* tiles near the 1e-4 clamp */
        x[i] = fm_tobf(v);
    }
    /* one all-zero token and one token whose amax/448 is exactly a power of two */
    for (int64_t j = 0; j < d; j++) x[j] = 0;
    if (nb * P > 1) x[sstride] = fm_tobf(448.0f * 0x1p-8f);
    uint8_t *q = (uint8_t *)malloc((size_t)(nb * bstride));
    memset(q, 0xAB, (size_t)(nb * bstride));
    ts_tensor xt = {x, TS_BF16, 4, {nb, P, 1, d}, {P * sstride, sstride, d, 1}};
    ts_tensor qt = {q, TS_U8, 4, {nb, P, 1, tb}, {bstride, tb, tb, 1}};
    TS_CHECK_STATUS(ts_mla_quantize_kv_cache(L, &xt, &qt), TS_OK);
    int bad = 0;
    for (int64_t b = 0; b < nb; b++)
        for (int64_t r = 0; r < P; r++) {
            const uint16_t *xr = x + (b * P + r) * sstride;
            const uint8_t *blk = q + b * bstride;
            const uint8_t *data = L == TS_MLA_KV_V32 ? blk + r * 656 : blk + r * 576;
            for (int j = 0; j < nt; j++) {
                float s = ref_scale(xr + j * tile, tile);
                if (L == TS_MLA_KV_V32) {
                    float got;
                    memcpy(&got, data + 512 + 4 * j, 4);
                    bad += got != s;
                } else {
                    const uint8_t *sc = blk + P * 576 + r * 8;
                    bad += sc[j] != (uint8_t)(127 + ilogbf(s));
                    bad += sc[7] != 0;
                }
                for (int i = 0; i < tile; i++)
                    bad += data[j * tile + i] != ts_f32_to_e4m3(fm_bf(xr[j * tile + i]) / s);
            }
            const uint8_t *rope = data + (L == TS_MLA_KV_V32 ? 528 : 448);
            bad += memcmp(rope, xr + (d - 64), 128) != 0;
        }
    TS_CHECK_MSG(bad == 0, "layout %d: %d mismatching bytes", (int)L, bad);
    /* the bytes past each block's tokens (block padding) are untouched */
    TS_CHECK(q[P * tb] == 0xAB);

    /* dequantise: bf16(decode * scale); then quantising the dequantised cache is a fixed point */
    uint16_t *y = (uint16_t *)malloc((size_t)(nb * P * d) * 2);
    ts_tensor yt = ts_tensor_make(y, TS_BF16, 4, (int64_t[]){nb, P, 1, d});
    TS_CHECK_STATUS(ts_mla_dequantize_kv_cache(L, &qt, &yt), TS_OK);
    bad = 0;
    for (int64_t b = 0; b < nb; b++)
        for (int64_t r = 0; r < P; r++) {
            const uint16_t *yr = y + (b * P + r) * d, *xr = x + (b * P + r) * sstride;
            for (int j = 0; j < nt; j++) {
                float s = ref_scale(xr + j * tile, tile);
                for (int i = 0; i < tile; i++) {
                    float e = ts_e4m3_to_f32(ts_f32_to_e4m3(fm_bf(xr[j * tile + i]) / s)) * s;
                    bad += yr[j * tile + i] != fm_tobf(e);
                }
            }
            bad += memcmp(yr + d - 64, xr + d - 64, 128) != 0;
        }
    TS_CHECK_MSG(bad == 0, "layout %d: %d dequantised values differ", (int)L, bad);
    uint8_t *q2 = (uint8_t *)malloc((size_t)(nb * bstride));
    memcpy(q2, q, (size_t)(nb * bstride));
    ts_tensor q2t = qt;
    q2t.data = q2;
    TS_CHECK_STATUS(ts_mla_quantize_kv_cache(L, &yt, &q2t), TS_OK);
    bad = 0;
    for (int64_t b = 0; b < nb; b++) bad += memcmp(q + b * bstride, q2 + b * bstride, (size_t)(P * tb)) != 0;
    TS_CHECK_MSG(bad == 0, "layout %d: re-quantising the dequantised cache changed %d blocks",
                 (int)L, bad);
    free(x);
    free(q);
    free(q2);
    free(y);
}

TS_TEST(flash_mla_kv_v32_layout) {
    check_layout(ts_t_, TS_MLA_KV_V32, 3, 53, 11);
    check_layout(ts_t_, TS_MLA_KV_V32, 2, 1, 12);
}

TS_TEST(flash_mla_kv_model1_layout) {
    check_layout(ts_t_, TS_MLA_KV_MODEL1, 3, 69, 13);
    check_layout(ts_t_, TS_MLA_KV_MODEL1, 2, 64, 14);
}

TS_TEST(flash_mla_kv_bad_input) {
    uint16_t x[2 * 576];
    memset(x, 0, sizeof x);
    uint8_t q[2 * 656];
    memset(q, 0x5A, sizeof q);
    ts_tensor xt = ts_tensor_make(x, TS_BF16, 4, (int64_t[]){1, 2, 1, 576});
    ts_tensor qt = ts_tensor_make(q, TS_U8, 4, (int64_t[]){1, 2, 1, 656});
    TS_CHECK_STATUS(ts_mla_quantize_kv_cache((ts_mla_kv_layout)7, &xt, &qt), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_mla_quantize_kv_cache(TS_MLA_KV_MODEL1, &xt, &qt), TS_ERR_SHAPE);
    ts_tensor bad = qt;
    bad.strides[1] = 700;
    TS_CHECK_STATUS(ts_mla_quantize_kv_cache(TS_MLA_KV_V32, &xt, &bad), TS_ERR_STRIDE);
    bad = qt;
    bad.dtype = TS_F32;
    TS_CHECK_STATUS(ts_mla_quantize_kv_cache(TS_MLA_KV_V32, &xt, &bad), TS_ERR_DTYPE);
    ts_tensor xb = xt;
    xb.shape[3] = 512;
    TS_CHECK_STATUS(ts_mla_quantize_kv_cache(TS_MLA_KV_V32, &xb, &qt), TS_ERR_SHAPE);
    TS_CHECK_STATUS(ts_mla_quantize_kv_cache(TS_MLA_KV_V32, NULL, &qt), TS_ERR_NULL_POINTER);
    int untouched = 1;
    for (size_t i = 0; i < sizeof q; i++) untouched &= q[i] == 0x5A;
    TS_CHECK(untouched);
    TS_CHECK_EQ_INT(ts_mla_kv_token_bytes(TS_MLA_KV_V32), 656);
    TS_CHECK_EQ_INT(ts_mla_kv_token_bytes(TS_MLA_KV_MODEL1), 584);
}

TS_TEST(flash_mla_abs_indices) {
    enum { B = 3, SQ = 2, K = 9, MB = 4, P = 5 };
    int32_t abs_[B][SQ][K], bt[B][MB], out[B][SQ][K];
    ts_prng p = ts_prng_seed(5);
    for (int i = 0; i < B; i++)
        for (int j = 0; j < MB; j++) bt[i][j] = (int32_t)(ts_prng_u32(&p) % 100);
    for (int i = 0; i < B; i++)
        for (int s = 0; s < SQ; s++)
            for (int k = 0; k < K; k++)
                abs_[i][s][k] = (ts_prng_u32(&p) % 4 == 0) ? -1 : (int32_t)(ts_prng_u32(&p) % (MB * P));
    ts_tensor at = ts_tensor_3d(abs_, TS_I32, B, SQ, K), btt = ts_tensor_2d(bt, TS_I32, B, MB),
              ot = ts_tensor_3d(out, TS_I32, B, SQ, K);
    TS_CHECK_STATUS(ts_mla_abs_indices_to_kvcache(&at, &btt, P, &ot), TS_OK);
    int bad = 0;
    for (int i = 0; i < B; i++)
        for (int s = 0; s < SQ; s++)
            for (int k = 0; k < K; k++) {
                int32_t a = abs_[i][s][k];
                int32_t e = a == -1 ? -1 : bt[i][a / P] * P + a % P;
                bad += out[i][s][k] != e;
            }
    TS_CHECK_EQ_INT(bad, 0);
    /* in place gives the same */
    int32_t copy[B][SQ][K];
    memcpy(copy, abs_, sizeof copy);
    ts_tensor ct = ts_tensor_3d(copy, TS_I32, B, SQ, K);
    TS_CHECK_STATUS(ts_mla_abs_indices_to_kvcache(&ct, &btt, P, &ct), TS_OK);
    TS_CHECK(memcmp(copy, out, sizeof out) == 0);
    /* past the block table or below -1: error, out untouched */
    memcpy(copy, out, sizeof copy);
    abs_[1][1][3] = MB * P;
    TS_CHECK_STATUS(ts_mla_abs_indices_to_kvcache(&at, &btt, P, &ot), TS_ERR_INVALID_ARGUMENT);
    abs_[1][1][3] = INT32_MIN;
    TS_CHECK_STATUS(ts_mla_abs_indices_to_kvcache(&at, &btt, P, &ot), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(memcmp(copy, out, sizeof out) == 0);
    TS_CHECK_STATUS(ts_mla_abs_indices_to_kvcache(&at, &btt, 0, &ot), TS_ERR_INVALID_ARGUMENT);
}
