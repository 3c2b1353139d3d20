/* The Alltoallv token dispatcher of the expanded V2 rows (bench/suite_ep_a2a_expanded.c). */
#ifndef TS_BENCH_SUITE_EP_A2A_EXPANDED_H
#define TS_BENCH_SUITE_EP_A2A_EXPANDED_H

#include "tilestack/core.h"

#include <stdint.h>

typedef struct ts__a2a_expanded ts__a2a_expanded;

/* Over MPI_COMM_WORLD: T tokens of x (e4m3 [T, H]), xs (f32 [T, S]), their top-K experts idx
 * ([T, K], -1 masked, distinct per token) of E and weights w ([T, K]); the arrays are read at
 * each dispatch and must outlive the baseline. */
ts_status ts__a2a_expanded_create(const uint8_t *x, const float *xs, const int64_t *idx, const float *w, int64_t T,
                                  int64_t H, int64_t S, int64_t K, int64_t E, ts__a2a_expanded **out);
ts_status ts__a2a_expanded_dispatch(ts__a2a_expanded *a);
/* ex: this rank's expanded rows (bf16 [rows, H], the last dispatch's order); y: bf16 [T, H] */
ts_status ts__a2a_expanded_combine(ts__a2a_expanded *a, const uint16_t *ex, uint16_t *y);
/* the last dispatch's expanded rows: count, e4m3 [n, H], f32 scales [n, S], f32 weights [n] */
void ts__a2a_expanded_rows(const ts__a2a_expanded *a, int64_t *nrows, const uint8_t **x, const float **sf,
                           const float **w);
void ts__a2a_expanded_destroy(ts__a2a_expanded *a);

#endif
