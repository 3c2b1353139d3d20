/* Portable quantiser kernels: the reference every SIMD table must match bit for bit. */
#include "numerics/quant_kernels.h"

typedef uint16_t ts__qsrc_elem_bf16;
typedef uint16_t ts__qsrc_elem_f16;
typedef float ts__qsrc_elem_f32;

static inline float ld_bf16(const void *x, int64_t j) { return ts_bf16_to_f32(((const uint16_t *)x)[j]); }
static inline float ld_f16(const void *x, int64_t j) { return ts_f16_to_f32(((const uint16_t *)x)[j]); }
static inline float ld_f32(const void *x, int64_t j) { return ((const float *)x)[j]; }

static inline uint32_t ab_bf16(const void *x, int64_t j) { return ts__absbits_bf16(((const uint16_t *)x)[j]); }
static inline uint32_t ab_f16(const void *x, int64_t j) {
    return ts__bits_from_f32(ts_f16_to_f32(((const uint16_t *)x)[j] & 0x7FFFu));
}
static inline uint32_t ab_f32(const void *x, int64_t j) { return ts__absbits_f32(((const uint32_t *)x)[j]); }

static inline void st_bf16(void *o, int64_t j, float v) { ((uint16_t *)o)[j] = ts_f32_to_bf16(v); }
static inline void st_f16(void *o, int64_t j, float v) { ((uint16_t *)o)[j] = ts_f32_to_f16(v); }
static inline void st_f32(void *o, int64_t j, float v) { ((float *)o)[j] = v; }

#define TS__DEF_GENERIC(SFX)                                                                     \
    uint32_t ts__qk_absmax_##SFX##__generic(const void *x, int64_t n) {                                     \
        uint32_t m = 0;                                                                          \
        for (int64_t j = 0; j < n; j++) {                                                        \
            uint32_t a = ab_##SFX(x, j);                                                         \
            m = a > m ? a : m;                                                                   \
        }                                                                                        \
        return m;                                                                                \
    }                                                                                            \
    void ts__qk_absmax_cols_##SFX##__generic(const void *x, int64_t n, uint32_t *acc) {                     \
        for (int64_t j = 0; j < n; j++) {                                                        \
            uint32_t a = ab_##SFX(x, j);                                                         \
            acc[j] = a > acc[j] ? a : acc[j];                                                    \
        }                                                                                        \
    }                                                                                            \
    void ts__qk_enc_e4m3_##SFX##__generic(const void *x, int64_t n, float inv, uint8_t *q) {                \
        for (int64_t j = 0; j < n; j++) q[j] = ts__enc_e4m3_scaled(ld_##SFX(x, j) * inv);        \
    }                                                                                            \
    void ts__qk_enc_e4m3_cols_##SFX##__generic(const void *x, int64_t n, const float *inv, uint8_t *q) {    \
        for (int64_t j = 0; j < n; j++) q[j] = ts__enc_e4m3_scaled(ld_##SFX(x, j) * inv[j]);     \
    }                                                                                            \
    void ts__qk_fp8_row_##SFX##__generic(const void *x, int64_t n, int64_t gran_k, bool ue8m0,   \
                                         uint8_t *q, float *sf) {                                \
        const size_t esz = sizeof(*(ts__qsrc_elem_##SFX *)0);                                    \
        for (int64_t b = 0, j0 = 0; j0 < n; b++, j0 += gran_k) {                                 \
            const void *xb = (const char *)x + (size_t)j0 * esz;                                 \
            int64_t len = n - j0 < gran_k ? n - j0 : gran_k;                                     \
            float s = ts__fp8_scale(ts__qk_absmax_##SFX##__generic(xb, len), ue8m0);             \
            ts__qk_enc_e4m3_##SFX##__generic(xb, len, 1.0f / s, q + j0);                         \
            sf[b] = s;                                                                           \
        }                                                                                        \
    }                                                                                            \
    void ts__qk_blk_stats_##SFX##__generic(const void *x, int64_t n, int64_t g, uint32_t *amax,  \
                                           uint32_t *amin) {                                     \
        const size_t esz = sizeof(*(ts__qsrc_elem_##SFX *)0);                                    \
        for (int64_t b = 0, j0 = 0; j0 < n; b++, j0 += g) {                                      \
            uint32_t a = ts__qk_absmax_##SFX##__generic((const char *)x + (size_t)j0 * esz,      \
                                                        n - j0 < g ? n - j0 : g);                \
            amax[b] = a > amax[b] ? a : amax[b];                                                 \
            amin[b] = 0;                                                                         \
        }                                                                                        \
    }                                                                                            \
    void ts__qk_blk_enc_##SFX##__generic(const void *x, int64_t n, int64_t g,                    \
                                         const uint32_t *amax, const uint32_t *amin,             \
                                         const float *inv, uint8_t *q) {                         \
        (void)amax, (void)amin;                                                                  \
        const size_t esz = sizeof(*(ts__qsrc_elem_##SFX *)0);                                    \
        for (int64_t b = 0, j0 = 0; j0 < n; b++, j0 += g)                                        \
            ts__qk_enc_e4m3_##SFX##__generic((const char *)x + (size_t)j0 * esz,                 \
                                             n - j0 < g ? n - j0 : g, inv[b], q + j0);           \
    }                                                                                            \
    uint32_t ts__qk_absmax_nonan_##SFX##__generic(const void *x, int64_t n) {                    \
        uint32_t m = 0;                                                                          \
        for (int64_t j = 0; j < n; j++) {                                                        \
            uint32_t a = ab_##SFX(x, j);                                                         \
            if (a <= 0x7F800000u && a > m) m = a;                                                \
        }                                                                                        \
        return m;                                                                                \
    }                                                                                            \
    void ts__qk_enc_e2m1_##SFX##__generic(const void *x, int64_t n, float inv, bool dg,          \
                                          uint8_t *q) {                                          \
        for (int64_t j = 0; j + 1 < n; j += 2) {                                                 \
            float y0 = ld_##SFX(x, j) * inv, y1 = ld_##SFX(x, j + 1) * inv;                      \
            uint8_t c0 = dg ? ts_f32_to_e2m1_dg(y0) : ts_f32_to_e2m1(y0);                        \
            uint8_t c1 = dg ? ts_f32_to_e2m1_dg(y1) : ts_f32_to_e2m1(y1);                        \
            q[j >> 1] = (uint8_t)((c0 & 0xFu) | ((c1 & 0xFu) << 4));                             \
        }                                                                                        \
    }                                                                                            \
    void ts__qk_fp4_row_##SFX##__generic(const void *x, int64_t n, int64_t gran_k, bool ue8m0,   \
                                         bool rne, uint8_t *q, float *sf, uint8_t *e) {          \
        const size_t esz = sizeof(*(ts__qsrc_elem_##SFX *)0);                                    \
        for (int64_t b = 0, j0 = 0; j0 < n; b++, j0 += gran_k) {                                 \
            const void *xb = (const char *)x + (size_t)j0 * esz;                                 \
            int64_t len = n - j0 < gran_k ? n - j0 : gran_k;                                     \
            uint32_t a = rne ? ts__qk_absmax_nonan_##SFX##__generic(xb, len)                     \
                             : ts__qk_absmax_##SFX##__generic(xb, len);                          \
            ts__fp4_scale_t s = ts__fp4_scale(a, ue8m0, rne);                                    \
            ts__qk_enc_e2m1_##SFX##__generic(xb, len, s.inv, !rne, q + j0 / 2);                  \
            sf[b] = s.sf;                                                                        \
            e[b] = s.e;                                                                          \
        }                                                                                        \
    }                                                                                            \
    void ts__qk_dec_e4m3_##SFX##__generic(const uint8_t *q, int64_t n, int64_t gk,             \
                                          const float *s, void *out) {                           \
        for (int64_t j = 0; j < n; j++)                                                          \
            st_##SFX(out, j, ts__canon_nan(ts_e4m3_to_f32(q[j]) * s[j / gk]));                   \
    }                                                                                            \
    void ts__qk_dec_e2m1_##SFX##__generic(const uint8_t *q, int64_t n, int64_t gk,             \
                                          const float *s, void *out) {                           \
        for (int64_t j = 0; j < n; j++) {                                                        \
            uint8_t c = (uint8_t)((q[j >> 1] >> (4 * (j & 1))) & 0xFu);                          \
            st_##SFX(out, j, ts__canon_nan(ts__dec_e2m1_up(c) * s[j / gk]));                     \
        }                                                                                        \
    }

TS__DEF_GENERIC(bf16)
TS__DEF_GENERIC(f16)
TS__DEF_GENERIC(f32)

#define TS__ENTRY(SFX)                                                                           \
    {ts__qk_absmax_##SFX##__generic, ts__qk_absmax_cols_##SFX##__generic,                       \
     ts__qk_enc_e4m3_##SFX##__generic, ts__qk_enc_e4m3_cols_##SFX##__generic,                   \
     ts__qk_fp8_row_##SFX##__generic, ts__qk_blk_stats_##SFX##__generic,                        \
     ts__qk_blk_enc_##SFX##__generic, ts__qk_absmax_nonan_##SFX##__generic,                     \
     ts__qk_enc_e2m1_##SFX##__generic, ts__qk_fp4_row_##SFX##__generic,                         \
     ts__qk_dec_e4m3_##SFX##__generic, ts__qk_dec_e2m1_##SFX##__generic}

const ts__quant_kernels ts__quant_kernels_generic[TS__QSRC_COUNT] = {
    [TS__QSRC_BF16] = TS__ENTRY(bf16),
    [TS__QSRC_F16] = TS__ENTRY(f16),
    [TS__QSRC_F32] = TS__ENTRY(f32),
};
