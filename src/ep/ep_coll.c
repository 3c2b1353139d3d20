/* Collectives with a deadline (ep_coll.h): point-to-point messages polled under the same
 * backoff and clock as every other EP wait, so that a peer that never comes is named. */
#include "ep/ep_coll.h"
#include "ep/ep_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Staging buffers whose requests could not be retired after a timeout: MPI may still write
 * into them, so they are never freed; kept reachable here (they are few, small, and only
 * exist on a job that is about to end) so that leak checkers see them as held, which they are. */
#define MAX_ORPHANS 64
static void *g_orphans[MAX_ORPHANS];
static int g_n_orphans;

/* Marks the peers of the requests still pending in `late`, then cancels them and waits a
 * bounded time for the cancellations to complete (an unmatched receive completes at once).
 * Returns true when every request is retired, so the staging they point into may be freed. */
static bool give_up(MPI_Request *q, int n, const int *peer, char *late) {
    for (int i = 0; i < n; i++) {
        if (q[i] == MPI_REQUEST_NULL) continue;
        int flag = 0;
        MPI_Test(&q[i], &flag, MPI_STATUS_IGNORE);
        if (flag) continue;
        if (late) late[peer[i]] = 1;
        MPI_Cancel(&q[i]);
    }
    const double deadline = ts__ep_now_s() + 1.0;
    ts__ep_backoff w = TS__EP_BACKOFF_INIT;
    for (;;) {
        int done = 0;
        MPI_Testall(n, q, &done, MPI_STATUSES_IGNORE);
        if (done) return true;
        if (ts__ep_backoff_step(&w) && ts__ep_now_s() > deadline) break;
    }
    for (int i = 0; i < n; i++)
        if (q[i] != MPI_REQUEST_NULL) MPI_Request_free(&q[i]);
    return false;
}

/* After a failed wait: frees the staging when its requests are retired, else keeps it. */
static void release_stage(void *stage, bool retired) {
    if (retired || g_n_orphans == MAX_ORPHANS) {
        if (retired) free(stage);
        return; /* beyond MAX_ORPHANS: left unreferenced (a leak report at worst) */
    }
    g_orphans[g_n_orphans++] = stage;
}

static ts_status timed_out(MPI_Request *q, const int *peer, int n, MPI_Comm comm, double timeout_s,
                           const char *what, bool *retired) {
    int me = 0, R = 1;
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &R);
    char *late = calloc((size_t)R, 1);
    *retired = give_up(q, n, peer, late);
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
                          const char *what, bool *retired) {
    const double deadline = ts__ep_now_s() + timeout_s;
    ts__ep_backoff w = TS__EP_BACKOFF_INIT;
    for (;;) {
        int done = 0;
        MPI_Testall(n, q, &done, MPI_STATUSES_IGNORE);
        if (done) return TS_OK;
        if (ts__ep_backoff_step(&w) && ts__ep_now_s() > deadline)
            return timed_out(q, peer, n, comm, timeout_s, what, retired);
    }
}

/* Every rank's `bytes` into a new [R * bytes] staging, returned in *out (the caller frees it;
 * after a failure it is NULL and the staging freed or, if MPI may still write it, kept). */
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
    bool retired = true;
    if (st == TS_OK) st = wait_all(q, peer, n, comm, timeout_s, what, &retired);
    else retired = give_up(q, n - 1, peer, NULL); /* the failed post left no request */
    free(q), free(peer);
    if (st == TS_OK) *out = stage;
    else release_stage(stage, retired);
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
    bool retired = true;
    const ts_status st = wait_all(q, peer, n, comm, timeout_s, what, &retired);
    if (st == TS_OK && me != root) memcpy(buf, stage, (size_t)bytes);
    if (st == TS_OK) free(stage);
    else release_stage(stage, retired);
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

ts_status ts__ep_ranks_per_machine(MPI_Comm comm, double timeout_s, const char *what, int *per) {
    MPI_Comm shared;
    MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared);
    int sz = 0;
    MPI_Comm_size(shared, &sz);
    MPI_Comm_free(&shared);
    int mm[2] = {sz, -sz};
    TS__RETURN_IF_ERROR(ts__ep_coll_allreduce(mm, 2, MPI_INT, MPI_MIN, comm, timeout_s, what));
    if (mm[0] != -mm[1])
        return ts__fail(TS_ERR_UNSUPPORTED, "%s: nodes hold different numbers of ranks (%d to %d)", what, mm[0],
                        -mm[1]);
    *per = sz;
    return TS_OK;
}
