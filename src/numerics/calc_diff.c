/* deep_gemm.testing.calc_diff in float64: 1 - 2 * sum(x*y) / sum(x*x + y*y), 0 when the
 * denominator is 0 (both all zero). Summation is sequential in row-major index order, one
 * thread, so the result is reproducible (torch's reduction order differs; the metric is only
 * compared against thresholds). */
#include "numerics/quant_kernels.h"

#include "tilestack/quant.h"

static inline double ld_f64(const ts_tensor *t, int64_t off) {
    switch (t->dtype) {
    case TS_BF16: return (double)ts_bf16_to_f32(((const uint16_t *)t->data)[off]);
    case TS_F16: return (double)ts_f16_to_f32(((const uint16_t *)t->data)[off]);
    case TS_F32: return (double)((const float *)t->data)[off];
    default: return ((const double *)t->data)[off];
    }
}

static ts_status check_float(const ts_tensor *t, const char *name) {
    TS__RETURN_IF_ERROR(ts_tensor_check(t, name));
    if (t->dtype != TS_BF16 && t->dtype != TS_F16 && t->dtype != TS_F32 && t->dtype != TS_F64)
        return ts__fail(TS_ERR_DTYPE, "tensor '%s': dtype %s, expected bf16, f16, f32 or f64", name,
                        ts_dtype_name(t->dtype));
    size_t esz = ts_dtype_size(t->dtype);
    if ((uintptr_t)t->data % esz != 0)
        return ts__fail(TS_ERR_ALIGNMENT, "tensor '%s': data %p not aligned to its %zu-byte elements", name,
                        t->data, esz);
    return TS_OK;
}

ts_status ts_calc_diff(const ts_tensor *x, const ts_tensor *y, double *diff) {
    TS__RETURN_IF_ERROR(check_float(x, "x"));
    TS__RETURN_IF_ERROR(check_float(y, "y"));
    if (!diff) return ts__fail(TS_ERR_NULL_POINTER, "diff is NULL");
    TS__RETURN_IF_ERROR(ts_tensor_check_shape(y, "y", x->ndim, x->shape));
    int64_t shp[TS_MAX_DIMS] = {1, 1, 1, 1}, xs[TS_MAX_DIMS] = {0}, ys[TS_MAX_DIMS] = {0};
    const int32_t off = TS_MAX_DIMS - x->ndim;
    for (int32_t d = 0; d < x->ndim; d++) {
        shp[off + d] = x->shape[d];
        xs[off + d] = x->strides[d];
        ys[off + d] = y->strides[d];
    }
    double num = 0.0, den = 0.0;
    for (int64_t a = 0; a < shp[0]; a++)
        for (int64_t b = 0; b < shp[1]; b++)
            for (int64_t c = 0; c < shp[2]; c++)
                for (int64_t e = 0; e < shp[3]; e++) {
                    double xv = ld_f64(x, a * xs[0] + b * xs[1] + c * xs[2] + e * xs[3]);
                    double yv = ld_f64(y, a * ys[0] + b * ys[1] + c * ys[2] + e * ys[3]);
                    num += xv * yv;
                    den += xv * xv + yv * yv;
                }
    *diff = den == 0.0 ? 0.0 : 1.0 - 2.0 * num / den;
    return TS_OK;
}
