/* DeepGEMM's MQA logits (the DeepSeek V3.2 "lightning indexer") on CPU.
 *
 * logit[i, j] = kv_scale[j] * sum_h w[i, h] * relu(sum_d q[i, h, d] * kv[j, d])
 *
 * for every key j in the query's range; the exact f32 operation order (the same on every ISA
 * path and thread count) is written down in docs/mqa_logits.md. Outputs are caller-allocated
 * views (upstream returns padded views; ts_*_row_stride give upstream's padded row stride).
 *
 * Operand modes (the "q pair" and "kv pair" of upstream):
 *   FP8       q e4m3 [.., H, D], q_sf NULL; kv e4m3 with one f32 scale per token.
 *   FP8 + MX  q e4m3 with q_sf int32 [.., H] (four UE8M0 block-32 scales along D, byte j =
 *             block j); kv e4m3 with int32 UE8M0 scales per token (block 32 along D).
 *   FP4       q e2m1x2 [.., H, D/2] with q_sf as above; kv e2m1x2 with int32 UE8M0 scales.
 * q_sf / kv_sf int32 tensors may be typed TS_I32 or TS_UE8M0X4.
 * Weights f32 (or bf16, which requires bf16 logits, as upstream). Logits f32 or bf16.
 * H >= 1 and D in {32, 64, 128} (FP4 / MX: D in {64, 128}; D = 32 with one scale).
 *
 * A non-OK status leaves every output untouched. */
#ifndef TILESTACK_MQA_LOGITS_H
#define TILESTACK_MQA_LOGITS_H
#include "tilestack/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* deep_gemm.fp8_fp4_mqa_logits (prefill, non-paged).
 *   q        [S, H, D] e4m3 or [S, H, D/2] e2m1x2, contiguous; q_sf NULL or [S, H] int32.
 *   kv       [S_kv, D] e4m3 or [S_kv, D/2] e2m1x2, contiguous; kv_sf [S_kv] f32 (no q_sf) or
 *            int32 (with q_sf), contiguous.
 *   weights  [S, H] f32/bf16, stride(1) == 1.
 *   cu_seq_len_k_start / _end  [S] int32 contiguous: ks[i] <= j < ke[i] (ks >= ke: empty),
 *            0 <= ks, ke <= S_kv.
 *   max_seqlen_k == 0: logits [S, S_kv]; with clean_logits every column outside [ks, ke) is
 *            -inf, otherwise it is left untouched.
 *   max_seqlen_k > 0 ("compressed"): logits [S, max_seqlen_k], column t is key ks[i] + t; needs
 *            ke[i] - ks[i] <= max_seqlen_k. Upstream forbids clean_logits here; on CPU it sets
 *            columns t >= ke[i] - ks[i] to -inf.
 *   logits   f32 or bf16, stride(1) == 1, any row stride >= the row length. */
TS_API ts_status ts_fp8_fp4_mqa_logits(const ts_tensor *q, const ts_tensor *q_sf,
                                       const ts_tensor *kv, const ts_tensor *kv_sf,
                                       const ts_tensor *weights,
                                       const ts_tensor *cu_seq_len_k_start,
                                       const ts_tensor *cu_seq_len_k_end, bool clean_logits,
                                       int32_t max_seqlen_k, ts_tensor *logits);

/* deep_gemm.fp8_mqa_logits (legacy): FP8 q without scale, f32 kv scales, f32 logits. */
TS_API ts_status ts_fp8_mqa_logits(const ts_tensor *q, const ts_tensor *kv,
                                   const ts_tensor *kv_sf, const ts_tensor *weights,
                                   const ts_tensor *cu_seq_len_k_start,
                                   const ts_tensor *cu_seq_len_k_end, bool clean_logits,
                                   int32_t max_seqlen_k, ts_tensor *logits);

/* Upstream's padded logits row stride (elements) for fp8_fp4_mqa_logits: with
 * max_seqlen_k == 0, align(S_kv + 256, 1024 B / elem); otherwise
 * align(align(max_seqlen_k, 256), 1024 B / elem). logits_dtype TS_F32 or TS_BF16. */
TS_API ts_status ts_mqa_logits_row_stride(int64_t seq_len_kv, int32_t max_seqlen_k,
                                          ts_dtype logits_dtype, int64_t *row_stride);

/* deep_gemm.get_paged_mqa_logits_metadata: schedule_meta [num_sms + 1, 2] int32, filled.
 * context_lens [B, next_n] int32 contiguous (2-D only, as upstream). Entry w = (request,
 * split) where worker w starts, splitting the sum over requests of
 * ceil(max_t context_lens[b, t] / 256) 256-token splits evenly; entry num_sms = (B, 0).
 * block_kv > 0 (upstream: 32, 64 or 128) is validated only: the splits are 256 tokens as
 * upstream's SPLIT_KV. The CPU kernel schedules itself; it only checks the metadata. */
TS_API ts_status ts_get_paged_mqa_logits_metadata(const ts_tensor *context_lens,
                                                  int32_t block_kv, int32_t num_sms,
                                                  ts_tensor *schedule_meta);

/* deep_gemm.fp8_fp4_paged_mqa_logits (decode).
 *   q        [B, next_n, H, D] e4m3 or [B, next_n, H, D/2] e2m1x2, contiguous; q_sf NULL or
 *            [B, next_n, H] int32.
 *   kv_cache fused u8 [num_blocks, block_kv, 1, D + 4] (FP4: D/2 + 4), stride(1) == D + 4
 *            (resp. D/2 + 4), stride(3) == 1, stride(0) >= block_kv * (D(/2) + 4) and a
 *            multiple of 4. Per block: block_kv token vectors, then block_kv 4-byte scales
 *            (f32 without q_sf, int32 UE8M0 with q_sf).
 *   weights  [B * next_n, H] f32/bf16, stride(1) == 1.
 *   context_lens [B, next_n] int32 contiguous, 0 <= len <= max_context_len.
 *   block_table [B, max_blocks] int32, stride(1) == 1; token p of request b is row p % block_kv
 *            of block block_table[b, p / block_kv]; entries needed by a context must lie in
 *            [0, num_blocks), the others are never read.
 *   schedule_meta from ts_get_paged_mqa_logits_metadata for these context_lens (checked).
 *   logits   [B * next_n, max_context_len] f32/bf16, stride(1) == 1: row b * next_n + t holds
 *            columns p < context_lens[b, t]. Upstream forbids clean_logits; on CPU it sets
 *            columns >= context_lens[b, t] to -inf (otherwise they are left untouched). */
TS_API ts_status ts_fp8_fp4_paged_mqa_logits(const ts_tensor *q, const ts_tensor *q_sf,
                                             const ts_tensor *kv_cache,
                                             const ts_tensor *weights,
                                             const ts_tensor *context_lens,
                                             const ts_tensor *block_table,
                                             const ts_tensor *schedule_meta,
                                             int32_t max_context_len, bool clean_logits,
                                             ts_tensor *logits);

/* deep_gemm.fp8_paged_mqa_logits (legacy): FP8 q without scale, f32 logits. */
TS_API ts_status ts_fp8_paged_mqa_logits(const ts_tensor *q, const ts_tensor *kv_cache,
                                         const ts_tensor *weights,
                                         const ts_tensor *context_lens,
                                         const ts_tensor *block_table,
                                         const ts_tensor *schedule_meta,
                                         int32_t max_context_len, bool clean_logits,
                                         ts_tensor *logits);

/* Upstream's padded row stride of the paged logits: align(align(max_context_len, 256),
 * 1024 B / elem). */
TS_API ts_status ts_paged_mqa_logits_row_stride(int32_t max_context_len, ts_dtype logits_dtype,
                                                int64_t *row_stride);

#ifdef __cplusplus
}
#endif
#endif
