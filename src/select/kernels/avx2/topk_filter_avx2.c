/* AVX2 threshold filters: 32 values per test, one movemask walk per group with any survivor.
 * Once the threshold settles almost every group is rejected by a single vptest, so the loop
 * runs at load speed. Values equal to the threshold are rare (bf16 ties) and go to a second
 * mask that also checks the index. Survivors are appended in index order, as the generic
 * filter does. */
#include "select/topk_internal.h"

#include <immintrin.h>
#include <string.h>

/* Two loop shapes. Rows in cache: per up to HIT_GROUPS groups (of 64 bf16 or 32 f32 values) a
 * bitmap of the groups with a hit is set branch-free, then only the hit groups are re-read
 * from L1; a "skip this group?" branch mispredicts on every hit group (~17% of the groups of a
 * 1M bf16 row with k = 2048). Measured, min of 20 calls, batches of different rows: 8 x 1M
 * k 2048 1.08 -> 0.92 ms, 64 x 65536 k 512 1.40 -> 1.13 ms. (A single row timed over and
 * over is faster with the branch, 1 x 1M k 2048 75 -> 84 us: the predictor learns the row.)
 * Rows from DRAM (the batch exceeds L3; the *_stream variants): the branch per group, whose
 * mispredicts hide under the misses, plus a software prefetch 16 KB ahead, two per 128 bytes:
 * 64 x 1M bf16 k 2048 13.0 -> 10.4 ms, k 512 10.9 -> 8.2 ms (the bitmap loop with the prefetch:
 * 10.9 / 8.8). In cache the prefetches only compete with the loads. */
#define PF_BYTES 16384
#define PREFETCH(p) _mm_prefetch((const char *)(p) + PF_BYTES, _MM_HINT_T0)
#define HIT_GROUPS 16

/* Lanes in gt are appended; lanes in eq only when their index is below pidx. Both in lane
 * order so the buffer order matches the generic filter. */
static inline int64_t append_bf16(const uint16_t *u, int64_t base, unsigned gt, unsigned eq,
                                  uint32_t idx0, uint32_t pidx, uint64_t *out, int64_t c,
                                  int *nan) {
    unsigned all = gt | eq;
    while (all) {
        unsigned l = (unsigned)__builtin_ctz(all);
        all &= all - 1;
        uint32_t idx = idx0 + (uint32_t)(base + l);
        if (!((gt >> l) & 1u) && idx >= pidx) continue;
        uint32_t v = u[base + l];
        out[c++] = ts__topk_entry(ts__topk_key_bf16(v), idx);
        if ((v & 0x7fffu) > 0x7f80u) *nan = 1;
    }
    return c;
}

static inline __m256 widen_bf16(const uint16_t *p) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

/* _CMP_NLE_UQ: x > thr or unordered (NaN); _CMP_EQ_OQ: x == thr (-0 == +0). */
#define FILTER_BODY(LOAD, APPENDFN)                                                              \
    const __m256 t = _mm256_set1_ps(thr);                                                      \
    int64_t c = 0, i = 0;                                                                      \
    for (; i + 32 <= n; i += 32) {                                                             \
        __m256 v0 = LOAD(i), v1 = LOAD(i + 8), v2 = LOAD(i + 16), v3 = LOAD(i + 24);           \
        __m256 g0 = _mm256_cmp_ps(v0, t, _CMP_NLE_UQ), g1 = _mm256_cmp_ps(v1, t, _CMP_NLE_UQ); \
        __m256 g2 = _mm256_cmp_ps(v2, t, _CMP_NLE_UQ), g3 = _mm256_cmp_ps(v3, t, _CMP_NLE_UQ); \
        __m256 e0 = _mm256_cmp_ps(v0, t, _CMP_EQ_OQ), e1 = _mm256_cmp_ps(v1, t, _CMP_EQ_OQ);   \
        __m256 e2 = _mm256_cmp_ps(v2, t, _CMP_EQ_OQ), e3 = _mm256_cmp_ps(v3, t, _CMP_EQ_OQ);   \
        __m256 any = _mm256_or_ps(_mm256_or_ps(_mm256_or_ps(g0, g1), _mm256_or_ps(g2, g3)),    \
                                  _mm256_or_ps(_mm256_or_ps(e0, e1), _mm256_or_ps(e2, e3)));   \
        if (_mm256_testz_ps(any, any)) continue;                                               \
        c = APPENDFN(u, i, (unsigned)_mm256_movemask_ps(g0), (unsigned)_mm256_movemask_ps(e0), \
                     idx0, pidx, out, c, nan);                                                 \
        c = APPENDFN(u, i + 8, (unsigned)_mm256_movemask_ps(g1),                               \
                     (unsigned)_mm256_movemask_ps(e1), idx0, pidx, out, c, nan);               \
        c = APPENDFN(u, i + 16, (unsigned)_mm256_movemask_ps(g2),                              \
                     (unsigned)_mm256_movemask_ps(e2), idx0, pidx, out, c, nan);               \
        c = APPENDFN(u, i + 24, (unsigned)_mm256_movemask_ps(g3),                              \
                     (unsigned)_mm256_movemask_ps(e3), idx0, pidx, out, c, nan);               \
    }

/* Exact admission test for one value (the SIMD pre-tests let through a superset). */
static inline int admit(float f, float thr, uint32_t idx, uint32_t pidx) {
    return f > thr || f != f || (f == thr && idx < pidx);
}

static inline __attribute__((always_inline)) int64_t filter_f32(const void *x, int64_t n, uint32_t idx0, float thr,
                                 uint32_t pidx, uint64_t *out, int *nan, const int pf) {
    const float *f = (const float *)x;
    const uint32_t *u = (const uint32_t *)x;
    const __m256 t = _mm256_set1_ps(thr);
    int64_t c = 0, i = 0;
    /* One compare per 8 values: x >= thr or NaN; ties are sorted out by admit(). */
    if (!pf) {
        /* Two steps per up to HIT_GROUPS groups of 32: a bitmap of the groups with a hit (set branch-free),
         * then the hit groups again from L1. A "skip this group?" branch would mispredict on every
         * hit group: ~17% of the 64-value groups of a 1M bf16 row with k = 2048. */
        while (i + 32 <= n) {
            const int64_t ng = (n - i) / 32 < HIT_GROUPS ? (n - i) / 32 : HIT_GROUPS;
            uint64_t hits = 0;
            for (int64_t g = 0; g < ng; g++) {
                const float *q = f + i + 32 * g;
                __m256 g0 = _mm256_cmp_ps(_mm256_loadu_ps(q), t, _CMP_NLT_UQ);
                __m256 g1 = _mm256_cmp_ps(_mm256_loadu_ps(q + 8), t, _CMP_NLT_UQ);
                __m256 g2 = _mm256_cmp_ps(_mm256_loadu_ps(q + 16), t, _CMP_NLT_UQ);
                __m256 g3 = _mm256_cmp_ps(_mm256_loadu_ps(q + 24), t, _CMP_NLT_UQ);
                __m256 any = _mm256_or_ps(_mm256_or_ps(g0, g1), _mm256_or_ps(g2, g3));
                hits |= (uint64_t)(_mm256_movemask_ps(any) != 0) << g;
            }
            while (hits) {
                const int64_t b = i + 32 * (int64_t)__builtin_ctzll(hits);
                hits &= hits - 1;
                uint32_t m = (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(f + b), t, _CMP_NLT_UQ)) |
                             (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(f + b + 8), t, _CMP_NLT_UQ)) << 8 |
                             (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(f + b + 16), t, _CMP_NLT_UQ)) << 16 |
                             (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(f + b + 24), t, _CMP_NLT_UQ)) << 24;
                while (m) {
                    int64_t j = b + __builtin_ctz(m);
                    m &= m - 1;
                    uint32_t idx = idx0 + (uint32_t)j;
                    if (!admit(f[j], thr, idx, pidx)) continue;
                    out[c++] = ts__topk_entry(ts__topk_key_f32(u[j]), idx);
                    if (f[j] != f[j]) *nan = 1;
                }
            }
            i += 32 * ng;
        }
    }
    for (; i + 32 <= n; i += 32) { /* rows from DRAM: a test per group, a prefetch ahead */
        PREFETCH(f + i);
        PREFETCH(f + i + 16);
        __m256 g0 = _mm256_cmp_ps(_mm256_loadu_ps(f + i), t, _CMP_NLT_UQ);
        __m256 g1 = _mm256_cmp_ps(_mm256_loadu_ps(f + i + 8), t, _CMP_NLT_UQ);
        __m256 g2 = _mm256_cmp_ps(_mm256_loadu_ps(f + i + 16), t, _CMP_NLT_UQ);
        __m256 g3 = _mm256_cmp_ps(_mm256_loadu_ps(f + i + 24), t, _CMP_NLT_UQ);
        __m256 any = _mm256_or_ps(_mm256_or_ps(g0, g1), _mm256_or_ps(g2, g3));
        if (_mm256_testz_ps(any, any)) continue;
        uint32_t m = (uint32_t)_mm256_movemask_ps(g0) | (uint32_t)_mm256_movemask_ps(g1) << 8 |
                     (uint32_t)_mm256_movemask_ps(g2) << 16 | (uint32_t)_mm256_movemask_ps(g3) << 24;
        while (m) {
            int64_t j = i + __builtin_ctz(m);
            m &= m - 1;
            uint32_t idx = idx0 + (uint32_t)j;
            if (!admit(f[j], thr, idx, pidx)) continue;
            out[c++] = ts__topk_entry(ts__topk_key_f32(u[j]), idx);
            if (f[j] != f[j]) *nan = 1;
        }
    }
    for (; i < n; i++) {
        uint32_t idx = idx0 + (uint32_t)i;
        if (!admit(f[i], thr, idx, pidx)) continue;
        out[c++] = ts__topk_entry(ts__topk_key_f32(u[i]), idx);
        if (f[i] != f[i]) *nan = 1;
    }
    return c;
}

static inline float bf16_f32(uint16_t v) {
    uint32_t w = (uint32_t)v << 16;
    float f;
    memcpy(&f, &w, 4);
    return f;
}

/* Threshold above +0: for such thresholds the raw bf16 bits compare as int16 in value order
 * (every negative pattern is below), so the fast path is one vpcmpgtw against T - 1 per 16
 * values ("x >= T", NaN above +inf included) and a vptest per 64. Only a group with a hit
 * computes the exact greater / equal masks (ties cut at pidx by a lane mask), so survivors are
 * appended without a scalar re-test. Negative NaNs are below T as int16; they are the largest
 * raw patterns (0xFF81..0xFFFF), so a running unsigned max of the raw bits catches them, and
 * positive NaNs are caught among the survivors. */
static inline __attribute__((always_inline)) int64_t filter_bf16_positive(const uint16_t *u, int64_t n, uint32_t idx0, float thr,
                                           uint32_t pidx, uint64_t *out, int *nan, const int pf) {
    uint32_t tb;
    memcpy(&tb, &thr, 4);
    tb >>= 16; /* >= 1: thr > 0 */
    const __m256i t = _mm256_set1_epi16((short)tb), tm1 = _mm256_set1_epi16((short)(tb - 1));
    __m256i mx = _mm256_setzero_si256();
    int64_t c = 0, i = 0;
    uint32_t pos_nan = 0;
    /* ties win only below pidx: lanes j < lim of a group starting at i */
    const int64_t lim0 = pidx > idx0 ? (int64_t)(pidx - idx0) : 0;
    if (!pf) {
        /* as in the f32 filter: a bitmap of hit groups per up to HIT_GROUPS groups of 64, then the hit
         * groups from L1, so no branch per group */
        while (i + 64 <= n) {
            const int64_t ng = (n - i) / 64 < HIT_GROUPS ? (n - i) / 64 : HIT_GROUPS;
            uint64_t hits = 0;
            for (int64_t g = 0; g < ng; g++) {
                const uint16_t *q = u + i + 64 * g;
                __m256i v[4];
                for (int h = 0; h < 4; h++) v[h] = _mm256_loadu_si256((const __m256i *)(q + 16 * h));
                __m256i ge = _mm256_or_si256(_mm256_or_si256(_mm256_cmpgt_epi16(v[0], tm1), _mm256_cmpgt_epi16(v[1], tm1)),
                                             _mm256_or_si256(_mm256_cmpgt_epi16(v[2], tm1), _mm256_cmpgt_epi16(v[3], tm1)));
                mx = _mm256_max_epu16(mx, _mm256_max_epu16(_mm256_max_epu16(v[0], v[1]), _mm256_max_epu16(v[2], v[3])));
                hits |= (uint64_t)(_mm256_movemask_epi8(ge) != 0) << g;
            }
            while (hits) {
                const int64_t gi = i + 64 * (int64_t)__builtin_ctzll(hits);
                hits &= hits - 1;
                for (int h = 0; h < 2; h++) {
                    const int64_t base = gi + 32 * h;
                    const __m256i a = _mm256_loadu_si256((const __m256i *)(u + base));
                    const __m256i b = _mm256_loadu_si256((const __m256i *)(u + base + 16));
                    /* one bit per value (the even bits of the byte masks) */
                    uint64_t m = ((uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpgt_epi16(a, t))) |
                                 ((uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpgt_epi16(b, t)) << 32);
                    uint64_t e = ((uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi16(a, t))) |
                                 ((uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi16(b, t)) << 32);
                    const int64_t lim = lim0 - base;
                    if (e && lim < 32) e &= lim <= 0 ? 0 : (1ull << (2 * lim)) - 1;
                    m = (m | e) & 0x5555555555555555ull;
                    while (m) {
                        int64_t j = base + (__builtin_ctzll(m) >> 1);
                        m &= m - 1;
                        pos_nan |= (uint32_t)(u[j] > 0x7f80u); /* positive here: above +inf is NaN */
                        out[c++] = ts__topk_entry(ts__topk_key_bf16(u[j]), idx0 + (uint32_t)j);
                    }
                }
            }
            i += 64 * ng;
        }
    }
    for (; i + 64 <= n; i += 64) { /* rows from DRAM: a test per group, a prefetch ahead */
        PREFETCH(u + i);
        PREFETCH(u + i + 32);
        __m256i v[4];
        for (int g = 0; g < 4; g++) v[g] = _mm256_loadu_si256((const __m256i *)(u + i + 16 * g));
        __m256i ge = _mm256_or_si256(_mm256_or_si256(_mm256_cmpgt_epi16(v[0], tm1), _mm256_cmpgt_epi16(v[1], tm1)),
                                     _mm256_or_si256(_mm256_cmpgt_epi16(v[2], tm1), _mm256_cmpgt_epi16(v[3], tm1)));
        mx = _mm256_max_epu16(mx, _mm256_max_epu16(_mm256_max_epu16(v[0], v[1]), _mm256_max_epu16(v[2], v[3])));
        if (_mm256_testz_si256(ge, ge)) continue;
        for (int h = 0; h < 2; h++) {
            const __m256i a = v[2 * h], b = v[2 * h + 1];
            const int64_t base = i + 32 * h;
            /* one bit per value (the even bits of the byte masks) */
            uint64_t m = ((uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpgt_epi16(a, t))) |
                         ((uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpgt_epi16(b, t)) << 32);
            uint64_t e = ((uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi16(a, t))) |
                         ((uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi16(b, t)) << 32);
            const int64_t lim = lim0 - base;
            if (e && lim < 32) e &= lim <= 0 ? 0 : (1ull << (2 * lim)) - 1;
            m = (m | e) & 0x5555555555555555ull;
            while (m) {
                int64_t j = base + (__builtin_ctzll(m) >> 1);
                m &= m - 1;
                pos_nan |= (uint32_t)(u[j] > 0x7f80u); /* positive here: above +inf is NaN */
                out[c++] = ts__topk_entry(ts__topk_key_bf16(u[j]), idx0 + (uint32_t)j);
            }
        }
    }
    for (; i < n; i++) {
        uint32_t idx = idx0 + (uint32_t)i;
        float fv = bf16_f32(u[i]);
        if (!admit(fv, thr, idx, pidx)) continue;
        out[c++] = ts__topk_entry(ts__topk_key_bf16(u[i]), idx);
        if (fv != fv) *nan = 1;
    }
    /* unsigned max of the raw bits over the vector part: above 0xFF80 is a negative NaN */
    __m128i m8 = _mm_max_epu16(_mm256_castsi256_si128(mx), _mm256_extracti128_si256(mx, 1));
    m8 = _mm_max_epu16(m8, _mm_srli_si128(m8, 8));
    m8 = _mm_max_epu16(m8, _mm_srli_si128(m8, 4));
    m8 = _mm_max_epu16(m8, _mm_srli_si128(m8, 2));
    if ((_mm_cvtsi128_si32(m8) & 0xffff) > 0xff80 || pos_nan) *nan = 1;
    return c;
}

static inline __attribute__((always_inline)) int64_t filter_bf16(const void *x, int64_t n, uint32_t idx0, float thr,
                                  uint32_t pidx, uint64_t *out, int *nan, const int pf) {
    const uint16_t *u = (const uint16_t *)x;
    if (thr > 0.0f) return filter_bf16_positive(u, n, idx0, thr, pidx, out, nan, pf);
    /* T <= 0 (a rare threshold for scores): widened to f32, no prefetch */
#define LOAD_BF16(j) widen_bf16(u + (j))
    FILTER_BODY(LOAD_BF16, append_bf16)
    for (; i < n; i++) {
        uint32_t w = (uint32_t)u[i] << 16;
        float fv;
        memcpy(&fv, &w, 4);
        unsigned gt = !(fv <= thr), eq = fv == thr;
        c = append_bf16(u, i, gt, eq, idx0, pidx, out, c, nan);
    }
    return c;
}

int64_t ts__topk_filter_f32__avx2(const void *x, int64_t n, uint32_t idx0, float thr,
                                  uint32_t pidx, uint64_t *out, int *nan) {
    return filter_f32(x, n, idx0, thr, pidx, out, nan, 0);
}
int64_t ts__topk_filter_f32_stream__avx2(const void *x, int64_t n, uint32_t idx0, float thr,
                                         uint32_t pidx, uint64_t *out, int *nan) {
    return filter_f32(x, n, idx0, thr, pidx, out, nan, 1);
}
int64_t ts__topk_filter_bf16__avx2(const void *x, int64_t n, uint32_t idx0, float thr,
                                   uint32_t pidx, uint64_t *out, int *nan) {
    return filter_bf16(x, n, idx0, thr, pidx, out, nan, 0);
}
int64_t ts__topk_filter_bf16_stream__avx2(const void *x, int64_t n, uint32_t idx0, float thr,
                                          uint32_t pidx, uint64_t *out, int *nan) {
    return filter_bf16(x, n, idx0, thr, pidx, out, nan, 1);
}
