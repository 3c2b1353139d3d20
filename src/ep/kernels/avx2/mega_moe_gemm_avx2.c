/* AVX2 kernel of Mega MoE's expert GEMM (src/ep/mega_moe_gemm.c has the exactness argument):
 * per K block of 32, p as an int32 sum of vpmaddwd products, then the canonical promotion
 * acc = fmaf(p, sa * sb, acc). Weight bytes are the packed e2m1 panel rows read in place: 16-bit
 * lane L of a row holds columns L, 8 + L, 16 + L, 24 + L (nibble p = column L + 8p, slot order
 * of ts__pw_slot). Two rows (32 bytes) are interleaved into 32-bit lanes (row k, row k + 1) by
 * vpermq + pshufb, then each nibble position is moved to bits 8..11 of its 16-bit lane and one
 * pshufb table gives 256 * B2 (B2 = 2 * e2m1 value, a signed byte in the high byte): a
 * vpmaddwd with the broadcast pair (A[k], A[k + 1]) yields 256 * (A B2 + A' B2') for 8
 * columns, i.e. 16 multiply-adds per instruction. 256 * S stays below 2^31 by the per-block
 * check (sum |A| <= 699050) and converts to f32 exactly (S < 2^23). */
#include "ep/mega_moe_gemm.h"
#include "gemm/kernels/avx2/gemm_dec_avx2_inl.h"

#include <immintrin.h>
#include <string.h>

#define INL static inline __attribute__((always_inline))
enum { W = TS__MMG_W, G = TS__MMG_G, PF_AHEAD = 6144, RMAX = 4 };

/* ts_ue8m0_to_f32 of 8 bytes (as the GEMM's decoder): 2^(e-127); 0 -> 2^-127, 255 -> NaN. */
INL __m256 ue8m0x8(const uint8_t *p, int normal) {
    const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p));
    __m256i r = _mm256_slli_epi32(e, 23);
    if (normal) return _mm256_castsi256_ps(r);
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x00400000), _mm256_cmpeq_epi32(e, _mm256_setzero_si256()));
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC00000), _mm256_cmpeq_epi32(e, _mm256_set1_epi32(255)));
    return _mm256_castsi256_ps(r);
}

INL __m256 sb8(const ts__mmg_args *x, const uint8_t *blk, int p) {
    const uint8_t *sp = blk + G * (W / 2);
    return x->sf_u8 ? ue8m0x8(sp + 8 * p, x->sf_normal) : _mm256_loadu_ps((const float *)(const void *)sp + 8 * p);
}

/* Rows i0 .. i0 + R - 1, nibble positions (column groups) p0 .. p0 + NP - 1, block s. */
INL void grp(const ts__mmg_args *x, const uint8_t *blk, int64_t s, int64_t i0, const int R, const int p0,
             const int NP, int pf) {
    const __m256i lut = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12, 0, 1, 2, 3, 4, 6,
                                         8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    const __m256i ilv = _mm256_setr_epi8(0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15, 0, 1, 8, 9, 2, 3,
                                         10, 11, 4, 5, 12, 13, 6, 7, 14, 15);
    const __m256i mask = _mm256_set1_epi16(0x0F00);
    const int64_t ld = x->K / 2, nkb = x->nkb;
    const int32_t *ap = x->apair + i0 * ld + s * (G / 2);
    __m256i acc[RMAX][4];
    for (int r = 0; r < R; r++)
        for (int q = 0; q < NP; q++) acc[r][q] = _mm256_setzero_si256();
    for (int kk = 0; kk < G / 2; kk++) {
        if (pf && !(kk & 1)) _mm_prefetch((const char *)blk + kk * 32 + PF_AHEAD, _MM_HINT_T0);
        const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(blk + kk * 32));
        const __m256i X = _mm256_shuffle_epi8(_mm256_permute4x64_epi64(v, 0xD8), ilv);
        __m256i a[RMAX];
        for (int r = 0; r < R; r++) a[r] = _mm256_set1_epi32(ap[r * ld + kk]);
        for (int q = 0; q < NP; q++) {
            const int p = p0 + q;
            __m256i idx = p == 0 ? _mm256_slli_epi16(X, 8)
                        : p == 1 ? _mm256_slli_epi16(X, 4)
                        : p == 2 ? X
                                 : _mm256_srli_epi16(X, 4);
            const __m256i b = _mm256_shuffle_epi8(lut, _mm256_and_si256(idx, mask));
            for (int r = 0; r < R; r++) acc[r][q] = _mm256_add_epi32(acc[r][q], _mm256_madd_epi16(b, a[r]));
        }
    }
    for (int r = 0; r < R; r++) {
        const int64_t i = i0 + r;
        const __m256 ps = _mm256_set1_ps(x->pscale[i * nkb + s]), sa = _mm256_set1_ps(x->sa[i * nkb + s]);
        for (int q = 0; q < NP; q++) {
            const int p = p0 + q;
            const __m256 pv = _mm256_mul_ps(_mm256_cvtepi32_ps(acc[r][q]), ps);
            const __m256 sv = _mm256_mul_ps(sa, sb8(x, blk, p));
            float *c = x->acc + i * W + 8 * p;
            _mm256_storeu_ps(c, _mm256_fmadd_ps(pv, sv, _mm256_loadu_ps(c)));
        }
    }
}

/* The f32 chain for a group with a block the integer sum cannot take: b decoded as the GEMM's
 * decode kernel does (gemm_dec_avx2_inl.h: b * 2^-14 through f16, never an f32 subnormal), so
 * a * b * 2^-14 and every partial sum are the canonical ones times 2^-14, normal, rounded
 * alike; p = p' * 2^14. */
INL void grp_f32(const ts__mmg_args *x, const uint8_t *blk, int64_t s, int64_t i0, const int R, int pf) {
    const __m256 unscale = _mm256_set1_ps(0x1p14f);
    const int64_t nkb = x->nkb, K = x->K;
    for (int h = 0; h < 2; h++) {
        __m256 p[RMAX][2];
        for (int r = 0; r < R; r++) p[r][0] = _mm256_setzero_ps(), p[r][1] = _mm256_setzero_ps();
        const float *a = x->af + i0 * K + s * G;
        for (int k = 0; k < G; k++) {
            if (pf && h == 0 && !(k & 3)) _mm_prefetch((const char *)blk + k * (W / 2) + PF_AHEAD, _MM_HINT_T0);
            __m256 o[2];
            ts__dec_half(blk + k * (W / 2), TS_E2M1X2, 0, h, 1, o);
            for (int r = 0; r < R; r++) {
                const __m256 xa = _mm256_broadcast_ss(a + r * K + k);
                p[r][0] = _mm256_fmadd_ps(xa, o[0], p[r][0]);
                p[r][1] = _mm256_fmadd_ps(xa, o[1], p[r][1]);
            }
        }
        const int c0 = 8 * h, c1 = 16 + 8 * h; /* ts__dec_unperm's column groups */
        const __m256 sb0 = sb8(x, blk, c0 / 8), sb1 = sb8(x, blk, c1 / 8);
        for (int r = 0; r < R; r++) {
            const int64_t i = i0 + r;
            const __m256 sa = _mm256_set1_ps(x->sa[i * nkb + s]);
            float *c = x->acc + i * W;
            __m256 lo, hi;
            ts__dec_unperm(p[r][0], p[r][1], &lo, &hi);
            _mm256_storeu_ps(c + c0, _mm256_fmadd_ps(_mm256_mul_ps(lo, unscale), _mm256_mul_ps(sa, sb0),
                                                     _mm256_loadu_ps(c + c0)));
            _mm256_storeu_ps(c + c1, _mm256_fmadd_ps(_mm256_mul_ps(hi, unscale), _mm256_mul_ps(sa, sb1),
                                                     _mm256_loadu_ps(c + c1)));
        }
    }
}

void ts__mmg_panel__avx2(const ts__mmg_args *x) {
    const int64_t m = x->m, ng = (m + RMAX - 1) / RMAX;
    for (int64_t s = 0; s < x->nkb; s++) {
        const uint8_t *blk = x->panel + s * x->block_bytes;
        for (int64_t gi = 0, i0 = 0; gi < ng; gi++) {
            /* rows spread evenly: 5 -> 3 + 2, 6 -> 3 + 3 */
            const int64_t R = (m - i0) / (ng - gi) + ((m - i0) % (ng - gi) != 0);
            const int pf = gi == 0;
            bool good = true;
            for (int64_t i = i0; i < i0 + R; i++) good &= x->ok[i * x->nkb + s] != 0;
            if (!good) {
                switch (R) {
                case 1: grp_f32(x, blk, s, i0, 1, pf); break;
                case 2: grp_f32(x, blk, s, i0, 2, pf); break;
                case 3: grp_f32(x, blk, s, i0, 3, pf); break;
                default: grp_f32(x, blk, s, i0, 4, pf); break;
                }
                i0 += R;
                continue;
            }
            switch (R) {
            case 1: grp(x, blk, s, i0, 1, 0, 4, pf); break;
            case 2: grp(x, blk, s, i0, 2, 0, 4, pf); break;
            case 3:
                grp(x, blk, s, i0, 3, 0, 2, pf);
                grp(x, blk, s, i0, 3, 2, 2, 0);
                break;
            default:
                grp(x, blk, s, i0, 4, 0, 2, pf);
                grp(x, blk, s, i0, 4, 2, 2, 0);
                break;
            }
            i0 += R;
        }
    }
}
