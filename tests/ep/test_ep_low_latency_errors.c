/* Low-latency bad input and faults: the specific code on the rank at fault, TS_ERR_PEER naming
 * it elsewhere, outputs untouched, the buffer still correct afterwards; a rank that does not
 * send makes the others time out naming it. */
#include "test_ep_low_latency_util.h"
#include "ep/ep_internal.h" /* the buffer's communicator, probed for stale messages */

static const ll_case k_err = {.seed = 31, .T = 8, .H = 256, .K = 3, .El = 3, .neg_frac = 0.1};

typedef struct ll_bufs {
    uint16_t *rx;
    int32_t cnt[16];
    ts_tensor trx, tcnt;
} ll_bufs;

static void bufs_make(const ll_world *w, ll_bufs *o) {
    const int64_t n = w->El * w->R * w->T * w->H;
    o->rx = malloc((size_t)n * 2);
    memset(o->rx, 0x5A, (size_t)n * 2);
    for (int i = 0; i < 16; i++) o->cnt[i] = -7;
    o->trx = ts_tensor_3d(o->rx, TS_BF16, w->El, w->R * w->T, w->H);
    o->tcnt = ts_tensor_1d(o->cnt, TS_I32, w->El);
}

static bool bufs_untouched(const ll_world *w, const ll_bufs *o) {
    const int64_t n = w->El * w->R * w->T * w->H * 2;
    for (int64_t i = 0; i < n; i++)
        if (((uint8_t *)o->rx)[i] != 0x5A) return false;
    for (int i = 0; i < 16; i++)
        if (o->cnt[i] != -7) return false;
    return true;
}

static ts_status disp(ts_ep_buffer *b, ll_world *w, ll_bufs *o, const ts_tensor *x, const ts_tensor *idx, int64_t T,
                      int64_t E, ts_ep_ll_handle **h) {
    ts_ep_ll_dispatch_args a;
    memset(&a, 0, sizeof a);
    a.x = x;
    a.topk_idx = idx;
    a.num_max_dispatch_tokens_per_rank = T;
    a.num_experts = E;
    ts_ep_ll_dispatch_out out = {&o->trx, NULL, &o->tcnt};
    (void)w;
    return ts_ep_low_latency_dispatch(b, &a, &out, h, NULL);
}

static void still_works(ts_test_ctx *ts_t_, ts_ep_buffer *b, ll_world *w) {
    ll_bufs o;
    bufs_make(w, &o);
    ts_ep_ll_handle *h = NULL;
    TS_CHECK_STATUS(disp(b, w, &o, &w->tx, &w->tidx, w->T, w->E, &h), TS_OK);
    if (!TS_FAILED()) {
        /* rows of expert 0 here: the gathered inputs say how many, and the first is right */
        int64_t want = 0;
        const uint16_t *first = NULL;
        for (int s = 0; s < w->R; s++)
            for (int64_t t = 0; t < w->N[s]; t++)
                for (int k = 0; k < w->K; k++)
                    if (w->idx[(s * w->T + t) * w->K + k] == g_ep_rank * w->El) {
                        if (!first) first = w->x + (s * w->T + t) * w->H;
                        want++;
                    }
        TS_CHECK_EQ_INT(o.cnt[0], want);
        if (first) TS_CHECK(memcmp(o.rx, first, (size_t)w->H * 2) == 0);
    }
    ts_ep_ll_handle_destroy(h);
    free(o.rx);
}

/* Across nodes every message of a failed call is taken out of MPI's queue by the next call
 * on its half (tags repeat every 2048 calls: a stale one would be matched by a later call). */
static void nothing_queued(ts_test_ctx *ts_t_, ts_ep_buffer *b, ll_world *w) {
    still_works(ts_t_, b, w); /* the failed call's half again: its drain */
    int flag = 0;
    MPI_Status s;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, b->comm, &flag, &s);
    TS_CHECK_MSG(!flag, "rank %d: a message (tag %d from rank %d) is left in MPI's queue", g_ep_rank,
                 flag ? s.MPI_TAG : 0, flag ? s.MPI_SOURCE : 0);
}

TS_TEST(ep_ll_error_too_many_tokens_one_rank) {
    ll_world w;
    ts_ep_buffer *b = ll_world_buffer(ts_t_, &k_err, &w, TS_EP_TEST_TIMEOUT_S);
    if (!b) return;
    const int bad = g_ep_size - 1;
    /* the bad rank passes T + 1 tokens */
    uint16_t *bx = calloc((size_t)((w.T + 1) * w.H), 2);
    int64_t *bi = calloc((size_t)((w.T + 1) * w.K), 8);
    for (int64_t i = 0; i < (w.T + 1) * w.K; i++) bi[i] = i % w.E;
    ts_tensor tbx = ts_tensor_2d(bx, TS_BF16, w.T + 1, w.H), tbi = ts_tensor_2d(bi, TS_I64, w.T + 1, w.K);
    ll_bufs o;
    bufs_make(&w, &o);
    ts_ep_ll_handle *h = (ts_ep_ll_handle *)(uintptr_t)3;
    const bool me_bad = g_ep_rank == bad;
    ts_status st = disp(b, &w, &o, me_bad ? &tbx : &w.tx, me_bad ? &tbi : &w.tidx, w.T, w.E, &h);
    ep_expect_status(ts_t_, st, TS_ERR_INVALID_ARGUMENT, g_ep_size > 1 ? bad : -1);
    TS_CHECK(bufs_untouched(&w, &o));
    if (st == TS_OK || h != (ts_ep_ll_handle *)(uintptr_t)3) {
        TS_CHECK(me_bad);
        if (st == TS_OK) ts_ep_ll_handle_destroy(h);
    }
    free(o.rx);
    still_works(ts_t_, b, &w);
    nothing_queued(ts_t_, b, &w);
    free(bx);
    free(bi);
    ts_ep_buffer_destroy(b);
    ll_free_world(&w);
}

TS_TEST(ep_ll_error_bad_expert_id_one_rank) {
    ll_world w;
    ts_ep_buffer *b = ll_world_buffer(ts_t_, &k_err, &w, TS_EP_TEST_TIMEOUT_S);
    if (!b) return;
    const int bad = 0; /* rank 0 always has tokens */
    int64_t *idx = w.idx + g_ep_rank * w.T * w.K;
    const int64_t saved = idx[0];
    if (g_ep_rank == bad) idx[0] = w.E; /* >= num_experts */
    ll_bufs o;
    bufs_make(&w, &o);
    ts_ep_ll_handle *h = NULL;
    ts_status st = disp(b, &w, &o, &w.tx, &w.tidx, w.T, w.E, &h);
    ep_expect_status(ts_t_, st, TS_ERR_INVALID_ARGUMENT, g_ep_size > 1 ? bad : -1);
    TS_CHECK(bufs_untouched(&w, &o));
    if (st == TS_OK) ts_ep_ll_handle_destroy(h);
    idx[0] = saved;
    free(o.rx);
    still_works(ts_t_, b, &w);
    nothing_queued(ts_t_, b, &w);
    ts_ep_buffer_destroy(b);
    ll_free_world(&w);
}

TS_TEST(ep_ll_error_experts_not_divisible) {
    ll_world w;
    ts_ep_buffer *b = ll_world_buffer(ts_t_, &k_err, &w, TS_EP_TEST_TIMEOUT_S);
    if (!b) return;
    ll_bufs o;
    bufs_make(&w, &o);
    ts_ep_ll_handle *h = NULL;
    /* every rank passes E + 1 (not a multiple of R when R > 1; ids stay valid) */
    const int64_t E = g_ep_size > 1 ? w.E + 1 : 0;
    ts_status st = disp(b, &w, &o, &w.tx, &w.tidx, w.T, E, &h);
    if (g_ep_size > 1) {
        /* each rank rejects its own arguments; a peer's rejection may be seen first */
        TS_CHECK(st == TS_ERR_INVALID_ARGUMENT);
        TS_CHECK(strstr(ts_last_error(), "num_experts") != NULL);
    } else {
        TS_CHECK_STATUS(st, TS_ERR_INVALID_ARGUMENT);
    }
    TS_CHECK(bufs_untouched(&w, &o));
    free(o.rx);
    still_works(ts_t_, b, &w);
    nothing_queued(ts_t_, b, &w);
    ts_ep_buffer_destroy(b);
    ll_free_world(&w);
}

TS_TEST(ep_ll_error_stalled_rank_times_out) {
    if (g_ep_size < 2) return;
    ll_world w;
    ts_ep_buffer *b = ll_world_buffer(ts_t_, &k_err, &w, 1.0);
    if (!b) return;
    const int stalled = g_ep_size - 1;
    if (g_ep_rank != stalled) {
        ll_bufs o;
        bufs_make(&w, &o);
        ts_ep_ll_handle *h = NULL;
        ts_status st = disp(b, &w, &o, &w.tx, &w.tidx, w.T, w.E, &h);
        TS_CHECK_STATUS(st, TS_ERR_TIMEOUT);
        char want[32];
        snprintf(want, sizeof want, "for rank %d", stalled);
        TS_CHECK_MSG(strstr(ts_last_error(), want) != NULL, "%s", ts_last_error());
        TS_CHECK(bufs_untouched(&w, &o));
        ts_ep_ll_handle_destroy(h);
        /* the buffer is unusable now */
        TS_CHECK_STATUS(disp(b, &w, &o, &w.tx, &w.tidx, w.T, w.E, &h), TS_ERR_PEER);
        free(o.rx);
    }
    ep_test_barrier();
    ts_ep_buffer_destroy(b);
    ll_free_world(&w);
}

TS_TEST(ep_ll_buffer_create_and_hint) {
    int64_t bytes = 0;
    TS_CHECK_STATUS(ts_ep_get_low_latency_rdma_size_hint(128, 7168, 8, 256, &bytes), TS_OK);
    TS_CHECK(bytes > (int64_t)256 * 128 * 7168 * 2 * 2); /* both halves hold the bf16 worst case */
    TS_CHECK_STATUS(ts_ep_get_low_latency_rdma_size_hint(128, 7000, 8, 256, &bytes), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_ep_get_low_latency_rdma_size_hint(128, 7168, 3, 256, &bytes), TS_ERR_INVALID_ARGUMENT);
    ts_ep_buffer *b = NULL;
    /* rdma bytes without low_latency_mode: the internode staging of normal mode */
    TS_CHECK_STATUS(ts_ep_buffer_create(MPI_COMM_WORLD, 1 << 20, 1 << 20, false, NULL, &b), TS_OK);
    TS_CHECK_STATUS(ts_ep_buffer_destroy(b), TS_OK);
    b = NULL;
    TS_CHECK_STATUS(ts_ep_buffer_create(MPI_COMM_WORLD, 1 << 20, 0, true, NULL, &b), TS_ERR_INVALID_ARGUMENT);
    /* LL only, no nvl area: normal mode then refuses for lack of room, LL works */
    ll_world w;
    ll_make_world(&k_err, &w);
    int64_t need = 0;
    TS_CHECK_STATUS(ts_ep_get_low_latency_rdma_size_hint(w.T, w.H, w.R, w.E, &need), TS_OK);
    /* (across nodes too: LL needs no nvl area there either) */
    TS_CHECK_STATUS(ts_ep_buffer_create(MPI_COMM_WORLD, 0, need, true, NULL, &b), TS_OK);
    if (b) {
        still_works(ts_t_, b, &w);
        ts_ep_buffer_destroy(b);
    }
    /* a normal-mode buffer refuses LL calls */
    b = NULL;
    TS_CHECK_STATUS(ts_ep_buffer_create(MPI_COMM_WORLD, 1 << 20, 0, false, NULL, &b), TS_OK);
    if (b) {
        ll_bufs o;
        bufs_make(&w, &o);
        ts_ep_ll_handle *h = NULL;
        TS_CHECK_STATUS(disp(b, &w, &o, &w.tx, &w.tidx, w.T, w.E, &h), TS_ERR_INVALID_ARGUMENT);
        free(o.rx);
        ts_ep_buffer_destroy(b);
    }
    ll_free_world(&w);
}

TS_TEST(ep_ll_error_expert_rows_beyond_T) {
    /* a rank whose tokens list one expert more than T times in all (duplicates in the top-k)
     * would overflow [E/R, R*T] at the receiver: rejected there, TS_ERR_PEER elsewhere */
    ll_world w;
    ts_ep_buffer *b = ll_world_buffer(ts_t_, &k_err, &w, TS_EP_TEST_TIMEOUT_S);
    if (!b) return;
    const int bad = 0; /* rank 0 has T tokens */
    int64_t *idx = w.idx + g_ep_rank * w.T * w.K;
    int64_t *saved = malloc((size_t)(w.T * w.K) * 8);
    memcpy(saved, idx, (size_t)(w.T * w.K) * 8);
    if (g_ep_rank == bad)
        for (int64_t i = 0; i < w.T * w.K; i++) idx[i] = 1; /* expert 1, K times per token */
    ll_bufs o;
    bufs_make(&w, &o);
    ts_ep_ll_handle *h = NULL;
    ts_status st = disp(b, &w, &o, &w.tx, &w.tidx, w.T, w.E, &h);
    ep_expect_status(ts_t_, st, TS_ERR_INVALID_ARGUMENT, g_ep_size > 1 ? bad : -1);
    if (g_ep_rank == bad) TS_CHECK(strstr(ts_last_error(), "expert 1") != NULL);
    TS_CHECK(bufs_untouched(&w, &o));
    if (st == TS_OK) ts_ep_ll_handle_destroy(h);
    memcpy(idx, saved, (size_t)(w.T * w.K) * 8);
    free(saved);
    free(o.rx);
    still_works(ts_t_, b, &w);
    ts_ep_buffer_destroy(b);
    ll_free_world(&w);
}
