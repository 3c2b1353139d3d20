/* Low-latency row kernels (generic C, AVX2 and AVX-512, bit-identical; picked by ts__active_isa): the
 * sender's per-128-channel FP8 cast and the combine's weighted accumulation. */
#ifndef TILESTACK_EP_LL_KERNELS_H
#define TILESTACK_EP_LL_KERNELS_H

#include <stdint.h>

/* acc[j] = fmaf(bf16(y[j]), w, acc[j]) */
typedef void (*ts__ep_ll_fma_bf16_fn)(float *acc, const uint16_t *y, float w, int64_t n);
/* acc[j] = fmaf(y[j], w, acc[j]) */
typedef void (*ts__ep_ll_fma_f32_fn)(float *acc, const float *y, float w, int64_t n);
/* Upstream's cast of one bf16 row (hidden % 128 == 0): per 128 channels amax = max(1e-4,
 * max |x|) (NaN ignored); scale_inv = amax * (1/448), scale = 448 / amax, or with round_scale
 * the power of two 2^ceil(log2(amax * (1/448))) from the float's bits and its reciprocal;
 * q = e4m3 saturating-to-finite of x * scale (RNE, NaN -> 0x7F | sign). */
typedef void (*ts__ep_ll_cast_fn)(const uint16_t *x, int64_t hidden, int round_scale, uint8_t *q, float *scale_inv);

void ts__ep_ll_fma_bf16__generic(float *acc, const uint16_t *y, float w, int64_t n);
void ts__ep_ll_fma_f32__generic(float *acc, const float *y, float w, int64_t n);
void ts__ep_ll_cast__generic(const uint16_t *x, int64_t hidden, int round_scale, uint8_t *q, float *scale_inv);
#ifdef TS_HAVE_AVX2_KERNELS
void ts__ep_ll_fma_bf16__avx2(float *acc, const uint16_t *y, float w, int64_t n);
void ts__ep_ll_fma_f32__avx2(float *acc, const float *y, float w, int64_t n);
void ts__ep_ll_cast__avx2(const uint16_t *x, int64_t hidden, int round_scale, uint8_t *q, float *scale_inv);
#endif
#ifdef TS_HAVE_AVX512_KERNELS
void ts__ep_ll_fma_bf16__avx512(float *acc, const uint16_t *y, float w, int64_t n);
void ts__ep_ll_fma_f32__avx512(float *acc, const float *y, float w, int64_t n);
void ts__ep_ll_cast__avx512(const uint16_t *x, int64_t hidden, int round_scale, uint8_t *q, float *scale_inv);
#endif

/* The combine's row kernels for the ISA path in use (ts__active_isa): the weighted
 * accumulation (bf16 and f32 rows) and the bf16 store, one choice for every caller (the
 * low-latency combine, V2's expanded combine). */
typedef struct ts__ep_ll_row_kernels {
    ts__ep_ll_fma_bf16_fn fma_bf16;
    ts__ep_ll_fma_f32_fn fma_f32;
    void (*store)(uint16_t *o, const float *acc, int64_t n);
} ts__ep_ll_row_kernels;
ts__ep_ll_row_kernels ts__ep_ll_pick_row_kernels(void);

/* The scale pair of one group from its amax (shared so both paths agree bit for bit). */
static inline void ts__ep_ll_fp8_scales(float amax, int round_scale, float *scale, float *scale_inv) {
    if (round_scale) {
        union { float f; uint32_t u; } v = {amax * (1.0f / 448.0f)};
        const int e = (int)((v.u >> 23) & 0xFF) - 127 + ((v.u & 0x7FFFFF) != 0);
        union { uint32_t u; float f; } p = {(uint32_t)(e + 127) << 23}, n = {(uint32_t)(127 - e) << 23};
        *scale_inv = p.f;
        *scale = n.f;
    } else {
        *scale_inv = amax * (1.0f / 448.0f);
        *scale = 448.0f / amax;
    }
}

#endif
