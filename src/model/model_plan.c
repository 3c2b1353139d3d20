/* ts_model_plan_dir: the bytes each rank needs for a checkpoint directory, from the loader's own
 * plan (hf_load_v4.c: what every tensor would be mapped / converted / quantised / packed as,
 * and which records are released once packed),
 * the cache sizes model_cache.c allocates and the workspace model_decode.c allocates. */
#include "hf_v3.h"
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

/* Rank i's rows of r get E / R experts each; refused unless R divides E. */
static ts_status set_experts(acc *a, int64_t E) {
    for (int32_t i = 0; i < a->n; i++) {
        const int64_t R = a->p->r[i].ranks;
        if (E % R)
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_model_plan_dir: n_routed_experts = "
                            "%lld is not a multiple of ranks = %lld (expert parallelism gives "
                            "every rank E / R experts)", (long long)E, (long long)R);
        a->El[i] = E / R;
        a->p->r[i].experts = E / R;
    }
    return TS_OK;
}

/* One tensor's bytes into every row: a routed expert's (e >= 0) only where rank 0 holds it. */
static void add_bytes(acc *a, int64_t e, size_t mapped, size_t converted, size_t quantized,
                      size_t packed, size_t released) {
    a->p->n_tensors++;
    for (int32_t i = 0; i < a->n; i++) {
        ts_model_plan_rank *r = &a->p->r[i];
        if (e < 0) {
            r->shared_mapped += mapped;
            r->shared_converted += converted;
            r->shared_quantized += quantized;
            r->shared_packed += packed;
            r->shared_released += released;
        } else if (e < a->El[i]) { /* rank 0's block (model_ep.c: rank k holds [k El, (k+1) El)) */
            r->expert_mapped += mapped;
            r->expert_converted += converted;
            r->expert_quantized += quantized;
            r->expert_packed += packed;
            r->expert_released += released;
        }
    }
}

static ts_status add_item(void *ctx, const ts__hf_plan_item *it) {
    acc *a = (acc *)ctx;
    if (!a->p->n_tensors) /* the first tensor: config.json is known */
        TS__RETURN_IF_ERROR(set_experts(a, it->cfg->n_routed_experts));
    add_bytes(a, expert_of(it->spec->name), it->mapped, it->converted, it->quantized, it->packed,
              it->released);
    return TS_OK;
}

static ts_status add_v3(void *ctx, const ts__v3_config *c, const ts__v3_tensor *t, const ts__v3_hold *h) {
    acc *a = (acc *)ctx;
    if (!a->p->n_tensors) TS__RETURN_IF_ERROR(set_experts(a, c->n_experts));
    add_bytes(a, t->expert, h->mapped, h->converted, 0, h->packed, h->released);
    return TS_OK;
}

/* A V3 / V3.2 directory (hf_load_v3.c, model_v3.c): the loader's holds, the bf16 latent cache
 * and V3.2's f32 indexer keys, the workspace of max(batch, 48) rows (allocated at load); an R > 1
 * row is a rank of ts_model_load_dir_ep (E / R experts, everything else whole; its low-latency
 * EP buffer is not counted, as V4's Mega MoE buffer is not). */
static ts_status plan_v3(const char *dir, int64_t batch, int64_t context, acc *a) {
    ts_model_plan *out = a->p;
    ts__v3_config c;
    TS__RETURN_IF_ERROR(ts__v3_plan(dir, add_v3, a, &c));
    if (context) c.max_seq = context;
    snprintf(out->model_type, sizeof out->model_type, "%s", c.v32 ? "deepseek_v32" : "deepseek_v3");
    out->ep_model = true;
    out->batch = batch;
    out->context = c.max_seq;
    out->n_layers = c.n_layers;
    out->n_routed_experts = c.n_experts;
    size_t kv = 0, ix = 0;
    ts__v3_layer_cache_bytes(&c, batch, &kv, &ix);
    const int64_t rows = batch > TS__PREFILL_ROWS ? batch : TS__PREFILL_ROWS;
    for (int32_t i = 0; i < out->n; i++) {
        ts_model_plan_rank *r = &out->r[i];
        r->kv_cache = kv * (size_t)c.n_layers;
        r->indexer_cache = ix * (size_t)c.n_layers;
        r->compressor_state = (size_t)batch * sizeof(int64_t); /* no compressor: the positions */
        r->workspace = ts__v3_ws_bytes(&c, rows);
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

/* Every row's total: what is held, the released records left out. */
static void total(ts_model_plan *p) {
    for (int32_t i = 0; i < p->n; i++) {
        ts_model_plan_rank *r = &p->r[i];
        r->total = r->shared_mapped + r->shared_converted + r->shared_quantized + r->shared_packed +
                   r->expert_mapped + r->expert_converted + r->expert_quantized + r->expert_packed +
                   r->kv_cache + r->indexer_cache + r->compressor_state + r->workspace -
                   r->shared_released - r->expert_released;
    }
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
    if (ts__v3_dir_is_v3(dir)) {
        const ts_status st = plan_v3(dir, batch, context, &a);
        if (st != TS_OK) memset(out, 0, sizeof *out);
        else total(out);
        return st;
    }
    ts_model_config cfg;
    ts_status st = ts__hf_v4_plan(dir, add_item, &a, &cfg);
    if (st != TS_OK) {
        memset(out, 0, sizeof *out);
        return st;
    }
    snprintf(out->model_type, sizeof out->model_type, "deepseek_v4");
    out->ep_model = true;
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
    }
    total(out);
    return TS_OK;
}
