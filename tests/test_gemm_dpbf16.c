/* The vdpbf16ps (AVX512_BF16) kernels of the block-scaled GEMMs.
 *   - the instruction itself, on this CPU: vdpbf16ps must equal the two fmaf steps high pair
 *     first (acc = fmaf(a_lo, b_lo, fmaf(a_hi, b_hi, acc))) on e4m3 / e2m1 operands, on
 *     inputs chosen so that other orders and roundings give other results (the test counts
 *     how often they would have differed, so it cannot pass vacuously), and whole K blocks in
 *     the packers' swapped pair order must equal the canonical fmaf chain;
 *   - whole GEMMs on adversarial operands (every e4m3 code incl. the subnormal ones and
 *     +-448, every e2m1 code, cancelling sums, magnitudes mixed so every step rounds, scales
 *     2^-120 .. 2^40 and not powers of two): the vdpbf16ps path, the f32 avx512 path and the
 *     avx2 path equal the generic path bit for bit, for thread counts 1, 2, 3, M / N / K
 *     tails, MN-major and pre-packed weights (the packers' other routes), C accumulation,
 *     bf16 D, and the M-grouped (contiguous, masked) calls.
 * On a machine without AVX512_BF16 the first part is skipped with a note and the second one
 * compares the paths there are. */
#include "ts_prng.h"
#include "ts_test.h"

#include "core/internal.h"
#include "gemm/gemm_kernels.h"
#include "tilestack/gemm.h"
#include "tilestack/numerics.h"
#include "tilestack/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Whether this build and CPU run the vdpbf16ps kernels on the avx512 path. */
static bool dp_runs_here(void) {
#if defined(TS_HAVE_AVX512BF16_KERNELS)
    return ts__isa_runnable(TS_ISA_AVX512) && ts_get_cpu_info()->has_avx512bf16;
#else
    return false;
#endif
}

/* ------------------------------------------------------------------ the instruction */

#if defined(TS_HAVE_AVX512BF16_KERNELS)
static float e2m1v(int c) { return c == 8 ? 0.0f : ts_e2m1_to_f32((uint8_t)c); }

typedef struct model_stats {
    long lanes, bad, bad_chain, differ_even_first, differ_pair_first, chains;
} model_stats;

/* 16 lanes of (acc, a_hi, b_hi, a_lo, b_lo) through the probe and the models. */
static void model16(ts_test_ctx *ts_t_, model_stats *st, const float acc[16], const float ah[16],
                    const float bh[16], const float al[16], const float bl[16]) {
    uint16_t A[32], B[32];
    float hw[16];
    for (int j = 0; j < 16; j++) {
        A[2 * j + 1] = (uint16_t)(fbits(ah[j]) >> 16), B[2 * j + 1] = (uint16_t)(fbits(bh[j]) >> 16);
        A[2 * j] = (uint16_t)(fbits(al[j]) >> 16), B[2 * j] = (uint16_t)(fbits(bl[j]) >> 16);
        hw[j] = acc[j];
    }
    ts__gemm_dpbf16_probe(A, B, hw);
    for (int j = 0; j < 16; j++) {
        const float want = fmaf(al[j], bl[j], fmaf(ah[j], bh[j], acc[j]));
        const float even_first = fmaf(ah[j], bh[j], fmaf(al[j], bl[j], acc[j]));
        const float pair_first = acc[j] + (ah[j] * bh[j] + al[j] * bl[j]);
        st->lanes++;
        st->differ_even_first += fbits(even_first) != fbits(want);
        st->differ_pair_first += fbits(pair_first) != fbits(want);
        if (fbits(hw[j]) != fbits(want)) {
            st->bad++;
            TS_CHECK_MSG(0, "vdpbf16ps(acc %a; hi %a * %a, lo %a * %a) = %a (0x%08x), the fmaf "
                            "steps give %a (0x%08x)",
                         acc[j], ah[j], bh[j], al[j], bl[j], hw[j], fbits(hw[j]), want, fbits(want));
        }
    }
}

/* One K block of 16 lanes, packed as the GEMM packers do (K 2q high, 2q + 1 low, a missing
 * 2q + 1 zero), against the canonical chain p = fmaf(a_k, b_k, p). */
static void chain16(ts_test_ctx *ts_t_, model_stats *st, int len, const float *a, const float *b) {
    float hw[16] = {0};
    for (int k = 0; k < len; k += 2) {
        uint16_t A[32], B[32];
        for (int j = 0; j < 16; j++) {
            A[2 * j + 1] = (uint16_t)(fbits(a[j * 128 + k]) >> 16);
            B[2 * j + 1] = (uint16_t)(fbits(b[j * 128 + k]) >> 16);
            A[2 * j] = k + 1 < len ? (uint16_t)(fbits(a[j * 128 + k + 1]) >> 16) : 0;
            B[2 * j] = k + 1 < len ? (uint16_t)(fbits(b[j * 128 + k + 1]) >> 16) : 0;
        }
        ts__gemm_dpbf16_probe(A, B, hw);
    }
    for (int j = 0; j < 16; j++) {
        float p = 0.0f;
        for (int k = 0; k < len; k++) p = fmaf(a[j * 128 + k], b[j * 128 + k], p);
        st->chains++;
        if (fbits(p) != fbits(hw[j])) {
            st->bad_chain++;
            TS_CHECK_MSG(0, "K block of %d, lane %d: vdpbf16ps chain %a, fmaf chain %a", len, j,
                         hw[j], p);
        }
    }
}
#endif

TS_TEST(gemm_dpbf16_instruction_model) {
#if !defined(TS_HAVE_AVX512BF16_KERNELS)
    printf("    skipped: built without the vdpbf16ps kernels (compiler lacks -mavx512bf16)\n");
#else
    if (!dp_runs_here()) {
        printf("    skipped: this CPU has no AVX512_BF16 (or no avx512 path)\n");
        return;
    }
    float vals[256];
    int nv = 0;
    for (int c = 0; c < 256; c++)
        if ((c & 0x7F) != 0x7F) vals[nv++] = ts_e4m3_to_f32((uint8_t)c);
    ts_prng r = ts_prng_seed(0xD0B16);
    model_stats st;
    memset(&st, 0, sizeof st);
    float acc[16], ah[16], bh[16], al[16], bl[16];
    /* (1) acc with ulp(acc) at 1/2 .. 4 times |a_hi b_hi|: the first step is a tie or an
     * inexact sum whose rounding the second product decides. */
    for (int it = 0; it < 12000 && !TS_FAILED(); it++) {
        for (int j = 0; j < 16; j++) {
            do {
                ah[j] = vals[ts_prng_u32(&r) % (uint32_t)nv], bh[j] = vals[ts_prng_u32(&r) % (uint32_t)nv];
            } while (ah[j] * bh[j] == 0.0f);
            al[j] = vals[ts_prng_u32(&r) % (uint32_t)nv], bl[j] = vals[ts_prng_u32(&r) % (uint32_t)nv];
            const int e = ilogbf(ah[j] * bh[j]) + 22 + (int)(ts_prng_u32(&r) % 4);
            acc[j] = bitsf((ts_prng_u32(&r) & 0x807FFFFFu) | ((uint32_t)(e + 127) << 23));
        }
        model16(ts_t_, &st, acc, ah, bh, al, bl);
    }
    /* (2) every e4m3 code against every e2m1 code in the high pair (and random codes in the low
     * one), accumulators of every exponent a block sum can take. */
    for (int e = -20; e <= 30 && !TS_FAILED(); e++)
        for (int i = 0; i < nv; i++) {
            for (int j = 0; j < 16; j++) {
                ah[j] = vals[i], bh[j] = e2m1v(j);
                al[j] = vals[ts_prng_u32(&r) % (uint32_t)nv], bl[j] = e2m1v((int)(ts_prng_u32(&r) & 15));
                acc[j] = bitsf((ts_prng_u32(&r) & 0x807FFFFFu) | ((uint32_t)(e + 127) << 23));
            }
            model16(ts_t_, &st, acc, ah, bh, al, bl);
        }
    /* (3) NaN codes (one sign per lane: which of two NaNs an op returns is the operand rule,
     * not the canonical order) propagate as in the fmaf steps. */
    for (int it = 0; it < 64; it++) {
        for (int j = 0; j < 16; j++) {
            const float nan = bitsf((it & 1 ? 0xFFC00000u : 0x7FC00000u));
            ah[j] = vals[ts_prng_u32(&r) % (uint32_t)nv], bh[j] = vals[ts_prng_u32(&r) % (uint32_t)nv];
            al[j] = vals[ts_prng_u32(&r) % (uint32_t)nv], bl[j] = vals[ts_prng_u32(&r) % (uint32_t)nv];
            float *slot[4] = {&ah[j], &bh[j], &al[j], &bl[j]};
            *slot[(it / 2 + j) % 4] = nan;
            acc[j] = (float)(int)(ts_prng_u32(&r) % 200) - 100.0f;
        }
        model16(ts_t_, &st, acc, ah, bh, al, bl);
    }
    /* (4) whole blocks (lengths of both granularities and short last blocks), e4m3 x e4m3 with
     * big and tiny values mixed (so the running sum drops low bits at most steps), e4m3 x e2m1,
     * e2m1 x e2m1 */
    static float a[16 * 128], b[16 * 128];
    const int lens[] = {128, 127, 32, 31, 2, 1};
    for (int li = 0; li < 6 && !TS_FAILED(); li++)
        for (int it = 0; it < 60; it++) {
            const int kind = it % 3;
            for (int q = 0; q < 16 * 128; q++) {
                const float x = vals[ts_prng_u32(&r) % (uint32_t)nv];
                a[q] = (kind == 0 && (ts_prng_u32(&r) & 3) == 0) ? ldexpf(1.0f, -9) * (float)(1 + (q & 7)) : x;
                b[q] = kind == 0 ? vals[ts_prng_u32(&r) % (uint32_t)nv] : e2m1v((int)(ts_prng_u32(&r) & 15));
                if (kind == 2) a[q] = e2m1v((int)(ts_prng_u32(&r) & 15));
            }
            chain16(ts_t_, &st, lens[li], a, b);
        }
    printf("    vdpbf16ps vs fmaf(lo, fmaf(hi, acc)): %ld lanes, %ld differ; the models it tells "
           "apart differed on %ld (even pair first) / %ld (pair summed first) lanes; %ld K-block "
           "chains in swapped pair order, %ld differ from the canonical chain\n",
           st.lanes, st.bad, st.differ_even_first, st.differ_pair_first, st.chains, st.bad_chain);
    TS_CHECK_EQ_INT(st.bad, 0);
    TS_CHECK_EQ_INT(st.bad_chain, 0);
    /* the inputs must have been able to tell the orders apart */
    TS_CHECK(st.differ_even_first > 1000 && st.differ_pair_first > 1000);
#endif
}

/* ------------------------------------------------------------------ whole GEMMs */

/* Operand rows by r % 4: 0 cycles through every code (a phase per row); 1 alternates big and
 * small magnitudes (e4m3: 128 .. 448 and < 2^-3, the subnormal codes included; e2m1: random
 * codes), so most steps of a block round; 2 random codes whose 32-value blocks repeat their
 * first half in the second; 3 the same with the second half negated. An A row of kind 3
 * times a B row of kind 2 cancels: each block adds 16 products, then subtracts the same
 * ones, leaving 0 or the rounding residue. */
static void fill_e4m3_adv(uint8_t *q, int64_t rows, int64_t k, uint64_t seed) {
    ts_prng r = ts_prng_seed(seed);
    for (int64_t i = 0; i < rows; i++) {
        const int64_t phase = (int64_t)(ts_prng_u32(&r) % 254);
        for (int64_t kk = 0; kk < k; kk++) {
            const uint32_t u = ts_prng_u32(&r);
            uint8_t c;
            if (i % 4 >= 2 && (kk & 31) >= 16) {
                c = (uint8_t)(q[i * k + kk - 16] ^ (i % 4 == 3 ? 0x80 : 0));
            } else if (i % 4 == 1) {
                c = (uint8_t)((kk & 1 ? (u % 0x1F) : 0x70 + (u % 0x0F)) | ((u >> 8) & 0x80));
            } else {
                const int64_t v = i % 4 == 0 ? (kk + phase) % 254 : (int64_t)(u % 254);
                c = (uint8_t)(v < 127 ? v : v + 1); /* 0..253 -> the codes but 0x7F, 0xFF */
            }
            q[i * k + kk] = c;
        }
    }
}

/* Packed e2m1 [rows, k / 2], the same row kinds (the sign is bit 3 of a nibble). */
static void fill_e2m1_adv(uint8_t *q, int64_t rows, int64_t k, uint64_t seed) {
    ts_prng r = ts_prng_seed(seed);
    for (int64_t i = 0; i < rows; i++) {
        const int64_t phase = (int64_t)(ts_prng_u32(&r) % 16);
        uint8_t *row = q + i * (k / 2);
        for (int64_t kk = 0; kk < k; kk += 2) {
            const uint32_t u = ts_prng_u32(&r);
            if (i % 4 >= 2 && (kk & 31) >= 16) {
                row[kk / 2] = (uint8_t)(row[kk / 2 - 8] ^ (i % 4 == 3 ? 0x88 : 0));
            } else if (i % 4 == 0) {
                row[kk / 2] = (uint8_t)(((kk + phase) % 16) | ((kk + 1 + 3 * phase) % 16) << 4);
            } else {
                row[kk / 2] = (uint8_t)u;
            }
        }
    }
}

/* f32 scales over 2^-40 .. 2^40, a sixteenth of them 2^-120 (scale products that are f32
 * subnormals or 0: the promotion stays an f32 FMA); not powers of two unless pow2. Large
 * enough to reach the f32 range's ends, not to overflow (inf - inf would make the NaN's
 * sign a question of the operand rule). */
static void fill_scales(float *s, int64_t n, bool pow2, uint64_t seed) {
    ts_prng r = ts_prng_seed(seed);
    for (int64_t i = 0; i < n; i++) {
        const uint32_t u = ts_prng_u32(&r);
        const int e = (u & 15) == 0 ? -120 : -40 + (int)(u % 81);
        s[i] = ldexpf(pow2 ? 1.0f : 1.0f + (float)((u >> 8) % 7) / 7.0f, e);
    }
}

/* ue8m0 words of bytes 127 +- 45 (2^-45 .. 2^45; n words). */
static void fill_ue8m0(int32_t *w, int64_t n, uint64_t seed) {
    ts_prng r = ts_prng_seed(seed);
    for (int64_t i = 0; i < n; i++) {
        uint32_t v = 0;
        for (int b = 0; b < 4; b++) v |= (uint32_t)(82 + ts_prng_u32(&r) % 91) << (8 * b);
        w[i] = (int32_t)v;
    }
}

enum { RC_FP8_BLOCK, RC_FP8_UE8M0, RC_FP8_FP4, RC_FP4_FP8, RC_FP4_FP4, RC_COUNT };
static const char *const k_rc_name[RC_COUNT] = {"fp8 (1,128,128) f32", "fp8 (1,1,128) ue8m0",
                                                "fp8 x fp4 (1,1,32) f32", "fp4 x fp8 ue8m0",
                                                "fp4 x fp4 ue8m0"};

/* One problem: A [G * M, K], B [G, N, K] (G = 1: [N, K]), scales, views. */
typedef struct dprob {
    int rc;
    int64_t g, m, n, k;
    bool a4, b4, u8;
    uint8_t *a, *b;
    void *sa, *sb;
    ts_tensor ta, tb, tsa, tsb;
    int64_t ra[2], rb[2];
} dprob;

static dprob dprob_make(int rc, int64_t g, int64_t m, int64_t n, int64_t k, uint64_t seed) {
    dprob p;
    memset(&p, 0, sizeof p);
    p.rc = rc, p.g = g, p.m = m, p.n = n, p.k = k;
    p.a4 = rc == RC_FP4_FP8 || rc == RC_FP4_FP4;
    p.b4 = rc == RC_FP8_FP4 || rc == RC_FP4_FP4;
    p.u8 = rc != RC_FP8_BLOCK && rc != RC_FP8_FP4;
    const int64_t ak = p.a4 ? k / 2 : k, bk = p.b4 ? k / 2 : k;
    p.a = (uint8_t *)malloc((size_t)(g * m * ak) + 64);
    p.b = (uint8_t *)malloc((size_t)(g * n * bk) + 64);
    if (p.a4) fill_e2m1_adv(p.a, g * m, k, seed);
    else fill_e4m3_adv(p.a, g * m, k, seed);
    if (p.b4) fill_e2m1_adv(p.b, g * n, k, seed + 1);
    else fill_e4m3_adv(p.b, g * n, k, seed + 1);
    const int64_t gka = p.a4 || rc == RC_FP8_FP4 ? 32 : 128, gkb = p.b4 || rc == RC_FP4_FP8 ? 32 : 128;
    const int64_t gmnb = rc == RC_FP8_BLOCK ? 128 : 1;
    const int64_t nsa = (k + gka - 1) / gka, nsb = (k + gkb - 1) / gkb, sbr = (n + gmnb - 1) / gmnb;
    p.ta = ts_tensor_2d(p.a, p.a4 ? TS_E2M1X2 : TS_E4M3, g * m, ak);
    p.tb = g > 1 ? ts_tensor_3d(p.b, p.b4 ? TS_E2M1X2 : TS_E4M3, g, n, bk)
                 : ts_tensor_2d(p.b, p.b4 ? TS_E2M1X2 : TS_E4M3, n, bk);
    if (p.u8) {
        const int64_t wa = (nsa + 3) / 4, wb = (nsb + 3) / 4;
        p.sa = malloc((size_t)(g * m * wa) * 4 + 4);
        p.sb = malloc((size_t)(g * sbr * wb) * 4 + 4);
        fill_ue8m0((int32_t *)p.sa, g * m * wa, seed + 2);
        fill_ue8m0((int32_t *)p.sb, g * sbr * wb, seed + 3);
        p.tsa = ts_tensor_2d(p.sa, TS_I32, g * m, wa);
        p.tsb = g > 1 ? ts_tensor_3d(p.sb, TS_I32, g, sbr, wb) : ts_tensor_2d(p.sb, TS_I32, sbr, wb);
    } else {
        p.sa = malloc((size_t)(g * m * nsa) * 4 + 4);
        p.sb = malloc((size_t)(g * sbr * nsb) * 4 + 4);
        /* gran 32 is the ue8m0-cast route: scales that are not powers of two are used as
         * given only with disable_ue8m0_cast (passed below) */
        fill_scales((float *)p.sa, g * m * nsa, false, seed + 2);
        fill_scales((float *)p.sb, g * sbr * nsb, false, seed + 3);
        p.tsa = ts_tensor_2d(p.sa, TS_F32, g * m, nsa);
        p.tsb = g > 1 ? ts_tensor_3d(p.sb, TS_F32, g, sbr, nsb) : ts_tensor_2d(p.sb, TS_F32, sbr, nsb);
    }
    p.ra[0] = 1, p.ra[1] = gka, p.rb[0] = gmnb, p.rb[1] = gkb;
    return p;
}

static void dprob_free(dprob *p) { free(p->a), free(p->b), free(p->sa), free(p->sb); }

/* How one call is made: 0 dense nt, 1 dense nn (B as the transposed [K, N] copy: MN-major,
 * the packers' generic route), 2 pre-packed B, 3 dense nt with C (= D), bf16 D, 4 m-grouped
 * contiguous (psum), 5 masked. */
enum { CALL_NT, CALL_NN, CALL_PACKED, CALL_C_BF16, CALL_CONTIG, CALL_MASKED, CALL_COUNT };

typedef struct dcall {
    int how;
    dprob *p;
    ts_tensor bt, sbt; /* nn */
    ts_packed_weight *pw;
    int32_t lay[4];
    int64_t nlay;
} dcall;

static size_t out_bytes(const dcall *c) {
    return (size_t)(c->p->g * c->p->m * c->p->n) * (c->how == CALL_C_BF16 ? 2 : 4);
}

static ts_status dcall_run(const dcall *c, void *d) {
    const dprob *p = c->p;
    const int64_t M = p->m, N = p->n, G = p->g;
    ts_tensor td = ts_tensor_2d(d, TS_F32, G * M, N);
    switch (c->how) {
    case CALL_NT:
        return ts_fp8_fp4_gemm_nt(&p->ta, &p->tsa, &p->tb, &p->tsb, &td, NULL, NULL, p->ra, p->rb,
                                  NULL, true);
    case CALL_NN:
        return ts_fp8_fp4_gemm_nn(&p->ta, &p->tsa, &c->bt, &c->sbt, &td, NULL, NULL, p->ra, p->rb,
                                  NULL, true);
    case CALL_PACKED:
        return ts_fp8_fp4_gemm_nt_packed(&p->ta, &p->tsa, c->pw, &td, NULL, NULL, p->ra, p->rb,
                                         NULL, true);
    case CALL_C_BF16: {
        /* C = D: D starts as a fixed bf16 pattern, the call adds to it */
        uint16_t *h = (uint16_t *)d;
        for (int64_t i = 0; i < M * N; i++) h[i] = ts_f32_to_bf16((float)((i * 37) % 200) - 100.0f);
        ts_tensor tdb = ts_tensor_2d(d, TS_BF16, M, N);
        return ts_fp8_fp4_gemm_nt(&p->ta, &p->tsa, &p->tb, &p->tsb, &tdb, &tdb, NULL, p->ra, p->rb,
                                  NULL, true);
    }
    case CALL_CONTIG: {
        ts_tensor lv = ts_tensor_1d((void *)c->lay, TS_I32, c->nlay);
        return ts_m_grouped_fp8_fp4_gemm_nt_contiguous(&p->ta, &p->tsa, &p->tb, &p->tsb, &td, &lv,
                                                       NULL, p->ra, p->rb, NULL, true, true, true, 0);
    }
    default: {
        ts_tensor a3 = ts_tensor_3d(p->a, p->ta.dtype, G, M, p->ta.shape[1]);
        ts_tensor sa3 = ts_tensor_3d(p->sa, p->tsa.dtype, G, M, p->tsa.shape[1]);
        ts_tensor d3 = ts_tensor_3d(d, TS_F32, G, M, N);
        ts_tensor lv = ts_tensor_1d((void *)c->lay, TS_I32, c->nlay);
        return ts_m_grouped_fp8_fp4_gemm_nt_masked(&a3, &sa3, &p->tb, &p->tsb, &d3, &lv, M, NULL,
                                                   p->ra, p->rb, NULL, true);
    }
    }
}

/* The transposed [K, N] copy of B (nn) and sfb's transpose (f32 or packed words). */
static void make_nn(ts_test_ctx *ts_t_, dcall *c, void **bbuf, void **sbuf) {
    const dprob *p = c->p;
    const int64_t N = p->n, K = p->k;
    if (p->b4) {
        *bbuf = calloc((size_t)(N * K / 2) + 1, 1);
        c->bt = ts_tensor_2d(*bbuf, TS_E2M1X2, K, N / 2);
        TS_CHECK_STATUS(ts_transpose_packed_fp4(&p->tb, &c->bt), TS_OK);
    } else {
        uint8_t *t = (uint8_t *)malloc((size_t)(N * K) + 1);
        for (int64_t i = 0; i < N; i++)
            for (int64_t k = 0; k < K; k++) t[k * N + i] = p->b[i * K + k];
        *bbuf = t;
        c->bt = ts_tensor_2d(t, TS_E4M3, K, N);
    }
    const int64_t r = p->tsb.shape[0], s = p->tsb.shape[1];
    uint32_t *st = (uint32_t *)malloc((size_t)(r * s) * 4 + 4);
    for (int64_t i = 0; i < r; i++)
        for (int64_t j = 0; j < s; j++) st[j * r + i] = ((const uint32_t *)p->sb)[i * s + j];
    *sbuf = st;
    c->sbt = ts_tensor_2d(st, p->tsb.dtype, s, r);
}

/* Reference: generic, 1 thread. Then every SIMD path this machine runs, avx512 with and
 * without the vdpbf16ps kernels, threads 1, 2, 3. */
static void check_paths(ts_test_ctx *ts_t_, const dcall *c, const char *what, bool *dp_seen) {
    const ts_isa isa0 = ts_get_isa();
    const int th0 = ts_get_num_threads();
    const size_t nb = out_bytes(c);
    void *ref = malloc(nb), *d = malloc(nb);
    TS_CHECK_STATUS(ts_set_isa(TS_ISA_GENERIC), TS_OK);
    TS_CHECK_STATUS(ts_set_num_threads(1), TS_OK);
    memset(ref, 0, nb);
    TS_CHECK_STATUS(dcall_run(c, ref), TS_OK);
    int isas[TS_ISA_COUNT_];
    const int nisa = ts_test_isas(isas);
    for (int i = 0; i < nisa; i++) { /* generic at other thread counts: test_gemm_dense.c */
        if (isas[i] == TS_ISA_GENERIC || ts_set_isa((ts_isa)isas[i]) != TS_OK) continue;
        for (int dp = 0; dp < 2; dp++) {
            ts__gemm_set_dpbf16(dp);
            const bool runs = ts__gemm_select_dp_kernels() != NULL;
            /* only the avx512 path, only with the switch on, only with AVX512_BF16 */
            TS_CHECK_MSG(runs == (dp && isas[i] == TS_ISA_AVX512 && dp_runs_here()),
                         "vdpbf16ps kernels %s on isa %s with the switch %d",
                         runs ? "selected" : "not selected", ts_isa_name((ts_isa)isas[i]), dp);
            if (dp && isas[i] != TS_ISA_AVX512) continue; /* the same kernels as dp 0 */
            if (runs) *dp_seen = true;
            const int ths[3] = {1, 2, 3};
            for (int t = 0; t < 3; t++) {
                TS_CHECK_STATUS(ts_set_num_threads(ths[t]), TS_OK);
                memset(d, 0, nb);
                TS_CHECK_STATUS(dcall_run(c, d), TS_OK);
                if (memcmp(d, ref, nb) != 0) {
                    size_t first = 0;
                    while (first < nb && ((char *)d)[first] == ((char *)ref)[first]) first++;
                    TS_CHECK_MSG(0, "%s: isa %s dp %d threads %d differs from generic/1 (first "
                                    "differing byte %zu of %zu)",
                                 what, ts_isa_name((ts_isa)isas[i]), dp, ths[t], first, nb);
                }
            }
        }
    }
    ts__gemm_set_dpbf16(-1);
    ts_set_isa(isa0);
    ts_set_num_threads(th0);
    free(ref), free(d);
}

TS_TEST(gemm_dpbf16_adversarial_bitwise) {
    bool dp_seen = false;
    /* M 131 = 21 row tiles + 5 rows, N 100 = a 4-tile group, a 2-tile group and a 4-column
     * tile; K odd (a short last block ending mid-pair; several 256-value packing steps) for
     * e4m3 x e4m3, even where fp4 packs two values a byte. */
    for (int rc = 0; rc < RC_COUNT; rc++) {
        const bool fp4 = rc == RC_FP8_FP4 || rc == RC_FP4_FP8 || rc == RC_FP4_FP4;
        const int64_t M = 131, N = 100, K = fp4 ? 646 : 645;
        dprob p = dprob_make(rc, 1, M, N, K, 500 + (uint64_t)rc);
        for (int how = CALL_NT; how <= CALL_C_BF16; how++) {
            dcall c;
            memset(&c, 0, sizeof c);
            c.how = how, c.p = &p;
            void *bb = NULL, *sb = NULL;
            if (how == CALL_NN) make_nn(ts_t_, &c, &bb, &sb);
            if (how == CALL_PACKED)
                TS_CHECK_STATUS(ts_gemm_prepack_b(&p.tb, &p.tsb, p.rb, false, &c.pw), TS_OK);
            if (how != CALL_PACKED || c.pw) {
                char what[96];
                static const char *const hn[] = {"nt", "nn", "packed", "C = D, bf16 D"};
                snprintf(what, sizeof what, "%s %s [%lld,%lld,%lld]", k_rc_name[rc], hn[how],
                         (long long)M, (long long)N, (long long)K);
                check_paths(ts_t_, &c, what, &dp_seen);
            }
            ts_packed_weight_destroy(c.pw);
            free(bb), free(sb);
        }
        dprob_free(&p);
    }
    /* K = 1 (one half-empty pair) and a K under one block */
    for (int64_t k = 1; k <= 100; k += 99) {
        dprob p = dprob_make(RC_FP8_BLOCK, 1, 60, 40, k, 600 + (uint64_t)k);
        dcall c;
        memset(&c, 0, sizeof c);
        c.how = CALL_NT, c.p = &p;
        check_paths(ts_t_, &c, k == 1 ? "fp8 K = 1" : "fp8 K = 100", &dp_seen);
        dprob_free(&p);
    }
    TS_CHECK_MSG(dp_seen || !dp_runs_here(), "the vdpbf16ps kernels never ran on this machine");
    if (!dp_runs_here()) printf("    note: no vdpbf16ps kernels here; compared the other paths\n");
}

/* The M-grouped calls in their compute-bound regime (groups above the decode path's 48 rows):
 * contiguous psum with an empty group, masked with masked_m 0 / partial / full. */
TS_TEST(gemm_dpbf16_grouped_bitwise) {
    bool dp_seen = false;
    const int rcs[2] = {RC_FP8_UE8M0, RC_FP8_FP4};
    for (int ri = 0; ri < 2; ri++) {
        const int rc = rcs[ri];
        const int64_t G = 3, M = 128, N = 72, K = 544;
        dprob p = dprob_make(rc, G, M, N, K, 700 + (uint64_t)rc);
        for (int how = CALL_CONTIG; how <= CALL_MASKED; how++) {
            dcall c;
            memset(&c, 0, sizeof c);
            c.how = how, c.p = &p;
            if (how == CALL_CONTIG) {
                /* [G * M] rows of A as one contiguous A: groups end at 70, 128 (the second one
                 * empty after alignment), 384 */
                c.p->m = G * M, c.p->g = 1;
                c.lay[0] = 70, c.lay[1] = 128, c.lay[2] = 384, c.nlay = 3;
            } else {
                c.lay[0] = 0, c.lay[1] = 77, c.lay[2] = 128, c.nlay = 3;
            }
            char what[96];
            snprintf(what, sizeof what, "%s %s", k_rc_name[rc], how == CALL_CONTIG ? "contiguous" : "masked");
            check_paths(ts_t_, &c, what, &dp_seen);
            p.m = M, p.g = G;
        }
        dprob_free(&p);
    }
    TS_CHECK_MSG(dp_seen || !dp_runs_here(), "the vdpbf16ps kernels never ran on this machine");
}
