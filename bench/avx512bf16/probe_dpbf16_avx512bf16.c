/* vdpbf16ps peak probe (AVX512_BF16): 24 independent zmm chains, 64 flops per instruction (16
 * lanes x 2 products x multiply + add), the roofline of the FP8 / FP4 GEMMs' vdpbf16ps kernels
 * (src/gemm/kernels/avx512bf16/). Each step adds 0.5 * 0.25 - 0.5 * 0.25 = 0 exactly, so the
 * accumulators stay at their normal start values for any iteration count (no subnormal, no
 * overflow) while the instruction does its full work. */
#include "bench.h"

#include <immintrin.h>

#define TS__D_CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) \
    X(12) X(13) X(14) X(15) X(16) X(17) X(18) X(19) X(20) X(21) X(22) X(23)

float ts__probe_dpbf16_avx512bf16(int64_t iters) {
    volatile float seed[TS__PROBE_DPBF16_CHAINS];
    for (int i = 0; i < TS__PROBE_DPBF16_CHAINS; i++) seed[i] = 1.0f + 0.05f * (float)i;
    /* bf16 pairs: a = (+0.5 high, -0.5 low), b = (0.25, 0.25) */
    volatile uint32_t pa = 0x3F00BF00u, pb = 0x3E803E80u;
    const __m512bh a = (__m512bh)_mm512_set1_epi32((int)pa);
    const __m512bh b = (__m512bh)_mm512_set1_epi32((int)pb);
#define TS__D_INIT(i) __m512 c##i = _mm512_set1_ps(seed[i]);
    TS__D_CHAINS(TS__D_INIT)
#define TS__D_STEP(i) c##i = _mm512_dpbf16_ps(c##i, a, b);
    for (int64_t it = 0; it < iters; it++) {
        TS__D_CHAINS(TS__D_STEP)
    }
    __m512 s = _mm512_setzero_ps();
#define TS__D_SUM(i) s = _mm512_add_ps(s, c##i);
    TS__D_CHAINS(TS__D_SUM)
    return _mm512_reduce_add_ps(s);
}
