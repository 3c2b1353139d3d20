/* FP4 (e2m1) per-token quantiser in two flavours, and the packed-FP4 transpose.
 *  DeepGEMM (deep_gemm/utils/math.py): amax clamped >= 1e-4 (NaN propagates), sf = amax * fl32(1/6),
 *    optional ceil_to_ue8m0, x * (1/sf), strict-threshold codes (ties round down).
 *  TileKernels (quant/common.py get_sf_and_inv): amax by a max that skips NaN (CUDA fmaxf),
 *    clamped >= 6 * 2^-126; without ue8m0 sf = amax / 6 and sf_inv = 6 / amax; with ue8m0 the
 *    exponent e = ((bits(sf) - 1) >> 23) + 1 - 127 gives sf = 2^e, sf_inv = 2^-e (uint32
 *    arithmetic, replicated literally); x * sf_inv converted by RNE with saturation to +-6.
 * Codes are packed two per byte, element 2i in the low nibble. */
#include "numerics/quant_hand.h"
#include "numerics/quant_kernels.h"

#include "tilestack/quant.h"

static inline float ld_src(const char *x, ts__qsrc src, int64_t j) {
    switch (src) {
    case TS__QSRC_BF16: return ts_bf16_to_f32(((const uint16_t *)x)[j]);
    case TS__QSRC_F16: return ts_f16_to_f32(((const uint16_t *)x)[j]);
    default: return ((const float *)x)[j];
    }
}

typedef struct fp4_ctx {
    const char *x;
    int64_t x_rs;
    ts__qsrc src;
    const ts__quant_kernels *k;
    int64_t n, gran_k, nb;
    bool ue8m0, packed, rne;
    uint8_t *q;
    int64_t q_rs;
    char *sf;
    int64_t sf_s0, sf_s1;
} fp4_ctx;

/* Blocks per kernel call: bounds the on-stack scale buffers; a multiple of 4, so packed
 * words never straddle two calls. */
#define FP4_SEG_BLOCKS 256

static void store_scales(const fp4_ctx *c, int64_t r, int64_t b0, int64_t nseg, const float *sf,
                         const uint8_t *e) {
    if (!c->packed) {
        for (int64_t i = 0; i < nseg; i++) ((float *)c->sf)[r * c->sf_s0 + (b0 + i) * c->sf_s1] = sf[i];
        return;
    }
    for (int64_t i = 0; i < nseg; i += 4) {
        uint32_t word = 0;
        for (int64_t t = 0; t < 4 && i + t < nseg; t++) word |= (uint32_t)e[i + t] << (8 * t);
        ((uint32_t *)c->sf)[r * c->sf_s0 + ((b0 + i) >> 2) * c->sf_s1] = word;
    }
}

static void fp4_rows(void *vctx, int64_t r0, int64_t r1, int tid) {
    (void)tid;
    const fp4_ctx *c = (const fp4_ctx *)vctx;
    const size_t esz = ts__qsrc_size(c->src);
    float sseg[FP4_SEG_BLOCKS];
    uint8_t eseg[FP4_SEG_BLOCKS];
    for (int64_t r = r0; r < r1; r++) {
        const char *xr = c->x + r * c->x_rs;
        uint8_t *qr = c->q + r * c->q_rs;
        for (int64_t b0 = 0; b0 < c->nb; b0 += FP4_SEG_BLOCKS) {
            const int64_t nseg = ts__min64(FP4_SEG_BLOCKS, c->nb - b0), j0 = b0 * c->gran_k;
            if ((c->gran_k & 1) == 0) { /* whole bytes: the ISA row kernel */
                const int64_t len = ts__min64(c->n - j0, nseg * c->gran_k);
                c->k->fp4_row(xr + (size_t)j0 * esz, len, c->gran_k, c->ue8m0, c->rne, qr + (j0 >> 1),
                              sseg, eseg);
                store_scales(c, r, b0, nseg, sseg, eseg);
                continue;
            }
            /* odd gran_k: blocks split bytes, value by value */
            for (int64_t i = 0; i < nseg; i++) {
                const int64_t jb = j0 + i * c->gran_k, len = ts__min64(c->gran_k, c->n - jb);
                const char *xb = xr + (size_t)jb * esz;
                const uint32_t a = c->rne ? c->k->absmax_nonan(xb, len) : c->k->absmax(xb, len);
                const ts__fp4_scale_t s = ts__fp4_scale(a, c->ue8m0, c->rne);
                for (int64_t j = jb; j < jb + len; j++) {
                    float y = ld_src(xr, c->src, j) * s.inv;
                    uint8_t code = (uint8_t)((c->rne ? ts_f32_to_e2m1(y) : ts_f32_to_e2m1_dg(y)) & 0xFu);
                    if (j & 1) qr[j >> 1] = (uint8_t)(qr[j >> 1] | (code << 4));
                    else qr[j >> 1] = code;
                }
                sseg[i] = s.sf;
                eseg[i] = s.e;
            }
            store_scales(c, r, b0, nseg, sseg, eseg);
        }
    }
}

ts_status ts__qh_per_token_cast_to_fp4(const ts_tensor *x, bool use_ue8m0, int64_t gran_k,
                                       bool use_packed_ue8m0, ts_fp4_rounding rounding,
                                       ts_tensor *x_fp4, ts_tensor *sf) {
    ts__qsrc src;
    TS__RETURN_IF_ERROR(ts__quant_args_token_fp4(x, use_ue8m0, gran_k, use_packed_ue8m0, rounding, x_fp4, sf, &src));
    const int64_t m = x->shape[0], n = x->shape[1], nb = ts__cdiv_safe(n, gran_k);
    if (m == 0 || n == 0) return TS_OK;
    fp4_ctx c = {
        .x = (const char *)x->data,
        .x_rs = x->strides[0] * (int64_t)ts__qsrc_size(src),
        .src = src,
        .k = ts__quant_kernels_for(src),
        .n = n, .gran_k = gran_k, .nb = nb,
        .ue8m0 = use_ue8m0, .packed = use_packed_ue8m0, .rne = rounding == TS_FP4_ROUND_RNE,
        .q = (uint8_t *)x_fp4->data,
        .q_rs = x_fp4->strides[0],
        .sf = (char *)sf->data, .sf_s0 = sf->strides[0], .sf_s1 = sf->strides[1],
    };
    ts__parallel_for(m, 1, fp4_rows, &c);
    return TS_OK;
}

/* ---- transpose ---- */

static bool is_fp4_storage(ts_dtype t) { return t == TS_E2M1X2 || t == TS_I8 || t == TS_U8; }

ts_status ts_transpose_packed_fp4(const ts_tensor *a, ts_tensor *out) {
    TS__RETURN_IF_ERROR(ts_tensor_check(a, "a"));
    if (!is_fp4_storage(a->dtype))
        return ts__fail(TS_ERR_DTYPE, "tensor 'a': dtype %s, expected e2m1x2 (or i8/u8)", ts_dtype_name(a->dtype));
    if (a->ndim != 2) return ts__fail(TS_ERR_SHAPE, "tensor 'a': ndim %d, expected 2", (int)a->ndim);
    const int64_t m = a->shape[0], n = a->shape[1] * 2;
    if (m % 2 != 0)
        return ts__fail(TS_ERR_SHAPE, "tensor 'a': rows %lld must be even", (long long)m);
    const int64_t oshape[2] = {n, m / 2};
    TS__RETURN_IF_ERROR(ts_tensor_check(out, "out"));
    if (!is_fp4_storage(out->dtype))
        return ts__fail(TS_ERR_DTYPE, "tensor 'out': dtype %s, expected e2m1x2 (or i8/u8)", ts_dtype_name(out->dtype));
    TS__RETURN_IF_ERROR(ts__quant_check_out(out, "out", out->dtype, out->dtype, 2, oshape, false));
    TS__RETURN_IF_ERROR(ts__quant_check_disjoint(a, "a", out, "out"));
    const uint8_t *src = (const uint8_t *)a->data;
    uint8_t *dst = (uint8_t *)out->data;
    for (int64_t j = 0; j < n; j++) {
        for (int64_t i2 = 0; i2 < m / 2; i2++) {
            uint8_t b0 = src[(2 * i2) * a->strides[0] + (j >> 1) * a->strides[1]];
            uint8_t b1 = src[(2 * i2 + 1) * a->strides[0] + (j >> 1) * a->strides[1]];
            uint8_t lo = (j & 1) ? (uint8_t)(b0 >> 4) : (uint8_t)(b0 & 0xF);
            uint8_t hi = (j & 1) ? (uint8_t)(b1 >> 4) : (uint8_t)(b1 & 0xF);
            dst[j * out->strides[0] + i2 * out->strides[1]] = (uint8_t)(lo | (hi << 4));
        }
    }
    return TS_OK;
}
