/* GEMM packing: the SIMD panel packers (AVX2, and AVX-512 for full 16-row panels) give the
 * scalar table packer's floats bit for bit (every e4m3 code including NaN, every e2m1 code,
 * arbitrary bf16 bits), for both panel widths, K offsets and chunk tails, on every path that
 * packs with them; e4m3 also without any NaN code (the packers' NaN-free fast path). */
#include "ts_test.h"
#include "ts_prng.h"

#include "gemm/gemm_internal.h"
#include "gemm/gemm_kernels.h"

#include <stdlib.h>
#include <string.h>

TS_TEST(gemm_pack_avx2_matches_scalar) {
    const ts_isa isa0 = ts_get_isa();
    int isas[TS_ISA_COUNT_], nsimd = 0;
    const int nisa = ts_test_isas(isas);
    for (int i = 0; i < nisa; i++) /* the paths that pack with the AVX2 packer */
        if (ts__isa_avx2_up((ts_isa)isas[i])) isas[nsimd++] = isas[i];
    if (nsimd == 0) return; /* no AVX2 path here */
    const int64_t R = 20, K = 700;
    uint8_t *buf = (uint8_t *)malloc((size_t)(R * K) * 2);
    float *ref = (float *)malloc(16 * 320 * 4), *out = (float *)malloc(16 * 320 * 4);
    ts_prng rng = ts_prng_seed(77);
    const ts_dtype dts[3] = {TS_E4M3, TS_BF16, TS_E2M1X2};
    for (int nan_free = 0; nan_free < 2; nan_free++) {
    for (int64_t i = 0; i < R * K * 2; i++) {
        buf[i] = (uint8_t)ts_prng_u32(&rng);
        if (nan_free && (buf[i] & 0x7F) == 0x7F) buf[i] ^= 1; /* 0x7E: the largest finite */
    }
    const int64_t kcs[] = {1, 7, 8, 9, 16, 31, 33, 63, 64, 65, 70, 129, 256, 300};
    const int64_t k0s[] = {0, 2, 130, 256};
    const int ws[2] = {TS__GEMM_MR, TS__GEMM_NR};
    for (int d = 0; d < 3; d++)
        for (int wi = 0; wi < 2; wi++)
            for (size_t a = 0; a < sizeof kcs / sizeof kcs[0]; a++)
                for (size_t b = 0; b < sizeof k0s / sizeof k0s[0]; b++) {
                    ts__gemm_operand op;
                    memset(&op, 0, sizeof op);
                    op.data = buf;
                    op.dtype = dts[d];
                    op.mn = R;
                    op.k = K;
                    op.s_mn = dts[d] == TS_E2M1X2 ? K / 2 : K;
                    op.s_k = 1;
                    op.k_major = true;
                    const int w = ws[wi];
                    const int64_t r0 = 3, kc = kcs[a], k0 = k0s[b];
                    memset(ref, 0xAB, 16 * 320 * 4);
                    TS_CHECK_STATUS(ts_set_isa(TS_ISA_GENERIC), TS_OK);
                    ts__gemm_pack_panel(&op, r0, w, k0, kc, w, ref);
                    for (int i = 0; i < nsimd; i++) {
                        memset(out, 0xCD, 16 * 320 * 4);
                        TS_CHECK_STATUS(ts_set_isa((ts_isa)isas[i]), TS_OK);
                        ts__gemm_pack_panel(&op, r0, w, k0, kc, w, out);
                        TS_CHECK_MSG(memcmp(ref, out, (size_t)(kc * w) * 4) == 0,
                                     "isa %s dtype %s w %d kc %lld k0 %lld nan_free %d", ts_isa_name((ts_isa)isas[i]),
                                     ts_dtype_name(dts[d]), w, (long long)kc, (long long)k0, nan_free);
                    }
                }
    }
    free(buf), free(ref), free(out);
    ts_set_isa(isa0);
}

/* The vdpbf16ps kernels' bf16-pair panels (ts__gemm_pack_panel_pairs: the AVX-512 direct
 * packers for full 16-row e4m3 / e2m1 panels, the f32 panel + conversion elsewhere) hold
 * exactly the top halves of the scalar f32 panel's values, K 2q high and 2q + 1 low, 0 past
 * an odd kc; every code (NaN included), both widths, partial panels, K offsets and tails. */
TS_TEST(gemm_pack_pairs_match_f32) {
    const ts_isa isa0 = ts_get_isa();
    int isas[TS_ISA_COUNT_];
    const int nisa = ts_test_isas(isas);
    const int64_t R = 20, K = 700;
    uint8_t *buf = (uint8_t *)malloc((size_t)(R * K));
    float *f = (float *)malloc(16 * 320 * 4), *tmp = (float *)malloc(16 * 320 * 4);
    uint32_t *want = (uint32_t *)malloc(16 * 160 * 4), *out = (uint32_t *)malloc(16 * 160 * 4);
    ts_prng rng = ts_prng_seed(78);
    for (int64_t i = 0; i < R * K; i++) buf[i] = (uint8_t)ts_prng_u32(&rng);
    const ts_dtype dts[2] = {TS_E4M3, TS_E2M1X2};
    const int64_t kcs[] = {1, 2, 7, 63, 64, 65, 128, 129, 256};
    const int64_t k0s[] = {0, 2, 256};
    const int ws[2] = {TS__GEMM_MR, TS__GEMM_NR};
    for (int d = 0; d < 2; d++)
        for (int wi = 0; wi < 2; wi++)
            for (int part = 0; part < 2; part++)
                for (size_t a = 0; a < sizeof kcs / sizeof kcs[0]; a++)
                    for (size_t b = 0; b < sizeof k0s / sizeof k0s[0]; b++) {
                        ts__gemm_operand op;
                        memset(&op, 0, sizeof op);
                        op.data = buf;
                        op.dtype = dts[d];
                        op.mn = R;
                        op.k = K;
                        op.s_mn = dts[d] == TS_E2M1X2 ? K / 2 : K;
                        op.s_k = 1;
                        op.k_major = true;
                        const int w = ws[wi];
                        const int64_t rows = part ? w - 3 : w, kc = kcs[a], k0 = k0s[b];
                        TS_CHECK_STATUS(ts_set_isa(TS_ISA_GENERIC), TS_OK);
                        ts__gemm_pack_panel(&op, 3, rows, k0, kc, w, f);
                        for (int64_t q = 0; q < (kc + 1) / 2; q++)
                            for (int i = 0; i < w; i++) {
                                uint32_t hi, lo = 0;
                                memcpy(&hi, &f[2 * q * w + i], 4);
                                if (2 * q + 1 < kc) memcpy(&lo, &f[(2 * q + 1) * w + i], 4);
                                TS_CHECK(!(hi & 0xFFFF) && !(lo & 0xFFFF)); /* exact in bf16 */
                                want[q * w + i] = (hi & 0xFFFF0000u) | lo >> 16;
                            }
                        for (int i = 0; i < nisa; i++) {
                            memset(out, 0xCD, 16 * 160 * 4);
                            TS_CHECK_STATUS(ts_set_isa((ts_isa)isas[i]), TS_OK);
                            ts__gemm_pack_panel_pairs(&op, 3, rows, k0, kc, w, tmp, out);
                            TS_CHECK_MSG(memcmp(want, out, (size_t)((kc + 1) / 2 * w) * 4) == 0,
                                         "isa %s dtype %s w %d rows %lld kc %lld k0 %lld",
                                         ts_isa_name((ts_isa)isas[i]), ts_dtype_name(dts[d]), w,
                                         (long long)rows, (long long)kc, (long long)k0);
                        }
                    }
    free(buf), free(f), free(tmp), free(want), free(out);
    ts_set_isa(isa0);
}
