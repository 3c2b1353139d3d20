/* Suite `numerics`: bulk format conversions and the FP8/FP4 quantisers.
 *
 * Rows and their rooflines (bytes always count input + output):
 *   decode  e4m3/e2m1/bf16 -> f32, in+out = L2/2 (as the L2 probe) -> L2 read bandwidth;
 *   encode  f32 -> bf16/e4m3, 16M values, DRAM-resident (rotating over copies that span
 *           more than 2 x L3)                                    -> memcpy bandwidth;
 *   casts   bf16 [8192, 7168] (DeepSeek V3 hidden size), DRAM    -> memcpy bandwidth.
 * Baselines timed in the same run: the generic C path (ts_set_isa(TS_ISA_GENERIC)) for the
 * conversions; for the casts, a threaded memcpy moving the same bytes (half read, half
 * written), so baseline_ratio = memcpy time / cast time. */
#include "bench.h"

#include "core/internal.h"

#include <stdlib.h>
#include <string.h>

#define SUITE "numerics"

/* ---- inputs: a fast deterministic generator; values only need realistic magnitudes ---- */

static ts__bench_rng g_rng = {0x9e3779b97f4a7c15ull};
static inline uint32_t rng32(void) { return (uint32_t)(ts__bench_rng_next(&g_rng) >> 16); }

/* Activation-like bf16: |x| spans a few binades, sign random; truncation to bf16 is enough. */
static void fill_bf16(uint16_t *p, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t r = rng32();
        uint32_t exp = 120u + (r & 7u); /* 2^-7 .. 2^0 */
        uint32_t bits = ((r >> 31) << 31) | (exp << 23) | ((r >> 3) & 0x7fffffu);
        p[i] = (uint16_t)(bits >> 16);
    }
}

static void fill_f32(float *p, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t r = rng32();
        uint32_t bits = ((r >> 31) << 31) | ((118u + (r & 15u)) << 23) | ((r >> 4) & 0x7fffffu);
        memcpy(&p[i], &bits, 4);
    }
}

/* Every e4m3 code except the two NaNs (real weights have none). */
static void fill_e4m3(uint8_t *p, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint8_t v = (uint8_t)rng32();
        p[i] = (v & 0x7f) == 0x7f ? (uint8_t)(v - 1) : v;
    }
}

static void fill_bytes(uint8_t *p, int64_t n) {
    for (int64_t i = 0; i < n; i++) p[i] = (uint8_t)rng32();
}

static void *alloc_or_null(size_t bytes) {
    return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
}

/* ---- the timed operations ---- */

typedef struct convert_ctx {
    const void *src;
    ts_dtype sd;
    void *dst;
    ts_dtype dd;
    int64_t n;
    /* DRAM rows: src and dst hold `ncopies` blocks (src_step / dst_step bytes apart) and each
     * call converts the next one, so the set streamed exceeds 2 x L3; 0 or 1: one block. */
    int ncopies, next;
    size_t src_step, dst_step;
} convert_ctx;

static ts_status run_convert(void *p) {
    convert_ctx *c = (convert_ctx *)p;
    const int i = c->ncopies > 1 ? c->next : 0;
    if (c->ncopies > 1) c->next = (c->next + 1) % c->ncopies;
    return ts_convert((const char *)c->src + (size_t)i * c->src_step, c->sd,
                      (char *)c->dst + (size_t)i * c->dst_step, c->dd, c->n);
}

typedef enum cast_kind {
    CAST_TOKEN_FP8,
    CAST_BLOCK_FP8,
    CAST_CHANNEL_FP8,
    CAST_TOKEN_FP4,
    CAST_BACK_FP8,
    CAST_BACK_FP4,
} cast_kind;

typedef struct cast_ctx {
    cast_kind kind;
    ts_tensor x, q, sf, out;
    bool ue8m0, packed;
    int64_t gran;
    ts_fp4_rounding rounding;
} cast_ctx;

static ts_status run_cast(void *p) {
    cast_ctx *c = (cast_ctx *)p;
    switch (c->kind) {
    case CAST_TOKEN_FP8:
        return ts_per_token_cast_to_fp8(&c->x, c->ue8m0, c->gran, c->packed, &c->q, &c->sf);
    case CAST_BLOCK_FP8:
        return ts_per_block_cast_to_fp8(&c->x, c->ue8m0, c->gran, &c->q, &c->sf);
    case CAST_CHANNEL_FP8:
        return ts_per_channel_cast_to_fp8(&c->x, c->ue8m0, c->gran, &c->q, &c->sf);
    case CAST_TOKEN_FP4:
        return ts_per_token_cast_to_fp4(&c->x, c->ue8m0, c->gran, c->packed, c->rounding, &c->q,
                                        &c->sf);
    case CAST_BACK_FP8:
        return ts_cast_back_from_fp8(&c->q, &c->sf, 1, c->gran, &c->out);
    case CAST_BACK_FP4:
        return ts_cast_back_from_fp4(&c->q, &c->sf, 1, c->gran, &c->out);
    }
    return TS_ERR_INTERNAL;
}

typedef struct memcpy_ctx {
    char *dst;
    const char *src;
    int64_t bytes;
} memcpy_ctx;

static void memcpy_range(void *p, int64_t begin, int64_t end, int tid) {
    (void)tid;
    memcpy_ctx *c = (memcpy_ctx *)p;
    memcpy(c->dst + begin, c->src + begin, (size_t)(end - begin));
}

static ts_status run_memcpy(void *p) {
    memcpy_ctx *c = (memcpy_ctx *)p;
    ts__parallel_for(c->bytes, (int64_t)1 << 16, memcpy_range, c);
    return TS_OK;
}

/* ---- one row: time the kernel, then its baseline, at `threads` ---- */

typedef enum baseline_kind { BASE_NONE, BASE_GENERIC, BASE_MEMCPY } baseline_kind;

typedef struct numerics_env {
    const ts__bench_opts *opts;
    char *scratch_a, *scratch_b; /* memcpy baseline buffers, each >= the largest half-traffic */
    int64_t scratch_bytes;
    int failures;
} numerics_env;

static void run_row(numerics_env *env, ts__bench_row *row, ts__bench_fn fn, void *ctx,
                    baseline_kind base) {
    const ts__bench_opts *opts = env->opts;
    row->suite = SUITE;
    (void)ts_set_num_threads(row->threads);
    ts_status st = ts__bench_time(fn, ctx, opts->quick, &row->t);
    if (st != TS_OK) {
        char why[256];
        const char *detail = ts_last_error();
        snprintf(why, sizeof why, "%s%s%s%s", ts_status_str(st), detail[0] ? " (" : "", detail,
                 detail[0] ? ")" : "");
        row->baseline = NULL;
        ts__bench_report_error(opts, row, why);
        /* Not-yet-implemented kernels are expected while modules land; anything else is a bug. */
        if (st != TS_ERR_UNSUPPORTED) env->failures++;
        return;
    }
    row->baseline = NULL;
    row->baseline_seconds = 0;
    ts__timing bt;
    if (base == BASE_GENERIC) {
        ts_isa prev = ts_get_isa();
        if (ts_set_isa(TS_ISA_GENERIC) == TS_OK && ts__bench_time(fn, ctx, opts->quick, &bt) == TS_OK) {
            row->baseline = "generic";
            row->baseline_seconds = bt.median_s;
        }
        (void)ts_set_isa(prev);
    } else if (base == BASE_MEMCPY) {
        /* Same traffic as the kernel: copying B bytes reads B and writes B. */
        int64_t half = (int64_t)(row->bytes / 2);
        if (half > 0 && half <= env->scratch_bytes) {
            memcpy_ctx mc = {env->scratch_b, env->scratch_a, half};
            if (ts__bench_time(run_memcpy, &mc, opts->quick, &bt) == TS_OK) {
                row->baseline = "memcpy";
                row->baseline_seconds = bt.median_s;
            }
        }
    }
    ts__bench_report(opts, row);
}

/* ---- row groups ---- */

static void decode_rows(numerics_env *env, int threads) {
    /* Working set (input + output) = half of one core's L2, the same footprint as the L2 read
     * probe, so "L2-resident" means the same thing for the kernel and for its roofline. */
    const ts_cpu_info *ci = ts_get_cpu_info();
    const int64_t l2 = (ci && ci->l2_bytes > 0) ? ci->l2_bytes : (int64_t)512 << 10;
    const int64_t nmax = l2 / 2 / 4; /* upper bound on values: output alone is 4 B each */
    void *src = alloc_or_null((size_t)nmax * 2);
    float *dst = alloc_or_null((size_t)nmax * 4);
    if (!src || !dst) {
        fprintf(stderr, "tilestack bench: out of memory\n");
        env->failures++;
        free(src);
        free(dst);
        return;
    }
    static const struct {
        const char *name, *dtype;
        ts_dtype sd;
        double in_bytes_per_value;
    } cases[] = {
        {"decode e4m3->f32", "e4m3->f32", TS_E4M3, 1.0},
        {"decode e2m1->f32", "e2m1x2->f32", TS_E2M1X2, 0.5},
        {"decode bf16->f32", "bf16->f32", TS_BF16, 2.0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int64_t n = (int64_t)((double)(l2 / 2) / (cases[i].in_bytes_per_value + 4.0)) / 64 * 64;
        char shape[32];
        snprintf(shape, sizeof shape, "[%lld]", (long long)n);
        if (cases[i].sd == TS_E4M3) fill_e4m3(src, n);
        else if (cases[i].sd == TS_BF16) fill_bf16(src, n);
        else fill_bytes(src, n / 2);
        convert_ctx c = {src, cases[i].sd, dst, TS_F32, n, 0, 0, 0, 0};
        ts__bench_row row = {0};
        row.name = cases[i].name;
        row.shape = shape;
        row.dtype = cases[i].dtype;
        row.threads = threads;
        row.bytes = (double)n * (cases[i].in_bytes_per_value + 4.0);
        row.roof = TS__ROOF_L2;
        run_row(env, &row, run_convert, &c, BASE_GENERIC);
    }
    free(src);
    free(dst);
}

static void encode_rows(numerics_env *env, const int *threads, int nthreads) {
    const int64_t n = (int64_t)16 << 20; /* 64 MiB of f32 in */
    /* DRAM-resident: enough (input, output) copies that the set streamed exceeds 2 x L3
     * (two here, with 48 MiB of L3; seven on a 260 MiB one), sized for the smaller output. */
    const int copies = ts__bench_dram_copies((double)n * (4.0 + 1.0), 8);
    float *src = alloc_or_null((size_t)n * 4 * (size_t)copies);
    void *dst = alloc_or_null((size_t)n * 2 * (size_t)copies);
    if (!src || !dst) {
        fprintf(stderr, "tilestack bench: out of memory\n");
        env->failures++;
        free(src);
        free(dst);
        return;
    }
    fill_f32(src, n);
    for (int i = 1; i < copies; i++) memcpy(src + (size_t)i * (size_t)n, src, (size_t)n * 4);
    memset(dst, 0, (size_t)n * 2 * (size_t)copies);
    static const struct {
        const char *name, *dtype;
        ts_dtype dd;
        double out_bytes_per_value;
    } cases[] = {
        {"encode f32->bf16", "f32->bf16", TS_BF16, 2.0},
        {"encode f32->e4m3", "f32->e4m3", TS_E4M3, 1.0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int t = 0; t < nthreads; t++) {
            const size_t out_step = (size_t)n * (size_t)cases[i].out_bytes_per_value;
            convert_ctx c = {src, TS_F32, dst, cases[i].dd, n, copies, 0, (size_t)n * 4, out_step};
            ts__bench_row row = {0};
            row.name = cases[i].name;
            row.shape = "[16777216]";
            row.dtype = cases[i].dtype;
            row.threads = threads[t];
            row.bytes = (double)n * (4.0 + cases[i].out_bytes_per_value);
            row.set_bytes = row.bytes * copies;
            row.roof = TS__ROOF_MEMCPY;
            run_row(env, &row, run_convert, &c, BASE_GENERIC);
        }
    }
    free(src);
    free(dst);
}

/* Quantiser rows on bf16 [m, n]; `only_first` keeps the must-reach per-token FP8 row alone. */
static void cast_rows(numerics_env *env, int64_t m, int64_t n, const int *threads, int nthreads,
                      bool only_first) {
    char shape[48];
    snprintf(shape, sizeof shape, "[%lld,%lld]", (long long)m, (long long)n);
    const int64_t sfk128 = ts__ceil_div(n, 128), sfk32 = ts__ceil_div(n, 32);
    uint16_t *x = alloc_or_null((size_t)(m * n) * 2);
    uint8_t *q = alloc_or_null((size_t)(m * n));
    /* Scales: the largest is f32 [m, n/32] (fp4 with f32 scales). */
    float *sf = alloc_or_null((size_t)(m * sfk32) * 4);
    uint16_t *back = alloc_or_null((size_t)(m * n) * 2);
    if (!x || !q || !sf || !back) {
        fprintf(stderr, "tilestack bench: out of memory for %s\n", shape);
        env->failures++;
        free(x), free(q), free(sf), free(back);
        return;
    }
    fill_bf16(x, m * n);
    memset(q, 0, (size_t)(m * n));
    memset(sf, 0, (size_t)(m * sfk32) * 4);
    memset(back, 0, (size_t)(m * n) * 2);

    const double mn = (double)m * (double)n;
    struct cast_case {
        const char *name, *dtype;
        cast_kind kind;
        bool ue8m0, packed;
        int64_t gran;
        ts_fp4_rounding rounding;
    } cases[] = {
        {"per_token_cast_to_fp8", "bf16->e4m3,f32 sf", CAST_TOKEN_FP8, false, false, 128,
         TS_FP4_ROUND_DEEPGEMM},
        {"per_token_cast_to_fp8 ue8m0x4", "bf16->e4m3,ue8m0x4", CAST_TOKEN_FP8, true, true, 128,
         TS_FP4_ROUND_DEEPGEMM},
        {"per_block_cast_to_fp8", "bf16->e4m3,f32 sf", CAST_BLOCK_FP8, false, false, 128,
         TS_FP4_ROUND_DEEPGEMM},
        {"per_channel_cast_to_fp8", "bf16->e4m3,f32 sf", CAST_CHANNEL_FP8, false, false, 128,
         TS_FP4_ROUND_DEEPGEMM},
        {"per_token_cast_to_fp4", "bf16->e2m1,ue8m0x4", CAST_TOKEN_FP4, true, true, 32,
         TS_FP4_ROUND_DEEPGEMM},
        {"per_token_cast_to_fp4 rne", "bf16->e2m1,f32 sf", CAST_TOKEN_FP4, false, false, 32,
         TS_FP4_ROUND_RNE},
        {"cast_back_from_fp8", "e4m3,f32 sf->bf16", CAST_BACK_FP8, false, false, 128,
         TS_FP4_ROUND_DEEPGEMM},
        {"cast_back_from_fp4", "e2m1,ue8m0x4->bf16", CAST_BACK_FP4, true, true, 32,
         TS_FP4_ROUND_DEEPGEMM},
    };
    const size_t ncases = only_first ? 1 : sizeof cases / sizeof cases[0];
    for (size_t i = 0; i < ncases; i++) {
        const struct cast_case *cc = &cases[i];
        cast_ctx c;
        memset(&c, 0, sizeof c);
        c.kind = cc->kind;
        c.ue8m0 = cc->ue8m0;
        c.packed = cc->packed;
        c.gran = cc->gran;
        c.rounding = cc->rounding;
        c.x = ts_tensor_2d(x, TS_BF16, m, n);
        double sf_bytes;
        if (cc->kind == CAST_TOKEN_FP4 || cc->kind == CAST_BACK_FP4) {
            c.q = ts_tensor_2d(q, TS_E2M1X2, m, n / 2);
            c.sf = cc->packed ? ts_tensor_2d(sf, TS_I32, m, ts__ceil_div(sfk32, 4))
                              : ts_tensor_2d(sf, TS_F32, m, sfk32);
            sf_bytes = 4.0 * (double)(c.sf.shape[0] * c.sf.shape[1]);
        } else {
            c.q = ts_tensor_2d(q, TS_E4M3, m, n);
            if (cc->kind == CAST_BLOCK_FP8)
                c.sf = ts_tensor_2d(sf, TS_F32, ts__ceil_div(m, 128), sfk128);
            else if (cc->kind == CAST_CHANNEL_FP8)
                c.sf = ts_tensor_2d(sf, TS_F32, m / 128, n);
            else
                c.sf = cc->packed ? ts_tensor_2d(sf, TS_I32, m, ts__ceil_div(sfk128, 4))
                                  : ts_tensor_2d(sf, TS_F32, m, sfk128);
            sf_bytes = 4.0 * (double)(c.sf.shape[0] * c.sf.shape[1]);
        }
        double bytes;
        if (cc->kind == CAST_BACK_FP8 || cc->kind == CAST_BACK_FP4) {
            /* Needs real quantised data: produce it once (untimed) with the per-token cast. */
            const bool fp4 = cc->kind == CAST_BACK_FP4;
            c.out = ts_tensor_2d(back, TS_BF16, m, n);
            (void)ts_set_num_threads(threads[nthreads - 1]);
            ts_status st = fp4 ? ts_per_token_cast_to_fp4(&c.x, cc->ue8m0, cc->gran, cc->packed,
                                                          cc->rounding, &c.q, &c.sf)
                               : ts_per_token_cast_to_fp8(&c.x, false, 128, false, &c.q, &c.sf);
            if (st != TS_OK) {
                ts__bench_row row = {0};
                row.suite = SUITE, row.name = cc->name, row.shape = shape, row.dtype = cc->dtype;
                row.threads = threads[0];
                ts__bench_report_error(env->opts, &row, fp4 ? "needs ts_per_token_cast_to_fp4"
                                                              : "needs ts_per_token_cast_to_fp8");
                continue;
            }
            bytes = (fp4 ? 0.5 * mn : mn) + sf_bytes + 2.0 * mn;
        } else {
            bytes = 2.0 * mn + (cc->kind == CAST_TOKEN_FP4 ? 0.5 * mn : mn) + sf_bytes;
        }
        for (int t = 0; t < nthreads; t++) {
            ts__bench_row row = {0};
            row.name = cc->name;
            row.shape = shape;
            row.dtype = cc->dtype;
            row.threads = threads[t];
            row.bytes = bytes;
            row.roof = TS__ROOF_MEMCPY;
            run_row(env, &row, run_cast, &c, BASE_MEMCPY);
        }
    }
    free(x), free(q), free(sf), free(back);
}

static bool env_init(numerics_env *env, const ts__bench_opts *opts, int64_t scratch_bytes) {
    memset(env, 0, sizeof *env);
    env->opts = opts;
    env->scratch_bytes = scratch_bytes;
    env->scratch_a = alloc_or_null((size_t)scratch_bytes);
    env->scratch_b = alloc_or_null((size_t)scratch_bytes);
    if (!env->scratch_a || !env->scratch_b) return false;
    memset(env->scratch_a, 1, (size_t)scratch_bytes);
    memset(env->scratch_b, 0, (size_t)scratch_bytes);
    return true;
}

static void env_free(numerics_env *env) {
    free(env->scratch_a);
    free(env->scratch_b);
}

static void print_machines(const ts__bench_opts *opts, const int *threads, int nthreads) {
    for (int t = 0; t < nthreads; t++)
        ts__bench_print_machine(stdout, ts__probe_machine(threads[t], opts->quick));
}

int ts__suite_numerics(const ts__bench_opts *opts) {
    int threads[2];
    int nthreads = ts__bench_thread_list(opts, threads);
    /* Probe every thread count before any kernel runs, so the pool never competes. */
    print_machines(opts, threads, nthreads);
    printf("\nsuite numerics (ISA %s); frac = share of the roofline; ratio = baseline time / "
           "time\n", opts->isa_name ? opts->isa_name : "?");
    ts__bench_table_header(stdout);

    const int64_t m = 8192, n = 7168;
    numerics_env env;
    /* Largest memcpy baseline: half the traffic of the fp8 cast-back (e4m3 + bf16 + sf). */
    if (!env_init(&env, opts, (int64_t)(2.0 * (double)m * n))) {
        fprintf(stderr, "tilestack bench: out of memory\n");
        env_free(&env);
        return 1;
    }
    /* L2-resident decodes are a single-thread target; --threads N runs them at N. */
    decode_rows(&env, opts->threads > 0 ? opts->threads : 1);
    encode_rows(&env, threads, nthreads);
    cast_rows(&env, m, n, threads, nthreads, false);
    env_free(&env);
    return env.failures ? 1 : 0;
}

/* `tilestack demo`: every numerics kernel once per kind on a DeepSeek-sized activation, at all
 * cores, with quick timing. */
int ts__numerics_tour(const ts__bench_opts *opts, int64_t m, int64_t n, int threads) {
    numerics_env env;
    if (!env_init(&env, opts, (int64_t)(2.0 * (double)m * n))) {
        env_free(&env);
        return 1;
    }
    ts__bench_table_header(stdout);
    decode_rows(&env, 1);
    cast_rows(&env, m, n, &threads, 1, false);
    env_free(&env);
    return env.failures ? 1 : 0;
}
