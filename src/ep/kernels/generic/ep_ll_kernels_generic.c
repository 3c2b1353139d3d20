/* Generic low-latency row kernels (the reference the AVX2 ones match bit for bit). */
#include "ep/ep_ll_kernels.h"

#include <math.h>

#include "tilestack/numerics.h"

static inline float bf16f(uint16_t h) {
    union { uint32_t u; float f; } v = {(uint32_t)h << 16};
    return v.f;
}

void ts__ep_ll_fma_bf16__generic(float *acc, const uint16_t *y, float w, int64_t n) {
    for (int64_t j = 0; j < n; j++) acc[j] = fmaf(bf16f(y[j]), w, acc[j]);
}

void ts__ep_ll_fma_f32__generic(float *acc, const float *y, float w, int64_t n) {
    for (int64_t j = 0; j < n; j++) acc[j] = fmaf(y[j], w, acc[j]);
}

void ts__ep_ll_cast__generic(const uint16_t *x, int64_t hidden, int round_scale, uint8_t *q, float *scale_inv) {
    for (int64_t g = 0; g < hidden / 128; g++) {
        const uint16_t *xg = x + g * 128;
        float amax = 1e-4f; /* upstream's kFP8Margin */
        for (int j = 0; j < 128; j++) {
            const float a = bf16f((uint16_t)(xg[j] & 0x7FFF));
            amax = a > amax ? a : amax; /* NaN never wins, as fmaxf */
        }
        float scale;
        ts__ep_ll_fp8_scales(amax, round_scale, &scale, &scale_inv[g]);
        for (int j = 0; j < 128; j++) q[g * 128 + j] = ts_f32_to_e4m3_sat(bf16f(xg[j]) * scale);
    }
}
