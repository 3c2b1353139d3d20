/* The page table of the compressed caches (docs/model.md §5 "Pages"): a pool of pages handed to
 * sequences as they grow and taken back when they are reset, as FlashMLA's block table. The
 * free pages form a stack, so the placement is a function of the calls alone (every rank of an
 * expert-parallel model, stepping the same batch, places the same rows on the same pages). */
#include "model_internal.h"

#include <stdlib.h>
#include <string.h>

ts_status ts__pages_init(ts__pages *p, int64_t batch, int64_t page_tokens, int64_t per_seq,
                         int64_t total) {
    memset(p, 0, sizeof *p);
    if (total > INT32_MAX || batch * per_seq > (int64_t)1 << 40)
        return ts__fail(TS_ERR_OVERFLOW, "ts_model: %lld cache pages (at most 2^31 - 1)",
                        (long long)total);
    p->page_tokens = page_tokens;
    p->per_seq = per_seq;
    p->total = total;
    p->table = (int32_t *)malloc((size_t)(batch * per_seq) * sizeof *p->table);
    p->held = (int64_t *)calloc((size_t)batch, sizeof *p->held);
    p->free_pages = (int32_t *)malloc((size_t)(total > 0 ? total : 1) * sizeof *p->free_pages);
    if (!p->table || !p->held || !p->free_pages) {
        ts__pages_free(p);
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model: out of memory (page table)");
    }
    for (int64_t i = 0; i < batch * per_seq; i++) p->table[i] = -1;
    /* page 0 on top: a lone sequence takes 0, 1, 2, ... */
    for (int64_t i = 0; i < total; i++) p->free_pages[i] = (int32_t)(total - 1 - i);
    p->nfree = total;
    return TS_OK;
}

void ts__pages_free(ts__pages *p) {
    free(p->table);
    free(p->held);
    free(p->free_pages);
    memset(p, 0, sizeof *p);
}

int64_t ts__pages_missing(const ts__pages *p, int64_t s, int64_t tokens) {
    const int64_t need = ts__ceil_div(tokens, p->page_tokens), have = p->held[s];
    return need > have ? need - have : 0;
}

ts_status ts__pages_enough(const ts__pages *p, const char *fn, int64_t want) {
    if (want <= p->nfree) return TS_OK;
    return ts__fail(TS_ERR_OUT_OF_MEMORY,
                    "%s: the KV cache has %lld free pages of %lld tokens, the call needs %lld "
                    "(%lld pages in all; nothing advanced)",
                    fn, (long long)p->nfree, (long long)p->page_tokens, (long long)want,
                    (long long)p->total);
}

void ts__pages_take(ts__pages *p, int64_t s, int64_t tokens) {
    int32_t *t = p->table + s * p->per_seq;
    const int64_t need = ts__ceil_div(tokens, p->page_tokens);
    while (p->held[s] < need && p->nfree > 0) t[p->held[s]++] = p->free_pages[--p->nfree];
}

void ts__pages_release(ts__pages *p, int64_t s) {
    int32_t *t = p->table + s * p->per_seq;
    /* last page first: the next sequence takes them back in the order this one had them */
    for (int64_t k = p->held[s] - 1; k >= 0; k--) {
        p->free_pages[p->nfree++] = t[k];
        t[k] = -1;
    }
    p->held[s] = 0;
}

int64_t ts__pages_default_tokens(const ts_model_config *c) {
    int64_t t = 256;
    for (int64_t L = 0; L < c->n_layers && t < c->max_seq_len; L++) {
        const int64_t r = c->compress_ratios[L];
        if (r <= 0) continue;
        int64_t a = t, b = r; /* t = lcm(t, r) */
        while (b) {
            const int64_t x = a % b;
            a = b;
            b = x;
        }
        t = t / a * r;
    }
    return t < c->max_seq_len ? t : c->max_seq_len;
}
