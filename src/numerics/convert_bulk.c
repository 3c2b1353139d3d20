/* ts_convert: validation, pair lookup, ISA table choice and threading. */
#include "core/internal.h"
#include "numerics/cvt_kernels.h"
#include "tilestack/numerics.h"

/* Values per task chunk: a multiple of 64 (so chunks start on whole e2m1 bytes and e5m6
 * groups), large enough that a chunk outweighs the fork-join cost. */
#define TS__CVT_GRAIN 16384

typedef struct {
    ts__cvt_fn fn;
    const char *src;
    char *dst;
    int64_t src_num, src_den, dst_num, dst_den; /* bytes per value as a fraction */
} ts__cvt_ctx;

static void cvt_range(void *vctx, int64_t begin, int64_t end, int tid) {
    (void)tid;
    const ts__cvt_ctx *c = (const ts__cvt_ctx *)vctx;
    c->fn(c->src + begin * c->src_num / c->src_den, c->dst + begin * c->dst_num / c->dst_den,
          end - begin);
}

static int find_pair(ts_dtype s, ts_dtype d) {
    static const struct { ts_dtype s, d; ts__cvt_pair p; } k[] = {
        {TS_F32, TS_BF16, TS__CVT_F32_BF16},       {TS_F32, TS_F16, TS__CVT_F32_F16},
        {TS_F32, TS_E4M3, TS__CVT_F32_E4M3},       {TS_F32, TS_E5M2, TS__CVT_F32_E5M2},
        {TS_F32, TS_E2M1X2, TS__CVT_F32_E2M1X2},   {TS_F32, TS_E5M6X8, TS__CVT_F32_E5M6X8},
        {TS_BF16, TS_F32, TS__CVT_BF16_F32},       {TS_F16, TS_F32, TS__CVT_F16_F32},
        {TS_E4M3, TS_F32, TS__CVT_E4M3_F32},       {TS_E5M2, TS_F32, TS__CVT_E5M2_F32},
        {TS_E2M1X2, TS_F32, TS__CVT_E2M1X2_F32},   {TS_E5M6X8, TS_F32, TS__CVT_E5M6X8_F32},
        {TS_UE8M0, TS_F32, TS__CVT_UE8M0_F32},     {TS_BF16, TS_E4M3, TS__CVT_BF16_E4M3},
        {TS_BF16, TS_E2M1X2, TS__CVT_BF16_E2M1X2},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (k[i].s == s && k[i].d == d) return (int)k[i].p;
    return -1;
}

/* Bytes per value as num/den: packed types store fractions of a byte per value. */
static void bytes_per_value(ts_dtype t, int64_t *num, int64_t *den) {
    switch (t) {
    case TS_E2M1X2: *num = 1; *den = 2; return;
    case TS_E5M6X8: *num = 3; *den = 2; return;
    default: *num = (int64_t)ts_dtype_size(t); *den = 1; return;
    }
}

ts__cvt_fn ts__cvt_kernel(ts__cvt_pair pair) {
    const ts__cvt_fn *table = ts__cvt_kernels_generic;
#if defined(TS_HAVE_AVX2_KERNELS)
    if (ts__isa_avx2_up(ts__active_isa())) table = ts__cvt_kernels_avx2;
#endif
#if defined(TS_HAVE_AVX512_KERNELS)
    if (ts__active_isa() == TS_ISA_AVX512) table = ts__cvt_kernels_avx512;
#endif
    return table[pair];
}

ts_status ts_convert(const void *src, ts_dtype src_dtype, void *dst, ts_dtype dst_dtype,
                     int64_t n) {
    if ((int)src_dtype < 0 || src_dtype >= TS_DTYPE_COUNT_)
        return ts__fail(TS_ERR_DTYPE, "ts_convert: src_dtype = %d is not a ts_dtype", (int)src_dtype);
    if ((int)dst_dtype < 0 || dst_dtype >= TS_DTYPE_COUNT_)
        return ts__fail(TS_ERR_DTYPE, "ts_convert: dst_dtype = %d is not a ts_dtype", (int)dst_dtype);
    int pair = find_pair(src_dtype, dst_dtype);
    if (pair < 0)
        return ts__fail(TS_ERR_UNSUPPORTED, "ts_convert: no conversion from %s (src_dtype) to %s (dst_dtype)",
                        ts_dtype_name(src_dtype), ts_dtype_name(dst_dtype));
    if (n < 0) return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_convert: n = %lld is negative", (long long)n);
    if ((src_dtype == TS_E2M1X2 || dst_dtype == TS_E2M1X2) && n % 2 != 0)
        return ts__fail(TS_ERR_INVALID_ARGUMENT,
                        "ts_convert: n = %lld must be even for e2m1x2 (two values per byte)", (long long)n);
    if ((src_dtype == TS_E5M6X8 || dst_dtype == TS_E5M6X8) && n % 8 != 0)
        return ts__fail(TS_ERR_INVALID_ARGUMENT,
                        "ts_convert: n = %lld must be a multiple of 8 for e5m6x8", (long long)n);
    int64_t sn, sd, dn, dd, sbytes, dbytes;
    bytes_per_value(src_dtype, &sn, &sd);
    bytes_per_value(dst_dtype, &dn, &dd);
    if (ts_mul_overflow_i64(n, sn, &sbytes) != TS_OK || ts_mul_overflow_i64(n, dn, &dbytes) != TS_OK) {
        ts_clear_error();
        return ts__fail(TS_ERR_OVERFLOW, "ts_convert: n = %lld values overflow a 64-bit byte count",
                        (long long)n);
    }
    sbytes /= sd;
    dbytes /= dd;
    if (n == 0) return TS_OK;
    if (!src) return ts__fail(TS_ERR_NULL_POINTER, "ts_convert: src is NULL");
    if (!dst) return ts__fail(TS_ERR_NULL_POINTER, "ts_convert: dst is NULL");
    uintptr_t s0 = (uintptr_t)src, d0 = (uintptr_t)dst;
    /* natural alignment of the element type (as for any C array); no vector alignment */
    if (s0 % (uintptr_t)(sd == 1 ? sn : 1))
        return ts__fail(TS_ERR_ALIGNMENT, "ts_convert: src is not aligned to its %lld-byte element",
                        (long long)sn);
    if (d0 % (uintptr_t)(dd == 1 ? dn : 1))
        return ts__fail(TS_ERR_ALIGNMENT, "ts_convert: dst is not aligned to its %lld-byte element",
                        (long long)dn);
    if (s0 < d0 + (uintptr_t)dbytes && d0 < s0 + (uintptr_t)sbytes)
        return ts__fail(TS_ERR_ALIASING, "ts_convert: src and dst overlap");

    ts__cvt_ctx ctx = {ts__cvt_kernel(pair), (const char *)src, (char *)dst, sn, sd, dn, dd};
    ts__parallel_for(n, TS__CVT_GRAIN, cvt_range, &ctx);
    return TS_OK;
}
