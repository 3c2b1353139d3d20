/* The second batch of TileKernels quantisation kernels in the tile language (src/kernels/
 * quant_fp4.tile, quant_lossless.tile, quant_e5m6.tile, transpose.tile) byte-exact against
 * tests/golden/tk_quant2.bin (tests/gen/gen_tk_quant2.py: numpy re-implementation of the
 * upstream kernels' arithmetic, ml_dtypes rounding): per-token FP4 / FP8 casts from bf16 / f32
 * and re-quantising FP8 / FP4 input, f32 scales row- and column-major and packed UE8M0, special
 * values, odd widths, tokens 1 and 4001; the FP4 cast back; every case on both ISA variants
 * with 1 and 2 threads; argument errors. */
#include "test_tk_common.h"
#include "ts_prng.h"

#include "tilestack/kernels.h"
#include "tilestack/numerics.h"

#include <stdlib.h>
#include <string.h>

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }


/* the quantised inputs of the big cases (gen_tk_quant2.py regen_bytes / regen_exponents):
 * bytes, and packed UE8M0 words [rows, ceil(cols / 4)] of exponents lo + u32 % span */
static void regen_bytes(uint64_t seed, size_t n, uint8_t *out) {
    ts_prng r = ts_prng_seed(seed);
    for (size_t i = 0; i < n; i++) out[i] = (uint8_t)(ts_prng_u32(&r) & 0xFF);
}
static void regen_ue8m0(uint64_t seed, int64_t rows, int64_t cols, uint32_t lo, uint32_t span, uint32_t *words) {
    ts_prng r = ts_prng_seed(seed);
    const int64_t npk = cdiv(cols, 4);
    memset(words, 0, (size_t)(rows * npk) * 4);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) words[i * npk + j / 4] |= ((lo + ts_prng_u32(&r) % span) & 255u) << (8 * (j % 4));
}

/* ---------------------------------------------------------------- per_token_cast family */

enum { IN_BF16, IN_F32, IN_E4M3, IN_FP4 };
enum { OUT_FP4, OUT_E4M3 };

typedef struct ptc_ctx {
    ts_test_ctx *t;
    const tk_record *rec;
    int in, outk;
    bool packed, round_sf;
    int64_t T, H, gs, bh, bw, ng;
    void *x;
    sf_buf xsf, sf;
    uint8_t *q;
} ptc_ctx;

static ts_status ptc_call(ptc_ctx *c) {
    const int64_t T = c->T, H = c->H;
    const ts_dtype sfdt = c->packed ? TS_UE8M0X4 : TS_F32;
    ts_tensor sf = sf_tensor(&c->sf, sfdt), xsf = sf_tensor(&c->xsf, sfdt);
    ts_tensor q = c->outk == OUT_FP4 ? ts_tensor_2d(c->q, TS_E2M1X2, T, H / 2) : ts_tensor_2d(c->q, TS_E4M3, T, H);
    ts_tensor x;
    switch (c->in) {
    case IN_BF16: x = ts_tensor_2d(c->x, TS_BF16, T, H); break;
    case IN_F32: x = ts_tensor_2d(c->x, TS_F32, T, H); break;
    case IN_E4M3: x = ts_tensor_2d(c->x, TS_E4M3, T, H); break;
    default: x = ts_tensor_2d(c->x, TS_E2M1X2, T, H / 2); break;
    }
    const int64_t gs = c->gs, bh = c->bh, bw = c->bw;
    const bool r = c->round_sf;
    switch (c->in) {
    case IN_BF16:
        if (c->outk == OUT_FP4)
            return c->packed ? ts_per_token_cast_bf16_to_fp4_ue8m0(&x, &q, &sf, gs)
                             : ts_per_token_cast_bf16_to_fp4(&x, &q, &sf, gs, r);
        return c->packed ? ts_per_token_cast_bf16_to_e4m3_ue8m0(&x, &q, &sf, gs)
                         : ts_per_token_cast_bf16_to_e4m3(&x, &q, &sf, gs, r);
    case IN_F32:
        if (c->outk == OUT_FP4)
            return c->packed ? ts_per_token_cast_f32_to_fp4_ue8m0(&x, &q, &sf, gs)
                             : ts_per_token_cast_f32_to_fp4(&x, &q, &sf, gs, r);
        return c->packed ? ts_per_token_cast_f32_to_e4m3_ue8m0(&x, &q, &sf, gs)
                         : ts_per_token_cast_f32_to_e4m3(&x, &q, &sf, gs, r);
    case IN_E4M3:
        if (c->outk == OUT_FP4)
            return c->packed ? ts_per_token_cast_e4m3_to_fp4_ue8m0(&x, &xsf, &q, &sf, gs, bh, bw)
                             : ts_per_token_cast_e4m3_to_fp4(&x, &xsf, &q, &sf, gs, bh, bw, r);
        return c->packed ? ts_per_token_cast_e4m3_to_e4m3_ue8m0(&x, &xsf, &q, &sf, gs, bh, bw)
                         : ts_per_token_cast_e4m3_to_e4m3(&x, &xsf, &q, &sf, gs, bh, bw, r);
    default:
        if (c->outk == OUT_FP4)
            return c->packed ? ts_per_token_cast_fp4_to_fp4_ue8m0(&x, &xsf, &q, &sf, gs, bh, bw)
                             : ts_per_token_cast_fp4_to_fp4(&x, &xsf, &q, &sf, gs, bh, bw, r);
        return c->packed ? ts_per_token_cast_fp4_to_e4m3_ue8m0(&x, &xsf, &q, &sf, gs, bh, bw)
                         : ts_per_token_cast_fp4_to_e4m3(&x, &xsf, &q, &sf, gs, bh, bw, r);
    }
}

static void ptc_run(void *vc, int variant) {
    ptc_ctx *c = vc;
    ts_test_ctx *ts_t_ = c->t;
    const size_t qbytes = (size_t)(c->outk == OUT_FP4 ? c->T * c->H / 2 : c->T * c->H);
    memset(c->q, 0xEE, qbytes + 1);
    memset(c->sf.mem, 0xEE, (size_t)(c->sf.pal * c->sf.cols) * 4);
    TS_CHECK_STATUS(ptc_call(c), TS_OK);
    sf_get(&c->sf);
    char what[96];
    snprintf(what, sizeof what, "ptc in %d out %d packed %d codes (variant %d)", c->in, c->outk, c->packed, variant);
    const uint32_t nin = c->in >= IN_E4M3 ? 2 : (c->rec->p[10] ? 1 : 0);
    tk_expect(ts_t_, c->rec, nin, c->q, qbytes, what);
    snprintf(what, sizeof what, "ptc in %d out %d packed %d scales (variant %d)", c->in, c->outk, c->packed, variant);
    tk_expect(ts_t_, c->rec, nin + 1, c->sf.row, (size_t)(c->sf.rows * c->sf.cols) * 4, what);
    TS_CHECK_EQ_INT(c->q[qbytes], 0xEE); /* nothing past the output */
}

static void ptc_case(ts_test_ctx *ts_t_, const tk_record *rec, int nth) {
    ptc_ctx c = {.t = ts_t_, .rec = rec, .in = (int)rec->p[0], .outk = (int)rec->p[1], .packed = rec->p[2],
                 .T = rec->p[3], .H = rec->p[4], .gs = rec->p[5], .round_sf = rec->p[6], .bh = rec->p[7],
                 .bw = rec->p[8]};
    const uint64_t seed = (uint64_t)rec->p[9];
    const bool stored = rec->p[10];
    const int64_t T = c.T, H = c.H;
    c.ng = cdiv(H, c.gs);
    const int64_t ncol = c.packed ? cdiv(c.ng, 4) : c.ng;
    const size_t esz = c.in == IN_BF16 ? 2 : c.in == IN_F32 ? 4 : 1;
    const size_t xbytes = c.in == IN_FP4 ? (size_t)(T * H / 2) : (size_t)(T * H) * esz;
    bool ok = sf_alloc(&c.sf, T, ncol, nth % 2 == 1);
    c.x = malloc(xbytes + 1);
    c.q = malloc((size_t)(T * H) + 1);
    if (c.in >= IN_E4M3) {
        const int64_t sm = cdiv(T, c.bh), sn = cdiv(H, c.bw);
        ok &= sf_alloc(&c.xsf, sm, c.packed ? cdiv(sn, 4) : sn, nth % 3 == 0);
        if (ok) sf_put(&c.xsf, rec->a[1].data);
    } else {
        ok &= sf_alloc(&c.xsf, 1, 1, false);
    }
    TS_CHECK(ok && c.x && c.q);
    if (ok && c.x && c.q) {
        if (stored) {
            TS_CHECK_EQ_INT(rec->a[0].nbytes, xbytes);
            memcpy(c.x, rec->a[0].data, xbytes);
        } else if (c.in == IN_BF16) {
            tk_bf16_input(seed, (size_t)(T * H), 4.0f, c.x);
        } else {
            tk_f32_input(seed, (size_t)(T * H), 4.0f, c.x);
        }
        tk_for_variants(&c, ptc_run, T > 1000 ? 2 : 4);
    }
    sf_free(&c.sf), sf_free(&c.xsf);
    free(c.x), free(c.q);
}

/* A cast-back kernel on every ISA path and at 1 and 2 threads (output poisoned first), each
 * against the golden output ai of rec: same bytes. */
typedef ts_status (*cast_back_fn)(const ts_tensor *, const ts_tensor *, const ts_tensor *, int64_t, int64_t);
static void cast_back_variants(ts_test_ctx *ts_t_, const tk_record *rec, uint32_t ai, cast_back_fn fn,
                               const ts_tensor *x, const ts_tensor *s, const ts_tensor *o, int64_t bh, int64_t bw,
                               void *y, bool f32, const char *name) {
    const int64_t n = o->shape[0] * o->shape[1];
    const ts_isa isa = ts_get_isa();
    const int nth0 = ts_get_num_threads();
    for (int v = 0; v < 4; v++) {
        ts_set_isa(v % 2 ? TS_ISA_GENERIC : isa);
        ts_set_num_threads(v < 2 ? 1 : 2);
        memset(y, 0xEE, (size_t)n * 4);
        TS_CHECK_STATUS(fn(x, s, o, bh, bw), TS_OK);
        char what[64];
        snprintf(what, sizeof what, "%s (variant %d)", name, v);
        tk_expect(ts_t_, rec, ai, y, (size_t)n * (f32 ? 4 : 2), what);
    }
    ts_set_isa(isa);
    ts_set_num_threads(nth0);
}

/* ---------------------------------------------------------------- FP4 cast back */

static void cbfp4_case(ts_test_ctx *ts_t_, const tk_record *rec, int nth) {
    const int64_t T = rec->p[0], H = rec->p[1], bh = rec->p[2], bw = rec->p[3];
    const bool packed = rec->p[4], f32 = rec->p[5], regen = rec->p[7];
    const int64_t sm = cdiv(T, bh), sn = cdiv(H, bw);
    sf_buf xsf;
    bool ok = sf_alloc(&xsf, sm, packed ? cdiv(sn, 4) : sn, nth % 2 == 0);
    void *y = malloc((size_t)(T * H) * 4);
    uint8_t *xq = malloc((size_t)(T * H / 2) + 1);
    TS_CHECK(ok && y && xq);
    if (ok && y && xq) {
        if (regen) {
            regen_bytes((uint64_t)rec->p[6], (size_t)(T * H / 2), xq);
            regen_ue8m0((uint64_t)rec->p[6] + 1, sm, sn, 110, 30, xsf.row);
            sf_put(&xsf, xsf.row);
        } else {
            memcpy(xq, rec->a[0].data, (size_t)(T * H / 2));
            sf_put(&xsf, rec->a[1].data);
        }
        ts_tensor x = ts_tensor_2d(xq, TS_E2M1X2, T, H / 2);
        ts_tensor s = sf_tensor(&xsf, packed ? TS_UE8M0X4 : TS_F32);
        ts_tensor o = ts_tensor_2d(y, f32 ? TS_F32 : TS_BF16, T, H);
        cast_back_fn fn = packed ? (f32 ? ts_cast_back_fp4_f32_ue8m0 : ts_cast_back_fp4_ue8m0)
                                 : (f32 ? ts_cast_back_fp4_f32 : ts_cast_back_fp4);
        cast_back_variants(ts_t_, rec, regen ? 0 : 2, fn, &x, &s, &o, bh, bw, y, f32, "fp4 cast back");
    }
    sf_free(&xsf);
    free(y), free(xq);
}

/* ---------------------------------------------------------------- per_block_cast_lossless */

typedef struct lossless_ctx {
    ts_test_ctx *t;
    const tk_record *rec;
    int64_t T, H, ibm, ibk, obm, obk;
    bool inp, outp;
    uint32_t base; /* index of the first output array */
    sf_buf xsf, sf;
    uint8_t *xq, *q;
} lossless_ctx;

static ts_status lossless_call(lossless_ctx *c) {
    ts_tensor x = ts_tensor_2d(c->xq, TS_E2M1X2, c->T, c->H / 2);
    ts_tensor xs = sf_tensor(&c->xsf, c->inp ? TS_UE8M0X4 : TS_F32), s = sf_tensor(&c->sf, c->outp ? TS_UE8M0X4 : TS_F32);
    ts_tensor q = ts_tensor_2d(c->q, TS_E4M3, c->T, c->H);
    if (c->inp && c->outp) return ts_per_block_cast_lossless_ue8m0(&x, &xs, &q, &s, c->ibm, c->ibk, c->obm, c->obk);
    if (c->inp) return ts_per_block_cast_lossless_ue8m0_to_f32(&x, &xs, &q, &s, c->ibm, c->ibk, c->obm, c->obk);
    if (c->outp) return ts_per_block_cast_lossless_f32_to_ue8m0(&x, &xs, &q, &s, c->ibm, c->ibk, c->obm, c->obk);
    return ts_per_block_cast_lossless(&x, &xs, &q, &s, c->ibm, c->ibk, c->obm, c->obk);
}

static float scale_at(const sf_buf *s, bool packed, int64_t r, int64_t blk) {
    const uint32_t w = s->row[r * s->cols + (packed ? blk / 4 : blk)];
    uint32_t e = packed ? (w >> (8 * (blk % 4))) & 255u : w;
    if (packed) e <<= 23;
    float f;
    memcpy(&f, &e, 4);
    return f;
}

static void lossless_run(void *vc, int variant) {
    lossless_ctx *c = vc;
    ts_test_ctx *ts_t_ = c->t;
    memset(c->q, 0xEE, (size_t)(c->T * c->H));
    memset(c->sf.mem, 0xEE, (size_t)(c->sf.pal * c->sf.cols) * 4);
    TS_CHECK_STATUS(lossless_call(c), TS_OK);
    sf_get(&c->sf);
    char what[64];
    snprintf(what, sizeof what, "lossless codes (variant %d)", variant);
    tk_expect(ts_t_, c->rec, c->base, c->q, (size_t)(c->T * c->H), what);
    snprintf(what, sizeof what, "lossless scales (variant %d)", variant);
    tk_expect(ts_t_, c->rec, c->base + 1, c->sf.row, (size_t)(c->sf.rows * c->sf.cols) * 4, what);
    if (variant != 0) return;
    /* the property that names the kernel: every value is unchanged (upstream's oracle), except
     * where e_out saturated to 0: that scale reads as 0.0 (upstream's decoding too) */
    const uint8_t *x = c->xq;
    int64_t bad = 0, checked = 0;
    for (int64_t i = 0; i < c->T; i++)
        for (int64_t j = 0; j < c->H; j++) {
            const uint8_t code = (uint8_t)((x[i * (c->H / 2) + j / 2] >> (4 * (j % 2))) & 15);
            const float a = ts_e2m1_to_f32(code) * scale_at(&c->xsf, c->inp, i / c->ibm, j / c->ibk);
            const float so = scale_at(&c->sf, c->outp, i / c->obm, j / c->obk);
            const float b = ts_e4m3_to_f32(c->q[i * c->H + j]) * so;
            bad += so != 0.0f && memcmp(&a, &b, 4) != 0;
            checked += so != 0.0f;
        }
    TS_CHECK_EQ_INT(bad, 0);
    TS_CHECK(checked > 0);
}

static void lossless_case(ts_test_ctx *ts_t_, const tk_record *rec, int nth) {
    lossless_ctx c = {.t = ts_t_, .rec = rec, .T = rec->p[0], .H = rec->p[1], .ibm = rec->p[2], .ibk = rec->p[3],
                      .obm = rec->p[4], .obk = rec->p[5], .inp = rec->p[6], .outp = rec->p[7]};
    const int64_t sn = cdiv(c.H, c.ibk), on = cdiv(c.H, c.obk);
    bool ok = sf_alloc(&c.xsf, cdiv(c.T, c.ibm), c.inp ? cdiv(sn, 4) : sn, nth % 2 == 1);
    ok &= sf_alloc(&c.sf, cdiv(c.T, c.obm), c.outp ? cdiv(on, 4) : on, nth % 3 == 1);
    c.q = malloc((size_t)(c.T * c.H));
    c.xq = malloc((size_t)(c.T * c.H / 2) + 1);
    TS_CHECK(ok && c.q && c.xq);
    if (ok && c.q && c.xq) {
        if (rec->p[9]) { /* regenerated (packed input) */
            regen_bytes((uint64_t)rec->p[8], (size_t)(c.T * c.H / 2), c.xq);
            regen_ue8m0((uint64_t)rec->p[8] + 1, c.xsf.rows, sn, (uint32_t)rec->p[10], (uint32_t)rec->p[11], c.xsf.row);
        } else {
            c.base = 2;
            memcpy(c.xq, rec->a[0].data, (size_t)(c.T * c.H / 2));
            memcpy(c.xsf.row, rec->a[1].data, (size_t)(c.xsf.rows * c.xsf.cols) * 4);
        }
        sf_put(&c.xsf, c.xsf.row);
        tk_for_variants(&c, lossless_run, c.T > 1000 ? 2 : 4);
    }
    sf_free(&c.xsf), sf_free(&c.sf);
    free(c.q), free(c.xq);
}

/* ---------------------------------------------------------------- E5M6 */

typedef struct e5m6_ctx {
    ts_test_ctx *t;
    const tk_record *rec;
    bool f32, packed, round_sf, special;
    int64_t T, H;
    void *x;
    sf_buf sf;
    uint8_t *q;
} e5m6_ctx;

static void e5m6_run(void *vc, int variant) {
    e5m6_ctx *c = vc;
    ts_test_ctx *ts_t_ = c->t;
    const size_t qb = (size_t)(c->T * c->H * 3 / 2);
    memset(c->q, 0xEE, qb + 1);
    memset(c->sf.mem, 0xEE, (size_t)(c->sf.pal * c->sf.cols) * 4);
    ts_tensor x = ts_tensor_2d(c->x, c->f32 ? TS_F32 : TS_BF16, c->T, c->H);
    ts_tensor q = ts_tensor_2d(c->q, TS_E5M6X8, c->T, (int64_t)qb / c->T);
    ts_tensor s = sf_tensor(&c->sf, c->packed ? TS_UE8M0X4 : TS_F32);
    ts_status st;
    if (c->f32) st = c->packed ? ts_per_token_cast_f32_to_e5m6_ue8m0(&x, &q, &s) : ts_per_token_cast_f32_to_e5m6(&x, &q, &s, c->round_sf);
    else st = c->packed ? ts_per_token_cast_bf16_to_e5m6_ue8m0(&x, &q, &s) : ts_per_token_cast_bf16_to_e5m6(&x, &q, &s, c->round_sf);
    TS_CHECK_STATUS(st, TS_OK);
    sf_get(&c->sf);
    const uint32_t base = c->special ? 1 : 0;
    char what[64];
    snprintf(what, sizeof what, "e5m6 codes (variant %d)", variant);
    tk_expect(ts_t_, c->rec, base, c->q, qb, what);
    snprintf(what, sizeof what, "e5m6 scales (variant %d)", variant);
    tk_expect(ts_t_, c->rec, base + 1, c->sf.row, (size_t)c->T * 4, what);
    TS_CHECK_EQ_INT(c->q[qb], 0xEE);
}

static void e5m6_case(ts_test_ctx *ts_t_, const tk_record *rec, int nth) {
    e5m6_ctx c = {.t = ts_t_, .rec = rec, .f32 = rec->p[0], .packed = rec->p[1], .T = rec->p[2], .H = rec->p[3],
                  .round_sf = rec->p[4], .special = rec->p[6]};
    const size_t xb = (size_t)(c.T * c.H) * (c.f32 ? 4 : 2);
    bool ok = sf_alloc(&c.sf, c.T, 1, nth % 2 == 1);
    c.x = malloc(xb);
    c.q = malloc((size_t)(c.T * c.H * 3 / 2) + 1);
    TS_CHECK(ok && c.x && c.q);
    if (ok && c.x && c.q) {
        if (c.special) memcpy(c.x, rec->a[0].data, xb);
        else if (c.f32) tk_f32_input((uint64_t)rec->p[5], (size_t)(c.T * c.H), 100.0f, c.x);
        else tk_bf16_input((uint64_t)rec->p[5], (size_t)(c.T * c.H), 100.0f, c.x);
        tk_for_variants(&c, e5m6_run, c.T > 1000 ? 2 : 4);
    }
    sf_free(&c.sf);
    free(c.x), free(c.q);
}

static void cbe5m6_case(ts_test_ctx *ts_t_, const tk_record *rec, int nth) {
    const int64_t T = rec->p[0], H = rec->p[1], bh = rec->p[2], bw = rec->p[3];
    const bool packed = rec->p[4], f32 = rec->p[5], regen = rec->p[7];
    const int64_t sn = cdiv(H, bw);
    sf_buf xsf;
    bool ok = sf_alloc(&xsf, cdiv(T, bh), packed ? cdiv(sn, 4) : sn, nth % 2 == 0);
    void *y = malloc((size_t)(T * H) * 4);
    uint8_t *xq = malloc((size_t)(T * H * 3 / 2) + 1);
    TS_CHECK(ok && y && xq);
    if (ok && y && xq) {
        if (regen) {
            regen_bytes((uint64_t)rec->p[6], (size_t)(T * H * 3 / 2), xq);
            regen_ue8m0((uint64_t)rec->p[6] + 1, xsf.rows, sn, 100, 40, xsf.row);
            sf_put(&xsf, xsf.row);
        } else {
            memcpy(xq, rec->a[0].data, (size_t)(T * H * 3 / 2));
            sf_put(&xsf, rec->a[1].data);
        }
        ts_tensor x = ts_tensor_2d(xq, TS_E5M6X8, T, H * 3 / 2);
        ts_tensor s = sf_tensor(&xsf, packed ? TS_UE8M0X4 : TS_F32);
        ts_tensor o = ts_tensor_2d(y, f32 ? TS_F32 : TS_BF16, T, H);
        cast_back_fn fn = packed ? (f32 ? ts_cast_back_e5m6_f32_ue8m0 : ts_cast_back_e5m6_ue8m0)
                                 : (f32 ? ts_cast_back_e5m6_f32 : ts_cast_back_e5m6);
        cast_back_variants(ts_t_, rec, regen ? 0 : 2, fn, &x, &s, &o, bh, bw, y, f32, "e5m6 cast back");
    }
    sf_free(&xsf);
    free(y), free(xq);
}

/* ---------------------------------------------------------------- transposes */

static void transpose_case(ts_test_ctx *ts_t_, const tk_record *rec) {
    const int kind = (int)rec->p[0];
    const int64_t B = rec->p[1], M = rec->p[2], N = rec->p[3];
    const size_t esz = kind == 0 ? 2 : kind == 1 ? 4 : 1, n = (size_t)(B * M * N);
    const ts_dtype dt = kind == 0 ? TS_BF16 : kind == 1 ? TS_F32 : TS_E4M3;
    void *y = malloc(n * esz);
    TS_CHECK(y != NULL);
    if (!y) return;
    ts_tensor x = ts_tensor_3d((void *)rec->a[0].data, dt, B, M, N), o = ts_tensor_3d(y, dt, B, N, M);
    const ts_isa isa = ts_get_isa();
    const int nth0 = ts_get_num_threads();
    for (int v = 0; v < 4; v++) {
        ts_set_isa(v % 2 ? TS_ISA_GENERIC : isa);
        ts_set_num_threads(v < 2 ? 1 : 2);
        memset(y, 0xEE, n * esz);
        ts_status st = kind == 0 ? ts_batched_transpose(&x, &o) : kind == 1 ? ts_batched_transpose_f32(&x, &o) : ts_batched_transpose_e4m3(&x, &o);
        TS_CHECK_STATUS(st, TS_OK);
        char what[64];
        snprintf(what, sizeof what, "transpose kind %d (variant %d)", kind, v);
        tk_expect(ts_t_, rec, 1, y, n * esz, what);
    }
    ts_set_isa(isa);
    ts_set_num_threads(nth0);
    free(y);
}

typedef struct pcct_ctx {
    ts_test_ctx *t;
    const tk_record *rec;
    int64_t T, H, np;
    bool round_sf, special;
    uint16_t *x;
    uint8_t *q;
    float *sf;
} pcct_ctx;

static void pcct_run(void *vc, int variant) {
    pcct_ctx *c = vc;
    ts_test_ctx *ts_t_ = c->t;
    const int64_t st_rows = cdiv(c->T, c->np);
    memset(c->q, 0xEE, (size_t)(c->T * c->H));
    memset(c->sf, 0xEE, (size_t)(st_rows * c->H) * 4);
    ts_tensor x = ts_tensor_2d(c->x, TS_BF16, c->T, c->H), q = ts_tensor_2d(c->q, TS_E4M3, c->H, c->T);
    ts_tensor s = ts_tensor_2d(c->sf, TS_F32, st_rows, c->H);
    TS_CHECK_STATUS(ts_per_channel_cast_and_transpose(&x, &q, &s, c->np, c->round_sf), TS_OK);
    const uint32_t base = c->special ? 1 : 0;
    char what[64];
    snprintf(what, sizeof what, "channel cast+transpose codes (variant %d)", variant);
    tk_expect(ts_t_, c->rec, base, c->q, (size_t)(c->T * c->H), what);
    snprintf(what, sizeof what, "channel cast+transpose scales (variant %d)", variant);
    tk_expect(ts_t_, c->rec, base + 1, c->sf, (size_t)(st_rows * c->H) * 4, what);
}

static void pcct_case(ts_test_ctx *ts_t_, const tk_record *rec) {
    pcct_ctx c = {.t = ts_t_, .rec = rec, .T = rec->p[0], .H = rec->p[1], .np = rec->p[2], .round_sf = rec->p[3],
                  .special = rec->p[5]};
    c.x = malloc((size_t)(c.T * c.H) * 2);
    c.q = malloc((size_t)(c.T * c.H));
    c.sf = malloc((size_t)(cdiv(c.T, c.np) * c.H) * 4);
    TS_CHECK(c.x && c.q && c.sf);
    if (c.x && c.q && c.sf) {
        if (c.special) memcpy(c.x, rec->a[0].data, (size_t)(c.T * c.H) * 2);
        else tk_bf16_input((uint64_t)rec->p[4], (size_t)(c.T * c.H), 8.0f, c.x);
        tk_for_variants(&c, pcct_run, c.T > 1000 ? 2 : 4);
    }
    free(c.x), free(c.q), free(c.sf);
}

TS_TEST(tk_quant2_golden) {
    size_t size = 0;
    tk_reader r = {TS_READ_GOLDEN("tk_quant2.bin", &size), 0, 0};
    r.size = size;
    tk_record rec;
    int n[8] = {0};
    while (tk_next(ts_t_, &r, &rec)) {
        if (!strcmp(rec.name, "ptc")) ptc_case(ts_t_, &rec, n[0]++);
        else if (!strcmp(rec.name, "cbfp4")) cbfp4_case(ts_t_, &rec, n[1]++);
        else if (!strcmp(rec.name, "lossless")) lossless_case(ts_t_, &rec, n[2]++);
        else if (!strcmp(rec.name, "e5m6")) e5m6_case(ts_t_, &rec, n[3]++);
        else if (!strcmp(rec.name, "cbe5m6")) cbe5m6_case(ts_t_, &rec, n[4]++);
        else if (!strcmp(rec.name, "transpose")) transpose_case(ts_t_, &rec), n[5]++;
        else if (!strcmp(rec.name, "pcct")) pcct_case(ts_t_, &rec), n[6]++;
        else TS_CHECK_MSG(false, "unknown record %s", rec.name);
        tk_record_free(&rec);
    }
    TS_CHECK(n[0] >= 20 && n[1] >= 4 && n[2] >= 5 && n[3] >= 6 && n[4] >= 4 && n[5] >= 4 && n[6] >= 5);
    free(r.buf);
}

TS_TEST(tk_quant2_errors) {
    static uint16_t x[4 * 512];
    static uint8_t q[4 * 512], xq[4 * 512];
    static float sf[64], xsf[64];
    memset(x, 0, sizeof x), memset(xq, 0, sizeof xq), memset(xsf, 0, sizeof xsf);
    memset(q, 0x11, sizeof q);
    ts_tensor tx = ts_tensor_2d(x, TS_BF16, 4, 256), tq = ts_tensor_2d(q, TS_E2M1X2, 4, 128);
    ts_tensor tsf = ts_tensor_2d(sf, TS_F32, 4, 8);
    /* gs not a multiple of 16, sf columns, odd H, a wrong output dtype */
    TS_CHECK_STATUS(ts_per_token_cast_bf16_to_fp4(&tx, &tq, &tsf, 24, false), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "multiple of 16") != NULL);
    TS_CHECK_STATUS(ts_per_token_cast_bf16_to_fp4(&tx, &tq, &tsf, 64, false), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "ceil(H / gs) columns") != NULL);
    ts_tensor tx_odd = ts_tensor_2d(x, TS_BF16, 4, 255), tq_odd = ts_tensor_2d(q, TS_E2M1X2, 4, 127);
    TS_CHECK_STATUS(ts_per_token_cast_bf16_to_fp4(&tx_odd, &tq_odd, &tsf, 32, false), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "H / 2 bytes") != NULL);
    ts_tensor tq8 = ts_tensor_2d(q, TS_U8, 4, 128);
    TS_CHECK_STATUS(ts_per_token_cast_bf16_to_fp4(&tx, &tq8, &tsf, 32, false), TS_ERR_DTYPE);
    /* re-quantising: input block width, x_sf shape */
    ts_tensor txe = ts_tensor_2d(xq, TS_E4M3, 4, 256), txsf = ts_tensor_2d(xsf, TS_F32, 1, 2);
    ts_tensor tqe = ts_tensor_2d(q, TS_E4M3, 4, 256);
    TS_CHECK_STATUS(ts_per_token_cast_e4m3_to_e4m3(&txe, &txsf, &tqe, &tsf, 32, 128, 100, false), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "bw a multiple of 16") != NULL);
    TS_CHECK_STATUS(ts_per_token_cast_e4m3_to_e4m3(&txe, &txsf, &tqe, &tsf, 32, 128, 64, false), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "x_sf must be") != NULL);
    size_t written = 0;
    for (size_t i = 0; i < sizeof q; i++) written += q[i] != 0x11;
    TS_CHECK_EQ_INT(written, 0);
    /* zero tokens: nothing to do */
    ts_tensor tx0 = ts_tensor_2d(x, TS_BF16, 0, 256), tq0 = ts_tensor_2d(q, TS_E2M1X2, 0, 128), tsf0 = ts_tensor_2d(sf, TS_F32, 0, 8);
    TS_CHECK_STATUS(ts_per_token_cast_bf16_to_fp4(&tx0, &tq0, &tsf0, 32, true), TS_OK);
    /* lossless: a scale ratio above 2^11 inside one output block is reported after the launch */
    uint32_t e[8] = {120, 120, 120, 120, 133, 120, 120, 120};
    for (int i = 0; i < 8; i++) e[i] <<= 23;
    memcpy(xsf, e, sizeof e);
    ts_tensor tfp4 = ts_tensor_2d(xq, TS_E2M1X2, 1, 128), tls = ts_tensor_2d(xsf, TS_F32, 1, 8);
    ts_tensor tlo = ts_tensor_2d(q, TS_E4M3, 1, 256), tlsf = ts_tensor_2d(sf, TS_F32, 1, 2);
    TS_CHECK_STATUS(ts_per_block_cast_lossless(&tfp4, &tls, &tlo, &tlsf, 1, 32, 1, 128), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "2^11") != NULL);
    e[4] = 132u << 23; /* max / min = 2^12: e_out = 126 > 120 + 5 */
    memcpy(xsf, e, sizeof e);
    TS_CHECK_STATUS(ts_per_block_cast_lossless(&tfp4, &tls, &tlo, &tlsf, 1, 32, 1, 128), TS_ERR_INVALID_ARGUMENT);
    e[4] = 131u << 23; /* max / min = 2^11: e_out = 125 = 120 + 5 */
    memcpy(xsf, e, sizeof e);
    TS_CHECK_STATUS(ts_per_block_cast_lossless(&tfp4, &tls, &tlo, &tlsf, 1, 32, 1, 128), TS_OK);
    TS_CHECK_STATUS(ts_per_block_cast_lossless(&tfp4, &tls, &tlo, &tlsf, 1, 32, 1, 48), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "multiple of the input block") != NULL);
    /* e5m6: H a multiple of 8, one scale column */
    ts_tensor tx5 = ts_tensor_2d(x, TS_BF16, 4, 12), tq5 = ts_tensor_2d(q, TS_E5M6X8, 4, 18), ts5 = ts_tensor_2d(sf, TS_F32, 4, 1);
    TS_CHECK_STATUS(ts_per_token_cast_bf16_to_e5m6(&tx5, &tq5, &ts5, true), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "multiple of 8") != NULL);
    ts_tensor tx6 = ts_tensor_2d(x, TS_BF16, 4, 16), tq6 = ts_tensor_2d(q, TS_E5M6X8, 4, 24), ts6 = ts_tensor_2d(sf, TS_F32, 4, 2);
    TS_CHECK_STATUS(ts_per_token_cast_bf16_to_e5m6(&tx6, &tq6, &ts6, true), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "one column") != NULL);
    /* per_channel_cast_and_transpose: np */
    ts_tensor tpx = ts_tensor_2d(x, TS_BF16, 8, 64), tpq = ts_tensor_2d(q, TS_E4M3, 64, 8), tps = ts_tensor_2d(sf, TS_F32, 1, 64);
    TS_CHECK_STATUS(ts_per_channel_cast_and_transpose(&tpx, &tpq, &tps, 48, false), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "np must be") != NULL);
    /* transpose: shapes and dtypes */
    ts_tensor ta = ts_tensor_3d(x, TS_BF16, 2, 3, 5), tb = ts_tensor_3d(q, TS_BF16, 2, 3, 5), tc = ts_tensor_3d(q, TS_F32, 2, 5, 3);
    TS_CHECK_STATUS(ts_batched_transpose(&ta, &tb), TS_ERR_SHAPE);
    TS_CHECK_STATUS(ts_batched_transpose(&ta, &tc), TS_ERR_DTYPE);
}
