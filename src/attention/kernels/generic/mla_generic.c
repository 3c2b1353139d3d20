/* FlashMLA tile kernels, portable C: the reference order every SIMD path reproduces bit for
 * bit (explicit fmaf chains, the polynomial exp, sums in ascending token order). */
#include "../../flash_mla_internal.h"
#include "tilestack/numerics.h"

#include <math.h>
#include <string.h>

static float mla_exp(float x) {
    if (!(x >= TS__MLA_EXP_MIN)) return 0.0f;
    float n = rintf(x * TS__MLA_LOG2E);
    float r = fmaf(n, -TS__MLA_LN2_HI, x);
    r = fmaf(n, -TS__MLA_LN2_LO, r);
    float p = TS__MLA_C7;
    p = fmaf(p, r, TS__MLA_C6);
    p = fmaf(p, r, TS__MLA_C5);
    p = fmaf(p, r, TS__MLA_C4);
    p = fmaf(p, r, TS__MLA_C3);
    p = fmaf(p, r, TS__MLA_C2);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    uint32_t e = (uint32_t)((int32_t)n + 127) << 23;
    float s;
    memcpy(&s, &e, 4);
    return p * s;
}

static void qk_generic(const float *qs, int64_t rp, const float *k, int64_t dk, int64_t kstride,
                       int64_t n, float scale, float *st) {
    for (int64_t t = 0; t < n; t++) {
        const float *kt = k + t * kstride;
        for (int64_t r = 0; r < rp; r++) {
            const float *q = qs + (r / TS__MLA_RS) * dk * TS__MLA_RS + (r % TS__MLA_RS);
            float acc = 0.0f;
            for (int64_t d = 0; d < dk; d++) acc = fmaf(q[d * TS__MLA_RS], kt[d], acc);
            st[t * rp + r] = acc * scale;
        }
    }
}

static void softmax_generic(float *st, int64_t rp, int64_t n, const int32_t *pos,
                            const int32_t *lim, float *m, float *l, float *alpha) {
    for (int64_t r = 0; r < rp; r++) {
        float mt = -INFINITY;
        for (int64_t t = 0; t < n; t++) {
            float s = pos[t] <= lim[r] ? st[t * rp + r] : -INFINITY;
            st[t * rp + r] = s;
            mt = s > mt ? s : mt;
        }
        float mn = m[r] > mt ? m[r] : mt;
        float a = mn == -INFINITY ? 1.0f : mla_exp(m[r] - mn);
        float sum = 0.0f;
        for (int64_t t = 0; t < n; t++) {
            float s = st[t * rp + r];
            float p = s != -INFINITY ? mla_exp(s - mn) : 0.0f;
            st[t * rp + r] = p;
            sum = sum + p;
        }
        l[r] = l[r] * a + sum;
        m[r] = mn;
        alpha[r] = a;
    }
}

static void pv_generic(const float *st, int64_t rp, const float *v, int64_t vstride, int64_t n,
                       const float *alpha, float *o, const void *const *pf, int64_t npf) {
    (void)pf, (void)npf; /* prefetch hints: the reference path needs no speed */
    for (int64_t r = 0; r < rp; r++) {
        float *orow = o + r * TS__MLA_DV;
        for (int64_t c = 0; c < TS__MLA_DV; c++) {
            float acc = orow[c] * alpha[r];
            for (int64_t t = 0; t < n; t++) acc = fmaf(st[t * rp + r], v[t * vstride + c], acc);
            orow[c] = acc;
        }
    }
}

/* upstream's SM90 FP8 path multiplies bf16(e4m3) by the scale converted to bf16 in bf16
 * arithmetic, so both the scale and the product are rounded to bf16 (the product of a 4-bit and
 * an 8-bit significand is exact in f32, so one f32 multiply then one rounding is that bf16
 * multiply). With a power-of-two scale both roundings are exact. */
static float bf16_round(float x) { return ts_bf16_to_f32(ts_f32_to_bf16(x)); }

static void dec_v32_generic(const uint8_t *tok, float *dst) {
    for (int j = 0; j < 4; j++) {
        float sc;
        memcpy(&sc, tok + 512 + 4 * j, 4);
        sc = bf16_round(sc);
        for (int i = 0; i < 128; i++)
            dst[128 * j + i] = bf16_round(ts_e4m3_to_f32(tok[128 * j + i]) * sc);
    }
    for (int i = 0; i < 64; i++) {
        uint16_t h;
        memcpy(&h, tok + 528 + 2 * i, 2);
        dst[512 + i] = ts_bf16_to_f32(h);
    }
}

static void dec_model1_generic(const uint8_t *data, const uint8_t *scales, float *dst) {
    for (int j = 0; j < 7; j++) {
        float sc = bf16_round(ts_ue8m0_to_f32(scales[j]));
        for (int i = 0; i < 64; i++)
            dst[64 * j + i] = bf16_round(ts_e4m3_to_f32(data[64 * j + i]) * sc);
    }
    for (int i = 0; i < 64; i++) {
        uint16_t h;
        memcpy(&h, data + 448 + 2 * i, 2);
        dst[448 + i] = ts_bf16_to_f32(h);
    }
}

static void dec_bf16_generic(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + i, 2);
        dst[i] = ts_bf16_to_f32(h);
    }
}

static void row_to_bf16_generic(const float *o, float f, uint16_t *out) {
    for (int c = 0; c < TS__MLA_DV; c++) out[c] = ts_f32_to_bf16(o[c] * f);
}

static void row_axpy_generic(const float *x, float w, float *y) {
    for (int c = 0; c < TS__MLA_DV; c++) y[c] = y[c] + x[c] * w;
}

const ts__mla_kernels ts__mla_kernels_generic = {
    qk_generic,       softmax_generic,    pv_generic,          dec_v32_generic,
    dec_model1_generic, dec_bf16_generic, row_to_bf16_generic, row_axpy_generic,
};
