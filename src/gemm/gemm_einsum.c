/* einsum / fp8_einsum: upstream's hard-coded expressions as batched NT GEMMs on the dense
 * driver (stride views, no copies), so every element follows the canonical order.
 *
 * Each batched expression is permuted into (batch, M, N, K) as upstream does:
 *   bhr,hdr->bhd   (h, b, d, r): A = a[b,h,r] -> [h,b,r], B = b[h,d,r],         D -> [h,b,d]
 *   bhd,hdr->bhr   (h, b, r, d): A -> [h,b,d],            B = b[h,d,r] -> [h,r,d], D -> [h,b,r]
 *   bhd,bhr->hdr   (h, d, r, b): A -> [h,d,b],            B = b[b,h,r] -> [h,r,b], D = d[h,d,r]
 * Scale tensors are permuted with their data. bmk,bnk->mn sums over the batch as well:
 * D = (((C + P_0) + P_1) + ...) with P_s = A_s·B_sᵀ in the canonical order, s ascending (one
 * accumulating GEMM per batch, as upstream's kernel walks the batch for each tile; a bf16 D
 * goes through a zeroed f32 workspace and is rounded once at the end, as upstream). */
#include "gemm/gemm_grouped.h"
#include "gemm/gemm_internal.h"
#include "tilestack/gemm.h"
#include "tilestack/numerics.h"

#include <string.h>

typedef enum { EX_BHR_HDR_BHD, EX_BHD_HDR_BHR, EX_BHD_BHR_HDR, EX_BMK_BNK_MN, EX_NONE } ex_kind;

static ex_kind parse_expr(const char *expr) {
    if (!strcmp(expr, "bhr,hdr->bhd")) return EX_BHR_HDR_BHD;
    if (!strcmp(expr, "bhd,hdr->bhr")) return EX_BHD_HDR_BHR;
    if (!strcmp(expr, "bhd,bhr->hdr")) return EX_BHD_BHR_HDR;
    if (!strcmp(expr, "bmk,bnk->mn")) return EX_BMK_BNK_MN;
    return EX_NONE;
}

static ts_tensor perm3(const ts_tensor *t, int p0, int p1, int p2) {
    ts_tensor v = *t;
    const int p[3] = {p0, p1, p2};
    for (int i = 0; i < 3; i++) {
        v.shape[i] = t->shape[p[i]];
        v.strides[i] = t->strides[p[i]];
    }
    return v;
}

static ts_status need3(const ts_tensor *t, const char *name) {
    if (!t) return ts__fail(TS_ERR_NULL_POINTER, "%s is NULL", name);
    TS__RETURN_IF_ERROR(ts_tensor_check(t, name));
    if (t->ndim != 3)
        return ts__fail(TS_ERR_SHAPE, "%s: expected 3 dims, got %d", name, (int)t->ndim);
    return TS_OK;
}

/* d: bf16 or f32, the expected shape, last dim contiguous, and distinct elements in distinct
 * memory whatever the dims' order (permuted outputs are not row-major nested). */
static ts_status check_out(const ts_tensor *d, const char *name, int ndim, const int64_t *shape) {
    TS__RETURN_IF_ERROR(ts__gemm_check_out_shape(d, name, ndim, shape));
    int idx[TS_MAX_DIMS], cnt = 0;
    for (int i = 0; i < ndim; i++)
        if (d->shape[i] > 1) {
            if (d->strides[i] <= 0)
                return ts__fail(TS_ERR_STRIDE, "%s: stride %lld of dim %d must be positive",
                                name, (long long)d->strides[i], i);
            int j = cnt++;
            while (j > 0 && d->strides[idx[j - 1]] > d->strides[i]) { idx[j] = idx[j - 1]; j--; }
            idx[j] = i;
        }
    int64_t span = 1;
    for (int j = 0; j < cnt; j++) {
        const int i = idx[j];
        if (d->strides[i] < span)
            return ts__fail(TS_ERR_STRIDE, "%s: strides make distinct elements overlap", name);
        span = d->strides[i] * (d->shape[i] - 1) + span;
    }
    return TS_OK;
}

static ts_status check_c(const ts_tensor *c, const ts_tensor *d) {
    TS__RETURN_IF_ERROR(ts_tensor_check(c, "c"));
    if (c->dtype != d->dtype)
        return ts__fail(TS_ERR_DTYPE, "c: dtype %s, d is %s", ts_dtype_name(c->dtype),
                        ts_dtype_name(d->dtype));
    if (c->ndim != d->ndim)
        return ts__fail(TS_ERR_SHAPE, "c: %d dims, d has %d", (int)c->ndim, (int)d->ndim);
    bool same = c->data == d->data;
    for (int i = 0; i < d->ndim; i++) {
        if (c->shape[i] != d->shape[i])
            return ts__fail(TS_ERR_SHAPE, "c: dim %d is %lld, d has %lld", i,
                            (long long)c->shape[i], (long long)d->shape[i]);
        if (c->strides[i] != d->strides[i]) same = false;
    }
    if (c->shape[c->ndim - 1] > 1 && c->strides[c->ndim - 1] != 1)
        return ts__fail(TS_ERR_STRIDE, "c: last dim must be contiguous");
    if (!same && ts__gemm_views_overlap(c, d))
        return ts__fail(TS_ERR_ALIASING, "c overlaps d without being d");
    return TS_OK;
}

static ts_tensor slice(const ts_tensor *t, int64_t i) { return ts__gemm_slice3(t, i); }

/* The batched NT GEMM D'[i] = C'[i] + A'[i]·B'[i]ᵀ over permuted views (A', B', D', C' 3-D,
 * batch first); scaled: sfa', sfb' permuted alike with recipe r. Validates everything, then
 * runs one batch. */
static ts_status bmm(const ts_tensor *a, const ts_tensor *sfa, const ts_tensor *b,
                     const ts_tensor *sfb, const ts_tensor *d, const ts_tensor *c, bool scaled,
                     const ts_gemm_recipe *r, bool disable_ue8m0_cast) {
    const int64_t batch = a->shape[0];
    if (b->shape[0] != batch || d->shape[0] != batch)
        return ts__fail(TS_ERR_SHAPE, "batch sizes differ (a %lld, b %lld, d %lld)",
                        (long long)batch, (long long)b->shape[0], (long long)d->shape[0]);
    const int64_t m = a->shape[1], n = b->shape[1];
    if (a->shape[2] != b->shape[2])
        return ts__fail(TS_ERR_SHAPE, "contracted dims differ (a %lld, b %lld)",
                        (long long)a->shape[2], (long long)b->shape[2]);
    if (d->shape[1] != m || d->shape[2] != n)
        return ts__fail(TS_ERR_SHAPE, "d: [%lld, %lld] per batch, expected [%lld, %lld]",
                        (long long)d->shape[1], (long long)d->shape[2], (long long)m,
                        (long long)n);
    if (batch == 0 || m == 0 || n == 0) return TS_OK;
    const size_t bytes = (size_t)batch * sizeof(ts__gemm_problem) + 64;
    ts__gemm_problem *probs = (ts__gemm_problem *)ts__scratch(0, bytes);
    if (!probs) return ts__fail(TS_ERR_OUT_OF_MEMORY, "einsum: %zu bytes", bytes);
    const size_t es = ts_dtype_size(d->dtype);
    for (int64_t i = 0; i < batch; i++) {
        ts__gemm_problem *p = &probs[i];
        memset(p, 0, sizeof *p);
        ts_tensor ai = slice(a, i), bi = slice(b, i);
        TS__RETURN_IF_ERROR(ts__gemm_make_operand(&ai, "a", !scaled, false, &p->a));
        TS__RETURN_IF_ERROR(ts__gemm_make_operand(&bi, "b", !scaled, false, &p->b));
        if (scaled) {
            if (p->a.dtype != TS_E4M3 || p->b.dtype != TS_E4M3)
                return ts__fail(TS_ERR_DTYPE, "%s: fp8_einsum takes e4m3 operands (as upstream)",
                                p->a.dtype != TS_E4M3 ? "a" : "b");
            ts_tensor sai = slice(sfa, i), sbi = slice(sfb, i);
            TS__RETURN_IF_ERROR(
                ts__gemm_attach_scales(&p->a, &sai, "sfa", r->gran_mn_a, r->gran_k_a));
            TS__RETURN_IF_ERROR(
                ts__gemm_attach_scales(&p->b, &sbi, "sfb", r->gran_mn_b, r->gran_k_b));
            if (!disable_ue8m0_cast && ts__gemm_needs_ue8m0_cast(&p->a, &p->b)) {
                if (!p->a.sf_packed) TS__RETURN_IF_ERROR(ts__gemm_check_pow2_scales(&sai, "sfa"));
                if (!p->b.sf_packed) TS__RETURN_IF_ERROR(ts__gemm_check_pow2_scales(&sbi, "sfb"));
            }
        }
        p->m = m;
        p->n = n;
        p->k = p->a.k;
        p->d = (char *)d->data + i * d->strides[0] * (int64_t)es;
        p->ld_d = d->strides[1];
        if (c) {
            p->c = (const char *)c->data + i * c->strides[0] * (int64_t)es;
            p->ld_c = c->strides[1];
        }
    }
    const int64_t g = scaled ? ts__min64(r->gran_k_a, r->gran_k_b) : 0;
    return ts__gemm_run_batch(probs, batch, n, d->dtype, scaled, g);
}

/* Output shape of a batched expression from its inputs' dims. */
static void out_shape(ex_kind ex, const ts_tensor *a, const ts_tensor *b, int64_t *s) {
    switch (ex) {
    case EX_BHR_HDR_BHD: s[0] = a->shape[0]; s[1] = a->shape[1]; s[2] = b->shape[1]; break;
    case EX_BHD_HDR_BHR: s[0] = a->shape[0]; s[1] = a->shape[1]; s[2] = b->shape[2]; break;
    default: s[0] = a->shape[1]; s[1] = a->shape[2]; s[2] = b->shape[2]; break;
    }
}

static ts_status batched(ex_kind ex, const ts_tensor *a, const ts_tensor *sfa, const ts_tensor *b,
                         const ts_tensor *sfb, ts_tensor *d, const ts_tensor *c, bool scaled,
                         const ts_gemm_recipe *r) {
    int64_t ds[3];
    out_shape(ex, a, b, ds);
    TS__RETURN_IF_ERROR(check_out(d, "d", 3, ds));
    if (c) TS__RETURN_IF_ERROR(check_c(c, d));
    const ts_tensor *ins[4] = {a, sfa, b, sfb};
    const char *names[4] = {"a", "sfa", "b", "sfb"};
    TS__RETURN_IF_ERROR(ts__gemm_check_no_overlap(d, ins, names, 4));
    ts_tensor pa, pb, pd, pc, psa, psb;
    memset(&psa, 0, sizeof psa);
    memset(&psb, 0, sizeof psb);
    switch (ex) {
    case EX_BHR_HDR_BHD:
        pa = perm3(a, 1, 0, 2); pb = *b; pd = perm3(d, 1, 0, 2);
        if (c) pc = perm3(c, 1, 0, 2);
        if (scaled) { psa = perm3(sfa, 1, 0, 2); psb = *sfb; }
        break;
    case EX_BHD_HDR_BHR:
        pa = perm3(a, 1, 0, 2); pb = perm3(b, 0, 2, 1); pd = perm3(d, 1, 0, 2);
        if (c) pc = perm3(c, 1, 0, 2);
        if (scaled) { psa = perm3(sfa, 1, 0, 2); psb = perm3(sfb, 0, 2, 1); }
        break;
    default:
        pa = perm3(a, 1, 2, 0); pb = perm3(b, 1, 2, 0); pd = *d;
        if (c) pc = *c;
        if (scaled) { psa = perm3(sfa, 1, 2, 0); psb = perm3(sfb, 1, 2, 0); }
        break;
    }
    if (ex == EX_BHD_BHR_HDR && a->shape[0] != b->shape[0])
        return ts__fail(TS_ERR_SHAPE, "b: dim 0 (b) is %lld, a has %lld", (long long)b->shape[0],
                        (long long)a->shape[0]);
    if (ex != EX_BHD_BHR_HDR && a->shape[1] != b->shape[0])
        return ts__fail(TS_ERR_SHAPE, "b: dim 0 (h) is %lld, a has h = %lld",
                        (long long)b->shape[0], (long long)a->shape[1]);
    return bmm(&pa, scaled ? &psa : NULL, &pb, scaled ? &psb : NULL, &pd, c ? &pc : NULL, scaled,
               r, false);
}

static ts_status bmk_bnk_mn(const ts_tensor *a, const ts_tensor *b, ts_tensor *d,
                            const ts_tensor *c) {
    const int64_t S = a->shape[0], m = a->shape[1], n = b->shape[1];
    if (b->shape[0] != S || b->shape[2] != a->shape[2])
        return ts__fail(TS_ERR_SHAPE, "b: [%lld, %lld, %lld], expected [%lld, N, %lld]",
                        (long long)b->shape[0], (long long)b->shape[1], (long long)b->shape[2],
                        (long long)S, (long long)a->shape[2]);
    const int64_t ds[2] = {m, n};
    TS__RETURN_IF_ERROR(check_out(d, "d", 2, ds));
    if (d->dtype == TS_F32) {
        /* Upstream: an f32 D only in the accumulating form, c being d itself. */
        if (!c || c->data != d->data)
            return ts__fail(TS_ERR_INVALID_ARGUMENT,
                            "c: bmk,bnk->mn with an f32 d needs c = d (accumulate), as upstream");
        TS__RETURN_IF_ERROR(check_c(c, d));
        if (c->strides[0] != d->strides[0] || c->strides[1] != d->strides[1])
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "c: must be d itself (same strides)");
    } else if (c) {
        return ts__fail(TS_ERR_INVALID_ARGUMENT,
                        "c: bmk,bnk->mn with a bf16 d takes no c (as upstream)");
    }
    const ts_tensor *ins[2] = {a, b};
    const char *names[2] = {"a", "b"};
    TS__RETURN_IF_ERROR(ts__gemm_check_no_overlap(d, ins, names, 2));
    ts__gemm_problem p0;
    if (S > 0) {
        ts_tensor a0 = slice(a, 0), b0 = slice(b, 0);
        TS__RETURN_IF_ERROR(ts__gemm_make_operand(&a0, "a", true, false, &p0.a));
        TS__RETURN_IF_ERROR(ts__gemm_make_operand(&b0, "b", true, false, &p0.b));
    }
    if (m == 0 || n == 0) return TS_OK;
    float *acc = (float *)d->data;
    int64_t ld = d->strides[0];
    float *ws = NULL;
    if (d->dtype == TS_BF16) {
        ws = (float *)ts__aligned_alloc((size_t)(m * n) * 4 + 64);
        if (!ws) return ts__fail(TS_ERR_OUT_OF_MEMORY, "einsum: %lld floats", (long long)(m * n));
        memset(ws, 0, (size_t)(m * n) * 4);
        acc = ws;
        ld = n;
    }
    ts_status st = TS_OK;
    for (int64_t s = 0; s < S && st == TS_OK; s++) {
        ts__gemm_problem p;
        memset(&p, 0, sizeof p);
        ts_tensor as = slice(a, s), bs = slice(b, s);
        st = ts__gemm_make_operand(&as, "a", true, false, &p.a);
        if (st == TS_OK) st = ts__gemm_make_operand(&bs, "b", true, false, &p.b);
        if (st != TS_OK) break;
        p.m = m;
        p.n = n;
        p.k = p.a.k;
        p.d = acc;
        p.ld_d = ld;
        p.c = acc;
        p.ld_c = ld;
        st = ts__gemm_run_batch(&p, 1, n, TS_F32, false, 0);
    }
    if (ws) {
        if (st == TS_OK)
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++)
                    ((uint16_t *)d->data)[i * d->strides[0] + j] = ts_f32_to_bf16(ws[i * n + j]);
        ts__aligned_free(ws);
    }
    return st;
}

TS_API ts_status ts_einsum(const char *expr, const ts_tensor *a, const ts_tensor *b, ts_tensor *d,
                           const ts_tensor *c, bool use_cublaslt) {
    (void)use_cublaslt;
    if (!expr) return ts__fail(TS_ERR_NULL_POINTER, "expr is NULL");
    const ex_kind ex = parse_expr(expr);
    if (ex == EX_NONE)
        return ts__fail(TS_ERR_UNSUPPORTED,
                        "einsum: unsupported expression '%s' (upstream supports bmk,bnk->mn, "
                        "bhr,hdr->bhd, bhd,hdr->bhr, bhd,bhr->hdr)", expr);
    TS__RETURN_IF_ERROR(need3(a, "a"));
    TS__RETURN_IF_ERROR(need3(b, "b"));
    if (a->dtype != TS_BF16 || b->dtype != TS_BF16)
        return ts__fail(TS_ERR_DTYPE, "%s: dtype %s, einsum takes bf16",
                        a->dtype != TS_BF16 ? "a" : "b",
                        ts_dtype_name(a->dtype != TS_BF16 ? a->dtype : b->dtype));
    if (!d) return ts__fail(TS_ERR_NULL_POINTER, "d is NULL");
    TS__RETURN_IF_ERROR(ts_tensor_check(d, "d"));
    if (ex == EX_BMK_BNK_MN) return bmk_bnk_mn(a, b, d, c);
    if (ex == EX_BHD_BHR_HDR) {
        if (d->dtype != TS_F32)
            return ts__fail(TS_ERR_DTYPE, "d: dtype %s, %s writes f32 (as upstream)",
                            ts_dtype_name(d->dtype), expr);
    } else {
        if (d->dtype != TS_BF16)
            return ts__fail(TS_ERR_DTYPE, "d: dtype %s, %s writes bf16 (as upstream)",
                            ts_dtype_name(d->dtype), expr);
        if (c)
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "c: %s takes no c (as upstream)", expr);
    }
    return batched(ex, a, NULL, b, NULL, d, c, false, NULL);
}

TS_API ts_status ts_fp8_einsum(const char *expr, const ts_tensor *a, const ts_tensor *sfa,
                               const ts_tensor *b, const ts_tensor *sfb, ts_tensor *d,
                               const ts_tensor *c, const int64_t *recipe) {
    if (!expr) return ts__fail(TS_ERR_NULL_POINTER, "expr is NULL");
    const ex_kind ex = parse_expr(expr);
    if (ex == EX_NONE || ex == EX_BMK_BNK_MN)
        return ts__fail(TS_ERR_UNSUPPORTED,
                        "fp8_einsum: unsupported expression '%s' (upstream supports "
                        "bhr,hdr->bhd, bhd,hdr->bhr, bhd,bhr->hdr)", expr);
    TS__RETURN_IF_ERROR(need3(a, "a"));
    TS__RETURN_IF_ERROR(need3(b, "b"));
    TS__RETURN_IF_ERROR(need3(sfa, "sfa"));
    TS__RETURN_IF_ERROR(need3(sfb, "sfb"));
    if (a->dtype != TS_E4M3 || b->dtype != TS_E4M3)
        return ts__fail(TS_ERR_DTYPE, "%s: dtype %s, fp8_einsum takes e4m3 (as upstream)",
                        a->dtype != TS_E4M3 ? "a" : "b",
                        ts_dtype_name(a->dtype != TS_E4M3 ? a->dtype : b->dtype));
    if (!d) return ts__fail(TS_ERR_NULL_POINTER, "d is NULL");
    static const int64_t def_recipe[3] = {1, 128, 128};
    ts_gemm_recipe r;
    TS__RETURN_IF_ERROR(ts_gemm_resolve_recipe(recipe ? recipe : def_recipe, NULL, NULL,
                                               sfb->dtype, &r));
    return batched(ex, a, sfa, b, sfb, d, c, true, &r);
}
