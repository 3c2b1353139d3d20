/* How ts_model_load_dir holds each tensor of a V3 / V3.2 checkpoint (docs/models.md "V3",
 * "Memory per rank"). One rule, read by the binding (model_v3.c bind: which buffer a tensor
 * goes to), the loader (hf_load_v3.c: which file pages it gives back after binding) and the
 * plan (ts_model_plan_dir: the bytes, from the headers alone), so that the plan cannot drift
 * from what a load does. */
#include "hf_v3.h"

size_t ts__v3_scale_bytes(const ts__v3_tensor *t) {
    const int64_t k = t->ndim == 2 ? t->shape[1] : 1;
    return (size_t)(ts__ceil_div(t->shape[0], 128) * ts__ceil_div(k, 128)) * sizeof(float);
}

static bool is_f32_role(ts__v3_role r) {
    /* V3.2's indexer runs in f32 (transformers' f32 forward: its top-k choice is what the
     * conformance depends on most) */
    return r == V3_NORM || r == V3_ATTN_NORM || r == V3_FFN_NORM || r == V3_Q_A_NORM ||
           r == V3_KV_A_NORM || r == V3_GATE || r == V3_GATE_BIAS || r == V3_IX_WQ_B || r == V3_IX_WK ||
           r == V3_IX_K_NORM || r == V3_IX_K_BIAS || r == V3_IX_W;
}

static size_t bf16_pack(int64_t n, int64_t k) { return ts__gemm_packed_nbytes(TS_BF16, false, 0, 1, n, k); }

ts__v3_hold ts__v3_hold_of(const ts__v3_config *c, const ts__v3_tensor *t, ts_dtype dt) {
    ts__v3_hold h = {0};
    const int64_t r = t->shape[0], k = t->ndim == 2 ? t->shape[1] : 1;
    const size_t n = (size_t)(r * k);
    const size_t file = n * ts_dtype_size(dt) + (dt == TS_E4M3 ? ts__v3_scale_bytes(t) : 0);
    if (t->role == V3_EMBED) {
        /* the gather reads bf16 rows: a BF16 file is used in place, an F32 one rounded once */
        h.how = dt == TS_BF16 ? V3_HOW_VIEW : V3_HOW_BF16;
        if (h.how == V3_HOW_VIEW) h.mapped = file;
        else h.converted = n * 2;
        h.head = c->tied; /* the tied head packs the embedding for the bf16 GEMM */
        if (h.head) h.packed = bf16_pack(r, k);
        return h;
    }
    if (is_f32_role(t->role)) {
        h.how = V3_HOW_F32; /* the source pages go back once widened (hf_load_v3.c) */
        h.converted = n * sizeof(float);
        return h;
    }
    /* a linear layer: the file's bytes (and an FP8 one's scales) are read by the packer only,
     * then given back */
    h.mapped = h.released = file;
    if (t->role == V3_KV_B) {
        /* per head: W_UK as the [K, N] = [nope, kv_lora] of q_nope -> latent, W_UV [v, kv_lora] */
        h.how = V3_HOW_PACK_HEADS;
        h.packed = (size_t)c->n_heads * (bf16_pack(c->kv_lora, c->nope) + bf16_pack(c->v_head, c->kv_lora));
        return h;
    }
    h.how = V3_HOW_PACK;
    h.packed = bf16_pack(r, k);
    return h;
}
