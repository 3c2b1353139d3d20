/* Two TileKernels forms checked against plain-C references written here (no golden file):
 *   per_block_cast_fp4(_32)(_f32)  TileKernels' per_block_cast(x, 'e2m1', (B, B)): one f32 scale
 *       per B x B block (amax floor 6 * 2^-126, sf = amax / 6, round_sf's power-of-two ceiling
 *       found with frexpf here, not by the kernel's exponent-bit trick), codes by a nearest-value
 *       search over the eight e2m1 magnitudes with ties to the even code, packed low nibble =
 *       even element; partial blocks, blocks under the floor, zero blocks;
 *   swiglu_forward_and_per_token_cast(_ue8m0) with sf_clamp_min (upstream's custom amax floor):
 *       inputs with a >= 32, where silu(a) = a / (1 + exp(-a)) is exactly a in f32 whatever the
 *       exp (exp(-32) < 2^-25), so y = a * b exactly and the reference needs no exp; e4m3 codes by
 *       a nearest-value search over the e4m3fn magnitudes; rows below and above the floor.
 * Every ISA path, 1 and 2 threads; argument errors write nothing. */
#include "test_tk_common.h"

#include "ts_prng.h"
#include "tilestack/kernels.h"
#include "tilestack/numerics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* 2^ceil(log2 s) for a positive normal s */
static float pow2_ceil(float s) {
    int e;
    float m = frexpf(s, &e); /* s = m 2^e, m in [0.5, 1) */
    return m == 0.5f ? s : ldexpf(1.0f, e);
}

/* nearest of n ascending magnitudes, ties to the even index, saturating at the last */
static unsigned nearest_code(const double *mag, int n, double a) {
    if (a >= mag[n - 1]) return (unsigned)(n - 1);
    int best = 0;
    for (int k = 1; k < n; k++) {
        double d = fabs(a - mag[k]), db = fabs(a - mag[best]);
        if (d < db || (d == db && k % 2 == 0)) best = k;
    }
    return (unsigned)best;
}

static unsigned e2m1_code(float p) {
    static const double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    return nearest_code(mag, 8, fabs((double)p)) | (signbit(p) ? 8u : 0u);
}

static unsigned e4m3_code(float p) {
    static double mag[127];
    if (mag[1] == 0)
        for (int c = 0; c < 127; c++) {
            const int e = c >> 3, m = c & 7;
            mag[c] = e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10);
        }
    return nearest_code(mag, 127, fabs((double)p)) | (signbit(p) ? 0x80u : 0u);
}

/* ------------------------------------------------------------------ per_block_cast to e2m1 */

typedef struct bf_ctx {
    ts_test_ctx *t;
    int64_t M, N, B;
    bool f32, round_sf;
    const void *x;
    const uint8_t *ref_q;
    const float *ref_sf;
    uint8_t *q;
    float *sf;
} bf_ctx;

static void bf_run(void *vc, int variant) {
    bf_ctx *c = vc;
    ts_test_ctx *ts_t_ = c->t;
    const int64_t sm = cdiv(c->M, c->B), sn = cdiv(c->N, c->B);
    ts_tensor x = ts_tensor_2d((void *)c->x, c->f32 ? TS_F32 : TS_BF16, c->M, c->N);
    ts_tensor q = ts_tensor_2d(c->q, TS_E2M1X2, c->M, c->N / 2), sf = ts_tensor_2d(c->sf, TS_F32, sm, sn);
    memset(c->q, 0xEE, (size_t)(c->M * c->N / 2));
    memset(c->sf, 0xEE, (size_t)(sm * sn) * 4);
    ts_status st = c->B == 128 ? (c->f32 ? ts_per_block_cast_fp4_f32 : ts_per_block_cast_fp4)(&x, &q, &sf, c->round_sf)
                               : (c->f32 ? ts_per_block_cast_fp4_32_f32 : ts_per_block_cast_fp4_32)(&x, &q, &sf, c->round_sf);
    TS_CHECK_STATUS(st, TS_OK);
    TS_CHECK_MSG(!memcmp(c->sf, c->ref_sf, (size_t)(sm * sn) * 4), "fp4 block scales M=%lld N=%lld B=%lld f32=%d round=%d (variant %d)",
                 (long long)c->M, (long long)c->N, (long long)c->B, c->f32, c->round_sf, variant);
    for (int64_t i = 0; i < c->M * c->N / 2; i++)
        if (c->q[i] != c->ref_q[i]) {
            TS_CHECK_MSG(0, "fp4 block codes M=%lld N=%lld B=%lld f32=%d round=%d: byte %lld %02x != %02x (variant %d)",
                         (long long)c->M, (long long)c->N, (long long)c->B, c->f32, c->round_sf, (long long)i, c->q[i],
                         c->ref_q[i], variant);
            break;
        }
}

/* block (bi, bj)'s magnitude class: ordinary, tiny, under the e2m1 floor, all zero, large */
static float bf_value(ts_prng *r, int64_t bi, int64_t bj) {
    const float u = ts_prng_uniform(r);
    switch ((bi * 3 + bj) % 5) {
    case 0: return u;
    case 1: return u * 1e-3f;
    case 2: return copysignf(1.2e-38f + fabsf(u) * 5e-38f, u); /* normal, amax < 6 * 2^-126 */
    case 3: return 0.0f;
    default: return u * 3.0e5f;
    }
}

static void bf_case(ts_test_ctx *ts_t_, int64_t M, int64_t N, int64_t B, bool f32, bool round_sf) {
    const int64_t sm = cdiv(M, B), sn = cdiv(N, B);
    float *xv = malloc((size_t)(M * N) * 4), *ref_sf = malloc((size_t)(sm * sn) * 4), *sf = malloc((size_t)(sm * sn) * 4);
    uint16_t *xb = malloc((size_t)(M * N) * 2);
    uint8_t *ref_q = malloc((size_t)(M * N / 2)), *q = malloc((size_t)(M * N / 2));
    unsigned *codes = malloc((size_t)(M * N) * sizeof(unsigned));
    TS_CHECK(xv && ref_sf && sf && xb && ref_q && q && codes);
    if (TS_FAILED()) goto out;
    ts_prng r = ts_prng_seed((uint64_t)(M * 7919 + N * 31 + B + f32 * 2 + round_sf));
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            const float v = bf_value(&r, i / B, j / B);
            xb[i * N + j] = ts_f32_to_bf16(v);
            xv[i * N + j] = f32 ? v : ts_bf16_to_f32(xb[i * N + j]);
        }
    const float floor_ = ldexpf(6.0f, -126);
    for (int64_t bi = 0; bi < sm; bi++)
        for (int64_t bj = 0; bj < sn; bj++) {
            float amax = 0;
            for (int64_t i = bi * B; i < M && i < bi * B + B; i++)
                for (int64_t j = bj * B; j < N && j < bj * B + B; j++) amax = fmaxf(amax, fabsf(xv[i * N + j]));
            amax = fmaxf(amax, floor_);
            float s = amax / 6.0f, inv = 6.0f / amax;
            if (round_sf) s = pow2_ceil(s), inv = 1.0f / s;
            ref_sf[bi * sn + bj] = s;
            for (int64_t i = bi * B; i < M && i < bi * B + B; i++)
                for (int64_t j = bj * B; j < N && j < bj * B + B; j++) codes[i * N + j] = e2m1_code(xv[i * N + j] * inv);
        }
    for (int64_t i = 0; i < M * N / 2; i++) ref_q[i] = (uint8_t)(codes[2 * i] | codes[2 * i + 1] << 4);
    bf_ctx c = {ts_t_, M, N, B, f32, round_sf, f32 ? (const void *)xv : (const void *)xb, ref_q, ref_sf, q, sf};
    tk_for_variants(&c, bf_run, 4);
out:
    free(xv), free(ref_sf), free(sf), free(xb), free(ref_q), free(q), free(codes);
}

TS_TEST(tk_per_block_cast_fp4) {
    static const int64_t shapes[][2] = {{1, 64}, {130, 300}, {33, 1100}, {256, 2112}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int B = 32; B <= 128; B += 96)
            for (int f = 0; f < 2; f++)
                for (int rs = 0; rs < 2; rs++) bf_case(ts_t_, shapes[s][0], shapes[s][1], B, f, rs);
    /* the rounding corners through one 32 x 32 block of a 1 x 64 row (the second block is zero):
     * with amax 6 (inv = 1) the values are the ties 0.25, 0.75, 1.25, 2.5, 3.5, 5 themselves,
     * -0.1 rounds to -0; with amax 7 they land off the ties and 7 saturates */
    static const float v[8] = {0.25f, 0.75f, 5.0f, 6.0f, -0.1f, 1.25f, -2.5f, 3.5f};
    for (int pass = 0; pass < 2; pass++) {
        float x[64], sf[2];
        uint8_t q[32], ref[32];
        unsigned cd[64];
        for (int j = 0; j < 64; j++) x[j] = j < 8 ? v[j] : 0.0f;
        if (pass) x[3] = 7.0f;
        for (int j = 0; j < 64; j++) cd[j] = e2m1_code(x[j] * (6.0f / fmaxf(j < 32 ? x[3] : 0.0f, ldexpf(6.0f, -126))));
        for (int j = 0; j < 32; j++) ref[j] = (uint8_t)(cd[2 * j] | cd[2 * j + 1] << 4);
        ts_tensor tx = ts_tensor_2d(x, TS_F32, 1, 64), tq = ts_tensor_2d(q, TS_E2M1X2, 1, 32), tsf = ts_tensor_2d(sf, TS_F32, 1, 2);
        TS_CHECK_STATUS(ts_per_block_cast_fp4_32_f32(&tx, &tq, &tsf, false), TS_OK);
        TS_CHECK(sf[0] == x[3] / 6.0f);
        TS_CHECK_MSG(!memcmp(q, ref, sizeof q), "fp4 rounding corners (pass %d): %02x %02x %02x %02x != %02x %02x %02x %02x", pass,
                     q[0], q[1], q[2], q[3], ref[0], ref[1], ref[2], ref[3]);
    }
}

TS_TEST(tk_per_block_cast_fp4_errors) {
    uint16_t x[2 * 65];
    uint8_t q[66];
    float sf[4];
    memset(x, 0, sizeof x);
    memset(q, 0x5A, sizeof q);
    ts_tensor tx = ts_tensor_2d(x, TS_BF16, 2, 65), tq = ts_tensor_2d(q, TS_E2M1X2, 2, 32);
    ts_tensor tsf = ts_tensor_2d(sf, TS_F32, 1, 3);
    TS_CHECK_STATUS(ts_per_block_cast_fp4_32(&tx, &tq, &tsf, false), TS_ERR_INVALID_ARGUMENT); /* N odd */
    TS_CHECK(strstr(ts_last_error(), "N even") != NULL);
    tx = ts_tensor_2d(x, TS_BF16, 2, 64);
    tsf = ts_tensor_2d(sf, TS_F32, 1, 3);
    TS_CHECK_STATUS(ts_per_block_cast_fp4_32(&tx, &tq, &tsf, false), TS_ERR_INVALID_ARGUMENT); /* sf columns */
    TS_CHECK(strstr(ts_last_error(), "ceil(N / 32)") != NULL);
    tsf = ts_tensor_2d(sf, TS_F32, 2, 1);
    TS_CHECK_STATUS(ts_per_block_cast_fp4(&tx, &tq, &tsf, false), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "ceil(N / 128)") != NULL);
    size_t written = 0;
    for (size_t i = 0; i < sizeof q; i++) written += q[i] != 0x5A;
    TS_CHECK_EQ_INT(written, 0);
}

/* --------------------------------------------------- swiglu_forward_and_per_token_cast floor */

typedef struct sw_ctx {
    ts_test_ctx *t;
    int64_t P, H, gs;
    bool packed, round_sf;
    float floor_;
    const uint16_t *x;
    const uint8_t *ref_q;
    const uint32_t *ref_sf;
    uint8_t *q;
    uint32_t *sf;
} sw_ctx;

static void sw_run(void *vc, int variant) {
    sw_ctx *c = vc;
    ts_test_ctx *ts_t_ = c->t;
    const int64_t ng = c->H / c->gs, ncol = c->packed ? cdiv(ng, 4) : ng;
    int32_t dummy_i = 0;
    float dummy_w = 0;
    int64_t cnt[3] = {0, 0, 0};
    ts_tensor x = ts_tensor_2d((void *)c->x, TS_BF16, c->P, 2 * c->H);
    ts_tensor pe = ts_tensor_1d(&dummy_i, TS_I32, 1), ptt = ts_tensor_1d(&dummy_i, TS_I32, 1);
    ts_tensor tw = ts_tensor_1d(&dummy_w, TS_F32, 1), tc = ts_tensor_1d(cnt, TS_I64, 3);
    ts_tensor q = ts_tensor_2d(c->q, TS_E4M3, c->P, c->H);
    ts_tensor sf = ts_tensor_2d(c->sf, c->packed ? TS_UE8M0X4 : TS_F32, c->P, ncol);
    memset(c->q, 0xEE, (size_t)(c->P * c->H));
    memset(c->sf, 0xEE, (size_t)(c->P * ncol) * 4);
    ts_status st = c->packed ? ts_swiglu_forward_and_per_token_cast_ue8m0(&x, &pe, &ptt, &tw, &q, &sf, &tc, c->gs, 0.0f, false,
                                                                          false, false, false, c->floor_)
                             : ts_swiglu_forward_and_per_token_cast(&x, &pe, &ptt, &tw, &q, &sf, &tc, c->gs, 0.0f, false, false,
                                                                    false, false, c->round_sf, c->floor_);
    TS_CHECK_STATUS(st, TS_OK);
    TS_CHECK_MSG(!memcmp(c->sf, c->ref_sf, (size_t)(c->P * ncol) * 4), "swiglu scales floor=%g packed=%d round=%d (variant %d)",
                 (double)c->floor_, c->packed, c->round_sf, variant);
    TS_CHECK_MSG(!memcmp(c->q, c->ref_q, (size_t)(c->P * c->H)), "swiglu codes floor=%g packed=%d round=%d (variant %d)",
                 (double)c->floor_, c->packed, c->round_sf, variant);
}

static void sw_case(ts_test_ctx *ts_t_, float floor_, bool packed, bool round_sf) {
    enum { P = 12, H = 512, GS = 128, NG = H / GS };
    static const float row_scale[4] = {1e-3f, 1e-2f, 1.0f, 1e-7f};
    uint16_t *x = malloc((size_t)P * 2 * H * 2);
    uint8_t *ref_q = malloc((size_t)P * H), *q = malloc((size_t)P * H);
    uint32_t ref_sf[P * NG], sf[P * NG];
    TS_CHECK(x && ref_q && q);
    if (TS_FAILED()) goto out;
    ts_prng r = ts_prng_seed(4242);
    for (int p = 0; p < P; p++)
        for (int j = 0; j < H; j++) {
            x[p * 2 * H + j] = ts_f32_to_bf16(32.0f + 32.0f * fabsf(ts_prng_uniform(&r))); /* a in [32, 64] */
            x[p * 2 * H + H + j] = ts_f32_to_bf16(ts_prng_uniform(&r) * row_scale[p % 4] * (1 + j / GS));
        }
    memset(ref_sf, 0, sizeof ref_sf);
    for (int p = 0; p < P; p++)
        for (int g = 0; g < NG; g++) {
            float y[GS], amax = 0;
            for (int j = 0; j < GS; j++) {
                y[j] = ts_bf16_to_f32(x[p * 2 * H + g * GS + j]) * ts_bf16_to_f32(x[p * 2 * H + H + g * GS + j]); /* exact */
                amax = fmaxf(amax, fabsf(y[j]));
            }
            amax = fmaxf(amax, floor_);
            float s = amax / 448.0f, inv = 448.0f / amax;
            if (round_sf || packed) s = pow2_ceil(s), inv = 1.0f / s;
            if (packed)
                ref_sf[p * cdiv(NG, 4) + g / 4] |= (uint32_t)(ilogbf(s) + 127) << (8 * (g % 4)); /* s a power of two */
            else
                memcpy(&ref_sf[p * NG + g], &s, 4);
            for (int j = 0; j < GS; j++) {
                const float v = y[j] * inv;
                ref_q[p * H + g * GS + j] = (uint8_t)e4m3_code(v > 448.0f ? 448.0f : v < -448.0f ? -448.0f : v);
            }
        }
    sw_ctx c = {ts_t_, P, H, GS, packed, round_sf, floor_, x, ref_q, ref_sf, q, sf};
    tk_for_variants(&c, sw_run, 4);
out:
    free(x), free(ref_q), free(q);
}

TS_TEST(tk_swiglu_sf_clamp_min) {
    /* 1e-4 is the default floor; 0.05 and 3 put whole rows (and some groups) under it */
    static const float floors[3] = {1e-4f, 0.05f, 3.0f};
    for (int f = 0; f < 3; f++)
        for (int packed = 0; packed < 2; packed++)
            for (int rs = 0; rs < 2; rs++)
                if (!packed || rs) sw_case(ts_t_, floors[f], packed, rs);
    /* a floor that is not positive and finite is refused before anything is written */
    uint16_t x[2 * 256];
    uint8_t q[128];
    float sf[1];
    int32_t di = 0;
    float dw = 0;
    int64_t cnt[3] = {0, 0, 0};
    memset(x, 0, sizeof x);
    memset(q, 0x11, sizeof q);
    ts_tensor tx = ts_tensor_2d(x, TS_BF16, 1, 256), tpe = ts_tensor_1d(&di, TS_I32, 1), tw = ts_tensor_1d(&dw, TS_F32, 1);
    ts_tensor tq = ts_tensor_2d(q, TS_E4M3, 1, 128), tsf = ts_tensor_2d(sf, TS_F32, 1, 1), tc = ts_tensor_1d(cnt, TS_I64, 3);
    const float bad[4] = {0.0f, -1.0f, NAN, INFINITY};
    for (int k = 0; k < 4; k++) {
        TS_CHECK_STATUS(ts_swiglu_forward_and_per_token_cast(&tx, &tpe, &tpe, &tw, &tq, &tsf, &tc, 128, 0.0f, false, false, false,
                                                             false, false, bad[k]),
                        TS_ERR_INVALID_ARGUMENT);
        TS_CHECK(strstr(ts_last_error(), "sf_clamp_min") != NULL);
    }
    size_t written = 0;
    for (size_t i = 0; i < sizeof q; i++) written += q[i] != 0x11;
    TS_CHECK_EQ_INT(written, 0);
}
