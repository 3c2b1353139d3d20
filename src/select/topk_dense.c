/* Top-k of a dense row (n a small multiple of k, the row in L1/L2) without a candidate buffer.
 *
 * The streaming filter costs ~10 ns per kept entry (append, cut, order pass), which dominates
 * when a quarter of the row is kept (N = 8192, k = 2048). Here the k-th best entry (the pivot)
 * is found by counting passes over signed-order keys (int16 for bf16, int32 for f32), each a
 * compare-and-subtract at load speed, at two thresholds per pass. A 64-value strided sample
 * gives the first pair (its keys at the pivot's expected rank +- two standard deviations);
 * later pairs bracket the key where the count would reach k if keys were spread evenly over
 * the current bracket, with a fallback to the bracket's thirds whenever a pass fails to halve
 * it. The search stops at a bracket of at most TS__TOPK_GATHER_MAX values, which are gathered
 * and radix-selected (ties included: entries carry the index), or at a single key, whose ties
 * are resolved by the index of its need-th occurrence. A final pass emits every value above the
 * pivot, and its ties up to the pivot's index, in index order: exactly k, already in output
 * order. The sample only steers the search; the counts make every step exact. */
#include "select/topk_internal.h"

#include <math.h>

#define SAMPLES 64

/* One counting pass at two thresholds klo < t1 <= t2 < khi narrows the bracket (c(t) = #(key
 * >= t); c(klo) = chi >= k > clo = c(khi)) to the one of [klo, t1), [t1, t2), [t2, khi) that
 * holds the pivot. t - 1 does not wrap: t > klo >= the key of -inf. */
static void probe2(const ts__topk_dense_ops *ops, const void *sk, int64_t n, int64_t k,
                   int64_t t1, int64_t t2, int64_t *klo, int64_t *khi, int64_t *chi,
                   int64_t *clo) {
    t1 = t1 <= *klo ? *klo + 1 : t1 >= *khi ? *khi - 1 : t1;
    t2 = t2 < t1 ? t1 : t2 >= *khi ? *khi - 1 : t2;
    int64_t c[2];
    ops->count_gt2(sk, n, (int32_t)(t1 - 1), (int32_t)(t2 - 1), c);
    if (c[1] >= k) {
        *klo = t2;
        *chi = c[1];
    } else if (c[0] >= k) {
        *klo = t1;
        *chi = c[0];
        *khi = t2;
        *clo = c[1];
    } else {
        *khi = t1;
        *clo = c[0];
    }
}

static inline int32_t key_at(const void *sk, bool bf16, int64_t i) {
    return bf16 ? ((const int16_t *)sk)[i] : ((const int32_t *)sk)[i];
}

uint64_t ts__topk_dense_pivot(const ts__topk_dense_ops *ops, const void *sk, bool bf16, int64_t n,
                              int64_t k, uint32_t idx0, uint64_t *buf, uint64_t *tmp) {
    /* keys of -inf and just above +inf: NaN is excluded above, so every key lies in between */
    const int64_t kmin = bf16 ? -32641 : (int64_t)(int32_t)0x807fffffu;
    const int64_t kend = bf16 ? 0x7f81 : 0x7f800001;
    const uint32_t bias = bf16 ? 0x8000u : 0x80000000u;
    /* bracket: c(klo) = chi >= k > clo = c(khi), so the pivot key is in [klo, khi) */
    int64_t klo = kmin, khi = kend, chi = n, clo = 0;
    if (n >= 4 * SAMPLES) {
        int32_t v[SAMPLES], q[SAMPLES];
        const int64_t stride = n / SAMPLES;
        for (int j = 0; j < SAMPLES; j++) v[j] = key_at(sk, bf16, j * stride + stride / 2);
        /* descending by rank counting: branch-free, unlike an insertion sort of random keys */
        for (int j = 0; j < SAMPLES; j++) {
            const int32_t x = v[j];
            int r = 0; /* earlier equal keys rank above: >= before j, > after it */
            for (int i = 0; i < j; i++) r += v[i] >= x;
            for (int i = j + 1; i < SAMPLES; i++) r += v[i] > x;
            q[r] = x;
        }
        /* the first pass: the sample keys at the pivot's expected rank r0 plus and minus two
         * standard deviations; usually the pivot is then between them */
        const double pk = (double)k / (double)n, r0 = pk * SAMPLES;
        const double sd = sqrt(SAMPLES * pk * (1.0 - pk));
        const int64_t jlo = (int64_t)ceil(r0 + 2.0 * sd), jhi = (int64_t)floor(r0 - 2.0 * sd);
        probe2(ops, sk, n, k, q[jlo < SAMPLES ? jlo : SAMPLES - 1], q[jhi > 0 ? jhi : 0], &klo, &khi,
               &chi, &clo);
    }
    /* Then two thresholds per pass around the key where the count would reach k if keys were
     * spread evenly over the bracket, GATHER_MAX / 2 values' worth to either side (bf16 keys
     * are locally near-uniform: usually one or two passes). A pass that does not halve the
     * bracket's count is followed by one at its thirds, so the key span shrinks at least 3x
     * every two passes whatever the distribution. */
    bool thirds = false;
    while (chi - clo > TS__TOPK_GATHER_MAX && khi - klo > 1) {
        const int64_t span = khi - klo, cnt = chi - clo;
        int64_t t1, t2;
        if (thirds) {
            t1 = klo + span / 3;
            t2 = klo + 2 * span / 3;
        } else {
            const double at = (double)klo + (double)span * (double)(chi - k) / (double)cnt;
            double d = (double)span * (TS__TOPK_GATHER_MAX / 2) / (double)cnt;
            d = d < 1.0 ? 1.0 : d;
            t1 = (int64_t)floor(at - d);
            t2 = (int64_t)ceil(at + d);
        }
        probe2(ops, sk, n, k, t1, t2, &klo, &khi, &chi, &clo);
        thirds = 2 * (chi - clo) > cnt;
    }
    const int64_t need = k - clo; /* the pivot is the need-th best with key in [klo, khi) */
    uint64_t piv;
    if (chi - clo <= TS__TOPK_GATHER_MAX) {
        const int64_t m = ops->gather(sk, n, (int32_t)klo, (int32_t)(khi - 1), idx0, buf);
        if (need == m) {
            piv = UINT64_MAX;
            for (int64_t i = 0; i < m; i++) piv = buf[i] < piv ? buf[i] : piv;
        } else {
            piv = ts__topk_cut_pivot(buf, m, need, tmp, bf16 ? 48 : 64,
                               ts__topk_index_bits((int64_t)idx0 + n));
        }
    } else { /* one key holds more than GATHER_MAX: the pivot is its need-th occurrence */
        piv = ts__topk_entry((uint32_t)klo + bias, idx0 + (uint32_t)ops->nth_eq(sk, n, (int32_t)klo, need));
    }
    return piv;
}

int64_t ts__topk_dense(const ts__topk_dense_ops *ops, const void *x, bool bf16, int64_t n,
                       int64_t k, uint32_t idx0, void *sk, uint64_t *buf, uint64_t *tmp,
                       uint64_t *out, bool idx_only, int *nan) {
    if (ops->keys(x, n, sk)) {
        *nan = 1;
        return 0;
    }
    const uint64_t piv = ts__topk_dense_pivot(ops, sk, bf16, n, k, idx0, buf, tmp);
    const uint32_t bias = bf16 ? 0x8000u : 0x80000000u;
    const int32_t t = (int32_t)((uint32_t)(piv >> 32) - bias);
    const int64_t last = (int64_t)(ts__topk_entry_idx(piv) - idx0);
    if (idx_only) return ops->select_idx(sk, n, t, last, idx0, (uint32_t *)out);
    return ops->select(sk, n, t, last, idx0, out);
}
