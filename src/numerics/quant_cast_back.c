/* Dequantisers: out[i,j] = decode(x[i,j]) * sf[i / gran_mn, j / gran_k], in f32, then rounded
 * to out's dtype. Packed scales decode as upstream's unpack_ue8m0_from_int: byte << 23 viewed
 * as f32 (so byte 0 gives +0.0 and byte 255 gives +inf, not 2^-127 / NaN). FP4 code 8 (-0)
 * decodes to +0 as in upstream's _dequantize_from_fp4_e2m1. */
#include "numerics/quant_hand.h"
#include "numerics/quant_kernels.h"

#include "tilestack/quant.h"

typedef struct cb_ctx {
    const uint8_t *x;
    int64_t x_rs;
    bool fp4;
    const char *sf;
    int64_t sf_s0, sf_s1;
    bool packed;
    int64_t gmn, gk, n;
    char *out;
    int64_t out_rs;
    size_t out_esz;
    const ts__quant_kernels *k; /* indexed by the output kind */
} cb_ctx;

static inline float sf_load(const cb_ctx *c, int64_t i, int64_t kb) {
    if (!c->packed) return ((const float *)c->sf)[i * c->sf_s0 + kb * c->sf_s1];
    uint32_t w = ((const uint32_t *)c->sf)[i * c->sf_s0 + (kb >> 2) * c->sf_s1];
    return ts__f32_from_bits(((w >> (8 * (kb & 3))) & 0xFFu) << 23);
}

/* Blocks per kernel call: bounds the on-stack scale buffer. */
#define CB_SEG_BLOCKS 256

/* Rows in segments of whole blocks, their scales gathered first, so the kernels loop without
 * a call per block. With an odd fp4 gran_k, blocks split bytes: each block is then its own
 * call, and a block starting at an odd element decodes that value from a shifted copy of the
 * byte, so kernels always start on a byte boundary. */
static void cb_rows(void *vctx, int64_t r0, int64_t r1, int tid) {
    (void)tid;
    const cb_ctx *c = (const cb_ctx *)vctx;
    float sseg[CB_SEG_BLOCKS];
    const int64_t nb = ts__cdiv_safe(c->n, c->gk);
    const bool split = c->fp4 && (c->gk & 1);
    for (int64_t i = r0; i < r1; i++) {
        const uint8_t *xr = c->x + i * c->x_rs;
        const int64_t si = i / c->gmn;
        char *orow = c->out + i * c->out_rs;
        for (int64_t b0 = 0; b0 < nb; b0 += CB_SEG_BLOCKS) {
            const int64_t nseg = ts__min64(CB_SEG_BLOCKS, nb - b0), j0 = b0 * c->gk;
            for (int64_t b = 0; b < nseg; b++) sseg[b] = sf_load(c, si, b0 + b);
            if (!split) {
                const int64_t len = ts__min64(c->n - j0, nseg * c->gk);
                char *o = orow + (size_t)j0 * c->out_esz;
                if (c->fp4) c->k->dec_e2m1(xr + (j0 >> 1), len, c->gk, sseg, o);
                else c->k->dec_e4m3(xr + j0, len, c->gk, sseg, o);
                continue;
            }
            for (int64_t b = 0; b < nseg; b++) {
                int64_t j = j0 + b * c->gk, len = ts__min64(c->n - j, c->gk);
                if (j & 1) {
                    const uint8_t hi = (uint8_t)(xr[j >> 1] >> 4);
                    c->k->dec_e2m1(&hi, 1, 1, &sseg[b], orow + (size_t)j * c->out_esz);
                    j++, len--;
                }
                c->k->dec_e2m1(xr + (j >> 1), len, c->gk, &sseg[b], orow + (size_t)j * c->out_esz);
            }
        }
    }
}

static ts_status cast_back(const ts_tensor *x, const char *xname, bool fp4, const ts_tensor *sf,
                           int64_t gmn, int64_t gk, ts_tensor *out) {
    bool packed;
    TS__RETURN_IF_ERROR(ts__quant_args_cast_back(x, xname, fp4, sf, gmn, gk, out, &packed));
    const int64_t m = x->shape[0], n = fp4 ? x->shape[1] * 2 : x->shape[1];
    if (m == 0 || n == 0) return TS_OK;
    cb_ctx c = {
        .x = (const uint8_t *)x->data, .x_rs = x->strides[0], .fp4 = fp4,
        .sf = (const char *)sf->data, .sf_s0 = sf->strides[0], .sf_s1 = sf->strides[1],
        .packed = packed, .gmn = gmn, .gk = gk, .n = n,
        .out = (char *)out->data, .out_rs = out->strides[0] * (int64_t)ts_dtype_size(out->dtype),
        .out_esz = ts_dtype_size(out->dtype),
        .k = ts__quant_kernels_for(out->dtype == TS_F32 ? TS__QSRC_F32
                                   : out->dtype == TS_BF16 ? TS__QSRC_BF16 : TS__QSRC_F16),
    };
    ts__parallel_for(m, 1, cb_rows, &c);
    return TS_OK;
}

ts_status ts__qh_cast_back_from_fp8(const ts_tensor *x_fp8, const ts_tensor *sf, int64_t sf_gran_mn,
                                    int64_t sf_gran_k, ts_tensor *out) {
    return cast_back(x_fp8, "x_fp8", false, sf, sf_gran_mn, sf_gran_k, out);
}

ts_status ts__qh_cast_back_from_fp4(const ts_tensor *x_fp4, const ts_tensor *sf, int64_t sf_gran_mn,
                                    int64_t sf_gran_k, ts_tensor *out) {
    return cast_back(x_fp4, "x_fp4", true, sf, sf_gran_mn, sf_gran_k, out);
}
