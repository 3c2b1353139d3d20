/* The tensors of a DeepseekV3ForCausalLM checkpoint (docs/models.md "V3 tensor names"): one
 * row per role, the HF name DeepSeek's release uses (transformers reads the same names, merging
 * the experts into gate_up_proj itself) and the shape config.json implies. */
#include "hf_v3.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct list {
    ts__v3_tensor *t;
    int64_t n, cap;
} list;

static void add(list *l, ts__v3_role role, int64_t layer, int64_t expert, int64_t rows,
                int64_t cols, const char *fmt, ...) {
    if (l->n == l->cap) return; /* sized exactly below */
    ts__v3_tensor *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->role = role, t->layer = layer, t->expert = expert;
    t->ndim = cols ? 2 : 1;
    t->shape[0] = rows, t->shape[1] = cols;
}

ts_status ts__v3_tensors(const ts__v3_config *c, ts__v3_tensor **out, int64_t *count) {
    const int64_t D = c->dim, H = c->n_heads, QK = c->nope + c->rope;
    const int64_t moe_layers = c->n_layers - c->first_dense;
    const int64_t cap = 3 + c->n_layers * (12 + (c->v32 ? 5 : 0)) + moe_layers * (5 + 3 * c->n_experts);
    list l = {calloc((size_t)cap, sizeof(ts__v3_tensor)), 0, cap};
    if (!l.t) return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_load_dir: %lld tensors", (long long)cap);
    add(&l, V3_EMBED, -1, -1, c->vocab, D, "model.embed_tokens.weight");
    for (int64_t L = 0; L < c->n_layers; L++) {
        const long long i = (long long)L;
        add(&l, V3_ATTN_NORM, L, -1, D, 0, "model.layers.%lld.input_layernorm.weight", i);
        add(&l, V3_FFN_NORM, L, -1, D, 0, "model.layers.%lld.post_attention_layernorm.weight", i);
        if (c->q_lora) {
            add(&l, V3_Q_A, L, -1, c->q_lora, D, "model.layers.%lld.self_attn.q_a_proj.weight", i);
            add(&l, V3_Q_A_NORM, L, -1, c->q_lora, 0, "model.layers.%lld.self_attn.q_a_layernorm.weight", i);
            add(&l, V3_Q_B, L, -1, H * QK, c->q_lora, "model.layers.%lld.self_attn.q_b_proj.weight", i);
        } else {
            add(&l, V3_Q, L, -1, H * QK, D, "model.layers.%lld.self_attn.q_proj.weight", i);
        }
        add(&l, V3_KV_A, L, -1, c->kv_lora + c->rope, D,
            "model.layers.%lld.self_attn.kv_a_proj_with_mqa.weight", i);
        add(&l, V3_KV_A_NORM, L, -1, c->kv_lora, 0, "model.layers.%lld.self_attn.kv_a_layernorm.weight", i);
        add(&l, V3_KV_B, L, -1, H * (c->nope + c->v_head), c->kv_lora,
            "model.layers.%lld.self_attn.kv_b_proj.weight", i);
        add(&l, V3_O, L, -1, D, H * c->v_head, "model.layers.%lld.self_attn.o_proj.weight", i);
        if (c->v32) {
            /* V3.2's lightning indexer (DeepSeek-V3.2's release names = transformers') */
            const int64_t IH = c->index_heads, ID = c->index_dim;
            add(&l, V3_IX_WQ_B, L, -1, IH * ID, c->q_lora, "model.layers.%lld.self_attn.indexer.wq_b.weight", i);
            add(&l, V3_IX_WK, L, -1, ID, D, "model.layers.%lld.self_attn.indexer.wk.weight", i);
            add(&l, V3_IX_K_NORM, L, -1, ID, 0, "model.layers.%lld.self_attn.indexer.k_norm.weight", i);
            add(&l, V3_IX_K_BIAS, L, -1, ID, 0, "model.layers.%lld.self_attn.indexer.k_norm.bias", i);
            add(&l, V3_IX_W, L, -1, IH, D, "model.layers.%lld.self_attn.indexer.weights_proj.weight", i);
        }
        if (L < c->first_dense) {
            add(&l, V3_W1, L, -1, c->inter, D, "model.layers.%lld.mlp.gate_proj.weight", i);
            add(&l, V3_W3, L, -1, c->inter, D, "model.layers.%lld.mlp.up_proj.weight", i);
            add(&l, V3_W2, L, -1, D, c->inter, "model.layers.%lld.mlp.down_proj.weight", i);
            continue;
        }
        add(&l, V3_GATE, L, -1, c->n_experts, D, "model.layers.%lld.mlp.gate.weight", i);
        add(&l, V3_GATE_BIAS, L, -1, c->n_experts, 0, "model.layers.%lld.mlp.gate.e_score_correction_bias", i);
        for (int64_t e = 0; e < c->n_experts; e++) {
            add(&l, V3_E_W1, L, e, c->moe_inter, D, "model.layers.%lld.mlp.experts.%lld.gate_proj.weight", i, (long long)e);
            add(&l, V3_E_W3, L, e, c->moe_inter, D, "model.layers.%lld.mlp.experts.%lld.up_proj.weight", i, (long long)e);
            add(&l, V3_E_W2, L, e, D, c->moe_inter, "model.layers.%lld.mlp.experts.%lld.down_proj.weight", i, (long long)e);
        }
        if (c->n_shared) {
            const int64_t SI = c->moe_inter * c->n_shared;
            add(&l, V3_S_W1, L, -1, SI, D, "model.layers.%lld.mlp.shared_experts.gate_proj.weight", i);
            add(&l, V3_S_W3, L, -1, SI, D, "model.layers.%lld.mlp.shared_experts.up_proj.weight", i);
            add(&l, V3_S_W2, L, -1, D, SI, "model.layers.%lld.mlp.shared_experts.down_proj.weight", i);
        }
    }
    add(&l, V3_NORM, -1, -1, D, 0, "model.norm.weight");
    if (!c->tied) add(&l, V3_HEAD, -1, -1, c->vocab, D, "lm_head.weight");
    *out = l.t;
    *count = l.n;
    return TS_OK;
}

bool ts__v3_fp8_role(ts__v3_role r) {
    return r != V3_EMBED && r != V3_HEAD && r != V3_GATE && r != V3_GATE_BIAS && r != V3_NORM &&
           r != V3_ATTN_NORM && r != V3_FFN_NORM && r != V3_Q_A_NORM && r != V3_KV_A_NORM &&
           r != V3_IX_K_NORM && r != V3_IX_K_BIAS && r != V3_IX_W; /* V3.2: weights_proj FP32 / BF16 */
}

bool ts__v3_ignored(const ts__v3_config *c, const char *name) {
    /* the MTP layers follow the model's: model.layers.<n_layers + k>.* */
    long long L = -1;
    int pos = 0;
    return sscanf(name, "model.layers.%lld.%n", &L, &pos) == 1 && pos > 0 && L >= c->n_layers;
}
