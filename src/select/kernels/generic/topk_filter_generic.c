/* Portable threshold filters (the reference for the AVX2 ones). */
#include "select/topk_internal.h"

#include <string.h>

int64_t ts__topk_filter_f32__generic(const void *x, int64_t n, uint32_t idx0, float thr,
                                     uint32_t pidx, uint64_t *out, int *nan) {
    const uint32_t *u = (const uint32_t *)x;
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++) {
        float f;
        memcpy(&f, &u[i], 4);
        const uint32_t idx = idx0 + (uint32_t)i;
        if (f > thr || f != f || (f == thr && idx < pidx)) {
            out[c++] = ts__topk_entry(ts__topk_key_f32(u[i]), idx);
            if (f != f) *nan = 1;
        }
    }
    return c;
}

int64_t ts__topk_filter_bf16__generic(const void *x, int64_t n, uint32_t idx0, float thr,
                                      uint32_t pidx, uint64_t *out, int *nan) {
    const uint16_t *u = (const uint16_t *)x;
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t w = (uint32_t)u[i] << 16;
        float f;
        memcpy(&f, &w, 4);
        const uint32_t idx = idx0 + (uint32_t)i;
        if (f > thr || f != f || (f == thr && idx < pidx)) {
            out[c++] = ts__topk_entry(ts__topk_key_bf16(u[i]), idx);
            if (f != f) *nan = 1;
        }
    }
    return c;
}
