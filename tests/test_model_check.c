/* The model's three implementations against each other on dsv4-tiny (docs/model.md,
 * "Reference implementations and golden file"):
 *   (a) the float64 reference (src/model_ref/) against the numpy golden run
 *       (tests/gen/gen_dsv4.py -> tests/golden/dsv4_tiny.bin): same weights bit for bit
 *       (checksums), logits to calc_diff < 1e-9 per step, the same greedy tokens;
 *   (b) the optimised path (ts_model_create / ts_model_decode) against the reference:
 *       calc_diff < 1e-3 per step and the same greedy tokens for the 32 generated steps. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_model_common.h"
#include "tilestack/quant.h"

#ifndef TS_GOLDEN_DIR
#define TS_GOLDEN_DIR "tests/golden"
#endif
#define GOLDEN_PATH TS_GOLDEN_DIR "/dsv4_tiny.bin"

/* The reference's logits over the golden tokens, computed once for the tests below. */
static tm_golden_ref g_ref = {.path = GOLDEN_PATH};

__attribute__((destructor)) static void free_reference(void) { tm_free_reference(&g_ref); }

TS_TEST(model_ref_golden_file_describes_dsv4_tiny) {
    ts__model_golden g;
    TS_CHECK_STATUS(ts__model_golden_load(GOLDEN_PATH, &g), TS_OK);
    if (TS_FAILED()) return;
    /* docs/model.md §1, dsv4-tiny column */
    const ts_model_config *c = &g.cfg;
    TS_CHECK_EQ_INT(c->vocab_size, 512);
    TS_CHECK_EQ_INT(c->dim, 256);
    TS_CHECK_EQ_INT(c->n_layers, 3);
    TS_CHECK(c->compress_ratios[0] == 0 && c->compress_ratios[1] == 4 && c->compress_ratios[2] == 8);
    TS_CHECK_EQ_INT(c->n_hash_layers, 1);
    TS_CHECK_EQ_INT(c->n_heads, 4);
    TS_CHECK_EQ_INT(c->window_size, 16);
    TS_CHECK_EQ_INT(c->index_topk, 8);
    TS_CHECK_EQ_INT(c->n_routed_experts, 8);
    TS_CHECK_EQ_INT(c->n_activated_experts, 6);
    TS_CHECK_EQ_INT(c->max_seq_len, 256);
    TS_CHECK_EQ_INT(c->seed, 7);
    TS_CHECK(c->compress_rope_theta == 160000.0 && c->rope_factor == 16.0);
    TS_CHECK_EQ_INT(g.n_prompt, 40);
    TS_CHECK_EQ_INT(g.n_gen, 32);
    TS_CHECK(g.n_sums > 100);
    TS_CHECK_EQ_INT(ts__model_golden_expected_token(&g, 38), -1);
    TS_CHECK_EQ_INT(ts__model_golden_expected_token(&g, 39), g.tokens[40]);
    TS_CHECK_EQ_INT(ts__model_golden_expected_token(&g, g.n_steps - 1), g.final_token);
    ts__model_golden_free(&g);
}

TS_TEST(model_ref_weights_match_numpy_generator) {
    if (!tm_ensure_reference(ts_t_, &g_ref)) return;
    TS_CHECK_MSG(g_ref.sum_mismatches == 0, "%lld weight checksums differ (first: %s)",
                 (long long)g_ref.sum_mismatches, g_ref.first_bad);
}

TS_TEST(model_ref_logits_match_numpy_golden) {
    if (!tm_ensure_reference(ts_t_, &g_ref)) return;
    tm_check_reference_vs_golden(ts_t_, &g_ref, "reference vs numpy golden");
    /* the logits are not degenerate: a real spread */
    const int64_t V = g_ref.golden.cfg.vocab_size;
    double ss = 0;
    for (int64_t i = 0; i < V; i++) ss += g_ref.ref_logits[i] * g_ref.ref_logits[i];
    TS_CHECK(sqrt(ss / (double)V) > 0.1);
}

/* The comparison itself must fail when it should: a changed logit moves calc_diff, a changed
 * argmax is reported at its step. */
TS_TEST(model_ref_compare_detects_differences) {
    if (!tm_ensure_reference(ts_t_, &g_ref)) return;
    const ts__model_golden *g = &g_ref.golden;
    const int64_t V = g->cfg.vocab_size, n = g->n_steps * V;
    double *t = malloc((size_t)n * sizeof(double));
    TS_CHECK(t != NULL);
    if (!t) return;
    memcpy(t, g_ref.ref_logits, (size_t)n * sizeof(double));
    const int64_t step = g->n_prompt + 5;
    const int32_t want = ts__model_golden_expected_token(g, step);
    const int32_t other = (want + 1) % (int32_t)V;
    t[step * V + other] = t[step * V + want] + 1.0;
    ts__model_compare cmp;
    TS_CHECK_STATUS(ts__model_compare_logits(g, g_ref.ref_logits, t, &cmp), TS_OK);
    TS_CHECK_EQ_INT(cmp.greedy_mismatches, 1);
    TS_CHECK_EQ_INT(cmp.first_mismatch, step);
    TS_CHECK(cmp.first_above_1e9 == step);
    TS_CHECK(cmp.first_mismatch_margin > 0 &&
             cmp.first_mismatch_margin <= t[step * V + other] - t[step * V + want] + 1.0);
    TS_CHECK_EQ_INT(cmp.worst_step, step);
    TS_CHECK(cmp.max_diff > 1e-6);
    free(t);
}

TS_TEST(model_ref_bad_input) {
    ts__model_golden g;
    TS_CHECK_STATUS(ts__model_golden_load(GOLDEN_PATH, &g), TS_OK);
    if (TS_FAILED()) return;
    ts_model_reference *r = NULL;
    TS_CHECK_STATUS(ts_model_reference_create(NULL, &r), TS_ERR_NULL_POINTER);
    TS_CHECK_STATUS(ts_model_reference_create(&g.cfg, NULL), TS_ERR_NULL_POINTER);
    ts_model_config bad = g.cfg;
    bad.head_dim = 256;
    TS_CHECK_STATUS(ts_model_reference_create(&bad, &r), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "head_dim") != NULL);
    bad = g.cfg;
    bad.n_activated_experts = bad.n_routed_experts + 1;
    TS_CHECK_STATUS(ts_model_reference_create(&bad, &r), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "n_activated_experts") != NULL);
    TS_CHECK(r == NULL);
    /* a short sequence: the step past max_seq_len is refused, logits untouched */
    ts_model_config small = g.cfg;
    small.max_seq_len = 8;
    TS_CHECK_STATUS(ts_model_reference_create(&small, &r), TS_OK);
    if (r) {
        double *lg = malloc((size_t)small.vocab_size * sizeof(double));
        TS_CHECK_STATUS(ts_model_reference_decode(r, -1, lg), TS_ERR_INVALID_ARGUMENT);
        TS_CHECK_STATUS(ts_model_reference_decode(r, (int32_t)small.vocab_size, lg),
                        TS_ERR_INVALID_ARGUMENT);
        TS_CHECK_STATUS(ts_model_reference_decode(r, 0, NULL), TS_ERR_NULL_POINTER);
        for (int i = 0; i < 8; i++) TS_CHECK_STATUS(ts_model_reference_decode(r, i, lg), TS_OK);
        lg[0] = 12345.0;
        TS_CHECK_STATUS(ts_model_reference_decode(r, 0, lg), TS_ERR_INVALID_ARGUMENT);
        TS_CHECK(lg[0] == 12345.0);
        free(lg);
        ts_model_reference_free(r);
    }
    ts_model_reference_free(NULL);
    ts__model_golden_free(&g);
}

TS_TEST(model_ref_golden_loader_rejects_malformed_files) {
    size_t size = 0;
    unsigned char *buf = TS_READ_GOLDEN("dsv4_tiny.bin", &size);
    if (!buf) return;
    char path[] = "/tmp/ts_dsv4_golden_XXXXXX";
    const int fd = mkstemp(path);
    TS_CHECK(fd >= 0);
    if (fd < 0) {
        free(buf);
        return;
    }
    FILE *f = fdopen(fd, "wb");
    ts__model_golden g;
    /* truncated */
    fwrite(buf, 1, size - 3, f);
    fflush(f);
    TS_CHECK_STATUS(ts__model_golden_load(path, &g), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), path) != NULL);
    TS_CHECK(g.tokens == NULL && g.logits == NULL);
    /* bad magic */
    rewind(f);
    buf[0] ^= 1;
    fwrite(buf, 1, size, f);
    fflush(f);
    TS_CHECK_STATUS(ts__model_golden_load(path, &g), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "magic") != NULL);
    fclose(f);
    remove(path);
    TS_CHECK_STATUS(ts__model_golden_load("/nonexistent/dsv4_tiny.bin", &g), TS_ERR_IO);
    free(buf);
}

/* (b) the optimised path against the reference: calc_diff < 1e-3 at every step, the same greedy
 * choices, and the same bits with another thread count. */
TS_TEST(model_check_optimised_matches_reference) {
    if (!tm_ensure_reference(ts_t_, &g_ref)) return;
    ts__model_compare cmp;
    tm_check_optimised(ts_t_, &g_ref, 1, "optimised vs reference", &cmp);
}
