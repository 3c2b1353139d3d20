/* Shared by the model tests (test_model_check.c on dsv4-tiny, test_model_v32.c on dsv32-tiny):
 * the float64 reference run once over a numpy golden file, the optimised path over the same
 * tokens, the comparisons both files make, and the weight-file helpers (temporary save, header
 * edits). */
#ifndef TS_TEST_MODEL_COMMON_H
#define TS_TEST_MODEL_COMMON_H

#include "model_ref/model_ref.h"
#include "ts_test.h"

#include <stddef.h>
#include <stdint.h>

/* The reference's logits over one golden file's tokens, computed once (tm_ensure_reference)
 * and kept for the tests of one file; a static of the test file, zero-initialised but for
 * `path`. */
typedef struct tm_golden_ref {
    const char *path;
    ts__model_golden golden;
    double *ref_logits; /* [n_steps, vocab] */
    int64_t sum_mismatches;
    char first_bad[80];
} tm_golden_ref;

/* Loads the golden file and runs the reference on first use; 0 on failure (recorded). */
int tm_ensure_reference(ts_test_ctx *ts_t_, tm_golden_ref *r);
void tm_free_reference(tm_golden_ref *r);

/* TS_MODEL_CHECK_VERBOSE is set: print the measured figures. */
int tm_verbose(void);

/* The reference against the numpy golden logits: calc_diff < 1e-9 at every step, the golden's
 * greedy tokens, and more than 8 distinct generated tokens. `label` prefixes the verbose line. */
void tm_check_reference_vs_golden(ts_test_ctx *ts_t_, const tm_golden_ref *r, const char *label);

/* The optimised path over the golden tokens (teacher-forced, so a greedy mismatch is reported at
 * its step instead of derailing the rest), in a batch of `nb` <= 4 sequences: the golden one is
 * seqs[0] = nb - 1, the others decode other tokens alongside. out: f64 [n_steps, vocab] of the
 * golden sequence; 0 on failure (recorded). */
int tm_run_optimised(ts_test_ctx *ts_t_, const ts__model_golden *g, int64_t nb, double *out);

/* The optimised path (batch of 1) against the reference: calc_diff < 1e-3 at every step and the
 * same greedy choices; then the same bits with another thread count (1, or 2 when the default is
 * 1) and, when batch > 1, inside a batch of `batch`. *cmp: the comparison, for further checks. */
void tm_check_optimised(ts_test_ctx *ts_t_, const tm_golden_ref *r, int64_t batch,
                        const char *label, ts__model_compare *cmp);

/* A model of config c (max_batch sequences) with its weights saved to a fresh file from the
 * mkstemp template `path` (rewritten in place); NULL on failure (recorded, nothing left behind).
 * The caller frees the model and removes the file. */
ts_model *tm_create_saved(ts_test_ctx *ts_t_, const ts_model_config *c, int64_t max_batch,
                          char *path);

typedef struct tm_blob {
    uint8_t *p;
    size_t n;
} tm_blob;

/* A whole file ({NULL, 0} when it cannot be opened); free(b.p). */
tm_blob tm_read_all(const char *path);
void tm_write_all(const char *path, const uint8_t *p, size_t n);
/* Writes the weight file b to `path` with its header's first `from` replaced by `to` (the
 * length field rewritten); without `from` in the header, b unchanged. Returns whether `from`
 * was found. */
int tm_write_edited(const char *path, const tm_blob *b, const char *from, const char *to);

/* A scratch directory for checkpoint tests: tm_root_make creates /tmp/<prefix>XXXXXX (empty
 * name on failure), tm_at(name) is a path inside it (8 rotating buffers), tm_root_remove
 * deletes it with everything in it. One root per test file at a time. */
void tm_root_make(const char *prefix);
void tm_root_remove(void);
/* rm -rf DIR (a message on failure; tests' own temporary directories only) */
void tm_remove_dir(const char *dir);
/* DeepGEMM's calc_diff, 1 - 2 sum(x y) / sum(x^2 + y^2), in double */
double tm_calc_diff(const float *x, const float *y, int64_t n);
const char *tm_root(void);
const char *tm_at(const char *name);
/* A seeded dsv4-tiny for one sequence; NULL on failure. */
ts_model *tm_tiny(void);

#endif
