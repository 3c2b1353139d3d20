/* FP32 FMA peak probe: 12 independent ymm FMA chains. Zen 3 and Haswell-class cores issue two
 * FMAs per cycle with a 4-5 cycle latency, so >= 10 chains are needed to keep both pipes full;
 * 12 leave headroom without spilling (16 ymm registers). */
#include "bench.h"

#include <immintrin.h>

float ts__probe_fma_avx2(int64_t iters) {
    /* Distinct start values read through volatile: with identical constants the compiler
     * may merge chains and the probe would measure fewer than 12. */
    volatile float seed[14] = {1.0f, 1.1f, 1.2f, 1.3f, 1.4f, 1.5f, 1.6f,
                               1.7f, 1.8f, 1.9f, 2.0f, 2.1f, 0.9999999f, 1e-7f};
    __m256 a0 = _mm256_set1_ps(seed[0]), a1 = _mm256_set1_ps(seed[1]);
    __m256 a2 = _mm256_set1_ps(seed[2]), a3 = _mm256_set1_ps(seed[3]);
    __m256 a4 = _mm256_set1_ps(seed[4]), a5 = _mm256_set1_ps(seed[5]);
    __m256 a6 = _mm256_set1_ps(seed[6]), a7 = _mm256_set1_ps(seed[7]);
    __m256 a8 = _mm256_set1_ps(seed[8]), a9 = _mm256_set1_ps(seed[9]);
    __m256 a10 = _mm256_set1_ps(seed[10]), a11 = _mm256_set1_ps(seed[11]);
    /* x -> x*m + c with m just below 1 stays finite and normal for any iteration count. */
    const __m256 m = _mm256_set1_ps(seed[12]), c = _mm256_set1_ps(seed[13]);
    for (int64_t i = 0; i < iters; i++) {
        a0 = _mm256_fmadd_ps(a0, m, c);
        a1 = _mm256_fmadd_ps(a1, m, c);
        a2 = _mm256_fmadd_ps(a2, m, c);
        a3 = _mm256_fmadd_ps(a3, m, c);
        a4 = _mm256_fmadd_ps(a4, m, c);
        a5 = _mm256_fmadd_ps(a5, m, c);
        a6 = _mm256_fmadd_ps(a6, m, c);
        a7 = _mm256_fmadd_ps(a7, m, c);
        a8 = _mm256_fmadd_ps(a8, m, c);
        a9 = _mm256_fmadd_ps(a9, m, c);
        a10 = _mm256_fmadd_ps(a10, m, c);
        a11 = _mm256_fmadd_ps(a11, m, c);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0] + out[7];
}
