/* DeepSelect top-k internals: candidate entries, filter kernels, radix cut and sort.
 *
 * A candidate is one u64 "entry" = (order-preserving key << 32) | ~index. Keys map -0 to +0
 * (IEEE equality) and are otherwise a bijection of the value bits (NaN payloads kept), so
 * unsigned entry order = value order, then lower index first. Entries are unique within a
 * row, which makes the top-k set unique: any scan order, split or ISA gives the same result. */
#ifndef TS_SELECT_TOPK_INTERNAL_H
#define TS_SELECT_TOPK_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

/* Branch-free on purpose: signs are random in real scores, and a branch per value
 * mispredicts half the time. */
static inline uint32_t ts__topk_key_f32(uint32_t u) {
    u &= (uint32_t)-(uint32_t)(u != 0x80000000u); /* -0 -> +0 */
    return u ^ ((uint32_t)((int32_t)u >> 31) | 0x80000000u);
}
static inline uint32_t ts__topk_key_bf16(uint32_t u) {
    u &= (uint32_t)-(uint32_t)(u != 0x8000u);
    return (u ^ ((uint32_t)-(int32_t)(u >> 15) | 0x8000u)) & 0xFFFFu;
}
static inline uint32_t ts__topk_unkey_f32(uint32_t key) {
    return (key & 0x80000000u) ? (key ^ 0x80000000u) : ~key;
}
static inline uint32_t ts__topk_unkey_bf16(uint32_t key) {
    return ((key & 0x8000u) ? (key ^ 0x8000u) : ~key) & 0xFFFFu;
}
static inline uint64_t ts__topk_entry(uint32_t key, uint32_t idx) {
    return ((uint64_t)key << 32) | (uint32_t)~idx;
}
static inline uint32_t ts__topk_entry_idx(uint64_t e) { return ~(uint32_t)e; }

/* Append an entry for every x[i] (index idx0 + i) that may still beat the current k-th best
 * (value thr, index pidx): x > thr, x == thr with a lower index than pidx, or NaN (so NaN is
 * always seen). Sets *nan when a NaN was appended. Returns the number appended (<= n). */
typedef int64_t (*ts__topk_filter_fn)(const void *x, int64_t n, uint32_t idx0, float thr,
                                      uint32_t pidx, uint64_t *out, int *nan);

int64_t ts__topk_filter_f32__generic(const void *x, int64_t n, uint32_t idx0, float thr,
                                     uint32_t pidx, uint64_t *out, int *nan);
int64_t ts__topk_filter_bf16__generic(const void *x, int64_t n, uint32_t idx0, float thr,
                                      uint32_t pidx, uint64_t *out, int *nan);
#ifdef TS_HAVE_AVX2_KERNELS
int64_t ts__topk_filter_f32__avx2(const void *x, int64_t n, uint32_t idx0, float thr,
                                  uint32_t pidx, uint64_t *out, int *nan);
int64_t ts__topk_filter_bf16__avx2(const void *x, int64_t n, uint32_t idx0, float thr,
                                   uint32_t pidx, uint64_t *out, int *nan);
/* the same with a software prefetch ahead of the scan, for rows from DRAM */
int64_t ts__topk_filter_f32_stream__avx2(const void *x, int64_t n, uint32_t idx0, float thr,
                                         uint32_t pidx, uint64_t *out, int *nan);
int64_t ts__topk_filter_bf16_stream__avx2(const void *x, int64_t n, uint32_t idx0, float thr,
                                          uint32_t pidx, uint64_t *out, int *nan);
#endif
#ifdef TS_HAVE_AVX512_KERNELS
int64_t ts__topk_filter_f32__avx512(const void *x, int64_t n, uint32_t idx0, float thr,
                                    uint32_t pidx, uint64_t *out, int *nan);
int64_t ts__topk_filter_bf16__avx512(const void *x, int64_t n, uint32_t idx0, float thr,
                                     uint32_t pidx, uint64_t *out, int *nan);
int64_t ts__topk_filter_f32_stream__avx512(const void *x, int64_t n, uint32_t idx0, float thr,
                                           uint32_t pidx, uint64_t *out, int *nan);
int64_t ts__topk_filter_bf16_stream__avx512(const void *x, int64_t n, uint32_t idx0, float thr,
                                            uint32_t pidx, uint64_t *out, int *nan);
#endif

/* k = 1: the entry of the largest of x[0..n) (n >= 1; lowest index among equal values, index
 * idx0 + i). Sets *nan (the entry is then meaningless) when x holds a NaN. */
typedef uint64_t (*ts__topk_argmax_fn)(const void *x, int64_t n, uint32_t idx0, int *nan);
/* The scalar tails of the SIMD argmax kernels (AVX2, AVX-512): values i .. n - 1 after the
 * vector blocks, given the best so far (f32: at < 0 for none yet; bf16: the signed-order int16
 * key of ts__topk_bf16_sk16, or INT32_MIN for none yet); a NaN sets *nan and returns 0. */
static inline int16_t ts__topk_bf16_sk16(uint16_t v) {
    if (v == 0x8000u) v = 0;
    return (int16_t)(v & 0x8000u ? v ^ 0x7fffu : v);
}
static inline uint64_t ts__topk_argmax_f32_tail(const float *f, int64_t i, int64_t n, float best,
                                                int64_t at, uint32_t idx0, int *nan) {
    for (; i < n; i++) {
        const float v = f[i];
        if (v != v) {
            *nan = 1;
            return 0;
        }
        if (v > best || at < 0) {
            best = v;
            at = i;
        }
    }
    return ts__topk_entry(ts__topk_key_f32(((const uint32_t *)(const void *)f)[at]), idx0 + (uint32_t)at);
}
static inline uint64_t ts__topk_argmax_bf16_tail(const uint16_t *u, int64_t i, int64_t n, int32_t best,
                                                 int64_t at, uint32_t idx0, int *nan) {
    for (; i < n; i++) {
        if ((u[i] & 0x7fffu) > 0x7f80u) {
            *nan = 1;
            return 0;
        }
        const int16_t kv = ts__topk_bf16_sk16(u[i]);
        if (kv > best) {
            best = kv;
            at = i;
        }
    }
    return ts__topk_entry(ts__topk_key_bf16(u[at]), idx0 + (uint32_t)at);
}
uint64_t ts__topk_argmax_f32__generic(const void *x, int64_t n, uint32_t idx0, int *nan);
uint64_t ts__topk_argmax_bf16__generic(const void *x, int64_t n, uint32_t idx0, int *nan);
#ifdef TS_HAVE_AVX2_KERNELS
uint64_t ts__topk_argmax_f32__avx2(const void *x, int64_t n, uint32_t idx0, int *nan);
uint64_t ts__topk_argmax_bf16__avx2(const void *x, int64_t n, uint32_t idx0, int *nan);
#endif
#ifdef TS_HAVE_AVX512_KERNELS
uint64_t ts__topk_argmax_f32__avx512(const void *x, int64_t n, uint32_t idx0, int *nan);
uint64_t ts__topk_argmax_bf16__avx512(const void *x, int64_t n, uint32_t idx0, int *nan);
#endif

/* Batches above this many L3 sizes are sampled as rows from DRAM (runs of neighbours); tests
 * set it to 0 to reach that path with small inputs. The result never depends on it. */
extern double ts__topk_dram_scale;

/* Keep the k largest of the n > k >= 1 unique entries in a[0..k) (any order) and return the
 * smallest kept. bits = 32 + key bits (48 for bf16, 64 for f32); every index is below 2^ib
 * (1 <= ib <= 32). tmp holds n entries. */
uint64_t ts__topk_cut(uint64_t *a, int64_t n, int64_t k, uint64_t *tmp, int bits, int ib);
/* The same pivot (the k-th largest) without moving a: for a threshold estimate. */
uint64_t ts__topk_cut_pivot(const uint64_t *a, int64_t n, int64_t k, uint64_t *tmp, int bits, int ib);

/* Bits needed for indices below n (n >= 2). */
static inline int ts__topk_index_bits(int64_t n) {
    int b = 1;
    while (b < 32 && ((int64_t)1 << b) < n) b++;
    return b;
}

/* Stable LSD radix sort of a[0..n), descending on bits [0, hi_bit) less the all-ones ~index
 * bits [ib, 32) (indices below 2^ib). hi_bit 32 = ascending index; 32 + key bits = descending
 * value, ties by ascending index. ib = 0 sorts the key bits only: for entries already in
 * ascending index order, where stability breaks the ties. tmp holds n entries. */
void ts__topk_sort_desc(uint64_t *a, uint64_t *tmp, int64_t n, int ib, int hi_bit);

/* Dense rows (n a small multiple of k, row in L1/L2): the exact pivot is found by counting
 * passes over signed-order keys sk (the value's bits with -0 -> +0 and the magnitude bits of
 * negatives flipped, so signed order = value order; int16 for bf16, int32 for f32; the entry key
 * is sk + bias, bias 2^15 for bf16 and 2^31 for f32), then one pass emits the k winners in index
 * order, so they need no order pass. Kernels come in an s16 (bf16) and an s32 (f32) width. */
typedef struct ts__topk_dense_ops {
    /* sk[i] for x[0..n); returns 1 if a NaN is among them (sk is then meaningless) */
    int (*keys)(const void *x, int64_t n, void *sk);
    /* c[0] = #(sk[i] > t1), c[1] = #(sk[i] > t2): two thresholds per pass */
    void (*count_gt2)(const void *sk, int64_t n, int32_t t1, int32_t t2, int64_t c[2]);
    /* entries of every i with lo <= sk[i] <= hi, in index order (index idx0 + i) */
    int64_t (*gather)(const void *sk, int64_t n, int32_t lo, int32_t hi, uint32_t idx0,
                      uint64_t *out);
    /* entries of every i with sk[i] > t, or sk[i] == t and i <= last, in index order; out
     * holds 8 entries more than the count */
    int64_t (*select)(const void *sk, int64_t n, int32_t t, int64_t last, uint32_t idx0,
                      uint64_t *out);
    /* select, writing only the indices idx0 + i (out holds 8 more than the count) */
    int64_t (*select_idx)(const void *sk, int64_t n, int32_t t, int64_t last, uint32_t idx0,
                          uint32_t *out);
    /* i of the need-th (1-based, in index order) sk[i] == t; at least need exist */
    int64_t (*nth_eq)(const void *sk, int64_t n, int32_t t, int64_t need);
} ts__topk_dense_ops;

#define TS__TOPK_DENSE_DECL(ISA)                                                                 \
    int ts__topk_dense_keys_f32__##ISA(const void *x, int64_t n, void *sk);                     \
    int ts__topk_dense_keys_bf16__##ISA(const void *x, int64_t n, void *sk);                    \
    void ts__topk_dense_count_gt2_s32__##ISA(const void *sk, int64_t n, int32_t t1, int32_t t2, \
                                             int64_t c[2]);                                     \
    void ts__topk_dense_count_gt2_s16__##ISA(const void *sk, int64_t n, int32_t t1, int32_t t2, \
                                             int64_t c[2]);                                     \
    int64_t ts__topk_dense_gather_s32__##ISA(const void *sk, int64_t n, int32_t lo, int32_t hi, \
                                             uint32_t idx0, uint64_t *out);                     \
    int64_t ts__topk_dense_gather_s16__##ISA(const void *sk, int64_t n, int32_t lo, int32_t hi, \
                                             uint32_t idx0, uint64_t *out);                     \
    int64_t ts__topk_dense_select_s32__##ISA(const void *sk, int64_t n, int32_t t, int64_t last, \
                                             uint32_t idx0, uint64_t *out);                     \
    int64_t ts__topk_dense_select_s16__##ISA(const void *sk, int64_t n, int32_t t, int64_t last, \
                                             uint32_t idx0, uint64_t *out);                     \
    int64_t ts__topk_dense_select_idx_s32__##ISA(const void *sk, int64_t n, int32_t t, int64_t last, \
                                                 uint32_t idx0, uint32_t *out);                 \
    int64_t ts__topk_dense_select_idx_s16__##ISA(const void *sk, int64_t n, int32_t t, int64_t last, \
                                                 uint32_t idx0, uint32_t *out);                 \
    int64_t ts__topk_dense_nth_eq_s32__##ISA(const void *sk, int64_t n, int32_t t, int64_t need); \
    int64_t ts__topk_dense_nth_eq_s16__##ISA(const void *sk, int64_t n, int32_t t, int64_t need);
TS__TOPK_DENSE_DECL(generic)
#ifdef TS_HAVE_AVX2_KERNELS
TS__TOPK_DENSE_DECL(avx2)
#endif
#ifdef TS_HAVE_AVX512_KERNELS
TS__TOPK_DENSE_DECL(avx512)
#endif

/* Exact top-k (k < n) of x[0..n) (indices idx0 + i) in index order into out (k + 8 entries;
 * with idx_only, k + 8 uint32 indices instead). sk holds n keys (4 bytes each suffice); buf and
 * tmp hold TS__TOPK_GATHER_MAX + 8 entries each. Returns k, or 0 with *nan = 1 when x holds a
 * NaN. */
#define TS__TOPK_GATHER_MAX 32
/* The k-th largest entry (1 <= k < n) of n signed-order keys sk (from ops->keys, no NaN), by
 * the same counting passes: the pivot of ts__topk_dense. Also selects the sample threshold. */
uint64_t ts__topk_dense_pivot(const ts__topk_dense_ops *ops, const void *sk, bool bf16, int64_t n,
                              int64_t k, uint32_t idx0, uint64_t *buf, uint64_t *tmp);
int64_t ts__topk_dense(const ts__topk_dense_ops *ops, const void *x, bool bf16, int64_t n,
                       int64_t k, uint32_t idx0, void *sk, uint64_t *buf, uint64_t *tmp,
                       uint64_t *out, bool idx_only, int *nan);

#endif
