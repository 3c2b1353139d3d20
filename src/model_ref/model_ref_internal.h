/* The float64 reference's state, shared by its weight generator and its forward. Plain C,
 * one thread, no tilestack kernels: only the public quantisers and scalar conversions touch
 * the numbers (docs/model.md, "Reference implementations and golden file"). */
#ifndef TILESTACK_MODEL_REF_INTERNAL_H
#define TILESTACK_MODEL_REF_INTERNAL_H

#include "model_ref/model_ref.h"

/* Dequantised weight matrix [rows, cols] (1-D: rows = 1), values exactly as docs/model.md §2
 * makes them (code x scale), in float64. */
typedef struct ts__ref_mat {
    int64_t rows, cols;
    double *v;
} ts__ref_mat;

/* A compressor's running state (docs/model.md §4 step 3): current block's slots and, with
 * overlap, the previous block's. width d, coff = 2 with overlap. */
typedef struct ts__ref_compressor {
    int64_t d, r, coff;
    int overlap, have_prev;
    double *k, *g;           /* [r, coff * d] current block */
    double *prev_k, *prev_g; /* [r, coff * d] previous block (overlap only) */
} ts__ref_compressor;

typedef struct ts__ref_layer {
    int32_t ratio;
    ts__ref_mat hc_attn_fn, hc_attn_base, hc_attn_scale, hc_ffn_fn, hc_ffn_base, hc_ffn_scale;
    ts__ref_mat attn_norm, ffn_norm;
    ts__ref_mat wq_a, q_norm, wq_b, wkv, kv_norm, attn_sink, wo_a, wo_b;
    ts__ref_mat c_wkv, c_wgate, c_ape, c_norm;                /* ratio > 0 */
    ts__ref_mat i_wq_b, i_weights_proj, ic_wkv, ic_wgate, ic_ape, ic_norm; /* ratio == 4 */
    ts__ref_mat gate_w, gate_bias;                            /* bias: non-hash layers */
    int32_t *tid2eid;                                         /* hash layers: [vocab, topk] */
    ts__ref_mat *w1, *w3, *w2;                                /* [E] */
    ts__ref_mat s_w1, s_w3, s_w2;
    /* attention = v32 (§8; wq_a, q_norm, wq_b, kv_norm, i_wq_b, i_weights_proj as above) */
    ts__ref_mat wkv_a, wkv_b, wo, i_wk, i_k_norm, i_k_norm_bias;
    double *kv32;  /* [max_seq_len, 576] latent rows through the 656-byte cache */
    double *ikeys; /* [max_seq_len, 128] indexer keys through their FP8 cast */
    /* caches (dequantised rows) */
    double *window;       /* [window_size, 512] */
    double *comp;         /* [max_seq_len / ratio, 512] */
    double *index_keys;   /* [max_seq_len / 4, 128] */
    ts__ref_compressor comp_state, index_state;
    double freqs[32];
} ts__ref_layer;

struct ts_model_reference {
    ts_model_config cfg;
    int64_t pos;
    ts__ref_mat embed, norm, hc_head_fn, hc_head_base, hc_head_scale, head;
    ts__ref_layer *layers;
    ts__model_checksum *sums;
    int64_t n_sums, cap_sums;
};

/* Generates every tensor of docs/model.md §2 into r (r->cfg set, r->layers allocated and
 * zeroed); records the checksums. */
ts_status ts__ref_generate_weights(ts_model_reference *r);
void ts__ref_free_weights(ts_model_reference *r);

/* The forward's rounding points and helpers, for the v32 attention (model_ref_v32.c). */
double ts__ref_bf16r(double x);
ts_status ts__ref_lin8(const ts__ref_mat *W, int64_t row0, int64_t n, const double *x,
                       double *y);
void ts__ref_rmsnorm(double *y, int64_t n, const ts__ref_mat *w, double eps);
void ts__ref_matvec(const ts__ref_mat *W, int64_t row0, int64_t n, const double *x, double *y);
void ts__ref_rope(double *x, double pos, const double *freqs, int inverse);
void ts__ref_hadamard128(double *x);
ts_status ts__ref_fp8_act(const double *x, int64_t n, int64_t gran, double *out);
/* §8 attention of layer L for the bf16 row a (r->pos is the token's position); f: [dim]. */
ts_status ts__ref_attention_v32(ts_model_reference *r, int64_t L, const double *a, double *f);

/* The FP4 cast docs/model.md names without a rounding variant (expert weights, indexer q / k):
 * DeepGEMM's per_token_cast_to_fp4 rule, in one place for both uses. */
#define TS__REF_FP4_ROUNDING TS_FP4_ROUND_DEEPGEMM

#endif
