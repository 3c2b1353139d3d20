/* Greedy and top-k sampling of the head's logits (docs/model.md §4 "Head") through ts_topk. */
#include "model_internal.h"

#include "tilestack/select.h"

#include <math.h>

ts_status ts_model_sample(const float *logits, int64_t n, int64_t vocab, int64_t top_k,
                          uint64_t *rng_state, int32_t *tokens) {
    static const char fn[] = "ts_model_sample";
    if (!logits) return ts__fail(TS_ERR_NULL_POINTER, "%s: logits is NULL", fn);
    if (!tokens) return ts__fail(TS_ERR_NULL_POINTER, "%s: tokens is NULL", fn);
    if (n < 0 || vocab < 1 || vocab > INT32_MAX)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: n = %lld, vocab = %lld", fn, (long long)n,
                        (long long)vocab);
    if (top_k < 1 || top_k > vocab || top_k > TS_TOPK_MAX_K)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: top_k = %lld is outside [1, min(vocab, %d)]",
                        fn, (long long)top_k, TS_TOPK_MAX_K);
    if (top_k > 1 && !rng_state)
        return ts__fail(TS_ERR_NULL_POINTER, "%s: rng_state is NULL (needed for top_k > 1)", fn);
    if (n == 0) return TS_OK;
    float *vals = (float *)malloc((size_t)top_k * sizeof(float));
    int32_t *idx = (int32_t *)malloc((size_t)top_k * sizeof(int32_t));
    int32_t *out = (int32_t *)malloc((size_t)n * sizeof(int32_t));
    ts_status st = vals && idx && out ? TS_OK : ts__fail(TS_ERR_OUT_OF_MEMORY, "%s", fn);
    ts_topk_options o = ts_topk_default_options();
    o.sorted = true; /* descending values, ties: lower index first */
    o.indices_type = TS_I32;
    o.abort_when_nan_found = true;
    uint64_t s = rng_state ? *rng_state : 0;
    for (int64_t r = 0; st == TS_OK && r < n; r++) {
        ts_tensor in = ts_tensor_2d((void *)(logits + r * vocab), TS_F32, 1, vocab);
        ts_tensor tv = ts_tensor_2d(vals, TS_F32, 1, top_k), ti = ts_tensor_2d(idx, TS_I32, 1, top_k);
        st = ts_topk(&in, top_k, &o, NULL, NULL, &tv, &ti);
        if (st != TS_OK) break;
        if (top_k == 1) {
            out[r] = idx[0];
            continue;
        }
        /* softmax over the k values (the first is the max), one uniform in [0, 1) */
        double tot = 0;
        for (int64_t j = 0; j < top_k; j++) tot += exp((double)vals[j] - (double)vals[0]);
        s += 0x9E3779B97F4A7C15ull;
        uint64_t z = s;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        const double u = (double)(z >> 11) * (1.0 / 9007199254740992.0) * tot;
        double acc = 0;
        int64_t pick = top_k - 1;
        for (int64_t j = 0; j < top_k; j++) {
            acc += exp((double)vals[j] - (double)vals[0]);
            if (u < acc) {
                pick = j;
                break;
            }
        }
        out[r] = idx[pick];
    }
    if (st == TS_OK) {
        memcpy(tokens, out, (size_t)n * sizeof(int32_t));
        if (rng_state) *rng_state = s;
    }
    free(vals);
    free(idx);
    free(out);
    return st;
}
