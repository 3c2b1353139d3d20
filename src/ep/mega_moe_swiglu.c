/* The elementwise steps of Mega MoE, shared by the fused and the unfused path so both round
 * at the same points: SwiGLU x routing weight + FP8 requantisation (upstream's Linear1
 * epilogue; the one implementation is ts__swiglu_weight_cast in src/numerics/, which the
 * model's single-process MoE calls too), and the top-k sum of the combine. Issue 7 is to
 * provide the first as a tile kernel. */
#include "ep/mega_moe_internal.h"
#include "numerics/bf16_inline.h"
#include "numerics/swiglu_cast.h"
#include "tilestack/numerics.h"

void ts__mega_moe_swiglu_cast(const uint16_t *h, int64_t ldh, int64_t m, int64_t I, const float *w, float clamp,
                              bool bf16_out, void *q, int64_t ldq, int32_t *sf, int64_t ldsf) {
    ts__swiglu_weight_cast(h, h + I, ldh, m, I, w, clamp, bf16_out, q, ldq, (uint8_t *)sf, ldsf * 4, NULL, 0);
}

void ts__mega_moe_sum_rows(const uint16_t *const *rows, int n, int64_t H, uint16_t *y) {
    enum { CH = 512 };
    float acc[CH];
    for (int64_t j0 = 0; j0 < H; j0 += CH) {
        const int64_t c = H - j0 < CH ? H - j0 : CH;
        for (int64_t j = 0; j < c; j++) acc[j] = 0.0f;
        for (int r = 0; r < n; r++) {
            const uint16_t *src = rows[r] + j0;
            for (int64_t j = 0; j < c; j++) acc[j] += ts__bf16_to_f32_inl(src[j]);
        }
        for (int64_t j = 0; j < c; j++) y[j0 + j] = ts_f32_to_bf16(acc[j]);
    }
}
