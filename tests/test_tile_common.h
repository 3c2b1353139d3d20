/* Shared helpers of the tile-language tests (tests/test_tile_*.c). */
#ifndef TS_TEST_TILE_COMMON_H
#define TS_TEST_TILE_COMMON_H

#include "tile/tile_internal.h"
#include "ts_test.h"
#include "tilestack/tile.h"

#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Translate; returns the status, and the output / diagnostics (caller frees with free()). */
static inline ts_status tt_translate(const char *src, ts_tile_emit what, char **out, char **diag) {
    return ts_tile_translate(src, strlen(src), "t.tile", what, NULL, out, diag);
}

/* The first line of the diagnostics for `src` (checked through the C emitter), in buf. */
static inline const char *tt_first_diag(const char *src, char *buf, size_t n) {
    char *out = NULL, *diag = NULL;
    ts_status st = tt_translate(src, TS_TILE_EMIT_C, &out, &diag);
    buf[0] = 0;
    if (st == TS_OK) snprintf(buf, n, "<no error>");
    else if (diag) {
        size_t k = strcspn(diag, "\n");
        snprintf(buf, n, "%.*s", (int)k, diag);
    }
    free(out);
    free(diag);
    return buf;
}

/* Runs argv with stdout and stderr into `log`; the exit status (127: exec failed, 128: killed). */
static inline int tt_run_argv(char *const argv[], const char *log) {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    int st = 0;
    if (waitpid(pid, &st, 0) < 0) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* Writes text to path; false on any I/O error. */
static inline bool tt_write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return false;
    bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

/* Prints the first 40 lines of a compiler log, indented. */
static inline void tt_print_log(const char *log) {
    FILE *f = fopen(log, "r");
    if (!f) return;
    char line[512];
    for (int n = 0; n < 40 && fgets(line, sizeof line, f); n++) printf("      %s", line);
    fclose(f);
}

/* The build's libtilestack.a (beside the test binary) into buf; false, with a "skipped" line,
 * when it cannot be found. */
static inline bool tt_find_static_lib(char *buf, size_t cap) {
    ssize_t n = readlink("/proc/self/exe", buf, cap - 32);
    if (n <= 0) {
        printf("    (skipped: cannot locate the test binary)\n");
        return false;
    }
    buf[n] = 0;
    char *slash = strrchr(buf, '/');
    if (!slash) return false;
    strcpy(slash + 1, "libtilestack.a");
    struct stat sb;
    if (stat(buf, &sb) != 0) {
        printf("    (skipped: no %s)\n", buf);
        return false;
    }
    return true;
}

/* Two kernels both code-generation tests compile and run: a per-token FP8 cast and an
 * RMSNorm (the examples of docs/tile-language.md §10). Needs constants G, BT, BH. */
#define TT_CAST_RMSNORM_KERNELS \
    "kernel per_token_cast_e4m3(x: tensor<bf16, [T, H]>, out: tensor<e4m3, [T, H]>,\n" \
    "                           sf: tensor<f32, [T, NG]>) {\n" \
    "    check(H == NG * G, \"H must be NG * 128\");\n" \
    "    launch (ceildiv(T, BT), NG) as (bt, g) {\n" \
    "        tile xt: f32[BT, G];\n" \
    "        tile amax: f32[BT];\n" \
    "        tile q: e4m3[BT, G];\n" \
    "        tile s: f32[BT];\n" \
    "        copy(x[bt * BT, g * G], xt);\n" \
    "        reduce<absmax>(xt, amax, axis=1);\n" \
    "        for i in parallel(BT) {\n" \
    "            s[i] = max(amax[i], 1e-4) / 448.0;\n" \
    "        }\n" \
    "        for i, j in parallel(BT, G) {\n" \
    "            let inv = 1.0 / s[i];\n" \
    "            q[i, j] = clamp(xt[i, j] * inv, -448.0, 448.0);\n" \
    "        }\n" \
    "        copy(q, out[bt * BT, g * G]);\n" \
    "        copy(s, sf[bt * BT:bt * BT + BT, g]);\n" \
    "    }\n" \
    "}\n" \
    "\n" \
    "kernel rmsnorm(x: tensor<bf16, [T, H]>, w: tensor<bf16, [H]>, y: tensor<bf16, [T, H]>, eps: f32) {\n" \
    "    launch (T) as (t) {\n" \
    "        tile xt: f32[1, BH];\n" \
    "        tile sq: f32[1, BH];\n" \
    "        tile yt: bf16[1, BH];\n" \
    "        tile wt: f32[BH];\n" \
    "        tile ss: f32[1];\n" \
    "        clear(ss);\n" \
    "        for c in serial(ceildiv(H, BH)) {\n" \
    "            copy(x[t, c * BH], xt);\n" \
    "            for i, j in parallel(1, BH) {\n" \
    "                sq[i, j] = xt[i, j] * xt[i, j];\n" \
    "            }\n" \
    "            reduce<sum>(sq, ss, axis=1, accumulate=true);\n" \
    "        }\n" \
    "        let r = rsqrt(ss[0] / cast<f32>(H) + eps);\n" \
    "        for c in serial(ceildiv(H, BH)) {\n" \
    "            copy(x[t, c * BH], xt);\n" \
    "            copy(w[c * BH], wt);\n" \
    "            for i, j in parallel(1, BH) {\n" \
    "                yt[i, j] = xt[i, j] * r * wt[j];\n" \
    "            }\n" \
    "            copy(yt, y[t, c * BH]);\n" \
    "        }\n" \
    "    }\n" \
    "}\n" \
    "\n"

/* A kernel wrapper around `body` statements inside a launch over x: tensor<f32,[N,M]>. */
#define TT_KERNEL(body)                                                                    \
    "kernel k(x: tensor<f32, [N, M]>, y: tensor<f32, [N, M]>, s: f32) {\n"                 \
    "    launch (N) as (b) {\n" body "    }\n}\n"

/* A kernel using the features of the language, for round trips and as a checker fixture. */
static const char tt_kitchen_sink[] =
    "// every construct of the language\n"
    "const BT = 4;\n"
    "const G = 2 * 64;\n"
    "const EPS = 1e-6;\n"
    "\n"
    "macro scale_rows(t, f) {\n"
    "    for i, j in parallel(BT, G) {\n"
    "        t[i, j] = t[i, j] * f;\n"
    "    }\n"
    "}\n"
    "\n"
    "kernel sink(x: tensor<bf16, [T, H]>, y: tensor<e4m3, [T, H]>, sf: tensor<f32, [T, NG], strides=[S, 1]>,\n"
    "            idx: tensor<i32, [T]>, cnt: tensor<i64, [8]>, eps: f32, n: i32, flag: bool) {\n"
    "    check(H == NG * G, \"H must be NG * 128\");\n"
    "    assume(T >= 0);\n"
    "    let nb = ceildiv(T, BT);\n"
    "    launch (nb, NG) as (bt, g) {\n"
    "        tile xt: f32[BT, G];\n"
    "        shared red: f32[BT];\n"
    "        local q: e4m3[BT, G];\n"
    "        tile acc: f32[BT, BT];\n"
    "        tile cs: i32[BT, 8];\n"
    "        var total: f32 = 0.0;\n"
    "        var k: i64;\n"
    "        copy(x[bt * BT, g * G], xt, fill=-inf<f32>);\n"
    "        fill(acc, 1.5);\n"
    "        clear(cs);\n"
    "        scale_rows(xt, 0.5);\n"
    "        reduce<absmax>(xt, red, axis=1);\n"
    "        reduce<sum>(xt, red, axis=-1, accumulate=true, order=\"serial\");\n"
    "        cumsum(cs, cs, axis=1);\n"
    "        gemm(xt, xt, acc, tb=true, clear=false);\n"
    "        for i in serial(0, BT, 1) {\n"
    "            total += red[i];\n"
    "            if red[i] > 100.0 && !flag {\n"
    "                break;\n"
    "            } else if red[i] < -(1.0 + 2.0) {\n"
    "                continue;\n"
    "            } else {\n"
    "                k = k + 1;\n"
    "            }\n"
    "        }\n"
    "        for u in unroll(2) {\n"
    "            k -= cast<i64>(u) << 2 >> 1;\n"
    "        }\n"
    "        for p in pipelined(nb, stages=2) {\n"
    "            k = (k ^ p) & ~7 | 1;\n"
    "        }\n"
    "        while k > 0 {\n"
    "            k = k / 2 % 5;\n"
    "        }\n"
    "        for i, j in parallel(BT, G) {\n"
    "            let v = xt[i, j] / max(red[i], EPS) * sigmoid(exp(-xt[i, j]));\n"
    "            let w = fma(v, 2.0, clamp(v, -448.0, 448.0)) + softplus(log(abs(v) + 1.0));\n"
    "            let z = select(isfinite(w), w, 0.0) + sqrt(rsqrt(exp2(floor(round(v)))));\n"
    "            q[i, j] = cast<e4m3>(z * bitcast<f32>(bitcast<u32>(eps) & 0xFFFFFFFF));\n"
    "        }\n"
    "        atomic_add(cnt[g % 8], cast<i64>(n) + maxval<i8> - minval<i16>);\n"
    "        copy(q, y[bt * BT, g * G]);\n"
    "        copy(red, sf[bt * BT:bt * BT + BT, g]);\n"
    "    }\n"
    "}\n";


/* ---- SIMD emission against the scalar emission, compiled and run ---- */

/* Translate with or without the SIMD lowering (the public entry point always vectorises).
 * The scalar emission, the reference, is also unfused (tile_fuse.c): the SIMD code is fused,
 * so the comparison checks fusion and vectorisation together against the plain program.
 * NULL (and the diagnostics printed) on error. */
static inline char *tt_emit_lanes(const char *src, const char *file, const char *prefix, bool scalar, int lanes) {
    ts__tile_arena a = {0};
    ts__tile_diag d = {.file = file, .src = src, .src_len = strlen(src)};
    ts__tile_buf out = {0};
    ts__tile_node *m = ts__tile_parse(&a, &d);
    ts__tile_program prog = {.nkernels = -1};
    ts__tile_emit_opts eo = {.prefix = prefix, .scalar = scalar, .lanes = lanes};
    bool ok = m && ts__tile_check(&a, &d, m, &prog) && ts__tile_lower_ex(&a, &d, &prog, !scalar) &&
              ts__tile_emit_c(&out, &d, &prog, &eo);
    char *r = NULL;
    if (ok && out.data) {
        r = malloc(out.len + 1);
        if (r) memcpy(r, out.data, out.len + 1);
    } else if (d.out.data) printf("    %s\n", d.out.data);
    ts__tile_buf_free(&out);
    ts__tile_buf_free(&d.out);
    ts__tile_arena_free(&a);
    return r;
}
/* the SIMD (or, with scalar, the plain) emission at 8 lanes */
static inline char *tt_emit(const char *src, const char *file, const char *prefix, bool scalar) {
    return tt_emit_lanes(src, file, prefix, scalar, 8);
}

#if defined(__SANITIZE_ADDRESS__)
#define TT_SAN "-fsanitize=address,undefined"
#define TT_OPT "-O0"
#else
#define TT_SAN "-DTT_NO_SAN"
#define TT_OPT "-O1"
#endif

/* isa: 0 generic, 1 -mavx2 -mfma -mf16c, 2 those and AVX-512 F/BW/VL/DQ */
static inline int tt_cc_obj(const char *src, const char *obj, const char *inc, const char *src_inc, const char *log,
                            int isa) {
    char *argv[] = {"cc", "-std=c11", TT_OPT, "-ffp-contract=off", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror",
                    (char *)inc, (char *)src_inc, TT_SAN, "-c", (char *)src, "-o", (char *)obj,
                    isa ? "-mavx2" : NULL, "-mfma", "-mf16c", isa == 2 ? "-mavx512f" : NULL, "-mavx512bw", "-mavx512vl",
                    "-mavx512dq", NULL};
    return tt_run_argv(argv, log);
}

/* The SIMD emissions linked with the scalar emission s (prefix s_), the driver and the static
 * library, and run: the driver exits non-zero on a mismatch. v (8 lanes, prefix v_) is
 * compiled without and with -mavx2 -mfma -mf16c (the generic vector path and the AVX2 one,
 * when this CPU has them); w (16 lanes, also prefix v_; NULL: none) without flags (the
 * helpers' lane-generic C at 16 lanes) and with AVX-512 F/BW/VL/DQ when this CPU has them.
 * Skipped with a note when there is no C compiler or static library. */
static inline void tt_simd_vs_scalar(ts_test_ctx *ts_t_, const char *v, const char *s, const char *driver,
                                     const char *w) {
    char lib[4096];
    if (!tt_find_static_lib(lib, sizeof lib)) return;
    char dir[] = "/tmp/ts_tile_simd_XXXXXX";
    if (!mkdtemp(dir)) {
        printf("    (skipped: mkdtemp failed)\n");
        return;
    }
    enum { NF = 12 };
    const char *names[NF] = {"v.c", "s.c", "d.c", "w.c", "s.o", "d.o", "log", "v.o", "va.o", "w.o", "wz.o", "prog"};
    char p[NF][160], inc[4200], src_inc[4200];
    for (int i = 0; i < NF; i++) snprintf(p[i], sizeof p[i], "%s/%s", dir, names[i]);
    snprintf(inc, sizeof inc, "-I%s/../../include", TS_GOLDEN_DIR);
    snprintf(src_inc, sizeof src_inc, "-I%s/../../src", TS_GOLDEN_DIR);
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#if defined(__SANITIZE_ADDRESS__)
    avx2 = avx512 = false; /* memory errors do not depend on the ISA; the Release run compares all */
#endif
    /* the variants: object, source, ISA, name */
    const struct {
        int obj, src, isa;
        bool on;
        const char *name;
    } var[4] = {{7, 0, 0, true, "generic 8-lane"},
                {8, 0, 1, avx2, "AVX2 8-lane"},
                {9, 3, 0, w != NULL, "generic 16-lane"},
                {10, 3, 2, w != NULL && avx512, "AVX-512 16-lane"}};
    if (v && s && tt_write_text(p[0], v) && tt_write_text(p[1], s) && tt_write_text(p[2], driver) &&
        (!w || tt_write_text(p[3], w))) {
        const char *log = p[6];
        int rc = tt_cc_obj(p[2], p[5], inc, src_inc, log, 0);
        if (rc == 127) {
            printf("    (skipped: no C compiler 'cc' on PATH)\n");
            goto out;
        }
        if (rc == 0) rc = tt_cc_obj(p[1], p[4], inc, src_inc, log, 0);
        for (int k = 0; k < 4 && rc == 0; k++)
            if (var[k].on) rc = tt_cc_obj(p[var[k].src], p[var[k].obj], inc, src_inc, log, var[k].isa);
        TS_CHECK_MSG(rc == 0, "cc failed (%d)", rc);
        if (rc != 0) {
            tt_print_log(log);
            goto out;
        }
        char *exe = p[11];
        for (int k = 0; k < 4; k++) {
            if (!var[k].on) continue;
            char *ld[] = {"cc", p[5], p[4], p[var[k].obj], lib, "-lm", "-lpthread", "-o", exe, TT_SAN, NULL};
            rc = tt_run_argv(ld, log);
            TS_CHECK_MSG(rc == 0, "link failed (%d)", rc);
            if (rc != 0) {
                tt_print_log(log);
                continue;
            }
            char *run[] = {exe, NULL};
            rc = tt_run_argv(run, log);
            TS_CHECK_MSG(rc == 0, "%s SIMD code differs from the scalar emission or the references", var[k].name);
            if (rc != 0) tt_print_log(log);
        }
#if !defined(__SANITIZE_ADDRESS__)
        if (!avx2) printf("    (no AVX2+FMA+F16C here: only the generic vector paths ran)\n");
        else if (w && !avx512) printf("    (no AVX-512 F/BW/VL/DQ here: the 16-lane code ran as generic C only)\n");
#endif
    }
out:
    for (int i = 0; i < NF; i++) unlink(p[i]);
    rmdir(dir);
}

#endif
