/* Low-latency dispatch and combine: every rank knows every rank's inputs (all-gathered), builds
 * what it must receive and what combine must return with plain scalar loops, and compares
 * exactly (byte for byte / bit for bit), plus float64 tolerance checks, upstream's identities,
 * hooks, zero copy, double buffering and repeatability. */
#include "test_ep_low_latency_util.h"

typedef struct ll_out {
    void *x;
    void *scales;
    int32_t *count;
    ts_tensor tx, ts, tc;
    int32_t cum[64];
    int64_t wait[64];
    ts_tensor tcum, twait;
} ll_out;

static void ll_alloc_out(const ll_world *w, ll_out *o, bool fp8, bool ue8m0) {
    memset(o, 0, sizeof *o);
    const int64_t S = w->R * w->T, El = w->El, H = w->H;
    const int64_t xb = fp8 ? 1 : 2;
    o->x = malloc((size_t)(El * S * H * xb));
    memset(o->x, 0xEE, (size_t)(El * S * H * xb));
    o->tx = ts_tensor_3d(o->x, fp8 ? TS_E4M3 : TS_BF16, El, S, H);
    if (fp8) {
        const int64_t ns = ue8m0 ? H / 512 : H / 128;
        o->scales = malloc((size_t)(El * S * ns * 4));
        memset(o->scales, 0xEE, (size_t)(El * S * ns * 4));
        /* upstream's layout: column-major in the last two dims */
        o->ts = ts_tensor_3d(o->scales, ue8m0 ? TS_I32 : TS_F32, El, S, ns);
        o->ts.strides[0] = S * ns;
        o->ts.strides[1] = 1;
        o->ts.strides[2] = S;
    }
    o->count = malloc((size_t)El * 4);
    memset(o->count, 0xEE, (size_t)El * 4);
    o->tc = ts_tensor_1d(o->count, TS_I32, El);
    o->tcum = ts_tensor_1d(o->cum, TS_I32, El);
    o->twait = ts_tensor_1d(o->wait, TS_I64, w->R);
}

static void ll_free_out(ll_out *o) {
    free(o->x);
    free(o->scales);
    free(o->count);
}

static ts_status ll_dispatch(ts_ep_buffer *b, ll_world *w, ll_out *o, bool fp8, bool round, bool ue8m0, bool hook,
                             ts_ep_ll_handle **h, ts_ep_ll_hook **hk) {
    ts_ep_ll_dispatch_args a;
    memset(&a, 0, sizeof a);
    a.x = &w->tx;
    a.topk_idx = &w->tidx;
    a.num_max_dispatch_tokens_per_rank = w->T;
    a.num_experts = w->E;
    a.cumulative_local_expert_recv_stats = &o->tcum;
    a.dispatch_wait_recv_cost_stats = &o->twait;
    a.use_fp8 = fp8;
    a.round_scale = round;
    a.use_ue8m0 = ue8m0;
    a.return_recv_hook = hook;
    ts_ep_ll_dispatch_out out = {&o->tx, fp8 ? &o->ts : NULL, &o->tc};
    return ts_ep_low_latency_dispatch(b, &a, &out, h, hk);
}

/* Checks this rank's dispatch outputs against the gathered inputs. */
static void ll_check_dispatch(ts_test_ctx *ts_t_, const ll_world *w, const ll_out *o, const ts_ep_ll_handle *h, bool fp8,
                              bool round, bool ue8m0) {
    const int R = w->R, me = g_ep_rank, K = w->K;
    const int64_t T = w->T, H = w->H, El = w->El, S = R * T, nsc = H / 128;
    const int32_t *src_info;
    const int64_t *range;
    TS_CHECK_STATUS(ts_ep_ll_handle_info(h, &src_info, &range, NULL, NULL, NULL), TS_OK);
    uint8_t *q = malloc((size_t)H);
    float *sinv = malloc((size_t)nsc * 4);
    for (int64_t el = 0; el < El; el++) {
        const int64_t e = me * El + el;
        int64_t row = 0;
        for (int s = 0; s < R; s++) {
            const int64_t begin = row;
            for (int64_t t = 0; t < w->N[s]; t++)
                for (int k = 0; k < K; k++) {
                    if (w->idx[(s * T + t) * K + k] != e) continue;
                    const uint16_t *xr = w->x + (s * T + t) * H;
                    TS_CHECK_EQ_INT(src_info[el * S + row], t);
                    if (!fp8) {
                        TS_CHECK(memcmp((uint16_t *)o->x + (el * S + row) * H, xr, (size_t)H * 2) == 0);
                    } else {
                        ll_ref_cast(xr, H, round, q, sinv);
                        TS_CHECK_MSG(memcmp((uint8_t *)o->x + (el * S + row) * H, q, (size_t)H) == 0,
                                     "fp8 row (e %lld, src %d, t %lld) differs", (long long)e, s, (long long)t);
                        for (int64_t g = 0; g < nsc; g++) {
                            if (!ue8m0) {
                                const float got = ((float *)o->scales)[el * S * nsc + g * S + row];
                                TS_CHECK(memcmp(&got, &sinv[g], 4) == 0);
                            } else {
                                const uint32_t word = (uint32_t)((int32_t *)o->scales)[el * S * (nsc / 4) + (g / 4) * S + row];
                                const uint32_t byte = word >> (8 * (g % 4)) & 0xFF;
                                /* decoding by shifting the byte into the exponent field gives the scale back */
                                union { uint32_t u; float f; } v = {byte << 23};
                                TS_CHECK(v.f == sinv[g]);
                            }
                        }
                    }
                    row++;
                }
            TS_CHECK_EQ_INT(range[el * R + s] >> 32, begin);
            TS_CHECK_EQ_INT(range[el * R + s] & 0xFFFFFFFF, row - begin);
        }
        TS_CHECK_EQ_INT(o->count[el], row);
    }
    free(q);
    free(sinv);
}

/* Reference combine of this rank's tokens, scalar, same order (fmaf, top-k order). */
static void ll_ref_combine(const ll_world *w, bool logfmt, uint16_t *ref, double *ref64, double *absmax) {
    const int me = g_ep_rank, K = w->K;
    const int64_t T = w->T, H = w->H, El = w->El;
    const int64_t N = w->N[me];
    uint16_t *y = malloc((size_t)H * 2);
    float *yf = malloc((size_t)H * 4);
    for (int64_t t = 0; t < N; t++) {
        float *acc = calloc((size_t)H, 4);
        for (int64_t j = 0; j < H; j++) ref64[t * H + j] = 0, absmax[t * H + j] = 0;
        for (int k = 0; k < K; k++) {
            const int64_t e = w->idx[(me * T + t) * K + k];
            if (e < 0) continue;
            (void)El;
            for (int64_t j = 0; j < H; j++) y[j] = ll_expert_out(e, me, t, j, logfmt);
            for (int64_t g = 0; g < H / 128; g++) {
                if (logfmt) {
                    uint8_t enc[256];
                    uint16_t meta[2], codes[128];
                    ll_ref_logfmt_encode(y + g * 128, enc, meta, codes);
                    for (int j = 0; j < 128; j++) yf[g * 128 + j] = ll_ref_logfmt_value(enc, meta, j);
                } else {
                    for (int j = 0; j < 128; j++) yf[g * 128 + j] = ll_f(y[g * 128 + j]);
                }
            }
            const float wk = w->w[(me * T + t) * K + k];
            for (int64_t j = 0; j < H; j++) {
                acc[j] = fmaf(yf[j], wk, acc[j]);
                ref64[t * H + j] += (double)ll_f(y[j]) * (double)wk;
                absmax[t * H + j] += fabs((double)ll_f(y[j]) * (double)wk);
            }
        }
        for (int64_t j = 0; j < H; j++) ref[t * H + j] = ll_bf16_of(acc[j]);
        free(acc);
    }
    free(y);
    free(yf);
}

/* Expert outputs for this rank's received rows (bf16 [El, S, H]), from the handle. */
static void ll_fill_expert_out(const ll_world *w, const ts_ep_ll_handle *h, uint16_t *dst, bool small) {
    const int R = w->R, me = g_ep_rank;
    const int64_t S = R * w->T, H = w->H, El = w->El;
    const int32_t *src_info;
    const int64_t *range;
    ts_ep_ll_handle_info(h, &src_info, &range, NULL, NULL, NULL);
    for (int64_t el = 0; el < El; el++)
        for (int s = 0; s < R; s++) {
            const int64_t begin = range[el * R + s] >> 32, n = range[el * R + s] & 0xFFFFFFFF;
            for (int64_t i = begin; i < begin + n; i++)
                for (int64_t j = 0; j < H; j++) dst[(el * S + i) * H + j] = ll_expert_out(me * El + el, s, src_info[el * S + i], j, small);
        }
}

static ts_status ll_combine(ts_ep_buffer *b, ll_world *w, const ts_ep_ll_handle *h, const ts_tensor *x, bool logfmt,
                            bool zero_copy, bool hook, uint16_t *out, ts_ep_ll_hook **hk, int64_t *wait) {
    ts_ep_ll_combine_args a;
    memset(&a, 0, sizeof a);
    a.x = x;
    a.topk_idx = &w->tidx;
    a.topk_weights = &w->tw;
    a.handle = h;
    a.use_logfmt = logfmt;
    a.zero_copy = zero_copy;
    a.return_recv_hook = hook;
    ts_tensor tw = ts_tensor_1d(wait, TS_I64, w->R);
    a.combine_wait_recv_cost_stats = &tw;
    ts_tensor to = ts_tensor_2d(out, TS_BF16, w->N[g_ep_rank], w->H);
    return ts_ep_low_latency_combine(b, &a, &to, hk);
}

static void ll_check_combine(ts_test_ctx *ts_t_, const ll_world *w, const uint16_t *out, bool logfmt) {
    const int64_t N = w->N[g_ep_rank], H = w->H;
    uint16_t *ref = malloc((size_t)(N * H * 2 + 2));
    double *r64 = malloc((size_t)(N * H * 8 + 8)), *amax = malloc((size_t)(N * H * 8 + 8));
    ll_ref_combine(w, logfmt, ref, r64, amax);
    TS_CHECK(N == 0 || memcmp(out, ref, (size_t)(N * H * 2)) == 0);
    /* float64 oracle: bf16 output rounding + f32 accumulation (+ LogFMT's ~1% per value) */
    int bad = 0;
    for (int64_t i = 0; i < N * H; i++) {
        const double tol = (logfmt ? 0.03 : 1e-5) * amax[i] + 0.0079 * fabs(r64[i]) + 1e-30;
        if (fabs((double)ll_f(out[i]) - r64[i]) > tol) bad++;
    }
    TS_CHECK_MSG(bad == 0, "%d values outside the float64 tolerance", bad);
    free(ref);
    free(r64);
    free(amax);
}

static void ll_round_trip(ts_test_ctx *ts_t_, const ll_case *c, bool fp8, bool round, bool ue8m0, bool hook,
                          bool logfmt, bool zero_copy) {
    ll_world w;
    ts_ep_buffer *b = ll_world_buffer(ts_t_, c, &w, TS_EP_TEST_TIMEOUT_S);
    if (!b) return;
    ll_out o;
    ll_alloc_out(&w, &o, fp8, ue8m0);
    ts_ep_ll_handle *h = NULL;
    ts_ep_ll_hook *hk = NULL;
    TS_CHECK_STATUS(ll_dispatch(b, &w, &o, fp8, round, ue8m0, hook, &h, &hk), TS_OK);
    if (hook && hk) {
        /* send phase only: outputs still untouched */
        const int32_t sentinel = (int32_t)0xEEEEEEEE;
        for (int64_t el = 0; el < w.El; el++) TS_CHECK(o.count[el] == sentinel);
        TS_CHECK_STATUS(ts_ep_ll_hook_run(hk), TS_OK);
        TS_CHECK_STATUS(ts_ep_ll_hook_run(hk), TS_ERR_INVALID_ARGUMENT); /* one-shot */
    }
    if (!TS_FAILED()) {
        ll_check_dispatch(ts_t_, &w, &o, h, fp8, round, ue8m0);
        for (int64_t el = 0; el < w.El; el++) TS_CHECK_EQ_INT(o.cum[el], o.count[el]);
        for (int s = 0; s < w.R; s++) TS_CHECK(o.wait[s] >= 0);
    }
    /* combine the deterministic expert outputs */
    const int64_t S = w.R * w.T, N = w.N[g_ep_rank];
    uint16_t *out = malloc((size_t)(N * w.H * 2 + 2));
    int64_t cw[64] = {0};
    if (!TS_FAILED()) {
        ts_tensor xin;
        uint16_t *ex = NULL;
        if (zero_copy) {
            TS_CHECK_STATUS(ts_ep_get_next_low_latency_combine_buffer(b, h, &xin), TS_OK);
            ll_fill_expert_out(&w, h, xin.data, logfmt);
        } else {
            ex = malloc((size_t)(w.El * S * w.H * 2));
            ll_fill_expert_out(&w, h, ex, logfmt);
            xin = ts_tensor_3d(ex, TS_BF16, w.El, S, w.H);
        }
        hk = NULL;
        TS_CHECK_STATUS(ll_combine(b, &w, h, zero_copy ? NULL : &xin, logfmt, zero_copy, hook, out, &hk, cw), TS_OK);
        if (hook && hk) TS_CHECK_STATUS(ts_ep_ll_hook_run(hk), TS_OK);
        if (!TS_FAILED()) ll_check_combine(ts_t_, &w, out, logfmt);
        free(ex);
    }
    free(out);
    ts_ep_ll_handle_destroy(h);
    ll_free_out(&o);
    ts_ep_buffer_destroy(b);
    ll_free_world(&w);
}

static const ll_case k_ll = {.seed = 1, .T = 12, .H = 512, .K = 4, .El = 6, .neg_frac = 0.15};

TS_TEST(ep_ll_bf16_dispatch_combine) { ll_round_trip(ts_t_, &k_ll, false, false, false, false, false, false); }
TS_TEST(ep_ll_fp8_dispatch) { ll_round_trip(ts_t_, &k_ll, true, false, false, false, false, false); }
TS_TEST(ep_ll_fp8_round_scale) { ll_round_trip(ts_t_, &k_ll, true, true, false, false, false, false); }
TS_TEST(ep_ll_fp8_ue8m0) { ll_round_trip(ts_t_, &k_ll, true, true, true, false, false, false); }
TS_TEST(ep_ll_hooks) { ll_round_trip(ts_t_, &k_ll, true, false, false, true, false, false); }
TS_TEST(ep_ll_zero_copy_combine) { ll_round_trip(ts_t_, &k_ll, false, false, false, false, false, true); }
TS_TEST(ep_ll_logfmt_combine) { ll_round_trip(ts_t_, &k_ll, false, false, false, true, true, false); }

TS_TEST(ep_ll_zero_tokens_and_masked) {
    ll_case c = k_ll;
    c.seed = 7;
    c.zero_odd = true;
    c.neg_frac = 0.5;
    ll_round_trip(ts_t_, &c, true, true, true, false, false, true);
}

TS_TEST(ep_ll_rank_valued_upstream_check) {
    /* upstream's data: every valid row is (src - 128) except its last 128 columns = token index */
    ll_case c = k_ll;
    c.seed = 9;
    c.rank_valued = true;
    c.K = 6;
    ll_world w;
    ts_ep_buffer *b = ll_world_buffer(ts_t_, &c, &w, TS_EP_TEST_TIMEOUT_S);
    if (!b) return;
    ll_out o;
    ll_alloc_out(&w, &o, false, false);
    ts_ep_ll_handle *h = NULL;
    TS_CHECK_STATUS(ll_dispatch(b, &w, &o, false, false, false, false, &h, NULL), TS_OK);
    const int R = w.R;
    const int64_t S = R * w.T, H = w.H;
    const int32_t *src_info;
    const int64_t *range;
    if (!TS_FAILED()) {
        ts_ep_ll_handle_info(h, &src_info, &range, NULL, NULL, NULL);
        for (int64_t el = 0; el < w.El; el++) {
            int64_t want = 0, sum = 0;
            for (int s = 0; s < R; s++)
                for (int64_t i = 0; i < w.N[s] * w.K; i++) want += w.idx[s * w.T * w.K + i] == g_ep_rank * w.El + el;
            for (int s = 0; s < R; s++) {
                const int64_t begin = range[el * R + s] >> 32, n = range[el * R + s] & 0xFFFFFFFF;
                sum += n;
                for (int64_t i = begin; i < begin + n; i++) {
                    const uint16_t *row = (uint16_t *)o.x + (el * S + i) * H;
                    TS_CHECK(ll_f(row[0]) == (float)(s - 128));
                    TS_CHECK(ll_f(row[H - 1]) == (float)src_info[el * S + i]);
                }
            }
            TS_CHECK_EQ_INT(o.count[el], want);
            TS_CHECK_EQ_INT(sum, want);
        }
    }
    ts_ep_ll_handle_destroy(h);
    ll_free_out(&o);
    ts_ep_buffer_destroy(b);
    ll_free_world(&w);
}

TS_TEST(ep_ll_double_buffering_two_in_flight) {
    /* Two dispatches in flight (both hooked), received in order; then a combine per handle
     * and repeats: the alternating halves keep every result intact, and repeated runs hash
     * to the same bytes. */
    ll_case c1 = k_ll, c2 = k_ll;
    c2.seed = 77;
    c2.neg_frac = 0.3;
    ll_world w1, w2;
    ll_make_world(&c1, &w1);
    ll_make_world(&c2, &w2);
    ts_ep_buffer *b = ll_buffer(ts_t_, &w1, TS_EP_TEST_TIMEOUT_S);
    if (!b) {
        ll_free_world(&w1);
        ll_free_world(&w2);
        return;
    }
    uint64_t hashes[3] = {0};
    for (int rep = 0; rep < 3 && !TS_FAILED(); rep++) {
        ll_out o1, o2;
        ll_alloc_out(&w1, &o1, true, false);
        ll_alloc_out(&w2, &o2, true, false);
        ts_ep_ll_handle *h1 = NULL, *h2 = NULL;
        ts_ep_ll_hook *k1 = NULL, *k2 = NULL;
        TS_CHECK_STATUS(ll_dispatch(b, &w1, &o1, true, false, false, true, &h1, &k1), TS_OK);
        TS_CHECK_STATUS(ll_dispatch(b, &w2, &o2, true, false, false, true, &h2, &k2), TS_OK);
        if (!TS_FAILED()) {
            TS_CHECK_STATUS(ts_ep_ll_hook_run(k1), TS_OK);
            TS_CHECK_STATUS(ts_ep_ll_hook_run(k2), TS_OK);
        }
        if (!TS_FAILED()) {
            ll_check_dispatch(ts_t_, &w1, &o1, h1, true, false, false);
            ll_check_dispatch(ts_t_, &w2, &o2, h2, true, false, false);
        }
        const int64_t S = w1.R * w1.T;
        uint16_t *ex = malloc((size_t)(w1.El * S * w1.H * 2));
        uint16_t *out1 = malloc((size_t)(w1.N[g_ep_rank] * w1.H * 2 + 2));
        uint16_t *out2 = malloc((size_t)(w2.N[g_ep_rank] * w2.H * 2 + 2));
        int64_t cw[64] = {0};
        if (!TS_FAILED()) {
            ts_tensor xin = ts_tensor_3d(ex, TS_BF16, w1.El, S, w1.H);
            ll_fill_expert_out(&w1, h1, ex, false);
            TS_CHECK_STATUS(ll_combine(b, &w1, h1, &xin, false, false, false, out1, NULL, cw), TS_OK);
            ll_fill_expert_out(&w2, h2, ex, false);
            TS_CHECK_STATUS(ll_combine(b, &w2, h2, &xin, false, false, false, out2, NULL, cw), TS_OK);
        }
        if (!TS_FAILED()) {
            ll_check_combine(ts_t_, &w1, out1, false);
            ll_check_combine(ts_t_, &w2, out2, false);
            uint64_t hsh = 1469598103934665603ull;
            for (int64_t el = 0; el < w1.El; el++) {
                hsh = ll_hash((uint8_t *)o1.x + el * S * w1.H, (size_t)(o1.count[el] * w1.H), hsh);
                hsh = ll_hash((uint8_t *)o2.x + el * S * w2.H, (size_t)(o2.count[el] * w2.H), hsh);
            }
            hsh = ll_hash(out1, (size_t)(w1.N[g_ep_rank] * w1.H * 2), hsh);
            hsh = ll_hash(out2, (size_t)(w2.N[g_ep_rank] * w2.H * 2), hsh);
            hashes[rep] = hsh;
        }
        free(ex);
        free(out1);
        free(out2);
        ts_ep_ll_handle_destroy(h1);
        ts_ep_ll_handle_destroy(h2);
        ll_free_out(&o1);
        ll_free_out(&o2);
    }
    TS_CHECK(hashes[0] == hashes[1] && hashes[1] == hashes[2]);
    /* after a clean, the protocol starts over and still works */
    TS_CHECK_STATUS(ts_ep_clean_low_latency_buffer(b, w1.T, w1.H, w1.E), TS_OK);
    ll_out o;
    ll_alloc_out(&w1, &o, false, false);
    ts_ep_ll_handle *h = NULL;
    TS_CHECK_STATUS(ll_dispatch(b, &w1, &o, false, false, false, false, &h, NULL), TS_OK);
    if (!TS_FAILED()) ll_check_dispatch(ts_t_, &w1, &o, h, false, false, false);
    ts_ep_ll_handle_destroy(h);
    ll_free_out(&o);
    ts_ep_buffer_destroy(b);
    ll_free_world(&w1);
    ll_free_world(&w2);
}

TS_TEST(ep_ll_logfmt_codes_and_properties) {
    /* local: exact codes vs the bit-stream reference, round trip bounds, the not-cast cases */
    ts_prng p = ts_prng_seed(4242 + (uint64_t)g_ep_rank);
    for (int rep = 0; rep < 200; rep++) {
        uint16_t x[128];
        const int kind = rep % 5;
        for (int j = 0; j < 128; j++) {
            float v = ts_prng_uniform(&p) * ldexpf(1.0f, -(int)(ts_prng_u32(&p) % 12));
            if (kind == 1 && j % 7 == 0) v = 0.0f;            /* zeros: amin = 0 */
            if (kind == 2) v *= 8.0f;                          /* amax >= 1: not cast */
            if (kind == 3) v = (j & 1) ? 0.25f : -0.25f;       /* amin == amax: not cast */
            if (kind == 4 && j > 0) v = ldexpf(v, -30);        /* dynamic range beyond 2^32: clipped */
            x[j] = ll_bf16_of(v);
        }
        uint8_t enc[256], renc[256];
        uint16_t meta[2], rmeta[2], codes[128];
        const int n = ts_ep_logfmt10_encode(x, enc, meta);
        const int rn = ll_ref_logfmt_encode(x, renc, rmeta, codes);
        TS_CHECK_EQ_INT(n, rn);
        TS_CHECK(meta[0] == rmeta[0] && meta[1] == rmeta[1]);
        TS_CHECK(memcmp(enc, renc, (size_t)n) == 0);
        if (kind == 2 || kind == 3) TS_CHECK_EQ_INT(n, 256);
        float y[128];
        ts_ep_logfmt10_decode(enc, meta, y);
        const float la = log2f(ll_f(meta[0]));
        const float lmin = ll_f(meta[1]) == 0 ? la - 32 : fmaxf(log2f(ll_f(meta[1])), la - 32);
        const double ratio = exp2((double)(la - lmin) / 510.0);
        for (int j = 0; j < 128; j++) {
            const float xv = ll_f(x[j]);
            TS_CHECK(y[j] == ll_ref_logfmt_value(enc, meta, j));
            if (n == 256) {
                TS_CHECK(y[j] == xv);
                continue;
            }
            TS_CHECK(codes[j] <= 511);
            if (xv == 0.0f) TS_CHECK(y[j] == 0.0f);
            if (y[j] != 0.0f) TS_CHECK(signbit(y[j]) == signbit(xv));
            /* values at or above amin decode within one step (a relative factor) */
            if (fabsf(xv) >= exp2f(lmin) * 1.0001f) {
                const double r = fabs((double)y[j] / (double)xv);
                TS_CHECK_MSG(r <= ratio * 1.0001 && r >= 1.0 / ratio / 1.0001, "ratio %g, step ratio %g", r, ratio);
            }
        }
        /* amax decodes to the top code */
        int top = 0;
        for (int j = 0; j < 128; j++) top |= n == 160 && codes[j] == 511;
        if (n == 160) TS_CHECK(top);
    }
}

TS_TEST(ep_ll_abandoned_combine_hook) {
    /* a hooked combine whose hook is never run: its state goes with the buffer (LSan checks
     * the ASan build), and the outputs stay untouched */
    ll_world w;
    ts_ep_buffer *b = ll_world_buffer(ts_t_, &k_ll, &w, TS_EP_TEST_TIMEOUT_S);
    if (!b) return;
    ll_out o;
    ll_alloc_out(&w, &o, false, false);
    ts_ep_ll_handle *h = NULL;
    TS_CHECK_STATUS(ll_dispatch(b, &w, &o, false, false, false, false, &h, NULL), TS_OK);
    const int64_t N = w.N[g_ep_rank];
    uint16_t *out = malloc((size_t)(N * w.H * 2 + 2));
    memset(out, 0x77, (size_t)(N * w.H * 2 + 2));
    int64_t cw[64] = {0};
    ts_ep_ll_hook *hk = NULL;
    if (!TS_FAILED()) {
        TS_CHECK_STATUS(ll_combine(b, &w, h, &o.tx, false, false, true, out, &hk, cw), TS_OK);
        TS_CHECK(hk != NULL);
        bool same = true;
        for (int64_t i = 0; i < N * w.H * 2; i++) same &= ((uint8_t *)out)[i] == 0x77;
        TS_CHECK(same);
    }
    ep_test_barrier();
    ts_ep_ll_handle_destroy(h);
    ts_ep_buffer_destroy(b);
    free(out);
    ll_free_out(&o);
    ll_free_world(&w);
}

TS_TEST(ep_ll_internode_matches_one_node) {
    /* The same FP8 dispatch and LogFMT combine (hooked) on buffers with one node (across real
     * machines: the machines as nodes), every rank its own node and (even R > 2, where a
     * machine holds two) nodes of two: valid rows, scales, src_info, layout_range, counts and
     * the combined output hash to the same bytes whatever the split. With one rank per
     * machine only the split of one rank per node exists; its rows are still checked. */
    ll_world w;
    ll_make_world(&k_ll, &w);
    const int R = w.R, M = g_ep_machine_ranks;
    const int ks[3] = {M, M > 1 ? 1 : 0, R > 2 && R % 2 == 0 && M > 2 && ep_node_size_fits(2) ? 2 : 0};
    uint64_t hashes[3] = {0};
    int64_t bytes = 0;
    TS_CHECK_STATUS(ts_ep_get_low_latency_rdma_size_hint(w.T, w.H, R, w.E, &bytes), TS_OK);
    for (int i = 0; i < 3 && !TS_FAILED(); i++) {
        if (ks[i] == 0) continue;
        ts_ep_buffer_options bo = ts_ep_default_buffer_options();
        bo.timeout_s = TS_EP_TEST_TIMEOUT_S;
        bo.ranks_per_node = ks[i];
        ts_ep_buffer *b = NULL;
        TS_CHECK_STATUS(ts_ep_buffer_create(MPI_COMM_WORLD, 0, bytes, true, &bo, &b), TS_OK);
        if (!b) break;
        ll_out o;
        ll_alloc_out(&w, &o, true, false);
        ts_ep_ll_handle *h = NULL;
        ts_ep_ll_hook *hk = NULL;
        TS_CHECK_STATUS(ll_dispatch(b, &w, &o, true, true, false, true, &h, &hk), TS_OK);
        if (!TS_FAILED()) TS_CHECK_STATUS(ts_ep_ll_hook_run(hk), TS_OK);
        const int64_t S = R * w.T, H = w.H, nsc = H / 128;
        uint16_t *ex = malloc((size_t)(w.El * S * H * 2));
        uint16_t *out = malloc((size_t)(w.N[g_ep_rank] * H * 2 + 2));
        int64_t cw[64] = {0};
        if (!TS_FAILED()) {
            ll_check_dispatch(ts_t_, &w, &o, h, true, true, false);
            ts_tensor xin = ts_tensor_3d(ex, TS_BF16, w.El, S, H);
            ll_fill_expert_out(&w, h, ex, false);
            TS_CHECK_STATUS(ll_combine(b, &w, h, &xin, true, false, true, out, &hk, cw), TS_OK);
            if (!TS_FAILED()) TS_CHECK_STATUS(ts_ep_ll_hook_run(hk), TS_OK);
        }
        if (!TS_FAILED()) {
            const int32_t *src_info;
            const int64_t *range;
            ts_ep_ll_handle_info(h, &src_info, &range, NULL, NULL, NULL);
            uint64_t hsh = 1469598103934665603ull;
            for (int64_t el = 0; el < w.El; el++) {
                hsh = ll_hash((uint8_t *)o.x + el * S * H, (size_t)(o.count[el] * H), hsh);
                for (int64_t r = 0; r < o.count[el]; r++)
                    for (int64_t g = 0; g < nsc; g++)
                        hsh = ll_hash((float *)o.scales + el * S * nsc + g * S + r, 4, hsh);
                hsh = ll_hash(src_info + el * S, (size_t)o.count[el] * 4, hsh);
            }
            hsh = ll_hash(range, (size_t)(w.El * R) * 8, hsh);
            hsh = ll_hash(o.count, (size_t)w.El * 4, hsh);
            hsh = ll_hash(out, (size_t)(w.N[g_ep_rank] * H * 2), hsh);
            hashes[i] = hsh;
        }
        free(ex);
        free(out);
        ts_ep_ll_handle_destroy(h);
        ll_free_out(&o);
        ts_ep_buffer_destroy(b);
    }
    if (!TS_FAILED()) {
        if (ks[1]) TS_CHECK(hashes[0] == hashes[1]);
        if (ks[2]) TS_CHECK(hashes[0] == hashes[2]);
    }
    ll_free_world(&w);
}
