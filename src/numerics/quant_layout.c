/* Scale-factor layout helpers (DeepGEMM csrc/apis/layout.hpp, jit_kernels/impls/smxx_layout.hpp).
 * On CPU they give the same shapes, strides and element bytes as upstream; the gap rows between
 * MN and align(MN, 4) inside a TMA-aligned view are never written (upstream leaves them
 * uninitialised too). Any input strides are accepted. */
#include "numerics/quant_kernels.h"

#include "tilestack/quant.h"

int64_t ts_get_tma_aligned_size(int64_t x, int64_t elem_size) {
    if (elem_size <= 0 || elem_size > 16 || 16 % elem_size != 0 || x < 0) return -1;
    int64_t a = 16 / elem_size;
    if (x > INT64_MAX - a) return -1;
    return ts__align(x, a);
}

/* Storage a strided view needs: max offset + 1 (torch's empty_strided size), 0 if empty. */
static ts_status span_elems(int32_t ndim, const int64_t *shape, const int64_t *strides, int64_t *out) {
    int64_t span = 1;
    for (int32_t d = 0; d < ndim; d++) {
        if (shape[d] == 0) { *out = 0; return TS_OK; }
    }
    for (int32_t d = 0; d < ndim; d++) {
        int64_t t;
        if (__builtin_mul_overflow(shape[d] - 1, strides[d], &t) || __builtin_add_overflow(span, t, &span))
            return ts__fail(TS_ERR_OVERFLOW, "scale-factor layout size overflows 64 bits");
    }
    *out = span;
    return TS_OK;
}

/* sf f32 [MN, SFK] or [G, MN, SFK]: unpack to G, MN, SFK and strides (batch stride 0 if 2-D). */
typedef struct sf3 {
    int64_t g, mn, k;
    int64_t s0, s1, s2;
} sf3;

static sf3 as3(const ts_tensor *t) {
    sf3 v;
    if (t->ndim == 2) {
        v.g = 1; v.mn = t->shape[0]; v.k = t->shape[1];
        v.s0 = 0; v.s1 = t->strides[0]; v.s2 = t->strides[1];
    } else {
        v.g = t->shape[0]; v.mn = t->shape[1]; v.k = t->shape[2];
        v.s0 = t->strides[0]; v.s1 = t->strides[1]; v.s2 = t->strides[2];
    }
    return v;
}

static ts_status check_sf_f32(const ts_tensor *sf) {
    TS__RETURN_IF_ERROR(ts_tensor_check(sf, "sf"));
    TS__RETURN_IF_ERROR(ts_tensor_check_dtype(sf, "sf", TS_F32));
    if (sf->ndim != 2 && sf->ndim != 3)
        return ts__fail(TS_ERR_SHAPE, "tensor 'sf': ndim %d, expected 2 or 3", (int)sf->ndim);
    if ((uintptr_t)sf->data % 4 != 0)
        return ts__fail(TS_ERR_ALIGNMENT, "tensor 'sf': data %p not 4-byte aligned", sf->data);
    return TS_OK;
}

/* Fill `lay` with shape [.., mn, k] and MN-major TMA-aligned strides. */
static ts_status make_mn_major(ts_dtype dt, int32_t ndim, int64_t g, int64_t mn, int64_t k,
                               ts_tensor *lay, int64_t *alloc) {
    int64_t tma_mn = ts_get_tma_aligned_size(mn, 4);
    int64_t batch;
    if (tma_mn < 0 || __builtin_mul_overflow(tma_mn, k, &batch))
        return ts__fail(TS_ERR_OVERFLOW, "scale-factor layout size overflows 64 bits");
    ts_tensor t;
    memset(&t, 0, sizeof t);
    t.data = NULL;
    t.dtype = dt;
    t.ndim = ndim;
    if (ndim == 2) {
        t.shape[0] = mn; t.shape[1] = k;
        t.strides[0] = 1; t.strides[1] = tma_mn;
    } else {
        t.shape[0] = g; t.shape[1] = mn; t.shape[2] = k;
        t.strides[0] = batch; t.strides[1] = 1; t.strides[2] = tma_mn;
    }
    int64_t span;
    TS__RETURN_IF_ERROR(span_elems(ndim, t.shape, t.strides, &span));
    int64_t bytes;
    if (__builtin_mul_overflow(span, (int64_t)4, &bytes))
        return ts__fail(TS_ERR_OVERFLOW, "scale-factor layout size overflows 64 bits");
    if (lay) *lay = t;
    if (alloc) *alloc = span;
    return TS_OK;
}

/* out must have exactly the strides of `want` (dims of size <= 1 excepted) and its dtype. */
static ts_status check_matches(const ts_tensor *out, const ts_tensor *want, ts_dtype alt) {
    TS__RETURN_IF_ERROR(ts_tensor_check(out, "out"));
    if (out->dtype != want->dtype && out->dtype != alt)
        return ts__fail(TS_ERR_DTYPE, "tensor 'out': dtype %s, expected %s", ts_dtype_name(out->dtype),
                        ts_dtype_name(want->dtype));
    TS__RETURN_IF_ERROR(ts_tensor_check_shape(out, "out", want->ndim, want->shape));
    for (int32_t d = 0; d < want->ndim; d++) {
        if (want->shape[d] > 1 && out->strides[d] != want->strides[d])
            return ts__fail(TS_ERR_STRIDE, "tensor 'out': stride[%d] = %lld, expected %lld", (int)d,
                            (long long)out->strides[d], (long long)want->strides[d]);
    }
    if ((uintptr_t)out->data % 4 != 0)
        return ts__fail(TS_ERR_ALIGNMENT, "tensor 'out': data %p not 4-byte aligned", out->data);
    return TS_OK;
}

static bool same_view(const ts_tensor *a, const ts_tensor *b) {
    if (a->data != b->data || a->ndim != b->ndim) return false;
    for (int32_t d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d] || (a->shape[d] > 1 && a->strides[d] != b->strides[d])) return false;
    return true;
}

/* Strided f32 copy [G, MN, K]: output row i reads input row i / gran_mn. */
static void copy_f32(const ts_tensor *src, ts_tensor *dst, int64_t gran_mn) {
    sf3 s = as3(src), d = as3(dst);
    const float *sp = (const float *)src->data;
    float *dp = (float *)dst->data;
    for (int64_t g = 0; g < d.g; g++)
        for (int64_t i = 0; i < d.mn; i++)
            for (int64_t j = 0; j < d.k; j++)
                dp[g * d.s0 + i * d.s1 + j * d.s2] = sp[g * s.s0 + (i / gran_mn) * s.s1 + j * s.s2];
}

ts_status ts_get_mn_major_tma_aligned_layout(const ts_tensor *sf, ts_tensor *layout, int64_t *alloc_elems) {
    TS__RETURN_IF_ERROR(check_sf_f32(sf));
    sf3 v = as3(sf);
    return make_mn_major(TS_F32, sf->ndim, v.g, v.mn, v.k, layout, alloc_elems);
}

ts_status ts_get_mn_major_tma_aligned_tensor(const ts_tensor *sf, ts_tensor *out) {
    ts_tensor want;
    TS__RETURN_IF_ERROR(ts_get_mn_major_tma_aligned_layout(sf, &want, NULL));
    TS__RETURN_IF_ERROR(check_matches(out, &want, TS_F32));
    if (same_view(sf, out)) return TS_OK; /* already in place: upstream returns sf itself */
    TS__RETURN_IF_ERROR(ts__quant_check_disjoint(sf, "sf", out, "out"));
    copy_f32(sf, out, 1);
    return TS_OK;
}

/* ---- packed ue8m0 ---- */

/* Every scale must be a positive normal power of two (exponent byte 1..254, zero mantissa). */
static ts_status check_pow2(const ts_tensor *sf) {
    sf3 s = as3(sf);
    const uint32_t *p = (const uint32_t *)sf->data;
    for (int64_t g = 0; g < s.g; g++)
        for (int64_t i = 0; i < s.mn; i++)
            for (int64_t j = 0; j < s.k; j++) {
                uint32_t u = p[g * s.s0 + i * s.s1 + j * s.s2];
                uint32_t e = u >> 23;
                if ((u & 0x807FFFFFu) != 0 || e == 0 || e == 255)
                    return ts__fail(TS_ERR_INVALID_ARGUMENT,
                                    "tensor 'sf': element [%lld, %lld, %lld] (bits 0x%08x) is not a positive "
                                    "normal power of two, so it has no ue8m0 byte",
                                    (long long)g, (long long)i, (long long)j, (unsigned)u);
            }
    return TS_OK;
}

/* Pack rows i of out from rows i / gran_mn of sf. */
static void pack_ue8m0(const ts_tensor *sf, ts_tensor *out, int64_t gran_mn) {
    sf3 s = as3(sf), d = as3(out);
    const uint32_t *sp = (const uint32_t *)sf->data;
    uint32_t *dp = (uint32_t *)out->data;
    for (int64_t g = 0; g < d.g; g++)
        for (int64_t i = 0; i < d.mn; i++)
            for (int64_t w = 0; w < d.k; w++) {
                uint32_t word = 0;
                for (int64_t b = 0; b < 4 && 4 * w + b < s.k; b++)
                    word |= (sp[g * s.s0 + (i / gran_mn) * s.s1 + (4 * w + b) * s.s2] >> 23) << (8 * b);
                dp[g * d.s0 + i * d.s1 + w * d.s2] = word;
            }
}

ts_status ts_get_mn_major_tma_aligned_packed_ue8m0_layout(const ts_tensor *sf, ts_tensor *layout,
                                                          int64_t *alloc_elems) {
    TS__RETURN_IF_ERROR(check_sf_f32(sf));
    sf3 v = as3(sf);
    return make_mn_major(TS_UE8M0X4, sf->ndim, v.g, v.mn, ts__cdiv_safe(v.k, 4), layout, alloc_elems);
}

ts_status ts_get_mn_major_tma_aligned_packed_ue8m0_tensor(const ts_tensor *sf, ts_tensor *out) {
    ts_tensor want;
    TS__RETURN_IF_ERROR(ts_get_mn_major_tma_aligned_packed_ue8m0_layout(sf, &want, NULL));
    TS__RETURN_IF_ERROR(check_matches(out, &want, TS_I32));
    TS__RETURN_IF_ERROR(ts__quant_check_disjoint(sf, "sf", out, "out"));
    TS__RETURN_IF_ERROR(check_pow2(sf));
    pack_ue8m0(sf, out, 1);
    return TS_OK;
}

/* ---- transform_sf_into_required_layout ---- */

static ts_status view_layout(const ts_tensor *sf, ts_tensor *layout, int64_t *alloc) {
    int64_t span;
    TS__RETURN_IF_ERROR(span_elems(sf->ndim, sf->shape, sf->strides, &span));
    if (layout) { *layout = *sf; layout->data = NULL; }
    if (alloc) *alloc = span;
    return TS_OK;
}

/* The required output is sf itself: out may be sf (nothing to do) or a buffer with its layout. */
static ts_status deliver_view(const ts_tensor *sf, ts_tensor *layout, int64_t *alloc, ts_tensor *out) {
    ts_tensor want;
    TS__RETURN_IF_ERROR(view_layout(sf, &want, alloc));
    if (layout) *layout = want;
    if (!out) return TS_OK;
    TS__RETURN_IF_ERROR(check_matches(out, &want, sf->dtype == TS_F32 ? TS_F32 : (sf->dtype == TS_I32 ? TS_UE8M0X4 : TS_I32)));
    if (same_view(sf, out)) return TS_OK;
    TS__RETURN_IF_ERROR(ts__quant_check_disjoint(sf, "sf", out, "out"));
    copy_f32(sf, out, 1); /* 4-byte elements: the bit copy is the same for i32 */
    return TS_OK;
}

ts_status ts_transform_sf_into_required_layout(const ts_tensor *sf, int64_t mn, int64_t k,
                                               int64_t gran_mn, int64_t gran_k, int64_t num_groups,
                                               bool disable_ue8m0_cast, ts_sf_arch arch,
                                               ts_tensor *layout, int64_t *alloc_elems, ts_tensor *out) {
    TS__RETURN_IF_ERROR(ts_tensor_check(sf, "sf"));
    const bool is_f32 = sf->dtype == TS_F32;
    if (!is_f32 && sf->dtype != TS_I32 && sf->dtype != TS_UE8M0X4)
        return ts__fail(TS_ERR_DTYPE, "tensor 'sf': dtype %s, expected f32 or ue8m0x4 (i32)", ts_dtype_name(sf->dtype));
    if ((uintptr_t)sf->data % 4 != 0)
        return ts__fail(TS_ERR_ALIGNMENT, "tensor 'sf': data %p not 4-byte aligned", sf->data);
    if (mn < 0 || k < 0)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "mn = %lld and k = %lld must be >= 0", (long long)mn, (long long)k);
    if (gran_mn <= 0 || gran_k <= 0)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "gran_mn = %lld and gran_k = %lld must be positive",
                        (long long)gran_mn, (long long)gran_k);
    if (num_groups < 0)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "num_groups = %lld must be >= 0 (0: no group dim)", (long long)num_groups);
    if (arch != TS_SF_ARCH_SM90 && arch != TS_SF_ARCH_SM100)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "arch = %d is not a ts_sf_arch", (int)arch);
    if (gran_k > INT64_MAX / 4)
        return ts__fail(TS_ERR_OVERFLOW, "gran_k = %lld too large", (long long)gran_k);

    /* Upstream check_sf_layout: shape checks always. */
    const int32_t want_ndim = num_groups > 0 ? 3 : 2;
    if (sf->ndim != want_ndim)
        return ts__fail(TS_ERR_SHAPE, "tensor 'sf': ndim %d, expected %d (num_groups = %lld)", (int)sf->ndim,
                        (int)want_ndim, (long long)num_groups);
    int64_t want_shape[3];
    int32_t d = 0;
    if (num_groups > 0) want_shape[d++] = num_groups;
    want_shape[d++] = ts__cdiv_safe(mn, gran_mn);
    want_shape[d++] = ts__cdiv_safe(k, gran_k * (is_f32 ? 1 : 4));
    TS__RETURN_IF_ERROR(ts_tensor_check_shape(sf, "sf", want_ndim, want_shape));
    const int64_t ld = sf->ndim - 1;

    const bool sm90_like = arch == TS_SF_ARCH_SM90 || disable_ue8m0_cast;
    if (is_f32 && gran_mn == 1 && gran_k == 128 && sm90_like) {
        ts_tensor want;
        TS__RETURN_IF_ERROR(ts_get_mn_major_tma_aligned_layout(sf, &want, alloc_elems));
        if (layout) *layout = want;
        return out ? ts_get_mn_major_tma_aligned_tensor(sf, out) : TS_OK;
    }
    if (is_f32 && gran_mn == 128 && gran_k == 128 && sm90_like) {
        /* SM90 SFB: contiguous, or contiguous after swapping the last two dims. */
        if (num_groups > 0 && sf->strides[0] != sf->shape[1] * sf->shape[2])
            return ts__fail(TS_ERR_STRIDE, "tensor 'sf': group stride %lld, expected %lld", (long long)sf->strides[0],
                            (long long)(sf->shape[1] * sf->shape[2]));
        bool k_major = sf->strides[ld] == 1 && sf->strides[ld - 1] == sf->shape[ld];
        bool mn_major = sf->strides[ld] == sf->shape[ld - 1] && sf->strides[ld - 1] == 1;
        if (!k_major && !mn_major)
            return ts__fail(TS_ERR_STRIDE, "tensor 'sf': strides (%lld, %lld) are neither contiguous nor transposed-contiguous",
                            (long long)sf->strides[ld - 1], (long long)sf->strides[ld]);
        return deliver_view(sf, layout, alloc_elems, out);
    }
    if (is_f32 && (gran_k == 32 || gran_k == 128) && arch == TS_SF_ARCH_SM100) {
        if (disable_ue8m0_cast)
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "disable_ue8m0_cast is set, but recipe (%lld, %lld) on SM100 needs the ue8m0 cast",
                            (long long)gran_mn, (long long)gran_k);
        /* Broadcast to one row per MN index, then pack. */
        ts_tensor want;
        TS__RETURN_IF_ERROR(make_mn_major(TS_UE8M0X4, sf->ndim, num_groups > 0 ? num_groups : 1, mn,
                                          ts__cdiv_safe(sf->shape[ld], 4), &want, alloc_elems));
        if (layout) *layout = want;
        if (!out) return TS_OK;
        TS__RETURN_IF_ERROR(check_matches(out, &want, TS_I32));
        TS__RETURN_IF_ERROR(ts__quant_check_disjoint(sf, "sf", out, "out"));
        TS__RETURN_IF_ERROR(check_pow2(sf));
        pack_ue8m0(sf, out, gran_mn);
        return TS_OK;
    }
    if (!is_f32 && gran_mn == 1 && (gran_k == 32 || gran_k == 128) && arch == TS_SF_ARCH_SM100) {
        /* Already packed: validate TMA alignment and MN-majorness only. */
        if (num_groups > 0 && sf->strides[0] != sf->strides[2] * sf->shape[2])
            return ts__fail(TS_ERR_STRIDE, "tensor 'sf': group stride %lld, expected %lld", (long long)sf->strides[0],
                            (long long)(sf->strides[2] * sf->shape[2]));
        if (!(sf->strides[ld - 1] == 1 || mn == 1))
            return ts__fail(TS_ERR_STRIDE, "tensor 'sf': not MN-major (stride[-2] = %lld)", (long long)sf->strides[ld - 1]);
        int64_t compact = ts_get_tma_aligned_size(mn, 4);
        if (sf->strides[ld] < compact || sf->strides[ld] % 4 != 0)
            return ts__fail(TS_ERR_STRIDE, "tensor 'sf': stride[-1] = %lld, expected a multiple of 4 and >= %lld",
                            (long long)sf->strides[ld], (long long)compact);
        return deliver_view(sf, layout, alloc_elems, out);
    }
    return ts__fail(TS_ERR_INVALID_ARGUMENT, "no scale-factor transformation for dtype %s, recipe (%lld, %lld), arch %d%s",
                    ts_dtype_name(sf->dtype), (long long)gran_mn, (long long)gran_k, (int)arch,
                    disable_ue8m0_cast ? ", disable_ue8m0_cast" : "");
}
