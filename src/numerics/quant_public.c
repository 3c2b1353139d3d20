/* The public quantisers of include/tilestack/quant.h. Each configuration runs one of two
 * byte-identical implementations: the tile kernels of src/kernels/deepgemm_quant.tile
 * (quant_tile.c) wherever they were measured at least as fast as the hand-written C
 * (quant_hand.h), the hand-written C elsewhere (`tilestack bench dgquant`, figures in
 * docs/performance.md). Both validate their arguments identically (quant_args.c), so bad
 * input gets the same code and message whichever is chosen. */
#include "numerics/quant_hand.h"
#include "numerics/quant_tile.h"

/* bf16 per-token FP8 with groups of 128 (the activations' cast) is the hand-written C's
 * specialised path, still ahead of the generated code. */
static bool tile_token_fp8(const ts_tensor *x, int64_t gran_k) {
    return !(x && x->dtype == TS_BF16 && gran_k == 128);
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
    return ts__qh_per_token_cast_to_fp4(x, use_ue8m0, gran_k, use_packed_ue8m0, rounding, x_fp4, sf);
}

ts_status ts_cast_back_from_fp8(const ts_tensor *x_fp8, const ts_tensor *sf, int64_t sf_gran_mn, int64_t sf_gran_k,
                                ts_tensor *out) {
    return ts__qh_cast_back_from_fp8(x_fp8, sf, sf_gran_mn, sf_gran_k, out);
}

ts_status ts_cast_back_from_fp4(const ts_tensor *x_fp4, const ts_tensor *sf, int64_t sf_gran_mn, int64_t sf_gran_k,
                                ts_tensor *out) {
    return ts__qh_cast_back_from_fp4(x_fp4, sf, sf_gran_mn, sf_gran_k, out);
}
