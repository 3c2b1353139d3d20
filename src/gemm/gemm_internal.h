/* GEMM framework internals: resolved operand views and packing (not installed). */
#ifndef TS_GEMM_INTERNAL_H
#define TS_GEMM_INTERNAL_H

#include "core/internal.h"

/* One operand as the NT driver sees it: logical [mn, k] with element (r, k) at storage unit
 * r*s_mn + k*s_k, except packed fp4, where the pair index along the contiguous dim is used
 * (K-major: unit r*s_mn + (k>>1)*s_k, nibble k&1; MN-major: (r>>1)*s_mn + k*s_k, nibble r&1). */
typedef struct ts__gemm_operand {
    const void *data;
    ts_dtype dtype; /* TS_E4M3, TS_E2M1X2 or TS_BF16 */
    int64_t mn, k;
    int64_t s_mn, s_k;
    bool k_major;
    /* Scales (absent for bf16): f32 or packed ue8m0 words, element (i, j) at i*sf_s_mn +
     * j*sf_s_k; one scale per gran_mn rows x gran_k K values. */
    const void *sf;
    bool sf_packed;
    int64_t sf_s_mn, sf_s_k;
    int64_t gran_mn, gran_k;
} ts__gemm_operand;

/* dst[k*w + i] = value (r0+i, k0+k) for i < rows, 0 for rows <= i < w; k < kc. */
void ts__gemm_pack_panel(const ts__gemm_operand *op, int64_t r0, int64_t rows, int64_t k0,
                         int64_t kc, int w, float *dst);
/* dst[b*w + i] = scale of row r0+i for canonical K block kb0+b (blocks of g values), 0 for
 * padded rows; b < nkb. */
void ts__gemm_pack_scales(const ts__gemm_operand *op, int64_t r0, int64_t rows, int64_t kb0,
                          int64_t nkb, int64_t g, int w, float *dst);

#endif
