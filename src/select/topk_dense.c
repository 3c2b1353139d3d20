/* Top-k of a dense row (n a small multiple of k, the row in L1/L2) without a candidate buffer.
 *
 * The streaming filter costs ~10 ns per kept entry (append, cut, order pass), which dominates
 * when a quarter of the row is kept (N = 8192, k = 2048). Here the k-th best entry (the pivot)
 * is found by counting passes over signed-order keys (int16 for bf16, int32 for f32), each a
 * compare-and-subtract at load speed: a 64-value strided sample brackets the pivot's key, binary
 * search over the sample's order statistics and then over key values narrows the bracket until
 * it holds at most TS__TOPK_GATHER_MAX values, which are gathered and radix-cut (ties included:
 * entries carry the index), or a single key, whose ties are resolved by the index of its
 * need-th occurrence. A final pass emits every value above the pivot, and its ties up to the
 * pivot's index, in index order: exactly k, already in output order. The sample only steers the
 * search; the counts make every step exact. Passes are cheap (a bf16 row of 8192 is 16 KB of
 * keys), so narrowing down to a few dozen values costs less than gathering a wider band. */
#include "select/topk_internal.h"

#include <math.h>

#define SAMPLES 64

/* c(t) = #(sk >= t) */
static int64_t count_ge(const ts__topk_dense_ops *ops, const void *sk, int64_t n, int64_t t,
                        int64_t kmin) {
    return t <= kmin ? n : ops->count_gt(sk, n, (int32_t)(t - 1));
}

static inline int32_t key_at(const void *sk, bool bf16, int64_t i) {
    return bf16 ? ((const int16_t *)sk)[i] : ((const int32_t *)sk)[i];
}

int64_t ts__topk_dense(const ts__topk_dense_ops *ops, const void *x, bool bf16, int64_t n,
                       int64_t k, uint32_t idx0, void *sk, uint64_t *buf, uint64_t *tmp,
                       uint64_t *out, bool idx_only, int *nan) {
    if (ops->keys(x, n, sk)) {
        *nan = 1;
        return 0;
    }
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
            int r = 0;
            for (int i = 0; i < SAMPLES; i++) r += (v[i] > v[j]) | ((v[i] == v[j]) & (i < j));
            q[r] = v[j];
        }
        /* the pivot's expected sample rank r0, probed first at two standard deviations on
         * either side: usually the bracket is then a few ranks wide */
        const double pk = (double)k / (double)n, r0 = pk * SAMPLES;
        const double sd = sqrt(SAMPLES * pk * (1.0 - pk));
        int64_t probe[2] = {(int64_t)ceil(r0 + 2.0 * sd), (int64_t)floor(r0 - 2.0 * sd)};
        int64_t lj = -1, hj = SAMPLES; /* q[lj] has c < k, q[hj] c >= k */
        for (int step = 0; hj - lj > 1 && chi - clo > TS__TOPK_GATHER_MAX; step++) {
            int64_t j = step < 2 ? probe[step] : lj + (hj - lj) / 2;
            if (j <= lj || j >= hj) j = lj + (hj - lj) / 2;
            const int64_t c = count_ge(ops, sk, n, q[j], kmin);
            if (c >= k) {
                hj = j;
                chi = c;
                klo = q[j];
            } else {
                lj = j;
                clo = c;
                khi = q[j];
            }
        }
    }
    while (chi - clo > TS__TOPK_GATHER_MAX && khi - klo > 1) {
        const int64_t mid = klo + (khi - klo) / 2, c = count_ge(ops, sk, n, mid, kmin);
        if (c >= k) {
            klo = mid;
            chi = c;
        } else {
            khi = mid;
            clo = c;
        }
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
    const int32_t t = (int32_t)((uint32_t)(piv >> 32) - bias);
    const int64_t last = (int64_t)(ts__topk_entry_idx(piv) - idx0);
    if (idx_only) return ops->select_idx(sk, n, t, last, idx0, (uint32_t *)out);
    return ops->select(sk, n, t, last, idx0, out);
}
