/* Sampling the head's logits: ts_model_sample (greedy and top-k through ts_topk, docs/model.md §4
 * "Head") and ts_sampler_* (temperature, top-k, top-p and log-probabilities for generation). */
#include "model_internal.h"

#include "tilestack/select.h"

#include <math.h>

/* One splitmix64 step as a uniform in [0, 1). */
static double next_uniform(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

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
        const double u = next_uniform(&s) * tot;
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

/* ---- ts_sampler_*: temperature, top-k, top-p (model.h) ---- */

/* exp, flushed to 0 below the smallest normal result: a subnormal w would be a subnormal
 * operand in every sum after it (design brief, "Fast on every CPU"); exp(-708) is normal. */
static double weight(double x) { return x < -708.0 ? 0.0 : exp(x); }

/* The candidate order as one integer, so that "larger key" is "earlier candidate": the logit's
 * bits mapped to an unsigned order in the high half, the complemented id in the low half (equal
 * logits: the lower id is the larger key). -0 and +0 are the same logit. */
static uint64_t order_key(float l, int64_t id) {
    uint32_t u;
    if (l == 0) l = 0; /* -0 -> +0 */
    memcpy(&u, &l, 4);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((uint64_t)u << 32) | (uint64_t)(0xFFFFFFFFu - (uint32_t)id);
}

static int64_t key_id(uint64_t k) { return (int64_t)(0xFFFFFFFFu - (uint32_t)k); }

static void sift_down(uint64_t *h, int64_t n, int64_t i) { /* min-heap */
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && h[c + 1] < h[c]) c++;
        if (h[i] <= h[c]) return;
        const uint64_t t = h[i];
        h[i] = h[c], h[c] = t;
        i = c;
    }
}

/* The c largest keys of the finite logits, largest first, into out[c] (c <= their count): a
 * min-heap of c, then heap-sorted. O(vocab log c) whatever the values, so a hostile row cannot
 * make it quadratic. */
static void top_keys(const float *logits, int64_t vocab, int64_t c, uint64_t *out) {
    int64_t n = 0;
    for (int64_t i = 0; i < vocab; i++) {
        if (!isfinite(logits[i])) continue;
        const uint64_t k = order_key(logits[i], i);
        if (n < c) {
            out[n++] = k;
            if (n == c)
                for (int64_t j = c / 2 - 1; j >= 0; j--) sift_down(out, c, j);
        } else if (k > out[0]) {
            out[0] = k;
            sift_down(out, c, 0);
        }
    }
    for (int64_t m = c - 1; m > 0; m--) { /* pop the smallest to the back: descending order */
        const uint64_t t = out[0];
        out[0] = out[m], out[m] = t;
        sift_down(out, m, 0);
    }
}

/* Scans the row: the largest key's id, the count of finite logits; refuses NaN and +inf. */
static ts_status scan_row(const char *fn, const float *logits, int64_t vocab, int64_t *best,
                          int64_t *n_finite) {
    uint64_t bk = 0;
    int64_t b = -1, n = 0;
    for (int64_t i = 0; i < vocab; i++) {
        const float l = logits[i];
        if (isnan(l) || l == INFINITY)
            return ts__fail(TS_ERR_NONFINITE, "%s: logits[%lld] is %s", fn, (long long)i,
                            isnan(l) ? "NaN" : "+inf");
        if (l == -INFINITY) continue;
        const uint64_t k = order_key(l, i);
        if (b < 0 || k > bk) bk = k, b = i;
        n++;
    }
    if (n == 0) return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: every logit is -inf", fn);
    *best = b;
    *n_finite = n;
    return TS_OK;
}

ts_sampler_params ts_sampler_default_params(void) {
    ts_sampler_params p = {.temperature = 1.0, .top_k = 0, .top_p = 1.0};
    return p;
}

ts_status ts_sampler_check(const ts_sampler_params *p, int64_t vocab) {
    static const char fn[] = "ts_sampler_check";
    if (!p) return ts__fail(TS_ERR_NULL_POINTER, "%s: params is NULL", fn);
    if (vocab < 1 || vocab > INT32_MAX)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: vocab = %lld", fn, (long long)vocab);
    /* the bounds keep (l - max) / T and its exp clear of subnormal doubles for any f32 logits */
    if (!(p->temperature == 0 || (p->temperature >= TS_SAMPLER_MIN_TEMPERATURE &&
                                  p->temperature <= TS_SAMPLER_MAX_TEMPERATURE)))
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "temperature = %g: must be 0 (greedy) or in "
                        "[%g, %g]", p->temperature, TS_SAMPLER_MIN_TEMPERATURE,
                        TS_SAMPLER_MAX_TEMPERATURE);
    if (p->top_k < 0 || p->top_k > vocab)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "top_k = %lld: must be 0 (no limit) or in [1, "
                        "%lld] (the vocabulary)", (long long)p->top_k, (long long)vocab);
    if (!(p->top_p > 0 && p->top_p <= 1))
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "top_p = %g: must be in (0, 1]", p->top_p);
    return TS_OK;
}

/* The boundary key: a token is kept when its logit is finite and its key is >= the boundary.
 * heap has room for min(top-k survivors, vocab) keys. */
static uint64_t keep_boundary(const float *logits, int64_t vocab, const ts_sampler_params *p,
                              int64_t n_finite, const double *w, uint64_t *heap) {
    const int64_t k = p->top_k > 0 && p->top_k < n_finite ? p->top_k : n_finite;
    uint64_t kth = 0; /* every finite logit survives top-k */
    int64_t c;
    if (k < n_finite) {
        top_keys(logits, vocab, k, heap);
        kth = heap[k - 1];
        c = k;
        if (p->top_p >= 1) return kth;
    } else {
        if (p->top_p >= 1) return 0;
        /* the nucleus of a peaked distribution sits in the first few hundred candidates: sort
         * those first, everything only when they do not reach top_p (same result either way:
         * the sorted prefix is the same) */
        c = n_finite < 1024 ? n_finite : 1024;
        top_keys(logits, vocab, c, heap);
    }
    double total = 0; /* over the top-k survivors, in id order */
    for (int64_t i = 0; i < vocab; i++)
        if (isfinite(logits[i]) && order_key(logits[i], i) >= kth) total += w[i];
    const double target = p->top_p * total;
    for (;;) {
        double cum = 0;
        for (int64_t j = 0; j < c; j++) {
            cum += w[key_id(heap[j])];
            if (cum >= target) return heap[j];
        }
        if (c == k) return kth; /* rounding left the sum short of top_p: keep all k */
        c = k;
        top_keys(logits, vocab, c, heap);
    }
}

ts_status ts_sampler_sample(const float *logits, int64_t vocab, const ts_sampler_params *p,
                            uint64_t *rng_state, int32_t *token) {
    static const char fn[] = "ts_sampler_sample";
    if (!logits) return ts__fail(TS_ERR_NULL_POINTER, "%s: logits is NULL", fn);
    if (!token) return ts__fail(TS_ERR_NULL_POINTER, "%s: token is NULL", fn);
    TS__RETURN_IF_ERROR(ts_sampler_check(p, vocab));
    const bool greedy = p->temperature == 0 || p->top_k == 1;
    if (!greedy && !rng_state)
        return ts__fail(TS_ERR_NULL_POINTER, "%s: rng_state is NULL (needed unless greedy)", fn);
    int64_t best, n_finite;
    TS__RETURN_IF_ERROR(scan_row(fn, logits, vocab, &best, &n_finite));
    if (greedy) {
        *token = (int32_t)best;
        return TS_OK;
    }
    const int64_t heap_n = p->top_k > 0 && p->top_k < n_finite ? p->top_k : n_finite;
    double *w = (double *)ts__scratch(0, (size_t)(vocab + heap_n) * 8);
    if (!w) return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: scratch for %lld logits", fn, (long long)vocab);
    uint64_t *heap = (uint64_t *)(w + vocab);
    /* (l - max) / T rather than l / T - max / T: never inf - inf, whatever T */
    const double lmax = logits[best], t = p->temperature;
    for (int64_t i = 0; i < vocab; i++)
        w[i] = isfinite(logits[i]) ? weight(((double)logits[i] - lmax) / t) : 0.0;
    const uint64_t b = keep_boundary(logits, vocab, p, n_finite, w, heap);
    double total = 0;
    for (int64_t i = 0; i < vocab; i++)
        if (isfinite(logits[i]) && order_key(logits[i], i) >= b) total += w[i];
    uint64_t s = *rng_state;
    const double u = next_uniform(&s) * total;
    double acc = 0;
    int64_t pick = -1, last = best;
    for (int64_t i = 0; i < vocab && pick < 0; i++) {
        if (!isfinite(logits[i]) || order_key(logits[i], i) < b) continue;
        if (w[i] > 0) last = i;
        acc += w[i];
        if (u < acc) pick = i;
    }
    /* u * total can round onto the end of the last interval: that interval's token */
    *token = (int32_t)(pick >= 0 ? pick : last);
    *rng_state = s;
    return TS_OK;
}

ts_status ts_sampler_logprobs(const float *logits, int64_t vocab, int32_t token, int64_t top_n,
                              double *token_logprob, int32_t *top_ids, double *top_logprobs) {
    static const char fn[] = "ts_sampler_logprobs";
    if (!logits) return ts__fail(TS_ERR_NULL_POINTER, "%s: logits is NULL", fn);
    if (vocab < 1 || vocab > INT32_MAX)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: vocab = %lld", fn, (long long)vocab);
    if (top_n < 0 || top_n > vocab)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: top_n = %lld is outside [0, %lld]", fn,
                        (long long)top_n, (long long)vocab);
    if (top_n > 0 && (!top_ids || !top_logprobs))
        return ts__fail(TS_ERR_NULL_POINTER, "%s: top_ids / top_logprobs is NULL", fn);
    if (token >= vocab)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: token %d is outside the vocabulary of %lld",
                        fn, (int)token, (long long)vocab);
    int64_t best, n_finite;
    TS__RETURN_IF_ERROR(scan_row(fn, logits, vocab, &best, &n_finite));
    const int64_t c = top_n < n_finite ? top_n : n_finite;
    uint64_t *heap = NULL;
    if (c > 0 && !(heap = (uint64_t *)ts__scratch(0, (size_t)c * 8)))
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: scratch", fn);
    const double lmax = logits[best];
    double sum = 0;
    for (int64_t i = 0; i < vocab; i++)
        if (isfinite(logits[i])) sum += weight((double)logits[i] - lmax);
    const double lse = lmax + log(sum);
    if (token >= 0 && token_logprob)
        *token_logprob = isfinite(logits[token]) ? (double)logits[token] - lse : -INFINITY;
    if (c > 0) top_keys(logits, vocab, c, heap);
    for (int64_t j = 0; j < top_n; j++) {
        const int64_t id = j < c ? key_id(heap[j]) : -1;
        top_ids[j] = (int32_t)id;
        top_logprobs[j] = id >= 0 ? (double)logits[id] - lse : -INFINITY;
    }
    return TS_OK;
}
