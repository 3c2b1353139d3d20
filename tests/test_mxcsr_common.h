/* The MXCSR guard's per-family driver, shared by tests/test_mxcsr*.c and tests/ep/
 * test_mxcsr_ep.c: an op runs on each ISA path this machine can run (generic, avx2, avx512;
 * each one that cannot run is named once per family), first once unmeasured (one-time set-up)
 * and then between clearing DE/UE on every pool thread and reading them back from every
 * thread. A flag set on any thread fails the test, naming the op, the path and the flags.
 * TS_MXCSR_VERBOSE=1 prints every flagged op (the test report keeps the first 8). */
#ifndef TEST_MXCSR_COMMON_H
#define TEST_MXCSR_COMMON_H

#include "ts_mxcsr.h"
#include "ts_test.h"

#include "tilestack/core.h"
#include "tilestack/numerics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef ts_status (*mx_op)(void *ctx);

static const ts_isa mx_isas[] = {TS_ISA_GENERIC, TS_ISA_AVX2, TS_ISA_AVX512};
#define MX_NISA 3

typedef struct mx_fam {
    ts_test_ctx *t;
    const char *name;
    int ok;
    int saved_threads;
    ts_isa saved_isa;
    int runnable[MX_NISA];
    int nops[MX_NISA], dirty[MX_NISA];
    unsigned flags[MX_NISA];
    int once_ops, once_dirty; /* ops bound to one fixed kernel (mx_run_once) */
    int verbose;
} mx_fam;

static inline int mx_isa_runnable(ts_isa isa) {
    ts_isa saved = ts_get_isa();
    int ok = ts_set_isa(isa) == TS_OK;
    ts_set_isa(saved);
    return ok;
}

static inline mx_fam mx_begin(ts_test_ctx *t, const char *name) {
    mx_fam f;
    memset(&f, 0, sizeof f);
    f.t = t;
    f.name = name;
    if (!ts_mxcsr_supported()) {
        printf("    %s: skipped: this CPU has no MXCSR (DE/UE flags)\n", name);
        return f;
    }
    f.ok = 1;
    f.saved_threads = ts_get_num_threads();
    f.saved_isa = ts_get_isa();
    /* at least one worker, so the flags are read from a thread other than the caller's */
    if (f.saved_threads < 2) ts_set_num_threads(2);
    const char *v = getenv("TS_MXCSR_VERBOSE");
    f.verbose = v && *v && *v != '0';
    for (int i = 0; i < MX_NISA; i++) f.runnable[i] = mx_isa_runnable(mx_isas[i]);
    return f;
}

/* Clears the flags everywhere, runs op, returns the OR of the flags of every thread. */
static inline unsigned mx_measure(ts_test_ctx *ts_t_, const char *what, const char *isa,
                                  mx_op op, void *ctx) {
    TS_CHECK_STATUS(op(ctx), TS_OK); /* one-time set-up outside the measurement */
    ts_mxcsr_clear_all();
    ts_status st = op(ctx);
    unsigned fl = ts_mxcsr_read_all();
    TS_CHECK_MSG(st == TS_OK, "%s [%s]: returned %d (%s)", what, isa, (int)st, ts_last_error());
    return fl;
}

static inline void mx_report(mx_fam *f, const char *what, const char *isa, unsigned fl) {
    ts_test_ctx *ts_t_ = f->t;
    if (fl && f->verbose) printf("    flagged: %s: %s [%s]: %s\n", f->name, what, isa, ts_mxcsr_str(fl));
    TS_CHECK_MSG(fl == 0, "%s [%s]: MXCSR %s set (a subnormal operand or result)", what, isa,
                 ts_mxcsr_str(fl));
}

/* op on every runnable ISA path. */
static inline void mx_run(mx_fam *f, const char *what, mx_op op, void *ctx) {
    if (!f->ok) return;
    for (int i = 0; i < MX_NISA; i++) {
        if (!f->runnable[i]) continue;
        ts_set_isa(mx_isas[i]);
        unsigned fl = mx_measure(f->t, what, ts_isa_name(mx_isas[i]), op, ctx);
        f->nops[i]++;
        f->dirty[i] += fl != 0;
        f->flags[i] |= fl;
        mx_report(f, what, ts_isa_name(mx_isas[i]), fl);
    }
    ts_set_isa(f->saved_isa);
}

/* op that calls one fixed kernel variant itself (its ISA is in `what`). */
static inline void mx_run_once(mx_fam *f, const char *what, mx_op op, void *ctx) {
    if (!f->ok) return;
    unsigned fl = mx_measure(f->t, what, "fixed kernel", op, ctx);
    f->once_ops++;
    f->once_dirty += fl != 0;
    mx_report(f, what, "fixed kernel", fl);
}

/* One summary line per family: each path clean or flagged, and each path skipped by name. */
static inline void mx_end(mx_fam *f) {
    if (!f->ok) return;
    char line[512];
    int n = snprintf(line, sizeof line, "    mxcsr: %s:", f->name);
    for (int i = 0; i < MX_NISA && n < (int)sizeof line; i++) {
        const char *isa = ts_isa_name(mx_isas[i]);
        if (!f->runnable[i])
            n += snprintf(line + n, sizeof line - (size_t)n, " %s skipped (not runnable here);", isa);
        else if (f->nops[i] && !f->dirty[i])
            n += snprintf(line + n, sizeof line - (size_t)n, " %s clean (%d ops);", isa, f->nops[i]);
        else if (f->nops[i])
            n += snprintf(line + n, sizeof line - (size_t)n, " %s %s in %d of %d ops;", isa,
                          ts_mxcsr_str(f->flags[i]), f->dirty[i], f->nops[i]);
    }
    if (f->once_ops && n < (int)sizeof line)
        snprintf(line + n, sizeof line - (size_t)n, " fixed kernels: %d of %d ops flagged;",
                 f->once_dirty, f->once_ops);
    printf("%s\n", line);
    fflush(stdout);
    ts_set_isa(f->saved_isa);
    ts_set_num_threads(f->saved_threads);
}

/* ---------------- input patterns ---------------- */

/* bf16 activations [m, n]: per 128-wide block, one value sets amax (448 or 6 so that the scale
 * is ~1), the others are k * 2^-9 (every e4m3 subnormal, both signs), +-0.5 / +-0.25 (e2m1
 * code 1 and its rounding midpoint), tiny normal values 2^-40 .. 2^-60, and ordinary values;
 * some blocks are entirely tiny (amax clamped to 1e-4). */
static inline void quant_input(float *x, int64_t m, int64_t n, float top) {
    static const float pat[] = {0x1p-9f,  0x2p-9f,  0x3p-9f,  0x4p-9f,   0x5p-9f,   0x6p-9f,
                                0x7p-9f,  -0x1p-9f, -0x2p-9f, -0x3p-9f,  -0x4p-9f,  -0x5p-9f,
                                -0x6p-9f, -0x7p-9f, 0.5f,     -0.5f,     0.25f,     -0.25f,
                                0x1p-40f, -0x1p-50f, 0x1p-60f, 0x1.8p-45f, 1.0f,    -3.0f,
                                0.0f,     -0.0f,    0x1p-6f,  0x1.2p-7f, 2.0f,      0.75f};
    const int np = (int)(sizeof pat / sizeof pat[0]);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            int64_t blk = j / 32;
            float v = pat[(i * 7 + j) % np];
            if ((i + blk) % 5 == 4) v = pat[18 + (i + j) % 4]; /* an all-tiny block */
            else if (j % 32 == (i % 32)) v = (i + j) % 2 ? top : -top;
            x[i * n + j] = v;
        }
}


/* e4m3 codes: every subnormal code of both signs, zeros, the smallest normals and ordinary
 * values up to 2^4 (so dot products stay well inside the normal range). */
static inline void fill_e4m3(uint8_t *q, int64_t n, int64_t salt) {
    static const uint8_t k_e4m3_pat[] = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x81, 0x82,
                                         0x83, 0x84, 0x85, 0x86, 0x87, 0x00, 0x80, 0x08, 0x88,
                                         0x09, 0x38, 0xB8, 0x30, 0x3C, 0xC4, 0x44, 0x52, 0xD5};
    const int64_t np = (int64_t)sizeof k_e4m3_pat;
    for (int64_t i = 0; i < n; i++) q[i] = k_e4m3_pat[(i + i / 61 + salt) % np];
}
/* e2m1x2 bytes: every pair of codes (code 1 / 9 = +-0.5 included) */
static inline void fill_e2m1(uint8_t *q, int64_t n, int64_t salt) {
    for (int64_t i = 0; i < n; i++) q[i] = (uint8_t)((i * 37 + i / 7 + salt) & 0xFF);
}
/* bf16: tiny normal values 2^-40 .. 2^-50 of both signs, zeros and ordinary values <= 1 */
static inline float mx_bf16_pat(int64_t i) {
    static const float k_bf16_pat[] = {0x1p-40f, -0x1p-50f, 0x1.8p-45f, 0.75f, -0.5f, 0.125f, 0.0f,
                                       -0x1.4p-42f, 0.3f,   -0.0f,      1.0f,  0x1p-48f, -0.9f, 0.05f};
    return k_bf16_pat[i % (int64_t)(sizeof k_bf16_pat / sizeof k_bf16_pat[0])];
}
static inline void fill_bf16(uint16_t *x, int64_t n, int64_t salt) {
    for (int64_t i = 0; i < n; i++) x[i] = ts_f32_to_bf16(mx_bf16_pat(i + i / 53 + salt));
}
/* f32 scales: powers of two 2^-3 .. 2^3 (pow2 != 0), else also non-powers of two */
static inline void fill_sf(float *s, int64_t n, int pow2) {
    for (int64_t i = 0; i < n; i++) s[i] = ldexpf(pow2 ? 1.0f : 1.0f + (float)(i % 3) * 0.25f, (int)(i % 7) - 3);
}
/* packed ue8m0 scale words [rows, ceil(ns / 4)]: ns bytes 124..130 per row, the rest 0 (the
 * padding the quantisers write) */
static inline void fill_ue8m0_words(int32_t *w, int64_t rows, int64_t ns) {
    const int64_t nw = (ns + 3) / 4;
    uint8_t *b = (uint8_t *)w;
    memset(b, 0, (size_t)(rows * nw * 4));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < ns; j++) b[r * nw * 4 + j] = (uint8_t)(124 + (r + j) % 7);
}

#endif
