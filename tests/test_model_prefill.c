/* ts_model_prefill (src/model/model_prefill.c): a prompt prefilled in chunks gives the same
 * bits as decoding it token by token: every logit, the caches and compressor states after it
 * (compared byte for byte and by decoding on), on dsv4-tiny, dsv32-tiny and a config with a
 * ratio-128 layer; chunks split at odd points, prefill after decoded tokens, 1 and 2 threads,
 * every ISA path. Bad arguments are refused before anything advances. */
#include "ts_prng.h"
#include "ts_test.h"

#include "model/model_internal.h"
#include "model/model_v32.h"

#include <stdlib.h>
#include <string.h>

/* The token stream of the cases (the same for both sequences). */
static void make_tokens(int32_t *t, int64_t n, int64_t vocab, uint64_t seed) {
    ts_prng p = ts_prng_seed(seed);
    for (int64_t i = 0; i < n; i++) t[i] = (int32_t)(ts_prng_u32(&p) % (uint32_t)vocab);
}

static int same_bytes(const void *a, const void *b, size_t n) { return memcmp(a, b, n) == 0; }

/* Sequences a and b hold the same cache state byte for byte; else the first part that differs
 * is named in `what`. */
static int same_state(const ts_model *m, int64_t a, int64_t b, char *what, size_t cap) {
    const ts_model_config *c = &m->cfg;
    if (m->pos[a] != m->pos[b]) {
        snprintf(what, cap, "positions %lld / %lld", (long long)m->pos[a], (long long)m->pos[b]);
        return 0;
    }
    for (int64_t L = 0; L < c->n_layers; L++) {
        const ts__layer_cache *lc = &m->caches[L];
        const ts__layer *ly = &m->layers[L];
#define CMP(ptr, per, name)                                                                  \
    do {                                                                                     \
        const size_t n_ = (size_t)(per);                                                     \
        if (!same_bytes((const uint8_t *)(ptr) + (size_t)a * n_,                             \
                        (const uint8_t *)(ptr) + (size_t)b * n_, n_)) {                      \
            snprintf(what, cap, "layer %lld: %s", (long long)L, name);                       \
            return 0;                                                                        \
        }                                                                                    \
    } while (0)
        if (c->attention == TS_MODEL_ATTN_V32) {
            const int64_t per = ts__model_v32_blocks(c) * TS__V32_PAGE;
            CMP(lc->kv32, per * TS__V32_ROW, "latent cache");
            CMP(lc->ik32, per * TS__V32_IROW, "indexer key cache");
            continue;
        }
        CMP(lc->win, c->window_size * 584, "window ring");
        const int64_t r = ly->ratio;
        if (r == 0) continue;
        /* the rows written so far, each through its sequence's pages */
        const ts__pages *pg = &m->pages;
        const int64_t rpp = pg->page_tokens / r, irpp = pg->page_tokens / 4;
        for (int64_t j = 0; j < m->pos[a] / r; j++) {
            char ra[584], rb[584];
            ts__model_kv_copy((uint8_t *)ra, 1, 0, lc->comp, rpp, ts__pages_row(pg, a, j, rpp));
            ts__model_kv_copy((uint8_t *)rb, 1, 0, lc->comp, rpp, ts__pages_row(pg, b, j, rpp));
            if (!same_bytes(ra, rb, 584)) {
                snprintf(what, cap, "layer %lld: compressed cache row %lld", (long long)L,
                         (long long)j);
                return 0;
            }
        }
        for (int k = 0; k < (r == 4 ? 2 : 1); k++) {
            const ts__compressor *cp = k ? &ly->icomp : &ly->comp;
            const ts__comp_state *cs = k ? lc->ics : lc->cs;
            const size_t nf = (size_t)(2 * cp->ratio * cp->coff * cp->d) * sizeof(float);
            if (!same_bytes(cs[a].kv, cs[b].kv, nf) || !same_bytes(cs[a].score, cs[b].score, nf)) {
                snprintf(what, cap, "layer %lld: %s state", (long long)L,
                         k ? "indexer compressor" : "compressor");
                return 0;
            }
        }
        for (int64_t j = 0; r == 4 && j < m->pos[a] / 4; j++) {
            const int64_t ia = ts__pages_row(pg, a, j, irpp), ib = ts__pages_row(pg, b, j, irpp);
            if (!same_bytes(lc->icache + ia * 64, lc->icache + ib * 64, 64) ||
                lc->icache_sf[ia] != lc->icache_sf[ib]) {
                snprintf(what, cap, "layer %lld: index cache row %lld", (long long)L, (long long)j);
                return 0;
            }
        }
#undef CMP
    }
    return 1;
}

typedef struct pcase {
    const char *label;
    ts_model_config cfg;
    int64_t chunk;  /* rows per chunk; 0: the default */
    int64_t before; /* tokens decoded before the prefill (both sequences) */
    int64_t n;      /* tokens prefilled */
    int64_t after;  /* tokens decoded after it (both sequences, one batch) */
    int all;        /* ts_model_prefill_all_logits, else ts_model_prefill's last logits */
} pcase;

/* Sequence 0 decodes the stream token by token, sequence 1 decodes `before` tokens, prefills
 * n and decodes on: the same logits bits at every step and the same cache state after the
 * prefill and at the end. */
static void run_case(ts_test_ctx *ts_t_, const pcase *pc, const char *tag) {
    const ts_model_config *c = &pc->cfg;
    const int64_t V = c->vocab_size, total = pc->before + pc->n + pc->after;
    ts_model *m = NULL;
    TS_CHECK_STATUS(ts_model_create(c, 2, &m), TS_OK);
    if (!m) return;
    if (pc->chunk) m->prefill_rows = pc->chunk;
    int32_t *tok = malloc((size_t)total * sizeof *tok);
    float *ref = malloc((size_t)(total * V) * sizeof(float));
    float *got = malloc((size_t)(total * V) * sizeof(float));
    float *two = malloc((size_t)(2 * V) * sizeof(float));
    TS_CHECK(tok && ref && got && two);
    if (!tok || !ref || !got || !two) goto done;
    make_tokens(tok, total, V, 20261201 + (uint64_t)pc->n);
    int64_t s0 = 0, s1 = 1;
    for (int64_t i = 0; i < pc->before; i++) {
        TS_CHECK_STATUS(ts_model_decode(m, 1, &s0, &tok[i], ref + i * V), TS_OK);
        TS_CHECK_STATUS(ts_model_decode(m, 1, &s1, &tok[i], got + i * V), TS_OK);
    }
    for (int64_t i = pc->before; i < pc->before + pc->n; i++)
        TS_CHECK_STATUS(ts_model_decode(m, 1, &s0, &tok[i], ref + i * V), TS_OK);
    float *pl = got + pc->before * V;
    if (pc->all) {
        TS_CHECK_STATUS(ts_model_prefill_all_logits(m, s1, pc->n, tok + pc->before, pl), TS_OK);
        for (int64_t i = 0; i < pc->n; i++)
            if (!same_bytes(pl + i * V, ref + (pc->before + i) * V, (size_t)V * 4)) {
                TS_CHECK_MSG(0, "%s %s: prefill row %lld (position %lld): other logits bits",
                             pc->label, tag, (long long)i, (long long)(pc->before + i));
                break;
            }
    } else {
        float *last = pl + (pc->n - 1) * V;
        TS_CHECK_STATUS(ts_model_prefill(m, s1, pc->n, tok + pc->before, last), TS_OK);
        TS_CHECK_MSG(same_bytes(last, ref + (pc->before + pc->n - 1) * V, (size_t)V * 4),
                     "%s %s: the last logits differ", pc->label, tag);
    }
    TS_CHECK_EQ_INT(ts_model_sequence_position(m, 1), pc->before + pc->n);
    char what[96];
    TS_CHECK_MSG(same_state(m, 0, 1, what, sizeof what), "%s %s: after the prefill: %s",
                 pc->label, tag, what);
    /* both on, in one batch (the workspace grew under the decode step too) */
    const int64_t seqs[2] = {1, 0};
    for (int64_t i = pc->before + pc->n; i < total; i++) {
        const int32_t tt[2] = {tok[i], tok[i]};
        TS_CHECK_STATUS(ts_model_decode(m, 2, seqs, tt, two), TS_OK);
        TS_CHECK_MSG(same_bytes(two, two + V, (size_t)V * 4), "%s %s: decode step %lld after "
                     "the prefill: other logits bits", pc->label, tag, (long long)i);
    }
    TS_CHECK_MSG(same_state(m, 0, 1, what, sizeof what), "%s %s: at the end: %s", pc->label,
                 tag, what);
done:
    free(tok);
    free(ref);
    free(got);
    free(two);
    ts_model_free(m);
}

static ts_model_config builtin(ts_test_ctx *ts_t_, const char *name) {
    ts_model_config c;
    memset(&c, 0, sizeof c);
    TS_CHECK_STATUS(ts_model_config_builtin(name, &c), TS_OK);
    return c;
}

/* dsv4-tiny: window 16, ratios 0 / 4 / 8, index_topk 8 (the selection acts from position 35);
 * 72 tokens from position 0 are a chunk of the default 48 rows and one of 24. */
TS_TEST(model_prefill_dsv4_tiny_same_bits_as_decode) {
    const ts_model_config c = builtin(ts_t_, "dsv4-tiny");
    const pcase cases[] = {
        {"dsv4-tiny 72", c, 0, 0, 72, 6, 1},
        /* after decoded tokens, chunks of 7 (boundaries at odd positions), last logits only */
        {"dsv4-tiny 5+60 chunk 7", c, 7, 5, 60, 4, 0},
        /* shorter than the window, from inside a compression block */
        {"dsv4-tiny 3+9", c, 0, 3, 9, 3, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(ts_t_, &cases[i], "");
}

/* dsv32-tiny: index_topk 16 (the selection acts from position 16). */
TS_TEST(model_prefill_dsv32_tiny_same_bits_as_decode) {
    const ts_model_config c = builtin(ts_t_, "dsv32-tiny");
    const pcase cases[] = {
        {"dsv32-tiny 72", c, 0, 0, 72, 6, 1},
        {"dsv32-tiny 9+40 chunk 5", c, 5, 9, 40, 3, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(ts_t_, &cases[i], "");
}

/* Ratios 0 / 4 / 128: 200 tokens are five chunks (4 x 48, 8) crossing the window, the
 * indexer's top-k becoming active and the first ratio-128 block (position 127). */
TS_TEST(model_prefill_ratio_128_chunks_split) {
    ts_model_config c = builtin(ts_t_, "dsv4-tiny");
    c.compress_ratios[2] = 128;
    const pcase pc = {"ratios 0/4/128, 200", c, 0, 0, 200, 3, 1};
    run_case(ts_t_, &pc, "");
    /* from position 120 (inside the ratio-128 block), chunks of 3 */
    const pcase pc2 = {"ratios 0/4/128, 120+20 chunk 3", c, 3, 120, 20, 2, 0};
    run_case(ts_t_, &pc2, "");
}

TS_TEST(model_prefill_same_bits_for_1_and_2_threads) {
    const int saved = ts_get_num_threads();
    const pcase cases[] = {
        {"dsv4-tiny 4+50 chunk 16", builtin(ts_t_, "dsv4-tiny"), 16, 4, 50, 2, 1},
        {"dsv32-tiny 4+50 chunk 16", builtin(ts_t_, "dsv32-tiny"), 16, 4, 50, 2, 1},
    };
    for (int th = 1; th <= 2; th++) {
        TS_CHECK_STATUS(ts_set_num_threads(th), TS_OK);
        char tag[32];
        snprintf(tag, sizeof tag, "(%d threads)", th);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(ts_t_, &cases[i], tag);
    }
    (void)ts_set_num_threads(saved);
}

TS_TEST(model_prefill_same_bits_every_isa) {
    const ts_isa saved = ts_get_isa();
    const pcase cases[] = {
        {"dsv4-tiny 2+40 chunk 11", builtin(ts_t_, "dsv4-tiny"), 11, 2, 40, 2, 1},
        {"dsv32-tiny 2+40 chunk 11", builtin(ts_t_, "dsv32-tiny"), 11, 2, 40, 2, 1},
    };
    int isas[TS_ISA_COUNT_];
    const int nisa = ts_test_isas(isas);
    for (int k = 0; k < nisa; k++) {
        if (ts_set_isa((ts_isa)isas[k]) != TS_OK) continue;
        char tag[32];
        snprintf(tag, sizeof tag, "(isa %d)", isas[k]);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(ts_t_, &cases[i], tag);
    }
    (void)ts_set_isa(saved);
}

/* logits NULL advances the caches only; the last logits are the last row of all of them. */
TS_TEST(model_prefill_logits_variants) {
    ts_model_config c = builtin(ts_t_, "dsv4-tiny");
    const int64_t V = c.vocab_size, n = 30;
    ts_model *m = NULL;
    TS_CHECK_STATUS(ts_model_create(&c, 3, &m), TS_OK);
    if (!m) return;
    int32_t tok[31];
    make_tokens(tok, 31, V, 5);
    float *all = malloc((size_t)(n * V) * sizeof(float));
    float *last = malloc((size_t)V * sizeof(float)), *a = malloc((size_t)V * sizeof(float));
    float *b = malloc((size_t)V * sizeof(float));
    TS_CHECK(all && last && a && b);
    if (all && last && a && b) {
        TS_CHECK_STATUS(ts_model_prefill_all_logits(m, 0, n, tok, all), TS_OK);
        TS_CHECK_STATUS(ts_model_prefill(m, 1, n, tok, last), TS_OK);
        TS_CHECK(same_bytes(last, all + (n - 1) * V, (size_t)V * 4));
        TS_CHECK_STATUS(ts_model_prefill(m, 2, n, tok, NULL), TS_OK);
        char what[96];
        TS_CHECK_MSG(same_state(m, 0, 2, what, sizeof what), "%s", what);
        int64_t s = 0;
        TS_CHECK_STATUS(ts_model_decode(m, 1, &s, &tok[n], a), TS_OK);
        s = 2;
        TS_CHECK_STATUS(ts_model_decode(m, 1, &s, &tok[n], b), TS_OK);
        TS_CHECK(same_bytes(a, b, (size_t)V * 4));
    }
    free(all);
    free(last);
    free(a);
    free(b);
    ts_model_free(m);
}

TS_TEST(model_prefill_rejects_bad_input) {
    ts_model_config c = builtin(ts_t_, "dsv4-tiny");
    c.max_seq_len = 16; /* a multiple of the ratios 4 and 8 */
    const int64_t V = c.vocab_size;
    ts_model *m = NULL;
    TS_CHECK_STATUS(ts_model_create(&c, 2, &m), TS_OK);
    if (!m) return;
    int32_t tok[17];
    make_tokens(tok, 17, V, 9);
    float *lg = malloc((size_t)(17 * V) * sizeof(float));
    TS_CHECK(lg != NULL);
    if (!lg) {
        ts_model_free(m);
        return;
    }
    lg[0] = 12345.0f;
    TS_CHECK_STATUS(ts_model_prefill(NULL, 0, 2, tok, lg), TS_ERR_NULL_POINTER);
    TS_CHECK_STATUS(ts_model_prefill(m, 0, 2, NULL, lg), TS_ERR_NULL_POINTER);
    TS_CHECK(strstr(ts_last_error(), "tokens") != NULL);
    TS_CHECK_STATUS(ts_model_prefill_all_logits(m, 0, 2, tok, NULL), TS_ERR_NULL_POINTER);
    TS_CHECK(strstr(ts_last_error(), "logits") != NULL);
    TS_CHECK_STATUS(ts_model_prefill(m, 2, 2, tok, lg), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "seq = 2") != NULL);
    TS_CHECK_STATUS(ts_model_prefill(m, -1, 2, tok, lg), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_model_prefill(m, 0, 0, tok, lg), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "n_tokens = 0") != NULL);
    TS_CHECK_STATUS(ts_model_prefill(m, 0, -3, tok, lg), TS_ERR_INVALID_ARGUMENT);
    int32_t bad[4] = {1, 2, 3, (int32_t)V};
    TS_CHECK_STATUS(ts_model_prefill(m, 0, 4, bad, lg), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "tokens[3]") != NULL);
    bad[3] = -1;
    TS_CHECK_STATUS(ts_model_prefill_all_logits(m, 0, 4, bad, lg), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_model_prefill(m, 0, 17, tok, lg), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "max_seq_len") != NULL);
    TS_CHECK(lg[0] == 12345.0f);
    TS_CHECK_EQ_INT(ts_model_sequence_position(m, 0), 0);
    TS_CHECK_EQ_INT(ts_model_sequence_position(m, 1), 0);
    /* up to the capacity exactly; then the sequence is full for both calls */
    int64_t s = 0;
    TS_CHECK_STATUS(ts_model_decode(m, 1, &s, &tok[0], lg), TS_OK);
    TS_CHECK_STATUS(ts_model_prefill(m, 0, 16, tok + 1, lg), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "position 1") != NULL);
    TS_CHECK_STATUS(ts_model_prefill(m, 0, 15, tok + 1, lg), TS_OK);
    TS_CHECK_EQ_INT(ts_model_sequence_position(m, 0), 16);
    TS_CHECK_STATUS(ts_model_prefill(m, 0, 1, tok, lg), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_model_decode(m, 1, &s, &tok[0], lg), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_EQ_INT(ts_model_sequence_position(m, 0), 16);
    /* the other sequence is untouched and still prefills */
    TS_CHECK_STATUS(ts_model_prefill(m, 1, 16, tok, lg), TS_OK);
    free(lg);
    ts_model_free(m);
}
