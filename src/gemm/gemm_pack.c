/* Packing: operands (e4m3, packed e2m1, bf16; either major) converted to f32 micro-panels.
 * Decoding is exact, so any packing path gives the same panels. */
#include "gemm/gemm_internal.h"
#include "gemm/gemm_kernels.h"
#include "tilestack/numerics.h"

#include <string.h>

static inline float bf16_bits_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

void ts__gemm_pack_panel(const ts__gemm_operand *op, int64_t r0, int64_t rows, int64_t k0,
                         int64_t kc, int w, float *dst) {
    if (op->pw) {
        ts__gemm_pw_pack_panel(op, r0, rows, k0, kc, w, dst);
        return;
    }
#if defined(TS_HAVE_AVX2_KERNELS)
    if (rows == w && op->k_major) {
        ts_isa isa = ts__active_isa();
#if defined(TS_HAVE_AVX512_KERNELS)
        if (isa == TS_ISA_AVX512 && ts__gemm_pack_kmajor__avx512(op, r0, k0, kc, w, dst)) return;
#endif
        if (ts__isa_avx2_up(isa) &&
            ts__gemm_pack_kmajor__avx2(op, r0, k0, kc, w, dst))
            return;
    }
#endif
    ts__gemm_lut_init();
    for (int64_t i = rows; i < w; i++)
        for (int64_t k = 0; k < kc; k++) dst[k * w + i] = 0.0f;
    const int64_t smn = op->s_mn, sk = op->s_k;
    switch (op->dtype) {
    case TS_E4M3: {
        const uint8_t *p = (const uint8_t *)op->data;
        if (op->k_major) {
            for (int64_t i = 0; i < rows; i++) {
                const uint8_t *row = p + (r0 + i) * smn + k0 * sk;
                if (sk == 1) /* the usual weight layout: let the compiler see unit stride */
                    for (int64_t k = 0; k < kc; k++) dst[k * w + i] = ts__gemm_lut.e4m3[row[k]];
                else
                    for (int64_t k = 0; k < kc; k++) dst[k * w + i] = ts__gemm_lut.e4m3[row[k * sk]];
            }
        } else {
            for (int64_t k = 0; k < kc; k++) {
                const uint8_t *col = p + r0 * smn + (k0 + k) * sk;
                for (int64_t i = 0; i < rows; i++) dst[k * w + i] = ts__gemm_lut.e4m3[col[i * smn]];
            }
        }
        break;
    }
    case TS_BF16: {
        const uint16_t *p = (const uint16_t *)op->data;
        if (op->k_major) {
            for (int64_t i = 0; i < rows; i++) {
                const uint16_t *row = p + (r0 + i) * smn + k0 * sk;
                if (sk == 1)
                    for (int64_t k = 0; k < kc; k++) dst[k * w + i] = bf16_bits_to_f32(row[k]);
                else
                    for (int64_t k = 0; k < kc; k++) dst[k * w + i] = bf16_bits_to_f32(row[k * sk]);
            }
        } else {
            for (int64_t k = 0; k < kc; k++) {
                const uint16_t *col = p + r0 * smn + (k0 + k) * sk;
                for (int64_t i = 0; i < rows; i++) dst[k * w + i] = bf16_bits_to_f32(col[i * smn]);
            }
        }
        break;
    }
    case TS_E2M1X2: {
        const uint8_t *p = (const uint8_t *)op->data;
        if (op->k_major) {
            for (int64_t i = 0; i < rows; i++) {
                const uint8_t *row = p + (r0 + i) * smn;
                for (int64_t k = 0; k < kc; k++) {
                    int64_t kk = k0 + k;
                    dst[k * w + i] = ts__gemm_lut.e2m1[(row[(kk >> 1) * sk] >> ((kk & 1) * 4)) & 0xF];
                }
            }
        } else {
            for (int64_t k = 0; k < kc; k++) {
                const uint8_t *col = p + (k0 + k) * sk;
                for (int64_t i = 0; i < rows; i++) {
                    int64_t r = r0 + i;
                    dst[k * w + i] = ts__gemm_lut.e2m1[(col[(r >> 1) * smn] >> ((r & 1) * 4)) & 0xF];
                }
            }
        }
        break;
    }
    default: TS__ASSERT(0 && "gemm pack: unexpected dtype");
    }
}

void ts__gemm_pack_scales(const ts__gemm_operand *op, int64_t r0, int64_t rows, int64_t kb0,
                          int64_t nkb, int64_t g, int w, float *dst) {
    if (op->pw) {
        ts__gemm_pw_pack_scales(op, r0, rows, kb0, nkb, g, w, dst);
        return;
    }
    ts__gemm_lut_init();
    /* Row offsets once per call and one division per block (not two per element): with
     * 32-value blocks this runs once per 32 packed values, and the per-element divisions
     * cost about as much as packing the values. */
    enum { W_MAX = 64 };
    TS__ASSERT(w <= W_MAX);
    int64_t roff[W_MAX];
    for (int64_t i = 0; i < rows; i++) roff[i] = ((r0 + i) / op->gran_mn) * op->sf_s_mn;
    for (int64_t b = 0; b < nkb; b++) {
        const int64_t kidx = ((kb0 + b) * g) / op->gran_k;
        float *d = dst + b * w;
        if (op->sf_packed) {
            const int32_t *sf = (const int32_t *)op->sf + (kidx >> 2) * op->sf_s_k;
            const int sh = (int)(kidx & 3) * 8;
            for (int64_t i = 0; i < rows; i++)
                d[i] = ts__gemm_lut.ue8m0[((uint32_t)sf[roff[i]] >> sh) & 0xFF];
        } else {
            const float *sf = (const float *)op->sf + kidx * op->sf_s_k;
            for (int64_t i = 0; i < rows; i++) d[i] = sf[roff[i]];
        }
        for (int64_t i = rows; i < w; i++) d[i] = 0.0f;
    }
}

/* The f32 panel's values are e4m3 / e2m1 values, exact in bf16: the top half of each f32
 * is its bf16, so truncation loses nothing (NaN 0x7FC00000 becomes 0x7FC0). */
void ts__gemm_pack_panel_pairs(const ts__gemm_operand *op, int64_t r0, int64_t rows, int64_t k0,
                               int64_t kc, int w, float *tmp, uint32_t *dst) {
#if defined(TS_HAVE_AVX512_KERNELS)
    if (rows == w && op->k_major && ts__active_isa() == TS_ISA_AVX512 &&
        ts__gemm_pack_kmajor_pairs__avx512(op, r0, k0, kc, w, dst))
        return;
#endif
    ts__gemm_pack_panel(op, r0, rows, k0, kc, w, tmp);
    for (int64_t q = 0; q < (kc + 1) / 2; q++) {
        const float *e = tmp + 2 * q * w, *o = e + w;
        const bool odd = 2 * q + 1 < kc;
        for (int i = 0; i < w; i++) {
            uint32_t hi, lo = 0;
            memcpy(&hi, &e[i], 4);
            if (odd) memcpy(&lo, &o[i], 4);
            dst[q * w + i] = (hi & 0xFFFF0000u) | (lo >> 16);
        }
    }
}
