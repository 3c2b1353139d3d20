/* FlashMLA on CPU: MLA decode (dense bf16 KV, sparse FP8 KV), sparse prefill and the FP8 KV
 * cache helpers, with upstream's names after `ts_` (flash_mla HEAD semantics: natural-log lse,
 * +inf lse and zero output for rows with no valid token, attention sink folded into out only).
 *
 * MQA mode only: one latent row per token holds K (all d_qk dims) and V (its first 512 dims).
 * Results are deterministic and batch-invariant: a (request, query token, head) row depends
 * only on its own inputs, never on the batch, the thread count or the ISA path. See
 * docs/flash_mla.md for the split plan, the tile order and the accuracy contract. */
#ifndef TILESTACK_FLASH_MLA_H
#define TILESTACK_FLASH_MLA_H

#include "tilestack/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------- FP8 KV cache (sparse decode) ---------------- */

/* V32: d_qk = 576, 656 bytes per token: 512 e4m3, 4 f32 scales (one per 128 dims), 64 bf16
 *      RoPE dims; tokens contiguous inside a block.
 * MODEL1: d_qk = 512, 584 bytes per token, block-interleaved: P tokens x (448 e4m3 + 64 bf16)
 *      then P x (7 ue8m0 scales, one per 64 dims, + 1 pad byte). */
typedef enum ts_mla_kv_layout {
    TS_MLA_KV_V32 = 0,
    TS_MLA_KV_MODEL1 = 1,
} ts_mla_kv_layout;

/* 656 (V32), 584 (MODEL1); 0 for an unknown layout. */
TS_API int64_t ts_mla_kv_token_bytes(ts_mla_kv_layout layout);
/* d_qk of the layout: 576 (V32), 512 (MODEL1); 0 for an unknown layout. */
TS_API int64_t ts_mla_kv_head_dim(ts_mla_kv_layout layout);

/* FP8 cache views: [num_blocks, page_block_size, 1, token_bytes], dtype U8 / I8 / E4M3,
 * strides[1] == token_bytes and strides[3] == 1 (tokens of a block contiguous, as upstream);
 * the block stride is free but at least page_block_size * token_bytes.
 *
 * Quantise a bf16 cache [num_blocks, P, 1, d_qk] (last dim contiguous, other strides free) with
 * upstream's test rule: per token and tile (128 dims V32, 64 MODEL1) scale = 2^ceil(log2(
 * max(amax/448, 1e-4))), e4m3 = RNE(x / scale), RoPE dims copied. Pad bytes are written 0. */
TS_API ts_status ts_mla_quantize_kv_cache(ts_mla_kv_layout layout, const ts_tensor *kv,
                                          ts_tensor *kv_fp8);
/* Dequantise to bf16 [num_blocks, P, 1, d_qk]: V32 bf16(f32(e4m3) * scale), MODEL1
 * bf16(e4m3) * bf16(2^(e-127)) rounded to bf16, RoPE copied (upstream tests/quant.py). */
TS_API ts_status ts_mla_dequantize_kv_cache(ts_mla_kv_layout layout, const ts_tensor *kv_fp8,
                                            ts_tensor *kv);

/* abs_indices2indices_in_kvcache: abs [b, s_q, topk] i32 logical token positions (-1 =
 * invalid, kept) -> block_table[i][abs / P] * P + abs % P. An index < -1 or whose block is past
 * the block table's width is TS_ERR_INVALID_ARGUMENT (out untouched). out may alias abs. */
TS_API ts_status ts_mla_abs_indices_to_kvcache(const ts_tensor *abs_indices,
                                               const ts_tensor *block_table,
                                               int64_t page_block_size, ts_tensor *out);

/* ---------------- scheduling handle ---------------- */

/* flash_mla.get_mla_metadata() at HEAD: an empty handle filled by the first
 * ts_flash_mla_with_kvcache call with the call's config (b, s_q, h_q, h_kv, d_qk, page sizes,
 * causal, fp8, topk, extra_topk) and the values of cache_seqlens / topk_length /
 * extra_topk_length, plus the per-request split plan and its workspace. A later call with any
 * other config or values returns TS_ERR_INVALID_ARGUMENT. Use one handle per decode step,
 * shared by all layers (as upstream); the workspace lives in the handle, so two calls must not
 * use the same handle at the same time. */
typedef struct ts_mla_metadata ts_mla_metadata;
TS_API ts_status ts_get_mla_metadata(ts_mla_metadata **out);
TS_API void ts_mla_metadata_free(ts_mla_metadata *meta); /* NULL is a no-op */

/* ---------------- decode ---------------- */

/* flash_mla_with_kvcache. NULL tensor pointers mean "None".
 * Dense (indices == NULL): q bf16 [b, s_q, h_q, d_qk] (d_qk 576 or 512), k_cache bf16
 *   [num_blocks, P, h_kv, d_qk], block_table i32 [b, max_blocks], cache_seqlens i32 [b]
 *   (>= 0), h_q % h_kv == 0, any P >= 1; causal masks bottom-right (query token s sees
 *   tokens j <= seqlen - s_q + s); no sink / extra cache / topk_length.
 * Sparse (indices != NULL): is_fp8_kvcache, !causal, k_cache FP8 as above (d_qk 576 -> V32,
 *   512 -> MODEL1), indices i32 [b, s_q, topk] (-1 invalid; any other value outside
 *   [0, num_blocks * P) is TS_ERR_INVALID_ARGUMENT), optional attn_sink f32 [h_q],
 *   topk_length i32 [b], extra_k_cache (same layout, own page size) with
 *   extra_indices_in_kvcache [b, s_q, extra_topk] and extra_topk_length [b]: one softmax over
 *   both token sets. Any h_q >= 1 and topk >= 1 (CPU relaxation of upstream's {64,128} and %64).
 * head_dim_v must be 512. softmax_scale <= 0 or NaN means d_qk^-0.5.
 * Outputs: out bf16 [b, s_q, h_q, 512] and lse f32 [b, h_q, s_q] (natural log), any strides
 *   with a contiguous last dim for out. */
typedef struct ts_flash_mla_kvcache_args {
    const ts_tensor *q;
    const ts_tensor *k_cache;
    const ts_tensor *block_table;
    const ts_tensor *cache_seqlens;
    int64_t head_dim_v;
    ts_mla_metadata *tile_scheduler_metadata;
    float softmax_scale;
    bool causal;
    bool is_fp8_kvcache;
    const ts_tensor *indices;
    const ts_tensor *attn_sink;
    const ts_tensor *extra_k_cache;
    const ts_tensor *extra_indices_in_kvcache;
    const ts_tensor *topk_length;
    const ts_tensor *extra_topk_length;
} ts_flash_mla_kvcache_args;

TS_API ts_status ts_flash_mla_with_kvcache(const ts_flash_mla_kvcache_args *args,
                                           ts_tensor *out, ts_tensor *lse);

/* ---------------- sparse prefill ---------------- */

/* flash_mla_sparse_fwd: q bf16 [s_q, h_q, d_qk], kv bf16 [s_kv, 1, d_qk], indices i32
 * [s_q, 1, topk] (token index into kv; invalid = < 0 or >= s_kv), d_v = 512, optional
 * attn_sink f32 [h_q] and topk_length i32 [s_q] in [0, topk] (only the first topk_length[i]
 * slots count). Last dims contiguous, other strides free; sm_scale finite and > 0. Outputs: out bf16 [s_q, h_q, 512], max_logits and lse f32
 * [s_q, h_q] (natural units; -inf / +inf and out = 0 for a row with no valid token). */
TS_API ts_status ts_flash_mla_sparse_fwd(const ts_tensor *q, const ts_tensor *kv,
                                         const ts_tensor *indices, float sm_scale, int64_t d_v,
                                         const ts_tensor *attn_sink,
                                         const ts_tensor *topk_length, ts_tensor *out,
                                         ts_tensor *max_logits, ts_tensor *lse);

#ifdef __cplusplus
}
#endif
#endif
