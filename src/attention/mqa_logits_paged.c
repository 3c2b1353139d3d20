/* deep_gemm.get_paged_mqa_logits_metadata / fp8_fp4_paged_mqa_logits / fp8_paged_mqa_logits
 * on CPU. The fused cache is read in place; the CPU driver schedules itself, so the metadata
 * is only checked against the context lengths it was made for. */
#include "attention/mqa_logits_internal.h"
#include "tilestack/mqa_logits.h"

#define SPLIT_KV 256 /* tokens per schedule split, as upstream */

static ts_status check_context_lens(const ts_tensor *cl, int64_t b, int64_t next_n) {
    TS__RETURN_IF_ERROR(ts_tensor_check_dtype(cl, "context_lens", TS_I32));
    if (cl->ndim != 2)
        return ts__fail(TS_ERR_SHAPE, "context_lens: ndim %d, only 2-D [B, next_n] is supported", (int)cl->ndim);
    if (b >= 0) {
        const int64_t shape[2] = {b, next_n};
        TS__RETURN_IF_ERROR(ts_tensor_check_shape(cl, "context_lens", 2, shape));
    }
    if (!ts_tensor_is_contiguous(cl)) return ts__fail(TS_ERR_STRIDE, "context_lens: must be contiguous");
    const int32_t *p = (const int32_t *)cl->data;
    for (int64_t i = 0; i < cl->shape[0] * cl->shape[1]; i++)
        if (p[i] < 0) return ts__fail(TS_ERR_INVALID_ARGUMENT, "context_lens[%lld] = %d is negative", (long long)i, (int)p[i]);
    return TS_OK;
}

static int64_t request_len(const int32_t *cl, int64_t b, int64_t next_n) {
    int64_t m = 0;
    for (int64_t t = 0; t < next_n; t++) m = ts__max64(m, cl[b * next_n + t]);
    return m;
}

/* meta[w] = (request, split) where worker w starts; meta[n] = (B, 0). */
static void fill_schedule(const int32_t *cl, int64_t b, int64_t next_n, int64_t n, int32_t *meta) {
    int64_t total = 0;
    for (int64_t r = 0; r < b; r++) total += ts__ceil_div(request_len(cl, r, next_n), SPLIT_KV);
    int64_t r = 0, before = 0; /* splits of requests < r */
    for (int64_t w = 0; w <= n; w++) {
        int64_t start = w * (total / n) + ts__min64(w, total % n);
        while (r < b && before + ts__ceil_div(request_len(cl, r, next_n), SPLIT_KV) <= start) {
            before += ts__ceil_div(request_len(cl, r, next_n), SPLIT_KV);
            r++;
        }
        meta[2 * w] = (int32_t)r;
        meta[2 * w + 1] = (int32_t)(r < b ? start - before : 0);
    }
}

static ts_status check_meta_shape(const ts_tensor *m) {
    TS__RETURN_IF_ERROR(ts_tensor_check_dtype(m, "schedule_meta", TS_I32));
    const int64_t shape[2] = {-1, 2};
    TS__RETURN_IF_ERROR(ts_tensor_check_shape(m, "schedule_meta", 2, shape));
    if (m->shape[0] < 2) return ts__fail(TS_ERR_SHAPE, "schedule_meta: needs num_sms + 1 >= 2 rows");
    if (!ts_tensor_is_contiguous(m)) return ts__fail(TS_ERR_STRIDE, "schedule_meta: must be contiguous");
    return TS_OK;
}

ts_status ts_get_paged_mqa_logits_metadata(const ts_tensor *context_lens, int32_t block_kv,
                                           int32_t num_sms, ts_tensor *schedule_meta) {
    TS__RETURN_IF_ERROR(check_context_lens(context_lens, -1, -1));
    if (block_kv < 1) return ts__fail(TS_ERR_INVALID_ARGUMENT, "block_kv = %d, expected > 0", (int)block_kv);
    if (num_sms < 1) return ts__fail(TS_ERR_INVALID_ARGUMENT, "num_sms = %d, expected > 0", (int)num_sms);
    TS__RETURN_IF_ERROR(check_meta_shape(schedule_meta));
    if (schedule_meta->shape[0] != (int64_t)num_sms + 1)
        return ts__fail(TS_ERR_SHAPE, "schedule_meta: %lld rows, expected num_sms + 1 = %lld",
                        (long long)schedule_meta->shape[0], (long long)num_sms + 1);
    fill_schedule((const int32_t *)context_lens->data, context_lens->shape[0], context_lens->shape[1],
                  num_sms, (int32_t *)schedule_meta->data);
    return TS_OK;
}

ts_status ts_fp8_fp4_paged_mqa_logits(const ts_tensor *q, const ts_tensor *q_sf,
                                      const ts_tensor *kv_cache, const ts_tensor *weights,
                                      const ts_tensor *context_lens, const ts_tensor *block_table,
                                      const ts_tensor *schedule_meta, int32_t max_context_len,
                                      bool clean_logits, ts_tensor *logits) {
    int fp4 = 0, mx = 0;
    TS__RETURN_IF_ERROR(ts__mqa_check_q_mode(q, q_sf, &fp4, &mx));
    if (q->ndim != 4) return ts__fail(TS_ERR_SHAPE, "q: ndim %d, expected 4 ([B, next_n, H, D])", (int)q->ndim);
    const int64_t b = q->shape[0], next_n = q->shape[1], h = q->shape[2];
    const int64_t d = fp4 ? 2 * q->shape[3] : q->shape[3], rb = q->shape[3];
    if (next_n < 1) return ts__fail(TS_ERR_SHAPE, "q: next_n must be >= 1");
    if (h < 1) return ts__fail(TS_ERR_SHAPE, "q: no heads");
    TS__RETURN_IF_ERROR(ts__mqa_check_head_dim(d, fp4, mx));
    /* fused cache */
    TS__RETURN_IF_ERROR(ts_tensor_check_dtype(kv_cache, "kv_cache", TS_U8));
    const int64_t cshape[4] = {-1, -1, 1, rb + 4};
    TS__RETURN_IF_ERROR(ts_tensor_check_shape(kv_cache, "kv_cache", 4, cshape));
    const int64_t nblk = kv_cache->shape[0], block_kv = kv_cache->shape[1];
    if (block_kv < 1) return ts__fail(TS_ERR_SHAPE, "kv_cache: block_kv must be >= 1");
    if (kv_cache->strides[3] != 1 || kv_cache->strides[1] != rb + 4)
        return ts__fail(TS_ERR_STRIDE, "kv_cache: strides (.., %lld, .., %lld), expected (.., %lld, .., 1)",
                        (long long)kv_cache->strides[1], (long long)kv_cache->strides[3], (long long)rb + 4);
    if (nblk > 1 && (kv_cache->strides[0] < block_kv * (rb + 4) || kv_cache->strides[0] % 4 != 0))
        return ts__fail(TS_ERR_STRIDE, "kv_cache: block stride %lld bytes, expected >= %lld and a multiple of 4",
                        (long long)kv_cache->strides[0], (long long)(block_kv * (rb + 4)));
    TS__RETURN_IF_ERROR(check_context_lens(context_lens, b, next_n));
    TS__RETURN_IF_ERROR(ts_tensor_check_dtype(block_table, "block_table", TS_I32));
    const int64_t btshape[2] = {b, -1};
    TS__RETURN_IF_ERROR(ts_tensor_check_shape(block_table, "block_table", 2, btshape));
    TS__RETURN_IF_ERROR(ts_tensor_check_last_contiguous(block_table, "block_table"));
    TS__RETURN_IF_ERROR(check_meta_shape(schedule_meta));
    if (max_context_len < 0)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "max_context_len = %d is negative", (int)max_context_len);
    TS__RETURN_IF_ERROR(ts__mqa_check_weights_logits(weights, b * next_n, h, logits, max_context_len));
    const int32_t *cl = (const int32_t *)context_lens->data;
    const int32_t *bt = (const int32_t *)block_table->data;
    const int64_t bt_ld = block_table->strides[0], maxb = block_table->shape[1];
    for (int64_t r = 0; r < b; r++) {
        int64_t len = request_len(cl, r, next_n);
        if (len > max_context_len)
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "context_lens of request %lld: %lld > max_context_len %d",
                            (long long)r, (long long)len, (int)max_context_len);
        int64_t need = ts__ceil_div(len, block_kv);
        if (need > maxb)
            return ts__fail(TS_ERR_SHAPE, "block_table: request %lld needs %lld blocks, the table has %lld",
                            (long long)r, (long long)need, (long long)maxb);
        for (int64_t k = 0; k < need; k++) {
            int32_t id = bt[r * bt_ld + k];
            if (id < 0 || id >= nblk)
                return ts__fail(TS_ERR_INVALID_ARGUMENT, "block_table[%lld, %lld] = %d outside [0, %lld)",
                                (long long)r, (long long)k, (int)id, (long long)nblk);
        }
    }
    {   /* the schedule must be the one these context_lens give */
        int64_t n = schedule_meta->shape[0] - 1;
        int32_t *want = (int32_t *)ts__scratch(0, (size_t)(2 * (n + 1)) * sizeof(int32_t));
        if (!want) return ts__fail(TS_ERR_OUT_OF_MEMORY, "schedule_meta: no scratch");
        fill_schedule(cl, b, next_n, n, want);
        const int32_t *got = (const int32_t *)schedule_meta->data;
        for (int64_t k = 0; k < 2 * (n + 1); k++)
            if (got[k] != want[k])
                return ts__fail(TS_ERR_INVALID_ARGUMENT,
                                "schedule_meta: entry %lld is %d, these context_lens give %d "
                                "(made for other context_lens?)", (long long)k, (int)got[k], (int)want[k]);
    }
    if (b == 0) return TS_OK;
    if (next_n > 64) return ts__fail(TS_ERR_UNSUPPORTED, "q: next_n = %lld > 64", (long long)next_n);
    ts__mqa_job job =
        ts__mqa_job_base(fp4, mx, h, d, q, q_sf, weights, logits, max_context_len, clean_logits);
    job.nq = b * next_n;
    job.qblk = next_n;
    job.paged = 1;
    job.ctx_lens = cl;
    job.cache = (const uint8_t *)kv_cache->data;
    job.block_kv = block_kv;
    job.block_bytes = kv_cache->strides[0];
    job.block_table = bt;
    job.bt_ld = bt_ld;
    return ts__mqa_logits_run(&job);
}

ts_status ts_fp8_paged_mqa_logits(const ts_tensor *q, const ts_tensor *kv_cache,
                                  const ts_tensor *weights, const ts_tensor *context_lens,
                                  const ts_tensor *block_table, const ts_tensor *schedule_meta,
                                  int32_t max_context_len, bool clean_logits, ts_tensor *logits) {
    if (q && q->dtype != TS_E4M3)
        return ts__fail(TS_ERR_DTYPE, "q: dtype %s, the legacy API takes e4m3", ts_dtype_name(q->dtype));
    if (logits && logits->dtype != TS_F32)
        return ts__fail(TS_ERR_DTYPE, "logits: dtype %s, the legacy API writes f32", ts_dtype_name(logits->dtype));
    return ts_fp8_fp4_paged_mqa_logits(q, NULL, kv_cache, weights, context_lens, block_table,
                                       schedule_meta, max_context_len, clean_logits, logits);
}
