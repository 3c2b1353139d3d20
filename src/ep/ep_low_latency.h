/* Low-latency mode internals (src/ep/ep_low_latency*.c).
 *
 * LL area of every segment (at b->ll_off, num_rdma_bytes long):
 *   [signals]  dispatch signals [2 halves][R sources] (written by the sources into the
 *              receiver's segment) and combine signals [2 halves] (written by the owner into
 *              its own segment), one cache line each
 *   [half 0] [half 1]  the data regions; LL call number `seq` (1, 2, ...) uses half seq & 1.
 * Dispatch region (at the start of the receiver's half, written by the sources):
 *   ids i32 [R][T][K] (every token's top-k row, to every destination) |
 *   scales f32 [R][T][H/128] (fp8) | rows [R][T][row bytes]
 *   -- a token's (cast) row is written once per destination *rank* at its token index, so
 *   senders need no coordination and no per-expert slots; the receive phase expands it into
 *   one row per (token, local expert) in (source, token, k) order. The region is R·T rows,
 *   not E·T as upstream's per-(token, expert) slab.
 * Combine region (at the end of the owner's half, written by the owner, read by the sources):
 *   begin i32 [El][R] | logfmt meta u32 [El][S][H/128] | rows bf16 [El][S][H] (packed as
 *   recv_x: the zero-copy buffer).
 * Signals carry the call's sequence number (release store after the data), the sender's
 * status and the parameters peers must agree on; a receiver seeing seq + 2 knows that the
 * two-calls-in-flight rule was broken. */
#ifndef TILESTACK_EP_LOW_LATENCY_H
#define TILESTACK_EP_LOW_LATENCY_H

#include "ep/ep_internal.h"
#include "tilestack/numerics.h"

typedef struct ts__ep_ll_sig {
    _Atomic uint64_t seq;
    int32_t status, flags; /* flags: bit 0 fp8 / logfmt, bit 1 round_scale, bit 2 ue8m0 */
    int64_t hidden, num_experts, max_tokens;
    int64_t num_topk, num_tokens; /* dispatch: the source's K and N */
    int64_t nrows;                /* across nodes: rows (dispatch) the data messages carry */
} ts__ep_ll_sig;

enum { TS__EP_LL_DISPATCH = 1, TS__EP_LL_COMBINE = 2 };

typedef struct ts__ep_ll_dlayout {
    int64_t ids, scales, rows, row_bytes, nsc, K, total;
} ts__ep_ll_dlayout;

typedef struct ts__ep_ll_clayout {
    int64_t begin, meta, rows, total;
} ts__ep_ll_clayout;

struct ts_ep_ll_handle {
    const ts_ep_buffer *buf;
    int32_t num_ranks;
    int64_t T, hidden, E, El;
    int64_t my_tokens, my_topk; /* this rank's dispatch as a source */
    int32_t *my_expert_counts;  /* [E]: this rank's selections per expert */
    int32_t *src_info;          /* [El * R * T] */
    int64_t *layout_range;      /* [El * R] */
    int32_t *recv_count;        /* [El] copy (combine stages these rows) */
    bool received;
};

struct ts_ep_ll_hook {
    ts_ep_buffer *buf;
    int op;
    bool armed;
    uint64_t seq;
    /* dispatch */
    ts_ep_ll_dispatch_args da;
    ts_tensor recv_x, recv_x_scales, recv_count, cum_stats, wait_stats;
    bool has_cum, has_wait;
    ts_ep_ll_handle *h;
    /* combine */
    ts_tensor topk_idx, topk_weights, out;
    bool use_logfmt;
};

/* Across nodes (ep_low_latency_net.c): the MPI traffic of one half. Per peer on another node
 * TS__EP_LL_REQS requests: [0] header receive, [1..3] data receives, [4] header send,
 * [5..7] data sends. A header (a signal line's fields) is sent first; the receiver posts the
 * data receives once it has read the header (exact sizes, no guessing). */
enum { TS__EP_LL_REQS = 8 };
typedef struct ts__ep_ll_net {
    MPI_Request *req;      /* [R * TS__EP_LL_REQS] */
    ts__ep_ll_sig *hdr_in; /* [R] headers received */
    ts__ep_ll_sig *hdr_out;/* [R] headers sent (live until the send completes) */
    ts__ep_ll_sig *csig;   /* [R] combine signals of ranks on other nodes (copied from hdr_in) */
    int8_t *state;         /* [R] receive state: 0 idle, 1 header posted, 2 data posted, 3 done */
    /* [R] messages of call disc_seq this rank will not use but must take out of MPI's queue
     * (tags repeat every 2048 calls, and ts_ep_clean_low_latency_buffer restarts them): bits
     * 0-2 the data pieces still to come, DISC_HEADER its header */
    uint8_t *disc;
    uint64_t disc_seq;
    uint8_t *csend;        /* combine rows packed per remote source (contiguous messages take
                              MPI's single-copy path; an hindexed send was ~4x slower) */
    size_t csend_cap;
} ts__ep_ll_net;

typedef struct ts__ep_ll_state {
    uint64_t seq;             /* LL calls started */
    ts_ep_ll_hook hooks[2];   /* one per half */
    int64_t sig_bytes, half_bytes;
    ts__ep_ll_net net[2];     /* num_nodes > 1 only */
    void *tmp;                /* per-call bookkeeping, grown on demand (amortised, no per-call malloc) */
    size_t tmp_cap;
} ts__ep_ll_state;

static inline ts__ep_ll_sig *ts__ep_ll_dsig(const ts_ep_buffer *b, int owner, int half, int src) {
    return (ts__ep_ll_sig *)(void *)(b->peer[owner] + b->ll_off) + (int64_t)half * b->num_ranks + src;
}
static inline ts__ep_ll_sig *ts__ep_ll_csig(const ts_ep_buffer *b, int owner, int half) {
    return (ts__ep_ll_sig *)(void *)(b->peer[owner] + b->ll_off) + 2 * (int64_t)b->num_ranks + half;
}
static inline uint8_t *ts__ep_ll_half(const ts_ep_buffer *b, int owner, int half) {
    const ts__ep_ll_state *s = b->ll;
    return b->peer[owner] + b->ll_off + s->sig_bytes + (int64_t)half * s->half_bytes;
}

/* Where the combine region starts in a half (its end aligned down to a page). */
static inline int64_t ts__ep_ll_comb_off(const ts_ep_buffer *b, int64_t comb_total) {
    return (b->ll->half_bytes - comb_total) & ~(int64_t)4095;
}

/* The combine region sits at the end of the half, the dispatch region at its start: with the
 * hint's size they do not overlap, so a peer's dispatch c + 2 never lands on the rows of a
 * combine c still being reduced (hooks let ranks drift two calls apart). */
static inline uint8_t *ts__ep_ll_comb(const ts_ep_buffer *b, int owner, int half, int64_t comb_total) {
    return ts__ep_ll_half(b, owner, half) + ts__ep_ll_comb_off(b, comb_total);
}

ts__ep_ll_dlayout ts__ep_ll_dispatch_layout(int64_t R, int64_t T, int64_t K, int64_t hidden, bool fp8);
/* K the size hint budgets for (larger K works when num_rdma_bytes has room) */
#define TS__EP_LL_HINT_TOPK 32
ts__ep_ll_clayout ts__ep_ll_combine_layout(int64_t El, int64_t R, int64_t T, int64_t hidden);
/* Across nodes: where a half's staging starts (a dispatch's messages out, a combine's rows in),
 * after the largest dispatch region of top-k width K (bf16), before the combine region. Peers
 * may drift a call apart (a node-local peer's dispatch c + 2 writes the dispatch region while
 * this rank still combines c), so the staging overlaps neither region. */
static inline int64_t ts__ep_ll_stage_off(int64_t R, int64_t T, int64_t K, int64_t hidden) {
    return ts__align(ts__ep_ll_dispatch_layout(R, T, K, hidden, false).total, 4096);
}

/* ---- across nodes (ep_low_latency_net.c) ---- */
ts_status ts__ep_ll_net_init(ts_ep_buffer *b);
void ts__ep_ll_net_free(ts_ep_buffer *b);
/* Gives up every request of both halves (cancel receives, release sends). */
void ts__ep_ll_net_abandon(ts_ep_buffer *b, int half);
/* Start of a call on `half`: completes the sends of the call that used it before (done by the
 * two-in-flight rule; polled under the deadline) and releases anything left from an error. */
ts_status ts__ep_ll_net_drain(ts_ep_buffer *b, int half, const char *what);
/* The MPI tag of (seq, kind) */
static inline int ts__ep_ll_tag(uint64_t seq, int kind) { return 1000 + (int)(seq & 2047) * 4 + kind; }
/* Posts the header receive from every rank on another node. */
void ts__ep_ll_net_post_headers(ts_ep_buffer *b, int half, uint64_t seq);
/* Sends header *hdr to remote rank p and then up to three data pieces (skipping count 0). */
void ts__ep_ll_net_send(ts_ep_buffer *b, int half, uint64_t seq, int p, const ts__ep_ll_sig *hdr, void *const data[3],
                        const int count[3], const MPI_Datatype type[3]);
/* Error path: the header alone to every remote rank (released at once: small, eager). */
void ts__ep_ll_net_send_error(ts_ep_buffer *b, int half, uint64_t seq, const ts__ep_ll_sig *hdr);
/* Receiver callback: the header of remote peer p arrived and agrees: post its data receives
 * on n->req[p * TS__EP_LL_REQS + 1..3] and return true; false: no data will be taken (the
 * peer failed or disagrees; the checks after the wait report it). */
typedef bool (*ts__ep_ll_post_fn)(void *ctx, ts_ep_buffer *b, ts__ep_ll_net *n, int p, const ts__ep_ll_sig *hdr);
/* The signal of peer p this rank waits on (remote peers: where its header is copied). */
typedef ts__ep_ll_sig *(*ts__ep_ll_sig_fn)(void *ctx, ts_ep_buffer *b, int p);
/* Waits until every rank's signal reached seq: node-local ones in shared memory, the others
 * through their header and data messages (then their header is copied into the signal and seq
 * released). One deadline; TS_ERR_TIMEOUT names the lowest missing rank (buffer broken),
 * TS_ERR_PEER a rank past seq. waited_ns[p] += the time until p was complete. */
ts_status ts__ep_ll_wait_all(ts_ep_buffer *b, int half, uint64_t seq, ts__ep_ll_sig_fn sigp, ts__ep_ll_post_fn post,
                             void *ctx, const char *what, int64_t *waited_ns);
/* Per-call bookkeeping memory (grown on demand, owned by the LL state). */
void *ts__ep_ll_tmp(ts_ep_buffer *b, size_t bytes);

/* Waits until the signal reaches seq (acquire). TS_ERR_TIMEOUT naming `rank` (and marks the
 * buffer broken) or TS_ERR_PEER if it went past seq. *waited_ns += the time spent. */
ts_status ts__ep_ll_wait(ts_ep_buffer *b, _Atomic uint64_t *sig, uint64_t seq, int rank, const char *what,
                         int64_t *waited_ns);

ts_status ts__ep_ll_dispatch_recv(ts_ep_ll_hook *hk);
ts_status ts__ep_ll_combine_recv(ts_ep_ll_hook *hk);

/* bf16 -> f32 (exact). */
static inline float ts__ep_bf16f(uint16_t h) {
    union { uint32_t u; float f; } v = {(uint32_t)h << 16};
    return v.f;
}

#endif
