/* Minimal test framework: TS_TEST(name) { ... } registers a test; checks count failures and
 * keep going. The runner (tests/test_main.c) prints "N passed, N failed" last. */
#ifndef TS_TEST_H
#define TS_TEST_H

#include <inttypes.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

typedef struct ts_test_ctx {
    const char *name;
    long failures;
} ts_test_ctx;

typedef void (*ts_test_fn)(ts_test_ctx *);
void ts_test_register(const char *name, const char *file, ts_test_fn fn);

#define TS_TEST(name)                                                          \
    static void name(ts_test_ctx *ts_t_);                                      \
    __attribute__((constructor)) static void ts_test_reg_##name(void) {        \
        ts_test_register(#name, __FILE__, name);                               \
    }                                                                          \
    static void name(ts_test_ctx *ts_t_)

/* Report at most a few failure lines per test so a broken kernel does not flood the log. */
void ts_test_fail(ts_test_ctx *t, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define TS_CHECK(cond)                                                          \
    do {                                                                        \
        if (!(cond)) ts_test_fail(ts_t_, __FILE__, __LINE__, "check failed: %s", #cond); \
    } while (0)
#define TS_CHECK_MSG(cond, ...)                                                 \
    do {                                                                        \
        if (!(cond)) ts_test_fail(ts_t_, __FILE__, __LINE__, __VA_ARGS__);      \
    } while (0)
#define TS_CHECK_EQ_INT(a, b)                                                   \
    do {                                                                        \
        long long ts_a_ = (long long)(a), ts_b_ = (long long)(b);               \
        if (ts_a_ != ts_b_)                                                     \
            ts_test_fail(ts_t_, __FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, ts_a_, ts_b_); \
    } while (0)
/* Check a ts_status call returns the expected code. */
#define TS_CHECK_STATUS(expr, expect)                                           \
    do {                                                                        \
        int ts_s_ = (int)(expr);                                                \
        if (ts_s_ != (int)(expect))                                             \
            ts_test_fail(ts_t_, __FILE__, __LINE__, "%s returned %d, expected %d (%s) [%s]", #expr, \
                         ts_s_, (int)(expect), #expect, ts_last_error());       \
    } while (0)
#define TS_FAILED() (ts_t_->failures != 0)

/* Golden files live in TS_GOLDEN_DIR (tests/golden). Returns a malloc'd buffer (caller frees)
 * with the whole file, or NULL (and records a test failure) if missing. */
void *ts_test_read_golden(ts_test_ctx *t, const char *name, size_t *size);
#define TS_READ_GOLDEN(name, sizep) ts_test_read_golden(ts_t_, (name), (sizep))

/* The ISA paths this build and CPU can run, generic first (out has TS_ISA_COUNT_ slots);
 * returns their count. Each path it cannot run is printed once per test binary, by name
 * ("skip isa avx512: ..."), so a log shows what a machine did not cover. */
int ts_test_isas(int out[]);

#endif
