/* DeepSeek-V3 / V3.2 under expert parallelism (ts_model_load_dir_ep of a V3 directory,
 * model_ep.c): every rank holds the shared part and its routed experts [r E / R, (r + 1) E / R)
 * and decodes its own sequences; each MoE layer's routed experts go through the EP buffer's
 * low-latency dispatch (the bf16 rows the experts read on one process) and combine. The
 * combine's weighted top-k sum (acc = fmaf(y_k, w_k, acc), rounded to bf16) is what the single
 * process computes (model_v3.c, routed_local), and each expert's rows go through the same
 * batch-invariant GEMMs, so the logits are the same bits at every rank count. (V4's EP model
 * runs Mega MoE instead: its FP4 experts are not V3's bf16 ones.) */
#include "model_ep_internal.h"
#include "hf_v3.h"

#include "tilestack/ep.h"

#include <string.h>

ts_status ts__v3_ep_buffer(ts_model *m, const ts_model_ep_options *opts) {
    struct ts__model_ep *ep = m->ep;
    int64_t bytes = 0;
    TS__RETURN_IF_ERROR(ts_ep_get_low_latency_rdma_size_hint(ep->T, ep->H, ep->R, ep->E, &bytes));
    ts_ep_buffer_options bo = ts_ep_default_buffer_options();
    bo.timeout_s = ep->timeout_s;
    bo.ranks_per_node = opts ? opts->ranks_per_node : 0;
    /* collective: a rank that fails here makes the others fail too (TS_ERR_PEER) */
    TS__RETURN_IF_ERROR(ts_ep_buffer_create(ep->comm, 0, bytes, true, &bo, &ep->ll));
    const size_t rx = (size_t)(ep->El * ep->R * ep->T * ep->H) * 2;
    if (!(ep->recv_x = (uint16_t *)ts__aligned_alloc(rx ? rx : 1)))
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_load_dir_ep: %zu bytes of expert rows", rx);
    return TS_OK;
}

ts_status ts__v3_ep_routed(ts_model *m, int64_t L, int64_t n, const uint16_t *a,
                           const uint16_t **routed) {
    struct ts__model_ep *ep = m->ep;
    const int64_t H = ep->H, K = ep->K, El = ep->El, S = ep->R * ep->T;
    const double t0 = ts__model_now();
    const int32_t *sel = NULL;
    const float *selw = NULL;
    ts__v3_routing(m, &sel, &selw);
    ts_tensor x = ts_tensor_2d((void *)a, TS_BF16, n, H);
    ts_tensor idx = ts_tensor_2d((void *)sel, TS_I32, n, K);
    ts_tensor wt = ts_tensor_2d((void *)selw, TS_F32, n, K);
    ts_tensor rx = ts_tensor_3d(ep->recv_x, TS_BF16, El, S, H);
    ts_tensor rc = ts_tensor_1d(ep->recv, TS_I32, El);
    ts_ep_ll_dispatch_args da;
    memset(&da, 0, sizeof da);
    da.x = &x;
    da.topk_idx = &idx;
    da.num_max_dispatch_tokens_per_rank = ep->T;
    da.num_experts = ep->E;
    const ts_ep_ll_dispatch_out out = {&rx, NULL, &rc};
    ts_ep_ll_handle *h = NULL;
    ts_status st = ts_ep_low_latency_dispatch(ep->ll, &da, &out, &h, NULL);
    /* each local expert's rows through its SwiGLU, outputs in place (the combine's input) */
    for (int64_t j = 0; st == TS_OK && j < El; j++) {
        const int64_t r = ep->recv[j];
        ep->cnt[L * El + j] += r;
        uint16_t *ej = ep->recv_x + j * S * H;
        if (r) st = ts__v3_run_expert(m, L, ep->lo + j, ej, r, ej);
    }
    ts_tensor y = ts_tensor_2d(ep->routed, TS_BF16, n, H);
    ts_ep_ll_combine_args ca;
    memset(&ca, 0, sizeof ca);
    ca.x = &rx;
    ca.topk_idx = &idx;
    ca.topk_weights = &wt;
    ca.handle = h;
    if (st == TS_OK) st = ts_ep_low_latency_combine(ep->ll, &ca, &y, NULL);
    ts_ep_ll_handle_destroy(h);
    /* DeepEP's accounting of a bf16 dispatch: a row per valid selection each way */
    ep->dispatch_bytes += (double)(n * K) * (double)(2 * H);
    ep->combine_bytes += (double)(n * K) * (double)(2 * H);
    ep->moe_sec += ts__model_now() - t0;
    *routed = ep->routed;
    return st;
}
