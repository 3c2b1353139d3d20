/* The optimised model path (src/model/) on dsv4-tiny: decode runs with finite logits, the bits
 * do not depend on the thread count or on the other sequences of the batch, sequences reset
 * and prefill, and bad steps are refused before anything advances. (The comparison against the
 * float64 reference and the numpy golden run is tests/test_model_check.c.) */
#include "ts_test.h"

#include "tilestack/model.h"

#include <math.h>
#include <stdlib.h>

#define V 512 /* dsv4-tiny vocab */
#define STEPS 24

/* Token of sequence s at step i: deterministic, different per sequence. */
static int32_t tok(int64_t s, int i) { return (int32_t)((s * 131 + i * 37 + 5) % V); }

static ts_model *tiny(ts_test_ctx *ts_t_, int64_t max_batch) {
    ts_model_config cfg;
    TS_CHECK_STATUS(ts_model_config_builtin("dsv4-tiny", &cfg), TS_OK);
    ts_model *m = NULL;
    TS_CHECK_STATUS(ts_model_create(&cfg, max_batch, &m), TS_OK);
    return m;
}

/* Decodes STEPS tokens of sequence `seq` alone; logits of every step into out [STEPS][V]. */
static void run_alone(ts_test_ctx *ts_t_, ts_model *m, int64_t seq, float *out) {
    TS_CHECK_STATUS(ts_model_reset_sequence(m, seq), TS_OK);
    for (int i = 0; i < STEPS; i++) {
        int32_t t = tok(seq, i);
        TS_CHECK_STATUS(ts_model_decode(m, 1, &seq, &t, out + (size_t)i * V), TS_OK);
    }
}

static int same_bits(const float *a, const float *b, size_t n) { return memcmp(a, b, n * 4) == 0; }

TS_TEST(model_decode_tiny_runs_finite_and_advances) {
    ts_model *m = tiny(ts_t_, 2);
    if (!m) return;
    float *lg = (float *)malloc((size_t)STEPS * V * sizeof(float));
    run_alone(ts_t_, m, 1, lg);
    for (int i = 0; i < STEPS; i++) {
        double s2 = 0;
        int finite = 1;
        for (int v = 0; v < V; v++) {
            finite &= isfinite(lg[i * V + v]) != 0;
            s2 += (double)lg[i * V + v] * lg[i * V + v];
        }
        TS_CHECK_MSG(finite && s2 > 0, "step %d: logits not finite or all zero", i);
    }
    /* steps differ from each other (the caches are used) */
    TS_CHECK(!same_bits(lg, lg + V, V));
    TS_CHECK_EQ_INT(ts_model_sequence_position(m, 1), STEPS);
    TS_CHECK_EQ_INT(ts_model_sequence_position(m, 0), 0);
    TS_CHECK_EQ_INT(ts_model_sequence_position(m, 2), -1);
    /* logits == NULL advances the caches only; the next step equals the run with logits */
    float *lg2 = (float *)malloc((size_t)V * sizeof(float));
    TS_CHECK_STATUS(ts_model_reset_sequence(m, 1), TS_OK);
    int64_t seq = 1;
    for (int i = 0; i < STEPS; i++) {
        int32_t t = tok(1, i);
        TS_CHECK_STATUS(ts_model_decode(m, 1, &seq, &t, i == STEPS - 1 ? lg2 : NULL), TS_OK);
    }
    TS_CHECK(same_bits(lg2, lg + (size_t)(STEPS - 1) * V, V));
    free(lg2);
    free(lg);
    ts_model_free(m);
}

TS_TEST(model_decode_same_bits_for_1_2_3_threads) {
    const int saved = ts_get_num_threads();
    ts_model *m = tiny(ts_t_, 1);
    if (!m) return;
    float *ref = (float *)malloc((size_t)STEPS * V * sizeof(float));
    float *got = (float *)malloc((size_t)STEPS * V * sizeof(float));
    TS_CHECK_STATUS(ts_set_num_threads(1), TS_OK);
    run_alone(ts_t_, m, 0, ref);
    for (int th = 2; th <= 3; th++) {
        TS_CHECK_STATUS(ts_set_num_threads(th), TS_OK);
        run_alone(ts_t_, m, 0, got);
        TS_CHECK_MSG(same_bits(ref, got, (size_t)STEPS * V), "%d threads: other bits", th);
    }
    (void)ts_set_num_threads(saved);
    free(ref);
    free(got);
    ts_model_free(m);
}

/* Sequence 2's logits alone equal its logits decoded in batches with other sequences, in any
 * slot order, with batch members joining and leaving. */
TS_TEST(model_decode_batch_invariant) {
    ts_model *m = tiny(ts_t_, 4);
    if (!m) return;
    float *alone = (float *)malloc((size_t)STEPS * V * sizeof(float));
    float *lg = (float *)malloc((size_t)4 * V * sizeof(float));
    run_alone(ts_t_, m, 2, alone);
    for (int64_t s = 0; s < 4; s++) TS_CHECK_STATUS(ts_model_reset_sequence(m, s), TS_OK);
    int steps_of[4] = {0, 0, 0, 0};
    for (int i = 0; i < STEPS; i++) {
        /* sequence 2 always; 0 every step; 3 on odd steps; 1 from step 5 on; rotating order */
        int64_t seqs[4];
        int n = 0;
        seqs[n++] = 0;
        if (i % 2) seqs[n++] = 3;
        if (i >= 5) seqs[n++] = 1;
        seqs[n++] = 2;
        for (int r = 0; r < i % n; r++) { /* rotate */
            int64_t t = seqs[0];
            for (int k = 0; k + 1 < n; k++) seqs[k] = seqs[k + 1];
            seqs[n - 1] = t;
        }
        int32_t toks[4];
        int slot2 = -1;
        for (int k = 0; k < n; k++) {
            toks[k] = tok(seqs[k], steps_of[seqs[k]]++);
            if (seqs[k] == 2) slot2 = k;
        }
        TS_CHECK_STATUS(ts_model_decode(m, n, seqs, toks, lg), TS_OK);
        TS_CHECK_MSG(same_bits(lg + (size_t)slot2 * V, alone + (size_t)i * V, V),
                     "step %d (batch of %d, slot %d): other bits than alone", i, n, slot2);
    }
    free(alone);
    free(lg);
    ts_model_free(m);
}

TS_TEST(model_decode_reset_and_prefill) {
    ts_model *m = tiny(ts_t_, 2);
    if (!m) return;
    float *a = (float *)malloc((size_t)STEPS * V * sizeof(float));
    float *b = (float *)malloc((size_t)STEPS * V * sizeof(float));
    run_alone(ts_t_, m, 0, a);
    run_alone(ts_t_, m, 0, b); /* run_alone resets first */
    TS_CHECK(same_bits(a, b, (size_t)STEPS * V));
    /* random prefill: position set, decoding continues, same seed same bits */
    int64_t seq = 1;
    int32_t t = 7;
    TS_CHECK_STATUS(ts_model_prefill_random(m, 1, 100, 42), TS_OK);
    TS_CHECK_EQ_INT(ts_model_sequence_position(m, 1), 100);
    TS_CHECK_STATUS(ts_model_decode(m, 1, &seq, &t, a), TS_OK);
    TS_CHECK_STATUS(ts_model_prefill_random(m, 1, 100, 42), TS_OK);
    TS_CHECK_STATUS(ts_model_decode(m, 1, &seq, &t, b), TS_OK);
    TS_CHECK(same_bits(a, b, V));
    int finite = 1;
    for (int v = 0; v < V; v++) finite &= isfinite(a[v]) != 0;
    TS_CHECK(finite);
    TS_CHECK_STATUS(ts_model_prefill_random(m, 1, 99, 43), TS_OK); /* mid-block state */
    TS_CHECK_STATUS(ts_model_decode(m, 1, &seq, &t, b), TS_OK);
    TS_CHECK(!same_bits(a, b, V));
    TS_CHECK_STATUS(ts_model_prefill_random(m, 1, 256, 1), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_model_prefill_random(m, 2, 10, 1), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_model_prefill_random(m, 0, -1, 1), TS_ERR_INVALID_ARGUMENT);
    free(a);
    free(b);
    ts_model_free(m);
}

TS_TEST(model_decode_rejects_bad_steps) {
    ts_model_config cfg;
    TS_CHECK_STATUS(ts_model_config_builtin("dsv4-tiny", &cfg), TS_OK);
    cfg.max_seq_len = 16; /* a multiple of the ratios 4 and 8 */
    ts_model *m = NULL;
    TS_CHECK_STATUS(ts_model_create(&cfg, 2, &m), TS_OK);
    if (!m) return;
    float *lg = (float *)malloc((size_t)2 * V * sizeof(float));
    int64_t s01[2] = {0, 1}, s00[2] = {0, 0}, s05[2] = {0, 5};
    int32_t t2[2] = {1, 2}, tbad[2] = {1, V};
    TS_CHECK_STATUS(ts_model_decode(m, 2, s00, t2, lg), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "distinct") != NULL);
    TS_CHECK_STATUS(ts_model_decode(m, 2, s05, t2, lg), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_model_decode(m, 2, s01, tbad, lg), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "tokens[1]") != NULL);
    TS_CHECK_STATUS(ts_model_decode(m, 3, s01, t2, lg), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_model_decode(m, 2, NULL, t2, lg), TS_ERR_NULL_POINTER);
    TS_CHECK_STATUS(ts_model_decode(m, 2, s01, NULL, lg), TS_ERR_NULL_POINTER);
    TS_CHECK_STATUS(ts_model_decode(NULL, 1, s01, t2, lg), TS_ERR_NULL_POINTER);
    TS_CHECK_STATUS(ts_model_decode(m, 0, NULL, NULL, NULL), TS_OK);
    TS_CHECK_EQ_INT(ts_model_sequence_position(m, 0), 0);
    /* fill sequence 0 to max_seq_len; the next step of a batch holding it changes nothing */
    int64_t s0 = 0;
    for (int i = 0; i < 16; i++) {
        int32_t t = tok(0, i);
        TS_CHECK_STATUS(ts_model_decode(m, 1, &s0, &t, lg), TS_OK);
    }
    int64_t s10[2] = {1, 0};
    lg[0] = 12345.0f;
    TS_CHECK_STATUS(ts_model_decode(m, 2, s10, t2, lg), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "max_seq_len") != NULL);
    TS_CHECK(lg[0] == 12345.0f);
    TS_CHECK_EQ_INT(ts_model_sequence_position(m, 0), 16);
    TS_CHECK_EQ_INT(ts_model_sequence_position(m, 1), 0);
    TS_CHECK_STATUS(ts_model_reset_sequence(m, 0), TS_OK);
    TS_CHECK_STATUS(ts_model_reset_sequence(m, 2), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_model_decode(m, 2, s10, t2, lg), TS_OK);
    free(lg);
    ts_model_free(m);
    ts_model_free(NULL);
    /* create */
    TS_CHECK_STATUS(ts_model_create(&cfg, 0, &m), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_model_create(NULL, 1, &m), TS_ERR_NULL_POINTER);
    cfg.head_dim = 256;
    TS_CHECK_STATUS(ts_model_create(&cfg, 1, &m), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "head_dim") != NULL);
    TS_CHECK(ts_model_get_config(NULL) == NULL);
}

#include "model/model_internal.h"

/* The timing helper runs prefill + steps and fills the breakdown table (values are times: only
 * their presence is checked). */
TS_TEST(model_decode_time_helper) {
    ts_model *m = tiny(ts_t_, 3);
    if (!m) return;
    double sec = -1;
    TS_CHECK_STATUS(ts__model_time_decode(m, 3, 40, 2, NULL, &sec), TS_OK);
    TS_CHECK(sec > 0);
    TS_CHECK(m->prof.calls[TS__P_ATTN] == 2 * 3 && m->prof.calls[TS__P_HEAD] == 2);
    TS_CHECK(!m->prof.on);
    TS_CHECK_EQ_INT(ts_model_sequence_position(m, 2), 43);
    FILE *f = tmpfile();
    if (f) {
        TS_CHECK_STATUS(ts__model_time_decode(m, 1, 8, 1, f, NULL), TS_OK);
        TS_CHECK(ftell(f) > 200); /* the header line and the table */
        fclose(f);
    }
    TS_CHECK_STATUS(ts__model_time_decode(m, 4, 8, 1, NULL, NULL), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts__model_time_decode(m, 1, 250, 10, NULL, NULL), TS_ERR_INVALID_ARGUMENT);
    ts_model_free(m);
}
