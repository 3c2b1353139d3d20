/* The fused path's expert GEMM (src/ep/mega_moe_gemm.c: driver and generic kernel; kernels/avx2/mega_moe_gemm_avx2.c): FP8 rows
 * times one expert of an FP4 packed weight (ts_gemm_prepack_b layout, gran_k 32), decode
 * sizes. Bits of ts_m_grouped_fp8_fp4_gemm_contiguous_packed (docs/gemm.md canonical order);
 * docs/mega_moe.md "Expert GEMM" has the exactness argument of the AVX2 integer kernel. */
#ifndef TILESTACK_MEGA_MOE_GEMM_H
#define TILESTACK_MEGA_MOE_GEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tilestack/gemm.h"

enum { TS__MMG_W = 32, TS__MMG_G = 32, TS__MMG_MAX_M = 16 };

/* One 32-column panel of one expert, rows 0 .. m-1 (m <= TS__MMG_MAX_M). Per (row i, K block s
 * of 32): af[i*K + k] the row's decoded e4m3 values, sa[i*nkb + s] its scale, and for the
 * integer kernel ok[i*nkb + s] (the block's integer sum is exact, see mega_moe_gemm.c),
 * apair[i*(K/2) + k/2] = (A[k] | A[k+1] << 16) with a[k] = A[k] * 2^xmin and
 * pscale[i*nkb + s] = 2^(xmin - 9). acc [m][32] f32, zeroed by the caller. */
typedef struct ts__mmg_args {
    const uint8_t *panel;
    int64_t nkb, block_bytes;
    bool sf_u8, sf_normal;
    int64_t m, K;
    const float *af, *sa, *pscale;
    const int32_t *apair;
    const uint8_t *ok;
    float *acc;
} ts__mmg_args;

void ts__mmg_panel__generic(const ts__mmg_args *x);
#ifdef TS_HAVE_AVX2_KERNELS
void ts__mmg_panel__avx2(const ts__mmg_args *x);
#endif

/* The canonical p of row i, block s, columns 0..31 of the panel (scalar fmaf chain), for the
 * blocks whose integer sum is not exact. */
void ts__mmg_block_p(const ts__mmg_args *x, int64_t i, int64_t s, float p[TS__MMG_W]);

/* Whether the kernel takes this weight (e2m1, gran_k 32, K % 128 == 0, N % 32 == 0) and m. */
bool ts__mega_moe_gemm_fits(const ts_packed_weight *pw, int64_t m);
/* The weight's N (columns per expert). */
int64_t ts__mega_moe_gemm_n(const ts_packed_weight *pw);
/* Scratch bytes of one call. */
size_t ts__mega_moe_gemm_scratch(int64_t m, int64_t K);
/* d[i][n] (bf16, row stride ldd) = row i of a (e4m3 [m, K]) with its packed ue8m0 scales sfa
 * (i32 [m, K/128]) times expert e of pw: the bits of the grouped GEMM on that row. Panels
 * are spread over the pool (inline inside a pool task). */
void ts__mega_moe_gemm(const ts_packed_weight *pw, int64_t e, const uint8_t *a, const int32_t *sfa, int64_t m,
                       uint16_t *d, int64_t ldd, void *scratch, bool generic);
/* The fused path's choice (mega_moe.c): 0 = default (this kernel for 1-2 rows), 1 = always the
 * grouped GEMM, 2 = this kernel wherever it fits; < 0 = back to env TS_MEGA_MOE_GEMM. Tests. */
void ts__mega_moe_set_gemm_mode(int mode);

#endif
