/* Pieces of the optimised model path checked in isolation (docs/model.md §4): RoPE and its
 * inverse, the YaRN frequency ramp, Sinkhorn's doubly-stochastic result, the compressor's
 * softmax pool, the Hadamard transform, the SwiGLU / routing weight / FP8 cast, and routing. */
#include "ts_test.h"
#include "ts_prng.h"

#include "model/model_internal.h"
#include "tilestack/quant.h"

#include <math.h>
#include <stdlib.h>

TS_TEST(model_pieces_rope_inverse_and_yarn) {
    ts_model_config c;
    TS_CHECK_STATUS(ts_model_config_builtin("dsv4-tiny", &c), TS_OK);
    ts_prng p = ts_prng_seed(3);
    for (int k = 0; k < 2; k++) {
        double freq[32];
        ts__model_yarn_freqs(&c, k == 1, freq);
        for (int64_t pos = 0; pos < 256; pos += 37) {
            float cs[32], sn[32];
            for (int i = 0; i < 32; i++) {
                cs[i] = (float)cos((double)pos * freq[i]);
                sn[i] = (float)sin((double)pos * freq[i]);
            }
            double x[64], y[64];
            for (int i = 0; i < 64; i++) x[i] = y[i] = ts_prng_uniform(&p);
            ts__model_rope(cs, sn, y, false);
            double moved = 0, err = 0;
            for (int i = 0; i < 64; i++) moved = fmax(moved, fabs(y[i] - x[i]));
            ts__model_rope(cs, sn, y, true);
            for (int i = 0; i < 64; i++) err = fmax(err, fabs(y[i] - x[i]));
            /* cos/sin rounded to f32: the rotation is orthogonal to ~1e-7 */
            TS_CHECK_MSG(err < 1e-6, "pos %lld: inverse RoPE error %g", (long long)pos, err);
            if (pos > 0) TS_CHECK(moved > 1e-3);
            /* the rotation keeps each pair's length (cos, sin rounded to f32: to ~1e-7) */
            double z[64];
            memcpy(z, x, sizeof z);
            ts__model_rope(cs, sn, z, false);
            for (int i = 0; i < 32; i++) {
                const double a = x[2 * i] * x[2 * i] + x[2 * i + 1] * x[2 * i + 1];
                const double b = z[2 * i] * z[2 * i] + z[2 * i + 1] * z[2 * i + 1];
                TS_CHECK_MSG(fabs(a - b) < 1e-6 * (1 + a), "pair %d: |x|^2 %g -> %g", i, a, b);
            }
        }
        /* YaRN: the first dims keep base^(-2i/64), the last are divided by the factor */
        const double base = k ? c.compress_rope_theta : c.rope_theta;
        TS_CHECK(fabs(freq[0] - 1.0) < 1e-15);
        TS_CHECK(fabs(freq[1] - pow(base, -2.0 / 64)) < 1e-15);
        const double last = pow(base, -62.0 / 64) / (k ? c.rope_factor : 1.0);
        TS_CHECK_MSG(fabs(freq[31] - last) < 1e-15 * last * 10, "k %d: freq[31] %g vs %g", k,
                     freq[31], last);
        for (int i = 1; i < 32; i++) TS_CHECK(freq[i] < freq[i - 1]);
    }
}

TS_TEST(model_pieces_sinkhorn_doubly_stochastic) {
    ts_prng p = ts_prng_seed(5);
    for (int trial = 0; trial < 10; trial++) {
        double M[16];
        for (int i = 0; i < 16; i++) M[i] = 2 * ts_prng_uniform(&p);
        ts__model_sinkhorn(M, 4, 20, 1e-6);
        for (int i = 0; i < 4; i++) {
            double r = 0, col = 0;
            for (int j = 0; j < 4; j++) {
                r += M[i * 4 + j];
                col += M[j * 4 + i];
                TS_CHECK(M[i * 4 + j] > 0);
            }
            TS_CHECK_MSG(fabs(col - 1) < 1e-5, "column %d sums to %g", i, col);
            /* rows converge more slowly: 20 iterations leave them near 1 */
            TS_CHECK_MSG(fabs(r - 1) < 2e-2, "row %d sums to %g", i, r);
        }
    }
    /* equal entries: every entry 1/4 */
    double E[16] = {0};
    ts__model_sinkhorn(E, 4, 20, 1e-6);
    for (int i = 0; i < 16; i++) TS_CHECK(fabs(E[i] - 0.25) < 1e-5);
}

TS_TEST(model_pieces_softmax_pool_and_hadamard) {
    /* equal scores: the mean of the slots; one dominant score: that slot's value */
    float score[8 * 3], kv[8 * 3];
    ts_prng p = ts_prng_seed(9);
    for (int i = 0; i < 24; i++) {
        score[i] = 0.7f;
        kv[i] = ts_prng_uniform(&p);
    }
    for (int c = 0; c < 3; c++) {
        double mean = 0;
        for (int j = 0; j < 8; j++) mean += kv[j * 3 + c];
        mean /= 8;
        TS_CHECK(fabs(ts__model_softmax_pool(score, kv, 8, 3, c) - mean) < 1e-12);
    }
    score[5 * 3 + 1] = 100;
    TS_CHECK(fabs(ts__model_softmax_pool(score, kv, 8, 3, 1) - kv[5 * 3 + 1]) < 1e-12);
    score[2 * 3 + 2] = -INFINITY; /* a slot at -inf does not count */
    double m2 = 0;
    for (int j = 0; j < 8; j++) m2 += j == 2 ? 0 : kv[j * 3 + 2];
    TS_CHECK(fabs(ts__model_softmax_pool(score, kv, 8, 3, 2) - m2 / 7) < 1e-12);
    /* Hadamard: against the matrix definition, and an involution (H/sqrt(128) squared = I) */
    double x[128], y[128], h[128];
    for (int i = 0; i < 128; i++) x[i] = y[i] = ts_prng_uniform(&p);
    for (int i = 0; i < 128; i++) {
        double s = 0;
        for (int j = 0; j < 128; j++) s += (__builtin_popcount((unsigned)(i & j)) & 1) ? -x[j] : x[j];
        h[i] = s / sqrt(128.0);
    }
    ts__model_hadamard128(y);
    for (int i = 0; i < 128; i++) TS_CHECK(fabs(y[i] - h[i]) < 1e-12);
    ts__model_hadamard128(y);
    for (int i = 0; i < 128; i++) TS_CHECK(fabs(y[i] - x[i]) < 1e-12);
}

TS_TEST(model_pieces_swiglu_weight_cast) {
    enum { M = 3, I = 64 };
    uint16_t g[M * I], u[M * I];
    ts_prng p = ts_prng_seed(11);
    for (int i = 0; i < M * I; i++) {
        g[i] = ts_f32_to_bf16(16 * ts_prng_uniform(&p)); /* some beyond the clamp at 10 */
        u[i] = ts_f32_to_bf16(16 * ts_prng_uniform(&p));
    }
    const float w[M] = {0.5f, 1.25f, 0.03125f};
    float tmp[M * I], sf[M * I / 32], want_sf[M * I / 32], act[M * I];
    uint8_t q[M * I], want[M * I];
    TS_CHECK_STATUS(ts__moe_swiglu_weight_cast(g, u, I, w, M, I, 10.0f, tmp, q, sf), TS_OK);
    for (int r = 0; r < M; r++)
        for (int i = 0; i < I; i++) {
            double gg = fmin(ts_bf16_to_f32(g[r * I + i]), 10.0);
            double uu = fmax(fmin(ts_bf16_to_f32(u[r * I + i]), 10.0), -10.0);
            act[r * I + i] = (float)(gg / (1 + exp(-gg)) * uu * w[r]);
        }
    ts_tensor ta = ts_tensor_2d(act, TS_F32, M, I), tq = ts_tensor_2d(want, TS_E4M3, M, I);
    ts_tensor ts_ = ts_tensor_2d(want_sf, TS_F32, M, I / 32);
    TS_CHECK_STATUS(ts_per_token_cast_to_fp8(&ta, true, 32, false, &tq, &ts_), TS_OK);
    TS_CHECK(memcmp(q, want, sizeof q) == 0);
    TS_CHECK(memcmp(sf, want_sf, sizeof sf) == 0);
    for (int i = 0; i < M * I / 32; i++) { /* ue8m0: powers of two */
        int e;
        TS_CHECK(frexpf(sf[i], &e) == 0.5f);
    }
}

TS_TEST(model_pieces_routing) {
    ts_model_config c;
    TS_CHECK_STATUS(ts_model_config_builtin("dsv4-tiny", &c), TS_OK);
    float s[8] = {0.5f, -1, 2, 0.5f, 3, -2, 0.5f, 1};
    float bias[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int32_t idx[3];
    float w[3];
    ts__model_route(&c, s, bias, NULL, 8, 3, idx, w);
    /* descending: 4 (3), 2 (2), 7 (1) */
    TS_CHECK(idx[0] == 4 && idx[1] == 2 && idx[2] == 7);
    double sp[3], tot = 0;
    for (int j = 0; j < 3; j++) tot += sp[j] = sqrt(log1p(exp((double)s[idx[j]])));
    for (int j = 0; j < 3; j++) TS_CHECK(fabs(w[j] - sp[j] / tot * 1.5) < 1e-6);
    /* ties go to the lower id; bias moves the selection but not the weights */
    ts__model_route(&c, s, bias, NULL, 8, 5, (int32_t[5]){0}, (float[5]){0});
    int32_t i5[5];
    float w5[5];
    ts__model_route(&c, s, bias, NULL, 8, 5, i5, w5);
    TS_CHECK(i5[3] == 0 && i5[4] == 3); /* 0.5 at 0, 3, 6 */
    bias[5] = 10;
    ts__model_route(&c, s, bias, NULL, 8, 3, idx, w);
    TS_CHECK(idx[0] == 5 && idx[1] == 4 && idx[2] == 2);
    const double s5 = sqrt(log1p(exp(-2.0))), s4 = sqrt(log1p(exp(3.0))), s2 = sqrt(log1p(exp(2.0)));
    TS_CHECK(fabs(w[0] - s5 / (s5 + s4 + s2) * 1.5) < 1e-6);
    /* hash rows are taken as given */
    const int32_t row[3] = {6, 7, 0};
    ts__model_route(&c, s, NULL, row, 8, 3, idx, w);
    TS_CHECK(idx[0] == 6 && idx[1] == 7 && idx[2] == 0);
    TS_CHECK(fabs((double)w[0] + w[1] + w[2] - 1.5) < 1e-6);
    /* softmax scoring: not renormalised */
    c.score_func = TS_MODEL_SCORE_SOFTMAX;
    bias[5] = 0;
    ts__model_route(&c, s, bias, NULL, 8, 1, idx, w);
    double den = 0;
    for (int e = 0; e < 8; e++) den += exp((double)s[e] - 3);
    TS_CHECK(idx[0] == 4 && fabs(w[0] - 1.0 / den * 1.5) < 1e-6);
}

#include "model/model_kernels.h"

TS_TEST(model_pieces_dot_rows_generic_avx2_same_bits) {
    ts_prng p = ts_prng_seed(21);
    enum { K = 203, M = 13, LD = 211 }; /* 13 rows: the 8-, 4- and 1-row blocks */
    float w[K], x[M * LD], y0[M * 3], y1[M * 3];
    for (int i = 0; i < K; i++) w[i] = ts_prng_uniform(&p) * 3;
    for (int i = 0; i < M * LD; i++) x[i] = ts_prng_uniform(&p);
    for (int64_t k = 1; k <= K; k += 29) {
        ts__model_dot_rows__generic(w, k, x, M, LD, y0, 3);
        for (int r = 0; r < M; r++) { /* against a plain double sum: within f32 rounding */
            double s = 0, sa = 0;
            for (int64_t i = 0; i < k; i++) {
                s += (double)x[r * LD + i] * w[i];
                sa += fabs((double)x[r * LD + i] * w[i]);
            }
            TS_CHECK(fabs(y0[r * 3] - s) <= 1e-6 * (1 + sa));
        }
#ifdef TS_HAVE_AVX2_KERNELS
        if (ts_get_cpu_info()->has_avx2) {
            ts__model_dot_rows__avx2(w, k, x, M, LD, y1, 3);
            for (int r = 0; r < M; r++) TS_CHECK(memcmp(&y0[r * 3], &y1[r * 3], 4) == 0);
        }
#endif
#ifdef TS_HAVE_AVX512_KERNELS
        const ts_isa saved = ts_get_isa();
        if (ts_set_isa(TS_ISA_AVX512) == TS_OK) {
            memset(y1, 0, sizeof y1);
            ts__model_dot_rows__avx512(w, k, x, M, LD, y1, 3);
            for (int r = 0; r < M; r++) TS_CHECK(memcmp(&y0[r * 3], &y1[r * 3], 4) == 0);
            ts_set_isa(saved);
        } else if (k == 1) {
            printf("skip isa avx512: not runnable here\n");
        }
#endif
    }
}

/* The blocked four-weight-row kernel: the bits of four generic calls, for every k % 16 and
 * x rows past the 4-row blocks; and the model's f32 linear through it equals the generic one. */
TS_TEST(model_pieces_dot_4w_same_bits) {
#ifdef TS_HAVE_AVX512_KERNELS
    const ts_isa saved = ts_get_isa();
    if (ts_set_isa(TS_ISA_AVX512) != TS_OK) {
        printf("skip isa avx512: not runnable here\n");
        return;
    }
    ts_prng p = ts_prng_seed(22);
    enum { K = 203, M = 11, LD = 211, LDY = 7 }; /* 11 rows: two 4-row blocks and 3 more */
    static float w[4 * K], x[M * LD], y0[M * LDY], y1[M * LDY];
    for (int i = 0; i < M * LD; i++) x[i] = ts_prng_uniform(&p) - 0.5f;
    for (int64_t k = 1; k <= K; k += 13) {
        for (int i = 0; i < 4 * k; i++) w[i] = (ts_prng_uniform(&p) - 0.5f) * 3;
        memset(y0, 0, sizeof y0);
        memset(y1, 0xFF, sizeof y1);
        for (int j = 0; j < 4; j++) ts__model_dot_rows__generic(w + j * k, k, x, M, LD, y0 + j, LDY);
        ts__model_dot_4w__avx512(w, k, x, M, LD, y1, LDY);
        for (int r = 0; r < M; r++)
            TS_CHECK_MSG(memcmp(y0 + r * LDY, y1 + r * LDY, 4 * sizeof(float)) == 0,
                         "k %lld row %d: other bits", (long long)k, r);
        /* and a value check: not the same wrong answer twice */
        double s = 0;
        for (int64_t i = 0; i < k; i++) s += (double)x[2 * LD + i] * w[3 * k + i];
        TS_CHECK(fabs(y1[2 * LDY + 3] - s) <= 1e-5 * (1 + fabs(s)) + 1e-6 * (double)k);
    }
    /* through the driver: 4-row items plus a 2-row tail, m = 6, against the generic path */
    enum { N = 10, KK = 64, MM = 6 };
    static float ww[N * KK], yy0[MM * N], yy1[MM * N];
    for (int i = 0; i < N * KK; i++) ww[i] = ts_prng_uniform(&p) - 0.5f;
    ts__model_gemv_f32(x, MM, LD, ww, N, KK, yy1, N);
    (void)ts_set_isa(TS_ISA_GENERIC);
    ts__model_gemv_f32(x, MM, LD, ww, N, KK, yy0, N);
    TS_CHECK(memcmp(yy0, yy1, sizeof yy0) == 0);
    (void)ts_set_isa(saved);
#else
    printf("skip: built without avx512 kernels\n");
#endif
}

/* mHC's per-element kernels: AVX-512 against the generic order bit for bit (D with a tail,
 * values spanning many binades, a NaN, a sum that overflows f32), and against a direct sum. */
TS_TEST(model_pieces_mhc_kernels_same_bits) {
#ifdef TS_HAVE_AVX512_KERNELS
    const ts_isa saved = ts_get_isa();
    if (ts_set_isa(TS_ISA_AVX512) != TS_OK) {
        printf("skip isa avx512: not runnable here\n");
        return;
    }
    (void)ts_set_isa(saved);
    ts_prng p = ts_prng_seed(23);
    enum { HC = 4, D = 1000 }; /* 1000 = 62 x 16 + 8 */
    static uint16_t f[D], X[HC * D], o0[HC * D], o1[HC * D], y0[D], y1[D];
    static float xf[HC * D];
    double post[HC], comb[HC * HC], pre[HC];
    for (int i = 0; i < D; i++) f[i] = ts_f32_to_bf16((ts_prng_uniform(&p) - 0.5f) * ldexpf(1, i % 40 - 20));
    for (int i = 0; i < HC * D; i++) {
        X[i] = ts_f32_to_bf16((ts_prng_uniform(&p) - 0.5f) * ldexpf(1, i % 30 - 15));
        xf[i] = ts_bf16_to_f32(X[i]) * 1.0001f;
    }
    f[7] = 0x7FC0;                   /* NaN */
    f[9] = X[9] = 0x7F7F;            /* near FLT_MAX: the double sum rounds to inf in f32 */
    xf[11] = 3e38f, xf[D + 11] = 3e38f;
    for (int i = 0; i < HC; i++) {
        post[i] = 2.0 * ts_prng_uniform(&p);
        pre[i] = ts_prng_uniform(&p) + 0.5;
        for (int j = 0; j < HC; j++) comb[i * HC + j] = ts_prng_uniform(&p) / 3;
    }
    post[0] = 1.5, pre[0] = 1.0; /* so the two sums above overflow */
    ts__model_hc_post_row__generic(f, X, HC, D, post, comb, o0);
    ts__model_hc_post_row__avx512(f, X, HC, D, post, comb, o1);
    TS_CHECK(memcmp(o0, o1, sizeof o0) == 0);
    ts__model_collapse__generic(pre, xf, HC, D, y0);
    ts__model_collapse__avx512(pre, xf, HC, D, y1);
    TS_CHECK(memcmp(y0, y1, sizeof y0) == 0);
    TS_CHECK_MSG((o0[7] & 0x7FFF) == 0x7FC0 && o0[9] == 0x7F80 && y0[11] == 0x7F80,
                 "NaN / overflow: %04x %04x %04x", o0[7], o0[9], y0[11]);
    for (int j = 0; j < HC; j++) /* a column away from the special values, by hand */
        for (int d = 100; d < 110; d++) {
            double s = post[j] * ts_bf16_to_f32(f[d]);
            for (int i = 0; i < HC; i++) s += comb[i * HC + j] * ts_bf16_to_f32(X[i * D + d]);
            TS_CHECK(o1[j * D + d] == ts_f32_to_bf16((float)s));
        }
#else
    printf("skip: built without avx512 kernels\n");
#endif
}

TS_TEST(model_pieces_sampling) {
    float lg[2 * 10] = {0, 3, 1, 3, -1, 2, 0, 0, 0, 0, /* row 0: tie 3 at 1 and 3 */
                        5, 4, 5.5f, 0, 0, 0, 0, 0, 0, -9};
    int32_t t[2] = {-1, -1};
    TS_CHECK_STATUS(ts_model_sample(lg, 2, 10, 1, NULL, t), TS_OK);
    TS_CHECK(t[0] == 1 && t[1] == 2);
    /* top-2 of row 1: {2 (5.5), 0 (5)}; frequencies follow the softmax (e^0.5 : 1) */
    uint64_t rng = 123, rng2 = 123;
    int c2 = 0, c0 = 0, other = 0;
    for (int i = 0; i < 4000; i++) {
        TS_CHECK_STATUS(ts_model_sample(lg + 10, 1, 10, 2, &rng, t), TS_OK);
        c2 += t[0] == 2;
        c0 += t[0] == 0;
        other += t[0] != 2 && t[0] != 0;
    }
    TS_CHECK(other == 0);
    const double want = exp(0.5) / (1 + exp(0.5)); /* 0.622 */
    TS_CHECK_MSG(fabs(c2 / 4000.0 - want) < 0.03, "P(top1) %g, want %g", c2 / 4000.0, want);
    /* reproducible from the seed */
    int32_t a[2], b[2];
    TS_CHECK_STATUS(ts_model_sample(lg, 2, 10, 3, &rng2, a), TS_OK);
    rng2 = 123;
    TS_CHECK_STATUS(ts_model_sample(lg, 2, 10, 3, &rng2, b), TS_OK);
    TS_CHECK(a[0] == b[0] && a[1] == b[1]);
    TS_CHECK_STATUS(ts_model_sample(lg, 2, 10, 0, &rng, t), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_model_sample(lg, 2, 10, 11, &rng, t), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_model_sample(lg, 2, 10, 2, NULL, t), TS_ERR_NULL_POINTER);
    lg[4] = NAN;
    TS_CHECK_STATUS(ts_model_sample(lg, 1, 10, 1, NULL, t), TS_ERR_NONFINITE);
}
