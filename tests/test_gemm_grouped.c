/* Grouped GEMMs: M-grouped contiguous (m_indices with -1 padding, psum with gaps, with and
 * without ensure_zero_padding), masked, K-grouped (tn, nt, bf16; empty groups, K tails, psum).
 * Each result row is checked bitwise against the dense GEMM of its group, against a float64
 * oracle on the dequantised operands, for canaries in rows that must not be written, and for
 * invariance over ISA paths and thread counts; then the bad inputs. */
#include "ts_prng.h"
#include "ts_test.h"

#include "tilestack/gemm.h"
#include "tilestack/numerics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CANARY32 0x7FA5A5A5u /* a NaN no GEMM writes */

/* ------------------------------------------------------------------ data */

static void *rand_e4m3(uint64_t seed, int64_t n) {
    uint8_t *v = (uint8_t *)malloc((size_t)n + 1);
    ts_prng p = ts_prng_seed(seed);
    for (int64_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)ts_prng_u32(&p);
        v[i] = (b & 0x7F) == 0x7F ? 0 : b;
    }
    return v;
}

static void *rand_bytes(uint64_t seed, int64_t n) {
    uint8_t *v = (uint8_t *)malloc((size_t)n + 1);
    ts_prng p = ts_prng_seed(seed);
    for (int64_t i = 0; i < n; i++) v[i] = (uint8_t)ts_prng_u32(&p);
    return v;
}

static uint16_t *rand_bf16v(uint64_t seed, int64_t n) {
    uint16_t *v = (uint16_t *)malloc((size_t)n * 2 + 2);
    ts_prng p = ts_prng_seed(seed);
    for (int64_t i = 0; i < n; i++) v[i] = ts_f32_to_bf16(ts_prng_uniform(&p) * 2.0f);
    return v;
}

/* Scales: powers of two in [2^-4, 2^3], or arbitrary positive values (SM90 f32 semantics). */
static float *rand_scales(uint64_t seed, int64_t n, bool pow2) {
    float *v = (float *)malloc((size_t)n * 4 + 4);
    ts_prng p = ts_prng_seed(seed);
    for (int64_t i = 0; i < n; i++)
        v[i] = pow2 ? ldexpf(1.0f, (int)(ts_prng_u32(&p) % 8) - 4)
                    : 0.05f + fabsf(ts_prng_uniform(&p));
    return v;
}

static float *canary_f32(int64_t n) {
    float *v = (float *)malloc((size_t)n * 4 + 4);
    uint32_t c = CANARY32;
    for (int64_t i = 0; i < n; i++) memcpy(&v[i], &c, 4);
    return v;
}

static bool is_canary(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u == CANARY32;
}

/* One dense operand [rows, k] for the oracle: K-major data, row-major f32 scales
 * [ceil(rows/gmn), ceil(k/gk)] (NULL: bf16). */
typedef struct gop {
    const void *x;
    ts_dtype dt;
    int64_t ldx; /* elements (fp4: bytes) per row */
    const float *sf;
    int64_t ldsf, gmn, gk;
} gop;

static double dqv(const gop *o, int64_t r, int64_t k) {
    double v;
    if (o->dt == TS_BF16) return ts_bf16_to_f32(((const uint16_t *)o->x)[r * o->ldx + k]);
    if (o->dt == TS_E2M1X2) {
        uint8_t byte = ((const uint8_t *)o->x)[r * o->ldx + k / 2];
        v = ts_e2m1_to_f32((byte >> (4 * (k & 1))) & 0xF);
    } else {
        v = ts_e4m3_to_f32(((const uint8_t *)o->x)[r * o->ldx + k]);
    }
    return v * o->sf[(r / o->gmn) * o->ldsf + k / o->gk];
}

static double dot_ref(const gop *a, int64_t ra, const gop *b, int64_t rb, int64_t k) {
    double s = 0;
    for (int64_t i = 0; i < k; i++) s += dqv(a, ra, i) * dqv(b, rb, i);
    return s;
}

/* calc_diff over paired lists. */
typedef struct diffacc { double xy, xx; } diffacc;
static void diff_add(diffacc *d, double x, double y) { d->xy += x * y, d->xx += x * x + y * y; }
static double diff_get(const diffacc *d) { return d->xx == 0 ? 0 : 1 - 2 * d->xy / d->xx; }

/* ------------------------------------------------------------------ M-grouped problem */

enum { G_MAX = 8 };

typedef struct mproblem {
    int64_t G, M, N, K;
    bool bf16, fp4b, pow2;
    void *a;     /* [M, K] */
    float *sfa;  /* [M, ceil(K/128)] */
    void *b;     /* [G, N, K] (fp4: [G, N, K/2]) */
    float *sfb;  /* [G, ceil(N/128), ceil(K/128)], or [G, N, ceil(K/32)] for fp4 */
    ts_tensor ta, tsa, tb, tsb;
    int64_t ra[2], rb[2];
} mproblem;

static mproblem mp_make(int64_t G, int64_t M, int64_t N, int64_t K, bool bf16, bool fp4b,
                        uint64_t seed) {
    mproblem p;
    memset(&p, 0, sizeof p);
    p.G = G, p.M = M, p.N = N, p.K = K, p.bf16 = bf16, p.fp4b = fp4b, p.pow2 = fp4b;
    const int64_t kb = (K + 127) / 128, nb = (N + 127) / 128, kb32 = (K + 31) / 32;
    if (bf16) {
        p.a = rand_bf16v(seed, M * K);
        p.b = rand_bf16v(seed + 1, G * N * K);
        p.ta = ts_tensor_2d(p.a, TS_BF16, M, K);
        p.tb = ts_tensor_3d(p.b, TS_BF16, G, N, K);
        return p;
    }
    p.a = rand_e4m3(seed, M * K);
    p.sfa = rand_scales(seed + 2, M * kb, p.pow2);
    p.ta = ts_tensor_2d(p.a, TS_E4M3, M, K);
    p.tsa = ts_tensor_2d(p.sfa, TS_F32, M, kb);
    p.ra[0] = 1, p.ra[1] = 128;
    if (fp4b) {
        p.b = rand_bytes(seed + 1, G * N * K / 2);
        p.sfb = rand_scales(seed + 3, G * N * kb32, true);
        p.tb = ts_tensor_3d(p.b, TS_E2M1X2, G, N, K / 2);
        p.tsb = ts_tensor_3d(p.sfb, TS_F32, G, N, kb32);
        p.rb[0] = 1, p.rb[1] = 32;
    } else {
        p.b = rand_e4m3(seed + 1, G * N * K);
        p.sfb = rand_scales(seed + 3, G * nb * kb, p.pow2);
        p.tb = ts_tensor_3d(p.b, TS_E4M3, G, N, K);
        p.tsb = ts_tensor_3d(p.sfb, TS_F32, G, nb, kb);
        p.rb[0] = 128, p.rb[1] = 128;
    }
    return p;
}

static void mp_free(mproblem *p) { free(p->a), free(p->sfa), free(p->b), free(p->sfb); }

static gop mp_gop_a(const mproblem *p, const void *a, const float *sfa) {
    gop o = {a, p->bf16 ? TS_BF16 : TS_E4M3, p->K, sfa, (p->K + 127) / 128, 1, 128};
    return o;
}

static gop mp_gop_b(const mproblem *p, int64_t g) {
    gop o;
    memset(&o, 0, sizeof o);
    if (p->bf16) {
        o.x = (const uint16_t *)p->b + g * p->N * p->K, o.dt = TS_BF16, o.ldx = p->K;
    } else if (p->fp4b) {
        int64_t kb32 = (p->K + 31) / 32;
        o.x = (const uint8_t *)p->b + g * p->N * p->K / 2, o.dt = TS_E2M1X2, o.ldx = p->K / 2;
        o.sf = p->sfb + g * p->N * kb32, o.ldsf = kb32, o.gmn = 1, o.gk = 32;
    } else {
        int64_t kb = (p->K + 127) / 128, nb = (p->N + 127) / 128;
        o.x = (const uint8_t *)p->b + g * p->N * p->K, o.dt = TS_E4M3, o.ldx = p->K;
        o.sf = p->sfb + g * nb * kb, o.ldsf = kb, o.gmn = 128, o.gk = 128;
    }
    return o;
}

/* Dense D = A · B[g]ᵀ over all M rows of A (f32 or bf16 out). */
static ts_status mp_dense(const mproblem *p, const ts_tensor *a, const ts_tensor *sa, int64_t g,
                          void *d, ts_dtype dt) {
    ts_tensor bg = p->tb, sbg = p->tsb;
    bg.ndim = 2, bg.shape[0] = p->tb.shape[1], bg.shape[1] = p->tb.shape[2];
    bg.strides[0] = p->tb.strides[1], bg.strides[1] = p->tb.strides[2];
    bg.data = (char *)p->b + g * p->tb.strides[0] * (int64_t)ts_dtype_size(p->tb.dtype);
    ts_tensor dv = ts_tensor_2d(d, dt, a->shape[0], p->N);
    if (p->bf16) return ts_bf16_gemm_nt(a, &bg, &dv, NULL, NULL);
    sbg.ndim = 2, sbg.shape[0] = p->tsb.shape[1], sbg.shape[1] = p->tsb.shape[2];
    sbg.strides[0] = p->tsb.strides[1], sbg.strides[1] = p->tsb.strides[2];
    sbg.data = p->sfb + g * p->tsb.strides[0];
    return ts_fp8_fp4_gemm_nt(a, sa, &bg, &sbg, &dv, NULL, NULL, p->ra, p->rb, NULL, false);
}

/* Contiguous call, nt or nn (the nn view of the same weights). */
static ts_status mp_contig(const mproblem *p, bool nn, void *d, ts_dtype dt, const int32_t *lay,
                           int64_t nlay, bool psum, bool zero_pad) {
    ts_tensor dv = ts_tensor_2d(d, dt, p->M, p->N);
    ts_tensor lv = ts_tensor_1d((void *)lay, TS_I32, nlay);
    ts_tensor b = p->tb, sb = p->tsb;
    if (nn) { /* [G, K, N] view of the [G, N, K] data, scales transposed alongside */
        b.shape[1] = p->tb.shape[2], b.shape[2] = p->tb.shape[1];
        b.strides[1] = p->tb.strides[2], b.strides[2] = p->tb.strides[1];
        sb.shape[1] = p->tsb.shape[2], sb.shape[2] = p->tsb.shape[1];
        sb.strides[1] = p->tsb.strides[2], sb.strides[2] = p->tsb.strides[1];
    }
    if (p->bf16)
        return nn ? ts_m_grouped_bf16_gemm_nn_contiguous(&p->ta, &b, &dv, &lv, NULL, psum, zero_pad, 0)
                  : ts_m_grouped_bf16_gemm_nt_contiguous(&p->ta, &b, &dv, &lv, NULL, psum, zero_pad, 0);
    if (nn)
        return ts_m_grouped_fp8_fp4_gemm_nn_contiguous(&p->ta, &p->tsa, &b, &sb, &dv, &lv, NULL,
                                                       p->ra, p->rb, NULL, false, psum, zero_pad);
    return ts_m_grouped_fp8_fp4_gemm_nt_contiguous(&p->ta, &p->tsa, &b, &sb, &dv, &lv, NULL, p->ra,
                                                   p->rb, NULL, false, psum, zero_pad, 0);
}

/* row_group[r]: the group row r is computed with, -1: never written, -2: exact zero. Checks
 * bits against the dense GEMM of each group (f32 and bf16 D), the oracle and the canaries. */
static void mp_check_contig(ts_test_ctx *ts_t_, const mproblem *p, const int32_t *lay,
                            int64_t nlay, bool psum, bool zero_pad, const int64_t *row_group) {
    const int64_t M = p->M, N = p->N;
    float *dense = (float *)malloc((size_t)(p->G * M * N + 1) * 4);
    uint16_t *dense16 = (uint16_t *)malloc((size_t)(p->G * M * N + 1) * 2);
    for (int64_t g = 0; g < p->G; g++) {
        TS_CHECK_STATUS(mp_dense(p, &p->ta, &p->tsa, g, dense + g * M * N, TS_F32), TS_OK);
        TS_CHECK_STATUS(mp_dense(p, &p->ta, &p->tsa, g, dense16 + g * M * N, TS_BF16), TS_OK);
    }
    for (int nn = 0; nn < 2; nn++) {
        float *d = canary_f32(M * N);
        uint16_t *d16 = (uint16_t *)malloc((size_t)(M * N + 1) * 2);
        for (int64_t i = 0; i < M * N; i++) d16[i] = 0x7FA5;
        TS_CHECK_STATUS(mp_contig(p, nn, d, TS_F32, lay, nlay, psum, zero_pad), TS_OK);
        TS_CHECK_STATUS(mp_contig(p, nn, d16, TS_BF16, lay, nlay, psum, zero_pad), TS_OK);
        diffacc df = {0, 0};
        int64_t bad = 0, bad16 = 0, badc = 0;
        for (int64_t r = 0; r < M; r++)
            for (int64_t j = 0; j < N; j++) {
                float v = d[r * N + j];
                uint16_t v16 = d16[r * N + j];
                int64_t g = row_group[r];
                if (g == -1) {
                    badc += !is_canary(v) || v16 != 0x7FA5;
                } else if (g == -2) {
                    uint32_t u;
                    memcpy(&u, &v, 4);
                    badc += u != 0 || v16 != 0;
                } else {
                    bad += memcmp(&v, &dense[g * M * N + r * N + j], 4) != 0;
                    bad16 += v16 != dense16[g * M * N + r * N + j];
                    gop ga = mp_gop_a(p, p->a, p->sfa), gb = mp_gop_b(p, g);
                    diff_add(&df, v, dot_ref(&ga, r, &gb, j, p->K));
                }
            }
        TS_CHECK_MSG(bad == 0 && bad16 == 0, "nn=%d psum=%d: %lld f32 / %lld bf16 values differ "
                     "from the dense GEMM of their group", nn, (int)psum, (long long)bad,
                     (long long)bad16);
        TS_CHECK_MSG(badc == 0, "nn=%d psum=%d zero_pad=%d: %lld skipped/gap values wrong", nn,
                     (int)psum, (int)zero_pad, (long long)badc);
        TS_CHECK_MSG(diff_get(&df) <= 1e-6, "calc_diff vs dequantised oracle %g", diff_get(&df));
        free(d), free(d16);
    }
    free(dense), free(dense16);
}

TS_TEST(gemm_m_grouped_m_indices) {
    const int al0 = ts_get_mk_alignment_for_contiguous_layout();
    TS_CHECK_STATUS(ts_set_mk_alignment_for_contiguous_layout(16), TS_OK);
    /* Blocks of 16 rows: g2 x 2 blocks (tail -1 rows), a -1 block, g0 (5 rows + 11 -1),
     * g2 again, g3 with no padding, a partial last block of g1. G = 5: group 4 has no rows. */
    const int64_t G = 5, M = 16 * 7 + 9, N = 37, K = 200;
    int32_t lay[16 * 7 + 9];
    int64_t rg[16 * 7 + 9];
    const int blk[8] = {2, 2, -1, 0, 2, 3, -1, 1};
    const int valid[8] = {16, 9, 0, 5, 16, 16, 0, 7};
    for (int64_t r = 0; r < M; r++) {
        int b = (int)(r / 16), w = (int)(r % 16);
        lay[r] = (blk[b] >= 0 && w < valid[b]) ? blk[b] : -1;
        rg[r] = blk[b];
    }
    for (int kind = 0; kind < 3; kind++) {
        mproblem p = mp_make(G, M, N, kind == 2 ? 256 : K, kind == 1, kind == 2, 1000 + kind);
        mp_check_contig(ts_t_, &p, lay, M, false, false, rg);
        mp_free(&p);
    }
    ts_set_mk_alignment_for_contiguous_layout(al0);
}

TS_TEST(gemm_m_grouped_psum) {
    const int al0 = ts_get_mk_alignment_for_contiguous_layout();
    TS_CHECK_STATUS(ts_set_mk_alignment_for_contiguous_layout(8), TS_OK);
    /* ends: g0 [0,5) gap 5..8; g1 empty (end == prev); g2 [8,8) empty at the aligned start;
     * g3 [8,24) no gap; g4 [24,27) gap 27..32; rows 32..34 past the layout. */
    const int32_t ends[5] = {5, 5, 8, 24, 27};
    const int64_t G = 5, M = 35, N = 21;
    for (int zp = 0; zp < 2; zp++) {
        int64_t rg[35];
        for (int64_t r = 0; r < M; r++)
            rg[r] = r < 5 ? 0 : r < 8 ? (zp ? -2 : -1) : r < 24 ? 3 : r < 27 ? 4 : r < 32 ? (zp ? -2 : -1) : -1;
        for (int kind = 0; kind < 3; kind++) {
            mproblem p = mp_make(G, M, N, kind == 2 ? 128 : 130, kind == 1, kind == 2, 2000 + kind);
            mp_check_contig(ts_t_, &p, ends, G, true, zp, rg);
            mp_free(&p);
        }
    }
    ts_set_mk_alignment_for_contiguous_layout(al0);
}

/* ------------------------------------------------------------------ masked */

TS_TEST(gemm_m_grouped_masked) {
    const int64_t G = 4, N = 40, K = 160;
    /* round 1: every group streamed (<= TS__GEMM_SMALL_M rows); round 2 mixes streamed groups
     * with blocked ones (60 and 49 rows), which the driver runs on separate paths */
    static const int32_t masks[2][4] = {{0, 7, 20, 13}, {7, 60, 0, 49}};
    static const int64_t mms[2] = {20, 64};
    for (int round = 0; round < 2; round++)
    for (int kind = 0; kind < 3; kind++) {
        const int64_t MM = mms[round];
        const int32_t *masked = masks[round];
        const bool bf16 = kind == 1, fp4 = kind == 2;
        const int64_t Kk = fp4 ? 192 : K;
        /* A as G stacked [MM, K] problems: one contiguous [G*MM, K] mproblem reused. */
        mproblem p = mp_make(G, G * MM, N, Kk, bf16, fp4, 3000 + 10 * round + kind);
        ts_tensor a3 = p.ta, sa3 = p.tsa;
        a3.ndim = 3, a3.shape[0] = G, a3.shape[1] = MM, a3.shape[2] = Kk;
        a3.strides[0] = MM * Kk, a3.strides[1] = Kk, a3.strides[2] = 1;
        if (!bf16) {
            int64_t kb = (Kk + 127) / 128;
            sa3.ndim = 3, sa3.shape[0] = G, sa3.shape[1] = MM, sa3.shape[2] = kb;
            sa3.strides[0] = MM * kb, sa3.strides[1] = kb, sa3.strides[2] = 1;
        }
        float *d = canary_f32(G * MM * N);
        ts_tensor dv = ts_tensor_3d(d, TS_F32, G, MM, N), mv = ts_tensor_1d((void *)masked, TS_I32, G);
        if (bf16)
            TS_CHECK_STATUS(ts_m_grouped_bf16_gemm_nt_masked(&a3, &p.tb, &dv, &mv, 10, NULL), TS_OK);
        else
            TS_CHECK_STATUS(ts_m_grouped_fp8_fp4_gemm_nt_masked(&a3, &sa3, &p.tb, &p.tsb, &dv, &mv, 10,
                                                                NULL, p.ra, p.rb, NULL, false),
                            TS_OK);
        /* The aliases give the same bits. */
        float *d2 = canary_f32(G * MM * N);
        ts_tensor dv2 = ts_tensor_3d(d2, TS_F32, G, MM, N);
        if (bf16)
            TS_CHECK_STATUS(ts_bf16_m_grouped_gemm_nt_masked(&a3, &p.tb, &dv2, &mv, 1, NULL), TS_OK);
        else
            TS_CHECK_STATUS(ts_fp8_m_grouped_gemm_nt_masked(&a3, &sa3, &p.tb, &p.tsb, &dv2, &mv, 1,
                                                            NULL, p.ra, p.rb, NULL, false),
                            TS_OK);
        TS_CHECK(memcmp(d, d2, (size_t)(G * MM * N) * 4) == 0);
        float *dense = (float *)malloc((size_t)(MM * N) * 4);
        int64_t bad = 0, badc = 0;
        diffacc df = {0, 0};
        for (int64_t g = 0; g < G; g++) {
            ts_tensor ag = ts_tensor_2d((char *)p.a + g * MM * Kk * (bf16 ? 2 : 1), p.ta.dtype, MM, Kk);
            ts_tensor sg = p.tsa;
            if (!bf16) sg.shape[0] = MM, sg.data = p.sfa + g * MM * p.tsa.shape[1];
            TS_CHECK_STATUS(mp_dense(&p, &ag, &sg, g, dense, TS_F32), TS_OK);
            gop ga = mp_gop_a(&p, p.a, p.sfa), gb = mp_gop_b(&p, g);
            for (int64_t r = 0; r < MM; r++)
                for (int64_t j = 0; j < N; j++) {
                    float v = d[(g * MM + r) * N + j];
                    if (r >= masked[g]) {
                        badc += !is_canary(v);
                    } else {
                        bad += memcmp(&v, &dense[r * N + j], 4) != 0;
                        diff_add(&df, v, dot_ref(&ga, g * MM + r, &gb, j, Kk));
                    }
                }
        }
        TS_CHECK_MSG(bad == 0, "round %d kind %d: %lld values differ from the dense GEMM", round,
                     kind, (long long)bad);
        TS_CHECK_MSG(badc == 0, "round %d kind %d: %lld masked values written", round, kind,
                     (long long)badc);
        TS_CHECK_MSG(diff_get(&df) <= 1e-6, "round %d kind %d: calc_diff %g", round, kind,
                     diff_get(&df));
        free(d), free(d2), free(dense);
        mp_free(&p);
    }
}

/* ------------------------------------------------------------------ K-grouped */

typedef struct kproblem {
    int64_t G, M, N, total, nsf;
    int64_t ks[G_MAX], start[G_MAX], sfo[G_MAX];
    int32_t ends[G_MAX];
    bool bf16, nt, psum;
    void *a, *b;       /* tn: [total, M], [total, N]; nt: flat */
    float *sfa, *sfb;  /* tn: [nsf, M], [nsf, N]; nt: [M, nsf], [N, nsf] */
    float *c;          /* [G, M, N] */
} kproblem;

static kproblem kp_make(int64_t G, int64_t M, int64_t N, const int64_t *ks, bool bf16, bool nt,
                        bool psum, int64_t al, uint64_t seed) {
    kproblem p;
    memset(&p, 0, sizeof p);
    p.G = G, p.M = M, p.N = N, p.bf16 = bf16, p.nt = nt, p.psum = psum;
    int64_t pos = 0, sf = 0, prev = 0;
    for (int64_t g = 0; g < G; g++) {
        p.ks[g] = ks[g];
        p.start[g] = psum ? (prev + al - 1) / al * al : pos;
        p.sfo[g] = sf;
        int64_t span = psum ? (ks[g] + al - 1) / al * al : ks[g];
        sf += (span + 127) / 128;
        pos = p.start[g] + ks[g];
        if (psum) {
            p.ends[g] = (int32_t)(ks[g] ? pos : prev);
            prev = p.ends[g];
            pos = prev;
        }
    }
    p.total = psum ? (prev + al - 1) / al * al : pos;
    p.nsf = sf;
    const int64_t total = p.total;
    if (bf16) {
        p.a = rand_bf16v(seed, total * M), p.b = rand_bf16v(seed + 1, total * N);
    } else {
        p.a = rand_e4m3(seed, total * M), p.b = rand_e4m3(seed + 1, total * N);
        p.sfa = rand_scales(seed + 2, sf * M, !nt), p.sfb = rand_scales(seed + 3, sf * N, !nt);
    }
    ts_prng r = ts_prng_seed(seed + 4);
    p.c = (float *)malloc((size_t)(G * M * N) * 4);
    for (int64_t i = 0; i < G * M * N; i++) p.c[i] = ts_prng_uniform(&r) * 32.0f;
    return p;
}

static void kp_free(kproblem *p) { free(p->a), free(p->b), free(p->sfa), free(p->sfb), free(p->c); }

/* Element (mn, k) of group g: tn reads rows of [total, MN]; nt the [MN, k_g] block. */
static double kp_val(const kproblem *p, bool isb, int64_t g, int64_t r, int64_t k) {
    const int64_t MN = isb ? p->N : p->M;
    const void *x = isb ? p->b : p->a;
    const float *sf = isb ? p->sfb : p->sfa;
    int64_t idx = p->nt ? p->start[g] * MN + r * p->ks[g] + k : (p->start[g] + k) * MN + r;
    if (p->bf16) return ts_bf16_to_f32(((const uint16_t *)x)[idx]);
    double s = p->nt ? sf[r * p->nsf + p->sfo[g] + k / 128] : sf[(p->sfo[g] + k / 128) * MN + r];
    return ts_e4m3_to_f32(((const uint8_t *)x)[idx]) * s;
}

static ts_status kp_run(const kproblem *p, float *d, bool with_c) {
    ts_tensor dv = ts_tensor_3d(d, TS_F32, p->G, p->M, p->N);
    ts_tensor cv = ts_tensor_3d(p->c, TS_F32, p->G, p->M, p->N);
    ts_tensor lv = ts_tensor_1d((void *)p->ends, TS_I32, p->G);
    const ts_tensor *c = with_c ? (d == p->c ? &dv : &cv) : NULL;
    const ts_tensor *lay = p->psum ? &lv : NULL;
    if (p->nt) {
        ts_tensor a = ts_tensor_1d(p->a, TS_E4M3, p->total * p->M);
        ts_tensor b = ts_tensor_1d(p->b, TS_E4M3, p->total * p->N);
        ts_tensor sa = ts_tensor_2d(p->sfa, TS_F32, p->M, p->nsf);
        ts_tensor sb = ts_tensor_2d(p->sfb, TS_F32, p->N, p->nsf);
        return ts_k_grouped_fp8_gemm_nt_contiguous(&a, &sa, &b, &sb, &dv, p->ks, p->G, NULL, c,
                                                   NULL, NULL, false);
    }
    ts_tensor a = ts_tensor_2d(p->a, p->bf16 ? TS_BF16 : TS_E4M3, p->total, p->M);
    ts_tensor b = ts_tensor_2d(p->b, p->bf16 ? TS_BF16 : TS_E4M3, p->total, p->N);
    if (p->bf16)
        return ts_k_grouped_bf16_gemm_tn_contiguous(&a, &b, &dv, p->ks, p->G, lay, c, NULL, p->psum);
    ts_tensor sa = ts_tensor_2d(p->sfa, TS_F32, p->nsf, p->M);
    ts_tensor sb = ts_tensor_2d(p->sfb, TS_F32, p->nsf, p->N);
    return ts_k_grouped_fp8_gemm_tn_contiguous(&a, &sa, &b, &sb, &dv, p->ks, p->G, lay, c, NULL,
                                               NULL, p->psum);
}

/* Dense D[g] = C[g] + A_g · B_gᵀ on views of group g's slice. */
static ts_status kp_dense(const kproblem *p, int64_t g, float *d) {
    const int64_t M = p->M, N = p->N, k = p->ks[g];
    const int64_t es = p->bf16 ? 2 : 1;
    ts_tensor dv = ts_tensor_2d(d, TS_F32, M, N), cv = ts_tensor_2d(p->c + g * M * N, TS_F32, M, N);
    ts_tensor a, b, sa, sb;
    const int64_t nsf = (k + 127) / 128;
    if (p->nt) {
        a = ts_tensor_2d((char *)p->a + p->start[g] * M, TS_E4M3, M, k);
        b = ts_tensor_2d((char *)p->b + p->start[g] * N, TS_E4M3, N, k);
        sa = ts_tensor_2d(p->sfa + p->sfo[g], TS_F32, M, nsf), sa.strides[0] = p->nsf;
        sb = ts_tensor_2d(p->sfb + p->sfo[g], TS_F32, N, nsf), sb.strides[0] = p->nsf;
    } else {
        ts_dtype dt = p->bf16 ? TS_BF16 : TS_E4M3;
        a = ts_tensor_2d((char *)p->a + p->start[g] * M * es, dt, M, k), a.strides[0] = 1, a.strides[1] = M;
        b = ts_tensor_2d((char *)p->b + p->start[g] * N * es, dt, N, k), b.strides[0] = 1, b.strides[1] = N;
        if (!p->bf16) {
            sa = ts_tensor_2d(p->sfa ? p->sfa + p->sfo[g] * M : NULL, TS_F32, M, nsf), sa.strides[0] = 1, sa.strides[1] = M;
            sb = ts_tensor_2d(p->sfb ? p->sfb + p->sfo[g] * N : NULL, TS_F32, N, nsf), sb.strides[0] = 1, sb.strides[1] = N;
        }
    }
    if (p->bf16) return ts_bf16_gemm_nt(&a, &b, &dv, &cv, NULL);
    const int64_t r[2] = {1, 128};
    return ts_fp8_fp4_gemm_nt(&a, &sa, &b, &sb, &dv, &cv, NULL, r, r, NULL, true);
}

static void kp_check(ts_test_ctx *ts_t_, const kproblem *p, const char *what) {
    const int64_t M = p->M, N = p->N, MN = M * N;
    float *d = canary_f32(p->G * MN), *dal = (float *)malloc((size_t)(p->G * MN) * 4);
    float *dense = (float *)malloc((size_t)MN * 4 + 4);
    TS_CHECK_STATUS(kp_run(p, d, true), TS_OK);
    /* C aliasing D gives the same bits. */
    kproblem q = *p;
    memcpy(dal, p->c, (size_t)(p->G * MN) * 4);
    q.c = dal;
    TS_CHECK_STATUS(kp_run(&q, dal, true), TS_OK);
    TS_CHECK_MSG(memcmp(dal, d, (size_t)(p->G * MN) * 4) == 0, "%s: c aliasing d differs", what);
    int64_t bad = 0;
    diffacc df = {0, 0};
    for (int64_t g = 0; g < p->G; g++) {
        TS_CHECK_STATUS(kp_dense(p, g, dense), TS_OK);
        bad += memcmp(dense, d + g * MN, (size_t)MN * 4) != 0;
        if (p->ks[g] == 0) bad += memcmp(d + g * MN, p->c + g * MN, (size_t)MN * 4) != 0;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = p->c[g * MN + i * N + j];
                for (int64_t k = 0; k < p->ks[g]; k++)
                    s += kp_val(p, false, g, i, k) * kp_val(p, true, g, j, k);
                diff_add(&df, d[g * MN + i * N + j], s);
            }
    }
    TS_CHECK_MSG(bad == 0, "%s: %lld groups differ from the dense GEMM (or D != C when k = 0)",
                 what, (long long)bad);
    TS_CHECK_MSG(diff_get(&df) <= 1e-6, "%s: calc_diff %g", what, diff_get(&df));
    /* Without C: k = 0 groups are zeros. */
    float *d0 = canary_f32(p->G * MN);
    TS_CHECK_STATUS(kp_run(p, d0, false), TS_OK);
    for (int64_t g = 0; g < p->G; g++)
        if (p->ks[g] == 0)
            for (int64_t i = 0; i < MN; i++) TS_CHECK(d0[g * MN + i] == 0.0f && !signbit(d0[g * MN + i]));
    free(d), free(dal), free(dense), free(d0);
}

TS_TEST(gemm_k_grouped) {
    const int al0 = ts_get_mk_alignment_for_contiguous_layout();
    const int64_t ks[5] = {0, 100, 37, 256, 0};
    const int64_t ks2[4] = {128, 0, 384, 1};
    for (int v = 0; v < 5; v++) {
        /* v: 0 fp8 tn, 1 fp8 tn psum, 2 fp8 nt, 3 bf16 tn, 4 bf16 tn psum */
        const bool psum = v == 1 || v == 4, nt = v == 2, bf16 = v >= 3;
        if (psum) ts_set_mk_alignment_for_contiguous_layout(32);
        kproblem p = kp_make(5, 19, 23, ks, bf16, nt, psum, 32, 4000 + v);
        kp_check(ts_t_, &p, nt ? "fp8 nt" : bf16 ? (psum ? "bf16 tn psum" : "bf16 tn") : (psum ? "fp8 tn psum" : "fp8 tn"));
        kp_free(&p);
        kproblem p2 = kp_make(4, 7, 33, ks2, bf16, nt, psum, 32, 4100 + v);
        kp_check(ts_t_, &p2, "second shape");
        kp_free(&p2);
        ts_set_mk_alignment_for_contiguous_layout(al0);
    }
}

/* ------------------------------------------------------------------ invariance */

TS_TEST(gemm_grouped_isa_and_threads_bitwise) {
    const ts_isa isa0 = ts_get_isa();
    const int th0 = ts_get_num_threads();
    const int al0 = ts_get_mk_alignment_for_contiguous_layout();
    ts_set_mk_alignment_for_contiguous_layout(32);
    const int64_t G = 3, M = 32 * 5, N = 70, K = 300;
    int32_t lay[32 * 5];
    const int blk[5] = {1, 1, -1, 0, 2};
    for (int64_t r = 0; r < M; r++) lay[r] = (r % 32) < 29 ? blk[r / 32] : -1;
    const int64_t ks[3] = {300, 0, 129};
    mproblem mp = mp_make(G, M, N, K, false, false, 5000);
    kproblem kp = kp_make(3, 40, 50, ks, false, false, false, 32, 5001);
    float *ref = canary_f32(M * N), *d = canary_f32(M * N);
    float *kref = (float *)malloc((size_t)(3 * 40 * 50) * 4), *kd = (float *)malloc((size_t)(3 * 40 * 50) * 4);
    TS_CHECK_STATUS(ts_set_isa(TS_ISA_GENERIC), TS_OK);
    TS_CHECK_STATUS(ts_set_num_threads(1), TS_OK);
    TS_CHECK_STATUS(mp_contig(&mp, false, ref, TS_F32, lay, M, false, false), TS_OK);
    TS_CHECK_STATUS(kp_run(&kp, kref, true), TS_OK);
    int isas[TS_ISA_COUNT_];
    const int nisa = ts_test_isas(isas);
    const int ths[4] = {1, 2, 3, 7};
    for (int i = 0; i < nisa; i++) {
        if (ts_set_isa((ts_isa)isas[i]) != TS_OK) continue;
        for (int t = 0; t < 4; t++) {
            TS_CHECK_STATUS(ts_set_num_threads(ths[t]), TS_OK);
            free(d);
            d = canary_f32(M * N);
            TS_CHECK_STATUS(mp_contig(&mp, false, d, TS_F32, lay, M, false, false), TS_OK);
            TS_CHECK_MSG(memcmp(d, ref, (size_t)(M * N) * 4) == 0, "m-grouped: isa %s threads %d",
                         ts_isa_name((ts_isa)isas[i]), ths[t]);
            memset(kd, 0, (size_t)(3 * 40 * 50) * 4);
            TS_CHECK_STATUS(kp_run(&kp, kd, true), TS_OK);
            TS_CHECK_MSG(memcmp(kd, kref, (size_t)(3 * 40 * 50) * 4) == 0,
                         "k-grouped: isa %s threads %d", ts_isa_name((ts_isa)isas[i]), ths[t]);
        }
    }
    free(ref), free(d), free(kref), free(kd);
    mp_free(&mp), kp_free(&kp);
    ts_set_isa(isa0);
    ts_set_num_threads(th0);
    ts_set_mk_alignment_for_contiguous_layout(al0);
}

/* ------------------------------------------------------------------ config and bad input */

TS_TEST(gemm_grouped_alignment_config) {
    const int al0 = ts_get_mk_alignment_for_contiguous_layout();
    TS_CHECK_EQ_INT(al0, 128);
    TS_CHECK_STATUS(ts_set_mk_alignment_for_contiguous_layout(0), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_set_mk_alignment_for_contiguous_layout(-32), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_set_mk_alignment_for_contiguous_layout(1 << 20), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_EQ_INT(ts_get_mk_alignment_for_contiguous_layout(), 128);
    TS_CHECK_STATUS(ts_set_mk_alignment_for_contiguous_layout(64), TS_OK);
    TS_CHECK_EQ_INT(ts_get_mk_alignment_for_contiguous_layout(), 64);
    TS_CHECK_STATUS(ts_set_mk_alignment_for_contiguous_layout(al0), TS_OK);
    TS_CHECK_EQ_INT(ts_get_theoretical_mk_alignment_for_contiguous_layout(0), 128);
    TS_CHECK_EQ_INT(ts_get_theoretical_mk_alignment_for_contiguous_layout(20), 128);
}

static bool all_canary(const float *d, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!is_canary(d[i])) return false;
    return true;
}

TS_TEST(gemm_grouped_bad_input) {
    const int al0 = ts_get_mk_alignment_for_contiguous_layout();
    ts_set_mk_alignment_for_contiguous_layout(8);
    const int64_t G = 3, M = 24, N = 16, K = 128;
    mproblem p = mp_make(G, M, N, K, false, false, 6000);
    float *d = canary_f32(M * N);
    ts_tensor dv = ts_tensor_2d(d, TS_F32, M, N), t;
    int32_t lay[24];
    for (int i = 0; i < 24; i++) lay[i] = i < 8 ? 0 : i < 13 ? 2 : i < 16 ? -1 : 1;
    ts_tensor lv = ts_tensor_1d(lay, TS_I32, M);
#define MC(A, SA, B, SB, D, L, PS) \
    ts_m_grouped_fp8_fp4_gemm_nt_contiguous(A, SA, B, SB, D, L, NULL, p.ra, p.rb, NULL, false, PS, true, 0)
    TS_CHECK_STATUS(MC(&p.ta, &p.tsa, &p.tb, &p.tsb, &dv, &lv, false), TS_OK); /* valid baseline */
    free(d), d = canary_f32(M * N), dv.data = d;
    TS_CHECK_STATUS(MC(&p.ta, &p.tsa, &p.tb, &p.tsb, &dv, NULL, false), TS_ERR_NULL_POINTER);
    TS_CHECK_STATUS(MC(&p.ta, NULL, &p.tb, &p.tsb, &dv, &lv, false), TS_ERR_NULL_POINTER);
    /* group ids >= G, < -1; a segment starting inside a block; -1 block followed by ids */
    int32_t badl[24];
    const struct { int row; int32_t v; } cases[] = {{3, 3}, {3, -2}, {12, 1}, {16, -1}};
    for (size_t c = 0; c < 4; c++) {
        memcpy(badl, lay, sizeof lay);
        badl[cases[c].row] = cases[c].v;
        if (c == 3) badl[17] = 1, badl[16] = -1; /* block 2 starts with -1 but holds group 1 */
        ts_tensor bl = ts_tensor_1d(badl, TS_I32, M);
        TS_CHECK_STATUS(MC(&p.ta, &p.tsa, &p.tb, &p.tsb, &dv, &bl, false), TS_ERR_INVALID_ARGUMENT);
    }
    /* wrong layout length / dtype */
    t = lv, t.shape[0] = M - 1;
    TS_CHECK_STATUS(MC(&p.ta, &p.tsa, &p.tb, &p.tsb, &dv, &t, false), TS_ERR_SHAPE);
    t = lv, t.dtype = TS_I64;
    TS_CHECK_STATUS(MC(&p.ta, &p.tsa, &p.tb, &p.tsb, &dv, &t, false), TS_ERR_DTYPE);
    /* psum: decreasing, inside the previous padding, past M_sum */
    const int32_t ps_bad[3][3] = {{8, 5, 20}, {5, 7, 20}, {8, 16, 25}};
    for (int c = 0; c < 3; c++) {
        ts_tensor pl = ts_tensor_1d((void *)ps_bad[c], TS_I32, G);
        TS_CHECK_STATUS(MC(&p.ta, &p.tsa, &p.tb, &p.tsb, &dv, &pl, true), TS_ERR_INVALID_ARGUMENT);
    }
    ts_tensor pl = ts_tensor_1d(lay, TS_I32, G + 1);
    TS_CHECK_STATUS(MC(&p.ta, &p.tsa, &p.tb, &p.tsb, &dv, &pl, true), TS_ERR_SHAPE);
    /* shapes and dtypes */
    t = dv, t.shape[1] = N - 1;
    TS_CHECK_STATUS(MC(&p.ta, &p.tsa, &p.tb, &p.tsb, &t, &lv, false), TS_ERR_SHAPE);
    t = dv, t.dtype = TS_I32;
    TS_CHECK_STATUS(MC(&p.ta, &p.tsa, &p.tb, &p.tsb, &t, &lv, false), TS_ERR_DTYPE);
    t = p.tb, t.shape[2] = K - 1;
    TS_CHECK_STATUS(MC(&p.ta, &p.tsa, &t, &p.tsb, &dv, &lv, false), TS_ERR_SHAPE);
    t = p.tb, t.ndim = 2;
    TS_CHECK_STATUS(MC(&p.ta, &p.tsa, &t, &p.tsb, &dv, &lv, false), TS_ERR_SHAPE);
    t = p.tsb, t.shape[0] = G - 1;
    TS_CHECK_STATUS(MC(&p.ta, &p.tsa, &p.tb, &t, &dv, &lv, false), TS_ERR_SHAPE);
    t = p.tsa, t.shape[0] = M - 1;
    TS_CHECK_STATUS(MC(&p.ta, &t, &p.tb, &p.tsb, &dv, &lv, false), TS_ERR_SHAPE);
    t = p.ta, t.dtype = TS_BF16;
    TS_CHECK_STATUS(MC(&t, &p.tsa, &p.tb, &p.tsb, &dv, &lv, false), TS_ERR_DTYPE);
    t = p.ta, t.strides[0] = 1, t.strides[1] = M; /* MN-major A */
    TS_CHECK_STATUS(MC(&t, &p.tsa, &p.tb, &p.tsb, &dv, &lv, false), TS_ERR_STRIDE);
    const int64_t r128[2] = {128, 128};
    TS_CHECK_STATUS(ts_m_grouped_fp8_fp4_gemm_nt_contiguous(&p.ta, &p.tsa, &p.tb, &p.tsb, &dv, &lv, NULL,
                                                            r128, p.rb, NULL, false, false, true, 0),
                    TS_ERR_INVALID_ARGUMENT);
    /* d overlapping an input */
    ts_tensor da = ts_tensor_2d(p.b, TS_F32, M, N);
    TS_CHECK_STATUS(MC(&p.ta, &p.tsa, &p.tb, &p.tsb, &da, &lv, false), TS_ERR_ALIASING);
    /* rows of d overlapping each other */
    t = dv, t.strides[0] = N - 1;
    TS_CHECK_STATUS(MC(&p.ta, &p.tsa, &p.tb, &p.tsb, &t, &lv, false), TS_ERR_STRIDE);
    TS_CHECK(all_canary(d, M * N));

    /* fp4 weights need power-of-two f32 scales (ue8m0 cast) unless disable_ue8m0_cast */
    mproblem p4 = mp_make(G, M, N, K, false, true, 6001);
    p4.sfb[5] = 0.3f;
    TS_CHECK_STATUS(ts_m_grouped_fp8_fp4_gemm_nt_contiguous(&p4.ta, &p4.tsa, &p4.tb, &p4.tsb, &dv, &lv,
                                                            NULL, p4.ra, p4.rb, NULL, false, false, true, 0),
                    TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(all_canary(d, M * N));
    TS_CHECK_STATUS(ts_m_grouped_fp8_fp4_gemm_nt_contiguous(&p4.ta, &p4.tsa, &p4.tb, &p4.tsb, &dv, &lv,
                                                            NULL, p4.ra, p4.rb, NULL, true, false, true, 0),
                    TS_OK);
    mp_free(&p4);

    /* masked */
    const int64_t MM = 8;
    float *d3 = canary_f32(G * MM * N);
    ts_tensor d3v = ts_tensor_3d(d3, TS_F32, G, MM, N);
    ts_tensor a3 = p.ta, s3 = p.tsa;
    a3.ndim = 3, a3.shape[0] = G, a3.shape[1] = MM, a3.shape[2] = K, a3.strides[0] = MM * K, a3.strides[1] = K, a3.strides[2] = 1;
    s3.ndim = 3, s3.shape[0] = G, s3.shape[1] = MM, s3.shape[2] = 1, s3.strides[0] = MM, s3.strides[1] = 1, s3.strides[2] = 1;
    int32_t mm[3] = {1, 8, 0};
    ts_tensor mv = ts_tensor_1d(mm, TS_I32, G);
#define MK(MV, EM, D) ts_m_grouped_fp8_fp4_gemm_nt_masked(&a3, &s3, &p.tb, &p.tsb, D, MV, EM, NULL, p.ra, p.rb, NULL, false)
    mm[1] = 9;
    TS_CHECK_STATUS(MK(&mv, 4, &d3v), TS_ERR_INVALID_ARGUMENT);
    mm[1] = -1;
    TS_CHECK_STATUS(MK(&mv, 4, &d3v), TS_ERR_INVALID_ARGUMENT);
    mm[1] = 8;
    TS_CHECK_STATUS(MK(&mv, 0, &d3v), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(MK(NULL, 4, &d3v), TS_ERR_NULL_POINTER);
    t = mv, t.shape[0] = G - 1;
    TS_CHECK_STATUS(MK(&t, 4, &d3v), TS_ERR_SHAPE);
    t = d3v, t.shape[1] = MM + 1;
    TS_CHECK_STATUS(MK(&mv, 4, &t), TS_ERR_SHAPE);
    t = d3v, t.strides[0] = N; /* groups overlap */
    TS_CHECK_STATUS(MK(&mv, 4, &t), TS_ERR_STRIDE);
    TS_CHECK(all_canary(d3, G * MM * N));
    TS_CHECK_STATUS(MK(&mv, 4, &d3v), TS_OK);

    /* K-grouped */
    const int64_t ks[3] = {128, 0, 64};
    kproblem kp = kp_make(3, 8, 16, ks, false, false, false, 32, 6002);
    float *kd = canary_f32(3 * 8 * 16);
    ts_tensor kdv = ts_tensor_3d(kd, TS_F32, 3, 8, 16), kc = ts_tensor_3d(kp.c, TS_F32, 3, 8, 16);
    ts_tensor ka = ts_tensor_2d(kp.a, TS_E4M3, kp.total, 8), kb = ts_tensor_2d(kp.b, TS_E4M3, kp.total, 16);
    ts_tensor ksa = ts_tensor_2d(kp.sfa, TS_F32, kp.nsf, 8), ksb = ts_tensor_2d(kp.sfb, TS_F32, kp.nsf, 16);
#define KG(KS, NKS, LAY, C, R, PS) ts_k_grouped_fp8_gemm_tn_contiguous(&ka, &ksa, &kb, &ksb, &kdv, KS, NKS, LAY, C, R, NULL, PS)
    TS_CHECK_STATUS(KG(NULL, 3, NULL, &kc, NULL, false), TS_ERR_NULL_POINTER);
    TS_CHECK_STATUS(KG(ks, 2, NULL, &kc, NULL, false), TS_ERR_SHAPE);
    const int64_t ksneg[3] = {128, -1, 65};
    TS_CHECK_STATUS(KG(ksneg, 3, NULL, &kc, NULL, false), TS_ERR_INVALID_ARGUMENT);
    const int64_t ksbig[3] = {128, 0, 65};
    TS_CHECK_STATUS(KG(ksbig, 3, NULL, &kc, NULL, false), TS_ERR_SHAPE);
    const int64_t rbad[3] = {1, 128, 128}, r32[3] = {1, 1, 64};
    TS_CHECK_STATUS(KG(ks, 3, NULL, &kc, rbad, false), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(KG(ks, 3, NULL, &kc, r32, false), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(KG(ks, 3, NULL, &kc, NULL, true), TS_ERR_NULL_POINTER);
    const int32_t lay_bad[3] = {128, 1, 64};
    ts_tensor klb = ts_tensor_1d((void *)lay_bad, TS_I32, 3);
    TS_CHECK_STATUS(KG(ks, 3, &klb, &kc, NULL, false), TS_ERR_INVALID_ARGUMENT);
    t = kc, t.dtype = TS_BF16;
    TS_CHECK_STATUS(KG(ks, 3, NULL, &t, NULL, false), TS_ERR_DTYPE);
    t = ksa, t.shape[0] = kp.nsf + 1;
    TS_CHECK_STATUS(ts_k_grouped_fp8_gemm_tn_contiguous(&ka, &t, &kb, &ksb, &kdv, ks, 3, NULL, &kc, NULL, NULL, false),
                    TS_ERR_SHAPE);
    kp.sfa[3] = 0.7f; /* tn: f32 scales must be powers of two */
    TS_CHECK_STATUS(KG(ks, 3, NULL, &kc, NULL, false), TS_ERR_INVALID_ARGUMENT);
    kp.sfa[3] = 1.0f;
    ts_tensor kc_over = kc;
    kc_over.data = kd + 1; /* overlaps d without being d */
    TS_CHECK_STATUS(KG(ks, 3, NULL, &kc_over, NULL, false), TS_ERR_ALIASING);
    TS_CHECK(all_canary(kd, 3 * 8 * 16));
    TS_CHECK_STATUS(KG(ks, 3, NULL, &kc, NULL, false), TS_OK);
    /* nt has no psum */
    ts_tensor fa = ts_tensor_1d(kp.a, TS_E4M3, kp.total * 8), fb = ts_tensor_1d(kp.b, TS_E4M3, kp.total * 16);
    ts_tensor fsa = ts_tensor_2d(kp.sfa, TS_F32, 8, kp.nsf), fsb = ts_tensor_2d(kp.sfb, TS_F32, 16, kp.nsf);
    TS_CHECK_STATUS(ts_k_grouped_fp8_gemm_nt_contiguous(&fa, &fsa, &fb, &fsb, &kdv, ks, 3, &klb, &kc, NULL, NULL, true),
                    TS_ERR_INVALID_ARGUMENT);

    free(d), free(d3), free(kd);
    mp_free(&p), kp_free(&kp);
    ts_set_mk_alignment_for_contiguous_layout(al0);
}

/* Upstream's alias names are the same functions. */
TS_TEST(gemm_grouped_aliases_bitwise) {
    const int al0 = ts_get_mk_alignment_for_contiguous_layout();
    ts_set_mk_alignment_for_contiguous_layout(8);
    const int64_t G = 2, M = 24, N = 20;
    int32_t lay[24];
    for (int i = 0; i < 24; i++) lay[i] = i < 8 ? 1 : i < 13 ? 0 : -1;
    mproblem p = mp_make(G, M, N, 160, false, false, 7000);
    ts_tensor lv = ts_tensor_1d(lay, TS_I32, M);
    float *d1 = canary_f32(M * N), *d2 = canary_f32(M * N);
    ts_tensor v1 = ts_tensor_2d(d1, TS_F32, M, N), v2 = ts_tensor_2d(d2, TS_F32, M, N);
    TS_CHECK_STATUS(ts_m_grouped_fp8_fp4_gemm_nt_contiguous(&p.ta, &p.tsa, &p.tb, &p.tsb, &v1, &lv, NULL,
                                                            p.ra, p.rb, NULL, false, false, true, 0),
                    TS_OK);
    TS_CHECK_STATUS(ts_m_grouped_fp8_gemm_nt_contiguous(&p.ta, &p.tsa, &p.tb, &p.tsb, &v2, &lv, NULL,
                                                        p.ra, p.rb, NULL, false, false, true, 0),
                    TS_OK);
    TS_CHECK(memcmp(d1, d2, (size_t)(M * N) * 4) == 0);
    ts_tensor b = p.tb, sb = p.tsb;
    b.shape[1] = p.tb.shape[2], b.shape[2] = p.tb.shape[1];
    b.strides[1] = p.tb.strides[2], b.strides[2] = p.tb.strides[1];
    sb.shape[1] = p.tsb.shape[2], sb.shape[2] = p.tsb.shape[1];
    sb.strides[1] = p.tsb.strides[2], sb.strides[2] = p.tsb.strides[1];
    free(d2), d2 = canary_f32(M * N), v2.data = d2;
    TS_CHECK_STATUS(ts_m_grouped_fp8_gemm_nn_contiguous(&p.ta, &p.tsa, &b, &sb, &v2, &lv, NULL, p.ra,
                                                        p.rb, NULL, false, false, true),
                    TS_OK);
    TS_CHECK(memcmp(d1, d2, (size_t)(M * N) * 4) == 0);
    free(d1), free(d2);
    mp_free(&p);
    ts_set_mk_alignment_for_contiguous_layout(al0);
}
