/* MQA-logits rows of `tilestack bench attention` (DeepGEMM's lightning indexer, H = 64,
 * D = 128, V3.2 shapes):
 *   paged decode  1 query vs 32K / 128K cached tokens (block_kv 64), FP8 (and FP4 at 32K);
 *   prefill       S queries x 8192 keys, every query sees every key (S = 256 with --quick,
 *                 2048 without: the per-query work is the same).
 * flops = pairs * (2 H D + 2 H) (the q.k dot products of every head plus the relu-weighting);
 * bytes = q + keys with their scales + weights + logits; frac = min of the FMA and DRAM
 * bounds. Baseline (when built with OpenBLAS): cblas_sgemm on f32 copies already dequantised
 * (the decode is not charged to it), then the relu/weight reduction, 16 queries at a time.
 * TS_BENCH_FILTER=substring keeps only the rows whose "name shape" contains it. */
#include "bench.h"

#include "core/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef TS_HAVE_OPENBLAS
#include <cblas.h>
void openblas_set_num_threads(int num_threads);
#endif

#define SUITE "attention"
#define H 64
#define D 128
#define BLOCK_KV 64

typedef struct mqa_env {
    const ts__bench_opts *opts;
    const char *filter;
    int failures;
} mqa_env;

typedef struct mqa_case {
    int paged, fp4;
    int64_t s, skv; /* queries, keys per query */
    uint8_t *q, *kv, *cache;
    int32_t *q_sf, *kv_sfi, *ks, *ke, *cl, *bt, *meta;
    float *kv_sf, *w, *out;
    int64_t out_ld, nblk;
    /* baseline */
    float *qf, *kf, *tmp;
} mqa_case;

static void fill_bytes(ts__bench_rng *r, uint8_t *p, int64_t n, int fp4) {
    for (int64_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)(ts__bench_rng_next(r) >> 24);
        if (!fp4 && (b & 0x7F) == 0x7F) b ^= 0x08; /* no e4m3 NaN */
        if (!fp4) b &= 0xDF;                        /* |x| <= 8ish: realistic magnitudes */
        p[i] = b;
    }
}

static int case_init(mqa_case *c, int paged, int fp4, int64_t s, int64_t skv) {
    memset(c, 0, sizeof(*c));
    c->paged = paged;
    c->fp4 = fp4;
    c->s = s;
    c->skv = skv;
    ts__bench_rng r = {0x9E3779B97F4A7C15ull ^ (uint64_t)(skv * 31 + s)};
    const int64_t rb = fp4 ? D / 2 : D;
    c->q = ts__aligned_alloc((size_t)(s * H * rb));
    c->q_sf = ts__aligned_alloc((size_t)(s * H) * 4);
    c->w = ts__aligned_alloc((size_t)(s * H) * 4);
    if (!c->q || !c->q_sf || !c->w) return 0;
    fill_bytes(&r, c->q, s * H * rb, fp4);
    for (int64_t i = 0; i < s * H; i++) {
        c->q_sf[i] = 0x7F7F7F7F;
        c->w[i] = (float)((int64_t)(ts__bench_rng_next(&r) % 2001) - 1000) / 1000.0f;
    }
    if (paged) {
        c->nblk = ts__ceil_div(skv, BLOCK_KV);
        c->cache = ts__aligned_alloc((size_t)(c->nblk * BLOCK_KV * (rb + 4)));
        c->bt = ts__aligned_alloc((size_t)c->nblk * 4);
        c->cl = ts__aligned_alloc(4 * (size_t)s);
        c->meta = ts__aligned_alloc(2 * 4 * 3);
        if (!c->cache || !c->bt || !c->cl || !c->meta) return 0;
        for (int64_t b = 0; b < c->nblk; b++) {
            uint8_t *base = c->cache + b * BLOCK_KV * (rb + 4);
            fill_bytes(&r, base, BLOCK_KV * rb, fp4);
            for (int64_t t = 0; t < BLOCK_KV; t++) {
                int32_t sfw = 0x7F7F7F7F;
                float sf = 1.0f / 448.0f;
                memcpy(base + BLOCK_KV * rb + t * 4, fp4 ? (void *)&sfw : (void *)&sf, 4);
            }
            c->bt[b] = (int32_t)((b * 7919) % c->nblk); /* scattered pages */
        }
        for (int64_t i = 0; i < s; i++) c->cl[i] = (int32_t)skv;
        c->out_ld = ts__align(skv, 256);
    } else {
        c->kv = ts__aligned_alloc((size_t)(skv * rb));
        c->kv_sf = ts__aligned_alloc((size_t)skv * 4);
        c->kv_sfi = ts__aligned_alloc((size_t)skv * 4);
        c->ks = ts__aligned_alloc((size_t)s * 4);
        c->ke = ts__aligned_alloc((size_t)s * 4);
        if (!c->kv || !c->kv_sf || !c->kv_sfi || !c->ks || !c->ke) return 0;
        fill_bytes(&r, c->kv, skv * rb, fp4);
        for (int64_t j = 0; j < skv; j++) {
            c->kv_sf[j] = 1.0f / 448.0f;
            c->kv_sfi[j] = 0x7F7F7F7F;
        }
        for (int64_t i = 0; i < s; i++) {
            c->ks[i] = 0;
            c->ke[i] = (int32_t)skv;
        }
        c->out_ld = skv + 256;
    }
    c->out = ts__aligned_alloc((size_t)(s * c->out_ld) * 4);
    return c->out != NULL;
}

static void case_free(mqa_case *c) {
    void *p[] = {c->q, c->kv, c->cache, c->q_sf, c->kv_sfi, c->ks, c->ke, c->cl, c->bt,
                 c->meta, c->kv_sf, c->w, c->out, c->qf, c->kf, c->tmp};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) ts__aligned_free(p[i]);
}

static ts_status run_mqa(void *vc) {
    mqa_case *c = (mqa_case *)vc;
    const int64_t rb = c->fp4 ? D / 2 : D;
    const ts_dtype qt = c->fp4 ? TS_E2M1X2 : TS_E4M3;
    ts_tensor w = ts_tensor_2d(c->w, TS_F32, c->s, H);
    ts_tensor lg = ts_tensor_2d(c->out, TS_F32, c->s, c->skv);
    lg.strides[0] = c->out_ld;
    if (c->paged) {
        int64_t qs[4] = {1, c->s, H, rb}, sfs[3] = {1, c->s, H}, cs[4] = {c->nblk, BLOCK_KV, 1, rb + 4};
        ts_tensor q = ts_tensor_make(c->q, qt, 4, qs), qsf = ts_tensor_make(c->q_sf, TS_I32, 3, sfs);
        ts_tensor cache = ts_tensor_make(c->cache, TS_U8, 4, cs);
        ts_tensor cl = ts_tensor_2d(c->cl, TS_I32, 1, c->s);
        ts_tensor bt = ts_tensor_2d(c->bt, TS_I32, 1, c->nblk);
        ts_tensor meta = ts_tensor_2d(c->meta, TS_I32, 3, 2);
        ts_status st = ts_get_paged_mqa_logits_metadata(&cl, BLOCK_KV, 2, &meta);
        if (st != TS_OK) return st;
        return ts_fp8_fp4_paged_mqa_logits(&q, c->fp4 ? &qsf : NULL, &cache, &w, &cl, &bt, &meta,
                                           (int32_t)c->skv, false, &lg);
    }
    ts_tensor q = ts_tensor_3d(c->q, qt, c->s, H, rb), qsf = ts_tensor_2d(c->q_sf, TS_I32, c->s, H);
    ts_tensor kv = ts_tensor_2d(c->kv, qt, c->skv, rb);
    ts_tensor kvsf = c->fp4 ? ts_tensor_1d(c->kv_sfi, TS_I32, c->skv) : ts_tensor_1d(c->kv_sf, TS_F32, c->skv);
    ts_tensor ks = ts_tensor_1d(c->ks, TS_I32, c->s), ke = ts_tensor_1d(c->ke, TS_I32, c->s);
    return ts_fp8_fp4_mqa_logits(&q, c->fp4 ? &qsf : NULL, &kv, &kvsf, &w, &ks, &ke, false, 0, &lg);
}

#ifdef TS_HAVE_OPENBLAS
#define BASE_QB 16
/* f32 copies (dequantised outside the timing) for the FP8 baseline. */
static int base_init(mqa_case *c) {
    c->qf = ts__aligned_alloc((size_t)(c->s * H * D) * 4);
    c->kf = ts__aligned_alloc((size_t)(c->skv * D) * 4);
    c->tmp = ts__aligned_alloc((size_t)(BASE_QB * H * c->skv) * 4);
    if (!c->qf || !c->kf || !c->tmp) return 0;
    for (int64_t i = 0; i < c->s * H * D; i++) c->qf[i] = ts_e4m3_to_f32(c->q[i]);
    for (int64_t j = 0; j < c->skv; j++) {
        const uint8_t *row;
        if (c->paged) {
            row = c->cache + (int64_t)c->bt[j / BLOCK_KV] * BLOCK_KV * (D + 4) + (j % BLOCK_KV) * D;
        } else {
            row = c->kv + j * D;
        }
        for (int64_t dd = 0; dd < D; dd++) c->kf[j * D + dd] = ts_e4m3_to_f32(row[dd]);
    }
    return 1;
}

static ts_status run_base(void *vc) {
    mqa_case *c = (mqa_case *)vc;
    for (int64_t q0 = 0; q0 < c->s; q0 += BASE_QB) {
        int64_t nq = ts__min64(BASE_QB, c->s - q0);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)(nq * H), (int)c->skv, D, 1.0f,
                    c->qf + q0 * H * D, D, c->kf, D, 0.0f, c->tmp, (int)c->skv);
        for (int64_t i = 0; i < nq; i++) {
            float *o = c->out + (q0 + i) * c->out_ld;
            const float *w = c->w + (q0 + i) * H;
            for (int64_t j = 0; j < c->skv; j++) o[j] = 0.0f;
            for (int64_t hh = 0; hh < H; hh++) {
                const float *t = c->tmp + (i * H + hh) * c->skv;
                for (int64_t j = 0; j < c->skv; j++) o[j] += (t[j] > 0.0f ? t[j] : 0.0f) * w[hh];
            }
            for (int64_t j = 0; j < c->skv; j++) o[j] *= 1.0f / 448.0f;
        }
    }
    return TS_OK;
}
#endif

static void one_row(mqa_env *env, const char *name, int paged, int fp4, int64_t s, int64_t skv,
                    int threads) {
    const ts__bench_opts *opts = env->opts;
    char shape[96];
    snprintf(shape, sizeof shape, "%s H%d D%d %lldq x %lldk%s", fp4 ? "fp4" : "fp8", H, D,
             (long long)s, (long long)skv, paged ? " blk64" : "");
    if (!ts__bench_wanted(env->filter, name, shape)) return;
    ts__bench_row row;
    memset(&row, 0, sizeof row);
    row.suite = SUITE;
    row.name = name;
    row.shape = shape;
    row.dtype = fp4 ? "fp4" : "fp8";
    row.threads = threads;
    const double pairs = (double)s * (double)skv, rb = fp4 ? D / 2 : D;
    row.flops = pairs * (2.0 * H * D + 2.0 * H);
    row.bytes = (double)s * H * (rb + 4) + (double)skv * (rb + 4) + pairs * 4;
    row.roof = TS__ROOF_DRAM;
    mqa_case c;
    if (!case_init(&c, paged, fp4, s, skv)) {
        ts__bench_report_error(opts, &row, "out of memory");
        env->failures++;
        case_free(&c);
        return;
    }
    (void)ts_set_num_threads(threads);
    ts_status st = ts__bench_time(run_mqa, &c, opts->quick, &row.t);
    if (st != TS_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s (%s)", ts_status_str(st), ts_last_error());
        ts__bench_report_error(opts, &row, why);
        env->failures++;
        case_free(&c);
        return;
    }
#ifdef TS_HAVE_OPENBLAS
    if (!fp4 && base_init(&c)) {
        openblas_set_num_threads(threads);
        ts__timing bt;
        if (ts__bench_time(run_base, &c, opts->quick, &bt) == TS_OK) {
            row.baseline = "openblas-sgemm";
            row.baseline_seconds = bt.median_s;
        }
    }
#endif
    ts__bench_report(opts, &row);
    case_free(&c);
}

int ts__suite_attention_mqa(const ts__bench_opts *opts, const int *threads, int nthreads) {
    mqa_env env = {opts, getenv("TS_BENCH_FILTER"), 0};
    const int64_t prefill_s = opts->quick ? 256 : 2048;
    for (int t = 0; t < nthreads; t++) {
        one_row(&env, "mqa_logits_paged", 1, 0, 1, 32768, threads[t]);
        one_row(&env, "mqa_logits_paged", 1, 0, 1, 131072, threads[t]);
        one_row(&env, "mqa_logits_paged", 1, 1, 1, 32768, threads[t]);
        one_row(&env, "mqa_logits", 0, 0, prefill_s, 8192, threads[t]);
    }
    return env.failures ? 1 : 0;
}
