/* The expert-parallel step (model_ep.h): the ranks agree on the step's arguments, then the
 * decode runs as on one process except that each MoE layer's routed experts go through one
 * collective Mega MoE call (fused, or the unfused EP pipeline; V3: model_ep_v3.c's
 * low-latency dispatch and combine). A rank with no sequences still
 * takes part in every layer's call with zero tokens. */
#include "model_ep_internal.h"
#include "hf_v3.h"

#include "tilestack/quant.h"

#include <math.h>
#include <string.h>

static float clamp_of(const ts_model *m) {
    return m->cfg.swiglu_limit > 0 ? (float)m->cfg.swiglu_limit : INFINITY;
}

/* Layer L's collective Mega MoE call: fused, or the unfused pipeline (opts->unfused, or ranks
 * on several nodes); the same bits either way. */
static ts_status mega_call(ts_model *m, int64_t L, ts_tensor *y, ts_tensor *stats) {
    const struct ts__model_ep *ep = m->ep;
    if (ep->unfused) return ts_mega_moe_unfused(y, ep->w[L], ep->buf, stats, clamp_of(m), false);
    return ts_fp8_fp4_mega_moe(y, ep->w[L], ep->buf, stats, NULL, NULL, clamp_of(m), false);
}

ts_status ts__model_ep_routed(ts_model *m, int64_t L, int64_t n, const uint16_t *a,
                              const uint16_t **routed) {
    struct ts__model_ep *ep = m->ep;
    const int64_t H = ep->H, K = ep->K;
    const double t0 = ts__model_now();
    if (n > 0) {
        /* the buffer's input rows: FP8 with packed ue8m0 per 32 (the same values as the
         * single-process cast's f32 scales), the routing of ws->sel / ws->selw */
        ts_tensor x = ts_tensor_2d((void *)a, TS_BF16, n, H);
        ts_tensor q = ts_tensor_2d(ep->views.x.data, TS_E4M3, n, H);
        ts_tensor s = ts_tensor_2d(ep->views.x_sf.data, TS_I32, n, H / 128);
        TS__RETURN_IF_ERROR(ts_per_token_cast_to_fp8(&x, true, 32, true, &q, &s));
        int64_t *idx = (int64_t *)ep->views.topk_idx.data;
        float *tw = (float *)ep->views.topk_weights.data;
        for (int64_t i = 0; i < n * K; i++) {
            idx[i] = m->ws->sel[i];
            tw[i] = m->ws->selw[i];
        }
    }
    memset(ep->recv, 0, (size_t)ep->El * sizeof(int32_t));
    ts_tensor y = ts_tensor_2d(ep->routed, TS_BF16, n, H);
    ts_tensor stats = ts_tensor_1d(ep->recv, TS_I32, ep->El);
    TS__RETURN_IF_ERROR(mega_call(m, L, &y, &stats));
    int64_t used = 0, rows = 0;
    for (int64_t j = 0; j < ep->El; j++) {
        ep->cnt[L * ep->El + j] += ep->recv[j];
        used += ep->recv[j] > 0;
        rows += ep->recv[j];
    }
    /* this rank's work: the weights of its experts that received tokens (FP4 + an f32 scale per
     * 32, as the single-process row counts them), the rows they computed */
    if (m->prof.on)
        ts__prof_add(&m->prof, TS__P_EXPERTS, t0, (double)used * 3 * ep->I * H * (0.5 + 4.0 / 32),
                     2.0 * 3 * (double)rows * (double)ep->I * (double)H);
    /* DeepEP test_low_latency.py's accounting: every slot is valid (no masked experts) */
    ep->dispatch_bytes += (double)(n * K) * (double)(H + H / 128 * 4 + 16);
    ep->combine_bytes += (double)(n * K) * (double)(2 * H);
    ep->moe_sec += ts__model_now() - t0;
    *routed = ep->routed;
    return TS_OK;
}

/* A pass with no rows of this rank: its part in every MoE layer's collective call (V4: every
 * layer; V3: those after the dense ones). */
static ts_status idle_pass(ts_model *m) {
    for (int64_t L = m->v3 ? m->v3->c.first_dense : 0; L < m->cfg.n_layers; L++) {
        const uint16_t *r = NULL;
        TS__RETURN_IF_ERROR(m->ep_routed(m, L, 0, NULL, &r));
    }
    return TS_OK;
}

/* The step's agreement on every rank's verdict, before any cache changes. V4: a zero-token
 * Mega MoE call in which a rank with bad arguments publishes a rejection (a y of more rows
 * than the buffer holds); V3: the verdicts exchanged point to point. Either way a missing
 * rank is named (TS_ERR_TIMEOUT), a failing one gets its own error and the others
 * TS_ERR_PEER naming it. */
static ts_status step_vote(ts_model *m, ts_status mine) {
    struct ts__model_ep *ep = m->ep;
    if (m->v3) {
        ts__ep_hello h;
        memset(&h, 0, sizeof h);
        ts__model_ep_set_verdict(&h, mine);
        return ts__model_ep_agree(ep->comm, &h, NULL, TS__EP_TAG_STEP, ep->timeout_s,
                                  "ts_model_decode", false);
    }
    char msg[512] = "";
    if (mine != TS_OK) snprintf(msg, sizeof msg, "%s", ts_last_error());
    ts_tensor y = ts_tensor_2d(ep->routed, TS_BF16, mine == TS_OK ? 0 : ep->T + 1, ep->H);
    const ts_status vote = mega_call(m, 0, &y, NULL);
    if (mine != TS_OK) return ts__fail(mine, "%s", msg);
    return vote;
}

ts_status ts__model_ep_decode(ts_model *m, int64_t n, const int64_t *seqs,
                              const int32_t *tokens, float *logits) {
    struct ts__model_ep *ep = m->ep;
    TS__RETURN_IF_ERROR(step_vote(m, ts__model_check_step(m, n, seqs, tokens)));
    ts_status st = TS_OK;
    if (n == 0) st = idle_pass(m);
    else if (m->v3) st = ts__v3_decode(m, n, seqs, tokens, logits);
    else st = ts__model_decode_local(m, n, seqs, tokens, logits);
    if (st == TS_OK) ep->steps++;
    return st;
}

/* Collective: every rank calls it, a rank without a prompt with n = 0. The ranks first agree
 * (every verdict, the largest chunk count), then run that many chunk passes: a rank's chunk
 * as ts_model_prefill runs it, or, once its tokens are done, a zero-row Mega MoE call per
 * layer (as a decode step with no sequence). Each chunk row goes through the same kernels as
 * on one process, so the logits are the same bits. */
ts_status ts__model_ep_prefill(ts_model *m, int64_t seq, int64_t n, const int32_t *tokens,
                               float *logits, bool all, const char *fn) {
    struct ts__model_ep *ep = m->ep;
    const int64_t C = m->v3 ? ts__v3_chunk_rows(m) : ts__min64(ts__model_prefill_chunk_rows(m), ep->rows_cap);
    ts_status mine = TS_OK;
    if (n < 0)
        mine = ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: n_tokens = %lld must be >= 0 on an "
                        "expert-parallel model (0: take part without a prompt)", fn, (long long)n);
    else if (n > 0)
        mine = ts__model_prefill_check(fn, m, seq, n, tokens, logits, all);
    if (mine == TS_OK && !m->v3) mine = ts__model_ws_reserve(m, C);
    ts__ep_hello me;
    memset(&me, 0, sizeof me);
    ts__model_ep_set_verdict(&me, mine);
    me.n = mine == TS_OK ? (n + C - 1) / C : 0;
    int64_t chunks = 0;
    ts_status st = ts__model_ep_agree(ep->comm, &me, &chunks, TS__EP_TAG_PREFILL, ep->timeout_s,
                                      fn, false);
    for (int64_t c = 0; st == TS_OK && c < chunks; c++) {
        const int64_t c0 = c * C;
        if (c0 < n) {
            const int64_t k = ts__min64(C, n - c0);
            st = m->v3 ? ts__v3_prefill_chunk(m, seq, c0, k, n, tokens, logits, all)
                       : ts__model_prefill_chunk(m, seq, c0, k, n, tokens, logits, all);
            continue;
        }
        st = idle_pass(m);
    }
    return st;
}
