/* Shared helpers of the multi-rank EP tests. */
#ifndef TS_EP_TEST_UTIL_H
#define TS_EP_TEST_UTIL_H

#include "tilestack/ep.h"
#include "tilestack/numerics.h"
#include "ts_prng.h"
#include "ts_test.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

extern int g_ep_rank, g_ep_size;

/* Deadline used by every test buffer: short, so a broken protocol fails fast. */
#define TS_EP_TEST_TIMEOUT_S 20.0

static inline ts_ep_buffer *ep_test_buffer(ts_test_ctx *ts_t_, int64_t nvl_bytes, double timeout_s) {
    ts_ep_buffer *b = NULL;
    ts_ep_buffer_options o = ts_ep_default_buffer_options();
    o.timeout_s = timeout_s;
    TS_CHECK_STATUS(ts_ep_buffer_create(MPI_COMM_WORLD, nvl_bytes, 0, false, &o, &b), TS_OK);
    return b;
}

/* 1 if every rank passes true. */
static inline bool ep_all(bool v) {
    int in = v ? 1 : 0, out = 0;
    MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return out != 0;
}

#endif
