/* AVX2 quantiser kernels: bit-identical to kernels/generic/quant_generic.c.
 *
 * The per-token FP8 block is one pass over registers: a 128-value bf16 block is 8 ymm loads,
 * |x| max on the raw 16-bit patterns (integer max orders every non-NaN value and puts NaN
 * last, like the generic path), then widen, scale and encode from the same registers. Blocks
 * that hold inf or NaN take the exact generic route, which keeps the fast path free of NaN
 * fix-ups: with finite x and sf >= amax / 448, every product is finite and at most ~448. */
#include "numerics/quant_kernels.h"
#include "numerics/kernels/avx2/cvt_avx2_inl.h"

#include <immintrin.h>
#include <math.h>

/* Pack 4 x 8 codes (32-bit lanes, 0..255) into 32 bytes in element order. */
static inline __m256i pack_codes32(__m256i c0, __m256i c1, __m256i c2, __m256i c3) {
    __m256i p01 = _mm256_packus_epi32(c0, c1);
    __m256i p23 = _mm256_packus_epi32(c2, c3);
    __m256i b = _mm256_packus_epi16(p01, p23);
    return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* e4m3 codes of y with NaN lanes forced to 0x7F (the generic ts__enc_e4m3_scaled rule). */
static inline __m256i e4m3_scaled_codes(__m256 y) {
    __m256i c = ts__avx2_e4m3_codes(y);
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(y, y, _CMP_UNORD_Q));
    return _mm256_blendv_epi8(c, _mm256_set1_epi32((int)TS__E4M3_NAN), nan);
}

static inline bool finite_f32(float v) { return (ts__bits_from_f32(v) & 0x7FFFFFFFu) < 0x7F800000u; }

static inline __m256 bf16x8_to_f32(__m128i h) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline uint32_t hmax_epu16(__m256i v) {
    __m128i m = _mm_max_epu16(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    /* minpos on the complement gives the max */
    m = _mm_xor_si128(m, _mm_set1_epi16(-1));
    return (~(uint32_t)_mm_cvtsi128_si32(_mm_minpos_epu16(m))) & 0xFFFFu;
}

static inline uint32_t hmax_epu32(__m256i v) {
    __m128i m = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
    return (uint32_t)_mm_cvtsi128_si32(m);
}

/* ---- bf16 ---- */

static uint32_t absmax_bf16(const void *x, int64_t n) {
    const uint16_t *p = (const uint16_t *)x;
    const __m256i mask = _mm256_set1_epi16(0x7FFF);
    __m256i m = _mm256_setzero_si256();
    int64_t j = 0;
    const int64_t nv = n - n % 16;
    for (; j < nv; j += 16)
        m = _mm256_max_epu16(m, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(p + j)), mask));
    uint32_t r = hmax_epu16(m);
    for (; j < n; j++) {
        uint32_t a = p[j] & 0x7FFFu;
        r = a > r ? a : r;
    }
    return r << 16;
}

__attribute__((noinline)) static void enc_e4m3_bf16_any(const void *x, int64_t n, float inv, uint8_t *q) {
    const uint16_t *p = (const uint16_t *)x;
    const __m256 vi = _mm256_set1_ps(inv);
    int64_t j = 0;
    const int64_t nv = n - n % 32;
    for (; j < nv; j += 32) {
        __m256i c[4];
        for (int t = 0; t < 4; t++) {
            __m256 v = bf16x8_to_f32(_mm_loadu_si128((const __m128i *)(p + j + 8 * t)));
            c[t] = e4m3_scaled_codes(_mm256_mul_ps(v, vi));
        }
        _mm256_storeu_si256((__m256i *)(q + j), pack_codes32(c[0], c[1], c[2], c[3]));
    }
    for (; j < n; j++) q[j] = ts__enc_e4m3_scaled(ts_bf16_to_f32(p[j]) * inv);
}

/* Fast e4m3 codes of a finite 128-value bf16 block whose non-zero |y| all lie in the e4m3
 * normal range [2^-6, 448 (+ rounding)]: RNE at f32 bit 20 plus the exponent rebias is one
 * integer add chain; zeros go negative and packus saturates them to code 0. Works on |x| in
 * 16-bit lanes: unpack with zero puts |x| << 16 (the f32 bits) in 32-bit lanes, and the
 * unpack lane order is undone by the matching packus. The sign is or-ed back from the input. */
static inline __m256i e4m3_mag_normal(__m256 ay) {
    __m256i a = _mm256_castps_si256(ay);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(a, 20), _mm256_set1_epi32(1));
    a = _mm256_add_epi32(a, _mm256_set1_epi32(0x7FFFF - (960 << 20)));
    return _mm256_srai_epi32(_mm256_add_epi32(a, lsb), 20);
}

/* Smallest |x| bits (bf16) whose product with inv reaches the e4m3 normal range 2^-6. The
 * product is monotone in |x|, so start from the quotient and step to the exact boundary. */
static uint32_t normal_threshold_bf16(float inv) {
    if (!(inv > 0.0f) || inv > 0x1p127f) return 0x7F80u; /* inv 0, NaN or inf: no fast path */
    float t = 0x1p-6f / inv;
    uint32_t h = ts__bits_from_f32(t) >> 16;
    if (h >= 0x7F80u) return 0x7F80u;
    while (h > 0 && ts__f32_from_bits((h - 1) << 16) * inv >= 0x1p-6f) h--;
    while (h < 0x7F80u && ts__f32_from_bits(h << 16) * inv < 0x1p-6f) h++;
    return h;
}

/* Any run of bf16: 32-value groups whose non-zero |x| all scale into the e4m3 normal range
 * (and are finite) take the short integer path, the rest the general encoder. inv comes from
 * the run's own scale (inv <= 448 / amax up to rounding), so no product passes 464. */
static void enc_e4m3_bf16(const void *x, int64_t n, float inv, uint8_t *q) {
    const uint16_t *p = (const uint16_t *)x;
    const uint32_t thr = normal_threshold_bf16(inv);
    if (thr >= 0x7F80u) { /* inv 0 / NaN / tiny: even zeros need the exact route (0 * NaN) */
        enc_e4m3_bf16_any(x, n, inv, q);
        return;
    }
    const __m256i mask = _mm256_set1_epi16(0x7FFF), zero = _mm256_setzero_si256();
    const __m256i vthr = _mm256_set1_epi16((short)thr), vhi = _mm256_set1_epi16(0x7F7F);
    const __m256i s80 = _mm256_set1_epi8((char)0x80);
    const __m256 vi = _mm256_set1_ps(inv);
    int64_t j = 0;
    const int64_t nv = n - n % 32;
    for (; j < nv; j += 32) {
        __m256i r[2], ra[2];
        r[0] = _mm256_loadu_si256((const __m256i *)(p + j));
        r[1] = _mm256_loadu_si256((const __m256i *)(p + j + 16));
        __m256i bad = zero;
        for (int u = 0; u < 2; u++) {
            ra[u] = _mm256_and_si256(r[u], mask);
            /* signed 16-bit compares are exact: |x| bits <= 0x7FFF */
            __m256i small = _mm256_andnot_si256(_mm256_cmpeq_epi16(ra[u], zero), _mm256_cmpgt_epi16(vthr, ra[u]));
            bad = _mm256_or_si256(bad, _mm256_or_si256(small, _mm256_cmpgt_epi16(ra[u], vhi)));
        }
        if (!_mm256_testz_si256(bad, bad)) {
            enc_e4m3_bf16_any(p + j, 32, inv, q + j);
            continue;
        }
        __m256i h[2];
        for (int u = 0; u < 2; u++) {
            __m256 lo = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, ra[u]));
            __m256 hi = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, ra[u]));
            h[u] = _mm256_packus_epi32(e4m3_mag_normal(_mm256_mul_ps(lo, vi)), e4m3_mag_normal(_mm256_mul_ps(hi, vi)));
        }
        __m256i sign = _mm256_and_si256(_mm256_packs_epi16(r[0], r[1]), s80);
        __m256i bytes = _mm256_or_si256(_mm256_packus_epi16(h[0], h[1]), sign);
        _mm256_storeu_si256((__m256i *)(q + j), _mm256_permute4x64_epi64(bytes, _MM_SHUFFLE(3, 1, 2, 0)));
    }
    if (j < n) enc_e4m3_bf16_any(p + j, n - j, inv, q + j);
}

/* Blocks of 128 in three passes over at most 64 blocks (16 KB of bf16, which stays in L1 for
 * the second read): |x| max and smallest non-zero |x| per block, then the scales (independent
 * divisions pipeline instead of stalling each block), then the codes. */
#define CHUNK_BLOCKS 64

/* DeepGEMM's scale (ts__fp8_scale, or ts__fp4_scale's !rne branch: rq = fl32(1/Qmax)) and its
 * reciprocal for 8 blocks (amax as bf16 |x| bits): the same IEEE operations, vectorised so
 * the reciprocal divisions pipeline. */
static inline __m256 dg_scale8(const uint32_t *amax16, bool ue8m0, float rq, float *sf, float *inv) {
    __m256i ab = _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)amax16), 16);
    __m256i nan = _mm256_cmpgt_epi32(ab, _mm256_set1_epi32(0x7F800000));
    __m256 a = _mm256_max_ps(_mm256_castsi256_ps(ab), _mm256_set1_ps(1e-4f)); /* clamp; ab >= 0 */
    __m256 s = _mm256_mul_ps(a, _mm256_set1_ps(rq));
    __m256i sb = _mm256_blendv_epi8(_mm256_castps_si256(s), _mm256_set1_epi32((int)TS__CANON_NAN_BITS), nan);
    if (ue8m0) { /* ceil_to_ue8m0: sf > 0 here, NaN gives exponent 255 + 1, clamped to 254 */
        __m256i e = _mm256_srli_epi32(sb, 23);
        __m256i frac = _mm256_and_si256(sb, _mm256_set1_epi32(0x7FFFFF));
        __m256i up = _mm256_andnot_si256(_mm256_cmpeq_epi32(frac, _mm256_setzero_si256()), _mm256_set1_epi32(1));
        e = _mm256_min_epi32(_mm256_max_epi32(_mm256_add_epi32(e, up), _mm256_set1_epi32(1)), _mm256_set1_epi32(254));
        sb = _mm256_slli_epi32(e, 23);
    }
    __m256 sv = _mm256_castsi256_ps(sb);
    _mm256_storeu_ps(sf, sv);
    _mm256_storeu_ps(inv, _mm256_div_ps(_mm256_set1_ps(1.0f), sv));
    return sv;
}

/* |x| max and smallest non-zero |x| of 128 bf16 values, as bf16 bits (all zero: min 0x10000,
 * never "tiny"). */
static inline void stats128_bf16(const uint16_t *pb, uint32_t *amax, uint32_t *amin) {
    const __m256i mask = _mm256_set1_epi16(0x7FFF), one = _mm256_set1_epi16(1);
    __m256i mx = _mm256_setzero_si256(), mn = _mm256_set1_epi16(-1);
    for (int t = 0; t < 8; t++) {
        __m256i ra = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(pb + 16 * t)), mask);
        mx = _mm256_max_epu16(mx, ra);
        mn = _mm256_min_epu16(mn, _mm256_sub_epi16(ra, one)); /* zero wraps to 0xFFFF */
    }
    *amax = hmax_epu16(mx);
    __m128i m8 = _mm_min_epu16(_mm256_castsi256_si128(mn), _mm256_extracti128_si256(mn, 1));
    *amin = ((uint32_t)_mm_cvtsi128_si32(_mm_minpos_epu16(m8)) & 0xFFFFu) + 1u;
}

/* e4m3 codes of 128 bf16 values times inv, given bounds (bf16 bits) on their |x| max and
 * smallest non-zero |x|: the integer path when all non-zero products are e4m3 normals, else
 * the exact routes. */
static inline void enc128_bf16(const uint16_t *pb, uint32_t amax, uint32_t amin, float inv, uint8_t *qb) {
    if (amax >= 0x7F80u) { /* inf / NaN: exact generic route */
        ts__qk_enc_e4m3_bf16__generic(pb, 128, inv, qb);
        return;
    }
    if (amin < 0x7F80u && ts__f32_from_bits(amin << 16) * inv < 0x1p-6f) {
        enc_e4m3_bf16_any(pb, 128, inv, qb); /* some codes are e4m3 subnormals */
        return;
    }
    const __m256i mask = _mm256_set1_epi16(0x7FFF), zero = _mm256_setzero_si256();
    const __m256i s80 = _mm256_set1_epi8((char)0x80);
    const __m256 vi = _mm256_set1_ps(inv);
    for (int t = 0; t < 8; t += 2) {
        __m256i r[2], h[2];
        for (int u = 0; u < 2; u++) {
            r[u] = _mm256_loadu_si256((const __m256i *)(pb + 16 * (t + u)));
            __m256i ra = _mm256_and_si256(r[u], mask);
            __m256 lo = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, ra));
            __m256 hi = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, ra));
            h[u] = _mm256_packus_epi32(e4m3_mag_normal(_mm256_mul_ps(lo, vi)),
                                       e4m3_mag_normal(_mm256_mul_ps(hi, vi)));
        }
        /* signed saturation maps negative bf16 to 0x80 and the rest to <= 0x7F: & 0x80 is the
         * sign byte, in the same lane order as the packed codes */
        __m256i sign = _mm256_and_si256(_mm256_packs_epi16(r[0], r[1]), s80);
        __m256i bytes = _mm256_or_si256(_mm256_packus_epi16(h[0], h[1]), sign);
        _mm256_storeu_si256((__m256i *)(qb + 16 * t), _mm256_permute4x64_epi64(bytes, _MM_SHUFFLE(3, 1, 2, 0)));
    }
}

static void fp8_chunk128_bf16(const uint16_t *p, int64_t nblk, bool ue8m0, uint8_t *q, float *sf) {
    uint32_t amax[CHUNK_BLOCKS], amin[CHUNK_BLOCKS];
    float inv[CHUNK_BLOCKS];
    for (int64_t b = 0; b < nblk; b++) stats128_bf16(p + 128 * b, &amax[b], &amin[b]);
    int64_t b8 = 0;
    for (; b8 + 8 <= nblk; b8 += 8) (void)dg_scale8(amax + b8, ue8m0, 1.0f / 448.0f, sf + b8, inv + b8);
    for (; b8 < nblk; b8++) {
        sf[b8] = ts__fp8_scale(amax[b8] << 16, ue8m0);
        inv[b8] = 1.0f / sf[b8];
    }
    for (int64_t b = 0; b < nblk; b++) {
        /* The first pass waits on DRAM while the others run from L1: fetch the data that
         * follows this chunk (the next row, when rows are contiguous) during the compute. */
        const char *ahead = (const char *)(p + 128 * nblk) + 256 * b;
        for (int l = 0; l < 256; l += 64) _mm_prefetch(ahead + l, _MM_HINT_T0);
        enc128_bf16(p + 128 * b, amax[b], amin[b], inv[b], q + 128 * b);
    }
}

/* Per-block FP8 tiles: fold a row segment's per-block |x| max / smallest non-zero |x| (f32
 * bits) into amax / amin, then encode with the tile's scales. With gran 128 the tile bounds
 * pick the same route for every row as the per-token chunk does per block. */
static void blk_stats_bf16(const void *x, int64_t n, int64_t g, uint32_t *amax, uint32_t *amin) {
    const uint16_t *p = (const uint16_t *)x;
    for (int64_t b = 0, j0 = 0; j0 < n; b++, j0 += g) {
        uint32_t mx, mn = 0; /* 0: no bound, the general encoder */
        if (g == 128 && n - j0 >= 128) {
            stats128_bf16(p + j0, &mx, &mn);
            mn = mn > 0xFFFFu ? 0xFFFFFFFFu : mn << 16;
            mx <<= 16;
        } else {
            mx = absmax_bf16(p + j0, n - j0 < g ? n - j0 : g);
        }
        amax[b] = mx > amax[b] ? mx : amax[b];
        amin[b] = mn < amin[b] ? mn : amin[b];
    }
}

static void blk_enc_bf16(const void *x, int64_t n, int64_t g, const uint32_t *amax, const uint32_t *amin,
                         const float *inv, uint8_t *q) {
    const uint16_t *p = (const uint16_t *)x;
    for (int64_t b = 0, j0 = 0; j0 < n; b++, j0 += g) {
        if (g == 128 && n - j0 >= 128 && amin[b] != 0)
            enc128_bf16(p + j0, amax[b] >> 16, amin[b] == 0xFFFFFFFFu ? 0x10000u : amin[b] >> 16, inv[b], q + j0);
        else
            enc_e4m3_bf16(p + j0, n - j0 < g ? n - j0 : g, inv[b], q + j0);
    }
}

static void fp8_row_bf16(const void *x, int64_t n, int64_t gran_k, bool ue8m0, uint8_t *q, float *sf) {
    const uint16_t *p = (const uint16_t *)x;
    int64_t b = 0, j0 = 0;
    if (gran_k == 128) {
        const int64_t full = n / 128;
        for (; b < full; b += CHUNK_BLOCKS) {
            int64_t nblk = full - b < CHUNK_BLOCKS ? full - b : CHUNK_BLOCKS;
            fp8_chunk128_bf16(p + 128 * b, nblk, ue8m0, q + 128 * b, sf + b);
        }
        b = full;
        j0 = full * 128;
    }
    for (; j0 < n; b++, j0 += gran_k) {
        int64_t len = n - j0 < gran_k ? n - j0 : gran_k;
        sf[b] = ts__fp8_scale(absmax_bf16(p + j0, len), ue8m0);
        enc_e4m3_bf16(p + j0, len, 1.0f / sf[b], q + j0);
    }
}

/* ---- f32 ---- */

static uint32_t absmax_f32(const void *x, int64_t n) {
    const uint32_t *p = (const uint32_t *)x;
    const __m256i mask = _mm256_set1_epi32(0x7FFFFFFF);
    __m256i m = _mm256_setzero_si256();
    int64_t j = 0;
    const int64_t nv = n - n % 8;
    for (; j < nv; j += 8)
        m = _mm256_max_epu32(m, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(p + j)), mask));
    uint32_t r = hmax_epu32(m);
    for (; j < n; j++) {
        uint32_t a = p[j] & 0x7FFFFFFFu;
        r = a > r ? a : r;
    }
    return r;
}

static void enc_e4m3_f32(const void *x, int64_t n, float inv, uint8_t *q) {
    const float *p = (const float *)x;
    const __m256 vi = _mm256_set1_ps(inv);
    int64_t j = 0;
    const int64_t nv = n - n % 32;
    for (; j < nv; j += 32) {
        __m256i c[4];
        for (int t = 0; t < 4; t++)
            c[t] = e4m3_scaled_codes(_mm256_mul_ps(_mm256_loadu_ps(p + j + 8 * t), vi));
        _mm256_storeu_si256((__m256i *)(q + j), pack_codes32(c[0], c[1], c[2], c[3]));
    }
    for (; j < n; j++) q[j] = ts__enc_e4m3_scaled(p[j] * inv);
}

static void fp8_row_f32(const void *x, int64_t n, int64_t gran_k, bool ue8m0, uint8_t *q, float *sf) {
    const float *p = (const float *)x;
    for (int64_t b = 0, j0 = 0; j0 < n; b++, j0 += gran_k) {
        int64_t len = n - j0 < gran_k ? n - j0 : gran_k;
        sf[b] = ts__fp8_scale(absmax_f32(p + j0, len), ue8m0);
        enc_e4m3_f32(p + j0, len, 1.0f / sf[b], q + j0);
    }
}

/* ---- f16: amax on raw half bits, encode after F16C widening ---- */

static uint32_t absmax_f16(const void *x, int64_t n) {
    const uint16_t *p = (const uint16_t *)x;
    const __m256i mask = _mm256_set1_epi16(0x7FFF);
    __m256i m = _mm256_setzero_si256();
    int64_t j = 0;
    const int64_t nv = n - n % 16;
    for (; j < nv; j += 16)
        m = _mm256_max_epu16(m, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(p + j)), mask));
    uint32_t r = hmax_epu16(m);
    for (; j < n; j++) {
        uint32_t a = p[j] & 0x7FFFu;
        r = a > r ? a : r;
    }
    /* |x| bits order the same in f16 and f32, so widening the max gives the f32 max. */
    return ts__bits_from_f32(ts_f16_to_f32((uint16_t)r));
}

static void enc_e4m3_f16(const void *x, int64_t n, float inv, uint8_t *q) {
    const uint16_t *p = (const uint16_t *)x;
    const __m256 vi = _mm256_set1_ps(inv);
    int64_t j = 0;
    const int64_t nv = n - n % 32;
    for (; j < nv; j += 32) {
        __m256i c[4];
        for (int t = 0; t < 4; t++) {
            __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + j + 8 * t)));
            c[t] = e4m3_scaled_codes(_mm256_mul_ps(v, vi));
        }
        _mm256_storeu_si256((__m256i *)(q + j), pack_codes32(c[0], c[1], c[2], c[3]));
    }
    for (; j < n; j++) q[j] = ts__enc_e4m3_scaled(ts_f16_to_f32(p[j]) * inv);
}

static void fp8_row_f16(const void *x, int64_t n, int64_t gran_k, bool ue8m0, uint8_t *q, float *sf) {
    const uint16_t *p = (const uint16_t *)x;
    for (int64_t b = 0, j0 = 0; j0 < n; b++, j0 += gran_k) {
        int64_t len = n - j0 < gran_k ? n - j0 : gran_k;
        sf[b] = ts__fp8_scale(absmax_f16(p + j0, len), ue8m0);
        enc_e4m3_f16(p + j0, len, 1.0f / sf[b], q + j0);
    }
}

/* ---- e2m1 (fp4) ---- */

#define TS__DEF_AVX2_FP4(SFX, T, LOAD8)                                                         \
    static uint32_t absmax_nonan_##SFX(const void *x, int64_t n) {                              \
        const T *p = (const T *)x;                                                               \
        const __m256i absm = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F800000); \
        __m256i m = _mm256_setzero_si256();                                                      \
        int64_t j = 0;                                                                           \
        const int64_t nv = n - n % 8;                                                            \
        for (; j < nv; j += 8) {                                                                 \
            __m256i a = _mm256_and_si256(_mm256_castps_si256(LOAD8(p + j)), absm);               \
            a = _mm256_andnot_si256(_mm256_cmpgt_epi32(a, inf), a); /* NaN -> 0 */              \
            m = _mm256_max_epu32(m, a);                                                          \
        }                                                                                        \
        uint32_t r = hmax_epu32(m);                                                              \
        uint32_t t = ts__qk_absmax_nonan_##SFX##__generic(p + j, n - j);                         \
        return t > r ? t : r;                                                                    \
    }                                                                                            \
    static void enc_e2m1_##SFX(const void *x, int64_t n, float inv, bool dg, uint8_t *q) {      \
        const T *p = (const T *)x;                                                               \
        const __m256 vi = _mm256_set1_ps(inv);                                                   \
        int64_t j = 0;                                                                           \
        const int64_t nv = n - n % 8;                                                            \
        for (; j < nv; j += 8) {                                                                 \
            __m256 y = _mm256_mul_ps(LOAD8(p + j), vi);                                          \
            __m256i c = dg ? ts__avx2_e2m1_dg_codes(y) : ts__avx2_e2m1_codes(y);                 \
            uint32_t w = ts__avx2_e2m1_pack8(c);                                                 \
            memcpy(q + j / 2, &w, 4);                                                            \
        }                                                                                        \
        ts__qk_enc_e2m1_##SFX##__generic(p + j, n - j, inv, dg, q + j / 2);                      \
    }

static inline __m256 load8_bf16(const uint16_t *p) { return bf16x8_to_f32(_mm_loadu_si128((const __m128i *)p)); }
static inline __m256 load8_f32(const float *p) { return _mm256_loadu_ps(p); }
/* the exact widening (ts_f16_to_f32) keeps signalling NaNs; only NaN-ness matters here */
static inline __m256 load8_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline __m256 load8_f16_exact(const uint16_t *p) { return ts__avx2_f16_decode(_mm_loadu_si128((const __m128i *)p)); }

TS__DEF_AVX2_FP4(bf16, uint16_t, load8_bf16)
TS__DEF_AVX2_FP4(f16, uint16_t, load8_f16)
TS__DEF_AVX2_FP4(f32, float, load8_f32)

/* Per-token FP4 rows. bf16 with gran_k % 32 == 0 works like the per-token FP8 chunk: |x| max
 * per block on raw bf16 bits, the scales 8 blocks at a time (divisions pipeline), then the
 * codes from L1. Codes come from 16-bit lanes: every e2m1 threshold t is bf16-exact, so
 * with a = |y| bits, a > t  <=>  ceil(a / 2^16) > hi16(t), and a >= t  <=>  floor(a / 2^16)
 * >= hi16(t); 16 values then cost one compare per threshold instead of two. That path needs
 * finite x and a finite inv > 0 (so y is never NaN and its sign is x's); other blocks take
 * the generic route. Everything else runs block by block on the AVX2 amax / encode above. */

/* e2m1 code | sign in 16-bit lanes of 16 values y = x * inv (x: raw bf16 bits r), given
 * up = ceil(|y| bits / 2^16) and, for RNE, dn1 = floor(|y| bits / 2^16) + 1. */
static inline __m256i e2m1x16_codes(__m256i r, __m256i up, __m256i dn1, bool rne) {
    const __m256i zero = _mm256_setzero_si256();
    const __m256i s = _mm256_and_si256(_mm256_srli_epi16(r, 12), _mm256_set1_epi16(8));
    const __m256i gt025 = _mm256_cmpgt_epi16(up, _mm256_set1_epi16(0x3E80));
    if (!rne) {
        /* DeepGEMM's strict thresholds are rounding half down: from 1.0 up, that is
         * (a + 2^21 - 1) >> 22 on the f32 bits, = (up + 31) >> 6 here, minus the rebias 252
         * (saturating, then clamped to 7); below 1.0 (e2m1 subnormals) two compares, and
         * the max of both is right on either side of 1.0. No sign on code 0 (|y| <= 0.25). */
        __m256i cn = _mm256_srli_epi16(_mm256_add_epi16(up, _mm256_set1_epi16(31)), 6);
        cn = _mm256_min_epu16(_mm256_subs_epu16(cn, _mm256_set1_epi16(252)), _mm256_set1_epi16(7));
        const __m256i gt075 = _mm256_cmpgt_epi16(up, _mm256_set1_epi16(0x3F40));
        const __m256i cs = _mm256_sub_epi16(_mm256_sub_epi16(zero, gt025), gt075);
        return _mm256_or_si256(_mm256_max_epi16(cn, cs), _mm256_and_si256(s, gt025));
    }
    /* RNE: ties to the even code, so >= where the upper neighbour is even (a >= t <=> dn1 >
     * hi16(t), sharing the > constants) */
    __m256i c = _mm256_sub_epi16(zero, gt025);
#define GT(t) c = _mm256_sub_epi16(c, _mm256_cmpgt_epi16(up, _mm256_set1_epi16(t)))
#define GE(t) c = _mm256_sub_epi16(c, _mm256_cmpgt_epi16(dn1, _mm256_set1_epi16(t)))
    GE(0x3F40); GT(0x3FA0); GE(0x3FE0); GT(0x4020); GE(0x4060); GT(0x40A0);
#undef GT
#undef GE
    return _mm256_or_si256(c, s);
}

/* e2m1x16_codes of x * inv: the product in f32, then up / dn1 from its bits. The unpacks
 * widen lanes in a shuffled order that the packus below undoes. */
static inline __m256i e2m1x16_bf16(__m256i r, __m256 vi, bool rne) {
    const __m256i zero = _mm256_setzero_si256();
    const __m256i ra = _mm256_and_si256(r, _mm256_set1_epi16(0x7FFF));
    const __m256i ylo = _mm256_castps_si256(_mm256_mul_ps(_mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, ra)), vi));
    const __m256i yhi = _mm256_castps_si256(_mm256_mul_ps(_mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, ra)), vi));
    const __m256i r16 = _mm256_set1_epi32(0xFFFF), r1 = _mm256_set1_epi32(0x10000);
    const __m256i up = _mm256_packus_epi32(_mm256_srli_epi32(_mm256_add_epi32(ylo, r16), 16),
                                           _mm256_srli_epi32(_mm256_add_epi32(yhi, r16), 16));
    __m256i dn1 = up;
    if (rne)
        dn1 = _mm256_packus_epi32(_mm256_srli_epi32(_mm256_add_epi32(ylo, r1), 16),
                                  _mm256_srli_epi32(_mm256_add_epi32(yhi, r1), 16));
    return e2m1x16_codes(r, up, dn1, rne);
}

/* e2m1x16_codes of x * 2^k (inv a power of two, k <= 100; ue8m0 scales): the product of a
 * normal bf16 is exact and its bf16 bits are |x| bits + k * 128 (vk), one saturating add
 * clamped to [0, inf]; results that would underflow land far below 0.25 (zero and subnormal
 * x included, as k <= 100), as the true products do. */
static inline __m256i e2m1x16_bf16_pow2(__m256i r, __m256i vk, bool rne) {
    const __m256i ra = _mm256_and_si256(r, _mm256_set1_epi16(0x7FFF));
    __m256i up = _mm256_max_epi16(_mm256_adds_epi16(ra, vk), _mm256_setzero_si256());
    up = _mm256_min_epi16(up, _mm256_set1_epi16(0x7F80)); /* overflow reads as inf */
    return e2m1x16_codes(r, up, _mm256_add_epi16(up, _mm256_set1_epi16(1)), rne);
}

/* Two e2m1x16_bf16 results (elements 0..15, 16..31) -> 16 bytes, element 2i in the low
 * nibble of byte i: pack to bytes, pair neighbours with one multiply-add (lo + 16 * hi),
 * pack again and gather the 4-byte groups the in-lane packs scattered. */
static inline __m128i e2m1_pack32(__m256i c0, __m256i c1) {
    __m256i b = _mm256_packus_epi16(c0, c1);
    __m256i w = _mm256_maddubs_epi16(b, _mm256_set1_epi16(0x1001));
    __m256i p = _mm256_packus_epi16(w, w);
    return _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 0, 4, 1, 5)));
}

/* TileKernels' scale (ts__fp4_scale's rne branch) for 8 blocks of finite amax. */
static inline void tk_scale8(const uint32_t *amax16, bool ue8m0, float *sf, float *inv, uint32_t *e) {
    __m256 a = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)amax16), 16));
    a = _mm256_max_ps(a, _mm256_set1_ps(6.0f * 0x1p-126f));
    const __m256 six = _mm256_set1_ps(6.0f);
    __m256 s = _mm256_div_ps(a, six);
    if (!ue8m0) {
        _mm256_storeu_ps(sf, s);
        _mm256_storeu_ps(inv, _mm256_div_ps(six, a));
        _mm256_storeu_si256((__m256i *)e, _mm256_setzero_si256());
        return;
    }
    const __m256i one = _mm256_set1_epi32(1), b127 = _mm256_set1_epi32(127);
    __m256i x = _mm256_srli_epi32(_mm256_sub_epi32(_mm256_castps_si256(s), one), 23);
    x = _mm256_sub_epi32(_mm256_add_epi32(x, one), b127); /* uint32 wrap as the scalar rule */
    _mm256_storeu_si256((__m256i *)sf, _mm256_slli_epi32(_mm256_add_epi32(b127, x), 23));
    _mm256_storeu_si256((__m256i *)inv, _mm256_slli_epi32(_mm256_sub_epi32(b127, x), 23));
    _mm256_storeu_si256((__m256i *)e, _mm256_and_si256(_mm256_add_epi32(x, b127), _mm256_set1_epi32(0xFF)));
}

/* Values per chunk: 4 KB of bf16, read again from L1 by the encode pass. */
#define FP4_CHUNK_VALUES 2048
#define FP4_CHUNK_BLOCKS 64

/* Always inlined with constant rne (and gk 32, the common gran), so each variant gets its own
 * unrolled loops with its constants in registers. */
static inline __attribute__((always_inline)) void
fp4_chunk_bf16_impl(const uint16_t *p, int64_t nblk, int64_t gk, bool ue8m0, bool rne, uint8_t *q,
                    float *sf, uint8_t *e) {
    uint32_t amax[FP4_CHUNK_BLOCKS], e32[FP4_CHUNK_BLOCKS];
    float inv[FP4_CHUNK_BLOCKS];
    uint8_t fast[FP4_CHUNK_BLOCKS / 8]; /* bit b % 8: block b takes the 16-bit-lane path */
    const __m256i mask = _mm256_set1_epi16(0x7FFF);
    for (int64_t b = 0; b < nblk; b++) {
        __m256i mx = _mm256_setzero_si256();
        for (int64_t j = 0; j < gk; j += 32) {
            const __m256i *v = (const __m256i *)(p + gk * b + j);
            mx = _mm256_max_epu16(mx, _mm256_and_si256(_mm256_loadu_si256(v), mask));
            mx = _mm256_max_epu16(mx, _mm256_and_si256(_mm256_loadu_si256(v + 1), mask));
        }
        amax[b] = hmax_epu16(mx); /* NaN sorts above inf */
    }
    int64_t b8 = 0;
    for (; b8 + 8 <= nblk; b8 += 8) {
        if (rne) {
            tk_scale8(amax + b8, ue8m0, sf + b8, inv + b8, e32 + b8);
        } else {
            __m256 sv = dg_scale8(amax + b8, ue8m0, 1.0f / 6.0f, sf + b8, inv + b8);
            _mm256_storeu_si256((__m256i *)(e32 + b8), _mm256_srli_epi32(_mm256_castps_si256(sv), 23));
        }
        /* fast: finite x (amax < inf) and 0 < inv < inf */
        const __m256 vi = _mm256_loadu_ps(inv + b8);
        __m256 ok = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(0x7F80),
                                                           _mm256_loadu_si256((const __m256i *)(amax + b8))));
        ok = _mm256_and_ps(ok, _mm256_cmp_ps(vi, _mm256_setzero_ps(), _CMP_GT_OQ));
        ok = _mm256_and_ps(ok, _mm256_cmp_ps(vi, _mm256_set1_ps(INFINITY), _CMP_LT_OQ));
        fast[b8 / 8] = (uint8_t)_mm256_movemask_ps(ok);
    }
    if (b8 < nblk) fast[b8 / 8] = 0;
    for (int64_t b = 0; b < nblk; b++) {
        /* the tail, and blocks with inf / NaN (TileKernels' amax skips NaN): exact scalar */
        if (b >= b8 || amax[b] >= 0x7F80u) {
            const uint16_t *pb = p + gk * b;
            uint32_t a = rne ? ts__qk_absmax_nonan_bf16__generic(pb, gk) : amax[b] << 16;
            ts__fp4_scale_t s = ts__fp4_scale(a, ue8m0, rne);
            sf[b] = s.sf, inv[b] = s.inv, e32[b] = s.e;
        }
        e[b] = (uint8_t)e32[b];
    }
    for (int64_t b = 0; b < nblk; b++) {
        const uint16_t *pb = p + gk * b;
        uint8_t *qb = q + gk / 2 * b;
        /* fetch what follows this chunk while the encode pass runs from L1 */
        const char *ahead = (const char *)(p + gk * nblk) + 2 * gk * b;
        for (int64_t l = 0; l < 2 * gk; l += 64) _mm_prefetch(ahead + l, _MM_HINT_T0);
        if (!((fast[b / 8] >> (b % 8)) & 1)) {
            ts__qk_enc_e2m1_bf16__generic(pb, gk, inv[b], !rne, qb);
            continue;
        }
        const uint32_t ib = ts__bits_from_f32(inv[b]);
        const int k = (int)(ib >> 23) - 127; /* inv = 2^k when its mantissa is zero */
        if ((ib & 0x7FFFFFu) == 0 && k <= 100) {
            const __m256i vk = _mm256_set1_epi16((short)(k * 128));
            for (int64_t j = 0; j < gk; j += 32) {
                __m256i c0 = e2m1x16_bf16_pow2(_mm256_loadu_si256((const __m256i *)(pb + j)), vk, rne);
                __m256i c1 = e2m1x16_bf16_pow2(_mm256_loadu_si256((const __m256i *)(pb + j + 16)), vk, rne);
                _mm_storeu_si128((__m128i *)(qb + j / 2), e2m1_pack32(c0, c1));
            }
            continue;
        }
        const __m256 vi = _mm256_set1_ps(inv[b]);
        for (int64_t j = 0; j < gk; j += 32) {
            __m256i c0 = e2m1x16_bf16(_mm256_loadu_si256((const __m256i *)(pb + j)), vi, rne);
            __m256i c1 = e2m1x16_bf16(_mm256_loadu_si256((const __m256i *)(pb + j + 16)), vi, rne);
            _mm_storeu_si128((__m128i *)(qb + j / 2), e2m1_pack32(c0, c1));
        }
    }
}

static void fp4_chunk_bf16(const uint16_t *p, int64_t nblk, int64_t gk, bool ue8m0, bool rne,
                           uint8_t *q, float *sf, uint8_t *e) {
    if (gk == 32) {
        if (rne) fp4_chunk_bf16_impl(p, nblk, 32, ue8m0, true, q, sf, e);
        else fp4_chunk_bf16_impl(p, nblk, 32, ue8m0, false, q, sf, e);
    } else {
        if (rne) fp4_chunk_bf16_impl(p, nblk, gk, ue8m0, true, q, sf, e);
        else fp4_chunk_bf16_impl(p, nblk, gk, ue8m0, false, q, sf, e);
    }
}

#define TS__DEF_AVX2_FP4_ROW(SFX, T, CHUNKED)                                                           \
    static inline void fp4_block_##SFX(const void *x, int64_t len, bool ue8m0, bool rne,         \
                                       uint8_t *q, float *sf, uint8_t *e) {                      \
        uint32_t a = rne ? absmax_nonan_##SFX(x, len) : absmax_##SFX(x, len);                    \
        ts__fp4_scale_t s = ts__fp4_scale(a, ue8m0, rne);                                        \
        enc_e2m1_##SFX(x, len, s.inv, !rne, q);                                                  \
        *sf = s.sf;                                                                              \
        *e = s.e;                                                                                \
    }                                                                                            \
    static void fp4_row_##SFX(const void *x, int64_t n, int64_t gran_k, bool ue8m0, bool rne,    \
                              uint8_t *q, float *sf, uint8_t *e) {                               \
        int64_t b = 0, j0 = 0;                                                                   \
        if (CHUNKED && gran_k % 32 == 0) {                                                       \
            const int64_t full = n / gran_k;                                                     \
            int64_t step = FP4_CHUNK_VALUES / gran_k;                                            \
            step = step < 1 ? 1 : step > FP4_CHUNK_BLOCKS ? FP4_CHUNK_BLOCKS : step;             \
            for (; b < full; b += step)                                                          \
                fp4_chunk_bf16((const uint16_t *)x + gran_k * b, full - b < step ? full - b : step, \
                               gran_k, ue8m0, rne, q + gran_k / 2 * b, sf + b, e + b);           \
            b = full, j0 = full * gran_k;                                                        \
        }                                                                                        \
        for (; j0 < n; b++, j0 += gran_k)                                                        \
            fp4_block_##SFX((const T *)x + j0, n - j0 < gran_k ? n - j0 : gran_k, \
                            ue8m0, rne, q + j0 / 2, sf + b, e + b);                              \
    }

TS__DEF_AVX2_FP4_ROW(bf16, uint16_t, 1)
TS__DEF_AVX2_FP4_ROW(f16, uint16_t, 0)
TS__DEF_AVX2_FP4_ROW(f32, float, 0)

/* ---- cast-back: decode, scale, canonical NaN, round to the output kind ----
 * Real data has finite scales and no NaN codes, so no product can be NaN: those 16 / 32
 * values skip the NaN canonicalisation (and bf16 its NaN branch); the rest take the full
 * route, which still gives the generic bits. */

static inline __m256 scale_canon(__m256 d, __m256 vs) {
    __m256 v = _mm256_mul_ps(d, vs);
    const __m256 canon = _mm256_castsi256_ps(_mm256_set1_epi32((int)TS__CANON_NAN_BITS));
    return _mm256_blendv_ps(v, canon, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

/* ts_f32_to_bf16 for lanes known not to be NaN (inf rounds to inf by the same add). */
static inline __m256i bf16_rne_nonan(__m256 x) {
    __m256i u = _mm256_castps_si256(x);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    return _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb)), 16);
}

/* 16 f32 (a: elements 0..7, b: 8..15) rounded to the output kind and stored; `nonan`
 * promises no NaN lane. */
static inline void st16_f32(float *o, __m256 a, __m256 b, bool nonan) {
    (void)nonan;
    _mm256_storeu_ps(o, a);
    _mm256_storeu_ps(o + 8, b);
}
static inline void st16_bf16(uint16_t *o, __m256 a, __m256 b, bool nonan) {
    __m256i r = nonan ? ts__avx2_pack_u16x16(bf16_rne_nonan(a), bf16_rne_nonan(b))
                      : ts__avx2_pack_u16x16(ts__avx2_bf16_codes(a), ts__avx2_bf16_codes(b));
    _mm256_storeu_si256((__m256i *)o, r);
}
static inline void st16_f16(uint16_t *o, __m256 a, __m256 b, bool nonan) {
    (void)nonan;
    _mm256_storeu_si256((__m256i *)o, _mm256_set_m128i(ts__avx2_f16_encode(b), ts__avx2_f16_encode(a)));
}

/* Whole segments of a row per call (gran_k is often 32: a call per block would cost as much
 * as its work); short block tails go to the generic kernel. */
#define TS__DEF_AVX2_DEC(SFX, T)                                                                 \
    static void dec_e4m3_##SFX(const uint8_t *q, int64_t n, int64_t gk, const float *s,          \
                               void *out) {                                                      \
        T *o = (T *)out;                                                                         \
        const __m128i s80 = _mm_set1_epi8((char)0x80), ones = _mm_set1_epi8((char)0xFF);         \
        for (int64_t b = 0, j0 = 0; j0 < n; b++, j0 += gk) {                                     \
            const int64_t j1 = n - j0 < gk ? n : j0 + gk;                                        \
            const __m256 vs = _mm256_set1_ps(s[b]), k = _mm256_set1_ps(s[b] * 256.0f);           \
            const bool fast = finite_f32(s[b] * 256.0f); /* then 256 * s is exact */             \
            int64_t j = j0;                                                                      \
            for (; j + 16 <= j1; j += 16) {                                                      \
                __m128i by = _mm_loadu_si128((const __m128i *)(q + j));                          \
                __m256 d[2];                                                                     \
                if (fast && !_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_or_si128(by, s80), ones))) {   \
                    ts__avx2_e4m3x16_decode_nonan_mul(by, k, d);                                 \
                    st16_##SFX(o + j, d[0], d[1], true);                                         \
                } else {                                                                         \
                    ts__avx2_e4m3x16_decode(by, d);                                              \
                    st16_##SFX(o + j, scale_canon(d[0], vs), scale_canon(d[1], vs), false);     \
                }                                                                                \
            }                                                                                    \
            if (j < j1) ts__qk_dec_e4m3_##SFX##__generic(q + j, j1 - j, gk, s + b, o + j);       \
        }                                                                                        \
    }                                                                                            \
    static void dec_e2m1_##SFX(const uint8_t *q, int64_t n, int64_t gk, const float *s,          \
                               void *out) {                                                      \
        T *o = (T *)out;                                                                         \
        for (int64_t b = 0, j0 = 0; j0 < n; b++, j0 += gk) {                                     \
            const int64_t j1 = n - j0 < gk ? n : j0 + gk;                                        \
            const __m256 vs = _mm256_set1_ps(s[b]);                                              \
            const bool fast = finite_f32(s[b]); /* codes are finite: no 0 * inf */               \
            int64_t j = j0;                                                                      \
            for (; j + 32 <= j1; j += 32) {                                                      \
                __m256 d[4];                                                                     \
                ts__avx2_e2m1x32_decode_pz(_mm_loadu_si128((const __m128i *)(q + j / 2)), d);    \
                for (int t = 0; t < 4; t++)                                                      \
                    d[t] = fast ? _mm256_mul_ps(d[t], vs) : scale_canon(d[t], vs);               \
                st16_##SFX(o + j, d[0], d[1], fast);                                             \
                st16_##SFX(o + j + 16, d[2], d[3], fast);                                        \
            }                                                                                    \
            if (j < j1) ts__qk_dec_e2m1_##SFX##__generic(q + j / 2, j1 - j, gk, s + b, o + j);   \
        }                                                                                        \
    }

TS__DEF_AVX2_DEC(bf16, uint16_t)
TS__DEF_AVX2_DEC(f16, uint16_t)
TS__DEF_AVX2_DEC(f32, float)

/* ---- per-channel: column-wise amax and encode with per-column reciprocals ----
 * 32 products without NaN (the norm) take the 32-value encoder, which differs from the
 * quantiser rule only on NaN (0x7F | sign instead of 0x7F); the others the generic rule. */

#define TS__DEF_AVX2_COLS(SFX, T, LOAD8, ABS8)                                                   \
    static void absmax_cols_##SFX(const void *x, int64_t n, uint32_t *acc) {                     \
        const T *p = (const T *)x;                                                               \
        int64_t j = 0;                                                                           \
        for (; j + 8 <= n; j += 8) {                                                             \
            __m256i a = _mm256_max_epu32(ABS8(p + j), _mm256_loadu_si256((const __m256i *)(acc + j))); \
            _mm256_storeu_si256((__m256i *)(acc + j), a);                                        \
        }                                                                                        \
        ts__qk_absmax_cols_##SFX##__generic(p + j, n - j, acc + j);                              \
    }                                                                                            \
    static void enc_e4m3_cols_##SFX(const void *x, int64_t n, const float *inv, uint8_t *q) {    \
        const T *p = (const T *)x;                                                               \
        int64_t j = 0;                                                                           \
        for (; j + 32 <= n; j += 32) {                                                           \
            __m256 v[4], nan = _mm256_setzero_ps();                                              \
            for (int t = 0; t < 4; t++) {                                                        \
                v[t] = _mm256_mul_ps(LOAD8(p + j + 8 * t), _mm256_loadu_ps(inv + j + 8 * t));    \
                nan = _mm256_or_ps(nan, _mm256_cmp_ps(v[t], v[t], _CMP_UNORD_Q));                \
            }                                                                                    \
            if (!_mm256_testz_ps(nan, nan)) {                                                    \
                ts__qk_enc_e4m3_cols_##SFX##__generic(p + j, 32, inv + j, q + j);                \
                continue;                                                                        \
            }                                                                                    \
            _mm256_storeu_si256((__m256i *)(q + j), ts__avx2_e4m3x32_encode(v[0], v[1], v[2], v[3])); \
        }                                                                                        \
        ts__qk_enc_e4m3_cols_##SFX##__generic(p + j, n - j, inv + j, q + j);                     \
    }

/* |x| as f32 bits, 8 lanes, exactly as the generic ab_* */
static inline __m256i abs8_bf16(const uint16_t *p) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_slli_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x7FFF)), 16);
}
static inline __m256i abs8_f16(const uint16_t *p) {
    __m128i h = _mm_and_si128(_mm_loadu_si128((const __m128i *)p), _mm_set1_epi16(0x7FFF));
    return _mm256_castps_si256(ts__avx2_f16_decode(h)); /* exact widening, NaN payload kept */
}
static inline __m256i abs8_f32(const float *p) {
    return _mm256_and_si256(_mm256_loadu_si256((const __m256i *)p), _mm256_set1_epi32(0x7FFFFFFF));
}

TS__DEF_AVX2_COLS(bf16, uint16_t, load8_bf16, abs8_bf16)
TS__DEF_AVX2_COLS(f16, uint16_t, load8_f16_exact, abs8_f16)
TS__DEF_AVX2_COLS(f32, float, load8_f32, abs8_f32)

/* f16 / f32 per-block tiles: the AVX2 amax and run encoders block by block. */
#define TS__DEF_AVX2_BLK(SFX, T)                                                                 \
    static void blk_stats_##SFX(const void *x, int64_t n, int64_t g, uint32_t *amax, uint32_t *amin) { \
        for (int64_t b = 0, j0 = 0; j0 < n; b++, j0 += g) {                                      \
            uint32_t a = absmax_##SFX((const T *)x + j0, n - j0 < g ? n - j0 : g);               \
            amax[b] = a > amax[b] ? a : amax[b];                                                 \
            amin[b] = 0;                                                                         \
        }                                                                                        \
    }                                                                                            \
    static void blk_enc_##SFX(const void *x, int64_t n, int64_t g, const uint32_t *amax,         \
                              const uint32_t *amin, const float *inv, uint8_t *q) {              \
        (void)amax, (void)amin;                                                                  \
        for (int64_t b = 0, j0 = 0; j0 < n; b++, j0 += g)                                        \
            enc_e4m3_##SFX((const T *)x + j0, n - j0 < g ? n - j0 : g, inv[b], q + j0);          \
    }
TS__DEF_AVX2_BLK(f16, uint16_t)
TS__DEF_AVX2_BLK(f32, float)

#define TS__AVX2_ENTRY(SFX)                                                                      \
    {.absmax = absmax_##SFX, .absmax_cols = absmax_cols_##SFX,                                   \
     .enc_e4m3 = enc_e4m3_##SFX, .enc_e4m3_cols = enc_e4m3_cols_##SFX,                            \
     .fp8_row = fp8_row_##SFX, .blk_stats = blk_stats_##SFX, .blk_enc = blk_enc_##SFX,            \
     .absmax_nonan = absmax_nonan_##SFX, .enc_e2m1 = enc_e2m1_##SFX,    \
     .fp4_row = fp4_row_##SFX, .dec_e4m3 = dec_e4m3_##SFX, .dec_e2m1 = dec_e2m1_##SFX}

const ts__quant_kernels ts__quant_kernels_avx2[TS__QSRC_COUNT] = {
    [TS__QSRC_BF16] = TS__AVX2_ENTRY(bf16),
    [TS__QSRC_F16] = TS__AVX2_ENTRY(f16),
    [TS__QSRC_F32] = TS__AVX2_ENTRY(f32),
};
