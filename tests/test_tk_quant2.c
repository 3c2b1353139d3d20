/* The second batch of TileKernels quantisation kernels in the tile language (src/kernels/
 * quant_fp4.tile, quant_lossless.tile, quant_e5m6.tile, transpose.tile) byte-exact against
 * tests/golden/tk_quant2.bin (tests/gen/gen_tk_quant2.py: numpy re-implementation of the
 * upstream kernels' arithmetic, ml_dtypes rounding): per-token FP4 / FP8 casts from bf16 / f32
 * and re-quantising FP8 / FP4 input, f32 scales row- and column-major and packed UE8M0, special
 * values, odd widths, tokens 1 and 4001; the FP4 cast back; every case on both ISA variants
 * with 1 and 2 threads; argument errors. */
#include "test_tk_common.h"

#include "tilestack/kernels.h"

#include <stdlib.h>
#include <string.h>

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* a scale tensor [rows, cols] of 4-byte elements, column-major (TMA-aligned, rows padded to 4)
 * when colmajor; from/to the logical row-major copy */
typedef struct sf_buf {
    int64_t rows, cols, pal;
    bool colmajor;
    uint32_t *mem, *row;
} sf_buf;

static bool sf_alloc(sf_buf *s, int64_t rows, int64_t cols, bool colmajor) {
    s->rows = rows, s->cols = cols, s->colmajor = colmajor, s->pal = (rows + 3) / 4 * 4;
    s->mem = malloc((size_t)(s->pal * cols + 1) * 4);
    s->row = malloc((size_t)(rows * cols + 1) * 4);
    return s->mem && s->row;
}
static void sf_free(sf_buf *s) { free(s->mem), free(s->row); }
static ts_tensor sf_tensor(sf_buf *s, ts_dtype dt) {
    ts_tensor t = ts_tensor_2d(s->mem, dt, s->rows, s->cols);
    if (s->colmajor) t.strides[0] = 1, t.strides[1] = s->pal;
    return t;
}
static void sf_put(sf_buf *s, const void *rowmajor) {
    const uint32_t *src = rowmajor;
    for (int64_t i = 0; i < s->rows; i++)
        for (int64_t j = 0; j < s->cols; j++)
            s->mem[s->colmajor ? j * s->pal + i : i * s->cols + j] = src[i * s->cols + j];
}
static void sf_get(sf_buf *s) {
    for (int64_t i = 0; i < s->rows; i++)
        for (int64_t j = 0; j < s->cols; j++)
            s->row[i * s->cols + j] = s->mem[s->colmajor ? j * s->pal + i : i * s->cols + j];
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

/* ---------------------------------------------------------------- FP4 cast back */

static void cbfp4_case(ts_test_ctx *ts_t_, const tk_record *rec, int nth) {
    const int64_t T = rec->p[0], H = rec->p[1], bh = rec->p[2], bw = rec->p[3];
    const bool packed = rec->p[4], f32 = rec->p[5];
    const int64_t sm = cdiv(T, bh), sn = cdiv(H, bw);
    sf_buf xsf;
    bool ok = sf_alloc(&xsf, sm, packed ? cdiv(sn, 4) : sn, nth % 2 == 0);
    void *y = malloc((size_t)(T * H) * 4);
    TS_CHECK(ok && y);
    if (ok && y) {
        sf_put(&xsf, rec->a[1].data);
        ts_tensor x = ts_tensor_2d((void *)rec->a[0].data, TS_E2M1X2, T, H / 2);
        ts_tensor s = sf_tensor(&xsf, packed ? TS_UE8M0X4 : TS_F32);
        ts_tensor o = ts_tensor_2d(y, f32 ? TS_F32 : TS_BF16, T, H);
        const ts_isa isa = ts_get_isa();
        const int nth0 = ts_get_num_threads();
        for (int v = 0; v < 4; v++) {
            ts_set_isa(v % 2 ? TS_ISA_GENERIC : isa);
            ts_set_num_threads(v < 2 ? 1 : 2);
            memset(y, 0xEE, (size_t)(T * H) * 4);
            ts_status st = packed ? (f32 ? ts_cast_back_fp4_f32_ue8m0(&x, &s, &o, bh, bw) : ts_cast_back_fp4_ue8m0(&x, &s, &o, bh, bw))
                                  : (f32 ? ts_cast_back_fp4_f32(&x, &s, &o, bh, bw) : ts_cast_back_fp4(&x, &s, &o, bh, bw));
            TS_CHECK_STATUS(st, TS_OK);
            char what[64];
            snprintf(what, sizeof what, "fp4 cast back (variant %d)", v);
            tk_expect(ts_t_, rec, 2, y, (size_t)(T * H) * (f32 ? 4 : 2), what);
        }
        ts_set_isa(isa);
        ts_set_num_threads(nth0);
    }
    sf_free(&xsf);
    free(y);
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
        else TS_CHECK_MSG(false, "unknown record %s", rec.name);
        tk_record_free(&rec);
    }
    TS_CHECK(n[0] >= 20 && n[1] >= 4);
    free(r.buf);
}
