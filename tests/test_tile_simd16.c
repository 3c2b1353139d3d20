/* The JIT on every ISA path gives the same bits: the avx512 path compiles the 16-lane lowering
 * when asked (TS_TILE_JIT_LANES16: 64-byte vectors, -mavx512f/bw/vl/dq), avx2 the 8-lane one, generic the 8-lane one without
 * AVX; each module here is compiled once per path and run on the same inputs (random values
 * with NaN, +-inf, +-0, subnormals and large magnitudes mixed in), outputs compared byte for
 * byte with the generic path's. Row lengths 1..50 and 70 put every lane count, the 16-lane
 * loop's tails and the 8-lane remainder of the lanes8 sum under test. The kernels exercise
 * each helper family: float math, integer operations, casts to bf16 / fp8 / f16 / e2m1 / ue8m0,
 * reductions (the lanes8 f32 sum, max / min / absmax, integer sum and max), 16-bit lane
 * bodies, gathers and affine division. (tests/test_tile_simd*.c compare the 16-lane C
 * against the scalar emission, the helpers' generic C and the AVX-512 paths both.) */
#include "ts_prng.h"
#include "ts_test.h"
#include "tilestack/numerics.h"
#include "tilestack/tile.h"

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char k_src[] =
    "kernel fm(x: tensor<f32, [T, H]>, y: tensor<f32, [T, H]>, o: tensor<f32, [T, H]>, q: tensor<f32, [T, H]>) {\n"
    "    launch (T) as (t) {\n"
    "        for j in parallel(H) {\n"
    "            let v = x[t, j];\n"
    "            let w = y[t, j];\n"
    "            o[t, j] = select(v > w, max(v, w), min(v, w) * 2.0) + fma(v, w, 0.5) + abs(v) / sqrt(abs(w) + 1.0)\n"
    "                      + clamp(v, -3.0, 3.0) - w / (v + 0.25);\n"
    "            q[t, j] = exp(v * 0.1) + sigmoid(w) + floor(v) + round(w) + ceil(v) + trunc(w) + rsqrt(abs(v) + 2.0);\n"
    "        }\n"
    "    }\n"
    "}\n"
    "\n"
    "kernel io(a: tensor<i32, [T, H]>, b: tensor<i32, [T, H]>, o: tensor<i32, [T, H]>, p: tensor<i16, [T, H]>,\n"
    "          g: tensor<f32, [T, H]>) {\n"
    "    launch (T) as (t) {\n"
    "        for j in parallel(H) {\n"
    "            let u = a[t, j];\n"
    "            let v = b[t, j];\n"
    "            o[t, j] = ((u * 3 + v) ^ (u << (v & 7))) + max(u, v) - min(u, -v) + (u >> 2) + select(u > v, 1, 0)\n"
    "                      + cast<i32>(j) / 2 + (v >> (u & 15));\n"
    "            p[t, j] = (cast<i16>(u) & cast<i16>(v)) | (cast<i16>(j) << 3);\n"
    "            g[t, j] = cast<f32>(u) * 0.5 + cast<f32>(a[t, (j * 5) % H]) + cast<f32>(b[t, j / 2]);\n"
    "        }\n"
    "    }\n"
    "}\n"
    "\n"
    "kernel cv(x: tensor<f32, [T, H]>, ob: tensor<bf16, [T, H]>, o8: tensor<e4m3, [T, H]>, o5: tensor<e5m2, [T, H]>,\n"
    "          oh: tensor<f16, [T, H]>, om: tensor<ue8m0, [T, H]>, of: tensor<f32, [T, H]>) {\n"
    "    launch (T) as (t) {\n"
    "        for j in parallel(H) {\n"
    "            let v = x[t, j];\n"
    "            ob[t, j] = v * 1.5;\n"
    "            o8[t, j] = v;\n"
    "            o5[t, j] = v * 0.5;\n"
    "            oh[t, j] = v - 1.0;\n"
    "            om[t, j] = exp2(floor(clamp(v, -130.0, 130.0)));\n"
    "            of[t, j] = cast<f32>(cast<e2m1>(v)) + cast<f32>(o8[t, j]) + cast<f32>(ob[t, j]);\n"
    "        }\n"
    "    }\n"
    "}\n"
    "\n"
    "kernel rd(x: tensor<f32, [T, H]>, xi: tensor<i32, [T, H]>, r: tensor<f32, [T, 4]>, ri: tensor<i32, [T, 2]>) {\n"
    "    launch (T) as (t) {\n"
    "        tile a: f32[1, 72];\n"
    "        tile s: f32[1];\n"
    "        tile ai: i32[1, 72];\n"
    "        tile si: i32[1];\n"
    "        copy(x[t, 0], a, fill=0.0);\n"
    "        copy(xi[t, 0], ai, fill=0);\n"
    "        reduce<sum>(a, s, axis=1);\n"
    "        r[t, 0] = s[0];\n"
    "        reduce<max>(a, s);\n"
    "        r[t, 1] = s[0];\n"
    "        reduce<absmax>(a, s);\n"
    "        r[t, 2] = s[0];\n"
    "        reduce<min>(a, s);\n"
    "        r[t, 3] = s[0];\n"
    "        reduce<sum>(ai, si, axis=1);\n"
    "        ri[t, 0] = si[0];\n"
    "        reduce<max>(ai, si);\n"
    "        ri[t, 1] = si[0];\n"
    "    }\n"
    "}\n"
    "\n"
    "kernel h16(x: tensor<i16, [T, H]>, y: tensor<i16, [T, H]>, m: tensor<i16, [T, 2]>) {\n"
    "    launch (T) as (t) {\n"
    "        tile b: i16[1, 80];\n"
    "        tile mx: i16[1];\n"
    "        for j in parallel(H) {\n"
    "            let v = x[t, j];\n"
    "            y[t, j] = max(v & 32767, 3) ^ (v >> 2);\n"
    "        }\n"
    "        copy(x[t, 0], b, fill=0);\n"
    "        reduce<max>(b, mx);\n"
    "        m[t, 0] = mx[0];\n"
    "        reduce<min>(b, mx);\n"
    "        m[t, 1] = mx[0];\n"
    "    }\n"
    "}\n";

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(p);
}

/* f32 bits: mostly N(0, 4)-ish uniforms, with specials mixed in */
static float rnd_f32(ts_prng *r) {
    const uint32_t k = ts_prng_u32(r) % 16;
    switch (k) {
    case 0: return NAN;
    case 1: return INFINITY;
    case 2: return -INFINITY;
    case 3: return -0.0f;
    case 4: return 0.0f;
    case 5: return ldexpf(ts_prng_uniform(r), -130); /* subnormal */
    case 6: return ldexpf(ts_prng_uniform(r) - 0.5f, (int)(ts_prng_u32(r) % 40)); /* large */
    default: return (ts_prng_uniform(r) - 0.5f) * 8.0f;
    }
}

enum { MAXT = 3, MAXH = 72, NBUF = 13 };
typedef struct bufs {
    float xf[MAXT * MAXH], yf[MAXT * MAXH];
    int32_t ai[MAXT * MAXH], bi[MAXT * MAXH];
    int16_t xh[MAXT * MAXH];
    uint8_t out[NBUF][MAXT * MAXH * 4]; /* outputs, poisoned before each launch */
} bufs;

static void fill(bufs *b, uint64_t seed) {
    ts_prng r = ts_prng_seed(seed);
    for (int i = 0; i < MAXT * MAXH; i++) {
        b->xf[i] = rnd_f32(&r);
        b->yf[i] = rnd_f32(&r);
        b->ai[i] = (int32_t)ts_prng_u32(&r) >> (ts_prng_u32(&r) % 24);
        b->bi[i] = (int32_t)ts_prng_u32(&r) >> (ts_prng_u32(&r) % 24);
        b->xh[i] = (int16_t)ts_prng_u32(&r);
    }
}

/* runs every kernel of k on shape (t, h); outputs in b->out */
static void run_all(ts_test_ctx *ts_t_, const ts_tile_kernel *k, bufs *b, int64_t t, int64_t h) {
    memset(b->out, 0xA5, sizeof b->out);
    ts_tensor x = ts_tensor_2d(b->xf, TS_F32, t, h), y = ts_tensor_2d(b->yf, TS_F32, t, h);
    ts_tensor ai = ts_tensor_2d(b->ai, TS_I32, t, h), bi = ts_tensor_2d(b->bi, TS_I32, t, h);
    ts_tensor xh = ts_tensor_2d(b->xh, TS_I16, t, h);
    ts_tensor of0 = ts_tensor_2d(b->out[0], TS_F32, t, h), of1 = ts_tensor_2d(b->out[1], TS_F32, t, h);
    ts_tile_arg fm[] = {ts_tile_arg_tensor(&x), ts_tile_arg_tensor(&y), ts_tile_arg_tensor(&of0), ts_tile_arg_tensor(&of1)};
    TS_CHECK_STATUS(ts_tile_launch(k, "fm", fm, 4), TS_OK);
    ts_tensor oi = ts_tensor_2d(b->out[2], TS_I32, t, h), op = ts_tensor_2d(b->out[3], TS_I16, t, h);
    ts_tensor og = ts_tensor_2d(b->out[4], TS_F32, t, h);
    ts_tile_arg io[] = {ts_tile_arg_tensor(&ai), ts_tile_arg_tensor(&bi), ts_tile_arg_tensor(&oi), ts_tile_arg_tensor(&op),
                        ts_tile_arg_tensor(&og)};
    TS_CHECK_STATUS(ts_tile_launch(k, "io", io, 5), TS_OK);
    ts_tensor ob = ts_tensor_2d(b->out[5], TS_BF16, t, h), o8 = ts_tensor_2d(b->out[6], TS_E4M3, t, h);
    ts_tensor o5 = ts_tensor_2d(b->out[7], TS_E5M2, t, h), oh = ts_tensor_2d(b->out[8], TS_F16, t, h);
    ts_tensor om = ts_tensor_2d(b->out[9], TS_UE8M0, t, h), of = ts_tensor_2d(b->out[10], TS_F32, t, h);
    ts_tile_arg cv[] = {ts_tile_arg_tensor(&x),  ts_tile_arg_tensor(&ob), ts_tile_arg_tensor(&o8), ts_tile_arg_tensor(&o5),
                        ts_tile_arg_tensor(&oh), ts_tile_arg_tensor(&om), ts_tile_arg_tensor(&of)};
    TS_CHECK_STATUS(ts_tile_launch(k, "cv", cv, 7), TS_OK);
    /* the reductions and the 16-bit kernel share out[11]: r at 0, ri at 64, m at 128 bytes */
    ts_tensor r = ts_tensor_2d(b->out[11], TS_F32, t, 4), ri = ts_tensor_2d(b->out[11] + 64, TS_I32, t, 2);
    ts_tensor yh = ts_tensor_2d(b->out[12], TS_I16, t, h);
    ts_tensor m = ts_tensor_2d(b->out[11] + 128, TS_I16, t, 2);
    ts_tile_arg rd[] = {ts_tile_arg_tensor(&x), ts_tile_arg_tensor(&ai), ts_tile_arg_tensor(&r), ts_tile_arg_tensor(&ri)};
    TS_CHECK_STATUS(ts_tile_launch(k, "rd", rd, 4), TS_OK);
    ts_tile_arg h16[] = {ts_tile_arg_tensor(&xh), ts_tile_arg_tensor(&yh), ts_tile_arg_tensor(&m)};
    TS_CHECK_STATUS(ts_tile_launch(k, "h16", h16, 3), TS_OK);
}

TS_TEST(tile_simd16_jit_every_isa_same_bits) {
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/ts_tile_simd16_XXXXXX");
    TS_CHECK(mkdtemp(dir) != NULL);
    const ts_isa saved = ts_get_isa();
    int isas[TS_ISA_COUNT_];
    const int nisa = ts_test_isas(isas);
    ts_tile_kernel *k[TS_ISA_COUNT_] = {0};
    char keys[TS_ISA_COUNT_][65];
    for (int i = 0; i < nisa; i++) {
        TS_CHECK_STATUS(ts_set_isa((ts_isa)isas[i]), TS_OK);
        ts_tile_options o = {.cache_dir = dir, .filename = "simd16.tile", .flags = TS_TILE_JIT_LANES16};
        TS_CHECK_STATUS(ts_tile_compile(k_src, &o, &k[i]), TS_OK);
        ts_tile_kernel_info info;
        keys[i][0] = 0;
        if (k[i] && ts_tile_kernel_info_get(k[i], &info) == TS_OK) memcpy(keys[i], info.key, 65);
        /* the lane count and the flags are part of the key: each path its own object */
        for (int p = 0; p < i; p++)
            TS_CHECK_MSG(strcmp(keys[p], keys[i]) != 0, "isa %s and %s share a cache key", ts_isa_name((ts_isa)isas[p]),
                         ts_isa_name((ts_isa)isas[i]));
    }
    ts_set_isa(saved);
    bufs *ref = malloc(sizeof *ref), *got = malloc(sizeof *got);
    TS_CHECK(ref && got);
    static const int64_t shapes[][2] = {{1, 1}, {2, 7}, {3, 8}, {1, 15}, {2, 16}, {3, 17}, {1, 23}, {2, 31},
                                        {3, 32}, {2, 33}, {1, 40}, {3, 47}, {2, 50}, {3, 70}, {1, 72}};
    for (size_t c = 0; ref && got && c < sizeof shapes / sizeof shapes[0]; c++) {
        const int64_t t = shapes[c][0], h = shapes[c][1];
        fill(ref, 100 + c);
        if (k[0]) run_all(ts_t_, k[0], ref, t, h); /* generic first (ts_test_isas' order) */
        for (int i = 1; i < nisa; i++) {
            if (!k[i]) continue;
            fill(got, 100 + c);
            TS_CHECK_STATUS(ts_set_isa((ts_isa)isas[i]), TS_OK);
            run_all(ts_t_, k[i], got, t, h);
            ts_set_isa(saved);
            for (int n = 0; n < NBUF; n++) {
                size_t at = 0;
                while (at < sizeof ref->out[n] && ref->out[n][at] == got->out[n][at]) at++;
                TS_CHECK_MSG(at == sizeof ref->out[n], "isa %s differs from generic: shape %lldx%lld, output %d, byte %zu",
                             ts_isa_name((ts_isa)isas[i]), (long long)t, (long long)h, n, at);
            }
        }
    }
    free(ref), free(got);
    for (int i = 0; i < nisa; i++) ts_tile_kernel_release(k[i]);
    nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}
