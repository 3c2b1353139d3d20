/* The profiler's standalone replay (model_profile.c, TS__PROF_SECTION): re-running the
 * idempotent sections inside a step must not change a bit of that step's logits nor of any
 * later step's (the caches, compressor states and positions end up as without replay), and it
 * fills the standalone column: a median for every replayed kernel, nothing for the sections
 * that cannot be re-run (their in-step time of the timed steps, kept[], stands for it). */
#include "ts_test.h"

#include "model/model_internal.h"

#include <stdlib.h>
#include <string.h>

#define RV 512 /* dsv4-tiny vocab */
#define RB 3
#define RSTEPS 12

static ts_model *tiny_model(ts_test_ctx *ts_t_) {
    ts_model_config cfg;
    TS_CHECK_STATUS(ts_model_config_builtin("dsv4-tiny", &cfg), TS_OK);
    ts_model *m = NULL;
    TS_CHECK_STATUS(ts_model_create(&cfg, RB, &m), TS_OK);
    return m;
}

/* RSTEPS steps of RB sequences prefilled to different lengths (the ratio-4 layer's indexer and
 * the ratio-8 layer's compressed rows are in use); replay on at the steps where mask has the
 * bit. Logits [RSTEPS][RB][RV]. */
static void run(ts_test_ctx *ts_t_, ts_model *m, unsigned mask, float *lg, ts__prof *last,
                ts__prof *timed) {
    int64_t seqs[RB];
    int32_t toks[RB];
    for (int64_t b = 0; b < RB; b++) {
        seqs[b] = b;
        toks[b] = (int32_t)((b * 97 + 11) % RV);
        TS_CHECK_STATUS(ts_model_prefill_random(m, b, 9 + 7 * b, 500 + (uint64_t)b), TS_OK);
    }
    for (int i = 0; i < RSTEPS; i++) {
        const bool rep = (mask >> i) & 1u;
        if (i == 1 && timed) ts__model_step_breakdown(m, true, NULL); /* an ordinary profiled step */
        if (rep) {
            ts__model_step_breakdown(m, true, NULL);
            TS_CHECK(ts__prof_replay_begin(&m->prof, 5, false));
        }
        TS_CHECK_STATUS(ts_model_decode(m, RB, seqs, toks, lg + (size_t)i * RB * RV), TS_OK);
        if (rep) {
            ts__prof_replay_end(&m->prof);
            if (last) *last = m->prof;
            ts__model_step_breakdown(m, false, NULL);
        }
        if (i == 1 && timed) {
            *timed = m->prof;
            ts__model_step_breakdown(m, false, NULL);
        }
        for (int64_t b = 0; b < RB; b++)
            toks[b] = (int32_t)((toks[b] * 31 + 7 + i) % RV);
    }
}

TS_TEST(model_replay_keeps_every_bit_and_fills_the_standalone_column) {
    ts_model *m = tiny_model(ts_t_);
    if (!m) return;
    const size_t n = (size_t)RSTEPS * RB * RV;
    float *ref = (float *)malloc(n * sizeof(float));
    float *got = (float *)malloc(n * sizeof(float));
    ts__prof p, t;
    memset(&p, 0, sizeof p);
    memset(&t, 0, sizeof t);
    run(ts_t_, m, 0u, ref, NULL, NULL);
    /* replay at step 2 and at steps 5, 6 (back to back), and the last one */
    run(ts_t_, m, (1u << 2) | (1u << 5) | (1u << 6) | (1u << (RSTEPS - 1)), got, &p, &t);
    for (int i = 0; i < RSTEPS; i++)
        TS_CHECK_MSG(!memcmp(ref + (size_t)i * RB * RV, got + (size_t)i * RB * RV,
                             (size_t)RB * RV * sizeof(float)),
                     "step %d: logits differ with replay", i);
    /* the replay step's table: standalone medians of the re-runnable kernels only; nothing of
     * the timed columns (sec, kept) */
    const ts__prof_id replayed[] = {TS__P_LIN8, TS__P_NORM, TS__P_LIN32, TS__P_INDEXER,
                                    TS__P_TOPK, TS__P_ATTN, TS__P_GATE, TS__P_EXPERTS,
                                    TS__P_SWIGLU, TS__P_HEAD, TS__P_HC};
    for (size_t i = 0; i < sizeof replayed / sizeof replayed[0]; i++) {
        TS_CHECK_MSG(p.alone[replayed[i]] > 0, "%s: no standalone time",
                     ts__prof_name(replayed[i]));
        TS_CHECK_MSG(t.sec[replayed[i]] > 0 && t.kept[replayed[i]] == 0,
                     "%s: not timed, or marked as not re-runnable", ts__prof_name(replayed[i]));
    }
    /* the ordinary step: the sections that cannot be re-run are all kept */
    const ts__prof_id kept[] = {TS__P_KVQ, TS__P_COMPRESS, TS__P_ROPE};
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
        TS_CHECK_MSG(t.kept[kept[i]] > 0 && t.kept[kept[i]] == t.sec[kept[i]],
                     "%s: in-step time not kept", ts__prof_name(kept[i]));
        TS_CHECK_MSG(p.alone[kept[i]] == 0, "%s: replayed", ts__prof_name(kept[i]));
    }
    TS_CHECK(!t.replay && t.calls[TS__P_LIN8] > 0);
    for (int i = 0; i < TS__P_COUNT; i++) {
        TS_CHECK_MSG(p.sec[i] == 0 && p.kept[i] == 0 && p.calls[i] == 0,
                     "%s: the replay step counted as timed", ts__prof_name((ts__prof_id)i));
    }
    TS_CHECK(!m->prof.replay && !m->prof.on);
    /* the median helper: odd and even counts */
    ts__prof q;
    memset(&q, 0, sizeof q);
    double t5[5] = {5, 1, 4, 2, 3}, t4[4] = {4, 1, 3, 2};
    ts__prof_replayed(&q, TS__P_OTHER, t5, 5);
    TS_CHECK(q.alone[TS__P_OTHER] == 3.0);
    ts__prof_replayed(&q, TS__P_HEAD, t4, 4);
    TS_CHECK(q.alone[TS__P_HEAD] == 2.5);
    TS_CHECK(ts__prof_replay_begin(&q, 1000, false));
    TS_CHECK(q.replay_reps == TS__PROF_MAX_REPS && q.alone[TS__P_OTHER] == 0);
    ts__prof_replay_end(&q);
    /* cold replay: a flush buffer of twice the last-level cache while replaying, none after */
    TS_CHECK(ts__prof_replay_begin(&q, 3, true));
    TS_CHECK(q.flush != NULL && q.flush_bytes >= (size_t)2 << 20);
    ts__prof_flush_caches(&q);
    ts__prof_replay_end(&q);
    TS_CHECK(q.flush == NULL && q.flush_bytes == 0 && !q.replay);
    free(ref);
    free(got);
    ts_model_free(m);
}
