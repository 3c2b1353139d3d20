/* Argument checks shared by the quantisers, cast-backs and layout helpers. */
#include "numerics/quant_kernels.h"

ts_status ts__quant_check_input(const ts_tensor *x, const char *name, ts__qsrc *src) {
    TS__RETURN_IF_ERROR(ts_tensor_check(x, name));
    switch (x->dtype) {
    case TS_BF16: *src = TS__QSRC_BF16; break;
    case TS_F16: *src = TS__QSRC_F16; break;
    case TS_F32: *src = TS__QSRC_F32; break;
    default:
        return ts__fail(TS_ERR_DTYPE, "tensor '%s': dtype %s, expected bf16, f16 or f32", name,
                        ts_dtype_name(x->dtype));
    }
    if (x->ndim != 2)
        return ts__fail(TS_ERR_SHAPE, "tensor '%s': ndim %d, expected 2", name, (int)x->ndim);
    TS__RETURN_IF_ERROR(ts_tensor_check_last_contiguous(x, name));
    size_t esz = ts_dtype_size(x->dtype);
    if ((uintptr_t)x->data % esz != 0)
        return ts__fail(TS_ERR_ALIGNMENT, "tensor '%s': data %p not aligned to its %zu-byte elements",
                        name, x->data, esz);
    return TS_OK;
}

ts_status ts__quant_check_token_sf(const ts_tensor *sf, int64_t m, int64_t nb, bool packed) {
    if (packed) {
        const int64_t shape[2] = {m, ts__cdiv_safe(nb, 4)};
        return ts__quant_check_out(sf, "sf", TS_UE8M0X4, TS_I32, 2, shape, false);
    }
    const int64_t shape[2] = {m, nb};
    return ts__quant_check_out(sf, "sf", TS_F32, TS_F32, 2, shape, false);
}

ts_status ts__quant_check_out(const ts_tensor *t, const char *name, ts_dtype dtype, ts_dtype alt,
                              int32_t ndim, const int64_t *shape, bool last_contig) {
    TS__RETURN_IF_ERROR(ts_tensor_check(t, name));
    if (t->dtype != dtype && t->dtype != alt) {
        if (alt != dtype)
            return ts__fail(TS_ERR_DTYPE, "tensor '%s': dtype %s, expected %s or %s", name,
                            ts_dtype_name(t->dtype), ts_dtype_name(dtype), ts_dtype_name(alt));
        return ts__fail(TS_ERR_DTYPE, "tensor '%s': dtype %s, expected %s", name,
                        ts_dtype_name(t->dtype), ts_dtype_name(dtype));
    }
    TS__RETURN_IF_ERROR(ts_tensor_check_shape(t, name, ndim, shape));
    if (last_contig) TS__RETURN_IF_ERROR(ts_tensor_check_last_contiguous(t, name));
    size_t esz = ts_dtype_size(t->dtype);
    if ((uintptr_t)t->data % esz != 0)
        return ts__fail(TS_ERR_ALIGNMENT, "tensor '%s': data %p not aligned to its %zu-byte elements",
                        name, t->data, esz);
    /* Outputs are written by several threads: two indices sharing an element would race. A
     * 2-D view is free of self-overlap when one dim steps over the whole extent of the other. */
    if (ndim == 2 && t->shape[0] > 1 && t->shape[1] > 1) {
        const int64_t s0 = t->strides[0], s1 = t->strides[1];
        const bool ok = (s1 >= 1 && s0 / t->shape[1] >= s1) || (s0 >= 1 && s1 / t->shape[0] >= s0);
        if (!ok)
            return ts__fail(TS_ERR_STRIDE, "tensor '%s': strides (%lld, %lld) make elements overlap", name,
                            (long long)s0, (long long)s1);
    } else if (ndim == 2 && t->shape[0] > 1 && t->strides[0] < 1) {
        return ts__fail(TS_ERR_STRIDE, "tensor '%s': row stride %lld makes rows overlap", name, (long long)t->strides[0]);
    } else if (ndim == 2 && t->shape[1] > 1 && t->strides[1] < 1) {
        return ts__fail(TS_ERR_STRIDE, "tensor '%s': column stride %lld makes columns overlap", name, (long long)t->strides[1]);
    }
    return TS_OK;
}

ts_status ts__quant_check_disjoint(const ts_tensor *a, const char *an, const ts_tensor *b,
                                   const char *bn) {
    int64_t na = 0, nb = 0;
    TS__RETURN_IF_ERROR(ts_tensor_nbytes(a, &na));
    TS__RETURN_IF_ERROR(ts_tensor_nbytes(b, &nb));
    if (na == 0 || nb == 0) return TS_OK;
    uintptr_t a0 = (uintptr_t)a->data, b0 = (uintptr_t)b->data;
    if (a0 < b0 + (uintptr_t)nb && b0 < a0 + (uintptr_t)na)
        return ts__fail(TS_ERR_ALIASING, "tensors '%s' and '%s' overlap", an, bn);
    return TS_OK;
}
