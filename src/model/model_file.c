/* placeholder, replaced below */
#include "model_internal.h"
ts_status ts_model_load(const char *path, int64_t max_batch, ts_model **out) {
    (void)path; (void)max_batch; (void)out;
    return ts__fail(TS_ERR_UNSUPPORTED, "ts_model_load: not yet");
}
ts_status ts_model_save_weights(const ts_model *m, const char *path) {
    (void)m; (void)path;
    return ts__fail(TS_ERR_UNSUPPORTED, "ts_model_save_weights: not yet");
}
