/* The MXCSR guard (tests/test_mxcsr.c says what and why) on the ops that need MPI, on every
 * rank: DeepEP's low-latency dispatch with the FP8 cast (plain, round_scale, ue8m0) and its
 * combine (bf16 and LogFMT-10), the LogFMT-10 codec itself, and MegaMoE (fused and unfused,
 * fp8 x fp4 and bf16). A test fails when the flags are set on any pool thread of any rank;
 * every rank runs the same ops in the same order (each call is collective). */
#include "test_mxcsr_common.h"
#include "test_ep_low_latency_util.h"

#include "tilestack/mega_moe.h"

/* ---------------------------------------------------------------- low latency */

typedef struct llx {
    ts_ep_buffer *b;
    ll_world w;
    bool fp8, round, ue8m0, logfmt;
    void *rx, *rs;
    int32_t *cnt;
    ts_tensor trx, trs, tcnt, tex;
    uint16_t *ex, *out;
    int combine;
} llx;

static ts_status llx_op(void *vc) {
    llx *c = vc;
    ts_ep_ll_dispatch_args a;
    memset(&a, 0, sizeof a);
    a.x = &c->w.tx;
    a.topk_idx = &c->w.tidx;
    a.num_max_dispatch_tokens_per_rank = c->w.T;
    a.num_experts = c->w.E;
    a.use_fp8 = c->fp8;
    a.round_scale = c->round;
    a.use_ue8m0 = c->ue8m0;
    ts_ep_ll_dispatch_out out = {&c->trx, c->fp8 ? &c->trs : NULL, &c->tcnt};
    ts_ep_ll_handle *h = NULL;
    ts_status st = ts_ep_low_latency_dispatch(c->b, &a, &out, &h, NULL);
    if (st != TS_OK || !c->combine) {
        ts_ep_ll_handle_destroy(h);
        return st;
    }
    ts_ep_ll_combine_args ca;
    memset(&ca, 0, sizeof ca);
    ca.x = &c->tex;
    ca.topk_idx = &c->w.tidx;
    ca.topk_weights = &c->w.tw;
    ca.handle = h;
    ca.use_logfmt = c->logfmt;
    ts_tensor to = ts_tensor_2d(c->out, TS_BF16, c->w.N[g_ep_rank], c->w.H);
    st = ts_ep_low_latency_combine(c->b, &ca, &to, NULL);
    ts_ep_ll_handle_destroy(h);
    return st;
}

/* Every rank's flags, ORed (so every rank reports the same result). */
static unsigned all_ranks(unsigned fl) {
    unsigned out = 0;
    ep_test_allreduce(&fl, &out, 1, MPI_UNSIGNED, MPI_BOR);
    return out;
}

/* mx_run with the flags of every rank: each rank measures its own threads, then all agree. */
static void mx_run_all_ranks(mx_fam *f, const char *what, mx_op op, void *ctx) {
    if (!f->ok) return;
    for (int i = 0; i < MX_NISA; i++) {
        if (!f->runnable[i]) continue;
        ts_set_isa(mx_isas[i]);
        unsigned fl = all_ranks(mx_measure(f->t, what, ts_isa_name(mx_isas[i]), op, ctx));
        f->nops[i]++;
        f->dirty[i] += fl != 0;
        f->flags[i] |= fl;
        mx_report(f, what, ts_isa_name(mx_isas[i]), fl);
    }
    ts_set_isa(f->saved_isa);
}

TS_TEST(mxcsr_ep_low_latency) {
    /* every rank checks the runnable paths the same way; only rank 0 prints the summary */
    mx_fam f = mx_begin(ts_t_, "EP low-latency dispatch (FP8 casts) and combine (bf16, LogFMT-10)");
    if (!f.ok) return;
    static const ll_case c = {.seed = 3, .T = 12, .H = 1024, .K = 4, .El = 6, .neg_frac = 0.1};
    llx x;
    memset(&x, 0, sizeof x);
    x.b = ll_world_buffer(ts_t_, &c, &x.w, TS_EP_TEST_TIMEOUT_S);
    if (!x.b) return;
    /* this rank's tokens: every e4m3 subnormal code as a cast output, tiny normal values */
    const int64_t N = x.w.N[g_ep_rank], H = c.H, S = x.w.R * c.T, El = c.El;
    float *xf = malloc((size_t)(c.T * H) * 4);
    quant_input(xf, c.T, H, 448.0f);
    uint16_t *mine = x.w.x + g_ep_rank * c.T * H;
    for (int64_t i = 0; i < N * H; i++) mine[i] = ts_f32_to_bf16(xf[i]);
    x.rx = malloc((size_t)(El * S * H) * 2);
    x.rs = malloc((size_t)(El * S * H / 128) * 4);
    x.cnt = malloc((size_t)El * 4);
    x.tcnt = ts_tensor_1d(x.cnt, TS_I32, El);
    x.ex = malloc((size_t)(El * S * H) * 2);
    fill_bf16(x.ex, El * S * H, (int64_t)g_ep_rank);
    x.tex = ts_tensor_3d(x.ex, TS_BF16, El, S, H);
    x.out = malloc((size_t)(N * H + 1) * 2);
    for (int v = 0; v < 6; v++) {
        x.fp8 = v >= 1 && v <= 3, x.round = v >= 2 && v <= 3, x.ue8m0 = v == 3;
        x.combine = v >= 4, x.logfmt = v == 5;
        x.trx = ts_tensor_3d(x.rx, x.fp8 ? TS_E4M3 : TS_BF16, El, S, H);
        const int64_t ns = x.ue8m0 ? H / 512 : H / 128;
        x.trs = ts_tensor_3d(x.rs, x.ue8m0 ? TS_I32 : TS_F32, El, S, ns);
        static const char *const names[] = {"dispatch bf16", "dispatch fp8", "dispatch fp8 round_scale",
                                            "dispatch fp8 ue8m0", "dispatch + combine bf16",
                                            "dispatch + combine LogFMT-10"};
        mx_run_all_ranks(&f, names[v], llx_op, &x);
    }
    if (g_ep_rank == 0) mx_end(&f);
    else ts_set_isa(f.saved_isa), ts_set_num_threads(f.saved_threads);
    free(xf), free(x.rx), free(x.rs), free(x.cnt), free(x.ex), free(x.out);
    ts_ep_buffer_destroy(x.b);
    ll_free_world(&x.w);
}

/* LogFMT-10 codec on divisions of tiny normal values, mixed magnitudes, zeros and one
 * constant division (not cast): local, on this rank's pool threads only. */
typedef struct lf_ctx {
    const uint16_t *x;
    int64_t ndiv;
    uint8_t *enc;
    float *y;
} lf_ctx;

static ts_status lf_op(void *vc) {
    lf_ctx *c = vc;
    for (int64_t d = 0; d < c->ndiv; d++) {
        uint16_t meta[2];
        ts_ep_logfmt10_encode(c->x + d * 128, c->enc + d * 256, meta);
        ts_ep_logfmt10_decode(c->enc + d * 256, meta, c->y + d * 128);
    }
    return TS_OK;
}

TS_TEST(mxcsr_ep_logfmt10) {
    mx_fam f = mx_begin(ts_t_, "EP LogFMT-10 encode / decode");
    if (!f.ok) return;
    const int64_t nd = 24;
    uint16_t *x = malloc((size_t)(nd * 128) * 2);
    for (int64_t d = 0; d < nd; d++)
        for (int64_t j = 0; j < 128; j++) {
            float v = mx_bf16_pat(j * 3 + d);
            if (d % 4 == 1) v *= 0x1p-20f;                    /* a division of tiny values */
            if (d % 4 == 2) v = ldexpf(1.0f + (float)(j % 8) / 8.0f, -40 - (int)(j % 20)) * ((j & 1) ? -1.0f : 1.0f);
            if (d % 4 == 3 && d > 12) v = 0.375f;              /* constant: sent as bf16 */
            x[d * 128 + j] = ts_f32_to_bf16(v);
        }
    uint8_t *enc = malloc((size_t)(nd * 256));
    float *y = malloc((size_t)(nd * 128) * 4);
    lf_ctx c = {x, nd, enc, y};
    /* one fixed implementation (no ISA variants) */
    mx_run_once(&f, "encode + decode", lf_op, &c);
    if (g_ep_rank == 0) mx_end(&f);
    else ts_set_isa(f.saved_isa), ts_set_num_threads(f.saved_threads);
    free(x), free(enc), free(y);
}

/* ---------------------------------------------------------------- MegaMoE */

typedef struct mmx {
    ts_mega_moe_buffer *buf;
    ts_mega_moe_weights *w;
    ts_tensor y;
    bool bf16, unfused;
} mmx;

static ts_status mmx_op(void *vc) {
    mmx *c = vc;
    if (c->unfused) return ts_mega_moe_unfused(&c->y, c->w, c->buf, NULL, 8.0f, false);
    if (c->bf16) return ts_bf16_mega_moe(&c->y, c->w, c->buf, NULL, NULL, 8.0f, false);
    return ts_fp8_fp4_mega_moe(&c->y, c->w, c->buf, NULL, NULL, NULL, 8.0f, false);
}

TS_TEST(mxcsr_ep_mega_moe) {
    mx_fam f = mx_begin(ts_t_, "MegaMoE (fused, unfused; fp8 x fp4, bf16)");
    if (!f.ok) return;
    const int64_t H = 256, I = 256, El = 2, T = 8;
    const int32_t K = 3;
    const int64_t R = g_ep_size, E = El * R;
    for (int bf = 0; bf < 2; bf++) {
        mmx c;
        memset(&c, 0, sizeof c);
        c.bf16 = bf;
        TS_CHECK_STATUS(ts_get_symm_buffer_for_mega_moe(MPI_COMM_WORLD, E, T, K, H, I, bf ? "bf16xbf16" : "fp8xfp4",
                                                        NULL, NULL, &c.buf),
                        TS_OK);
        if (!c.buf) return;
        ts_mega_moe_views v;
        TS_CHECK_STATUS(ts_mega_moe_get_views(c.buf, &v), TS_OK);
        /* weights: every e2m1 code pair (fp4) or the bf16 pattern, scales 2^-3 .. 2^3 */
        const int64_t pk = bf ? 1 : 2, eb = bf ? 2 : 1;
        uint8_t *q1 = malloc((size_t)(El * 2 * I * H / pk * eb)), *q2 = malloc((size_t)(El * H * I / pk * eb));
        float *s1 = malloc((size_t)(El * 2 * I * H / 32) * 4), *s2 = malloc((size_t)(El * H * I / 32) * 4);
        if (bf) {
            fill_bf16((uint16_t *)(void *)q1, El * 2 * I * H, 1), fill_bf16((uint16_t *)(void *)q2, El * H * I, 2);
        } else {
            fill_e2m1(q1, El * 2 * I * H / 2, 1), fill_e2m1(q2, El * H * I / 2, 2);
            fill_sf(s1, El * 2 * I * H / 32, 1), fill_sf(s2, El * H * I / 32, 1);
        }
        ts_tensor t1 = ts_tensor_3d(q1, bf ? TS_BF16 : TS_E2M1X2, El, 2 * I, H / pk);
        ts_tensor t2 = ts_tensor_3d(q2, bf ? TS_BF16 : TS_E2M1X2, El, H, I / pk);
        ts_tensor f1 = ts_tensor_3d(s1, TS_F32, El, 2 * I, H / 32), f2 = ts_tensor_3d(s2, TS_F32, El, H, I / 32);
        TS_CHECK_STATUS(ts_transform_weights_for_mega_moe(&t1, bf ? NULL : &f1, &t2, bf ? NULL : &f2, &c.w), TS_OK);
        free(q1), free(q2), free(s1), free(s2);
        /* inputs: e4m3 with every subnormal code and packed ue8m0 block-32 scales, or bf16 */
        const int64_t n = T - g_ep_rank % 2;
        if (bf) fill_bf16((uint16_t *)v.x.data, n * H, 3);
        else {
            fill_e4m3((uint8_t *)v.x.data, n * H, 3);
            fill_ue8m0_words((int32_t *)v.x_sf.data, n, H / 32);
        }
        int64_t *vi = (int64_t *)v.topk_idx.data;
        float *vw = (float *)v.topk_weights.data;
        for (int64_t t = 0; t < n; t++)
            for (int64_t k = 0; k < K; k++) {
                vi[t * K + k] = (t + k * 5 + g_ep_rank) % 7 == 6 ? -1 : (t * 3 + k + g_ep_rank) % E;
                for (int64_t j = 0; j < k; j++)
                    if (vi[t * K + j] == vi[t * K + k]) vi[t * K + k] = -1;
                vw[t * K + k] = 0.25f + 0.125f * (float)k;
            }
        uint16_t *y = malloc((size_t)(n * H + 1) * 2);
        c.y = ts_tensor_2d(y, TS_BF16, n, H);
        /* the fused call needs every rank on one machine; across machines it refuses (docs/mega_moe.md) */
        const bool one_machine = g_ep_machine_ranks == g_ep_size;
        if (!one_machine) {
            c.unfused = false;
            TS_CHECK_STATUS(mmx_op(&c), TS_ERR_UNSUPPORTED);
        }
        for (int u = one_machine ? 0 : 1; u < 2; u++) {
            c.unfused = u;
            char what[64];
            snprintf(what, sizeof what, "%s %s", bf ? "bf16" : "fp8 x fp4", u ? "unfused" : "fused");
            mx_run_all_ranks(&f, what, mmx_op, &c);
        }
        free(y);
        ts_mega_moe_weights_destroy(c.w);
        TS_CHECK_STATUS(ts_mega_moe_buffer_destroy(c.buf), TS_OK);
    }
    if (g_ep_rank == 0) mx_end(&f);
    else ts_set_isa(f.saved_isa), ts_set_num_threads(f.saved_threads);
}
