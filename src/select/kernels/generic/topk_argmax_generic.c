/* k = 1: one pass for the largest value, lowest index among equals (the reference for the
 * AVX2 kernels). Keys compare -0 and +0 as equal, as the entries do. */
#include "select/topk_internal.h"

uint64_t ts__topk_argmax_f32__generic(const void *x, int64_t n, uint32_t idx0, int *nan) {
    const uint32_t *u = (const uint32_t *)x;
    uint32_t best = ts__topk_key_f32(u[0]), bad = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint32_t v = u[i], key = ts__topk_key_f32(v);
        bad |= (v & 0x7fffffffu) > 0x7f800000u;
        if (key > best) { /* strict: the first of equal keys stays */
            best = key;
            at = i;
        }
    }
    if (bad) *nan = 1;
    return ts__topk_entry(best, idx0 + (uint32_t)at);
}

uint64_t ts__topk_argmax_bf16__generic(const void *x, int64_t n, uint32_t idx0, int *nan) {
    const uint16_t *u = (const uint16_t *)x;
    uint32_t best = ts__topk_key_bf16(u[0]), bad = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint32_t v = u[i], key = ts__topk_key_bf16(v);
        bad |= (v & 0x7fffu) > 0x7f80u;
        if (key > best) {
            best = key;
            at = i;
        }
    }
    if (bad) *nan = 1;
    return ts__topk_entry(best, idx0 + (uint32_t)at);
}
