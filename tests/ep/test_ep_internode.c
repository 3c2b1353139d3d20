/* Internode specifics (staging capacity, per-node layout) and the async start + wait calls,
 * whose results must equal the synchronous calls' bytes. */
#include "ep_case.h"

static ts_ep_buffer *node_buffer(ts_test_ctx *ts_t_, int k, int64_t nvl, int64_t rdma) {
    ts_ep_buffer_options o = ts_ep_default_buffer_options();
    o.timeout_s = TS_EP_TEST_TIMEOUT_S;
    o.ranks_per_node = k;
    ts_ep_buffer *b = NULL;
    TS_CHECK_STATUS(ts_ep_buffer_create(MPI_COMM_WORLD, nvl, rdma, false, &o, &b), TS_OK);
    return b;
}

/* A staging area too small for the traffic between nodes: every rank returns the same
 * specific code, naming the rank that would overflow; the buffer stays usable. */
TS_TEST(ep_internode_staging_too_small) {
    if (g_ep_size < 2) return;
    ts_ep_buffer *b = node_buffer(ts_t_, 1, 4 << 20, 4096);
    if (!b) return;
    ep_case c = {.seed = 41, .hidden = 512, .max_tokens = 30, .K = 4, .experts_per_rank = 2, .idx_dtype = TS_I64};
    ep_inputs in;
    ep_make_inputs(&c, &in);
    TS_CHECK_STATUS(ts_ep_get_dispatch_layout(b, &in.tidx, in.E, &in.ttpr, NULL, &in.ttpe, &in.tin), TS_OK);
    ts_ep_dispatch_args a = ep_args(&c, &in, true);
    ts_ep_dispatch_result res;
    /* rank 0 draws max_tokens rows of 1 KiB: more than the 2 KiB half to some other node */
    TS_CHECK_STATUS(ts_ep_dispatch(b, &a, &res, NULL), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_MSG(strstr(ts_last_error(), "num_rdma_bytes") != NULL, "message: %s", ts_last_error());
    /* nothing to move: still works */
    ep_case z = c;
    z.max_tokens = 0;
    ep_inputs zin;
    ep_make_inputs(&z, &zin);
    TS_CHECK_STATUS(ts_ep_get_dispatch_layout(b, &zin.tidx, zin.E, &zin.ttpr, NULL, &zin.ttpe, &zin.tin), TS_OK);
    ts_ep_dispatch_args za = ep_args(&z, &zin, true);
    TS_CHECK_STATUS(ts_ep_dispatch(b, &za, &res, NULL), TS_OK);
    TS_CHECK_EQ_INT(res.num_recv_tokens, 0);
    ep_free_inputs(&zin);
    ep_free_inputs(&in);
    ts_ep_buffer_destroy(b);
}

/* num_tokens_per_rdma_rank: per node, a token counted once per node; dispatch checks it. */
TS_TEST(ep_internode_rdma_rank_counts) {
    if (g_ep_size < 2) return;
    const int R = g_ep_size, k = R % 2 == 0 && R >= 4 && ep_node_size_fits(2) ? 2 : 1, nodes = R / k;
    ts_ep_buffer *b = node_buffer(ts_t_, k, 1 << 20, 0);
    if (!b) return;
    ep_case c = {.seed = 43, .hidden = 64, .max_tokens = 25, .K = 5, .experts_per_rank = 2, .idx_dtype = TS_I64,
                 .neg_frac = 0.2};
    ep_inputs in;
    ep_make_inputs(&c, &in);
    int32_t per_node[64];
    ts_tensor tn = ts_tensor_1d(per_node, TS_I32, nodes);
    TS_CHECK_STATUS(ts_ep_get_dispatch_layout(b, &in.tidx, in.E, &in.ttpr, &tn, &in.ttpe, &in.tin), TS_OK);
    for (int n = 0; n < nodes; n++) {
        int64_t want = 0;
        for (int64_t t = 0; t < in.N; t++) {
            bool hit = false;
            for (int j = 0; j < k; j++) hit |= in.in_rank[t * R + n * k + j];
            want += hit;
        }
        TS_CHECK_EQ_INT(per_node[n], want);
    }
    ts_ep_dispatch_args a = ep_args(&c, &in, true);
    a.num_tokens_per_rdma_rank = &tn;
    ts_ep_dispatch_result res;
    TS_CHECK_STATUS(ts_ep_dispatch(b, &a, &res, NULL), TS_OK);
    /* a stale per-node count on rank 0 is that rank's error */
    if (g_ep_rank == 0) per_node[nodes - 1] += 1;
    ts_status st = ts_ep_dispatch(b, &a, &res, NULL);
    ep_expect_status(ts_t_, st, TS_ERR_INVALID_ARGUMENT, 0);
    ep_free_inputs(&in);
    ts_ep_buffer_destroy(b);
}

/* Local work overlapping the async call: a checksum the test can verify. */
static uint64_t busy_work(int64_t n) {
    uint64_t h = 1469598103934665603ull;
    for (int64_t i = 0; i < n; i++) h = (h ^ (uint64_t)i) * 1099511628211ull;
    return h;
}

/* dispatch_start / combine_start + wait == the synchronous calls, byte for byte, with the
 * machines as nodes (one node when every rank is on one machine) and with every rank its own
 * node; a call made while one is in flight is refused; an event waits once. */
TS_TEST(ep_async_matches_sync) {
    const int R = g_ep_size;
    for (int k = g_ep_machine_ranks; k >= 1; k = k == 1 ? 0 : 1) {
        int64_t nvl = 0;
        TS_CHECK_STATUS(ts_ep_get_buffer_size_hint(R, 48, 256, 6, 0, false, &nvl), TS_OK);
        ts_ep_buffer *b = node_buffer(ts_t_, k, nvl, 0);
        if (!b) return;
        ep_case c = {.seed = 51 + (uint64_t)k, .hidden = 256, .max_tokens = 48, .K = 6, .experts_per_rank = 2,
                     .idx_dtype = TS_I64, .neg_frac = 0.1};
        ep_inputs in;
        ep_make_inputs(&c, &in);
        TS_CHECK_STATUS(ts_ep_get_dispatch_layout(b, &in.tidx, in.E, &in.ttpr, NULL, &in.ttpe, &in.tin), TS_OK);
        ts_ep_dispatch_args a = ep_args(&c, &in, true);
        /* synchronous run: keep copies of its outputs */
        ts_ep_dispatch_result sres;
        ts_ep_handle *sh = NULL;
        TS_CHECK_STATUS(ts_ep_dispatch(b, &a, &sres, &sh), TS_OK);
        if (TS_FAILED()) {
            ts_ep_handle_destroy(sh);
            ep_free_inputs(&in);
            ts_ep_buffer_destroy(b);
            return;
        }
        const int64_t nrecv = sres.num_recv_tokens, H = c.hidden, N = in.N, K = c.K;
        uint16_t *sx = malloc((size_t)(nrecv * H + 1) * 2);
        int64_t *sidx = malloc((size_t)(nrecv * K + 1) * 8);
        memcpy(sx, sres.recv_x.data, (size_t)(nrecv * H) * 2);
        memcpy(sidx, sres.recv_topk_idx.data, (size_t)(nrecv * K) * 8);
        uint16_t *sout = malloc((size_t)(N * H + 1) * 2), *aout = malloc((size_t)(N * H + 1) * 2);
        ts_tensor tso = ts_tensor_2d(sout, TS_BF16, N, H), tao = ts_tensor_2d(aout, TS_BF16, N, H);
        ts_tensor tsx = ts_tensor_2d(sx, TS_BF16, nrecv, H);
        TS_CHECK_STATUS(ts_ep_combine(b, sh, &tsx, NULL, NULL, NULL, NULL, &tso, NULL), TS_OK);

        /* async dispatch with local work in between */
        ts_ep_dispatch_result ares;
        ts_ep_handle *ah = NULL;
        ts_ep_event *ev = NULL;
        TS_CHECK_STATUS(ts_ep_dispatch_start(b, &a, &ares, &ah, &ev), TS_OK);
        const uint64_t w1 = busy_work(200000);
        TS_CHECK_STATUS(ts_ep_dispatch(b, &a, &sres, NULL), TS_ERR_INVALID_ARGUMENT); /* in flight */
        TS_CHECK_STATUS(ts_ep_event_wait(ev), TS_OK);
        TS_CHECK_STATUS(ts_ep_event_wait(ev), TS_ERR_INVALID_ARGUMENT); /* spent */
        TS_CHECK(w1 == busy_work(200000));
        TS_CHECK_EQ_INT(ares.num_recv_tokens, nrecv);
        if (ares.num_recv_tokens == nrecv && ah) {
            TS_CHECK(nrecv == 0 || memcmp(ares.recv_x.data, sx, (size_t)(nrecv * H) * 2) == 0);
            TS_CHECK(nrecv == 0 || memcmp(ares.recv_topk_idx.data, sidx, (size_t)(nrecv * K) * 8) == 0);
            /* async combine of the same rows with the async handle */
            TS_CHECK_STATUS(ts_ep_combine_start(b, ah, &tsx, NULL, NULL, NULL, NULL, &tao, NULL, &ev), TS_OK);
            const uint64_t w2 = busy_work(100000);
            TS_CHECK_STATUS(ts_ep_event_wait(ev), TS_OK);
            TS_CHECK(w2 == busy_work(100000));
            TS_CHECK(N == 0 || memcmp(sout, aout, (size_t)(N * H) * 2) == 0);
            /* the call's own argument error comes from the wait, on every rank alike */
            ts_tensor bad = ts_tensor_2d(aout, TS_BF16, N + 1, H);
            TS_CHECK_STATUS(ts_ep_combine_start(b, ah, &tsx, NULL, NULL, NULL, NULL, &bad, NULL, &ev), TS_OK);
            ts_status st = ts_ep_event_wait(ev);
            TS_CHECK(st == TS_ERR_SHAPE || st == TS_ERR_PEER);
            /* the buffer is usable after it */
            TS_CHECK_STATUS(ts_ep_combine(b, ah, &tsx, NULL, NULL, NULL, NULL, &tao, NULL), TS_OK);
            TS_CHECK(N == 0 || memcmp(sout, aout, (size_t)(N * H) * 2) == 0);
        }
        ts_ep_handle_destroy(ah);
        ts_ep_handle_destroy(sh);
        free(sx);
        free(sidx);
        free(sout);
        free(aout);
        ep_free_inputs(&in);
        ts_ep_buffer_destroy(b);
        if (k == 1) break;
    }
}
