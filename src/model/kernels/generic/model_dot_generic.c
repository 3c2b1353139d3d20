/* f32 dot products (model_kernels.h), portable C: the AVX2 kernel's lanes and fma order. */
#include "../../model_kernels.h"

#include <math.h>

void ts__model_dot_rows__generic(const float *w, int64_t k, const float *x, int64_t m,
                                 int64_t ldx, float *y, int64_t ldy) {
    for (int64_t r = 0; r < m; r++) {
        const float *xr = x + r * ldx;
        float acc[16] = {0};
        int64_t i = 0;
        for (; i + 16 <= k; i += 16)
            for (int l = 0; l < 16; l++) acc[l] = fmaf(xr[i + l], w[i + l], acc[l]);
        for (int l = 0; i < k; i++, l++) acc[l] = fmaf(xr[i], w[i], acc[l]);
        y[r * ldy] = ts__model_dot_reduce16(acc);
    }
}
