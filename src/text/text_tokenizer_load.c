/* tokenizer.json reader (jansson): builds the id tables, the merge map, the added tokens and
 * the pre-tokenizer steps, refusing what it does not implement by name. The file is untrusted:
 * its size is capped, every id is range-checked and unique, every string valid UTF-8. */
#include "text/text_internal.h"
#include "core/file_read.h"
#include "core/internal.h"
#include "core/text_escape.h"

#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ID ((int32_t)1 << 24) /* ids above this are refused (V4 has 129280) */
#define MAX_PRETOK 16

/* The GPT-2 split ByteLevel applies when its use_regex is true (tokenizers' default). */
static const char k_bytelevel_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

typedef struct loader {
    ts_tokenizer *t;
    const char *what; /* the file, for messages */
} loader;

static ts_status bad(const loader *L, const char *where, const char *msg) {
    return ts__fail(TS_ERR_INVALID_ARGUMENT, "tokenizer %s: %s: %s", L->what, where, msg);
}

static ts_status unsupported(const loader *L, const char *where, const char *type) {
    char esc[TS__ESC_CAP];
    return ts__fail(TS_ERR_UNSUPPORTED, "tokenizer %s: %s type \"%s\" is not supported "
                    "(docs/tokenizer.md lists what is)", L->what, where,
                    ts__text_escape_str(type, esc, sizeof esc));
}

/* A copy of s in the arena (NUL-terminated); its address stays valid (the arena is sized
 * before any string is copied). */
static const char *arena_put(ts_tokenizer *t, const char *s, size_t len) {
    if (t->arena_len + len + 1 > t->arena_cap) return NULL;
    char *p = t->arena + t->arena_len;
    memcpy(p, s, len);
    p[len] = 0;
    t->arena_len += len + 1;
    return p;
}

static bool valid_utf8(const char *s, size_t len) {
    return ts__utf8_first_invalid((const unsigned char *)s, len) == len;
}

/* Bytes of every string the tables will hold: vocab keys and added-token contents. */
static size_t arena_bytes(json_t *vocab, json_t *added) {
    size_t n = 0;
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) n += strlen(key) + 1;
    size_t i;
    json_array_foreach(added, i, v) {
        json_t *c = json_object_get(v, "content");
        if (json_is_string(c)) n += json_string_length(c) + 1;
    }
    return n + 1;
}

static ts_status set_id(loader *L, int32_t id, const char *s, size_t len, bool special,
                        const char *where) {
    ts_tokenizer *t = L->t;
    if (t->id_str[id] && (t->id_len[id] != len || memcmp(t->id_str[id], s, len)))
        return bad(L, where, "two different tokens share one id");
    t->id_str[id] = s;
    t->id_len[id] = (uint32_t)len;
    t->id_special[id] = t->id_special[id] || special;
    return TS_OK;
}

static ts_status read_id(loader *L, json_t *v, const char *where, int32_t *id) {
    if (!json_is_integer(v)) return bad(L, where, "an id is not an integer");
    const json_int_t x = json_integer_value(v);
    if (x < 0 || x >= MAX_ID) return bad(L, where, "an id is outside [0, 2^24)");
    *id = (int32_t)x;
    return TS_OK;
}

/* Largest id in the vocab and the added tokens, so the tables can be sized first. */
static ts_status max_id(loader *L, json_t *vocab, json_t *added, int32_t *out) {
    int32_t m = -1, id = 0;
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        TS__RETURN_IF_ERROR(read_id(L, v, "model.vocab", &id));
        if (id > m) m = id;
    }
    size_t i;
    json_array_foreach(added, i, v) {
        if (!json_is_object(v)) return bad(L, "added_tokens", "an entry is not an object");
        TS__RETURN_IF_ERROR(read_id(L, json_object_get(v, "id"), "added_tokens", &id));
        if (id > m) m = id;
    }
    if (m < 0) return bad(L, "model.vocab", "no tokens");
    *out = m;
    return TS_OK;
}

static ts_status load_vocab(loader *L, json_t *vocab) {
    ts_tokenizer *t = L->t;
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        const size_t len = strlen(key);
        if (!len || !valid_utf8(key, len)) return bad(L, "model.vocab", "a token is empty or not UTF-8");
        int32_t id = 0;
        TS__RETURN_IF_ERROR(read_id(L, v, "model.vocab", &id));
        const char *s = arena_put(t, key, len);
        if (!s) return ts__fail(TS_ERR_INTERNAL, "tokenizer: arena sized too small");
        TS__RETURN_IF_ERROR(set_id(L, id, s, len, false, "model.vocab"));
        if (!ts__str_map_put(&t->vocab, s, len, id))
            return ts__fail(TS_ERR_OUT_OF_MEMORY, "tokenizer %s: vocabulary map", L->what);
    }
    return TS_OK;
}

static bool get_bool(json_t *obj, const char *key, bool dflt) {
    json_t *v = json_object_get(obj, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static ts_status load_added(loader *L, json_t *added) {
    ts_tokenizer *t = L->t;
    const size_t n = json_array_size(added);
    t->added = calloc(n ? n : 1, sizeof *t->added);
    if (!t->added) return ts__fail(TS_ERR_OUT_OF_MEMORY, "tokenizer %s: added tokens", L->what);
    size_t i;
    json_t *v;
    json_array_foreach(added, i, v) {
        json_t *c = json_object_get(v, "content");
        if (!json_is_string(c) || !json_string_length(c))
            return bad(L, "added_tokens", "an entry has no content string");
        const size_t len = json_string_length(c);
        if (!valid_utf8(json_string_value(c), len) || memchr(json_string_value(c), 0, len))
            return bad(L, "added_tokens", "a content is not UTF-8 (or holds a NUL)");
        int32_t id = 0;
        TS__RETURN_IF_ERROR(read_id(L, json_object_get(v, "id"), "added_tokens", &id));
        ts__added_token *a = &t->added[t->n_added++];
        const int32_t known = ts__str_map_get(&t->vocab, json_string_value(c), len);
        a->content = known >= 0 ? t->id_str[known] : arena_put(t, json_string_value(c), len);
        if (!a->content) return ts__fail(TS_ERR_INTERNAL, "tokenizer: arena sized too small");
        a->len = (uint32_t)len;
        a->id = id;
        a->special = get_bool(v, "special", false);
        a->lstrip = get_bool(v, "lstrip", false);
        a->rstrip = get_bool(v, "rstrip", false);
        a->single_word = get_bool(v, "single_word", false);
        /* The added token's id wins over the model's for the same string (as in tokenizers). */
        if (known >= 0 && known != id)
            return bad(L, "added_tokens", "a token has one id in the vocab and another here");
        TS__RETURN_IF_ERROR(set_id(L, id, a->content, len, a->special, "added_tokens"));
        if (known < 0 && !ts__str_map_put(&t->vocab, a->content, len, id))
            return bad(L, "added_tokens", "a content appears twice");
    }
    return TS_OK;
}

/* Splits an old-style merge "a b" at its single space. */
static bool split_merge(const char *s, size_t len, size_t *cut) {
    const char *sp = memchr(s, ' ', len);
    if (!sp || sp == s || (size_t)(sp - s) + 1 >= len || memchr(sp + 1, ' ', len - (size_t)(sp - s) - 1))
        return false;
    *cut = (size_t)(sp - s);
    return true;
}

static ts_status load_merges(loader *L, json_t *merges) {
    ts_tokenizer *t = L->t;
    if (!json_is_array(merges)) return bad(L, "model.merges", "not an array");
    const size_t n = json_array_size(merges);
    if (n >= (size_t)MAX_ID) return bad(L, "model.merges", "more than 2^24 merges");
    TS__RETURN_IF_ERROR(ts__pair_map_init(&t->merges, n));
    char buf[1024];
    size_t i;
    json_t *m;
    json_array_foreach(merges, i, m) {
        const char *a, *b;
        size_t la, lb;
        if (json_is_string(m)) {
            const char *s = json_string_value(m);
            const size_t len = json_string_length(m);
            size_t cut;
            if (!split_merge(s, len, &cut)) return bad(L, "model.merges", "a merge is not \"a b\"");
            a = s, la = cut, b = s + cut + 1, lb = len - cut - 1;
        } else if (json_is_array(m) && json_array_size(m) == 2 &&
                   json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0));
            la = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
            lb = json_string_length(json_array_get(m, 1));
        } else {
            return bad(L, "model.merges", "a merge is neither \"a b\" nor [\"a\", \"b\"]");
        }
        const int32_t ia = ts__str_map_get(&t->vocab, a, la), ib = ts__str_map_get(&t->vocab, b, lb);
        if (la + lb > sizeof buf) return bad(L, "model.merges", "a merged token is too long");
        memcpy(buf, a, la);
        memcpy(buf + la, b, lb);
        const int32_t im = ts__str_map_get(&t->vocab, buf, la + lb);
        if (ia < 0 || ib < 0 || im < 0)
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "tokenizer %s: model.merges[%zu]: a part or "
                            "the merged token is not in the vocab", L->what, i);
        if (!ts__pair_map_put(&t->merges, ia, ib, (int32_t)i, im))
            return ts__fail(TS_ERR_OUT_OF_MEMORY, "tokenizer %s: merge map", L->what);
    }
    return TS_OK;
}

static bool is_null_or_absent(json_t *v) { return !v || json_is_null(v); }

static ts_status load_model(loader *L, json_t *model, json_t *added) {
    ts_tokenizer *t = L->t;
    if (!json_is_object(model)) return bad(L, "model", "missing");
    const char *type = json_string_value(json_object_get(model, "type"));
    if (!type || strcmp(type, "BPE")) return unsupported(L, "model", type ? type : "(none)");
    if (!is_null_or_absent(json_object_get(model, "dropout")))
        return unsupported(L, "model.dropout", "BPE dropout");
    static const char *const absent[] = {"continuing_subword_prefix", "end_of_word_suffix", "unk_token"};
    for (size_t i = 0; i < sizeof absent / sizeof *absent; i++)
        if (!is_null_or_absent(json_object_get(model, absent[i])))
            return unsupported(L, "model", absent[i]);
    if (get_bool(model, "byte_fallback", false)) return unsupported(L, "model", "byte_fallback");
    t->ignore_merges = get_bool(model, "ignore_merges", false);
    json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_object(vocab)) return bad(L, "model.vocab", "not an object");
    if (!json_is_array(added)) return bad(L, "added_tokens", "not an array");
    int32_t m = 0;
    TS__RETURN_IF_ERROR(max_id(L, vocab, added, &m));
    t->n_ids = (int64_t)m + 1;
    t->id_str = calloc((size_t)t->n_ids, sizeof *t->id_str);
    t->id_len = calloc((size_t)t->n_ids, sizeof *t->id_len);
    t->id_special = calloc((size_t)t->n_ids, sizeof *t->id_special);
    t->arena_cap = arena_bytes(vocab, added);
    t->arena = malloc(t->arena_cap);
    if (!t->id_str || !t->id_len || !t->id_special || !t->arena)
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "tokenizer %s: tables for %lld ids", L->what,
                        (long long)t->n_ids);
    TS__RETURN_IF_ERROR(ts__str_map_init(&t->vocab, json_object_size(vocab) + json_array_size(added)));
    TS__RETURN_IF_ERROR(load_vocab(L, vocab));
    TS__RETURN_IF_ERROR(load_added(L, added));
    return load_merges(L, json_object_get(model, "merges"));
}

static ts_status parse_behavior(loader *L, json_t *v, ts__split_behavior *b) {
    static const struct { const char *name; ts__split_behavior b; } k[] = {
        {"Removed", TS__SPLIT_REMOVED}, {"Isolated", TS__SPLIT_ISOLATED},
        {"MergedWithPrevious", TS__SPLIT_MERGED_WITH_PREVIOUS},
        {"MergedWithNext", TS__SPLIT_MERGED_WITH_NEXT}, {"Contiguous", TS__SPLIT_CONTIGUOUS}};
    const char *s = json_string_value(v);
    for (size_t i = 0; s && i < sizeof k / sizeof *k; i++)
        if (!strcmp(s, k[i].name)) {
            *b = k[i].b;
            return TS_OK;
        }
    return unsupported(L, "pre_tokenizer Split behavior", s ? s : "(none)");
}

static ts_status add_pretok(loader *L, json_t *p) {
    ts_tokenizer *t = L->t;
    if (!json_is_object(p)) return bad(L, "pre_tokenizer", "a step is not an object");
    const char *type = json_string_value(json_object_get(p, "type"));
    if (!type) return bad(L, "pre_tokenizer", "a step has no type");
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(p, "pretokenizers");
        if (!json_is_array(list)) return bad(L, "pre_tokenizer", "Sequence without pretokenizers");
        size_t i;
        json_t *v;
        json_array_foreach(list, i, v) TS__RETURN_IF_ERROR(add_pretok(L, v));
        return TS_OK;
    }
    if (t->n_pretok == MAX_PRETOK) return bad(L, "pre_tokenizer", "more than 16 steps");
    ts__pretok *s = &t->pretok[t->n_pretok];
    memset(s, 0, sizeof *s);
    char where[64];
    snprintf(where, sizeof where, "tokenizer %s: pre_tokenizer step %d", L->what, t->n_pretok);
    if (!strcmp(type, "Split")) {
        json_t *pat = json_object_get(p, "pattern");
        json_t *re = json_object_get(pat, "Regex"), *str = json_object_get(pat, "String");
        json_t *src = json_is_string(re) ? re : str;
        if (!json_is_string(src)) return bad(L, "pre_tokenizer Split", "no Regex or String pattern");
        TS__RETURN_IF_ERROR(parse_behavior(L, json_object_get(p, "behavior"), &s->behavior));
        s->kind = TS__PRETOK_SPLIT;
        s->invert = get_bool(p, "invert", false);
        TS__RETURN_IF_ERROR(ts__regex_compile(json_string_value(src), json_string_length(src),
                                              src == str, &s->regex, where));
    } else if (!strcmp(type, "ByteLevel")) {
        s->kind = TS__PRETOK_BYTELEVEL;
        s->add_prefix_space = get_bool(p, "add_prefix_space", true);
        if (get_bool(p, "use_regex", true))
            TS__RETURN_IF_ERROR(ts__regex_compile(k_bytelevel_regex, strlen(k_bytelevel_regex),
                                                  false, &s->regex, where));
        t->bytelevel = true;
    } else {
        return unsupported(L, "pre_tokenizer", type);
    }
    t->n_pretok++;
    return TS_OK;
}

static ts_status check_normalizer(loader *L, json_t *n) {
    if (is_null_or_absent(n)) return TS_OK;
    const char *type = json_string_value(json_object_get(n, "type"));
    if (type && !strcmp(type, "Sequence") && json_array_size(json_object_get(n, "normalizers")) == 0)
        return TS_OK;
    return unsupported(L, "normalizer", type ? type : "(none)");
}

static ts_status check_decoder(loader *L, json_t *d) {
    ts_tokenizer *t = L->t;
    const char *type = json_string_value(json_object_get(d, "type"));
    if (!is_null_or_absent(d) && (!type || strcmp(type, "ByteLevel")))
        return unsupported(L, "decoder", type ? type : "(none)");
    if (is_null_or_absent(d) == t->bytelevel)
        return bad(L, "decoder", "a ByteLevel decoder goes with a ByteLevel pre-tokenizer");
    return TS_OK;
}

/* Byte-level text must be encodable whatever it holds: every byte's symbol has an id. */
static ts_status byte_ids(loader *L) {
    ts_tokenizer *t = L->t;
    for (int b = 0; b < 256; b++) {
        char s[4];
        const int n = t->bytelevel ? ts__utf8_put(ts__bytelevel_char((unsigned char)b), s) : 1;
        if (!t->bytelevel) s[0] = (char)b;
        t->byte_id[b] = ts__str_map_get(&t->vocab, s, (size_t)n);
        if (t->bytelevel && t->byte_id[b] < 0)
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "tokenizer %s: model.vocab has no token for "
                            "byte 0x%02x (a byte-level vocabulary needs all 256)", L->what, b);
    }
    return TS_OK;
}

ts_status ts_tokenizer_load_buffer(const char *json, size_t len, const char *what,
                                   ts_tokenizer **out) {
    if (!out) return ts__fail(TS_ERR_NULL_POINTER, "ts_tokenizer_load_buffer: out is NULL");
    *out = NULL;
    if (!json) return ts__fail(TS_ERR_NULL_POINTER, "ts_tokenizer_load_buffer: json is NULL");
    loader L = {.what = what ? what : "(buffer)"};
    if ((int64_t)len > TS_TOKENIZER_MAX_FILE_BYTES)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "tokenizer %s: %zu bytes, more than the %lld "
                        "this reader accepts", L.what, len, (long long)TS_TOKENIZER_MAX_FILE_BYTES);
    json_error_t err;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &err);
    if (!root)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "tokenizer %s: invalid JSON at line %d column "
                        "%d: %.80s", L.what, err.line, err.column, err.text);
    ts_tokenizer *t = calloc(1, sizeof *t);
    ts_status st = t ? TS_OK : ts__fail(TS_ERR_OUT_OF_MEMORY, "tokenizer %s", L.what);
    L.t = t;
    if (st == TS_OK && !json_is_object(root)) st = bad(&L, "(root)", "not an object");
    if (st == TS_OK) st = check_normalizer(&L, json_object_get(root, "normalizer"));
    if (st == TS_OK)
        st = load_model(&L, json_object_get(root, "model"), json_object_get(root, "added_tokens"));
    if (st == TS_OK && !(t->pretok = calloc(MAX_PRETOK, sizeof *t->pretok)))
        st = ts__fail(TS_ERR_OUT_OF_MEMORY, "tokenizer %s", L.what);
    json_t *pre = json_object_get(root, "pre_tokenizer");
    if (st == TS_OK && !is_null_or_absent(pre)) st = add_pretok(&L, pre);
    if (st == TS_OK) st = check_decoder(&L, json_object_get(root, "decoder"));
    if (st == TS_OK) st = byte_ids(&L);
    json_decref(root);
    if (st != TS_OK) {
        ts_tokenizer_free(t);
        return st;
    }
    *out = t;
    return TS_OK;
}

ts_status ts_tokenizer_load(const char *path, ts_tokenizer **out) {
    if (!out) return ts__fail(TS_ERR_NULL_POINTER, "ts_tokenizer_load: out is NULL");
    *out = NULL;
    if (!path) return ts__fail(TS_ERR_NULL_POINTER, "ts_tokenizer_load: path is NULL");
    char *buf = NULL;
    size_t len = 0;
    TS__RETURN_IF_ERROR(ts__read_file_capped(AT_FDCWD, path, path, (size_t)TS_TOKENIZER_MAX_FILE_BYTES,
                                             true, &buf, &len));
    const ts_status s = ts_tokenizer_load_buffer(buf, len, path, out);
    free(buf);
    return s;
}

void ts_tokenizer_free(ts_tokenizer *t) {
    if (!t) return;
    for (int i = 0; t->pretok && i < t->n_pretok; i++) ts__regex_free(t->pretok[i].regex);
    free(t->pretok);
    free(t->added);
    ts__pair_map_free(&t->merges);
    ts__str_map_free(&t->vocab);
    free(t->id_str);
    free(t->id_len);
    free(t->id_special);
    free(t->arena);
    free(t);
}

int64_t ts_tokenizer_vocab_size(const ts_tokenizer *t) { return t ? t->n_ids : 0; }

int32_t ts_tokenizer_token_to_id(const ts_tokenizer *t, const char *token) {
    return t && token ? ts__str_map_get(&t->vocab, token, strlen(token)) : -1;
}

const char *ts_tokenizer_id_to_token(const ts_tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->n_ids ? t->id_str[id] : NULL;
}

bool ts_tokenizer_is_special(const ts_tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->n_ids && t->id_special[id];
}
