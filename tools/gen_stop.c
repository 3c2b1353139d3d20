/* Stop strings over streamed text. The text arrives in pieces (whole UTF-8 characters, from the
 * tokenizer's streaming decoder); a stop string may span pieces, so the tail that could still
 * begin one is held back, and nothing else: everything printed is final. The reply ends at the
 * stop string that completes first (earliest end in the text), cut where it begins.
 *
 * Why that match is always found whole: a match that completes in a new piece began inside
 * the held-back tail or the new piece, because at the previous piece its beginning was a tail
 * that begins a stop string, and the longest such tail was held. Holding back a tail that
 * begins a (valid UTF-8) stop string never splits a character: it starts with the stop string's
 * first byte, a lead byte. */
#include "gen.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void gen_stop_init(gen_stop *s, const char *const *stops, int n_stops) {
    memset(s, 0, sizeof *s);
    s->stops = stops;
    s->n_stops = n_stops;
}

/* Length of the longest tail of buf[0, len) that is a proper prefix of some stop string. */
static size_t held_tail(const gen_stop *s) {
    size_t best = 0;
    for (int k = 0; k < s->n_stops; k++) {
        const size_t sl = strlen(s->stops[k]);
        for (size_t h = (sl - 1 < s->len ? sl - 1 : s->len); h > best; h--)
            if (!memcmp(s->buf + s->len - h, s->stops[k], h)) {
                best = h;
                break;
            }
    }
    return best;
}

static void release(gen_stop *s, size_t k, gen_emit_fn emit, void *ctx) {
    if (k && emit) emit(ctx, s->buf, k);
    if (k < s->len) memmove(s->buf, s->buf + k, s->len - k);
    s->len -= k;
}

ts_status gen_stop_push(gen_stop *s, const char *text, size_t n, gen_emit_fn emit, void *ctx) {
    if (s->hit || !n) return TS_OK;
    if (!s->n_stops) { /* nothing to hold back */
        if (emit) emit(ctx, text, n);
        return TS_OK;
    }
    if (s->len + n > s->cap) {
        const size_t cap = (s->len + n) * 2;
        char *nb = realloc(s->buf, cap);
        if (!nb) return TS_ERR_OUT_OF_MEMORY;
        s->buf = nb;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, text, n);
    s->len += n;
    /* the stop string that completes first as the text grows (earliest end; at equal ends the
     * longer one), so the cut does not depend on where the pieces happen to be split */
    size_t first = s->len, end = SIZE_MAX;
    for (int k = 0; k < s->n_stops; k++) {
        const size_t sl = strlen(s->stops[k]);
        const char *p = memmem(s->buf, s->len, s->stops[k], sl);
        if (!p) continue;
        const size_t at = (size_t)(p - s->buf);
        if (at + sl < end || (at + sl == end && at < first)) first = at, end = at + sl;
    }
    if (end != SIZE_MAX) {
        release(s, first, emit, ctx);
        s->len = 0;
        s->hit = true;
        return TS_OK;
    }
    release(s, s->len - held_tail(s), emit, ctx);
    return TS_OK;
}

void gen_stop_finish(gen_stop *s, gen_emit_fn emit, void *ctx) {
    if (!s->hit) release(s, s->len, emit, ctx);
}

void gen_stop_free(gen_stop *s) {
    free(s->buf);
    memset(s, 0, sizeof *s);
}
