/* flash_mla.get_mla_metadata: a handle filled on first use with the call's config, the
 * per-request length values it was planned for, and the dense split plan and its workspace
 * (allocated once, so later decode calls with the same handle allocate nothing). */
#include "flash_mla_internal.h"
#include "../core/internal.h"

#include <string.h>

ts_status ts_get_mla_metadata(ts_mla_metadata **out) {
    if (!out) return ts__fail(TS_ERR_NULL_POINTER, "ts_get_mla_metadata: out is NULL");
    ts_mla_metadata *m = (ts_mla_metadata *)calloc(1, sizeof *m);
    if (!m) return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_get_mla_metadata: out of memory");
    *out = m;
    return TS_OK;
}

void ts_mla_metadata_free(ts_mla_metadata *meta) {
    if (!meta) return;
    free(meta->vals);
    free(meta->chunk_off);
    ts__aligned_free(meta->part);
    free(meta);
}

ts_status ts__mla_meta_bind(ts_mla_metadata *meta, const ts__mla_config *cfg,
                            const int32_t *vals, int64_t nvals, const int64_t *lens) {
    static const char fn[] = "ts_flash_mla_with_kvcache";
    if (meta->initialized) {
        if (memcmp(&meta->cfg, cfg, sizeof *cfg) != 0)
            return ts__fail(TS_ERR_INVALID_ARGUMENT,
                            "%s: tile_scheduler_metadata was filled for another config (b, s_q, "
                            "h_q, h_kv, d_qk, page sizes, causal, sparse, topk)",
                            fn);
        if (nvals != meta->nvals ||
            (nvals && memcmp(vals, meta->vals, (size_t)nvals * sizeof *vals) != 0))
            return ts__fail(TS_ERR_INVALID_ARGUMENT,
                            "%s: tile_scheduler_metadata was filled for other cache_seqlens / "
                            "topk_length values",
                            fn);
        return TS_OK;
    }
    ts_mla_metadata t;
    memset(&t, 0, sizeof t);
    t.cfg = *cfg;
    t.nvals = nvals;
    t.vals = (int32_t *)malloc((size_t)(nvals > 0 ? nvals : 1) * sizeof *vals);
    t.chunk_off = (int64_t *)malloc((size_t)(cfg->b + 1) * sizeof(int64_t));
    if (!t.vals || !t.chunk_off) goto oom;
    if (nvals) memcpy(t.vals, vals, (size_t)nvals * sizeof *vals);
    const int64_t rows = cfg->s_q * (cfg->h_q / (cfg->h_kv > 0 ? cfg->h_kv : 1));
    t.chunk = cfg->sparse                     ? TS__MLA_SPARSE_CHUNK
              : rows < TS__MLA_SPLIT_ROWS ? TS__MLA_SPLIT_TOKENS
                                          : INT64_MAX;
    t.chunk_off[0] = 0;
    int64_t split_chunks = 0;
    for (int64_t i = 0; i < cfg->b; i++) {
        int64_t n = 1;
        if (lens[i] > 0 && t.chunk != INT64_MAX) n = ts__ceil_div(lens[i], t.chunk);
        t.chunk_off[i + 1] = t.chunk_off[i] + n;
        if (n > 1) split_chunks += n;
    }
    if (split_chunks) {
        /* partials are indexed by chunk_off; requests that do not split leave theirs unused.
         * Groups per request: s_q (sparse) or h_kv (dense). */
        const int64_t g2n = cfg->sparse ? cfg->s_q : cfg->h_kv;
        const int64_t grows = cfg->sparse ? cfg->h_q : rows;
        t.part_floats = t.chunk_off[cfg->b] * g2n * grows * (TS__MLA_DV + 2);
        t.part = (float *)ts__aligned_alloc((size_t)t.part_floats * sizeof(float));
        if (!t.part) goto oom;
    }
    t.initialized = 1;
    *meta = t;
    return TS_OK;
oom:
    free(t.vals);
    free(t.chunk_off);
    return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: out of memory for the split plan", fn);
}
