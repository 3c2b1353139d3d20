/* MQA logits kernels, AVX2 + FMA: 16 heads x 6 keys per micro-tile (12 accumulators), keys
 * broadcast and heads in lanes, so every lane is one (head, key) scalar fmaf chain along D and
 * the relu / weight epilogue is lane-wise: the same bits as the generic kernels. */
#include "attention/mqa_logits_internal.h"
#include "numerics/kernels/avx2/cvt_avx2_inl.h"

#include <immintrin.h>

/* One pass of 16 heads over a 6-key tile: part[r] = fmaf(relu(s), w, part[r]) lane-wise. */
static inline __attribute__((always_inline)) void
tile_16x6(const float *slab, __m256 w0, __m256 w1, const float *kp, int64_t d, float *part,
          int first) {
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
    __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
    __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
    __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
    __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
    __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
    const float *k0 = kp, *k1 = kp + d, *k2 = kp + 2 * d, *k3 = kp + 3 * d, *k4 = kp + 4 * d,
                *k5 = kp + 5 * d;
    for (int64_t dd = 0; dd < d; dd++) {
        __m256 a0 = _mm256_load_ps(slab + dd * TS__MQA_HB);
        __m256 a1 = _mm256_load_ps(slab + dd * TS__MQA_HB + 8);
        __m256 b;
        b = _mm256_broadcast_ss(k0 + dd);
        c00 = _mm256_fmadd_ps(a0, b, c00);
        c01 = _mm256_fmadd_ps(a1, b, c01);
        b = _mm256_broadcast_ss(k1 + dd);
        c10 = _mm256_fmadd_ps(a0, b, c10);
        c11 = _mm256_fmadd_ps(a1, b, c11);
        b = _mm256_broadcast_ss(k2 + dd);
        c20 = _mm256_fmadd_ps(a0, b, c20);
        c21 = _mm256_fmadd_ps(a1, b, c21);
        b = _mm256_broadcast_ss(k3 + dd);
        c30 = _mm256_fmadd_ps(a0, b, c30);
        c31 = _mm256_fmadd_ps(a1, b, c31);
        b = _mm256_broadcast_ss(k4 + dd);
        c40 = _mm256_fmadd_ps(a0, b, c40);
        c41 = _mm256_fmadd_ps(a1, b, c41);
        b = _mm256_broadcast_ss(k5 + dd);
        c50 = _mm256_fmadd_ps(a0, b, c50);
        c51 = _mm256_fmadd_ps(a1, b, c51);
    }
    const __m256 z = _mm256_setzero_ps();
#define TS__MQA_EPI(r, x0, x1)                                                          \
    do {                                                                                \
        __m256 p = first ? z : _mm256_load_ps(part + (r) * 8);                          \
        p = _mm256_fmadd_ps(_mm256_max_ps(x0, z), w0, p);                               \
        p = _mm256_fmadd_ps(_mm256_max_ps(x1, z), w1, p);                               \
        _mm256_store_ps(part + (r) * 8, p);                                             \
    } while (0)
    TS__MQA_EPI(0, c00, c01);
    TS__MQA_EPI(1, c10, c11);
    TS__MQA_EPI(2, c20, c21);
    TS__MQA_EPI(3, c30, c31);
    TS__MQA_EPI(4, c40, c41);
    TS__MQA_EPI(5, c50, c51);
#undef TS__MQA_EPI
}

static void heads_avx2(const float *qt, const float *w, int64_t hp, int64_t d, const float *k,
                       int64_t n, float *part, float *v) {
    for (int64_t pass = 0; pass < hp / TS__MQA_HB; pass++) {
        const float *slab = qt + pass * d * TS__MQA_HB;
        __m256 w0 = _mm256_loadu_ps(w + pass * TS__MQA_HB);
        __m256 w1 = _mm256_loadu_ps(w + pass * TS__MQA_HB + 8);
        for (int64_t j = 0; j < n; j += TS__MQA_NR)
            tile_16x6(slab, w0, w1, k + j * d, d, part + j * 8, pass == 0);
    }
    for (int64_t j = 0; j < n; j++) {
        __m256 p = _mm256_load_ps(part + j * 8);
        __m128 t = _mm_add_ps(_mm256_castps256_ps128(p), _mm256_extractf128_ps(p, 1));
        __m128 u = _mm_add_ps(t, _mm_movehl_ps(t, t));
        v[j] = _mm_cvtss_f32(_mm_add_ss(u, _mm_shuffle_ps(u, u, 1)));
    }
}

static void decode_avx2(const uint8_t *src, int64_t row_bytes, int64_t n, int64_t d, int fp4,
                        const float *sf, int64_t sf_ld, float *dst) {
    for (int64_t j = 0; j < n; j++) {
        const uint8_t *s = src + j * row_bytes;
        float *o = dst + j * d;
        for (int64_t b = 0; b < d / 32; b++) {
            __m256 x[4];
            if (fp4) {
                ts__avx2_e2m1x32_decode_pz(_mm_loadu_si128((const __m128i *)(s + b * 16)), x);
            } else {
                ts__avx2_e4m3x16_decode(_mm_loadu_si128((const __m128i *)(s + b * 32)), x);
                ts__avx2_e4m3x16_decode(_mm_loadu_si128((const __m128i *)(s + b * 32 + 16)),
                                        x + 2);
            }
            if (sf) {
                __m256 m = _mm256_set1_ps(sf[j * sf_ld + b]);
                for (int i = 0; i < 4; i++) x[i] = _mm256_mul_ps(x[i], m);
            }
            for (int i = 0; i < 4; i++) _mm256_store_ps(o + b * 32 + i * 8, x[i]);
        }
    }
}

const ts__mqa_kernels ts__mqa_kernels_avx2 = {"avx2", heads_avx2, decode_avx2};
