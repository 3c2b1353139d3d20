/* Generic combine row kernels: the reference for the AVX2 ones. */
#include "ep/ep_kernels.h"

#include <string.h>

static inline float bf16_f32(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

void ts__ep_acc_bf16__generic(float *restrict acc, const uint16_t *restrict p, int64_t n, int first) {
    if (first)
        for (int64_t j = 0; j < n; j++) acc[j] = 0.0f + bf16_f32(p[j]);
    else
        for (int64_t j = 0; j < n; j++) acc[j] += bf16_f32(p[j]);
}

void ts__ep_store_bf16__generic(uint16_t *restrict o, const float *restrict acc, int64_t n) {
    for (int64_t j = 0; j < n; j++) {
        uint32_t u;
        memcpy(&u, &acc[j], sizeof u);
        const uint32_t rne = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
        const uint32_t nan = ((u >> 16) & 0x8000u) | 0x7FC0u;
        o[j] = (uint16_t)((u & 0x7FFFFFFFu) > 0x7F800000u ? nan : rne);
    }
}
