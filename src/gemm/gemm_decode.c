/* Decode (small-M) driver: every problem has at most TS__GEMM_SMALL_M rows, so the GEMM is
 * a stream over the weight. Work items are (problem, 32-column panel) pairs, split over the
 * threads along N only (K is never split). Per panel: the f32 accumulator [m][32] stays in
 * L1 while the weight streams once: a pre-packed weight straight from its packed rows (each
 * block's values then its scales, front to back, one kernel call per panel), a plain one
 * through 256-value K-major chunks converted to f32 rows (e4m3 on AVX2: byte-transposed into
 * packed rows instead). Each thread converts A (and its scales) to f32 once per problem it
 * meets. The
 * arithmetic is the canonical order, so the bits equal the big-M path's. */
#include "gemm/gemm_internal.h"
#include "gemm/gemm_kernels.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

enum { W = TS__GEMM_DW, KCD = 256 /* plain-weight chunk: 32 KiB of f32 rows (512 measured slower) */ };

typedef struct dec_job {
    const ts__gemm_kernels *kern;
    ts__gemm_problem *probs;
    int64_t nprob, n, npanel, g, k_max;
    int64_t total_cost, nparts; /* cost-balanced split (item_at) */
    ts_dtype d_dtype;
    bool scaled;
    size_t af_floats, sa_floats, acc_floats, bbuf_floats, sb_floats;
    atomic_bool oom;
} dec_job;

static size_t align_floats(size_t n) { return (n + 15) & ~(size_t)15; }

static void store_panel(const dec_job *j, const ts__gemm_problem *p, const float *acc,
                        int64_t n0, int64_t cols) {
    const bool f32 = j->d_dtype == TS_F32;
    for (int64_t i = 0; i < p->m; i++) {
        const float *ai = acc + i * W;
        if (!p->c && !f32 && cols == W) {
            /* branch-free: a panel of 48 rows stores 1536 values per K = 2048 pass */
            ts__gemm_store_bf16_row((uint16_t *)p->d + i * p->ld_d + n0, ai, W);
            continue;
        }
        float v[W];
        if (p->c && f32) {
            const float *cp = (const float *)p->c + i * p->ld_c + n0;
            for (int64_t q = 0; q < cols; q++) v[q] = cp[q] + ai[q];
        } else if (p->c) {
            const uint16_t *cp = (const uint16_t *)p->c + i * p->ld_c + n0;
            for (int64_t q = 0; q < cols; q++) v[q] = ts__bf16_to_f32_inl(cp[q]) + ai[q];
        } else {
            for (int64_t q = 0; q < cols; q++) v[q] = ai[q];
        }
        if (f32) {
            float *dp = (float *)p->d + i * p->ld_d + n0;
            for (int64_t q = 0; q < cols; q++) dp[q] = v[q];
        } else {
            uint16_t *dp = (uint16_t *)p->d + i * p->ld_d + n0;
            for (int64_t q = 0; q < cols; q++) dp[q] = ts__f32_to_bf16_inl(v[q]);
        }
    }
}

/* Scales of a plain weight's panel (columns n0 .. n0 + 31, full) for the nsub canonical
 * sub-blocks of g values from k0, as ts__gemm_pack_scales gives them, but one lookup per
 * sub-block where a scale row covers the whole panel (gran_mn a multiple of 32), and in slot
 * order when perm (dst[b * 32 + j] = scale of column ts__pw_slot(j)). */
static void plain_scales(const ts__gemm_operand *op, int64_t n0, int64_t k0, int64_t nsub,
                         int64_t g, bool perm, float *dst) {
    ts__gemm_lut_init();
    for (int64_t b = 0; b < nsub; b++) {
        const int64_t kidx = (k0 + b * g) / op->gran_k;
        float *d = dst + b * W;
        if (!op->sf_packed && op->gran_mn % W == 0) {
            const float v = ((const float *)op->sf)[(n0 / op->gran_mn) * op->sf_s_mn +
                                                    kidx * op->sf_s_k];
            for (int64_t j = 0; j < W; j++) d[j] = v;
            continue;
        }
        for (int64_t j = 0; j < W; j++) {
            const int64_t ridx = (n0 + (perm ? ts__pw_slot(j) : j)) / op->gran_mn;
            if (op->sf_packed) {
                const uint32_t word =
                    (uint32_t)((const int32_t *)op->sf)[ridx * op->sf_s_mn + (kidx >> 2) * op->sf_s_k];
                d[j] = ts__gemm_lut.ue8m0[(word >> ((kidx & 3) * 8)) & 0xFF];
            } else {
                d[j] = ((const float *)op->sf)[ridx * op->sf_s_mn + kidx * op->sf_s_k];
            }
        }
    }
}

static void run_panel(const dec_job *j, const ts__gemm_problem *p, int64_t pi, const float *af,
                      const float *saf, float *acc, float *bbuf, float *sbuf) {
    const int64_t m = p->m, n0 = pi * W, cols = ts__min64(W, j->n - n0);
    memset(acc, 0, (size_t)(m * W) * sizeof(float));
    ts__gemm_dec_args x;
    memset(&x, 0, sizeof x);
    x.g = j->g;
    x.m = m;
    x.acc = acc;
    const struct ts_packed_weight *pw = p->b.pw;
    if (pw) {
        const uint8_t *panel = (const uint8_t *)p->b.data + pi * pw->panel_bytes;
        x.fmt = pw->dtype;
        x.nan_free = pw->nan_free;
        x.row_bytes = pw->row_bytes;
        x.sb_u8 = pw->sf_u8;
        x.sf_normal = pw->sf_normal;
        x.bp = panel;
        x.len = p->k;
        x.a = af;
        /* bf16 blocks are bare rows (no scales, 64-byte multiples): one contiguous stream */
        if (pw->block_bytes != pw->kb * pw->row_bytes) {
            x.blk_rows = pw->kb;
            x.blk_bytes = pw->block_bytes;
            x.sb_off = pw->kb * pw->row_bytes;
        }
        if (j->scaled) x.sa = saf;
        j->kern->decode(&x);
    } else {
        x.bp = bbuf;
        x.sb = sbuf;
        x.sb_step = W;
        /* Full panels of a plain K-major e4m3 weight on AVX2: bytes transposed into rows of
         * column order (a quarter of the f32 traffic) and decoded as packed rows. The kernel
         * reads byte ts__pw_slot(j) as its column j, so its column j is the weight's column
         * slot(j): the scales are given in that order and acc is put back in column order at
         * the end of the panel. */
        bool perm = false;
#if defined(TS_HAVE_AVX2_KERNELS)
        /* (the avx512 table's decode kernel hands e4m3 to this AVX2 one) */
        perm = cols == W && p->b.dtype == TS_E4M3 &&
               (j->kern->decode == ts__gemm_decode_32__avx2
#if defined(TS_HAVE_AVX512_KERNELS)
                || j->kern->decode == ts__gemm_decode_32__avx512
#endif
                ) &&
               p->b.k_major && p->b.s_k == 1;
#endif
        for (int64_t k0 = 0; k0 < p->k; k0 += KCD) {
            const int64_t kc = ts__min64(KCD, p->k - k0);
            x.fmt = TS_F32;
            x.row_bytes = 4 * W;
#if defined(TS_HAVE_AVX2_KERNELS)
            if (perm) {
                if (!ts__gemm_pack_e4m3_bytes__avx2(&p->b, n0, k0, kc, (uint8_t *)bbuf,
                                                    &x.nan_free))
                    TS__ASSERT(0 && "gemm decode: plain e4m3 panel not packable");
                x.fmt = TS_E4M3;
                x.row_bytes = W;
            } else
#endif
                ts__gemm_pack_panel(&p->b, n0, cols, k0, kc, W, bbuf);
            x.len = kc;
            x.a = af + k0 * m;
            if (j->scaled) {
                if (cols == W) plain_scales(&p->b, n0, k0, ts__ceil_div(kc, j->g), j->g, perm, sbuf);
                else ts__gemm_pack_scales(&p->b, n0, cols, k0 / j->g, ts__ceil_div(kc, j->g), j->g,
                                          W, sbuf);
                x.sa = saf + (k0 / j->g) * m;
            }
            j->kern->decode(&x);
        }
        if (perm)
            for (int64_t i = 0; i < m; i++) {
                float t[W];
                for (int64_t q = 0; q < W; q++) t[ts__pw_slot(q)] = acc[i * W + q];
                memcpy(acc + i * W, t, sizeof t);
            }
    }
    store_panel(j, p, acc, n0, cols);
}

/* Items are not equally costly: a panel of a problem with m rows takes about
 * 1.5 + m row-times (the weight decode is paid once per panel, the FMAs per row: measured
 * 1.7 / 2.3 / 3.9 / 5.2 ns per K row for m = 1 / 2 / 4 / 6, e2m1). Each thread gets a
 * contiguous item range of about equal cost (a static split: same ranges for the same
 * batch and thread count; the bits never depend on it). */
static int64_t item_cost(const ts__gemm_problem *p) { return 3 + 2 * p->m; }

/* The first item whose cost prefix (cost of the items before it) is >= target. */
static int64_t item_at(const dec_job *j, int64_t target) {
    int64_t base = 0;
    for (int64_t pi = 0; pi < j->nprob; pi++) {
        const int64_t c = item_cost(&j->probs[pi]), span = c * j->npanel;
        if (target <= base + span) return pi * j->npanel + ts__ceil_div(target - base, c);
        base += span;
    }
    return j->nprob * j->npanel;
}

static void dec_items(dec_job *j, int64_t begin, int64_t end, int tid);

static void dec_task(void *ctx, int64_t t0, int64_t t1, int tid) {
    dec_job *j = (dec_job *)ctx;
    for (int64_t t = t0; t < t1; t++)
        dec_items(j, item_at(j, j->total_cost * t / j->nparts),
                  item_at(j, j->total_cost * (t + 1) / j->nparts), tid);
}

static void dec_items(dec_job *j, int64_t begin, int64_t end, int tid) {
    size_t total = j->af_floats + j->sa_floats + j->acc_floats + j->bbuf_floats +
                   j->sb_floats;
    float *s = (float *)ts__scratch(tid, total * sizeof(float));
    if (!s) { /* reserved before the parallel region; only a changed thread mapping gets here */
        atomic_store(&j->oom, true);
        return;
    }
    float *af = s, *saf = af + j->af_floats, *acc = saf + j->sa_floats,
          *bbuf = acc + j->acc_floats, *sbuf = bbuf + j->bbuf_floats;
    int64_t cur = -1;
    for (int64_t item = begin; item < end; item++) {
        const int64_t pi = item / j->npanel, panel = item % j->npanel;
        const ts__gemm_problem *p = &j->probs[pi];
        if (pi != cur) {
            ts__gemm_pack_panel(&p->a, 0, p->m, 0, p->k, (int)p->m, af);
            if (j->scaled) {
                ts__gemm_pack_scales(&p->a, 0, p->m, 0, ts__ceil_div(p->k, j->g), j->g,
                                     (int)p->m, saf);
            }
            cur = pi;
        }
        run_panel(j, p, panel, af, saf, acc, bbuf, sbuf);
    }
}

ts_status ts__gemm_run_decode(ts__gemm_problem *probs, int64_t nprob, int64_t n,
                              ts_dtype d_dtype, bool scaled, int64_t g) {
    dec_job job, *j = &job;
    memset(j, 0, sizeof *j);
    j->kern = ts__gemm_select_kernels();
    j->probs = probs;
    j->nprob = nprob;
    j->n = n;
    j->npanel = ts__ceil_div(n, W);
    j->g = g;
    j->d_dtype = d_dtype;
    j->scaled = scaled;
    int64_t m_max = 1; /* buffers sized by this batch's rows, not the threshold */
    for (int64_t i = 0; i < nprob; i++) {
        j->k_max = ts__max64(j->k_max, probs[i].k);
        m_max = ts__max64(m_max, probs[i].m);
    }
    j->af_floats = align_floats((size_t)(m_max * j->k_max));
    j->sa_floats = align_floats(scaled ? (size_t)(m_max * ts__ceil_div(j->k_max, g)) : 0);
    j->acc_floats = align_floats((size_t)(m_max * W));
    j->bbuf_floats = align_floats((size_t)(KCD * W));
    j->sb_floats = align_floats((size_t)(KCD / 32 * W));
    const int64_t items = nprob * j->npanel;
    for (int64_t i = 0; i < nprob; i++) j->total_cost += item_cost(&probs[i]) * j->npanel;
    j->nparts = ts__min64(ts_get_num_threads(), items);
    size_t bytes = (j->af_floats + j->sa_floats + j->acc_floats +
                    j->bbuf_floats + j->sb_floats) *
                   sizeof(float);
    TS__RETURN_IF_ERROR(ts__gemm_reserve_scratch(j->nparts, 1, bytes));
    atomic_store(&j->oom, false);
    ts__parallel_for(j->nparts, 1, dec_task, j);
    if (atomic_load(&j->oom))
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "gemm: scratch allocation failed");
    return TS_OK;
}
