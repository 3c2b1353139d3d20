/* tilestack quantisers and scale-factor layout helpers, with DeepGEMM's names and byte-exact
 * semantics (deep_gemm/utils/math.py, csrc/apis/layout.hpp).
 *
 * Shapes follow upstream. Inputs x are [m, n] with a contiguous last dim (any row stride);
 * dtype bf16, f16 or f32. Outputs are caller-allocated views; their shapes must match exactly.
 * Scale outputs may have any strides (e.g. MN-major). On error, outputs are untouched. */
#ifndef TILESTACK_QUANT_H
#define TILESTACK_QUANT_H

#include "tilestack/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Per-token (1 x gran_k) FP8 cast. x [m,n] -> x_fp8 e4m3 [m,n],
 *   sf f32 [m, ceil(n/gran_k)]                         when !use_packed_ue8m0,
 *   sf i32 / ue8m0x4 [m, ceil(ceil(n/gran_k)/4)]       when use_packed_ue8m0 (needs use_ue8m0;
 *                                                      missing trailing bytes are 0).
 * Per block: amax = max|x| in f32, clamped >= 1e-4; sf = amax * fl32(1/448) (torch on CUDA's
 * `amax / 448.0`); if use_ue8m0,
 * sf = ceil_to_ue8m0(sf); q = e4m3(x * (1.0f/sf)) (RNE, non-saturating as torch).
 * NaN/inf follow torch on CUDA (docs/quant.md): a NaN block gets sf = NaN 0x7FFFFFFF (2^127
 * with ue8m0) and every NaN product the code 0x7F. */
TS_API ts_status ts_per_token_cast_to_fp8(const ts_tensor *x, bool use_ue8m0, int64_t gran_k,
                                          bool use_packed_ue8m0, ts_tensor *x_fp8, ts_tensor *sf);

/* Per-block (gran_k x gran_k) FP8 cast: sf f32 [ceil(m/g), ceil(n/g)]. */
TS_API ts_status ts_per_block_cast_to_fp8(const ts_tensor *x, bool use_ue8m0, int64_t gran_k,
                                          ts_tensor *x_fp8, ts_tensor *sf);

/* Per-channel FP8 cast over gran_k rows: m % gran_k == 0; sf f32 [m/gran_k, n]. */
TS_API ts_status ts_per_channel_cast_to_fp8(const ts_tensor *x, bool use_ue8m0, int64_t gran_k,
                                            ts_tensor *x_fp8, ts_tensor *sf);

typedef enum ts_fp4_rounding {
    /* DeepGEMM utils: amax clamp 1e-4, sf = amax/6, x*(1/sf), strict-threshold codes. */
    TS_FP4_ROUND_DEEPGEMM = 0,
    /* TileKernels: amax clamp 6*2^-126, sf_inv = 6/amax (or 2^-e when ue8m0), RNE. */
    TS_FP4_ROUND_RNE = 1,
} ts_fp4_rounding;

/* Per-token FP4 (e2m1) cast: n even; x_fp4 e2m1x2 [m, n/2]; sf as for fp8 (f32 or packed). */
TS_API ts_status ts_per_token_cast_to_fp4(const ts_tensor *x, bool use_ue8m0, int64_t gran_k,
                                          bool use_packed_ue8m0, ts_fp4_rounding rounding,
                                          ts_tensor *x_fp4, ts_tensor *sf);

/* Dequantise: out[i,j] = decode(x[i,j]) * sf[i/sf_gran_mn, j/sf_gran_k], product in f32 and
 * rounded (RNE) to out's dtype (bf16, f16 or f32). sf is f32, or ue8m0x4-packed along its last
 * dim. Per-token: (1, 128); per-block: (128, 128); per-channel: (128, 1) with sf [m/128, n].
 * Packed bytes decode as upstream's unpack_ue8m0_from_int (b << 23: 0 -> 0.0, 255 -> inf); fp4
 * code 8 (-0) decodes to +0 as upstream. NaN products give the canonical NaN 0x7FFFFFFF. */
TS_API ts_status ts_cast_back_from_fp8(const ts_tensor *x_fp8, const ts_tensor *sf,
                                       int64_t sf_gran_mn, int64_t sf_gran_k, ts_tensor *out);
TS_API ts_status ts_cast_back_from_fp4(const ts_tensor *x_fp4, const ts_tensor *sf,
                                       int64_t sf_gran_mn, int64_t sf_gran_k, ts_tensor *out);

/* [m, n/2] packed fp4 -> [n, m/2] packed fp4 of the transpose; m even. */
TS_API ts_status ts_transpose_packed_fp4(const ts_tensor *a, ts_tensor *out);

/* align(x, 16 / elem_size); -1 if elem_size does not divide 16 or x < 0. */
TS_API int64_t ts_get_tma_aligned_size(int64_t x, int64_t elem_size);

/* The view upstream returns for sf f32 [MN, SFK] or [G, MN, SFK]: same shape, strides
 * (1, align(MN,4)) and batch stride align(MN,4)*SFK. Fills *layout (data = NULL) and the number
 * of f32 elements the caller must allocate. */
TS_API ts_status ts_get_mn_major_tma_aligned_layout(const ts_tensor *sf, ts_tensor *layout,
                                                    int64_t *alloc_elems);
/* Copy sf into out, which must have exactly that layout (out->data caller-allocated). */
TS_API ts_status ts_get_mn_major_tma_aligned_tensor(const ts_tensor *sf, ts_tensor *out);
/* sf f32 power-of-two [.., MN, SFK] -> i32 [.., MN, ceil(SFK/4)] MN-major TMA-aligned packed
 * ue8m0 (byte j of word w = exponent byte of sf[.., 4w+j]; missing K entries 0). The _layout
 * helper gives the required view. Non-power-of-two or non-positive scales: TS_ERR_INVALID_ARGUMENT. */
TS_API ts_status ts_get_mn_major_tma_aligned_packed_ue8m0_layout(const ts_tensor *sf,
                                                                 ts_tensor *layout,
                                                                 int64_t *alloc_elems);
TS_API ts_status ts_get_mn_major_tma_aligned_packed_ue8m0_tensor(const ts_tensor *sf,
                                                                 ts_tensor *out);

/* Which upstream kernel family's scale layout to produce. */
typedef enum ts_sf_arch {
    TS_SF_ARCH_SM90 = 90,   /* f32 scales: SFA -> MN-major TMA-aligned f32; SFB 128x128 as-is */
    TS_SF_ARCH_SM100 = 100, /* packed ue8m0 MN-major TMA-aligned int32 */
} ts_sf_arch;

/* deep_gemm.transform_sf_into_required_layout on CPU: same output shape, strides and bytes as
 * upstream for the given arch. recipe = (gran_mn, gran_k): the caller resolves upstream's
 * 3-tuple recipe + is_sfa to the operand's (gran_mn, gran_k). num_groups = 0 for a 2-D sf.
 * `layout` (if non-NULL) receives the required output view (data = NULL) and *alloc_elems (if
 * non-NULL) the 4-byte elements it spans, so callers can size the buffer; out == NULL stops
 * there, otherwise out must match the layout and is filled. Where upstream returns sf itself
 * (SM90 128x128 f32, SM100 packed int), the layout is sf's own and out may be sf (no-op). */
TS_API ts_status ts_transform_sf_into_required_layout(const ts_tensor *sf, int64_t mn, int64_t k,
                                                      int64_t gran_mn, int64_t gran_k,
                                                      int64_t num_groups, bool disable_ue8m0_cast,
                                                      ts_sf_arch arch, ts_tensor *layout,
                                                      int64_t *alloc_elems, ts_tensor *out);

/* deep_gemm.testing.calc_diff: 1 - 2*sum(x*y)/sum(x*x + y*y) in float64; 0 if both are all
 * zero. x and y: same shape, any float dtype (bf16, f16, f32, f64). */
TS_API ts_status ts_calc_diff(const ts_tensor *x, const ts_tensor *y, double *diff);

#ifdef __cplusplus
}
#endif
#endif
