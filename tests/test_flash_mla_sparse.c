/* FlashMLA sparse decode (FP8 KV, V32 and MODEL1): float64 oracle on the dequantised cache with
 * upstream's tolerances, NaN-poisoned unused cache rows, -1 slots, all-invalid rows, zero
 * topk_length, sinks of +-inf, the extra cache in the same softmax; generic vs AVX2 and 1/2/3
 * threads bitwise; batch invariance; bad input. */
#include "test_flash_mla_common.h"
#include "ts_guard_pages.h"

typedef struct sp_case {
    ts_mla_kv_layout L;
    int64_t b, sq, hq, topk, P, nb, etopk, eP, enb;
    int use_len, use_sink;
    const int32_t *fix_len, *fix_elen; /* topk_length / extra_topk_length if not random */
} sp_case;

typedef struct sp_data {
    sp_case c;
    int64_t d, tb;
    uint16_t *q;
    uint8_t *kc, *ekc;
    uint16_t *deq, *edeq; /* dequantised (pre-poison) caches, [nb*P][d] */
    int32_t *ind, *eind, *len, *elen;
    float *sink;
    ts_tensor tq, tk, tind, tsink, tlen, tek, teind, telen;
} sp_data;

static void poison_token(sp_data *s, uint8_t *cache, int64_t P, int64_t tok) {
    int64_t blk = tok / P, r = tok % P, bs = P * s->tb;
    if (s->c.L == TS_MLA_KV_V32) {
        uint8_t *t = cache + blk * bs + r * 656;
        memset(t, 0xFF, 512);
        float nanf_ = NAN;
        for (int j = 0; j < 4; j++) memcpy(t + 512 + 4 * j, &nanf_, 4);
        for (int j = 0; j < 64; j++) memcpy(t + 528 + 2 * j, &(uint16_t){0x7FC0}, 2);
    } else {
        uint8_t *t = cache + blk * bs + r * 576;
        memset(t, 0xFF, 448);
        for (int j = 0; j < 64; j++) memcpy(t + 448 + 2 * j, &(uint16_t){0x7FC0}, 2);
        memset(cache + blk * bs + P * 576 + r * 8, 0xFF, 7);
    }
}

static uint8_t *make_cache(sp_data *s, ts_prng *p, int64_t nb, int64_t P, uint16_t **deq) {
    int64_t d = s->d, tb = s->tb;
    uint16_t *x = (uint16_t *)malloc((size_t)(nb * P * d) * 2);
    for (int64_t i = 0; i < nb * P * d; i++) {
        float v = ts_prng_uniform(p) * 0.25f;
        x[i] = fm_tobf(v);
    }
    uint8_t *kc = (uint8_t *)malloc((size_t)(nb * P * tb));
    ts_tensor xt = ts_tensor_make(x, TS_BF16, 4, (int64_t[]){nb, P, 1, d});
    ts_tensor kt = ts_tensor_make(kc, TS_U8, 4, (int64_t[]){nb, P, 1, tb});
    ts_mla_quantize_kv_cache(s->c.L, &xt, &kt);
    ts_mla_dequantize_kv_cache(s->c.L, &kt, &xt);
    *deq = x;
    return kc;
}

static void fill_indices(ts_prng *p, int32_t *ind, int64_t n, int64_t ntok) {
    for (int64_t i = 0; i < n; i++)
        ind[i] = ts_prng_u32(p) % 5 == 0 ? -1 : (int32_t)(ts_prng_u32(p) % ntok);
}

static void sp_build(sp_data *s, const sp_case *c, uint64_t seed) {
    memset(s, 0, sizeof *s);
    s->c = *c;
    s->d = ts_mla_kv_head_dim(c->L);
    s->tb = ts_mla_kv_token_bytes(c->L);
    ts_prng p = ts_prng_seed(seed);
    int64_t nq = c->b * c->sq * c->hq * s->d;
    s->q = (uint16_t *)malloc((size_t)nq * 2);
    fm_fill_bf16(&p, s->q, nq, 1.0f);
    s->kc = make_cache(s, &p, c->nb, c->P, &s->deq);
    s->ind = (int32_t *)malloc((size_t)(c->b * c->sq * c->topk) * 4);
    fill_indices(&p, s->ind, c->b * c->sq * c->topk, c->nb * c->P);
    /* request 0 token 0: every slot invalid */
    for (int64_t k = 0; k < c->topk; k++) s->ind[k] = -1;
    s->len = (int32_t *)malloc((size_t)c->b * 4);
    for (int64_t i = 0; i < c->b; i++) s->len[i] = (int32_t)(ts_prng_u32(&p) % (c->topk + 1));
    if (c->b > 1) s->len[1] = 0;              /* zero-length request */
    if (c->b > 2) s->len[2] = (int32_t)c->topk;
    if (c->fix_len) memcpy(s->len, c->fix_len, (size_t)c->b * 4);
    s->sink = (float *)malloc((size_t)c->hq * 4);
    for (int64_t h = 0; h < c->hq; h++) s->sink[h] = ts_prng_uniform(&p) * 2.0f;
    if (c->hq > 1) s->sink[1] = INFINITY;
    if (c->hq > 2) s->sink[2] = -INFINITY;
    if (c->etopk) {
        s->ekc = make_cache(s, &p, c->enb, c->eP, &s->edeq);
        s->eind = (int32_t *)malloc((size_t)(c->b * c->sq * c->etopk) * 4);
        fill_indices(&p, s->eind, c->b * c->sq * c->etopk, c->enb * c->eP);
        s->elen = (int32_t *)malloc((size_t)c->b * 4);
        for (int64_t i = 0; i < c->b; i++) s->elen[i] = (int32_t)(ts_prng_u32(&p) % (c->etopk + 1));
        for (int64_t k = 0; k < c->etopk; k++) s->eind[k] = -1; /* (0, 0) stays empty */
        if (c->b > 1) s->elen[1] = 0;
        if (c->b > 2) s->elen[2] = (int32_t)c->etopk; /* with len[2] = topk: the longest list */
        if (c->fix_elen) memcpy(s->elen, c->fix_elen, (size_t)c->b * 4);
    }
    /* poison every token no valid slot reads (slots past topk_length may point at them) */
    for (int e = 0; e < (c->etopk ? 2 : 1); e++) {
        int64_t ntok = e ? c->enb * c->eP : c->nb * c->P, tk = e ? c->etopk : c->topk;
        const int32_t *ind = e ? s->eind : s->ind, *len = e ? s->elen : s->len;
        char *used = (char *)calloc((size_t)ntok, 1);
        for (int64_t i = 0; i < c->b; i++)
            for (int64_t q = 0; q < c->sq; q++) {
                int64_t cnt = (c->use_len || e) && len ? len[i] : tk;
                for (int64_t k = 0; k < cnt; k++) {
                    int32_t v = ind[(i * c->sq + q) * tk + k];
                    if (v >= 0) used[v] = 1;
                }
            }
        for (int64_t t = 0; t < ntok; t++)
            if (!used[t]) poison_token(s, e ? s->ekc : s->kc, e ? c->eP : c->P, t);
        free(used);
    }
    s->tq = ts_tensor_make(s->q, TS_BF16, 4, (int64_t[]){c->b, c->sq, c->hq, s->d});
    s->tk = ts_tensor_make(s->kc, TS_U8, 4, (int64_t[]){c->nb, c->P, 1, s->tb});
    s->tind = ts_tensor_3d(s->ind, TS_I32, c->b, c->sq, c->topk);
    s->tsink = ts_tensor_1d(s->sink, TS_F32, c->hq);
    s->tlen = ts_tensor_1d(s->len, TS_I32, c->b);
    if (c->etopk) {
        s->tek = ts_tensor_make(s->ekc, TS_U8, 4, (int64_t[]){c->enb, c->eP, 1, s->tb});
        s->teind = ts_tensor_3d(s->eind, TS_I32, c->b, c->sq, c->etopk);
        s->telen = ts_tensor_1d(s->elen, TS_I32, c->b);
    }
}

static void sp_free(sp_data *s) {
    free(s->q);
    free(s->kc);
    free(s->ekc);
    free(s->deq);
    free(s->edeq);
    free(s->ind);
    free(s->eind);
    free(s->len);
    free(s->elen);
    free(s->sink);
}

static ts_flash_mla_kvcache_args sp_args(sp_data *s, ts_mla_metadata *meta) {
    ts_flash_mla_kvcache_args a;
    memset(&a, 0, sizeof a);
    a.q = &s->tq;
    a.k_cache = &s->tk;
    a.head_dim_v = 512;
    a.tile_scheduler_metadata = meta;
    a.softmax_scale = (float)pow((double)s->d, -0.55);
    a.is_fp8_kvcache = true;
    a.indices = &s->tind;
    a.attn_sink = s->c.use_sink ? &s->tsink : NULL;
    a.topk_length = s->c.use_len ? &s->tlen : NULL;
    if (s->c.etopk) {
        a.extra_k_cache = &s->tek;
        a.extra_indices_in_kvcache = &s->teind;
        a.extra_topk_length = &s->telen;
    }
    return a;
}

/* run and compare with the float64 oracle */
static void sp_check_ref(ts_test_ctx *ts_t_, sp_data *s, const char *what) {
    const sp_case *c = &s->c;
    int64_t no = c->b * c->sq * c->hq * 512;
    uint16_t *out = (uint16_t *)malloc((size_t)no * 2);
    float *lse = (float *)malloc((size_t)(c->b * c->hq * c->sq) * 4);
    ts_tensor to = ts_tensor_make(out, TS_BF16, 4, (int64_t[]){c->b, c->sq, c->hq, 512});
    ts_tensor tl = ts_tensor_3d(lse, TS_F32, c->b, c->hq, c->sq);
    ts_mla_metadata *meta;
    ts_get_mla_metadata(&meta);
    ts_flash_mla_kvcache_args a = sp_args(s, meta);
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &to, &tl), TS_OK);
    ts_mla_metadata_free(meta);
    fm_cmp co = {0}, cl = {0};
    int64_t maxk = c->topk + c->etopk;
    const float **rows = (const float **)malloc((size_t)(maxk + 1) * sizeof(float *));
    float *kf = (float *)malloc((size_t)((maxk + 1) * s->d) * 4);
    float *qf = (float *)malloc((size_t)s->d * 4);
    double ref[512], rl;
    int empty_rows = 0;
    for (int64_t i = 0; i < c->b; i++)
        for (int64_t q = 0; q < c->sq; q++) {
            int64_t n = 0;
            for (int e = 0; e < (c->etopk ? 2 : 1); e++) {
                int64_t tk = e ? c->etopk : c->topk;
                int64_t cnt = e ? s->elen[i] : c->use_len ? s->len[i] : tk;
                const int32_t *ind = (e ? s->eind : s->ind) + (i * c->sq + q) * tk;
                const uint16_t *deq = e ? s->edeq : s->deq;
                for (int64_t k = 0; k < cnt; k++) {
                    if (ind[k] == -1) continue;
                    for (int64_t j = 0; j < s->d; j++) kf[n * s->d + j] = fm_bf(deq[ind[k] * s->d + j]);
                    n++;
                }
            }
            for (int64_t t = 0; t < n; t++) rows[t] = kf + t * s->d;
            empty_rows += n == 0;
            for (int64_t h = 0; h < c->hq; h++) {
                const uint16_t *qr = s->q + ((i * c->sq + q) * c->hq + h) * s->d;
                for (int64_t j = 0; j < s->d; j++) qf[j] = fm_bf(qr[j]);
                fm_ref_row(qf, rows, n, s->d, a.softmax_scale, c->use_sink, s->sink[h], ref, &rl);
                const uint16_t *orow = out + ((i * c->sq + q) * c->hq + h) * 512;
                for (int j = 0; j < 512; j++) fm_cmp_add(&co, fm_bf(orow[j]), ref[j], 1e-3, 2.01 / 128);
                fm_cmp_add(&cl, lse[(i * c->hq + h) * c->sq + q], rl, 1e-6, 8.01 / 65536);
            }
        }
    TS_CHECK_MSG(empty_rows > 0 && co.n > 0, "%s: the case has no empty row", what);
    FM_CHECK_CMP(co, 5e-6, what);
    FM_CHECK_CMP(cl, 1.0, what);
    free(rows);
    free(kf);
    free(qf);
    free(out);
    free(lse);
}

TS_TEST(flash_mla_sparse_v32_reference) {
    sp_case c = {TS_MLA_KV_V32, 3, 2, 37, 70, 53, 5, 0, 0, 0, 1, 1, NULL, NULL};
    sp_data s;
    sp_build(&s, &c, 101);
    sp_check_ref(ts_t_, &s, "v32 h37 topk70 P53");
    sp_free(&s);
    sp_case c2 = {TS_MLA_KV_V32, 2, 1, 16, 130, 1, 200, 0, 0, 0, 0, 0, NULL, NULL};
    sp_build(&s, &c2, 102);
    sp_check_ref(ts_t_, &s, "v32 h16 topk130 P1 no len/sink");
    sp_free(&s);
}

TS_TEST(flash_mla_sparse_model1_extra_reference) {
    sp_case c = {TS_MLA_KV_MODEL1, 3, 3, 20, 64, 69, 3, 40, 64, 2, 1, 1, NULL, NULL};
    sp_data s;
    sp_build(&s, &c, 103);
    sp_check_ref(ts_t_, &s, "model1 extra P69/64");
    sp_free(&s);
    sp_case c2 = {TS_MLA_KV_V32, 3, 1, 8, 50, 64, 2, 30, 53, 3, 1, 1, NULL, NULL};
    sp_build(&s, &c2, 104);
    sp_check_ref(ts_t_, &s, "v32 extra (CPU relaxation)");
    sp_free(&s);
    /* request 2 has 900 + 400 slots: two chunks of the split plan, the cut inside the main row */
    sp_case c3 = {TS_MLA_KV_MODEL1, 3, 2, 3, 900, 64, 20, 400, 53, 10, 1, 1, NULL, NULL};
    sp_build(&s, &c3, 108);
    sp_check_ref(ts_t_, &s, "model1 split plan");
    sp_free(&s);
}

/* same bits for the generic and AVX2 paths and 1, 2, 3 threads; a request alone gives the bits
 * it gets inside the batch; one handle serves repeated calls with the same config */
TS_TEST(flash_mla_sparse_deterministic) {
    /* request 2: 1000 + 100 slots, split in two chunks by the plan */
    sp_case c = {TS_MLA_KV_MODEL1, 3, 2, 10, 1000, 64, 20, 100, 64, 2, 1, 1, NULL, NULL};
    sp_data s;
    sp_build(&s, &c, 105);
    fm_outs o;
    fm_outs_make(&o, c.b, c.sq, c.hq);
    ts_mla_metadata *meta;
    ts_get_mla_metadata(&meta);
    fm_kvcache_run run = {sp_args(&s, meta), &o.to, &o.tl};
    const fm_buf bufs[] = {{o.out, o.out0, (size_t)o.no * 2, "out"},
                           {o.lse, o.lse0, (size_t)o.nl * 4, "lse"}};
    fm_check_isa_threads(ts_t_, fm_kvcache_run_fn, &run, bufs, 2);
    ts_mla_metadata_free(meta);
    /* request 2 alone */
    ts_tensor q1 = s.tq, i1 = s.tind, l1 = s.tlen, ei1 = s.teind, el1 = s.telen;
    q1.data = s.q + 2 * c.sq * c.hq * s.d;
    q1.shape[0] = 1;
    i1.data = s.ind + 2 * c.sq * c.topk;
    i1.shape[0] = 1;
    l1.data = s.len + 2;
    l1.shape[0] = 1;
    ei1.data = s.eind + 2 * c.sq * c.etopk;
    ei1.shape[0] = 1;
    el1.data = s.elen + 2;
    el1.shape[0] = 1;
    ts_get_mla_metadata(&meta);
    ts_flash_mla_kvcache_args a1 = sp_args(&s, meta);
    a1.q = &q1;
    a1.indices = &i1;
    a1.topk_length = &l1;
    a1.extra_indices_in_kvcache = &ei1;
    a1.extra_topk_length = &el1;
    ts_tensor to1 = ts_tensor_make(o.out, TS_BF16, 4, (int64_t[]){1, c.sq, c.hq, 512});
    ts_tensor tl1 = ts_tensor_3d(o.lse, TS_F32, 1, c.hq, c.sq);
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a1, &to1, &tl1), TS_OK);
    TS_CHECK(memcmp(o.out, o.out0 + 2 * c.sq * c.hq * 512, (size_t)(c.sq * c.hq * 512) * 2) == 0);
    TS_CHECK(memcmp(o.lse, o.lse0 + 2 * c.hq * c.sq, (size_t)(c.hq * c.sq) * 4) == 0);
    /* the handle was filled for b = 1: the full batch is another config */
    run.a.tile_scheduler_metadata = meta;
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&run.a, &o.to, &o.tl), TS_ERR_INVALID_ARGUMENT);
    ts_mla_metadata_free(meta);
    fm_outs_free(&o);
    sp_free(&s);
}

TS_TEST(flash_mla_sparse_bad_input) {
    sp_case c = {TS_MLA_KV_V32, 2, 1, 4, 8, 4, 3, 0, 0, 0, 1, 1, NULL, NULL};
    sp_data s;
    sp_build(&s, &c, 106);
    fm_outs o;
    fm_outs_make(&o, c.b, c.sq, c.hq);
    memset(o.out, 0x33, (size_t)o.no * 2);
    memset(o.lse, 0x33, (size_t)o.nl * 4);
    ts_mla_metadata *meta;
    ts_get_mla_metadata(&meta);
    ts_flash_mla_kvcache_args a = sp_args(&s, meta);
    int32_t keep = s.ind[5];
    s.ind[5] = (int32_t)(c.nb * c.P); /* one past the cache */
    s.len[0] = (int32_t)c.topk;
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &o.to, &o.tl), TS_ERR_INVALID_ARGUMENT);
    s.ind[5] = INT32_MIN;
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &o.to, &o.tl), TS_ERR_INVALID_ARGUMENT);
    s.ind[5] = -2;
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &o.to, &o.tl), TS_ERR_INVALID_ARGUMENT);
    s.ind[5] = INT32_MAX;
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &o.to, &o.tl), TS_ERR_INVALID_ARGUMENT);
    s.ind[5] = keep;
    s.len[0] = (int32_t)c.topk + 1;
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &o.to, &o.tl), TS_ERR_INVALID_ARGUMENT);
    s.len[0] = 0;
    a.head_dim_v = 576;
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &o.to, &o.tl), TS_ERR_UNSUPPORTED);
    a.head_dim_v = 512;
    a.causal = true;
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &o.to, &o.tl), TS_ERR_INVALID_ARGUMENT);
    a.causal = false;
    a.is_fp8_kvcache = false;
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &o.to, &o.tl), TS_ERR_UNSUPPORTED);
    a.is_fp8_kvcache = true;
    ts_tensor bad = s.tind;
    bad.dtype = TS_I64;
    a.indices = &bad;
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &o.to, &o.tl), TS_ERR_DTYPE);
    bad = s.tind;
    bad.shape[1] = 2;
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &o.to, &o.tl), TS_ERR_SHAPE);
    a.indices = &s.tind;
    ts_tensor bk = s.tk;
    bk.shape[3] = 584; /* MODEL1 bytes with a 576-dim q */
    a.k_cache = &bk;
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &o.to, &o.tl), TS_ERR_SHAPE);
    a.k_cache = &s.tk;
    ts_tensor bo = o.to;
    bo.strides[3] = 2;
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &bo, &o.tl), TS_ERR_STRIDE);
    ts_tensor bs = s.tsink;
    bs.shape[0] = c.hq + 1;
    a.attn_sink = &bs;
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &o.to, &o.tl), TS_ERR_SHAPE);
    a.attn_sink = &s.tsink;
    a.tile_scheduler_metadata = NULL;
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &o.to, &o.tl), TS_ERR_NULL_POINTER);
    int untouched = 1;
    for (int64_t i = 0; i < o.no; i++) untouched &= o.out[i] == 0x3333;
    for (int64_t i = 0; i < o.nl; i++) {
        uint32_t u;
        memcpy(&u, o.lse + i, 4);
        untouched &= u == 0x33333333u;
    }
    TS_CHECK(untouched);
    ts_mla_metadata_free(meta);
    fm_outs_free(&o);
    sp_free(&s);
}

/* non-contiguous q / indices / topk_length / out, and lse written through upstream's transposed
 * view ([b, s_q, h_q] storage seen as [b, h_q, s_q]): the same bits as contiguous tensors */
TS_TEST(flash_mla_sparse_strides) {
    sp_case c = {TS_MLA_KV_V32, 2, 3, 10, 40, 64, 3, 0, 0, 0, 1, 1, NULL, NULL};
    sp_data s;
    sp_build(&s, &c, 107);
    const int64_t no = c.b * c.sq * c.hq * 512, nl = c.b * c.hq * c.sq;
    uint16_t *out0 = (uint16_t *)malloc((size_t)no * 2);
    float *lse0 = (float *)malloc((size_t)nl * 4);
    ts_tensor to = ts_tensor_make(out0, TS_BF16, 4, (int64_t[]){c.b, c.sq, c.hq, 512});
    ts_tensor tl = ts_tensor_3d(lse0, TS_F32, c.b, c.hq, c.sq);
    ts_mla_metadata *meta;
    ts_get_mla_metadata(&meta);
    ts_flash_mla_kvcache_args a = sp_args(&s, meta);
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &to, &tl), TS_OK);
    /* padded copies */
    const int64_t qh = s.d + 8, qs = c.hq * qh + 4, qb = c.sq * qs + 2;
    uint16_t *q2 = (uint16_t *)malloc((size_t)(c.b * qb) * 2);
    for (int64_t i = 0; i < c.b; i++)
        for (int64_t t = 0; t < c.sq; t++)
            for (int64_t h = 0; h < c.hq; h++)
                memcpy(q2 + i * qb + t * qs + h * qh, s.q + ((i * c.sq + t) * c.hq + h) * s.d, (size_t)s.d * 2);
    const int64_t is = c.topk + 5;
    int32_t *ind2 = (int32_t *)malloc((size_t)(c.b * c.sq * is) * 4), len2[4] = {0};
    for (int64_t r = 0; r < c.b * c.sq; r++) memcpy(ind2 + r * is, s.ind + r * c.topk, (size_t)c.topk * 4);
    for (int64_t i = 0; i < c.b; i++) len2[2 * i] = s.len[i];
    const int64_t oh = 512 + 16;
    uint16_t *out2 = (uint16_t *)malloc((size_t)(c.b * c.sq * c.hq * oh) * 2);
    float *lse2 = (float *)malloc((size_t)nl * 4);
    ts_tensor tq2 = {q2, TS_BF16, 4, {c.b, c.sq, c.hq, s.d}, {qb, qs, qh, 1}};
    ts_tensor ti2 = {ind2, TS_I32, 3, {c.b, c.sq, c.topk}, {c.sq * is, is, 1}};
    ts_tensor tl2 = {len2, TS_I32, 1, {c.b}, {2}};
    ts_tensor to2 = {out2, TS_BF16, 4, {c.b, c.sq, c.hq, 512}, {c.sq * c.hq * oh, c.hq * oh, oh, 1}};
    ts_tensor tlse2 = {lse2, TS_F32, 3, {c.b, c.hq, c.sq}, {c.sq * c.hq, 1, c.hq}};
    ts_mla_metadata *meta2;
    ts_get_mla_metadata(&meta2);
    ts_flash_mla_kvcache_args a2 = sp_args(&s, meta2);
    a2.q = &tq2;
    a2.indices = &ti2;
    a2.topk_length = &tl2;
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a2, &to2, &tlse2), TS_OK);
    int bad = 0;
    for (int64_t r = 0; r < c.b * c.sq * c.hq; r++) bad += memcmp(out2 + r * oh, out0 + r * 512, 1024) != 0;
    for (int64_t i = 0; i < c.b; i++)
        for (int64_t h = 0; h < c.hq; h++)
            for (int64_t t = 0; t < c.sq; t++)
                bad += memcmp(&lse2[(i * c.sq + t) * c.hq + h], &lse0[(i * c.hq + h) * c.sq + t], 4) != 0;
    TS_CHECK_EQ_INT(bad, 0);
    ts_mla_metadata_free(meta);
    ts_mla_metadata_free(meta2);
    free(out0);
    free(lse0);
    free(q2);
    free(ind2);
    free(out2);
    free(lse2);
    sp_free(&s);
}

/* ---- never read: unused tokens and index tails on PROT_NONE pages ---- */

/* token t of a P = 1 cache is read iff a slot below its row's count names it */
static char *sp_used(const sp_data *s, int e) {
    const sp_case *c = &s->c;
    int64_t ntok = e ? c->enb : c->nb, tk = e ? c->etopk : c->topk;
    const int32_t *ind = e ? s->eind : s->ind, *len = e ? s->elen : s->len;
    char *used = (char *)calloc((size_t)ntok, 1);
    for (int64_t i = 0; i < c->b * c->sq; i++) {
        int64_t cnt = (c->use_len || e) ? len[i / c->sq] : tk;
        for (int64_t k = 0; k < cnt; k++)
            if (ind[i * tk + k] >= 0) used[ind[i * tk + k]] = 1;
    }
    return used;
}

/* P = 1 cache: block t ends on a page boundary, block stride one page; only used blocks open */
static ts_tensor sp_guard_cache(ts_guard *g, const sp_data *s, int e) {
    const int64_t nb = e ? s->c.enb : s->c.nb, tb = s->tb, pg = (int64_t)ts_guard_page();
    const uint8_t *src = e ? s->ekc : s->kc;
    char *used = sp_used(s, e);
    *g = ts_guard_make((size_t)(nb * pg));
    const size_t off = ts_guard_end_aligned(0, (size_t)tb);
    for (int64_t t = 0; t < nb; t++)
        if (used[t]) {
            ts_guard_open(g, off + (size_t)(t * pg), (size_t)tb);
            memcpy(g->base + off + t * pg, src + t * tb, (size_t)tb);
        }
    free(used);
    return (ts_tensor){g->base + off, TS_U8, 4, {nb, 1, 1, tb}, {pg, tb, tb, 1}};
}

static ts_tensor sp_guard_indices(ts_guard *g, const int32_t *ind, const int32_t *len,
                                  int64_t b, int64_t sq, int64_t tk) {
    int64_t st0, st1;
    int32_t *base = ts_guard_i32_rows(g, ind, b, sq, tk, len, &st0, &st1);
    return (ts_tensor){base, TS_I32, 3, {b, sq, tk}, {st0, st1, 1}};
}

static void sp_guard_case(ts_test_ctx *ts_t_, const sp_case *c, uint64_t seed, const char *what) {
    sp_data s;
    sp_build(&s, c, seed);
    fm_outs o;
    fm_outs_make(&o, c->b, c->sq, c->hq);
    ts_mla_metadata *meta;
    ts_get_mla_metadata(&meta);
    ts_flash_mla_kvcache_args a = sp_args(&s, meta);
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &o.to0, &o.tl0), TS_OK);
    ts_mla_metadata_free(meta);

    ts_guard gk, gi, gek = {0}, gei = {0};
    ts_tensor tk = sp_guard_cache(&gk, &s, 0);
    ts_tensor ti = sp_guard_indices(&gi, s.ind, s.len, c->b, c->sq, c->topk);
    ts_tensor tek, tei;
    TS_CHECK(gk.base && ti.data);
    a.k_cache = &tk;
    a.indices = &ti;
    if (c->etopk) {
        tek = sp_guard_cache(&gek, &s, 1);
        tei = sp_guard_indices(&gei, s.eind, s.elen, c->b, c->sq, c->etopk);
        TS_CHECK(gek.base && tei.data);
        a.extra_k_cache = &tek;
        a.extra_indices_in_kvcache = &tei;
    }
    int saved_t = ts_get_num_threads();
    for (int t = 1; t <= 2; t++) {
        ts_set_num_threads(t);
        ts_get_mla_metadata(&meta);
        a.tile_scheduler_metadata = meta;
        memset(o.out, 0xAB, (size_t)o.no * 2);
        TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &o.to, &o.tl), TS_OK);
        ts_mla_metadata_free(meta);
        TS_CHECK_MSG(memcmp(o.out, o.out0, (size_t)o.no * 2) == 0, "%s: out differs (%d threads)", what, t);
        TS_CHECK_MSG(memcmp(o.lse, o.lse0, (size_t)o.nl * 4) == 0, "%s: lse differs (%d threads)", what, t);
    }
    ts_set_num_threads(saved_t);
    ts_guard_free(&gk);
    ts_guard_free(&gi);
    ts_guard_free(&gek);
    ts_guard_free(&gei);
    fm_outs_free(&o);
    sp_free(&s);
}

/* the guarded run gives the bits of the plain run: no fault means no unused token, no slot past
 * topk_length / extra_topk_length and no extra byte of a token was touched */
TS_TEST(flash_mla_sparse_never_reads_unused) {
    static const int32_t l1[4] = {0, 43, 86, 129};
    sp_case c1 = {TS_MLA_KV_V32, 4, 2, 16, 130, 1, 300, 0, 0, 0, 1, 1, l1, NULL};
    sp_guard_case(ts_t_, &c1, 111, "v32 guarded");
    static const int32_t l2[4] = {3, 23, 43, 63}, e2[4] = {0, 13, 26, 39};
    sp_case c2 = {TS_MLA_KV_MODEL1, 4, 1, 8, 64, 1, 150, 40, 1, 100, 1, 1, l2, e2};
    sp_guard_case(ts_t_, &c2, 112, "model1 + extra guarded");
}

/* DeepSeek's head counts, bitwise over every path: h_q 128, 100 (rows padded to 112) and 80
 * take every strip grouping of the AVX-512 QK kernel (4 + 4, 4 + 3, 3 + 2) and both PV row
 * rests (two 4-row blocks, one), which the small cases above never reach; 2 and 3 threads
 * also split the rows into panels of other strip counts. */
TS_TEST(flash_mla_sparse_many_heads_every_path) {
    const sp_case cases[] = {
        {TS_MLA_KV_V32, 2, 1, 128, 60, 64, 4, 0, 0, 0, 1, 1, NULL, NULL},
        {TS_MLA_KV_V32, 1, 2, 100, 50, 64, 4, 0, 0, 0, 1, 0, NULL, NULL},
        {TS_MLA_KV_MODEL1, 2, 1, 80, 60, 64, 4, 0, 0, 0, 0, 1, NULL, NULL},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const sp_case c = cases[k];
        sp_data s;
        sp_build(&s, &c, 130 + k);
        fm_outs o;
        fm_outs_make(&o, c.b, c.sq, c.hq);
        ts_mla_metadata *meta;
        ts_get_mla_metadata(&meta);
        fm_kvcache_run run = {sp_args(&s, meta), &o.to, &o.tl};
        const fm_buf bufs[] = {{o.out, o.out0, (size_t)o.no * 2, "out"},
                               {o.lse, o.lse0, (size_t)o.nl * 4, "lse"}};
        fm_check_isa_threads(ts_t_, fm_kvcache_run_fn, &run, bufs, 2);
        ts_mla_metadata_free(meta);
        fm_outs_free(&o);
        sp_free(&s);
    }
}

/* ---- FP8 dequantisation rule ---- */

/* upstream's SM90 kernel: bf16(e4m3) * bf16(scale) in bf16 arithmetic = bf16(e4m3 * bf16(scale)) */
static float sp_rule(uint8_t code, float scale) {
    return fm_bf(fm_tobf(ts_e4m3_to_f32(code) * fm_bf(fm_tobf(scale))));
}

/* One valid slot per row: p = exp(0) = 1 and l = 1, so out is that token's V exactly and shows
 * the decoded values bit for bit. Scales that are not powers of two (V32 caches quantised with
 * amax / 448) and MODEL1 exponents whose products land in the bf16 subnormal range are rounded
 * as upstream's kernel does; the test also checks that the unrounded-scale rule would differ,
 * so it can tell the two apart. */
TS_TEST(flash_mla_sparse_fp8_dequant_rounding) {
    const int64_t b = 3, sq = 2, hq = 16, topk = 8, nb = 24;
    ts_prng p = ts_prng_seed(121);
    for (int L = 0; L < 2; L++) {
        const ts_mla_kv_layout lay = L ? TS_MLA_KV_MODEL1 : TS_MLA_KV_V32;
        const int64_t tb = ts_mla_kv_token_bytes(lay), d = ts_mla_kv_head_dim(lay);
        const int64_t nope = L ? 448 : 512, tile = L ? 64 : 128;
        uint8_t *kc = (uint8_t *)calloc((size_t)(nb * tb), 1);
        float *want = (float *)malloc((size_t)(nb * 512) * 4);
        int64_t differs = 0;
        for (int64_t t = 0; t < nb; t++) {
            uint8_t *tok = kc + t * tb; /* P = 1: block t is token t, scales after the data */
            for (int64_t j = 0; j < nope / tile; j++) {
                float sc;
                if (!L) {
                    /* mostly non-powers of two; every fourth token a power of two */
                    float u = t % 4 == 3 ? 0.0f : 0.5f + 0.5f * ts_prng_uniform(&p);
                    sc = ldexpf(1.0f + fabsf(u), -(int)(ts_prng_u32(&p) % 9));
                    memcpy(tok + 512 + 4 * j, &sc, 4);
                } else {
                    /* exponents 1..9 put products in the bf16 subnormal range */
                    uint8_t e = t % 3 == 0 ? (uint8_t)(1 + ts_prng_u32(&p) % 9)
                                           : (uint8_t)(110 + ts_prng_u32(&p) % 30);
                    tok[576 + j] = e;
                    sc = ts_ue8m0_to_f32(e);
                }
                for (int64_t i = 0; i < tile; i++) {
                    uint8_t code;
                    do code = (uint8_t)ts_prng_u32(&p);
                    while ((code & 0x7F) == 0x7F);
                    tok[j * tile + i] = code;
                    want[t * 512 + j * tile + i] = sp_rule(code, sc);
                    differs += fm_tobf(ts_e4m3_to_f32(code) * sc) != fm_tobf(want[t * 512 + j * tile + i]);
                }
            }
            for (int64_t r = 0; r < 64; r++) {
                uint16_t h = fm_tobf(ts_prng_uniform(&p));
                memcpy(tok + (L ? 448 : 528) + 2 * r, &h, 2);
                if (L) want[t * 512 + 448 + r] = fm_bf(h);
            }
        }
        /* (MODEL1 scales are powers of two: only the product rounding applies there) */
        TS_CHECK_MSG(L || differs > 0, "the rule cannot be told from the unrounded one");
        uint16_t *q = (uint16_t *)malloc((size_t)(b * sq * hq * d) * 2);
        fm_fill_bf16(&p, q, b * sq * hq * d, 1.0f);
        int32_t ind[3 * 2 * 8];
        for (int64_t r = 0; r < b * sq; r++) {
            for (int64_t k = 0; k < topk; k++) ind[r * topk + k] = -1;
            ind[r * topk + ts_prng_u32(&p) % topk] = (int32_t)(r * 3 % nb + (ts_prng_u32(&p) % 3));
        }
        ts_tensor tq = ts_tensor_make(q, TS_BF16, 4, (int64_t[]){b, sq, hq, d});
        ts_tensor tk = ts_tensor_make(kc, TS_U8, 4, (int64_t[]){nb, 1, 1, tb});
        ts_tensor ti = ts_tensor_3d(ind, TS_I32, b, sq, topk);
        uint16_t *out = (uint16_t *)malloc((size_t)(b * sq * hq * 512) * 2);
        float lse[3 * 16 * 2];
        ts_tensor to = ts_tensor_make(out, TS_BF16, 4, (int64_t[]){b, sq, hq, 512});
        ts_tensor tl = ts_tensor_3d(lse, TS_F32, b, hq, sq);
        ts_isa saved = ts_get_isa();
        int isas[TS_ISA_COUNT_];
        const int nisa = ts_test_isas(isas);
        for (int ii = 0; ii < nisa; ii++) {
            const int isa = isas[ii];
            if (ts_set_isa((ts_isa)isa) != TS_OK) continue;
            ts_mla_metadata *meta;
            ts_get_mla_metadata(&meta);
            ts_flash_mla_kvcache_args a;
            memset(&a, 0, sizeof a);
            a.q = &tq;
            a.k_cache = &tk;
            a.indices = &ti;
            a.head_dim_v = 512;
            a.tile_scheduler_metadata = meta;
            a.is_fp8_kvcache = true;
            TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &to, &tl), TS_OK);
            ts_mla_metadata_free(meta);
            int64_t bad = 0;
            for (int64_t r = 0; r < b * sq; r++) {
                int32_t tkn = -1;
                for (int64_t k = 0; k < topk; k++)
                    if (ind[r * topk + k] >= 0) tkn = ind[r * topk + k];
                for (int64_t h = 0; h < hq; h++)
                    for (int64_t c = 0; c < 512; c++)
                        /* == on floats: o starts at +0, so a -0 value comes out +0 */
                        bad += fm_bf(out[(r * hq + h) * 512 + c]) != want[tkn * 512 + c];
            }
            TS_CHECK_MSG(bad == 0, "layout %d isa %s: %lld decoded values differ from the rule", L,
                         ts_isa_name((ts_isa)isa), (long long)bad);
        }
        ts_set_isa(saved);
        free(out);
        free(q);
        free(kc);
        free(want);
    }
}

/* ---- the per-ISA token decoders, bit for bit ---- */

/* Every path's decoders against the generic ones on tokens the model-level tests never make:
 * scales that are not powers of two, powers of two outside the fast path's range, subnormal,
 * zero, negative, inf and NaN scales, NaN and subnormal e4m3 codes, every UE8M0 exponent, and
 * bf16 rows whose length is no multiple of the vector width. (With one valid slot per row the
 * engine's output is the decoded V rounded to bf16 once more, which hides a missing rounding of
 * the product: this compares the f32 rows themselves.) */
#include "attention/flash_mla_internal.h"

TS_TEST(flash_mla_decoders_every_path) {
    const ts__mla_kernels *tabs[TS_ISA_COUNT_] = {&ts__mla_kernels_generic};
#if defined(TS_HAVE_AVX2_KERNELS)
    tabs[TS_ISA_AVX2] = &ts__mla_kernels_avx2;
#endif
#if defined(TS_HAVE_AVX512_KERNELS)
    tabs[TS_ISA_AVX512] = &ts__mla_kernels_avx512;
#endif
    int isas[TS_ISA_COUNT_];
    const int nisa = ts_test_isas(isas);
    ts_prng p = ts_prng_seed(177);
    const float special[] = {0x1p-3f, 0x1p-118f, 0x1p-117f, 0x1p119f, 0x1p120f, 0x1p-130f, 0.0f,
                             -0x1p-2f, INFINITY, NAN, 1.0f / 448.0f, 0.00123f, -3.5f};
    const int nspec = (int)(sizeof special / sizeof special[0]);
    enum { NTOK = 64 };
    uint8_t tok[656], scales[8];
    uint16_t row[576];
    float ref[576], got[576];
    for (int k = 0; k < NTOK; k++) {
        /* V32: four scales, codes with some NaN (every 4th token) and subnormal ones */
        for (int i = 0; i < 512; i++) {
            uint8_t c = (uint8_t)ts_prng_u32(&p);
            if (k % 4 != 1 && (c & 0x7F) == 0x7F) c ^= 1;
            if (i % 16 == 3) c = (uint8_t)((c & 0x80) | (c & 0x07)); /* subnormal / zero */
            tok[i] = c;
        }
        for (int j = 0; j < 4; j++) {
            float sc = (k + j) % 3 == 0 ? special[(k * 4 + j) % nspec]
                                         : ldexpf(1.0f + 0.5f * ts_prng_uniform(&p),
                                                  (int)(ts_prng_u32(&p) % 17) - 12);
            if ((k + j) % 5 == 0) sc = ldexpf(1.0f, (int)(ts_prng_u32(&p) % 40) - 20);
            memcpy(tok + 512 + 4 * j, &sc, 4);
        }
        for (int i = 0; i < 64; i++) {
            uint16_t h = fm_tobf(ts_prng_uniform(&p) * 4.0f);
            memcpy(tok + 528 + 2 * i, &h, 2);
        }
        /* MODEL1 reuses the bytes: 448 codes, 64 bf16 at 448; scale exponents sweep 0..255 */
        for (int j = 0; j < 7; j++) scales[j] = (uint8_t)((k * 7 + j) * 37 % 256);
        scales[7] = 0;
        for (int i = 0; i < 576; i++) row[i] = (uint16_t)ts_prng_u32(&p); /* NaNs included */
        const int64_t nbf = k % 3 == 0 ? 576 : k % 3 == 1 ? 512 : 37 + k;
        for (int ii = 1; ii < nisa; ii++) {
            const ts__mla_kernels *K = tabs[isas[ii]], *G = tabs[0];
            if (!K) continue;
            const char *name = ts_isa_name((ts_isa)isas[ii]);
            G->dec_v32(tok, ref);
            K->dec_v32(tok, got);
            TS_CHECK_MSG(memcmp(ref, got, 576 * 4) == 0, "dec_v32 %s token %d", name, k);
            G->dec_model1(tok, scales, ref);
            K->dec_model1(tok, scales, got);
            TS_CHECK_MSG(memcmp(ref, got, 512 * 4) == 0, "dec_model1 %s token %d", name, k);
            G->dec_bf16(row, ref, nbf);
            K->dec_bf16(row, got, nbf);
            TS_CHECK_MSG(memcmp(ref, got, (size_t)nbf * 4) == 0, "dec_bf16 %s n %lld", name,
                         (long long)nbf);
        }
    }
}
