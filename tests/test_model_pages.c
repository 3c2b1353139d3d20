/* The paged caches (src/model/model_pages.c, docs/model.md §5 "Pages"): where a sequence's
 * compressed and indexer rows land never changes a bit (a model whose sequences' pages are
 * interleaved and recycled against one with a whole slot per sequence), a full pool refuses
 * the step with nothing advanced and serves again once a sequence gives its pages back, the
 * counts ts_model_get_kv_pages reports follow, and bad arguments are refused. */
#include "ts_prng.h"
#include "ts_test.h"

#include "model/model_internal.h"

#include <stdlib.h>
#include <string.h>

static void make_tokens(int32_t *t, int64_t n, int64_t vocab, uint64_t seed) {
    ts_prng p = ts_prng_seed(seed);
    for (int64_t i = 0; i < n; i++) t[i] = (int32_t)(ts_prng_u32(&p) % (uint32_t)vocab);
}

/* A schedule on sequences 0..2 of a 3-sequence model: sequence 2 takes pages first and gives
 * them back half way (reset), so that 0 and 1, growing in one batch, interleave their pages
 * and then recycle 2's. logits: [steps][2][V] of sequences 0 and 1. */
enum { STEPS = 120, PROMPT = 37 };

static ts_status run_schedule(ts_model *m, const int32_t *tok, float *logits, float *scratch) {
    const int64_t V = m->cfg.vocab_size;
    const int64_t two = 2, s2 = 2;
    TS__RETURN_IF_ERROR(ts_model_prefill(m, s2, PROMPT, tok, scratch));
    /* sequence 0's prompt in one prefill, sequence 1's token by token */
    TS__RETURN_IF_ERROR(ts_model_prefill(m, 0, PROMPT, tok, logits));
    for (int64_t i = 0; i < PROMPT; i++) {
        const int64_t s1 = 1;
        TS__RETURN_IF_ERROR(ts_model_decode(m, 1, &s1, &tok[i], logits + V));
    }
    for (int64_t t = 0; t < STEPS; t++) {
        if (t == STEPS / 3) TS__RETURN_IF_ERROR(ts_model_reset_sequence(m, s2));
        const int64_t seqs[2] = {0, 1};
        const int32_t in[2] = {tok[PROMPT + t], tok[PROMPT + STEPS + t]};
        TS__RETURN_IF_ERROR(ts_model_decode(m, two, seqs, in, logits + (t + 1) * 2 * V));
    }
    return TS_OK;
}

/* Whether sequence s's pages are not consecutive (the schedule meant to interleave them). */
static int interleaved(const ts_model *m, int64_t s) {
    const ts__pages *p = &m->pages;
    const int32_t *t = p->table + s * p->per_seq;
    for (int64_t k = 1; k < p->per_seq && t[k] >= 0; k++)
        if (t[k] != t[k - 1] + 1) return 1;
    return 0;
}

TS_TEST(model_pages_placement_keeps_every_bit) {
    ts_model_config c;
    TS_CHECK_STATUS(ts_model_config_builtin("dsv4-tiny", &c), TS_OK);
    const int64_t V = c.vocab_size, n = (STEPS + 1) * 2 * V;
    int32_t tok[PROMPT + 2 * STEPS];
    make_tokens(tok, PROMPT + 2 * STEPS, V, 20261204);
    float *ref = malloc((size_t)n * sizeof(float)), *got = malloc((size_t)n * sizeof(float));
    float *scratch = malloc((size_t)V * sizeof(float));
    ts_model *a = NULL, *b = NULL;
    TS_CHECK(ref && got && scratch);
    TS_CHECK_STATUS(ts_model_create(&c, 3, &a), TS_OK);
    TS_CHECK_STATUS(ts_model_create(&c, 3, &b), TS_OK);
    if (!ref || !got || !scratch || !a || !b) goto done;
    /* a: the default (one 256-token page per sequence: a whole slot); b: 16-token pages, a pool
     * just large enough for sequences 0 and 1 at the end: only if 2's pages come back */
    ts_model_kv_pages pa, pb;
    TS_CHECK_STATUS(ts_model_get_kv_pages(a, &pa), TS_OK);
    TS_CHECK(pa.paged && pa.page_tokens == 256 && pa.pages_total == 3 && pa.pages_per_sequence == 1);
    const int64_t peak = 2 * ((PROMPT + STEPS + 15) / 16);
    TS_CHECK_STATUS(ts_model_set_kv_pages(b, 16, peak), TS_OK);
    TS_CHECK_STATUS(ts_model_get_kv_pages(b, &pb), TS_OK);
    TS_CHECK(pb.paged && pb.page_tokens == 16 && pb.pages_total == peak && pb.pages_free == peak &&
             pb.pages_per_sequence == 16);
    TS_CHECK_STATUS(run_schedule(a, tok, ref, scratch), TS_OK);
    TS_CHECK_STATUS(run_schedule(b, tok, got, scratch), TS_OK);
    TS_CHECK_MSG(interleaved(b, 0) && interleaved(b, 1),
                 "the schedule did not interleave the sequences' pages");
    TS_CHECK_MSG(memcmp(ref, got, (size_t)n * sizeof(float)) == 0,
                 "paged placement changed the logits");
    /* both sequences hold ceil(157 / 16) = 10 pages: the whole pool */
    TS_CHECK_STATUS(ts_model_get_kv_pages(b, &pb), TS_OK);
    TS_CHECK_EQ_INT(pb.pages_free, 0);
    TS_CHECK_STATUS(ts_model_reset_sequence(b, 0), TS_OK);
    TS_CHECK_STATUS(ts_model_reset_sequence(b, 1), TS_OK);
    TS_CHECK_STATUS(ts_model_get_kv_pages(b, &pb), TS_OK);
    TS_CHECK_EQ_INT(pb.pages_free, peak);
done:
    ts_model_free(a);
    ts_model_free(b);
    free(ref);
    free(got);
    free(scratch);
}

TS_TEST(model_pages_full_pool_refuses_the_step) {
    ts_model_config c;
    TS_CHECK_STATUS(ts_model_config_builtin("dsv4-tiny", &c), TS_OK);
    const int64_t V = c.vocab_size;
    ts_model *m = NULL;
    TS_CHECK_STATUS(ts_model_create(&c, 2, &m), TS_OK);
    float *lg = malloc((size_t)(2 * V) * sizeof(float)), *lg2 = malloc((size_t)V * sizeof(float));
    if (!m || !lg || !lg2) goto done;
    int32_t tok[64];
    make_tokens(tok, 64, V, 7);
    /* 3 pages of 16 tokens: sequence 0's 48-token prompt takes them all */
    TS_CHECK_STATUS(ts_model_set_kv_pages(m, 16, 3), TS_OK);
    TS_CHECK_STATUS(ts_model_prefill(m, 0, 48, tok, lg), TS_OK);
    ts_model_kv_pages p;
    TS_CHECK_STATUS(ts_model_get_kv_pages(m, &p), TS_OK);
    TS_CHECK_EQ_INT(p.pages_free, 0);
    /* a step that needs a page: refused, nothing advanced on either sequence */
    const int64_t s01[2] = {0, 1}, s1 = 1, s0 = 0;
    const int32_t t2[2] = {tok[48], tok[49]};
    TS_CHECK_STATUS(ts_model_decode(m, 2, s01, t2, lg), TS_ERR_OUT_OF_MEMORY);
    TS_CHECK_STATUS(ts_model_decode(m, 1, &s0, t2, lg), TS_ERR_OUT_OF_MEMORY);
    TS_CHECK_STATUS(ts_model_prefill(m, 1, 5, tok, lg), TS_ERR_OUT_OF_MEMORY);
    TS_CHECK_STATUS(ts_model_prefill_random(m, 1, 8, 1), TS_ERR_OUT_OF_MEMORY);
    TS_CHECK_EQ_INT(ts_model_sequence_position(m, 0), 48);
    TS_CHECK_EQ_INT(ts_model_sequence_position(m, 1), 0);
    /* sequence 0 gives its pages back: sequence 1 runs, with the logits of a fresh model */
    TS_CHECK_STATUS(ts_model_reset_sequence(m, 0), TS_OK);
    TS_CHECK_STATUS(ts_model_prefill(m, 1, 40, tok, lg), TS_OK);
    TS_CHECK_STATUS(ts_model_decode(m, 1, &s1, &tok[40], lg), TS_OK);
    ts_model *f = NULL;
    TS_CHECK_STATUS(ts_model_create(&c, 1, &f), TS_OK);
    if (f) {
        TS_CHECK_STATUS(ts_model_prefill(f, 0, 40, tok, lg2), TS_OK);
        TS_CHECK_STATUS(ts_model_decode(f, 1, &s0, &tok[40], lg2), TS_OK);
        TS_CHECK_MSG(memcmp(lg, lg2, (size_t)V * sizeof(float)) == 0,
                     "recycled pages changed the logits");
        ts_model_free(f);
    }
    TS_CHECK_STATUS(ts_model_get_kv_pages(m, &p), TS_OK);
    TS_CHECK_EQ_INT(p.pages_free, 0);
    TS_CHECK_EQ_INT(ts_model_sequence_position(m, 1), 41);
done:
    ts_model_free(m);
    free(lg);
    free(lg2);
}

TS_TEST(model_pages_bad_arguments) {
    ts_model_config c;
    TS_CHECK_STATUS(ts_model_config_builtin("dsv4-tiny", &c), TS_OK);
    ts_model *m = NULL, *v = NULL;
    TS_CHECK_STATUS(ts_model_create(&c, 2, &m), TS_OK);
    if (!m) return;
    ts_model_kv_pages p;
    TS_CHECK_STATUS(ts_model_get_kv_pages(NULL, &p), TS_ERR_NULL_POINTER);
    TS_CHECK_STATUS(ts_model_get_kv_pages(m, NULL), TS_ERR_NULL_POINTER);
    TS_CHECK_STATUS(ts_model_set_kv_pages(NULL, 16, 4), TS_ERR_NULL_POINTER);
    /* dsv4-tiny's ratios are 4 and 8 */
    TS_CHECK_STATUS(ts_model_set_kv_pages(m, 12, 4), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_model_set_kv_pages(m, 512, 4), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_model_set_kv_pages(m, -8, 4), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_model_set_kv_pages(m, 16, 0), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_model_set_kv_pages(m, 16, (int64_t)1 << 40), TS_ERR_INVALID_ARGUMENT);
    /* a sequence holding tokens: refused, the pool kept */
    const int64_t s = 1;
    const int32_t t = 3;
    TS_CHECK_STATUS(ts_model_decode(m, 1, &s, &t, NULL), TS_OK);
    TS_CHECK_STATUS(ts_model_set_kv_pages(m, 16, 4), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_model_get_kv_pages(m, &p), TS_OK);
    TS_CHECK(p.page_tokens == 256 && p.pages_total == 2 && p.pages_free == 1);
    /* the default page, explicitly */
    TS_CHECK_STATUS(ts_model_reset_sequence(m, 1), TS_OK);
    TS_CHECK_STATUS(ts_model_set_kv_pages(m, 0, 5), TS_OK);
    TS_CHECK_STATUS(ts_model_get_kv_pages(m, &p), TS_OK);
    TS_CHECK(p.page_tokens == 256 && p.pages_total == 5 && p.pages_free == 5);
    /* V3.2 attention: not paged, its slots counted as pages */
    ts_model_config c32;
    TS_CHECK_STATUS(ts_model_config_builtin("dsv32-tiny", &c32), TS_OK);
    TS_CHECK_STATUS(ts_model_create(&c32, 2, &v), TS_OK);
    if (v) {
        TS_CHECK_STATUS(ts_model_set_kv_pages(v, 64, 4), TS_ERR_UNSUPPORTED);
        TS_CHECK_STATUS(ts_model_decode(v, 1, &s, &t, NULL), TS_OK);
        TS_CHECK_STATUS(ts_model_get_kv_pages(v, &p), TS_OK);
        TS_CHECK(!p.paged && p.page_tokens == 64 && p.pages_per_sequence == 4 &&
                 p.pages_total == 8 && p.pages_free == 7);
    }
    ts_model_free(m);
    ts_model_free(v);
}
