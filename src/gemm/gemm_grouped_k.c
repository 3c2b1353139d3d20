/* K-grouped GEMMs (MoE weight gradient): D[g] = C[g] + A_gᵀ·B_g, where group g owns a slice
 * of the K rows. Each group is one dense NT problem on K-slices of the operands (tn: the
 * transposed [M, k_g] view of A's rows; nt: the flattened [M, k_g] block), all groups run as
 * one batch, so D[g] has the bits of the dense GEMM of that slice. */
#include "gemm/gemm_grouped.h"
#include "tilestack/gemm.h"

#include <string.h>

typedef struct kg_call {
    bool bf16, nt;
    const ts_tensor *a, *sfa, *b, *sfb;
    ts_tensor *d;
    const int64_t *ks;
    int64_t num_ks;
    const ts_tensor *layout, *c;
    const int64_t *recipe;
    bool psum;
} kg_call;

/* Group g: K rows [start, start + k) of the operands, scale rows / columns from sf_off. */
typedef struct kg_seg {
    int64_t start, k, sf_off;
} kg_seg;

static ts_status resolve_gran_k(const kg_call *cl, int64_t *gran_k) {
    *gran_k = 128;
    if (cl->bf16 || !cl->recipe) return TS_OK;
    const int64_t *r = cl->recipe;
    bool ok = r[0] == 1 && r[1] == 1 && (r[2] == 128 || (!cl->nt && r[2] == 32));
    if (!ok)
        return ts__fail(TS_ERR_INVALID_ARGUMENT,
                        "recipe (%lld, %lld, %lld): K-grouped %s takes (1, 1, %s), as upstream",
                        (long long)r[0], (long long)r[1], (long long)r[2], cl->nt ? "nt" : "tn",
                        cl->nt ? "128" : "32 | 128");
    *gran_k = r[2];
    return TS_OK;
}

/* Scale units group g takes in sf (rows for tn, columns for nt): one per gran_k of its K
 * extent (psum: padded to the alignment), four per word when packed. */
static int64_t sf_units(int64_t k, int64_t gran_k, bool packed) {
    int64_t s = ts__ceil_div(k, gran_k);
    return packed ? ts__ceil_div(s, 4) : s;
}

/* Group segments from ks (consecutive) or the psum ends; *total_k: the K rows used. */
static ts_status parse_groups(const kg_call *cl, int64_t groups, int64_t gran_k, bool packed,
                              kg_seg *seg, int64_t *total_k, int64_t *total_sf) {
    const int32_t *lay = NULL;
    int64_t pos = 0, sf = 0;
    if (!cl->psum) {
        if (!cl->ks) return ts__fail(TS_ERR_NULL_POINTER, "ks_cpu is NULL (needed without psum)");
        if (cl->num_ks != groups)
            return ts__fail(TS_ERR_SHAPE, "ks_cpu: %lld entries, d has G = %lld",
                            (long long)cl->num_ks, (long long)groups);
        if (cl->layout)
            TS__RETURN_IF_ERROR(ts__gemm_check_i32_vector(cl->layout, "grouped_layout", groups, &lay));
        for (int64_t g = 0; g < groups; g++) {
            if (cl->ks[g] < 0)
                return ts__fail(TS_ERR_INVALID_ARGUMENT, "ks_cpu[%lld] = %lld is negative",
                                (long long)g, (long long)cl->ks[g]);
            if (lay && lay[g] != cl->ks[g])
                return ts__fail(TS_ERR_INVALID_ARGUMENT,
                                "grouped_layout[%lld] = %d differs from ks_cpu[%lld] = %lld",
                                (long long)g, (int)lay[g], (long long)g, (long long)cl->ks[g]);
            seg[g].start = pos;
            seg[g].k = cl->ks[g];
            seg[g].sf_off = sf;
            pos += cl->ks[g];
            sf += sf_units(cl->ks[g], gran_k, packed);
        }
    } else {
        if (cl->nt)
            return ts__fail(TS_ERR_INVALID_ARGUMENT,
                            "use_psum_layout: K-grouped nt has no psum layout (as upstream)");
        if (!cl->layout) return ts__fail(TS_ERR_NULL_POINTER, "grouped_layout is NULL (psum)");
        if (cl->ks && cl->num_ks != 0 && cl->num_ks != groups)
            return ts__fail(TS_ERR_SHAPE, "ks_cpu: %lld entries, d has G = %lld",
                            (long long)cl->num_ks, (long long)groups);
        TS__RETURN_IF_ERROR(ts__gemm_check_i32_vector(cl->layout, "grouped_layout", groups, &lay));
        const int64_t al = ts__gemm_mk_alignment();
        int64_t prev = 0;
        for (int64_t g = 0; g < groups; g++) {
            const int64_t end = lay[g], start = ts__align(prev, al);
            if (end < prev || (end > prev && end < start))
                return ts__fail(TS_ERR_INVALID_ARGUMENT,
                                "grouped_layout[%lld] = %lld: psum ends must not decrease and a "
                                "group starts at align(previous end %lld, %lld) = %lld",
                                (long long)g, (long long)end, (long long)prev, (long long)al,
                                (long long)start);
            seg[g].start = end > prev ? start : prev;
            seg[g].k = end > prev ? end - start : 0;
            seg[g].sf_off = sf;
            sf += sf_units(ts__align(seg[g].k, al), gran_k, packed);
            pos = ts__max64(pos, end);
            prev = end;
        }
    }
    *total_k = pos;
    *total_sf = sf;
    return TS_OK;
}

static ts_status check_c(const kg_call *cl, const int64_t *shape) {
    if (!cl->c) return TS_OK;
    TS__RETURN_IF_ERROR(ts__gemm_check_grouped_out(cl->c, "c", 3, shape));
    if (cl->c->dtype != cl->d->dtype)
        return ts__fail(TS_ERR_DTYPE, "c: dtype %s differs from d's %s", ts_dtype_name(cl->c->dtype),
                        ts_dtype_name(cl->d->dtype));
    bool same = cl->c->data == cl->d->data;
    for (int i = 0; i < 3; i++) same = same && cl->c->strides[i] == cl->d->strides[i];
    if (!same && ts__gemm_views_overlap(cl->c, cl->d))
        return ts__fail(TS_ERR_ALIASING,
                        "c overlaps d without being the same view (same data and strides)");
    return TS_OK;
}

/* Scale tensor of one operand: tn [units, MN], nt [MN, units]; f32, or packed ue8m0 (tn). */
static ts_status check_sf(const kg_call *cl, const ts_tensor *sf, const char *name, int64_t mn,
                          int64_t units, bool *packed) {
    TS__RETURN_IF_ERROR(ts_tensor_check(sf, name));
    if (sf->ndim != 2) return ts__fail(TS_ERR_SHAPE, "%s: expected 2 dims, got %d", name, (int)sf->ndim);
    *packed = sf->dtype == TS_I32 || sf->dtype == TS_UE8M0X4;
    if (!(sf->dtype == TS_F32 || (*packed && !cl->nt)))
        return ts__fail(TS_ERR_DTYPE, "%s: dtype %s, expected f32%s", name,
                        ts_dtype_name(sf->dtype), cl->nt ? "" : " or packed ue8m0 (i32)");
    const int64_t want0 = cl->nt ? mn : units, want1 = cl->nt ? units : mn;
    if (sf->shape[0] != want0 || sf->shape[1] != want1)
        return ts__fail(TS_ERR_SHAPE, "%s: shape [%lld, %lld], expected [%lld, %lld]", name,
                        (long long)sf->shape[0], (long long)sf->shape[1], (long long)want0,
                        (long long)want1);
    return TS_OK;
}

/* The whole operand as one NT view: tn, the transposed [MN, sum K] view of x; nt, the flat
 * vector (per-group views are built later). */
static ts_status base_operand(const kg_call *cl, const ts_tensor *x, const char *name, int64_t mn,
                              ts__gemm_operand *op) {
    TS__RETURN_IF_ERROR(ts_tensor_check(x, name));
    if (!cl->bf16 && x->dtype != TS_E4M3)
        return ts__fail(TS_ERR_DTYPE, "%s: dtype %s, expected e4m3 (K-grouped fp4 is not in "
                        "upstream v2.6.1)", name, ts_dtype_name(x->dtype));
    if (cl->nt) {
        if (x->ndim != 1)
            return ts__fail(TS_ERR_SHAPE, "%s: expected the flat 1-dim layout, got %d dims", name,
                            (int)x->ndim);
        if (x->shape[0] > 1 && x->strides[0] != 1)
            return ts__fail(TS_ERR_STRIDE, "%s: must be contiguous", name);
        memset(op, 0, sizeof *op);
        op->data = x->data;
        op->dtype = x->dtype;
        op->mn = mn;
        op->k_major = true;
        op->s_k = 1;
        return TS_OK;
    }
    if (x->ndim != 2)
        return ts__fail(TS_ERR_SHAPE, "%s: expected 2 dims [sum K, %s], got %d", name,
                        name[0] == 'a' ? "M" : "N", (int)x->ndim);
    if (x->shape[1] != mn)
        return ts__fail(TS_ERR_SHAPE, "%s: dim 1 is %lld, d gives %lld", name,
                        (long long)x->shape[1], (long long)mn);
    ts_tensor t = ts__gemm_transpose2(x);
    return ts__gemm_make_operand(&t, name, cl->bf16, true, op);
}

static ts__gemm_operand group_operand(const kg_call *cl, const ts__gemm_operand *base,
                                      const ts_tensor *sf, const kg_seg *s, int64_t gran_k,
                                      bool packed) {
    ts__gemm_operand o = *base;
    const int64_t es = (int64_t)ts_dtype_size(base->dtype);
    o.k = s->k;
    if (cl->nt) {
        o.data = (const char *)base->data + s->start * base->mn * es;
        o.s_mn = s->k;
        o.s_k = 1;
    } else {
        o.data = (const char *)base->data + s->start * base->s_k * es;
    }
    if (!sf) return o;
    o.sf_packed = packed;
    o.gran_mn = 1;
    o.gran_k = gran_k;
    if (cl->nt) {
        o.sf = (const char *)sf->data + s->sf_off * sf->strides[1] * 4;
        o.sf_s_mn = sf->strides[0];
        o.sf_s_k = sf->strides[1];
    } else {
        o.sf = (const char *)sf->data + s->sf_off * sf->strides[0] * 4;
        o.sf_s_mn = sf->strides[1];
        o.sf_s_k = sf->strides[0];
    }
    return o;
}

static ts_status k_grouped(const kg_call *cl) {
    TS__RETURN_IF_ERROR(ts_tensor_check(cl->d, "d"));
    if (cl->d->ndim != 3)
        return ts__fail(TS_ERR_SHAPE, "d: expected 3 dims [G, M, N], got %d", (int)cl->d->ndim);
    const int64_t groups = cl->d->shape[0], m = cl->d->shape[1], n = cl->d->shape[2];
    TS__RETURN_IF_ERROR(ts__gemm_check_grouped_out(cl->d, "d", 3, cl->d->shape));
    int64_t gran_k = 0;
    TS__RETURN_IF_ERROR(resolve_gran_k(cl, &gran_k));
    ts__gemm_operand oa, ob;
    TS__RETURN_IF_ERROR(base_operand(cl, cl->a, "a", m, &oa));
    TS__RETURN_IF_ERROR(base_operand(cl, cl->b, "b", n, &ob));
    if (!cl->bf16) {
        if (!cl->sfa) return ts__fail(TS_ERR_NULL_POINTER, "sfa is NULL");
        if (!cl->sfb) return ts__fail(TS_ERR_NULL_POINTER, "sfb is NULL");
    }
    bool packed_a = false, packed_b = false;
    if (!cl->bf16) {
        /* The packedness of each scale tensor decides how groups count their units. */
        packed_a = cl->sfa->dtype == TS_I32 || cl->sfa->dtype == TS_UE8M0X4;
        packed_b = cl->sfb->dtype == TS_I32 || cl->sfb->dtype == TS_UE8M0X4;
    }

    const size_t bytes = (size_t)groups * (sizeof(ts__gemm_problem) + 2 * sizeof(kg_seg)) + 64;
    ts__gemm_problem *probs = (ts__gemm_problem *)ts__scratch(0, bytes);
    if (!probs) return ts__fail(TS_ERR_OUT_OF_MEMORY, "k-grouped gemm: %zu bytes", bytes);
    kg_seg *seg_a = (kg_seg *)(probs + groups), *seg_b = seg_a + groups;
    int64_t total_k = 0, sf_a = 0, sf_b = 0;
    TS__RETURN_IF_ERROR(parse_groups(cl, groups, gran_k, packed_a, seg_a, &total_k, &sf_a));
    TS__RETURN_IF_ERROR(parse_groups(cl, groups, gran_k, packed_b, seg_b, &total_k, &sf_b));

    /* The K rows: exactly sum(ks) without psum; at least the last end with it (padding). */
    if (cl->nt) {
        const int64_t want_a = total_k * m, want_b = total_k * n;
        if (cl->a->shape[0] != want_a)
            return ts__fail(TS_ERR_SHAPE, "a: %lld elements, expected M * sum(ks) = %lld",
                            (long long)cl->a->shape[0], (long long)want_a);
        if (cl->b->shape[0] != want_b)
            return ts__fail(TS_ERR_SHAPE, "b: %lld elements, expected N * sum(ks) = %lld",
                            (long long)cl->b->shape[0], (long long)want_b);
    } else {
        const int64_t ka = cl->a->shape[0], kb = cl->b->shape[0];
        if (cl->psum ? ka < total_k : ka != total_k)
            return ts__fail(TS_ERR_SHAPE, "a: %lld K rows, the groups need %s%lld",
                            (long long)ka, cl->psum ? "at least " : "", (long long)total_k);
        if (kb != ka)
            return ts__fail(TS_ERR_SHAPE, "b: %lld K rows, a has %lld", (long long)kb,
                            (long long)ka);
    }
    if (!cl->bf16) {
        bool pa, pb;
        TS__RETURN_IF_ERROR(check_sf(cl, cl->sfa, "sfa", m, sf_a, &pa));
        TS__RETURN_IF_ERROR(check_sf(cl, cl->sfb, "sfb", n, sf_b, &pb));
    }
    TS__RETURN_IF_ERROR(check_c(cl, cl->d->shape));
    const ts_tensor *ins[5] = {cl->a, cl->sfa, cl->b, cl->sfb, cl->layout};
    const char *names[5] = {"a", "sfa", "b", "sfb", "grouped_layout"};
    TS__RETURN_IF_ERROR(ts__gemm_check_no_overlap(cl->d, ins, names, 5));
    if (cl->c) TS__RETURN_IF_ERROR(ts__gemm_check_no_overlap(cl->c, ins, names, 5));
    /* Upstream runs tn only on SM100, which casts f32 scales to ue8m0. */
    if (!cl->bf16 && !cl->nt) {
        if (!packed_a) TS__RETURN_IF_ERROR(ts__gemm_check_pow2_scales(cl->sfa, "sfa"));
        if (!packed_b) TS__RETURN_IF_ERROR(ts__gemm_check_pow2_scales(cl->sfb, "sfb"));
    }

    const int64_t es = (int64_t)ts_dtype_size(cl->d->dtype);
    for (int64_t g = 0; g < groups; g++) {
        ts__gemm_problem *p = &probs[g];
        ts__gemm_operand ga = group_operand(cl, &oa, cl->bf16 ? NULL : cl->sfa, &seg_a[g], gran_k, packed_a);
        ts__gemm_operand gb = group_operand(cl, &ob, cl->bf16 ? NULL : cl->sfb, &seg_b[g], gran_k, packed_b);
        memset(p, 0, sizeof *p);
        p->a = ga;
        p->b = gb;
        p->m = m;
        p->n = n;
        p->k = seg_a[g].k;
        p->d = (char *)cl->d->data + g * cl->d->strides[0] * es;
        p->ld_d = cl->d->strides[1];
        if (cl->c) {
            p->c = (const char *)cl->c->data + g * cl->c->strides[0] * es;
            p->ld_c = cl->c->strides[1];
        }
    }
    return ts__gemm_run_batch(probs, groups, n, cl->d->dtype, !cl->bf16, gran_k);
}

#define KG_FP8_ARGS                                                                           \
    const ts_tensor *a, const ts_tensor *sfa, const ts_tensor *b, const ts_tensor *sfb,       \
        ts_tensor *d, const int64_t *ks_cpu, int64_t num_ks, const ts_tensor *grouped_layout, \
        const ts_tensor *c, const int64_t *recipe, const char *compiled_dims,                 \
        bool use_psum_layout

ts_status ts_k_grouped_fp8_gemm_tn_contiguous(KG_FP8_ARGS) {
    (void)compiled_dims;
    kg_call cl = {false, false, a, sfa, b, sfb, d, ks_cpu, num_ks, grouped_layout, c, recipe,
                  use_psum_layout};
    return k_grouped(&cl);
}

ts_status ts_k_grouped_fp8_gemm_nt_contiguous(KG_FP8_ARGS) {
    (void)compiled_dims;
    kg_call cl = {false, true, a, sfa, b, sfb, d, ks_cpu, num_ks, grouped_layout, c, recipe,
                  use_psum_layout};
    return k_grouped(&cl);
}

ts_status ts_k_grouped_bf16_gemm_tn_contiguous(const ts_tensor *a, const ts_tensor *b, ts_tensor *d,
                                               const int64_t *ks_cpu, int64_t num_ks,
                                               const ts_tensor *grouped_layout, const ts_tensor *c,
                                               const char *compiled_dims, bool use_psum_layout) {
    (void)compiled_dims;
    kg_call cl = {true, false, a, NULL, b, NULL, d, ks_cpu, num_ks, grouped_layout, c, NULL,
                  use_psum_layout};
    return k_grouped(&cl);
}
