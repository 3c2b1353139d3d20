/* Shared by the tests of the TileKernels kernels written in the tile language
 * (test_tk_*.c): the golden-record reader of tests/gen/gen_tilekernels.py and the inputs it
 * draws from ts_prng. */
#ifndef TS_TEST_TK_COMMON_H
#define TS_TEST_TK_COMMON_H

#include "ts_test.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
/* Runs fn(ctx) under (isa, threads) in {generic, avx2} x {1, 2}, restoring both after. */
typedef void (*tk_variant_fn)(void *ctx, int variant);
void tk_for_variants(void *ctx, tk_variant_fn fn, int nvariants);

#endif
