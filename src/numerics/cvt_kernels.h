/* Bulk conversion kernels, one table per ISA (internal). A kernel converts n values starting
 * at value index 0 of src/dst (the driver offsets the pointers per thread chunk); for packed
 * formats n is a multiple of the pack (2 for e2m1x2, 8 for e5m6x8). */
#ifndef TS_CVT_KERNELS_H
#define TS_CVT_KERNELS_H

#include <stdint.h>

typedef enum ts__cvt_pair {
    TS__CVT_F32_BF16,
    TS__CVT_F32_F16,
    TS__CVT_F32_E4M3,
    TS__CVT_F32_E5M2,
    TS__CVT_F32_E2M1X2,
    TS__CVT_F32_E5M6X8,
    TS__CVT_BF16_F32,
    TS__CVT_F16_F32,
    TS__CVT_E4M3_F32,
    TS__CVT_E5M2_F32,
    TS__CVT_E2M1X2_F32,
    TS__CVT_E5M6X8_F32,
    TS__CVT_UE8M0_F32,
    TS__CVT_BF16_E4M3,
    TS__CVT_BF16_E2M1X2,
    TS__CVT_PAIR_COUNT
} ts__cvt_pair;

typedef void (*ts__cvt_fn)(const void *src, void *dst, int64_t n);

/* Indexed by ts__cvt_pair; every entry non-NULL. */
extern const ts__cvt_fn ts__cvt_kernels_generic[TS__CVT_PAIR_COUNT];
#if defined(TS_HAVE_AVX2_KERNELS)
extern const ts__cvt_fn ts__cvt_kernels_avx2[TS__CVT_PAIR_COUNT];
#endif
#if defined(TS_HAVE_AVX512_KERNELS)
extern const ts__cvt_fn ts__cvt_kernels_avx512[TS__CVT_PAIR_COUNT];
#endif

/* The kernel of the ISA in use (convert_bulk.c); other modules' f32 -> bf16 row stores use
 * it too (the GEMM epilogue). */
ts__cvt_fn ts__cvt_kernel(ts__cvt_pair pair);

#endif
