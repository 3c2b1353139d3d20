/* The test table and failure report shared by the two runners (tests/test_main.c and
 * tests/ep/ep_test_main.c). Include it in the runner only, after defining TS_MAX_TESTS. */
#ifndef TS_TEST_REGISTRY_H
#define TS_TEST_REGISTRY_H

#include "ts_test.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct { const char *name, *file; ts_test_fn fn; } ts_test_entry;
static ts_test_entry g_tests[TS_MAX_TESTS];
static int g_ntests;

void ts_test_register(const char *name, const char *file, ts_test_fn fn) {
    if (g_ntests < TS_MAX_TESTS) {
        g_tests[g_ntests].name = name;
        g_tests[g_ntests].file = file;
        g_tests[g_ntests].fn = fn;
        g_ntests++;
    }
}

/* Counts a failed check and prints the first 8 of a test, each line led by prefix. Flushed:
 * a test that crashes next still shows what failed. */
static void ts_test__vfail(ts_test_ctx *t, const char *prefix, const char *file, int line,
                           const char *fmt, va_list ap) {
    t->failures++;
    if (t->failures > 8) return;
    fprintf(stdout, "    %s%s:%d: ", prefix, file, line);
    vfprintf(stdout, fmt, ap);
    fputc('\n', stdout);
    fflush(stdout);
}

/* Run order: by file, then by name. */
static int cmp_entry(const void *a, const void *b) {
    const ts_test_entry *x = a, *y = b;
    int c = strcmp(x->file, y->file);
    return c ? c : strcmp(x->name, y->name);
}

#endif
