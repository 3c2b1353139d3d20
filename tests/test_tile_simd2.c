/* The second set of SIMD lowerings (docs/tile-language.md §11a): per-lane shift amounts,
 * lane folds by a shuffle tree, tiles read transposed (a transposed copy), strided groups
 * x[K j + c] (8 x 8 block transposes), f16 / e5m6 conversions. As in test_tile_simd.c the
 * vectorised C must give exactly the bits of the scalar emission: the kernels below are
 * translated twice (SIMD v_, scalar s_), the SIMD file compiled generic and with
 * -mavx2 -mfma -mf16c, and every output compared byte for byte, on inputs with NaN, inf, -0,
 * subnormals, huge values, shift amounts past the lane width, odd sizes and vector tails.
 * The other tests run the new tile_rt.h helpers here (the generic vector code) against plain
 * scalar references, exhaustively where the domain allows. */
#include "test_tile_common.h"
#include "tile/tile_internal.h"
#include "tile/tile_rt.h"
#include "tilestack/numerics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char k_simd2_kernels[] =
    "// per-lane shift amounts: 32 / 64-bit lanes, signed and unsigned, amounts < 0 and >= width\n"
    "kernel vshift(a: tensor<i32, [T, H]>, c: tensor<i64, [T, H]>, s: tensor<i32, [T, H]>,\n"
    "              o32: tensor<i32, [T, H]>, ou: tensor<i32, [T, H]>, o64: tensor<i64, [T, H]>,\n"
    "              ou64: tensor<i64, [T, H]>, p8: tensor<u8, [T, H]>, p16: tensor<i16, [T, H]>,\n"
    "              s8: tensor<i8, [T, H]>) {\n"
    "    launch (T) as (t) {\n"
    "        for j in parallel(H) {\n"
    "            let k = s[t, j];\n"
    "            let b = bitcast<u32>(a[t, j]);\n"
    "            let d = bitcast<u64>(c[t, j]);\n"
    "            o32[t, j] = (a[t, j] >> k) + (a[t, j] << (k + 1));\n"
    "            ou[t, j] = bitcast<i32>((b >> cast<u32>(k)) ^ (b << cast<u32>(k * 3)));\n"
    "            o64[t, j] = (c[t, j] >> cast<i64>(k)) - (c[t, j] << cast<i64>(k + 40));\n"
    "            ou64[t, j] = bitcast<i64>((d >> cast<u64>(k)) | (d << cast<u64>(k * 5)));\n"
    "            // 32-bit lanes truncated to 8 / 16 bits, constant shifts of 8-bit lanes\n"
    "            p8[t, j] = (cast<u8>(a[t, j]) << 3) | (cast<u8>(b) >> 5) ^ (cast<u8>(k) << 7);\n"
    "            p16[t, j] = cast<i16>(a[t, j]) + cast<i16>(b >> 7);\n"
    "            s8[t, j] = (cast<i8>(a[t, j]) << 2) + (cast<i8>(b) << 0);\n"
    "        }\n"
    "    }\n"
    "}\n"
    "\n"
    "// tiles read transposed (x[j, i], j the vector variable): 20 x 12 tiles (no multiple of 8\n"
    "// in one dim), partial blocks at the edges of M x N\n"
    "kernel trans(x: tensor<bf16, [M, N]>, y: tensor<bf16, [N, M]>, f: tensor<f32, [M, N]>,\n"
    "             g: tensor<f32, [N, M]>, u: tensor<u8, [M, N]>, v: tensor<u8, [N, M]>) {\n"
    "    launch (ceildiv(M, 20), ceildiv(N, 12)) as (bm, bn) {\n"
    "        tile a: i16[20, 12];\n"
    "        tile b: f32[20, 12];\n"
    "        tile c: u8[20, 12];\n"
    "        for i, j in parallel(20, 12) {\n"
    "            let r = bm * 20 + i;\n"
    "            let q = bn * 12 + j;\n"
    "            if r < M && q < N {\n"
    "                a[i, j] = bitcast<i16>(x[r, q]);\n"
    "                b[i, j] = f[r, q];\n"
    "                c[i, j] = u[r, q];\n"
    "            }\n"
    "        }\n"
    "        for i, j in parallel(12, 20) {\n"
    "            let r = bn * 12 + i;\n"
    "            let q = bm * 20 + j;\n"
    "            if r < N && q < M {\n"
    "                y[r, q] = bitcast<bf16>(a[j, i]);\n"
    "                g[r, q] = b[j, i] * 2.0;\n"
    "                v[r, q] = c[j, i] + 1;\n"
    "            }\n"
    "        }\n"
    "    }\n"
    "}\n"
    "\n"
    "// strided groups: e5m6-style packing (u16 K = 8 loads, u8 K = 12 stores), unpacking (u8\n"
    "// K = 12 loads, u32 K = 8 stores), f32 K = 9 both ways; 13 groups (a vector and a tail of 5)\n"
    "kernel groups(x: tensor<i16, [T, 104]>, p: tensor<u8, [T, 156]>, b: tensor<u8, [T, 156]>,\n"
    "              q: tensor<i32, [T, 104]>, f: tensor<f32, [T, 117]>, g: tensor<f32, [T, 117]>,\n"
    "              h: tensor<u8, [T, 156]>) {\n"
    "    launch (T) as (t) {\n"
    "        tile cw: i16[1, 104];\n"
    "        tile pk: u8[1, 156];\n"
    "        tile xb: u8[1, 156];\n"
    "        tile w: u32[1, 104];\n"
    "        tile fa: f32[1, 117];\n"
    "        tile fb: f32[1, 117];\n"
    "        tile hb: u8[1, 156];\n"
    "        copy(x[t, 0], cw);\n"
    "        copy(b[t, 0], xb);\n"
    "        copy(f[t, 0], fa);\n"
    "        for i, o in parallel(1, 13) {\n"
    "            let h0 = bitcast<u32>(cast<i32>(cw[i, 8 * o])) & 0xfff;\n"
    "            let h1 = bitcast<u32>(cast<i32>(cw[i, 8 * o + 1])) & 0xfff;\n"
    "            let h2 = bitcast<u32>(cast<i32>(cw[i, 2 + 8 * o])) & 0xfff;\n"
    "            let h3 = bitcast<u32>(cast<i32>(cw[i, 8 * o + 3]));\n"
    "            let h4 = bitcast<u32>(cast<i32>(cw[i, 8 * o + 4])) & 0xfff;\n"
    "            let h5 = bitcast<u32>(cast<i32>(cw[i, 8 * o + 5])) & 0xfff;\n"
    "            let h6 = bitcast<u32>(cast<i32>(cw[i, 8 * o + 6])) & 0xfff;\n"
    "            let h7 = bitcast<u32>(cast<i32>(cw[i, o * 8 + 7])) & 0xfff;\n"
    "            let w0 = (h0 << 20) | (h1 << 8) | (h2 >> 4);\n"
    "            let w1 = (h2 << 28) | (h3 << 16) | (h4 << 4) | (h5 >> 8);\n"
    "            let w2 = (h5 << 24) | (h6 << 12) | h7;\n"
    "            pk[i, 12 * o] = cast<u8>(w0 & 255);\n"
    "            pk[i, 12 * o + 1] = cast<u8>((w0 >> 8) & 255);\n"
    "            pk[i, 12 * o + 2] = cast<u8>((w0 >> 16) & 255);\n"
    "            pk[i, 12 * o + 3] = cast<u8>(w0 >> 24);\n"
    "            pk[i, 12 * o + 4] = cast<u8>(w1);\n"
    "            pk[i, 12 * o + 5] = cast<u8>(cast<u16>(w1 >> 8));\n"
    "            pk[i, 12 * o + 6] = cast<u8>((w1 >> 16) & 255);\n"
    "            pk[i, 12 * o + 7] = cast<u8>(w1 >> 24);\n"
    "            pk[i, 12 * o + 11] = cast<u8>(w2 >> 24);\n"
    "            pk[i, 12 * o + 8] = cast<u8>(w2 & 255);\n"
    "            pk[i, 12 * o + 9] = cast<u8>((w2 >> 8) & 255);\n"
    "            pk[i, 12 * o + 10] = cast<u8>((w2 >> 16) & 255);\n"
    "        }\n"
    "        copy(pk, p[t, 0]);\n"
    "        for i, o in parallel(1, 13) {\n"
    "            let v0 = cast<u32>(xb[i, 12 * o]) | (cast<u32>(xb[i, 12 * o + 1]) << 8) |\n"
    "                     (cast<u32>(xb[i, 12 * o + 2]) << 16) | (cast<u32>(xb[i, 12 * o + 3]) << 24);\n"
    "            let v1 = cast<u32>(xb[i, 12 * o + 4]) | (cast<u32>(xb[i, 12 * o + 5]) << 8) |\n"
    "                     (cast<u32>(xb[i, 12 * o + 6]) << 16) | (cast<u32>(xb[i, 12 * o + 7]) << 24);\n"
    "            let v2 = cast<u32>(xb[i, 12 * o + 8]) | (cast<u32>(xb[i, 12 * o + 9]) << 8) |\n"
    "                     (cast<u32>(xb[i, 12 * o + 10]) << 16) | (cast<u32>(xb[i, 12 * o + 11] + xb[i, 12 * o]) << 24);\n"
    "            w[i, 8 * o] = v0 >> 20;\n"
    "            w[i, 8 * o + 1] = (v0 >> 8) & 0xfff;\n"
    "            w[i, 8 * o + 2] = ((v0 << 4) | (v1 >> 28)) & 0xfff;\n"
    "            w[i, 8 * o + 3] = (v1 >> 16) & 0xfff;\n"
    "            w[i, 8 * o + 4] = (v1 >> 4) & 0xfff;\n"
    "            w[i, 8 * o + 5] = ((v1 << 8) | (v2 >> 24)) & 0xfff;\n"
    "            w[i, 8 * o + 6] = v2;\n"
    "            w[i, 8 * o + 7] = v2 & 0xfff;\n"
    "        }\n"
    "        for i, j in parallel(1, 104) {\n"
    "            q[t, j] = bitcast<i32>(w[i, j]);\n"
    "        }\n"
    "        for i, o in parallel(1, 13) {\n"
    "            fb[i, 9 * o] = fa[i, 9 * o + 8] * 0.5;\n"
    "            fb[i, 9 * o + 1] = fa[i, 9 * o + 7];\n"
    "            fb[i, 9 * o + 2] = fa[i, 9 * o + 6] + 1.0;\n"
    "            fb[i, 9 * o + 3] = fa[i, 9 * o + 5];\n"
    "            fb[i, 9 * o + 4] = fa[i, 9 * o + 4];\n"
    "            fb[i, 9 * o + 5] = fa[i, 9 * o + 3];\n"
    "            fb[i, 9 * o + 6] = fa[i, 9 * o + 2];\n"
    "            fb[i, 9 * o + 7] = fa[i, 9 * o + 1];\n"
    "            fb[i, 9 * o + 8] = abs(fa[i, 9 * o]);\n"
    "        }\n"
    "        copy(fb, g[t, 0]);\n"
    "        // not every offset read: no group, the loop stays scalar (and correct)\n"
    "        for i, o in parallel(1, 13) {\n"
    "            hb[i, 12 * o] = xb[i, 12 * o + 5];\n"
    "            hb[i, 12 * o + 1] = xb[i, 12 * o + 3];\n"
    "        }\n"
    "        for i, j in parallel(1, 156) {\n"
    "            h[t, j] = select(j % 12 < 2, hb[i, j], cast<u8>(0));\n"
    "        }\n"
    "    }\n"
    "}\n"
    "\n"
    "// integer folds ending in a shuffle tree: fold loops and folds fused into the copy before\n"
    "kernel folds(x: tensor<i32, [T, 37]>, u: tensor<i32, [T, 16]>, r: tensor<i32, [T, 12]>) {\n"
    "    launch (T) as (t) {\n"
    "        tile a: i32[1, 37];\n"
    "        tile s: i32[1];\n"
    "        tile b: u32[1, 16];\n"
    "        tile su: u32[1];\n"
    "        copy(x[t, 0], a);\n"
    "        reduce<max>(a, s, axis=1);\n"
    "        r[t, 0] = s[0];\n"
    "        reduce<min>(a, s, axis=1);\n"
    "        r[t, 1] = s[0];\n"
    "        reduce<sum>(a, s, axis=1);\n"
    "        r[t, 2] = s[0];\n"
    "        reduce<and>(a, s, axis=1);\n"
    "        r[t, 3] = s[0];\n"
    "        reduce<or>(a, s, axis=1);\n"
    "        r[t, 4] = s[0];\n"
    "        reduce<xor>(a, s, axis=1, accumulate=true);\n"
    "        r[t, 5] = s[0];\n"
    "        for i, j in parallel(1, 16) {\n"
    "            b[i, j] = bitcast<u32>(u[t, j]);\n"
    "        }\n"
    "        reduce<max>(b, su, axis=1);\n"
    "        r[t, 6] = bitcast<i32>(su[0]);\n"
    "        reduce<min>(b, su, axis=1);\n"
    "        r[t, 7] = bitcast<i32>(su[0]);\n"
    "        reduce<sum>(b, su, axis=1);\n"
    "        r[t, 8] = bitcast<i32>(su[0]);\n"
    "        reduce<and>(b, su, axis=1);\n"
    "        r[t, 9] = bitcast<i32>(su[0]);\n"
    "        reduce<or>(b, su, axis=1);\n"
    "        r[t, 10] = bitcast<i32>(su[0]);\n"
    "        reduce<xor>(b, su, axis=1);\n"
    "        r[t, 11] = bitcast<i32>(su[0]);\n"
    "    }\n"
    "}\n"
    "\n"
    "// gathers at non-affine indices: scale tables at (8 j + off) / bw (one division per 8 lanes\n"
    "// when bw > 56, off >= 0; lane by lane otherwise), packed ue8m0 words\n"
    "kernel gath(x_sf: tensor<f32, [R, NS]>, w: tensor<ue8m0x4, [R, NW]>, o: tensor<f32, [T, H]>,\n"
    "            ow: tensor<f32, [T, H]>, bh: i64, bw: i64, off: i64) {\n"
    "    launch (T) as (t) {\n"
    "        for j in parallel(H) {\n"
    "            let q = (j * 8 + off) / bw;\n"
    "            o[t, j] = x_sf[t / bh, clamp(q, 0, NS - 1)] * 2.0 + select(q >= 0 && q < NS, x_sf[0, q], 0.5);\n"
    "            let blk = clamp((8 * j) / bw, 0, NW * 4 - 1);\n"
    "            let ww = bitcast<u32>(w[t / bh, blk / 4]);\n"
    "            ow[t, j] = bitcast<f32>(((ww >> cast<u32>(8 * (blk % 4))) & 255) << 23);\n"
    "        }\n"
    "    }\n"
    "}\n"
    "\n"
    "// dequantisation: e4m3 codes times a row scale (F16C decode), the NaN made canonical before\n"
    "// a bf16 store (ts__tv_f32_to_bf16_nank_w, 8- and 32-lane stores), f16 stores (vcvtps2ph);\n"
    "// FP4-style pairs: bytes widened to i32, two table lookups, the two stride-2 stores inside\n"
    "// a macro's block and a bounds test (one interleaved store); NaN from inf and NaN scales\n"
    "macro dq_pair(m, sc) {\n"
    "    let c_ = cast<i32>(b[t, m]);\n"
    "    let lo_ = lut[c_ & 15] * sc;\n"
    "    let hi_ = lut[c_ >> 4] * sc;\n"
    "    o2[t, 2 * m] = select(isnan(lo_), bitcast<f32>(cast<u32>(0x7fffffff)), lo_);\n"
    "    o2[t, 2 * m + 1] = select(isnan(hi_), bitcast<f32>(cast<u32>(0x7fffffff)), hi_);\n"
    "}\n"
    "kernel deq(x: tensor<e4m3, [T, H]>, b: tensor<u8, [T, HB]>, sf: tensor<f32, [T, 2]>,\n"
    "           o: tensor<bf16, [T, H]>, of: tensor<f16, [T, H]>, o2: tensor<bf16, [T, H2]>,\n"
    "           w: tensor<i32, [T, HB]>) {\n"
    "    launch (T) as (t) {\n"
    "        tile lut: f32[16];\n"
    "        for k in parallel(16) {\n"
    "            lut[k] = cast<f32>(k) * 0.75 - 3.0;\n"
    "        }\n"
    "        let s = sf[t, 0];\n"
    "        for j in parallel(H) {\n"
    "            let v = x[t, j] * s;\n"
    "            o[t, j] = select(isnan(v), bitcast<f32>(cast<u32>(0x7fffffff)), v);\n"
    "            of[t, j] = x[t, j] * sf[t, 1];\n"
    "        }\n"
    "        for m in parallel(HB) {\n"
    "            w[t, m] = cast<i32>(b[t, m]) + 1;\n"
    "            if m < HB - 5 {\n"
    "                dq_pair(m, sf[t, 1]);\n"
    "            }\n"
    "        }\n"
    "    }\n"
    "}\n"
    "\n"
    "// f16 loads, e5m6 stores and loads\n"
    "kernel convs(h: tensor<f16, [T, H]>, x: tensor<f32, [T, H]>, e: tensor<i16, [T, H]>,\n"
    "             of: tensor<f32, [T, H]>, oe: tensor<i16, [T, H]>, og: tensor<f32, [T, H]>) {\n"
    "    launch (T) as (t) {\n"
    "        for j in parallel(H) {\n"
    "            of[t, j] = cast<f32>(h[t, j]);\n"
    "            oe[t, j] = bitcast<i16>(cast<e5m6>(x[t, j]));\n"
    "            og[t, j] = cast<f32>(bitcast<e5m6>(e[t, j]));\n"
    "        }\n"
    "    }\n"
    "}\n";

static const char k_simd2_driver[] =
    "/* Driver: each kernel as SIMD emission (v_) and scalar emission (s_) on the same inputs,\n"
    " * outputs compared byte for byte. Exit status: mismatches. */\n"
    "#include \"tilestack/core.h\"\n"
    "#include <stdint.h>\n"
    "#include <stdio.h>\n"
    "#include <stdlib.h>\n"
    "#include <string.h>\n"
    "typedef const ts_tensor *T_;\n"
    "#define DECL(p)                                                                   \\\n"
    "    ts_status p##vshift(T_, T_, T_, T_, T_, T_, T_, T_, T_, T_);                  \\\n"
    "    ts_status p##trans(T_, T_, T_, T_, T_, T_);                                   \\\n"
    "    ts_status p##groups(T_, T_, T_, T_, T_, T_, T_);                              \\\n"
    "    ts_status p##folds(T_, T_, T_);                                               \\\n"
    "    ts_status p##convs(T_, T_, T_, T_, T_, T_);                                   \\\n"
    "    ts_status p##gath(T_, T_, T_, T_, int64_t, int64_t, int64_t);               \\\n"
    "    ts_status p##deq(T_, T_, T_, T_, T_, T_, T_);\n"
    "DECL(v_)\n"
    "DECL(s_)\n"
    "static int bad;\n"
    "static uint64_t rs = 0x9E3779B97F4A7C15ull;\n"
    "static uint32_t rnd(void) {\n"
    "    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;\n"
    "    return (uint32_t)(rs >> 16);\n"
    "}\n"
    "static void fill(void *p, size_t n) {\n"
    "    unsigned char *b = p;\n"
    "    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)rnd();\n"
    "}\n"
    "/* f32 bits with every special case: NaN (both signs, payloads), inf, -0, subnormals, the\n"
    " * f16 / e5m6 range edges (65504, 65520, 65536), f16 subnormal range, rounding ties */\n"
    "static uint32_t rbits(void) {\n"
    "    uint32_t r = rnd(), s = rnd() & 0x80000000u;\n"
    "    static const uint32_t k[] = {0x7F800000u, 0x7FC00000u, 0x7F800001u, 0x7FFFFFFFu, 0, 0x00000001u,\n"
    "                                 0x007FFFFFu, 0x477FE000u, 0x477FF000u, 0x47800000u, 0x477FFFFFu,\n"
    "                                 0x33800000u, 0x33000000u, 0x387FC000u, 0x38800000u, 0x3F808000u,\n"
    "                                 0x3F818000u, 0x3F810000u, 0x3F80FFFFu, 0x34000000u, 0x32FFFFFFu};\n"
    "    switch (r % 4) {\n"
    "    case 0: return s | k[rnd() % (sizeof k / sizeof k[0])];\n"
    "    case 1: return s | ((90u + rnd() % 70u) << 23) | (rnd() & 0x7FFFFFu); /* around the f16 range */\n"
    "    default: return rnd() ^ (rnd() << 16);\n"
    "    }\n"
    "}\n"
    "static void same(const void *a, const void *b, size_t n, const char *what) {\n"
    "    if (memcmp(a, b, n)) {\n"
    "        bad++;\n"
    "        const unsigned char *x = a, *y = b;\n"
    "        size_t i = 0;\n"
    "        while (x[i] == y[i]) i++;\n"
    "        printf(\"FAIL %s: SIMD and scalar emission differ at byte %zu (%02x vs %02x)\\n\", what, i, x[i], y[i]);\n"
    "    }\n"
    "}\n"
    "#define EXPECT(c) do { if (!(c)) { bad++; printf(\"FAIL line %d: %s\\n\", __LINE__, #c); } } while (0)\n"
    "\n"
    "static void test_vshift(void) {\n"
    "    enum { T = 3, H = 61 };\n"
    "    static int32_t a[T * H], s[T * H], o32[2][T * H], ou[2][T * H];\n"
    "    static int64_t c[T * H], o64[2][T * H], ou64[2][T * H];\n"
    "    static uint8_t p8[2][T * H];\n"
    "    static int16_t p16[2][T * H];\n"
    "    static int8_t s8[2][T * H];\n"
    "    fill(a, sizeof a), fill(c, sizeof c);\n"
    "    for (int i = 0; i < T * H; i++) s[i] = (int32_t)(rnd() % 141) - 70;\n"
    "    ts_tensor ta = ts_tensor_2d(a, TS_I32, T, H), tc = ts_tensor_2d(c, TS_I64, T, H), tsh = ts_tensor_2d(s, TS_I32, T, H);\n"
    "    for (int v = 0; v < 2; v++) {\n"
    "        ts_tensor t1 = ts_tensor_2d(o32[v], TS_I32, T, H), t2 = ts_tensor_2d(ou[v], TS_I32, T, H);\n"
    "        ts_tensor t3 = ts_tensor_2d(o64[v], TS_I64, T, H), t4 = ts_tensor_2d(ou64[v], TS_I64, T, H);\n"
    "        ts_tensor t5 = ts_tensor_2d(p8[v], TS_U8, T, H), t6 = ts_tensor_2d(p16[v], TS_I16, T, H);\n"
    "        ts_tensor t7 = ts_tensor_2d(s8[v], TS_I8, T, H);\n"
    "        EXPECT((v ? s_vshift : v_vshift)(&ta, &tc, &tsh, &t1, &t2, &t3, &t4, &t5, &t6, &t7) == TS_OK);\n"
    "    }\n"
    "    same(o32[0], o32[1], sizeof o32[0], \"vshift i32\");\n"
    "    same(ou[0], ou[1], sizeof ou[0], \"vshift u32\");\n"
    "    same(o64[0], o64[1], sizeof o64[0], \"vshift i64\");\n"
    "    same(ou64[0], ou64[1], sizeof ou64[0], \"vshift u64\");\n"
    "    same(p8[0], p8[1], sizeof p8[0], \"lo8 and u8 shifts\");\n"
    "    same(p16[0], p16[1], sizeof p16[0], \"lo16\");\n"
    "    same(s8[0], s8[1], sizeof s8[0], \"i8 shifts\");\n"
    "}\n"
    "\n"
    "static void test_trans(void) {\n"
    "    static const int shapes[][2] = {{45, 29}, {40, 24}, {7, 5}, {1, 33}};\n"
    "    for (int si = 0; si < 4; si++) {\n"
    "        const int M = shapes[si][0], N = shapes[si][1];\n"
    "        uint16_t *x = malloc(M * N * 2), *y[2];\n"
    "        uint32_t *f = malloc(M * N * 4), *g[2];\n"
    "        uint8_t *u = malloc(M * N), *w[2];\n"
    "        fill(x, M * N * 2), fill(u, M * N);\n"
    "        for (int i = 0; i < M * N; i++) f[i] = rbits();\n"
    "        ts_tensor tx = ts_tensor_2d(x, TS_BF16, M, N), tf = ts_tensor_2d(f, TS_F32, M, N), tu = ts_tensor_2d(u, TS_U8, M, N);\n"
    "        for (int v = 0; v < 2; v++) {\n"
    "            y[v] = malloc(M * N * 2), g[v] = malloc(M * N * 4), w[v] = malloc(M * N);\n"
    "            memset(y[v], 0x5A, M * N * 2), memset(g[v], 0x5A, M * N * 4), memset(w[v], 0x5A, M * N);\n"
    "            ts_tensor ty = ts_tensor_2d(y[v], TS_BF16, N, M), tg = ts_tensor_2d(g[v], TS_F32, N, M);\n"
    "            ts_tensor tw = ts_tensor_2d(w[v], TS_U8, N, M);\n"
    "            EXPECT((v ? s_trans : v_trans)(&tx, &ty, &tf, &tg, &tu, &tw) == TS_OK);\n"
    "        }\n"
    "        same(y[0], y[1], M * N * 2, \"trans bf16\");\n"
    "        same(g[0], g[1], M * N * 4, \"trans f32\");\n"
    "        same(w[0], w[1], M * N, \"trans u8\");\n"
    "        for (int r = 0; r < M; r++) /* and it is the transpose */\n"
    "            for (int c = 0; c < N; c++) EXPECT(y[0][c * M + r] == x[r * N + c] && w[0][c * M + r] == (uint8_t)(u[r * N + c] + 1));\n"
    "        free(x), free(f), free(u);\n"
    "        for (int v = 0; v < 2; v++) free(y[v]), free(g[v]), free(w[v]);\n"
    "    }\n"
    "}\n"
    "\n"
    "static void test_groups(void) {\n"
    "    enum { T = 4 };\n"
    "    static int16_t x[T * 104];\n"
    "    static uint8_t b[T * 156], p[2][T * 156], h[2][T * 156];\n"
    "    static int32_t q[2][T * 104];\n"
    "    static uint32_t f[T * 117], g[2][T * 117];\n"
    "    fill(x, sizeof x), fill(b, sizeof b);\n"
    "    for (int i = 0; i < T * 117; i++) f[i] = rbits();\n"
    "    ts_tensor tx = ts_tensor_2d(x, TS_I16, T, 104), tb = ts_tensor_2d(b, TS_U8, T, 156), tf = ts_tensor_2d(f, TS_F32, T, 117);\n"
    "    for (int v = 0; v < 2; v++) {\n"
    "        ts_tensor tp = ts_tensor_2d(p[v], TS_U8, T, 156), tq = ts_tensor_2d(q[v], TS_I32, T, 104);\n"
    "        ts_tensor tg = ts_tensor_2d(g[v], TS_F32, T, 117), th = ts_tensor_2d(h[v], TS_U8, T, 156);\n"
    "        EXPECT((v ? s_groups : v_groups)(&tx, &tp, &tb, &tq, &tf, &tg, &th) == TS_OK);\n"
    "    }\n"
    "    same(p[0], p[1], sizeof p[0], \"groups pack u16 -> u8\");\n"
    "    same(q[0], q[1], sizeof q[0], \"groups unpack u8 -> u32\");\n"
    "    same(g[0], g[1], sizeof g[0], \"groups f32 K = 9\");\n"
    "    same(h[0], h[1], sizeof h[0], \"groups partial cover\");\n"
    "    for (int t = 0; t < T; t++) /* the packing is the 12-bit big-endian-in-word layout */\n"
    "        for (int o = 0; o < 13; o++) {\n"
    "            uint32_t w0 = (uint32_t)p[0][t * 156 + 12 * o] | (uint32_t)p[0][t * 156 + 12 * o + 1] << 8 |\n"
    "                          (uint32_t)p[0][t * 156 + 12 * o + 2] << 16 | (uint32_t)p[0][t * 156 + 12 * o + 3] << 24;\n"
    "            EXPECT(w0 >> 20 == ((uint32_t)(uint16_t)x[t * 104 + 8 * o] & 0xFFFu));\n"
    "        }\n"
    "}\n"
    "\n"
    "static void test_folds(void) {\n"
    "    enum { T = 9 };\n"
    "    static int32_t x[T * 37], u[T * 16], r[2][T * 12];\n"
    "    fill(x, sizeof x), fill(u, sizeof u);\n"
    "    for (int i = 0; i < 37; i++) x[2 * 37 + i] = (int32_t)(rnd() % 5) - 2; /* ties, small sums */\n"
    "    ts_tensor tx = ts_tensor_2d(x, TS_I32, T, 37), tu = ts_tensor_2d(u, TS_I32, T, 16);\n"
    "    for (int v = 0; v < 2; v++) {\n"
    "        memset(r[v], 0, sizeof r[v]);\n"
    "        ts_tensor tr = ts_tensor_2d(r[v], TS_I32, T, 12);\n"
    "        EXPECT((v ? s_folds : v_folds)(&tx, &tu, &tr) == TS_OK);\n"
    "    }\n"
    "    same(r[0], r[1], sizeof r[0], \"folds\");\n"
    "    for (int t = 0; t < T; t++) {\n"
    "        int32_t mx = x[t * 37];\n"
    "        uint32_t sm = 0;\n"
    "        for (int i = 0; i < 37; i++) mx = x[t * 37 + i] > mx ? x[t * 37 + i] : mx, sm += (uint32_t)x[t * 37 + i];\n"
    "        EXPECT(r[0][t * 12] == mx && (uint32_t)r[0][t * 12 + 2] == sm);\n"
    "    }\n"
    "}\n"
    "\n"
    "static void test_convs(void) {\n"
    "    enum { T = 65, H = 1021 }; /* every f16 code, each e5m6 code many times, odd H */\n"
    "    static uint16_t hh[T * H], e[T * H], oe[2][T * H];\n"
    "    static uint32_t x[T * H], of[2][T * H], og[2][T * H];\n"
    "    for (int i = 0; i < T * H; i++) hh[i] = (uint16_t)i, e[i] = (uint16_t)(i * 7 + (i >> 12)), x[i] = rbits();\n"
    "    ts_tensor th = ts_tensor_2d(hh, TS_F16, T, H), tx = ts_tensor_2d(x, TS_F32, T, H), te = ts_tensor_2d(e, TS_I16, T, H);\n"
    "    for (int v = 0; v < 2; v++) {\n"
    "        ts_tensor t1 = ts_tensor_2d(of[v], TS_F32, T, H), t2 = ts_tensor_2d(oe[v], TS_I16, T, H);\n"
    "        ts_tensor t3 = ts_tensor_2d(og[v], TS_F32, T, H);\n"
    "        EXPECT((v ? s_convs : v_convs)(&th, &tx, &te, &t1, &t2, &t3) == TS_OK);\n"
    "    }\n"
    "    same(of[0], of[1], sizeof of[0], \"f16 -> f32\");\n"
    "    same(oe[0], oe[1], sizeof oe[0], \"f32 -> e5m6\");\n"
    "    same(og[0], og[1], sizeof og[0], \"e5m6 -> f32\");\n"
    "}\n"
    "\n"
    "static void test_gath(void) {\n"
    "    enum { T = 7, H = 203, NS = 40, NW = 3 };\n"
    "    static const int64_t cfg[][3] = {{1, 64, 0}, {2, 8, 3}, {1, 200, -17}, {3, 57, 0}, {1, 56, 9},\n"
    "                                     {1, 0, 0}, {1, -9, 5}, {2, 4096, 4000}};\n"
    "    static uint32_t xs[T * NS], o[2][T * H], ow[2][T * H];\n"
    "    static int32_t w[T * NW];\n"
    "    for (int i = 0; i < T * NS; i++) xs[i] = rbits();\n"
    "    fill(w, sizeof w);\n"
    "    for (int c = 0; c < 8; c++) {\n"
    "        const int64_t bh = cfg[c][0], R = (T + bh - 1) / bh;\n"
    "        ts_tensor tx = ts_tensor_2d(xs, TS_F32, R, NS), tw = ts_tensor_2d(w, TS_UE8M0X4, R, NW);\n"
    "        for (int v = 0; v < 2; v++) {\n"
    "            ts_tensor to = ts_tensor_2d(o[v], TS_F32, T, H), tow = ts_tensor_2d(ow[v], TS_F32, T, H);\n"
    "            EXPECT((v ? s_gath : v_gath)(&tx, &tw, &to, &tow, bh, cfg[c][1], cfg[c][2]) == TS_OK);\n"
    "        }\n"
    "        same(o[0], o[1], sizeof o[0], \"gather f32\");\n"
    "        same(ow[0], ow[1], sizeof ow[0], \"gather ue8m0\");\n"
    "    }\n"
    "}\n"
    "\n"
    "static void test_deq(void) {\n"
    "    enum { T = 11, H = 301, HB = 77 }; /* every e4m3 code many times, vector tails */\n"
    "    static uint8_t x[T * H], b[T * HB];\n"
    "    static uint32_t sf[T * 2];\n"
    "    static uint16_t o[2][T * H], of[2][T * H], o2[2][T * HB * 2];\n"
    "    static int32_t w[2][T * HB];\n"
    "    static const uint32_t sk[] = {0x3F800000u, 0x7F800000u, 0x7FC00001u, 0xFF800000u, 0, 0x00000003u,\n"
    "                                  0x7E000000u, 0x3B800000u, 0xC1200000u, 0x3DCCCCCDu, 0x80000000u};\n"
    "    fill(x, sizeof x), fill(b, sizeof b);\n"
    "    /* column 1 (the f16 and pair products) without NaN: which of two NaN operands a product\n"
    "     * returns is the compiler's choice (docs/tile-language.md 11a) */\n"
    "    for (int i = 0; i < T * 2; i++) sf[i] = i % 2 ? sk[(i / 2) % 11 == 2 ? 1 : (i / 2) % 11] : sk[(i / 2 + 3) % 11] ^ (rnd() & 0x7FFu);\n"
    "    ts_tensor tx = ts_tensor_2d(x, TS_E4M3, T, H), tb = ts_tensor_2d(b, TS_U8, T, HB), ts = ts_tensor_2d(sf, TS_F32, T, 2);\n"
    "    for (int v = 0; v < 2; v++) {\n"
    "        memset(o[v], 0x5A, sizeof o[v]), memset(of[v], 0x5A, sizeof of[v]), memset(o2[v], 0x5A, sizeof o2[v]);\n"
    "        ts_tensor t1 = ts_tensor_2d(o[v], TS_BF16, T, H), t2 = ts_tensor_2d(of[v], TS_F16, T, H);\n"
    "        ts_tensor t3 = ts_tensor_2d(o2[v], TS_BF16, T, HB * 2), t4 = ts_tensor_2d(w[v], TS_I32, T, HB);\n"
    "        EXPECT((v ? s_deq : v_deq)(&tx, &tb, &ts, &t1, &t2, &t3, &t4) == TS_OK);\n"
    "    }\n"
    "    same(o[0], o[1], sizeof o[0], \"deq e4m3 * s -> bf16, NaN canonical\");\n"
    "    same(of[0], of[1], sizeof of[0], \"deq e4m3 * s -> f16\");\n"
    "    same(o2[0], o2[1], sizeof o2[0], \"deq table pairs -> bf16\");\n"
    "    same(w[0], w[1], sizeof w[0], \"deq u8 -> i32\");\n"
    "    for (int t = 0; t < T; t++) /* the canonical NaN's bf16, and the untouched tail */\n"
    "        for (int j = 0; j < H; j++) {\n"
    "            EXPECT((x[t * H + j] & 0x7F) != 0x7F || o[0][t * H + j] == 0x7FC0);\n"
    "            if (j >= 2 * (HB - 5) && j < 2 * HB) EXPECT(o2[0][t * HB * 2 + j] == 0x5A5A);\n"
    "        }\n"
    "}\n"
    "\n"
    "int main(void) {\n"
    "    test_vshift();\n"
    "    test_deq();\n"
    "    test_trans();\n"
    "    test_groups();\n"
    "    test_folds();\n"
    "    test_convs();\n"
    "    test_gath();\n"
    "    printf(\"%d mismatches\\n\", bad);\n"
    "    return bad != 0;\n"
    "}\n";

static char *emit2(const char *src, const char *prefix, bool scalar) { return tt_emit(src, "simd2.tile", prefix, scalar); }

TS_TEST(tile_simd2_what_is_vectorised) {
    char *v = emit2(k_simd2_kernels, "v_", false), *s = emit2(k_simd2_kernels, "s_", true);
    TS_CHECK(v && s);
    if (v && s) {
        TS_CHECK(!strstr(s, "ts__tv_"));
        const char *want[] = {
            "ts__tv_shrv_i32(", "ts__tv_shlv_u32(", "ts__tv_shrv_u32(", "ts__tv_shrv_i64(", "ts__tv_shlv_u64(",
            "ts__tv_shrv_u64(", "ts__tv_transpose_16(", "ts__tv_transpose_32(", "ts__tv_transpose_8(",
            "ts__tv_ldg_i16(", "ts__tv_stg_u8w(", "ts__tv_ldg_u8w(", "ts__tv_stg_u32(", "ts__tv_ldg_f32(",
            "ts__tv_stg_f32(", "ts__tv_hmax_i32(", "ts__tv_hmin_i32(", "ts__tv_hadd_u32(", "ts__tv_hand_u32(",
            "ts__tv_hor_u32(", "ts__tv_hxor_u32(", "ts__tv_hmax_u32(", "ts__tv_hmin_u32(", "ts__tv_f16_to_f32(",
            "ts__tv_f32_to_e5m6(", "ts__tv_e5m6_to_f32(", "ts__tv_divaff_i64(", "const ts__tv_i64 gx1_", "ts__tv_lo8_u32(", "ts__tv_lo16_u32(",
            "ts__tv_shlk_u8(", "ts__tv_shrk_u8(", "ts__tv_f32_to_bf16_nank_w(", "ts__tv_st_u16wx32(",
            "ts__tv_st2x_u16w(", "ts__tv_widen_u8(", "ts__tv_e4m3_to_f32(", "ts__tv_st_f16x32(",
        };
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
            TS_CHECK_MSG(strstr(v, want[i]) != NULL, "missing in the SIMD emission: %s", want[i]);
    }
    free(v), free(s);
}

/* ---- the helpers, generic vector code, against scalar references ---- */

static uint64_t t2_rs = 0x243F6A8885A308D3ull;
static uint32_t t2_rnd(void) {
    t2_rs ^= t2_rs << 13, t2_rs ^= t2_rs >> 7, t2_rs ^= t2_rs << 17;
    return (uint32_t)(t2_rs >> 16);
}

TS_TEST(tile_simd2_rt_folds_shifts) {
    long bad = 0;
    for (int it = 0; it < 2000; it++) {
        ts__tv_u32 u;
        ts__tv_i32 s;
        for (int l = 0; l < 8; l++) {
            u[l] = it % 3 ? t2_rnd() : t2_rnd() % 4;
            s[l] = (int32_t)t2_rnd();
        }
        uint32_t mx = u[0], mn = u[0], sm = 0, an = ~0u, o = 0, x = 0;
        int32_t smx = s[0], smn = s[0];
        for (int l = 0; l < 8; l++) {
            mx = u[l] > mx ? u[l] : mx, mn = u[l] < mn ? u[l] : mn, sm += u[l], an &= u[l], o |= u[l], x ^= u[l];
            smx = s[l] > smx ? s[l] : smx, smn = s[l] < smn ? s[l] : smn;
        }
        bad += ts__tv_hmax_u32(u) != mx || ts__tv_hmin_u32(u) != mn || ts__tv_hadd_u32(u) != sm ||
               ts__tv_hand_u32(u) != an || ts__tv_hor_u32(u) != o || ts__tv_hxor_u32(u) != x ||
               ts__tv_hmax_i32(s) != smx || ts__tv_hmin_i32(s) != smn;
        /* shifts by any amount: the scalar helpers' (amount modulo the width) */
        ts__tv_u32 k;
        ts__tv_u64 u64, k64;
        ts__tv_i64 s64;
        for (int l = 0; l < 8; l++) {
            k[l] = t2_rnd() % 3 ? t2_rnd() % 40 : t2_rnd();
            u64[l] = (uint64_t)t2_rnd() << 32 | t2_rnd(), s64[l] = (int64_t)u64[l];
            k64[l] = t2_rnd() % 3 ? t2_rnd() % 80 : (uint64_t)t2_rnd() << 20;
        }
        ts__tv_u8 lo8 = ts__tv_lo8_u32(u), sl = ts__tv_shlk_u8(lo8, it % 8), sr = ts__tv_shrk_u8(lo8, it % 8);
        ts__tv_u16 lo16 = ts__tv_lo16_u32(u);
        for (int l = 0; l < 8; l++)
            bad += lo8[l] != (uint8_t)u[l] || lo16[l] != (uint16_t)u[l] || sl[l] != (uint8_t)(lo8[l] << (it % 8)) ||
                   sr[l] != (uint8_t)(lo8[l] >> (it % 8));
        ts__tv_u32 a = ts__tv_shlv_u32(u, k), b = ts__tv_shrv_u32(u, k);
        ts__tv_i32 c = ts__tv_shrv_i32(s, (ts__tv_i32)k);
        ts__tv_u64 d = ts__tv_shlv_u64(u64, k64), f = ts__tv_shrv_u64(u64, k64);
        ts__tv_i64 g = ts__tv_shrv_i64(s64, (ts__tv_i64)k64);
        /* (a0 + s l) / d: the one-division path and its edges, and the lane-by-lane one */
        static const int64_t a0s[] = {0, 1, 55, 4095, INT64_MAX - 56, INT64_MAX - 55, -1, INT64_MIN};
        static const int64_t ds[] = {57, 56, 1, 4096, 0, -1, -57, INT64_MAX};
        const int64_t a0 = it % 2 ? a0s[it % 8] : (int64_t)(t2_rnd() % 100000);
        const int64_t dv = it % 3 ? ds[(it / 8) % 8] : 1 + t2_rnd() % 300;
        const int64_t st = it % 5 == 0 ? 16 : 8;
        ts__tv_i64 q = ts__tv_divaff_i64(a0, st, dv);
        for (int l = 0; l < 8; l++)
            bad += q[l] != ts__tile_div_i64((int64_t)((uint64_t)a0 + (uint64_t)st * (uint64_t)l), dv);
        for (int l = 0; l < 8; l++)
            bad += a[l] != ts__tile_shl_u32(u[l], k[l]) || b[l] != ts__tile_shr_u32(u[l], k[l]) ||
                   c[l] != ts__tile_shr_i32(s[l], (int32_t)k[l]) || d[l] != ts__tile_shl_u64(u64[l], k64[l]) ||
                   f[l] != ts__tile_shr_u64(u64[l], k64[l]) || g[l] != ts__tile_shr_i64(s64[l], (int64_t)k64[l]);
    }
    TS_CHECK_MSG(bad == 0, "%ld folds or shifts differ", bad);
}

TS_TEST(tile_simd2_rt_transpose_groups) {
    static uint32_t src[40 * 40], dst[40 * 40];
    long bad = 0;
    for (int i = 0; i < 40 * 40; i++) src[i] = t2_rnd();
    for (int R = 1; R <= 33; R += 4)
        for (int C = 1; C <= 35; C += 2) {
            memset(dst, 0, sizeof dst);
            ts__tv_transpose_32(dst, src, R, C);
            for (int r = 0; r < R; r++)
                for (int c = 0; c < C; c++) bad += dst[c * R + r] != src[r * C + c];
            ts__tv_transpose_16((uint16_t *)dst, (const uint16_t *)src, R, C);
            for (int r = 0; r < R; r++)
                for (int c = 0; c < C; c++) bad += ((uint16_t *)dst)[c * R + r] != ((const uint16_t *)src)[r * C + c];
            ts__tv_transpose_8((uint8_t *)dst, (const uint8_t *)src, R, C);
            for (int r = 0; r < R; r++)
                for (int c = 0; c < C; c++) bad += ((uint8_t *)dst)[c * R + r] != ((const uint8_t *)src)[r * C + c];
        }
    /* groups: K = 8..20, 8 groups; only p[0, 8 K) is touched */
    for (int K = 8; K <= 20; K++) {
        uint32_t o32[8 * 20], p32[8 * 21];
        uint16_t o16[8 * 20];
        uint8_t o8[8 * 20], p8[8 * 21];
        ts__tv_ldg_u32(src, K, o32);
        ts__tv_ldg_u16((const uint16_t *)src, K, o16);
        ts__tv_ldg_u8((const uint8_t *)src, K, o8);
        uint32_t w[8 * 20];
        ts__tv_ldg_u8w((const uint8_t *)src, K, w);
        for (int c = 0; c < K; c++)
            for (int l = 0; l < 8; l++)
                bad += o32[8 * c + l] != src[K * l + c] || o16[8 * c + l] != ((const uint16_t *)src)[K * l + c] ||
                       o8[8 * c + l] != ((const uint8_t *)src)[K * l + c] || w[8 * c + l] != ((const uint8_t *)src)[K * l + c];
        memset(p32, 0xEE, sizeof p32), memset(p8, 0xEE, sizeof p8);
        ts__tv_stg_u32(p32, K, src);
        ts__tv_stg_u8w(p8, K, src); /* the low bytes of src's words */
        for (int c = 0; c < K; c++)
            for (int l = 0; l < 8; l++) bad += p32[K * l + c] != src[8 * c + l] || p8[K * l + c] != (uint8_t)src[8 * c + l];
        for (int i = 8 * K; i < 8 * 21; i++) bad += p32[i] != 0xEEEEEEEEu || p8[i] != 0xEE;
    }
    TS_CHECK_MSG(bad == 0, "%ld transposed or grouped elements differ", bad);
}

TS_TEST(tile_simd2_rt_f16_e5m6) {
    long bad = 0;
    for (uint32_t h = 0; h < 65536; h += 8) { /* every f16 and e5m6 code (high bits too) */
        ts__tv_u16 v;
        for (int l = 0; l < 8; l++) v[l] = (uint16_t)(h + (uint32_t)l);
        ts__tv_f32 f = ts__tv_f16_to_f32(v), g = ts__tv_e5m6_to_f32(v);
        for (int l = 0; l < 8; l++)
            bad += ts__tile_f32_bits(f[l]) != ts__tile_f32_bits(ts_f16_to_f32(v[l])) ||
                   ts__tile_f32_bits(g[l]) != ts__tile_f32_bits(ts_e5m6_to_f32(v[l]));
    }
    /* f32 -> e5m6: every sign and exponent, all top-12 mantissa bits, the low 17 bits' rounding
     * boundaries (0x10000 and its neighbours) */
    static const uint32_t lows[] = {0, 1, 0xFFFF, 0x10000, 0x10001, 0x1FFFF};
    for (uint32_t se = 0; se < 512; se++)
        for (uint32_t top = 0; top < 64; top++)
            for (int lo = 0; lo < 6; lo++) {
                ts__tv_f32 x;
                for (int l = 0; l < 8; l++)
                    x[l] = ts__tile_bits_f32(se << 23 | (top * 8 + (uint32_t)l) << 14 | (lows[lo] & 0x3FFF) |
                                             (lows[lo] & 0x10000 ? 0x20000u : 0));
                ts__tv_u16 e = ts__tv_f32_to_e5m6(x);
                for (int l = 0; l < 8; l++) bad += e[l] != ts_f32_to_e5m6(x[l]);
            }
    TS_CHECK_MSG(bad == 0, "%ld f16 / e5m6 conversions differ", bad);
}

/* ---- compile and run ---- */

TS_TEST(tile_simd2_matches_scalar_emission) {
    char *v = emit2(k_simd2_kernels, "v_", false), *s = emit2(k_simd2_kernels, "s_", true);
    TS_CHECK(v && s);
    char *w = tt_emit_lanes(k_simd2_kernels, "simd2.tile", "v_", false, 16);
    TS_CHECK(w != NULL);
    tt_simd_vs_scalar(ts_t_, v, s, k_simd2_driver, w);
    free(w);
    free(v), free(s);
}
