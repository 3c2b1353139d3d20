/* get_dispatch_layout: per-rank / per-node / per-expert counts and is_token_in_rank, computed
 * locally from topk_idx (upstream csrc/kernels/layout.cu semantics). */
#include "ep/ep_internal.h"

#include <string.h>

static ts_status check_i32_vec(const ts_tensor *t, const char *name, int64_t n) {
    TS__RETURN_IF_ERROR(ts_tensor_check(t, name));
    TS__RETURN_IF_ERROR(ts_tensor_check_dtype(t, name, TS_I32));
    const int64_t shape[1] = {n};
    TS__RETURN_IF_ERROR(ts_tensor_check_shape(t, name, 1, shape));
    return TS_OK;
}

ts_status ts__ep_check_topk_idx(const ts_tensor *topk_idx, int64_t num_experts, const char *what) {
    char name[96];
    snprintf(name, sizeof name, "%s: topk_idx", what);
    TS__RETURN_IF_ERROR(ts_tensor_check(topk_idx, name));
    if (topk_idx->dtype != TS_I64 && topk_idx->dtype != TS_I32)
        return ts__fail(TS_ERR_DTYPE, "%s must be i64 or i32, got %s", name, ts_dtype_name(topk_idx->dtype));
    if (topk_idx->ndim != 2) return ts__fail(TS_ERR_SHAPE, "%s must be 2-D [num_tokens, num_topk]", name);
    TS__RETURN_IF_ERROR(ts_tensor_check_last_contiguous(topk_idx, name));
    if (topk_idx->shape[1] < 1 || topk_idx->shape[1] > 1024)
        return ts__fail(TS_ERR_SHAPE, "%s: num_topk %lld must be in [1, 1024]", name, (long long)topk_idx->shape[1]);
    if (topk_idx->shape[0] > INT32_MAX)
        return ts__fail(TS_ERR_SHAPE, "%s: %lld tokens exceed INT32_MAX", name, (long long)topk_idx->shape[0]);
    for (int64_t i = 0; i < topk_idx->shape[0]; i++)
        for (int64_t k = 0; k < topk_idx->shape[1]; k++) {
            const int64_t e = ts__ep_idx_at(topk_idx, i, k);
            if (e < -1 || e >= num_experts)
                return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s[%lld][%lld] = %lld is outside [-1, num_experts = %lld)",
                                name, (long long)i, (long long)k, (long long)e, (long long)num_experts);
        }
    return TS_OK;
}

ts_status ts_ep_get_dispatch_layout(ts_ep_buffer *buf, const ts_tensor *topk_idx, int64_t num_experts,
                                    ts_tensor *num_tokens_per_rank, ts_tensor *num_tokens_per_rdma_rank,
                                    ts_tensor *num_tokens_per_expert, ts_tensor *is_token_in_rank) {
    static const char *what = "ts_ep_get_dispatch_layout";
    TS__RETURN_IF_ERROR(ts__ep_check_usable(buf, what));
    const int64_t R = buf->num_ranks;
    if (num_experts < R || num_experts % R != 0 || num_experts > (INT64_C(1) << 24))
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: num_experts %lld must be a positive multiple of num_ranks %lld",
                        what, (long long)num_experts, (long long)R);
    TS__RETURN_IF_ERROR(ts__ep_check_topk_idx(topk_idx, num_experts, what));
    const int64_t N = topk_idx->shape[0], K = topk_idx->shape[1];
    const int64_t nodes = R / buf->ranks_per_node;
    TS__RETURN_IF_ERROR(check_i32_vec(num_tokens_per_rank, "ts_ep_get_dispatch_layout: num_tokens_per_rank", R));
    TS__RETURN_IF_ERROR(
        check_i32_vec(num_tokens_per_expert, "ts_ep_get_dispatch_layout: num_tokens_per_expert", num_experts));
    if (num_tokens_per_rdma_rank)
        TS__RETURN_IF_ERROR(
            check_i32_vec(num_tokens_per_rdma_rank, "ts_ep_get_dispatch_layout: num_tokens_per_rdma_rank", nodes));
    TS__RETURN_IF_ERROR(ts_tensor_check(is_token_in_rank, "ts_ep_get_dispatch_layout: is_token_in_rank"));
    TS__RETURN_IF_ERROR(ts_tensor_check_dtype(is_token_in_rank, "ts_ep_get_dispatch_layout: is_token_in_rank", TS_BOOL));
    const int64_t shp[2] = {N, R};
    TS__RETURN_IF_ERROR(ts_tensor_check_shape(is_token_in_rank, "ts_ep_get_dispatch_layout: is_token_in_rank", 2, shp));
    if (!ts_tensor_is_contiguous(is_token_in_rank))
        return ts__fail(TS_ERR_STRIDE, "%s: is_token_in_rank must be contiguous", what);

    const int64_t per_rank = num_experts / R;
    int32_t *tpr = num_tokens_per_rank->data, *tpe = num_tokens_per_expert->data;
    int32_t *tpn = num_tokens_per_rdma_rank ? num_tokens_per_rdma_rank->data : NULL;
    bool *in_rank = is_token_in_rank->data;
    /* Strided outputs: write through the view's stride. */
    const int64_t s_r = num_tokens_per_rank->strides[0], s_e = num_tokens_per_expert->strides[0];
    const int64_t s_n = tpn ? num_tokens_per_rdma_rank->strides[0] : 0;
    for (int64_t r = 0; r < R; r++) tpr[r * s_r] = 0;
    for (int64_t e = 0; e < num_experts; e++) tpe[e * s_e] = 0;
    for (int64_t n = 0; tpn && n < nodes; n++) tpn[n * s_n] = 0;
    bool node_hit[1024];
    for (int64_t i = 0; i < N; i++) {
        bool *row = in_rank + i * R;
        memset(row, 0, (size_t)R);
        for (int64_t k = 0; k < K; k++) {
            const int64_t e = ts__ep_idx_at(topk_idx, i, k);
            if (e < 0) continue;
            tpe[e * s_e]++;
            row[e / per_rank] = true;
        }
        if (tpn) memset(node_hit, 0, sizeof node_hit);
        for (int64_t r = 0; r < R; r++) {
            if (!row[r]) continue;
            tpr[r * s_r]++;
            const int64_t n = r / buf->ranks_per_node;
            if (tpn && n < 1024 && !node_hit[n]) {
                node_hit[n] = true;
                tpn[n * s_n]++;
            }
        }
    }
    return TS_OK;
}
