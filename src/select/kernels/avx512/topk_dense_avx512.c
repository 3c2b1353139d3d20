/* AVX-512 dense-row kernels: the AVX2 ones with compares into mask registers, so a counting
 * pass is a compare and a masked increment per 32 bf16 (16 f32) keys, and the final selection
 * a vpcompress per 16 keys instead of the permutation table (no movemask, no table load).
 * Integer compares only: the same results as the generic kernels. */
#include "select/topk_internal.h"
#include "tilestack/core.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

static inline __m512i iota16(void) {
    return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

/* Signed-order keys without the -0 fix-up blend: with a = |bits|, the key is a for
 * non-negatives and -0, and 0x7fff - bits (= bits ^ 0x7fff) for the other negatives, picked
 * by one unsigned compare (bits > 0x8000); a also gives the NaN test. */
int ts__topk_dense_keys_bf16__avx512(const void *x, int64_t n, void *out) {
    const uint16_t *u = (const uint16_t *)x;
    int16_t *sk = (int16_t *)out;
    const __m512i mag = _mm512_set1_epi16(0x7fff), inf = _mm512_set1_epi16(0x7f80);
    const __m512i negz = _mm512_set1_epi16((short)0x8000);
    __mmask32 nan = 0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512i v = _mm512_loadu_si512((const void *)(u + i));
        const __m512i a = _mm512_and_si512(v, mag);
        nan |= _mm512_cmpgt_epi16_mask(a, inf);
        _mm512_storeu_si512((void *)(sk + i), _mm512_mask_sub_epi16(a, _mm512_cmpgt_epu16_mask(v, negz), mag, v));
    }
    if (i < n) { /* masked tail: zeros past n are +0 keys, never stored */
        const __mmask32 valid = (__mmask32)((1u << (n - i)) - 1u);
        const __m512i v = _mm512_maskz_loadu_epi16(valid, u + i);
        const __m512i a = _mm512_and_si512(v, mag);
        nan |= _mm512_cmpgt_epi16_mask(a, inf);
        _mm512_mask_storeu_epi16(sk + i, valid, _mm512_mask_sub_epi16(a, _mm512_cmpgt_epu16_mask(v, negz), mag, v));
    }
    return nan != 0;
}

int ts__topk_dense_keys_f32__avx512(const void *x, int64_t n, void *out) {
    const uint32_t *u = (const uint32_t *)x;
    int32_t *sk = (int32_t *)out;
    const __m512i mag = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    const __m512i negz = _mm512_set1_epi32((int)0x80000000u);
    __mmask16 nan = 0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i v = _mm512_loadu_si512((const void *)(u + i));
        const __m512i a = _mm512_and_si512(v, mag);
        nan |= _mm512_cmpgt_epi32_mask(a, inf);
        _mm512_storeu_si512((void *)(sk + i), _mm512_mask_sub_epi32(a, _mm512_cmpgt_epu32_mask(v, negz), mag, v));
    }
    if (i < n) {
        const __mmask16 valid = (__mmask16)((1u << (n - i)) - 1u);
        const __m512i v = _mm512_maskz_loadu_epi32(valid, u + i);
        const __m512i a = _mm512_and_si512(v, mag);
        nan |= _mm512_cmpgt_epi32_mask(a, inf);
        _mm512_mask_storeu_epi32(sk + i, valid, _mm512_mask_sub_epi32(a, _mm512_cmpgt_epu32_mask(v, negz), mag, v));
    }
    return nan != 0;
}

void ts__topk_dense_count_gt2_s32__avx512(const void *p, int64_t n, int32_t t1, int32_t t2, int64_t c[2]) {
    const int32_t *sk = (const int32_t *)p;
    const __m512i u = _mm512_set1_epi32(t1), w = _mm512_set1_epi32(t2), one = _mm512_set1_epi32(1);
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, b0 = a0, b1 = a0;
    int64_t i = 0;
    /* lanes count at most n / 32 each */
    for (; i + 32 <= n; i += 32) {
        const __m512i v0 = _mm512_loadu_si512((const void *)(sk + i));
        const __m512i v1 = _mm512_loadu_si512((const void *)(sk + i + 16));
        a0 = _mm512_mask_add_epi32(a0, _mm512_cmpgt_epi32_mask(v0, u), a0, one);
        a1 = _mm512_mask_add_epi32(a1, _mm512_cmpgt_epi32_mask(v1, u), a1, one);
        b0 = _mm512_mask_add_epi32(b0, _mm512_cmpgt_epi32_mask(v0, w), b0, one);
        b1 = _mm512_mask_add_epi32(b1, _mm512_cmpgt_epi32_mask(v1, w), b1, one);
    }
    int64_t t[2];
    ts__topk_dense_count_gt2_s32__generic(sk + i, n - i, t1, t2, t);
    c[0] = (int64_t)(uint32_t)_mm512_reduce_add_epi32(_mm512_add_epi32(a0, a1)) + t[0];
    c[1] = (int64_t)(uint32_t)_mm512_reduce_add_epi32(_mm512_add_epi32(b0, b1)) + t[1];
}

void ts__topk_dense_count_gt2_s16__avx512(const void *p, int64_t n, int32_t t1, int32_t t2, int64_t c[2]) {
    const int16_t *sk = (const int16_t *)p;
    if (t1 >= INT16_MAX || t1 < INT16_MIN || t2 >= INT16_MAX || t2 < INT16_MIN) {
        ts__topk_dense_count_gt2_s16__generic(sk, n, t1, t2, c); /* outside the key range */
        return;
    }
    const __m512i u = _mm512_set1_epi16((short)t1), w = _mm512_set1_epi16((short)t2);
    const __m512i one = _mm512_set1_epi16(1);
    int64_t c1 = 0, c2 = 0, i = 0;
    while (i + 64 <= n) {
        /* 16-bit lane counters, summed by a signed vpmaddwd: flushed every 2^19 values (at
         * most 2^13 per lane) */
        const int64_t stop = n - i > ((int64_t)1 << 19) ? i + ((int64_t)1 << 19) : n;
        __m512i a0 = _mm512_setzero_si512(), a1 = a0, b0 = a0, b1 = a0;
        for (; i + 64 <= stop; i += 64) {
            const __m512i v0 = _mm512_loadu_si512((const void *)(sk + i));
            const __m512i v1 = _mm512_loadu_si512((const void *)(sk + i + 32));
            a0 = _mm512_mask_add_epi16(a0, _mm512_cmpgt_epi16_mask(v0, u), a0, one);
            a1 = _mm512_mask_add_epi16(a1, _mm512_cmpgt_epi16_mask(v1, u), a1, one);
            b0 = _mm512_mask_add_epi16(b0, _mm512_cmpgt_epi16_mask(v0, w), b0, one);
            b1 = _mm512_mask_add_epi16(b1, _mm512_cmpgt_epi16_mask(v1, w), b1, one);
        }
        c1 += (int64_t)(uint32_t)_mm512_reduce_add_epi32(
            _mm512_add_epi32(_mm512_madd_epi16(a0, one), _mm512_madd_epi16(a1, one)));
        c2 += (int64_t)(uint32_t)_mm512_reduce_add_epi32(
            _mm512_add_epi32(_mm512_madd_epi16(b0, one), _mm512_madd_epi16(b1, one)));
    }
    int64_t t[2];
    ts__topk_dense_count_gt2_s16__generic(sk + i, n - i, t1, t2, t);
    c[0] = c1 + t[0];
    c[1] = c2 + t[1];
}

/* The band holds at most a few dozen values: a walk over its hits (lo <= sk <= hi). */
int64_t ts__topk_dense_gather_s32__avx512(const void *p, int64_t n, int32_t lo, int32_t hi, uint32_t idx0,
                                          uint64_t *out) {
    const int32_t *sk = (const int32_t *)p;
    const __m512i l = _mm512_set1_epi32(lo), h = _mm512_set1_epi32(hi);
    int64_t c = 0, i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512i v0 = _mm512_loadu_si512((const void *)(sk + i));
        const __m512i v1 = _mm512_loadu_si512((const void *)(sk + i + 16));
        uint32_t m = (uint32_t)_mm512_mask_cmple_epi32_mask(_mm512_cmpge_epi32_mask(v0, l), v0, h) |
                     (uint32_t)_mm512_mask_cmple_epi32_mask(_mm512_cmpge_epi32_mask(v1, l), v1, h) << 16;
        while (m) {
            const int64_t j = i + __builtin_ctz(m);
            m &= m - 1;
            out[c++] = ts__topk_entry((uint32_t)sk[j] + 0x80000000u, idx0 + (uint32_t)j);
        }
    }
    return c + ts__topk_dense_gather_s32__generic(sk + i, n - i, lo, hi, idx0 + (uint32_t)i, out + c);
}

int64_t ts__topk_dense_gather_s16__avx512(const void *p, int64_t n, int32_t lo, int32_t hi, uint32_t idx0,
                                          uint64_t *out) {
    const int16_t *sk = (const int16_t *)p;
    if (lo < INT16_MIN || hi > INT16_MAX || lo > hi) return ts__topk_dense_gather_s16__generic(sk, n, lo, hi, idx0, out);
    const __m512i l = _mm512_set1_epi16((short)lo), h = _mm512_set1_epi16((short)hi);
    int64_t c = 0, i = 0;
    for (; i + 64 <= n; i += 64) {
        const __m512i v0 = _mm512_loadu_si512((const void *)(sk + i));
        const __m512i v1 = _mm512_loadu_si512((const void *)(sk + i + 32));
        uint64_t m = (uint64_t)_mm512_mask_cmple_epi16_mask(_mm512_cmpge_epi16_mask(v0, l), v0, h) |
                     (uint64_t)_mm512_mask_cmple_epi16_mask(_mm512_cmpge_epi16_mask(v1, l), v1, h) << 32;
        while (m) {
            const int64_t j = i + __builtin_ctzll(m);
            m &= m - 1;
            out[c++] = ts__topk_entry((uint32_t)(int32_t)sk[j] + 0x8000u, idx0 + (uint32_t)j);
        }
    }
    return c + ts__topk_dense_gather_s16__generic(sk + i, n - i, lo, hi, idx0 + (uint32_t)i, out + c);
}

/* Index of the need-th key equal to t: popcounts of equality masks, then a walk in the group
 * that reaches need. */
int64_t ts__topk_dense_nth_eq_s32__avx512(const void *p, int64_t n, int32_t t, int64_t need) {
    const int32_t *sk = (const int32_t *)p;
    const __m512i tv = _mm512_set1_epi32(t);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        uint32_t m = (uint32_t)_mm512_cmpeq_epi32_mask(_mm512_loadu_si512((const void *)(sk + i)), tv) |
                     (uint32_t)_mm512_cmpeq_epi32_mask(_mm512_loadu_si512((const void *)(sk + i + 16)), tv) << 16;
        const int pc = __builtin_popcount(m);
        if (pc < need) {
            need -= pc;
            continue;
        }
        while (--need) m &= m - 1;
        return i + __builtin_ctz(m);
    }
    return i + ts__topk_dense_nth_eq_s32__generic(sk + i, n - i, t, need);
}

int64_t ts__topk_dense_nth_eq_s16__avx512(const void *p, int64_t n, int32_t t, int64_t need) {
    const int16_t *sk = (const int16_t *)p;
    if (t < INT16_MIN || t > INT16_MAX) return n - 1; /* no such key: outside the contract */
    const __m512i tv = _mm512_set1_epi16((short)t);
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        uint64_t m = (uint64_t)_mm512_cmpeq_epi16_mask(_mm512_loadu_si512((const void *)(sk + i)), tv) |
                     (uint64_t)_mm512_cmpeq_epi16_mask(_mm512_loadu_si512((const void *)(sk + i + 32)), tv) << 32;
        const int pc = __builtin_popcountll(m);
        if (pc < need) {
            need -= pc;
            continue;
        }
        while (--need) m &= m - 1;
        return i + __builtin_ctzll(m);
    }
    return i + ts__topk_dense_nth_eq_s16__generic(sk + i, n - i, t, need);
}

/* Entries (or, with idx, indices) of the i in [0, n) with sk[i] > lo, in index order, 16 keys
 * per vpcompress and no branch per group (a good part of a dense row is kept: a test for empty
 * groups would mispredict). Entries are interleaved from the ~index and key vectors by
 * vpermt2d, 8 per vpcompressq. Two ways to write the survivors, the same bytes either way:
 * - mem (Intel): vpcompress straight to memory. On the Ice Lake reference it costs the same as
 *   a register compress plus a full store, and 30% less than one plus a popcount-masked store
 *   (8192 int16 keys, 6% kept: 9.1 -> 6.4 cycles per 32 keys).
 * - reg (AMD): compress in a register, then a popcount-masked store. Zen 4 microcodes
 *   vpcompress with a memory destination: with it the avx512 indexer rows ran at 0.70-0.98x
 *   the avx2 path there (2026-12-02, docs/performance.md). */
static inline __attribute__((always_inline)) int64_t emit16_entries(uint64_t *out, int64_t c, __m512i nidx,
                                                                    __m512i key, __mmask16 m, bool reg) {
    const __m512i ilo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i ihi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    const __mmask8 m0 = (__mmask8)m, m1 = (__mmask8)(m >> 8);
    const int c0 = __builtin_popcount((unsigned)m0), c1 = __builtin_popcount((unsigned)m1);
    const __m512i e0 = _mm512_permutex2var_epi32(nidx, ilo, key);
    const __m512i e1 = _mm512_permutex2var_epi32(nidx, ihi, key);
    if (reg) {
        _mm512_mask_storeu_epi64(out + c, (__mmask8)((1u << c0) - 1u), _mm512_maskz_compress_epi64(m0, e0));
        _mm512_mask_storeu_epi64(out + c + c0, (__mmask8)((1u << c1) - 1u), _mm512_maskz_compress_epi64(m1, e1));
    } else {
        _mm512_mask_compressstoreu_epi64(out + c, m0, e0);
        _mm512_mask_compressstoreu_epi64(out + c + c0, m1, e1);
    }
    return c + c0 + c1;
}

/* Whether this CPU takes the register-compress way above (AMD); decided once (a racing first
 * call computes the same value). */
static bool compress_in_register(void) {
    static int cached = -1;
    int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (v < 0) {
        const ts_cpu_info *ci = ts_get_cpu_info();
        v = ci && !strcmp(ci->vendor, "AuthenticAMD");
        __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    }
    return v;
}

static inline __m512i nidx16(uint32_t idx) { /* ~(idx + j) = ~idx - j */
    return _mm512_sub_epi32(_mm512_set1_epi32((int)~idx), iota16());
}

static inline __attribute__((always_inline)) int64_t select_gt_s32(const int32_t *sk, int64_t n, int32_t lo, uint32_t idx0, uint64_t *out, bool reg) {
    const __m512i tv = _mm512_set1_epi32(lo), bias = _mm512_set1_epi32((int)0x80000000u);
    const __m512i sixteen = _mm512_set1_epi32(16);
    __m512i ni = nidx16(idx0);
    int64_t c = 0, i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i s = _mm512_loadu_si512((const void *)(sk + i));
        c = emit16_entries(out, c, ni, _mm512_add_epi32(s, bias), _mm512_cmpgt_epi32_mask(s, tv), reg);
        ni = _mm512_sub_epi32(ni, sixteen);
    }
    if (i < n) { /* masked tail: lanes past n are not loaded and never selected */
        const __mmask16 valid = (__mmask16)((1u << (n - i)) - 1u);
        const __m512i s = _mm512_maskz_loadu_epi32(valid, sk + i);
        c = emit16_entries(out, c, ni, _mm512_add_epi32(s, bias), _mm512_mask_cmpgt_epi32_mask(valid, s, tv), reg);
    }
    return c;
}

static inline __attribute__((always_inline)) int64_t select_gt_s16(const int16_t *sk, int64_t n, int32_t lo, uint32_t idx0, uint64_t *out, bool reg) {
    const __m512i tv = _mm512_set1_epi16((short)lo), bias = _mm512_set1_epi32(0x8000);
    const __m512i sixteen = _mm512_set1_epi32(16);
    __m512i ni = nidx16(idx0);
    int64_t c = 0;
    for (int64_t i = 0; i < n; i += 32) {
        const __mmask32 valid = n - i >= 32 ? ~(__mmask32)0 : (__mmask32)((1u << (n - i)) - 1u);
        const __m512i s = n - i >= 32 ? _mm512_loadu_si512((const void *)(sk + i)) : _mm512_maskz_loadu_epi16(valid, sk + i);
        const __mmask32 m = _mm512_mask_cmpgt_epi16_mask(valid, s, tv);
        const __m512i k0 = _mm512_add_epi32(_mm512_cvtepi16_epi32(_mm512_castsi512_si256(s)), bias);
        const __m512i k1 = _mm512_add_epi32(_mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(s, 1)), bias);
        c = emit16_entries(out, c, ni, k0, (__mmask16)m, reg);
        ni = _mm512_sub_epi32(ni, sixteen);
        c = emit16_entries(out, c, ni, k1, (__mmask16)(m >> 16), reg);
        ni = _mm512_sub_epi32(ni, sixteen);
    }
    return c;
}

static inline __attribute__((always_inline)) int64_t emit16_idx(uint32_t *out, int64_t c, __m512i iv,
                                                                __mmask16 m, bool reg) {
    const int cnt = __builtin_popcount((unsigned)m);
    if (reg) _mm512_mask_storeu_epi32(out + c, (__mmask16)((1u << cnt) - 1u), _mm512_maskz_compress_epi32(m, iv));
    else _mm512_mask_compressstoreu_epi32(out + c, m, iv);
    return c + cnt;
}

static inline __attribute__((always_inline)) int64_t select_idx_gt_s32(const int32_t *sk, int64_t n, int32_t lo, uint32_t idx0, uint32_t *out, bool reg) {
    const __m512i tv = _mm512_set1_epi32(lo), sixteen = _mm512_set1_epi32(16);
    __m512i iv = _mm512_add_epi32(_mm512_set1_epi32((int)idx0), iota16());
    int64_t c = 0, i = 0;
    for (; i + 16 <= n; i += 16) {
        c = emit16_idx(out, c, iv, _mm512_cmpgt_epi32_mask(_mm512_loadu_si512((const void *)(sk + i)), tv), reg);
        iv = _mm512_add_epi32(iv, sixteen);
    }
    if (i < n) {
        const __mmask16 valid = (__mmask16)((1u << (n - i)) - 1u);
        c = emit16_idx(out, c, iv, _mm512_mask_cmpgt_epi32_mask(valid, _mm512_maskz_loadu_epi32(valid, sk + i), tv), reg);
    }
    return c;
}

static inline __attribute__((always_inline)) int64_t select_idx_gt_s16(const int16_t *sk, int64_t n, int32_t lo, uint32_t idx0, uint32_t *out, bool reg) {
    const __m512i tv = _mm512_set1_epi16((short)lo), sixteen = _mm512_set1_epi32(16);
    __m512i iv = _mm512_add_epi32(_mm512_set1_epi32((int)idx0), iota16());
    int64_t c = 0, i = 0;
    for (; i + 32 <= n; i += 32) {
        const __mmask32 m = _mm512_cmpgt_epi16_mask(_mm512_loadu_si512((const void *)(sk + i)), tv);
        c = emit16_idx(out, c, iv, (__mmask16)m, reg);
        iv = _mm512_add_epi32(iv, sixteen);
        c = emit16_idx(out, c, iv, (__mmask16)(m >> 16), reg);
        iv = _mm512_add_epi32(iv, sixteen);
    }
    if (i < n) {
        const __mmask32 valid = (__mmask32)((1u << (n - i)) - 1u);
        const __mmask32 m = _mm512_mask_cmpgt_epi16_mask(valid, _mm512_maskz_loadu_epi16(valid, sk + i), tv);
        c = emit16_idx(out, c, iv, (__mmask16)m, reg);
        iv = _mm512_add_epi32(iv, sixteen);
        c = emit16_idx(out, c, iv, (__mmask16)(m >> 16), reg);
    }
    return c;
}

/* Ties with t are kept up to index last: sk >= t there (sk > t - 1: t is a key, above
 * INT32_MIN and, for s16, within int16), sk > t after. */
int64_t ts__topk_dense_select_s32__avx512(const void *p, int64_t n, int32_t t, int64_t last, uint32_t idx0,
                                          uint64_t *out) {
    const int32_t *sk = (const int32_t *)p;
    const int64_t n0 = last + 1 < n ? last + 1 : n;
    if (compress_in_register()) {
        const int64_t c = select_gt_s32(sk, n0, t - 1, idx0, out, true);
        return c + select_gt_s32(sk + n0, n - n0, t, idx0 + (uint32_t)n0, out + c, true);
    }
    const int64_t c = select_gt_s32(sk, n0, t - 1, idx0, out, false);
    return c + select_gt_s32(sk + n0, n - n0, t, idx0 + (uint32_t)n0, out + c, false);
}

int64_t ts__topk_dense_select_s16__avx512(const void *p, int64_t n, int32_t t, int64_t last, uint32_t idx0,
                                          uint64_t *out) {
    const int16_t *sk = (const int16_t *)p;
    const int64_t n0 = last + 1 < n ? last + 1 : n;
    if (compress_in_register()) {
        const int64_t c = select_gt_s16(sk, n0, t - 1, idx0, out, true);
        return c + select_gt_s16(sk + n0, n - n0, t, idx0 + (uint32_t)n0, out + c, true);
    }
    const int64_t c = select_gt_s16(sk, n0, t - 1, idx0, out, false);
    return c + select_gt_s16(sk + n0, n - n0, t, idx0 + (uint32_t)n0, out + c, false);
}

int64_t ts__topk_dense_select_idx_s32__avx512(const void *p, int64_t n, int32_t t, int64_t last, uint32_t idx0,
                                              uint32_t *out) {
    const int32_t *sk = (const int32_t *)p;
    const int64_t n0 = last + 1 < n ? last + 1 : n;
    if (compress_in_register()) {
        const int64_t c = select_idx_gt_s32(sk, n0, t - 1, idx0, out, true);
        return c + select_idx_gt_s32(sk + n0, n - n0, t, idx0 + (uint32_t)n0, out + c, true);
    }
    const int64_t c = select_idx_gt_s32(sk, n0, t - 1, idx0, out, false);
    return c + select_idx_gt_s32(sk + n0, n - n0, t, idx0 + (uint32_t)n0, out + c, false);
}

int64_t ts__topk_dense_select_idx_s16__avx512(const void *p, int64_t n, int32_t t, int64_t last, uint32_t idx0,
                                              uint32_t *out) {
    const int16_t *sk = (const int16_t *)p;
    const int64_t n0 = last + 1 < n ? last + 1 : n;
    if (compress_in_register()) {
        const int64_t c = select_idx_gt_s16(sk, n0, t - 1, idx0, out, true);
        return c + select_idx_gt_s16(sk + n0, n - n0, t, idx0 + (uint32_t)n0, out + c, true);
    }
    const int64_t c = select_idx_gt_s16(sk, n0, t - 1, idx0, out, false);
    return c + select_idx_gt_s16(sk + n0, n - n0, t, idx0 + (uint32_t)n0, out + c, false);
}
