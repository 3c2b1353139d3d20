/* ts_model_plan_dir: the bytes each rank needs for a checkpoint directory, from the loader's own
 * plan (hf_load_v4.c: what every tensor would be mapped / converted / quantised / packed as,
 * and which records are released once packed),
 * the cache sizes model_cache.c allocates and the workspace model_decode.c allocates. */
#include "hf_v4.h"

#include <stdio.h>
#include <string.h>

typedef struct acc {
    int64_t El[TS_MODEL_PLAN_MAX_RANKS]; /* experts of rank 0 per plan row: [0, El) */
    int32_t n;
    ts_model_plan *p;
} acc;

static int64_t expert_of(const char *name) {
    long long L, e;
    int used = 0;
    if (sscanf(name, "%lld.ffn.experts.%lld.%n", &L, &e, &used) == 2 && used > 0) return e;
    return -1;
}

static ts_status add_item(void *ctx, const ts__hf_plan_item *it) {
    acc *a = (acc *)ctx;
    if (!a->p->n_tensors) { /* the first tensor: config.json is known */
        const int64_t E = it->cfg->n_routed_experts;
        for (int32_t i = 0; i < a->n; i++) {
            const int64_t R = a->p->r[i].ranks;
            if (E % R)
                return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_model_plan_dir: n_routed_experts = "
                                "%lld is not a multiple of ranks = %lld (expert parallelism gives "
                                "every rank E / R experts)", (long long)E, (long long)R);
            a->El[i] = E / R;
            a->p->r[i].experts = E / R;
        }
    }
    const int64_t e = expert_of(it->spec->name);
    a->p->n_tensors++;
    for (int32_t i = 0; i < a->n; i++) {
        ts_model_plan_rank *r = &a->p->r[i];
        if (e < 0) {
            r->shared_mapped += it->mapped;
            r->shared_converted += it->converted;
            r->shared_quantized += it->quantized;
            r->shared_packed += it->packed;
            r->shared_released += it->released;
        } else if (e < a->El[i]) { /* rank 0's block (model_ep.c: rank k holds [k El, (k+1) El)) */
            r->expert_mapped += it->mapped;
            r->expert_converted += it->converted;
            r->expert_quantized += it->quantized;
            r->expert_packed += it->packed;
            r->expert_released += it->released;
        }
    }
    return TS_OK;
}

/* cfg's max_seq_len for `context` tokens, rounded as the loader rounds it (hf_config_v4.c). */
static int64_t round_context(const ts_model_config *c, int64_t context) {
    int64_t lcm = 1;
    for (int64_t L = 0; L < c->n_layers; L++) {
        int64_t r = c->compress_ratios[L], x = lcm, y = r;
        if (r <= 0) continue;
        while (y) { const int64_t t = x % y; x = y; y = t; }
        lcm = lcm / x * r;
    }
    return context / lcm * lcm;
}

ts_status ts_model_plan_dir(const char *dir, int64_t ranks, int64_t batch, int64_t context,
                            ts_model_plan *out) {
    static const char fn[] = "ts_model_plan_dir";
    if (!dir || !out) return ts__fail(TS_ERR_NULL_POINTER, "%s: %s is NULL", fn, dir ? "out" : "dir");
    memset(out, 0, sizeof *out);
    if (ranks < 0 || ranks > 1024)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: ranks = %lld is outside [0, 1024]", fn, (long long)ranks);
    if (batch < 1 || batch > (1 << 20))
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: batch = %lld is outside [1, 2^20]", fn, (long long)batch);
    if (context < 0 || context > (INT64_C(1) << 24))
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: context = %lld is outside [0, 2^24]", fn, (long long)context);
    acc a;
    memset(&a, 0, sizeof a);
    a.p = out;
    static const int64_t table[] = {1, 2, 4, 8};
    a.n = ranks ? 1 : 4;
    for (int32_t i = 0; i < a.n; i++) out->r[i].ranks = ranks ? ranks : table[i];
    out->n = a.n;
    ts_model_config cfg;
    ts_status st = ts__hf_v4_plan(dir, add_item, &a, &cfg);
    if (st != TS_OK) {
        memset(out, 0, sizeof *out);
        return st;
    }
    if (context) {
        cfg.max_seq_len = round_context(&cfg, context);
        if (cfg.max_seq_len < 1)
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: context = %lld is below the compress "
                            "ratios' common multiple", fn, (long long)context);
    }
    out->batch = batch;
    out->context = cfg.max_seq_len;
    out->n_layers = cfg.n_layers;
    out->n_routed_experts = cfg.n_routed_experts;
    ts__cache_bytes cb;
    ts__model_cache_bytes(&cfg, batch, &cb);
    const int64_t rows = batch > TS__PREFILL_ROWS ? batch : TS__PREFILL_ROWS;
    for (int32_t i = 0; i < out->n; i++) {
        ts_model_plan_rank *r = &out->r[i];
        r->kv_cache = cb.window + cb.compressed;
        r->indexer_cache = cb.indexer;
        r->compressor_state = cb.state + cb.pos;
        r->workspace = ts__model_ws_bytes(&cfg, rows, r->ranks > 1);
        r->total = r->shared_mapped + r->shared_converted + r->shared_quantized + r->shared_packed +
                   r->expert_mapped + r->expert_converted + r->expert_quantized + r->expert_packed +
                   r->kv_cache + r->indexer_cache + r->compressor_state + r->workspace -
                   r->shared_released - r->expert_released;
    }
    return TS_OK;
}
