/* AVX-512 f32 micro-kernels. The driver's tiles stay 6 x 16 (TS__GEMM_MR x TS__GEMM_NR) and so
 * do its packed panels; a zmm holds one 16-column row of a tile, so the kernels take several
 * adjacent tiles at once, reading their B micro-panels side by side and one broadcast of A for
 * all: 1 x 4 tiles (6 x 64, the main one: 24 accumulators, 4 B loads + 6 broadcasts per 24
 * FMAs), then for the remaining column tiles 2 x 2 (12 x 32) where two row tiles follow each
 * other, 1 x 2 (6 x 32) and a lone 6 x 16. Lanes run across N only, so each lane performs
 * exactly the scalar fmaf chain of the generic kernel: the bits match every other path. */
#include "gemm/gemm_kernels.h"

#include <immintrin.h>

enum { MR = TS__GEMM_MR, NR = TS__GEMM_NR };

/* The first K value of a block is a multiply (see gemm_f32_6x16_avx2.c: a*b is exact and
 * equals fmaf(a, b, +0) but for the sign of a zero, which never reaches D). */
#define ROW_MUL2(i)                                     \
    do {                                                \
        const __m512 ai = _mm512_set1_ps(a[i]);         \
        p##i##0 = _mm512_mul_ps(ai, b0);                \
        p##i##1 = _mm512_mul_ps(ai, b1);                \
    } while (0)
#define ROW_FMA2(i)                                     \
    do {                                                \
        const __m512 ai = _mm512_set1_ps(a[i]);         \
        p##i##0 = _mm512_fmadd_ps(ai, b0, p##i##0);     \
        p##i##1 = _mm512_fmadd_ps(ai, b1, p##i##1);     \
    } while (0)
#define ROWS2(OP) OP(0); OP(1); OP(2); OP(3); OP(4); OP(5)

/* acc row i += p * (sa[i] * sb): the scale product rounded to f32 first (canonical order). */
#define ROW_PROMOTE2(i)                                                                        \
    do {                                                                                       \
        const __m512 si = _mm512_set1_ps(sai[i]);                                              \
        _mm512_store_ps(c0 + (i) * NR, _mm512_fmadd_ps(p##i##0, _mm512_mul_ps(si, sb0),        \
                                                       _mm512_load_ps(c0 + (i) * NR)));        \
        _mm512_store_ps(c1 + (i) * NR, _mm512_fmadd_ps(p##i##1, _mm512_mul_ps(si, sb1),        \
                                                       _mm512_load_ps(c1 + (i) * NR)));        \
    } while (0)

static void f32_6x32_scaled(int64_t kc, int64_t g, const float *ap, const float *bp0,
                            const float *bp1, const float *sa, const float *sb0p,
                            const float *sb1p, float *acc0, float *acc1) {
    ts__gemm_prefetch_next_tile(acc0);
    ts__gemm_prefetch_next_tile(acc1);
    for (int64_t k0 = 0, blk = 0; k0 < kc; k0 += g, blk++) {
        const int64_t len = kc - k0 < g ? kc - k0 : g;
        const float *a = ap + k0 * MR, *x0 = bp0 + k0 * NR, *x1 = bp1 + k0 * NR;
        __m512 p00, p01, p10, p11, p20, p21, p30, p31, p40, p41, p50, p51;
        {
            const __m512 b0 = _mm512_load_ps(x0), b1 = _mm512_load_ps(x1);
            ROWS2(ROW_MUL2);
            a += MR, x0 += NR, x1 += NR;
        }
#pragma GCC unroll 4
        for (int64_t k = 1; k < len; k++, a += MR, x0 += NR, x1 += NR) {
            const __m512 b0 = _mm512_load_ps(x0), b1 = _mm512_load_ps(x1);
            ROWS2(ROW_FMA2);
        }
        const float *sai = sa + blk * MR;
        const __m512 sb0 = _mm512_loadu_ps(sb0p + blk * NR), sb1 = _mm512_loadu_ps(sb1p + blk * NR);
        /* the tiles' addresses hidden from gcc, which otherwise keeps them in stack copies
         * across blocks (as in the AVX2 kernel) */
        float *c0 = acc0, *c1 = acc1;
        __asm__("" : "+r"(c0), "+r"(c1));
        ROWS2(ROW_PROMOTE2);
    }
}

static void f32_6x32_plain(int64_t kc, const float *ap, const float *bp0, const float *bp1,
                           float *acc0, float *acc1) {
    ts__gemm_prefetch_next_tile(acc0);
    ts__gemm_prefetch_next_tile(acc1);
#define LOAD2(i) __m512 p##i##0 = _mm512_load_ps(acc0 + (i) * NR), p##i##1 = _mm512_load_ps(acc1 + (i) * NR)
    LOAD2(0); LOAD2(1); LOAD2(2); LOAD2(3); LOAD2(4); LOAD2(5);
#undef LOAD2
    const float *a = ap, *x0 = bp0, *x1 = bp1;
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; k++, a += MR, x0 += NR, x1 += NR) {
        const __m512 b0 = _mm512_load_ps(x0), b1 = _mm512_load_ps(x1);
        ROWS2(ROW_FMA2);
    }
#define STORE2(i) _mm512_store_ps(acc0 + (i) * NR, p##i##0), _mm512_store_ps(acc1 + (i) * NR, p##i##1)
    STORE2(0); STORE2(1); STORE2(2); STORE2(3); STORE2(4); STORE2(5);
#undef STORE2
}

/* ---- 2 x 2 tiles (12 x 32: 24 zmm accumulators, 2 loads of B and 12 broadcasts of A per
 * 24 FMAs; measured 1.1-1.2x the 6 x 32 kernel called twice, in L1) */

#define ROW_MUL4(i)                                                                            \
    do {                                                                                       \
        const __m512 x = _mm512_set1_ps(a0[i]), y = _mm512_set1_ps(a1[i]);                     \
        p##i##0 = _mm512_mul_ps(x, b0), p##i##1 = _mm512_mul_ps(x, b1);                        \
        q##i##0 = _mm512_mul_ps(y, b0), q##i##1 = _mm512_mul_ps(y, b1);                        \
    } while (0)
#define ROW_FMA4(i)                                                                            \
    do {                                                                                       \
        const __m512 x = _mm512_set1_ps(a0[i]), y = _mm512_set1_ps(a1[i]);                     \
        p##i##0 = _mm512_fmadd_ps(x, b0, p##i##0), p##i##1 = _mm512_fmadd_ps(x, b1, p##i##1);  \
        q##i##0 = _mm512_fmadd_ps(y, b0, q##i##0), q##i##1 = _mm512_fmadd_ps(y, b1, q##i##1);  \
    } while (0)
#define DECL4(i) __m512 p##i##0, p##i##1, q##i##0, q##i##1

static void f32_12x32_scaled(int64_t kc, int64_t g, const ts__gemm_tiles22 *t) {
    ts__gemm_prefetch_next_tile(t->c[1][0]);
    ts__gemm_prefetch_next_tile(t->c[1][1]);
    for (int64_t k0 = 0, blk = 0; k0 < kc; k0 += g, blk++) {
        const int64_t len = kc - k0 < g ? kc - k0 : g;
        const float *a0 = t->a[0] + k0 * MR, *a1 = t->a[1] + k0 * MR;
        const float *x0 = t->b[0] + k0 * NR, *x1 = t->b[1] + k0 * NR;
        ROWS2(DECL4);
        {
            const __m512 b0 = _mm512_load_ps(x0), b1 = _mm512_load_ps(x1);
            ROWS2(ROW_MUL4);
            a0 += MR, a1 += MR, x0 += NR, x1 += NR;
        }
#pragma GCC unroll 2
        for (int64_t k = 1; k < len; k++, a0 += MR, a1 += MR, x0 += NR, x1 += NR) {
            const __m512 b0 = _mm512_load_ps(x0), b1 = _mm512_load_ps(x1);
            ROWS2(ROW_FMA4);
        }
        const __m512 sb0 = _mm512_loadu_ps(t->sb[0] + blk * NR), sb1 = _mm512_loadu_ps(t->sb[1] + blk * NR);
        {
            const float *sai = t->sa[0] + blk * MR;
            float *c0 = t->c[0][0], *c1 = t->c[0][1];
            __asm__("" : "+r"(c0), "+r"(c1));
            ROWS2(ROW_PROMOTE2);
        }
        {
            const float *sai = t->sa[1] + blk * MR;
            float *c0 = t->c[1][0], *c1 = t->c[1][1];
            __asm__("" : "+r"(c0), "+r"(c1));
#define ROW_PROMOTE2Q(i)                                                                       \
    do {                                                                                       \
        const __m512 si = _mm512_set1_ps(sai[i]);                                              \
        _mm512_store_ps(c0 + (i) * NR, _mm512_fmadd_ps(q##i##0, _mm512_mul_ps(si, sb0),        \
                                                       _mm512_load_ps(c0 + (i) * NR)));        \
        _mm512_store_ps(c1 + (i) * NR, _mm512_fmadd_ps(q##i##1, _mm512_mul_ps(si, sb1),        \
                                                       _mm512_load_ps(c1 + (i) * NR)));        \
    } while (0)
            ROWS2(ROW_PROMOTE2Q);
#undef ROW_PROMOTE2Q
        }
    }
}

static void f32_12x32_plain(int64_t kc, const ts__gemm_tiles22 *t) {
    ts__gemm_prefetch_next_tile(t->c[1][0]);
    ts__gemm_prefetch_next_tile(t->c[1][1]);
    float *c00 = t->c[0][0], *c01 = t->c[0][1], *c10 = t->c[1][0], *c11 = t->c[1][1];
#define LOAD4(i)                                                                               \
    __m512 p##i##0 = _mm512_load_ps(c00 + (i) * NR), p##i##1 = _mm512_load_ps(c01 + (i) * NR),   \
           q##i##0 = _mm512_load_ps(c10 + (i) * NR), q##i##1 = _mm512_load_ps(c11 + (i) * NR)
    LOAD4(0); LOAD4(1); LOAD4(2); LOAD4(3); LOAD4(4); LOAD4(5);
#undef LOAD4
    const float *a0 = t->a[0], *a1 = t->a[1], *x0 = t->b[0], *x1 = t->b[1];
#pragma GCC unroll 2
    for (int64_t k = 0; k < kc; k++, a0 += MR, a1 += MR, x0 += NR, x1 += NR) {
        const __m512 b0 = _mm512_load_ps(x0), b1 = _mm512_load_ps(x1);
        ROWS2(ROW_FMA4);
    }
#define STORE4(i)                                                                              \
    _mm512_store_ps(c00 + (i) * NR, p##i##0), _mm512_store_ps(c01 + (i) * NR, p##i##1),          \
        _mm512_store_ps(c10 + (i) * NR, q##i##0), _mm512_store_ps(c11 + (i) * NR, q##i##1)
    STORE4(0); STORE4(1); STORE4(2); STORE4(3); STORE4(4); STORE4(5);
#undef STORE4
}

/* ---- one 6 x 16 tile (the odd one out) */

#define ROW_MUL1(i) p##i = _mm512_mul_ps(_mm512_set1_ps(a[i]), b)
#define ROW_FMA1(i) p##i = _mm512_fmadd_ps(_mm512_set1_ps(a[i]), b, p##i)

static void f32_6x16_scaled(int64_t kc, int64_t g, const float *ap, const float *bp,
                            const float *sa, const float *sb, float *acc) {
    ts__gemm_prefetch_next_tile(acc);
    for (int64_t k0 = 0, blk = 0; k0 < kc; k0 += g, blk++) {
        const int64_t len = kc - k0 < g ? kc - k0 : g;
        const float *a = ap + k0 * MR, *x = bp + k0 * NR;
        __m512 p0, p1, p2, p3, p4, p5;
        {
            const __m512 b = _mm512_load_ps(x);
            ROWS2(ROW_MUL1);
            a += MR, x += NR;
        }
#pragma GCC unroll 4
        for (int64_t k = 1; k < len; k++, a += MR, x += NR) {
            const __m512 b = _mm512_load_ps(x);
            ROWS2(ROW_FMA1);
        }
        const float *sai = sa + blk * MR;
        const __m512 sbv = _mm512_loadu_ps(sb + blk * NR);
        float *c = acc;
        __asm__("" : "+r"(c));
#define PROMOTE1(i)                                                                             \
    _mm512_store_ps(c + (i) * NR, _mm512_fmadd_ps(p##i, _mm512_mul_ps(_mm512_set1_ps(sai[i]), sbv), \
                                                  _mm512_load_ps(c + (i) * NR)))
        ROWS2(PROMOTE1);
#undef PROMOTE1
    }
}

static void f32_6x16_plain(int64_t kc, const float *ap, const float *bp, float *acc) {
    ts__gemm_prefetch_next_tile(acc);
    __m512 p0 = _mm512_load_ps(acc), p1 = _mm512_load_ps(acc + NR), p2 = _mm512_load_ps(acc + 2 * NR),
           p3 = _mm512_load_ps(acc + 3 * NR), p4 = _mm512_load_ps(acc + 4 * NR),
           p5 = _mm512_load_ps(acc + 5 * NR);
    const float *a = ap, *x = bp;
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; k++, a += MR, x += NR) {
        const __m512 b = _mm512_load_ps(x);
        ROWS2(ROW_FMA1);
    }
    _mm512_store_ps(acc, p0), _mm512_store_ps(acc + NR, p1), _mm512_store_ps(acc + 2 * NR, p2);
    _mm512_store_ps(acc + 3 * NR, p3), _mm512_store_ps(acc + 4 * NR, p4), _mm512_store_ps(acc + 5 * NR, p5);
}


/* ---- 1 x 4 tiles (6 x 64: 24 zmm accumulators, 4 loads of B and 6 broadcasts of A per 24
 * FMAs). This core sustains about 1.3 zmm loads per cycle beside two FMAs: the 12 x 32 tile
 * (14 loads per 24 FMAs) ran at 87 % of the FMA peak in L1, this one at 98-100 %. Its four B
 * micro-panels take KC x 4 x 64 B: the driver packs KC = 128 for this table (32 KiB). */

#define ROW_MUL4Q(i)                                                                           \
    do {                                                                                       \
        const __m512 x = _mm512_set1_ps(a[i]);                                                 \
        p##i##0 = _mm512_mul_ps(x, b0), p##i##1 = _mm512_mul_ps(x, b1);                        \
        p##i##2 = _mm512_mul_ps(x, b2), p##i##3 = _mm512_mul_ps(x, b3);                        \
    } while (0)
#define ROW_FMA4Q(i)                                                                           \
    do {                                                                                       \
        const __m512 x = _mm512_set1_ps(a[i]);                                                 \
        p##i##0 = _mm512_fmadd_ps(x, b0, p##i##0), p##i##1 = _mm512_fmadd_ps(x, b1, p##i##1);  \
        p##i##2 = _mm512_fmadd_ps(x, b2, p##i##2), p##i##3 = _mm512_fmadd_ps(x, b3, p##i##3);  \
    } while (0)
#define DECL4Q(i) __m512 p##i##0, p##i##1, p##i##2, p##i##3
#define LOAD_B4()                                                                              \
    const __m512 b0 = _mm512_load_ps(x0), b1 = _mm512_load_ps(x1), b2 = _mm512_load_ps(x2),    \
                 b3 = _mm512_load_ps(x3)

static void f32_6x64_scaled(int64_t kc, int64_t g, const ts__gemm_tiles14 *t) {
    for (int q = 0; q < 4; q++) ts__gemm_prefetch_next_tile(t->c[q]);
    for (int64_t k0 = 0, blk = 0; k0 < kc; k0 += g, blk++) {
        const int64_t len = kc - k0 < g ? kc - k0 : g;
        const float *a = t->a + k0 * MR;
        const float *x0 = t->b[0] + k0 * NR, *x1 = t->b[1] + k0 * NR, *x2 = t->b[2] + k0 * NR,
                    *x3 = t->b[3] + k0 * NR;
        ROWS2(DECL4Q);
        {
            LOAD_B4();
            ROWS2(ROW_MUL4Q);
            a += MR, x0 += NR, x1 += NR, x2 += NR, x3 += NR;
        }
#pragma GCC unroll 2
        for (int64_t k = 1; k < len; k++, a += MR, x0 += NR, x1 += NR, x2 += NR, x3 += NR) {
            LOAD_B4();
            ROWS2(ROW_FMA4Q);
        }
        const float *sai = t->sa + blk * MR;
        float *c0 = t->c[0], *c1 = t->c[1], *c2 = t->c[2], *c3 = t->c[3];
        __asm__("" : "+r"(c0), "+r"(c1), "+r"(c2), "+r"(c3));
        const float *s0 = t->sb[0] + blk * NR, *s1 = t->sb[1] + blk * NR, *s2 = t->sb[2] + blk * NR,
                    *s3 = t->sb[3] + blk * NR;
#define PROMOTE_Q(i, q, c, sq)                                                                  \
    _mm512_store_ps(c + (i) * NR, _mm512_fmadd_ps(p##i##q, _mm512_mul_ps(si, _mm512_loadu_ps(sq)), \
                                                  _mm512_load_ps(c + (i) * NR)))
#define PROMOTE4Q(i)                                                                            \
    do {                                                                                        \
        const __m512 si = _mm512_set1_ps(sai[i]);                                               \
        PROMOTE_Q(i, 0, c0, s0);                                                                \
        PROMOTE_Q(i, 1, c1, s1);                                                                \
        PROMOTE_Q(i, 2, c2, s2);                                                                \
        PROMOTE_Q(i, 3, c3, s3);                                                                \
    } while (0)
        ROWS2(PROMOTE4Q);
#undef PROMOTE4Q
#undef PROMOTE_Q
    }
}

static void f32_6x64_plain(int64_t kc, const ts__gemm_tiles14 *t) {
    for (int q = 0; q < 4; q++) ts__gemm_prefetch_next_tile(t->c[q]);
    float *c0 = t->c[0], *c1 = t->c[1], *c2 = t->c[2], *c3 = t->c[3];
#define LOAD4Q(i)                                                                              \
    __m512 p##i##0 = _mm512_load_ps(c0 + (i) * NR), p##i##1 = _mm512_load_ps(c1 + (i) * NR),     \
           p##i##2 = _mm512_load_ps(c2 + (i) * NR), p##i##3 = _mm512_load_ps(c3 + (i) * NR)
    LOAD4Q(0); LOAD4Q(1); LOAD4Q(2); LOAD4Q(3); LOAD4Q(4); LOAD4Q(5);
#undef LOAD4Q
    const float *a = t->a, *x0 = t->b[0], *x1 = t->b[1], *x2 = t->b[2], *x3 = t->b[3];
#pragma GCC unroll 2
    for (int64_t k = 0; k < kc; k++, a += MR, x0 += NR, x1 += NR, x2 += NR, x3 += NR) {
        LOAD_B4();
        ROWS2(ROW_FMA4Q);
    }
#define STORE4Q(i)                                                                             \
    _mm512_store_ps(c0 + (i) * NR, p##i##0), _mm512_store_ps(c1 + (i) * NR, p##i##1),            \
        _mm512_store_ps(c2 + (i) * NR, p##i##2), _mm512_store_ps(c3 + (i) * NR, p##i##3)
    STORE4Q(0); STORE4Q(1); STORE4Q(2); STORE4Q(3); STORE4Q(4); STORE4Q(5);
#undef STORE4Q
}

/* The decode (small-M) kernel: gemm_decode_avx512.c (FP4 at M = 1, the AVX2 kernel for the
 * rest, which streams the weight at DRAM speed already). */
const ts__gemm_kernels ts__gemm_kernels_avx512 = {
    "avx512",        f32_6x16_scaled, f32_6x16_plain,   ts__gemm_decode_32__avx512,
    f32_6x32_scaled, f32_6x32_plain,  f32_12x32_scaled, f32_12x32_plain,
    f32_6x64_scaled, f32_6x64_plain,  128,
};
