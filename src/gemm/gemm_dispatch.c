/* Picks the micro-kernel table for the ISA in use, and whether the block-scaled GEMMs take the
 * vdpbf16ps kernels. */
#include "core/internal.h"
#include "gemm/gemm_kernels.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

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

/* -1: not yet read from the environment; 0 off; 1 on where the CPU can. Same bits every way,
 * so the switch only serves tests (both kernels on one machine) and A/B timing. */
static _Atomic int g_dp_mode = -1;

void ts__gemm_set_dpbf16(int mode) { atomic_store(&g_dp_mode, mode < 0 ? -1 : mode != 0); }

static int dp_mode(void) {
    int m = atomic_load(&g_dp_mode);
    if (m < 0) {
        const char *e = getenv("TS_GEMM_DPBF16");
        m = !(e && strcmp(e, "0") == 0);
        atomic_store(&g_dp_mode, m);
    }
    return m;
}

/* Only on the avx512 path: TS_ISA=avx2 / generic keep their own kernels, and the avx512
 * path of a CPU without AVX512_BF16 (Ice Lake, Zen 3 has no avx512 at all) the f32 ones. */
const ts__gemm_dp_kernels *ts__gemm_select_dp_kernels(void) {
#if defined(TS_HAVE_AVX512BF16_KERNELS)
    if (ts__active_isa() == TS_ISA_AVX512 && ts_get_cpu_info()->has_avx512bf16 && dp_mode())
        return &ts__gemm_dp_kernels_avx512bf16;
#endif
    (void)dp_mode;
    return NULL;
}
