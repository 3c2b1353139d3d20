/* FlashMLA sparse prefill: float64 oracle with upstream's tolerances (out, max_logits, lse),
 * upstream's invalid-index values (INT32_MIN ... INT32_MAX, s_kv, negatives), topk_length,
 * sinks of +-inf, s_kv < topk, non-contiguous q / kv / indices / out strides; ISA and thread
 * invariance; bad input. */
#include "test_flash_mla_common.h"
#include "ts_guard_pages.h"

static const int32_t k_invalid[] = {INT32_MIN, -123456, -1, 0 /* = s_kv, set below */, 114514,
                                    1919810, 2147480000, INT32_MAX};

typedef struct pf_data {
    int64_t sq, hq, skv, topk, d;
    int64_t qs0, qs1, ks0, is0, os0, os1, ls0; /* strides */
    uint16_t *q, *kv, *out;
    int32_t *ind, *len;
    float *sink, *maxl, *lse;
    ts_tensor tq, tkv, tind, tsink, tlen, tout, tmax, tlse;
} pf_data;

/* by_len: the run uses topk_length, so tokens read only past it are poisoned too */
static void pf_build(pf_data *s, int64_t sq, int64_t hq, int64_t skv, int64_t topk, int64_t d,
                     uint64_t seed, int by_len) {
    memset(s, 0, sizeof *s);
    s->sq = sq, s->hq = hq, s->skv = skv, s->topk = topk, s->d = d;
    s->qs1 = d + 16, s->qs0 = hq * s->qs1 + 8, s->ks0 = d + 32, s->is0 = topk + 3;
    s->os1 = 512 + 8, s->os0 = hq * s->os1, s->ls0 = hq + 5;
    ts_prng p = ts_prng_seed(seed);
    s->q = (uint16_t *)malloc((size_t)(sq * s->qs0) * 2);
    fm_fill_bf16(&p, s->q, sq * s->qs0, 1.0f);
    s->kv = (uint16_t *)malloc((size_t)(skv * s->ks0) * 2);
    fm_fill_bf16(&p, s->kv, skv * s->ks0, 0.5f);
    s->ind = (int32_t *)malloc((size_t)(sq * s->is0) * 4);
    s->len = (int32_t *)malloc((size_t)sq * 4);
    char *used = (char *)calloc((size_t)skv, 1);
    for (int64_t i = 0; i < sq; i++) {
        s->len[i] = (int32_t)(ts_prng_u32(&p) % (topk + 1));
        for (int64_t k = 0; k < topk; k++) {
            int32_t v = (int32_t)(ts_prng_u32(&p) % skv);
            if (ts_prng_u32(&p) % 4 == 0) {
                v = k_invalid[ts_prng_u32(&p) % 8];
                if (v == 0) v = (int32_t)skv;
            }
            if (i == 0) v = k_invalid[k % 8] ? k_invalid[k % 8] : (int32_t)skv; /* all invalid */
            s->ind[i * s->is0 + k] = v;
            if (v >= 0 && v < skv && (!by_len || k < s->len[i])) used[v] = 1;
        }
    }
    if (sq > 1) s->len[1] = 0;
    if (sq > 2) s->len[2] = (int32_t)topk;
    for (int64_t i = 0; i < sq; i++)
        for (int64_t k = 0; k < (by_len ? s->len[i] : topk); k++) {
            int32_t v = s->ind[i * s->is0 + k];
            if (v >= 0 && v < skv) used[v] = 1;
        }
    for (int64_t t = 0; t < skv; t++)
        if (!used[t])
            for (int64_t j = 0; j < d; j++) s->kv[t * s->ks0 + j] = fm_bf16_nan();
    free(used);
    s->sink = (float *)malloc((size_t)hq * 4);
    for (int64_t h = 0; h < hq; h++) s->sink[h] = ts_prng_uniform(&p);
    if (hq > 1) s->sink[1] = INFINITY;
    if (hq > 2) s->sink[2] = -INFINITY;
    s->out = (uint16_t *)malloc((size_t)(sq * s->os0) * 2);
    s->maxl = (float *)malloc((size_t)(sq * s->ls0) * 4);
    s->lse = (float *)malloc((size_t)(sq * s->ls0) * 4);
    s->tq = (ts_tensor){s->q, TS_BF16, 3, {sq, hq, d}, {s->qs0, s->qs1, 1}};
    s->tkv = (ts_tensor){s->kv, TS_BF16, 3, {skv, 1, d}, {s->ks0, d, 1}};
    s->tind = (ts_tensor){s->ind, TS_I32, 3, {sq, 1, topk}, {s->is0, topk, 1}};
    s->tsink = ts_tensor_1d(s->sink, TS_F32, hq);
    s->tlen = ts_tensor_1d(s->len, TS_I32, sq);
    s->tout = (ts_tensor){s->out, TS_BF16, 3, {sq, hq, 512}, {s->os0, s->os1, 1}};
    s->tmax = (ts_tensor){s->maxl, TS_F32, 2, {sq, hq}, {s->ls0, 1}};
    s->tlse = (ts_tensor){s->lse, TS_F32, 2, {sq, hq}, {s->ls0, 1}};
}

static void pf_free(pf_data *s) {
    free(s->q);
    free(s->kv);
    free(s->out);
    free(s->ind);
    free(s->len);
    free(s->sink);
    free(s->maxl);
    free(s->lse);
}

static ts_status pf_run(pf_data *s, int sink, int len) {
    return ts_flash_mla_sparse_fwd(&s->tq, &s->tkv, &s->tind, 0.5f, 512, sink ? &s->tsink : NULL,
                                   len ? &s->tlen : NULL, &s->tout, &s->tmax, &s->tlse);
}

static ts_status pf_run_sink_len(void *s) { return pf_run((pf_data *)s, 1, 1); }

static void pf_check(ts_test_ctx *ts_t_, pf_data *s, int sink, int len, const char *what) {
    TS_CHECK_STATUS(pf_run(s, sink, len), TS_OK);
    float *kf = (float *)malloc((size_t)(s->topk * s->d) * 4), *qf = (float *)malloc((size_t)s->d * 4);
    const float **rows = (const float **)malloc((size_t)s->topk * sizeof(float *));
    fm_cmp co = {0}, cm = {0}, cl = {0};
    double ref[512], rl;
    for (int64_t i = 0; i < s->sq; i++) {
        int64_t n = 0, cnt = len ? s->len[i] : s->topk;
        for (int64_t k = 0; k < cnt; k++) {
            int32_t v = s->ind[i * s->is0 + k];
            if (v < 0 || v >= s->skv) continue;
            for (int64_t j = 0; j < s->d; j++) kf[n * s->d + j] = fm_bf(s->kv[v * s->ks0 + j]);
            rows[n] = kf + n * s->d;
            n++;
        }
        for (int64_t h = 0; h < s->hq; h++) {
            for (int64_t j = 0; j < s->d; j++) qf[j] = fm_bf(s->q[i * s->qs0 + h * s->qs1 + j]);
            double mx = fm_ref_row(qf, rows, n, s->d, 0.5, sink, s->sink[h], ref, &rl);
            for (int j = 0; j < 512; j++)
                fm_cmp_add(&co, fm_bf(s->out[i * s->os0 + h * s->os1 + j]), ref[j], 8e-4, 3.01 / 128);
            fm_cmp_add(&cm, s->maxl[i * s->ls0 + h], mx, 1e-6, 2.01 / 65536);
            fm_cmp_add(&cl, s->lse[i * s->ls0 + h], rl, 1e-6, 2.01 / 65536);
        }
    }
    TS_CHECK(co.n > 0);
    FM_CHECK_CMP(co, 7e-6, what);
    FM_CHECK_CMP(cm, 1.0, what);
    FM_CHECK_CMP(cl, 1.0, what);
    free(kf);
    free(qf);
    free(rows);
}

TS_TEST(flash_mla_prefill_reference) {
    pf_data s;
    pf_build(&s, 9, 19, 60, 77, 576, 300, 1); /* s_kv < topk: some slots must be out of range */
    pf_check(ts_t_, &s, 1, 1, "sink + topk_length");
    pf_free(&s);
    pf_build(&s, 9, 19, 60, 77, 576, 300, 0);
    pf_check(ts_t_, &s, 0, 0, "plain");
    pf_free(&s);
    pf_build(&s, 4, 64, 300, 128, 512, 301, 0);
    pf_check(ts_t_, &s, 1, 0, "d512 h64");
    pf_free(&s);
}

TS_TEST(flash_mla_prefill_deterministic) {
    pf_data s;
    pf_build(&s, 5, 33, 90, 50, 576, 310, 1);
    const size_t no = (size_t)(s.sq * s.os0) * 2, nl = (size_t)(s.sq * s.ls0) * 4;
    uint16_t *out0 = (uint16_t *)malloc(no);
    float *lse0 = (float *)malloc(nl), *max0 = (float *)malloc(nl);
    const fm_buf bufs[] = {{s.out, out0, no, "out"}, {s.lse, lse0, nl, "lse"}, {s.maxl, max0, nl, "max_logits"}};
    fm_check_isa_threads(ts_t_, pf_run_sink_len, &s, bufs, 3);
    /* query token 3 alone: the same bits */
    ts_tensor q1 = s.tq, i1 = s.tind, l1 = s.tlen;
    q1.data = s.q + 3 * s.qs0;
    q1.shape[0] = 1;
    i1.data = s.ind + 3 * s.is0;
    i1.shape[0] = 1;
    l1.data = s.len + 3;
    l1.shape[0] = 1;
    ts_tensor o1 = s.tout, m1 = s.tmax, e1 = s.tlse;
    o1.shape[0] = m1.shape[0] = e1.shape[0] = 1;
    TS_CHECK_STATUS(ts_flash_mla_sparse_fwd(&q1, &s.tkv, &i1, 0.5f, 512, &s.tsink, &l1, &o1, &m1, &e1), TS_OK);
    TS_CHECK(memcmp(s.out, out0 + 3 * s.os0, (size_t)s.os0 * 2) == 0);
    TS_CHECK(memcmp(s.lse, lse0 + 3 * s.ls0, (size_t)s.hq * 4) == 0);
    free(out0);
    free(lse0);
    free(max0);
    pf_free(&s);
}

TS_TEST(flash_mla_prefill_bad_input) {
    pf_data s;
    pf_build(&s, 3, 4, 20, 8, 576, 320, 0);
    memset(s.out, 0x33, (size_t)(s.sq * s.os0) * 2);
    TS_CHECK_STATUS(ts_flash_mla_sparse_fwd(&s.tq, &s.tkv, &s.tind, 0.5f, 576, NULL, NULL, &s.tout, &s.tmax, &s.tlse), TS_ERR_UNSUPPORTED);
    TS_CHECK_STATUS(ts_flash_mla_sparse_fwd(&s.tq, &s.tkv, &s.tind, NAN, 512, NULL, NULL, &s.tout, &s.tmax, &s.tlse), TS_ERR_INVALID_ARGUMENT);
    ts_tensor b = s.tkv;
    b.shape[2] = 512;
    TS_CHECK_STATUS(ts_flash_mla_sparse_fwd(&s.tq, &b, &s.tind, 0.5f, 512, NULL, NULL, &s.tout, &s.tmax, &s.tlse), TS_ERR_SHAPE);
    b = s.tkv;
    b.shape[1] = 2;
    TS_CHECK_STATUS(ts_flash_mla_sparse_fwd(&s.tq, &b, &s.tind, 0.5f, 512, NULL, NULL, &s.tout, &s.tmax, &s.tlse), TS_ERR_SHAPE);
    b = s.tind;
    b.strides[2] = 2;
    TS_CHECK_STATUS(ts_flash_mla_sparse_fwd(&s.tq, &s.tkv, &b, 0.5f, 512, NULL, NULL, &s.tout, &s.tmax, &s.tlse), TS_ERR_STRIDE);
    b = s.tlse;
    b.dtype = TS_BF16;
    TS_CHECK_STATUS(ts_flash_mla_sparse_fwd(&s.tq, &s.tkv, &s.tind, 0.5f, 512, NULL, NULL, &s.tout, &s.tmax, &b), TS_ERR_DTYPE);
    b = s.tlen;
    b.shape[0] = 2;
    TS_CHECK_STATUS(ts_flash_mla_sparse_fwd(&s.tq, &s.tkv, &s.tind, 0.5f, 512, NULL, &b, &s.tout, &s.tmax, &s.tlse), TS_ERR_SHAPE);
    TS_CHECK_STATUS(ts_flash_mla_sparse_fwd(&s.tq, &s.tkv, &s.tind, 0.5f, 512, NULL, NULL, NULL, &s.tmax, &s.tlse), TS_ERR_NULL_POINTER);
    int32_t keep = s.len[1];
    s.len[1] = (int32_t)s.topk + 1;
    TS_CHECK_STATUS(pf_run(&s, 0, 1), TS_ERR_INVALID_ARGUMENT);
    s.len[1] = -1;
    TS_CHECK_STATUS(pf_run(&s, 0, 1), TS_ERR_INVALID_ARGUMENT);
    s.len[1] = keep;
    int untouched = 1;
    for (int64_t i = 0; i < s.sq * s.os0; i++) untouched &= s.out[i] == 0x3333;
    TS_CHECK(untouched);
    pf_free(&s);
}

/* Never read: the guarded copy puts each kv row alone at the end of its own page and opens only
 * rows that a slot below topk_length names; index rows end on a page boundary after their
 * topk_length entries (0, 13, 26, 39), so slots past it fault. Same bits as the plain run. */
TS_TEST(flash_mla_prefill_never_reads_unused) {
    pf_data s;
    pf_build(&s, 4, 16, 300, 40, 576, 241, 0);
    static const int32_t len[4] = {0, 13, 26, 39};
    memcpy(s.len, len, sizeof len);
    const int64_t no = s.sq * s.os0, nl = s.sq * s.ls0;
    memset(s.out, 0, (size_t)no * 2); /* padding columns compare equal */
    TS_CHECK_STATUS(pf_run(&s, 1, 1), TS_OK);
    uint16_t *out0 = (uint16_t *)malloc((size_t)no * 2);
    float *m0 = (float *)malloc((size_t)nl * 4), *l0 = (float *)malloc((size_t)nl * 4);
    memcpy(out0, s.out, (size_t)no * 2);
    memcpy(m0, s.maxl, (size_t)nl * 4);
    memcpy(l0, s.lse, (size_t)nl * 4);

    const int64_t pg = (int64_t)ts_guard_page();
    int32_t *ind = (int32_t *)malloc((size_t)(s.sq * s.topk) * 4);
    char *used = (char *)calloc((size_t)s.skv, 1);
    for (int64_t i = 0; i < s.sq; i++)
        for (int64_t k = 0; k < s.topk; k++) {
            int32_t v = s.ind[i * s.is0 + k];
            ind[i * s.topk + k] = v;
            if (k < len[i] && v >= 0 && v < s.skv) used[v] = 1;
        }
    ts_guard gk = ts_guard_make((size_t)(s.skv * pg)), gi;
    TS_CHECK(gk.base != NULL);
    const size_t off = ts_guard_end_aligned(0, (size_t)s.d * 2);
    uint16_t *kv = (uint16_t *)(gk.base + off);
    for (int64_t t = 0; t < s.skv; t++)
        if (used[t]) {
            ts_guard_open(&gk, off + (size_t)(t * pg), (size_t)s.d * 2);
            memcpy(kv + t * (pg / 2), s.kv + t * s.ks0, (size_t)s.d * 2);
        }
    int64_t st0, st1;
    int32_t *gind = ts_guard_i32_rows(&gi, ind, s.sq, 1, s.topk, len, &st0, &st1);
    TS_CHECK(gind != NULL);
    s.tkv = (ts_tensor){kv, TS_BF16, 3, {s.skv, 1, s.d}, {pg / 2, s.d, 1}};
    s.tind = (ts_tensor){gind, TS_I32, 3, {s.sq, 1, s.topk}, {st0, st1, 1}};
    int saved_t = ts_get_num_threads();
    for (int th = 1; th <= 2; th++) {
        ts_set_num_threads(th);
        memset(s.out, 0, (size_t)no * 2);
        TS_CHECK_STATUS(pf_run(&s, 1, 1), TS_OK);
        TS_CHECK_MSG(memcmp(s.out, out0, (size_t)no * 2) == 0, "out differs (%d threads)", th);
        TS_CHECK_MSG(memcmp(s.maxl, m0, (size_t)nl * 4) == 0, "max_logits differs (%d threads)", th);
        TS_CHECK_MSG(memcmp(s.lse, l0, (size_t)nl * 4) == 0, "lse differs (%d threads)", th);
    }
    ts_set_num_threads(saved_t);
    ts_guard_free(&gk);
    ts_guard_free(&gi);
    free(ind);
    free(used);
    free(out0);
    free(m0);
    free(l0);
    pf_free(&s);
}
