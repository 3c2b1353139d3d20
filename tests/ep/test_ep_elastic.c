/* V2 ElasticBuffer (ts_ep_elastic_*): dispatch against the MPI_Alltoallv reference (not
 * expanded: the same bytes; expanded: an expansion of the reference's rows computed here),
 * combine against a single-process oracle computed on each token's own rank from its own
 * top-k (the expert outputs are a function of (source rank, token, expert)), so the results
 * are checked bit for bit at every rank count, thread count and node split. */
#include "ep_case.h"
#include "tilestack/ep_elastic.h"

#include <math.h>

/* Expert e's output for token (src, t): what a real expert would compute, made up. */
static uint16_t expert_out(int64_t src, int64_t t, int64_t e, int64_t j) {
    uint64_t h = ((uint64_t)src << 48) ^ ((uint64_t)t << 24) ^ ((uint64_t)e << 12) ^ (uint64_t)j;
    h *= 0x9E3779B97F4A7C15ull;
    h ^= h >> 31;
    return ts_f32_to_bf16((float)((int64_t)(h % 40001) - 20000) * 1e-3f);
}

static ts_ep_elastic_buffer *elastic_buffer_timeout(ts_test_ctx *ts_t_, int64_t T, int64_t hidden, int K, bool fp8,
                                                    double timeout_s) {
    ts_ep_elastic_options o = ts_ep_elastic_default_options();
    o.num_max_tokens_per_rank = T;
    o.hidden = hidden;
    o.num_topk = K;
    o.use_fp8_dispatch = fp8;
    o.num_cpu_timeout_secs = timeout_s;
    ts_ep_elastic_buffer *b = NULL;
    TS_CHECK_STATUS(ts_ep_elastic_create(MPI_COMM_WORLD, &o, &b), TS_OK);
    return b;
}

static ts_ep_elastic_buffer *elastic_buffer(ts_test_ctx *ts_t_, int64_t T, int64_t hidden, int K, bool fp8) {
    return elastic_buffer_timeout(ts_t_, T, hidden, K, fp8, TS_EP_TEST_TIMEOUT_S);
}

/* Expanded rows expected from the reference's received rows: per local expert, the (row, k)
 * pairs that chose it in (row, k) order, then padding to the alignment. exp_row[i*K+k] = the
 * row of pair (i, k) or -1; returns the row count. */
static int64_t expected_expansion(const ts_ep_reference_result *ref, int K, int El, int64_t A, int64_t *exp_row,
                                  int64_t *starts, int64_t *counts) {
    const int64_t n = ref->out.num_recv_tokens;
    const ts_tensor *ri = &ref->out.recv_topk_idx;
    int64_t row = 0;
    for (int64_t i = 0; i < n * K; i++) exp_row[i] = -1;
    for (int e = 0; e < El; e++) {
        starts[e] = row;
        int64_t c = 0;
        for (int64_t i = 0; i < n; i++)
            for (int k = 0; k < K; k++) {
                const int64_t v = ri->dtype == TS_I64 ? ((int64_t *)ri->data)[i * K + k] : ((int32_t *)ri->data)[i * K + k];
                if (v == e) exp_row[i * K + k] = row + c++;
            }
        counts[e] = c;
        row += (c + A - 1) / A * A;
    }
    return row;
}

typedef struct run_opts {
    int64_t A;
    bool expand, zero_padding, weights;
    int num_sms;
} run_opts;

/* One dispatch + combine (+ a cached dispatch of new rows); returns a hash of every output. */
static uint64_t run_elastic(ts_test_ctx *ts_t_, ts_ep_elastic_buffer *buf, const ep_case *c, const run_opts *ro) {
    const int R = g_ep_size, me = g_ep_rank, K = c->K, El = c->experts_per_rank;
    ep_inputs in;
    ep_make_inputs(c, &in);
    const int64_t N = in.N, H = c->hidden;
    ts_ep_elastic_dispatch_args a;
    memset(&a, 0, sizeof a);
    a.x = &in.tx;
    a.sf = c->fp8 ? &in.ts : NULL;
    a.topk_idx = &in.tidx;
    a.topk_weights = ro->weights ? &in.tw : NULL;
    a.num_experts = in.E;
    a.expert_alignment = ro->A;
    a.num_sms = ro->num_sms;
    a.do_expand = ro->expand;
    a.do_zero_padding = ro->zero_padding;
    a.do_cpu_sync = true;
    int32_t *stats = calloc((size_t)El, 4);
    ts_tensor tstats = ts_tensor_1d(stats, TS_I32, El);
    a.cumulative_local_expert_recv_stats = &tstats;
    ts_ep_elastic_dispatch_result res;
    ts_ep_elastic_handle *h = NULL;
    TS_CHECK_STATUS(ts_ep_elastic_dispatch(buf, &a, &res, &h), TS_OK);
    ts_ep_reference_result ref;
    TS_CHECK_STATUS(ts_ep_reference_dispatch(MPI_COMM_WORLD, &in.tx, c->fp8 ? &in.ts : NULL, &in.tidx, &in.tw, in.E,
                                             ro->A, &ref),
                    TS_OK);
    uint64_t hash = 0;
    if (TS_FAILED() || !h) goto out;
    const int64_t n = ref.out.num_recv_tokens;
    TS_CHECK_EQ_INT(res.num_recv_tokens, n);
    ts_ep_elastic_handle_info info;
    TS_CHECK_STATUS(ts_ep_elastic_handle_get_info(h, &info), TS_OK);
    TS_CHECK_STATUS(ts_ep_elastic_handle_deterministic_sort(h), TS_OK);
    TS_CHECK_EQ_INT(info.num_recv_tokens, n);
    TS_CHECK(info.do_expand == ro->expand);
    TS_CHECK_EQ_INT(info.psum_num_recv_tokens_per_scaleup_rank[R - 1], n);
    const int32_t *rsrc = ref.out.recv_src_idx.data;
    for (int64_t i = 0; i < n; i++) TS_CHECK_EQ_INT(info.recv_src_metadata[i * (2 + K) + 1], rsrc[i]);
    int64_t *exp_row = malloc((size_t)(n * K + 1) * 8), starts[64], counts[64];
    const int64_t X = expected_expansion(&ref, K, El, ro->A, exp_row, starts, counts);
    for (int e = 0; e < El; e++) {
        TS_CHECK_EQ_INT(info.num_unaligned_recv_tokens_per_expert[e], counts[e]);
        TS_CHECK_EQ_INT(stats[e], counts[e]);
        TS_CHECK_EQ_INT(info.num_recv_tokens_per_expert_list[e], ((int32_t *)ref.out.num_recv_tokens_per_expert.data)[e]);
    }
    const int64_t xrow = H * (c->fp8 ? 1 : 2), srow = c->fp8 ? c->num_scales * 4 : 0;
    if (!ro->expand) {
        TS_CHECK_EQ_INT(res.num_expanded_tokens, n);
        TS_CHECK(ep_bytes_equal(&res.recv_x, &ref.out.recv_x, n));
        if (c->fp8) TS_CHECK(ep_bytes_equal(&res.recv_sf, &ref.out.recv_x_scales, n));
        TS_CHECK(ep_bytes_equal(&res.recv_topk_idx, &ref.out.recv_topk_idx, n));
        if (ro->weights) TS_CHECK(ep_bytes_equal(&res.recv_topk_weights, &ref.out.recv_topk_weights, n));
        else TS_CHECK(res.recv_topk_weights.data == NULL);
    } else {
        TS_CHECK_EQ_INT(res.num_expanded_tokens, X);
        TS_CHECK_EQ_INT(info.num_expanded_tokens, X);
        for (int e = 0; e < El; e++) TS_CHECK_EQ_INT(info.psum_num_recv_tokens_per_expert[e], starts[e] + counts[e]);
        const uint8_t *ex = res.recv_x.data, *rx = ref.out.recv_x.data;
        const float *ew = res.recv_topk_weights.data, *rw = ref.out.recv_topk_weights.data;
        bool rows_ok = true, w_ok = true, pad_ok = true;
        for (int64_t i = 0; i < n; i++)
            for (int k = 0; k < K; k++) {
                const int64_t s = exp_row[i * K + k];
                TS_CHECK_EQ_INT(info.recv_src_metadata[i * (2 + K) + 2 + k], s);
                if (s < 0) continue;
                rows_ok &= memcmp(ex + s * xrow, rx + i * xrow, (size_t)xrow) == 0;
                if (c->fp8)
                    rows_ok &= memcmp((uint8_t *)res.recv_sf.data + s * srow,
                                      (uint8_t *)ref.out.recv_x_scales.data + i * srow, (size_t)srow) == 0;
                if (ro->weights) w_ok &= ew[s] == rw[i * K + k];
            }
        for (int e = 0; e < El; e++)
            for (int64_t r = starts[e] + counts[e]; r < (e + 1 < El ? starts[e + 1] : X); r++) {
                if (ro->weights) w_ok &= ew[r] == 0.0f;
                if (ro->zero_padding)
                    for (int64_t j = 0; j < xrow; j++) pad_ok &= ex[r * xrow + j] == 0;
            }
        TS_CHECK(rows_ok);
        TS_CHECK(w_ok);
        TS_CHECK(pad_ok);
    }
    hash = ts_fnv1a64(res.recv_x.data, (size_t)(res.num_expanded_tokens * xrow));

    /* Combine of made-up expert outputs, against the oracle on each token's own rank. */
    if (!c->fp8) {
        const int64_t rows = ro->expand ? X : n;
        uint16_t *cx = malloc((size_t)(rows * H + 1) * 2);
        float *cw = malloc((size_t)(rows * K + 1) * 4);
        for (int64_t i = 0; i < rows * H; i++) cx[i] = 0x7FC0; /* NaN in padding: must be ignored */
        for (int64_t i = 0; i < rows * K; i++) cw[i] = 0.0f;
        const ts_tensor *ri = &ref.out.recv_topk_idx;
        for (int64_t i = 0; i < n; i++) {
            const int64_t src = info.recv_src_metadata[i * (2 + K)], t = rsrc[i];
            const float *rw = (const float *)ref.out.recv_topk_weights.data + i * K;
            if (!ro->expand) {
                /* one row per token: the test's stand-in output is "expert 0"'s */
                for (int64_t j = 0; j < H; j++) cx[i * H + j] = expert_out(src, t, 0, j);
                for (int k = 0; k < K; k++) cw[i * K + k] = rw[k];
                continue;
            }
            for (int k = 0; k < K; k++) {
                const int64_t v = ri->dtype == TS_I64 ? ((int64_t *)ri->data)[i * K + k] : ((int32_t *)ri->data)[i * K + k];
                if (v < 0) continue;
                const int64_t s = exp_row[i * K + k];
                for (int64_t j = 0; j < H; j++) cx[s * H + j] = expert_out(src, t, me * El + v, j);
                cw[s] = rw[k];
            }
        }
        uint16_t *b0 = malloc((size_t)(N * H + 1) * 2), *out = malloc((size_t)(N * H + 1) * 2);
        float *ow = malloc((size_t)(N * K + 1) * 4);
        for (int64_t i = 0; i < N * H; i++) b0[i] = ts_f32_to_bf16((float)(i % 7) - 3.0f);
        ts_tensor tcx = ts_tensor_2d(cx, TS_BF16, rows, H), tb0 = ts_tensor_2d(b0, TS_BF16, N, H),
                  tout = ts_tensor_2d(out, TS_BF16, N, H), tow = ts_tensor_2d(ow, TS_F32, N, K);
        ts_tensor tcw = ro->expand ? ts_tensor_1d(cw, TS_F32, rows) : ts_tensor_2d(cw, TS_F32, rows, K);
        TS_CHECK_STATUS(ts_ep_elastic_combine(buf, h, &tcx, ro->weights ? &tcw : NULL, &tb0, NULL, ro->num_sms, &tout,
                                              ro->weights ? &tow : NULL),
                        TS_OK);
        /* Oracle: per destination rank r (ascending), acc_r over r's slots in k order
         * (acc = fmaf(x, w, acc); w = 1 without weights), rounded to bf16; then 0 + bias + sum_r, rounded. */
        bool x_ok = true, w_ok = true;
        for (int64_t t = 0; t < N; t++) {
            for (int64_t j = 0; j < H; j++) {
                float total = 0.0f;
                total += ts_bf16_to_f32(b0[t * H + j]);
                for (int r = 0; r < R; r++) {
                    float acc = 0.0f;
                    bool sent = false;
                    for (int k = 0; k < K; k++) {
                        const int64_t e = ep_idx_get(&in, t, k, K);
                        if (e < 0 || e / El != r) continue;
                        sent = true;
                        if (ro->expand) {
                            const float w = ro->weights ? in.w[t * K + k] : 1.0f;
                            acc = fmaf(ts_bf16_to_f32(expert_out(me, t, e, j)), w, acc);
                        }
                    }
                    if (!sent) continue;
                    total += ro->expand ? ts_bf16_to_f32(ts_f32_to_bf16(acc)) : ts_bf16_to_f32(expert_out(me, t, 0, j));
                }
                x_ok &= out[t * H + j] == ts_f32_to_bf16(total);
            }
            for (int k = 0; k < K && ro->weights; k++) {
                const float want = ep_idx_get(&in, t, k, K) >= 0 ? in.w[t * K + k] : 0.0f;
                w_ok &= ow[t * K + k] == want;
            }
        }
        TS_CHECK(x_ok);
        TS_CHECK(w_ok);
        hash ^= ts_fnv1a64(out, (size_t)(N * H) * 2) * 3;
        free(cx);
        free(cw);
        free(b0);
        free(out);
        free(ow);
    }

    /* Cached dispatch of new rows: the same routing, against the reference of the new rows. */
    ep_fill_x(c, &in, c->seed + 100);
    ts_ep_elastic_dispatch_args ca;
    memset(&ca, 0, sizeof ca);
    ca.x = &in.tx;
    ca.sf = c->fp8 ? &in.ts : NULL;
    ca.handle = h;
    ca.do_expand = ro->expand;
    ca.num_sms = ro->num_sms;
    ts_ep_elastic_dispatch_result cres;
    TS_CHECK_STATUS(ts_ep_elastic_dispatch(buf, &ca, &cres, NULL), TS_OK);
    ts_ep_reference_result ref2;
    TS_CHECK_STATUS(ts_ep_reference_dispatch(MPI_COMM_WORLD, &in.tx, c->fp8 ? &in.ts : NULL, &in.tidx, &in.tw, in.E,
                                             ro->A, &ref2),
                    TS_OK);
    if (!TS_FAILED()) {
        TS_CHECK_EQ_INT(cres.num_expanded_tokens, res.num_expanded_tokens);
        bool ok = true;
        const uint8_t *cx = cres.recv_x.data, *rx = ref2.out.recv_x.data;
        for (int64_t i = 0; i < n; i++)
            for (int k = 0; k < (ro->expand ? K : 1); k++) {
                const int64_t s = ro->expand ? exp_row[i * K + k] : i;
                if (s >= 0) ok &= memcmp(cx + s * xrow, rx + i * xrow, (size_t)xrow) == 0;
            }
        TS_CHECK(ok);
        hash ^= ts_fnv1a64(cres.recv_x.data, (size_t)(cres.num_expanded_tokens * xrow)) * 5;
    }
    ts_ep_reference_free(&ref2);
    free(exp_row);
out:
    ts_ep_elastic_handle_destroy(h);
    ts_ep_reference_free(&ref);
    ep_free_inputs(&in);
    free(stats);
    return hash;
}

static void run_both_thread_counts(ts_test_ctx *ts_t_, ts_ep_elastic_buffer *b, const ep_case *c, run_opts ro) {
    ro.num_sms = 1;
    const uint64_t h1 = run_elastic(ts_t_, b, c, &ro);
    ro.num_sms = 0;
    const uint64_t h2 = run_elastic(ts_t_, b, c, &ro);
    TS_CHECK(h1 == h2);
}

TS_TEST(ep_elastic_dispatch_combine) {
    ts_ep_elastic_buffer *b = elastic_buffer(ts_t_, 48, 256, 8, false);
    if (!b) return;
    ep_case c = {.seed = 41, .hidden = 256, .max_tokens = 48, .K = 8, .experts_per_rank = 4, .idx_dtype = TS_I64,
                 .neg_frac = 0.1};
    run_both_thread_counts(ts_t_, b, &c, (run_opts){.A = 1, .weights = true});
    run_both_thread_counts(ts_t_, b, &c, (run_opts){.A = 1, .expand = true, .weights = true});
    run_both_thread_counts(ts_t_, b, &c, (run_opts){.A = 4, .expand = true, .zero_padding = true, .weights = true});
    run_both_thread_counts(ts_t_, b, &c, (run_opts){.A = 3, .expand = true});
    ep_case s = {.seed = 43, .hidden = 136, .max_tokens = 40, .K = 6, .experts_per_rank = 2, .idx_dtype = TS_I32,
                 .routing = EP_ROUTE_SKEWED}; /* duplicate experts in a row: one expanded row per slot */
    run_both_thread_counts(ts_t_, b, &s, (run_opts){.A = 2, .expand = true, .zero_padding = true, .weights = true});
    s.routing = EP_ROUTE_ZERO_ODD;
    run_both_thread_counts(ts_t_, b, &s, (run_opts){.A = 1, .expand = true, .weights = true});
    ts_ep_elastic_destroy(b);
}

/* Expanded rows that cannot fit the receiver's dispatch area (every token's top-16 on one
 * rank, a buffer of the hint's size): the senders cannot place them, the rows take the plain
 * way and the local expansion, with the same results. */
TS_TEST(ep_elastic_expanded_beyond_area) {
    ts_ep_elastic_buffer *b = elastic_buffer(ts_t_, 64, 4096, 16, false);
    if (!b) return;
    ep_case c = {.seed = 61, .hidden = 4096, .max_tokens = 64, .K = 16, .experts_per_rank = 2, .idx_dtype = TS_I64,
                 .routing = EP_ROUTE_SKEWED};
    run_both_thread_counts(ts_t_, b, &c, (run_opts){.A = 4, .expand = true, .zero_padding = true, .weights = true});
    ts_ep_elastic_destroy(b);
}

TS_TEST(ep_elastic_fp8) {
    ts_ep_elastic_buffer *b = elastic_buffer(ts_t_, 32, 256, 4, true);
    if (!b) return;
    ep_case c = {.seed = 47, .hidden = 256, .max_tokens = 32, .K = 4, .experts_per_rank = 3, .fp8 = true,
                 .num_scales = 2, .scale_dtype = TS_F32, .scales_colmajor = true, .idx_dtype = TS_I64,
                 .neg_frac = 0.2};
    run_both_thread_counts(ts_t_, b, &c, (run_opts){.A = 1, .weights = true});
    run_both_thread_counts(ts_t_, b, &c, (run_opts){.A = 8, .expand = true, .zero_padding = true, .weights = true});
    ts_ep_elastic_destroy(b);
}

TS_TEST(ep_elastic_bad_input) {
    const int R = g_ep_size, bad = R - 1;
    ts_ep_elastic_buffer *b = elastic_buffer(ts_t_, 16, 128, 2, false);
    if (!b) return;
    ep_case c = {.seed = 53, .hidden = 128, .max_tokens = 16, .K = 2, .experts_per_rank = 2, .idx_dtype = TS_I64};
    ep_inputs in;
    ep_make_inputs(&c, &in);
    ts_ep_elastic_dispatch_args a;
    memset(&a, 0, sizeof a);
    a.x = &in.tx;
    a.topk_idx = &in.tidx;
    a.topk_weights = &in.tw;
    a.num_experts = in.E;
    a.expert_alignment = 1;
    a.do_expand = true;
    ts_ep_elastic_dispatch_result res;
    ts_ep_elastic_handle *h = NULL;
    /* a top-k id out of range on one rank */
    int64_t saved = 0;
    if (g_ep_rank == bad && in.N > 0) {
        saved = ((int64_t *)in.idx)[0];
        ((int64_t *)in.idx)[0] = in.E;
    }
    int64_t bad_n = in.N;
    ep_test_bcast(&bad_n, 1, MPI_INT64_T, bad);
    ts_status st = ts_ep_elastic_dispatch(b, &a, &res, &h);
    if (bad_n > 0) ep_expect_status(ts_t_, st, TS_ERR_INVALID_ARGUMENT, bad);
    else TS_CHECK_STATUS(st, TS_OK);
    TS_CHECK(h == NULL || st == TS_OK);
    ts_ep_elastic_handle_destroy(h);
    h = NULL;
    if (g_ep_rank == bad && in.N > 0) ((int64_t *)in.idx)[0] = saved;
    /* expert_alignment 0 */
    if (g_ep_rank == bad) a.expert_alignment = 0;
    st = ts_ep_elastic_dispatch(b, &a, &res, &h);
    ep_expect_status(ts_t_, st, TS_ERR_INVALID_ARGUMENT, bad);
    if (g_ep_rank == bad) TS_CHECK(strstr(ts_last_error(), "expert_alignment") != NULL);
    a.expert_alignment = 1;
    /* a buffer too small for this rank's num_max_tokens_per_rank: names the bytes needed */
    if (g_ep_rank == bad) a.num_max_tokens_per_rank = 1 << 20;
    st = ts_ep_elastic_dispatch(b, &a, &res, &h);
    ep_expect_status(ts_t_, st, TS_ERR_INVALID_ARGUMENT, bad);
    if (g_ep_rank == bad) {
        int64_t need = 0;
        TS_CHECK_STATUS(ts_ep_elastic_get_buffer_size_hint(R, 1 << 20, 128, 2, false, &need), TS_OK);
        char want[64];
        snprintf(want, sizeof want, "needs %lld bytes", (long long)need);
        TS_CHECK_MSG(strstr(ts_last_error(), want) != NULL, "no '%s' in: %s", want, ts_last_error());
    }
    a.num_max_tokens_per_rank = 0;
    /* expanded combine with weights of the wrong shape on one rank */
    st = ts_ep_elastic_dispatch(b, &a, &res, &h);
    TS_CHECK_STATUS(st, TS_OK);
    if (h) {
        const int64_t X = res.num_expanded_tokens, N = in.N;
        uint16_t *cx = calloc((size_t)(X * 128 + 1), 2), *out = calloc((size_t)(N * 128 + 1), 2);
        float *cw = calloc((size_t)(X + 1), 4), *ow = calloc((size_t)(N * 2 + 1), 4);
        ts_tensor tcx = ts_tensor_2d(cx, TS_BF16, X, 128), tout = ts_tensor_2d(out, TS_BF16, N, 128),
                  tow = ts_tensor_2d(ow, TS_F32, N, 2);
        ts_tensor tcw = g_ep_rank == bad ? ts_tensor_2d(cw, TS_F32, X, 2) : ts_tensor_1d(cw, TS_F32, X);
        st = ts_ep_elastic_combine(b, h, &tcx, &tcw, NULL, NULL, 0, &tout, &tow);
        ep_expect_status(ts_t_, st, TS_ERR_SHAPE, bad);
        /* and the buffer still works */
        tcw = ts_tensor_1d(cw, TS_F32, X);
        TS_CHECK_STATUS(ts_ep_elastic_combine(b, h, &tcx, &tcw, NULL, NULL, 0, &tout, &tow), TS_OK);
        free(cx);
        free(out);
        free(cw);
        free(ow);
    }
    ts_ep_elastic_handle_destroy(h);
    ep_free_inputs(&in);
    ts_ep_elastic_destroy(b);
}

/* The last rank skips one collective call (dispatch, an expanded or plain combine, or the
 * barrier): the others get TS_ERR_TIMEOUT naming it, the buffer then refuses further use, and
 * every rank tears down cleanly. */
typedef enum { SKIP_DISPATCH, SKIP_COMBINE_EXPANDED, SKIP_COMBINE, SKIP_BARRIER } skip_call;

static void skip_one_call(ts_test_ctx *ts_t_, skip_call which) {
    const int absent = g_ep_size - 1;
    ts_ep_elastic_buffer *b = elastic_buffer_timeout(ts_t_, 16, 128, 2, false, 1.5);
    if (!b) return;
    ep_case c = {.seed = 59, .hidden = 128, .max_tokens = 16, .K = 2, .experts_per_rank = 2, .idx_dtype = TS_I64};
    ep_inputs in;
    ep_make_inputs(&c, &in);
    ts_ep_elastic_dispatch_args a;
    memset(&a, 0, sizeof a);
    a.x = &in.tx;
    a.topk_idx = &in.tidx;
    a.topk_weights = &in.tw;
    a.num_experts = in.E;
    a.expert_alignment = 1;
    a.do_expand = which != SKIP_COMBINE;
    ts_ep_elastic_dispatch_result res;
    ts_ep_elastic_handle *h = NULL;
    uint16_t *out = calloc((size_t)(in.N * c.hidden + 1), 2);
    ts_tensor tout = ts_tensor_2d(out, TS_BF16, in.N, c.hidden);
    const bool skip = g_ep_rank == absent;
    ts_status st = TS_OK;
    if (which != SKIP_DISPATCH) TS_CHECK_STATUS(ts_ep_elastic_dispatch(b, &a, &res, &h), TS_OK);
    if (!skip && !TS_FAILED()) {
        if (which == SKIP_DISPATCH) st = ts_ep_elastic_dispatch(b, &a, &res, &h);
        else if (which == SKIP_BARRIER) st = ts_ep_elastic_barrier(b);
        else st = ts_ep_elastic_combine(b, h, &res.recv_x, NULL, NULL, NULL, 0, &tout, NULL);
        TS_CHECK_STATUS(st, TS_ERR_TIMEOUT);
        char want[32];
        snprintf(want, sizeof want, "for rank %d", absent);
        TS_CHECK_MSG(strstr(ts_last_error(), want) != NULL, "call %d: timeout message does not name rank %d: %s",
                     (int)which, absent, ts_last_error());
        TS_CHECK_STATUS(ts_ep_elastic_barrier(b), TS_ERR_PEER); /* only destroy is left */
    }
    ep_test_barrier();
    ts_ep_elastic_handle_destroy(h);
    free(out);
    ep_free_inputs(&in);
    TS_CHECK_STATUS(ts_ep_elastic_destroy(b), TS_OK);
}

TS_TEST(ep_elastic_rank_stops_participating) {
    if (g_ep_size < 2) return;
    skip_one_call(ts_t_, SKIP_DISPATCH);
    skip_one_call(ts_t_, SKIP_COMBINE_EXPANDED);
    skip_one_call(ts_t_, SKIP_COMBINE);
    skip_one_call(ts_t_, SKIP_BARRIER);
}

TS_TEST(ep_elastic_buffer_queries) {
    const int R = g_ep_size;
    int64_t hint = 0, v1 = 0;
    TS_CHECK_STATUS(ts_ep_elastic_get_buffer_size_hint(R, 64, 512, 0, true, &hint), TS_OK);
    TS_CHECK_STATUS(ts_ep_get_buffer_size_hint(R, 64, 512, 32, 4, true, &v1), TS_OK);
    TS_CHECK_EQ_INT(hint, v1);
    TS_CHECK(hint % (2 << 20) == 0);
    ts_ep_elastic_options o = ts_ep_elastic_default_options();
    TS_CHECK(o.allow_hybrid_mode && o.num_cpu_timeout_secs == 300.0);
    ts_ep_elastic_buffer *b = NULL;
    TS_CHECK_STATUS(ts_ep_elastic_create(MPI_COMM_WORLD, &o, &b), TS_ERR_INVALID_ARGUMENT); /* nothing to size from */
    o.num_bytes = 3 << 20;
    TS_CHECK_STATUS(ts_ep_elastic_create(MPI_COMM_WORLD, &o, &b), TS_ERR_INVALID_ARGUMENT); /* not 2 MiB aligned */
    o.num_bytes = 4 << 20;
    o.num_cpu_timeout_secs = TS_EP_TEST_TIMEOUT_S;
    TS_CHECK_STATUS(ts_ep_elastic_create(MPI_COMM_WORLD, &o, &b), TS_OK);
    if (!b) return;
    int64_t nb = 0;
    int32_t rank = -1, nr = 0, a = 0, c = 0, a2 = 0, c2 = 0, sms = 0, qps = 0;
    TS_CHECK_STATUS(ts_ep_elastic_get_num_bytes(b, &nb), TS_OK);
    TS_CHECK_EQ_INT(nb, 4 << 20);
    TS_CHECK_STATUS(ts_ep_elastic_get_rank(b, &rank, &nr), TS_OK);
    TS_CHECK_EQ_INT(rank, g_ep_rank);
    TS_CHECK_EQ_INT(nr, R);
    TS_CHECK_STATUS(ts_ep_elastic_get_physical_domain_size(b, &a, &c), TS_OK);
    TS_CHECK_STATUS(ts_ep_elastic_get_logical_domain_size(b, &a2, &c2), TS_OK);
    TS_CHECK_EQ_INT((int64_t)a * c, R);
    TS_CHECK_EQ_INT(a, a2);
    TS_CHECK_EQ_INT(c, c2);
    TS_CHECK_STATUS(ts_ep_elastic_get_theoretical_num_sms(b, 8 * R, 4, &sms), TS_OK);
    TS_CHECK(sms >= 1);
    TS_CHECK_STATUS(ts_ep_elastic_get_theoretical_num_sms(b, 2, 4, &sms), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_ep_elastic_get_theoretical_num_qps(b, 6, &qps), TS_OK);
    TS_CHECK_EQ_INT(qps, 6);
    TS_CHECK_STATUS(ts_ep_elastic_barrier(b), TS_OK);
    /* a dispatch without num_max_tokens_per_rank on a buffer created from num_bytes */
    uint16_t x[16 * 8] = {0};
    int64_t idx[2] = {0, -1};
    ts_tensor tx = ts_tensor_2d(x, TS_BF16, 1, 8 * 2), ti = ts_tensor_2d(idx, TS_I64, 1, 2);
    ts_ep_elastic_dispatch_args da;
    memset(&da, 0, sizeof da);
    da.x = &tx;
    da.topk_idx = &ti;
    da.num_experts = R;
    da.expert_alignment = 1;
    ts_ep_elastic_dispatch_result res;
    ts_ep_elastic_handle *h = NULL;
    TS_CHECK_STATUS(ts_ep_elastic_dispatch(b, &da, &res, &h), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "num_max_tokens_per_rank") != NULL);
    /* the parts of V2 not built */
    TS_CHECK_STATUS(ts_ep_elastic_engram_write(b, NULL, NULL), TS_ERR_UNSUPPORTED);
    TS_CHECK(strstr(ts_last_error(), "Engram") != NULL);
    TS_CHECK_STATUS(ts_ep_elastic_engram_fetch(b, NULL, 0, NULL, NULL), TS_ERR_UNSUPPORTED);
    TS_CHECK_STATUS(ts_ep_elastic_pp_set_config(b, 1, 1), TS_ERR_UNSUPPORTED);
    TS_CHECK_STATUS(ts_ep_elastic_pp_send(b, NULL, 0, 0), TS_ERR_UNSUPPORTED);
    TS_CHECK(strstr(ts_last_error(), "pipeline") != NULL);
    TS_CHECK_STATUS(ts_ep_elastic_pp_recv(b, NULL, 0, 0), TS_ERR_UNSUPPORTED);
    TS_CHECK_STATUS(ts_ep_elastic_agrs_set_config(b, 1, 1), TS_ERR_UNSUPPORTED);
    TS_CHECK_STATUS(ts_ep_elastic_create_agrs_session(b), TS_ERR_UNSUPPORTED);
    TS_CHECK_STATUS(ts_ep_elastic_destroy_agrs_session(b), TS_ERR_UNSUPPORTED);
    TS_CHECK_STATUS(ts_ep_elastic_all_gather(b, NULL, NULL), TS_ERR_UNSUPPORTED);
    TS_CHECK(strstr(ts_last_error(), "AGRS") != NULL);
    ts_ep_elastic_destroy(b);
}
