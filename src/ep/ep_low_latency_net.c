/* Low-latency mode across nodes: the MPI side of the LL protocol. Ranks of other nodes cannot
 * see a segment, so what a node-local peer would store into it (a signal line, top-k rows, FP8
 * rows and scales, combine rows) travels as nonblocking two-sided messages instead: a header
 * carrying the signal's fields, then the data with sizes the header (dispatch) or the
 * receiver's own handle (combine) gives. MPI is only polled (MPI_Test), under the buffer's
 * deadline, never waited on. */
#include "ep/ep_low_latency.h"

#include <stdlib.h>
#include <time.h>

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

ts_status ts__ep_ll_net_init(ts_ep_buffer *b) {
    const int R = b->num_ranks;
    for (int h = 0; h < 2; h++) {
        ts__ep_ll_net *n = &b->ll->net[h];
        n->req = malloc((size_t)R * TS__EP_LL_REQS * sizeof *n->req);
        n->hdr_in = calloc((size_t)R, sizeof *n->hdr_in);
        n->hdr_out = calloc((size_t)R, sizeof *n->hdr_out);
        n->csig = calloc((size_t)R, sizeof *n->csig);
        n->state = calloc((size_t)R, 1);
        n->disc = calloc((size_t)R, 1);
        if (!n->req || !n->hdr_in || !n->hdr_out || !n->csig || !n->state || !n->disc) return TS_ERR_OUT_OF_MEMORY;
        for (int64_t i = 0; i < (int64_t)R * TS__EP_LL_REQS; i++) n->req[i] = MPI_REQUEST_NULL;
    }
    return TS_OK;
}

static void release(MPI_Request *q, bool recv) {
    if (*q == MPI_REQUEST_NULL) return;
    if (recv) MPI_Cancel(q);
    MPI_Request_free(q);
    *q = MPI_REQUEST_NULL;
}

static void release_peer(ts__ep_ll_net *n, int p, bool sends) {
    for (int i = 0; i < 4; i++) release(&n->req[p * TS__EP_LL_REQS + i], true);
    if (sends)
        for (int i = 4; i < TS__EP_LL_REQS; i++) release(&n->req[p * TS__EP_LL_REQS + i], false);
}

void ts__ep_ll_net_abandon(ts_ep_buffer *b, int half) {
    if (!b->ll || !b->ll->net[half].req) return;
    ts__ep_ll_net *n = &b->ll->net[half];
    for (int p = 0; p < b->num_ranks; p++) {
        release_peer(n, p, true);
        n->state[p] = 0;
        n->disc[p] = 0;
    }
}

void ts__ep_ll_net_free(ts_ep_buffer *b) {
    if (!b->ll) return;
    for (int h = 0; h < 2; h++) {
        ts__ep_ll_net *n = &b->ll->net[h];
        if (n->req) ts__ep_ll_net_abandon(b, h);
        free(n->req);
        free(n->hdr_in);
        free(n->hdr_out);
        free(n->csig);
        free(n->state);
        free(n->disc);
        ts__aligned_free(n->csend);
        memset(n, 0, sizeof *n);
    }
    free(b->ll->tmp);
    b->ll->tmp = NULL;
    b->ll->tmp_cap = 0;
}

void *ts__ep_ll_tmp(ts_ep_buffer *b, size_t bytes) {
    if (bytes > b->ll->tmp_cap) {
        void *p = realloc(b->ll->tmp, bytes);
        if (!p) return NULL;
        b->ll->tmp = p;
        b->ll->tmp_cap = bytes;
    }
    return b->ll->tmp;
}

/* With MPI requests pending the wait keeps polling (progress happens inside MPI calls). */
#define MAX_SLEEP_NS 20000

enum { DISC_HEADER = 0x80 };

static ts_status drain_until(ts_ep_buffer *b, int half, double timeout_s, const char *what);

ts_status ts__ep_ll_net_drain(ts_ep_buffer *b, int half, const char *what) {
    return drain_until(b, half, b->timeout_s, what);
}

/* Takes peer p's unused messages of call n->disc_seq out of MPI's queue: its header (posted
 * by ts__ep_ll_net_send_error), which says which data pieces follow, then each piece as it
 * arrives (probed by tag, received into scratch, dropped). False while some are still to come. */
static bool discard_peer(ts_ep_buffer *b, ts__ep_ll_net *n, int p) {
    MPI_Request *hq = &n->req[p * TS__EP_LL_REQS];
    if (n->disc[p] & DISC_HEADER) {
        int done = 0;
        MPI_Test(hq, &done, MPI_STATUS_IGNORE);
        if (!done) return false;
        n->disc[p] = (uint8_t)(atomic_load_explicit(&n->hdr_in[p].seq, memory_order_relaxed) & 7);
    }
    for (int i = 0; i < 3; i++) {
        if (!(n->disc[p] & (1u << i))) continue;
        int flag = 0;
        MPI_Message msg;
        MPI_Status stt;
        MPI_Improbe(p, ts__ep_ll_tag(n->disc_seq, 1 + i), b->comm, &flag, &msg, &stt);
        if (!flag) continue;
        int bytes = 0;
        MPI_Get_count(&stt, MPI_BYTE, &bytes);
        void *tmp = malloc(bytes > 0 ? (size_t)bytes : 1);
        if (!tmp) return false; /* tried again on the next poll */
        MPI_Mrecv(tmp, bytes, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
        free(tmp);
        n->disc[p] &= (uint8_t)~(1u << i);
    }
    return n->disc[p] == 0;
}

static ts_status drain_until(ts_ep_buffer *b, int half, double timeout_s, const char *what) {
    if (b->num_nodes == 1) return TS_OK;
    ts__ep_ll_net *n = &b->ll->net[half];
    const int R = b->num_ranks;
    /* Receives left posted (an earlier call failed before its wait) would take this call's
     * messages of another kind: give them up, but for the headers of peers whose messages
     * are being discarded. */
    for (int p = 0; p < R; p++) {
        for (int i = (n->disc[p] & DISC_HEADER) ? 1 : 0; i < 4; i++) release(&n->req[p * TS__EP_LL_REQS + i], true);
        n->state[p] = 0;
    }
    const int64_t deadline = now_ns() + (int64_t)(timeout_s * 1e9);
    ts__ep_backoff w = TS__EP_BACKOFF_INIT;
    for (;;) {
        int pending = -1;
        for (int p = R - 1; p >= 0; p--)
            if (n->disc[p] && !discard_peer(b, n, p)) pending = p;
        for (int p = R - 1; p >= 0; p--)
            for (int i = 4; i < TS__EP_LL_REQS; i++) {
                MPI_Request *q = &n->req[p * TS__EP_LL_REQS + i];
                if (*q == MPI_REQUEST_NULL) continue;
                int done = 0;
                MPI_Test(q, &done, MPI_STATUS_IGNORE);
                if (!done) pending = p;
            }
        if (pending < 0) return TS_OK;
        if (w.sleep_ns > MAX_SLEEP_NS) w.sleep_ns = MAX_SLEEP_NS;
        if (ts__ep_backoff_step(&w) && now_ns() > deadline) {
            ts__ep_ll_net_abandon(b, 0);
            ts__ep_ll_net_abandon(b, 1);
            b->broken = true;
            return ts__fail(TS_ERR_TIMEOUT,
                            "%s: rank %d waited %.1f s for rank %d, which did not take the previous LL call's data; "
                            "the buffer can only be destroyed now", what, b->rank, b->timeout_s, pending);
        }
    }
}

bool ts__ep_ll_quiesce(ts_ep_buffer *b) {
    if (!b->ll || !b->ll->net[0].req) return true;
    /* Sends of finished calls complete at once (their receivers got the data); a hooked call
     * never run leaves them unmatched, so give them only a short while. */
    for (int h = 0; h < 2; h++)
        if (b->broken || drain_until(b, h, b->timeout_s < 0.2 ? b->timeout_s : 0.2, "ts_ep_buffer_destroy") != TS_OK) {
            ts__ep_ll_net_abandon(b, 0);
            ts__ep_ll_net_abandon(b, 1);
            return false;
        }
    return true;
}

void ts__ep_ll_net_post_headers(ts_ep_buffer *b, int half, uint64_t seq) {
    ts__ep_ll_net *n = &b->ll->net[half];
    for (int p = 0; p < b->num_ranks; p++) {
        if (ts__ep_is_local(b, p)) continue;
        MPI_Irecv(&n->hdr_in[p], (int)sizeof n->hdr_in[p], MPI_BYTE, p, ts__ep_ll_tag(seq, 0), b->comm,
                  &n->req[p * TS__EP_LL_REQS]);
        n->state[p] = 1;
    }
}

void ts__ep_ll_net_send(ts_ep_buffer *b, int half, uint64_t seq, int p, const ts__ep_ll_sig *hdr, void *const data[3],
                        const int count[3], const MPI_Datatype type[3]) {
    ts__ep_ll_net *n = &b->ll->net[half];
    MPI_Request *q = &n->req[p * TS__EP_LL_REQS];
    n->hdr_out[p] = *hdr;
    /* On the wire the header's seq (the receiver keeps its own) says which data pieces follow,
     * so a receiver that will not use them knows what to take out of MPI's queue. */
    uint64_t pieces = 0;
    for (int i = 0; i < 3; i++)
        if (data && count[i] > 0) pieces |= 1u << i;
    atomic_store_explicit(&n->hdr_out[p].seq, pieces, memory_order_relaxed);
    MPI_Isend(&n->hdr_out[p], (int)sizeof *hdr, MPI_BYTE, p, ts__ep_ll_tag(seq, 0), b->comm, &q[4]);
    for (int i = 0; i < 3; i++)
        if (data && count[i] > 0) MPI_Isend(data[i], count[i], type[i], p, ts__ep_ll_tag(seq, 1 + i), b->comm, &q[5 + i]);
}

void ts__ep_ll_net_send_error(ts_ep_buffer *b, int half, uint64_t seq, const ts__ep_ll_sig *hdr) {
    if (b->num_nodes == 1) return;
    ts__ep_ll_net *n = &b->ll->net[half];
    for (int p = 0; p < b->num_ranks; p++) {
        if (ts__ep_is_local(b, p)) continue;
        ts__ep_ll_net_send(b, half, seq, p, hdr, NULL, NULL, NULL);
        release(&n->req[p * TS__EP_LL_REQS + 4], false);
        /* the peers still send this rank their header and data: taken out of MPI's queue by
         * the next drain of this half (the next call on it, clean or destroy) */
        MPI_Request *hq = &n->req[p * TS__EP_LL_REQS];
        if (*hq == MPI_REQUEST_NULL)
            MPI_Irecv(&n->hdr_in[p], (int)sizeof n->hdr_in[p], MPI_BYTE, p, ts__ep_ll_tag(seq, 0), b->comm, hq);
        for (int i = 1; i < 4; i++) release(&hq[i], true);
        n->state[p] = 0;
        n->disc[p] = DISC_HEADER;
    }
    n->disc_seq = seq;
}

/* Copies a remote peer's header into the signal line the checks read, then releases seq. */
static void land(ts__ep_ll_sig *dst, const ts__ep_ll_sig *src, uint64_t seq) {
    dst->status = src->status;
    dst->flags = src->flags;
    dst->hidden = src->hidden;
    dst->num_experts = src->num_experts;
    dst->max_tokens = src->max_tokens;
    dst->num_topk = src->num_topk;
    dst->num_tokens = src->num_tokens;
    dst->nrows = src->nrows;
    atomic_store_explicit(&dst->seq, seq, memory_order_release);
}

static bool test_range(MPI_Request *q, int n) {
    bool all = true;
    for (int i = 0; i < n; i++) {
        if (q[i] == MPI_REQUEST_NULL) continue;
        int done = 0;
        MPI_Test(&q[i], &done, MPI_STATUS_IGNORE);
        if (!done) all = false;
    }
    return all;
}

ts_status ts__ep_ll_wait_all(ts_ep_buffer *b, int half, uint64_t seq, ts__ep_ll_sig_fn sigp, ts__ep_ll_post_fn post,
                             void *ctx, const char *what, int64_t *waited_ns) {
    const int R = b->num_ranks;
    ts__ep_ll_net *n = b->num_nodes > 1 ? &b->ll->net[half] : NULL;
    const int64_t t0 = now_ns(), deadline = t0 + (int64_t)(b->timeout_s * 1e9);
    ts__ep_backoff w = TS__EP_BACKOFF_INIT;
    int left = R, first = 0; /* peers in ring order from this rank; [0, first) are done */
    uint8_t done_small[256];
    uint8_t *done = R <= 256 ? done_small : calloc((size_t)R, 1);
    if (!done) return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: no memory", what);
    memset(done, 0, (size_t)R);
    ts_status st = TS_OK;
    while (left > 0) {
        bool remote_pending = false;
        for (int i = first; i < R; i++) {
            const int p = (b->rank + i) % R;
            if (done[p]) continue;
            ts__ep_ll_sig *g = sigp(ctx, b, p);
            if (n && !ts__ep_is_local(b, p)) {
                MPI_Request *q = &n->req[p * TS__EP_LL_REQS];
                if (n->state[p] == 1 && test_range(q, 1)) {
                    const ts__ep_ll_sig *hd = &n->hdr_in[p];
                    if (hd->status == TS_OK && post(ctx, b, n, p, hd)) {
                        n->state[p] = 2;
                    } else {
                        /* it failed or disagrees: what it sent here is taken out of the queue
                         * by this rank's next drain of the half, and it does the same with
                         * this rank's data, so the sends stay until they complete (released,
                         * MPI could still read them after the segment is gone) */
                        n->state[p] = 3;
                        n->disc[p] = (uint8_t)(atomic_load_explicit(&hd->seq, memory_order_relaxed) & 7);
                        n->disc_seq = seq;
                    }
                }
                if (n->state[p] == 2 && test_range(q + 1, 3)) n->state[p] = 3;
                if (n->state[p] == 3) {
                    test_range(q + 4, 4); /* progress only: sends complete by the next call on this half */
                    land(g, &n->hdr_in[p], seq);
                    n->state[p] = 0;
                } else {
                    remote_pending = true;
                    continue;
                }
            }
            const uint64_t v = atomic_load_explicit(&g->seq, memory_order_acquire);
            if (v < seq) continue;
            if (v != seq && st == TS_OK)
                st = ts__fail(TS_ERR_PEER,
                              "%s: rank %d is already at LL call %llu while this rank receives call %llu: more than "
                              "two LL calls in flight", what, p, (unsigned long long)v, (unsigned long long)seq);
            done[p] = 1;
            left--;
            if (waited_ns) waited_ns[p] += now_ns() - t0;
        }
        while (first < R && done[(b->rank + first) % R]) first++;
        if (left == 0) break;
        if (remote_pending && w.sleep_ns > MAX_SLEEP_NS) w.sleep_ns = MAX_SLEEP_NS;
        if (ts__ep_backoff_step(&w) && now_ns() > deadline) {
            int missing = -1;
            for (int p = 0; p < R && missing < 0; p++)
                if (!done[p]) missing = p;
            if (n) {
                ts__ep_ll_net_abandon(b, 0);
                ts__ep_ll_net_abandon(b, 1);
            }
            b->broken = true;
            for (int p = 0; p < R; p++)
                if (waited_ns && !done[p]) waited_ns[p] += now_ns() - t0;
            if (done != done_small) free(done);
            return ts__fail(TS_ERR_TIMEOUT,
                            "%s: rank %d waited %.1f s for rank %d, which did not send (LL call %llu); the buffer "
                            "can only be destroyed now",
                            what, b->rank, b->timeout_s, missing, (unsigned long long)seq);
        }
    }
    if (done != done_small) free(done);
    return st;
}
