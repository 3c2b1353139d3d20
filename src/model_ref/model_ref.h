/* The float64 reference of docs/model.md and the dsv4-tiny golden file (internal; used by
 * tests/test_model_check.c and `tilestack demo --check`).
 *
 * The golden file tests/golden/dsv4_tiny.bin is written by tests/gen/gen_dsv4.py (format at
 * its top and in docs/model.md, "Reference implementations and golden file"): the config, a
 * prompt and the greedy continuation, f32 logits of every step, and a checksum of every
 * generated weight tensor. */
#ifndef TILESTACK_MODEL_REF_H
#define TILESTACK_MODEL_REF_H

#include "tilestack/model.h"

/* fnv1a64 of a tensor's bytes as the §2 weight file stores them. dtype: 0 F32, 1 BF16,
 * 2 F8_E4M3, 3 U8 (packed FP4), 4 I32. An FP8 / FP4 tensor and its `name.scale` are two
 * entries. */
typedef struct ts__model_checksum {
    char name[80];
    int32_t dtype;
    int64_t nbytes;
    uint64_t fnv1a64;
} ts__model_checksum;

typedef struct ts__model_golden {
    ts_model_config cfg;
    uint64_t prompt_seed;
    int64_t n_prompt, n_gen, n_steps;
    int32_t *tokens;    /* [n_steps]: the prompt, then the greedy tokens fed back */
    int32_t final_token; /* argmax of the last step's logits (not fed) */
    float *logits;      /* [n_steps, vocab] */
    int64_t n_sums;
    ts__model_checksum *sums;
} ts__model_golden;

/* Reads and validates the file (TS_ERR_IO naming the path, TS_ERR_INVALID_ARGUMENT naming the
 * first malformed field). On error *g is zeroed. */
ts_status ts__model_golden_load(const char *path, ts__model_golden *g);
void ts__model_golden_free(ts__model_golden *g);

/* The token the golden run expects after step i (i + 1 < n_steps: tokens[i + 1]; the last step:
 * final_token); -1 for prompt steps whose successor is not a greedy choice (i < n_prompt - 1). */
int32_t ts__model_golden_expected_token(const ts__model_golden *g, int64_t step);

/* The reference's weight checksums (every generated tensor, in generation order). */
void ts__model_reference_checksums(const ts_model_reference *r, const ts__model_checksum **sums,
                                   int64_t *n);

/* Compares the reference's checksums with the golden ones by name: *mismatches counts golden
 * entries that are missing or differ, and entries the reference has that the golden lacks;
 * first_bad names the first (or "" if none). */
void ts__model_compare_checksums(const ts_model_reference *r, const ts__model_golden *g,
                                 int64_t *mismatches, char first_bad[80]);

/* Per-step comparison of two logit sequences [n_steps, vocab] (f64) for the golden run:
 * calc_diff (ts_calc_diff semantics) per step, its maximum and mean, and the greedy choice
 * (argmax, ties to the lower id) of `test` against the golden token sequence at every step
 * from n_prompt - 1 on. */
typedef struct ts__model_compare {
    double max_diff, mean_diff;
    int64_t worst_step;
    int64_t greedy_steps;       /* steps whose argmax was checked */
    int64_t greedy_mismatches;  /* of those, argmax != the golden token */
    int64_t first_mismatch;     /* step, or -1 */
    double first_mismatch_margin; /* ref's top-1 minus top-2 logit at that step (a near-tie
                                     shows as a margin within the logits' error) */
    int64_t first_above_1e9;    /* first step with calc_diff > 1e-9, or -1: where the two runs
                                   stop making the same rounding choices */
} ts__model_compare;
ts_status ts__model_compare_logits(const ts__model_golden *g, const double *ref,
                                   const double *test, ts__model_compare *out);

/* Runs the reference over the golden tokens (a fresh reference from g->cfg): logits f64
 * [n_steps, vocab] (caller-allocated); *checksum_mismatches as ts__model_compare_checksums. */
ts_status ts__model_reference_run_golden(const ts__model_golden *g, double *logits,
                                         int64_t *checksum_mismatches, char first_bad[80]);

#endif
