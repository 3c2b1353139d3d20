/* Diagnostic only, never linked into tilestack: does this CPU's vdpbf16ps (AVX512_BF16)
 * compute, per f32 lane j,
 *     acc = fmaf(a[2j], b[2j], fmaf(a[2j+1], b[2j+1], acc))
 * (the high bf16 of the dword first, each step one f32 rounding to nearest even) for e4m3 /
 * e2m1 operands? The GEMM's vdpbf16ps kernels (src/gemm/kernels/avx512bf16/) rely on it to
 * give the canonical chain's bits (docs/gemm.md); tests/test_gemm_dpbf16.c runs a short
 * version on every machine, this one runs ~10^8 lanes and prints what MXCSR does.
 *
 * Models compared with the hardware, bit for bit:
 *   O  high (odd) element first, two roundings (Intel SDM pseudocode)
 *   E  low (even) element first, two roundings
 *   S  one rounding of acc + p_hi + p_lo (counted only where the double sum is exact)
 *   P  rn(acc + rn(p_hi + p_lo)), the pair summed first
 * A case only tells the models apart where they differ, so those counts are printed too.
 *
 * Built by CMake as ts_dpbf16_check (when the compiler takes -mavx512bf16); run
 * ./build/ts_dpbf16_check [rounds] (default 4000000 random 16-lane calls per part).
 * Exit status 0: no lane differs from O; 1: some did; 2: the CPU has no AVX512_BF16. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_s = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
    uint64_t z = (rng_s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float e4m3(uint8_t c) {
    int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
    float v;
    if (e == 15 && m == 7) return NAN;
    if (e == 0)
        v = ldexpf((float)m, -9);
    else
        v = ldexpf(1.0f + m / 8.0f, e - 7);
    return s ? -v : v;
}

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
static uint16_t bf16_of_exact(float f) {
    return (uint16_t)(fbits(f) >> 16);
} /* exact inputs only */

/* All non-NaN e4m3 values (254 codes, +-0 once each sign). */
static float vals[256];
static int nvals;

struct stats {
    uint64_t n, badO, badE, badS, badP, nS, dOE, dOS, dOP, zero_sign;
};

static struct stats st;

/* One hardware call on 16 lanes; the models per lane. */
static void run16(const float acc[16], const float a1[16], const float b1[16], const float a0[16],
                  const float b0[16], int verbose) {
    uint16_t A[32], B[32];
    for (int j = 0; j < 16; j++) {
        A[2 * j] = bf16_of_exact(a0[j]);
        A[2 * j + 1] = bf16_of_exact(a1[j]);
        B[2 * j] = bf16_of_exact(b0[j]);
        B[2 * j + 1] = bf16_of_exact(b1[j]);
    }
    __m512 vacc = _mm512_loadu_ps(acc);
    __m512bh va = (__m512bh)_mm512_loadu_si512(A), vb = (__m512bh)_mm512_loadu_si512(B);
    __m512 hw = _mm512_dpbf16_ps(vacc, va, vb);
    __m512 p1 = _mm512_mul_ps(_mm512_loadu_ps(a1), _mm512_loadu_ps(b1)); /* exact */
    __m512 p0 = _mm512_mul_ps(_mm512_loadu_ps(a0), _mm512_loadu_ps(b0));
    __m512 mO = _mm512_add_ps(_mm512_add_ps(vacc, p1), p0);
    __m512 mE = _mm512_add_ps(_mm512_add_ps(vacc, p0), p1);
    __m512 mP = _mm512_add_ps(vacc, _mm512_add_ps(p1, p0));
    float h[16], o[16], e[16], pp[16], q1[16], q0[16];
    _mm512_storeu_ps(h, hw);
    _mm512_storeu_ps(o, mO);
    _mm512_storeu_ps(e, mE);
    _mm512_storeu_ps(pp, mP);
    _mm512_storeu_ps(q1, p1);
    _mm512_storeu_ps(q0, p0);
    for (int j = 0; j < 16; j++) {
        /* one rounding: double sum, used only if both double additions were exact */
        double x = acc[j], y = q1[j], z = q0[j];
        double s1 = x + y, bb = s1 - x, err1 = (x - (s1 - bb)) + (y - bb);
        double s2 = s1 + z, cc = s2 - s1, err2 = (s1 - (s2 - cc)) + (z - cc);
        int haveS = err1 == 0 && err2 == 0;
        float sS = (float)s2;
        uint32_t H = fbits(h[j]);
        st.n++;
        if (fbits(o[j]) != H) {
            if (h[j] == o[j]) st.zero_sign++;
            st.badO++;
            if (verbose && st.badO <= 20)
                printf("  O mismatch: acc=%a a1=%a b1=%a a0=%a b0=%a hw=%a O=%a E=%a\n", acc[j],
                       a1[j], b1[j], a0[j], b0[j], h[j], o[j], e[j]);
        }
        if (fbits(e[j]) != H) st.badE++;
        if (fbits(pp[j]) != H) st.badP++;
        if (haveS) {
            st.nS++;
            if (fbits(sS) != H) st.badS++;
            if (fbits(sS) != fbits(o[j])) st.dOS++;
        }
        if (fbits(o[j]) != fbits(e[j])) st.dOE++;
        if (fbits(o[j]) != fbits(pp[j])) st.dOP++;
    }
}

static uint64_t bad_total;
static void report(const char *name) {
    bad_total += st.badO;
    printf("%-44s lanes %12llu | hw!=O %llu (of which zero sign %llu)  hw!=E %llu  hw!=P %llu  "
           "hw!=S %llu/%llu | O!=E %llu O!=P %llu O!=S %llu\n",
           name, (unsigned long long)st.n, (unsigned long long)st.badO,
           (unsigned long long)st.zero_sign, (unsigned long long)st.badE,
           (unsigned long long)st.badP, (unsigned long long)st.badS, (unsigned long long)st.nS,
           (unsigned long long)st.dOE, (unsigned long long)st.dOP, (unsigned long long)st.dOS);
    fflush(stdout);
    memset(&st, 0, sizeof st);
}

static float rand_val(void) { return vals[rnd() % (uint64_t)nvals]; }

/* A normal f32 with a random mantissa, sign and exponent in [elo, ehi]. */
static float rand_acc(int elo, int ehi) {
    uint32_t e = (uint32_t)(elo + (int)(rnd() % (uint64_t)(ehi - elo + 1)) + 127);
    uint32_t u = (uint32_t)(rnd() & 0x807FFFFFu) | (e << 23);
    return bitsf(u);
}

/* The canonical chain over a K block with swapped pairs vs one vdpbf16ps per pair. */
static uint64_t chain_bad, chain_n, chain_diff_unswapped;
static void chain_test(int K, float (*gen_a)(void), float (*gen_b)(void)) {
    float a[16][128], b[16][128];
    for (int j = 0; j < 16; j++)
        for (int k = 0; k < K; k++) {
            a[j][k] = gen_a();
            b[j][k] = gen_b();
        }
    __m512 p = _mm512_setzero_ps(), pu = _mm512_setzero_ps();
    for (int k = 0; k < K; k += 2) {
        uint16_t A[32], B[32], Au[32], Bu[32];
        for (int j = 0; j < 16; j++) {
            float a1 = k + 1 < K ? a[j][k + 1] : 0.0f, b1 = k + 1 < K ? b[j][k + 1] : 0.0f;
            A[2 * j + 1] = bf16_of_exact(a[j][k]); /* swapped: element k high */
            B[2 * j + 1] = bf16_of_exact(b[j][k]);
            A[2 * j] = bf16_of_exact(a1);
            B[2 * j] = bf16_of_exact(b1);
            Au[2 * j] = A[2 * j + 1]; /* natural order, to show the swap matters */
            Bu[2 * j] = B[2 * j + 1];
            Au[2 * j + 1] = A[2 * j];
            Bu[2 * j + 1] = B[2 * j];
        }
        p = _mm512_dpbf16_ps(p, (__m512bh)_mm512_loadu_si512(A), (__m512bh)_mm512_loadu_si512(B));
        pu = _mm512_dpbf16_ps(pu, (__m512bh)_mm512_loadu_si512(Au),
                              (__m512bh)_mm512_loadu_si512(Bu));
    }
    float h[16], hu[16];
    _mm512_storeu_ps(h, p);
    _mm512_storeu_ps(hu, pu);
    for (int j = 0; j < 16; j++) {
        float r = 0.0f;
        for (int k = 0; k < K; k++) r = fmaf(a[j][k], b[j][k], r);
        chain_n++;
        if (fbits(r) != fbits(h[j])) {
            chain_bad++;
            if (chain_bad <= 10)
                printf("  chain mismatch K=%d lane %d: fmaf %a hw %a\n", K, j, r, h[j]);
        }
        if (fbits(r) != fbits(hu[j])) chain_diff_unswapped++;
    }
}

static const float e2m1v[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, 0, -0.5f, -1, -1.5f, -2, -3, -4, -6};
static float gen_e4m3(void) { return rand_val(); }
static float gen_e2m1(void) { return e2m1v[rnd() & 15]; }
/* large and tiny magnitudes mixed, so the running sum rounds off the small products */
static float gen_mixed(void) {
    float v = rand_val();
    return (rnd() & 3) ? v : ldexpf(1.0f, -9) * (float)(1 + (rnd() & 7)) * ((rnd() & 1) ? 1 : -1);
}
static float gen_big(void) {
    float v = rand_val();
    return fabsf(v) < 64 ? 448.0f * ((rnd() & 1) ? 1 : -1) : v;
}

static unsigned mxcsr_get(void) { return _mm_getcsr(); }
static void mxcsr_set(unsigned v) { _mm_setcsr(v); }

static void flag_test(const char *name, float acc, uint16_t a1, uint16_t b1, uint16_t a0,
                      uint16_t b0) {
    uint16_t A[32], B[32];
    for (int j = 0; j < 16; j++) {
        A[2 * j] = a0;
        A[2 * j + 1] = a1;
        B[2 * j] = b0;
        B[2 * j + 1] = b1;
    }
    unsigned modes[4] = {0x1F80, 0x1F80 | 0x8040 /* FTZ+DAZ */, 0x1F80 | 0x6000 /* RZ */,
                         0x1F80 | 0x2000 /* RD */};
    const char *mn[4] = {"default", "FTZ+DAZ", "RZ", "RD"};
    for (int m = 0; m < 4; m++) {
        mxcsr_set(modes[m]);
        __m512 v = _mm512_set1_ps(acc);
        __asm__ volatile("" : "+v"(v));
        __m512 r =
            _mm512_dpbf16_ps(v, (__m512bh)_mm512_loadu_si512(A), (__m512bh)_mm512_loadu_si512(B));
        __asm__ volatile("" : "+v"(r));
        unsigned flags = mxcsr_get() & 0x3F;
        mxcsr_set(0x1F80);
        float out[16];
        _mm512_storeu_ps(out, r);
        printf("  %-34s mode %-8s -> %-16a (bits %08x) flags IE%d DE%d ZE%d OE%d UE%d PE%d\n", name,
               mn[m], out[0], fbits(out[0]), flags & 1, (flags >> 1) & 1, (flags >> 2) & 1,
               (flags >> 3) & 1, (flags >> 4) & 1, (flags >> 5) & 1);
    }
}

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 4000000; /* random 16-lane calls */
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512bf16")) {
        printf("this CPU has no AVX512_BF16\n");
        return 2;
    }
    for (int c = 0; c < 256; c++) {
        float v = e4m3((uint8_t)c);
        if (!isnan(v)) vals[nvals++] = v;
    }
    printf("%d non-NaN e4m3 values\n", nvals);

    /* 1. Distinct products: every pair (p1, p0) of distinct e4m3 x e4m3 product values, with
     *    accumulators spread over the exponents where rounding of either step can happen. */
    static float prod[70000], pa[70000], pb[70000];
    int np = 0;
    for (int i = 0; i < nvals; i++)
        for (int j = 0; j < nvals; j++) {
            float p = vals[i] * vals[j];
            if (p == 0 && (fbits(p) != 0 || i || j)) continue;
            int seen = 0;
            for (int q = 0; q < np; q++)
                if (fbits(prod[q]) == fbits(p)) {
                    seen = 1;
                    break;
                }
            if (!seen) {
                prod[np] = p;
                pa[np] = vals[i];
                pb[np] = vals[j];
                np++;
            }
        }
    printf("%d distinct e4m3 x e4m3 products (with sign)\n", np);
    {
        float acc[16], a1[16], b1[16], a0[16], b0[16];
        int lane = 0;
        /* accumulator set: 0, -0 and random-mantissa values at every exponent -20..40 */
        float accs[200];
        int na = 0;
        accs[na++] = 0.0f;
        accs[na++] = -0.0f;
        for (int e = -20; e <= 40; e += 1) accs[na++] = rand_acc(e, e);
        for (int ia = 0; ia < na; ia++) {
            for (int i = 0; i < np; i++)
                for (int j = 0; j < np;
                     j += 1 + (int)(rnd() % 23)) { /* ~1/12 of the pairs per acc */
                    acc[lane] = accs[ia];
                    a1[lane] = pa[i];
                    b1[lane] = pb[i];
                    a0[lane] = pa[j];
                    b0[lane] = pb[j];
                    if (++lane == 16) {
                        run16(acc, a1, b1, a0, b0, 1);
                        lane = 0;
                    }
                }
        }
        report("1. product pairs x 63 accumulators");
    }

    /* 2. Adversarial: acc + p1 lands exactly on a tie or one ulp off, then p0 decides. */
    {
        float acc[16], a1[16], b1[16], a0[16], b0[16];
        for (long r = 0; r < rounds; r++) {
            for (int l = 0; l < 16; l++) {
                int i = (int)(rnd() % (uint64_t)np), j = (int)(rnd() % (uint64_t)np);
                float p1 = prod[i];
                if (p1 == 0) p1 = prod[i = 1];
                /* acc with ulp(acc) = 2|p1| or |p1| or 4|p1|: acc + p1 is then a tie / exact /
                 * quarter */
                int e1 = ilogbf(p1);
                int shift = 22 + (int)(rnd() % 4);
                float acc0 =
                    bitsf((uint32_t)(rnd() & 0x807FFFFFu) | ((uint32_t)(e1 + shift + 127) << 23));
                acc[l] = acc0;
                a1[l] = pa[i];
                b1[l] = pb[i];
                a0[l] = pa[j];
                b0[l] = pb[j];
            }
            run16(acc, a1, b1, a0, b0, 1);
        }
        report("2. ties: ulp(acc) in {1/2,1,2,4}x|p1|");
    }

    /* 3. Random codes, random accumulators of e4m3-sum magnitudes. */
    {
        float acc[16], a1[16], b1[16], a0[16], b0[16];
        for (long r = 0; r < rounds; r++) {
            for (int l = 0; l < 16; l++) {
                acc[l] = rand_acc(-18, 24);
                a1[l] = rand_val();
                b1[l] = rand_val();
                a0[l] = rand_val();
                b0[l] = rand_val();
            }
            run16(acc, a1, b1, a0, b0, 1);
        }
        report("3. random codes, acc 2^-18..2^24");
    }

    /* 4. All e4m3 x e2m1 products in both slots, accumulators at each exponent. */
    {
        float acc[16], a1[16], b1[16], a0[16], b0[16];
        int lane = 0;
        for (int e = -20; e <= 30; e++)
            for (int rep = 0; rep < 2; rep++) {
                float ac = rand_acc(e, e);
                for (int i = 0; i < nvals; i++)
                    for (int ci = 0; ci < 16; ci++)
                        for (int j = 0; j < nvals; j += 7)
                            for (int cj = 0; cj < 16; cj += 3) {
                                acc[lane] = ac;
                                a1[lane] = vals[i];
                                b1[lane] = e2m1v[ci];
                                a0[lane] = vals[j];
                                b0[lane] = e2m1v[cj];
                                if (++lane == 16) {
                                    run16(acc, a1, b1, a0, b0, 1);
                                    lane = 0;
                                }
                            }
            }
        report("4. e4m3 x e2m1 products, acc 2^-20..2^30");
    }

    /* 5. Whole K-blocks: swapped pairs through vdpbf16ps vs the fmaf chain in k order. */
    {
        int Ks[] = {128, 127, 32, 31, 2, 1};
        for (int t = 0; t < 6; t++)
            for (int r = 0; r < 5000; r++) {
                chain_test(Ks[t], gen_e4m3, gen_e4m3);
                chain_test(Ks[t], gen_e4m3, gen_e2m1);
                chain_test(Ks[t], gen_mixed, gen_e4m3);
                chain_test(Ks[t], gen_big, gen_mixed);
                chain_test(Ks[t], gen_e2m1, gen_e2m1);
            }
        printf(
            "5. K-block chains (K 128,127,32,31,2,1)     chains %llu | hw(swapped)!=fmaf chain %llu"
            " | natural pair order != fmaf chain %llu\n",
            (unsigned long long)chain_n, (unsigned long long)chain_bad,
            (unsigned long long)chain_diff_unswapped);
    }

    /* 6. NaN operands (e4m3 NaN codes decode to +-0x7FC0): with one NaN sign among a lane's
     *    inputs the result is the fmaf steps' NaN (where two NaNs of different signs meet,
     *    which one an op returns is the operand rule, not the canonical order). */
    {
        const uint16_t nv[] = {0x7FC0, 0xFFC0, 0x3F80, 0xBF80, 0x0000, 0x8000, 0x4300, 0xC2C0};
        const uint32_t accs[] = {0x00000000, 0x3F800000, 0xBF800000, 0x7FC00000, 0xFFC00000};
        long cases = 0, bad = 0;
        for (int ia = 0; ia < 5; ia++)
            for (int i1 = 0; i1 < 8; i1++)
                for (int j1 = 0; j1 < 8; j1++)
                    for (int i0 = 0; i0 < 8; i0++)
                        for (int j0 = 0; j0 < 8; j0++) {
                            uint16_t in[4] = {nv[i1], nv[j1], nv[i0], nv[j0]};
                            int pos = (accs[ia] & 0x7FFFFFFFu) > 0x7F800000u && !(accs[ia] >> 31);
                            int neg = (accs[ia] & 0x7FFFFFFFu) > 0x7F800000u && (accs[ia] >> 31);
                            for (int q = 0; q < 4; q++)
                                if ((in[q] & 0x7FFF) > 0x7F80) {
                                    if (in[q] & 0x8000)
                                        neg = 1;
                                    else
                                        pos = 1;
                                }
                            if (pos && neg) continue;
                            uint16_t A[32], B[32];
                            for (int j = 0; j < 16; j++) {
                                A[2 * j + 1] = in[0], B[2 * j + 1] = in[1], A[2 * j] = in[2],
                                          B[2 * j] = in[3];
                            }
                            const float acc = bitsf(accs[ia]);
                            const __m512 r = _mm512_dpbf16_ps(_mm512_set1_ps(acc),
                                                              (__m512bh)_mm512_loadu_si512(A),
                                                              (__m512bh)_mm512_loadu_si512(B));
                            const float h = _mm512_cvtss_f32(r);
                            volatile float x1 = bitsf((uint32_t)in[0] << 16),
                                           y1 = bitsf((uint32_t)in[1] << 16);
                            volatile float x0 = bitsf((uint32_t)in[2] << 16),
                                           y0 = bitsf((uint32_t)in[3] << 16);
                            const float m = fmaf(x0, y0, fmaf(x1, y1, acc));
                            cases++;
                            if (fbits(h) != fbits(m)) {
                                bad++;
                                if (bad <= 10)
                                    printf("  NaN case acc %08x hi %04x*%04x lo %04x*%04x: hw %08x "
                                           "fmaf %08x\n",
                                           accs[ia], in[0], in[1], in[2], in[3], fbits(h),
                                           fbits(m));
                            }
                        }
        printf("6. NaN operands, one NaN sign a lane          cases %ld | hw != fmaf steps %ld\n",
               cases, bad);
        chain_bad += (uint64_t)bad;
    }

    /* 7. DAZ / FTZ / MXCSR behaviour (results as printed; flags of the instruction alone). */
    printf("7. MXCSR: the result and the flags one vdpbf16ps raises, per MXCSR mode\n");
    flag_test("e4m3 normal (1*1 + 1*1 onto 1)", 1.0f, 0x3F80, 0x3F80, 0x3F80, 0x3F80);
    flag_test("inexact (1*1 - 1.5*2^-11 * 2^-24 onto 1)", 1.0f, 0x3F80, 0x3F80, 0x3A40, 0xB380);
    flag_test("subnormal bf16 input a0=2^-130", 0.0f, 0x0000, 0x0000, 0x0008, 0x3F80);
    flag_test("subnormal acc 2^-140", bitsf(0x00000200), 0x0000, 0x0000, 0x0000, 0x0000);
    flag_test("subnormal acc + 1*1", bitsf(0x00000200), 0x0000, 0x0000, 0x3F80, 0x3F80);
    flag_test("product 2^-70*2^-70 (underflow)", 0.0f, 0x0000, 0x0000, 0x1C80, 0x1C80);
    flag_test("subnormal sum 2^-126 - 0.996*2^-126", bitsf(0x00800000), 0x0000, 0x0000, 0x80FF,
              0x3F00);
    flag_test("overflow 2^127*4", 0.0f, 0x0000, 0x0000, 0x7F00, 0x4080);
    flag_test("NaN input", 1.0f, 0x7FC0, 0x3F80, 0x3F80, 0x3F80);
    flag_test("inf*0", 1.0f, 0x7F80, 0x0000, 0x3F80, 0x3F80);
    return (chain_bad != 0 || bad_total != 0) ? 1 : 0;
}
