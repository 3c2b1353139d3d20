/* FlashMLA FP8 KV cache helpers: quantise / dequantise a bf16 latent cache to / from the V32
 * (656 B/token) and MODEL1 (584 B/token) layouts with upstream's test rule (tests/quant.py),
 * and the absolute -> paged index conversion. */
#include "flash_mla_internal.h"
#include "../core/internal.h"
#include "tilestack/numerics.h"

#include <math.h>
#include <string.h>

int64_t ts_mla_kv_token_bytes(ts_mla_kv_layout layout) {
    return layout == TS_MLA_KV_V32 ? 656 : layout == TS_MLA_KV_MODEL1 ? 584 : 0;
}

int64_t ts_mla_kv_head_dim(ts_mla_kv_layout layout) {
    return layout == TS_MLA_KV_V32 ? 576 : layout == TS_MLA_KV_MODEL1 ? 512 : 0;
}

/* 2^ceil(log2(max(amax / 448, 1e-4))). The ceil is taken on the exponent bits (exact); for a
 * bf16 amax, amax/448 is either a power of two or at least 0.4% away from one, so a rounded
 * log2 (torch) cannot land on the other side of an integer. inf stays inf, NaN stays NaN. */
static float pow2_scale(float amax) {
    float s = amax / 448.0f;
    if (s != s) return s;
    if (s < 1e-4f) s = 1e-4f;
    uint32_t u;
    memcpy(&u, &s, 4);
    if ((u & 0x7F800000u) != 0x7F800000u && (u & 0x7FFFFFu)) u = (u & 0xFF800000u) + 0x800000u;
    memcpy(&s, &u, 4);
    return s;
}

static float tile_amax(const uint16_t *x, int n) {
    float a = 0.0f;
    for (int i = 0; i < n; i++) {
        float v = fabsf(ts_bf16_to_f32(x[i]));
        if (v != v) return v; /* torch's max propagates NaN */
        if (v > a) a = v;
    }
    return a;
}

/* Both directions: a known layout, an FP8 cache of it, and a BF16 cache of the same blocks. */
static ts_status check_kv_pair(const char *fn, ts_mla_kv_layout layout, const ts_tensor *kv,
                               const ts_tensor *kv_fp8) {
    if (layout != TS_MLA_KV_V32 && layout != TS_MLA_KV_MODEL1)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: unknown layout %d", fn, (int)layout);
    TS__RETURN_IF_ERROR(ts__mla_check_fp8_cache(fn, kv_fp8, "kv_fp8", layout));
    int64_t sh[4] = {kv_fp8->shape[0], kv_fp8->shape[1], 1, ts_mla_kv_head_dim(layout)};
    return ts__mla_check(fn, kv, "kv", TS_BF16, 4, sh);
}

/* Quantisation tiles of the no-PE part: V32 4 x 128 values with f32 scales, MODEL1 7 x 64
 * with ue8m0 scales. */
static int kv_tile(ts_mla_kv_layout layout) { return layout == TS_MLA_KV_V32 ? 128 : 64; }
static int kv_ntiles(ts_mla_kv_layout layout) { return layout == TS_MLA_KV_V32 ? 4 : 7; }

ts_status ts_mla_quantize_kv_cache(ts_mla_kv_layout layout, const ts_tensor *kv,
                                   ts_tensor *kv_fp8) {
    static const char fn[] = "ts_mla_quantize_kv_cache";
    TS__RETURN_IF_ERROR(check_kv_pair(fn, layout, kv, kv_fp8));
    const int64_t nb = kv_fp8->shape[0], P = kv_fp8->shape[1];
    const int tile = kv_tile(layout), ntiles = kv_ntiles(layout), dn = tile * ntiles;
    for (int64_t b = 0; b < nb; b++) {
        for (int64_t r = 0; r < P; r++) {
            const uint16_t *x = (const uint16_t *)kv->data + b * kv->strides[0] + r * kv->strides[1];
            const uint8_t *sc;
            uint8_t *tok = (uint8_t *)ts__mla_fp8_token(kv_fp8, layout, b, r, &sc);
            uint8_t *scw = (uint8_t *)sc;
            for (int j = 0; j < ntiles; j++) {
                float s = pow2_scale(tile_amax(x + j * tile, tile));
                for (int i = 0; i < tile; i++)
                    tok[j * tile + i] = ts_f32_to_e4m3(ts_bf16_to_f32(x[j * tile + i]) / s);
                if (layout == TS_MLA_KV_V32)
                    memcpy(tok + 512 + 4 * j, &s, 4);
                else
                    scw[j] = ts_f32_to_ue8m0(s);
            }
            memcpy(tok + dn + (layout == TS_MLA_KV_V32 ? 16 : 0), x + dn, 64 * 2);
            if (layout == TS_MLA_KV_MODEL1) scw[7] = 0;
        }
    }
    return TS_OK;
}

ts_status ts_mla_dequantize_kv_cache(ts_mla_kv_layout layout, const ts_tensor *kv_fp8,
                                     ts_tensor *kv) {
    static const char fn[] = "ts_mla_dequantize_kv_cache";
    TS__RETURN_IF_ERROR(check_kv_pair(fn, layout, kv, kv_fp8));
    const int64_t nb = kv_fp8->shape[0], P = kv_fp8->shape[1];
    const int tile = kv_tile(layout), ntiles = kv_ntiles(layout), dn = tile * ntiles;
    for (int64_t b = 0; b < nb; b++) {
        for (int64_t r = 0; r < P; r++) {
            uint16_t *y = (uint16_t *)kv->data + b * kv->strides[0] + r * kv->strides[1];
            const uint8_t *sc;
            const uint8_t *tok = ts__mla_fp8_token(kv_fp8, layout, b, r, &sc);
            for (int j = 0; j < ntiles; j++) {
                float s;
                if (layout == TS_MLA_KV_V32)
                    memcpy(&s, tok + 512 + 4 * j, 4);
                else
                    s = ts_ue8m0_to_f32(sc[j]); /* exact in bf16 (2^-127 is a bf16 subnormal) */
                for (int i = 0; i < tile; i++)
                    y[j * tile + i] = ts_f32_to_bf16(ts_e4m3_to_f32(tok[j * tile + i]) * s);
            }
            memcpy(y + dn, tok + dn + (layout == TS_MLA_KV_V32 ? 16 : 0), 64 * 2);
        }
    }
    return TS_OK;
}

ts_status ts_mla_abs_indices_to_kvcache(const ts_tensor *abs_indices,
                                        const ts_tensor *block_table, int64_t page_block_size,
                                        ts_tensor *out) {
    static const char fn[] = "ts_mla_abs_indices_to_kvcache";
    TS__RETURN_IF_ERROR(ts__mla_check(fn, abs_indices, "abs_indices", TS_I32, 3, NULL));
    const int64_t b = abs_indices->shape[0], sq = abs_indices->shape[1],
                  k = abs_indices->shape[2];
    int64_t bts[2] = {b, -1};
    TS__RETURN_IF_ERROR(ts__mla_check(fn, block_table, "block_table", TS_I32, 2, bts));
    int64_t os[3] = {b, sq, k};
    TS__RETURN_IF_ERROR(ts__mla_check(fn, out, "out", TS_I32, 3, os));
    if (page_block_size < 1)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: page_block_size = %lld", fn,
                        (long long)page_block_size);
    const int64_t mb = block_table->shape[1];
    /* two passes: out may alias abs_indices, and nothing is written on error */
    for (int pass = 0; pass < 2; pass++) {
        for (int64_t i = 0; i < b; i++) {
            const int32_t *bt = (const int32_t *)block_table->data + i * block_table->strides[0];
            for (int64_t s = 0; s < sq; s++) {
                const int32_t *a = (const int32_t *)abs_indices->data +
                                   i * abs_indices->strides[0] + s * abs_indices->strides[1];
                int32_t *o = (int32_t *)out->data + i * out->strides[0] + s * out->strides[1];
                for (int64_t j = 0; j < k; j++) {
                    int64_t v = a[j], r;
                    if (v == -1) {
                        r = -1;
                    } else {
                        if (v < 0 || v / page_block_size >= mb)
                            return ts__fail(TS_ERR_INVALID_ARGUMENT,
                                            "%s: abs_indices[%lld][%lld][%lld] = %lld is outside "
                                            "[-1, %lld)",
                                            fn, (long long)i, (long long)s, (long long)j,
                                            (long long)v, (long long)(mb * page_block_size));
                        int64_t blk = bt[v / page_block_size];
                        r = blk * page_block_size + v % page_block_size;
                        if (blk < 0 || r > INT32_MAX)
                            return ts__fail(TS_ERR_INVALID_ARGUMENT,
                                            "%s: block_table[%lld][%lld] = %lld gives an index "
                                            "outside int32",
                                            fn, (long long)i, (long long)(v / page_block_size),
                                            (long long)blk);
                    }
                    if (pass) o[j] = (int32_t)r;
                }
            }
        }
    }
    return TS_OK;
}
