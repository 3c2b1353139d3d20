/* Shared pieces of the low-latency EP tests: per-rank inputs, every rank's inputs gathered
 * (so each rank can build what it must receive with plain loops), and independent scalar
 * references of the FP8 cast, LogFMT-10 and the weighted combine. */
#ifndef TS_TEST_EP_LOW_LATENCY_UTIL_H
#define TS_TEST_EP_LOW_LATENCY_UTIL_H

#include "ep_test_util.h"

#include <math.h>

typedef struct ll_case {
    uint64_t seed;
    int64_t T, H;
    int K, El;
    double neg_frac;
    bool zero_odd; /* odd ranks send no tokens */
    bool rank_valued; /* x = rank - 128, last 128 columns = token index (upstream's test data) */
} ll_case;

typedef struct ll_world {
    int R;
    int64_t T, H, E, El;
    int K;
    int64_t *N;      /* [R] */
    int64_t *idx;    /* [R][T][K] */
    float *w;        /* [R][T][K] */
    uint16_t *x;     /* [R][T][H] */
    /* this rank's views */
    ts_tensor tx, tidx, tw;
} ll_world;

static inline uint16_t ll_bf16_of(float f) { return ts_f32_to_bf16(f); }
static inline float ll_f(uint16_t h) { return ts_bf16_to_f32(h); }

static inline void ll_make_world(const ll_case *c, ll_world *w) {
    memset(w, 0, sizeof *w);
    const int R = g_ep_size, me = g_ep_rank, K = c->K;
    w->R = R;
    w->T = c->T;
    w->H = c->H;
    w->K = K;
    w->El = c->El;
    w->E = (int64_t)c->El * R;
    const int64_t T = c->T, H = c->H;
    w->N = calloc((size_t)R, sizeof *w->N);
    w->idx = calloc((size_t)(R * T * K), sizeof *w->idx);
    w->w = calloc((size_t)(R * T * K), sizeof *w->w);
    w->x = calloc((size_t)(R * T * H), sizeof *w->x);
    int64_t myN;
    int64_t *myidx = w->idx + me * T * K;
    float *myw = w->w + me * T * K;
    uint16_t *myx = w->x + me * T * H;
    ts_prng p = ts_prng_seed(c->seed * 7777 + (uint64_t)me * 131 + 5);
    myN = (int64_t)(ts_prng_u32(&p) % (uint32_t)(T + 1));
    if (me == 0) myN = T;
    if (c->zero_odd && me % 2 == 1) myN = 0;
    for (int64_t t = 0; t < myN; t++) {
        for (int k = 0; k < K; k++) {
            int64_t e;
            for (;;) {
                e = ts_prng_u32(&p) % (uint32_t)w->E;
                bool dup = false;
                for (int j = 0; j < k; j++) dup |= myidx[t * K + j] == e;
                if (!dup || K > w->E) break;
            }
            if ((double)(ts_prng_u32(&p) % 1000) < c->neg_frac * 1000.0) e = -1;
            myidx[t * K + k] = e;
            myw[t * K + k] = fabsf(ts_prng_uniform(&p)) + 0.01f;
        }
        /* magnitudes vary per 128-channel group so casts see different scales */
        for (int64_t j = 0; j < H; j++) {
            float v;
            if (c->rank_valued) v = j >= H - 128 ? (float)t : (float)(me - 128);
            else v = ts_prng_uniform(&p) * ldexpf(1.0f, (int)((j / 128 + t) % 9) - 4);
            myx[t * H + j] = ll_bf16_of(v);
        }
    }
    ep_test_allgather(&myN, w->N, 1, MPI_INT64_T);
    ep_test_allgather(MPI_IN_PLACE, w->idx, (int)(T * K), MPI_INT64_T);
    ep_test_allgather(MPI_IN_PLACE, w->w, (int)(T * K), MPI_FLOAT);
    ep_test_allgather(MPI_IN_PLACE, w->x, (int)(T * H), MPI_UINT16_T);
    w->tx = ts_tensor_2d(w->x + me * T * H, TS_BF16, w->N[me], H);
    w->tidx = ts_tensor_2d(w->idx + me * T * K, TS_I64, w->N[me], K);
    w->tw = ts_tensor_2d(w->w + me * T * K, TS_F32, w->N[me], K);
}

static inline void ll_free_world(ll_world *w) {
    free(w->N);
    free(w->idx);
    free(w->w);
    free(w->x);
}

static inline ts_ep_buffer *ll_buffer(ts_test_ctx *ts_t_, const ll_world *w, double timeout_s) {
    int64_t bytes = 0;
    TS_CHECK_STATUS(ts_ep_get_low_latency_rdma_size_hint(w->T, w->H, w->R, w->E, &bytes), TS_OK);
    ts_ep_buffer *b = NULL;
    ts_ep_buffer_options o = ts_ep_default_buffer_options();
    o.timeout_s = timeout_s;
    /* ranks_per_node from TS_EP_RANKS_PER_NODE: the runs with it set take the internode path */
    TS_CHECK_STATUS(ts_ep_buffer_create(MPI_COMM_WORLD, 1 << 20, bytes, true, &o, &b), TS_OK);
    return b;
}

/* ll_make_world, then a buffer for it (deadline timeout_s). NULL, with the world freed again,
 * when the buffer cannot be had. */
static inline ts_ep_buffer *ll_world_buffer(ts_test_ctx *ts_t_, const ll_case *c, ll_world *w,
                                            double timeout_s) {
    ll_make_world(c, w);
    ts_ep_buffer *b = ll_buffer(ts_t_, w, timeout_s);
    if (!b) ll_free_world(w);
    return b;
}

/* e4m3 of v by brute force over all codes: saturate to +-448, nearest, ties to the even code. */
static inline uint8_t ll_ref_e4m3(float v) {
    if (v != v) return 0x7F;
    const float a = fminf(fabsf(v), 448.0f);
    int best = 0;
    double bd = 1e30;
    for (int c = 0; c < 0x7F; c++) {
        const double d = fabs((double)ts_e4m3_to_f32((uint8_t)c) - (double)a);
        if (d < bd || (d == bd && (c & 1) == 0)) {
            bd = d;
            best = c;
        }
    }
    return (uint8_t)(best | (signbit(v) ? 0x80 : 0));
}

/* Upstream's per-128 cast of one row, written out again from the spec. */
static inline void ll_ref_cast(const uint16_t *x, int64_t H, bool round_scale, uint8_t *q, float *sinv) {
    for (int64_t g = 0; g < H / 128; g++) {
        float amax = 1e-4f;
        for (int j = 0; j < 128; j++) {
            const float a = fabsf(ll_f(x[g * 128 + j]));
            if (a > amax) amax = a;
        }
        float scale, scale_inv;
        if (round_scale) {
            const double r = (double)(amax * (1.0f / 448.0f));
            const int e = (int)ceil(log2(r)); /* exact for floats: log2 of a power of two is exact */
            scale_inv = ldexpf(1.0f, e);
            scale = ldexpf(1.0f, -e);
        } else {
            scale_inv = amax * (1.0f / 448.0f);
            scale = 448.0f / amax;
        }
        sinv[g] = scale_inv;
        for (int j = 0; j < 128; j++) q[g * 128 + j] = ll_ref_e4m3(ll_f(x[g * 128 + j]) * scale);
    }
}

/* LogFMT-10 of one division, from the spec's description (codes in a bit stream). */
static inline int ll_ref_logfmt_encode(const uint16_t *x, uint8_t *enc, uint16_t meta[2], uint16_t codes[128]) {
    float amax = 0.0f, amin = INFINITY;
    for (int j = 0; j < 128; j++) {
        const float a = fabsf(ll_f(x[j]));
        if (a > amax) amax = a;
        if (a < amin) amin = a;
    }
    meta[0] = ll_bf16_of(amax);
    meta[1] = ll_bf16_of(amin);
    const float la = log2f(amax);
    const float lmin = amin == 0.0f ? la - 32.0f : fmaxf(log2f(amin), la - 32.0f);
    if (!(la < 0.0f && lmin < la)) {
        memcpy(enc, x, 256);
        return 256;
    }
    const float step = (la - lmin) / 510.0f, sinv = 1.0f / step;
    const float rnd = fmaf(-log2f((1.0f + exp2f(step)) * 0.5f), sinv, 2.0f);
    const float fused = fmaf(-lmin, sinv, rnd);
    memset(enc, 0, 160);
    for (int j = 0; j < 128; j++) {
        const float a = fabsf(ll_f(x[j]));
        float f = fmaf(log2f(a), sinv, fused);
        if (!(f > 0.0f)) f = 0.0f;
        uint32_t c = (uint32_t)floorf(f);
        if (c > 511) c = 511;
        codes[j] = (uint16_t)c;
        const int g = j / 16, i = j % 16;
        for (int bit = 0; bit < 9; bit++)
            if (c >> bit & 1) enc[g * 20 + (9 * i + bit) / 8] |= (uint8_t)(1u << ((9 * i + bit) % 8));
        if (x[j] >> 15) enc[g * 20 + (144 + i) / 8] |= (uint8_t)(1u << ((144 + i) % 8));
    }
    return 160;
}

static inline float ll_ref_logfmt_value(const uint8_t *enc, const uint16_t meta[2], int j) {
    const float amax = ll_f(meta[0]), amin = ll_f(meta[1]);
    const float la = log2f(amax);
    const float lmin = amin == 0.0f ? la - 32.0f : fmaxf(log2f(amin), la - 32.0f);
    if (!(la < 0.0f && lmin < la)) {
        uint16_t v;
        memcpy(&v, enc + 2 * j, 2);
        return ll_f(v);
    }
    const float step = (la - lmin) / 510.0f;
    const int g = j / 16, i = j % 16;
    uint32_t c = 0;
    for (int bit = 0; bit < 9; bit++) c |= (uint32_t)(enc[g * 20 + (9 * i + bit) / 8] >> ((9 * i + bit) % 8) & 1) << bit;
    const int sgn = enc[g * 20 + (144 + i) / 8] >> ((144 + i) % 8) & 1;
    const float d = c == 0 ? 0.0f : exp2f(fmaf((float)(c - 1), step, lmin));
    return sgn ? -d : d;
}

/* The deterministic "expert output" row of (global expert e, source rank s, source token t). */
static inline uint16_t ll_expert_out(int64_t e, int s, int64_t t, int64_t j, bool small) {
    uint64_t z = (uint64_t)e * 0x9E3779B97F4A7C15ull ^ (uint64_t)s * 0xBF58476D1CE4E5B9ull ^
                 (uint64_t)t * 0x94D049BB133111EBull ^ (uint64_t)j * 0x2545F4914F6CDD1Dull;
    z ^= z >> 29;
    z *= 0xBF58476D1CE4E5B9ull;
    z ^= z >> 32;
    float v = ((float)(z & 0xFFFF) / 32768.0f - 1.0f);
    if (small) v *= 0.5f; /* |v| < 1: LogFMT casts these divisions */
    else v *= 3.0f;
    return ll_bf16_of(v);
}

static inline uint64_t ll_hash(const void *p, size_t n, uint64_t h) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001B3ull;
    return h;
}

#endif
