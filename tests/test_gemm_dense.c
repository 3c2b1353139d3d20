/* Dense FP8/FP4/BF16 GEMM: float64 oracles (dequantised and unquantised operands), odd sizes
 * and K tails, accumulation (C, C aliasing D), the four layout variants, generic vs AVX2,
 * thread counts, batch invariance, packed vs f32 scales, empty problems, bad input. */
#include "ts_prng.h"
#include "ts_test.h"

#include "tilestack/gemm.h"
#include "tilestack/numerics.h"
#include "tilestack/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ operands */

enum qkind { Q_FP8_TOKEN, Q_FP8_BLOCK, Q_FP4_TOKEN, Q_BF16 };

/* One quantised operand [rows, k] stored K-major, with its unquantised bf16 source. */
typedef struct opnd {
    int64_t rows, k, gmn, gk;
    enum qkind kind;
    bool packed;      /* packed ue8m0 scales (K-major int32 words) */
    uint16_t *src;    /* bf16 bits [rows, k] */
    void *q;          /* e4m3 [rows, k], e2m1x2 [rows, k/2] or bf16 (= src) */
    void *sf;         /* f32 or i32 */
    ts_tensor x, s;
} opnd;

static uint16_t *rand_bf16(uint64_t seed, int64_t n) {
    uint16_t *v = (uint16_t *)malloc((size_t)n * 2 + 2);
    ts_prng p = ts_prng_seed(seed);
    for (int64_t i = 0; i < n; i++) v[i] = ts_f32_to_bf16(ts_prng_uniform(&p) * 2.0f);
    return v;
}

static opnd opnd_make(ts_test_ctx *ts_t_, enum qkind kind, int64_t rows, int64_t k, uint64_t seed,
                      bool ue8m0, bool packed) {
    opnd o;
    memset(&o, 0, sizeof o);
    o.rows = rows, o.k = k, o.kind = kind, o.packed = packed;
    o.src = rand_bf16(seed, rows * k);
    ts_tensor xs = ts_tensor_2d(o.src, TS_BF16, rows, k);
    if (kind == Q_BF16) {
        o.q = o.src;
        o.x = xs;
        return o;
    }
    o.gmn = kind == Q_FP8_BLOCK ? 128 : 1;
    o.gk = kind == Q_FP4_TOKEN ? 32 : 128;
    int64_t sr = (rows + o.gmn - 1) / o.gmn, sc = (k + o.gk - 1) / o.gk;
    if (packed) sc = (sc + 3) / 4;
    o.sf = calloc((size_t)(sr * sc + 1), 4);
    o.s = ts_tensor_2d(o.sf, packed ? TS_I32 : TS_F32, sr, sc);
    if (kind == Q_FP4_TOKEN) {
        o.q = calloc((size_t)(rows * k / 2 + 1), 1);
        o.x = ts_tensor_2d(o.q, TS_E2M1X2, rows, k / 2);
        TS_CHECK_STATUS(ts_per_token_cast_to_fp4(&xs, ue8m0, 32, packed, TS_FP4_ROUND_DEEPGEMM, &o.x, &o.s),
                        TS_OK);
    } else {
        o.q = calloc((size_t)(rows * k + 1), 1);
        o.x = ts_tensor_2d(o.q, TS_E4M3, rows, k);
        if (kind == Q_FP8_TOKEN)
            TS_CHECK_STATUS(ts_per_token_cast_to_fp8(&xs, ue8m0, 128, packed, &o.x, &o.s), TS_OK);
        else
            TS_CHECK_STATUS(ts_per_block_cast_to_fp8(&xs, ue8m0, 128, &o.x, &o.s), TS_OK);
    }
    return o;
}

static void opnd_free(opnd *o) {
    if (o->q != o->src) free(o->q);
    free(o->src);
    free(o->sf);
}

static double scale_at(const opnd *o, int64_t r, int64_t k) {
    int64_t i = r / o->gmn, j = k / o->gk;
    if (!o->packed) return ((const float *)o->sf)[i * o->s.strides[0] + j * o->s.strides[1]];
    uint32_t w = (uint32_t)((const int32_t *)o->sf)[i * o->s.strides[0] + (j / 4) * o->s.strides[1]];
    return ldexp(1.0, (int)((w >> (8 * (j % 4))) & 0xFF) - 127);
}

/* Dequantised value, in double. */
static double dq(const opnd *o, int64_t r, int64_t k) {
    switch (o->kind) {
    case Q_BF16: return ts_bf16_to_f32(o->src[r * o->k + k]);
    case Q_FP4_TOKEN: {
        uint8_t byte = ((const uint8_t *)o->q)[r * (o->k / 2) + k / 2];
        return (double)ts_e2m1_to_f32((byte >> (4 * (k & 1))) & 0xF) * scale_at(o, r, k);
    }
    default: return (double)ts_e4m3_to_f32(((const uint8_t *)o->q)[r * o->k + k]) * scale_at(o, r, k);
    }
}

/* ref[m,n] = (c) + sum_k A[m,k] B[n,k] in double, from dequantised (deq) or source values. */
static double *reference(const opnd *a, const opnd *b, const float *c, bool deq) {
    int64_t M = a->rows, N = b->rows, K = a->k;
    double *ad = (double *)malloc((size_t)(M * K + 1) * sizeof(double));
    double *bd = (double *)malloc((size_t)(N * K + 1) * sizeof(double));
    double *r = (double *)malloc((size_t)(M * N + 1) * sizeof(double));
    for (int64_t i = 0; i < M; i++)
        for (int64_t k = 0; k < K; k++)
            ad[i * K + k] = deq ? dq(a, i, k) : ts_bf16_to_f32(a->src[i * K + k]);
    for (int64_t i = 0; i < N; i++)
        for (int64_t k = 0; k < K; k++)
            bd[i * K + k] = deq ? dq(b, i, k) : ts_bf16_to_f32(b->src[i * K + k]);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = c ? c[i * N + j] : 0.0;
            for (int64_t k = 0; k < K; k++) s += ad[i * K + k] * bd[j * K + k];
            r[i * N + j] = s;
        }
    free(ad);
    free(bd);
    return r;
}

/* deep_gemm.testing.calc_diff, in double. */
static double calc_diff_d(const double *x, const double *y, int64_t n) {
    double xy = 0, xx = 0;
    for (int64_t i = 0; i < n; i++) xy += x[i] * y[i], xx += x[i] * x[i] + y[i] * y[i];
    return xx == 0 ? 0.0 : 1.0 - 2.0 * xy / xx;
}

static double *out_to_double(const void *d, ts_dtype dt, int64_t n) {
    double *r = (double *)malloc((size_t)(n + 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++)
        r[i] = dt == TS_F32 ? ((const float *)d)[i] : ts_bf16_to_f32(((const uint16_t *)d)[i]);
    return r;
}

static ts_status run_nt(const opnd *a, const opnd *b, void *d, ts_dtype dt, const void *c) {
    ts_tensor dv = ts_tensor_2d(d, dt, a->rows, b->rows);
    ts_tensor cv = ts_tensor_2d((void *)c, dt, a->rows, b->rows);
    if (a->kind == Q_BF16) return ts_bf16_gemm_nt(&a->x, &b->x, &dv, c ? &cv : NULL, NULL);
    int64_t ra[2] = {a->gmn, a->gk}, rb[2] = {b->gmn, b->gk};
    return ts_fp8_fp4_gemm_nt(&a->x, &a->s, &b->x, &b->s, &dv, c ? &cv : NULL, NULL, ra, rb, NULL,
                              false);
}

static size_t esize(ts_dtype dt) { return dt == TS_F32 ? 4 : 2; }

/* ------------------------------------------------------------------ accuracy */

typedef struct acc_case {
    enum qkind ka, kb;
    bool ue8m0, packed;
    double max_diff; /* upstream threshold vs the unquantised reference */
} acc_case;

static void check_accuracy(ts_test_ctx *ts_t_, const acc_case *cs, int64_t M, int64_t N, int64_t K,
                           uint64_t seed) {
    opnd a = opnd_make(ts_t_, cs->ka, M, K, seed, cs->ue8m0, cs->packed);
    opnd b = opnd_make(ts_t_, cs->kb, N, K, seed + 1, cs->ue8m0, cs->packed);
    float *df = (float *)malloc((size_t)(M * N + 1) * 4);
    uint16_t *db = (uint16_t *)malloc((size_t)(M * N + 1) * 2);
    TS_CHECK_STATUS(run_nt(&a, &b, df, TS_F32, NULL), TS_OK);
    TS_CHECK_STATUS(run_nt(&a, &b, db, TS_BF16, NULL), TS_OK);
    double *rq = reference(&a, &b, NULL, true), *ru = reference(&a, &b, NULL, false);
    double *of = out_to_double(df, TS_F32, M * N), *ob = out_to_double(db, TS_BF16, M * N);
    double d1 = calc_diff_d(of, rq, M * N), d2 = calc_diff_d(ob, ru, M * N);
    TS_CHECK_MSG(d1 <= 1e-6, "kinds %d x %d M%lld N%lld K%lld: diff vs dequantised %g", cs->ka,
                 cs->kb, (long long)M, (long long)N, (long long)K, d1);
    /* calc_diff over a handful of dot products measures cancellation, not the kernel: the
     * upstream thresholds apply from a few dozen outputs on. */
    TS_CHECK_MSG(M * N < 32 || d2 < cs->max_diff, "kinds %d x %d M%lld N%lld K%lld: diff vs bf16 %g >= %g",
                 cs->ka, cs->kb, (long long)M, (long long)N, (long long)K, d2, cs->max_diff);
    /* bf16 D is the RNE of the f32 result. */
    for (int64_t i = 0; i < M * N; i++)
        if (db[i] != ts_f32_to_bf16(df[i])) {
            TS_CHECK_MSG(0, "bf16 D[%lld] is not rne(f32 D)", (long long)i);
            break;
        }
    free(rq), free(ru), free(of), free(ob), free(df), free(db);
    opnd_free(&a), opnd_free(&b);
}

static const int64_t k_shapes[][3] = {
    {1, 1, 128}, {7, 129, 127}, {129, 7, 129}, {127, 129, 300}, {1, 33, 1000}, {66, 40, 64}, {5, 17, 4001},
};

TS_TEST(gemm_fp8_accuracy) {
    const acc_case cases[] = {
        {Q_FP8_TOKEN, Q_FP8_BLOCK, false, false, 1e-3}, /* (1,128,128) f32, the SM90 recipe */
        {Q_FP8_TOKEN, Q_FP8_TOKEN, true, false, 1e-3},  /* (1,1,128) f32 pow2 */
        {Q_FP8_TOKEN, Q_FP8_TOKEN, true, true, 1e-3},   /* (1,1,128) packed ue8m0 */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (size_t s = 0; s < sizeof k_shapes / sizeof k_shapes[0]; s++)
            check_accuracy(ts_t_, &cases[c], k_shapes[s][0], k_shapes[s][1], k_shapes[s][2], 100 + s);
}

TS_TEST(gemm_fp4_accuracy) {
    const acc_case cases[] = {
        {Q_FP8_TOKEN, Q_FP4_TOKEN, true, false, 1e-2},
        {Q_FP8_TOKEN, Q_FP4_TOKEN, true, true, 1e-2},
        {Q_FP4_TOKEN, Q_FP4_TOKEN, true, true, 2e-2},
        {Q_FP4_TOKEN, Q_FP8_TOKEN, true, false, 1e-2},
    };
    /* fp4 K is even (bytes along K). */
    const int64_t shapes[][3] = {{1, 1, 32}, {7, 129, 126}, {129, 7, 130}, {64, 65, 1000}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            check_accuracy(ts_t_, &cases[c], shapes[s][0], shapes[s][1], shapes[s][2], 200 + s);
}

TS_TEST(gemm_bf16_accuracy) {
    const acc_case cs = {Q_BF16, Q_BF16, false, false, 1e-5};
    for (size_t s = 0; s < sizeof k_shapes / sizeof k_shapes[0]; s++)
        check_accuracy(ts_t_, &cs, k_shapes[s][0], k_shapes[s][1], k_shapes[s][2], 300 + s);
}

/* ------------------------------------------------------------------ accumulation */

TS_TEST(gemm_accumulate_c) {
    const int64_t M = 37, N = 45, K = 300;
    for (int bf = 0; bf < 2; bf++) {
        enum qkind ka = bf ? Q_BF16 : Q_FP8_TOKEN, kb = bf ? Q_BF16 : Q_FP8_BLOCK;
        opnd a = opnd_make(ts_t_, ka, M, K, 11, false, false);
        opnd b = opnd_make(ts_t_, kb, N, K, 12, false, false);
        for (int f32 = 0; f32 < 2; f32++) {
            ts_dtype dt = f32 ? TS_F32 : TS_BF16;
            size_t es = esize(dt);
            void *c = malloc((size_t)(M * N) * es), *d = malloc((size_t)(M * N) * es),
                 *d0 = malloc((size_t)(M * N) * es), *dal = malloc((size_t)(M * N) * es);
            float *cf = (float *)malloc((size_t)(M * N) * 4);
            ts_prng p = ts_prng_seed(13);
            for (int64_t i = 0; i < M * N; i++) {
                float v = ts_prng_uniform(&p) * 32.0f;
                if (f32) ((float *)c)[i] = v, cf[i] = v;
                else ((uint16_t *)c)[i] = ts_f32_to_bf16(v), cf[i] = ts_bf16_to_f32(((uint16_t *)c)[i]);
            }
            TS_CHECK_STATUS(run_nt(&a, &b, d, dt, c), TS_OK);
            TS_CHECK_STATUS(run_nt(&a, &b, d0, TS_F32 == dt ? TS_F32 : TS_BF16, NULL), TS_OK);
            /* C aliasing D gives the same bits. */
            memcpy(dal, c, (size_t)(M * N) * es);
            TS_CHECK_STATUS(run_nt(&a, &b, dal, dt, dal), TS_OK);
            TS_CHECK(memcmp(dal, d, (size_t)(M * N) * es) == 0);
            /* D = C + acc with acc the f32 result without C. */
            float *acc = (float *)malloc((size_t)(M * N) * 4);
            TS_CHECK_STATUS(run_nt(&a, &b, acc, TS_F32, NULL), TS_OK);
            long bad = 0;
            for (int64_t i = 0; i < M * N; i++) {
                float v = cf[i] + acc[i];
                if (f32 ? ((float *)d)[i] != v : ((uint16_t *)d)[i] != ts_f32_to_bf16(v)) bad++;
            }
            TS_CHECK_EQ_INT(bad, 0);
            double *ref = reference(&a, &b, cf, !bf), *o = out_to_double(d, dt, M * N);
            TS_CHECK(calc_diff_d(o, ref, M * N) < 1e-5);
            free(ref), free(o), free(acc), free(c), free(d), free(d0), free(dal), free(cf);
        }
        opnd_free(&a), opnd_free(&b);
    }
}

/* ------------------------------------------------------------------ invariances */

/* Row-major copy of the transpose of a 2-D tensor whose elements are esz bytes. */
static void *transpose_copy(const ts_tensor *t, size_t esz, ts_tensor *out) {
    int64_t r = t->shape[0], c = t->shape[1];
    char *buf = (char *)malloc((size_t)(r * c) * esz + 1);
    for (int64_t i = 0; i < r; i++)
        for (int64_t j = 0; j < c; j++)
            memcpy(buf + (j * r + i) * esz, (const char *)t->data + (i * t->strides[0] + j * t->strides[1]) * esz, esz);
    *out = ts_tensor_2d(buf, t->dtype, c, r);
    return buf;
}

/* Storage of [rows, k] as the transposed argument the nn/tn/tt variants take. */
static void *transposed_arg(ts_test_ctx *ts_t_, const opnd *o, ts_tensor *xt) {
    if (o->kind != Q_FP4_TOKEN) return transpose_copy(&o->x, ts_dtype_size(o->x.dtype), xt);
    void *buf = calloc((size_t)(o->rows * o->k / 2 + 1), 1);
    *xt = ts_tensor_2d(buf, TS_E2M1X2, o->k, o->rows / 2);
    TS_CHECK_STATUS(ts_transpose_packed_fp4(&o->x, xt), TS_OK);
    return buf;
}

static void check_variants(ts_test_ctx *ts_t_, enum qkind ka, enum qkind kb, bool packed,
                           int64_t M, int64_t N, int64_t K) {
    opnd a = opnd_make(ts_t_, ka, M, K, 21, true, packed);
    opnd b = opnd_make(ts_t_, kb, N, K, 22, true, packed);
    ts_tensor at, bt, sat, sbt;
    void *ab = transposed_arg(ts_t_, &a, &at), *bb = transposed_arg(ts_t_, &b, &bt);
    void *sab = NULL, *sbb = NULL;
    if (ka != Q_BF16) sab = transpose_copy(&a.s, 4, &sat), sbb = transpose_copy(&b.s, 4, &sbt);
    float *ref = (float *)malloc((size_t)(M * N) * 4), *d = (float *)malloc((size_t)(M * N) * 4);
    ts_tensor dv = ts_tensor_2d(d, TS_F32, M, N);
    TS_CHECK_STATUS(run_nt(&a, &b, ref, TS_F32, NULL), TS_OK);
    int64_t ra[2] = {a.gmn, a.gk}, rb[2] = {b.gmn, b.gk};
    for (int v = 0; v < 7; v++) {
        memset(d, 0xA5, (size_t)(M * N) * 4);
        ts_status st;
        if (ka == Q_BF16) {
            switch (v) {
            case 0: st = ts_bf16_gemm_nn(&a.x, &bt, &dv, NULL, NULL); break;
            case 1: st = ts_bf16_gemm_tn(&at, &bt, &dv, NULL, "mn"); break;
            case 2: st = ts_bf16_gemm_tt(&at, &b.x, &dv, NULL, "mn"); break;
            default: st = ts_bf16_gemm_nt(&a.x, &b.x, &dv, NULL, "nk"); break;
            }
        } else {
            switch (v) {
            case 0: st = ts_fp8_fp4_gemm_nn(&a.x, &a.s, &bt, &sbt, &dv, NULL, NULL, ra, rb, NULL, false); break;
            case 1: st = ts_fp8_fp4_gemm_tn(&at, &sat, &bt, &sbt, &dv, NULL, NULL, ra, rb, "mn", false); break;
            case 2: st = ts_fp8_fp4_gemm_tt(&at, &sat, &b.x, &b.s, &dv, NULL, NULL, ra, rb, "mn", false); break;
            case 3: st = ts_fp8_gemm_nn(&a.x, &a.s, &bt, &sbt, &dv, NULL, NULL, ra, rb, NULL, false); break;
            case 4: st = ts_fp8_gemm_tn(&at, &sat, &bt, &sbt, &dv, NULL, NULL, ra, rb, NULL, false); break;
            case 5: st = ts_fp8_gemm_tt(&at, &sat, &b.x, &b.s, &dv, NULL, NULL, ra, rb, NULL, false); break;
            default: st = ts_fp8_gemm_nt(&a.x, &a.s, &b.x, &b.s, &dv, NULL, NULL, ra, rb, NULL, false); break;
            }
        }
        TS_CHECK_STATUS(st, TS_OK);
        TS_CHECK_MSG(memcmp(d, ref, (size_t)(M * N) * 4) == 0, "variant %d kinds %d x %d differs", v,
                     ka, kb);
    }
    free(ab), free(bb), free(sab), free(sbb), free(ref), free(d);
    opnd_free(&a), opnd_free(&b);
}

TS_TEST(gemm_layout_variants_bitwise) {
    check_variants(ts_t_, Q_FP8_TOKEN, Q_FP8_TOKEN, false, 14, 130, 260);
    check_variants(ts_t_, Q_FP8_TOKEN, Q_FP8_TOKEN, true, 7, 33, 129);
    check_variants(ts_t_, Q_FP8_TOKEN, Q_FP4_TOKEN, true, 14, 130, 260);
    check_variants(ts_t_, Q_FP4_TOKEN, Q_FP4_TOKEN, false, 8, 34, 98);
    check_variants(ts_t_, Q_BF16, Q_BF16, false, 13, 31, 300);
}

/* Runs the same call under each ISA path and thread count, returning nothing; compares bits. */
TS_TEST(gemm_isa_and_threads_bitwise) {
    const ts_isa isa0 = ts_get_isa();
    const int th0 = ts_get_num_threads();
    const int64_t M = 131, N = 83, K = 518;
    const struct { enum qkind ka, kb; bool packed; } cases[] = {
        {Q_FP8_TOKEN, Q_FP8_BLOCK, false}, {Q_FP8_TOKEN, Q_FP4_TOKEN, true}, {Q_BF16, Q_BF16, false}};
    for (size_t c = 0; c < 3; c++) {
        opnd a = opnd_make(ts_t_, cases[c].ka, M, K, 31, true, cases[c].packed);
        opnd b = opnd_make(ts_t_, cases[c].kb, N, K, 32, true,
                           cases[c].packed);
        float *ref = (float *)malloc((size_t)(M * N) * 4), *d = (float *)malloc((size_t)(M * N) * 4);
        TS_CHECK_STATUS(ts_set_isa(TS_ISA_GENERIC), TS_OK);
        TS_CHECK_STATUS(ts_set_num_threads(1), TS_OK);
        TS_CHECK_STATUS(run_nt(&a, &b, ref, TS_F32, NULL), TS_OK);
        int isas[TS_ISA_COUNT_];
        const int nisa = ts_test_isas(isas);
        const int ths[4] = {1, 2, 3, 7};
        for (int i = 0; i < nisa; i++) {
            if (ts_set_isa((ts_isa)isas[i]) != TS_OK) continue;
            for (int t = 0; t < 4; t++) {
                TS_CHECK_STATUS(ts_set_num_threads(ths[t]), TS_OK);
                memset(d, 0, (size_t)(M * N) * 4);
                TS_CHECK_STATUS(run_nt(&a, &b, d, TS_F32, NULL), TS_OK);
                TS_CHECK_MSG(memcmp(d, ref, (size_t)(M * N) * 4) == 0,
                             "case %zu isa %s threads %d differs from generic/1", c,
                             ts_isa_name((ts_isa)isas[i]), ths[t]);
            }
        }
        free(ref), free(d);
        opnd_free(&a), opnd_free(&b);
    }
    ts_set_isa(isa0);
    ts_set_num_threads(th0);
}

/* Row m of D is the same for M = 1 and M = 129, whatever the other rows hold. */
TS_TEST(gemm_batch_invariance) {
    const int64_t M = 129, N = 70, K = 384, row = 57;
    for (int bf = 0; bf < 2; bf++) {
        enum qkind ka = bf ? Q_BF16 : Q_FP8_TOKEN, kb = bf ? Q_BF16 : Q_FP8_BLOCK;
        opnd a = opnd_make(ts_t_, ka, M, K, 41, false, false);
        opnd b = opnd_make(ts_t_, kb, N, K, 42, false, false);
        float *d = (float *)malloc((size_t)(M * N) * 4), d1[70];
        TS_CHECK_STATUS(run_nt(&a, &b, d, TS_F32, NULL), TS_OK);
        /* A one-row problem viewing row `row` of A and its scales. */
        opnd a1 = a;
        a1.rows = 1;
        size_t es = ts_dtype_size(a.x.dtype);
        a1.x = ts_tensor_2d((char *)a.q + row * K * es, a.x.dtype, 1, K);
        if (ka != Q_BF16) a1.s = ts_tensor_2d((float *)a.sf + row * a.s.shape[1], TS_F32, 1, a.s.shape[1]);
        TS_CHECK_STATUS(run_nt(&a1, &b, d1, TS_F32, NULL), TS_OK);
        TS_CHECK(memcmp(d1, d + row * N, sizeof d1) == 0);
        /* Other rows changed: row `row` unchanged. */
        if (ka == Q_BF16) {
            for (int64_t i = 0; i < M * K; i++)
                if (i / K != row) a.src[i] = ts_f32_to_bf16(ts_bf16_to_f32(a.src[i]) * -3.0f);
        } else {
            for (int64_t i = 0; i < M * K; i++)
                if (i / K != row) ((uint8_t *)a.q)[i] ^= 0x80;
        }
        float *d2 = (float *)malloc((size_t)(M * N) * 4);
        TS_CHECK_STATUS(run_nt(&a, &b, d2, TS_F32, NULL), TS_OK);
        TS_CHECK(memcmp(d2 + row * N, d + row * N, sizeof d1) == 0);
        TS_CHECK(memcmp(d2, d, (size_t)N * 4) != 0);
        free(d), free(d2);
        opnd_free(&a), opnd_free(&b);
    }
}

/* Packed ue8m0 and the same power-of-two scales in f32 (K-major and MN-major TMA-aligned
 * packed layouts) give the same bits. */
TS_TEST(gemm_scale_layouts_bitwise) {
    const int64_t M = 20, N = 36, K = 1100;
    for (int fp4 = 0; fp4 < 2; fp4++) {
        enum qkind kb = fp4 ? Q_FP4_TOKEN : Q_FP8_TOKEN;
        opnd a = opnd_make(ts_t_, Q_FP8_TOKEN, M, K, 51, true, false);
        opnd b = opnd_make(ts_t_, kb, N, K, 52, true, false);
        float *ref = (float *)malloc((size_t)(M * N) * 4), *d = (float *)malloc((size_t)(M * N) * 4);
        TS_CHECK_STATUS(run_nt(&a, &b, ref, TS_F32, NULL), TS_OK);
        /* MN-major TMA-aligned packed copies. */
        ts_tensor la, lb;
        int64_t na, nb;
        TS_CHECK_STATUS(ts_get_mn_major_tma_aligned_packed_ue8m0_layout(&a.s, &la, &na), TS_OK);
        TS_CHECK_STATUS(ts_get_mn_major_tma_aligned_packed_ue8m0_layout(&b.s, &lb, &nb), TS_OK);
        la.data = calloc((size_t)na + 1, 4), lb.data = calloc((size_t)nb + 1, 4);
        TS_CHECK_STATUS(ts_get_mn_major_tma_aligned_packed_ue8m0_tensor(&a.s, &la), TS_OK);
        TS_CHECK_STATUS(ts_get_mn_major_tma_aligned_packed_ue8m0_tensor(&b.s, &lb), TS_OK);
        ts_tensor dv = ts_tensor_2d(d, TS_F32, M, N);
        int64_t ra[2] = {1, 128}, rb[2] = {1, fp4 ? 32 : 128};
        TS_CHECK_STATUS(ts_fp8_fp4_gemm_nt(&a.x, &la, &b.x, &lb, &dv, NULL, NULL, ra, rb, NULL, false), TS_OK);
        TS_CHECK(memcmp(d, ref, (size_t)(M * N) * 4) == 0);
        if (!fp4) { /* the 3-tuple recipe and the packed-sfb default (1, 1, 128) */
            int64_t r3[3] = {1, 1, 128};
            memset(d, 0, (size_t)(M * N) * 4);
            TS_CHECK_STATUS(ts_fp8_gemm_nt(&a.x, &la, &b.x, &lb, &dv, NULL, r3, NULL, NULL, NULL, false), TS_OK);
            TS_CHECK(memcmp(d, ref, (size_t)(M * N) * 4) == 0);
            memset(d, 0, (size_t)(M * N) * 4);
            TS_CHECK_STATUS(ts_fp8_gemm_nt(&a.x, &la, &b.x, &lb, &dv, NULL, NULL, NULL, NULL, NULL, false), TS_OK);
            TS_CHECK(memcmp(d, ref, (size_t)(M * N) * 4) == 0);
        }
        free(la.data), free(lb.data), free(ref), free(d);
        opnd_free(&a), opnd_free(&b);
    }
}

/* ------------------------------------------------------------------ empty problems, config */

TS_TEST(gemm_empty_problems) {
    opnd a = opnd_make(ts_t_, Q_FP8_TOKEN, 3, 256, 61, false, false);
    opnd b = opnd_make(ts_t_, Q_FP8_BLOCK, 5, 256, 62, false, false);
    float d[15], c[15];
    for (int i = 0; i < 15; i++) c[i] = (float)i - 7.5f, d[i] = 99.0f;
    /* K = 0: D = C, or 0 without C. */
    ts_tensor a0 = ts_tensor_2d(a.q, TS_E4M3, 3, 0), b0 = ts_tensor_2d(b.q, TS_E4M3, 5, 0);
    ts_tensor sa0 = ts_tensor_2d(a.sf, TS_F32, 3, 0), sb0 = ts_tensor_2d(b.sf, TS_F32, 1, 0);
    ts_tensor dv = ts_tensor_2d(d, TS_F32, 3, 5), cv = ts_tensor_2d(c, TS_F32, 3, 5);
    TS_CHECK_STATUS(ts_fp8_gemm_nt(&a0, &sa0, &b0, &sb0, &dv, &cv, NULL, NULL, NULL, NULL, false), TS_OK);
    TS_CHECK(memcmp(d, c, sizeof d) == 0);
    TS_CHECK_STATUS(ts_fp8_gemm_nt(&a0, &sa0, &b0, &sb0, &dv, NULL, NULL, NULL, NULL, NULL, false), TS_OK);
    for (int i = 0; i < 15; i++) TS_CHECK(d[i] == 0.0f);
    /* M = 0: nothing written. */
    for (int i = 0; i < 15; i++) d[i] = 99.0f;
    ts_tensor am = ts_tensor_2d(a.q, TS_E4M3, 0, 256), sam = ts_tensor_2d(a.sf, TS_F32, 0, 2);
    ts_tensor dm = ts_tensor_2d(d, TS_F32, 0, 5);
    TS_CHECK_STATUS(ts_fp8_gemm_nt(&am, &sam, &b.x, &b.s, &dm, NULL, NULL, NULL, NULL, NULL, false), TS_OK);
    uint16_t ab[4] = {0}, bb[4] = {0};
    ts_tensor a16 = ts_tensor_2d(ab, TS_BF16, 2, 0), b16 = ts_tensor_2d(bb, TS_BF16, 0, 0);
    ts_tensor dn = ts_tensor_2d(d, TS_F32, 2, 0);
    TS_CHECK_STATUS(ts_bf16_gemm_nt(&a16, &b16, &dn, NULL, NULL), TS_OK);
    for (int i = 0; i < 15; i++) TS_CHECK(d[i] == 99.0f);
    opnd_free(&a), opnd_free(&b);
}

TS_TEST(gemm_config_knobs) {
    int th0 = ts_get_num_threads();
    TS_CHECK_STATUS(ts_set_num_sms(3), TS_OK);
    TS_CHECK_EQ_INT(ts_get_num_sms(), 3);
    TS_CHECK_EQ_INT(ts_get_num_threads(), 3);
    TS_CHECK_STATUS(ts_set_num_sms(0), TS_OK);
    TS_CHECK(ts_get_num_sms() >= 1);
    TS_CHECK_STATUS(ts_set_num_sms(-1), TS_ERR_INVALID_ARGUMENT);
    ts_set_num_threads(th0);
    TS_CHECK_EQ_INT(ts_get_tc_util(), 100);
    TS_CHECK_STATUS(ts_set_tc_util(60), TS_OK);
    TS_CHECK_EQ_INT(ts_get_tc_util(), 60);
    TS_CHECK_STATUS(ts_set_tc_util(0), TS_OK);
    TS_CHECK_EQ_INT(ts_get_tc_util(), 100);
    TS_CHECK_STATUS(ts_set_tc_util(101), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_set_pdl(true), TS_OK);
    TS_CHECK(ts_get_pdl());
    TS_CHECK_STATUS(ts_set_pdl(false), TS_OK);
    TS_CHECK_STATUS(ts_set_ignore_compile_dims(true), TS_OK);
    TS_CHECK_STATUS(ts_set_block_size_multiple_of(1, 1), TS_OK);
    TS_CHECK_STATUS(ts_set_block_size_multiple_of(0, 1), TS_ERR_INVALID_ARGUMENT);
    ts_gemm_recipe r;
    TS_CHECK_STATUS(ts_gemm_resolve_recipe(NULL, NULL, NULL, TS_F32, &r), TS_OK);
    TS_CHECK(r.gran_mn_a == 1 && r.gran_mn_b == 128 && r.gran_k_a == 128 && r.gran_k_b == 128);
    TS_CHECK_STATUS(ts_gemm_resolve_recipe(NULL, NULL, NULL, TS_I32, &r), TS_OK);
    TS_CHECK(r.gran_mn_a == 1 && r.gran_mn_b == 1 && r.gran_k_a == 128 && r.gran_k_b == 128);
    int64_t ra[2] = {1, 128}, rb[2] = {1, 32};
    TS_CHECK_STATUS(ts_gemm_resolve_recipe(NULL, ra, rb, TS_F32, &r), TS_OK);
    TS_CHECK(r.gran_k_a == 128 && r.gran_k_b == 32);
}

/* ------------------------------------------------------------------ bad input */

TS_TEST(gemm_bad_input) {
    const int64_t M = 9, N = 20, K = 256;
    opnd a = opnd_make(ts_t_, Q_FP8_TOKEN, M, K, 71, false, false);
    opnd b = opnd_make(ts_t_, Q_FP8_BLOCK, N, K, 72, false, false);
    opnd b4 = opnd_make(ts_t_, Q_FP4_TOKEN, N, K, 73, false, false); /* f32 non-pow2 scales */
    opnd a4 = opnd_make(ts_t_, Q_FP8_TOKEN, M, K, 74, false, false);
    uint16_t *dbuf = (uint16_t *)malloc((size_t)(M * N + 64) * 2);
    memset(dbuf, 0xA5, (size_t)(M * N + 64) * 2);
    uint16_t *canary = (uint16_t *)malloc((size_t)(M * N + 64) * 2);
    memcpy(canary, dbuf, (size_t)(M * N + 64) * 2);
    ts_tensor d = ts_tensor_2d(dbuf, TS_BF16, M, N);
    ts_tensor t;
#define FP8(A, SA, B, SB, D, C, R3, RA, RB, DIS) ts_fp8_fp4_gemm_nt(A, SA, B, SB, D, C, R3, RA, RB, NULL, DIS)
    TS_CHECK_STATUS(FP8(NULL, &a.s, &b.x, &b.s, &d, NULL, NULL, NULL, NULL, false), TS_ERR_NULL_POINTER);
    TS_CHECK_STATUS(FP8(&a.x, NULL, &b.x, &b.s, &d, NULL, NULL, NULL, NULL, false), TS_ERR_NULL_POINTER);
    TS_CHECK_STATUS(FP8(&a.x, &a.s, &b.x, &b.s, NULL, NULL, NULL, NULL, NULL, false), TS_ERR_NULL_POINTER);
    /* dtypes */
    t = a.x, t.dtype = TS_BF16;
    TS_CHECK_STATUS(FP8(&t, &a.s, &b.x, &b.s, &d, NULL, NULL, NULL, NULL, false), TS_ERR_DTYPE);
    t = d, t.dtype = TS_F16;
    TS_CHECK_STATUS(FP8(&a.x, &a.s, &b.x, &b.s, &t, NULL, NULL, NULL, NULL, false), TS_ERR_DTYPE);
    t = a.s, t.dtype = TS_BF16;
    TS_CHECK_STATUS(FP8(&a.x, &t, &b.x, &b.s, &d, NULL, NULL, NULL, NULL, false), TS_ERR_DTYPE);
    float cf[9 * 20];
    ts_tensor cft = ts_tensor_2d(cf, TS_F32, M, N);
    TS_CHECK_STATUS(FP8(&a.x, &a.s, &b.x, &b.s, &d, &cft, NULL, NULL, NULL, false), TS_ERR_DTYPE);
    TS_CHECK_STATUS(ts_bf16_gemm_nt(&a.x, &b.x, &d, NULL, NULL), TS_ERR_DTYPE);
    /* shapes */
    t = b.x, t.shape[1] = K - 1;
    TS_CHECK_STATUS(FP8(&a.x, &a.s, &t, &b.s, &d, NULL, NULL, NULL, NULL, false), TS_ERR_SHAPE);
    t = d, t.shape[1] = N - 1;
    TS_CHECK_STATUS(FP8(&a.x, &a.s, &b.x, &b.s, &t, NULL, NULL, NULL, NULL, false), TS_ERR_SHAPE);
    t = a.x, t.ndim = 3, t.shape[2] = 1, t.strides[2] = 1;
    TS_CHECK_STATUS(FP8(&t, &a.s, &b.x, &b.s, &d, NULL, NULL, NULL, NULL, false), TS_ERR_SHAPE);
    t = a.s, t.shape[1] = 3;
    TS_CHECK_STATUS(FP8(&a.x, &t, &b.x, &b.s, &d, NULL, NULL, NULL, NULL, false), TS_ERR_SHAPE);
    t = b.s, t.shape[0] = N; /* per-row shape under the default (1,128,128) recipe */
    TS_CHECK_STATUS(FP8(&a.x, &a.s, &b.x, &t, &d, NULL, NULL, NULL, NULL, false), TS_ERR_SHAPE);
    /* majorness */
    t = a.x, t.shape[1] = K / 2, t.strides[1] = 2;
    TS_CHECK_STATUS(FP8(&t, &a.s, &b.x, &b.s, &d, NULL, NULL, NULL, NULL, false), TS_ERR_STRIDE);
    t = d, t.shape[1] = N / 2, t.strides[1] = 2;
    ts_tensor bh = b.x;
    bh.shape[0] = N / 2;
    TS_CHECK_STATUS(FP8(&a.x, &a.s, &bh, &b.s, &t, NULL, NULL, NULL, NULL, false), TS_ERR_STRIDE);
    /* recipes */
    int64_t r_bad[3] = {1, 128, 64}, r3[3] = {1, 128, 128}, ra[2] = {1, 128}, rb[2] = {128, 128};
    TS_CHECK_STATUS(FP8(&a.x, &a.s, &b.x, &b.s, &d, NULL, r_bad, NULL, NULL, false), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(FP8(&a.x, &a.s, &b.x, &b.s, &d, NULL, r3, ra, rb, false), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(FP8(&a.x, &a.s, &b.x, &b.s, &d, NULL, NULL, ra, NULL, false), TS_ERR_INVALID_ARGUMENT);
    /* packed scales need gran_mn 1 */
    int32_t pk[4] = {0};
    ts_tensor pks = ts_tensor_2d(pk, TS_I32, 1, 1);
    TS_CHECK_STATUS(FP8(&a.x, &a.s, &b.x, &pks, &d, NULL, r3, NULL, NULL, false), TS_ERR_INVALID_ARGUMENT);
    /* ue8m0 cast needs powers of two (fp4 operand, f32 amax/6 scales) ... */
    int64_t rb4[2] = {1, 32};
    TS_CHECK_STATUS(FP8(&a4.x, &a4.s, &b4.x, &b4.s, &d, NULL, NULL, ra, rb4, false), TS_ERR_INVALID_ARGUMENT);
    /* aliasing: d overlapping an input, c partially overlapping d */
    ts_tensor dal = ts_tensor_2d(a.q, TS_BF16, M, N);
    TS_CHECK_STATUS(FP8(&a.x, &a.s, &b.x, &b.s, &dal, NULL, NULL, NULL, NULL, false), TS_ERR_ALIASING);
    ts_tensor csh = ts_tensor_2d(dbuf + 1, TS_BF16, M, N);
    TS_CHECK_STATUS(FP8(&a.x, &a.s, &b.x, &b.s, &d, &csh, NULL, NULL, NULL, false), TS_ERR_ALIASING);
    TS_CHECK(memcmp(dbuf, canary, (size_t)(M * N + 64) * 2) == 0);
    /* ... and with disable_ue8m0_cast the f32 scales are used as given. */
    TS_CHECK_STATUS(FP8(&a4.x, &a4.s, &b4.x, &b4.s, &d, NULL, NULL, ra, rb4, true), TS_OK);
#undef FP8
    free(dbuf), free(canary);
    opnd_free(&a), opnd_free(&b), opnd_free(&a4), opnd_free(&b4);
}
