/* FP32 FMA peak probe on the avx512 path: 24 independent zmm FMA chains. Intel cores with two
 * 512-bit FMA units (ports 0+1 fused and port 5) at a 4-cycle latency need >= 8 chains in
 * flight; 24 leave headroom for a longer latency or a third pipe and still fit the 32 zmm
 * registers with the two constants. A 16-chain loop gave ~175 GFLOP/s per Sapphire Rapids
 * core, against 71-94 for the 12-ymm-chain probe. */
#include "bench.h"

#include <immintrin.h>

#define TS__Z_CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) \
    X(12) X(13) X(14) X(15) X(16) X(17) X(18) X(19) X(20) X(21) X(22) X(23)

float ts__probe_fma_avx512(int64_t iters) {
    /* Distinct start values read through volatile so the compiler cannot merge chains. */
    volatile float seed[TS__PROBE_ZMM_CHAINS + 2];
    for (int i = 0; i < TS__PROBE_ZMM_CHAINS; i++) seed[i] = 1.0f + 0.05f * (float)i;
    seed[TS__PROBE_ZMM_CHAINS] = 0.9999999f;
    seed[TS__PROBE_ZMM_CHAINS + 1] = 1e-7f;
#define TS__Z_INIT(i) __m512 a##i = _mm512_set1_ps(seed[i]);
    TS__Z_CHAINS(TS__Z_INIT)
    /* x -> x*m + c with m just below 1 stays finite and normal for any iteration count. */
    const __m512 m = _mm512_set1_ps(seed[TS__PROBE_ZMM_CHAINS]);
    const __m512 c = _mm512_set1_ps(seed[TS__PROBE_ZMM_CHAINS + 1]);
#define TS__Z_STEP(i) a##i = _mm512_fmadd_ps(a##i, m, c);
    for (int64_t it = 0; it < iters; it++) {
        TS__Z_CHAINS(TS__Z_STEP)
    }
    __m512 s = _mm512_setzero_ps();
#define TS__Z_SUM(i) s = _mm512_add_ps(s, a##i);
    TS__Z_CHAINS(TS__Z_SUM)
    return _mm512_reduce_add_ps(s);
}
