/* The expert-parallel model (model_ep.h) at every rank count: each rank decodes its own
 * sequences (a different number per rank, some ranks none) and every logit is bit-identical to
 * a single-process ts_model_create model decoding the same sequences (each rank builds one
 * locally: dsv4-tiny is cheap), through the fused and the unfused Mega MoE paths, with every rank its own node, and from a
 * weight file, and from a checkpoint directory (each rank binding only its experts); the statistics against the routing (hash layer exactly, every layer's totals);
 * E % R != 0, configs differing across ranks, bad step input on one rank (specific code there,
 * TS_ERR_PEER naming it elsewhere, the model still usable), a rank that skips a step (timeout
 * naming it). */
#include "ep_test_util.h"
#include "model/model_internal.h"
#include "tilestack/model_ep.h"

#include <stdio.h>
#include <unistd.h>

#define MEP_STEPS 3
#define MEP_MAXB 4

/* Sequences of rank q: 0 .. n_of(q) - 1 (rank 4 of 8 has none). */
static int64_t n_of(int q) { return ((int64_t)(q + 1) * 3) % 5; }

static int32_t token_of(const ts_model_config *c, int q, int step, int64_t i) {
    ts_prng p = ts_prng_seed(1000003u * (uint64_t)q + 7919u * (uint64_t)step + (uint64_t)i + 1);
    return (int32_t)(ts_prng_next(&p) % (uint64_t)c->vocab_size);
}

static void step_tokens(const ts_model_config *c, int q, int step, int64_t n, int64_t *seqs,
                        int32_t *tok) {
    for (int64_t i = 0; i < n; i++) {
        seqs[i] = i;
        tok[i] = token_of(c, q, step, i);
    }
}

static bool tiny(ts_test_ctx *ts_t_, ts_model_config *c) {
    TS_CHECK_STATUS(ts_model_config_builtin("dsv4-tiny", c), TS_OK);
    return c->n_routed_experts % g_ep_size == 0;
}

/* Decodes MEP_STEPS steps on ep and on a local single-process model; logits must match. */
static void decode_and_compare(ts_test_ctx *ts_t_, const ts_model_config *c, ts_model *ep,
                               ts_model *ref, const char *what) {
    const int q = g_ep_rank;
    const int64_t n = n_of(q), V = c->vocab_size;
    float *la = malloc((size_t)(MEP_MAXB * V) * 4), *lb = malloc((size_t)(MEP_MAXB * V) * 4);
    int64_t seqs[MEP_MAXB];
    int32_t tok[MEP_MAXB];
    for (int s = 0; s < MEP_STEPS; s++) {
        step_tokens(c, q, s, n, seqs, tok);
        TS_CHECK_STATUS(ts_model_decode(ep, n, seqs, tok, la), TS_OK);
        if (n > 0) {
            TS_CHECK_STATUS(ts_model_decode(ref, n, seqs, tok, lb), TS_OK);
            TS_CHECK_MSG(memcmp(la, lb, (size_t)(n * V) * 4) == 0,
                         "%s: logits differ from the single-process model at step %d (rank %d, "
                         "R = %d)", what, s, q, g_ep_size);
        }
    }
    for (int64_t i = 0; i < n; i++) TS_CHECK(ts_model_sequence_position(ep, i) == MEP_STEPS);
    free(la);
    free(lb);
}

TS_TEST(model_ep_logits_match_single_process_fused_unfused_loaded) {
    ts_model_config c;
    if (!tiny(ts_t_, &c)) return;
    ts_model *ref = NULL;
    TS_CHECK_STATUS(ts_model_create(&c, MEP_MAXB, &ref), TS_OK);
    if (!ref) return;
    char path[64] = "/tmp/ts_model_ep_XXXXXX";
    if (g_ep_rank == 0) {
        int fd = mkstemp(path);
        TS_CHECK(fd >= 0);
        if (fd >= 0) close(fd);
        TS_CHECK_STATUS(ts_model_save_weights(ref, path), TS_OK);
    }
    ep_test_bcast(path, (int)sizeof path, MPI_CHAR, 0);
    /* v 3: every rank its own node (forced), so the model takes the unfused path by itself */
    static const char *what[4] = {"fused", "unfused", "loaded (fused)", "one node per rank"};
    for (int v = 0; v < 4; v++) {
        ts_model *ep = NULL;
        ts_model_ep_options o = {.unfused = v == 1, .timeout_s = TS_EP_TEST_TIMEOUT_S,
                                 .ranks_per_node = v == 3 ? 1 : 0};
        if (v != 2) TS_CHECK_STATUS(ts_model_create_ep(&c, MPI_COMM_WORLD, MEP_MAXB, &o, &ep), TS_OK);
        else TS_CHECK_STATUS(ts_model_load_ep(path, MPI_COMM_WORLD, MEP_MAXB, &o, &ep), TS_OK);
        for (int64_t i = 0; i < MEP_MAXB; i++) ts_model_reset_sequence(ref, i);
        if (ep) decode_and_compare(ts_t_, &c, ep, ref, what[v]);
        if (ep && v == 0) { /* it holds only its rank's experts: saving is refused, no file */
            TS_CHECK_STATUS(ts_model_save_weights(ep, "/tmp/ts_model_ep_never"), TS_ERR_UNSUPPORTED);
            TS_CHECK(strstr(ts_last_error(), "expert-parallel") != NULL);
            TS_CHECK(access("/tmp/ts_model_ep_never", F_OK) != 0);
        }
        ts_model_free(ep);
    }
    ep_test_barrier();
    if (g_ep_rank == 0) unlink(path);
    /* a missing file on rank 0: TS_ERR_IO there, TS_ERR_PEER naming it elsewhere */
    ts_model *ep = NULL;
    const ts_model_ep_options o = {.timeout_s = TS_EP_TEST_TIMEOUT_S};
    ts_status s = ts_model_load_ep(g_ep_rank == 0 ? "/nonexistent/x" : path, MPI_COMM_WORLD,
                                   MEP_MAXB, &o, &ep);
    TS_CHECK(ep == NULL);
    if (g_ep_rank == 0) TS_CHECK_STATUS(s, TS_ERR_IO);
    else TS_CHECK(s == TS_ERR_PEER || s == TS_ERR_IO); /* the file is gone there too */
    ts_model_ep_stats st;
    TS_CHECK_STATUS(ts_model_ep_get_stats(ref, &st), TS_ERR_INVALID_ARGUMENT); /* not EP */
    ts_model_free(ref);
}

/* Sets byte 0 of tensor `name`'s data in DIR/model.safetensors to `byte` (the header is found
 * by name: the writer's spacing does not matter). */
static bool poke_tensor(const char *dir, const char *name, uint8_t byte) {
    char path[256], key[160];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(key, sizeof key, "\"%s\"", name);
    FILE *f = fopen(path, "r+b");
    if (!f) return false;
    uint8_t len8[8];
    uint64_t hlen = 0;
    bool ok = fread(len8, 1, 8, f) == 8;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)len8[i] << (8 * i);
    char *h = ok && hlen < (1u << 24) ? calloc(1, (size_t)hlen + 1) : NULL;
    ok = h && fread(h, 1, (size_t)hlen, f) == hlen;
    const char *t = ok ? strstr(h, key) : NULL, *o = t ? strstr(t, "data_offsets") : NULL;
    o = o ? strchr(o, '[') : NULL;
    ok = o && fseek(f, (long)(8 + hlen + strtoull(o + 1, NULL, 10)), SEEK_SET) == 0 &&
         fwrite(&byte, 1, 1, f) == 1;
    free(h);
    return fclose(f) == 0 && ok;
}

/* ts_model_load_dir_ep on a checkpoint that rank 0 exports: the logits of ts_model_create_ep
 * and of the single-process model, bit for bit; each rank holds only its experts' records (views
 * into the mapping); an expert scale poisoned in the file is seen only by the rank that owns the
 * expert (no other rank reads those bytes): its error there, TS_ERR_PEER naming it elsewhere;
 * one rank's missing directory likewise. */
TS_TEST(model_ep_dir_binds_own_experts_logits_match) {
    ts_model_config c;
    if (!tiny(ts_t_, &c)) return;
    ts_model *ref = NULL;
    TS_CHECK_STATUS(ts_model_create(&c, MEP_MAXB, &ref), TS_OK);
    if (!ref) return;
    char root[64] = "/tmp/ts_model_ep_dir_XXXXXX", dir[96];
    if (g_ep_rank == 0) {
        TS_CHECK(mkdtemp(root) != NULL);
        snprintf(dir, sizeof dir, "%s/ckpt", root);
        TS_CHECK_STATUS(ts_model_export_hf(ref, dir, NULL), TS_OK);
    }
    ep_test_bcast(root, (int)sizeof root, MPI_CHAR, 0); /* after the export */
    snprintf(dir, sizeof dir, "%s/ckpt", root);
    const ts_model_ep_options o = {.timeout_s = TS_EP_TEST_TIMEOUT_S};
    ts_model *epc = NULL, *epd = NULL;
    TS_CHECK_STATUS(ts_model_create_ep(&c, MPI_COMM_WORLD, MEP_MAXB, &o, &epc), TS_OK);
    TS_CHECK_STATUS(ts_model_load_dir_ep(dir, MPI_COMM_WORLD, MEP_MAXB, &o, &epd), TS_OK);
    if (epc && epd) {
        decode_and_compare(ts_t_, &c, epc, ref, "create_ep");
        for (int64_t i = 0; i < MEP_MAXB; i++) ts_model_reset_sequence(ref, i);
        decode_and_compare(ts_t_, &c, epd, ref, "load_dir_ep");
        const int64_t El = c.n_routed_experts / g_ep_size, lo = g_ep_rank * El;
        int64_t own = 0;
        for (int64_t i = 0; i < epd->nrecs; i++) {
            const ts__mtensor *r = &epd->recs[i];
            const int64_t e = ts__model_expert_of(r->name);
            if (e < 0) continue;
            TS_CHECK_MSG(e >= lo && e < lo + El, "rank %d bound %s (its experts: %lld..%lld)",
                         g_ep_rank, r->name, (long long)lo, (long long)(lo + El - 1));
            if (r->dtype == TS_U8) TS_CHECK_MSG(r->view, "%s is not a view into the file", r->name);
            /* in the Mega MoE layout now: the file's pages and the f32 scales dropped */
            TS_CHECK_MSG(r->released && (r->view || !r->data), "%s is still held", r->name);
            own++;
        }
        TS_CHECK(own == c.n_layers * El * 6); /* w1, w3, w2 and their scales */
        TS_CHECK(epd->local_experts_only);
    }
    ts_model_free(epd);
    ts_model_free(epc);
    ep_test_barrier();
    /* the last expert's scale a ue8m0 NaN: only its owner (the last rank) reads it */
    if (g_ep_rank == 0) {
        char nm[96];
        snprintf(nm, sizeof nm, "layers.%lld.ffn.experts.%lld.w2.scale", (long long)(c.n_layers - 1),
                 (long long)(c.n_routed_experts - 1));
        TS_CHECK(poke_tensor(dir, nm, 0xFF));
    }
    ep_test_barrier();
    epd = NULL;
    ts_status s = ts_model_load_dir_ep(dir, MPI_COMM_WORLD, MEP_MAXB, &o, &epd);
    TS_CHECK(epd == NULL);
    ep_expect_status(ts_t_, s, TS_ERR_INVALID_ARGUMENT, g_ep_size - 1);
    if (g_ep_rank == g_ep_size - 1)
        TS_CHECK_MSG(strstr(ts_last_error(), "ue8m0 NaN") != NULL, "%s", ts_last_error());
    else
        TS_CHECK_MSG(strstr(ts_last_error(), "ue8m0 NaN") != NULL, "the peer's message is not "
                     "passed on: %s", ts_last_error());
    /* a directory missing on the last rank */
    s = ts_model_load_dir_ep(g_ep_rank == g_ep_size - 1 ? "/nonexistent/ckpt" : dir,
                             MPI_COMM_WORLD, MEP_MAXB, &o, &epd);
    TS_CHECK(epd == NULL);
    ep_expect_status(ts_t_, s, TS_ERR_IO, g_ep_size - 1);
    TS_CHECK_MSG(strstr(ts_last_error(), "/nonexistent/ckpt") != NULL, "%s", ts_last_error());
    ep_test_barrier();
    if (g_ep_rank == 0) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
        TS_CHECK(system(cmd) == 0);
    }
    ts_model_free(ref);
}

/* The hash layer's routing is tid2eid[token]: its per-expert counts follow from every rank's
 * tokens (each rank regenerates them); every layer receives tokens × top-k. */
TS_TEST(model_ep_stats_count_the_routing) {
    ts_model_config c;
    if (!tiny(ts_t_, &c)) return;
    ts_model *ep = NULL;
    const ts_model_ep_options o = {.timeout_s = TS_EP_TEST_TIMEOUT_S};
    TS_CHECK_STATUS(ts_model_create_ep(&c, MPI_COMM_WORLD, MEP_MAXB, &o, &ep), TS_OK);
    if (!ep) return;
    const int64_t E = c.n_routed_experts, K = c.n_activated_experts, NL = c.n_layers;
    const int64_t n = n_of(g_ep_rank);
    int64_t seqs[MEP_MAXB];
    int32_t tok[MEP_MAXB];
    for (int s = 0; s < MEP_STEPS; s++) {
        step_tokens(&c, g_ep_rank, s, n, seqs, tok);
        TS_CHECK_STATUS(ts_model_decode(ep, n, seqs, tok, NULL), TS_OK);
    }
    ts_model_ep_stats st;
    TS_CHECK_STATUS(ts_model_ep_get_stats(ep, &st), TS_OK);
    int64_t all_tokens = 0;
    int64_t *want0 = calloc((size_t)E, 8);
    const ts__mtensor *t2e = ts__model_find(ep, "0.ffn.gate.tid2eid"); /* replicated */
    TS_CHECK(t2e != NULL && c.n_hash_layers >= 1);
    for (int q = 0; q < g_ep_size; q++)
        for (int s = 0; s < MEP_STEPS; s++)
            for (int64_t i = 0; i < n_of(q); i++) {
                all_tokens++;
                const int32_t t = token_of(&c, q, s, i);
                for (int64_t j = 0; t2e && j < K; j++) want0[((const int32_t *)t2e->data)[t * K + j]]++;
            }
    TS_CHECK_EQ_INT(st.steps, MEP_STEPS);
    TS_CHECK_EQ_INT(st.num_experts, E);
    TS_CHECK_EQ_INT(st.num_layers, NL);
    int64_t sum = 0;
    for (int64_t e = 0; e < E; e++) sum += st.expert_tokens[e];
    TS_CHECK_EQ_INT(sum, all_tokens * K * NL);
    for (int64_t L = 0; L < NL; L++) {
        int64_t ls = 0;
        for (int64_t e = 0; e < E; e++) ls += st.layer_expert_tokens[L * E + e];
        TS_CHECK_EQ_INT(ls, all_tokens * K);
    }
    for (int64_t e = 0; e < E; e++) TS_CHECK_EQ_INT(st.layer_expert_tokens[e], want0[e]);
    const double sel = (double)(n * MEP_STEPS * K * NL);
    TS_CHECK(st.dispatch_bytes == sel * (double)(c.dim + c.dim / 128 * 4 + 16));
    TS_CHECK(st.combine_bytes == sel * (double)(2 * c.dim));
    TS_CHECK(st.moe_sec > 0);
    TS_CHECK_STATUS(ts_model_ep_reset_stats(ep), TS_OK);
    TS_CHECK_STATUS(ts_model_ep_get_stats(ep, &st), TS_OK);
    sum = 0;
    for (int64_t e = 0; e < E; e++) sum += st.expert_tokens[e];
    TS_CHECK(sum == 0 && st.steps == 0 && st.dispatch_bytes == 0);
    free(want0);
    ts_model_free(ep);
}

TS_TEST(model_ep_create_errors) {
    ts_model_config c;
    TS_CHECK_STATUS(ts_model_config_builtin("dsv4-tiny", &c), TS_OK);
    const ts_model_ep_options o = {.timeout_s = TS_EP_TEST_TIMEOUT_S};
    ts_model *m = NULL;
    if (g_ep_size >= 2) {
        /* E % R != 0: the message names both numbers, on every rank */
        ts_model_config b = c;
        b.n_routed_experts = 2 * g_ep_size + 1;
        b.n_activated_experts = 2;
        TS_CHECK_STATUS(ts_model_create_ep(&b, MPI_COMM_WORLD, 2, &o, &m), TS_ERR_INVALID_ARGUMENT);
        char e[32], r[32];
        snprintf(e, sizeof e, "= %d ", 2 * g_ep_size + 1);
        snprintf(r, sizeof r, "%d ranks", g_ep_size);
        TS_CHECK_MSG(strstr(ts_last_error(), e) && strstr(ts_last_error(), r), "%s",
                     ts_last_error());
        TS_CHECK(m == NULL);
        /* rank 1's config differs: an error on every rank naming rank 1 */
        b = c;
        if (g_ep_rank == 1) b.seed++;
        TS_CHECK_STATUS(ts_model_create_ep(&b, MPI_COMM_WORLD, 2, &o, &m), TS_ERR_INVALID_ARGUMENT);
        TS_CHECK_MSG(strstr(ts_last_error(), "rank 1") != NULL, "%s", ts_last_error());
        TS_CHECK(m == NULL);
    }
    /* bad arguments on the last rank: its own code there, TS_ERR_PEER naming it elsewhere */
    const int bad = g_ep_size - 1;
    ts_status s = ts_model_create_ep(&c, MPI_COMM_WORLD, g_ep_rank == bad ? 0 : 2, &o, &m);
    ep_expect_status(ts_t_, s, TS_ERR_INVALID_ARGUMENT, bad);
    TS_CHECK(m == NULL);
    s = ts_model_create_ep(g_ep_rank == bad ? NULL : &c, MPI_COMM_WORLD, 2, &o, &m);
    ep_expect_status(ts_t_, s, TS_ERR_NULL_POINTER, bad);
    TS_CHECK(m == NULL);
}

/* Bad step input on one rank is caught before any cache changes; the model stays usable. A
 * rank that skips a step makes the others time out naming it. */
/* per_node: the Mega MoE buffer's ranks_per_node (1: every rank its own node, the unfused
 * pipeline's internode path carries the agreement) */
static void step_errors(ts_test_ctx *ts_t_, int32_t per_node) {
    ts_model_config c;
    if (!tiny(ts_t_, &c)) return;
    ts_model *ref = NULL, *ep = NULL;
    TS_CHECK_STATUS(ts_model_create(&c, MEP_MAXB, &ref), TS_OK);
    const ts_model_ep_options o = {.timeout_s = TS_EP_TEST_TIMEOUT_S, .ranks_per_node = per_node};
    TS_CHECK_STATUS(ts_model_create_ep(&c, MPI_COMM_WORLD, MEP_MAXB, &o, &ep), TS_OK);
    if (!ref || !ep) {
        ts_model_free(ep);
        ts_model_free(ref);
        return;
    }
    const int bad = g_ep_size - 1;
    int64_t seqs[2] = {0, 1};
    int32_t tok[2] = {3, 5};
    if (g_ep_rank == bad) tok[1] = (int32_t)c.vocab_size;
    ts_status s = ts_model_decode(ep, 2, seqs, tok, NULL);
    ep_expect_status(ts_t_, s, TS_ERR_INVALID_ARGUMENT, bad);
    TS_CHECK(ts_model_sequence_position(ep, 0) == 0);
    /* the collective prefill agrees likewise before anything advances */
    s = ts_model_prefill(ep, 0, 2, tok, NULL);
    ep_expect_status(ts_t_, s, TS_ERR_INVALID_ARGUMENT, bad);
    TS_CHECK(ts_model_sequence_position(ep, 0) == 0);
    /* then a good step: same bits as the local model */
    tok[1] = 5;
    const int64_t V = c.vocab_size;
    float *la = malloc((size_t)(2 * V) * 4), *lb = malloc((size_t)(2 * V) * 4);
    TS_CHECK_STATUS(ts_model_decode(ep, 2, seqs, tok, la), TS_OK);
    TS_CHECK_STATUS(ts_model_decode(ref, 2, seqs, tok, lb), TS_OK);
    TS_CHECK(memcmp(la, lb, (size_t)(2 * V) * 4) == 0);
    free(la);
    free(lb);
    ts_model_free(ep);
    ep = NULL;
    if (g_ep_size >= 2) {
        /* the create-time agreement waits at least 100 s: the short deadline is the steps' */
        const ts_model_ep_options o2 = {.timeout_s = 1.5, .ranks_per_node = per_node};
        TS_CHECK_STATUS(ts_model_create_ep(&c, MPI_COMM_WORLD, MEP_MAXB, &o2, &ep), TS_OK);
        if (ep && g_ep_rank != bad) {
            s = ts_model_decode(ep, 1, seqs, tok, NULL);
            TS_CHECK_STATUS(s, TS_ERR_TIMEOUT);
            char want[32];
            snprintf(want, sizeof want, "rank %d", bad);
            TS_CHECK_MSG(strstr(ts_last_error(), want) != NULL, "%s", ts_last_error());
        }
        ep_test_barrier();
    }
    ts_model_free(ep);
    ts_model_free(ref);
}

TS_TEST(model_ep_step_errors_and_missing_rank) {
    step_errors(ts_t_, 0);
    step_errors(ts_t_, 1);
}

/* attention = v32 (docs/model.md §8): the same bits as the single-process model at every R
 * (attention is per rank; only the MoE layers are expert-parallel). */
TS_TEST(model_ep_v32_logits_match_single_process) {
    ts_model_config c;
    TS_CHECK_STATUS(ts_model_config_builtin("dsv32-tiny", &c), TS_OK);
    if (c.n_routed_experts % g_ep_size != 0) return;
    ts_model *ref = NULL, *ep = NULL;
    TS_CHECK_STATUS(ts_model_create(&c, MEP_MAXB, &ref), TS_OK);
    const ts_model_ep_options o = {.timeout_s = TS_EP_TEST_TIMEOUT_S};
    TS_CHECK_STATUS(ts_model_create_ep(&c, MPI_COMM_WORLD, MEP_MAXB, &o, &ep), TS_OK);
    if (ref && ep) decode_and_compare(ts_t_, &c, ep, ref, "v32 fused");
    ts_model_free(ep);
    ts_model_free(ref);
}

/* Prompt length of rank q in the prefill test: 0 on some ranks (they take part without one),
 * 1 .. 13 on the others, so the ranks need different chunk counts at 5 rows a chunk. */
static int64_t prompt_of(int q) { return (int64_t)((q * 7 + 13) % 17) * (q % 3 != 1); }

/* ts_model_prefill on an EP model is collective: each rank's logits (all rows, then the last
 * row's, then a decode step after it) are the single-process model's bits; the chunk counts
 * differ across ranks; a bad n_tokens on one rank gives its code there and TS_ERR_PEER
 * elsewhere, with nothing advanced, and the model goes on. */
TS_TEST(model_ep_prefill_matches_single_process) {
    ts_model_config c;
    if (!tiny(ts_t_, &c)) return;
    const int q = g_ep_rank;
    const int64_t n = prompt_of(q), V = c.vocab_size;
    ts_model *ref = NULL, *ep = NULL;
    TS_CHECK_STATUS(ts_model_create(&c, 1, &ref), TS_OK);
    ts_model_ep_options o = {.timeout_s = TS_EP_TEST_TIMEOUT_S};
    TS_CHECK_STATUS(ts_model_create_ep(&c, MPI_COMM_WORLD, 1, &o, &ep), TS_OK);
    if (!ref || !ep) {
        ts_model_free(ref);
        ts_model_free(ep);
        return;
    }
    ep->prefill_rows = 5;
    int32_t tok[17];
    for (int64_t i = 0; i < 17; i++) tok[i] = token_of(&c, q, 99, i);
    float *la = malloc((size_t)(17 * V) * 4), *lb = malloc((size_t)(17 * V) * 4);
    /* all rows' logits */
    TS_CHECK_STATUS(ts_model_prefill_all_logits(ep, 0, n, n ? tok : NULL, la), TS_OK);
    if (n) {
        TS_CHECK_STATUS(ts_model_prefill_all_logits(ref, 0, n, tok, lb), TS_OK);
        TS_CHECK_MSG(memcmp(la, lb, (size_t)(n * V) * 4) == 0,
                     "rank %d of %d: prefill logits differ from the single-process model", q,
                     g_ep_size);
    }
    TS_CHECK(ts_model_sequence_position(ep, 0) == n);
    /* a bad call on rank 1: nothing advances anywhere */
    if (g_ep_size > 1) {
        const ts_status s = ts_model_prefill(ep, 0, q == 1 ? -1 : n, n ? tok : NULL, la);
        TS_CHECK_STATUS(s, q == 1 ? TS_ERR_INVALID_ARGUMENT : TS_ERR_PEER);
        if (q != 1) TS_CHECK(strstr(ts_last_error(), "rank 1") != NULL);
        TS_CHECK(ts_model_sequence_position(ep, 0) == n);
    }
    /* the last row's logits of a second prompt on the same sequence, then a decode step */
    const int64_t n2 = (q % 2) ? 0 : 3;
    TS_CHECK_STATUS(ts_model_prefill(ep, 0, n2, n2 ? tok + 10 : NULL, la), TS_OK);
    if (n2) {
        TS_CHECK_STATUS(ts_model_prefill(ref, 0, n2, tok + 10, lb), TS_OK);
        TS_CHECK(memcmp(la, lb, (size_t)V * 4) == 0);
    }
    const int64_t seq = 0, nd = n + n2 > 0;
    TS_CHECK_STATUS(ts_model_decode(ep, nd, &seq, tok + 16, la), TS_OK);
    if (nd) {
        TS_CHECK_STATUS(ts_model_decode(ref, 1, &seq, tok + 16, lb), TS_OK);
        TS_CHECK(memcmp(la, lb, (size_t)V * 4) == 0);
    }
    free(la);
    free(lb);
    ts_model_free(ep);
    ts_model_free(ref);
}
