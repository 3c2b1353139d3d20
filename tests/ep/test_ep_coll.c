/* The deadline collectives of src/ep/ep_coll.h: results (the reduction in rank order gives the
 * same bits on every rank) and a rank that never comes (named, within the deadline). */
#include "ep_test_util.h"

#include "ep/ep_coll.h"

#include <math.h>
#include <time.h>

TS_TEST(ep_coll_results) {
    const int R = g_ep_size, me = g_ep_rank;
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    /* sums whose rounding depends on the order: every rank must get the rank-order one */
    double v[3] = {1.0 + me * 1e-16, 1e16 * (me % 2 ? -1 : 1), 0.1 * (me + 1)};
    TS_CHECK_STATUS(ts__ep_coll_allreduce(v, 3, MPI_DOUBLE, MPI_SUM, c, 10, "t"), TS_OK);
    double want[3] = {1.0, 1e16, 0.1};
    for (int r = 1; r < R; r++)
        want[0] += 1.0 + r * 1e-16, want[1] += 1e16 * (r % 2 ? -1 : 1), want[2] += 0.1 * (r + 1);
    for (int i = 0; i < 3; i++) TS_CHECK_MSG(v[i] == want[i], "sum %d: %.17g, want %.17g", i, v[i], want[i]);
    int mx = me * 7 % (R + 1);
    TS_CHECK_STATUS(ts__ep_coll_allreduce(&mx, 1, MPI_INT, MPI_MAX, c, 10, "t"), TS_OK);
    int want_mx = 0;
    for (int r = 0; r < R; r++) want_mx = r * 7 % (R + 1) > want_mx ? r * 7 % (R + 1) : want_mx;
    TS_CHECK_EQ_INT(mx, want_mx);
    int64_t *all = calloc((size_t)R, sizeof *all);
    const int64_t mine = 1000 + me;
    TS_CHECK_STATUS(ts__ep_coll_allgather(&mine, (int)sizeof mine, all, c, 10, "t"), TS_OK);
    for (int r = 0; r < R; r++) TS_CHECK_EQ_INT(all[r], 1000 + r);
    free(all);
    char msg[24] = "";
    if (me == R - 1) snprintf(msg, sizeof msg, "from %d", me);
    TS_CHECK_STATUS(ts__ep_coll_bcast(msg, (int)sizeof msg, R - 1, c, 10, "t"), TS_OK);
    char w[24];
    snprintf(w, sizeof w, "from %d", R - 1);
    TS_CHECK_MSG(!strcmp(msg, w), "bcast: '%s'", msg);
    TS_CHECK_STATUS(ts__ep_coll_barrier(c, 10, "t"), TS_OK);
    MPI_Comm_free(&c);
}

/* The last rank skips a barrier: the others return TS_ERR_TIMEOUT naming it, after about the
 * deadline (not at once, not much later). */
TS_TEST(ep_coll_timeout_names_missing_rank) {
    const int R = g_ep_size, me = g_ep_rank;
    if (R < 2) return;
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    if (me != R - 1) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        TS_CHECK_STATUS(ts__ep_coll_barrier(c, 0.3, "probe"), TS_ERR_TIMEOUT);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        const double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        TS_CHECK_MSG(s >= 0.3 && s < 30, "returned after %.2f s", s);
        char want[48];
        snprintf(want, sizeof want, "for rank %d, which did not arrive", R - 1);
        TS_CHECK_MSG(strstr(ts_last_error(), want) != NULL, "message: %s", ts_last_error());
    }
    ep_test_barrier();
    MPI_Comm_free(&c); /* the skipped rank's unreceived messages go with it */
}
