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
    char pad_[8];
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

typedef struct ts__ep_ll_state {
    uint64_t seq;             /* LL calls started */
    ts_ep_ll_hook hooks[2];   /* one per half */
    int64_t sig_bytes, half_bytes;
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

/* The combine region sits at the end of the half, the dispatch region at its start: with the
 * hint's size they do not overlap, so a peer's dispatch c + 2 never lands on the rows of a
 * combine c still being reduced (hooks let ranks drift two calls apart). */
static inline uint8_t *ts__ep_ll_comb(const ts_ep_buffer *b, int owner, int half, int64_t comb_total) {
    return ts__ep_ll_half(b, owner, half) + ((b->ll->half_bytes - comb_total) & ~(int64_t)4095);
}

ts__ep_ll_dlayout ts__ep_ll_dispatch_layout(int64_t R, int64_t T, int64_t K, int64_t hidden, bool fp8);
/* K the size hint budgets for (larger K works when num_rdma_bytes has room) */
#define TS__EP_LL_HINT_TOPK 32
ts__ep_ll_clayout ts__ep_ll_combine_layout(int64_t El, int64_t R, int64_t T, int64_t hidden);

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
