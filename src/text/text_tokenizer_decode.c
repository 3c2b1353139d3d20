/* Decoding as `tokenizers` does it: the ids' token strings, special ones dropped on request;
 * with the ByteLevel decoder each token's characters back to bytes (a token with a character
 * outside the byte alphabet, an added token such as "<｜User｜>", stays as its UTF-8), then the
 * bytes as UTF-8 with invalid parts replaced by U+FFFD. Without a decoder tokens are joined by
 * spaces. The streaming form holds back an incomplete character until the next token. */
#include "text/text_internal.h"
#include "core/internal.h"

#include <stdlib.h>
#include <string.h>

static ts_status check_id(const ts_tokenizer *t, int32_t id, const char *fn) {
    if (id < 0 || id >= t->n_ids || !t->id_str[id])
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: id %ld is not a token of this tokenizer "
                        "(vocab size %lld)", fn, (long)id, (long long)t->n_ids);
    return TS_OK;
}

/* The bytes token `id` stands for, into out (room for its string's length); returns the count. */
static size_t token_bytes(const ts_tokenizer *t, int32_t id, unsigned char *out) {
    const unsigned char *s = (const unsigned char *)t->id_str[id];
    const size_t len = t->id_len[id];
    if (!t->bytelevel) {
        memcpy(out, s, len);
        return len;
    }
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        int k;
        const int b = ts__bytelevel_byte(ts__utf8_get(s + i, &k));
        if (b < 0) { /* not byte-level text: the token as written */
            memcpy(out, s, len);
            return len;
        }
        out[o++] = (unsigned char)b;
        i += (size_t)k;
    }
    return o;
}

static bool skipped(const ts_tokenizer *t, int32_t id, bool skip_special) {
    return skip_special && t->id_special[id];
}

ts_status ts_tokenizer_decode(const ts_tokenizer *t, const int32_t *ids, size_t n,
                              bool skip_special, char **text, size_t *len) {
    static const char fn[] = "ts_tokenizer_decode";
    if (!t || !text || !len || (!ids && n)) return ts__fail(TS_ERR_NULL_POINTER, "%s: NULL argument", fn);
    *text = NULL;
    *len = 0;
    size_t bytes = 1;
    for (size_t i = 0; i < n; i++) {
        TS__RETURN_IF_ERROR(check_id(t, ids[i], fn));
        bytes += t->id_len[ids[i]] + 1;
    }
    unsigned char *raw = malloc(bytes);
    char *out = malloc(3 * bytes + 1);
    if (!raw || !out) {
        free(raw);
        free(out);
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: %zu bytes", fn, bytes);
    }
    size_t r = 0;
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        if (skipped(t, ids[i], skip_special)) continue;
        if (!t->bytelevel && !first) raw[r++] = ' ';
        r += token_bytes(t, ids[i], raw + r);
        first = false;
    }
    size_t o = 0;
    ts__utf8_lossy(raw, r, false, out, &o);
    out[o] = 0;
    free(raw);
    *text = out;
    *len = o;
    return TS_OK;
}

void ts_tokenizer_stream_init(ts_tokenizer_stream *s, const ts_tokenizer *t, bool skip_special) {
    memset(s, 0, sizeof *s);
    s->tok = t;
    s->skip_special = skip_special;
}

ts_status ts_tokenizer_stream_put(ts_tokenizer_stream *s, int32_t id, char *out, size_t cap,
                                  size_t *len) {
    static const char fn[] = "ts_tokenizer_stream_put";
    if (!s || !s->tok || !out || !len) return ts__fail(TS_ERR_NULL_POINTER, "%s: NULL argument", fn);
    *len = 0;
    const ts_tokenizer *t = s->tok;
    TS__RETURN_IF_ERROR(check_id(t, id, fn));
    if (skipped(t, id, s->skip_special)) return TS_OK;
    const size_t tl = t->id_len[id];
    if (cap < 3 * (tl + 1 + (size_t)s->n_pending))
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: out holds %zu bytes, %zu needed", fn, cap,
                        3 * (tl + 1 + (size_t)s->n_pending));
    unsigned char *raw = malloc(tl + 1 + sizeof s->pending);
    if (!raw) return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s", fn);
    size_t r = (size_t)s->n_pending;
    memcpy(raw, s->pending, r);
    if (!t->bytelevel && s->started) raw[r++] = ' ';
    r += token_bytes(t, id, raw + r);
    s->started = true;
    size_t o = 0;
    const size_t held = ts__utf8_lossy(raw, r, true, out, &o);
    memcpy(s->pending, raw + r - held, held); /* held < 4: a sequence is at most 4 bytes */
    s->n_pending = (int)held;
    free(raw);
    *len = o;
    return TS_OK;
}

ts_status ts_tokenizer_stream_finish(ts_tokenizer_stream *s, char *out, size_t cap, size_t *len) {
    if (!s || !out || !len) return ts__fail(TS_ERR_NULL_POINTER, "ts_tokenizer_stream_finish: NULL argument");
    *len = 0;
    if (cap < 3 * (size_t)s->n_pending)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_tokenizer_stream_finish: out too small");
    size_t o = 0;
    ts__utf8_lossy(s->pending, (size_t)s->n_pending, false, out, &o);
    s->n_pending = 0;
    *len = o;
    return TS_OK;
}
