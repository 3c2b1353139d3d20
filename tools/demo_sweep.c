/* --sweep: B = 1, 2, 4, ... per rank on one model, TPOT p50 and tokens/s per rank at each, then
 * TPS_rank(X) = max_B { B / mean t_step(B) : TPOT_p50(B) <= X } (deepseek_model.md §4.3) for
 * each limit X, and --plot draws tokens/s per rank against TPOT p50. */
#include "demo.h"
#include "bench.h"
#include "core/atomic_file.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const int64_t k_sweep_b[] = {1, 2, 4, 8, 16, 32};
#define N_SWEEP_B (int)(sizeof k_sweep_b / sizeof k_sweep_b[0])

int ts__demo_best_under(const ts__demo_point *p, int n, double x_ms) {
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (!(p[i].p50_ms <= x_ms)) continue;
        if (best < 0 || p[i].tps_rank > p[best].tps_rank ||
            (p[i].tps_rank == p[best].tps_rank && p[i].B < p[best].B))
            best = i;
    }
    return best;
}

void ts__demo_print_tps_table(FILE *f, const ts__demo_point *p, int n, const double *x_ms,
                              int nx, int ranks) {
    fprintf(f, "\n  TPS@TPOT: the largest tokens/s per rank with TPOT p50 <= X\n");
    fprintf(f, "  %10s %16s %5s %14s %18s\n", "X (ms)", "tokens/s/rank", "B*", "TPOT p50 ms",
            "tokens/s (R ranks)");
    for (int j = 0; j < nx; j++) {
        const int b = ts__demo_best_under(p, n, x_ms[j]);
        if (b < 0)
            fprintf(f, "  %10g %16s %5s %14s %18s   (no B reaches it)\n", x_ms[j], "-", "-", "-",
                    "-");
        else
            fprintf(f, "  %10g %16.1f %5lld %14.2f %18.1f\n", x_ms[j], p[b].tps_rank,
                    (long long)p[b].B, p[b].p50_ms, p[b].tps_rank * ranks);
    }
}

/* 1, 2, 5 x 10^k step giving about `want` intervals over [0, hi]. */
static double nice_step(double hi, int want) {
    if (!(hi > 0)) return 1;
    const double raw = hi / want, mag = pow(10, floor(log10(raw)));
    const double r = raw / mag;
    return (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10) * mag;
}

static void xml_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '&') fputs("&amp;", f);
        else if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '"') fputs("&quot;", f);
        else fputc(*s, f);
    }
}

int ts__demo_write_svg(const char *path, const char *title, const ts__demo_point *p, int n,
                       const double *x_ms, int nx) {
    ts__atomic_file af;
    if (ts__atomic_open(&af, path) != TS_OK) return -1;
    FILE *f = af.f;
    const double W = 760, H = 480, ml = 80, mr = 30, mt = 50, mb = 60;
    const double pw = W - ml - mr, ph = H - mt - mb;
    double xmax = 0, ymax = 0;
    for (int i = 0; i < n; i++) {
        xmax = p[i].p50_ms > xmax ? p[i].p50_ms : xmax;
        ymax = p[i].tps_rank > ymax ? p[i].tps_rank : ymax;
    }
    /* show the limits that fall near the measured range (one far beyond would squash it) */
    double xlim = xmax > 0 ? xmax * 1.1 : 1;
    for (int j = 0; j < nx; j++)
        if (x_ms[j] > xlim && x_ms[j] <= 2.0 * xmax) xlim = x_ms[j] * 1.05;
    const double xs = nice_step(xlim, 6), ys = nice_step(ymax > 0 ? ymax * 1.1 : 1, 5);
    xlim = ceil(xlim / xs) * xs;
    const double ylim = ceil((ymax > 0 ? ymax * 1.1 : 1) / ys) * ys;
#define PX(v) (ml + (v) / xlim * pw)
#define PY(v) (mt + ph - (v) / ylim * ph)
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" "
            "viewBox=\"0 0 %g %g\" font-family=\"sans-serif\" font-size=\"12\">\n",
            W, H, W, H);
    fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%g\" height=\"%g\" fill=\"white\"/>\n", W, H);
    fprintf(f, "<text x=\"%g\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">", W / 2);
    xml_text(f, title);
    fputs("</text>\n", f);
    /* grid and ticks */
    for (double v = 0; v <= xlim + 1e-9 * xlim; v += xs) {
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n",
                PX(v), mt, PX(v), mt + ph);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n", PX(v),
                mt + ph + 18, v);
    }
    for (double v = 0; v <= ylim + 1e-9 * ylim; v += ys) {
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n",
                ml, PY(v), ml + pw, PY(v));
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", ml - 6,
                PY(v) + 4, v);
    }
    fprintf(f, "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" "
            "stroke=\"black\"/>\n", ml, mt, pw, ph);
    fprintf(f, "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">TPOT p50 (ms)</text>\n",
            ml + pw / 2, H - 18);
    fprintf(f, "<text x=\"18\" y=\"%g\" text-anchor=\"middle\" transform=\"rotate(-90 18 %g)\">"
            "output tokens/s per rank</text>\n", mt + ph / 2, mt + ph / 2);
    /* the TPOT limits */
    for (int j = 0; j < nx; j++) {
        if (!(x_ms[j] > 0) || x_ms[j] > xlim) continue;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\" stroke=\"#c03030\" "
                "stroke-dasharray=\"6 4\"/>\n", PX(x_ms[j]), mt, PX(x_ms[j]), mt + ph);
        fprintf(f, "<text x=\"%.1f\" y=\"%g\" fill=\"#c03030\" text-anchor=\"start\">X = %g ms"
                "</text>\n", PX(x_ms[j]) + 3, mt + 14, x_ms[j]);
        const int b = ts__demo_best_under(p, n, x_ms[j]);
        if (b >= 0)
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"8\" fill=\"none\" stroke=\"#c03030\"/>\n",
                    PX(p[b].p50_ms), PY(p[b].tps_rank));
    }
    /* the curve, in B order */
    if (n > 1) {
        fputs("<polyline fill=\"none\" stroke=\"#2060b0\" stroke-width=\"2\" points=\"", f);
        for (int i = 0; i < n; i++)
            fprintf(f, "%s%.1f,%.1f", i ? " " : "", PX(p[i].p50_ms), PY(p[i].tps_rank));
        fputs("\"/>\n", f);
    }
    for (int i = 0; i < n; i++) {
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"#2060b0\"/>\n",
                PX(p[i].p50_ms), PY(p[i].tps_rank));
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">B=%lld</text>\n", PX(p[i].p50_ms) + 6,
                PY(p[i].tps_rank) - 6, (long long)p[i].B);
    }
    fputs("</svg>\n", f);
#undef PX
#undef PY
    return ts__atomic_commit(&af) == TS_OK ? 0 : -1;
}

int ts__demo_sweep(const ts__demo_comm *c, ts_model *m, const ts__demo_opts *o,
                   const ts_model_config *cfg, const ts__machine *mach, FILE *json) {
    const bool root = c->rank == 0;
    const int steps = o->steps_set ? o->steps : o->quick ? 5 : 20;
    const int warmup = o->warmup_set ? o->warmup : o->quick ? 1 : 3;
    /* rough wall budget for the whole sweep; the next B (about twice the work) is skipped when
     * it would not fit. Decided from the reduced step times, so every rank agrees. */
    const double budget_s = o->quick ? 20 : 120;
    ts__demo_point pts[N_SWEEP_B];
    int n = 0;
    double spent = 0;
    if (root) {
        printf("\nsweep: B per rank = 1, 2, 4, ... (max batch %lld), L = %lld, %d warm-up + %d "
               "timed steps each\n", (long long)o->batch, (long long)o->context, warmup, steps);
        printf("  %5s %12s %12s %14s %14s %11s%s\n", "B", "TPOT p50 ms", "TPOT p99 ms",
               "tokens/s/rank", "tokens/s all", "step / sum",
               o->replay ? "  step / alone" : "");
        fflush(stdout);
    }
    if (json) fputs(",\"sweep\":[", json);
    for (int i = 0; i < N_SWEEP_B && k_sweep_b[i] <= o->batch; i++) {
        const int64_t B = k_sweep_b[i];
        if (n > 0) {
            const double next = 2.2 * pts[n - 1].p50_ms * 1e-3 * (steps + warmup);
            if (spent + next > budget_s) {
                if (root)
                    printf("  (stopping before B = %lld: about %.0f s more would exceed the "
                           "sweep's %.0f s budget)\n", (long long)B, next, budget_s);
                break;
            }
        }
        ts__demo_result r;
        const ts_status st = ts__demo_measure(c, m, o, B, o->context, warmup, steps, &r);
        if (st != TS_OK) {
            if (root) fprintf(stderr, "tilestack demo: sweep at B = %lld: %s\n", (long long)B,
                              ts_last_error());
            ts__demo_result_free(&r);
            if (json) fputs("]", json);
            return 1;
        }
        spent += r.mean_s * (steps + warmup) + r.prefill_s;
        pts[n].B = B;
        pts[n].p50_ms = r.p50_s * 1e3;
        pts[n].p99_ms = r.p99_s * 1e3;
        pts[n].tps_rank = r.tps_rank;
        if (root) {
            printf("  %5lld %12.2f %12.2f %14.1f %14.1f %11.3f", (long long)B, pts[n].p50_ms,
                   pts[n].p99_ms, r.tps_rank, r.tps_total,
                   r.kernel_sum_s > 0 ? r.mean_s / r.kernel_sum_s : 0);
            /* --replay: step over the sum of the standalone kernel times (demo.md) */
            if (r.replayed) printf(" %14.3f", r.alone_sum_s > 0 ? r.mean_s / r.alone_sum_s : 0);
            putchar('\n');
            fflush(stdout);
        }
        if (json) {
            if (n) fputc(',', json);
            ts__demo_json_result(json, &r, mach);
        }
        n++;
        ts__demo_result_free(&r);
    }
    if (json) fputs("]", json);
    if (!root) return 0;
    ts__demo_print_tps_table(stdout, pts, n, o->tpot_ms, o->n_tpot, c->size);
    if (json) {
        fputs(",\"tps_at_tpot\":[", json);
        for (int j = 0; j < o->n_tpot; j++) {
            const int b = ts__demo_best_under(pts, n, o->tpot_ms[j]);
            fprintf(json, "%s{\"tpot_ms\":", j ? "," : "");
            ts__json_write_number(json, o->tpot_ms[j]);
            fputs(",\"batch\":", json);
            if (b >= 0) fprintf(json, "%lld", (long long)pts[b].B);
            else fputs("null", json);
            fputs(",\"tokens_per_s_per_rank\":", json);
            ts__json_write_number(json, b >= 0 ? pts[b].tps_rank : -1);
            fputs("}", json);
        }
        fputs("]", json);
    }
    if (o->plot_path) {
        char title[160];
        snprintf(title, sizeof title, "%s, R = %d, L = %lld, %d thread%s/rank: tokens/s per rank "
                 "vs TPOT", cfg->name, c->size, (long long)o->context, ts_get_num_threads(),
                 ts_get_num_threads() == 1 ? "" : "s");
        if (ts__demo_write_svg(o->plot_path, title, pts, n, o->tpot_ms, o->n_tpot) != 0) {
            fprintf(stderr, "tilestack demo: --plot: %s\n", ts_last_error());
            return 1;
        }
        printf("  plot: %s\n", o->plot_path);
    }
    return 0;
}
