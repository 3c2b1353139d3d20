/* AVX-512 combine row kernels: 32 values per step and one masked step for the tail; same bits
 * as the generic ones (a lane-wise f32 add, the integer bf16 rounding of ts_f32_to_bf16). */
#include "ep/ep_kernels.h"
#include "numerics/kernels/avx512/cvt_avx512_inl.h"

TS__AVX512_INL void acc_step(float *acc, const uint16_t *p, int64_t j, int64_t r, int first) {
    for (int k = 0; k < 2; k++) {
        const __mmask16 m = ts__avx512_lanes16(r - 16 * k);
        const __m512 v = ts__avx512_bf16_decode(_mm256_maskz_loadu_epi16(m, p + j + 16 * k));
        /* the contract's sum starts at +0: 0 + x turns -0 into +0 */
        const __m512 a = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m, acc + j + 16 * k);
        _mm512_mask_storeu_ps(acc + j + 16 * k, m, _mm512_add_ps(a, v));
    }
}

void ts__ep_acc_bf16__avx512(float *acc, const uint16_t *p, int64_t n, int first) {
    int64_t j = 0;
    if (first) {
        for (; j + 32 <= n; j += 32) acc_step(acc, p, j, 32, 1);
        if (j < n) acc_step(acc, p, j, n - j, 1);
    } else {
        for (; j + 32 <= n; j += 32) acc_step(acc, p, j, 32, 0);
        if (j < n) acc_step(acc, p, j, n - j, 0);
    }
}

TS__AVX512_INL void store_step(uint16_t *o, const float *acc, int64_t j, int64_t r) {
    const __m512i lo = ts__avx512_bf16_codes(_mm512_maskz_loadu_ps(ts__avx512_lanes16(r), acc + j));
    const __m512i hi = ts__avx512_bf16_codes(_mm512_maskz_loadu_ps(ts__avx512_lanes16(r - 16), acc + j + 16));
    _mm512_mask_storeu_epi16(o + j, ts__avx512_lanes32(r), ts__avx512_pack_u16x32(lo, hi));
}

void ts__ep_store_bf16__avx512(uint16_t *o, const float *acc, int64_t n) {
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) store_step(o, acc, j, 32);
    if (j < n) store_step(o, acc, j, n - j);
}
