/* The third batch of TileKernels quantisation kernels in the tile language (src/kernels/
 * quant_more.tile): per_token_cast_with_sf_only, per_token_cast_with_precomputed_sf and
 * per_channel_cast_fused, byte-exact against tests/golden/tk_quant3.bin (tests/gen/
 * gen_tk_quant3.py: numpy re-implementation of the upstream kernels' arithmetic). Every case
 * on both ISA variants with 1 and 2 threads, f32 scales row- and column-major and packed UE8M0,
 * strided input rows, special values, tokens 1 and 4001; cross-checks against the kernels that
 * compute the same thing another way (the full per-token cast, the per-channel cast); argument
 * errors with canaries. */
#include "test_tk_common.h"
#include "ts_prng.h"

#include "tilestack/kernels.h"
#include "tilestack/numerics.h"

#include <stdlib.h>
#include <string.h>

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

enum { IN_BF16, IN_F32, IN_E4M3 };
enum { OUT_FP4, OUT_E4M3 };


/* A per-token input [T, H] of bf16 / f32 with rows xs elements apart (gaps hold NaN bytes that
 * must never be read): from the stored raw array or regenerated (uniform * 4, as the
 * generator). */
typedef struct xin {
    void *mem;
    int64_t T, H, xs;
    size_t esz;
} xin;

static bool xin_make(xin *x, const tk_record *rec, bool stored, int in, int64_t T, int64_t H, int64_t xstride,
                     uint64_t seed) {
    x->T = T, x->H = H, x->xs = xstride ? xstride : H, x->esz = in == IN_BF16 ? 2 : 4;
    x->mem = malloc((size_t)(T * x->xs) * x->esz + 1);
    void *dense = malloc((size_t)(T * H) * x->esz + 1);
    if (!x->mem || !dense) {
        free(dense);
        return false;
    }
    if (stored) memcpy(dense, rec->a[0].data, (size_t)(T * H) * x->esz);
    else if (in == IN_BF16) tk_bf16_input(seed, (size_t)(T * H), 4.0f, dense);
    else tk_f32_input(seed, (size_t)(T * H), 4.0f, dense);
    memset(x->mem, 0xFF, (size_t)(T * x->xs) * x->esz);
    for (int64_t i = 0; i < T; i++)
        memcpy((uint8_t *)x->mem + (size_t)(i * x->xs) * x->esz, (uint8_t *)dense + (size_t)(i * H) * x->esz,
               (size_t)H * x->esz);
    free(dense);
    return true;
}
static ts_tensor xin_tensor(const xin *x, int in) {
    ts_tensor t = ts_tensor_2d(x->mem, in == IN_BF16 ? TS_BF16 : TS_F32, x->T, x->H);
    t.strides[0] = x->xs;
    return t;
}

/* ---------------------------------------------------------------- per_token_cast_with_sf_only */

typedef struct sfo_ctx {
    ts_test_ctx *t;
    const tk_record *rec;
    int in, outk;
    bool packed, round_sf;
    int64_t gs;
    uint32_t ai;
    xin x;
    sf_buf sf;
} sfo_ctx;

static ts_status sfo_call(const ts_tensor *x, const ts_tensor *sf, int in, int outk, bool packed, int64_t gs, bool r) {
    if (in == IN_BF16) {
        if (outk == OUT_E4M3)
            return packed ? ts_per_token_cast_bf16_to_e4m3_sf_only_ue8m0(x, sf, gs)
                          : ts_per_token_cast_bf16_to_e4m3_sf_only(x, sf, gs, r);
        return packed ? ts_per_token_cast_bf16_to_fp4_sf_only_ue8m0(x, sf, gs)
                      : ts_per_token_cast_bf16_to_fp4_sf_only(x, sf, gs, r);
    }
    if (outk == OUT_E4M3)
        return packed ? ts_per_token_cast_f32_to_e4m3_sf_only_ue8m0(x, sf, gs)
                      : ts_per_token_cast_f32_to_e4m3_sf_only(x, sf, gs, r);
    return packed ? ts_per_token_cast_f32_to_fp4_sf_only_ue8m0(x, sf, gs)
                  : ts_per_token_cast_f32_to_fp4_sf_only(x, sf, gs, r);
}

/* the full cast of quant_fp4.tile (contiguous x): codes into q, scales into sf */
static ts_status full_cast(const ts_tensor *x, const ts_tensor *q, const ts_tensor *sf, int in, int outk, bool packed,
                           int64_t gs, bool r) {
    if (in == IN_BF16) {
        if (outk == OUT_E4M3)
            return packed ? ts_per_token_cast_bf16_to_e4m3_ue8m0(x, q, sf, gs) : ts_per_token_cast_bf16_to_e4m3(x, q, sf, gs, r);
        return packed ? ts_per_token_cast_bf16_to_fp4_ue8m0(x, q, sf, gs) : ts_per_token_cast_bf16_to_fp4(x, q, sf, gs, r);
    }
    if (outk == OUT_E4M3)
        return packed ? ts_per_token_cast_f32_to_e4m3_ue8m0(x, q, sf, gs) : ts_per_token_cast_f32_to_e4m3(x, q, sf, gs, r);
    return packed ? ts_per_token_cast_f32_to_fp4_ue8m0(x, q, sf, gs) : ts_per_token_cast_f32_to_fp4(x, q, sf, gs, r);
}

static void sfo_run(void *vc, int variant) {
    sfo_ctx *c = vc;
    ts_test_ctx *ts_t_ = c->t;
    memset(c->sf.mem, 0xEE, (size_t)(c->sf.pal * c->sf.cols + 1) * 4);
    ts_tensor x = xin_tensor(&c->x, c->in), sf = sf_tensor(&c->sf, c->packed ? TS_UE8M0X4 : TS_F32);
    TS_CHECK_STATUS(sfo_call(&x, &sf, c->in, c->outk, c->packed, c->gs, c->round_sf), TS_OK);
    TS_CHECK_EQ_INT(c->sf.mem[c->sf.pal * c->sf.cols], 0xEEEEEEEEu); /* nothing past the scales */
    sf_get(&c->sf);
    char what[96];
    snprintf(what, sizeof what, "sf_only in %d out %d packed %d (variant %d)", c->in, c->outk, c->packed, variant);
    tk_expect(ts_t_, c->rec, c->ai, c->sf.row, (size_t)(c->sf.rows * c->sf.cols) * 4, what);
}

static void sfo_case(ts_test_ctx *ts_t_, const tk_record *rec, int nth) {
    sfo_ctx c = {.t = ts_t_, .rec = rec, .in = (int)rec->p[0], .outk = (int)rec->p[1], .packed = rec->p[2],
                 .gs = rec->p[5], .round_sf = rec->p[6]};
    const int64_t T = rec->p[3], H = rec->p[4], ng = cdiv(H, c.gs), ncol = c.packed ? cdiv(ng, 4) : ng;
    const int special = (int)rec->p[8];
    c.ai = special ? 1 : 0;
    bool ok = xin_make(&c.x, rec, special != 0, c.in, T, H, rec->p[9], (uint64_t)rec->p[7]);
    ok &= sf_alloc(&c.sf, T, ncol, nth % 2 == 1);
    TS_CHECK(ok);
    if (ok) {
        tk_for_variants(&c, sfo_run, T > 1000 ? 2 : 4);
        /* the same scales as the full cast (contiguous x only: the full cast takes no stride) */
        if (!rec->p[9]) {
            uint8_t *q = malloc((size_t)(T * H) + 1);
            sf_buf s2;
            if (q && sf_alloc(&s2, T, ncol, false)) {
                ts_tensor x = xin_tensor(&c.x, c.in), st = sf_tensor(&s2, c.packed ? TS_UE8M0X4 : TS_F32);
                ts_tensor tq = c.outk == OUT_FP4 ? ts_tensor_2d(q, TS_E2M1X2, T, H / 2) : ts_tensor_2d(q, TS_E4M3, T, H);
                if (c.outk == OUT_E4M3 || H % 2 == 0) {
                    TS_CHECK_STATUS(full_cast(&x, &tq, &st, c.in, c.outk, c.packed, c.gs, c.round_sf), TS_OK);
                    TS_CHECK(memcmp(s2.mem, c.sf.row, (size_t)(T * ncol) * 4) == 0);
                }
                sf_free(&s2);
            } else {
                TS_CHECK(false);
            }
            free(q);
        }
    }
    free(c.x.mem);
    sf_free(&c.sf);
}

/* ---------------------------------------------------------------- per_token_cast_with_precomputed_sf */

typedef struct pre_ctx {
    ts_test_ctx *t;
    const tk_record *rec;
    int in, outk;
    bool packed;
    int64_t gs;
    uint32_t ai;
    size_t qbytes;
    xin x;
    sf_buf sf;
    uint8_t *q;
} pre_ctx;

static ts_status pre_call(const ts_tensor *x, const ts_tensor *sf, const ts_tensor *q, int in, int outk, bool packed,
                          int64_t gs) {
    if (in == IN_BF16) {
        if (outk == OUT_E4M3)
            return packed ? ts_per_token_cast_bf16_to_e4m3_precomputed_sf_ue8m0(x, sf, q, gs)
                          : ts_per_token_cast_bf16_to_e4m3_precomputed_sf(x, sf, q, gs);
        return packed ? ts_per_token_cast_bf16_to_fp4_precomputed_sf_ue8m0(x, sf, q, gs)
                      : ts_per_token_cast_bf16_to_fp4_precomputed_sf(x, sf, q, gs);
    }
    if (outk == OUT_E4M3)
        return packed ? ts_per_token_cast_f32_to_e4m3_precomputed_sf_ue8m0(x, sf, q, gs)
                      : ts_per_token_cast_f32_to_e4m3_precomputed_sf(x, sf, q, gs);
    return packed ? ts_per_token_cast_f32_to_fp4_precomputed_sf_ue8m0(x, sf, q, gs)
                  : ts_per_token_cast_f32_to_fp4_precomputed_sf(x, sf, q, gs);
}

static ts_tensor pre_out(const pre_ctx *c, uint8_t *q) {
    return c->outk == OUT_FP4 ? ts_tensor_2d(q, TS_E2M1X2, c->x.T, c->x.H / 2) : ts_tensor_2d(q, TS_E4M3, c->x.T, c->x.H);
}

static void pre_run(void *vc, int variant) {
    pre_ctx *c = vc;
    ts_test_ctx *ts_t_ = c->t;
    memset(c->q, 0xEE, c->qbytes + 1);
    ts_tensor x = xin_tensor(&c->x, c->in), sf = sf_tensor(&c->sf, c->packed ? TS_UE8M0X4 : TS_F32), q = pre_out(c, c->q);
    TS_CHECK_STATUS(pre_call(&x, &sf, &q, c->in, c->outk, c->packed, c->gs), TS_OK);
    TS_CHECK_EQ_INT(c->q[c->qbytes], 0xEE);
    char what[96];
    snprintf(what, sizeof what, "precomputed in %d out %d packed %d (variant %d)", c->in, c->outk, c->packed, variant);
    tk_expect(ts_t_, c->rec, c->ai, c->q, c->qbytes, what);
}

static void pre_case(ts_test_ctx *ts_t_, const tk_record *rec, int nth) {
    pre_ctx c = {.t = ts_t_, .rec = rec, .in = (int)rec->p[0], .outk = (int)rec->p[1], .packed = rec->p[2],
                 .gs = rec->p[5]};
    const int64_t T = rec->p[3], H = rec->p[4], ng = cdiv(H, c.gs), ncol = c.packed ? cdiv(ng, 4) : ng;
    const int sfkind = (int)rec->p[7], special = (int)rec->p[8];
    const uint32_t sfi = special ? 1 : 0;
    c.ai = sfi + 1;
    c.qbytes = (size_t)(c.outk == OUT_FP4 ? T * H / 2 : T * H);
    bool ok = xin_make(&c.x, rec, special != 0, c.in, T, H, rec->p[9], (uint64_t)rec->p[6]);
    ok &= sf_alloc(&c.sf, T, ncol, nth % 2 == 1);
    c.q = malloc(c.qbytes + 1);
    TS_CHECK(ok && c.q);
    if (ok && c.q) {
        TS_CHECK_EQ_INT(rec->a[sfi].nbytes, (uint64_t)(T * ncol) * 4);
        sf_put(&c.sf, rec->a[sfi].data);
        tk_for_variants(&c, pre_run, T > 1000 ? 2 : 4);
        /* scales from the full cast (round_sf) give back its codes: upstream's own test (finite
         * input: the full cast's inv of an inf / NaN group is not 1 / sf) */
        if (sfkind == 0 && !rec->p[9] && !special) {
            uint8_t *q2 = malloc(c.qbytes + 1);
            sf_buf s2;
            if (q2 && sf_alloc(&s2, T, ncol, false)) {
                ts_tensor x = xin_tensor(&c.x, c.in), st = sf_tensor(&s2, c.packed ? TS_UE8M0X4 : TS_F32);
                ts_tensor tq = pre_out(&c, q2);
                TS_CHECK_STATUS(full_cast(&x, &tq, &st, c.in, c.outk, c.packed, c.gs, true), TS_OK);
                TS_CHECK(memcmp(s2.mem, rec->a[sfi].data, (size_t)(T * ncol) * 4) == 0);
                TS_CHECK(memcmp(q2, c.q, c.qbytes) == 0);
                sf_free(&s2);
            } else {
                TS_CHECK(false);
            }
            free(q2);
        }
    }
    free(c.x.mem), free(c.q);
    sf_free(&c.sf);
}

/* ---------------------------------------------------------------- per_channel_cast_fused */

typedef struct pccf_ctx {
    ts_test_ctx *t;
    const tk_record *rec;
    int in;
    bool gather, round_sf;
    int64_t T, H, P;
    uint32_t ai;
    void *x;
    float *xsf, *sf;
    int32_t *pos;
    uint8_t *q;
} pccf_ctx;

static ts_status pccf_call(pccf_ctx *c) {
    const ts_dtype dt = c->in == IN_BF16 ? TS_BF16 : c->in == IN_F32 ? TS_F32 : TS_E4M3;
    ts_tensor x = ts_tensor_2d(c->x, dt, c->T, c->H), xs = ts_tensor_2d(c->xsf, TS_F32, c->T, cdiv(c->H, 128));
    ts_tensor q = ts_tensor_2d(c->q, TS_E4M3, c->P, c->H), s = ts_tensor_2d(c->sf, TS_F32, cdiv(c->P, 128), c->H);
    ts_tensor p = ts_tensor_1d(c->pos, TS_I32, c->P);
    const bool r = c->round_sf;
    if (c->gather) {
        if (c->in == IN_BF16) return ts_per_channel_cast_fused_bf16_gather(&x, &p, &q, &s, r);
        if (c->in == IN_F32) return ts_per_channel_cast_fused_f32_gather(&x, &p, &q, &s, r);
        return ts_per_channel_cast_fused_e4m3_gather(&x, &xs, &p, &q, &s, r);
    }
    if (c->in == IN_BF16) return ts_per_channel_cast_fused_bf16(&x, &q, &s, r);
    if (c->in == IN_F32) return ts_per_channel_cast_fused_f32(&x, &q, &s, r);
    return ts_per_channel_cast_fused_e4m3(&x, &xs, &q, &s, r);
}

static void pccf_run(void *vc, int variant) {
    pccf_ctx *c = vc;
    ts_test_ctx *ts_t_ = c->t;
    const size_t nq = (size_t)(c->P * c->H), ns = (size_t)(cdiv(c->P, 128) * c->H);
    memset(c->q, 0xEE, nq + 1);
    memset(c->sf, 0xEE, ns * 4 + 4);
    TS_CHECK_STATUS(pccf_call(c), TS_OK);
    TS_CHECK_EQ_INT(c->q[nq], 0xEE);
    char what[96];
    snprintf(what, sizeof what, "channel_cast_fused in %d gather %d codes (variant %d)", c->in, c->gather, variant);
    tk_expect(ts_t_, c->rec, c->ai, c->q, nq, what);
    snprintf(what, sizeof what, "channel_cast_fused in %d gather %d scales (variant %d)", c->in, c->gather, variant);
    tk_expect(ts_t_, c->rec, c->ai + 1, c->sf, ns * 4, what);
}

static void pccf_case(ts_test_ctx *ts_t_, const tk_record *rec) {
    pccf_ctx c = {.t = ts_t_, .rec = rec, .in = (int)rec->p[0], .gather = rec->p[1], .T = rec->p[2], .H = rec->p[3],
                  .P = rec->p[4], .round_sf = rec->p[5]};
    const uint64_t seed = (uint64_t)rec->p[6];
    const int special = (int)rec->p[7];
    const int64_t T = c.T, H = c.H, P = c.P;
    const size_t esz = c.in == IN_BF16 ? 2 : c.in == IN_F32 ? 4 : 1;
    c.x = malloc((size_t)(T * H) * esz + 1);
    c.xsf = malloc((size_t)(T * cdiv(H, 128)) * 4 + 4);
    c.pos = malloc((size_t)P * 4 + 4);
    c.q = malloc((size_t)(P * H) + 1);
    c.sf = malloc((size_t)(cdiv(P, 128) * H) * 4 + 4);
    TS_CHECK(c.x && c.xsf && c.pos && c.q && c.sf);
    if (c.x && c.xsf && c.pos && c.q && c.sf) {
        uint32_t ai = 0;
        if (c.in == IN_E4M3) {
            memcpy(c.x, rec->a[0].data, (size_t)(T * H));
            memcpy(c.xsf, rec->a[1].data, (size_t)(T * cdiv(H, 128)) * 4);
            ai = 2;
        } else if (special) {
            memcpy(c.x, rec->a[0].data, (size_t)(T * H) * esz);
            ai = 1;
        } else if (c.in == IN_BF16) {
            tk_bf16_input(seed, (size_t)(T * H), 4.0f, c.x);
        } else {
            tk_f32_input(seed, (size_t)(T * H), 4.0f, c.x);
        }
        if (c.gather) memcpy(c.pos, rec->a[ai++].data, (size_t)P * 4);
        c.ai = ai;
        tk_for_variants(&c, pccf_run, T * H > 200000 || P * H > 200000 ? 2 : 4);
        /* bf16 without gather on finite input is the per-channel cast of cast.tile */
        if (c.in == IN_BF16 && !c.gather && !special) {
            uint8_t *q2 = malloc((size_t)(T * H) + 1);
            float *s2 = malloc((size_t)(cdiv(T, 128) * H) * 4 + 4);
            TS_CHECK(q2 && s2);
            if (q2 && s2) {
                ts_tensor x = ts_tensor_2d(c.x, TS_BF16, T, H), tq = ts_tensor_2d(q2, TS_E4M3, T, H);
                ts_tensor ts = ts_tensor_2d(s2, TS_F32, cdiv(T, 128), H);
                TS_CHECK_STATUS(ts_per_channel_cast(&x, &tq, &ts, c.round_sf), TS_OK);
                TS_CHECK(memcmp(q2, c.q, (size_t)(T * H)) == 0);
                TS_CHECK(memcmp(s2, c.sf, (size_t)(cdiv(T, 128) * H) * 4) == 0);
            }
            free(q2), free(s2);
        }
    }
    free(c.x), free(c.xsf), free(c.pos), free(c.q), free(c.sf);
}

TS_TEST(tk_quant3_golden) {
    size_t size = 0;
    tk_reader r = {TS_READ_GOLDEN("tk_quant3.bin", &size), 0, 0};
    r.size = size;
    tk_record rec;
    int n[3] = {0};
    while (tk_next(ts_t_, &r, &rec)) {
        if (!strcmp(rec.name, "sfo")) sfo_case(ts_t_, &rec, n[0]++);
        else if (!strcmp(rec.name, "pre")) pre_case(ts_t_, &rec, n[1]++);
        else if (!strcmp(rec.name, "pccf")) pccf_case(ts_t_, &rec), n[2]++;
        else TS_CHECK_MSG(false, "unknown record %s", rec.name);
        tk_record_free(&rec);
    }
    TS_CHECK(n[0] >= 10 && n[1] >= 12 && n[2] >= 15);
    free(r.buf);
}

/* gather with pos_to_token = identity is the plain cast; with every row repeated it is the
 * cast of the repeated rows (property checks independent of the generator) */
TS_TEST(tk_quant3_gather_identity) {
    enum { T = 300, H = 200 };
    static uint16_t x[T * H], x2[2 * T * H];
    static uint8_t q[2 * T * H], q2[2 * T * H];
    static float s[3 * H], s2[5 * H];
    static int32_t pos[2 * T];
    tk_bf16_input(77, (size_t)T * H, 3.0f, x);
    for (int i = 0; i < T; i++) pos[i] = i;
    ts_tensor tx = ts_tensor_2d(x, TS_BF16, T, H), tq = ts_tensor_2d(q, TS_E4M3, T, H), ts = ts_tensor_2d(s, TS_F32, 3, H);
    ts_tensor tq2 = ts_tensor_2d(q2, TS_E4M3, T, H), ts2 = ts_tensor_2d(s2, TS_F32, 3, H), tp = ts_tensor_1d(pos, TS_I32, T);
    TS_CHECK_STATUS(ts_per_channel_cast_fused_bf16(&tx, &tq, &ts, false), TS_OK);
    TS_CHECK_STATUS(ts_per_channel_cast_fused_bf16_gather(&tx, &tp, &tq2, &ts2, false), TS_OK);
    TS_CHECK(memcmp(q, q2, sizeof(uint8_t) * T * H) == 0 && memcmp(s, s2, sizeof(float) * 3 * H) == 0);
    /* rows in reverse order, each twice: the gather equals the cast of the materialised rows */
    for (int i = 0; i < 2 * T; i++) {
        pos[i] = T - 1 - i / 2;
        memcpy(x2 + (size_t)i * H, x + (size_t)pos[i] * H, H * 2);
    }
    ts_tensor tx2 = ts_tensor_2d(x2, TS_BF16, 2 * T, H), tqa = ts_tensor_2d(q, TS_E4M3, 2 * T, H);
    static float sa[5 * H];
    ts_tensor tsa = ts_tensor_2d(sa, TS_F32, 5, H), tqb = ts_tensor_2d(q2, TS_E4M3, 2 * T, H);
    ts_tensor tsb = ts_tensor_2d(s2, TS_F32, 5, H), tp2 = ts_tensor_1d(pos, TS_I32, 2 * T);
    TS_CHECK_STATUS(ts_per_channel_cast_fused_bf16(&tx2, &tqa, &tsa, true), TS_OK);
    TS_CHECK_STATUS(ts_per_channel_cast_fused_bf16_gather(&tx, &tp2, &tqb, &tsb, true), TS_OK);
    TS_CHECK(memcmp(q, q2, (size_t)2 * T * H) == 0 && memcmp(sa, s2, sizeof(float) * 5 * H) == 0);
}

static size_t changed(const void *p, size_t n, uint8_t canary) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((const uint8_t *)p)[i] != canary;
    return k;
}

TS_TEST(tk_quant3_errors) {
    static uint16_t x[8 * 512];
    static uint8_t q[8 * 512], xq[8 * 512];
    static float sf[256], xsf[64];
    static int32_t pos[16];
    memset(x, 0, sizeof x), memset(xq, 0, sizeof xq), memset(xsf, 0, sizeof xsf);
    memset(q, 0x11, sizeof q), memset(sf, 0x22, sizeof sf);
    ts_tensor tx = ts_tensor_2d(x, TS_BF16, 4, 256), tsf = ts_tensor_2d(sf, TS_F32, 4, 8);

    /* sf_only: gs, sf columns, packed columns, dtypes, H limit; scales untouched */
    TS_CHECK_STATUS(ts_per_token_cast_bf16_to_e4m3_sf_only(&tx, &tsf, 24, false), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "multiple of 16") != NULL);
    TS_CHECK_STATUS(ts_per_token_cast_bf16_to_e4m3_sf_only(&tx, &tsf, 64, false), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "ceil(H / gs) columns") != NULL);
    ts_tensor tpk = ts_tensor_2d(sf, TS_UE8M0X4, 4, 1);
    TS_CHECK_STATUS(ts_per_token_cast_bf16_to_fp4_sf_only_ue8m0(&tx, &tpk, 16), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "ceil(ceil(H / gs) / 4) columns") != NULL);
    TS_CHECK_STATUS(ts_per_token_cast_f32_to_e4m3_sf_only(&tx, &tsf, 32, false), TS_ERR_DTYPE);
    ts_tensor tsf_bad = ts_tensor_2d(sf, TS_F32, 5, 8);
    TS_CHECK_STATUS(ts_per_token_cast_bf16_to_e4m3_sf_only(&tx, &tsf_bad, 32, false), TS_ERR_SHAPE);
    ts_tensor tx_stride = tx;
    tx_stride.strides[1] = 2;
    TS_CHECK_STATUS(ts_per_token_cast_bf16_to_e4m3_sf_only(&tx_stride, &tsf, 32, false), TS_ERR_STRIDE);
    ts_tensor tbig = ts_tensor_2d(x, TS_BF16, 0, 32784), tbsf = ts_tensor_2d(sf, TS_F32, 0, 2049);
    TS_CHECK_STATUS(ts_per_token_cast_bf16_to_e4m3_sf_only(&tbig, &tbsf, 16, false), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "32768") != NULL);
    TS_CHECK_EQ_INT(changed(sf, sizeof sf, 0x22), 0);

    /* precomputed: out dtype and shape, FP4 H / 2, sf columns; output untouched */
    ts_tensor tq = ts_tensor_2d(q, TS_E4M3, 4, 256), tq4 = ts_tensor_2d(q, TS_E2M1X2, 4, 128);
    TS_CHECK_STATUS(ts_per_token_cast_bf16_to_e4m3_precomputed_sf(&tx, &tsf, &tq, 64), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "ceil(H / gs) columns") != NULL);
    ts_tensor tq_u8 = ts_tensor_2d(q, TS_U8, 4, 256);
    TS_CHECK_STATUS(ts_per_token_cast_bf16_to_e4m3_precomputed_sf(&tx, &tsf, &tq_u8, 32), TS_ERR_DTYPE);
    ts_tensor tq_rows = ts_tensor_2d(q, TS_E4M3, 3, 256);
    TS_CHECK_STATUS(ts_per_token_cast_bf16_to_e4m3_precomputed_sf(&tx, &tsf, &tq_rows, 32), TS_ERR_SHAPE);
    ts_tensor tq4_bad = ts_tensor_2d(q, TS_E2M1X2, 4, 127);
    TS_CHECK_STATUS(ts_per_token_cast_bf16_to_fp4_precomputed_sf(&tx, &tsf, &tq4_bad, 32), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "H / 2 bytes") != NULL);
    TS_CHECK_STATUS(ts_per_token_cast_bf16_to_fp4_precomputed_sf_ue8m0(&tx, &tpk, &tq4, 16), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_per_token_cast_bf16_to_fp4_precomputed_sf(&tx, &tsf, &tq4, 0), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_EQ_INT(changed(q, sizeof q, 0x11), 0);

    /* per_channel_cast_fused: sf rows, x_sf columns and rows, pos_to_token length and dtype */
    ts_tensor cx = ts_tensor_2d(x, TS_BF16, 8, 256), cq = ts_tensor_2d(q, TS_E4M3, 8, 256);
    ts_tensor cs2 = ts_tensor_2d(sf, TS_F32, 2, 256), cs = ts_tensor_2d(sf, TS_F32, 1, 256);
    TS_CHECK_STATUS(ts_per_channel_cast_fused_bf16(&cx, &cq, &cs2, false), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "ceil(rows of out / 128) rows") != NULL);
    ts_tensor ex = ts_tensor_2d(xq, TS_E4M3, 8, 256), exs = ts_tensor_2d(xsf, TS_F32, 8, 3), exs_r = ts_tensor_2d(xsf, TS_F32, 7, 2);
    TS_CHECK_STATUS(ts_per_channel_cast_fused_e4m3(&ex, &exs, &cq, &cs, false), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "ceil(H / 128) columns") != NULL);
    TS_CHECK_STATUS(ts_per_channel_cast_fused_e4m3(&ex, &exs_r, &cq, &cs, false), TS_ERR_SHAPE);
    ts_tensor tp = ts_tensor_1d(pos, TS_I32, 16), tp64 = ts_tensor_1d(pos, TS_I64, 8);
    TS_CHECK_STATUS(ts_per_channel_cast_fused_bf16_gather(&cx, &tp, &cq, &cs, false), TS_ERR_SHAPE);
    TS_CHECK_STATUS(ts_per_channel_cast_fused_bf16_gather(&cx, &tp64, &cq, &cs, false), TS_ERR_DTYPE);
    ts_tensor cq_e5 = ts_tensor_2d(q, TS_E5M2, 8, 256);
    TS_CHECK_STATUS(ts_per_channel_cast_fused_bf16(&cx, &cq_e5, &cs, false), TS_ERR_DTYPE);
    TS_CHECK_EQ_INT(changed(q, sizeof q, 0x11), 0);
    TS_CHECK_EQ_INT(changed(sf, sizeof sf, 0x22), 0);
    /* an entry past the rows of x is reported after the launch (a negative one is a zero row) */
    for (int i = 0; i < 8; i++) pos[i] = i - 1;
    ts_tensor tp8 = ts_tensor_1d(pos, TS_I32, 8);
    TS_CHECK_STATUS(ts_per_channel_cast_fused_bf16_gather(&cx, &tp8, &cq, &cs, false), TS_OK);
    pos[5] = 8;
    TS_CHECK_STATUS(ts_per_channel_cast_fused_bf16_gather(&cx, &tp8, &cq, &cs, false), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "pos_to_token entries") != NULL);
    pos[5] = -7; /* any negative entry is a zero row */
    TS_CHECK_STATUS(ts_per_channel_cast_fused_bf16_gather(&cx, &tp8, &cq, &cs, false), TS_OK);

    /* zero rows: nothing to do, nothing written */
    memset(q, 0x11, sizeof q), memset(sf, 0x22, sizeof sf);
    ts_tensor z = ts_tensor_2d(x, TS_BF16, 0, 256), zq = ts_tensor_2d(q, TS_E4M3, 0, 256), zs = ts_tensor_2d(sf, TS_F32, 0, 256);
    ts_tensor zsf = ts_tensor_2d(sf, TS_F32, 0, 8), zp = ts_tensor_1d(pos, TS_I32, 0);
    TS_CHECK_STATUS(ts_per_channel_cast_fused_bf16(&z, &zq, &zs, true), TS_OK);
    TS_CHECK_STATUS(ts_per_channel_cast_fused_bf16_gather(&cx, &zp, &zq, &zs, true), TS_OK);
    TS_CHECK_STATUS(ts_per_token_cast_bf16_to_e4m3_sf_only(&z, &zsf, 32, true), TS_OK);
    TS_CHECK_STATUS(ts_per_token_cast_bf16_to_e4m3_precomputed_sf(&z, &zsf, &zq, 32), TS_OK);
    TS_CHECK_EQ_INT(changed(q, sizeof q, 0x11), 0);
    TS_CHECK_EQ_INT(changed(sf, sizeof sf, 0x22), 0);
}
