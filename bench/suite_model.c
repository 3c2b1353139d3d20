/* Suite `model`: prompt prefill against decode on the built-in dsv4-mini at B = 1 (issue 19's
 * "prefill >= 10x the decode tokens/s").
 *
 * Rows, per thread count:
 *   prefill  ts_model_prefill of a 512-token prompt from position 0 (last logits); its
 *            baseline is 512 decode steps, so the ratio column is prefill tok/s over decode
 *            tok/s;
 *   decode   one ts_model_decode step of the same sequence right after the prefill (context
 *            512 .. 512 + DECODE_STEPS - 1): what `tilestack generate` does next;
 *   prefill chunk C (TS_BENCH_FILTER=chunk, or without --quick): the prefill with C rows per
 *            chunk (m->prefill_rows), C in {48, 64, 96, 128, 256}, in the same rounds.
 * Each round resets the sequence, times one prefill per variant, then DECODE_STEPS decode steps;
 * times are medians over the rounds (prefills) and over every step (decode), so a drift of the
 * shared machine hits both sides alike. GFLOP/s counts the profiler's flops of the kernels
 * (ts__model_step_breakdown), from one profiled run after the timed ones; the per-token
 * breakdown of the prefill and of a decode step follows the table. */
#include "bench.h"

#include "model/model_internal.h"

#include <stdlib.h>
#include <string.h>

#define SUITE "model"
#define PROMPT 512
#define DECODE_STEPS 8
#define MAX_VARIANTS 6

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct model_env {
    ts_model *m;
    int32_t prompt[PROMPT];
    float *logits;
    int64_t chunk[MAX_VARIANTS]; /* rows per prefill chunk; 0: the model's default */
    int nvar;
} model_env;

static ts_status prefill_once(model_env *e, int v) {
    TS__RETURN_IF_ERROR(ts_model_reset_sequence(e->m, 0));
    e->m->prefill_rows = e->chunk[v];
    return ts_model_prefill(e->m, 0, PROMPT, e->prompt, e->logits);
}

static ts_status decode_once(model_env *e, int i) {
    const int64_t s = 0;
    const int32_t tok = e->prompt[(i * 37) % PROMPT];
    return ts_model_decode(e->m, 1, &s, &tok, e->logits);
}

/* pre[v]: median prefill seconds of variant v; *dec: median decode step seconds. */
static ts_status time_rounds(model_env *e, int rounds, double *pre, double *dec,
                             int *nrounds) {
    double *tp = (double *)malloc((size_t)(rounds * e->nvar) * sizeof(double));
    double *td = (double *)malloc((size_t)(rounds * DECODE_STEPS) * sizeof(double));
    ts_status st = tp && td ? TS_OK : TS_ERR_OUT_OF_MEMORY;
    /* warm-up: the first prefill grows the workspace, the first touches fault pages in */
    for (int v = 0; st == TS_OK && v < e->nvar; v++) st = prefill_once(e, v);
    for (int i = 0; st == TS_OK && i < 2; i++) st = decode_once(e, i);
    for (int r = 0; st == TS_OK && r < rounds; r++) {
        for (int v = 0; st == TS_OK && v < e->nvar; v++) {
            const double t0 = ts__now_s();
            st = prefill_once(e, v);
            tp[v * rounds + r] = ts__now_s() - t0;
        }
        for (int i = 0; st == TS_OK && i < DECODE_STEPS; i++) {
            const double t0 = ts__now_s();
            st = decode_once(e, i);
            td[r * DECODE_STEPS + i] = ts__now_s() - t0;
        }
    }
    if (st == TS_OK) {
        for (int v = 0; v < e->nvar; v++) pre[v] = median(tp + v * rounds, rounds);
        *dec = median(td, rounds * DECODE_STEPS);
        *nrounds = rounds;
    }
    free(tp);
    free(td);
    return st;
}

/* The profiler's flops of one prefill (variant 0) or one decode step, and its table divided by
 * `per` (tokens) when out is not NULL. */
static ts_status profiled(model_env *e, bool prefill, FILE *out, double *flops) {
    ts_model *m = e->m;
    ts_status st = prefill ? ts_model_reset_sequence(m, 0) : TS_OK;
    if (st != TS_OK) return st;
    ts__model_step_breakdown(m, true, NULL);
    st = prefill ? prefill_once(e, 0) : decode_once(e, 0);
    double f = 0;
    const double per = prefill ? PROMPT : 1;
    for (int i = 0; i < TS__P_COUNT; i++) {
        f += m->prof.flops[i];
        m->prof.sec[i] /= per;
        m->prof.bytes[i] /= per;
        m->prof.flops[i] /= per;
    }
    *flops = f;
    ts__model_step_breakdown(m, false, st == TS_OK ? out : NULL);
    return st;
}

static void report(const ts__bench_opts *opts, const char *name, const char *shape, int threads,
                   double sec, int runs, double flops, const char *base, double base_s) {
    ts__bench_row row;
    memset(&row, 0, sizeof row);
    row.suite = SUITE;
    row.name = name;
    row.shape = shape;
    row.dtype = "fp8/fp4";
    row.threads = threads;
    row.t.median_s = sec;
    row.t.min_s = sec;
    row.t.runs = runs;
    row.t.inner = 1;
    row.flops = flops;
    row.baseline = base;
    row.baseline_seconds = base_s;
    ts__bench_report(opts, &row);
}

static int run_threads(const ts__bench_opts *opts, model_env *e, int threads, bool sweep) {
    (void)ts_set_num_threads(threads);
    e->nvar = 1;
    e->chunk[0] = 0;
    if (sweep) {
        static const int64_t cs[] = {48, 64, 96, 128, 256};
        for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) e->chunk[e->nvar++] = cs[i];
    }
    double pre[MAX_VARIANTS], dec, fp = 0, fd = 0;
    int rounds = 0;
    ts_status st = time_rounds(e, opts->quick ? 5 : 11, pre, &dec, &rounds);
    if (st == TS_OK) st = profiled(e, true, NULL, &fp);
    if (st == TS_OK) st = profiled(e, false, NULL, &fd);
    if (st != TS_OK) {
        ts__bench_row row;
        memset(&row, 0, sizeof row);
        row.suite = SUITE, row.name = "prefill", row.shape = "dsv4-mini n512", row.threads = threads;
        char why[256];
        snprintf(why, sizeof why, "%s (%s)", ts_status_str(st), ts_last_error());
        ts__bench_report_error(opts, &row, why);
        return 1;
    }
    const int64_t C = ts__max64(e->m->max_batch, TS__PREFILL_ROWS);
    char shape[40];
    snprintf(shape, sizeof shape, "dsv4-mini n512 c%lld", (long long)C);
    report(opts, "prefill", shape, threads, pre[0], rounds, fp, "512 decode", PROMPT * dec);
    report(opts, "decode", "dsv4-mini B1 ctx512", threads, dec, rounds * DECODE_STEPS, fd, NULL, 0);
    for (int v = 1; v < e->nvar; v++) {
        char name[32];
        snprintf(name, sizeof name, "prefill chunk %lld", (long long)e->chunk[v]);
        report(opts, name, "dsv4-mini n512", threads, pre[v], rounds, fp, "512 decode",
               PROMPT * dec);
    }
    printf("  %d threads: prefill %.1f tok/s, decode %.1f tok/s, ratio %.2fx\n", threads,
           PROMPT / pre[0], 1.0 / dec, PROMPT * dec / pre[0]);
    return 0;
}

int ts__suite_model(const ts__bench_opts *opts) {
    int threads[2];
    const int nthreads = ts__bench_thread_list(opts, threads);
    for (int t = 0; t < nthreads; t++)
        ts__bench_print_machine(stdout, ts__probe_machine(threads[t], opts->quick));
    const char *filter = getenv("TS_BENCH_FILTER");
    const bool sweep = (filter && strstr(filter, "chunk")) || (!opts->quick && !filter);
    model_env *e = (model_env *)calloc(1, sizeof *e);
    ts_model_config cfg;
    ts_status st = e ? ts_model_config_builtin("dsv4-mini", &cfg) : TS_ERR_OUT_OF_MEMORY;
    if (st == TS_OK) st = ts_model_create(&cfg, 1, &e->m);
    if (st == TS_OK) {
        e->logits = (float *)malloc((size_t)cfg.vocab_size * sizeof(float));
        if (!e->logits) st = TS_ERR_OUT_OF_MEMORY;
    }
    if (st != TS_OK) {
        fprintf(stderr, "tilestack bench model: %s (%s)\n", ts_status_str(st), ts_last_error());
        if (e) ts_model_free(e->m);
        free(e);
        return 1;
    }
    ts__bench_rng rng = {0x9e3779b97f4a7c15ull};
    for (int i = 0; i < PROMPT; i++)
        e->prompt[i] = (int32_t)(ts__bench_rng_next(&rng) % (uint64_t)cfg.vocab_size);
    printf("\nsuite model (ISA %s): dsv4-mini, B = 1, a %d-token prompt; ratio = 512 decode "
           "steps' time / the prefill's = prefill tok/s / decode tok/s\n",
           opts->isa_name ? opts->isa_name : "?", PROMPT);
    ts__bench_table_header(stdout);
    const int saved = ts_get_num_threads();
    int fails = 0;
    for (int t = 0; t < nthreads; t++) fails += run_threads(opts, e, threads[t], sweep);
    /* the per-token kernel split at the last thread count, default chunk (or
     * TS_BENCH_PROFILE_CHUNK's, to see where a chunk size's time goes) */
    double f;
    const char *pc = getenv("TS_BENCH_PROFILE_CHUNK");
    e->nvar = 1;
    e->chunk[0] = pc ? strtoll(pc, NULL, 10) : 0;
    if (e->chunk[0] < 0 || e->chunk[0] > PROMPT) e->chunk[0] = 0;
    printf("\nprefill, per token (%d threads, chunk %lld):\n", ts_get_num_threads(),
           (long long)(e->chunk[0] ? e->chunk[0] : ts__max64(e->m->max_batch, TS__PREFILL_ROWS)));
    fails += profiled(e, true, stdout, &f) != TS_OK;
    printf("\ndecode step at context %d:\n", PROMPT);
    fails += profiled(e, false, stdout, &f) != TS_OK;
    (void)ts_set_num_threads(saved);
    ts_model_free(e->m);
    free(e->logits);
    free(e);
    return fails ? 1 : 0;
}
