/* Mega MoE, the unfused path (ts_mega_moe_unfused): the same math as the fused call from
 * tilestack's public parts, each step a whole-batch call, as DeepGEMM's test baseline
 * (DeepEP dispatch, m_grouped_fp8_fp4_gemm_nt_contiguous with the psum layout, the TileLang
 * swiglu_apply_weight_to_fp8, the L2 GEMM, DeepEP combine):
 *   ts_ep_get_dispatch_layout + ts_ep_dispatch (FP8 rows with their packed scales)
 *   expansion: one row per (received row, local slot), grouped by local expert, psum layout
 *   ts_m_grouped_*_contiguous_packed (L1) -> SwiGLU + cast -> ts_m_grouped_* (L2)
 *   ts_ep_combine of rows K * hidden wide, slot k's output in columns [kH, (k+1)H): every
 *   column block has one non-zero term across ranks, so the cross-rank sum is exact, and the
 *   top-k sum happens here in top-k order, as the fused combine does.
 * tilestack's normal combine is unweighted and sums by rank (DeepEP V1); the wide rows keep the
 * top-k order of upstream's V2 expanded combine without a new EP primitive. */
#include "ep/mega_moe_internal.h"

#include <stdlib.h>
#include <string.h>

static const char *const U = "ts_mega_moe_unfused";

static void *u_scratch(ts_mega_moe_buffer *b, size_t bytes) {
    if (b->u_scr_bytes < bytes) {
        free(b->u_scr);
        b->u_scr = aligned_alloc(64, (size_t)ts__align((int64_t)bytes, 64));
        b->u_scr_bytes = b->u_scr ? bytes : 0;
    }
    return b->u_scr;
}

typedef struct sum_ctx {
    const ts_mega_moe_buffer *b;
    const int64_t *idx;
    const uint16_t *comb;
    ts_tensor *y;
} sum_ctx;

static void sum_task(void *v, int64_t begin, int64_t end, int tid) {
    (void)tid;
    const sum_ctx *c = (const sum_ctx *)v;
    const int64_t K = c->b->K, H = c->b->H;
    const uint16_t *rows[64];
    for (int64_t t = begin; t < end; t++) {
        int n = 0;
        for (int64_t k = 0; k < K; k++)
            if (c->idx[t * K + k] >= 0) rows[n++] = c->comb + (t * K + k) * H;
        ts__mega_moe_sum_rows(rows, n, H, (uint16_t *)c->y->data + t * c->y->strides[0]);
    }
}

ts_status ts_mega_moe_unfused(ts_tensor *y, const ts_mega_moe_weights *w, ts_mega_moe_buffer *b, ts_tensor *stats,
                              float clamp, bool fast_math) {
    (void)fast_math;
    if (!b) return ts__fail(TS_ERR_NULL_POINTER, "%s: buf is NULL", U);
    const double t_start = ts__mega_moe_now();
    double t0 = t_start, t1;
    double *pf = b->prof_u;
    memset(pf, 0, sizeof b->prof_u);
#define LAP(i) (t1 = ts__mega_moe_now(), pf[i] += t1 - t0, t0 = t1)
    TS__RETURN_IF_ERROR(ts__ep_check_usable(b->ep_unf, U));
    const int64_t H = b->H, I = b->I, K = b->K, El = b->El, R = b->R;
    const bool bf = b->bf16;
    ts_status st = ts__mega_moe_check(b, y, w, stats, clamp, bf, U);
    const int64_t n = st == TS_OK ? y->shape[0] : 0;
    uint8_t *base = ts__mm_base(b, b->rank);
    ts_tensor x = ts_tensor_2d(base + b->off_x, bf ? TS_BF16 : TS_E4M3, n, H);
    ts_tensor xs = ts_tensor_2d(base + b->off_xsf, TS_I32, n, H / 128);
    ts_tensor idx = ts_tensor_2d(base + b->off_idx, TS_I64, n, K);
    ts_tensor tw = ts_tensor_2d(base + b->off_w, TS_F32, n, K);
    ts_tensor tpr = ts_tensor_1d(b->u_tpr, TS_I32, R), tpe = ts_tensor_1d(b->u_tpe, TS_I32, b->E);
    ts_tensor inr = ts_tensor_2d(b->u_in_rank, TS_BOOL, n, R);
    if (st == TS_OK) st = ts_ep_get_dispatch_layout(b->ep_unf, &idx, b->E, &tpr, NULL, &tpe, &inr);
    ts_ep_dispatch_result res;
    if (st != TS_OK) {
        /* take part in the collective with no arguments: the peers return TS_ERR_PEER */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", ts_last_error());
        ts_ep_dispatch(b->ep_unf, NULL, &res, NULL);
        ts__fail(st, "%s", msg);
        return st;
    }
    ts_ep_dispatch_args a;
    memset(&a, 0, sizeof a);
    a.x = &x;
    a.x_scales = bf ? NULL : &xs;
    a.topk_idx = &idx;
    a.topk_weights = &tw;
    a.num_tokens_per_rank = &tpr;
    a.num_tokens_per_expert = &tpe;
    a.is_token_in_rank = &inr;
    a.expert_alignment = 1;
    ts_ep_handle *h = NULL;
    TS__RETURN_IF_ERROR(ts_ep_dispatch(b->ep_unf, &a, &res, &h));
    LAP(1);

    /* expansion into the psum layout */
    const int64_t rows = res.num_recv_tokens, A = ts_get_mk_alignment_for_contiguous_layout();
    const int64_t *ridx = (const int64_t *)res.recv_topk_idx.data;
    const float *rw = (const float *)res.recv_topk_weights.data;
    int64_t *cnt = b->recv_total, *start = b->orow;
    memset(cnt, 0, (size_t)El * sizeof *cnt);
    for (int64_t i = 0; i < rows * K; i++)
        if (ridx[i] >= 0) cnt[ridx[i]]++;
    int64_t end = 0;
    for (int64_t e = 0; e < El; e++) {
        start[e] = ts__align(end, A);
        end = start[e] + cnt[e];
    }
    const int64_t M = end, xsb = b->x_row_bytes, a2b = bf ? 2 : 1;
    size_t o = 0;
    const size_t o_a = o;
    o += (size_t)ts__align(M * xsb, 64);
    const size_t o_sfa = o;
    o += (size_t)ts__align(M * (H / 128) * 4, 64);
    const size_t o_w = o;
    o += (size_t)ts__align(M * 4, 64);
    const size_t o_map = o;
    o += (size_t)ts__align(M * 8, 64);
    const size_t o_d1 = o;
    o += (size_t)ts__align(M * 2 * I * 2, 64);
    const size_t o_a2 = o;
    o += (size_t)ts__align(M * I * a2b, 64);
    const size_t o_sf2 = o;
    o += (size_t)ts__align(M * (I / 128) * 4, 64);
    const size_t o_d2 = o;
    o += (size_t)ts__align(M * H * 2, 64);
    const size_t o_end = o;
    o += (size_t)ts__align(El * 4, 64);
    const size_t o_cur = o;
    o += (size_t)ts__align(El * 8, 64);
    const size_t o_comb = o;
    o += (size_t)ts__align(n * K * H * 2, 64) + 64;
    uint8_t *s = u_scratch(b, o);
    ts_status est = s ? TS_OK : ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: out of memory (%zu bytes)", U, o);
    ts_tensor cb;
    if (est == TS_OK) est = ts_ep_get_combine_buffer(b->ep_unf, h, K * H, &cb);
    if (est == TS_OK && M > 0) {
        uint8_t *ax = s + o_a;
        int32_t *sfa = (int32_t *)(void *)(s + o_sfa), *ends = (int32_t *)(void *)(s + o_end);
        float *we = (float *)(void *)(s + o_w);
        int32_t *map = (int32_t *)(void *)(s + o_map);
        int64_t *cur = (int64_t *)(void *)(s + o_cur);
        const uint8_t *rx = (const uint8_t *)res.recv_x.data;
        const int32_t *rs = (const int32_t *)res.recv_x_scales.data;
        for (int64_t e = 0; e < El; e++) cur[e] = start[e], ends[e] = (int32_t)(start[e] + cnt[e]);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t k = 0; k < K; k++) {
                const int64_t e = ridx[r * K + k];
                if (e < 0) continue;
                const int64_t i = cur[e]++;
                memcpy(ax + i * xsb, rx + r * xsb, (size_t)xsb);
                if (!bf) memcpy(sfa + i * (H / 128), rs + r * (H / 128), (size_t)(H / 128) * 4);
                we[i] = rw[r * K + k];
                map[2 * i] = (int32_t)r, map[2 * i + 1] = (int32_t)k;
            }
        LAP(2);
        static const int64_t recipe[3] = {1, 1, 32};
        uint16_t *d1 = (uint16_t *)(void *)(s + o_d1), *d2 = (uint16_t *)(void *)(s + o_d2);
        uint8_t *a2 = s + o_a2;
        int32_t *sf2 = (int32_t *)(void *)(s + o_sf2);
        ts_tensor gl = ts_tensor_1d(ends, TS_I32, El);
        ts_tensor ta = ts_tensor_2d(ax, bf ? TS_BF16 : TS_E4M3, M, H), tsa = ts_tensor_2d(sfa, TS_I32, M, H / 128);
        ts_tensor td1 = ts_tensor_2d(d1, TS_BF16, M, 2 * I);
        est = bf ? ts_m_grouped_bf16_gemm_contiguous_packed(&ta, w->l1, &td1, &gl, NULL, true, false)
                 : ts_m_grouped_fp8_fp4_gemm_contiguous_packed(&ta, &tsa, w->l1, &td1, &gl, recipe, NULL, NULL, NULL,
                                                               false, true, false);
        LAP(3);
        if (est == TS_OK)
            for (int64_t e = 0; e < El; e++)
                ts__mega_moe_swiglu_cast(d1 + start[e] * 2 * I, 2 * I, cnt[e], I, we + start[e], clamp, bf,
                                         a2 + start[e] * I * a2b, I, sf2 + start[e] * (I / 128), I / 128);
        LAP(4);
        ts_tensor ta2 = ts_tensor_2d(a2, bf ? TS_BF16 : TS_E4M3, M, I), tsa2 = ts_tensor_2d(sf2, TS_I32, M, I / 128);
        ts_tensor td2 = ts_tensor_2d(d2, TS_BF16, M, H);
        if (est == TS_OK)
            est = bf ? ts_m_grouped_bf16_gemm_contiguous_packed(&ta2, w->l2, &td2, &gl, NULL, true, false)
                     : ts_m_grouped_fp8_fp4_gemm_contiguous_packed(&ta2, &tsa2, w->l2, &td2, &gl, recipe, NULL, NULL,
                                                                   NULL, false, true, false);
        LAP(5);
        if (est == TS_OK) {
            /* each slot's output into its own column block of the zero-copy combine rows */
            uint16_t *c = (uint16_t *)cb.data;
            memset(c, 0, (size_t)(rows * K * H) * 2);
            for (int64_t e = 0; e < El; e++)
                for (int64_t i = start[e]; i < start[e] + cnt[e]; i++)
                    memcpy(c + ((int64_t)map[2 * i] * K + map[2 * i + 1]) * H, d2 + i * H, (size_t)H * 2);
        }
    } else if (est == TS_OK && rows > 0) {
        memset(cb.data, 0, (size_t)(rows * K * H) * 2);
    }
    /* combine is collective: a local failure still takes part, with a view peers reject */
    ts_tensor comb = ts_tensor_2d(s ? s + o_comb : NULL, TS_BF16, n, K * H);
    ts_tensor bad = ts_tensor_2d(NULL, TS_BF16, 0, 0);
    char msg[512] = "";
    if (est != TS_OK) snprintf(msg, sizeof msg, "%s", ts_last_error());
    ts_status cst = ts_ep_combine(b->ep_unf, h, est == TS_OK ? &cb : &bad, NULL, NULL, NULL, NULL,
                                  est == TS_OK ? &comb : &bad, NULL);
    ts_ep_handle_destroy(h);
    if (est != TS_OK) {
        ts__fail(est, "%s", msg);
        return est;
    }
    TS__RETURN_IF_ERROR(cst);
    LAP(6);
    sum_ctx sc = {b, (const int64_t *)idx.data, (const uint16_t *)comb.data, y};
    ts__parallel_for(n, 4, sum_task, &sc);
    LAP(7);
    pf[0] = t0 - t_start;
#undef LAP
    if (stats) {
        int32_t *sp = (int32_t *)stats->data;
        for (int64_t e = 0; e < El; e++) sp[e * stats->strides[0]] += (int32_t)cnt[e];
    }
    return TS_OK;
}
