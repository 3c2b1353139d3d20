/* f32 dot products with double accumulation (model_kernels.h), portable C. */
#include "../../model_kernels.h"

void ts__model_dot_rows__generic(const float *w, int64_t k, const float *x, int64_t m,
                                 int64_t ldx, float *y, int64_t ldy) {
    for (int64_t r = 0; r < m; r++) {
        const float *xr = x + r * ldx;
        double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t i = 0;
        for (; i + 8 <= k; i += 8)
            for (int l = 0; l < 8; l++) acc[l] += (double)xr[i + l] * (double)w[i + l];
        for (int l = 0; i < k; i++, l++) acc[l] += (double)xr[i] * (double)w[i];
        y[r * ldy] = (float)(((acc[0] + acc[1]) + (acc[2] + acc[3])) +
                             ((acc[4] + acc[5]) + (acc[6] + acc[7])));
    }
}
