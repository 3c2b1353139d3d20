/* Prompt prefill (docs/model.md "Prefill"): sequence `seq` consumes n tokens in chunks of
 * prefill_rows rows, each chunk one pass through the layers (ts__model_forward, shared with the
 * decode step) as rows at consecutive positions, so every GEMM and grouped MoE GEMM sees M =
 * chunk rows and each weight is read once per chunk instead of once per token. The result is
 * bit for bit that of n decode steps: every kernel is batch-invariant, the per-row code is the
 * decode step's, the sequential cache updates (compressor states) run in token order, and each
 * row attends to exactly the rows its decode step would see. */
#include "model_internal.h"
#include "hf_v3.h"

int64_t ts__model_prefill_chunk_rows(const ts_model *m) {
    return m->prefill_rows > 0 ? m->prefill_rows : ts__max64(m->max_batch, TS__PREFILL_ROWS);
}

ts_status ts__model_prefill_check(const char *fn, const ts_model *m, int64_t seq, int64_t n,
                                  const int32_t *tokens, const float *logits, bool all) {
    if (seq < 0 || seq >= m->max_batch)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: seq = %lld is outside [0, max_batch = %lld)",
                        fn, (long long)seq, (long long)m->max_batch);
    if (n <= 0)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: n_tokens = %lld must be >= 1", fn,
                        (long long)n);
    if (!tokens) return ts__fail(TS_ERR_NULL_POINTER, "%s: tokens is NULL", fn);
    if (all && !logits) return ts__fail(TS_ERR_NULL_POINTER, "%s: logits is NULL", fn);
    const int64_t p = m->pos[seq], cap = m->cfg.max_seq_len;
    if (n > cap - p)
        return ts__fail(TS_ERR_INVALID_ARGUMENT,
                        "%s: sequence %lld is at position %lld: %lld more tokens exceed "
                        "max_seq_len = %lld (nothing advanced)", fn, (long long)seq,
                        (long long)p, (long long)n, (long long)cap);
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->cfg.vocab_size)
            return ts__fail(TS_ERR_INVALID_ARGUMENT,
                            "%s: tokens[%lld] = %d is outside [0, vocab_size = %lld)", fn,
                            (long long)i, tokens[i], (long long)m->cfg.vocab_size);
    TS__RETURN_IF_ERROR(ts__model_check_pool(m, fn));
    if (!m->pages.table) return TS_OK;
    return ts__pages_enough(&m->pages, fn, ts__pages_missing(&m->pages, seq, p + n));
}

ts_status ts__model_prefill_chunk(ts_model *m, int64_t seq, int64_t c0, int64_t k, int64_t n,
                                  const int32_t *tokens, float *logits, bool all) {
    ts__ws *ws = m->ws;
    const int64_t p0 = m->pos[seq], V = m->cfg.vocab_size;
    for (int64_t b = 0; b < k; b++) {
        ws->rseq[b] = seq;
        ws->rpos[b] = p0 + b;
    }
    /* the pages ts__model_prefill_check found free */
    if (m->pages.table) ts__pages_take(&m->pages, seq, p0 + k);
    const ts__rows r = {k, ws->rseq, ws->rpos, tokens + c0, true};
    TS__RETURN_IF_ERROR(ts__model_forward(m, &r));
    m->pos[seq] += k;
    if (all) return ts__model_head(m, 0, k, logits + c0 * V);
    if (logits && c0 + k == n) return ts__model_head(m, k - 1, 1, logits);
    return TS_OK;
}

/* all: logits [n][vocab] of every token; else the last token's [vocab] (or none). */
static ts_status prefill(ts_model *m, int64_t seq, int64_t n, const int32_t *tokens,
                         float *logits, bool all, const char *fn) {
    if (!m) return ts__fail(TS_ERR_NULL_POINTER, "%s: m is NULL", fn);
    /* an EP model's passes are collective (model_ep_moe.c) */
    if (m->ep_prefill) return m->ep_prefill(m, seq, n, tokens, logits, all, fn);
    TS__RETURN_IF_ERROR(ts__model_prefill_check(fn, m, seq, n, tokens, logits, all));
    if (m->v3) return ts__v3_prefill(m, seq, n, tokens, logits, all);
    const int64_t C = ts__model_prefill_chunk_rows(m);
    /* once per model: the workspace grows from max_batch rows to the chunk */
    TS__RETURN_IF_ERROR(ts__model_ws_reserve(m, C));
    for (int64_t c0 = 0; c0 < n; c0 += C)
        TS__RETURN_IF_ERROR(ts__model_prefill_chunk(m, seq, c0, ts__min64(C, n - c0), n, tokens,
                                                    logits, all));
    return TS_OK;
}

ts_status ts_model_prefill(ts_model *m, int64_t seq, int64_t n_tokens, const int32_t *tokens,
                           float *last_logits) {
    return prefill(m, seq, n_tokens, tokens, last_logits, false, "ts_model_prefill");
}

ts_status ts_model_prefill_all_logits(ts_model *m, int64_t seq, int64_t n_tokens,
                                      const int32_t *tokens, float *logits) {
    return prefill(m, seq, n_tokens, tokens, logits, true, "ts_model_prefill_all_logits");
}
