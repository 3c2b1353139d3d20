/* Shared by the tests of the TileKernels kernels written in the tile language
 * (test_tk_*.c): the golden-record reader of tests/gen/gen_tilekernels.py and the inputs it
 * draws from ts_prng. */
#ifndef TS_TEST_TK_COMMON_H
#define TS_TEST_TK_COMMON_H

#include "ts_test.h"
#include "tilestack/core.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct tk_array {
    uint8_t kind; /* 0 input (stored whole), 1 output (checksum + prefix) */
    uint64_t nbytes, checksum, nstored;
    const uint8_t *data;
} tk_array;

typedef struct tk_record {
    char name[64];
    uint32_t np, na;
    int64_t p[32];
    tk_array a[16];
    void *owned[16]; /* aligned copies of the input arrays */
} tk_record;

typedef struct tk_reader {
    uint8_t *buf;
    size_t size, off;
} tk_reader;

/* Next record into *rec; false at the end (or on a malformed file, reported as a failure).
 * Input arrays are copied to aligned memory: release them with tk_record_free. */
bool tk_next(ts_test_ctx *t, tk_reader *r, tk_record *rec);
void tk_record_free(tk_record *rec);
uint64_t tk_checksum(const void *data, size_t n);
/* Compares an output with array ai of rec (size, stored prefix, checksum); reports the first
 * differing byte of the prefix. Returns true when equal. */
bool tk_expect(ts_test_ctx *t, const tk_record *rec, uint32_t ai, const void *got, size_t nbytes,
               const char *what);
void tk_bf16_input(uint64_t seed, size_t n, float scale, uint16_t *out);
void tk_f32_input(uint64_t seed, size_t n, float scale, float *out);
/* Runs fn(ctx) on every ISA path here (the best at 2 threads, the others at 1; generic at 2 too
 * when nvariants >= 4; the best only when nvariants < 2), restoring both after. */
typedef void (*tk_variant_fn)(void *ctx, int variant);
void tk_for_variants(void *ctx, tk_variant_fn fn, int nvariants);

/* a scale tensor [rows, cols] of 4-byte elements, column-major (TMA-aligned, rows padded to 4)
 * when colmajor; from/to the logical row-major copy */
typedef struct sf_buf {
    int64_t rows, cols, pal;
    bool colmajor;
    uint32_t *mem, *row;
} sf_buf;

static inline bool sf_alloc(sf_buf *s, int64_t rows, int64_t cols, bool colmajor) {
    s->rows = rows, s->cols = cols, s->colmajor = colmajor, s->pal = (rows + 3) / 4 * 4;
    s->mem = malloc((size_t)(s->pal * cols + 1) * 4);
    s->row = malloc((size_t)(rows * cols + 1) * 4);
    return s->mem && s->row;
}
static inline void sf_free(sf_buf *s) { free(s->mem), free(s->row); }
static inline ts_tensor sf_tensor(sf_buf *s, ts_dtype dt) {
    ts_tensor t = ts_tensor_2d(s->mem, dt, s->rows, s->cols);
    if (s->colmajor) t.strides[0] = 1, t.strides[1] = s->pal;
    return t;
}
static inline void sf_put(sf_buf *s, const void *rowmajor) {
    const uint32_t *src = rowmajor;
    for (int64_t i = 0; i < s->rows; i++)
        for (int64_t j = 0; j < s->cols; j++)
            s->mem[s->colmajor ? j * s->pal + i : i * s->cols + j] = src[i * s->cols + j];
}
static inline void sf_get(sf_buf *s) {
    for (int64_t i = 0; i < s->rows; i++)
        for (int64_t j = 0; j < s->cols; j++)
            s->row[i * s->cols + j] = s->mem[s->colmajor ? j * s->pal + i : i * s->cols + j];
}

#endif
