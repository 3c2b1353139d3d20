/* Per-sequence caches (docs/model.md §5): the window ring and the compressed rows in the MODEL1
 * FP8 layout (584 bytes), the indexer's FP4 rows, the compressor states, and the random
 * prefill for benchmarks. */
#include "model_internal.h"
#include "hf_v3.h"

#include "tilestack/quant.h"

#include <math.h>
#include <string.h>

/* MODEL1 block of P tokens: P x 576 bytes (448 e4m3 + 64 bf16), then P x 8 scale bytes. */
ts_status ts__model_kv_store(uint8_t *cache, int64_t page, int64_t slot, const uint16_t *row) {
    uint8_t tmp[584];
    int64_t shb[4] = {1, 1, 1, 512}, shq[4] = {1, 1, 1, 584};
    ts_tensor kv = ts_tensor_make((void *)row, TS_BF16, 4, shb);
    ts_tensor q = ts_tensor_make(tmp, TS_U8, 4, shq);
    TS__RETURN_IF_ERROR(ts_mla_quantize_kv_cache(TS_MLA_KV_MODEL1, &kv, &q));
    uint8_t *blk = cache + (slot / page) * page * 584;
    const int64_t i = slot % page;
    memcpy(blk + i * 576, tmp, 576);
    memcpy(blk + page * 576 + i * 8, tmp + 576, 8);
    return TS_OK;
}

void ts__model_kv_copy(uint8_t *dst, int64_t dpage, int64_t dslot, const uint8_t *src,
                       int64_t spage, int64_t sslot) {
    const uint8_t *sb = src + (sslot / spage) * spage * 584;
    uint8_t *db = dst + (dslot / dpage) * dpage * 584;
    const int64_t si = sslot % spage, di = dslot % dpage;
    memcpy(db + di * 576, sb + si * 576, 576);
    memcpy(db + dpage * 576 + di * 8, sb + spage * 576 + si * 8, 8);
}

static int64_t state_floats(const ts__compressor *c) {
    return 2 * c->ratio * c->coff * c->d; /* [prev, cur][r][coff*d] */
}

/* The allocation of layer L's caches for B sequence slots and a pool of `pages` pages of
 * page_tokens tokens, from the config alone: what the allocation below callocs and what
 * ts_model_plan_dir reports (one source for both). */
typedef struct layer_sizes {
    size_t win_rows, comp_rows;         /* 584-byte MODEL1 rows */
    size_t irows;                       /* indexer FP4 rows (64 bytes + a 4-byte scale) */
    size_t state_floats, istate_floats; /* per sequence, each of kv and score */
} layer_sizes;

static layer_sizes sizes_of(const ts_model_config *c, int64_t L, int64_t B, int64_t page_tokens,
                            int64_t pages) {
    layer_sizes z;
    memset(&z, 0, sizeof z);
    const int64_t r = c->compress_ratios[L];
    z.win_rows = (size_t)(B * c->window_size);
    if (r > 0) {
        z.comp_rows = (size_t)(pages * (page_tokens / r));
        z.state_floats = (size_t)(2 * r * (r == 4 ? 2 : 1) * 512); /* [prev, cur][r][coff*d] */
    }
    if (r == 4) {
        z.irows = (size_t)(pages * (page_tokens / 4));
        z.istate_floats = 2 * 4 * 2 * 128;
    }
    return z;
}

static int64_t pages_per_seq(const ts_model_config *c, int64_t page_tokens) {
    return ts__ceil_div(c->max_seq_len, page_tokens);
}

static void pool_bytes(const ts_model_config *c, int64_t page_tokens, int64_t pages,
                       ts__cache_bytes *out) {
    for (int64_t L = 0; L < c->n_layers; L++) {
        const layer_sizes z = sizes_of(c, L, 0, page_tokens, pages);
        out->compressed += z.comp_rows * 584;
        out->indexer += z.irows * (64 + sizeof(int32_t));
    }
}

void ts__model_cache_bytes(const ts_model_config *c, int64_t B, ts__cache_bytes *out) {
    memset(out, 0, sizeof *out);
    out->pos = (size_t)B * sizeof(int64_t);
    if (c->attention != TS_MODEL_ATTN_V4) return; /* v32: model_attention_v32.c, not planned */
    const int64_t pt = ts__pages_default_tokens(c);
    pool_bytes(c, pt, B * pages_per_seq(c, pt), out);
    for (int64_t L = 0; L < c->n_layers; L++) {
        const layer_sizes z = sizes_of(c, L, B, pt, 0);
        out->window += z.win_rows * 584;
        /* kv and score per sequence */
        out->state += (size_t)B * 2 * (z.state_floats + z.istate_floats) * sizeof(float);
    }
}

static void *counted(ts_model *m, size_t n, size_t size) {
    m->cache_allocated += n * size;
    return calloc(n, size);
}

static void pool_free(ts_model *m) {
    for (int64_t L = 0; L < TS_MODEL_MAX_LAYERS; L++) {
        ts__layer_cache *lc = &m->caches[L];
        free(lc->comp);
        free(lc->icache);
        free(lc->icache_sf);
        lc->comp = lc->icache = NULL;
        lc->icache_sf = NULL;
    }
    if (m->pages.table) {
        ts__cache_bytes cb = {0};
        pool_bytes(&m->cfg, m->pages.page_tokens, m->pages.total, &cb);
        m->cache_allocated -= cb.compressed + cb.indexer;
    }
    ts__pages_free(&m->pages);
}

/* The compressed rows' and indexer rows' pools: `pages` pages of page_tokens tokens. */
static ts_status pool_alloc(ts_model *m, int64_t page_tokens, int64_t pages) {
    const ts_model_config *c = &m->cfg;
    /* the attention addresses rows with int32 indices */
    for (int64_t L = 0; L < c->n_layers; L++)
        if (c->compress_ratios[L] > 0 && pages > INT32_MAX / (page_tokens / c->compress_ratios[L]))
            return ts__fail(TS_ERR_OVERFLOW, "ts_model: %lld cache pages of %lld tokens hold more than "
                            "2^31 - 1 rows of layer %lld", (long long)pages, (long long)page_tokens,
                            (long long)L);
    pool_free(m);
    TS__RETURN_IF_ERROR(
        ts__pages_init(&m->pages, m->max_batch, page_tokens, pages_per_seq(c, page_tokens), pages));
    for (int64_t L = 0; L < c->n_layers; L++) {
        ts__layer_cache *lc = &m->caches[L];
        const int64_t r = m->layers[L].ratio;
        const layer_sizes z = sizes_of(c, L, 0, page_tokens, pages);
        bool ok = true;
        if (r > 0) ok = (lc->comp = (uint8_t *)counted(m, z.comp_rows, 584)) != NULL;
        if (r == 4) {
            lc->icache = (uint8_t *)counted(m, z.irows, 64);
            lc->icache_sf = (int32_t *)counted(m, z.irows, sizeof(int32_t));
            ok = ok && lc->icache && lc->icache_sf;
        }
        if (!ok) {
            pool_free(m);
            return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model: out of memory (%lld cache pages)",
                            (long long)pages);
        }
    }
    return TS_OK;
}

ts_status ts__model_cache_alloc(ts_model *m) {
    const ts_model_config *c = &m->cfg;
    const int64_t B = m->max_batch;
    m->cache_allocated = 0;
    m->pos = (int64_t *)counted(m, (size_t)B, sizeof *m->pos);
    if (!m->pos) return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_create: out of memory (caches)");
    if (c->attention == TS_MODEL_ATTN_V32) return ts__model_v32_cache_alloc(m);
    const int64_t pt = ts__pages_default_tokens(c);
    TS__RETURN_IF_ERROR(pool_alloc(m, pt, B * pages_per_seq(c, pt)));
    for (int64_t L = 0; L < c->n_layers; L++) {
        ts__layer_cache *lc = &m->caches[L];
        const ts__layer *ly = &m->layers[L];
        const int64_t r = ly->ratio;
        const layer_sizes z = sizes_of(c, L, B, pt, 0);
        lc->win = (uint8_t *)counted(m, z.win_rows, 584);
        bool ok = lc->win != NULL;
        if (r > 0) {
            lc->cs = (ts__comp_state *)calloc((size_t)B, sizeof *lc->cs);
            ok = ok && lc->cs;
            for (int64_t b = 0; ok && b < B; b++) {
                lc->cs[b].kv = (float *)counted(m, z.state_floats, sizeof(float));
                lc->cs[b].score = (float *)counted(m, z.state_floats, sizeof(float));
                ok = lc->cs[b].kv && lc->cs[b].score;
            }
        }
        if (r == 4) {
            lc->ics = (ts__comp_state *)calloc((size_t)B, sizeof *lc->ics);
            ok = ok && lc->ics;
            for (int64_t b = 0; ok && b < B; b++) {
                lc->ics[b].kv = (float *)counted(m, z.istate_floats, sizeof(float));
                lc->ics[b].score = (float *)counted(m, z.istate_floats, sizeof(float));
                ok = lc->ics[b].kv && lc->ics[b].score;
            }
        }
        if (!ok) return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_create: out of memory (caches)");
        /* the binding's compressors must be the ones sizes_of assumes */
        if ((r > 0 && state_floats(&ly->comp) != (int64_t)z.state_floats) ||
            (r == 4 && state_floats(&ly->icomp) != (int64_t)z.istate_floats))
            return ts__fail(TS_ERR_INTERNAL, "ts_model_create: layer %lld's compressor state size",
                            (long long)L);
    }
    for (int64_t b = 0; b < B; b++) ts__model_cache_reset(m, b);
    return TS_OK;
}

void ts__model_cache_free(ts_model *m) {
    ts__model_v32_cache_free(m);
    pool_free(m);
    for (int64_t L = 0; L < TS_MODEL_MAX_LAYERS; L++) {
        ts__layer_cache *lc = &m->caches[L];
        free(lc->win);
        for (int k = 0; k < 2; k++) {
            ts__comp_state *cs = k ? lc->ics : lc->cs;
            if (!cs) continue;
            for (int64_t b = 0; b < m->max_batch; b++) {
                free(cs[b].kv);
                free(cs[b].score);
            }
            free(cs);
        }
        memset(lc, 0, sizeof *lc);
    }
    free(m->pos);
    m->pos = NULL;
}

static void state_reset(const ts__compressor *c, ts__comp_state *s) {
    const int64_t nf = state_floats(c);
    for (int64_t i = 0; i < nf; i++) {
        s->kv[i] = 0.0f;
        /* the previous block's scores start at -inf: the first row pools the current block */
        s->score[i] = -INFINITY;
    }
}

void ts__model_cache_reset(ts_model *m, int64_t seq) {
    m->pos[seq] = 0;
    if (m->pages.table) ts__pages_release(&m->pages, seq);
    for (int64_t L = 0; L < m->cfg.n_layers; L++) {
        const ts__layer *ly = &m->layers[L];
        if (ly->ratio > 0) state_reset(&ly->comp, &m->caches[L].cs[seq]);
        if (ly->ratio == 4) state_reset(&ly->icomp, &m->caches[L].ics[seq]);
    }
}

/* ---- the public page calls */

ts_status ts_model_get_kv_pages(const ts_model *m, ts_model_kv_pages *out) {
    if (!m) return ts__fail(TS_ERR_NULL_POINTER, "ts_model_get_kv_pages: m is NULL");
    if (!out) return ts__fail(TS_ERR_NULL_POINTER, "ts_model_get_kv_pages: out is NULL");
    memset(out, 0, sizeof *out);
    const ts_model_config *c = &m->cfg;
    if (m->pages.table) {
        const ts__pages *p = &m->pages;
        ts__cache_bytes cb = {0};
        pool_bytes(c, p->page_tokens, 1, &cb);
        out->paged = true;
        out->page_tokens = p->page_tokens;
        out->pages_total = p->total;
        out->pages_free = p->nfree;
        out->pages_per_sequence = p->per_seq;
        out->page_bytes = cb.compressed + cb.indexer;
        return TS_OK;
    }
    /* one slot per sequence: its pages counted from the position */
    out->page_tokens = 64;
    out->pages_per_sequence = ts__ceil_div(c->max_seq_len, 64);
    out->pages_total = m->max_batch * out->pages_per_sequence;
    out->pages_free = out->pages_total;
    for (int64_t s = 0; s < m->max_batch; s++) out->pages_free -= ts__ceil_div(m->pos[s], 64);
    out->page_bytes = m->max_batch ? m->cache_allocated / (size_t)out->pages_total : 0;
    return TS_OK;
}

ts_status ts_model_set_kv_pages(ts_model *m, int64_t page_tokens, int64_t pages) {
    static const char fn[] = "ts_model_set_kv_pages";
    if (!m) return ts__fail(TS_ERR_NULL_POINTER, "%s: m is NULL", fn);
    if (!m->pages.table)
        return ts__fail(TS_ERR_UNSUPPORTED, "%s: this model's caches are not paged (V3 / V3.2 "
                        "attention: one max_seq_len slot per sequence)", fn);
    const ts_model_config *c = &m->cfg;
    if (page_tokens == 0) page_tokens = ts__pages_default_tokens(c);
    if (page_tokens < 1 || page_tokens > c->max_seq_len)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: page_tokens = %lld is outside [1, "
                        "max_seq_len = %lld]", fn, (long long)page_tokens,
                        (long long)c->max_seq_len);
    for (int64_t L = 0; L < c->n_layers; L++)
        if (c->compress_ratios[L] > 0 && page_tokens % c->compress_ratios[L] != 0)
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: page_tokens = %lld is not a multiple "
                            "of compress_ratios[%lld] = %d", fn, (long long)page_tokens,
                            (long long)L, c->compress_ratios[L]);
    if (pages < 1 || pages > INT32_MAX)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: pages = %lld is outside [1, 2^31 - 1]", fn,
                        (long long)pages);
    for (int64_t s = 0; s < m->max_batch; s++)
        if (m->pos[s] != 0)
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: sequence %lld is not empty (position "
                            "%lld): reset every sequence first", fn, (long long)s,
                            (long long)m->pos[s]);
    const int64_t old_tokens = m->pages.page_tokens, old_pages = m->pages.total;
    const ts_status st = pool_alloc(m, page_tokens, pages);
    /* the old pool back when the new one cannot be had (it fit before) */
    if (st != TS_OK && pool_alloc(m, old_tokens, old_pages) != TS_OK)
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: out of memory, and the previous pool could "
                        "not be restored: the model has no cache", fn);
    return st;
}

/* ---- random prefill (benchmarks) */

static ts_status random_row(uint64_t *s, uint8_t *cache, int64_t page, int64_t slot) {
    uint16_t row[512];
    for (int i = 0; i < 512; i++) row[i] = ts__f32_to_bf16_inl(ts__model_rand_unit(s));
    return ts__model_kv_store(cache, page, slot, row);
}

ts_status ts_model_prefill_random(ts_model *m, int64_t seq, int64_t context_len, uint64_t seed) {
    static const char fn[] = "ts_model_prefill_random";
    if (!m) return ts__fail(TS_ERR_NULL_POINTER, "%s: m is NULL", fn);
    if (seq < 0 || seq >= m->max_batch)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: seq = %lld is outside [0, max_batch = %lld)",
                        fn, (long long)seq, (long long)m->max_batch);
    const ts_model_config *c = &m->cfg;
    if (context_len < 0 || context_len >= c->max_seq_len)
        return ts__fail(TS_ERR_INVALID_ARGUMENT,
                        "%s: context_len = %lld is outside [0, max_seq_len = %lld) (the cache "
                        "must keep room for the next token)",
                        fn, (long long)context_len, (long long)c->max_seq_len);
    uint64_t s = seed ^ ((uint64_t)seq * 0xD1B54A32D192ED03ull);
    if (m->v3) return ts__v3_prefill_random(m, seq, context_len, &s);
    ts__model_cache_reset(m, seq);
    const int64_t W = c->window_size, Lc = context_len;
    if (m->pages.table) {
        TS__RETURN_IF_ERROR(ts__pages_enough(&m->pages, fn, ts__pages_missing(&m->pages, seq, Lc)));
        ts__pages_take(&m->pages, seq, Lc);
    }
    if (c->attention == TS_MODEL_ATTN_V32) {
        TS__RETURN_IF_ERROR(ts__model_v32_prefill_random(m, seq, Lc, &s));
        m->pos[seq] = context_len;
        return TS_OK;
    }
    for (int64_t L = 0; L < c->n_layers; L++) {
        ts__layer_cache *lc = &m->caches[L];
        const ts__layer *ly = &m->layers[L];
        for (int64_t p = Lc > W ? Lc - W : 0; p < Lc; p++)
            TS__RETURN_IF_ERROR(random_row(&s, lc->win, W, seq * W + p % W));
        const int64_t r = ly->ratio;
        if (r == 0) continue;
        const int64_t rpp = m->pages.page_tokens / r;
        for (int64_t t = 0; t < Lc / r; t++)
            TS__RETURN_IF_ERROR(
                random_row(&s, lc->comp, rpp, ts__pages_row(&m->pages, seq, t, rpp)));
        for (int k = 0; k < (r == 4 ? 2 : 1); k++) {
            const ts__compressor *cp = k ? &ly->icomp : &ly->comp;
            ts__comp_state *st = k ? &lc->ics[seq] : &lc->cs[seq];
            const int64_t w = cp->coff * cp->d, blk = r * w;
            /* a previous block exists once a row was made; the current one holds Lc mod r slots */
            if (Lc >= r && cp->coff == 2)
                for (int64_t i = 0; i < blk; i++) {
                    st->kv[i] = ts__model_rand_unit(&s);
                    st->score[i] = ts__model_rand_unit(&s);
                }
            for (int64_t i = 0; i < (Lc % r) * w; i++) {
                st->kv[blk + i] = ts__model_rand_unit(&s);
                st->score[blk + i] = ts__model_rand_unit(&s);
            }
        }
        if (r == 4) {
            const int64_t rpp = m->pages.page_tokens / 4;
            float tmp[128];
            for (int64_t t = 0; t < Lc / 4; t++) {
                for (int i = 0; i < 128; i++) tmp[i] = ts__model_rand_unit(&s);
                const int64_t row = ts__pages_row(&m->pages, seq, t, rpp);
                ts_tensor x = ts_tensor_2d(tmp, TS_F32, 1, 128);
                ts_tensor q = ts_tensor_2d(lc->icache + row * 64, TS_E2M1X2, 1, 64);
                ts_tensor sf = ts_tensor_2d(lc->icache_sf + row, TS_I32, 1, 1);
                TS__RETURN_IF_ERROR(ts_per_token_cast_to_fp4(&x, true, 32, true,
                                                              TS_FP4_ROUND_DEEPGEMM, &q, &sf));
            }
        }
    }
    m->pos[seq] = context_len;
    return TS_OK;
}
