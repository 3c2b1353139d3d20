/* Combine row kernels (generic C, AVX2 and AVX-512, bit-identical; picked by ts__active_isa). They need
 * no MPI, so src/ep/kernels/ is built in every configuration. */
#ifndef TILESTACK_EP_KERNELS_H
#define TILESTACK_EP_KERNELS_H

#include <stdint.h>

/* first != 0: acc[j] = 0.0f + bf16(p[j]) (the contract's sum starts at +0); else acc[j] += bf16(p[j]). */
typedef void (*ts__ep_acc_bf16_fn)(float *acc, const uint16_t *p, int64_t n, int first);
/* o[j] = RNE bf16 of acc[j], NaN -> sign | 0x7FC0 (as ts_f32_to_bf16). */
typedef void (*ts__ep_store_bf16_fn)(uint16_t *o, const float *acc, int64_t n);

void ts__ep_acc_bf16__generic(float *acc, const uint16_t *p, int64_t n, int first);
void ts__ep_store_bf16__generic(uint16_t *o, const float *acc, int64_t n);
#ifdef TS_HAVE_AVX2_KERNELS
void ts__ep_acc_bf16__avx2(float *acc, const uint16_t *p, int64_t n, int first);
void ts__ep_store_bf16__avx2(uint16_t *o, const float *acc, int64_t n);
#endif
#ifdef TS_HAVE_AVX512_KERNELS
void ts__ep_acc_bf16__avx512(float *acc, const uint16_t *p, int64_t n, int first);
void ts__ep_store_bf16__avx512(uint16_t *o, const float *acc, int64_t n);
#endif

#endif
