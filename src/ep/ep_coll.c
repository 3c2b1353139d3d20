/* Collectives with a deadline (ep_coll.h): point-to-point messages polled under the same
 * backoff and clock as every other EP wait, so that a peer that never comes is named. */
#include "ep/ep_coll.h"
#include "ep/ep_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Names the peers of the requests still pending (lowest first, at most four), then gives the
 * requests up: receives are cancelled, sends released. The staging they point into is left
 * to MPI (the callers never free it after a timeout). */
static void give_up(MPI_Request *q, int n, const int *peer, char *late) {
    for (int i = 0; i < n; i++) {
        if (q[i] == MPI_REQUEST_NULL) continue;
        int flag = 0;
        MPI_Test(&q[i], &flag, MPI_STATUS_IGNORE);
        if (flag) continue;
        if (late) late[peer[i]] = 1;
        MPI_Cancel(&q[i]);
        MPI_Request_free(&q[i]);
    }
}

static ts_status timed_out(MPI_Request *q, const int *peer, int n, MPI_Comm comm, double timeout_s,
                           const char *what) {
    int me = 0, R = 1;
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &R);
    char *late = calloc((size_t)R, 1);
    give_up(q, n, peer, late);
    char list[96] = "";
    int named = 0, more = 0;
    for (int r = 0; late && r < R; r++) {
        if (!late[r]) continue;
        if (named < 4) {
            const size_t len = strlen(list);
            snprintf(list + len, sizeof list - len, "%s%d", named ? ", " : "", r);
            named++;
        } else {
            more++;
        }
    }
    free(late);
    if (named == 0) snprintf(list, sizeof list, "a peer");
    char extra[32] = "";
    if (more) snprintf(extra, sizeof extra, " and %d more", more);
    return ts__fail(TS_ERR_TIMEOUT, "%s: rank %d waited %.1f s for rank%s %s%s, which did not arrive", what, me,
                    timeout_s, named > 1 || more ? "s" : "", list, extra);
}

/* Polls every request until all are complete or the deadline passes. The sleeps of the
 * backoff keep a waiting rank off the CPU, which matters when ranks outnumber cores. */
static ts_status wait_all(MPI_Request *q, const int *peer, int n, MPI_Comm comm, double timeout_s,
                          const char *what) {
    const double deadline = ts__ep_now_s() + timeout_s;
    ts__ep_backoff w = TS__EP_BACKOFF_INIT;
    for (;;) {
        int done = 0;
        MPI_Testall(n, q, &done, MPI_STATUSES_IGNORE);
        if (done) return TS_OK;
        if (ts__ep_backoff_step(&w) && ts__ep_now_s() > deadline)
            return timed_out(q, peer, n, comm, timeout_s, what);
    }
}

/* Every rank's `bytes` into a new [R * bytes] staging, returned in *out (the caller frees it;
 * after a timeout it is NULL and the staging is left to MPI). */
static ts_status gather(const void *mine, size_t bytes, MPI_Comm comm, double timeout_s, const char *what,
                        uint8_t **out) {
    *out = NULL;
    int me = 0, R = 1;
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &R);
    if (bytes > (size_t)INT32_MAX) return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: %zu bytes per rank", what, bytes);
    uint8_t *stage = malloc((size_t)R * bytes + 1);
    MPI_Request *q = malloc(2 * (size_t)R * sizeof *q);
    int *peer = malloc(2 * (size_t)R * sizeof *peer);
    if (!stage || !q || !peer) {
        free(stage), free(q), free(peer);
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: staging of %d x %zu bytes", what, R, bytes);
    }
    if (bytes) memmove(stage + (size_t)me * bytes, mine, bytes);
    int n = 0;
    ts_status st = TS_OK;
    for (int i = 1; i < R && st == TS_OK; i++) {
        const int r = (me + R - i) % R; /* receives first: each peer's message has a home */
        peer[n] = r;
        if (MPI_Irecv(stage + (size_t)r * bytes, (int)bytes, MPI_BYTE, r, TS__EP_TAG_COLL, comm, &q[n++]) != MPI_SUCCESS)
            st = ts__fail(TS_ERR_INTERNAL, "%s: MPI_Irecv from rank %d failed", what, r);
    }
    for (int i = 1; i < R && st == TS_OK; i++) {
        const int r = (me + i) % R;
        peer[n] = r;
        if (MPI_Isend(stage + (size_t)me * bytes, (int)bytes, MPI_BYTE, r, TS__EP_TAG_COLL, comm, &q[n++]) !=
            MPI_SUCCESS)
            st = ts__fail(TS_ERR_INTERNAL, "%s: MPI_Isend to rank %d failed", what, r);
    }
    if (st == TS_OK) st = wait_all(q, peer, n, comm, timeout_s, what);
    else give_up(q, n - 1, peer, NULL); /* the failed post left no request */
    free(q), free(peer);
    if (st == TS_OK) *out = stage;
    return st;
}

ts_status ts__ep_coll_allgather(const void *mine, int bytes, void *all, MPI_Comm comm, double timeout_s,
                                const char *what) {
    if (bytes < 0) return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: %d bytes", what, bytes);
    uint8_t *stage = NULL;
    TS__RETURN_IF_ERROR(gather(mine, (size_t)bytes, comm, timeout_s, what, &stage));
    int R = 1;
    MPI_Comm_size(comm, &R);
    if (bytes && all) memcpy(all, stage, (size_t)R * (size_t)bytes); /* NULL: taking part only */
    free(stage);
    return TS_OK;
}

ts_status ts__ep_coll_allreduce(void *inout, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
                                double timeout_s, const char *what) {
    int tsize = 0;
    MPI_Type_size(dt, &tsize);
    if (count < 0 || tsize <= 0) return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: count %d", what, count);
    const size_t bytes = (size_t)count * (size_t)tsize;
    uint8_t *stage = NULL;
    TS__RETURN_IF_ERROR(gather(inout, bytes, comm, timeout_s, what, &stage));
    int R = 1;
    MPI_Comm_size(comm, &R);
    /* part[r] = part[r - 1] op part[r]: ((p0 op p1) op p2) ..., the same order on every rank */
    for (int r = 1; r < R && count; r++)
        MPI_Reduce_local(stage + (size_t)(r - 1) * bytes, stage + (size_t)r * bytes, count, dt, op);
    if (bytes) memcpy(inout, stage + (size_t)(R - 1) * bytes, bytes);
    free(stage);
    return TS_OK;
}

ts_status ts__ep_coll_barrier(MPI_Comm comm, double timeout_s, const char *what) {
    uint8_t *stage = NULL;
    TS__RETURN_IF_ERROR(gather(NULL, 0, comm, timeout_s, what, &stage));
    free(stage);
    return TS_OK;
}

ts_status ts__ep_coll_bcast(void *buf, int bytes, int root, MPI_Comm comm, double timeout_s, const char *what) {
    int me = 0, R = 1;
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &R);
    if (bytes < 0 || root < 0 || root >= R)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: %d bytes from rank %d of %d", what, bytes, root, R);
    if (R == 1) return TS_OK;
    const int n = me == root ? R - 1 : 1;
    uint8_t *stage = malloc((size_t)bytes + 1);
    MPI_Request *q = malloc((size_t)n * sizeof *q);
    int *peer = malloc((size_t)n * sizeof *peer);
    if (!stage || !q || !peer) {
        free(stage), free(q), free(peer);
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: %d bytes", what, bytes);
    }
    int k = 0;
    if (me == root) {
        memcpy(stage, buf, (size_t)bytes);
        for (int r = 0; r < R; r++) {
            if (r == root) continue;
            peer[k] = r;
            MPI_Isend(stage, bytes, MPI_BYTE, r, TS__EP_TAG_COLL, comm, &q[k++]);
        }
    } else {
        peer[k] = root;
        MPI_Irecv(stage, bytes, MPI_BYTE, root, TS__EP_TAG_COLL, comm, &q[k++]);
    }
    const ts_status st = wait_all(q, peer, n, comm, timeout_s, what);
    if (st == TS_OK && me != root) memcpy(buf, stage, (size_t)bytes);
    if (st == TS_OK) free(stage);
    free(q), free(peer);
    return st;
}

ts_status ts__ep_coll_wait(MPI_Request *req, MPI_Comm comm, double timeout_s, const char *what) {
    const double deadline = ts__ep_now_s() + timeout_s;
    ts__ep_backoff w = TS__EP_BACKOFF_INIT;
    for (;;) {
        int done = 0;
        MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (done) return TS_OK;
        if (ts__ep_backoff_step(&w) && ts__ep_now_s() > deadline) {
            int me = 0;
            MPI_Comm_rank(comm, &me);
            /* a nonblocking collective cannot be cancelled: the request stays with MPI */
            return ts__fail(TS_ERR_TIMEOUT, "%s: rank %d waited %.1f s for the other ranks, which did not all arrive",
                            what, me, timeout_s);
        }
    }
}

double ts__ep_default_timeout_s(void) {
    const char *s = getenv("TS_EP_TIMEOUT_S");
    if (s && *s) {
        char *end;
        const double v = strtod(s, &end);
        if (end != s && v > 0) return v;
    }
    return 100.0;
}
