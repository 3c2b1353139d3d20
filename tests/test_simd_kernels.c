/* The SIMD kernel tables against the generic ones, entry by entry: the quantiser kernels
 * (quant_kernels.h) for every source / output kind and the EP row kernels (ep_kernels.h,
 * ep_ll_kernels.h, built with or without MPI), on every SIMD path this machine runs, for every
 * run length 0..40 (each tail of the 8- to 64-value steps) and some longer ones, on inputs that
 * mix NaN, inf, subnormal, zero, overflowing and ordinary values. Bits must match exactly,
 * and no kernel may write past its run. */
#include "ts_prng.h"
#include "ts_test.h"

#include "ep/ep_kernels.h"
#include "ep/ep_ll_kernels.h"
#include "numerics/quant_kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NMAX 1024
static const int64_t k_long[] = {63, 64, 65, 96, 127, 128, 129, 200, 256, 1000};

/* run length number i: 0..40, then k_long */
static int64_t run_len(int i) { return i <= 40 ? i : k_long[i - 41]; }
#define N_RUNS (41 + (int)(sizeof k_long / sizeof k_long[0]))

static uint32_t special_f32(ts_prng *p) {
    static const uint32_t sp[] = {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00001u,
                                  0x7F800001u, 0x00000001u, 0x807FFFFFu, 0x00800000u, 0x43E00000u, 0x43E80000u,
                                  0x47800000u, 0x3C800000u, 0x3C7FFFFFu, 0x3B000000u};
    return sp[ts_prng_u32(p) % (sizeof sp / sizeof sp[0])];
}

/* One value of a source kind as raw bits: a special now and then, random bits, or an ordinary
 * value whose magnitude spans the e4m3 / e2m1 ranges (scaled by 2^-12 .. 2^8). */
static uint32_t src_bits(ts_prng *p, ts__qsrc k) {
    const uint32_t r = ts_prng_u32(p);
    uint32_t f;
    if (r % 8 == 0) f = special_f32(p);
    else if (r % 8 == 1) f = ts_prng_u32(p);
    else {
        float v = (ts_prng_uniform(p) * 2.0f - 1.0f) * (float)(1u << ((r >> 8) % 21)) * 0x1p-12f;
        memcpy(&f, &v, 4);
    }
    if (k == TS__QSRC_F32) return f;
    float v;
    memcpy(&v, &f, 4);
    if (r % 8 == 1) return ts_prng_u32(p) & 0xFFFF; /* every 16-bit pattern */
    return k == TS__QSRC_BF16 ? ts_f32_to_bf16(v) : ts_f32_to_f16(v);
}

static void fill_src(ts_prng *p, ts__qsrc k, void *x, int64_t n) {
    for (int64_t j = 0; j < n; j++) {
        const uint32_t b = src_bits(p, k);
        if (k == TS__QSRC_F32) memcpy((char *)x + 4 * j, &b, 4);
        else ((uint16_t *)x)[j] = (uint16_t)b;
    }
}

/* A multiplier / scale: mostly ordinary, sometimes 0, negative, subnormal, huge, inf or NaN. */
static float any_scale(ts_prng *p) {
    const uint32_t u = ts_prng_u32(p);
    uint32_t b;
    switch (u % 12) {
    case 0: b = 0; break;
    case 1: b = 0x7F800000u; break;
    case 2: b = 0x7FC00001u | (u & 0x80000000u); break;
    case 3: b = (u >> 8) & 0x7FFFFFu; break;
    case 4: b = 0x7C000000u | ((u >> 8) & 0x7FFFFFu); break;
    case 5: b = 0xBF000000u | ((u >> 8) & 0x7FFFFFu); break;
    default: b = ((110u + (u >> 4) % 30u) << 23) | ((u >> 8) & 0x7FFFFFu); break;
    }
    float f;
    memcpy(&f, &b, 4);
    return f;
}

typedef struct simd_path { const char *name; const ts__quant_kernels *q; } simd_path;

/* The SIMD quantiser tables this build has and this CPU runs. */
static int simd_paths(simd_path out[]) {
    int isas[TS_ISA_COUNT_], n = 0;
    const int ni = ts_test_isas(isas);
    for (int i = 0; i < ni; i++) {
#if defined(TS_HAVE_AVX2_KERNELS)
        if (isas[i] == TS_ISA_AVX2) out[n++] = (simd_path){"avx2", ts__quant_kernels_avx2};
#endif
#if defined(TS_HAVE_AVX512_KERNELS)
        if (isas[i] == TS_ISA_AVX512) out[n++] = (simd_path){"avx512", ts__quant_kernels_avx512};
#endif
    }
    return n;
}

static const char *k_src_name[] = {"bf16", "f16", "f32"};

TS_TEST(simd_quant_kernels_every_tail) {
    simd_path paths[4];
    const int np = simd_paths(paths);
    if (np == 0) {
        printf("    no SIMD quantiser table runs here\n");
        return;
    }
    ts_prng p = ts_prng_seed(1717);
    float *x = malloc(NMAX * 4), *inv = malloc(NMAX * 4), *sf0 = malloc(NMAX * 4), *sf1 = malloc(NMAX * 4);
    uint8_t *q0 = malloc(NMAX * 4 + 1), *q1 = malloc(NMAX * 4 + 1), *e0 = malloc(NMAX), *e1 = malloc(NMAX);
    uint32_t *a0 = malloc(NMAX * 4), *a1 = malloc(NMAX * 4), *m0 = malloc(NMAX * 4), *m1 = malloc(NMAX * 4);
    for (int pi = 0; pi < np && !TS_FAILED(); pi++) {
        for (int k = 0; k < TS__QSRC_COUNT && !TS_FAILED(); k++) {
            const ts__quant_kernels *g = &ts__quant_kernels_generic[k], *s = &paths[pi].q[k];
            for (int ri = 0; ri < N_RUNS && !TS_FAILED(); ri++) {
                const int64_t n = run_len(ri), n2 = n & ~(int64_t)1;
                char what[96];
                snprintf(what, sizeof what, "%s %s n=%lld", paths[pi].name, k_src_name[k], (long long)n);
                for (int rep = 0; rep < 4; rep++) {
                    fill_src(&p, (ts__qsrc)k, x, n);
                    TS_CHECK_MSG(g->absmax(x, n) == s->absmax(x, n), "%s: absmax", what);
                    TS_CHECK_MSG(g->absmax_nonan(x, n) == s->absmax_nonan(x, n), "%s: absmax_nonan", what);
                    for (int64_t j = 0; j < n; j++) a0[j] = a1[j] = ts_prng_u32(&p) >> (ts_prng_u32(&p) % 32);
                    g->absmax_cols(x, n, a0), s->absmax_cols(x, n, a1);
                    TS_CHECK_MSG(memcmp(a0, a1, (size_t)n * 4) == 0, "%s: absmax_cols", what);
                    /* the run encoders take the multiplier of the run's own scale, as every
                     * caller passes (the AVX2 kernels rely on it: no product past ~464); NaN and
                     * inf in x give NaN / zero multipliers that way */
                    const float iv = 1.0f / ts__fp8_scale(g->absmax(x, n), rep & 1);
                    memset(q0, 0xA5, (size_t)n + 1), memset(q1, 0xA5, (size_t)n + 1);
                    g->enc_e4m3(x, n, iv, q0), s->enc_e4m3(x, n, iv, q1);
                    TS_CHECK_MSG(memcmp(q0, q1, (size_t)n + 1) == 0, "%s: enc_e4m3 inv %a", what, (double)iv);
                    for (int64_t j = 0; j < n; j++) inv[j] = any_scale(&p);
                    g->enc_e4m3_cols(x, n, inv, q0), s->enc_e4m3_cols(x, n, inv, q1);
                    TS_CHECK_MSG(memcmp(q0, q1, (size_t)n + 1) == 0, "%s: enc_e4m3_cols", what);
                    for (int dg = 0; dg < 2; dg++) {
                        const float iv4 = rep == 0 ? 6.0f / ts__f32_from_bits(g->absmax(x, n) | 1u) : any_scale(&p);
                        memset(q0, 0xA5, (size_t)n + 1), memset(q1, 0xA5, (size_t)n + 1);
                        g->enc_e2m1(x, n2, iv4, dg, q0), s->enc_e2m1(x, n2, iv4, dg, q1);
                        TS_CHECK_MSG(memcmp(q0, q1, (size_t)n2 / 2 + 1) == 0, "%s: enc_e2m1 dg %d", what, dg);
                    }
                    static const int64_t grans[] = {32, 128, 16};
                    for (int gi = 0; gi < 3; gi++) {
                        const int64_t gk = grans[gi], nb = (n + gk - 1) / gk, nb2 = (n2 + gk - 1) / gk;
                        for (int ue = 0; ue < 2; ue++) {
                            memset(q0, 0xA5, (size_t)n + 1), memset(q1, 0xA5, (size_t)n + 1);
                            g->fp8_row(x, n, gk, ue, q0, sf0), s->fp8_row(x, n, gk, ue, q1, sf1);
                            TS_CHECK_MSG(memcmp(q0, q1, (size_t)n + 1) == 0 && memcmp(sf0, sf1, (size_t)nb * 4) == 0,
                                         "%s: fp8_row gran %lld ue8m0 %d", what, (long long)gk, ue);
                            for (int rne = 0; rne < 2; rne++) {
                                memset(q0, 0xA5, (size_t)n + 1), memset(q1, 0xA5, (size_t)n + 1);
                                g->fp4_row(x, n2, gk, ue, rne, q0, sf0, e0);
                                s->fp4_row(x, n2, gk, ue, rne, q1, sf1, e1);
                                TS_CHECK_MSG(memcmp(q0, q1, (size_t)n2 / 2 + 1) == 0 &&
                                                 memcmp(sf0, sf1, (size_t)nb2 * 4) == 0 && memcmp(e0, e1, (size_t)nb2) == 0,
                                             "%s: fp4_row gran %lld ue8m0 %d rne %d", what, (long long)gk, ue, rne);
                            }
                        }
                        /* per-block tiles: the folded |x| max must agree; the private bound is
                         * the table's own, so each table encodes with its own stats */
                        for (int64_t b = 0; b < nb; b++) a0[b] = a1[b] = 0, m0[b] = m1[b] = UINT32_MAX;
                        g->blk_stats(x, n, gk, a0, m0), s->blk_stats(x, n, gk, a1, m1);
                        TS_CHECK_MSG(memcmp(a0, a1, (size_t)nb * 4) == 0, "%s: blk_stats gran %lld", what, (long long)gk);
                        for (int64_t b = 0; b < nb; b++) inv[b] = 1.0f / ts__fp8_scale(a0[b], rep & 1);
                        memset(q0, 0xA5, (size_t)n + 1), memset(q1, 0xA5, (size_t)n + 1);
                        g->blk_enc(x, n, gk, a0, m0, inv, q0), s->blk_enc(x, n, gk, a1, m1, inv, q1);
                        TS_CHECK_MSG(memcmp(q0, q1, (size_t)n + 1) == 0, "%s: blk_enc gran %lld", what, (long long)gk);
                        /* cast-back to this kind: every code, scales of every class */
                        for (int64_t j = 0; j < n; j++) q0[j] = (uint8_t)ts_prng_u32(&p);
                        for (int64_t b = 0; b < nb; b++) sf0[b] = rep == 0 ? 1.0f + 0.25f * (float)(b % 4) : any_scale(&p);
                        const size_t osz = k == TS__QSRC_F32 ? 4 : 2;
                        uint8_t *o0 = (uint8_t *)a0, *o1 = (uint8_t *)a1;
                        memset(o0, 0xA5, (size_t)n * osz + 4), memset(o1, 0xA5, (size_t)n * osz + 4);
                        g->dec_e4m3(q0, n, gk, sf0, o0), s->dec_e4m3(q0, n, gk, sf0, o1);
                        TS_CHECK_MSG(memcmp(o0, o1, (size_t)n * osz + 4) == 0, "%s: dec_e4m3 gran %lld", what, (long long)gk);
                        memset(o0, 0xA5, (size_t)n * osz + 4), memset(o1, 0xA5, (size_t)n * osz + 4);
                        g->dec_e2m1(q0, n2, gk, sf0, o0), s->dec_e2m1(q0, n2, gk, sf0, o1);
                        TS_CHECK_MSG(memcmp(o0, o1, (size_t)n2 * osz + 4) == 0, "%s: dec_e2m1 gran %lld", what, (long long)gk);
                    }
                }
            }
        }
    }
    free(x), free(inv), free(sf0), free(sf1), free(q0), free(q1), free(e0), free(e1);
    free(a0), free(a1), free(m0), free(m1);
}

/* ---- EP row kernels ---- */

/* f32 rows equal bit for bit, except that lanes where both are NaN match whatever their
 * payloads: an FMA that meets two NaN operands returns one of them by the instruction's operand
 * order, which the compiler picks (fmaf and _mm256_fmadd_ps may differ; likewise an add of two
 * NaNs, whose operands a compiler may swap); every other result,
 * and a NaN's NaN-ness, is the contract's. */
static bool same_f32_rows(const float *a, const float *b, int64_t n) {
    for (int64_t j = 0; j < n; j++) {
        uint32_t u, v;
        memcpy(&u, a + j, 4), memcpy(&v, b + j, 4);
        if (u != v && !((u & 0x7FFFFFFFu) > 0x7F800000u && (v & 0x7FFFFFFFu) > 0x7F800000u)) return false;
    }
    return true;
}

typedef struct ep_path {
    const char *name;
    ts__ep_acc_bf16_fn acc;
    ts__ep_store_bf16_fn store;
    ts__ep_ll_fma_bf16_fn fma_bf16;
    ts__ep_ll_fma_f32_fn fma_f32;
    ts__ep_ll_cast_fn cast;
} ep_path;

TS_TEST(simd_ep_row_kernels_every_tail) {
    int isas[TS_ISA_COUNT_];
    const int ni = ts_test_isas(isas);
    ep_path paths[4];
    int np = 0;
    for (int i = 0; i < ni; i++) {
#if defined(TS_HAVE_AVX2_KERNELS)
        if (isas[i] == TS_ISA_AVX2)
            paths[np++] = (ep_path){"avx2", ts__ep_acc_bf16__avx2, ts__ep_store_bf16__avx2, ts__ep_ll_fma_bf16__avx2,
                                    ts__ep_ll_fma_f32__avx2, ts__ep_ll_cast__avx2};
#endif
#if defined(TS_HAVE_AVX512_KERNELS)
        if (isas[i] == TS_ISA_AVX512)
            paths[np++] = (ep_path){"avx512", ts__ep_acc_bf16__avx512, ts__ep_store_bf16__avx512,
                                    ts__ep_ll_fma_bf16__avx512, ts__ep_ll_fma_f32__avx512, ts__ep_ll_cast__avx512};
#endif
    }
    if (np == 0) {
        printf("    no SIMD EP row kernels run here\n");
        return;
    }
    ts_prng p = ts_prng_seed(2323);
    uint16_t *y = malloc(NMAX * 2), *o0 = malloc(NMAX * 2 + 2), *o1 = malloc(NMAX * 2 + 2);
    float *acc0 = malloc(NMAX * 4 + 4), *acc1 = malloc(NMAX * 4 + 4), *yf = malloc(NMAX * 4);
    uint8_t *q0 = malloc(NMAX + 1), *q1 = malloc(NMAX + 1);
    float s0[8], s1[8];
    for (int pi = 0; pi < np && !TS_FAILED(); pi++) {
        const ep_path *e = &paths[pi];
        for (int ri = 0; ri < N_RUNS && !TS_FAILED(); ri++) {
            const int64_t n = run_len(ri);
            for (int rep = 0; rep < 4; rep++) {
                fill_src(&p, TS__QSRC_BF16, y, n);
                fill_src(&p, TS__QSRC_F32, yf, n);
                fill_src(&p, TS__QSRC_F32, acc0, n + 1);
                memcpy(acc1, acc0, (size_t)(n + 1) * 4);
                const int first = rep & 1;
                ts__ep_acc_bf16__generic(acc0, y, n, first), e->acc(acc1, y, n, first);
                TS_CHECK_MSG(same_f32_rows(acc0, acc1, n + 1), "%s n=%lld: acc_bf16 first %d", e->name,
                             (long long)n, first);
                memset(o0, 0xA5, (size_t)n * 2 + 2), memset(o1, 0xA5, (size_t)n * 2 + 2);
                ts__ep_store_bf16__generic(o0, acc0, n), e->store(o1, acc0, n);
                TS_CHECK_MSG(memcmp(o0, o1, (size_t)n * 2 + 2) == 0, "%s n=%lld: store_bf16", e->name, (long long)n);
                const float w = rep == 0 ? 0.75f : any_scale(&p);
                memcpy(acc1, acc0, (size_t)(n + 1) * 4);
                ts__ep_ll_fma_bf16__generic(acc0, y, w, n), e->fma_bf16(acc1, y, w, n);
                TS_CHECK_MSG(same_f32_rows(acc0, acc1, n + 1), "%s n=%lld: ll_fma_bf16", e->name, (long long)n);
                memcpy(acc1, acc0, (size_t)(n + 1) * 4); /* the same start, NaN payloads included */
                ts__ep_ll_fma_f32__generic(acc0, yf, w, n), e->fma_f32(acc1, yf, w, n);
                TS_CHECK_MSG(same_f32_rows(acc0, acc1, n + 1), "%s n=%lld: ll_fma_f32", e->name, (long long)n);
            }
        }
        for (int64_t hidden = 128; hidden <= 1024 && !TS_FAILED(); hidden += 128)
            for (int round = 0; round < 2; round++)
                for (int rep = 0; rep < 8; rep++) {
                    fill_src(&p, TS__QSRC_BF16, y, hidden);
                    if (rep == 1) memset(y, 0, (size_t)hidden * 2); /* amax at the 1e-4 margin */
                    memset(q0, 0xA5, (size_t)hidden + 1), memset(q1, 0xA5, (size_t)hidden + 1);
                    ts__ep_ll_cast__generic(y, hidden, round, q0, s0), e->cast(y, hidden, round, q1, s1);
                    TS_CHECK_MSG(memcmp(q0, q1, (size_t)hidden + 1) == 0 && memcmp(s0, s1, (size_t)hidden / 128 * 4) == 0,
                                 "%s: ll_cast hidden %lld round_scale %d", e->name, (long long)hidden, round);
                }
    }
    free(y), free(o0), free(o1), free(acc0), free(acc1), free(yf), free(q0), free(q1);
}
