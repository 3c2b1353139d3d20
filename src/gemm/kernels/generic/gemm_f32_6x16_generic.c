/* Portable reference micro-kernels: the canonical order written out in scalar C. */
#include "gemm/gemm_kernels.h"

#include <stddef.h>

#include <math.h>

enum { MR = TS__GEMM_MR, NR = TS__GEMM_NR };

static void ts__gemm_f32_6x16_scaled__generic(int64_t kc, int64_t g, const float *ap,
                                              const float *bp, const float *sa, const float *sb,
                                              float *acc) {
    for (int64_t k0 = 0, blk = 0; k0 < kc; k0 += g, blk++) {
        int64_t len = kc - k0 < g ? kc - k0 : g;
        float p[MR][NR];
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < NR; j++) p[i][j] = 0.0f;
        const float *a = ap + k0 * MR, *b = bp + k0 * NR;
        for (int64_t k = 0; k < len; k++, a += MR, b += NR)
            for (int i = 0; i < MR; i++)
                for (int j = 0; j < NR; j++) p[i][j] = fmaf(a[i], b[j], p[i][j]);
        const float *sai = sa + blk * MR, *sbj = sb + blk * NR;
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < NR; j++) {
                float s = sai[i] * sbj[j];
                acc[i * NR + j] = fmaf(p[i][j], s, acc[i * NR + j]);
            }
    }
}

static void ts__gemm_f32_6x16_plain__generic(int64_t kc, const float *ap, const float *bp,
                                             float *acc) {
    for (int64_t k = 0; k < kc; k++, ap += MR, bp += NR)
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < NR; j++) acc[i * NR + j] = fmaf(ap[i], bp[j], acc[i * NR + j]);
}

void ts__gemm_decode_32__generic(const ts__gemm_dec_args *x);

const ts__gemm_kernels ts__gemm_kernels_generic = {
    "generic",
    ts__gemm_f32_6x16_scaled__generic,
    ts__gemm_f32_6x16_plain__generic,
    ts__gemm_decode_32__generic,
    NULL, /* no multi-tile kernels: a ymm is half a tile row */
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    0, /* the driver's KC */
};
