/* Bad input and faults: a specific code on the rank at fault, TS_ERR_PEER (naming it) on the
 * others, outputs untouched, and the buffer still correct afterwards; a rank that does not
 * take part makes the others time out naming it. */
#include "ep_case.h"

static const ep_case k_small = {.seed = 50, .hidden = 128, .max_tokens = 20, .K = 4, .experts_per_rank = 2,
                                .idx_dtype = TS_I64};

/* A valid dispatch on `b` still matches the reference (no corruption left behind). */
static void check_still_works(ts_test_ctx *ts_t_, ts_ep_buffer *b) {
    ep_inputs in;
    ep_make_inputs(&k_small, &in);
    TS_CHECK_STATUS(ts_ep_get_dispatch_layout(b, &in.tidx, in.E, &in.ttpr, NULL, &in.ttpe, &in.tin), TS_OK);
    ts_ep_dispatch_args a = ep_args(&k_small, &in, true);
    ts_ep_dispatch_result res;
    TS_CHECK_STATUS(ts_ep_dispatch(b, &a, &res, NULL), TS_OK);
    ts_ep_reference_result ref;
    TS_CHECK_STATUS(ts_ep_reference_dispatch(MPI_COMM_WORLD, &in.tx, NULL, &in.tidx, &in.tw, in.E, 1, &ref), TS_OK);
    if (!TS_FAILED()) {
        TS_CHECK_EQ_INT(res.num_recv_tokens, ref.out.num_recv_tokens);
        TS_CHECK(ep_bytes_equal(&res.recv_x, &ref.out.recv_x, ref.out.num_recv_tokens));
        TS_CHECK(ep_bytes_equal(&res.recv_topk_idx, &ref.out.recv_topk_idx, ref.out.num_recv_tokens));
    }
    ts_ep_reference_free(&ref);
    ep_free_inputs(&in);
}

TS_TEST(ep_error_too_many_tokens_for_buffer) {
    /* 256 KiB segment: 128 KiB per area, while everything goes to rank 0 at 1 KiB a row. */
    ts_ep_buffer *b = ep_test_buffer(ts_t_, 256 << 10, TS_EP_TEST_TIMEOUT_S);
    if (!b) return;
    ep_case c = {.seed = 51, .hidden = 512, .max_tokens = 0, .K = 2, .experts_per_rank = 2, .idx_dtype = TS_I64,
                 .routing = EP_ROUTE_SKEWED};
    c.seed = (uint64_t)g_ep_size * 1000; /* target rank 0 */
    ep_inputs in;
    c.max_tokens = 130;
    ep_make_inputs(&c, &in);
    /* every rank sends max_tokens rows when it draws that many; make sure rank 0 overflows */
    TS_CHECK_STATUS(ts_ep_get_dispatch_layout(b, &in.tidx, in.E, &in.ttpr, NULL, &in.ttpe, &in.tin), TS_OK);
    int64_t n = in.N, total = 0;
    ep_test_allreduce(&n, &total, 1, MPI_INT64_T, MPI_SUM);
    ts_ep_dispatch_args a = ep_args(&c, &in, true);
    ts_ep_dispatch_result res;
    memset(&res, 0xAB, sizeof res);
    ts_ep_dispatch_result before = res;
    ts_ep_handle *h = (ts_ep_handle *)(uintptr_t)3;
    ts_status st = ts_ep_dispatch(b, &a, &res, &h);
    if (total * 1024 > (128 << 10)) {
        TS_CHECK_STATUS(st, TS_ERR_INVALID_ARGUMENT);
        TS_CHECK(strstr(ts_last_error(), "rank 0") != NULL);
        TS_CHECK(memcmp(&res, &before, sizeof res) == 0);
        TS_CHECK(h == (ts_ep_handle *)(uintptr_t)3);
    } else {
        TS_CHECK_STATUS(st, TS_OK);
        if (st == TS_OK) ts_ep_handle_destroy(h);
    }
    ep_free_inputs(&in);
    check_still_works(ts_t_, b);
    ts_ep_buffer_destroy(b);
}

TS_TEST(ep_error_bad_input_one_rank) {
    ts_ep_buffer *b = ep_test_buffer(ts_t_, 1 << 20, TS_EP_TEST_TIMEOUT_S);
    if (!b) return;
    const int R = g_ep_size, bad = R - 1;
    ep_inputs in;
    ep_make_inputs(&k_small, &in);
    TS_CHECK_STATUS(ts_ep_get_dispatch_layout(b, &in.tidx, in.E, &in.ttpr, NULL, &in.ttpe, &in.tin), TS_OK);
    ts_ep_dispatch_args a = ep_args(&k_small, &in, true);
    ts_ep_dispatch_result res;

    /* top-k id >= num_experts on the last rank */
    int64_t saved = in.N > 0 ? ((int64_t *)in.idx)[0] : 0;
    if (g_ep_rank == bad && in.N > 0) ((int64_t *)in.idx)[0] = in.E;
    ts_status st = ts_ep_dispatch(b, &a, &res, NULL);
    if (in.N > 0 || g_ep_rank != bad) {
        int any_tokens = in.N > 0, bad_has = 0;
        if (g_ep_rank == bad) bad_has = any_tokens;
        ep_test_allreduce(MPI_IN_PLACE, &bad_has, 1, MPI_INT, MPI_MAX);
        if (bad_has) ep_expect_status(ts_t_, st, TS_ERR_INVALID_ARGUMENT, bad);
    } else {
        int bad_has = 0;
        ep_test_allreduce(MPI_IN_PLACE, &bad_has, 1, MPI_INT, MPI_MAX);
    }
    if (g_ep_rank == bad && in.N > 0) ((int64_t *)in.idx)[0] = saved;

    /* NULL x on the last rank */
    const ts_tensor *x = a.x;
    if (g_ep_rank == bad) a.x = NULL;
    st = ts_ep_dispatch(b, &a, &res, NULL);
    ep_expect_status(ts_t_, st, TS_ERR_NULL_POINTER, bad);
    a.x = x;

    /* layout that does not match is_token_in_rank */
    if (g_ep_rank == bad) in.tpr[0] += 1;
    st = ts_ep_dispatch(b, &a, &res, NULL);
    ep_expect_status(ts_t_, st, TS_ERR_INVALID_ARGUMENT, bad);
    if (g_ep_rank == bad) in.tpr[0] -= 1;

    /* num_worst_tokens smaller than what a rank receives (rank 0 receives rank 0's tokens) */
    ts_ep_dispatch_args w = a;
    w.num_worst_tokens = 1;
    int64_t recv0 = in.tpr[0];
    ep_test_allreduce(MPI_IN_PLACE, &recv0, 1, MPI_INT64_T, MPI_SUM);
    st = ts_ep_dispatch(b, &w, &res, NULL);
    if (recv0 > 1) TS_CHECK_STATUS(st, TS_ERR_INVALID_ARGUMENT);

    if (R > 1) {
        /* experts not divisible by ranks: every rank rejects its own arguments */
        ts_tensor tpe = ts_tensor_1d(in.tpe, TS_I32, in.E - 1);
        ts_ep_dispatch_args e = a;
        e.num_tokens_per_expert = &tpe;
        st = ts_ep_dispatch(b, &e, &res, NULL);
        TS_CHECK_STATUS(st, TS_ERR_INVALID_ARGUMENT);
        /* hidden differs across ranks: every rank sees it */
        ts_tensor xs = in.tx;
        if (g_ep_rank == 1) xs.shape[1] = 64;
        ts_ep_dispatch_args m = a;
        m.x = &xs;
        st = ts_ep_dispatch(b, &m, &res, NULL);
        TS_CHECK_STATUS(st, TS_ERR_SHAPE);
        TS_CHECK(strstr(ts_last_error(), "hidden") != NULL && strstr(ts_last_error(), "rank 1") != NULL);
    }
    ep_free_inputs(&in);
    check_still_works(ts_t_, b);
    ts_ep_buffer_destroy(b);
}

TS_TEST(ep_error_combine_bad_input) {
    ts_ep_buffer *b = ep_test_buffer(ts_t_, 1 << 20, TS_EP_TEST_TIMEOUT_S);
    if (!b) return;
    ep_inputs in;
    ep_make_inputs(&k_small, &in);
    TS_CHECK_STATUS(ts_ep_get_dispatch_layout(b, &in.tidx, in.E, &in.ttpr, NULL, &in.ttpe, &in.tin), TS_OK);
    ts_ep_dispatch_args a = ep_args(&k_small, &in, true);
    ts_ep_dispatch_result res;
    ts_ep_handle *h = NULL;
    TS_CHECK_STATUS(ts_ep_dispatch(b, &a, &res, &h), TS_OK);
    if (!h) return;
    const int64_t N = in.N, H = k_small.hidden;
    uint16_t *out = calloc((size_t)(N * H + 1), 2);
    ts_tensor tout = ts_tensor_2d(out, TS_BF16, N, H), short_x = res.recv_x;
    short_x.shape[0] = res.num_recv_tokens > 0 ? res.num_recv_tokens - 1 : 0;
    const int bad = 0;
    /* rank 0 passes too few rows when it has any; the rest pass a bad output dtype otherwise */
    ts_tensor tx = res.recv_x;
    if (g_ep_rank == bad) {
        if (res.num_recv_tokens > 0) tx = short_x;
        else tx.dtype = TS_F16;
    }
    ts_status st = ts_ep_combine(b, h, &tx, NULL, NULL, NULL, NULL, &tout, NULL);
    ep_expect_status(ts_t_, st, g_ep_rank == bad && res.num_recv_tokens == 0 ? TS_ERR_DTYPE : TS_ERR_SHAPE, bad);
    TS_CHECK(N == 0 || out[0] == 0); /* untouched */
    TS_CHECK_STATUS(ts_ep_combine(b, h, &res.recv_x, NULL, NULL, NULL, NULL, &tout, NULL), TS_OK);
    free(out);
    ts_ep_handle_destroy(h);
    ep_free_inputs(&in);
    ts_ep_buffer_destroy(b);
}

TS_TEST(ep_error_rank_stops_participating) {
    if (g_ep_size < 2) return;
    ts_ep_buffer *b = ep_test_buffer(ts_t_, 1 << 20, 1.5);
    if (!b) return;
    const int absent = g_ep_size - 1;
    ep_inputs in;
    ep_make_inputs(&k_small, &in);
    TS_CHECK_STATUS(ts_ep_get_dispatch_layout(b, &in.tidx, in.E, &in.ttpr, NULL, &in.ttpe, &in.tin), TS_OK);
    if (g_ep_rank != absent) {
        ts_ep_dispatch_args a = ep_args(&k_small, &in, true);
        ts_ep_dispatch_result res;
        ts_status st = ts_ep_dispatch(b, &a, &res, NULL);
        TS_CHECK_STATUS(st, TS_ERR_TIMEOUT);
        char want[32];
        snprintf(want, sizeof want, "for rank %d", absent);
        TS_CHECK_MSG(strstr(ts_last_error(), want) != NULL, "timeout message does not name rank %d: %s", absent,
                     ts_last_error());
        /* the buffer refuses further use */
        TS_CHECK_STATUS(ts_ep_dispatch(b, &a, &res, NULL), TS_ERR_PEER);
    }
    ep_test_barrier();
    ep_free_inputs(&in);
    ts_ep_buffer_destroy(b);
}
