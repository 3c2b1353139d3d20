/* The fusion pass (src/tile/tile_fuse.c, docs/tile-language.md §11b): what the fused IR looks
 * like, that it stays a program of the language (a fixed point of parse/check/lower), and
 * every case where forwarding a producer would change the result or cost more is left
 * alone. That the fused code computes the unfused bits is checked by running it: the SIMD
 * test (tests/test_tile_simd.c) compares the fused SIMD emission with the unfused scalar one
 * byte for byte, and the AOT kernels (fused) are compared with golden vectors and the
 * hand-written casts (tests/test_tile_aot.c, tests/test_tk_*.c). */
#include "test_tile_common.h"
#include "tile/tile_internal.h"

#include <stdio.h>

/* the IR of src, fused or not (NULL on error, diagnostics printed) */
static char *ir_of(const char *src, bool fuse) {
    ts__tile_arena a = {0};
    ts__tile_diag d = {.file = "fuse.tile", .src = src, .src_len = strlen(src)};
    ts__tile_node *m = ts__tile_parse(&a, &d);
    ts__tile_program prog = {.nkernels = -1};
    bool ok = m && ts__tile_check(&a, &d, m, &prog) && ts__tile_lower_ex(&a, &d, &prog, fuse);
    char *r = NULL;
    if (ok) {
        ts__tile_buf b = {0};
        ts__tile_print_program(&b, &prog);
        if (b.data) r = strdup(b.data);
        ts__tile_buf_free(&b);
    } else if (d.out.data) printf("    %s\n", d.out.data);
    ts__tile_buf_free(&d.out);
    ts__tile_arena_free(&a);
    return r;
}

static const char k_cast[] =
    "const G = 128;\n"
    "const BT = 4;\n"
    "kernel cast(x: tensor<bf16, [T, H]>, out: tensor<e4m3, [T, H]>, sf: tensor<f32, [T, NG]>) {\n"
    "    launch (ceildiv(T, BT), NG) as (bt, g) {\n"
    "        tile xt: f32[BT, G];\n"
    "        tile ab: u32[BT, G];\n"
    "        tile amax: u32[BT];\n"
    "        tile s: f32[BT];\n"
    "        tile q: e4m3[BT, G];\n"
    "        copy(x[bt * BT, g * G], xt);\n"
    "        for i, j in parallel(BT, G) {\n"
    "            ab[i, j] = bitcast<u32>(xt[i, j]) & 0x7fffffff;\n"
    "        }\n"
    "        reduce<max>(ab, amax, axis=1);\n"
    "        for i in parallel(BT) {\n"
    "            s[i] = max(bitcast<f32>(amax[i]), 1e-4) / 448.0;\n"
    "        }\n"
    "        for i, j in parallel(BT, G) {\n"
    "            let p = xt[i, j] * (1.0 / s[i]);\n"
    "            q[i, j] = select(isnan(p), 0.0, p);\n"
    "        }\n"
    "        copy(q, out[bt * BT, g * G]);\n"
    "        copy(s, sf[bt * BT:bt * BT + BT, g]);\n"
    "    }\n"
    "}\n";

TS_TEST(tile_fuse_ir_shows_forwarded_producers) {
    char *u = ir_of(k_cast, false), *f = ir_of(k_cast, true);
    TS_CHECK(u && f);
    if (u && f) {
        /* unfused: both element-wise loops store their tiles */
        TS_CHECK(strstr(u, "ab[i, j] = bitcast<u32>(xt[i, j]) & 2147483647;"));
        TS_CHECK(strstr(u, "q[i, j] = select("));
        /* fused: the fold reads its input where it is computed, the copy-out converts the
         * product (let inlined, rounding to e4m3 kept as a cast), neither tile is written */
        TS_CHECK(!strstr(f, "ab[i, j] ="));
        TS_CHECK(!strstr(f, "q[i, j] ="));
        TS_CHECK(strstr(f, "__acc2 = max(__acc2, bitcast<u32>(xt[__o2_0, __k2]) & 2147483647);"));
        TS_CHECK(strstr(f, "= cast<e4m3>(select(isnan(xt[__i3_0, __i3_1] * (1.0 / s[__i3_0])), 0.0, "
                           "xt[__i3_0, __i3_1] * (1.0 / s[__i3_0])));"));
        /* the scale loop reads s in the same body: not forwarded */
        TS_CHECK(strstr(f, "s[i] = max("));
    }
    free(u), free(f);
}

TS_TEST(tile_fuse_ir_is_a_fixed_point) {
    /* the fused IR re-parses, re-checks, and lowering + fusing it again changes nothing */
    char *f = ir_of(k_cast, true);
    TS_CHECK(f);
    if (f) {
        char *g = ir_of(f, true);
        TS_CHECK(g && !strcmp(f, g));
        free(g);
    }
    free(f);
}

/* `body` inside a launch over rows; is `needle` still in the fused IR? */
static bool kept(ts_test_ctx *ts_t_, const char *body, const char *needle) {
    char src[4096];
    snprintf(src, sizeof src,
             "kernel k(x: tensor<f32, [N, 8]>, y: tensor<f32, [N, 8]>) {\n"
             "    launch (N) as (b) {\n"
             "        tile t: f32[1, 8];\n"
             "        tile u: f32[1, 8];\n"
             "        tile m: f32[8, 8];\n"
             "        copy(x[b, 0], u);\n"
             "%s"
             "    }\n"
             "}\n",
             body);
    char *u = ir_of(src, false), *f = ir_of(src, true);
    TS_CHECK(u && f);
    bool k = u && f && strstr(u, needle) && strstr(f, needle);
    free(u), free(f);
    return k;
}

TS_TEST(tile_fuse_forwards_only_when_exact) {
    const char *prod = "        for i, j in parallel(1, 8) {\n            t[i, j] = u[i, j] * 2.0;\n        }\n";
    const char *store = "t[i, j] = u[i, j] * 2.0;";
    char b[2048];
    /* the simple case is forwarded (the test's own control) */
    snprintf(b, sizeof b, "%s        copy(t, y[b, 0]);\n", prod);
    TS_CHECK(!kept(ts_t_, b, store));
    /* its input is written before the consumer reads */
    snprintf(b, sizeof b,
             "%s        for i, j in parallel(1, 8) {\n            u[i, j] = 0.0;\n        }\n        copy(t, y[b, 0]);\n", prod);
    TS_CHECK(kept(ts_t_, b, store));
    /* the consumer writes the input itself, element by element before its read */
    snprintf(b, sizeof b,
             "%s        for i, j in parallel(1, 8) {\n            u[i, j] = 1.0;\n            y[b + i, j] = t[i, j];\n        }\n", prod);
    TS_CHECK(kept(ts_t_, b, store));
    /* read more often than it was computed (every element 8 times) */
    snprintf(b, sizeof b,
             "%s        for r, j in parallel(8, 8) {\n            m[r, j] = t[0, j] + t[0, r];\n        }\n        copy(m, y[b, 0]);\n",
             prod);
    TS_CHECK(kept(ts_t_, b, store));
    /* read under a loop without a constant trip count */
    snprintf(b, sizeof b,
             "%s        var s: f32 = 0.0;\n        for k in serial(N) {\n            s = s + t[0, 0];\n        }\n        y[b, 0] = s;\n",
             prod);
    TS_CHECK(kept(ts_t_, b, store));
    /* read again outside the block that writes it (a later iteration of an outer loop would
     * see the previous values) */
    snprintf(b, sizeof b,
             "        for c in serial(2) {\n            y[b, c] = t[0, c];\n"
             "            for i, j in parallel(1, 8) {\n                t[i, j] = u[i, j] * 2.0;\n            }\n"
             "            y[b, c + 2] = t[0, c];\n        }\n");
    TS_CHECK(kept(ts_t_, b, store));
    /* also written elsewhere */
    snprintf(b, sizeof b, "%s        t[0, 3] = 1.0;\n        copy(t, y[b, 0]);\n", prod);
    TS_CHECK(kept(ts_t_, b, store));
    /* a name of the expression is redeclared at the consumer (u shadowed) */
    snprintf(b, sizeof b,
             "%s        for c in serial(1) {\n            tile u: f32[1, 8];\n            fill(u, 3.0);\n"
             "            copy(t, y[b, 0]);\n        }\n",
             prod);
    TS_CHECK(kept(ts_t_, b, store));
    /* a var the expression reads is assigned in between */
    snprintf(b, sizeof b,
             "        var w: f32 = 2.0;\n"
             "        for i, j in parallel(1, 8) {\n            t[i, j] = u[i, j] * w;\n        }\n"
             "        w = 3.0;\n        copy(t, y[b, 0]);\n");
    TS_CHECK(kept(ts_t_, b, "t[i, j] = u[i, j] * w;"));
    /* the expression reads a tensor and a tensor is written in between (views may overlap) */
    snprintf(b, sizeof b,
             "        for i, j in parallel(1, 8) {\n            t[i, j] = x[b, j] + 1.0;\n        }\n"
             "        y[b, 0] = 5.0;\n        copy(t, y[b, 0]);\n");
    TS_CHECK(kept(ts_t_, b, "t[i, j] = x[b, j] + 1.0;"));
    /* a transposed read (j in a non-last index): forwarded, the consumer's vector loop would
     * become a gather */
    snprintf(b, sizeof b,
             "        fill(m, 1.0);\n        for i, j in parallel(1, 8) {\n            t[i, j] = m[j, i] * 2.0;\n        }\n"
             "        copy(t, y[b, 0]);\n");
    TS_CHECK(kept(ts_t_, b, "t[i, j] = m[j, i] * 2.0;"));
    /* the producer's body writes something the expression reads */
    snprintf(b, sizeof b,
             "        for i, j in parallel(1, 8) {\n            t[i, j] = u[i, j] + 1.0;\n            u[i, j] = 0.0;\n        }\n"
             "        copy(t, y[b, 0]);\n");
    TS_CHECK(kept(ts_t_, b, "t[i, j] = u[i, j] + 1.0;"));
}

/* A chain producer -> producer -> copy-out is forwarded link by link (one round each, the
 * program checked again in between): a store rewritten in one round has names still to be
 * resolved and used to leak the middle loop's variable into the copy-out. */
TS_TEST(tile_fuse_chain_of_producers) {
    static const char src[] =
        "kernel k4(x: tensor<f32, [N]>, y: tensor<f32, [N]>) {\n"
        "    launch (1) as (b) {\n"
        "        tile xt: f32[16];\n"
        "        tile a: f32[16];\n"
        "        tile c: f32[16];\n"
        "        copy(x[0], xt);\n"
        "        for j in parallel(16) { a[j] = xt[j] * 2.0; }\n"
        "        for j in parallel(16) { c[j] = a[j] + 1.0; }\n"
        "        copy(c, y[0]);\n"
        "    }\n"
        "}\n";
    char *f = ir_of(src, true);
    TS_CHECK(f);
    if (f) {
        TS_CHECK(!strstr(f, "a[j] =") && !strstr(f, "c[j] ="));
        TS_CHECK(strstr(f, "y[__g2_0] = xt[__i2_0] * 2.0 + 1.0;"));
        char *g = ir_of(f, true); /* and the result is a fixed point */
        TS_CHECK(g && !strcmp(f, g));
        free(g);
    }
    free(f);
}

/* An `assume` about the stored value travels with it: restated, for the consumer's indices,
 * just before the statement that reads it (where the emitter's e4m3 fact matching sees it);
 * a fact that reads something the value does not stays behind. */
TS_TEST(tile_fuse_carries_facts) {
    static const char src[] =
        "kernel k(x: tensor<f32, [N, 64]>, y: tensor<e4m3, [N, 64]>, z: tensor<f32, [N, 64]>) {\n"
        "    launch (N) as (b) {\n"
        "        tile t: f32[1, 64];\n"
        "        tile w: f32[1, 64];\n"
        "        tile q: e4m3[1, 64];\n"
        "        copy(x[b, 0], t);\n"
        "        copy(z[b, 0], w);\n"
        "        for i, j in parallel(1, 64) {\n"
        "            let p = select(abs(t[i, j]) >= 0.5, t[i, j], 0.0);\n"
        "            assume(p == 0.0 || abs(p) >= 0.25);\n"
        "            assume(w[i, j] > 0.0);\n"
        "            q[i, j] = p;\n"
        "        }\n"
        "        copy(q, y[b, 0]);\n"
        "    }\n"
        "}\n";
    char *f = ir_of(src, true);
    TS_CHECK(f);
    if (f) {
        TS_CHECK(!strstr(f, "q[i, j] ="));
        const char *fact = strstr(f, "assume(select(abs(t[__i3_0, __i3_1]) >= 0.5, t[__i3_0, __i3_1], 0.0) == 0.0 || ");
        const char *store = strstr(f, "y[__g3_0, __g3_1] = cast<e4m3>(select(");
        TS_CHECK_MSG(fact && store && fact < store, "fused IR:\n%s", f);
        TS_CHECK(!strstr(f, "assume(w[__i3_0"));
    }
    free(f);
}

/* Trip counts written with constant division (an extent CH / G) are constants too: the
 * producer is forwarded (a `/` there used to disable fusion of the whole nest). */
TS_TEST(tile_fuse_divided_extents) {
    static const char src[] =
        "const CH = 256;\n"
        "const G = 64;\n"
        "kernel k(x: tensor<f32, [N, CH]>, y: tensor<f32, [N, 4]>) {\n"
        "    launch (N) as (b) {\n"
        "        tile t: f32[CH / G, G];\n"
        "        tile m: f32[CH / G];\n"
        "        for i, j in parallel(CH / G, G) {\n"
        "            t[i, j] = x[b, i * G + j] * 2.0;\n"
        "        }\n"
        "        reduce<max>(t, m, axis=1);\n"
        "        copy(m, y[b, 0]);\n"
        "    }\n"
        "}\n";
    char *f = ir_of(src, true);
    TS_CHECK(f);
    if (f) TS_CHECK_MSG(!strstr(f, "t[i, j] =") && strstr(f, "x[b, __o"), "fused IR:\n%s", f);
    free(f);
}
