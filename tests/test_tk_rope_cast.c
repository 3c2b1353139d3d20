/* RoPE (src/kernels/rope.tile) and the block / channel casts and cast back (src/kernels/
 * cast.tile) byte-exact against tests/golden/tk_rope_cast.bin (numpy re-implementation of
 * TileKernels' rope kernel formulas and torch/cast.py): interleaved and NeoX halves, conjugate,
 * positions with an offset, strided views of a wider head dim (the untouched columns checked),
 * bf16 and f32; 128x128 / 32x32 blocks with partial edges, per-channel 128-token groups, cast
 * back to bf16 and f32. Both ISA variants, 1 and 2 threads; argument errors. */
#include "test_tk_common.h"

#include "tilestack/kernels.h"

#include <stdlib.h>
#include <string.h>

typedef struct rc_ctx {
    ts_test_ctx *t;
    const tk_record *rec;
    void *src, *buf;
    float *cs, *sf;
    uint8_t *q;
    size_t nbytes;
} rc_ctx;

static void rope_run(void *vc, int variant) {
    rc_ctx *c = (rc_ctx *)vc;
    ts_test_ctx *ts_t_ = c->t;
    const int64_t *p = c->rec->p;
    const int64_t T = p[0], NH = p[1], D = p[2], NHB = NH + p[3], DB = D + p[4], S = p[5];
    const bool f32 = p[10];
    memcpy(c->buf, c->src, c->nbytes);
    const size_t es = f32 ? 4 : 2;
    ts_tensor x = ts_tensor_3d((char *)c->buf + (size_t)p[4] * es, f32 ? TS_F32 : TS_BF16, T, NH, D);
    x.strides[0] = NHB * DB, x.strides[1] = DB, x.strides[2] = 1;
    ts_tensor cs = ts_tensor_2d(c->cs, TS_F32, S, D), pos = ts_tensor_1d((void *)c->rec->a[0].data, TS_I32, T);
    ts_status st = f32 ? ts_apply_rotary_f32(&x, &cs, &pos, p[9], p[8], p[6], p[7])
                       : ts_apply_rotary(&x, &cs, &pos, p[9], p[8], p[6], p[7]);
    TS_CHECK_STATUS(st, TS_OK);
    char what[96];
    snprintf(what, sizeof what, "apply_rotary D=%lld interleaved=%lld conj=%lld (variant %d)", (long long)D, (long long)p[6],
             (long long)p[7], variant);
    tk_expect(ts_t_, c->rec, 1, c->buf, c->nbytes, what);
}

static void block_run(void *vc, int variant) {
    rc_ctx *c = (rc_ctx *)vc;
    ts_test_ctx *ts_t_ = c->t;
    const int64_t *p = c->rec->p;
    char what[96];
    if (!strcmp(c->rec->name, "block_cast") || !strcmp(c->rec->name, "channel_cast")) {
        const bool blockk = c->rec->name[0] == 'b';
        const int64_t M = p[0], N = p[1], bh = blockk ? p[2] : 128, bw = blockk ? p[2] : 1;
        const int64_t sm = (M + bh - 1) / bh, sn = (N + bw - 1) / bw;
        ts_tensor x = ts_tensor_2d(c->src, TS_BF16, M, N), q = ts_tensor_2d(c->q, TS_E4M3, M, N);
        ts_tensor sf = ts_tensor_2d(c->sf, TS_F32, sm, sn);
        memset(c->q, 0xEE, (size_t)(M * N));
        ts_status st = !blockk ? ts_per_channel_cast(&x, &q, &sf, p[2])
                       : bh == 128 ? ts_per_block_cast(&x, &q, &sf, p[3])
                                   : ts_per_block_cast_32(&x, &q, &sf, p[3]);
        TS_CHECK_STATUS(st, TS_OK);
        snprintf(what, sizeof what, "%s M=%lld N=%lld codes (variant %d)", c->rec->name, (long long)M, (long long)N, variant);
        tk_expect(ts_t_, c->rec, 0, c->q, (size_t)(M * N), what);
        snprintf(what, sizeof what, "%s M=%lld N=%lld scales (variant %d)", c->rec->name, (long long)M, (long long)N, variant);
        tk_expect(ts_t_, c->rec, 1, c->sf, (size_t)(sm * sn) * 4, what);
    } else {
        const int64_t M = p[0], N = p[1], bh = p[2], bw = p[3];
        const bool f32 = p[4];
        const int64_t sm = (M + bh - 1) / bh, sn = (N + bw - 1) / bw;
        ts_tensor x = ts_tensor_2d((void *)c->rec->a[0].data, TS_E4M3, M, N);
        ts_tensor sf = ts_tensor_2d((void *)c->rec->a[1].data, TS_F32, sm, sn);
        ts_tensor y = ts_tensor_2d(c->buf, f32 ? TS_F32 : TS_BF16, M, N);
        memset(c->buf, 0xEE, c->nbytes);
        TS_CHECK_STATUS(f32 ? ts_cast_back_f32(&x, &sf, &y, bh, bw) : ts_cast_back(&x, &sf, &y, bh, bw), TS_OK);
        snprintf(what, sizeof what, "cast_back M=%lld N=%lld bh=%lld bw=%lld (variant %d)", (long long)M, (long long)N,
                 (long long)bh, (long long)bw, variant);
        tk_expect(ts_t_, c->rec, 2, c->buf, c->nbytes, what);
    }
}

TS_TEST(tk_rope_cast_golden) {
    size_t size = 0;
    tk_reader r = {TS_READ_GOLDEN("tk_rope_cast.bin", &size), 0, 0};
    r.size = size;
    tk_record rec;
    int n[4] = {0, 0, 0, 0};
    while (tk_next(ts_t_, &r, &rec)) {
        rc_ctx c = {.t = ts_t_, .rec = &rec};
        const int64_t *p = rec.p;
        if (!strcmp(rec.name, "rope")) {
            const size_t cnt = (size_t)(p[0] * (p[1] + p[3]) * (p[2] + p[4])), es = p[10] ? 4 : 2;
            c.nbytes = cnt * es;
            c.src = malloc(c.nbytes), c.buf = malloc(c.nbytes), c.cs = malloc((size_t)(p[5] * p[2]) * 4);
            TS_CHECK(c.src && c.buf && c.cs);
            if (c.src && c.buf && c.cs) {
                if (p[10]) tk_f32_input((uint64_t)p[11], cnt, 2.0f, c.src);
                else tk_bf16_input((uint64_t)p[11], cnt, 2.0f, c.src);
                tk_f32_input((uint64_t)p[11] + 1, (size_t)(p[5] * p[2]), 1.0f, c.cs);
                tk_for_variants(&c, rope_run, 4);
                n[0]++;
            }
        } else if (!strcmp(rec.name, "block_cast") || !strcmp(rec.name, "channel_cast")) {
            const bool blockk = rec.name[0] == 'b';
            const int64_t M = p[0], N = p[1], bh = blockk ? p[2] : 128, bw = blockk ? p[2] : 1;
            const uint64_t seed = (uint64_t)p[blockk ? 4 : 3];
            c.src = malloc((size_t)(M * N) * 2), c.q = malloc((size_t)(M * N));
            c.sf = malloc((size_t)(((M + bh - 1) / bh) * ((N + bw - 1) / bw)) * 4);
            TS_CHECK(c.src && c.q && c.sf);
            if (c.src && c.q && c.sf) {
                tk_bf16_input(seed, (size_t)(M * N), 100.0f, c.src);
                tk_for_variants(&c, block_run, 4);
                n[blockk ? 1 : 2]++;
            }
        } else if (!strcmp(rec.name, "cast_back")) {
            c.nbytes = (size_t)(p[0] * p[1]) * (p[4] ? 4 : 2);
            c.buf = malloc(c.nbytes);
            TS_CHECK(c.buf != NULL);
            if (c.buf) {
                tk_for_variants(&c, block_run, 4);
                n[3]++;
            }
        } else {
            TS_CHECK_MSG(false, "unknown record %s", rec.name);
        }
        free(c.src), free(c.buf), free(c.cs), free(c.sf), free(c.q);
        tk_record_free(&rec);
    }
    TS_CHECK(n[0] >= 5 && n[1] >= 4 && n[2] >= 3 && n[3] >= 3);
    free(r.buf);
}

TS_TEST(tk_rope_cast_errors) {
    uint16_t x[2 * 2 * 64] = {0};
    float cs[4 * 64] = {0};
    int32_t pos[2] = {0, 9};
    ts_tensor tx = ts_tensor_3d(x, TS_BF16, 2, 2, 64), tc = ts_tensor_2d(cs, TS_F32, 4, 64), tp = ts_tensor_1d(pos, TS_I32, 2);
    TS_CHECK_STATUS(ts_apply_rotary(&tx, &tc, &tp, 0, true, false, false), TS_ERR_INVALID_ARGUMENT); /* position 9 >= 4 */
    TS_CHECK(strstr(ts_last_error(), "cos_sin_cache") != NULL);
    TS_CHECK_STATUS(ts_apply_rotary(&tx, &tc, &tp, 3, false, false, false), TS_ERR_INVALID_ARGUMENT); /* offset 3 + t 1 */
    ts_tensor tc2 = ts_tensor_2d(cs, TS_F32, 4, 32);
    TS_CHECK(ts_apply_rotary(&tx, &tc2, &tp, 0, false, false, false) != TS_OK); /* rotary dims differ */
    uint8_t q[64];
    float sf[4];
    ts_tensor bx = ts_tensor_2d(x, TS_BF16, 2, 32), bq = ts_tensor_2d(q, TS_E4M3, 2, 32), bs = ts_tensor_2d(sf, TS_F32, 1, 2);
    TS_CHECK_STATUS(ts_per_block_cast(&bx, &bq, &bs, false), TS_ERR_INVALID_ARGUMENT);
    ts_tensor by = ts_tensor_2d(x, TS_BF16, 2, 32), bs1 = ts_tensor_2d(sf, TS_F32, 1, 1);
    TS_CHECK_STATUS(ts_cast_back(&bq, &bs1, &by, 128, 16), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK(strstr(ts_last_error(), "multiple of 32") != NULL);
}
