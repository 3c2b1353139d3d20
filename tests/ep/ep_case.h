/* Generated per-rank inputs of one EP test case (seeded; each rank draws its own). */
#ifndef TS_EP_CASE_H
#define TS_EP_CASE_H

#include "ep_test_util.h"

enum { EP_ROUTE_RANDOM = 0, EP_ROUTE_SKEWED = 1, EP_ROUTE_ZERO_ODD = 2 };

typedef struct ep_case {
    uint64_t seed;
    int64_t hidden, max_tokens;
    int K, experts_per_rank;
    bool fp8;
    int64_t num_scales;
    ts_dtype scale_dtype;
    bool scales_colmajor; /* column-major view with an odd column stride */
    ts_dtype idx_dtype;
    int routing;
    double neg_frac; /* share of top-k entries set to -1 */
} ep_case;

typedef struct ep_inputs {
    int64_t N, E;
    void *x;            /* [N, hidden] bf16 or e4m3 */
    void *scales;       /* storage of the scale view */
    void *idx;          /* [N, K] */
    float *w;           /* [N, K] */
    ts_tensor tx, ts, tidx, tw;
    /* layout */
    int32_t *tpr, *tpe;
    bool *in_rank;
    ts_tensor ttpr, ttpe, tin;
} ep_inputs;

static inline int64_t ep_idx_get(const ep_inputs *in, int64_t t, int k, int K) {
    return in->tidx.dtype == TS_I64 ? ((int64_t *)in->idx)[t * K + k] : ((int32_t *)in->idx)[t * K + k];
}

/* Fills x (and scales) from `xseed` so cached dispatch can replay the routing with new rows. */
static inline void ep_fill_x(const ep_case *c, ep_inputs *in, uint64_t xseed) {
    ts_prng p = ts_prng_seed(xseed * 7919 + (uint64_t)g_ep_rank * 104729 + 17);
    const int64_t n = in->N * c->hidden;
    if (c->fp8) {
        uint8_t *x = in->x;
        for (int64_t i = 0; i < n; i++) x[i] = (uint8_t)ts_prng_u32(&p);
        const int64_t es = (int64_t)ts_dtype_size(c->scale_dtype);
        const int64_t span = c->scales_colmajor ? c->num_scales * (in->N + 3) : in->N * (c->num_scales + 1);
        uint8_t *s = in->scales;
        for (int64_t i = 0; i < span * es; i++) s[i] = (uint8_t)ts_prng_u32(&p);
    } else {
        uint16_t *x = in->x;
        for (int64_t i = 0; i < n; i++) x[i] = ts_f32_to_bf16(ts_prng_uniform(&p) * 4.0f);
    }
}

static inline void ep_make_inputs(const ep_case *c, ep_inputs *in) {
    memset(in, 0, sizeof *in);
    const int R = g_ep_size, me = g_ep_rank, K = c->K;
    ts_prng p = ts_prng_seed(c->seed * 1000003 + (uint64_t)me * 7 + 1);
    in->E = (int64_t)c->experts_per_rank * R;
    in->N = c->max_tokens > 0 ? (int64_t)(ts_prng_u32(&p) % (uint32_t)(c->max_tokens + 1)) : 0;
    if (c->routing == EP_ROUTE_ZERO_ODD && me % 2 == 1) in->N = 0;
    if (me == 0 && c->max_tokens > 0 && in->N == 0) in->N = c->max_tokens; /* someone sends */
    const int64_t N = in->N, H = c->hidden;
    const int64_t xes = c->fp8 ? 1 : 2;
    in->x = malloc((size_t)(N * H * xes + 1));
    in->tx = ts_tensor_2d(in->x, c->fp8 ? TS_E4M3 : TS_BF16, N, H);
    if (c->fp8) {
        const int64_t es = (int64_t)ts_dtype_size(c->scale_dtype), S = c->num_scales;
        const int64_t span = c->scales_colmajor ? S * (N + 3) : N * (S + 1);
        in->scales = malloc((size_t)(span * es + 1));
        in->ts = ts_tensor_2d(in->scales, c->scale_dtype, N, S);
        if (c->scales_colmajor) {
            in->ts.strides[0] = 1;
            in->ts.strides[1] = N + 3;
        } else {
            in->ts.strides[0] = S + 1;
        }
    }
    const int64_t ies = c->idx_dtype == TS_I64 ? 8 : 4;
    in->idx = malloc((size_t)(N * K * ies + 1));
    in->w = malloc((size_t)(N * K * 4 + 4));
    in->tidx = ts_tensor_2d(in->idx, c->idx_dtype, N, K);
    in->tw = ts_tensor_2d(in->w, TS_F32, N, K);
    const int El = c->experts_per_rank;
    const int target = (int)(c->seed % (uint64_t)R);
    for (int64_t t = 0; t < N; t++) {
        for (int k = 0; k < K; k++) {
            int64_t e;
            if (c->routing == EP_ROUTE_SKEWED) {
                e = (int64_t)target * El + ts_prng_u32(&p) % (uint32_t)El; /* duplicates allowed */
            } else {
                /* distinct experts, as a top-k of scores gives */
                for (;;) {
                    e = ts_prng_u32(&p) % (uint32_t)in->E;
                    bool dup = false;
                    for (int j = 0; j < k; j++) dup |= ep_idx_get(in, t, j, K) == e;
                    if (!dup || K > in->E) break;
                }
            }
            if ((double)(ts_prng_u32(&p) % 1000) < c->neg_frac * 1000.0) e = -1;
            if (c->idx_dtype == TS_I64) ((int64_t *)in->idx)[t * K + k] = e;
            else ((int32_t *)in->idx)[t * K + k] = (int32_t)e;
            in->w[t * K + k] = ts_prng_uniform(&p);
        }
    }
    in->tpr = calloc((size_t)R, 4);
    in->tpe = calloc((size_t)in->E, 4);
    in->in_rank = calloc((size_t)(N * R + 1), 1);
    in->ttpr = ts_tensor_1d(in->tpr, TS_I32, R);
    in->ttpe = ts_tensor_1d(in->tpe, TS_I32, in->E);
    in->tin = ts_tensor_2d(in->in_rank, TS_BOOL, N, R);
    ep_fill_x(c, in, c->seed);
}

static inline void ep_free_inputs(ep_inputs *in) {
    free(in->x);
    free(in->scales);
    free(in->idx);
    free(in->w);
    free(in->tpr);
    free(in->tpe);
    free(in->in_rank);
}

static inline ts_ep_dispatch_args ep_args(const ep_case *c, ep_inputs *in, bool with_topk) {
    ts_ep_dispatch_args a;
    memset(&a, 0, sizeof a);
    a.x = &in->tx;
    a.x_scales = c->fp8 ? &in->ts : NULL;
    a.topk_idx = with_topk ? &in->tidx : NULL;
    a.topk_weights = with_topk ? &in->tw : NULL;
    a.num_tokens_per_rank = &in->ttpr;
    a.num_tokens_per_expert = &in->ttpe;
    a.is_token_in_rank = &in->tin;
    a.expert_alignment = 1;
    return a;
}

static inline bool ep_bytes_equal(const ts_tensor *a, const ts_tensor *b, int64_t rows) {
    if (a->shape[1] != b->shape[1] || a->dtype != b->dtype) return false;
    const size_t n = (size_t)(rows * a->shape[1]) * ts_dtype_size(a->dtype);
    return n == 0 || memcmp(a->data, b->data, n) == 0;
}

#endif
