/* Bench harness: timing, derived figures, the result table and the JSON-lines writer. */
#include "bench.h"
#include "core/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double ts__now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define TS__MAX_SAMPLES 31

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

ts_status ts__bench_time(ts__bench_fn fn, void *ctx, bool quick, ts__timing *out) {
    /* Warm-up: caches, page faults of outputs, the pool's threads, the CPU clock. */
    const double warm_s = quick ? 0.01 : 0.05;
    double start = ts__now_s(), per_call = 0;
    int calls = 0;
    for (;;) {
        double a = ts__now_s();
        ts_status st = fn(ctx);
        if (st != TS_OK) return st;
        double dt = ts__now_s() - a;
        per_call = (calls == 0 || dt < per_call) ? dt : per_call;
        calls++;
        if (calls >= 2 && ts__now_s() - start >= warm_s) break;
    }
    /* Batch short calls so one sample lasts a few ms, far above clock and scheduling noise. */
    const double sample_s = quick ? 0.002 : 0.005;
    int64_t inner = 1;
    if (per_call > 0 && per_call < sample_s) inner = (int64_t)ceil(sample_s / per_call);
    else if (per_call <= 0) inner = 1000;

    const int min_runs = quick ? 5 : 7;
    const double budget_s = quick ? 0.15 : 0.5;
    double samples[TS__MAX_SAMPLES];
    int runs = 0;
    double total = 0;
    while (runs < min_runs || (total < budget_s && runs < TS__MAX_SAMPLES)) {
        double a = ts__now_s();
        for (int64_t i = 0; i < inner; i++) {
            ts_status st = fn(ctx);
            if (st != TS_OK) return st;
        }
        double dt = ts__now_s() - a;
        total += dt;
        samples[runs++] = dt / (double)inner;
    }
    qsort(samples, (size_t)runs, sizeof samples[0], cmp_double);
    out->median_s = (runs % 2) ? samples[runs / 2]
                               : 0.5 * (samples[runs / 2 - 1] + samples[runs / 2]);
    out->min_s = samples[0];
    out->runs = runs;
    out->inner = inner;
    return TS_OK;
}

ts_status ts__bench_time_interleaved(ts__bench_fn fn, void *const *ctx, int n, bool quick, ts__timing *out) {
    enum { MAX_VARIANTS = 8 };
    if (n < 1 || n > MAX_VARIANTS) return TS_ERR_INVALID_ARGUMENT;
    for (int v = 0; v < n; v++) /* warm-up of each; also its per-call time */
        TS__RETURN_IF_ERROR(ts__bench_time(fn, ctx[v], true, &out[v]));
    const int min_rounds = quick ? 9 : 15;
    const double budget_s = quick ? 0.6 : 2.0;
    double samples[MAX_VARIANTS][TS__MAX_SAMPLES], start = ts__now_s();
    int rounds = 0;
    while (rounds < min_rounds || (ts__now_s() - start < budget_s && rounds < TS__MAX_SAMPLES)) {
        for (int v = 0; v < n; v++) {
            const int64_t inner = out[v].inner;
            double a = ts__now_s();
            for (int64_t i = 0; i < inner; i++) TS__RETURN_IF_ERROR(fn(ctx[v]));
            samples[v][rounds] = (ts__now_s() - a) / (double)inner;
        }
        rounds++;
    }
    for (int v = 0; v < n; v++) {
        qsort(samples[v], (size_t)rounds, sizeof samples[v][0], cmp_double);
        out[v].median_s = (rounds % 2) ? samples[v][rounds / 2]
                                       : 0.5 * (samples[v][rounds / 2 - 1] + samples[v][rounds / 2]);
        out[v].min_s = samples[v][0];
        out[v].runs = rounds;
    }
    return TS_OK;
}

const char *ts__roof_name(ts__roof r) {
    switch (r) {
    case TS__ROOF_FMA: return "fma_peak";
    case TS__ROOF_DPBF16: return "dpbf16_peak";
    case TS__ROOF_DRAM: return "dram_read";
    case TS__ROOF_L3: return "l3_read";
    case TS__ROOF_L2: return "l2_read";
    case TS__ROOF_MEMCPY: return "memcpy";
    case TS__ROOF_NONE: break;
    }
    return "none";
}

double ts__roof_gbps(const ts__machine *m, ts__roof r) {
    switch (r) {
    case TS__ROOF_DRAM: return m->dram_read_gbps;
    case TS__ROOF_L3: return m->l3_read_gbps;
    case TS__ROOF_L2: return m->l2_read_gbps;
    case TS__ROOF_MEMCPY: return m->memcpy_gbps;
    case TS__ROOF_FMA: case TS__ROOF_DPBF16: case TS__ROOF_NONE: break;
    }
    return 0;
}

double ts__bench_dram_set_bytes(void) {
    const ts_cpu_info *ci = ts_get_cpu_info();
    return 2.0 * ((ci && ci->l3_bytes > 0) ? (double)ci->l3_bytes : 32.0 * (1 << 20));
}

int ts__bench_dram_copies(double per_copy, int max) {
    const double need = ts__bench_dram_set_bytes();
    int n = 1;
    while (n < max && per_copy > 0 && (double)n * per_copy <= need) n++;
    return n;
}

ts__roof ts__bench_roof(const ts__bench_row *row) {
    if (row->roof_fixed || (row->roof != TS__ROOF_DRAM && row->roof != TS__ROOF_MEMCPY))
        return row->roof;
    const double set = row->set_bytes > 0 ? row->set_bytes : row->bytes;
    if (set <= 0 || set > ts__bench_dram_set_bytes()) return row->roof;
    return TS__ROOF_L3;
}

/* The row as it is judged and printed: its roofline after the residency rule. */
static ts__bench_row judged(const ts__bench_row *row, bool *moved) {
    ts__bench_row r = *row;
    r.roof = ts__bench_roof(row);
    *moved = r.roof != row->roof;
    return r;
}

double ts__row_gbps(const ts__bench_row *row) {
    return (row->bytes > 0 && row->t.median_s > 0) ? row->bytes / row->t.median_s * 1e-9 : -1;
}

double ts__row_gflops(const ts__bench_row *row) {
    return (row->flops > 0 && row->t.median_s > 0) ? row->flops / row->t.median_s * 1e-9 : -1;
}

double ts__row_roofline_frac(const ts__bench_row *row, const ts__machine *m) {
    if (row->roof == TS__ROOF_NONE || row->t.median_s <= 0) return -1;
    double t_roof = 0;
    const double peak = row->roof == TS__ROOF_DPBF16 ? m->dpbf16_peak_gflops : m->fma_peak_gflops;
    if (row->flops > 0 && peak > 0) t_roof = row->flops / (peak * 1e9);
    double bw = ts__roof_gbps(m, row->roof);
    if (row->roof != TS__ROOF_FMA && row->bytes > 0 && bw > 0) {
        double t_bw = row->bytes / (bw * 1e9);
        if (t_bw > t_roof) t_roof = t_bw;
    }
    return t_roof > 0 ? t_roof / row->t.median_s : -1;
}

void ts__json_write_string(FILE *f, const char *s) {
    if (!s) {
        fputs("null", f);
        return;
    }
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (*p < 0x20) fprintf(f, "\\u%04x", *p);
            else fputc(*p, f);
        }
    }
    fputc('"', f);
}

void ts__json_write_number(FILE *f, double v) {
    if (!isfinite(v) || v < 0) fputs("null", f);
    else fprintf(f, "%.6g", v);
}

static void json_machine(FILE *f, const ts__machine *m) {
    fputs("{\"isa\":", f);
    ts__json_write_string(f, ts_isa_name(m->isa));
    fputs(",\"fma_peak_gflops\":", f);
    ts__json_write_number(f, m->fma_peak_gflops);
    fputs(",\"fma_peak_gflops_by_isa\":{", f);
    int n = 0;
    for (int i = 0; i < TS_ISA_COUNT_; i++) {
        if (m->fma_peak_isa_gflops[i] <= 0) continue; /* the paths that cannot run here */
        fprintf(f, "%s\"%s\":", n++ ? "," : "", ts_isa_name((ts_isa)i));
        ts__json_write_number(f, m->fma_peak_isa_gflops[i]);
    }
    fputs("}", f);
    if (m->dpbf16_peak_gflops > 0) {
        fputs(",\"dpbf16_peak_gflops\":", f);
        ts__json_write_number(f, m->dpbf16_peak_gflops);
    }
    fputs(",\"dram_read_gbps\":", f);
    ts__json_write_number(f, m->dram_read_gbps);
    fputs(",\"l3_read_gbps\":", f);
    ts__json_write_number(f, m->l3_read_gbps);
    fputs(",\"l2_read_gbps\":", f);
    ts__json_write_number(f, m->l2_read_gbps);
    fputs(",\"memcpy_gbps\":", f);
    ts__json_write_number(f, m->memcpy_gbps);
    fprintf(f, ",\"threads\":%d}", m->threads);
}

static void json_row(const ts__bench_opts *opts, const ts__bench_row *row0, const char *error) {
    FILE *f = opts->json;
    bool moved;
    const ts__bench_row jr = judged(row0, &moved), *row = &jr;
    const ts__machine *m = ts__probe_machine(row->threads, opts->quick);
    const bool ok = error == NULL;
    fputs("{\"suite\":", f);
    ts__json_write_string(f, row->suite);
    fputs(",\"name\":", f);
    ts__json_write_string(f, row->name);
    fputs(",\"shape\":", f);
    ts__json_write_string(f, row->shape);
    fputs(",\"dtype\":", f);
    ts__json_write_string(f, row->dtype);
    fprintf(f, ",\"threads\":%d,\"isa\":", row->threads);
    ts__json_write_string(f, ts_isa_name(m->isa));
    fputs(",\"seconds\":", f);
    ts__json_write_number(f, ok ? row->t.median_s : -1);
    fputs(",\"seconds_min\":", f);
    ts__json_write_number(f, ok ? row->t.min_s : -1);
    fprintf(f, ",\"runs\":%d", ok ? row->t.runs : 0);
    fputs(",\"gflops\":", f);
    ts__json_write_number(f, ok ? ts__row_gflops(row) : -1);
    fputs(",\"gbps\":", f);
    ts__json_write_number(f, ok ? ts__row_gbps(row) : -1);
    fputs(",\"roofline\":", f);
    ts__json_write_string(f, ts__roof_name(row->roof));
    if (moved) { /* declared DRAM / memcpy, but its set stays in L3 */
        fputs(",\"roofline_declared\":", f);
        ts__json_write_string(f, ts__roof_name(row0->roof));
    }
    fputs(",\"set_bytes\":", f);
    ts__json_write_number(f, row->set_bytes > 0 ? row->set_bytes : row->bytes > 0 ? row->bytes : -1);
    fputs(",\"roofline_frac\":", f);
    ts__json_write_number(f, ok ? ts__row_roofline_frac(row, m) : -1);
    fputs(",\"baseline\":", f);
    ts__json_write_string(f, row->baseline);
    fputs(",\"baseline_seconds\":", f);
    ts__json_write_number(f, ok && row->baseline ? row->baseline_seconds : -1);
    fputs(",\"baseline_ratio\":", f);
    ts__json_write_number(f, ok && row->baseline && row->baseline_seconds > 0
                                 ? row->baseline_seconds / row->t.median_s
                                 : -1);
    if (ok && row->nbaselines > 0) {
        fputs(",\"baselines\":{", f);
        for (int i = 0; i < row->nbaselines && i < 4; i++) {
            if (i) fputc(',', f);
            ts__json_write_string(f, row->baseline_names[i]);
            fputc(':', f);
            ts__json_write_number(f, row->baseline_all_seconds[i]);
        }
        fputc('}', f);
    }
    fputs(",\"machine\":", f);
    json_machine(f, m);
    if (error) {
        fputs(",\"error\":", f);
        ts__json_write_string(f, error);
    }
    fputs("}\n", f);
    fflush(f);
}

static void fmt_time(char *buf, size_t n, double s) {
    if (s < 1e-3) snprintf(buf, n, "%.2f us", s * 1e6);
    else if (s < 1.0) snprintf(buf, n, "%.3f ms", s * 1e3);
    else snprintf(buf, n, "%.3f s", s);
}

static void fmt_num(char *buf, size_t n, double v, const char *fmt) {
    if (v < 0 || !isfinite(v)) snprintf(buf, n, "-");
    else snprintf(buf, n, fmt, v);
}

void ts__bench_table_header(FILE *f) {
    fprintf(f, "%-30s %-16s %3s %11s %8s %8s %-9s %6s  %-9s %7s\n", "name", "shape", "thr",
            "time(med)", "GB/s", "GFLOP/s", "roofline", "frac", "baseline", "ratio");
}

void ts__bench_report(const ts__bench_opts *opts, const ts__bench_row *row0) {
    bool moved;
    const ts__bench_row jr = judged(row0, &moved), *row = &jr;
    const ts__machine *m = ts__probe_machine(row->threads, opts->quick);
    static bool noted;
    if (moved && !noted) {
        noted = true;
        printf("(l3_read*: a dram_read / memcpy row whose set streamed fits in 2 x L3 = %.0f MiB "
               "is re-read from the cache: judged on the L3 read bandwidth)\n",
               ts__bench_dram_set_bytes() / (1 << 20));
    }
    char t[32], gb[32], gf[32], fr[32], ra[32];
    fmt_time(t, sizeof t, row->t.median_s);
    fmt_num(gb, sizeof gb, ts__row_gbps(row), "%.2f");
    fmt_num(gf, sizeof gf, ts__row_gflops(row), "%.2f");
    double frac = ts__row_roofline_frac(row, m);
    fmt_num(fr, sizeof fr, frac < 0 ? -1 : frac * 100, "%.1f%%");
    double ratio = (row->baseline && row->baseline_seconds > 0)
                       ? row->baseline_seconds / row->t.median_s : -1;
    fmt_num(ra, sizeof ra, ratio, ratio < 0.1 ? "%.3fx" : "%.2fx");
    char roof[16];
    snprintf(roof, sizeof roof, "%s%s", ts__roof_name(row->roof), moved ? "*" : "");
    printf("%-30s %-16s %3d %11s %8s %8s %-9s %6s  %-9s %7s\n", row->name, row->shape,
           row->threads, t, gb, gf, roof, fr, row->baseline ? row->baseline : "-", ra);
    fflush(stdout);
    if (opts->json) json_row(opts, row0, NULL);
}

void ts__bench_report_error(const ts__bench_opts *opts, const ts__bench_row *row,
                            const char *why) {
    printf("%-30s %-16s %3d  not run: %s\n", row->name, row->shape, row->threads, why);
    fflush(stdout);
    if (opts->json) json_row(opts, row, why);
}

void ts__bench_machine_peaks(char *buf, size_t cap, const ts__machine *m) {
    buf[0] = '\0';
    size_t n = 0;
    for (int i = TS_ISA_COUNT_ - 1; i >= 0 && n + 1 < cap; i--) {
        if (i == (int)m->isa || m->fma_peak_isa_gflops[i] <= 0) continue;
        int w = snprintf(buf + n, cap - n, "%s%s %.1f", n ? ", " : "", ts_isa_name((ts_isa)i),
                         m->fma_peak_isa_gflops[i]);
        if (w < 0) break;
        n += (size_t)w;
    }
}

void ts__bench_print_machine(FILE *f, const ts__machine *m) {
    char others[128], dp[48] = "";
    ts__bench_machine_peaks(others, sizeof others, m);
    if (m->dpbf16_peak_gflops > 0)
        snprintf(dp, sizeof dp, "; vdpbf16ps %.1f", m->dpbf16_peak_gflops);
    fprintf(f,
            "machine, %d thread%s: FP32 FMA peak %.1f GFLOP/s (%s path%s%s%s) | read GB/s: DRAM %.1f, "
            "L3 %.1f, L2 %.1f | memcpy (r+w) %.1f GB/s\n",
            m->threads, m->threads == 1 ? "" : "s", m->fma_peak_gflops, ts_isa_name(m->isa),
            others[0] ? "; " : "", others, dp, m->dram_read_gbps, m->l3_read_gbps,
            m->l2_read_gbps, m->memcpy_gbps);
}

bool ts__bench_wanted(const char *filter, const char *name, const char *shape) {
    if (!filter || !*filter) return true;
    char key[256];
    snprintf(key, sizeof key, "%s %s", name, shape);
    return strstr(key, filter) != NULL;
}

int ts__bench_thread_list(const ts__bench_opts *opts, int list[2]) {
    if (opts->threads > 0) {
        list[0] = opts->threads;
        return 1;
    }
    /* The pool size: CPUs in this process's affinity mask, or TS_NUM_THREADS. */
    int cores = ts_get_num_threads();
    if (cores < 1) cores = 1;
    list[0] = 1;
    if (cores == 1) return 1;
    list[1] = cores;
    return 2;
}
