/* GEMM runtime configuration: num_sms as the thread count, GPU tuning knobs kept only so
 * ported code runs, and upstream's recipe resolution (csrc/utils/layout.hpp). */
#include "core/internal.h"
#include "tilestack/gemm.h"

#include <stdatomic.h>

static atomic_int g_tc_util = 0;
static atomic_bool g_pdl = false;
static atomic_bool g_ignore_compile_dims = false;
static atomic_int g_block_m_multiple = 1, g_block_n_multiple = 1;

ts_status ts_set_num_sms(int n) {
    if (n < 0) return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_set_num_sms: n = %d is negative", n);
    if (n == 0) {
        n = ts_get_cpu_info()->logical_cpus;
        if (n < 1) n = 1;
    }
    return ts_set_num_threads(n);
}

int ts_get_num_sms(void) { return ts_get_num_threads(); }

ts_status ts_set_tc_util(int pct) {
    if (pct < 0 || pct > 100)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_set_tc_util: pct = %d is not in [0, 100]", pct);
    atomic_store(&g_tc_util, pct);
    return TS_OK;
}

int ts_get_tc_util(void) {
    int v = atomic_load(&g_tc_util);
    return v == 0 ? 100 : v;
}

ts_status ts_set_pdl(bool enable) {
    atomic_store(&g_pdl, enable);
    return TS_OK;
}

bool ts_get_pdl(void) { return atomic_load(&g_pdl); }

ts_status ts_set_ignore_compile_dims(bool ignore) {
    atomic_store(&g_ignore_compile_dims, ignore);
    return TS_OK;
}

ts_status ts_set_block_size_multiple_of(int m_multiple, int n_multiple) {
    if (m_multiple < 1 || n_multiple < 1)
        return ts__fail(TS_ERR_INVALID_ARGUMENT,
                        "ts_set_block_size_multiple_of: multiples (%d, %d) must be >= 1",
                        m_multiple, n_multiple);
    atomic_store(&g_block_m_multiple, m_multiple);
    atomic_store(&g_block_n_multiple, n_multiple);
    return TS_OK;
}

static bool gran_mn_ok(int64_t g) { return g == 1 || g == 128; }
static bool gran_k_ok(int64_t g) { return g == 32 || g == 128; }

ts_status ts_gemm_resolve_recipe(const int64_t *recipe, const int64_t *recipe_a,
                                 const int64_t *recipe_b, ts_dtype sfb_dtype,
                                 ts_gemm_recipe *out) {
    if (!out) return ts__fail(TS_ERR_NULL_POINTER, "ts_gemm_resolve_recipe: out is NULL");
    ts_gemm_recipe r;
    if (recipe && (recipe_a || recipe_b))
        return ts__fail(TS_ERR_INVALID_ARGUMENT,
                        "recipe: give either recipe or recipe_a/recipe_b, not both");
    if (!recipe && (!recipe_a) != (!recipe_b))
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "recipe: recipe_a and recipe_b go together (%s is missing)",
                        recipe_a ? "recipe_b" : "recipe_a");
    if (recipe) {
        r.gran_mn_a = recipe[0];
        r.gran_mn_b = recipe[1];
        r.gran_k_a = r.gran_k_b = recipe[2];
    } else if (recipe_a) {
        r.gran_mn_a = recipe_a[0];
        r.gran_k_a = recipe_a[1];
        r.gran_mn_b = recipe_b[0];
        r.gran_k_b = recipe_b[1];
    } else if (sfb_dtype == TS_F32) {
        r.gran_mn_a = 1, r.gran_mn_b = 128, r.gran_k_a = r.gran_k_b = 128;
    } else if (sfb_dtype == TS_I32 || sfb_dtype == TS_UE8M0X4) {
        r.gran_mn_a = 1, r.gran_mn_b = 1, r.gran_k_a = r.gran_k_b = 128;
    } else {
        return ts__fail(TS_ERR_DTYPE, "sfb: dtype %s is neither f32 nor packed ue8m0 (i32)",
                        ts_dtype_name(sfb_dtype));
    }
    if (!gran_mn_ok(r.gran_mn_a) || !gran_mn_ok(r.gran_mn_b) || !gran_k_ok(r.gran_k_a) ||
        !gran_k_ok(r.gran_k_b))
        return ts__fail(TS_ERR_INVALID_ARGUMENT,
                        "recipe: granularities A (%lld, %lld), B (%lld, %lld) unsupported "
                        "(gran_mn must be 1 or 128, gran_k 32 or 128)",
                        (long long)r.gran_mn_a, (long long)r.gran_k_a, (long long)r.gran_mn_b,
                        (long long)r.gran_k_b);
    *out = r;
    return TS_OK;
}
