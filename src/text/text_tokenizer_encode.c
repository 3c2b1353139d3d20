/* Encoding, in the order `tokenizers` applies it: added tokens are cut out of the raw text
 * first (leftmost, then longest); every other stretch goes through the pre-tokenizer steps
 * (regex splits, the byte-level mapping) and each resulting piece through BPE. */
#include "text/text_internal.h"
#include "core/internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- a growing list of pieces, each a byte range of its own buffer ---- */
typedef struct pieces {
    char *buf;
    size_t len, cap;
    size_t *off, *plen;
    size_t n, ncap;
} pieces;

static void pieces_free(pieces *p) {
    free(p->buf);
    free(p->off);
    free(p->plen);
    memset(p, 0, sizeof *p);
}

static bool grow(void **ptr, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*ptr, c * elem);
    if (!q) return false;
    *ptr = q;
    *cap = c;
    return true;
}

/* Appends a piece made of `len` bytes (a NULL s reserves them for the caller to fill). */
static char *piece_add(pieces *p, const char *s, size_t len) {
    size_t ncap = p->ncap;
    if (!grow((void **)&p->buf, &p->cap, p->len + len + 1, 1)) return NULL;
    if (!grow((void **)&p->off, &ncap, p->n + 1, sizeof *p->off)) return NULL;
    ncap = p->ncap;
    if (!grow((void **)&p->plen, &ncap, p->n + 1, sizeof *p->plen)) return NULL;
    p->ncap = ncap;
    char *dst = p->buf + p->len;
    if (s) memcpy(dst, s, len);
    p->off[p->n] = p->len;
    p->plen[p->n++] = len;
    p->len += len;
    return dst;
}

/* Extends the last piece by `len` bytes that directly follow it in the source (merging). */
static bool piece_extend(pieces *p, const char *s, size_t len) {
    if (!grow((void **)&p->buf, &p->cap, p->len + len + 1, 1)) return false;
    memcpy(p->buf + p->len, s, len);
    p->len += len;
    p->plen[p->n - 1] += len;
    return true;
}

static ts_status oom(void) { return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_tokenizer_encode: buffers"); }

/* ---- one Split step over one piece ---- */

typedef struct span { size_t a, b; bool match; } span;

/* The piece as spans: matches and the gaps between them (empty gaps dropped). An empty match
 * right where the previous one ended is skipped one character on, as Oniguruma's iterator in
 * `tokenizers` does. */
static ts_status find_spans(void *re, void *region, const unsigned char *s, size_t len,
                            span **out, size_t *n_out) {
    span *sp = NULL;
    size_t n = 0, cap = 0, prev = 0, pos = 0;
    bool have_last = false;
    size_t last_end = 0;
    while (pos <= len) {
        size_t m0, m1;
        const int r = ts__regex_next(re, region, s, len, pos, &m0, &m1);
        if (r < 0) {
            free(sp);
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_tokenizer_encode: a pre-tokenizer "
                            "regex exceeded Oniguruma's backtracking limit on this text");
        }
        if (r == 0) break;
        if (m0 == m1 && have_last && last_end == m1) {
            if (pos >= len) break;
            int k;
            ts__utf8_get(s + pos, &k);
            pos += (size_t)k;
            continue;
        }
        if (!grow((void **)&sp, &cap, n + 2, sizeof *sp)) return free(sp), oom();
        if (m0 > prev) sp[n++] = (span){prev, m0, false};
        sp[n++] = (span){m0, m1, true};
        prev = m1;
        pos = m1;
        have_last = true;
        last_end = m1;
        if (m0 == m1 && pos >= len) break;
    }
    if (!grow((void **)&sp, &cap, n + 1, sizeof *sp)) return free(sp), oom();
    if (prev < len) sp[n++] = (span){prev, len, false};
    *out = sp;
    *n_out = n;
    return TS_OK;
}

/* Spans to pieces by the step's behaviour (tokenizers' SplitDelimiterBehavior). */
static ts_status emit_spans(const ts__pretok *st, const char *s, span *sp, size_t n, pieces *out) {
    if (st->invert)
        for (size_t i = 0; i < n; i++) sp[i].match = !sp[i].match;
    /* MergedWithNext folds from the right: do it by merging each match into the span after */
    if (st->behavior == TS__SPLIT_MERGED_WITH_NEXT) {
        size_t w = 0;
        for (size_t i = 0; i < n; i++) {
            if (sp[i].match && i + 1 < n && !sp[i + 1].match) {
                sp[i + 1].a = sp[i].a; /* a match opens the next non-match */
                continue;
            }
            sp[w++] = sp[i];
        }
        n = w;
    }
    bool prev_match = false, have = false;
    for (size_t i = 0; i < n; i++) {
        const span x = sp[i];
        const size_t len = x.b - x.a;
        bool merge = false;
        switch (st->behavior) {
        case TS__SPLIT_REMOVED:
            if (x.match) continue;
            break;
        case TS__SPLIT_MERGED_WITH_PREVIOUS: merge = x.match && !prev_match && have; break;
        case TS__SPLIT_CONTIGUOUS: merge = x.match == prev_match && have; break;
        default: break;
        }
        prev_match = x.match;
        if (!len) continue;
        if (merge ? !piece_extend(out, s + x.a, len) : !piece_add(out, s + x.a, len)) return oom();
        have = true;
    }
    return TS_OK;
}

static ts_status split_step(const ts__pretok *st, void *region, const pieces *in, pieces *out) {
    for (size_t i = 0; i < in->n; i++) {
        const char *s = in->buf + in->off[i];
        span *sp = NULL;
        size_t n = 0;
        TS__RETURN_IF_ERROR(find_spans(st->regex, region, (const unsigned char *)s, in->plen[i],
                                       &sp, &n));
        const ts_status r = emit_spans(st, s, sp, n, out);
        free(sp);
        TS__RETURN_IF_ERROR(r);
    }
    return TS_OK;
}

/* ByteLevel: the optional prefix space and GPT-2 split, then every byte as its code point. */
static ts_status bytelevel_step(const ts__pretok *st, void *region, const pieces *in, pieces *out) {
    pieces tmp = {0};
    const pieces *src = in;
    if (st->add_prefix_space || st->regex) {
        for (size_t i = 0; i < in->n; i++) {
            const char *s = in->buf + in->off[i];
            const size_t len = in->plen[i];
            if (!st->add_prefix_space || (len && s[0] == ' ')) {
                if (!piece_add(&tmp, s, len)) return pieces_free(&tmp), oom();
                continue;
            }
            char *d = piece_add(&tmp, NULL, len + 1);
            if (!d) return pieces_free(&tmp), oom();
            d[0] = ' ';
            memcpy(d + 1, s, len);
        }
        src = &tmp;
        if (st->regex) {
            pieces split = {0};
            const ts__pretok iso = {.kind = TS__PRETOK_SPLIT, .regex = st->regex,
                                    .behavior = TS__SPLIT_ISOLATED};
            const ts_status r = split_step(&iso, region, &tmp, &split);
            pieces_free(&tmp);
            if (r != TS_OK) return pieces_free(&split), r;
            tmp = split;
        }
    }
    for (size_t i = 0; i < src->n; i++) {
        const unsigned char *s = (const unsigned char *)src->buf + src->off[i];
        char *d = piece_add(out, NULL, 2 * src->plen[i]);
        if (!d) return pieces_free(&tmp), oom();
        size_t o = 0;
        for (size_t k = 0; k < src->plen[i]; k++) o += (size_t)ts__utf8_put(ts__bytelevel_char(s[k]), d + o);
        out->plen[out->n - 1] = o;
        out->len = out->off[out->n - 1] + o;
    }
    pieces_free(&tmp);
    return TS_OK;
}

/* Pre-tokenizes one stretch of text between added tokens and BPE-encodes each piece. */
static ts_status encode_stretch(const ts_tokenizer *t, void *region, ts__bpe_scratch *bpe,
                                const char *s, size_t len, int32_t **ids, size_t *n, size_t *cap) {
    pieces cur = {0};
    if (!piece_add(&cur, s, len)) return oom();
    for (int k = 0; k < t->n_pretok; k++) {
        pieces next = {0};
        const ts__pretok *st = &t->pretok[k];
        const ts_status r = st->kind == TS__PRETOK_SPLIT ? split_step(st, region, &cur, &next)
                                                         : bytelevel_step(st, region, &cur, &next);
        pieces_free(&cur);
        if (r != TS_OK) return pieces_free(&next), r;
        cur = next;
    }
    ts_status r = TS_OK;
    for (size_t i = 0; i < cur.n && r == TS_OK; i++)
        if (cur.plen[i]) r = ts__bpe_word(t, cur.buf + cur.off[i], cur.plen[i], bpe, ids, n, cap);
    pieces_free(&cur);
    return r;
}

/* ---- added tokens ---- */

/* Rust's char::is_whitespace (Unicode White_Space), for lstrip / rstrip. */
static bool is_space_cp(uint32_t c) {
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static bool is_word_byte(unsigned char c) {
    return c >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
           (c >= 'A' && c <= 'Z') || c == '_';
}

static bool may_match(const ts__added_token *a, ts__added_mode mode) {
    return mode == TS__ADDED_ALL || (mode == TS__ADDED_NON_SPECIAL && !a->special);
}

/* The longest added token starting at s[i] (that may match here), or NULL. */
static const ts__added_token *match_at(const ts_tokenizer *t, const char *s, size_t len, size_t i,
                                       ts__added_mode mode) {
    const ts__added_token *best = NULL;
    for (int k = 0; k < t->n_added; k++) {
        const ts__added_token *a = &t->added[k];
        if (!may_match(a, mode) || a->len > len - i || (best && a->len <= best->len))
            continue;
        if (memcmp(s + i, a->content, a->len)) continue;
        if (a->single_word && ((i > 0 && is_word_byte((unsigned char)s[i - 1])) ||
                               (i + a->len < len && is_word_byte((unsigned char)s[i + a->len]))))
            continue;
        best = a;
    }
    return best;
}

/* Whitespace bytes just before `end` down to `floor` (lstrip) */
static size_t space_before(const char *s, size_t floor, size_t end) {
    size_t i = end;
    while (i > floor) {
        size_t j = i - 1;
        while (j > floor && ((unsigned char)s[j] & 0xC0) == 0x80) j--;
        int k;
        if (!is_space_cp(ts__utf8_get((const unsigned char *)s + j, &k))) break;
        i = j;
    }
    return end - i;
}

static size_t space_after(const char *s, size_t len, size_t start) {
    size_t i = start;
    while (i < len) {
        int k;
        if (!is_space_cp(ts__utf8_get((const unsigned char *)s + i, &k))) break;
        i += (size_t)k;
    }
    return i - start;
}

ts_status ts__tokenizer_encode(const ts_tokenizer *t, const char *text, size_t len,
                               ts__added_mode mode, int32_t **ids, size_t *n_ids) {
    static const char fn[] = "ts_tokenizer_encode";
    if (!t || !ids || !n_ids || (!text && len))
        return ts__fail(TS_ERR_NULL_POINTER, "%s: NULL argument", fn);
    *ids = NULL;
    *n_ids = 0;
    const size_t bad_at = ts__utf8_first_invalid((const unsigned char *)text, len);
    if (bad_at != len)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: the text is not valid UTF-8 (byte %zu of "
                        "%zu)", fn, bad_at, len);
    bool first_byte[256] = {false};
    for (int k = 0; k < t->n_added; k++)
        if (may_match(&t->added[k], mode))
            first_byte[(unsigned char)t->added[k].content[0]] = true;
    void *region = ts__regex_region_new();
    if (!region) return oom();
    ts__bpe_scratch bpe = {0};
    int32_t *out = NULL;
    size_t n = 0, cap = 0, start = 0; /* start: first byte not yet encoded */
    ts_status r = TS_OK;
    for (size_t i = 0; i < len && r == TS_OK;) {
        const ts__added_token *a =
            first_byte[(unsigned char)text[i]] ? match_at(t, text, len, i, mode) : NULL;
        if (!a) {
            i++;
            continue;
        }
        const size_t ls = a->lstrip ? space_before(text, start, i) : 0;
        r = encode_stretch(t, region, &bpe, text + start, i - ls - start, &out, &n, &cap);
        if (r == TS_OK && !grow((void **)&out, &cap, n + 1, sizeof *out)) r = oom();
        if (r == TS_OK) out[n++] = a->id;
        i += a->len;
        if (a->rstrip) i += space_after(text, len, i);
        start = i;
    }
    if (r == TS_OK && start < len) r = encode_stretch(t, region, &bpe, text + start, len - start, &out, &n, &cap);
    ts__regex_region_free(region);
    ts__bpe_scratch_free(&bpe);
    if (r != TS_OK) {
        free(out);
        return r;
    }
    if (!out && !(out = malloc(sizeof *out))) return oom(); /* a valid pointer even for no ids */
    *ids = out;
    *n_ids = n;
    return TS_OK;
}

ts_status ts_tokenizer_encode(const ts_tokenizer *t, const char *text, size_t len,
                              bool parse_special, int32_t **ids, size_t *n_ids) {
    return ts__tokenizer_encode(t, text, len, parse_special ? TS__ADDED_ALL : TS__ADDED_NON_SPECIAL,
                                ids, n_ids);
}
