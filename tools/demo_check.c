/* --check: dsv4-tiny and dsv32-tiny (attention = v32, docs/model.md §8) through the optimised
 * path, against the float64 reference (src/model_ref/) and the numpy golden runs
 * (tests/golden/dsv4_tiny.bin, dsv32_tiny.bin), teacher-forced over the golden tokens (docs/model.md, "Reference implementations and golden file"). Under mpirun
 * the expert-parallel model decodes the same tokens on every rank and must give rank 0's
 * in-process logits bit for bit. Exit code 0 when everything holds, 1 otherwise. */
#include "demo.h"
#include "bench.h"
#include "core/internal.h"
#include "model_ref/model_ref.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GOLDEN_REL "tests/golden/dsv4_tiny.bin"
#define GOLDEN32_REL "tests/golden/dsv32_tiny.bin"

static bool readable(const char *p) { return access(p, R_OK) == 0; }

/* The golden file: --golden, the source tree named at build time (TS_SOURCE_DIR, if the build
 * defines it), the working directory, the source tree recorded in the CMake cache next to this
 * binary, or the binary's parent directory (build/ inside the checkout). */
static bool find_golden(const char *given, const char *rel, char *path, size_t cap);

bool ts__demo_find_golden(const char *given, char *path, size_t cap) {
    return find_golden(given, GOLDEN_REL, path, cap);
}

static bool find_golden(const char *given, const char *rel, char *path, size_t cap) {
    if (given) {
        snprintf(path, cap, "%s", given);
        return readable(path);
    }
#ifdef TS_SOURCE_DIR
    snprintf(path, cap, "%s/%s", TS_SOURCE_DIR, rel);
    if (readable(path)) return true;
#endif
    snprintf(path, cap, "%s", rel);
    if (readable(path)) return true;
    char exe[4096];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return false;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return false;
    *slash = 0;
    char cache[4200];
    snprintf(cache, sizeof cache, "%s/CMakeCache.txt", exe);
    FILE *f = fopen(cache, "r");
    if (f) {
        char line[4096];
        while (fgets(line, sizeof line, f)) {
            static const char key[] = "CMAKE_HOME_DIRECTORY:INTERNAL=";
            if (strncmp(line, key, sizeof key - 1)) continue;
            line[strcspn(line, "\r\n")] = 0;
            snprintf(path, cap, "%s/%s", line + sizeof key - 1, rel);
            if (readable(path)) {
                fclose(f);
                return true;
            }
        }
        fclose(f);
    }
    snprintf(path, cap, "%s/../%s", exe, rel);
    return readable(path);
}

static double calc_diff(const double *x, const double *y, int64_t n) {
    double xy = 0, xx = 0, yy = 0;
    for (int64_t i = 0; i < n; i++) xy += x[i] * y[i], xx += x[i] * x[i], yy += y[i] * y[i];
    const double den = xx + yy;
    return den > 0 ? 1 - 2 * xy / den : 0;
}

/* Teacher-forced logits of m's sequence 0 over the golden tokens, as double. */
static ts_status run_model(ts_model *m, const ts__model_golden *g, double *out) {
    const int64_t V = g->cfg.vocab_size, seq = 0;
    float *lf = malloc((size_t)V * sizeof(float));
    if (!lf) return ts__fail(TS_ERR_OUT_OF_MEMORY, "--check");
    ts_status st = ts_model_reset_sequence(m, 0);
    for (int64_t i = 0; st == TS_OK && i < g->n_steps; i++) {
        st = ts_model_decode(m, 1, &seq, &g->tokens[i], lf);
        for (int64_t v = 0; st == TS_OK && v < V; v++) out[i * V + v] = lf[v];
    }
    free(lf);
    return st;
}

static ts_status run_inprocess(const ts__model_golden *g, double *out) {
    ts_model *m = NULL;
    ts_status st = ts_model_create(&g->cfg, 1, &m);
    if (st == TS_OK) st = run_model(m, g, out);
    ts_model_free(m);
    return st;
}

static int check_one(const ts__demo_comm *c, const ts__demo_opts *o, const char *rel) {
    const bool root = c->rank == 0;
    char path[4096];
    char msg[512] = "";
    ts_status st = TS_OK;
    if (!find_golden(o->golden_path, rel, path, sizeof path))
        st = ts__fail(TS_ERR_IO, "--check: golden file %s not found (give it with --golden FILE)",
                      o->golden_path ? o->golden_path : rel);
    ts__model_golden g;
    memset(&g, 0, sizeof g);
    if (st == TS_OK) st = ts__model_golden_load(path, &g);
    snprintf(msg, sizeof msg, "%s", st != TS_OK ? ts_last_error() : "");
    st = ts__demo_agree(c, st, msg, sizeof msg);
    if (st != TS_OK) {
        if (root) fprintf(stderr, "tilestack demo: %s\n", msg);
        ts__model_golden_free(&g);
        return 1;
    }
    const int64_t V = g.cfg.vocab_size, n = g.n_steps * V;
    const int threads = ts_get_num_threads();
    const int other_threads = threads > 1 ? 1 : 2;
    double *ref = NULL, *gold = NULL, *opt = NULL, *opt1 = NULL, *ep = NULL;
    int64_t sum_bad = 0;
    char first_bad[80] = "";
    bool ok = true;
    double t_ref = 0, t_opt = 0;
    if (root) {
        printf("tilestack demo --check: %s (%lld layers, dim %lld, %lld experts, vocab %lld), "
               "%lld prompt + %lld generated steps, golden %s\n",
               g.cfg.name, (long long)g.cfg.n_layers, (long long)g.cfg.dim,
               (long long)g.cfg.n_routed_experts, (long long)V, (long long)g.n_prompt,
               (long long)g.n_gen, path);
        ref = malloc((size_t)n * sizeof(double));
        gold = malloc((size_t)n * sizeof(double));
        opt = malloc((size_t)n * sizeof(double));
        opt1 = malloc((size_t)n * sizeof(double));
        if (!ref || !gold || !opt || !opt1) st = ts__fail(TS_ERR_OUT_OF_MEMORY, "--check");
        double t0 = ts__now_s();
        if (st == TS_OK) st = ts__model_reference_run_golden(&g, ref, &sum_bad, first_bad);
        t_ref = ts__now_s() - t0;
        t0 = ts__now_s();
        if (st == TS_OK) st = run_inprocess(&g, opt);
        t_opt = ts__now_s() - t0;
        /* the same bits at another thread count (1, or 2 when this rank runs 1) */
        if (st == TS_OK) {
            st = ts_set_num_threads(other_threads);
            if (st == TS_OK) st = run_inprocess(&g, opt1);
            const ts_status st2 = ts_set_num_threads(threads);
            if (st == TS_OK) st = st2;
        }
    }
    snprintf(msg, sizeof msg, "%s", st != TS_OK ? ts_last_error() : "");
    st = ts__demo_agree(c, st, msg, sizeof msg);
    /* the expert-parallel model: every rank decodes the golden tokens */
    if (st == TS_OK && c->size > 1) {
        ep = malloc((size_t)n * sizeof(double));
        ts_model *m = NULL;
        st = ep ? ts__demo_model_create(c, &g.cfg, NULL, NULL, 1, o->unfused, o->timeout_s, &m)
                : ts__fail(TS_ERR_OUT_OF_MEMORY, "--check");
        if (st == TS_OK) st = run_model(m, &g, ep);
        ts_model_free(m);
        snprintf(msg, sizeof msg, "%s", st != TS_OK ? ts_last_error() : "");
        st = ts__demo_agree(c, st, msg, sizeof msg);
    }
    if (st != TS_OK) {
        if (root) fprintf(stderr, "tilestack demo --check: %s\n", msg);
        ok = false;
    }
    /* every rank's EP logits must be rank 0's (same tokens, same sequence) */
    int ep_rank_diff = 0;
    if (ok && c->size > 1) {
        double h[2] = {0, 0};
        for (int64_t i = 0; i < n; i++) h[0] += ep[i] * (double)((i % 977) + 1);
        h[1] = -h[0];
        ts__demo_max(c, h, 2);
        ep_rank_diff = h[0] != -h[1];
    }
    if (root && ok) {
        for (int64_t i = 0; i < n; i++) gold[i] = g.logits[i];
        ts__model_compare cg, co;
        st = ts__model_compare_logits(&g, gold, ref, &cg);
        if (st == TS_OK) st = ts__model_compare_logits(&g, ref, opt, &co);
        if (st != TS_OK) {
            fprintf(stderr, "tilestack demo --check: %s\n", ts_last_error());
            ok = false;
        } else {
            const bool sums_ok = sum_bad == 0;
            const bool ref_ok = cg.max_diff < 1e-9 && cg.greedy_mismatches == 0;
            const bool opt_ok = co.max_diff < 1e-3 && co.greedy_mismatches == 0;
            printf("  weights        %s (fnv1a64 of every tensor vs the numpy generator%s%s)\n",
                   sums_ok ? "same" : "DIFFER", sums_ok ? "" : "; first: ", first_bad);
            printf("  reference      float64 vs numpy golden: max calc_diff %.3g (step %lld), "
                   "greedy %lld/%lld same  [%s; limit 1e-9] (%.1f s)\n",
                   cg.max_diff, (long long)cg.worst_step,
                   (long long)(cg.greedy_steps - cg.greedy_mismatches),
                   (long long)cg.greedy_steps, ref_ok ? "ok" : "FAIL", t_ref);
            printf("  optimised      vs float64 reference: max calc_diff %.3g (step %lld), mean "
                   "%.3g, greedy %lld/%lld same  [%s; limit 1e-3] (%.1f s)\n",
                   co.max_diff, (long long)co.worst_step, co.mean_diff,
                   (long long)(co.greedy_steps - co.greedy_mismatches),
                   (long long)co.greedy_steps, opt_ok ? "ok" : "FAIL", t_opt);
            if (co.greedy_mismatches)
                printf("                 first greedy mismatch at step %lld (reference top-2 "
                       "margin %.3g)\n", (long long)co.first_mismatch,
                       co.first_mismatch_margin);
            /* calc_diff per step: the max over each block of 8 steps */
            printf("  per step       calc_diff (optimised vs reference), max per 8 steps:");
            for (int64_t s0 = 0; s0 < g.n_steps; s0 += 8) {
                double mx = 0;
                for (int64_t s = s0; s < s0 + 8 && s < g.n_steps; s++) {
                    const double d = calc_diff(ref + s * V, opt + s * V, V);
                    mx = d > mx ? d : mx;
                }
                printf("%s%.1e", s0 % 32 == 0 ? "\n                 " : " ", mx);
            }
            printf("\n                 (first step above 1e-9: %lld, where the f32 kernels first "
                   "round differently)\n", (long long)co.first_above_1e9);
            ok = sums_ok && ref_ok && opt_ok;
            {
                const bool same = memcmp(opt, opt1, (size_t)n * sizeof(double)) == 0;
                printf("  threads        %d vs %d thread%s: logits %s\n", threads, other_threads,
                       other_threads == 1 ? "" : "s", same ? "bit-identical" : "DIFFER");
                ok = ok && same;
            }
            if (c->size > 1) {
                const bool same = memcmp(opt, ep, (size_t)n * sizeof(double)) == 0;
                printf("  ranks          R = %d (%s) vs in-process R = 1: logits %s; all ranks "
                       "%s\n", c->size, o->unfused ? "unfused EP" : "MegaMoE",
                       same ? "bit-identical" : "DIFFER",
                       ep_rank_diff ? "DIFFER" : "agree");
                ok = ok && same && !ep_rank_diff;
            }
            printf("check %s\n", ok ? "passed" : "FAILED");
        }
    }
    /* rank 0's verdict is the job's */
    double v = root ? (ok ? 0 : 1) : 0;
    ts__demo_max(c, &v, 1);
    free(ref), free(gold), free(opt), free(opt1), free(ep);
    ts__model_golden_free(&g);
    return v == 0 && ok ? 0 : 1;
}

int ts__demo_check(const ts__demo_comm *c, const ts__demo_opts *o) {
    if (o->golden_path) return check_one(c, o, NULL);
    const int v4 = check_one(c, o, GOLDEN_REL);
    if (c->rank == 0) printf("\n");
    const int v32 = check_one(c, o, GOLDEN32_REL);
    if (c->rank == 0) printf("\ncheck (dsv4-tiny, dsv32-tiny) %s\n", v4 || v32 ? "FAILED" : "passed");
    return v4 || v32;
}
