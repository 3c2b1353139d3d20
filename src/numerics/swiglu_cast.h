/* The one SwiGLU x routing weight + FP8 cast of the routed experts (internal, MPI-free): Mega
 * MoE's Linear1 epilogue (upstream get_e4m3_sf_and_sf_inv in deep_gemm/common/math.cuh, TileLang
 * swiglu_apply_weight_to_fp8). The model's single-process MoE and both Mega MoE paths (fused,
 * unfused) call it, so a token's bits do not depend on which of them computed its experts. */
#ifndef TILESTACK_SWIGLU_CAST_H
#define TILESTACK_SWIGLU_CAST_H

#include <stdbool.h>
#include <stdint.h>

/* Rows i < m: gate = gate_rows[i*ld ..], up = up_rows[i*ld ..] (bf16, I values each).
 *   g = min(gate, clamp), u = min(max(up, -clamp), clamp)        (clamp = INFINITY: none)
 *   act = ((g * (1 / (1 + expf(-g)))) * u) * w[i]                 (f32; w NULL: 1)
 * bf16_out: q bf16 [m, I] (row stride ldq elements), no scales.
 * else per 32 values e = ceil(log2(amax * fl(1/448))) (exponent-field arithmetic, no lower
 * clamp), q = e4m3_satfinite(act * 2^-e) (row stride ldq bytes), and the scale as a ue8m0 byte
 * e + 127 into sf_ue8m0[i * ldsf_bytes + j/32] and/or as the f32 2^e into
 * sf_f32[i * ldsf_f32 + j/32] (either may be NULL). I % 32 == 0. */
void ts__swiglu_weight_cast(const uint16_t *gate_rows, const uint16_t *up_rows, int64_t ld,
                            int64_t m, int64_t I, const float *w, float clamp, bool bf16_out,
                            void *q, int64_t ldq, uint8_t *sf_ue8m0, int64_t ldsf_bytes,
                            float *sf_f32, int64_t ldsf_f32);

#endif
