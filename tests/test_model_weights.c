/* Weight generation (docs/model.md §2) against an independent computation: the tensor's stream
 * from tests/ts_prng.h, the value rule per kind, and the library's quantisers applied to the
 * whole f32 tensor here. Also the tensor list: names, dtypes, shapes. */
#include "ts_test.h"
#include "ts_prng.h"

#include "model/model_internal.h"
#include "tilestack/quant.h"

#include <math.h>
#include <stdlib.h>

static float u_of(const char *name, uint64_t seed, uint64_t i) {
    ts_prng p = ts_prng_seed(ts_fnv1a64(name, strlen(name)) ^ (seed * 0x9E3779B97F4A7C15ull));
    float u = 0;
    for (uint64_t k = 0; k <= i; k++) u = ts_prng_uniform(&p);
    return u;
}

static uint64_t u64_of(const char *name, uint64_t seed, uint64_t i) {
    ts_prng p = ts_prng_seed(ts_fnv1a64(name, strlen(name)) ^ (seed * 0x9E3779B97F4A7C15ull));
    uint64_t z = 0;
    for (uint64_t k = 0; k <= i; k++) z = ts_prng_next(&p);
    return z;
}

static const ts__mtensor *rec(ts_test_ctx *ts_t_, const ts_model *m, const char *name,
                              ts_dtype dt, int64_t d0, int64_t d1) {
    const ts__mtensor *t = ts__model_find(m, name);
    TS_CHECK_MSG(t != NULL, "tensor %s missing", name);
    if (!t) return NULL;
    TS_CHECK_MSG(t->dtype == dt && t->shape[0] == d0 && (d1 == 0 ? t->ndim == 1 : t->shape[1] == d1),
                 "%s: dtype %d shape [%lld, %lld]", name, (int)t->dtype, (long long)t->shape[0],
                 (long long)t->shape[1]);
    return t;
}

TS_TEST(model_weights_match_independent_generation) {
    ts_model_config c;
    TS_CHECK_STATUS(ts_model_config_builtin("dsv4-tiny", &c), TS_OK);
    ts_model *m = NULL;
    TS_CHECK_STATUS(ts_model_create(&c, 1, &m), TS_OK);
    if (!m) return;
    const uint64_t S = c.seed;
    const float cdim = (float)(1.0 / sqrt(256.0));
    const uint64_t idx[4] = {0, 1, 777, 65535};
    /* f32 kinds */
    const ts__mtensor *t;
    if ((t = rec(ts_t_, m, "1.attn.attn_sink", TS_F32, 4, 0)))
        for (int i = 0; i < 4; i++) TS_CHECK(((float *)t->data)[i] == u_of("1.attn.attn_sink", S, i));
    if ((t = rec(ts_t_, m, "2.attn.kv_norm", TS_F32, 512, 0)))
        for (int i = 0; i < 512; i += 97)
            TS_CHECK(((float *)t->data)[i] == 1.0f + u_of("2.attn.kv_norm", S, i) / 8);
    if ((t = rec(ts_t_, m, "0.hc_ffn_fn", TS_F32, 24, 1024)))
        for (int i = 0; i < 3; i++)
            TS_CHECK(((float *)t->data)[idx[i]] ==
                     u_of("0.hc_ffn_fn", S, idx[i]) * (float)(1.0 / sqrt(1024.0)));
    if ((t = rec(ts_t_, m, "0.hc_attn_base", TS_F32, 24, 0)))
        TS_CHECK(((float *)t->data)[5] == u_of("0.hc_attn_base", S, 5) / 4);
    if ((t = rec(ts_t_, m, "hc_head_scale", TS_F32, 1, 0)))
        TS_CHECK(((float *)t->data)[0] == 0.5f + u_of("hc_head_scale", S, 0) / 4);
    if ((t = rec(ts_t_, m, "2.attn.compressor.ape", TS_F32, 8, 512)))
        TS_CHECK(((float *)t->data)[777] == u_of("2.attn.compressor.ape", S, 777) / 4);
    if ((t = rec(ts_t_, m, "1.attn.compressor.wkv", TS_F32, 1024, 256)))
        for (int i = 0; i < 4; i++)
            TS_CHECK(((float *)t->data)[idx[i]] == u_of("1.attn.compressor.wkv", S, idx[i]) * cdim);
    if ((t = rec(ts_t_, m, "1.ffn.gate.bias", TS_F32, 8, 0)))
        TS_CHECK(((float *)t->data)[3] == u_of("1.ffn.gate.bias", S, 3) / 16);
    TS_CHECK(ts__model_find(m, "0.ffn.gate.bias") == NULL); /* hash layer */
    TS_CHECK(ts__model_find(m, "0.attn.compressor.wkv") == NULL); /* window-only layer */
    TS_CHECK(ts__model_find(m, "2.attn.indexer.wq_b") == NULL);   /* HCA layer: no indexer */
    if ((t = rec(ts_t_, m, "0.ffn.gate.tid2eid", TS_I32, 512, 6)))
        for (int v = 0; v < 512; v += 101) {
            const int64_t b = (int64_t)(u64_of("0.ffn.gate.tid2eid", S, (uint64_t)v) % 8);
            for (int j = 0; j < 6; j++) TS_CHECK(((int32_t *)t->data)[v * 6 + j] == (b + j) % 8);
        }
    /* bf16 kinds */
    if ((t = rec(ts_t_, m, "embed", TS_BF16, 512, 256)))
        for (int i = 0; i < 4; i++)
            TS_CHECK(((uint16_t *)t->data)[idx[i]] == ts_f32_to_bf16(u_of("embed", S, idx[i])));
    if ((t = rec(ts_t_, m, "head", TS_BF16, 512, 256)))
        TS_CHECK(((uint16_t *)t->data)[777] == ts_f32_to_bf16(u_of("head", S, 777) * cdim));
    if ((t = rec(ts_t_, m, "1.attn.indexer.weights_proj", TS_BF16, 4, 256)))
        TS_CHECK(((uint16_t *)t->data)[300] ==
                 ts_f32_to_bf16(u_of("1.attn.indexer.weights_proj", S, 300) * cdim));
    /* FP8: the whole tensor through ts_per_block_cast_to_fp8 here */
    {
        const char *nm = "2.attn.wkv";
        const ts__mtensor *q = rec(ts_t_, m, nm, TS_E4M3, 512, 256);
        const ts__mtensor *s = rec(ts_t_, m, "2.attn.wkv.scale", TS_F32, 4, 2);
        float *w = (float *)malloc(512 * 256 * sizeof(float));
        uint8_t *q8 = (uint8_t *)malloc(512 * 256);
        float sf[8];
        ts_prng p = ts_prng_seed(ts_fnv1a64(nm, strlen(nm)) ^ (S * 0x9E3779B97F4A7C15ull));
        for (int i = 0; i < 512 * 256; i++) w[i] = ts_prng_uniform(&p) * cdim;
        ts_tensor tw = ts_tensor_2d(w, TS_F32, 512, 256), tq = ts_tensor_2d(q8, TS_E4M3, 512, 256);
        ts_tensor ts_ = ts_tensor_2d(sf, TS_F32, 4, 2);
        TS_CHECK_STATUS(ts_per_block_cast_to_fp8(&tw, true, 128, &tq, &ts_), TS_OK);
        if (q && s) {
            TS_CHECK(memcmp(q->data, q8, 512 * 256) == 0);
            TS_CHECK(memcmp(s->data, sf, sizeof sf) == 0);
        }
        free(w);
        free(q8);
    }
    /* FP4: one expert's w2 [256, 128] through ts_per_token_cast_to_fp4 (DeepGEMM rounding) */
    {
        const char *nm = "1.ffn.experts.3.w2";
        const ts__mtensor *q = rec(ts_t_, m, nm, TS_U8, 256, 64);
        const ts__mtensor *s = rec(ts_t_, m, "1.ffn.experts.3.w2.scale", TS_F32, 256, 4);
        float *w = (float *)malloc(256 * 128 * sizeof(float));
        uint8_t *q4 = (uint8_t *)malloc(256 * 64);
        float *sf = (float *)malloc(256 * 4 * sizeof(float));
        ts_prng p = ts_prng_seed(ts_fnv1a64(nm, strlen(nm)) ^ (S * 0x9E3779B97F4A7C15ull));
        const float c128 = (float)(1.0 / sqrt(128.0));
        for (int i = 0; i < 256 * 128; i++) w[i] = ts_prng_uniform(&p) * c128;
        ts_tensor tw = ts_tensor_2d(w, TS_F32, 256, 128), tq = ts_tensor_2d(q4, TS_E2M1X2, 256, 64);
        ts_tensor ts_ = ts_tensor_2d(sf, TS_F32, 256, 4);
        TS_CHECK_STATUS(ts_per_token_cast_to_fp4(&tw, true, 32, false, TS_FP4_ROUND_DEEPGEMM, &tq, &ts_),
                        TS_OK);
        if (q && s) {
            TS_CHECK(memcmp(q->data, q4, 256 * 64) == 0);
            TS_CHECK(memcmp(s->data, sf, 256 * 4 * sizeof(float)) == 0);
        }
        free(w);
        free(q4);
        free(sf);
    }
    /* shapes of the rest of the list */
    rec(ts_t_, m, "1.attn.wo_a", TS_E4M3, 2 * 128, 2 * 512);
    rec(ts_t_, m, "1.attn.wo_a.scale", TS_F32, 2, 8);
    rec(ts_t_, m, "1.attn.wq_b", TS_E4M3, 4 * 512, 128);
    rec(ts_t_, m, "1.attn.indexer.wq_b", TS_E4M3, 4 * 128, 128);
    rec(ts_t_, m, "1.attn.indexer.compressor.wkv", TS_F32, 256, 256);
    rec(ts_t_, m, "1.attn.indexer.compressor.ape", TS_F32, 4, 256);
    rec(ts_t_, m, "2.attn.compressor.wgate", TS_F32, 512, 256);
    rec(ts_t_, m, "2.ffn.shared.w2", TS_E4M3, 256, 128);
    rec(ts_t_, m, "2.ffn.experts.7.w1", TS_U8, 128, 128);
    rec(ts_t_, m, "hc_head_fn", TS_F32, 4, 1024);
    TS_CHECK(ts__model_find(m, "2.ffn.experts.8.w1") == NULL);
    ts_model_free(m);
}
