/* deep_gemm.fp8_fp4_mqa_logits / fp8_mqa_logits (non-paged) on CPU: validation, then the
 * shared driver (mqa_logits_driver.c). Also the checks both flavours share. */
#include "attention/mqa_logits_internal.h"
#include "tilestack/mqa_logits.h"

#define QBLK_PREFILL 4 /* queries sharing one decoded key chunk */

static int is_i32_sf(ts_dtype t) { return t == TS_I32 || t == TS_UE8M0X4; }

ts_status ts__mqa_check_q_mode(const ts_tensor *q, const ts_tensor *q_sf, int *fp4, int *mx) {
    TS__RETURN_IF_ERROR(ts_tensor_check(q, "q"));
    if (q->dtype != TS_E4M3 && q->dtype != TS_E2M1X2)
        return ts__fail(TS_ERR_DTYPE, "q: dtype %s, expected e4m3 or e2m1x2", ts_dtype_name(q->dtype));
    if (!ts_tensor_is_contiguous(q)) return ts__fail(TS_ERR_STRIDE, "q: must be contiguous");
    *fp4 = q->dtype == TS_E2M1X2;
    *mx = q_sf != NULL;
    if (*fp4 && !*mx)
        return ts__fail(TS_ERR_NULL_POINTER, "q_sf: FP4 q needs its UE8M0 scales");
    if (*mx) {
        TS__RETURN_IF_ERROR(ts_tensor_check(q_sf, "q_sf"));
        if (!is_i32_sf(q_sf->dtype))
            return ts__fail(TS_ERR_DTYPE, "q_sf: dtype %s, expected int32 packed ue8m0", ts_dtype_name(q_sf->dtype));
        if (q_sf->ndim != q->ndim - 1)
            return ts__fail(TS_ERR_SHAPE, "q_sf: ndim %d, expected %d", (int)q_sf->ndim, (int)q->ndim - 1);
        for (int k = 0; k < q_sf->ndim; k++)
            if (q_sf->shape[k] != q->shape[k])
                return ts__fail(TS_ERR_SHAPE, "q_sf: shape[%d] = %lld, q has %lld", k,
                                (long long)q_sf->shape[k], (long long)q->shape[k]);
        if (!ts_tensor_is_contiguous(q_sf)) return ts__fail(TS_ERR_STRIDE, "q_sf: must be contiguous");
    }
    return TS_OK;
}

ts_status ts__mqa_check_head_dim(int64_t d, int fp4, int mx) {
    (void)mx;
    if (d == 64 || d == 128 || (d == 32 && !fp4)) return TS_OK;
    return ts__fail(TS_ERR_SHAPE, "q: head dim %lld, expected %s", (long long)d,
                    fp4 ? "64 or 128" : "32, 64 or 128");
}

ts_status ts__mqa_check_weights_logits(const ts_tensor *weights, int64_t rows, int64_t h,
                                       const ts_tensor *logits, int64_t cols) {
    TS__RETURN_IF_ERROR(ts_tensor_check(weights, "weights"));
    if (weights->dtype != TS_F32 && weights->dtype != TS_BF16)
        return ts__fail(TS_ERR_DTYPE, "weights: dtype %s, expected f32 or bf16", ts_dtype_name(weights->dtype));
    const int64_t wshape[2] = {rows, h};
    TS__RETURN_IF_ERROR(ts_tensor_check_shape(weights, "weights", 2, wshape));
    TS__RETURN_IF_ERROR(ts_tensor_check_last_contiguous(weights, "weights"));
    TS__RETURN_IF_ERROR(ts_tensor_check(logits, "logits"));
    if (logits->dtype != TS_F32 && logits->dtype != TS_BF16)
        return ts__fail(TS_ERR_DTYPE, "logits: dtype %s, expected f32 or bf16", ts_dtype_name(logits->dtype));
    if (weights->dtype == TS_BF16 && logits->dtype != TS_BF16)
        return ts__fail(TS_ERR_DTYPE, "weights: bf16 weights need bf16 logits");
    const int64_t lshape[2] = {rows, cols};
    TS__RETURN_IF_ERROR(ts_tensor_check_shape(logits, "logits", 2, lshape));
    TS__RETURN_IF_ERROR(ts_tensor_check_last_contiguous(logits, "logits"));
    if (rows > 1 && logits->strides[0] < cols)
        return ts__fail(TS_ERR_STRIDE, "logits: row stride %lld < row length %lld",
                        (long long)logits->strides[0], (long long)cols);
    return TS_OK;
}

static ts_status check_range_vec(const ts_tensor *t, const char *name, int64_t n) {
    TS__RETURN_IF_ERROR(ts_tensor_check_dtype(t, name, TS_I32));
    const int64_t shape[1] = {n};
    TS__RETURN_IF_ERROR(ts_tensor_check_shape(t, name, 1, shape));
    if (n > 1 && t->strides[0] != 1) return ts__fail(TS_ERR_STRIDE, "%s: must be contiguous", name);
    return TS_OK;
}

ts_status ts_fp8_fp4_mqa_logits(const ts_tensor *q, const ts_tensor *q_sf, const ts_tensor *kv,
                                const ts_tensor *kv_sf, const ts_tensor *weights,
                                const ts_tensor *cu_seq_len_k_start,
                                const ts_tensor *cu_seq_len_k_end, bool clean_logits,
                                int32_t max_seqlen_k, ts_tensor *logits) {
    int fp4 = 0, mx = 0;
    TS__RETURN_IF_ERROR(ts__mqa_check_q_mode(q, q_sf, &fp4, &mx));
    if (q->ndim != 3) return ts__fail(TS_ERR_SHAPE, "q: ndim %d, expected 3 ([S, H, D])", (int)q->ndim);
    const int64_t s = q->shape[0], h = q->shape[1], d = fp4 ? 2 * q->shape[2] : q->shape[2];
    if (h < 1) return ts__fail(TS_ERR_SHAPE, "q: no heads");
    TS__RETURN_IF_ERROR(ts__mqa_check_head_dim(d, fp4, mx));
    TS__RETURN_IF_ERROR(ts_tensor_check(kv, "kv"));
    if (kv->dtype != q->dtype)
        return ts__fail(TS_ERR_DTYPE, "kv: dtype %s, q is %s", ts_dtype_name(kv->dtype), ts_dtype_name(q->dtype));
    const int64_t kvshape[2] = {-1, q->shape[2]};
    TS__RETURN_IF_ERROR(ts_tensor_check_shape(kv, "kv", 2, kvshape));
    if (!ts_tensor_is_contiguous(kv)) return ts__fail(TS_ERR_STRIDE, "kv: must be contiguous");
    const int64_t skv = kv->shape[0];
    TS__RETURN_IF_ERROR(ts_tensor_check(kv_sf, "kv_sf"));
    if (mx ? !is_i32_sf(kv_sf->dtype) : kv_sf->dtype != TS_F32)
        return ts__fail(TS_ERR_DTYPE, "kv_sf: dtype %s, expected %s", ts_dtype_name(kv_sf->dtype),
                        mx ? "int32 packed ue8m0 (q_sf given)" : "f32 (no q_sf)");
    const int64_t sfshape[1] = {skv};
    TS__RETURN_IF_ERROR(ts_tensor_check_shape(kv_sf, "kv_sf", 1, sfshape));
    if (skv > 1 && kv_sf->strides[0] != 1) return ts__fail(TS_ERR_STRIDE, "kv_sf: must be contiguous");
    TS__RETURN_IF_ERROR(check_range_vec(cu_seq_len_k_start, "cu_seq_len_k_start", s));
    TS__RETURN_IF_ERROR(check_range_vec(cu_seq_len_k_end, "cu_seq_len_k_end", s));
    if (max_seqlen_k < 0)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "max_seqlen_k = %d is negative", (int)max_seqlen_k);
    const int64_t cols = max_seqlen_k > 0 ? max_seqlen_k : skv;
    TS__RETURN_IF_ERROR(ts__mqa_check_weights_logits(weights, s, h, logits, cols));
    const int32_t *ks = (const int32_t *)cu_seq_len_k_start->data;
    const int32_t *ke = (const int32_t *)cu_seq_len_k_end->data;
    for (int64_t i = 0; i < s; i++) {
        if (ks[i] < 0 || ks[i] > skv || ke[i] < 0 || ke[i] > skv)
            return ts__fail(TS_ERR_INVALID_ARGUMENT,
                            "cu_seq_len_k_start/end[%lld] = [%d, %d) outside the %lld keys",
                            (long long)i, (int)ks[i], (int)ke[i], (long long)skv);
        if (max_seqlen_k > 0 && (int64_t)ke[i] - ks[i] > max_seqlen_k)
            return ts__fail(TS_ERR_INVALID_ARGUMENT,
                            "cu_seq_len_k_end[%lld] - start = %lld exceeds max_seqlen_k %d",
                            (long long)i, (long long)ke[i] - ks[i], (int)max_seqlen_k);
    }
    if (s == 0) return TS_OK;
    ts__mqa_job job =
        ts__mqa_job_base(fp4, mx, h, d, q, q_sf, weights, logits, cols, clean_logits);
    job.nq = s;
    job.qblk = QBLK_PREFILL;
    job.ks = ks;
    job.ke = ke;
    job.compressed = max_seqlen_k > 0;
    job.kv = (const uint8_t *)kv->data;
    job.kv_sf = kv_sf->data;
    job.seq_kv = skv;
    return ts__mqa_logits_run(&job);
}

ts_status ts_fp8_mqa_logits(const ts_tensor *q, const ts_tensor *kv, const ts_tensor *kv_sf,
                            const ts_tensor *weights, const ts_tensor *cu_seq_len_k_start,
                            const ts_tensor *cu_seq_len_k_end, bool clean_logits,
                            int32_t max_seqlen_k, ts_tensor *logits) {
    if (q && q->dtype != TS_E4M3)
        return ts__fail(TS_ERR_DTYPE, "q: dtype %s, the legacy API takes e4m3", ts_dtype_name(q->dtype));
    if (logits && logits->dtype != TS_F32)
        return ts__fail(TS_ERR_DTYPE, "logits: dtype %s, the legacy API writes f32", ts_dtype_name(logits->dtype));
    return ts_fp8_fp4_mqa_logits(q, NULL, kv, kv_sf, weights, cu_seq_len_k_start,
                                 cu_seq_len_k_end, clean_logits, max_seqlen_k, logits);
}

static ts_status padded_stride(int64_t len, ts_dtype dt, int64_t *out, const char *fn) {
    if (!out) return ts__fail(TS_ERR_NULL_POINTER, "%s: row_stride is NULL", fn);
    if (dt != TS_F32 && dt != TS_BF16)
        return ts__fail(TS_ERR_DTYPE, "%s: logits dtype %s, expected f32 or bf16", fn, ts_dtype_name(dt));
    if (len < 0 || len > INT64_MAX / 4) return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: length %lld out of range", fn, (long long)len);
    *out = ts__align(len, 1024 / (int64_t)ts_dtype_size(dt));
    return TS_OK;
}

ts_status ts_mqa_logits_row_stride(int64_t seq_len_kv, int32_t max_seqlen_k, ts_dtype logits_dtype,
                                   int64_t *row_stride) {
    if (seq_len_kv < 0 || max_seqlen_k < 0)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_mqa_logits_row_stride: negative length");
    int64_t len = max_seqlen_k == 0 ? seq_len_kv + 256 : ts__align(max_seqlen_k, 256);
    return padded_stride(len, logits_dtype, row_stride, "ts_mqa_logits_row_stride");
}

ts_status ts_paged_mqa_logits_row_stride(int32_t max_context_len, ts_dtype logits_dtype,
                                         int64_t *row_stride) {
    if (max_context_len < 0)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_paged_mqa_logits_row_stride: negative max_context_len");
    return padded_stride(ts__align(max_context_len, 256), logits_dtype, row_stride,
                         "ts_paged_mqa_logits_row_stride");
}
