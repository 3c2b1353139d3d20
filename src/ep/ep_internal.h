/* Internal state of the EP module (not installed). */
#ifndef TILESTACK_EP_INTERNAL_H
#define TILESTACK_EP_INTERNAL_H

#include "core/internal.h"
#include "tilestack/ep.h"

#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

/* Segment layout (each rank owns one, every node-local peer maps it):
 *   [0, 128)              control: barrier arrival counter, segment geometry
 *   [128, +2*META_SLOT)   per-call metadata, two slots alternating by call parity so a rank
 *                         that leaves a call early never overwrites what a slower peer still
 *                         reads (ranks are at most one call apart: every call has a barrier)
 *   [data_off, +nvl/2)    dispatch area: outputs of the last dispatch, written by senders
 *   [.., +nvl/2)          combine area: this rank's expert outputs, read by their sources */
#define TS__EP_CTRL_BYTES 128
#define TS__EP_META_SLOT_BYTES (128 * 1024)

typedef struct ts__ep_ctrl {
    _Atomic uint64_t arrive; /* barriers this rank has reached */
    char pad_[56];
    int64_t num_nvl_bytes;   /* set at create, read-only afterwards */
    int64_t data_off;
} ts__ep_ctrl;

enum { TS__EP_OP_DISPATCH = 1, TS__EP_OP_COMBINE = 2 };

/* What each rank publishes at the start of a call; peers check agreement from it. */
typedef struct ts__ep_meta {
    int32_t op, status;
    int64_t hidden, x_dtype, scale_dtype, num_scales, num_topk, idx_dtype;
    int64_t has_topk, has_weights, cached, num_tokens, num_experts, num_worst_tokens;
    int64_t num_recv;     /* combine: rows of this rank's combine input */
    int64_t expand_align; /* dispatch: V2's expanded layout requested with this alignment, else 0 */
    /* followed by int64 send_count[R] (dispatch) and int32 expert_count[E] (dispatch, topk) */
} ts__ep_meta;

enum { TS__EP_RANK_BOOK_BYTES = 128 };

struct ts_ep_buffer {
    MPI_Comm comm;
    int32_t rank, num_ranks, ranks_per_node;
    int64_t num_nvl_bytes, seg_bytes, data_off;
    uint8_t **peer;      /* [R] mapped segment of each rank (this rank's too) */
    uint64_t calls;      /* collective calls started: picks the metadata slot */
    uint64_t barriers;   /* barriers passed */
    double timeout_s;
    bool broken;         /* a wait timed out: only destroy is allowed */
    /* Per-rank bookkeeping of one dispatch / combine call, [R * TS__EP_RANK_BOOK_BYTES]:
     * allocated once at create (R is fixed), so the calls themselves never allocate it. */
    uint8_t *rank_book;
    int32_t *expert_counts; /* output storage for num_recv_tokens_per_expert */
    int64_t expert_counts_cap;
    /* Low-latency mode (src/ep/ep_low_latency*.c): the LL area follows the nvl area. */
    int64_t num_rdma_bytes, ll_off;
    struct ts__ep_ll_state *ll; /* NULL unless low_latency_mode */
    /* Nodes (src/ep/ep_internode.c): ranks [node * ranks_per_node, +ranks_per_node) share
     * segments; peer[r] is NULL for ranks on other nodes, which are reached through MPI. */
    int32_t num_nodes, node, local_rank, node_first;
    uint8_t *rdma;          /* internode normal-mode staging: [0, rdma_half) sends, then receives */
    int64_t rdma_half;
    uint8_t **remote_meta;  /* [2 * R]: metadata records received from ranks on other nodes */
    MPI_Request *reqs;      /* [4 * R + 4]: requests of one internode phase */
    int32_t *req_rank;      /* the rank each request waits on (named on timeout) */
    int nreqs;
    bool data_phase;   /* the requests include staging transfers */
    bool stage_pinned; /* a timeout left such a transfer to MPI: the staging is never freed */
    struct ts__ep_async *async; /* worker of ts_ep_*_start (ep_async.c); NULL until first used */
};

/* MPI tags of the internode traffic (on the buffer's duplicated communicator). */
enum { TS__EP_TAG_META = 101, TS__EP_TAG_BARRIER = 102, TS__EP_TAG_DISPATCH = 103, TS__EP_TAG_COMBINE = 104 };
/* The deadline collectives of ep_coll.c (on whatever communicator they are given). */
enum { TS__EP_TAG_COLL = 0x7e5c };

static inline bool ts__ep_is_local(const ts_ep_buffer *b, int r) {
    return r >= b->node_first && r < b->node_first + b->ranks_per_node;
}

/* LL state of a buffer (ep_low_latency.c). */
ts_status ts__ep_ll_init(ts_ep_buffer *b);
void ts__ep_ll_free(ts_ep_buffer *b);
/* Completes the LL sends still in flight to other nodes (polled, deadline); false when some
 * could not be completed (MPI may still read this rank's segment: keep it mapped). */
bool ts__ep_ll_quiesce(ts_ep_buffer *b);

struct ts_ep_handle {
    const ts_ep_buffer *buf;
    int32_t num_ranks;
    int64_t num_tokens, num_recv, rows;
    int32_t *send_pos;     /* [N, R]: row of my token t in rank r's recv_x, -1 if not sent */
    int64_t *send_count;   /* [R] */
    int64_t *recv_offsets; /* [R+1] */
    /* Internode only (NULL with one node), see ep_dispatch.c / ep_combine.c: */
    int64_t *counts;       /* [R, R]: rows rank s sent rank d (every rank's, from the metadata) */
    int32_t *node_pos;     /* [N, nodes]: record of my token t in my dispatch message to node n, -1 */
    int32_t *copy_idx;     /* [N, R]: for r on another node, the copy's index in the combine
                              message from r's node (my token order, then rank order), else -1 */
    int32_t *fwd_rows;     /* proxy: [records, ranks_per_node] row of each forwarded token in each
                              node-local rank (-1 none), records of the served sources in order */
    int64_t *fwd_rec;      /* [R + 1]: record offsets per source (non-empty for served sources only) */
    int64_t *fwd_copy;     /* [records + 1]: first copy of each record in the combine message */
    /* V2's expanded layout placed by the senders (ts__ep_dispatch_expanded; NULL otherwise):
     * for my (token t, slot k), the destination rank and its expanded row there (-1: none),
     * and every rank's expanded row count, so a cached dispatch places rows the same way. */
    int64_t ex_k;
    int32_t *ex_dst, *ex_row; /* [N, ex_k] */
    int64_t *ex_rows;         /* [R], then [E] scratch of the row cursors */
};

/* ts_ep_dispatch, and V2's expanded layout (ep_elastic.h) written straight by the senders:
 * each (token, top-k slot) row goes to its final row of the receiver's dispatch area, local
 * expert groups each starting at a multiple of `alignment`, inside a group by (source rank,
 * source token, slot), as ts__ep_elastic_plan orders them. Only with one node and when every
 * receiver's expanded rows fit its area (the same verdict on every rank); otherwise the call
 * is a plain dispatch and ex->placed is false. With placed: ex->x / sf [rows, ...] and w
 * [rows] (the slot's weight; data NULL without top-k) are views into this rank's area, the
 * alignment padding rows are left unwritten, and result->recv_x / recv_x_scales are not
 * produced (data NULL); the other result fields are as ts_ep_dispatch's. */
typedef struct ts__ep_expanded {
    int64_t alignment; /* in: >= 1 */
    bool placed;       /* out */
    ts_tensor x, sf, w;
} ts__ep_expanded;
ts_status ts__ep_dispatch_expanded(ts_ep_buffer *b, const ts_ep_dispatch_args *a, ts__ep_expanded *ex,
                                   ts_ep_dispatch_result *result, ts_ep_handle **handle_out);

static inline ts__ep_ctrl *ts__ep_ctrl_of(const ts_ep_buffer *b, int r) {
    return (ts__ep_ctrl *)(void *)b->peer[r];
}
static inline ts__ep_meta *ts__ep_meta_of(const ts_ep_buffer *b, int r, uint64_t call) {
    if (!b->peer[r]) /* another node: the copy its MPI message delivered */
        return (ts__ep_meta *)(void *)b->remote_meta[(call & 1) * (uint64_t)b->num_ranks + (uint64_t)r];
    return (ts__ep_meta *)(void *)(b->peer[r] + TS__EP_CTRL_BYTES +
                                    (call & 1) * TS__EP_META_SLOT_BYTES);
}
static inline int64_t ts__ep_area_bytes(const ts_ep_buffer *b) { return (b->num_nvl_bytes / 2) & ~(int64_t)127; }
static inline uint8_t *ts__ep_dispatch_area(const ts_ep_buffer *b, int r) { return b->peer[r] + b->data_off; }
static inline uint8_t *ts__ep_combine_area(const ts_ep_buffer *b, int r) {
    return b->peer[r] + b->data_off + ts__ep_area_bytes(b);
}

/* Every node-local rank arrives, then waits for all others, with the buffer's deadline.
 * `what` names the calling op in the timeout message. Marks the buffer broken on timeout. */
ts_status ts__ep_barrier(ts_ep_buffer *b, const char *what);

/* Internode (ep_internode.c; with one node these are the shared-memory barrier alone). */
/* Sends this rank's metadata record of `call` (meta_bytes of it) to every rank on another
 * node, receives theirs into remote_meta, and passes the node-local barrier: afterwards
 * ts__ep_meta_of(b, r, call) is valid for every r. Deadline and errors as ts__ep_barrier. */
ts_status ts__ep_exchange_meta(ts_ep_buffer *b, uint64_t call, int64_t meta_bytes, const char *what);
/* Node-local ranks only (shared memory); ts__ep_barrier adds the ranks of other nodes. */
ts_status ts__ep_node_barrier(ts_ep_buffer *b, const char *what);
/* Requests in b->reqs[0, b->nreqs): waits for all of them with the buffer's deadline.
 * On expiry: TS_ERR_TIMEOUT naming the lowest rank whose request is pending, the requests
 * are cancelled / released and the buffer is marked broken. */
ts_status ts__ep_wait_reqs(ts_ep_buffer *b, const char *what);
/* The same with a given deadline (ts__ep_now_s() clock). */
ts_status ts__ep_wait_reqs_until(ts_ep_buffer *b, double deadline, const char *what);
/* Appends a request on b->reqs (waiting on `rank`). */
static inline void ts__ep_req_push(ts_ep_buffer *b, MPI_Request r, int rank) {
    b->req_rank[b->nreqs] = rank;
    b->reqs[b->nreqs++] = r;
}
double ts__ep_now_s(void);

/* Stops the worker of the async calls (waits for an operation in flight). */
void ts__ep_async_stop(ts_ep_buffer *b);
/* An async call is in flight on b and the caller is not its worker. */
bool ts__ep_async_busy(const ts_ep_buffer *b);

/* Common entry check of collective calls. */
ts_status ts__ep_check_usable(const ts_ep_buffer *b, const char *what);

/* Threads a call may use under `cfg` (NULL = pool size). */
int ts__ep_threads(const ts_ep_config *cfg);

/* Read element (t, k) of an i32/i64 top-k tensor. */
static inline int64_t ts__ep_idx_at(const ts_tensor *t, int64_t i, int64_t k) {
    const int64_t off = i * t->strides[0] + k * t->strides[1];
    return t->dtype == TS_I64 ? ((const int64_t *)t->data)[off] : ((const int32_t *)t->data)[off];
}

/* First peer whose metadata disagrees with rank 0's or reports an error. Returns TS_OK when
 * all agree; otherwise the code every rank returns (the rank at fault keeps its own). */
ts_status ts__ep_check_peers(ts_ep_buffer *b, uint64_t call, const char *what);

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Row copy into a shared area. Rows there are read by another process later, not by this
 * one: streaming stores skip the read-for-ownership of every destination line and keep the
 * sender's cache for its own rows (about a third less memory traffic per copy). Row bytes
 * that are not whole 16-byte aligned lines take memcpy. */
static inline void ts__ep_copy_row(uint8_t *dst, const uint8_t *src, int64_t bytes) {
#if defined(__SSE2__)
    if (bytes >= 1024 && (bytes & 15) == 0 && ((uintptr_t)dst & 15) == 0) {
        int64_t i = 0;
        for (; i + 64 <= bytes; i += 64) {
            const __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(src + i));
            const __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(src + i + 16));
            const __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(src + i + 32));
            const __m128i d = _mm_loadu_si128((const __m128i *)(const void *)(src + i + 48));
            _mm_stream_si128((__m128i *)(void *)(dst + i), a);
            _mm_stream_si128((__m128i *)(void *)(dst + i + 16), b);
            _mm_stream_si128((__m128i *)(void *)(dst + i + 32), c);
            _mm_stream_si128((__m128i *)(void *)(dst + i + 48), d);
        }
        for (; i < bytes; i += 16)
            _mm_stream_si128((__m128i *)(void *)(dst + i), _mm_loadu_si128((const __m128i *)(const void *)(src + i)));
        return;
    }
#endif
    memcpy(dst, src, (size_t)bytes);
}

static inline void ts__ep_copy_fence(void) {
#if defined(__SSE2__)
    _mm_sfence(); /* streaming stores are weakly ordered: drain before the barrier's release */
#endif
}

/* Waiting on a peer's shared-memory flag: call once per failed poll. Ranks may outnumber
 * cores, so it spins only briefly, then gives the core away, then sleeps a growing (bounded)
 * interval so that waiting ranks cost little CPU. Returns true on the polls where the caller
 * should check its deadline (every 16th once past the spin). */
typedef struct ts__ep_backoff {
    long iter, sleep_ns;
} ts__ep_backoff;
#define TS__EP_BACKOFF_INIT {0, 2000}

static inline bool ts__ep_backoff_step(ts__ep_backoff *w) {
    w->iter++;
    if (w->iter < 256) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        __asm__ __volatile__("yield" ::: "memory");
#endif
        return false;
    }
    if (w->iter < 2048) {
        sched_yield();
    } else {
        struct timespec ts = {0, w->sleep_ns};
        nanosleep(&ts, NULL);
        if (w->sleep_ns < 200000) w->sleep_ns += w->sleep_ns / 2;
    }
    return (w->iter & 15) == 0;
}

/* topk_idx: i64/i32 [N, K] with values in [-1, num_experts); messages start with `what`. */
ts_status ts__ep_check_topk_idx(const ts_tensor *topk_idx, int64_t num_experts, const char *what);

#endif
