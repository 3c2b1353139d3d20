/* DeepSelect top-k internals: candidate entries, filter kernels, radix cut and sort.
 *
 * A candidate is one u64 "entry" = (order-preserving key << 32) | ~index. Keys map -0 to +0
 * (IEEE equality) and are otherwise a bijection of the value bits (NaN payloads kept), so
 * unsigned entry order = value order, then lower index first. Entries are unique within a
 * row, which makes the top-k set unique: any scan order, split or ISA gives the same result. */
#ifndef TS_SELECT_TOPK_INTERNAL_H
#define TS_SELECT_TOPK_INTERNAL_H

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
#endif

/* Keep the k largest of the n > k >= 1 unique entries in a[0..k) (any order) and return the
 * smallest kept. bits = 32 + key bits (48 for bf16, 64 for f32); every index is below 2^ib
 * (1 <= ib <= 32). tmp holds n entries. */
uint64_t ts__topk_cut(uint64_t *a, int64_t n, int64_t k, uint64_t *tmp, int bits, int ib);

/* Bits needed for indices below n (n >= 2). */
static inline int ts__topk_index_bits(int64_t n) {
    int b = 1;
    while (b < 32 && ((int64_t)1 << b) < n) b++;
    return b;
}

/* Stable LSD radix sort of a[0..n), descending on bits [0, hi_bit) less the all-ones ~index
 * bits [ib, 32) (indices below 2^ib). hi_bit 32 = ascending index; 32 + key bits = descending
 * value, ties by ascending index. tmp holds n entries. */
void ts__topk_sort_desc(uint64_t *a, uint64_t *tmp, int64_t n, int ib, int hi_bit);

#endif
