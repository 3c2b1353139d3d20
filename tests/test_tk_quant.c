/* swiglu_forward_and_per_token_cast and rmsnorm_forward_and_per_token_cast (src/kernels/
 * swiglu.tile, rmsnorm_cast.tile) byte-exact against tests/golden/tk_quant.bin
 * (tests/gen/gen_tilekernels.py: numpy re-implementation of TileKernels' torch references in the
 * documented order), f32 scales row- and column-major, packed UE8M0 scales, clamp counters,
 * masked rows and -1 routed entries; both ISA variants, 1 and 2 threads; argument errors. */
#include "test_tk_common.h"

#include "tilestack/kernels.h"

#include <stdlib.h>
#include <string.h>

typedef struct swiglu_ctx {
    ts_test_ctx *t;
    const tk_record *rec;
    int64_t P, H, gs, ng, npk, pal;
    bool use_clamp, count, mask, weights, round_sf, packed, colmajor;
    float clamp;
    uint16_t *x;
    int32_t *pe, *ptt;
    float *tw;
    uint8_t *q;
    void *sf;      /* as the kernel writes it (column-major when colmajor) */
    void *sf_row;  /* logical row-major copy */
    int64_t cnt[3];
} swiglu_ctx;

static void swiglu_run(void *vc, int variant) {
    swiglu_ctx *c = (swiglu_ctx *)vc;
    ts_test_ctx *ts_t_ = c->t;
    const int64_t nw = 2 * c->P + 1;
    const int64_t ncol = c->packed ? c->npk : c->ng;
    ts_tensor x = ts_tensor_2d(c->x, TS_BF16, c->P, 2 * c->H);
    ts_tensor pe = ts_tensor_1d(c->pe, TS_I32, c->P), ptt = ts_tensor_1d(c->ptt, TS_I32, c->P);
    ts_tensor tw = ts_tensor_1d(c->tw, TS_F32, nw);
    ts_tensor q = ts_tensor_2d(c->q, TS_E4M3, c->P, c->H);
    ts_tensor sf = ts_tensor_2d(c->sf, c->packed ? TS_UE8M0X4 : TS_F32, c->P, ncol);
    if (c->colmajor) sf.strides[0] = 1, sf.strides[1] = c->pal;
    ts_tensor cnt = ts_tensor_1d(c->cnt, TS_I64, 3);
    memset(c->q, 0xEE, (size_t)(c->P * c->H));
    memset(c->sf, 0xEE, (size_t)(c->pal * ncol) * 4);
    memset(c->cnt, 0, sizeof c->cnt);
    ts_status st = c->packed ? ts_swiglu_forward_and_per_token_cast_ue8m0(&x, &pe, &ptt, &tw, &q, &sf, &cnt, c->gs, c->clamp,
                                                                          c->use_clamp, c->count, c->mask, c->weights, 1e-4f)
                             : ts_swiglu_forward_and_per_token_cast(&x, &pe, &ptt, &tw, &q, &sf, &cnt, c->gs, c->clamp,
                                                                    c->use_clamp, c->count, c->mask, c->weights, c->round_sf, 1e-4f);
    TS_CHECK_STATUS(st, TS_OK);
    uint32_t *src = (uint32_t *)c->sf, *dst = (uint32_t *)c->sf_row;
    for (int64_t i = 0; i < c->P; i++)
        for (int64_t j = 0; j < ncol; j++) dst[i * ncol + j] = c->colmajor ? src[j * c->pal + i] : src[i * ncol + j];
    char what[64];
    snprintf(what, sizeof what, "swiglu codes (variant %d)", variant);
    tk_expect(ts_t_, c->rec, 2, c->q, (size_t)(c->P * c->H), what);
    snprintf(what, sizeof what, "swiglu scales (variant %d)", variant);
    tk_expect(ts_t_, c->rec, 3, c->sf_row, (size_t)(c->P * ncol) * 4, what);
    snprintf(what, sizeof what, "swiglu clamp counts (variant %d)", variant);
    tk_expect(ts_t_, c->rec, 4, c->cnt, sizeof c->cnt, what);
}

static void swiglu_case(ts_test_ctx *ts_t_, const tk_record *rec, int nth) {
    swiglu_ctx c = {.t = ts_t_, .rec = rec, .P = rec->p[0], .H = rec->p[1], .gs = rec->p[2], .use_clamp = rec->p[3],
                    .clamp = (float)((double)rec->p[4] / 1000.0), .count = rec->p[5], .mask = rec->p[6],
                    .weights = rec->p[7], .round_sf = rec->p[8], .packed = rec->p[9], .colmajor = nth % 2 == 1};
    const uint64_t seed = (uint64_t)rec->p[10];
    c.ng = c.H / c.gs;
    c.npk = (c.ng + 3) / 4;
    c.pal = (c.P + 3) / 4 * 4;
    const int64_t nw = 2 * c.P + 1, ncol = c.packed ? c.npk : c.ng;
    c.x = malloc((size_t)(c.P * 2 * c.H) * 2);
    c.tw = malloc((size_t)nw * 4);
    c.q = malloc((size_t)(c.P * c.H));
    c.sf = malloc((size_t)(c.pal * ncol) * 4);
    c.sf_row = malloc((size_t)(c.P * ncol) * 4);
    c.pe = (int32_t *)rec->a[0].data;
    c.ptt = (int32_t *)rec->a[1].data;
    TS_CHECK(c.x && c.tw && c.q && c.sf && c.sf_row);
    if (c.x && c.tw && c.q && c.sf && c.sf_row) {
        tk_bf16_input(seed, (size_t)(c.P * 2 * c.H), 12.0f, c.x);
        tk_f32_input(seed + 4, (size_t)nw, 2.0f, c.tw);
        tk_for_variants(&c, swiglu_run, c.P > 1000 ? 2 : 4);
    }
    free(c.x), free(c.tw), free(c.q), free(c.sf), free(c.sf_row);
}

typedef struct rms_ctx {
    ts_test_ctx *t;
    const tk_record *rec;
    int64_t T, H, gs, ng, npk, pal;
    bool round_sf, packed, colmajor;
    uint16_t *x, *w;
    uint8_t *q;
    void *sf, *sf_row;
} rms_ctx;

static void rms_run(void *vc, int variant) {
    rms_ctx *c = (rms_ctx *)vc;
    ts_test_ctx *ts_t_ = c->t;
    const int64_t ncol = c->packed ? c->npk : c->ng;
    ts_tensor x = ts_tensor_2d(c->x, TS_BF16, c->T, c->H), w = ts_tensor_1d(c->w, TS_BF16, c->H);
    ts_tensor q = ts_tensor_2d(c->q, TS_E4M3, c->T, c->H);
    ts_tensor sf = ts_tensor_2d(c->sf, c->packed ? TS_UE8M0X4 : TS_F32, c->T, ncol);
    if (c->colmajor) sf.strides[0] = 1, sf.strides[1] = c->pal;
    memset(c->q, 0xEE, (size_t)(c->T * c->H));
    memset(c->sf, 0xEE, (size_t)(c->pal * ncol) * 4);
    ts_status st = c->packed ? ts_rmsnorm_forward_and_per_token_cast_ue8m0(&x, &w, &q, &sf, 1e-6f, c->gs)
                             : ts_rmsnorm_forward_and_per_token_cast(&x, &w, &q, &sf, 1e-6f, c->gs, c->round_sf);
    TS_CHECK_STATUS(st, TS_OK);
    uint32_t *src = (uint32_t *)c->sf, *dst = (uint32_t *)c->sf_row;
    for (int64_t i = 0; i < c->T; i++)
        for (int64_t j = 0; j < ncol; j++) dst[i * ncol + j] = c->colmajor ? src[j * c->pal + i] : src[i * ncol + j];
    char what[64];
    snprintf(what, sizeof what, "rmsnorm codes (variant %d)", variant);
    tk_expect(ts_t_, c->rec, 0, c->q, (size_t)(c->T * c->H), what);
    snprintf(what, sizeof what, "rmsnorm scales (variant %d)", variant);
    tk_expect(ts_t_, c->rec, 1, c->sf_row, (size_t)(c->T * ncol) * 4, what);
}

static void rms_case(ts_test_ctx *ts_t_, const tk_record *rec, int nth) {
    rms_ctx c = {.t = ts_t_, .rec = rec, .T = rec->p[0], .H = rec->p[1], .gs = rec->p[2], .round_sf = rec->p[3],
                 .packed = rec->p[4], .colmajor = nth % 2 == 0};
    const uint64_t seed = (uint64_t)rec->p[5];
    c.ng = c.H / c.gs;
    c.npk = (c.ng + 3) / 4;
    c.pal = (c.T + 3) / 4 * 4;
    const int64_t ncol = c.packed ? c.npk : c.ng;
    c.x = malloc((size_t)(c.T * c.H) * 2);
    c.w = malloc((size_t)c.H * 2);
    c.q = malloc((size_t)(c.T * c.H));
    c.sf = malloc((size_t)(c.pal * ncol) * 4);
    c.sf_row = malloc((size_t)(c.T * ncol) * 4);
    TS_CHECK(c.x && c.w && c.q && c.sf && c.sf_row);
    if (c.x && c.w && c.q && c.sf && c.sf_row) {
        tk_bf16_input(seed, (size_t)(c.T * c.H), 3.0f, c.x);
        tk_bf16_input(seed + 1, (size_t)c.H, 2.0f, c.w);
        tk_for_variants(&c, rms_run, c.T > 1000 ? 2 : 4);
    }
    free(c.x), free(c.w), free(c.q), free(c.sf), free(c.sf_row);
}

TS_TEST(tk_quant_golden) {
    size_t size = 0;
    tk_reader r = {TS_READ_GOLDEN("tk_quant.bin", &size), 0, 0};
    r.size = size;
    tk_record rec;
    int nsw = 0, nrms = 0;
    while (tk_next(ts_t_, &r, &rec)) {
        if (!strcmp(rec.name, "swiglu")) swiglu_case(ts_t_, &rec, nsw++);
        else if (!strcmp(rec.name, "rmsnorm")) rms_case(ts_t_, &rec, nrms++);
        else TS_CHECK_MSG(false, "unknown record %s", rec.name);
        tk_record_free(&rec);
    }
    TS_CHECK(nsw >= 6 && nrms >= 5);
    free(r.buf);
}

TS_TEST(tk_quant_errors) {
    uint16_t x[2 * 512] = {0};
    int32_t pe[2] = {0, 0}, ptt[2] = {0, 5};
    float tw[3] = {1, 2, 3}, sf[4];
    uint8_t q[2 * 256];
    int64_t cnt[3] = {0, 0, 0};
    memset(q, 0x11, sizeof q);
    ts_tensor tx = ts_tensor_2d(x, TS_BF16, 2, 512), tpe = ts_tensor_1d(pe, TS_I32, 2), tpt = ts_tensor_1d(ptt, TS_I32, 2);
    ts_tensor ttw = ts_tensor_1d(tw, TS_F32, 3), tq = ts_tensor_2d(q, TS_E4M3, 2, 256), tsf = ts_tensor_2d(sf, TS_F32, 2, 2);
    ts_tensor tc = ts_tensor_1d(cnt, TS_I64, 3);
    /* gs not a multiple of 128, gs not dividing H, sf columns */
    TS_CHECK_STATUS(ts_swiglu_forward_and_per_token_cast(&tx, &tpe, &tpt, &ttw, &tq, &tsf, &tc, 100, 1.0f, true, false, false, false, false, 1e-4f),
                    TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "multiple of 128") != NULL);
    TS_CHECK_STATUS(ts_swiglu_forward_and_per_token_cast(&tx, &tpe, &tpt, &ttw, &tq, &tsf, &tc, 256, 1.0f, true, false, false, false, false, 1e-4f),
                    TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "H / gs columns") != NULL);
    TS_CHECK_STATUS(ts_swiglu_forward_and_per_token_cast(&tx, &tpe, &tpt, &ttw, &tq, &tsf, &tc, 128, 1.0f, false, true, false, false, false, 1e-4f),
                    TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "count_clamped needs use_clamp") != NULL);
    size_t written = 0;
    for (size_t i = 0; i < sizeof q; i++) written += q[i] != 0x11;
    TS_CHECK_EQ_INT(written, 0);
    /* a routed position past topk_weights: reported after the launch */
    TS_CHECK_STATUS(ts_swiglu_forward_and_per_token_cast(&tx, &tpe, &tpt, &ttw, &tq, &tsf, &tc, 128, 1.0f, true, false, false, true, false, 1e-4f),
                    TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "topk_weights.numel") != NULL);
    /* rmsnorm: H not a multiple of 128 */
    ts_tensor tx2 = ts_tensor_2d(x, TS_BF16, 2, 200), tw2 = ts_tensor_1d(x, TS_BF16, 200), tq2 = ts_tensor_2d(q, TS_E4M3, 2, 200);
    ts_tensor tsf1 = ts_tensor_2d(sf, TS_F32, 2, 1);
    TS_CHECK_STATUS(ts_rmsnorm_forward_and_per_token_cast(&tx2, &tw2, &tq2, &tsf1, 1e-6f, 128, false), TS_ERR_INVALID_ARGUMENT);
    ts_tensor tqb = ts_tensor_2d(q, TS_U8, 2, 256), tx3 = ts_tensor_2d(x, TS_BF16, 2, 256), tw3 = ts_tensor_1d(x, TS_BF16, 256);
    TS_CHECK_STATUS(ts_rmsnorm_forward_and_per_token_cast(&tx3, &tw3, &tqb, &tsf, 1e-6f, 128, false), TS_ERR_DTYPE);
}
