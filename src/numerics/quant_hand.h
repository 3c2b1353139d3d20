/* Internal: DeepGEMM's quantisers in hand-written C (quant_fp8.c, quant_fp4.c,
 * quant_cast_back.c and their AVX2 kernels). The public functions of include/tilestack/quant.h
 * run either these or the tile kernels (quant_tile.h), per configuration (quant_public.c); the
 * bench and the tests keep them as the comparators of the tile kernels. Same arguments, checks,
 * codes and bytes as the public functions. */
#ifndef TS_QUANT_HAND_H
#define TS_QUANT_HAND_H

#include "numerics/quant_tile.h"

TS__QUANT_IMPL_DECLS(ts__qh_)

#endif
