/* Test runner: runs every registered test (or those whose name contains argv[1]) and ends
 * with the line "N passed, N failed". Exit status is non-zero if any test failed. */
#include "tilestack/core.h"

#include <stdarg.h>
#include <stdlib.h>
#include <time.h>

#define TS_MAX_TESTS 4096
#include "ts_test_registry.h"
#include "test_hf_v3_ckpt.h"

void ts_test_fail(ts_test_ctx *t, const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ts_test__vfail(t, "", file, line, fmt, ap);
    va_end(ap);
}

int ts_test_isas(int out[]) {
    static int reported[TS_ISA_COUNT_];
    const ts_isa saved = ts_get_isa();
    int n = 0;
    for (int i = 0; i < TS_ISA_COUNT_; i++) {
        if (ts_set_isa((ts_isa)i) == TS_OK) {
            out[n++] = i;
        } else if (!reported[i]) {
            reported[i] = 1;
            printf("skip isa %s: %s\n", ts_isa_name((ts_isa)i), ts_last_error());
        }
    }
    ts_set_isa(saved);
    return n;
}

/* --write-hf-v3 GOLDEN DIR: the tiny V3 / V3.2 checkpoint a golden file describes, for the
 * command-line checks (scripts/check_generate.sh, check_demo.sh). */
static int write_hf_v3(const char *file, const char *dir) {
    ts_test_ctx ctx = {"write-hf-v3", 0};
    golden g;
    uint8_t *buf = NULL;
    if (!tv3_load_golden(&ctx, file, &g, &buf)) return 1;
    const bool ok = tv3_write_ckpt(&g, dir, NULL, NULL);
    tv3_free_golden(&g, buf);
    return ok && !ctx.failures ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--write-hf-v3")) return write_hf_v3(argv[2], argv[3]);
    const char *filter = argc > 1 ? argv[1] : NULL;
    qsort(g_tests, (size_t)g_ntests, sizeof g_tests[0], cmp_entry);
    int passed = 0, failed = 0;
    for (int i = 0; i < g_ntests; i++) {
        if (filter && !strstr(g_tests[i].name, filter)) continue;
        ts_test_ctx ctx = {g_tests[i].name, 0};
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        g_tests[i].fn(&ctx);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) * 1e-6;
        if (ctx.failures) {
            failed++;
            printf("FAIL %-48s (%ld failed checks, %.0f ms)\n", g_tests[i].name, ctx.failures, ms);
        } else {
            passed++;
            printf("ok   %-48s (%.0f ms)\n", g_tests[i].name, ms);
        }
        fflush(stdout);
    }
    printf("isa=%s threads=%d\n", ts_isa_name(ts_get_isa()), ts_get_num_threads());
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
