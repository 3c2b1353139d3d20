/* Scalar format conversions vs the golden vectors of tests/gen/gen_formats.py
 * (tests/golden/formats.txt; the generator's docstring defines the cases). */
#include "tilestack/numerics.h"
#include "ts_prng.h"
#include "ts_test.h"

#include <math.h>
#include <stdlib.h>

#define RAND_SEED 0x5EED0001ull
#define RAND_N (1 << 20)
#define PACK_SEED 0x5EED0002ull
#define PACK_N (1 << 16)

static const uint32_t k_specials[] = {
    0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001,
    0xFF800001, 0x7FBFFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FC10000, 0xFFC1FFFF, 0x7FA00000,
    0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00800000, 0x00400000, 0x7F7FFFFF,
    0xFF7FFFFF, 0x3F800000, 0xBF800000,
};

static float bf(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t fb(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

typedef struct { const char *name; int width; uint32_t (*enc)(float); } enc_op;
#define ENC(fn, w) static uint32_t e_##fn(float x) { return fn(x); }
ENC(ts_f32_to_bf16, 2) ENC(ts_f32_to_f16, 2) ENC(ts_f32_to_e4m3, 1) ENC(ts_f32_to_e4m3_sat, 1)
ENC(ts_f32_to_e5m2, 1) ENC(ts_f32_to_e5m2_sat, 1) ENC(ts_f32_to_e2m1, 1)
ENC(ts_f32_to_e2m1_dg, 1) ENC(ts_f32_to_e5m6, 2)
static const enc_op k_enc[] = {
    {"enc_bf16", 2, e_ts_f32_to_bf16},       {"enc_f16", 2, e_ts_f32_to_f16},
    {"enc_e4m3", 1, e_ts_f32_to_e4m3},       {"enc_e4m3_sat", 1, e_ts_f32_to_e4m3_sat},
    {"enc_e5m2", 1, e_ts_f32_to_e5m2},       {"enc_e5m2_sat", 1, e_ts_f32_to_e5m2_sat},
    {"enc_e2m1", 1, e_ts_f32_to_e2m1},       {"enc_e2m1_dg", 1, e_ts_f32_to_e2m1_dg},
    {"enc_e5m6", 2, e_ts_f32_to_e5m6},
};

typedef struct { const char *name; uint32_t ncodes; float (*dec)(uint32_t); } dec_op;
static float d_e4m3(uint32_t c) { return ts_e4m3_to_f32((uint8_t)c); }
static float d_e5m2(uint32_t c) { return ts_e5m2_to_f32((uint8_t)c); }
static float d_e2m1(uint32_t c) { return ts_e2m1_to_f32((uint8_t)c); }
static float d_ue8m0(uint32_t c) { return ts_ue8m0_to_f32((uint8_t)c); }
static float d_bf16(uint32_t c) { return ts_bf16_to_f32((uint16_t)c); }
static float d_f16(uint32_t c) { return ts_f16_to_f32((uint16_t)c); }
static float d_e5m6(uint32_t c) { return ts_e5m6_to_f32((uint16_t)c); }
static const dec_op k_dec[] = {
    {"dec_e4m3", 256, d_e4m3}, {"dec_e5m2", 256, d_e5m2},   {"dec_e2m1", 16, d_e2m1},
    {"dec_ue8m0", 256, d_ue8m0}, {"dec_bf16", 65536, d_bf16}, {"dec_f16", 65536, d_f16},
    {"dec_e5m6", 4096, d_e5m6},
};

/* Boundary inputs, same order as gen_formats.py boundary_inputs(). */
static float *boundary_inputs(const char *fmt, size_t *n) {
    uint32_t ncodes;
    float (*dec)(uint32_t);
    if (!strncmp(fmt, "e4m3", 4)) { ncodes = 0x7F; dec = d_e4m3; }
    else if (!strncmp(fmt, "e5m2", 4)) { ncodes = 0x7C; dec = d_e5m2; }
    else if (!strncmp(fmt, "e2m1", 4)) { ncodes = 8; dec = d_e2m1; }
    else if (!strcmp(fmt, "bf16")) { ncodes = 0x7F80; dec = d_bf16; }
    else if (!strcmp(fmt, "f16")) { ncodes = 0x7C00; dec = d_f16; }
    else { ncodes = 0x7C0; dec = d_e5m6; }
    size_t ns = sizeof k_specials / sizeof k_specials[0];
    float *x = malloc((6 * (size_t)ncodes + ns) * sizeof(float));
    size_t k = 0;
    for (uint32_t c = 0; c < ncodes; c++) {
        double v = dec(c);
        double nx = c + 1 < ncodes ? (double)dec(c + 1) : v + (v - (double)dec(c - 1));
        float mid = (float)((v + nx) / 2);
        float t[3] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
        for (int j = 0; j < 3; j++) { x[k++] = t[j]; x[k++] = -t[j]; }
    }
    for (size_t j = 0; j < ns; j++) x[k++] = bf(k_specials[j]);
    *n = k;
    return x;
}

/* Compare outputs (little-endian, `width` bytes each) with a golden line's hash and sample;
 * reports the first differing element of the sample. */
static void check_line(ts_test_ctx *ts_t_, const char *label, const void *out, size_t n,
                       int width, size_t gn, uint64_t ghash, const char *sample,
                       const float *inputs) {
    TS_CHECK_MSG(n == gn, "%s: %zu outputs, golden has %zu", label, n, gn);
    if (n != gn) return;
    uint64_t h = ts_fnv1a64(out, n * (size_t)width);
    if (h == ghash) return;
    const unsigned char *o = out;
    for (size_t i = 0; sample[(size_t)2 * width * i]; i++) {
        char buf[9] = {0};
        memcpy(buf, sample + (size_t)2 * width * i, (size_t)2 * width);
        uint32_t want = (uint32_t)strtoul(buf, NULL, 16), got = 0;
        memcpy(&got, o + i * width, (size_t)width);
        if (got != want) {
            TS_CHECK_MSG(0, "%s: element %zu (input 0x%08x): got 0x%x, want 0x%x", label, i,
                         inputs ? fb(inputs[i]) : (uint32_t)i, got, want);
            return;
        }
    }
    TS_CHECK_MSG(0, "%s: hash %016llx != golden %016llx (past the sample)", label,
                 (unsigned long long)h, (unsigned long long)ghash);
}

TS_TEST(formats_golden_scalar) {
    size_t size;
    char *txt = TS_READ_GOLDEN("formats.txt", &size);
    if (!txt) return;
    txt = realloc(txt, size + 1);
    txt[size] = 0;
    float *bf16all = malloc(65536 * sizeof(float));
    for (uint32_t i = 0; i < 65536; i++) bf16all[i] = bf(i << 16);
    float *rand = malloc(RAND_N * sizeof(float));
    ts_prng p = ts_prng_seed(RAND_SEED);
    for (size_t i = 0; i < RAND_N; i++) rand[i] = ts_prng_bits_f32(&p);
    void *out = malloc((size_t)RAND_N * 4);
    int nlines = 0;
    for (char *line = strtok(txt, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#') continue;
        char cas[32], op[32];
        size_t gn;
        unsigned long long gh;
        int off = 0;
        if (sscanf(line, "%31s %31s %zu %llx %n", cas, op, &gn, &gh, &off) != 4) {
            TS_CHECK_MSG(0, "bad golden line: %.60s", line);
            continue;
        }
        const char *sample = line + off;
        char label[80];
        snprintf(label, sizeof label, "%s/%s", cas, op);
        nlines++;
        if (!strncmp(op, "dec_", 4)) {
            for (size_t d = 0; d < sizeof k_dec / sizeof k_dec[0]; d++) {
                if (strcmp(op, k_dec[d].name)) continue;
                uint32_t *o = out;
                for (uint32_t c = 0; c < k_dec[d].ncodes; c++) o[c] = fb(k_dec[d].dec(c));
                check_line(ts_t_, label, o, k_dec[d].ncodes, 4, gn, gh, sample, NULL);
            }
        } else if (!strncmp(op, "enc_", 4)) {
            for (size_t e = 0; e < sizeof k_enc / sizeof k_enc[0]; e++) {
                if (strcmp(op, k_enc[e].name)) continue;
                size_t n;
                float *x, *bx = NULL;
                if (!strcmp(cas, "bf16all")) { x = bf16all; n = 65536; }
                else if (!strcmp(cas, "rand")) { x = rand; n = RAND_N; }
                else { x = bx = boundary_inputs(op + 4, &n); }
                unsigned char *o = out;
                for (size_t i = 0; i < n; i++) {
                    uint32_t c = k_enc[e].enc(x[i]);
                    memcpy(o + i * k_enc[e].width, &c, (size_t)k_enc[e].width);
                }
                check_line(ts_t_, label, o, n, k_enc[e].width, gn, gh, sample, x);
                free(bx);
            }
        } else if (!strcmp(op, "e5m6_pack8")) {
            ts_prng q = ts_prng_seed(PACK_SEED);
            uint32_t *o = out;
            for (size_t g = 0; g < PACK_N / 8; g++) {
                uint16_t v[8], back[8];
                for (int j = 0; j < 8; j++) v[j] = (uint16_t)(ts_prng_u32(&q) & 0xFFF);
                ts_e5m6_pack8(v, o + 3 * g);
                ts_e5m6_unpack8(o + 3 * g, back);
                TS_CHECK(!memcmp(v, back, sizeof v));
            }
            check_line(ts_t_, label, o, PACK_N / 8 * 3, 4, gn, gh, sample, NULL);
        } else {
            TS_CHECK_MSG(0, "unknown golden op %s", op);
        }
    }
    TS_CHECK_MSG(nlines >= 7 + 27 + 1, "only %d golden cases", nlines);
    free(out);
    free(rand);
    free(bf16all);
    free(txt);
}

TS_TEST(formats_ue8m0_helpers) {
    TS_CHECK_EQ_INT(ts_f32_to_ue8m0(1.0f), 127);
    TS_CHECK_EQ_INT(ts_f32_to_ue8m0(0x1p-127f), 0);
    TS_CHECK_EQ_INT(ts_f32_to_ue8m0(0x1p-126f), 1);
    TS_CHECK_EQ_INT(ts_f32_to_ue8m0(0x1p127f), 254);
    TS_CHECK_EQ_INT(ts_f32_to_ue8m0(3.0f), 255);
    TS_CHECK_EQ_INT(ts_f32_to_ue8m0(-1.0f), 255);
    TS_CHECK_EQ_INT(ts_f32_to_ue8m0(0.0f), 255);
    TS_CHECK_EQ_INT(ts_f32_to_ue8m0(INFINITY), 255);
    TS_CHECK_EQ_INT(ts_f32_to_ue8m0(NAN), 255);
    for (int e = 0; e < 255; e++) TS_CHECK_EQ_INT(ts_f32_to_ue8m0(ts_ue8m0_to_f32((uint8_t)e)), e);
    /* DeepGEMM ceil_to_ue8m0: exponent + (mantissa != 0), clamped to [1, 254] */
    TS_CHECK(ts_ceil_to_ue8m0(1.0f) == 1.0f);
    TS_CHECK(ts_ceil_to_ue8m0(1.5f) == 2.0f);
    TS_CHECK(ts_ceil_to_ue8m0(-3.0f) == 4.0f);
    TS_CHECK(ts_ceil_to_ue8m0(0.0f) == 0x1p-126f);
    TS_CHECK(ts_ceil_to_ue8m0(0x1p-140f) == 0x1p-126f);
    TS_CHECK(ts_ceil_to_ue8m0(0x1.8p-127f) == 0x1p-126f);
    TS_CHECK(ts_ceil_to_ue8m0(INFINITY) == 0x1p127f);
    TS_CHECK(ts_ceil_to_ue8m0(NAN) == 0x1p127f);
    TS_CHECK(ts_ceil_to_ue8m0(0x1.fffffep127f) == 0x1p127f);
    uint8_t e[4] = {1, 0x80, 0xFF, 127}, b[4];
    int32_t w = ts_pack_ue8m0x4(e);
    TS_CHECK_EQ_INT((uint32_t)w, 0x7FFF8001u);
    ts_unpack_ue8m0x4(w, b);
    TS_CHECK(!memcmp(e, b, 4));
}

/* Hand-checked points of the documented rules (the golden file covers the rest). */
TS_TEST(formats_documented_edges) {
    TS_CHECK_EQ_INT(ts_f32_to_e4m3(464.0f), 0x7E);       /* tie to even: 448 */
    TS_CHECK_EQ_INT(ts_f32_to_e4m3(464.00003f), 0x7F);   /* above: NaN */
    TS_CHECK_EQ_INT(ts_f32_to_e4m3(-INFINITY), 0xFF);
    TS_CHECK_EQ_INT(ts_f32_to_e4m3_sat(-INFINITY), 0xFE);
    TS_CHECK_EQ_INT(ts_f32_to_e4m3_sat(1e9f), 0x7E);
    TS_CHECK_EQ_INT(ts_f32_to_e4m3(bf(0xFFC00000)), 0xFF);
    TS_CHECK_EQ_INT(ts_f32_to_e5m2(61440.0f), 0x7C);     /* tie to even: inf */
    TS_CHECK_EQ_INT(ts_f32_to_e5m2(bf(0x7F800001)), 0x7E);
    TS_CHECK_EQ_INT(ts_f32_to_e2m1(0.25f), 0x0);
    TS_CHECK_EQ_INT(ts_f32_to_e2m1(0.75f), 0x2);
    TS_CHECK_EQ_INT(ts_f32_to_e2m1(-5.0f), 0xE);
    TS_CHECK_EQ_INT(ts_f32_to_e2m1(-0.0f), 0x8);
    TS_CHECK_EQ_INT(ts_f32_to_e2m1(NAN), 0x7);
    TS_CHECK_EQ_INT(ts_f32_to_e2m1_dg(0.75f), 0x1);
    TS_CHECK_EQ_INT(ts_f32_to_e2m1_dg(-0.1f), 0x0);
    TS_CHECK_EQ_INT(ts_f32_to_e2m1_dg(-7.0f), 0xF);
    TS_CHECK_EQ_INT(ts_f32_to_e2m1_dg(-NAN), 0x7);
    TS_CHECK_EQ_INT(ts_f32_to_bf16(bf(0xFF800001)), 0xFFC0);
    TS_CHECK_EQ_INT(ts_f32_to_f16(bf(0x7F800001)), 0x7E00);
    TS_CHECK_EQ_INT(fb(ts_f16_to_f32(0x7C01)), 0x7F802000u);
    /* E5M6: 65024 is the largest finite; the TileKernels special values */
    TS_CHECK_EQ_INT(ts_f32_to_e5m6(65024.0f), 0x7BF);
    TS_CHECK_EQ_INT(ts_f32_to_e5m6(0x1p-20f), 0x001);
    TS_CHECK_EQ_INT(ts_f32_to_e5m6(0x1p-14f * 63 / 64), 0x03F);
    TS_CHECK_EQ_INT(ts_f32_to_e5m6(0x1p-14f), 0x040);
    TS_CHECK_EQ_INT(ts_f32_to_e5m6(-INFINITY), 0xFC0);
    TS_CHECK_EQ_INT(ts_f32_to_e5m6(-NAN), 0x7FF);
    TS_CHECK(ts_e5m6_to_f32(0x7BF) == 65024.0f);
    TS_CHECK(ts_e5m6_to_f32(0x001) == 0x1p-20f);
}
