/* tilestack ep: DeepEP (deepseek-ai/DeepEP, V1 `deep_ep.Buffer`) expert-parallel dispatch and
 * combine for CPU processes, over an MPI communicator. Ranks on one node exchange through
 * POSIX shared memory; every token row is written once, straight into its final place in the
 * receiver's buffer. Ranks on different nodes exchange MPI messages: a token crosses once per
 * destination node and fans out there over shared memory. docs/ep.md has the design and the differences from upstream.
 *
 * This header needs <mpi.h> and exists in the library only when tilestack was built with MPI
 * (CMake found MPI C; the CMake package then defines TILESTACK_HAVE_EP). It is not part of the
 * umbrella header tilestack.h, so programs without MPI never see it.
 *
 * Expert placement as upstream: with E experts and R ranks, rank r owns experts
 * [r*E/R, (r+1)*E/R); E % R == 0. topk ids are i64 (or i32), -1 = no selection.
 *
 * Collective calls (create, destroy, dispatch, combine, the reference ops) must be made by
 * every rank of the communicator in the same order. Bad input on one rank makes that rank
 * return the specific code while the others return TS_ERR_PEER naming it; nothing is written
 * to any output or peer. Waits have a deadline (options.timeout_s): a rank that does not come
 * makes the others return TS_ERR_TIMEOUT naming it; after a timeout the buffer may only be
 * destroyed. */
#ifndef TILESTACK_EP_H
#define TILESTACK_EP_H

#include <mpi.h>

#include "tilestack/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ts_ep_buffer ts_ep_buffer;
/* Routing of one dispatch (upstream's `handle`): replayed by cached dispatch and combine. */
typedef struct ts_ep_handle ts_ep_handle;

/* Upstream Config. Threads take the place of SMs: num_sms is the number of threads a call
 * may use (0 = the tilestack pool size). The chunk fields are kept for API parity; the
 * fixed-buffer design has no rings, so they are validated (>= 1) and otherwise unused. */
typedef struct ts_ep_config {
    int32_t num_sms;
    int32_t num_max_nvl_chunked_send_tokens;
    int32_t num_max_nvl_chunked_recv_tokens;
    int32_t num_max_rdma_chunked_send_tokens;
    int32_t num_max_rdma_chunked_recv_tokens;
} ts_ep_config;

/* Defaults for any rank count >= 1 (upstream asserts outside its tuned table). */
TS_API ts_status ts_ep_get_dispatch_config(int32_t num_ranks, ts_ep_config *out);
TS_API ts_status ts_ep_get_combine_config(int32_t num_ranks, ts_ep_config *out);

/* Options of ts_ep_buffer_create beyond upstream's positional arguments; NULL = defaults. */
typedef struct ts_ep_buffer_options {
    int32_t num_qps_per_rank; /* accepted for parity; unused (default 24) */
    double timeout_s;         /* deadline of every wait; 0 = env TS_EP_TIMEOUT_S or 100 s */
    /* Ranks per node: consecutive runs of this many ranks share memory, other ranks are
     * reached through MPI (the internode path). 0 = env TS_EP_RANKS_PER_NODE, else the
     * machines' own split (MPI_COMM_TYPE_SHARED). Must divide the rank count; each node must
     * lie on one machine. 1 forces every rank onto the internode path (tests, bench). */
    int32_t ranks_per_node;
} ts_ep_buffer_options;

TS_API ts_ep_buffer_options ts_ep_default_buffer_options(void);

/* Bytes of the per-rank shared segment (num_nvl_bytes) that normal dispatch + combine need
 * when every rank may send up to num_max_tokens_per_rank tokens to this one (the worst
 * case), as V2's get_buffer_size_hint: rows of hidden e4m3 (use_fp8_dispatch) or bf16 plus
 * num_scales 4-byte scales, num_topk ids and weights; rounded up to 2 MiB. */
TS_API ts_status ts_ep_get_buffer_size_hint(int32_t num_ranks, int64_t num_max_tokens_per_rank,
                                            int64_t hidden, int32_t num_topk,
                                            int64_t num_scales, bool use_fp8_dispatch,
                                            int64_t *num_nvl_bytes);

/* Collective over comm (duplicated inside). num_nvl_bytes: this rank's shared segment, a
 * multiple of 128; half holds dispatch outputs, half combine inputs. num_rdma_bytes (a
 * multiple of 128): with low_latency_mode the low-latency area (num_nvl_bytes may then be 0);
 * in normal mode the private staging of the messages between nodes (unused with one node;
 * 0 = num_nvl_bytes; see ts_ep_get_internode_buffer_size_hint). Nodes: opts->ranks_per_node.
 * Low-latency calls across nodes travel as MPI messages (docs/ep.md). Segments (shared inside a node only)
 * are created owner-only (0600) and unlinked as soon as every peer has mapped them, so
 * nothing stays in /dev/shm even if a rank is killed later. */
TS_API ts_status ts_ep_buffer_create(MPI_Comm comm, int64_t num_nvl_bytes, int64_t num_rdma_bytes,
                                     bool low_latency_mode, const ts_ep_buffer_options *opts,
                                     ts_ep_buffer **out);
/* Collective; NULL is a no-op. */
TS_API ts_status ts_ep_buffer_destroy(ts_ep_buffer *buf);
TS_API ts_status ts_ep_buffer_get_rank(const ts_ep_buffer *buf, int32_t *rank, int32_t *num_ranks);
/* Ranks per node of the buffer (the length of num_tokens_per_rdma_rank is num_ranks / this). */
TS_API ts_status ts_ep_buffer_get_ranks_per_node(const ts_ep_buffer *buf, int32_t *ranks_per_node);
/* Seconds every later wait may take before TS_ERR_TIMEOUT (> 0). Local. */
TS_API ts_status ts_ep_buffer_set_timeout(ts_ep_buffer *buf, double timeout_s);

/* Local (no communication), exact upstream semantics:
 * topk_idx                 i64 or i32 [N, K], last dim contiguous, values in [-1, num_experts)
 * num_tokens_per_rank      i32 [R]: distinct tokens going to each rank
 * num_tokens_per_rdma_rank i32 [R / ranks_per_node] or NULL (upstream returns None intranode)
 * num_tokens_per_expert    i32 [num_experts]: selections per expert (-1 ignored, duplicates
 *                          counted)
 * is_token_in_rank         bool [N, R], contiguous */
TS_API ts_status ts_ep_get_dispatch_layout(ts_ep_buffer *buf, const ts_tensor *topk_idx,
                                           int64_t num_experts, ts_tensor *num_tokens_per_rank,
                                           ts_tensor *num_tokens_per_rdma_rank,
                                           ts_tensor *num_tokens_per_expert,
                                           ts_tensor *is_token_in_rank);

/* Inputs of ts_ep_dispatch (upstream keyword arguments). Pointers not needed may be NULL. */
typedef struct ts_ep_dispatch_args {
    const ts_tensor *x;        /* bf16 or e4m3 [N, hidden], last dim contiguous; hidden bytes % 16 == 0 */
    const ts_tensor *x_scales; /* with e4m3 (required): [N, S] of any dtype and strides, passed through */
    const ts_tensor *topk_idx;     /* i64/i32 [N, K]; with topk_weights, both or neither */
    const ts_tensor *topk_weights; /* f32 [N, K] */
    /* From ts_ep_get_dispatch_layout; required unless handle is given. */
    const ts_tensor *num_tokens_per_rank;      /* i32 [R] */
    const ts_tensor *num_tokens_per_rdma_rank; /* optional; checked against is_token_in_rank */
    const ts_tensor *num_tokens_per_expert;    /* i32 [E] */
    const ts_tensor *is_token_in_rank;         /* bool [N, R] */
    int64_t expert_alignment;  /* >= 1; 0 counts as 1 */
    int64_t num_worst_tokens;  /* > 0: outputs have exactly this many rows; needs topk */
    const ts_ep_config *config; /* NULL = ts_ep_get_dispatch_config(R) */
    const ts_ep_handle *handle; /* cached dispatch: replay this routing (topk must be NULL) */
} ts_ep_dispatch_args;

/* Outputs: views into the buffer, valid until the next dispatch on it. Rows are ordered by
 * (source rank, source token index), a documented guarantee here.
 *   recv_x                [rows, hidden] dtype of x
 *   recv_x_scales         [rows, S] contiguous, dtype of x_scales (data NULL for bf16)
 *   recv_topk_idx         [rows, K] dtype of topk_idx: local expert id, -1 elsewhere (and in
 *                         padding rows of num_worst_tokens); data NULL without topk
 *   recv_topk_weights     [rows, K] f32: weight where the id is kept, 0 elsewhere
 *   recv_src_idx          [rows] i32: token index on its source rank
 *   num_recv_tokens_per_expert [E/R] i32, each rounded up to expert_alignment; shape [0]
 *                         with num_worst_tokens or cached dispatch (upstream returns
 *                         an empty list / None)
 * rows = num_recv_tokens, or num_worst_tokens when it is > 0. */
typedef struct ts_ep_dispatch_result {
    ts_tensor recv_x;
    ts_tensor recv_x_scales;
    ts_tensor recv_topk_idx;
    ts_tensor recv_topk_weights;
    ts_tensor recv_src_idx;
    ts_tensor num_recv_tokens_per_expert;
    int64_t num_recv_tokens;
} ts_ep_dispatch_result;

/* Collective. handle_out (may be NULL) receives a new handle (free with
 * ts_ep_handle_destroy) unless args->handle is given. */
TS_API ts_status ts_ep_dispatch(ts_ep_buffer *buf, const ts_ep_dispatch_args *args,
                                ts_ep_dispatch_result *result, ts_ep_handle **handle_out);

/* Collective. x: bf16 [num_recv_tokens (or more rows), hidden] in the dispatch's row order
 * (may be the recv_x view itself). topk_weights: f32 [num_recv_tokens, K] or NULL. bias0,
 * bias1: bf16 [N, hidden] or NULL. combined_x: bf16 [N, hidden] (caller-owned).
 * combined_topk_weights: f32 [N, K], required iff topk_weights.
 * combined_x[t] = bf16(f32 sum: 0 + bias0 + bias1 + copies of t from ranks in ascending
 * order) -- unweighted, as upstream; combined_topk_weights[t] sums the copies' weights in
 * the same order. Tokens sent nowhere get just the biases. */
TS_API ts_status ts_ep_combine(ts_ep_buffer *buf, const ts_ep_handle *handle, const ts_tensor *x,
                               const ts_tensor *topk_weights, const ts_tensor *bias0,
                               const ts_tensor *bias1, const ts_ep_config *config,
                               ts_tensor *combined_x, ts_tensor *combined_topk_weights);

/* Zero-copy combine input (like upstream's get_local_buffer_tensor / LL zero_copy): a bf16
 * [num_recv_tokens, hidden] view into this rank's combine area. Writing the expert outputs
 * there and passing this view as ts_ep_combine's x skips the staging copy. Valid until the
 * next combine on buf. Local. */
TS_API ts_status ts_ep_get_combine_buffer(ts_ep_buffer *buf, const ts_ep_handle *handle, int64_t hidden,
                                          ts_tensor *x);

/* ---- Async normal mode (upstream async_finish / previous_event) ----
 * ts_ep_dispatch_start / ts_ep_combine_start queue the call on a worker thread owned by the
 * buffer and return at once (TS_OK = queued; argument errors of the call itself come from the
 * wait). The caller may compute meanwhile; the call's outputs (result, *handle_out, combined_*)
 * are written by the worker and may be read only after ts_ep_event_wait, which returns the
 * call's status and message. The arguments are copied (tensor descriptors and config), their
 * data must stay valid and unchanged until the wait. One async call per buffer at a time: any
 * other call on the buffer before the wait returns TS_ERR_INVALID_ARGUMENT. Every rank still
 * makes the same collective calls in the same order (start counts as the call). Results are
 * those of ts_ep_dispatch / ts_ep_combine, bit for bit. With ranks on several nodes the worker
 * calls MPI: that needs MPI_THREAD_SERIALIZED (MPI_Init_thread) and no MPI call by the caller
 * until the wait; at a lower thread level the call runs inside start. */
typedef struct ts_ep_event ts_ep_event;
TS_API ts_status ts_ep_dispatch_start(ts_ep_buffer *buf, const ts_ep_dispatch_args *args,
                                      ts_ep_dispatch_result *result, ts_ep_handle **handle_out,
                                      ts_ep_event **event);
TS_API ts_status ts_ep_combine_start(ts_ep_buffer *buf, const ts_ep_handle *handle, const ts_tensor *x,
                                     const ts_tensor *topk_weights, const ts_tensor *bias0,
                                     const ts_tensor *bias1, const ts_ep_config *config,
                                     ts_tensor *combined_x, ts_tensor *combined_topk_weights,
                                     ts_ep_event **event);
/* Waits for the call and returns its status; the event is then spent (owned by the buffer). */
TS_API ts_status ts_ep_event_wait(ts_ep_event *event);

/* Bytes of num_rdma_bytes a normal-mode buffer whose ranks sit on several nodes needs (the
 * staging of the messages between nodes, sends and receives), when every rank may send up to
 * num_max_tokens_per_rank tokens to every node (the worst case): the larger of dispatch
 * (hidden e4m3 or bf16 bytes, num_scales 4-byte scales, num_topk ids and weights per token
 * and node) and combine (bf16 rows and weights per copy); rounded up to 2 MiB. 0 with one
 * node. num_rdma_bytes = 0 at create gives the staging num_nvl_bytes. */
TS_API ts_status ts_ep_get_internode_buffer_size_hint(int32_t num_ranks, int32_t ranks_per_node,
                                                      int64_t num_max_tokens_per_rank, int64_t hidden,
                                                      int32_t num_topk, int64_t num_scales,
                                                      bool use_fp8_dispatch, int64_t *num_rdma_bytes);

TS_API ts_status ts_ep_handle_destroy(ts_ep_handle *h);
/* Rows received (num_recv_tokens) and the source-rank blocks: rows of source s are
 * [offsets[s], offsets[s+1]) with offsets [R+1] (upstream: rank_prefix_matrix column). */
TS_API ts_status ts_ep_handle_get_num_recv_tokens(const ts_ep_handle *h, int64_t *num_recv_tokens);
TS_API ts_status ts_ep_handle_get_recv_rank_offsets(const ts_ep_handle *h, int64_t *offsets,
                                                    int64_t num_offsets);

/* ---- The MPI_Alltoallv reference (the test oracle and the bench baseline) ----
 * Same outputs and order as ts_ep_dispatch (no num_worst_tokens, no cache: pass the same
 * topk again), computed from topk_idx alone with MPI_Alltoall + MPI_Alltoallv over comm. The
 * result owns malloc'd arrays; free with ts_ep_reference_free. */
typedef struct ts_ep_reference_result {
    ts_ep_dispatch_result out; /* views into the owned arrays below */
    void *owned[8];
    /* routing kept for ts_ep_reference_combine */
    int32_t num_ranks, num_topk;
    int64_t num_tokens, hidden, num_recv;
    int32_t *send_counts, *recv_counts; /* [R] rows */
    int32_t *send_token;                /* [sum send_counts]: my token per send row, by dest */
} ts_ep_reference_result;

TS_API ts_status ts_ep_reference_dispatch(MPI_Comm comm, const ts_tensor *x, const ts_tensor *x_scales,
                                          const ts_tensor *topk_idx, const ts_tensor *topk_weights,
                                          int64_t num_experts, int64_t expert_alignment,
                                          ts_ep_reference_result *res);
TS_API ts_status ts_ep_reference_combine(MPI_Comm comm, const ts_ep_reference_result *routing,
                                         const ts_tensor *x, const ts_tensor *topk_weights,
                                         const ts_tensor *bias0, const ts_tensor *bias1,
                                         ts_tensor *combined_x, ts_tensor *combined_topk_weights);
TS_API ts_status ts_ep_reference_free(ts_ep_reference_result *res);


/* ---- Low-latency mode (upstream low_latency_dispatch / low_latency_combine) ----
 * Needs a buffer created with low_latency_mode = true and num_rdma_bytes >= the hint below
 * (num_nvl_bytes may then be 0; normal mode uses only num_nvl_bytes). Every LL call
 * (dispatch or combine) uses one of two halves of the LL area, alternating per call as
 * upstream's double buffering; as upstream, at most two LL calls may be in flight: every rank
 * must finish call c (its hook, if any) before any rank starts call c + 2. There is no
 * barrier inside LL calls: a sender writes its rows straight into the receivers' halves and
 * raises a per-source signal; the receive phase waits for the signals (deadline as every
 * wait; a silent rank gives TS_ERR_TIMEOUT naming it). docs/ep.md has the protocol. */

/* Bytes of num_rdma_bytes that LL calls with these limits need (both halves, top-k up to 32);
 * rounded to 2 MiB. Like upstream's get_low_latency_rdma_size_hint it is dominated by
 * experts x tokens x hidden (the combine rows); the dispatch part is num_ranks x tokens rows. */
TS_API ts_status ts_ep_get_low_latency_rdma_size_hint(int64_t num_max_dispatch_tokens_per_rank, int64_t hidden,
                                                      int32_t num_ranks, int64_t num_experts,
                                                      int64_t *num_rdma_bytes);

/* Collective: waits for every rank (normal-mode barrier), zeroes this rank's LL signals of
 * both halves, waits again. Arguments are checked as upstream's (hidden, experts) but the
 * layout does not depend on them. */
TS_API ts_status ts_ep_clean_low_latency_buffer(ts_ep_buffer *buf, int64_t num_max_dispatch_tokens_per_rank,
                                                int64_t hidden, int64_t num_experts);

/* Routing of one LL dispatch, held by the receiving rank (upstream's handle tuple). */
typedef struct ts_ep_ll_handle ts_ep_ll_handle;
/* Receive phase of a call made with return_recv_hook (upstream's hook()). One-shot: run it
 * exactly once; it lives in the buffer (no allocation). */
typedef struct ts_ep_ll_hook ts_ep_ll_hook;

typedef struct ts_ep_ll_dispatch_args {
    const ts_tensor *x;        /* bf16 [N, hidden], last dim contiguous; hidden % 128 == 0
                                  (% 512 with use_ue8m0); N <= num_max_dispatch_tokens_per_rank */
    const ts_tensor *topk_idx; /* i64 / i32 [N, K], -1 = no selection; no deduplication */
    int64_t num_max_dispatch_tokens_per_rank; /* the same on every rank */
    int64_t num_experts;                      /* % num_ranks == 0, the same on every rank */
    ts_tensor *cumulative_local_expert_recv_stats; /* i32 [E/R] or NULL: += rows received */
    ts_tensor *dispatch_wait_recv_cost_stats;      /* i64 [R] or NULL: += ns waited per source */
    bool use_fp8, round_scale, use_ue8m0;  /* use_ue8m0 needs round_scale (as upstream) */
    bool return_recv_hook;
} ts_ep_ll_dispatch_args;

/* Caller-owned outputs, S = R * num_max_dispatch_tokens_per_rank:
 *   recv_x        bf16 [E/R, S, hidden] (use_fp8: e4m3), last dim contiguous, any outer strides
 *   recv_x_scales use_fp8 only: f32 [E/R, S, hidden/128] or, with use_ue8m0, i32
 *                 [E/R, S, hidden/512] (4 ue8m0 bytes per word, byte j = scale 4w+j); any
 *                 strides (upstream's are column-major in the last two dims)
 *   recv_count    i32 [E/R]
 * Rows of local expert e: [0, recv_count[e]) valid, ordered by (source rank, source token
 * index, then top-k slot) -- deterministic here, unlike upstream. Rows after them untouched. */
typedef struct ts_ep_ll_dispatch_out {
    ts_tensor *recv_x, *recv_x_scales, *recv_count;
} ts_ep_ll_dispatch_out;

/* Collective (every rank, same order). Without return_recv_hook it sends, waits and unpacks;
 * with it, it only sends and *hook receives the receive phase, which fills the outputs (they
 * must stay valid until then). *handle (free with ts_ep_ll_handle_destroy) is created at
 * once; its contents are valid after the receive phase. */
TS_API ts_status ts_ep_low_latency_dispatch(ts_ep_buffer *buf, const ts_ep_ll_dispatch_args *args,
                                            const ts_ep_ll_dispatch_out *out, ts_ep_ll_handle **handle,
                                            ts_ep_ll_hook **hook);

typedef struct ts_ep_ll_combine_args {
    const ts_tensor *x;            /* bf16 [E/R, S, hidden] expert outputs laid out as recv_x
                                      (valid rows only are read); ignored with zero_copy */
    const ts_tensor *topk_idx;     /* this rank's dispatch topk_idx [N, K] (the same values) */
    const ts_tensor *topk_weights; /* f32 [N, K] */
    const ts_ep_ll_handle *handle; /* from this rank's dispatch */
    bool use_logfmt, zero_copy, return_recv_hook;
    ts_tensor *combine_wait_recv_cost_stats; /* i64 [R] or NULL: += ns waited per expert rank */
} ts_ep_ll_combine_args;

/* Collective. out: caller-owned bf16 [N, hidden] (upstream's `out`).
 * out[t] = bf16_rne(acc), acc = 0.0f, then for k = 0..K-1 with topk_idx[t][k] >= 0:
 * acc = fmaf(y_k, w[t][k], acc) where y_k is the f32 value of the row expert topk_idx[t][k]
 * returned for t (bf16, or its LogFMT-10 decoding) -- upstream's top-k order, with the FMA
 * its compiler forms. Tokens with no valid selection get +0. */
TS_API ts_status ts_ep_low_latency_combine(ts_ep_buffer *buf, const ts_ep_ll_combine_args *args, ts_tensor *out,
                                           ts_ep_ll_hook **hook);

/* zero_copy input of the next combine: a bf16 [E/R, S, hidden] view of this rank's half that
 * the next LL call uses. Write the expert outputs there, then combine with zero_copy. Local. */
TS_API ts_status ts_ep_get_next_low_latency_combine_buffer(ts_ep_buffer *buf, const ts_ep_ll_handle *handle,
                                                           ts_tensor *x);

/* Receive phase of a hooked call; the hook is spent afterwards (also on error). */
TS_API ts_status ts_ep_ll_hook_run(ts_ep_ll_hook *hook);

TS_API ts_status ts_ep_ll_handle_destroy(ts_ep_ll_handle *h);
/* The handle's arrays (owned by it): src_info i32 [E/R, S] (source token index of each valid
 * row), layout_range i64 [E/R, R] (high 32 bits begin row, low 32 bits count of each source's
 * block), and the dispatch's scalars. Any pointer may be NULL. */
TS_API ts_status ts_ep_ll_handle_info(const ts_ep_ll_handle *h, const int32_t **src_info, const int64_t **layout_range,
                                      int64_t *num_max_dispatch_tokens_per_rank, int64_t *hidden,
                                      int64_t *num_experts);

/* LogFMT-10 of one 128-value division (upstream's combine encoding), exposed for tests and
 * tools. x: 128 bf16. meta[0] = bf16 amax of |x|, meta[1] = bf16 amin of |x|. Returns 160
 * (cast: 8 groups of 16 values, each 5 little-endian u32 words: 16 9-bit codes from bit 0,
 * then the 16 sign bits at bits 144..159) or 256 (not cast: the bf16 values as they are)
 * = the bytes written to `enc`. */
TS_API int ts_ep_logfmt10_encode(const uint16_t *x, uint8_t *enc, uint16_t meta[2]);
/* Decode one division into f32 (what combine accumulates). */
TS_API void ts_ep_logfmt10_decode(const uint8_t *enc, const uint16_t meta[2], float *y);

#ifdef __cplusplus
}
#endif
#endif
