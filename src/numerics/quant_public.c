/* The public quantisers of include/tilestack/quant.h. Each configuration runs one of two
 * byte-identical implementations: the tile kernels of src/kernels/deepgemm_quant.tile
 * (quant_tile.c) wherever they were measured at least as fast as the hand-written C
 * (quant_hand.h), the hand-written C elsewhere (`tilestack bench dgquant`, figures in
 * docs/performance.md). Both validate their arguments identically (quant_args.c), so bad
 * input gets the same code and message whichever is chosen. */
#include "numerics/quant_hand.h"
#include "numerics/quant_tile.h"

/* Where the hand-written C stays (bench dgquant, 2026-11-30, 1 and 2 threads, tile / hand):
 *  - bf16 per-token FP8 with groups of 128, the activations' cast (0.82-0.90x on N(0, 1) data:
 *    the hand-written code's specialised path);
 *  - per-token FP4 with DeepGEMM's rounding (0.83-0.99x), and any FP4 cast whose group size has
 *    no instance (32 / 64 / 128) or whose source is not bf16 (the general kernel: 0.14x);
 *  - cast back from FP8 (0.88x at 1 thread), and from FP4 with groups other than 32.
 * Everywhere else the tile kernels measured 0.96-2.5x. */
static bool tile_token_fp8(const ts_tensor *x, int64_t gran_k) {
    return !(x && x->dtype == TS_BF16 && gran_k == 128);
}
static bool tile_token_fp4(const ts_tensor *x, int64_t gran_k, ts_fp4_rounding rounding) {
    return x && x->dtype == TS_BF16 && (gran_k == 32 || gran_k == 64 || gran_k == 128) && rounding == TS_FP4_ROUND_RNE;
}

ts_status ts_per_token_cast_to_fp8(const ts_tensor *x, bool use_ue8m0, int64_t gran_k, bool use_packed_ue8m0,
                                   ts_tensor *x_fp8, ts_tensor *sf) {
    return tile_token_fp8(x, gran_k)
               ? ts__tq_per_token_cast_to_fp8(x, use_ue8m0, gran_k, use_packed_ue8m0, x_fp8, sf)
               : ts__qh_per_token_cast_to_fp8(x, use_ue8m0, gran_k, use_packed_ue8m0, x_fp8, sf);
}

ts_status ts_per_block_cast_to_fp8(const ts_tensor *x, bool use_ue8m0, int64_t gran_k, ts_tensor *x_fp8,
                                   ts_tensor *sf) {
    return ts__tq_per_block_cast_to_fp8(x, use_ue8m0, gran_k, x_fp8, sf);
}

ts_status ts_per_channel_cast_to_fp8(const ts_tensor *x, bool use_ue8m0, int64_t gran_k, ts_tensor *x_fp8,
                                     ts_tensor *sf) {
    return ts__tq_per_channel_cast_to_fp8(x, use_ue8m0, gran_k, x_fp8, sf);
}

ts_status ts_per_token_cast_to_fp4(const ts_tensor *x, bool use_ue8m0, int64_t gran_k, bool use_packed_ue8m0,
                                   ts_fp4_rounding rounding, ts_tensor *x_fp4, ts_tensor *sf) {
    return tile_token_fp4(x, gran_k, rounding)
               ? ts__tq_per_token_cast_to_fp4(x, use_ue8m0, gran_k, use_packed_ue8m0, rounding, x_fp4, sf)
               : ts__qh_per_token_cast_to_fp4(x, use_ue8m0, gran_k, use_packed_ue8m0, rounding, x_fp4, sf);
}

ts_status ts_cast_back_from_fp8(const ts_tensor *x_fp8, const ts_tensor *sf, int64_t sf_gran_mn, int64_t sf_gran_k,
                                ts_tensor *out) {
    return ts__qh_cast_back_from_fp8(x_fp8, sf, sf_gran_mn, sf_gran_k, out);
}

ts_status ts_cast_back_from_fp4(const ts_tensor *x_fp4, const ts_tensor *sf, int64_t sf_gran_mn, int64_t sf_gran_k,
                                ts_tensor *out) {
    return sf_gran_k == 32 ? ts__tq_cast_back_from_fp4(x_fp4, sf, sf_gran_mn, sf_gran_k, out)
                           : ts__qh_cast_back_from_fp4(x_fp4, sf, sf_gran_mn, sf_gran_k, out);
}
