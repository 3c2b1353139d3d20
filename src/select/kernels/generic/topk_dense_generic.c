/* Portable dense-row kernels (the reference for the AVX2 ones): signed-order keys, counting,
 * band gather and the final in-order selection, for int32 (f32) and int16 (bf16) keys. */
#include "select/topk_internal.h"

int ts__topk_dense_keys_f32__generic(const void *x, int64_t n, void *out) {
    const uint32_t *u = (const uint32_t *)x;
    int32_t *sk = (int32_t *)out;
    uint32_t nan = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t v = u[i];
        nan |= (v & 0x7fffffffu) > 0x7f800000u;
        v &= (uint32_t)-(uint32_t)(v != 0x80000000u); /* -0 -> +0 */
        sk[i] = (int32_t)(v ^ ((uint32_t)((int32_t)v >> 31) & 0x7fffffffu));
    }
    return (int)nan;
}

int ts__topk_dense_keys_bf16__generic(const void *x, int64_t n, void *out) {
    const uint16_t *u = (const uint16_t *)x;
    int16_t *sk = (int16_t *)out;
    uint32_t nan = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t v = u[i];
        nan |= (v & 0x7fffu) > 0x7f80u;
        v &= (uint32_t)-(uint32_t)(v != 0x8000u);
        const int32_t s = (int32_t)(int16_t)(uint16_t)v; /* sign-extended bits */
        sk[i] = (int16_t)(s ^ ((s >> 15) & 0x7fff));
    }
    return (int)nan;
}

/* One body per key width: T is the key type, BIAS maps a key to its unsigned entry key. */
#define DENSE_KERNELS(W, T, BIAS)                                                                \
    void ts__topk_dense_count_gt2_##W##__generic(const void *p, int64_t n, int32_t t1,         \
                                                 int32_t t2, int64_t c[2]) {                    \
        const T *sk = (const T *)p;                                                              \
        int64_t c1 = 0, c2 = 0;                                                                  \
        for (int64_t i = 0; i < n; i++) {                                                        \
            c1 += sk[i] > t1;                                                                    \
            c2 += sk[i] > t2;                                                                    \
        }                                                                                        \
        c[0] = c1;                                                                               \
        c[1] = c2;                                                                               \
    }                                                                                            \
    int64_t ts__topk_dense_gather_##W##__generic(const void *p, int64_t n, int32_t lo,         \
                                                 int32_t hi, uint32_t idx0, uint64_t *out) {    \
        const T *sk = (const T *)p;                                                              \
        int64_t c = 0;                                                                           \
        for (int64_t i = 0; i < n; i++)                                                          \
            if (sk[i] >= lo && sk[i] <= hi)                                                      \
                out[c++] = ts__topk_entry((uint32_t)(int32_t)sk[i] + (BIAS), idx0 + (uint32_t)i); \
        return c;                                                                                \
    }                                                                                            \
    int64_t ts__topk_dense_select_##W##__generic(const void *p, int64_t n, int32_t t,          \
                                                 int64_t last, uint32_t idx0, uint64_t *out) {  \
        const T *sk = (const T *)p;                                                              \
        int64_t c = 0;                                                                           \
        for (int64_t i = 0; i < n; i++) { /* branch-free: a good part of the row is kept */     \
            out[c] = ts__topk_entry((uint32_t)(int32_t)sk[i] + (BIAS), idx0 + (uint32_t)i);      \
            c += (sk[i] > t) | ((sk[i] == t) & (i <= last));                                     \
        }                                                                                        \
        return c;                                                                                \
    }                                                                                            \
    int64_t ts__topk_dense_select_idx_##W##__generic(const void *p, int64_t n, int32_t t,      \
                                                     int64_t last, uint32_t idx0, uint32_t *out) { \
        const T *sk = (const T *)p;                                                              \
        int64_t c = 0;                                                                           \
        for (int64_t i = 0; i < n; i++) {                                                        \
            out[c] = idx0 + (uint32_t)i;                                                         \
            c += (sk[i] > t) | ((sk[i] == t) & (i <= last));                                     \
        }                                                                                        \
        return c;                                                                                \
    }                                                                                            \
    int64_t ts__topk_dense_nth_eq_##W##__generic(const void *p, int64_t n, int32_t t,          \
                                                 int64_t need) {                                \
        const T *sk = (const T *)p;                                                              \
        for (int64_t i = 0; i < n; i++)                                                          \
            if (sk[i] == t && --need == 0) return i;                                             \
        return n - 1; /* fewer than need: outside the contract */                                \
    }

DENSE_KERNELS(s32, int32_t, 0x80000000u)
DENSE_KERNELS(s16, int16_t, 0x8000u)
