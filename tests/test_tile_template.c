/* Kernel templates and instances (docs/tile-language.md §4a): round trips, instances equal to
 * the kernels written out by hand (same IR), `if`s resolved before checking, optional
 * parameters, and one test per diagnostic (exact text, position and the instance note). */
#include "test_tile_common.h"
#include "tile/tile_internal.h"

#include <stdio.h>

static void expect_first(ts_test_ctx *ts_t_, const char *src, const char *want) {
    char buf[512];
    tt_first_diag(src, buf, sizeof buf);
    TS_CHECK_MSG(!strcmp(buf, want), "got  '%s'\nwant '%s'", buf, want);
}

/* All diagnostics of src (through the C emitter); "" when it translates. Caller frees. */
static char *all_diags(const char *src) {
    char *out = NULL, *diag = NULL;
    ts_status st = tt_translate(src, TS_TILE_EMIT_C, &out, &diag);
    free(out);
    if (st == TS_OK) {
        free(diag);
        diag = calloc(1, 1);
    }
    return diag;
}

static char *translate_ok(ts_test_ctx *ts_t_, const char *src, ts_tile_emit what) {
    char *out = NULL, *diag = NULL;
    ts_status st = tt_translate(src, what, &out, &diag);
    TS_CHECK_MSG(st == TS_OK, "translation failed:\n%s", diag ? diag : "");
    free(diag);
    return st == TS_OK ? out : NULL;
}

/* A template with every kind of parameter: dtype params as tensor, tile, var, cast and bitcast
 * types, an int param as a dim and a value, a bool param, optional parameters, constant `if`s
 * at kernel level and inside loops (one of them `else if`). */
#define TMPL                                                                                 \
    "const G = 8;\n"                                                                         \
    "kernel scale<A: dtype, B: dtype, ROUND: bool, N: int>(x: tensor<A, [T, N]>,\n"         \
    "        y: tensor<B, [T, N]>, s: f32 if !ROUND, e: i32 if ROUND) {\n"                 \
    "    if ROUND { let f = cast<f32>(e); } else { let f = s; }\n"                          \
    "    launch (T) as (t) {\n"                                                             \
    "        tile xt: A[1, N];\n"                                                           \
    "        var acc: f32 = 0.0;\n"                                                         \
    "        copy(x[t, 0], xt);\n"                                                          \
    "        for i, j in parallel(1, N) {\n"                                                \
    "            if A == bf16 && N > 4 {\n"                                                 \
    "                y[t, j] = cast<B>(xt[i, j] * f);\n"                                    \
    "            } else if B == bf16 {\n"                                                   \
    "                y[t, j] = xt[i, j] * f + 1.0;\n"                                       \
    "            } else {\n"                                                                \
    "                y[t, j] = bitcast<B>(bitcast<i32>(cast<f32>(xt[i, j])) ^ 1);\n"        \
    "            }\n"                                                                       \
    "        }\n"                                                                           \
    "    }\n"                                                                               \
    "}\n"

TS_TEST(tile_template_round_trip) {
    const char *src = TMPL "instance a = scale<bf16, f32, false, 16>;\n"
                           "instance b = scale<f32, bf16, true, (G / 2)>;\n"
                           "instance c = scale<f32, f32, !true, -(-8)>;\n";
    ts__tile_arena a = {0};
    ts__tile_diag d1 = {.file = "t.tile", .src = src, .src_len = strlen(src)};
    ts__tile_node *m1 = ts__tile_parse(&a, &d1);
    TS_CHECK_MSG(m1 != NULL, "%s", d1.out.data ? d1.out.data : "");
    if (m1) {
        ts__tile_buf p1 = {0}, p2 = {0};
        ts__tile_print(&p1, m1);
        ts__tile_diag d2 = {.file = "p.tile", .src = p1.data, .src_len = p1.len};
        ts__tile_node *m2 = ts__tile_parse(&a, &d2);
        TS_CHECK_MSG(m2 != NULL, "%s\n%s", d2.out.data ? d2.out.data : "", p1.data);
        if (m2) {
            TS_CHECK(ts__tile_equal(m1, m2));
            ts__tile_print(&p2, m2);
            TS_CHECK(p2.data && !strcmp(p1.data, p2.data));
        }
        TS_CHECK(p1.data && strstr(p1.data, "kernel scale<A: dtype, B: dtype, ROUND: bool, N: int>(x: tensor<A, [T, N]>"));
        TS_CHECK(p1.data && strstr(p1.data, "s: f32 if !ROUND, e: i32 if ROUND"));
        TS_CHECK(p1.data && strstr(p1.data, "instance b = scale<f32, bf16, true, (G / 2)>;"));
        ts__tile_buf_free(&p1);
        ts__tile_buf_free(&p2);
        ts__tile_buf_free(&d2.out);
    }
    ts__tile_buf_free(&d1.out);
    ts__tile_arena_free(&a);
}

/* Each instance is exactly the kernel written out by hand: same IR, same C. */
TS_TEST(tile_template_instance_equals_written_out) {
    const char *inst = TMPL "instance a = scale<bf16, f32, false, 16>;\n"
                            "instance b = scale<f32, bf16, true, (G / 2)>;\n"
                            "instance c = scale<f32, f32, false, 8>;\n";
    const char *hand =
        "const G = 8;\n"
        "kernel a(x: tensor<bf16, [T, 16]>, y: tensor<f32, [T, 16]>, s: f32) {\n"
        "    let f = s;\n"
        "    launch (T) as (t) {\n"
        "        tile xt: bf16[1, 16];\n"
        "        var acc: f32 = 0.0;\n"
        "        copy(x[t, 0], xt);\n"
        "        for i, j in parallel(1, 16) { y[t, j] = cast<f32>(xt[i, j] * f); }\n"
        "    }\n"
        "}\n"
        "kernel b(x: tensor<f32, [T, 4]>, y: tensor<bf16, [T, 4]>, e: i32) {\n"
        "    let f = cast<f32>(e);\n"
        "    launch (T) as (t) {\n"
        "        tile xt: f32[1, 4];\n"
        "        var acc: f32 = 0.0;\n"
        "        copy(x[t, 0], xt);\n"
        "        for i, j in parallel(1, 4) { y[t, j] = xt[i, j] * f + 1.0; }\n"
        "    }\n"
        "}\n"
        "kernel c(x: tensor<f32, [T, 8]>, y: tensor<f32, [T, 8]>, s: f32) {\n"
        "    let f = s;\n"
        "    launch (T) as (t) {\n"
        "        tile xt: f32[1, 8];\n"
        "        var acc: f32 = 0.0;\n"
        "        copy(x[t, 0], xt);\n"
        "        for i, j in parallel(1, 8) { y[t, j] = bitcast<f32>(bitcast<i32>(cast<f32>(xt[i, j])) ^ 1); }\n"
        "    }\n"
        "}\n";
    for (int w = 0; w < 2; w++) {
        ts_tile_emit what = w ? TS_TILE_EMIT_C : TS_TILE_EMIT_IR;
        char *x = translate_ok(ts_t_, inst, what), *y = translate_ok(ts_t_, hand, what);
        if (x && y && w) {
            /* the optional parameters: s in a, e in b (no check() here, so no source positions in the C) */
            TS_CHECK(strstr(x, "ts_a(const ts_tensor *arg_x, const ts_tensor *arg_y, float arg_s)") != NULL);
            TS_CHECK(strstr(x, "ts_b(const ts_tensor *arg_x, const ts_tensor *arg_y, int32_t arg_e)") != NULL);
        }
        TS_CHECK_MSG(x && y && !strcmp(x, y), "instance:\n%s\nwritten out:\n%s", x ? x : "", y ? y : "");
        free(x);
        free(y);
    }
}

/* A template is only parsed until an instance names it: nothing is checked or emitted. */
TS_TEST(tile_template_never_instantiated_is_silent) {
    const char *src = "kernel t<A: dtype>(x: tensor<A, [N]>) {\n"
                      "    let q = undefined_name + 1.0;\n"
                      "}\n"
                      TT_KERNEL("        let a = 1;\n");
    char *c = translate_ok(ts_t_, src, TS_TILE_EMIT_C);
    TS_CHECK(c && strstr(c, "ts_k(") && !strstr(c, "ts_t("));
    free(c);
}

/* The dead branch of a resolved `if` is dropped before checking (it may be ill-typed for
 * this instance), and the taken branch is spliced into the enclosing block (its lets stay
 * visible after it). */
TS_TEST(tile_template_if_resolved_before_checking) {
    const char *src = "kernel t<S: dtype>(x: tensor<f32, [N]>, sf: tensor<S, [N]>) {\n"
                      "    if S == f32 { let K = 2; } else { let K = 3; }\n"
                      "    check(N > K, \"N > K\");\n"
                      "    launch (N) as (i) {\n"
                      "        if S == ue8m0x4 {\n"
                      "            sf[i] = bitcast<i32>(cast<u32>(K));\n"
                      "        } else {\n"
                      "            sf[i] = x[i] * 2.0;\n"
                      "        }\n"
                      "    }\n"
                      "}\n"
                      "instance t_f32 = t<f32>;\n"
                      "instance t_packed = t<ue8m0x4>;\n";
    char *ir = translate_ok(ts_t_, src, TS_TILE_EMIT_IR);
    TS_CHECK(ir && strstr(ir, "kernel t_f32(x: tensor<f32, [N]>, sf: tensor<f32, [N]>)"));
    TS_CHECK(ir && strstr(ir, "kernel t_packed(x: tensor<f32, [N]>, sf: tensor<ue8m0x4, [N]>)"));
    TS_CHECK(ir && strstr(ir, "let K = 2;") && strstr(ir, "let K = 3;"));
    TS_CHECK(ir && strstr(ir, "sf[i] = x[i] * 2.0;") && strstr(ir, "sf[i] = bitcast<i32>(cast<u32>(K));"));
    TS_CHECK(ir && !strstr(ir, "if "));
    free(ir);
}

/* ---- diagnostics ---- */

TS_TEST(tile_template_diag_argument_count) {
    expect_first(ts_t_, TMPL "instance a = scale<bf16, f32, false>;\n",
                 "t.tile:20:14: error: template 'scale' takes 4 arguments, 3 given");
}
TS_TEST(tile_template_diag_int_for_dtype) {
    expect_first(ts_t_, TMPL "instance a = scale<bf16, 16, false, 16>;\n",
                 "t.tile:20:26: error: template parameter 'B' of 'scale' is a dtype, found an integer");
}
TS_TEST(tile_template_diag_name_for_dtype) {
    expect_first(ts_t_, TMPL "instance a = scale<bf16, G, false, 16>;\n",
                 "t.tile:20:26: error: template parameter 'B' of 'scale' is a dtype, found an integer");
    expect_first(ts_t_, TMPL "instance a = scale<bf16, f33, false, 16>;\n",
                 "t.tile:20:26: error: template parameter 'B' of 'scale' needs a dtype name");
}
TS_TEST(tile_template_diag_dtype_for_int) {
    expect_first(ts_t_, TMPL "instance a = scale<bf16, f32, false, i64>;\n",
                 "t.tile:20:38: error: template parameter 'N' of 'scale' is an int, found dtype 'i64'");
}
TS_TEST(tile_template_diag_bool_for_int_and_back) {
    expect_first(ts_t_, TMPL "instance a = scale<bf16, f32, false, true>;\n",
                 "t.tile:20:38: error: template parameter 'N' of 'scale' is an int, found a bool");
    expect_first(ts_t_, TMPL "instance a = scale<bf16, f32, 1, 16>;\n",
                 "t.tile:20:31: error: template parameter 'ROUND' of 'scale' is a bool, found an integer");
    expect_first(ts_t_, TMPL "instance a = scale<bf16, f32, bf16, 16>;\n",
                 "t.tile:20:31: error: template parameter 'ROUND' of 'scale' is a bool, found dtype 'bf16'");
}
TS_TEST(tile_template_diag_int_not_constant) {
    expect_first(ts_t_, TMPL "instance a = scale<bf16, f32, false, (G / 0)>;\n",
                 "t.tile:20:41: error: template parameter 'N' of 'scale' needs a compile-time integer");
}
TS_TEST(tile_template_diag_unknown_template) {
    expect_first(ts_t_, "instance a = nothing<f32>;\n", "t.tile:1:14: error: unknown template 'nothing'");
    expect_first(ts_t_, "macro m() { }\ninstance a = m<f32>;\n", "t.tile:2:14: error: 'm' is not a template");
    expect_first(ts_t_, TT_KERNEL("        let a = 1;\n") "instance a = k<f32>;\n",
                 "t.tile:6:14: error: 'k' is a kernel, not a template");
}
TS_TEST(tile_template_diag_duplicate_instance) {
    expect_first(ts_t_, TMPL "instance a = scale<bf16, f32, false, 16>;\ninstance a = scale<f32, f32, false, 16>;\n",
                 "t.tile:21:10: error: instance 'a': a kernel named 'a' is already defined");
    expect_first(ts_t_, TT_KERNEL("        let a = 1;\n") TMPL "instance k = scale<bf16, f32, false, 16>;\n",
                 "t.tile:25:10: error: instance 'k': a kernel named 'k' is already defined");
    expect_first(ts_t_, TMPL "instance k = scale<bf16, f32, false, 16>;\n" TT_KERNEL("        let a = 1;\n"),
                 "t.tile:21:1: error: kernel 'k' redefined");
}

/* An error in the template body is reported once per instance that has it, at the template's
 * line, with a note (and caret) at the instance. */
TS_TEST(tile_template_diag_error_per_instance) {
    const char *src2 = "kernel t<A: dtype>(x: tensor<A, [N]>) {\n"
                       "    launch (N) as (i) {\n"
                       "        let v = x[i] + 1.5;\n"
                       "    }\n"
                       "}\n"
                       "instance ok = t<f32>;\n"
                       "instance bad1 = t<i32>;\n"
                       "instance bad2 = t<u8>;\n";
    char *d = all_diags(src2);
    const char *want2 =
        "t.tile:3:22: error: mixed integer and float operands of '+' ('i32' and 'float literal'); use cast<...>\n"
        "          let v = x[i] + 1.5;\n"
        "                       ^\n"
        "t.tile:7:10: note: in instance 'bad1' of template 't'\n"
        "  instance bad1 = t<i32>;\n"
        "           ^\n"
        "t.tile:3:22: error: mixed integer and float operands of '+' ('u8' and 'float literal'); use cast<...>\n"
        "          let v = x[i] + 1.5;\n"
        "                       ^\n"
        "t.tile:8:10: note: in instance 'bad2' of template 't'\n"
        "  instance bad2 = t<u8>;\n"
        "           ^\n";
    TS_CHECK_MSG(d && !strcmp(d, want2), "got:\n%s\nwant:\n%s", d ? d : "", want2);
    free(d);
    /* ts_last_error() names the instance too */
    char *out = NULL;
    ts_status st = ts_tile_translate(src2, strlen(src2), "t.tile", TS_TILE_EMIT_C, NULL, &out, NULL);
    TS_CHECK(st == TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_MSG(strstr(ts_last_error(), "(in instance 'bad1' of template 't' at 7:10)") != NULL, "%s", ts_last_error());
    free(out);
}

TS_TEST(tile_template_diag_shadowing) {
    expect_first(ts_t_,
                 "kernel t<N: int>(x: tensor<f32, [M]>) {\n"
                 "    launch (M) as (i) {\n"
                 "        let N = 3;\n"
                 "    }\n"
                 "}\n"
                 "instance a = t<4>;\n",
                 "t.tile:3:9: error: 'N' has the name of a template parameter of 't'");
    expect_first(ts_t_, "kernel t<N: int>(N: i64) { }\n",
                 "t.tile:1:18: error: parameter 'N' has the name of a template parameter");
    expect_first(ts_t_, "kernel t<N: int, N: dtype>(x: i64) { }\n",
                 "t.tile:1:18: error: template parameter 'N' redefined");
    expect_first(ts_t_, "kernel t<f32: dtype>(x: i64) { }\n",
                 "t.tile:1:10: error: template parameter 'f32' has the name of a dtype or a reserved name");
}

TS_TEST(tile_template_diag_parameter_condition) {
    expect_first(ts_t_,
                 "kernel t<N: int>(x: tensor<f32, [M]>, s: f32 if M > 2) {\n"
                 "    launch (M) as (i) { }\n"
                 "}\n"
                 "instance a = t<4>;\n",
                 "t.tile:1:51: error: the condition of parameter 's' must be a constant bool (template "
                 "parameters, literals, dtype comparisons)");
    expect_first(ts_t_, "kernel k(x: tensor<f32, [M]>, s: f32 if true) { }\n",
                 "t.tile:1:38: error: only parameters of a template can be conditional ('if')");
}

TS_TEST(tile_template_diag_bad_dimension) {
    const char *t = "kernel t<N: int, F: bool, A: dtype>(x: tensor<f32, [M, N]>, y: tensor<f32, [M, F]>,\n"
                    "        z: tensor<f32, [M, 4], strides=[A, 1]>) {\n"
                    "    launch (M) as (i) { }\n"
                    "}\n";
    char src[1024];
    snprintf(src, sizeof src, "%sinstance a = t<-2, true, f32>;\n", t);
    expect_first(ts_t_, src, "t.tile:1:56: error: a dimension of 'x' must be a name or an integer >= 0");
    snprintf(src, sizeof src, "%sinstance a = t<2, true, f32>;\n", t);
    expect_first(ts_t_, src, "t.tile:1:80: error: a dimension of 'y' must be a name or an integer >= 0");
    snprintf(src, sizeof src, "%sinstance a = t<2, (N > 1), A>;\n", t);
    expect_first(ts_t_, src, "t.tile:5:22: error: template parameter 'F' of 't' needs true or false");
    expect_first(ts_t_,
                 "kernel s<A: dtype>(z: tensor<f32, [M, 4], strides=[A, 1]>) { }\n"
                 "instance a = s<bf16>;\n",
                 "t.tile:1:52: error: a stride of 'z' must be a name or an integer >= 0");
}

TS_TEST(tile_template_diag_dtype_as_value) {
    expect_first(ts_t_,
                 "kernel t<A: dtype>(x: tensor<f32, [M]>) {\n"
                 "    let P = A == bf16 || M > 2;\n"
                 "    launch (M) as (i) { }\n"
                 "}\n"
                 "instance a = t<f32>;\n",
                 "t.tile:2:13: error: dtype 'f32' is not a value (dtypes compare only in conditions "
                 "resolved when a template is instantiated)");
}

TS_TEST(tile_template_diag_parse) {
    expect_first(ts_t_, "kernel t<A: float>(x: i64) { }\n",
                 "t.tile:1:13: error: expected a template parameter kind (dtype, int, bool), found 'float'");
    expect_first(ts_t_, "kernel t<>(x: i64) { }\n",
                 "t.tile:1:10: error: expected a template parameter name, found '>'");
    expect_first(ts_t_, "kernel t<A: dtype>(x: B) { }\n", "t.tile:1:23: error: unknown dtype 'B'");
    expect_first(ts_t_, "instance a = t(f32);\n", "t.tile:1:15: error: expected '<', found '('");
    expect_first(ts_t_, "instance = t<f32>;\n", "t.tile:1:10: error: expected an instance name, found '='");
    expect_first(ts_t_, "instance a = t<f32, 1 + 2>;\n", "t.tile:1:23: error: expected '>', found '+'");
}

/* The JIT sees the instances as kernels (by their names and signatures) and no template. */
TS_TEST(tile_template_jit_launch) {
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/ts_tile_tmpl_XXXXXX");
    if (!mkdtemp(dir)) {
        TS_CHECK(0);
        return;
    }
    const char *src = "kernel axpb<A: dtype, HAS_B: bool, K: int>(x: tensor<A, [N]>, y: tensor<f32, [N]>,\n"
                      "        b: f32 if HAS_B) {\n"
                      "    launch (ceildiv(N, 64)) as (blk) {\n"
                      "        tile t: A[64];\n"
                      "        copy(x[blk * 64], t);\n"
                      "        for i in parallel(64) {\n"
                      "            if HAS_B { t[i] = t[i] * cast<f32>(K) + b; } else { t[i] = t[i] * cast<f32>(K); }\n"
                      "        }\n"
                      "        copy(t, y[blk * 64]);\n"
                      "    }\n"
                      "}\n"
                      "instance ax3 = axpb<f32, false, 3>;\n"
                      "instance axpb5 = axpb<f32, true, 5>;\n";
    ts_tile_options o = {.cache_dir = dir, .flags = TS_TILE_JIT_NO_CACHE};
    ts_tile_kernel *k = NULL;
    TS_CHECK_STATUS(ts_tile_compile(src, &o, &k), TS_OK);
    if (k) {
        enum { N = 100 };
        float x[N], y[N];
        for (int i = 0; i < N; i++) x[i] = (float)i * 0.25f - 7.0f;
        ts_tensor tx = ts_tensor_1d(x, TS_F32, N), ty = ts_tensor_1d(y, TS_F32, N);
        ts_tile_arg a2[] = {ts_tile_arg_tensor(&tx), ts_tile_arg_tensor(&ty)};
        ts_tile_arg a3[] = {ts_tile_arg_tensor(&tx), ts_tile_arg_tensor(&ty), ts_tile_arg_f64(0.5)};
        TS_CHECK_STATUS(ts_tile_launch(k, "ax3", a2, 2), TS_OK);
        int bad = 0;
        for (int i = 0; i < N; i++) bad += y[i] != x[i] * 3.0f;
        TS_CHECK(bad == 0);
        TS_CHECK_STATUS(ts_tile_launch(k, "axpb5", a3, 3), TS_OK);
        bad = 0;
        for (int i = 0; i < N; i++) bad += y[i] != x[i] * 5.0f + 0.5f;
        TS_CHECK(bad == 0);
        /* the optional parameter is absent from ax3, present in axpb5; the template is no kernel */
        TS_CHECK_STATUS(ts_tile_launch(k, "ax3", a3, 3), TS_ERR_INVALID_ARGUMENT);
        TS_CHECK_STATUS(ts_tile_launch(k, "axpb5", a2, 2), TS_ERR_INVALID_ARGUMENT);
        TS_CHECK_STATUS(ts_tile_launch(k, "axpb", a2, 2), TS_ERR_INVALID_ARGUMENT);
        ts_tile_kernel_release(k);
    }
    rmdir(dir);
}
