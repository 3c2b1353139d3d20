/* `tilestack bench kernels`, the TileKernels rows: the memory-bound kernels written in the tile
 * language (the .tile files of src/kernels/, docs/kernels.md) at T in {4001, 8001}, H in {4096, 7168}
 * (--quick: T = 4001 only). frac is the share of the probed memcpy bandwidth
 * (bytes read + written / memcpy GB/s), the "% of memcpy bandwidth".
 * One more shape, 8 x 7168, keeps every operand in L2 / L3 across calls: its frac is the
 * kernel's arithmetic ceiling (the memcpy share it would reach if memory cost nothing). A kernel
 * whose DRAM-sized rows run about as fast as this row is bound by its instructions, not by memory.
 * Kernels that work on 128-token blocks (transposes, per-channel and lossless casts) skip it: 8
 * tokens would measure a padded block.
 * Bytes per call, as counted (T x H elements; routing/scale arrays included where they matter):
 *   swiglu+cast       x [T, 2H] bf16 in, e4m3 + f32 scales out          4TH + TH + T*H/32
 *   rmsnorm+cast      x [T, H] bf16 in (read twice, counted once), e4m3 + scales out
 *   expand_to_fused   P = 2T rows gathered from x [T, H] bf16            2*(2PH)
 *   reduce_fused      K = 2: x [2T, H] bf16 in, [T, H] bf16 out         2*2TH + 2TH
 *   expand_to_mhc     [T, H] -> [T, 4, H] bf16                           2TH + 8TH
 *   mhc_pre_apply_mix [T, 4, H] -> [T, H] bf16                           8TH + 2TH
 *   mhc_post          y [T, H], R [T, 4, H] -> [T, 4, H] bf16           2TH + 8TH + 8TH
 *   per_block_cast    bf16 -> e4m3, 128 x 128 scales                     2TH + TH
 *   cast_back         e4m3 -> bf16, 1 x 128 scales                       TH + 2TH
 *   per_token_cast fp4  bf16 -> e2m1x2, f32 scales per 32 (round_sf)     2TH + TH/2 + TH/8
 *   requant e4m3->fp4   e4m3 + 128 x 128 f32 scales -> e2m1x2, 1 x 32    TH + TH/2 + TH/8
 *   block_cast_lossless e2m1x2 + 1 x 32 UE8M0 -> e4m3 + 128 x 128 UE8M0  TH/2 + TH/32 + TH
 *   cast_to_e5m6        bf16 -> e5m6 (12 bits), one scale per row         2TH + 3TH/2
 *   cast_back_e5m6      e5m6 -> bf16                                      3TH/2 + 2TH
 *   cast_back_fp4       e2m1x2 + 1 x 32 f32 scales -> bf16                TH/2 + TH/8 + 2TH
 *   batched_transpose   bf16 [1, T, H] -> [1, H, T]                       4TH
 *   channel_cast+transp bf16 -> e4m3 [H, T], 128-token scales             3TH
 *   per_token_cast sf_only      bf16 -> f32 scales per 128 (round_sf)     2TH + T*H/32
 *   per_token_cast precomputed  bf16 + f32 scales per 128 -> e4m3          2TH + T*H/32 + TH
 *   channel_cast_fused gather   P = T rows gathered (1/8 of them -1) from bf16 x -> e4m3,
 *                               128-row scales                            2TH + 4T + TH + 4*ceil(T/128)*H
 *   channel_cast_fused e4m3     e4m3 + 1 x 128 f32 scales -> e4m3          TH + T*H/32 + TH + 4*ceil(T/128)*H
 * Rows are named "tk <kernel>"; TS_BENCH_FILTER selects by "name shape" substring. */
#include "bench.h"
#include "core/internal.h"
#include "tilestack/kernels.h"

#include <stdlib.h>
#include <string.h>

enum { K_SWIGLU, K_RMS, K_EXPAND, K_REDUCE, K_EXP_MHC, K_APPLY, K_POST, K_BLOCK, K_BACK,
       K_FP4, K_REQ, K_LOSSLESS, K_E5M6, K_BACK_E5M6, K_BACK_FP4, K_TRANSPOSE, K_PCCT,
       K_SF_ONLY, K_PRE_SF, K_PCCF_GATHER, K_PCCF_E4M3, K_COUNT };

static const char *const k_names[K_COUNT] = {
    "tk swiglu+cast",    "tk rmsnorm+cast", "tk expand_to_fused", "tk reduce_fused", "tk expand_to_mhc",
    "tk mhc_pre_apply_mix", "tk mhc_post",  "tk per_block_cast",  "tk cast_back",
    "tk per_token_cast fp4", "tk requant e4m3->fp4", "tk block_cast_lossless", "tk cast_to_e5m6",
    "tk cast_back_e5m6", "tk cast_back_fp4", "tk batched_transpose", "tk channel_cast+transpose",
    "tk per_token_cast sf_only", "tk per_token_cast precomputed_sf", "tk channel_cast_fused gather",
    "tk channel_cast_fused e4m3"};
static const char *const k_dtypes[K_COUNT] = {"bf16->e4m3", "bf16->e4m3", "bf16", "bf16", "bf16",
                                              "bf16",       "bf16",       "bf16->e4m3", "e4m3->bf16",
                                              "bf16->fp4", "e4m3->fp4", "fp4->e4m3", "bf16->e5m6",
                                              "e5m6->bf16", "fp4->bf16", "bf16", "bf16->e4m3",
                                              "bf16->sf", "bf16->e4m3", "bf16->e4m3", "e4m3->e4m3"};

typedef struct tk_ctx {
    int which;
    ts_tensor t[8];
    int64_t cnt[3];
} tk_ctx;

static ts_status run_tk(void *p) {
    tk_ctx *c = p;
    ts_tensor *t = c->t;
    switch (c->which) {
    case K_SWIGLU:
        return ts_swiglu_forward_and_per_token_cast(&t[0], &t[1], &t[2], &t[3], &t[4], &t[5], &t[6], 128, 10.0f, true,
                                                    true, true, true, true, 1e-4f);
    case K_RMS: return ts_rmsnorm_forward_and_per_token_cast(&t[0], &t[1], &t[2], &t[3], 1e-6f, 128, true);
    case K_EXPAND: return ts_expand_to_fused(&t[0], &t[1], &t[2]);
    case K_REDUCE: return ts_reduce_fused(&t[0], &t[1], &t[2], &t[3]);
    case K_EXP_MHC: return ts_expand_to_mhc(&t[0], &t[1]);
    case K_APPLY: return ts_mhc_pre_apply_mix(&t[0], &t[1], &t[2]);
    case K_POST: return ts_mhc_post(&t[0], &t[1], &t[2], &t[3], &t[4]);
    case K_BLOCK: return ts_per_block_cast(&t[0], &t[1], &t[2], true);
    case K_FP4: return ts_per_token_cast_bf16_to_fp4(&t[0], &t[1], &t[2], 32, true);
    case K_REQ: return ts_per_token_cast_e4m3_to_fp4(&t[0], &t[1], &t[2], &t[3], 32, 128, 128, true);
    case K_LOSSLESS: return ts_per_block_cast_lossless_ue8m0(&t[0], &t[1], &t[2], &t[3], 1, 32, 128, 128);
    case K_E5M6: return ts_per_token_cast_bf16_to_e5m6(&t[0], &t[1], &t[2], true);
    case K_BACK_E5M6: return ts_cast_back_e5m6(&t[0], &t[1], &t[2], 1, t[2].shape[1]);
    case K_BACK_FP4: return ts_cast_back_fp4(&t[0], &t[1], &t[2], 1, 32);
    case K_TRANSPOSE: return ts_batched_transpose(&t[0], &t[1]);
    case K_PCCT: return ts_per_channel_cast_and_transpose(&t[0], &t[1], &t[2], 128, true);
    case K_SF_ONLY: return ts_per_token_cast_bf16_to_e4m3_sf_only(&t[0], &t[1], 128, true);
    case K_PRE_SF: return ts_per_token_cast_bf16_to_e4m3_precomputed_sf(&t[0], &t[1], &t[2], 128);
    case K_PCCF_GATHER: return ts_per_channel_cast_fused_bf16_gather(&t[0], &t[1], &t[2], &t[3], true);
    case K_PCCF_E4M3: return ts_per_channel_cast_fused_e4m3(&t[0], &t[1], &t[2], &t[3], true);
    default: return ts_cast_back(&t[0], &t[1], &t[2], 1, 128);
    }
}

/* bf16 activations with |x| ~ 2^-8 .. 2^8, from a small random table (fast to fill GBs) */
static void fill_bf16(uint16_t *x, int64_t n) {
    static uint16_t tab[4099];
    ts__bench_rng r = {0x2545F4914F6CDD1Dull};
    for (int i = 0; i < 4099; i++) {
        uint64_t v = ts__bench_rng_next(&r);
        tab[i] = (uint16_t)(((v >> 16) & 0x8000) | ((119 + (v % 16)) << 7) | (v >> 40 & 0x7F));
    }
    for (int64_t i = 0; i < n; i += 4099) memcpy(x + i, tab, (size_t)(n - i < 4099 ? n - i : 4099) * 2);
}

static void fill_f32(float *x, int64_t n, float base) {
    for (int64_t i = 0; i < n; i++) x[i] = base + (float)(i % 13) * (1.0f / 64.0f);
}

int ts__suite_kernels_tk(const ts__bench_opts *opts, const char *filter, const int *threads, int nthreads);
int ts__suite_kernels_tk(const ts__bench_opts *opts, const char *filter, const int *threads, int nthreads) {
    static const int64_t shapes[][2] = {{8, 7168}, {4001, 4096}, {4001, 7168}, {8001, 4096}, {8001, 7168}};
    const int nshapes = opts->quick ? 3 : 5;
    const int64_t TM = opts->quick ? 4001 : 8001, HM = 7168;
    int failures = 0;
    for (int k = 0; k < K_COUNT; k++) {
        bool any = false;
        for (int si = 0; si < nshapes; si++) {
            char shape[32];
            snprintf(shape, sizeof shape, "%lldx%lld", (long long)shapes[si][0], (long long)shapes[si][1]);
            any |= ts__bench_wanted(filter, k_names[k], shape);
        }
        if (!any) continue;
        /* the largest buffers this kernel needs (elements of T x H) */
        const int64_t e = TM * HM;
        void *b[6] = {0};
        size_t sz[6] = {0};
        switch (k) {
        case K_SWIGLU: sz[0] = (size_t)e * 4, sz[1] = (size_t)e, sz[2] = (size_t)TM * 56 * 4, sz[3] = (size_t)TM * 4 * 3; break;
        case K_RMS: sz[0] = (size_t)e * 2, sz[1] = (size_t)e, sz[2] = (size_t)TM * 56 * 4, sz[3] = (size_t)HM * 2; break;
        case K_EXPAND: sz[0] = (size_t)e * 2, sz[1] = (size_t)e * 4, sz[2] = (size_t)TM * 2 * 4; break;
        case K_REDUCE: sz[0] = (size_t)e * 4, sz[1] = (size_t)e * 2, sz[2] = (size_t)TM * 2 * 8; break;
        case K_EXP_MHC: sz[0] = (size_t)e * 2, sz[1] = (size_t)e * 8; break;
        case K_APPLY: sz[0] = (size_t)e * 8, sz[1] = (size_t)e * 2, sz[2] = (size_t)TM * 16; break;
        case K_POST: sz[0] = (size_t)e * 2, sz[1] = (size_t)e * 8, sz[2] = (size_t)e * 8, sz[3] = (size_t)TM * 80; break;
        case K_BLOCK: sz[0] = (size_t)e * 2, sz[1] = (size_t)e, sz[2] = (size_t)(TM / 128 + 1) * 56 * 4; break;
        case K_FP4: case K_REQ: case K_LOSSLESS: case K_E5M6: case K_BACK_E5M6: case K_BACK_FP4: case K_TRANSPOSE: case K_PCCT:
        case K_SF_ONLY: case K_PRE_SF: case K_PCCF_GATHER: case K_PCCF_E4M3:
            sz[0] = (size_t)e * 2, sz[1] = (size_t)e * 2, sz[2] = (size_t)TM * (HM / 16) * 4, sz[3] = (size_t)TM * (HM / 16) * 4;
            break;
        default: sz[0] = (size_t)e, sz[1] = (size_t)TM * 56 * 4, sz[2] = (size_t)e * 2; break;
        }
        bool ok = true;
        for (int i = 0; i < 6; i++)
            if (sz[i]) ok &= (b[i] = ts__aligned_alloc(sz[i])) != NULL;
        if (!ok) {
            fprintf(stderr, "tilestack bench: out of memory for %s\n", k_names[k]);
            for (int i = 0; i < 6; i++) ts__aligned_free(b[i]);
            failures++;
            continue;
        }
        for (int i = 0; i < 6; i++)
            if (sz[i]) memset(b[i], 0, sz[i]);
        for (int si = 0; si < nshapes; si++) {
            const int64_t T = shapes[si][0], H = shapes[si][1], ng = H / 128;
            char shape[32];
            snprintf(shape, sizeof shape, "%lldx%lld", (long long)T, (long long)H);
            if (!ts__bench_wanted(filter, k_names[k], shape)) continue;
            if (T < 128 && (k == K_LOSSLESS || k == K_TRANSPOSE || k == K_PCCT || k == K_PCCF_GATHER || k == K_PCCF_E4M3))
                continue;
            tk_ctx c = {.which = k};
            ts_tensor *t = c.t;
            double bytes = 0;
            switch (k) {
            case K_SWIGLU: {
                int32_t *pe = (int32_t *)b[3], *ptt = pe + TM;
                float *tw = (float *)(ptt + TM);
                fill_bf16(b[0], T * 2 * H);
                for (int64_t i = 0; i < T; i++) pe[i] = (int32_t)(i % 7), ptt[i] = (int32_t)i, tw[i] = 0.5f;
                t[0] = ts_tensor_2d(b[0], TS_BF16, T, 2 * H), t[1] = ts_tensor_1d(pe, TS_I32, T);
                t[2] = ts_tensor_1d(ptt, TS_I32, T), t[3] = ts_tensor_1d(tw, TS_F32, T);
                t[4] = ts_tensor_2d(b[1], TS_E4M3, T, H), t[5] = ts_tensor_2d(b[2], TS_F32, T, ng);
                t[6] = ts_tensor_1d(c.cnt, TS_I64, 3);
                bytes = 4.0 * (double)(T * H) + (double)(T * H) + 4.0 * (double)(T * ng);
                break;
            }
            case K_RMS:
                fill_bf16(b[0], T * H), fill_bf16(b[3], H);
                t[0] = ts_tensor_2d(b[0], TS_BF16, T, H), t[1] = ts_tensor_1d(b[3], TS_BF16, H);
                t[2] = ts_tensor_2d(b[1], TS_E4M3, T, H), t[3] = ts_tensor_2d(b[2], TS_F32, T, ng);
                bytes = 2.0 * (double)(T * H) + (double)(T * H) + 4.0 * (double)(T * ng);
                break;
            case K_EXPAND: {
                int32_t *pt = (int32_t *)b[2];
                fill_bf16(b[0], T * H);
                for (int64_t p = 0; p < 2 * T; p++) pt[p] = (int32_t)((p * 7919) % T); /* scattered sources */
                t[0] = ts_tensor_2d(b[0], TS_BF16, T, H), t[1] = ts_tensor_1d(pt, TS_I32, 2 * T);
                t[2] = ts_tensor_2d(b[1], TS_BF16, 2 * T, H);
                bytes = 2.0 * (2.0 * (double)(2 * T * H));
                break;
            }
            case K_REDUCE: {
                int32_t *t2p = (int32_t *)b[2];
                float *w = (float *)(t2p + 2 * TM);
                fill_bf16(b[0], 2 * T * H);
                for (int64_t i = 0; i < T; i++) t2p[2 * i] = (int32_t)i, t2p[2 * i + 1] = (int32_t)(T + (i * 7919) % T);
                fill_f32(w, 2 * T, 0.25f);
                t[0] = ts_tensor_2d(b[0], TS_BF16, 2 * T, H), t[1] = ts_tensor_2d(w, TS_F32, T, 2);
                t[2] = ts_tensor_2d(t2p, TS_I32, T, 2), t[3] = ts_tensor_2d(b[1], TS_BF16, T, H);
                bytes = 2.0 * 2.0 * (double)(T * H) + 2.0 * (double)(T * H);
                break;
            }
            case K_EXP_MHC:
                fill_bf16(b[0], T * H);
                t[0] = ts_tensor_2d(b[0], TS_BF16, T, H), t[1] = ts_tensor_3d(b[1], TS_BF16, T, 4, H);
                bytes = 10.0 * (double)(T * H);
                break;
            case K_APPLY:
                fill_bf16(b[0], 4 * T * H), fill_f32(b[2], 4 * T, 0.3f);
                t[0] = ts_tensor_3d(b[0], TS_BF16, T, 4, H), t[1] = ts_tensor_2d(b[2], TS_F32, T, 4);
                t[2] = ts_tensor_2d(b[1], TS_BF16, T, H);
                bytes = 10.0 * (double)(T * H);
                break;
            case K_POST: {
                float *post = (float *)b[3], *comb = post + 4 * TM;
                fill_bf16(b[0], T * H), fill_bf16(b[1], 4 * T * H), fill_f32(post, 4 * T, 0.5f), fill_f32(comb, 16 * T, 0.2f);
                t[0] = ts_tensor_2d(b[0], TS_BF16, T, H), t[1] = ts_tensor_3d(b[1], TS_BF16, T, 4, H);
                t[2] = ts_tensor_2d(post, TS_F32, T, 4), t[3] = ts_tensor_2d(comb, TS_F32, T, 16);
                t[4] = ts_tensor_3d(b[2], TS_BF16, T, 4, H);
                bytes = 18.0 * (double)(T * H);
                break;
            }
            case K_BLOCK:
                fill_bf16(b[0], T * H);
                t[0] = ts_tensor_2d(b[0], TS_BF16, T, H), t[1] = ts_tensor_2d(b[1], TS_E4M3, T, H);
                t[2] = ts_tensor_2d(b[2], TS_F32, (T + 127) / 128, ng);
                bytes = 3.0 * (double)(T * H);
                break;
            case K_FP4:
                fill_bf16(b[0], T * H);
                t[0] = ts_tensor_2d(b[0], TS_BF16, T, H), t[1] = ts_tensor_2d(b[1], TS_E2M1X2, T, H / 2);
                t[2] = ts_tensor_2d(b[2], TS_F32, T, H / 32);
                bytes = 2.0 * (double)(T * H) + 0.5 * (double)(T * H) + 4.0 * (double)(T * H / 32);
                break;
            case K_REQ:
                fill_bf16(b[1], T * H / 2); /* e4m3 codes from bf16 bytes: finite, NaN codes just propagate */
                memcpy(b[0], b[1], (size_t)(T * H));
                fill_f32(b[3], ((T + 127) / 128) * ((H + 127) / 128), 0.01f);
                t[0] = ts_tensor_2d(b[0], TS_E4M3, T, H), t[1] = ts_tensor_2d(b[3], TS_F32, (T + 127) / 128, (H + 127) / 128);
                t[2] = ts_tensor_2d(b[1], TS_E2M1X2, T, H / 2), t[3] = ts_tensor_2d(b[2], TS_F32, T, H / 32);
                bytes = (double)(T * H) + 0.5 * (double)(T * H) + 4.0 * (double)(T * H / 32);
                break;
            case K_LOSSLESS: {
                fill_bf16(b[0], T * H / 4); /* any bytes are FP4 codes */
                uint32_t *w = (uint32_t *)b[3];
                for (int64_t i = 0; i < T * (H / 128); i++) w[i] = 0x7B7C7D7Eu; /* exponents 123..126 */
                t[0] = ts_tensor_2d(b[0], TS_E2M1X2, T, H / 2), t[1] = ts_tensor_2d(w, TS_UE8M0X4, T, H / 128);
                t[2] = ts_tensor_2d(b[1], TS_E4M3, T, H), t[3] = ts_tensor_2d(b[2], TS_UE8M0X4, (T + 127) / 128, (H / 128 + 3) / 4);
                bytes = 0.5 * (double)(T * H) + (double)(T * H / 32) + (double)(T * H);
                break;
            }
            case K_E5M6:
                fill_bf16(b[0], T * H);
                t[0] = ts_tensor_2d(b[0], TS_BF16, T, H), t[1] = ts_tensor_2d(b[1], TS_E5M6X8, T, H * 3 / 2);
                t[2] = ts_tensor_2d(b[2], TS_F32, T, 1);
                bytes = 3.5 * (double)(T * H);
                break;
            case K_BACK_E5M6:
                fill_bf16(b[0], T * H * 3 / 4); /* any bytes are e5m6 codes */
                fill_f32(b[2], T, 0.01f);
                t[0] = ts_tensor_2d(b[0], TS_E5M6X8, T, H * 3 / 2), t[1] = ts_tensor_2d(b[2], TS_F32, T, 1);
                t[2] = ts_tensor_2d(b[1], TS_BF16, T, H);
                bytes = 3.5 * (double)(T * H);
                break;
            case K_BACK_FP4:
                fill_bf16(b[0], T * H / 4);
                fill_f32(b[2], T * (H / 32), 0.01f);
                t[0] = ts_tensor_2d(b[0], TS_E2M1X2, T, H / 2), t[1] = ts_tensor_2d(b[2], TS_F32, T, H / 32);
                t[2] = ts_tensor_2d(b[1], TS_BF16, T, H);
                bytes = 0.5 * (double)(T * H) + (double)(T * H / 8) + 2.0 * (double)(T * H);
                break;
            case K_TRANSPOSE:
                fill_bf16(b[0], T * H);
                t[0] = ts_tensor_3d(b[0], TS_BF16, 1, T, H), t[1] = ts_tensor_3d(b[1], TS_BF16, 1, H, T);
                bytes = 4.0 * (double)(T * H);
                break;
            case K_PCCT:
                fill_bf16(b[0], T * H);
                t[0] = ts_tensor_2d(b[0], TS_BF16, T, H), t[1] = ts_tensor_2d(b[1], TS_E4M3, H, T);
                t[2] = ts_tensor_2d(b[2], TS_F32, (T + 127) / 128, H);
                bytes = 3.0 * (double)(T * H) + 4.0 * (double)((T + 127) / 128 * H);
                break;
            case K_SF_ONLY:
                fill_bf16(b[0], T * H);
                t[0] = ts_tensor_2d(b[0], TS_BF16, T, H), t[1] = ts_tensor_2d(b[2], TS_F32, T, ng);
                bytes = 2.0 * (double)(T * H) + 4.0 * (double)(T * ng);
                break;
            case K_PRE_SF:
                fill_bf16(b[0], T * H);
                t[0] = ts_tensor_2d(b[0], TS_BF16, T, H), t[1] = ts_tensor_2d(b[2], TS_F32, T, ng);
                t[2] = ts_tensor_2d(b[1], TS_E4M3, T, H);
                /* the scales the cast itself would use */
                if (ts_per_token_cast_bf16_to_e4m3_sf_only(&t[0], &t[1], 128, true) != TS_OK) failures++;
                bytes = 2.0 * (double)(T * H) + 4.0 * (double)(T * ng) + (double)(T * H);
                break;
            case K_PCCF_GATHER: {
                int32_t *pt = (int32_t *)b[3];
                fill_bf16(b[0], T * H);
                for (int64_t p = 0; p < T; p++) pt[p] = p % 8 == 5 ? -1 : (int32_t)((p * 7919) % T);
                t[0] = ts_tensor_2d(b[0], TS_BF16, T, H), t[1] = ts_tensor_1d(pt, TS_I32, T);
                t[2] = ts_tensor_2d(b[1], TS_E4M3, T, H), t[3] = ts_tensor_2d(b[2], TS_F32, (T + 127) / 128, H);
                bytes = 2.0 * (double)(T * H) + 4.0 * (double)T + (double)(T * H) + 4.0 * (double)((T + 127) / 128 * H);
                break;
            }
            case K_PCCF_E4M3:
                fill_bf16(b[1], T * H / 2); /* e4m3 codes from bf16 bytes */
                memcpy(b[0], b[1], (size_t)(T * H));
                fill_f32(b[3], T * ng, 0.01f);
                t[0] = ts_tensor_2d(b[0], TS_E4M3, T, H), t[1] = ts_tensor_2d(b[3], TS_F32, T, ng);
                t[2] = ts_tensor_2d(b[1], TS_E4M3, T, H), t[3] = ts_tensor_2d(b[2], TS_F32, (T + 127) / 128, H);
                bytes = 2.0 * (double)(T * H) + 4.0 * (double)(T * ng) + 4.0 * (double)((T + 127) / 128 * H);
                break;
            default:
                fill_bf16(b[2], T * H / 2); /* any bytes are e4m3 codes; NaN codes just propagate */
                memcpy(b[0], b[2], (size_t)(T * H));
                fill_f32(b[1], T * ng, 0.01f);
                t[0] = ts_tensor_2d(b[0], TS_E4M3, T, H), t[1] = ts_tensor_2d(b[1], TS_F32, T, ng);
                t[2] = ts_tensor_2d(b[2], TS_BF16, T, H);
                bytes = 3.0 * (double)(T * H) + 4.0 * (double)(T * ng);
                break;
            }
            for (int ti = 0; ti < nthreads; ti++) {
                (void)ts_set_num_threads(threads[ti]);
                ts__bench_row row = {.suite = "kernels", .name = k_names[k], .shape = shape, .dtype = k_dtypes[k],
                                     .threads = threads[ti], .bytes = bytes, .roof = TS__ROOF_MEMCPY};
                ts_status st = ts__bench_time(run_tk, &c, opts->quick, &row.t);
                if (st != TS_OK) {
                    ts__bench_report_error(opts, &row, ts_last_error());
                    failures++;
                    continue;
                }
                ts__bench_report(opts, &row);
            }
        }
        for (int i = 0; i < 6; i++) ts__aligned_free(b[i]);
    }
    return failures;
}
