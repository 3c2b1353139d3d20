/* The tensor names of DeepSeek-V4 checkpoints (docs/models.md): one row per tilestack tensor
 * (docs/model.md §2), one column per layout. The release layout is DeepSeek's inference code
 * (module path + parameter name); the HF layout is what transformers' DeepseekV4ForCausalLM
 * holds after its conversion mapping (conversion_mapping.py "deepseek_v4"), i.e. what
 * save_pretrained writes. */
#include "hf_v4.h"

#include <stdio.h>
#include <string.h>

/* `tilestack` is the name after "L." for per-layer tensors. A linear weight carries its
 * ".weight" in every column. Columns: DeepSeek's release; what transformers 5.x's
 * save_pretrained writes (its conversion mapping reversed: the release names under "model.",
 * but the embedding, the head, hc_head and the attention's kv_norm come out as below); the
 * module names of transformers' model (its state_dict: per layer "model.layers.L.", experts
 * merged, see ts__hf_v4_source). */
typedef struct name_row {
    const char *tilestack, *release, *hf, *modules;
} name_row;

static const name_row k_global[] = {
    {"embed", "embed.weight", "model.embed_tokens.weight", "model.embed_tokens.weight"},
    {"norm", "norm.weight", "model.norm.weight", "model.norm.weight"},
    {"hc_head_fn", "hc_head_fn", "model.hc_head.hc_fn", "model.hc_head.hc_fn"},
    {"hc_head_base", "hc_head_base", "model.hc_head.hc_base", "model.hc_head.hc_base"},
    {"hc_head_scale", "hc_head_scale", "model.hc_head.hc_scale", "model.hc_head.hc_scale"},
    {"head", "head.weight", "head.weight", "lm_head.weight"},
};

/* per layer; hf == NULL: the release name */
static const name_row k_layer[] = {
    {"hc_attn_fn", "hc_attn_fn", NULL, "attn_hc.fn"},
    {"hc_attn_base", "hc_attn_base", NULL, "attn_hc.base"},
    {"hc_attn_scale", "hc_attn_scale", NULL, "attn_hc.scale"},
    {"hc_ffn_fn", "hc_ffn_fn", NULL, "ffn_hc.fn"},
    {"hc_ffn_base", "hc_ffn_base", NULL, "ffn_hc.base"},
    {"hc_ffn_scale", "hc_ffn_scale", NULL, "ffn_hc.scale"},
    {"attn_norm", "attn_norm.weight", NULL, "input_layernorm.weight"},
    {"ffn_norm", "ffn_norm.weight", NULL, "post_attention_layernorm.weight"},
    {"attn.wq_a", "attn.wq_a.weight", NULL, "self_attn.q_a_proj.weight"},
    {"attn.q_norm", "attn.q_norm.weight", NULL, "self_attn.q_a_norm.weight"},
    {"attn.wq_b", "attn.wq_b.weight", NULL, "self_attn.q_b_proj.weight"},
    {"attn.wkv", "attn.wkv.weight", NULL, "self_attn.kv_proj.weight"},
    /* transformers renames ".norm." to ".kv_norm." on load, so its save turns kv_norm back
     * into "norm" */
    {"attn.kv_norm", "attn.kv_norm.weight", "attn.norm.weight", "self_attn.kv_norm.weight"},
    {"attn.attn_sink", "attn.attn_sink", NULL, "self_attn.sinks"},
    {"attn.wo_a", "attn.wo_a.weight", NULL, "self_attn.o_a_proj.weight"},
    {"attn.wo_b", "attn.wo_b.weight", NULL, "self_attn.o_b_proj.weight"},
    {"attn.compressor.wkv", "attn.compressor.wkv.weight", NULL, "self_attn.compressor.kv_proj.weight"},
    {"attn.compressor.wgate", "attn.compressor.wgate.weight", NULL, "self_attn.compressor.gate_proj.weight"},
    {"attn.compressor.ape", "attn.compressor.ape", NULL, "self_attn.compressor.position_bias"},
    {"attn.compressor.norm", "attn.compressor.norm.weight", NULL, "self_attn.compressor.kv_norm.weight"},
    {"attn.indexer.wq_b", "attn.indexer.wq_b.weight", NULL, "self_attn.compressor.indexer.q_b_proj.weight"},
    {"attn.indexer.weights_proj", "attn.indexer.weights_proj.weight", NULL,
     "self_attn.compressor.indexer.scorer.weights_proj.weight"},
    {"attn.indexer.compressor.wkv", "attn.indexer.compressor.wkv.weight", NULL,
     "self_attn.compressor.indexer.kv_proj.weight"},
    {"attn.indexer.compressor.wgate", "attn.indexer.compressor.wgate.weight", NULL,
     "self_attn.compressor.indexer.gate_proj.weight"},
    {"attn.indexer.compressor.ape", "attn.indexer.compressor.ape", NULL,
     "self_attn.compressor.indexer.position_bias"},
    {"attn.indexer.compressor.norm", "attn.indexer.compressor.norm.weight", NULL,
     "self_attn.compressor.indexer.kv_norm.weight"},
    {"ffn.gate.weight", "ffn.gate.weight", NULL, "mlp.gate.weight"},
    {"ffn.gate.bias", "ffn.gate.bias", NULL, "mlp.gate.e_score_correction_bias"},
    {"ffn.gate.tid2eid", "ffn.gate.tid2eid", NULL, "mlp.gate.tid2eid"},
    {"ffn.shared.w1", "ffn.shared_experts.w1.weight", NULL, "mlp.shared_experts.gate_proj.weight"},
    {"ffn.shared.w3", "ffn.shared_experts.w3.weight", NULL, "mlp.shared_experts.up_proj.weight"},
    {"ffn.shared.w2", "ffn.shared_experts.w2.weight", NULL, "mlp.shared_experts.down_proj.weight"},
};

static const char *column(const name_row *r, ts_hf_layout lay) {
    return lay == TS_HF_LAYOUT_RELEASE ? r->release
           : lay == TS_HF_LAYOUT_HF    ? (r->hf ? r->hf : r->release)
                                       : r->modules;
}

/* "<w>.weight" -> "<w>.scale" (release, and the save_pretrained names, which are the release's);
 * module names: "<w>.weight_scale_inv" as transformers' FP8 layers hold it, merged experts
 * "<p>.gate_up_proj_scale_inv" */
static void scale_name(const char *w, ts_hf_layout lay, char *out, size_t cap) {
    const size_t n = strlen(w);
    if (lay != TS_HF_LAYOUT_HF_MODULES && n > 7 && !strcmp(w + n - 7, ".weight"))
        snprintf(out, cap, "%.*s.scale", (int)(n - 7), w);
    else snprintf(out, cap, "%s_scale_inv", w);
}

static ts_status too_long(const char *name) {
    return ts__fail(TS_ERR_INTERNAL, "checkpoint names: '%s' does not fit", name);
}

ts_status ts__hf_v4_source(const ts__wspec *s, const ts_model_config *cfg, ts_hf_layout lay,
                           bool tied, ts__hf_src *src) {
    memset(src, 0, sizeof *src);
    src->expert = -1;
    const bool merged = lay == TS_HF_LAYOUT_HF_MODULES; /* experts as [E, rows, cols] */
    const char *nm = tied && !strcmp(s->name, "head") ? "embed" : s->name;
    int n = -1;
    long long L = -1, e = -1;
    char which[4] = {0};
    int used = 0;
    if (sscanf(nm, "%lld.ffn.experts.%lld.%2[w123]%n", &L, &e, which, &used) == 3 && !nm[used] &&
        which[0] == 'w' && which[1] >= '1' && which[1] <= '3') {
        if (!merged) {
            n = snprintf(src->name, sizeof src->name, "%slayers.%lld.ffn.experts.%lld.%s.weight",
                         lay == TS_HF_LAYOUT_HF ? "model." : "", L, e, which);
        } else {
            /* w1 / w3: rows [0, I) / [I, 2I) of expert e's block of gate_up_proj [E, 2I, D] */
            const bool down = !strcmp(which, "w2");
            n = snprintf(src->name, sizeof src->name, "model.layers.%lld.mlp.experts.%s", L,
                         down ? "down_proj" : "gate_up_proj");
            src->expert = e;
            src->row0 = !strcmp(which, "w3") ? cfg->moe_inter_dim : 0;
            src->rows_per_expert = down ? cfg->dim : 2 * cfg->moe_inter_dim;
        }
    } else if (sscanf(nm, "%lld.%n", &L, &used) == 1 && used > 0) {
        for (size_t i = 0; i < sizeof k_layer / sizeof *k_layer && n < 0; i++)
            if (!strcmp(nm + used, k_layer[i].tilestack))
                n = snprintf(src->name, sizeof src->name, "%slayers.%lld.%s",
                             lay == TS_HF_LAYOUT_RELEASE ? "" : "model.", L, column(&k_layer[i], lay));
    } else {
        for (size_t i = 0; i < sizeof k_global / sizeof *k_global && n < 0; i++)
            if (!strcmp(nm, k_global[i].tilestack))
                n = snprintf(src->name, sizeof src->name, "%s", column(&k_global[i], lay));
    }
    if (n < 0) return ts__fail(TS_ERR_INTERNAL, "checkpoint names: no row for tensor %s", s->name);
    if ((size_t)n >= sizeof src->name) return too_long(s->name);
    if (s->kind == TS__W_FP8 || s->kind == TS__W_FP4) scale_name(src->name, lay, src->scale, sizeof src->scale);
    return TS_OK;
}

bool ts__hf_v4_ignored(const char *name) {
    /* the MTP block(s): "mtp.0.*" in the release, "model.mtp.*" / "mtp.*" elsewhere */
    return !strncmp(name, "mtp.", 4) || !strncmp(name, "model.mtp.", 10);
}
