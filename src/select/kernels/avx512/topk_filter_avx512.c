/* AVX-512 threshold filters: the AVX2 filters' two loop shapes (a branch-free bitmap of hit
 * groups for rows in cache, a test per group plus a prefetch for rows from DRAM) with zmm
 * compares into mask registers, so a bf16 group of 128 bytes costs 2 loads and 5 ALU ops
 * instead of 4 loads and ~15. A hit group gets exact 64- (bf16) or 32-lane (f32) survivor
 * masks (greater, or equal with an index below pidx, or NaN), and its survivors are appended
 * in index order, the first two branch-free (emit_mask), so the buffer holds the same entries
 * in the same order as the generic filter's. */
#include "select/topk_internal.h"

#include <immintrin.h>
#include <string.h>

#define PF_BYTES 16384
#define PREFETCH(p) _mm_prefetch((const char *)(p) + PF_BYTES, _MM_HINT_T0)
/* Rows in cache get a prefetch too, nearer: on this Ice Lake the L2 streamer alone does not
 * keep up with the loop on rows from L3 (measured 1 x 1M bf16 k 512: 89 -> 76 us with 2 - 8 KB,
 * 1 x 1M k 2048 112 -> 87 us, 64 x 65536 k 512 ~1.3x; 1 x 65536 in L2 unchanged). The AVX2
 * filter gains as much here from it (1M-value filter calls 81 -> 67 us) but has none: on the
 * Zen 3 it was tuned on, prefetches on rows in cache only competed with the loads. */
#define PF_CACHED_BYTES 4096
#define HIT_GROUPS 16 /* 32 or 64 (one call's block): 1 x 1M k 512 5% slower, 64K rows even */

/* Lanes j < lim of a group (ties admitted below pidx), applied without a test for ties: bf16
 * rows hold dozens of values equal to the threshold, a branch on them would mispredict. */
static inline uint64_t lane_limit(int64_t lim) { return lim <= 0 ? 0 : lim >= 64 ? ~0ull : (1ull << lim) - 1; }

/* Survivor keys: raw bf16 bits above +0 (key = bits | 0x8000), any bf16, f32. */
enum { KEY_BF16_POS, KEY_BF16, KEY_F32 };
static inline __attribute__((always_inline)) uint32_t key_at(const void *q, int64_t j, const int kind) {
    if (kind == KEY_BF16_POS) return ((const uint16_t *)q)[j] | 0x8000u;
    if (kind == KEY_BF16) return ts__topk_key_bf16(((const uint16_t *)q)[j]);
    return ts__topk_key_f32(((const uint32_t *)q)[j]);
}

/* Entries of the set bits of m (bit j: q[j], index gidx + j; top = the group's last lane) at
 * out + c, in order. Survivors come one or two per hit group at the densities the threshold
 * leaves (~1% of a 64K row's values with k = 512: 70% of hit groups hold one, 94% at most
 * two), so the first two are written branch-free (a store without a survivor goes to a sink:
 * exactly the survivors reach out) and only the rest take a loop. A loop over every survivor
 * bit, or vpcompressd over the 16-lane chunks that hold one, mispredicts at its exit on
 * almost every hit group: with it, 1 x 65536 bf16 k 512 was 1.15x the AVX2 path, 1.3x with
 * this. */
static inline __attribute__((always_inline)) int64_t emit_mask(const void *q, uint64_t m, int top, uint32_t gidx,
                                                                uint64_t *out, int64_t c, const int kind) {
    const int pc = __builtin_popcountll(m);
    const uint64_t m1 = m & (m - 1);
    const uint64_t guard = 1ull << top; /* a lane of the group: valid to read when m has no bit */
    const int64_t j0 = __builtin_ctzll(m | guard), j1 = __builtin_ctzll(m1 | guard);
    uint64_t sink[2];
    uint64_t *const p0 = pc >= 1 ? out + c : sink, *const p1 = pc >= 2 ? out + c + 1 : sink + 1;
    *p0 = ts__topk_entry(key_at(q, j0, kind), gidx + (uint32_t)j0);
    *p1 = ts__topk_entry(key_at(q, j1, kind), gidx + (uint32_t)j1);
    if (__builtin_expect(pc > 2, 0)) {
        int64_t d = c + 2;
        for (uint64_t r = m1 & (m1 - 1); r; r &= r - 1) {
            const int64_t j = __builtin_ctzll(r);
            out[d++] = ts__topk_entry(key_at(q, j, kind), gidx + (uint32_t)j);
        }
    }
    return c + pc;
}

/* ---- bf16 with a threshold above +0: raw bits compare as int16 in value order ----
 * A group is 64 values (two zmm). Hit test: signed max of the two vectors > T - 1 (x >= T,
 * NaNs above +inf included). NaN: running maxima of every group, unsigned for negative NaNs
 * (0xFF81..0xFFFF: the largest raw patterns) and signed for positive ones (above 0x7F80), one
 * op per group more each, cheaper than a test among survivors. */

/* Survivors of the 64 values at q (index base of q[0] in the call); lim0 = lanes of the call
 * before pidx. */
static inline int64_t emit_bf16_pos(const uint16_t *q, int64_t base, __m512i t, int64_t lim0, uint32_t idx0,
                                    uint64_t *out, int64_t c) {
    const __m512i v0 = _mm512_loadu_si512((const void *)q), v1 = _mm512_loadu_si512((const void *)(q + 32));
    const uint64_t gt = (uint64_t)_mm512_cmpgt_epi16_mask(v0, t) | (uint64_t)_mm512_cmpgt_epi16_mask(v1, t) << 32;
    const uint64_t eq = (uint64_t)_mm512_cmpeq_epi16_mask(v0, t) | (uint64_t)_mm512_cmpeq_epi16_mask(v1, t) << 32;
    return emit_mask(q, gt | (eq & lane_limit(lim0 - base)), 63, idx0 + (uint32_t)base, out, c, KEY_BF16_POS);
}

/* Bit g: group g of the ng at q holds a value >= T (tm1 = T - 1); folds the groups into the
 * NaN maxima. */
static inline __attribute__((always_inline)) uint64_t hits_bf16_pos(const uint16_t *q, int64_t ng, __m512i tm1,
                                                                     __m512i *umx, __m512i *smx) {
    uint64_t hits = 0;
    __m512i um = *umx, sm = *smx;
    for (int64_t g = 0; g < ng; g++, q += 64) {
        _mm_prefetch((const char *)q + PF_CACHED_BYTES, _MM_HINT_T0);
        _mm_prefetch((const char *)q + PF_CACHED_BYTES + 64, _MM_HINT_T0);
        const __m512i v0 = _mm512_loadu_si512((const void *)q), v1 = _mm512_loadu_si512((const void *)(q + 32));
        const __m512i s = _mm512_max_epi16(v0, v1);
        um = _mm512_max_epu16(um, _mm512_max_epu16(v0, v1));
        sm = _mm512_max_epi16(sm, s);
        hits |= (uint64_t)(_mm512_cmpgt_epi16_mask(s, tm1) != 0) << g;
    }
    *umx = um;
    *smx = sm;
    return hits;
}

static inline __attribute__((always_inline)) int64_t filter_bf16_positive(const uint16_t *u, int64_t n, uint32_t idx0,
                                                                           float thr, uint32_t pidx, uint64_t *out,
                                                                           int *nan, const int pf) {
    uint32_t tb;
    memcpy(&tb, &thr, 4);
    tb >>= 16; /* >= 1: thr > 0 */
    const __m512i t = _mm512_set1_epi16((short)tb), tm1 = _mm512_set1_epi16((short)(tb - 1));
    __m512i umx = _mm512_setzero_si512(), smx = umx;
    const int64_t lim0 = pidx > idx0 ? (int64_t)(pidx - idx0) : 0;
    int64_t c = 0, i = 0;
    if (!pf) {
        while (i + 64 <= n) {
            const int64_t ng = (n - i) / 64 < HIT_GROUPS ? (n - i) / 64 : HIT_GROUPS;
            uint64_t hits = hits_bf16_pos(u + i, ng, tm1, &umx, &smx);
            while (hits) {
                const int64_t gi = i + 64 * (int64_t)__builtin_ctzll(hits);
                hits &= hits - 1;
                c = emit_bf16_pos(u + gi, gi, t, lim0, idx0, out, c);
            }
            i += 64 * ng;
        }
    }
    for (; i + 64 <= n; i += 64) { /* rows from DRAM: a test per group, a prefetch ahead */
        PREFETCH(u + i);
        PREFETCH(u + i + 32);
        const __m512i v0 = _mm512_loadu_si512((const void *)(u + i)), v1 = _mm512_loadu_si512((const void *)(u + i + 32));
        const __m512i s = _mm512_max_epi16(v0, v1);
        umx = _mm512_max_epu16(umx, _mm512_max_epu16(v0, v1));
        smx = _mm512_max_epi16(smx, s);
        if (!_mm512_cmpgt_epi16_mask(s, tm1)) continue;
        c = emit_bf16_pos(u + i, i, t, lim0, idx0, out, c);
    }
    if (i < n) { /* the tail as one zero-padded group: +0 is below T and not a NaN */
        uint16_t q[64];
        memset(q, 0, sizeof q);
        memcpy(q, u + i, (size_t)(n - i) * 2);
        const __m512i v0 = _mm512_loadu_si512((const void *)q), v1 = _mm512_loadu_si512((const void *)(q + 32));
        umx = _mm512_max_epu16(umx, _mm512_max_epu16(v0, v1));
        smx = _mm512_max_epi16(smx, _mm512_max_epi16(v0, v1));
        c = emit_bf16_pos(q, i, t, lim0, idx0, out, c);
    }
    /* unsigned above 0xFF80: a negative NaN; signed above 0x7F80: a positive one */
    if (_mm512_cmpgt_epu16_mask(umx, _mm512_set1_epi16((short)0xff80)) |
        _mm512_cmpgt_epi16_mask(smx, _mm512_set1_epi16(0x7f80)))
        *nan = 1;
    return c;
}

/* ---- IEEE compares: f32, and bf16 with a threshold at or below +0 (widened to f32) ----
 * A group is 32 values. Hit test: x >= T or unordered (NLT_UQ); survivors: x > T or unordered
 * (NLE_UQ), or x == T (EQ_OQ, -0 == +0) in lanes before pidx. */
static inline __m512 load16_f32(const void *x, int64_t j) { return _mm512_loadu_ps((const float *)x + j); }
static inline __m512 load16_bf16(const void *x, int64_t j) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)x + j)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

/* Survivors of the 32 values at x + j (lanes outside valid ignored). */
static inline __attribute__((always_inline)) int64_t emit_cmp(const void *x, int64_t j, uint32_t valid, __m512 t,
                                                               int64_t lim0, uint32_t idx0, uint64_t *out, int64_t c,
                                                               __mmask16 *pnan, const int bf16) {
    const __m512 v0 = bf16 ? load16_bf16(x, j) : load16_f32(x, j);
    const __m512 v1 = bf16 ? load16_bf16(x, j + 16) : load16_f32(x, j + 16);
    const uint32_t gt = (uint32_t)_mm512_cmp_ps_mask(v0, t, _CMP_NLE_UQ) | (uint32_t)_mm512_cmp_ps_mask(v1, t, _CMP_NLE_UQ) << 16;
    const uint32_t eq = (uint32_t)_mm512_cmp_ps_mask(v0, t, _CMP_EQ_OQ) | (uint32_t)_mm512_cmp_ps_mask(v1, t, _CMP_EQ_OQ) << 16;
    const uint32_t m = (gt | (eq & (uint32_t)lane_limit(lim0 - j))) & valid;
    *pnan |= _mm512_mask_cmp_ps_mask((__mmask16)m, v0, v0, _CMP_UNORD_Q) |
             _mm512_mask_cmp_ps_mask((__mmask16)(m >> 16), v1, v1, _CMP_UNORD_Q);
    const char *q = (const char *)x + j * (bf16 ? 2 : 4);
    return emit_mask(q, m, 31, idx0 + (uint32_t)j, out, c, bf16 ? KEY_BF16 : KEY_F32);
}

#define HIT32(LOAD, j) \
    (_mm512_kor(_mm512_cmp_ps_mask(LOAD(x, (j)), t, _CMP_NLT_UQ), _mm512_cmp_ps_mask(LOAD(x, (j) + 16), t, _CMP_NLT_UQ)))

static inline __attribute__((always_inline)) int64_t filter_cmp(const void *x, int64_t n, uint32_t idx0, float thr,
                                                                 uint32_t pidx, uint64_t *out, int *nan, const int pf,
                                                                 const int bf16) {
    const __m512 t = _mm512_set1_ps(thr);
    const int64_t lim0 = pidx > idx0 ? (int64_t)(pidx - idx0) : 0;
    __mmask16 anynan = 0;
    int64_t c = 0, i = 0;
#define LOADX(x, j) (bf16 ? load16_bf16(x, j) : load16_f32(x, j))
    if (!pf) {
        while (i + 32 <= n) {
            const int64_t ng = (n - i) / 32 < HIT_GROUPS ? (n - i) / 32 : HIT_GROUPS;
            uint64_t hits = 0;
            for (int64_t g = 0; g < ng; g++) hits |= (uint64_t)(HIT32(LOADX, i + 32 * g) != 0) << g;
            while (hits) {
                const int64_t j = i + 32 * (int64_t)__builtin_ctzll(hits);
                hits &= hits - 1;
                c = emit_cmp(x, j, ~0u, t, lim0, idx0, out, c, &anynan, bf16);
            }
            i += 32 * ng;
        }
    }
    for (; i + 32 <= n; i += 32) { /* rows from DRAM: a test per group, a prefetch ahead */
        if (!bf16) {
            PREFETCH((const float *)x + i);
            PREFETCH((const float *)x + i + 16);
        }
        if (!HIT32(LOADX, i)) continue;
        c = emit_cmp(x, i, ~0u, t, lim0, idx0, out, c, &anynan, bf16);
    }
#undef LOADX
    if (i < n) { /* the tail as one zero-padded group, lanes past n masked off */
        uint32_t q[32];
        memset(q, 0, sizeof q);
        memcpy(q, (const char *)x + i * (bf16 ? 2 : 4), (size_t)(n - i) * (bf16 ? 2 : 4));
        const int64_t lim = lim0 > i ? lim0 - i : 0;
        c = emit_cmp(q, 0, (1u << (n - i)) - 1u, t, lim, idx0 + (uint32_t)i, out, c, &anynan, bf16);
    }
    if (anynan) *nan = 1;
    return c;
}

static inline __attribute__((always_inline)) int64_t filter_bf16(const void *x, int64_t n, uint32_t idx0, float thr,
                                                                  uint32_t pidx, uint64_t *out, int *nan, const int pf) {
    if (thr > 0.0f) return filter_bf16_positive((const uint16_t *)x, n, idx0, thr, pidx, out, nan, pf);
    return filter_cmp(x, n, idx0, thr, pidx, out, nan, 0, 1); /* T <= 0: rare for scores, no prefetch */
}

int64_t ts__topk_filter_f32__avx512(const void *x, int64_t n, uint32_t idx0, float thr, uint32_t pidx,
                                    uint64_t *out, int *nan) {
    return filter_cmp(x, n, idx0, thr, pidx, out, nan, 0, 0);
}
int64_t ts__topk_filter_f32_stream__avx512(const void *x, int64_t n, uint32_t idx0, float thr, uint32_t pidx,
                                           uint64_t *out, int *nan) {
    return filter_cmp(x, n, idx0, thr, pidx, out, nan, 1, 0);
}
int64_t ts__topk_filter_bf16__avx512(const void *x, int64_t n, uint32_t idx0, float thr, uint32_t pidx,
                                     uint64_t *out, int *nan) {
    return filter_bf16(x, n, idx0, thr, pidx, out, nan, 0);
}
int64_t ts__topk_filter_bf16_stream__avx512(const void *x, int64_t n, uint32_t idx0, float thr, uint32_t pidx,
                                            uint64_t *out, int *nan) {
    return filter_bf16(x, n, idx0, thr, pidx, out, nan, 1);
}
