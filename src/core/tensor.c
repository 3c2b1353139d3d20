/* dtype table and ts_tensor views: construction and validation with precise error codes. */
#include "core/internal.h"

#include <string.h>

static const struct { const char *name; size_t size; } k_dtypes[TS_DTYPE_COUNT_] = {
    [TS_BOOL] = {"bool", 1},   [TS_I8] = {"i8", 1},         [TS_I16] = {"i16", 2},
    [TS_I32] = {"i32", 4},     [TS_I64] = {"i64", 8},       [TS_U8] = {"u8", 1},
    [TS_F16] = {"f16", 2},     [TS_BF16] = {"bf16", 2},     [TS_F32] = {"f32", 4},
    [TS_F64] = {"f64", 8},     [TS_E4M3] = {"e4m3", 1},     [TS_E5M2] = {"e5m2", 1},
    [TS_E2M1X2] = {"e2m1x2", 1}, [TS_UE8M0] = {"ue8m0", 1}, [TS_UE8M0X4] = {"ue8m0x4", 4},
    [TS_E5M6X8] = {"e5m6x8", 1},
};

static bool dtype_valid(ts_dtype t) { return (int)t >= 0 && t < TS_DTYPE_COUNT_; }

const char *ts_dtype_name(ts_dtype t) { return dtype_valid(t) ? k_dtypes[t].name : "?"; }
size_t ts_dtype_size(ts_dtype t) { return dtype_valid(t) ? k_dtypes[t].size : 0; }

ts_tensor ts_tensor_make(void *data, ts_dtype dtype, int32_t ndim, const int64_t *shape) {
    ts_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dtype;
    t.ndim = ndim;
    if (ndim < 1 || ndim > TS_MAX_DIMS || !shape) return t; /* rejected later by ts_tensor_check */
    int64_t stride = 1;
    for (int32_t d = ndim - 1; d >= 0; d--) {
        t.shape[d] = shape[d];
        t.strides[d] = stride;
        /* A stride that overflows saturates; ts_tensor_check then reports TS_ERR_OVERFLOW. */
        if (__builtin_mul_overflow(stride, shape[d] > 0 ? shape[d] : 1, &stride)) stride = INT64_MAX;
    }
    return t;
}

ts_tensor ts_tensor_1d(void *data, ts_dtype dtype, int64_t n0) {
    int64_t s[1] = {n0};
    return ts_tensor_make(data, dtype, 1, s);
}
ts_tensor ts_tensor_2d(void *data, ts_dtype dtype, int64_t n0, int64_t n1) {
    int64_t s[2] = {n0, n1};
    return ts_tensor_make(data, dtype, 2, s);
}
ts_tensor ts_tensor_3d(void *data, ts_dtype dtype, int64_t n0, int64_t n1, int64_t n2) {
    int64_t s[3] = {n0, n1, n2};
    return ts_tensor_make(data, dtype, 3, s);
}

ts_status ts_mul_overflow_i64(int64_t a, int64_t b, int64_t *out) {
    int64_t r;
    if (a < 0 || b < 0) return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_mul_overflow_i64: negative operand");
    if (__builtin_mul_overflow(a, b, &r)) return ts__fail(TS_ERR_OVERFLOW, "%lld * %lld overflows int64", (long long)a, (long long)b);
    if (out) *out = r;
    return TS_OK;
}

int64_t ts_tensor_numel(const ts_tensor *t) {
    if (!t || t->ndim < 1 || t->ndim > TS_MAX_DIMS) return -1;
    int64_t n = 1;
    for (int32_t d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0 || __builtin_mul_overflow(n, t->shape[d], &n)) return -1;
    }
    return n;
}

/* Span in bytes = (1 + sum (shape-1)*stride) units; assumes shape/stride already sane. */
static ts_status span_bytes(const ts_tensor *t, const char *name, int64_t *nbytes) {
    int64_t units = 1;
    for (int32_t d = 0; d < t->ndim; d++) {
        if (t->shape[d] == 0) { *nbytes = 0; return TS_OK; }
    }
    for (int32_t d = 0; d < t->ndim; d++) {
        int64_t off;
        if (__builtin_mul_overflow(t->shape[d] - 1, t->strides[d], &off) ||
            __builtin_add_overflow(units, off, &units))
            return ts__fail(TS_ERR_OVERFLOW, "tensor '%s': byte size overflows 64 bits (dim %d)", name, (int)d);
    }
    if (__builtin_mul_overflow(units, (int64_t)ts_dtype_size(t->dtype), nbytes))
        return ts__fail(TS_ERR_OVERFLOW, "tensor '%s': byte size overflows 64 bits", name);
    return TS_OK;
}

ts_status ts_tensor_check(const ts_tensor *t, const char *name) {
    if (!name) name = "?";
    if (!t) return ts__fail(TS_ERR_NULL_POINTER, "tensor '%s' is NULL", name);
    if (!dtype_valid(t->dtype)) return ts__fail(TS_ERR_DTYPE, "tensor '%s': invalid dtype %d", name, (int)t->dtype);
    if (t->ndim < 1 || t->ndim > TS_MAX_DIMS)
        return ts__fail(TS_ERR_SHAPE, "tensor '%s': ndim %d outside [1, %d]", name, (int)t->ndim, TS_MAX_DIMS);
    for (int32_t d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0)
            return ts__fail(TS_ERR_SHAPE, "tensor '%s': shape[%d] = %lld is negative", name, (int)d, (long long)t->shape[d]);
        if (t->strides[d] < 0)
            return ts__fail(TS_ERR_STRIDE, "tensor '%s': stride[%d] = %lld is negative", name, (int)d, (long long)t->strides[d]);
    }
    if (ts_tensor_numel(t) < 0) return ts__fail(TS_ERR_OVERFLOW, "tensor '%s': element count overflows 64 bits", name);
    int64_t nbytes = 0;
    TS__RETURN_IF_ERROR(span_bytes(t, name, &nbytes));
    if (nbytes > 0 && !t->data) return ts__fail(TS_ERR_NULL_POINTER, "tensor '%s': data is NULL", name);
    if (nbytes > 0 && (uintptr_t)t->data > UINTPTR_MAX - (uintptr_t)nbytes)
        return ts__fail(TS_ERR_OVERFLOW, "tensor '%s': data + size wraps the address space", name);
    return TS_OK;
}

ts_status ts_tensor_nbytes(const ts_tensor *t, int64_t *nbytes) {
    TS__RETURN_IF_ERROR(ts_tensor_check(t, "tensor"));
    int64_t n = 0;
    TS__RETURN_IF_ERROR(span_bytes(t, "tensor", &n));
    if (nbytes) *nbytes = n;
    return TS_OK;
}

ts_status ts_tensor_check_dtype(const ts_tensor *t, const char *name, ts_dtype dtype) {
    TS__RETURN_IF_ERROR(ts_tensor_check(t, name));
    if (t->dtype != dtype)
        return ts__fail(TS_ERR_DTYPE, "tensor '%s': dtype %s, expected %s", name, ts_dtype_name(t->dtype), ts_dtype_name(dtype));
    return TS_OK;
}

ts_status ts_tensor_check_shape(const ts_tensor *t, const char *name, int32_t ndim, const int64_t *shape) {
    TS__RETURN_IF_ERROR(ts_tensor_check(t, name));
    if (t->ndim != ndim) return ts__fail(TS_ERR_SHAPE, "tensor '%s': ndim %d, expected %d", name, (int)t->ndim, (int)ndim);
    for (int32_t d = 0; d < ndim; d++) {
        if (shape && shape[d] >= 0 && t->shape[d] != shape[d])
            return ts__fail(TS_ERR_SHAPE, "tensor '%s': shape[%d] = %lld, expected %lld", name, (int)d,
                            (long long)t->shape[d], (long long)shape[d]);
    }
    return TS_OK;
}

ts_status ts_tensor_check_last_contiguous(const ts_tensor *t, const char *name) {
    TS__RETURN_IF_ERROR(ts_tensor_check(t, name));
    int32_t last = t->ndim - 1;
    if (t->shape[last] > 1 && t->strides[last] != 1)
        return ts__fail(TS_ERR_STRIDE, "tensor '%s': last dim not contiguous (stride %lld)", name, (long long)t->strides[last]);
    return TS_OK;
}

bool ts_tensor_is_contiguous(const ts_tensor *t) {
    if (!t || t->ndim < 1 || t->ndim > TS_MAX_DIMS) return false;
    int64_t expect = 1;
    for (int32_t d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] > 1 && t->strides[d] != expect) return false;
        expect *= t->shape[d] > 0 ? t->shape[d] : 1;
    }
    return true;
}

bool ts_tensor_is_k_major(const ts_tensor *t) {
    if (!t || t->ndim < 1 || t->ndim > TS_MAX_DIMS) return false;
    return t->shape[t->ndim - 1] <= 1 || t->strides[t->ndim - 1] == 1;
}

bool ts_tensor_is_mn_major(const ts_tensor *t) {
    if (!t || t->ndim < 2 || t->ndim > TS_MAX_DIMS) return false;
    return t->shape[t->ndim - 2] <= 1 || t->strides[t->ndim - 2] == 1;
}

ts_status ts_tensor_check_major(const ts_tensor *t, const char *name, bool want_k_major) {
    TS__RETURN_IF_ERROR(ts_tensor_check(t, name));
    if (want_k_major ? !ts_tensor_is_k_major(t) : !ts_tensor_is_mn_major(t))
        return ts__fail(TS_ERR_STRIDE, "tensor '%s': expected %s layout (strides %lld, %lld)", name,
                        want_k_major ? "K-major (stride[-1] == 1)" : "MN-major (stride[-2] == 1)",
                        (long long)(t->ndim >= 2 ? t->strides[t->ndim - 2] : 0), (long long)t->strides[t->ndim - 1]);
    return TS_OK;
}

ts_status ts_tensor_check_aligned(const ts_tensor *t, const char *name, size_t bytes) {
    TS__RETURN_IF_ERROR(ts_tensor_check(t, name));
    if (bytes == 0 || (bytes & (bytes - 1)))
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "alignment %zu for '%s' is not a power of two", bytes, name);
    if ((uintptr_t)t->data % bytes)
        return ts__fail(TS_ERR_ALIGNMENT, "tensor '%s': data %p not aligned to %zu bytes", name, t->data, bytes);
    size_t unit = ts_dtype_size(t->dtype);
    for (int32_t d = 0; d < t->ndim; d++) {
        if (t->shape[d] > 1 && t->strides[d] != 1 && ((uint64_t)t->strides[d] * unit) % bytes)
            return ts__fail(TS_ERR_ALIGNMENT, "tensor '%s': stride[%d] = %lld elements is not a multiple of %zu bytes",
                            name, (int)d, (long long)t->strides[d], bytes);
    }
    return TS_OK;
}
