/* The MPI_Alltoallv reference (V2 deep_ep/utils/refs.py algorithm): bucket tokens by
 * destination rank in token order, exchange counts with MPI_Alltoall, then rows, scales,
 * top-k and source indices with MPI_Alltoallv. Independent of the shared-memory path; the
 * test oracle and the bench baseline. */
#include "ep/ep_internal.h"

#include <string.h>

/* bf16 widening, written out here so the baseline's loops vectorise (a library call per
 * element would make the reference look slower than a straightforward one is). */
static inline float ref_bf16_f32(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* RNE to bf16, NaN -> sign | 0x7FC0: ts_f32_to_bf16's recipe (the tests' fan-out check
 * compares combine against ts_f32_to_bf16 itself). */
static inline uint16_t ref_f32_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)(((u >> 16) & 0x8000u) | 0x7FC0u);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

#define RD "ts_ep_reference_dispatch"
#define RC "ts_ep_reference_combine"

/* Alltoallv of fixed-size rows: counts in rows through a contiguous datatype. */
static int alltoallv_rows(const void *sbuf, const int32_t *scount, void *rbuf, const int32_t *rcount, int64_t row_bytes,
                          int R, MPI_Comm comm) {
    if (row_bytes == 0) return MPI_SUCCESS;
    int *sc = malloc((size_t)R * 4 * sizeof(int));
    if (!sc) return MPI_ERR_NO_MEM;
    int *sd = sc + R, *rc = sc + 2 * R, *rd = sc + 3 * R;
    int so = 0, ro = 0;
    for (int r = 0; r < R; r++) {
        sc[r] = scount[r];
        sd[r] = so;
        so += scount[r];
        rc[r] = rcount[r];
        rd[r] = ro;
        ro += rcount[r];
    }
    MPI_Datatype row;
    MPI_Type_contiguous((int)row_bytes, MPI_BYTE, &row);
    MPI_Type_commit(&row);
    static char dummy;
    int e = MPI_Alltoallv(sbuf ? sbuf : &dummy, sc, sd, row, rbuf ? rbuf : &dummy, rc, rd, row, comm);
    MPI_Type_free(&row);
    free(sc);
    return e;
}

ts_status ts_ep_reference_free(ts_ep_reference_result *res) {
    if (!res) return TS_OK;
    for (int i = 0; i < 8; i++) free(res->owned[i]);
    free(res->send_counts);
    free(res->recv_counts);
    free(res->send_token);
    memset(res, 0, sizeof *res);
    return TS_OK;
}

ts_status ts_ep_reference_dispatch(MPI_Comm comm, const ts_tensor *x, const ts_tensor *x_scales,
                                   const ts_tensor *topk_idx, const ts_tensor *topk_weights, int64_t num_experts,
                                   int64_t expert_alignment, ts_ep_reference_result *res) {
    if (!res) return ts__fail(TS_ERR_NULL_POINTER, RD ": res is NULL");
    int R, me;
    MPI_Comm_size(comm, &R);
    MPI_Comm_rank(comm, &me);
    TS__RETURN_IF_ERROR(ts_tensor_check(x, RD ": x"));
    if ((x->dtype != TS_BF16 && x->dtype != TS_E4M3) || x->ndim != 2)
        return ts__fail(TS_ERR_DTYPE, RD ": x must be 2-D bf16 or e4m3");
    TS__RETURN_IF_ERROR(ts_tensor_check_last_contiguous(x, RD ": x"));
    if (num_experts < R || num_experts % R)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, RD ": num_experts %lld is not a positive multiple of %d ranks",
                        (long long)num_experts, R);
    TS__RETURN_IF_ERROR(ts__ep_check_topk_idx(topk_idx, num_experts, RD));
    const int64_t N = x->shape[0], H = x->shape[1], K = topk_idx->shape[1];
    if (topk_idx->shape[0] != N) return ts__fail(TS_ERR_SHAPE, RD ": topk_idx rows != x rows");
    const int64_t es = (int64_t)ts_dtype_size(x->dtype), row_bytes = H * es;
    int64_t S = 0, ses = 0;
    if (x_scales) {
        TS__RETURN_IF_ERROR(ts_tensor_check(x_scales, RD ": x_scales"));
        if (x_scales->ndim != 2 || x_scales->shape[0] != N) return ts__fail(TS_ERR_SHAPE, RD ": x_scales must be [N, S]");
        S = x_scales->shape[1];
        ses = (int64_t)ts_dtype_size(x_scales->dtype);
    }
    if (topk_weights) {
        TS__RETURN_IF_ERROR(ts_tensor_check(topk_weights, RD ": topk_weights"));
        TS__RETURN_IF_ERROR(ts_tensor_check_dtype(topk_weights, RD ": topk_weights", TS_F32));
        const int64_t shw[2] = {N, K};
        TS__RETURN_IF_ERROR(ts_tensor_check_shape(topk_weights, RD ": topk_weights", 2, shw));
    }
    const int64_t El = num_experts / R;
    const int64_t ies = (int64_t)ts_dtype_size(topk_idx->dtype);
    memset(res, 0, sizeof *res);
    res->num_ranks = R;
    res->num_topk = (int32_t)K;
    res->num_tokens = N;
    res->hidden = H;
    res->send_counts = calloc((size_t)R, 4);
    res->recv_counts = calloc((size_t)R, 4);
    /* Bucket by destination, tokens ascending inside each bucket. */
    uint8_t *dest = calloc((size_t)(N * R > 0 ? N * R : 1), 1);
    if (!res->send_counts || !res->recv_counts || !dest) goto oom;
    for (int64_t t = 0; t < N; t++)
        for (int64_t k = 0; k < K; k++) {
            const int64_t e = ts__ep_idx_at(topk_idx, t, k);
            if (e >= 0) dest[t * R + e / El] = 1;
        }
    int64_t nsend = 0;
    for (int64_t t = 0; t < N; t++)
        for (int r = 0; r < R; r++) res->send_counts[r] += dest[t * R + r];
    for (int r = 0; r < R; r++) nsend += res->send_counts[r];
    res->send_token = malloc((size_t)(nsend > 0 ? nsend : 1) * sizeof(int32_t));
    if (!res->send_token) goto oom;
    {
        int64_t at = 0;
        for (int r = 0; r < R; r++)
            for (int64_t t = 0; t < N; t++)
                if (dest[t * R + r]) res->send_token[at++] = (int32_t)t;
    }
    MPI_Alltoall(res->send_counts, 1, MPI_INT32_T, res->recv_counts, 1, MPI_INT32_T, comm);
    int64_t nrecv = 0;
    for (int r = 0; r < R; r++) nrecv += res->recv_counts[r];
    res->num_recv = nrecv;

    /* Send-side packed arrays. */
    const int64_t ns = nsend > 0 ? nsend : 1, nr = nrecv > 0 ? nrecv : 1;
    uint8_t *sx = malloc((size_t)(ns * row_bytes)), *ss = malloc((size_t)(ns * (S * ses > 0 ? S * ses : 1)));
    int64_t *sidx = malloc((size_t)(ns * K) * 8);
    float *sw = malloc((size_t)(ns * K) * 4);
    int32_t *ssrc = malloc((size_t)ns * 4);
    int64_t *ridx = malloc((size_t)(nr * K) * 8);
    res->owned[0] = malloc((size_t)(nr * row_bytes));
    res->owned[1] = malloc((size_t)(nr * (S * ses > 0 ? S * ses : 1)));
    res->owned[2] = malloc((size_t)(nr * K * ies));
    res->owned[3] = malloc((size_t)(nr * K) * 4);
    res->owned[4] = malloc((size_t)nr * 4);
    res->owned[5] = calloc((size_t)El, 4);
    bool ok = sx && ss && sidx && sw && ssrc && ridx;
    for (int i = 0; i < 6; i++) ok = ok && res->owned[i];
    if (ok) {
        for (int64_t i = 0; i < nsend; i++) {
            const int64_t t = res->send_token[i];
            memcpy(sx + i * row_bytes, (const uint8_t *)x->data + t * x->strides[0] * es, (size_t)row_bytes);
            for (int64_t j = 0; j < S; j++)
                memcpy(ss + (i * S + j) * ses,
                       (const uint8_t *)x_scales->data + (t * x_scales->strides[0] + j * x_scales->strides[1]) * ses,
                       (size_t)ses);
            for (int64_t k = 0; k < K; k++) {
                sidx[i * K + k] = ts__ep_idx_at(topk_idx, t, k);
                sw[i * K + k] = topk_weights ? ((const float *)topk_weights->data)[t * topk_weights->strides[0] +
                                                                                   k * topk_weights->strides[1]]
                                             : 0.0f;
            }
            ssrc[i] = (int32_t)t;
        }
        int e = alltoallv_rows(sx, res->send_counts, res->owned[0], res->recv_counts, row_bytes, R, comm);
        e |= alltoallv_rows(ss, res->send_counts, res->owned[1], res->recv_counts, S * ses, R, comm);
        e |= alltoallv_rows(sidx, res->send_counts, ridx, res->recv_counts, K * 8, R, comm);
        e |= alltoallv_rows(sw, res->send_counts, res->owned[3], res->recv_counts, K * 4, R, comm);
        e |= alltoallv_rows(ssrc, res->send_counts, res->owned[4], res->recv_counts, 4, R, comm);
        if (e != MPI_SUCCESS) ok = false;
    }
    free(sx);
    free(ss);
    free(sidx);
    free(sw);
    free(ssrc);
    free(dest);
    dest = NULL;
    if (!ok) {
        free(ridx);
        goto oom;
    }
    {
        float *rw = res->owned[3];
        int32_t *cnt = res->owned[5];
        for (int64_t i = 0; i < nrecv * K; i++) {
            const int64_t e = ridx[i];
            const bool mine = e >= me * El && e < (me + 1) * El;
            const int64_t local = mine ? e - me * El : -1;
            if (ies == 8)
                ((int64_t *)res->owned[2])[i] = local;
            else
                ((int32_t *)res->owned[2])[i] = (int32_t)local;
            if (!mine) rw[i] = 0.0f;
            if (mine) cnt[local]++;
        }
        const int64_t a = expert_alignment > 1 ? expert_alignment : 1;
        for (int64_t i = 0; i < El; i++) cnt[i] = (int32_t)ts__align(cnt[i], a);
    }
    free(ridx);
    ts_ep_dispatch_result *o = &res->out;
    o->recv_x = ts_tensor_2d(res->owned[0], x->dtype, nrecv, H);
    o->recv_x_scales = x_scales ? ts_tensor_2d(res->owned[1], x_scales->dtype, nrecv, S) : ts_tensor_2d(NULL, TS_F32, 0, 0);
    o->recv_topk_idx = ts_tensor_2d(res->owned[2], topk_idx->dtype, nrecv, K);
    o->recv_topk_weights = topk_weights ? ts_tensor_2d(res->owned[3], TS_F32, nrecv, K) : ts_tensor_2d(NULL, TS_F32, 0, 0);
    o->recv_src_idx = ts_tensor_1d(res->owned[4], TS_I32, nrecv);
    o->num_recv_tokens_per_expert = ts_tensor_1d(res->owned[5], TS_I32, El);
    o->num_recv_tokens = nrecv;
    return TS_OK;
oom:
    free(dest);
    ts_ep_reference_free(res);
    return ts__fail(TS_ERR_OUT_OF_MEMORY, RD ": out of memory or MPI failure");
}

ts_status ts_ep_reference_combine(MPI_Comm comm, const ts_ep_reference_result *rt, const ts_tensor *x,
                                  const ts_tensor *topk_weights, const ts_tensor *bias0, const ts_tensor *bias1,
                                  ts_tensor *combined_x, ts_tensor *combined_topk_weights) {
    if (!rt || !x || !combined_x) return ts__fail(TS_ERR_NULL_POINTER, RC ": routing, x and combined_x are required");
    const int R = rt->num_ranks;
    const int64_t N = rt->num_tokens, nrecv = rt->num_recv;
    TS__RETURN_IF_ERROR(ts_tensor_check(x, RC ": x"));
    TS__RETURN_IF_ERROR(ts_tensor_check_dtype(x, RC ": x", TS_BF16));
    if (x->ndim != 2 || x->shape[0] < nrecv) return ts__fail(TS_ERR_SHAPE, RC ": x must be [>= num_recv, hidden]");
    TS__RETURN_IF_ERROR(ts_tensor_check_last_contiguous(x, RC ": x"));
    const int64_t H = x->shape[1];
    const int64_t K = topk_weights ? topk_weights->shape[1] : 0;
    if (topk_weights && !combined_topk_weights)
        return ts__fail(TS_ERR_NULL_POINTER, RC ": combined_topk_weights is required with topk_weights");
    int64_t nsend = 0;
    for (int r = 0; r < R; r++) nsend += rt->send_counts[r];
    const int64_t nr = nrecv > 0 ? nrecv : 1, nb = nsend > 0 ? nsend : 1;
    uint16_t *sx = malloc((size_t)(nr * H) * 2), *rx = malloc((size_t)(nb * H) * 2);
    float *sw = malloc((size_t)(nr * (K > 0 ? K : 1)) * 4), *rw = malloc((size_t)(nb * (K > 0 ? K : 1)) * 4);
    float *acc = calloc((size_t)(N * H > 0 ? N * H : 1), 4);
    float *accw = calloc((size_t)(N * (K > 0 ? K : 1)), 4);
    ts_status st = TS_OK;
    if (!sx || !rx || !sw || !rw || !acc || !accw) {
        st = ts__fail(TS_ERR_OUT_OF_MEMORY, RC ": out of memory");
    } else {
        for (int64_t i = 0; i < nrecv; i++) {
            memcpy(sx + i * H, (const uint16_t *)x->data + i * x->strides[0], (size_t)H * 2);
            for (int64_t k = 0; k < K; k++)
                sw[i * K + k] = ((const float *)topk_weights->data)[i * topk_weights->strides[0] + k * topk_weights->strides[1]];
        }
        /* Back to the sources: what I received from s returns to s, in the same order. */
        int e = alltoallv_rows(sx, rt->recv_counts, rx, rt->send_counts, H * 2, R, comm);
        e |= alltoallv_rows(sw, rt->recv_counts, rw, rt->send_counts, K * 4, R, comm);
        if (e != MPI_SUCCESS) st = ts__fail(TS_ERR_PEER, RC ": MPI_Alltoallv failed");
    }
    if (st == TS_OK) {
        const ts_tensor *bias[2] = {bias0, bias1};
        for (int i = 0; i < 2; i++)
            if (bias[i])
                for (int64_t t = 0; t < N; t++)
                    for (int64_t j = 0; j < H; j++)
                        acc[t * H + j] += ref_bf16_f32(((const uint16_t *)bias[i]->data)[t * bias[i]->strides[0] + j]);
        /* Rows arrive grouped by destination rank ascending: adding them in arrival order is
         * the rank order of the contract. */
        for (int64_t i = 0; i < nsend; i++) {
            const int64_t t = rt->send_token[i];
            float *restrict a = acc + t * H;
            const uint16_t *restrict p = rx + i * H;
            for (int64_t j = 0; j < H; j++) a[j] += ref_bf16_f32(p[j]);
            for (int64_t k = 0; k < K; k++) accw[t * K + k] += rw[i * K + k];
        }
        for (int64_t t = 0; t < N; t++) {
            uint16_t *o = (uint16_t *)combined_x->data + t * combined_x->strides[0];
            for (int64_t j = 0; j < H; j++) o[j] = ref_f32_bf16(acc[t * H + j]);
            for (int64_t k = 0; k < K; k++)
                ((float *)combined_topk_weights->data)[t * combined_topk_weights->strides[0] +
                                                       k * combined_topk_weights->strides[1]] = accw[t * K + k];
        }
    }
    free(sx);
    free(rx);
    free(sw);
    free(rw);
    free(acc);
    free(accw);
    return st;
}
