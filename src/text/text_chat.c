/* Chat prompts as token ids (tokenizer.h "chat prompts"): marker tokens by id, message text
 * encoded without special tokens, so a message can never forge a turn marker. */
#include "text/text_internal.h"
#include "core/internal.h"

#include <stdlib.h>
#include <string.h>

enum { BOS, USER, ASSISTANT, EOS, THINK, END_THINK, N_MARKERS };
static const char *const k_markers[N_MARKERS] = {
    "<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>", "<think>",
    "</think>"};

typedef struct ids_buf {
    int32_t *v;
    size_t n, cap;
} ids_buf;

static bool put(ids_buf *b, int32_t id) {
    if (b->n == b->cap) {
        size_t c = b->cap ? 2 * b->cap : 256;
        int32_t *q = realloc(b->v, c * sizeof *q);
        if (!q) return false;
        b->v = q;
        b->cap = c;
    }
    b->v[b->n++] = id;
    return true;
}

static ts_status put_text(const ts_tokenizer *t, ids_buf *b, const ts_chat_message *m, size_t i) {
    int32_t *ids = NULL;
    size_t n = 0;
    const ts_status st = ts__tokenizer_encode(t, m->content, m->len, TS__ADDED_NONE, &ids, &n);
    if (st != TS_OK) {
        /* the message is formatted into the buffer ts_last_error() returns: copy it first */
        char why[512];
        snprintf(why, sizeof why, "%s", ts_last_error());
        return ts__fail(st, "ts_chat_encode: message %zu: %s", i, why);
    }
    bool ok = true;
    for (size_t k = 0; k < n && ok; k++) ok = put(b, ids[k]);
    free(ids);
    return ok ? TS_OK : ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_chat_encode: ids");
}

ts_status ts_chat_encode(const ts_tokenizer *t, ts_chat_format format,
                         const ts_chat_message *msgs, size_t n, bool thinking,
                         int32_t **ids, size_t *n_ids) {
    static const char fn[] = "ts_chat_encode";
    if (!t || !ids || !n_ids || (!msgs && n)) return ts__fail(TS_ERR_NULL_POINTER, "%s: NULL argument", fn);
    *ids = NULL;
    *n_ids = 0;
    if (format != TS_CHAT_DEEPSEEK_V4 && format != TS_CHAT_DEEPSEEK_V3)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: unknown format %d", fn, (int)format);
    int32_t mk[N_MARKERS];
    for (int k = 0; k < N_MARKERS; k++) {
        mk[k] = ts_tokenizer_token_to_id(t, k_markers[k]);
        const bool needed = k < THINK || format == TS_CHAT_DEEPSEEK_V4;
        if (mk[k] < 0 && needed)
            return ts__fail(TS_ERR_UNSUPPORTED, "%s: the tokenizer has no %s token", fn, k_markers[k]);
    }
    /* the order: system*, then user (assistant user)* [assistant] */
    size_t i = 0;
    while (i < n && msgs[i].role == TS_CHAT_SYSTEM) i++;
    for (size_t k = i; k < n; k++) {
        const ts_chat_role want = (k - i) % 2 == 0 ? TS_CHAT_USER : TS_CHAT_ASSISTANT;
        if (msgs[k].role != want)
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: message %zu is a %s message where a %s "
                            "one is expected (system messages first, then user and assistant "
                            "alternating)", fn, k,
                            msgs[k].role == TS_CHAT_SYSTEM ? "system"
                            : msgs[k].role == TS_CHAT_USER ? "user"
                            : msgs[k].role == TS_CHAT_ASSISTANT ? "assistant" : "unknown",
                            want == TS_CHAT_USER ? "user" : "assistant");
    }
    if (i == n) return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: no user message", fn);
    for (size_t k = 0; k < n; k++)
        if (!msgs[k].content && msgs[k].len)
            return ts__fail(TS_ERR_NULL_POINTER, "%s: message %zu has no content", fn, k);
    ids_buf b = {0};
    ts_status st = put(&b, mk[BOS]) ? TS_OK : ts__fail(TS_ERR_OUT_OF_MEMORY, "%s", fn);
    for (size_t k = 0; k < n && st == TS_OK; k++) {
        const ts_chat_message *m = &msgs[k];
        bool ok = true;
        if (m->role == TS_CHAT_USER) ok = put(&b, mk[USER]);
        if (ok && m->role == TS_CHAT_ASSISTANT && format == TS_CHAT_DEEPSEEK_V3) ok = put(&b, mk[ASSISTANT]);
        if (ok && m->role == TS_CHAT_ASSISTANT && format == TS_CHAT_DEEPSEEK_V4) ok = put(&b, mk[END_THINK]);
        st = ok ? put_text(t, &b, m, k) : ts__fail(TS_ERR_OUT_OF_MEMORY, "%s", fn);
        if (st != TS_OK) break;
        if (m->role == TS_CHAT_ASSISTANT) ok = put(&b, mk[EOS]);
        /* V4 opens the reply right after each user turn; V3 only at the end */
        if (ok && m->role == TS_CHAT_USER && (format == TS_CHAT_DEEPSEEK_V4 || k + 1 == n))
            ok = put(&b, mk[ASSISTANT]);
        if (ok && m->role == TS_CHAT_USER && format == TS_CHAT_DEEPSEEK_V4 && k + 1 == n)
            ok = put(&b, mk[thinking ? THINK : END_THINK]);
        if (!ok) st = ts__fail(TS_ERR_OUT_OF_MEMORY, "%s", fn);
    }
    if (st != TS_OK) {
        free(b.v);
        return st;
    }
    *ids = b.v;
    *n_ids = b.n;
    return TS_OK;
}
