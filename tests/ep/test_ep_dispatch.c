/* ts_ep_dispatch / ts_ep_combine against the MPI_Alltoallv reference, exactly, plus
 * upstream's identities (rank blocks, counts, fan-out combine, weight reconstruction). */
#include "ep_case.h"

/* Combine input row of (this rank, recv row): a deterministic bf16 function of the source,
 * so every rank's copy differs and the rank order of the sum matters. */
static uint16_t comb_val(int me, int64_t src_rank, int64_t src_idx, int64_t j) {
    uint64_t h = ((uint64_t)me * 1315423911u) ^ ((uint64_t)src_rank << 40) ^ ((uint64_t)src_idx << 16) ^ (uint64_t)j;
    h *= 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
    /* now and then +-inf, so inf - inf = NaN and the NaN encoding get exercised too */
    if (h % 4099 == 0) return (h >> 20) & 1 ? 0xFF80 : 0x7F80;
    return ts_f32_to_bf16((float)((int64_t)(h % 20001) - 10000) * 1e-3f);
}

static uint64_t hash_result(const ts_ep_dispatch_result *r) {
    uint64_t h = ts_fnv1a64(r->recv_x.data, (size_t)(r->recv_x.shape[0] * r->recv_x.shape[1]) * ts_dtype_size(r->recv_x.dtype));
    if (r->recv_topk_idx.data)
        h ^= ts_fnv1a64(r->recv_topk_idx.data, (size_t)(r->recv_topk_idx.shape[0] * r->recv_topk_idx.shape[1]) *
                                                   ts_dtype_size(r->recv_topk_idx.dtype)) * 3;
    return h;
}

static void run_case(ts_test_ctx *ts_t_, ts_ep_buffer *buf, const ep_case *c, int64_t alignment, bool biases,
                     int num_sms) {
    const int R = g_ep_size, me = g_ep_rank, K = c->K;
    ep_inputs in;
    ep_make_inputs(c, &in);
    TS_CHECK_STATUS(ts_ep_get_dispatch_layout(buf, &in.tidx, in.E, &in.ttpr, NULL, &in.ttpe, &in.tin), TS_OK);
    ts_ep_config cfg;
    TS_CHECK_STATUS(ts_ep_get_dispatch_config(R, &cfg), TS_OK);
    cfg.num_sms = num_sms;
    ts_ep_dispatch_args a = ep_args(c, &in, true);
    a.expert_alignment = alignment;
    a.config = &cfg;
    ts_ep_dispatch_result res;
    ts_ep_handle *h = NULL;
    TS_CHECK_STATUS(ts_ep_dispatch(buf, &a, &res, &h), TS_OK);
    ts_ep_reference_result ref;
    TS_CHECK_STATUS(ts_ep_reference_dispatch(MPI_COMM_WORLD, &in.tx, c->fp8 ? &in.ts : NULL, &in.tidx, &in.tw, in.E,
                                             alignment, &ref),
                    TS_OK);
    if (TS_FAILED() || !h) {
        ts_ep_handle_destroy(h);
        ts_ep_reference_free(&ref);
        ep_free_inputs(&in);
        return;
    }
    const int64_t nrecv = res.num_recv_tokens;
    TS_CHECK_EQ_INT(nrecv, ref.out.num_recv_tokens);
    /* Received count == everyone's num_tokens_per_rank[me] (upstream identity). */
    int32_t *all_tpr = calloc((size_t)R * R, 4);
    ep_test_allgather(in.tpr, all_tpr, R, MPI_INT32_T);
    int64_t offs[65];
    TS_CHECK_STATUS(ts_ep_handle_get_recv_rank_offsets(h, offs, R + 1), TS_OK);
    int64_t expect = 0;
    for (int s = 0; s < R; s++) {
        TS_CHECK_EQ_INT(offs[s], expect);
        expect += all_tpr[s * R + me];
    }
    TS_CHECK_EQ_INT(offs[R], expect);
    TS_CHECK_EQ_INT(nrecv, expect);
    free(all_tpr);
    if (nrecv == ref.out.num_recv_tokens) {
        TS_CHECK(ep_bytes_equal(&res.recv_x, &ref.out.recv_x, nrecv));
        if (c->fp8) TS_CHECK(ep_bytes_equal(&res.recv_x_scales, &ref.out.recv_x_scales, nrecv));
        TS_CHECK(ep_bytes_equal(&res.recv_topk_idx, &ref.out.recv_topk_idx, nrecv));
        TS_CHECK(ep_bytes_equal(&res.recv_topk_weights, &ref.out.recv_topk_weights, nrecv));
        TS_CHECK(memcmp(res.recv_src_idx.data, ref.out.recv_src_idx.data, (size_t)nrecv * 4) == 0);
        TS_CHECK_EQ_INT(res.num_recv_tokens_per_expert.shape[0], c->experts_per_rank);
        TS_CHECK(memcmp(res.num_recv_tokens_per_expert.data, ref.out.num_recv_tokens_per_expert.data,
                        (size_t)c->experts_per_rank * 4) == 0);
    }
    /* Source blocks: src_idx ascending inside each, and per-expert counts == local ids seen. */
    const int32_t *src = res.recv_src_idx.data;
    for (int s = 0; s < R; s++)
        for (int64_t r = offs[s] + 1; r < offs[s + 1]; r++) TS_CHECK(src[r] > src[r - 1]);
    if (alignment == 1) {
        for (int e = 0; e < c->experts_per_rank; e++) {
            int64_t cnt = 0;
            for (int64_t i = 0; i < nrecv * K; i++) {
                const int64_t v = c->idx_dtype == TS_I64 ? ((int64_t *)res.recv_topk_idx.data)[i]
                                                          : ((int32_t *)res.recv_topk_idx.data)[i];
                cnt += v == e;
            }
            TS_CHECK_EQ_INT(((int32_t *)res.num_recv_tokens_per_expert.data)[e], cnt);
        }
    } else {
        for (int e = 0; e < c->experts_per_rank; e++)
            TS_CHECK(((int32_t *)res.num_recv_tokens_per_expert.data)[e] % alignment == 0);
    }
    const uint64_t hash1 = hash_result(&res);

    /* Combine: distinct rows per rank, optional biases, weights = the received ones. */
    const int64_t H = c->hidden, N = in.N;
    uint16_t *cx = malloc((size_t)((nrecv > 0 ? nrecv : 1) * H) * 2);
    for (int s = 0; s < R; s++)
        for (int64_t r = offs[s]; r < offs[s + 1]; r++)
            for (int64_t j = 0; j < H; j++) cx[r * H + j] = comb_val(me, s, src[r], j);
    uint16_t *b0 = malloc((size_t)(N * H + 1) * 2), *b1 = malloc((size_t)(N * H + 1) * 2);
    for (int64_t i = 0; i < N * H; i++) {
        b0[i] = ts_f32_to_bf16((float)(i % 7) - 3.0f);
        b1[i] = ts_f32_to_bf16((float)(i % 5) * 0.25f);
    }
    uint16_t *out = malloc((size_t)(N * H + 1) * 2), *rout = malloc((size_t)(N * H + 1) * 2);
    float *ow = malloc((size_t)(N * K + 1) * 4), *rw = malloc((size_t)(N * K + 1) * 4);
    ts_tensor tcx = ts_tensor_2d(cx, TS_BF16, nrecv, H), tb0 = ts_tensor_2d(b0, TS_BF16, N, H),
              tb1 = ts_tensor_2d(b1, TS_BF16, N, H), tout = ts_tensor_2d(out, TS_BF16, N, H),
              trout = ts_tensor_2d(rout, TS_BF16, N, H), tow = ts_tensor_2d(ow, TS_F32, N, K),
              trw = ts_tensor_2d(rw, TS_F32, N, K);
    ts_ep_config ccfg;
    ts_ep_get_combine_config(R, &ccfg);
    ccfg.num_sms = num_sms;
    TS_CHECK_STATUS(ts_ep_combine(buf, h, &tcx, &res.recv_topk_weights, biases ? &tb0 : NULL, biases ? &tb1 : NULL,
                                  &ccfg, &tout, &tow),
                    TS_OK);
    TS_CHECK_STATUS(ts_ep_reference_combine(MPI_COMM_WORLD, &ref, &tcx, &ref.out.recv_topk_weights,
                                            biases ? &tb0 : NULL, biases ? &tb1 : NULL, &trout, &trw),
                    TS_OK);
    TS_CHECK(N == 0 || memcmp(out, rout, (size_t)(N * H) * 2) == 0);
    TS_CHECK(N == 0 || memcmp(ow, rw, (size_t)(N * K) * 4) == 0);
    /* combined weights reconstruct the original ones (0 where -1) */
    for (int64_t t = 0; t < N; t++)
        for (int k = 0; k < K; k++) {
            const float want = ep_idx_get(&in, t, k, K) >= 0 ? in.w[t * K + k] : 0.0f;
            TS_CHECK_MSG(ow[t * K + k] == want, "combined weight [%lld][%d] %g != %g", (long long)t, k, ow[t * K + k], want);
        }

    /* Zero-copy: the same rows written straight into the combine area give the same bytes. */
    ts_tensor zx;
    TS_CHECK_STATUS(ts_ep_get_combine_buffer(buf, h, H, &zx), TS_OK);
    if (!TS_FAILED()) {
        TS_CHECK_EQ_INT(zx.shape[0], nrecv);
        memcpy(zx.data, cx, (size_t)(nrecv * H) * 2);
        uint16_t *zout = malloc((size_t)(N * H + 1) * 2);
        ts_tensor tz = ts_tensor_2d(zout, TS_BF16, N, H);
        TS_CHECK_STATUS(ts_ep_combine(buf, h, &zx, NULL, biases ? &tb0 : NULL, biases ? &tb1 : NULL, NULL, &tz, NULL),
                        TS_OK);
        TS_CHECK(N == 0 || memcmp(zout, rout, (size_t)(N * H) * 2) == 0);
        free(zout);
    }

    /* Identity experts (bf16): combine(recv_x) == bf16(fan-out * x), exact for these values. */
    if (!c->fp8) {
        TS_CHECK_STATUS(ts_ep_combine(buf, h, &res.recv_x, NULL, NULL, NULL, NULL, &tout, NULL), TS_OK);
        const uint16_t *x = in.x;
        for (int64_t t = 0; t < N; t++) {
            int fan = 0;
            for (int r = 0; r < R; r++) fan += in.in_rank[t * R + r];
            for (int64_t j = 0; j < H; j += 7) {
                /* a token sent nowhere sums nothing: +0 */
                const uint16_t want = fan ? ts_f32_to_bf16((float)fan * ts_bf16_to_f32(x[t * H + j])) : 0;
                if (out[t * H + j] != want) {
                    TS_CHECK_MSG(0, "fan-out combine token %lld col %lld: %04x != %04x", (long long)t, (long long)j,
                                 out[t * H + j], want);
                    t = N;
                    break;
                }
            }
        }
    }

    /* Cached dispatch with new rows replays the routing == reference with the same topk. */
    ep_fill_x(c, &in, c->seed + 99);
    ts_ep_dispatch_args ca = ep_args(c, &in, false);
    ca.handle = h;
    ca.num_tokens_per_rank = ca.num_tokens_per_expert = ca.is_token_in_rank = NULL;
    ts_ep_dispatch_result cres;
    TS_CHECK_STATUS(ts_ep_dispatch(buf, &ca, &cres, NULL), TS_OK);
    ts_ep_reference_result ref2;
    TS_CHECK_STATUS(ts_ep_reference_dispatch(MPI_COMM_WORLD, &in.tx, c->fp8 ? &in.ts : NULL, &in.tidx, &in.tw, in.E, 1,
                                             &ref2),
                    TS_OK);
    TS_CHECK_EQ_INT(cres.num_recv_tokens, nrecv);
    TS_CHECK(cres.recv_topk_idx.data == NULL && cres.num_recv_tokens_per_expert.shape[0] == 0);
    if (cres.num_recv_tokens == ref2.out.num_recv_tokens) {
        TS_CHECK(ep_bytes_equal(&cres.recv_x, &ref2.out.recv_x, nrecv));
        if (c->fp8) TS_CHECK(ep_bytes_equal(&cres.recv_x_scales, &ref2.out.recv_x_scales, nrecv));
    }
    ts_ep_reference_free(&ref2);

    /* num_worst_tokens: fixed rows, same prefix, -1 padding; no per-expert list. */
    ep_fill_x(c, &in, c->seed);
    int64_t total = in.N, worst = 0;
    ep_test_allreduce(&total, &worst, 1, MPI_INT64_T, MPI_SUM);
    worst += 3;
    ts_ep_dispatch_args wa = ep_args(c, &in, true);
    wa.num_worst_tokens = worst;
    ts_ep_dispatch_result wres;
    TS_CHECK_STATUS(ts_ep_dispatch(buf, &wa, &wres, NULL), TS_OK);
    TS_CHECK_EQ_INT(wres.recv_x.shape[0], worst);
    TS_CHECK_EQ_INT(wres.num_recv_tokens, nrecv);
    TS_CHECK_EQ_INT(wres.num_recv_tokens_per_expert.shape[0], 0);
    if (wres.num_recv_tokens == nrecv && !TS_FAILED()) {
        TS_CHECK(ep_bytes_equal(&wres.recv_x, &ref.out.recv_x, nrecv));
        TS_CHECK(ep_bytes_equal(&wres.recv_topk_idx, &ref.out.recv_topk_idx, nrecv));
        for (int64_t i = nrecv * K; i < worst * K; i++) {
            const int64_t v = c->idx_dtype == TS_I64 ? ((int64_t *)wres.recv_topk_idx.data)[i]
                                                      : ((int32_t *)wres.recv_topk_idx.data)[i];
            if (v != -1) {
                TS_CHECK_MSG(0, "padding topk entry %lld = %lld", (long long)i, (long long)v);
                break;
            }
        }
    }
    /* Repeated dispatch: same bytes. */
    ts_ep_dispatch_result rres;
    TS_CHECK_STATUS(ts_ep_dispatch(buf, &a, &rres, NULL), TS_OK);
    TS_CHECK(hash_result(&rres) == hash1);

    free(cx);
    free(b0);
    free(b1);
    free(out);
    free(rout);
    free(ow);
    free(rw);
    ts_ep_handle_destroy(h);
    ts_ep_reference_free(&ref);
    ep_free_inputs(&in);
}

static ts_ep_buffer *case_buffer(ts_test_ctx *ts_t_, int64_t max_tokens, int64_t hidden, int K) {
    int64_t bytes = 0;
    TS_CHECK_STATUS(ts_ep_get_buffer_size_hint(g_ep_size, max_tokens, hidden, K, 8, false, &bytes), TS_OK);
    return ep_test_buffer(ts_t_, bytes, TS_EP_TEST_TIMEOUT_S);
}

TS_TEST(ep_dispatch_bf16_random) {
    ts_ep_buffer *b = case_buffer(ts_t_, 64, 256, 8);
    if (!b) return;
    ep_case c = {.seed = 1, .hidden = 136, .max_tokens = 40, /* 136: a kernel tail */ .K = 4, .experts_per_rank = 4,
                 .idx_dtype = TS_I64, .routing = EP_ROUTE_RANDOM};
    run_case(ts_t_, b, &c, 1, false, 0);
    c.seed = 2;
    c.neg_frac = 0.3;
    c.idx_dtype = TS_I32;
    c.K = 6;
    run_case(ts_t_, b, &c, 4, true, 1);
    ts_ep_buffer_destroy(b);
}

TS_TEST(ep_dispatch_fp8_scales) {
    ts_ep_buffer *b = case_buffer(ts_t_, 64, 256, 8);
    if (!b) return;
    ep_case c = {.seed = 3, .hidden = 256, .max_tokens = 33, .K = 8, .experts_per_rank = 3, .fp8 = true,
                 .num_scales = 2, .scale_dtype = TS_F32, .scales_colmajor = true, .idx_dtype = TS_I64,
                 .neg_frac = 0.1};
    run_case(ts_t_, b, &c, 1, true, 0);
    /* packed ue8m0 as int32, odd column count, padded row-major rows */
    c.seed = 4;
    c.hidden = 160;
    c.num_scales = 5;
    c.scale_dtype = TS_I32;
    c.scales_colmajor = false;
    run_case(ts_t_, b, &c, 2, false, 2);
    /* one-byte scales, column-major */
    c.seed = 5;
    c.num_scales = 3;
    c.scale_dtype = TS_U8;
    c.scales_colmajor = true;
    run_case(ts_t_, b, &c, 1, false, 0);
    ts_ep_buffer_destroy(b);
}

TS_TEST(ep_dispatch_skewed_and_sparse) {
    ts_ep_buffer *b = case_buffer(ts_t_, 64, 256, 8);
    if (!b) return;
    /* everything to one rank, duplicate experts inside a row */
    ep_case c = {.seed = 6, .hidden = 128, .max_tokens = 48, .K = 6, .experts_per_rank = 2,
                 .idx_dtype = TS_I64, .routing = EP_ROUTE_SKEWED};
    run_case(ts_t_, b, &c, 1, true, 0);
    /* zero tokens on odd ranks */
    c.seed = 7;
    c.routing = EP_ROUTE_ZERO_ODD;
    c.experts_per_rank = 4;
    run_case(ts_t_, b, &c, 3, false, 0);
    /* every selection masked: nothing moves, combine gives just the biases */
    c.seed = 8;
    c.routing = EP_ROUTE_RANDOM;
    c.neg_frac = 1.0;
    run_case(ts_t_, b, &c, 1, true, 0);
    ts_ep_buffer_destroy(b);
}

TS_TEST(ep_dispatch_threads_larger) {
    ts_ep_buffer *b = case_buffer(ts_t_, 200, 256, 8);
    if (!b) return;
    ep_case c = {.seed = 9, .hidden = 256, .max_tokens = 200, .K = 8, .experts_per_rank = 8,
                 .idx_dtype = TS_I64, .neg_frac = 0.05};
    run_case(ts_t_, b, &c, 1, true, 2);
    ts_ep_buffer_destroy(b);
}

/* The internode path forced by the create option (every rank its own node, then nodes of two
 * ranks), whatever TS_EP_RANKS_PER_NODE says: the same checks against the MPI_Alltoallv
 * reference (dispatch, combine, zero copy, cached, num_worst_tokens), so bit-identical to it
 * and hence to the intranode path. */
TS_TEST(ep_dispatch_internode_forced) {
    for (int k = 1; k <= 2; k++) {
        if (g_ep_size % k != 0 || (k == 2 && g_ep_size < 4) || !ep_node_size_fits(k)) continue;
        int64_t nvl = 0, rdma = 0;
        TS_CHECK_STATUS(ts_ep_get_buffer_size_hint(g_ep_size, 64, 256, 8, 8, false, &nvl), TS_OK);
        TS_CHECK_STATUS(ts_ep_get_internode_buffer_size_hint(g_ep_size, k, 64, 256, 8, 8, false, &rdma), TS_OK);
        TS_CHECK(g_ep_size == k || rdma > 0);
        ts_ep_buffer_options o = ts_ep_default_buffer_options();
        o.timeout_s = TS_EP_TEST_TIMEOUT_S;
        o.ranks_per_node = k;
        ts_ep_buffer *b = NULL;
        TS_CHECK_STATUS(ts_ep_buffer_create(MPI_COMM_WORLD, nvl, rdma, false, &o, &b), TS_OK);
        if (!b) return;
        int32_t got = 0;
        TS_CHECK_STATUS(ts_ep_buffer_get_ranks_per_node(b, &got), TS_OK);
        TS_CHECK_EQ_INT(got, k);
        ep_case c = {.seed = 21 + (uint64_t)k, .hidden = 256, .max_tokens = 40, .K = 8, .experts_per_rank = 3,
                     .fp8 = true, .num_scales = 3, .scale_dtype = TS_F32, .scales_colmajor = true,
                     .idx_dtype = TS_I64, .neg_frac = 0.15};
        run_case(ts_t_, b, &c, 2, true, 0);
        ep_case s = {.seed = 31 + (uint64_t)k, .hidden = 136, .max_tokens = 48, .K = 6, .experts_per_rank = 2,
                     .idx_dtype = TS_I32, .routing = EP_ROUTE_SKEWED};
        run_case(ts_t_, b, &s, 1, false, 1);
        s.routing = EP_ROUTE_ZERO_ODD;
        run_case(ts_t_, b, &s, 1, true, 2);
        ts_ep_buffer_destroy(b);
    }
}
