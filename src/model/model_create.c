/* Model lifetime: create from a config (generated weights), free, sequence bookkeeping. */
#include "model_internal.h"
#include "safetensors.h"
#include "hf_v3.h"

#include <string.h>

ts_status ts__model_alloc(const ts_model_config *cfg, int64_t max_batch, ts_model **out) {
    ts_model *m = (ts_model *)calloc(1, sizeof *m);
    if (!m) return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_create: out of memory");
    m->cfg = *cfg;
    m->max_batch = max_batch;
    *out = m;
    return TS_OK;
}

static ts_status check_args(const char *fn, const ts_model_config *cfg, int64_t max_batch,
                            ts_model **out) {
    if (!cfg) return ts__fail(TS_ERR_NULL_POINTER, "%s: cfg is NULL", fn);
    if (!out) return ts__fail(TS_ERR_NULL_POINTER, "%s: out is NULL", fn);
    if (max_batch < 1 || max_batch > (1 << 20))
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: max_batch = %lld is outside [1, 2^20]", fn,
                        (long long)max_batch);
    TS__RETURN_IF_ERROR(ts_model_config_validate(cfg, 1));
    return TS_OK;
}

/* Caches, RoPE tables and the workspace once the weights are bound. */
static ts_status finish(ts_model *m) {
    TS__RETURN_IF_ERROR(ts__model_bind_weights(m));
    TS__RETURN_IF_ERROR(ts__model_rope_tables(m));
    TS__RETURN_IF_ERROR(ts__model_cache_alloc(m));
    TS__RETURN_IF_ERROR(ts__model_ws_alloc(m));
    return TS_OK;
}

/* model_file.c and model_ep.c use the same finish */
ts_status ts__model_create_from_records(ts_model *m) { return finish(m); }

ts_status ts_model_create(const ts_model_config *cfg, int64_t max_batch, ts_model **out) {
    TS__RETURN_IF_ERROR(check_args("ts_model_create", cfg, max_batch, out));
    ts_model *m = NULL;
    TS__RETURN_IF_ERROR(ts__model_alloc(cfg, max_batch, &m));
    ts__wspec *specs = NULL;
    int64_t ns = 0;
    ts_status st = ts__model_weight_specs(cfg, &specs, &ns);
    if (st == TS_OK) {
        m->recs = (ts__mtensor *)calloc((size_t)(2 * ns), sizeof *m->recs);
        if (!m->recs) st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_create: out of memory");
    }
    /* total bytes first, for the progress report */
    double total = 0, done = 0;
    for (int64_t i = 0; st == TS_OK && ts__progress_on() && i < ns; i++) {
        ts__mtensor r2[2];
        const int nr = ts__model_spec_records(&specs[i], r2);
        for (int k = 0; k < nr; k++) total += (double)r2[k].nbytes;
    }
    ts__progress_state prog = {0};
    for (int64_t i = 0; st == TS_OK && i < ns; i++) {
        ts__mtensor *rec = &m->recs[m->nrecs];
        int nr = ts__model_spec_records(&specs[i], rec);
        for (int k = 0; k < nr; k++) {
            rec[k].data = ts__aligned_alloc(rec[k].nbytes ? rec[k].nbytes : 1);
            if (!rec[k].data) st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_create: out of memory "
                                            "(%s, %zu bytes)", rec[k].name, rec[k].nbytes);
        }
        m->nrecs += nr; /* counted before generation so that a failure frees them */
        if (st == TS_OK) st = ts__model_generate_weight(cfg, &specs[i], rec);
        for (int k = 0; k < nr; k++) done += (double)rec[k].nbytes;
        ts__progress(&prog, "generating weights", done, total, "B");
    }
    free(specs);
    if (st == TS_OK) st = finish(m);
    if (st != TS_OK) {
        ts_model_free(m);
        return st;
    }
    *out = m;
    return TS_OK;
}

void ts_model_free(ts_model *m) {
    if (!m) return;
    if (m->v3) {
        if (m->ep_free) m->ep_free(m); /* collective: the EP buffer */
        ts__v3_free(m);
        return;
    }
    if (m->ep_free) m->ep_free(m); /* collective: the EP buffer */
    ts__model_ws_free(m->ws);
    ts__model_cache_free(m);
    ts__model_free_weights(m);
    ts__hf_close(m->ckpt); /* after the records that view its mappings */
    for (int i = 0; i < 2; i++) {
        free(m->rope_cos[i]);
        free(m->rope_sin[i]);
    }
    free(m);
}

const ts_model_config *ts_model_get_config(const ts_model *m) { return m ? &m->cfg : NULL; }

static ts_status check_seq(const char *fn, const ts_model *m, int64_t seq) {
    if (!m) return ts__fail(TS_ERR_NULL_POINTER, "%s: m is NULL", fn);
    if (seq < 0 || seq >= m->max_batch)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: seq = %lld is outside [0, max_batch = %lld)",
                        fn, (long long)seq, (long long)m->max_batch);
    return TS_OK;
}

ts_status ts_model_reset_sequence(ts_model *m, int64_t seq) {
    TS__RETURN_IF_ERROR(check_seq("ts_model_reset_sequence", m, seq));
    if (m->v3) ts__v3_reset(m, seq);
    else ts__model_cache_reset(m, seq);
    return TS_OK;
}

int64_t ts_model_sequence_position(const ts_model *m, int64_t seq) {
    if (!m || seq < 0 || seq >= m->max_batch) return -1;
    return m->pos[seq];
}
