/* Decode (small-M) kernel in scalar C: the canonical order of docs/gemm.md, one output
 * column at a time, reading B straight from the packed-weight rows (or f32 rows). */
#include "core/internal.h"
#include "gemm/gemm_internal.h"
#include "gemm/gemm_kernels.h"
#include "tilestack/numerics.h"

#include <math.h>
#include <string.h>

enum { W = TS__GEMM_DW };

static inline const uint8_t *row_ptr(const ts__gemm_dec_args *x, int64_t k) {
    if (x->blk_bytes)
        return (const uint8_t *)x->bp + (k / x->blk_rows) * x->blk_bytes +
               (k % x->blk_rows) * x->row_bytes;
    return (const uint8_t *)x->bp + k * x->row_bytes;
}

static inline float b_value(const ts__gemm_dec_args *x, int64_t k, int j) {
    const uint8_t *row = row_ptr(x, k);
    switch (x->fmt) {
    case TS_E4M3: return ts__gemm_lut.e4m3[row[ts__pw_slot(j)]];
    case TS_E2M1X2: {
        const int64_t q = ts__pw_slot(j);
        return ts__gemm_lut.e2m1[(row[q >> 1] >> ((q & 1) * 4)) & 0xF];
    }
    case TS_BF16: {
        uint16_t h;
        memcpy(&h, row + 2 * j, 2);
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    default: {
        float f;
        memcpy(&f, row + 4 * j, 4);
        return f;
    }
    }
}

/* Scale of column j for sub-block s (K values from s * g). */
static inline float b_scale(const ts__gemm_dec_args *x, int64_t s, int j) {
    const uint8_t *p;
    if (x->blk_bytes)
        p = (const uint8_t *)x->bp + (s * x->g / x->blk_rows) * x->blk_bytes + x->sb_off;
    else
        p = (const uint8_t *)x->sb + (size_t)(s * x->sb_step) * (x->sb_u8 ? 1 : 4);
    if (x->sb_u8) return ts__gemm_lut.ue8m0[p[j]];
    float f;
    memcpy(&f, p + 4 * j, 4);
    return f;
}

void ts__gemm_decode_32__generic(const ts__gemm_dec_args *x) {
    ts__gemm_lut_init();
    const int64_t m = x->m;
    if (!x->sa) {
        for (int64_t k = 0; k < x->len; k++)
            for (int j = 0; j < W; j++) {
                const float b = b_value(x, k, j);
                for (int64_t i = 0; i < m; i++)
                    x->acc[i * W + j] = fmaf(x->a[k * m + i], b, x->acc[i * W + j]);
            }
        return;
    }
    for (int64_t k0 = 0, s = 0; k0 < x->len; k0 += x->g, s++) {
        const int64_t k1 = ts__min64(x->len, k0 + x->g);
        for (int j = 0; j < W; j++) {
            const float sb = b_scale(x, s, j);
            for (int64_t i = 0; i < m; i++) {
                float p = 0.0f;
                for (int64_t k = k0; k < k1; k++) p = fmaf(x->a[k * m + i], b_value(x, k, j), p);
                x->acc[i * W + j] = fmaf(p, x->sa[s * m + i] * sb, x->acc[i * W + j]);
            }
        }
    }
}
