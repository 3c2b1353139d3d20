/* Shared helpers of the multi-rank EP tests. */
#ifndef TS_EP_TEST_UTIL_H
#define TS_EP_TEST_UTIL_H

#include "tilestack/ep.h"
#include "tilestack/numerics.h"
#include "ts_prng.h"
#include "ts_test.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

extern int g_ep_rank, g_ep_size;
/* Ranks per machine (shared memory) when every machine holds the same number of consecutive
 * ranks, else 1: the largest node a test may give a buffer is this many ranks, so a test that
 * forces nodes of k ranks runs only where k divides it (across real hosts, k = R cannot). */
extern int g_ep_machine_ranks;
static inline bool ep_node_size_fits(int k) { return k >= 1 && g_ep_machine_ranks % k == 0; }

/* Deadline used by every test buffer: short, so a broken protocol fails fast. */
#define TS_EP_TEST_TIMEOUT_S 20.0

static inline ts_ep_buffer *ep_test_buffer(ts_test_ctx *ts_t_, int64_t nvl_bytes, double timeout_s) {
    ts_ep_buffer *b = NULL;
    ts_ep_buffer_options o = ts_ep_default_buffer_options();
    o.timeout_s = timeout_s;
    TS_CHECK_STATUS(ts_ep_buffer_create(MPI_COMM_WORLD, nvl_bytes, 0, false, &o, &b), TS_OK);
    return b;
}

/* Expects `mine` on bad_rank (or on every rank when bad_rank < 0) and TS_ERR_PEER naming
 * bad_rank on the others. */
static inline void ep_expect_status(ts_test_ctx *ts_t_, ts_status got, ts_status mine, int bad_rank) {
    if (bad_rank < 0 || g_ep_rank == bad_rank) {
        TS_CHECK_STATUS(got, mine);
    } else {
        TS_CHECK_STATUS(got, TS_ERR_PEER);
        char want[32];
        snprintf(want, sizeof want, "rank %d", bad_rank);
        TS_CHECK_MSG(strstr(ts_last_error(), want) != NULL, "message does not name %s: %s", want,
                     ts_last_error());
    }
}

/* Collectives on MPI_COMM_WORLD with a deadline (ep_test_coll.c): TS_EP_TEST_WAIT_S, else
 * the default below (a wait between tests spans the slowest rank's test). On expiry the rank
 * prints TS_ERR_TIMEOUT naming the rank that did not arrive and ends the job (MPI_Abort).
 * Arguments as MPI's (MPI_IN_PLACE accepted), on MPI_COMM_WORLD. */
#define TS_EP_TEST_WAIT_DEFAULT_S 120.0
double ep_test_wait_s(void);
void ep_test_barrier(void);
void ep_test_allreduce(const void *in, void *out, int count, MPI_Datatype dt, MPI_Op op);
void ep_test_allgather(const void *in, void *all, int count, MPI_Datatype dt); /* count per rank */
void ep_test_bcast(void *buf, int count, MPI_Datatype dt, int root);

/* 1 if every rank passes true. */
static inline bool ep_all(bool v) {
    int in = v ? 1 : 0, out = 0;
    ep_test_allreduce(&in, &out, 1, MPI_INT, MPI_MIN);
    return out != 0;
}

#endif
