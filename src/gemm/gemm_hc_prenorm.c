/* tf32_hc_prenorm_gemm: D = A·tf32(B)ᵀ and sqr_sum = Σ_k A², optionally split along K.
 *
 * Upstream feeds B's f32 bits to the TF32 tensor cores as they are (TMA to shared memory,
 * then wgmma .tf32, no cvt), which read the top 19 bits: tf32(b) truncates the mantissa to
 * 10 bits. A is bf16, exact in TF32. A TF32 value is the exact sum of two bf16 values,
 * hi = its top 16 bits and lo = the rest, so the product runs on the dense BF16 driver as
 * one [M, K] x [2N, K] problem per split (hi rows, then lo rows) in the canonical BF16 order,
 * and D = P_hi + P_lo (one f32 add). Splits cut K into the 64-value blocks of upstream's
 * kernel, split s taking blocks [s*q + min(s, r), +q + (s < r)) with q, r = nkb / S, nkb % S:
 * they depend on num_splits only, never on the thread count. */
#include "gemm/gemm_grouped.h"
#include "gemm/gemm_internal.h"
#include "tilestack/gemm.h"

#include <string.h>

enum { HC_BLOCK_K = 64 };

/* hi / lo bf16 halves of tf32(x) (truncated). Inf and NaN keep their class in hi, lo = 0;
 * lo is exact unless it is an f32 subnormal (|x| < 2^-116). */
static void tf32_split(float x, uint16_t *hi, uint16_t *lo) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7F800000u) == 0x7F800000u) {
        *hi = (u & 0x007FFFFFu) ? (uint16_t)(((u >> 16) & 0x8000u) | 0x7FC0u) : (uint16_t)(u >> 16);
        *lo = 0;
        return;
    }
    const uint32_t t = u & 0xFFFFE000u, h = t & 0xFFFF0000u;
    float tf, hf;
    memcpy(&tf, &t, 4);
    memcpy(&hf, &h, 4);
    const float l = tf - hf;
    uint32_t lu;
    memcpy(&lu, &l, 4);
    *hi = (uint16_t)(h >> 16);
    *lo = (uint16_t)(lu >> 16);
}

typedef struct sqr_ctx {
    const uint16_t *a;
    int64_t lda, m, splits, nkb;
    int64_t k;
    float *s;
} sqr_ctx;

static void split_range(int64_t nkb, int64_t splits, int64_t k, int64_t s, int64_t *k0,
                        int64_t *k1) {
    const int64_t q = nkb / splits, r = nkb % splits;
    const int64_t b0 = s * q + (s < r ? s : r), nb = q + (s < r ? 1 : 0);
    *k0 = ts__min64(k, b0 * HC_BLOCK_K);
    *k1 = ts__min64(k, (b0 + nb) * HC_BLOCK_K);
}

/* Item i = (split i / m, row i % m): s = Σ a² over the split's K range in 8 lanes (lane j
 * takes k = k0 + j mod 8, ascending; k0 is a multiple of 8), then
 * ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)). A bf16 square is exact in f32, so each
 * step rounds once; the lanes break the add latency chain and vectorise, and the order is
 * fixed whatever the ISA or thread count. */
static void sqr_task(void *vctx, int64_t begin, int64_t end, int tid) {
    (void)tid;
    const sqr_ctx *c = (const sqr_ctx *)vctx;
    for (int64_t i = begin; i < end; i++) {
        const int64_t s = i / c->m, row = i % c->m;
        int64_t k0, k1;
        split_range(c->nkb, c->splits, c->k, s, &k0, &k1);
        const uint16_t *p = c->a + row * c->lda;
        float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t kk = k0;
        for (; kk + 8 <= k1; kk += 8)
            for (int j = 0; j < 8; j++) {
                const uint32_t u = (uint32_t)p[kk + j] << 16;
                float v;
                memcpy(&v, &u, 4);
                l[j] += v * v;
            }
        for (int j = 0; kk < k1; kk++, j++) {
            const uint32_t u = (uint32_t)p[kk] << 16;
            float v;
            memcpy(&v, &u, 4);
            l[j] += v * v;
        }
        c->s[i] = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
    }
}

TS_API ts_status ts_tf32_hc_prenorm_gemm(const ts_tensor *a, const ts_tensor *b, ts_tensor *d,
                                         ts_tensor *sqr_sum, int64_t num_splits) {
    if (num_splits < 0)
        return ts__fail(TS_ERR_INVALID_ARGUMENT,
                        "num_splits: %lld, expected 0 (None) or >= 1", (long long)num_splits);
    const bool split = num_splits > 0;
    const int64_t S = split ? num_splits : 1;
    ts__gemm_operand oa;
    TS__RETURN_IF_ERROR(ts_tensor_check(a, "a"));
    if (a->ndim == 2 && a->dtype != TS_BF16)
        return ts__fail(TS_ERR_DTYPE, "a: dtype %s, expected bf16", ts_dtype_name(a->dtype));
    TS__RETURN_IF_ERROR(ts__gemm_make_operand(a, "a", true, false, &oa));
    if (!oa.k_major)
        return ts__fail(TS_ERR_STRIDE, "a: must be K-major (stride[1] == 1), as upstream");
    TS__RETURN_IF_ERROR(ts_tensor_check(b, "b"));
    if (b->ndim != 2)
        return ts__fail(TS_ERR_SHAPE, "b: expected 2 dims [N, K], got %d", (int)b->ndim);
    if (b->dtype != TS_F32)
        return ts__fail(TS_ERR_DTYPE, "b: dtype %s, expected f32", ts_dtype_name(b->dtype));
    if (b->shape[1] > 1 && b->strides[1] != 1)
        return ts__fail(TS_ERR_STRIDE, "b: must be K-major (stride[1] == 1), as upstream");
    const int64_t m = oa.mn, k = oa.k, n = b->shape[0];
    if (b->shape[1] != k)
        return ts__fail(TS_ERR_SHAPE, "b: K = %lld, a has K = %lld", (long long)b->shape[1],
                        (long long)k);
    if (n <= 0 || k <= 0)
        return ts__fail(TS_ERR_SHAPE, "N = %lld, K = %lld: both must be > 0 (as upstream)",
                        (long long)n, (long long)k);
    if (!d) return ts__fail(TS_ERR_NULL_POINTER, "d is NULL");
    TS__RETURN_IF_ERROR(ts_tensor_check(d, "d"));
    if (d->dtype != TS_F32)
        return ts__fail(TS_ERR_DTYPE, "d: dtype %s, expected f32", ts_dtype_name(d->dtype));
    const int64_t dshape[3] = {S, m, n};
    TS__RETURN_IF_ERROR(ts__gemm_check_grouped_out(d, "d", split ? 3 : 2, split ? dshape : dshape + 1));
    TS__RETURN_IF_ERROR(ts_tensor_check(sqr_sum, "sqr_sum"));
    if (sqr_sum->dtype != TS_F32)
        return ts__fail(TS_ERR_DTYPE, "sqr_sum: dtype %s, expected f32",
                        ts_dtype_name(sqr_sum->dtype));
    const int64_t sshape[2] = {S, m};
    TS__RETURN_IF_ERROR(ts_tensor_check_shape(sqr_sum, "sqr_sum", split ? 2 : 1,
                                              split ? sshape : sshape + 1));
    if (!ts_tensor_is_contiguous(sqr_sum))
        return ts__fail(TS_ERR_STRIDE, "sqr_sum: must be contiguous (as upstream)");
    const ts_tensor *ins[2] = {a, b};
    const char *names[2] = {"a", "b"};
    TS__RETURN_IF_ERROR(ts__gemm_check_no_overlap(d, ins, names, 2));
    TS__RETURN_IF_ERROR(ts__gemm_check_no_overlap(sqr_sum, ins, names, 2));
    if (ts__gemm_views_overlap(d, sqr_sum))
        return ts__fail(TS_ERR_ALIASING, "d overlaps sqr_sum");
    if (m == 0) return TS_OK;

    /* Workspace: B as bf16 [2N, K] (hi rows, lo rows), per split P [M, 2N] f32, problems. */
    const int64_t n2 = 2 * n;
    int64_t pelems, belems;
    if (ts_mul_overflow_i64(S * m, n2, &pelems) != TS_OK || ts_mul_overflow_i64(n2, k, &belems) != TS_OK ||
        pelems > INT64_MAX / 8 || belems > INT64_MAX / 8)
        return ts__fail(TS_ERR_OVERFLOW, "tf32_hc_prenorm_gemm: workspace size overflows");
    const size_t bytes = (size_t)belems * 2 + 64 + (size_t)pelems * 4 + 64 +
                         (size_t)S * sizeof(ts__gemm_problem);
    char *ws = (char *)ts__aligned_alloc(bytes);
    if (!ws) return ts__fail(TS_ERR_OUT_OF_MEMORY, "tf32_hc_prenorm_gemm: %zu bytes", bytes);
    uint16_t *b2 = (uint16_t *)ws;
    float *pd = (float *)(ws + ts__align(belems * 2, 64));
    ts__gemm_problem *probs =
        (ts__gemm_problem *)((char *)pd + ts__align(pelems * 4, 64));
    const float *bp = (const float *)b->data;
    for (int64_t j = 0; j < n; j++)
        for (int64_t kk = 0; kk < k; kk++)
            tf32_split(bp[j * b->strides[0] + kk], &b2[j * k + kk], &b2[(n + j) * k + kk]);
    ts_tensor bt = ts_tensor_2d(b2, TS_BF16, n2, k);
    ts__gemm_operand ob;
    ts_status st = ts__gemm_make_operand(&bt, "b", true, false, &ob);
    const int64_t nkb = ts__ceil_div(k, HC_BLOCK_K);
    for (int64_t s = 0; s < S && st == TS_OK; s++) {
        int64_t k0, k1;
        split_range(nkb, S, k, s, &k0, &k1);
        ts__gemm_problem *p = &probs[s];
        memset(p, 0, sizeof *p);
        p->a = oa;
        p->a.data = (const uint16_t *)oa.data + k0 * oa.s_k;
        p->a.k = k1 - k0;
        p->b = ob;
        p->b.data = b2 + k0;
        p->b.k = k1 - k0;
        p->m = m;
        p->n = n2;
        p->k = k1 - k0;
        p->d = pd + s * m * n2;
        p->ld_d = n2;
    }
    if (st == TS_OK) st = ts__gemm_run_batch(probs, S, n2, TS_F32, false, 0);
    if (st == TS_OK) {
        float *dd = (float *)d->data;
        const int64_t ds = split ? d->strides[0] : 0, dr = d->strides[split ? 1 : 0];
        for (int64_t s = 0; s < S; s++)
            for (int64_t row = 0; row < m; row++) {
                const float *src = pd + (s * m + row) * n2;
                float *dst = dd + s * ds + row * dr;
                for (int64_t j = 0; j < n; j++) dst[j] = src[j] + src[n + j];
            }
        sqr_ctx c = {(const uint16_t *)oa.data, oa.s_mn, m, S, nkb, k, (float *)sqr_sum->data};
        ts__parallel_for(S * m, 64, sqr_task, &c);
    }
    ts__aligned_free(ws);
    return st;
}
