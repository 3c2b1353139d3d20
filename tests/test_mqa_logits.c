/* MQA logits (DeepGEMM's lightning indexer): float64 oracle on the dequantised inputs with
 * upstream's calc_diff thresholds and exact -inf masks, generic vs AVX2 and 1/2/3 threads
 * bitwise, compressed vs full columns, bf16 outputs as the rounding of the f32 ones, FP4 and
 * MX-scaled FP8, paged vs non-paged bit equality with NaN in every unused cache byte, the
 * schedule metadata, and bad input with canaries. */
#include "ts_guard_pages.h"
#include "ts_prng.h"
#include "ts_test.h"

#include "tilestack/tilestack.h"

#include <math.h>
#include <stdlib.h>

#define CANARY 0x5A5A5A5Au

static float as_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* ---------------- inputs ---------------- */

typedef struct inputs {
    int fp4, mx;
    int64_t s, h, d, skv;
    uint8_t *q;      /* [s][h][d or d/2] */
    int32_t *q_sf;   /* [s][h] (mx) */
    uint8_t *kv;     /* [skv][d or d/2] */
    float *kv_sf;    /* [skv] (fp8) */
    int32_t *kv_sfi; /* [skv] (mx) */
    float *w;        /* [s][h] */
    uint16_t *wb;    /* bf16 weights */
    int32_t *ks, *ke;
} inputs;

static int32_t rand_sf_word(ts_prng *g, int64_t d) {
    uint8_t e[4] = {127, 127, 127, 127};
    for (int64_t b = 0; b < d / 32; b++) e[b] = (uint8_t)(121 + ts_prng_u32(g) % 12);
    return ts_pack_ue8m0x4(e);
}

static void gen_inputs(inputs *in, uint64_t seed, int fp4, int mx, int64_t s, int64_t h,
                       int64_t d, int64_t skv) {
    ts_prng g = ts_prng_seed(seed);
    memset(in, 0, sizeof(*in));
    in->fp4 = fp4;
    in->mx = mx;
    in->s = s;
    in->h = h;
    in->d = d;
    in->skv = skv;
    int64_t rb = fp4 ? d / 2 : d;
    in->q = malloc((size_t)(s * h * rb) + 1);
    in->kv = malloc((size_t)(skv * rb) + 1);
    in->q_sf = malloc((size_t)(s * h + 1) * 4);
    in->kv_sf = malloc((size_t)(skv + 1) * 4);
    in->kv_sfi = malloc((size_t)(skv + 1) * 4);
    in->w = malloc((size_t)(s * h + 1) * 4);
    in->wb = malloc((size_t)(s * h + 1) * 2);
    in->ks = malloc((size_t)(s + 1) * 4);
    in->ke = malloc((size_t)(s + 1) * 4);
    for (int64_t i = 0; i < s * h * rb; i++) {
        if (fp4) in->q[i] = (uint8_t)ts_prng_u32(&g);
        else in->q[i] = ts_f32_to_e4m3(ts_prng_uniform(&g) * 3.0f);
    }
    for (int64_t i = 0; i < skv * rb; i++) {
        if (fp4) in->kv[i] = (uint8_t)ts_prng_u32(&g);
        else in->kv[i] = ts_f32_to_e4m3(ts_prng_uniform(&g) * 300.0f);
    }
    for (int64_t i = 0; i < s * h; i++) in->q_sf[i] = rand_sf_word(&g, d);
    for (int64_t j = 0; j < skv; j++) {
        in->kv_sf[j] = (ts_prng_uniform(&g) + 1.5f) / 448.0f;
        in->kv_sfi[j] = rand_sf_word(&g, d);
    }
    for (int64_t i = 0; i < s * h; i++) {
        in->w[i] = ts_prng_uniform(&g);
        in->wb[i] = ts_f32_to_bf16(in->w[i]);
    }
    /* every range class: full, empty (ks == ke and ks > ke), prefix, suffix, middle, one key */
    for (int64_t i = 0; i < s; i++) {
        int32_t a = (int32_t)(ts_prng_u32(&g) % (uint32_t)(skv + 1));
        int32_t b = (int32_t)(ts_prng_u32(&g) % (uint32_t)(skv + 1));
        switch (i % 7) {
        case 0: a = 0; b = (int32_t)skv; break;
        case 1: b = a; break;
        case 2: if (a < b) { int32_t t = a; a = b; b = t; } if (a == b) a = b + (b < skv ? 1 : 0); if (a > skv) a = (int32_t)skv; break;
        case 3: a = 0; break;
        case 4: b = (int32_t)skv; break;
        case 5: if (a > b) { int32_t t = a; a = b; b = t; } break;
        default: if (a == skv) a--; b = a + 1; break;
        }
        in->ks[i] = a;
        in->ke[i] = b;
    }
}

static void free_inputs(inputs *in) {
    free(in->q); free(in->kv); free(in->q_sf); free(in->kv_sf); free(in->kv_sfi);
    free(in->w); free(in->wb); free(in->ks); free(in->ke);
}

static double deq(const uint8_t *row, int64_t dd, int fp4, int mx, int32_t sfw) {
    double x;
    if (fp4) {
        uint8_t c = (uint8_t)((row[dd / 2] >> (4 * (dd & 1))) & 0xF);
        x = c == 8 ? 0.0 : (double)ts_e2m1_to_f32(c);
    } else {
        x = (double)ts_e4m3_to_f32(row[dd]);
    }
    if (mx) {
        uint8_t e[4];
        ts_unpack_ue8m0x4(sfw, e);
        x *= (double)ts_ue8m0_to_f32(e[dd / 32]);
    }
    return x;
}

/* float64 oracle: logit of query i, key j (weights w, f32 values) */
static double oracle(const inputs *in, const float *w, int64_t i, int64_t j) {
    int64_t rb = in->fp4 ? in->d / 2 : in->d;
    double acc = 0.0;
    for (int64_t hh = 0; hh < in->h; hh++) {
        double sdot = 0.0;
        const uint8_t *qr = in->q + (i * in->h + hh) * rb, *kr = in->kv + j * rb;
        for (int64_t dd = 0; dd < in->d; dd++)
            sdot += deq(qr, dd, in->fp4, in->mx, in->mx ? in->q_sf[i * in->h + hh] : 0) *
                    deq(kr, dd, in->fp4, in->mx, in->mx ? in->kv_sfi[j] : 0);
        acc += (double)w[i * in->h + hh] * (sdot > 0 ? sdot : 0.0);
    }
    return in->mx ? acc : acc * (double)in->kv_sf[j];
}

/* ---------------- calls ---------------- */

typedef struct out_buf {
    int bf16;
    int64_t rows, cols, ld;
    void *data;
} out_buf;

static void out_init(out_buf *o, int bf16, int64_t rows, int64_t cols, int64_t ld) {
    o->bf16 = bf16;
    o->rows = rows;
    o->cols = cols;
    o->ld = ld;
    size_t n = (size_t)(rows * ld + 1);
    o->data = malloc(n * 4);
    for (size_t k = 0; k < n * (bf16 ? 2 : 1); k++) {
        if (bf16) ((uint16_t *)o->data)[k] = (uint16_t)CANARY;
        else ((uint32_t *)o->data)[k] = CANARY;
    }
}

static ts_tensor out_view(out_buf *o) {
    ts_tensor t = ts_tensor_2d(o->data, o->bf16 ? TS_BF16 : TS_F32, o->rows, o->cols);
    t.strides[0] = o->ld;
    return t;
}

static uint32_t out_bits(const out_buf *o, int64_t i, int64_t c) {
    return o->bf16 ? ((uint16_t *)o->data)[i * o->ld + c] : ((uint32_t *)o->data)[i * o->ld + c];
}
static double out_val(const out_buf *o, int64_t i, int64_t c) {
    uint32_t b = out_bits(o, i, c);
    return o->bf16 ? (double)ts_bf16_to_f32((uint16_t)b) : (double)as_f32(b);
}
static int out_is_canary(const out_buf *o, int64_t i, int64_t c) {
    return out_bits(o, i, c) == (o->bf16 ? (CANARY & 0xFFFF) : CANARY);
}
static int out_equal(const out_buf *a, const out_buf *b) {
    for (int64_t i = 0; i < a->rows; i++)
        for (int64_t c = 0; c < a->ld; c++)
            if (out_bits(a, i, c) != out_bits(b, i, c)) return 0;
    return 1;
}

static ts_status call_flat(const inputs *in, int wbf16, int clean, int32_t max_seqlen_k, out_buf *o) {
    int64_t rb = in->fp4 ? in->d / 2 : in->d;
    ts_dtype qt = in->fp4 ? TS_E2M1X2 : TS_E4M3;
    ts_tensor q = ts_tensor_3d(in->q, qt, in->s, in->h, rb);
    ts_tensor qsf = ts_tensor_2d(in->q_sf, TS_I32, in->s, in->h);
    ts_tensor kv = ts_tensor_2d(in->kv, qt, in->skv, rb);
    ts_tensor kvsf = in->mx ? ts_tensor_1d(in->kv_sfi, TS_UE8M0X4, in->skv)
                            : ts_tensor_1d(in->kv_sf, TS_F32, in->skv);
    ts_tensor w = wbf16 ? ts_tensor_2d(in->wb, TS_BF16, in->s, in->h)
                        : ts_tensor_2d(in->w, TS_F32, in->s, in->h);
    ts_tensor ks = ts_tensor_1d(in->ks, TS_I32, in->s), ke = ts_tensor_1d(in->ke, TS_I32, in->s);
    ts_tensor lg = out_view(o);
    return ts_fp8_fp4_mqa_logits(&q, in->mx ? &qsf : NULL, &kv, &kvsf, &w, &ks, &ke, clean,
                                 max_seqlen_k, &lg);
}

static double calc_diff_pairs(const double *x, const double *y, int64_t n) {
    double xy = 0, xx = 0;
    for (int64_t k = 0; k < n; k++) {
        xy += x[k] * y[k];
        xx += x[k] * x[k] + y[k] * y[k];
    }
    return xx == 0 ? 0.0 : 1.0 - 2.0 * xy / xx;
}

/* Full-column output against the oracle: -inf exactly outside [ks, ke) (clean), calc_diff
 * inside, canaries in the padding. */
static void check_flat(ts_test_ctx *ts_t_, const inputs *in, const float *w, const out_buf *o,
                       double tol, const char *what) {
    int64_t n = 0, bad_mask = 0, bad_pad = 0;
    double *x = malloc(sizeof(double) * (size_t)(in->s * in->skv + 1));
    double *y = malloc(sizeof(double) * (size_t)(in->s * in->skv + 1));
    for (int64_t i = 0; i < in->s; i++) {
        for (int64_t j = 0; j < in->skv; j++) {
            int inr = j >= in->ks[i] && j < in->ke[i];
            double v = out_val(o, i, j);
            if (!inr) {
                bad_mask += !(isinf(v) && v < 0);
                continue;
            }
            bad_mask += isinf(v) && v < 0;
            x[n] = v;
            y[n] = oracle(in, w, i, j);
            n++;
        }
        for (int64_t c = in->skv; c < o->ld; c++) bad_pad += !out_is_canary(o, i, c);
    }
    double diff = calc_diff_pairs(x, y, n);
    TS_CHECK_MSG(bad_mask == 0, "%s: %lld entries with the wrong -inf mask", what, (long long)bad_mask);
    TS_CHECK_MSG(bad_pad == 0, "%s: %lld padding entries written", what, (long long)bad_pad);
    TS_CHECK_MSG(diff < tol, "%s: calc_diff %.3g >= %.3g over %lld logits", what, diff, tol, (long long)n);
    free(x);
    free(y);
}

/* Run `fn` under every runnable ISA path (generic first) and 1 / 2 / 3 threads; every run must give the bits of the
 * first. The first result stays in o. */
typedef ts_status (*run_fn)(void *ctx, out_buf *o);

static void run_all_paths(ts_test_ctx *ts_t_, run_fn fn, void *ctx, out_buf *o,
                          void (*init)(out_buf *, void *), const char *what) {
    ts_isa saved_isa = ts_get_isa();
    int saved_threads = ts_get_num_threads();
    int first = 1;
    int isas[TS_ISA_COUNT_];
    const int nisa = ts_test_isas(isas);
    for (int ii = 0; ii < nisa; ii++) {
        const int isa = isas[ii];
        if (ts_set_isa((ts_isa)isa) != TS_OK) continue;
        for (int t = 1; t <= 3; t++) {
            ts_set_num_threads(t);
            if (first) {
                init(o, ctx);
                TS_CHECK_STATUS(fn(ctx, o), TS_OK);
                first = 0;
                continue;
            }
            out_buf o2;
            init(&o2, ctx);
            TS_CHECK_STATUS(fn(ctx, &o2), TS_OK);
            TS_CHECK_MSG(out_equal(o, &o2), "%s: isa %s threads %d differs from generic/1", what,
                         ts_isa_name((ts_isa)isa), t);
            free(o2.data);
        }
    }
    ts_set_isa(saved_isa);
    ts_set_num_threads(saved_threads);
}

typedef struct flat_ctx {
    const inputs *in;
    int wbf16, clean, bf16;
    int32_t max_seqlen_k;
} flat_ctx;

static ts_status flat_run(void *c, out_buf *o) {
    flat_ctx *f = (flat_ctx *)c;
    return call_flat(f->in, f->wbf16, f->clean, f->max_seqlen_k, o);
}
static void flat_init(out_buf *o, void *c) {
    flat_ctx *f = (flat_ctx *)c;
    int64_t ld;
    ts_status st = ts_mqa_logits_row_stride(f->in->skv, f->max_seqlen_k, f->bf16 ? TS_BF16 : TS_F32, &ld);
    (void)st;
    out_init(o, f->bf16, f->in->s, f->max_seqlen_k ? f->max_seqlen_k : f->in->skv, ld);
}

/* ---------------- tests ---------------- */

TS_TEST(mqa_logits_row_stride_upstream) {
    int64_t st;
    TS_CHECK_STATUS(ts_mqa_logits_row_stride(8192, 0, TS_F32, &st), TS_OK);
    TS_CHECK_EQ_INT(st, 8448); /* align(8192 + 256, 256) */
    TS_CHECK_STATUS(ts_mqa_logits_row_stride(1000, 0, TS_BF16, &st), TS_OK);
    TS_CHECK_EQ_INT(st, 1536); /* align(1256, 512) */
    TS_CHECK_STATUS(ts_mqa_logits_row_stride(5, 300, TS_F32, &st), TS_OK);
    TS_CHECK_EQ_INT(st, 512); /* align(align(300, 256), 256) */
    TS_CHECK_STATUS(ts_paged_mqa_logits_row_stride(111000, TS_F32, &st), TS_OK);
    TS_CHECK_EQ_INT(st, 111104);
    TS_CHECK_STATUS(ts_paged_mqa_logits_row_stride(100, TS_BF16, &st), TS_OK);
    TS_CHECK_EQ_INT(st, 512);
    TS_CHECK_STATUS(ts_mqa_logits_row_stride(10, 0, TS_I32, &st), TS_ERR_DTYPE);
    TS_CHECK_STATUS(ts_mqa_logits_row_stride(10, -1, TS_F32, &st), TS_ERR_INVALID_ARGUMENT);
}

TS_TEST(mqa_logits_fp8_oracle_paths) {
    inputs in;
    gen_inputs(&in, 11, 0, 0, 15, 64, 128, 131);
    flat_ctx f = {&in, 0, 1, 0, 0};
    out_buf o;
    run_all_paths(ts_t_, flat_run, &f, &o, flat_init, "fp8 f32");
    check_flat(ts_t_, &in, in.w, &o, 5e-6, "fp8 f32");
    /* legacy wrapper: the same call */
    out_buf o2;
    flat_init(&o2, &f);
    ts_tensor q = ts_tensor_3d(in.q, TS_E4M3, in.s, in.h, in.d);
    ts_tensor kv = ts_tensor_2d(in.kv, TS_E4M3, in.skv, in.d);
    ts_tensor kvsf = ts_tensor_1d(in.kv_sf, TS_F32, in.skv);
    ts_tensor w = ts_tensor_2d(in.w, TS_F32, in.s, in.h);
    ts_tensor ks = ts_tensor_1d(in.ks, TS_I32, in.s), ke = ts_tensor_1d(in.ke, TS_I32, in.s);
    ts_tensor lg = out_view(&o2);
    TS_CHECK_STATUS(ts_fp8_mqa_logits(&q, &kv, &kvsf, &w, &ks, &ke, true, 0, &lg), TS_OK);
    TS_CHECK(out_equal(&o, &o2));
    free(o2.data);
    /* weights rows with padding: the same bits */
    {
        float *wpad = malloc(sizeof(float) * (size_t)(in.s * (in.h + 3)));
        for (int64_t i = 0; i < in.s; i++)
            for (int64_t hh = 0; hh < in.h + 3; hh++)
                wpad[i * (in.h + 3) + hh] = hh < in.h ? in.w[i * in.h + hh] : NAN;
        ts_tensor wp = ts_tensor_2d(wpad, TS_F32, in.s, in.h);
        wp.strides[0] = in.h + 3;
        flat_init(&o2, &f);
        lg = out_view(&o2);
        TS_CHECK_STATUS(ts_fp8_fp4_mqa_logits(&q, NULL, &kv, &kvsf, &wp, &ks, &ke, true, 0, &lg), TS_OK);
        TS_CHECK(out_equal(&o, &o2));
        free(o2.data);
        free(wpad);
    }
    /* clean_logits = false leaves every out-of-range column untouched */
    f.clean = 0;
    flat_init(&o2, &f);
    TS_CHECK_STATUS(flat_run(&f, &o2), TS_OK);
    int64_t bad = 0;
    for (int64_t i = 0; i < in.s; i++)
        for (int64_t j = 0; j < in.skv; j++) {
            int inr = j >= in.ks[i] && j < in.ke[i];
            bad += inr ? out_bits(&o2, i, j) != out_bits(&o, i, j) : !out_is_canary(&o2, i, j);
        }
    TS_CHECK_EQ_INT(bad, 0);
    free(o2.data);
    free(o.data);
    free_inputs(&in);
}

TS_TEST(mqa_logits_compressed_bf16) {
    inputs in;
    gen_inputs(&in, 12, 0, 0, 14, 32, 64, 97);
    int32_t maxk = 0;
    for (int64_t i = 0; i < in.s; i++) if (in.ke[i] - in.ks[i] > maxk) maxk = in.ke[i] - in.ks[i];
    flat_ctx full = {&in, 0, 1, 0, 0};
    out_buf of;
    flat_init(&of, &full);
    TS_CHECK_STATUS(flat_run(&full, &of), TS_OK);
    for (int clean = 0; clean < 2; clean++) {
        flat_ctx cf = {&in, 0, clean, 0, maxk};
        out_buf oc;
        run_all_paths(ts_t_, flat_run, &cf, &oc, flat_init, "compressed");
        int64_t bad = 0;
        for (int64_t i = 0; i < in.s; i++) {
            int64_t n = in.ke[i] > in.ks[i] ? in.ke[i] - in.ks[i] : 0;
            for (int64_t t = 0; t < oc.ld; t++) {
                if (t < n) bad += out_bits(&oc, i, t) != out_bits(&of, i, in.ks[i] + t);
                else if (t < maxk && clean) bad += out_bits(&oc, i, t) != 0xFF800000u;
                else bad += !out_is_canary(&oc, i, t);
            }
        }
        TS_CHECK_MSG(bad == 0, "compressed clean=%d: %lld entries differ", clean, (long long)bad);
        free(oc.data);
    }
    /* bf16 logits (f32 and bf16 weights): the RNE of the f32 logits computed with the same
     * weight values; calc_diff within upstream's 3e-5 */
    float *wr = malloc(sizeof(float) * (size_t)(in.s * in.h));
    for (int64_t k = 0; k < in.s * in.h; k++) wr[k] = ts_bf16_to_f32(in.wb[k]);
    for (int wb = 0; wb < 2; wb++) {
        inputs in2 = in;
        if (wb) in2.w = wr;
        flat_ctx c32 = {&in2, 0, 1, 0, 0}, c16 = {&in2, wb, 1, 1, 0};
        out_buf o32, o16;
        flat_init(&o32, &c32);
        TS_CHECK_STATUS(flat_run(&c32, &o32), TS_OK);
        run_all_paths(ts_t_, flat_run, &c16, &o16, flat_init, "bf16 logits");
        int64_t bad = 0;
        for (int64_t i = 0; i < in.s; i++)
            for (int64_t j = 0; j < in.skv; j++)
                bad += out_bits(&o16, i, j) != ts_f32_to_bf16(as_f32(out_bits(&o32, i, j)));
        TS_CHECK_MSG(bad == 0, "bf16 (weights bf16 %d): %lld logits are not the RNE of f32", wb, (long long)bad);
        check_flat(ts_t_, &in2, in2.w, &o16, 3e-5, "bf16 logits");
        free(o32.data);
        free(o16.data);
    }
    free(wr);
    free(of.data);
    free_inputs(&in);
}

TS_TEST(mqa_logits_fp4_and_mx) {
    /* FP4 q/kv with UE8M0 block scales, H not a multiple of 16 (padded heads), D = 64 and 128;
     * FP8 with MX scales at D = 32 and 128; H = 40 and 72 (48 / 80 padded heads) take the
     * AVX-512 kernel's 3- and 3 + 2-pass groups, H = 64 its 4-pass one */
    const struct { int fp4; int64_t h, d; } cases[] = {
        {1, 20, 64}, {1, 64, 128}, {0, 12, 32}, {0, 40, 128}, {1, 72, 64}};
    for (int c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++) {
        inputs in;
        gen_inputs(&in, 20 + (uint64_t)c, cases[c].fp4, 1, 9, cases[c].h, cases[c].d, 77);
        flat_ctx f = {&in, 0, 1, 0, 0};
        out_buf o;
        run_all_paths(ts_t_, flat_run, &f, &o, flat_init, "fp4/mx");
        check_flat(ts_t_, &in, in.w, &o, 5e-6, cases[c].fp4 ? "fp4" : "fp8 mx");
        free(o.data);
        free_inputs(&in);
    }
}

/* ---------------- paged ---------------- */

typedef struct paged {
    int fp4, mx;
    int64_t b, next_n, h, d, block_kv, nblk, maxb, bstride;
    int32_t max_ctx;
    uint8_t *cache;
    int32_t *bt, *cl, *meta;
    int64_t nmeta;
    const inputs *src; /* q, weights, and per request a key sequence taken from src->kv */
} paged;

/* Request r's token p is src key (r * 37 + p) % skv. Unused bytes of the cache stay 0xFF
 * (NaN for e4m3 values and f32 scales). */
static void build_paged(paged *p, const inputs *src, int64_t b, int64_t next_n, int64_t block_kv,
                        const int32_t *cl, int32_t max_ctx, int64_t extra_stride) {
    memset(p, 0, sizeof(*p));
    p->src = src;
    p->fp4 = src->fp4;
    p->mx = src->mx;
    p->b = b;
    p->next_n = next_n;
    p->h = src->h;
    p->d = src->d;
    p->block_kv = block_kv;
    p->max_ctx = max_ctx;
    int64_t rb = src->fp4 ? src->d / 2 : src->d;
    p->maxb = (max_ctx + block_kv - 1) / block_kv + 1;
    p->nblk = b * p->maxb + 3;
    while (p->nblk % 7 == 0) p->nblk++; /* ids (7k + 3) % nblk must not repeat */
    p->bstride = block_kv * (rb + 4) + extra_stride;
    p->cache = malloc((size_t)(p->nblk * p->bstride));
    memset(p->cache, 0xFF, (size_t)(p->nblk * p->bstride));
    p->bt = malloc(sizeof(int32_t) * (size_t)(b * p->maxb));
    p->cl = malloc(sizeof(int32_t) * (size_t)(b * next_n));
    memcpy(p->cl, cl, sizeof(int32_t) * (size_t)(b * next_n));
    /* blocks handed out in a scrambled order; unneeded table entries hold garbage ids */
    int64_t next = 0;
    for (int64_t r = 0; r < b; r++) {
        int64_t len = 0;
        for (int64_t t = 0; t < next_n; t++) if (cl[r * next_n + t] > len) len = cl[r * next_n + t];
        int64_t need = (len + block_kv - 1) / block_kv;
        for (int64_t k = 0; k < p->maxb; k++) {
            if (k < need) {
                int64_t id = (next++ * 7 + 3) % p->nblk;
                p->bt[r * p->maxb + k] = (int32_t)id;
            } else {
                p->bt[r * p->maxb + k] = k % 2 ? -5 : 1 << 30;
            }
        }
        for (int64_t pos = 0; pos < len; pos++) {
            int64_t id = p->bt[r * p->maxb + pos / block_kv], row = pos % block_kv;
            int64_t key = (r * 37 + pos) % src->skv;
            uint8_t *base = p->cache + id * p->bstride;
            memcpy(base + row * rb, src->kv + key * rb, (size_t)rb);
            memcpy(base + block_kv * rb + row * 4, src->mx ? (const void *)&src->kv_sfi[key] : (const void *)&src->kv_sf[key], 4);
        }
    }
    p->nmeta = 5;
    p->meta = malloc(sizeof(int32_t) * 2 * (size_t)(p->nmeta + 1));
}

static void free_paged(paged *p) { free(p->cache); free(p->bt); free(p->cl); free(p->meta); }

static ts_status call_paged_with(paged *p, int clean, out_buf *o, const ts_tensor *cache_over,
                                 const ts_tensor *bt_over) {
    const inputs *s = p->src;
    int64_t rb = s->fp4 ? s->d / 2 : s->d;
    ts_dtype qt = s->fp4 ? TS_E2M1X2 : TS_E4M3;
    int64_t qshape[4] = {p->b, p->next_n, p->h, rb}, sfshape[3] = {p->b, p->next_n, p->h};
    ts_tensor q = ts_tensor_make(s->q, qt, 4, qshape);
    ts_tensor qsf = ts_tensor_make(s->q_sf, TS_I32, 3, sfshape);
    int64_t cshape[4] = {p->nblk, p->block_kv, 1, rb + 4};
    ts_tensor cache = ts_tensor_make(p->cache, TS_U8, 4, cshape);
    cache.strides[0] = p->bstride;
    ts_tensor w = ts_tensor_2d(s->w, TS_F32, p->b * p->next_n, p->h);
    ts_tensor cl = ts_tensor_2d(p->cl, TS_I32, p->b, p->next_n);
    ts_tensor bt = ts_tensor_2d(p->bt, TS_I32, p->b, p->maxb);
    ts_tensor meta = ts_tensor_2d(p->meta, TS_I32, p->nmeta + 1, 2);
    ts_status st = ts_get_paged_mqa_logits_metadata(&cl, (int32_t)p->block_kv, (int32_t)p->nmeta, &meta);
    if (st != TS_OK) return st;
    ts_tensor lg = out_view(o);
    return ts_fp8_fp4_paged_mqa_logits(&q, s->mx ? &qsf : NULL, cache_over ? cache_over : &cache,
                                       &w, &cl, bt_over ? bt_over : &bt, &meta, p->max_ctx, clean,
                                       &lg);
}

static ts_status call_paged(paged *p, int clean, out_buf *o) {
    return call_paged_with(p, clean, o, NULL, NULL);
}

typedef struct paged_ctx { paged *p; int clean; } paged_ctx;
static ts_status paged_run(void *c, out_buf *o) { return call_paged(((paged_ctx *)c)->p, ((paged_ctx *)c)->clean, o); }
static void paged_init(out_buf *o, void *c) {
    paged *p = ((paged_ctx *)c)->p;
    int64_t ld;
    ts_status st = ts_paged_mqa_logits_row_stride(p->max_ctx, TS_F32, &ld);
    (void)st;
    out_init(o, 0, p->b * p->next_n, p->max_ctx, ld);
}

/* The same logits through the non-paged API: per request, the keys gathered contiguously. */
static void check_paged_vs_flat(ts_test_ctx *ts_t_, paged *p, const out_buf *o, int clean) {
    const inputs *s = p->src;
    int64_t rb = s->fp4 ? s->d / 2 : s->d;
    int64_t bad = 0, badmask = 0;
    double *x = malloc(sizeof(double) * (size_t)(p->b * p->next_n * p->max_ctx + 1));
    double *y = malloc(sizeof(double) * (size_t)(p->b * p->next_n * p->max_ctx + 1));
    int64_t n = 0;
    for (int64_t r = 0; r < p->b; r++) {
        int64_t len = 0;
        for (int64_t t = 0; t < p->next_n; t++) if (p->cl[r * p->next_n + t] > len) len = p->cl[r * p->next_n + t];
        inputs g = *s;
        g.s = p->next_n;
        g.skv = len ? len : 1;
        g.q = s->q + r * p->next_n * s->h * rb;
        g.q_sf = s->q_sf + r * p->next_n * s->h;
        g.w = s->w + r * p->next_n * s->h;
        g.kv = malloc((size_t)(g.skv * rb));
        g.kv_sf = malloc((size_t)g.skv * 4);
        g.kv_sfi = malloc((size_t)g.skv * 4);
        memset(g.kv, 0, (size_t)(g.skv * rb));
        memset(g.kv_sf, 0, (size_t)g.skv * 4);
        memset(g.kv_sfi, 0, (size_t)g.skv * 4);
        for (int64_t pos = 0; pos < len; pos++) {
            int64_t key = (r * 37 + pos) % s->skv;
            memcpy(g.kv + pos * rb, s->kv + key * rb, (size_t)rb);
            g.kv_sf[pos] = s->kv_sf[key];
            g.kv_sfi[pos] = s->kv_sfi[key];
        }
        int32_t ks[64], ke[64];
        for (int64_t t = 0; t < p->next_n; t++) { ks[t] = 0; ke[t] = p->cl[r * p->next_n + t]; }
        g.ks = ks;
        g.ke = ke;
        out_buf of;
        int64_t ld;
        ts_status st = ts_mqa_logits_row_stride(g.skv, 0, TS_F32, &ld);
        (void)st;
        out_init(&of, 0, g.s, g.skv, ld);
        TS_CHECK_STATUS(call_flat(&g, 0, 1, 0, &of), TS_OK);
        for (int64_t t = 0; t < p->next_n; t++) {
            int64_t row = r * p->next_n + t, c = p->cl[row];
            for (int64_t col = 0; col < o->ld; col++) {
                if (col < c) {
                    bad += out_bits(o, row, col) != out_bits(&of, t, col);
                    x[n] = out_val(o, row, col);
                    y[n] = oracle(&g, g.w, t, col);
                    n++;
                } else if (col < p->max_ctx && clean) {
                    badmask += out_bits(o, row, col) != 0xFF800000u;
                } else {
                    badmask += !out_is_canary(o, row, col);
                }
            }
        }
        free(of.data);
        free(g.kv);
        free(g.kv_sf);
        free(g.kv_sfi);
    }
    double diff = calc_diff_pairs(x, y, n);
    TS_CHECK_MSG(bad == 0, "paged: %lld logits differ from the non-paged call", (long long)bad);
    TS_CHECK_MSG(badmask == 0, "paged: %lld entries outside the contexts wrong", (long long)badmask);
    TS_CHECK_MSG(diff < 5e-6, "paged: calc_diff %.3g", diff);
    free(x);
    free(y);
}

TS_TEST(mqa_logits_paged_vs_flat) {
    /* page sizes 1, 53, 64, 69; zero-length requests and queries; next_n 1..3; FP8 and FP4 */
    const struct { int fp4; int64_t b, next_n, block_kv, h, d, extra; } cases[] = {
        {0, 3, 2, 64, 64, 128, 0}, {0, 4, 1, 53, 16, 64, 12}, {0, 2, 3, 1, 32, 32, 4},
        {1, 3, 2, 69, 24, 128, 0}};
    for (int c = 0; c < 4; c++) {
        inputs in;
        int64_t nq = cases[c].b * cases[c].next_n;
        gen_inputs(&in, 40 + (uint64_t)c, cases[c].fp4, cases[c].fp4, nq, cases[c].h, cases[c].d, 150);
        int32_t cl[16];
        ts_prng g = ts_prng_seed(90 + (uint64_t)c);
        int32_t max_ctx = 230;
        for (int64_t k = 0; k < nq; k++) cl[k] = (int32_t)(ts_prng_u32(&g) % 231);
        cl[0] = 0;            /* an empty query */
        cl[nq - 1] = max_ctx; /* a full one */
        if (cases[c].b > 2) for (int64_t t = 0; t < cases[c].next_n; t++) cl[cases[c].next_n + t] = 0; /* an empty request */
        paged p;
        build_paged(&p, &in, cases[c].b, cases[c].next_n, cases[c].block_kv, cl, max_ctx, cases[c].extra);
        for (int clean = 0; clean < 2; clean++) {
            paged_ctx pc = {&p, clean};
            out_buf o;
            run_all_paths(ts_t_, paged_run, &pc, &o, paged_init, "paged");
            check_paged_vs_flat(ts_t_, &p, &o, clean);
            free(o.data);
        }
        free_paged(&p);
        free_inputs(&in);
    }
}

TS_TEST(mqa_logits_paged_metadata) {
    /* requests of 0, 600 (3 splits), 256 (1), 1 (1) tokens, next_n = 2: 5 splits on 3
     * workers -> 2, 2, 1: starts at global splits 0, 2, 4 */
    int32_t cl[8] = {0, 0, 600, 17, 3, 256, 1, 0};
    int32_t meta[8];
    ts_tensor tcl = ts_tensor_2d(cl, TS_I32, 4, 2), tm = ts_tensor_2d(meta, TS_I32, 4, 2);
    TS_CHECK_STATUS(ts_get_paged_mqa_logits_metadata(&tcl, 64, 3, &tm), TS_OK);
    const int32_t want[8] = {1, 0, 1, 2, 3, 0, 4, 0};
    for (int k = 0; k < 8; k++) TS_CHECK_EQ_INT(meta[k], want[k]);
    TS_CHECK_STATUS(ts_get_paged_mqa_logits_metadata(&tcl, 64, 4, &tm), TS_ERR_SHAPE);
    TS_CHECK_STATUS(ts_get_paged_mqa_logits_metadata(&tcl, 0, 3, &tm), TS_ERR_INVALID_ARGUMENT);
    ts_tensor t1 = ts_tensor_1d(cl, TS_I32, 8);
    TS_CHECK_STATUS(ts_get_paged_mqa_logits_metadata(&t1, 64, 3, &tm), TS_ERR_SHAPE);
    cl[3] = -1;
    TS_CHECK_STATUS(ts_get_paged_mqa_logits_metadata(&tcl, 64, 3, &tm), TS_ERR_INVALID_ARGUMENT);
}

/* ---------------- bad input ---------------- */

TS_TEST(mqa_logits_bad_input) {
    inputs in;
    gen_inputs(&in, 70, 0, 0, 6, 16, 64, 40); /* 6 queries: also the 3 x 2 paged ones */
    for (int64_t i = 0; i < in.s; i++) { in.ks[i] = 0; in.ke[i] = 40; }
    int64_t rb = in.d;
    ts_tensor q = ts_tensor_3d(in.q, TS_E4M3, in.s, in.h, rb);
    ts_tensor kv = ts_tensor_2d(in.kv, TS_E4M3, in.skv, rb);
    ts_tensor kvsf = ts_tensor_1d(in.kv_sf, TS_F32, in.skv);
    ts_tensor w = ts_tensor_2d(in.w, TS_F32, in.s, in.h);
    ts_tensor wb = ts_tensor_2d(in.wb, TS_BF16, in.s, in.h);
    ts_tensor ks = ts_tensor_1d(in.ks, TS_I32, in.s), ke = ts_tensor_1d(in.ke, TS_I32, in.s);
    ts_tensor qsf = ts_tensor_2d(in.q_sf, TS_I32, in.s, in.h);
    out_buf o;
    out_init(&o, 0, in.s, in.skv, 64);
    ts_tensor lg = out_view(&o);
#define BAD(expr, code) TS_CHECK_STATUS(expr, code)
    BAD(ts_fp8_fp4_mqa_logits(NULL, NULL, &kv, &kvsf, &w, &ks, &ke, true, 0, &lg), TS_ERR_NULL_POINTER);
    ts_tensor x = q; x.dtype = TS_BF16;
    BAD(ts_fp8_fp4_mqa_logits(&x, NULL, &kv, &kvsf, &w, &ks, &ke, true, 0, &lg), TS_ERR_DTYPE);
    x = q; x.strides[0] += 1;
    BAD(ts_fp8_fp4_mqa_logits(&x, NULL, &kv, &kvsf, &w, &ks, &ke, true, 0, &lg), TS_ERR_STRIDE);
    x = ts_tensor_3d(in.q, TS_E4M3, in.s, in.h / 2, 2 * rb / 2 * 2 - 48); /* D = 80 */
    BAD(ts_fp8_fp4_mqa_logits(&x, NULL, &kv, &kvsf, &w, &ks, &ke, true, 0, &lg), TS_ERR_SHAPE);
    x = kv; x.shape[1] = 32;
    BAD(ts_fp8_fp4_mqa_logits(&q, NULL, &x, &kvsf, &w, &ks, &ke, true, 0, &lg), TS_ERR_SHAPE);
    x = kvsf; x.dtype = TS_I32;
    BAD(ts_fp8_fp4_mqa_logits(&q, NULL, &kv, &x, &w, &ks, &ke, true, 0, &lg), TS_ERR_DTYPE);
    BAD(ts_fp8_fp4_mqa_logits(&q, &qsf, &kv, &kvsf, &w, &ks, &ke, true, 0, &lg), TS_ERR_DTYPE);
    x = kvsf; x.shape[0] = 39;
    BAD(ts_fp8_fp4_mqa_logits(&q, NULL, &kv, &x, &w, &ks, &ke, true, 0, &lg), TS_ERR_SHAPE);
    BAD(ts_fp8_fp4_mqa_logits(&q, NULL, &kv, &kvsf, &wb, &ks, &ke, true, 0, &lg), TS_ERR_DTYPE);
    x = w; x.strides[1] = 2; x.strides[0] = 32;
    BAD(ts_fp8_fp4_mqa_logits(&q, NULL, &kv, &kvsf, &x, &ks, &ke, true, 0, &lg), TS_ERR_STRIDE);
    x = ke; x.shape[0] = 4;
    BAD(ts_fp8_fp4_mqa_logits(&q, NULL, &kv, &kvsf, &w, &ks, &x, true, 0, &lg), TS_ERR_SHAPE);
    x = lg; x.strides[0] = 39;
    BAD(ts_fp8_fp4_mqa_logits(&q, NULL, &kv, &kvsf, &w, &ks, &ke, true, 0, &x), TS_ERR_STRIDE);
    x = lg; x.shape[1] = 41;
    BAD(ts_fp8_fp4_mqa_logits(&q, NULL, &kv, &kvsf, &w, &ks, &ke, true, 0, &x), TS_ERR_SHAPE);
    BAD(ts_fp8_fp4_mqa_logits(&q, NULL, &kv, &kvsf, &w, &ks, &ke, true, -3, &lg), TS_ERR_INVALID_ARGUMENT);
    ts_tensor q4 = ts_tensor_3d(in.q, TS_E2M1X2, in.s, in.h, rb / 2);
    BAD(ts_fp8_fp4_mqa_logits(&q4, NULL, &kv, &kvsf, &w, &ks, &ke, true, 0, &lg), TS_ERR_NULL_POINTER);
    BAD(ts_fp8_mqa_logits(&q, &kv, &kvsf, &w, &ks, &ke, true, 0, &lg), TS_OK);
    for (int64_t i = 0; i < o.rows * o.ld; i++) ((uint32_t *)o.data)[i] = CANARY;
    in.ke[2] = 41; /* past the keys */
    BAD(ts_fp8_fp4_mqa_logits(&q, NULL, &kv, &kvsf, &w, &ks, &ke, true, 0, &lg), TS_ERR_INVALID_ARGUMENT);
    in.ke[2] = 40;
    in.ks[3] = -1;
    BAD(ts_fp8_fp4_mqa_logits(&q, NULL, &kv, &kvsf, &w, &ks, &ke, true, 0, &lg), TS_ERR_INVALID_ARGUMENT);
    in.ks[3] = INT32_MIN;
    BAD(ts_fp8_fp4_mqa_logits(&q, NULL, &kv, &kvsf, &w, &ks, &ke, true, 0, &lg), TS_ERR_INVALID_ARGUMENT);
    in.ks[3] = 0;
    in.ke[4] = INT32_MAX;
    BAD(ts_fp8_fp4_mqa_logits(&q, NULL, &kv, &kvsf, &w, &ks, &ke, true, 0, &lg), TS_ERR_INVALID_ARGUMENT);
    in.ke[4] = 40;
    x = lg; x.shape[1] = 20;
    BAD(ts_fp8_fp4_mqa_logits(&q, NULL, &kv, &kvsf, &w, &ks, &ke, false, 20, &x), TS_ERR_INVALID_ARGUMENT);
    int64_t untouched = 0;
    for (int64_t i = 0; i < o.rows * o.ld; i++) untouched += ((uint32_t *)o.data)[i] == CANARY;
    TS_CHECK_EQ_INT(untouched, o.rows * o.ld);
    free(o.data);

    /* paged */
    int32_t cl[6] = {10, 20, 0, 0, 64, 30};
    paged p;
    build_paged(&p, &in, 3, 2, 16, cl, 64, 0);
    paged_ctx pc = {&p, 0};
    out_buf po;
    paged_init(&po, &pc);
    TS_CHECK_STATUS(call_paged(&p, 0, &po), TS_OK);
    for (int64_t i = 0; i < po.rows * po.ld; i++) ((uint32_t *)po.data)[i] = CANARY;
    int32_t saved = p.bt[2 * p.maxb + 3];
    p.bt[2 * p.maxb + 3] = (int32_t)p.nblk; /* out-of-range block id in use */
    BAD(call_paged(&p, 0, &po), TS_ERR_INVALID_ARGUMENT);
    p.bt[2 * p.maxb + 3] = -1;
    BAD(call_paged(&p, 0, &po), TS_ERR_INVALID_ARGUMENT);
    p.bt[2 * p.maxb + 3] = saved;
    p.max_ctx = 63; /* a context longer than max_context_len */
    {
        int64_t ld = po.ld;
        out_buf q2 = po;
        q2.cols = 63;
        q2.ld = ld;
        BAD(call_paged(&p, 0, &q2), TS_ERR_INVALID_ARGUMENT);
    }
    p.max_ctx = 64;
    /* metadata made for other context lengths */
    {
        int64_t qshape[4] = {3, 2, in.h, rb};
        ts_tensor pq = ts_tensor_make(in.q, TS_E4M3, 4, qshape);
        int64_t cshape[4] = {p.nblk, 16, 1, rb + 4};
        ts_tensor cache = ts_tensor_make(p.cache, TS_U8, 4, cshape);
        ts_tensor pw = ts_tensor_2d(in.w, TS_F32, 6, in.h);
        ts_tensor tcl = ts_tensor_2d(p.cl, TS_I32, 3, 2);
        ts_tensor bt = ts_tensor_2d(p.bt, TS_I32, 3, p.maxb);
        ts_tensor meta = ts_tensor_2d(p.meta, TS_I32, p.nmeta + 1, 2);
        ts_tensor plg = out_view(&po);
        TS_CHECK_STATUS(ts_get_paged_mqa_logits_metadata(&tcl, 16, (int32_t)p.nmeta, &meta), TS_OK);
        p.cl[0] = p.cl[1] = 0; /* request 0 loses its split */
        BAD(ts_fp8_paged_mqa_logits(&pq, &cache, &pw, &tcl, &bt, &meta, 64, false, &plg), TS_ERR_INVALID_ARGUMENT);
        p.cl[0] = 10;
        p.cl[1] = 20;
        ts_tensor y = cache; y.shape[3] = rb + 8; y.strides[1] = rb + 8; y.strides[0] = 16 * (rb + 8);
        BAD(ts_fp8_paged_mqa_logits(&pq, &y, &pw, &tcl, &bt, &meta, 64, false, &plg), TS_ERR_SHAPE);
        y = cache; y.strides[0] = 16 * (rb + 4) + 2;
        BAD(ts_fp8_paged_mqa_logits(&pq, &y, &pw, &tcl, &bt, &meta, 64, false, &plg), TS_ERR_STRIDE);
        y = cache; y.dtype = TS_I8;
        BAD(ts_fp8_paged_mqa_logits(&pq, &y, &pw, &tcl, &bt, &meta, 64, false, &plg), TS_ERR_DTYPE);
        y = ts_tensor_1d(p.cl, TS_I32, 6);
        BAD(ts_fp8_paged_mqa_logits(&pq, &cache, &pw, &y, &bt, &meta, 64, false, &plg), TS_ERR_SHAPE);
        y = bt; y.shape[1] = 3; /* request 2 needs 4 blocks */
        BAD(ts_fp8_paged_mqa_logits(&pq, &cache, &pw, &tcl, &y, &meta, 64, false, &plg), TS_ERR_SHAPE);
        y = meta; y.shape[1] = 3;
        BAD(ts_fp8_paged_mqa_logits(&pq, &cache, &pw, &tcl, &bt, &y, 64, false, &plg), TS_ERR_SHAPE);
        y = pw; y.shape[0] = 5;
        BAD(ts_fp8_paged_mqa_logits(&pq, &cache, &y, &tcl, &bt, &meta, 64, false, &plg), TS_ERR_SHAPE);
    }
    untouched = 0;
    for (int64_t i = 0; i < po.rows * po.ld; i++) untouched += ((uint32_t *)po.data)[i] == CANARY;
    TS_CHECK_EQ_INT(untouched, po.rows * po.ld);
#undef BAD
    free(po.data);
    free_paged(&p);
    free_inputs(&in);
}

/* ---------------- never read: guard pages ---------------- */

/* Keys outside every query's [ks, ke) sit on PROT_NONE pages: all ranges are squeezed into a
 * window [lo, lo + W) whose kv bytes fill whole pages (so the rows on either side fault), and
 * the scale vector is laid out once ending and once starting on a page boundary (rows past /
 * before the window fault). The guarded runs give the bits of the plain run. */
TS_TEST(mqa_logits_never_reads_unused_keys) {
    const int64_t pg = (int64_t)ts_guard_page();
    for (int fp4 = 0; fp4 < 2; fp4++) {
        const int64_t d = 128, rb = fp4 ? d / 2 : d, skv = 300, lo = 100, W = 2 * pg / rb;
        inputs in;
        gen_inputs(&in, 60 + (uint64_t)fp4, fp4, fp4, 14, 16, d, skv);
        for (int64_t i = 0; i < in.s; i++) { /* monotone map [0, skv] -> [lo, lo + W] */
            in.ks[i] = (int32_t)(lo + (int64_t)in.ks[i] * W / skv);
            in.ke[i] = (int32_t)(lo + (int64_t)in.ke[i] * W / skv);
        }
        uint8_t *kv0 = in.kv;
        void *sf0 = fp4 ? (void *)in.kv_sfi : (void *)in.kv_sf;
        const int64_t p0 = (lo * rb + pg - 1) / pg * pg + pg;
        ts_guard gk = ts_guard_make((size_t)(p0 + skv * rb)), gs;
        TS_CHECK(gk.base && ts_guard_open(&gk, (size_t)p0, (size_t)(W * rb)) == 0);
        memcpy(gk.base + p0, kv0 + lo * rb, (size_t)(W * rb));
        for (int mode = 0; mode < 2; mode++) { /* scales: window ends / starts on a boundary */
            const int64_t a = mode ? (lo * 4 + pg - 1) / pg * pg + pg - lo * 4
                                   : ((lo + W) * 4 + pg - 1) / pg * pg + pg - (lo + W) * 4;
            gs = ts_guard_make((size_t)(a + skv * 4));
            TS_CHECK(gs.base && ts_guard_open(&gs, (size_t)(a + lo * 4), (size_t)(W * 4)) == 0);
            memcpy(gs.base + a + lo * 4, (const uint8_t *)sf0 + lo * 4, (size_t)(W * 4));
            for (int v = 0; v < 2; v++) {
                flat_ctx f = {&in, 0, v == 0, 0, v ? (int32_t)W : 0};
                out_buf o0, o1;
                flat_init(&o0, &f);
                TS_CHECK_STATUS(flat_run(&f, &o0), TS_OK);
                in.kv = gk.base + p0 - lo * rb;
                if (fp4) in.kv_sfi = (int32_t *)(gs.base + a);
                else in.kv_sf = (float *)(gs.base + a);
                flat_init(&o1, &f);
                TS_CHECK_STATUS(flat_run(&f, &o1), TS_OK);
                in.kv = kv0;
                if (fp4) in.kv_sfi = (int32_t *)sf0;
                else in.kv_sf = (float *)sf0;
                TS_CHECK_MSG(out_equal(&o0, &o1), "fp4 %d mode %d variant %d: guarded run differs", fp4, mode, v);
                free(o0.data);
                free(o1.data);
            }
            ts_guard_free(&gs);
        }
        ts_guard_free(&gk);
        free_inputs(&in);
    }
}

/* Paged: every cache block alone at the end of its own pages, only blocks the table hands to a
 * request below its context opened (with one-token pages: no token past a context length is
 * readable), and block-table rows that end on a page boundary after their used entries. */
TS_TEST(mqa_logits_paged_never_reads_unused) {
    const int64_t pg = (int64_t)ts_guard_page();
    const struct { int fp4; int64_t block_kv; int32_t cl[8]; } cases[] = {
        {0, 1, {0, 0, 10, 4, 13, 20, 30, 1}},     /* request maxima 0, 10, 20, 30 tokens */
        {1, 64, {0, 0, 64, 3, 128, 70, 191, 150}}, /* 0, 1, 2, 3 blocks */
    };
    for (int c = 0; c < 2; c++) {
        const int64_t b = 4, next_n = 2, d = 128, rb = cases[c].fp4 ? d / 2 : d;
        inputs in;
        gen_inputs(&in, 70 + (uint64_t)c, cases[c].fp4, cases[c].fp4, b * next_n, 16, d, 150);
        paged p;
        build_paged(&p, &in, b, next_n, cases[c].block_kv, cases[c].cl, 200, 0);
        int32_t need[4];
        for (int64_t r = 0; r < b; r++) {
            int32_t m = cases[c].cl[2 * r] > cases[c].cl[2 * r + 1] ? cases[c].cl[2 * r] : cases[c].cl[2 * r + 1];
            need[r] = (int32_t)((m + p.block_kv - 1) / p.block_kv);
        }
        const int64_t bb = p.block_kv * (rb + 4), bst = (bb + pg - 1) / pg * pg;
        const size_t off = ts_guard_end_aligned(0, (size_t)bb);
        ts_guard gc = ts_guard_make((size_t)(p.nblk * bst)), gb;
        TS_CHECK(gc.base != NULL);
        for (int64_t r = 0; r < b; r++)
            for (int64_t k = 0; k < need[r]; k++) {
                int64_t id = p.bt[r * p.maxb + k];
                ts_guard_open(&gc, off + (size_t)(id * bst), (size_t)bb);
                memcpy(gc.base + off + id * bst, p.cache + id * p.bstride, (size_t)bb);
            }
        int64_t st0, st1;
        int32_t *bt = ts_guard_i32_rows(&gb, p.bt, b, 1, p.maxb, need, &st0, &st1);
        TS_CHECK(bt != NULL);
        int64_t cshape[4] = {p.nblk, p.block_kv, 1, rb + 4};
        ts_tensor cache = ts_tensor_make(gc.base + off, TS_U8, 4, cshape);
        cache.strides[0] = bst;
        ts_tensor tbt = ts_tensor_2d(bt, TS_I32, b, p.maxb);
        tbt.strides[0] = st0;
        for (int clean = 0; clean < 2; clean++) {
            paged_ctx pc = {&p, clean};
            out_buf o0, o1;
            paged_init(&o0, &pc);
            TS_CHECK_STATUS(call_paged(&p, clean, &o0), TS_OK);
            int saved = ts_get_num_threads();
            for (int th = 1; th <= 2; th++) {
                ts_set_num_threads(th);
                paged_init(&o1, &pc);
                TS_CHECK_STATUS(call_paged_with(&p, clean, &o1, &cache, &tbt), TS_OK);
                TS_CHECK_MSG(out_equal(&o0, &o1), "case %d clean %d threads %d: guarded run differs", c, clean, th);
                free(o1.data);
            }
            ts_set_num_threads(saved);
            free(o0.data);
        }
        ts_guard_free(&gc);
        ts_guard_free(&gb);
        free_paged(&p);
        free_inputs(&in);
    }
}

/* ---- the per-ISA key decoders, bit for bit ---- */

#include "attention/mqa_logits_internal.h"

/* Every path's decoder against the generic one over every e4m3 code and every e2m1x2 byte
 * (NaN codes and -0 included, which the logits themselves hide: relu turns NaN and -0 into
 * +0), with and without block scales (powers of two, some out of the normal range). */
TS_TEST(mqa_logits_decoders_every_path) {
    const ts__mqa_kernels *tabs[TS_ISA_COUNT_] = {&ts__mqa_kernels_generic};
#if defined(TS_HAVE_AVX2_KERNELS)
    tabs[TS_ISA_AVX2] = &ts__mqa_kernels_avx2;
#endif
#if defined(TS_HAVE_AVX512_KERNELS)
    tabs[TS_ISA_AVX512] = &ts__mqa_kernels_avx512;
#endif
    int isas[TS_ISA_COUNT_];
    const int nisa = ts_test_isas(isas);
    enum { D = 128, ROWS = 8 };
    static uint8_t src[ROWS * (D + 3)];
    static float sf[ROWS * 4], ref[ROWS * D], got[ROWS * D];
    for (int i = 0; i < ROWS * (D + 3); i++) src[i] = (uint8_t)(i * 7 + i / 256);
    for (int i = 0; i < ROWS * 4; i++) sf[i] = ldexpf(1.0f, (i * 29) % 300 - 150);
    for (int fp4 = 0; fp4 < 2; fp4++) {
        const int64_t rb = fp4 ? D / 2 + 3 : D + 3; /* odd row strides: unaligned rows */
        for (int with_sf = 0; with_sf < 2; with_sf++) {
            tabs[0]->decode(src, rb, ROWS, D, fp4, with_sf ? sf : NULL, 4, ref);
            for (int ii = 1; ii < nisa; ii++) {
                const ts__mqa_kernels *K = tabs[isas[ii]];
                if (!K) continue;
                memset(got, 0, sizeof got);
                K->decode(src, rb, ROWS, D, fp4, with_sf ? sf : NULL, 4, got);
                TS_CHECK_MSG(memcmp(ref, got, sizeof ref) == 0, "decode %s fp4 %d sf %d",
                             K->name, fp4, with_sf);
            }
        }
    }
}
