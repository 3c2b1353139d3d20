/* Normal-mode dispatch over shared memory: a count exchange through the published metadata,
 * then every sender writes each of its tokens once, straight into its final row of each
 * destination's dispatch area (rows ordered by source rank, then source token index). */
#include "ep/ep_internal.h"

#include <string.h>
/* A receiver's dispatch area: rows per received token (x, scales, top-k ids and weights,
 * source index); with the expanded layout x and scales have xrows rows instead, followed by
 * one f32 weight per expanded row (ew_bytes 4, else 0). */
typedef struct recv_layout {
    int64_t rows, xrows, x_off, s_off, i_off, w_off, src_off, ew_off, total;
} recv_layout;

static recv_layout layout_of(int64_t rows, int64_t xrows, int64_t row_bytes, int64_t scale_row_bytes,
                             int64_t idx_row_bytes, int64_t w_row_bytes, int64_t ew_bytes) {
    recv_layout l;
    l.rows = rows;
    l.xrows = xrows;
    l.x_off = 0;
    l.s_off = ts__align(xrows * row_bytes, 64);
    l.i_off = l.s_off + ts__align(xrows * scale_row_bytes, 64);
    l.w_off = l.i_off + ts__align(rows * idx_row_bytes, 64);
    l.src_off = l.w_off + ts__align(rows * w_row_bytes, 64);
    l.ew_off = l.src_off + ts__align(rows * 4, 64);
    l.total = l.ew_off + ts__align(xrows * ew_bytes, 64);
    return l;
}

static int64_t *meta_counts(ts__ep_meta *m) { return (int64_t *)(void *)(m + 1); }
static int32_t *meta_experts(ts__ep_meta *m, int R) { return (int32_t *)(void *)(meta_counts(m) + R); }
/* Tokens going to each node (internode), after the E expert counts. */
static int64_t *meta_nodes(ts__ep_meta *m, int R, int64_t E) {
    return (int64_t *)(void *)((uint8_t *)meta_experts(m, R) + ts__align(4 * E, 8));
}
static int64_t meta_bytes(int R, int64_t E, int nodes) {
    return (int64_t)sizeof(ts__ep_meta) + 8 * (int64_t)R + ts__align(4 * E, 8) + 8 * (int64_t)nodes;
}

/* One token of a dispatch message to another node (internode): its row, scales, global top-k
 * ids (i64) and weights, source index, and its final row in each rank of that node (-1: not
 * there). The receiving proxy writes it into each of those ranks' dispatch areas. */
typedef struct rec_layout {
    int64_t s, i, w, src, rows, bytes;
} rec_layout;

static rec_layout rec_layout_of(int64_t row_bytes, int64_t scale_row, int64_t K, int k) {
    rec_layout r;
    r.s = row_bytes;
    r.i = ts__align(r.s + scale_row, 8);
    r.w = r.i + 8 * K;
    r.src = r.w + 4 * K;
    r.rows = r.src + 4;
    r.bytes = ts__align(r.rows + 4 * (int64_t)k, 16); /* keeps every record's row 16-byte aligned */
    return r;
}

ts_status ts_ep_handle_destroy(ts_ep_handle *h) {
    if (!h) return TS_OK;
    free(h->send_pos);
    free(h->send_count);
    free(h->recv_offsets);
    free(h->counts);
    free(h->node_pos);
    free(h->copy_idx);
    free(h->fwd_rows);
    free(h->fwd_rec);
    free(h->fwd_copy);
    free(h->ex_dst);
    free(h->ex_row);
    free(h->ex_rows);
    free(h);
    return TS_OK;
}

ts_status ts_ep_handle_get_num_recv_tokens(const ts_ep_handle *h, int64_t *num_recv_tokens) {
    if (!h || !num_recv_tokens)
        return ts__fail(TS_ERR_NULL_POINTER, "ts_ep_handle_get_num_recv_tokens: %s is NULL", h ? "num_recv_tokens" : "h");
    *num_recv_tokens = h->num_recv;
    return TS_OK;
}

ts_status ts_ep_handle_get_recv_rank_offsets(const ts_ep_handle *h, int64_t *offsets, int64_t num_offsets) {
    if (!h || !offsets)
        return ts__fail(TS_ERR_NULL_POINTER, "ts_ep_handle_get_recv_rank_offsets: %s is NULL", h ? "offsets" : "h");
    if (num_offsets != h->num_ranks + 1)
        return ts__fail(TS_ERR_SHAPE, "ts_ep_handle_get_recv_rank_offsets: num_offsets %lld != num_ranks + 1 = %d",
                        (long long)num_offsets, h->num_ranks + 1);
    memcpy(offsets, h->recv_offsets, (size_t)num_offsets * sizeof *offsets);
    return TS_OK;
}


typedef struct local_info {
    int64_t N, hidden, row_bytes, S, scale_es, K, idx_es, E;
    bool fp8, has_topk, cached;
    ts_ep_handle *h;       /* new handle (non-cached) */
    const ts_ep_handle *use; /* routing used: h or args->handle */
    int64_t expand_align;  /* the expanded layout is asked for (0: not) */
    bool placed;           /* ... and the senders write it (every rank's verdict) */
} local_info;

#define D "ts_ep_dispatch"

/* Internode routing of a new handle from its send_pos: the record of each token in the
 * message to each node (token order), and the index of each remote copy in the combine
 * message that comes back from that node (token order, then rank order). */
static ts_status internode_routing(const ts_ep_buffer *b, ts_ep_handle *h) {
    const int R = b->num_ranks, nodes = b->num_nodes, k = b->ranks_per_node;
    const int64_t N = h->num_tokens;
    h->node_pos = malloc((size_t)(N * nodes > 0 ? N * nodes : 1) * sizeof *h->node_pos);
    h->copy_idx = malloc((size_t)(N * R > 0 ? N * R : 1) * sizeof *h->copy_idx);
    int64_t *cur = calloc(2 * (size_t)nodes, sizeof *cur); /* records, copies per node */
    if (!h->node_pos || !h->copy_idx || !cur) {
        free(cur);
        return TS_ERR_OUT_OF_MEMORY;
    }
    for (int64_t t = 0; t < N; t++)
        for (int n = 0; n < nodes; n++) {
            bool any = false;
            for (int j = 0; j < k; j++) {
                const int64_t i = t * R + n * k + j;
                const bool sent = h->send_pos[i] >= 0;
                any |= sent;
                h->copy_idx[i] = sent && n != b->node ? (int32_t)cur[nodes + n]++ : -1;
            }
            h->node_pos[t * nodes + n] = any ? (int32_t)cur[n]++ : -1;
        }
    free(cur);
    return TS_OK;
}

/* Room for the expanded placement in a new handle (before the exchange, so a failure is
 * every rank's verdict), and the per-expert counts checked against the top-k ids: the senders'
 * rows are placed from these counts, so a stale layout must not make them collide. */
static ts_status expanded_prepare(const ts_ep_buffer *b, const ts_ep_dispatch_args *a, local_info *li) {
    ts_ep_handle *h = li->h;
    const int64_t NK = li->N * li->K;
    h->ex_k = li->K;
    h->ex_dst = malloc((size_t)(NK > 0 ? NK : 1) * sizeof *h->ex_dst);
    h->ex_row = malloc((size_t)(NK > 0 ? NK : 1) * sizeof *h->ex_row);
    h->ex_rows = malloc((size_t)(b->num_ranks + li->E) * sizeof *h->ex_rows);
    if (!h->ex_dst || !h->ex_row || !h->ex_rows)
        return ts__fail(TS_ERR_OUT_OF_MEMORY, D ": no memory for the expanded placement of %lld tokens",
                        (long long)li->N);
    int64_t *cnt = h->ex_rows + b->num_ranks;
    for (int64_t e = 0; e < li->E; e++) cnt[e] = 0;
    for (int64_t t = 0; t < li->N; t++)
        for (int64_t k = 0; k < li->K; k++) {
            const int64_t e = ts__ep_idx_at(a->topk_idx, t, k);
            if (e >= 0) cnt[e]++;
        }
    const ts_tensor *tpe = a->num_tokens_per_expert;
    for (int64_t e = 0; e < li->E; e++)
        if (((const int32_t *)tpe->data)[e * tpe->strides[0]] != cnt[e])
            return ts__fail(TS_ERR_INVALID_ARGUMENT, D ": num_tokens_per_expert[%lld] = %d but topk_idx selects it %lld times",
                            (long long)e, ((const int32_t *)tpe->data)[e * tpe->strides[0]], (long long)cnt[e]);
    return TS_OK;
}

static ts_status validate(const ts_ep_buffer *b, const ts_ep_dispatch_args *a, local_info *li, ts__ep_meta *m) {
    const int R = b->num_ranks;
    if (!a) return ts__fail(TS_ERR_NULL_POINTER, D ": args is NULL");
    TS__RETURN_IF_ERROR(ts_tensor_check(a->x, D ": x"));
    if (a->x->dtype != TS_BF16 && a->x->dtype != TS_E4M3)
        return ts__fail(TS_ERR_DTYPE, D ": x must be bf16 or e4m3, got %s", ts_dtype_name(a->x->dtype));
    if (a->x->ndim != 2) return ts__fail(TS_ERR_SHAPE, D ": x must be 2-D [num_tokens, hidden]");
    TS__RETURN_IF_ERROR(ts_tensor_check_last_contiguous(a->x, D ": x"));
    li->fp8 = a->x->dtype == TS_E4M3;
    li->N = a->x->shape[0];
    li->hidden = a->x->shape[1];
    li->row_bytes = li->hidden * (int64_t)ts_dtype_size(a->x->dtype);
    if (li->N > INT32_MAX) return ts__fail(TS_ERR_SHAPE, D ": x has %lld tokens (> INT32_MAX)", (long long)li->N);
    if (li->hidden < 1 || li->row_bytes % 16 != 0)
        return ts__fail(TS_ERR_SHAPE, D ": x: hidden %lld x element size must be a positive multiple of 16 bytes",
                        (long long)li->hidden);
    if (li->fp8) {
        if (!a->x_scales) return ts__fail(TS_ERR_NULL_POINTER, D ": x_scales is required with e4m3 x");
        TS__RETURN_IF_ERROR(ts_tensor_check(a->x_scales, D ": x_scales"));
        if (a->x_scales->ndim != 2 || a->x_scales->shape[0] != li->N)
            return ts__fail(TS_ERR_SHAPE, D ": x_scales must be [num_tokens = %lld, num_scales]", (long long)li->N);
        li->S = a->x_scales->shape[1];
        li->scale_es = (int64_t)ts_dtype_size(a->x_scales->dtype);
        if (li->S > 65536) return ts__fail(TS_ERR_SHAPE, D ": x_scales has %lld columns (> 65536)", (long long)li->S);
    } else if (a->x_scales) {
        return ts__fail(TS_ERR_INVALID_ARGUMENT, D ": x_scales must be NULL with bf16 x");
    }
    li->cached = a->handle != NULL;
    if ((a->topk_idx != NULL) != (a->topk_weights != NULL))
        return ts__fail(TS_ERR_INVALID_ARGUMENT, D ": topk_idx and topk_weights must be given together");
    li->has_topk = a->topk_idx != NULL;
    if (a->expert_alignment < 0 || a->expert_alignment > (1 << 24))
        return ts__fail(TS_ERR_INVALID_ARGUMENT, D ": expert_alignment %lld out of range",
                        (long long)a->expert_alignment);
    if (a->num_worst_tokens < 0 || a->num_worst_tokens > INT32_MAX)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, D ": num_worst_tokens %lld out of range",
                        (long long)a->num_worst_tokens);
    if (a->config && (a->config->num_max_nvl_chunked_send_tokens < 1 || a->config->num_max_nvl_chunked_recv_tokens < 1))
        return ts__fail(TS_ERR_INVALID_ARGUMENT, D ": config chunk sizes must be >= 1");
    if (li->cached) {
        const ts_ep_handle *h = a->handle;
        if (li->has_topk) return ts__fail(TS_ERR_INVALID_ARGUMENT, D ": cached dispatch (handle) takes no topk_idx");
        if (h->buf != b) return ts__fail(TS_ERR_INVALID_ARGUMENT, D ": handle belongs to another buffer");
        if (h->num_tokens != li->N)
            return ts__fail(TS_ERR_SHAPE, D ": x has %lld tokens, the handle's dispatch had %lld", (long long)li->N,
                            (long long)h->num_tokens);
        li->use = h;
        li->E = 0;
    } else {
        if (a->num_worst_tokens > 0 && !li->has_topk)
            return ts__fail(TS_ERR_INVALID_ARGUMENT, D ": num_worst_tokens needs topk_idx");
        if (!a->num_tokens_per_rank || !a->is_token_in_rank || !a->num_tokens_per_expert)
            return ts__fail(TS_ERR_NULL_POINTER, D ": %s is required without a handle",
                            !a->num_tokens_per_rank ? "num_tokens_per_rank"
                            : !a->is_token_in_rank  ? "is_token_in_rank"
                                                    : "num_tokens_per_expert");
        TS__RETURN_IF_ERROR(ts_tensor_check(a->num_tokens_per_expert, D ": num_tokens_per_expert"));
        TS__RETURN_IF_ERROR(ts_tensor_check_dtype(a->num_tokens_per_expert, D ": num_tokens_per_expert", TS_I32));
        if (a->num_tokens_per_expert->ndim != 1)
            return ts__fail(TS_ERR_SHAPE, D ": num_tokens_per_expert must be 1-D [num_experts]");
        li->E = a->num_tokens_per_expert->shape[0];
        if (li->E < R || li->E % R != 0)
            return ts__fail(TS_ERR_INVALID_ARGUMENT, D ": num_experts %lld is not a positive multiple of num_ranks %d",
                            (long long)li->E, R);
        if ((int64_t)sizeof(ts__ep_meta) + 8 * R + 4 * li->E > TS__EP_META_SLOT_BYTES)
            return ts__fail(TS_ERR_UNSUPPORTED, D ": %lld experts over %d ranks exceed the metadata slot",
                            (long long)li->E, R);
        TS__RETURN_IF_ERROR(ts_tensor_check(a->num_tokens_per_rank, D ": num_tokens_per_rank"));
        TS__RETURN_IF_ERROR(ts_tensor_check_dtype(a->num_tokens_per_rank, D ": num_tokens_per_rank", TS_I32));
        const int64_t shr[1] = {R};
        TS__RETURN_IF_ERROR(ts_tensor_check_shape(a->num_tokens_per_rank, D ": num_tokens_per_rank", 1, shr));
        TS__RETURN_IF_ERROR(ts_tensor_check(a->is_token_in_rank, D ": is_token_in_rank"));
        TS__RETURN_IF_ERROR(ts_tensor_check_dtype(a->is_token_in_rank, D ": is_token_in_rank", TS_BOOL));
        const int64_t shi[2] = {li->N, R};
        TS__RETURN_IF_ERROR(ts_tensor_check_shape(a->is_token_in_rank, D ": is_token_in_rank", 2, shi));
        if (!ts_tensor_is_contiguous(a->is_token_in_rank))
            return ts__fail(TS_ERR_STRIDE, D ": is_token_in_rank must be contiguous");
        if (li->has_topk) {
            TS__RETURN_IF_ERROR(ts__ep_check_topk_idx(a->topk_idx, li->E, D));
            if (a->topk_idx->shape[0] != li->N)
                return ts__fail(TS_ERR_SHAPE, D ": topk_idx has %lld rows, x has %lld",
                                (long long)a->topk_idx->shape[0], (long long)li->N);
            li->K = a->topk_idx->shape[1];
            li->idx_es = (int64_t)ts_dtype_size(a->topk_idx->dtype);
            TS__RETURN_IF_ERROR(ts_tensor_check(a->topk_weights, D ": topk_weights"));
            TS__RETURN_IF_ERROR(ts_tensor_check_dtype(a->topk_weights, D ": topk_weights", TS_F32));
            const int64_t shw[2] = {li->N, li->K};
            TS__RETURN_IF_ERROR(ts_tensor_check_shape(a->topk_weights, D ": topk_weights", 2, shw));
        }
        /* The routing: rank-local order of each token per destination, checked against
         * num_tokens_per_rank so a stale layout cannot make senders collide. */
        ts_ep_handle *h = calloc(1, sizeof *h);
        if (h) {
            h->send_pos = malloc((size_t)(li->N * R > 0 ? li->N * R : 1) * sizeof *h->send_pos);
            h->send_count = calloc((size_t)R, sizeof *h->send_count);
            h->recv_offsets = calloc((size_t)R + 1, sizeof *h->recv_offsets);
        }
        if (!h || !h->send_pos || !h->send_count || !h->recv_offsets) {
            ts_ep_handle_destroy(h);
            return ts__fail(TS_ERR_OUT_OF_MEMORY, D ": no memory for the handle (%lld tokens)", (long long)li->N);
        }
        h->buf = b;
        h->num_ranks = R;
        h->num_tokens = li->N;
        const bool *in = a->is_token_in_rank->data;
        for (int64_t t = 0; t < li->N; t++)
            for (int r = 0; r < R; r++) h->send_pos[t * R + r] = in[t * R + r] ? (int32_t)h->send_count[r]++ : -1;
        const int32_t *tpr = a->num_tokens_per_rank->data;
        for (int r = 0; r < R; r++)
            if (tpr[r * a->num_tokens_per_rank->strides[0]] != h->send_count[r]) {
                const long long want = tpr[r * a->num_tokens_per_rank->strides[0]];
                const long long got = h->send_count[r];
                ts_ep_handle_destroy(h);
                return ts__fail(TS_ERR_INVALID_ARGUMENT,
                                D ": num_tokens_per_rank[%d] = %lld but is_token_in_rank has %lld tokens for it", r,
                                want, got);
            }
        li->h = h;
        li->use = h;
        if (b->num_nodes > 1 && internode_routing(b, h) != TS_OK) {
            li->h = NULL;
            ts_ep_handle_destroy(h);
            return ts__fail(TS_ERR_OUT_OF_MEMORY, D ": no memory for the internode routing (%lld tokens)",
                            (long long)li->N);
        }
    }
    if (meta_bytes(R, li->E, b->num_nodes) > TS__EP_META_SLOT_BYTES)
        return ts__fail(TS_ERR_UNSUPPORTED, D ": %lld experts over %d ranks exceed the metadata slot",
                        (long long)li->E, R);
    if (li->expand_align > 0 && a->num_worst_tokens > 0)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, D ": the expanded layout takes no num_worst_tokens");
    if (li->expand_align > 0 && li->h && li->has_topk && b->num_nodes == 1)
        TS__RETURN_IF_ERROR(expanded_prepare(b, a, li));
    /* Publish. */
    m->expand_align = li->expand_align;
    m->hidden = li->hidden;
    m->x_dtype = a->x->dtype;
    m->scale_dtype = li->fp8 ? (int64_t)a->x_scales->dtype : -1;
    m->num_scales = li->S;
    m->has_topk = li->has_topk;
    m->has_weights = li->has_topk;
    m->num_topk = li->K;
    m->idx_dtype = li->has_topk ? (int64_t)a->topk_idx->dtype : -1;
    m->cached = li->cached;
    m->num_tokens = li->N;
    m->num_experts = li->E;
    m->num_worst_tokens = a->num_worst_tokens;
    int64_t *cnt = meta_counts(m);
    for (int r = 0; r < R; r++) cnt[r] = li->use->send_count[r];
    if (!li->cached) {
        int32_t *ec = meta_experts(m, R);
        const ts_tensor *t = a->num_tokens_per_expert;
        for (int64_t e = 0; e < li->E; e++) ec[e] = ((const int32_t *)t->data)[e * t->strides[0]];
    }
    if (b->num_nodes > 1) {
        const int nodes = b->num_nodes;
        int64_t *nc = meta_nodes(m, R, li->E);
        for (int n = 0; n < nodes; n++) nc[n] = 0;
        for (int64_t t = 0; t < li->N; t++)
            for (int n = 0; n < nodes; n++) nc[n] += li->use->node_pos[t * nodes + n] >= 0;
        const ts_tensor *tn = a->num_tokens_per_rdma_rank;
        if (tn && !li->cached) {
            TS__RETURN_IF_ERROR(ts_tensor_check(tn, D ": num_tokens_per_rdma_rank"));
            TS__RETURN_IF_ERROR(ts_tensor_check_dtype(tn, D ": num_tokens_per_rdma_rank", TS_I32));
            const int64_t shn[1] = {nodes};
            TS__RETURN_IF_ERROR(ts_tensor_check_shape(tn, D ": num_tokens_per_rdma_rank", 1, shn));
            for (int n = 0; n < nodes; n++)
                if (((const int32_t *)tn->data)[n * tn->strides[0]] != nc[n])
                    return ts__fail(TS_ERR_INVALID_ARGUMENT,
                                    D ": num_tokens_per_rdma_rank[%d] = %d but is_token_in_rank has %lld tokens for "
                                    "node %d", n, ((const int32_t *)tn->data)[n * tn->strides[0]], (long long)nc[n], n);
        }
    }
    return TS_OK;
}

typedef struct copy_ctx {
    const ts_ep_buffer *b;
    const ts_ep_dispatch_args *a;
    const local_info *li;
    const recv_layout *lay; /* [R] */
    const int64_t *base;    /* [R]: my first row in each destination (non-cached) */
    int nthreads;
    /* internode: records for other nodes go to stage + soff[n] (rows of remote ranks there) */
    uint8_t *stage;
    const int64_t *soff;
    rec_layout rec;
    bool placed; /* x rows and scales go to the expanded rows li->use->ex_row */
} copy_ctx;

/* Packs token t into its record of the message to node n. */
static void pack_record(const copy_ctx *c, int64_t t, int n) {
    const ts_ep_buffer *b = c->b;
    const local_info *li = c->li;
    const ts_ep_dispatch_args *a = c->a;
    const int R = b->num_ranks, k = b->ranks_per_node;
    const rec_layout *rl = &c->rec;
    uint8_t *p = c->stage + c->soff[n] + (int64_t)li->use->node_pos[t * b->num_nodes + n] * rl->bytes;
    ts__ep_copy_row(p, (const uint8_t *)a->x->data + t * a->x->strides[0] * (int64_t)ts_dtype_size(a->x->dtype),
                    li->row_bytes);
    if (li->fp8 && li->S > 0) {
        const ts_tensor *s = a->x_scales;
        const uint8_t *sp = s->data;
        const size_t es = (size_t)li->scale_es;
        for (int64_t j = 0; j < li->S; j++)
            memcpy(p + rl->s + j * li->scale_es, sp + (t * s->strides[0] + j * s->strides[1]) * (int64_t)es, es);
    }
    for (int64_t kk = 0; kk < li->K; kk++) {
        const int64_t e = ts__ep_idx_at(a->topk_idx, t, kk);
        memcpy(p + rl->i + 8 * kk, &e, 8);
        const float w = ((const float *)a->topk_weights->data)[t * a->topk_weights->strides[0] +
                                                                kk * a->topk_weights->strides[1]];
        memcpy(p + rl->w + 4 * kk, &w, 4);
    }
    const int32_t src = (int32_t)t;
    memcpy(p + rl->src, &src, 4);
    for (int j = 0; j < k; j++) {
        const int d = n * k + j;
        int64_t row = li->use->send_pos[t * R + d];
        if (row >= 0 && !li->cached) row += c->base[d];
        const int32_t r32 = (int32_t)row;
        memcpy(p + rl->rows + 4 * j, &r32, 4);
    }
}

static void copy_scales(const copy_ctx *c, int64_t t, uint8_t *dst) {
    const ts_tensor *s = c->a->x_scales;
    const uint8_t *sp = s->data;
    const int64_t es = c->li->scale_es;
    for (int64_t j = 0; j < c->li->S; j++)
        memcpy(dst + j * es, sp + (t * s->strides[0] + j * s->strides[1]) * es, (size_t)es);
}

/* Token t's row (and scales, and each slot's weight) into each of its expanded rows. */
static void place_expanded(const copy_ctx *c, int64_t t) {
    const local_info *li = c->li;
    const ts_ep_handle *h = li->use;
    const ts_ep_dispatch_args *a = c->a;
    const uint8_t *xt = (const uint8_t *)a->x->data + t * a->x->strides[0] * (int64_t)ts_dtype_size(a->x->dtype);
    for (int64_t k = 0; k < h->ex_k; k++) {
        const int64_t s = h->ex_row[t * h->ex_k + k];
        if (s < 0) continue;
        const int d = h->ex_dst[t * h->ex_k + k];
        uint8_t *area = ts__ep_dispatch_area(c->b, d);
        const recv_layout *l = &c->lay[d];
        ts__ep_copy_row(area + l->x_off + s * li->row_bytes, xt, li->row_bytes);
        if (li->fp8 && li->S > 0) copy_scales(c, t, area + l->s_off + s * li->S * li->scale_es);
        if (li->has_topk)
            ((float *)(void *)(area + l->ew_off))[s] =
                ((const float *)a->topk_weights->data)[t * a->topk_weights->strides[0] + k * a->topk_weights->strides[1]];
    }
}

static void copy_task(void *vctx, int tid, int nthreads) {
    const copy_ctx *c = vctx;
    const ts_ep_buffer *b = c->b;
    const local_info *li = c->li;
    const ts_ep_dispatch_args *a = c->a;
    const int R = b->num_ranks;
    const int64_t N = li->N;
    const int64_t t0 = N * tid / nthreads, t1 = N * (tid + 1) / nthreads;
    const int64_t El = li->E / R;
    const uint8_t *x = a->x->data;
    const int64_t xs = a->x->strides[0] * (int64_t)ts_dtype_size(a->x->dtype);
    const int32_t *pos = li->use->send_pos;
    for (int64_t t = t0; t < t1; t++) {
        if (b->num_nodes > 1)
            for (int n = 0; n < b->num_nodes; n++)
                if (n != b->node && li->use->node_pos[t * b->num_nodes + n] >= 0) pack_record(c, t, n);
        if (c->placed) place_expanded(c, t);
        for (int d = 0; d < R; d++) {
            int64_t row = pos[t * R + d];
            if (row < 0 || !b->peer[d]) continue; /* other nodes: through their proxy */
            if (!li->cached) row += c->base[d];
            uint8_t *area = ts__ep_dispatch_area(b, d);
            const recv_layout *l = &c->lay[d];
            ((int32_t *)(void *)(area + l->src_off))[row] = (int32_t)t;
            if (!c->placed) {
                ts__ep_copy_row(area + l->x_off + row * li->row_bytes, x + t * xs, li->row_bytes);
                if (li->fp8 && li->S > 0) copy_scales(c, t, area + l->s_off + row * li->S * li->scale_es);
            }
            if (li->has_topk) {
                const int64_t lo = d * El, hi = lo + El;
                const float *w = a->topk_weights->data;
                float *dw = (float *)(void *)(area + l->w_off) + row * li->K;
                for (int64_t k = 0; k < li->K; k++) {
                    const int64_t e = ts__ep_idx_at(a->topk_idx, t, k);
                    const bool mine = e >= lo && e < hi;
                    const int64_t local = mine ? e - lo : -1;
                    if (li->idx_es == 8)
                        ((int64_t *)(void *)(area + l->i_off))[row * li->K + k] = local;
                    else
                        ((int32_t *)(void *)(area + l->i_off))[row * li->K + k] = (int32_t)local;
                    dw[k] = mine ? w[t * a->topk_weights->strides[0] + k * a->topk_weights->strides[1]] : 0.0f;
                }
            }
        }
    }
    ts__ep_copy_fence();
}

/* Proxy side: records of one message from a source on another node, written into the final
 * rows of this node's ranks (the same bytes the source writes for its own node's ranks). */
typedef struct unpack_ctx {
    const ts_ep_buffer *b;
    const local_info *li;
    const recv_layout *lay; /* [R] */
    const uint8_t *msg;
    int64_t nrec;
    rec_layout rec;
    int32_t *fwd_rows; /* NULL (cached) or [nrec, k]: kept for combine */
} unpack_ctx;

static void unpack_task(void *vc, int tid, int nthreads) {
    const unpack_ctx *c = vc;
    const ts_ep_buffer *b = c->b;
    const local_info *li = c->li;
    const int k = b->ranks_per_node;
    const int64_t El = li->E / b->num_ranks;
    const int64_t i0 = c->nrec * tid / nthreads, i1 = c->nrec * (tid + 1) / nthreads;
    for (int64_t i = i0; i < i1; i++) {
        const uint8_t *p = c->msg + i * c->rec.bytes;
        int32_t src;
        memcpy(&src, p + c->rec.src, 4);
        for (int j = 0; j < k; j++) {
            int32_t row;
            memcpy(&row, p + c->rec.rows + 4 * j, 4);
            if (c->fwd_rows) c->fwd_rows[i * k + j] = row;
            if (row < 0) continue;
            const int d = b->node_first + j;
            uint8_t *area = ts__ep_dispatch_area(b, d);
            const recv_layout *l = &c->lay[d];
            ts__ep_copy_row(area + l->x_off + row * li->row_bytes, p, li->row_bytes);
            ((int32_t *)(void *)(area + l->src_off))[row] = src;
            if (li->fp8 && li->S > 0) memcpy(area + l->s_off + row * li->S * li->scale_es, p + c->rec.s,
                                             (size_t)(li->S * li->scale_es));
            const int64_t lo = d * El, hi = lo + El;
            float *dw = (float *)(void *)(area + l->w_off) + row * li->K;
            for (int64_t kk = 0; kk < li->K; kk++) {
                int64_t e;
                float w;
                memcpy(&e, p + c->rec.i + 8 * kk, 8);
                memcpy(&w, p + c->rec.w + 4 * kk, 4);
                const bool mine = e >= lo && e < hi;
                const int64_t local = mine ? e - lo : -1;
                if (li->idx_es == 8)
                    ((int64_t *)(void *)(area + l->i_off))[row * li->K + kk] = local;
                else
                    ((int32_t *)(void *)(area + l->i_off))[row * li->K + kk] = (int32_t)local;
                dw[kk] = mine ? w : 0.0f;
            }
        }
    }
    ts__ep_copy_fence();
}

static int64_t node_count(ts_ep_buffer *b, uint64_t call, int s, int64_t E, int n) {
    return meta_nodes(ts__ep_meta_of(b, s, call), b->num_ranks, E)[n];
}

/* Internode capacity: every rank checks every rank's staging (sends to other nodes, and
 * receives as their proxy), so all reach the same verdict. */
static ts_status check_staging(ts_ep_buffer *b, uint64_t call, int64_t E, int64_t rec_bytes) {
    const int k = b->ranks_per_node, nodes = b->num_nodes;
    for (int q = 0; q < b->num_ranks; q++) {
        const int nq = q / k, lq = q % k;
        int64_t send = 0, recv = 0, biggest = 0;
        for (int n = 0; n < nodes; n++) {
            if (n == nq) continue;
            const int64_t so = node_count(b, call, q, E, n) * rec_bytes;
            const int64_t ri = node_count(b, call, n * k + lq, E, nq) * rec_bytes;
            send += so;
            recv += ri;
            biggest = ts__max64(biggest, ts__max64(so, ri));
        }
        if (send > b->rdma_half || recv > b->rdma_half || biggest > INT32_MAX)
            return ts__fail(TS_ERR_INVALID_ARGUMENT,
                            D ": rank %d would stage %lld bytes to send and %lld to forward for other nodes, more "
                            "than half of num_rdma_bytes (%lld) holds (or one message > 2 GiB); see "
                            "ts_ep_get_internode_buffer_size_hint",
                            q, (long long)send, (long long)recv, (long long)b->rdma_half);
    }
    return TS_OK;
}

/* The internode part of the data phase: receive the records this rank forwards, send its own
 * records for other nodes, and unpack each message as it arrives. */
static ts_status internode_exchange(ts_ep_buffer *b, uint64_t call, const local_info *li, copy_ctx *cc,
                                    const recv_layout *lay, int64_t *roff, int nt) {
    const int R = b->num_ranks, k = b->ranks_per_node, nodes = b->num_nodes;
    uint8_t *rstage = b->rdma + b->rdma_half;
    ts_ep_handle *h = li->h;
    /* Served sources: the rank of each other node with my local index. */
    if (h) {
        h->counts = malloc((size_t)R * R * sizeof *h->counts);
        h->fwd_rec = calloc((size_t)R + 1, sizeof *h->fwd_rec);
        if (!h->counts || !h->fwd_rec)
            return ts__fail(TS_ERR_OUT_OF_MEMORY, D ": no memory for the internode handle");
        for (int s = 0; s < R; s++) {
            memcpy(h->counts + (int64_t)s * R, meta_counts(ts__ep_meta_of(b, s, call)), (size_t)R * sizeof(int64_t));
            const bool served = s / k != b->node && s % k == b->local_rank;
            h->fwd_rec[s + 1] = h->fwd_rec[s] + (served ? node_count(b, call, s, li->E, b->node) : 0);
        }
        h->fwd_rows = malloc((size_t)(h->fwd_rec[R] * k > 0 ? h->fwd_rec[R] * k : 1) * sizeof *h->fwd_rows);
        h->fwd_copy = malloc((size_t)(h->fwd_rec[R] + 1) * sizeof *h->fwd_copy);
        if (!h->fwd_rows || !h->fwd_copy) return ts__fail(TS_ERR_OUT_OF_MEMORY, D ": no memory for the internode handle");
    }
    const int64_t rb = cc->rec.bytes;
    b->nreqs = 0;
    b->data_phase = true;
    int64_t off = 0;
    for (int n = 0; n < nodes; n++) {
        const int s = n * k + b->local_rank;
        const int64_t cnt = n == b->node ? 0 : node_count(b, call, s, li->E, b->node);
        roff[n] = off;
        if (cnt > 0) {
            MPI_Request q;
            MPI_Irecv(rstage + off, (int)(cnt * rb), MPI_BYTE, s, TS__EP_TAG_DISPATCH, b->comm, &q);
            ts__ep_req_push(b, q, s);
        }
        off += cnt * rb;
    }
    const int nrecv = b->nreqs;
    if (li->N > 0) ts__parallel_run(cc->nthreads, copy_task, cc);
    for (int n = 0; n < nodes; n++) {
        const int64_t cnt = n == b->node ? 0 : node_count(b, call, b->rank, li->E, n);
        if (cnt > 0) {
            MPI_Request q;
            const int p = n * k + b->local_rank;
            MPI_Isend(cc->stage + cc->soff[n], (int)(cnt * rb), MPI_BYTE, p, TS__EP_TAG_DISPATCH, b->comm, &q);
            ts__ep_req_push(b, q, p);
        }
    }
    /* Unpack messages in arrival order (each is independent); the deadline covers the wait. */
    const double deadline = ts__ep_now_s() + b->timeout_s;
    ts__ep_backoff w = TS__EP_BACKOFF_INIT;
    for (int left = nrecv; left > 0;) {
        int idx = MPI_UNDEFINED, flag = 0;
        MPI_Testany(nrecv, b->reqs, &idx, &flag, MPI_STATUS_IGNORE);
        if (flag && idx != MPI_UNDEFINED) {
            left--;
            const int s = b->req_rank[idx], n = s / k;
            unpack_ctx uc = {b, li, lay, rstage + roff[n], node_count(b, call, s, li->E, b->node), cc->rec,
                             h ? h->fwd_rows + h->fwd_rec[s] * k : NULL};
            int unt = nt;
            if (unt > uc.nrec / 8) unt = uc.nrec / 8 > 0 ? (int)(uc.nrec / 8) : 1;
            ts__parallel_run(unt, unpack_task, &uc);
            w = (ts__ep_backoff)TS__EP_BACKOFF_INIT;
            continue;
        }
        if (w.sleep_ns > 20000) w.sleep_ns = 20000;
        if (ts__ep_backoff_step(&w) && ts__ep_now_s() > deadline) break; /* ts__ep_wait_reqs names the rank */
        /* keep the sends moving too */
        if (b->nreqs > nrecv) {
            int dummy;
            MPI_Testall(b->nreqs - nrecv, b->reqs + nrecv, &dummy, MPI_STATUSES_IGNORE);
        }
    }
    TS__RETURN_IF_ERROR(ts__ep_wait_reqs_until(b, deadline, D));
    if (h) {
        h->fwd_copy[0] = 0;
        for (int64_t i = 0; i < h->fwd_rec[R]; i++) {
            int64_t c = 0;
            for (int j = 0; j < k; j++) c += h->fwd_rows[i * k + j] >= 0;
            h->fwd_copy[i + 1] = h->fwd_copy[i] + c;
        }
    }
    return TS_OK;
}

/* Every receiver's expanded row count (from the published per-expert counts, or a cached
 * dispatch's handle) and, when all fit their areas, their layouts in lay: true. A new
 * handle's placement is then fixed: my (token, slot) rows follow those of lower source
 * ranks inside each expert group, in my token order. */
static bool expanded_layout(ts_ep_buffer *b, uint64_t call, const ts_ep_dispatch_args *a, local_info *li,
                            recv_layout *lay, int64_t area) {
    const int R = b->num_ranks, me = b->rank;
    ts_ep_handle *h = (ts_ep_handle *)li->use;
    if (!li->cached) {
        const int64_t El = li->E / R, A = li->expand_align;
        int64_t *cur = h->ex_rows + R; /* [E]: my next row for each expert */
        for (int d = 0; d < R; d++) {
            int64_t start = 0;
            for (int64_t i = 0; i < El; i++) {
                const int64_t e = d * El + i;
                int64_t c = 0;
                for (int s = 0; s < R; s++) {
                    if (s == me) cur[e] = start + c;
                    c += meta_experts(ts__ep_meta_of(b, s, call), R)[e];
                }
                start += ts__align(c, A);
            }
            h->ex_rows[d] = start;
        }
    }
    const int64_t scale_row = li->S * li->scale_es, idx_row = li->K * li->idx_es, w_row = li->K * 4;
    for (int d = 0; d < R; d++)
        if (layout_of(lay[d].rows, h->ex_rows[d], li->row_bytes, scale_row, idx_row, w_row, li->has_topk ? 4 : 0)
                .total > area)
            return false;
    for (int d = 0; d < R; d++)
        lay[d] = layout_of(lay[d].rows, h->ex_rows[d], li->row_bytes, scale_row, idx_row, w_row, li->has_topk ? 4 : 0);
    if (!li->cached) {
        const int64_t El = li->E / R, K = li->K;
        int64_t *cur = h->ex_rows + R;
        for (int64_t t = 0; t < li->N; t++)
            for (int64_t k = 0; k < K; k++) {
                const int64_t e = ts__ep_idx_at(a->topk_idx, t, k);
                h->ex_dst[t * K + k] = e >= 0 ? (int32_t)(e / El) : -1;
                h->ex_row[t * K + k] = e >= 0 ? (int32_t)cur[e]++ : -1;
            }
    }
    return true;
}

ts_status ts_ep_dispatch(ts_ep_buffer *b, const ts_ep_dispatch_args *a, ts_ep_dispatch_result *result,
                         ts_ep_handle **handle_out) {
    return ts__ep_dispatch_expanded(b, a, NULL, result, handle_out);
}

ts_status ts__ep_dispatch_expanded(ts_ep_buffer *b, const ts_ep_dispatch_args *a, ts__ep_expanded *ex,
                                   ts_ep_dispatch_result *result, ts_ep_handle **handle_out) {
    TS__RETURN_IF_ERROR(ts__ep_check_usable(b, D));
    const int R = b->num_ranks, me = b->rank;
    const uint64_t call = b->calls++;
    ts__ep_meta *m = ts__ep_meta_of(b, me, call);
    memset(m, 0, sizeof *m);
    m->op = TS__EP_OP_DISPATCH;
    local_info li;
    memset(&li, 0, sizeof li);
    if (ex) ex->placed = false;
    li.expand_align = ex ? ex->alignment : 0;
    ts_status st = result ? TS_OK : ts__fail(TS_ERR_NULL_POINTER, D ": result is NULL");
    if (st == TS_OK && ex && ex->alignment < 1)
        st = ts__fail(TS_ERR_INVALID_ARGUMENT, D ": expanded alignment %lld < 1", (long long)ex->alignment);
    if (st == TS_OK) st = validate(b, a, &li, m);
    m->status = st;
    ts_status bs = ts__ep_exchange_meta(b, call, meta_bytes(R, li.E, b->num_nodes), D);
    if (bs != TS_OK) {
        ts_ep_handle_destroy(li.h);
        return bs;
    }
    st = ts__ep_check_peers(b, call, D);
    if (st != TS_OK) {
        ts_ep_handle_destroy(li.h);
        return st;
    }

    /* Every rank derives every receiver's row count and layout from the same published
     * counts, so all reach the same verdict on capacity. */
    _Static_assert(sizeof(recv_layout) + 4 * sizeof(int64_t) <= TS__EP_RANK_BOOK_BYTES,
                   "dispatch bookkeeping outgrew the buffer's per-rank block");
    recv_layout *lay = (recv_layout *)(void *)b->rank_book;
    int64_t *base = (int64_t *)(void *)(lay + R);
    int64_t *recv_from = base + R; /* to me, per source */
    memset(base, 0, 2 * (size_t)R * sizeof *base);
    const int64_t area = ts__ep_area_bytes(b);
    const int64_t scale_row = li.S * li.scale_es, idx_row = li.K * li.idx_es, w_row = li.K * 4;
    for (int d = 0; d < R && st == TS_OK; d++) {
        int64_t total = 0;
        for (int s = 0; s < R; s++) {
            const int64_t c = meta_counts(ts__ep_meta_of(b, s, call))[d];
            if (s < me) base[d] += c;
            if (d == me) recv_from[s] = c;
            total += c;
        }
        const int64_t worst = ts__ep_meta_of(b, d, call)->num_worst_tokens;
        if (worst > 0 && total > worst)
            st = ts__fail(TS_ERR_INVALID_ARGUMENT, D ": rank %d receives %lld tokens, more than its num_worst_tokens %lld",
                          d, (long long)total, (long long)worst);
        const int64_t rows = worst > 0 ? worst : total;
        lay[d] = layout_of(rows, rows, li.row_bytes, scale_row, idx_row, w_row, 0);
        if (st == TS_OK && lay[d].total > area)
            st = ts__fail(TS_ERR_INVALID_ARGUMENT,
                          D ": rank %d would receive %lld tokens (%lld bytes), more than half of num_nvl_bytes (%lld) "
                          "holds; see ts_ep_get_buffer_size_hint",
                          d, (long long)total, (long long)lay[d].total, (long long)area);
    }
    if (st == TS_OK && li.expand_align > 0 && b->num_nodes == 1 && li.use->ex_row) {
        li.placed = expanded_layout(b, call, a, &li, lay, area);
        if (!li.placed && li.h) { /* rows go the plain way; a cached dispatch of h too */
            free(li.h->ex_dst), free(li.h->ex_row), free(li.h->ex_rows);
            li.h->ex_dst = li.h->ex_row = NULL;
            li.h->ex_rows = NULL;
        }
    }
    const rec_layout rec = rec_layout_of(li.row_bytes, scale_row, li.K, b->ranks_per_node);
    if (st == TS_OK && b->num_nodes > 1) st = check_staging(b, call, li.E, rec.bytes);
    if (st != TS_OK) {
        ts_ep_handle_destroy(li.h);
        return st;
    }

    /* internode: my records' offsets per destination node in the send half of the staging */
    int64_t *soff = recv_from + R, *roff = soff + b->num_nodes;
    if (b->num_nodes > 1) {
        int64_t off = 0;
        for (int n = 0; n < b->num_nodes; n++) {
            soff[n] = off;
            if (n != b->node) off += node_count(b, call, me, li.E, n) * rec.bytes;
        }
    }
    copy_ctx cc = {b, a, &li, lay, base, 1, b->rdma, soff, rec, li.placed};
    int nt = ts__ep_threads(a->config);
    const int64_t max_t = li.N / 8 > 0 ? li.N / 8 : 1; /* >= 8 tokens per thread */
    const int nt_all = nt;
    if (nt > max_t) nt = (int)max_t;
    cc.nthreads = nt;
    if (b->num_nodes > 1) {
        st = internode_exchange(b, call, &li, &cc, lay, roff, nt_all);
        if (st != TS_OK) {
            ts_ep_handle_destroy(li.h);
            return st;
        }
    } else if (li.N > 0) {
        ts__parallel_run(nt, copy_task, &cc);
    }

    /* Every row written into this node's areas comes from a rank of this node (directly or
     * as a proxy), so the node-local barrier publishes them. */
    bs = ts__ep_node_barrier(b, D);
    if (bs != TS_OK) {
        ts_ep_handle_destroy(li.h);
        return bs;
    }

    /* This rank's outputs: everything below lives in its own dispatch area or private memory. */
    int64_t num_recv = 0;
    for (int s = 0; s < R; s++) num_recv += recv_from[s];
    const recv_layout *l = &lay[me];
    uint8_t *mine = ts__ep_dispatch_area(b, me);
    if (li.has_topk)
        for (int64_t r = num_recv; r < l->rows; r++)
            for (int64_t k = 0; k < li.K; k++) {
                if (li.idx_es == 8)
                    ((int64_t *)(void *)(mine + l->i_off))[r * li.K + k] = -1;
                else
                    ((int32_t *)(void *)(mine + l->i_off))[r * li.K + k] = -1;
                ((float *)(void *)(mine + l->w_off))[r * li.K + k] = 0.0f;
            }
    const int64_t El = li.E / R;
    const bool want_counts = !li.cached && a->num_worst_tokens == 0;
    if (want_counts && b->expert_counts_cap < El) {
        int32_t *p = realloc(b->expert_counts, (size_t)El * sizeof *p);
        if (p) {
            b->expert_counts = p;
            b->expert_counts_cap = El;
        }
    }
    if (want_counts && b->expert_counts_cap < El) {
        ts_ep_handle_destroy(li.h);
        return ts__fail(TS_ERR_OUT_OF_MEMORY, D ": no memory for %lld expert counts", (long long)El);
    }
    if (want_counts) {
        const int64_t align = a->expert_alignment > 1 ? a->expert_alignment : 1;
        for (int64_t i = 0; i < El; i++) {
            int64_t c = 0;
            for (int s = 0; s < R; s++) c += meta_experts(ts__ep_meta_of(b, s, call), R)[me * El + i];
            b->expert_counts[i] = (int32_t)ts__align(c, align);
        }
    }
    if (li.h) {
        li.h->num_recv = num_recv;
        li.h->rows = l->rows;
        for (int s = 0; s < R; s++) li.h->recv_offsets[s + 1] = li.h->recv_offsets[s] + recv_from[s];
        for (int64_t i = 0; i < li.N * R; i++)
            if (li.h->send_pos[i] >= 0) li.h->send_pos[i] += (int32_t)base[i % R];
    }

    memset(result, 0, sizeof *result);
    if (!li.placed) {
        result->recv_x = ts_tensor_2d(mine + l->x_off, a->x->dtype, l->rows, li.hidden);
        result->recv_x_scales = li.fp8 ? ts_tensor_2d(mine + l->s_off, a->x_scales->dtype, l->rows, li.S)
                                       : ts_tensor_2d(NULL, TS_F32, 0, 0);
    } else {
        result->recv_x = ts_tensor_2d(NULL, a->x->dtype, 0, li.hidden);
        result->recv_x_scales = ts_tensor_2d(NULL, TS_F32, 0, 0);
        ex->placed = true;
        ex->x = ts_tensor_2d(mine + l->x_off, a->x->dtype, l->xrows, li.hidden);
        ex->sf = li.fp8 ? ts_tensor_2d(mine + l->s_off, a->x_scales->dtype, l->xrows, li.S)
                        : ts_tensor_2d(NULL, TS_F32, 0, 0);
        ex->w = li.has_topk ? ts_tensor_1d(mine + l->ew_off, TS_F32, l->xrows) : ts_tensor_1d(NULL, TS_F32, 0);
    }
    result->recv_topk_idx = li.has_topk ? ts_tensor_2d(mine + l->i_off, a->topk_idx->dtype, l->rows, li.K)
                                        : ts_tensor_2d(NULL, TS_I64, 0, 0);
    result->recv_topk_weights = li.has_topk ? ts_tensor_2d(mine + l->w_off, TS_F32, l->rows, li.K)
                                            : ts_tensor_2d(NULL, TS_F32, 0, 0);
    result->recv_src_idx = ts_tensor_1d(mine + l->src_off, TS_I32, l->rows);
    result->num_recv_tokens_per_expert =
        ts_tensor_1d(want_counts ? b->expert_counts : NULL, TS_I32, want_counts ? El : 0);
    result->num_recv_tokens = num_recv;
    if (handle_out && li.h) {
        *handle_out = li.h;
        li.h = NULL;
    }
    ts_ep_handle_destroy(li.h);
    return TS_OK;
}
