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
 * TS_BENCH_FILTER=substring keeps only matching rows (one containing "ll_" skips the normal
 * rows' setup). The low-latency rows (ll_*) follow; their workload is described at ll_run. */
#include "bench.h"

#ifdef TILESTACK_HAVE_EP
#include "core/internal.h"
#include "suite_ep_a2a_expanded.h"
#include "tilestack/ep.h"
#include "tilestack/ep_elastic.h"
#include "tilestack/numerics.h"
#include "tilestack/quant.h"

#include <math.h>

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
    /* V2 rows: the elastic buffer, its handles (normal, expanded), the expanded combine input */
    ts_ep_elastic_buffer *eb;
    ts_ep_elastic_handle *eh, *ehx;
    ts_tensor ecx;
    ts_ep_elastic_dispatch_result er; /* the last V2 dispatch's outputs */
    ts__a2a_expanded *a2a; /* the expanded rows' baseline */
} ep_bench;

typedef enum {
    OP_DISPATCH, OP_DISPATCH_CACHED, OP_COMBINE, OP_COMBINE_ZERO_COPY, OP_REF_DISPATCH, OP_REF_COMBINE,
    OP_LL_DISPATCH, OP_LL_COMBINE, OP_LL_COMBINE_ZERO_COPY, OP_LL_REF_DISPATCH, OP_LL_REF_COMBINE,
    OP_EL_DISPATCH, OP_EL_DISPATCH_EXPANDED, OP_EL_COMBINE, OP_EL_COMBINE_EXPANDED,
    OP_A2A_DISPATCH_EXPANDED, OP_A2A_COMBINE_EXPANDED
} ep_op;

/* Low-latency rows (see ll_section). */
typedef struct ll_bench {
    ts_ep_buffer *buf;
    ts_ep_ll_handle *h;
    int R, me;
    int64_t T, H, K, E, El, N;
    ts_tensor x, idx, w, rx, rs, rc, cx, out;
    /* the reference: one message per (token, expert) through MPI_Alltoallv */
    uint8_t *q;      /* [N, H] e4m3 */
    float *qs;       /* [N, H/128] */
    uint8_t *sendb, *recvb; /* messages */
    int *scnt, *sdsp, *rcnt, *rdsp; /* bytes */
    int32_t *pos;    /* [N*K]: message index of (t, k) in its destination's block */
    int64_t nrecv;   /* messages received */
    uint8_t *ref_rx; float *ref_rs; int32_t *ref_rc; /* unpacked like recv_x */
    uint16_t *csend, *crecv; /* combine rows */
} ll_bench;
static ll_bench *g_ll;
/* bench/suite_ep_transport.c */
int ts__ep_transport_section(const ts__bench_opts *opts, int64_t T, int64_t H, double hit, int threads);
static ts_status ll_run(ll_bench *l, ep_op op);

/* V2 dispatch (layout inside) and combine; a new dispatch replaces the row's handle. */
static ts_status run_elastic_op(ep_bench *b, ep_op op) {
    const bool expand = op == OP_EL_DISPATCH_EXPANDED || op == OP_EL_COMBINE_EXPANDED;
    ts_ep_elastic_handle **h = expand ? &b->ehx : &b->eh;
    if (op == OP_EL_COMBINE || op == OP_EL_COMBINE_EXPANDED)
        return ts_ep_elastic_combine(b->eb, *h, expand ? &b->ecx : &b->cx, NULL, NULL, NULL, 0, &b->out, NULL);
    ts_ep_elastic_dispatch_args a;
    memset(&a, 0, sizeof a);
    a.x = &b->x;
    a.sf = &b->xs;
    a.topk_idx = &b->idx;
    a.topk_weights = &b->w;
    a.num_experts = b->E;
    a.expert_alignment = 1;
    a.do_expand = expand;
    ts_ep_elastic_handle *nh = NULL;
    const ts_status st = ts_ep_elastic_dispatch(b->eb, &a, &b->er, &nh);
    if (st == TS_OK) {
        ts_ep_elastic_handle_destroy(*h);
        *h = nh;
    }
    return st;
}

static ts_status run_op(ep_bench *b, ep_op op, ts_ep_reference_result *ref) {
    if (op == OP_A2A_DISPATCH_EXPANDED) return ts__a2a_expanded_dispatch(b->a2a);
    if (op == OP_A2A_COMBINE_EXPANDED) return ts__a2a_expanded_combine(b->a2a, b->ecx.data, b->out.data);
    if (op >= OP_EL_DISPATCH) return run_elastic_op(b, op);
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
    default:
        return ll_run(g_ll, op);
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

/* Top-K routing of T tokens: K distinct experts of E each, drawn from rng, all weights 1/8. */
static void random_routing(ts__bench_rng *rng, int64_t T, int64_t K, int64_t E, int64_t *idx,
                           float *w) {
    for (int64_t t = 0; t < T; t++)
        for (int64_t k = 0; k < K; k++) {
            int64_t e;
            bool dup;
            do {
                e = (int64_t)(ts__bench_rng_next(rng) % (uint64_t)E);
                dup = false;
                for (int64_t j = 0; j < k; j++) dup |= idx[t * K + j] == e;
            } while (dup);
            idx[t * K + k] = e;
            w[t * K + k] = 0.125f;
        }
}

/* The chance that a token's k distinct uniform experts (of E) include one of a rank's El:
 * 1 - C(E - El, k) / C(E, k) (docs/ep.md "Scaling model"). */
static double hit_probability(int64_t E, int64_t El, int64_t k) {
    double miss = 1.0;
    for (int64_t i = 0; i < k; i++) miss *= (double)(E - El - i) / (double)(E - i);
    return 1.0 - (miss > 0 ? miss : 0.0);
}

/* One timed row and its MPI_Alltoallv baseline; deep = DeepEP's byte count, all ranks
 * (against the token dispatcher: the expanded rows' bytes); base_name NULL: "MPI_Alltoallv";
 * moved: the bytes read and written for the roofline (0: 2 deep, each byte read and written). */
typedef struct ep_row_spec {
    const char *name, *dtype;
    ep_op op, base;
    double deep;
    const char *base_name;
    double moved;
} ep_row_spec;

/* The report row of r on R ranks of `threads` threads each: the roofline is the whole
 * machine's, all ranks' threads (at most the cores). */
static ts__bench_row ep_row(const ep_row_spec *r, const char *shape, int R, int threads, int cores) {
    ts__bench_row row;
    memset(&row, 0, sizeof row);
    row.suite = SUITE;
    row.name = r->name;
    row.shape = shape;
    row.dtype = r->dtype;
    row.threads = R * threads < cores ? R * threads : cores;
    row.bytes = r->moved > 0 ? r->moved : 2.0 * r->deep;
    row.roof = TS__ROOF_MEMCPY;
    row.roof_fixed = true; /* the share of memcpy speed is the figure, wherever the bytes sit */
    row.baseline = r->base_name ? r->base_name : "MPI_Alltoallv";
    return row;
}

/* Times row r and its baseline and reports both on rank 0 (with DeepEP's per-rank figure);
 * 1 on failure, else 0. */
static int run_row(ep_bench *b, const ep_row_spec *r, const char *shape, int R, int threads, int cores,
                   ts_ep_reference_result *ref, const ts__bench_opts *opts, int me) {
    ts__bench_row row = ep_row(r, shape, R, threads, cores);
    ts__timing tb;
    ts_status s1 = time_op(b, r->op, ref, opts->quick, &row.t);
    ts_status s2 = s1 == TS_OK ? time_op(b, r->base, ref, opts->quick, &tb) : s1;
    if (s1 != TS_OK || s2 != TS_OK) {
        if (me == 0) ts__bench_report_error(opts, &row, ts_last_error());
        return 1;
    }
    row.baseline_seconds = tb.median_s;
    if (me == 0) {
        ts__bench_report(opts, &row);
        printf("    DeepEP accounting: %.2f GB/s per rank (ours), %.2f GB/s (Alltoallv), %.2fx\n",
               r->deep / R / row.t.median_s * 1e-9, r->deep / R / tb.median_s * 1e-9,
               tb.median_s / row.t.median_s);
    }
    return 0;
}

static bool row_wanted(const char *name, const char *shape) {
    return ts__bench_wanted(getenv("TS_BENCH_FILTER"), name, shape);
}

/* ---- Low-latency rows: DeepEP's test_low_latency.py workload ----
 * 128 tokens per rank (TS_BENCH_EP_LL_TOKENS), hidden 7168, top-8 of 256 experts, FP8 dispatch
 * (per-128 cast included in the time, as upstream's kernel does it) and BF16 combine, against
 * an MPI_Alltoallv reference doing the same work: the same cast (ts_per_token_cast_to_fp8),
 * one 16-byte-header message per (token, expert) packed by destination, MPI_Alltoall of the
 * counts, MPI_Alltoallv of the messages, unpack into [experts, R*T, hidden]; combine sends
 * the rows back the same way and reduces with the weights in top-k order. Byte accounting as
 * test_low_latency.py: per valid selection, dispatch hidden + hidden/128*4 + 16 bytes, combine
 * 2*hidden; bytes in the table = 2 x that sum over all ranks (read + write), as above.
 * The LL area is ts_ep_get_low_latency_rdma_size_hint's. */
static ts_status ll_run(ll_bench *l, ep_op op) {
    const int R = l->R;
    const int64_t H = l->H, K = l->K, El = l->El, S = (int64_t)R * l->T, nsc = H / 128, N = l->N;
    const int64_t msg = 16 + H + nsc * 4;
    switch (op) {
    case OP_LL_DISPATCH: {
        ts_ep_ll_dispatch_args a;
        memset(&a, 0, sizeof a);
        a.x = &l->x;
        a.topk_idx = &l->idx;
        a.num_max_dispatch_tokens_per_rank = l->T;
        a.num_experts = l->E;
        a.use_fp8 = true;
        ts_ep_ll_dispatch_out o = {&l->rx, &l->rs, &l->rc};
        ts_ep_ll_handle *h = NULL;
        ts_status st = ts_ep_low_latency_dispatch(l->buf, &a, &o, &h, NULL);
        if (st == TS_OK) {
            ts_ep_ll_handle_destroy(l->h);
            l->h = h;
        }
        return st;
    }
    case OP_LL_COMBINE:
    case OP_LL_COMBINE_ZERO_COPY: {
        ts_ep_ll_combine_args a;
        memset(&a, 0, sizeof a);
        a.x = op == OP_LL_COMBINE ? &l->cx : NULL;
        a.zero_copy = op == OP_LL_COMBINE_ZERO_COPY;
        a.topk_idx = &l->idx;
        a.topk_weights = &l->w;
        a.handle = l->h;
        return ts_ep_low_latency_combine(l->buf, &a, &l->out, NULL);
    }
    case OP_LL_REF_DISPATCH: {
        ts_tensor tq = ts_tensor_2d(l->q, TS_E4M3, N, H), ts = ts_tensor_2d(l->qs, TS_F32, N, nsc);
        TS__RETURN_IF_ERROR(ts_per_token_cast_to_fp8(&l->x, false, 128, false, &tq, &ts));
        const int64_t *idx = l->idx.data;
        int64_t *fill = calloc((size_t)R, 8);
        for (int d = 0; d < R; d++) l->scnt[d] = 0;
        for (int64_t i = 0; i < N * K; i++)
            if (idx[i] >= 0) l->pos[i] = l->scnt[idx[i] / El]++;
        for (int d = 0; d < R; d++) {
            l->sdsp[d] = d ? l->sdsp[d - 1] + l->scnt[d - 1] * (int)msg : 0;
        }
        for (int64_t t = 0; t < N; t++)
            for (int64_t k = 0; k < K; k++) {
                const int64_t e = idx[t * K + k];
                if (e < 0) continue;
                const int d = (int)(e / El);
                uint8_t *m = l->sendb + l->sdsp[d] + fill[d]++ * msg;
                const int32_t hdr[4] = {(int32_t)t, (int32_t)(e % El), 0, 0};
                memcpy(m, hdr, 16);
                memcpy(m + 16, l->q + t * H, (size_t)H);
                memcpy(m + 16 + H, l->qs + t * nsc, (size_t)nsc * 4);
            }
        free(fill);
        int sc[1024];
        for (int d = 0; d < R; d++) sc[d] = l->scnt[d] * (int)msg;
        MPI_Alltoall(sc, 1, MPI_INT, l->rcnt, 1, MPI_INT, MPI_COMM_WORLD);
        l->nrecv = 0;
        for (int d = 0; d < R; d++) {
            l->rdsp[d] = d ? l->rdsp[d - 1] + l->rcnt[d - 1] : 0;
            l->nrecv += l->rcnt[d] / msg;
        }
        MPI_Alltoallv(l->sendb, sc, l->sdsp, MPI_BYTE, l->recvb, l->rcnt, l->rdsp, MPI_BYTE, MPI_COMM_WORLD);
        for (int64_t e = 0; e < El; e++) l->ref_rc[e] = 0;
        for (int64_t i = 0; i < l->nrecv; i++) {
            const uint8_t *m = l->recvb + i * msg;
            int32_t hdr[4];
            memcpy(hdr, m, 16);
            const int64_t row = l->ref_rc[hdr[1]]++;
            memcpy(l->ref_rx + (hdr[1] * S + row) * H, m + 16, (size_t)H);
            const float *sc4 = (const float *)(const void *)(m + 16 + H);
            for (int64_t g = 0; g < nsc; g++) l->ref_rs[hdr[1] * S * nsc + g * S + row] = sc4[g];
            /* remember where the row went for the combine's return trip */
            hdr[2] = (int32_t)row;
            memcpy((uint8_t *)(l->recvb + i * msg), hdr, 16);
        }
        return TS_OK;
    }
    case OP_LL_REF_COMBINE: {
        const uint16_t *cx = l->cx.data;
        for (int64_t i = 0; i < l->nrecv; i++) {
            int32_t hdr[4];
            memcpy(hdr, l->recvb + i * msg, 16);
            memcpy(l->csend + i * H, cx + (hdr[1] * S + hdr[2]) * H, (size_t)H * 2);
        }
        int rc2[1024], rd2[1024], sc2[1024], sd2[1024];
        for (int d = 0; d < R; d++) {
            rc2[d] = (int)(l->rcnt[d] / msg * 2 * H);
            rd2[d] = (int)(l->rdsp[d] / msg * 2 * H);
            sc2[d] = l->scnt[d] * (int)(2 * H);
            sd2[d] = (int)(l->sdsp[d] / msg * 2 * H);
        }
        MPI_Alltoallv(l->csend, rc2, rd2, MPI_BYTE, l->crecv, sc2, sd2, MPI_BYTE, MPI_COMM_WORLD);
        const int64_t *idx = l->idx.data;
        const float *w = l->w.data;
        uint16_t *out = l->out.data;
        float *acc = malloc((size_t)H * 4);
        for (int64_t t = 0; t < N; t++) {
            for (int64_t j = 0; j < H; j++) acc[j] = 0.0f;
            for (int64_t k = 0; k < K; k++) {
                const int64_t e = idx[t * K + k];
                if (e < 0) continue;
                const uint16_t *y = l->crecv + (int64_t)(sd2[e / El] / (2 * H) + l->pos[t * K + k]) * H;
                const float wk = w[t * K + k];
                /* a baseline needs no FMA contract: plain multiply-add, vectorised by the compiler */
                for (int64_t j = 0; j < H; j++) {
                    union { uint32_t u; float f; } v = {(uint32_t)y[j] << 16};
                    acc[j] += v.f * wk;
                }
            }
            for (int64_t j = 0; j < H; j++) out[t * H + j] = ts_f32_to_bf16(acc[j]);
        }
        free(acc);
        return TS_OK;
    }
    default:
        return TS_ERR_INTERNAL;
    }
}

/* k > 0: a buffer with k ranks per node (k = 1: every rank its own node, the internode LL
 * path over MPI); rows then are named ll_internode_*. */
static int ll_section(const ts__bench_opts *opts, int threads, int cores, int k) {
    int R, me;
    MPI_Comm_size(MPI_COMM_WORLD, &R);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    ll_bench l;
    memset(&l, 0, sizeof l);
    g_ll = &l;
    l.R = R;
    l.me = me;
    l.T = 128;
    const char *te = getenv("TS_BENCH_EP_LL_TOKENS");
    if (te && atoll(te) > 0) l.T = atoll(te);
    l.H = 7168;
    l.K = 8;
    l.E = 256;
    l.El = l.E / R;
    l.N = l.T;
    const int64_t H = l.H, K = l.K, N = l.N, S = R * l.T, nsc = H / 128, El = l.El;
    const int64_t msg = 16 + H + nsc * 4;
    if (R > 1024 || l.E % R != 0) return 0;
    uint16_t *x = malloc((size_t)(N * H) * 2), *out = malloc((size_t)(N * H) * 2);
    int64_t *idx = malloc((size_t)(N * K) * 8);
    float *w = malloc((size_t)(N * K) * 4);
    ts__bench_rng rng = {0x51ED270B27ull ^ (uint64_t)(me + 1) * 0x2545F4914F6CDD1Dull};
    for (int64_t i = 0; i < N * H; i++) x[i] = (uint16_t)(0x3c00 + (ts__bench_rng_next(&rng) & 0x7ff)) | (uint16_t)((i & 1) << 15);
    random_routing(&rng, N, K, l.E, idx, w);
    l.x = ts_tensor_2d(x, TS_BF16, N, H);
    l.idx = ts_tensor_2d(idx, TS_I64, N, K);
    l.w = ts_tensor_2d(w, TS_F32, N, K);
    l.out = ts_tensor_2d(out, TS_BF16, N, H);
    /* outputs: only the valid rows are touched, so these large mappings stay mostly virtual */
    uint8_t *rx = malloc((size_t)(El * S * H));
    float *rs = malloc((size_t)(El * S * nsc) * 4);
    int32_t *rc = malloc((size_t)El * 4);
    uint16_t *cx = malloc((size_t)(El * S * H) * 2);
    l.rx = ts_tensor_3d(rx, TS_E4M3, El, S, H);
    l.rs = ts_tensor_3d(rs, TS_F32, El, S, nsc);
    l.rs.strides[0] = S * nsc;
    l.rs.strides[1] = 1;
    l.rs.strides[2] = S;
    l.rc = ts_tensor_1d(rc, TS_I32, El);
    l.cx = ts_tensor_3d(cx, TS_BF16, El, S, H);
    const int64_t max_msgs = (int64_t)R * N * K;
    l.q = malloc((size_t)(N * H));
    l.qs = malloc((size_t)(N * nsc) * 4);
    l.sendb = malloc((size_t)(N * K * msg));
    l.recvb = malloc((size_t)(max_msgs * msg));
    l.scnt = calloc((size_t)R * 4, sizeof(int));
    l.sdsp = l.scnt + R;
    l.rcnt = l.scnt + 2 * R;
    l.rdsp = l.scnt + 3 * R;
    l.pos = malloc((size_t)(N * K) * 4);
    l.ref_rx = malloc((size_t)(El * S * H));
    l.ref_rs = malloc((size_t)(El * S * nsc) * 4);
    l.ref_rc = calloc((size_t)El, 4);
    l.csend = malloc((size_t)(max_msgs * H) * 2);
    l.crecv = malloc((size_t)(N * K * H) * 2);
    int rc_all = 0;
    int64_t bytes = 0;
    ts_status st = ts_ep_get_low_latency_rdma_size_hint(l.T, H, R, l.E, &bytes);
    ts_ep_buffer_options bo = ts_ep_default_buffer_options();
    bo.ranks_per_node = k;
    if (st == TS_OK) st = ts_ep_buffer_create(MPI_COMM_WORLD, 0, bytes, true, &bo, &l.buf);
    if (st == TS_OK) st = ll_run(&l, OP_LL_DISPATCH);
    if (st == TS_OK) st = ll_run(&l, OP_LL_REF_DISPATCH);
    int64_t sel = 0, all_sel = 0;
    for (int64_t i = 0; i < N * K; i++) sel += idx[i] >= 0;
    MPI_Allreduce(&sel, &all_sel, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    int agree = 1;
    if (st == TS_OK) {
        /* same row counts as the reference (a cheap cross-check of the setup; its cast rounds
         * via 1/scale_inv, upstream's via 448/amax, so bytes may differ in the last bit) */
        for (int64_t e = 0; e < El; e++) agree &= rc[e] == l.ref_rc[e];
        for (int64_t e = 0; e < El; e++)
            for (int64_t r = 0; r < rc[e]; r++)
                for (int64_t j = 0; j < H; j++) cx[(e * S + r) * H + j] = (uint16_t)(0x3f80 + ((r + j) & 0x3f));
    }
    int all_agree = 0;
    MPI_Allreduce(&agree, &all_agree, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (st != TS_OK || !all_agree) {
        if (me == 0)
            fprintf(stderr, "tilestack bench ep: low-latency setup failed: %s\n",
                    st != TS_OK ? ts_last_error() : "dispatch differs from the Alltoallv reference");
        rc_all = 1;
        goto out;
    }
    if (me == 0)
        printf("low latency%s: %lld tokens/rank, LL area %.1f MiB/rank, valid selections (all ranks) %lld\n",
               k == 1 ? " (every rank its own node: internode path)" : "", (long long)l.T, (double)bytes / (1 << 20),
               (long long)all_sel);
    {
        char shape[96];
        snprintf(shape, sizeof shape, "R=%d T=%lld H=%lld k=%lld E=%lld", R, (long long)l.T, (long long)H,
                 (long long)K, (long long)l.E);
        const double deep_disp = (double)all_sel * (double)(H + nsc * 4 + 16), deep_comb = (double)all_sel * 2.0 * H;
        ep_row_spec rows[] = {
            {k == 1 ? "ll_internode_dispatch" : "ll_dispatch", "bf16>e4m3", OP_LL_DISPATCH, OP_LL_REF_DISPATCH, deep_disp, NULL, 0},
            {k == 1 ? "ll_internode_combine" : "ll_combine", "bf16", OP_LL_COMBINE, OP_LL_REF_COMBINE, deep_comb, NULL, 0},
            {k == 1 ? "ll_internode_combine_zero_copy" : "ll_combine_zero_copy", "bf16", OP_LL_COMBINE_ZERO_COPY,
             OP_LL_REF_COMBINE, deep_comb, NULL, 0},
        };
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
            if (!row_wanted(rows[i].name, shape)) continue;
            if (rows[i].op == OP_LL_COMBINE_ZERO_COPY) {
                /* the expert outputs go straight into both halves beforehand (not timed) */
                for (int rep = 0; rep < 2 && st == TS_OK; rep++) {
                    ts_tensor zx;
                    st = ts_ep_get_next_low_latency_combine_buffer(l.buf, l.h, &zx);
                    for (int64_t e = 0; st == TS_OK && e < El; e++)
                        memcpy((uint16_t *)zx.data + e * S * H, cx + e * S * H, (size_t)(rc[e] * H) * 2);
                    if (st == TS_OK && rep == 0) st = ll_run(&l, OP_LL_COMBINE_ZERO_COPY);
                }
            }
            ts__bench_row row = ep_row(&rows[i], shape, R, threads, cores);
            ts__timing tb;
            ts_status s1 = st == TS_OK ? time_op(NULL, rows[i].op, NULL, opts->quick, &row.t) : st;
            ts_status s2 = s1 == TS_OK ? time_op(NULL, rows[i].base, NULL, opts->quick, &tb) : s1;
            if (s1 != TS_OK || s2 != TS_OK) {
                if (me == 0) ts__bench_report_error(opts, &row, ts_last_error());
                rc_all = 1;
                continue;
            }
            row.baseline_seconds = tb.median_s;
            if (me == 0) {
                ts__bench_report(opts, &row);
                printf("    DeepEP LL accounting: %.2f GB/s per rank (ours), %.2f GB/s (Alltoallv), %.2fx; "
                       "%.0f us vs %.0f us per call\n",
                       rows[i].deep / R / row.t.median_s * 1e-9, rows[i].deep / R / tb.median_s * 1e-9,
                       tb.median_s / row.t.median_s, row.t.median_s * 1e6, tb.median_s * 1e6);
            }
        }
    }
out:
    ts_ep_ll_handle_destroy(l.h);
    ts_ep_buffer_destroy(l.buf);
    free(x);
    free(out);
    free(idx);
    free(w);
    free(rx);
    free(rs);
    free(rc);
    free(cx);
    free(l.q);
    free(l.qs);
    free(l.sendb);
    free(l.recvb);
    free(l.scnt);
    free(l.pos);
    free(l.ref_rx);
    free(l.ref_rs);
    free(l.ref_rc);
    free(l.csend);
    free(l.crecv);
    g_ll = NULL;
    return rc_all;
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
    {
        /* TS_BENCH_FILTER=ll_ runs only the low-latency rows (skips the normal-mode setup) */
        const char *flt = getenv("TS_BENCH_FILTER");
        if (flt && strstr(flt, "ll_")) {
            if (me == 0) ts__bench_table_header(stdout);
            rc = ll_section(opts, threads, cores, 0);
            MPI_Barrier(MPI_COMM_WORLD);
            if (R > 1) rc |= ll_section(opts, threads, cores, 1);
            MPI_Barrier(MPI_COMM_WORLD);
            if (we_init) MPI_Finalize();
            return rc;
        }
    }

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
    random_routing(&rng, T, K, E, idx, w);
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
        /* docs/ep.md "Scaling model": rows per token = R p, p = 1 - C(E - E/R, k) / C(E, k) */
        const double p = hit_probability(E, E / R, K);
        printf("scaling model: rows per token %.4f (R p, p = %.5f), measured %.4f; per rank per token %.0f B "
               "dispatched (FP8 + scales), %.0f B combined (BF16)\n",
               R * p, p, (double)sum_recv / ((double)R * (double)T), p * (double)(H + S * 4),
               p * (double)H * 2);
        int32_t k = R;
        if (ts_ep_buffer_get_ranks_per_node(b.buf, &k) == TS_OK && k < R) {
            /* across nodes: a token crosses once per remote node it reaches (to the proxy),
             * combine brings back one copy per remote rank (not pre-summed per node) */
            const int32_t N = R / k;
            const double q = hit_probability(E, E / N, K);
            printf("scaling model across %d nodes of %d: per token %.4f dispatch records to other nodes "
                   "((N-1) q, q = %.5f), %.4f combine rows from other nodes ((R-k) p)\n",
                   N, k, (N - 1) * q, q, (R - k) * p);
        }
        ts__bench_table_header(stdout);
    }
    {
        const double fp8 = (1.0 + 4.0 / 128) / 2;
        const double deep_disp = (double)sum_recv * H * 2 * fp8, deep_comb = (double)sum_recv * H * 2; /* all ranks */
        char shape[96];
        snprintf(shape, sizeof shape, "R=%d T=%lld H=%lld k=%lld E=%lld", R, (long long)T, (long long)H, (long long)K,
                 (long long)E);
        ep_row_spec rows[] = {
            {"dispatch", "e4m3", OP_DISPATCH, OP_REF_DISPATCH, deep_disp, NULL, 0},
            {"dispatch_cached", "e4m3", OP_DISPATCH_CACHED, OP_REF_DISPATCH, deep_disp, NULL, 0},
            {"combine", "bf16", OP_COMBINE, OP_REF_COMBINE, deep_comb, NULL, 0},
            {"combine_zero_copy", "bf16", OP_COMBINE_ZERO_COPY, OP_REF_COMBINE, deep_comb, NULL, 0},
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
            if (run_row(&b, &rows[i], shape, R, threads, cores, &ref, opts, me)) rc = 1;
        }
        /* V2 ElasticBuffer rows, same routing and baseline; its buffer is sized for the worst
         * case (R*T rows), as upstream sizes it, or for the expanded rows of this routing when
         * more (so the senders place them: ep_internal.h, ts__ep_dispatch_expanded). */
        /* The expanded rows also against the Alltoallv token dispatcher delivering the same
         * expanded rows (suite_ep_a2a_expanded.c), counting the expanded rows' bytes. */
        int64_t xall = 0;
        for (int64_t i = 0; i < T * K; i++) xall += idx[i] >= 0;
        MPI_Allreduce(MPI_IN_PLACE, &xall, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        const double xdisp = (double)xall * H * 2 * fp8, xcomb = (double)xall * H * 2;
        const char *a2a_name = "MPI_Alltoallv token dispatcher (expanded rows)";
        /* a token row read once per rank it reaches, written once per slot; combine the reverse */
        const double xmoved_disp = deep_disp + xdisp, xmoved_comb = deep_comb + xcomb;
        ep_row_spec erows[] = {
            {"elastic_dispatch", "e4m3", OP_EL_DISPATCH, OP_REF_DISPATCH, deep_disp, NULL, 0},
            {"elastic_dispatch_expanded", "e4m3", OP_EL_DISPATCH_EXPANDED, OP_REF_DISPATCH, deep_disp, NULL, 0},
            {"elastic_dispatch_expanded_vs_a2a", "e4m3", OP_EL_DISPATCH_EXPANDED, OP_A2A_DISPATCH_EXPANDED, xdisp,
             a2a_name, xmoved_disp},
            {"elastic_combine", "bf16", OP_EL_COMBINE, OP_REF_COMBINE, deep_comb, NULL, 0},
            {"elastic_combine_expanded", "bf16", OP_EL_COMBINE_EXPANDED, OP_REF_COMBINE, deep_comb, NULL, 0},
            {"elastic_combine_expanded_vs_a2a", "bf16", OP_EL_COMBINE_EXPANDED, OP_A2A_COMBINE_EXPANDED, xcomb,
             a2a_name, xmoved_comb},
        };
        bool want_elastic = false;
        for (size_t i = 0; i < sizeof erows / sizeof erows[0]; i++) want_elastic |= row_wanted(erows[i].name, shape);
        if (want_elastic) {
            ts_ep_elastic_options eo = ts_ep_elastic_default_options();
            eo.num_max_tokens_per_rank = T;
            eo.hidden = H;
            eo.num_topk = (int32_t)K;
            eo.use_fp8_dispatch = true;
            ts_status est = TS_OK;
            {
                int64_t *slots = calloc((size_t)E, 8), xmax = 0;
                for (int64_t e = 0; slots && e < E; e++) slots[e] = tpe[e];
                if (slots) MPI_Allreduce(MPI_IN_PLACE, slots, (int)E, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
                for (int r = 0; slots && r < R; r++) {
                    int64_t x = 0;
                    for (int64_t e = r * (E / R); e < (r + 1) * (E / R); e++) x += slots[e];
                    if (x > xmax) xmax = x;
                }
                free(slots);
                const int64_t tx = ts__max64(T, ts__ceil_div(xmax, R)); /* R * tx rows >= the expanded rows */
                est = ts_ep_elastic_get_buffer_size_hint(R, tx, H, (int32_t)K, true, &eo.num_bytes);
                if (me == 0 && est == TS_OK)
                    printf("elastic buffer %.1f MiB/rank (expanded rows/rank: max %lld)\n",
                           (double)eo.num_bytes / (1 << 20), (long long)xmax);
            }
            if (est == TS_OK) est = ts_ep_elastic_create(MPI_COMM_WORLD, &eo, &b.eb);
            if (est == TS_OK) est = run_op(&b, OP_EL_DISPATCH, NULL);
            if (est == TS_OK) est = run_op(&b, OP_EL_DISPATCH_EXPANDED, NULL);
            if (est == TS_OK) est = ts__a2a_expanded_create(x, xs, idx, w, T, H, S, K, E, &b.a2a);
            if (est == TS_OK) est = ts__a2a_expanded_dispatch(b.a2a);
            if (est == TS_OK) {
                /* the baseline delivers the same expanded rows, scales and weights */
                int64_t n = 0;
                const uint8_t *ax;
                const float *asf, *aw;
                ts__a2a_expanded_rows(b.a2a, &n, &ax, &asf, &aw);
                int same = n == b.er.num_expanded_tokens &&
                           !memcmp(ax, b.er.recv_x.data, (size_t)(n * H)) &&
                           !memcmp(asf, b.er.recv_sf.data, (size_t)(n * S) * 4) &&
                           !memcmp(aw, b.er.recv_topk_weights.data, (size_t)n * 4);
                MPI_Allreduce(MPI_IN_PLACE, &same, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
                if (me == 0) printf("Alltoallv token dispatcher: the same expanded rows as elastic_dispatch_expanded: %s\n",
                                    same ? "yes (every rank)" : "NO");
                if (!same) rc = 1;
            }
            uint16_t *ecx = NULL;
            if (est == TS_OK) {
                ts_ep_elastic_handle_info info;
                ts_ep_elastic_handle_get_info(b.ehx, &info);
                const int64_t X = info.num_expanded_tokens;
                ecx = malloc((size_t)((X > 0 ? X : 1) * H) * 2);
                for (int64_t i = 0; ecx && i < X * H; i++) ecx[i] = (uint16_t)(0x3f80 + (ts__bench_rng_next(&rng) & 0x7f));
                b.ecx = ts_tensor_2d(ecx, TS_BF16, X, H);
                if (!ecx) est = TS_ERR_OUT_OF_MEMORY;
            }
            if (est != TS_OK) {
                if (me == 0) fprintf(stderr, "tilestack bench ep: elastic setup failed: %s\n", ts_last_error());
                rc = 1;
            }
            for (size_t i = 0; i < sizeof erows / sizeof erows[0] && est == TS_OK; i++)
                if (row_wanted(erows[i].name, shape) && run_row(&b, &erows[i], shape, R, threads, cores, &ref, opts, me))
                    rc = 1;
            ts_ep_elastic_handle_destroy(b.eh);
            ts_ep_elastic_handle_destroy(b.ehx);
            ts_ep_elastic_destroy(b.eb);
            ts__a2a_expanded_destroy(b.a2a);
            b.eh = b.ehx = NULL;
            b.eb = NULL;
            b.a2a = NULL;
            free(ecx);
        }
        /* The internode path forced on this machine: every rank its own node, so every token
         * goes through MPI to its destination's node proxy (itself here) and back. Same
         * routing, same bytes, same baseline. Staging from the internode size hint. */
        ep_row_spec irows[] = {
            {"internode_dispatch", "e4m3", OP_DISPATCH, OP_REF_DISPATCH, deep_disp, NULL, 0},
            {"internode_combine", "bf16", OP_COMBINE, OP_REF_COMBINE, deep_comb, NULL, 0},
        };
        char ishape[112];
        snprintf(ishape, sizeof ishape, "%s nodes=%d", shape, R);
        const bool want_inter = R > 1 && (row_wanted(irows[0].name, ishape) || row_wanted(irows[1].name, ishape));
        ts_ep_buffer *intra = b.buf, *ib = NULL;
        if (want_inter) {
            int64_t rdma = 0;
            ts_ep_buffer_options io = ts_ep_default_buffer_options();
            io.ranks_per_node = 1;
            ts_status ist = ts_ep_get_internode_buffer_size_hint(R, 1, T, H, (int32_t)K, S, true, &rdma);
            if (ist == TS_OK) ist = ts_ep_buffer_create(MPI_COMM_WORLD, nvl, rdma, false, &io, &ib);
            if (ist == TS_OK) {
                b.buf = ib;
                ist = run_op(&b, OP_DISPATCH, NULL);
            }
            if (ist != TS_OK) {
                if (me == 0) fprintf(stderr, "tilestack bench ep: internode setup failed: %s\n", ts_last_error());
                rc = 1;
            } else if (me == 0) {
                printf("internode (1 rank per node): staging %.1f MiB/rank\n", (double)rdma / (1 << 20));
            }
            for (size_t i = 0; i < sizeof irows / sizeof irows[0] && ist == TS_OK; i++) {
                if (!row_wanted(irows[i].name, ishape)) continue;
                if (run_row(&b, &irows[i], ishape, R, threads, cores, &ref, opts, me)) rc = 1;
            }
            ts_ep_handle_destroy(b.h); /* its routing belongs to ib */
            b.h = NULL;
            b.buf = intra;
            ts_ep_buffer_destroy(ib);
        }
        ts_ep_reference_free(&ref);
    }
done:
    MPI_Barrier(MPI_COMM_WORLD);
    /* rows crossing to another node: staged against one-sided / datatype transfers */
    if (row_wanted("internode_rows", "") && R > 1)
        rc |= ts__ep_transport_section(opts, T, H, hit_probability(E, E / R, K), threads);
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
    rc |= ll_section(opts, threads, cores, 0);
    MPI_Barrier(MPI_COMM_WORLD);
    if (R > 1) rc |= ll_section(opts, threads, cores, 1);
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
