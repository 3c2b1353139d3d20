/* GEMM micro-kernels, one table per ISA (internal).
 *
 * Panels are f32, converted from the operands while packing (gemm_pack.c):
 *   A micro-panel: ap[k * MR + i], rows i < MR (rows past M are zero);
 *   B micro-panel: bp[k * NR + j], cols j < NR (cols past N are zero);
 *   acc: one MR x NR tile, row-major with ld NR, 64-byte aligned, f32.
 * Every kernel follows the canonical order of docs/gemm.md and vectorises across rows and
 * columns only, never along K, so all ISA versions give the same bits. */
#ifndef TS_GEMM_KERNELS_H
#define TS_GEMM_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#define TS__GEMM_MR 6
#define TS__GEMM_NR 16

/* Block-scaled: for each K block of g values (the last one may be shorter) of the kc values:
 * p = 0; p = fmaf(a_k, b_k, p) over the block; acc = fmaf(p, sa[blk][i] * sb[blk][j], acc).
 * sa is [ceil(kc/g)][MR], sb [ceil(kc/g)][NR]. */
typedef void (*ts__gemm_ukr_scaled_fn)(int64_t kc, int64_t g, const float *ap, const float *bp,
                                       const float *sa, const float *sb, float *acc);
/* Plain: acc = fmaf(a_k, b_k, acc) for k ascending over kc values. */
typedef void (*ts__gemm_ukr_plain_fn)(int64_t kc, const float *ap, const float *bp, float *acc);

typedef struct ts__gemm_kernels {
    const char *name;
    ts__gemm_ukr_scaled_fn scaled; /* MR x NR */
    ts__gemm_ukr_plain_fn plain;   /* MR x NR */
} ts__gemm_kernels;

extern const ts__gemm_kernels ts__gemm_kernels_generic;
#if defined(TS_HAVE_AVX2_KERNELS)
extern const ts__gemm_kernels ts__gemm_kernels_avx2;
#endif

#if defined(TS_HAVE_AVX2_KERNELS)
struct ts__gemm_operand;
/* ts__gemm_pack_panel for a full panel (rows == w) of a K-major operand with unit K stride
 * and w in {MR, NR}: same floats, decoded and transposed with AVX2. Returns false (nothing
 * written) for any other case. */
bool ts__gemm_pack_kmajor__avx2(const struct ts__gemm_operand *op, int64_t r0, int64_t k0,
                                int64_t kc, int w, float *dst);
#endif

/* The table for the ISA in use (read once per call by the driver). */
const ts__gemm_kernels *ts__gemm_select_kernels(void);

#endif
