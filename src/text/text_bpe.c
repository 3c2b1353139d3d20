/* BPE of one piece, merge by merge in the order `tokenizers` takes them: a min-heap of
 * candidate pairs keyed by (merge rank, position), stale entries skipped when popped. Equal
 * ranks merge left to right, which is what makes "aaa" -> "aa" + "a". */
#include "text/text_internal.h"
#include "core/internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct sym { int32_t id, prev, next; bool live; } sym;
typedef struct cand { int32_t rank, pos, merged; } cand;

static bool before(cand x, cand y) { return x.rank != y.rank ? x.rank < y.rank : x.pos < y.pos; }

static void heap_push(cand *h, size_t *n, cand c) {
    size_t i = (*n)++;
    h[i] = c;
    while (i > 0 && before(h[i], h[(i - 1) / 2])) {
        const cand tmp = h[i];
        h[i] = h[(i - 1) / 2];
        h[(i - 1) / 2] = tmp;
        i = (i - 1) / 2;
    }
}

static cand heap_pop(cand *h, size_t *n) {
    const cand top = h[0];
    h[0] = h[--(*n)];
    for (size_t i = 0;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < *n && before(h[l], h[m])) m = l;
        if (r < *n && before(h[r], h[m])) m = r;
        if (m == i) break;
        const cand tmp = h[i];
        h[i] = h[m];
        h[m] = tmp;
        i = m;
    }
    return top;
}

static bool push_ids(int32_t **ids, size_t *n, size_t *cap, size_t more) {
    if (*n + more <= *cap) return true;
    size_t c = *cap ? *cap : 256;
    while (c < *n + more) c *= 2;
    int32_t *q = realloc(*ids, c * sizeof *q);
    if (!q) return false;
    *ids = q;
    *cap = c;
    return true;
}

void ts__bpe_scratch_free(ts__bpe_scratch *scratch) {
    free(scratch->sym);
    free(scratch->heap);
    memset(scratch, 0, sizeof *scratch);
}

/* Room for `len` symbols and the 2 * len + 1 heap entries a piece of len bytes can need. */
static bool reserve(ts__bpe_scratch *sc, size_t len) {
    if (len <= sc->cap) return true;
    size_t c = sc->cap ? sc->cap : 64;
    while (c < len) c *= 2;
    sym *s = realloc(sc->sym, c * sizeof *s);
    if (s) sc->sym = s;
    cand *h = s ? realloc(sc->heap, (2 * c + 1) * sizeof *h) : NULL;
    if (h) sc->heap = h;
    if (!s || !h) return false;
    sc->cap = c;
    return true;
}

ts_status ts__bpe_word(const ts_tokenizer *t, const char *piece, size_t len,
                       ts__bpe_scratch *scratch, int32_t **ids, size_t *n, size_t *cap) {
    if (t->ignore_merges) {
        const int32_t whole = ts__str_map_get(&t->vocab, piece, len);
        if (whole >= 0) {
            if (!push_ids(ids, n, cap, 1)) goto oom;
            (*ids)[(*n)++] = whole;
            return TS_OK;
        }
    }
    /* one symbol per character; a character without a token is dropped, as `tokenizers`
     * does without an unk token (a byte-level vocabulary has every character: checked at load) */
    if (!reserve(scratch, len)) goto oom;
    sym *s = scratch->sym;
    cand *h = scratch->heap;
    int32_t ns = 0;
    for (size_t i = 0; i < len;) {
        int k;
        ts__utf8_get((const unsigned char *)piece + i, &k);
        if (i + (size_t)k > len) k = (int)(len - i);
        const int32_t id = ts__str_map_get(&t->vocab, piece + i, (size_t)k);
        i += (size_t)k;
        if (id < 0) continue;
        s[ns] = (sym){id, ns - 1, ns + 1, true};
        ns++;
    }
    if (ns) s[ns - 1].next = -1;
    size_t nh = 0;
    for (int32_t i = 0; i + 1 < ns; i++) {
        cand c = {0, i, 0};
        if (ts__pair_map_get(&t->merges, s[i].id, s[i + 1].id, &c.rank, &c.merged)) heap_push(h, &nh, c);
    }
    while (nh) {
        const cand c = heap_pop(h, &nh);
        sym *a = &s[c.pos];
        if (!a->live || a->next < 0) continue;
        sym *b = &s[a->next];
        int32_t rank, merged;
        /* stale: the pair at this position changed since the entry was pushed */
        if (!ts__pair_map_get(&t->merges, a->id, b->id, &rank, &merged) || merged != c.merged)
            continue;
        a->id = c.merged;
        b->live = false;
        a->next = b->next;
        if (b->next >= 0) s[b->next].prev = c.pos;
        cand d = {0, 0, 0};
        if (a->prev >= 0 && ts__pair_map_get(&t->merges, s[a->prev].id, a->id, &d.rank, &d.merged)) {
            d.pos = a->prev;
            heap_push(h, &nh, d);
        }
        if (a->next >= 0 && ts__pair_map_get(&t->merges, a->id, s[a->next].id, &d.rank, &d.merged)) {
            d.pos = c.pos;
            heap_push(h, &nh, d);
        }
    }
    bool ok = push_ids(ids, n, cap, (size_t)ns);
    for (int32_t i = 0; ok && ns && i >= 0; i = s[i].next) (*ids)[(*n)++] = s[i].id;
    if (ok) return TS_OK;
oom:
    return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_tokenizer_encode: BPE buffers");
}
