/* Internal: the quantisers' per-ISA kernel table and the scalar rules every path shares.
 *
 * Framework code (validation, threading, scale-factor stores) lives in quant_*.c; kernels only
 * see contiguous runs of one row. The generic, AVX2 and AVX-512 tables must give identical bits. */
#ifndef TS_QUANT_KERNELS_H
#define TS_QUANT_KERNELS_H

#include "core/internal.h"
#include "tilestack/numerics.h"
#include "tilestack/quant.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* Source element kinds a quantiser reads. */
typedef enum ts__qsrc { TS__QSRC_BF16 = 0, TS__QSRC_F16 = 1, TS__QSRC_F32 = 2, TS__QSRC_COUNT } ts__qsrc;

/* The CUDA canonical NaN: what a torch CUDA op returns for any NaN result. We emit it for NaN
 * scales so every path (and every platform) gives the same bits. */
#define TS__CANON_NAN_BITS 0x7FFFFFFFu
#define TS__E4M3_NAN 0x7Fu

typedef struct ts__quant_kernels {
    /* max |x| over n values, as f32 bits; a NaN anywhere gives a value above 0x7F800000.
     * Integer max of |x| bits orders all non-NaN values correctly and puts NaN last, so the
     * result never depends on the order of evaluation. */
    uint32_t (*absmax)(const void *x, int64_t n);
    /* acc[j] = max(acc[j], |x[j]| bits) for j < n. */
    void (*absmax_cols)(const void *x, int64_t n, uint32_t *acc);
    /* q[j] = e4m3(f32(x[j]) * inv), a NaN product giving 0x7F. */
    void (*enc_e4m3)(const void *x, int64_t n, float inv, uint8_t *q);
    /* q[j] = e4m3(f32(x[j]) * inv[j]), a NaN product giving 0x7F. */
    void (*enc_e4m3_cols)(const void *x, int64_t n, const float *inv, uint8_t *q);
    /* One per-token row of n values in blocks of gran_k (the last may be short; the zero
     * padding never changes amax): writes n codes and ceil(n / gran_k) scales to sf.
     * Equal, block by block, to absmax + ts__fp8_scale + enc_e4m3. */
    void (*fp8_row)(const void *x, int64_t n, int64_t gran_k, bool ue8m0, uint8_t *q, float *sf);
    /* Per-block FP8 tiles, a row segment of n values in blocks of g (the last may be short).
     * blk_stats folds each block's |x| max (f32 bits) into amax[b] and a kernel-private bound
     * into amin[b] (start it at UINT32_MAX; 0 = none); blk_enc then writes the codes of
     * f32(x[j]) * inv[b] given the folded tile values, equal to enc_e4m3 per block. */
    void (*blk_stats)(const void *x, int64_t n, int64_t g, uint32_t *amax, uint32_t *amin);
    void (*blk_enc)(const void *x, int64_t n, int64_t g, const uint32_t *amax, const uint32_t *amin,
                    const float *inv, uint8_t *q);
    /* max |x| bits over n values skipping NaN (as CUDA fmaxf does); 0 if none. */
    uint32_t (*absmax_nonan)(const void *x, int64_t n);
    /* n even: e2m1 codes of f32(x[j]) * inv, two per byte (element 2i in the low nibble);
     * dg: DeepGEMM's strict thresholds (ts_f32_to_e2m1_dg), else RNE (ts_f32_to_e2m1). */
    void (*enc_e2m1)(const void *x, int64_t n, float inv, bool dg, uint8_t *q);
    /* One per-token FP4 row: n values in blocks of gran_k (both even; the last block may be
     * short): codes two per byte to q, per block b the stored scale sf[b] and its ue8m0 byte
     * e[b]. Equal, block by block, to ts__fp4_scale (amax by absmax, or absmax_nonan when
     * rne) + enc_e2m1 (dg = !rne). */
    void (*fp4_row)(const void *x, int64_t n, int64_t gran_k, bool ue8m0, bool rne, uint8_t *q,
                    float *sf, uint8_t *e);
    /* Cast-back; these entries are indexed by the OUTPUT kind. n values in blocks of gk (the
     * last may be short): out[j] = kind(v), v = decode(q[j]) * s[j / gk] in f32, a NaN v
     * replaced by TS__CANON_NAN_BITS before the rounding. */
    void (*dec_e4m3)(const uint8_t *q, int64_t n, int64_t gk, const float *s, void *out);
    /* Element 0 in the low nibble of q[0], gk even; code 8 (-0) reads +0 as upstream. */
    void (*dec_e2m1)(const uint8_t *q, int64_t n, int64_t gk, const float *s, void *out);
} ts__quant_kernels;

extern const ts__quant_kernels ts__quant_kernels_generic[TS__QSRC_COUNT];
/* The generic entries by name, so SIMD tables can reuse the ones they do not specialise. */
#define TS__QK_DECL_GENERIC(SFX)                                                                 \
    uint32_t ts__qk_absmax_##SFX##__generic(const void *x, int64_t n);                           \
    void ts__qk_absmax_cols_##SFX##__generic(const void *x, int64_t n, uint32_t *acc);           \
    void ts__qk_enc_e4m3_##SFX##__generic(const void *x, int64_t n, float inv, uint8_t *q);      \
    void ts__qk_enc_e4m3_cols_##SFX##__generic(const void *x, int64_t n, const float *inv,       \
                                               uint8_t *q);                                      \
    void ts__qk_fp8_row_##SFX##__generic(const void *x, int64_t n, int64_t gran_k, bool ue8m0,   \
                                         uint8_t *q, float *sf);                                 \
    uint32_t ts__qk_absmax_nonan_##SFX##__generic(const void *x, int64_t n);                     \
    void ts__qk_blk_stats_##SFX##__generic(const void *x, int64_t n, int64_t g, uint32_t *amax,  \
                                           uint32_t *amin);                                      \
    void ts__qk_blk_enc_##SFX##__generic(const void *x, int64_t n, int64_t g,                    \
                                         const uint32_t *amax, const uint32_t *amin,             \
                                         const float *inv, uint8_t *q);                          \
    void ts__qk_enc_e2m1_##SFX##__generic(const void *x, int64_t n, float inv, bool dg, uint8_t *q); \
    void ts__qk_fp4_row_##SFX##__generic(const void *x, int64_t n, int64_t gran_k, bool ue8m0,   \
                                         bool rne, uint8_t *q, float *sf, uint8_t *e);          \
    void ts__qk_dec_e4m3_##SFX##__generic(const uint8_t *q, int64_t n, int64_t gk, const float *s, \
                                          void *out);                                            \
    void ts__qk_dec_e2m1_##SFX##__generic(const uint8_t *q, int64_t n, int64_t gk, const float *s, \
                                          void *out);
TS__QK_DECL_GENERIC(bf16)
TS__QK_DECL_GENERIC(f16)
TS__QK_DECL_GENERIC(f32)
#if defined(TS_HAVE_AVX2_KERNELS)
extern const ts__quant_kernels ts__quant_kernels_avx2[TS__QSRC_COUNT];
#endif
#if defined(TS_HAVE_AVX512_KERNELS)
extern const ts__quant_kernels ts__quant_kernels_avx512[TS__QSRC_COUNT];
#endif

/* The table for the active ISA and source kind. */
static inline const ts__quant_kernels *ts__quant_kernels_for(ts__qsrc src) {
#if defined(TS_HAVE_AVX512_KERNELS)
    if (ts__active_isa() == TS_ISA_AVX512) return &ts__quant_kernels_avx512[src];
#endif
#if defined(TS_HAVE_AVX2_KERNELS)
    if (ts__isa_avx2_up(ts__active_isa())) return &ts__quant_kernels_avx2[src];
#endif
    return &ts__quant_kernels_generic[src];
}

static inline float ts__f32_from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t ts__bits_from_f32(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* DeepGEMM's FP8 scale from an amax (f32 bits): clamp >= 1e-4 (NaN passes through, as torch's
 * clamp), sf = amax * fl32(1/448), then ceil_to_ue8m0 if asked (NaN -> 2^127 there). The
 * multiply is what upstream computes: DeepGEMM's tests run `x_amax / 448.0` on CUDA, where
 * torch divides a tensor by a scalar as a multiply by the scalar's f32 reciprocal
 * (div_true_kernel_cuda); that differs from a true division by one ulp for some amax. */
static inline float ts__deepgemm_scale(uint32_t amax_bits, float inv_qmax, bool ue8m0) {
    float sf;
    if (amax_bits > 0x7F800000u) {
        sf = ts__f32_from_bits(TS__CANON_NAN_BITS);
    } else {
        float amax = ts__f32_from_bits(amax_bits);
        if (amax < 1e-4f) amax = 1e-4f;
        sf = amax * inv_qmax;
    }
    return ue8m0 ? ts_ceil_to_ue8m0(sf) : sf;
}
static inline float ts__fp8_scale(uint32_t amax_bits, bool ue8m0) {
    return ts__deepgemm_scale(amax_bits, 1.0f / 448.0f, ue8m0);
}

/* FP4 scale of one block: sf (what an f32 scale output stores), the multiplier inv and the
 * ue8m0 byte e (for packed output).
 *  DeepGEMM (!rne): amax (NaN-propagating absmax bits) clamped >= 1e-4, sf = amax * fl32(1/6)
 *    (torch-on-CUDA scalar division, as ts__fp8_scale), optional ceil_to_ue8m0, inv = 1/sf.
 *  TileKernels (rne; amax from absmax_nonan): clamp >= 6 * 2^-126; without ue8m0 sf = amax/6,
 *    inv = 6/amax; with ue8m0 e = ((bits(sf) - 1) >> 23) + 1 - 127 in uint32 arithmetic
 *    (replicated literally, wrap included), sf = 2^e, inv = 2^-e. */
typedef struct ts__fp4_scale_t { float sf, inv; uint8_t e; } ts__fp4_scale_t;
static inline ts__fp4_scale_t ts__fp4_scale(uint32_t amax_bits, bool ue8m0, bool rne) {
    ts__fp4_scale_t s;
    if (!rne) {
        const float sf = ts__deepgemm_scale(amax_bits, 1.0f / 6.0f, ue8m0);
        s.sf = sf;
        s.inv = 1.0f / sf;
        s.e = (uint8_t)(ts__bits_from_f32(sf) >> 23);
        return s;
    }
    float amax = ts__f32_from_bits(amax_bits);
    const float clamp_min = 6.0f * 0x1p-126f;
    if (amax < clamp_min) amax = clamp_min;
    s.sf = amax / 6.0f;
    if (!ue8m0) {
        s.inv = 6.0f / amax;
        s.e = 0;
        return s;
    }
    uint32_t exp_sf = ((ts__bits_from_f32(s.sf) - 1u) >> 23) + 1u - 127u;
    s.sf = ts__f32_from_bits((127u + exp_sf) << 23);
    s.inv = ts__f32_from_bits((127u - exp_sf) << 23);
    s.e = (uint8_t)(exp_sf + 127u);
    return s;
}

/* e4m3 of one scaled value; NaN results (NaN inputs, inf * 0, NaN scale) give 0x7F, as the
 * CUDA canonical NaN does upstream. */
static inline uint8_t ts__enc_e4m3_scaled(float y) {
    return y != y ? (uint8_t)TS__E4M3_NAN : ts_f32_to_e4m3(y);
}

/* Cast-back helpers: fp4 decode with upstream's +0 for code 8, and the f32 product with NaN
 * canonicalised (what every output kind is rounded from). */
static inline float ts__dec_e2m1_up(uint8_t code) { return code == 8 ? 0.0f : ts_e2m1_to_f32(code); }
static inline float ts__canon_nan(float v) { return v != v ? ts__f32_from_bits(TS__CANON_NAN_BITS) : v; }

/* |x| bits of one source element, widened to f32 bits. */
static inline uint32_t ts__absbits_bf16(uint16_t h) { return (uint32_t)(h & 0x7FFFu) << 16; }
static inline uint32_t ts__absbits_f32(uint32_t u) { return u & 0x7FFFFFFFu; }

/* ---- framework helpers shared by quant_*.c (quant_common.c) ---- */

/* x: valid 2-D view with a contiguous last dim, dtype bf16 / f16 / f32; sets *src. */
ts_status ts__quant_check_input(const ts_tensor *x, const char *name, ts__qsrc *src);
/* t: valid view of `dtype` (or `alt`, when alt != dtype) with exactly `ndim` dims of `shape`,
 * data aligned to its element size; last dim contiguous if `last_contig`. */
ts_status ts__quant_check_out(const ts_tensor *t, const char *name, ts_dtype dtype, ts_dtype alt,
                              int32_t ndim, const int64_t *shape, bool last_contig);
/* The per-token scale output [m, nb]: f32, or ue8m0x4 / i32 [m, ceil(nb/4)] when packed. */
ts_status ts__quant_check_token_sf(const ts_tensor *sf, int64_t m, int64_t nb, bool packed);
/* TS_ERR_ALIASING if the byte spans of a and b overlap. */
ts_status ts__quant_check_disjoint(const ts_tensor *a, const char *an, const ts_tensor *b,
                                   const char *bn);
/* ceil(a / b) for a >= 0, b > 0 without overflow. */
static inline int64_t ts__cdiv_safe(int64_t a, int64_t b) { return a == 0 ? 0 : (a - 1) / b + 1; }
static inline size_t ts__qsrc_size(ts__qsrc s) { return s == TS__QSRC_F32 ? 4 : 2; }

/* Argument checks of the public quantisers (quant_args.c), one per operation, shared by the
 * hand-written implementations and the tile kernels' dispatch (quant_tile.c). */
ts_status ts__quant_args_token_fp8(const ts_tensor *x, bool use_ue8m0, int64_t gran_k, bool use_packed_ue8m0,
                                   const ts_tensor *x_fp8, const ts_tensor *sf, ts__qsrc *src);
ts_status ts__quant_args_block_fp8(const ts_tensor *x, int64_t gran_k, const ts_tensor *x_fp8, const ts_tensor *sf,
                                   ts__qsrc *src);
ts_status ts__quant_args_channel_fp8(const ts_tensor *x, int64_t gran_k, const ts_tensor *x_fp8,
                                     const ts_tensor *sf, ts__qsrc *src);
ts_status ts__quant_args_token_fp4(const ts_tensor *x, bool use_ue8m0, int64_t gran_k, bool use_packed_ue8m0,
                                   ts_fp4_rounding rounding, const ts_tensor *x_fp4, const ts_tensor *sf,
                                   ts__qsrc *src);
/* *packed: sf holds packed ue8m0 words (i32 / ue8m0x4) rather than f32 */
ts_status ts__quant_args_cast_back(const ts_tensor *x, const char *xname, bool fp4, const ts_tensor *sf,
                                   int64_t gmn, int64_t gk, const ts_tensor *out, bool *packed);

#endif
