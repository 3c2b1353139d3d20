/* Open-addressing hash maps of the tokenizer: token string -> id, and merge pair -> (rank, id).
 * Linear probing at load factor <= 1/2; FNV-1a for strings, a 64-bit mix for pairs. */
#include "text/text_internal.h"
#include "core/internal.h"

#include <stdlib.h>
#include <string.h>

static size_t cap_for(size_t expect) {
    size_t c = 16;
    while (c < 2 * expect + 2) c <<= 1;
    return c;
}

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

ts_status ts__str_map_init(ts__str_map *m, size_t expect) {
    memset(m, 0, sizeof *m);
    m->cap = cap_for(expect);
    m->keys = calloc(m->cap, sizeof *m->keys);
    m->lens = calloc(m->cap, sizeof *m->lens);
    m->vals = calloc(m->cap, sizeof *m->vals);
    if (!m->keys || !m->lens || !m->vals) {
        ts__str_map_free(m);
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "tokenizer: vocabulary map of %zu entries", expect);
    }
    return TS_OK;
}

void ts__str_map_free(ts__str_map *m) {
    free(m->keys);
    free(m->lens);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

static bool str_grow(ts__str_map *m) {
    ts__str_map g;
    if (ts__str_map_init(&g, m->cap) != TS_OK) return false;
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i]) ts__str_map_put(&g, m->keys[i], m->lens[i], m->vals[i]);
    ts__str_map_free(m);
    *m = g;
    return true;
}

bool ts__str_map_put(ts__str_map *m, const char *key, size_t len, int32_t val) {
    if (2 * (m->n + 1) > m->cap && !str_grow(m)) return false;
    size_t i = hash_bytes(key, len) & (m->cap - 1);
    for (; m->keys[i]; i = (i + 1) & (m->cap - 1))
        if (m->lens[i] == len && !memcmp(m->keys[i], key, len)) return false;
    m->keys[i] = key;
    m->lens[i] = (uint32_t)len;
    m->vals[i] = val;
    m->n++;
    return true;
}

int32_t ts__str_map_get(const ts__str_map *m, const char *key, size_t len) {
    if (!m->cap) return -1;
    for (size_t i = hash_bytes(key, len) & (m->cap - 1); m->keys[i]; i = (i + 1) & (m->cap - 1))
        if (m->lens[i] == len && !memcmp(m->keys[i], key, len)) return m->vals[i];
    return -1;
}

ts_status ts__pair_map_init(ts__pair_map *m, size_t expect) {
    memset(m, 0, sizeof *m);
    m->cap = cap_for(expect);
    m->keys = calloc(m->cap, sizeof *m->keys);
    m->rank = calloc(m->cap, sizeof *m->rank);
    m->merged = calloc(m->cap, sizeof *m->merged);
    if (!m->keys || !m->rank || !m->merged) {
        ts__pair_map_free(m);
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "tokenizer: merge map of %zu entries", expect);
    }
    return TS_OK;
}

void ts__pair_map_free(ts__pair_map *m) {
    free(m->keys);
    free(m->rank);
    free(m->merged);
    memset(m, 0, sizeof *m);
}

static uint64_t pair_key(int32_t a, int32_t b) {
    return (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
}

bool ts__pair_map_put(ts__pair_map *m, int32_t a, int32_t b, int32_t rank, int32_t merged) {
    if (2 * (m->n + 1) > m->cap) {
        ts__pair_map g;
        if (ts__pair_map_init(&g, m->cap) != TS_OK) return false;
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->keys[i]) continue;
            const uint64_t k = m->keys[i] - 1;
            ts__pair_map_put(&g, (int32_t)(k >> 32), (int32_t)(uint32_t)k, m->rank[i], m->merged[i]);
        }
        ts__pair_map_free(m);
        *m = g;
    }
    const uint64_t k = pair_key(a, b);
    size_t i = mix64(k) & (m->cap - 1);
    for (; m->keys[i]; i = (i + 1) & (m->cap - 1))
        if (m->keys[i] == k) { /* a repeated merge takes its later rank, as in `tokenizers` */
            m->rank[i] = rank;
            m->merged[i] = merged;
            return true;
        }
    m->keys[i] = k;
    m->rank[i] = rank;
    m->merged[i] = merged;
    m->n++;
    return true;
}

bool ts__pair_map_get(const ts__pair_map *m, int32_t a, int32_t b, int32_t *rank,
                      int32_t *merged) {
    if (!m->cap) return false;
    const uint64_t k = pair_key(a, b);
    for (size_t i = mix64(k) & (m->cap - 1); m->keys[i]; i = (i + 1) & (m->cap - 1))
        if (m->keys[i] == k) {
            *rank = m->rank[i];
            *merged = m->merged[i];
            return true;
        }
    return false;
}
