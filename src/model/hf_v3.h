/* DeepSeek-V3 Hugging Face checkpoints (DeepseekV3ForCausalLM: V3, R1, V3.1; docs/models.md
 * "V3"): the config.json mapping (hf_config_v3.c), the tensor names (hf_names_v3.c), the loader
 * (hf_load_v3.c) and the V3 skeleton's decode step (model_v3.c). The V3 skeleton is not the V4
 * block: a plain residual, dense SwiGLU layers first, sigmoid + bias routing limited to groups,
 * MLA over a bf16 latent cache with YaRN RoPE. A V3 model is a ts_model whose `v3` is set; the
 * public ts_model_* calls dispatch on it. Not installed. */
#ifndef TILESTACK_HF_V3_H
#define TILESTACK_HF_V3_H

#include "model_internal.h"

#include "core/text_escape.h"

#include <jansson.h>

/* What config.json says (docs/models.md "V3 config keys"). */
typedef struct ts__v3_config {
    int64_t vocab, dim, n_layers, n_heads;
    int64_t q_lora;                  /* 0: q_lora_rank null (q_proj) */
    int64_t kv_lora, nope, rope, v_head;
    int64_t inter, moe_inter, n_experts, topk, n_shared, n_group, topk_group, first_dense;
    double route_scale, eps, rope_theta;
    bool norm_topk, tied, interleave;
    bool yarn;                       /* rope_scaling yarn (else plain RoPE) */
    double factor, mscale, mscale_all_dim;
    int64_t orig_max, beta_fast, beta_slow;
    double attn_factor;              /* cos / sin multiplier (transformers' attention_factor) */
    double softmax_scale;            /* qk_head_dim^-0.5 x mscale(factor, mscale_all_dim)^2 */
    int64_t max_pos, max_seq;        /* max_position_embeddings; caches: min(it, TS__HF_MAX_SEQ) */
    bool quantized;                  /* quantization_config present */
    /* DeepseekV32ForCausalLM (deepseek_v32): V3 + the lightning indexer */
    bool v32;
    int64_t index_heads, index_dim, index_topk;
} ts__v3_config;

/* config.json text -> cfg. Messages start with `path` and name the key: an unknown
 * architecture / model type / key / RoPE type / scoring or quantisation is TS_ERR_UNSUPPORTED,
 * a bad type or an out-of-range value TS_ERR_INVALID_ARGUMENT. */
ts_status ts__v3_parse_config(const char *text, size_t len, const char *path, ts__v3_config *cfg);
/* True when config.json names DeepseekV3ForCausalLM / deepseek_v3 or DeepseekV32ForCausalLM /
 * deepseek_v32 (the loader's dispatch). */
bool ts__v3_is_v3_config(const char *text, size_t len);
/* fnv1a64 over every field of cfg (the EP ranks' agreement on the config). */
uint64_t ts__v3_config_hash(const ts__v3_config *cfg);

/* One tensor of a V3 checkpoint (hf_names_v3.c), in the checkpoint's order. */
typedef enum ts__v3_role {
    V3_EMBED, V3_HEAD, V3_NORM, V3_ATTN_NORM, V3_FFN_NORM, V3_Q_A, V3_Q_A_NORM, V3_Q_B, V3_Q,
    V3_KV_A, V3_KV_A_NORM, V3_KV_B, V3_O, V3_GATE, V3_GATE_BIAS, V3_W1, V3_W3, V3_W2,
    V3_E_W1, V3_E_W3, V3_E_W2, V3_S_W1, V3_S_W3, V3_S_W2,
    /* V3.2's indexer: wq_b [IH * ID, q_lora], wk [ID, D], k_norm weight / bias [ID] (a
     * LayerNorm), weights_proj [IH, D] */
    V3_IX_WQ_B, V3_IX_WK, V3_IX_K_NORM, V3_IX_K_BIAS, V3_IX_W
} ts__v3_role;

typedef struct ts__v3_tensor {
    char name[96];
    ts__v3_role role;
    int64_t layer, expert; /* -1 when global / not an expert */
    int32_t ndim;
    int64_t shape[2];
} ts__v3_tensor;

/* The roles that an FP8 checkpoint stores as e4m3 + `<name>_scale_inv` (f32, per 128x128):
 * every linear layer but the embedding, the head and the router. */
bool ts__v3_fp8_role(ts__v3_role r);
/* The tensors cfg implies (malloc'ed list). */
ts_status ts__v3_tensors(const ts__v3_config *cfg, ts__v3_tensor **out, int64_t *count);
/* A checkpoint tensor tilestack does not load on purpose (the MTP layer, layers >= n_layers
 * named by num_nextn_predict_layers). */
bool ts__v3_ignored(const ts__v3_config *cfg, const char *name);

/* How ts_model_load_dir holds one tensor (hf_hold_v3.c): the single rule that binding
 * (model_v3.c), the loader's page release (hf_load_v3.c) and ts_model_plan_dir all follow. */
typedef enum ts__v3_how {
    V3_HOW_VIEW,      /* read in place from the mapping: a BF16 embedding */
    V3_HOW_BF16,      /* rounded once into a bf16 copy: an F32 embedding */
    V3_HOW_F32,       /* widened (e4m3: dequantised) into the f32 buffer: norms, router, V3.2's indexer */
    V3_HOW_PACK,      /* packed for the bf16 GEMMs (F32 rounded, e4m3 dequantised first) */
    V3_HOW_PACK_HEADS /* kv_b_proj: per head W_UK^T and W_UV packs */
} ts__v3_how;

typedef struct ts__v3_hold {
    ts__v3_how how;
    bool head;        /* the tied embedding: also packed as the head */
    /* bytes, as ts_model_plan_rank counts them: mapped = the file bytes (an FP8 weight's with
     * its scales) the model reads through the mapping; released = the part of mapped given
     * back once packed (hf_load_v3.c); converted = its f32 / bf16 copy; packed = its packs */
    size_t mapped, converted, packed, released;
} ts__v3_hold;

/* t as stored with dtype dt (TS_BF16, TS_F32 or TS_E4M3: the loader checked). */
ts__v3_hold ts__v3_hold_of(const ts__v3_config *c, const ts__v3_tensor *t, ts_dtype dt);
/* The f32 bytes of t's weight_scale_inv (one per 128x128). */
size_t ts__v3_scale_bytes(const ts__v3_tensor *t);

/* ---- the model (model_v3.c) */
typedef struct ts__v3_layer {
    const float *attn_norm, *ffn_norm, *q_a_norm, *kv_a_norm; /* f32 */
    ts_packed_weight *q_a, *q_b, *q, *kv_a, *o;               /* bf16 [N, K] */
    ts_packed_weight **uk; /* [H]: W_UK^T [kv_lora, nope] (q_nope -> latent) */
    ts_packed_weight **uv; /* [H]: W_UV [v_head, kv_lora] (latent -> v) */
    ts_packed_weight *w1, *w3, *w2;          /* dense layer */
    const float *gate; const float *gate_bias; /* f32 [E, D], [E] */
    ts_packed_weight **ew1, **ew3, **ew2;    /* [E] routed experts */
    ts_packed_weight *sw1, *sw3, *sw2;       /* shared experts */
    uint16_t *cache;                         /* bf16 [max_batch * blocks][64][kv_lora + rope] */
    /* V3.2's indexer (f32, as transformers' f32 forward computes it; docs/model.md §9) */
    const float *ix_wq_b, *ix_wk, *ix_k_norm, *ix_k_bias, *ix_w;
    float *ix_cache;                         /* f32 [max_batch][max_seq][index_dim] keys */
} ts__v3_layer;

typedef struct ts__v3 {
    ts__v3_config c;
    ts__v3_layer *layers;
    const uint16_t *embed;     /* bf16 [vocab, D] */
    const float *norm;
    ts_packed_weight *head;
    int64_t blocks;            /* 64-token cache blocks per sequence */
    float *f32_bufs;           /* converted norms / gate weights (one buffer) */
    size_t f32_bytes;
    struct ts__v3_ws *ws;
    struct ts__hf_dir *ckpt;   /* mapped checkpoint (bf16 weights are views) */
    size_t mapped, converted, packed;
    size_t ws_bytes;           /* the workspace's arrays (ts__v3_ws_bytes) */
} ts__v3;

/* A V3 model over the loaded tensors: data[i] holds tensors[i]'s values in dtypes[i] (TS_BF16,
 * TS_F32, or TS_E4M3 with scales[i] f32 [ceil(rows/128), ceil(cols/128)]; every value valid:
 * the loader checked). Linear weights are packed for the bf16 GEMMs (F32 rounded to bf16;
 * e4m3 dequantised, code x scale in f32, then rounded to bf16), norms / gate / bias kept in
 * f32; the embedding is used in place when BF16. A routed expert's tensor with NULL data is
 * another rank's (not bound). Allocates caches and the workspace. On
 * failure *out is NULL. */
ts_status ts__v3_model_create(const ts__v3_config *c, const ts__v3_tensor *tensors, int64_t nt,
                              const void *const *data, const ts_dtype *dtypes,
                              const float *const *scales, int64_t max_batch, ts_model **out);
void ts__v3_free(ts_model *m);
/* What ts__v3_model_create allocates, from the config alone (ts_model_plan_dir counts the
 * same): per layer the bf16 latent cache and V3.2's f32 indexer keys (0 for V3) for B
 * sequences of c->max_seq tokens; the workspace for B rows. */
void ts__v3_layer_cache_bytes(const ts__v3_config *c, int64_t B, size_t *kv, size_t *ix);
size_t ts__v3_ws_bytes(const ts__v3_config *c, int64_t B);
ts_status ts__v3_decode(ts_model *m, int64_t n, const int64_t *seqs, const int32_t *tokens,
                        float *logits);
/* Prefill of sequence seq (arguments checked by ts_model_prefill): the tokens as rows of one
 * pass per chunk of ws rows, bit for bit their decode steps; all_logits: [n][vocab], else the
 * last token's (logits may be NULL). */
ts_status ts__v3_prefill(ts_model *m, int64_t seq, int64_t n_tokens, const int32_t *tokens,
                         float *logits, bool all_logits);
void ts__v3_reset(ts_model *m, int64_t seq);
/* One prefill chunk: tokens [c0, c0 + k) of the n of sequence seq (k <= ts__v3_chunk_rows). */
ts_status ts__v3_prefill_chunk(ts_model *m, int64_t seq, int64_t c0, int64_t k, int64_t n,
                               const int32_t *tokens, float *logits, bool all_logits);
int64_t ts__v3_chunk_rows(const ts_model *m);
/* Routed expert e of layer L on r bf16 rows x [r][dim] (its SwiGLU, in chunks the workspace
 * holds): out [r][dim] bf16, which may be x itself. */
ts_status ts__v3_run_expert(ts_model *m, int64_t L, int64_t e, const uint16_t *x, int64_t r,
                            uint16_t *out);
/* The last routing (the rows of the MoE layer now running): top-k ids [n][topk], weights. */
void ts__v3_routing(const ts_model *m, const int32_t **sel, const float **selw);
/* Random cache contents for sequence seq's first context_len positions (ts_model_prefill_random). */
ts_status ts__v3_prefill_random(ts_model *m, int64_t seq, int64_t context_len, uint64_t *state);


/* hf_load_v3.c: ts_model_load_dir (keep: ts_model_load_dir_keep, the packed sources' pages
 * stay) for a V3 directory (the dispatch in hf_load_v4.c). */
ts_status ts__v3_load_dir(const char *dir, int64_t max_batch, bool keep, ts_model **out);
/* The same holding only routed experts [lo, hi) (an EP rank's share; the others' data are not
 * read: NULL in ts__v3_model_create's data); who prefixes the load's line on stderr. */
ts_status ts__v3_load_dir_experts(const char *dir, int64_t max_batch, bool keep, int64_t lo,
                                  int64_t hi, const char *who, ts_model **out);
/* ts_model_plan_dir's pass over a V3 directory: opened and checked as ts_model_load_dir does
 * (config.json, index, headers, pass 1; no tensor data read), then fn for every tensor with
 * how the load holds it. cfg: the loader's config (max_seq as it would size the caches). */
typedef ts_status (*ts__v3_plan_fn)(void *ctx, const ts__v3_config *c, const ts__v3_tensor *t,
                                    const ts__v3_hold *h);
ts_status ts__v3_plan(const char *dir, ts__v3_plan_fn fn, void *ctx, ts__v3_config *cfg);
/* dir/config.json names deepseek_v3 (false when it cannot be read: the V4 loader then says
 * why, as for any directory). */
bool ts__v3_dir_is_v3(const char *dir);

/* JSON helpers of hf_config_v4.c, shared (messages "<path>: <key> = <value>: why"). */
ts_status ts__hf_json_int(const char *path, const char *key, const json_t *v, int64_t lo,
                          int64_t hi, int64_t *out);
ts_status ts__hf_json_num(const char *path, const char *key, const json_t *v, double lo,
                          double hi, bool open_lo, double *out);
ts_status ts__hf_json_str(const char *path, const char *key, const json_t *v, const char **out);
const char *ts__hf_json_show(const json_t *v, char buf[TS__ESC_CAP]);
/* config.json text parsed (duplicate keys refused); not an object: TS_ERR_INVALID_ARGUMENT. */
ts_status ts__hf_json_object(const char *text, size_t len, const char *path, json_t **out);

#endif
