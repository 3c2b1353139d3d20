/* AVX2 packing of full K-major micro-panels (the usual layout of both GEMM operands): each
 * row's K run is decoded 16/32/8 values per instruction sequence into a small row-major
 * buffer, then 8 x 8 register transposes write the panel (dst[k * w + i]). Decoding is exact
 * and the rest only moves bits, so the panel equals the scalar table packing bit for bit. */
#include "gemm/gemm_internal.h"
#include "gemm/gemm_kernels.h"
#include "numerics/kernels/avx2/cvt_avx2_inl.h"
#include "tilestack/numerics.h"

#include <immintrin.h>
#include <string.h>

enum { CH = 64 }; /* K values per chunk: a 32 x 64 f32 buffer (8 KiB) stays in L1 */

static inline float bf16_bits_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Row `src` (already offset to the chunk's first value) -> len floats. */
static inline void decode_row(ts_dtype dt, const void *src, int64_t kbase, int len, float *out) {
    int q = 0;
    switch (dt) {
    case TS_E4M3: {
        const uint8_t *p = (const uint8_t *)src;
        for (; q + 16 <= len; q += 16) {
            __m256 v[2];
            ts__avx2_e4m3x16_decode(_mm_loadu_si128((const __m128i *)(p + q)), v);
            _mm256_storeu_ps(out + q, v[0]);
            _mm256_storeu_ps(out + q + 8, v[1]);
        }
        for (; q < len; q++) out[q] = ts_e4m3_to_f32(p[q]);
        break;
    }
    case TS_BF16: {
        const uint16_t *p = (const uint16_t *)src;
        for (; q + 8 <= len; q += 8) {
            __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p + q)));
            _mm256_storeu_ps(out + q, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
        }
        for (; q < len; q++) out[q] = bf16_bits_to_f32(p[q]);
        break;
    }
    default: { /* TS_E2M1X2; src points at the byte holding value kbase (kbase even) */
        const uint8_t *p = (const uint8_t *)src;
        (void)kbase;
        for (; q + 32 <= len; q += 32) {
            __m256 v[4];
            /* code 8 (-0) as +0, as the scalar table */
            ts__avx2_e2m1x32_decode_tab(_mm_loadu_si128((const __m128i *)(p + q / 2)), v, 1);
            for (int t = 0; t < 4; t++) _mm256_storeu_ps(out + q + 8 * t, v[t]);
        }
        for (; q < len; q++) {
            int code = (p[q >> 1] >> ((q & 1) * 4)) & 0xF;
            out[q] = code == 8 ? 0.0f : ts_e2m1_to_f32((uint8_t)code);
        }
        break;
    }
    }
}

/* r[i] = 8 consecutive K values of row i -> r[q] = row values 0..7 for K value q. */
static inline void transpose8(__m256 r[8]) {
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* Two 16 x 16 byte blocks (one per 128-bit lane) transposed in place: each round interleaves
 * rows i and i + 8, which rotates the 8-bit (row, column) index left by one; four rounds swap
 * row and column. */
static inline void transpose16x16_u8x2(__m256i x[16]) {
    for (int round = 0; round < 4; round++) {
        __m256i y[16];
        for (int i = 0; i < 8; i++) {
            y[2 * i] = _mm256_unpacklo_epi8(x[i], x[i + 8]);
            y[2 * i + 1] = _mm256_unpackhi_epi8(x[i], x[i + 8]);
        }
        for (int i = 0; i < 16; i++) x[i] = y[i];
    }
}

/* 16 rows x 32 e4m3 values (K k .. k + 31, rows ld bytes apart) -> panel rows dst[q * 16 + i],
 * q < 32: the bytes are transposed first (two 16 x 16 blocks, one per lane: K k .. k + 15 and
 * k + 16 .. k + 31), then each 16-byte K row is decoded straight into its panel row. A
 * quarter of the shuffles of decode-then-transpose-f32, and no buffer round trip. */
static inline void pack_e4m3_16x32(const uint8_t *src, int64_t ld, float *dst) {
    __m256i x[16];
    for (int i = 0; i < 16; i++) x[i] = _mm256_loadu_si256((const __m256i *)(src + i * ld));
    transpose16x16_u8x2(x);
    for (int j = 0; j < 16; j++) {
        __m256 v[2];
        ts__avx2_e4m3x16_decode(_mm256_castsi256_si128(x[j]), v);
        _mm256_storeu_ps(dst + j * 16, v[0]);
        _mm256_storeu_ps(dst + j * 16 + 8, v[1]);
        ts__avx2_e4m3x16_decode(_mm256_extracti128_si256(x[j], 1), v);
        _mm256_storeu_ps(dst + (16 + j) * 16, v[0]);
        _mm256_storeu_ps(dst + (16 + j) * 16 + 8, v[1]);
    }
}

bool ts__gemm_pack_kmajor__avx2(const ts__gemm_operand *op, int64_t r0, int64_t k0, int64_t kc,
                                int w, float *dst) {
    if ((w != TS__GEMM_NR && w != TS__GEMM_MR && w != TS__GEMM_DW) || op->s_k != 1 || op->pw)
        return false;
    const bool fp4 = op->dtype == TS_E2M1X2;
    if (fp4 && (k0 & 1)) return false;
    const size_t es = op->dtype == TS_BF16 ? 2 : 1;
    _Alignas(32) float tmp[TS__GEMM_DW][CH];
    /* The driver packs panels in row order: fetch the same K range of the next panel's rows
     * now. Each row is a separate stream a few lines long (rows K bytes apart, usually in
     * different pages), which the hardware prefetchers do not follow; without this the
     * packer waits on L3 / DRAM for most lines (measured 1-4 cycles per value instead of
     * ~0.5). */
    const int64_t next_rows = ts__min64(w, op->mn - (r0 + w));
    for (int64_t kk = 0; kk < kc; kk += CH) {
        const int len = (int)(kc - kk < CH ? kc - kk : CH);
        const size_t run = fp4 ? (size_t)(len + 1) / 2 : (size_t)len * es;
        const bool e4m3x16 = op->dtype == TS_E4M3 && w == TS__GEMM_NR && len == CH;
        for (int i = 0; i < w; i++) {
            const int64_t r = r0 + i, k = k0 + kk;
            const char *src = (const char *)op->data +
                              (size_t)(r * op->s_mn + (fp4 ? (k >> 1) : k)) * es;
            if (i < next_rows) {
                const char *nx = src + (size_t)(w * op->s_mn) * es;
                for (size_t off = 0; off < run; off += 64) _mm_prefetch(nx + off, _MM_HINT_T0);
                _mm_prefetch(nx + run - 1, _MM_HINT_T0);
            }
            if (!e4m3x16) decode_row(op->dtype, src, k, len, tmp[i]);
        }
        if (e4m3x16) {
            const uint8_t *src = (const uint8_t *)op->data + r0 * op->s_mn + k0 + kk;
            pack_e4m3_16x32(src, op->s_mn, dst + kk * w);
            pack_e4m3_16x32(src + 32, op->s_mn, dst + (kk + 32) * w);
            continue;
        }
        float *d = dst + kk * w;
        const int len8 = len & ~7;
        if (w != TS__GEMM_MR) {
            for (int k = 0; k < len8; k += 8)
                for (int g = 0; g < w / 8; g++) {
                    __m256 v[8];
                    for (int i = 0; i < 8; i++) v[i] = _mm256_load_ps(&tmp[g * 8 + i][k]);
                    transpose8(v);
                    for (int q = 0; q < 8; q++) _mm256_storeu_ps(d + (k + q) * w + g * 8, v[q]);
                }
        } else {
            for (int k = 0; k < len8; k += 8) {
                __m256 v[8];
                for (int i = 0; i < 8; i++) v[i] = _mm256_load_ps(&tmp[i < TS__GEMM_MR ? i : TS__GEMM_MR - 1][k]);
                transpose8(v);
                for (int q = 0; q < 8; q++) {
                    float *o = d + (k + q) * w;
                    _mm_storeu_ps(o, _mm256_castps256_ps128(v[q]));
                    _mm_storel_pi((__m64 *)(o + 4), _mm256_extractf128_ps(v[q], 1));
                }
            }
        }
        for (int k = len8; k < len; k++)
            for (int i = 0; i < w; i++) d[k * w + i] = tmp[i][k];
    }
    return true;
}

bool ts__gemm_pack_e4m3_bytes__avx2(const ts__gemm_operand *op, int64_t r0, int64_t k0,
                                    int64_t kc, uint8_t *dst, bool *nan_free) {
    if (op->dtype != TS_E4M3 || !op->k_major || op->s_k != 1 || op->pw) return false;
    const int W = TS__GEMM_DW;
    const uint8_t *base = (const uint8_t *)op->data + r0 * op->s_mn + k0;
    /* NaN codes (magnitude 0x7F) looked for in the loaded vectors, not in a second pass */
    const __m256i m7f = _mm256_set1_epi8(0x7F);
    __m256i nan = _mm256_setzero_si256();
    int64_t k = 0;
    for (; k + 16 <= kc; k += 16) {
        /* 32 strided row streams defeat the hardware prefetcher: fetch the line each row
         * needs one chunk (kc values) ahead (two chunks ahead, or a quarter of the rows per
         * step, measured no better) */
        if ((k & 63) == 0)
            for (int i = 0; i < W; i++)
                _mm_prefetch((const char *)(base + i * op->s_mn + k + kc), _MM_HINT_T0);
        /* lane 0: rows 0..15, lane 1: rows 16..31, so a transposed vector is one full
         * 32-column row of the packed layout */
        __m256i x[16];
        for (int i = 0; i < 16; i++) {
            x[i] = _mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(base + i * op->s_mn + k))),
                _mm_loadu_si128((const __m128i *)(base + (i + 16) * op->s_mn + k)), 1);
            nan = _mm256_or_si256(nan, _mm256_cmpeq_epi8(_mm256_and_si256(x[i], m7f), m7f));
        }
        transpose16x16_u8x2(x);
        for (int j = 0; j < 16; j++) _mm256_storeu_si256((__m256i *)(dst + (k + j) * W), x[j]);
    }
    bool tail_nan = false;
    for (; k < kc; k++)
        for (int i = 0; i < W; i++) {
            const uint8_t v = base[i * op->s_mn + k];
            dst[k * W + i] = v;
            tail_nan |= (v & 0x7F) == 0x7F;
        }
    *nan_free = !tail_nan && _mm256_testz_si256(nan, nan);
    return true;
}
