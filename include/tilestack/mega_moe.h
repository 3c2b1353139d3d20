/* tilestack mega_moe: DeepGEMM's Mega MoE (deep_gemm.mega: get_symm_buffer_for_mega_moe,
 * transform_weights_for_mega_moe, fp8_fp4_mega_moe, bf16_mega_moe) for CPU processes over an
 * MPI communicator: EP dispatch, linear-1, SwiGLU, linear-2 and EP combine in one collective
 * call, ranks on one node exchanging through POSIX shared memory. Across machines only the
 * unfused pipeline runs (ts_mega_moe_unfused: the EP buffer's internode path, the same bits);
 * the fused calls refuse there. docs/mega_moe.md has the design, the exact math and the
 * differences from upstream.
 *
 * Like ep.h this header needs <mpi.h> and exists only in builds with MPI
 * (TILESTACK_HAVE_EP); it is not part of the umbrella tilestack.h.
 *
 * Per routed (token t, slot k) with expert e = topk_idx[t][k] >= 0 (rank e / (E/R) owns it):
 *   h    = bf16(x[t] . W1[e]^T)                         gate = h[:I], up = h[I:]  (FP32 accum)
 *   gate = min(gate, clamp), up = min(max(up, -clamp), clamp)     (clamp = +inf: no clamp)
 *   act  = ((gate * (1 / (1 + expf(-gate)))) * up) * topk_weights[t][k]            (FP32)
 *   a    = e4m3_satfinite(act * 2^-s), s = ceil(log2(amax32 * fl(1/448))) per 32 values
 *   y_k  = bf16(a . W2[e]^T)
 * y[t] = bf16(0.0f + y_k0 + y_k1 + ...) summed in FP32 over the valid slots in top-k order
 * (tokens with no valid slot get +0). The GEMMs are tilestack's (docs/gemm.md, canonical
 * order), so the result is bit-identical to ts_mega_moe_unfused, which runs the same math as
 * EP dispatch + grouped GEMM + SwiGLU cast + grouped GEMM + EP combine.
 *
 * Collective calls (buffer create / destroy, ts_*_mega_moe, ts_mega_moe_unfused) must be made by
 * every rank in the same order. Bad input on one rank: that rank returns the specific code, the
 * others TS_ERR_PEER naming it; nothing is written to y or the stats on any rank. Waits have
 * the buffer's deadline (TS_ERR_TIMEOUT naming the rank that did not come; the buffer may then
 * only be destroyed). */
#ifndef TILESTACK_MEGA_MOE_H
#define TILESTACK_MEGA_MOE_H

#include <mpi.h>

#include "tilestack/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ts_mega_moe_buffer ts_mega_moe_buffer;
typedef struct ts_mega_moe_weights ts_mega_moe_weights;

/* Options beyond upstream's arguments; NULL = defaults. */
typedef struct ts_mega_moe_buffer_options {
    double timeout_s; /* deadline of every wait; 0 = env TS_EP_TIMEOUT_S or 100 s */
    /* ranks per node: 0 = the machines' own split (MPI_COMM_TYPE_SHARED; TS_EP_RANKS_PER_NODE,
     * which forces the V1 buffers' internode path, does not apply here); k > 0 forces nodes
     * of k consecutive ranks (as ts_ep_buffer_options.ranks_per_node; for tests on one
     * machine). More than one node: the fused calls return TS_ERR_UNSUPPORTED, the unfused
     * pipeline crosses nodes through MPI. */
    int32_t ranks_per_node;
} ts_mega_moe_buffer_options;

/* Collective (upstream get_symm_buffer_for_mega_moe). mma_type: "fp8xfp4" (NULL) or
 * "bf16xbf16"; activation: "swiglu" (NULL) only. num_experts % R == 0; hidden % 128 == 0 and
 * intermediate_hidden % 128 == 0 (fp8xfp4; bf16xbf16: hidden % 16, intermediate_hidden % 32); num_topk in [1, 64];
 * num_max_tokens_per_rank >= 1 (rounded up to 8, as upstream rounds to its alignment). All
 * ranks must pass the same values (TS_ERR_INVALID_ARGUMENT naming the rank that differs).
 * Shared memory per rank: inputs (T rows) plus, for each of two alternating calls, room for
 * every expert output this rank may return (R * T * K rows of hidden bf16); over several
 * nodes the inputs only (private memory). */
TS_API ts_status ts_get_symm_buffer_for_mega_moe(MPI_Comm comm, int64_t num_experts,
                                                 int64_t num_max_tokens_per_rank, int32_t num_topk,
                                                 int64_t hidden, int64_t intermediate_hidden,
                                                 const char *mma_type, const char *activation,
                                                 const ts_mega_moe_buffer_options *opts,
                                                 ts_mega_moe_buffer **out);
/* Collective; NULL is a no-op. */
TS_API ts_status ts_mega_moe_buffer_destroy(ts_mega_moe_buffer *buf);

/* The buffer's input views on this rank (upstream SymmBuffer.x / x_sf / topk_idx /
 * topk_weights), T = num_max_tokens_per_rank after rounding. Copy a call's inputs into the
 * first num_tokens rows, then call; they may be rewritten only after the call returned.
 *   x            e4m3 [T, hidden] (bf16xbf16: bf16)
 *   x_sf         i32 [T, hidden / 128]: four ue8m0 bytes per word, byte j = 32-block 4w + j
 *                (ts_per_token_cast_to_fp8(.., use_ue8m0, gran_k 32, use_packed_ue8m0));
 *                data NULL for bf16xbf16
 *   topk_idx     i64 [T, num_topk], -1 = masked
 *   topk_weights f32 [T, num_topk] */
typedef struct ts_mega_moe_views {
    ts_tensor x, x_sf, topk_idx, topk_weights;
    int64_t num_max_tokens_per_rank, num_experts, num_local_experts, hidden, intermediate_hidden;
    int32_t num_topk, rank, num_ranks;
    int32_t num_nodes; /* > 1: only ts_mega_moe_unfused runs on this buffer */
} ts_mega_moe_views;
TS_API ts_status ts_mega_moe_get_views(ts_mega_moe_buffer *buf, ts_mega_moe_views *views);

/* Local (upstream transform_weights_for_mega_moe). Weights of this rank's E_l = E / R experts:
 *   l1    [E_l, 2 * I, hidden / 2] e2m1x2 (gate rows first, up rows second), l1_sf the scales
 *         ts_m_grouped_fp8_fp4_gemm_nt_contiguous takes with recipe (1, 1, 32): f32
 *         [E_l, 2I, hidden / 32] (powers of two) or packed ue8m0 (i32 / ue8m0x4, e.g. from
 *         ts_transform_sf_into_required_layout);
 *   l2    [E_l, hidden, I / 2] e2m1x2, l2_sf likewise;
 *   bf16xbf16: l1 bf16 [E_l, 2I, hidden], l2 bf16 [E_l, hidden, I], scales NULL.
 * The result holds both weights pre-packed for the decode path (ts_gemm_prepack_b); the inputs
 * may be freed afterwards. Upstream interleaves gate/up rows for its tensor-core epilogue; the
 * CPU kernels need no interleave, so the packed order is the given one. */
TS_API ts_status ts_transform_weights_for_mega_moe(const ts_tensor *l1, const ts_tensor *l1_sf,
                                                   const ts_tensor *l2, const ts_tensor *l2_sf,
                                                   ts_mega_moe_weights **out);
TS_API void ts_mega_moe_weights_destroy(ts_mega_moe_weights *w);

/* Collective (upstream fp8_fp4_mega_moe). y: bf16 [num_tokens, hidden], num_tokens <= T, the
 * number of rows of the buffer's inputs used this call (may be 0). weights: from
 * ts_transform_weights_for_mega_moe with this buffer's shapes (fp8xfp4). stats: i32 [E_l] or
 * NULL: += (token, slot) pairs this rank's local experts received. recipe: NULL or (1, 1, 32).
 * activation: NULL or "swiglu". activation_clamp: +inf (INFINITY) = none, else > 0.
 * fast_math: accepted; the CPU uses expf and an IEEE divide either way (one set of bits).
 * Every rank must pass the same clamp and fast_math. A buffer over several nodes (views'
 * num_nodes > 1): TS_ERR_UNSUPPORTED on every rank, before anything is exchanged (the fused
 * call reads its peers' regions through shared memory). */
TS_API ts_status ts_fp8_fp4_mega_moe(ts_tensor *y, const ts_mega_moe_weights *weights,
                                     ts_mega_moe_buffer *buf,
                                     ts_tensor *cumulative_local_expert_recv_stats,
                                     const int64_t *recipe, const char *activation,
                                     float activation_clamp, bool fast_math);
/* The same with bf16 weights and activations (buffer and weights of mma "bf16xbf16"): x is
 * bf16, the SwiGLU output is rounded to bf16 (no FP8 cast), the GEMMs are BF16. */
TS_API ts_status ts_bf16_mega_moe(ts_tensor *y, const ts_mega_moe_weights *weights,
                                  ts_mega_moe_buffer *buf,
                                  ts_tensor *cumulative_local_expert_recv_stats,
                                  const char *activation, float activation_clamp, bool fast_math);

/* Collective. The unfused pipeline from tilestack's public parts, on the same buffer inputs
 * and with the same arguments as the fused call of the buffer's mma type: ts_ep_dispatch (FP8
 * rows + packed scales, normal mode), expansion into the psum layout per local expert,
 * ts_m_grouped_*_contiguous_packed (L1), the SwiGLU + FP8 cast step, the L2 GEMM, and
 * ts_ep_combine of rows that hold each slot's output in its own hidden-wide column block
 * (so the cross-rank sum is exact), summed locally in top-k order. Bit-identical to the
 * fused call (tested); the model uses it behind a switch and the bench as the baseline. */
TS_API ts_status ts_mega_moe_unfused(ts_tensor *y, const ts_mega_moe_weights *weights,
                                     ts_mega_moe_buffer *buf,
                                     ts_tensor *cumulative_local_expert_recv_stats,
                                     float activation_clamp, bool fast_math);

#ifdef __cplusplus
}
#endif
#endif
