/* AVX2/FMA 6x16 f32 micro-kernels (the BLIS haswell/zen shape): 12 ymm accumulators, two ymm
 * for a 16-wide B row, one broadcast of A. Lanes run across N only, so each lane performs
 * exactly the scalar fmaf chain of the generic kernel: the bits match. */
#include "gemm/gemm_kernels.h"

#include <stddef.h>

#include <immintrin.h>

enum { MR = TS__GEMM_MR, NR = TS__GEMM_NR };

#define TS__ROW_FMA(i)                                   \
    do {                                                 \
        __m256 ai = _mm256_broadcast_ss(a + (i));        \
        p##i##0 = _mm256_fmadd_ps(ai, b0, p##i##0);      \
        p##i##1 = _mm256_fmadd_ps(ai, b1, p##i##1);      \
    } while (0)

#define TS__ROWS_FMA() \
    TS__ROW_FMA(0); TS__ROW_FMA(1); TS__ROW_FMA(2); TS__ROW_FMA(3); TS__ROW_FMA(4); TS__ROW_FMA(5)

/* acc row i += p * (sa[i] * sb): the scale product is rounded to f32 first, as the
 * canonical order says. */
#define TS__ROW_PROMOTE(i)                                                          \
    do {                                                                            \
        __m256 si = _mm256_broadcast_ss(sai + (i));                                 \
        float *ci = acc + (i) * NR;                                                 \
        _mm256_store_ps(ci, _mm256_fmadd_ps(p##i##0, _mm256_mul_ps(si, sb0),        \
                                            _mm256_load_ps(ci)));                   \
        _mm256_store_ps(ci + 8, _mm256_fmadd_ps(p##i##1, _mm256_mul_ps(si, sb1),    \
                                                _mm256_load_ps(ci + 8)));           \
    } while (0)

/* The first K value of a block is a multiply, not an fma into zeros: a·b is exact, so it
 * equals fmaf(a, b, +0) except for the sign of a zero product, which never reaches D (p only
 * meets +0-started sums: acc = fmaf(p, s, acc) with acc never -0). It starts the 12 chains
 * without zero idioms and one step shorter (measured: g = 32 blocks 88 -> 94% of peak). */
#define TS__ROW_MUL(i)                                   \
    do {                                                 \
        __m256 ai = _mm256_broadcast_ss(a + (i));        \
        p##i##0 = _mm256_mul_ps(ai, b0);                 \
        p##i##1 = _mm256_mul_ps(ai, b1);                 \
    } while (0)

static void ts__gemm_f32_6x16_scaled__avx2(int64_t kc, int64_t g, const float *ap,
                                           const float *bp, const float *sa, const float *sb,
                                           float *acc) {
    ts__gemm_prefetch_next_tile(acc);
    for (int64_t k0 = 0, blk = 0; k0 < kc; k0 += g, blk++) {
        const int64_t len = kc - k0 < g ? kc - k0 : g;
        const float *a = ap + k0 * MR, *b = bp + k0 * NR;
        __m256 p00, p01, p10, p11, p20, p21, p30, p31, p40, p41, p50, p51;
        {
            __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
            TS__ROW_MUL(0); TS__ROW_MUL(1); TS__ROW_MUL(2);
            TS__ROW_MUL(3); TS__ROW_MUL(4); TS__ROW_MUL(5);
            a += MR, b += NR;
        }
#pragma GCC unroll 4
        for (int64_t k = 1; k < len; k++, a += MR, b += NR) {
            __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
            TS__ROWS_FMA();
        }
        const float *sai = sa + blk * MR;
        __m256 sb0 = _mm256_loadu_ps(sb + blk * NR), sb1 = _mm256_loadu_ps(sb + blk * NR + 8);
        /* Hide the tile's address from gcc, which otherwise keeps the whole tile in stack
         * copies across blocks (store motion): twice the stores and a slower block switch
         * (g = 32: 82 -> 88% of peak). */
        float *t = acc;
        __asm__("" : "+r"(t));
        {
            float *acc = t; /* TS__ROW_PROMOTE writes through `acc` */
            TS__ROW_PROMOTE(0); TS__ROW_PROMOTE(1); TS__ROW_PROMOTE(2);
            TS__ROW_PROMOTE(3); TS__ROW_PROMOTE(4); TS__ROW_PROMOTE(5);
        }
    }
}

static void ts__gemm_f32_6x16_plain__avx2(int64_t kc, const float *ap, const float *bp,
                                          float *acc) {
    ts__gemm_prefetch_next_tile(acc);
    __m256 p00 = _mm256_load_ps(acc + 0 * NR), p01 = _mm256_load_ps(acc + 0 * NR + 8);
    __m256 p10 = _mm256_load_ps(acc + 1 * NR), p11 = _mm256_load_ps(acc + 1 * NR + 8);
    __m256 p20 = _mm256_load_ps(acc + 2 * NR), p21 = _mm256_load_ps(acc + 2 * NR + 8);
    __m256 p30 = _mm256_load_ps(acc + 3 * NR), p31 = _mm256_load_ps(acc + 3 * NR + 8);
    __m256 p40 = _mm256_load_ps(acc + 4 * NR), p41 = _mm256_load_ps(acc + 4 * NR + 8);
    __m256 p50 = _mm256_load_ps(acc + 5 * NR), p51 = _mm256_load_ps(acc + 5 * NR + 8);
    const float *a = ap, *b = bp;
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; k++, a += MR, b += NR) {
        __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
        TS__ROWS_FMA();
    }
    _mm256_store_ps(acc + 0 * NR, p00); _mm256_store_ps(acc + 0 * NR + 8, p01);
    _mm256_store_ps(acc + 1 * NR, p10); _mm256_store_ps(acc + 1 * NR + 8, p11);
    _mm256_store_ps(acc + 2 * NR, p20); _mm256_store_ps(acc + 2 * NR + 8, p21);
    _mm256_store_ps(acc + 3 * NR, p30); _mm256_store_ps(acc + 3 * NR + 8, p31);
    _mm256_store_ps(acc + 4 * NR, p40); _mm256_store_ps(acc + 4 * NR + 8, p41);
    _mm256_store_ps(acc + 5 * NR, p50); _mm256_store_ps(acc + 5 * NR + 8, p51);
}


const ts__gemm_kernels ts__gemm_kernels_avx2 = {
    "avx2",
    ts__gemm_f32_6x16_scaled__avx2,
    ts__gemm_f32_6x16_plain__avx2,
    ts__gemm_decode_32__avx2,
    NULL, /* no multi-tile kernels: a ymm is half a tile row */
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    0, /* the driver's KC */
};
