/* MoE routing kernels (src/kernels/moe.tile) byte-exact against tests/golden/tk_moe.bin (numpy
 * re-implementation of TileKernels' semantics): topk_gate (stable order, many ties; experts 72
 * and 256, top-k 2, 6, 8, 9), top2_sum_gate (sigmoid / sqrtsoftplus / softmax / identity,
 * bias for selection only, group-limited routing, shared-expert slots, mask, EP/TP masking,
 * unmapped_topk_idx, fixed routing, logical-to-physical map),
 * normalize_weight, group_count, expand_to_fused, reduce_fused (-1 routed entries, padded
 * segments), topk_sum_and_topk_group_idx, mask_indices_by_tp, inplace_unique_group_indices,
 * aux_fi, get_fused_mapping (T = 4001, alignment 1 / 16 / 64, tail slots); expand_to_fused_with_sf
 * against plain C. Both ISA variants, 1 and 2 threads. */
#include "test_tk_common.h"

#include "ts_prng.h"
#include "tilestack/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct moe_ctx {
    ts_test_ctx *t;
    const tk_record *rec;
    int kind;
    int64_t T, E, K, KP, H, P;
    float *f1, *f2, *f3, *f4;
    int64_t *idx, *un;
    int32_t *cnt;
    uint16_t *x, *xe, *o1, *o2;
    uint8_t *q, *qo;
} moe_ctx;

static void moe_run(void *vc, int variant) {
    moe_ctx *c = (moe_ctx *)vc;
    ts_test_ctx *ts_t_ = c->t;
    const tk_record *rec = c->rec;
    char what[96];
    if (c->kind == 0) {
        ts_tensor s = ts_tensor_2d(c->f1, TS_F32, c->T, c->E), o = ts_tensor_2d(c->idx, TS_I64, c->T, c->K);
        TS_CHECK_STATUS(ts_topk_gate(&s, &o), TS_OK);
        snprintf(what, sizeof what, "topk_gate E=%lld K=%lld (variant %d)", (long long)c->E, (long long)c->K, variant);
        tk_expect(ts_t_, rec, 0, c->idx, (size_t)(c->T * c->K) * 8, what);
    } else if (c->kind == 1) {
        const int64_t *p = rec->p;
        ts_tensor lg = ts_tensor_2d(c->f1, TS_F32, c->T, c->E), b = ts_tensor_1d(c->f2, TS_F32, c->E);
        ts_tensor m = ts_tensor_1d((void *)rec->a[0].data, TS_BOOL, c->T);
        ts_tensor oi = ts_tensor_2d(c->idx, TS_I64, c->T, c->KP), ow = ts_tensor_2d(c->f3, TS_F32, c->T, c->KP);
        const int64_t K = p[2], LE = c->E + c->KP - K;
        memset(c->idx, 0xEE, (size_t)(c->T * c->KP) * 8);
        memcpy(c->un, rec->a[4].data, (size_t)(c->T * K) * 8);
        ts_tensor un = ts_tensor_2d(c->un, TS_I64, c->T, K), fx = ts_tensor_1d((void *)rec->a[3].data, TS_BOOL, c->T);
        ts_tensor pm = ts_tensor_2d((void *)rec->a[5].data, TS_I32, LE, 3), pc = ts_tensor_1d((void *)rec->a[6].data, TS_I32, LE);
        TS_CHECK_STATUS(ts_top2_sum_gate(&lg, &b, &m, &oi, &ow, K, p[4], p[5], p[6], (float)((double)p[7] / 1000.0), p[8],
                                         p[9], p[10], p[11], p[12], p[13], &un, p[15], &fx, p[16], &pm, &pc, p[17]),
                        TS_OK);
        snprintf(what, sizeof what, "top2_sum_gate E=%lld unmapped_topk_idx (variant %d)", (long long)c->E, variant);
        tk_expect(ts_t_, rec, 7, c->un, (size_t)(c->T * K) * 8, what);
        snprintf(what, sizeof what, "top2_sum_gate E=%lld scoring=%lld idx (variant %d)", (long long)c->E, (long long)p[6], variant);
        tk_expect(ts_t_, rec, 1, c->idx, (size_t)(c->T * c->KP) * 8, what);
        snprintf(what, sizeof what, "top2_sum_gate E=%lld scoring=%lld weights (variant %d)", (long long)c->E, (long long)p[6], variant);
        tk_expect(ts_t_, rec, 2, c->f3, (size_t)(c->T * c->KP) * 4, what);
    } else if (c->kind == 3) {
        const int64_t T = rec->p[0], G = rec->p[1], EG = rec->p[2], KG = rec->p[3];
        ts_tensor s = ts_tensor_3d(c->f1, TS_F32, T, G, EG), o = ts_tensor_2d(c->idx, TS_I64, T, KG);
        TS_CHECK_STATUS(ts_topk_sum_and_topk_group_idx(&s, &o, rec->p[4]), TS_OK);
        snprintf(what, sizeof what, "topk_sum_and_topk_group_idx G=%lld (variant %d)", (long long)G, variant);
        tk_expect(ts_t_, rec, 0, c->idx, (size_t)(T * KG) * 8, what);
    } else if (c->kind == 4) {
        const int64_t *p = rec->p, T = p[0], K = p[1], E = p[2];
        int64_t *ti = c->idx, *gi = ti + T * K, *out = gi + T * K, *u = out + T * K;
        ts_tensor tti = ts_tensor_2d(ti, TS_I64, T, K), tout = ts_tensor_2d(out, TS_I64, T, K);
        TS_CHECK_STATUS(ts_mask_indices_by_tp(&tti, &tout, E, p[4], p[5], p[6]), TS_OK);
        snprintf(what, sizeof what, "mask_indices_by_tp E=%lld (variant %d)", (long long)E, variant);
        tk_expect(ts_t_, rec, 0, out, (size_t)(T * K) * 8, what);
        memcpy(u, gi, (size_t)(T * K) * 8);
        ts_tensor tu = ts_tensor_2d(u, TS_I64, T, K);
        TS_CHECK_STATUS(ts_inplace_unique_group_indices(&tu, p[3]), TS_OK);
        snprintf(what, sizeof what, "inplace_unique_group_indices G=%lld (variant %d)", (long long)p[3], variant);
        tk_expect(ts_t_, rec, 1, u, (size_t)(T * K) * 8, what);
        ts_tensor tf = ts_tensor_1d(c->f1, TS_F32, E);
        TS_CHECK_STATUS(ts_aux_fi(&tti, &tf, p[7]), TS_OK);
        snprintf(what, sizeof what, "aux_fi E=%lld (variant %d)", (long long)E, variant);
        tk_expect(ts_t_, rec, 2, c->f1, (size_t)E * 4, what);
    } else if (c->kind == 5) {
        const int64_t *p = rec->p, T = p[0], K = p[1], E = p[2], P = p[4];
        int32_t *pe = c->cnt, *pt = pe + P, *ptk = pt + P, *t2p = ptk + P, *st = t2p + T * K, *en = st + E, *nt = en + E;
        memset(pe, 0x55, (size_t)(3 * P + T * K + 3 * E) * 4);
        ts_tensor ti = ts_tensor_2d(c->idx, TS_I64, T, K), tpe = ts_tensor_1d(pe, TS_I32, P), tpt = ts_tensor_1d(pt, TS_I32, P);
        ts_tensor tptk = ts_tensor_1d(ptk, TS_I32, P), tt2p = ts_tensor_2d(t2p, TS_I32, T, K), tst = ts_tensor_1d(st, TS_I32, E);
        ts_tensor ten = ts_tensor_1d(en, TS_I32, E), tnt = ts_tensor_1d(nt, TS_I32, E);
        TS_CHECK_STATUS(ts_get_fused_mapping(&ti, &tpe, &tpt, &tptk, &tt2p, &tst, &ten, &tnt, p[3]), TS_OK);
        static const char *const names[7] = {"pos_to_expert", "pos_to_token", "pos_to_token_topk", "token_topk_to_pos",
                                             "expert_start", "expert_end", "num_tokens_per_expert"};
        int32_t *outs[7] = {pe, pt, ptk, t2p, st, en, nt};
        const int64_t lens[7] = {P, P, P, T * K, E, E, E};
        for (int i = 0; i < 7; i++) {
            snprintf(what, sizeof what, "get_fused_mapping %s T=%lld (variant %d)", names[i], (long long)T, variant);
            tk_expect(ts_t_, rec, (uint32_t)i, outs[i], (size_t)lens[i] * 4, what);
        }
    } else {
        const int64_t T = c->T, K = c->K, H = c->H, P = c->P, E = c->E;
        ts_tensor w = ts_tensor_2d(c->f1, TS_F32, T, K), den = ts_tensor_1d(c->f2, TS_F32, T), nw = ts_tensor_2d(c->f3, TS_F32, T, K);
        TS_CHECK_STATUS(ts_normalize_weight(&w, &den, &nw), TS_OK);
        snprintf(what, sizeof what, "normalize_weight K=%lld (variant %d)", (long long)K, variant);
        tk_expect(ts_t_, rec, 3, c->f2, (size_t)T * 4, what);
        tk_expect(ts_t_, rec, 4, c->f3, (size_t)(T * K) * 4, what);
        ts_tensor gi = ts_tensor_2d((void *)rec->a[0].data, TS_I64, T, K), gc = ts_tensor_1d(c->cnt, TS_I32, E);
        memset(c->cnt, 0x55, (size_t)E * 4);
        TS_CHECK_STATUS(ts_group_count(&gi, &gc), TS_OK);
        snprintf(what, sizeof what, "group_count E=%lld (variant %d)", (long long)E, variant);
        tk_expect(ts_t_, rec, 5, c->cnt, (size_t)E * 4, what);
        ts_tensor x = ts_tensor_2d(c->x, TS_BF16, T, H), ptok = ts_tensor_1d((void *)rec->a[1].data, TS_I32, P);
        ts_tensor ex = ts_tensor_2d(c->o1, TS_BF16, P, H);
        memset(c->o1, 0xEE, (size_t)(P * H) * 2);
        TS_CHECK_STATUS(ts_expand_to_fused(&x, &ptok, &ex), TS_OK);
        snprintf(what, sizeof what, "expand_to_fused P=%lld (variant %d)", (long long)P, variant);
        tk_expect(ts_t_, rec, 6, c->o1, (size_t)(P * H) * 2, what);
        ts_tensor xe = ts_tensor_2d(c->xe, TS_BF16, P, H), t2p = ts_tensor_2d((void *)rec->a[2].data, TS_I32, T, K);
        ts_tensor red = ts_tensor_2d(c->o2, TS_BF16, T, H);
        TS_CHECK_STATUS(ts_reduce_fused(&xe, &w, &t2p, &red), TS_OK);
        snprintf(what, sizeof what, "reduce_fused K=%lld (variant %d)", (long long)K, variant);
        tk_expect(ts_t_, rec, 7, c->o2, (size_t)(T * H) * 2, what);
        /* the FP8 form with its row scales: a plain gather */
        ts_tensor xq = ts_tensor_2d(c->q, TS_E4M3, T, H), xs = ts_tensor_2d(c->f4, TS_F32, T, 2);
        ts_tensor oq = ts_tensor_2d(c->qo, TS_E4M3, P, H), os = ts_tensor_2d(c->f4 + 2 * T, TS_F32, P, 2);
        TS_CHECK_STATUS(ts_expand_to_fused_with_sf(&xq, &xs, &ptok, &oq, &os), TS_OK);
        const int32_t *pt = (const int32_t *)rec->a[1].data;
        bool same = true;
        for (int64_t i = 0; i < P; i++) {
            const int64_t s = pt[i];
            for (int64_t j = 0; j < H; j++) same &= c->qo[i * H + j] == (s >= 0 ? c->q[s * H + j] : 0);
            for (int64_t j = 0; j < 2; j++) same &= c->f4[2 * T + i * 2 + j] == (s >= 0 ? c->f4[s * 2 + j] : 0.0f);
        }
        TS_CHECK_MSG(same, "expand_to_fused_with_sf differs (P=%lld variant %d)", (long long)P, variant);
    }
}

TS_TEST(tk_moe_golden) {
    size_t size = 0;
    tk_reader r = {TS_READ_GOLDEN("tk_moe.bin", &size), 0, 0};
    r.size = size;
    tk_record rec;
    int counts[6] = {0, 0, 0, 0, 0, 0};
    while (tk_next(ts_t_, &r, &rec)) {
        moe_ctx c = {.t = ts_t_, .rec = &rec, .T = rec.p[0], .E = rec.p[1], .K = rec.p[2]};
        bool ok = true;
        if (!strcmp(rec.name, "topk_gate")) {
            c.kind = 0;
            c.f1 = malloc((size_t)(c.T * c.E) * 4), c.idx = malloc((size_t)(c.T * c.K) * 8);
            ok = c.f1 && c.idx;
            if (ok) {
                tk_f32_input((uint64_t)rec.p[3], (size_t)(c.T * c.E), 1.0f, c.f1);
                for (int64_t i = 0; i < c.T * c.E; i++) c.f1[i] = rintf(c.f1[i] * 8.0f) / 8.0f;
            }
        } else if (!strcmp(rec.name, "top2_sum_gate")) {
            c.kind = 1;
            c.KP = rec.p[3];
            c.f1 = malloc((size_t)(c.T * c.E) * 4), c.f2 = malloc((size_t)c.E * 4), c.f3 = malloc((size_t)(c.T * c.KP) * 4);
            c.idx = malloc((size_t)(c.T * c.KP) * 8), c.un = malloc((size_t)(c.T * c.K) * 8);
            ok = c.f1 && c.f2 && c.f3 && c.idx && c.un;
            if (ok) {
                tk_f32_input((uint64_t)rec.p[14], (size_t)(c.T * c.E), 4.0f, c.f1);
                tk_f32_input((uint64_t)rec.p[14] + 1, (size_t)c.E, 0.5f, c.f2);
            }
        } else if (!strcmp(rec.name, "moe_rows")) {
            c.kind = 2;
            c.H = rec.p[3], c.P = rec.p[4];
            const uint64_t seed = (uint64_t)rec.p[5];
            const size_t T = (size_t)c.T, K = (size_t)c.K, H = (size_t)c.H, P = (size_t)c.P;
            c.f1 = malloc(T * K * 4), c.f2 = malloc(T * 4), c.f3 = malloc(T * K * 4), c.f4 = malloc((T + P) * 2 * 4);
            c.cnt = malloc((size_t)c.E * 4), c.x = malloc(T * H * 2), c.xe = malloc(P * H * 2), c.o1 = malloc(P * H * 2);
            c.o2 = malloc(T * H * 2), c.q = malloc(T * H), c.qo = malloc(P * H);
            ok = c.f1 && c.f2 && c.f3 && c.f4 && c.cnt && c.x && c.xe && c.o1 && c.o2 && c.q && c.qo;
            if (ok) {
                tk_f32_input(seed + 2, T * K, 1.0f, c.f1);
                tk_bf16_input(seed + 3, T * H, 4.0f, c.x);
                tk_bf16_input(seed + 4, P * H, 4.0f, c.xe);
                for (size_t i = 0; i < T * H; i++) c.q[i] = (uint8_t)(c.x[i] >> 8);
                tk_f32_input(seed + 5, T * 2, 1.0f, c.f4);
            }
        } else if (!strcmp(rec.name, "group_topk")) {
            c.kind = 3;
            const size_t n = (size_t)(rec.p[0] * rec.p[1] * rec.p[2]);
            c.f1 = malloc(n * 4), c.idx = malloc((size_t)(rec.p[0] * rec.p[3]) * 8);
            ok = c.f1 && c.idx;
            if (ok) {
                tk_f32_input((uint64_t)rec.p[5], n, 1.0f, c.f1);
                for (size_t i = 0; i < n; i++) c.f1[i] = rintf(c.f1[i] * 4.0f) / 4.0f;
            }
        } else if (!strcmp(rec.name, "moe_misc")) {
            c.kind = 4;
            const int64_t T = rec.p[0], K = rec.p[1], E = rec.p[2], G = rec.p[3];
            const uint64_t seed = (uint64_t)rec.p[8];
            c.idx = malloc((size_t)(4 * T * K) * 8), c.f1 = malloc((size_t)E * 4);
            ok = c.idx && c.f1;
            if (ok) {
                ts_prng r0 = ts_prng_seed(seed), r1 = ts_prng_seed(seed + 1), r2 = ts_prng_seed(seed + 2), r3 = ts_prng_seed(seed + 3);
                for (int64_t i = 0; i < T * K; i++) {
                    const int64_t v = (int64_t)(ts_prng_u32(&r0) % (uint32_t)E), g = (int64_t)(ts_prng_u32(&r2) % (uint32_t)G);
                    c.idx[i] = ts_prng_u32(&r1) % 7 == 0 ? -1 : v;
                    c.idx[T * K + i] = ts_prng_u32(&r3) % 9 == 0 ? -1 : g;
                }
            }
        } else if (!strcmp(rec.name, "fused_mapping")) {
            c.kind = 5;
            const int64_t T = rec.p[0], K = rec.p[1], E = rec.p[2], P = rec.p[4];
            const uint64_t seed = (uint64_t)rec.p[5];
            c.idx = malloc((size_t)(T * K) * 8), c.cnt = malloc((size_t)(3 * P + T * K + 3 * E) * 4);
            ok = c.idx && c.cnt;
            if (ok) {
                ts_prng r0 = ts_prng_seed(seed), r1 = ts_prng_seed(seed + 1);
                for (int64_t i = 0; i < T * K; i++) {
                    const int64_t v = (int64_t)(ts_prng_u32(&r0) % (uint32_t)E);
                    c.idx[i] = ts_prng_u32(&r1) % 7 == 0 ? -1 : v;
                }
            }
        } else {
            TS_CHECK_MSG(false, "unknown record %s", rec.name);
            ok = false;
        }
        TS_CHECK(ok || c.kind > 5);
        if (ok) {
            tk_for_variants(&c, moe_run, 4);
            counts[c.kind]++;
        }
        free(c.f1), free(c.f2), free(c.f3), free(c.f4), free(c.idx), free(c.un), free(c.cnt), free(c.x), free(c.xe), free(c.o1);
        free(c.o2), free(c.q), free(c.qo);
        tk_record_free(&rec);
    }
    TS_CHECK(counts[0] >= 5 && counts[1] >= 5 && counts[2] >= 3 && counts[3] >= 3 && counts[4] >= 3 && counts[5] >= 3);
    free(r.buf);
}

TS_TEST(tk_moe_errors) {
    float s[4 * 8] = {0};
    int64_t idx[4 * 9];
    ts_tensor ts = ts_tensor_2d(s, TS_F32, 4, 8), ti = ts_tensor_2d(idx, TS_I64, 4, 9);
    TS_CHECK_STATUS(ts_topk_gate(&ts, &ti), TS_ERR_INVALID_ARGUMENT); /* K > E */
    int64_t gi[2] = {0, 7};
    int32_t cnt[4];
    ts_tensor tg = ts_tensor_2d(gi, TS_I64, 1, 2), tc = ts_tensor_1d(cnt, TS_I32, 4);
    TS_CHECK_STATUS(ts_group_count(&tg, &tc), TS_ERR_INVALID_ARGUMENT); /* entry past the counts */
    TS_CHECK(strstr(ts_last_error(), "count.shape[0]") != NULL);
    float lg[2 * 12] = {0}, b[12] = {0}, w[2 * 2];
    bool m[2] = {true, true};
    ts_tensor tl = ts_tensor_2d(lg, TS_F32, 2, 12), tb = ts_tensor_1d(b, TS_F32, 12), tm = ts_tensor_1d(m, TS_BOOL, 2);
    ts_tensor oi = ts_tensor_2d(idx, TS_I64, 2, 2), ow = ts_tensor_2d(w, TS_F32, 2, 2);
    int64_t un[2 * 2] = {0, 1, 2, 30};
    int32_t pm[14 * 1], pc[14];
    for (int i = 0; i < 14; i++) pm[i] = i, pc[i] = 1;
    ts_tensor tu = ts_tensor_2d(un, TS_I64, 2, 2), tpm = ts_tensor_2d(pm, TS_I32, 14, 1), tpc = ts_tensor_1d(pc, TS_I32, 14);
    TS_CHECK_STATUS(ts_top2_sum_gate(&tl, &tb, &tm, &oi, &ow, 2, 5, 2, 0, 1.0f, false, 0, 0, 1, 0, 1, &tu, false, &tm, false, &tpm, &tpc, false),
                    TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "num_groups must divide") != NULL);
    TS_CHECK_STATUS(ts_top2_sum_gate(&tl, &tb, &tm, &oi, &ow, 2, 1, 1, 7, 1.0f, false, 0, 0, 1, 0, 1, &tu, false, &tm, false, &tpm, &tpc, false),
                    TS_ERR_INVALID_ARGUMENT);
    /* fixed routing needs unmapped_topk_idx; a fixed index past E is reported after the launch */
    TS_CHECK_STATUS(ts_top2_sum_gate(&tl, &tb, &tm, &oi, &ow, 2, 1, 1, 0, 1.0f, false, 0, 0, 1, 0, 1, &tu, false, &tm, true, &tpm, &tpc, false),
                    TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_top2_sum_gate(&tl, &tb, &tm, &oi, &ow, 2, 1, 1, 0, 1.0f, false, 0, 0, 1, 0, 1, &tu, true, &tm, true, &tpm, &tpc, false),
                    TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "fixed routing indices") != NULL);
    /* get_fused_mapping: P below the aligned total */
    int64_t fi_idx[2 * 2] = {0, 1, 1, -1};
    int32_t fm[3 * 8 + 4 + 9];
    ts_tensor tti = ts_tensor_2d(fi_idx, TS_I64, 2, 2), tpe = ts_tensor_1d(fm, TS_I32, 8), tpt = ts_tensor_1d(fm + 8, TS_I32, 8);
    ts_tensor tpk = ts_tensor_1d(fm + 16, TS_I32, 8), tt2 = ts_tensor_2d(fm + 24, TS_I32, 2, 2), tst = ts_tensor_1d(fm + 28, TS_I32, 3);
    ts_tensor ten = ts_tensor_1d(fm + 31, TS_I32, 3), tnt = ts_tensor_1d(fm + 34, TS_I32, 3);
    TS_CHECK_STATUS(ts_get_fused_mapping(&tti, &tpe, &tpt, &tpk, &tt2, &tst, &ten, &tnt, 4), TS_OK); /* 4 + 4 = 8 slots */
    TS_CHECK(fm[0] == 0 && fm[1] == -1 && fm[4] == 1 && fm[5] == 1 && fm[6] == -1 && fm[24 + 3] == -1);
    TS_CHECK_STATUS(ts_get_fused_mapping(&tti, &tpe, &tpt, &tpk, &tt2, &tst, &ten, &tnt, 8), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "aligned number") != NULL);
    /* the map must cover the logical experts */
    ts_tensor tpm2 = ts_tensor_2d(pm, TS_I32, 10, 1), tpc2 = ts_tensor_1d(pc, TS_I32, 10);
    TS_CHECK_STATUS(ts_top2_sum_gate(&tl, &tb, &tm, &oi, &ow, 2, 1, 1, 0, 1.0f, false, 0, 0, 1, 0, 1, &tu, false, &tm, false, &tpm2, &tpc2, true),
                    TS_ERR_INVALID_ARGUMENT);
}
