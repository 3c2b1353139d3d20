/* vdpbf16ps (AVX512_BF16) micro-kernels for the block-scaled GEMMs (e4m3 / e2m1 operands).
 *
 * Why the bits equal the canonical f32 chain (docs/gemm.md, "AVX512_BF16"): e4m3 and e2m1
 * values are exact bf16 values, so each product is exact in f32; per f32 lane vdpbf16ps adds
 * the high pair's product, rounds (RNE), adds the low pair's product, rounds again, which is
 * fmaf(a_lo, b_lo, fmaf(a_hi, b_hi, p)). The panels hold K value 2q in the high half and
 * 2q + 1 in the low half of dword q, so one instruction is two canonical steps in K order.
 * Its DAZ / FTZ never act here: every nonzero input is >= 2^-9 and every nonzero partial sum
 * of a block a multiple of 2^-18. Measured on Zen 4, not assumed (bench/diag/dpbf16_check.c,
 * test gemm_dpbf16_instruction_model). The block promotion acc = fmaf(p, sa * sb, acc) is the
 * f32 FMA of the other kernels, per block, in block order.
 *
 * Tiles as the f32 avx512 kernels (gemm_f32_tiles_avx512.c): one 6-row tile by 1, 2 or 4
 * adjacent 16-column tiles, a zmm per tile row; 6 x 64 is the main one (24 block sums, 4 B
 * loads + 6 broadcasts per 24 vdpbf16ps, i.e. per 48 K values x 6 rows x 16 columns). The
 * block sums start at +0 (fmaf(a, b, +0) = a b but for a -0, which never reaches D). */
#include "gemm/gemm_kernels.h"

#include <immintrin.h>

enum { MR = TS__GEMM_MR, NR = TS__GEMM_NR };

/* nt column tiles; inlined with a constant nt so the sums live in registers. */
static inline __attribute__((always_inline)) void dp_tiles(int64_t kc, int64_t g,
                                                           const ts__gemm_dp_tiles *t,
                                                           const int nt) {
    for (int q = 0; q < nt; q++) ts__gemm_prefetch_next_tile(t->c[q]);
    for (int64_t k0 = 0, blk = 0; k0 < kc; k0 += g, blk++) {
        /* k0 is even (g is 32 or 128): a block starts on a pair; an odd last block ends on
         * a pair whose low half is the packer's 0 */
        const int64_t npair = ((kc - k0 < g ? kc - k0 : g) + 1) / 2;
        const uint32_t *a = t->a + (k0 / 2) * MR;
        const uint32_t *x[4];
        __m512 p[MR][4];
#pragma GCC unroll 4
        for (int q = 0; q < nt; q++) x[q] = t->b[q] + (k0 / 2) * NR;
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
            for (int q = 0; q < nt; q++) p[i][q] = _mm512_setzero_ps();
#pragma GCC unroll 2
        for (int64_t s = 0; s < npair; s++, a += MR) {
            __m512bh b[4];
#pragma GCC unroll 4
            for (int q = 0; q < nt; q++) b[q] = (__m512bh)_mm512_load_si512((const void *)(x[q] + s * NR));
#pragma GCC unroll 6
            for (int i = 0; i < MR; i++) {
                const __m512bh ai = (__m512bh)_mm512_set1_epi32((int)a[i]);
#pragma GCC unroll 4
                for (int q = 0; q < nt; q++) p[i][q] = _mm512_dpbf16_ps(p[i][q], ai, b[q]);
            }
        }
        /* acc row i += p * (sa[i] * sb): the scale product rounded to f32 first. The tiles'
         * addresses are hidden from gcc, which otherwise keeps them in stack copies across
         * blocks (as in the f32 kernels). */
        const float *sai = t->sa + blk * MR;
        float *c[4];
#pragma GCC unroll 4
        for (int q = 0; q < nt; q++) {
            c[q] = t->c[q];
            __asm__("" : "+r"(c[q]));
        }
        __m512 sb[4];
#pragma GCC unroll 4
        for (int q = 0; q < nt; q++) sb[q] = _mm512_loadu_ps(t->sb[q] + blk * NR);
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++) {
            const __m512 si = _mm512_set1_ps(sai[i]);
#pragma GCC unroll 4
            for (int q = 0; q < nt; q++)
                _mm512_store_ps(c[q] + i * NR,
                                _mm512_fmadd_ps(p[i][q], _mm512_mul_ps(si, sb[q]),
                                                _mm512_load_ps(c[q] + i * NR)));
        }
    }
}

static void dp_6x16(int64_t kc, int64_t g, const ts__gemm_dp_tiles *t) { dp_tiles(kc, g, t, 1); }
static void dp_6x32(int64_t kc, int64_t g, const ts__gemm_dp_tiles *t) { dp_tiles(kc, g, t, 2); }
static void dp_6x64(int64_t kc, int64_t g, const ts__gemm_dp_tiles *t) { dp_tiles(kc, g, t, 4); }

void ts__gemm_dpbf16_probe(const uint16_t a[32], const uint16_t b[32], float acc[16]) {
    const __m512 r = _mm512_dpbf16_ps(_mm512_loadu_ps(acc), (__m512bh)_mm512_loadu_si512((const void *)a),
                                      (__m512bh)_mm512_loadu_si512((const void *)b));
    _mm512_storeu_ps(acc, r);
}

/* kc 256: the A block holds as many rows as the f32 kernels' 128 (half the bytes per value),
 * and the four B micro-panels are 32 KiB, as theirs. */
const ts__gemm_dp_kernels ts__gemm_dp_kernels_avx512bf16 = {"avx512bf16", dp_6x16, dp_6x32,
                                                             dp_6x64, 256};
