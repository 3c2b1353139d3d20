/* The expert-parallel V3 / V3.2 model (ts_model_load_dir_ep of the tiny checkpoints of
 * tests/gen/gen_hf_v3.py; src/model/model_ep_v3.c) at every rank count: each rank binds only
 * its routed experts, decodes its own sequences (a different number per rank, some none) and
 * prefills its own prompt (chunk counts differing across ranks), and every logit is the bits
 * of the single-process ts_model_load_dir model decoding the same rows; the statistics count
 * every selection once; a bad step on one rank gives its code there and TS_ERR_PEER naming it
 * elsewhere, with nothing advanced. */
#include "ep_test_util.h"
#include "model/hf_v3.h"
#include "test_hf_v3_ckpt.h"
#include "tilestack/model_ep.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define V3_STEPS 3
#define V3_MAXB 5 /* rows_of <= 4: the last sequence is the prompt's */

static int64_t rows_of(int q) { return ((int64_t)(q + 1) * 3) % 5; } /* rank 4 of 8 none */
static int64_t prompt_of(int q) { return (int64_t)((q * 7 + 13) % 23) * (q % 3 != 1); }

static int32_t token_of(int64_t V, int q, int step, int64_t i) {
    ts_prng p = ts_prng_seed(1000003u * (uint64_t)q + 7919u * (uint64_t)step + (uint64_t)i + 11);
    return (int32_t)(ts_prng_next(&p) % (uint64_t)V);
}

/* Decode steps, then a prefill on a fresh sequence, each against the single-process model. */
static void compare(ts_test_ctx *ts_t_, ts_model *ep, ts_model *ref, const char *what) {
    const int q = g_ep_rank;
    const int64_t V = ts_model_get_config(ref)->vocab_size, n = rows_of(q), np = prompt_of(q);
    float *la = malloc((size_t)(60 * V) * 4), *lb = malloc((size_t)(60 * V) * 4);
    int64_t seqs[V3_MAXB];
    int32_t tok[60];
    for (int s = 0; s < V3_STEPS; s++) {
        for (int64_t i = 0; i < n; i++) seqs[i] = i, tok[i] = token_of(V, q, s, i);
        TS_CHECK_STATUS(ts_model_decode(ep, n, seqs, tok, la), TS_OK);
        if (n > 0) {
            TS_CHECK_STATUS(ts_model_decode(ref, n, seqs, tok, lb), TS_OK);
            TS_CHECK_MSG(memcmp(la, lb, (size_t)(n * V) * 4) == 0, "%s: decode logits differ from "
                         "the single process at step %d (rank %d of %d)", what, s, q, g_ep_size);
        }
    }
    /* a prompt longer than one chunk on some ranks: every row's logits */
    for (int64_t i = 0; i < np; i++) tok[i] = token_of(V, q, 99, i);
    const int64_t seq = V3_MAXB - 1;
    TS_CHECK_STATUS(ts_model_prefill_all_logits(ep, seq, np, np ? tok : NULL, la), TS_OK);
    if (np) {
        TS_CHECK_STATUS(ts_model_prefill_all_logits(ref, seq, np, tok, lb), TS_OK);
        TS_CHECK_MSG(memcmp(la, lb, (size_t)(np * V) * 4) == 0, "%s: prefill logits differ from "
                     "the single process (rank %d of %d)", what, q, g_ep_size);
    }
    TS_CHECK(ts_model_sequence_position(ep, seq) == np);
    /* a bad step on rank 1: its own code, TS_ERR_PEER naming it elsewhere, nothing advanced */
    if (g_ep_size > 1) {
        int32_t bad = q == 1 ? (int32_t)V : 0;
        const int64_t s0 = 0;
        const ts_status st = ts_model_decode(ep, 1, &s0, &bad, la);
        TS_CHECK_STATUS(st, q == 1 ? TS_ERR_INVALID_ARGUMENT : TS_ERR_PEER);
        if (q != 1) TS_CHECK(strstr(ts_last_error(), "rank 1") != NULL);
        TS_CHECK(ts_model_sequence_position(ep, 0) == (n > 0 ? V3_STEPS : 0));
    }
    free(la);
    free(lb);
}

static void one(ts_test_ctx *ts_t_, const char *golden_file) {
    golden g;
    uint8_t *buf = NULL;
    if (!tv3_load_golden(ts_t_, golden_file, &g, &buf)) return;
    char root[64] = "/tmp/ts_model_ep_v3_XXXXXX", dir[96];
    if (g_ep_rank == 0) {
        TS_CHECK(mkdtemp(root) != NULL);
        snprintf(dir, sizeof dir, "%s/ckpt", root);
        TS_CHECK(tv3_write_ckpt(&g, dir, NULL, NULL));
    }
    ep_test_bcast(root, (int)sizeof root, MPI_CHAR, 0); /* after the write */
    snprintf(dir, sizeof dir, "%s/ckpt", root);
    ts_model *ref = NULL, *ep = NULL;
    TS_CHECK_STATUS(ts_model_load_dir(dir, V3_MAXB, &ref), TS_OK);
    const ts_model_ep_options o = {.timeout_s = TS_EP_TEST_TIMEOUT_S};
    const ts_status st = ts_model_load_dir_ep(dir, MPI_COMM_WORLD, V3_MAXB, &o, &ep);
    const int64_t E = ref ? ts_model_get_config(ref)->n_routed_experts : 0;
    if (E % g_ep_size) {
        TS_CHECK_STATUS(st, TS_ERR_INVALID_ARGUMENT);
        TS_CHECK(strstr(ts_last_error(), "not divisible") != NULL);
    } else {
        TS_CHECK_STATUS(st, TS_OK);
    }
    if (ep && ref) {
        /* only this rank's experts are bound */
        const ts__v3_config *c = &ep->v3->c;
        const int64_t El = E / g_ep_size, lo = g_ep_rank * El;
        for (int64_t L = c->first_dense; L < c->n_layers; L++)
            for (int64_t e = 0; e < E; e++)
                TS_CHECK_MSG((ep->v3->layers[L].ew1[e] != NULL) == (e >= lo && e < lo + El),
                             "rank %d, layer %lld: expert %lld bound wrongly", g_ep_rank,
                             (long long)L, (long long)e);
        compare(ts_t_, ep, ref, golden_file);
        /* the statistics: every (row, slot) of every MoE layer counted once, on its owner */
        ts_model_ep_stats s;
        TS_CHECK_STATUS(ts_model_ep_get_stats(ep, &s), TS_OK);
        int64_t mine = rows_of(g_ep_rank) * V3_STEPS + prompt_of(g_ep_rank), all = 0, counted = 0;
        MPI_Allreduce(&mine, &all, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        for (int64_t e = 0; e < s.num_experts; e++) counted += s.expert_tokens[e];
        TS_CHECK_MSG(counted == all * c->topk * (c->n_layers - c->first_dense),
                     "%lld selections counted, %lld made", (long long)counted,
                     (long long)(all * c->topk * (c->n_layers - c->first_dense)));
    }
    ts_model_free(ep);
    ts_model_free(ref);
    ep_test_barrier();
    if (g_ep_rank == 0) {
        char cmd[160];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
        TS_CHECK(system(cmd) == 0);
    }
    tv3_free_golden(&g, buf);
}

TS_TEST(model_ep_v3_logits_match_single_process) { one(ts_t_, "hf_v3_tiny.bin"); }
TS_TEST(model_ep_v32_dir_logits_match_single_process) { one(ts_t_, "hf_v32_tiny.bin"); }
TS_TEST(model_ep_v3_fp8_logits_match_single_process) { one(ts_t_, "hf_v3_fp8_tiny.bin"); }
