/* Decode tables shared by the scalar packers and the generic decode kernel. */
#include "gemm/gemm_internal.h"

#include "tilestack/numerics.h"

#include <pthread.h>

ts__gemm_lut_t ts__gemm_lut;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void init_tables(void) {
    for (int i = 0; i < 256; i++) {
        ts__gemm_lut.e4m3[i] = ts_e4m3_to_f32((uint8_t)i);
        ts__gemm_lut.ue8m0[i] = ts_ue8m0_to_f32((uint8_t)i);
    }
    /* Code 8 (-0) decodes to +0 as upstream's dequantisation; inside the canonical sums the
     * sign of a zero product never shows (every partial sum starts at +0). */
    for (int i = 0; i < 16; i++) ts__gemm_lut.e2m1[i] = i == 8 ? 0.0f : ts_e2m1_to_f32((uint8_t)i);
}

void ts__gemm_lut_init(void) { pthread_once(&g_once, init_tables); }
