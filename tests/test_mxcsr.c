/* No hot loop takes a subnormal operand or produces a subnormal result (design.md, "Fast on
 * every CPU"): each op family runs on inputs holding every subnormal code of its formats (e4m3
 * 0x01-0x07 / 0x81-0x87, e2m1 codes 1 / 9 = +-0.5, e5m2 0x01-0x03 / 0x81-0x83, bf16 tiny
 * values) plus tiny normal values, on every ISA path this machine runs, and the MXCSR sticky
 * flags DE (denormal operand) and UE (underflow) must stay clear on every pool thread
 * (tests/ts_mxcsr.h). Intel cores take a ~100-cycle assist for each such SIMD op; AMD does not,
 * so only the flags show it everywhere.
 *
 * Inputs are chosen so that the exact math never needs a subnormal: "tiny" values are 2^-40 ..
 * 2^-60 in magnitude (products of two stay >= 2^-120, and scales stay near 1), so a flag means
 * the kernel itself made one (a code read as an f32 subnormal, a ue8m0 padding byte 0 decoded
 * to 2^-127, ...). No input is itself an f32 subnormal, except where a conversion's decoded
 * output is exactly one and is built with integer operations (noted at the case).
 *
 * Every op runs once before the measured run, so one-time set-up (tables, packing, scratch
 * growth) is outside the measurement: a flag seen in the measured run comes from work done on
 * every call. The AOT tile kernels are in tests/test_mxcsr_tk.c; MegaMoE, the EP low-latency
 * path and LogFMT, which need MPI, in tests/ep/test_mxcsr_ep.c. */
#include "test_mxcsr_common.h"

#include "ts_prng.h"

#include "core/internal.h"
#include "ep/ep_kernels.h"
#include "gemm/gemm_kernels.h"
#include "ep/ep_ll_kernels.h"
#include "tilestack/model.h"
#include "tilestack/tilestack.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================ the guard itself */

typedef struct self_ctx {
    atomic_int calls;
    pthread_t who[64];
    int flag_tid; /* this tid makes an underflow (-1: none) */
} self_ctx;

static void self_task(void *vc, int tid, int nthreads) {
    self_ctx *c = vc;
    (void)nthreads;
    atomic_fetch_add(&c->calls, 1);
    if (tid < 64) c->who[tid] = pthread_self();
    if (tid == c->flag_tid) {
        volatile float a = 1e-30f, b = 1e-20f;
        volatile float p = a * b; /* subnormal result: UE (and PE) */
        (void)p;
    }
}

static void nested_noop(void *vc, int tid, int nthreads) { (void)vc, (void)tid, (void)nthreads; }
static void nested_task(void *vc, int64_t begin, int64_t end, int tid) {
    (void)begin, (void)end, (void)tid;
    if (ts__pool_on_each_thread(nested_noop, NULL) == -1) atomic_fetch_add((atomic_int *)vc, 1);
}

/* ts__pool_on_each_thread reaches every pool thread once, and the guard sees a flag raised on
 * a worker only, without touching FTZ / DAZ or the other MXCSR bits. */
TS_TEST(mxcsr_guard_self_test) {
    if (!ts_mxcsr_supported()) {
        printf("    mxcsr_guard_self_test: skipped: no MXCSR on this CPU\n");
        return;
    }
    const int saved = ts_get_num_threads();
    for (int nt = 1; nt <= 3; nt++) {
        ts_set_num_threads(nt);
        self_ctx c;
        memset(&c, 0, sizeof c);
        c.flag_tid = -1;
        TS_CHECK_EQ_INT(ts__pool_on_each_thread(self_task, &c), nt);
        TS_CHECK_EQ_INT(atomic_load(&c.calls), nt);
        TS_CHECK(pthread_equal(c.who[0], pthread_self()));
        for (int i = 0; i < nt; i++)
            for (int j = 0; j < i; j++) TS_CHECK_MSG(!pthread_equal(c.who[i], c.who[j]), "tids %d and %d share a thread", i, j);
        const unsigned before = ts_mxcsr_get();
        ts_mxcsr_clear_all();
        TS_CHECK_EQ_INT(ts_mxcsr_read_all(), 0);
        c.flag_tid = nt - 1;
        ts__pool_on_each_thread(self_task, &c);
        unsigned fl = ts_mxcsr_read_all();
        TS_CHECK_MSG(fl & TS_MXCSR_UE, "%d threads: an underflow on tid %d was not seen (%s)", nt, nt - 1, ts_mxcsr_str(fl));
        ts_mxcsr_clear_all();
        TS_CHECK_EQ_INT(ts_mxcsr_read_all(), 0);
        /* nothing but DE / UE changed on the caller (FTZ, DAZ, masks, rounding) */
        TS_CHECK_EQ_INT(ts_mxcsr_get() & ~TS_MXCSR_GUARD & ~0x3Fu, before & ~TS_MXCSR_GUARD & ~0x3Fu);
        TS_CHECK_EQ_INT(ts_mxcsr_get() & 0x8040u, 0); /* FTZ, DAZ stay off (the default) */
    }
    /* from inside a pool task it refuses (the pool is busy with that very job) */
    ts_set_num_threads(2);
    atomic_int nested;
    atomic_init(&nested, 0);
    ts__parallel_for(2, 1, nested_task, &nested);
    TS_CHECK_EQ_INT(atomic_load(&nested), 2);
    ts_set_num_threads(saved);
}

/* ================================================================ converters */

typedef struct cvt_ctx {
    const void *src;
    ts_dtype sd, dd;
    void *dst;
    int64_t n;
} cvt_ctx;

static ts_status cvt_op(void *vc) {
    cvt_ctx *c = vc;
    return ts_convert(c->src, c->sd, c->dst, c->dd, c->n);
}

/* f32 inputs for the encoders: the exact values of every code of every narrow format (so each
 * subnormal code is an output), tiny normal f32 values, and ordinary ones. None is itself an
 * f32 subnormal. `f16_safe` drops the values that must underflow f16 (see the f16 case). */
static float *encoder_inputs(int64_t *n_out, int f16_safe) {
    int64_t cap = 256 * 2 + 16 + 64 + 256 + 65536 + 64, n = 0;
    float *v = malloc((size_t)cap * 4);
    for (int c = 0; c < 256; c++) {
        float e4 = ts_e4m3_to_f32((uint8_t)c), e5 = ts_e5m2_to_f32((uint8_t)c);
        if (!isnan(e4)) v[n++] = e4;
        if (!isnan(e5) && !isinf(e5)) v[n++] = e5;
    }
    for (int c = 0; c < 16; c++) v[n++] = ts_e2m1_to_f32((uint8_t)c);
    /* f16 codes: every finite one (subnormals included), widened exactly */
    for (int c = 0; c < 65536; c++) {
        float f = ts_f16_to_f32((uint16_t)c);
        if (isfinite(f)) v[n++] = f;
    }
    if (!f16_safe) {
        static const float tiny[] = {0x1p-126f, -0x1p-126f, 0x1p-125f, 0x1.8p-120f, 0x1p-100f,
                                     -0x1p-90f, 0x1p-60f, -0x1.4p-50f, 0x1p-40f, 0x1p-30f,
                                     -0x1p-25f, 0x1p-20f, 1e-37f, -3e-38f, 0x1.fffffep-126f};
        for (size_t i = 0; i < sizeof tiny / sizeof tiny[0]; i++) v[n++] = tiny[i];
    }
    static const float ordinary[] = {1.0f, -1.0f, 0.1f, 3.14159f, -2.5f, 448.0f, 6.0f, 65504.0f};
    for (size_t i = 0; i < sizeof ordinary / sizeof ordinary[0]; i++) v[n++] = ordinary[i];
    while (n % 16) v[n++] = 0.25f; /* whole e5m6 groups and e2m1 pairs */
    *n_out = n;
    return v;
}

TS_TEST(mxcsr_convert_bulk) {
    mx_fam f = mx_begin(ts_t_, "bulk converters (ts_convert)");
    if (!f.ok) return;
    int64_t n = 0, nsafe = 0;
    float *x = encoder_inputs(&n, 0), *xs = encoder_inputs(&nsafe, 1);
    uint8_t *dst = malloc((size_t)n * 4 + 64);
    /* f32 -> narrow formats. f16 is the one target format with subnormals that a finite f32
     * must round into: vcvtps2ph (AVX2) raises UE exactly when a value rounds inexactly into
     * the f16 subnormal range, which is the conversion's own result, not a hot loop's
     * intermediate; the f16 case therefore takes the inputs without such values (every exact
     * f16 subnormal is still there). */
    static const ts_dtype enc[] = {TS_BF16, TS_F16, TS_E4M3, TS_E5M2, TS_E2M1X2, TS_E5M6X8};
    for (size_t i = 0; i < sizeof enc / sizeof enc[0]; i++) {
        cvt_ctx c = {enc[i] == TS_F16 ? xs : x, TS_F32, enc[i], dst, enc[i] == TS_F16 ? nsafe : n};
        char what[64];
        snprintf(what, sizeof what, "f32 -> %s", ts_dtype_name(enc[i]));
        mx_run(&f, what, cvt_op, &c);
    }
    /* bf16 -> e4m3 / e2m1x2: the bf16 of the same values */
    uint16_t *xb = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) xb[i] = ts_f32_to_bf16(x[i]);
    {
        cvt_ctx c = {xb, TS_BF16, TS_E4M3, dst, n};
        mx_run(&f, "bf16 -> e4m3", cvt_op, &c);
        cvt_ctx c2 = {xb, TS_BF16, TS_E2M1X2, dst, n};
        mx_run(&f, "bf16 -> e2m1x2", cvt_op, &c2);
    }
    /* decoders: every code. bf16 and ue8m0 have codes whose exact f32 value is an f32
     * subnormal (bf16 exponent 0; ue8m0 byte 0 = 2^-127); their decoders build the bits with
     * integer shifts, so no FP instruction sees them and no flag may appear. */
    uint16_t *c16 = malloc(65536 * 2);
    uint8_t *c8 = malloc(256 * 3 + 16);
    for (int i = 0; i < 65536; i++) c16[i] = (uint16_t)i;
    for (int i = 0; i < 256 * 3; i++) c8[i] = (uint8_t)(i * 7 + (i >> 8));
    float *out = malloc(65536 * 4 + 64);
    {
        cvt_ctx cs[] = {{c16, TS_BF16, TS_F32, out, 65536}, {c16, TS_F16, TS_F32, out, 65536},
                        {c8, TS_E4M3, TS_F32, out, 256},    {c8, TS_E5M2, TS_F32, out, 256},
                        {c8, TS_UE8M0, TS_F32, out, 256},   {c8, TS_E2M1X2, TS_F32, out, 512},
                        {c8, TS_E5M6X8, TS_F32, out, 512}};
        for (int i = 0; i < 256; i++) c8[i] = (uint8_t)i; /* e4m3 / e5m2 / ue8m0 / e2m1 pairs */
        for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
            char what[64];
            snprintf(what, sizeof what, "%s -> f32", ts_dtype_name(cs[i].sd));
            mx_run(&f, what, cvt_op, &cs[i]);
        }
    }
    mx_end(&f);
    free(x), free(xs), free(dst), free(xb), free(c16), free(c8), free(out);
}

/* ================================================================ quantisers */

typedef struct quant_ctx {
    int kind; /* 0 token fp8, 1 block fp8, 2 channel fp8, 3 token fp4, 4 cast back fp8, 5 fp4 */
    ts_tensor x, q, sf, out;
    bool ue8m0, packed;
    int64_t gk;
    ts_fp4_rounding rnd;
} quant_ctx;

static ts_status quant_op(void *vc) {
    quant_ctx *c = vc;
    switch (c->kind) {
    case 0: return ts_per_token_cast_to_fp8(&c->x, c->ue8m0, c->gk, c->packed, &c->q, &c->sf);
    case 1: return ts_per_block_cast_to_fp8(&c->x, c->ue8m0, c->gk, &c->q, &c->sf);
    case 2: return ts_per_channel_cast_to_fp8(&c->x, c->ue8m0, c->gk, &c->q, &c->sf);
    case 3:
        return ts_per_token_cast_to_fp4(&c->x, c->ue8m0, c->gk, c->packed, c->rnd, &c->q, &c->sf);
    case 4: return ts_cast_back_from_fp8(&c->q, &c->sf, 1, c->gk, &c->out);
    default: return ts_cast_back_from_fp4(&c->q, &c->sf, 1, c->gk, &c->out);
    }
}

TS_TEST(mxcsr_quant) {
    mx_fam f = mx_begin(ts_t_, "quantisers (quant.h)");
    if (!f.ok) return;
    const int64_t M = 256, N = 512 + 64; /* a K tail: packed scale words with zero padding */
    float *x32 = malloc((size_t)(M * N) * 4);
    uint16_t *xb = malloc((size_t)(M * N) * 2), *xh = malloc((size_t)(M * N) * 2);
    uint8_t *q = malloc((size_t)(M * N));
    float *sf = malloc((size_t)(M * N) * 4);
    float *out = malloc((size_t)(M * N) * 4);
    static const ts_dtype xdt[] = {TS_BF16, TS_F16, TS_F32};
    for (int pass = 0; pass < 2; pass++) {
        quant_input(x32, M, N, pass ? 6.0f : 448.0f);
        for (int64_t i = 0; i < M * N; i++) xb[i] = ts_f32_to_bf16(x32[i]), xh[i] = ts_f32_to_f16(x32[i]);
        for (size_t di = 0; di < 3; di++) {
            void *xd = xdt[di] == TS_BF16 ? (void *)xb : xdt[di] == TS_F16 ? (void *)xh : (void *)x32;
            for (int ue = 0; ue < 2; ue++) {
                char what[96];
                quant_ctx c = {0};
                c.x = ts_tensor_2d(xd, xdt[di], M, N);
                c.ue8m0 = ue;
                /* per-token fp8, gran 128 and 32, f32 or packed scales */
                for (int g = 0; g < 2; g++)
                    for (int pk = 0; pk <= ue; pk++) {
                        c.kind = 0, c.gk = g ? 32 : 128, c.packed = pk;
                        int64_t ns = (N + c.gk - 1) / c.gk;
                        c.q = ts_tensor_2d(q, TS_E4M3, M, N);
                        c.sf = ts_tensor_2d(sf, pk ? TS_I32 : TS_F32, M, pk ? (ns + 3) / 4 : ns);
                        snprintf(what, sizeof what, "per-token fp8 %s g%d%s%s top %g",
                                 ts_dtype_name(xdt[di]), (int)c.gk, ue ? " ue8m0" : "",
                                 pk ? " packed" : "", pass ? 6.0 : 448.0);
                        mx_run(&f, what, quant_op, &c);
                    }
                c.kind = 1, c.gk = 128, c.packed = false;
                c.sf = ts_tensor_2d(sf, TS_F32, M / 128, (N + 127) / 128);
                snprintf(what, sizeof what, "per-block fp8 %s%s", ts_dtype_name(xdt[di]), ue ? " ue8m0" : "");
                mx_run(&f, what, quant_op, &c);
                c.kind = 2;
                c.sf = ts_tensor_2d(sf, TS_F32, M / 128, N);
                snprintf(what, sizeof what, "per-channel fp8 %s%s", ts_dtype_name(xdt[di]), ue ? " ue8m0" : "");
                mx_run(&f, what, quant_op, &c);
                for (int r = 0; r < 2; r++)
                    for (int pk = 0; pk <= ue; pk++) {
                        c.kind = 3, c.gk = 32, c.packed = pk;
                        c.rnd = r ? TS_FP4_ROUND_RNE : TS_FP4_ROUND_DEEPGEMM;
                        int64_t ns = N / 32;
                        c.q = ts_tensor_2d(q, TS_E2M1X2, M, N / 2);
                        c.sf = ts_tensor_2d(sf, pk ? TS_I32 : TS_F32, M, pk ? (ns + 3) / 4 : ns);
                        snprintf(what, sizeof what, "per-token fp4 %s%s%s%s", ts_dtype_name(xdt[di]),
                                 ue ? " ue8m0" : "", pk ? " packed" : "", r ? " rne" : "");
                        mx_run(&f, what, quant_op, &c);
                    }
            }
        }
    }
    /* cast back: every e4m3 / e2m1 code against f32 and packed ue8m0 scales near 1 (the
     * packed K tail leaves zero padding bytes, which decode to 0.0 and are never used) */
    for (int64_t i = 0; i < M * N; i++) q[i] = (uint8_t)(i * 37 + i / N);
    for (int64_t i = 0; i < M * N; i++)
        if ((q[i] & 0x7F) == 0x7F) q[i] ^= 0x10; /* no NaN codes */
    static const ts_dtype odt[] = {TS_BF16, TS_F16, TS_F32};
    for (int fp4 = 0; fp4 < 2; fp4++)
        for (int pk = 0; pk < 2; pk++)
            for (size_t oi = 0; oi < 3; oi++) {
                quant_ctx c = {0};
                c.kind = fp4 ? 5 : 4;
                c.gk = fp4 ? 32 : 128;
                int64_t ns = (N + c.gk - 1) / c.gk, nw = (ns + 3) / 4;
                c.q = fp4 ? ts_tensor_2d(q, TS_E2M1X2, M, N / 2) : ts_tensor_2d(q, TS_E4M3, M, N);
                if (pk) {
                    uint8_t *b = (uint8_t *)sf;
                    memset(b, 0, (size_t)(M * nw * 4));
                    for (int64_t i = 0; i < M; i++)
                        for (int64_t j = 0; j < ns; j++) b[i * nw * 4 + j] = (uint8_t)(120 + (i + j) % 14);
                    c.sf = ts_tensor_2d(sf, TS_I32, M, nw);
                } else {
                    for (int64_t i = 0; i < M * ns; i++) sf[i] = ldexpf(1.0f + (float)(i % 3) * 0.25f, (int)(i % 9) - 4);
                    c.sf = ts_tensor_2d(sf, TS_F32, M, ns);
                }
                c.out = ts_tensor_2d(out, odt[oi], M, N);
                char what[64];
                snprintf(what, sizeof what, "cast back %s -> %s%s", fp4 ? "fp4" : "fp8",
                         ts_dtype_name(odt[oi]), pk ? " packed" : "");
                mx_run(&f, what, quant_op, &c);
            }
    mx_end(&f);
    free(x32), free(xb), free(xh), free(q), free(sf), free(out);
}

/* ================================================================ top-k */

typedef struct topk_ctx {
    ts_tensor in, vals, idx;
    int64_t k;
    ts_topk_options o;
} topk_ctx;

static ts_status topk_op(void *vc) {
    topk_ctx *c = vc;
    return ts_topk(&c->in, c->k, &c->o, NULL, NULL, c->o.return_value ? &c->vals : NULL, &c->idx);
}

TS_TEST(mxcsr_topk) {
    mx_fam f = mx_begin(ts_t_, "top-k (ts_topk)");
    if (!f.ok) return;
    const int64_t B = 6, N = 40000;
    float *x = malloc((size_t)(B * N) * 4);
    uint16_t *xb = malloc((size_t)(B * N) * 2);
    /* tiny normal values of both signs around the selection threshold, zeros, a few ordinary */
    ts_prng p = ts_prng_seed(17);
    for (int64_t i = 0; i < B * N; i++) {
        uint32_t r = ts_prng_u32(&p);
        float v = ldexpf(1.0f + (float)(r & 0xFF) / 256.0f, -40 - (int)((r >> 8) % 80));
        if (r >> 31) v = -v;
        if ((r >> 16) % 97 == 0) v = (float)((r >> 20) % 7) - 3.0f;
        if ((r >> 16) % 89 == 0) v = 0.0f;
        x[i] = v;
        xb[i] = ts_f32_to_bf16(v);
    }
    int64_t *idx = malloc((size_t)(B * 2048) * 8);
    float *vals = malloc((size_t)(B * 2048) * 4);
    static const int64_t ks[] = {1, 8, 64, 512, 2048};
    for (int dt = 0; dt < 2; dt++)
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
            for (int sorted = 0; sorted <= (dt == 0); sorted++) {
                topk_ctx c;
                c.k = ks[ki];
                c.o = ts_topk_default_options();
                c.o.sorted = sorted;
                c.o.return_value = true;
                c.o.indices_type = TS_I64;
                c.in = ts_tensor_2d(dt ? (void *)xb : (void *)x, dt ? TS_BF16 : TS_F32, B, N);
                c.vals = ts_tensor_2d(vals, dt ? TS_BF16 : TS_F32, B, c.k);
                c.idx = ts_tensor_2d(idx, TS_I64, B, c.k);
                char what[64];
                snprintf(what, sizeof what, "%s k=%d%s", dt ? "bf16" : "f32", (int)c.k, sorted ? " sorted" : "");
                mx_run(&f, what, topk_op, &c);
            }
    mx_end(&f);
    free(x), free(xb), free(idx), free(vals);
}

/* ================================================================ EP low-latency cast */

/* The sender's per-128-channel FP8 cast of DeepEP's low-latency dispatch and the combine's
 * weighted accumulation, and the normal combine's bf16 reduce rows, as row kernels
 * (src/ep/kernels/, built with or without MPI); every
 * ISA variant is called directly since ts_set_isa only picks among them inside the MPI path.
 * The full low-latency dispatch / combine and LogFMT run in tests/ep/test_mxcsr_ep.c. */
typedef struct llcast_ctx {
    ts__ep_ll_cast_fn cast;
    ts__ep_ll_fma_bf16_fn fma;
    ts__ep_acc_bf16_fn acc_bf16; /* and the normal combine's reduce rows */
    ts__ep_store_bf16_fn store_bf16;
    uint16_t *o;
    const uint16_t *x;
    int64_t rows, hidden;
    int round;
    uint8_t *q;
    float *s, *acc;
} llcast_ctx;

static ts_status llcast_op(void *vc) {
    llcast_ctx *c = vc;
    for (int64_t r = 0; r < c->rows; r++) {
        c->cast(c->x + r * c->hidden, c->hidden, c->round, c->q + r * c->hidden, c->s + r * (c->hidden / 128));
        c->fma(c->acc, c->x + r * c->hidden, 0.75f, c->hidden);
    }
    for (int64_t r = 0; r < c->rows; r++) c->acc_bf16(c->acc, c->x + r * c->hidden, c->hidden, r == 0);
    c->store_bf16(c->o, c->acc, c->hidden);
    return TS_OK;
}

TS_TEST(mxcsr_ep_ll_cast_kernels) {
    mx_fam f = mx_begin(ts_t_, "EP row kernels (low-latency FP8 cast and FMA, combine reduce)");
    if (!f.ok) return;
    const int64_t R = 16, H = 1024;
    float *x32 = malloc((size_t)(R * H) * 4);
    uint16_t *x = malloc((size_t)(R * H) * 2);
    uint8_t *q = malloc((size_t)(R * H));
    float *s = malloc((size_t)(R * H / 128) * 4), *acc = calloc((size_t)H, 4);
    uint16_t *o = malloc((size_t)H * 2);
    quant_input(x32, R, H, 448.0f);
    for (int64_t i = 0; i < R * H; i++) x[i] = ts_f32_to_bf16(x32[i]);
    static const ts_isa paths[] = {TS_ISA_GENERIC, TS_ISA_AVX2, TS_ISA_AVX512};
    for (int isa = 0; isa < 3; isa++) {
        llcast_ctx c = {ts__ep_ll_cast__generic, ts__ep_ll_fma_bf16__generic, ts__ep_acc_bf16__generic,
                        ts__ep_store_bf16__generic, o, x, R, H, 0, q, s, acc};
        bool built = isa == 0;
#ifdef TS_HAVE_AVX2_KERNELS
        if (isa == 1)
            c.cast = ts__ep_ll_cast__avx2, c.fma = ts__ep_ll_fma_bf16__avx2, c.acc_bf16 = ts__ep_acc_bf16__avx2,
            c.store_bf16 = ts__ep_store_bf16__avx2, built = true;
#endif
#ifdef TS_HAVE_AVX512_KERNELS
        if (isa == 2)
            c.cast = ts__ep_ll_cast__avx512, c.fma = ts__ep_ll_fma_bf16__avx512, c.acc_bf16 = ts__ep_acc_bf16__avx512,
            c.store_bf16 = ts__ep_store_bf16__avx512, built = true;
#endif
        if (!built || !mx_isa_runnable(paths[isa])) {
            printf("    %s: skip the %s kernels (not runnable here)\n", f.name, ts_isa_name(paths[isa]));
            continue;
        }
        for (int round = 0; round < 2; round++) {
            c.round = round;
            memset(acc, 0, (size_t)H * 4);
            char what[64];
            snprintf(what, sizeof what, "%s kernels, round_scale %d", ts_isa_name(paths[isa]), round);
            mx_run_once(&f, what, llcast_op, &c); /* the kernel is fixed: one path only */
        }
    }
    mx_end(&f);
    free(x32), free(x), free(q), free(s), free(acc), free(o);
}

/* ================================================================ MQA logits */

typedef struct mqa_ctx {
    int fp4, mx, paged;
    int64_t s, h, d, skv;
    ts_tensor q, qsf, kv, kvsf, w, ks, ke, lg, cache, cl, bt, meta;
    int32_t max_ctx;
} mqa_ctx;

static ts_status mqa_op(void *vc) {
    mqa_ctx *c = vc;
    if (c->paged)
        return ts_fp8_fp4_paged_mqa_logits(&c->q, c->mx ? &c->qsf : NULL, &c->cache, &c->w, &c->cl,
                                           &c->bt, &c->meta, c->max_ctx, true, &c->lg);
    return ts_fp8_fp4_mqa_logits(&c->q, c->mx ? &c->qsf : NULL, &c->kv, &c->kvsf, &c->w, &c->ks,
                                 &c->ke, true, 0, &c->lg);
}

TS_TEST(mxcsr_mqa_logits) {
    mx_fam f = mx_begin(ts_t_, "MQA logits (plain and paged)");
    if (!f.ok) return;
    const int64_t S = 4, H = 8, SKV = 300;
    for (int mode = 0; mode < 3; mode++) /* fp8 (f32 kv scale), fp8 + mx, fp4 */
        for (int64_t d = 64; d <= 128; d += 64) {
            const int fp4 = mode == 2, mx = mode >= 1;
            const int64_t rb = fp4 ? d / 2 : d;
            uint8_t *q = malloc((size_t)(S * H * rb)), *kv = malloc((size_t)(SKV * rb));
            int32_t *qsf = malloc((size_t)(S * H) * 4), *kvsfi = malloc((size_t)SKV * 4);
            float *kvsf = malloc((size_t)SKV * 4), *w = malloc((size_t)(S * H) * 4);
            int32_t ks[S], ke[S];
            if (fp4) fill_e2m1(q, S * H * rb, 1), fill_e2m1(kv, SKV * rb, 2);
            else fill_e4m3(q, S * H * rb, 1), fill_e4m3(kv, SKV * rb, 2);
            /* block-32 UE8M0 scales along D: d = 64 leaves bytes 2, 3 of each word 0 */
            fill_ue8m0_words(qsf, S * H, d / 32);
            fill_ue8m0_words(kvsfi, SKV, d / 32);
            fill_sf(kvsf, SKV, 0);
            for (int64_t i = 0; i < S * H; i++) w[i] = i % 5 == 4 ? 0x1p-40f : (float)(i % 7) * 0.125f - 0.3f;
            for (int64_t i = 0; i < S; i++) ks[i] = (int32_t)(i * 20), ke[i] = (int32_t)(SKV - i * 30);
            int64_t ld = 0;
            TS_CHECK_STATUS(ts_mqa_logits_row_stride(SKV, 0, TS_F32, &ld), TS_OK);
            float *lg = malloc((size_t)(S * ld) * 4);
            mqa_ctx c;
            memset(&c, 0, sizeof c);
            c.fp4 = fp4, c.mx = mx, c.s = S, c.h = H, c.d = d, c.skv = SKV;
            c.q = ts_tensor_3d(q, fp4 ? TS_E2M1X2 : TS_E4M3, S, H, rb);
            c.qsf = ts_tensor_2d(qsf, TS_I32, S, H);
            c.kv = ts_tensor_2d(kv, fp4 ? TS_E2M1X2 : TS_E4M3, SKV, rb);
            c.kvsf = mx ? ts_tensor_1d(kvsfi, TS_I32, SKV) : ts_tensor_1d(kvsf, TS_F32, SKV);
            c.w = ts_tensor_2d(w, TS_F32, S, H);
            c.ks = ts_tensor_1d(ks, TS_I32, S);
            c.ke = ts_tensor_1d(ke, TS_I32, S);
            char what[64];
            for (int bf = 0; bf < 2; bf++) {
                c.lg = ts_tensor_2d(lg, bf ? TS_BF16 : TS_F32, S, SKV);
                c.lg.strides[0] = ld;
                snprintf(what, sizeof what, "%s d%d -> %s", mode == 0 ? "fp8" : mode == 1 ? "fp8+mx" : "fp4",
                         (int)d, bf ? "bf16" : "f32");
                mx_run(&f, what, mqa_op, &c);
            }
            /* paged: B = 2 requests x next_n 2, blocks of 64 tokens handed out in order */
            const int64_t B = 2, NN = 2, BKV = 64, MAXB = 5;
            int32_t cl[4] = {100, 37, 250, 1}, bt[2 * 5], meta[2 * 6];
            const int64_t nblk = B * MAXB, bstride = BKV * (rb + 4);
            uint8_t *cache = calloc((size_t)(nblk * bstride), 1);
            for (int64_t i = 0; i < B * MAXB; i++) bt[i] = (int32_t)i;
            for (int64_t blk = 0; blk < nblk; blk++)
                for (int64_t r = 0; r < BKV; r++) {
                    int64_t key = (blk * BKV + r) % SKV;
                    memcpy(cache + blk * bstride + r * rb, kv + key * rb, (size_t)rb);
                    memcpy(cache + blk * bstride + BKV * rb + r * 4, mx ? (void *)&kvsfi[key] : (void *)&kvsf[key], 4);
                }
            int64_t qshape[4] = {B, NN, H, rb}, sfshape[3] = {B, NN, H}, cshape[4] = {nblk, BKV, 1, rb + 4};
            c.paged = 1;
            c.q = ts_tensor_make(q, fp4 ? TS_E2M1X2 : TS_E4M3, 4, qshape);
            c.qsf = ts_tensor_make(qsf, TS_I32, 3, sfshape);
            c.cache = ts_tensor_make(cache, TS_U8, 4, cshape);
            c.w = ts_tensor_2d(w, TS_F32, B * NN, H);
            c.cl = ts_tensor_2d(cl, TS_I32, B, NN);
            c.bt = ts_tensor_2d(bt, TS_I32, B, MAXB);
            c.meta = ts_tensor_2d(meta, TS_I32, 6, 2);
            c.max_ctx = 256;
            TS_CHECK_STATUS(ts_get_paged_mqa_logits_metadata(&c.cl, (int32_t)BKV, 5, &c.meta), TS_OK);
            int64_t pld = 0;
            TS_CHECK_STATUS(ts_paged_mqa_logits_row_stride(c.max_ctx, TS_F32, &pld), TS_OK);
            float *plg = malloc((size_t)(B * NN * pld) * 4);
            for (int bf = 0; bf < 2; bf++) {
                c.lg = ts_tensor_2d(plg, bf ? TS_BF16 : TS_F32, B * NN, c.max_ctx);
                c.lg.strides[0] = pld;
                snprintf(what, sizeof what, "paged %s d%d -> %s", mode == 0 ? "fp8" : mode == 1 ? "fp8+mx" : "fp4",
                         (int)d, bf ? "bf16" : "f32");
                mx_run(&f, what, mqa_op, &c);
            }
            free(q), free(kv), free(qsf), free(kvsfi), free(kvsf), free(w), free(lg), free(cache), free(plg);
        }
    mx_end(&f);
}

/* ================================================================ FlashMLA */

typedef struct mla_ctx {
    int prefill;
    ts_flash_mla_kvcache_args a;
    ts_mla_metadata *meta;
    ts_tensor out, lse, maxl;
    /* prefill */
    ts_tensor q, kv, ind, sink, tlen;
    float scale;
    /* kv helpers */
    int helper;
    ts_mla_kv_layout L;
    ts_tensor bf, fp8;
} mla_ctx;

static ts_status mla_op(void *vc) {
    mla_ctx *c = vc;
    if (c->helper == 1) return ts_mla_quantize_kv_cache(c->L, &c->bf, &c->fp8);
    if (c->helper == 2) return ts_mla_dequantize_kv_cache(c->L, &c->fp8, &c->bf);
    if (c->prefill)
        return ts_flash_mla_sparse_fwd(&c->q, &c->kv, &c->ind, c->scale, 512, &c->sink, &c->tlen,
                                       &c->out, &c->maxl, &c->lse);
    /* one handle per call: the handle keeps the first call's split plan, and the ISA path may
     * change between calls */
    ts_mla_metadata *m = NULL;
    ts_status st = ts_get_mla_metadata(&m);
    if (st != TS_OK) return st;
    c->a.tile_scheduler_metadata = m;
    st = ts_flash_mla_with_kvcache(&c->a, &c->out, &c->lse);
    ts_mla_metadata_free(m);
    return st;
}

/* bf16 cache rows whose quantisation holds every e4m3 subnormal code: per 64-dim tile one
 * value 448 * 2^-4 (scale 2^-4), the others k * 2^-9 * 2^-4 for k = +-1..7, tiny normal
 * values, zeros and ordinary ones; RoPE dims (the last 64) from the bf16 pattern. */
static void mla_cache_rows(uint16_t *x, int64_t rows, int64_t d) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < d; j++) {
            float v;
            int64_t k = (j + r) % 20;
            if (j >= d - 64) v = mx_bf16_pat(r + j);
            else if (j % 64 == r % 64) v = (r % 2 ? 448.0f : -448.0f) * 0x1p-4f;
            else if (k < 14) v = (float)(k < 7 ? k + 1 : 6 - k) * 0x1p-9f * 0x1p-4f;
            else v = mx_bf16_pat(k + r) * 0.25f;
            x[r * d + j] = ts_f32_to_bf16(v);
        }
}

TS_TEST(mxcsr_flash_mla) {
    mx_fam f = mx_begin(ts_t_, "FlashMLA (dense decode, sparse decode, sparse prefill, KV helpers)");
    if (!f.ok) return;
    char what[96];
    /* ---- dense decode: bf16 q / cache, d_qk 576 and 512, causal and not */
    for (int64_t dqk = 512; dqk <= 576; dqk += 64) {
        const int64_t b = 2, sq = 2, hq = 16, P = 64, nb = 6, mb = 3;
        uint16_t *q = malloc((size_t)(b * sq * hq * dqk) * 2), *kc = malloc((size_t)(nb * P * dqk) * 2);
        fill_bf16(q, b * sq * hq * dqk, 3);
        fill_bf16(kc, nb * P * dqk, 4);
        int32_t bt[2 * 3] = {0, 2, 4, 1, 3, 5}, seqlens[2] = {70, 150};
        uint16_t *out = malloc((size_t)(b * sq * hq * 512) * 2);
        float *lse = malloc((size_t)(b * hq * sq) * 4);
        ts_tensor tq = ts_tensor_make(q, TS_BF16, 4, (int64_t[]){b, sq, hq, dqk});
        ts_tensor tk = ts_tensor_make(kc, TS_BF16, 4, (int64_t[]){nb, P, 1, dqk});
        ts_tensor tbt = ts_tensor_2d(bt, TS_I32, b, mb), tsl = ts_tensor_1d(seqlens, TS_I32, b);
        mla_ctx c;
        memset(&c, 0, sizeof c);
        c.a.q = &tq, c.a.k_cache = &tk, c.a.block_table = &tbt, c.a.cache_seqlens = &tsl;
        c.a.head_dim_v = 512;
        c.out = ts_tensor_make(out, TS_BF16, 4, (int64_t[]){b, sq, hq, 512});
        c.lse = ts_tensor_3d(lse, TS_F32, b, hq, sq);
        for (int causal = 0; causal < 2; causal++) {
            c.a.causal = causal;
            snprintf(what, sizeof what, "dense decode d_qk %d%s", (int)dqk, causal ? " causal" : "");
            mx_run(&f, what, mla_op, &c);
        }
        free(q), free(kc), free(out), free(lse);
    }
    /* ---- FP8 KV helpers and sparse decode, V32 and MODEL1 */
    for (int L = 0; L < 2; L++) {
        const ts_mla_kv_layout lay = L ? TS_MLA_KV_MODEL1 : TS_MLA_KV_V32;
        const int64_t d = ts_mla_kv_head_dim(lay), tb = ts_mla_kv_token_bytes(lay);
        const int64_t b = 2, sq = 2, hq = 16, P = 64, nb = 4, topk = 96;
        uint16_t *x = malloc((size_t)(nb * P * d) * 2), *x2 = malloc((size_t)(nb * P * d) * 2);
        uint8_t *kc = malloc((size_t)(nb * P * tb));
        mla_cache_rows(x, nb * P, d);
        mla_ctx h;
        memset(&h, 0, sizeof h);
        h.L = lay;
        h.bf = ts_tensor_make(x, TS_BF16, 4, (int64_t[]){nb, P, 1, d});
        h.fp8 = ts_tensor_make(kc, TS_U8, 4, (int64_t[]){nb, P, 1, tb});
        h.helper = 1;
        snprintf(what, sizeof what, "quantize kv cache %s", L ? "MODEL1" : "V32");
        mx_run(&f, what, mla_op, &h);
        int sub = 0;
        for (int64_t i = 0; i < nb * P * tb; i++) sub += (kc[i] & 0x78) == 0 && (kc[i] & 7);
        TS_CHECK_MSG(sub > 0, "the quantised cache holds no e4m3 subnormal code");
        h.helper = 2;
        h.bf = ts_tensor_make(x2, TS_BF16, 4, (int64_t[]){nb, P, 1, d});
        snprintf(what, sizeof what, "dequantize kv cache %s", L ? "MODEL1" : "V32");
        mx_run(&f, what, mla_op, &h);
        uint16_t *q = malloc((size_t)(b * sq * hq * d) * 2);
        fill_bf16(q, b * sq * hq * d, 5);
        int32_t *ind = malloc((size_t)(b * sq * topk) * 4), len[2] = {topk, 50};
        for (int64_t i = 0; i < b * sq * topk; i++) ind[i] = i % 11 == 5 ? -1 : (int32_t)((i * 29) % (nb * P));
        float sink[16];
        for (int i = 0; i < 16; i++) sink[i] = (float)(i % 5) * 0.5f - 1.0f;
        uint16_t *out = malloc((size_t)(b * sq * hq * 512) * 2);
        float *lse = malloc((size_t)(b * hq * sq) * 4);
        ts_tensor tq = ts_tensor_make(q, TS_BF16, 4, (int64_t[]){b, sq, hq, d});
        ts_tensor tind = ts_tensor_3d(ind, TS_I32, b, sq, topk), tlen = ts_tensor_1d(len, TS_I32, b);
        ts_tensor tsink = ts_tensor_1d(sink, TS_F32, hq);
        mla_ctx c;
        memset(&c, 0, sizeof c);
        c.a.q = &tq, c.a.k_cache = &h.fp8, c.a.head_dim_v = 512, c.a.is_fp8_kvcache = true;
        c.a.indices = &tind;
        c.out = ts_tensor_make(out, TS_BF16, 4, (int64_t[]){b, sq, hq, 512});
        c.lse = ts_tensor_3d(lse, TS_F32, b, hq, sq);
        for (int v = 0; v < 3; v++) {
            c.a.attn_sink = v >= 1 ? &tsink : NULL;
            c.a.topk_length = v >= 1 ? &tlen : NULL;
            /* the same cache as the extra cache, with its own index list */
            c.a.extra_k_cache = v == 2 ? &h.fp8 : NULL;
            c.a.extra_indices_in_kvcache = v == 2 ? &tind : NULL;
            c.a.extra_topk_length = v == 2 ? &tlen : NULL;
            snprintf(what, sizeof what, "sparse decode %s%s", L ? "MODEL1" : "V32",
                     v == 0 ? "" : v == 1 ? " sink+topk_length" : " sink+extra cache");
            mx_run(&f, what, mla_op, &c);
        }
        /* ---- sparse prefill on the bf16 rows */
        if (L == 0 || d == 512) {
            const int64_t s_q = 6, skv = nb * P;
            uint16_t *pq = malloc((size_t)(s_q * hq * d) * 2);
            fill_bf16(pq, s_q * hq * d, 6);
            int32_t *pind = malloc((size_t)(s_q * topk) * 4), plen[6] = {96, 1, 0, 50, 96, 7};
            for (int64_t i = 0; i < s_q * topk; i++) pind[i] = i % 13 == 3 ? -1 : (int32_t)((i * 31) % skv);
            uint16_t *pout = malloc((size_t)(s_q * hq * 512) * 2);
            float *pl = malloc((size_t)(s_q * hq) * 4), *pm = malloc((size_t)(s_q * hq) * 4);
            mla_ctx p;
            memset(&p, 0, sizeof p);
            p.prefill = 1;
            p.q = ts_tensor_3d(pq, TS_BF16, s_q, hq, d);
            p.kv = ts_tensor_3d(x, TS_BF16, skv, 1, d);
            p.ind = ts_tensor_3d(pind, TS_I32, s_q, 1, topk);
            p.sink = tsink;
            p.tlen = ts_tensor_1d(plen, TS_I32, s_q);
            p.scale = 1.0f / sqrtf((float)d);
            p.out = ts_tensor_3d(pout, TS_BF16, s_q, hq, 512);
            p.lse = ts_tensor_2d(pl, TS_F32, s_q, hq);
            p.maxl = ts_tensor_2d(pm, TS_F32, s_q, hq);
            snprintf(what, sizeof what, "sparse prefill d_qk %d", (int)d);
            mx_run(&f, what, mla_op, &p);
            free(pq), free(pind), free(pout), free(pl), free(pm);
        }
        free(x), free(x2), free(kc), free(q), free(ind), free(out), free(lse);
    }
    mx_end(&f);
}

/* ================================================================ GEMM */

enum gkind { GK_FP8_BLOCK, GK_FP8_UE8M0, GK_FP8_FP4, GK_FP4_FP4, GK_BF16, GK_COUNT };
static const char *const k_gkind_name[GK_COUNT] = {"fp8 (1,128,128) f32", "fp8 (1,1,128) ue8m0",
                                                   "fp8 x fp4 ue8m0", "fp4 x fp4 ue8m0", "bf16"};

/* One problem: A [rows, K] (or [G, rows, K] for masked), B [G, N, K], K-major, with scales. */
typedef struct gprob {
    enum gkind kind;
    int64_t m, n, k, g;
    ts_dtype adt, bdt;
    int64_t gka, gkb, gmnb;
    bool u8;
    void *a, *b;
    int32_t *sfa_i, *sfb_i;
    float *sfa_f, *sfb_f;
    ts_tensor ta, tb, tsa, tsb;
    int64_t ra[2], rb[2];
} gprob;

static void gfill(void *p, ts_dtype dt, int64_t n, int64_t salt) {
    if (dt == TS_BF16) fill_bf16(p, n, salt);
    else if (dt == TS_E2M1X2) fill_e2m1(p, n, salt);
    else fill_e4m3(p, n, salt);
}

static gprob gprob_make(enum gkind kind, int64_t m, int64_t n, int64_t k, int64_t g) {
    gprob p;
    memset(&p, 0, sizeof p);
    p.kind = kind, p.m = m, p.n = n, p.k = k, p.g = g;
    p.adt = kind == GK_BF16 ? TS_BF16 : kind == GK_FP4_FP4 ? TS_E2M1X2 : TS_E4M3;
    p.bdt = kind == GK_BF16 ? TS_BF16 : kind >= GK_FP8_FP4 ? TS_E2M1X2 : TS_E4M3;
    p.gka = p.adt == TS_E2M1X2 ? 32 : 128;
    p.gkb = p.bdt == TS_E2M1X2 ? 32 : 128;
    p.gmnb = kind == GK_FP8_BLOCK ? 128 : 1;
    p.u8 = kind != GK_FP8_BLOCK && kind != GK_BF16;
    const int64_t ak = p.adt == TS_E2M1X2 ? k / 2 : k, bk = p.bdt == TS_E2M1X2 ? k / 2 : k;
    p.a = malloc((size_t)(g * m * ak) * ts_dtype_size(p.adt) + 64);
    p.b = malloc((size_t)(g * n * bk) * ts_dtype_size(p.bdt) + 64);
    gfill(p.a, p.adt, g * m * ak, 1);
    gfill(p.b, p.bdt, g * n * bk, 2);
    p.ta = ts_tensor_2d(p.a, p.adt, m, ak);
    p.tb = g > 1 ? ts_tensor_3d(p.b, p.bdt, g, n, bk) : ts_tensor_2d(p.b, p.bdt, n, bk);
    if (kind == GK_BF16) return p;
    const int64_t nsa = (k + p.gka - 1) / p.gka, nsb = (k + p.gkb - 1) / p.gkb;
    const int64_t sbr = (n + p.gmnb - 1) / p.gmnb;
    if (p.u8) {
        p.sfa_i = malloc((size_t)(g * m * ((nsa + 3) / 4)) * 4 + 4);
        p.sfb_i = malloc((size_t)(g * sbr * ((nsb + 3) / 4)) * 4 + 4);
        fill_ue8m0_words(p.sfa_i, g * m, nsa);
        fill_ue8m0_words(p.sfb_i, g * sbr, nsb);
        p.tsa = ts_tensor_2d(p.sfa_i, TS_I32, m, (nsa + 3) / 4);
        p.tsb = g > 1 ? ts_tensor_3d(p.sfb_i, TS_I32, g, sbr, (nsb + 3) / 4)
                      : ts_tensor_2d(p.sfb_i, TS_I32, sbr, (nsb + 3) / 4);
    } else {
        p.sfa_f = malloc((size_t)(g * m * nsa) * 4 + 4);
        p.sfb_f = malloc((size_t)(g * sbr * nsb) * 4 + 4);
        fill_sf(p.sfa_f, g * m * nsa, 0);
        fill_sf(p.sfb_f, g * sbr * nsb, 0);
        p.tsa = ts_tensor_2d(p.sfa_f, TS_F32, m, nsa);
        p.tsb = g > 1 ? ts_tensor_3d(p.sfb_f, TS_F32, g, sbr, nsb) : ts_tensor_2d(p.sfb_f, TS_F32, sbr, nsb);
    }
    p.ra[0] = 1, p.ra[1] = p.gka, p.rb[0] = p.gmnb, p.rb[1] = p.gkb;
    return p;
}

static void gprob_free(gprob *p) {
    free(p->a), free(p->b), free(p->sfa_i), free(p->sfb_i), free(p->sfa_f), free(p->sfb_f);
}

typedef struct gemm_ctx {
    int mode; /* 0 dense, 1 dense packed, 2 contiguous, 3 contiguous packed, 4 masked, 5 masked packed */
    gprob *p;
    ts_packed_weight *pw;
    ts_tensor a, sa, d, lay;
    int64_t expected_m;
} gemm_ctx;

static ts_status gemm_op(void *vc) {
    gemm_ctx *c = vc;
    gprob *p = c->p;
    const bool bf = p->kind == GK_BF16;
    switch (c->mode) {
    case 0:
        return bf ? ts_bf16_gemm_nt(&c->a, &p->tb, &c->d, NULL, NULL)
                  : ts_fp8_fp4_gemm_nt(&c->a, &c->sa, &p->tb, &p->tsb, &c->d, NULL, NULL, p->ra, p->rb, NULL, false);
    case 1:
        return bf ? ts_bf16_gemm_nt_packed(&c->a, c->pw, &c->d, NULL, NULL)
                  : ts_fp8_fp4_gemm_nt_packed(&c->a, &c->sa, c->pw, &c->d, NULL, NULL, p->ra, p->rb, NULL, false);
    case 2:
        return bf ? ts_m_grouped_bf16_gemm_nt_contiguous(&c->a, &p->tb, &c->d, &c->lay, NULL, true, true, 0)
                  : ts_m_grouped_fp8_fp4_gemm_nt_contiguous(&c->a, &c->sa, &p->tb, &p->tsb, &c->d, &c->lay, NULL,
                                                            p->ra, p->rb, NULL, false, true, true, 0);
    case 3:
        return bf ? ts_m_grouped_bf16_gemm_contiguous_packed(&c->a, c->pw, &c->d, &c->lay, NULL, true, true)
                  : ts_m_grouped_fp8_fp4_gemm_contiguous_packed(&c->a, &c->sa, c->pw, &c->d, &c->lay, NULL, p->ra,
                                                                p->rb, NULL, false, true, true);
    case 4:
        return bf ? ts_m_grouped_bf16_gemm_nt_masked(&c->a, &p->tb, &c->d, &c->lay, c->expected_m, NULL)
                  : ts_m_grouped_fp8_fp4_gemm_nt_masked(&c->a, &c->sa, &p->tb, &p->tsb, &c->d, &c->lay,
                                                        c->expected_m, NULL, p->ra, p->rb, NULL, false);
    default:
        return bf ? ts_m_grouped_bf16_gemm_masked_packed(&c->a, c->pw, &c->d, &c->lay, c->expected_m, NULL)
                  : ts_m_grouped_fp8_fp4_gemm_masked_packed(&c->a, &c->sa, c->pw, &c->d, &c->lay, c->expected_m,
                                                            NULL, p->ra, p->rb, NULL, false);
    }
}

/* Where the avx512 path runs the vdpbf16ps kernels (AVX512_BF16), a block-scaled call also
 * runs once on avx512 with them switched off, so the f32 avx512 kernels (the ones an avx512
 * CPU without AVX512_BF16 runs) stay guarded on this machine too. */
static void mx_run_gemm(mx_fam *f, const char *what, gemm_ctx *c) {
    mx_run(f, what, gemm_op, c);
    if (c->p->kind == GK_BF16 || !ts__isa_runnable(TS_ISA_AVX512)) return;
    ts_set_isa(TS_ISA_AVX512);
    if (ts__gemm_select_dp_kernels()) {
        char w2[160];
        snprintf(w2, sizeof w2, "%s, avx512 f32 kernels (TS_GEMM_DPBF16=0)", what);
        ts__gemm_set_dpbf16(0);
        mx_run_once(f, w2, gemm_op, c);
        ts__gemm_set_dpbf16(-1);
    }
    ts_set_isa(f->saved_isa);
}

/* K = 544: a K tail for every granularity, and packed scale words whose last bytes are the
 * zero padding (fp8: 5 scales in 2 words; fp4: 17 scales in 5 words). N = 72: a partial
 * 32-column panel. M covers the decode path (1, 4) and the big-M path (64). */
enum { GK_K = 544, GK_N = 72 };

TS_TEST(mxcsr_gemm_dense) {
    mx_fam f = mx_begin(ts_t_, "dense / decode GEMM (plain and pre-packed)");
    if (!f.ok) return;
    static const int64_t ms[] = {1, 4, 64};
    float *d = malloc((size_t)(64 * GK_N) * 4);
    for (int kind = 0; kind < GK_COUNT; kind++) {
        gprob p = gprob_make((enum gkind)kind, 64, GK_N, GK_K, 1);
        ts_packed_weight *pw = NULL;
        TS_CHECK_STATUS(ts_gemm_prepack_b(&p.tb, kind == GK_BF16 ? NULL : &p.tsb, kind == GK_BF16 ? NULL : p.rb,
                                          false, &pw), TS_OK);
        for (size_t mi = 0; mi < 3; mi++)
            for (int packed = 0; packed < 2; packed++)
                for (int bf = 0; bf < 2; bf++) {
                    gemm_ctx c;
                    memset(&c, 0, sizeof c);
                    c.mode = packed, c.p = &p, c.pw = pw;
                    c.a = p.ta, c.a.shape[0] = ms[mi];
                    c.sa = p.tsa, c.sa.shape[0] = ms[mi];
                    c.d = ts_tensor_2d(d, bf ? TS_BF16 : TS_F32, ms[mi], GK_N);
                    char what[96];
                    snprintf(what, sizeof what, "%s M=%d%s -> %s", k_gkind_name[kind], (int)ms[mi],
                             packed ? " packed" : "", bf ? "bf16" : "f32");
                    if (!packed || pw) mx_run_gemm(&f, what, &c);
                }
        ts_packed_weight_destroy(pw);
        gprob_free(&p);
    }
    mx_end(&f);
    free(d);
}

TS_TEST(mxcsr_gemm_grouped) {
    mx_fam f = mx_begin(ts_t_, "M-grouped GEMM (contiguous, masked; plain and pre-packed)");
    if (!f.ok) return;
    const int64_t G = 3, MMAX = 8;
    const int al = ts_get_mk_alignment_for_contiguous_layout();
    /* psum layout: groups of 5, 130 and 1 rows at aligned starts */
    int32_t ends[3] = {5, al + 130, 3 * al + 1};
    const int64_t msum = 4 * al;
    float *d = malloc((size_t)(msum * GK_N) * 4);
    for (int kind = 0; kind < GK_COUNT; kind++) {
        gprob p = gprob_make((enum gkind)kind, msum, GK_N, GK_K, G);
        ts_packed_weight *pw = NULL;
        TS_CHECK_STATUS(ts_gemm_prepack_b(&p.tb, kind == GK_BF16 ? NULL : &p.tsb, kind == GK_BF16 ? NULL : p.rb,
                                          false, &pw), TS_OK);
        int32_t mm[3] = {1, 0, 6};
        for (int masked = 0; masked < 2; masked++)
            for (int packed = 0; packed < 2; packed++) {
                gemm_ctx c;
                memset(&c, 0, sizeof c);
                c.mode = (masked ? 4 : 2) + packed, c.p = &p, c.pw = pw;
                if (masked) {
                    const int64_t ak = p.ta.shape[1];
                    c.a = ts_tensor_3d(p.a, p.adt, G, MMAX, ak);
                    c.sa = ts_tensor_3d(p.tsa.data, p.tsa.dtype, G, MMAX, p.tsa.shape[1]);
                    c.d = ts_tensor_3d(d, TS_F32, G, MMAX, GK_N);
                    c.lay = ts_tensor_1d(mm, TS_I32, G);
                    c.expected_m = 2;
                } else {
                    c.a = p.ta, c.sa = p.tsa;
                    c.d = ts_tensor_2d(d, TS_BF16, msum, GK_N);
                    c.lay = ts_tensor_1d(ends, TS_I32, G);
                }
                char what[96];
                snprintf(what, sizeof what, "%s %s%s", k_gkind_name[kind], masked ? "masked" : "contiguous psum",
                         packed ? " packed" : "");
                if (!packed || pw) mx_run_gemm(&f, what, &c);
            }
        ts_packed_weight_destroy(pw);
        gprob_free(&p);
    }
    mx_end(&f);
    free(d);
}

typedef struct kg_ctx {
    int kind; /* 0 fp8 tn, 1 fp8 nt, 2 bf16 tn */
    ts_tensor a, sa, b, sb, d;
    int64_t ks[3];
} kg_ctx;

static ts_status kg_op(void *vc) {
    kg_ctx *c = vc;
    if (c->kind == 0)
        return ts_k_grouped_fp8_gemm_tn_contiguous(&c->a, &c->sa, &c->b, &c->sb, &c->d, c->ks, 3, NULL, NULL, NULL,
                                                   NULL, false);
    if (c->kind == 1)
        return ts_k_grouped_fp8_gemm_nt_contiguous(&c->a, &c->sa, &c->b, &c->sb, &c->d, c->ks, 3, NULL, NULL, NULL,
                                                   NULL, false);
    return ts_k_grouped_bf16_gemm_tn_contiguous(&c->a, &c->b, &c->d, c->ks, 3, NULL, NULL, NULL, false);
}

TS_TEST(mxcsr_gemm_k_grouped) {
    mx_fam f = mx_begin(ts_t_, "K-grouped GEMM (fp8 tn / nt, bf16 tn)");
    if (!f.ok) return;
    const int64_t M = 16, N = 40, ks[3] = {256, 0, 200}, total = 456;
    const int64_t nsf = 2 + 0 + 2; /* ceil(k_g / 128) per group */
    uint8_t *a = malloc((size_t)(total * M) * 2), *b = malloc((size_t)(total * N) * 2);
    float *sa = malloc((size_t)(nsf * M) * 4), *sb = malloc((size_t)(nsf * N) * 4);
    float *d = malloc((size_t)(3 * M * N) * 4);
    for (int kind = 0; kind < 3; kind++) {
        kg_ctx c;
        memset(&c, 0, sizeof c);
        c.kind = kind;
        memcpy(c.ks, ks, sizeof ks);
        c.d = ts_tensor_3d(d, TS_F32, 3, M, N);
        if (kind == 2) {
            fill_bf16((uint16_t *)a, total * M, 1), fill_bf16((uint16_t *)b, total * N, 2);
            c.a = ts_tensor_2d(a, TS_BF16, total, M), c.b = ts_tensor_2d(b, TS_BF16, total, N);
        } else {
            fill_e4m3(a, total * M, 1), fill_e4m3(b, total * N, 2);
            fill_sf(sa, nsf * M, kind == 0), fill_sf(sb, nsf * N, kind == 0); /* tn: powers of two */
            if (kind == 0) {
                c.a = ts_tensor_2d(a, TS_E4M3, total, M), c.b = ts_tensor_2d(b, TS_E4M3, total, N);
                c.sa = ts_tensor_2d(sa, TS_F32, nsf, M), c.sb = ts_tensor_2d(sb, TS_F32, nsf, N);
            } else {
                c.a = ts_tensor_1d(a, TS_E4M3, total * M), c.b = ts_tensor_1d(b, TS_E4M3, total * N);
                c.sa = ts_tensor_2d(sa, TS_F32, M, nsf), c.sb = ts_tensor_2d(sb, TS_F32, N, nsf);
            }
        }
        static const char *const names[] = {"fp8 tn", "fp8 nt", "bf16 tn"};
        mx_run(&f, names[kind], kg_op, &c);
    }
    mx_end(&f);
    free(a), free(b), free(sa), free(sb), free(d);
}

/* ================================================================ model decode */

typedef struct model_ctx {
    ts_model *m;
    int64_t seqs[2];
    int32_t toks[2];
    float *logits;
    int step;
    int64_t vocab;
} model_ctx;

static ts_status model_op(void *vc) {
    model_ctx *c = vc;
    c->toks[0] = (int32_t)((5 + 37 * c->step) % c->vocab);
    c->toks[1] = (int32_t)((131 + 11 * c->step) % c->vocab);
    c->step++;
    return ts_model_decode(c->m, 2, c->seqs, c->toks, c->logits);
}

TS_TEST(mxcsr_model_decode) {
    mx_fam f = mx_begin(ts_t_, "model decode step (dsv4-tiny, dsv32-tiny)");
    if (!f.ok) return;
    static const char *const cfgs[] = {"dsv4-tiny", "dsv32-tiny"};
    for (int i = 0; i < 2; i++) {
        ts_model_config cfg;
        TS_CHECK_STATUS(ts_model_config_builtin(cfgs[i], &cfg), TS_OK);
        model_ctx c;
        memset(&c, 0, sizeof c);
        TS_CHECK_STATUS(ts_model_create(&cfg, 2, &c.m), TS_OK);
        if (!c.m) continue;
        c.seqs[0] = 0, c.seqs[1] = 1;
        c.vocab = cfg.vocab_size;
        c.logits = malloc((size_t)(2 * cfg.vocab_size) * 4);
        /* a few steps first, so the caches and compressors hold real rows */
        TS_CHECK_STATUS(ts_model_prefill_random(c.m, 1, 40, 7), TS_OK);
        for (int s = 0; s < 4; s++) TS_CHECK_STATUS(model_op(&c), TS_OK);
        mx_run(&f, cfgs[i], model_op, &c);
        free(c.logits);
        ts_model_free(c.m);
    }
    mx_end(&f);
}
