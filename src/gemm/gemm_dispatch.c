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

/* -1: not yet read from the environment; 0 off; 1 on where the CPU can; 2 auto: on where the
 * CPU can and is an AMD (or Hygon) one. Same bits every way, so the choice is speed only:
 * Zen 4 runs vdpbf16ps at twice its FMA rate, the Sapphire Rapids-class Intel measured at half
 * (probe 112 against 209 GFLOP/s; fp8_gemm_nt 512x4096x4096 164-177 ms against 100-101 ms on
 * the f32 kernels, docs/performance.md), so Intel keeps the f32 FMA kernels unless asked. */
static _Atomic int g_dp_mode = -1;

void ts__gemm_set_dpbf16(int mode) { atomic_store(&g_dp_mode, mode < 0 ? -1 : mode != 0); }

static int dp_mode(void) {
    int m = atomic_load(&g_dp_mode);
    if (m < 0) {
        const char *e = getenv("TS_GEMM_DPBF16");
        m = e && !strcmp(e, "0") ? 0 : e && !strcmp(e, "1") ? 1 : 2;
        atomic_store(&g_dp_mode, m);
    }
    return m;
}

static bool dp_auto_vendor(const ts_cpu_info *ci) {
    return !strcmp(ci->vendor, "AuthenticAMD") || !strcmp(ci->vendor, "HygonGenuine");
}

const ts__gemm_dp_kernels *ts__gemm_select_dp_kernels(void) {
#if defined(TS_HAVE_AVX512BF16_KERNELS)
    const ts_cpu_info *ci = ts_get_cpu_info();
    const int m = dp_mode();
    if (ts__active_isa() == TS_ISA_AVX512 && ci->has_avx512bf16 && (m == 1 || (m == 2 && dp_auto_vendor(ci))))
        return &ts__gemm_dp_kernels_avx512bf16;
#endif
    (void)dp_mode, (void)dp_auto_vendor;
    return NULL;
}
