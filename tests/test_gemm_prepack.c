/* Pre-packed weights and the decode (small-M) path: packed == unpacked bit for bit for every
 * recipe (FP8 (1,128,128) and (1,1,128), FP8 x FP4 gran 32, BF16), K tails, odd N, M across
 * the small/large dispatch threshold, nn-layout weights, grouped (masked and contiguous),
 * generic vs AVX2 x threads {1, 2, 3, 7}; batch invariance across the threshold; bad input.
 * The unpacked call is the reference (its accuracy is tested in test_gemm_dense.c). */
#include "ts_prng.h"
#include "ts_test.h"

#include "tilestack/gemm.h"
#include "tilestack/numerics.h"

#include <stdlib.h>
#include <string.h>

enum rkind { R_FP8_BLOCK, R_FP8_UE8M0, R_FP8_FP4, R_FP8_FP4_F32, R_BF16 };

/* Random e4m3 codes without NaN (0x7F / 0xFF), e2m1 bytes, bf16 of moderate size. */
static void fill(void *p, ts_dtype dt, int64_t n, uint64_t seed) {
    ts_prng r = ts_prng_seed(seed);
    for (int64_t i = 0; i < n; i++) {
        uint32_t v = ts_prng_u32(&r);
        if (dt == TS_BF16)
            ((uint16_t *)p)[i] = ts_f32_to_bf16(ts_prng_uniform(&r) * 4.0f - 2.0f);
        else if (dt == TS_E4M3)
            ((uint8_t *)p)[i] = (v & 0x7F) == 0x7F ? (uint8_t)(v & 0xFE) : (uint8_t)v;
        else
            ((uint8_t *)p)[i] = (uint8_t)v;
    }
}

/* f32 scales (any value, or powers of two) or packed ue8m0 words. */
static void fill_sf(void *p, int64_t n, int mode, uint64_t seed) {
    ts_prng r = ts_prng_seed(seed);
    for (int64_t i = 0; i < n; i++) {
        if (mode == 0) ((float *)p)[i] = 0.25f + ts_prng_uniform(&r);
        else if (mode == 1) ((float *)p)[i] = (float)(1 << (ts_prng_u32(&r) % 5)) / 8.0f;
        else {
            uint32_t w = 0;
            for (int j = 0; j < 4; j++) w |= (uint32_t)(120 + ts_prng_u32(&r) % 14) << (8 * j);
            ((int32_t *)p)[i] = (int32_t)w;
        }
    }
}

/* One problem: A [M_max, K], B [G][N, K] (or [G][K, N] when kn), scales, recipe. */
typedef struct prob {
    enum rkind kind;
    int64_t m, n, k, groups;
    bool kn;
    ts_dtype adt, bdt;
    int64_t gk_a, gk_b, gmn_b;
    bool sf_u8;
    void *a, *b, *sfa, *sfb;
    ts_tensor ta, tb, tsfa, tsfb;
    int64_t ra[2], rb[2];
} prob;

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static prob prob_make(enum rkind kind, int64_t m, int64_t n, int64_t k, int64_t groups, bool kn,
                      uint64_t seed) {
    prob p;
    memset(&p, 0, sizeof p);
    p.kind = kind, p.m = m, p.n = n, p.k = k, p.groups = groups, p.kn = kn;
    p.adt = kind == R_BF16 ? TS_BF16 : TS_E4M3;
    p.bdt = kind == R_BF16 ? TS_BF16 : (kind == R_FP8_FP4 || kind == R_FP8_FP4_F32) ? TS_E2M1X2 : TS_E4M3;
    p.gk_a = 128;
    p.gk_b = p.bdt == TS_E2M1X2 ? 32 : 128;
    p.gmn_b = kind == R_FP8_BLOCK ? 128 : 1;
    p.sf_u8 = kind == R_FP8_UE8M0 || kind == R_FP8_FP4;
    const size_t es = ts_dtype_size(p.adt);
    p.a = calloc((size_t)(m * k) * es + 1, 1);
    fill(p.a, p.adt, m * k, seed);
    p.ta = ts_tensor_2d(p.a, p.adt, m, k);
    const int64_t bk = p.bdt == TS_E2M1X2 ? k / 2 : k;
    const size_t bes = ts_dtype_size(p.bdt);
    p.b = calloc((size_t)(groups * n * bk) * bes + 1, 1);
    fill(p.b, p.bdt, groups * n * bk, seed + 1);
    if (kn) { /* [G, K, N] storage (fp4: N/2 bytes per K row, MN-major packed) */
        const int64_t bn = p.bdt == TS_E2M1X2 ? n / 2 : n;
        p.tb = groups > 1 ? ts_tensor_3d(p.b, p.bdt, groups, k, bn) : ts_tensor_2d(p.b, p.bdt, k, bn);
    } else {
        p.tb = groups > 1 ? ts_tensor_3d(p.b, p.bdt, groups, n, bk) : ts_tensor_2d(p.b, p.bdt, n, bk);
    }
    if (kind == R_BF16) return p;
    int64_t sa1 = cdiv(k, p.gk_a), sb0 = cdiv(n, p.gmn_b), sb1 = cdiv(k, p.gk_b);
    if (p.sf_u8) sa1 = cdiv(sa1, 4), sb1 = cdiv(sb1, 4);
    p.sfa = calloc((size_t)(m * sa1) + 1, 4);
    p.sfb = calloc((size_t)(groups * sb0 * sb1) + 1, 4);
    const int mode = p.sf_u8 ? 2 : kind == R_FP8_FP4_F32 ? 1 : 0;
    fill_sf(p.sfa, m * sa1, mode, seed + 2);
    fill_sf(p.sfb, groups * sb0 * sb1, mode, seed + 3);
    const ts_dtype sdt = p.sf_u8 ? TS_I32 : TS_F32;
    p.tsfa = ts_tensor_2d(p.sfa, sdt, m, sa1);
    if (kn)
        p.tsfb = groups > 1 ? ts_tensor_3d(p.sfb, sdt, groups, sb1, sb0) : ts_tensor_2d(p.sfb, sdt, sb1, sb0);
    else
        p.tsfb = groups > 1 ? ts_tensor_3d(p.sfb, sdt, groups, sb0, sb1) : ts_tensor_2d(p.sfb, sdt, sb0, sb1);
    p.ra[0] = 1, p.ra[1] = p.gk_a, p.rb[0] = p.gmn_b, p.rb[1] = p.gk_b;
    return p;
}

static void prob_free(prob *p) { free(p->a), free(p->b), free(p->sfa), free(p->sfb); }

/* The first `rows` rows of A as a view. */
static void a_rows(const prob *p, int64_t rows, ts_tensor *a, ts_tensor *sfa) {
    *a = p->ta;
    a->shape[0] = rows;
    *sfa = p->tsfa;
    sfa->shape[0] = rows;
}

/* Dense D [rows, N] f32 with the unpacked (pw NULL) or packed weight. */
static ts_status dense(const prob *p, int64_t rows, const ts_packed_weight *pw, float *d) {
    ts_tensor a, sfa, td = ts_tensor_2d(d, TS_F32, rows, p->n);
    a_rows(p, rows, &a, &sfa);
    if (p->kind == R_BF16)
        return pw ? ts_bf16_gemm_nt_packed(&a, pw, &td, NULL, NULL)
                  : (p->kn ? ts_bf16_gemm_nn : ts_bf16_gemm_nt)(&a, &p->tb, &td, NULL, NULL);
    if (pw)
        return ts_fp8_fp4_gemm_nt_packed(&a, &sfa, pw, &td, NULL, NULL, p->ra, p->rb, NULL, false);
    return (p->kn ? ts_fp8_fp4_gemm_nn : ts_fp8_fp4_gemm_nt)(&a, &sfa, &p->tb, &p->tsfb, &td, NULL,
                                                              NULL, p->ra, p->rb, NULL, false);
}

static ts_status pack(const prob *p, ts_packed_weight **pw) {
    return ts_gemm_prepack_b(&p->tb, p->kind == R_BF16 ? NULL : &p->tsfb,
                             p->kind == R_BF16 ? NULL : p->rb, p->kn, pw);
}

/* MROWS: above the decode threshold (TS__GEMM_SMALL_M = 48), so packed weights also go
 * through the big-M path's micro-panel unpacking. */
enum { MROWS = 64 };
static const int64_t g_ms[] = {1, 2, 3, 4, 5, 7, 12, 13, 33, 48, 49, 64};

/* Codes the fast decoders treat apart: e4m3 NaN (0x7F, 0xFF) in B (nan_codes), and ue8m0
 * scale bytes 0 (2^-127, subnormal) and, with nan_scales, 255 (NaN) in sfb. Not both NaN kinds
 * at once: where two NaNs of different signs meet in one fma, which one propagates is the
 * hardware's operand rule, not part of the canonical order. */
static void add_specials(prob *p, bool nan_codes, bool nan_scales) {
    uint8_t *b = (uint8_t *)p->b;
    const int64_t nb = p->groups * p->n * p->k; /* e4m3 only */
    if (nan_codes)
        for (int64_t i = 0; i < nb; i += 37) b[i] = (i / 37) % 2 ? 0xFF : 0x7F;
    if (p->sf_u8) {
        uint8_t *s = (uint8_t *)p->sfb;
        const int64_t ns = 4 * p->tsfb.shape[0] * p->tsfb.shape[1];
        for (int64_t i = 3; i < ns; i += 29) s[i] = nan_scales && (i / 29) % 2 ? 255 : 0;
    }
}

/* Every M, packed and unpacked, under every ISA x thread count, equals the unpacked
 * generic single-thread result. */
static void check_dense_x(ts_test_ctx *ts_t_, enum rkind kind, int64_t n, int64_t k, bool kn,
                          int specials) {
    prob p = prob_make(kind, MROWS, n, k, 1, kn, 1000 + (uint64_t)kind * 10 + (uint64_t)k);
    if (specials) add_specials(&p, specials == 1, specials == 2);
    ts_packed_weight *pw = NULL;
    TS_CHECK_STATUS(pack(&p, &pw), TS_OK);
    TS_CHECK(ts_packed_weight_nbytes(pw) > 0);
    const ts_isa isa0 = ts_get_isa();
    const int th0 = ts_get_num_threads();
    float *ref = (float *)malloc((size_t)(MROWS * n) * 4), *d = (float *)malloc((size_t)(MROWS * n) * 4);
    for (size_t mi = 0; mi < sizeof g_ms / sizeof g_ms[0]; mi++) {
        const int64_t m = g_ms[mi];
        TS_CHECK_STATUS(ts_set_isa(TS_ISA_GENERIC), TS_OK);
        TS_CHECK_STATUS(ts_set_num_threads(1), TS_OK);
        TS_CHECK_STATUS(dense(&p, m, NULL, ref), TS_OK);
        int isas[TS_ISA_COUNT_];
    const int nisa = ts_test_isas(isas);
        const int ths[4] = {1, 2, 3, 7};
        for (int i = 0; i < nisa; i++) {
            if (ts_set_isa((ts_isa)isas[i]) != TS_OK) continue;
            for (int t = 0; t < 4; t++) {
                if (m > 16 && t > 1) continue; /* threads are covered at the smaller M and in test_gemm_dense.c */
                TS_CHECK_STATUS(ts_set_num_threads(ths[t]), TS_OK);
                for (int packed = 0; packed < 2; packed++) {
                    memset(d, 0xCD, (size_t)(m * n) * 4);
                    TS_CHECK_STATUS(dense(&p, m, packed ? pw : NULL, d), TS_OK);
                    TS_CHECK_MSG(memcmp(d, ref, (size_t)(m * n) * 4) == 0,
                                 "kind %d n %lld k %lld kn %d m %lld isa %d threads %d packed %d",
                                 (int)kind, (long long)n, (long long)k, (int)kn, (long long)m, i,
                                 ths[t], packed);
                }
            }
        }
    }
    ts_set_isa(isa0);
    ts_set_num_threads(th0);
    ts_packed_weight_destroy(pw);
    free(ref), free(d);
    prob_free(&p);
}

static void check_dense(ts_test_ctx *ts_t_, enum rkind kind, int64_t n, int64_t k, bool kn) {
    check_dense_x(ts_t_, kind, n, k, kn, 0);
}

/* NaN weight codes and extreme scale bytes, in packed weights (the AVX2 decoder's NaN and
 * scale fix-ups) and in plain full 32-row panels (bytes transposed, then NaN-scanned). */
TS_TEST(gemm_prepack_fp8_special_codes_bitwise) {
    check_dense_x(ts_t_, R_FP8_UE8M0, 64, 300, false, 1); /* NaN codes, scale bytes 0 */
    check_dense_x(ts_t_, R_FP8_UE8M0, 64, 300, false, 2); /* scale bytes 0 and 255 */
    check_dense_x(ts_t_, R_FP8_BLOCK, 96, 260, false, 1);
}

TS_TEST(gemm_prepack_fp8_block_bitwise) {
    check_dense(ts_t_, R_FP8_BLOCK, 300, 300, false);
    check_dense(ts_t_, R_FP8_BLOCK, 33, 129, true); /* nn-layout weight, sfb transposed */
}

TS_TEST(gemm_prepack_fp8_ue8m0_bitwise) {
    check_dense(ts_t_, R_FP8_UE8M0, 45, 1000, false);
    check_dense(ts_t_, R_FP8_UE8M0, 7, 1, false);
}

TS_TEST(gemm_prepack_fp8_fp4_bitwise) {
    check_dense(ts_t_, R_FP8_FP4, 77, 400, false);
    check_dense(ts_t_, R_FP8_FP4_F32, 64, 226, false);
    check_dense(ts_t_, R_FP8_FP4, 66, 96, true); /* MN-major packed fp4 weight (nn layout) */
}

TS_TEST(gemm_prepack_bf16_bitwise) {
    check_dense(ts_t_, R_BF16, 70, 130, false);
    check_dense(ts_t_, R_BF16, 31, 600, true);
}

/* Row m of D is the same whether M is below or above the decode threshold. */
TS_TEST(gemm_prepack_batch_invariance_across_threshold) {
    const enum rkind kinds[3] = {R_FP8_BLOCK, R_FP8_FP4, R_BF16};
    for (int q = 0; q < 3; q++) {
        prob p = prob_make(kinds[q], MROWS, 50, 260, 1, false, 77 + (uint64_t)q);
        float big[MROWS * 50], small[MROWS * 50];
        TS_CHECK_STATUS(dense(&p, MROWS, NULL, big), TS_OK);
        for (int64_t m = 1; m <= 49; m += 8) {
            TS_CHECK_STATUS(dense(&p, m, NULL, small), TS_OK);
            TS_CHECK(memcmp(small, big, (size_t)(m * 50) * 4) == 0);
        }
        prob_free(&p);
    }
}

/* Grouped: masked (small M per group: decode path) and contiguous (psum), packed vs not. */
TS_TEST(gemm_prepack_grouped_bitwise) {
    const int64_t G = 3, N = 40, K = 260, MMAX = 20;
    for (int bf = 0; bf < 2; bf++) {
        const enum rkind kind = bf ? R_BF16 : R_FP8_UE8M0;
        prob p = prob_make(kind, G * MMAX, N, K, G, false, 500 + (uint64_t)bf);
        ts_packed_weight *pw = NULL;
        TS_CHECK_STATUS(pack(&p, &pw), TS_OK);
        /* masked: a [G, MMAX, K] */
        ts_tensor a3 = ts_tensor_3d(p.a, p.adt, G, MMAX, K), sfa3;
        if (!bf) sfa3 = ts_tensor_3d(p.sfa, TS_I32, G, MMAX, p.tsfa.shape[1]);
        int32_t mm[3] = {5, 0, 17};
        ts_tensor tmm = ts_tensor_1d(mm, TS_I32, G);
        float *d0 = (float *)malloc((size_t)(G * MMAX * N) * 4), *d1 = (float *)malloc((size_t)(G * MMAX * N) * 4);
        memset(d0, 0x5A, (size_t)(G * MMAX * N) * 4);
        memset(d1, 0x5A, (size_t)(G * MMAX * N) * 4);
        ts_tensor t0 = ts_tensor_3d(d0, TS_F32, G, MMAX, N), t1 = ts_tensor_3d(d1, TS_F32, G, MMAX, N);
        for (int th = 1; th <= 3; th += 2) {
            TS_CHECK_STATUS(ts_set_num_threads(th), TS_OK);
            if (bf) {
                TS_CHECK_STATUS(ts_m_grouped_bf16_gemm_nt_masked(&a3, &p.tb, &t0, &tmm, 8, NULL), TS_OK);
                TS_CHECK_STATUS(ts_m_grouped_bf16_gemm_masked_packed(&a3, pw, &t1, &tmm, 8, NULL), TS_OK);
            } else {
                TS_CHECK_STATUS(ts_m_grouped_fp8_fp4_gemm_nt_masked(&a3, &sfa3, &p.tb, &p.tsfb, &t0, &tmm, 8,
                                                                   NULL, NULL, NULL, NULL, false),
                                TS_OK);
                TS_CHECK_STATUS(ts_m_grouped_fp8_fp4_gemm_masked_packed(&a3, &sfa3, pw, &t1, &tmm, 8, NULL,
                                                                       NULL, NULL, NULL, false),
                                TS_OK);
            }
            TS_CHECK(memcmp(d0, d1, (size_t)(G * MMAX * N) * 4) == 0);
        }
        ts_set_num_threads(2);
        /* contiguous psum over A [G * MMAX, K]: groups of 3, 0 and 40 rows (alignment 4) */
        TS_CHECK_STATUS(ts_set_mk_alignment_for_contiguous_layout(4), TS_OK);
        int32_t ends[3] = {3, 3, 44};
        ts_tensor lay = ts_tensor_1d(ends, TS_I32, G);
        ts_tensor a2 = p.ta, sfa2 = p.tsfa;
        ts_tensor c0 = ts_tensor_2d(d0, TS_F32, G * MMAX, N), c1 = ts_tensor_2d(d1, TS_F32, G * MMAX, N);
        if (bf) {
            TS_CHECK_STATUS(ts_m_grouped_bf16_gemm_nt_contiguous(&a2, &p.tb, &c0, &lay, NULL, true, true, 0), TS_OK);
            TS_CHECK_STATUS(ts_m_grouped_bf16_gemm_contiguous_packed(&a2, pw, &c1, &lay, NULL, true, true), TS_OK);
        } else {
            TS_CHECK_STATUS(ts_m_grouped_fp8_fp4_gemm_nt_contiguous(&a2, &sfa2, &p.tb, &p.tsfb, &c0, &lay, NULL,
                                                                   NULL, NULL, NULL, false, true, true, 0),
                            TS_OK);
            TS_CHECK_STATUS(ts_m_grouped_fp8_fp4_gemm_contiguous_packed(&a2, &sfa2, pw, &c1, &lay, NULL, NULL,
                                                                       NULL, NULL, false, true, true),
                            TS_OK);
        }
        TS_CHECK(memcmp(d0, d1, (size_t)(G * MMAX * N) * 4) == 0);
        TS_CHECK_STATUS(ts_set_mk_alignment_for_contiguous_layout(128), TS_OK);
        free(d0), free(d1);
        ts_packed_weight_destroy(pw);
        prob_free(&p);
    }
}

/* An FP4 weight whose f32 scales are powers of two packs to the same products whether its
 * scales are given as f32 or as the same values in ue8m0 bytes (TS_UE8M0X4): the model packs
 * its routed experts the second way (model_weights.c pack_experts, 1.125x the codes instead of
 * 1.25x) and must decode the same bits. Masked grouped, recipe (1, 1, 32) with f32 activation
 * scales as the MoE calls it, M on both sides of the decode threshold, exponents 0 (2^-127)
 * (2^-127, the decoders' subnormal case) and 200 included. */
TS_TEST(gemm_prepack_fp4_ue8m0_scales_same_bits_as_f32) {
    const int64_t G = 3, N = 40, K = 256, MMAX = MROWS, nkb = K / 32, words = nkb / 4;
    prob p = prob_make(R_FP8_FP4_F32, G * MMAX, N, K, G, false, 901);
    /* A scales per 32 (the recipe's), powers of two */
    float *sfa = (float *)malloc((size_t)(G * MMAX * nkb) * 4);
    fill_sf(sfa, G * MMAX * nkb, 1, 902);
    float *fb = (float *)malloc((size_t)(G * N * nkb) * 4);
    int32_t *ub = (int32_t *)calloc((size_t)(G * N * words), 4);
    ts_prng r = ts_prng_seed(903);
    for (int64_t i = 0; i < G * N * nkb; i++) {
        const uint32_t e = i == 5 ? 0 : i == 6 ? 200 : 112 + ts_prng_u32(&r) % 30;
        fb[i] = ts_ue8m0_to_f32((uint8_t)e);
        ((uint8_t *)ub)[(i / nkb) * words * 4 + i % nkb] = (uint8_t)e;
    }
    ts_tensor sf32 = ts_tensor_3d(fb, TS_F32, G, N, nkb), su8 = ts_tensor_3d(ub, TS_UE8M0X4, G, N, words);
    const int64_t rb[2] = {1, 32}, rec[3] = {1, 1, 32};
    ts_packed_weight *pf = NULL, *pu = NULL;
    TS_CHECK_STATUS(ts_gemm_prepack_b(&p.tb, &sf32, rb, false, &pf), TS_OK);
    TS_CHECK_STATUS(ts_gemm_prepack_b(&p.tb, &su8, rb, false, &pu), TS_OK);
    /* 32 x 32 blocks: 512 code bytes + 32 scales, padded to 64 bytes: 576 vs 640 */
    TS_CHECK_EQ_INT((int64_t)(ts_packed_weight_nbytes(pu) * 640), (int64_t)(ts_packed_weight_nbytes(pf) * 576));
    ts_tensor a3 = ts_tensor_3d(p.a, TS_E4M3, G, MMAX, K), sa3 = ts_tensor_3d(sfa, TS_F32, G, MMAX, nkb);
    const size_t nd = (size_t)(G * MMAX * N);
    float *d0 = (float *)malloc(nd * 4), *d1 = (float *)malloc(nd * 4);
    static const int32_t ms[][3] = {{1, 0, 2}, {5, 13, 1}, {MROWS, 49, 3}};
    for (size_t q = 0; q < sizeof ms / sizeof *ms; q++) {
        int32_t mm[3] = {ms[q][0], ms[q][1], ms[q][2]};
        ts_tensor tmm = ts_tensor_1d(mm, TS_I32, G);
        ts_tensor t0 = ts_tensor_3d(d0, TS_F32, G, MMAX, N), t1 = ts_tensor_3d(d1, TS_F32, G, MMAX, N);
        memset(d0, 0x5A, nd * 4);
        memset(d1, 0x5A, nd * 4);
        TS_CHECK_STATUS(ts_m_grouped_fp8_fp4_gemm_masked_packed(&a3, &sa3, pf, &t0, &tmm, MMAX, rec,
                                                               NULL, NULL, NULL, false), TS_OK);
        TS_CHECK_STATUS(ts_m_grouped_fp8_fp4_gemm_masked_packed(&a3, &sa3, pu, &t1, &tmm, MMAX, rec,
                                                               NULL, NULL, NULL, false), TS_OK);
        TS_CHECK_MSG(memcmp(d0, d1, nd * 4) == 0, "masked m = {%d, %d, %d}: f32 and ue8m0 scales differ",
                     mm[0], mm[1], mm[2]);
        /* and not trivially: the products are not all zero */
        int64_t nz = 0;
        for (int64_t g = 0; g < G; g++)
            for (int64_t i = 0; i < mm[g] * N; i++) nz += d0[g * MMAX * N + i] != 0.0f;
        TS_CHECK(nz > 0);
    }
    free(d0), free(d1), free(sfa), free(fb), free(ub);
    ts_packed_weight_destroy(pf);
    ts_packed_weight_destroy(pu);
    prob_free(&p);
}

TS_TEST(gemm_prepack_bad_input) {
    prob p = prob_make(R_FP8_UE8M0, 4, 40, 256, 1, false, 9);
    prob q = prob_make(R_BF16, 4, 40, 256, 1, false, 10);
    ts_packed_weight *pw = NULL, *pb = NULL;
    /* prepack */
    TS_CHECK_STATUS(ts_gemm_prepack_b(&p.tb, &p.tsfb, p.rb, false, NULL), TS_ERR_NULL_POINTER);
    TS_CHECK_STATUS(ts_gemm_prepack_b(NULL, &p.tsfb, p.rb, false, &pw), TS_ERR_NULL_POINTER);
    TS_CHECK_STATUS(ts_gemm_prepack_b(&p.tb, NULL, p.rb, false, &pw), TS_ERR_NULL_POINTER);
    ts_tensor bad = p.tb;
    bad.dtype = TS_F32;
    TS_CHECK_STATUS(ts_gemm_prepack_b(&bad, &p.tsfb, p.rb, false, &pw), TS_ERR_DTYPE);
    TS_CHECK_STATUS(ts_gemm_prepack_b(&q.tb, &p.tsfb, NULL, false, &pw), TS_ERR_INVALID_ARGUMENT);
    int64_t rb_bad[2] = {1, 64};
    TS_CHECK_STATUS(ts_gemm_prepack_b(&p.tb, &p.tsfb, rb_bad, false, &pw), TS_ERR_INVALID_ARGUMENT);
    ts_tensor sbad = p.tsfb;
    sbad.shape[0] = 39;
    TS_CHECK_STATUS(ts_gemm_prepack_b(&p.tb, &sbad, p.rb, false, &pw), TS_ERR_SHAPE);
    TS_CHECK(pw == NULL);
    TS_CHECK_STATUS(pack(&p, &pw), TS_OK);
    TS_CHECK_STATUS(pack(&q, &pb), TS_OK);
    /* use */
    float d[4 * 40], canary[4 * 40];
    memset(d, 0x77, sizeof d);
    memcpy(canary, d, sizeof d);
    ts_tensor td = ts_tensor_2d(d, TS_F32, 4, 40);
    TS_CHECK_STATUS(ts_fp8_fp4_gemm_nt_packed(&p.ta, &p.tsfa, NULL, &td, NULL, NULL, p.ra, p.rb, NULL, false),
                    TS_ERR_NULL_POINTER);
    TS_CHECK_STATUS(ts_fp8_fp4_gemm_nt_packed(&p.ta, &p.tsfa, pb, &td, NULL, NULL, p.ra, p.rb, NULL, false),
                    TS_ERR_DTYPE);
    TS_CHECK_STATUS(ts_bf16_gemm_nt_packed(&q.ta, pw, &td, NULL, NULL), TS_ERR_DTYPE);
    /* another recipe than the packing one: B (1, 32) vs (1, 128) */
    int64_t rb32[2] = {1, 32};
    TS_CHECK_STATUS(ts_fp8_fp4_gemm_nt_packed(&p.ta, &p.tsfa, pw, &td, NULL, NULL, p.ra, rb32, NULL, false),
                    TS_ERR_INVALID_ARGUMENT);
    int64_t r3[3] = {1, 128, 128};
    TS_CHECK_STATUS(ts_fp8_fp4_gemm_nt_packed(&p.ta, &p.tsfa, pw, &td, NULL, r3, NULL, NULL, NULL, false),
                    TS_ERR_INVALID_ARGUMENT);
    /* mismatched K, N */
    ts_tensor a_short = p.ta;
    a_short.shape[1] = 128;
    ts_tensor sfa_short = p.tsfa;
    TS_CHECK_STATUS(ts_fp8_fp4_gemm_nt_packed(&a_short, &sfa_short, pw, &td, NULL, NULL, p.ra, p.rb, NULL, false),
                    TS_ERR_SHAPE);
    ts_tensor td_bad = ts_tensor_2d(d, TS_F32, 4, 39);
    TS_CHECK_STATUS(ts_fp8_fp4_gemm_nt_packed(&p.ta, &p.tsfa, pw, &td_bad, NULL, NULL, p.ra, p.rb, NULL, false),
                    TS_ERR_SHAPE);
    /* a dense packed weight in a grouped call */
    ts_tensor a3 = ts_tensor_3d(p.a, TS_E4M3, 1, 4, 256), sfa3 = ts_tensor_3d(p.sfa, TS_I32, 1, 4, p.tsfa.shape[1]);
    ts_tensor d3 = ts_tensor_3d(d, TS_F32, 1, 4, 40);
    int32_t mm[1] = {4};
    ts_tensor tmm = ts_tensor_1d(mm, TS_I32, 1);
    TS_CHECK_STATUS(ts_m_grouped_fp8_fp4_gemm_masked_packed(&a3, &sfa3, pw, &d3, &tmm, 4, NULL, p.ra, p.rb,
                                                           NULL, false),
                    TS_ERR_SHAPE);
    TS_CHECK(memcmp(d, canary, sizeof d) == 0);
    TS_CHECK_STATUS(ts_fp8_fp4_gemm_nt_packed(&p.ta, &p.tsfa, pw, &td, NULL, NULL, p.ra, p.rb, NULL, false),
                    TS_OK);
    TS_CHECK(ts_packed_weight_nbytes(NULL) == 0);
    ts_packed_weight_destroy(pw);
    ts_packed_weight_destroy(pb);
    ts_packed_weight_destroy(NULL);
    prob_free(&p), prob_free(&q);
}
