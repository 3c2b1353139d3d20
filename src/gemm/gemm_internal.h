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

/* ---- driver (gemm_dense.c), shared with the grouped GEMMs ---- */

/* A 2-D view as an NT operand (validated: ndim, dtype, majorness). bf16 selects TS_BF16,
 * else e4m3 / e2m1x2. prefer_mn: read a view that is both K- and MN-contiguous as MN-major
 * (the caller transposed a row-major argument). */
ts_status ts__gemm_make_operand(const ts_tensor *x, const char *name, bool bf16, bool prefer_mn,
                                ts__gemm_operand *op);
/* Validates a 2-D scale view (f32 or packed ue8m0) against op's shape and attaches it. */
ts_status ts__gemm_attach_scales(ts__gemm_operand *op, const ts_tensor *sf, const char *name,
                                 int64_t gran_mn, int64_t gran_k);
/* Whether upstream runs this pair only on SM100, where f32 scales are cast to ue8m0. */
bool ts__gemm_needs_ue8m0_cast(const ts__gemm_operand *a, const ts__gemm_operand *b);
/* TS_ERR_INVALID_ARGUMENT unless every f32 scale of the 2-D view is a positive power of two. */
ts_status ts__gemm_check_pow2_scales(const ts_tensor *sf, const char *name);
/* Whether the byte ranges spanned by two views intersect (empty views never do). */
bool ts__gemm_views_overlap(const ts_tensor *x, const ts_tensor *y);

/* One validated NT sub-problem: D[m, n] (= C +) A[m, k] . B[n, k]ᵀ. d and c point at element
 * (0, 0), rows ld_d / ld_c elements apart, columns contiguous; c NULL: no C (c == d is fine). */
typedef struct ts__gemm_problem {
    ts__gemm_operand a, b;
    int64_t m, n, k;
    void *d;
    int64_t ld_d;
    const void *c;
    int64_t ld_c;
    int64_t item0; /* set by ts__gemm_run_batch */
} ts__gemm_problem;

/* Runs the problems as one parallel pass (work items over problems x M blocks x N blocks, a
 * static partition). All share n, the output dtype (bf16 or f32), scaled (fp8/fp4 block
 * scales, canonical block g) or not (bf16); m and k may differ. k == 0 writes D = C (bits)
 * or zeros. Every element follows the canonical order, so a problem's rows have the same bits
 * as the dense call on that problem alone. Runs on the calling thread's pool; the problems'
 * outputs must not overlap. */
ts_status ts__gemm_run_batch(ts__gemm_problem *probs, int64_t nprob, int64_t n, ts_dtype d_dtype,
                             bool scaled, int64_t g);

#endif
