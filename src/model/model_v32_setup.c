/* attention = v32 (docs/model.md §8): binding the layer's weights (FP8 linears packed, wkv_b
 * dequantised once into per-head bf16 W_UKᵀ / W_UV), the caches (656-byte latent rows and the
 * indexer's FP8 keys, both in 64-token blocks), their random prefill, and the step's scratch. */
#include "model_v32.h"

#include "tilestack/numerics.h"
#include "tilestack/quant.h"

#include <math.h>
#include <string.h>

int64_t ts__model_v32_blocks(const ts_model_config *c) {
    return ts__ceil_div(c->max_seq_len, TS__V32_PAGE);
}

/* wkv_b dequantised (code x scale, exact in bf16) into one packed [H, ., .] bf16 weight: per
 * head the rows [h·256 + row0, + rows), as [512, rows] (transpose: W_UKᵀ) or [rows, 512]
 * (W_UV), so that one grouped GEMM serves every head. */
static ts_status pack_wkv_b(const ts__mtensor *q, const ts__mtensor *sf, int64_t H, int64_t row0,
                            int64_t rows, bool transpose, ts_packed_weight **pw) {
    const int64_t C = TS__V32_LAT, sc = sf->shape[1], per = rows * C;
    uint16_t *w = (uint16_t *)malloc((size_t)(H * per) * sizeof(uint16_t));
    if (!w) return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_create: out of memory (wkv_b)");
    const uint8_t *codes = (const uint8_t *)q->data;
    const float *s = (const float *)sf->data;
    for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < rows; i++)
            for (int64_t c = 0; c < C; c++) {
                const int64_t r = h * (TS__V32_NOPE + TS__V32_V) + row0 + i;
                const float v = ts_e4m3_to_f32(codes[r * C + c]) * s[(r / 128) * sc + c / 128];
                w[h * per + (transpose ? c * rows + i : i * C + c)] = ts__f32_to_bf16_inl(v);
            }
    ts_tensor b = transpose ? ts_tensor_3d(w, TS_BF16, H, C, rows)
                            : ts_tensor_3d(w, TS_BF16, H, rows, C);
    ts_status st = ts_gemm_prepack_b(&b, NULL, NULL, false, pw);
    free(w);
    return st;
}

ts_status ts__model_v32_bind(ts_model *m, int64_t L) {
    const ts_model_config *c = &m->cfg;
    ts__layer *ly = &m->layers[L];
    ts__v32_layer *v = (ts__v32_layer *)calloc(1, sizeof *v);
    if (!v) return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_create: out of memory");
    ly->v32 = v;
    const int64_t H = c->n_heads;
    v->H = H;
    char nm[128];
    const long long l = (long long)L;
#define NM(...) (snprintf(nm, sizeof nm, __VA_ARGS__), nm)
    TS__RETURN_IF_ERROR(ts__model_w_pack8(m, NM("%lld.attn.wq_a", l), &v->wq_a));
    TS__RETURN_IF_ERROR(ts__model_w_pack8(m, NM("%lld.attn.wq_b", l), &v->wq_b));
    TS__RETURN_IF_ERROR(ts__model_w_pack8(m, NM("%lld.attn.wkv_a", l), &v->wkv_a));
    TS__RETURN_IF_ERROR(ts__model_w_pack8(m, NM("%lld.attn.wo", l), &v->wo));
    TS__RETURN_IF_ERROR(ts__model_w_pack8(m, NM("%lld.attn.indexer.wq_b", l), &v->iwq_b));
    TS__RETURN_IF_ERROR(ts__model_w_pack8(m, NM("%lld.attn.indexer.wk", l), &v->iwk));
    TS__RETURN_IF_ERROR(ts__model_w_f32(m, NM("%lld.attn.q_norm", l), &v->q_norm));
    TS__RETURN_IF_ERROR(ts__model_w_f32(m, NM("%lld.attn.kv_norm", l), &v->kv_norm));
    TS__RETURN_IF_ERROR(ts__model_w_f32(m, NM("%lld.attn.indexer.k_norm", l), &v->ik_norm));
    TS__RETURN_IF_ERROR(ts__model_w_f32(m, NM("%lld.attn.indexer.k_norm_bias", l), &v->ik_bias));
    TS__RETURN_IF_ERROR(
        ts__model_w_pack_bf16(m, NM("%lld.attn.indexer.weights_proj", l), &v->weights_proj));
    const ts__mtensor *q = NULL, *sf = NULL;
    TS__RETURN_IF_ERROR(ts__model_w_tensor(m, NM("%lld.attn.wkv_b", l), &q));
    TS__RETURN_IF_ERROR(ts__model_w_tensor(m, NM("%lld.attn.wkv_b.scale", l), &sf));
#undef NM
    TS__RETURN_IF_ERROR(pack_wkv_b(q, sf, H, 0, TS__V32_NOPE, true, &v->uk));
    return pack_wkv_b(q, sf, H, TS__V32_NOPE, TS__V32_V, false, &v->uv);
}

void ts__model_v32_free_layer(ts__layer *ly) {
    ts__v32_layer *v = ly->v32;
    if (!v) return;
    ts__lin8 *l8[] = {&v->wq_a, &v->wq_b, &v->wkv_a, &v->wo, &v->iwq_b, &v->iwk};
    for (size_t i = 0; i < sizeof l8 / sizeof l8[0]; i++) ts_packed_weight_destroy(l8[i]->pw);
    ts_packed_weight_destroy(v->weights_proj);
    ts_packed_weight_destroy(v->uk);
    ts_packed_weight_destroy(v->uv);
    free(v);
    ly->v32 = NULL;
}

/* ---- caches */

ts_status ts__model_v32_cache_alloc(ts_model *m) {
    const ts_model_config *c = &m->cfg;
    const int64_t nb = m->max_batch * ts__model_v32_blocks(c);
    /* FlashMLA's and top-k's indices are i32 slots of the whole cache */
    if (nb * TS__V32_PAGE > INT32_MAX)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_model_create: max_batch = %lld x max_seq_len "
                        "= %lld cache slots exceed 2^31 - 1 (attention = v32 indexes them as i32)",
                        (long long)m->max_batch, (long long)c->max_seq_len);
    for (int64_t L = 0; L < c->n_layers; L++) {
        ts__layer_cache *lc = &m->caches[L];
        lc->kv32 = (uint8_t *)calloc((size_t)(nb * TS__V32_PAGE), TS__V32_ROW);
        lc->ik32 = (uint8_t *)calloc((size_t)(nb * TS__V32_PAGE), TS__V32_IROW);
        if (!lc->kv32 || !lc->ik32)
            return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_create: out of memory (caches)");
    }
    for (int64_t b = 0; b < m->max_batch; b++) ts__model_cache_reset(m, b);
    return TS_OK;
}

void ts__model_v32_cache_free(ts_model *m) {
    for (int64_t L = 0; L < TS_MODEL_MAX_LAYERS; L++) {
        free(m->caches[L].kv32);
        free(m->caches[L].ik32);
        m->caches[L].kv32 = m->caches[L].ik32 = NULL;
    }
}

/* Latent row (bf16 [576]) into the 656-byte cache at `slot` (tokens contiguous in a block). */
ts_status ts__model_v32_kv_store(uint8_t *cache, int64_t slot, const uint16_t *row) {
    int64_t shb[4] = {1, 1, 1, TS__V32_DQK}, shq[4] = {1, 1, 1, TS__V32_ROW};
    ts_tensor kv = ts_tensor_make((void *)row, TS_BF16, 4, shb);
    ts_tensor q = ts_tensor_make(cache + slot * TS__V32_ROW, TS_U8, 4, shq);
    return ts_mla_quantize_kv_cache(TS_MLA_KV_V32, &kv, &q);
}

/* Indexer key (e4m3 [128] and its scale) into the fused paged cache at `slot`. */
void ts__model_v32_key_store(uint8_t *cache, int64_t slot, const uint8_t *k8, float ks) {
    uint8_t *blk = cache + (slot / TS__V32_PAGE) * TS__V32_PAGE * TS__V32_IROW;
    const int64_t r = slot % TS__V32_PAGE;
    memcpy(blk + r * 128, k8, 128);
    memcpy(blk + TS__V32_PAGE * 128 + r * 4, &ks, 4);
}

ts_status ts__model_v32_prefill_random(ts_model *m, int64_t seq, int64_t Lc, uint64_t *s) {
    const ts_model_config *c = &m->cfg;
    const int64_t base = seq * ts__model_v32_blocks(c) * TS__V32_PAGE;
    for (int64_t L = 0; L < c->n_layers; L++) {
        ts__layer_cache *lc = &m->caches[L];
        for (int64_t t = 0; t < Lc; t++) {
            uint16_t row[TS__V32_DQK];
            for (int i = 0; i < TS__V32_DQK; i++) row[i] = ts__f32_to_bf16_inl(ts__model_rand_unit(s));
            TS__RETURN_IF_ERROR(ts__model_v32_kv_store(lc->kv32, base + t, row));
            float x[128], ks;
            uint8_t k8[128];
            for (int i = 0; i < 128; i++) x[i] = ts__model_rand_unit(s);
            ts_tensor xt = ts_tensor_2d(x, TS_F32, 1, 128);
            ts_tensor qt = ts_tensor_2d(k8, TS_E4M3, 1, 128);
            ts_tensor st = ts_tensor_2d(&ks, TS_F32, 1, 1);
            TS__RETURN_IF_ERROR(ts_per_token_cast_to_fp8(&xt, true, 128, false, &qt, &st));
            ts__model_v32_key_store(lc->ik32, base + t, k8, ks);
        }
    }
    return TS_OK;
}

/* ---- workspace */

#define WS32_FIELDS(F_)                                                                     \
    F_(q, uint16_t, B * H * TS__V32_QK) F_(qf, uint16_t, B * H * TS__V32_DQK)                \
    F_(kv0, uint16_t, B * TS__V32_DQK) F_(kv, uint16_t, B * TS__V32_DQK)                      \
    F_(t, float, H * B * TS__V32_LAT) F_(masked, int32_t, H) F_(olat, uint16_t, B * H * TS__V32_LAT) F_(lse, float, B * H) \
    F_(ov, uint16_t, B * H * TS__V32_V) F_(qi, uint16_t, B * IH * 128)                        \
    F_(qi8, uint8_t, B * IH * 128) F_(qis, float, B * IH) F_(wi, float, B * IH)               \
    F_(k, uint16_t, B * 128) F_(k8, uint8_t, B * 128) F_(ks, float, B)                        \
    F_(logits, float, B * c->max_seq_len) F_(ctx, int32_t, B) F_(off, int32_t, B) F_(btab, int32_t, B * nb)        \
    F_(sched, int32_t, 4) F_(idx, int32_t, B * K) F_(len, int32_t, B) F_(itopk, int32_t, K)

ts_status ts__model_v32_ws_alloc(ts_model *m) {
    const ts_model_config *c = &m->cfg;
    const int64_t B = m->ws->rows, H = c->n_heads, IH = c->index_n_heads;
    const int64_t nb = ts__model_v32_blocks(c), K = ts__min64(c->index_topk, c->max_seq_len);
    ts__ws32 *w = (ts__ws32 *)calloc(1, sizeof *w);
    if (!w) return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_create: out of memory");
    m->ws->v32 = w;
    w->K = K;
    bool ok = true;
#define ALLOC(name, type, count)                                                           \
    w->name = (type *)ts__aligned_alloc((size_t)(count) * sizeof(type));                   \
    if (w->name) memset(w->name, 0, (size_t)(count) * sizeof(type));                       \
    ok = ok && w->name;
    WS32_FIELDS(ALLOC)
#undef ALLOC
    if (!ok) return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_create: out of memory (workspace)");
    return TS_OK;
}

void ts__model_v32_ws_free(ts__ws *ws) {
    ts__ws32 *w = ws->v32;
    if (!w) return;
#define FREE(name, type, count) ts__aligned_free(w->name);
    WS32_FIELDS(FREE)
#undef FREE
    free(w);
    ws->v32 = NULL;
}
