/* Hand-written AVX2 comparator of the tile kernel rmsnorm_forward_and_per_token_cast
 * (src/kernels/rmsnorm_cast.tile), f32 scales: the same arithmetic in the same order, so the
 * bench can check that both give the same bytes before it compares their speed.
 *   ss   = sum over 128-channel chunks (ascending, from +0) of the chunk's x^2 summed in the
 *          lanes8 order ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7))
 *   rstd = 1 / sqrt(ss / H + eps); y = (x * rstd) * w
 *   per group of gs: amax = max(max |y| (as bits), 1e-4); sf = amax / 448, or with round_sf
 *   2^ceil(log2) through the exponent bits, inv = 1 / sf, else inv = 448 / amax;
 *   q = e4m3(clamp(y * inv, +-448))
 * y is recomputed from x (L1-resident) for the codes instead of being kept. */
#include "bench.h"
#include "core/internal.h"
#include "numerics/kernels/avx2/cvt_avx2_inl.h"
#include "numerics/quant_kernels.h"

#include <immintrin.h>
#include <math.h>

typedef struct rms_hand {
    const uint16_t *x, *w;
    uint8_t *q;
    float *sf;
    int64_t H, gs;
    float eps;
    bool round_sf;
} rms_hand;

static inline __m256 ld_bf16(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

static void rms_rows(void *ctx, int64_t r0, int64_t r1, int tid) {
    (void)tid;
    const rms_hand *c = ctx;
    const int64_t H = c->H, gs = c->gs;
    const __m256i absm = _mm256_set1_epi32(0x7FFFFFFF);
    const __m256 hi = _mm256_set1_ps(448.0f), lo = _mm256_set1_ps(-448.0f);
    for (int64_t t = r0; t < r1; t++) {
        const uint16_t *x = c->x + t * H;
        float ss = 0.0f;
        for (int64_t c0 = 0; c0 < H; c0 += 128) {
            __m256 a = _mm256_set1_ps(-0.0f);
            for (int k = 0; k < 128; k += 8) {
                __m256 v = ld_bf16(x + c0 + k);
                a = _mm256_add_ps(a, _mm256_mul_ps(v, v));
            }
            float l[8];
            _mm256_storeu_ps(l, a);
            ss = ss + (((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7])));
        }
        const float rstd = 1.0f / sqrtf(ss / (float)H + c->eps);
        const __m256 vr = _mm256_set1_ps(rstd);
        for (int64_t g = 0; g < H / gs; g++) {
            const int64_t b = g * gs;
            __m256i m = _mm256_setzero_si256();
            for (int64_t k = 0; k < gs; k += 8) {
                __m256 y = _mm256_mul_ps(_mm256_mul_ps(ld_bf16(x + b + k), vr), ld_bf16(c->w + b + k));
                m = _mm256_max_epu32(m, _mm256_and_si256(_mm256_castps_si256(y), absm));
            }
            uint32_t mb[8], am = 0;
            _mm256_storeu_si256((__m256i *)mb, m);
            for (int l = 0; l < 8; l++) am = mb[l] > am ? mb[l] : am;
            float af = ts__f32_from_bits(am);
            float amax = af > 1e-4f ? af : 1e-4f; /* the language's max: a NaN gives 1e-4 */
            float sfv = amax / 448.0f;
            float sfr = ts__f32_from_bits((ts__bits_from_f32(sfv) + 0x7FFFFFu) & 0x7F800000u);
            c->sf[t * (H / gs) + g] = c->round_sf ? sfr : sfv;
            const __m256 vi = _mm256_set1_ps(c->round_sf ? 1.0f / sfr : 448.0f / amax);
            for (int64_t k = 0; k < gs; k += 32) {
                __m256 p[4];
                for (int u = 0; u < 4; u++) {
                    const int64_t j = b + k + 8 * u;
                    __m256 y = _mm256_mul_ps(_mm256_mul_ps(ld_bf16(x + j), vr), ld_bf16(c->w + j));
                    __m256 v = _mm256_mul_ps(y, vi);
                    /* select(p > 448, 448, select(p < -448, -448, p)): NaN passes */
                    v = _mm256_blendv_ps(v, lo, _mm256_cmp_ps(v, lo, _CMP_LT_OQ));
                    p[u] = _mm256_blendv_ps(v, hi, _mm256_cmp_ps(v, hi, _CMP_GT_OQ));
                }
                _mm256_storeu_si256((__m256i *)(c->q + t * H + b + k), ts__avx2_e4m3x32_encode(p[0], p[1], p[2], p[3]));
            }
        }
    }
}

int ts__bench_rmsnorm_cast_hand_avx2(const uint16_t *x, const uint16_t *w, int64_t T, int64_t H, float eps,
                                     int64_t gs, bool round_sf, uint8_t *q, float *sf) {
    if (H % 128 || gs % 128 || H % gs) return -1;
    rms_hand c = {.x = x, .w = w, .q = q, .sf = sf, .H = H, .gs = gs, .eps = eps, .round_sf = round_sf};
    ts__parallel_for(T, 1, rms_rows, &c);
    return 0;
}
