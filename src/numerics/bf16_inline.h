/* bf16 <-> f32 as static inline functions, for loops that convert element by element: the same
 * bits as ts_bf16_to_f32 / ts_f32_to_bf16 (convert_scalar.c keeps its own copy because the tile
 * JIT compiles that file alone into each module). Round to nearest even; a NaN becomes
 * sign | 0x7FC0 (quiet, payload dropped). */
#ifndef TS_NUMERICS_BF16_INLINE_H
#define TS_NUMERICS_BF16_INLINE_H

#include <stdint.h>
#include <string.h>

static inline float ts__bf16_to_f32_inl(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t ts__f32_to_bf16_inl(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)(((u >> 16) & 0x8000u) | 0x7FC0u);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

#endif
