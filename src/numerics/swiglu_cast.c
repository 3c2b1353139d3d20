/* SwiGLU x routing weight + FP8 requantisation with ue8m0 scales per 32 (swiglu_cast.h). The
 * arithmetic is upstream's non-fast-math epilogue, element by element in f32. */
#include "numerics/swiglu_cast.h"

#include "numerics/quant_kernels.h"
#include "tilestack/numerics.h"

#include <math.h>
#include <string.h>

/* upstream fast_log2_ceil: exponent field - 127, + 1 if any mantissa bit is set (sign ignored:
 * amax >= 0) */
static inline int log2_ceil_bits(float x) {
    const uint32_t u = ts__bits_from_f32(x);
    return (int)((u >> 23) & 0xFF) - 127 + ((u & 0x7FFFFF) != 0);
}
/* upstream fast_pow2: the float with exponent field e + 127 and zero mantissa; fields outside
 * [0, 254] do not occur for finite amax except e = -127 -> +0 (field 0) */
static inline float pow2_bits(int e) {
    int f = e + 127;
    if (f < 0) f = 0;
    if (f > 254) f = 254;
    return ts__f32_from_bits((uint32_t)f << 23);
}

void ts__swiglu_weight_cast(const uint16_t *gate_rows, const uint16_t *up_rows, int64_t ld,
                            int64_t m, int64_t I, const float *w, float clamp, bool bf16_out,
                            void *q, int64_t ldq, uint8_t *sf_ue8m0, int64_t ldsf_bytes,
                            float *sf_f32, int64_t ldsf_f32) {
    const float inv448 = (float)(1.0 / 448.0);
    for (int64_t i = 0; i < m; i++) {
        const uint16_t *gate = gate_rows + i * ld, *up = up_rows + i * ld;
        const float wt = w ? w[i] : 1.0f;
        for (int64_t j0 = 0; j0 < I; j0 += 32) {
            float act[32];
            float amax = 0.0f;
            for (int j = 0; j < 32; j++) {
                float g = ts_bf16_to_f32(gate[j0 + j]);
                float u = ts_bf16_to_f32(up[j0 + j]);
                g = fminf(g, clamp);
                u = fminf(fmaxf(u, -clamp), clamp);
                /* IEEE divide and expf: the non-fast-math kernel's silu */
                const float sig = 1.0f / (1.0f + expf(-g));
                const float a = ((g * sig) * u) * wt;
                act[j] = a;
                amax = fmaxf(amax, fabsf(a));
            }
            if (bf16_out) {
                uint16_t *o = (uint16_t *)q + i * ldq + j0;
                for (int j = 0; j < 32; j++) o[j] = ts_f32_to_bf16(act[j]);
                continue;
            }
            int e = log2_ceil_bits(amax * inv448);
            if (e > 127) e = 127; /* amax inf: the largest ue8m0 (all values saturate) */
            const float sf_inv = pow2_bits(-e);
            uint8_t *o = (uint8_t *)q + i * ldq + j0;
            for (int j = 0; j < 32; j++) o[j] = ts_f32_to_e4m3_sat(act[j] * sf_inv);
            if (sf_ue8m0) sf_ue8m0[i * ldsf_bytes + j0 / 32] = (uint8_t)(e + 127);
            if (sf_f32) sf_f32[i * ldsf_f32 + j0 / 32] = ldexpf(1.0f, e); /* 2^-127: subnormal, as ue8m0 0 */
        }
    }
}
