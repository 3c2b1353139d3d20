/* SIMD lowering of the tile language: the vectorised C must give exactly the bits of the
 * scalar emission (docs/tile-language.md, "SIMD lowering").
 *
 * One test translates a set of kernels twice - SIMD emission (prefix v_) and the plain scalar
 * emission (prefix s_) - compiles the SIMD file both without and with -mavx2 -mfma (the
 * generic vector path and the AVX2 one), links each with the scalar file and a driver, and
 * runs them: every output is compared byte for byte with the scalar emission and, for the
 * per-token cast, RMSNorm, lanes8 sums, gemm and copies, with plain-C references. Sizes are
 * odd (tails, partial copies, out-of-bounds rows and offsets). About 2 s of compiling
 * (skipped with a note when there is no C compiler or static library).
 * The other tests run the vector helpers of tile_rt.h in this binary (generic vector code)
 * against the scalar functions they twin, and check what the emitter vectorises. */
#include "test_tile_common.h"
#include "tile/tile_internal.h"
#include "tile/tile_rt.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char k_simd_kernels[] =
    "// Kernels compiled twice by tests/test_tile_simd.c: SIMD emission (v_) and scalar (s_).\n"
    "const G = 128;\n"
    "const BT = 4;\n"
    "const BH = 256;\n"
    "\n"
    TT_CAST_RMSNORM_KERNELS
    "kernel elemwise(x: tensor<f32, [T, H]>, y: tensor<f32, [T, H]>, ob: tensor<bf16, [T, H]>,\n"
    "                o8: tensor<e4m3, [T, H]>, o5: tensor<e5m2, [T, H]>, oh: tensor<f16, [T, H]>,\n"
    "                oi: tensor<i32, [T, H]>, of: tensor<f32, [T, H]>, og: tensor<f32, [T, H]>,\n"
    "                ou: tensor<u8, [T, H]>, om: tensor<ue8m0, [T, H]>) {\n"
    "    launch (T) as (t) {\n"
    "        for j in parallel(H) {\n"
    "            let v = x[t, j];\n"
    "            let w = y[t, j];\n"
    "            ob[t, j] = v * w;\n"
    "            o8[t, j] = v;\n"
    "            o5[t, j] = w;\n"
    "            oh[t, j] = v - w;\n"
    "            om[t, j] = exp2(floor(clamp(v, -130.0, 130.0)));\n"
    "            oi[t, j] = cast<i32>(v * 1000.0) / 7 + (cast<i32>(w) << 3) - max(cast<i32>(v), -5) % 3;\n"
    "            of[t, j] = select(v > w, max(v, w), min(v, w) * 2.0) + fma(v, w, 0.5) + abs(v) / sqrt(abs(w) + 1.0);\n"
    "            og[t, j] = exp(v * 0.1) + sigmoid(w) + log(abs(v) + 1.0) + floor(v) + round(w) + ceil(v) + trunc(w)\n"
    "                       + rsqrt(abs(v) + 2.0) + cast<f32>(cast<e2m1>(w)) + cast<f32>(ob[t, j]) + softplus(v);\n"
    "            ou[t, j] = cast<u8>(select(isnan(v) || !isfinite(w), 1, 0)) + cast<u8>(j % 3) + cast<u8>(o8[t, j])\n"
    "                       + bitcast<u8>(cast<e2m1>(w)) * 16;\n"
    "        }\n"
    "    }\n"
    "}\n"
    "\n"
    "// narrowing stores packed 32 at a time (the 4 x 8 unrolled loop) and their tails\n"
    "kernel narrow8(x: tensor<f32, [T, H]>, q: tensor<e4m3, [T, H]>, u: tensor<u8, [T, H]>,\n"
    "               s: tensor<i8, [T, H]>, e: tensor<e5m2, [T, H]>, qz: tensor<e4m3, [T, H]>) {\n"
    "    launch (T) as (t) {\n"
    "        for j in parallel(H) {\n"
    "            let v = x[t, j];\n"
    "            // zero or at least 2^-6 (inf included; NaN becomes 0): the encoder without its\n"
    "            // subnormal path (ts__tv_st_e4m3x32_nz)\n"
    "            let z = select(abs(v) >= 0.03125, v * 0.5, 0.0);\n"
    "            assume(z == 0.0 || abs(z) >= 0.015625);\n"
    "            qz[t, j] = z;\n"
    "            q[t, j] = v * 3.0;\n"
    "            u[t, j] = cast<u8>(cast<i32>(clamp(v, -1000.0, 1000.0)) * 7 + cast<i32>(j));\n"
    "            s[t, j] = cast<i8>(cast<i64>(j) * 37 - cast<i64>(t));\n"
    "            e[t, j] = cast<e5m2>(v - 1.0);\n"
    "        }\n"
    "    }\n"
    "}\n"
    "\n"
    "// stride-2 loads (pairs of elements) and constant shifts\n"
    "kernel pack2(x: tensor<u8, [T, H2]>, f: tensor<f32, [T, H2]>, y: tensor<u8, [T, H]>,\n"
    "             z: tensor<f32, [T, H]>, s: tensor<i16, [T, H2]>, w: tensor<i32, [T, H]>) {\n"
    "    check(H2 == 2 * H, \"x must have twice y's columns\");\n"
    "    launch (T) as (t) {\n"
    "        for j in parallel(H) {\n"
    "            y[t, j] = (x[t, 2 * j] & 15) | (x[t, 2 * j + 1] << 4);\n"
    "            z[t, j] = f[t, j * 2 + 1] - f[t, 2 * j];\n"
    "            w[t, j] = (cast<i32>(s[t, 2 * j]) >> 3) + (cast<i32>(s[t, 1 + 2 * j]) << 5);\n"
    "        }\n"
    "    }\n"
    "}\n"
    "\n"
    "// bf16 pairs widened to f32 (ts__tv_ld2_bf16_f32), from a tensor and from a staged tile\n"
    "kernel pairbf(x: tensor<bf16, [T, H2]>, y: tensor<f32, [T, H]>, z: tensor<f32, [T, H]>) {\n"
    "    check(H2 == 2 * H, \"x must have twice y's columns\");\n"
    "    launch (T) as (t) {\n"
    "        for j in parallel(H) {\n"
    "            y[t, j] = x[t, 2 * j] * 0.75 - x[t, 2 * j + 1];\n"
    "        }\n"
    "        tile xt: bf16[3, 42];\n"
    "        copy(x[t, 0], xt);\n"
    "        prefetch(x[t + 1, 0]); // past the last row for the last t: a hint, never a fault\n"
    "        for i, j in parallel(3, 21) {\n"
    "            prefetch(x[t + 1, 42 * i]);\n"
    "            z[t, 21 * i + j] = xt[i, 2 * j + 1] + xt[i, 2 * j] * 2.0;\n"
    "        }\n"
    "    }\n"
    "}\n"
    "\n"
    "// 16-entry table lookups and a pair of stride-2 stores (FP4 unpacking)\n"
    "kernel unpack2(x: tensor<u8, [T, H]>, y: tensor<f32, [T, H2]>, z: tensor<i16, [T, H2]>) {\n"
    "    check(H2 == 2 * H, \"y must have twice x's columns\");\n"
    "    launch (T) as (t) {\n"
    "        tile lut: f32[16];\n"
    "        for k in parallel(16) {\n"
    "            lut[k] = cast<f32>(k) * 0.5 - 3.0;\n"
    "        }\n"
    "        for j in parallel(H) {\n"
    "            let b = cast<i64>(x[t, j]);\n"
    "            y[t, 2 * j] = lut[b & 15];\n"
    "            y[t, 2 * j + 1] = lut[b >> 4];\n"
    "            z[t, 2 * j] = cast<i16>(b) - 7;\n"
    "            z[t, 2 * j + 1] = cast<i16>(b) * 3;\n"
    "        }\n"
    "    }\n"
    "}\n"
    "\n"
    "kernel reds(x: tensor<f32, [T, 37]>, r: tensor<f32, [T, 8]>, xi: tensor<i32, [T, 37]>,\n"
    "            ri: tensor<i32, [T, 8]>, c: tensor<f32, [T, 37]>) {\n"
    "    launch (T) as (t) {\n"
    "        tile a: f32[2, 37];\n"
    "        tile s: f32[2];\n"
    "        tile ai: i32[2, 37];\n"
    "        tile si: i32[2];\n"
    "        tile col: f32[37];\n"
    "        copy(x[t - 1, 0], a, fill=-2.5);\n"
    "        copy(xi[t, 0], ai);\n"
    "        reduce<sum>(a, s, axis=1);\n"
    "        r[t, 0] = s[0];\n"
    "        reduce<abssum>(a, s, axis=1, accumulate=true);\n"
    "        r[t, 1] = s[1];\n"
    "        reduce<max>(a, s);\n"
    "        r[t, 2] = s[0];\n"
    "        reduce<min>(a, s);\n"
    "        r[t, 3] = s[1];\n"
    "        reduce<absmax>(a, s);\n"
    "        r[t, 4] = s[1];\n"
    "        reduce<sum>(a, col, axis=0);\n"
    "        copy(col, c[t, 0]);\n"
    "        reduce<sum>(ai, si);\n"
    "        ri[t, 0] = si[0];\n"
    "        reduce<xor>(ai, si);\n"
    "        ri[t, 1] = si[1];\n"
    "        reduce<and>(ai, si);\n"
    "        ri[t, 2] = si[0];\n"
    "        reduce<or>(ai, si);\n"
    "        ri[t, 3] = si[1];\n"
    "        reduce<max>(ai, si);\n"
    "        ri[t, 4] = si[0];\n"
    "        reduce<min>(ai, si, accumulate=true);\n"
    "        ri[t, 5] = si[1];\n"
    "        cumsum(a, a, axis=1);\n"
    "        r[t, 5] = a[1, 36];\n"
    "        cumsum(a, a, axis=0);\n"
    "        r[t, 6] = a[1, 20];\n"
    "        reduce<sum>(a, s, order=\"serial\");\n"
    "        r[t, 7] = s[0];\n"
    "    }\n"
    "}\n"
    "\n"
    "kernel mm(a: tensor<f32, [16, 24]>, at: tensor<f32, [24, 16]>, b: tensor<f32, [24, 20]>,\n"
    "          bt: tensor<f32, [20, 24]>, c: tensor<f32, [16, 20]>, d: tensor<f32, [16, 20]>) {\n"
    "    launch (1) as (z) {\n"
    "        tile ta: f32[16, 24];\n"
    "        tile tat: f32[24, 16];\n"
    "        tile tb: f32[24, 20];\n"
    "        tile tbt: f32[20, 24];\n"
    "        tile hb: bf16[24, 20];\n"
    "        tile tc: f32[16, 20];\n"
    "        copy(a, ta);\n"
    "        copy(at, tat);\n"
    "        copy(b, tb);\n"
    "        copy(bt, tbt);\n"
    "        copy(b, hb);\n"
    "        gemm(ta, tb, tc, clear=true);\n"
    "        copy(tc, c);\n"
    "        gemm(ta, tbt, tc, tb=true);\n"
    "        gemm(tat, hb, tc, ta=true);\n"
    "        fill(tc, 0.25);\n"
    "        gemm(ta, tb, tc);\n"
    "        copy(tc, d);\n"
    "    }\n"
    "}\n"
    "\n"
    "// a fold over the tile a copy just filled (fused into the copy's vector loop)\n"
    "kernel rowfold(x: tensor<bf16, [T, H]>, xi: tensor<i32, [T, H]>, mx: tensor<i32, [T, NC]>,\n"
    "               sm: tensor<i32, [T, NC]>, off: i64) {\n"
    "    launch (ceildiv(T, 4), NC) as (bt, c) {\n"
    "        tile xt: f32[4, 64];\n"
    "        tile ab: u32[4, 64];\n"
    "        tile a: u32[4];\n"
    "        tile ti: i32[4, 64];\n"
    "        tile s: i32[4];\n"
    "        tile b: i32[4];\n"
    "        tile nz: u32[4, 64];\n"
    "        tile mn: u32[4];\n"
    "        tile xs: i32[4];\n"
    "        copy(x[bt * 4, c * 64 + off], xt, fill=-1.5);\n"
    "        for i, j in parallel(4, 64) {\n"
    "            ab[i, j] = bitcast<u32>(xt[i, j]) & 0x7fffffff;\n"
    "        }\n"
    "        reduce<max>(ab, a, axis=1);\n"
    "        for i, j in parallel(4, 64) {\n"
    "            nz[i, j] = (bitcast<u32>(xt[i, j]) & 0x7fffffff) - 1;\n"
    "        }\n"
    "        reduce<min>(nz, mn, axis=1);\n"
    "        copy(xi[bt * 4, c * 64 + off], ti, fill=-3);\n"
    "        reduce<sum>(ti, s, axis=1);\n"
    "        reduce<xor>(ti, xs, axis=1);\n"
    "        for i in parallel(4) {\n"
    "            s[i] = s[i] + bitcast<i32>(mn[i]) + xs[i];\n"
    "        }\n"
    "        for i in parallel(4) {\n"
    "            b[i] = bitcast<i32>(a[i]);\n"
    "        }\n"
    "        copy(b, mx[bt * 4:bt * 4 + 4, c]);\n"
    "        copy(s, sm[bt * 4:bt * 4 + 4, c]);\n"
    "    }\n"
    "}\n"
    "\n"
    "// 16-bit folds (16 lanes in the copy loop, halving lane folds), an assume carried by fusion\n"
    "// into the copy-out, and a copy that fills a [2, 64] tile from one row's run of 128\n"
    "kernel fold16(x: tensor<bf16, [T, H]>, y: tensor<i16, [T, H]>, r: tensor<i32, [T, NC]>,\n"
    "              q: tensor<e4m3, [T, H]>, off: i64) {\n"
    "    launch (ceildiv(T, 4), NC) as (bt, c) {\n"
    "        tile xt: bf16[4, 96];\n"
    "        tile ab: u16[4, 96];\n"
    "        tile nz: u16[4, 96];\n"
    "        tile yi: i16[4, 96];\n"
    "        tile a: u16[4];\n"
    "        tile mn: u16[4];\n"
    "        tile ymax: i16[4];\n"
    "        tile ymin: i16[4];\n"
    "        tile rr: i32[4];\n"
    "        tile qn: e4m3[4, 96];\n"
    "        copy(x[bt * 4, c * 96 + off], xt, fill=-0.5);\n"
    "        for i, j in parallel(4, 96) {\n"
    "            ab[i, j] = bitcast<u16>(xt[i, j]) & 0x7fff;\n"
    "        }\n"
    "        for i, j in parallel(4, 96) {\n"
    "            nz[i, j] = (bitcast<u16>(xt[i, j]) & 0x7fff) - 1;\n"
    "        }\n"
    "        reduce<max>(ab, a, axis=1);\n"
    "        reduce<min>(nz, mn, axis=1);\n"
    "        copy(y[bt * 4, c * 96 + off], yi, fill=-7);\n"
    "        reduce<max>(yi, ymax, axis=1);\n"
    "        reduce<min>(yi, ymin, axis=1);\n"
    "        for i in parallel(4) {\n"
    "            rr[i] = (cast<i32>(a[i]) ^ (cast<i32>(mn[i]) << 16)) + cast<i32>(ymax[i]) * 3 - cast<i32>(ymin[i]);\n"
    "        }\n"
    "        copy(rr, r[bt * 4:bt * 4 + 4, c]);\n"
    "        for i, j in parallel(4, 96) {\n"
    "            let v = xt[i, j] * 4.0;\n"
    "            let p = select(abs(v) >= 0.03125, v, 0.0);\n"
    "            assume(p == 0.0 || abs(p) >= 0.015625);\n"
    "            qn[i, j] = p;\n"
    "        }\n"
    "        copy(qn, q[bt * 4, c * 96 + off]);\n"
    "    }\n"
    "}\n"
    "\n"
    "// bf16 element times a scalar into e4m3 under a zero-or-normal fact: the packed store\n"
    "// computes the products from the raw bf16 (ts__tv_st_e4m3x32_nz_bf16), any sign of k\n"
    "kernel mulq(x: tensor<bf16, [T, H]>, q: tensor<e4m3, [T, H]>, k: f32) {\n"
    "    launch (T) as (t) {\n"
    "        tile xt: bf16[1, 160];\n"
    "        tile qt: e4m3[1, 160];\n"
    "        copy(x[t, 0], xt);\n"
    "        for i, j in parallel(1, 160) {\n"
    "            let p = xt[i, j] * k;\n"
    "            assume(p == 0.0 || abs(p) >= 0.015625);\n"
    "            qt[i, j] = p;\n"
    "        }\n"
    "        copy(qt, q[t, 0]);\n"
    "    }\n"
    "}\n"
    "\n"
    "// clamps written as selects (NaN passes, ties keep x): vminps / vmaxps\n"
    "kernel clampsel(x: tensor<f32, [T, H]>, y: tensor<f32, [T, H]>, o1: tensor<f32, [T, H]>,\n"
    "                o2: tensor<f32, [T, H]>, o3: tensor<f32, [T, H]>, o4: tensor<f32, [T, H]>, k: f32) {\n"
    "    launch (T) as (t) {\n"
    "        for j in parallel(H) {\n"
    "            let v = x[t, j];\n"
    "            let w = y[t, j];\n"
    "            o1[t, j] = select(v > k, k, v);\n"
    "            o2[t, j] = select(k > w, k, w);\n"
    "            o3[t, j] = select(v < w, w, v);\n"
    "            o4[t, j] = select(w > 0.0, 0.0, select(w < -0.0, -0.0, w));\n"
    "        }\n"
    "    }\n"
    "}\n"
    "\n"
    "kernel flat(x: tensor<bf16, [T, H]>, y: tensor<f32, [T, H]>, off: i64) {\n"
    "    launch (T, ceildiv(H, 128)) as (t, c) {\n"
    "        tile a: f32[2, 64];\n"
    "        let b = c * 128 + off;\n"
    "        copy(x[t, b:b + 128], a, fill=3.0);\n"
    "        for i, j in parallel(2, 64) {\n"
    "            a[i, j] = a[i, j] * 2.0 + cast<f32>(i * 64 + j);\n"
    "        }\n"
    "        copy(a, y[t, b:b + 128]);\n"
    "    }\n"
    "}\n"
    "\n"
    "kernel shifted(x: tensor<bf16, [T, H]>, y: tensor<f32, [T, H]>, off: i64) {\n"
    "    launch (T, ceildiv(H, 64)) as (t, c) {\n"
    "        tile a: f32[1, 64];\n"
    "        copy(x[t, c * 64 + off], a, fill=7.0);\n"
    "        for i, j in parallel(1, 64) {\n"
    "            a[i, j] = a[i, j] * 2.0 + cast<f32>(j);\n"
    "        }\n"
    "        copy(a, y[t, c * 64 + off]);\n"
    "    }\n"
    "}\n";

static const char k_simd_driver[] =
    "/* Driver: every kernel run as SIMD emission (v_) and scalar emission (s_) on the same\n"
    " * inputs, outputs compared byte for byte; plain-C references for some. Exit status: mismatches. */\n"
    "#include \"tilestack/core.h\"\n"
    "#include \"tilestack/numerics.h\"\n"
    "#include <math.h>\n"
    "#include <stdio.h>\n"
    "#include <stdlib.h>\n"
    "#include <string.h>\n"
    "typedef const ts_tensor *T_;\n"
    "#define DECL(p)                                                                                   \\\n"
    "    ts_status p##per_token_cast_e4m3(T_, T_, T_);                                                 \\\n"
    "    ts_status p##rmsnorm(T_, T_, T_, float);                                                      \\\n"
    "    ts_status p##elemwise(T_, T_, T_, T_, T_, T_, T_, T_, T_, T_, T_);                            \\\n"
    "    ts_status p##narrow8(T_, T_, T_, T_, T_, T_);                                                   \\\n"
    "    ts_status p##rowfold(T_, T_, T_, T_, int64_t);                                                \\\n"
    "    ts_status p##pack2(T_, T_, T_, T_, T_, T_);                                                    \\\n"
    "    ts_status p##unpack2(T_, T_, T_);                                                              \\\n"
    "    ts_status p##pairbf(T_, T_, T_);                                                               \\\n"
    "    ts_status p##reds(T_, T_, T_, T_, T_);                                                        \\\n"
    "    ts_status p##mm(T_, T_, T_, T_, T_, T_);                                                      \\\n"
    "    ts_status p##fold16(T_, T_, T_, T_, int64_t);                                              \\\n"
    "    ts_status p##flat(T_, T_, int64_t);                                                           \\\n"
    "    ts_status p##mulq(T_, T_, float);                                                             \\\n"
    "    ts_status p##clampsel(T_, T_, T_, T_, T_, T_, float);                                         \\\n"
    "    ts_status p##shifted(T_, T_, int64_t);\n"
    "DECL(v_)\n"
    "DECL(s_)\n"
    "static int bad;\n"
    "#define EXPECT(c) do { if (!(c)) { bad++; printf(\"FAIL line %d: %s\\n\", __LINE__, #c); } } while (0)\n"
    "static uint64_t rs = 0x9E3779B97F4A7C15ull;\n"
    "static uint32_t rnd(void) {\n"
    "    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;\n"
    "    return (uint32_t)(rs >> 16);\n"
    "}\n"
    "static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }\n"
    "static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }\n"
    "/* moderate finite values */\n"
    "static float rfn(void) { return ((int)(rnd() % 20000) - 10000) / 997.0f; }\n"
    "/* With the awkward cases mixed in: inf, -0, subnormals, huge, near the e4m3 limit, and NaN\n"
    " * when nan is set. Only where no operation meets two NaNs: which of two NaN operands an\n"
    " * IEEE operation returns is unspecified, and C compilers commute + and * freely, so not\n"
    " * even the scalar code fixes that payload (docs/tile-language.md, SIMD). */\n"
    "static float rfx(int nan) {\n"
    "    uint32_t r = rnd();\n"
    "    switch (r % 16) {\n"
    "    case 0: return nan ? u2f(0x7FC00000u | (r & 0x80000000u) | (rnd() & 0x3FFFFF)) : rfn();\n"
    "    case 1: return r & 32 ? INFINITY : -INFINITY;\n"
    "    case 2: return -0.0f;\n"
    "    case 3: return u2f((rnd() & 0x807FFFFFu));\n"
    "    case 4: return (r & 32 ? 1e30f : -3e25f) * (1.0f + (float)(r % 100) / 7.0f);\n"
    "    case 5: return (r & 32 ? 1 : -1) * (440.0f + (float)(rnd() % 3000) / 100.0f);\n"
    "    default: return rfn();\n"
    "    }\n"
    "}\n"
    "static float rf(void) { return rfx(1); }\n"
    "static void same(const void *a, const void *b, size_t n, const char *what) {\n"
    "    if (memcmp(a, b, n)) {\n"
    "        bad++;\n"
    "        const unsigned char *x = a, *y = b;\n"
    "        size_t i = 0;\n"
    "        while (x[i] == y[i]) i++;\n"
    "        printf(\"FAIL %s: SIMD and scalar emission differ at byte %zu (%02x vs %02x)\\n\", what, i, x[i], y[i]);\n"
    "    }\n"
    "}\n"
    "/* the language's max/min (NaN ignored, +0 > -0) */\n"
    "static float mx(float a, float b) {\n"
    "    if (a != a) return b;\n"
    "    if (b != b) return a;\n"
    "    if (a == b) return u2f(f2u(a) & f2u(b));\n"
    "    return a > b ? a : b;\n"
    "}\n"
    "static float mn(float a, float b) {\n"
    "    if (a != a) return b;\n"
    "    if (b != b) return a;\n"
    "    if (a == b) return u2f(f2u(a) | f2u(b));\n"
    "    return a < b ? a : b;\n"
    "}\n"
    "static float sum8(const float *v, int n) {\n"
    "    float a[8];\n"
    "    for (int l = 0; l < 8; l++) a[l] = -0.0f;\n"
    "    for (int k = 0; k < n; k++) a[k % 8] += v[k];\n"
    "    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));\n"
    "}\n"
    "\n"
    "static void test_cast(void) {\n"
    "    enum { T = 37, H = 256, NG = 2 };\n"
    "    uint16_t *x = malloc(T * H * 2);\n"
    "    uint8_t *q[2];\n"
    "    float *sf[2];\n"
    "    for (int i = 0; i < T * H; i++) x[i] = ts_f32_to_bf16(i % 3 ? rf() : rfn());\n"
    "    for (int i = 0; i < H; i++) x[7 * H + i] = 0; /* an all-zero row */\n"
    "    ts_tensor tx = ts_tensor_2d(x, TS_BF16, T, H);\n"
    "    for (int v = 0; v < 2; v++) {\n"
    "        q[v] = malloc(T * H), sf[v] = malloc(T * NG * 4);\n"
    "        memset(q[v], 0xAB, T * H);\n"
    "        ts_tensor tq = ts_tensor_2d(q[v], TS_E4M3, T, H), ts_ = ts_tensor_2d(sf[v], TS_F32, T, NG);\n"
    "        EXPECT((v ? s_per_token_cast_e4m3 : v_per_token_cast_e4m3)(&tx, &tq, &ts_) == TS_OK);\n"
    "    }\n"
    "    same(q[0], q[1], T * H, \"per_token_cast q\");\n"
    "    same(sf[0], sf[1], T * NG * 4, \"per_token_cast sf\");\n"
    "    for (int t = 0; t < T; t++)\n"
    "        for (int g = 0; g < NG; g++) {\n"
    "            float am = 0;\n"
    "            for (int j = 0; j < 128; j++) am = mx(am, fabsf(ts_bf16_to_f32(x[t * H + g * 128 + j])));\n"
    "            float sc = mx(am, 1e-4f) / 448.0f, inv = 1.0f / sc;\n"
    "            EXPECT(f2u(sc) == f2u(sf[0][t * NG + g]));\n"
    "            for (int j = 0; j < 128; j++) {\n"
    "                float v = mn(mx(ts_bf16_to_f32(x[t * H + g * 128 + j]) * inv, -448.0f), 448.0f);\n"
    "                EXPECT(ts_f32_to_e4m3(v) == q[0][t * H + g * 128 + j]);\n"
    "            }\n"
    "        }\n"
    "    free(x);\n"
    "    for (int v = 0; v < 2; v++) free(q[v]), free(sf[v]);\n"
    "}\n"
    "\n"
    "static void test_rmsnorm(void) {\n"
    "    enum { T = 5, H = 300 };\n"
    "    static uint16_t x[T * H], w[H], y[2][T * H];\n"
    "    for (int i = 0; i < T * H; i++) x[i] = ts_f32_to_bf16(rfn());\n"
    "    for (int i = 0; i < H; i++) w[i] = ts_f32_to_bf16(rfn() * 0.1f);\n"
    "    ts_tensor tx = ts_tensor_2d(x, TS_BF16, T, H), tw = ts_tensor_1d(w, TS_BF16, H);\n"
    "    for (int v = 0; v < 2; v++) {\n"
    "        ts_tensor ty = ts_tensor_2d(y[v], TS_BF16, T, H);\n"
    "        EXPECT((v ? s_rmsnorm : v_rmsnorm)(&tx, &tw, &ty, 1e-6f) == TS_OK);\n"
    "    }\n"
    "    same(y[0], y[1], sizeof y[0], \"rmsnorm\");\n"
    "    for (int t = 0; t < T; t++) {\n"
    "        float ss = 0.0f;\n"
    "        for (int c = 0; c < (H + 255) / 256; c++) {\n"
    "            float sq[256];\n"
    "            for (int j = 0; j < 256; j++) {\n"
    "                int h = c * 256 + j;\n"
    "                float v = h < H ? ts_bf16_to_f32(x[t * H + h]) : 0.0f;\n"
    "                sq[j] = v * v;\n"
    "            }\n"
    "            ss = ss + sum8(sq, 256);\n"
    "        }\n"
    "        float r = 1.0f / sqrtf(ss / (float)H + 1e-6f);\n"
    "        for (int h = 0; h < H; h++)\n"
    "            EXPECT(ts_f32_to_bf16(ts_bf16_to_f32(x[t * H + h]) * r * ts_bf16_to_f32(w[h])) == y[0][t * H + h]);\n"
    "    }\n"
    "}\n"
    "\n"
    "static void test_elemwise(void) {\n"
    "    enum { T = 7, H = 203 };\n"
    "    static float x[T * H], y[T * H], of[2][T * H], og[2][T * H];\n"
    "    static uint16_t ob[2][T * H], oh[2][T * H];\n"
    "    static uint8_t o8[2][T * H], o5[2][T * H], ou[2][T * H], om[2][T * H];\n"
    "    static int32_t oi[2][T * H];\n"
    "    for (int i = 0; i < T * H; i++) x[i] = rfx(0), y[i] = rfx(0);\n"
    "    ts_tensor tx = ts_tensor_2d(x, TS_F32, T, H), ty = ts_tensor_2d(y, TS_F32, T, H);\n"
    "    for (int v = 0; v < 2; v++) {\n"
    "        ts_tensor a = ts_tensor_2d(ob[v], TS_BF16, T, H), b = ts_tensor_2d(o8[v], TS_E4M3, T, H);\n"
    "        ts_tensor c = ts_tensor_2d(o5[v], TS_E5M2, T, H), d = ts_tensor_2d(oh[v], TS_F16, T, H);\n"
    "        ts_tensor e = ts_tensor_2d(oi[v], TS_I32, T, H), f = ts_tensor_2d(of[v], TS_F32, T, H);\n"
    "        ts_tensor g = ts_tensor_2d(og[v], TS_F32, T, H), h = ts_tensor_2d(ou[v], TS_U8, T, H);\n"
    "        ts_tensor m = ts_tensor_2d(om[v], TS_UE8M0, T, H);\n"
    "        EXPECT((v ? s_elemwise : v_elemwise)(&tx, &ty, &a, &b, &c, &d, &e, &f, &g, &h, &m) == TS_OK);\n"
    "    }\n"
    "    same(ob[0], ob[1], sizeof ob[0], \"elemwise bf16\");\n"
    "    same(o8[0], o8[1], sizeof o8[0], \"elemwise e4m3\");\n"
    "    same(o5[0], o5[1], sizeof o5[0], \"elemwise e5m2\");\n"
    "    same(oh[0], oh[1], sizeof oh[0], \"elemwise f16\");\n"
    "    same(om[0], om[1], sizeof om[0], \"elemwise ue8m0\");\n"
    "    same(oi[0], oi[1], sizeof oi[0], \"elemwise i32\");\n"
    "    same(of[0], of[1], sizeof of[0], \"elemwise f32 select/min/max/fma/sqrt\");\n"
    "    same(og[0], og[1], sizeof og[0], \"elemwise f32 math\");\n"
    "    same(ou[0], ou[1], sizeof ou[0], \"elemwise u8\");\n"
    "    for (int i = 0; i < T * H; i++) {\n"
    "        EXPECT(ob[0][i] == ts_f32_to_bf16(x[i] * y[i]));\n"
    "        EXPECT(o8[0][i] == ts_f32_to_e4m3(x[i]));\n"
    "    }\n"
    "}\n"
    "\n"
    "static void test_narrow8(void) {\n"
    "    enum { T = 5, H = 141 };\n"
    "    static float x[T * H];\n"
    "    static uint8_t q[2][T * H], u[2][T * H], s8[2][T * H], e5[2][T * H], qz[2][T * H];\n"
    "    for (int i = 0; i < T * H; i++) x[i] = rf();\n"
    "    ts_tensor tx = ts_tensor_2d(x, TS_F32, T, H);\n"
    "    for (int v = 0; v < 2; v++) {\n"
    "        ts_tensor a = ts_tensor_2d(q[v], TS_E4M3, T, H), b = ts_tensor_2d(u[v], TS_U8, T, H);\n"
    "        ts_tensor c = ts_tensor_2d(s8[v], TS_I8, T, H), d = ts_tensor_2d(e5[v], TS_E5M2, T, H);\n"
    "        ts_tensor z = ts_tensor_2d(qz[v], TS_E4M3, T, H);\n"
    "        EXPECT((v ? s_narrow8 : v_narrow8)(&tx, &a, &b, &c, &d, &z) == TS_OK);\n"
    "    }\n"
    "    same(q[0], q[1], sizeof q[0], \"narrow8 e4m3\");\n"
    "    same(u[0], u[1], sizeof u[0], \"narrow8 u8\");\n"
    "    same(s8[0], s8[1], sizeof s8[0], \"narrow8 i8\");\n"
    "    same(e5[0], e5[1], sizeof e5[0], \"narrow8 e5m2\");\n"
    "    same(qz[0], qz[1], sizeof qz[0], \"narrow8 e4m3 zero-or-normal (assume)\");\n"
    "    for (int t = 0; t < T; t++)\n"
    "        for (int j = 0; j < H; j++) {\n"
    "            int i = t * H + j;\n"
    "            uint8_t want = ts_f32_to_e4m3(x[i] * 3.0f);\n"
    "            EXPECT(q[0][i] == want);\n"
    "            EXPECT(s8[0][i] == (uint8_t)(j * 37 - t));\n"
    "        }\n"
    "}\n"
    "\n"
    "static void test_pack2(void) {\n"
    "    enum { T = 3, H = 45 };\n"
    "    static uint8_t x[T * 2 * H], y[2][T * H];\n"
    "    static float f[T * 2 * H], z[2][T * H];\n"
    "    static int16_t sx[T * 2 * H];\n"
    "    static int32_t w[2][T * H];\n"
    "    for (int i = 0; i < T * 2 * H; i++) x[i] = (uint8_t)rnd(), f[i] = rfx(0), sx[i] = (int16_t)rnd();\n"
    "    ts_tensor tx = ts_tensor_2d(x, TS_U8, T, 2 * H), tf = ts_tensor_2d(f, TS_F32, T, 2 * H);\n"
    "    ts_tensor ts = ts_tensor_2d(sx, TS_I16, T, 2 * H);\n"
    "    for (int v = 0; v < 2; v++) {\n"
    "        ts_tensor a = ts_tensor_2d(y[v], TS_U8, T, H), b = ts_tensor_2d(z[v], TS_F32, T, H);\n"
    "        ts_tensor c = ts_tensor_2d(w[v], TS_I32, T, H);\n"
    "        EXPECT((v ? s_pack2 : v_pack2)(&tx, &tf, &a, &b, &ts, &c) == TS_OK);\n"
    "    }\n"
    "    same(y[0], y[1], sizeof y[0], \"pack2 u8 pairs\");\n"
    "    same(z[0], z[1], sizeof z[0], \"pack2 f32 pairs\");\n"
    "    same(w[0], w[1], sizeof w[0], \"pack2 i16 pairs, shifts\");\n"
    "    for (int t = 0; t < T; t++)\n"
    "        for (int j = 0; j < H; j++) {\n"
    "            const uint8_t *r = x + t * 2 * H + 2 * j;\n"
    "            EXPECT(y[0][t * H + j] == (uint8_t)((r[0] & 15) | (r[1] << 4)));\n"
    "        }\n"
    "}\n"
    "\n"
    "static void test_pairbf(void) {\n"
    "    enum { T = 3, H = 63 };\n"
    "    static uint16_t x[T * 2 * H];\n"
    "    static float y[2][T * H], z[2][T * H];\n"
    "    for (int i = 0; i < T * 2 * H; i++) {\n"
    "        x[i] = (uint16_t)rnd();\n"
    "        if ((x[i] & 0x7F80) == 0x7F80) x[i] ^= 0x0100; /* one NaN operand at most (below) */\n"
    "        if (i % 29 == 3) x[i] = 0x7FC1;\n"
    "    }\n"
    "    ts_tensor tx = ts_tensor_2d(x, TS_BF16, T, 2 * H);\n"
    "    for (int v = 0; v < 2; v++) {\n"
    "        ts_tensor a = ts_tensor_2d(y[v], TS_F32, T, H), b = ts_tensor_2d(z[v], TS_F32, T, H);\n"
    "        EXPECT((v ? s_pairbf : v_pairbf)(&tx, &a, &b) == TS_OK);\n"
    "    }\n"
    "    same(y[0], y[1], sizeof y[0], \"pairbf tensor pairs\");\n"
    "    same(z[0], z[1], sizeof z[0], \"pairbf tile pairs\");\n"
    "    for (int t = 0; t < T; t++)\n"
    "        for (int j = 0; j < H; j++) {\n"
    "            const uint16_t *r = x + t * 2 * H + 2 * j;\n"
    "            const float e = ts_bf16_to_f32(r[0]) * 0.75f - ts_bf16_to_f32(r[1]);\n"
    "            EXPECT(f2u(y[0][t * H + j]) == f2u(e) || (e != e && y[0][t * H + j] != y[0][t * H + j]));\n"
    "        }\n"
    "}\n"
    "\n"
    "static void test_unpack2(void) {\n"
    "    enum { T = 3, H = 45 };\n"
    "    static uint8_t x[T * H];\n"
    "    static float y[2][T * 2 * H];\n"
    "    static int16_t z[2][T * 2 * H];\n"
    "    for (int i = 0; i < T * H; i++) x[i] = (uint8_t)rnd();\n"
    "    ts_tensor tx = ts_tensor_2d(x, TS_U8, T, H);\n"
    "    for (int v = 0; v < 2; v++) {\n"
    "        ts_tensor a = ts_tensor_2d(y[v], TS_F32, T, 2 * H), b = ts_tensor_2d(z[v], TS_I16, T, 2 * H);\n"
    "        EXPECT((v ? s_unpack2 : v_unpack2)(&tx, &a, &b) == TS_OK);\n"
    "    }\n"
    "    same(y[0], y[1], sizeof y[0], \"unpack2 table lookups\");\n"
    "    same(z[0], z[1], sizeof z[0], \"unpack2 i16 pairs\");\n"
    "    for (int i = 0; i < T * H; i++) {\n"
    "        EXPECT(y[0][2 * i] == (float)(x[i] & 15) * 0.5f - 3.0f);\n"
    "        EXPECT(y[0][2 * i + 1] == (float)(x[i] >> 4) * 0.5f - 3.0f);\n"
    "    }\n"
    "}\n"
    "\n"
    "static void test_reds(void) {\n"
    "    enum { T = 9, W = 37 };\n"
    "    static float x[T * W], r[2][T * 8], c[2][T * W];\n"
    "    static int32_t xi[T * W], ri[2][T * 8];\n"
    "    for (int i = 0; i < T * W; i++) x[i] = i % 5 ? rfn() : rfx(0), xi[i] = (int32_t)rnd();\n"
    "    ts_tensor tx = ts_tensor_2d(x, TS_F32, T, W), txi = ts_tensor_2d(xi, TS_I32, T, W);\n"
    "    for (int v = 0; v < 2; v++) {\n"
    "        ts_tensor a = ts_tensor_2d(r[v], TS_F32, T, 8), b = ts_tensor_2d(ri[v], TS_I32, T, 8);\n"
    "        ts_tensor d = ts_tensor_2d(c[v], TS_F32, T, W);\n"
    "        EXPECT((v ? s_reds : v_reds)(&tx, &a, &txi, &b, &d) == TS_OK);\n"
    "    }\n"
    "    same(r[0], r[1], sizeof r[0], \"reduce f32\");\n"
    "    same(ri[0], ri[1], sizeof ri[0], \"reduce i32\");\n"
    "    same(c[0], c[1], sizeof c[0], \"reduce axis 0\");\n"
    "    for (int t = 0; t < T; t++) {\n"
    "        float row[W];\n"
    "        uint32_t s = 0;\n"
    "        for (int k = 0; k < W; k++) row[k] = t ? x[(t - 1) * W + k] : -2.5f, s += (uint32_t)xi[t * W + k];\n"
    "        EXPECT(f2u(r[0][t * 8]) == f2u(sum8(row, W)));\n"
    "        EXPECT(ri[0][t * 8] == (int32_t)s);\n"
    "    }\n"
    "}\n"
    "\n"
    "static void test_mm(void) {\n"
    "    static float a[16 * 24], at[24 * 16], b[24 * 20], bt[20 * 24], c[2][16 * 20], d[2][16 * 20];\n"
    "    for (int i = 0; i < 16 * 24; i++) a[i] = rfn(), at[i] = rfn();\n"
    "    for (int i = 0; i < 24 * 20; i++) b[i] = rfn(), bt[i] = rfn();\n"
    "    ts_tensor ta = ts_tensor_2d(a, TS_F32, 16, 24), tat = ts_tensor_2d(at, TS_F32, 24, 16);\n"
    "    ts_tensor tb = ts_tensor_2d(b, TS_F32, 24, 20), tbt = ts_tensor_2d(bt, TS_F32, 20, 24);\n"
    "    for (int v = 0; v < 2; v++) {\n"
    "        ts_tensor tc = ts_tensor_2d(c[v], TS_F32, 16, 20), td = ts_tensor_2d(d[v], TS_F32, 16, 20);\n"
    "        EXPECT((v ? s_mm : v_mm)(&ta, &tat, &tb, &tbt, &tc, &td) == TS_OK);\n"
    "    }\n"
    "    same(c[0], c[1], sizeof c[0], \"gemm clear\");\n"
    "    same(d[0], d[1], sizeof d[0], \"gemm accumulate\");\n"
    "    for (int m = 0; m < 16; m++)\n"
    "        for (int n = 0; n < 20; n++) {\n"
    "            float acc = 0.0f;\n"
    "            for (int k = 0; k < 24; k++) acc = fmaf(a[m * 24 + k], b[k * 20 + n], acc);\n"
    "            EXPECT(f2u(acc) == f2u(c[0][m * 20 + n]));\n"
    "            EXPECT(f2u(0.25f + acc) == f2u(d[0][m * 20 + n]));\n"
    "        }\n"
    "}\n"
    "\n"
    "static void test_rowfold(void) {\n"
    "    enum { T = 7, H = 150, NC = 3 };\n"
    "    static uint16_t x[T * H];\n"
    "    static int32_t xi[T * H], sm[2][T * NC];\n"
    "    static uint32_t mx[2][T * NC];\n"
    "    for (int i = 0; i < T * H; i++) x[i] = ts_f32_to_bf16(rf()), xi[i] = (int32_t)rnd();\n"
    "    const int64_t offs[] = {0, -5, 7, 100, -200};\n"
    "    ts_tensor tx = ts_tensor_2d(x, TS_BF16, T, H), ti = ts_tensor_2d(xi, TS_I32, T, H);\n"
    "    for (size_t o = 0; o < sizeof offs / sizeof offs[0]; o++) {\n"
    "        for (int v = 0; v < 2; v++) {\n"
    "            ts_tensor a = ts_tensor_2d(mx[v], TS_I32, T, NC), b = ts_tensor_2d(sm[v], TS_I32, T, NC);\n"
    "            EXPECT((v ? s_rowfold : v_rowfold)(&tx, &ti, &a, &b, offs[o]) == TS_OK);\n"
    "        }\n"
    "        same(mx[0], mx[1], sizeof mx[0], \"rowfold max\");\n"
    "        same(sm[0], sm[1], sizeof sm[0], \"rowfold sum\");\n"
    "        for (int t = 0; t < T; t++) /* plain-C reference of the max */\n"
    "            for (int c = 0; c < NC; c++) {\n"
    "                uint32_t m = 0;\n"
    "                for (int j = 0; j < 64; j++) {\n"
    "                    int64_t h = c * 64 + j + offs[o];\n"
    "                    float f = (h >= 0 && h < H) ? ts_bf16_to_f32(x[t * H + h]) : -1.5f;\n"
    "                    uint32_t b = f2u(f) & 0x7FFFFFFFu;\n"
    "                    m = b > m ? b : m;\n"
    "                }\n"
    "                EXPECT(mx[0][t * NC + c] == m);\n"
    "            }\n"
    "    }\n"
    "}\n"
    "\n"
    "static void test_shifted(void) {\n"
    "    enum { T = 3, H = 203 };\n"
    "    static uint16_t x[T * H];\n"
    "    static float y[2][T * H];\n"
    "    for (int i = 0; i < T * H; i++) x[i] = ts_f32_to_bf16(rf());\n"
    "    const int64_t offs[] = {0, -5, 3, 61, 250, -300};\n"
    "    ts_tensor tx = ts_tensor_2d(x, TS_BF16, T, H);\n"
    "    for (size_t o = 0; o < sizeof offs / sizeof offs[0]; o++) {\n"
    "        for (int v = 0; v < 2; v++) {\n"
    "            for (int i = 0; i < T * H; i++) y[v][i] = -1.0f;\n"
    "            ts_tensor ty = ts_tensor_2d(y[v], TS_F32, T, H);\n"
    "            EXPECT((v ? s_shifted : v_shifted)(&tx, &ty, offs[o]) == TS_OK);\n"
    "        }\n"
    "        same(y[0], y[1], sizeof y[0], \"copy with offsets\");\n"
    "        /* element h of row t comes from block c = (h - off) / 64 when that block exists */\n"
    "        for (int t = 0; t < T; t++)\n"
    "            for (int h = 0; h < H; h++) {\n"
    "                int64_t rel = h - offs[o];\n"
    "                float want = -1.0f;\n"
    "                if (rel >= 0 && rel < (int64_t)((H + 63) / 64) * 64)\n"
    "                    want = ts_bf16_to_f32(x[t * H + h]) * 2.0f + (float)(rel % 64);\n"
    "                EXPECT(f2u(want) == f2u(y[0][t * H + h]));\n"
    "            }\n"
    "    }\n"
    "}\n"
    "\n"
    "static void test_fold16(void) {\n"
    "    enum { T = 6, H = 250, NC = 3 };\n"
    "    static uint16_t x[T * H];\n"
    "    static int16_t y[T * H];\n"
    "    static int32_t r[2][T * NC];\n"
    "    static uint8_t q[2][T * H];\n"
    "    for (int i = 0; i < T * H; i++) x[i] = ts_f32_to_bf16(i % 7 ? rf() : rfx(0) * 1e-3f), y[i] = (int16_t)rnd();\n"
    "    const int64_t offs[] = {0, -5, 7, 100, -200};\n"
    "    ts_tensor tx = ts_tensor_2d(x, TS_BF16, T, H), ty = ts_tensor_2d(y, TS_I16, T, H);\n"
    "    for (size_t o = 0; o < sizeof offs / sizeof offs[0]; o++) {\n"
    "        for (int v = 0; v < 2; v++) {\n"
    "            memset(q[v], 0xEE, sizeof q[v]);\n"
    "            ts_tensor a = ts_tensor_2d(r[v], TS_I32, T, NC), b = ts_tensor_2d(q[v], TS_E4M3, T, H);\n"
    "            EXPECT((v ? s_fold16 : v_fold16)(&tx, &ty, &a, &b, offs[o]) == TS_OK);\n"
    "        }\n"
    "        same(r[0], r[1], sizeof r[0], \"fold16 u16 / i16 folds\");\n"
    "        same(q[0], q[1], sizeof q[0], \"fold16 e4m3 with a fact carried by fusion\");\n"
    "        for (int t = 0; t < T; t++) /* plain-C reference */\n"
    "            for (int c = 0; c < NC; c++) {\n"
    "                int32_t am = 0, mn = 0xFFFF, ymx = -32768, ymn = 32767;\n"
    "                for (int j = 0; j < 96; j++) {\n"
    "                    int64_t h = c * 96 + j + offs[o];\n"
    "                    bool in = h >= 0 && h < H;\n"
    "                    int32_t b = (in ? x[t * H + h] : ts_f32_to_bf16(-0.5f)) & 0x7FFF;\n"
    "                    int32_t yv = in ? y[t * H + h] : -7;\n"
    "                    am = b > am ? b : am;\n"
    "                    mn = ((b - 1) & 0xFFFF) < mn ? ((b - 1) & 0xFFFF) : mn;\n"
    "                    ymx = yv > ymx ? yv : ymx;\n"
    "                    ymn = yv < ymn ? yv : ymn;\n"
    "                }\n"
    "                EXPECT(r[0][t * NC + c] == (int32_t)((uint32_t)(am ^ (mn << 16)) + (uint32_t)(ymx * 3 - ymn)));\n"
    "            }\n"
    "    }\n"
    "}\n"
    "\n"
    "static void test_flat(void) {\n"
    "    enum { T = 3, H = 300 };\n"
    "    static uint16_t x[T * H];\n"
    "    static float y[2][T * H];\n"
    "    for (int i = 0; i < T * H; i++) x[i] = ts_f32_to_bf16(rf());\n"
    "    const int64_t offs[] = {0, -5, 3, 61, 250, -300};\n"
    "    ts_tensor tx = ts_tensor_2d(x, TS_BF16, T, H);\n"
    "    for (size_t o = 0; o < sizeof offs / sizeof offs[0]; o++) {\n"
    "        for (int v = 0; v < 2; v++) {\n"
    "            for (int i = 0; i < T * H; i++) y[v][i] = -1.0f;\n"
    "            ts_tensor ty = ts_tensor_2d(y[v], TS_F32, T, H);\n"
    "            EXPECT((v ? s_flat : v_flat)(&tx, &ty, offs[o]) == TS_OK);\n"
    "        }\n"
    "        same(y[0], y[1], sizeof y[0], \"reshaping copy\");\n"
    "        /* element h of row t: run c = (h - off) / 128, tile element (h - off) % 128 */\n"
    "        for (int t = 0; t < T; t++)\n"
    "            for (int h = 0; h < H; h++) {\n"
    "                int64_t rel = h - offs[o];\n"
    "                float want = -1.0f;\n"
    "                if (rel >= 0 && rel < (int64_t)((H + 127) / 128) * 128)\n"
    "                    want = ts_bf16_to_f32(x[t * H + h]) * 2.0f + (float)(rel % 128);\n"
    "                EXPECT(f2u(want) == f2u(y[0][t * H + h]));\n"
    "            }\n"
    "    }\n"
    "}\n"
    "\n"
    "static void test_mulq(void) {\n"
    "    enum { T = 3, H = 150 };\n"
    "    static uint16_t x[T * H];\n"
    "    static uint8_t q[2][T * H];\n"
    "    /* products zero, normal, beyond 448 or infinite: never NaN (no inf times a zero k) */\n"
    "    const float ks[] = {0.5f, -0.25f, 3.0f, -0.0f, 0.0f, 0.015625f};\n"
    "    ts_tensor tx = ts_tensor_2d(x, TS_BF16, T, H);\n"
    "    for (size_t k = 0; k < sizeof ks / sizeof ks[0]; k++) {\n"
    "        const float kk = ks[k];\n"
    "        for (int i = 0; i < T * H; i++) {\n"
    "            float v = (i % 11 == 0) ? 0.0f : (i % 13 == 0) ? -0.0f : ldexpf(1.0f + (float)(rnd() % 1000) / 1000.0f, (int)(rnd() % 16));\n"
    "            if (i % 17 == 0 && kk != 0.0f) v = INFINITY;\n"
    "            if (rnd() & 1) v = -v;\n"
    "            x[i] = ts_f32_to_bf16(v);\n"
    "        }\n"
    "        for (int v = 0; v < 2; v++) {\n"
    "            ts_tensor a = ts_tensor_2d(q[v], TS_E4M3, T, H);\n"
    "            EXPECT((v ? s_mulq : v_mulq)(&tx, &a, kk) == TS_OK);\n"
    "        }\n"
    "        same(q[0], q[1], sizeof q[0], \"mulq e4m3 of bf16 products\");\n"
    "        for (int i = 0; i < T * H; i++) EXPECT(q[0][i] == ts_f32_to_e4m3(ts_bf16_to_f32(x[i]) * kk));\n"
    "    }\n"
    "}\n"
    "\n"
    "static void test_clampsel(void) {\n"
    "    enum { T = 3, H = 77 };\n"
    "    static float x[T * H], y[T * H], o[4][2][T * H];\n"
    "    for (int i = 0; i < T * H; i++) x[i] = rf(), y[i] = i % 9 == 4 ? 0.0f : rf();\n"
    "    const float ks[] = {448.0f, -0.0f, 0.0f, NAN, -INFINITY};\n"
    "    ts_tensor tx = ts_tensor_2d(x, TS_F32, T, H), ty = ts_tensor_2d(y, TS_F32, T, H);\n"
    "    for (size_t k = 0; k < sizeof ks / sizeof ks[0]; k++) {\n"
    "        for (int v = 0; v < 2; v++) {\n"
    "            ts_tensor a = ts_tensor_2d(o[0][v], TS_F32, T, H), b = ts_tensor_2d(o[1][v], TS_F32, T, H);\n"
    "            ts_tensor c = ts_tensor_2d(o[2][v], TS_F32, T, H), d = ts_tensor_2d(o[3][v], TS_F32, T, H);\n"
    "            EXPECT((v ? s_clampsel : v_clampsel)(&tx, &ty, &a, &b, &c, &d, ks[k]) == TS_OK);\n"
    "        }\n"
    "        for (int q = 0; q < 4; q++) same(o[q][0], o[q][1], sizeof o[q][0], \"select clamps\");\n"
    "        for (int i = 0; i < T * H; i++) {\n"
    "            EXPECT(f2u(o[0][0][i]) == f2u(x[i] > ks[k] ? ks[k] : x[i]));\n"
    "            EXPECT(f2u(o[2][0][i]) == f2u(x[i] < y[i] ? y[i] : x[i]));\n"
    "        }\n"
    "    }\n"
    "}\n"
    "\n"
    "int main(void) {\n"
    "    test_clampsel();\n"
    "    test_mulq();\n"
    "    test_fold16();\n"
    "    test_flat();\n"
    "    test_cast();\n"
    "    test_rmsnorm();\n"
    "    test_elemwise();\n"
    "    test_narrow8();\n"
    "    test_pack2();\n"
    "    test_unpack2();\n"
    "    test_pairbf();\n"
    "    test_reds();\n"
    "    test_mm();\n"
    "    test_shifted();\n"
    "    test_rowfold();\n"
    "    printf(\"%d mismatches\\n\", bad);\n"
    "    return bad != 0;\n"
    "}\n";

static char *emit(const char *src, const char *prefix, bool scalar) { return tt_emit(src, "simd.tile", prefix, scalar); }

TS_TEST(tile_simd_what_is_vectorised) {
    char *v = emit(k_simd_kernels, "v_", false), *s = emit(k_simd_kernels, "s_", true);
    TS_CHECK(v && s);
    if (v && s) {
        TS_CHECK(!strstr(s, "ts__tv_"));
        const char *want[] = {
            "ts__tv_st_e4m3x32(", "ts__tv_st_e4m3x32_nz(", "ts__tv_st_u8x32(", "ts__tv_ld2_u8(", "ts__tv_ld2_f32(",
            "ts__tv_ld2_i16(", "ts__tv_ld2_bf16_f32(&a->p_x[", "ts__tv_ld2_bf16_f32(&t", "ts__tile_prefetch(a->p_x, ", "ts__tv_st2x_f32(", "ts__tv_st2x_i16(", "ts__tv_lut16_f32(", "ts__tv_f32_to_e5m2_w(", "vacc_", "lo0_",
            "ts__tv_f32_to_e5m2(",
            "ts__tv_f32_to_f16(",
            "ts__tv_f32_to_ue8m0(",
            "ts__tv_e2m1_to_f32(ts__tv_f32_to_e2m1(",
            "ts__tv_st_u8(&a->p_out[",        /* the e4m3 quantisation, fused into the copy-out */
            "ts__tv_f32_to_e4m3(ts__tv_mink_f32(ts__tv_maxk_f32(", /* clamp to literals: one instruction each */
            "ts__tv_bf16_to_f32(ts__tv_ld_u16(&a->p_x[", /* copy in: contiguous, checks hoisted */
            "ts__tile_vrange(&lo_",
            "acc_",                            /* fold loops */
            "= ts__tv_max_f32(acc_",
            "ts__tv_fma_f32(ts__tv_splat_f32(t", /* gemm: A broadcast, B row vector */
            "ts__tv_exp_f32(",
            "ts__tv_sigmoid_f32(",
            "ts__tv_st_u16(&a->p_ob[",         /* elementwise on tensors */
            "ts__tw_max_u16(wacc_", "ts__tw_min_i16(wacc_", /* 16-bit folds, 16 lanes */
            "ts__tv_hmax_u16(vacc_",           /* lanes folded by halving */
            "== 0 && hi_",                     /* rows in range: constant bounds */
            "ts__tv_st_e4m3x32_nz_bf16(",       /* bf16 * scalar into e4m3, from the raw bf16 */
            "ts__tv_st_bf16x32(",               /* bf16 stores packed 32 at a time */
            "ts__tv_mink_f32(ts__tv_splat_f32(0x0p+0f), ts__tv_maxk_f32(", /* the two-sided clamp as a select */
        };
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
            TS_CHECK_MSG(strstr(v, want[i]) != NULL, "missing in the SIMD emission: %s", want[i]);
    }
    free(v), free(s);
}

/* f32 patterns: every sign and exponent, all top-12 mantissa bits, a few low patterns (the
 * rounding boundaries of bf16 and e4m3 and the sticky bits below them) */
TS_TEST(tile_simd_rt_conversions) {
    static const uint32_t lows[] = {0, 1, 0x7FF};
    long bad = 0;
    for (uint32_t se = 0; se < 512; se++)
        for (uint32_t top = 0; top < 4096; top += 8)
            for (int lo = 0; lo < 3; lo++) {
                ts__tv_f32 v;
                for (int l = 0; l < 8; l++) v[l] = ts__tile_bits_f32(se << 23 | (top + (uint32_t)l) << 11 | lows[lo]);
                ts__tv_u16 b = ts__tv_f32_to_bf16(v);
                ts__tv_u8 q = ts__tv_f32_to_e4m3(v), q5 = ts__tv_f32_to_e5m2(v), q2 = ts__tv_f32_to_e2m1(v);
                ts__tv_u8 qe = ts__tv_f32_to_ue8m0(v);
                ts__tv_u16 hf = ts__tv_f32_to_f16(v);
                for (int l = 0; l < 8; l++)
                    bad += b[l] != ts_f32_to_bf16(v[l]) || q[l] != ts_f32_to_e4m3(v[l]) || q5[l] != ts_f32_to_e5m2(v[l]) ||
                           q2[l] != ts_f32_to_e2m1(v[l]) || qe[l] != ts_f32_to_ue8m0(v[l]) || hf[l] != ts_f32_to_f16(v[l]);
            }
    TS_CHECK_MSG(bad == 0, "%ld encodings differ", bad);
    for (int c = 0; c < 256; c += 8) {
        ts__tv_u8 q;
        for (int l = 0; l < 8; l++) q[l] = (uint8_t)(c + l);
        ts__tv_f32 f = ts__tv_e4m3_to_f32(q), f2 = ts__tv_e2m1_to_f32(q), fe = ts__tv_ue8m0_to_f32(q);
        for (int l = 0; l < 8; l++) {
            uint8_t cl = (uint8_t)(c + l);
            TS_CHECK(ts__tile_f32_bits(f[l]) == ts__tile_f32_bits(ts_e4m3_to_f32(cl)));
            TS_CHECK(ts__tile_f32_bits(f2[l]) == ts__tile_f32_bits(ts__tile_e2m1_to_f32(cl)));
            TS_CHECK(ts__tile_f32_bits(fe[l]) == ts__tile_f32_bits(ts_ue8m0_to_f32(cl)));
        }
    }
    for (int c = 0; c < 65536; c += 8) {
        ts__tv_u16 h;
        for (int l = 0; l < 8; l++) h[l] = (uint16_t)(c + l);
        ts__tv_f32 f = ts__tv_bf16_to_f32(h);
        for (int l = 0; l < 8; l++) bad += ts__tile_f32_bits(f[l]) != ts__tile_f32_bits(ts_bf16_to_f32((uint16_t)(c + l)));
    }
    TS_CHECK(bad == 0);
}

/* 8- and 16-bit lane min / max and their lane folds against plain C */
TS_TEST(tile_simd_rt_narrow_min_max) {
    const int16_t v16[] = {0, 1, -1, 32767, -32768, 255, -256, 7, 0x1234, -0x4321, 2, 3, 4, 5, 6, 9};
    for (int i = 0; i < 16; i++) {
        ts__tv_i16 a = ts__tv_splat_i16(v16[i]), b;
        ts__tv_u16 ua = ts__tv_splat_u16((uint16_t)v16[i]), ub;
        ts__tv_i8 a8 = ts__tv_splat_i8((int8_t)v16[i]), b8;
        ts__tv_u8 ua8 = ts__tv_splat_u8((uint8_t)v16[i]), ub8;
        for (int l = 0; l < 8; l++) {
            b[l] = v16[(i + 3 * l + 1) % 16], ub[l] = (uint16_t)b[l];
            b8[l] = (int8_t)b[l], ub8[l] = (uint8_t)b[l];
        }
        ts__tv_i16 mx = ts__tv_max_i16(a, b), mn = ts__tv_min_i16(a, b);
        ts__tv_u16 umx = ts__tv_max_u16(ua, ub), umn = ts__tv_min_u16(ua, ub);
        ts__tv_i8 mx8 = ts__tv_max_i8(a8, b8), mn8 = ts__tv_min_i8(a8, b8);
        ts__tv_u8 umx8 = ts__tv_max_u8(ua8, ub8), umn8 = ts__tv_min_u8(ua8, ub8);
        int16_t hm = b[0];
        uint16_t uh = ub[0];
        for (int l = 0; l < 8; l++) {
            TS_CHECK(mx[l] == (v16[i] > b[l] ? v16[i] : b[l]) && mn[l] == (v16[i] < b[l] ? v16[i] : b[l]));
            TS_CHECK(umx[l] == (ua[l] > ub[l] ? ua[l] : ub[l]) && umn[l] == (ua[l] < ub[l] ? ua[l] : ub[l]));
            TS_CHECK(mx8[l] == (a8[l] > b8[l] ? a8[l] : b8[l]) && mn8[l] == (a8[l] < b8[l] ? a8[l] : b8[l]));
            TS_CHECK(umx8[l] == (ua8[l] > ub8[l] ? ua8[l] : ub8[l]) && umn8[l] == (ua8[l] < ub8[l] ? ua8[l] : ub8[l]));
            hm = b[l] > hm ? b[l] : hm;
            uh = ub[l] < uh ? ub[l] : uh;
        }
        TS_CHECK(ts__tv_hmax_i16(b) == hm && ts__tv_hmin_u16(ub) == uh);
    }
}

TS_TEST(tile_simd_rt_min_max_fma_round) {
    const float sp[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1.0f, -1.0f, 1e-40f, -FLT_MAX, 2.5f, -2.5f, 3.5f, 0.49999997f};
    const int n = (int)(sizeof sp / sizeof sp[0]);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j += 8) {
            ts__tv_f32 a = ts__tv_splat_f32(sp[i]), b;
            for (int l = 0; l < 8; l++) b[l] = sp[(j + l) % n];
            ts__tv_f32 mx = ts__tv_max_f32(a, b), mn = ts__tv_min_f32(a, b), ab = ts__tv_abs_f32(b);
            ts__tv_f32 fm = ts__tv_fma_f32(a, b, ts__tv_splat_f32(0.75f)), sq = ts__tv_sqrt_f32(b);
            ts__tv_f32 ex = ts__tv_exp_f32(b), sg = ts__tv_sigmoid_f32(b);
            for (int l = 0; l < 8; l++) {
                TS_CHECK(ts__tile_f32_bits(mx[l]) == ts__tile_f32_bits(ts__tile_maxf(sp[i], b[l])));
                TS_CHECK(ts__tile_f32_bits(mn[l]) == ts__tile_f32_bits(ts__tile_minf(sp[i], b[l])));
                TS_CHECK(ts__tile_f32_bits(ab[l]) == ts__tile_f32_bits(fabsf(b[l])));
                float f = fmaf(sp[i], b[l], 0.75f), s = sqrtf(b[l]);
                TS_CHECK(ts__tile_f32_bits(fm[l]) == ts__tile_f32_bits(f) || (f != f && fm[l] != fm[l]));
                TS_CHECK(ts__tile_f32_bits(sq[l]) == ts__tile_f32_bits(s) || (s != s && sq[l] != sq[l]));
                TS_CHECK(ts__tile_f32_bits(ex[l]) == ts__tile_f32_bits(ts__tile_expf(b[l])));
                TS_CHECK(ts__tile_f32_bits(sg[l]) == ts__tile_f32_bits(ts__tile_sigmoidf(b[l])));
            }
            if (sp[i] == sp[i] && sp[i] != 0.0f) { /* a constant operand: the one-instruction forms */
                ts__tv_f32 mk = ts__tv_maxk_f32(b, a), nk = ts__tv_mink_f32(b, a);
                for (int l = 0; l < 8; l++) {
                    TS_CHECK(ts__tile_f32_bits(mk[l]) == ts__tile_f32_bits(ts__tile_maxf(b[l], sp[i])));
                    TS_CHECK(ts__tile_f32_bits(nk[l]) == ts__tile_f32_bits(ts__tile_minf(b[l], sp[i])));
                }
            }
            for (int mode = 0; mode < 4; mode++) {
                ts__tv_f32 r = ts__tv_round_f32(b, mode);
                for (int l = 0; l < 8; l++) {
                    float w = mode == 1 ? floorf(b[l]) : mode == 2 ? ceilf(b[l]) : mode == 3 ? truncf(b[l]) : rintf(b[l]);
                    TS_CHECK(ts__tile_f32_bits(r[l]) == ts__tile_f32_bits(w) || (w != w && r[l] != r[l]));
                }
            }
        }
}

/* exp and sigmoid twins on every 1553rd f32 pattern (all signs and exponents) */
TS_TEST(tile_simd_rt_exp_sigmoid) {
    long bad = 0;
    for (uint64_t k = 0; k < (1ull << 32); k += 8 * 1553) {
        ts__tv_f32 v;
        for (int l = 0; l < 8; l++) v[l] = ts__tile_bits_f32((uint32_t)(k + 1553 * (uint64_t)l));
        ts__tv_f32 e = ts__tv_exp_f32(v), g = ts__tv_sigmoid_f32(v);
        for (int l = 0; l < 8; l++)
            bad += ts__tile_f32_bits(e[l]) != ts__tile_f32_bits(ts__tile_expf(v[l])) ||
                   ts__tile_f32_bits(g[l]) != ts__tile_f32_bits(ts__tile_sigmoidf(v[l]));
    }
    TS_CHECK_MSG(bad == 0, "%ld lanes differ", bad);
}

/* the hoisted bounds test: [lo, hi) is exactly the set of j in [0, 16) where b + j OP u holds
 * (and b + j does not overflow) */
TS_TEST(tile_simd_rt_vrange) {
    const int64_t bs[] = {-20, -3, 0, 5, 17, INT64_MAX - 4, INT64_MIN + 2};
    for (size_t bi = 0; bi < sizeof bs / sizeof bs[0]; bi++)
        for (int64_t u = -20; u <= 20; u++)
            for (int op = 0; op < 4; op++) {
                int64_t b = bs[bi], lo = 0, hi = 16;
                /* near the int64 ends: thresholds a few steps from b (b + j overflows there) */
                __int128 uw = bi >= 5 ? (__int128)b + u / 4 : u;
                int64_t uu = uw > INT64_MAX ? INT64_MAX : uw < INT64_MIN ? INT64_MIN : (int64_t)uw;
                ts__tile_vrange(&lo, &hi, b, op, uu);
                for (int64_t j = 0; j < 16; j++) {
                    __int128 g = (__int128)b + j;
                    bool fits = g <= INT64_MAX && g >= INT64_MIN;
                    bool c = op == 0 ? g >= uu : op == 1 ? g > uu : op == 2 ? g < uu : g <= uu;
                    TS_CHECK_MSG((j >= lo && j < hi) == (c && fits), "b %lld op %d u %lld j %lld: [%lld, %lld)",
                                 (long long)b, op, (long long)uu, (long long)j, (long long)lo, (long long)hi);
                }
            }
}

/* ---- compile and run ---- */


/* -O1 keeps the compiles quick; with the sanitizers -O0 halves their time again */
TS_TEST(tile_simd_matches_scalar_emission) {
    char *v = emit(k_simd_kernels, "v_", false), *s = emit(k_simd_kernels, "s_", true);
    TS_CHECK(v && s);
    char *w = tt_emit_lanes(k_simd_kernels, "simd.tile", "v_", false, 16);
    TS_CHECK(w != NULL);
    tt_simd_vs_scalar(ts_t_, v, s, k_simd_driver, w);
    free(w);
    free(v), free(s);
}
