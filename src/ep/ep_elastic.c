/* V2 ElasticBuffer (ep_elastic.h) on top of the V1 normal mode: dispatch = layout + V1
 * dispatch, expanded by the senders themselves on one node (ts__ep_dispatch_expanded), else
 * by the local copy of ep_elastic_expand.c; combine = (local reduction of the expanded rows +)
 * V1 combine. The V1 calls keep their own argument agreement; the checks this
 * layer adds before them are agreed on with one small deadline allgather, so a rank with bad
 * arguments still gets its specific code and the others TS_ERR_PEER naming it. */
#include "ep/ep_coll.h"
#include "ep/ep_elastic_internal.h"

#include <stdlib.h>
#include <string.h>

#define TWO_MIB (INT64_C(2) << 20)

ts_ep_elastic_options ts_ep_elastic_default_options(void) {
    ts_ep_elastic_options o;
    memset(&o, 0, sizeof o);
    o.allow_hybrid_mode = o.allow_multiple_reduction = o.prefer_overlap_with_compute = true;
    o.num_cpu_timeout_secs = 300.0;
    return o;
}

ts_status ts_ep_elastic_get_buffer_size_hint(int32_t num_ranks, int64_t num_max_tokens_per_rank, int64_t hidden,
                                             int32_t num_topk, bool use_fp8_dispatch, int64_t *num_bytes) {
    static const char *what = "ts_ep_elastic_get_buffer_size_hint";
    if (!num_bytes) return ts__fail(TS_ERR_NULL_POINTER, "%s: num_bytes is NULL", what);
    if (num_topk < 0 || num_topk > 1024)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: num_topk %d out of [0, 1024]", what, num_topk);
    const int64_t S = use_fp8_dispatch ? ts__ceil_div(hidden > 0 ? hidden : 1, 128) : 0;
    return ts_ep_get_buffer_size_hint(num_ranks, num_max_tokens_per_rank, hidden, num_topk ? num_topk : 32, S,
                                      use_fp8_dispatch, num_bytes);
}

ts_status ts_ep_elastic_create(MPI_Comm comm, const ts_ep_elastic_options *opts, ts_ep_elastic_buffer **out) {
    static const char *what = "ts_ep_elastic_create";
    if (!out) return ts__fail(TS_ERR_NULL_POINTER, "%s: out is NULL", what);
    *out = NULL;
    const ts_ep_elastic_options o = opts ? *opts : ts_ep_elastic_default_options();
    if (o.num_bytes < 0 || o.num_max_tokens_per_rank < 0 || o.hidden < 0 || o.num_topk < 0 ||
        o.num_allocated_qps < 0 || o.num_cpu_timeout_secs < 0 || o.ranks_per_node < 0)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: negative option (num_bytes %lld, num_max_tokens_per_rank %lld, "
                        "hidden %lld, num_topk %d, num_allocated_qps %d, num_cpu_timeout_secs %g, ranks_per_node %d)",
                        what, (long long)o.num_bytes, (long long)o.num_max_tokens_per_rank, (long long)o.hidden,
                        o.num_topk, o.num_allocated_qps, o.num_cpu_timeout_secs, o.ranks_per_node);
    int64_t bytes = o.num_bytes;
    if (bytes > 0 && bytes % TWO_MIB != 0)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: num_bytes %lld is not a multiple of 2 MiB", what,
                        (long long)bytes);
    if (bytes == 0) {
        if (o.num_max_tokens_per_rank == 0 || o.hidden == 0)
            return ts__fail(TS_ERR_INVALID_ARGUMENT,
                            "%s: give num_bytes, or num_max_tokens_per_rank and hidden to size the buffer", what);
        int R = 0;
        if (comm == MPI_COMM_NULL) return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: comm is MPI_COMM_NULL", what);
        MPI_Comm_size(comm, &R);
        TS__RETURN_IF_ERROR(ts_ep_elastic_get_buffer_size_hint(R, o.num_max_tokens_per_rank, o.hidden, o.num_topk,
                                                               o.use_fp8_dispatch, &bytes));
    }
    ts_ep_elastic_buffer *eb = calloc(1, sizeof *eb);
    if (!eb) return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: no memory for the buffer", what);
    ts_ep_buffer_options bo = ts_ep_default_buffer_options();
    bo.timeout_s = o.num_cpu_timeout_secs;
    bo.ranks_per_node = o.ranks_per_node;
    /* num_rdma_bytes 0: the internode staging gets num_bytes too (ep.h). */
    const ts_status st = ts_ep_buffer_create(comm, bytes, 0, false, &bo, &eb->v1);
    if (st != TS_OK) {
        free(eb);
        return st;
    }
    eb->num_bytes = bytes;
    eb->num_max_tokens_per_rank = o.num_max_tokens_per_rank;
    *out = eb;
    return TS_OK;
}

ts_status ts_ep_elastic_destroy(ts_ep_elastic_buffer *eb) {
    if (!eb) return TS_OK;
    const ts_status st = ts_ep_buffer_destroy(eb->v1);
    free(eb->scratch);
    free(eb->expand);
    free(eb->comb_w);
    free(eb);
    return st;
}

ts_status ts_ep_elastic_get_rank(const ts_ep_elastic_buffer *eb, int32_t *rank, int32_t *num_ranks) {
    if (!eb) return ts__fail(TS_ERR_NULL_POINTER, "ts_ep_elastic_get_rank: buf is NULL");
    return ts_ep_buffer_get_rank(eb->v1, rank, num_ranks);
}

ts_status ts_ep_elastic_get_num_bytes(const ts_ep_elastic_buffer *eb, int64_t *num_bytes) {
    if (!eb || !num_bytes)
        return ts__fail(TS_ERR_NULL_POINTER, "ts_ep_elastic_get_num_bytes: %s is NULL", eb ? "num_bytes" : "buf");
    *num_bytes = eb->num_bytes;
    return TS_OK;
}

static ts_status domain(const ts_ep_elastic_buffer *eb, int32_t *a, int32_t *b, const char *what) {
    if (!eb || !a || !b) return ts__fail(TS_ERR_NULL_POINTER, "%s: %s is NULL", what, !eb ? "buf" : "an output");
    *a = eb->v1->num_nodes;
    *b = eb->v1->ranks_per_node;
    return TS_OK;
}

ts_status ts_ep_elastic_get_physical_domain_size(const ts_ep_elastic_buffer *eb, int32_t *num_rdma_ranks,
                                                 int32_t *num_nvlink_ranks) {
    return domain(eb, num_rdma_ranks, num_nvlink_ranks, "ts_ep_elastic_get_physical_domain_size");
}

ts_status ts_ep_elastic_get_logical_domain_size(const ts_ep_elastic_buffer *eb, int32_t *num_scaleout_ranks,
                                                int32_t *num_scaleup_ranks) {
    return domain(eb, num_scaleout_ranks, num_scaleup_ranks, "ts_ep_elastic_get_logical_domain_size");
}

ts_status ts_ep_elastic_get_theoretical_num_sms(const ts_ep_elastic_buffer *eb, int64_t num_experts, int32_t num_topk,
                                                int32_t *num_sms) {
    static const char *what = "ts_ep_elastic_get_theoretical_num_sms";
    if (!eb || !num_sms) return ts__fail(TS_ERR_NULL_POINTER, "%s: %s is NULL", what, eb ? "num_sms" : "buf");
    if (num_experts < 1 || num_topk < 1 || num_topk > num_experts)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: num_experts %lld, num_topk %d (need 1 <= num_topk <= num_experts)",
                        what, (long long)num_experts, num_topk);
    int64_t n = ts__min64(ts_get_num_threads(), 4 * (int64_t)eb->v1->ranks_per_node);
    if (n > 1) n &= ~(int64_t)1;
    *num_sms = (int32_t)(n < 1 ? 1 : n);
    return TS_OK;
}

ts_status ts_ep_elastic_get_theoretical_num_qps(const ts_ep_elastic_buffer *eb, int32_t num_sms, int32_t *num_qps) {
    static const char *what = "ts_ep_elastic_get_theoretical_num_qps";
    if (!eb || !num_qps) return ts__fail(TS_ERR_NULL_POINTER, "%s: %s is NULL", what, eb ? "num_qps" : "buf");
    if (num_sms < 1) return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: num_sms %d < 1", what, num_sms);
    *num_qps = num_sms;
    return TS_OK;
}

ts_status ts_ep_elastic_barrier(ts_ep_elastic_buffer *eb) {
    static const char *what = "ts_ep_elastic_barrier";
    if (!eb) return ts__fail(TS_ERR_NULL_POINTER, "%s: buf is NULL", what);
    TS__RETURN_IF_ERROR(ts__ep_check_usable(eb->v1, what));
    return ts__ep_barrier(eb->v1, what);
}

/* This layer's verdict on its own checks, shared: the rank at fault keeps its code and
 * message, the others name the lowest such rank. */
static ts_status agree(ts_ep_elastic_buffer *eb, ts_status mine, const char *what) {
    ts_ep_buffer *b = eb->v1;
    int32_t first_bad = mine == TS_OK ? INT32_MAX : b->rank;
    const ts_status st = ts__ep_coll_allreduce(&first_bad, 1, MPI_INT32_T, MPI_MIN, b->comm, b->timeout_s, what);
    if (st != TS_OK) {
        b->broken = true; /* a late peer's message would match the next exchange */
        return st;
    }
    if (mine != TS_OK) return mine;
    if (first_bad != INT32_MAX) return ts__fail(TS_ERR_PEER, "%s: rank %d rejected its arguments", what, first_bad);
    return TS_OK;
}

static bool grow(uint8_t **p, int64_t *cap, int64_t need) {
    if (need <= *cap) return true;
    uint8_t *q = realloc(*p, (size_t)need);
    if (!q) return false;
    *p = q;
    *cap = need;
    return true;
}

ts_status ts_ep_elastic_handle_destroy(ts_ep_elastic_handle *h) {
    if (!h) return TS_OK;
    ts_ep_handle_destroy(h->v1);
    free(h->topk_idx);
    free(h->psum_rank);
    free(h->psum_expert);
    free(h->meta);
    free(h);
    return TS_OK;
}

ts_status ts_ep_elastic_handle_get_info(const ts_ep_elastic_handle *h, ts_ep_elastic_handle_info *info) {
    if (!h || !info)
        return ts__fail(TS_ERR_NULL_POINTER, "ts_ep_elastic_handle_get_info: %s is NULL", h ? "info" : "h");
    memset(info, 0, sizeof *info);
    info->do_expand = h->do_expand;
    info->num_experts = h->num_experts;
    info->expert_alignment = h->expert_alignment;
    info->num_max_tokens_per_rank = h->num_max_tokens_per_rank;
    info->num_sms = h->num_sms;
    info->num_tokens = h->num_tokens;
    info->num_topk = h->num_topk;
    info->num_recv_tokens = h->num_recv;
    info->num_expanded_tokens = h->num_expanded;
    info->topk_idx = h->topk_idx;
    info->psum_num_recv_tokens_per_scaleup_rank = h->psum_rank;
    info->psum_num_recv_tokens_per_expert = h->psum_expert;
    info->num_recv_tokens_per_expert_list = h->counts_list;
    info->num_unaligned_recv_tokens_per_expert = h->unaligned;
    info->recv_src_metadata = h->meta;
    return TS_OK;
}

ts_status ts_ep_elastic_handle_deterministic_sort(ts_ep_elastic_handle *h) {
    if (!h) return ts__fail(TS_ERR_NULL_POINTER, "ts_ep_elastic_handle_deterministic_sort: h is NULL");
    return TS_OK; /* rows are deterministic by construction */
}

#define D "ts_ep_elastic_dispatch"

/* The settings of one dispatch after defaults (from the handle or the buffer). */
typedef struct plan_args {
    int64_t E, T, A, N, K, hidden;
    const ts_tensor *topk; /* what routes: the caller's, or the handle's copy */
} plan_args;

static ts_status check_dispatch(const ts_ep_elastic_buffer *eb, const ts_ep_elastic_dispatch_args *a,
                                const ts_ep_elastic_dispatch_result *res, ts_ep_elastic_handle **handle_out,
                                plan_args *p, ts_tensor *htopk) {
    const int R = eb->v1->num_ranks;
    if (!a || !res) return ts__fail(TS_ERR_NULL_POINTER, D ": %s is NULL", a ? "result" : "args");
    if (!a->x || (!a->x->data && a->x->ndim == 2 && a->x->shape[0] > 0))
        return ts__fail(TS_ERR_NULL_POINTER, D ": x is NULL");
    if (a->x->ndim != 2) return ts__fail(TS_ERR_SHAPE, D ": x must be 2-D [num_tokens, hidden]");
    if (a->use_tma_aligned_col_major_sf)
        return ts__fail(TS_ERR_UNSUPPORTED, D ": use_tma_aligned_col_major_sf is not supported (sf is passed through "
                        "in its own layout)");
    if (a->do_zero_padding && !a->do_expand)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, D ": do_zero_padding needs do_expand");
    if (a->num_sms < 0 || a->num_qps < 0)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, D ": num_sms %d / num_qps %d < 0", a->num_sms, a->num_qps);
    const ts_ep_elastic_handle *h = a->handle;
    p->N = a->x->shape[0];
    p->hidden = a->x->shape[1];
    if (h) {
        if (h->buf != eb) return ts__fail(TS_ERR_INVALID_ARGUMENT, D ": handle belongs to another buffer");
        if (a->topk_idx) return ts__fail(TS_ERR_INVALID_ARGUMENT, D ": cached dispatch (handle) takes no topk_idx");
        if (a->do_cpu_sync) return ts__fail(TS_ERR_INVALID_ARGUMENT, D ": do_cpu_sync with a cached handle");
        if (a->do_expand != h->do_expand)
            return ts__fail(TS_ERR_INVALID_ARGUMENT, D ": do_expand %d differs from the handle's %d", a->do_expand,
                            h->do_expand);
        p->E = a->num_experts ? a->num_experts : h->num_experts;
        p->T = a->num_max_tokens_per_rank ? a->num_max_tokens_per_rank : h->num_max_tokens_per_rank;
        p->A = a->expert_alignment ? a->expert_alignment : h->expert_alignment;
        if (p->E != h->num_experts || p->T != h->num_max_tokens_per_rank || p->A != h->expert_alignment)
            return ts__fail(TS_ERR_INVALID_ARGUMENT,
                            D ": num_experts %lld, num_max_tokens_per_rank %lld, expert_alignment %lld differ from the "
                            "handle's %lld, %lld, %lld",
                            (long long)p->E, (long long)p->T, (long long)p->A, (long long)h->num_experts,
                            (long long)h->num_max_tokens_per_rank, (long long)h->expert_alignment);
        if (p->N != h->num_tokens)
            return ts__fail(TS_ERR_SHAPE, D ": x has %lld tokens, the handle's dispatch had %lld", (long long)p->N,
                            (long long)h->num_tokens);
        p->K = h->num_topk;
        *htopk = ts_tensor_2d(h->topk_idx, TS_I64, h->num_tokens, h->num_topk);
        /* Re-sent weights need the routing again (V1 cached dispatch carries no top-k). */
        p->topk = a->topk_weights ? htopk : NULL;
    } else {
        if (!handle_out) return ts__fail(TS_ERR_NULL_POINTER, D ": handle_out is NULL (combine needs the handle)");
        if (!a->topk_idx) return ts__fail(TS_ERR_NULL_POINTER, D ": topk_idx is required without a handle");
        if (a->topk_idx->ndim != 2 || a->topk_idx->shape[0] != p->N)
            return ts__fail(TS_ERR_SHAPE, D ": topk_idx must be [num_tokens = %lld, num_topk]", (long long)p->N);
        p->E = a->num_experts;
        p->T = a->num_max_tokens_per_rank ? a->num_max_tokens_per_rank : eb->num_max_tokens_per_rank;
        p->A = a->expert_alignment;
        p->K = a->topk_idx->shape[1];
        p->topk = a->topk_idx;
        if (p->A < 1 || p->A > (INT64_C(1) << 24))
            return ts__fail(TS_ERR_INVALID_ARGUMENT, D ": expert_alignment %lld out of [1, 2^24]", (long long)p->A);
        if (p->E < 1 || p->E % R != 0)
            return ts__fail(TS_ERR_INVALID_ARGUMENT, D ": num_experts %lld is not a positive multiple of num_ranks %d",
                            (long long)p->E, R);
        if (p->K < 1 || p->K > 1024) return ts__fail(TS_ERR_SHAPE, D ": num_topk %lld out of [1, 1024]", (long long)p->K);
    }
    if (p->T < 1)
        return ts__fail(TS_ERR_INVALID_ARGUMENT,
                        D ": num_max_tokens_per_rank is required (> 0; the buffer was created without one)");
    if (p->N > p->T)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, D ": x has %lld tokens, more than num_max_tokens_per_rank %lld",
                        (long long)p->N, (long long)p->T);
    if (a->topk_weights && (a->topk_weights->dtype != TS_F32 || a->topk_weights->ndim != 2 ||
                            a->topk_weights->shape[0] != p->N || a->topk_weights->shape[1] != p->K))
        return ts__fail(TS_ERR_SHAPE, D ": topk_weights must be f32 [%lld, %lld]", (long long)p->N, (long long)p->K);
    const ts_tensor *st = a->cumulative_local_expert_recv_stats;
    if (st && (st->dtype != TS_I32 || st->ndim != 1 || st->shape[0] != p->E / R || !st->data ||
               (st->shape[0] > 1 && st->strides[0] != 1)))
        return ts__fail(TS_ERR_SHAPE, D ": cumulative_local_expert_recv_stats must be contiguous i32 [%lld]",
                        (long long)(p->E / R));
    /* The worst case (every rank sends all its tokens here) must fit, as upstream sizes it:
     * the buffer is checked against that rather than against this call's counts. */
    const bool fp8 = a->x->dtype == TS_E4M3;
    const int64_t S = fp8 && a->sf && a->sf->ndim == 2 ? a->sf->shape[1] : 0;
    int64_t need = 0;
    TS__RETURN_IF_ERROR(ts_ep_get_buffer_size_hint(R, p->T, p->hidden > 0 ? p->hidden : 1, (int32_t)p->K, S, fp8, &need));
    if (need > eb->num_bytes)
        return ts__fail(TS_ERR_INVALID_ARGUMENT,
                        D ": the buffer has %lld bytes; dispatch of up to %lld tokens per rank (hidden %lld, top-%lld%s) "
                        "needs %lld bytes (ts_ep_elastic_get_buffer_size_hint)",
                        (long long)eb->num_bytes, (long long)p->T, (long long)p->hidden, (long long)p->K,
                        fp8 ? ", fp8" : "", (long long)need);
    return TS_OK;
}

static ts_status new_handle(const ts_ep_elastic_buffer *eb, const plan_args *p, const ts_ep_elastic_dispatch_args *a,
                            ts_ep_elastic_handle **out) {
    const int R = eb->v1->num_ranks;
    const int64_t El = p->E / R;
    ts_ep_elastic_handle *h = calloc(1, sizeof *h);
    if (!h) return ts__fail(TS_ERR_OUT_OF_MEMORY, D ": no memory for the handle");
    h->buf = eb;
    h->do_expand = a->do_expand;
    h->num_experts = p->E;
    h->expert_alignment = p->A;
    h->num_max_tokens_per_rank = p->T;
    h->num_sms = a->num_sms;
    h->num_ranks = R;
    h->num_tokens = p->N;
    h->num_topk = p->K;
    h->topk_idx = malloc((size_t)(p->N * p->K + 1) * sizeof *h->topk_idx);
    h->psum_rank = malloc((size_t)R * sizeof *h->psum_rank);
    h->psum_expert = malloc((size_t)(3 * El) * sizeof *h->psum_expert);
    if (!h->topk_idx || !h->psum_rank || !h->psum_expert) {
        ts_ep_elastic_handle_destroy(h);
        return ts__fail(TS_ERR_OUT_OF_MEMORY, D ": no memory for the handle (%lld tokens)", (long long)p->N);
    }
    h->counts_list = h->psum_expert + El;
    h->unaligned = h->counts_list + El;
    for (int64_t t = 0; t < p->N; t++)
        for (int64_t k = 0; k < p->K; k++) h->topk_idx[t * p->K + k] = ts__ep_idx_at(p->topk, t, k);
    *out = h;
    return TS_OK;
}

/* Routing metadata of the received rows, once V1 has reported them. */
static ts_status fill_handle(ts_ep_elastic_handle *h, const ts_ep_dispatch_result *r) {
    const int R = h->num_ranks;
    const int64_t n = r->num_recv_tokens, mcols = 2 + h->num_topk;
    h->num_recv = n;
    h->meta = malloc((size_t)(n * mcols + 1) * sizeof *h->meta);
    if (!h->meta) return ts__fail(TS_ERR_OUT_OF_MEMORY, D ": no memory for %lld rows of metadata", (long long)n);
    int64_t *offs = malloc((size_t)(R + 1) * sizeof *offs);
    if (!offs) return ts__fail(TS_ERR_OUT_OF_MEMORY, D ": no memory for the rank offsets");
    ts_ep_handle_get_recv_rank_offsets(h->v1, offs, R + 1);
    const int32_t *src = r->recv_src_idx.data;
    for (int s = 0; s < R; s++) {
        h->psum_rank[s] = (int32_t)offs[s + 1];
        for (int64_t i = offs[s]; i < offs[s + 1]; i++) {
            h->meta[i * mcols] = s;
            h->meta[i * mcols + 1] = src[i];
        }
    }
    free(offs);
    ts__ep_elastic_plan(h, &r->recv_topk_idx);
    return TS_OK;
}

ts_status ts_ep_elastic_dispatch(ts_ep_elastic_buffer *eb, const ts_ep_elastic_dispatch_args *a,
                                 ts_ep_elastic_dispatch_result *result, ts_ep_elastic_handle **handle_out) {
    if (!eb) return ts__fail(TS_ERR_NULL_POINTER, D ": buf is NULL");
    TS__RETURN_IF_ERROR(ts__ep_check_usable(eb->v1, D));
    ts_ep_buffer *b = eb->v1;
    const int R = b->num_ranks;
    plan_args p;
    memset(&p, 0, sizeof p);
    ts_tensor htopk;
    ts_status st = check_dispatch(eb, a, result, handle_out, &p, &htopk);
    /* Layout of the routing (V2 has no separate layout call): scratch holds
     * num_tokens_per_rank [R], num_tokens_per_expert [E], is_token_in_rank [N, R] and zero
     * weights [N, K] for top-k sent without weights. */
    ts_tensor tpr, tpe, tin, zw;
    memset(&tpr, 0, sizeof tpr);
    tpe = tin = zw = tpr;
    const int64_t o_tpe = ts__align(4 * (int64_t)R, 64), o_in = o_tpe + ts__align(4 * p.E, 64),
                  o_w = o_in + ts__align(p.N * R, 64), need = o_w + 4 * p.N * p.K + 64;
    if (st == TS_OK && p.topk) {
        if (!grow(&eb->scratch, &eb->scratch_cap, need)) {
            st = ts__fail(TS_ERR_OUT_OF_MEMORY, D ": no memory for the layout of %lld tokens", (long long)p.N);
        } else {
            tpr = ts_tensor_1d(eb->scratch, TS_I32, R);
            tpe = ts_tensor_1d(eb->scratch + o_tpe, TS_I32, p.E);
            tin = ts_tensor_2d(eb->scratch + o_in, TS_BOOL, p.N, R);
            zw = ts_tensor_2d(eb->scratch + o_w, TS_F32, p.N, p.K);
            memset(eb->scratch + o_w, 0, (size_t)(4 * p.N * p.K));
            st = ts_ep_get_dispatch_layout(b, p.topk, p.E, &tpr, NULL, &tpe, &tin);
        }
    }
    ts_ep_elastic_handle *h = NULL;
    if (st == TS_OK && !a->handle) st = new_handle(eb, &p, a, &h);
    st = agree(eb, st, D);
    if (st != TS_OK) {
        ts_ep_elastic_handle_destroy(h);
        return st;
    }

    ts_ep_config cfg;
    ts_ep_get_dispatch_config(R, &cfg);
    cfg.num_sms = a->num_sms;
    ts_ep_dispatch_args v;
    memset(&v, 0, sizeof v);
    v.x = a->x;
    v.x_scales = a->sf;
    v.expert_alignment = p.A;
    v.config = &cfg;
    if (p.topk) {
        v.topk_idx = p.topk;
        v.topk_weights = a->topk_weights ? a->topk_weights : &zw;
        v.num_tokens_per_rank = &tpr;
        v.num_tokens_per_expert = &tpe;
        v.is_token_in_rank = &tin;
    } else {
        v.handle = a->handle->v1;
    }
    ts_ep_dispatch_result r;
    ts_ep_handle *v1h = NULL;
    /* The senders write the expanded rows themselves when they can (ep_internal.h). */
    ts__ep_expanded exo;
    memset(&exo, 0, sizeof exo);
    exo.alignment = p.A;
    st = ts__ep_dispatch_expanded(b, &v, a->do_expand ? &exo : NULL, &r, h ? &v1h : NULL);
    if (st != TS_OK) {
        ts_ep_elastic_handle_destroy(h);
        return st;
    }
    if (h) {
        h->v1 = v1h;
        st = fill_handle(h, &r);
        if (st != TS_OK) {
            ts_ep_elastic_handle_destroy(h);
            return st;
        }
    }
    const ts_ep_elastic_handle *hh = h ? h : a->handle;
    const int64_t El = p.E / R;
    if (a->cumulative_local_expert_recv_stats)
        for (int64_t e = 0; e < El; e++) ((int32_t *)a->cumulative_local_expert_recv_stats->data)[e] += hh->unaligned[e];

    memset(result, 0, sizeof *result);
    result->num_recv_tokens = hh->num_recv;
    result->num_expanded_tokens = hh->num_expanded;
    const bool with_w = a->topk_weights != NULL;
    if (!a->do_expand) {
        result->recv_x = r.recv_x;
        result->recv_sf = r.recv_x_scales;
        result->recv_topk_idx = p.topk ? r.recv_topk_idx : ts_tensor_2d(NULL, TS_I64, 0, 0);
        result->recv_topk_weights = with_w ? r.recv_topk_weights : ts_tensor_2d(NULL, TS_F32, 0, 0);
    } else if (exo.placed) {
        const int64_t xrow = p.hidden * (int64_t)ts_dtype_size(a->x->dtype);
        const int64_t srow = exo.sf.data ? exo.sf.shape[1] * (int64_t)ts_dtype_size(exo.sf.dtype) : 0;
        ts__ep_elastic_expand_io io = {NULL, NULL, NULL, exo.x.data, exo.sf.data, with_w ? exo.w.data : NULL,
                                       a->do_zero_padding};
        ts__ep_elastic_pad(hh, &io, xrow, srow);
        result->recv_x = exo.x;
        result->recv_sf = exo.sf;
        result->recv_topk_idx = p.topk ? r.recv_topk_idx : ts_tensor_2d(NULL, TS_I64, 0, 0);
        result->recv_topk_weights = with_w ? exo.w : ts_tensor_1d(NULL, TS_F32, 0);
    } else {
        const int64_t X = hh->num_expanded, xrow = p.hidden * (int64_t)ts_dtype_size(a->x->dtype);
        const bool fp8 = r.recv_x_scales.data != NULL;
        const int64_t srow = fp8 ? r.recv_x_scales.shape[1] * (int64_t)ts_dtype_size(r.recv_x_scales.dtype) : 0;
        const int64_t o_s = ts__align(X * xrow, 64), o_ew = o_s + ts__align(X * srow, 64), total = o_ew + 4 * X + 64;
        if (!grow(&eb->expand, &eb->expand_cap, total)) {
            ts_ep_elastic_handle_destroy(h);
            return ts__fail(TS_ERR_OUT_OF_MEMORY, D ": no memory for %lld expanded rows", (long long)X);
        }
        ts__ep_elastic_expand_io io = {&r.recv_x, fp8 ? &r.recv_x_scales : NULL,
                                       with_w ? &r.recv_topk_weights : NULL, eb->expand,
                                       fp8 ? eb->expand + o_s : NULL, with_w ? (float *)(void *)(eb->expand + o_ew) : NULL,
                                       a->do_zero_padding};
        ts__ep_elastic_expand(hh, &io, ts__ep_threads(&cfg));
        result->recv_x = ts_tensor_2d(eb->expand, a->x->dtype, X, p.hidden);
        result->recv_sf = fp8 ? ts_tensor_2d(eb->expand + o_s, r.recv_x_scales.dtype, X, r.recv_x_scales.shape[1])
                              : ts_tensor_2d(NULL, TS_F32, 0, 0);
        result->recv_topk_idx = p.topk ? r.recv_topk_idx : ts_tensor_2d(NULL, TS_I64, 0, 0);
        result->recv_topk_weights = with_w ? ts_tensor_1d(eb->expand + o_ew, TS_F32, X) : ts_tensor_1d(NULL, TS_F32, 0);
    }
    if (h) *handle_out = h;
    return TS_OK;
}
#undef D

#define C "ts_ep_elastic_combine"

static ts_status check_expanded_combine(const ts_ep_elastic_handle *h, const ts_tensor *x, const ts_tensor *w,
                                        const ts_tensor *cw) {
    if (!x || (!x->data && h->num_expanded > 0)) return ts__fail(TS_ERR_NULL_POINTER, C ": x is NULL");
    if (x->dtype != TS_BF16) return ts__fail(TS_ERR_DTYPE, C ": x must be bf16, got %s", ts_dtype_name(x->dtype));
    if (x->ndim != 2 || x->shape[0] < h->num_expanded || x->shape[1] < 1)
        return ts__fail(TS_ERR_SHAPE, C ": x must be [>= num_expanded_tokens = %lld, hidden]",
                        (long long)h->num_expanded);
    if (x->strides[1] != 1) return ts__fail(TS_ERR_STRIDE, C ": x's last dim must be contiguous");
    if (w && (w->dtype != TS_F32 || w->ndim != 1 || w->shape[0] < h->num_expanded || (!w->data && h->num_expanded)))
        return ts__fail(TS_ERR_SHAPE, C ": topk_weights of an expanded dispatch must be f32 [num_expanded_tokens = %lld]",
                        (long long)h->num_expanded);
    if (!w != !cw) return ts__fail(TS_ERR_INVALID_ARGUMENT, C ": combined_topk_weights is required iff topk_weights");
    return TS_OK;
}

ts_status ts_ep_elastic_combine(ts_ep_elastic_buffer *eb, const ts_ep_elastic_handle *h, const ts_tensor *x,
                                const ts_tensor *topk_weights, const ts_tensor *bias0, const ts_tensor *bias1,
                                int32_t num_sms, ts_tensor *combined_x, ts_tensor *combined_topk_weights) {
    if (!eb) return ts__fail(TS_ERR_NULL_POINTER, C ": buf is NULL");
    TS__RETURN_IF_ERROR(ts__ep_check_usable(eb->v1, C));
    ts_ep_buffer *b = eb->v1;
    ts_ep_config cfg;
    ts_ep_get_combine_config(b->num_ranks, &cfg);
    ts_status st = TS_OK;
    if (!h) st = ts__fail(TS_ERR_NULL_POINTER, C ": handle is NULL");
    else if (h->buf != eb) st = ts__fail(TS_ERR_INVALID_ARGUMENT, C ": handle belongs to another buffer");
    else if (num_sms < 0) st = ts__fail(TS_ERR_INVALID_ARGUMENT, C ": num_sms %d < 0", num_sms);
    if (st == TS_OK && !h->do_expand) {
        cfg.num_sms = num_sms ? num_sms : h->num_sms;
        return ts_ep_combine(b, h->v1, x, topk_weights, bias0, bias1, &cfg, combined_x, combined_topk_weights);
    }
    if (st == TS_OK) st = check_expanded_combine(h, x, topk_weights, combined_topk_weights);
    ts_tensor y;
    memset(&y, 0, sizeof y);
    if (st == TS_OK) st = ts_ep_get_combine_buffer(b, h->v1, x->shape[1], &y);
    /* at least one line, so the weights view has data even with no rows */
    const int64_t nw = h && topk_weights ? h->num_recv * h->num_topk : 0;
    if (st == TS_OK && !grow(&eb->comb_w, &eb->comb_w_cap, nw * 4 + 64))
        st = ts__fail(TS_ERR_OUT_OF_MEMORY, C ": no memory for %lld weights", (long long)nw);
    /* The reduction writes this rank's combine area (the zero-copy input of ep.h, which peers
     * read only inside a V1 combine), so only once every rank is known to go ahead. */
    st = agree(eb, st, C);
    if (st != TS_OK) return st;
    cfg.num_sms = num_sms ? num_sms : h->num_sms;
    ts__ep_elastic_reduce(h, x, topk_weights, y.data, topk_weights ? (float *)(void *)eb->comb_w : NULL,
                          ts__ep_threads(&cfg));
    ts_tensor yw = ts_tensor_2d(eb->comb_w, TS_F32, h->num_recv, h->num_topk);
    return ts_ep_combine(b, h->v1, &y, topk_weights ? &yw : NULL, bias0, bias1, &cfg, combined_x,
                         combined_topk_weights);
}
#undef C
