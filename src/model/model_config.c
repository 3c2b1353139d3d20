/* Model configs (docs/model.md §1): the built-ins, the JSON form and the load checks. */
#include "model_internal.h"

#include "core/text_escape.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

static void set_common(ts_model_config *c) {
    memset(c, 0, sizeof *c);
    c->head_dim = 512;
    c->rope_head_dim = 64;
    c->index_head_dim = 128;
    c->score_func = TS_MODEL_SCORE_SQRTSOFTPLUS;
    c->route_scale = 1.5;
    c->swiglu_limit = 10;
    c->hc_mult = 4;
    c->hc_sinkhorn_iters = 20;
    c->hc_eps = 1e-6;
    c->norm_eps = 1e-6;
    c->rope_theta = 10000;
    c->compress_rope_theta = 160000;
    c->rope_factor = 16;
    c->original_seq_len = 65536;
    c->beta_fast = 32;
    c->beta_slow = 1;
    c->max_seq_len = 8192;
    c->attention = TS_MODEL_ATTN_V4;
    c->seed = 1;
}

static void mini(ts_model_config *c) {
    set_common(c);
    snprintf(c->name, sizeof c->name, "dsv4-mini");
    c->vocab_size = 16384;
    c->dim = 1024;
    c->n_layers = 4;
    const int32_t r[4] = {0, 4, 128, 4};
    memcpy(c->compress_ratios, r, sizeof r);
    c->n_hash_layers = 1;
    c->n_heads = 16;
    c->q_lora_rank = 512;
    c->o_groups = 4;
    c->o_lora_rank = 512;
    c->window_size = 128;
    c->index_n_heads = 16;
    c->index_topk = 512;
    c->n_routed_experts = 64;
    c->n_activated_experts = 6;
    c->moe_inter_dim = 512;
}

ts_status ts_model_config_builtin(const char *name, ts_model_config *cfg) {
    if (!name) return ts__fail(TS_ERR_NULL_POINTER, "ts_model_config_builtin: name is NULL");
    if (!cfg) return ts__fail(TS_ERR_NULL_POINTER, "ts_model_config_builtin: cfg is NULL");
    ts_model_config c;
    if (strcmp(name, "dsv4-mini") == 0) {
        mini(&c);
    } else if (strcmp(name, "dsv4-flash-layer") == 0) {
        mini(&c);
        snprintf(c.name, sizeof c.name, "dsv4-flash-layer");
        c.vocab_size = 129280;
        c.dim = 4096;
        c.n_layers = 1;
        memset(c.compress_ratios, 0, sizeof c.compress_ratios);
        c.compress_ratios[0] = 4;
        c.n_hash_layers = 0;
        c.n_heads = 64;
        c.q_lora_rank = 1024;
        c.o_groups = 8;
        c.o_lora_rank = 1024;
        c.index_n_heads = 64;
        c.n_routed_experts = 256;
        c.moe_inter_dim = 2048;
    } else if (strcmp(name, "dsv4-tiny") == 0) {
        mini(&c);
        snprintf(c.name, sizeof c.name, "dsv4-tiny");
        c.vocab_size = 512;
        c.dim = 256;
        c.n_layers = 3;
        memset(c.compress_ratios, 0, sizeof c.compress_ratios);
        c.compress_ratios[1] = 4;
        c.compress_ratios[2] = 8;
        c.n_hash_layers = 1;
        c.n_heads = 4;
        c.q_lora_rank = 128;
        c.o_groups = 2;
        c.o_lora_rank = 128;
        c.window_size = 16;
        c.index_n_heads = 4;
        c.index_topk = 8;
        c.n_routed_experts = 8;
        c.moe_inter_dim = 128;
        c.max_seq_len = 256;
        c.seed = 7;
    } else if (strcmp(name, "dsv32-tiny") == 0) {
        /* dsv4-tiny's widths with V3.2 attention (docs/model.md §8): every layer MLA + indexer,
         * top-16 so that the indexer's choice matters within the check's 72 tokens */
        TS__RETURN_IF_ERROR(ts_model_config_builtin("dsv4-tiny", &c));
        snprintf(c.name, sizeof c.name, "dsv32-tiny");
        memset(c.compress_ratios, 0, sizeof c.compress_ratios);
        c.index_topk = 16;
        c.attention = TS_MODEL_ATTN_V32;
    } else {
        return ts__fail(TS_ERR_INVALID_ARGUMENT,
                        "ts_model_config_builtin: unknown config \"%s\" (valid: dsv4-mini, "
                        "dsv4-flash-layer, dsv4-tiny, dsv32-tiny)",
                        name);
    }
    *cfg = c;
    return TS_OK;
}

static ts_status bad(const char *key, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ts__fail(TS_ERR_INVALID_ARGUMENT, "model config: %s %s", key, msg);
}

ts_status ts_model_config_validate(const ts_model_config *c, int64_t num_ranks) {
    if (!c) return ts__fail(TS_ERR_NULL_POINTER, "ts_model_config_validate: cfg is NULL");
    if (num_ranks < 1) return bad("num_ranks", "= %lld must be >= 1", (long long)num_ranks);
    struct { const char *k; int64_t v; int64_t lo, hi; } pos[] = {
        {"vocab_size", c->vocab_size, 1, INT32_MAX},
        {"dim", c->dim, 128, 1 << 20},
        {"n_layers", c->n_layers, 1, TS_MODEL_MAX_LAYERS},
        {"n_hash_layers", c->n_hash_layers, 0, c->n_layers},
        {"n_heads", c->n_heads, 1, 4096},
        {"q_lora_rank", c->q_lora_rank, 128, 1 << 20},
        {"o_groups", c->o_groups, 1, 4096},
        {"o_lora_rank", c->o_lora_rank, 128, 1 << 20},
        {"window_size", c->window_size, 1, 1 << 20},
        {"index_n_heads", c->index_n_heads, 1, 4096},
        {"index_topk", c->index_topk, 1, 4096},
        {"n_routed_experts", c->n_routed_experts, 1, 1 << 16},
        {"n_activated_experts", c->n_activated_experts, 1, 4096},
        {"moe_inter_dim", c->moe_inter_dim, 128, 1 << 20},
        {"hc_mult", c->hc_mult, 1, 64},
        {"hc_sinkhorn_iters", c->hc_sinkhorn_iters, 1, 1 << 20},
        {"original_seq_len", c->original_seq_len, 1, INT64_MAX / 4},
        {"beta_fast", c->beta_fast, 1, 1 << 20},
        {"beta_slow", c->beta_slow, 1, 1 << 20},
        {"max_seq_len", c->max_seq_len, 1, INT32_MAX / 2},
    };
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v < pos[i].lo || pos[i].v > pos[i].hi)
            return bad(pos[i].k, "= %lld is outside [%lld, %lld]", (long long)pos[i].v,
                       (long long)pos[i].lo, (long long)pos[i].hi);
    const bool v32 = c->attention == TS_MODEL_ATTN_V32;
    if (c->head_dim != 512)
        return bad("head_dim", v32 ? "= %lld must be 512 (attention = v32: the kv_lora_rank, the "
                                     "latent width of the 656-byte cache)"
                                   : "= %lld must be 512",
                   (long long)c->head_dim);
    if (c->rope_head_dim != 64)
        return bad("rope_head_dim", v32 ? "= %lld must be 64 (attention = v32: the cache's 64 "
                                          "bf16 RoPE values)"
                                        : "= %lld must be 64",
                   (long long)c->rope_head_dim);
    if (v32 && c->max_seq_len > c->original_seq_len)
        return bad("max_seq_len", "= %lld exceeds original_seq_len = %lld: attention = v32 has no "
                   "YaRN (V3's rule would scale RoPE and the softmax there)",
                   (long long)c->max_seq_len, (long long)c->original_seq_len);
    if (c->index_head_dim != 128)
        return bad("index_head_dim", "= %lld must be 128", (long long)c->index_head_dim);
    struct { const char *k; int64_t v; } m128[] = {{"dim", c->dim},
                                                  {"q_lora_rank", c->q_lora_rank},
                                                  {"moe_inter_dim", c->moe_inter_dim},
                                                  {"o_lora_rank", c->o_lora_rank}};
    for (size_t i = 0; i < 4; i++)
        if (m128[i].v % 128 != 0)
            return bad(m128[i].k, "= %lld must be a multiple of 128", (long long)m128[i].v);
    if (c->n_heads % c->o_groups != 0)
        return bad("o_groups", "= %lld must divide n_heads = %lld", (long long)c->o_groups,
                   (long long)c->n_heads);
    if (c->n_activated_experts > c->n_routed_experts)
        return bad("n_activated_experts", "= %lld exceeds n_routed_experts = %lld",
                   (long long)c->n_activated_experts, (long long)c->n_routed_experts);
    if (c->n_routed_experts % num_ranks != 0)
        return bad("n_routed_experts", "= %lld is not divisible by the %lld ranks",
                   (long long)c->n_routed_experts, (long long)num_ranks);
    for (int64_t L = 0; L < c->n_layers; L++) {
        int32_t r = c->compress_ratios[L];
        if (r < 0 || r > c->max_seq_len)
            return bad("compress_ratios", "[%lld] = %d is outside [0, max_seq_len]", (long long)L,
                       r);
        if (r > 0 && c->max_seq_len % r != 0)
            return bad("max_seq_len", "= %lld is not a multiple of compress_ratios[%lld] = %d",
                       (long long)c->max_seq_len, (long long)L, r);
    }
    for (int64_t L = c->n_layers; L < TS_MODEL_MAX_LAYERS; L++)
        if (c->compress_ratios[L] != 0)
            return bad("compress_ratios", "has %lld entries past n_layers = %lld (length must "
                       "equal n_layers)", (long long)(L + 1), (long long)c->n_layers);
    if ((int)c->score_func < 0 || c->score_func > TS_MODEL_SCORE_SOFTMAX)
        return bad("score_func", "= %d is unknown", (int)c->score_func);
    if (c->attention != TS_MODEL_ATTN_V4 && c->attention != TS_MODEL_ATTN_V32)
        return bad("attention", "= %d is unknown", (int)c->attention);
    struct { const char *k; double v; bool zero_ok; } dpos[] = {
        {"route_scale", c->route_scale, false},   {"swiglu_limit", c->swiglu_limit, true},
        {"hc_eps", c->hc_eps, false},             {"norm_eps", c->norm_eps, false},
        {"rope_theta", c->rope_theta, false},     {"compress_rope_theta", c->compress_rope_theta, false},
        {"rope_factor", c->rope_factor, false},
    };
    for (size_t i = 0; i < sizeof dpos / sizeof dpos[0]; i++)
        if (!isfinite(dpos[i].v) || dpos[i].v < 0 || (!dpos[i].zero_ok && dpos[i].v == 0))
            return bad(dpos[i].k, "= %g must be finite and %s", dpos[i].v,
                       dpos[i].zero_ok ? ">= 0" : "> 0");
    if (c->rope_theta <= 1 || c->compress_rope_theta <= 1)
        return bad("rope_theta", "and compress_rope_theta must be > 1");
    if (memchr(c->name, 0, sizeof c->name) == NULL) return bad("name", "is not NUL-terminated");
    return TS_OK;
}

/* ---- JSON */

static const char *const k_keys[] = {
    "name", "vocab_size", "dim", "n_layers", "compress_ratios", "n_hash_layers", "n_heads",
    "head_dim", "rope_head_dim", "q_lora_rank", "o_groups", "o_lora_rank", "window_size",
    "index_n_heads", "index_head_dim", "index_topk", "n_routed_experts", "n_activated_experts",
    "moe_inter_dim", "score_func", "route_scale", "swiglu_limit", "hc_mult", "hc_sinkhorn_iters",
    "hc_eps", "rope_theta", "compress_rope_theta", "rope_factor", "original_seq_len",
    "beta_fast", "beta_slow", "max_seq_len", "norm_eps", "attention", "seed"};

static int64_t *int_field(ts_model_config *c, const char *k) {
    struct { const char *k; int64_t *p; } t[] = {
        {"vocab_size", &c->vocab_size}, {"dim", &c->dim}, {"n_layers", &c->n_layers},
        {"n_hash_layers", &c->n_hash_layers}, {"n_heads", &c->n_heads},
        {"head_dim", &c->head_dim}, {"rope_head_dim", &c->rope_head_dim},
        {"q_lora_rank", &c->q_lora_rank}, {"o_groups", &c->o_groups},
        {"o_lora_rank", &c->o_lora_rank}, {"window_size", &c->window_size},
        {"index_n_heads", &c->index_n_heads}, {"index_head_dim", &c->index_head_dim},
        {"index_topk", &c->index_topk}, {"n_routed_experts", &c->n_routed_experts},
        {"n_activated_experts", &c->n_activated_experts}, {"moe_inter_dim", &c->moe_inter_dim},
        {"hc_mult", &c->hc_mult}, {"hc_sinkhorn_iters", &c->hc_sinkhorn_iters},
        {"original_seq_len", &c->original_seq_len}, {"beta_fast", &c->beta_fast},
        {"beta_slow", &c->beta_slow}, {"max_seq_len", &c->max_seq_len}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (strcmp(t[i].k, k) == 0) return t[i].p;
    return NULL;
}

static double *dbl_field(ts_model_config *c, const char *k) {
    struct { const char *k; double *p; } t[] = {
        {"route_scale", &c->route_scale}, {"swiglu_limit", &c->swiglu_limit},
        {"hc_eps", &c->hc_eps}, {"norm_eps", &c->norm_eps}, {"rope_theta", &c->rope_theta},
        {"compress_rope_theta", &c->compress_rope_theta}, {"rope_factor", &c->rope_factor}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (strcmp(t[i].k, k) == 0) return t[i].p;
    return NULL;
}

static const char *const k_score[] = {"sqrtsoftplus", "sigmoid", "softmax"};
static const char *const k_attn[] = {"v4", "v32"};

static ts_status apply_key(ts_model_config *c, const char *k, const ts__json *v) {
    int64_t *ip = int_field(c, k);
    if (ip) {
        if (!ts__json_int(v, ip)) return bad(k, "must be an integer");
        return TS_OK;
    }
    double *dp = dbl_field(c, k);
    if (dp) {
        if (v->kind != TS__JSON_NUM) return bad(k, "must be a number");
        *dp = v->num;
        return TS_OK;
    }
    if (strcmp(k, "seed") == 0) {
        if (!ts__json_u64(v, &c->seed)) return bad(k, "must be an integer in [0, 2^64)");
        return TS_OK;
    }
    if (strcmp(k, "name") == 0) {
        if (v->kind != TS__JSON_STR) return bad(k, "must be a string");
        if (strlen(v->str) >= sizeof c->name) return bad(k, "is longer than 63 bytes");
        /* the name is printed as is by the tools: no control bytes that could reach a terminal */
        for (const unsigned char *q = (const unsigned char *)v->str; *q; q++)
            if (*q < 0x20 || *q == 0x7F) {
                char e[TS__ESC_CAP];
                return bad(k, "= \"%s\" contains a control character",
                           ts__text_escape_str(v->str, e, sizeof e));
            }
        snprintf(c->name, sizeof c->name, "%s", v->str);
        return TS_OK;
    }
    if (strcmp(k, "score_func") == 0 || strcmp(k, "attention") == 0) {
        bool sf = k[0] == 's';
        if (v->kind != TS__JSON_STR)
            return bad(k, sf ? "must be \"sqrtsoftplus\", \"sigmoid\" or \"softmax\""
                             : "must be \"v4\" or \"v32\"");
        int n = sf ? 3 : 2;
        for (int i = 0; i < n; i++)
            if (strcmp(v->str, sf ? k_score[i] : k_attn[i]) == 0) {
                if (sf) c->score_func = (ts_model_score_func)i;
                else c->attention = (ts_model_attention)i;
                return TS_OK;
            }
        char e[TS__ESC_CAP];
        return bad(k, sf ? "= \"%s\": must be \"sqrtsoftplus\", \"sigmoid\" or \"softmax\""
                         : "= \"%s\": must be \"v4\" or \"v32\"",
                   ts__text_escape_str(v->str, e, sizeof e));
    }
    if (strcmp(k, "compress_ratios") == 0) {
        if (v->kind != TS__JSON_ARR) return bad(k, "must be an array of integers");
        if (v->n > TS_MODEL_MAX_LAYERS)
            return bad(k, "has %lld entries (at most %d)", (long long)v->n, TS_MODEL_MAX_LAYERS);
        memset(c->compress_ratios, 0, sizeof c->compress_ratios);
        for (int64_t i = 0; i < v->n; i++) {
            int64_t r;
            if (!ts__json_int(&v->items[i], &r) || r < 0 || r > INT32_MAX)
                return bad(k, "[%lld] must be a non-negative integer", (long long)i);
            c->compress_ratios[i] = (int32_t)r;
        }
        return TS_OK;
    }
    /* k comes from the file: escaped, as any byte string from a file that reaches a message */
    char e[TS__ESC_CAP];
    return ts__fail(TS_ERR_INVALID_ARGUMENT, "model config: \"%s\" is not a config key",
                    ts__text_escape_str(k, e, sizeof e));
}

ts_status ts_model_config_parse_json(const char *text, ts_model_config *cfg) {
    if (!text) return ts__fail(TS_ERR_NULL_POINTER, "ts_model_config_parse_json: text is NULL");
    if (!cfg) return ts__fail(TS_ERR_NULL_POINTER, "ts_model_config_parse_json: cfg is NULL");
    ts__json *j = NULL;
    TS__RETURN_IF_ERROR(ts__json_parse(text, strlen(text), "model config", &j));
    ts_model_config c;
    ts_status st = ts_model_config_builtin("dsv4-mini", &c);
    snprintf(c.name, sizeof c.name, "custom");
    if (st == TS_OK && j->kind != TS__JSON_OBJ)
        st = ts__fail(TS_ERR_INVALID_ARGUMENT, "model config: the JSON value is not an object");
    int64_t n_ratios = -1;
    for (int64_t i = 0; st == TS_OK && i < j->n; i++) {
        st = apply_key(&c, j->keys[i], &j->items[i]);
        if (strcmp(j->keys[i], "compress_ratios") == 0) n_ratios = j->items[i].n;
    }
    if (st == TS_OK) {
        /* the length rule needs the array's own length (trailing zeros are entries too) */
        if (n_ratios < 0) n_ratios = 4; /* dsv4-mini's list */
        /* n_layers first: a bad n_layers would otherwise be reported as a length mismatch of
         * compress_ratios, blaming the wrong key */
        if (c.n_layers < 1 || c.n_layers > TS_MODEL_MAX_LAYERS) {
            st = bad("n_layers", "= %lld is outside [1, %d]", (long long)c.n_layers,
                     TS_MODEL_MAX_LAYERS);
        } else if (n_ratios != c.n_layers) {
            st = bad("compress_ratios", "has %lld entries but n_layers = %lld",
                     (long long)n_ratios, (long long)c.n_layers);
        }
    }
    if (st == TS_OK) st = ts_model_config_validate(&c, 1);
    ts__json_free(j);
    free(j);
    if (st == TS_OK) *cfg = c;
    return st;
}

typedef struct outbuf { char *p; size_t cap, len; } outbuf;

static void emit(outbuf *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *dst = o->len < o->cap ? o->p + o->len : NULL;
    size_t room = o->len < o->cap ? o->cap - o->len : 0;
    int n = vsnprintf(dst, room, fmt, ap);
    va_end(ap);
    if (n > 0) o->len += (size_t)n;
}

static void emit_str(outbuf *o, const char *s) {
    emit(o, "\"");
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') emit(o, "\\%c", ch);
        else if (ch < 0x20) emit(o, "\\u%04x", ch);
        else emit(o, "%c", ch);
    }
    emit(o, "\"");
}

ts_status ts_model_config_to_json(const ts_model_config *c, char *buf, size_t cap) {
    if (!c) return ts__fail(TS_ERR_NULL_POINTER, "ts_model_config_to_json: cfg is NULL");
    if (!buf) return ts__fail(TS_ERR_NULL_POINTER, "ts_model_config_to_json: buf is NULL");
    if (memchr(c->name, 0, sizeof c->name) == NULL)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_model_config_to_json: name not terminated");
    if (c->n_layers < 0 || c->n_layers > TS_MODEL_MAX_LAYERS ||
        (int)c->score_func < 0 || c->score_func > 2 || (int)c->attention < 0 || c->attention > 1)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_model_config_to_json: invalid cfg (validate it)");
    outbuf o = {buf, cap, 0};
    ts_model_config t = *c;
    emit(&o, "{");
    for (size_t i = 0; i < sizeof k_keys / sizeof k_keys[0]; i++) {
        const char *k = k_keys[i];
        emit(&o, "%s\"%s\": ", i ? ", " : "", k);
        int64_t *ip = int_field(&t, k);
        double *dp = dbl_field(&t, k);
        if (ip) emit(&o, "%lld", (long long)*ip);
        else if (dp) emit(&o, "%.17g", *dp);
        else if (strcmp(k, "seed") == 0) emit(&o, "%llu", (unsigned long long)t.seed);
        else if (strcmp(k, "name") == 0) emit_str(&o, t.name);
        else if (strcmp(k, "score_func") == 0) emit(&o, "\"%s\"", k_score[t.score_func]);
        else if (strcmp(k, "attention") == 0) emit(&o, "\"%s\"", k_attn[t.attention]);
        else if (strcmp(k, "compress_ratios") == 0) {
            emit(&o, "[");
            for (int64_t L = 0; L < t.n_layers; L++)
                emit(&o, "%s%d", L ? ", " : "", t.compress_ratios[L]);
            emit(&o, "]");
        }
    }
    emit(&o, "}");
    if (o.len + 1 > cap)
        return ts__fail(TS_ERR_INVALID_ARGUMENT,
                        "ts_model_config_to_json: cap = %zu is too small (%zu bytes needed)", cap,
                        o.len + 1);
    return TS_OK;
}
