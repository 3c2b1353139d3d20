/* OpenAI's request bodies into serve_req (prompt ids, sampling, stops), and the bodies the
 * server answers with: responses, stream chunks, errors (docs/serve.md). Every field is
 * checked for its JSON type and range; a bad one is a 400 naming it (OpenAI's error body:
 * message, type, param, code). Fields the server does not implement are refused by name when
 * they would change the answer, ignored when they would not (user, metadata, ...). */
#include "serve.h"

#include "core/internal.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

char *serve_error_body(const char *message, const char *type, const char *param, const char *code) {
    json_t *e = json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", message, "type", type,
                          "param", param ? json_string(param) : json_null(),
                          "code", code ? json_string(code) : json_null());
    char *s = e ? json_dumps(e, JSON_COMPACT) : NULL;
    json_decref(e);
    return s;
}

/* splitmix64's finaliser: request ids and the seeds of unseeded requests */
static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

typedef struct parse_ctx {
    serve_srv *s;
    char **err;
    int status;
} parse_ctx;

static int reject(parse_ctx *p, int status, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int reject(parse_ctx *p, int status, const char *param, const char *code, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    *p->err = serve_error_body(msg, status == 404 ? "not_found_error" : "invalid_request_error",
                               param, code);
    p->status = status;
    return status;
}

static bool present(const json_t *v) { return v && !json_is_null(v); }

/* An optional number field into *dst, within [lo, hi]. */
static int get_number(parse_ctx *p, const json_t *root, const char *key, double lo, double hi, double *dst) {
    const json_t *v = json_object_get(root, key);
    if (!present(v)) return 0;
    if (!json_is_number(v)) return reject(p, 400, key, NULL, "'%s' must be a number", key);
    const double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) return reject(p, 400, key, NULL, "'%s' = %g is outside [%g, %g]", key, x, lo, hi);
    *dst = x;
    return 0;
}

static int get_int(parse_ctx *p, const json_t *root, const char *key, int64_t lo, int64_t hi, int64_t *dst,
                   bool *given) {
    const json_t *v = json_object_get(root, key);
    if (!present(v)) return 0;
    if (!json_is_integer(v)) return reject(p, 400, key, NULL, "'%s' must be an integer", key);
    const json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return reject(p, 400, key, NULL, "'%s' = %lld is outside [%lld, %lld]", key, (long long)x,
                      (long long)lo, (long long)hi);
    *dst = x;
    if (given) *given = true;
    return 0;
}

static int get_bool(parse_ctx *p, const json_t *root, const char *key, bool *dst) {
    const json_t *v = json_object_get(root, key);
    if (!present(v)) return 0;
    if (!json_is_boolean(v)) return reject(p, 400, key, NULL, "'%s' must be true or false", key);
    *dst = json_is_true(v);
    return 0;
}

/* A string that must be valid UTF-8 (jansson guarantees it for what it parsed). */
static int add_stop(parse_ctx *p, serve_req *q, const json_t *v) {
    if (!json_is_string(v)) return reject(p, 400, "stop", NULL, "'stop' must be a string or an array of strings");
    const size_t n = json_string_length(v);
    if (!n) return 0; /* an empty stop string would end every reply: ignored, as OpenAI does */
    if (q->o.n_stops == GEN_MAX_STOPS)
        return reject(p, 400, "stop", NULL, "more than %d stop strings", GEN_MAX_STOPS);
    if (memchr(json_string_value(v), 0, n))
        return reject(p, 400, "stop", NULL, "a stop string holds a NUL character");
    char *c = strdup(json_string_value(v));
    if (!c) return reject(p, 500, NULL, NULL, "out of memory");
    q->stops_mem[q->o.n_stops] = c;
    q->o.stops = (const char *const *)q->stops_mem;
    q->o.n_stops++;
    return 0;
}

/* OpenAI's two spellings: chat `logprobs: true` with `top_logprobs` 0..20; completions
 * `logprobs: N` (0..5, the alternatives; null: none). The sampler records the top max(N, 1) of
 * each step (gen_opts.logprobs), of which the response shows N. */
static int parse_logprobs(parse_ctx *p, const json_t *root, serve_req *q) {
    int rc;
    const json_t *lp = json_object_get(root, "logprobs");
    bool top_given = false;
    if (q->chat) {
        if ((rc = get_bool(p, root, "logprobs", &q->logprobs))) return rc;
        if ((rc = get_int(p, root, "top_logprobs", 0, 20, &q->top_logprobs, &top_given))) return rc;
        if (top_given && !q->logprobs)
            return reject(p, 400, "top_logprobs", NULL, "'top_logprobs' needs 'logprobs': true");
    } else if (present(lp)) {
        if ((rc = get_int(p, root, "logprobs", 0, 5, &q->top_logprobs, NULL))) return rc;
        q->logprobs = true;
    }
    q->o.logprobs = q->logprobs ? (q->top_logprobs > 1 ? q->top_logprobs : 1) : 0;
    return 0;
}

static int parse_sampling(parse_ctx *p, const json_t *root, serve_req *q) {
    int rc;
    double temperature = 1, top_p = 1;
    if ((rc = get_number(p, root, "temperature", 0, TS_SAMPLER_MAX_TEMPERATURE, &temperature))) return rc;
    if (temperature > 0 && temperature < TS_SAMPLER_MIN_TEMPERATURE)
        return reject(p, 400, "temperature", NULL, "'temperature' must be 0 (greedy) or at least %g",
                      TS_SAMPLER_MIN_TEMPERATURE);
    if ((rc = get_number(p, root, "top_p", 0, 1, &top_p))) return rc;
    if (top_p == 0) return reject(p, 400, "top_p", NULL, "'top_p' must be in (0, 1]");
    int64_t top_k = 0;
    if ((rc = get_int(p, root, "top_k", -1, p->s->vocab, &top_k, NULL))) return rc;
    q->o.sp.temperature = temperature;
    q->o.sp.top_p = top_p;
    q->o.sp.top_k = top_k < 0 ? 0 : top_k; /* -1 and 0: no limit (vLLM's -1) */
    int64_t seed = 0;
    bool seeded = false;
    if ((rc = get_int(p, root, "seed", INT64_MIN, INT64_MAX, &seed, &seeded))) return rc;
    /* unseeded requests draw different samples, as OpenAI's do */
    q->seed = seeded ? (uint64_t)seed : mix64(((uint64_t)time(NULL) << 20) ^ __atomic_add_fetch(&p->s->next_id, 1, __ATOMIC_RELAXED) ^ (uint64_t)(uintptr_t)q);
    int64_t n = 1;
    if ((rc = get_int(p, root, "n", 1, 1, &n, NULL))) return rc;
    if ((rc = parse_logprobs(p, root, q))) return rc;
    const char *refused[] = {"tools", "tool_choice", "functions", "response_format", "logit_bias",
                             "suffix", "best_of"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        const json_t *v = json_object_get(root, refused[i]);
        if (present(v) && !json_is_false(v))
            return reject(p, 400, refused[i], "unsupported_parameter", "'%s' is not supported by this server", refused[i]);
    }
    const char *zero_only[] = {"presence_penalty", "frequency_penalty"};
    for (size_t i = 0; i < 2; i++) {
        double v = 0;
        if ((rc = get_number(p, root, zero_only[i], -2, 2, &v))) return rc;
        if (v != 0)
            return reject(p, 400, zero_only[i], "unsupported_parameter", "'%s' other than 0 is not supported", zero_only[i]);
    }
    if ((rc = get_bool(p, root, "stream", &q->stream))) return rc;
    if (q->stream && q->logprobs)
        return reject(p, 400, "logprobs", "unsupported_parameter",
                      "'logprobs' is not supported with 'stream' by this server (ask without streaming)");
    /* vLLM's extension: decode past EOS (fixed output lengths for benchmarks) */
    if ((rc = get_bool(p, root, "ignore_eos", &q->o.ignore_eos))) return rc;
    const json_t *so = json_object_get(root, "stream_options");
    if (present(so)) {
        if (!json_is_object(so)) return reject(p, 400, "stream_options", NULL, "'stream_options' must be an object");
        if ((rc = get_bool(p, so, "include_usage", &q->include_usage))) return rc;
    }
    const json_t *stop = json_object_get(root, "stop");
    if (json_is_array(stop)) {
        size_t i;
        json_t *v;
        json_array_foreach(stop, i, v) if ((rc = add_stop(p, q, v))) return rc;
    } else if (present(stop) && (rc = add_stop(p, q, stop))) return rc;
    return 0;
}

static int parse_chat_prompt(parse_ctx *p, const json_t *root, serve_req *q) {
    const json_t *msgs = json_object_get(root, "messages");
    if (!json_is_array(msgs) || !json_array_size(msgs))
        return reject(p, 400, "messages", NULL, "'messages' must be a non-empty array");
    const size_t n = json_array_size(msgs);
    ts_chat_message *m = calloc(n, sizeof *m);
    char **owned = calloc(n, sizeof *owned);
    int rc = 0;
    if (!m || !owned) rc = reject(p, 500, NULL, NULL, "out of memory");
    for (size_t i = 0; !rc && i < n; i++) {
        const json_t *msg = json_array_get(msgs, i);
        const char *role = json_string_value(json_object_get(msg, "role"));
        char param[64];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(msg) || !role) {
            rc = reject(p, 400, param, NULL, "%s must be an object with a 'role' string", param);
            break;
        }
        if (!strcmp(role, "system") || !strcmp(role, "developer")) m[i].role = TS_CHAT_SYSTEM;
        else if (!strcmp(role, "user")) m[i].role = TS_CHAT_USER;
        else if (!strcmp(role, "assistant")) m[i].role = TS_CHAT_ASSISTANT;
        else {
            rc = reject(p, 400, param, NULL, "%s: role '%.32s' is not system, developer, user or "
                        "assistant", param, role);
            break;
        }
        const json_t *c = json_object_get(msg, "content");
        if (json_is_string(c)) {
            m[i].content = json_string_value(c);
            m[i].len = json_string_length(c);
        } else if (json_is_array(c)) {
            /* content parts: text only, joined */
            size_t len = 0, k;
            json_t *part;
            json_array_foreach(c, k, part) {
                const json_t *t = json_object_get(part, "text");
                const char *ty = json_string_value(json_object_get(part, "type"));
                if (!ty || strcmp(ty, "text") || !json_is_string(t)) {
                    rc = reject(p, 400, param, NULL, "%s: only content parts of type 'text' are supported", param);
                    break;
                }
                len += json_string_length(t);
            }
            if (rc) break;
            if (!(owned[i] = malloc(len + 1))) {
                rc = reject(p, 500, NULL, NULL, "out of memory");
                break;
            }
            len = 0;
            json_array_foreach(c, k, part) {
                const json_t *t = json_object_get(part, "text");
                memcpy(owned[i] + len, json_string_value(t), json_string_length(t));
                len += json_string_length(t);
            }
            m[i].content = owned[i];
            m[i].len = len;
        } else if (json_is_null(c) && m[i].role == TS_CHAT_ASSISTANT) {
            m[i].content = "";
        } else {
            rc = reject(p, 400, param, NULL, "%s: 'content' must be a string or an array of text parts", param);
        }
        if (!rc && memchr(m[i].content, 0, m[i].len))
            rc = reject(p, 400, param, NULL, "%s: the content holds a NUL character", param);
    }
    bool thinking = false;
    const json_t *kw = json_object_get(root, "chat_template_kwargs");
    if (!rc) rc = get_bool(p, root, "thinking", &thinking);
    if (!rc && present(kw) && !json_is_object(kw))
        rc = reject(p, 400, "chat_template_kwargs", NULL, "'chat_template_kwargs' must be an object");
    if (!rc && present(kw)) rc = get_bool(p, kw, "thinking", &thinking);
    if (!rc && thinking && p->s->chat_format != TS_CHAT_DEEPSEEK_V4)
        rc = reject(p, 400, "thinking", NULL, "thinking mode is DeepSeek V4's; this model uses the V3 template");
    q->thinking = thinking;
    if (!rc && ts_chat_encode(p->s->gm->tok, p->s->chat_format, m, n, thinking, &q->prompt, &q->n_prompt) != TS_OK)
        rc = reject(p, 400, "messages", NULL, "messages: %s", ts_last_error());
    for (size_t i = 0; owned && i < n; i++) free(owned[i]);
    free(owned);
    free(m);
    return rc;
}

static int parse_completion_prompt(parse_ctx *p, const json_t *root, serve_req *q) {
    const json_t *pr = json_object_get(root, "prompt");
    if (json_is_array(pr) && json_array_size(pr) == 1 && json_is_string(json_array_get(pr, 0)))
        pr = json_array_get(pr, 0);
    if (json_is_string(pr)) {
        if (memchr(json_string_value(pr), 0, json_string_length(pr)))
            return reject(p, 400, "prompt", NULL, "the prompt holds a NUL character");
        /* as `generate --prompt`: special tokens written in the prompt are tokens */
        if (ts_tokenizer_encode(p->s->gm->tok, json_string_value(pr), json_string_length(pr), true,
                                &q->prompt, &q->n_prompt) != TS_OK)
            return reject(p, 400, "prompt", NULL, "prompt: %s", ts_last_error());
        return 0;
    }
    if (json_is_array(pr) && json_array_size(pr) > 0 && json_is_integer(json_array_get(pr, 0))) {
        /* token ids */
        const size_t n = json_array_size(pr);
        if (!(q->prompt = malloc(n * sizeof *q->prompt))) return reject(p, 500, NULL, NULL, "out of memory");
        q->n_prompt = n;
        for (size_t i = 0; i < n; i++) {
            const json_t *v = json_array_get(pr, i);
            const json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
            if (id < 0 || id >= p->s->vocab || !ts_tokenizer_id_to_token(p->s->gm->tok, (int32_t)id))
                return reject(p, 400, "prompt", NULL, "prompt[%zu] is not a token id of this model", i);
            q->prompt[i] = (int32_t)id;
        }
        return 0;
    }
    return reject(p, 400, "prompt", NULL, "'prompt' must be a string, an array of one string, or an "
                  "array of token ids (one prompt per request)");
}

int serve_req_from_json(serve_srv *s, bool chat, const char *body, size_t len, serve_req **out,
                        char **err_body) {
    *out = NULL;
    *err_body = NULL;
    parse_ctx p = {.s = s, .err = err_body};
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) return reject(&p, 400, NULL, "invalid_json", "the body is not valid JSON: %s (line %d, column %d)",
                             je.text, je.line, je.column);
    serve_req *q = calloc(1, sizeof *q);
    int rc = q ? 0 : reject(&p, 500, NULL, NULL, "out of memory");
    if (!rc && !json_is_object(root)) rc = reject(&p, 400, NULL, NULL, "the body must be a JSON object");
    const json_t *model = rc ? NULL : json_object_get(root, "model");
    if (!rc && present(model) && !json_is_string(model)) rc = reject(&p, 400, "model", NULL, "'model' must be a string");
    if (!rc && json_is_string(model) && strcmp(json_string_value(model), s->model_id))
        rc = reject(&p, 404, "model", "model_not_found", "the model '%.100s' does not exist (this server has '%s')",
                    json_string_value(model), s->model_id);
    if (!rc) {
        q->srv = s;
        q->chat = chat;
        q->seq = -1;
        q->refs = 1;
        rc = parse_sampling(&p, root, q);
    }
    if (!rc) rc = chat ? parse_chat_prompt(&p, root, q) : parse_completion_prompt(&p, root, q);
    int64_t max_tokens = 0;
    bool given = false;
    if (!rc) rc = get_int(&p, root, chat ? "max_completion_tokens" : "max_tokens", 1, INT64_C(1) << 30, &max_tokens, &given);
    if (!rc && chat && !given) rc = get_int(&p, root, "max_tokens", 1, INT64_C(1) << 30, &max_tokens, &given);
    if (!rc && !chat && get_bool(&p, root, "echo", &q->echo) == 0 && q->echo)
        rc = reject(&p, 400, "echo", "unsupported_parameter", "'echo' is not supported by this server");
    if (!rc && p.status) rc = p.status;
    const int64_t ctx = s->max_context;
    if (!rc && (q->n_prompt == 0 || (int64_t)q->n_prompt > ctx - 1))
        rc = reject(&p, 400, chat ? "messages" : "prompt", "context_length_exceeded",
                    "the prompt is %zu tokens; this server takes 1 to %lld (its context of %lld "
                    "tokens leaves room for at least one completion token)",
                    q->n_prompt, (long long)(ctx - 1), (long long)ctx);
    if (!rc && given && (int64_t)q->n_prompt + max_tokens > ctx)
        rc = reject(&p, 400, chat ? "max_completion_tokens" : "max_tokens", "context_length_exceeded",
                    "this server's maximum context length is %lld tokens; you requested %lld (%zu in "
                    "the prompt, %lld for the completion)", (long long)ctx,
                    (long long)((int64_t)q->n_prompt + max_tokens), q->n_prompt, (long long)max_tokens);
    if (!rc) {
        /* OpenAI's defaults: the rest of the context for chat, 16 tokens for completions */
        const int64_t room = ctx - (int64_t)q->n_prompt;
        q->o.max_new = given ? max_tokens : chat ? room : (room < 16 ? room : 16);
        snprintf(q->id, sizeof q->id, "%s-%016llx", chat ? "chatcmpl" : "cmpl",
                 (unsigned long long)mix64(__atomic_add_fetch(&s->next_id, 1, __ATOMIC_RELAXED) ^ ((uint64_t)s->created << 24)));
        q->created = (int64_t)time(NULL);
    }
    json_decref(root);
    if (rc) {
        if (!*err_body) *err_body = serve_error_body("out of memory", "server_error", NULL, NULL);
        if (q) {
            free(q->prompt);
            for (int i = 0; i < q->o.n_stops; i++) free(q->stops_mem[i]);
            free(q);
        }
        return rc;
    }
    *out = q;
    return 0;
}

void serve_req_release(serve_srv *s, serve_req *q) {
    (void)s;
    if (!q || --q->refs > 0) return;
    free(q->prompt);
    for (int i = 0; i < q->o.n_stops; i++) free(q->stops_mem[i]);
    gen_result_free(&q->r);
    free(q->out);
    free(q);
}

static const char *finish_reason(const serve_req *q) {
    /* OpenAI has no "eos" or "context": the model ended it (stop) or a bound did (length) */
    if (!q->finish) return NULL;
    return !strcmp(q->finish, "eos") || !strcmp(q->finish, "stop") ? "stop" : "length";
}

static json_t *usage(const serve_req *q) {
    return json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)q->n_prompt,
                     "completion_tokens", (json_int_t)q->n_completion,
                     "total_tokens", (json_int_t)(q->n_prompt + q->n_completion));
}

static char *dump(json_t *j) {
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}

static json_t *head(const serve_srv *s, const serve_req *q, const char *object) {
    return json_pack("{s:s, s:s, s:I, s:s, s:s}", "id", q->id, "object", object, "created",
                     (json_int_t)q->created, "model", s->model_id, "system_fingerprint", "tilestack-" TS_VERSION_STRING);
}

/* Token id's text, decoded alone (a token cut inside a UTF-8 character gives U+FFFD). */
static json_t *token_text(const serve_srv *s, int32_t id, size_t *len) {
    char *t = NULL;
    *len = 0;
    if (ts_tokenizer_decode(s->gm->tok, &id, 1, false, &t, len) != TS_OK) return json_string("");
    json_t *j = json_stringn(t, *len);
    free(t);
    return j ? j : json_string("");
}

/* The response's logprobs (NULL: not asked): chat's {content: [{token, logprob, bytes,
 * top_logprobs}]} or completions' {tokens, token_logprobs, top_logprobs, text_offset}, over
 * the sampled tokens (EOS, which has no text, not listed). */
static json_t *logprobs_json(const serve_srv *s, const serve_req *q) {
    if (!q->logprobs) return NULL;
    const gen_result *r = &q->r;
    const size_t tn = (size_t)r->top_n, show = (size_t)q->top_logprobs;
    /* chat: content; completions: tokens, token_logprobs, top_logprobs, text_offset */
    json_t *content = json_array(), *tokens = json_array(), *lps = json_array(), *tops = json_array(),
           *offs = json_array();
    size_t off = 0;
    for (size_t k = 0; k < r->n_out; k++) {
        size_t len;
        json_t *tok = token_text(s, r->out[k], &len);
        json_t *top = q->chat ? json_array() : json_object();
        for (size_t j = 0; j < tn && j < show; j++) {
            const int32_t id = r->top_ids[k * tn + j];
            const double v = r->top_lp[k * tn + j];
            if (id < 0 || !isfinite(v)) continue;
            size_t l2;
            json_t *t2 = token_text(s, id, &l2);
            if (q->chat) json_array_append_new(top, json_pack("{s:O, s:f, s:n}", "token", t2, "logprob", v, "bytes"));
            else json_object_set_new(top, json_string_value(t2), json_real(v));
            json_decref(t2);
        }
        if (q->chat) {
            json_array_append_new(content, json_pack("{s:O, s:f, s:n, s:o}", "token", tok, "logprob", r->lp[k],
                                                     "bytes", "top_logprobs", top));
        } else {
            json_array_append(tokens, tok);
            json_array_append_new(lps, json_real(r->lp[k]));
            json_array_append_new(tops, top);
            json_array_append_new(offs, json_integer((json_int_t)off));
        }
        off += len;
        json_decref(tok);
    }
    if (q->chat) {
        json_decref(tokens), json_decref(lps), json_decref(tops), json_decref(offs);
        return json_pack("{s:o, s:n}", "content", content, "refusal");
    }
    json_decref(content);
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs", tops,
                     "text_offset", offs);
}

char *serve_response_json(const serve_srv *s, const serve_req *q) {
    json_t *r = head(s, q, q->chat ? "chat.completion" : "text_completion");
    const char *out = q->out ? q->out : "";
    gen_think th = {false, 0, 0};
    if (q->thinking) gen_think_split(out, q->out_len, true, &th);
    json_t *text = json_stringn(out + th.answer, q->out_len - th.answer);
    json_t *choice = q->chat
        ? json_pack("{s:i, s:{s:s, s:o, s:o*}, s:n, s:s?}", "index", 0, "message", "role", "assistant",
                    "content", text, "reasoning_content",
                    q->thinking ? json_stringn(out, th.reasoning) : NULL, "logprobs", "finish_reason",
                    finish_reason(q))
        : json_pack("{s:i, s:o, s:n, s:s?}", "index", 0, "text", text, "logprobs", "finish_reason",
                    finish_reason(q));
    if (!r || !choice) {
        json_decref(r);
        json_decref(choice);
        return NULL;
    }
    json_t *lp = logprobs_json(s, q);
    if (lp) json_object_set_new(choice, "logprobs", lp);
    json_object_set_new(r, "choices", json_pack("[o]", choice));
    json_object_set_new(r, "usage", usage(q));
    return dump(r);
}

static char *sse(json_t *j) {
    char *body = dump(j);
    if (!body) return NULL;
    const size_t n = strlen(body);
    char *e = malloc(n + 9);
    if (e) {
        memcpy(e, "data: ", 6);
        memcpy(e + 6, body, n);
        memcpy(e + 6 + n, "\n\n", 3);
    }
    free(body);
    return e;
}

char *serve_stream_chunk(const serve_srv *s, const serve_req *q, const char *reasoning, size_t rn,
                         const char *text, size_t n, bool first, bool final) {
    json_t *c = head(s, q, q->chat ? "chat.completion.chunk" : "text_completion");
    if (!c) return NULL;
    json_t *choice;
    json_t *fin = final ? json_string(finish_reason(q)) : json_null();
    if (q->chat) {
        json_t *delta = json_object();
        if (first) json_object_set_new(delta, "role", json_string("assistant"));
        if (q->thinking && (rn || first))
            json_object_set_new(delta, "reasoning_content", json_stringn(reasoning ? reasoning : "", rn));
        if (n || first) json_object_set_new(delta, "content", json_stringn(text ? text : "", n));
        choice = json_pack("{s:i, s:o, s:n, s:o}", "index", 0, "delta", delta, "logprobs", "finish_reason", fin);
    } else {
        choice = json_pack("{s:i, s:o, s:n, s:o}", "index", 0, "text", json_stringn(text ? text : "", n),
                           "logprobs", "finish_reason", fin);
    }
    json_object_set_new(c, "choices", json_pack("[o]", choice));
    /* stream_options.include_usage: null on every chunk but a last one that has only usage */
    if (q->include_usage) json_object_set_new(c, "usage", json_null());
    return sse(c);
}

/* The usage chunk (include_usage): no choices. */
char *serve_stream_usage(const serve_srv *s, const serve_req *q) {
    json_t *c = head(s, q, q->chat ? "chat.completion.chunk" : "text_completion");
    if (!c) return NULL;
    json_object_set_new(c, "choices", json_array());
    json_object_set_new(c, "usage", usage(q));
    return sse(c);
}

char *serve_models_json(const serve_srv *s) {
    return dump(json_pack("{s:s, s:[{s:s, s:s, s:I, s:s, s:I}]}", "object", "list", "data", "id",
                          s->model_id, "object", "model", "created", (json_int_t)s->created,
                          "owned_by", "tilestack", "max_model_len", (json_int_t)s->max_context));
}
