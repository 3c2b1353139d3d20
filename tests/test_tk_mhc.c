/* The mHC inference kernels (src/kernels/mhc.tile) byte-exact against tests/golden/tk_mhc.bin
 * (numpy re-implementation of TileKernels' torch/mhc.py in the documented order): pre_norm_fn
 * (also bit-equal to ts_tf32_hc_prenorm_gemm followed by the rsqrt scaling), split_mixes,
 * Sinkhorn (20 and 10 iterations), pre_apply_mix, post, head mix; expand_to_mhc against plain C;
 * the fused mhc_pre bit-identical to the unfused composition. Both ISA variants, 1 and 2 threads. */
#include "test_tk_common.h"

#include "tilestack/gemm.h"
#include "tilestack/kernels.h"
#include "tilestack/numerics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct mhc_ctx {
    ts_test_ctx *t;
    const tk_record *rec;
    int64_t T, H, repeat;
    uint16_t *R, *y, *layer_in, *out, *R2, *fused_in;
    float *fn, *scale, *base, *mix, *pre, *post, *comb, *combn, *head, *mix4, *fpost, *fcomb, *d, *ss;
} mhc_ctx;

static void mhc_run(void *vc, int variant) {
    mhc_ctx *c = (mhc_ctx *)vc;
    ts_test_ctx *ts_t_ = c->t;
    const int64_t T = c->T, H = c->H, K = 4 * H;
    ts_tensor R = ts_tensor_3d(c->R, TS_BF16, T, 4, H), fn = ts_tensor_2d(c->fn, TS_F32, 24, K);
    ts_tensor mix = ts_tensor_2d(c->mix, TS_F32, T, 24), scale = ts_tensor_1d(c->scale, TS_F32, 3);
    ts_tensor base = ts_tensor_1d(c->base, TS_F32, 24);
    ts_tensor pre = ts_tensor_2d(c->pre, TS_F32, T, 4), post = ts_tensor_2d(c->post, TS_F32, T, 4);
    ts_tensor comb = ts_tensor_2d(c->comb, TS_F32, T, 16), combn = ts_tensor_2d(c->combn, TS_F32, T, 16);
    ts_tensor li = ts_tensor_2d(c->layer_in, TS_BF16, T, H), y = ts_tensor_2d(c->y, TS_BF16, T, H);
    ts_tensor out = ts_tensor_3d(c->out, TS_BF16, T, 4, H);
    char what[80];
#define EXPECT(ai, ptr, n, name)                                                       \
    do {                                                                               \
        snprintf(what, sizeof what, "%s (T=%lld H=%lld variant %d)", name, (long long)T, (long long)H, variant); \
        tk_expect(ts_t_, c->rec, ai, ptr, n, what);                                    \
    } while (0)
    TS_CHECK_STATUS(ts_mhc_pre_norm_fn(&R, &fn, &mix, 1e-6f), TS_OK);
    EXPECT(0, c->mix, (size_t)T * 24 * 4, "mhc_pre_norm_fn");
    /* the GEMM part is ts_tf32_hc_prenorm_gemm's, bit for bit */
    ts_tensor a2 = ts_tensor_2d(c->R, TS_BF16, T, K), d = ts_tensor_2d(c->d, TS_F32, T, 24), ss = ts_tensor_1d(c->ss, TS_F32, T);
    TS_CHECK_STATUS(ts_tf32_hc_prenorm_gemm(&a2, &fn, &d, &ss, 0), TS_OK);
    int64_t bad = -1;
    for (int64_t i = 0; i < T * 24 && bad < 0; i++) {
        const float r = 1.0f / sqrtf(c->ss[i / 24] / (float)K + 1e-6f);
        const float m = c->d[i] * r;
        if (memcmp(&m, &c->mix[i], 4)) bad = i;
    }
    TS_CHECK_MSG(bad < 0, "mhc_pre_norm_fn differs from ts_tf32_hc_prenorm_gemm at %lld (T=%lld H=%lld)", (long long)bad,
                 (long long)T, (long long)H);
    TS_CHECK_STATUS(ts_mhc_pre_split_mixes(&mix, &scale, &base, &pre, &post, &comb, 2.0f, 1e-6f), TS_OK);
    EXPECT(1, c->pre, (size_t)T * 16, "mhc_pre_split_mixes pre");
    EXPECT(2, c->post, (size_t)T * 16, "mhc_pre_split_mixes post");
    EXPECT(3, c->comb, (size_t)T * 64, "mhc_pre_split_mixes comb");
    TS_CHECK_STATUS(ts_sinkhorn_normalize(&comb, &combn, c->repeat, 1e-6f), TS_OK);
    EXPECT(4, c->combn, (size_t)T * 64, "sinkhorn_normalize");
    TS_CHECK_STATUS(ts_mhc_pre_apply_mix(&R, &pre, &li), TS_OK);
    EXPECT(5, c->layer_in, (size_t)(T * H) * 2, "mhc_pre_apply_mix");
    TS_CHECK_STATUS(ts_mhc_post(&y, &R, &post, &combn, &out), TS_OK);
    EXPECT(6, c->out, (size_t)(T * 4 * H) * 2, "mhc_post");
    for (int64_t i = 0; i < T; i++) memcpy(c->mix4 + i * 4, c->mix + i * 24, 16);
    ts_tensor m4 = ts_tensor_2d(c->mix4, TS_F32, T, 4), s1 = ts_tensor_1d(c->scale, TS_F32, 1);
    ts_tensor b4 = ts_tensor_1d(c->base, TS_F32, 4), hd = ts_tensor_2d(c->head, TS_F32, T, 4);
    TS_CHECK_STATUS(ts_mhc_head_compute_mix(&m4, &s1, &b4, &hd, 1e-6f), TS_OK);
    EXPECT(7, c->head, (size_t)T * 16, "mhc_head_compute_mix");
    /* fused pre path: the same bits as the composition above */
    ts_tensor fli = ts_tensor_2d(c->fused_in, TS_BF16, T, H), fpo = ts_tensor_2d(c->fpost, TS_F32, T, 4);
    ts_tensor fco = ts_tensor_2d(c->fcomb, TS_F32, T, 16);
    memset(c->fused_in, 0xEE, (size_t)(T * H) * 2);
    TS_CHECK_STATUS(ts_mhc_pre(&R, &fn, &scale, &base, &fli, &fpo, &fco, 1e-6f, 1e-6f, 2.0f, c->repeat, 1e-6f), TS_OK);
    EXPECT(5, c->fused_in, (size_t)(T * H) * 2, "mhc_pre (fused) layer_in");
    EXPECT(2, c->fpost, (size_t)T * 16, "mhc_pre (fused) post");
    EXPECT(4, c->fcomb, (size_t)T * 64, "mhc_pre (fused) comb");
    /* expand_to_mhc: four copies of each row */
    ts_tensor x = ts_tensor_2d(c->y, TS_BF16, T, H), r2 = ts_tensor_3d(c->R2, TS_BF16, T, 4, H);
    TS_CHECK_STATUS(ts_expand_to_mhc(&x, &r2), TS_OK);
    bool same = true;
    for (int64_t i = 0; i < T; i++)
        for (int64_t k = 0; k < 4; k++) same &= !memcmp(c->R2 + (i * 4 + k) * H, c->y + i * H, (size_t)H * 2);
    TS_CHECK_MSG(same, "expand_to_mhc: T=%lld H=%lld variant %d", (long long)T, (long long)H, variant);
#undef EXPECT
}

TS_TEST(tk_mhc_golden) {
    size_t size = 0;
    tk_reader r = {TS_READ_GOLDEN("tk_mhc.bin", &size), 0, 0};
    r.size = size;
    tk_record rec;
    int n = 0;
    while (tk_next(ts_t_, &r, &rec)) {
        TS_CHECK(!strcmp(rec.name, "mhc"));
        mhc_ctx c = {.t = ts_t_, .rec = &rec, .T = rec.p[0], .H = rec.p[1], .repeat = rec.p[2]};
        const uint64_t seed = (uint64_t)rec.p[3];
        const size_t T = (size_t)c.T, H = (size_t)c.H, K = 4 * H;
        c.R = malloc(T * K * 2), c.R2 = malloc(T * K * 2), c.out = malloc(T * K * 2);
        c.y = malloc(T * H * 2), c.layer_in = malloc(T * H * 2), c.fused_in = malloc(T * H * 2);
        c.fn = malloc(24 * K * 4), c.scale = malloc(12), c.base = malloc(96);
        c.mix = malloc(T * 96), c.d = malloc(T * 96), c.ss = malloc(T * 4), c.mix4 = malloc(T * 16), c.head = malloc(T * 16);
        c.pre = malloc(T * 16), c.post = malloc(T * 16), c.fpost = malloc(T * 16);
        c.comb = malloc(T * 64), c.combn = malloc(T * 64), c.fcomb = malloc(T * 64);
        bool ok = c.R && c.R2 && c.out && c.y && c.layer_in && c.fused_in && c.fn && c.scale && c.base && c.mix && c.d &&
                  c.ss && c.mix4 && c.head && c.pre && c.post && c.fpost && c.comb && c.combn && c.fcomb;
        TS_CHECK(ok);
        if (ok) {
            tk_bf16_input(seed, T * K, 2.0f, c.R);
            tk_f32_input(seed + 1, 24 * K, 0.05f, c.fn);
            tk_f32_input(seed + 2, 3, 1.0f, c.scale);
            tk_f32_input(seed + 3, 24, 1.0f, c.base);
            tk_bf16_input(seed + 4, T * H, 2.0f, c.y);
            tk_for_variants(&c, mhc_run, 4);
        }
        free(c.R), free(c.R2), free(c.out), free(c.y), free(c.layer_in), free(c.fused_in), free(c.fn), free(c.scale);
        free(c.base), free(c.mix), free(c.d), free(c.ss), free(c.mix4), free(c.head), free(c.pre), free(c.post);
        free(c.fpost), free(c.comb), free(c.combn), free(c.fcomb);
        n++;
        tk_record_free(&rec);
    }
    TS_CHECK(n >= 3);
    free(r.buf);
}

TS_TEST(tk_mhc_errors) {
    uint16_t R[4 * 12] = {0};
    float fn[24 * 48] = {0}, mix[24];
    ts_tensor tr = ts_tensor_3d(R, TS_BF16, 1, 4, 12), tf = ts_tensor_2d(fn, TS_F32, 24, 48), tm = ts_tensor_2d(mix, TS_F32, 1, 24);
    TS_CHECK_STATUS(ts_mhc_pre_norm_fn(&tr, &tf, &tm, 1e-6f), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "multiple of 8") != NULL);
    ts_tensor tr2 = ts_tensor_3d(R, TS_BF16, 1, 4, 8), tf2 = ts_tensor_2d(fn, TS_F32, 24, 40);
    TS_CHECK_STATUS(ts_mhc_pre_norm_fn(&tr2, &tf2, &tm, 1e-6f), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "4 * H") != NULL);
    float c16[16] = {0}, o16[16];
    ts_tensor tc = ts_tensor_2d(c16, TS_F32, 1, 16), to = ts_tensor_2d(o16, TS_F32, 1, 16);
    TS_CHECK_STATUS(ts_sinkhorn_normalize(&tc, &to, 0, 1e-6f), TS_ERR_INVALID_ARGUMENT);
    ts_tensor tc3 = ts_tensor_3d(c16, TS_F32, 1, 4, 4);
    TS_CHECK(ts_sinkhorn_normalize(&tc3, &to, 10, 1e-6f) != TS_OK);
}
