/* The test driver's waits on peers (ep_test_util.h): the EP library's deadline collectives on
 * MPI_COMM_WORLD. A rank that is stopped or dead makes the others print TS_ERR_TIMEOUT naming
 * it and end the job (MPI_Abort), instead of spinning in MPI_Barrier until the outer timeout. */
#include "ep_test_util.h"

#include "ep/ep_coll.h"

#include <stdio.h>
#include <stdlib.h>

double ep_test_wait_s(void) {
    static double s;
    if (s == 0) {
        const char *e = getenv("TS_EP_TEST_WAIT_S");
        const double v = e && *e ? strtod(e, NULL) : 0;
        s = v > 0 ? v : TS_EP_TEST_WAIT_DEFAULT_S;
    }
    return s;
}

static void check(ts_status st) {
    if (st == TS_OK) return;
    fflush(stdout);
    fprintf(stderr, "[rank %d] %s: %s\n", g_ep_rank, ts_status_str(st), ts_last_error());
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
}

void ep_test_barrier(void) { check(ts__ep_coll_barrier(MPI_COMM_WORLD, ep_test_wait_s(), "ep test barrier")); }

void ep_test_allreduce(const void *in, void *out, int count, MPI_Datatype dt, MPI_Op op) {
    int ts = 0;
    MPI_Type_size(dt, &ts);
    if (in != MPI_IN_PLACE) memcpy(out, in, (size_t)count * (size_t)ts);
    check(ts__ep_coll_allreduce(out, count, dt, op, MPI_COMM_WORLD, ep_test_wait_s(), "ep test allreduce"));
}

void ep_test_allgather(const void *in, void *all, int count, MPI_Datatype dt) {
    int ts = 0;
    MPI_Type_size(dt, &ts);
    const int bytes = count * ts;
    const void *mine = in == MPI_IN_PLACE ? (const void *)((const char *)all + (size_t)g_ep_rank * (size_t)bytes) : in;
    check(ts__ep_coll_allgather(mine, bytes, all, MPI_COMM_WORLD, ep_test_wait_s(), "ep test allgather"));
}

void ep_test_bcast(void *buf, int count, MPI_Datatype dt, int root) {
    int ts = 0;
    MPI_Type_size(dt, &ts);
    check(ts__ep_coll_bcast(buf, count * ts, root, MPI_COMM_WORLD, ep_test_wait_s(), "ep test bcast"));
}
