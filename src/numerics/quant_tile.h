/* Internal: DeepGEMM's quantisers through the tile kernels of src/kernels/deepgemm_quant.tile.
 * Each function validates its arguments exactly as the public function of the same name in
 * include/tilestack/quant.h (same codes, same messages, outputs untouched on error) and gives
 * the same bytes. */
#ifndef TS_QUANT_TILE_H
#define TS_QUANT_TILE_H

#include "tilestack/quant.h"

/* The public quantisers' signatures under prefix P (this file: ts__tq_; quant_hand.h: the
 * hand-written C, ts__qh_). */
#define TS__QUANT_IMPL_DECLS(P)                                                                  \
    ts_status P##per_token_cast_to_fp8(const ts_tensor *x, bool use_ue8m0, int64_t gran_k,       \
                                       bool use_packed_ue8m0, ts_tensor *x_fp8, ts_tensor *sf);  \
    ts_status P##per_block_cast_to_fp8(const ts_tensor *x, bool use_ue8m0, int64_t gran_k,       \
                                       ts_tensor *x_fp8, ts_tensor *sf);                         \
    ts_status P##per_channel_cast_to_fp8(const ts_tensor *x, bool use_ue8m0, int64_t gran_k,     \
                                         ts_tensor *x_fp8, ts_tensor *sf);                       \
    ts_status P##per_token_cast_to_fp4(const ts_tensor *x, bool use_ue8m0, int64_t gran_k,       \
                                       bool use_packed_ue8m0, ts_fp4_rounding rounding,          \
                                       ts_tensor *x_fp4, ts_tensor *sf);                         \
    ts_status P##cast_back_from_fp8(const ts_tensor *x_fp8, const ts_tensor *sf, int64_t sf_gran_mn, \
                                    int64_t sf_gran_k, ts_tensor *out);                          \
    ts_status P##cast_back_from_fp4(const ts_tensor *x_fp4, const ts_tensor *sf, int64_t sf_gran_mn, \
                                    int64_t sf_gran_k, ts_tensor *out);

TS__QUANT_IMPL_DECLS(ts__tq_)

#endif
