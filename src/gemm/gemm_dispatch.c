/* Picks the micro-kernel table for the ISA in use. */
#include "core/internal.h"
#include "gemm/gemm_kernels.h"

const ts__gemm_kernels *ts__gemm_select_kernels(void) {
#if defined(TS_HAVE_AVX512_KERNELS)
    if (ts__active_isa() == TS_ISA_AVX512) return &ts__gemm_kernels_avx512;
#endif
#if defined(TS_HAVE_AVX2_KERNELS)
    ts_isa isa = ts__active_isa();
    if (ts__isa_avx2_up(isa)) return &ts__gemm_kernels_avx2;
#endif
    return &ts__gemm_kernels_generic;
}
