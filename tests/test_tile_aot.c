/* AOT kernels (the .tile files of src/kernels/ compiled into the library): per_token_cast_e4m3 is bit-exact
 * with the hand-written ts_per_token_cast_to_fp8 (gran_k 128, f32 scales, with and without
 * ue8m0), on odd shapes, special values, both ISA variants, 1 and 2 threads; the same source
 * through the JIT
 * gives the same bits. */
#include "ts_test.h"
#include "ts_prng.h"
#include "tilestack/kernels.h"
#include "tilestack/numerics.h"
#include "tilestack/quant.h"
#include "tilestack/tile.h"

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(p);
}

typedef struct ptc_case {
    int64_t t, h;
    uint16_t *x;
    uint8_t *q_ref, *q;
    float *sf_ref, *sf;
} ptc_case;

/* bf16 inputs with per-row magnitudes from 2^-140 to 2^100 and special rows: the kernel's
 * three encodings (all products normal, finite with subnormal codes, inf / NaN) all run */
static void fill_input(ptc_case *c, uint64_t seed) {
    ts_prng r = ts_prng_seed(seed);
    for (int64_t i = 0; i < c->t; i++) {
        const int e = (int)(ts_prng_u32(&r) % 240) - 140;
        const int kind = (int)(ts_prng_u32(&r) % 8);
        for (int64_t j = 0; j < c->h; j++) {
            float v = ldexpf(ts_prng_uniform(&r), e);
            uint16_t b = ts_f32_to_bf16(v);
            if (kind == 1) b = 0;                                   /* all zero: amax clamps */
            if (kind == 2 && j % 97 == 5) b = 0x7F80;               /* +inf in some blocks */
            if (kind == 3 && j % 131 == 7) b = 0x7FC0;              /* NaN in some blocks */
            if (kind == 4) b = (uint16_t)(ts_prng_u32(&r) & 0x807F); /* subnormals and +-0 */
            if (kind == 5 && j % 53 == 0) b = 0xFF80;               /* -inf */
            if (kind == 6 && j % 17 == 3) b = ts_f32_to_bf16(ldexpf(v, -20)); /* e4m3 subnormal codes */
            c->x[i * c->h + j] = b;
        }
    }
}

static bool run_case(ts_test_ctx *ts_t_, int64_t t, int64_t h, bool ue8m0, uint64_t seed,
                     const ts_tile_kernel *jit) {
    const int64_t ng = (h + 127) / 128;
    ptc_case c = {t, h, malloc((size_t)(t * h) * 2), malloc((size_t)(t * h)), malloc((size_t)(t * h)),
                  malloc((size_t)(t * ng) * 4), malloc((size_t)(t * ng) * 4)};
    bool ok = c.x && c.q_ref && c.q && c.sf_ref && c.sf;
    TS_CHECK(ok);
    if (ok) {
        fill_input(&c, seed);
        ts_tensor x = ts_tensor_2d(c.x, TS_BF16, t, h);
        ts_tensor qr = ts_tensor_2d(c.q_ref, TS_E4M3, t, h), q = ts_tensor_2d(c.q, TS_E4M3, t, h);
        ts_tensor sr = ts_tensor_2d(c.sf_ref, TS_F32, t, ng), s = ts_tensor_2d(c.sf, TS_F32, t, ng);
        TS_CHECK_STATUS(ts_per_token_cast_to_fp8(&x, ue8m0, 128, false, &qr, &sr), TS_OK);
        const ts_isa saved_isa = ts_get_isa();
        int isas[TS_ISA_COUNT_];
        const int nisa = ts_test_isas(isas);
        for (int run = 0; run < 2 * nisa; run++) {
            /* every path that runs here (the variants compiled into the library: generic, and
             * avx2 also under avx512), 1 and 2 threads */
            const int threads = 1 + run % 2;
            const ts_isa isa = (ts_isa)isas[run / 2];
            if (ts_set_isa(isa) != TS_OK) continue;
            ts_set_num_threads(threads);
            memset(c.q, 0xEE, (size_t)(t * h));
            memset(c.sf, 0xEE, (size_t)(t * ng) * 4);
            TS_CHECK_STATUS(ts_per_token_cast_e4m3(&x, &q, &s, ue8m0), TS_OK);
            int64_t bad = 0;
            while (bad < t * h && c.q[bad] == c.q_ref[bad]) bad++;
            TS_CHECK_MSG(bad == t * h, "codes differ: T=%lld H=%lld ue8m0=%d threads=%d isa=%s, first at [%lld, %lld]: x 0x%04x sf %a: 0x%02x, expected 0x%02x",
                         (long long)t, (long long)h, ue8m0, threads, ts_isa_name(isa), (long long)(bad / h), (long long)(bad % h),
                         bad < t * h ? c.x[bad] : 0, bad < t * h ? (double)c.sf_ref[bad / h * ng + bad % h / 128] : 0.0,
                         bad < t * h ? c.q[bad] : 0, bad < t * h ? c.q_ref[bad] : 0);
            TS_CHECK_MSG(!memcmp(c.sf, c.sf_ref, (size_t)(t * ng) * 4), "scales differ: T=%lld H=%lld ue8m0=%d threads=%d isa=%s",
                         (long long)t, (long long)h, ue8m0, threads, ts_isa_name(isa));
        }
        ts_set_isa(saved_isa);
        if (jit) {
            memset(c.q, 0xEE, (size_t)(t * h));
            memset(c.sf, 0xEE, (size_t)(t * ng) * 4);
            ts_tile_arg a[4] = {ts_tile_arg_tensor(&x), ts_tile_arg_tensor(&q), ts_tile_arg_tensor(&s),
                                ts_tile_arg_bool(ue8m0)};
            TS_CHECK_STATUS(ts_tile_launch(jit, "per_token_cast_e4m3", a, 4), TS_OK);
            TS_CHECK_MSG(!memcmp(c.q, c.q_ref, (size_t)(t * h)) && !memcmp(c.sf, c.sf_ref, (size_t)(t * ng) * 4),
                         "JIT differs: T=%lld H=%lld ue8m0=%d", (long long)t, (long long)h, ue8m0);
        }
    }
    free(c.x), free(c.q_ref), free(c.q), free(c.sf_ref), free(c.sf);
    return ok;
}

TS_TEST(tile_aot_per_token_cast_matches_hand_written) {
    const int saved = ts_get_num_threads();
    static const int64_t shapes[][2] = {{1, 128}, {1, 1}, {3, 200}, {4, 384}, {7, 130}, {33, 7168}, {130, 4096}};
    uint64_t seed = 0x7173;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int u = 0; u < 2; u++) run_case(ts_t_, shapes[i][0], shapes[i][1], u, seed++, NULL);
    ts_set_num_threads(saved);
}

TS_TEST(tile_aot_per_token_cast_errors) {
    uint16_t x[4 * 256] = {0};
    uint8_t q[4 * 256];
    float sf[4 * 3];
    memset(q, 0x11, sizeof q);
    ts_tensor tx = ts_tensor_2d(x, TS_BF16, 4, 256), tq = ts_tensor_2d(q, TS_E4M3, 4, 256);
    ts_tensor ts3 = ts_tensor_2d(sf, TS_F32, 4, 3), ts2 = ts_tensor_2d(sf, TS_F32, 4, 2);
    TS_CHECK_STATUS(ts_per_token_cast_e4m3(&tx, &tq, &ts3, false), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "ceil(H / 128)") != NULL);
    ts_tensor tq5 = ts_tensor_2d(q, TS_E4M3, 5, 200);
    TS_CHECK_STATUS(ts_per_token_cast_e4m3(&tx, &tq5, &ts2, false), TS_ERR_SHAPE);
    ts_tensor tqb = ts_tensor_2d(q, TS_U8, 4, 256);
    TS_CHECK_STATUS(ts_per_token_cast_e4m3(&tx, &tqb, &ts2, false), TS_ERR_DTYPE);
    TS_CHECK_STATUS(ts_per_token_cast_e4m3(NULL, &tq, &ts2, false), TS_ERR_NULL_POINTER);
    size_t written = 0;
    for (size_t i = 0; i < sizeof q; i++) written += q[i] != 0x11;
    TS_CHECK_EQ_INT(written, 0);
}

/* The library's own kernel source, through the JIT: same bits as the AOT build. */
TS_TEST(tile_aot_kernel_source_through_jit) {
    const char *path = TS_GOLDEN_DIR "/../../src/kernels/per_token_cast.tile";
    FILE *f = fopen(path, "rb");
    TS_CHECK_MSG(f != NULL, "cannot open %s", path);
    if (!f) return;
    static char src[1 << 16];
    size_t n = fread(src, 1, sizeof src - 1, f);
    fclose(f);
    src[n] = 0;
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/ts_tile_aot_XXXXXX");
    TS_CHECK(mkdtemp(dir) != NULL);
    ts_tile_options o = {.cache_dir = dir, .filename = "per_token_cast.tile", .flags = TS_TILE_JIT_NO_CACHE};
    ts_tile_kernel *k = NULL;
    TS_CHECK_STATUS(ts_tile_compile(src, &o, &k), TS_OK);
    if (k) {
        run_case(ts_t_, 9, 300, false, 11, k);
        run_case(ts_t_, 5, 1024, true, 12, k);
    }
    ts_tile_kernel_release(k);
    nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}
