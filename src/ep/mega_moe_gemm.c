/* Mega MoE's own expert GEMM (fused path): e4m3 rows (ue8m0 per 32) times one expert of an
 * e2m1 packed weight (ts_gemm_prepack_b, gran_k 32), read in place -- the same bytes the
 * unfused path's grouped GEMM reads, so no second copy of the weights.
 *
 * The bits are the canonical order of docs/gemm.md, as every GEMM: per K block of 32,
 * p = fmaf chain of a[k] * b[k] from +0, then acc = fmaf(p, sa * sb, acc). The AVX2 kernel
 * computes p with 16-bit integer multiply-adds instead of f32 FMAs: a[k] = A[k] * 2^xmin with
 * A an integer (e4m3: a 4-bit mantissa times a power of two), b = B2 / 2 with B2 in
 * [-12, 12] (e2m1), so p = S * 2^(xmin - 1) with S = sum A[k] * B2[k] exact in int32. When
 * max |A| <= 32767 and sum |A| <= 699050 (checked per row and block, below), every partial sum
 * of the f32 chain is a multiple of 2^(xmin - 1) below 2^23 of those units, so the chain never
 * rounds and its result is S * 2^(xmin - 1): the same bits. Blocks that fail the check (an
 * e4m3 NaN, or values spanning more than ~2^11 in one block) take the f32 chain (scalar). Why:
 * at decode sizes both MoE paths are bound by decoding the FP4 weights; one vpmaddwd does 16
 * multiply-adds, one FMA 8, and the e2m1 -> int16 decode is a pshufb table lookup. */
#include "ep/mega_moe_gemm.h"

#include "core/internal.h"
#include "ep/mega_moe_internal.h"
#include "gemm/gemm_internal.h"

#include <math.h>
#include <string.h>

enum { W = TS__MMG_W, G = TS__MMG_G };

static inline uint8_t nib(const uint8_t *row, int c) {
    const int q = (int)ts__pw_slot(c);
    const uint8_t b = row[q >> 1];
    return (q & 1) ? (uint8_t)(b >> 4) : (uint8_t)(b & 15);
}

static inline float sb_of(const ts__mmg_args *x, const uint8_t *blk, int c) {
    const uint8_t *sp = blk + G * (W / 2);
    return x->sf_u8 ? ts__gemm_lut.ue8m0[sp[c]] : ((const float *)(const void *)sp)[c];
}

void ts__mmg_block_p(const ts__mmg_args *x, int64_t i, int64_t s, float p[W]) {
    const uint8_t *blk = x->panel + s * x->block_bytes;
    const float *a = x->af + i * x->K + s * G;
    for (int c = 0; c < W; c++) {
        float q = 0.0f;
        for (int k = 0; k < G; k++) q = fmaf(a[k], ts__gemm_lut.e2m1[nib(blk + k * (W / 2), c)], q);
        p[c] = q;
    }
}

void ts__mmg_panel__generic(const ts__mmg_args *x) {
    for (int64_t s = 0; s < x->nkb; s++) {
        const uint8_t *blk = x->panel + s * x->block_bytes;
        for (int64_t i = 0; i < x->m; i++) {
            float p[W];
            ts__mmg_block_p(x, i, s, p);
            const float sa = x->sa[i * x->nkb + s];
            for (int c = 0; c < W; c++) x->acc[i * W + c] = fmaf(p[c], sa * sb_of(x, blk, c), x->acc[i * W + c]);
        }
    }
}

bool ts__mega_moe_gemm_fits(const ts_packed_weight *pw, int64_t m) {
    return pw && pw->dtype == TS_E2M1X2 && pw->grouped && pw->scaled && pw->kb == G && pw->gran_k == G &&
           pw->row_bytes == W / 2 && pw->block_bytes >= G * (W / 2) + W * (pw->sf_u8 ? 1 : 4) && pw->k % 128 == 0 &&
           pw->n % W == 0 && m >= 1 && m <= TS__MMG_MAX_M;
}

int64_t ts__mega_moe_gemm_n(const ts_packed_weight *pw) { return pw->n; }

size_t ts__mega_moe_gemm_scratch(int64_t m, int64_t K) {
    const int64_t nkb = K / G;
    return (size_t)(ts__align(m * K * 4, 64) + 3 * ts__align(m * nkb * 4, 64) + ts__align(m * K * 2, 64) + 64);
}

/* e4m3 byte -> odd signed mantissa and exponent (value = mant * 2^ex; mant 0 for zeros, NaN
 * flagged by ex = 99), built once. */
static struct { int8_t mant[256], ex[256]; } g_e4;
static _Atomic int g_e4_ready;

static void e4_init(void) {
    if (atomic_load_explicit(&g_e4_ready, memory_order_acquire)) return;
    for (int u = 0; u < 256; u++) {
        const int e = (u >> 3) & 15, t = u & 7;
        int mm = e ? 8 + t : t, xx = e ? e - 10 : -9;
        if (mm) {
            const int z = __builtin_ctz((unsigned)mm);
            mm >>= z, xx += z;
        }
        g_e4.mant[u] = (int8_t)((u & 0x80) ? -mm : mm);
        g_e4.ex[u] = (int8_t)((e == 15 && t == 7) ? 99 : xx);
    }
    atomic_store_explicit(&g_e4_ready, 1, memory_order_release);
}

/* Row i's per-block data: decoded values, scales, the integer form and its check. */
static void prep_rows(const uint8_t *a, const int32_t *sfa, int64_t m, int64_t K, float *af, float *sa,
                      float *pscale, int32_t *apair, uint8_t *ok) {
    const int64_t nkb = K / G;
    e4_init();
    for (int64_t i = 0; i < m; i++)
        for (int64_t s = 0; s < nkb; s++) {
            const uint8_t *u = a + i * K + s * G;
            const uint32_t word = (uint32_t)sfa[i * (K / 128) + (s >> 2)];
            sa[i * nkb + s] = ts__gemm_lut.ue8m0[(word >> ((s & 3) * 8)) & 0xFF];
            int xmin = 99, xmax = -99;
            bool nan = false;
            for (int k = 0; k < G; k++) {
                af[i * K + s * G + k] = ts__gemm_lut.e4m3[u[k]];
                const int x = g_e4.ex[u[k]];
                nan |= x == 99;
                if (!g_e4.mant[u[k]] || x == 99) continue;
                xmin = x < xmin ? x : xmin;
                xmax = x > xmax ? x : xmax;
            }
            bool good = !nan && (xmin == 99 || xmax - xmin <= 15);
            int64_t sum = 0;
            int32_t A[G];
            for (int k = 0; k < G; k++) {
                const int mt = good ? g_e4.mant[u[k]] : 0;
                const int32_t v = mt ? (int32_t)mt * (int32_t)(1 << (g_e4.ex[u[k]] - xmin)) : 0;
                const int32_t av = v < 0 ? -v : v;
                good &= av <= 32767;
                sum += av;
                A[k] = v;
            }
            if (sum > 699050) good = false;
            ok[i * nkb + s] = good;
            pscale[i * nkb + s] = ldexpf(1.0f, (xmin == 99 ? 0 : xmin) - 9); /* all zero: S = 0 */
            for (int k = 0; k < G; k += 2) {
                const int32_t lo = good ? A[k] : 0, hi = good ? A[k + 1] : 0;
                apair[i * (K / 2) + (s * G + k) / 2] = (int32_t)(((uint32_t)(uint16_t)(int16_t)lo) |
                                                                 ((uint32_t)(uint16_t)(int16_t)hi << 16));
            }
        }
}

typedef struct mmg_ctx {
    ts__mmg_args base;
    const uint8_t *group;
    int64_t panel_bytes;
    uint16_t *d;
    int64_t ldd;
    bool avx2;
} mmg_ctx;

static void panels_task(void *v, int64_t begin, int64_t end, int tid) {
    (void)tid;
    const mmg_ctx *c = (const mmg_ctx *)v;
    float acc[TS__MMG_MAX_M * W];
    ts__mmg_args x = c->base;
    x.acc = acc;
    for (int64_t pi = begin; pi < end; pi++) {
        memset(acc, 0, (size_t)(x.m * W) * sizeof(float));
        x.panel = c->group + pi * c->panel_bytes;
#ifdef TS_HAVE_AVX2_KERNELS
        if (c->avx2) ts__mmg_panel__avx2(&x);
        else ts__mmg_panel__generic(&x);
#else
        ts__mmg_panel__generic(&x);
#endif
        for (int64_t i = 0; i < x.m; i++) ts__gemm_store_bf16_row(c->d + i * c->ldd + pi * W, acc + i * W, W);
    }
}

void ts__mega_moe_gemm(const ts_packed_weight *pw, int64_t e, const uint8_t *a, const int32_t *sfa, int64_t m,
                       uint16_t *d, int64_t ldd, void *scratch, bool generic) {
    ts__gemm_lut_init();
    const int64_t K = pw->k, nkb = K / G;
    uint8_t *s = (uint8_t *)scratch;
    float *af = (float *)(void *)s;
    s += ts__align(m * K * 4, 64);
    float *sa = (float *)(void *)s;
    s += ts__align(m * nkb * 4, 64);
    float *pscale = (float *)(void *)s;
    s += ts__align(m * nkb * 4, 64);
    int32_t *apair = (int32_t *)(void *)s;
    s += ts__align(m * K * 2, 64);
    uint8_t *ok = s;
    prep_rows(a, sfa, m, K, af, sa, pscale, apair, ok);
    mmg_ctx c;
    memset(&c, 0, sizeof c);
    c.base.nkb = nkb;
    c.base.block_bytes = pw->block_bytes;
    c.base.sf_u8 = pw->sf_u8;
    c.base.sf_normal = pw->sf_normal;
    c.base.m = m;
    c.base.K = K;
    c.base.af = af, c.base.sa = sa, c.base.pscale = pscale, c.base.apair = apair, c.base.ok = ok;
    c.group = pw->data + e * pw->group_bytes;
    c.panel_bytes = pw->panel_bytes;
    c.d = d, c.ldd = ldd;
    c.avx2 = !generic && ts__isa_avx2_up(ts__active_isa());
    ts__parallel_for(pw->npanel, 4, panels_task, &c);
}
