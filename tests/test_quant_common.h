/* Shared by the quantiser tests: the golden-record runner of tests/gen/gen_quant.py and the
 * input construction it mirrors (make_input there). */
#ifndef TS_TEST_QUANT_COMMON_H
#define TS_TEST_QUANT_COMMON_H

#include "ts_prng.h"
#include "ts_test.h"

#include "tilestack/numerics.h"
#include "tilestack/quant.h"

#include <math.h>
#include <stdlib.h>

typedef struct qrec {
    uint32_t op, dtype;
    int64_t m, n, g;
    uint32_t flags, pad;
    uint64_t seed, hq, hs;
    uint8_t qh[64], sh[64];
} qrec;
_Static_assert(sizeof(qrec) == 192, "golden record layout");

enum { QOP_FP8_TOKEN = 0, QOP_FP8_BLOCK = 1, QOP_FP8_CHANNEL = 2, QOP_FP4_DG = 3, QOP_FP4_RNE = 4 };
enum { QF_UE8M0 = 1, QF_PACKED = 2, QF_SPECIAL = 4 };

/* f32 values of the test input (after rounding to `dtype`), as gen_quant.py make_input. */
static float *qt_make_values(uint64_t seed, int64_t m, int64_t n, ts_dtype dtype, bool specials) {
    (void)dtype; /* rounding to dtype happens in qt_make_input */
    float *x = (float *)malloc((size_t)(m * n) * sizeof(float));
    ts_prng p = ts_prng_seed(seed);
    for (int64_t i = 0; i < m * n; i++) x[i] = ts_prng_uniform(&p);
    for (int64_t r = 0; r < m; r++) {
        int e = (int)(r % 40) - 20;
        for (int64_t j = 0; j < n; j++) x[r * n + j] = ldexpf(x[r * n + j], e);
        if (!specials) continue;
        int64_t k = r % 8, c = (r * 13) % n;
        float *row = x + r * n;
        uint32_t nn = 0xFFC00000u;
        switch (k) {
        case 1: for (int64_t j = 0; j < n; j++) row[j] = 0.0f; break;
        case 2: row[c] = NAN; break;
        case 3: row[c] = INFINITY; break;
        case 4: row[c] = -INFINITY; break;
        case 5: for (int64_t j = 0; j < n; j++) row[j] = ldexpf(row[j], 100); break;
        case 6: for (int64_t j = 0; j < n; j++) row[j] = ldexpf(row[j], -125); break;
        case 7: memcpy(&row[c], &nn, 4); break;
        default: break;
        }
    }
    return x;
}

/* The input tensor data in `dtype` (bf16 / f16 bits or f32), malloc'd. */
static void *qt_make_input(const float *v, int64_t count, ts_dtype dtype) {
    if (dtype == TS_F32) {
        float *o = (float *)malloc((size_t)count * 4);
        memcpy(o, v, (size_t)count * 4);
        return o;
    }
    uint16_t *o = (uint16_t *)malloc((size_t)count * 2 + 2);
    for (int64_t i = 0; i < count; i++) o[i] = dtype == TS_BF16 ? ts_f32_to_bf16(v[i]) : ts_f32_to_f16(v[i]);
    return o;
}

/* fnv1a64 of the per-row fnv1a64 values (as the generator computes it). */
static uint64_t qt_row_hash(const void *data, int64_t rows, int64_t row_bytes) {
    uint64_t *h = (uint64_t *)malloc((size_t)(rows > 0 ? rows : 1) * 8);
    for (int64_t r = 0; r < rows; r++) h[r] = ts_fnv1a64((const char *)data + r * row_bytes, (size_t)row_bytes);
    uint64_t out = ts_fnv1a64(h, (size_t)rows * 8);
    free(h);
    return out;
}

/* Runs one record with the current ISA / thread count; returns the number of mismatches. */
static int qt_run_record(ts_test_ctx *ts_t_, const qrec *r) {
    const ts_dtype dt = (ts_dtype)r->dtype;
    const bool ue8m0 = r->flags & QF_UE8M0, packed = r->flags & QF_PACKED;
    const int64_t m = r->m, n = r->n, g = r->g;
    float *v = qt_make_values(r->seed, m, n, dt, r->flags & QF_SPECIAL);
    void *xd = qt_make_input(v, m * n, dt);
    free(v);
    ts_tensor x = ts_tensor_2d(xd, dt, m, n);
    const bool fp4 = r->op == QOP_FP4_DG || r->op == QOP_FP4_RNE;
    const int64_t qcols = fp4 ? n / 2 : n;
    uint8_t *q = (uint8_t *)malloc((size_t)(m * qcols) + 1);
    int64_t srows, scols;
    if (r->op == QOP_FP8_BLOCK) { srows = (m + g - 1) / g; scols = (n + g - 1) / g; }
    else if (r->op == QOP_FP8_CHANNEL) { srows = m / g; scols = n; }
    else { srows = m; scols = (n + g - 1) / g; if (packed) scols = (scols + 3) / 4; }
    uint32_t *s = (uint32_t *)malloc((size_t)(srows * scols) * 4 + 4);
    ts_tensor qt = ts_tensor_2d(q, fp4 ? TS_E2M1X2 : TS_E4M3, m, qcols);
    ts_tensor st = ts_tensor_2d(s, packed ? TS_UE8M0X4 : TS_F32, srows, scols);
    ts_status st_ = TS_ERR_INTERNAL;
    switch (r->op) {
    case QOP_FP8_TOKEN: st_ = ts_per_token_cast_to_fp8(&x, ue8m0, g, packed, &qt, &st); break;
    case QOP_FP8_BLOCK: st_ = ts_per_block_cast_to_fp8(&x, ue8m0, g, &qt, &st); break;
    case QOP_FP8_CHANNEL: st_ = ts_per_channel_cast_to_fp8(&x, ue8m0, g, &qt, &st); break;
    case QOP_FP4_DG: st_ = ts_per_token_cast_to_fp4(&x, ue8m0, g, packed, TS_FP4_ROUND_DEEPGEMM, &qt, &st); break;
    case QOP_FP4_RNE: st_ = ts_per_token_cast_to_fp4(&x, ue8m0, g, packed, TS_FP4_ROUND_RNE, &qt, &st); break;
    default: break;
    }
    int bad = 0;
    if (st_ != TS_OK) {
        TS_CHECK_MSG(0, "record op %u dtype %u [%lld,%lld] g %lld flags %u: status %d (%s)", r->op, r->dtype,
                     (long long)m, (long long)n, (long long)g, r->flags, (int)st_, ts_last_error());
        bad = 1;
    } else {
        uint64_t hq = qt_row_hash(q, m, qcols), hs = qt_row_hash(s, srows, scols * 4);
        size_t nq = (size_t)(m * qcols) < 64 ? (size_t)(m * qcols) : 64;
        size_t ns = (size_t)(srows * scols * 4) < 64 ? (size_t)(srows * scols * 4) : 64;
        if (memcmp(q, r->qh, nq) != 0 || hq != r->hq) {
            size_t i = 0;
            while (i < nq && q[i] == r->qh[i]) i++;
            TS_CHECK_MSG(0, "record op %u dtype %u [%lld,%lld] g %lld flags %u: codes differ (first head diff at %zu: %02x vs %02x)",
                         r->op, r->dtype, (long long)m, (long long)n, (long long)g, r->flags, i,
                         i < nq ? q[i] : 0, i < nq ? r->qh[i] : 0);
            bad = 1;
        }
        if (memcmp(s, r->sh, ns) != 0 || hs != r->hs) {
            TS_CHECK_MSG(0, "record op %u dtype %u [%lld,%lld] g %lld flags %u: scales differ (head %08x vs %08x)",
                         r->op, r->dtype, (long long)m, (long long)n, (long long)g, r->flags, s[0],
                         ((const uint32_t *)r->sh)[0]);
            bad = 1;
        }
    }
    free(q);
    free(s);
    free(xd);
    return bad;
}

/* Every record whose op is in [op_lo, op_hi], for each ISA path that runs here (generic,
 * avx2, avx512, ...) and thread counts 1..4 (or, unless all_pairs, generic with 1 and 3
 * threads and each SIMD path with 2 and 4) (records with more than 2M values: generic with 2
 * threads, each SIMD path with 1 and 3, to bound the run time). */
static void qt_run_golden(ts_test_ctx *ts_t_, uint32_t op_lo, uint32_t op_hi, bool all_pairs) {
    size_t size = 0;
    qrec *recs = (qrec *)TS_READ_GOLDEN("quant_cases.bin", &size);
    if (!recs) return;
    TS_CHECK(size % sizeof(qrec) == 0);
    const int saved_threads = ts_get_num_threads();
    const ts_isa saved_isa = ts_get_isa();
    int count = 0;
    int isas[TS_ISA_COUNT_];
    const int nisa = ts_test_isas(isas);
    for (int ii = 0; ii < nisa; ii++) {
        const int isa = isas[ii];
        if (ts_set_isa((ts_isa)isa) != TS_OK) continue;
        for (int th = 1; th <= 4; th++) {
            ts_set_num_threads(th);
            for (size_t i = 0; i < size / sizeof(qrec); i++) {
                const qrec *r = &recs[i];
                if (r->op < op_lo || r->op > op_hi) continue;
                if (!all_pairs && (th % 2) != (isa == TS_ISA_GENERIC ? 1 : 0)) continue;
                if (r->m * r->n > 2000000 &&
                    !(isa == TS_ISA_GENERIC ? th == 2 : (th == 1 || th == 3)))
                    continue;
                if (qt_run_record(ts_t_, r) && TS_FAILED())
                    printf("    (isa %s, threads %d)\n", ts_isa_name((ts_isa)isa), th);
                count++;
            }
        }
    }
    TS_CHECK(count > 0);
    ts_set_num_threads(saved_threads);
    ts_set_isa(saved_isa);
    free(recs);
}

#endif
