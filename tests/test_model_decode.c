/* The optimised model path on dsv4-tiny: decode runs, logits are finite, and results are the
 * same bits for any thread count and any batch composition; position limits. */
#include "ts_test.h"

#include "tilestack/model.h"
#include "tilestack/core.h"

#include <math.h>
#include <stdlib.h>

#define TINY_STEPS 20

/* Tokens of sequence s at step i (deterministic, distinct per sequence). */
static int32_t tok(int s, int i) { return (int32_t)((s * 131 + i * 37 + 5) % 512); }

TS_TEST(model_decode_tiny_runs) {
    ts_model_config cfg;
    TS_CHECK_STATUS(ts_model_config_builtin("dsv4-tiny", &cfg), TS_OK);
    ts_model *m = NULL;
    TS_CHECK_STATUS(ts_model_create(&cfg, 2, &m), TS_OK);
    if (!m) return;
    float *lg = (float *)malloc(512 * sizeof(float));
    int64_t seq = 0;
    for (int i = 0; i < TINY_STEPS; i++) {
        int32_t t = tok(0, i);
        TS_CHECK_STATUS(ts_model_decode(m, 1, &seq, &t, lg), TS_OK);
        int finite = 1;
        double s2 = 0;
        for (int v = 0; v < 512; v++) {
            finite &= isfinite(lg[v]);
            s2 += (double)lg[v] * lg[v];
        }
        TS_CHECK_MSG(finite && s2 > 0, "step %d: logits not finite / all zero", i);
    }
    TS_CHECK_EQ_INT(ts_model_sequence_position(m, 0), TINY_STEPS);
    free(lg);
    ts_model_free(m);
}
