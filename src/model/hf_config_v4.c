/* config.json of DeepseekV4ForCausalLM <-> ts_model_config (docs/models.md "Config keys").
 *
 * One table says what each key becomes. A key tilestack implements with one value only (one
 * KV head, one shared expert, SiLU, ...) must have that value; a key it does not know is
 * refused rather than ignored, because a checkpoint that needs it would decode to something
 * else without a word. Keys that only matter to training or to the tokenizer are ignored by
 * name. Key names and meanings: DeepSeek's V4-Flash config.json (release) and transformers'
 * DeepseekV4Config (layer_types, compress_rates, mlp_layer_types, rope_parameters). */
#include "hf_v4.h"
#include "hf_v3.h"

#include "core/text_escape.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum rule_t {
    R_INT,      /* an integer into an int64 field, in [lo, hi] */
    R_NUM,      /* a number into a double field, in (lo, hi] or [lo, hi] */
    R_EQ_INT,   /* an integer that must equal `lo` (null allowed) */
    R_EQ_STR,   /* a string that must be `str` */
    R_EQ_BOOL,  /* a boolean that must be `lo != 0` */
    R_SPECIAL,  /* handled in code below (architectures, ratios, RoPE, quantisation, ...) */
    R_IGNORE    /* training / tokenizer / bookkeeping only */
} rule_t;

typedef struct key_rule {
    const char *key;
    rule_t rule;
    const char *field; /* tilestack's key (docs/model.md §1), for messages */
    size_t off;        /* R_INT / R_NUM: offset into ts_model_config */
    bool required;
    double lo, hi, def;
    bool open_lo; /* R_NUM: lo itself is out of range */
    const char *str;
} key_rule;

#define INT_KEY(k, f, req, lo, hi, def) \
    {k, R_INT, #f, offsetof(ts_model_config, f), req, lo, hi, def, false, NULL}
#define NUM_KEY(k, f, lo, hi, def, open) \
    {k, R_NUM, #f, offsetof(ts_model_config, f), false, lo, hi, def, open, NULL}
#define EQ_INT(k, v) {k, R_EQ_INT, NULL, 0, false, v, v, v, false, NULL}
#define EQ_STR(k, v, req) {k, R_EQ_STR, NULL, 0, req, 0, 0, 0, false, v}
#define EQ_BOOL(k, v) {k, R_EQ_BOOL, NULL, 0, false, v, v, v, false, NULL}
#define SPECIAL(k, f) {k, R_SPECIAL, f, 0, false, 0, 0, 0, false, NULL}
#define IGNORE(k) {k, R_IGNORE, NULL, 0, false, 0, 0, 0, false, NULL}

static const key_rule k_rules[] = {
    SPECIAL("architectures", NULL),
    EQ_STR("model_type", "deepseek_v4", true),
    INT_KEY("vocab_size", vocab_size, true, 1, INT32_MAX, 0),
    INT_KEY("hidden_size", dim, true, 1, 1 << 20, 0),
    INT_KEY("num_hidden_layers", n_layers, true, 1, TS_MODEL_MAX_LAYERS, 0),
    INT_KEY("num_attention_heads", n_heads, true, 1, 4096, 0),
    INT_KEY("head_dim", head_dim, false, 1, 1 << 20, 512),
    INT_KEY("qk_rope_head_dim", rope_head_dim, false, 1, 1 << 20, 64),
    INT_KEY("q_lora_rank", q_lora_rank, true, 1, 1 << 20, 0),
    INT_KEY("o_lora_rank", o_lora_rank, true, 1, 1 << 20, 0),
    INT_KEY("o_groups", o_groups, true, 1, 4096, 0),
    INT_KEY("sliding_window", window_size, true, 1, 1 << 20, 0),
    INT_KEY("index_n_heads", index_n_heads, false, 1, 4096, 64),
    INT_KEY("index_head_dim", index_head_dim, false, 1, 1 << 20, 128),
    INT_KEY("index_topk", index_topk, false, 1, 4096, 512),
    INT_KEY("hc_mult", hc_mult, false, 1, 64, 4),
    INT_KEY("hc_sinkhorn_iters", hc_sinkhorn_iters, false, 1, 1 << 20, 20),
    INT_KEY("n_routed_experts", n_routed_experts, true, 1, 1 << 16, 0),
    INT_KEY("num_experts_per_tok", n_activated_experts, true, 1, 4096, 0),
    INT_KEY("moe_intermediate_size", moe_inter_dim, true, 1, 1 << 20, 0),
    INT_KEY("num_hash_layers", n_hash_layers, false, 0, TS_MODEL_MAX_LAYERS, 3),
    NUM_KEY("rope_theta", rope_theta, 1, 1e12, 10000, true),
    NUM_KEY("compress_rope_theta", compress_rope_theta, 1, 1e12, 160000, true),
    NUM_KEY("routed_scaling_factor", route_scale, 0, 1e6, 1.5, true),
    NUM_KEY("swiglu_limit", swiglu_limit, 0, 1e6, 10, false),
    NUM_KEY("rms_norm_eps", norm_eps, 0, 0.5, 1e-6, true),
    NUM_KEY("hc_eps", hc_eps, 0, 0.5, 1e-6, true),
    EQ_INT("num_key_value_heads", 1), /* one latent KV head (MQA, K = V) */
    EQ_INT("n_shared_experts", 1),
    EQ_INT("first_k_dense_replace", 0), /* V4 has no dense layers */
    EQ_INT("n_group", 1),               /* no group-limited routing in V4 */
    EQ_INT("topk_group", 1),
    EQ_STR("hidden_act", "silu", false),
    EQ_STR("topk_method", "noaux_tc", false),
    EQ_BOOL("norm_topk_prob", 1), /* tilestack renormalises the top-k scores (not softmax's) */
    EQ_BOOL("attention_bias", 0),
    EQ_BOOL("mlp_bias", 0),
    SPECIAL("scoring_func", "score_func"),
    SPECIAL("compress_ratios", "compress_ratios"),
    SPECIAL("layer_types", "compress_ratios"),
    SPECIAL("compress_rates", "compress_ratios"),
    SPECIAL("mlp_layer_types", "n_hash_layers"),
    SPECIAL("rope_scaling", "rope_factor"),
    SPECIAL("rope_parameters", "rope_factor"),
    SPECIAL("partial_rotary_factor", "rope_head_dim"),
    SPECIAL("max_position_embeddings", "max_seq_len"),
    SPECIAL("num_nextn_predict_layers", NULL),
    SPECIAL("quantization_config", NULL),
    SPECIAL("expert_dtype", NULL),
    SPECIAL("tie_word_embeddings", NULL),
    IGNORE("_name_or_path"), IGNORE("transformers_version"), IGNORE("torch_dtype"),
    IGNORE("dtype"), IGNORE("bos_token_id"), IGNORE("eos_token_id"), IGNORE("pad_token_id"),
    IGNORE("use_cache"), IGNORE("initializer_range"), IGNORE("attention_dropout"),
    IGNORE("output_router_logits"), IGNORE("router_aux_loss_coef"),
    IGNORE("router_jitter_noise"), IGNORE("return_dict"), IGNORE("output_hidden_states"),
    IGNORE("output_attentions"), IGNORE("tokenizer_class"), IGNORE("id2label"),
    IGNORE("label2id"), IGNORE("problem_type"), IGNORE("chunk_size_feed_forward"),
    IGNORE("is_encoder_decoder"), IGNORE("auto_map"),
};

#define N_RULES (sizeof k_rules / sizeof *k_rules)

/* ---- messages: "<path>: <key>[ = value]: why" */

static ts_status fail(ts_status code, const char *path, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static ts_status fail(ts_status code, const char *path, const char *fmt, ...) {
    char msg[640];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ts__fail(code, "%s: %s", path, msg);
}

static const char *esc(const char *s, char buf[TS__ESC_CAP]) { return ts__text_escape_str(s, buf, TS__ESC_CAP); }

/* A JSON value as short text for messages. */
static const char *show(const json_t *v, char buf[TS__ESC_CAP]) {
    char tmp[96];
    if (json_is_integer(v)) snprintf(tmp, sizeof tmp, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v)) snprintf(tmp, sizeof tmp, "%.17g", json_real_value(v));
    else if (json_is_string(v)) {
        char e[TS__ESC_CAP];
        snprintf(tmp, sizeof tmp, "\"%s\"", esc(json_string_value(v), e));
    } else if (json_is_true(v)) snprintf(tmp, sizeof tmp, "true");
    else if (json_is_false(v)) snprintf(tmp, sizeof tmp, "false");
    else if (json_is_null(v)) snprintf(tmp, sizeof tmp, "null");
    else snprintf(tmp, sizeof tmp, json_is_array(v) ? "an array" : "an object");
    snprintf(buf, TS__ESC_CAP, "%s", tmp);
    return buf;
}

static const key_rule *rule_of(const char *key) {
    for (size_t i = 0; i < N_RULES; i++)
        if (!strcmp(k_rules[i].key, key)) return &k_rules[i];
    return NULL;
}

/* An integer-valued JSON number (5 or 5.0) in [lo, hi]. */
static ts_status get_int(const char *path, const char *key, const json_t *v, int64_t lo,
                         int64_t hi, int64_t *out) {
    char b[TS__ESC_CAP];
    double d = json_is_integer(v) ? (double)json_integer_value(v) : json_is_real(v) ? json_real_value(v) : NAN;
    if (!json_is_integer(v) && !(json_is_real(v) && isfinite(d) && d == floor(d) && fabs(d) < 9e15))
        return fail(TS_ERR_INVALID_ARGUMENT, path, "%s = %s: must be an integer", key, show(v, b));
    const int64_t x = json_is_integer(v) ? (int64_t)json_integer_value(v) : (int64_t)d;
    if (x < lo || x > hi)
        return fail(TS_ERR_INVALID_ARGUMENT, path, "%s = %lld is outside [%lld, %lld]", key,
                    (long long)x, (long long)lo, (long long)hi);
    *out = x;
    return TS_OK;
}

static ts_status get_num(const char *path, const char *key, const json_t *v, double lo,
                         double hi, bool open_lo, double *out) {
    char b[TS__ESC_CAP];
    if (!json_is_number(v)) return fail(TS_ERR_INVALID_ARGUMENT, path, "%s = %s: must be a number", key, show(v, b));
    const double x = json_number_value(v);
    if (!isfinite(x) || x < lo || (open_lo && x == lo) || x > hi)
        return fail(TS_ERR_INVALID_ARGUMENT, path, "%s = %.17g is outside %s%g, %g]", key, x,
                    open_lo ? "(" : "[", lo, hi);
    *out = x;
    return TS_OK;
}

static ts_status get_str(const char *path, const char *key, const json_t *v, const char **out) {
    char b[TS__ESC_CAP];
    if (!json_is_string(v)) return fail(TS_ERR_INVALID_ARGUMENT, path, "%s = %s: must be a string", key, show(v, b));
    *out = json_string_value(v);
    return TS_OK;
}

/* ---- the special keys */

/* architectures and model_type first: a V3 or V4.1 config is named as such, not by whichever of
 * its keys tilestack happens not to know */
static ts_status check_architecture(const char *path, const json_t *root) {
    char b[TS__ESC_CAP];
    const json_t *a = json_object_get(root, "architectures");
    if (a) {
        if (!json_is_array(a) || json_array_size(a) == 0)
            return fail(TS_ERR_INVALID_ARGUMENT, path, "architectures = %s: must be a list of class names", show(a, b));
        for (size_t i = 0; i < json_array_size(a); i++) {
            const json_t *e = json_array_get(a, i);
            if (!json_is_string(e) || strcmp(json_string_value(e), "DeepseekV4ForCausalLM"))
                return fail(TS_ERR_UNSUPPORTED, path, "architectures[%zu] = %s is not supported "
                            "(tilestack loads DeepseekV4ForCausalLM)", i, show(e, b));
        }
    }
    const json_t *t = json_object_get(root, "model_type");
    if (!t) return fail(TS_ERR_INVALID_ARGUMENT, path, "model_type is missing");
    if (!json_is_string(t) || strcmp(json_string_value(t), "deepseek_v4"))
        return fail(TS_ERR_UNSUPPORTED, path, "model_type = %s is not supported (tilestack loads "
                    "deepseek_v4)", show(t, b));
    return TS_OK;
}

static ts_status parse_quantization(const char *path, const json_t *root, ts__hf_v4_info *info) {
    char b[TS__ESC_CAP];
    const json_t *q = json_object_get(root, "quantization_config"), *ed = json_object_get(root, "expert_dtype");
    const char *expert = NULL;
    if (ed && !json_is_null(ed)) TS__RETURN_IF_ERROR(get_str(path, "expert_dtype", ed, &expert));
    info->quantized = q && !json_is_null(q);
    if (info->quantized) {
        if (!json_is_object(q))
            return fail(TS_ERR_INVALID_ARGUMENT, path, "quantization_config = %s: must be an object", show(q, b));
        const char *k;
        json_t *v;
        bool method = false, scale_fmt = false;
        json_object_foreach((json_t *)q, k, v) {
            char key[96];
            snprintf(key, sizeof key, "quantization_config.%s", esc(k, b));
            const char *s = NULL;
            if (!strcmp(k, "quant_method") || !strcmp(k, "fmt") || !strcmp(k, "scale_fmt") ||
                !strcmp(k, "activation_scheme") || !strcmp(k, "expert_dtype")) {
                TS__RETURN_IF_ERROR(get_str(path, key, v, &s));
                static const char *const want[][2] = {{"quant_method", "fp8"}, {"fmt", "e4m3"},
                                                      {"scale_fmt", "ue8m0"},
                                                      {"activation_scheme", "dynamic"},
                                                      {"expert_dtype", "fp4"}};
                for (size_t i = 0; i < 5; i++)
                    if (!strcmp(k, want[i][0]) && strcmp(s, want[i][1]))
                        return fail(TS_ERR_UNSUPPORTED, path, "%s = %s is not supported (tilestack's "
                                    "kernels take %s: FP8 e4m3 weights with ue8m0 scales per "
                                    "128x128, activations cast per 1x128 at run time, FP4 experts)",
                                    key, show(v, (char[TS__ESC_CAP]){0}), want[i][1]);
                method |= !strcmp(k, "quant_method");
                scale_fmt |= !strcmp(k, "scale_fmt");
                if (!strcmp(k, "expert_dtype")) {
                    if (expert && strcmp(expert, s))
                        return fail(TS_ERR_INVALID_ARGUMENT, path, "expert_dtype and %s differ", key);
                    expert = s;
                }
            } else if (!strcmp(k, "weight_block_size")) {
                int64_t d0 = 0, d1 = 0;
                if (!json_is_array(v) || json_array_size(v) != 2 ||
                    get_int(path, key, json_array_get(v, 0), 1, 1 << 20, &d0) != TS_OK ||
                    get_int(path, key, json_array_get(v, 1), 1, 1 << 20, &d1) != TS_OK)
                    return fail(TS_ERR_INVALID_ARGUMENT, path, "%s = %s: must be [rows, cols]", key, show(v, b));
                if (d0 != 128 || d1 != 128)
                    return fail(TS_ERR_UNSUPPORTED, path, "%s = [%lld, %lld] is not supported "
                                "(tilestack's FP8 weights have one scale per 128x128)", key,
                                (long long)d0, (long long)d1);
            } else if (!strcmp(k, "modules_to_not_convert") || !strcmp(k, "dequantize") ||
                       !strcmp(k, "modules_to_convert")) {
                /* transformers' load-time switches: which modules stay unquantised is told by
                 * each tensor's dtype, which the loader checks */
            } else {
                return fail(TS_ERR_UNSUPPORTED, path, "%s is not a quantisation setting tilestack "
                            "knows", key);
            }
        }
        if (!method) return fail(TS_ERR_UNSUPPORTED, path, "quantization_config.quant_method is missing");
        if (!scale_fmt)
            return fail(TS_ERR_UNSUPPORTED, path, "quantization_config.scale_fmt is missing (float "
                        "scales: tilestack takes ue8m0)");
        if (!expert)
            return fail(TS_ERR_UNSUPPORTED, path, "expert_dtype is missing (FP8 experts): tilestack's "
                        "experts are FP4 (expert_dtype \"fp4\")");
    }
    if (expert && strcmp(expert, "fp4"))
        return fail(TS_ERR_UNSUPPORTED, path, "expert_dtype = \"%s\" is not supported (tilestack's "
                    "experts are FP4)", esc(expert, b));
    return TS_OK;
}

/* YaRN of the compressed layers from rope_scaling / a flat rope_parameters / the "compress"
 * entry of a nested one. null: no YaRN, which is factor 1 (the ramp then changes nothing). */
static ts_status parse_yarn(const char *path, const char *where, const json_t *r,
                            int64_t max_pos, ts_model_config *c) {
    char b[TS__ESC_CAP], key[96];
    c->rope_factor = 1;
    c->original_seq_len = max_pos;
    c->beta_fast = 32;
    c->beta_slow = 1;
    if (!r || json_is_null(r)) return TS_OK;
    if (!json_is_object(r)) return fail(TS_ERR_INVALID_ARGUMENT, path, "%s = %s: must be an object", where, show(r, b));
    const json_t *ty = json_object_get(r, "rope_type");
    if (!ty) ty = json_object_get(r, "type");
    const char *type = "default";
    if (ty) TS__RETURN_IF_ERROR(get_str(path, where, ty, &type));
    const bool yarn = !strcmp(type, "yarn");
    if (!yarn && strcmp(type, "default"))
        return fail(TS_ERR_UNSUPPORTED, path, "%s.rope_type = \"%s\" is not supported (tilestack's "
                    "compressed layers use YaRN or plain RoPE)", where, esc(type, b));
    bool has_factor = false;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)r, k, v) {
        snprintf(key, sizeof key, "%s.%s", where, esc(k, b));
        double x = 0;
        if (!strcmp(k, "rope_type") || !strcmp(k, "type") || !strcmp(k, "rope_theta") ||
            !strcmp(k, "partial_rotary_factor")) {
            continue; /* the type above; thetas and the rotary share are their own keys */
        } else if (yarn && !strcmp(k, "factor")) {
            TS__RETURN_IF_ERROR(get_num(path, key, v, 1, 1e6, false, &c->rope_factor));
            has_factor = true;
        } else if (yarn && !strcmp(k, "original_max_position_embeddings")) {
            TS__RETURN_IF_ERROR(get_int(path, key, v, 1, INT64_C(1) << 40, &c->original_seq_len));
        } else if (yarn && !strcmp(k, "beta_fast")) {
            TS__RETURN_IF_ERROR(get_int(path, key, v, 1, 1 << 20, &c->beta_fast));
        } else if (yarn && !strcmp(k, "beta_slow")) {
            TS__RETURN_IF_ERROR(get_int(path, key, v, 1, 1 << 20, &c->beta_slow));
        } else if (yarn && !strcmp(k, "attention_factor")) {
            /* V4 scales neither cos / sin nor the softmax (transformers forces 1.0) */
            TS__RETURN_IF_ERROR(get_num(path, key, v, 0, 1e6, false, &x));
            if (x != 1)
                return fail(TS_ERR_UNSUPPORTED, path, "%s = %g is not supported (V4's attention is not "
                            "rescaled: 1)", key, x);
        } else if (yarn && (!strcmp(k, "mscale") || !strcmp(k, "mscale_all_dim"))) {
            TS__RETURN_IF_ERROR(get_num(path, key, v, 0, 1e6, false, &x)); /* unused by V4 */
        } else if (yarn && !strcmp(k, "truncate")) {
            if (!json_is_true(v))
                return fail(TS_ERR_UNSUPPORTED, path, "%s = %s is not supported (the ramp's ends are "
                            "floored / ceiled, as DeepSeek's)", key, show(v, b));
        } else {
            return fail(TS_ERR_UNSUPPORTED, path, "%s is not a RoPE setting tilestack knows", key);
        }
    }
    if (yarn && !has_factor) return fail(TS_ERR_INVALID_ARGUMENT, path, "%s.factor is missing", where);
    return TS_OK;
}

/* rope_scaling (release) and / or rope_parameters (transformers: {"main": {...}, "compress":
 * {...}} or one flat dict); both must agree when both are there */
static ts_status parse_rope(const char *path, const json_t *root, int64_t max_pos,
                            ts_model_config *c) {
    char b[TS__ESC_CAP];
    const json_t *rs = json_object_get(root, "rope_scaling"), *rp = json_object_get(root, "rope_parameters");
    TS__RETURN_IF_ERROR(parse_yarn(path, "rope_scaling", rs, max_pos, c));
    if (!rp || json_is_null(rp)) return TS_OK;
    if (!json_is_object(rp)) return fail(TS_ERR_INVALID_ARGUMENT, path, "rope_parameters = %s: must be an object", show(rp, b));
    ts_model_config y = *c;
    const json_t *main_ = json_object_get(rp, "main"), *comp = json_object_get(rp, "compress");
    if (main_ || comp) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)rp, k, v)
            if (strcmp(k, "main") && strcmp(k, "compress") && strcmp(k, "rope_type"))
                return fail(TS_ERR_UNSUPPORTED, path, "rope_parameters.%s is not a RoPE setting "
                            "tilestack knows (expected main / compress)", esc(k, b));
        if (!json_is_object(main_) || !json_is_object(comp))
            return fail(TS_ERR_INVALID_ARGUMENT, path, "rope_parameters needs both main and compress objects");
        /* main: plain RoPE with rope_theta (window-only layers) */
        const json_t *mt = json_object_get(main_, "rope_type");
        if (mt && (!json_is_string(mt) || strcmp(json_string_value(mt), "default")))
            return fail(TS_ERR_UNSUPPORTED, path, "rope_parameters.main.rope_type = %s is not "
                        "supported (window-only layers use plain RoPE)", show(mt, b));
        json_object_foreach((json_t *)main_, k, v)
            if (strcmp(k, "rope_type") && strcmp(k, "rope_theta") && strcmp(k, "partial_rotary_factor"))
                return fail(TS_ERR_UNSUPPORTED, path, "rope_parameters.main.%s is not a RoPE setting "
                            "tilestack knows", esc(k, b));
        const json_t *th = json_object_get(main_, "rope_theta");
        if (th) TS__RETURN_IF_ERROR(get_num(path, "rope_parameters.main.rope_theta", th, 1, 1e12, true, &y.rope_theta));
        th = json_object_get(comp, "rope_theta");
        if (th)
            TS__RETURN_IF_ERROR(get_num(path, "rope_parameters.compress.rope_theta", th, 1, 1e12, true,
                                        &y.compress_rope_theta));
        TS__RETURN_IF_ERROR(parse_yarn(path, "rope_parameters.compress", comp, max_pos, &y));
    } else {
        TS__RETURN_IF_ERROR(parse_yarn(path, "rope_parameters", rp, max_pos, &y));
    }
    if (rs && !json_is_null(rs) &&
        (y.rope_factor != c->rope_factor || y.original_seq_len != c->original_seq_len ||
         y.beta_fast != c->beta_fast || y.beta_slow != c->beta_slow))
        return fail(TS_ERR_INVALID_ARGUMENT, path, "rope_scaling and rope_parameters give different YaRN settings");
    if (json_object_get(root, "rope_theta") && y.rope_theta != c->rope_theta)
        return fail(TS_ERR_INVALID_ARGUMENT, path, "rope_theta = %g and rope_parameters.main.rope_theta "
                    "= %g differ", c->rope_theta, y.rope_theta);
    if (json_object_get(root, "compress_rope_theta") && y.compress_rope_theta != c->compress_rope_theta)
        return fail(TS_ERR_INVALID_ARGUMENT, path, "compress_rope_theta = %g and rope_parameters."
                    "compress.rope_theta = %g differ", c->compress_rope_theta, y.compress_rope_theta);
    *c = y;
    return TS_OK;
}

/* Per-layer compress ratios from compress_ratios (release: n_layers entries, or n_layers + the
 * MTP layers' entries, which are dropped) and / or transformers' layer_types + compress_rates.
 * tilestack's layer with ratio 4 is CSA (overlapping windows, indexer), any other ratio > 0
 * HCA. */
static ts_status parse_ratios(const char *path, const json_t *root, int64_t n_mtp,
                              ts_model_config *c) {
    char b[TS__ESC_CAP], key[64];
    const json_t *cr = json_object_get(root, "compress_ratios"), *lt = json_object_get(root, "layer_types"),
                 *rates = json_object_get(root, "compress_rates");
    const int64_t L = c->n_layers;
    if ((!cr || json_is_null(cr)) && (!lt || json_is_null(lt)))
        return fail(TS_ERR_INVALID_ARGUMENT, path, "neither compress_ratios nor layer_types is given: "
                    "the attention of each layer is unknown");
    if (cr && !json_is_null(cr)) {
        if (!json_is_array(cr) || ((int64_t)json_array_size(cr) != L && (int64_t)json_array_size(cr) != L + n_mtp))
            return fail(TS_ERR_INVALID_ARGUMENT, path, "compress_ratios has %zu entries: expected "
                        "num_hidden_layers = %lld (or %lld with the MTP layers')",
                        json_is_array(cr) ? json_array_size(cr) : (size_t)0, (long long)L,
                        (long long)(L + n_mtp));
        for (int64_t i = 0; i < L; i++) {
            int64_t r = 0;
            snprintf(key, sizeof key, "compress_ratios[%lld]", (long long)i);
            TS__RETURN_IF_ERROR(get_int(path, key, json_array_get(cr, (size_t)i), 0, 1 << 20, &r));
            c->compress_ratios[i] = (int32_t)r;
        }
    }
    if (!lt || json_is_null(lt)) {
        if (rates && !json_is_null(rates))
            return fail(TS_ERR_INVALID_ARGUMENT, path, "compress_rates without layer_types");
        return TS_OK;
    }
    int64_t csa = 4, hca = 128;
    if (rates && !json_is_null(rates)) {
        if (!json_is_object(rates)) return fail(TS_ERR_INVALID_ARGUMENT, path, "compress_rates = %s: must be an object", show(rates, b));
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)rates, k, v) {
            snprintf(key, sizeof key, "compress_rates.%s", esc(k, b));
            if (!strcmp(k, "compressed_sparse_attention")) TS__RETURN_IF_ERROR(get_int(path, key, v, 1, 1 << 20, &csa));
            else if (!strcmp(k, "heavily_compressed_attention")) TS__RETURN_IF_ERROR(get_int(path, key, v, 1, 1 << 20, &hca));
            else return fail(TS_ERR_UNSUPPORTED, path, "%s is not a layer type tilestack knows", key);
        }
    }
    if (csa != 4)
        return fail(TS_ERR_UNSUPPORTED, path, "compress_rates.compressed_sparse_attention = %lld is "
                    "not supported (tilestack's CSA pools overlapping windows of 4)", (long long)csa);
    if (hca == 4)
        return fail(TS_ERR_UNSUPPORTED, path, "compress_rates.heavily_compressed_attention = 4 is not "
                    "supported (ratio 4 is CSA in tilestack)");
    if (!json_is_array(lt) || (int64_t)json_array_size(lt) != L)
        return fail(TS_ERR_INVALID_ARGUMENT, path, "layer_types must list num_hidden_layers = %lld "
                    "types", (long long)L);
    for (int64_t i = 0; i < L; i++) {
        const json_t *e = json_array_get(lt, (size_t)i);
        const char *t = json_is_string(e) ? json_string_value(e) : "";
        const int64_t r = !strcmp(t, "sliding_attention") ? 0
                          : !strcmp(t, "compressed_sparse_attention") ? csa
                          : !strcmp(t, "heavily_compressed_attention") ? hca : -1;
        if (r < 0)
            return fail(TS_ERR_UNSUPPORTED, path, "layer_types[%lld] = %s is not a layer type "
                        "tilestack knows", (long long)i, show(e, b));
        if (cr && !json_is_null(cr) && c->compress_ratios[i] != r)
            return fail(TS_ERR_INVALID_ARGUMENT, path, "layer_types[%lld] = %s (ratio %lld) and "
                        "compress_ratios[%lld] = %d differ", (long long)i, show(e, b), (long long)r,
                        (long long)i, c->compress_ratios[i]);
        c->compress_ratios[i] = (int32_t)r;
    }
    return TS_OK;
}

/* transformers' mlp_layer_types: "hash_moe" for the first layers, then "moe" */
static ts_status parse_mlp_types(const char *path, const json_t *root, bool has_num_hash,
                                 ts_model_config *c) {
    char b[TS__ESC_CAP];
    const json_t *mt = json_object_get(root, "mlp_layer_types");
    if (!mt || json_is_null(mt)) return TS_OK;
    if (!json_is_array(mt) || (int64_t)json_array_size(mt) != c->n_layers)
        return fail(TS_ERR_INVALID_ARGUMENT, path, "mlp_layer_types must list num_hidden_layers = "
                    "%lld types", (long long)c->n_layers);
    int64_t n_hash = 0;
    for (int64_t i = 0; i < c->n_layers; i++) {
        const json_t *e = json_array_get(mt, (size_t)i);
        const char *t = json_is_string(e) ? json_string_value(e) : "";
        const bool hash = !strcmp(t, "hash_moe");
        if (!hash && strcmp(t, "moe"))
            return fail(TS_ERR_UNSUPPORTED, path, "mlp_layer_types[%lld] = %s is not an MoE type "
                        "tilestack knows", (long long)i, show(e, b));
        if (hash && n_hash != i)
            return fail(TS_ERR_UNSUPPORTED, path, "mlp_layer_types[%lld] = \"hash_moe\" after a "
                        "\"moe\" layer: tilestack hash-routes the first layers only", (long long)i);
        n_hash += hash;
    }
    if (has_num_hash && n_hash != c->n_hash_layers)
        return fail(TS_ERR_INVALID_ARGUMENT, path, "num_hash_layers = %lld and mlp_layer_types (%lld "
                    "hash layers) differ", (long long)c->n_hash_layers, (long long)n_hash);
    c->n_hash_layers = n_hash;
    return TS_OK;
}

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        const int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* ts_model_config_validate names tilestack's keys ("model config: dim = ..."); a config.json
 * user knows the checkpoint's: the message gets both. */
static ts_status translate_validate(const char *path, ts_status st) {
    static const char *const extra[][2] = {
        {"compress_ratios", "compress_ratios"},
        {"max_seq_len", "max_position_embeddings (capped at 8192 tokens)"},
        {"original_seq_len", "rope_scaling.original_max_position_embeddings"},
        {"rope_factor", "rope_scaling.factor"},
        {"beta_fast", "rope_scaling.beta_fast"},
        {"beta_slow", "rope_scaling.beta_slow"},
        {"score_func", "scoring_func"}};
    char msg[512];
    snprintf(msg, sizeof msg, "%s", ts_last_error());
    const char *body = strncmp(msg, "model config: ", 14) ? msg : msg + 14;
    char word[64] = {0};
    sscanf(body, "%63[a-z_]", word);
    const char *hf = NULL;
    for (size_t i = 0; i < N_RULES && !hf; i++)
        if (k_rules[i].field && !strcmp(k_rules[i].field, word)) hf = k_rules[i].key;
    for (size_t i = 0; i < sizeof extra / sizeof *extra && !hf; i++)
        if (!strcmp(extra[i][0], word)) hf = extra[i][1];
    if (!hf || !strcmp(hf, word)) return ts__fail(st, "%s: %s", path, body);
    return ts__fail(st, "%s: %s (tilestack's %s): %s", path, hf, word, body + strlen(word));
}

ts_status ts__hf_v4_parse_config(const char *text, size_t len, const char *path,
                                 const char *name, ts_model_config *cfg, ts__hf_v4_info *info) {
    json_t *root;
    ts_status st = ts__hf_json_object(text, len, path, &root);
    if (st != TS_OK) return st;
    ts_model_config c;
    memset(&c, 0, sizeof c);
    ts__hf_v4_info in = {0};
    st = check_architecture(path, root);
    /* every key known, and the table's defaults for the optional ones */
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        if (st != TS_OK) break;
        char b[TS__ESC_CAP];
        const key_rule *r = rule_of(k);
        if (!r) {
            st = fail(TS_ERR_UNSUPPORTED, path, "%s is not a deepseek_v4 key tilestack knows (a "
                      "checkpoint that needs it would decode wrongly here)", esc(k, b));
        } else if (r->rule == R_EQ_INT && !json_is_null(v)) {
            int64_t x = 0;
            st = get_int(path, k, v, INT64_MIN / 2, INT64_MAX / 2, &x);
            if (st == TS_OK && x != (int64_t)r->lo)
                st = fail(TS_ERR_UNSUPPORTED, path, "%s = %lld is not supported (tilestack implements "
                          "%lld)", k, (long long)x, (long long)r->lo);
        } else if (r->rule == R_EQ_STR && strcmp(k, "model_type")) { /* model_type: above */
            const char *s = NULL;
            st = get_str(path, k, v, &s);
            if (st == TS_OK && strcmp(s, r->str))
                st = fail(TS_ERR_UNSUPPORTED, path, "%s = %s is not supported (tilestack implements "
                          "\"%s\")", k, show(v, b), r->str);
        } else if (r->rule == R_EQ_BOOL) {
            if (!json_is_boolean(v)) st = fail(TS_ERR_INVALID_ARGUMENT, path, "%s = %s: must be true or false", k, show(v, b));
            else if (json_is_true(v) != (r->lo != 0))
                st = fail(TS_ERR_UNSUPPORTED, path, "%s = %s is not supported (tilestack implements %s)",
                          k, show(v, b), r->lo != 0 ? "true" : "false");
        }
    }
    for (size_t i = 0; i < N_RULES && st == TS_OK; i++) {
        const key_rule *r = &k_rules[i];
        if (r->rule != R_INT && r->rule != R_NUM) continue;
        const json_t *x = json_object_get(root, r->key);
        if (!x && r->required) {
            st = fail(TS_ERR_INVALID_ARGUMENT, path, "%s is missing", r->key);
        } else if (r->rule == R_INT) {
            int64_t *f = (int64_t *)((char *)&c + r->off);
            *f = (int64_t)r->def;
            if (x) st = get_int(path, r->key, x, (int64_t)r->lo, (int64_t)r->hi, f);
        } else {
            double *f = (double *)((char *)&c + r->off);
            *f = r->def;
            if (x) st = get_num(path, r->key, x, r->lo, r->hi, r->open_lo, f);
        }
    }
    /* transformers: the first min(3, layers) layers hash-routed unless told otherwise */
    if (st == TS_OK && !json_object_get(root, "num_hash_layers"))
        c.n_hash_layers = c.n_layers < 3 ? c.n_layers : 3;
    int64_t max_pos = INT64_C(1) << 20;
    in.n_mtp = 1;
    const json_t *x = NULL;
    if (st == TS_OK && (x = json_object_get(root, "max_position_embeddings")))
        st = get_int(path, "max_position_embeddings", x, 1, INT64_C(1) << 40, &max_pos);
    if (st == TS_OK && (x = json_object_get(root, "num_nextn_predict_layers")))
        st = get_int(path, "num_nextn_predict_layers", x, 0, 64, &in.n_mtp);
    if (st == TS_OK && (x = json_object_get(root, "tie_word_embeddings"))) {
        if (!json_is_boolean(x)) st = fail(TS_ERR_INVALID_ARGUMENT, path, "tie_word_embeddings must be true or false");
        in.tied = json_is_true(x);
    }
    if (st == TS_OK && (x = json_object_get(root, "partial_rotary_factor")) && !json_is_null(x)) {
        double f = 0;
        st = get_num(path, "partial_rotary_factor", x, 0, 1, true, &f);
        const double rd = f * (double)c.head_dim;
        if (st == TS_OK && json_object_get(root, "qk_rope_head_dim") && rd != (double)c.rope_head_dim)
            st = fail(TS_ERR_INVALID_ARGUMENT, path, "partial_rotary_factor = %g gives %g RoPE dims, "
                      "qk_rope_head_dim = %lld", f, rd, (long long)c.rope_head_dim);
        if (st == TS_OK) c.rope_head_dim = (int64_t)rd;
    }
    if (st == TS_OK && (x = json_object_get(root, "scoring_func"))) {
        const char *s = NULL;
        st = get_str(path, "scoring_func", x, &s);
        if (st == TS_OK) {
            if (!strcmp(s, "sqrtsoftplus")) c.score_func = TS_MODEL_SCORE_SQRTSOFTPLUS;
            else if (!strcmp(s, "sigmoid")) c.score_func = TS_MODEL_SCORE_SIGMOID;
            else if (!strcmp(s, "softmax")) c.score_func = TS_MODEL_SCORE_SOFTMAX;
            else st = fail(TS_ERR_UNSUPPORTED, path, "scoring_func = %s is not supported (sqrtsoftplus, "
                           "sigmoid or softmax)", show(x, (char[TS__ESC_CAP]){0}));
        }
    }
    if (st == TS_OK) st = parse_quantization(path, root, &in);
    if (st == TS_OK) st = parse_rope(path, root, max_pos, &c);
    if (st == TS_OK) st = parse_ratios(path, root, in.n_mtp, &c);
    if (st == TS_OK) st = parse_mlp_types(path, root, json_object_get(root, "num_hash_layers") != NULL, &c);
    /* caches for min(max_position_embeddings, 8192) tokens, a multiple of every ratio */
    int64_t lcm = 1;
    for (int64_t L = 0; st == TS_OK && L < c.n_layers; L++)
        if (c.compress_ratios[L] > 0) {
            lcm = lcm / gcd64(lcm, c.compress_ratios[L]) * c.compress_ratios[L];
            if (lcm > TS__HF_MAX_SEQ)
                st = fail(TS_ERR_INVALID_ARGUMENT, path, "compress_ratios: their least common multiple "
                          "exceeds the %d-token cache (no cache length holds whole blocks of each)",
                          TS__HF_MAX_SEQ);
        }
    if (st == TS_OK) {
        c.max_seq_len = (max_pos < TS__HF_MAX_SEQ ? max_pos : TS__HF_MAX_SEQ) / lcm * lcm;
        if (c.max_seq_len < 1)
            st = fail(TS_ERR_INVALID_ARGUMENT, path, "max_position_embeddings = %lld is shorter than one "
                      "block of %lld tokens", (long long)max_pos, (long long)lcm);
    }
    json_decref(root);
    if (st != TS_OK) return st;
    snprintf(c.name, sizeof c.name, "%s", name ? name : "checkpoint");
    c.attention = TS_MODEL_ATTN_V4;
    c.seed = 0;
    st = ts_model_config_validate(&c, 1);
    if (st != TS_OK) return translate_validate(path, st);
    *cfg = c;
    *info = in;
    return TS_OK;
}

/* ---- writing */

typedef struct outbuf { char *p; size_t len, cap; bool oom; } outbuf;

static void emit(outbuf *o, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void emit(outbuf *o, const char *fmt, ...) {
    for (;;) {
        if (o->oom) return;
        va_list ap;
        va_start(ap, fmt);
        const int n = vsnprintf(o->p ? o->p + o->len : NULL, o->p ? o->cap - o->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            o->oom = true;
            return;
        }
        if (o->p && o->len + (size_t)n < o->cap) {
            o->len += (size_t)n;
            return;
        }
        const size_t nc = 2 * o->cap + (size_t)n + 1024;
        char *np = realloc(o->p, nc);
        if (!np) o->oom = true;
        else o->p = np, o->cap = nc;
    }
}

/* The shortest decimal that reads back as exactly v (v finite), always a JSON float. */
static const char *num(double v, char buf[32]) {
    if (v == floor(v) && fabs(v) < 1e15) {
        snprintf(buf, 32, "%.1f", v); /* 160000.0, not 1.6e+05; a float for transformers' typed fields */
        return buf;
    }
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, 32, "%.*g", p, v);
        if (strtod(buf, NULL) == v) break;
    }
    return buf;
}

ts_status ts__hf_v4_config_json(const ts_model_config *c, bool quantized, char **out) {
    *out = NULL;
    static const char *const score[] = {"sqrtsoftplus", "sigmoid", "softmax"};
    if (c->attention != TS_MODEL_ATTN_V4)
        return ts__fail(TS_ERR_UNSUPPORTED, "ts_model_export_hf: attention = v32 has no DeepSeek-V4 "
                        "checkpoint form");
    outbuf o = {0};
    char b[6][32];
    emit(&o, "{\n  \"architectures\": [\"DeepseekV4ForCausalLM\"],\n  \"model_type\": \"deepseek_v4\",\n");
    emit(&o, "  \"vocab_size\": %lld,\n  \"hidden_size\": %lld,\n  \"num_hidden_layers\": %lld,\n"
             "  \"num_nextn_predict_layers\": 0,\n  \"num_attention_heads\": %lld,\n"
             "  \"num_key_value_heads\": 1,\n  \"head_dim\": %lld,\n  \"qk_rope_head_dim\": %lld,\n"
             "  \"q_lora_rank\": %lld,\n  \"o_lora_rank\": %lld,\n  \"o_groups\": %lld,\n"
             "  \"sliding_window\": %lld,\n",
         (long long)c->vocab_size, (long long)c->dim, (long long)c->n_layers,
         (long long)c->n_heads, (long long)c->head_dim, (long long)c->rope_head_dim,
         (long long)c->q_lora_rank, (long long)c->o_lora_rank, (long long)c->o_groups,
         (long long)c->window_size);
    emit(&o, "  \"compress_ratios\": [");
    int64_t hca = -1;
    bool one_hca = true;
    for (int64_t L = 0; L < c->n_layers; L++) {
        const int32_t r = c->compress_ratios[L];
        emit(&o, "%s%d", L ? ", " : "", r);
        if (r > 0 && r != 4) {
            one_hca &= hca < 0 || hca == r;
            hca = r;
        }
    }
    emit(&o, "],\n");
    if (one_hca && hca > 0 && hca != 128) {
        /* transformers reads compress_ratios through {0, 4, 128} only; with one other HCA ratio
         * its own keys say the same, and it prefers them */
        emit(&o, "  \"compress_rates\": {\"compressed_sparse_attention\": 4, "
                 "\"heavily_compressed_attention\": %lld},\n  \"layer_types\": [", (long long)hca);
        for (int64_t L = 0; L < c->n_layers; L++) {
            const int32_t r = c->compress_ratios[L];
            emit(&o, "%s\"%s\"", L ? ", " : "", r == 0 ? "sliding_attention" : r == 4
                 ? "compressed_sparse_attention" : "heavily_compressed_attention");
        }
        emit(&o, "],\n");
    }
    emit(&o, "  \"compress_rope_theta\": %s,\n  \"rope_theta\": %s,\n"
             "  \"rope_scaling\": {\"type\": \"yarn\", \"factor\": %s, "
             "\"original_max_position_embeddings\": %lld, \"beta_fast\": %lld, \"beta_slow\": %lld},\n"
             "  \"max_position_embeddings\": %lld,\n",
         num(c->compress_rope_theta, b[0]), num(c->rope_theta, b[1]), num(c->rope_factor, b[2]),
         (long long)c->original_seq_len, (long long)c->beta_fast, (long long)c->beta_slow,
         (long long)c->max_seq_len);
    emit(&o, "  \"index_n_heads\": %lld,\n  \"index_head_dim\": %lld,\n  \"index_topk\": %lld,\n"
             "  \"hc_mult\": %lld,\n  \"hc_sinkhorn_iters\": %lld,\n  \"hc_eps\": %s,\n",
         (long long)c->index_n_heads, (long long)c->index_head_dim, (long long)c->index_topk,
         (long long)c->hc_mult, (long long)c->hc_sinkhorn_iters, num(c->hc_eps, b[0]));
    emit(&o, "  \"n_routed_experts\": %lld,\n  \"n_shared_experts\": 1,\n"
             "  \"num_experts_per_tok\": %lld,\n  \"moe_intermediate_size\": %lld,\n"
             "  \"num_hash_layers\": %lld,\n  \"scoring_func\": \"%s\",\n"
             "  \"topk_method\": \"noaux_tc\",\n  \"norm_topk_prob\": true,\n"
             "  \"routed_scaling_factor\": %s,\n  \"swiglu_limit\": %s,\n"
             "  \"hidden_act\": \"silu\",\n  \"rms_norm_eps\": %s,\n",
         (long long)c->n_routed_experts, (long long)c->n_activated_experts,
         (long long)c->moe_inter_dim, (long long)c->n_hash_layers, score[c->score_func],
         num(c->route_scale, b[0]), num(c->swiglu_limit, b[1]), num(c->norm_eps, b[2]));
    emit(&o, "  \"tie_word_embeddings\": false,\n  \"torch_dtype\": \"bfloat16\"");
    if (quantized)
        emit(&o, ",\n  \"expert_dtype\": \"fp4\",\n  \"quantization_config\": {\"quant_method\": "
                 "\"fp8\", \"fmt\": \"e4m3\", \"scale_fmt\": \"ue8m0\", \"activation_scheme\": "
                 "\"dynamic\", \"weight_block_size\": [128, 128]}");
    emit(&o, "\n}\n");
    if (o.oom) {
        free(o.p);
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_export_hf: config.json");
    }
    *out = o.p;
    return TS_OK;
}

/* ---- the JSON helpers above, for the V3 config (hf_config_v3.c) */
ts_status ts__hf_json_int(const char *path, const char *key, const json_t *v, int64_t lo,
                          int64_t hi, int64_t *out) {
    return get_int(path, key, v, lo, hi, out);
}
ts_status ts__hf_json_num(const char *path, const char *key, const json_t *v, double lo,
                          double hi, bool open_lo, double *out) {
    return get_num(path, key, v, lo, hi, open_lo, out);
}
ts_status ts__hf_json_str(const char *path, const char *key, const json_t *v, const char **out) {
    return get_str(path, key, v, out);
}
const char *ts__hf_json_show(const json_t *v, char buf[TS__ESC_CAP]) { return show(v, buf); }

ts_status ts__hf_json_object(const char *text, size_t len, const char *path, json_t **out) {
    json_error_t err;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    *out = NULL;
    if (!json_is_object(root)) {
        json_decref(root);
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: not a JSON object (%.80s, line %d)", path,
                        root ? "another value" : err.text, err.line);
    }
    *out = root;
    return TS_OK;
}
