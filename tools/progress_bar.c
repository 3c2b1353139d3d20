/* The CLI's progress bar on stderr for the library's long phases (ts_set_progress_handler) and
 * the tools' own (demo cache prefill, timed steps): phase, bar, done / total, rate and ETA on one
 * line redrawn in place. Only when stderr is a terminal (a log file or a pipe gets nothing) and
 * TS_PROGRESS is not "0"; redrawn at most 10 times a second. */
#include "progress_bar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct bar_state {
    char phase[64];
    double t0, last_draw, total;
    bool open; /* a line is drawn and not yet ended */
} bar_state;

static bar_state g_bar;
static bool g_enabled;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* 1234567 B -> "1.23 MB"; items -> "1234567" */
static void amount(char *buf, size_t cap, double v, const char *unit) {
    if (strcmp(unit, "B") != 0) {
        snprintf(buf, cap, "%.0f%s%s", v, *unit ? " " : "", unit);
        return;
    }
    static const char *const pre[] = {"B", "kB", "MB", "GB", "TB"};
    int i = 0;
    while (v >= 1000 && i < 4) v /= 1000, i++;
    snprintf(buf, cap, i ? "%.2f %s" : "%.0f %s", v, pre[i]);
}

static void draw(const char *phase, double done, double total, const char *unit) {
    const double t = now_s();
    const bool fresh = !g_bar.open || strncmp(g_bar.phase, phase, sizeof g_bar.phase - 1) != 0 ||
                       total != g_bar.total;
    if (fresh) {
        if (g_bar.open) fputc('\n', stderr);
        snprintf(g_bar.phase, sizeof g_bar.phase, "%s", phase);
        g_bar.t0 = t;
        g_bar.total = total;
        g_bar.last_draw = 0;
        g_bar.open = true;
    }
    const bool last = done >= total;
    if (!last && !fresh && t - g_bar.last_draw < 0.1) return;
    g_bar.last_draw = t;
    const double frac = total > 0 ? done / total : 1;
    char bar[21];
    const int fill = (int)(frac * 20);
    for (int i = 0; i < 20; i++) bar[i] = i < fill ? '#' : '.';
    bar[20] = 0;
    char d[32], tt[32], rate[40] = "", eta[32] = "";
    amount(d, sizeof d, done, unit);
    amount(tt, sizeof tt, total, unit);
    const double el = t - g_bar.t0;
    if (el > 0.2 && done > 0) {
        char r[32];
        if (*unit) amount(r, sizeof r, done / el, unit);
        else snprintf(r, sizeof r, "%.1f", done / el);
        snprintf(rate, sizeof rate, "  %s/s", r);
        if (!last) snprintf(eta, sizeof eta, "  ETA %.0f s", (total - done) / (done / el));
        else snprintf(eta, sizeof eta, "  %.1f s", el);
    }
    fprintf(stderr, "\r%s [%s] %3.0f%%  %s / %s%s%s\033[K", g_bar.phase, bar, frac * 100, d, tt,
            rate, eta);
    if (last) {
        fputc('\n', stderr);
        g_bar.open = false;
    }
    fflush(stderr);
}

static void handler(void *user, const char *phase, double done, double total,
                    const char *unit) {
    (void)user;
    draw(phase, done, total, unit ? unit : "");
}

void ts__progress_bar_install(void) {
    const char *env = getenv("TS_PROGRESS");
    g_enabled = isatty(STDERR_FILENO) && !(env && !strcmp(env, "0"));
    const char *term = getenv("TERM");
    if (term && !strcmp(term, "dumb")) g_enabled = false;
    ts_set_progress_handler(g_enabled ? handler : NULL, NULL);
}

void ts__progress_bar(const char *phase, double done, double total, const char *unit) {
    if (g_enabled && total > 0) draw(phase, done, total, unit ? unit : "");
}
