/* Waiting across nodes: the node-local shared-memory barrier combined with MPI requests to
 * the ranks of other nodes, all under one deadline. MPI is only ever polled (MPI_Test*),
 * never waited on, so a silent peer costs a timeout that names it, not a hang. */
#include "ep/ep_internal.h"

#include <string.h>
#include <time.h>

double ts__ep_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Lowest rank the wait is still missing: a node-local rank that has not reached `target`
 * (target 0: none checked) or the rank of a pending request. */
static int lowest_missing(ts_ep_buffer *b, uint64_t target) {
    int missing = -1;
    for (int i = 0; i < b->ranks_per_node && target; i++) {
        const int r = b->node_first + i;
        if (r != b->rank && atomic_load_explicit(&ts__ep_ctrl_of(b, r)->arrive, memory_order_acquire) < target) {
            missing = r;
            break;
        }
    }
    for (int i = 0; i < b->nreqs; i++) {
        if (b->reqs[i] == MPI_REQUEST_NULL) continue;
        int flag = 0;
        MPI_Test(&b->reqs[i], &flag, MPI_STATUS_IGNORE);
        if (!flag && (missing < 0 || b->req_rank[i] < missing)) missing = b->req_rank[i];
    }
    return missing;
}

/* Gives up on the pending requests: receives are cancelled, sends released. MPI may still
 * read a released send's memory: metadata records are small (sent eagerly), but a staging
 * transfer may not be, so then the staging is kept until the process ends. */
static void abandon_reqs(ts_ep_buffer *b) {
    for (int i = 0; i < b->nreqs; i++) {
        if (b->reqs[i] == MPI_REQUEST_NULL) continue;
        if (b->data_phase) b->stage_pinned = true;
        MPI_Cancel(&b->reqs[i]);
        MPI_Request_free(&b->reqs[i]);
    }
    b->nreqs = 0;
}

static ts_status timeout(ts_ep_buffer *b, uint64_t target, const char *what) {
    const int r = lowest_missing(b, target);
    abandon_reqs(b);
    b->broken = true;
    return ts__fail(TS_ERR_TIMEOUT,
                    "%s: rank %d waited %.1f s for rank %d, which did not arrive (barrier %llu); the buffer can "
                    "only be destroyed now",
                    what, b->rank, b->timeout_s, r, (unsigned long long)target);
}

/* With MPI requests pending the wait must keep polling MPI (its progress engine runs only
 * inside MPI calls), so it sleeps at most this long between polls. */
#define TS__EP_MPI_MAX_SLEEP_NS 20000

/* Waits until every node-local rank reached `target` (0: skip) and b->reqs are complete. */
static ts_status wait_all(ts_ep_buffer *b, uint64_t target, double deadline, const char *what) {
    ts__ep_backoff w = TS__EP_BACKOFF_INIT;
    int next_local = 1; /* node-local ranks are checked in ring order from this rank */
    for (;;) {
        while (target && next_local < b->ranks_per_node) {
            const int r = b->node_first + (b->local_rank + next_local) % b->ranks_per_node;
            if (atomic_load_explicit(&ts__ep_ctrl_of(b, r)->arrive, memory_order_acquire) < target) break;
            next_local++;
        }
        int done = 1;
        if (b->nreqs) MPI_Testall(b->nreqs, b->reqs, &done, MPI_STATUSES_IGNORE);
        if (done && (!target || next_local >= b->ranks_per_node)) {
            b->nreqs = 0;
            b->data_phase = false;
            return TS_OK;
        }
        /* This rank's requests being complete does not mean its peers' are: MPI may still hold
         * a fragment or the closing message of a transfer in its send queue, which only this
         * process's progress engine writes out (and MPI_Testall on completed requests does not
         * run it). A rank waiting here in the node barrier without progress can so hold a
         * remote rank in its data phase, whose node-local ranks wait on it: the 2 x 2 host
         * deadlock (docs/ep.md). MPI_Iprobe receives nothing and runs the progress engine. */
        if (done && b->num_nodes > 1) {
            int flag = 0;
            MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, b->comm, &flag, MPI_STATUS_IGNORE);
        }
        if (b->num_nodes > 1 && w.sleep_ns > TS__EP_MPI_MAX_SLEEP_NS) w.sleep_ns = TS__EP_MPI_MAX_SLEEP_NS;
        if (ts__ep_backoff_step(&w) && ts__ep_now_s() > deadline) return timeout(b, target, what);
    }
}

ts_status ts__ep_wait_reqs(ts_ep_buffer *b, const char *what) {
    return wait_all(b, 0, ts__ep_now_s() + b->timeout_s, what);
}

ts_status ts__ep_wait_reqs_until(ts_ep_buffer *b, double deadline, const char *what) {
    return wait_all(b, 0, deadline, what);
}

ts_status ts__ep_node_barrier(ts_ep_buffer *b, const char *what) {
    const uint64_t target = ++b->barriers;
    atomic_store_explicit(&ts__ep_ctrl_of(b, b->rank)->arrive, target, memory_order_release);
    return wait_all(b, target, ts__ep_now_s() + b->timeout_s, what);
}

/* Remote ranks in ascending order, each once: post one message pair per remote rank. */
ts_status ts__ep_barrier(ts_ep_buffer *b, const char *what) {
    if (b->num_nodes > 1) {
        static char dummy_send, dummy_recv[1];
        b->nreqs = 0;
        for (int r = 0; r < b->num_ranks; r++) {
            if (ts__ep_is_local(b, r)) continue;
            MPI_Request q;
            MPI_Irecv(dummy_recv, 0, MPI_BYTE, r, TS__EP_TAG_BARRIER, b->comm, &q);
            ts__ep_req_push(b, q, r);
            MPI_Isend(&dummy_send, 0, MPI_BYTE, r, TS__EP_TAG_BARRIER, b->comm, &q);
            ts__ep_req_push(b, q, r);
        }
    }
    return ts__ep_node_barrier(b, what);
}

ts_status ts__ep_exchange_meta(ts_ep_buffer *b, uint64_t call, int64_t meta_bytes, const char *what) {
    if (b->num_nodes > 1) {
        const ts__ep_meta *mine = ts__ep_meta_of(b, b->rank, call);
        b->nreqs = 0;
        for (int r = 0; r < b->num_ranks; r++) {
            if (ts__ep_is_local(b, r)) continue;
            MPI_Request q;
            MPI_Irecv(b->remote_meta[(call & 1) * (uint64_t)b->num_ranks + (uint64_t)r], TS__EP_META_SLOT_BYTES,
                      MPI_BYTE, r, TS__EP_TAG_META, b->comm, &q);
            ts__ep_req_push(b, q, r);
            MPI_Isend(mine, (int)meta_bytes, MPI_BYTE, r, TS__EP_TAG_META, b->comm, &q);
            ts__ep_req_push(b, q, r);
        }
    }
    return ts__ep_node_barrier(b, what);
}
