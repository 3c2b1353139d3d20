/* Special GEMMs: fp8_gemm_nt_skip_head_mid (bits of the dense GEMM at each written column,
 * canaries in the gaps), tf32_hc_prenorm_gemm (float64 oracle on tf32(B), split layout,
 * truncation, invariance), einsum / fp8_einsum (bits of the dense GEMM on each head's stride
 * views, float64 oracle), and bad input with outputs untouched. */
#include "ts_prng.h"
#include "ts_test.h"

#include "tilestack/gemm.h"
#include "tilestack/numerics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CAN32 0x7FA5A5A5u
#define CAN16 0x7FA5u

static uint8_t *e4m3v(uint64_t seed, int64_t n) {
    uint8_t *v = (uint8_t *)malloc((size_t)n + 1);
    ts_prng p = ts_prng_seed(seed);
    for (int64_t i = 0; i < n; i++) v[i] = ts_f32_to_e4m3(ts_prng_uniform(&p) * 8.0f);
    return v;
}
static uint16_t *bf16v(uint64_t seed, int64_t n) {
    uint16_t *v = (uint16_t *)malloc((size_t)n * 2 + 2);
    ts_prng p = ts_prng_seed(seed);
    for (int64_t i = 0; i < n; i++) v[i] = ts_f32_to_bf16(ts_prng_uniform(&p) * 2.0f);
    return v;
}
static float *f32v(uint64_t seed, int64_t n, float lo, float hi) {
    float *v = (float *)malloc((size_t)n * 4 + 4);
    ts_prng p = ts_prng_seed(seed);
    for (int64_t i = 0; i < n; i++)
        v[i] = lo + (hi - lo) * (0.5f + 0.5f * ts_prng_uniform(&p));
    return v;
}
static void *canaries(int64_t n, size_t es) {
    void *v = malloc((size_t)n * es + 4);
    for (int64_t i = 0; i < n; i++) {
        if (es == 4) { uint32_t c = CAN32; memcpy((char *)v + 4 * i, &c, 4); }
        else { uint16_t c = CAN16; memcpy((char *)v + 2 * i, &c, 2); }
    }
    return v;
}
static bool all_canary(const void *v, int64_t n, size_t es) {
    void *c = canaries(n, es);
    bool ok = memcmp(c, v, (size_t)n * es) == 0;
    free(c);
    return ok;
}
static ts_tensor view(void *data, ts_dtype dt, int nd, const int64_t *shape, const int64_t *st) {
    ts_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dt;
    t.ndim = nd;
    for (int i = 0; i < nd; i++) t.shape[i] = shape[i], t.strides[i] = st[i];
    return t;
}
static double calc_diff(const double *x, const double *y, int64_t n) {
    double xy = 0, xx = 0;
    for (int64_t i = 0; i < n; i++) xy += x[i] * y[i], xx += x[i] * x[i] + y[i] * y[i];
    return xx == 0 ? 0.0 : 1.0 - 2.0 * xy / xx;
}
static float bf(uint16_t h) { return ts_bf16_to_f32(h); }

/* ------------------------------------------------------------------ skip_head_mid */

static void shm_case(ts_test_ctx *ts_t_, int64_t M, int64_t K, int64_t L, int64_t MID, int64_t R,
                     int64_t heads, bool per_row, ts_dtype dt) {
    const int64_t N = heads * (L + R), W = N + heads * MID;
    const int64_t gb = per_row ? 1 : 128;
    const int64_t nkb = (K + 127) / 128;
    uint8_t *a = e4m3v(11, M * K), *b = e4m3v(12, N * K);
    float *sa = f32v(13, M * nkb, 0.5f, 2.0f), *sb = f32v(14, ((N + gb - 1) / gb) * nkb, 0.5f, 2.0f);
    ts_tensor ta = ts_tensor_2d(a, TS_E4M3, M, K), tb = ts_tensor_2d(b, TS_E4M3, N, K);
    ts_tensor tsa = ts_tensor_2d(sa, TS_F32, M, nkb);
    ts_tensor tsb = ts_tensor_2d(sb, TS_F32, (N + gb - 1) / gb, nkb);
    const size_t es = ts_dtype_size(dt);
    void *ref = malloc((size_t)(M * N) * es), *d = canaries(M * W, es);
    ts_tensor tr = ts_tensor_2d(ref, dt, M, N), td = ts_tensor_2d(d, dt, M, W);
    const int64_t rec[3] = {1, gb, 128};
    TS_CHECK_STATUS(ts_fp8_gemm_nt(&ta, &tsa, &tb, &tsb, &tr, NULL, rec, NULL, NULL, NULL, false), TS_OK);
    const int64_t hs[3] = {L, MID, R};
    TS_CHECK_STATUS(ts_fp8_gemm_nt_skip_head_mid(&ta, &tsa, &tb, &tsb, &td, hs, rec, "nk", false), TS_OK);
    int64_t bad = 0;
    for (int64_t m = 0; m < M; m++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t j = 0; j < L + MID + R; j++) {
                const char *got = (char *)d + (m * W + h * (L + MID + R) + j) * (int64_t)es;
                if (j >= L && j < L + MID) {
                    if (!all_canary(got, 1, es)) bad++;
                } else {
                    const int64_t n = h * (L + R) + (j < L ? j : j - MID);
                    if (memcmp(got, (char *)ref + (m * N + n) * (int64_t)es, es)) bad++;
                }
            }
    TS_CHECK_MSG(bad == 0, "skip_head_mid M=%lld (%lld,%lld,%lld) x%lld: %lld bad", (long long)M,
                 (long long)L, (long long)MID, (long long)R, (long long)heads, (long long)bad);
    free(a), free(b), free(sa), free(sb), free(ref), free(d);
}

TS_TEST(gemm_skip_head_mid_matches_dense) {
    shm_case(ts_t_, 5, 300, 128, 64, 128, 2, false, TS_BF16); /* upstream's split */
    shm_case(ts_t_, 17, 129, 128, 64, 128, 2, false, TS_F32);
    shm_case(ts_t_, 3, 200, 16, 8, 24, 3, true, TS_F32);      /* left != right: two batches */
    shm_case(ts_t_, 1, 128, 8, 0, 8, 4, true, TS_BF16);        /* mid 0: the dense layout */
    /* Head halves inside 128-row B scale blocks: scales expanded per row, same bits. */
    shm_case(ts_t_, 6, 250, 100, 64, 28, 3, false, TS_BF16);
    shm_case(ts_t_, 2, 128, 40, 8, 40, 5, false, TS_F32);
    /* Thread counts give the same bits (the dense reference is itself invariant). */
    const int th0 = ts_get_num_threads();
    ts_set_num_threads(3);
    shm_case(ts_t_, 7, 300, 128, 64, 128, 2, false, TS_BF16);
    ts_set_num_threads(th0);
}

TS_TEST(gemm_skip_head_mid_bad_input) {
    const int64_t M = 4, K = 128, N = 256, W = 256 + 64;
    uint8_t *a = e4m3v(1, M * K), *b = e4m3v(2, N * K);
    float *sa = f32v(3, M, 1, 2), *sb = f32v(4, 2, 1, 2);
    uint16_t *abf = bf16v(5, M * K);
    ts_tensor ta = ts_tensor_2d(a, TS_E4M3, M, K), tb = ts_tensor_2d(b, TS_E4M3, N, K);
    ts_tensor tsa = ts_tensor_2d(sa, TS_F32, M, 1), tsb = ts_tensor_2d(sb, TS_F32, 2, 1);
    ts_tensor tabf = ts_tensor_2d(abf, TS_BF16, M, K);
    void *d = canaries(M * (W + 64), 4);
    ts_tensor td = ts_tensor_2d(d, TS_F32, M, W);
    const int64_t hs[3] = {128, 64, 128}, hs0[3] = {0, 64, 256}, hsneg[3] = {128, -1, 128};
    const int64_t hs3[3] = {64, 0, 64}, hs_odd[3] = {100, 64, 28};
    const int64_t r32[3] = {1, 128, 32};
    TS_CHECK_STATUS(ts_fp8_gemm_nt_skip_head_mid(&ta, &tsa, &tb, &tsb, &td, NULL, NULL, NULL, false), TS_ERR_NULL_POINTER);
    TS_CHECK_STATUS(ts_fp8_gemm_nt_skip_head_mid(&ta, &tsa, &tb, &tsb, &td, hs0, NULL, NULL, false), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_fp8_gemm_nt_skip_head_mid(&ta, &tsa, &tb, &tsb, &td, hsneg, NULL, NULL, false), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_fp8_gemm_nt_skip_head_mid(&tabf, &tsa, &tb, &tsb, &td, hs, NULL, NULL, false), TS_ERR_DTYPE);
    TS_CHECK_STATUS(ts_fp8_gemm_nt_skip_head_mid(&ta, &tsa, &tb, &tsb, &td, hs, r32, NULL, false), TS_ERR_INVALID_ARGUMENT);
    /* (64, 0, 64) needs width 256 and (100, 64, 28) 320 + 64: d has 320. */
    TS_CHECK_STATUS(ts_fp8_gemm_nt_skip_head_mid(&ta, &tsa, &tb, &tsb, &td, hs3, NULL, NULL, false), TS_ERR_SHAPE);
    TS_CHECK_STATUS(ts_fp8_gemm_nt_skip_head_mid(&ta, &tsa, &tb, &tsb, &td, hs_odd, NULL, NULL, false), TS_ERR_SHAPE);
    ts_tensor tdw = ts_tensor_2d(d, TS_F32, M, W + 1);
    TS_CHECK_STATUS(ts_fp8_gemm_nt_skip_head_mid(&ta, &tsa, &tb, &tsb, &tdw, hs, NULL, NULL, false), TS_ERR_SHAPE);
    const int64_t hs5[3] = {128, 64, 100};
    TS_CHECK_STATUS(ts_fp8_gemm_nt_skip_head_mid(&ta, &tsa, &tb, &tsb, &td, hs5, NULL, NULL, false), TS_ERR_SHAPE);
    ts_tensor tdi = ts_tensor_2d(d, TS_I32, M, W);
    TS_CHECK_STATUS(ts_fp8_gemm_nt_skip_head_mid(&ta, &tsa, &tb, &tsb, &tdi, hs, NULL, NULL, false), TS_ERR_DTYPE);
    ts_tensor tk0a = ts_tensor_2d(a, TS_E4M3, M, 0), tk0b = ts_tensor_2d(b, TS_E4M3, N, 0);
    ts_tensor s0a = ts_tensor_2d(sa, TS_F32, M, 0), s0b = ts_tensor_2d(sb, TS_F32, 2, 0);
    TS_CHECK_STATUS(ts_fp8_gemm_nt_skip_head_mid(&tk0a, &s0a, &tk0b, &s0b, &td, hs, NULL, NULL, false), TS_ERR_SHAPE);
    ts_tensor tsb_bad = ts_tensor_2d(sb, TS_F32, 1, 1);
    TS_CHECK_STATUS(ts_fp8_gemm_nt_skip_head_mid(&ta, &tsa, &tb, &tsb_bad, &td, hs, NULL, NULL, false), TS_ERR_SHAPE);
    TS_CHECK(all_canary(d, M * (W + 64), 4));
    /* M = 0 is a no-op. */
    ts_tensor tm0 = ts_tensor_2d(a, TS_E4M3, 0, K), sm0 = ts_tensor_2d(sa, TS_F32, 0, 1);
    ts_tensor dm0 = ts_tensor_2d(d, TS_F32, 0, W);
    TS_CHECK_STATUS(ts_fp8_gemm_nt_skip_head_mid(&tm0, &sm0, &tb, &tsb, &dm0, hs, NULL, NULL, false), TS_OK);
    TS_CHECK(all_canary(d, M * (W + 64), 4));
    free(a), free(b), free(sa), free(sb), free(abf), free(d);
}

/* ------------------------------------------------------------------ hc prenorm */

static float tf32_trunc(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u &= 0xFFFFE000u;
    memcpy(&x, &u, 4);
    return x;
}

/* Float64 oracle of one split range. */
static void hc_oracle(const uint16_t *a, const float *b, int64_t M, int64_t N, int64_t K,
                      int64_t k0, int64_t k1, double *d, double *s) {
    for (int64_t m = 0; m < M; m++) {
        double ss = 0;
        for (int64_t k = k0; k < k1; k++) ss += (double)bf(a[m * K + k]) * bf(a[m * K + k]);
        s[m] = ss;
        for (int64_t n = 0; n < N; n++) {
            double acc = 0;
            for (int64_t k = k0; k < k1; k++)
                acc += (double)bf(a[m * K + k]) * tf32_trunc(b[n * K + k]);
            d[m * N + n] = acc;
        }
    }
}

TS_TEST(gemm_hc_prenorm_oracle_and_splits) {
    const int64_t M = 13, N = 24, K = 1000; /* 16 blocks of 64, the last one 40 long */
    uint16_t *a = bf16v(21, M * K);
    float *b = f32v(22, N * K, -1.0f, 1.0f);
    double *od = (double *)malloc((size_t)(M * N) * 8), *os = (double *)malloc((size_t)M * 8);
    double *gd = (double *)malloc((size_t)(M * N) * 8), *gs = (double *)malloc((size_t)M * 8);
    ts_tensor ta = ts_tensor_2d(a, TS_BF16, M, K), tb = ts_tensor_2d(b, TS_F32, N, K);
    /* No split. */
    float *d = (float *)canaries(M * N, 4), *s = (float *)canaries(M, 4);
    ts_tensor td = ts_tensor_2d(d, TS_F32, M, N), ts = ts_tensor_1d(s, TS_F32, M);
    TS_CHECK_STATUS(ts_tf32_hc_prenorm_gemm(&ta, &tb, &td, &ts, 0), TS_OK);
    hc_oracle(a, b, M, N, K, 0, K, od, os);
    for (int64_t i = 0; i < M * N; i++) gd[i] = d[i];
    for (int64_t i = 0; i < M; i++) gs[i] = s[i];
    TS_CHECK(calc_diff(gd, od, M * N) < 1e-8);
    TS_CHECK(calc_diff(gs, os, M) < 1e-8);
    /* Splits 1, 3, 16 and 20 (more splits than blocks: the last four are zeros). */
    const int64_t splits[4] = {1, 3, 16, 20};
    for (int si = 0; si < 4; si++) {
        const int64_t S = splits[si], q = 16 / S, r = 16 % S;
        float *dd = (float *)canaries(S * M * N, 4), *sd = (float *)canaries(S * M, 4);
        ts_tensor tdd = ts_tensor_3d(dd, TS_F32, S, M, N), tsd = ts_tensor_2d(sd, TS_F32, S, M);
        TS_CHECK_STATUS(ts_tf32_hc_prenorm_gemm(&ta, &tb, &tdd, &tsd, S), TS_OK);
        double *sum_d = (double *)calloc((size_t)(M * N), 8), *sum_s = (double *)calloc((size_t)M, 8);
        for (int64_t sp = 0; sp < S; sp++) {
            const int64_t b0 = sp * q + (sp < r ? sp : r), nb = q + (sp < r);
            const int64_t k0 = b0 * 64 < K ? b0 * 64 : K, k1 = (b0 + nb) * 64 < K ? (b0 + nb) * 64 : K;
            hc_oracle(a, b, M, N, K, k0, k1, od, os);
            for (int64_t i = 0; i < M * N; i++) gd[i] = dd[sp * M * N + i], sum_d[i] += gd[i];
            for (int64_t i = 0; i < M; i++) gs[i] = sd[sp * M + i], sum_s[i] += gs[i];
            if (k0 == k1) {
                bool zero = true;
                for (int64_t i = 0; i < M * N; i++) zero &= gd[i] == 0.0;
                for (int64_t i = 0; i < M; i++) zero &= gs[i] == 0.0;
                TS_CHECK_MSG(zero, "hc split %lld of %lld: empty split not zero", (long long)sp, (long long)S);
            } else {
                TS_CHECK_MSG(calc_diff(gd, od, M * N) < 1e-8 && calc_diff(gs, os, M) < 1e-8,
                             "hc split %lld of %lld vs oracle", (long long)sp, (long long)S);
            }
        }
        hc_oracle(a, b, M, N, K, 0, K, od, os);
        TS_CHECK(calc_diff(sum_d, od, M * N) < 1e-8);
        TS_CHECK(calc_diff(sum_s, os, M) < 1e-8);
        if (S == 1) /* one split is the unsplit call, bit for bit */
            TS_CHECK(memcmp(dd, d, (size_t)(M * N) * 4) == 0 && memcmp(sd, s, (size_t)M * 4) == 0);
        free(dd), free(sd), free(sum_d), free(sum_s);
    }
    /* ISA paths x threads: the same bits. */
    const ts_isa isa0 = ts_get_isa();
    const int th0 = ts_get_num_threads();
    int isas[TS_ISA_COUNT_];
    const int nisa = ts_test_isas(isas);
    const int ths[3] = {1, 2, 7};
    float *d2 = (float *)malloc((size_t)(3 * M * N) * 4), *s2 = (float *)malloc((size_t)(3 * M) * 4);
    float *d3 = (float *)malloc((size_t)(3 * M * N) * 4), *s3 = (float *)malloc((size_t)(3 * M) * 4);
    ts_tensor t2 = ts_tensor_3d(d2, TS_F32, 3, M, N), u2 = ts_tensor_2d(s2, TS_F32, 3, M);
    ts_tensor t3 = ts_tensor_3d(d3, TS_F32, 3, M, N), u3 = ts_tensor_2d(s3, TS_F32, 3, M);
    TS_CHECK_STATUS(ts_tf32_hc_prenorm_gemm(&ta, &tb, &t2, &u2, 3), TS_OK);
    for (int i = 0; i < nisa; i++) {
        if (ts_set_isa((ts_isa)isas[i]) != TS_OK) continue;
        for (int t = 0; t < 3; t++) {
            ts_set_num_threads(ths[t]);
            TS_CHECK_STATUS(ts_tf32_hc_prenorm_gemm(&ta, &tb, &t3, &u3, 3), TS_OK);
            TS_CHECK_MSG(!memcmp(d2, d3, (size_t)(3 * M * N) * 4) && !memcmp(s2, s3, (size_t)(3 * M) * 4),
                         "hc: isa %d threads %d", (int)isas[i], ths[t]);
        }
    }
    ts_set_isa(isa0);
    ts_set_num_threads(th0);
    free(d2), free(s2), free(d3), free(s3);
    free(a), free(b), free(od), free(os), free(gd), free(gs), free(d), free(s);
}

TS_TEST(gemm_hc_prenorm_tf32_truncates) {
    /* a = 1 (K = 1): D is tf32(b) exactly. */
    const int64_t N = 6;
    uint16_t a1 = ts_f32_to_bf16(1.0f);
    float b[6] = {1.0f + 0x1p-12f, 1.0f + 0x1p-10f + 0x1p-11f, -3.0f - 0x1p-9f - 0x1p-13f,
                  0x1p-20f * (1.0f + 0x1p-8f + 0x1p-10f + 0x1p-12f), INFINITY, 1.0f};
    float d[6], s[1];
    ts_tensor ta = ts_tensor_2d(&a1, TS_BF16, 1, 1), tb = ts_tensor_2d(b, TS_F32, N, 1);
    ts_tensor td = ts_tensor_2d(d, TS_F32, 1, N), ts = ts_tensor_1d(s, TS_F32, 1);
    TS_CHECK_STATUS(ts_tf32_hc_prenorm_gemm(&ta, &tb, &td, &ts, 0), TS_OK);
    TS_CHECK(d[0] == 1.0f);
    TS_CHECK(d[1] == 1.0f + 0x1p-10f); /* truncation, not RNE (which gives 1 + 2^-9) */
    TS_CHECK(d[2] == -3.0f - 0x1p-9f);
    TS_CHECK(d[3] == 0x1p-20f * (1.0f + 0x1p-8f + 0x1p-10f));
    TS_CHECK(isinf(d[4]) && d[4] > 0);
    TS_CHECK(d[5] == 1.0f && s[0] == 1.0f);
}

TS_TEST(gemm_hc_prenorm_bad_input) {
    const int64_t M = 4, N = 8, K = 64;
    uint16_t *a = bf16v(1, M * K);
    float *b = f32v(2, N * K, -1, 1), *af = f32v(3, M * K, -1, 1);
    float *d = (float *)canaries(3 * M * N + 8, 4), *s = (float *)canaries(3 * M + 8, 4);
    ts_tensor ta = ts_tensor_2d(a, TS_BF16, M, K), tb = ts_tensor_2d(b, TS_F32, N, K);
    ts_tensor td = ts_tensor_2d(d, TS_F32, M, N), ts = ts_tensor_1d(s, TS_F32, M);
    ts_tensor td3 = ts_tensor_3d(d, TS_F32, 3, M, N), ts3 = ts_tensor_2d(s, TS_F32, 3, M);
    ts_tensor taf = ts_tensor_2d(af, TS_F32, M, K), tbb = ts_tensor_2d(a, TS_BF16, M, K);
    ts_tensor tdb = ts_tensor_2d(d, TS_BF16, M, N);
    TS_CHECK_STATUS(ts_tf32_hc_prenorm_gemm(&taf, &tb, &td, &ts, 0), TS_ERR_DTYPE);
    TS_CHECK_STATUS(ts_tf32_hc_prenorm_gemm(&ta, &tbb, &td, &ts, 0), TS_ERR_DTYPE);
    TS_CHECK_STATUS(ts_tf32_hc_prenorm_gemm(&ta, &tb, &tdb, &ts, 0), TS_ERR_DTYPE);
    TS_CHECK_STATUS(ts_tf32_hc_prenorm_gemm(&ta, &tb, &td, &ts, -1), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_tf32_hc_prenorm_gemm(&ta, &tb, &td, &ts, 3), TS_ERR_SHAPE);   /* 2-D d with splits */
    TS_CHECK_STATUS(ts_tf32_hc_prenorm_gemm(&ta, &tb, &td3, &ts3, 0), TS_ERR_SHAPE); /* 3-D d without */
    TS_CHECK_STATUS(ts_tf32_hc_prenorm_gemm(&ta, &tb, &td3, &ts3, 2), TS_ERR_SHAPE); /* S mismatch */
    TS_CHECK_STATUS(ts_tf32_hc_prenorm_gemm(&ta, &tb, &td3, &ts, 3), TS_ERR_SHAPE);
    ts_tensor tbk = ts_tensor_2d(b, TS_F32, N, K - 1);
    TS_CHECK_STATUS(ts_tf32_hc_prenorm_gemm(&ta, &tbk, &td, &ts, 0), TS_ERR_SHAPE);
    ts_tensor ta0 = ts_tensor_2d(a, TS_BF16, M, 0), tb0 = ts_tensor_2d(b, TS_F32, N, 0);
    TS_CHECK_STATUS(ts_tf32_hc_prenorm_gemm(&ta0, &tb0, &td, &ts, 0), TS_ERR_SHAPE);
    const int64_t shp[2] = {M, K}, mn[2] = {1, M};
    ts_tensor tmn = view(a, TS_BF16, 2, shp, mn);
    TS_CHECK_STATUS(ts_tf32_hc_prenorm_gemm(&tmn, &tb, &td, &ts, 0), TS_ERR_STRIDE);
    const int64_t s1[1] = {M}, st2[1] = {2};
    ts_tensor tsn = view(s, TS_F32, 1, s1, st2);
    TS_CHECK_STATUS(ts_tf32_hc_prenorm_gemm(&ta, &tb, &td, &tsn, 0), TS_ERR_STRIDE);
    ts_tensor tsd = ts_tensor_1d(d + M * N - 1, TS_F32, M); /* sqr_sum overlapping d */
    TS_CHECK_STATUS(ts_tf32_hc_prenorm_gemm(&ta, &tb, &td, &tsd, 0), TS_ERR_ALIASING);
    TS_CHECK(all_canary(d, 3 * M * N + 8, 4) && all_canary(s, 3 * M + 8, 4));
    free(a), free(b), free(af), free(d), free(s);
}

/* ------------------------------------------------------------------ einsum */

TS_TEST(gemm_einsum_bf16_matches_dense) {
    const int64_t B = 3, H = 4, R = 130, D = 20;
    uint16_t *x = bf16v(31, B * H * R), *w = bf16v(32, H * D * R);
    /* bhr,hdr->bhd */
    {
        uint16_t *d = (uint16_t *)canaries(B * H * D, 2), *ref = (uint16_t *)malloc((size_t)(B * D) * 2);
        const int64_t sa[3] = {B, H, R}, sw[3] = {H, D, R}, sd[3] = {B, H, D};
        ts_tensor ta = ts_tensor_make(x, TS_BF16, 3, sa), tw = ts_tensor_make(w, TS_BF16, 3, sw);
        ts_tensor td = ts_tensor_make(d, TS_BF16, 3, sd);
        TS_CHECK_STATUS(ts_einsum("bhr,hdr->bhd", &ta, &tw, &td, NULL, false), TS_OK);
        double *o = (double *)malloc((size_t)(B * H * D) * 8), *g = (double *)malloc((size_t)(B * H * D) * 8);
        for (int64_t h = 0; h < H; h++) {
            const int64_t s2[2] = {B, R}, st[2] = {H * R, 1};
            ts_tensor ah = view(x + h * R, TS_BF16, 2, s2, st);
            ts_tensor wh = ts_tensor_2d(w + h * D * R, TS_BF16, D, R), rh = ts_tensor_2d(ref, TS_BF16, B, D);
            TS_CHECK_STATUS(ts_bf16_gemm_nt(&ah, &wh, &rh, NULL, NULL), TS_OK);
            for (int64_t bb = 0; bb < B; bb++) {
                TS_CHECK(memcmp(ref + bb * D, d + (bb * H + h) * D, (size_t)D * 2) == 0);
                for (int64_t j = 0; j < D; j++) {
                    double acc = 0;
                    for (int64_t r = 0; r < R; r++)
                        acc += (double)bf(x[(bb * H + h) * R + r]) * bf(w[(h * D + j) * R + r]);
                    o[(bb * H + h) * D + j] = acc;
                    g[(bb * H + h) * D + j] = bf(d[(bb * H + h) * D + j]);
                }
            }
        }
        TS_CHECK(calc_diff(g, o, B * H * D) < 1e-5);
        free(d), free(ref), free(o), free(g);
    }
    /* bhd,hdr->bhr: x as [B, H, D'] with D' = R here (contracted), w [H, R(=contracted), D]. */
    {
        const int64_t Dc = R, Ro = D; /* contracted d = 130, output r = 20 */
        uint16_t *d = (uint16_t *)canaries(B * H * Ro, 2), *ref = (uint16_t *)malloc((size_t)(B * Ro) * 2);
        const int64_t sa[3] = {B, H, Dc}, sw[3] = {H, Dc, Ro}, sd[3] = {B, H, Ro};
        ts_tensor ta = ts_tensor_make(x, TS_BF16, 3, sa), tw = ts_tensor_make(w, TS_BF16, 3, sw);
        ts_tensor td = ts_tensor_make(d, TS_BF16, 3, sd);
        TS_CHECK_STATUS(ts_einsum("bhd,hdr->bhr", &ta, &tw, &td, NULL, false), TS_OK);
        for (int64_t h = 0; h < H; h++) {
            const int64_t s2[2] = {B, Dc}, st[2] = {H * Dc, 1};
            ts_tensor ah = view(x + h * Dc, TS_BF16, 2, s2, st);
            ts_tensor wh = ts_tensor_2d(w + h * Dc * Ro, TS_BF16, Dc, Ro), rh = ts_tensor_2d(ref, TS_BF16, B, Ro);
            TS_CHECK_STATUS(ts_bf16_gemm_nn(&ah, &wh, &rh, NULL, NULL), TS_OK);
            for (int64_t bb = 0; bb < B; bb++)
                TS_CHECK(memcmp(ref + bb * Ro, d + (bb * H + h) * Ro, (size_t)Ro * 2) == 0);
        }
        free(d), free(ref);
    }
    /* bhd,bhr->hdr with C prefilled and C = D: a [B, H, Dd], b [B, H, Rr], d [H, Dd, Rr]. */
    {
        const int64_t Dd = 7, Rr = 33;
        uint16_t *p = bf16v(33, B * H * Dd), *q = bf16v(34, B * H * Rr);
        float *c = f32v(35, H * Dd * Rr, -32, 32), *d = (float *)malloc((size_t)(H * Dd * Rr) * 4);
        float *d2 = (float *)malloc((size_t)(H * Dd * Rr) * 4), *ref = (float *)malloc((size_t)(Dd * Rr) * 4);
        memcpy(d2, c, (size_t)(H * Dd * Rr) * 4);
        const int64_t sp[3] = {B, H, Dd}, sq[3] = {B, H, Rr}, sd[3] = {H, Dd, Rr};
        ts_tensor tp = ts_tensor_make(p, TS_BF16, 3, sp), tq = ts_tensor_make(q, TS_BF16, 3, sq);
        ts_tensor td = ts_tensor_make(d, TS_F32, 3, sd), tc = ts_tensor_make(c, TS_F32, 3, sd);
        ts_tensor td2 = ts_tensor_make(d2, TS_F32, 3, sd);
        TS_CHECK_STATUS(ts_einsum("bhd,bhr->hdr", &tp, &tq, &td, &tc, false), TS_OK);
        TS_CHECK_STATUS(ts_einsum("bhd,bhr->hdr", &tp, &tq, &td2, &td2, false), TS_OK);
        TS_CHECK(memcmp(d, d2, (size_t)(H * Dd * Rr) * 4) == 0);
        for (int64_t h = 0; h < H; h++) {
            const int64_t s2a[2] = {B, Dd}, sta[2] = {H * Dd, 1}, s2b[2] = {B, Rr}, stb[2] = {H * Rr, 1};
            ts_tensor ah = view(p + h * Dd, TS_BF16, 2, s2a, sta), bh = view(q + h * Rr, TS_BF16, 2, s2b, stb);
            ts_tensor rh = ts_tensor_2d(ref, TS_F32, Dd, Rr), ch = ts_tensor_2d(c + h * Dd * Rr, TS_F32, Dd, Rr);
            /* tn: a [K, M] = [B, Dd], b [K, N] = [B, Rr] */
            TS_CHECK_STATUS(ts_bf16_gemm_tn(&ah, &bh, &rh, &ch, NULL), TS_OK);
            TS_CHECK(memcmp(ref, d + h * Dd * Rr, (size_t)(Dd * Rr) * 4) == 0);
        }
        free(p), free(q), free(c), free(d), free(d2), free(ref);
    }
    free(x), free(w);
}

TS_TEST(gemm_einsum_bmk_bnk_mn) {
    const int64_t S = 3, M = 9, N = 17, K = 70;
    uint16_t *a = bf16v(41, S * M * K), *b = bf16v(42, S * N * K);
    float *d = f32v(43, M * N, -32, 32), *ref = (float *)malloc((size_t)(M * N) * 4);
    memcpy(ref, d, (size_t)(M * N) * 4);
    const int64_t sa[3] = {S, M, K}, sb[3] = {S, N, K};
    ts_tensor ta = ts_tensor_make(a, TS_BF16, 3, sa), tb = ts_tensor_make(b, TS_BF16, 3, sb);
    ts_tensor td = ts_tensor_2d(d, TS_F32, M, N), tr = ts_tensor_2d(ref, TS_F32, M, N);
    TS_CHECK_STATUS(ts_einsum("bmk,bnk->mn", &ta, &tb, &td, &td, false), TS_OK);
    for (int64_t s = 0; s < S; s++) {
        ts_tensor as = ts_tensor_2d(a + s * M * K, TS_BF16, M, K), bs = ts_tensor_2d(b + s * N * K, TS_BF16, N, K);
        TS_CHECK_STATUS(ts_bf16_gemm_nt(&as, &bs, &tr, &tr, NULL), TS_OK);
    }
    TS_CHECK(memcmp(d, ref, (size_t)(M * N) * 4) == 0);
    /* bf16 d: the f32 sum from zero, rounded once. */
    float *z = (float *)calloc((size_t)(M * N), 4);
    ts_tensor tz = ts_tensor_2d(z, TS_F32, M, N);
    TS_CHECK_STATUS(ts_einsum("bmk,bnk->mn", &ta, &tb, &tz, &tz, false), TS_OK);
    uint16_t *db = (uint16_t *)canaries(M * N, 2);
    ts_tensor tdb = ts_tensor_2d(db, TS_BF16, M, N);
    TS_CHECK_STATUS(ts_einsum("bmk,bnk->mn", &ta, &tb, &tdb, NULL, false), TS_OK);
    int64_t bad = 0;
    for (int64_t i = 0; i < M * N; i++) bad += db[i] != ts_f32_to_bf16(z[i]);
    TS_CHECK_EQ_INT(bad, 0);
    double *o = (double *)malloc((size_t)(M * N) * 8), *g = (double *)malloc((size_t)(M * N) * 8);
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double acc = 0;
            for (int64_t s = 0; s < S; s++)
                for (int64_t k = 0; k < K; k++)
                    acc += (double)bf(a[(s * M + m) * K + k]) * bf(b[(s * N + n) * K + k]);
            o[m * N + n] = acc;
            g[m * N + n] = z[m * N + n];
        }
    TS_CHECK(calc_diff(g, o, M * N) < 1e-10);
    /* f32 d without c, bf16 d with c: rejected, d untouched. */
    float *dc = (float *)canaries(M * N, 4);
    ts_tensor tdc = ts_tensor_2d(dc, TS_F32, M, N);
    TS_CHECK_STATUS(ts_einsum("bmk,bnk->mn", &ta, &tb, &tdc, NULL, false), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_einsum("bmk,bnk->mn", &ta, &tb, &tdb, &tdb, false), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(all_canary(dc, M * N, 4));
    free(a), free(b), free(d), free(ref), free(z), free(db), free(o), free(g), free(dc);
}

TS_TEST(gemm_fp8_einsum_matches_dense) {
    const int64_t B = 5, H = 3, R = 300, D = 130;
    const int64_t kr = (R + 127) / 128, nd = (D + 127) / 128;
    uint8_t *x = e4m3v(51, B * H * R), *w = e4m3v(52, H * D * R);
    float *sx = f32v(53, B * H * kr, 0.25f, 2.0f), *sw = f32v(54, H * nd * kr, 0.25f, 2.0f);
    /* bhr,hdr->bhd, recipe (1, 128, 128) default, bf16 d. */
    uint16_t *d = (uint16_t *)canaries(B * H * D, 2), *ref = (uint16_t *)malloc((size_t)(B * D) * 2);
    const int64_t sa[3] = {B, H, R}, ssa[3] = {B, H, kr}, swv[3] = {H, D, R}, ssw[3] = {H, nd, kr};
    const int64_t sd[3] = {B, H, D};
    ts_tensor ta = ts_tensor_make(x, TS_E4M3, 3, sa), tsa = ts_tensor_make(sx, TS_F32, 3, ssa);
    ts_tensor tw = ts_tensor_make(w, TS_E4M3, 3, swv), tsw = ts_tensor_make(sw, TS_F32, 3, ssw);
    ts_tensor td = ts_tensor_make(d, TS_BF16, 3, sd);
    TS_CHECK_STATUS(ts_fp8_einsum("bhr,hdr->bhd", &ta, &tsa, &tw, &tsw, &td, NULL, NULL), TS_OK);
    for (int64_t h = 0; h < H; h++) {
        const int64_t s2[2] = {B, R}, st[2] = {H * R, 1}, s2s[2] = {B, kr}, sts[2] = {H * kr, 1};
        ts_tensor ah = view(x + h * R, TS_E4M3, 2, s2, st), sah = view(sx + h * kr, TS_F32, 2, s2s, sts);
        ts_tensor wh = ts_tensor_2d(w + h * D * R, TS_E4M3, D, R), swh = ts_tensor_2d(sw + h * nd * kr, TS_F32, nd, kr);
        ts_tensor rh = ts_tensor_2d(ref, TS_BF16, B, D);
        TS_CHECK_STATUS(ts_fp8_gemm_nt(&ah, &sah, &wh, &swh, &rh, NULL, NULL, NULL, NULL, NULL, false), TS_OK);
        for (int64_t bb = 0; bb < B; bb++)
            TS_CHECK(memcmp(ref + bb * D, d + (bb * H + h) * D, (size_t)D * 2) == 0);
    }
    /* bhd,hdr->bhr: x as [B, H, Dc = R] (contracted), w as [H, Dc, Ro = D], f32 d with C. */
    {
        const int64_t Dc = R, Ro = D, kc = kr, nr = nd;
        float *o = (float *)canaries(B * H * Ro, 4), *c = f32v(60, B * H * Ro, -4, 4);
        float *r2 = (float *)malloc((size_t)(B * Ro) * 4);
        const int64_t shw[3] = {H, Dc, Ro}, shs[3] = {H, kc, nr}, sho[3] = {B, H, Ro};
        ts_tensor tw2 = ts_tensor_make(w, TS_E4M3, 3, shw), ts2 = ts_tensor_make(sw, TS_F32, 3, shs);
        ts_tensor to = ts_tensor_make(o, TS_F32, 3, sho), tc = ts_tensor_make(c, TS_F32, 3, sho);
        TS_CHECK_STATUS(ts_fp8_einsum("bhd,hdr->bhr", &ta, &tsa, &tw2, &ts2, &to, &tc, NULL), TS_OK);
        for (int64_t h = 0; h < H; h++) {
            const int64_t s2[2] = {B, Dc}, st[2] = {H * Dc, 1}, s2s[2] = {B, kc}, sts[2] = {H * kc, 1};
            const int64_t s2c[2] = {B, Ro}, stc[2] = {H * Ro, 1};
            ts_tensor ah = view(x + h * Dc, TS_E4M3, 2, s2, st), sah = view(sx + h * kc, TS_F32, 2, s2s, sts);
            ts_tensor wh = ts_tensor_2d(w + h * Dc * Ro, TS_E4M3, Dc, Ro);
            ts_tensor swh = ts_tensor_2d(sw + h * kc * nr, TS_F32, kc, nr);
            ts_tensor rh = ts_tensor_2d(r2, TS_F32, B, Ro), ch = view(c + h * Ro, TS_F32, 2, s2c, stc);
            TS_CHECK_STATUS(ts_fp8_gemm_nn(&ah, &sah, &wh, &swh, &rh, &ch, NULL, NULL, NULL, NULL, false), TS_OK);
            for (int64_t bb = 0; bb < B; bb++)
                TS_CHECK(memcmp(r2 + bb * Ro, o + (bb * H + h) * Ro, (size_t)Ro * 4) == 0);
        }
        free(o), free(c), free(r2);
    }
    /* bhd,bhr->hdr, recipe (1, 1, 128): a [B, H, Dd], b [B, H, Rr], sfa [ceil(B/128), H, Dd]. */
    {
        const int64_t Dd = 6, Rr = 10, kb = 1;
        uint8_t *p = e4m3v(55, B * H * Dd), *q = e4m3v(56, B * H * Rr);
        float *sp = f32v(57, kb * H * Dd, 0.5f, 2), *sq = f32v(58, kb * H * Rr, 0.5f, 2);
        float *c = f32v(59, H * Dd * Rr, -8, 8), *o = (float *)malloc((size_t)(H * Dd * Rr) * 4);
        float *r2 = (float *)malloc((size_t)(Dd * Rr) * 4);
        const int64_t shp[3] = {B, H, Dd}, shq[3] = {B, H, Rr}, shsp[3] = {kb, H, Dd}, shsq[3] = {kb, H, Rr};
        const int64_t sho[3] = {H, Dd, Rr}, rec[3] = {1, 1, 128};
        ts_tensor tp = ts_tensor_make(p, TS_E4M3, 3, shp), tq = ts_tensor_make(q, TS_E4M3, 3, shq);
        ts_tensor tsp = ts_tensor_make(sp, TS_F32, 3, shsp), tsq = ts_tensor_make(sq, TS_F32, 3, shsq);
        ts_tensor to = ts_tensor_make(o, TS_F32, 3, sho), tc = ts_tensor_make(c, TS_F32, 3, sho);
        TS_CHECK_STATUS(ts_fp8_einsum("bhd,bhr->hdr", &tp, &tsp, &tq, &tsq, &to, &tc, rec), TS_OK);
        for (int64_t h = 0; h < H; h++) {
            const int64_t s2a[2] = {B, Dd}, sta[2] = {H * Dd, 1}, s2b[2] = {B, Rr}, stb[2] = {H * Rr, 1};
            const int64_t ssa2[2] = {kb, Dd}, ssta[2] = {H * Dd, 1}, ssb2[2] = {kb, Rr}, sstb[2] = {H * Rr, 1};
            ts_tensor ah = view(p + h * Dd, TS_E4M3, 2, s2a, sta), bh = view(q + h * Rr, TS_E4M3, 2, s2b, stb);
            ts_tensor sah = view(sp + h * Dd, TS_F32, 2, ssa2, ssta), sbh = view(sq + h * Rr, TS_F32, 2, ssb2, sstb);
            ts_tensor rh = ts_tensor_2d(r2, TS_F32, Dd, Rr), ch = ts_tensor_2d(c + h * Dd * Rr, TS_F32, Dd, Rr);
            TS_CHECK_STATUS(ts_fp8_gemm_tn(&ah, &sah, &bh, &sbh, &rh, &ch, rec, NULL, NULL, NULL, false), TS_OK);
            TS_CHECK(memcmp(r2, o + h * Dd * Rr, (size_t)(Dd * Rr) * 4) == 0);
        }
        free(p), free(q), free(sp), free(sq), free(c), free(o), free(r2);
    }
    free(x), free(w), free(sx), free(sw), free(d), free(ref);
}

TS_TEST(gemm_einsum_bad_input) {
    const int64_t B = 2, H = 3, R = 16, D = 8;
    uint16_t *x = bf16v(61, B * H * R), *w = bf16v(62, H * D * R);
    uint16_t *d = (uint16_t *)canaries(B * H * D, 2);
    const int64_t sa[3] = {B, H, R}, sw[3] = {H, D, R}, sd[3] = {B, H, D}, sdbad[3] = {B, H, D + 1};
    ts_tensor ta = ts_tensor_make(x, TS_BF16, 3, sa), tw = ts_tensor_make(w, TS_BF16, 3, sw);
    ts_tensor td = ts_tensor_make(d, TS_BF16, 3, sd), tdbad = ts_tensor_make(d, TS_BF16, 3, sdbad);
    ts_tensor tdf = ts_tensor_make(d, TS_F32, 3, sd), tx8 = ts_tensor_make(x, TS_E4M3, 3, sa);
    TS_CHECK_STATUS(ts_einsum("bhr,hdr->bhd ", &ta, &tw, &td, NULL, false), TS_ERR_UNSUPPORTED);
    TS_CHECK(strstr(ts_last_error(), "bhr,hdr->bhd ") != NULL);
    TS_CHECK_STATUS(ts_einsum("ij,jk->ik", &ta, &tw, &td, NULL, false), TS_ERR_UNSUPPORTED);
    TS_CHECK(strstr(ts_last_error(), "ij,jk->ik") != NULL);
    TS_CHECK_STATUS(ts_einsum(NULL, &ta, &tw, &td, NULL, false), TS_ERR_NULL_POINTER);
    TS_CHECK_STATUS(ts_einsum("bhr,hdr->bhd", &tx8, &tw, &td, NULL, false), TS_ERR_DTYPE);
    TS_CHECK_STATUS(ts_einsum("bhr,hdr->bhd", &ta, &tw, &tdf, NULL, false), TS_ERR_DTYPE);
    TS_CHECK_STATUS(ts_einsum("bhr,hdr->bhd", &ta, &tw, &td, &td, false), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_einsum("bhr,hdr->bhd", &ta, &tw, &tdbad, NULL, false), TS_ERR_SHAPE);
    const int64_t swh[3] = {H - 1, D, R};
    ts_tensor twh = ts_tensor_make(w, TS_BF16, 3, swh);
    TS_CHECK_STATUS(ts_einsum("bhr,hdr->bhd", &ta, &twh, &td, NULL, false), TS_ERR_SHAPE);
    const int64_t swr[3] = {H, D, R - 1};
    ts_tensor twr = ts_tensor_make(w, TS_BF16, 3, swr);
    TS_CHECK_STATUS(ts_einsum("bhr,hdr->bhd", &ta, &twr, &td, NULL, false), TS_ERR_SHAPE);
    ts_tensor t2 = ts_tensor_2d(x, TS_BF16, B, H * R);
    TS_CHECK_STATUS(ts_einsum("bhr,hdr->bhd", &t2, &tw, &td, NULL, false), TS_ERR_SHAPE);
    ts_tensor tda = ts_tensor_make(x, TS_BF16, 3, sd); /* d inside a */
    TS_CHECK_STATUS(ts_einsum("bhr,hdr->bhd", &ta, &tw, &tda, NULL, false), TS_ERR_ALIASING);
    TS_CHECK_STATUS(ts_einsum("bhd,bhr->hdr", &ta, &ta, &td, NULL, false), TS_ERR_DTYPE);
    /* fp8: unsupported bmk,bnk->mn, wrong dtype, scale shape. */
    float *s = f32v(63, 64, 1, 2);
    const int64_t ssa[3] = {B, H, 1}, ssw[3] = {H, 1, 1}, ssbad[3] = {H, 2, 1};
    ts_tensor tsa = ts_tensor_make(s, TS_F32, 3, ssa), tsw = ts_tensor_make(s + 16, TS_F32, 3, ssw);
    ts_tensor tsbad = ts_tensor_make(s + 16, TS_F32, 3, ssbad), tw8 = ts_tensor_make(w, TS_E4M3, 3, sw);
    TS_CHECK_STATUS(ts_fp8_einsum("bmk,bnk->mn", &tx8, &tsa, &tw8, &tsw, &td, NULL, NULL), TS_ERR_UNSUPPORTED);
    TS_CHECK_STATUS(ts_fp8_einsum("bhr,hdr->bhd", &ta, &tsa, &tw8, &tsw, &td, NULL, NULL), TS_ERR_DTYPE);
    TS_CHECK_STATUS(ts_fp8_einsum("bhr,hdr->bhd", &tx8, &tsa, &tw8, &tsbad, &td, NULL, NULL), TS_ERR_SHAPE);
    const int64_t r32[3] = {1, 128, 32};
    TS_CHECK_STATUS(ts_fp8_einsum("bhr,hdr->bhd", &tx8, &tsa, &tw8, &tsw, &td, NULL, r32), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(all_canary(d, B * H * D, 2));
    TS_CHECK_STATUS(ts_fp8_einsum("bhr,hdr->bhd", &tx8, &tsa, &tw8, &tsw, &td, NULL, NULL), TS_OK);
    TS_CHECK(!all_canary(d, B * H * D, 2));
    free(x), free(w), free(d), free(s);
}
