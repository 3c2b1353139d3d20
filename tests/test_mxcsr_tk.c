/* The MXCSR guard (tests/test_mxcsr.c says what and why) on every AOT tile kernel of
 * include/tilestack/kernels.h (the .tile modules of src/kernels/), one test per .tile module, on each ISA
 * variant: activations from quant_input (every e4m3 subnormal code and e2m1 +-0.5 as outputs,
 * tiny normal values 2^-40 .. 2^-60, all-tiny blocks), quantised inputs holding every e4m3
 * subnormal code / every e2m1 code pair, f32 scales 2^-3 .. 2^3 and packed UE8M0 scales whose
 * padding bytes are 0 (H = 1152: 9 groups of 128, 18 of 64, 36 of 32, and a partial 1024-value
 * chunk). The integer-only kernels (MoE routing maps, transposes, copies) are run too: they do
 * no FP arithmetic, so a flag there would mean a stray FP instruction. */
#include "test_mxcsr_common.h"

#include "tilestack/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { TT = 40, TH = 1152 };

/* Shared buffers, big enough for every call below. */
typedef struct tkb {
    float *x32;
    uint16_t *xb, *xh;
    uint8_t *x8, *x4, *x56; /* e4m3 [T, H], e2m1x2 [T, H/2], e5m6x8 [T, 3H/2] inputs */
    float *xsf;             /* input scales, f32 (pow2) */
    int32_t *xsfp;          /* input scales, packed */
    uint8_t *q;             /* quantised outputs */
    float *sf;              /* output scales */
    float *out;             /* dequantised outputs (f32-sized) */
} tkb;

static tkb tkb_make(void) {
    tkb b;
    const size_t n = (size_t)TT * TH;
    b.x32 = malloc(n * 4), b.xb = malloc(n * 2), b.xh = malloc(n * 2);
    b.x8 = malloc(n), b.x4 = malloc(n / 2), b.x56 = malloc(n * 3 / 2);
    b.xsf = malloc(n * 4), b.xsfp = malloc(n * 4), b.q = malloc(2 * n), b.sf = malloc(2 * n * 4), b.out = malloc(n * 4);
    quant_input(b.x32, TT, TH, 448.0f);
    for (size_t i = 0; i < n; i++) b.xb[i] = ts_f32_to_bf16(b.x32[i]), b.xh[i] = ts_f32_to_f16(b.x32[i]);
    fill_e4m3(b.x8, (int64_t)n, 0);
    fill_e2m1(b.x4, (int64_t)n / 2, 0);
    fill_e2m1(b.x56, (int64_t)n * 3 / 2, 5); /* every byte value: e5m6 subnormals among them */
    fill_sf(b.xsf, (int64_t)n, 1);
    return b;
}

static void tkb_free(tkb *b) {
    free(b->x32), free(b->xb), free(b->xh), free(b->x8), free(b->x4), free(b->x56);
    free(b->xsf), free(b->xsfp), free(b->q), free(b->sf), free(b->out);
}

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* x [T, H] of an activation dtype */
static ts_tensor tx(tkb *b, ts_dtype dt) {
    void *p = dt == TS_BF16 ? (void *)b->xb : dt == TS_F16 ? (void *)b->xh : dt == TS_F32 ? (void *)b->x32
            : dt == TS_E4M3 ? (void *)b->x8 : dt == TS_E2M1X2 ? (void *)b->x4 : (void *)b->x56;
    int64_t cols = dt == TS_E2M1X2 ? TH / 2 : dt == TS_E5M6X8 ? TH * 3 / 2 : TH;
    return ts_tensor_2d(p, dt, TT, cols);
}
/* quantised output [T, H] */
static ts_tensor tq(tkb *b, ts_dtype dt) {
    int64_t cols = dt == TS_E2M1X2 ? TH / 2 : dt == TS_E5M6X8 ? TH * 3 / 2 : TH;
    return ts_tensor_2d(b->q, dt, TT, cols);
}
/* output scales: f32 [rows, groups] or packed [rows, ceil(groups / 4)] */
static ts_tensor tsf(tkb *b, int packed, int64_t rows, int64_t groups) {
    return packed ? ts_tensor_2d(b->sf, TS_UE8M0X4, rows, cdiv(groups, 4)) : ts_tensor_2d(b->sf, TS_F32, rows, groups);
}
/* input scales, filled: f32 powers of two or packed bytes 124..130 with zero padding */
static ts_tensor txsf(tkb *b, int packed, int64_t rows, int64_t groups) {
    if (packed) {
        fill_ue8m0_words(b->xsfp, rows, groups);
        return ts_tensor_2d(b->xsfp, TS_UE8M0X4, rows, cdiv(groups, 4));
    }
    return ts_tensor_2d(b->xsf, TS_F32, rows, groups);
}
static ts_tensor tout(tkb *b, ts_dtype dt) { return ts_tensor_2d(b->out, dt, TT, TH); }

/* ---------------------------------------------------------------- one call of any signature */

enum sig { S_XOSB, S_XOS, S_XOSIIB, S_XOSII, S_XOSIB, S_XOSI, S_XSOI, S_XSOII, S_XXOSIIB, S_XXOSII, S_XXOSIIII, S_XSIB,
           S_XSI, S_CUSTOM };

typedef struct tk_call {
    enum sig sig;
    void (*fn)(void);
    ts_status (*custom)(struct tk_call *);
    ts_tensor a, b, c, d, e;
    int64_t i1, i2, i3, i4;
    bool flag;
} tk_call;

typedef ts_status (*f_xosb)(const ts_tensor *, const ts_tensor *, const ts_tensor *, bool);
typedef ts_status (*f_xos)(const ts_tensor *, const ts_tensor *, const ts_tensor *);
typedef ts_status (*f_xosiib)(const ts_tensor *, const ts_tensor *, const ts_tensor *, int64_t, int64_t, bool);
typedef ts_status (*f_xosii)(const ts_tensor *, const ts_tensor *, const ts_tensor *, int64_t, int64_t);
typedef ts_status (*f_xosib)(const ts_tensor *, const ts_tensor *, const ts_tensor *, int64_t, bool);
typedef ts_status (*f_xosi)(const ts_tensor *, const ts_tensor *, const ts_tensor *, int64_t);
typedef ts_status (*f_xxosiib)(const ts_tensor *, const ts_tensor *, const ts_tensor *, const ts_tensor *, int64_t,
                               int64_t, int64_t, bool);
typedef ts_status (*f_xxosii)(const ts_tensor *, const ts_tensor *, const ts_tensor *, const ts_tensor *, int64_t,
                              int64_t, int64_t);
typedef ts_status (*f_xsib)(const ts_tensor *, const ts_tensor *, int64_t, bool);
typedef ts_status (*f_xsi)(const ts_tensor *, const ts_tensor *, int64_t);
typedef ts_status (*f_xxosiiii)(const ts_tensor *, const ts_tensor *, const ts_tensor *, const ts_tensor *, int64_t,
                                int64_t, int64_t, int64_t);

static ts_status tk_call_op(void *vc) {
    tk_call *c = vc;
    switch (c->sig) {
    case S_XOSB: return ((f_xosb)c->fn)(&c->a, &c->b, &c->c, c->flag);
    case S_XOS: return ((f_xos)c->fn)(&c->a, &c->b, &c->c);
    case S_XOSIIB: return ((f_xosiib)c->fn)(&c->a, &c->b, &c->c, c->i1, c->i2, c->flag);
    case S_XOSII: return ((f_xosii)c->fn)(&c->a, &c->b, &c->c, c->i1, c->i2);
    case S_XOSIB: return ((f_xosib)c->fn)(&c->a, &c->b, &c->c, c->i1, c->flag);
    case S_XOSI: return ((f_xosi)c->fn)(&c->a, &c->b, &c->c, c->i1);
    case S_XSOI: return ((f_xosi)c->fn)(&c->a, &c->b, &c->c, c->i1);
    case S_XSOII: return ((f_xosii)c->fn)(&c->a, &c->b, &c->c, c->i1, c->i2);
    case S_XXOSIIB: return ((f_xxosiib)c->fn)(&c->a, &c->b, &c->c, &c->d, c->i1, c->i2, c->i3, c->flag);
    case S_XXOSII: return ((f_xxosii)c->fn)(&c->a, &c->b, &c->c, &c->d, c->i1, c->i2, c->i3);
    case S_XSIB: return ((f_xsib)c->fn)(&c->a, &c->b, c->i1, c->flag);
    case S_XSI: return ((f_xsi)c->fn)(&c->a, &c->b, c->i1);
    case S_CUSTOM: return c->custom(c);
    default: return ((f_xxosiiii)c->fn)(&c->a, &c->b, &c->c, &c->d, c->i1, c->i2, c->i3, c->i4);
    }
}

#define FN(f) ((void (*)(void))(f))

/* per_channel_cast_fused_*: (x, [x_sf if e4m3], [pos_to_token if gather], out, sf, round_sf) */
static ts_status pcf_call(tk_call *k) {
    typedef ts_status (*f4)(const ts_tensor *, const ts_tensor *, const ts_tensor *, bool);
    typedef ts_status (*f5)(const ts_tensor *, const ts_tensor *, const ts_tensor *, const ts_tensor *, bool);
    typedef ts_status (*f6)(const ts_tensor *, const ts_tensor *, const ts_tensor *, const ts_tensor *,
                            const ts_tensor *, bool);
    const int e4m3 = (int)k->i1, gather = (int)k->i2;
    if (e4m3 && gather) return ((f6)k->fn)(&k->a, &k->b, &k->c, &k->d, &k->e, k->flag);
    if (e4m3) return ((f5)k->fn)(&k->a, &k->b, &k->d, &k->e, k->flag);
    if (gather) return ((f5)k->fn)(&k->a, &k->c, &k->d, &k->e, k->flag);
    return ((f4)k->fn)(&k->a, &k->d, &k->e, k->flag);
}

static void run3(mx_fam *f, const char *name, enum sig s, void (*fn)(void), ts_tensor a, ts_tensor b, ts_tensor c,
                 int64_t i1, int64_t i2, bool flag) {
    tk_call k = {.sig = s, .fn = fn, .a = a, .b = b, .c = c, .i1 = i1, .i2 = i2, .flag = flag};
    mx_run(f, name, tk_call_op, &k);
}
static void run4(mx_fam *f, const char *name, enum sig s, void (*fn)(void), ts_tensor a, ts_tensor b, ts_tensor c,
                 ts_tensor d, int64_t i1, int64_t i2, int64_t i3, int64_t i4, bool flag) {
    tk_call k = {.sig = s, .fn = fn, .a = a, .b = b, .c = c, .d = d, .i1 = i1, .i2 = i2, .i3 = i3, .i4 = i4, .flag = flag};
    mx_run(f, name, tk_call_op, &k);
}

/* ---------------------------------------------------------------- cast.tile, per_token_cast.tile */

TS_TEST(mxcsr_tk_cast) {
    mx_fam f = mx_begin(ts_t_, "tile kernels: cast.tile, per_token_cast.tile");
    if (!f.ok) return;
    tkb b = tkb_make();
    for (int r = 0; r < 2; r++) {
        run3(&f, r ? "per_block_cast round_sf" : "per_block_cast", S_XOSB, FN(ts_per_block_cast), tx(&b, TS_BF16),
             tq(&b, TS_E4M3), tsf(&b, 0, cdiv(TT, 128), cdiv(TH, 128)), 0, 0, r);
        run3(&f, r ? "per_block_cast_32 round_sf" : "per_block_cast_32", S_XOSB, FN(ts_per_block_cast_32),
             tx(&b, TS_BF16), tq(&b, TS_E4M3), tsf(&b, 0, cdiv(TT, 32), cdiv(TH, 32)), 0, 0, r);
        run3(&f, r ? "per_block_cast_fp4 round_sf" : "per_block_cast_fp4", S_XOSB, FN(ts_per_block_cast_fp4),
             tx(&b, TS_BF16), tq(&b, TS_E2M1X2), tsf(&b, 0, cdiv(TT, 128), cdiv(TH, 128)), 0, 0, r);
        run3(&f, r ? "per_block_cast_fp4_32 round_sf" : "per_block_cast_fp4_32", S_XOSB, FN(ts_per_block_cast_fp4_32),
             tx(&b, TS_BF16), tq(&b, TS_E2M1X2), tsf(&b, 0, cdiv(TT, 32), cdiv(TH, 32)), 0, 0, r);
        run3(&f, r ? "per_channel_cast round_sf" : "per_channel_cast", S_XOSB, FN(ts_per_channel_cast),
             tx(&b, TS_BF16), tq(&b, TS_E4M3), tsf(&b, 0, cdiv(TT, 128), TH), 0, 0, r);
        run3(&f, r ? "per_token_cast_e4m3 ue8m0" : "per_token_cast_e4m3", S_XOSB, FN(ts_per_token_cast_e4m3),
             tx(&b, TS_BF16), tq(&b, TS_E4M3), tsf(&b, 0, TT, cdiv(TH, 128)), 0, 0, r);
    }
    run3(&f, "cast_back", S_XSOII, FN(ts_cast_back), tx(&b, TS_E4M3), txsf(&b, 0, TT, cdiv(TH, 128)),
         tout(&b, TS_BF16), 1, 128, 0);
    run3(&f, "cast_back_f32", S_XSOII, FN(ts_cast_back_f32), tx(&b, TS_E4M3), txsf(&b, 0, cdiv(TT, 8), cdiv(TH, 32)),
         tout(&b, TS_F32), 8, 32, 0);
    mx_end(&f);
    tkb_free(&b);
}

/* ---------------------------------------------------------------- deepgemm_quant.tile */

TS_TEST(mxcsr_tk_deepgemm_quant) {
    mx_fam f = mx_begin(ts_t_, "tile kernels: deepgemm_quant.tile");
    if (!f.ok) return;
    tkb b = tkb_make();
    char name[96];
    /* per-token / per-block FP8 */
    struct { const char *n; ts_dtype x; int g; void (*tok)(void), (*tokpk)(void), (*blk)(void); } fp8[] = {
        {"bf16_g128", TS_BF16, 128, FN(ts_dg_fp8_token_bf16_g128), FN(ts_dg_fp8_token_bf16_g128_pk), FN(ts_dg_fp8_block_bf16_g128)},
        {"bf16_g64", TS_BF16, 64, FN(ts_dg_fp8_token_bf16_g64), FN(ts_dg_fp8_token_bf16_g64_pk), FN(ts_dg_fp8_block_bf16_g64)},
        {"bf16_g32", TS_BF16, 32, FN(ts_dg_fp8_token_bf16_g32), FN(ts_dg_fp8_token_bf16_g32_pk), FN(ts_dg_fp8_block_bf16_g32)},
        {"f16_g128", TS_F16, 128, FN(ts_dg_fp8_token_f16_g128), FN(ts_dg_fp8_token_f16_g128_pk), FN(ts_dg_fp8_block_f16_g128)},
        {"f32_g128", TS_F32, 128, FN(ts_dg_fp8_token_f32_g128), FN(ts_dg_fp8_token_f32_g128_pk), FN(ts_dg_fp8_block_f32_g128)},
    };
    for (size_t i = 0; i < sizeof fp8 / sizeof fp8[0]; i++) {
        const int64_t g = fp8[i].g;
        for (int ue = 0; ue < 2; ue++) {
            snprintf(name, sizeof name, "dg_fp8_token_%s%s", fp8[i].n, ue ? " ue8m0" : "");
            run3(&f, name, S_XOSB, fp8[i].tok, tx(&b, fp8[i].x), tq(&b, TS_E4M3), tsf(&b, 0, TT, cdiv(TH, g)), 0, 0, ue);
            snprintf(name, sizeof name, "dg_fp8_block_%s%s", fp8[i].n, ue ? " ue8m0" : "");
            run3(&f, name, S_XOSB, fp8[i].blk, tx(&b, fp8[i].x), tq(&b, TS_E4M3),
                 tsf(&b, 0, cdiv(TT, g), cdiv(TH, g)), 0, 0, ue);
        }
        snprintf(name, sizeof name, "dg_fp8_token_%s_pk", fp8[i].n);
        run3(&f, name, S_XOS, fp8[i].tokpk, tx(&b, fp8[i].x), tq(&b, TS_E4M3), tsf(&b, 1, TT, cdiv(TH, g)), 0, 0, 0);
    }
    /* general FP8 (any block), per-channel FP8 */
    struct { const char *n; ts_dtype x; void (*gen)(void), (*genpk)(void), (*ch)(void); } gen[] = {
        {"bf16_c128", TS_BF16, FN(ts_dg_fp8_gen_bf16_c128), NULL, FN(ts_dg_fp8_channel_bf16)},
        {"bf16_c32", TS_BF16, FN(ts_dg_fp8_gen_bf16_c32), FN(ts_dg_fp8_gen_bf16_c32_pk), NULL},
        {"f16_c128", TS_F16, FN(ts_dg_fp8_gen_f16_c128), NULL, FN(ts_dg_fp8_channel_f16)},
        {"f16_c32", TS_F16, FN(ts_dg_fp8_gen_f16_c32), FN(ts_dg_fp8_gen_f16_c32_pk), NULL},
        {"f32_c128", TS_F32, FN(ts_dg_fp8_gen_f32_c128), NULL, FN(ts_dg_fp8_channel_f32)},
        {"f32_c32", TS_F32, FN(ts_dg_fp8_gen_f32_c32), FN(ts_dg_fp8_gen_f32_c32_pk), NULL},
    };
    static const int64_t blocks[][2] = {{1, 96}, {8, 48}, {1, 32}};
    for (size_t i = 0; i < sizeof gen / sizeof gen[0]; i++) {
        for (size_t k = 0; k < 3; k++) {
            const int64_t bm = blocks[k][0], bk = blocks[k][1];
            for (int ue = 0; ue < 2; ue++) {
                snprintf(name, sizeof name, "dg_fp8_gen_%s (%d, %d)%s", gen[i].n, (int)bm, (int)bk, ue ? " ue8m0" : "");
                run3(&f, name, S_XOSIIB, gen[i].gen, tx(&b, gen[i].x), tq(&b, TS_E4M3),
                     tsf(&b, 0, cdiv(TT, bm), cdiv(TH, bk)), bm, bk, ue);
            }
            if (gen[i].genpk) {
                snprintf(name, sizeof name, "dg_fp8_gen_%s_pk (%d, %d)", gen[i].n, (int)bm, (int)bk);
                run3(&f, name, S_XOSII, gen[i].genpk, tx(&b, gen[i].x), tq(&b, TS_E4M3),
                     tsf(&b, 1, cdiv(TT, bm), cdiv(TH, bk)), bm, bk, 0);
            }
        }
        if (gen[i].ch)
            for (int ue = 0; ue < 2; ue++) {
                snprintf(name, sizeof name, "dg_fp8_channel_%s%s", gen[i].n, ue ? " ue8m0" : "");
                run3(&f, name, S_XOSIB, gen[i].ch, tx(&b, gen[i].x), tq(&b, TS_E4M3), tsf(&b, 0, TT / 8, TH), 8, 0, ue);
            }
    }
    /* FP4, the 448-amax blocks are too big for e2m1: the 6-amax input puts +-0.5 (code 1 / 9)
     * and every midpoint into the outputs */
    quant_input(b.x32, TT, TH, 6.0f);
    for (int64_t i = 0; i < (int64_t)TT * TH; i++) b.xb[i] = ts_f32_to_bf16(b.x32[i]), b.xh[i] = ts_f32_to_f16(b.x32[i]);
    struct { int g; void (*t)(void), (*tpk)(void), (*tr)(void), (*tpkr)(void); } fp4[] = {
        {32, FN(ts_dg_fp4_token_bf16_g32), FN(ts_dg_fp4_token_bf16_g32_pk), FN(ts_dg_fp4_token_bf16_g32_rne),
         FN(ts_dg_fp4_token_bf16_g32_pk_rne)},
        {64, FN(ts_dg_fp4_token_bf16_g64), FN(ts_dg_fp4_token_bf16_g64_pk), FN(ts_dg_fp4_token_bf16_g64_rne),
         FN(ts_dg_fp4_token_bf16_g64_pk_rne)},
        {128, FN(ts_dg_fp4_token_bf16_g128), FN(ts_dg_fp4_token_bf16_g128_pk), FN(ts_dg_fp4_token_bf16_g128_rne),
         FN(ts_dg_fp4_token_bf16_g128_pk_rne)},
    };
    for (size_t i = 0; i < 3; i++) {
        const int64_t g = fp4[i].g;
        for (int ue = 0; ue < 2; ue++) {
            snprintf(name, sizeof name, "dg_fp4_token_bf16_g%d%s", (int)g, ue ? " ue8m0" : "");
            run3(&f, name, S_XOSB, fp4[i].t, tx(&b, TS_BF16), tq(&b, TS_E2M1X2), tsf(&b, 0, TT, cdiv(TH, g)), 0, 0, ue);
            snprintf(name, sizeof name, "dg_fp4_token_bf16_g%d_rne%s", (int)g, ue ? " ue8m0" : "");
            run3(&f, name, S_XOSB, fp4[i].tr, tx(&b, TS_BF16), tq(&b, TS_E2M1X2), tsf(&b, 0, TT, cdiv(TH, g)), 0, 0, ue);
        }
        snprintf(name, sizeof name, "dg_fp4_token_bf16_g%d_pk", (int)g);
        run3(&f, name, S_XOS, fp4[i].tpk, tx(&b, TS_BF16), tq(&b, TS_E2M1X2), tsf(&b, 1, TT, cdiv(TH, g)), 0, 0, 0);
        snprintf(name, sizeof name, "dg_fp4_token_bf16_g%d_pk_rne", (int)g);
        run3(&f, name, S_XOS, fp4[i].tpkr, tx(&b, TS_BF16), tq(&b, TS_E2M1X2), tsf(&b, 1, TT, cdiv(TH, g)), 0, 0, 0);
    }
    struct { const char *n; ts_dtype x; void (*g)(void), (*gpk)(void), (*gr)(void), (*gpkr)(void); } fp4g[] = {
        {"bf16", TS_BF16, FN(ts_dg_fp4_gen_bf16), FN(ts_dg_fp4_gen_bf16_pk), FN(ts_dg_fp4_gen_bf16_rne), FN(ts_dg_fp4_gen_bf16_pk_rne)},
        {"f16", TS_F16, FN(ts_dg_fp4_gen_f16), FN(ts_dg_fp4_gen_f16_pk), FN(ts_dg_fp4_gen_f16_rne), FN(ts_dg_fp4_gen_f16_pk_rne)},
        {"f32", TS_F32, FN(ts_dg_fp4_gen_f32), FN(ts_dg_fp4_gen_f32_pk), FN(ts_dg_fp4_gen_f32_rne), FN(ts_dg_fp4_gen_f32_pk_rne)},
    };
    for (size_t i = 0; i < 3; i++)
        for (int64_t gk = 48; gk <= 96; gk += 48) {
            for (int ue = 0; ue < 2; ue++) {
                snprintf(name, sizeof name, "dg_fp4_gen_%s gk %d%s", fp4g[i].n, (int)gk, ue ? " ue8m0" : "");
                run3(&f, name, S_XOSIB, fp4g[i].g, tx(&b, fp4g[i].x), tq(&b, TS_E2M1X2), tsf(&b, 0, TT, cdiv(TH, gk)), gk, 0, ue);
                snprintf(name, sizeof name, "dg_fp4_gen_%s_rne gk %d%s", fp4g[i].n, (int)gk, ue ? " ue8m0" : "");
                run3(&f, name, S_XOSIB, fp4g[i].gr, tx(&b, fp4g[i].x), tq(&b, TS_E2M1X2), tsf(&b, 0, TT, cdiv(TH, gk)), gk, 0, ue);
            }
            snprintf(name, sizeof name, "dg_fp4_gen_%s_pk gk %d", fp4g[i].n, (int)gk);
            run3(&f, name, S_XOSI, fp4g[i].gpk, tx(&b, fp4g[i].x), tq(&b, TS_E2M1X2), tsf(&b, 1, TT, cdiv(TH, gk)), gk, 0, 0);
            snprintf(name, sizeof name, "dg_fp4_gen_%s_pk_rne gk %d", fp4g[i].n, (int)gk);
            run3(&f, name, S_XOSI, fp4g[i].gpkr, tx(&b, fp4g[i].x), tq(&b, TS_E2M1X2), tsf(&b, 1, TT, cdiv(TH, gk)), gk, 0, 0);
        }
    /* cast back: every e4m3 / e2m1 code, f32 and packed (zero-padded) scales */
    struct { const char *n; ts_dtype q, o; int gk; int pk; void (*fn)(void), (*gen)(void); } cb[] = {
        {"fp8_bf16", TS_E4M3, TS_BF16, 128, 0, FN(ts_dg_cast_back_fp8_bf16_g128), FN(ts_dg_cast_back_gen_fp8_bf16)},
        {"fp8_bf16_pk", TS_E4M3, TS_BF16, 128, 1, FN(ts_dg_cast_back_fp8_bf16_g128_pk), FN(ts_dg_cast_back_gen_fp8_bf16_pk)},
        {"fp8_f16", TS_E4M3, TS_F16, 128, 0, FN(ts_dg_cast_back_fp8_f16_g128), FN(ts_dg_cast_back_gen_fp8_f16)},
        {"fp8_f16_pk", TS_E4M3, TS_F16, 128, 1, FN(ts_dg_cast_back_fp8_f16_g128_pk), FN(ts_dg_cast_back_gen_fp8_f16_pk)},
        {"fp8_f32", TS_E4M3, TS_F32, 128, 0, FN(ts_dg_cast_back_fp8_f32_g128), FN(ts_dg_cast_back_gen_fp8_f32)},
        {"fp8_f32_pk", TS_E4M3, TS_F32, 128, 1, FN(ts_dg_cast_back_fp8_f32_g128_pk), FN(ts_dg_cast_back_gen_fp8_f32_pk)},
        {"fp4_bf16", TS_E2M1X2, TS_BF16, 32, 0, FN(ts_dg_cast_back_fp4_bf16_g32), FN(ts_dg_cast_back_gen_fp4_bf16)},
        {"fp4_bf16_pk", TS_E2M1X2, TS_BF16, 32, 1, FN(ts_dg_cast_back_fp4_bf16_g32_pk), FN(ts_dg_cast_back_gen_fp4_bf16_pk)},
        {"fp4_f16", TS_E2M1X2, TS_F16, 32, 0, FN(ts_dg_cast_back_fp4_f16_g32), FN(ts_dg_cast_back_gen_fp4_f16)},
        {"fp4_f16_pk", TS_E2M1X2, TS_F16, 32, 1, FN(ts_dg_cast_back_fp4_f16_g32_pk), FN(ts_dg_cast_back_gen_fp4_f16_pk)},
        {"fp4_f32", TS_E2M1X2, TS_F32, 32, 0, FN(ts_dg_cast_back_fp4_f32_g32), FN(ts_dg_cast_back_gen_fp4_f32)},
        {"fp4_f32_pk", TS_E2M1X2, TS_F32, 32, 1, FN(ts_dg_cast_back_fp4_f32_g32_pk), FN(ts_dg_cast_back_gen_fp4_f32_pk)},
    };
    for (size_t i = 0; i < sizeof cb / sizeof cb[0]; i++)
        for (int64_t gmn = 1; gmn <= 128; gmn *= 128) {
            snprintf(name, sizeof name, "dg_cast_back_%s gmn %d", cb[i].n, (int)gmn);
            run3(&f, name, S_XSOI, cb[i].fn, tx(&b, cb[i].q), txsf(&b, cb[i].pk, cdiv(TT, gmn), cdiv(TH, cb[i].gk)),
                 tout(&b, cb[i].o), gmn, 0, 0);
            const int64_t gk = cb[i].q == TS_E4M3 ? 96 : 48;
            snprintf(name, sizeof name, "dg_cast_back_gen_%s gmn %d gk %d", cb[i].n, (int)gmn, (int)gk);
            run3(&f, name, S_XSOII, cb[i].gen, tx(&b, cb[i].q), txsf(&b, cb[i].pk, cdiv(TT, gmn), cdiv(TH, gk)),
                 tout(&b, cb[i].o), gmn, gk, 0);
        }
    mx_end(&f);
    tkb_free(&b);
}

/* e5m6 cast input (see mxcsr_tk_quant): per row +-448 (the amax), every m * 2^-27 (m = 1..63)
 * when the scale is a power of two (exact e5m6 subnormals), ordinary values >= 2^-9 */
static void e5m6_input(tkb *b, int pow2_scale) {
    for (int64_t r = 0; r < TT; r++)
        for (int64_t j = 0; j < TH; j++) {
            float v;
            if (j % 37 == r % 37) v = (j + r) % 2 ? 448.0f : -448.0f;
            else if (pow2_scale && j % 3 != 2) v = ldexpf((float)(1 + (j + r) % 63), -27) * ((j & 4) ? -1.0f : 1.0f);
            else v = mx_bf16_pat(j + r) == 0.0f || fabsf(mx_bf16_pat(j + r)) >= 0x1p-9f ? mx_bf16_pat(j + r) : 0x1p-9f;
            b->x32[r * TH + j] = v;
            b->xb[r * TH + j] = ts_f32_to_bf16(v);
        }
}

/* ---------------------------------------------------------------- quant_fp4 / quant_more / quant_e5m6 / quant_lossless */

TS_TEST(mxcsr_tk_quant) {
    mx_fam f = mx_begin(ts_t_, "tile kernels: quant_fp4, quant_more, quant_e5m6, quant_lossless .tile");
    if (!f.ok) return;
    tkb b = tkb_make();
    char name[112];
    /* per_token_cast<XT, OT, SF> (quant_fp4.tile): OT e4m3 takes the 448-amax input, e2m1 the
     * 6-amax one (see mxcsr_tk_deepgemm_quant) */
    struct { const char *n; ts_dtype x, o; void (*f32s)(void), (*ue)(void); } ptc[] = {
        {"bf16_to_e4m3", TS_BF16, TS_E4M3, FN(ts_per_token_cast_bf16_to_e4m3), FN(ts_per_token_cast_bf16_to_e4m3_ue8m0)},
        {"f32_to_e4m3", TS_F32, TS_E4M3, FN(ts_per_token_cast_f32_to_e4m3), FN(ts_per_token_cast_f32_to_e4m3_ue8m0)},
        {"bf16_to_fp4", TS_BF16, TS_E2M1X2, FN(ts_per_token_cast_bf16_to_fp4), FN(ts_per_token_cast_bf16_to_fp4_ue8m0)},
        {"f32_to_fp4", TS_F32, TS_E2M1X2, FN(ts_per_token_cast_f32_to_fp4), FN(ts_per_token_cast_f32_to_fp4_ue8m0)},
    };
    struct { const char *n; ts_dtype x, o; void (*f32s)(void), (*ue)(void); } rq[] = {
        {"e4m3_to_e4m3", TS_E4M3, TS_E4M3, FN(ts_per_token_cast_e4m3_to_e4m3), FN(ts_per_token_cast_e4m3_to_e4m3_ue8m0)},
        {"e4m3_to_fp4", TS_E4M3, TS_E2M1X2, FN(ts_per_token_cast_e4m3_to_fp4), FN(ts_per_token_cast_e4m3_to_fp4_ue8m0)},
        {"fp4_to_e4m3", TS_E2M1X2, TS_E4M3, FN(ts_per_token_cast_fp4_to_e4m3), FN(ts_per_token_cast_fp4_to_e4m3_ue8m0)},
        {"fp4_to_fp4", TS_E2M1X2, TS_E2M1X2, FN(ts_per_token_cast_fp4_to_fp4), FN(ts_per_token_cast_fp4_to_fp4_ue8m0)},
    };
    /* sf_only / precomputed_sf (quant_more.tile) */
    struct { const char *n; ts_dtype x, o; void (*so)(void), (*sou)(void), (*pc)(void), (*pcu)(void); } more[] = {
        {"bf16_to_e4m3", TS_BF16, TS_E4M3, FN(ts_per_token_cast_bf16_to_e4m3_sf_only), FN(ts_per_token_cast_bf16_to_e4m3_sf_only_ue8m0),
         FN(ts_per_token_cast_bf16_to_e4m3_precomputed_sf), FN(ts_per_token_cast_bf16_to_e4m3_precomputed_sf_ue8m0)},
        {"f32_to_e4m3", TS_F32, TS_E4M3, FN(ts_per_token_cast_f32_to_e4m3_sf_only), FN(ts_per_token_cast_f32_to_e4m3_sf_only_ue8m0),
         FN(ts_per_token_cast_f32_to_e4m3_precomputed_sf), FN(ts_per_token_cast_f32_to_e4m3_precomputed_sf_ue8m0)},
        {"bf16_to_fp4", TS_BF16, TS_E2M1X2, FN(ts_per_token_cast_bf16_to_fp4_sf_only), FN(ts_per_token_cast_bf16_to_fp4_sf_only_ue8m0),
         FN(ts_per_token_cast_bf16_to_fp4_precomputed_sf), FN(ts_per_token_cast_bf16_to_fp4_precomputed_sf_ue8m0)},
        {"f32_to_fp4", TS_F32, TS_E2M1X2, FN(ts_per_token_cast_f32_to_fp4_sf_only), FN(ts_per_token_cast_f32_to_fp4_sf_only_ue8m0),
         FN(ts_per_token_cast_f32_to_fp4_precomputed_sf), FN(ts_per_token_cast_f32_to_fp4_precomputed_sf_ue8m0)},
    };
    for (int pass = 0; pass < 2; pass++) { /* 0: e4m3 outputs (amax 448), 1: fp4 outputs (amax 6) */
        quant_input(b.x32, TT, TH, pass ? 6.0f : 448.0f);
        for (int64_t i = 0; i < (int64_t)TT * TH; i++) b.xb[i] = ts_f32_to_bf16(b.x32[i]);
        const ts_dtype od = pass ? TS_E2M1X2 : TS_E4M3;
        for (int64_t gs = 32; gs <= 128; gs += 96)
            for (size_t i = 0; i < 4; i++) {
                if (ptc[i].o == od) {
                    for (int r = 0; r < 2; r++) {
                        snprintf(name, sizeof name, "per_token_cast_%s gs %d%s", ptc[i].n, (int)gs, r ? " round_sf" : "");
                        run3(&f, name, S_XOSIB, ptc[i].f32s, tx(&b, ptc[i].x), tq(&b, od), tsf(&b, 0, TT, cdiv(TH, gs)), gs, 0, r);
                    }
                    snprintf(name, sizeof name, "per_token_cast_%s_ue8m0 gs %d", ptc[i].n, (int)gs);
                    run3(&f, name, S_XOSI, ptc[i].ue, tx(&b, ptc[i].x), tq(&b, od), tsf(&b, 1, TT, cdiv(TH, gs)), gs, 0, 0);
                }
                if (more[i].o == od) {
                    for (int r = 0; r < 2; r++) {
                        snprintf(name, sizeof name, "per_token_cast_%s_sf_only gs %d%s", more[i].n, (int)gs, r ? " round_sf" : "");
                        run3(&f, name, S_XSIB, more[i].so, tx(&b, more[i].x), tsf(&b, 0, TT, cdiv(TH, gs)), (ts_tensor){0}, gs, 0, r);
                        /* the scales just computed (still in the buffer) are the precomputed ones */
                        snprintf(name, sizeof name, "per_token_cast_%s_precomputed_sf gs %d%s", more[i].n, (int)gs, r ? " round_sf" : "");
                        run3(&f, name, S_XOSI, more[i].pc, tx(&b, more[i].x), tsf(&b, 0, TT, cdiv(TH, gs)), tq(&b, od), gs, 0, 0);
                    }
                    snprintf(name, sizeof name, "per_token_cast_%s_sf_only_ue8m0 gs %d", more[i].n, (int)gs);
                    run3(&f, name, S_XSI, more[i].sou, tx(&b, more[i].x), tsf(&b, 1, TT, cdiv(TH, gs)), (ts_tensor){0}, gs, 0, 0);
                    snprintf(name, sizeof name, "per_token_cast_%s_precomputed_sf_ue8m0 gs %d", more[i].n, (int)gs);
                    run3(&f, name, S_XOSI, more[i].pcu, tx(&b, more[i].x), tsf(&b, 1, TT, cdiv(TH, gs)), tq(&b, od), gs, 0, 0);
                }
                /* re-quantising FP8 / FP4 input, input scales (1, 128) f32 or (1, 32) packed */
                if (rq[i].o == od)
                    for (int pk = 0; pk < 2; pk++) {
                        const int64_t bw = pk ? 32 : 128;
                        if (pk) {
                            snprintf(name, sizeof name, "per_token_cast_%s_ue8m0 gs %d", rq[i].n, (int)gs);
                            run4(&f, name, S_XXOSII, rq[i].ue, tx(&b, rq[i].x), txsf(&b, 1, TT, cdiv(TH, bw)), tq(&b, od),
                                 tsf(&b, 1, TT, cdiv(TH, gs)), gs, 1, bw, 0, 0);
                        } else {
                            for (int r = 0; r < 2; r++) {
                                snprintf(name, sizeof name, "per_token_cast_%s gs %d%s", rq[i].n, (int)gs, r ? " round_sf" : "");
                                run4(&f, name, S_XXOSIIB, rq[i].f32s, tx(&b, rq[i].x), txsf(&b, 0, TT, cdiv(TH, bw)), tq(&b, od),
                                     tsf(&b, 0, TT, cdiv(TH, gs)), gs, 1, bw, 0, r);
                            }
                        }
                    }
            }
    }
    /* FP4 cast back */
    struct { const char *n; ts_dtype o; int pk; void (*fn)(void); } cbf[] = {
        {"cast_back_fp4", TS_BF16, 0, FN(ts_cast_back_fp4)}, {"cast_back_fp4_f32", TS_F32, 0, FN(ts_cast_back_fp4_f32)},
        {"cast_back_fp4_ue8m0", TS_BF16, 1, FN(ts_cast_back_fp4_ue8m0)}, {"cast_back_fp4_f32_ue8m0", TS_F32, 1, FN(ts_cast_back_fp4_f32_ue8m0)},
    };
    for (size_t i = 0; i < 4; i++)
        run3(&f, cbf[i].n, S_XSOII, cbf[i].fn, tx(&b, TS_E2M1X2), txsf(&b, cbf[i].pk, TT, cdiv(TH, 32)), tout(&b, cbf[i].o), 1, 32, 0);
    /* per_channel_cast_fused (quant_more.tile): plain and gathered rows (some -1) */
    quant_input(b.x32, TT, TH, 448.0f);
    for (int64_t i = 0; i < (int64_t)TT * TH; i++) b.xb[i] = ts_f32_to_bf16(b.x32[i]);
    {
        int32_t ptok[TT + 8];
        for (int i = 0; i < TT + 8; i++) ptok[i] = i % 9 == 4 ? -1 : (int32_t)((i * 7) % TT);
        struct { const char *n; ts_dtype x; void (*p)(void), (*g)(void); } pcf[] = {
            {"bf16", TS_BF16, FN(ts_per_channel_cast_fused_bf16), FN(ts_per_channel_cast_fused_bf16_gather)},
            {"f32", TS_F32, FN(ts_per_channel_cast_fused_f32), FN(ts_per_channel_cast_fused_f32_gather)},
            {"e4m3", TS_E4M3, FN(ts_per_channel_cast_fused_e4m3), FN(ts_per_channel_cast_fused_e4m3_gather)},
        };
        for (size_t i = 0; i < 3; i++)
            for (int g = 0; g < 2; g++)
                for (int r = 0; r < 2; r++) {
                    tk_call k = {.sig = S_CUSTOM, .custom = pcf_call, .fn = g ? pcf[i].g : pcf[i].p, .flag = r};
                    k.i1 = pcf[i].x == TS_E4M3, k.i2 = g;
                    k.a = tx(&b, pcf[i].x);
                    k.b = txsf(&b, 0, TT, cdiv(TH, 128));
                    k.c = ts_tensor_1d(ptok, TS_I32, TT + 8);
                    k.d = ts_tensor_2d(b.q, TS_E4M3, g ? TT + 8 : TT, TH);
                    k.e = ts_tensor_2d(b.sf, TS_F32, cdiv(g ? TT + 8 : TT, 128), TH);
                    snprintf(name, sizeof name, "per_channel_cast_fused_%s%s%s", pcf[i].n, g ? "_gather" : "", r ? " round_sf" : "");
                    mx_run(&f, name, tk_call_op, &k);
                }
    }
    /* e5m6 (quant_e5m6.tile): one scale per row (amax 448 here). The encoder's f16 step
     * (vcvtps2ph, round toward zero, in the AVX2 variant) raises UE whenever a product x * inv
     * lands inexactly below the f16 normal range: that is the conversion producing its own
     * subnormal (or zero) result, not an intermediate, and measured on this Ice Lake it takes
     * no assist (1.3 ns per instruction either way, unlike a subnormal from an FP multiply).
     * So the inputs keep the e5m6 subnormal outputs exact: with a power-of-two scale (round_sf,
     * ue8m0: inv = 2^7) the values m * 2^-27 give every e5m6 subnormal m * 2^-20 exactly;
     * with the f32 scale (inv = 65024 / 448, never exact) tiny values are left out. */
    {
        struct { const char *n; ts_dtype x; void (*f32s)(void), (*ue)(void); } e56[] = {
            {"bf16", TS_BF16, FN(ts_per_token_cast_bf16_to_e5m6), FN(ts_per_token_cast_bf16_to_e5m6_ue8m0)},
            {"f32", TS_F32, FN(ts_per_token_cast_f32_to_e5m6), FN(ts_per_token_cast_f32_to_e5m6_ue8m0)},
        };
        for (size_t i = 0; i < 2; i++) {
            for (int r = 0; r < 2; r++) {
                e5m6_input(&b, r);
                snprintf(name, sizeof name, "per_token_cast_%s_to_e5m6%s", e56[i].n, r ? " round_sf" : "");
                run3(&f, name, S_XOSB, e56[i].f32s, tx(&b, e56[i].x), tq(&b, TS_E5M6X8), tsf(&b, 0, TT, 1), 0, 0, r);
            }
            e5m6_input(&b, 1);
            snprintf(name, sizeof name, "per_token_cast_%s_to_e5m6_ue8m0", e56[i].n);
            run3(&f, name, S_XOS, e56[i].ue, tx(&b, e56[i].x), tq(&b, TS_E5M6X8), tsf(&b, 1, TT, 1), 0, 0, 0);
        }
        struct { const char *n; ts_dtype o; int pk; void (*fn)(void); } cb5[] = {
            {"cast_back_e5m6", TS_BF16, 0, FN(ts_cast_back_e5m6)}, {"cast_back_e5m6_f32", TS_F32, 0, FN(ts_cast_back_e5m6_f32)},
            {"cast_back_e5m6_ue8m0", TS_BF16, 1, FN(ts_cast_back_e5m6_ue8m0)},
            {"cast_back_e5m6_f32_ue8m0", TS_F32, 1, FN(ts_cast_back_e5m6_f32_ue8m0)},
        };
        for (size_t i = 0; i < 4; i++)
            run3(&f, cb5[i].n, S_XSOII, cb5[i].fn, tx(&b, TS_E5M6X8), txsf(&b, cb5[i].pk, TT, cdiv(TH, 128)),
                 tout(&b, cb5[i].o), 1, 128, 0);
    }
    /* lossless FP4 -> FP8 re-blocking (quant_lossless.tile): input (1, 32), output (1, 128) */
    {
        struct { const char *n; int ip, op; void (*fn)(void); } ll[] = {
            {"per_block_cast_lossless", 0, 0, FN(ts_per_block_cast_lossless)},
            {"per_block_cast_lossless_f32_to_ue8m0", 0, 1, FN(ts_per_block_cast_lossless_f32_to_ue8m0)},
            {"per_block_cast_lossless_ue8m0_to_f32", 1, 0, FN(ts_per_block_cast_lossless_ue8m0_to_f32)},
            {"per_block_cast_lossless_ue8m0", 1, 1, FN(ts_per_block_cast_lossless_ue8m0)},
        };
        for (size_t i = 0; i < 4; i++)
            run4(&f, ll[i].n, S_XXOSIIII, ll[i].fn, tx(&b, TS_E2M1X2), txsf(&b, ll[i].ip, TT, cdiv(TH, 32)), tq(&b, TS_E4M3),
                 tsf(&b, ll[i].op, TT, cdiv(TH, 128)), 1, 32, 1, 128, 0);
    }
    mx_end(&f);
    tkb_free(&b);
}

/* ---------------------------------------------------------------- rmsnorm_cast, swiglu, rope, transpose */

typedef struct tk_misc {
    int kind;
    ts_tensor t[10];
    int64_t i[4];
    float fv;
    bool b[6];
} tk_misc;

static ts_status misc_op(void *vc) {
    tk_misc *m = vc;
    ts_tensor *t = m->t;
    switch (m->kind) {
    case 0: return ts_rmsnorm_forward_and_per_token_cast(&t[0], &t[1], &t[2], &t[3], 1e-6f, m->i[0], m->b[0]);
    case 1: return ts_rmsnorm_forward_and_per_token_cast_ue8m0(&t[0], &t[1], &t[2], &t[3], 1e-6f, m->i[0]);
    case 2:
        return ts_swiglu_forward_and_per_token_cast(&t[0], &t[1], &t[2], &t[3], &t[4], &t[5], &t[6], m->i[0], m->fv,
                                                    m->b[0], m->b[1], m->b[2], m->b[3], m->b[4], 1e-4f);
    case 3:
        return ts_swiglu_forward_and_per_token_cast_ue8m0(&t[0], &t[1], &t[2], &t[3], &t[4], &t[5], &t[6], m->i[0],
                                                          m->fv, m->b[0], m->b[1], m->b[2], m->b[3], 1e-4f);
    case 4: return ts_apply_rotary(&t[0], &t[1], &t[2], m->i[0], m->b[0], m->b[1], m->b[2]);
    case 5: return ts_apply_rotary_f32(&t[0], &t[1], &t[2], m->i[0], m->b[0], m->b[1], m->b[2]);
    case 6: return ts_batched_transpose(&t[0], &t[1]);
    case 7: return ts_batched_transpose_f32(&t[0], &t[1]);
    case 8: return ts_batched_transpose_e4m3(&t[0], &t[1]);
    default: return ts_per_channel_cast_and_transpose(&t[0], &t[1], &t[2], m->i[0], m->b[0]);
    }
}

TS_TEST(mxcsr_tk_norm_swiglu_rope_transpose) {
    mx_fam f = mx_begin(ts_t_, "tile kernels: rmsnorm_cast, swiglu, rope, transpose .tile");
    if (!f.ok) return;
    tkb b = tkb_make();
    char name[96];
    uint16_t w[TH];
    for (int i = 0; i < TH; i++) w[i] = ts_f32_to_bf16(i % 7 == 3 ? 0x1p-40f : 0.5f + (float)(i % 5) * 0.25f);
    int64_t cnt[3];
    for (int64_t gs = 128; gs <= 384; gs += 256) {
        for (int r = 0; r < 2; r++) {
            tk_misc m = {.kind = 0, .i = {gs}, .b = {r}};
            m.t[0] = tx(&b, TS_BF16), m.t[1] = ts_tensor_1d(w, TS_BF16, TH), m.t[2] = tq(&b, TS_E4M3);
            m.t[3] = tsf(&b, 0, TT, TH / gs);
            snprintf(name, sizeof name, "rmsnorm_forward_and_per_token_cast gs %d%s", (int)gs, r ? " round_sf" : "");
            mx_run(&f, name, misc_op, &m);
        }
        tk_misc m = {.kind = 1, .i = {gs}};
        m.t[0] = tx(&b, TS_BF16), m.t[1] = ts_tensor_1d(w, TS_BF16, TH), m.t[2] = tq(&b, TS_E4M3);
        m.t[3] = tsf(&b, 1, TT, TH / gs);
        snprintf(name, sizeof name, "rmsnorm_forward_and_per_token_cast_ue8m0 gs %d", (int)gs);
        mx_run(&f, name, misc_op, &m);
    }
    /* swiglu: x [P, 2H'] with H' = H / 2 (gate, up); masks and routing weights */
    {
        const int64_t P = TT, H2 = 1024, H = 512;
        int32_t pe[TT], ptt[TT];
        float tw[2 * TT + 1];
        for (int i = 0; i < TT; i++) pe[i] = i % 6 == 5 ? -1 : i % 3, ptt[i] = i % 7 == 2 ? -1 : 2 * i;
        for (int i = 0; i < 2 * TT + 1; i++) tw[i] = i % 4 == 1 ? 0x1p-40f : 0.25f * (float)(i % 5);
        for (int v = 0; v < 4; v++) {
            const bool clamp = v & 1, masks = v & 2;
            for (int pk = 0; pk < 2; pk++) {
                tk_misc m = {.kind = 2 + pk, .i = {128}, .fv = 2.5f};
                m.t[0] = ts_tensor_2d(b.xb, TS_BF16, P, H2);
                m.t[1] = ts_tensor_1d(pe, TS_I32, P), m.t[2] = ts_tensor_1d(ptt, TS_I32, P);
                m.t[3] = ts_tensor_1d(tw, TS_F32, 2 * TT + 1);
                m.t[4] = ts_tensor_2d(b.q, TS_E4M3, P, H);
                m.t[5] = pk ? ts_tensor_2d(b.sf, TS_UE8M0X4, P, cdiv(H / 128, 4)) : ts_tensor_2d(b.sf, TS_F32, P, H / 128);
                m.t[6] = ts_tensor_1d(cnt, TS_I64, 3);
                m.b[0] = clamp, m.b[1] = clamp, m.b[2] = masks, m.b[3] = masks, m.b[4] = v == 3;
                snprintf(name, sizeof name, "swiglu_forward_and_per_token_cast%s%s%s", pk ? "_ue8m0" : "",
                         clamp ? " clamp" : "", masks ? " mask+weights" : "");
                mx_run(&f, name, misc_op, &m);
            }
        }
    }
    /* rope, in place on [T, NH, D] with a cos/sin table; x holds tiny and ordinary values */
    {
        const int64_t NH = 4, D = 64, S = 64;
        float *cs = malloc((size_t)(S * D) * 4);
        for (int64_t p = 0; p < S; p++)
            for (int64_t j = 0; j < D / 2; j++) {
                double ang = (double)p * pow(10000.0, -2.0 * (double)j / (double)D);
                cs[p * D + j] = (float)cos(ang), cs[p * D + D / 2 + j] = (float)sin(ang);
            }
        int32_t pos[TT];
        for (int i = 0; i < TT; i++) pos[i] = (i * 5) % (int)S;
        uint16_t *xr = malloc((size_t)(TT * NH * D) * 2);
        float *xr32 = malloc((size_t)(TT * NH * D) * 4);
        for (int v = 0; v < 8; v++) {
            for (int f32 = 0; f32 < 2; f32++) {
                fill_bf16(xr, TT * NH * D, v);
                for (int64_t i = 0; i < TT * NH * D; i++) xr32[i] = ts_bf16_to_f32(xr[i]);
                tk_misc m = {.kind = 4 + f32, .i = {0}, .b = {v & 1, (v >> 1) & 1, (v >> 2) & 1}};
                m.t[0] = ts_tensor_3d(f32 ? (void *)xr32 : (void *)xr, f32 ? TS_F32 : TS_BF16, TT, NH, D);
                m.t[1] = ts_tensor_2d(cs, TS_F32, S, D);
                m.t[2] = ts_tensor_1d(pos, TS_I32, TT);
                snprintf(name, sizeof name, "apply_rotary%s positions %d interleaved %d conjugate %d", f32 ? "_f32" : "",
                         v & 1, (v >> 1) & 1, (v >> 2) & 1);
                mx_run(&f, name, misc_op, &m);
            }
        }
        free(cs), free(xr), free(xr32);
    }
    /* transposes (copies) and the per-channel cast + transpose */
    {
        const int64_t B = 2, M = TT / 2, N = TH / 2;
        static const char *const tn[] = {"batched_transpose", "batched_transpose_f32", "batched_transpose_e4m3"};
        for (int k = 0; k < 3; k++) {
            tk_misc m = {.kind = 6 + k};
            const ts_dtype dt = k == 0 ? TS_BF16 : k == 1 ? TS_F32 : TS_E4M3;
            m.t[0] = ts_tensor_3d(k == 0 ? (void *)b.xb : k == 1 ? (void *)b.x32 : (void *)b.x8, dt, B, M, N);
            m.t[1] = ts_tensor_3d(b.out, dt, B, N, M);
            mx_run(&f, tn[k], misc_op, &m);
        }
        for (int64_t np = 32; np <= 128; np *= 2)
            for (int r = 0; r < 2; r++) {
                tk_misc m = {.kind = 9, .i = {np}, .b = {r}};
                m.t[0] = tx(&b, TS_BF16), m.t[1] = ts_tensor_2d(b.q, TS_E4M3, TH, TT);
                m.t[2] = ts_tensor_2d(b.sf, TS_F32, cdiv(TT, np), TH);
                snprintf(name, sizeof name, "per_channel_cast_and_transpose np %d%s", (int)np, r ? " round_sf" : "");
                mx_run(&f, name, misc_op, &m);
            }
    }
    mx_end(&f);
    tkb_free(&b);
}

/* ---------------------------------------------------------------- mhc.tile */

typedef struct mhc_ctx {
    int kind;
    ts_tensor R, fn, mix, scale, base, pre, post, comb, combn, li, y, out, x, r2, m4, s1, b4, hd;
    int64_t repeat;
} mhc_ctx;

static ts_status mhc_op(void *vc) {
    mhc_ctx *c = vc;
    switch (c->kind) {
    case 0: return ts_mhc_pre_norm_fn(&c->R, &c->fn, &c->mix, 1e-6f);
    case 1: return ts_mhc_pre_split_mixes(&c->mix, &c->scale, &c->base, &c->pre, &c->post, &c->comb, 2.0f, 1e-6f);
    case 2: return ts_sinkhorn_normalize(&c->comb, &c->combn, c->repeat, 1e-6f);
    case 3: return ts_mhc_pre_apply_mix(&c->R, &c->pre, &c->li);
    case 4: return ts_mhc_post(&c->y, &c->R, &c->post, &c->combn, &c->out);
    case 5: return ts_mhc_head_compute_mix(&c->m4, &c->s1, &c->b4, &c->hd, 1e-6f);
    case 6:
        return ts_mhc_pre(&c->R, &c->fn, &c->scale, &c->base, &c->li, &c->post, &c->comb, 1e-6f, 1e-6f, 2.0f,
                          c->repeat, 1e-6f);
    default: return ts_expand_to_mhc(&c->x, &c->r2);
    }
}

TS_TEST(mxcsr_tk_mhc) {
    mx_fam f = mx_begin(ts_t_, "tile kernels: mhc.tile");
    if (!f.ok) return;
    const int64_t T = 12, H = 256, K = 4 * H;
    uint16_t *R = malloc((size_t)(T * K) * 2), *li = malloc((size_t)(T * H) * 2), *y = malloc((size_t)(T * H) * 2);
    uint16_t *out = malloc((size_t)(T * K) * 2), *r2 = malloc((size_t)(T * K) * 2);
    float *fn = malloc((size_t)(24 * K) * 4), *mix = malloc((size_t)(T * 24) * 4), scale[3] = {0.5f, 0.25f, 0.125f};
    float base[24], *pre = malloc((size_t)(T * 4) * 4), *post = malloc((size_t)(T * 4) * 4);
    float *comb = malloc((size_t)(T * 16) * 4), *combn = malloc((size_t)(T * 16) * 4);
    float *m4 = malloc((size_t)(T * 4) * 4), *hd = malloc((size_t)(T * 4) * 4);
    fill_bf16(R, T * K, 1), fill_bf16(y, T * H, 2);
    for (int64_t i = 0; i < 24 * K; i++) fn[i] = mx_bf16_pat(i * 3) * 0.5f;
    for (int i = 0; i < 24; i++) base[i] = (float)(i % 5) * 0.2f - 0.4f;
    mhc_ctx c;
    memset(&c, 0, sizeof c);
    c.R = ts_tensor_3d(R, TS_BF16, T, 4, H), c.fn = ts_tensor_2d(fn, TS_F32, 24, K);
    c.mix = ts_tensor_2d(mix, TS_F32, T, 24), c.scale = ts_tensor_1d(scale, TS_F32, 3);
    c.base = ts_tensor_1d(base, TS_F32, 24), c.pre = ts_tensor_2d(pre, TS_F32, T, 4);
    c.post = ts_tensor_2d(post, TS_F32, T, 4), c.comb = ts_tensor_2d(comb, TS_F32, T, 16);
    c.combn = ts_tensor_2d(combn, TS_F32, T, 16), c.li = ts_tensor_2d(li, TS_BF16, T, H);
    c.y = ts_tensor_2d(y, TS_BF16, T, H), c.out = ts_tensor_3d(out, TS_BF16, T, 4, H);
    c.x = ts_tensor_2d(y, TS_BF16, T, H), c.r2 = ts_tensor_3d(r2, TS_BF16, T, 4, H);
    c.m4 = ts_tensor_2d(m4, TS_F32, T, 4), c.s1 = ts_tensor_1d(scale, TS_F32, 1);
    c.b4 = ts_tensor_1d(base, TS_F32, 4), c.hd = ts_tensor_2d(hd, TS_F32, T, 4);
    c.repeat = 20;
    static const char *const names[] = {"mhc_pre_norm_fn", "mhc_pre_split_mixes", "sinkhorn_normalize",
                                        "mhc_pre_apply_mix", "mhc_post", "mhc_head_compute_mix", "mhc_pre",
                                        "expand_to_mhc"};
    for (int k = 0; k < 8; k++) {
        if (k == 5)
            for (int64_t i = 0; i < T; i++) memcpy(m4 + i * 4, mix + i * 24, 16);
        c.kind = k;
        mx_run(&f, names[k], mhc_op, &c);
    }
    mx_end(&f);
    free(R), free(li), free(y), free(out), free(r2), free(fn), free(mix), free(pre), free(post), free(comb);
    free(combn), free(m4), free(hd);
}

/* ---------------------------------------------------------------- moe.tile */

typedef struct moe_ctx {
    int kind;
    ts_tensor t[12];
    int64_t i[12];
    float fv;
    bool b[4];
} moe_ctx;

static ts_status moe_op(void *vc) {
    moe_ctx *m = vc;
    ts_tensor *t = m->t;
    const int64_t *i = m->i;
    switch (m->kind) {
    case 0: return ts_topk_gate(&t[0], &t[1]);
    case 1:
        return ts_top2_sum_gate(&t[0], &t[1], &t[2], &t[3], &t[4], i[0], i[1], i[2], i[3], m->fv, m->b[0], 0, 0, 1, 0,
                                1, &t[5], m->b[1], &t[6], m->b[2], &t[7], &t[8], m->b[3]);
    case 2: return ts_normalize_weight(&t[0], &t[1], &t[2]);
    case 3: return ts_group_count(&t[0], &t[1]);
    case 4: return ts_expand_to_fused(&t[0], &t[1], &t[2]);
    case 5: return ts_expand_to_fused_with_sf(&t[0], &t[1], &t[2], &t[3], &t[4]);
    case 6: return ts_reduce_fused(&t[0], &t[1], &t[2], &t[3]);
    case 7: return ts_topk_sum_and_topk_group_idx(&t[0], &t[1], i[0]);
    case 8: return ts_mask_indices_by_tp(&t[0], &t[1], i[0], i[1], i[2], i[3]);
    case 9: return ts_inplace_unique_group_indices(&t[0], i[0]);
    case 10: return ts_aux_fi(&t[0], &t[1], i[0]);
    default: return ts_get_fused_mapping(&t[0], &t[1], &t[2], &t[3], &t[4], &t[5], &t[6], &t[7], i[0]);
    }
}

TS_TEST(mxcsr_tk_moe) {
    mx_fam f = mx_begin(ts_t_, "tile kernels: moe.tile");
    if (!f.ok) return;
    enum { T = 24, E = 64, K = 6, G = 8, H = 256 };
    char name[96];
    float *sc = malloc((size_t)(T * E) * 4), bias[E], *w = malloc((size_t)(T * K) * 4), den[T];
    float *nw = malloc((size_t)(T * K) * 4), fi[E];
    int64_t *idx = malloc((size_t)(T * K) * 8), *un = malloc((size_t)(T * K) * 8), *gidx = malloc((size_t)(T * K) * 8);
    bool mask[T], fix[T];
    int32_t pmap[(E + 2) * 3], pcnt[E + 2], cntv[E];
    for (int64_t i = 0; i < T * E; i++) sc[i] = mx_bf16_pat(i * 5 + i / 7) * 2.0f;
    for (int i = 0; i < E; i++) bias[i] = i % 9 == 4 ? 0x1p-40f : (float)(i % 5) * 0.01f;
    for (int i = 0; i < T; i++) mask[i] = i % 5 != 2, fix[i] = i % 7 == 3;
    for (int64_t i = 0; i < T * K; i++) un[i] = (i * 11) % E;
    for (int i = 0; i < E + 2; i++) {
        pcnt[i] = 1 + i % 3;
        for (int j = 0; j < 3; j++) pmap[i * 3 + j] = (int32_t)((i + j * E) % (2 * E));
    }
    /* topk_gate, top2_sum_gate in each scoring mode (sigmoid, sqrtsoftplus, softmax, identity) */
    moe_ctx m;
    memset(&m, 0, sizeof m);
    m.kind = 0;
    m.t[0] = ts_tensor_2d(sc, TS_F32, T, E), m.t[1] = ts_tensor_2d(idx, TS_I64, T, K);
    mx_run(&f, "topk_gate", moe_op, &m);
    for (int scoring = 0; scoring < 4; scoring++)
        for (int v = 0; v < 2; v++) {
            memset(&m, 0, sizeof m);
            m.kind = 1;
            m.t[0] = ts_tensor_2d(sc, TS_F32, T, E), m.t[1] = ts_tensor_1d(bias, TS_F32, E);
            m.t[2] = ts_tensor_1d(mask, TS_BOOL, T), m.t[3] = ts_tensor_2d(idx, TS_I64, T, K);
            m.t[4] = ts_tensor_2d(w, TS_F32, T, K), m.t[5] = ts_tensor_2d(un, TS_I64, T, K);
            m.t[6] = ts_tensor_1d(fix, TS_BOOL, T), m.t[7] = ts_tensor_2d(pmap, TS_I32, E, 3);
            m.t[8] = ts_tensor_1d(pcnt, TS_I32, E);
            m.i[0] = K, m.i[1] = G, m.i[2] = 4, m.i[3] = scoring;
            m.fv = 2.5f;
            m.b[0] = v, m.b[1] = v, m.b[2] = v, m.b[3] = v; /* mask, unmapped, fixed routing, physical map */
            snprintf(name, sizeof name, "top2_sum_gate scoring %d%s", scoring, v ? " mask+unmapped+fix+map" : "");
            mx_run(&f, name, moe_op, &m);
        }
    /* routing maps from the last top-k */
    int64_t *ti = malloc((size_t)(T * K) * 8);
    for (int64_t i = 0; i < T * K; i++) ti[i] = (i * 13 + i / K) % E;
    for (int64_t i = 0; i < T * K; i++) gidx[i] = ti[i] % G;
    for (int64_t i = 0; i < T * K; i++) w[i] = i % 4 == 1 ? 0x1p-40f : 0.1f * (float)(1 + i % 5);
    memset(&m, 0, sizeof m);
    m.kind = 2, m.t[0] = ts_tensor_2d(w, TS_F32, T, K), m.t[1] = ts_tensor_1d(den, TS_F32, T);
    m.t[2] = ts_tensor_2d(nw, TS_F32, T, K);
    mx_run(&f, "normalize_weight", moe_op, &m);
    memset(&m, 0, sizeof m);
    m.kind = 3, m.t[0] = ts_tensor_2d(gidx, TS_I64, T, K), m.t[1] = ts_tensor_1d(cntv, TS_I32, G);
    mx_run(&f, "group_count", moe_op, &m);
    /* fused mapping, then expand / reduce through it */
    const int64_t P = T * K + E * 4;
    int32_t *pe = malloc((size_t)(3 * P + T * K + 3 * E) * 4);
    int32_t *pt = pe + P, *ptk = pt + P, *t2p = ptk + P, *st = t2p + T * K, *en = st + E, *nt = en + E;
    memset(&m, 0, sizeof m);
    m.kind = 11, m.i[0] = 4;
    m.t[0] = ts_tensor_2d(ti, TS_I64, T, K), m.t[1] = ts_tensor_1d(pe, TS_I32, P), m.t[2] = ts_tensor_1d(pt, TS_I32, P);
    m.t[3] = ts_tensor_1d(ptk, TS_I32, P), m.t[4] = ts_tensor_2d(t2p, TS_I32, T, K), m.t[5] = ts_tensor_1d(st, TS_I32, E);
    m.t[6] = ts_tensor_1d(en, TS_I32, E), m.t[7] = ts_tensor_1d(nt, TS_I32, E);
    mx_run(&f, "get_fused_mapping", moe_op, &m);
    uint16_t *x = malloc((size_t)(T * H) * 2), *xe = malloc((size_t)(P * H) * 2), *red = malloc((size_t)(T * H) * 2);
    uint8_t *xq = malloc((size_t)(T * H)), *oq = malloc((size_t)(P * H));
    float *xs = malloc((size_t)(T * 2) * 4), *os = malloc((size_t)(P * 2) * 4);
    fill_bf16(x, T * H, 3), fill_bf16(xe, P * H, 4), fill_e4m3(xq, T * H, 5), fill_sf(xs, T * 2, 1);
    memset(&m, 0, sizeof m);
    m.kind = 4, m.t[0] = ts_tensor_2d(x, TS_BF16, T, H), m.t[1] = ts_tensor_1d(pt, TS_I32, P);
    m.t[2] = ts_tensor_2d(xe, TS_BF16, P, H);
    mx_run(&f, "expand_to_fused", moe_op, &m);
    fill_bf16(xe, P * H, 4);
    memset(&m, 0, sizeof m);
    m.kind = 5, m.t[0] = ts_tensor_2d(xq, TS_E4M3, T, H), m.t[1] = ts_tensor_2d(xs, TS_F32, T, 2);
    m.t[2] = ts_tensor_1d(pt, TS_I32, P), m.t[3] = ts_tensor_2d(oq, TS_E4M3, P, H), m.t[4] = ts_tensor_2d(os, TS_F32, P, 2);
    mx_run(&f, "expand_to_fused_with_sf", moe_op, &m);
    memset(&m, 0, sizeof m);
    m.kind = 6, m.t[0] = ts_tensor_2d(xe, TS_BF16, P, H), m.t[1] = ts_tensor_2d(w, TS_F32, T, K);
    m.t[2] = ts_tensor_2d(t2p, TS_I32, T, K), m.t[3] = ts_tensor_2d(red, TS_BF16, T, H);
    mx_run(&f, "reduce_fused", moe_op, &m);
    /* group scores, TP masks, unique groups, aux fi */
    for (int64_t ts = 1; ts <= 2; ts++) {
        memset(&m, 0, sizeof m);
        m.kind = 7, m.i[0] = ts;
        m.t[0] = ts_tensor_3d(sc, TS_F32, T, G, E / G), m.t[1] = ts_tensor_2d(gidx, TS_I64, T, 4);
        snprintf(name, sizeof name, "topk_sum_and_topk_group_idx topk_sum %d", (int)ts);
        mx_run(&f, name, moe_op, &m);
    }
    memset(&m, 0, sizeof m);
    m.kind = 8, m.i[0] = E, m.i[1] = 4, m.i[2] = 1, m.i[3] = 2;
    m.t[0] = ts_tensor_2d(ti, TS_I64, T, K), m.t[1] = ts_tensor_2d(idx, TS_I64, T, K);
    mx_run(&f, "mask_indices_by_tp", moe_op, &m);
    for (int64_t i = 0; i < T * K; i++) gidx[i] = ti[i] % G;
    memset(&m, 0, sizeof m);
    m.kind = 9, m.i[0] = G, m.t[0] = ts_tensor_2d(gidx, TS_I64, T, K);
    mx_run(&f, "inplace_unique_group_indices", moe_op, &m);
    memset(&m, 0, sizeof m);
    m.kind = 10, m.i[0] = K, m.t[0] = ts_tensor_2d(ti, TS_I64, T, K), m.t[1] = ts_tensor_1d(fi, TS_F32, E);
    mx_run(&f, "aux_fi", moe_op, &m);
    mx_end(&f);
    free(sc), free(w), free(nw), free(idx), free(un), free(gidx), free(ti), free(pe), free(x), free(xe), free(red);
    free(xq), free(oq), free(xs), free(os);
}
