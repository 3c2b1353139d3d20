/* get_dispatch_layout against a brute-force count, -1 selections and duplicates included. */
#include "ep_case.h"

TS_TEST(ep_layout_brute_force) {
    ts_ep_buffer *b = ep_test_buffer(ts_t_, 1 << 20, TS_EP_TEST_TIMEOUT_S);
    if (!b) return;
    const int R = g_ep_size;
    int32_t k_node = 0;
    TS_CHECK_STATUS(ts_ep_buffer_get_ranks_per_node(b, &k_node), TS_OK);
    if (k_node < 1 || R % k_node) k_node = R;
    const int nodes = R / k_node;
    for (int variant = 0; variant < 3; variant++) {
        ep_case c = {.seed = 100 + variant, .hidden = 16, .max_tokens = 70, .K = 5, .experts_per_rank = 3,
                     .idx_dtype = variant == 1 ? TS_I32 : TS_I64, .routing = variant == 2 ? EP_ROUTE_SKEWED : 0,
                     .neg_frac = 0.25};
        ep_inputs in;
        ep_make_inputs(&c, &in);
        int32_t rdma[64];
        for (int n = 0; n < 64; n++) rdma[n] = -5;
        ts_tensor trdma = ts_tensor_1d(rdma, TS_I32, nodes);
        TS_CHECK_STATUS(ts_ep_get_dispatch_layout(b, &in.tidx, in.E, &in.ttpr, &trdma, &in.ttpe, &in.tin), TS_OK);
        int64_t *per_exp = calloc((size_t)in.E, 8);
        int64_t *per_rank = calloc((size_t)R, 8);
        int64_t per_node[64] = {0};
        for (int64_t t = 0; t < in.N; t++) {
            bool node_hit[64] = {false};
            for (int r = 0; r < R; r++) {
                bool hit = false;
                for (int k = 0; k < c.K; k++) {
                    const int64_t e = ep_idx_get(&in, t, k, c.K);
                    if (e >= 0 && e / c.experts_per_rank == r) hit = true;
                }
                TS_CHECK(in.in_rank[t * R + r] == hit);
                per_rank[r] += hit;
                node_hit[r / k_node] |= hit;
            }
            for (int n = 0; n < nodes; n++) per_node[n] += node_hit[n];
            for (int k = 0; k < c.K; k++) {
                const int64_t e = ep_idx_get(&in, t, k, c.K);
                if (e >= 0) per_exp[e]++;
            }
        }
        for (int r = 0; r < R; r++) TS_CHECK_EQ_INT(in.tpr[r], per_rank[r]);
        for (int64_t e = 0; e < in.E; e++) TS_CHECK_EQ_INT(in.tpe[e], per_exp[e]);
        /* a token counts once per node it goes to (one node: once if it goes anywhere) */
        for (int n = 0; n < nodes; n++) TS_CHECK_EQ_INT(rdma[n], per_node[n]);
        free(per_exp);
        free(per_rank);
        ep_free_inputs(&in);
    }
    ts_ep_buffer_destroy(b);
}

TS_TEST(ep_layout_bad_input) {
    ts_ep_buffer *b = ep_test_buffer(ts_t_, 1 << 20, TS_EP_TEST_TIMEOUT_S);
    if (!b) return;
    const int R = g_ep_size;
    const int64_t E = 2 * R;
    int64_t idx[6] = {0, 1, -1, (int64_t)E - 1, 0, 0};
    ts_tensor tidx = ts_tensor_2d(idx, TS_I64, 3, 2);
    int32_t tpr[64], tpe[128];
    bool in_rank[3 * 64];
    for (int i = 0; i < 64; i++) tpr[i] = 77;
    ts_tensor ttpr = ts_tensor_1d(tpr, TS_I32, R), ttpe = ts_tensor_1d(tpe, TS_I32, E),
              tin = ts_tensor_2d(in_rank, TS_BOOL, 3, R);
    idx[4] = E; /* out of range */
    TS_CHECK_STATUS(ts_ep_get_dispatch_layout(b, &tidx, E, &ttpr, NULL, &ttpe, &tin), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "topk_idx[2][0]") != NULL);
    TS_CHECK_EQ_INT(tpr[0], 77); /* outputs untouched */
    idx[4] = -2;
    TS_CHECK_STATUS(ts_ep_get_dispatch_layout(b, &tidx, E, &ttpr, NULL, &ttpe, &tin), TS_ERR_INVALID_ARGUMENT);
    idx[4] = 0;
    if (R > 1) {
        ts_tensor ttpe1 = ts_tensor_1d(tpe, TS_I32, E + 1);
        TS_CHECK_STATUS(ts_ep_get_dispatch_layout(b, &tidx, E + 1, &ttpr, NULL, &ttpe1, &tin), TS_ERR_INVALID_ARGUMENT);
    }
    ts_tensor wrong = ts_tensor_1d(tpr, TS_I32, R + 1);
    TS_CHECK_STATUS(ts_ep_get_dispatch_layout(b, &tidx, E, &wrong, NULL, &ttpe, &tin), TS_ERR_SHAPE);
    ts_tensor f = ts_tensor_2d(idx, TS_F32, 3, 2);
    TS_CHECK_STATUS(ts_ep_get_dispatch_layout(b, &f, E, &ttpr, NULL, &ttpe, &tin), TS_ERR_DTYPE);
    TS_CHECK_STATUS(ts_ep_get_dispatch_layout(NULL, &tidx, E, &ttpr, NULL, &ttpe, &tin), TS_ERR_NULL_POINTER);
    TS_CHECK_STATUS(ts_ep_get_dispatch_layout(b, &tidx, E, &ttpr, NULL, &ttpe, &tin), TS_OK);
    TS_CHECK_EQ_INT(tpe[0], 3); /* duplicates inside a row count */
    ts_ep_buffer_destroy(b);
}
