/* Grouped GEMMs: the contiguous-layout alignment setting and the view / validation helpers
 * both grouped drivers use. */
#include "gemm/gemm_grouped.h"
#include "tilestack/gemm.h"

#include <stdatomic.h>
#include <string.h>

/* Upstream's default (kLegacyMKAlignmentForContiguousLayout). */
static _Atomic int g_mk_alignment = 128;

int ts_get_mk_alignment_for_contiguous_layout(void) { return atomic_load(&g_mk_alignment); }

ts_status ts_set_mk_alignment_for_contiguous_layout(int alignment) {
    if (alignment < 1 || alignment > 65536)
        return ts__fail(TS_ERR_INVALID_ARGUMENT,
                        "alignment: %d, expected 1..65536 (upstream uses 32..384)", alignment);
    atomic_store(&g_mk_alignment, alignment);
    return TS_OK;
}

int ts_get_theoretical_mk_alignment_for_contiguous_layout(int64_t expected_m) {
    (void)expected_m;
    return 128;
}

int64_t ts__gemm_mk_alignment(void) { return atomic_load(&g_mk_alignment); }

ts_tensor ts__gemm_slice3(const ts_tensor *x, int64_t i) {
    ts_tensor t = *x;
    t.ndim = 2;
    t.shape[0] = x->shape[1];
    t.shape[1] = x->shape[2];
    t.strides[0] = x->strides[1];
    t.strides[1] = x->strides[2];
    t.shape[2] = 0;
    t.strides[2] = 0;
    if (x->data)
        t.data = (char *)x->data + i * x->strides[0] * (int64_t)ts_dtype_size(x->dtype);
    return t;
}

ts_tensor ts__gemm_transpose2(const ts_tensor *x) {
    ts_tensor t = *x;
    t.shape[0] = x->shape[1];
    t.shape[1] = x->shape[0];
    t.strides[0] = x->strides[1];
    t.strides[1] = x->strides[0];
    return t;
}

ts_status ts__gemm_check_i32_vector(const ts_tensor *t, const char *name, int64_t n,
                                    const int32_t **data) {
    TS__RETURN_IF_ERROR(ts_tensor_check(t, name));
    if (t->dtype != TS_I32)
        return ts__fail(TS_ERR_DTYPE, "%s: dtype %s, expected i32", name, ts_dtype_name(t->dtype));
    if (t->ndim != 1)
        return ts__fail(TS_ERR_SHAPE, "%s: expected 1 dim, got %d", name, (int)t->ndim);
    if (t->shape[0] != n)
        return ts__fail(TS_ERR_SHAPE, "%s: %lld entries, expected %lld", name,
                        (long long)t->shape[0], (long long)n);
    if (n > 1 && t->strides[0] != 1)
        return ts__fail(TS_ERR_STRIDE, "%s: must be contiguous (stride %lld)", name,
                        (long long)t->strides[0]);
    *data = (const int32_t *)t->data;
    return TS_OK;
}

ts_status ts__gemm_check_pow2_scales3(const ts_tensor *sf, const char *name) {
    for (int64_t g = 0; g < sf->shape[0]; g++) {
        ts_tensor s = ts__gemm_slice3(sf, g);
        TS__RETURN_IF_ERROR(ts__gemm_check_pow2_scales(&s, name));
    }
    return TS_OK;
}

ts_status ts__gemm_check_out_shape(const ts_tensor *d, const char *name, int ndim,
                                   const int64_t *shape) {
    TS__RETURN_IF_ERROR(ts_tensor_check(d, name));
    if (d->ndim != ndim)
        return ts__fail(TS_ERR_SHAPE, "%s: expected %d dims, got %d", name, ndim, (int)d->ndim);
    if (d->dtype != TS_BF16 && d->dtype != TS_F32)
        return ts__fail(TS_ERR_DTYPE, "%s: dtype %s, expected bf16 or f32", name,
                        ts_dtype_name(d->dtype));
    for (int i = 0; i < ndim; i++)
        if (d->shape[i] != shape[i])
            return ts__fail(TS_ERR_SHAPE, "%s: dim %d is %lld, expected %lld", name, i,
                            (long long)d->shape[i], (long long)shape[i]);
    if (d->shape[ndim - 1] > 1 && d->strides[ndim - 1] != 1)
        return ts__fail(TS_ERR_STRIDE, "%s: last dim must be contiguous (stride %lld)", name,
                        (long long)d->strides[ndim - 1]);
    return TS_OK;
}

ts_status ts__gemm_check_grouped_out(const ts_tensor *d, const char *name, int ndim,
                                     const int64_t *shape) {
    TS__RETURN_IF_ERROR(ts__gemm_check_out_shape(d, name, ndim, shape));
    /* Row-major nesting with room for each inner block: distinct elements, distinct memory. */
    int64_t span = d->shape[ndim - 1];
    for (int i = ndim - 2; i >= 0; i--) {
        if (d->shape[i] > 1 && d->strides[i] < span)
            return ts__fail(TS_ERR_STRIDE,
                            "%s: stride %lld of dim %d is below the %lld elements it must skip "
                            "(rows would overlap)",
                            name, (long long)d->strides[i], i, (long long)span);
        span = d->shape[i] > 1 ? d->strides[i] * (d->shape[i] - 1) + span : span;
    }
    return TS_OK;
}

ts_status ts__gemm_check_no_overlap(const ts_tensor *d, const ts_tensor *const *inputs,
                                    const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (inputs[i] && ts__gemm_views_overlap(d, inputs[i]))
            return ts__fail(TS_ERR_ALIASING, "d overlaps input %s", names[i]);
    return TS_OK;
}

ts__gemm_operand ts__gemm_operand_rows(const ts__gemm_operand *op, int64_t r0, int64_t r) {
    ts__gemm_operand o = *op;
    o.data = (const char *)op->data + r0 * op->s_mn * (int64_t)ts_dtype_size(op->dtype);
    if (op->sf)
        o.sf = (const char *)op->sf + r0 * op->sf_s_mn * 4;
    o.mn = r;
    return o;
}
