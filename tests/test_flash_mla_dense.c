/* FlashMLA dense decode (paged bf16 KV): float64 oracle with upstream's tolerances over page
 * sizes 1, 53, 64, 69, GQA, s_q > 1 with bottom-right causal masking, zero-length and shorter-
 * than-s_q requests, NaN in every unused cache row and garbage block-table tails; the split plan
 * of long memory-bound requests; ISA / thread / batch invariance; bad input. */
#include "test_flash_mla_common.h"
#include "ts_guard_pages.h"

typedef struct dn_case {
    int64_t b, sq, hq, hkv, d, P, mb;
    int causal;
    const int32_t *seqlens;
} dn_case;

typedef struct dn_data {
    dn_case c;
    int64_t nb, bstride;
    uint16_t *q, *kc;
    int32_t *bt, *sl;
    ts_tensor tq, tk, tbt, tsl;
} dn_data;

static void dn_build(dn_data *s, const dn_case *c, uint64_t seed) {
    memset(s, 0, sizeof *s);
    s->c = *c;
    ts_prng p = ts_prng_seed(seed);
    s->nb = c->b * c->mb + 1;
    const int64_t row = c->hkv * c->d;
    s->bstride = c->P * row + 24; /* padded blocks */
    s->kc = (uint16_t *)malloc((size_t)(s->nb * s->bstride) * 2);
    for (int64_t i = 0; i < s->nb * s->bstride; i++) s->kc[i] = fm_bf16_nan();
    s->bt = (int32_t *)malloc((size_t)(c->b * c->mb) * 4);
    s->sl = (int32_t *)malloc((size_t)c->b * 4);
    /* blocks handed out in a shuffled order */
    int32_t *perm = (int32_t *)malloc((size_t)s->nb * 4);
    for (int64_t i = 0; i < s->nb; i++) perm[i] = (int32_t)i;
    for (int64_t i = s->nb - 1; i > 0; i--) {
        int64_t j = ts_prng_u32(&p) % (i + 1);
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int64_t next = 0;
    for (int64_t i = 0; i < c->b; i++) {
        s->sl[i] = c->seqlens[i];
        int64_t nbl = fm_ceil_div(c->seqlens[i], c->P);
        for (int64_t j = 0; j < c->mb; j++) s->bt[i * c->mb + j] = j < nbl ? perm[next++] : 2147480000;
        for (int64_t t = 0; t < c->seqlens[i]; t++) {
            uint16_t *r = s->kc + s->bt[i * c->mb + t / c->P] * s->bstride + (t % c->P) * row;
            fm_fill_bf16(&p, r, row, 0.5f);
        }
    }
    free(perm);
    int64_t nq = c->b * c->sq * c->hq * c->d;
    s->q = (uint16_t *)malloc((size_t)nq * 2);
    fm_fill_bf16(&p, s->q, nq, 1.0f);
    s->tq = ts_tensor_make(s->q, TS_BF16, 4, (int64_t[]){c->b, c->sq, c->hq, c->d});
    s->tk = (ts_tensor){s->kc, TS_BF16, 4, {s->nb, c->P, c->hkv, c->d}, {s->bstride, row, c->d, 1}};
    s->tbt = ts_tensor_2d(s->bt, TS_I32, c->b, c->mb);
    s->tsl = ts_tensor_1d(s->sl, TS_I32, c->b);
}

static void dn_free(dn_data *s) {
    free(s->q);
    free(s->kc);
    free(s->bt);
    free(s->sl);
}

static ts_flash_mla_kvcache_args dn_args(dn_data *s, ts_mla_metadata *meta) {
    ts_flash_mla_kvcache_args a;
    memset(&a, 0, sizeof a);
    a.q = &s->tq;
    a.k_cache = &s->tk;
    a.block_table = &s->tbt;
    a.cache_seqlens = &s->tsl;
    a.head_dim_v = 512;
    a.tile_scheduler_metadata = meta;
    a.causal = s->c.causal;
    return a; /* softmax_scale 0: the default d^-0.5 */
}

static void dn_check_ref(ts_test_ctx *ts_t_, dn_data *s, const char *what) {
    const dn_case *c = &s->c;
    int64_t no = c->b * c->sq * c->hq * 512, nl = c->b * c->hq * c->sq;
    uint16_t *out = (uint16_t *)malloc((size_t)no * 2);
    float *lse = (float *)malloc((size_t)nl * 4);
    ts_tensor to = ts_tensor_make(out, TS_BF16, 4, (int64_t[]){c->b, c->sq, c->hq, 512});
    ts_tensor tl = ts_tensor_3d(lse, TS_F32, c->b, c->hq, c->sq);
    ts_mla_metadata *meta;
    ts_get_mla_metadata(&meta);
    ts_flash_mla_kvcache_args a = dn_args(s, meta);
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &to, &tl), TS_OK);
    ts_mla_metadata_free(meta);
    int64_t maxl = 1;
    for (int64_t i = 0; i < c->b; i++) maxl = c->seqlens[i] > maxl ? c->seqlens[i] : maxl;
    float *kf = (float *)malloc((size_t)(maxl * c->d) * 4), *qf = (float *)malloc((size_t)c->d * 4);
    const float **rows = (const float **)malloc((size_t)maxl * sizeof(float *));
    fm_cmp co = {0}, cl = {0};
    double ref[512], rl;
    const double scale = 1.0 / sqrt((double)c->d);
    int empty = 0;
    for (int64_t i = 0; i < c->b; i++)
        for (int64_t g = 0; g < c->hkv; g++) {
            int64_t L = c->seqlens[i];
            for (int64_t t = 0; t < L; t++) {
                const uint16_t *r = s->kc + s->bt[i * c->mb + t / c->P] * s->bstride +
                                    (t % c->P) * c->hkv * c->d + g * c->d;
                for (int64_t j = 0; j < c->d; j++) kf[t * c->d + j] = fm_bf(r[j]);
                rows[t] = kf + t * c->d;
            }
            for (int64_t q = 0; q < c->sq; q++) {
                int64_t n = L;
                if (c->causal && c->sq > 1) n = L - c->sq + q + 1;
                if (n < 0) n = 0;
                empty += n == 0;
                for (int64_t hh = 0; hh < c->hq / c->hkv; hh++) {
                    int64_t h = g * (c->hq / c->hkv) + hh;
                    const uint16_t *qr = s->q + ((i * c->sq + q) * c->hq + h) * c->d;
                    for (int64_t j = 0; j < c->d; j++) qf[j] = fm_bf(qr[j]);
                    fm_ref_row(qf, rows, n, c->d, scale, 0, 0.0, ref, &rl);
                    const uint16_t *orow = out + ((i * c->sq + q) * c->hq + h) * 512;
                    for (int j = 0; j < 512; j++) fm_cmp_add(&co, fm_bf(orow[j]), ref[j], 8e-4, 2.01 / 128);
                    fm_cmp_add(&cl, lse[(i * c->hq + h) * c->sq + q], rl, 1e-6, 8.01 / 65536);
                }
            }
        }
    TS_CHECK_MSG(co.n > 0 && empty > 0, "%s: no empty row", what);
    FM_CHECK_CMP(co, 5e-6, what);
    FM_CHECK_CMP(cl, 1.0, what);
    free(kf);
    free(qf);
    free(rows);
    free(out);
    free(lse);
}

TS_TEST(flash_mla_dense_reference) {
    static const int32_t sl1[] = {0, 140, 20, 2};
    static const int32_t sl2[] = {77, 0, 150};
    const dn_case cases[] = {
        {4, 3, 6, 2, 576, 53, 4, 1, sl1},  /* GQA, causal s_q 3, request shorter than s_q */
        {4, 1, 9, 3, 576, 1, 160, 0, sl1}, /* page 1 */
        {3, 2, 4, 1, 512, 64, 3, 1, sl2},  /* d_qk 512 */
        {3, 4, 2, 1, 576, 69, 3, 0, sl2},  /* non-causal s_q 4 */
        {3, 2, 40, 1, 576, 64, 3, 1, sl2}, /* 80 rows per group: the no-split plan */
    };
    const char *names[] = {"P53 gqa causal", "P1", "P64 d512 causal", "P69 s_q4", "h40 s_q2"};
    for (int k = 0; k < 5; k++) {
        dn_data s;
        dn_build(&s, &cases[k], 200 + (uint64_t)k);
        dn_check_ref(ts_t_, &s, names[k]);
        dn_free(&s);
    }
}

/* long memory-bound requests split into chunks merged in order: checked against the oracle and
 * for the same bits at 1, 2, 3 threads and inside / outside a batch */
TS_TEST(flash_mla_dense_split) {
    static const int32_t sl[] = {9000, 4097, 0};
    dn_case c = {3, 1, 2, 1, 576, 64, 141, 0, sl};
    dn_data s;
    dn_build(&s, &c, 210);
    dn_check_ref(ts_t_, &s, "split");
    fm_outs o;
    fm_outs_make(&o, c.b, c.sq, c.hq);
    int saved = ts_get_num_threads();
    for (int t = 1; t <= 3; t++) {
        ts_set_num_threads(t);
        ts_mla_metadata *meta;
        ts_get_mla_metadata(&meta);
        ts_flash_mla_kvcache_args a = dn_args(&s, meta);
        TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &o.to, &o.tl), TS_OK);
        if (t == 1) {
            memcpy(o.out0, o.out, (size_t)o.no * 2);
            memcpy(o.lse0, o.lse, (size_t)o.nl * 4);
        } else {
            TS_CHECK_MSG(memcmp(o.out0, o.out, (size_t)o.no * 2) == 0, "out differs at %d threads", t);
            TS_CHECK_MSG(memcmp(o.lse0, o.lse, (size_t)o.nl * 4) == 0, "lse differs at %d threads", t);
        }
        ts_mla_metadata_free(meta);
    }
    ts_set_num_threads(saved);
    /* request 1 alone */
    ts_tensor q1 = s.tq, b1 = s.tbt, l1 = s.tsl;
    q1.data = s.q + c.sq * c.hq * c.d;
    q1.shape[0] = 1;
    b1.data = s.bt + c.mb;
    b1.shape[0] = 1;
    l1.data = s.sl + 1;
    l1.shape[0] = 1;
    ts_mla_metadata *meta;
    ts_get_mla_metadata(&meta);
    ts_flash_mla_kvcache_args a = dn_args(&s, meta);
    a.q = &q1;
    a.block_table = &b1;
    a.cache_seqlens = &l1;
    ts_tensor to1 = ts_tensor_make(o.out, TS_BF16, 4, (int64_t[]){1, c.sq, c.hq, 512});
    ts_tensor tl1 = ts_tensor_3d(o.lse, TS_F32, 1, c.hq, c.sq);
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &to1, &tl1), TS_OK);
    TS_CHECK(memcmp(o.out, o.out0 + c.sq * c.hq * 512, (size_t)(c.sq * c.hq * 512) * 2) == 0);
    TS_CHECK(memcmp(o.lse, o.lse0 + c.hq * c.sq, (size_t)(c.hq * c.sq) * 4) == 0);
    /* same config, other cache_seqlens values: the handle refuses */
    s.sl[1] = 4000;
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &to1, &tl1), TS_ERR_INVALID_ARGUMENT);
    s.sl[1] = 4097;
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &to1, &tl1), TS_OK);
    ts_mla_metadata_free(meta);
    fm_outs_free(&o);
    dn_free(&s);
}

TS_TEST(flash_mla_dense_generic_avx2) {
    static const int32_t sl[] = {0, 101, 55};
    dn_case c = {3, 2, 20, 2, 576, 53, 3, 1, sl};
    dn_data s;
    dn_build(&s, &c, 220);
    fm_outs o;
    fm_outs_make(&o, c.b, c.sq, c.hq);
    ts_mla_metadata *meta;
    ts_get_mla_metadata(&meta);
    fm_kvcache_run run = {dn_args(&s, meta), &o.to, &o.tl};
    const fm_buf bufs[] = {{o.out, o.out0, (size_t)o.no * 2, "out"},
                           {o.lse, o.lse0, (size_t)o.nl * 4, "lse"}};
    fm_check_isa_threads(ts_t_, fm_kvcache_run_fn, &run, bufs, 2);
    ts_mla_metadata_free(meta);
    fm_outs_free(&o);
    dn_free(&s);
}

TS_TEST(flash_mla_dense_bad_input) {
    static const int32_t sl[] = {10, 5};
    dn_case c = {2, 1, 4, 2, 576, 4, 3, 0, sl};
    dn_data s;
    dn_build(&s, &c, 230);
    fm_outs o;
    fm_outs_make(&o, c.b, c.sq, c.hq);
    memset(o.out, 0x33, (size_t)o.no * 2);
    memset(o.lse, 0x33, (size_t)o.nl * 4);
    ts_mla_metadata *meta;
    ts_get_mla_metadata(&meta);
    ts_flash_mla_kvcache_args a = dn_args(&s, meta);
    int32_t keep = s.bt[1];
    s.bt[1] = (int32_t)s.nb; /* a used block past the cache */
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &o.to, &o.tl), TS_ERR_INVALID_ARGUMENT);
    s.bt[1] = -1;
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &o.to, &o.tl), TS_ERR_INVALID_ARGUMENT);
    s.bt[1] = keep;
    s.sl[0] = 13; /* needs 4 blocks, the table has 3 */
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &o.to, &o.tl), TS_ERR_INVALID_ARGUMENT);
    s.sl[0] = -1;
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &o.to, &o.tl), TS_ERR_INVALID_ARGUMENT);
    s.sl[0] = 10;
    ts_tensor bk = s.tk;
    bk.shape[2] = 3; /* h_q 4 is not a multiple */
    a.k_cache = &bk;
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &o.to, &o.tl), TS_ERR_SHAPE);
    bk = s.tk;
    bk.dtype = TS_F16;
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &o.to, &o.tl), TS_ERR_DTYPE);
    a.k_cache = &s.tk;
    ts_tensor bl = o.tl;
    bl.shape[1] = c.sq;
    bl.shape[2] = c.hq;
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &o.to, &bl), TS_ERR_SHAPE);
    float sink[4] = {0};
    ts_tensor ts_ = ts_tensor_1d(sink, TS_F32, 4);
    a.attn_sink = &ts_;
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &o.to, &o.tl), TS_ERR_UNSUPPORTED);
    a.attn_sink = NULL;
    a.is_fp8_kvcache = true;
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &o.to, &o.tl), TS_ERR_UNSUPPORTED);
    a.is_fp8_kvcache = false;
    int untouched = 1;
    for (int64_t i = 0; i < o.no; i++) untouched &= o.out[i] == 0x3333;
    TS_CHECK(untouched);
    /* a good call fills the handle; the same handle with causal set is another config */
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &o.to, &o.tl), TS_OK);
    ts_tensor q2 = s.tq;
    int64_t sq2 = 2;
    uint16_t *qq = (uint16_t *)calloc((size_t)(c.b * sq2 * c.hq * c.d), 2);
    q2 = ts_tensor_make(qq, TS_BF16, 4, (int64_t[]){c.b, sq2, c.hq, c.d});
    uint16_t *o2 = (uint16_t *)malloc((size_t)(c.b * sq2 * c.hq * 512) * 2);
    float *l2 = (float *)malloc((size_t)(c.b * sq2 * c.hq) * 4);
    ts_tensor to2 = ts_tensor_make(o2, TS_BF16, 4, (int64_t[]){c.b, sq2, c.hq, 512});
    ts_tensor tl2 = ts_tensor_3d(l2, TS_F32, c.b, c.hq, sq2);
    a.q = &q2;
    a.causal = true;
    TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &to2, &tl2), TS_ERR_INVALID_ARGUMENT);
    free(qq);
    free(o2);
    free(l2);
    ts_mla_metadata_free(meta);
    fm_outs_free(&o);
    dn_free(&s);
}

/* Never read: every cache row of the guarded copy sits alone at the end of its own page (row
 * stride one page), and only the rows below each request's seqlen are opened, so unused rows,
 * unused blocks and the bytes past a row fault; block-table rows end on a page boundary after
 * their used entries (counts 0, 2, 4, 6), so the tails fault too. Same bits as the plain run. */
TS_TEST(flash_mla_dense_never_reads_unused) {
    static const int32_t sl[4] = {0, 5, 12, 17}; /* P = 3: 0, 2, 4, 6 blocks */
    static const int32_t nbl[4] = {0, 2, 4, 6};
    const dn_case cases[2] = {{4, 2, 16, 1, 576, 3, 8, 1, sl}, {4, 1, 6, 3, 512, 3, 8, 0, sl}};
    for (int ci = 0; ci < 2; ci++) {
        const dn_case *c = &cases[ci];
        dn_data s;
        dn_build(&s, c, 230 + ci);
        fm_outs o;
        fm_outs_make(&o, c->b, c->sq, c->hq);
        ts_mla_metadata *meta;
        ts_get_mla_metadata(&meta);
        ts_flash_mla_kvcache_args a = dn_args(&s, meta);
        TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &o.to0, &o.tl0), TS_OK);
        ts_mla_metadata_free(meta);

        const int64_t pg = (int64_t)ts_guard_page(), row = c->hkv * c->d;
        ts_guard gk = ts_guard_make((size_t)(s.nb * c->P * pg)), gb;
        TS_CHECK(gk.base != NULL);
        const size_t off = ts_guard_end_aligned(0, (size_t)row * 2);
        uint16_t *kbase = (uint16_t *)(gk.base + off);
        for (int64_t i = 0; i < c->b; i++)
            for (int64_t t = 0; t < sl[i]; t++) {
                int64_t blk = s.bt[i * c->mb + t / c->P], r = t % c->P;
                uint16_t *dst = kbase + (blk * c->P + r) * (pg / 2);
                ts_guard_open(&gk, (size_t)((uint8_t *)dst - gk.base), (size_t)row * 2);
                memcpy(dst, s.kc + blk * s.bstride + r * row, (size_t)row * 2);
            }
        int64_t bst0, bst1;
        int32_t *bt = ts_guard_i32_rows(&gb, s.bt, c->b, 1, c->mb, nbl, &bst0, &bst1);
        TS_CHECK(bt != NULL);
        ts_tensor tk = {kbase, TS_BF16, 4, {s.nb, c->P, c->hkv, c->d}, {c->P * pg / 2, pg / 2, c->d, 1}};
        ts_tensor tbt = {bt, TS_I32, 2, {c->b, c->mb}, {bst0, 1}};
        a.k_cache = &tk;
        a.block_table = &tbt;
        int saved_t = ts_get_num_threads();
        for (int th = 1; th <= 2; th++) {
            ts_set_num_threads(th);
            ts_get_mla_metadata(&meta);
            a.tile_scheduler_metadata = meta;
            TS_CHECK_STATUS(ts_flash_mla_with_kvcache(&a, &o.to, &o.tl), TS_OK);
            ts_mla_metadata_free(meta);
            TS_CHECK_MSG(memcmp(o.out, o.out0, (size_t)o.no * 2) == 0, "case %d: out differs (%d threads)", ci, th);
            TS_CHECK_MSG(memcmp(o.lse, o.lse0, (size_t)o.nl * 4) == 0, "case %d: lse differs (%d threads)", ci, th);
        }
        ts_set_num_threads(saved_t);
        ts_guard_free(&gk);
        ts_guard_free(&gb);
        fm_outs_free(&o);
        dn_free(&s);
    }
}
