/* The reference's own generator of docs/model.md §2: splitmix64 streams seeded per tensor
 * name, values in f32, then the public quantisers (ts_per_block_cast_to_fp8,
 * ts_per_token_cast_to_fp4) and bf16 RNE. Tensors are kept dequantised in float64 (code x
 * scale, exact), and the stored bytes are hashed (fnv1a64) for the golden comparison. */
#include "model_ref/model_ref_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "tilestack/numerics.h"
#include "tilestack/quant.h"

enum { SUM_F32 = 0, SUM_BF16 = 1, SUM_E4M3 = 2, SUM_FP4 = 3, SUM_I32 = 4 };

static uint64_t fnv1a64(const void *data, size_t n) {
    const unsigned char *b = (const unsigned char *)data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t splitmix_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct gen {
    ts_model_reference *r;
    ts_status st;
    float *buf;      /* f32 values of the tensor being made */
    size_t buf_cap;
} gen;

static uint64_t stream_seed(const gen *g, const char *name) {
    return fnv1a64(name, strlen(name)) ^ (g->r->cfg.seed * 0x9E3779B97F4A7C15ull);
}

static float *values_buf(gen *g, int64_t n) {
    if ((size_t)n > g->buf_cap) {
        free(g->buf);
        g->buf = malloc((size_t)n * sizeof(float));
        g->buf_cap = g->buf ? (size_t)n : 0;
        if (!g->buf) g->st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_reference_create: weights");
    }
    return g->buf;
}

/* u_i = ((z_{i+1} >> 40) - 2^23) * 2^-23, exact in f32. */
static float *uniform(gen *g, const char *name, int64_t n) {
    float *u = values_buf(g, n);
    if (!u) return NULL;
    uint64_t s = stream_seed(g, name);
    for (int64_t i = 0; i < n; i++)
        u[i] = (float)((int32_t)(splitmix_next(&s) >> 40) - (1 << 23)) * (1.0f / (float)(1 << 23));
    return u;
}

static void add_sum(gen *g, const char *name, const char *suffix, int32_t dtype,
                    const void *bytes, int64_t nbytes) {
    ts_model_reference *r = g->r;
    if (g->st != TS_OK) return;
    if (r->n_sums == r->cap_sums) {
        int64_t cap = r->cap_sums ? 2 * r->cap_sums : 256;
        ts__model_checksum *p = realloc(r->sums, (size_t)cap * sizeof(*p));
        if (!p) {
            g->st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_reference_create: checksums");
            return;
        }
        r->sums = p;
        r->cap_sums = cap;
    }
    ts__model_checksum *c = &r->sums[r->n_sums++];
    memset(c, 0, sizeof(*c));
    snprintf(c->name, sizeof(c->name), "%s%s", name, suffix);
    c->dtype = dtype;
    c->nbytes = nbytes;
    c->fnv1a64 = fnv1a64(bytes, (size_t)nbytes);
}

static double *mat_alloc(gen *g, ts__ref_mat *m, int64_t rows, int64_t cols) {
    m->rows = rows;
    m->cols = cols;
    m->v = g->st == TS_OK ? malloc((size_t)(rows * cols) * sizeof(double)) : NULL;
    if (!m->v && g->st == TS_OK)
        g->st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_reference_create: weights");
    return m->v;
}

/* f32 tensor whose values are already in g->buf. */
static void store_f32(gen *g, const char *name, ts__ref_mat *m, int64_t rows, int64_t cols) {
    double *v = mat_alloc(g, m, rows, cols);
    if (!v) return;
    for (int64_t i = 0; i < rows * cols; i++) v[i] = g->buf[i];
    add_sum(g, name, "", SUM_F32, g->buf, rows * cols * 4);
}

/* Linear-layer values u * f32(1 / sqrt(in)) into g->buf. */
static float *linear_values(gen *g, const char *name, int64_t rows, int64_t cols) {
    float *u = uniform(g, name, rows * cols);
    if (!u) return NULL;
    const float c = (float)(1.0 / sqrt((double)cols));
    for (int64_t i = 0; i < rows * cols; i++) u[i] = u[i] * c;
    return u;
}

static void gen_f32_linear(gen *g, const char *name, ts__ref_mat *m, int64_t rows, int64_t cols) {
    if (g->st != TS_OK || !linear_values(g, name, rows, cols)) return;
    store_f32(g, name, m, rows, cols);
}

/* f32 tensor a + u * b (norm weights 1 + u/8, ape u/4, ...), each step in f32. */
static void gen_affine(gen *g, const char *name, ts__ref_mat *m, int64_t rows, int64_t cols,
                       float a, float b) {
    if (g->st != TS_OK) return;
    float *u = uniform(g, name, rows * cols);
    if (!u) return;
    for (int64_t i = 0; i < rows * cols; i++) u[i] = a + u[i] * b;
    store_f32(g, name, m, rows, cols);
}

static void gen_bf16(gen *g, const char *name, ts__ref_mat *m, int64_t rows, int64_t cols,
                     int linear) {
    if (g->st != TS_OK) return;
    float *u = linear ? linear_values(g, name, rows, cols) : uniform(g, name, rows * cols);
    double *v = u ? mat_alloc(g, m, rows, cols) : NULL;
    uint16_t *h = v ? malloc((size_t)(rows * cols) * 2) : NULL;
    if (!h) {
        if (v && g->st == TS_OK)
            g->st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_reference_create: weights");
        return;
    }
    for (int64_t i = 0; i < rows * cols; i++) {
        h[i] = ts_f32_to_bf16(u[i]);
        v[i] = ts_bf16_to_f32(h[i]);
    }
    add_sum(g, name, "", SUM_BF16, h, rows * cols * 2);
    free(h);
}

static void gen_fp8(gen *g, const char *name, ts__ref_mat *m, int64_t rows, int64_t cols) {
    if (g->st != TS_OK) return;
    float *w = linear_values(g, name, rows, cols);
    double *v = w ? mat_alloc(g, m, rows, cols) : NULL;
    if (!v) return;
    const int64_t sr = ts__ceil_div(rows, 128), sc = ts__ceil_div(cols, 128);
    uint8_t *q = malloc((size_t)(rows * cols));
    float *sf = malloc((size_t)(sr * sc) * sizeof(float));
    if (!q || !sf) {
        g->st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_reference_create: weights");
    } else {
        ts_tensor x = ts_tensor_2d(w, TS_F32, rows, cols);
        ts_tensor xq = ts_tensor_2d(q, TS_E4M3, rows, cols);
        ts_tensor xs = ts_tensor_2d(sf, TS_F32, sr, sc);
        g->st = ts_per_block_cast_to_fp8(&x, true, 128, &xq, &xs);
        if (g->st == TS_OK) {
            for (int64_t i = 0; i < rows; i++)
                for (int64_t j = 0; j < cols; j++)
                    v[i * cols + j] = (double)ts_e4m3_to_f32(q[i * cols + j]) *
                                      (double)sf[(i / 128) * sc + j / 128];
            add_sum(g, name, "", SUM_E4M3, q, rows * cols);
            add_sum(g, name, ".scale", SUM_F32, sf, sr * sc * 4);
        }
    }
    free(q);
    free(sf);
}

static void gen_fp4(gen *g, const char *name, ts__ref_mat *m, int64_t rows, int64_t cols) {
    if (g->st != TS_OK) return;
    float *w = linear_values(g, name, rows, cols);
    double *v = w ? mat_alloc(g, m, rows, cols) : NULL;
    if (!v) return;
    const int64_t sc = cols / 32;
    uint8_t *q = malloc((size_t)(rows * cols / 2));
    float *sf = malloc((size_t)(rows * sc) * sizeof(float));
    if (!q || !sf) {
        g->st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_reference_create: weights");
    } else {
        ts_tensor x = ts_tensor_2d(w, TS_F32, rows, cols);
        ts_tensor xq = ts_tensor_2d(q, TS_E2M1X2, rows, cols / 2);
        ts_tensor xs = ts_tensor_2d(sf, TS_F32, rows, sc);
        g->st = ts_per_token_cast_to_fp4(&x, true, 32, false, TS__REF_FP4_ROUNDING, &xq, &xs);
        if (g->st == TS_OK) {
            for (int64_t i = 0; i < rows; i++)
                for (int64_t j = 0; j < cols; j++) {
                    uint8_t b = q[(i * cols + j) / 2];
                    uint8_t code = (j & 1) ? (uint8_t)(b >> 4) : (uint8_t)(b & 0xF);
                    v[i * cols + j] = (double)ts_e2m1_to_f32(code) * (double)sf[i * sc + j / 32];
                }
            add_sum(g, name, "", SUM_FP4, q, rows * cols / 2);
            add_sum(g, name, ".scale", SUM_F32, sf, rows * sc * 4);
        }
    }
    free(q);
    free(sf);
}

static void gen_hc(gen *g, const char *prefix, ts__ref_mat *fn, ts__ref_mat *base,
                   ts__ref_mat *scale, int64_t rows, int64_t n_scale) {
    const ts_model_config *c = &g->r->cfg;
    char name[80];
    const float fc = (float)(1.0 / sqrt((double)(c->hc_mult * c->dim)));
    snprintf(name, sizeof(name), "%s_fn", prefix);
    gen_affine(g, name, fn, rows, c->hc_mult * c->dim, 0.0f, fc);
    snprintf(name, sizeof(name), "%s_base", prefix);
    gen_affine(g, name, base, 1, rows, 0.0f, 0.25f);
    snprintf(name, sizeof(name), "%s_scale", prefix);
    gen_affine(g, name, scale, 1, n_scale, 0.5f, 0.25f);
}

static void gen_tid2eid(gen *g, const char *name, ts__ref_layer *ly) {
    const ts_model_config *c = &g->r->cfg;
    if (g->st != TS_OK) return;
    const int64_t V = c->vocab_size, K = c->n_activated_experts, E = c->n_routed_experts;
    ly->tid2eid = malloc((size_t)(V * K) * sizeof(int32_t));
    if (!ly->tid2eid) {
        g->st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_reference_create: weights");
        return;
    }
    uint64_t s = stream_seed(g, name);
    for (int64_t v = 0; v < V; v++) {
        const uint64_t b = splitmix_next(&s) % (uint64_t)E;
        for (int64_t j = 0; j < K; j++) ly->tid2eid[v * K + j] = (int32_t)((b + (uint64_t)j) % (uint64_t)E);
    }
    add_sum(g, name, "", SUM_I32, ly->tid2eid, V * K * 4);
}

static void gen_layer(gen *g, int64_t L) {
    const ts_model_config *c = &g->r->cfg;
    ts__ref_layer *ly = &g->r->layers[L];
    const int64_t D = c->dim, hc = c->hc_mult, H = c->n_heads, QL = c->q_lora_rank;
    const int64_t E = c->n_routed_experts, I = c->moe_inter_dim, IH = c->index_n_heads;
    const int32_t r = ly->ratio;
    char n[80];
#define NAME(...) (snprintf(n, sizeof(n), __VA_ARGS__), n)
    gen_hc(g, NAME("%lld.hc_attn", (long long)L), &ly->hc_attn_fn, &ly->hc_attn_base,
           &ly->hc_attn_scale, (2 + hc) * hc, 3);
    gen_affine(g, NAME("%lld.attn_norm", (long long)L), &ly->attn_norm, 1, D, 1.0f, 0.125f);
    gen_hc(g, NAME("%lld.hc_ffn", (long long)L), &ly->hc_ffn_fn, &ly->hc_ffn_base,
           &ly->hc_ffn_scale, (2 + hc) * hc, 3);
    gen_affine(g, NAME("%lld.ffn_norm", (long long)L), &ly->ffn_norm, 1, D, 1.0f, 0.125f);
    if (c->attention == TS_MODEL_ATTN_V32) { /* §8 */
        gen_fp8(g, NAME("%lld.attn.wq_a", (long long)L), &ly->wq_a, QL, D);
        gen_affine(g, NAME("%lld.attn.q_norm", (long long)L), &ly->q_norm, 1, QL, 1.0f, 0.125f);
        gen_fp8(g, NAME("%lld.attn.wq_b", (long long)L), &ly->wq_b, H * 192, QL);
        gen_fp8(g, NAME("%lld.attn.wkv_a", (long long)L), &ly->wkv_a, 576, D);
        gen_affine(g, NAME("%lld.attn.kv_norm", (long long)L), &ly->kv_norm, 1, 512, 1.0f, 0.125f);
        gen_fp8(g, NAME("%lld.attn.wkv_b", (long long)L), &ly->wkv_b, H * 256, 512);
        gen_fp8(g, NAME("%lld.attn.wo", (long long)L), &ly->wo, D, H * 128);
        gen_fp8(g, NAME("%lld.attn.indexer.wq_b", (long long)L), &ly->i_wq_b, IH * 128, QL);
        gen_fp8(g, NAME("%lld.attn.indexer.wk", (long long)L), &ly->i_wk, 128, D);
        gen_affine(g, NAME("%lld.attn.indexer.k_norm", (long long)L), &ly->i_k_norm, 1, 128, 1.0f,
                   0.125f);
        gen_affine(g, NAME("%lld.attn.indexer.k_norm_bias", (long long)L), &ly->i_k_norm_bias, 1,
                   128, 0.0f, 0.0625f);
        gen_bf16(g, NAME("%lld.attn.indexer.weights_proj", (long long)L), &ly->i_weights_proj, IH,
                 D, 1);
    } else {
    gen_fp8(g, NAME("%lld.attn.wq_a", (long long)L), &ly->wq_a, QL, D);
    gen_affine(g, NAME("%lld.attn.q_norm", (long long)L), &ly->q_norm, 1, QL, 1.0f, 0.125f);
    gen_fp8(g, NAME("%lld.attn.wq_b", (long long)L), &ly->wq_b, H * 512, QL);
    gen_fp8(g, NAME("%lld.attn.wkv", (long long)L), &ly->wkv, 512, D);
    gen_affine(g, NAME("%lld.attn.kv_norm", (long long)L), &ly->kv_norm, 1, 512, 1.0f, 0.125f);
    gen_affine(g, NAME("%lld.attn.attn_sink", (long long)L), &ly->attn_sink, 1, H, 0.0f, 1.0f);
    gen_fp8(g, NAME("%lld.attn.wo_a", (long long)L), &ly->wo_a, c->o_groups * c->o_lora_rank,
            (H / c->o_groups) * 512);
    gen_fp8(g, NAME("%lld.attn.wo_b", (long long)L), &ly->wo_b, D, c->o_groups * c->o_lora_rank);
    if (r > 0) {
        const int64_t coff = r == 4 ? 2 : 1;
        gen_f32_linear(g, NAME("%lld.attn.compressor.wkv", (long long)L), &ly->c_wkv, coff * 512, D);
        gen_f32_linear(g, NAME("%lld.attn.compressor.wgate", (long long)L), &ly->c_wgate,
                       coff * 512, D);
        gen_affine(g, NAME("%lld.attn.compressor.ape", (long long)L), &ly->c_ape, r, coff * 512,
                   0.0f, 0.25f);
        gen_affine(g, NAME("%lld.attn.compressor.norm", (long long)L), &ly->c_norm, 1, 512, 1.0f,
                   0.125f);
    }
    if (r == 4) {
        gen_fp8(g, NAME("%lld.attn.indexer.wq_b", (long long)L), &ly->i_wq_b, IH * 128, QL);
        gen_bf16(g, NAME("%lld.attn.indexer.weights_proj", (long long)L), &ly->i_weights_proj, IH,
                 D, 1);
        gen_f32_linear(g, NAME("%lld.attn.indexer.compressor.wkv", (long long)L), &ly->ic_wkv,
                       2 * 128, D);
        gen_f32_linear(g, NAME("%lld.attn.indexer.compressor.wgate", (long long)L), &ly->ic_wgate,
                       2 * 128, D);
        gen_affine(g, NAME("%lld.attn.indexer.compressor.ape", (long long)L), &ly->ic_ape, 4,
                   2 * 128, 0.0f, 0.25f);
        gen_affine(g, NAME("%lld.attn.indexer.compressor.norm", (long long)L), &ly->ic_norm, 1,
                   128, 1.0f, 0.125f);
    }
    }
    gen_f32_linear(g, NAME("%lld.ffn.gate.weight", (long long)L), &ly->gate_w, E, D);
    if (L < c->n_hash_layers)
        gen_tid2eid(g, NAME("%lld.ffn.gate.tid2eid", (long long)L), ly);
    else
        gen_affine(g, NAME("%lld.ffn.gate.bias", (long long)L), &ly->gate_bias, 1, E, 0.0f,
                   0.0625f);
    ly->w1 = calloc((size_t)E, sizeof(ts__ref_mat));
    ly->w3 = calloc((size_t)E, sizeof(ts__ref_mat));
    ly->w2 = calloc((size_t)E, sizeof(ts__ref_mat));
    if ((!ly->w1 || !ly->w2 || !ly->w3) && g->st == TS_OK)
        g->st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_reference_create: weights");
    for (int64_t e = 0; e < E && g->st == TS_OK; e++) {
        gen_fp4(g, NAME("%lld.ffn.experts.%lld.w1", (long long)L, (long long)e), &ly->w1[e], I, D);
        gen_fp4(g, NAME("%lld.ffn.experts.%lld.w3", (long long)L, (long long)e), &ly->w3[e], I, D);
        gen_fp4(g, NAME("%lld.ffn.experts.%lld.w2", (long long)L, (long long)e), &ly->w2[e], D, I);
    }
    gen_fp8(g, NAME("%lld.ffn.shared.w1", (long long)L), &ly->s_w1, I, D);
    gen_fp8(g, NAME("%lld.ffn.shared.w3", (long long)L), &ly->s_w3, I, D);
    gen_fp8(g, NAME("%lld.ffn.shared.w2", (long long)L), &ly->s_w2, D, I);
#undef NAME
}

ts_status ts__ref_generate_weights(ts_model_reference *r) {
    const ts_model_config *c = &r->cfg;
    gen g = {r, TS_OK, NULL, 0};
    /* embed values are bf16(u) (not scaled), head is a linear layer */
    gen_bf16(&g, "embed", &r->embed, c->vocab_size, c->dim, 0);
    for (int64_t L = 0; L < c->n_layers && g.st == TS_OK; L++) gen_layer(&g, L);
    gen_affine(&g, "norm", &r->norm, 1, c->dim, 1.0f, 0.125f);
    gen_hc(&g, "hc_head", &r->hc_head_fn, &r->hc_head_base, &r->hc_head_scale, c->hc_mult, 1);
    gen_bf16(&g, "head", &r->head, c->vocab_size, c->dim, 1);
    free(g.buf);
    return g.st;
}

void ts__ref_free_weights(ts_model_reference *r) {
    free(r->embed.v);
    free(r->norm.v);
    free(r->hc_head_fn.v);
    free(r->hc_head_base.v);
    free(r->hc_head_scale.v);
    free(r->head.v);
    if (r->layers) {
        for (int64_t L = 0; L < r->cfg.n_layers; L++) {
            ts__ref_layer *ly = &r->layers[L];
            ts__ref_mat *mats[] = {&ly->hc_attn_fn, &ly->hc_attn_base, &ly->hc_attn_scale,
                                   &ly->hc_ffn_fn, &ly->hc_ffn_base, &ly->hc_ffn_scale,
                                   &ly->attn_norm, &ly->ffn_norm, &ly->wq_a, &ly->q_norm,
                                   &ly->wq_b, &ly->wkv, &ly->kv_norm, &ly->attn_sink, &ly->wo_a,
                                   &ly->wo_b, &ly->c_wkv, &ly->c_wgate, &ly->c_ape, &ly->c_norm,
                                   &ly->i_wq_b, &ly->i_weights_proj, &ly->ic_wkv, &ly->ic_wgate,
                                   &ly->ic_ape, &ly->ic_norm, &ly->gate_w, &ly->gate_bias,
                                   &ly->s_w1, &ly->s_w3, &ly->s_w2, &ly->wkv_a, &ly->wkv_b,
                                   &ly->wo, &ly->i_wk, &ly->i_k_norm, &ly->i_k_norm_bias};
            for (size_t i = 0; i < sizeof(mats) / sizeof(mats[0]); i++) free(mats[i]->v);
            for (int64_t e = 0; e < r->cfg.n_routed_experts; e++) {
                if (ly->w1) free(ly->w1[e].v);
                if (ly->w3) free(ly->w3[e].v);
                if (ly->w2) free(ly->w2[e].v);
            }
            free(ly->w1);
            free(ly->w3);
            free(ly->w2);
            free(ly->tid2eid);
        }
    }
    free(r->sums);
    r->sums = NULL;
    r->n_sums = r->cap_sums = 0;
}

void ts__model_reference_checksums(const ts_model_reference *r, const ts__model_checksum **sums,
                                   int64_t *n) {
    *sums = r->sums;
    *n = r->n_sums;
}
