/* MQA logits kernels in portable C: the canonical order itself (mqa_logits_internal.h). */
#include "attention/mqa_logits_internal.h"
#include "tilestack/numerics.h"

#include <math.h>

static void heads_generic(const float *qt, const float *w, int64_t hp, int64_t d,
                          const float *k, int64_t n, float *part, float *v) {
    for (int64_t j = 0; j < n; j++) {
        const float *kj = k + j * d;
        float *p = part + j * 8;
        for (int l = 0; l < 8; l++) p[l] = 0.0f;
        for (int64_t c = 0; c < hp / 8; c++) {
            const float *slab = qt + (c / 2) * d * TS__MQA_HB + (c % 2) * 8;
            for (int l = 0; l < 8; l++) {
                float s = 0.0f;
                for (int64_t dd = 0; dd < d; dd++) s = fmaf(slab[dd * TS__MQA_HB + l], kj[dd], s);
                /* as _mm256_max_ps(s, 0): NaN and -0 give +0 */
                float r = s > 0.0f ? s : 0.0f;
                p[l] = fmaf(r, w[c * 8 + l], p[l]);
            }
        }
        v[j] = ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]));
    }
}

static void decode_generic(const uint8_t *src, int64_t row_bytes, int64_t n, int64_t d, int fp4,
                           const float *sf, int64_t sf_ld, float *dst) {
    for (int64_t j = 0; j < n; j++) {
        const uint8_t *s = src + j * row_bytes;
        float *o = dst + j * d;
        for (int64_t dd = 0; dd < d; dd++) {
            float x;
            if (fp4) {
                uint8_t code = (uint8_t)((s[dd / 2] >> (4 * (dd & 1))) & 0xF);
                x = code == 8 ? 0.0f : ts_e2m1_to_f32(code);
            } else {
                x = ts_e4m3_to_f32(s[dd]);
            }
            if (sf) x *= sf[j * sf_ld + dd / 32];
            o[dd] = x;
        }
    }
}

const ts__mqa_kernels ts__mqa_kernels_generic = {"generic", heads_generic, decode_generic};
