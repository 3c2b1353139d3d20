/* MQA logits driver: work items are (query block, chunk of TS__MQA_CHUNK keys); a task claims
 * ranges of contiguous items (ts__parallel_items), decodes each chunk's keys once (only rows some query of the block
 * uses) and scores them against every query of the block with the kernel table of the ISA in
 * use. Each logit is one fixed chain of operations whatever the blocking, so the result does
 * not depend on the thread count, the chunking or the other queries. */
#include "attention/mqa_logits_internal.h"
#include "tilestack/numerics.h"

#include <math.h>
#include <string.h>

static const ts__mqa_kernels *select_kernels(void) {
#if defined(TS_HAVE_AVX512_KERNELS)
    if (ts__active_isa() == TS_ISA_AVX512) return &ts__mqa_kernels_avx512;
#endif
#if defined(TS_HAVE_AVX2_KERNELS)
    ts_isa isa = ts__active_isa();
    if (ts__isa_avx2_up(isa)) return &ts__mqa_kernels_avx2;
#endif
    return &ts__mqa_kernels_generic;
}

/* Key range [lo, hi) of query i (hi <= lo: none). */
static void query_range(const ts__mqa_job *j, int64_t i, int64_t *lo, int64_t *hi) {
    if (j->paged) {
        *lo = 0;
        *hi = j->ctx_lens[i];
    } else {
        *lo = j->ks[i];
        *hi = j->ke[i];
    }
}

typedef struct run_ctx {
    const ts__mqa_job *job;
    const ts__mqa_kernels *kern;
    const int64_t *blk_lo;   /* [nblocks] union hull start */
    const int64_t *item_off; /* [nblocks + 1] */
    int64_t nblocks;
    int oom;
} run_ctx;

static float ue8m0_byte(int32_t w, int64_t b) { return ts_ue8m0_to_f32((uint8_t)((uint32_t)w >> (8 * b))); }

static void prep_queries(const ts__mqa_job *j, int64_t q0, int64_t nq, float *qt, float *wv) {
    const int64_t h = j->h, hp = j->hp, d = j->d, qb = j->fp4 ? d / 2 : d;
    for (int64_t qi = 0; qi < nq; qi++) {
        int64_t i = q0 + qi;
        float *t = qt + qi * hp * d;
        float *w = wv + qi * hp;
        for (int64_t hh = 0; hh < hp; hh++) {
            float *slab = t + (hh / TS__MQA_HB) * d * TS__MQA_HB + hh % TS__MQA_HB;
            if (hh >= h) {
                for (int64_t dd = 0; dd < d; dd++) slab[dd * TS__MQA_HB] = 0.0f;
                w[hh] = 0.0f;
                continue;
            }
            const uint8_t *src = j->q + (i * h + hh) * qb;
            int32_t sw = j->mx ? j->q_sf[i * h + hh] : 0;
            for (int64_t dd = 0; dd < d; dd++) {
                float x;
                if (j->fp4) {
                    uint8_t code = (uint8_t)((src[dd / 2] >> (4 * (dd & 1))) & 0xF);
                    x = code == 8 ? 0.0f : ts_e2m1_to_f32(code);
                } else {
                    x = ts_e4m3_to_f32(src[dd]);
                }
                if (j->mx) x *= ue8m0_byte(sw, dd / 32);
                slab[dd * TS__MQA_HB] = x;
            }
            if (j->w_bf16)
                w[hh] = ts_bf16_to_f32(((const uint16_t *)j->w)[i * j->w_ld + hh]);
            else
                w[hh] = ((const float *)j->w)[i * j->w_ld + hh];
        }
    }
}

/* Key p of block bi: its value row and its 4-byte scale. */
static void key_src(const ts__mqa_job *j, int64_t bi, int64_t p, const uint8_t **row,
                    const uint8_t **sf, int64_t *run) {
    const int64_t rb = j->fp4 ? j->d / 2 : j->d;
    if (j->paged) {
        int64_t blk = j->block_table[bi * j->bt_ld + p / j->block_kv], r = p % j->block_kv;
        const uint8_t *base = j->cache + blk * j->block_bytes;
        *row = base + r * rb;
        *sf = base + j->block_kv * rb + r * 4;
        *run = j->block_kv - r;
    } else {
        *row = j->kv + p * rb;
        *sf = (const uint8_t *)j->kv_sf + p * 4;
        *run = INT64_MAX;
    }
}

/* Decode keys [s, e) (absolute) into rows s - c0 of the chunk buffers. */
static void decode_span(const ts__mqa_job *j, const ts__mqa_kernels *kern, int64_t bi,
                        int64_t c0, int64_t s, int64_t e, float *keys, float *ksf, float *msf) {
    const int64_t d = j->d, nb = d / 32, rb = j->fp4 ? d / 2 : d;
    while (s < e) {
        const uint8_t *row, *sf;
        int64_t run;
        key_src(j, bi, s, &row, &sf, &run);
        int64_t n = ts__min64(run, e - s), r0 = s - c0;
        for (int64_t r = 0; r < n; r++) {
            uint32_t wsf;
            memcpy(&wsf, sf + r * 4, 4);
            if (j->mx) {
                for (int64_t b = 0; b < nb; b++) msf[(r0 + r) * 4 + b] = ue8m0_byte((int32_t)wsf, b);
            } else {
                memcpy(&ksf[r0 + r], &wsf, 4);
            }
        }
        kern->decode(row, rb, n, d, j->fp4, j->mx ? msf + r0 * 4 : NULL, 4, keys + r0 * d);
        s += n;
    }
}

static void store_logit(const ts__mqa_job *j, int64_t i, int64_t col, float x) {
    if (j->out_bf16)
        ((uint16_t *)j->out)[i * j->out_ld + col] = ts_f32_to_bf16(x);
    else
        ((float *)j->out)[i * j->out_ld + col] = x;
}

static void run_items(void *vctx, int64_t begin, int64_t end, int tid) {
    run_ctx *c = (run_ctx *)vctx;
    const ts__mqa_job *j = c->job;
    const ts__mqa_kernels *kern = c->kern;
    const int64_t hp = j->hp, d = j->d, qblk = j->qblk, C = TS__MQA_CHUNK;
    size_t fl = (size_t)(qblk * hp * d + qblk * hp + C * d + C + C * 4 + C * 8 + C + 64);
    float *base = (float *)ts__scratch(tid, fl * sizeof(float));
    if (!base) {
        c->oom = 1;
        return;
    }
    float *qt = base, *wv = qt + qblk * hp * d, *keys = wv + qblk * hp;
    float *ksf = keys + C * d, *msf = ksf + C, *part = msf + C * 4, *v = part + C * 8;
    /* every region offset is a multiple of 16 floats except wv's end: realign part */
    part = (float *)(((uintptr_t)part + 63) & ~(uintptr_t)63);
    v = part + C * 8;
    int64_t prepared = -1;
    int64_t bi = 0;
    {   /* first block holding item `begin` */
        int64_t lo = 0, hi = c->nblocks - 1;
        while (lo < hi) {
            int64_t mid = (lo + hi + 1) / 2;
            if (c->item_off[mid] <= begin) lo = mid; else hi = mid - 1;
        }
        bi = lo;
    }
    for (int64_t it = begin; it < end; it++) {
        while (c->item_off[bi + 1] <= it) bi++;
        int64_t q0 = bi * qblk, nq = ts__min64(qblk, j->nq - q0);
        int64_t c0 = c->blk_lo[bi] + (it - c->item_off[bi]) * C, c1 = c0 + C;
        /* merged key intervals of the block's queries inside [c0, c1) */
        int64_t ivs[2 * 64], niv = 0;
        for (int64_t qi = 0; qi < nq; qi++) {
            int64_t lo, hi;
            query_range(j, q0 + qi, &lo, &hi);
            lo = ts__max64(lo, c0);
            hi = ts__min64(hi, c1);
            if (hi <= lo) continue;
            int64_t k = niv++;
            while (k > 0 && ivs[2 * (k - 1)] > lo) {
                ivs[2 * k] = ivs[2 * (k - 1)];
                ivs[2 * k + 1] = ivs[2 * (k - 1) + 1];
                k--;
            }
            ivs[2 * k] = lo;
            ivs[2 * k + 1] = hi;
        }
        if (niv == 0) continue;
        if (prepared != bi) {
            prep_queries(j, q0, nq, qt, wv);
            prepared = bi;
        }
        int64_t filled = 0; /* rows [0, filled) of the chunk are decoded or zeroed */
        for (int64_t k = 0; k < niv; k++) {
            int64_t s = ts__max64(ivs[2 * k], c0 + filled), e = ivs[2 * k + 1];
            if (e <= s) continue;
            if (s - c0 > filled) memset(keys + filled * d, 0, (size_t)((s - c0 - filled) * d) * sizeof(float));
            decode_span(j, kern, bi, c0, s, e, keys, ksf, msf);
            filled = e - c0;
        }
        int64_t rows = ts__align(filled, TS__MQA_NR);
        if (rows > filled) memset(keys + filled * d, 0, (size_t)((rows - filled) * d) * sizeof(float));
        for (int64_t qi = 0; qi < nq; qi++) {
            int64_t i = q0 + qi, lo, hi;
            query_range(j, i, &lo, &hi);
            int64_t a = ts__max64(lo, c0) - c0, b = ts__min64(hi, c1) - c0;
            if (b <= a) continue;
            int64_t t0 = a / TS__MQA_NR * TS__MQA_NR, t1 = ts__align(b, TS__MQA_NR);
            kern->heads(qt + qi * hp * d, wv + qi * hp, hp, d, keys + t0 * d, t1 - t0, part, v);
            int64_t col_off = (!j->paged && j->compressed) ? lo : 0;
            for (int64_t r = a; r < b; r++) {
                float x = v[r - t0];
                if (!j->mx) x *= ksf[r];
                store_logit(j, i, c0 + r - col_off, x);
            }
        }
    }
}

typedef struct clean_ctx {
    const ts__mqa_job *job;
} clean_ctx;

static void fill_ninf(const ts__mqa_job *j, int64_t i, int64_t from, int64_t to) {
    for (int64_t col = from; col < to; col++) store_logit(j, i, col, -INFINITY);
}

static void clean_rows(void *vctx, int64_t begin, int64_t end, int tid) {
    (void)tid;
    const ts__mqa_job *j = ((clean_ctx *)vctx)->job;
    for (int64_t i = begin; i < end; i++) {
        int64_t lo, hi;
        query_range(j, i, &lo, &hi);
        if (j->paged || j->compressed) {
            int64_t n = hi > lo ? hi - lo : 0;
            fill_ninf(j, i, n, j->out_cols);
        } else if (hi <= lo) {
            fill_ninf(j, i, 0, j->out_cols);
        } else {
            fill_ninf(j, i, 0, lo);
            fill_ninf(j, i, hi, j->out_cols);
        }
    }
}

ts_status ts__mqa_logits_run(const ts__mqa_job *job) {
    TS__ASSERT(job->qblk >= 1 && job->qblk <= 64 && job->hp % TS__MQA_HB == 0);
    int64_t nblocks = ts__ceil_div(job->nq, job->qblk);
    int64_t *meta = (int64_t *)ts__scratch(0, (size_t)(2 * nblocks + 1) * sizeof(int64_t));
    if (!meta) return ts__fail(TS_ERR_OUT_OF_MEMORY, "mqa_logits: no scratch for %lld blocks", (long long)nblocks);
    int64_t *blk_lo = meta, *item_off = meta + nblocks;
    item_off[0] = 0;
    for (int64_t bi = 0; bi < nblocks; bi++) {
        int64_t lo = INT64_MAX, hi = INT64_MIN;
        for (int64_t i = bi * job->qblk; i < ts__min64((bi + 1) * job->qblk, job->nq); i++) {
            int64_t a, b;
            query_range(job, i, &a, &b);
            if (b <= a) continue;
            lo = ts__min64(lo, a);
            hi = ts__max64(hi, b);
        }
        blk_lo[bi] = hi > lo ? lo : 0;
        item_off[bi + 1] = item_off[bi] + (hi > lo ? ts__ceil_div(hi - lo, TS__MQA_CHUNK) : 0);
    }
    run_ctx c = {job, select_kernels(), blk_lo, item_off, nblocks, 0};
    /* ranges of items so a task reuses a block's prepared queries over neighbouring chunks */
    const int64_t nit = item_off[nblocks];
    if (nit > 0)
        ts__parallel_items(nit, ts__max64(1, nit / (8 * (int64_t)ts_get_num_threads())),
                                run_items, &c);
    /* a task fails before its first store; tasks on other threads may have stored (the one
     * case where an error leaves outputs partly written) */
    if (c.oom) return ts__fail(TS_ERR_OUT_OF_MEMORY, "mqa_logits: no per-thread scratch");
    if (job->clean) {
        clean_ctx cc = {job};
        ts__parallel_for(job->nq, 16, clean_rows, &cc);
    }
    return TS_OK;
}
