/* Read-bandwidth probe: a read-only reduction with 8 ymm accumulators, so add latency never
 * limits the two 32-byte loads per cycle that L1/L2 can deliver. No software prefetch: the
 * figure is what plain streaming code gets from the hardware prefetchers. */
#include "bench.h"

#include <immintrin.h>

float ts__probe_read_avx2(const void *p, size_t bytes) {
    const float *f = (const float *)p;
    size_t n = bytes / sizeof(float);
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps();
    __m256 s3 = _mm256_setzero_ps(), s4 = _mm256_setzero_ps(), s5 = _mm256_setzero_ps();
    __m256 s6 = _mm256_setzero_ps(), s7 = _mm256_setzero_ps();
    for (size_t i = 0; i + 64 <= n; i += 64) {
        s0 = _mm256_add_ps(s0, _mm256_load_ps(f + i));
        s1 = _mm256_add_ps(s1, _mm256_load_ps(f + i + 8));
        s2 = _mm256_add_ps(s2, _mm256_load_ps(f + i + 16));
        s3 = _mm256_add_ps(s3, _mm256_load_ps(f + i + 24));
        s4 = _mm256_add_ps(s4, _mm256_load_ps(f + i + 32));
        s5 = _mm256_add_ps(s5, _mm256_load_ps(f + i + 40));
        s6 = _mm256_add_ps(s6, _mm256_load_ps(f + i + 48));
        s7 = _mm256_add_ps(s7, _mm256_load_ps(f + i + 56));
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)),
                             _mm256_add_ps(_mm256_add_ps(s4, s5), _mm256_add_ps(s6, s7)));
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}
