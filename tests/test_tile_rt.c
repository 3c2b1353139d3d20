/* Run-time semantics of generated code (src/tile/tile_rt.h): the fixed f32 math algorithms
 * against float64 libm (error bounds as documented in docs/tile-language.md), special
 * values, NaN-ignoring min/max, and integer operations without undefined behaviour. */
#include "ts_test.h"
#include "tile/tile_rt.h"

#include <stdio.h>

/* |got - want| in units of the last place of the f32 nearest to want */
static double ulps(float got, double want) {
    if (isnan(want)) return isnan(got) ? 0.0 : 1e30;
    float wf = (float)want;
    if (isinf(wf)) return got == wf ? 0.0 : 1e30;
    if (isnan(got) || isinf(got)) return 1e30;
    double u = fabs(want) < (double)FLT_MIN ? ldexp(1.0, -149) : ldexp(1.0, ilogb(want) - 23);
    return fabs((double)got - want) / u;
}

static double softplus64(double x) { return x > 20.0 ? x : log1p(exp(x)); }
static double sigmoid64(double x) { return 1.0 / (1.0 + exp(-x)); }

TS_TEST(tile_rt_math_error_bounds) {
    double worst[6] = {0};
    float at[6] = {0};
    /* a stride through every f32 bit pattern (both signs, subnormals, huge values) */
    for (uint64_t u = 0; u < 0x100000000ull; u += 40009) {
        float x = ts__tile_bits_f32((uint32_t)u);
        if (isnan(x)) continue;
        double e[6] = {
            ulps(ts__tile_expf(x), exp((double)x)),
            ulps(ts__tile_exp2f(x), exp2((double)x)),
            x >= 0 ? ulps(ts__tile_logf(x), log((double)x)) : 0,
            x >= 0 ? ulps(ts__tile_log2f(x), log2((double)x)) : 0,
            ulps(ts__tile_sigmoidf(x), sigmoid64((double)x)),
            ulps(ts__tile_softplusf(x), softplus64((double)x)),
        };
        for (int k = 0; k < 6; k++)
            if (e[k] > worst[k]) worst[k] = e[k], at[k] = x;
    }
    const double bound[6] = {1.0, 1.0, 2.0, 3.0, 3.0, 4.0};
    const char *name[6] = {"exp", "exp2", "log", "log2", "sigmoid", "softplus"};
    for (int k = 0; k < 6; k++)
        TS_CHECK_MSG(worst[k] <= bound[k], "%s: %.2f ulp at %a (bound %.0f)", name[k], worst[k], (double)at[k], bound[k]);
}

TS_TEST(tile_rt_math_special_values) {
    TS_CHECK(ts__tile_expf(-INFINITY) == 0.0f && ts__tile_expf(INFINITY) == INFINITY);
    TS_CHECK(isnan(ts__tile_expf(NAN)) && isnan(ts__tile_logf(NAN)) && isnan(ts__tile_exp2f(NAN)));
    TS_CHECK(ts__tile_expf(0.0f) == 1.0f && ts__tile_exp2f(0.0f) == 1.0f && ts__tile_exp2f(-149.0f) == 0x1p-149f);
    TS_CHECK(ts__tile_exp2f(127.0f) == 0x1p127f && ts__tile_exp2f(128.0f) == INFINITY);
    TS_CHECK(ts__tile_logf(1.0f) == 0.0f && ts__tile_logf(0.0f) == -INFINITY && isnan(ts__tile_logf(-1.0f)));
    TS_CHECK(ts__tile_logf(INFINITY) == INFINITY && ts__tile_log2f(8.0f) == 3.0f && ts__tile_log2f(0x1p-149f) == -149.0f);
    TS_CHECK(ts__tile_sigmoidf(0.0f) == 0.5f && ts__tile_sigmoidf(INFINITY) == 1.0f && ts__tile_sigmoidf(-INFINITY) == 0.0f);
    TS_CHECK(ts__tile_sigmoidf(-100.0f) > 0.0f); /* tiny, not flushed to 0 */
    TS_CHECK(ts__tile_softplusf(30.0f) == 30.0f && ts__tile_softplusf(-INFINITY) == 0.0f);
    TS_CHECK(ts__tile_softplusf(-90.0f) > 0.0f);
    TS_CHECK(ts__tile_rsqrtf(4.0f) == 0.5f && ts__tile_rsqrtf(0.0f) == INFINITY);
}

TS_TEST(tile_rt_min_max_semantics) {
    /* NaN is ignored unless both are NaN; +0 > -0; hence order-independent */
    TS_CHECK(ts__tile_maxf(NAN, 1.0f) == 1.0f && ts__tile_maxf(1.0f, NAN) == 1.0f && isnan(ts__tile_maxf(NAN, NAN)));
    TS_CHECK(ts__tile_minf(NAN, -1.0f) == -1.0f && ts__tile_minf(-1.0f, NAN) == -1.0f);
    TS_CHECK(!signbit(ts__tile_maxf(-0.0f, 0.0f)) && !signbit(ts__tile_maxf(0.0f, -0.0f)));
    TS_CHECK(signbit(ts__tile_minf(-0.0f, 0.0f)) && signbit(ts__tile_minf(0.0f, -0.0f)));
    TS_CHECK(!signbit(ts__tile_max64f(-0.0, 0.0)) && signbit(ts__tile_min64f(0.0, -0.0)) && ts__tile_max64f(NAN, 2.0) == 2.0);
    /* associativity on a mixed sample: every rotation of the fold gives the same bits */
    const float v[6] = {-0.0f, NAN, 3.0f, 0.0f, -INFINITY, 3.0f};
    for (int r = 0; r < 6; r++) {
        float mx = v[r], mn = v[r];
        for (int k = 1; k < 6; k++) mx = ts__tile_maxf(mx, v[(r + k) % 6]), mn = ts__tile_minf(mn, v[(r + k) % 6]);
        TS_CHECK(ts__tile_f32_bits(mx) == ts__tile_f32_bits(3.0f) && mn == -INFINITY);
    }
}

TS_TEST(tile_rt_integer_ops_are_total) {
    TS_CHECK(ts__tile_div_i32(7, 0) == 0 && ts__tile_mod_i32(7, 0) == 7);
    TS_CHECK(ts__tile_div_i32(INT32_MIN, -1) == INT32_MIN && ts__tile_mod_i32(INT32_MIN, -1) == 0);
    TS_CHECK(ts__tile_div_i64(INT64_MIN, -1) == INT64_MIN && ts__tile_div_i64(-7, 2) == -3 && ts__tile_mod_i64(-7, 2) == -1);
    TS_CHECK(ts__tile_div_u64(7, 0) == 0 && ts__tile_mod_u32(7, 0) == 7);
    TS_CHECK(ts__tile_shl_i32(1, 33) == 2 && ts__tile_shl_i64(1, 64) == 1 && ts__tile_shr_i32(-8, 1) == -4);
    TS_CHECK(ts__tile_shl_i32(INT32_MAX, 1) == -2);
    TS_CHECK(ts__tile_ceildiv_i64(-7, 2) == -3 && ts__tile_ceildiv_i64(7, 2) == 4 && ts__tile_ceildiv_i64(-7, -2) == 4);
    TS_CHECK(ts__tile_ceildiv_i64(7, 0) == 0 && ts__tile_ceildiv_u32(7, 2) == 4 && ts__tile_ceildiv_i32(6, 3) == 2);
    TS_CHECK(ts__tile_abs_i32(INT32_MIN) == INT32_MIN && ts__tile_abs_i64(-5) == 5);
    /* float -> int: truncation, saturation, NaN -> 0 */
    TS_CHECK(ts__tile_f2i32(2.9) == 2 && ts__tile_f2i32(-2.9) == -2 && ts__tile_f2i32(1e20) == INT32_MAX);
    TS_CHECK(ts__tile_f2i32(-1e20) == INT32_MIN && ts__tile_f2i32(NAN) == 0 && ts__tile_f2u8(-3.0) == 0);
    TS_CHECK(ts__tile_f2u8(300.0) == 255 && ts__tile_f2i64(9.3e18) == INT64_MAX && ts__tile_f2u64(1.9e19) == UINT64_MAX);
    TS_CHECK(ts__tile_f2i64(-9.3e18) == INT64_MIN && ts__tile_f2i8(-200.0) == INT8_MIN && ts__tile_f2u16(65535.5) == 65535);
}

TS_TEST(tile_rt_atomics_and_fail_flag) {
    float f = 1.0f;
    int32_t i = 5;
    int64_t l = -1;
    ts__tile_atomic_add_f32(&f, 0.5f);
    ts__tile_atomic_add_i32(&i, INT32_MAX); /* wraps */
    ts__tile_atomic_add_i64(&l, 2);
    TS_CHECK(f == 1.5f && i == INT32_MIN + 4 && l == 1);
    int flag = 0;
    ts__tile_fail(&flag, 3);
    ts__tile_fail(&flag, 7);
    ts__tile_fail(&flag, 2);
    TS_CHECK(flag == 2); /* the smallest failing check id wins, whatever the order */
}
