/* Weights (docs/model.md §2): the tensor list, generation from the seed, quantisation with
 * tilestack's quantisers, and binding the stored records to the layouts the kernels take. */
#include "model_internal.h"

#include "tilestack/quant.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <unistd.h>

#define GOLDEN 0x9E3779B97F4A7C15ull

uint64_t ts__model_fnv1a64(const void *data, size_t n) {
    const unsigned char *b = (const unsigned char *)data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

uint64_t ts__model_tensor_seed(const char *name, uint64_t seed) {
    return ts__model_fnv1a64(name, strlen(name)) ^ (seed * GOLDEN);
}

/* Output i+1 of splitmix64 seeded with s (random access: the state after i+1 steps). */
static inline uint64_t sm_at(uint64_t s, uint64_t i) {
    uint64_t z = s + (i + 1) * GOLDEN;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline float u_at(uint64_t s, uint64_t i) {
    return (float)((int64_t)(sm_at(s, i) >> 40) - (1 << 23)) * (1.0f / (float)(1 << 23));
}

/* ---- the list */

typedef struct speclist { ts__wspec *v; int64_t n, cap; ts_status st; } speclist;

static void add(speclist *l, ts__wkind kind, int64_t d0, int64_t d1, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

#include <stdarg.h>
static void add(speclist *l, ts__wkind kind, int64_t d0, int64_t d1, const char *fmt, ...) {
    if (l->st != TS_OK) return;
    if (l->n == l->cap) {
        int64_t nc = l->cap ? l->cap * 2 : 256;
        ts__wspec *nv = (ts__wspec *)realloc(l->v, (size_t)nc * sizeof *nv);
        if (!nv) {
            l->st = ts__fail(TS_ERR_OUT_OF_MEMORY, "model weights: out of memory");
            return;
        }
        l->v = nv;
        l->cap = nc;
    }
    ts__wspec *s = &l->v[l->n++];
    memset(s, 0, sizeof *s);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->name, sizeof s->name, fmt, ap);
    va_end(ap);
    s->kind = kind;
    s->ndim = d1 > 0 ? 2 : 1;
    s->shape[0] = d0;
    s->shape[1] = d1 > 0 ? d1 : 0;
}

ts_status ts__model_weight_specs(const ts_model_config *c, ts__wspec **specs, int64_t *count) {
    speclist l = {0};
    const int64_t D = c->dim, hc = c->hc_mult, nmix = (2 + hc) * hc, H = c->n_heads;
    const int64_t E = c->n_routed_experts, I = c->moe_inter_dim;
    add(&l, TS__W_EMBED, c->vocab_size, D, "embed");
    for (int64_t L = 0; L < c->n_layers; L++) {
        const int64_t r = c->compress_ratios[L];
        const char *sub[2] = {"attn", "ffn"};
        for (int i = 0; i < 2; i++) {
            add(&l, TS__W_HC_FN, nmix, hc * D, "%lld.hc_%s_fn", (long long)L, sub[i]);
            add(&l, TS__W_HC_BASE, nmix, 0, "%lld.hc_%s_base", (long long)L, sub[i]);
            add(&l, TS__W_HC_SCALE, 3, 0, "%lld.hc_%s_scale", (long long)L, sub[i]);
        }
        add(&l, TS__W_NORM, D, 0, "%lld.attn_norm", (long long)L);
        add(&l, TS__W_NORM, D, 0, "%lld.ffn_norm", (long long)L);
        if (c->attention == TS_MODEL_ATTN_V32) {
            /* §8: MLA (nope 128 + rope 64 per head, v 128) and the V3.2 indexer */
            const int64_t QL = c->q_lora_rank, IH = c->index_n_heads;
            add(&l, TS__W_FP8, QL, D, "%lld.attn.wq_a", (long long)L);
            add(&l, TS__W_NORM, QL, 0, "%lld.attn.q_norm", (long long)L);
            add(&l, TS__W_FP8, H * 192, QL, "%lld.attn.wq_b", (long long)L);
            add(&l, TS__W_FP8, 576, D, "%lld.attn.wkv_a", (long long)L);
            add(&l, TS__W_NORM, 512, 0, "%lld.attn.kv_norm", (long long)L);
            add(&l, TS__W_FP8, H * 256, 512, "%lld.attn.wkv_b", (long long)L);
            add(&l, TS__W_FP8, D, H * 128, "%lld.attn.wo", (long long)L);
            add(&l, TS__W_FP8, IH * 128, QL, "%lld.attn.indexer.wq_b", (long long)L);
            add(&l, TS__W_FP8, 128, D, "%lld.attn.indexer.wk", (long long)L);
            add(&l, TS__W_NORM, 128, 0, "%lld.attn.indexer.k_norm", (long long)L);
            add(&l, TS__W_BIAS, 128, 0, "%lld.attn.indexer.k_norm_bias", (long long)L);
            add(&l, TS__W_BF16LIN, IH, D, "%lld.attn.indexer.weights_proj", (long long)L);
        } else {
        add(&l, TS__W_FP8, c->q_lora_rank, D, "%lld.attn.wq_a", (long long)L);
        add(&l, TS__W_NORM, c->q_lora_rank, 0, "%lld.attn.q_norm", (long long)L);
        add(&l, TS__W_FP8, H * 512, c->q_lora_rank, "%lld.attn.wq_b", (long long)L);
        add(&l, TS__W_FP8, 512, D, "%lld.attn.wkv", (long long)L);
        add(&l, TS__W_NORM, 512, 0, "%lld.attn.kv_norm", (long long)L);
        add(&l, TS__W_SINK, H, 0, "%lld.attn.attn_sink", (long long)L);
        add(&l, TS__W_FP8, c->o_groups * c->o_lora_rank, (H / c->o_groups) * 512,
            "%lld.attn.wo_a", (long long)L);
        add(&l, TS__W_FP8, D, c->o_groups * c->o_lora_rank, "%lld.attn.wo_b", (long long)L);
        if (r > 0) {
            const int64_t coff = r == 4 ? 2 : 1;
            add(&l, TS__W_F32LIN, coff * 512, D, "%lld.attn.compressor.wkv", (long long)L);
            add(&l, TS__W_F32LIN, coff * 512, D, "%lld.attn.compressor.wgate", (long long)L);
            add(&l, TS__W_APE, r, coff * 512, "%lld.attn.compressor.ape", (long long)L);
            add(&l, TS__W_NORM, 512, 0, "%lld.attn.compressor.norm", (long long)L);
        }
        if (r == 4) {
            const int64_t IH = c->index_n_heads;
            add(&l, TS__W_FP8, IH * 128, c->q_lora_rank, "%lld.attn.indexer.wq_b", (long long)L);
            add(&l, TS__W_BF16LIN, IH, D, "%lld.attn.indexer.weights_proj", (long long)L);
            add(&l, TS__W_F32LIN, 256, D, "%lld.attn.indexer.compressor.wkv", (long long)L);
            add(&l, TS__W_F32LIN, 256, D, "%lld.attn.indexer.compressor.wgate", (long long)L);
            add(&l, TS__W_APE, 4, 256, "%lld.attn.indexer.compressor.ape", (long long)L);
            add(&l, TS__W_NORM, 128, 0, "%lld.attn.indexer.compressor.norm", (long long)L);
        }
        }
        add(&l, TS__W_F32LIN, E, D, "%lld.ffn.gate.weight", (long long)L);
        if (L < c->n_hash_layers)
            add(&l, TS__W_TID2EID, c->vocab_size, c->n_activated_experts, "%lld.ffn.gate.tid2eid",
                (long long)L);
        else
            add(&l, TS__W_BIAS, E, 0, "%lld.ffn.gate.bias", (long long)L);
        for (int64_t e = 0; e < E; e++) {
            add(&l, TS__W_FP4, I, D, "%lld.ffn.experts.%lld.w1", (long long)L, (long long)e);
            add(&l, TS__W_FP4, I, D, "%lld.ffn.experts.%lld.w3", (long long)L, (long long)e);
            add(&l, TS__W_FP4, D, I, "%lld.ffn.experts.%lld.w2", (long long)L, (long long)e);
        }
        add(&l, TS__W_FP8, I, D, "%lld.ffn.shared.w1", (long long)L);
        add(&l, TS__W_FP8, I, D, "%lld.ffn.shared.w3", (long long)L);
        add(&l, TS__W_FP8, D, I, "%lld.ffn.shared.w2", (long long)L);
    }
    add(&l, TS__W_NORM, D, 0, "norm");
    add(&l, TS__W_HC_FN, hc, hc * D, "hc_head_fn");
    add(&l, TS__W_HC_BASE, hc, 0, "hc_head_base");
    add(&l, TS__W_HC_SCALE, 1, 0, "hc_head_scale");
    add(&l, TS__W_BF16LIN, c->vocab_size, D, "head");
    if (l.st != TS_OK) {
        free(l.v);
        return l.st;
    }
    *specs = l.v;
    *count = l.n;
    return TS_OK;
}

int ts__model_spec_records(const ts__wspec *s, ts__mtensor rec[2]) {
    memset(rec, 0, 2 * sizeof *rec);
    snprintf(rec[0].name, sizeof rec[0].name, "%s", s->name);
    rec[0].ndim = s->ndim;
    rec[0].shape[0] = s->shape[0];
    rec[0].shape[1] = s->shape[1];
    const int64_t out = s->shape[0], in = s->shape[1];
    switch (s->kind) {
    case TS__W_FP8:
        rec[0].dtype = TS_E4M3;
        break;
    case TS__W_FP4:
        rec[0].dtype = TS_U8;
        rec[0].shape[1] = in / 2;
        break;
    case TS__W_EMBED:
    case TS__W_BF16LIN: rec[0].dtype = TS_BF16; break;
    case TS__W_TID2EID: rec[0].dtype = TS_I32; break;
    default: rec[0].dtype = TS_F32; break;
    }
    int64_t numel = rec[0].shape[0] * (rec[0].ndim == 2 ? rec[0].shape[1] : 1);
    rec[0].nbytes = (size_t)numel * ts_dtype_size(rec[0].dtype);
    /* binding packs these (pack8, pack_experts, pack_bf16) and reads them nowhere else */
    rec[0].packed_src = rec[1].packed_src =
        s->kind == TS__W_FP8 || s->kind == TS__W_FP4 || s->kind == TS__W_BF16LIN;
    if (s->kind != TS__W_FP8 && s->kind != TS__W_FP4) return 1;
    snprintf(rec[1].name, sizeof rec[1].name, "%s.scale", s->name);
    rec[1].dtype = TS_F32;
    rec[1].ndim = 2;
    if (s->kind == TS__W_FP8) {
        rec[1].shape[0] = ts__ceil_div(out, 128);
        rec[1].shape[1] = ts__ceil_div(in, 128);
    } else {
        rec[1].shape[0] = out;
        rec[1].shape[1] = in / 32;
    }
    rec[1].nbytes = (size_t)(rec[1].shape[0] * rec[1].shape[1]) * 4;
    return 2;
}

/* ---- generation */

typedef struct gen_ctx {
    const ts__wspec *s;
    uint64_t seed;
    float mul, add; /* value = u * mul + add (f32) */
    float *f32;
    uint16_t *bf16;
    int32_t *i32;
    int64_t cols, E;
} gen_ctx;

static void gen_rows(void *vctx, int64_t r0, int64_t r1, int tid) {
    (void)tid;
    const gen_ctx *g = (const gen_ctx *)vctx;
    for (int64_t r = r0; r < r1; r++) {
        if (g->i32) {
            /* row v takes the stream's output v+1 */
            uint64_t b = sm_at(g->seed, (uint64_t)r) % (uint64_t)g->E;
            for (int64_t j = 0; j < g->cols; j++)
                g->i32[r * g->cols + j] = (int32_t)((b + (uint64_t)j) % (uint64_t)g->E);
            continue;
        }
        for (int64_t j = 0; j < g->cols; j++) {
            uint64_t i = (uint64_t)(r * g->cols + j);
            float u = u_at(g->seed, i);
            float v = u * g->mul + g->add;
            if (g->bf16) g->bf16[i] = ts__f32_to_bf16_inl(v);
            else g->f32[i] = v;
        }
    }
}

ts_status ts__model_generate_weight(const ts_model_config *cfg, const ts__wspec *s,
                                    ts__mtensor rec[2]) {
    gen_ctx g = {0};
    g.s = s;
    g.seed = ts__model_tensor_seed(s->name, cfg->seed);
    const int64_t rows = s->shape[0], cols = s->ndim == 2 ? s->shape[1] : 1;
    g.cols = cols;
    switch (s->kind) {
    case TS__W_FP8: case TS__W_FP4: case TS__W_F32LIN: case TS__W_BF16LIN:
        g.mul = (float)(1.0 / sqrt((double)s->shape[1]));
        break;
    case TS__W_EMBED: g.mul = 1.0f; break;
    case TS__W_NORM: g.mul = 0.125f; g.add = 1.0f; break;
    case TS__W_HC_FN: g.mul = (float)(1.0 / sqrt((double)s->shape[1])); break;
    case TS__W_HC_BASE: g.mul = 0.25f; break;
    case TS__W_HC_SCALE: g.mul = 0.25f; g.add = 0.5f; break;
    case TS__W_SINK: g.mul = 1.0f; break;
    case TS__W_APE: g.mul = 0.25f; break;
    case TS__W_BIAS: g.mul = 0.0625f; break;
    case TS__W_TID2EID: g.E = cfg->n_routed_experts; break;
    }
    /* u * 1 + 0 and u * 2^-k + 0 are exact, and 1 + u/8 = u * 0.125 + 1 rounds once: the
     * spec's values for every kind */
    bool quant = s->kind == TS__W_FP8 || s->kind == TS__W_FP4;
    float *tmp = NULL;
    if (s->kind == TS__W_TID2EID) g.i32 = (int32_t *)rec[0].data;
    else if (s->kind == TS__W_EMBED || s->kind == TS__W_BF16LIN) g.bf16 = (uint16_t *)rec[0].data;
    else if (quant) {
        tmp = (float *)malloc((size_t)(rows * cols) * sizeof(float));
        if (!tmp) return ts__fail(TS_ERR_OUT_OF_MEMORY, "model weights: out of memory (%s)", s->name);
        g.f32 = tmp;
    } else g.f32 = (float *)rec[0].data;
    ts__parallel_for(rows, 16, gen_rows, &g);
    if (!quant) return TS_OK;
    const ts_status st = ts__model_quantize_weight(s, tmp, rec);
    free(tmp);
    return st;
}

ts_status ts__model_quantize_weight(const ts__wspec *s, const float *wv, ts__mtensor rec[2]) {
    const int64_t rows = s->shape[0], cols = s->shape[1];
    ts_tensor w = ts_tensor_2d((void *)wv, TS_F32, rows, cols);
    ts_tensor sf = ts_tensor_2d(rec[1].data, TS_F32, rec[1].shape[0], rec[1].shape[1]);
    if (s->kind == TS__W_FP8) {
        ts_tensor q = ts_tensor_2d(rec[0].data, TS_E4M3, rows, cols);
        return ts_per_block_cast_to_fp8(&w, true, 128, &q, &sf);
    }
    ts_tensor q = ts_tensor_2d(rec[0].data, TS_E2M1X2, rows, cols / 2);
    return ts_per_token_cast_to_fp4(&w, true, 32, false, TS_FP4_ROUND_DEEPGEMM, &q, &sf);
}

/* ---- binding: records -> kernel layouts */

const ts__mtensor *ts__model_find(const ts_model *m, const char *name) {
    for (int64_t i = 0; i < m->nrecs; i++)
        if (strcmp(m->recs[i].name, name) == 0) return &m->recs[i];
    return NULL;
}

static ts_status need(const ts_model *m, const char *name, const ts__mtensor **out) {
    const ts__mtensor *t = ts__model_find(m, name);
    if (!t) return ts__fail(TS_ERR_INTERNAL, "model: tensor %s missing after load", name);
    *out = t;
    return TS_OK;
}

#define NAMEF(buf, ...) snprintf(buf, sizeof buf, __VA_ARGS__)

static ts_status f32_of(const ts_model *m, const char *name, const float **p) {
    const ts__mtensor *t = NULL;
    TS__RETURN_IF_ERROR(need(m, name, &t));
    *p = (const float *)t->data;
    return TS_OK;
}

/* FP8 weight rows [r0, r0 + n) (r0 a multiple of 128) -> packed. */
static ts_status pack8(const ts_model *m, const char *name, int64_t r0, int64_t n, ts__lin8 *w) {
    const ts__mtensor *q = NULL, *s = NULL;
    char sname[128];
    NAMEF(sname, "%s.scale", name);
    TS__RETURN_IF_ERROR(need(m, name, &q));
    TS__RETURN_IF_ERROR(need(m, sname, &s));
    const int64_t K = q->shape[1];
    if (n < 0) n = q->shape[0];
    ts_tensor b = ts_tensor_2d((uint8_t *)q->data + r0 * K, TS_E4M3, n, K);
    ts_tensor sfb = ts_tensor_2d((float *)s->data + (r0 / 128) * s->shape[1], TS_F32,
                                 ts__ceil_div(n, 128), s->shape[1]);
    w->n = n;
    w->k = K;
    return ts_gemm_prepack_b(&b, &sfb, NULL, false, &w->pw);
}

static ts_status pack_bf16(const ts_model *m, const char *name, ts_packed_weight **pw) {
    const ts__mtensor *q = NULL;
    TS__RETURN_IF_ERROR(need(m, name, &q));
    ts_tensor b = ts_tensor_2d(q->data, TS_BF16, q->shape[0], q->shape[1]);
    return ts_gemm_prepack_b(&b, NULL, NULL, false, pw);
}

int64_t ts__model_expert_of(const char *name) {
    long long L = 0, e = 0;
    int pos = 0;
    if (sscanf(name, "%lld.ffn.experts.%lld.%n", &L, &e, &pos) == 2 && pos > 0) return (int64_t)e;
    return -1;
}

/* The experts' FP4 weights of layer L, one grouped [E, N, K] packed weight per matrix. The
 * scales are packed as ue8m0 bytes (four per int32 word, TS_UE8M0X4), not f32: the records'
 * f32 scales are powers of two (ts__model_check_values), so each byte is its scale exactly and
 * the kernels decode it to the same f32; the packed experts are then 1.125x their codes
 * instead of 1.25x (docs/models.md "Memory per rank"). */
static ts_status pack_experts(const ts_model *m, int64_t L, const char *which, int64_t N,
                              int64_t K, ts_packed_weight **pw) {
    const int64_t E = m->cfg.n_routed_experts, nkb = K / 32, words = ts__ceil_div(nkb, 4);
    const size_t vb = (size_t)(N * K / 2), sb = (size_t)(N * words) * 4;
    uint8_t *v = (uint8_t *)malloc(vb * (size_t)E);
    uint8_t *s = (uint8_t *)malloc(sb * (size_t)E);
    ts_status st = (v && s) ? TS_OK : ts__fail(TS_ERR_OUT_OF_MEMORY, "model: out of memory");
    for (int64_t e = 0; st == TS_OK && e < E; e++) {
        char name[96], sname[128];
        NAMEF(name, "%lld.ffn.experts.%lld.%s", (long long)L, (long long)e, which);
        NAMEF(sname, "%s.scale", name);
        const ts__mtensor *q = NULL, *sc = NULL;
        st = need(m, name, &q);
        if (st == TS_OK) st = need(m, sname, &sc);
        if (st != TS_OK) break;
        memcpy(v + vb * (size_t)e, q->data, vb);
        /* byte j of word w: K block 4w + j (core.h); the padding past nkb is never read */
        uint8_t *se = s + sb * (size_t)e;
        const float *f = (const float *)sc->data;
        memset(se, 127, sb);
        for (int64_t r = 0; st == TS_OK && r < N; r++)
            for (int64_t b = 0; b < nkb; b++) {
                const uint8_t u = ts_f32_to_ue8m0(f[r * nkb + b]);
                if (u == 255) {
                    st = ts__fail(TS_ERR_INVALID_ARGUMENT, "model: %s[%lld, %lld] = %g is not a "
                                  "power of two (FP4 scales are ue8m0)", sname, (long long)r,
                                  (long long)b, (double)f[r * nkb + b]);
                    break;
                }
                se[r * words * 4 + b] = u;
            }
    }
    if (st == TS_OK) {
        ts_tensor b = ts_tensor_3d(v, TS_E2M1X2, E, N, K / 2);
        ts_tensor sfb = ts_tensor_3d(s, TS_UE8M0X4, E, N, words);
        const int64_t rb[2] = {1, 32};
        st = ts_gemm_prepack_b(&b, &sfb, rb, false, pw);
    }
    free(v);
    free(s);
    return st;
}

/* for the v32 attention's binding (model_v32_setup.c) */
ts_status ts__model_w_tensor(const ts_model *m, const char *name, const ts__mtensor **out) {
    return need(m, name, out);
}
ts_status ts__model_w_f32(const ts_model *m, const char *name, const float **p) {
    return f32_of(m, name, p);
}
ts_status ts__model_w_pack8(const ts_model *m, const char *name, ts__lin8 *w) {
    return pack8(m, name, 0, -1, w);
}
ts_status ts__model_w_pack_bf16(const ts_model *m, const char *name, ts_packed_weight **pw) {
    return pack_bf16(m, name, pw);
}

ts_status ts__model_bind_layer(ts_model *m, int64_t L) {
    const ts_model_config *c = &m->cfg;
    const ts__mtensor *t = NULL;
    char nm[96];
    if (L != m->layers_bound)
        return ts__fail(TS_ERR_INTERNAL, "model: layer %lld bound out of order (%lld bound)",
                        (long long)L, (long long)m->layers_bound);
    ts__layer *ly = &m->layers[L];
    const long long l = (long long)L;
    ly->ratio = c->compress_ratios[L];
    ly->hash = L < c->n_hash_layers;
#define F32(field, ...)                                 \
    do {                                                \
        NAMEF(nm, __VA_ARGS__);                         \
        TS__RETURN_IF_ERROR(f32_of(m, nm, &ly->field)); \
    } while (0)
#define P8(field, ...)                                        \
    do {                                                      \
        NAMEF(nm, __VA_ARGS__);                               \
        TS__RETURN_IF_ERROR(pack8(m, nm, 0, -1, &ly->field)); \
    } while (0)
    F32(hc_attn_fn, "%lld.hc_attn_fn", l);
    F32(hc_attn_base, "%lld.hc_attn_base", l);
    F32(hc_attn_scale, "%lld.hc_attn_scale", l);
    F32(hc_ffn_fn, "%lld.hc_ffn_fn", l);
    F32(hc_ffn_base, "%lld.hc_ffn_base", l);
    F32(hc_ffn_scale, "%lld.hc_ffn_scale", l);
    F32(attn_norm, "%lld.attn_norm", l);
    F32(ffn_norm, "%lld.ffn_norm", l);
    if (c->attention == TS_MODEL_ATTN_V32) {
        ly->ratio = 0; /* §8: every layer is MLA + indexer; compress_ratios are not used */
        TS__RETURN_IF_ERROR(ts__model_v32_bind(m, L));
    } else {
        F32(q_norm, "%lld.attn.q_norm", l);
        F32(kv_norm, "%lld.attn.kv_norm", l);
        F32(attn_sink, "%lld.attn.attn_sink", l);
        P8(wq_a, "%lld.attn.wq_a", l);
        P8(wq_b, "%lld.attn.wq_b", l);
        P8(wkv, "%lld.attn.wkv", l);
        P8(wo_b, "%lld.attn.wo_b", l);
        ly->wo_a = (ts__lin8 *)calloc((size_t)c->o_groups, sizeof *ly->wo_a);
        if (!ly->wo_a) return ts__fail(TS_ERR_OUT_OF_MEMORY, "model: out of memory");
        NAMEF(nm, "%lld.attn.wo_a", l);
        for (int64_t g = 0; g < c->o_groups; g++)
            TS__RETURN_IF_ERROR(pack8(m, nm, g * c->o_lora_rank, c->o_lora_rank, &ly->wo_a[g]));
        if (ly->ratio > 0) {
            ts__compressor *cp = &ly->comp;
            cp->ratio = ly->ratio;
            cp->coff = ly->ratio == 4 ? 2 : 1;
            cp->d = 512;
            F32(comp.wkv, "%lld.attn.compressor.wkv", l);
            F32(comp.wgate, "%lld.attn.compressor.wgate", l);
            F32(comp.ape, "%lld.attn.compressor.ape", l);
            F32(comp.norm, "%lld.attn.compressor.norm", l);
        }
        if (ly->ratio == 4) {
            ts__compressor *cp = &ly->icomp;
            cp->ratio = 4;
            cp->coff = 2;
            cp->d = 128;
            F32(icomp.wkv, "%lld.attn.indexer.compressor.wkv", l);
            F32(icomp.wgate, "%lld.attn.indexer.compressor.wgate", l);
            F32(icomp.ape, "%lld.attn.indexer.compressor.ape", l);
            F32(icomp.norm, "%lld.attn.indexer.compressor.norm", l);
            P8(iwq_b, "%lld.attn.indexer.wq_b", l);
            NAMEF(nm, "%lld.attn.indexer.weights_proj", l);
            TS__RETURN_IF_ERROR(pack_bf16(m, nm, &ly->weights_proj));
        }
    }
    F32(gate_w, "%lld.ffn.gate.weight", l);
    if (ly->hash) {
        NAMEF(nm, "%lld.ffn.gate.tid2eid", l);
        TS__RETURN_IF_ERROR(need(m, nm, &t));
        ly->tid2eid = (const int32_t *)t->data;
    } else {
        F32(gate_bias, "%lld.ffn.gate.bias", l);
    }
    const int64_t D = c->dim, I = c->moe_inter_dim;
    if (!m->local_experts_only) { /* an EP model packs its own experts (model_ep.c) */
        TS__RETURN_IF_ERROR(pack_experts(m, L, "w1", I, D, &ly->w1));
        TS__RETURN_IF_ERROR(pack_experts(m, L, "w3", I, D, &ly->w3));
        TS__RETURN_IF_ERROR(pack_experts(m, L, "w2", D, I, &ly->w2));
    }
    P8(sw1, "%lld.ffn.shared.w1", l);
    P8(sw3, "%lld.ffn.shared.w3", l);
    P8(sw2, "%lld.ffn.shared.w2", l);
#undef F32
#undef P8
    m->layers_bound = L + 1;
    return TS_OK;
}

ts_status ts__model_bind_weights(ts_model *m) {
    const ts__mtensor *t = NULL;
    TS__RETURN_IF_ERROR(need(m, "embed", &t));
    m->embed = (const uint16_t *)t->data;
    TS__RETURN_IF_ERROR(f32_of(m, "norm", &m->norm));
    TS__RETURN_IF_ERROR(f32_of(m, "hc_head_fn", &m->hc_head_fn));
    TS__RETURN_IF_ERROR(f32_of(m, "hc_head_base", &m->hc_head_base));
    TS__RETURN_IF_ERROR(f32_of(m, "hc_head_scale", &m->hc_head_scale));
    TS__RETURN_IF_ERROR(pack_bf16(m, "head", &m->head));
    while (m->layers_bound < m->cfg.n_layers) TS__RETURN_IF_ERROR(ts__model_bind_layer(m, m->layers_bound));
    return TS_OK;
}

void ts__mtensor_free(ts__mtensor *t) {
    if (!t->view) ts__aligned_free(t->data);
    t->data = NULL;
}

/* Each packed source is held twice otherwise: the file's bytes (or their f32 / quantised
 * conversion) and the kernels' copy. A view's pages go back with MADV_DONTNEED on the
 * read-only file mapping: its data stays valid (a touch re-reads the file; nothing touches it)
 * and the page cache, not this process, keeps them; rounded outward, so a kept view sharing a
 * boundary page re-reads that page on first use. madvise is advice: if it fails, the pages
 * stay resident and nothing else changes. */
void ts__model_drop_pages(const void *p, size_t n) {
    if (!n) return;
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t a = (uintptr_t)p & ~(pg - 1), b = ((uintptr_t)p + n + pg - 1) & ~(pg - 1);
    (void)madvise((void *)a, b - a, MADV_DONTNEED);
}

size_t ts__model_release_packed(ts_model *m) {
    size_t n = 0;
    for (int64_t i = 0; i < m->nrecs; i++) {
        ts__mtensor *t = &m->recs[i];
        if (!t->packed_src || t->released || !t->data) continue;
        if (t->view) {
            ts__model_drop_pages(t->data, t->nbytes);
        } else {
            ts__aligned_free(t->data);
            t->data = NULL;
        }
        t->released = true;
        n += t->nbytes;
    }
    m->load_stats.released += n;
#if defined(__GLIBC__)
    /* the freed buffers are many small blocks inside the heap, which free() alone keeps */
    if (n) malloc_trim(0);
#endif
    return n;
}

ts_status ts__model_check_records_held(const ts_model *m, const char *fn) {
    if (!m->load_stats.released) return TS_OK;
    return ts__fail(TS_ERR_UNSUPPORTED, "%s: this model keeps only the kernels' packed copies of "
                    "its FP8 / FP4 / bf16 linear weights (ts_model_load_dir released the records "
                    "after packing); load the directory with ts_model_load_dir_keep to save or "
                    "export it", fn);
}

size_t ts__model_packed_bytes(const ts_model *m) {
    size_t n = ts_packed_weight_nbytes(m->head);
    for (int64_t L = 0; L < m->cfg.n_layers; L++) {
        const ts__layer *ly = &m->layers[L];
        const ts_packed_weight *pw[] = {ly->wq_a.pw, ly->wq_b.pw, ly->wkv.pw,  ly->wo_b.pw,
                                        ly->iwq_b.pw, ly->weights_proj, ly->w1, ly->w3,
                                        ly->w2,      ly->sw1.pw, ly->sw3.pw, ly->sw2.pw};
        for (size_t i = 0; i < sizeof pw / sizeof *pw; i++) n += ts_packed_weight_nbytes(pw[i]);
        for (int64_t g = 0; ly->wo_a && g < m->cfg.o_groups; g++)
            n += ts_packed_weight_nbytes(ly->wo_a[g].pw);
    }
    return n;
}

void ts__model_free_weights(ts_model *m) {
    for (int64_t L = 0; L < TS_MODEL_MAX_LAYERS; L++) {
        ts__layer *ly = &m->layers[L];
        ts_packed_weight_destroy(ly->wq_a.pw);
        ts_packed_weight_destroy(ly->wq_b.pw);
        ts_packed_weight_destroy(ly->wkv.pw);
        ts_packed_weight_destroy(ly->wo_b.pw);
        if (ly->wo_a)
            for (int64_t g = 0; g < m->cfg.o_groups; g++) ts_packed_weight_destroy(ly->wo_a[g].pw);
        free(ly->wo_a);
        ts_packed_weight_destroy(ly->iwq_b.pw);
        ts_packed_weight_destroy(ly->weights_proj);
        ts_packed_weight_destroy(ly->w1);
        ts_packed_weight_destroy(ly->w3);
        ts_packed_weight_destroy(ly->w2);
        ts_packed_weight_destroy(ly->sw1.pw);
        ts_packed_weight_destroy(ly->sw3.pw);
        ts_packed_weight_destroy(ly->sw2.pw);
        ts__model_v32_free_layer(ly);
        memset(ly, 0, sizeof *ly);
    }
    m->layers_bound = 0;
    ts_packed_weight_destroy(m->head);
    m->head = NULL;
    for (int64_t i = 0; i < m->nrecs; i++) ts__mtensor_free(&m->recs[i]);
    free(m->recs);
    m->recs = NULL;
    m->nrecs = 0;
}

size_t ts__model_spec_packed_bytes(const ts_model_config *cfg, const ts__wspec *s) {
    const int64_t n = s->shape[0], k = s->ndim == 2 ? s->shape[1] : 0;
    static const char wo_a[] = ".attn.wo_a";
    const size_t len = strlen(s->name), wl = sizeof wo_a - 1;
    switch (s->kind) {
    case TS__W_FP8:
        if (len > wl && !strcmp(s->name + len - wl, wo_a)) /* pack8 per output group */
            return (size_t)cfg->o_groups *
                   ts__gemm_packed_nbytes(TS_E4M3, false, 128, 1, cfg->o_lora_rank, k);
        return ts__gemm_packed_nbytes(TS_E4M3, false, 128, 1, n, k);
    case TS__W_FP4: /* pack_experts: recipe (1, 32), ue8m0 byte scales; [E, N, K] = E groups */
        return ts__gemm_packed_nbytes(TS_E2M1X2, true, 32, 1, n, k);
    case TS__W_BF16LIN: return ts__gemm_packed_nbytes(TS_BF16, false, 0, 1, n, k);
    default: return 0;
    }
}
