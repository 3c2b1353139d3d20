/* `tilestack generate --model DIR --dry-run`: ts_model_plan_dir printed as a table or JSON. */
#include "gen.h"

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double gib(uint64_t b) { return (double)b / (double)(UINT64_C(1) << 30); }

static void row(const char *what, const ts_model_plan *p, size_t off) {
    printf("%-28s", what);
    for (int32_t i = 0; i < p->n; i++)
        printf(" %12.3f", gib(*(const uint64_t *)((const char *)&p->r[i] + off)));
    putchar('\n');
}

#define F(name) offsetof(ts_model_plan_rank, name)

/* label: V4's; v3: a V3 / V3.2 plan's where its caches differ (NULL: the same) */
static const struct { const char *label, *v3, *key; size_t off; } k_rows[] = {
    {"shared: mapped", NULL, "shared_mapped", F(shared_mapped)},
    {"shared: converted", NULL, "shared_converted", F(shared_converted)},
    {"shared: quantised at load", NULL, "shared_quantized", F(shared_quantized)},
    {"shared: packed", NULL, "shared_packed", F(shared_packed)},
    {"shared: released (-)", NULL, "shared_released", F(shared_released)},
    {"experts: mapped", NULL, "expert_mapped", F(expert_mapped)},
    {"experts: converted", NULL, "expert_converted", F(expert_converted)},
    {"experts: quantised at load", NULL, "expert_quantized", F(expert_quantized)},
    {"experts: packed", NULL, "expert_packed", F(expert_packed)},
    {"experts: released (-)", NULL, "expert_released", F(expert_released)},
    {"KV cache (584-byte rows)", "KV cache (bf16 latent)", "kv_cache", F(kv_cache)},
    {"indexer cache (FP4)", "indexer cache (f32 keys)", "indexer_cache", F(indexer_cache)},
    {"compressor state", "positions", "compressor_state", F(compressor_state)},
    {"workspace", NULL, "workspace", F(workspace)},
    {"total held", NULL, "total", F(total)},
};

int gen_dry_run(const gen_args *a) {
    ts_model_plan p;
    if (ts_model_plan_dir(a->model, a->ranks, a->batch, a->context, &p) != TS_OK) {
        fprintf(stderr, "tilestack generate: --dry-run: %s\n", ts_last_error());
        return 1;
    }
    const size_t nrows = sizeof k_rows / sizeof *k_rows;
    if (a->json) {
        json_t *o = json_pack("{s:s, s:s, s:b, s:I, s:I, s:I, s:I, s:I}", "model", a->model,
                              "model_type", p.model_type, "ep_model", (int)p.ep_model, "batch",
                              (json_int_t)p.batch, "context", (json_int_t)p.context, "n_layers",
                              (json_int_t)p.n_layers, "n_routed_experts",
                              (json_int_t)p.n_routed_experts, "n_tensors", (json_int_t)p.n_tensors);
        json_t *arr = json_array();
        bool ok = o && arr && !json_object_set_new(o, "ranks", arr);
        for (int32_t i = 0; ok && i < p.n; i++) {
            json_t *r = json_pack("{s:I, s:I}", "ranks", (json_int_t)p.r[i].ranks,
                                  "experts_per_rank", (json_int_t)p.r[i].experts);
            ok = r && !json_array_append_new(arr, r);
            for (size_t k = 0; ok && k < nrows; k++)
                ok = !json_object_set_new(r, k_rows[k].key, json_integer((json_int_t) *
                         (const uint64_t *)((const char *)&p.r[i] + k_rows[k].off)));
        }
        char *text = ok ? json_dumps(o, JSON_PRESERVE_ORDER) : NULL;
        json_decref(o);
        if (!text) {
            fprintf(stderr, "tilestack generate: out of memory writing the JSON\n");
            return 1;
        }
        printf("%s\n", text);
        free(text);
    } else {
        printf("%s (%s): %lld layers, %lld routed experts, %lld tensors; batch %lld, context %lld "
               "tokens; GiB per rank\n", a->model, p.model_type, (long long)p.n_layers,
               (long long)p.n_routed_experts, (long long)p.n_tensors, (long long)p.batch,
               (long long)p.context);
        printf("%-28s", "ranks");
        for (int32_t i = 0; i < p.n; i++) printf(" %12lld", (long long)p.r[i].ranks);
        printf("\n%-28s", "routed experts per rank");
        for (int32_t i = 0; i < p.n; i++) printf(" %12lld", (long long)p.r[i].experts);
        putchar('\n');
        const bool v3 = !strncmp(p.model_type, "deepseek_v3", 11); /* its own row labels */
        for (size_t k = 0; k < nrows; k++)
            row(v3 && k_rows[k].v3 ? k_rows[k].v3 : k_rows[k].label, &p, k_rows[k].off);
    }
    if (fflush(stdout) || ferror(stdout)) {
        fprintf(stderr, "tilestack generate: writing stdout failed\n");
        return 1;
    }
    return 0;
}
