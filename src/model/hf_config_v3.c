/* config.json of DeepseekV3ForCausalLM -> ts__v3_config (docs/models.md "V3 config keys").
 *
 * One table, as for V4 (hf_config_v4.c): each key is read into a field with its range, must
 * have the one value tilestack implements, or is ignored by name (training / tokenizer
 * bookkeeping); any other key is refused, because a checkpoint that needs it would decode to
 * something else without a word. Key names: DeepSeek-V3's release config.json (also R1 and V3.1)
 * and transformers' DeepseekV3Config (rope_parameters, rope_interleave). */
#include "hf_v3.h"
#include "hf_v4.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef enum rule_t { R_INT, R_NUM, R_BOOL, R_EQ_INT, R_EQ_STR, R_SPECIAL, R_IGNORE } rule_t;

typedef struct key_rule {
    const char *key;
    rule_t rule;
    size_t off;     /* R_INT / R_NUM / R_BOOL: offset into ts__v3_config */
    bool required;
    double lo, hi, def;
    const char *str; /* R_EQ_STR */
} key_rule;

#define INT_KEY(k, f, req, lo, hi, def) {k, R_INT, offsetof(ts__v3_config, f), req, lo, hi, def, NULL}
#define NUM_KEY(k, f, lo, hi, def) {k, R_NUM, offsetof(ts__v3_config, f), false, lo, hi, def, NULL}
#define BOOL_KEY(k, f, def) {k, R_BOOL, offsetof(ts__v3_config, f), false, 0, 0, def, NULL}
#define EQ_INT(k, v) {k, R_EQ_INT, 0, false, v, v, v, NULL}
#define EQ_STR(k, v) {k, R_EQ_STR, 0, false, 0, 0, 0, v}
#define SPECIAL(k) {k, R_SPECIAL, 0, false, 0, 0, 0, NULL}
#define IGNORE(k) {k, R_IGNORE, 0, false, 0, 0, 0, NULL}

static const key_rule k_rules[] = {
    SPECIAL("architectures"), SPECIAL("model_type"),
    INT_KEY("vocab_size", vocab, true, 1, INT32_MAX, 0),
    INT_KEY("hidden_size", dim, true, 1, 1 << 20, 0),
    INT_KEY("num_hidden_layers", n_layers, true, 1, TS_MODEL_MAX_LAYERS, 0),
    INT_KEY("num_attention_heads", n_heads, true, 1, 4096, 0),
    INT_KEY("kv_lora_rank", kv_lora, true, 1, 1 << 20, 0),
    INT_KEY("qk_nope_head_dim", nope, true, 1, 1 << 16, 0),
    INT_KEY("qk_rope_head_dim", rope, true, 1, 1 << 16, 0),
    INT_KEY("v_head_dim", v_head, true, 1, 1 << 16, 0),
    INT_KEY("intermediate_size", inter, true, 1, 1 << 20, 0),
    INT_KEY("moe_intermediate_size", moe_inter, true, 1, 1 << 20, 0),
    INT_KEY("n_routed_experts", n_experts, true, 1, 1 << 16, 0),
    INT_KEY("num_experts_per_tok", topk, true, 1, 4096, 0),
    INT_KEY("n_shared_experts", n_shared, false, 0, 64, 1),
    INT_KEY("n_group", n_group, false, 1, 4096, 1),
    INT_KEY("topk_group", topk_group, false, 1, 4096, 1),
    INT_KEY("first_k_dense_replace", first_dense, false, 0, TS_MODEL_MAX_LAYERS, 0),
    INT_KEY("max_position_embeddings", max_pos, false, 1, INT64_C(1) << 40, 4096),
    NUM_KEY("routed_scaling_factor", route_scale, 1e-6, 1e6, 1),
    NUM_KEY("rms_norm_eps", eps, 1e-30, 0.5, 1e-6),
    NUM_KEY("rope_theta", rope_theta, 1, 1e12, 10000),
    BOOL_KEY("norm_topk_prob", norm_topk, 1),
    BOOL_KEY("tie_word_embeddings", tied, 0),
    BOOL_KEY("rope_interleave", interleave, 1), /* transformers' default: DeepSeek's pairs */
    SPECIAL("q_lora_rank"), SPECIAL("num_key_value_heads"), SPECIAL("rope_scaling"),
    SPECIAL("rope_parameters"), SPECIAL("quantization_config"),
    EQ_INT("moe_layer_freq", 1), /* every layer after the dense ones is MoE */
    EQ_STR("scoring_func", "sigmoid"), EQ_STR("topk_method", "noaux_tc"),
    EQ_STR("hidden_act", "silu"),
    {"attention_bias", R_BOOL, 0, false, 0, 0, 0, "false"}, {"mlp_bias", R_BOOL, 0, false, 0, 0, 0, "false"},
    /* the MTP layer (model.layers.<n_layers>.*) is not loaded; its tensors are ignored */
    IGNORE("num_nextn_predict_layers"), IGNORE("num_mtp_layers"),
    IGNORE("_name_or_path"), IGNORE("transformers_version"), IGNORE("torch_dtype"),
    IGNORE("dtype"), IGNORE("bos_token_id"), IGNORE("eos_token_id"), IGNORE("pad_token_id"),
    IGNORE("use_cache"), IGNORE("initializer_range"), IGNORE("attention_dropout"),
    IGNORE("aux_loss_alpha"), IGNORE("seq_aux"), IGNORE("ep_size"), IGNORE("pretraining_tp"),
    IGNORE("auto_map"), IGNORE("output_router_logits"), IGNORE("router_aux_loss_coef"),
    IGNORE("return_dict"), IGNORE("output_hidden_states"), IGNORE("output_attentions"),
    IGNORE("id2label"), IGNORE("label2id"), IGNORE("tokenizer_class"),
};
#define N_RULES (sizeof k_rules / sizeof *k_rules)

/* DeepseekV32ForCausalLM's keys on top of V3's (DeepSeek-V3.2-Exp's config.json and
 * transformers' DeepseekV32Config) */
static const key_rule k_rules_v32[] = {
    INT_KEY("index_n_heads", index_heads, true, 1, 4096, 64),
    INT_KEY("index_head_dim", index_dim, true, 1, 1 << 16, 128),
    INT_KEY("index_topk", index_topk, true, 1, INT64_C(1) << 40, 2048),
    /* transformers writes these from the other keys; checked against them */
    SPECIAL("mlp_layer_types"), SPECIAL("layer_types"), SPECIAL("head_dim"),
};
#define N_RULES_V32 (sizeof k_rules_v32 / sizeof *k_rules_v32)

static const key_rule *rule_of(const char *key, bool v32) {
    for (size_t i = 0; i < N_RULES; i++)
        if (!strcmp(k_rules[i].key, key)) return &k_rules[i];
    for (size_t i = 0; v32 && i < N_RULES_V32; i++)
        if (!strcmp(k_rules_v32[i].key, key)) return &k_rules_v32[i];
    return NULL;
}

static const char *show(const json_t *v, char b[TS__ESC_CAP]) { return ts__hf_json_show(v, b); }

/* 1: deepseek_v3, 2: deepseek_v32, 0: neither (by model_type, else the one architecture) */
static int names_v3(const json_t *root) {
    const json_t *t = json_object_get(root, "model_type"), *a = json_object_get(root, "architectures");
    if (json_is_string(t))
        return !strcmp(json_string_value(t), "deepseek_v3") ? 1 : !strcmp(json_string_value(t), "deepseek_v32") ? 2 : 0;
    if (!json_is_array(a) || json_array_size(a) != 1 || !json_is_string(json_array_get(a, 0))) return 0;
    const char *n = json_string_value(json_array_get(a, 0));
    return !strcmp(n, "DeepseekV3ForCausalLM") ? 1 : !strcmp(n, "DeepseekV32ForCausalLM") ? 2 : 0;
}

bool ts__v3_is_v3_config(const char *text, size_t len) {
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
    const bool yes = json_is_object(root) && names_v3(root) != 0;
    json_decref(root);
    return yes;
}

static ts_status check_architecture(const char *path, const json_t *root, bool v32) {
    char b[TS__ESC_CAP];
    const char *arch = v32 ? "DeepseekV32ForCausalLM" : "DeepseekV3ForCausalLM";
    const char *type = v32 ? "deepseek_v32" : "deepseek_v3";
    const json_t *a = json_object_get(root, "architectures"), *t = json_object_get(root, "model_type");
    if (a) {
        if (!json_is_array(a) || json_array_size(a) == 0)
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: architectures = %s: must be a list of class "
                            "names", path, show(a, b));
        for (size_t i = 0; i < json_array_size(a); i++) {
            const json_t *e = json_array_get(a, i);
            if (!json_is_string(e) || strcmp(json_string_value(e), arch))
                return ts__fail(TS_ERR_UNSUPPORTED, "%s: architectures[%zu] = %s is not supported here "
                                "(model_type %s is %s)", path, i, show(e, b), type, arch);
        }
    }
    if (!t) return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: model_type is missing", path);
    if (!json_is_string(t) || strcmp(json_string_value(t), type))
        return ts__fail(TS_ERR_UNSUPPORTED, "%s: model_type = %s is not %s", path, show(t, b), type);
    return TS_OK;
}

/* rope_scaling (release) or rope_parameters (transformers; rope_theta may sit inside it) */
static ts_status parse_rope(const char *path, const char *where, const json_t *r, ts__v3_config *c) {
    char b[TS__ESC_CAP], key[96];
    if (!r || json_is_null(r)) return TS_OK;
    if (!json_is_object(r))
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: %s = %s: must be an object", path, where, show(r, b));
    const json_t *ty = json_object_get(r, "rope_type");
    if (!ty) ty = json_object_get(r, "type");
    const char *type = "default";
    if (ty) TS__RETURN_IF_ERROR(ts__hf_json_str(path, where, ty, &type));
    c->yarn = !strcmp(type, "yarn");
    if (!c->yarn && strcmp(type, "default"))
        return ts__fail(TS_ERR_UNSUPPORTED, "%s: %s.rope_type = \"%s\" is not supported (V3 uses YaRN "
                        "or plain RoPE)", path, where, ts__text_escape_str(type, b, sizeof b));
    bool has_factor = false;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)r, k, v) {
        snprintf(key, sizeof key, "%s.%s", where, ts__text_escape_str(k, b, sizeof b));
        double x = 0;
        if (!strcmp(k, "rope_type") || !strcmp(k, "type")) continue;
        if (!strcmp(k, "rope_theta")) {
            TS__RETURN_IF_ERROR(ts__hf_json_num(path, key, v, 1, 1e12, true, &c->rope_theta));
        } else if (c->yarn && !strcmp(k, "factor")) {
            TS__RETURN_IF_ERROR(ts__hf_json_num(path, key, v, 1, 1e6, false, &c->factor));
            has_factor = true;
        } else if (c->yarn && !strcmp(k, "original_max_position_embeddings")) {
            TS__RETURN_IF_ERROR(ts__hf_json_int(path, key, v, 1, INT64_C(1) << 40, &c->orig_max));
        } else if (c->yarn && !strcmp(k, "beta_fast")) {
            TS__RETURN_IF_ERROR(ts__hf_json_int(path, key, v, 1, 1 << 20, &c->beta_fast));
        } else if (c->yarn && !strcmp(k, "beta_slow")) {
            TS__RETURN_IF_ERROR(ts__hf_json_int(path, key, v, 1, 1 << 20, &c->beta_slow));
        } else if (c->yarn && !strcmp(k, "mscale")) {
            TS__RETURN_IF_ERROR(ts__hf_json_num(path, key, v, 0, 1e6, false, &c->mscale));
        } else if (c->yarn && !strcmp(k, "mscale_all_dim")) {
            TS__RETURN_IF_ERROR(ts__hf_json_num(path, key, v, 0, 1e6, false, &c->mscale_all_dim));
        } else if (c->yarn && !strcmp(k, "attention_factor")) {
            TS__RETURN_IF_ERROR(ts__hf_json_num(path, key, v, 0, 1e6, true, &x));
            c->attn_factor = x; /* explicit: transformers takes it as given */
        } else if (c->yarn && !strcmp(k, "truncate")) {
            if (!json_is_true(v))
                return ts__fail(TS_ERR_UNSUPPORTED, "%s: %s = %s is not supported (the ramp's ends are "
                                "floored / ceiled)", path, key, show(v, b));
        } else {
            return ts__fail(TS_ERR_UNSUPPORTED, "%s: %s is not a RoPE setting tilestack knows", path, key);
        }
    }
    if (c->yarn && !has_factor) return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: %s.factor is missing", path, where);
    return TS_OK;
}

/* DeepSeek's FP8 release: e4m3 weights, f32 weight_scale_inv per 128x128, activations cast at
 * run time; every setting must be that one. */
static ts_status parse_quant(const char *path, const json_t *q, ts__v3_config *c) {
    char b[TS__ESC_CAP];
    if (!q || json_is_null(q)) return TS_OK;
    if (!json_is_object(q))
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: quantization_config = %s: must be an object", path, show(q, b));
    if (!json_object_get(q, "quant_method"))
        return ts__fail(TS_ERR_UNSUPPORTED, "%s: quantization_config.quant_method is missing", path);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)q, k, v) {
        char key[96];
        snprintf(key, sizeof key, "quantization_config.%s", ts__text_escape_str(k, b, sizeof b));
        /* scale_fmt ue8m0 (V3.1): DeepSeek's activation scales are powers of two; the weights'
         * weight_scale_inv stay f32 (powers of two then), which the dequantisation takes as is */
        static const char *const want[][2] = {{"quant_method", "fp8"}, {"fmt", "e4m3"},
                                              {"activation_scheme", "dynamic"}, {"scale_fmt", "ue8m0"}};
        size_t w = 0;
        while (w < 4 && strcmp(k, want[w][0])) w++;
        if (w < 4) {
            const char *s = NULL;
            TS__RETURN_IF_ERROR(ts__hf_json_str(path, key, v, &s));
            if (strcmp(s, want[w][1]))
                return ts__fail(TS_ERR_UNSUPPORTED, "%s: %s = %s is not supported (DeepSeek-V3's FP8: %s)",
                                path, key, show(v, b), want[w][1]);
        } else if (!strcmp(k, "weight_block_size")) {
            int64_t d0 = 0, d1 = 0;
            if (!json_is_array(v) || json_array_size(v) != 2 ||
                ts__hf_json_int(path, key, json_array_get(v, 0), 1, 1 << 20, &d0) != TS_OK ||
                ts__hf_json_int(path, key, json_array_get(v, 1), 1, 1 << 20, &d1) != TS_OK)
                return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: %s = %s: must be [rows, cols]", path, key, show(v, b));
            if (d0 != 128 || d1 != 128)
                return ts__fail(TS_ERR_UNSUPPORTED, "%s: %s = [%lld, %lld] is not supported (one scale per "
                                "128x128)", path, key, (long long)d0, (long long)d1);
        } else if (strcmp(k, "modules_to_not_convert")) {
            return ts__fail(TS_ERR_UNSUPPORTED, "%s: %s is not a quantisation setting tilestack knows", path, key);
        }
    }
    c->quantized = true;
    return TS_OK;
}

static ts_status check_ranges(const char *path, ts__v3_config *c) {
    if (c->kv_lora != 512 || c->rope != 64)
        return ts__fail(TS_ERR_UNSUPPORTED, "%s: kv_lora_rank = %lld, qk_rope_head_dim = %lld: tilestack's "
                        "MLA decode (FlashMLA) takes a 576-wide latent row, 512 + 64", path,
                        (long long)c->kv_lora, (long long)c->rope);
    if (c->n_experts % c->n_group)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: n_routed_experts = %lld is not a multiple of n_group "
                        "= %lld", path, (long long)c->n_experts, (long long)c->n_group);
    if (c->topk_group > c->n_group)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: topk_group = %lld > n_group = %lld", path,
                        (long long)c->topk_group, (long long)c->n_group);
    if (c->n_experts / c->n_group < 2)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: n_routed_experts / n_group = %lld: a group's score is "
                        "its top-2 sum, so each needs 2 experts", path, (long long)(c->n_experts / c->n_group));
    if (c->topk > c->topk_group * (c->n_experts / c->n_group))
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: num_experts_per_tok = %lld is more than the %lld experts "
                        "of topk_group = %lld groups", path, (long long)c->topk,
                        (long long)(c->topk_group * (c->n_experts / c->n_group)), (long long)c->topk_group);
    if (c->first_dense > c->n_layers)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: first_k_dense_replace = %lld > num_hidden_layers = %lld",
                        path, (long long)c->first_dense, (long long)c->n_layers);
    if (c->yarn && c->orig_max < 1)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: rope_scaling.original_max_position_embeddings is "
                        "missing", path);
    return TS_OK;
}

/* V3.2: the indexer's shapes, and transformers' derived lists agreeing with the keys they
 * come from (a list that says otherwise describes a model tilestack does not build) */
static ts_status check_v32(const char *path, const json_t *root, const ts__v3_config *c) {
    char b[TS__ESC_CAP];
    if (c->index_dim < c->rope || c->index_dim % 2)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: index_head_dim = %lld: must be even and at least "
                        "qk_rope_head_dim = %lld (the indexer rotates its first %lld values)", path,
                        (long long)c->index_dim, (long long)c->rope, (long long)c->rope);
    if (!c->interleave)
        return ts__fail(TS_ERR_UNSUPPORTED, "%s: rope_interleave = false: V3.2's MLA rotates DeepSeek's "
                        "interleaved pairs", path);
    if (!c->q_lora)
        return ts__fail(TS_ERR_UNSUPPORTED, "%s: q_lora_rank = null: V3.2's indexer reads the q_a_layernorm "
                        "output", path);
    const json_t *hd = json_object_get(root, "head_dim");
    if (hd && !json_is_null(hd)) {
        int64_t x = 0;
        TS__RETURN_IF_ERROR(ts__hf_json_int(path, "head_dim", hd, 1, 1 << 16, &x));
        if (x != c->rope)
            return ts__fail(TS_ERR_UNSUPPORTED, "%s: head_dim = %lld: transformers sets it to "
                            "qk_rope_head_dim = %lld", path, (long long)x, (long long)c->rope);
    }
    static const char *const lists[] = {"mlp_layer_types", "layer_types"};
    for (int li = 0; li < 2; li++) {
        const json_t *l = json_object_get(root, lists[li]);
        if (!l || json_is_null(l)) continue;
        if (!json_is_array(l) || (int64_t)json_array_size(l) != c->n_layers)
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: %s = %s: must list num_hidden_layers = %lld "
                            "entries", path, lists[li], show(l, b), (long long)c->n_layers);
        for (int64_t L = 0; L < c->n_layers; L++) {
            const json_t *e = json_array_get(l, (size_t)L);
            const char *want = li ? "indexed_attention" : L < c->first_dense ? "dense" : "sparse";
            if (!json_is_string(e) || strcmp(json_string_value(e), want))
                return ts__fail(TS_ERR_UNSUPPORTED, "%s: %s[%lld] = %s: tilestack implements \"%s\" there "
                                "(first_k_dense_replace = %lld)", path, lists[li], (long long)L, show(e, b),
                                want, (long long)c->first_dense);
        }
    }
    return TS_OK;
}

/* transformers' yarn_get_mscale */
static double yarn_mscale(double factor, double m) { return factor <= 1 ? 1.0 : 0.1 * m * log(factor) + 1.0; }

ts_status ts__v3_parse_config(const char *text, size_t len, const char *path, ts__v3_config *cfg) {
    json_t *root;
    ts_status st = ts__hf_json_object(text, len, path, &root);
    if (st != TS_OK) return st;
    ts__v3_config c;
    memset(&c, 0, sizeof c);
    c.beta_fast = 32, c.beta_slow = 1, c.factor = 1;
    c.v32 = names_v3(root) == 2;
    for (size_t i = 0; i < N_RULES + N_RULES_V32; i++) {
        const key_rule *r = i < N_RULES ? &k_rules[i] : &k_rules_v32[i - N_RULES];
        if (r->rule == R_INT) *(int64_t *)((char *)&c + r->off) = (int64_t)r->def;
        if (r->rule == R_NUM) *(double *)((char *)&c + r->off) = r->def;
        if (r->rule == R_BOOL && !r->str) *(bool *)((char *)&c + r->off) = r->def != 0;
    }
    char b[TS__ESC_CAP];
    st = check_architecture(path, root, c.v32);
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        if (st != TS_OK) break;
        const key_rule *r = rule_of(k, c.v32);
        if (!r) {
            st = ts__fail(TS_ERR_UNSUPPORTED, "%s: %s is not a %s key tilestack knows (a "
                          "checkpoint that needs it would decode wrongly here)", path,
                          ts__text_escape_str(k, b, sizeof b), c.v32 ? "deepseek_v32" : "deepseek_v3");
        } else if (r->rule == R_INT) {
            st = ts__hf_json_int(path, k, v, (int64_t)r->lo, (int64_t)r->hi, (int64_t *)((char *)&c + r->off));
        } else if (r->rule == R_NUM) {
            st = ts__hf_json_num(path, k, v, r->lo, r->hi, true, (double *)((char *)&c + r->off));
        } else if (r->rule == R_BOOL) {
            if (!json_is_boolean(v))
                st = ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: %s = %s: must be true or false", path, k, show(v, b));
            else if (r->str && json_is_true(v) != !strcmp(r->str, "true"))
                st = ts__fail(TS_ERR_UNSUPPORTED, "%s: %s = %s is not supported (tilestack implements %s)",
                              path, k, show(v, b), r->str);
            else if (!r->str) *(bool *)((char *)&c + r->off) = json_is_true(v);
        } else if (r->rule == R_EQ_INT && !json_is_null(v)) {
            int64_t x = 0;
            st = ts__hf_json_int(path, k, v, INT64_MIN / 2, INT64_MAX / 2, &x);
            if (st == TS_OK && x != (int64_t)r->lo)
                st = ts__fail(TS_ERR_UNSUPPORTED, "%s: %s = %lld is not supported (tilestack implements "
                              "%lld)", path, k, (long long)x, (long long)r->lo);
        } else if (r->rule == R_EQ_STR) {
            const char *s = NULL;
            st = ts__hf_json_str(path, k, v, &s);
            if (st == TS_OK && strcmp(s, r->str))
                st = ts__fail(TS_ERR_UNSUPPORTED, "%s: %s = %s is not supported (tilestack implements "
                              "\"%s\")", path, k, show(v, b), r->str);
        }
    }
    /* the required keys, then the special ones */
    for (size_t i = 0; st == TS_OK && i < N_RULES + (c.v32 ? N_RULES_V32 : 0); i++) {
        const key_rule *r = i < N_RULES ? &k_rules[i] : &k_rules_v32[i - N_RULES];
        if (r->required && !json_object_get(root, r->key))
            st = ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: %s is missing", path, r->key);
    }
    const json_t *ql = json_object_get(root, "q_lora_rank"), *kvh = json_object_get(root, "num_key_value_heads");
    if (st == TS_OK && ql && !json_is_null(ql))
        st = ts__hf_json_int(path, "q_lora_rank", ql, 1, 1 << 20, &c.q_lora);
    if (st == TS_OK && kvh && !json_is_null(kvh)) {
        int64_t x = 0;
        st = ts__hf_json_int(path, "num_key_value_heads", kvh, 1, 4096, &x);
        /* MLA: one latent shared by all heads, expanded per head by kv_b_proj */
        if (st == TS_OK && x != c.n_heads)
            st = ts__fail(TS_ERR_UNSUPPORTED, "%s: num_key_value_heads = %lld: MLA expands the latent to "
                          "every head (num_attention_heads = %lld)", path, (long long)x, (long long)c.n_heads);
    }
    if (st == TS_OK) st = parse_rope(path, "rope_scaling", json_object_get(root, "rope_scaling"), &c);
    if (st == TS_OK && json_object_get(root, "rope_parameters") && !json_object_get(root, "rope_scaling"))
        st = parse_rope(path, "rope_parameters", json_object_get(root, "rope_parameters"), &c);
    if (st == TS_OK) st = parse_quant(path, json_object_get(root, "quantization_config"), &c);
    if (st == TS_OK) st = check_ranges(path, &c);
    if (st == TS_OK && c.v32) st = check_v32(path, root, &c);
    json_decref(root);
    if (st != TS_OK) return st;
    /* transformers' YaRN: cos / sin times attention_factor (mscale / mscale_all_dim ratio when
     * both are set, else mscale(factor, 1)); the softmax scale times mscale(factor,
     * mscale_all_dim)^2 */
    if (c.yarn && c.attn_factor == 0)
        c.attn_factor = c.mscale != 0 && c.mscale_all_dim != 0
                            ? yarn_mscale(c.factor, c.mscale) / yarn_mscale(c.factor, c.mscale_all_dim)
                            : yarn_mscale(c.factor, 1);
    if (!c.yarn) c.attn_factor = 1, c.factor = 1, c.orig_max = c.max_pos;
    c.softmax_scale = 1.0 / sqrt((double)(c.nope + c.rope));
    if (c.yarn && c.mscale_all_dim != 0) {
        const double ms = yarn_mscale(c.factor, c.mscale_all_dim);
        c.softmax_scale *= ms * ms;
    }
    c.max_seq = c.max_pos < TS__HF_MAX_SEQ ? c.max_pos : TS__HF_MAX_SEQ;
    *cfg = c;
    return TS_OK;
}

uint64_t ts__v3_config_hash(const ts__v3_config *c) {
    /* the fields one by one (never the struct's padding); %a keeps every double's bits */
    char b[1024];
    const int n = snprintf(
        b, sizeof b,
        "%lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld "
        "%a %a %a %d %d %d %d %a %a %a %lld %lld %lld %a %a %lld %lld %d %d %lld %lld %lld",
        (long long)c->vocab, (long long)c->dim, (long long)c->n_layers, (long long)c->n_heads,
        (long long)c->q_lora, (long long)c->kv_lora, (long long)c->nope, (long long)c->rope,
        (long long)c->v_head, (long long)c->inter, (long long)c->moe_inter, (long long)c->n_experts,
        (long long)c->topk, (long long)c->n_shared, (long long)c->n_group, (long long)c->topk_group,
        (long long)c->first_dense, c->route_scale, c->eps, c->rope_theta, c->norm_topk, c->tied,
        c->interleave, c->yarn, c->factor, c->mscale, c->mscale_all_dim, (long long)c->orig_max,
        (long long)c->beta_fast, (long long)c->beta_slow, c->attn_factor, c->softmax_scale,
        (long long)c->max_pos, (long long)c->max_seq, c->quantized, c->v32,
        (long long)c->index_heads, (long long)c->index_dim, (long long)c->index_topk);
    return ts__model_fnv1a64(b, n > 0 ? (size_t)n : 0);
}
