/* FlashMLA argument checks shared by the decode, prefill and KV-cache entry points. */
#include "flash_mla_internal.h"
#include "../core/internal.h"

ts_status ts__mla_check(const char *fn, const ts_tensor *t, const char *name, ts_dtype dtype,
                        int32_t ndim, const int64_t *shape) {
    if (!t) return ts__fail(TS_ERR_NULL_POINTER, "%s: %s is NULL", fn, name);
    TS__RETURN_IF_ERROR(ts_tensor_check(t, name));
    if (t->dtype != dtype)
        return ts__fail(TS_ERR_DTYPE, "%s: %s has dtype %s, expected %s", fn, name,
                        ts_dtype_name(t->dtype), ts_dtype_name(dtype));
    if (t->ndim != ndim)
        return ts__fail(TS_ERR_SHAPE, "%s: %s has %d dims, expected %d", fn, name, (int)t->ndim,
                        (int)ndim);
    for (int32_t d = 0; d < ndim; d++)
        if (shape && shape[d] >= 0 && t->shape[d] != shape[d])
            return ts__fail(TS_ERR_SHAPE, "%s: %s dim %d is %lld, expected %lld", fn, name, (int)d,
                            (long long)t->shape[d], (long long)shape[d]);
    /* vectors (lengths, sinks) are read element by element: any stride */
    if (ndim > 1 && t->shape[ndim - 1] > 1 && t->strides[ndim - 1] != 1)
        return ts__fail(TS_ERR_STRIDE, "%s: %s last dim is not contiguous (stride %lld)", fn, name,
                        (long long)t->strides[ndim - 1]);
    for (int32_t d = 0; d < ndim; d++)
        if (t->strides[d] < 0)
            return ts__fail(TS_ERR_STRIDE, "%s: %s has a negative stride", fn, name);
    return TS_OK;
}

ts_status ts__mla_check_fp8_cache(const char *fn, const ts_tensor *t, const char *name,
                                  ts_mla_kv_layout layout) {
    if (!t) return ts__fail(TS_ERR_NULL_POINTER, "%s: %s is NULL", fn, name);
    TS__RETURN_IF_ERROR(ts_tensor_check(t, name));
    if (t->dtype != TS_U8 && t->dtype != TS_I8 && t->dtype != TS_E4M3)
        return ts__fail(TS_ERR_DTYPE, "%s: %s has dtype %s, expected u8/i8/e4m3 bytes", fn, name,
                        ts_dtype_name(t->dtype));
    int64_t tb = ts_mla_kv_token_bytes(layout);
    if (t->ndim != 4 || t->shape[2] != 1 || t->shape[3] != tb)
        return ts__fail(TS_ERR_SHAPE,
                        "%s: %s must be [num_blocks, page_block_size, 1, %lld] for the %s layout",
                        fn, name, (long long)tb, layout == TS_MLA_KV_V32 ? "V32" : "MODEL1");
    if (t->shape[1] < 1)
        return ts__fail(TS_ERR_SHAPE, "%s: %s page_block_size is 0", fn, name);
    if (t->strides[3] != 1 || (t->shape[1] > 1 && t->strides[1] != tb))
        return ts__fail(TS_ERR_STRIDE, "%s: %s needs stride(1) == %lld bytes and stride(3) == 1",
                        fn, name, (long long)tb);
    if (t->shape[0] > 1 && t->strides[0] < t->shape[1] * tb)
        return ts__fail(TS_ERR_STRIDE, "%s: %s block stride %lld < page_block_size * %lld", fn,
                        name, (long long)t->strides[0], (long long)tb);
    return TS_OK;
}

const uint8_t *ts__mla_fp8_token(const ts_tensor *t, ts_mla_kv_layout layout, int64_t blk,
                                 int64_t row, const uint8_t **scales) {
    const uint8_t *b = (const uint8_t *)t->data + blk * t->strides[0];
    if (layout == TS_MLA_KV_V32) {
        *scales = NULL;
        return b + row * 656;
    }
    *scales = b + t->shape[1] * 576 + row * 8;
    return b + row * 576;
}
