/* Mega MoE (ts_fp8_fp4_mega_moe / ts_bf16_mega_moe / ts_mega_moe_unfused) on every rank count:
 * fused == unfused bit for bit, both against a float64 oracle of the math (calc_diff) and an
 * emulation of the rounding points, -1 selections, a rank with zero tokens, experts with zero
 * tokens, the cumulative stats exactly, thread counts, a late rank (arrival order), the clamp,
 * and bad input (specific code on the rank at fault, TS_ERR_PEER elsewhere, y untouched). */
#include "ep/mega_moe_gemm.h"
#include "ep_test_util.h"
#include "tilestack/mega_moe.h"
#include "tilestack/quant.h"

#include <math.h>
#include <time.h>
#include <unistd.h>

typedef struct mm_case {
    int64_t H, I, El, K, T;
    uint64_t seed;
    bool bf16;
    float clamp;       /* INFINITY = none */
    int zero_rank;     /* rank with no tokens (-1: none) */
    double mask_prob;  /* share of -1 selections */
    int32_t per_node;  /* the buffer's ranks_per_node (0: the machines') */
} mm_case;

typedef struct mm_world {
    mm_case c;
    int64_t E, n;
    ts_mega_moe_buffer *buf;
    ts_mega_moe_views v;
    ts_mega_moe_weights *w;
    /* dequantised copies for the oracle */
    double *x;        /* [n, H] this rank's tokens as the kernel sees them */
    int64_t *idx;     /* [n, K] */
    float *tw;        /* [n, K] */
    int64_t *all_idx; /* [R, T, K] every rank's routing, -1 padded */
} mm_world;

static float e2m1_val(uint8_t code) {
    static const float v[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    return (code & 8) ? -v[code & 7] : v[code & 7];
}

/* Expert `e` (global id) weights, deterministic from the seed, dequantised into w1 [2I, H] and
 * w2 [H, I] (doubles); fp4 / bf16 storage + f32 scales into the optional raw outputs. */
static void expert_weights(const mm_case *c, int64_t e, double *w1, double *w2, uint8_t *q1, float *s1, uint8_t *q2,
                           float *s2) {
    const int64_t H = c->H, I = c->I;
    for (int l = 0; l < 2; l++) {
        const int64_t N = l == 0 ? 2 * I : H, Kd = l == 0 ? H : I;
        ts_prng p = ts_prng_seed(c->seed * 1000003u + (uint64_t)e * 7919u + (uint64_t)l);
        float *f = malloc((size_t)(N * Kd) * 4);
        for (int64_t i = 0; i < N * Kd; i++) f[i] = ts_prng_uniform(&p) * (l == 0 ? 0.25f : 0.5f);
        double *wd = l == 0 ? w1 : w2;
        if (c->bf16) {
            uint16_t *q = (uint16_t *)(void *)(l == 0 ? q1 : q2);
            for (int64_t i = 0; i < N * Kd; i++) {
                const uint16_t b = ts_f32_to_bf16(f[i]);
                if (q) q[i] = b;
                wd[i] = ts_bf16_to_f32(b);
            }
        } else {
            uint8_t *q = malloc((size_t)(N * Kd / 2));
            float *s = malloc((size_t)(N * Kd / 32) * 4);
            ts_tensor tf = ts_tensor_2d(f, TS_F32, N, Kd), tq = ts_tensor_2d(q, TS_E2M1X2, N, Kd / 2),
                      ts = ts_tensor_2d(s, TS_F32, N, Kd / 32);
            ts_status st = ts_per_token_cast_to_fp4(&tf, true, 32, false, TS_FP4_ROUND_DEEPGEMM, &tq, &ts);
            if (st != TS_OK) abort();
            for (int64_t i = 0; i < N; i++)
                for (int64_t j = 0; j < Kd; j++) {
                    const uint8_t byte = q[(i * Kd + j) / 2];
                    wd[i * Kd + j] = (double)e2m1_val((j & 1) ? byte >> 4 : byte & 15) * (double)s[i * (Kd / 32) + j / 32];
                }
            if (l == 0 && q1) memcpy(q1, q, (size_t)(N * Kd / 2)), memcpy(s1, s, (size_t)(N * Kd / 32) * 4);
            if (l == 1 && q2) memcpy(q2, q, (size_t)(N * Kd / 2)), memcpy(s2, s, (size_t)(N * Kd / 32) * 4);
            free(q);
            free(s);
        }
        free(f);
    }
}

static ts_mega_moe_weights *make_weights(ts_test_ctx *ts_t_, const mm_case *c, int64_t El, int64_t I) {
    mm_case cc = *c;
    cc.I = I;
    const int64_t H = c->H, pk = c->bf16 ? 1 : 2, eb = c->bf16 ? 2 : 1;
    uint8_t *q1 = malloc((size_t)(El * 2 * I * H / pk * eb)), *q2 = malloc((size_t)(El * H * I / pk * eb));
    float *s1 = malloc((size_t)(El * 2 * I * H / 32) * 4), *s2 = malloc((size_t)(El * H * I / 32) * 4);
    double *w1 = malloc((size_t)(2 * I * H) * 8), *w2 = malloc((size_t)(H * I) * 8);
    for (int64_t e = 0; e < El; e++)
        expert_weights(&cc, (int64_t)g_ep_rank * El + e, w1, w2, q1 + e * 2 * I * H / pk * eb, s1 + e * 2 * I * H / 32,
                       q2 + e * H * I / pk * eb, s2 + e * H * I / 32);
    ts_tensor t1 = ts_tensor_3d(q1, c->bf16 ? TS_BF16 : TS_E2M1X2, El, 2 * I, H / pk);
    ts_tensor t2 = ts_tensor_3d(q2, c->bf16 ? TS_BF16 : TS_E2M1X2, El, H, I / pk);
    ts_tensor f1 = ts_tensor_3d(s1, TS_F32, El, 2 * I, H / 32), f2 = ts_tensor_3d(s2, TS_F32, El, H, I / 32);
    ts_mega_moe_weights *w = NULL;
    TS_CHECK_STATUS(ts_transform_weights_for_mega_moe(&t1, c->bf16 ? NULL : &f1, &t2, c->bf16 ? NULL : &f2, &w), TS_OK);
    free(q1), free(q2), free(s1), free(s2), free(w1), free(w2);
    return w;
}

/* Buffer, weights, and this rank's inputs written into the buffer views. */
static bool world_make(ts_test_ctx *ts_t_, const mm_case *c, mm_world *wd) {
    memset(wd, 0, sizeof *wd);
    wd->c = *c;
    const int64_t R = g_ep_size, H = c->H, K = c->K;
    wd->E = c->El * R;
    const ts_mega_moe_buffer_options bo = {.ranks_per_node = c->per_node};
    TS_CHECK_STATUS(ts_get_symm_buffer_for_mega_moe(MPI_COMM_WORLD, wd->E, c->T, (int32_t)K, H, c->I,
                                                    c->bf16 ? "bf16xbf16" : "fp8xfp4", NULL, &bo, &wd->buf),
                    TS_OK);
    if (!wd->buf) return false;
    TS_CHECK_STATUS(ts_mega_moe_get_views(wd->buf, &wd->v), TS_OK);
    const int64_t T = wd->v.num_max_tokens_per_rank;
    wd->w = make_weights(ts_t_, c, c->El, c->I);
    ts_prng p = ts_prng_seed(c->seed * 31u + (uint64_t)g_ep_rank * 977u + 5u);
    wd->n = g_ep_rank == c->zero_rank ? 0 : c->T - (int64_t)(ts_prng_u32(&p) % 3);
    const int64_t n = wd->n;
    wd->x = malloc((size_t)(n * H + 1) * 8);
    wd->idx = malloc((size_t)(n * K + 1) * 8);
    wd->tw = malloc((size_t)(n * K + 1) * 4);
    float *xf = malloc((size_t)(n * H + 1) * 4);
    for (int64_t i = 0; i < n * H; i++) xf[i] = ts_bf16_to_f32(ts_f32_to_bf16(ts_prng_uniform(&p) * 2.0f));
    if (c->bf16) {
        uint16_t *xb = (uint16_t *)wd->v.x.data;
        for (int64_t i = 0; i < n * H; i++) xb[i] = ts_f32_to_bf16(xf[i]), wd->x[i] = xf[i];
    } else if (n > 0) {
        ts_tensor tx = ts_tensor_2d(xf, TS_F32, n, H), tq = ts_tensor_2d(wd->v.x.data, TS_E4M3, n, H),
                  ts = ts_tensor_2d(wd->v.x_sf.data, TS_I32, n, H / 128);
        TS_CHECK_STATUS(ts_per_token_cast_to_fp8(&tx, true, 32, true, &tq, &ts), TS_OK);
        const uint8_t *q = (const uint8_t *)wd->v.x.data, *sb = (const uint8_t *)wd->v.x_sf.data;
        for (int64_t t = 0; t < n; t++)
            for (int64_t j = 0; j < H; j++)
                wd->x[t * H + j] = (double)ts_e4m3_to_f32(q[t * H + j]) * ldexp(1.0, (int)sb[t * (H / 32) + j / 32] - 127);
    }
    free(xf);
    /* routing: K distinct experts of [0, E-1) (expert E-1 never chosen), some masked */
    int64_t *vi = (int64_t *)wd->v.topk_idx.data;
    float *vw = (float *)wd->v.topk_weights.data;
    for (int64_t t = 0; t < n; t++) {
        for (int64_t k = 0; k < K; k++) {
            int64_t e;
            bool dup;
            do {
                e = (int64_t)(ts_prng_u32(&p) % (uint32_t)(wd->E - 1));
                dup = false;
                for (int64_t j = 0; j < k; j++) dup |= vi[t * K + j] == e;
            } while (dup && K < wd->E - 1);
            vi[t * K + k] = e;
            vw[t * K + k] = 0.25f + 0.75f * (ts_prng_uniform(&p) * 0.5f + 0.5f);
        }
        for (int64_t k = 0; k < K; k++)
            if ((double)(ts_prng_u32(&p) >> 8) / (double)(1 << 24) < c->mask_prob) vi[t * K + k] = -1, vw[t * K + k] = 0;
    }
    memcpy(wd->idx, vi, (size_t)(n * K) * 8);
    memcpy(wd->tw, vw, (size_t)(n * K) * 4);
    int64_t *mine = malloc((size_t)(T * K) * 8);
    for (int64_t i = 0; i < T * K; i++) mine[i] = i < n * K ? vi[i] : -1;
    wd->all_idx = malloc((size_t)(R * T * K) * 8);
    ep_test_allgather(mine, wd->all_idx, (int)(T * K), MPI_INT64_T);
    free(mine);
    return wd->w != NULL;
}

static void world_free(mm_world *wd) {
    ts_mega_moe_weights_destroy(wd->w);
    ts_mega_moe_buffer_destroy(wd->buf);
    free(wd->x), free(wd->idx), free(wd->tw), free(wd->all_idx);
}

static uint16_t *alloc_y(int64_t n, int64_t H, uint16_t fill) {
    uint16_t *y = malloc((size_t)(n * H + 1) * 2);
    for (int64_t i = 0; i < n * H + 1; i++) y[i] = fill;
    return y;
}

/* The fused calls read every rank's region through shared memory: they run when every rank
 * is on one machine and refuse otherwise (across real hosts), where the tests check the
 * refusal and take the unfused pipeline for the rest. */
static bool one_machine(void) { return g_ep_machine_ranks == g_ep_size; }

static ts_status run_fused(mm_world *wd, uint16_t *y, int32_t *stats) {
    ts_tensor ty = ts_tensor_2d(y, TS_BF16, wd->n, wd->c.H), ts = ts_tensor_1d(stats, TS_I32, wd->c.El);
    if (wd->c.bf16) return ts_bf16_mega_moe(&ty, wd->w, wd->buf, stats ? &ts : NULL, NULL, wd->c.clamp, true);
    return ts_fp8_fp4_mega_moe(&ty, wd->w, wd->buf, stats ? &ts : NULL, NULL, "swiglu", wd->c.clamp, true);
}

/* fused across machines: checks the refusal (y untouched), then runs the unfused pipeline */
static ts_status run(mm_world *wd, uint16_t *y, int32_t *stats, bool fused) {
    if (fused && one_machine()) return run_fused(wd, y, stats);
    if (fused) {
        const uint16_t y0 = wd->n * wd->c.H > 0 ? y[0] : 0;
        if (run_fused(wd, y, NULL) != TS_ERR_UNSUPPORTED || (wd->n * wd->c.H > 0 && y[0] != y0)) return TS_ERR_INTERNAL;
    }
    ts_tensor ty = ts_tensor_2d(y, TS_BF16, wd->n, wd->c.H), ts = ts_tensor_1d(stats, TS_I32, wd->c.El);
    return ts_mega_moe_unfused(&ty, wd->w, wd->buf, stats ? &ts : NULL, wd->c.clamp, true);
}

static double e4m3_nearest(double v) {
    /* brute-force nearest finite e4m3 (ties to the even code), saturating at +-448 */
    const double a = fabs(v);
    double best = 0.0;
    int bestc = 0;
    for (int code = 0; code < 0x7F; code++) {
        const double q = ts_e4m3_to_f32((uint8_t)code);
        const double d = fabs(q - a), db = fabs(best - a);
        if (d < db || (d == db && (code & 1) == 0 && (bestc & 1))) best = q, bestc = code;
    }
    return v < 0 ? -best : best;
}

/* float64 oracles for this rank's tokens: `pure` = the math with no rounding between the
 * steps; `emul` = the rounding points of the spec (bf16 L1 output, FP8 act with ue8m0 per 32,
 * bf16 L2 output, f32 top-k sum) with exact sums. */
static void oracle(const mm_world *wd, double *pure, double *emul) {
    const mm_case *c = &wd->c;
    const int64_t H = c->H, I = c->I, K = c->K, n = wd->n;
    double *w1 = malloc((size_t)(2 * I * H) * 8), *w2 = malloc((size_t)(H * I) * 8);
    double *hp = malloc((size_t)(2 * I) * 8), *ap = malloc((size_t)I * 8), *ae = malloc((size_t)I * 8);
    float *acc = malloc((size_t)H * 4);
    for (int64_t i = 0; i < n * H; i++) pure[i] = 0.0;
    for (int64_t t = 0; t < n; t++) {
        for (int64_t j = 0; j < H; j++) acc[j] = 0.0f;
        for (int64_t k = 0; k < K; k++) {
            const int64_t e = wd->idx[t * K + k];
            if (e < 0) continue;
            expert_weights(c, e, w1, w2, NULL, NULL, NULL, NULL);
            const double wt = wd->tw[t * K + k];
            for (int64_t o = 0; o < 2 * I; o++) {
                double s = 0.0;
                for (int64_t j = 0; j < H; j++) s += wd->x[t * H + j] * w1[o * H + j];
                hp[o] = s;
            }
            for (int64_t o = 0; o < I; o++) {
                for (int v = 0; v < 2; v++) {
                    double g = hp[o], u = hp[I + o];
                    if (v == 1) g = ts_bf16_to_f32(ts_f32_to_bf16((float)g)), u = ts_bf16_to_f32(ts_f32_to_bf16((float)u));
                    g = fmin(g, (double)c->clamp);
                    u = fmax(fmin(u, (double)c->clamp), -(double)c->clamp);
                    const double a = g / (1.0 + exp(-g)) * u * wt;
                    (v == 0 ? ap : ae)[o] = a;
                }
            }
            if (!c->bf16) {
                for (int64_t b0 = 0; b0 < I; b0 += 32) {
                    double amax = 0.0;
                    for (int j = 0; j < 32; j++) amax = fmax(amax, fabs(ae[b0 + j]));
                    const double sf = amax > 0 ? ldexp(1.0, (int)ceil(log2(amax / 448.0))) : 1.0;
                    for (int j = 0; j < 32; j++) ae[b0 + j] = e4m3_nearest(ae[b0 + j] / sf) * sf;
                }
            } else {
                for (int64_t o = 0; o < I; o++) ae[o] = ts_bf16_to_f32(ts_f32_to_bf16((float)ae[o]));
            }
            for (int64_t o = 0; o < H; o++) {
                double sp = 0.0, se = 0.0;
                for (int64_t j = 0; j < I; j++) sp += ap[j] * w2[o * I + j], se += ae[j] * w2[o * I + j];
                pure[t * H + o] += sp;
                acc[o] += ts_bf16_to_f32(ts_f32_to_bf16((float)se));
            }
        }
        for (int64_t j = 0; j < H; j++) emul[t * H + j] = ts_bf16_to_f32(ts_f32_to_bf16(acc[j]));
    }
    free(w1), free(w2), free(hp), free(ap), free(ae), free(acc);
}

static double diff_bf16(const uint16_t *y, const double *ref, int64_t count) {
    double xy = 0.0, xx = 0.0;
    for (int64_t i = 0; i < count; i++) {
        const double a = ts_bf16_to_f32(y[i]);
        xy += a * ref[i];
        xx += a * a + ref[i] * ref[i];
    }
    return xx == 0.0 ? 0.0 : 1.0 - 2.0 * xy / xx;
}

/* Expected stats: init + selections of this rank's experts over every rank's tokens. */
static void expect_stats(const mm_world *wd, const int32_t *init, int32_t *want) {
    const int64_t T = wd->v.num_max_tokens_per_rank, K = wd->c.K, El = wd->c.El;
    for (int64_t e = 0; e < El; e++) want[e] = init[e];
    for (int64_t i = 0; i < (int64_t)g_ep_size * T * K; i++) {
        const int64_t e = wd->all_idx[i] - (int64_t)g_ep_rank * El;
        if (wd->all_idx[i] >= 0 && e >= 0 && e < El) want[e]++;
    }
}

static void check_case(ts_test_ctx *ts_t_, const mm_case *c) {
    mm_world wd;
    if (!world_make(ts_t_, c, &wd)) {
        world_free(&wd);
        return;
    }
    const int64_t n = wd.n, H = c->H, El = c->El;
    uint16_t *yf = alloc_y(n, H, 0x7FC1), *yu = alloc_y(n, H, 0x7FC2), *y2 = alloc_y(n, H, 0x7FC3);
    int32_t init[64], sf[64], su[64], want[64];
    if (El > 64) return;
    for (int64_t e = 0; e < El; e++) init[e] = (int32_t)(e * 7 + g_ep_rank), sf[e] = su[e] = init[e];
    TS_CHECK_STATUS(run(&wd, yf, sf, true), TS_OK);
    TS_CHECK_STATUS(run(&wd, yu, su, false), TS_OK);
    TS_CHECK_MSG(memcmp(yf, yu, (size_t)(n * H) * 2) == 0, "fused and unfused differ");
    /* across machines "fused" below is the unfused pipeline (run): its reruns at 1 thread and
     * with a late rank must keep its bits */
    expect_stats(&wd, init, want);
    for (int64_t e = 0; e < El; e++) {
        TS_CHECK_EQ_INT(sf[e], want[e]);
        TS_CHECK_EQ_INT(su[e], want[e]);
    }
    /* again (the other parity), at 1 thread, and with a late last rank: same bits */
    const int thr = ts_get_num_threads();
    ts_set_num_threads(1);
    TS_CHECK_STATUS(run(&wd, y2, NULL, true), TS_OK);
    TS_CHECK_MSG(memcmp(yf, y2, (size_t)(n * H) * 2) == 0, "fused differs at 1 thread");
    ts_set_num_threads(thr);
    if (g_ep_rank == g_ep_size - 1) usleep(20000);
    memset(y2, 0, (size_t)(n * H) * 2);
    TS_CHECK_STATUS(run(&wd, y2, NULL, true), TS_OK);
    TS_CHECK_MSG(memcmp(yf, y2, (size_t)(n * H) * 2) == 0, "fused differs with a late rank");
    if (g_ep_rank == 0) usleep(20000);
    memset(y2, 0, (size_t)(n * H) * 2);
    TS_CHECK_STATUS(run(&wd, y2, NULL, true), TS_OK);
    TS_CHECK_MSG(memcmp(yf, y2, (size_t)(n * H) * 2) == 0, "fused differs with a late rank 0");
    TS_CHECK(yf[n * H] == 0x7FC1); /* nothing past y */
    /* oracles */
    double *pure = malloc((size_t)(n * H + 1) * 8), *emul = malloc((size_t)(n * H + 1) * 8);
    oracle(&wd, pure, emul);
    const double dp = diff_bf16(yf, pure, n * H), de = diff_bf16(yf, emul, n * H);
    TS_CHECK_MSG(dp < (c->bf16 ? 5e-5 : 2e-3), "calc_diff vs the float64 oracle %.3g", dp);
    TS_CHECK_MSG(de < 1e-7, "calc_diff vs the rounding emulation %.3g", de);
    /* tokens with every selection masked give +0 */
    for (int64_t t = 0; t < n; t++) {
        bool any = false;
        for (int64_t k = 0; k < c->K; k++) any |= wd.idx[t * c->K + k] >= 0;
        if (!any)
            for (int64_t j = 0; j < H; j++) TS_CHECK(yf[t * H + j] == 0);
    }
    free(pure), free(emul), free(yf), free(yu), free(y2);
    world_free(&wd);
}

/* Every rank its own node (forced): the fused calls refuse on every rank, naming the nodes,
 * and the unfused pipeline takes the EP buffer's internode path with the bits of the same
 * pipeline over the machines' split (and the rounding emulation). */
static void check_across_nodes(ts_test_ctx *ts_t_, mm_case c) {
    mm_world one, split;
    c.per_node = 0;
    const bool ok1 = world_make(ts_t_, &c, &one);
    c.per_node = 1;
    const bool ok2 = ok1 && world_make(ts_t_, &c, &split);
    if (ok2) {
        const int64_t n = split.n, H = c.H;
        TS_CHECK_EQ_INT(split.v.num_nodes, g_ep_size);
        uint16_t *y1 = alloc_y(n, H, 0x7FC1), *y2 = alloc_y(n, H, 0x7FC2);
        TS_CHECK_STATUS(run(&one, y1, NULL, false), TS_OK);
        if (g_ep_size > 1) {
            TS_CHECK_STATUS(run_fused(&split, y2, NULL), TS_ERR_UNSUPPORTED);
            TS_CHECK_MSG(strstr(ts_last_error(), "nodes") != NULL, "message: %s", ts_last_error());
            TS_CHECK(y2[0] == 0x7FC2); /* nothing written */
        }
        TS_CHECK_STATUS(run(&split, y2, NULL, false), TS_OK);
        TS_CHECK_MSG(memcmp(y1, y2, (size_t)(n * H) * 2) == 0, "unfused across nodes differs from one node");
        TS_CHECK(y2[n * H] == 0x7FC2);
        double *pure = malloc((size_t)(n * H + 1) * 8), *emul = malloc((size_t)(n * H + 1) * 8);
        oracle(&split, pure, emul);
        const double de = diff_bf16(y2, emul, n * H);
        TS_CHECK_MSG(de < 1e-7, "calc_diff vs the rounding emulation %.3g", de);
        free(pure), free(emul), free(y1), free(y2);
    }
    if (ok1) world_free(&split); /* made, or tried */
    world_free(&one);
}

TS_TEST(mega_moe_across_nodes_unfused_only) {
    const mm_case f = {.H = 256, .I = 128, .El = 2, .K = 3, .T = 10, .seed = 21, .clamp = INFINITY,
                       .zero_rank = g_ep_size > 1 ? 1 : -1, .mask_prob = 0.15};
    check_across_nodes(ts_t_, f);
    const mm_case b = {.H = 128, .I = 64, .El = 2, .K = 2, .T = 8, .seed = 22, .bf16 = true, .clamp = 10.0f,
                       .zero_rank = -1, .mask_prob = 0.1};
    check_across_nodes(ts_t_, b);
}

TS_TEST(mega_moe_fp8_fp4_matches_unfused_and_oracle) {
    const mm_case c = {.H = 256, .I = 128, .El = 3, .K = 4, .T = 12, .seed = 11, .clamp = INFINITY,
                       .zero_rank = g_ep_size > 1 ? 1 : -1, .mask_prob = 0.15};
    check_case(ts_t_, &c);
}

TS_TEST(mega_moe_fp8_fp4_clamp) {
    const mm_case c = {.H = 128, .I = 256, .El = 2, .K = 3, .T = 9, .seed = 12, .clamp = 0.75f, .zero_rank = -1,
                       .mask_prob = 0.3};
    check_case(ts_t_, &c);
}

TS_TEST(mega_moe_bf16_matches_unfused_and_oracle) {
    const mm_case c = {.H = 128, .I = 64, .El = 2, .K = 2, .T = 8, .seed = 13, .bf16 = true, .clamp = 10.0f,
                       .zero_rank = g_ep_size > 2 ? 2 : -1, .mask_prob = 0.1};
    check_case(ts_t_, &c);
}

/* Enough experts for the fused path to claim them across threads (>= 2 per thread): same bits
 * as at 1 thread (check_case reruns at 1 thread). */
TS_TEST(mega_moe_many_experts_threads) {
    const int thr = ts_get_num_threads();
    ts_set_num_threads(3);
    const mm_case c = {.H = 128, .I = 128, .El = 9, .K = 5, .T = 10, .seed = 16, .clamp = 10.0f, .zero_rank = -1,
                       .mask_prob = 0.1};
    check_case(ts_t_, &c);
    ts_set_num_threads(thr);
}

/* The fused path's own expert GEMM (mega_moe_gemm.c) forced on at every expert size it takes
 * (default: 1-2 rows), then forced off: fused == unfused and the oracles either way. */
TS_TEST(mega_moe_fp8_fp4_own_gemm_every_size) {
    const mm_case c = {.H = 384, .I = 256, .El = 3, .K = 4, .T = 10, .seed = 17, .clamp = 10.0f,
                       .zero_rank = -1, .mask_prob = 0.1};
    ts__mega_moe_set_gemm_mode(2);
    check_case(ts_t_, &c);
    ts__mega_moe_set_gemm_mode(1);
    check_case(ts_t_, &c);
    ts__mega_moe_set_gemm_mode(-1);
}

TS_TEST(mega_moe_zero_tokens_everywhere) {
    const mm_case c = {.H = 128, .I = 128, .El = 2, .K = 2, .T = 4, .seed = 14, .clamp = INFINITY, .zero_rank = -1};
    mm_world wd;
    if (world_make(ts_t_, &c, &wd)) {
        uint16_t y[1] = {0x1234};
        int32_t st[2] = {5, 6};
        ts_tensor ty = ts_tensor_2d(y, TS_BF16, 0, c.H), ts = ts_tensor_1d(st, TS_I32, 2);
        TS_CHECK_STATUS(ts_fp8_fp4_mega_moe(&ty, wd.w, wd.buf, &ts, NULL, NULL, INFINITY, false),
                        one_machine() ? TS_OK : TS_ERR_UNSUPPORTED);
        TS_CHECK_STATUS(ts_mega_moe_unfused(&ty, wd.w, wd.buf, &ts, INFINITY, false), TS_OK);
        TS_CHECK(y[0] == 0x1234 && st[0] == 5 && st[1] == 6);
    }
    world_free(&wd);
}

/* Bad input on one rank: its specific code, TS_ERR_PEER elsewhere, y and stats untouched, and
 * the buffer still gives the right answer afterwards. */
TS_TEST(mega_moe_bad_input) {
    const mm_case c = {.H = 128, .I = 128, .El = 2, .K = 2, .T = 6, .seed = 15, .clamp = INFINITY, .zero_rank = -1};
    mm_world wd;
    if (!world_make(ts_t_, &c, &wd)) {
        world_free(&wd);
        return;
    }
    const int bad = g_ep_size - 1;
    const int64_t n = wd.n, H = c.H;
    uint16_t *y = alloc_y(c.T + 8, 2 * H, 0x3F80);
    int32_t st[2] = {3, 4};
    ts_tensor ts = ts_tensor_1d(st, TS_I32, 2);
    for (int fused = 0; fused < (one_machine() ? 2 : 1); fused++) {
        /* hidden mismatch */
        ts_tensor ty = ts_tensor_2d(y, TS_BF16, n, g_ep_rank == bad ? H + 128 : H);
        ts_status s = fused ? ts_fp8_fp4_mega_moe(&ty, wd.w, wd.buf, &ts, NULL, NULL, INFINITY, true)
                            : ts_mega_moe_unfused(&ty, wd.w, wd.buf, &ts, INFINITY, true);
        ep_expect_status(ts_t_, s, TS_ERR_SHAPE, bad);
        /* too many tokens */
        ty = ts_tensor_2d(y, TS_BF16, g_ep_rank == bad ? wd.v.num_max_tokens_per_rank + 1 : n, H);
        s = fused ? ts_fp8_fp4_mega_moe(&ty, wd.w, wd.buf, &ts, NULL, NULL, INFINITY, true)
                  : ts_mega_moe_unfused(&ty, wd.w, wd.buf, &ts, INFINITY, true);
        ep_expect_status(ts_t_, s, TS_ERR_SHAPE, bad);
        /* an expert id out of range */
        int64_t *vi = (int64_t *)wd.v.topk_idx.data;
        const int64_t keep = vi[0];
        if (g_ep_rank == bad && n > 0) vi[0] = wd.E;
        ty = ts_tensor_2d(y, TS_BF16, n, H);
        s = fused ? ts_fp8_fp4_mega_moe(&ty, wd.w, wd.buf, &ts, NULL, NULL, INFINITY, true)
                  : ts_mega_moe_unfused(&ty, wd.w, wd.buf, &ts, INFINITY, true);
        if (n > 0 || g_ep_rank != bad) ep_expect_status(ts_t_, s, TS_ERR_INVALID_ARGUMENT, bad);
        vi[0] = keep;
        /* weights of another intermediate size */
        ts_mega_moe_weights *w2 = make_weights(ts_t_, &c, c.El, 256);
        s = fused ? ts_fp8_fp4_mega_moe(&ty, g_ep_rank == bad ? w2 : wd.w, wd.buf, &ts, NULL, NULL, INFINITY, true)
                  : ts_mega_moe_unfused(&ty, g_ep_rank == bad ? w2 : wd.w, wd.buf, &ts, INFINITY, true);
        ep_expect_status(ts_t_, s, TS_ERR_SHAPE, bad);
        ts_mega_moe_weights_destroy(w2);
        /* the wrong call for the buffer's mma type, a bad recipe */
        if (fused) {
            s = ts_bf16_mega_moe(&ty, wd.w, wd.buf, &ts, NULL, INFINITY, true);
            ep_expect_status(ts_t_, s, TS_ERR_INVALID_ARGUMENT, -1);
            const int64_t rc[3] = {1, 1, 128};
            s = ts_fp8_fp4_mega_moe(&ty, wd.w, wd.buf, &ts, g_ep_rank == bad ? rc : NULL, NULL, INFINITY, true);
            ep_expect_status(ts_t_, s, TS_ERR_INVALID_ARGUMENT, bad);
        }
    }
    if (g_ep_size > 1 && one_machine()) {
        /* activation_clamp differing across ranks: every rank refuses, naming the other */
        ts_tensor ty = ts_tensor_2d(y, TS_BF16, n, H);
        ts_status s = ts_fp8_fp4_mega_moe(&ty, wd.w, wd.buf, &ts, NULL, NULL, g_ep_rank == bad ? 5.0f : INFINITY, true);
        TS_CHECK_STATUS(s, TS_ERR_INVALID_ARGUMENT);
    }
    for (int64_t i = 0; i < (c.T + 8) * 2 * H; i++)
        if (y[i] != 0x3F80) {
            TS_CHECK_MSG(0, "y written by a failed call at %lld", (long long)i);
            break;
        }
    TS_CHECK(st[0] == 3 && st[1] == 4);
    /* still correct afterwards */
    uint16_t *yf = alloc_y(n, H, 0), *yu = alloc_y(n, H, 1);
    TS_CHECK_STATUS(run(&wd, yf, NULL, true), TS_OK);
    TS_CHECK_STATUS(run(&wd, yu, NULL, false), TS_OK);
    TS_CHECK(memcmp(yf, yu, (size_t)(n * H) * 2) == 0);
    double *pure = malloc((size_t)(n * H + 1) * 8), *emul = malloc((size_t)(n * H + 1) * 8);
    oracle(&wd, pure, emul);
    TS_CHECK_MSG(diff_bf16(yf, emul, n * H) < 1e-7, "after errors: calc_diff %.3g", diff_bf16(yf, emul, n * H));
    free(pure), free(emul), free(yf), free(yu), free(y);
    world_free(&wd);
}

TS_TEST(mega_moe_bad_create) {
    ts_mega_moe_buffer *b = NULL;
    /* experts not divisible by the ranks (every rank) */
    if (g_ep_size > 1) {
        TS_CHECK_STATUS(ts_get_symm_buffer_for_mega_moe(MPI_COMM_WORLD, 2 * g_ep_size + 1, 8, 2, 128, 128, NULL, NULL,
                                                        NULL, &b),
                        TS_ERR_INVALID_ARGUMENT);
        TS_CHECK(b == NULL);
    }
    TS_CHECK_STATUS(ts_get_symm_buffer_for_mega_moe(MPI_COMM_WORLD, 2 * g_ep_size, 8, 2, 100, 128, NULL, NULL, NULL, &b),
                    TS_ERR_SHAPE);
    TS_CHECK_STATUS(ts_get_symm_buffer_for_mega_moe(MPI_COMM_WORLD, 2 * g_ep_size, 8, 2, 128, 128, "fp8xfp8", NULL,
                                                    NULL, &b),
                    TS_ERR_INVALID_ARGUMENT);
    /* one rank differs: every rank fails */
    ts_status s = ts_get_symm_buffer_for_mega_moe(MPI_COMM_WORLD, 2 * g_ep_size, 8, 2, 128,
                                                  g_ep_rank == g_ep_size - 1 ? 256 : 128, NULL, NULL, NULL, &b);
    if (g_ep_size > 1) TS_CHECK_STATUS(s, TS_ERR_INVALID_ARGUMENT);
    else {
        TS_CHECK_STATUS(s, TS_OK);
        ts_mega_moe_buffer_destroy(b);
    }
}

/* A rank that skips a call: the others time out naming it (no hang); the buffer is then only
 * destroyed. */
TS_TEST(mega_moe_missing_rank_times_out) {
    if (g_ep_size < 2) return;
    ts_mega_moe_buffer *b = NULL;
    const ts_mega_moe_buffer_options o = {.timeout_s = 0.5};
    TS_CHECK_STATUS(ts_get_symm_buffer_for_mega_moe(MPI_COMM_WORLD, 2 * g_ep_size, 4, 2, 128, 128, NULL, NULL, &o, &b),
                    TS_OK);
    if (!b) return;
    const mm_case c = {.H = 128, .I = 128, .El = 2, .K = 2, .T = 4, .seed = 17};
    ts_mega_moe_weights *w = make_weights(ts_t_, &c, 2, 128);
    const int skip = g_ep_size - 1;
    if (g_ep_rank != skip) {
        uint16_t y[128];
        ts_tensor ty = ts_tensor_2d(y, TS_BF16, 0, 128);
        /* across machines the unfused pipeline (the fused call refuses there) */
        const bool fused = one_machine();
        ts_status s = fused ? ts_fp8_fp4_mega_moe(&ty, w, b, NULL, NULL, NULL, INFINITY, false)
                            : ts_mega_moe_unfused(&ty, w, b, NULL, INFINITY, false);
        TS_CHECK_STATUS(s, TS_ERR_TIMEOUT);
        char want[32];
        snprintf(want, sizeof want, "rank %d", skip);
        TS_CHECK_MSG(strstr(ts_last_error(), want) != NULL, "message does not name %s: %s", want, ts_last_error());
        s = fused ? ts_fp8_fp4_mega_moe(&ty, w, b, NULL, NULL, NULL, INFINITY, false)
                  : ts_mega_moe_unfused(&ty, w, b, NULL, INFINITY, false);
        TS_CHECK_STATUS(s, TS_ERR_PEER);
    }
    ep_test_barrier();
    ts_mega_moe_weights_destroy(w);
    ts_mega_moe_buffer_destroy(b);
}
