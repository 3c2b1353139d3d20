/* FlashMLA rows of `tilestack bench attention` (issue 5 shapes, DeepSeek V3.2 MLA: d_qk 576,
 * d_v 512):
 *   sparse_decode  V32 FP8 cache, topk 2048, h_q 64/128, s_q 1/2, b 1/8 (+ one MODEL1 row);
 *   sparse_prefill h_q 128, topk 2048, s_q 256 (64 in --quick: query tokens are independent
 *                  groups of equal cost, so the rate is the same and the run 4x shorter);
 *   dense_decode   bf16 paged cache (page 64), h_kv 1, h_q 128 (compute-bound) and 16
 *                  (memory-bound), 8K and 32K tokens.
 * flops as upstream's tests count them (2 h_q (d_qk + d_v) per attended token and query row);
 * compute-bound rows are judged against the FMA peak, the h_q 16 rows against DRAM (bytes =
 * the cache read once). Baseline: OpenBLAS sgemm of the same two GEMMs per group on a
 * pre-gathered f32 cache (no softmax, no decode), when OpenBLAS is present.
 * TS_BENCH_FILTER=substring keeps only the rows whose "name shape" contains it. */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef TS_HAVE_OPENBLAS
#include <cblas.h>
void openblas_set_num_threads(int num_threads);
#endif

#define SUITE "attention"

typedef struct mla_env {
    const ts__bench_opts *opts;
    const char *filter;
    int failures;
} mla_env;

static void fill_bf16(ts__bench_rng *r, uint16_t *x, int64_t n, float amp) {
    for (int64_t i = 0; i < n; i++) {
        float v = ((float)(ts__bench_rng_next(r) >> 40) / (float)(1 << 24) * 2.0f - 1.0f) * amp;
        x[i] = ts_f32_to_bf16(v);
    }
}

/* ---- the calls being timed ---- */

typedef struct dec_call {
    ts_flash_mla_kvcache_args a;
    ts_tensor out, lse;
} dec_call;

static ts_status run_decode(void *ctx) {
    dec_call *c = (dec_call *)ctx;
    return ts_flash_mla_with_kvcache(&c->a, &c->out, &c->lse);
}

typedef struct pf_call {
    ts_tensor q, kv, ind, out, maxl, lse;
    float scale;
} pf_call;

static ts_status run_prefill(void *ctx) {
    pf_call *c = (pf_call *)ctx;
    return ts_flash_mla_sparse_fwd(&c->q, &c->kv, &c->ind, c->scale, 512, NULL, NULL, &c->out,
                                   &c->maxl, &c->lse);
}

/* baseline: groups x (S = Q K^T, O = S V) in f32 through OpenBLAS */
typedef struct blas_call {
    int64_t groups, rows, n, dk;
    float *q, *k, *s, *o;
} blas_call;

#ifdef TS_HAVE_OPENBLAS
static ts_status run_blas(void *ctx) {
    blas_call *b = (blas_call *)ctx;
    for (int64_t g = 0; g < b->groups; g++) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)b->rows, (int)b->n, (int)b->dk,
                    1.0f, b->q, (int)b->dk, b->k, (int)b->dk, 0.0f, b->s, (int)b->n);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)b->rows, 512, (int)b->n, 1.0f,
                    b->s, (int)b->n, b->k, (int)b->dk, 0.0f, b->o, 512);
    }
    return TS_OK;
}
#endif

static double time_blas(const mla_env *env, int64_t groups, int64_t rows, int64_t n, int64_t dk,
                        int threads) {
#ifdef TS_HAVE_OPENBLAS
    blas_call b = {groups, rows, n, dk, NULL, NULL, NULL, NULL};
    b.q = (float *)calloc((size_t)(rows * dk), 4);
    b.k = (float *)malloc((size_t)(n * dk) * 4);
    b.s = (float *)calloc((size_t)(rows * n), 4);
    b.o = (float *)calloc((size_t)(rows * 512), 4);
    double r = 0;
    if (b.q && b.k && b.s && b.o) {
        for (int64_t i = 0; i < n * dk; i++) b.k[i] = (float)(i % 7) * 0.01f;
        openblas_set_num_threads(threads);
        ts__timing bt;
        if (ts__bench_time(run_blas, &b, env->opts->quick, &bt) == TS_OK) r = bt.median_s;
    }
    free(b.q);
    free(b.k);
    free(b.s);
    free(b.o);
    return r;
#else
    (void)env, (void)groups, (void)rows, (void)n, (void)dk, (void)threads;
    return 0;
#endif
}

static void report(mla_env *env, ts__bench_row *row, ts_status st, double base_s) {
    if (st != TS_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s (%s)", ts_status_str(st), ts_last_error());
        ts__bench_report_error(env->opts, row, why);
        env->failures++;
        return;
    }
    if (base_s > 0) {
        row->baseline = "openblas 2 sgemm/group";
        row->baseline_seconds = base_s;
    }
    ts__bench_report(env->opts, row);
}

/* ---- sparse decode ---- */

static void sparse_decode_row(mla_env *env, ts_mla_kv_layout L, int64_t hq, int64_t topk,
                              int64_t sq, int64_t b, const int *threads, int nthreads) {
    const int64_t d = ts_mla_kv_head_dim(L), tb = ts_mla_kv_token_bytes(L), P = 64;
    char shape[96];
    snprintf(shape, sizeof shape, "b%lld s_q%lld h_q%lld topk%lld", (long long)b, (long long)sq,
             (long long)hq, (long long)topk);
    const char *name = L == TS_MLA_KV_V32 ? "sparse_decode_v32" : "sparse_decode_model1";
    if (!ts__bench_wanted(env->filter, name, shape)) return;
    /* each request owns an 8K-token region of a shared cache */
    const int64_t per_req = 8192, ntok = b * per_req, nb = ntok / P;
    uint16_t *x = (uint16_t *)malloc((size_t)(P * d) * 2);
    uint8_t *kc = (uint8_t *)malloc((size_t)(ntok * tb));
    uint16_t *q = (uint16_t *)malloc((size_t)(b * sq * hq * d) * 2);
    int32_t *ind = (int32_t *)malloc((size_t)(b * sq * topk) * 4);
    uint16_t *out = (uint16_t *)malloc((size_t)(b * sq * hq * 512) * 2);
    float *lse = (float *)malloc((size_t)(b * sq * hq) * 4);
    ts__bench_rng r = {0x9E3779B97F4A7C15ull};
    ts_mla_metadata *meta = NULL;
    ts__bench_row row;
    memset(&row, 0, sizeof row);
    row.suite = SUITE;
    row.name = name;
    row.shape = shape;
    row.dtype = L == TS_MLA_KV_V32 ? "fp8 v32" : "fp8 model1";
    if (!x || !kc || !q || !ind || !out || !lse) goto done;
    for (int64_t blk = 0; blk < nb; blk++) {
        fill_bf16(&r, x, P * d, 0.25f);
        ts_tensor xt = ts_tensor_make(x, TS_BF16, 4, (int64_t[]){1, P, 1, d});
        ts_tensor kt = ts_tensor_make(kc + blk * P * tb, TS_U8, 4, (int64_t[]){1, P, 1, tb});
        ts_mla_quantize_kv_cache(L, &xt, &kt);
    }
    fill_bf16(&r, q, b * sq * hq * d, 1.0f);
    for (int64_t i = 0; i < b; i++)
        for (int64_t k = 0; k < sq * topk; k++)
            ind[i * sq * topk + k] = (int32_t)(i * per_req + (int64_t)(ts__bench_rng_next(&r) % per_req));
    dec_call c;
    memset(&c, 0, sizeof c);
    ts_tensor tq = ts_tensor_make(q, TS_BF16, 4, (int64_t[]){b, sq, hq, d});
    ts_tensor tk = ts_tensor_make(kc, TS_U8, 4, (int64_t[]){nb, P, 1, tb});
    ts_tensor ti = ts_tensor_3d(ind, TS_I32, b, sq, topk);
    c.a.q = &tq;
    c.a.k_cache = &tk;
    c.a.indices = &ti;
    c.a.head_dim_v = 512;
    c.a.is_fp8_kvcache = true;
    c.out = ts_tensor_make(out, TS_BF16, 4, (int64_t[]){b, sq, hq, 512});
    c.lse = ts_tensor_3d(lse, TS_F32, b, hq, sq);
    row.flops = 2.0 * (double)hq * (double)(b * sq * topk) * (double)(d + 512);
    row.bytes = (double)(b * sq * topk) * (double)tb + 2.0 * (double)(b * sq * hq) * (double)(d + 512);
    row.roof = TS__ROOF_FMA;
    for (int ti_ = 0; ti_ < nthreads; ti_++) {
        ts_get_mla_metadata(&meta);
        c.a.tile_scheduler_metadata = meta;
        row.threads = threads[ti_];
        (void)ts_set_num_threads(threads[ti_]);
        ts_status st = ts__bench_time(run_decode, &c, env->opts->quick, &row.t);
        double base = st == TS_OK ? time_blas(env, b * sq, hq, topk, d, threads[ti_]) : 0;
        report(env, &row, st, base);
        ts_mla_metadata_free(meta);
        meta = NULL;
    }
done:
    if (!x || !kc || !q || !ind || !out || !lse) {
        ts__bench_report_error(env->opts, &row, "out of memory");
        env->failures++;
    }
    free(x);
    free(kc);
    free(q);
    free(ind);
    free(out);
    free(lse);
}

/* ---- sparse prefill ---- */

static void sparse_prefill_row(mla_env *env, int64_t hq, int64_t topk, int64_t sq, int64_t skv,
                               const int *threads, int nthreads) {
    const int64_t d = 576;
    char shape[96];
    snprintf(shape, sizeof shape, "s_q%lld s_kv%lld h_q%lld topk%lld", (long long)sq,
             (long long)skv, (long long)hq, (long long)topk);
    if (!ts__bench_wanted(env->filter, "sparse_prefill", shape)) return;
    uint16_t *q = (uint16_t *)malloc((size_t)(sq * hq * d) * 2);
    uint16_t *kv = (uint16_t *)malloc((size_t)(skv * d) * 2);
    int32_t *ind = (int32_t *)malloc((size_t)(sq * topk) * 4);
    uint16_t *out = (uint16_t *)malloc((size_t)(sq * hq * 512) * 2);
    float *ml = (float *)malloc((size_t)(sq * hq) * 4), *lse = (float *)malloc((size_t)(sq * hq) * 4);
    ts__bench_row row;
    memset(&row, 0, sizeof row);
    row.suite = SUITE;
    row.name = "sparse_prefill";
    row.shape = shape;
    row.dtype = "bf16";
    if (!q || !kv || !ind || !out || !ml || !lse) {
        ts__bench_report_error(env->opts, &row, "out of memory");
        env->failures++;
        goto done;
    }
    ts__bench_rng r = {0x2545F4914F6CDD1Dull};
    fill_bf16(&r, q, sq * hq * d, 1.0f);
    fill_bf16(&r, kv, skv * d, 0.25f);
    for (int64_t i = 0; i < sq * topk; i++) ind[i] = (int32_t)(ts__bench_rng_next(&r) % skv);
    pf_call c;
    c.q = ts_tensor_3d(q, TS_BF16, sq, hq, d);
    c.kv = ts_tensor_3d(kv, TS_BF16, skv, 1, d);
    c.ind = ts_tensor_3d(ind, TS_I32, sq, 1, topk);
    c.out = ts_tensor_3d(out, TS_BF16, sq, hq, 512);
    c.maxl = ts_tensor_2d(ml, TS_F32, sq, hq);
    c.lse = ts_tensor_2d(lse, TS_F32, sq, hq);
    c.scale = 1.0f / 24.0f;
    row.flops = 2.0 * (double)(sq * topk) * (double)hq * (double)(d + 512);
    row.bytes = (double)(sq * topk) * (double)d * 2 + (double)(sq * hq) * (double)(d + 512) * 2;
    row.roof = TS__ROOF_FMA;
    for (int t = 0; t < nthreads; t++) {
        row.threads = threads[t];
        (void)ts_set_num_threads(threads[t]);
        ts_status st = ts__bench_time(run_prefill, &c, env->opts->quick, &row.t);
        double base = st == TS_OK ? time_blas(env, sq, hq, topk, d, threads[t]) : 0;
        report(env, &row, st, base);
    }
done:
    free(q);
    free(kv);
    free(ind);
    free(out);
    free(ml);
    free(lse);
}

/* ---- dense decode ---- */

static void dense_decode_row(mla_env *env, int64_t hq, int64_t seqlen, int64_t sq, int64_t b,
                             const int *threads, int nthreads) {
    const int64_t d = 576, P = 64, hkv = 1;
    char shape[96];
    snprintf(shape, sizeof shape, "b%lld s_q%lld h_q%lld h_kv1 seq%lld", (long long)b,
             (long long)sq, (long long)hq, (long long)seqlen);
    if (!ts__bench_wanted(env->filter, "dense_decode", shape)) return;
    const int64_t mb = (seqlen + P - 1) / P, nb = b * mb;
    uint16_t *kc = (uint16_t *)malloc((size_t)(nb * P * d) * 2);
    uint16_t *q = (uint16_t *)malloc((size_t)(b * sq * hq * d) * 2);
    int32_t *bt = (int32_t *)malloc((size_t)nb * 4), *sl = (int32_t *)malloc((size_t)b * 4);
    uint16_t *out = (uint16_t *)malloc((size_t)(b * sq * hq * 512) * 2);
    float *lse = (float *)malloc((size_t)(b * sq * hq) * 4);
    ts__bench_row row;
    memset(&row, 0, sizeof row);
    row.suite = SUITE;
    row.name = "dense_decode";
    row.shape = shape;
    row.dtype = "bf16";
    if (!kc || !q || !bt || !sl || !out || !lse) {
        ts__bench_report_error(env->opts, &row, "out of memory");
        env->failures++;
        goto done;
    }
    ts__bench_rng r = {0x1234567ull};
    fill_bf16(&r, kc, nb * P * d, 0.25f);
    fill_bf16(&r, q, b * sq * hq * d, 1.0f);
    /* blocks in a scattered (but fixed) order */
    for (int64_t i = 0; i < nb; i++) bt[i] = (int32_t)((i * 7919) % nb);
    for (int64_t i = 0; i < b; i++) sl[i] = (int32_t)seqlen;
    dec_call c;
    memset(&c, 0, sizeof c);
    ts_tensor tq = ts_tensor_make(q, TS_BF16, 4, (int64_t[]){b, sq, hq, d});
    ts_tensor tk = ts_tensor_make(kc, TS_BF16, 4, (int64_t[]){nb, P, hkv, d});
    ts_tensor tbt = ts_tensor_2d(bt, TS_I32, b, mb), tsl = ts_tensor_1d(sl, TS_I32, b);
    c.a.q = &tq;
    c.a.k_cache = &tk;
    c.a.block_table = &tbt;
    c.a.cache_seqlens = &tsl;
    c.a.head_dim_v = 512;
    c.a.causal = true;
    c.out = ts_tensor_make(out, TS_BF16, 4, (int64_t[]){b, sq, hq, 512});
    c.lse = ts_tensor_3d(lse, TS_F32, b, hq, sq);
    row.flops = 2.0 * (double)(b * hq * sq) * (double)seqlen * (double)(d + 512);
    row.bytes = (double)b * ((double)seqlen * (double)(hkv * d) * 2 +
                             (double)(sq * hq) * (double)(d + 512) * 2);
    row.roof = hq * sq >= 64 ? TS__ROOF_FMA : TS__ROOF_DRAM;
    for (int t = 0; t < nthreads; t++) {
        ts_mla_metadata *meta;
        ts_get_mla_metadata(&meta);
        c.a.tile_scheduler_metadata = meta;
        row.threads = threads[t];
        (void)ts_set_num_threads(threads[t]);
        ts_status st = ts__bench_time(run_decode, &c, env->opts->quick, &row.t);
        double base = st == TS_OK && row.roof == TS__ROOF_FMA
                          ? time_blas(env, b, hq * sq, seqlen, d, threads[t])
                          : 0;
        report(env, &row, st, base);
        ts_mla_metadata_free(meta);
    }
done:
    free(kc);
    free(q);
    free(bt);
    free(sl);
    free(out);
    free(lse);
}

int ts__suite_attention_mla(const ts__bench_opts *opts, const int *threads, int nthreads) {
    mla_env env = {opts, getenv("TS_BENCH_FILTER"), 0};
    static const int64_t hqs[2] = {64, 128}, sqs[2] = {1, 2}, bs[2] = {1, 8};
    for (int ib = 0; ib < 2; ib++)
        for (int is = 0; is < 2; is++)
            for (int ih = 0; ih < 2; ih++)
                sparse_decode_row(&env, TS_MLA_KV_V32, hqs[ih], 2048, sqs[is], bs[ib], threads,
                                  nthreads);
    sparse_decode_row(&env, TS_MLA_KV_MODEL1, 128, 2048, 1, 1, threads, nthreads);
    sparse_prefill_row(&env, 128, 2048, opts->quick ? 64 : 256, 16384, threads, nthreads);
    dense_decode_row(&env, 128, 8192, 1, 1, threads, nthreads);
    dense_decode_row(&env, 128, 32768, 1, 1, threads, nthreads);
    dense_decode_row(&env, 16, 8192, 1, 1, threads, nthreads);
    dense_decode_row(&env, 16, 32768, 1, 1, threads, nthreads);
    return env.failures ? 1 : 0;
}
