/* ts_topk: validation, the row/part plan, and the three phases (scan, merge+order, write).
 *
 * Phase 1 streams each (row, part) once with a rising threshold, the first one estimated from a
 * strided sample (exact either way: a too-high estimate is detected and the part re-scanned):
 * values below the current k-th best are rejected by the SIMD filter; survivors are appended to
 * a candidate buffer that is cut back to exactly k by radix select when it reaches k + B2. Blocks are visited in a
 * fixed pseudo-random order (DeepSelect's), so ascending input cannot keep every element.
 * Phase 2 merges a row's parts and puts the k survivors in output order. Phase 3 writes. The
 * results are staged so that a NaN found in abort mode leaves every output untouched. */
#include "tilestack/select.h"

#include "core/internal.h"
#include "select/topk_internal.h"

#include <math.h>
#include <string.h>

#define BLOCK 4096          /* elements per visited block */
#define CHUNK 256           /* values per step before a threshold exists: the buffer is checked
                             * against its trigger after each step */
#define CHUNK_THR BLOCK     /* ... and once one exists: survivors are rare, and short calls cost
                             * (measured 1 x 1M bf16 k 512: 96 -> 72 us against 256) */
#define PART_MIN 65536      /* a row is split across threads only in pieces at least this long */
#define PART_PER_K 512      /* ... and at least this many times k */
#define BITMAP_PER_K 64     /* unsorted output in index order by a bitmap when L <= this * k */
#define SAMPLE_MAX 16384    /* values in the threshold sample: at most */
#define SAMPLE_MAX_F32 4096 /* ... for f32: its counting passes take 8 keys per compare, not 16
                             * (129280 x k 512: 16384 samples 22 -> 26 us, 2048 - 4096 on par with
                             * the radix-selected 2048 from cache, 4096 best from DRAM) */
#define SAMPLE_MIN 256      /* ... at least (when the row allows) */
#define SAMPLE_RANK 48      /* ... and about this many at or above the k-th best */
#define SAMPLE_MIN_LEN 4096 /* shorter segments skip the sample */
#define SAMPLE_MIN_K 128    /* below this k the sample is at most ... */
#define SAMPLE_SMALL_K 1024 /* ... this many values (measured 1 x 129280 f32 k 20: 30 -> 12 us
                             * against 256, no cut of the buffer left; 2048 and 4096 slower) */
#define SAMPLE_RUN_BYTES 128 /* neighbours per sampled spot for rows from DRAM: two lines */
#define SAMPLE_RUN_CACHED_BYTES 64 /* ... and for rows in cache: one line */
#define DENSE_PER_K 32      /* rows with L <= this * k take the dense path (topk_dense.c) ... */
#define DENSE_MIN_LEN 1024  /* ... when L is at least this ... */
#define DENSE_MAX_LEN 65536 /* ... and at most this (its int32 keys stay in L2) */

/* Test hook: the batch size (in L3 sizes) above which rows are taken to come from DRAM. */
double ts__topk_dram_scale = 0.5; /* half: the L3 is shared with other cores' work */

ts_topk_options ts_topk_default_options(void) {
    ts_topk_options o;
    memset(&o, 0, sizeof o);
    o.return_value = true;
    o.abort_when_nan_found = true;
    o.indices_type = TS_I64;
    o.idx_oob_fill_value = INT32_MAX;
    o.value_oob_fill_value = -INFINITY;
    return o;
}

ts_status ts_get_stride_requirement(int64_t *in_bytes, int64_t *out_bytes) {
    if (!in_bytes || !out_bytes)
        return ts__fail(TS_ERR_NULL_POINTER, "ts_get_stride_requirement: NULL output");
    *in_bytes = 1;
    *out_bytes = 1;
    return TS_OK;
}

typedef struct topk_plan {
    const char *in;         /* row 0 */
    int64_t in_stride;      /* bytes */
    bool bf16;
    int esize, bits;        /* element bytes; 32 + key bits */
    int64_t batch, n, k, b2, parts;
    const int32_t *end;
    int64_t end_stride;
    const int32_t *off;
    int64_t off_stride;
    ts_topk_options o;
    ts__topk_filter_fn filter;
    ts__topk_argmax_fn argmax;
    ts__topk_dense_ops dense;
    bool sample_runs;       /* the batch exceeds L3: sample in runs (see sample_threshold) */
    /* staging: item (row, part) i owns entries [i*k, (i+1)*k) */
    uint64_t *stage;
    int64_t *count;
    int32_t *nan;
    int32_t *ordered;       /* item's entries are in index order; 2: staged as uint32 indices */
    ts_tensor *values, *idx;
    ts_status err;          /* first failure inside a task (scratch) */
} topk_plan;

static inline int64_t row_len(const topk_plan *p, int64_t r) {
    return p->end ? (int64_t)p->end[r * p->end_stride] : p->n;
}

/* Order-preserving key of element i of a row. */
static inline uint32_t key_at(bool bf16, const char *row, int64_t i) {
    if (bf16) {
        uint16_t v;
        memcpy(&v, row + 2 * i, 2);
        return ts__topk_key_bf16(v);
    }
    uint32_t v;
    memcpy(&v, row + 4 * i, 4);
    return ts__topk_key_f32(v);
}

static inline float thr_of(const topk_plan *p, uint64_t e) {
    uint32_t key = (uint32_t)(e >> 32);
    uint32_t bits = p->bf16 ? ts__topk_unkey_bf16(key) << 16 : ts__topk_unkey_f32(key);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Entries of every value of row[c0, c1): the first fill, before any threshold exists. Branch-
 * free, unlike the filter's per-survivor path. Returns 1 if a NaN is among them. */
static int append_all(const topk_plan *p, const char *row, int64_t c0, int64_t c1, uint64_t *out) {
    uint32_t nan = 0;
    if (p->bf16) {
        const uint16_t *u = (const uint16_t *)row;
        for (int64_t i = c0; i < c1; i++) {
            uint32_t v = u[i];
            nan |= (v & 0x7fffu) > 0x7f80u;
            out[i - c0] = ts__topk_entry(ts__topk_key_bf16(v), (uint32_t)i);
        }
    } else {
        const uint32_t *u = (const uint32_t *)row;
        for (int64_t i = c0; i < c1; i++) {
            uint32_t v = u[i];
            nan |= (v & 0x7fffffffu) > 0x7f800000u;
            out[i - c0] = ts__topk_entry(ts__topk_key_f32(v), (uint32_t)i);
        }
    }
    return (int)nan;
}

/* A first threshold from a sample of row[lo, hi): the value of rank r in the sample, r chosen
 * so the row's count at or above it is k plus about two standard deviations. Any threshold
 * keeps the result exact (values below it cannot be in the top k once k values are at or above
 * it; scan_segment re-scans without it when fewer survive); a good one replaces the k + B2
 * first fill and the k * ln(N/k) rising-threshold candidates by about k. The sample's r-th
 * value is found as a dense row's pivot (signed-order keys, counting passes at 16 bf16 or 8 f32
 * keys per compare), cheap enough for samples of up to SAMPLE_MAX values: every candidate the
 * tighter estimate saves costs ~12 ns in the scan (append, group test, cut). Returns false
 * when no useful sample threshold exists. */
static bool sample_threshold(const topk_plan *p, const char *row, int64_t lo, int64_t len,
                             uint64_t *buf, uint64_t *tmp, float *thr) {
    const int64_t k = p->k;
    if (len < SAMPLE_MIN_LEN || len < 4 * k) return false;
    /* about SAMPLE_RANK samples at the k-th best's rank; small k: a fixed SAMPLE_SMALL_K (the
     * threshold then keeps about 2k + 1 values instead of cutting the buffer several times) */
    const int64_t want = ts__max64(SAMPLE_MIN, (int64_t)((double)SAMPLE_RANK * (double)len / (double)k));
    const int64_t smax = k < SAMPLE_MIN_K ? SAMPLE_SMALL_K : p->bf16 ? SAMPLE_MAX : SAMPLE_MAX_F32;
    int64_t s = ts__min64(ts__min64(smax, len / 4), want);
    /* Runs of neighbours spread evenly over the row: one line per spot for rows in cache, two
     * for rows from DRAM (each sampled line there is a latency-bound miss). Measured on 1M bf16
     * rows with 16384 samples: single values (one line each) 2.2x slower than 64-byte runs. */
    const int64_t run = (p->sample_runs ? SAMPLE_RUN_BYTES : SAMPLE_RUN_CACHED_BYTES) / p->esize;
    s -= s % run;
    const double r0 = (double)k * (double)s / (double)len;
    /* two standard deviations: a re-scan in ~2% of rows costs less than a wider margin's
     * extra candidates */
    const int64_t r = (int64_t)(r0 + 2.0 * sqrt(r0) + 1.0);
    if (r >= s) return false;
    const int es = p->esize;
    char *raw = (char *)buf; /* s values, then the pivot search's two small buffers */
    const int64_t nr = s / run, rstride = len / nr;
    for (int64_t j = 0; j < nr; j++)
        memcpy(raw + j * run * es, row + (lo + j * rstride + rstride / 2 - run / 2) * es, (size_t)(run * es));
    if (p->dense.keys(raw, s, tmp)) return false; /* a NaN sample: no threshold */
    uint64_t *g = buf + ts__ceil_div(s * es, 8);
    const uint64_t piv = ts__topk_dense_pivot(&p->dense, tmp, p->bf16, s, r, 0, g, g + TS__TOPK_GATHER_MAX + 8);
    *thr = thr_of(p, piv);
    return true;
}

/* Top-min(k, hi-lo) of row[lo, hi) into cand[0..); returns the count (0 when a NaN was seen).
 * *ordered: the entries are in index order (blocks visited in order; appends and cuts keep the
 * order they come in). */
static int64_t scan_segment(const topk_plan *p, const char *row, int64_t lo, int64_t hi,
                            uint64_t *cand, uint64_t *tmp, int *nan, int *ordered) {
    const int64_t k = p->k, trigger = k + p->b2, len = hi - lo;
    const int64_t m = ts__ceil_div(len, BLOCK);
    const int ib = ts__topk_index_bits(hi);
    /* seg = (i * P + A) mod m is a bijection: P is a prime larger than any m. */
    const uint64_t P = 0xB559EB75u % (uint64_t)m, A = 0x22262226u % (uint64_t)m;
    float thr = -INFINITY;
    /* index of the current k-th best: ties below it still win; UINT32_MAX admits every tie */
    uint32_t pidx = UINT32_MAX;
    bool have_thr = sample_threshold(p, row, lo, len, cand, tmp, &thr);
    int64_t cnt = 0;
    for (int pass = 0;; pass++) {
        /* With a sample threshold the blocks go in index order: the sample already keeps a sorted
         * row from appending everything, and in-order streaming lets the hardware prefetcher run
         * (measured 64 x 1M bf16 k 512: 16.0 -> 11.0 ms). Without one, the pseudo-random order
         * is the defence. */
        const bool in_order = have_thr && pass == 0;
        *ordered = in_order || m == 1;
        for (int64_t i = 0; i < m; i++) {
            int64_t blk = in_order ? i : (int64_t)(((uint64_t)i * P + A) % (uint64_t)m);
            int64_t b0 = lo + blk * BLOCK, b1 = ts__min64(b0 + BLOCK, hi);
            for (int64_t c0 = b0, c1; c0 < b1; c0 = c1) {
                c1 = ts__min64(c0 + (have_thr ? CHUNK_THR : CHUNK), b1);
                if (!have_thr) { /* no threshold yet: everything is a candidate */
                    if (append_all(p, row, c0, c1, cand + cnt)) *nan = 1;
                    cnt += c1 - c0;
                } else {
                    cnt += p->filter(row + c0 * p->esize, c1 - c0, (uint32_t)c0, thr, pidx,
                                     cand + cnt, nan);
                }
                if (*nan) return 0;
                if (cnt >= trigger) {
                    uint64_t piv = ts__topk_cut(cand, cnt, k, tmp, p->bits, ib);
                    thr = thr_of(p, piv);
                    pidx = ts__topk_entry_idx(piv);
                    have_thr = true;
                    cnt = k;
                }
            }
        }
        /* Fewer than k at or above the sample's threshold (only a sample threshold can do
         * that: a cut's keeps k): it was above the k-th best; scan again without it. */
        if (cnt >= k || pass == 1) break;
        cnt = 0;
        thr = -INFINITY;
        pidx = UINT32_MAX;
        have_thr = false;
    }
    if (cnt > k) {
        ts__topk_cut(cand, cnt, k, tmp, p->bits, ib);
        cnt = k;
    }
    return cnt;
}

static inline bool dense_row(const topk_plan *p, int64_t len) {
    return p->parts == 1 && len >= DENSE_MIN_LEN && len <= DENSE_MAX_LEN && len <= DENSE_PER_K * p->k;
}

static void scan_items(void *ctx, int64_t begin, int64_t end, int tid) {
    topk_plan *p = (topk_plan *)ctx;
    const int64_t cap = ts__max64(p->k + p->b2 + CHUNK_THR, SAMPLE_MAX);
    const int64_t gcap = TS__TOPK_GATHER_MAX + 8;
    /* dense rows: int32 keys of the row, gather buffer and its cut's tmp */
    const int64_t dense_len = p->parts == 1 ? ts__min64(p->n, DENSE_MAX_LEN) : 0;
    /* the indexer's call (no values, index order) needs no keys in the stage */
    const bool idx_only = !p->o.sorted && !p->o.return_value;
    uint64_t *cand = NULL;
    for (int64_t it = begin; it < end; it++) {
        const int64_t r = it / p->parts, part = it % p->parts;
        const int64_t L = row_len(p, r);
        p->count[it] = 0;
        p->nan[it] = 0;
        p->ordered[it] = 0;
        if (L <= p->k) continue; /* short rows: phase 2 */
        const int64_t lo = L * part / p->parts, hi = L * (part + 1) / p->parts;
        if (hi <= lo) continue;
        if (!cand) {
            cand = (uint64_t *)ts__scratch(tid, (size_t)(2 * cap + 2 * gcap) * sizeof(uint64_t) +
                                                     (size_t)dense_len * sizeof(int32_t));
            if (!cand) {
                p->err = TS_ERR_OUT_OF_MEMORY;
                return;
            }
        }
        int nan = 0;
        int64_t c;
        if (p->k == 1) { /* one max pass: no sample, no candidates */
            cand[0] = p->argmax(p->in + r * p->in_stride + lo * p->esize, hi - lo, (uint32_t)lo, &nan);
            c = nan ? 0 : 1;
            p->ordered[it] = 1;
        } else if (dense_row(p, hi - lo)) {
            uint64_t *g = cand + 2 * cap;
            c = ts__topk_dense(&p->dense, p->in + r * p->in_stride + lo * p->esize, p->bf16, hi - lo,
                               p->k, (uint32_t)lo, g + 2 * gcap, g, g + gcap, cand, idx_only, &nan);
            p->ordered[it] = idx_only ? 2 : 1;
        } else {
            int ord = 0;
            c = scan_segment(p, p->in + r * p->in_stride, lo, hi, cand, cand + cap, &nan, &ord);
            p->ordered[it] = ord;
        }
        p->nan[it] = nan;
        p->count[it] = c;
        memcpy(p->stage + it * p->k, cand, (size_t)c * (p->ordered[it] == 2 ? 4 : 8));
    }
}

/* Ascending-index order of n entries of a row of length L through a bitmap of L bits (in
 * buf, L / 64 <= 2k words): k bit sets and L / 64 word reads, cheaper than radix passes over
 * the entries when L is a small multiple of k. Keys are re-read from the row (in cache). */
static void index_order_bitmap(const topk_plan *p, const char *row, int64_t L, uint64_t *e,
                               int64_t n, uint64_t *buf) {
    const int64_t words = ts__ceil_div(L, 64);
    memset(buf, 0, (size_t)words * sizeof *buf);
    for (int64_t j = 0; j < n; j++) {
        uint32_t i = ts__topk_entry_idx(e[j]);
        buf[i >> 6] |= 1ull << (i & 63);
    }
    int64_t j = 0;
    for (int64_t w = 0; w < words; w++) {
        for (uint64_t b = buf[w]; b; b &= b - 1) {
            uint32_t i = (uint32_t)(w * 64 + __builtin_ctzll(b)), key;
            if (p->bf16) {
                uint16_t v;
                memcpy(&v, row + 2 * (int64_t)i, 2);
                key = ts__topk_key_bf16(v);
            } else {
                uint32_t v;
                memcpy(&v, row + 4 * (int64_t)i, 4);
                key = ts__topk_key_f32(v);
            }
            e[j++] = ts__topk_entry(key, i);
        }
    }
}

static void merge_rows(void *ctx, int64_t begin, int64_t end, int tid) {
    topk_plan *p = (topk_plan *)ctx;
    const int64_t k = p->k, parts = p->parts;
    const int sort_bits = p->o.sorted ? p->bits : 32;
    uint64_t *buf = (uint64_t *)ts__scratch(tid, (size_t)(2 * parts * k) * sizeof(uint64_t));
    if (!buf) {
        p->err = TS_ERR_OUT_OF_MEMORY;
        return;
    }
    for (int64_t r = begin; r < end; r++) {
        const int64_t L = row_len(p, r), it0 = r * parts;
        uint64_t *dst = p->stage + it0 * k;
        if (L <= k) {
            const char *row = p->in + r * p->in_stride;
            for (int64_t i = 0; i < L; i++) {
                dst[i] = ts__topk_entry(key_at(p->bf16, row, i), (uint32_t)i);
            }
            p->count[it0] = L;
            if (p->o.sorted && L > 1) ts__topk_sort_desc(dst, buf, L, 0, p->bits); /* in index order */
            continue;
        }
        int nan = 0, ordered = 1;
        int64_t n = 0;
        for (int64_t q = 0; q < parts; q++) {
            nan |= p->nan[it0 + q];
            ordered &= p->ordered[it0 + q] != 0; /* parts cover ascending ranges; the cut is stable */
            if (parts > 1)
                memcpy(buf + n, p->stage + (it0 + q) * k, (size_t)p->count[it0 + q] * sizeof(uint64_t));
            n += p->count[it0 + q];
        }
        p->nan[it0] = nan;
        if (nan || p->ordered[it0] == 2) continue; /* staged indices: a dense row, done */
        if (parts > 1) {
            if (n > k) {
                ts__topk_cut(buf, n, k, buf + parts * k, p->bits, ts__topk_index_bits(L));
                n = k;
            }
            memcpy(dst, buf, (size_t)n * sizeof(uint64_t));
        }
        p->count[it0] = n;
        /* Entries in index order need no index digits: unsorted output is done, and a stable
         * sort on the key bits alone (ib = 0) keeps equal values in ascending index order. */
        if (ordered) {
            if (p->o.sorted) ts__topk_sort_desc(dst, buf, n, 0, sort_bits);
            continue;
        }
        if (!p->o.sorted && L <= BITMAP_PER_K * k)
            index_order_bitmap(p, p->in + r * p->in_stride, L, dst, n, buf);
        else
            ts__topk_sort_desc(dst, buf, n, ts__topk_index_bits(L), sort_bits);
    }
}

static uint16_t f32_to_bf16_rne(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static void write_rows(void *ctx, int64_t begin, int64_t end, int tid) {
    (void)tid;
    topk_plan *p = (topk_plan *)ctx;
    const int64_t k = p->k;
    const bool i64 = p->o.indices_type == TS_I64;
    const bool rv = p->o.return_value;
    const uint16_t fill16 = f32_to_bf16_rne(p->o.value_oob_fill_value);
    for (int64_t r = begin; r < end; r++) {
        const int64_t L = row_len(p, r), it0 = r * p->parts;
        char *oi = (char *)p->idx->data + r * p->idx->strides[0] * (i64 ? 8 : 4);
        if (L > k && p->nan[it0]) {
            if (i64) ((int64_t *)oi)[0] = TS_TOPK_NAN_SENTINEL;
            else ((int32_t *)oi)[0] = TS_TOPK_NAN_SENTINEL;
            continue;
        }
        const uint64_t *e = p->stage + it0 * k;
        const int64_t c = p->count[it0];
        const int64_t off = p->off ? (int64_t)p->off[r * p->off_stride] : 0;
        if (p->ordered[it0] == 2) { /* uint32 indices (only without values) */
            const uint32_t *ix = (const uint32_t *)e;
            if (i64) {
                int64_t *o = (int64_t *)oi;
                for (int64_t j = 0; j < c; j++) o[j] = (int64_t)ix[j] + off;
            } else {
                int32_t *o = (int32_t *)oi;
                for (int64_t j = 0; j < c; j++) o[j] = (int32_t)(ix[j] + (uint32_t)off);
            }
            continue; /* a dense row is long: c = k, no fills */
        }
        if (i64) {
            int64_t *o = (int64_t *)oi;
            for (int64_t j = 0; j < c; j++) o[j] = (int64_t)ts__topk_entry_idx(e[j]) + off;
            for (int64_t j = c; j < k; j++) o[j] = p->o.idx_oob_fill_value;
        } else {
            int32_t *o = (int32_t *)oi;
            for (int64_t j = 0; j < c; j++)
                o[j] = (int32_t)(ts__topk_entry_idx(e[j]) + (uint32_t)off);
            for (int64_t j = c; j < k; j++) o[j] = p->o.idx_oob_fill_value;
        }
        if (!rv) continue;
        const char *row = p->in + r * p->in_stride;
        if (p->bf16) {
            uint16_t *v = (uint16_t *)p->values->data + r * p->values->strides[0];
            for (int64_t j = 0; j < c; j++) {
                uint32_t bits = ts__topk_unkey_bf16((uint32_t)(e[j] >> 32));
                if (bits == 0) memcpy(&bits, row + 2 * (int64_t)ts__topk_entry_idx(e[j]), 2), bits &= 0xffffu;
                v[j] = (uint16_t)bits;
            }
            for (int64_t j = c; j < k; j++) v[j] = fill16;
        } else {
            float *v = (float *)p->values->data + r * p->values->strides[0];
            for (int64_t j = 0; j < c; j++) {
                uint32_t bits = ts__topk_unkey_f32((uint32_t)(e[j] >> 32));
                /* the key folds -0 into +0: the sign of a zero comes from the input */
                if (bits == 0) memcpy(&bits, row + 4 * (int64_t)ts__topk_entry_idx(e[j]), 4);
                memcpy(&v[j], &bits, 4);
            }
            for (int64_t j = c; j < k; j++) v[j] = p->o.value_oob_fill_value;
        }
    }
}

static ts_status check_vec_i32(const ts_tensor *t, const char *name, int64_t batch) {
    TS__RETURN_IF_ERROR(ts_tensor_check(t, name));
    TS__RETURN_IF_ERROR(ts_tensor_check_dtype(t, name, TS_I32));
    int64_t shape[1] = {batch};
    return ts_tensor_check_shape(t, name, 1, shape);
}

static ts_status check_out(const ts_tensor *t, const char *name, ts_dtype dt, int64_t batch,
                           int64_t k) {
    TS__RETURN_IF_ERROR(ts_tensor_check(t, name));
    TS__RETURN_IF_ERROR(ts_tensor_check_dtype(t, name, dt));
    int64_t shape[2] = {batch, k};
    TS__RETURN_IF_ERROR(ts_tensor_check_shape(t, name, 2, shape));
    TS__RETURN_IF_ERROR(ts_tensor_check_last_contiguous(t, name));
    /* rows are written by different threads: they must not overlap (as upstream requires) */
    if (batch > 1 && (t->strides[0] < 0 ? -t->strides[0] : t->strides[0]) < k)
        return ts__fail(TS_ERR_ALIASING, "ts_topk: rows of %s overlap (row stride %lld < k = %lld)",
                        name, (long long)t->strides[0], (long long)k);
    return TS_OK;
}

ts_status ts_topk(const ts_tensor *input, int64_t k, const ts_topk_options *opts,
                  const ts_tensor *end, const ts_tensor *offset, ts_tensor *values,
                  ts_tensor *output_idx) {
    const ts_topk_options o = opts ? *opts : ts_topk_default_options();
    if (!input) return ts__fail(TS_ERR_NULL_POINTER, "ts_topk: input is NULL");
    if (!output_idx) return ts__fail(TS_ERR_NULL_POINTER, "ts_topk: output_idx is NULL");
    if (k < 1 || k > TS_TOPK_MAX_K)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_topk: topk = %lld is outside [1, %d]",
                        (long long)k, TS_TOPK_MAX_K);
    TS__RETURN_IF_ERROR(ts_tensor_check(input, "input"));
    if (input->dtype != TS_BF16 && input->dtype != TS_F32)
        return ts__fail(TS_ERR_DTYPE, "ts_topk: input dtype %s; expected bf16 or f32",
                        ts_dtype_name(input->dtype));
    if (input->ndim != 2)
        return ts__fail(TS_ERR_SHAPE, "ts_topk: input must be 2-D [batch, N], got %d dims",
                        (int)input->ndim);
    TS__RETURN_IF_ERROR(ts_tensor_check_last_contiguous(input, "input"));
    const int64_t batch = input->shape[0], n = input->shape[1];
    if (n > INT32_MAX)
        return ts__fail(TS_ERR_SHAPE, "ts_topk: input N = %lld exceeds INT32_MAX", (long long)n);
    if (o.sorted && o.sorted_index)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_topk: sorted and sorted_index are exclusive");
    if (o.sorted && !o.return_value)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_topk: sorted requires return_value");
    if (o.sorted && input->dtype == TS_BF16)
        return ts__fail(TS_ERR_UNSUPPORTED, "ts_topk: sorted is f32 only (as upstream)");
    if (o.indices_type != TS_I32 && o.indices_type != TS_I64)
        return ts__fail(TS_ERR_DTYPE, "ts_topk: indices_type %s; expected i32 or i64",
                        ts_dtype_name(o.indices_type));
    if (output_idx->dtype != o.indices_type)
        return ts__fail(TS_ERR_DTYPE, "ts_topk: output_idx dtype %s differs from indices_type %s",
                        ts_dtype_name(output_idx->dtype), ts_dtype_name(o.indices_type));
    TS__RETURN_IF_ERROR(check_out(output_idx, "output_idx", o.indices_type, batch, k));
    if (o.return_value) {
        if (!values)
            return ts__fail(TS_ERR_NULL_POINTER, "ts_topk: values is NULL with return_value");
        TS__RETURN_IF_ERROR(check_out(values, "values", input->dtype, batch, k));
    }
    if (end) {
        TS__RETURN_IF_ERROR(check_vec_i32(end, "end", batch));
        const int32_t *e = (const int32_t *)end->data;
        for (int64_t r = 0; r < batch; r++) {
            int32_t v = e[r * end->strides[0]];
            if (v < 0 || v > n)
                return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_topk: end[%lld] = %d is outside [0, N = %lld]",
                                (long long)r, (int)v, (long long)n);
        }
    }
    if (offset) TS__RETURN_IF_ERROR(check_vec_i32(offset, "output_idx_offset", batch));
    if (batch == 0) return TS_OK;

    topk_plan p;
    memset(&p, 0, sizeof p);
    p.in = (const char *)input->data;
    p.bf16 = input->dtype == TS_BF16;
    p.esize = p.bf16 ? 2 : 4;
    p.bits = p.bf16 ? 48 : 64;
    p.in_stride = input->strides[0] * p.esize;
    p.batch = batch;
    p.n = n;
    p.k = k;
    p.b2 = ts__max64(k, 256);
    p.end = end ? (const int32_t *)end->data : NULL;
    p.end_stride = end ? end->strides[0] : 0;
    p.off = offset ? (const int32_t *)offset->data : NULL;
    p.off_stride = offset ? offset->strides[0] : 0;
    p.o = o;
    {
        const ts_cpu_info *ci = ts_get_cpu_info();
        const int64_t l3 = ci && ci->l3_bytes > 0 ? ci->l3_bytes : (int64_t)32 << 20;
        p.sample_runs = (double)batch * (double)n * (double)p.esize > (double)l3 * ts__topk_dram_scale;
    }
    p.values = values;
    p.idx = output_idx;
    /* Kernels per path: the avx512 path has its own, avx2 (and any path above it without
     * its own) the AVX2 ones, everything else the generic C. */
    const ts_isa isa = ts__active_isa();
    const bool avx2 = ts__isa_avx2_up(isa);
#define TOPK_DENSE_OPS(ISA)                                                                                       \
    (p.bf16 ? (ts__topk_dense_ops){ts__topk_dense_keys_bf16__##ISA, ts__topk_dense_count_gt2_s16__##ISA,          \
                                   ts__topk_dense_gather_s16__##ISA, ts__topk_dense_select_s16__##ISA,            \
                                   ts__topk_dense_select_idx_s16__##ISA, ts__topk_dense_nth_eq_s16__##ISA}        \
            : (ts__topk_dense_ops){ts__topk_dense_keys_f32__##ISA, ts__topk_dense_count_gt2_s32__##ISA,           \
                                   ts__topk_dense_gather_s32__##ISA, ts__topk_dense_select_s32__##ISA,            \
                                   ts__topk_dense_select_idx_s32__##ISA, ts__topk_dense_nth_eq_s32__##ISA})
#define TOPK_FILTER(ISA)                                                                                          \
    (p.sample_runs ? (p.bf16 ? ts__topk_filter_bf16_stream__##ISA : ts__topk_filter_f32_stream__##ISA)            \
                   : (p.bf16 ? ts__topk_filter_bf16__##ISA : ts__topk_filter_f32__##ISA))
    p.filter = p.bf16 ? ts__topk_filter_bf16__generic : ts__topk_filter_f32__generic;
    p.argmax = p.bf16 ? ts__topk_argmax_bf16__generic : ts__topk_argmax_f32__generic;
    p.dense = TOPK_DENSE_OPS(generic);
#ifdef TS_HAVE_AVX512_KERNELS
    if (isa == TS_ISA_AVX512) {
        p.filter = TOPK_FILTER(avx512);
        p.argmax = p.bf16 ? ts__topk_argmax_bf16__avx512 : ts__topk_argmax_f32__avx512;
        p.dense = TOPK_DENSE_OPS(avx512);
    } else
#endif
    {
#ifdef TS_HAVE_AVX2_KERNELS
        if (avx2) {
            p.filter = TOPK_FILTER(avx2);
            p.argmax = p.bf16 ? ts__topk_argmax_bf16__avx2 : ts__topk_argmax_f32__avx2;
            p.dense = TOPK_DENSE_OPS(avx2);
        }
#else
        (void)avx2;
#endif
    }
#undef TOPK_DENSE_OPS
#undef TOPK_FILTER

    /* Few rows: cut each row into parts so every thread streams. The result does not depend on
     * the split (entries are unique), only the speed does. */
    const int threads = ts_get_num_threads();
    p.parts = 1;
    if (batch < threads) {
        /* Every part pays its own sample and about k candidates, so a part must be long
         * enough for the streaming to dominate. Measured with a free second vCPU: 1 x 1M bf16
         * k 512 69 -> 46 us in two parts (with the second vCPU busy, the part waiting for it
         * makes the call 3x slower, as for any parallel call); k 2048 in two parts was slower
         * (131 -> 137..174 us: each part pays the full k-proportional work), hence 512 k. */
        int64_t want = ts__ceil_div(threads, batch);
        int64_t min_part = ts__max64(PART_MIN, PART_PER_K * k);
        p.parts = ts__max64(1, ts__min64(want, n / min_part));
    }
    const int64_t items = batch * p.parts;
    int64_t stage_elems, bytes;
    if (ts_mul_overflow_i64(items, k, &stage_elems) != TS_OK ||
        ts_mul_overflow_i64(stage_elems, 8, &bytes) != TS_OK || bytes > INT64_MAX / 2)
        return ts__fail(TS_ERR_OVERFLOW, "ts_topk: staging for batch %lld x k %lld overflows",
                        (long long)batch, (long long)k);
    const size_t stage_bytes = (size_t)bytes + (size_t)items * (8 + 4 + 4) + 64;
    char *s = (char *)ts__scratch(0, stage_bytes);
    if (!s) return ts__fail(TS_ERR_OUT_OF_MEMORY, "ts_topk: staging (%zu bytes)", stage_bytes);
    p.stage = (uint64_t *)s;
    p.count = (int64_t *)(s + bytes);
    p.nan = (int32_t *)(s + bytes + items * 8);
    p.ordered = p.nan + items;

    ts__parallel_for(items, 1, scan_items, &p);
    if (p.err == TS_OK) ts__parallel_for(batch, 1, merge_rows, &p);
    if (p.err != TS_OK) return ts__fail(p.err, "ts_topk: out of scratch memory");
    if (o.abort_when_nan_found) {
        for (int64_t r = 0; r < batch; r++)
            if (row_len(&p, r) > k && p.nan[r * p.parts])
                return ts__fail(TS_ERR_NONFINITE,
                                "ts_topk: input row %lld contains NaN (abort_when_nan_found)",
                                (long long)r);
    }
    ts__parallel_for(batch, 16, write_rows, &p);
    return TS_OK;
}
