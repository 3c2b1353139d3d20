/* ts_model_plan_dir on V3 / V3.2 checkpoints (docs/models.md "Memory per rank"): for the tiny
 * checkpoints of tests/gen/gen_hf_v3.py (V3 BF16, V3 FP8, V3.2 BF16, and V3 with a tied head),
 * the R = 1 plan equals what ts_model_load_dir does: the packs it makes (counted by the packed
 * weights themselves), the f32 copies, the cache and workspace bytes it allocates, the file
 * pages it gives back (checked against the checkpoint's own header: everything but the
 * embedding and the tensors converted to f32); the expert split adds up over R = 1, 2, 4, 8
 * (ep_model true: ts_model_load_dir_ep runs V3); a bad checkpoint is refused with the
 * loader's message. */
#include "ts_test.h"
#include "test_model_common.h"
#include "test_hf_v3_ckpt.h"

#include "model/hf_v3.h"
#include "model/safetensors.h"
#include "tilestack/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A tensor ts__v3_hold_of widens to f32 (norms, the router, V3.2's indexer), told here from its
 * name alone so that the check does not lean on the rule it checks. */
static bool f32_by_name(const char *name) {
    return strstr(name, "norm") || strstr(name, ".mlp.gate.") || strstr(name, ".indexer.");
}

/* The checkpoint's bytes from its header: every tensor the model reads, the embedding, and the
 * tensors converted to f32. */
static void file_bytes(const ts__hf_dir *d, const ts__v3_config *c, uint64_t *all, uint64_t *embed,
                       uint64_t *f32) {
    *all = *embed = *f32 = 0;
    for (size_t s = 0; s < d->n_shards; s++)
        for (size_t k = 0; k < d->shards[s]->n; k++) {
            const ts__st_tensor *t = &d->shards[s]->t[k];
            if (ts__v3_ignored(c, t->name)) continue;
            const uint64_t n = t->end - t->begin;
            *all += n;
            if (!strcmp(t->name, "model.embed_tokens.weight")) *embed += n;
            else if (f32_by_name(t->name)) *f32 += n;
        }
}

static void plan_vs_load(ts_test_ctx *ts_t_, const char *dir, int64_t B, bool v32) {
    ts_model_plan p;
    TS_CHECK_STATUS(ts_model_plan_dir(dir, 1, B, 0, &p), TS_OK);
    ts_model *m = NULL;
    TS_CHECK_STATUS(ts_model_load_dir(dir, B, &m), TS_OK);
    if (!m || TS_FAILED()) {
        ts_model_free(m);
        return;
    }
    const ts__v3 *v = m->v3;
    const ts_model_plan_rank *r = &p.r[0];
    TS_CHECK_MSG(!strcmp(p.model_type, v32 ? "deepseek_v32" : "deepseek_v3"), "model_type %s", p.model_type);
    TS_CHECK(p.ep_model);
    TS_CHECK_EQ_INT(p.n, 1);
    TS_CHECK_EQ_INT(r->experts, v->c.n_experts);
    TS_CHECK_EQ_INT(p.context, v->c.max_seq);
    TS_CHECK_EQ_INT(p.n_layers, v->c.n_layers);
    /* the packs, as the packed weights count themselves (ts_packed_weight_nbytes at packing) */
    TS_CHECK_EQ_INT((int64_t)(r->shared_packed + r->expert_packed), (int64_t)v->packed);
    TS_CHECK(r->expert_packed > 0 && r->shared_packed > 0);
    /* the f32 buffer (and a bf16 copy of an F32 embedding) bind allocated */
    TS_CHECK_EQ_INT((int64_t)(r->shared_converted + r->expert_converted), (int64_t)v->converted);
    TS_CHECK_EQ_INT((int64_t)r->expert_converted, 0);
    TS_CHECK_EQ_INT((int64_t)(r->shared_quantized + r->expert_quantized), 0);
    /* the loader's counters (the same rule) */
    TS_CHECK_EQ_INT((int64_t)(r->shared_mapped + r->expert_mapped), (int64_t)m->load_stats.mapped);
    TS_CHECK_EQ_INT((int64_t)(r->shared_released + r->expert_released), (int64_t)m->load_stats.released);
    /* and against the checkpoint's header: the embedding stays mapped, every linear layer's
     * bytes (an FP8 one's scales included) are given back, the f32-converted ones are copies */
    uint64_t all = 0, embed = 0, f32 = 0;
    file_bytes(v->ckpt, &v->c, &all, &embed, &f32);
    const uint64_t mapped = r->shared_mapped + r->expert_mapped, released = r->shared_released + r->expert_released;
    TS_CHECK_EQ_INT((int64_t)(mapped - released), (int64_t)embed);
    TS_CHECK_EQ_INT((int64_t)released, (int64_t)(all - embed - f32));
    /* the caches ts__v3_model_create allocated, and the workspace */
    TS_CHECK_EQ_INT((int64_t)(r->kv_cache + r->indexer_cache + r->compressor_state), (int64_t)m->cache_allocated);
    TS_CHECK(v32 ? r->indexer_cache > 0 : r->indexer_cache == 0);
    TS_CHECK_EQ_INT((int64_t)r->workspace, (int64_t)v->ws_bytes);
    TS_CHECK_EQ_INT((int64_t)r->total, (int64_t)(embed + v->converted + v->packed + m->cache_allocated + v->ws_bytes));
    ts_model_free(m);
}

/* R = 1, 2, 4, 8: rank 0 holds E / R experts; everything but the experts is the same; the rows
 * differ by exactly the experts left out. */
static void rank_table(ts_test_ctx *ts_t_, const char *dir) {
    ts_model_plan p;
    TS_CHECK_STATUS(ts_model_plan_dir(dir, 0, 1, 0, &p), TS_OK);
    TS_CHECK_EQ_INT(p.n, 4);
    const int64_t E = p.n_routed_experts;
    TS_CHECK(E % 8 == 0);
    const ts_model_plan_rank *r1 = &p.r[0];
    for (int32_t i = 0; i < p.n && !TS_FAILED(); i++) {
        const ts_model_plan_rank *r = &p.r[i];
        const int64_t R = (int64_t)1 << i;
        TS_CHECK_EQ_INT(r->ranks, R);
        TS_CHECK_EQ_INT(r->experts, E / R);
        TS_CHECK_EQ_INT((int64_t)(r->expert_packed * R), (int64_t)r1->expert_packed);
        TS_CHECK_EQ_INT((int64_t)(r->expert_mapped * R), (int64_t)r1->expert_mapped);
        TS_CHECK_EQ_INT((int64_t)(r->expert_released * R), (int64_t)r1->expert_released);
        TS_CHECK_EQ_INT((int64_t)r->shared_packed, (int64_t)r1->shared_packed);
        TS_CHECK_EQ_INT((int64_t)r->shared_mapped, (int64_t)r1->shared_mapped);
        TS_CHECK_EQ_INT((int64_t)r->kv_cache, (int64_t)r1->kv_cache);
        TS_CHECK_EQ_INT((int64_t)r->workspace, (int64_t)r1->workspace);
        const uint64_t gone = (r1->expert_mapped + r1->expert_packed - r1->expert_released) -
                              (r->expert_mapped + r->expert_packed - r->expert_released);
        TS_CHECK_EQ_INT((int64_t)(r1->total - r->total), (int64_t)gone);
    }
    /* a longer context: the caches scale, the weights do not */
    ts_model_plan q;
    TS_CHECK_STATUS(ts_model_plan_dir(dir, 1, 1, 16384, &q), TS_OK);
    TS_CHECK_EQ_INT(q.context, 16384);
    TS_CHECK_EQ_INT((int64_t)q.r[0].kv_cache, (int64_t)(2 * r1->kv_cache)); /* 8192 -> 16384 */
    TS_CHECK_EQ_INT((int64_t)q.r[0].shared_packed, (int64_t)r1->shared_packed);
    /* R must divide E */
    TS_CHECK_STATUS(ts_model_plan_dir(dir, E + 1, 1, 0, &q), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "not a multiple of ranks") != NULL);
}

static void one(ts_test_ctx *ts_t_, const char *file, const damage *dm, bool v32, bool table) {
    golden g;
    uint8_t *buf = NULL;
    if (!tv3_load_golden(ts_t_, file, &g, &buf)) return;
    tm_root_make("ts_planv3_");
    TS_CHECK(tv3_write_ckpt(&g, tm_at("ck"), dm, NULL));
    plan_vs_load(ts_t_, tm_at("ck"), 2, v32);
    if (table) rank_table(ts_t_, tm_at("ck"));
    tm_root_remove();
    tv3_free_golden(&g, buf);
}

TS_TEST(model_plan_v3_equals_what_the_loader_does) { one(ts_t_, "hf_v3_tiny.bin", NULL, false, true); }

TS_TEST(model_plan_v3_fp8_equals_what_the_loader_does) { one(ts_t_, "hf_v3_fp8_tiny.bin", NULL, false, true); }

TS_TEST(model_plan_v32_equals_what_the_loader_does) { one(ts_t_, "hf_v32_tiny.bin", NULL, true, true); }

/* tie_word_embeddings: the head is the embedding, packed once more */
TS_TEST(model_plan_v3_tied_head) {
    const damage tied = {.drop = "lm_head.weight", .cfg_from = "\"tie_word_embeddings\": false",
                         .cfg_to = "\"tie_word_embeddings\": true"};
    one(ts_t_, "hf_v3_tiny.bin", &tied, false, false);
}

/* A checkpoint the loader refuses is refused by the plan with the same message. */
TS_TEST(model_plan_v3_refuses_what_the_loader_refuses) {
    golden g;
    uint8_t *buf = NULL;
    if (!tv3_load_golden(ts_t_, "hf_v3_tiny.bin", &g, &buf)) return;
    tm_root_make("ts_planv3_");
    const char *kvb = "model.layers.1.self_attn.kv_b_proj.weight";
    const damage drop = {.drop = kvb}, shape = {.reshape = kvb}, extra = {.extra = true};
    const damage *cases[] = {&drop, &shape, &extra};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char name[16];
        snprintf(name, sizeof name, "bad%zu", i);
        TS_CHECK(tv3_write_ckpt(&g, tm_at(name), cases[i], NULL));
        ts_model *m = NULL;
        const ts_status sl = ts_model_load_dir(tm_at(name), 1, &m);
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", ts_last_error());
        ts_model_plan p;
        const ts_status sp = ts_model_plan_dir(tm_at(name), 1, 1, 0, &p);
        TS_CHECK_EQ_INT((int64_t)sl, (int64_t)TS_ERR_INVALID_ARGUMENT);
        TS_CHECK_EQ_INT((int64_t)sp, (int64_t)sl);
        TS_CHECK_MSG(!strcmp(msg, ts_last_error()), "load: %s; plan: %s", msg, ts_last_error());
        TS_CHECK_EQ_INT(p.n, 0);
        ts_model_free(m);
    }
    tm_root_remove();
    tv3_free_golden(&g, buf);
}
