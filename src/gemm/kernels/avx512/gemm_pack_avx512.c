/* AVX-512 packing of full 16-row K-major B micro-panels (dst[k * 16 + i], the big-M driver's
 * B side): 16 rows are loaded a zmm each and transposed in registers, so each transposed
 * vector is one K value across the 16 rows, decoded straight into its panel row. Decoding is
 * exact and the rest only moves bits, so the panel equals the scalar packing bit for bit.
 *   e4m3  64 K values per step: 16 x 16 byte transposes, one per 128-bit lane, then the f16
 *         route (ts__avx512_e4m3x32_f16: code << 7 is the f16 of decode(code) * 2^-8) 32
 *         codes per integer op;
 *   bf16  32 K values per step: a 16 x 16 dword transpose of K pairs, then one shift or one
 *         mask per K value;
 *   e2m1  128 K values per step (64 bytes): byte transposes as e4m3, then one vpermps of a
 *         16-entry table per nibble (code 8, -0, packs as +0, as the scalar table).
 * Anything else (other widths, K ranges not a multiple of the step) returns false and the
 * AVX2 packer takes the panel.
 * The same decoders also write the vdpbf16ps kernels' bf16-pair panels (e4m3, e2m1): two
 * decoded K values k, k + 1 of the 16 rows become one vector of dwords (bf16(k) << 16 |
 * bf16(k + 1)), the top halves of the two exact f32 vectors. */
#include "gemm/gemm_internal.h"
#include "gemm/gemm_kernels.h"
#include "numerics/kernels/avx512/cvt_avx512_inl.h"

#include <immintrin.h>

enum { W = TS__GEMM_NR };

/* Rows i and i + 8 interleaved per round: four rounds transpose each 128-bit lane's 16 x 16
 * bytes (the (row, column) index rotates by one bit per round). x[j], lane L: byte 16 L + j
 * of rows 0..15. */
static inline void transpose16x16_u8x4(__m512i x[16]) {
    for (int round = 0; round < 4; round++) {
        __m512i y[16];
        for (int i = 0; i < 8; i++) {
            y[2 * i] = _mm512_unpacklo_epi8(x[i], x[i + 8]);
            y[2 * i + 1] = _mm512_unpackhi_epi8(x[i], x[i + 8]);
        }
        for (int i = 0; i < 16; i++) x[i] = y[i];
    }
}

/* x[i] = 16 dwords of row i -> x[c] = dword c of rows 0..15. */
static inline void transpose16x16_u32(__m512i x[16]) {
    __m512i t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(x[2 * i], x[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(x[2 * i], x[2 * i + 1]);
    }
    /* u[4 g + q], lane L: dword 4 L + q of rows 4 g .. 4 g + 3 */
    for (int g = 0; g < 4; g++) {
        const __m512i *s = t + 4 * g;
        u[4 * g + 0] = _mm512_unpacklo_epi64(s[0], s[2]);
        u[4 * g + 1] = _mm512_unpackhi_epi64(s[0], s[2]);
        u[4 * g + 2] = _mm512_unpacklo_epi64(s[1], s[3]);
        u[4 * g + 3] = _mm512_unpackhi_epi64(s[1], s[3]);
    }
    for (int q = 0; q < 4; q++) {
        const __m512i v0 = _mm512_shuffle_i32x4(u[q], u[4 + q], 0x88);
        const __m512i w0 = _mm512_shuffle_i32x4(u[q], u[4 + q], 0xDD);
        const __m512i v1 = _mm512_shuffle_i32x4(u[8 + q], u[12 + q], 0x88);
        const __m512i w1 = _mm512_shuffle_i32x4(u[8 + q], u[12 + q], 0xDD);
        x[q] = _mm512_shuffle_i32x4(v0, v1, 0x88);
        x[8 + q] = _mm512_shuffle_i32x4(v0, v1, 0xDD);
        x[4 + q] = _mm512_shuffle_i32x4(w0, w1, 0x88);
        x[12 + q] = _mm512_shuffle_i32x4(w0, w1, 0xDD);
    }
}

/* 16 rows of 64 bytes (row i at src + i * ld), transposed into 4-byte groups (transpose16x16_u8x4) */
static inline void load16_u8x4(const uint8_t *src, int64_t ld, __m512i x[16]) {
    for (int i = 0; i < 16; i++) x[i] = _mm512_loadu_si512((const void *)(src + i * ld));
    transpose16x16_u8x4(x);
}

/* The same for e4m3 codes, returning whether any is a NaN code (|c| = 0x7F) */
static inline __mmask64 load16_e4m3(const uint8_t *src, int64_t ld, __m512i x[16]) {
    __mmask64 nan = 0;
    const __m512i m7f = _mm512_set1_epi8(0x7F);
    for (int i = 0; i < 16; i++) {
        x[i] = _mm512_loadu_si512((const void *)(src + i * ld));
        nan |= _mm512_cmpeq_epi8_mask(_mm512_and_si512(x[i], m7f), m7f);
    }
    transpose16x16_u8x4(x);
    return nan;
}

/* The 16 e2m1 values by code (sign bit 3) */
static inline __m512 e2m1_table(void) {
    return _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, 0.0f, -0.5f, -1.0f,
                          -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
}

/* rows r0 .. r0 + 15, K k .. k + 63 (row i at src + i * ld) -> dst[q * 16 + i], q < 64 */
static inline void pack_e4m3_16x64(const uint8_t *src, int64_t ld, float *dst) {
    __m512i x[16];
    const __mmask64 nan = load16_e4m3(src, ld, x);
    const __m512 k256 = _mm512_set1_ps(256.0f); /* the f16 route's 2^-8 undone (exact) */
    for (int j = 0; j < 16; j++)
        for (int half = 0; half < 2; half++) { /* lanes 2 half, 2 half + 1: K 32 half + j, + 16 */
            const __m256i b = half ? _mm512_extracti64x4_epi64(x[j], 1) : _mm512_castsi512_si256(x[j]);
            __m512 lo, hi;
            if (nan) ts__avx512_e4m3x32_f16(b, 1, &lo, &hi);
            else ts__avx512_e4m3x32_f16(b, 0, &lo, &hi);
            _mm512_storeu_ps(dst + (32 * half + j) * W, _mm512_mul_ps(lo, k256));
            _mm512_storeu_ps(dst + (32 * half + 16 + j) * W, _mm512_mul_ps(hi, k256));
        }
}

/* dword j = (top half of hi_k[j]) << 16 | top half of lo_k1[j]: the bf16 pair (k, k + 1) of
 * two f32 vectors of bf16-exact values */
static inline __m512i bf16_pair(__m512 hi_k, __m512 lo_k1) {
    return _mm512_mask_blend_epi16(0x55555555u, _mm512_castps_si512(hi_k),
                                   _mm512_srli_epi32(_mm512_castps_si512(lo_k1), 16));
}

/* As pack_e4m3_16x64, into bf16 pairs: dst[q * 16 + i], q < 32 (K 2q, 2q + 1) */
static inline void pack_e4m3_16x64_pairs(const uint8_t *src, int64_t ld, uint32_t *dst) {
    __m512i x[16];
    const __mmask64 nan = load16_e4m3(src, ld, x);
    const __m512 k256 = _mm512_set1_ps(256.0f);
    for (int j = 0; j < 16; j += 2)
        for (int half = 0; half < 2; half++) { /* K 32 half + j (+ 1), and + 16 */
            const __m256i b0 = half ? _mm512_extracti64x4_epi64(x[j], 1) : _mm512_castsi512_si256(x[j]);
            const __m256i b1 = half ? _mm512_extracti64x4_epi64(x[j + 1], 1) : _mm512_castsi512_si256(x[j + 1]);
            __m512 lo0, hi0, lo1, hi1;
            if (nan) ts__avx512_e4m3x32_f16(b0, 1, &lo0, &hi0), ts__avx512_e4m3x32_f16(b1, 1, &lo1, &hi1);
            else ts__avx512_e4m3x32_f16(b0, 0, &lo0, &hi0), ts__avx512_e4m3x32_f16(b1, 0, &lo1, &hi1);
            const int64_t q = 16 * half + j / 2;
            _mm512_storeu_si512((void *)(dst + q * W),
                                bf16_pair(_mm512_mul_ps(lo0, k256), _mm512_mul_ps(lo1, k256)));
            _mm512_storeu_si512((void *)(dst + (q + 8) * W),
                                bf16_pair(_mm512_mul_ps(hi0, k256), _mm512_mul_ps(hi1, k256)));
        }
}

/* bf16 rows, K k .. k + 31 -> dst[q * 16 + i], q < 32: dword p of a row holds K 2p (low
 * half) and 2p + 1 (high half). */
static inline void pack_bf16_16x32(const uint16_t *src, int64_t ld, float *dst) {
    __m512i x[16];
    for (int i = 0; i < 16; i++) x[i] = _mm512_loadu_si512((const void *)(src + i * ld));
    transpose16x16_u32(x);
    const __m512i hi16 = _mm512_set1_epi32((int)0xFFFF0000u);
    for (int p = 0; p < 16; p++) {
        _mm512_storeu_si512((void *)(dst + (2 * p) * W), _mm512_slli_epi32(x[p], 16));
        _mm512_storeu_si512((void *)(dst + (2 * p + 1) * W), _mm512_and_si512(x[p], hi16));
    }
}

/* packed e2m1 rows (byte b = K 2b low nibble, 2b + 1 high), K k .. k + 127 (64 bytes from
 * src) -> dst[q * 16 + i], q < 128 */
static inline void pack_e2m1_16x128(const uint8_t *src, int64_t ld, float *dst) {
    const __m512 tab = e2m1_table();
    __m512i x[16];
    load16_u8x4(src, ld, x);
    /* byte 16 lane + j holds K 2 (16 lane + j) (low nibble) and the next; vpermps reads
     * index bits 0..3 only, so the low nibble needs no mask */
#define TS__E2M1_LANE(lane)                                                                    \
    do {                                                                                       \
        const __m512i d = _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(x[j], lane));         \
        float *o = dst + 2 * (16 * (lane) + j) * W;                                            \
        _mm512_storeu_ps(o, _mm512_permutexvar_ps(d, tab));                                    \
        _mm512_storeu_ps(o + W, _mm512_permutexvar_ps(_mm512_srli_epi32(d, 4), tab));          \
    } while (0)
    for (int j = 0; j < 16; j++) {
        TS__E2M1_LANE(0);
        TS__E2M1_LANE(1);
        TS__E2M1_LANE(2);
        TS__E2M1_LANE(3);
    }
#undef TS__E2M1_LANE
}

/* As pack_e2m1_16x128, into bf16 pairs: byte 16 lane + j holds the pair (low nibble, high
 * nibble) itself, dst[q * 16 + i], q < 64. The table's f32 values have zero low halves, so
 * the high part is the f32 table and the low part the same table shifted down. */
static inline void pack_e2m1_16x128_pairs(const uint8_t *src, int64_t ld, uint32_t *dst) {
    const __m512 tab = e2m1_table();
    const __m512i thi = _mm512_castps_si512(tab), tlo = _mm512_srli_epi32(thi, 16);
    __m512i x[16];
    load16_u8x4(src, ld, x);
#define TS__E2M1_PAIRS(lane)                                                                   \
    do {                                                                                       \
        const __m512i d = _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(x[j], lane));         \
        _mm512_storeu_si512((void *)(dst + (16 * (lane) + j) * W),                             \
                            _mm512_or_si512(_mm512_permutexvar_epi32(d, thi),                  \
                                            _mm512_permutexvar_epi32(_mm512_srli_epi32(d, 4), tlo))); \
    } while (0)
    for (int j = 0; j < 16; j++) {
        TS__E2M1_PAIRS(0);
        TS__E2M1_PAIRS(1);
        TS__E2M1_PAIRS(2);
        TS__E2M1_PAIRS(3);
    }
#undef TS__E2M1_PAIRS
}

/* The shared part: checks, the next panel's prefetch, the steps. pairs: bf16-pair panels
 * (e4m3 / e2m1 only) instead of f32. */
static bool pack_kmajor(const ts__gemm_operand *op, int64_t r0, int64_t k0, int64_t kc, int w,
                        void *dst, bool pairs) {
    if (w != W || op->s_k != 1 || op->pw || r0 + W > op->mn) return false;
    if (pairs && op->dtype == TS_BF16) return false;
    const int step = op->dtype == TS_BF16 ? 32 : op->dtype == TS_E2M1X2 ? 128 : 64;
    if (kc % step || (op->dtype == TS_E2M1X2 && (k0 & 1))) return false;
    const int64_t es = op->dtype == TS_BF16 ? 2 : 1;
    const int64_t ld = op->s_mn * es; /* bytes between rows */
    /* As the AVX2 packer: the next panel's rows are separate short streams the hardware
     * prefetchers do not follow, so fetch their K range now. */
    const int64_t next_rows = ts__min64(W, op->mn - (r0 + W));
    const int64_t run = op->dtype == TS_E2M1X2 ? kc / 2 : kc * es;
    const char *base = (const char *)op->data + r0 * ld +
                       (op->dtype == TS_E2M1X2 ? k0 / 2 : k0 * es);
    for (int64_t i = 0; i < next_rows; i++) {
        const char *nx = base + (W + i) * ld;
        for (int64_t off = 0; off < run; off += 64) _mm_prefetch(nx + off, _MM_HINT_T0);
        _mm_prefetch(nx + run - 1, _MM_HINT_T0);
    }
    float *df = (float *)dst;
    uint32_t *du = (uint32_t *)dst;
    for (int64_t k = 0; k < kc; k += step) {
        const int64_t off = op->dtype == TS_E2M1X2 ? k / 2 : k * es;
        if (op->dtype == TS_E4M3) {
            if (pairs) pack_e4m3_16x64_pairs((const uint8_t *)base + off, ld, du + (k / 2) * W);
            else pack_e4m3_16x64((const uint8_t *)base + off, ld, df + k * W);
        } else if (op->dtype == TS_BF16) {
            pack_bf16_16x32((const uint16_t *)(const void *)(base + off), op->s_mn, df + k * W);
        } else {
            if (pairs) pack_e2m1_16x128_pairs((const uint8_t *)base + off, ld, du + (k / 2) * W);
            else pack_e2m1_16x128((const uint8_t *)base + off, ld, df + k * W);
        }
    }
    return true;
}

bool ts__gemm_pack_kmajor__avx512(const ts__gemm_operand *op, int64_t r0, int64_t k0, int64_t kc,
                                  int w, float *dst) {
    return pack_kmajor(op, r0, k0, kc, w, dst, false);
}

bool ts__gemm_pack_kmajor_pairs__avx512(const ts__gemm_operand *op, int64_t r0, int64_t k0,
                                        int64_t kc, int w, uint32_t *dst) {
    return pack_kmajor(op, r0, k0, kc, w, dst, true);
}
