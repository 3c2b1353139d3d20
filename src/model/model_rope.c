/* RoPE (docs/model.md §4 "RoPE"): frequencies in float64 (YaRN for compressed layers),
 * cos / sin per position in float64 rounded to f32, rotation in f32 without contraction. */
#include "model_internal.h"

#include <math.h>

void ts__model_yarn_freqs(const ts_model_config *c, bool compressed, double freq[32]) {
    const double base = compressed ? c->compress_rope_theta : c->rope_theta;
    for (int i = 0; i < 32; i++) freq[i] = pow(base, -2.0 * i / 64.0);
    if (!compressed) return;
    const double pi = 3.14159265358979323846;
#define YARN_D(b) (64.0 * log((double)c->original_seq_len / (2.0 * pi * (double)(b))) / (2.0 * log(base)))
    double low = floor(YARN_D(c->beta_fast));
    if (low < 0) low = 0;
    double high = ceil(YARN_D(c->beta_slow));
    if (high > 63) high = 63;
#undef YARN_D
    if (low == high) high += 0.001;
    for (int i = 0; i < 32; i++) {
        double s = ((double)i - low) / (high - low);
        if (s < 0) s = 0;
        if (s > 1) s = 1;
        freq[i] = freq[i] / c->rope_factor * s + freq[i] * (1 - s);
    }
}

ts_status ts__model_rope_tables(ts_model *m) {
    const int64_t P = m->cfg.max_seq_len;
    for (int k = 0; k < 2; k++) {
        m->rope_cos[k] = (float *)malloc((size_t)(P * 32) * sizeof(float));
        m->rope_sin[k] = (float *)malloc((size_t)(P * 32) * sizeof(float));
        if (!m->rope_cos[k] || !m->rope_sin[k])
            return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_create: out of memory (RoPE)");
        double freq[32];
        ts__model_yarn_freqs(&m->cfg, k == 1, freq);
        for (int64_t p = 0; p < P; p++)
            for (int i = 0; i < 32; i++) {
                double th = (double)p * freq[i];
                m->rope_cos[k][p * 32 + i] = (float)cos(th);
                m->rope_sin[k][p * 32 + i] = (float)sin(th);
            }
    }
    return TS_OK;
}

void ts__model_rope(const float *cs, const float *sn, double *x, bool inverse) {
    for (int i = 0; i < 32; i++) {
        const double c = cs[i], s = inverse ? -(double)sn[i] : (double)sn[i];
        const double a = x[2 * i], b = x[2 * i + 1];
        x[2 * i] = a * c - b * s;
        x[2 * i + 1] = a * s + b * c;
    }
}
