/* Status codes and the thread-local last-error message. */
#include "core/internal.h"

#include <stdarg.h>

static _Thread_local char g_last_error[512];

static const char *const k_status_names[TS_STATUS_COUNT_] = {
    [TS_OK] = "TS_OK: success",
    [TS_ERR_NULL_POINTER] = "TS_ERR_NULL_POINTER: a required pointer is NULL",
    [TS_ERR_INVALID_ARGUMENT] = "TS_ERR_INVALID_ARGUMENT: argument out of its domain",
    [TS_ERR_DTYPE] = "TS_ERR_DTYPE: unsupported dtype",
    [TS_ERR_SHAPE] = "TS_ERR_SHAPE: wrong shape",
    [TS_ERR_STRIDE] = "TS_ERR_STRIDE: unsupported strides or layout",
    [TS_ERR_ALIGNMENT] = "TS_ERR_ALIGNMENT: misaligned pointer or stride",
    [TS_ERR_OVERFLOW] = "TS_ERR_OVERFLOW: size overflows 64 bits",
    [TS_ERR_UNSUPPORTED] = "TS_ERR_UNSUPPORTED: not supported by this build or CPU",
    [TS_ERR_OUT_OF_MEMORY] = "TS_ERR_OUT_OF_MEMORY: allocation failed",
    [TS_ERR_NONFINITE] = "TS_ERR_NONFINITE: NaN or inf where forbidden",
    [TS_ERR_IO] = "TS_ERR_IO: file input/output failed",
    [TS_ERR_INTERNAL] = "TS_ERR_INTERNAL: internal error",
    [TS_ERR_PEER] = "TS_ERR_PEER: a peer rank failed",
    [TS_ERR_TIMEOUT] = "TS_ERR_TIMEOUT: timed out",
    [TS_ERR_ALIASING] = "TS_ERR_ALIASING: outputs overlap inputs",
};

const char *ts_status_str(ts_status s) {
    if ((int)s < 0 || s >= TS_STATUS_COUNT_) return "TS_ERR_?: unknown status code";
    return k_status_names[s];
}

const char *ts_last_error(void) { return g_last_error; }

void ts_clear_error(void) { g_last_error[0] = '\0'; }

ts_status ts__fail(ts_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_last_error, sizeof g_last_error, fmt, ap);
    va_end(ap);
    return code;
}
