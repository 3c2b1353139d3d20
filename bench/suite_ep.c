/* Suite `ep`: DeepEP normal-mode dispatch (FP8) and combine (BF16) over shared memory against
 * the MPI_Alltoallv reference, timed in the same run. Run it under mpirun:
 *   mpirun --oversubscribe -np 4 tilestack bench ep [--quick]
 * Workload (DeepEP's normal-kernel benchmark): hidden 7168, top-8 of 256 experts, uniform
 * random distinct experts, T tokens per rank (4096; --quick 1024; TS_BENCH_EP_TOKENS=T).
 * Byte accounting as DeepEP's test_intranode.py: per rank, received rows x hidden x 2 (BF16
 * equivalent, self traffic included), times (1 + 4/128)/2 for FP8 dispatch; GB = 1e9. The
 * table reports, per row, bytes = 2 x the sum of those bytes over all ranks (every counted
 * byte read once and written once) against the memcpy bandwidth of the whole machine, so
 * roofline_frac is "fraction of memcpy speed". The DeepEP per-rank figure is printed below.
 * The thr column = threads of all ranks together (at most the cores): the roofline is the
 * machine's. Time per call = the slowest rank's (max over ranks), median of the samples; every rank runs
 * the same number of calls. Threads per rank = max(1, cores / ranks).
 * The reference allocates per call (as a straightforward implementation does); large blocks
 * stay in the heap (mallopt: no mmap, no trim) so it pays no page faults after warm-up.
 * TS_BENCH_FILTER=substring keeps only matching rows. */
#include "bench.h"

#ifdef TILESTACK_HAVE_EP
#include "core/internal.h"
#include "tilestack/ep.h"

#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#define SUITE "ep"

typedef struct ep_bench {
    ts_ep_buffer *buf;
    ts_ep_handle *h;
    ts_tensor x, xs, idx, w, tpr, tpe, in_rank, cx, out;
    ts_ep_dispatch_result res;
    int64_t E;
} ep_bench;

typedef enum { OP_DISPATCH, OP_DISPATCH_CACHED, OP_COMBINE, OP_COMBINE_ZERO_COPY, OP_REF_DISPATCH, OP_REF_COMBINE } ep_op;

static ts_status run_op(ep_bench *b, ep_op op, ts_ep_reference_result *ref) {
    ts_ep_dispatch_args a;
    memset(&a, 0, sizeof a);
    a.x = &b->x;
    a.x_scales = &b->xs;
    switch (op) {
    case OP_DISPATCH:
        TS__RETURN_IF_ERROR(ts_ep_get_dispatch_layout(b->buf, &b->idx, b->E, &b->tpr, NULL, &b->tpe, &b->in_rank));
        a.topk_idx = &b->idx;
        a.topk_weights = &b->w;
        a.num_tokens_per_rank = &b->tpr;
        a.num_tokens_per_expert = &b->tpe;
        a.is_token_in_rank = &b->in_rank;
        {
            ts_ep_handle *h = NULL;
            ts_status st = ts_ep_dispatch(b->buf, &a, &b->res, &h);
            if (st == TS_OK) {
                ts_ep_handle_destroy(b->h);
                b->h = h;
            }
            return st;
        }
    case OP_DISPATCH_CACHED:
        a.handle = b->h;
        return ts_ep_dispatch(b->buf, &a, &b->res, NULL);
    case OP_COMBINE:
        return ts_ep_combine(b->buf, b->h, &b->cx, NULL, NULL, NULL, NULL, &b->out, NULL);
    case OP_COMBINE_ZERO_COPY: {
        /* the expert outputs were written into the combine area beforehand (not timed) */
        ts_tensor zx;
        TS__RETURN_IF_ERROR(ts_ep_get_combine_buffer(b->buf, b->h, b->cx.shape[1], &zx));
        return ts_ep_combine(b->buf, b->h, &zx, NULL, NULL, NULL, NULL, &b->out, NULL);
    }
    case OP_REF_DISPATCH:
        ts_ep_reference_free(ref);
        return ts_ep_reference_dispatch(MPI_COMM_WORLD, &b->x, &b->xs, &b->idx, &b->w, b->E, 1, ref);
    case OP_REF_COMBINE:
        return ts_ep_reference_combine(MPI_COMM_WORLD, ref, &b->cx, NULL, NULL, NULL, &b->out, NULL);
    }
    return TS_ERR_INTERNAL;
}

/* Same number of calls on every rank; per-sample time = the slowest rank's. */
static ts_status time_op(ep_bench *b, ep_op op, ts_ep_reference_result *ref, bool quick, ts__timing *t) {
    const int warm = 2, runs = quick ? 5 : 9;
    double samples[16];
    for (int i = 0; i < warm + runs; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = ts__now_s();
        ts_status st = run_op(b, op, ref);
        double dt = ts__now_s() - t0, mx = 0;
        int bad = st != TS_OK, anybad = 0;
        MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (anybad) return st != TS_OK ? st : TS_ERR_PEER;
        MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (i >= warm) samples[i - warm] = mx;
    }
    for (int i = 1; i < runs; i++)
        for (int j = i; j > 0 && samples[j - 1] > samples[j]; j--) {
            double x = samples[j];
            samples[j] = samples[j - 1];
            samples[j - 1] = x;
        }
    t->median_s = samples[runs / 2];
    t->min_s = samples[0];
    t->runs = runs;
    t->inner = 1;
    return TS_OK;
}

static bool row_wanted(const char *name, const char *shape) {
    const char *f = getenv("TS_BENCH_FILTER");
    if (!f || !*f) return true;
    char buf[256];
    snprintf(buf, sizeof buf, "%s %s", name, shape);
    return strstr(buf, f) != NULL;
}

int ts__suite_ep(const ts__bench_opts *opts) {
    int inited = 0, we_init = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        MPI_Init(NULL, NULL);
        we_init = 1;
    }
    int R, me;
    MPI_Comm_size(MPI_COMM_WORLD, &R);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    /* Heap only (no per-call mmap), never trimmed: the reference reuses warm pages. */
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, -1);
    const int cores = ts_get_cpu_info()->logical_cpus > 0 ? ts_get_cpu_info()->logical_cpus : 1;
    const int threads = opts->threads > 0 ? opts->threads : (cores / R > 0 ? cores / R : 1);
    int64_t T = opts->quick ? 1024 : 4096;
    const char *te = getenv("TS_BENCH_EP_TOKENS");
    if (te && atoll(te) > 0) T = atoll(te);
    const int64_t H = 7168, K = 8, E = 256, S = H / 128;
    int rc = 0;

    /* The machine roofline, probed by rank 0 while the others wait. */
    const ts__machine *m = NULL;
    if (me == 0) {
        m = ts__probe_machine(cores, opts->quick);
        printf("\n== suite ep: %d ranks x %d threads, %lld tokens/rank, hidden %lld, top-%lld of %lld experts ==\n",
               R, threads, (long long)T, (long long)H, (long long)K, (long long)E);
        ts__bench_print_machine(stdout, m);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    ts_set_num_threads(threads);

    ep_bench b;
    memset(&b, 0, sizeof b);
    b.E = E;
    uint8_t *x = malloc((size_t)(T * H));
    float *xs = malloc((size_t)(T * S) * 4), *w = malloc((size_t)(T * K) * 4);
    int64_t *idx = malloc((size_t)(T * K) * 8);
    int32_t *tpr = malloc((size_t)R * 4), *tpe = malloc((size_t)E * 4);
    bool *in_rank = malloc((size_t)(T * R));
    ts__bench_rng rng = {0x9E3779B97F4A7C15ull ^ (uint64_t)(me + 1) * 0x2545F4914F6CDD1Dull};
    for (int64_t i = 0; i < T * H; i++) x[i] = (uint8_t)(ts__bench_rng_next(&rng) & 0x77);
    for (int64_t i = 0; i < T * S; i++) xs[i] = 1.0f / 64;
    for (int64_t t = 0; t < T; t++)
        for (int64_t k = 0; k < K; k++) {
            int64_t e;
            bool dup;
            do {
                e = (int64_t)(ts__bench_rng_next(&rng) % (uint64_t)E);
                dup = false;
                for (int64_t j = 0; j < k; j++) dup |= idx[t * K + j] == e;
            } while (dup);
            idx[t * K + k] = e;
            w[t * K + k] = 0.125f;
        }
    b.x = ts_tensor_2d(x, TS_E4M3, T, H);
    b.xs = ts_tensor_2d(xs, TS_F32, T, S);
    b.idx = ts_tensor_2d(idx, TS_I64, T, K);
    b.w = ts_tensor_2d(w, TS_F32, T, K);
    b.tpr = ts_tensor_1d(tpr, TS_I32, R);
    b.tpe = ts_tensor_1d(tpe, TS_I32, E);
    b.in_rank = ts_tensor_2d(in_rank, TS_BOOL, T, R);

    /* Size the segment for the rows actually received (the worst-case hint would need R*T). */
    ts_ep_buffer *probe = NULL;
    ts_status st = ts_ep_buffer_create(MPI_COMM_WORLD, 4096, 0, false, NULL, &probe);
    if (st == TS_OK) st = ts_ep_get_dispatch_layout(probe, &b.idx, E, &b.tpr, NULL, &b.tpe, &b.in_rank);
    ts_ep_buffer_destroy(probe);
    int64_t *recv = calloc((size_t)R, 8), max_recv = 0;
    for (int r = 0; r < R; r++) recv[r] = tpr[r];
    MPI_Allreduce(MPI_IN_PLACE, recv, R, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    int64_t sum_recv = 0;
    for (int r = 0; r < R; r++) {
        sum_recv += recv[r];
        if (recv[r] > max_recv) max_recv = recv[r];
    }
    const int64_t my_recv = recv[me];
    free(recv);
    int64_t nvl = 0;
    if (st == TS_OK) st = ts_ep_get_buffer_size_hint(1, max_recv, H, (int32_t)K, S, false, &nvl);
    if (st == TS_OK) st = ts_ep_buffer_create(MPI_COMM_WORLD, nvl, 0, false, NULL, &b.buf);
    uint16_t *cx = malloc((size_t)((my_recv > 0 ? my_recv : 1) * H) * 2), *out = malloc((size_t)(T * H) * 2);
    for (int64_t i = 0; i < my_recv * H; i++) cx[i] = (uint16_t)(0x3f80 + (ts__bench_rng_next(&rng) & 0x7f));
    b.cx = ts_tensor_2d(cx, TS_BF16, my_recv, H);
    b.out = ts_tensor_2d(out, TS_BF16, T, H);
    if (st != TS_OK) {
        if (me == 0) fprintf(stderr, "tilestack bench ep: setup failed: %s\n", ts_last_error());
        rc = 1;
        goto done;
    }
    if (me == 0) {
        printf("segment %.1f MiB/rank, received rows/rank: mean %.0f, max %lld\n", (double)nvl / (1 << 20),
               (double)sum_recv / R, (long long)max_recv);
        ts__bench_table_header(stdout);
    }
    {
        const double fp8 = (1.0 + 4.0 / 128) / 2;
        const double deep_disp = (double)sum_recv * H * 2 * fp8, deep_comb = (double)sum_recv * H * 2; /* all ranks */
        char shape[96];
        snprintf(shape, sizeof shape, "R=%d T=%lld H=%lld k=%lld E=%lld", R, (long long)T, (long long)H, (long long)K,
                 (long long)E);
        struct { const char *name, *dtype; ep_op op, base; double deep; } rows[] = {
            {"dispatch", "e4m3", OP_DISPATCH, OP_REF_DISPATCH, deep_disp},
            {"dispatch_cached", "e4m3", OP_DISPATCH_CACHED, OP_REF_DISPATCH, deep_disp},
            {"combine", "bf16", OP_COMBINE, OP_REF_COMBINE, deep_comb},
            {"combine_zero_copy", "bf16", OP_COMBINE_ZERO_COPY, OP_REF_COMBINE, deep_comb},
        };
        ts_ep_reference_result ref;
        memset(&ref, 0, sizeof ref);
        /* combine rows need a handle and a reference routing */
        if (run_op(&b, OP_DISPATCH, NULL) != TS_OK || run_op(&b, OP_REF_DISPATCH, &ref) != TS_OK) {
            if (me == 0) fprintf(stderr, "tilestack bench ep: dispatch failed: %s\n", ts_last_error());
            rc = 1;
            goto done;
        }
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
            if (!row_wanted(rows[i].name, shape)) continue;
            if (rows[i].op == OP_COMBINE_ZERO_COPY) {
                ts_tensor zx;
                if (ts_ep_get_combine_buffer(b.buf, b.h, H, &zx) == TS_OK)
                    memcpy(zx.data, cx, (size_t)(my_recv * H) * 2);
            }
            ts__bench_row row;
            memset(&row, 0, sizeof row);
            row.suite = SUITE;
            row.name = rows[i].name;
            row.shape = shape;
            row.dtype = rows[i].dtype;
            /* the roofline is the whole machine's: all ranks' threads (at most the cores) */
            row.threads = R * threads < cores ? R * threads : cores;
            row.bytes = 2.0 * rows[i].deep;
            row.roof = TS__ROOF_MEMCPY;
            row.baseline = "MPI_Alltoallv";
            ts__timing tb;
            ts_status s1 = time_op(&b, rows[i].op, &ref, opts->quick, &row.t);
            ts_status s2 = s1 == TS_OK ? time_op(&b, rows[i].base, &ref, opts->quick, &tb) : s1;
            if (s1 != TS_OK || s2 != TS_OK) {
                if (me == 0) ts__bench_report_error(opts, &row, ts_last_error());
                rc = 1;
                continue;
            }
            row.baseline_seconds = tb.median_s;
            if (me == 0) {
                ts__bench_report(opts, &row);
                printf("    DeepEP accounting: %.2f GB/s per rank (ours), %.2f GB/s (Alltoallv), %.2fx\n",
                       rows[i].deep / R / row.t.median_s * 1e-9, rows[i].deep / R / tb.median_s * 1e-9,
                       tb.median_s / row.t.median_s);
            }
        }
        ts_ep_reference_free(&ref);
    }
done:
    ts_ep_handle_destroy(b.h);
    ts_ep_buffer_destroy(b.buf);
    free(x);
    free(xs);
    free(w);
    free(idx);
    free(tpr);
    free(tpe);
    free(in_rank);
    free(cx);
    free(out);
    MPI_Barrier(MPI_COMM_WORLD);
    if (we_init) MPI_Finalize();
    return rc;
}

#else

int ts__suite_ep(const ts__bench_opts *opts) {
    (void)opts;
    printf("suite ep: this build has no MPI (the EP module is not built)\n");
    return 0;
}

#endif
