/* Part of suite `ep`: how the rows of a dispatch can cross to another node over this MPI, for
 * issue 21's question whether rows should land in their final place without the staging copies.
 * Each rank sends N scattered rows (every token that reaches a rank of the next node, as the
 * dispatch workload routes them: T x P(hit) of T, hidden bytes each) to the next rank and
 * receives as many from the previous one into consecutive final rows (V1's layout: a source's
 * rows in its token order). Three ways, alternated round by round, time = the slowest rank's
 * (barrier to barrier), median over the rounds:
 *   pack/send/unpack  what ts_ep_dispatch does across nodes: the rows packed into a staging
 *                     message, MPI_Isend / MPI_Irecv, copied one by one into place (the baseline)
 *   put_indexed       one-sided: MPI_Put from x through an hindexed origin datatype straight
 *                     into the final rows of a window over the receive area (MPI_Win_fence)
 *   send_indexed      two-sided: MPI_Isend through the same hindexed datatype, MPI_Irecv straight
 *                     into the final rows (no staging on either side)
 * Rows put_indexed and send_indexed report their speed-up over pack/send/unpack. Every rank is
 * its own node for the MPI calls (run it across hosts, scripts/netns_hosts.sh, or on one). */
#include "bench.h"

#ifdef TILESTACK_HAVE_EP
#include "core/internal.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>

enum { V_PACK, V_PUT, V_SEND, NV };

typedef struct transport {
    int R, me, to, from;
    int64_t N, H;
    uint8_t *x, *stage, *recv, *area;
    MPI_Aint *disp;
    int64_t *src_row;
    MPI_Datatype rows; /* the N scattered rows of x */
    MPI_Win win;       /* over area */
} transport;

static void run(transport *t, int v) {
    const size_t H = (size_t)t->H;
    MPI_Request rq[2];
    int nr = 0;
    if (v == V_PACK) {
        MPI_Irecv(t->recv, (int)(t->N * t->H), MPI_BYTE, t->from, 71, MPI_COMM_WORLD, &rq[nr++]);
        for (int64_t i = 0; i < t->N; i++) memcpy(t->stage + (size_t)i * H, t->x + (size_t)t->src_row[i] * H, H);
        MPI_Isend(t->stage, (int)(t->N * t->H), MPI_BYTE, t->to, 71, MPI_COMM_WORLD, &rq[nr++]);
        MPI_Waitall(nr, rq, MPI_STATUSES_IGNORE);
        /* the records are unpacked one by one: rows, metadata, each to its own place */
        for (int64_t i = 0; i < t->N; i++) memcpy(t->area + (size_t)i * H, t->recv + (size_t)i * H, H);
    } else if (v == V_PUT) {
        MPI_Win_fence(0, t->win);
        MPI_Put(t->x, 1, t->rows, t->to, 0, (int)(t->N * t->H), MPI_BYTE, t->win);
        MPI_Win_fence(0, t->win);
    } else {
        MPI_Irecv(t->area, (int)(t->N * t->H), MPI_BYTE, t->from, 72, MPI_COMM_WORLD, &rq[nr++]);
        MPI_Isend(t->x, 1, t->rows, t->to, 72, MPI_COMM_WORLD, &rq[nr++]);
        MPI_Waitall(nr, rq, MPI_STATUSES_IGNORE);
    }
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The rows' check: what arrived is the previous rank's rows, in its token order. */
static bool arrived(const transport *t) {
    for (int64_t i = 0; i < t->N; i++) {
        const uint8_t *p = t->area + (size_t)(i * t->H);
        if (p[0] != (uint8_t)(t->from * 31 + t->src_row[i]) || p[t->H - 1] != (uint8_t)t->from) return false;
    }
    return true;
}

int ts__ep_transport_section(const ts__bench_opts *opts, int64_t T, int64_t H, double hit, int threads) {
    transport t;
    memset(&t, 0, sizeof t);
    MPI_Comm_size(MPI_COMM_WORLD, &t.R);
    MPI_Comm_rank(MPI_COMM_WORLD, &t.me);
    if (t.R < 2) return 0;
    t.to = (t.me + 1) % t.R;
    t.from = (t.me + t.R - 1) % t.R;
    t.H = H;
    /* the tokens reaching the next rank: a fixed pseudo-random subset of T at rate `hit` */
    t.src_row = malloc((size_t)T * sizeof *t.src_row);
    t.disp = malloc((size_t)T * sizeof *t.disp);
    t.x = malloc((size_t)(T * H));
    t.stage = malloc((size_t)(T * H));
    t.recv = malloc((size_t)(T * H));
    int ok = t.src_row && t.disp && t.x && t.stage && t.recv;
    for (int64_t i = 0; ok && i < T; i++) {
        const uint64_t z = (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull;
        if ((double)(z >> 11) * 0x1p-53 < hit) t.src_row[t.N++] = i;
    }
    /* rows are the same count on every rank (the subset does not depend on the rank) */
    for (int64_t i = 0; ok && i < T; i++) {
        memset(t.x + (size_t)(i * H), t.me * 31 + (int)i, (size_t)H);
        t.x[(size_t)(i * H + H - 1)] = (uint8_t)t.me;
    }
    for (int64_t i = 0; ok && i < t.N; i++) t.disp[i] = (MPI_Aint)(t.src_row[i] * H);
    int all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    int rc = 0;
    if (all_ok) {
        MPI_Type_create_hindexed_block((int)t.N, (int)H, t.disp, MPI_BYTE, &t.rows);
        MPI_Type_commit(&t.rows);
        /* a window needs an osc component that works on this transport (Open MPI 4.1's default,
         * osc/rdma, refuses TCP: then only --mca osc pt2pt has one); without, no put row */
        MPI_Comm wc;
        MPI_Comm_dup(MPI_COMM_WORLD, &wc);
        MPI_Comm_set_errhandler(wc, MPI_ERRORS_RETURN);
        int won = MPI_Win_allocate((MPI_Aint)(t.N * H > 0 ? t.N * H : 1), 1, MPI_INFO_NULL, wc, &t.area,
                                   &t.win) == MPI_SUCCESS, all_won = 0;
        MPI_Allreduce(&won, &all_won, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (!all_won) {
            if (won) MPI_Win_free(&t.win);
            t.win = MPI_WIN_NULL;
            t.area = malloc((size_t)(t.N * H > 0 ? t.N * H : 1));
            if (t.me == 0)
                printf("internode transport: no MPI window over this transport (MPI_Win_allocate failed; "
                       "Open MPI: --mca osc pt2pt): no put row\n");
        }
        const int rounds = opts->quick ? 8 : 20;
        double *s = malloc((size_t)(NV * rounds) * sizeof *s);
        bool good = s != NULL;
        good = good && t.area;
        for (int r = -1; good && r < rounds; r++)
            for (int v = 0; v < NV; v++) {
                if (v == V_PUT && t.win == MPI_WIN_NULL) continue;
                memset(t.area, 0, (size_t)(t.N * H));
                MPI_Barrier(MPI_COMM_WORLD);
                const double t0 = ts__now_s();
                run(&t, v);
                double dt = ts__now_s() - t0, slowest = 0;
                MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
                int mine = arrived(&t), all = 0;
                MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
                good = all;
                if (r >= 0) s[v * rounds + r] = slowest; /* round -1: the warm-up */
            }
        if (!good) {
            if (t.me == 0) fprintf(stderr, "tilestack bench ep: transport rows arrived wrong\n");
            rc = 1;
        }
        double med[NV] = {0};
        for (int v = 0; good && v < NV; v++) {
            if (v == V_PUT && t.win == MPI_WIN_NULL) continue;
            qsort(s + v * rounds, (size_t)rounds, sizeof *s, cmp_double);
            med[v] = s[v * rounds + rounds / 2];
        }
        if (good && t.me == 0) {
            char shape[96];
            snprintf(shape, sizeof shape, "R=%d N=%lld H=%lld", t.R, (long long)t.N, (long long)H);
            printf("internode transport: %lld of %lld rows (%.1f MiB) to the next rank, each rank its own "
                   "node; pack/send/unpack %.3f ms\n", (long long)t.N, (long long)T,
                   (double)(t.N * H) / (1 << 20), 1e3 * med[V_PACK]);
            static const char *names[NV] = {NULL, "internode_rows_put_indexed", "internode_rows_send_indexed"};
            for (int v = V_PUT; v < NV; v++) {
                if (v == V_PUT && t.win == MPI_WIN_NULL) continue;
                ts__bench_row row;
                memset(&row, 0, sizeof row);
                row.suite = "ep";
                row.name = names[v];
                row.shape = shape;
                row.dtype = "u8";
                row.threads = threads;
                row.t.median_s = med[v];
                row.t.min_s = s[v * rounds];
                row.t.runs = rounds;
                row.t.inner = 1;
                row.bytes = 2.0 * (double)(t.N * H) * t.R; /* read once, written once, every rank */
                row.roof = TS__ROOF_MEMCPY;
                row.roof_fixed = true;
                row.baseline = "pack/send/unpack";
                row.baseline_seconds = med[V_PACK];
                ts__bench_report(opts, &row);
            }
        }
        free(s);
        if (t.win != MPI_WIN_NULL) MPI_Win_free(&t.win);
        else free(t.area);
        MPI_Comm_free(&wc);
        MPI_Type_free(&t.rows);
    } else {
        rc = 1;
    }
    free(t.src_row);
    free(t.disp);
    free(t.x);
    free(t.stage);
    free(t.recv);
    return rc;
}
#endif
