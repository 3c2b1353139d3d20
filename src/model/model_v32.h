/* attention = v32 (docs/model.md §8): the layer weights in kernel layouts and the step's
 * scratch, shared by model_v32_setup.c (binding, caches, workspace) and
 * model_attention_v32.c (the step). */
#ifndef TILESTACK_MODEL_V32_H
#define TILESTACK_MODEL_V32_H

#include "model_internal.h"

#define TS__V32_NOPE 128 /* qk_nope_head_dim */
#define TS__V32_ROPE 64  /* qk_rope_head_dim */
#define TS__V32_QK 192   /* nope + rope: one head of wq_b, and the softmax scale's width */
#define TS__V32_V 128    /* v_head_dim */
#define TS__V32_LAT 512  /* kv_lora_rank */
#define TS__V32_DQK 576  /* latent + rope: the FlashMLA head dim of the 656-byte cache */
#define TS__V32_ROW 656  /* bytes per token (ts_mla_kv_token_bytes(TS_MLA_KV_V32)) */
#define TS__V32_IROW 132 /* indexer key bytes per token: 128 e4m3 + one f32 scale */

typedef struct ts__v32_layer {
    int64_t H;
    ts__lin8 wq_a, wq_b, wkv_a, wo, iwq_b, iwk;
    const float *q_norm, *kv_norm, *ik_norm, *ik_bias;
    ts_packed_weight *weights_proj; /* bf16 [index_heads, dim] */
    ts_packed_weight *uk;           /* bf16 [H, 512, 128]: W_UK_hᵀ (dequantised wkv_b rows) */
    ts_packed_weight *uv;           /* bf16 [H, 128, 512]: W_UV_h */
} ts__v32_layer;

typedef struct ts__ws32 {
    int64_t K;          /* index slots: min(index_topk, max_seq_len) */
    uint16_t *q;        /* [B][H*192] wq_b output */
    uint16_t *qf;       /* [B][H*576] FlashMLA query: absorbed nope (512) + rotated rope (64) */
    uint16_t *kv0, *kv; /* [B][576] */
    float *t;           /* [H][B][512] f32 GEMM output before its bf16 rounding */
    int32_t *masked;    /* [H]: rows per head of the grouped GEMMs (= n) */
    uint16_t *olat;     /* [B][H*512] FlashMLA output (latent) */
    float *lse;         /* [B][H] */
    uint16_t *ov;       /* [B][H*128] after W_UV */
    uint16_t *qi;       /* [B][IH*128] indexer q (bf16 after RoPE / Hadamard) */
    uint8_t *qi8;       /* [B][IH*128] e4m3 */
    float *qis;         /* [B][IH] q scales */
    float *wi;          /* [B][IH] head weights (q scale folded in) */
    uint16_t *k;        /* [B][128] indexer key */
    uint8_t *k8;        /* [B][128] */
    float *ks;          /* [B] */
    float *logits;      /* [B][max_seq_len] */
    int32_t *ctx, *off; /* [B]: indexer context p + 1; the sequence's first cache slot */
    int32_t *btab;      /* [B][blocks] */
    int32_t *sched;     /* [2][2] */
    int32_t *idx, *len; /* [B][K], [B] */
    int32_t *itopk;     /* [K] */
} ts__ws32;

/* Latent row (bf16 [576]) into the 656-byte cache at global token slot `slot`. */
ts_status ts__model_v32_kv_store(uint8_t *cache, int64_t slot, const uint16_t *row);
/* Indexer key (e4m3 [128], f32 scale) into the fused paged key cache at `slot`. */
void ts__model_v32_key_store(uint8_t *cache, int64_t slot, const uint8_t *k8, float ks);

/* Rotate-half RoPE (the V3.2 indexer's, non-interleaved) on x[0..63]: pairs (i, i + 32). */
void ts__model_rope_half(const float *cos_row, const float *sin_row, double *x);

#endif
