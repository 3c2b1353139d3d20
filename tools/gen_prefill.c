/* gen_prefill: a prompt into one sequence's cache through the batched prefill
 * (ts_model_prefill: the prompt's rows go through every GEMM together, bit-identical to token
 * by token). An expert-parallel model refuses prefill (TS_ERR_UNSUPPORTED, checked before
 * anything changes): it is fed token by token through the collective decode step instead. */
#include "gen.h"

ts_status gen_prefill(ts_model *m, int64_t seq, const int32_t *tokens, size_t n,
                      float *last_logits) {
    if (n == 0) return TS_OK;
    const ts_status st = ts_model_prefill(m, seq, (int64_t)n, tokens, last_logits);
    if (st != TS_ERR_UNSUPPORTED) return st;
    ts_clear_error();
    for (size_t i = 0; i < n; i++) {
        const ts_status s = ts_model_decode(m, 1, &seq, &tokens[i], i + 1 == n ? last_logits : NULL);
        if (s != TS_OK) return s;
    }
    return TS_OK;
}
