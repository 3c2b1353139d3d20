/* The tile-kernel quantisers (src/kernels/deepgemm_quant.tile via src/numerics/quant_tile.c)
 * against the hand-written public functions, byte for byte: codes, scales (also the bytes a
 * strided scale view skips), over odd shapes, gran_k 7 / 32 / 64 / 128 / 200, inputs with
 * zero / NaN / inf / huge / tiny rows and a wide log-uniform range, f32 and packed scales in
 * row-major and MN-major views, every ISA path and 1 / 2 threads; and the same error codes. */
#include "test_quant_common.h"

#include "numerics/quant_hand.h"
#include "numerics/quant_tile.h"

#include <stdio.h>
#include <string.h>

/* The golden runner of the shared header is not used here. */
__attribute__((unused)) static void (*const tq_unused_golden)(ts_test_ctx *, uint32_t, uint32_t, bool) = qt_run_golden;

/* Each comparison runs under every ISA path that runs here (generic, avx2, avx512, ...) and
 * thread count. */
typedef struct tq_env { ts_isa isa; int threads; } tq_env;
#define TQ_MAX_ENVS (2 * TS_ISA_COUNT_)
static ts_isa tq_isa0 = TS_ISA_COUNT_; /* the path in use before a test changed it */
static int tq_envs(tq_env *e) {
    int n = 0;
    if (tq_isa0 == TS_ISA_COUNT_) tq_isa0 = ts_get_isa();
    int isas[TS_ISA_COUNT_];
    const int nisa = ts_test_isas(isas);
    for (int i = 0; i < nisa; i++)
        for (int th = 1; th <= 2; th++) e[n++] = (tq_env){(ts_isa)isas[i], th};
    return n;
}
static void tq_env_set(tq_env e) { ts_set_isa(e.isa), ts_set_num_threads(e.threads); }
static void tq_env_restore(int threads) {
    if (tq_isa0 != TS_ISA_COUNT_) ts_set_isa(tq_isa0);
    ts_set_num_threads(threads);
}

/* Input values: the golden generator's rows (scaled by 2^(r % 40 - 20), with zero, NaN, +-inf,
 * huge, tiny and negative-NaN rows) or a log-uniform magnitude over 2^-40..2^40 per element. */
static float *tq_values(uint64_t seed, int64_t m, int64_t n, int kind) {
    if (kind == 0) return qt_make_values(seed, m, n, TS_F32, true);
    float *x = malloc((size_t)(m * n) * 4);
    ts_prng p = ts_prng_seed(seed);
    for (int64_t i = 0; i < m * n; i++) {
        float u = ts_prng_uniform(&p), e = ts_prng_uniform(&p);
        x[i] = ldexpf(u, (int)((e + 1.0f) * 40.0f) - 40);
    }
    return x;
}

/* An MN-major scale view [rows, cols] (strides (1, align(rows, 4))) or row-major; its storage
 * in elements. */
static ts_tensor tq_sf_view(void *data, ts_dtype dt, int64_t rows, int64_t cols, bool mn_major, int64_t *elems) {
    ts_tensor t = ts_tensor_2d(data, dt, rows, cols);
    if (mn_major) {
        const int64_t ld = (rows + 3) / 4 * 4;
        t.strides[0] = 1, t.strides[1] = ld;
        *elems = ld * (cols > 0 ? cols : 1);
    } else {
        *elems = rows * cols;
    }
    return t;
}

typedef enum { OP_TOKEN8, OP_BLOCK8, OP_CHANNEL8, OP_TOKEN4 } tq_op;

/* Runs the hand-written and the tile path of one quantiser configuration in every env and
 * compares all output bytes; returns false on the first mismatch (reported). */
static bool tq_quant_case(ts_test_ctx *ts_t_, tq_op op, ts_dtype dt, int64_t m, int64_t n, int64_t g,
                          bool ue, bool packed, ts_fp4_rounding rule, bool mn_major, int kind) {
    float *v = tq_values(1000 + (uint64_t)(m * 31 + n * 7 + g), m, n, kind);
    void *x = qt_make_input(v, m * n, dt);
    ts_tensor xt = ts_tensor_2d(x, dt, m, n);
    const bool fp4 = op == OP_TOKEN4;
    const int64_t qn = fp4 ? n / 2 : n, nb = (n + g - 1) / g;
    int64_t sr = m, sc = packed ? (nb + 3) / 4 : nb;
    if (op == OP_BLOCK8) sr = (m + g - 1) / g;
    if (op == OP_CHANNEL8) sr = m / g, sc = n;
    int64_t se = 0;
    const size_t qbytes = (size_t)(m * qn);
    uint8_t *qa = malloc(qbytes + 1), *qb = malloc(qbytes + 1);
    tq_sf_view(NULL, TS_F32, sr, sc, mn_major, &se);
    uint32_t *sa = malloc((size_t)se * 4 + 4), *sb = malloc((size_t)se * 4 + 4);
    ts_tensor ta = ts_tensor_2d(qa, fp4 ? TS_E2M1X2 : TS_E4M3, m, qn), tb = ts_tensor_2d(qb, fp4 ? TS_E2M1X2 : TS_E4M3, m, qn);
    ts_tensor ssa = tq_sf_view(sa, packed ? TS_I32 : TS_F32, sr, sc, mn_major, &se);
    ts_tensor ssb = tq_sf_view(sb, packed ? TS_UE8M0X4 : TS_F32, sr, sc, mn_major, &se);
    char what[160];
    snprintf(what, sizeof what, "op %d %s m %lld n %lld g %lld ue8m0 %d packed %d rule %d mn_major %d input %d",
             (int)op, ts_dtype_name(dt), (long long)m, (long long)n, (long long)g, ue, packed, (int)rule,
             mn_major, kind);
    tq_env envs[TQ_MAX_ENVS];
    const int ne = tq_envs(envs);
    bool ok = true;
    for (int e = 0; e < ne && ok; e++) {
        tq_env_set(envs[e]);
        memset(qa, 0x5A, qbytes), memset(qb, 0x5A, qbytes);
        memset(sa, 0x5A, (size_t)se * 4), memset(sb, 0x5A, (size_t)se * 4);
        ts_status a = TS_OK, b = TS_OK;
        switch (op) {
        case OP_TOKEN8:
            a = ts__qh_per_token_cast_to_fp8(&xt, ue, g, packed, &ta, &ssa);
            b = ts__tq_per_token_cast_to_fp8(&xt, ue, g, packed, &tb, &ssb);
            break;
        case OP_BLOCK8:
            a = ts__qh_per_block_cast_to_fp8(&xt, ue, g, &ta, &ssa);
            b = ts__tq_per_block_cast_to_fp8(&xt, ue, g, &tb, &ssb);
            break;
        case OP_CHANNEL8:
            a = ts__qh_per_channel_cast_to_fp8(&xt, ue, g, &ta, &ssa);
            b = ts__tq_per_channel_cast_to_fp8(&xt, ue, g, &tb, &ssb);
            break;
        case OP_TOKEN4:
            a = ts__qh_per_token_cast_to_fp4(&xt, ue, g, packed, rule, &ta, &ssa);
            b = ts__tq_per_token_cast_to_fp4(&xt, ue, g, packed, rule, &tb, &ssb);
            break;
        }
        TS_CHECK_MSG(a == TS_OK && b == TS_OK, "%s: status %d / %d (%s)", what, (int)a, (int)b, ts_last_error());
        int64_t bad = -1;
        for (size_t i = 0; i < qbytes && bad < 0; i++)
            if (qa[i] != qb[i]) bad = (int64_t)i;
        if (bad >= 0) {
            TS_CHECK_MSG(false, "%s isa %s threads %d: code byte %lld: hand 0x%02x tile 0x%02x", what, ts_isa_name(envs[e].isa),
                         envs[e].threads, (long long)bad, qa[bad], qb[bad]);
            ok = false;
        }
        for (int64_t i = 0; i < se && ok; i++) {
            if (sa[i] != sb[i]) {
                TS_CHECK_MSG(false, "%s isa %s threads %d: scale word %lld: hand 0x%08x tile 0x%08x", what,
                             ts_isa_name(envs[e].isa), envs[e].threads, (long long)i, sa[i], sb[i]);
                ok = false;
            }
        }
    }
    free(v), free(x), free(qa), free(qb), free(sa), free(sb);
    return ok;
}

static const ts_dtype tq_srcs[3] = {TS_BF16, TS_F16, TS_F32};

TS_TEST(quant_tile_per_token_fp8_matches_hand) {
    const int threads = ts_get_num_threads();
    static const int64_t grans[] = {128, 64, 32, 7, 200, 256};
    static const int64_t shapes[][2] = {{37, 1000}, {5, 7168 + 72}, {1, 129}};
    for (int s = 0; s < 3; s++)
        for (size_t gi = 0; gi < sizeof grans / sizeof grans[0]; gi++)
            for (int d = 0; d < 3; d++)
                for (int mode = 0; mode < 3; mode++) { /* f32, ue8m0 f32, ue8m0 packed */
                    const bool ue = mode >= 1, pk = mode == 2;
                    for (int kind = 0; kind < (d == 0 ? 2 : 1); kind++) /* f16 / f32: golden-style rows */
                        if ((d == 0 || s != 1) &&
                            !tq_quant_case(ts_t_, OP_TOKEN8, tq_srcs[d], shapes[s][0], shapes[s][1], grans[gi], ue, pk,
                                           TS_FP4_ROUND_DEEPGEMM, (s + gi + mode) % 2 == 1, kind))
                            goto done;
                }
done:
    tq_env_restore(threads);
}

TS_TEST(quant_tile_per_block_fp8_matches_hand) {
    const int threads = ts_get_num_threads();
    static const int64_t grans[] = {128, 64, 32, 7, 200};
    for (size_t gi = 0; gi < sizeof grans / sizeof grans[0]; gi++)
        for (int d = 0; d < 3; d++)
            for (int ue = 0; ue < 2; ue++)
                for (int kind = 0; kind < (d == 0 ? 2 : 1); kind++)
                    if (!tq_quant_case(ts_t_, OP_BLOCK8, tq_srcs[d], grans[gi] == 7 ? 23 : 261, 1000 + 17, grans[gi],
                                       ue, false, TS_FP4_ROUND_DEEPGEMM, (gi + ue) % 2 == 1, kind))
                        goto done;
done:
    tq_env_restore(threads);
}

TS_TEST(quant_tile_per_channel_fp8_matches_hand) {
    const int threads = ts_get_num_threads();
    static const int64_t grans[] = {128, 32, 7, 1};
    for (size_t gi = 0; gi < sizeof grans / sizeof grans[0]; gi++)
        for (int d = 0; d < 3; d++)
            for (int ue = 0; ue < 2; ue++)
                for (int kind = 0; kind < 2; kind++)
                    if (!tq_quant_case(ts_t_, OP_CHANNEL8, tq_srcs[d], grans[gi] * (grans[gi] > 32 ? 2 : 5), 600 + 13,
                                       grans[gi], ue, false, TS_FP4_ROUND_DEEPGEMM, (gi + ue) % 2 == 0, kind))
                        goto done;
done:
    tq_env_restore(threads);
}

TS_TEST(quant_tile_per_token_fp4_matches_hand) {
    const int threads = ts_get_num_threads();
    static const int64_t grans[] = {32, 64, 128, 7, 200, 16};
    static const int64_t shapes[][2] = {{19, 2200}, {3, 7168 + 34}, {1, 2}};
    for (int s = 0; s < 3; s++)
        for (size_t gi = 0; gi < sizeof grans / sizeof grans[0]; gi++)
            for (int d = 0; d < 3; d++)
                for (int mode = 0; mode < 6; mode++) { /* rule x {f32, ue8m0 f32, ue8m0 packed} */
                    const ts_fp4_rounding rule = mode % 2 ? TS_FP4_ROUND_RNE : TS_FP4_ROUND_DEEPGEMM;
                    const bool ue = mode >= 2, pk = mode >= 4;
                    for (int kind = 0; kind < (d == 0 ? 2 : 1); kind++)
                        if ((d == 0 || s != 1) &&
                            !tq_quant_case(ts_t_, OP_TOKEN4, tq_srcs[d], shapes[s][0], shapes[s][1], grans[gi], ue, pk,
                                           rule, (s + gi + mode) % 2 == 1, kind))
                            goto done;
                }
done:
    tq_env_restore(threads);
}

/* Scales for the cast back: mostly ordinary, some 0, negative, subnormal, huge, inf, NaN. */
static uint32_t tq_scale_bits(ts_prng *p) {
    uint32_t u = ts_prng_u32(p);
    switch (u % 16) {
    case 0: return 0;
    case 1: return 0x7F800000u;
    case 2: return 0x7FC00001u | (u & 0x80000000u);
    case 3: return (u >> 8) & 0x7FFFFFu;
    case 4: return 0x7C000000u | ((u >> 8) & 0x7FFFFFu);
    case 5: return 0xBF000000u | ((u >> 8) & 0x7FFFFFu);
    default: return ((100u + (u >> 4) % 40u) << 23) | ((u >> 8) & 0x7FFFFFu);
    }
}

TS_TEST(quant_tile_cast_back_matches_hand) {
    const int threads = ts_get_num_threads();
    const int64_t m = 13, n = 2 * 1203;
    ts_prng p = ts_prng_seed(4242);
    uint8_t *q = malloc((size_t)(m * n));
    for (int64_t i = 0; i < m * n; i++) q[i] = (uint8_t)ts_prng_u32(&p);
    const int64_t smax = 4 * m * n;
    uint32_t *sf = malloc((size_t)smax * 4);
    for (int64_t i = 0; i < smax; i++) sf[i] = (i % 3 == 0) ? ts_prng_u32(&p) : tq_scale_bits(&p);
    uint8_t *oa = malloc((size_t)(m * n) * 4), *ob = malloc((size_t)(m * n) * 4);
    static const ts_dtype outs[3] = {TS_BF16, TS_F16, TS_F32};
    static const int64_t grans[][2] = {{1, 128}, {1, 32}, {128, 128}, {3, 64}, {1, 7}, {4, 1}, {1, 200}, {2, 32}};
    tq_env envs[TQ_MAX_ENVS];
    const int ne = tq_envs(envs);
    for (int fp4 = 0; fp4 < 2; fp4++)
        for (size_t gi = 0; gi < sizeof grans / sizeof grans[0]; gi++)
            for (int packed = 0; packed < 2; packed++)
                for (int mn = 0; mn < 2; mn++)
                    for (int o = 0; o < 3; o++) {
                        const int64_t gmn = grans[gi][0], gk = grans[gi][1];
                        const int64_t mb = (m + gmn - 1) / gmn, nb = (n + gk - 1) / gk, se_unused = 0;
                        (void)se_unused;
                        int64_t se;
                        ts_tensor st = tq_sf_view(sf, packed ? TS_UE8M0X4 : TS_F32, mb, packed ? (nb + 3) / 4 : nb,
                                                  mn == 1, &se);
                        if (packed && (gi + o) % 2) st.dtype = TS_I32;
                        ts_tensor xt = fp4 ? ts_tensor_2d(q, (gi % 2) ? TS_U8 : TS_E2M1X2, m, n / 2)
                                           : ts_tensor_2d(q, TS_E4M3, m, n);
                        const size_t bytes = (size_t)(m * n) * ts_dtype_size(outs[o]);
                        ts_tensor ta = ts_tensor_2d(oa, outs[o], m, n), tb = ts_tensor_2d(ob, outs[o], m, n);
                        for (int e = 0; e < ne; e++) {
                            tq_env_set(envs[e]);
                            memset(oa, 0x5A, bytes), memset(ob, 0x5A, bytes);
                            ts_status a = fp4 ? ts__qh_cast_back_from_fp4(&xt, &st, gmn, gk, &ta)
                                              : ts__qh_cast_back_from_fp8(&xt, &st, gmn, gk, &ta);
                            ts_status b = fp4 ? ts__tq_cast_back_from_fp4(&xt, &st, gmn, gk, &tb)
                                              : ts__tq_cast_back_from_fp8(&xt, &st, gmn, gk, &tb);
                            TS_CHECK_MSG(a == TS_OK && b == TS_OK, "cast_back status %d / %d (%s)", (int)a, (int)b,
                                         ts_last_error());
                            if (memcmp(oa, ob, bytes) != 0) {
                                size_t k = 0;
                                while (oa[k] == ob[k]) k++;
                                TS_CHECK_MSG(false,
                                             "cast_back fp%d gran (%lld,%lld) packed %d mn_major %d out %s isa %s "
                                             "threads %d: byte %zu differs",
                                             fp4 ? 4 : 8, (long long)gmn, (long long)gk, packed, mn,
                                             ts_dtype_name(outs[o]), ts_isa_name(envs[e].isa), envs[e].threads, k);
                                goto done;
                            }
                        }
                    }
done:
    tq_env_restore(threads);
    free(q), free(sf), free(oa), free(ob);
}

/* Bad arguments give the public function's status and leave outputs untouched. */
TS_TEST(quant_tile_errors_match_hand) {
    uint16_t x[4 * 64] = {0};
    uint8_t q[4 * 64], q2[4 * 64];
    float s[64], s2[64];
    ts_tensor xt = ts_tensor_2d(x, TS_BF16, 4, 64), xo = ts_tensor_2d(x, TS_BF16, 4, 63);
    ts_tensor qt = ts_tensor_2d(q, TS_E4M3, 4, 64), q4 = ts_tensor_2d(q, TS_E2M1X2, 4, 32);
    ts_tensor st = ts_tensor_2d(s, TS_F32, 4, 1), sbad = ts_tensor_2d(s, TS_F32, 4, 2);
    ts_tensor spk = ts_tensor_2d(s, TS_I32, 4, 1), xi = ts_tensor_2d(x, TS_I32, 4, 32);
    ts_tensor ov = ts_tensor_2d(x, TS_E4M3, 4, 64);
    memset(q, 0x33, sizeof q), memset(s, 0x44, sizeof s);
    memcpy(q2, q, sizeof q), memcpy(s2, s, sizeof s);
#define TQ_SAME(a, b) TS_CHECK_STATUS(b, a)
    TQ_SAME(ts__qh_per_token_cast_to_fp8(&xt, false, 0, false, &qt, &st), ts__tq_per_token_cast_to_fp8(&xt, false, 0, false, &qt, &st));
    TQ_SAME(ts__qh_per_token_cast_to_fp8(&xt, false, 64, true, &qt, &spk), ts__tq_per_token_cast_to_fp8(&xt, false, 64, true, &qt, &spk));
    TQ_SAME(ts__qh_per_token_cast_to_fp8(&xt, false, 64, false, &qt, &sbad), ts__tq_per_token_cast_to_fp8(&xt, false, 64, false, &qt, &sbad));
    TQ_SAME(ts__qh_per_token_cast_to_fp8(&xi, false, 64, false, &qt, &st), ts__tq_per_token_cast_to_fp8(&xi, false, 64, false, &qt, &st));
    TQ_SAME(ts__qh_per_token_cast_to_fp8(&xt, false, 64, false, &ov, &st), ts__tq_per_token_cast_to_fp8(&xt, false, 64, false, &ov, &st));
    TQ_SAME(ts__qh_per_block_cast_to_fp8(&xt, false, 64, &qt, &sbad), ts__tq_per_block_cast_to_fp8(&xt, false, 64, &qt, &sbad));
    TQ_SAME(ts__qh_per_channel_cast_to_fp8(&xt, false, 3, &qt, &st), ts__tq_per_channel_cast_to_fp8(&xt, false, 3, &qt, &st));
    TQ_SAME(ts__qh_per_token_cast_to_fp4(&xo, false, 64, false, TS_FP4_ROUND_RNE, &q4, &st),
            ts__tq_per_token_cast_to_fp4(&xo, false, 64, false, TS_FP4_ROUND_RNE, &q4, &st));
    TQ_SAME(ts__qh_per_token_cast_to_fp4(&xt, false, 64, false, (ts_fp4_rounding)7, &q4, &st),
            ts__tq_per_token_cast_to_fp4(&xt, false, 64, false, (ts_fp4_rounding)7, &q4, &st));
    ts_tensor o = ts_tensor_2d(x, TS_BF16, 4, 64);
    TQ_SAME(ts__qh_cast_back_from_fp8(&qt, &st, 0, 64, &o), ts__tq_cast_back_from_fp8(&qt, &st, 0, 64, &o));
    TQ_SAME(ts__qh_cast_back_from_fp8(&qt, &sbad, 1, 64, &o), ts__tq_cast_back_from_fp8(&qt, &sbad, 1, 64, &o));
    TQ_SAME(ts__qh_cast_back_from_fp4(&qt, &st, 1, 64, &o), ts__tq_cast_back_from_fp4(&qt, &st, 1, 64, &o));
#undef TQ_SAME
    TS_CHECK(memcmp(q, q2, sizeof q) == 0 && memcmp(s, s2, sizeof s) == 0);
}
