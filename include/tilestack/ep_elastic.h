/* tilestack ep elastic: DeepEP V2 `deep_ep.ElasticBuffer` (expert-parallel dispatch/combine
 * with no separate layout call, and the expanded per-expert layout) built on the V1 normal
 * mode of ep.h. docs/ep.md ("V2 ElasticBuffer") has the mapping and the differences.
 *
 * Needs <mpi.h> like ep.h (built only with MPI). Every call marked collective must be made by
 * every rank of the communicator in the same order. Bad input on one rank makes that rank
 * return the specific code and the others TS_ERR_PEER naming it; a rank that does not come
 * makes the others return TS_ERR_TIMEOUT naming it (deadline: num_cpu_timeout_secs).
 *
 * Rows are always ordered deterministically here (upstream only with deterministic=True):
 * received tokens by (source rank, source token index); expanded rows grouped by local
 * expert, inside a group by (received row, top-k slot). Results are the same bits whatever the
 * thread count or rank placement (intranode or internode). */
#ifndef TILESTACK_EP_ELASTIC_H
#define TILESTACK_EP_ELASTIC_H

#include "tilestack/ep.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ts_ep_elastic_buffer ts_ep_elastic_buffer;
/* Upstream EPHandle: the routing of one dispatch (plus its expansion). Caller-owned. */
typedef struct ts_ep_elastic_handle ts_ep_elastic_handle;

/* Constructor arguments (upstream keyword arguments). */
typedef struct ts_ep_elastic_options {
    /* > 0: the buffer's bytes (a multiple of 2 MiB, as upstream). 0: sized from the MoE
     * settings below with ts_ep_elastic_get_buffer_size_hint. */
    int64_t num_bytes;
    int64_t num_max_tokens_per_rank; /* also dispatch's default */
    int64_t hidden;
    int32_t num_topk;                /* 0 sizes for top-32, as upstream */
    bool use_fp8_dispatch;
    bool deterministic;              /* accepted: rows are always deterministic here */
    /* Accepted for parity, no effect on CPU (no hybrid RDMA/NVLink mode, one reduction
     * order, no QPs). */
    bool allow_hybrid_mode, allow_multiple_reduction, prefer_overlap_with_compute;
    int32_t num_allocated_qps;
    /* Deadline of every wait, seconds (upstream's CPU timeout, default 300); 0 = env
     * TS_EP_TIMEOUT_S or 100 s as ep.h. */
    double num_cpu_timeout_secs;
    int32_t ranks_per_node;          /* as ts_ep_buffer_options.ranks_per_node */
} ts_ep_elastic_options;

/* Upstream defaults: num_bytes 0, the three allow/prefer flags true, 300 s. */
TS_API ts_ep_elastic_options ts_ep_elastic_default_options(void);

/* Bytes of the buffer for dispatch + combine of up to num_max_tokens_per_rank tokens per rank
 * (the worst case: all of them to one rank); num_topk 0 = 32; with use_fp8_dispatch the scales
 * are hidden/128 f32 per token (upstream's per-128 blocks). Rounded to 2 MiB. */
TS_API ts_status ts_ep_elastic_get_buffer_size_hint(int32_t num_ranks, int64_t num_max_tokens_per_rank,
                                                    int64_t hidden, int32_t num_topk, bool use_fp8_dispatch,
                                                    int64_t *num_bytes);

/* Collective over comm (duplicated inside). opts NULL = defaults (then num_bytes or the MoE
 * settings are missing: TS_ERR_INVALID_ARGUMENT). */
TS_API ts_status ts_ep_elastic_create(MPI_Comm comm, const ts_ep_elastic_options *opts, ts_ep_elastic_buffer **out);
/* Collective; NULL is a no-op. */
TS_API ts_status ts_ep_elastic_destroy(ts_ep_elastic_buffer *buf);
TS_API ts_status ts_ep_elastic_get_rank(const ts_ep_elastic_buffer *buf, int32_t *rank, int32_t *num_ranks);
TS_API ts_status ts_ep_elastic_get_num_bytes(const ts_ep_elastic_buffer *buf, int64_t *num_bytes);
/* (num_rdma_ranks, num_nvlink_ranks): here (nodes, ranks per node). */
TS_API ts_status ts_ep_elastic_get_physical_domain_size(const ts_ep_elastic_buffer *buf, int32_t *num_rdma_ranks,
                                                        int32_t *num_nvlink_ranks);
/* (num_scaleout_ranks, num_scaleup_ranks): the same split (there is no hybrid remapping). */
TS_API ts_status ts_ep_elastic_get_logical_domain_size(const ts_ep_elastic_buffer *buf, int32_t *num_scaleout_ranks,
                                                       int32_t *num_scaleup_ranks);
/* Threads a dispatch / combine should use (upstream's SM estimate): the copies are bound by
 * memory bandwidth, which a handful of cores saturates, so min(pool size, 4 x ranks per node)
 * rounded to even, at least 1; num_experts / num_topk are validated (E >= 1, 1 <= K <= E). */
TS_API ts_status ts_ep_elastic_get_theoretical_num_sms(const ts_ep_elastic_buffer *buf, int64_t num_experts,
                                                       int32_t num_topk, int32_t *num_sms);
/* Upstream's QP estimate: MPI has no queue pairs, so this is num_sms (>= 1). */
TS_API ts_status ts_ep_elastic_get_theoretical_num_qps(const ts_ep_elastic_buffer *buf, int32_t num_sms,
                                                       int32_t *num_qps);
/* Collective: every rank arrives, then all leave (deadline as every wait). */
TS_API ts_status ts_ep_elastic_barrier(ts_ep_elastic_buffer *buf);

typedef struct ts_ep_elastic_dispatch_args {
    const ts_tensor *x;  /* bf16 or e4m3 [N, hidden] (ep.h's rules); N <= num_max_tokens_per_rank */
    const ts_tensor *sf; /* with e4m3 (required): [N, S], passed through byte for byte */
    const ts_tensor *topk_idx;     /* i64/i32 [N, K], -1 = none; required unless handle (then NULL) */
    const ts_tensor *topk_weights; /* f32 [N, K] or NULL; with a handle it re-sends weights */
    ts_tensor *cumulative_local_expert_recv_stats; /* contiguous i32 [E/R] or NULL: += (token, slot)s received */
    int64_t num_experts;             /* 0 = the handle's */
    int64_t num_max_tokens_per_rank; /* 0 = the handle's or the buffer's; the same on every rank */
    int64_t expert_alignment;        /* >= 1 (0 is an error here; upstream's None = 1); with a handle 0 = its */
    int32_t num_sms;                 /* threads; 0 = the pool */
    int32_t num_qps;                 /* accepted, unused */
    const ts_ep_elastic_handle *handle; /* cached dispatch: replay its routing */
    bool do_cpu_sync;     /* accepted (counts are always exact on CPU); true with a handle is an error, as upstream */
    bool do_expand;       /* the expanded layout (below) */
    bool do_zero_padding; /* expanded only: alignment padding rows of recv_x / recv_sf are zeroed */
    bool use_tma_aligned_col_major_sf; /* must be false (TS_ERR_UNSUPPORTED) */
} ts_ep_elastic_dispatch_args;

/* Outputs: views into buffer memory, valid until the next dispatch on buf.
 * Not expanded (rows = num_recv_tokens, ordered by (source rank, source token)):
 *   recv_x [rows, hidden], recv_sf [rows, S], recv_topk_idx [rows, K] (local expert ids, -1
 *   elsewhere), recv_topk_weights f32 [rows, K] (0 where the id is -1) -- exactly V1's.
 * Expanded (rows = num_expanded_tokens): local expert e's rows are
 *   [align(psum[e-1]), psum[e]) with psum of the handle (upstream's convention), one per
 *   (received token, top-k slot k) that selected e, ordered by (received row, k); then the
 *   padding up to expert_alignment. recv_x / recv_sf [rows, ...]; recv_topk_weights f32 [rows]
 *   (the slot's weight, 0 in padding); recv_topk_idx stays per received token
 *   [num_recv_tokens, K] (local ids) as upstream, whose expand sort leaves it unpermuted.
 *   Padding rows of recv_x / recv_sf are zero with do_zero_padding, else unspecified.
 * Tensors not produced have data NULL (topk ones in cached dispatch without topk_weights:
 * recv_topk_idx always then; recv_topk_weights without weights). */
typedef struct ts_ep_elastic_dispatch_result {
    ts_tensor recv_x, recv_sf, recv_topk_idx, recv_topk_weights;
    int64_t num_recv_tokens, num_expanded_tokens; /* num_expanded_tokens = num_recv_tokens unexpanded */
} ts_ep_elastic_dispatch_result;

/* Collective. *handle_out receives a new handle (required unless args->handle). */
TS_API ts_status ts_ep_elastic_dispatch(ts_ep_elastic_buffer *buf, const ts_ep_elastic_dispatch_args *args,
                                        ts_ep_elastic_dispatch_result *result, ts_ep_elastic_handle **handle_out);

/* Collective. x: bf16 [rows, hidden] in the dispatch's row order (rows >= num_recv_tokens, or
 * >= num_expanded_tokens when expanded; may be recv_x itself). topk_weights: NULL, or f32
 * [num_recv_tokens, K] (not expanded) / [num_expanded_tokens] (expanded). bias0, bias1: bf16
 * [N, hidden] or NULL. combined_x: bf16 [N, hidden]; combined_topk_weights: f32 [N, K],
 * required iff topk_weights.
 * Not expanded: ts_ep_combine exactly (unweighted sum over ranks, ascending, f32, one RNE).
 * Expanded: first, on each receiving rank and for each received token i,
 *   y_i = bf16_rne(acc), acc = 0.0f, then for k = 0..K-1 with an expanded row s for slot k:
 *   acc = fmaf(x[s], w_s, acc) (one rounding: ts_ep_low_latency_combine's arithmetic),
 *   w_s = topk_weights[s] (1 without topk_weights);
 * then ts_ep_combine of y (its per-token weights are topk_weights[s] at slot k, 0 elsewhere). */
TS_API ts_status ts_ep_elastic_combine(ts_ep_elastic_buffer *buf, const ts_ep_elastic_handle *handle,
                                       const ts_tensor *x, const ts_tensor *topk_weights, const ts_tensor *bias0,
                                       const ts_tensor *bias1, int32_t num_sms, ts_tensor *combined_x,
                                       ts_tensor *combined_topk_weights);

/* The handle's fields (upstream EPHandle), arrays owned by the handle. */
typedef struct ts_ep_elastic_handle_info {
    bool do_expand;
    int64_t num_experts, expert_alignment, num_max_tokens_per_rank;
    int32_t num_sms;
    int64_t num_tokens, num_topk, num_recv_tokens, num_expanded_tokens;
    const int64_t *topk_idx;                              /* [num_tokens, K] copy of dispatch's, i64 */
    const int32_t *psum_num_recv_tokens_per_scaleup_rank; /* [R] inclusive, per source rank */
    /* [E/R]: not expanded, inclusive prefix of the aligned counts; expanded, aligned start of
     * e plus its real count (upstream's convention) */
    const int32_t *psum_num_recv_tokens_per_expert;
    const int32_t *num_recv_tokens_per_expert_list;       /* [E/R] aligned counts */
    const int32_t *num_unaligned_recv_tokens_per_expert;  /* [E/R] real counts */
    /* [num_recv_tokens, 2 + K]: source rank, source token index, then per slot k the
     * expanded row (-1: not local, or not expanded) */
    const int32_t *recv_src_metadata;
} ts_ep_elastic_handle_info;

TS_API ts_status ts_ep_elastic_handle_get_info(const ts_ep_elastic_handle *h, ts_ep_elastic_handle_info *info);
/* Upstream's deterministic epilogue: the order is already deterministic, so this checks h and
 * returns TS_OK. */
TS_API ts_status ts_ep_elastic_handle_deterministic_sort(ts_ep_elastic_handle *h);
TS_API ts_status ts_ep_elastic_handle_destroy(ts_ep_elastic_handle *h);

/* ---- Parts of V2 not built: each returns TS_ERR_UNSUPPORTED naming itself ---- */
TS_API ts_status ts_ep_elastic_engram_write(ts_ep_elastic_buffer *buf, const ts_tensor *storage, const ts_tensor *sf);
TS_API ts_status ts_ep_elastic_engram_fetch(ts_ep_elastic_buffer *buf, const ts_tensor *indices, int32_t num_qps,
                                            ts_tensor *data, ts_tensor *sf);
TS_API ts_status ts_ep_elastic_pp_set_config(ts_ep_elastic_buffer *buf, int64_t num_max_tensor_bytes,
                                             int64_t num_max_inflight_tensors);
TS_API ts_status ts_ep_elastic_pp_send(ts_ep_elastic_buffer *buf, const ts_tensor *t, int32_t dst_rank, int32_t num_sms);
TS_API ts_status ts_ep_elastic_pp_recv(ts_ep_elastic_buffer *buf, ts_tensor *t, int32_t src_rank, int32_t num_sms);
TS_API ts_status ts_ep_elastic_agrs_set_config(ts_ep_elastic_buffer *buf, int64_t num_max_session_bytes,
                                               int64_t num_max_all_gathers_per_session);
TS_API ts_status ts_ep_elastic_create_agrs_session(ts_ep_elastic_buffer *buf);
TS_API ts_status ts_ep_elastic_destroy_agrs_session(ts_ep_elastic_buffer *buf);
TS_API ts_status ts_ep_elastic_all_gather(ts_ep_elastic_buffer *buf, const ts_tensor *t, ts_tensor *gathered);

#ifdef __cplusplus
}
#endif
#endif
