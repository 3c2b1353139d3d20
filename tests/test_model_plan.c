/* ts_model_plan_dir (docs/models.md "Memory per rank"): for an exported dsv4-tiny checkpoint in
 * every layout, quantised and not, one file and sharded, the R = 1 plan equals what
 * ts_model_load_dir actually maps / converts / quantises / packs / releases after packing (and
 * the records it holds sum to the plan), the cache bytes what
 * model_cache.c allocates and the workspace what model_decode.c allocates after the first
 * prefill; the expert split follows the EP model's E / R blocks; bad directories are refused
 * with the loader's messages. */
#include "ts_test.h"
#include "test_model_common.h"

#include "model/model_internal.h"
#include "tilestack/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


static void plan_vs_load(ts_test_ctx *ts_t_, const char *dir, int64_t B) {
    ts_model_plan p;
    TS_CHECK_STATUS(ts_model_plan_dir(dir, 1, B, 0, &p), TS_OK);
    ts_model *m = NULL;
    TS_CHECK_STATUS(ts_model_load_dir(dir, B, &m), TS_OK);
    if (!m) return;
    const ts_model_plan_rank *r = &p.r[0];
    TS_CHECK_EQ_INT(p.n, 1);
    TS_CHECK_EQ_INT(r->experts, m->cfg.n_routed_experts);
    TS_CHECK_EQ_INT(p.context, m->cfg.max_seq_len);
    TS_CHECK_EQ_INT((int64_t)(r->shared_mapped + r->expert_mapped), (int64_t)m->load_stats.mapped);
    TS_CHECK_EQ_INT((int64_t)(r->shared_converted + r->expert_converted), (int64_t)m->load_stats.converted);
    TS_CHECK_EQ_INT((int64_t)(r->shared_quantized + r->expert_quantized), (int64_t)m->load_stats.quantized);
    TS_CHECK_EQ_INT((int64_t)(r->shared_packed + r->expert_packed), (int64_t)m->load_stats.packed);
    TS_CHECK_EQ_INT((int64_t)(r->shared_released + r->expert_released), (int64_t)m->load_stats.released);
    /* and what the model holds, counted from its records (not from the loader's counters):
     * released ones are those a packer read, each gone (a view's pages advised away, a buffer
     * freed); the others are held */
    uint64_t held = 0, released = 0;
    int64_t wrong = 0;
    for (int64_t i = 0; i < m->nrecs; i++) {
        const ts__mtensor *t = &m->recs[i];
        wrong += t->released != t->packed_src || (t->released && !t->view && t->data);
        *(t->released ? &released : &held) += t->nbytes;
    }
    TS_CHECK_EQ_INT(wrong, 0);
    TS_CHECK(released > 0);
    TS_CHECK_EQ_INT((int64_t)released, (int64_t)(r->shared_released + r->expert_released));
    TS_CHECK_EQ_INT((int64_t)held, (int64_t)(r->shared_mapped + r->expert_mapped + r->shared_converted +
                                             r->expert_converted + r->shared_quantized +
                                             r->expert_quantized - released));
    TS_CHECK_EQ_INT((int64_t)(r->kv_cache + r->indexer_cache + r->compressor_state),
                    (int64_t)m->cache_allocated);
    /* the workspace after the first prefill (it grows from max_batch rows to the chunk) */
    TS_CHECK_STATUS(ts__model_ws_reserve(m, B > TS__PREFILL_ROWS ? B : TS__PREFILL_ROWS), TS_OK);
    TS_CHECK_EQ_INT((int64_t)r->workspace, (int64_t)m->ws->bytes);
    TS_CHECK(r->total > r->workspace);
    /* the total is what is held: records kept, packed copies, caches, workspace */
    TS_CHECK_EQ_INT((int64_t)r->total, (int64_t)(held + m->load_stats.packed + m->cache_allocated + m->ws->bytes));
    ts_model_free(m);
}

TS_TEST(model_plan_r1_equals_what_the_loader_does) {
    tm_root_make("ts_plan_");
    ts_model *m = tm_tiny();
    TS_CHECK(m != NULL);
    static const struct { ts_hf_layout lay; int shards; bool deq; const char *name; } cases[] = {
        {TS_HF_LAYOUT_RELEASE, 1, false, "release"},
        {TS_HF_LAYOUT_HF, 3, false, "hf-sharded"},
        {TS_HF_LAYOUT_HF_MODULES, 1, false, "modules"},
        {TS_HF_LAYOUT_RELEASE, 2, true, "bf16-release"},
    };
    for (size_t i = 0; m && i < sizeof cases / sizeof *cases; i++) {
        ts_hf_export_options o = {cases[i].lay, cases[i].shards, cases[i].deq};
        TS_CHECK_STATUS(ts_model_export_hf(m, tm_at(cases[i].name), &o), TS_OK);
        plan_vs_load(ts_t_, tm_at(cases[i].name), i == 1 ? 3 : 1);
    }
    ts_model_free(m);
    tm_root_remove();
}

TS_TEST(model_plan_rank_table_splits_experts_as_ep) {
    tm_root_make("ts_plan_");
    ts_model *m = tm_tiny();
    TS_CHECK(m != NULL);
    TS_CHECK_STATUS(m ? ts_model_export_hf(m, tm_at("ck"), NULL) : TS_ERR_INTERNAL, TS_OK);
    const int64_t E = m ? m->cfg.n_routed_experts : 0;
    ts_model_plan p;
    TS_CHECK_STATUS(ts_model_plan_dir(tm_at("ck"), 0, 1, 0, &p), TS_OK);
    TS_CHECK_EQ_INT(p.n, 4);
    for (int32_t i = 0; i < p.n && E % 8 == 0; i++) {
        const int64_t R = (int64_t)1 << i;
        TS_CHECK_EQ_INT(p.r[i].ranks, R);
        TS_CHECK_EQ_INT(p.r[i].experts, E / R);
        /* every expert has the same bytes: rank 0's block is 1/R of them all */
        TS_CHECK_EQ_INT((int64_t)(p.r[i].expert_mapped * R), (int64_t)p.r[0].expert_mapped);
        TS_CHECK_EQ_INT((int64_t)(p.r[i].expert_packed * R), (int64_t)p.r[0].expert_packed);
        TS_CHECK_EQ_INT((int64_t)p.r[i].shared_packed, (int64_t)p.r[0].shared_packed);
        TS_CHECK_EQ_INT((int64_t)p.r[i].kv_cache, (int64_t)p.r[0].kv_cache);
    }
    /* a longer context: the caches scale, the weights do not */
    ts_model_plan q;
    TS_CHECK_STATUS(ts_model_plan_dir(tm_at("ck"), 1, 2, 4096, &q), TS_OK);
    TS_CHECK_EQ_INT(q.context, 4096);
    TS_CHECK(q.r[0].kv_cache > p.r[0].kv_cache);
    TS_CHECK_EQ_INT((int64_t)q.r[0].shared_mapped, (int64_t)p.r[0].shared_mapped);
    /* R must divide E */
    TS_CHECK_STATUS(ts_model_plan_dir(tm_at("ck"), E + 1, 1, 0, &q), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "not a multiple of ranks") != NULL);
    ts_model_free(m);
    tm_root_remove();
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

TS_TEST(model_plan_refuses_bad_directories) {
    tm_root_make("ts_plan_");
    ts_model *m = tm_tiny();
    ts_hf_export_options o = {TS_HF_LAYOUT_RELEASE, 2, false};
    TS_CHECK_STATUS(m ? ts_model_export_hf(m, tm_at("ck"), &o) : TS_ERR_INTERNAL, TS_OK);
    ts_model_plan p;
    TS_CHECK_STATUS(ts_model_plan_dir(NULL, 1, 1, 0, &p), TS_ERR_NULL_POINTER);
    TS_CHECK_STATUS(ts_model_plan_dir(tm_at("ck"), 1, 0, 0, &p), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_model_plan_dir(tm_at("ck"), -1, 1, 0, &p), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_model_plan_dir(tm_at("none"), 1, 1, 0, &p), TS_ERR_IO);
    /* a hostile index: a shard outside the directory */
    write_file(tm_at("ck/model.safetensors.index.json"),
               "{\"weight_map\": {\"embed.weight\": \"../../etc/passwd\"}}");
    const ts_status st = ts_model_plan_dir(tm_at("ck"), 1, 1, 0, &p);
    TS_CHECK(st != TS_OK);
    TS_CHECK_MSG(strstr(ts_last_error(), "index") != NULL || strstr(ts_last_error(), "passwd") != NULL,
                 "message: %s", ts_last_error());
    /* config.json missing */
    unlink(tm_at("ck/config.json"));
    TS_CHECK(ts_model_plan_dir(tm_at("ck"), 1, 1, 0, &p) != TS_OK);
    TS_CHECK_MSG(strstr(ts_last_error(), "config.json") != NULL, "message: %s", ts_last_error());
    ts_model_free(m);
    tm_root_remove();
}
