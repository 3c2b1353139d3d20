/* fp8_gemm_nt_skip_head_mid: an FP8 NT GEMM whose output columns are spread into a wider D.
 *
 * Upstream's epilogue maps compact column n to n + (n + right) / (left + right) * mid, so each
 * head's left columns, then a gap of mid columns that is never stored, then its right columns.
 * Here each head half is one NT problem on a row view of B and a column view of D, all run
 * as batches of the dense driver: every written element has the bits of the plain
 * ts_fp8_gemm_nt at that compact column, and the gap is never touched. */
#include "gemm/gemm_grouped.h"
#include "gemm/gemm_internal.h"
#include "tilestack/gemm.h"

#include <string.h>

/* Row view [r0, r0 + rows) of B; r0 is on a scale-block boundary. */
static ts__gemm_operand b_rows(const ts__gemm_operand *op, int64_t r0, int64_t rows) {
    ts__gemm_operand o = *op;
    o.data = (const char *)op->data + r0 * op->s_mn * (int64_t)ts_dtype_size(op->dtype);
    o.sf = (const char *)op->sf + (r0 / op->gran_mn) * op->sf_s_mn * 4;
    o.mn = rows;
    return o;
}

TS_API ts_status ts_fp8_gemm_nt_skip_head_mid(const ts_tensor *a, const ts_tensor *sfa,
                                              const ts_tensor *b, const ts_tensor *sfb,
                                              ts_tensor *d, const int64_t *head_splits,
                                              const int64_t *recipe, const char *compiled_dims,
                                              bool disable_ue8m0_cast) {
    (void)compiled_dims;
    if (!head_splits) return ts__fail(TS_ERR_NULL_POINTER, "head_splits is NULL");
    const int64_t left = head_splits[0], mid = head_splits[1], right = head_splits[2];
    if (left <= 0 || right <= 0 || mid < 0)
        return ts__fail(TS_ERR_INVALID_ARGUMENT,
                        "head_splits (%lld, %lld, %lld): left and right must be > 0, mid >= 0",
                        (long long)left, (long long)mid, (long long)right);
    TS__RETURN_IF_ERROR(ts_tensor_check(a, "a"));
    TS__RETURN_IF_ERROR(ts_tensor_check(b, "b"));
    if (a->ndim == 2 && a->dtype != TS_E4M3)
        return ts__fail(TS_ERR_DTYPE, "a: dtype %s, expected e4m3 (as upstream)",
                        ts_dtype_name(a->dtype));
    if (b->ndim == 2 && b->dtype != TS_E4M3)
        return ts__fail(TS_ERR_DTYPE, "b: dtype %s, expected e4m3 (as upstream)",
                        ts_dtype_name(b->dtype));
    ts__gemm_operand oa, ob;
    TS__RETURN_IF_ERROR(ts__gemm_make_operand(a, "a", false, false, &oa));
    TS__RETURN_IF_ERROR(ts__gemm_make_operand(b, "b", false, false, &ob));
    if (!sfa) return ts__fail(TS_ERR_NULL_POINTER, "sfa is NULL");
    if (!sfb) return ts__fail(TS_ERR_NULL_POINTER, "sfb is NULL");
    TS__RETURN_IF_ERROR(ts_tensor_check(sfb, "sfb"));
    ts_gemm_recipe r;
    TS__RETURN_IF_ERROR(ts_gemm_resolve_recipe(recipe, NULL, NULL, sfb->dtype, &r));
    if (r.gran_k_a != 128 || r.gran_k_b != 128)
        return ts__fail(TS_ERR_INVALID_ARGUMENT,
                        "recipe: gran_k (%lld, %lld), skip_head_mid needs 128 for both (as "
                        "upstream)", (long long)r.gran_k_a, (long long)r.gran_k_b);
    TS__RETURN_IF_ERROR(ts__gemm_attach_scales(&oa, sfa, "sfa", r.gran_mn_a, r.gran_k_a));
    TS__RETURN_IF_ERROR(ts__gemm_attach_scales(&ob, sfb, "sfb", r.gran_mn_b, r.gran_k_b));
    const int64_t m = oa.mn, k = oa.k, n = ob.mn;
    if (ob.k != k)
        return ts__fail(TS_ERR_SHAPE, "b: K = %lld, a has K = %lld", (long long)ob.k,
                        (long long)k);
    if (n <= 0 || k <= 0)
        return ts__fail(TS_ERR_SHAPE, "N = %lld, K = %lld: both must be > 0 (as upstream)",
                        (long long)n, (long long)k);
    const int64_t head = left + right;
    if (n % head != 0)
        return ts__fail(TS_ERR_SHAPE, "b: N = %lld is not a multiple of left + right = %lld",
                        (long long)n, (long long)head);
    const int64_t heads = n / head, wide = n + heads * mid;
    const int64_t dshape[2] = {m, wide};
    TS__RETURN_IF_ERROR(ts__gemm_check_grouped_out(d, "d", 2, dshape));
    const ts_tensor *ins[4] = {a, sfa, b, sfb};
    const char *names[4] = {"a", "sfa", "b", "sfb"};
    TS__RETURN_IF_ERROR(ts__gemm_check_no_overlap(d, ins, names, 4));
    if (!disable_ue8m0_cast && ts__gemm_needs_ue8m0_cast(&oa, &ob)) {
        if (!oa.sf_packed) TS__RETURN_IF_ERROR(ts__gemm_check_pow2_scales(sfa, "sfa"));
        if (!ob.sf_packed) TS__RETURN_IF_ERROR(ts__gemm_check_pow2_scales(sfb, "sfb"));
    }
    if (m == 0) return TS_OK;

    /* A head half that starts inside a B scale block (gran_mn 128 with left or right not a
     * multiple of it) cannot be a row view of the block scales, so B's f32 scales are then
     * expanded to one per row: the same values, hence the same bits. */
    const bool expand = ob.gran_mn > 1 && (left % ob.gran_mn != 0 || right % ob.gran_mn != 0);
    const int64_t nkb = ts__ceil_div(k, ob.gran_k);
    size_t bytes = (size_t)(2 * heads) * sizeof(ts__gemm_problem) + 64;
    if (expand) bytes += (size_t)n * (size_t)nkb * 4 + 64;
    ts__gemm_problem *probs = (ts__gemm_problem *)ts__scratch(0, bytes);
    if (!probs) return ts__fail(TS_ERR_OUT_OF_MEMORY, "skip_head_mid: %zu bytes", bytes);
    if (expand) {
        float *rs = (float *)(((uintptr_t)(probs + 2 * heads) + 63) & ~(uintptr_t)63);
        const float *src = (const float *)ob.sf;
        for (int64_t r = 0; r < n; r++)
            for (int64_t j = 0; j < nkb; j++)
                rs[r * nkb + j] = src[(r / ob.gran_mn) * ob.sf_s_mn + j * ob.sf_s_k];
        ob.sf = rs;
        ob.sf_s_mn = nkb;
        ob.sf_s_k = 1;
        ob.gran_mn = 1;
    }
    const size_t es = ts_dtype_size(d->dtype);
    for (int64_t h = 0; h < 2 * heads; h++) {
        const bool is_right = h >= heads;
        const int64_t hh = is_right ? h - heads : h;
        const int64_t r0 = hh * head + (is_right ? left : 0);
        const int64_t c0 = hh * (head + mid) + (is_right ? left + mid : 0);
        ts__gemm_problem *p = &probs[h];
        memset(p, 0, sizeof *p);
        p->a = oa;
        p->b = b_rows(&ob, r0, is_right ? right : left);
        p->m = m;
        p->n = is_right ? right : left;
        p->k = k;
        p->d = (char *)d->data + c0 * (int64_t)es;
        p->ld_d = d->strides[0];
    }
    const int64_t g = 128;
    if (left == right) return ts__gemm_run_batch(probs, 2 * heads, left, d->dtype, true, g);
    TS__RETURN_IF_ERROR(ts__gemm_run_batch(probs, heads, left, d->dtype, true, g));
    return ts__gemm_run_batch(probs + heads, heads, right, d->dtype, true, g);
}
