/* tests/golden/<name> read whole (TS_READ_GOLDEN), for the unit tests and the multi-rank EP
 * tests alike. */
#include "ts_test.h"

#include <stdio.h>
#include <stdlib.h>

void *ts_test_read_golden(ts_test_ctx *t, const char *name, size_t *size) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", TS_GOLDEN_DIR, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        ts_test_fail(t, __FILE__, __LINE__, "golden file missing: %s", path);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc(n > 0 ? (size_t)n : 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        ts_test_fail(t, __FILE__, __LINE__, "cannot read golden file %s", path);
        free(buf);
        fclose(f);
        return NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return buf;
}
