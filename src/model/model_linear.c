/* The three linear layers of docs/model.md §3 on M = batch rows. The GEMMs are batch-invariant
 * (a row's bits never depend on M, gemm.h); the f32 GEMV sums each row in one fixed order. */
#include "model_internal.h"

#include "tilestack/quant.h"
#include "model_kernels.h"
#include "gemm/gemm_internal.h"

/* A chunk of more than TS__GEMM_SMALL_M rows goes through the GEMM in slices of at most that
 * many: each slice takes the decode path (B decoded in registers, f32 FMAs), which on packed
 * weights beats the big-M path (panels unpacked through memory; its vdpbf16ps kernels issue
 * at a quarter of the FMA rate on the Sapphire Rapids-class guest, docs/model.md "Prefill").
 * The GEMM is batch-invariant, so the slicing never changes a bit; it lets a prefill chunk
 * be larger than the GEMM's small-M bound (more rows per routed expert, fewer passes). */
static ts_status lin8_run(ts__ws *ws, const ts__lin8 *w, const uint16_t *x, int64_t m,
                          int64_t ldx, uint16_t *y, int64_t ldy) {
    const int64_t K = w->k;
    ts_tensor xt = ts_tensor_2d((void *)x, TS_BF16, m, K);
    xt.strides[0] = ldx;
    ts_tensor a = ts_tensor_2d(ws->a8, TS_E4M3, m, K);
    ts_tensor sfa = ts_tensor_2d(ws->a8sf, TS_F32, m, K / 128);
    TS__RETURN_IF_ERROR(ts_per_token_cast_to_fp8(&xt, true, 128, false, &a, &sfa));
    for (int64_t r0 = 0; r0 < m; r0 += TS__GEMM_SMALL_M) {
        const int64_t r = ts__min64(TS__GEMM_SMALL_M, m - r0);
        ts_tensor as = ts_tensor_2d(ws->a8 + r0 * K, TS_E4M3, r, K);
        ts_tensor ss = ts_tensor_2d(ws->a8sf + r0 * (K / 128), TS_F32, r, K / 128);
        ts_tensor d = ts_tensor_2d(y + r0 * ldy, TS_BF16, r, w->n);
        d.strides[0] = ldy;
        TS__RETURN_IF_ERROR(ts_fp8_fp4_gemm_nt_packed(&as, &ss, w->pw, &d, NULL, NULL, NULL, NULL,
                                                      NULL, false));
    }
    return TS_OK;
}

ts_status ts__model_lin8(ts__ws *ws, ts__prof *prof, const ts__lin8 *w, const uint16_t *x,
                         int64_t m, int64_t ldx, uint16_t *y, int64_t ldy) {
    /* idempotent: x -> the ws->a8 scratch -> y (y never overlaps x) */
    const double K = (double)w->k;
    TS__PROF_SECTION(prof, TS__P_LIN8, (double)w->n * K + (double)m * (K + 2 * w->n),
                     2.0 * (double)m * (double)w->n * K,
                     TS__RETURN_IF_ERROR(lin8_run(ws, w, x, m, ldx, y, ldy)));
    return TS_OK;
}

typedef struct gemv_ctx {
    const float *x, *w;
    float *y;
    int64_t m, ldx, k, ldy, n, wpi; /* wpi: weight rows per item (4: the blocked kernel) */
    ts__model_dot_rows_fn dot;
} gemv_ctx;

static void gemv_rows(void *vctx, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    const gemv_ctx *g = (const gemv_ctx *)vctx;
    for (int64_t i = i0; i < i1; i++) {
        const int64_t n0 = i * g->wpi, n1 = ts__min64(n0 + g->wpi, g->n);
#ifdef TS_HAVE_AVX512_KERNELS
        if (n1 - n0 == 4) {
            ts__model_dot_4w__avx512(g->w + n0 * g->k, g->k, g->x, g->m, g->ldx, g->y + n0, g->ldy);
            continue;
        }
#endif
        for (int64_t n = n0; n < n1; n++)
            g->dot(g->w + n * g->k, g->k, g->x, g->m, g->ldx, g->y + n, g->ldy);
    }
}

void ts__model_gemv_f32(const float *x, int64_t m, int64_t ldx, const float *w, int64_t n,
                        int64_t k, float *y, int64_t ldy) {
    gemv_ctx g = {x, w, y, m, ldx, k, ldy, n, 1, ts__model_dot_rows__generic};
#ifdef TS_HAVE_AVX2_KERNELS
    if (ts__isa_avx2_up(ts__active_isa()))
        g.dot = ts__model_dot_rows__avx2;
#endif
#ifdef TS_HAVE_AVX512_KERNELS
    if (ts__active_isa() == TS_ISA_AVX512) {
        g.dot = ts__model_dot_rows__avx512;
        /* a prefill chunk's rows: four weight rows per pass over x (model_kernels.h) */
        if (m >= 4) g.wpi = 4;
    }
#endif
    /* each output is one weight row against all m rows: the split never changes a sum */
    ts__parallel_for(ts__ceil_div(n, g.wpi), g.wpi == 1 ? 8 : 2, gemv_rows, &g);
}

ts_status ts__model_linbf(ts_packed_weight *w, int64_t n, int64_t k, const uint16_t *x,
                          int64_t m, float *y, int64_t ldy) {
    ts_tensor a = ts_tensor_2d((void *)x, TS_BF16, m, k);
    ts_tensor d = ts_tensor_2d(y, TS_F32, m, n);
    d.strides[0] = ldy;
    return ts_bf16_gemm_nt_packed(&a, w, &d, NULL, NULL);
}
