/* Golden-reference scaffolding and weight-file helpers of the model tests
 * (test_model_common.h). */
#include "test_model_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int tm_ensure_reference(ts_test_ctx *ts_t_, tm_golden_ref *r) {
    if (r->ref_logits) return 1;
    ts_status st = ts__model_golden_load(r->path, &r->golden);
    TS_CHECK_STATUS(st, TS_OK);
    if (st != TS_OK) return 0;
    const ts__model_golden *g = &r->golden;
    double *lg = malloc((size_t)(g->n_steps * g->cfg.vocab_size) * sizeof(double));
    TS_CHECK(lg != NULL);
    if (!lg) return 0;
    st = ts__model_reference_run_golden(g, lg, &r->sum_mismatches, r->first_bad);
    TS_CHECK_STATUS(st, TS_OK);
    if (st != TS_OK) {
        free(lg);
        return 0;
    }
    r->ref_logits = lg;
    return 1;
}

void tm_free_reference(tm_golden_ref *r) {
    free(r->ref_logits);
    r->ref_logits = NULL;
    ts__model_golden_free(&r->golden);
}

int tm_verbose(void) { return getenv("TS_MODEL_CHECK_VERBOSE") != NULL; }

void tm_check_reference_vs_golden(ts_test_ctx *ts_t_, const tm_golden_ref *r, const char *label) {
    const ts__model_golden *g = &r->golden;
    const int64_t V = g->cfg.vocab_size, n = g->n_steps * V;
    double *gold = malloc((size_t)n * sizeof(double));
    TS_CHECK(gold != NULL);
    if (!gold) return;
    for (int64_t i = 0; i < n; i++) gold[i] = g->logits[i];
    ts__model_compare cmp;
    TS_CHECK_STATUS(ts__model_compare_logits(g, gold, r->ref_logits, &cmp), TS_OK);
    /* Two float64 simulations of the same rounding points: they differ by summation order
     * and the golden's f32 storage only (measured max 4e-15 on dsv4-tiny). */
    TS_CHECK_MSG(cmp.max_diff < 1e-9, "max calc_diff %.3g at step %lld", cmp.max_diff,
                 (long long)cmp.worst_step);
    if (tm_verbose())
        printf("  %s: max calc_diff %.3g (step %lld), mean %.3g\n", label, cmp.max_diff,
               (long long)cmp.worst_step, cmp.mean_diff);
    TS_CHECK_EQ_INT(cmp.greedy_steps, g->n_gen + 1);
    TS_CHECK_MSG(cmp.greedy_mismatches == 0, "%lld greedy tokens differ, first at step %lld",
                 (long long)cmp.greedy_mismatches, (long long)cmp.first_mismatch);
    /* the generated tokens are not degenerate */
    int distinct = 0;
    for (int64_t i = g->n_prompt; i < g->n_steps; i++) {
        int seen = 0;
        for (int64_t j = g->n_prompt; j < i; j++) seen |= g->tokens[j] == g->tokens[i];
        distinct += !seen;
    }
    TS_CHECK(distinct > 8);
    free(gold);
}

int tm_run_optimised(ts_test_ctx *ts_t_, const ts__model_golden *g, int64_t nb, double *out) {
    const int64_t V = g->cfg.vocab_size;
    TS_CHECK(nb >= 1 && nb <= 4);
    if (nb < 1 || nb > 4) return 0;
    ts_model *m = NULL;
    TS_CHECK_STATUS(ts_model_create(&g->cfg, nb, &m), TS_OK);
    if (!m) return 0;
    float *lf = malloc((size_t)(nb * V) * sizeof(float));
    TS_CHECK(lf != NULL);
    int64_t seqs[4];
    int32_t toks[4];
    for (int64_t b = 0; b < nb; b++) seqs[b] = nb - 1 - b;
    int ok = lf != NULL;
    for (int64_t i = 0; ok && i < g->n_steps; i++) {
        toks[0] = g->tokens[i];
        for (int64_t b = 1; b < nb; b++) toks[b] = (int32_t)((g->tokens[i] * 7 + 13 * b + i) % V);
        const ts_status st = ts_model_decode(m, nb, seqs, toks, lf);
        TS_CHECK_STATUS(st, TS_OK);
        ok = st == TS_OK;
        for (int64_t v = 0; ok && v < V; v++) out[i * V + v] = lf[v];
    }
    free(lf);
    ts_model_free(m);
    return ok;
}

void tm_check_optimised(ts_test_ctx *ts_t_, const tm_golden_ref *r, int64_t batch,
                        const char *label, ts__model_compare *cmp) {
    const ts__model_golden *g = &r->golden;
    const int64_t n = g->n_steps * g->cfg.vocab_size;
    memset(cmp, 0, sizeof *cmp);
    cmp->first_above_1e9 = -1;
    double *opt = malloc((size_t)n * sizeof(double));
    double *alt = malloc((size_t)n * sizeof(double));
    TS_CHECK(opt && alt);
    if (opt && alt && tm_run_optimised(ts_t_, g, 1, opt)) {
        TS_CHECK_STATUS(ts__model_compare_logits(g, r->ref_logits, opt, cmp), TS_OK);
        TS_CHECK_MSG(cmp->max_diff < 1e-3,
                     "max calc_diff %.3g at step %lld (mean %.3g; first step above 1e-9: %lld)",
                     cmp->max_diff, (long long)cmp->worst_step, cmp->mean_diff,
                     (long long)cmp->first_above_1e9);
        TS_CHECK_EQ_INT(cmp->greedy_steps, g->n_gen + 1);
        TS_CHECK_MSG(cmp->greedy_mismatches == 0,
                     "%lld greedy tokens differ, first at step %lld (reference top-2 margin there "
                     "%.3g)",
                     (long long)cmp->greedy_mismatches, (long long)cmp->first_mismatch,
                     cmp->first_mismatch_margin);
        if (tm_verbose())
            printf("  %s: max calc_diff %.3g (step %lld), mean %.3g, first step above 1e-9: "
                   "%lld\n",
                   label, cmp->max_diff, (long long)cmp->worst_step, cmp->mean_diff,
                   (long long)cmp->first_above_1e9);
        const int threads = ts_get_num_threads(), other = threads > 1 ? 1 : 2;
        TS_CHECK_STATUS(ts_set_num_threads(other), TS_OK);
        if (tm_run_optimised(ts_t_, g, 1, alt))
            TS_CHECK_MSG(memcmp(opt, alt, (size_t)n * sizeof(double)) == 0,
                         "logits with %d threads differ from %d", other, threads);
        TS_CHECK_STATUS(ts_set_num_threads(threads), TS_OK);
        if (batch > 1 && tm_run_optimised(ts_t_, g, batch, alt))
            TS_CHECK_MSG(memcmp(opt, alt, (size_t)n * sizeof(double)) == 0,
                         "logits inside a batch of %lld differ from the sequence alone",
                         (long long)batch);
    }
    free(opt);
    free(alt);
}

ts_model *tm_create_saved(ts_test_ctx *ts_t_, const ts_model_config *c, int64_t max_batch,
                          char *path) {
    ts_model *m = NULL;
    TS_CHECK_STATUS(ts_model_create(c, max_batch, &m), TS_OK);
    if (!m) return NULL;
    const int fd = mkstemp(path);
    TS_CHECK(fd >= 0);
    if (fd < 0) {
        ts_model_free(m);
        return NULL;
    }
    close(fd);
    const ts_status st = ts_model_save_weights(m, path);
    TS_CHECK_STATUS(st, TS_OK);
    if (st != TS_OK) {
        remove(path);
        ts_model_free(m);
        return NULL;
    }
    return m;
}

tm_blob tm_read_all(const char *path) {
    tm_blob b = {NULL, 0};
    FILE *f = fopen(path, "rb");
    if (!f) return b;
    fseek(f, 0, SEEK_END);
    b.n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    b.p = (uint8_t *)malloc(b.n);
    if (b.p && fread(b.p, 1, b.n, f) != b.n) b.n = 0;
    fclose(f);
    return b;
}

void tm_write_all(const char *path, const uint8_t *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(p, 1, n, f);
    fclose(f);
}

int tm_write_edited(const char *path, const tm_blob *b, const char *from, const char *to) {
    if (!b->p || b->n < 8) return 0;
    uint64_t h = 0;
    for (int i = 0; i < 8; i++) h |= (uint64_t)b->p[i] << (8 * i);
    if (h > b->n - 8) return 0;
    char *hdr = (char *)malloc(h + 1);
    uint8_t *out = (uint8_t *)malloc(8 + h + strlen(to) + (b->n - 8 - h));
    if (!hdr || !out) {
        free(hdr);
        free(out);
        return 0;
    }
    memcpy(hdr, b->p + 8, h);
    hdr[h] = 0;
    char *at = strstr(hdr, from);
    size_t k = 8;
    if (at) {
        memcpy(out + k, hdr, (size_t)(at - hdr));
        k += (size_t)(at - hdr);
        memcpy(out + k, to, strlen(to));
        k += strlen(to);
        const size_t rest = strlen(at + strlen(from));
        memcpy(out + k, at + strlen(from), rest);
        k += rest;
    } else {
        memcpy(out + k, hdr, h);
        k += h;
    }
    for (int i = 0; i < 8; i++) out[i] = (uint8_t)((uint64_t)(k - 8) >> (8 * i));
    memcpy(out + k, b->p + 8 + h, b->n - 8 - h);
    tm_write_all(path, out, k + (b->n - 8 - h));
    free(out);
    free(hdr);
    return at != NULL;
}

static char g_root[64];

void tm_root_make(const char *prefix) {
    snprintf(g_root, sizeof g_root, "/tmp/%sXXXXXX", prefix);
    if (!mkdtemp(g_root)) g_root[0] = 0;
}

void tm_remove_dir(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
}

void tm_root_remove(void) {
    if (g_root[0]) tm_remove_dir(g_root);
    g_root[0] = 0;
}

double tm_calc_diff(const float *x, const float *y, int64_t n) {
    double xy = 0, xx_yy = 0;
    for (int64_t i = 0; i < n; i++) {
        xy += (double)x[i] * y[i];
        xx_yy += (double)x[i] * x[i] + (double)y[i] * y[i];
    }
    return 1 - 2 * xy / xx_yy;
}

const char *tm_root(void) { return g_root; }

const char *tm_at(const char *name) {
    static char buf[8][512];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, 512, "%s/%s", g_root, name);
    return b;
}

ts_model *tm_tiny(void) {
    ts_model_config c;
    ts_model *m = NULL;
    if (ts_model_config_builtin("dsv4-tiny", &c) != TS_OK || ts_model_create(&c, 1, &m) != TS_OK) return NULL;
    return m;
}
