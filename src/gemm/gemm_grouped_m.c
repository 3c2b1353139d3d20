/* M-grouped GEMMs (MoE forward): contiguous (m_indices or psum layout) and masked. Each group
 * segment becomes one dense NT problem on row views of A and D and the group's weight, and
 * all problems run as one batch (items over group x M blocks x N blocks): a row's bits are
 * those of the dense GEMM of that row against its group's weight. */
#include "gemm/gemm_grouped.h"
#include "tilestack/gemm.h"

#include <string.h>

typedef struct mg_call {
    bool bf16, nn;
    const ts_tensor *a, *sfa, *b, *sfb;
    ts_tensor *d;
    const int64_t *recipe, *recipe_a, *recipe_b;
    bool disable_ue8m0_cast;
    const ts_packed_weight *pw; /* in place of b, sfb */
} mg_call;

/* Validated weights: group 0 as an NT operand, and the byte steps to group g. */
typedef struct mg_weight {
    ts__gemm_operand b0;
    int64_t groups, step, sf_step;
} mg_weight;

static ts__gemm_operand weight_of(const mg_weight *w, int64_t g) {
    ts__gemm_operand o = w->b0;
    o.data = (const char *)o.data + g * w->step;
    if (o.sf) o.sf = (const char *)o.sf + g * w->sf_step;
    return o;
}

/* b [G, N, K] (nn: [G, K, N]) with sfb [G, ...] transposed alongside. */
static ts_status weight_operand(const mg_call *cl, const ts_gemm_recipe *r, mg_weight *w) {
    if (cl->pw) {
        (void)r;
        w->b0 = ts__gemm_packed_operand(cl->pw, 0);
        w->groups = cl->pw->groups;
        w->step = cl->pw->group_bytes;
        w->sf_step = 0;
        return TS_OK;
    }
    TS__RETURN_IF_ERROR(ts_tensor_check(cl->b, "b"));
    if (cl->b->ndim != 3)
        return ts__fail(TS_ERR_SHAPE, "b: expected 3 dims [G, %s], got %d",
                        cl->nn ? "K, N" : "N, K", (int)cl->b->ndim);
    ts_tensor b0 = ts__gemm_slice3(cl->b, 0);
    if (cl->nn) b0 = ts__gemm_transpose2(&b0);
    TS__RETURN_IF_ERROR(ts__gemm_make_operand(&b0, "b", cl->bf16, cl->nn, &w->b0));
    w->groups = cl->b->shape[0];
    w->step = cl->b->strides[0] * (int64_t)ts_dtype_size(cl->b->dtype);
    w->sf_step = 0;
    if (cl->bf16) return TS_OK;
    TS__RETURN_IF_ERROR(ts_tensor_check(cl->sfb, "sfb"));
    if (cl->sfb->ndim != 3)
        return ts__fail(TS_ERR_SHAPE, "sfb: expected 3 dims [G, ...], got %d", (int)cl->sfb->ndim);
    if (cl->sfb->shape[0] != w->groups)
        return ts__fail(TS_ERR_SHAPE, "sfb: %lld groups, b has %lld", (long long)cl->sfb->shape[0],
                        (long long)w->groups);
    ts_tensor s0 = ts__gemm_slice3(cl->sfb, 0);
    if (cl->nn) s0 = ts__gemm_transpose2(&s0);
    TS__RETURN_IF_ERROR(ts__gemm_attach_scales(&w->b0, &s0, "sfb", r->gran_mn_b, r->gran_k_b));
    w->sf_step = cl->sfb->strides[0] * 4;
    return TS_OK;
}

/* Recipe and the A checks common to both layouts; a0 is A (contiguous) or group 0 of A
 * (masked), sfa0 likewise. */
static ts_status operands(const mg_call *cl, const ts_tensor *a0, const ts_tensor *sfa0,
                          ts_gemm_recipe *r, ts__gemm_operand *oa, mg_weight *w) {
    memset(r, 0, sizeof *r);
    TS__RETURN_IF_ERROR(ts__gemm_make_operand(a0, "a", cl->bf16, false, oa));
    if (cl->pw) {
        TS__RETURN_IF_ERROR(ts__gemm_check_packed(cl->pw, "b"));
        if (!cl->pw->grouped)
            return ts__fail(TS_ERR_SHAPE, "b: packed from a 2-D weight; grouped GEMMs take one "
                                          "packed from [G, N, K]");
        if (cl->pw->scaled == cl->bf16)
            return ts__fail(TS_ERR_DTYPE, "b: packed %s weight, this call takes %s",
                            ts_dtype_name(cl->pw->dtype), cl->bf16 ? "bf16" : "e4m3 or e2m1x2");
    }
    if (!cl->bf16) {
        if (!cl->sfa) return ts__fail(TS_ERR_NULL_POINTER, "sfa is NULL");
        if (cl->pw) {
            TS__RETURN_IF_ERROR(
                ts__gemm_packed_recipe(cl->pw, cl->recipe, cl->recipe_a, cl->recipe_b, r));
        } else {
            if (!cl->sfb) return ts__fail(TS_ERR_NULL_POINTER, "sfb is NULL");
            TS__RETURN_IF_ERROR(ts_gemm_resolve_recipe(cl->recipe, cl->recipe_a, cl->recipe_b,
                                                       cl->sfb->dtype, r));
        }
        if (r->gran_mn_a != 1)
            return ts__fail(TS_ERR_INVALID_ARGUMENT,
                            "recipe: grouped GEMMs take per-token A scales (gran_mn 1), got %lld",
                            (long long)r->gran_mn_a);
    }
    TS__RETURN_IF_ERROR(weight_operand(cl, r, w));
    if (w->b0.k != oa->k)
        return ts__fail(TS_ERR_SHAPE, "b: K = %lld does not match a's K = %lld",
                        (long long)w->b0.k, (long long)oa->k);
    if (!cl->bf16) TS__RETURN_IF_ERROR(ts__gemm_attach_scales(oa, sfa0, "sfa", 1, r->gran_k_a));
    return TS_OK;
}

static ts_status check_sfb_pow2(const mg_call *cl) {
    if (!cl->pw) return ts__gemm_check_pow2_scales3(cl->sfb, "sfb");
    if (cl->pw->sf_pow2) return TS_OK;
    return ts__fail(TS_ERR_INVALID_ARGUMENT,
                    "b: the packed weight's f32 scales are not all positive powers of two, "
                    "which the ue8m0 cast needs (pass disable_ue8m0_cast to use them as given)");
}

static ts_status check_scale_values(const mg_call *cl, const ts__gemm_operand *oa,
                                    const ts__gemm_operand *ob, const ts_tensor *sfa0) {
    if (cl->bf16 || cl->disable_ue8m0_cast || !ts__gemm_needs_ue8m0_cast(oa, ob)) return TS_OK;
    if (!oa->sf_packed) TS__RETURN_IF_ERROR(ts__gemm_check_pow2_scales(sfa0, "sfa"));
    if (!ob->sf_packed) TS__RETURN_IF_ERROR(check_sfb_pow2(cl));
    return TS_OK;
}

static void set_output(ts__gemm_problem *p, const ts_tensor *d, void *base, int64_t r0) {
    p->d = (char *)base + r0 * d->strides[0] * (int64_t)ts_dtype_size(d->dtype);
    p->ld_d = d->strides[d->ndim - 2];
    p->c = NULL;
    p->ld_c = 0;
}

/* ---------------------------------------------------------------- contiguous */

/* m_indices: per alignment block, the first row's id decides (upstream's kernel reads one id
 * per BLOCK_M = alignment tile): -1 skips the block, a group computes the whole block. Every
 * other row of the block must hold that id or -1 (a group segment that starts inside a
 * block would be computed with the wrong weight). Consecutive blocks of one group merge. */
static ts_status parse_m_indices(const int32_t *idx, int64_t m, int64_t groups, int64_t al,
                                 ts__gemm_problem *probs, int64_t *nprob, int64_t *first_row,
                                 int64_t *group_of) {
    int64_t n = 0;
    for (int64_t r0 = 0; r0 < m; r0 += al) {
        const int64_t r1 = ts__min64(m, r0 + al);
        const int32_t gid = idx[r0];
        for (int64_t r = r0; r < r1; r++) {
            if (idx[r] < -1 || idx[r] >= groups)
                return ts__fail(TS_ERR_INVALID_ARGUMENT,
                                "grouped_layout[%lld] = %d: group ids are -1 (padding) or in "
                                "[0, G = %lld)",
                                (long long)r, (int)idx[r], (long long)groups);
            if (idx[r] != gid && idx[r] != -1)
                return ts__fail(TS_ERR_INVALID_ARGUMENT,
                                "grouped_layout[%lld] = %d but the block of %lld rows starting "
                                "at row %lld belongs to %d: group segments must start on a "
                                "multiple of the mk alignment (rows in a block hold one id or -1)",
                                (long long)r, (int)idx[r], (long long)al, (long long)r0, (int)gid);
        }
        if (gid < 0) continue;
        if (n > 0 && group_of[n - 1] == gid && first_row[n - 1] + probs[n - 1].m == r0) {
            probs[n - 1].m += r1 - r0;
        } else {
            first_row[n] = r0;
            group_of[n] = gid;
            probs[n].m = r1 - r0;
            n++;
        }
    }
    *nprob = n;
    return TS_OK;
}

/* psum: group g = rows [align(end[g-1]), end[g]) with end[-1] = 0. An end equal to the
 * previous one is an empty group; one strictly inside the previous group's padding, one that
 * goes back, or one past M_sum is a misaligned layout. */
static ts_status parse_psum(const int32_t *ends, int64_t m, int64_t groups, int64_t al,
                            ts__gemm_problem *probs, int64_t *nprob, int64_t *first_row,
                            int64_t *group_of) {
    int64_t n = 0, prev = 0;
    for (int64_t g = 0; g < groups; g++) {
        const int64_t end = ends[g], start = ts__align(prev, al);
        if (end > m)
            return ts__fail(TS_ERR_INVALID_ARGUMENT,
                            "grouped_layout[%lld] = %lld: psum end past M_sum = %lld",
                            (long long)g, (long long)end, (long long)m);
        if (end < prev || (end > prev && end < start))
            return ts__fail(TS_ERR_INVALID_ARGUMENT,
                            "grouped_layout[%lld] = %lld: psum ends must not decrease and a group "
                            "starts at align(previous end %lld, %lld) = %lld",
                            (long long)g, (long long)end, (long long)prev, (long long)al,
                            (long long)start);
        if (end > start) {
            first_row[n] = start;
            group_of[n] = g;
            probs[n].m = end - start;
            n++;
        }
        prev = end;
    }
    *nprob = n;
    return TS_OK;
}

static ts_status m_grouped_contiguous(const mg_call *cl, const ts_tensor *layout, bool psum,
                                      bool zero_padding) {
    ts_gemm_recipe r;
    ts__gemm_operand oa;
    mg_weight w;
    TS__RETURN_IF_ERROR(operands(cl, cl->a, cl->sfa, &r, &oa, &w));
    if (!oa.k_major)
        return ts__fail(TS_ERR_STRIDE, "a: must be K-major (stride %lld along K), as upstream",
                        (long long)cl->a->strides[1]);
    const int64_t m = oa.mn, n = w.b0.mn, groups = w.groups;
    const int64_t dshape[2] = {m, n};
    TS__RETURN_IF_ERROR(ts__gemm_check_grouped_out(cl->d, "d", 2, dshape));
    const int32_t *lay = NULL;
    if (!layout) return ts__fail(TS_ERR_NULL_POINTER, "grouped_layout is NULL");
    TS__RETURN_IF_ERROR(ts__gemm_check_i32_vector(layout, "grouped_layout", psum ? groups : m, &lay));
    const ts_tensor *ins[5] = {cl->a, cl->sfa, cl->b, cl->sfb, layout};
    const char *names[5] = {"a", "sfa", "b", "sfb", "grouped_layout"};
    TS__RETURN_IF_ERROR(ts__gemm_check_no_overlap(cl->d, ins, names, 5));
    TS__RETURN_IF_ERROR(check_scale_values(cl, &oa, &w.b0, cl->sfa));

    const int64_t al = ts__gemm_mk_alignment();
    const int64_t cap = psum ? groups : ts__ceil_div(m, al);
    const size_t bytes = (size_t)cap * (sizeof(ts__gemm_problem) + 2 * sizeof(int64_t)) + 64;
    ts__gemm_problem *probs = (ts__gemm_problem *)ts__scratch(0, bytes);
    if (!probs) return ts__fail(TS_ERR_OUT_OF_MEMORY, "m-grouped gemm: %zu bytes", bytes);
    int64_t *first_row = (int64_t *)(probs + cap), *group_of = first_row + cap;
    int64_t np = 0;
    if (psum)
        TS__RETURN_IF_ERROR(parse_psum(lay, m, groups, al, probs, &np, first_row, group_of));
    else
        TS__RETURN_IF_ERROR(parse_m_indices(lay, m, groups, al, probs, &np, first_row, group_of));

    /* Validated: from here on, writes. */
    const size_t es = ts_dtype_size(cl->d->dtype);
    if (psum && zero_padding) {
        int64_t prev = 0;
        for (int64_t g = 0; g < groups; g++) {
            const int64_t end = lay[g], gap_end = ts__min64(m, ts__align(end, al));
            for (int64_t row = ts__max64(end, prev); row < gap_end; row++)
                memset((char *)cl->d->data + row * cl->d->strides[0] * (int64_t)es, 0,
                       (size_t)n * es);
            prev = ts__max64(prev, gap_end);
        }
    }
    for (int64_t i = 0; i < np; i++) {
        ts__gemm_problem *p = &probs[i];
        const int64_t rows = p->m, r0 = first_row[i];
        ts__gemm_operand b = weight_of(&w, group_of[i]);
        memset(p, 0, sizeof *p);
        p->a = ts__gemm_operand_rows(&oa, r0, rows);
        p->b = b;
        p->m = rows;
        p->n = n;
        p->k = oa.k;
        set_output(p, cl->d, cl->d->data, r0);
    }
    return ts__gemm_run_batch(probs, np, n, cl->d->dtype, !cl->bf16,
                              cl->bf16 ? 0 : ts__min64(r.gran_k_a, r.gran_k_b));
}

/* ---------------------------------------------------------------- masked */

static ts_status m_grouped_masked(const mg_call *cl, const ts_tensor *masked_m, int64_t expected_m) {
    TS__RETURN_IF_ERROR(ts_tensor_check(cl->a, "a"));
    if (cl->a->ndim != 3)
        return ts__fail(TS_ERR_SHAPE, "a: expected 3 dims [G, M_max, K], got %d", (int)cl->a->ndim);
    ts_tensor a0 = ts__gemm_slice3(cl->a, 0), sfa0;
    memset(&sfa0, 0, sizeof sfa0);
    if (!cl->bf16) {
        TS__RETURN_IF_ERROR(ts_tensor_check(cl->sfa, "sfa"));
        if (cl->sfa->ndim != 3)
            return ts__fail(TS_ERR_SHAPE, "sfa: expected 3 dims [G, ...], got %d",
                            (int)cl->sfa->ndim);
        sfa0 = ts__gemm_slice3(cl->sfa, 0);
    }
    ts_gemm_recipe r;
    ts__gemm_operand oa;
    mg_weight w;
    TS__RETURN_IF_ERROR(operands(cl, &a0, &sfa0, &r, &oa, &w));
    const int64_t groups = w.groups, m_max = oa.mn, n = w.b0.mn;
    if (cl->a->shape[0] != groups)
        return ts__fail(TS_ERR_SHAPE, "a: %lld groups, b has %lld", (long long)cl->a->shape[0],
                        (long long)groups);
    if (!cl->bf16 && cl->sfa->shape[0] != groups)
        return ts__fail(TS_ERR_SHAPE, "sfa: %lld groups, b has %lld",
                        (long long)cl->sfa->shape[0], (long long)groups);
    const int64_t dshape[3] = {groups, m_max, n};
    TS__RETURN_IF_ERROR(ts__gemm_check_grouped_out(cl->d, "d", 3, dshape));
    if (!masked_m) return ts__fail(TS_ERR_NULL_POINTER, "masked_m is NULL");
    const int32_t *mm = NULL;
    TS__RETURN_IF_ERROR(ts__gemm_check_i32_vector(masked_m, "masked_m", groups, &mm));
    if (expected_m <= 0)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "expected_m: %lld, must be > 0 (as upstream)",
                        (long long)expected_m);
    for (int64_t g = 0; g < groups; g++)
        if (mm[g] < 0 || mm[g] > m_max)
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "masked_m[%lld] = %d outside [0, M_max = %lld]",
                            (long long)g, (int)mm[g], (long long)m_max);
    const ts_tensor *ins[5] = {cl->a, cl->sfa, cl->b, cl->sfb, masked_m};
    const char *names[5] = {"a", "sfa", "b", "sfb", "masked_m"};
    TS__RETURN_IF_ERROR(ts__gemm_check_no_overlap(cl->d, ins, names, 5));
    if (!cl->bf16 && !cl->disable_ue8m0_cast && ts__gemm_needs_ue8m0_cast(&oa, &w.b0)) {
        if (!oa.sf_packed) TS__RETURN_IF_ERROR(ts__gemm_check_pow2_scales3(cl->sfa, "sfa"));
        if (!w.b0.sf_packed) TS__RETURN_IF_ERROR(check_sfb_pow2(cl));
    }

    const size_t bytes = (size_t)groups * sizeof(ts__gemm_problem) + 64;
    ts__gemm_problem *probs = (ts__gemm_problem *)ts__scratch(0, bytes);
    if (!probs) return ts__fail(TS_ERR_OUT_OF_MEMORY, "m-grouped gemm: %zu bytes", bytes);
    const int64_t a_step = cl->a->strides[0] * (int64_t)ts_dtype_size(cl->a->dtype);
    const int64_t sfa_step = cl->bf16 ? 0 : cl->sfa->strides[0] * 4;
    const size_t es = ts_dtype_size(cl->d->dtype);
    int64_t np = 0;
    for (int64_t g = 0; g < groups; g++) {
        if (mm[g] == 0) continue;
        ts__gemm_problem *p = &probs[np++];
        memset(p, 0, sizeof *p);
        p->a = oa;
        p->a.data = (const char *)oa.data + g * a_step;
        if (oa.sf) p->a.sf = (const char *)oa.sf + g * sfa_step;
        p->a.mn = mm[g];
        p->b = weight_of(&w, g);
        p->m = mm[g];
        p->n = n;
        p->k = oa.k;
        set_output(p, cl->d, (char *)cl->d->data + g * cl->d->strides[0] * (int64_t)es, 0);
    }
    return ts__gemm_run_batch(probs, np, n, cl->d->dtype, !cl->bf16,
                              cl->bf16 ? 0 : ts__min64(r.gran_k_a, r.gran_k_b));
}

/* ---------------------------------------------------------------- entry points */

#define FP8_CONTIG_ARGS                                                                       \
    const ts_tensor *a, const ts_tensor *sfa, const ts_tensor *b, const ts_tensor *sfb,       \
        ts_tensor *d, const ts_tensor *grouped_layout, const int64_t *recipe,                 \
        const int64_t *recipe_a, const int64_t *recipe_b, const char *compiled_dims,          \
        bool disable_ue8m0_cast, bool use_psum_layout, bool ensure_zero_padding

static ts_status fp8_contig(FP8_CONTIG_ARGS, bool nn) {
    (void)compiled_dims;
    mg_call cl = {false, nn, a, sfa, b, sfb, d, recipe, recipe_a, recipe_b, disable_ue8m0_cast, NULL};
    return m_grouped_contiguous(&cl, grouped_layout, use_psum_layout, ensure_zero_padding);
}

#define FP8_CONTIG_PASS                                                                     \
    a, sfa, b, sfb, d, grouped_layout, recipe, recipe_a, recipe_b, compiled_dims,           \
        disable_ue8m0_cast, use_psum_layout, ensure_zero_padding

ts_status ts_m_grouped_fp8_fp4_gemm_nt_contiguous(FP8_CONTIG_ARGS, int64_t expected_m_for_psum_layout) {
    (void)expected_m_for_psum_layout;
    return fp8_contig(FP8_CONTIG_PASS, false);
}
ts_status ts_m_grouped_fp8_fp4_gemm_nn_contiguous(FP8_CONTIG_ARGS) {
    return fp8_contig(FP8_CONTIG_PASS, true);
}
ts_status ts_m_grouped_fp8_gemm_nt_contiguous(FP8_CONTIG_ARGS, int64_t expected_m_for_psum_layout) {
    (void)expected_m_for_psum_layout;
    return fp8_contig(FP8_CONTIG_PASS, false);
}
ts_status ts_m_grouped_fp8_gemm_nn_contiguous(FP8_CONTIG_ARGS) {
    return fp8_contig(FP8_CONTIG_PASS, true);
}

ts_status ts_m_grouped_bf16_gemm_nt_contiguous(const ts_tensor *a, const ts_tensor *b,
                                               ts_tensor *d, const ts_tensor *grouped_layout,
                                               const char *compiled_dims, bool use_psum_layout,
                                               bool ensure_zero_padding,
                                               int64_t expected_m_for_psum_layout) {
    (void)compiled_dims, (void)expected_m_for_psum_layout;
    mg_call cl = {true, false, a, NULL, b, NULL, d, NULL, NULL, NULL, false, NULL};
    return m_grouped_contiguous(&cl, grouped_layout, use_psum_layout, ensure_zero_padding);
}
ts_status ts_m_grouped_bf16_gemm_nn_contiguous(const ts_tensor *a, const ts_tensor *b,
                                               ts_tensor *d, const ts_tensor *grouped_layout,
                                               const char *compiled_dims, bool use_psum_layout,
                                               bool ensure_zero_padding,
                                               int64_t expected_m_for_psum_layout) {
    (void)compiled_dims, (void)expected_m_for_psum_layout;
    mg_call cl = {true, true, a, NULL, b, NULL, d, NULL, NULL, NULL, false, NULL};
    return m_grouped_contiguous(&cl, grouped_layout, use_psum_layout, ensure_zero_padding);
}

#define FP8_MASKED_ARGS                                                                       \
    const ts_tensor *a, const ts_tensor *sfa, const ts_tensor *b, const ts_tensor *sfb,       \
        ts_tensor *d, const ts_tensor *masked_m, int64_t expected_m, const int64_t *recipe,   \
        const int64_t *recipe_a, const int64_t *recipe_b, const char *compiled_dims,          \
        bool disable_ue8m0_cast

static ts_status fp8_masked(FP8_MASKED_ARGS) {
    (void)compiled_dims;
    mg_call cl = {false, false, a, sfa, b, sfb, d, recipe, recipe_a, recipe_b, disable_ue8m0_cast, NULL};
    return m_grouped_masked(&cl, masked_m, expected_m);
}

#define FP8_MASKED_PASS                                                                     \
    a, sfa, b, sfb, d, masked_m, expected_m, recipe, recipe_a, recipe_b, compiled_dims,     \
        disable_ue8m0_cast

ts_status ts_m_grouped_fp8_fp4_gemm_nt_masked(FP8_MASKED_ARGS) { return fp8_masked(FP8_MASKED_PASS); }
ts_status ts_m_grouped_fp8_gemm_nt_masked(FP8_MASKED_ARGS) { return fp8_masked(FP8_MASKED_PASS); }
ts_status ts_fp8_m_grouped_gemm_nt_masked(FP8_MASKED_ARGS) { return fp8_masked(FP8_MASKED_PASS); }

ts_status ts_m_grouped_bf16_gemm_nt_masked(const ts_tensor *a, const ts_tensor *b, ts_tensor *d,
                                           const ts_tensor *masked_m, int64_t expected_m,
                                           const char *compiled_dims) {
    (void)compiled_dims;
    mg_call cl = {true, false, a, NULL, b, NULL, d, NULL, NULL, NULL, false, NULL};
    return m_grouped_masked(&cl, masked_m, expected_m);
}
ts_status ts_bf16_m_grouped_gemm_nt_masked(const ts_tensor *a, const ts_tensor *b, ts_tensor *d,
                                           const ts_tensor *masked_m, int64_t expected_m,
                                           const char *compiled_dims) {
    return ts_m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m, compiled_dims);
}

/* ---------------------------------------------------------------- packed weights */

ts_status ts_m_grouped_fp8_fp4_gemm_contiguous_packed(
    const ts_tensor *a, const ts_tensor *sfa, const ts_packed_weight *b, ts_tensor *d,
    const ts_tensor *grouped_layout, const int64_t *recipe, const int64_t *recipe_a,
    const int64_t *recipe_b, const char *compiled_dims, bool disable_ue8m0_cast,
    bool use_psum_layout, bool ensure_zero_padding) {
    (void)compiled_dims;
    mg_call cl = {false, false, a, sfa, NULL, NULL, d, recipe, recipe_a, recipe_b,
                  disable_ue8m0_cast, b};
    if (!b) return ts__fail(TS_ERR_NULL_POINTER, "b is NULL");
    return m_grouped_contiguous(&cl, grouped_layout, use_psum_layout, ensure_zero_padding);
}

ts_status ts_m_grouped_bf16_gemm_contiguous_packed(const ts_tensor *a, const ts_packed_weight *b,
                                                   ts_tensor *d, const ts_tensor *grouped_layout,
                                                   const char *compiled_dims,
                                                   bool use_psum_layout,
                                                   bool ensure_zero_padding) {
    (void)compiled_dims;
    mg_call cl = {true, false, a, NULL, NULL, NULL, d, NULL, NULL, NULL, false, b};
    if (!b) return ts__fail(TS_ERR_NULL_POINTER, "b is NULL");
    return m_grouped_contiguous(&cl, grouped_layout, use_psum_layout, ensure_zero_padding);
}

ts_status ts_m_grouped_fp8_fp4_gemm_masked_packed(
    const ts_tensor *a, const ts_tensor *sfa, const ts_packed_weight *b, ts_tensor *d,
    const ts_tensor *masked_m, int64_t expected_m, const int64_t *recipe,
    const int64_t *recipe_a, const int64_t *recipe_b, const char *compiled_dims,
    bool disable_ue8m0_cast) {
    (void)compiled_dims;
    mg_call cl = {false, false, a, sfa, NULL, NULL, d, recipe, recipe_a, recipe_b,
                  disable_ue8m0_cast, b};
    if (!b) return ts__fail(TS_ERR_NULL_POINTER, "b is NULL");
    return m_grouped_masked(&cl, masked_m, expected_m);
}

ts_status ts_m_grouped_bf16_gemm_masked_packed(const ts_tensor *a, const ts_packed_weight *b,
                                               ts_tensor *d, const ts_tensor *masked_m,
                                               int64_t expected_m, const char *compiled_dims) {
    (void)compiled_dims;
    mg_call cl = {true, false, a, NULL, NULL, NULL, d, NULL, NULL, NULL, false, b};
    if (!b) return ts__fail(TS_ERR_NULL_POINTER, "b is NULL");
    return m_grouped_masked(&cl, masked_m, expected_m);
}
