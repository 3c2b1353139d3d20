/* Tile language lowering and C emission: the IR is a program of the language itself (it
 * re-parses, re-checks, and lowering it again changes nothing), the fixed reduction order is
 * visible in it, and the generated C has the expected structure.
 *
 * One test compiles the generated C for three kernels (per-token FP8 cast, RMSNorm, and a
 * kernel exercising integer semantics, reductions, cumsum, gemm and in-kernel checks) with the
 * system C compiler, links it with this build's libtilestack.a and runs it against plain-C
 * references, bit for bit. That costs about 1 s (2 s under ASan) - cheap enough, and the only
 * way to know the emitted C means what the language says. It is skipped (with a note) when no
 * C compiler or static library is available; the structural checks still run. */
#include "test_tile_common.h"
#include "tile/tile_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char k_kernels[] =
    "// Kernels compiled and run by tests/test_tile_lower.c.\n"
    "const G = 128;\n"
    "const BT = 4;\n"
    "const BH = 256;\n"
    "const R = 8;\n"
    "\n"
    TT_CAST_RMSNORM_KERNELS
    "kernel misc(a: tensor<i32, [16]>, o: tensor<i64, [12]>, f: tensor<f32, [R, R]>,\n"
    "            g: tensor<f32, [R, R]>, cs: tensor<i32, [16]>, fail: bool) {\n"
    "    launch (1) as (b) {\n"
    "        tile t: i32[16];\n"
    "        tile r: i32[1];\n"
    "        tile c: i32[16];\n"
    "        copy(a, t);\n"
    "        reduce<xor>(t, r, axis=0);\n"
    "        o[0] = r[0];\n"
    "        reduce<and>(t, r);\n"
    "        o[1] = r[0];\n"
    "        reduce<max>(t, r);\n"
    "        o[2] = r[0];\n"
    "        reduce<min>(t, r);\n"
    "        o[3] = r[0];\n"
    "        reduce<sum>(t, r);\n"
    "        o[4] = r[0];\n"
    "        cumsum(t, c);\n"
    "        copy(c, cs);\n"
    "        o[5] = t[0] / 0;\n"
    "        o[6] = t[1] % 0;\n"
    "        o[7] = cast<i32>(inf<f32>);\n"
    "        o[8] = cast<i32>(-inf<f32>);\n"
    "        o[9] = cast<i32>(bitcast<f32>(cast<u32>(0x7FC00000)));\n"
    "        o[10] = ceildiv(cast<i64>(t[2]), 2);\n"
    "        o[11] = cast<i64>(t[3]) << 65;\n"
    "        tile fa: f32[R, R];\n"
    "        tile fc: f32[R, R];\n"
    "        copy(f, fa);\n"
    "        gemm(fa, fa, fc, tb=true, clear=true);\n"
    "        copy(fc, g);\n"
    "        check(!fail, \"asked to fail\");\n"
    "    }\n"
    "}\n"
    "\n"
    "kernel edges(a: tensor<i32, [16]>, o: tensor<i32, [8]>, p: tensor<i32, [20]>) {\n"
    "    launch (1) as (b) {\n"
    "        tile t: i32[8];\n"
    "        tile u: i32[8];\n"
    "        copy(a[-2], t, fill=-1);\n"
    "        copy(t, o);\n"
    "        fill(u, 7);\n"
    "        copy(u, p[15]);\n"
    "    }\n"
    "}\n"
    "\n"
    "kernel shadow(o: tensor<i64, [3]>) {\n"
    "    launch (1) as (b) {\n"
    "        let x = 5;\n"
    "        var v: i64 = 1;\n"
    "        {\n"
    "            let x = x + 1;\n"
    "            var v: i64 = v + x;\n"
    "            o[0] = x;\n"
    "            o[2] = v;\n"
    "        }\n"
    "        o[1] = x + v * 100;\n"
    "    }\n"
    "}\n";

static const char k_driver[] =
    "/* Driver for the generated kernels: independent C references, exit status = mismatches. */\n"
    "#include \"tilestack/core.h\"\n"
    "#include \"tilestack/numerics.h\"\n"
    "#include <math.h>\n"
    "#include <stdio.h>\n"
    "#include <stdlib.h>\n"
    "#include <string.h>\n"
    "ts_status ts_per_token_cast_e4m3(const ts_tensor *x, const ts_tensor *out, const ts_tensor *sf);\n"
    "ts_status ts_rmsnorm(const ts_tensor *x, const ts_tensor *w, const ts_tensor *y, float eps);\n"
    "ts_status ts_misc(const ts_tensor *a, const ts_tensor *o, const ts_tensor *f, const ts_tensor *g,\n"
    "                  const ts_tensor *cs, bool fail);\n"
    "static int bad;\n"
    "#define EXPECT(c) do { if (!(c)) { bad++; printf(\"FAIL line %d: %s\\n\", __LINE__, #c); } } while (0)\n"
    "static uint32_t rs = 12345;\n"
    "static float rnd(void) { rs = rs * 1664525u + 1013904223u; return ((int)(rs >> 8) % 20000 - 10000) / 1000.0f; }\n"
    "static uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }\n"
    "\n"
    "/* reduce<sum> lanes8 order over n values */\n"
    "static float sum8(const float *v, int n) {\n"
    "    float a[8];\n"
    "    for (int l = 0; l < 8; l++) a[l] = -0.0f;\n"
    "    for (int k = 0; k < n; k++) a[k % 8] += v[k];\n"
    "    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));\n"
    "}\n"
    "\n"
    "static void test_cast(void) {\n"
    "    enum { T = 37, H = 256, NG = 2, PAD = 64 };\n"
    "    uint16_t *x = malloc(T * H * 2);\n"
    "    uint8_t *q = malloc(T * H + PAD), *q2 = malloc(T * H + PAD);\n"
    "    float *sf = malloc(T * NG * 4), *sf2 = malloc(T * NG * 4);\n"
    "    for (int i = 0; i < T * H; i++) {\n"
    "        float v = rnd();\n"
    "        if (i % 97 == 0) v *= 1e-6f;\n"
    "        if (i / H == 5) v = 0.0f; /* an all-zero row: the 1e-4 floor */\n"
    "        x[i] = ts_f32_to_bf16(v);\n"
    "    }\n"
    "    memset(q, 0xAB, T * H + PAD);\n"
    "    memset(q2, 0xAB, T * H + PAD);\n"
    "    ts_tensor tx = ts_tensor_2d(x, TS_BF16, T, H), tq = ts_tensor_2d(q, TS_E4M3, T, H);\n"
    "    ts_tensor ts_ = ts_tensor_2d(sf, TS_F32, T, NG);\n"
    "    ts_set_num_threads(1);\n"
    "    EXPECT(ts_per_token_cast_e4m3(&tx, &tq, &ts_) == TS_OK);\n"
    "    for (int t = 0; t < T; t++)\n"
    "        for (int g = 0; g < NG; g++) {\n"
    "            float am = 0;\n"
    "            for (int j = 0; j < 128; j++) am = fmaxf(am, fabsf(ts_bf16_to_f32(x[t * H + g * 128 + j])));\n"
    "            float sc = fmaxf(am, 1e-4f) / 448.0f, inv = 1.0f / sc;\n"
    "            EXPECT(fbits(sc) == fbits(sf[t * NG + g]));\n"
    "            for (int j = 0; j < 128; j++) {\n"
    "                float v = ts_bf16_to_f32(x[t * H + g * 128 + j]) * inv;\n"
    "                v = v < -448.0f ? -448.0f : v > 448.0f ? 448.0f : v;\n"
    "                EXPECT(ts_f32_to_e4m3(v) == q[t * H + g * 128 + j]);\n"
    "            }\n"
    "        }\n"
    "    for (int i = 0; i < PAD; i++) EXPECT(q[T * H + i] == 0xAB); /* rows past T were dropped */\n"
    "    /* the same bits with two threads */\n"
    "    ts_tensor tq2 = ts_tensor_2d(q2, TS_E4M3, T, H), ts2 = ts_tensor_2d(sf2, TS_F32, T, NG);\n"
    "    ts_set_num_threads(2);\n"
    "    EXPECT(ts_per_token_cast_e4m3(&tx, &tq2, &ts2) == TS_OK);\n"
    "    EXPECT(!memcmp(q, q2, T * H + PAD) && !memcmp(sf, sf2, T * NG * 4));\n"
    "    /* validation: a kernel-level check, dtype, shape; outputs untouched */\n"
    "    memset(q2, 0xCD, T * H);\n"
    "    ts_tensor bad_sf = ts_tensor_2d(sf, TS_F32, T, 3);\n"
    "    EXPECT(ts_per_token_cast_e4m3(&tx, &tq2, &bad_sf) == TS_ERR_INVALID_ARGUMENT);\n"
    "    EXPECT(strstr(ts_last_error(), \"H must be NG * 128\") != NULL);\n"
    "    ts_tensor bad_q = ts_tensor_2d(q2, TS_E4M3, T - 1, H);\n"
    "    EXPECT(ts_per_token_cast_e4m3(&tx, &bad_q, &ts2) == TS_ERR_SHAPE);\n"
    "    ts_tensor bad_dt = ts_tensor_2d(q2, TS_U8, T, H);\n"
    "    EXPECT(ts_per_token_cast_e4m3(&tx, &bad_dt, &ts2) == TS_ERR_DTYPE);\n"
    "    EXPECT(q2[0] == 0xCD && q2[T * H - 1] == 0xCD);\n"
    "    free(x), free(q), free(q2), free(sf), free(sf2);\n"
    "}\n"
    "\n"
    "static void test_rmsnorm(void) {\n"
    "    enum { T = 3, H = 300 };\n"
    "    uint16_t x[T * H], w[H], y[T * H];\n"
    "    for (int i = 0; i < T * H; i++) x[i] = ts_f32_to_bf16(rnd());\n"
    "    for (int i = 0; i < H; i++) w[i] = ts_f32_to_bf16(rnd() * 0.1f);\n"
    "    ts_tensor tx = ts_tensor_2d(x, TS_BF16, T, H), tw = ts_tensor_1d(w, TS_BF16, H), ty = ts_tensor_2d(y, TS_BF16, T, H);\n"
    "    float eps = 1e-6f;\n"
    "    EXPECT(ts_rmsnorm(&tx, &tw, &ty, eps) == TS_OK);\n"
    "    for (int t = 0; t < T; t++) {\n"
    "        float ss = 0.0f; /* clear(ss) then per chunk: ss = ss + lanes8(chunk), zeros past H */\n"
    "        for (int c = 0; c < (H + 255) / 256; c++) {\n"
    "            float sq[256];\n"
    "            for (int j = 0; j < 256; j++) {\n"
    "                int h = c * 256 + j;\n"
    "                float v = h < H ? ts_bf16_to_f32(x[t * H + h]) : 0.0f;\n"
    "                sq[j] = v * v;\n"
    "            }\n"
    "            ss = ss + sum8(sq, 256);\n"
    "        }\n"
    "        float r = 1.0f / sqrtf(ss / (float)H + eps);\n"
    "        for (int h = 0; h < H; h++) {\n"
    "            float v = ts_bf16_to_f32(x[t * H + h]) * r * ts_bf16_to_f32(w[h]);\n"
    "            EXPECT(ts_f32_to_bf16(v) == y[t * H + h]);\n"
    "        }\n"
    "    }\n"
    "}\n"
    "\n"
    "static void test_misc(void) {\n"
    "    int32_t a[16] = {5, -3, -7, 9, 1, 2, 3, 4, 100, -100, 7, 7, 0, 65535, -1, 12};\n"
    "    int64_t o[12];\n"
    "    int32_t cs[16];\n"
    "    float f[64], g[64];\n"
    "    for (int i = 0; i < 64; i++) f[i] = rnd();\n"
    "    ts_tensor ta = ts_tensor_1d(a, TS_I32, 16), to = ts_tensor_1d(o, TS_I64, 12);\n"
    "    ts_tensor tf = ts_tensor_2d(f, TS_F32, 8, 8), tg = ts_tensor_2d(g, TS_F32, 8, 8), tc = ts_tensor_1d(cs, TS_I32, 16);\n"
    "    EXPECT(ts_misc(&ta, &to, &tf, &tg, &tc, false) == TS_OK);\n"
    "    int32_t x = 0, an = -1, mx = INT32_MIN, mn = INT32_MAX, s = 0;\n"
    "    for (int i = 0; i < 16; i++) {\n"
    "        x ^= a[i], an &= a[i], s += a[i];\n"
    "        mx = a[i] > mx ? a[i] : mx, mn = a[i] < mn ? a[i] : mn;\n"
    "        EXPECT(cs[i] == s);\n"
    "    }\n"
    "    EXPECT(o[0] == x && o[1] == an && o[2] == mx && o[3] == mn && o[4] == s);\n"
    "    EXPECT(o[5] == 0 && o[6] == -3 && o[7] == INT32_MAX && o[8] == INT32_MIN && o[9] == 0);\n"
    "    EXPECT(o[10] == -3 && o[11] == 18);\n"
    "    for (int m = 0; m < 8; m++)\n"
    "        for (int n = 0; n < 8; n++) {\n"
    "            float acc = 0.0f;\n"
    "            for (int k = 0; k < 8; k++) acc = fmaf(f[m * 8 + k], f[n * 8 + k], acc);\n"
    "            EXPECT(fbits(acc) == fbits(g[m * 8 + n]));\n"
    "        }\n"
    "    EXPECT(ts_misc(&ta, &to, &tf, &tg, &tc, true) == TS_ERR_INVALID_ARGUMENT);\n"
    "    EXPECT(strstr(ts_last_error(), \"check() failed: asked to fail\") != NULL);\n"
    "}\n"
    "\n"
    "ts_status ts_edges(const ts_tensor *a, const ts_tensor *o, const ts_tensor *p);\n"
    "/* out-of-bounds reads give the fill value, out-of-bounds writes are dropped */\n"
    "static void test_edges(void) {\n"
    "    int32_t a[16], o[8], p[24];\n"
    "    for (int i = 0; i < 16; i++) a[i] = 100 + i;\n"
    "    for (int i = 0; i < 24; i++) p[i] = -5;\n"
    "    ts_tensor ta = ts_tensor_1d(a, TS_I32, 16), to = ts_tensor_1d(o, TS_I32, 8), tp = ts_tensor_1d(p, TS_I32, 20);\n"
    "    EXPECT(ts_edges(&ta, &to, &tp) == TS_OK);\n"
    "    for (int i = 0; i < 8; i++) EXPECT(o[i] == (i < 2 ? -1 : 100 + i - 2));\n"
    "    for (int i = 0; i < 24; i++) EXPECT(p[i] == (i >= 15 && i < 20 ? 7 : -5));\n"
    "}\n"
    "\n"
    "ts_status ts_shadow(const ts_tensor *o);\n"
    "/* an inner name's initialiser sees the outer name (C scoping would not) */\n"
    "static void test_shadow(void) {\n"
    "    int64_t o[3] = {0, 0, 0};\n"
    "    ts_tensor to = ts_tensor_1d(o, TS_I64, 3);\n"
    "    EXPECT(ts_shadow(&to) == TS_OK);\n"
    "    EXPECT(o[0] == 6 && o[1] == 105 && o[2] == 7);\n"
    "}\n"
    "\n"
    "int main(void) {\n"
    "    test_shadow();\n"
    "    test_edges();\n"
    "    test_cast();\n"
    "    test_rmsnorm();\n"
    "    test_misc();\n"
    "    printf(\"%d mismatches\\n\", bad);\n"
    "    return bad != 0;\n"
    "}\n";

static char *translate_ok(ts_test_ctx *ts_t_, const char *src, ts_tile_emit what) {
    char *out = NULL, *diag = NULL;
    ts_status st = tt_translate(src, what, &out, &diag);
    TS_CHECK_MSG(st == TS_OK, "status %d: %s", (int)st, diag ? diag : "");
    free(diag);
    return out;
}

/* IR text -> parse -> check (as IR: compiler names allowed) -> lower -> print: unchanged */
static void check_ir_fixed_point(ts_test_ctx *ts_t_, const char *src) {
    char *ir = translate_ok(ts_t_, src, TS_TILE_EMIT_IR);
    if (!ir) return;
    char *ast = translate_ok(ts_t_, ir, TS_TILE_EMIT_AST);
    TS_CHECK(ast && !strcmp(ast, ir));
    ts__tile_arena a = {0};
    ts__tile_diag d = {.file = "ir", .src = ir, .src_len = strlen(ir)};
    ts__tile_node *m = ts__tile_parse(&a, &d);
    ts__tile_program prog = {.nkernels = -1};
    bool ok = m && ts__tile_check(&a, &d, m, &prog) && ts__tile_lower(&a, &d, &prog);
    TS_CHECK_MSG(ok, "%s", d.out.data ? d.out.data : "");
    if (ok) {
        ts__tile_buf b = {0};
        ts__tile_print_program(&b, &prog);
        TS_CHECK(b.data && !strcmp(b.data, ir));
        ts__tile_buf_free(&b);
    }
    ts__tile_buf_free(&d.out);
    ts__tile_arena_free(&a);
    free(ir), free(ast);
}

TS_TEST(tile_lower_ir_is_a_fixed_point) {
    check_ir_fixed_point(ts_t_, tt_kitchen_sink);
    check_ir_fixed_point(ts_t_, k_kernels);
}

TS_TEST(tile_lower_reduce_sum_order) {
    /* eight interleaved partial sums from -0.0, tail into lanes 0.., then the fixed tree */
    const char *src = TT_KERNEL("        tile t: f32[2, 19];\n"
                                "        tile r: f32[2];\n"
                                "        fill(t, 1.0);\n"
                                "        reduce<sum>(t, r, axis=1);\n"
                                "        reduce<sum>(t, r, axis=1, order=\"serial\");\n");
    char *ir = translate_ok(ts_t_, src, TS_TILE_EMIT_IR);
    TS_CHECK_MSG(ir && strstr(ir, "var __a2_0: f32 = -0.0;") && strstr(ir, "for __k2 in serial(0, 16, 8) {") &&
                     strstr(ir, "__a2_7 = __a2_7 + t[__o2_0, __k2 + 7];") &&
                     strstr(ir, "__a2_2 = __a2_2 + t[__o2_0, 18];") &&
                     strstr(ir, "r[__o2_0] = __a2_0 + __a2_4 + (__a2_2 + __a2_6) + (__a2_1 + __a2_5 + (__a2_3 + __a2_7));") &&
                     strstr(ir, "__acc3 = __acc3 + t[__o3_0, __k3];"),
                 "%s", ir ? ir : "");
    free(ir);
}

TS_TEST(tile_lower_copy_bounds_and_fill) {
    const char *src = TT_KERNEL("        tile t: f32[4, 8];\n"
                                "        copy(x[b, 3], t, fill=s);\n"
                                "        copy(t, y[b, 3]);\n");
    char *ir = translate_ok(ts_t_, src, TS_TILE_EMIT_IR);
    TS_CHECK_MSG(ir && strstr(ir, "var __fill1: f32 = s;") &&
                     strstr(ir, "if __g1_0 >= 0 && __g1_0 < N && (__g1_1 >= 0 && __g1_1 < M) {") &&
                     strstr(ir, "t[__i1_0, __i1_1] = x[__g1_0, __g1_1];") && strstr(ir, "t[__i1_0, __i1_1] = __fill1;") &&
                     strstr(ir, "y[__g2_0, __g2_1] = t[__i2_0, __i2_1];"),
                 "%s", ir ? ir : "");
    free(ir);
}

TS_TEST(tile_lower_c_structure) {
    char *c = translate_ok(ts_t_, k_kernels, TS_TILE_EMIT_C);
    if (!c) return;
    const char *want[] = {
        "#include \"tile/tile_rt.h\"",
        "TS_API ts_status ts_per_token_cast_e4m3(const ts_tensor *arg_x, const ts_tensor *arg_out, const ts_tensor *arg_sf) {",
        "TS_API ts_status ts_rmsnorm(const ts_tensor *arg_x, const ts_tensor *arg_w, const ts_tensor *arg_y, float arg_eps) {",
        "TS__RETURN_IF_ERROR(ts_tensor_check_dtype(arg_x, \"x\", (ts_dtype)7));",
        "if (arg_out->shape[0] != a->d_T) return ts__fail(TS_ERR_SHAPE,",
        "if (!ts_tensor_is_contiguous(arg_sf)) return ts__fail(TS_ERR_STRIDE,",
        "TS_TILE_PARALLEL_FOR(total, ts__tk_per_token_cast_e4m3_launch0, a);",
        "unsigned char *scr = ts__scratch(tid, 2640);",
        "ts_f32_to_e4m3(ts__tile_minf(ts__tile_maxf(",
        "= ts_f32_to_bf16(((t",  /* (x * r) * w, rounded once to bf16 */
        "_xt[((v",
        "ts__tile_rsqrtf(",
        "fmaf(t",
        "ts__tile_div_i32(",
        "if (!((!a->s_fail))) ts__tile_fail(&sh->failed, 1);",
        "\"t.tile:87:9: check() failed: asked to fail\",",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        TS_CHECK_MSG(strstr(c, want[i]) != NULL, "missing: %s", want[i]);
    free(c);
}

/* ---- compile and run ---- */

TS_TEST(tile_lower_compile_and_run) {
    char exe[4096];
    if (!tt_find_static_lib(exe, sizeof exe)) return;
    char dir[] = "/tmp/ts_tile_test_XXXXXX";
    if (!mkdtemp(dir)) {
        printf("    (skipped: mkdtemp failed)\n");
        return;
    }
    char kc[128], dc[128], prog[128], log[128], inc[4200], src_inc[4200];
    snprintf(kc, sizeof kc, "%s/kern.c", dir);
    snprintf(dc, sizeof dc, "%s/driver.c", dir);
    snprintf(prog, sizeof prog, "%s/prog", dir);
    snprintf(log, sizeof log, "%s/log", dir);
    snprintf(inc, sizeof inc, "-I%s/../../include", TS_GOLDEN_DIR);
    snprintf(src_inc, sizeof src_inc, "-I%s/../../src", TS_GOLDEN_DIR);
    char *c = NULL, *diag = NULL;
    TS_CHECK_STATUS(ts_tile_translate(k_kernels, strlen(k_kernels), "kern.tile", TS_TILE_EMIT_C, NULL, &c, &diag), TS_OK);
    if (c && tt_write_text(kc, c) && tt_write_text(dc, k_driver)) {
        char *cc_argv[] = {"cc", "-std=c11",
#if defined(__SANITIZE_ADDRESS__)
                           "-O0", /* compiling the SIMD code with the sanitizers at -O1 takes seconds */
#else
                           "-O1",
#endif
                           "-ffp-contract=off", "-D_GNU_SOURCE", "-Wall", "-Wextra",
                           "-Werror", inc, src_inc, kc, dc, exe, "-lm", "-lpthread", "-o", prog,
#if defined(__SANITIZE_ADDRESS__)
                           "-fsanitize=address,undefined",
#endif
                           NULL};
        int rc = tt_run_argv(cc_argv, log);
        if (rc == 127) {
            printf("    (skipped: no C compiler 'cc' on PATH)\n");
        } else {
            TS_CHECK_MSG(rc == 0, "cc failed (%d)", rc);
            if (rc != 0) tt_print_log(log);
            else {
                char *run_argv_[] = {prog, NULL};
                int rr = tt_run_argv(run_argv_, log);
                TS_CHECK_MSG(rr == 0, "generated kernels differ from the references (%d)", rr);
                if (rr != 0) tt_print_log(log);
            }
        }
    }
    free(c);
    free(diag);
    unlink(kc), unlink(dc), unlink(prog), unlink(log);
    rmdir(dir);
}
