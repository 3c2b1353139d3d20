/* The values of a loaded weight file (docs/model.md §2 "File format", the loader's checks).
 * The header checks make every tensor the right size; these make its contents safe to compute
 * with: a hash-routing table entry is an expert index (an out-of-range one is an out-of-bounds
 * write in the MoE), an FP8 / FP4 scale must be the ue8m0 power of two the GEMMs decode, and a
 * NaN or infinity in a norm, an embedding row or a gate would surface steps later, in another
 * kernel, naming neither the file nor the tensor. Every error names both, and the element. */
#include "model_internal.h"

#include <math.h>

/* val: the element as text (a float, an id or an e4m3 code); rule: what it should be. */
static ts_status bad_value(const char *path, const ts__mtensor *t, int64_t i, const char *val,
                           const char *rule) {
    char where[48];
    if (t->ndim == 2)
        snprintf(where, sizeof where, "[%lld, %lld]", (long long)(i / t->shape[1]),
                 (long long)(i % t->shape[1]));
    else snprintf(where, sizeof where, "[%lld]", (long long)i);
    return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_model_load: %s: tensor %s: element %s = %s: %s",
                    path, t->name, where, val, rule);
}

static const char *f_str(double v, char buf[32]) {
    snprintf(buf, 32, "%.10g", v); /* every int32 id exactly, f32 values to 9+ digits */
    return buf;
}

static int64_t numel(const ts__mtensor *t) {
    return t->shape[0] * (t->ndim == 2 ? t->shape[1] : 1);
}

static ts_status finite_f32(const char *path, const ts__mtensor *t) {
    const float *p = (const float *)t->data;
    for (int64_t i = 0, n = numel(t); i < n; i++)
        if (!isfinite(p[i]))
            return bad_value(path, t, i, f_str(p[i], (char[32]){0}), "values must be finite");
    return TS_OK;
}

static ts_status finite_bf16(const char *path, const ts__mtensor *t) {
    const uint16_t *p = (const uint16_t *)t->data;
    for (int64_t i = 0, n = numel(t); i < n; i++)
        if ((p[i] & 0x7F80) == 0x7F80) /* exponent all ones: inf or NaN */
            return bad_value(path, t, i, f_str(ts__bf16_to_f32_inl(p[i]), (char[32]){0}),
                             "values must be finite");
    return TS_OK;
}

/* e4m3fn has no infinity; 0x7F / 0xFF are its NaN */
static ts_status finite_e4m3(const char *path, const ts__mtensor *t) {
    const uint8_t *p = (const uint8_t *)t->data;
    for (int64_t i = 0, n = numel(t); i < n; i++)
        if ((p[i] & 0x7F) == 0x7F) {
            char code[32];
            snprintf(code, sizeof code, "code 0x%02x", p[i]);
            return bad_value(path, t, i, code, "an e4m3 NaN code (weights must be finite)");
        }
    return TS_OK;
}

/* §2: scales are ue8m0, stored as f32: 2^(e-127) for e in [0, 254] */
static ts_status pow2_scales(const char *path, const ts__mtensor *t) {
    const float *p = (const float *)t->data;
    for (int64_t i = 0, n = numel(t); i < n; i++)
        if (ts_f32_to_ue8m0(p[i]) == 255)
            return bad_value(path, t, i, f_str(p[i], (char[32]){0}),
                             "scales must be positive powers of two in [2^-127, 2^127] (ue8m0, "
                             "docs/model.md §2)");
    return TS_OK;
}

/* Hash routing (§4 MoE step 1): row v lists token v's top-k experts. Each is an index into the
 * layer's E experts, and they are distinct: the gate's own top-k never repeats an expert, the
 * single-process MoE sizes each expert's group for one row per token, and Mega MoE refuses a
 * token that lists an expert twice. */
static ts_status check_tid2eid(const char *path, const ts_model_config *c, const ts__mtensor *t) {
    const int32_t *p = (const int32_t *)t->data;
    const int64_t E = c->n_routed_experts, K = t->shape[1];
    for (int64_t v = 0; v < t->shape[0]; v++)
        for (int64_t j = 0; j < K; j++) {
            const int32_t e = p[v * K + j];
            if (e < 0 || e >= E) {
                char rule[96];
                snprintf(rule, sizeof rule, "expert ids must be in [0, n_routed_experts = %lld)",
                         (long long)E);
                return bad_value(path, t, v * K + j, f_str(e, (char[32]){0}), rule);
            }
            for (int64_t k = 0; k < j; k++)
                if (p[v * K + k] == e) {
                    char rule[128];
                    snprintf(rule, sizeof rule, "expert %d is listed twice for token %lld (a "
                             "token's top-k experts must be distinct)", (int)e, (long long)v);
                    return bad_value(path, t, v * K + j, f_str(e, (char[32]){0}), rule);
                }
        }
    return TS_OK;
}

ts_status ts__model_check_values(const char *path, const ts_model_config *cfg,
                                 const ts__wspec *s, const ts__mtensor rec[2]) {
    switch (s->kind) {
    case TS__W_FP8:
        TS__RETURN_IF_ERROR(finite_e4m3(path, &rec[0]));
        return pow2_scales(path, &rec[1]);
    case TS__W_FP4: /* every e2m1 code is a finite value */
        return pow2_scales(path, &rec[1]);
    case TS__W_EMBED:
    case TS__W_BF16LIN:
        return finite_bf16(path, &rec[0]);
    case TS__W_TID2EID:
        return check_tid2eid(path, cfg, &rec[0]);
    default:
        return finite_f32(path, &rec[0]);
    }
}
