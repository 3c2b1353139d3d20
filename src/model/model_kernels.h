/* The model's own small kernels (generic C and AVX2, the same bits). */
#ifndef TILESTACK_MODEL_KERNELS_H
#define TILESTACK_MODEL_KERNELS_H

#include <stdint.h>

/* y[r * ldy] = sum_i x[r * ldx + i] * w[i] for r < m: one f32 weight row against m rows, f32
 * products and sums in double over 8 lanes (lane i mod 8, the k % 8 tail into lanes 0..),
 * reduced as ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)), rounded to f32 once. */
typedef void (*ts__model_dot_rows_fn)(const float *w, int64_t k, const float *x, int64_t m,
                                      int64_t ldx, float *y, int64_t ldy);
void ts__model_dot_rows__generic(const float *w, int64_t k, const float *x, int64_t m,
                                 int64_t ldx, float *y, int64_t ldy);
#ifdef TS_HAVE_AVX2_KERNELS
void ts__model_dot_rows__avx2(const float *w, int64_t k, const float *x, int64_t m, int64_t ldx,
                              float *y, int64_t ldy);
#endif

#endif
