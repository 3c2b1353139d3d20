/* Argument checks of DeepGEMM's quantisers (include/tilestack/quant.h), shared by the
 * hand-written implementations (quant_fp8.c, quant_fp4.c, quant_cast_back.c) and the tile
 * kernels' dispatch (quant_tile.c), so both refuse the same inputs with the same codes. */
#include "numerics/quant_kernels.h"

static ts_status check_common(const ts_tensor *x, int64_t gran_k, ts__qsrc *src) {
    TS__RETURN_IF_ERROR(ts__quant_check_input(x, "x", src));
    if (gran_k <= 0)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "gran_k = %lld must be positive", (long long)gran_k);
    return TS_OK;
}

static ts_status check_disjoint3(const ts_tensor *x, const ts_tensor *q, const char *qn, const ts_tensor *sf) {
    TS__RETURN_IF_ERROR(ts__quant_check_disjoint(x, "x", q, qn));
    TS__RETURN_IF_ERROR(ts__quant_check_disjoint(x, "x", sf, "sf"));
    return ts__quant_check_disjoint(q, qn, sf, "sf");
}

ts_status ts__quant_args_token_fp8(const ts_tensor *x, bool use_ue8m0, int64_t gran_k, bool use_packed_ue8m0,
                                   const ts_tensor *x_fp8, const ts_tensor *sf, ts__qsrc *src) {
    TS__RETURN_IF_ERROR(check_common(x, gran_k, src));
    if (use_packed_ue8m0 && !use_ue8m0)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "use_packed_ue8m0 requires use_ue8m0");
    const int64_t m = x->shape[0], n = x->shape[1];
    const int64_t qshape[2] = {m, n};
    TS__RETURN_IF_ERROR(ts__quant_check_out(x_fp8, "x_fp8", TS_E4M3, TS_E4M3, 2, qshape, true));
    TS__RETURN_IF_ERROR(ts__quant_check_token_sf(sf, m, ts__cdiv_safe(n, gran_k), use_packed_ue8m0));
    return check_disjoint3(x, x_fp8, "x_fp8", sf);
}

ts_status ts__quant_args_block_fp8(const ts_tensor *x, int64_t gran_k, const ts_tensor *x_fp8, const ts_tensor *sf,
                                   ts__qsrc *src) {
    TS__RETURN_IF_ERROR(check_common(x, gran_k, src));
    const int64_t m = x->shape[0], n = x->shape[1];
    const int64_t qshape[2] = {m, n};
    const int64_t sshape[2] = {ts__cdiv_safe(m, gran_k), ts__cdiv_safe(n, gran_k)};
    TS__RETURN_IF_ERROR(ts__quant_check_out(x_fp8, "x_fp8", TS_E4M3, TS_E4M3, 2, qshape, true));
    TS__RETURN_IF_ERROR(ts__quant_check_out(sf, "sf", TS_F32, TS_F32, 2, sshape, false));
    return check_disjoint3(x, x_fp8, "x_fp8", sf);
}

ts_status ts__quant_args_channel_fp8(const ts_tensor *x, int64_t gran_k, const ts_tensor *x_fp8,
                                     const ts_tensor *sf, ts__qsrc *src) {
    TS__RETURN_IF_ERROR(check_common(x, gran_k, src));
    const int64_t m = x->shape[0], n = x->shape[1];
    if (m % gran_k != 0)
        return ts__fail(TS_ERR_SHAPE, "tensor 'x': rows %lld not a multiple of gran_k %lld",
                        (long long)m, (long long)gran_k);
    const int64_t qshape[2] = {m, n};
    const int64_t sshape[2] = {m / gran_k, n};
    TS__RETURN_IF_ERROR(ts__quant_check_out(x_fp8, "x_fp8", TS_E4M3, TS_E4M3, 2, qshape, true));
    TS__RETURN_IF_ERROR(ts__quant_check_out(sf, "sf", TS_F32, TS_F32, 2, sshape, false));
    return check_disjoint3(x, x_fp8, "x_fp8", sf);
}

ts_status ts__quant_args_token_fp4(const ts_tensor *x, bool use_ue8m0, int64_t gran_k, bool use_packed_ue8m0,
                                   ts_fp4_rounding rounding, const ts_tensor *x_fp4, const ts_tensor *sf,
                                   ts__qsrc *src) {
    TS__RETURN_IF_ERROR(check_common(x, gran_k, src));
    if (use_packed_ue8m0 && !use_ue8m0)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "use_packed_ue8m0 requires use_ue8m0");
    if (rounding != TS_FP4_ROUND_DEEPGEMM && rounding != TS_FP4_ROUND_RNE)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "rounding = %d is not a ts_fp4_rounding", (int)rounding);
    const int64_t m = x->shape[0], n = x->shape[1];
    if (n % 2 != 0)
        return ts__fail(TS_ERR_SHAPE, "tensor 'x': columns %lld must be even for packed fp4", (long long)n);
    const int64_t qshape[2] = {m, n / 2};
    TS__RETURN_IF_ERROR(ts__quant_check_out(x_fp4, "x_fp4", TS_E2M1X2, TS_E2M1X2, 2, qshape, true));
    TS__RETURN_IF_ERROR(ts__quant_check_token_sf(sf, m, ts__cdiv_safe(n, gran_k), use_packed_ue8m0));
    return check_disjoint3(x, x_fp4, "x_fp4", sf);
}

ts_status ts__quant_args_cast_back(const ts_tensor *x, const char *xname, bool fp4, const ts_tensor *sf,
                                   int64_t gmn, int64_t gk, const ts_tensor *out, bool *packed) {
    TS__RETURN_IF_ERROR(ts_tensor_check(x, xname));
    if (fp4 ? !(x->dtype == TS_E2M1X2 || x->dtype == TS_I8 || x->dtype == TS_U8) : x->dtype != TS_E4M3)
        return ts__fail(TS_ERR_DTYPE, "tensor '%s': dtype %s, expected %s", xname,
                        ts_dtype_name(x->dtype), fp4 ? "e2m1x2" : "e4m3");
    if (x->ndim != 2) return ts__fail(TS_ERR_SHAPE, "tensor '%s': ndim %d, expected 2", xname, (int)x->ndim);
    TS__RETURN_IF_ERROR(ts_tensor_check_last_contiguous(x, xname));
    if (gmn <= 0) return ts__fail(TS_ERR_INVALID_ARGUMENT, "sf_gran_mn = %lld must be positive", (long long)gmn);
    if (gk <= 0) return ts__fail(TS_ERR_INVALID_ARGUMENT, "sf_gran_k = %lld must be positive", (long long)gk);
    const int64_t m = x->shape[0], n = fp4 ? x->shape[1] * 2 : x->shape[1];
    const int64_t nb = ts__cdiv_safe(n, gk), mb = ts__cdiv_safe(m, gmn);
    TS__RETURN_IF_ERROR(ts_tensor_check(sf, "sf"));
    *packed = sf->dtype == TS_UE8M0X4 || sf->dtype == TS_I32;
    if (!*packed && sf->dtype != TS_F32)
        return ts__fail(TS_ERR_DTYPE, "tensor 'sf': dtype %s, expected f32 or ue8m0x4", ts_dtype_name(sf->dtype));
    const int64_t sshape[2] = {mb, *packed ? ts__cdiv_safe(nb, 4) : nb};
    TS__RETURN_IF_ERROR(ts_tensor_check_shape(sf, "sf", 2, sshape)); /* an input: broadcast strides are fine */
    if ((uintptr_t)sf->data % 4 != 0)
        return ts__fail(TS_ERR_ALIGNMENT, "tensor 'sf': data %p not 4-byte aligned", sf->data);
    TS__RETURN_IF_ERROR(ts_tensor_check(out, "out"));
    if (out->dtype != TS_F32 && out->dtype != TS_BF16 && out->dtype != TS_F16)
        return ts__fail(TS_ERR_DTYPE, "tensor 'out': dtype %s, expected bf16, f16 or f32", ts_dtype_name(out->dtype));
    const int64_t oshape[2] = {m, n};
    TS__RETURN_IF_ERROR(ts__quant_check_out(out, "out", out->dtype, out->dtype, 2, oshape, true));
    TS__RETURN_IF_ERROR(ts__quant_check_disjoint(x, xname, out, "out"));
    return ts__quant_check_disjoint(sf, "sf", out, "out");
}
