/* The DeepSeek-V3 skeleton (docs/model.md §9): one decode step for a batch of sequences.
 *
 *   x = embed[token] (f32 residual)
 *   per layer: x += MLA(rmsnorm(x)); x += FFN(rmsnorm(x)), FFN = SwiGLU for the first
 *     first_k_dense_replace layers, else shared experts + routed experts chosen by sigmoid
 *     scores + e_score_correction_bias among the topk_group best groups (a group's score: its
 *     top-2 sum), weights the chosen sigmoid scores renormalised x routed_scaling_factor
 *   logits = lm_head(rmsnorm(x))
 *
 * MLA is decoded absorbed: the latent row [kv_a_layernorm(kv) (512) | RoPE(k_pe) (64)] is
 * cached in bf16, each head's q_nope goes through W_UK into the latent space, FlashMLA's dense
 * decode (ts_flash_mla_with_kvcache) attends over the cached rows with softmax scale
 * qk_head_dim^-0.5 x mscale^2, and W_UV maps the latent output back to v_head_dim. RoPE is
 * transformers' YaRN (inv_freq ramp, cos / sin x attention_factor), on DeepSeek's interleaved
 * pairs (or rotate-half with rope_interleave false).
 *
 * Rounding points: the input of every GEMM is bf16 (the bf16 GEMMs, f32 accumulation, f32
 * out); norms, RoPE, routing and SwiGLU in double, the residual in f32; the cached latent row,
 * the attention query and output bf16. Every kernel is batch-invariant and each row's
 * arithmetic is in one fixed order (the routed experts' bf16 outputs summed in top-k order, as
 * the expert-parallel combine sums them), so a row's logits do not
 * depend on the other rows or the thread count; a prompt's prefill runs its tokens as rows of one
 * pass, bit for bit its decode steps.
 *
 * V3.2 (c.v32): the lightning indexer (indexer(), transformers' f32 DeepseekV32Indexer) picks
 * min(index_topk, pos + 1) cached rows per row and layer, and the MLA attends to those only
 * through FlashMLA's sparse kernel over the same bf16 latent cache (docs/model.md §9). */
#include "hf_v3.h"
#include "safetensors.h"

#include "tilestack/flash_mla.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PAGE 64
#define LAT 576 /* kv_lora 512 + rope 64 */

typedef struct ts__v3_ws {
    float *x, *hf, *t, *q, *kv, *qlat, *ov, *y, *g, *u, *eo, *gl, *selw, *lse;
    uint16_t *h, *qa, *qb, *qfull, *ao, *ovb, *act, *xe;
    uint16_t *yk, *routed; /* [B][topk][D] the slots' expert outputs, [B][D] their sum (bf16) */
    int32_t *sel, *erow, *bt, *sl;
    double *rs;   /* routing scratch [2E] */
    int64_t *pos, *rseq; /* [B] the rows' positions, sequences (prefill) */
    int64_t rows;        /* B: max(max_batch, TS__PREFILL_ROWS) */
    /* V3.2's indexer: q [B][IH][ID], k [B][ID], head weights [B][IH] (f32); the scores of one
     * row [max_seq]; the chosen positions [B][KC] (-1 past the count) and their count [B] */
    float *iq, *ik, *iw, *mlg;
    struct ix_score *isc;
    int32_t *isel, *ilen;
    int64_t kc;          /* KC = min(index_topk, max_seq) */
} ts__v3_ws;

typedef struct ix_score {
    double s;
    int32_t t;
} ix_score;

static int64_t max3(int64_t a, int64_t b, int64_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

/* ---- weights */

typedef struct builder {
    ts__v3 *v;
    size_t f32_used;
} builder;

/* Where a weight's values are: data in dt, row stride ld; an e4m3 one with its f32 scales
 * [ceil(rows/128)][sk] per 128x128, the block of row r being (row0 + r) / 128. */
typedef struct wsrc {
    const void *data;
    ts_dtype dt;
    int64_t ld;
    const float *scale;
    int64_t sk, row0;
} wsrc;

static ts_status pack(const ts__v3_tensor *t, const wsrc *w, bool kn, int64_t rows, int64_t cols,
                      size_t *packed, ts_packed_weight **pw) {
    /* rows x cols; an F32 weight is rounded to bf16, an e4m3 one dequantised (code x scale in
     * f32) and rounded */
    uint16_t *tmp = NULL;
    const uint16_t *src = (const uint16_t *)w->data;
    int64_t ld = w->ld;
    if (w->dt != TS_BF16) {
        tmp = malloc((size_t)(rows * cols) * 2);
        if (!tmp) return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_load_dir: %s", t->name);
        float lut[256];
        for (int i = 0; i < 256; i++) lut[i] = ts_e4m3_to_f32((uint8_t)i);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++) {
                const float v = w->dt == TS_F32 ? ((const float *)w->data)[r * ld + c]
                                                : lut[((const uint8_t *)w->data)[r * ld + c]] *
                                                      w->scale[((w->row0 + r) / 128) * w->sk + c / 128];
                tmp[r * cols + c] = ts__f32_to_bf16_inl(v);
            }
        src = tmp, ld = cols;
    }
    ts_tensor b = ts_tensor_2d((void *)src, TS_BF16, rows, cols);
    b.strides[0] = ld;
    const ts_status st = ts_gemm_prepack_b(&b, NULL, NULL, kn, pw);
    free(tmp);
    if (st == TS_OK) *packed += ts_packed_weight_nbytes(*pw);
    return st;
}

/* n values widened to f32; an e4m3 weight (cols wide, f32 scales per 128x128, sk per row of
 * blocks) dequantised: code x scale */
static const float *as_f32(builder *bd, const void *data, ts_dtype dt, int64_t n, const float *scale,
                           int64_t cols) {
    float *o = bd->v->f32_bufs + bd->f32_used;
    bd->f32_used += (size_t)n;
    for (int64_t i = 0; i < n; i++)
        o[i] = dt == TS_F32 ? ((const float *)data)[i]
               : dt == TS_BF16 ? ts__bf16_to_f32_inl(((const uint16_t *)data)[i])
                               : ts_e4m3_to_f32(((const uint8_t *)data)[i]) *
                                     scale[(i / cols / 128) * ts__ceil_div(cols, 128) + (i % cols) / 128];
    return o;
}

/* Where a V3_HOW_F32 tensor's values go. */
static const float **f32_slot(ts__v3 *v, ts__v3_layer *ly, ts__v3_role role) {
    switch (role) {
    case V3_NORM: return &v->norm;
    case V3_ATTN_NORM: return &ly->attn_norm;
    case V3_FFN_NORM: return &ly->ffn_norm;
    case V3_Q_A_NORM: return &ly->q_a_norm;
    case V3_KV_A_NORM: return &ly->kv_a_norm;
    case V3_GATE: return &ly->gate;
    case V3_GATE_BIAS: return &ly->gate_bias;
    case V3_IX_WQ_B: return &ly->ix_wq_b;
    case V3_IX_WK: return &ly->ix_wk;
    case V3_IX_K_NORM: return &ly->ix_k_norm;
    case V3_IX_K_BIAS: return &ly->ix_k_bias;
    case V3_IX_W: return &ly->ix_w;
    default: return NULL;
    }
}

/* Where a V3_HOW_PACK tensor's pack goes. */
static ts_packed_weight **pack_slot(ts__v3 *v, ts__v3_layer *ly, ts__v3_role role, int64_t e) {
    switch (role) {
    case V3_HEAD: return &v->head;
    case V3_Q_A: return &ly->q_a;
    case V3_Q_B: return &ly->q_b;
    case V3_Q: return &ly->q;
    case V3_KV_A: return &ly->kv_a;
    case V3_O: return &ly->o;
    case V3_W1: return &ly->w1;
    case V3_W3: return &ly->w3;
    case V3_W2: return &ly->w2;
    case V3_E_W1: return &ly->ew1[e];
    case V3_E_W3: return &ly->ew3[e];
    case V3_E_W2: return &ly->ew2[e];
    case V3_S_W1: return &ly->sw1;
    case V3_S_W3: return &ly->sw3;
    case V3_S_W2: return &ly->sw2;
    default: return NULL;
    }
}

/* Each tensor where ts__v3_hold_of says it is held (hf_hold_v3.c: the rule the plan counts). */
static ts_status bind(ts__v3 *v, const ts__v3_tensor *tl, int64_t nt, const void *const *data,
                      const ts_dtype *dt, const float *const *scales) {
    const ts__v3_config *c = &v->c;
    const int64_t H = c->n_heads, E = c->n_experts, KL = c->kv_lora, NV = c->nope + c->v_head;
    size_t nf = 0, copy = 0; /* f32 values; bytes of the bf16 embedding copy */
    for (int64_t i = 0; i < nt; i++) {
        if (!data[i]) continue; /* another rank's expert */
        const ts__v3_hold h = ts__v3_hold_of(c, &tl[i], dt[i]);
        if (h.how == V3_HOW_F32) nf += h.converted / sizeof(float);
        else copy += h.converted;
    }
    v->f32_bytes = nf * 4;
    v->f32_bufs = ts__aligned_alloc((nf ? nf : 1) * 4 + copy);
    if (!v->f32_bufs) return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_load_dir: %zu weights", nf);
    v->converted = nf * 4 + copy;
    builder bd = {v, 0};
    for (int64_t L = 0; L < c->n_layers; L++) {
        ts__v3_layer *ly = &v->layers[L];
        if (!(ly->uk = calloc((size_t)H, sizeof *ly->uk)) || !(ly->uv = calloc((size_t)H, sizeof *ly->uv)))
            return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_load_dir: layer %lld", (long long)L);
        if (L >= c->first_dense &&
            (!(ly->ew1 = calloc((size_t)E, sizeof *ly->ew1)) || !(ly->ew3 = calloc((size_t)E, sizeof *ly->ew3)) ||
             !(ly->ew2 = calloc((size_t)E, sizeof *ly->ew2))))
            return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_load_dir: layer %lld", (long long)L);
    }
    size_t *pk = &v->packed;
    for (int64_t i = 0; i < nt; i++) {
        const ts__v3_tensor *t = &tl[i];
        if (!data[i]) continue;
        ts__v3_layer *ly = t->layer >= 0 ? &v->layers[t->layer] : NULL;
        const int64_t r = t->shape[0], k = t->ndim == 2 ? t->shape[1] : 1;
        const wsrc whole = {data[i], dt[i], k, scales[i], ts__ceil_div(k, 128), 0};
        const ts__v3_hold h = ts__v3_hold_of(c, t, dt[i]);
        switch (h.how) {
        case V3_HOW_VIEW: v->embed = data[i]; break;
        case V3_HOW_BF16: {
            uint16_t *o = (uint16_t *)(v->f32_bufs + nf);
            for (int64_t j = 0; j < r * k; j++) o[j] = ts__f32_to_bf16_inl(((const float *)data[i])[j]);
            v->embed = o;
            break;
        }
        case V3_HOW_F32: *f32_slot(v, ly, t->role) = as_f32(&bd, data[i], dt[i], r * k, scales[i], k); break;
        case V3_HOW_PACK_HEADS: {
            /* per head: rows [h NV, h NV + nope) are W_UK [nope, 512], packed as the [K, N] of
             * q_nope -> latent; the next v_head rows W_UV [v, 512] map the latent to v */
            const size_t es = ts_dtype_size(dt[i]);
            for (int64_t hd = 0; hd < H; hd++) {
                wsrc uk = whole, uv = whole;
                uk.data = (const char *)data[i] + (size_t)(hd * NV * KL) * es, uk.row0 = hd * NV;
                uv.data = (const char *)uk.data + (size_t)(c->nope * KL) * es, uv.row0 = hd * NV + c->nope;
                TS__RETURN_IF_ERROR(pack(t, &uk, true, c->nope, KL, pk, &ly->uk[hd]));
                TS__RETURN_IF_ERROR(pack(t, &uv, false, c->v_head, KL, pk, &ly->uv[hd]));
            }
            break;
        }
        case V3_HOW_PACK:
            TS__RETURN_IF_ERROR(pack(t, &whole, false, r, k, pk, pack_slot(v, ly, t->role, t->expert)));
            break;
        }
        if (h.head) TS__RETURN_IF_ERROR(pack(t, &whole, false, r, k, pk, &v->head));
    }
    return TS_OK;
}

/* ---- RoPE tables: transformers' YaRN inv_freq (the ramp of ts__model_yarn_freqs, which is
 * the same formula), cos / sin per position x attention_factor */
static ts_status rope_tables(ts_model *m) {
    const ts__v3_config *c = &m->v3->c;
    ts_model_config y;
    memset(&y, 0, sizeof y);
    y.compress_rope_theta = y.rope_theta = c->rope_theta;
    y.rope_factor = c->factor;
    y.original_seq_len = c->orig_max;
    y.beta_fast = c->beta_fast;
    y.beta_slow = c->beta_slow;
    double freq[32];
    ts__model_yarn_freqs(&y, c->yarn, freq);
    const int64_t P = c->max_seq;
    m->rope_cos[0] = malloc((size_t)(P * 32) * sizeof(float));
    m->rope_sin[0] = malloc((size_t)(P * 32) * sizeof(float));
    if (!m->rope_cos[0] || !m->rope_sin[0]) return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_load_dir: RoPE");
    for (int64_t p = 0; p < P; p++)
        for (int i = 0; i < 32; i++) {
            const double th = (double)p * freq[i];
            m->rope_cos[0][p * 32 + i] = (float)(cos(th) * c->attn_factor);
            m->rope_sin[0][p * 32 + i] = (float)(sin(th) * c->attn_factor);
        }
    return TS_OK;
}

/* x[0..63] f32 -> RoPE at position p -> out bf16. Interleaved: pair (2i, 2i+1) turns by
 * frequency i; transformers writes the pair's halves apart (evens then odds) but q and k
 * share the order, so q.k is the same. Rotate-half: pair (i, i + 32). */
static void rope_row(const ts_model *m, int64_t p, const float *x, uint16_t *out) {
    double t[64];
    const bool il = m->v3->c.interleave;
    for (int i = 0; i < 32; i++) {
        t[2 * i] = x[il ? 2 * i : i];
        t[2 * i + 1] = x[il ? 2 * i + 1 : i + 32];
    }
    ts__model_rope(m->rope_cos[0] + p * 32, m->rope_sin[0] + p * 32, t, false);
    for (int i = 0; i < 64; i++) out[i] = ts__f32_to_bf16_inl((float)t[i]);
}

/* ---- pieces */

/* out = bf16(x * rms(x) * w); f32 copy into outf (the router's input) when not NULL */
static void rmsnorm(const float *x, int64_t n, const float *w, double eps, uint16_t *out, float *outf) {
    const double r = ts__model_rms(x, n, (float)eps);
    for (int64_t i = 0; i < n; i++) {
        const float v = (float)((double)x[i] * r * w[i]);
        out[i] = ts__f32_to_bf16_inl(v);
        if (outf) outf[i] = v;
    }
}

static ts_status gemm(ts_packed_weight *w, int64_t n, int64_t k, const uint16_t *x, int64_t m,
                      int64_t ldx, float *y, int64_t ldy) {
    ts_tensor a = ts_tensor_2d((void *)x, TS_BF16, m, k);
    a.strides[0] = ldx;
    ts_tensor d = ts_tensor_2d(y, TS_F32, m, n);
    d.strides[0] = ldy;
    return ts_bf16_gemm_nt_packed(&a, w, &d, NULL, NULL);
}

static void to_bf16(const float *x, int64_t n, uint16_t *o) {
    for (int64_t i = 0; i < n; i++) o[i] = ts__f32_to_bf16_inl(x[i]);
}

static double silu(double g) { return g / (1.0 + exp(-g)); }

/* V3.2's rotate-half RoPE on x[0..63] (pairs (i, i + 32)), in place, f32 -> f32 */
static void rope_half(const ts_model *m, int64_t p, float *x) {
    const float *cs = m->rope_cos[0] + p * 32, *sn = m->rope_sin[0] + p * 32;
    for (int i = 0; i < 32; i++) {
        const double a = x[i], b = x[i + 32];
        x[i] = (float)(a * cs[i] - b * sn[i]);
        x[i + 32] = (float)(b * cs[i] + a * sn[i]);
    }
}

static int by_score(const void *x, const void *y) {
    const ix_score *a = x, *b = y;
    return a->s > b->s ? -1 : a->s < b->s ? 1 : (a->t > b->t) - (a->t < b->t);
}

static int by_pos(const void *x, const void *y) {
    const int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return (a > b) - (a < b);
}

/* V3.2's lightning indexer as transformers computes it (DeepseekV32Indexer, f32): q =
 * wq_b(q_resid), k = LayerNorm(wk(h)) (eps 1e-6), both rotated half on their first 64 values
 * with the MLA's cos / sin; I_t = sum_h w_h IH^-1/2 relu(q_h . k_t ID^-1/2), w = weights_proj(h);
 * the min(index_topk, p + 1) best t <= p (ties to the lower t). No Hadamard, no FP8: an
 * orthogonal rotation and a precision choice of DeepSeek's kernels that transformers skips.
 * Every row's key is cached before any row is scored (a prefill chunk's rows see their
 * predecessors, as their decode steps would). */
static ts_status indexer(ts_model *m, int64_t L, int64_t n, const int64_t *seqs, const int64_t *pos) {
    ts__v3 *v = m->v3;
    ts__v3_ws *w = v->ws;
    const ts__v3_config *c = &v->c;
    const ts__v3_layer *ly = &v->layers[L];
    const int64_t D = c->dim, IH = c->index_heads, ID = c->index_dim, P = c->max_seq;
    ts__model_gemv_f32(w->t, n, c->q_lora, ly->ix_wq_b, IH * ID, c->q_lora, w->iq, IH * ID);
    ts__model_gemv_f32(w->hf, n, D, ly->ix_wk, ID, D, w->ik, ID);
    ts__model_gemv_f32(w->hf, n, D, ly->ix_w, IH, D, w->iw, IH);
    for (int64_t b = 0; b < n; b++) {
        float *k = w->ik + b * ID;
        double mean = 0, var = 0;
        for (int64_t d = 0; d < ID; d++) mean += k[d];
        mean /= (double)ID;
        for (int64_t d = 0; d < ID; d++) var += ((double)k[d] - mean) * ((double)k[d] - mean);
        const double r = 1.0 / sqrt(var / (double)ID + 1e-6);
        for (int64_t d = 0; d < ID; d++) k[d] = (float)(((double)k[d] - mean) * r * ly->ix_k_norm[d] + ly->ix_k_bias[d]);
        rope_half(m, pos[b], k);
        for (int64_t h = 0; h < IH; h++) rope_half(m, pos[b], w->iq + (b * IH + h) * ID);
        memcpy(ly->ix_cache + (seqs[b] * P + pos[b]) * ID, k, (size_t)ID * sizeof(float));
    }
    const double qs = 1.0 / sqrt((double)ID), hs = 1.0 / sqrt((double)IH);
    for (int64_t b = 0; b < n; b++) {
        const int64_t T = pos[b] + 1, K = ts__min64(w->kc, T);
        const float *kc = ly->ix_cache + seqs[b] * P * ID, *q = w->iq + b * IH * ID;
        for (int64_t t = 0; t < T; t++) {
            double sum = 0;
            for (int64_t h = 0; h < IH; h++) {
                double dot = 0;
                for (int64_t d = 0; d < ID; d++) dot += (double)q[h * ID + d] * kc[t * ID + d];
                dot *= qs;
                if (dot > 0) sum += (double)w->iw[b * IH + h] * hs * dot;
            }
            w->isc[t].s = sum, w->isc[t].t = (int32_t)t;
        }
        int32_t *sel = w->isel + b * w->kc;
        if (K < T) qsort(w->isc, (size_t)T, sizeof *w->isc, by_score);
        for (int64_t j = 0; j < K; j++) sel[j] = w->isc[j].t;
        qsort(sel, (size_t)K, sizeof *sel, by_pos);
        for (int64_t j = K; j < w->kc; j++) sel[j] = -1;
        w->ilen[b] = (int32_t)K;
    }
    return TS_OK;
}

static ts_status attention(ts_model *m, int64_t L, int64_t n, const int64_t *seqs, const int64_t *pos) {
    ts__v3 *v = m->v3;
    ts__v3_ws *w = v->ws;
    const ts__v3_config *c = &v->c;
    const ts__v3_layer *ly = &v->layers[L];
    const int64_t D = c->dim, H = c->n_heads, QK = c->nope + c->rope, KL = c->kv_lora;
    if (c->q_lora) {
        TS__RETURN_IF_ERROR(gemm(ly->q_a, c->q_lora, D, w->h, n, D, w->t, c->q_lora));
        for (int64_t b = 0; b < n; b++)
            rmsnorm(w->t + b * c->q_lora, c->q_lora, ly->q_a_norm, c->eps, w->qa + b * c->q_lora,
                    w->t + b * c->q_lora); /* in place: V3.2's indexer reads it in f32 */
        TS__RETURN_IF_ERROR(gemm(ly->q_b, H * QK, c->q_lora, w->qa, n, c->q_lora, w->q, H * QK));
    } else {
        TS__RETURN_IF_ERROR(gemm(ly->q, H * QK, D, w->h, n, D, w->q, H * QK));
    }
    TS__RETURN_IF_ERROR(gemm(ly->kv_a, KL + c->rope, D, w->h, n, D, w->kv, KL + c->rope));
    for (int64_t b = 0; b < n; b++) {
        /* the cache row of this token: normalised latent, then its RoPE'd shared key */
        uint16_t *row = ly->cache + ((seqs[b] * v->blocks) * PAGE + pos[b]) * LAT;
        rmsnorm(w->kv + b * LAT, KL, ly->kv_a_norm, c->eps, row, NULL);
        rope_row(m, pos[b], w->kv + b * LAT + KL, row + KL);
        to_bf16(w->q + b * H * QK, H * QK, w->qb + b * H * QK);
        for (int64_t h = 0; h < H; h++)
            rope_row(m, pos[b], w->q + b * H * QK + h * QK + c->nope, w->qfull + (b * H + h) * LAT + KL);
        w->sl[b] = (int32_t)(pos[b] + 1);
        for (int64_t j = 0; j < v->blocks; j++) w->bt[b * v->blocks + j] = (int32_t)(seqs[b] * v->blocks + j);
    }
    if (c->v32) TS__RETURN_IF_ERROR(indexer(m, L, n, seqs, pos));
    /* absorbed: q_lat[b, h] = q_nope[b, h] W_UK[h] (rows strided by heads) */
    for (int64_t h = 0; h < H; h++)
        TS__RETURN_IF_ERROR(gemm(ly->uk[h], KL, c->nope, w->qb + h * QK, n, H * QK, w->qlat + h * KL, H * KL));
    for (int64_t b = 0; b < n; b++)
        for (int64_t h = 0; h < H; h++) to_bf16(w->qlat + (b * H + h) * KL, KL, w->qfull + (b * H + h) * LAT);
    if (c->v32) {
        /* the chosen rows of the row's own sequence (ascending positions), FlashMLA's sparse
         * kernel over the bf16 latent cache: one query row per call, so a row's bits do not
         * depend on the batch */
        for (int64_t b = 0; b < n; b++) {
            const ts_tensor q1 = ts_tensor_3d(w->qfull + b * H * LAT, TS_BF16, 1, H, LAT);
            const ts_tensor kv = ts_tensor_3d(ly->cache + (seqs[b] * v->blocks) * PAGE * LAT, TS_BF16,
                                              v->blocks * PAGE, 1, LAT);
            const ts_tensor ix = ts_tensor_3d(w->isel + b * w->kc, TS_I32, 1, 1, w->kc);
            const ts_tensor tl = ts_tensor_1d(w->ilen + b, TS_I32, 1);
            ts_tensor o1 = ts_tensor_3d(w->ao + b * H * KL, TS_BF16, 1, H, KL);
            ts_tensor ml = ts_tensor_2d(w->mlg + b * H, TS_F32, 1, H);
            ts_tensor ls = ts_tensor_2d(w->lse + b * H, TS_F32, 1, H);
            TS__RETURN_IF_ERROR(ts_flash_mla_sparse_fwd(&q1, &kv, &ix, (float)c->softmax_scale, KL, NULL, &tl,
                                                        &o1, &ml, &ls));
        }
        goto unabsorb;
    }
    const ts_tensor q = ts_tensor_make(w->qfull, TS_BF16, 4, (int64_t[]){n, 1, H, LAT});
    const ts_tensor kc = ts_tensor_make(ly->cache, TS_BF16, 4, (int64_t[]){m->max_batch * v->blocks, PAGE, 1, LAT});
    const ts_tensor bt = ts_tensor_2d(w->bt, TS_I32, n, v->blocks);
    const ts_tensor sl = ts_tensor_1d(w->sl, TS_I32, n);
    ts_tensor out = ts_tensor_make(w->ao, TS_BF16, 4, (int64_t[]){n, 1, H, KL});
    ts_tensor lse = ts_tensor_3d(w->lse, TS_F32, n, H, 1);
    ts_flash_mla_kvcache_args a;
    memset(&a, 0, sizeof a);
    a.q = &q, a.k_cache = &kc, a.block_table = &bt, a.cache_seqlens = &sl;
    a.head_dim_v = KL;
    a.softmax_scale = (float)c->softmax_scale;
    a.causal = true;
    TS__RETURN_IF_ERROR(ts__model_flash_mla(&a, &out, &lse));
unabsorb:
    /* latent out -> v per head, then o_proj */
    for (int64_t h = 0; h < H; h++)
        TS__RETURN_IF_ERROR(gemm(ly->uv[h], c->v_head, KL, w->ao + h * KL, n, H * KL, w->ov + h * c->v_head,
                                 H * c->v_head));
    to_bf16(w->ov, n * H * c->v_head, w->ovb);
    return gemm(ly->o, D, H * c->v_head, w->ovb, n, H * c->v_head, w->y, D);
}

/* SwiGLU rows: y = W2 (silu(W1 x) * W3 x) */
static ts_status swiglu(ts__v3_ws *w, ts_packed_weight *w1, ts_packed_weight *w3, ts_packed_weight *w2,
                        int64_t I, int64_t D, const uint16_t *x, int64_t n, float *y) {
    TS__RETURN_IF_ERROR(gemm(w1, I, D, x, n, D, w->g, I));
    TS__RETURN_IF_ERROR(gemm(w3, I, D, x, n, D, w->u, I));
    for (int64_t i = 0; i < n * I; i++) w->act[i] = ts__f32_to_bf16_inl((float)(silu(w->g[i]) * w->u[i]));
    return gemm(w2, D, I, w->act, n, I, y, D);
}

/* Group-limited top-k of one row (transformers' DeepseekV3TopkRouter): s = sigmoid(logit),
 * choice = s + bias, group score = its two best choices, the topk_group best groups, then the
 * topk best choices inside them; weights s, renormalised (+1e-20) when norm_topk_prob, x
 * routed_scaling_factor. Ties go to the lower index. */
static void route(const ts__v3_config *c, const float *logit, const float *bias, double *scratch,
                  int32_t *idx, float *wt) {
    const int64_t E = c->n_experts, G = c->n_group, per = E / G;
    double *sig = scratch, *choice = scratch + E;
    for (int64_t e = 0; e < E; e++) {
        sig[e] = 1.0 / (1.0 + exp(-(double)logit[e]));
        choice[e] = sig[e] + bias[e];
    }
    bool gsel[4096];
    double gs[4096];
    for (int64_t g = 0; g < G; g++) {
        double b1 = -INFINITY, b2 = -INFINITY;
        for (int64_t j = 0; j < per; j++) {
            const double x = choice[g * per + j];
            if (x > b1) b2 = b1, b1 = x;
            else if (x > b2) b2 = x;
        }
        gs[g] = b1 + b2;
        gsel[g] = false;
    }
    for (int64_t k = 0; k < c->topk_group; k++) {
        int64_t best = -1;
        for (int64_t g = 0; g < G; g++)
            if (!gsel[g] && (best < 0 || gs[g] > gs[best])) best = g;
        gsel[best] = true;
    }
    double sum = 0;
    for (int64_t k = 0; k < c->topk; k++) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++) {
            if (!gsel[e / per]) continue;
            bool taken = false;
            for (int64_t j = 0; j < k && !taken; j++) taken = idx[j] == e;
            if (!taken && (best < 0 || choice[e] > choice[best])) best = e;
        }
        idx[k] = (int32_t)best;
        sum += sig[best];
    }
    for (int64_t k = 0; k < c->topk; k++) {
        double x = sig[idx[k]];
        if (c->norm_topk) x /= sum + 1e-20;
        wt[k] = (float)(x * c->route_scale);
    }
}

ts_status ts__v3_run_expert(ts_model *m, int64_t L, int64_t e, const uint16_t *x, int64_t r,
                           uint16_t *out) {
    ts__v3 *v = m->v3;
    ts__v3_ws *w = v->ws;
    const ts__v3_config *c = &v->c;
    const ts__v3_layer *ly = &v->layers[L];
    const int64_t D = c->dim, cap = w->rows * (c->topk + 1); /* rows g / u / eo hold */
    for (int64_t r0 = 0; r0 < r; r0 += cap) {
        const int64_t k = ts__min64(cap, r - r0);
        TS__RETURN_IF_ERROR(swiglu(w, ly->ew1[e], ly->ew3[e], ly->ew2[e], c->moe_inter, D, x + r0 * D, k, w->eo));
        to_bf16(w->eo, k * D, out + r0 * D);
    }
    return TS_OK;
}

void ts__v3_routing(const ts_model *m, const int32_t **sel, const float **selw) {
    *sel = m->v3->ws->sel;
    *selw = m->v3->ws->selw;
}

/* The routed experts of layer L on this process: each expert (ids in order) runs its rows,
 * every (row, slot) output is rounded to bf16, then each row's slots are summed as
 * ts_ep_low_latency_combine sums them (include/tilestack/ep.h: acc = fmaf(y_k, w_k, acc) in
 * top-k order from 0, rounded to bf16), so the expert-parallel model (model_ep_v3.c), whose
 * combine that is, gives the same bits. */
static ts_status routed_local(ts_model *m, int64_t L, int64_t n, uint16_t *out) {
    ts__v3_ws *w = m->v3->ws;
    const ts__v3_config *c = &m->v3->c;
    const int64_t D = c->dim, E = c->n_experts, K = c->topk;
    for (int64_t e = 0; e < E; e++) {
        int64_t r = 0;
        for (int64_t b = 0; b < n; b++)
            for (int64_t k = 0; k < K; k++)
                if (w->sel[b * K + k] == e) {
                    memcpy(w->xe + r * D, w->h + b * D, (size_t)D * 2);
                    w->erow[r++] = (int32_t)(b * K + k);
                }
        if (!r) continue;
        TS__RETURN_IF_ERROR(ts__v3_run_expert(m, L, e, w->xe, r, w->xe));
        for (int64_t i = 0; i < r; i++) memcpy(w->yk + (int64_t)w->erow[i] * D, w->xe + i * D, (size_t)D * 2);
    }
    for (int64_t b = 0; b < n; b++) {
        float *acc = w->y + b * D;
        for (int64_t d = 0; d < D; d++) acc[d] = 0.0f;
        for (int64_t k = 0; k < K; k++) {
            const uint16_t *yk = w->yk + (b * K + k) * D;
            const float wk = w->selw[b * K + k];
            for (int64_t d = 0; d < D; d++) acc[d] = fmaf(ts__bf16_to_f32_inl(yk[d]), wk, acc[d]);
        }
        to_bf16(acc, D, out + b * D);
    }
    return TS_OK;
}

/* Routing, the routed experts (here, or over the ranks: m->ep_routed, model_ep_v3.c), then
 * y = the routed sum (bf16) + the shared experts (f32). */
static ts_status moe(ts_model *m, int64_t L, int64_t n) {
    ts__v3 *v = m->v3;
    ts__v3_ws *w = v->ws;
    const ts__v3_config *c = &v->c;
    const ts__v3_layer *ly = &v->layers[L];
    const int64_t D = c->dim, E = c->n_experts, K = c->topk, I = c->moe_inter;
    ts__model_gemv_f32(w->hf, n, D, ly->gate, E, D, w->gl, E);
    for (int64_t b = 0; b < n; b++) route(c, w->gl + b * E, ly->gate_bias, w->rs, w->sel + b * K, w->selw + b * K);
    const uint16_t *routed = w->routed;
    if (m->ep_routed) TS__RETURN_IF_ERROR(m->ep_routed(m, L, n, w->h, &routed));
    else TS__RETURN_IF_ERROR(routed_local(m, L, n, w->routed));
    for (int64_t i = 0; i < n * D; i++) w->y[i] = ts__bf16_to_f32_inl(routed[i]);
    if (!c->n_shared) return TS_OK;
    TS__RETURN_IF_ERROR(swiglu(w, ly->sw1, ly->sw3, ly->sw2, I * c->n_shared, D, w->h, n, w->eo));
    for (int64_t i = 0; i < n * D; i++) w->y[i] += w->eo[i];
    return TS_OK;
}

/* The layers for n rows (row b: token tokens[b] of sequence seqs[b] at position pos[b]); the
 * last residual streams stay in ws->x. A decode step's rows are distinct sequences; a prefill
 * chunk's consecutive positions of one: every row's cache row is written before FlashMLA runs,
 * and row b attends to positions 0..pos[b] only (its cache_seqlens), as its decode step would. */
static ts_status forward(ts_model *m, int64_t n, const int64_t *seqs, const int64_t *pos,
                         const int32_t *tokens) {
    ts__v3 *v = m->v3;
    ts__v3_ws *w = v->ws;
    const ts__v3_config *c = &v->c;
    const int64_t D = c->dim;
    for (int64_t b = 0; b < n; b++)
        for (int64_t d = 0; d < D; d++) w->x[b * D + d] = ts__bf16_to_f32_inl(v->embed[(int64_t)tokens[b] * D + d]);
    for (int64_t L = 0; L < c->n_layers; L++) {
        const ts__v3_layer *ly = &v->layers[L];
        for (int64_t b = 0; b < n; b++) rmsnorm(w->x + b * D, D, ly->attn_norm, c->eps, w->h + b * D, w->hf + b * D);
        TS__RETURN_IF_ERROR(attention(m, L, n, seqs, pos));
        for (int64_t i = 0; i < n * D; i++) w->x[i] += w->y[i];
        for (int64_t b = 0; b < n; b++) rmsnorm(w->x + b * D, D, ly->ffn_norm, c->eps, w->h + b * D, w->hf + b * D);
        if (L < c->first_dense) TS__RETURN_IF_ERROR(swiglu(w, ly->w1, ly->w3, ly->w2, c->inter, D, w->h, n, w->y));
        else TS__RETURN_IF_ERROR(moe(m, L, n));
        for (int64_t i = 0; i < n * D; i++) w->x[i] += w->y[i];
    }
    return TS_OK;
}

/* logits [n][vocab] of rows row0 .. row0 + n of ws->x */
static ts_status head(ts_model *m, int64_t row0, int64_t n, float *logits) {
    ts__v3 *v = m->v3;
    ts__v3_ws *w = v->ws;
    const int64_t D = v->c.dim;
    for (int64_t b = 0; b < n; b++) rmsnorm(w->x + (row0 + b) * D, D, v->norm, v->c.eps, w->h + b * D, NULL);
    return gemm(v->head, v->c.vocab, D, w->h, n, D, logits, v->c.vocab);
}

ts_status ts__v3_decode(ts_model *m, int64_t n, const int64_t *seqs, const int32_t *tokens, float *logits) {
    TS__RETURN_IF_ERROR(ts__model_check_step(m, n, seqs, tokens));
    if (n == 0) return TS_OK;
    int64_t *pos = m->v3->ws->pos;
    for (int64_t b = 0; b < n; b++) pos[b] = m->pos[seqs[b]];
    TS__RETURN_IF_ERROR(forward(m, n, seqs, pos, tokens));
    for (int64_t b = 0; b < n; b++) m->pos[seqs[b]]++;
    return logits ? head(m, 0, n, logits) : TS_OK;
}

int64_t ts__v3_chunk_rows(const ts_model *m) { return m->v3->ws->rows; }

ts_status ts__v3_prefill_chunk(ts_model *m, int64_t seq, int64_t c0, int64_t k, int64_t n,
                               const int32_t *tokens, float *logits, bool all_logits) {
    ts__v3_ws *w = m->v3->ws;
    const int64_t V = m->cfg.vocab_size, p0 = m->pos[seq];
    for (int64_t b = 0; b < k; b++) w->rseq[b] = seq, w->pos[b] = p0 + b;
    TS__RETURN_IF_ERROR(forward(m, k, w->rseq, w->pos, tokens + c0));
    m->pos[seq] += k;
    if (all_logits) return head(m, 0, k, logits + c0 * V);
    if (logits && c0 + k == n) return head(m, k - 1, 1, logits);
    return TS_OK;
}

ts_status ts__v3_prefill(ts_model *m, int64_t seq, int64_t n_tokens, const int32_t *tokens,
                         float *logits, bool all_logits) {
    /* chunks of the workspace's rows: each weight is read once per chunk, and the bits are
     * those of n_tokens decode steps (batch-invariant kernels, per-row arithmetic unchanged) */
    const int64_t C = ts__v3_chunk_rows(m);
    for (int64_t c0 = 0; c0 < n_tokens; c0 += C)
        TS__RETURN_IF_ERROR(ts__v3_prefill_chunk(m, seq, c0, ts__min64(C, n_tokens - c0), n_tokens,
                                                 tokens, logits, all_logits));
    return TS_OK;
}

void ts__v3_reset(ts_model *m, int64_t seq) {
    /* the rows past the position are never read (cache_seqlens); clear them anyway so a reset
     * sequence holds nothing of the old one */
    ts__v3 *v = m->v3;
    const size_t row = (size_t)(v->blocks * PAGE * LAT);
    for (int64_t L = 0; L < v->c.n_layers; L++) {
        memset(v->layers[L].cache + (size_t)seq * row, 0, row * 2);
        if (v->layers[L].ix_cache)
            memset(v->layers[L].ix_cache + (size_t)(seq * v->c.max_seq * v->c.index_dim), 0,
                   (size_t)(v->c.max_seq * v->c.index_dim) * sizeof(float));
    }
    m->pos[seq] = 0;
}

ts_status ts__v3_prefill_random(ts_model *m, int64_t seq, int64_t context_len, uint64_t *state) {
    ts__v3 *v = m->v3;
    const int64_t ID = v->c.index_dim, P = v->c.max_seq;
    ts__v3_reset(m, seq);
    for (int64_t L = 0; L < v->c.n_layers; L++) {
        uint16_t *row = v->layers[L].cache + seq * v->blocks * PAGE * LAT;
        for (int64_t i = 0; i < context_len * LAT; i++) row[i] = ts__f32_to_bf16_inl(ts__model_rand_unit(state));
        if (!v->layers[L].ix_cache) continue;
        float *k = v->layers[L].ix_cache + seq * P * ID;
        for (int64_t i = 0; i < context_len * ID; i++) k[i] = ts__model_rand_unit(state);
    }
    m->pos[seq] = context_len;
    return TS_OK;
}

/* ---- create / free */

void ts__v3_layer_cache_bytes(const ts__v3_config *c, int64_t B, size_t *kv, size_t *ix) {
    /* bf16 latent rows [kv_lora 512 | rope 64] in 64-token blocks; V3.2's f32 indexer keys */
    *kv = (size_t)(B * ts__ceil_div(c->max_seq, PAGE) * PAGE * LAT) * 2;
    *ix = c->v32 ? (size_t)(B * c->max_seq * c->index_dim) * sizeof(float) : 0;
}

/* The workspace's arrays for B rows (name, type, count), one table for ws_alloc and
 * ts__v3_ws_bytes (the plan); V3.2's indexer adds WS32. */
#define WS_DIMS(c, B)                                                                              \
    const int64_t D = (c)->dim, H = (c)->n_heads, QK = (c)->nope + (c)->rope, KL = (c)->kv_lora;  \
    const int64_t I = max3((c)->inter, (c)->moe_inter * ((c)->n_shared > 0 ? (c)->n_shared : 1),  \
                           (c)->moe_inter);                                                        \
    const int64_t Kq = (c)->q_lora > 0 ? (c)->q_lora : 1, R = (B) * (c)->topk;                    \
    const int64_t NB = ts__ceil_div((c)->max_seq, PAGE), KC = ts__min64((c)->index_topk, (c)->max_seq); \
    (void)KC
#define WS_FIELDS(F_)                                                                              \
    F_(x, float, B * D) F_(hf, float, B * D) F_(t, float, B * Kq) F_(q, float, B * H * QK)         \
    F_(kv, float, B * LAT) F_(qlat, float, B * H * KL) F_(ov, float, B * H * c->v_head)           \
    F_(y, float, B * D) F_(g, float, R * I + B * I) F_(u, float, R * I + B * I)                    \
    F_(eo, float, (R + B) * D) F_(gl, float, B * c->n_experts) F_(selw, float, R)                  \
    F_(lse, float, B * H) F_(h, uint16_t, B * D) F_(qa, uint16_t, B * Kq)                          \
    F_(qb, uint16_t, B * H * QK) F_(qfull, uint16_t, B * H * LAT) F_(ao, uint16_t, B * H * KL)     \
    F_(ovb, uint16_t, B * H * c->v_head) F_(act, uint16_t, R * I + B * I)                          \
    F_(xe, uint16_t, (R + B) * D) F_(yk, uint16_t, R * D) F_(routed, uint16_t, B * D)            \
    F_(sel, int32_t, R) F_(erow, int32_t, R + B) F_(bt, int32_t, B * NB) F_(sl, int32_t, B)       \
    F_(rs, double, 2 * c->n_experts) F_(pos, int64_t, B) F_(rseq, int64_t, B)
#define WS32_FIELDS(F_)                                                                            \
    F_(iq, float, B * c->index_heads * c->index_dim) F_(ik, float, B * c->index_dim)              \
    F_(iw, float, B * c->index_heads) F_(mlg, float, B * H) F_(isc, ix_score, c->max_seq)          \
    F_(isel, int32_t, B * KC) F_(ilen, int32_t, B)

size_t ts__v3_ws_bytes(const ts__v3_config *c, int64_t B) {
    WS_DIMS(c, B);
    size_t n = 0;
#define SUM(f, type, count) n += (size_t)(count) * sizeof(type);
    WS_FIELDS(SUM)
    if (c->v32) { WS32_FIELDS(SUM) }
#undef SUM
    return n;
}

static ts_status ws_alloc(ts__v3 *v, int64_t B) {
    const ts__v3_config *c = &v->c;
    WS_DIMS(c, B);
    ts__v3_ws *w = calloc(1, sizeof *w);
    if (!w) return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_load_dir: workspace");
    v->ws = w;
    w->rows = B;
    bool ok = true;
#define A(f, type, count)                                                                          \
    ok = ok && (w->f = (type *)ts__aligned_alloc((size_t)(count) * sizeof(type)));                  \
    v->ws_bytes += (size_t)(count) * sizeof(type);
    WS_FIELDS(A)
    if (c->v32) {
        w->kc = KC;
        WS32_FIELDS(A)
    }
#undef A
    return ok ? TS_OK : ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_load_dir: workspace of %lld rows", (long long)B);
}

static void ws_free(ts__v3_ws *w) {
    if (!w) return;
    void *p[] = {w->x, w->hf, w->t, w->q, w->kv, w->qlat, w->ov, w->y, w->g, w->u, w->eo, w->gl, w->selw,
                 w->lse, w->h, w->qa, w->qb, w->qfull, w->ao, w->ovb, w->act, w->xe, w->yk, w->routed, w->sel, w->erow,
                 w->bt, w->sl, w->rs, w->pos, w->rseq, w->iq, w->ik, w->iw, w->mlg, w->isc,
                 w->isel, w->ilen};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++) ts__aligned_free(p[i]);
    free(w);
}

ts_status ts__v3_model_create(const ts__v3_config *c, const ts__v3_tensor *tl, int64_t nt,
                              const void *const *data, const ts_dtype *dt,
                              const float *const *scales, int64_t max_batch, ts_model **out) {
    *out = NULL;
    ts_model *m = calloc(1, sizeof *m);
    ts__v3 *v = calloc(1, sizeof *v);
    if (!m || !v) {
        free(m);
        free(v);
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_load_dir: model");
    }
    m->v3 = v;
    v->c = *c;
    m->max_batch = max_batch;
    /* the generic view of the config (ts_model_get_config): what callers size buffers by */
    ts_model_config *g = &m->cfg;
    snprintf(g->name, sizeof g->name, c->v32 ? "deepseek_v32" : "deepseek_v3");
    g->vocab_size = c->vocab, g->dim = c->dim, g->n_layers = c->n_layers, g->n_heads = c->n_heads;
    g->q_lora_rank = c->q_lora, g->rope_head_dim = c->rope, g->head_dim = c->kv_lora + c->rope;
    g->n_routed_experts = c->n_experts, g->n_activated_experts = c->topk, g->moe_inter_dim = c->moe_inter;
    g->score_func = TS_MODEL_SCORE_SIGMOID, g->route_scale = c->route_scale, g->norm_eps = c->eps;
    g->rope_theta = g->compress_rope_theta = c->rope_theta, g->rope_factor = c->factor;
    g->original_seq_len = c->orig_max, g->beta_fast = c->beta_fast, g->beta_slow = c->beta_slow;
    g->max_seq_len = c->max_seq;
    g->hc_mult = 1;
    if (c->v32) g->index_n_heads = c->index_heads, g->index_head_dim = c->index_dim, g->index_topk = c->index_topk;
    v->blocks = ts__ceil_div(c->max_seq, PAGE);
    ts_status st = (m->pos = calloc((size_t)max_batch, sizeof *m->pos)) &&
                           (v->layers = calloc((size_t)c->n_layers, sizeof *v->layers))
                       ? TS_OK : ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_load_dir: model");
    if (st == TS_OK) st = bind(v, tl, nt, data, dt, scales);
    size_t bytes = 0, ib = 0;
    ts__v3_layer_cache_bytes(c, max_batch, &bytes, &ib);
    if (st == TS_OK) m->cache_allocated = (size_t)max_batch * sizeof *m->pos;
    for (int64_t L = 0; st == TS_OK && L < c->n_layers; L++) {
        if (!(v->layers[L].cache = ts__aligned_alloc(bytes)))
            st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_load_dir: KV cache (%zu bytes per layer)", bytes);
        else memset(v->layers[L].cache, 0, bytes), m->cache_allocated += bytes;
        if (st == TS_OK && ib && !(v->layers[L].ix_cache = ts__aligned_alloc(ib)))
            st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_model_load_dir: index cache (%zu bytes per layer)", ib);
        else if (st == TS_OK && ib) memset(v->layers[L].ix_cache, 0, ib), m->cache_allocated += ib;
    }
    if (st == TS_OK) st = rope_tables(m);
    /* prefill chunks of up to TS__PREFILL_ROWS rows (the GEMMs' small-M bound) */
    if (st == TS_OK) st = ws_alloc(v, ts__max64(max_batch, TS__PREFILL_ROWS));
    if (st != TS_OK) {
        ts__v3_free(m);
        return st;
    }
    *out = m;
    return TS_OK;
}

void ts__v3_free(ts_model *m) {
    ts__v3 *v = m->v3;
    for (int64_t L = 0; v->layers && L < v->c.n_layers; L++) {
        ts__v3_layer *ly = &v->layers[L];
        ts_packed_weight *one[] = {ly->q_a, ly->q_b, ly->q, ly->kv_a, ly->o, ly->w1, ly->w3, ly->w2,
                                   ly->sw1, ly->sw3, ly->sw2};
        for (size_t i = 0; i < sizeof one / sizeof *one; i++) ts_packed_weight_destroy(one[i]);
        for (int64_t h = 0; h < v->c.n_heads; h++) {
            if (ly->uk) ts_packed_weight_destroy(ly->uk[h]);
            if (ly->uv) ts_packed_weight_destroy(ly->uv[h]);
        }
        for (int64_t e = 0; e < v->c.n_experts; e++) {
            if (ly->ew1) ts_packed_weight_destroy(ly->ew1[e]);
            if (ly->ew3) ts_packed_weight_destroy(ly->ew3[e]);
            if (ly->ew2) ts_packed_weight_destroy(ly->ew2[e]);
        }
        free(ly->uk), free(ly->uv), free(ly->ew1), free(ly->ew3), free(ly->ew2);
        ts__aligned_free(ly->cache);
        ts__aligned_free(ly->ix_cache);
    }
    free(v->layers);
    ts_packed_weight_destroy(v->head);
    ts__aligned_free(v->f32_bufs);
    ws_free(v->ws);
    ts__hf_close(v->ckpt); /* after everything that views its mappings */
    free(v);
    free(m->pos);
    free(m->rope_cos[0]);
    free(m->rope_sin[0]);
    free(m);
}
