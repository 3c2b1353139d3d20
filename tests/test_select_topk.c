/* ts_topk (DeepSelect): exact comparison with a brute-force stable sort, upstream's property
 * checks, every input class of the issue, ISA x threads identity, NaN modes, bad input. */
#include "ts_prng.h"
#include "ts_test.h"

#include "tilestack/tilestack.h"

#include <math.h>
#include <stdlib.h>

#define CANARY32 0x5A5A5A5Au
#define PAD 5 /* extra elements after every output row: canaries */

typedef enum dist {
    D_RANDOM, D_ASC, D_DESC, D_EQUAL, D_TIES, D_SUBNORMAL, D_ZEROS, D_INF, D_BITS, D_COUNT
} dist;

static float as_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* One value's bits (f32, or bf16 in the low 16) of distribution d at position i of n; no NaN. */
static uint32_t gen_bits(ts_prng *g, dist d, int64_t i, int64_t n, bool bf16) {
    uint32_t u;
    float f;
    switch (d) {
    case D_RANDOM: f = ts_prng_uniform(g) * 100.0f; memcpy(&u, &f, 4); break;
    case D_ASC: f = (float)i - (float)n / 2; memcpy(&u, &f, 4); break;
    case D_DESC: f = (float)(n - i); memcpy(&u, &f, 4); break;
    case D_EQUAL: f = 1.5f; memcpy(&u, &f, 4); break;
    case D_TIES: f = (float)(ts_prng_u32(g) % 3); memcpy(&u, &f, 4); break;
    case D_SUBNORMAL: u = (ts_prng_u32(g) & 0x80000000u) | (ts_prng_u32(g) & (bf16 ? 0x007F0000u : 0x1Fu)); break;
    case D_ZEROS: { uint32_t r = ts_prng_u32(g) % 4; u = r == 0 ? 0x80000000u : r == 1 ? 0 : r == 2 ? 0x3f800000u : 0xbf800000u; break; }
    case D_INF: { uint32_t r = ts_prng_u32(g) % 4; u = r == 0 ? 0xff800000u : r == 1 ? 0x7f800000u : r == 2 ? 0x40000000u : 0xc0000000u; break; }
    default: /* all bit patterns but NaN */
        do u = ts_prng_u32(g); while ((u & 0x7fffffffu) > 0x7f800000u || (bf16 && (u & 0x7fff0000u) > 0x7f800000u));
        break;
    }
    if (bf16) {
        u >>= 16;
        if ((u & 0x7fffu) > 0x7f80u) u = 0x7f80u;
    }
    return u;
}

typedef struct topk_case {
    bool bf16, i64, sorted, sorted_index, rv, use_end, use_off, abort_nan;
    int64_t batch, n, k, row_stride;
    int32_t idx_fill;
    float val_fill;
    void *in;            /* batch x row_stride elements */
    int32_t *end, *off;
} topk_case;

static uint32_t in_bits(const topk_case *c, int64_t r, int64_t i) {
    if (c->bf16) return ((const uint16_t *)c->in)[r * c->row_stride + i];
    return ((const uint32_t *)c->in)[r * c->row_stride + i];
}
static float in_val(const topk_case *c, int64_t r, int64_t i) {
    uint32_t u = in_bits(c, r, i);
    return as_f32(c->bf16 ? u << 16 : u);
}

/* Brute force: stable sort of all indices by IEEE value descending, lower index first on ties. */
static const topk_case *g_cmp_case;
static int64_t g_cmp_row;
static int cmp_desc(const void *a, const void *b) {
    int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    float x = in_val(g_cmp_case, g_cmp_row, i), y = in_val(g_cmp_case, g_cmp_row, j);
    if (x > y) return -1;
    if (x < y) return 1;
    return i < j ? -1 : 1;
}
static int cmp_i64(const void *a, const void *b) {
    int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    return i < j ? -1 : i > j;
}

static bool row_has_nan(const topk_case *c, int64_t r, int64_t L) {
    for (int64_t i = 0; i < L; i++) if (in_val(c, r, i) != in_val(c, r, i)) return true;
    return false;
}

/* Expected index row (before offset) and count; NaN rows return -1. */
static int64_t reference_row(const topk_case *c, int64_t r, int64_t *out) {
    const int64_t L = c->use_end ? c->end[r] : c->n;
    if (L <= c->k) {
        for (int64_t i = 0; i < L; i++) out[i] = i;
        if (c->sorted) { g_cmp_case = c; g_cmp_row = r; qsort(out, (size_t)L, 8, cmp_desc); }
        return L;
    }
    if (row_has_nan(c, r, L)) return -1;
    int64_t *all = malloc((size_t)L * 8);
    for (int64_t i = 0; i < L; i++) all[i] = i;
    g_cmp_case = c;
    g_cmp_row = r;
    qsort(all, (size_t)L, 8, cmp_desc);
    memcpy(out, all, (size_t)c->k * 8);
    free(all);
    if (!c->sorted) qsort(out, (size_t)c->k, 8, cmp_i64);
    return c->k;
}

typedef struct outbufs { void *idx, *val; int64_t stride; } outbufs;

static outbufs alloc_out(const topk_case *c) {
    outbufs o;
    o.stride = c->k + PAD;
    size_t n = (size_t)((c->batch + 1) * o.stride);
    o.idx = malloc(n * 8);
    o.val = malloc(n * 4);
    for (size_t i = 0; i < n * 2; i++) ((uint32_t *)o.idx)[i] = CANARY32;
    for (size_t i = 0; i < n; i++) ((uint32_t *)o.val)[i] = CANARY32;
    return o;
}

static ts_status call(const topk_case *c, outbufs *o) {
    ts_tensor in = ts_tensor_2d(c->in, c->bf16 ? TS_BF16 : TS_F32, c->batch, c->n);
    in.strides[0] = c->row_stride;
    ts_tensor idx = ts_tensor_2d(o->idx, c->i64 ? TS_I64 : TS_I32, c->batch, c->k);
    idx.strides[0] = o->stride;
    ts_tensor val = ts_tensor_2d(o->val, c->bf16 ? TS_BF16 : TS_F32, c->batch, c->k);
    val.strides[0] = o->stride;
    ts_tensor end = ts_tensor_1d(c->end, TS_I32, c->batch);
    ts_tensor off = ts_tensor_1d(c->off, TS_I32, c->batch);
    ts_topk_options opt = ts_topk_default_options();
    opt.sorted = c->sorted;
    opt.sorted_index = c->sorted_index;
    opt.return_value = c->rv;
    opt.abort_when_nan_found = c->abort_nan;
    opt.indices_type = c->i64 ? TS_I64 : TS_I32;
    opt.idx_oob_fill_value = c->idx_fill;
    opt.value_oob_fill_value = c->val_fill;
    return ts_topk(&in, c->k, &opt, c->use_end ? &end : NULL, c->use_off ? &off : NULL,
                   c->rv ? &val : NULL, &idx);
}

static int64_t get_idx(const topk_case *c, const outbufs *o, int64_t r, int64_t j) {
    if (c->i64) return ((const int64_t *)o->idx)[r * o->stride + j];
    return ((const int32_t *)o->idx)[r * o->stride + j];
}
static uint32_t get_val(const topk_case *c, const outbufs *o, int64_t r, int64_t j) {
    if (c->bf16) return ((const uint16_t *)o->val)[r * o->stride + j];
    return ((const uint32_t *)o->val)[r * o->stride + j];
}
static bool is_canary_idx(const topk_case *c, const outbufs *o, int64_t r, int64_t j) {
    return c->i64 ? (uint64_t)get_idx(c, o, r, j) == ((uint64_t)CANARY32 << 32 | CANARY32)
                  : (uint32_t)get_idx(c, o, r, j) == CANARY32;
}
static bool is_canary_val(const topk_case *c, const outbufs *o, int64_t r, int64_t j) {
    return c->bf16 ? get_val(c, o, r, j) == (CANARY32 & 0xffffu) : get_val(c, o, r, j) == CANARY32;
}

/* Exact check against the brute force plus the independent property checks. Returns failures. */
static long check_case(ts_test_ctx *ts_t_, const topk_case *c, const outbufs *o, const char *tag) {
    long before = ts_t_->failures;
    int64_t *ref = malloc((size_t)(c->k > c->n ? c->k : c->n) * 8 + 8);
    for (int64_t r = 0; r < c->batch && ts_t_->failures - before < 3; r++) {
        const int64_t L = c->use_end ? c->end[r] : c->n;
        const int64_t off = c->use_off ? c->off[r] : 0;
        int64_t cnt = reference_row(c, r, ref);
        for (int64_t j = c->k; j < c->k + PAD; j++)
            TS_CHECK_MSG(is_canary_idx(c, o, r, j) && is_canary_val(c, o, r, j),
                         "%s row %lld: write past k", tag, (long long)r);
        if (cnt < 0) { /* NaN row, non-abort: sentinel in slot 0, the rest untouched */
            TS_CHECK_MSG(get_idx(c, o, r, 0) == 0x3F3F3F3F, "%s row %lld: NaN sentinel", tag, (long long)r);
            for (int64_t j = 1; j < c->k; j++)
                TS_CHECK_MSG(is_canary_idx(c, o, r, j), "%s row %lld: NaN row written", tag, (long long)r);
            for (int64_t j = 0; j < c->k; j++)
                TS_CHECK_MSG(is_canary_val(c, o, r, j), "%s row %lld: NaN row values written", tag, (long long)r);
            continue;
        }
        for (int64_t j = 0; j < cnt; j++) {
            int64_t want = c->i64 ? ref[j] + off : (int64_t)(int32_t)(uint32_t)(ref[j] + off);
            if (get_idx(c, o, r, j) != want) {
                TS_CHECK_MSG(0, "%s row %lld slot %lld: index %lld, want %lld", tag, (long long)r,
                             (long long)j, (long long)get_idx(c, o, r, j), (long long)want);
                break;
            }
            if (c->rv && get_val(c, o, r, j) != in_bits(c, r, ref[j])) {
                TS_CHECK_MSG(0, "%s row %lld slot %lld: value bits", tag, (long long)r, (long long)j);
                break;
            }
        }
        for (int64_t j = cnt; j < c->k; j++) {
            TS_CHECK_MSG(get_idx(c, o, r, j) == c->idx_fill, "%s row %lld: idx fill", tag, (long long)r);
            if (c->rv) {
                uint32_t fv;
                if (c->bf16) fv = ts_f32_to_bf16(c->val_fill);
                else memcpy(&fv, &c->val_fill, 4);
                TS_CHECK_MSG(get_val(c, o, r, j) == fv, "%s row %lld: value fill", tag, (long long)r);
            }
        }
        if (!c->rv)
            for (int64_t j = 0; j < c->k; j++)
                TS_CHECK_MSG(is_canary_val(c, o, r, j), "%s: values written without return_value", tag);
        /* Properties, independent of the reference: distinct in-range indices, min(sel) >= max(rest). */
        if (L > c->k) {
            unsigned char *seen = calloc((size_t)L, 1);
            float mn = INFINITY;
            for (int64_t j = 0; j < c->k; j++) {
                int64_t i = c->i64 ? get_idx(c, o, r, j) - off : (int64_t)(uint32_t)((uint32_t)get_idx(c, o, r, j) - (uint32_t)off);
                if (i < 0 || i >= L || seen[i]) { TS_CHECK_MSG(0, "%s row %lld: bad/duplicate index", tag, (long long)r); break; }
                seen[i] = 1;
                if (in_val(c, r, i) < mn) mn = in_val(c, r, i);
                if (j && c->sorted) TS_CHECK(as_f32(get_val(c, o, r, j - 1)) >= as_f32(get_val(c, o, r, j)));
                if (j && !c->sorted) TS_CHECK(get_idx(c, o, r, j - 1) < get_idx(c, o, r, j));
            }
            for (int64_t i = 0; i < L; i++)
                if (!seen[i] && in_val(c, r, i) > mn) { TS_CHECK_MSG(0, "%s row %lld: unselected %lld beats the selection", tag, (long long)r, (long long)i); break; }
            free(seen);
        }
    }
    for (int64_t j = 0; j < o->stride; j++) /* the row after the last one */
        TS_CHECK_MSG(is_canary_idx(c, o, c->batch, j) && is_canary_val(c, o, c->batch, j), "%s: write past batch", tag);
    free(ref);
    return ts_t_->failures - before;
}

static void fill_case(topk_case *c, ts_prng *g, dist d) {
    int64_t pad = (int64_t)(ts_prng_u32(g) % 7);
    c->row_stride = c->n + pad;
    size_t es = c->bf16 ? 2 : 4;
    c->in = malloc((size_t)(c->batch * c->row_stride + 1) * es);
    for (int64_t r = 0; r < c->batch; r++)
        for (int64_t i = 0; i < c->row_stride; i++) {
            uint32_t u = i < c->n ? gen_bits(g, d, i, c->n, c->bf16) : 0x7fc00000u; /* NaN pad: must be ignored */
            if (c->bf16) ((uint16_t *)c->in)[r * c->row_stride + i] = (uint16_t)(i < c->n ? u : 0x7fc0u);
            else ((uint32_t *)c->in)[r * c->row_stride + i] = u;
        }
    c->end = malloc((size_t)c->batch * 4 + 4);
    c->off = malloc((size_t)c->batch * 4 + 4);
    for (int64_t r = 0; r < c->batch; r++) {
        uint32_t pick = ts_prng_u32(g) % 5;
        c->end[r] = pick == 0 ? 0 : pick == 1 ? (int32_t)(ts_prng_u32(g) % (uint32_t)(c->n + 1))
                  : pick == 2 ? (int32_t)(c->k < c->n ? c->k : c->n) : (int32_t)c->n;
        int32_t base = (ts_prng_u32(g) & 1) ? (1 << 30) : -(1 << 30);
        c->off[r] = base + (int32_t)(ts_prng_u32(g) % 2001) - 1000;
    }
}

static void free_case(topk_case *c) { free(c->in); free(c->end); free(c->off); }
static void free_out(outbufs *o) { free(o->idx); free(o->val); }

/* Runs the case under every runnable path (generic, avx2, avx512, ...) and 1/2/3 threads; each
 * result must equal the reference. */
static void run_all_configs(ts_test_ctx *ts_t_, const topk_case *c, const char *tag) {
    const ts_isa saved_isa = ts_get_isa();
    const int saved_threads = ts_get_num_threads();
    int isas[TS_ISA_COUNT_];
    const int nisa = ts_test_isas(isas);
    for (int ii = 0; ii < nisa; ii++) {
        const ts_isa isa = (ts_isa)isas[ii];
        if (ts_set_isa(isa) != TS_OK) continue;
        for (int t = 1; t <= 3; t++) {
            ts_set_num_threads(t);
            outbufs o = alloc_out(c);
            ts_status st = call(c, &o);
            char full[160];
            snprintf(full, sizeof full, "%s [%s, %d thr]", tag, ts_isa_name(isa), t);
            TS_CHECK_MSG(st == TS_OK, "%s: status %d (%s)", full, (int)st, ts_last_error());
            if (st == TS_OK) check_case(ts_t_, c, &o, full);
            free_out(&o);
        }
    }
    ts_set_isa(saved_isa);
    ts_set_num_threads(saved_threads);
}

static const char *dist_name(dist d) {
    static const char *n[] = {"random", "ascending", "descending", "all-equal", "ties", "subnormal", "zeros", "inf", "bits"};
    return n[d];
}

/* Flag combos upstream tests: (sorted, sorted_index, return_value). */
static const bool k_flags[5][3] = {{0, 0, 0}, {0, 0, 1}, {1, 0, 1}, {0, 1, 1}, {0, 1, 0}};

TS_TEST(topk_exact_every_distribution) {
    ts_prng g = ts_prng_seed(0x70b0001);
    const int64_t shapes[][3] = {{3, 1, 1}, {4, 37, 5}, {3, 300, 64}, {2, 2500, 512}, {2, 9000, 100}, {2, 64, 4096}, {1, 0, 3}};
    int iter = 0;
    for (int d = 0; d < D_COUNT; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++, iter++) {
            topk_case c;
            memset(&c, 0, sizeof c);
            c.bf16 = (iter & 1) != 0;
            c.i64 = (iter & 2) != 0;
            c.batch = shapes[s][0];
            c.n = shapes[s][1];
            c.k = shapes[s][2];
            int f = (int)(ts_prng_u32(&g) % 5);
            if (c.bf16 && f == 2) f = 1;
            c.sorted = k_flags[f][0];
            c.sorted_index = k_flags[f][1];
            c.rv = k_flags[f][2];
            c.use_end = (iter % 3) != 0;
            c.use_off = (iter % 4) == 1;
            c.abort_nan = true;
            c.idx_fill = (int32_t)c.n - 2000000;
            c.val_fill = -1234123412341234.0f;
            fill_case(&c, &g, (dist)d);
            char tag[128];
            snprintf(tag, sizeof tag, "%s %s i%d N=%lld k=%lld f=%d", dist_name((dist)d),
                     c.bf16 ? "bf16" : "f32", c.i64 ? 64 : 32, (long long)c.n, (long long)c.k, f);
            run_all_configs(ts_t_, &c, tag);
            free_case(&c);
            if (TS_FAILED()) return;
        }
}

/* Rows long enough to be split across threads (and several compactions per part). */
TS_TEST(topk_long_rows_split) {
    ts_prng g = ts_prng_seed(0x70b0002);
    const dist ds[] = {D_RANDOM, D_ASC, D_TIES, D_TIES};
    for (int t = 0; t < 4; t++) {
        topk_case c;
        memset(&c, 0, sizeof c);
        c.bf16 = t == 1;
        c.i64 = t != 2;
        c.batch = 1;
        c.n = 200003;
        /* k = 24 / 100: parts of >= 65536 = 3 parts at 3 threads; t = 3: sorted ties from a
         * merge of parts (stable: equal values stay in index order) */
        c.k = t == 0 ? 2048 : t == 3 ? 100 : 24;
        c.sorted = t == 0 || t == 3;
        c.rv = true;
        c.use_off = t == 2;
        c.abort_nan = true;
        c.idx_fill = INT32_MAX;
        c.val_fill = -INFINITY;
        fill_case(&c, &g, ds[t]);
        run_all_configs(ts_t_, &c, dist_name(ds[t]));
        free_case(&c);
    }
}

/* Offsets are added in the output width: i64 does not wrap at INT32_MAX. */
TS_TEST(topk_offset_int64_width) {
    float in[8] = {0, 7, 1, 6, 2, 5, 3, 4};
    int64_t idx[2] = {0, 0};
    int32_t off = INT32_MAX;
    ts_tensor ti = ts_tensor_2d(in, TS_F32, 1, 8), to = ts_tensor_2d(idx, TS_I64, 1, 2);
    ts_tensor toff = ts_tensor_1d(&off, TS_I32, 1);
    ts_topk_options o = ts_topk_default_options();
    o.return_value = false;
    TS_CHECK_STATUS(ts_topk(&ti, 2, &o, NULL, &toff, NULL, &to), TS_OK);
    TS_CHECK_EQ_INT(idx[0], (int64_t)INT32_MAX + 1);
    TS_CHECK_EQ_INT(idx[1], (int64_t)INT32_MAX + 3);
    /* sorted: descending values, exact fills after end (end = 3 < k) */
    float vals[5];
    int64_t id5[5];
    int32_t e = 3;
    ts_tensor te = ts_tensor_1d(&e, TS_I32, 1), tv = ts_tensor_2d(vals, TS_F32, 1, 5);
    ts_tensor ti5 = ts_tensor_2d(id5, TS_I64, 1, 5);
    o = ts_topk_default_options();
    o.sorted = true;
    o.idx_oob_fill_value = -7;
    o.value_oob_fill_value = 2.5f;
    TS_CHECK_STATUS(ts_topk(&ti, 5, &o, &te, NULL, &tv, &ti5), TS_OK);
    TS_CHECK(id5[0] == 1 && id5[1] == 2 && id5[2] == 0 && id5[3] == -7 && id5[4] == -7);
    TS_CHECK(vals[0] == 7 && vals[1] == 1 && vals[2] == 0 && vals[3] == 2.5f && vals[4] == 2.5f);
}

/* NaN rows: abort -> TS_ERR_NONFINITE and nothing written; otherwise the upstream sentinel. */
/* A case whose row 1 holds the first NaN: without abort every config must match the oracle;
 * with abort the call fails naming row 1 and writes nothing. */
static void check_nan_rows(ts_test_ctx *ts_t_, topk_case *c, const char *what) {
    c->abort_nan = false;
    run_all_configs(ts_t_, c, what);
    c->abort_nan = true;
    const ts_isa saved_isa = ts_get_isa();
    int isas[TS_ISA_COUNT_];
    const int nisa = ts_test_isas(isas);
    for (int ii = 0; ii < nisa; ii++) { /* every path's filter must see the NaN */
        if (ts_set_isa((ts_isa)isas[ii]) != TS_OK) continue;
        outbufs o = alloc_out(c);
        TS_CHECK_STATUS(call(c, &o), TS_ERR_NONFINITE);
        TS_CHECK_MSG(strstr(ts_last_error(), "row 1") != NULL, "%s [%s]", what, ts_isa_name((ts_isa)isas[ii]));
        for (int64_t i = 0; i < (c->batch + 1) * o.stride; i++)
            TS_CHECK_MSG(is_canary_idx(c, &o, 0, i) && is_canary_val(c, &o, 0, i), "abort wrote output [%s]",
                         ts_isa_name((ts_isa)isas[ii]));
        free_out(&o);
    }
    ts_set_isa(saved_isa);
}

TS_TEST(topk_nan_rows) {
    ts_prng g = ts_prng_seed(0x70b0003);
    for (int variant = 0; variant < 16; variant++) { /* dtype x index type x NaN sign x k */
        topk_case c;
        memset(&c, 0, sizeof c);
        c.bf16 = variant & 1;
        c.i64 = (variant & 2) != 0;
        c.batch = 4;
        c.n = 5000;
        c.k = variant & 8 ? 512 : 64; /* 512: rows of 4000 and 5000 take the dense path */
        c.rv = true;
        c.use_end = true;
        c.idx_fill = -1;
        c.val_fill = -INFINITY;
        fill_case(&c, &g, D_RANDOM);
        c.end[0] = 5000; c.end[1] = 5000; c.end[2] = 40; c.end[3] = 4000;
        /* row 1: negative NaN (below any threshold) or positive NaN; row 2: NaN in a short row (copied through);
         * row 3: NaN past end (ignored) */
        uint32_t pos_nan = c.bf16 ? 0x7fc1u : 0x7fc00001u, neg_nan = c.bf16 ? 0xffc0u : 0xffc00000u;
        if (c.bf16) {
            uint16_t *p = c.in;
            p[1 * c.row_stride + 4321] = (uint16_t)(variant & 4 ? pos_nan : neg_nan);
            p[2 * c.row_stride + 7] = (uint16_t)pos_nan;
            p[3 * c.row_stride + 4500] = (uint16_t)pos_nan;
        } else {
            uint32_t *p = c.in;
            p[1 * c.row_stride + 4321] = variant & 4 ? pos_nan : neg_nan;
            p[2 * c.row_stride + 7] = pos_nan;
            p[3 * c.row_stride + 4500] = pos_nan;
        }
        check_nan_rows(ts_t_, &c, "nan non-abort");
        free_case(&c);
    }
}

TS_TEST(topk_stride_requirement) {
    int64_t a = 0, b = 0;
    TS_CHECK_STATUS(ts_get_stride_requirement(&a, &b), TS_OK);
    TS_CHECK(a == 1 && b == 1);
    TS_CHECK_STATUS(ts_get_stride_requirement(NULL, &b), TS_ERR_NULL_POINTER);
}

TS_TEST(topk_bad_input) {
    float in[2 * 16];
    for (int i = 0; i < 32; i++) in[i] = (float)i;
    int64_t idx[2 * 4];
    float val[2 * 4];
    int32_t idx32[2 * 4];
    uint16_t in16[32] = {0};
    for (int i = 0; i < 8; i++) { idx[i] = 77; val[i] = 77; idx32[i] = 77; }
    ts_tensor ti = ts_tensor_2d(in, TS_F32, 2, 16), to = ts_tensor_2d(idx, TS_I64, 2, 4);
    ts_tensor tv = ts_tensor_2d(val, TS_F32, 2, 4), to32 = ts_tensor_2d(idx32, TS_I32, 2, 4);
    ts_topk_options o = ts_topk_default_options();
    const int64_t bad_k[] = {0, -1, 4097, (int64_t)1 << 31};
    for (int i = 0; i < 4; i++) TS_CHECK_STATUS(ts_topk(&ti, bad_k[i], &o, NULL, NULL, &tv, &to), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_topk(NULL, 4, &o, NULL, NULL, &tv, &to), TS_ERR_NULL_POINTER);
    TS_CHECK_STATUS(ts_topk(&ti, 4, &o, NULL, NULL, &tv, NULL), TS_ERR_NULL_POINTER);
    TS_CHECK_STATUS(ts_topk(&ti, 4, &o, NULL, NULL, NULL, &to), TS_ERR_NULL_POINTER); /* return_value */
    ts_topk_options s = o; s.sorted = true; s.sorted_index = true;
    TS_CHECK_STATUS(ts_topk(&ti, 4, &s, NULL, NULL, &tv, &to), TS_ERR_INVALID_ARGUMENT);
    s = o; s.sorted = true; s.return_value = false;
    TS_CHECK_STATUS(ts_topk(&ti, 4, &s, NULL, NULL, &tv, &to), TS_ERR_INVALID_ARGUMENT);
    ts_tensor t16 = ts_tensor_2d(in16, TS_BF16, 2, 16), tv16 = ts_tensor_2d(in16, TS_BF16, 2, 4);
    s = o; s.sorted = true;
    TS_CHECK_STATUS(ts_topk(&t16, 4, &s, NULL, NULL, &tv16, &to), TS_ERR_UNSUPPORTED);
    /* dtypes */
    ts_tensor tbad = ts_tensor_2d(in, TS_I32, 2, 16);
    TS_CHECK_STATUS(ts_topk(&tbad, 4, &o, NULL, NULL, &tv, &to), TS_ERR_DTYPE);
    TS_CHECK_STATUS(ts_topk(&ti, 4, &o, NULL, NULL, &tv, &to32), TS_ERR_DTYPE); /* != indices_type */
    s = o; s.indices_type = TS_I16;
    TS_CHECK_STATUS(ts_topk(&ti, 4, &s, NULL, NULL, &tv, &to), TS_ERR_DTYPE);
    TS_CHECK_STATUS(ts_topk(&ti, 4, &o, NULL, NULL, &tv16, &to), TS_ERR_DTYPE); /* values dtype */
    /* shapes and strides */
    ts_tensor small = ts_tensor_2d(idx, TS_I64, 2, 3);
    TS_CHECK_STATUS(ts_topk(&ti, 4, &o, NULL, NULL, &tv, &small), TS_ERR_SHAPE);
    ts_tensor vsmall = ts_tensor_2d(val, TS_F32, 1, 4);
    TS_CHECK_STATUS(ts_topk(&ti, 4, &o, NULL, NULL, &vsmall, &to), TS_ERR_SHAPE);
    ts_tensor t1d = ts_tensor_1d(in, TS_F32, 32);
    TS_CHECK_STATUS(ts_topk(&t1d, 4, &o, NULL, NULL, &tv, &to), TS_ERR_SHAPE);
    ts_tensor tstr = ti; tstr.shape[1] = 8; tstr.strides[1] = 2;
    TS_CHECK_STATUS(ts_topk(&tstr, 4, &o, NULL, NULL, &tv, &to), TS_ERR_STRIDE);
    ts_tensor ostr = to; ostr.shape[1] = 2; ostr.strides[1] = 2;
    TS_CHECK_STATUS(ts_topk(&ti, 2, &o, NULL, NULL, &tv, &ostr), TS_ERR_STRIDE);
    ts_tensor overlap = to; overlap.strides[0] = 3; /* rows of 4 every 3 elements */
    TS_CHECK_STATUS(ts_topk(&ti, 4, &o, NULL, NULL, &tv, &overlap), TS_ERR_ALIASING);
    ts_tensor voverlap = tv; voverlap.strides[0] = 0;
    TS_CHECK_STATUS(ts_topk(&ti, 4, &o, NULL, NULL, &voverlap, &to), TS_ERR_ALIASING);
    /* end / offset */
    int32_t e[2] = {16, 17}, eneg[2] = {-1, 3}, off[2] = {0, 0};
    ts_tensor te = ts_tensor_1d(e, TS_I32, 2), ten = ts_tensor_1d(eneg, TS_I32, 2);
    TS_CHECK_STATUS(ts_topk(&ti, 4, &o, &te, NULL, &tv, &to), TS_ERR_INVALID_ARGUMENT);
    TS_CHECK_STATUS(ts_topk(&ti, 4, &o, &ten, NULL, &tv, &to), TS_ERR_INVALID_ARGUMENT);
    ts_tensor te64 = ts_tensor_1d(idx, TS_I64, 2), te1 = ts_tensor_1d(e, TS_I32, 1);
    TS_CHECK_STATUS(ts_topk(&ti, 4, &o, &te64, NULL, &tv, &to), TS_ERR_DTYPE);
    TS_CHECK_STATUS(ts_topk(&ti, 4, &o, &te1, NULL, &tv, &to), TS_ERR_SHAPE);
    ts_tensor toff = ts_tensor_1d(off, TS_I32, 1);
    TS_CHECK_STATUS(ts_topk(&ti, 4, &o, NULL, &toff, &tv, &to), TS_ERR_SHAPE);
    for (int i = 0; i < 8; i++) TS_CHECK(idx[i] == 77 && val[i] == 77 && idx32[i] == 77);
    /* k = 4096 with N = 16 is accepted (everything is filled) */
    static int64_t big[4096];
    ts_tensor tb = ts_tensor_2d(big, TS_I64, 1, 4096), ti1 = ts_tensor_2d(in, TS_F32, 1, 16);
    s = o; s.return_value = false;
    TS_CHECK_STATUS(ts_topk(&ti1, 4096, &s, NULL, NULL, NULL, &tb), TS_OK);
    TS_CHECK(big[15] == 15 && big[16] == INT32_MAX && big[4095] == INT32_MAX);
}

/* Rows where the first threshold estimated from a strided sample is wrong: spikes on a regular
 * grid (what a strided sample sees) and fewer of them than k, so a sample threshold would keep
 * too few values and the row must be scanned again; plus shapes where the sample is used and
 * the buffer still fills and is cut (N a small multiple of k, long rows with small k). */
TS_TEST(topk_sampled_threshold_exact) {
    ts_prng g = ts_prng_seed(0x70b0003);
    const int64_t shapes[][4] = {/* n, k, spike period (0: none), dist */
                                 {65536, 3000, 32, D_RANDOM}, {65536, 4096, 16, D_RANDOM},
                                 {20000, 4096, 5, D_TIES}, {8192, 2048, 0, D_RANDOM},
                                 {65536, 512, 0, D_RANDOM}, {65536, 700, 0, D_ASC},
                                 {100000, 1, 0, D_DESC}, {30000, 20, 97, D_BITS},
                                 /* one spike on the small-k sample's grid (stride 256, offset
                                  * 128): its threshold keeps 1 < k, the pseudo-random re-scan
                                  * gives unordered entries; ties sorted from in-order entries */
                                 {65536, 5, -128, D_ASC}, {100000, 300, 0, D_TIES}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        for (int bf = 0; bf < 2; bf++) {
            topk_case c;
            memset(&c, 0, sizeof c);
            c.bf16 = bf == 1;
            c.i64 = bf == 0;
            c.batch = 2;
            c.n = shapes[s][0];
            c.k = shapes[s][1];
            c.sorted = bf == 0;
            c.rv = true;
            c.abort_nan = true;
            c.idx_fill = INT32_MAX;
            c.val_fill = -INFINITY;
            fill_case(&c, &g, (dist)shapes[s][3]);
            const int64_t per = shapes[s][2];
            for (int64_t r = 0; per && r < c.batch; r++)
                for (int64_t i = per < 0 ? -per : per / 2; i < c.n; i += per < 0 ? c.n : per) {
                    if (c.bf16) ((uint16_t *)c.in)[r * c.row_stride + i] = 0x4700u; /* 32768 */
                    else ((float *)c.in)[r * c.row_stride + i] = 1.0e30f;
                }
            char tag[128];
            snprintf(tag, sizeof tag, "%s N=%lld k=%lld spikes/%lld", c.bf16 ? "bf16" : "f32",
                     (long long)c.n, (long long)c.k, (long long)per);
            run_all_configs(ts_t_, &c, tag);
            free_case(&c);
        }
    }
}

/* The dense path (rows of 1024 .. 65536 values with L <= 32 k): sample bracket + gather, key
 * bisection (wide key ranges), one key holding more than the gather limit (ties: the pivot is
 * found by index), ends that put rows on either side of the length limits, every distribution,
 * both dtypes, sorted and index-ordered outputs. */
TS_TEST(topk_dense_rows_exact) {
    ts_prng g = ts_prng_seed(0x70b0004);
    const int64_t shapes[][2] = {{1024, 32}, {1500, 700}, {4096, 128}, {8192, 2048},
                                 {8192, 512}, {20000, 4096}, {65536, 2048}, {1100, 1099}};
    int iter = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int d = 0; d < D_COUNT; d++, iter++) {
            if (shapes[s][0] > 10000 && d != D_RANDOM && d != D_TIES && d != D_ASC) continue;
            topk_case c;
            memset(&c, 0, sizeof c);
            c.bf16 = (iter & 1) != 0;
            c.i64 = (iter & 2) != 0;
            c.batch = 2;
            c.n = shapes[s][0];
            c.k = shapes[s][1];
            c.sorted = !c.bf16 && (iter & 4);
            c.sorted_index = !c.sorted && (iter & 8);
            c.rv = c.sorted || (iter & 16);
            c.use_end = (iter % 3) == 0;
            c.use_off = (iter % 5) == 1;
            c.abort_nan = true;
            c.idx_fill = -7;
            c.val_fill = -2.0f;
            fill_case(&c, &g, (dist)d);
            if (c.use_end) { /* one full row, one just long enough for the dense path */
                c.end[0] = (int32_t)c.n;
                c.end[1] = (int32_t)(c.n > 1024 ? 1024 : c.n);
            }
            char tag[128];
            snprintf(tag, sizeof tag, "dense %s %s N=%lld k=%lld", dist_name((dist)d),
                     c.bf16 ? "bf16" : "f32", (long long)c.n, (long long)c.k);
            run_all_configs(ts_t_, &c, tag);
            free_case(&c);
            if (TS_FAILED()) return;
        }
}

/* Rows taken to come from DRAM (the batch exceeds half of L3) are sampled in runs of
 * neighbours; the hook forces that path on small inputs: spikes on and off the run grid,
 * ties, sorted rows, both dtypes, 1 - 3 threads (split parts sample their own runs). */
extern double ts__topk_dram_scale;
TS_TEST(topk_sample_runs_exact) {
    const double saved = ts__topk_dram_scale;
    ts__topk_dram_scale = 0.0;
    ts_prng g = ts_prng_seed(0x70b0005);
    const int64_t shapes[][4] = {/* n, k, spike period, dist */
                                 {70000, 512, 0, D_RANDOM}, {100000, 300, 781, D_RANDOM},
                                 {70000, 2000, 0, D_TIES}, {90000, 128, 0, D_ASC},
                                 {80000, 1000, 0, D_DESC}, {140000, 200, 0, D_RANDOM}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        for (int bf = 0; bf < 2; bf++) {
            topk_case c;
            memset(&c, 0, sizeof c);
            c.bf16 = bf == 1;
            c.i64 = bf == 0;
            c.batch = 1; /* one row: at 2 - 3 threads the long rows are split */
            c.n = shapes[s][0];
            c.k = shapes[s][1];
            c.sorted = bf == 0 && (s & 1);
            c.rv = c.sorted || (s & 2);
            c.use_end = s == 1;
            c.abort_nan = true;
            c.idx_fill = INT32_MAX;
            c.val_fill = -INFINITY;
            fill_case(&c, &g, (dist)shapes[s][3]);
            const int64_t per = shapes[s][2];
            for (int64_t r = 0; per && r < c.batch; r++)
                for (int64_t i = per / 2; i < c.n; i += per) {
                    if (c.bf16) ((uint16_t *)c.in)[r * c.row_stride + i] = 0x4700u;
                    else ((float *)c.in)[r * c.row_stride + i] = 1.0e30f;
                }
            char tag[128];
            snprintf(tag, sizeof tag, "runs %s N=%lld k=%lld", c.bf16 ? "bf16" : "f32",
                     (long long)c.n, (long long)c.k);
            run_all_configs(ts_t_, &c, tag);
            free_case(&c);
        }
    }
    ts__topk_dram_scale = saved;
}

/* k = 1 takes a single max pass (block maxima, then the first lane equal to the winning block's
 * max): every distribution, both dtypes, rows around the 1024-value block, a split row, the
 * maximum planted on block edges and repeated in a later block (the lower index must win),
 * rows of only -inf or only +-0, and NaN of either sign in abort and non-abort mode. */
TS_TEST(topk_k1_argmax_exact) {
    ts_prng g = ts_prng_seed(0x70b0006);
    const int64_t ns[] = {2, 31, 1024, 1025, 2047, 5000, 140001};
    int iter = 0;
    for (size_t s = 0; s < sizeof ns / sizeof ns[0]; s++)
        for (int d = 0; d < D_COUNT; d++, iter++) {
            if (ns[s] > 10000 && d != D_RANDOM && d != D_TIES && d != D_ASC && d != D_ZEROS) continue;
            topk_case c;
            memset(&c, 0, sizeof c);
            c.bf16 = (iter & 1) != 0;
            c.i64 = (iter & 2) != 0;
            c.batch = ns[s] > 10000 ? 1 : 4;
            c.n = ns[s];
            c.k = 1;
            c.sorted = !c.bf16 && (iter & 4);
            c.sorted_index = !c.sorted && (iter & 8);
            c.rv = c.sorted || (iter & 16);
            c.use_end = c.batch > 1 && (iter % 3) == 0;
            c.use_off = (iter % 5) == 1;
            c.abort_nan = true;
            c.idx_fill = -7;
            c.val_fill = -2.0f;
            fill_case(&c, &g, (dist)d);
            if (c.use_end) c.end[0] = (int32_t)c.n;
            const uint32_t big = c.bf16 ? 0x7f7fu : 0x7f7fffffu, ninf = c.bf16 ? 0xff80u : 0xff800000u;
            for (int64_t r = 0; r < c.batch; r++) {
                int64_t at[2] = {-1, -1};
                if (r == 1) { at[0] = c.n - 1; }                                  /* last */
                if (r == 2) { at[0] = c.n > 1024 ? 1023 : 0; at[1] = c.n - 1; }   /* tie later */
                if (r == 3 && c.n > 1024) { at[0] = 1024; at[1] = c.n > 2048 ? 2048 : 1025; }
                for (int q = 0; q < 2; q++) {
                    if (at[q] < 0) continue;
                    if (c.bf16) ((uint16_t *)c.in)[r * c.row_stride + at[q]] = (uint16_t)big;
                    else ((uint32_t *)c.in)[r * c.row_stride + at[q]] = big;
                }
            }
            if (d == D_EQUAL && c.batch > 1) /* row 1: -inf only */
                for (int64_t i = 0; i < c.n; i++) {
                    if (c.bf16) ((uint16_t *)c.in)[c.row_stride + i] = (uint16_t)ninf;
                    else ((uint32_t *)c.in)[c.row_stride + i] = ninf;
                }
            if (d == D_ZEROS) /* row 0: +-0 only, -0 first */
                for (int64_t i = 0; i < c.n; i++) {
                    uint32_t z = (i == 0 || (ts_prng_u32(&g) & 1)) ? (c.bf16 ? 0x8000u : 0x80000000u) : 0;
                    if (c.bf16) ((uint16_t *)c.in)[i] = (uint16_t)z;
                    else ((uint32_t *)c.in)[i] = z;
                }
            char tag[128];
            snprintf(tag, sizeof tag, "k1 %s %s N=%lld", dist_name((dist)d), c.bf16 ? "bf16" : "f32",
                     (long long)c.n);
            run_all_configs(ts_t_, &c, tag);
            free_case(&c);
            if (TS_FAILED()) return;
        }
    for (int variant = 0; variant < 8; variant++) { /* NaN: dtype x sign x position */
        topk_case c;
        memset(&c, 0, sizeof c);
        c.bf16 = variant & 1;
        c.i64 = true;
        c.batch = 3;
        c.n = 3000;
        c.k = 1;
        c.rv = true;
        c.idx_fill = -1;
        c.val_fill = -INFINITY;
        fill_case(&c, &g, D_RANDOM);
        const int64_t pos = variant & 4 ? 2999 : 1500; /* in a block / in the tail */
        const uint32_t nanb = c.bf16 ? (variant & 2 ? 0xffc1u : 0x7fc0u) : (variant & 2 ? 0xffc00001u : 0x7fc00000u);
        if (c.bf16) ((uint16_t *)c.in)[c.row_stride + pos] = (uint16_t)nanb;
        else ((uint32_t *)c.in)[c.row_stride + pos] = nanb;
        check_nan_rows(ts_t_, &c, "k1 nan non-abort");
        free_case(&c);
    }
}

/* The sample (runs of one cache line for rows in cache) sees spikes in its first runs: its
 * threshold is then above the k-th best (fewer than k values reach it) and the row must be
 * re-scanned without it. For N = 65536: k = 300, spike windows on the first five sampled runs
 * (bf16: runs of 32 every 200 values; f32: runs of 16 every 100); k = 5 (1024-value sample),
 * one spike in the first run (bf16 at 1024, f32 at 512). The answer must not depend on whether
 * the re-scan happens (checked once by instrumenting: every case re-scans). */
TS_TEST(topk_sample_rescan_exact) {
    ts_prng g = ts_prng_seed(0x70b0007);
    for (int v = 0; v < 8; v++) {
        topk_case c;
        memset(&c, 0, sizeof c);
        c.bf16 = v & 1;
        c.i64 = true;
        c.batch = 1;
        c.n = 65536;
        c.k = v & 4 ? 5 : 300;
        c.sorted = !c.bf16 && (v & 2);
        c.rv = true;
        c.abort_nan = true;
        c.idx_fill = INT32_MAX;
        c.val_fill = -INFINITY;
        fill_case(&c, &g, v & 2 ? D_ASC : D_RANDOM);
        const int64_t period = c.bf16 ? 200 : 100, w = c.bf16 ? 32 : 16;
        for (int64_t i = 0; i < 5 * period; i++) {
            if (c.k == 5) i = c.bf16 ? 1024 : 512; /* one spike only */
            else if (i % period < period / 2 - w / 2 - 4 || i % period >= period / 2 + w / 2 + 4) continue;
            if (c.bf16) ((uint16_t *)c.in)[i] = 0x4700u;
            else ((float *)c.in)[i] = 1.0e30f;
        }
        char tag[64];
        snprintf(tag, sizeof tag, "rescan %s k=%lld", c.bf16 ? "bf16" : "f32", (long long)c.k);
        run_all_configs(ts_t_, &c, tag);
        free_case(&c);
    }
}
