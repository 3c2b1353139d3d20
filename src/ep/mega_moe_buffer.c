/* Mega MoE: the symmetric buffer, its input views, the weight transform and the shared
 * argument checks. Region of each rank (offsets equal on all ranks, from data_off of the
 * fused EP buffer):
 *   header (ts__mm_hdr)
 *   x [T, hidden] e4m3 (bf16), x_sf [T, hidden/128] i32, topk_idx [T, K] i64, topk_weights [T, K] f32
 *   pos[2]  i32 [R, T, K]: row of (source, token, slot) in out[parity], written by the expert rank
 *   out[2]  bf16 [R * T * K, hidden]: this rank's expert outputs, read by their source ranks
 * Two parities of pos / out let a rank start call c + 1 while a slower peer still reads its
 * outputs of call c (docs/mega_moe.md, "Protocol"). */
#include "ep/ep_coll.h"
#include "ep/mega_moe_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const CREATE = "ts_get_symm_buffer_for_mega_moe";

/* The caller's communicator: nonblocking collectives polled under the deadline (a stopped
 * peer gives TS_ERR_TIMEOUT, not a hang). */
static ts_status agree(MPI_Comm comm, int rank, int R, const int64_t *vals, int n, const char *const *names,
                       double timeout_s) {
    int64_t *all = malloc((size_t)R * (size_t)n * sizeof *all);
    if (!all) return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", CREATE);
    MPI_Request q;
    MPI_Iallgather(vals, n, MPI_INT64_T, all, n, MPI_INT64_T, comm, &q);
    ts_status st = ts__ep_coll_wait(&q, comm, timeout_s, CREATE);
    if (st != TS_OK) return st; /* `all` is left to MPI */
    for (int r = 1; r < R && st == TS_OK; r++)
        for (int i = 0; i < n; i++)
            if (all[(size_t)r * (size_t)n + (size_t)i] != all[i]) {
                st = ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: %s differs across ranks: rank 0 has %lld, rank %d has %lld (this is rank %d)",
                              CREATE, names[i], (long long)all[i], r, (long long)all[(size_t)r * (size_t)n + (size_t)i], rank);
                break;
            }
    free(all);
    return st;
}

ts_status ts_get_symm_buffer_for_mega_moe(MPI_Comm comm, int64_t num_experts, int64_t num_max_tokens_per_rank,
                                          int32_t num_topk, int64_t hidden, int64_t intermediate_hidden,
                                          const char *mma_type, const char *activation,
                                          const ts_mega_moe_buffer_options *opts, ts_mega_moe_buffer **out) {
    if (!out) return ts__fail(TS_ERR_NULL_POINTER, "%s: out is NULL", CREATE);
    int R = 0, rank = 0;
    MPI_Comm_size(comm, &R);
    MPI_Comm_rank(comm, &rank);
    /* Local checks first, then an agreement round: every rank returns together. */
    const double timeout_s = opts && opts->timeout_s > 0 ? opts->timeout_s : ts__ep_default_timeout_s();
    ts_status st = TS_OK;
    bool bf16 = false;
    if (mma_type && !strcmp(mma_type, "bf16xbf16")) bf16 = true;
    else if (mma_type && strcmp(mma_type, "fp8xfp4"))
        st = ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: mma_type '%s' is not 'fp8xfp4' or 'bf16xbf16'", CREATE, mma_type);
    if (st == TS_OK && activation && strcmp(activation, "swiglu"))
        st = ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: activation '%s' is not 'swiglu'", CREATE, activation);
    if (st == TS_OK && opts && opts->ranks_per_node < 0)
        st = ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: opts->ranks_per_node %d is negative (0 = the machines' split)",
                      CREATE, opts->ranks_per_node);
    const int64_t hq = bf16 ? 16 : 128;
    if (st == TS_OK && (num_experts < 1 || num_experts > (1 << 20)))
        st = ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: num_experts %lld out of range", CREATE, (long long)num_experts);
    if (st == TS_OK && num_experts % R != 0)
        st = ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: num_experts %lld is not divisible by the %d ranks", CREATE,
                      (long long)num_experts, R);
    if (st == TS_OK && (num_topk < 1 || num_topk > 64))
        st = ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: num_topk %d out of [1, 64]", CREATE, num_topk);
    if (st == TS_OK && (num_max_tokens_per_rank < 1 || num_max_tokens_per_rank > (1 << 20)))
        st = ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: num_max_tokens_per_rank %lld out of [1, 2^20]", CREATE,
                      (long long)num_max_tokens_per_rank);
    if (st == TS_OK && (hidden < hq || hidden % hq != 0 || hidden > (1 << 20)))
        st = ts__fail(TS_ERR_SHAPE, "%s: hidden %lld must be a positive multiple of %lld", CREATE, (long long)hidden,
                      (long long)hq);
    const int64_t iq = bf16 ? 32 : 128; /* the SwiGLU step works in blocks of 32 */
    if (st == TS_OK && (intermediate_hidden < iq || intermediate_hidden % iq != 0 || intermediate_hidden > (1 << 20)))
        st = ts__fail(TS_ERR_SHAPE, "%s: intermediate_hidden %lld must be a positive multiple of %lld", CREATE,
                      (long long)intermediate_hidden, (long long)iq);
    int64_t T = ts__align(num_max_tokens_per_rank, 8);
    const int64_t K = num_topk, El = num_experts / (R > 0 ? R : 1);
    /* region size */
    ts_mega_moe_buffer *b = NULL;
    int64_t region = 0;
    if (st == TS_OK) {
        b = calloc(1, sizeof *b);
        if (!b) st = ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", CREATE);
    }
    if (st == TS_OK) {
        b->rank = rank;
        b->R = R;
        b->K = (int32_t)K;
        b->E = num_experts;
        b->El = El;
        b->T = T;
        b->H = hidden;
        b->I = intermediate_hidden;
        b->bf16 = bf16;
        b->x_row_bytes = hidden * (bf16 ? 2 : 1);
        b->out_cap = (int64_t)R * T * K;
        int64_t o = (int64_t)sizeof(ts__mm_hdr);
        o = ts__align(o, 64), b->off_x = o, o += T * b->x_row_bytes;
        o = ts__align(o, 64), b->off_xsf = o, o += T * (hidden / 128) * 4;
        o = ts__align(o, 64), b->off_idx = o, o += T * K * 8;
        o = ts__align(o, 64), b->off_w = o, o += T * K * 4;
        for (int p = 0; p < 2; p++) o = ts__align(o, 64), b->off_pos[p] = o, o += b->out_cap * 4;
        for (int p = 0; p < 2; p++) o = ts__align(o, 4096), b->off_out[p] = o, o += b->out_cap * hidden * 2;
        region = ts__align(o, 4096);
        const size_t nent = (size_t)b->out_cap;
        b->ent = malloc(nent * sizeof *b->ent);
        b->ent_tmp = malloc(nent * sizeof *b->ent_tmp);
        b->cnt = calloc((size_t)El, sizeof *b->cnt);
        b->first = calloc((size_t)El + 1, sizeof *b->first);
        b->recv_total = calloc((size_t)El, sizeof *b->recv_total);
        b->pdone = calloc((size_t)(El * R), 1);
        b->orow = calloc((size_t)El, sizeof *b->orow);
        b->list = calloc((size_t)El, sizeof *b->list);
        b->u_tpr = calloc((size_t)R, sizeof *b->u_tpr);
        b->u_tpe = calloc((size_t)num_experts, sizeof *b->u_tpe);
        b->u_in_rank = calloc((size_t)(T * R), 1);
        if (!b->ent || !b->ent_tmp || !b->cnt || !b->first || !b->recv_total || !b->pdone || !b->orow || !b->list || !b->u_tpr ||
            !b->u_tpe || !b->u_in_rank)
            st = ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", CREATE);
    }
    {
        /* every rank learns every local verdict (and the arguments that must agree) */
        int32_t *v = malloc(2 * sizeof *v); /* v[0] mine, v[1] the worst; left to MPI on a timeout */
        ts_status wst = v ? TS_OK : ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", CREATE);
        int32_t worst = 0;
        if (v) {
            v[0] = (int32_t)st, v[1] = 0;
            MPI_Request q;
            MPI_Iallreduce(&v[0], &v[1], 1, MPI_INT32_T, MPI_MAX, comm, &q);
            wst = ts__ep_coll_wait(&q, comm, timeout_s, CREATE);
            worst = v[1];
            if (wst == TS_OK) free(v);
        }
        if (wst != TS_OK) st = wst;
        else if (st == TS_OK && worst != 0)
            st = ts__fail(TS_ERR_PEER, "%s: another rank's arguments were rejected (this is rank %d)", CREATE, rank);
    }
    /* nodes: forced, or the machines' (every rank knows the verdict of the round above) */
    int32_t per_node = opts && opts->ranks_per_node > 0 ? opts->ranks_per_node : 0;
    if (st == TS_OK && !per_node) st = ts__ep_coll_barrier(comm, timeout_s, CREATE);
    if (st == TS_OK && !per_node) st = ts__ep_ranks_per_machine(comm, timeout_s, CREATE, &per_node);
    if (st == TS_OK && (per_node > R || R % per_node))
        st = ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: ranks_per_node %d does not divide the %d ranks", CREATE,
                      per_node, R);
    if (st == TS_OK) {
        b->nodes = R / per_node;
        /* over several nodes only the inputs live in the region (the unfused path) */
        if (b->nodes > 1) region = ts__align(b->off_w + T * K * 4, 4096);
    }
    if (st == TS_OK) {
        const int64_t vals[8] = {num_experts, T, K, hidden, intermediate_hidden, bf16, region, per_node};
        static const char *const names[8] = {"num_experts", "num_max_tokens_per_rank", "num_topk", "hidden",
                                             "intermediate_hidden", "mma_type", "buffer size", "ranks_per_node"};
        st = agree(comm, rank, R, vals, 8, names, timeout_s);
    }
    ts_ep_buffer_options eo = ts_ep_default_buffer_options();
    if (opts && opts->timeout_s > 0) eo.timeout_s = opts->timeout_s;
    /* One node: the fused path reads every rank's region directly. Several: the region holds
     * this rank's inputs only (its internode staging is never used: 128 bytes), and the
     * unfused path's buffer takes the internode path. */
    eo.ranks_per_node = per_node;
    if (st == TS_OK) st = ts_ep_buffer_create(comm, region, b->nodes > 1 ? 128 : 0, false, &eo, &b->ep);
    if (st == TS_OK) {
        /* The unfused path's EP buffer: FP8 dispatch rows, and combine rows K * hidden wide. */
        int64_t n1 = 0, n2 = 0;
        st = ts_ep_get_buffer_size_hint(R, T, hidden, (int32_t)K, hidden / 128, !bf16, &n1);
        if (st == TS_OK) st = ts_ep_get_buffer_size_hint(R, T, K * hidden, (int32_t)K, 0, false, &n2);
        if (st == TS_OK) st = ts_ep_buffer_create(comm, n1 > n2 ? n1 : n2, 0, false, &eo, &b->ep_unf);
    }
    if (st != TS_OK) {
        if (b) {
            if (b->ep) ts_ep_buffer_destroy(b->ep);
            b->ep = NULL;
            free(b->ent), free(b->ent_tmp), free(b->cnt), free(b->first), free(b->recv_total), free(b->pdone), free(b->orow), free(b->list);
            free(b->u_tpr), free(b->u_tpe), free(b->u_in_rank);
            free(b);
        }
        return st;
    }
    *out = b;
    return TS_OK;
}

ts_status ts_mega_moe_buffer_destroy(ts_mega_moe_buffer *b) {
    if (!b) return TS_OK;
    ts_status st = ts_ep_buffer_destroy(b->ep_unf);
    ts_status st2 = ts_ep_buffer_destroy(b->ep);
    for (int i = 0; i < b->nthr; i++) free(b->tscr[i]);
    free(b->tscr), free(b->tscr_bytes);
    free(b->ent), free(b->ent_tmp), free(b->cnt), free(b->first), free(b->recv_total), free(b->pdone), free(b->orow), free(b->list);
    free(b->u_tpr), free(b->u_tpe), free(b->u_in_rank), free(b->u_scr);
    free(b);
    return st != TS_OK ? st : st2;
}

ts_status ts_mega_moe_get_views(ts_mega_moe_buffer *b, ts_mega_moe_views *v) {
    if (!b || !v) return ts__fail(TS_ERR_NULL_POINTER, "ts_mega_moe_get_views: %s is NULL", b ? "views" : "buf");
    memset(v, 0, sizeof *v);
    uint8_t *base = ts__mm_base(b, b->rank);
    v->x = ts_tensor_2d(base + b->off_x, b->bf16 ? TS_BF16 : TS_E4M3, b->T, b->H);
    v->x_sf = ts_tensor_2d(b->bf16 ? NULL : base + b->off_xsf, TS_I32, b->T, b->H / 128);
    v->topk_idx = ts_tensor_2d(base + b->off_idx, TS_I64, b->T, b->K);
    v->topk_weights = ts_tensor_2d(base + b->off_w, TS_F32, b->T, b->K);
    v->num_max_tokens_per_rank = b->T;
    v->num_experts = b->E;
    v->num_local_experts = b->El;
    v->hidden = b->H;
    v->intermediate_hidden = b->I;
    v->num_topk = b->K;
    v->rank = b->rank;
    v->num_ranks = b->R;
    v->num_nodes = b->nodes;
    return TS_OK;
}

ts_status ts_transform_weights_for_mega_moe(const ts_tensor *l1, const ts_tensor *l1_sf, const ts_tensor *l2,
                                            const ts_tensor *l2_sf, ts_mega_moe_weights **out) {
    static const char *const W = "ts_transform_weights_for_mega_moe";
    if (!out) return ts__fail(TS_ERR_NULL_POINTER, "%s: out is NULL", W);
    TS__RETURN_IF_ERROR(ts_tensor_check(l1, "l1"));
    TS__RETURN_IF_ERROR(ts_tensor_check(l2, "l2"));
    const bool bf16 = l1->dtype == TS_BF16;
    if (!bf16 && l1->dtype != TS_E2M1X2)
        return ts__fail(TS_ERR_DTYPE, "%s: l1 must be e2m1x2 (fp8xfp4) or bf16, got %s", W, ts_dtype_name(l1->dtype));
    if (l2->dtype != l1->dtype)
        return ts__fail(TS_ERR_DTYPE, "%s: l2 is %s but l1 is %s", W, ts_dtype_name(l2->dtype), ts_dtype_name(l1->dtype));
    if (l1->ndim != 3 || l2->ndim != 3) return ts__fail(TS_ERR_SHAPE, "%s: l1 and l2 must be 3-D [E_l, N, K]", W);
    const int64_t pk = bf16 ? 1 : 2;
    const int64_t El = l1->shape[0], I2 = l1->shape[1], H = l1->shape[2] * pk;
    if (I2 % 2 != 0) return ts__fail(TS_ERR_SHAPE, "%s: l1: 2 * intermediate_hidden %lld is odd", W, (long long)I2);
    const int64_t I = I2 / 2;
    if (l2->shape[0] != El || l2->shape[1] != H || l2->shape[2] * pk != I)
        return ts__fail(TS_ERR_SHAPE, "%s: l2 shape [%lld, %lld, %lld] does not match l1 (want [%lld, %lld, %lld])", W,
                        (long long)l2->shape[0], (long long)l2->shape[1], (long long)l2->shape[2], (long long)El,
                        (long long)H, (long long)(I / pk));
    if (!bf16 && (!l1_sf || !l2_sf)) return ts__fail(TS_ERR_NULL_POINTER, "%s: fp4 weights need l1_sf and l2_sf", W);
    if (bf16 && (l1_sf || l2_sf)) return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: bf16 weights take no scales", W);
    ts_mega_moe_weights *w = calloc(1, sizeof *w);
    if (!w) return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", W);
    const int64_t rb[2] = {1, 32};
    ts_status st = ts_gemm_prepack_b(l1, l1_sf, bf16 ? NULL : rb, false, &w->l1);
    if (st == TS_OK) st = ts_gemm_prepack_b(l2, l2_sf, bf16 ? NULL : rb, false, &w->l2);
    if (st != TS_OK) {
        ts_packed_weight_destroy(w->l1);
        free(w);
        return st;
    }
    w->El = El, w->H = H, w->I = I, w->bf16 = bf16;
    *out = w;
    return TS_OK;
}

void ts_mega_moe_weights_destroy(ts_mega_moe_weights *w) {
    if (!w) return;
    ts_packed_weight_destroy(w->l1);
    ts_packed_weight_destroy(w->l2);
    free(w);
}

ts_status ts__mega_moe_check(const ts_mega_moe_buffer *b, const ts_tensor *y, const ts_mega_moe_weights *w,
                             const ts_tensor *stats, float clamp, bool want_bf16, const char *what) {
    if (!b) return ts__fail(TS_ERR_NULL_POINTER, "%s: buf is NULL", what);
    TS__RETURN_IF_ERROR(ts__ep_check_usable(b->ep, what));
    TS__RETURN_IF_ERROR(ts__ep_check_usable(b->ep_unf, what));
    if (want_bf16 != b->bf16)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: buf was made for mma_type '%s'", what,
                        b->bf16 ? "bf16xbf16" : "fp8xfp4");
    if (!w) return ts__fail(TS_ERR_NULL_POINTER, "%s: weights is NULL", what);
    if (w->bf16 != b->bf16)
        return ts__fail(TS_ERR_DTYPE, "%s: weights are %s but buf is %s", what, w->bf16 ? "bf16" : "fp4",
                        b->bf16 ? "bf16xbf16" : "fp8xfp4");
    if (w->El != b->El || w->H != b->H || w->I != b->I)
        return ts__fail(TS_ERR_SHAPE,
                        "%s: weights are for %lld local experts, hidden %lld, intermediate %lld; buf has %lld, %lld, %lld",
                        what, (long long)w->El, (long long)w->H, (long long)w->I, (long long)b->El, (long long)b->H,
                        (long long)b->I);
    if (!y) return ts__fail(TS_ERR_NULL_POINTER, "%s: y is NULL", what);
    TS__RETURN_IF_ERROR(ts_tensor_check(y, "y"));
    TS__RETURN_IF_ERROR(ts_tensor_check_dtype(y, "y", TS_BF16));
    if (y->ndim != 2) return ts__fail(TS_ERR_SHAPE, "%s: y must be 2-D [num_tokens, hidden]", what);
    if (y->shape[1] != b->H)
        return ts__fail(TS_ERR_SHAPE, "%s: y: hidden %lld does not match the buffer's hidden %lld", what,
                        (long long)y->shape[1], (long long)b->H);
    if (y->shape[0] > b->T)
        return ts__fail(TS_ERR_SHAPE, "%s: y: %lld tokens exceed num_max_tokens_per_rank %lld", what,
                        (long long)y->shape[0], (long long)b->T);
    TS__RETURN_IF_ERROR(ts_tensor_check_last_contiguous(y, "y"));
    if (stats) {
        TS__RETURN_IF_ERROR(ts_tensor_check(stats, "cumulative_local_expert_recv_stats"));
        TS__RETURN_IF_ERROR(ts_tensor_check_dtype(stats, "cumulative_local_expert_recv_stats", TS_I32));
        const int64_t sh[1] = {b->El};
        TS__RETURN_IF_ERROR(ts_tensor_check_shape(stats, "cumulative_local_expert_recv_stats", 1, sh));
    }
    if (!(clamp > 0.0f)) /* NaN too */
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: activation_clamp %g must be > 0 (INFINITY = no clamp)", what,
                        (double)clamp);
    /* this rank's routing */
    const int64_t n = y->shape[0];
    const int64_t *idx = (const int64_t *)(const void *)(ts__mm_base(b, b->rank) + b->off_idx);
    for (int64_t i = 0; i < n * b->K; i++)
        if (idx[i] < -1 || idx[i] >= b->E)
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: topk_idx[%lld][%lld] = %lld is outside [-1, %lld)", what,
                            (long long)(i / b->K), (long long)(i % b->K), (long long)idx[i], (long long)b->E);
    return TS_OK;
}

void *ts__mega_moe_tscratch(ts_mega_moe_buffer *b, int tid, size_t bytes) {
    if (tid >= b->nthr) return NULL;
    if (b->tscr_bytes[tid] < bytes) {
        free(b->tscr[tid]);
        b->tscr[tid] = aligned_alloc(64, ts__align((int64_t)bytes, 64));
        b->tscr_bytes[tid] = b->tscr[tid] ? bytes : 0;
    }
    return b->tscr[tid];
}
