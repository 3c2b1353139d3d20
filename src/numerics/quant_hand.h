/* Internal: DeepGEMM's quantisers in hand-written C (quant_fp8.c, quant_fp4.c,
 * quant_cast_back.c and their AVX2 kernels). The public functions of include/tilestack/quant.h
 * run either these or the tile kernels (quant_tile.h), per configuration (quant_public.c); the
 * bench and the tests keep them as the comparators of the tile kernels. Same arguments, checks,
 * codes and bytes as the public functions. */
#ifndef TS_QUANT_HAND_H
#define TS_QUANT_HAND_H

#include "tilestack/quant.h"

ts_status ts__qh_per_token_cast_to_fp8(const ts_tensor *x, bool use_ue8m0, int64_t gran_k,
                                       bool use_packed_ue8m0, ts_tensor *x_fp8, ts_tensor *sf);
ts_status ts__qh_per_block_cast_to_fp8(const ts_tensor *x, bool use_ue8m0, int64_t gran_k,
                                       ts_tensor *x_fp8, ts_tensor *sf);
ts_status ts__qh_per_channel_cast_to_fp8(const ts_tensor *x, bool use_ue8m0, int64_t gran_k,
                                         ts_tensor *x_fp8, ts_tensor *sf);
ts_status ts__qh_per_token_cast_to_fp4(const ts_tensor *x, bool use_ue8m0, int64_t gran_k,
                                       bool use_packed_ue8m0, ts_fp4_rounding rounding,
                                       ts_tensor *x_fp4, ts_tensor *sf);
ts_status ts__qh_cast_back_from_fp8(const ts_tensor *x_fp8, const ts_tensor *sf, int64_t sf_gran_mn,
                                    int64_t sf_gran_k, ts_tensor *out);
ts_status ts__qh_cast_back_from_fp4(const ts_tensor *x_fp4, const ts_tensor *sf, int64_t sf_gran_mn,
                                    int64_t sf_gran_k, ts_tensor *out);

#endif
