/* Dense GEMM driver: validation, the four layout variants as views of one NT problem, BLIS
 * blocking and threading, the epilogue.
 *
 * Loops per work item (an mb x nb block of D, items spread over threads; mb <= the A block
 * rows the L2 holds):
 *   for k0 (KC, a multiple of the scale block; the kernel table may ask for its own): pack A
 *   mb x KC (L2); for jr (NR, in fours or pairs where the ISA has multi-tile kernels): pack
 *   those B micro-panels KC x NR (L1); for ir (MR): micro-kernel into the item's f32
 *   accumulator.
 * Each B micro-panel is decoded right before its row sweep, so it goes to L1 and never
 * round-trips through L3 as f32 (measured at [512, 4096, 4096] FP8 on Ice Lake: packing the
 * item's whole KC x nb B panel first, 2 MiB, and re-reading it from L3 per A block: 67 % of
 * the zmm peak against 74 % this way).
 * Block-scaled calls on the avx512 path of a CPU with AVX512_BF16 pack both micro-panels as
 * bf16 K pairs for the vdpbf16ps kernels instead (same loops, KC 256, 2 bytes a value; the
 * same bits: gemm_kernels.h, docs/gemm.md).
 * K is never split across items, and every element's arithmetic is the canonical order
 * whatever the blocking, so tile sizes may follow the thread count and cache sizes freely. */
#include "gemm/gemm_internal.h"
#include "gemm/gemm_kernels.h"
#include "numerics/cvt_kernels.h"
#include "tilestack/gemm.h"
#include "tilestack/numerics.h"

#include <stdatomic.h>
#include <string.h>

enum {
    MR = TS__GEMM_MR,
    NR = TS__GEMM_NR,
    KC = 256,     /* B micro-panel pair KC x 2 NR x 4 B = 32 KiB in L1d; multiple of 32 and 128;
                     also the panels' capacity (a table's own KC is at most this) */
    MC_MIN = 144, /* A block rows when the L2 size is unknown (144 KiB) */
    MC_MAX = 1152,
    NB_MAX = 2048 /* acc MC x NB_MAX x 4 B streams once per KC step (prefetched per tile) */
};
#define NKB_MAX (KC / 32)

/* ---------------------------------------------------------------- validation */

typedef struct byte_range { uintptr_t lo, hi; } byte_range;

static byte_range tensor_range(const ts_tensor *t) {
    byte_range r = {0, 0};
    if (!t || !t->data) return r;
    int64_t lo = 0, hi = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 0) return r;
        int64_t ext = (t->shape[i] - 1) * t->strides[i];
        if (ext < 0) lo += ext; else hi += ext;
    }
    size_t es = ts_dtype_size(t->dtype);
    r.lo = (uintptr_t)t->data + (uintptr_t)(lo * (int64_t)es);
    r.hi = (uintptr_t)t->data + (uintptr_t)((hi + 1) * (int64_t)es);
    return r;
}

static bool ranges_overlap(byte_range a, byte_range b) {
    return a.lo < a.hi && b.lo < b.hi && a.lo < b.hi && b.lo < a.hi;
}

bool ts__gemm_views_overlap(const ts_tensor *x, const ts_tensor *y) {
    return ranges_overlap(tensor_range(x), tensor_range(y));
}

/* prefer_mn: the variant built this view by transposing a row-major argument, so a view
 * that is both K- and MN-contiguous (a size-1 dim) is read as MN-major, as the caller meant. */
ts_status ts__gemm_make_operand(const ts_tensor *x, const char *name, bool bf16, bool prefer_mn,
                               ts__gemm_operand *op) {
    TS__RETURN_IF_ERROR(ts_tensor_check(x, name));
    if (x->ndim != 2)
        return ts__fail(TS_ERR_SHAPE, "%s: expected 2 dims, got %d", name, (int)x->ndim);
    if (bf16 ? x->dtype != TS_BF16 : (x->dtype != TS_E4M3 && x->dtype != TS_E2M1X2))
        return ts__fail(TS_ERR_DTYPE, "%s: dtype %s, expected %s", name, ts_dtype_name(x->dtype),
                        bf16 ? "bf16" : "e4m3 or e2m1x2 (packed fp4)");
    bool kmaj = x->shape[1] <= 1 || x->strides[1] == 1;
    bool mnmaj = x->shape[0] <= 1 || x->strides[0] == 1;
    if (!kmaj && !mnmaj)
        return ts__fail(TS_ERR_STRIDE,
                        "%s: neither K-major nor MN-major (strides %lld, %lld; one must be 1)", name,
                        (long long)x->strides[0], (long long)x->strides[1]);
    memset(op, 0, sizeof *op);
    op->data = x->data;
    op->dtype = x->dtype;
    op->k_major = kmaj && !(mnmaj && prefer_mn);
    op->s_mn = x->strides[0];
    op->s_k = x->strides[1];
    op->mn = x->shape[0];
    op->k = x->shape[1];
    if (x->dtype == TS_E2M1X2) {
        if (op->k_major) op->k *= 2; else op->mn *= 2;
    }
    return TS_OK;
}

ts_status ts__gemm_attach_scales(ts__gemm_operand *op, const ts_tensor *sf, const char *name,
                                 int64_t gran_mn, int64_t gran_k) {
    TS__RETURN_IF_ERROR(ts_tensor_check(sf, name));
    if (sf->ndim != 2)
        return ts__fail(TS_ERR_SHAPE, "%s: expected 2 dims, got %d", name, (int)sf->ndim);
    bool packed = sf->dtype == TS_I32 || sf->dtype == TS_UE8M0X4;
    if (!packed && sf->dtype != TS_F32)
        return ts__fail(TS_ERR_DTYPE, "%s: dtype %s, expected f32 or packed ue8m0 (i32)", name,
                        ts_dtype_name(sf->dtype));
    if (packed && gran_mn != 1)
        return ts__fail(TS_ERR_INVALID_ARGUMENT,
                        "%s: packed ue8m0 scales need gran_mn 1 (recipe gives %lld), as upstream",
                        name, (long long)gran_mn);
    int64_t want0 = ts__ceil_div(op->mn, gran_mn);
    int64_t want1 = ts__ceil_div(op->k, gran_k);
    if (packed) want1 = ts__ceil_div(want1, 4);
    if (sf->shape[0] != want0 || sf->shape[1] != want1)
        return ts__fail(TS_ERR_SHAPE,
                        "%s: shape [%lld, %lld], expected [%lld, %lld] (MN %lld, K %lld, "
                        "gran (%lld, %lld)%s)",
                        name, (long long)sf->shape[0], (long long)sf->shape[1], (long long)want0,
                        (long long)want1, (long long)op->mn, (long long)op->k, (long long)gran_mn,
                        (long long)gran_k, packed ? ", 4 ue8m0 per int32" : "");
    op->sf = sf->data;
    op->sf_packed = packed;
    op->sf_s_mn = sf->strides[0];
    op->sf_s_k = sf->strides[1];
    op->gran_mn = gran_mn;
    op->gran_k = gran_k;
    return TS_OK;
}

/* Upstream casts f32 scales to ue8m0 by keeping only the exponent and asserts that the sign
 * and mantissa are zero: exact powers of two. */
bool ts__gemm_needs_ue8m0_cast(const ts__gemm_operand *a, const ts__gemm_operand *b) {
    return a->dtype == TS_E2M1X2 || b->dtype == TS_E2M1X2 || a->gran_k == 32 || b->gran_k == 32;
}

ts_status ts__gemm_check_pow2_scales(const ts_tensor *sf, const char *name) {
    const float *p = (const float *)sf->data;
    for (int64_t i = 0; i < sf->shape[0]; i++)
        for (int64_t j = 0; j < sf->shape[1]; j++) {
            float v = p[i * sf->strides[0] + j * sf->strides[1]];
            if (ts_f32_to_ue8m0(v) == 255)
                return ts__fail(TS_ERR_INVALID_ARGUMENT,
                                "%s[%lld, %lld] = %g is not a positive power of two, which the "
                                "ue8m0 cast needs (fp4 operand or gran_k 32; pass "
                                "disable_ue8m0_cast to use f32 scales as given)",
                                name, (long long)i, (long long)j, (double)v);
        }
    return TS_OK;
}

static ts_status check_output(const ts_tensor *d, const ts_tensor *c, int64_t m, int64_t n,
                              const ts_tensor *const *inputs, const char *const *names, int nin) {
    TS__RETURN_IF_ERROR(ts_tensor_check(d, "d"));
    if (d->ndim != 2) return ts__fail(TS_ERR_SHAPE, "d: expected 2 dims, got %d", (int)d->ndim);
    if (d->dtype != TS_BF16 && d->dtype != TS_F32)
        return ts__fail(TS_ERR_DTYPE, "d: dtype %s, expected bf16 or f32", ts_dtype_name(d->dtype));
    if (d->shape[0] != m || d->shape[1] != n)
        return ts__fail(TS_ERR_SHAPE, "d: shape [%lld, %lld], expected [M, N] = [%lld, %lld]",
                        (long long)d->shape[0], (long long)d->shape[1], (long long)m, (long long)n);
    if (!ts_tensor_is_k_major(d))
        return ts__fail(TS_ERR_STRIDE, "d: last dim must be contiguous (stride %lld)",
                        (long long)d->strides[1]);
    byte_range dr = tensor_range(d);
    for (int i = 0; i < nin; i++)
        if (inputs[i] && ranges_overlap(dr, tensor_range(inputs[i])))
            return ts__fail(TS_ERR_ALIASING, "d overlaps input %s", names[i]);
    if (c) {
        TS__RETURN_IF_ERROR(ts_tensor_check(c, "c"));
        if (c->ndim != 2) return ts__fail(TS_ERR_SHAPE, "c: expected 2 dims, got %d", (int)c->ndim);
        if (c->dtype != d->dtype)
            return ts__fail(TS_ERR_DTYPE, "c: dtype %s differs from d's %s", ts_dtype_name(c->dtype),
                            ts_dtype_name(d->dtype));
        if (c->shape[0] != m || c->shape[1] != n)
            return ts__fail(TS_ERR_SHAPE, "c: shape [%lld, %lld], expected [M, N] = [%lld, %lld]",
                            (long long)c->shape[0], (long long)c->shape[1], (long long)m,
                            (long long)n);
        if (!ts_tensor_is_k_major(c))
            return ts__fail(TS_ERR_STRIDE, "c: last dim must be contiguous (stride %lld)",
                            (long long)c->strides[1]);
        bool same = c->data == d->data && c->strides[0] == d->strides[0] &&
                    c->strides[1] == d->strides[1];
        if (!same && ranges_overlap(dr, tensor_range(c)))
            return ts__fail(TS_ERR_ALIASING,
                            "c overlaps d without being the same view (same data and strides)");
    }
    return TS_OK;
}

/* ---------------------------------------------------------------- execution */

typedef struct gemm_job {
    const ts__gemm_kernels *kern;
    /* vdpbf16ps kernels (block-scaled calls where they run): A and B micro-panels as bf16
     * pairs instead of f32, 1 x 4 / 1 x 2 / 1 x 1 tiles; NULL: the f32 kernels */
    const ts__gemm_dp_kernels *dp;
    ts__gemm_problem *probs;
    int64_t nprob;
    ts_dtype d_dtype;
    bool scaled;
    int64_t g; /* canonical K block (scaled) */
    int64_t n; /* shared by every problem */
    int64_t mb, nb, n_nblk;
    int64_t kstep; /* K values per packing step: the kernels' KC */
    size_t acc_floats, bpack_floats, sb_floats, apack_floats, sa_floats, tmp_floats;
    atomic_bool oom;
} gemm_job;

static size_t align_floats(size_t n) { return (n + 15) & ~(size_t)15; }

/* The problem holding global item `item` (problems are in item order). */
static const ts__gemm_problem *find_problem(const gemm_job *j, int64_t item) {
    int64_t lo = 0, hi = j->nprob - 1;
    while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2;
        if (j->probs[mid].item0 <= item) lo = mid; else hi = mid - 1;
    }
    return &j->probs[lo];
}

/* K == 0 as upstream's early_return: D = C bit for bit, or zeros. */
static void copy_item(const gemm_job *j, const ts__gemm_problem *p, int64_t m0, int64_t rows,
                      int64_t n0, int64_t cols) {
    const size_t es = ts_dtype_size(j->d_dtype);
    for (int64_t i = 0; i < rows; i++) {
        char *dp = (char *)p->d + ((m0 + i) * p->ld_d + n0) * (int64_t)es;
        if (p->c)
            memmove(dp, (const char *)p->c + ((m0 + i) * p->ld_c + n0) * (int64_t)es,
                    (size_t)cols * es);
        else
            memset(dp, 0, (size_t)cols * es);
    }
}

/* One micro-panel into dst: f32, or bf16 pairs for the vdpbf16ps kernels (through tmp where
 * no direct packer applies); either way dst has room for kc * w floats. */
static void pack_panel(const gemm_job *j, const ts__gemm_operand *op, int64_t r0, int64_t rows,
                       int64_t k0, int64_t kc, int w, float *tmp, float *dst) {
    if (j->dp) ts__gemm_pack_panel_pairs(op, r0, rows, k0, kc, w, tmp, (uint32_t *)(void *)dst);
    else ts__gemm_pack_panel(op, r0, rows, k0, kc, w, dst);
}

static void run_item(const gemm_job *j, int64_t item, float *acc, float *bpack, float *sbp,
                     float *apack, float *sap, float *tmp) {
    const ts__gemm_problem *p = find_problem(j, item);
    item -= p->item0;
    const int64_t m0 = (item / j->n_nblk) * j->mb, n0 = (item % j->n_nblk) * j->nb;
    const int64_t rows = ts__min64(j->mb, p->m - m0), cols = ts__min64(j->nb, j->n - n0);
    if (p->k == 0) {
        copy_item(j, p, m0, rows, n0, cols);
        return;
    }
    const int64_t n_mt = ts__ceil_div(rows, MR), n_nt = ts__ceil_div(cols, NR);
    memset(acc, 0, (size_t)(n_mt * n_nt) * MR * NR * sizeof(float));
    const int64_t KS = j->kstep; /* K step, also the panels' length */
    for (int64_t k0 = 0; k0 < p->k; k0 += KS) {
        const int64_t kc = ts__min64(KS, p->k - k0);
        const int64_t nkb = j->scaled ? ts__ceil_div(kc, j->g) : 0, kb0 = j->scaled ? k0 / j->g : 0;
        for (int64_t it = 0; it < n_mt; it++) {
            int64_t r0 = it * MR;
            pack_panel(j, &p->a, m0 + r0, ts__min64(MR, rows - r0), k0, kc, MR, tmp,
                       apack + it * KS * MR);
            if (j->scaled)
                ts__gemm_pack_scales(&p->a, m0 + r0, ts__min64(MR, rows - r0), kb0, nkb, j->g, MR,
                                     sap + it * NKB_MAX * MR);
        }
        /* Column tiles in fours, pairs (and 2 x 2) where the ISA has multi-tile kernels
         * (AVX-512: a zmm is a tile row), then one by one. */
        for (int64_t jt = 0, step; jt < n_nt; jt += step) {
            const bool four = (j->dp || j->kern->scaled4) && jt + 3 < n_nt;
            const bool two = !four && (j->dp || j->kern->scaled2) && jt + 1 < n_nt;
            step = four ? 4 : two ? 2 : 1;
            for (int64_t q = 0; q < step; q++) {
                const int64_t c0 = (jt + q) * NR;
                pack_panel(j, &p->b, n0 + c0, ts__min64(NR, cols - c0), k0, kc, NR, tmp,
                           bpack + q * KS * NR);
                if (j->scaled)
                    ts__gemm_pack_scales(&p->b, n0 + c0, ts__min64(NR, cols - c0), kb0, nkb, j->g,
                                         NR, sbp + q * NKB_MAX * NR);
            }
            const float *bp = bpack, *sb = sbp;
            const int64_t col_stride = n_mt * MR * NR; /* between column tiles of acc */
            float *acc_col = acc + jt * col_stride;
            for (int64_t it = 0, rstep; it < n_mt; it += rstep) {
                const bool rows2 = two && !j->dp && j->kern->scaled22 && it + 1 < n_mt;
                rstep = rows2 ? 2 : 1;
                float *t = acc_col + it * MR * NR, *t1 = t + col_stride;
                const float *a = apack + it * KS * MR, *sa = sap + it * NKB_MAX * MR;
                if (j->dp) {
                    const ts__gemm_dp_tiles tl = {
                        (const uint32_t *)(const void *)a, sa,
                        {(const uint32_t *)(const void *)bp,
                         (const uint32_t *)(const void *)(bp + KS * NR),
                         (const uint32_t *)(const void *)(bp + 2 * KS * NR),
                         (const uint32_t *)(const void *)(bp + 3 * KS * NR)},
                        {sb, sb + NKB_MAX * NR, sb + 2 * NKB_MAX * NR, sb + 3 * NKB_MAX * NR},
                        {t, t1, t1 + col_stride, t1 + 2 * col_stride}};
                    (four ? j->dp->tiles4 : two ? j->dp->tiles2 : j->dp->tiles1)(kc, j->g, &tl);
                } else if (four) {
                    const ts__gemm_tiles14 tl = {
                        a, sa, {bp, bp + KS * NR, bp + 2 * KS * NR, bp + 3 * KS * NR},
                        {sb, sb + NKB_MAX * NR, sb + 2 * NKB_MAX * NR, sb + 3 * NKB_MAX * NR},
                        {t, t1, t1 + col_stride, t1 + 2 * col_stride}};
                    if (j->scaled) j->kern->scaled4(kc, j->g, &tl);
                    else j->kern->plain4(kc, &tl);
                } else if (rows2) {
                    const ts__gemm_tiles22 tl = {
                        {a, a + KS * MR}, {sa, sa + NKB_MAX * MR}, {bp, bp + KS * NR},
                        {sb, sb + NKB_MAX * NR}, {{t, t1}, {t + MR * NR, t1 + MR * NR}}};
                    if (j->scaled) j->kern->scaled22(kc, j->g, &tl);
                    else j->kern->plain22(kc, &tl);
                } else if (j->scaled && two) {
                    j->kern->scaled2(kc, j->g, a, bp, bp + KS * NR, sa, sb, sb + NKB_MAX * NR, t, t1);
                } else if (j->scaled) {
                    j->kern->scaled(kc, j->g, a, bp, sa, sb, t);
                } else if (two) {
                    j->kern->plain2(kc, a, bp, bp + KS * NR, t, t1);
                } else {
                    j->kern->plain(kc, a, bp, t);
                }
            }
        }
    }
    /* Epilogue: D = C + acc (bf16: RNE of the f32 sum), or D = acc without C. */
    const bool f32 = j->d_dtype == TS_F32;
    const ts__cvt_fn to_bf16 = ts__cvt_kernel(TS__CVT_F32_BF16);
    for (int64_t jt = 0; jt < n_nt; jt++)
        for (int64_t it = 0; it < n_mt; it++) {
            const float *t = acc + (jt * n_mt + it) * MR * NR;
            int64_t ri = ts__min64(MR, rows - it * MR), cj = ts__min64(NR, cols - jt * NR);
            int64_t mrow = m0 + it * MR, ncol = n0 + jt * NR;
            for (int64_t i = 0; i < ri; i++) {
                const float *ti = t + i * NR;
                if (!p->c && !f32) { /* the common case: the converter's kernel (gcc keeps
                                        * an inlined 16-value loop scalar) */
                    to_bf16(ti, (uint16_t *)p->d + (mrow + i) * p->ld_d + ncol, cj);
                    continue;
                }
                float v[NR];
                if (p->c && f32) {
                    const float *cp = (const float *)p->c + (mrow + i) * p->ld_c + ncol;
                    for (int64_t q = 0; q < cj; q++) v[q] = cp[q] + ti[q];
                } else if (p->c) {
                    const uint16_t *cp = (const uint16_t *)p->c + (mrow + i) * p->ld_c + ncol;
                    for (int64_t q = 0; q < cj; q++) v[q] = ts__bf16_to_f32_inl(cp[q]) + ti[q];
                } else {
                    for (int64_t q = 0; q < cj; q++) v[q] = ti[q];
                }
                if (f32) {
                    float *dp = (float *)p->d + (mrow + i) * p->ld_d + ncol;
                    for (int64_t q = 0; q < cj; q++) dp[q] = v[q];
                } else {
                    uint16_t *dp = (uint16_t *)p->d + (mrow + i) * p->ld_d + ncol;
                    for (int64_t q = 0; q < cj; q++) dp[q] = ts__f32_to_bf16_inl(v[q]);
                }
            }
        }
}

static void gemm_task(void *ctx, int64_t begin, int64_t end, int tid) {
    gemm_job *j = (gemm_job *)ctx;
    size_t total = j->acc_floats + j->bpack_floats + j->sb_floats + j->apack_floats +
                   j->sa_floats + j->tmp_floats;
    float *s = (float *)ts__scratch(tid, total * sizeof(float));
    if (!s) { /* reserved before the parallel region; only a changed thread mapping gets here */
        atomic_store(&j->oom, true);
        return;
    }
    float *acc = s, *bpack = acc + j->acc_floats, *sbp = bpack + j->bpack_floats,
          *apack = sbp + j->sb_floats, *sap = apack + j->apack_floats, *tmp = sap + j->sa_floats;
    for (int64_t item = begin; item < end; item++)
        run_item(j, item, acc, bpack, sbp, apack, sap, tmp);
}

typedef struct reserve_job {
    size_t bytes;
    atomic_bool oom;
} reserve_job;

static void reserve_task(void *ctx, int64_t begin, int64_t end, int tid) {
    (void)begin, (void)end;
    reserve_job *r = (reserve_job *)ctx;
    if (!ts__scratch(tid, r->bytes)) atomic_store(&r->oom, true);
}

/* The same split as the work pass (same n, grain and thread count: a static partition, so
 * each chunk lands where it will run), touching each task's scratch first: a failed
 * allocation is reported before any output is written, and the work pass finds its arena
 * already large enough. */
ts_status ts__gemm_reserve_scratch(int64_t items, int64_t grain, size_t bytes) {
    reserve_job r;
    r.bytes = bytes;
    atomic_store(&r.oom, false);
    ts__parallel_for(items, grain, reserve_task, &r);
    if (atomic_load(&r.oom))
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "gemm: %zu bytes of per-thread scratch", bytes);
    return TS_OK;
}

/* Rows of the A block (mb x kstep f32) an item keeps in L2 while its B micro-panels sweep it:
 * ~45% of the L2 (the rest holds the streaming accumulator tiles and the next panels), in
 * whole 2 x MR row pairs. At kstep 256: Zen 3 (512 KiB) 228 rows, 2 MiB 912; Ice Lake
 * (1.25 MiB) at the avx512 table's kstep 128: 1128. */
static int64_t a_block_rows(int64_t kstep) {
    const int64_t l2 = ts_get_cpu_info()->l2_bytes;
    if (l2 <= 0) return MC_MIN;
    const int64_t rows = (l2 * 45 / 100) / (kstep * (int64_t)sizeof(float)) / (2 * MR) * (2 * MR);
    return ts__max64(MC_MIN, ts__min64(MC_MAX, rows));
}

/* Item count of the whole batch for an mb x nb blocking; fills each problem's item0. */
static int64_t count_items(ts__gemm_problem *probs, int64_t nprob, int64_t mb, int64_t ni) {
    int64_t items = 0;
    for (int64_t i = 0; i < nprob; i++) {
        probs[i].item0 = items;
        items += ts__ceil_div(probs[i].m, mb) * ni;
    }
    return items;
}

ts_status ts__gemm_run_batch(ts__gemm_problem *probs, int64_t nprob, int64_t n, ts_dtype d_dtype,
                             bool scaled, int64_t g) {
    int64_t m_max = 0;
    bool k_all = true, m_all = true;
    for (int64_t i = 0; i < nprob; i++) {
        m_max = ts__max64(m_max, probs[i].m);
        k_all = k_all && probs[i].k > 0;
        m_all = m_all && probs[i].m > 0;
    }
    if (nprob == 0 || m_max == 0 || n == 0) return TS_OK;
    /* Few rows: the GEMM is a stream over the weight (same bits, see gemm_decode.c). */
    if (m_max <= TS__GEMM_SMALL_M && k_all && m_all)
        return ts__gemm_run_decode(probs, nprob, n, d_dtype, scaled, g);
    /* A batch that mixes both (a prefill chunk's experts: most with a few rows, some with more
     * than TS__GEMM_SMALL_M) streams its small problems and blocks only the large ones, which
     * alone amortise the B packing: one 49-row expert must not send 63 others through it
     * (measured: the experts of a 256-row chunk 4.4x slower per token than of a 128-row
     * one). The problems are independent and each path gives the same bits, so the split
     * changes no result; the order of probs is not kept. (Out of memory in the blocked part, the
     * streamed part's outputs are already written.) */
    if (k_all && m_all) {
        int64_t small = 0;
        for (int64_t i = 0; i < nprob; i++)
            if (probs[i].m <= TS__GEMM_SMALL_M) {
                const ts__gemm_problem t = probs[small];
                probs[small++] = probs[i];
                probs[i] = t;
            }
        if (small) {
            TS__RETURN_IF_ERROR(ts__gemm_run_decode(probs, small, n, d_dtype, scaled, g));
            probs += small;
            nprob -= small;
        }
    }
    gemm_job job, *j = &job;
    memset(j, 0, sizeof *j);
    j->kern = ts__gemm_select_kernels();
    j->dp = scaled ? ts__gemm_select_dp_kernels() : NULL;
    j->probs = probs;
    j->nprob = nprob;
    j->d_dtype = d_dtype;
    j->scaled = scaled;
    j->g = g;
    j->n = n;
    /* Blocking follows the thread count (the bits do not depend on it): shrink the item until
     * there are at least as many items as threads. */
    const int64_t T = ts_get_num_threads();
    /* Equal blocks (the L2's A block rows and NB_MAX are caps): a 2048-row problem on a
     * 564-row L2 is four 512-row blocks, not 3 x 564 + 356, so a static split over the
     * threads does not leave one idle. */
    const int64_t kstep = j->dp ? j->dp->kc : j->kern->kc ? j->kern->kc : KC;
    const int64_t mc = a_block_rows(j->dp ? kstep / 2 : kstep); /* bf16 pairs: 2 B a value */
    int64_t mb = ts__align(ts__ceil_div(m_max, ts__ceil_div(m_max, mc)), MR);
    int64_t nb = ts__align(ts__ceil_div(n, ts__ceil_div(n, NB_MAX)), NR);
    int64_t ni = ts__ceil_div(n, nb);
    int64_t mi = count_items(probs, nprob, mb, 1);
    if (mi * ni < T) {
        int64_t want_n = ts__ceil_div(T, mi);
        nb = ts__max64(NR, ts__align(ts__ceil_div(n, want_n), NR));
        ni = ts__ceil_div(n, nb);
        if (mi * ni < T) {
            int64_t want_m = ts__ceil_div(T, ni);
            mb = ts__max64(MR, ts__align(ts__ceil_div(m_max, want_m), MR));
        }
    }
    const int64_t items = count_items(probs, nprob, mb, ni);
    j->mb = mb;
    j->nb = nb;
    j->kstep = kstep;
    j->n_nblk = ni;
    j->acc_floats = align_floats((size_t)(ts__align(mb, MR) * ts__align(nb, NR)));
    j->bpack_floats = align_floats((size_t)(KC * 4 * NR));
    j->sb_floats = align_floats((size_t)(NKB_MAX * 4 * NR));
    j->apack_floats = align_floats((size_t)(KC * ts__align(mb, MR)));
    j->sa_floats = align_floats((size_t)(NKB_MAX * ts__align(mb, MR)));
    j->tmp_floats = j->dp ? align_floats((size_t)(KC * NR)) : 0;
    TS__RETURN_IF_ERROR(ts__gemm_reserve_scratch(
        items, 1,
        (j->acc_floats + j->bpack_floats + j->sb_floats + j->apack_floats + j->sa_floats +
         j->tmp_floats) *
            sizeof(float)));
    atomic_store(&j->oom, false);
    ts__parallel_for(items, 1, gemm_task, j);
    if (atomic_load(&j->oom))
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "gemm: scratch allocation failed");
    return TS_OK;
}

/* A validated dense problem as a batch of one. */
static ts_status run_dense(const ts__gemm_operand *a, const ts__gemm_operand *b, ts_tensor *d,
                           const ts_tensor *c, bool scaled, int64_t g) {
    ts__gemm_problem p;
    memset(&p, 0, sizeof p);
    p.a = *a;
    p.b = *b;
    p.m = a->mn;
    p.n = b->mn;
    p.k = a->k;
    p.d = d->data;
    p.ld_d = d->strides[0];
    p.c = c ? c->data : NULL;
    p.ld_c = c ? c->strides[0] : 0;
    return ts__gemm_run_batch(&p, 1, p.n, d->dtype, scaled, g);
}

/* ---------------------------------------------------------------- entry points */

static ts_status fp8_fp4_gemm(const ts_tensor *a, const ts_tensor *sfa, const ts_tensor *b,
                              const ts_tensor *sfb, ts_tensor *d, const ts_tensor *c,
                              const int64_t *recipe, const int64_t *recipe_a,
                              const int64_t *recipe_b, bool disable_ue8m0_cast, bool a_mn,
                              bool b_mn) {
    ts__gemm_operand oa, ob;
    TS__RETURN_IF_ERROR(ts__gemm_make_operand(a, "a", false, a_mn, &oa));
    TS__RETURN_IF_ERROR(ts__gemm_make_operand(b, "b", false, b_mn, &ob));
    if (oa.k != ob.k)
        return ts__fail(TS_ERR_SHAPE, "b: K = %lld does not match a's K = %lld", (long long)ob.k,
                        (long long)oa.k);
    if (!sfa) return ts__fail(TS_ERR_NULL_POINTER, "sfa is NULL");
    if (!sfb) return ts__fail(TS_ERR_NULL_POINTER, "sfb is NULL");
    ts_gemm_recipe r;
    TS__RETURN_IF_ERROR(ts_gemm_resolve_recipe(recipe, recipe_a, recipe_b, sfb->dtype, &r));
    TS__RETURN_IF_ERROR(ts__gemm_attach_scales(&oa, sfa, "sfa", r.gran_mn_a, r.gran_k_a));
    TS__RETURN_IF_ERROR(ts__gemm_attach_scales(&ob, sfb, "sfb", r.gran_mn_b, r.gran_k_b));
    const ts_tensor *ins[4] = {a, b, sfa, sfb};
    const char *names[4] = {"a", "b", "sfa", "sfb"};
    TS__RETURN_IF_ERROR(check_output(d, c, oa.mn, ob.mn, ins, names, 4));
    if (ts__gemm_needs_ue8m0_cast(&oa, &ob) && !disable_ue8m0_cast) {
        if (!oa.sf_packed) TS__RETURN_IF_ERROR(ts__gemm_check_pow2_scales(sfa, "sfa"));
        if (!ob.sf_packed) TS__RETURN_IF_ERROR(ts__gemm_check_pow2_scales(sfb, "sfb"));
    }
    return run_dense(&oa, &ob, d, c, true, ts__min64(r.gran_k_a, r.gran_k_b));
}

static ts_status bf16_gemm(const ts_tensor *a, const ts_tensor *b, ts_tensor *d,
                           const ts_tensor *c, bool a_mn, bool b_mn) {
    ts__gemm_operand oa, ob;
    TS__RETURN_IF_ERROR(ts__gemm_make_operand(a, "a", true, a_mn, &oa));
    TS__RETURN_IF_ERROR(ts__gemm_make_operand(b, "b", true, b_mn, &ob));
    if (oa.k != ob.k)
        return ts__fail(TS_ERR_SHAPE, "b: K = %lld does not match a's K = %lld", (long long)ob.k,
                        (long long)oa.k);
    const ts_tensor *ins[2] = {a, b};
    const char *names[2] = {"a", "b"};
    TS__RETURN_IF_ERROR(check_output(d, c, oa.mn, ob.mn, ins, names, 2));
    return run_dense(&oa, &ob, d, c, false, 0);
}

/* The transposed view of a 2-D argument (NULL and malformed views pass through for the
 * validation to report). */
static const ts_tensor *transposed(const ts_tensor *x, ts_tensor *tmp) {
    if (!x || x->ndim != 2) return x;
    *tmp = *x;
    tmp->shape[0] = x->shape[1];
    tmp->shape[1] = x->shape[0];
    tmp->strides[0] = x->strides[1];
    tmp->strides[1] = x->strides[0];
    return tmp;
}

#define TS__FP8_ARGS                                                                         \
    const ts_tensor *a, const ts_tensor *sfa, const ts_tensor *b, const ts_tensor *sfb,      \
        ts_tensor *d, const ts_tensor *c, const int64_t *recipe, const int64_t *recipe_a,    \
        const int64_t *recipe_b, const char *compiled_dims, bool disable_ue8m0_cast

/* ta / tb: whether the variant transposes a (with sfa) / b (with sfb) into the NT view. */
static ts_status fp8_variant(TS__FP8_ARGS, bool ta, bool tb) {
    (void)compiled_dims;
    ts_tensor at, sat, bt, sbt;
    const ts_tensor *av = ta ? transposed(a, &at) : a, *sav = ta ? transposed(sfa, &sat) : sfa;
    const ts_tensor *bv = tb ? transposed(b, &bt) : b, *sbv = tb ? transposed(sfb, &sbt) : sfb;
    return fp8_fp4_gemm(av, sav, bv, sbv, d, c, recipe, recipe_a, recipe_b, disable_ue8m0_cast,
                        ta, tb);
}

#define TS__FP8_PASS a, sfa, b, sfb, d, c, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast

ts_status ts_fp8_fp4_gemm_nt(TS__FP8_ARGS) { return fp8_variant(TS__FP8_PASS, false, false); }
ts_status ts_fp8_fp4_gemm_nn(TS__FP8_ARGS) { return fp8_variant(TS__FP8_PASS, false, true); }
ts_status ts_fp8_fp4_gemm_tn(TS__FP8_ARGS) { return fp8_variant(TS__FP8_PASS, true, true); }
ts_status ts_fp8_fp4_gemm_tt(TS__FP8_ARGS) { return fp8_variant(TS__FP8_PASS, true, false); }
ts_status ts_fp8_gemm_nt(TS__FP8_ARGS) { return fp8_variant(TS__FP8_PASS, false, false); }
ts_status ts_fp8_gemm_nn(TS__FP8_ARGS) { return fp8_variant(TS__FP8_PASS, false, true); }
ts_status ts_fp8_gemm_tn(TS__FP8_ARGS) { return fp8_variant(TS__FP8_PASS, true, true); }
ts_status ts_fp8_gemm_tt(TS__FP8_ARGS) { return fp8_variant(TS__FP8_PASS, true, false); }

static ts_status bf16_variant(const ts_tensor *a, const ts_tensor *b, ts_tensor *d,
                              const ts_tensor *c, bool ta, bool tb) {
    ts_tensor at, bt;
    return bf16_gemm(ta ? transposed(a, &at) : a, tb ? transposed(b, &bt) : b, d, c, ta, tb);
}

ts_status ts_bf16_gemm_nt(const ts_tensor *a, const ts_tensor *b, ts_tensor *d,
                          const ts_tensor *c, const char *compiled_dims) {
    (void)compiled_dims;
    return bf16_variant(a, b, d, c, false, false);
}
ts_status ts_bf16_gemm_nn(const ts_tensor *a, const ts_tensor *b, ts_tensor *d,
                          const ts_tensor *c, const char *compiled_dims) {
    (void)compiled_dims;
    return bf16_variant(a, b, d, c, false, true);
}
ts_status ts_bf16_gemm_tn(const ts_tensor *a, const ts_tensor *b, ts_tensor *d,
                          const ts_tensor *c, const char *compiled_dims) {
    (void)compiled_dims;
    return bf16_variant(a, b, d, c, true, true);
}
ts_status ts_bf16_gemm_tt(const ts_tensor *a, const ts_tensor *b, ts_tensor *d,
                          const ts_tensor *c, const char *compiled_dims) {
    (void)compiled_dims;
    return bf16_variant(a, b, d, c, true, false);
}

/* ---------------------------------------------------------------- packed weights */

ts_status ts_fp8_fp4_gemm_nt_packed(const ts_tensor *a, const ts_tensor *sfa,
                                    const ts_packed_weight *b, ts_tensor *d, const ts_tensor *c,
                                    const int64_t *recipe, const int64_t *recipe_a,
                                    const int64_t *recipe_b, const char *compiled_dims,
                                    bool disable_ue8m0_cast) {
    (void)compiled_dims;
    ts__gemm_operand oa;
    TS__RETURN_IF_ERROR(ts__gemm_make_operand(a, "a", false, false, &oa));
    TS__RETURN_IF_ERROR(ts__gemm_check_packed(b, "b"));
    if (b->grouped)
        return ts__fail(TS_ERR_SHAPE, "b: packed from a grouped [G, N, K] weight; the dense "
                                      "GEMM takes one packed from [N, K]");
    if (!b->scaled)
        return ts__fail(TS_ERR_DTYPE, "b: packed bf16 weight; use ts_bf16_gemm_nt_packed");
    ts__gemm_operand ob = ts__gemm_packed_operand(b, 0);
    if (oa.k != ob.k)
        return ts__fail(TS_ERR_SHAPE, "b: K = %lld does not match a's K = %lld", (long long)ob.k,
                        (long long)oa.k);
    if (!sfa) return ts__fail(TS_ERR_NULL_POINTER, "sfa is NULL");
    ts_gemm_recipe r;
    TS__RETURN_IF_ERROR(ts__gemm_packed_recipe(b, recipe, recipe_a, recipe_b, &r));
    TS__RETURN_IF_ERROR(ts__gemm_attach_scales(&oa, sfa, "sfa", r.gran_mn_a, r.gran_k_a));
    const ts_tensor *ins[2] = {a, sfa};
    const char *names[2] = {"a", "sfa"};
    TS__RETURN_IF_ERROR(check_output(d, c, oa.mn, ob.mn, ins, names, 2));
    if (ts__gemm_needs_ue8m0_cast(&oa, &ob) && !disable_ue8m0_cast) {
        if (!oa.sf_packed) TS__RETURN_IF_ERROR(ts__gemm_check_pow2_scales(sfa, "sfa"));
        if (!ob.sf_packed && !b->sf_pow2)
            return ts__fail(TS_ERR_INVALID_ARGUMENT,
                            "b: the packed weight's f32 scales are not all positive powers of "
                            "two, which the ue8m0 cast needs (fp4 operand or gran_k 32; pass "
                            "disable_ue8m0_cast to use f32 scales as given)");
    }
    return run_dense(&oa, &ob, d, c, true, ts__min64(r.gran_k_a, r.gran_k_b));
}

ts_status ts_bf16_gemm_nt_packed(const ts_tensor *a, const ts_packed_weight *b, ts_tensor *d,
                                 const ts_tensor *c, const char *compiled_dims) {
    (void)compiled_dims;
    ts__gemm_operand oa;
    TS__RETURN_IF_ERROR(ts__gemm_make_operand(a, "a", true, false, &oa));
    TS__RETURN_IF_ERROR(ts__gemm_check_packed(b, "b"));
    if (b->grouped)
        return ts__fail(TS_ERR_SHAPE, "b: packed from a grouped [G, N, K] weight; the dense "
                                      "GEMM takes one packed from [N, K]");
    if (b->scaled)
        return ts__fail(TS_ERR_DTYPE, "b: packed %s weight; use ts_fp8_fp4_gemm_nt_packed",
                        ts_dtype_name(b->dtype));
    ts__gemm_operand ob = ts__gemm_packed_operand(b, 0);
    if (oa.k != ob.k)
        return ts__fail(TS_ERR_SHAPE, "b: K = %lld does not match a's K = %lld", (long long)ob.k,
                        (long long)oa.k);
    const ts_tensor *ins[1] = {a};
    const char *names[1] = {"a"};
    TS__RETURN_IF_ERROR(check_output(d, c, oa.mn, ob.mn, ins, names, 1));
    return run_dense(&oa, &ob, d, c, false, 0);
}
