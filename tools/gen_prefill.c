/* gen_prefill: a prompt into one sequence's cache. For now token by token through
 * ts_model_decode, the head skipped (logits NULL) but for the last token; a batched prefill
 * (FlashMLA sparse prefill, GEMMs with M > 16; issue 19) replaces this body and nothing else. */
#include "gen.h"

ts_status gen_prefill(ts_model *m, int64_t seq, const int32_t *tokens, size_t n,
                      float *last_logits) {
    for (size_t i = 0; i < n; i++) {
        const ts_status st = ts_model_decode(m, 1, &seq, &tokens[i], i + 1 == n ? last_logits : NULL);
        if (st != TS_OK) return st;
    }
    return TS_OK;
}
