/* The ISA path in use: the best one this build and CPU can run, or the one TS_ISA forces,
 * resolved on first use. ts_set_isa may switch it at any time between ops (tests compare
 * paths that way); an op reads it once at its start, so switching during an op running on
 * another thread affects only later ops.
 *
 * A path that cannot run here is never selected, whatever TS_ISA or ts_set_isa asks: the
 * request is refused with the reason (not compiled in, CPU lacks a feature, OS does not save
 * the register state), so a bad setting costs a warning, never a SIGILL. */
#include "core/internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

static const char *const g_names[TS_ISA_COUNT_] = {
    [TS_ISA_GENERIC] = "generic",
    [TS_ISA_AVX2] = "avx2",
    [TS_ISA_AVX512] = "avx512",
    [TS_ISA_NEON] = "neon",
};

static atomic_int g_isa = -1; /* -1 until resolved */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

const char *ts_isa_name(ts_isa isa) {
    if ((unsigned)isa >= TS_ISA_COUNT_) return "?";
    return g_names[isa];
}

bool ts__isa_compiled(ts_isa isa) {
    switch (isa) {
    case TS_ISA_GENERIC: return true;
#if defined(TS_HAVE_AVX2_KERNELS)
    case TS_ISA_AVX2: return true;
#endif
#if defined(TS_HAVE_AVX2_KERNELS) && defined(TS_HAVE_AVX512_KERNELS)
    case TS_ISA_AVX512: return true; /* it also runs the AVX2 kernels */
#endif
#if defined(TS_HAVE_NEON_KERNELS)
    case TS_ISA_NEON: return true;
#endif
    default: return false;
    }
}

/* Append ", name" (or "name") to a list of missing features. */
static void missing(char *buf, size_t cap, bool have, const char *name) {
    if (have) return;
    size_t n = strlen(buf);
    if (n + 1 < cap) snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", name);
}

/* The CPU/OS side of the reason; buf is "" when the CPU and OS can run the path. */
static void cpu_why_not(ts_isa isa, char *buf, size_t cap) {
    const ts_cpu_info *ci = ts_get_cpu_info();
    const ts__cpu_raw *raw = ts__get_cpu_raw();
    char feat[96] = "";
    (void)raw; /* x86 only */
    buf[0] = '\0';
    switch (isa) {
    case TS_ISA_GENERIC: return;
    case TS_ISA_AVX2:
    case TS_ISA_AVX512:
#if !(defined(__x86_64__) || defined(__i386__))
        snprintf(buf, cap, "not an x86 CPU");
        return;
#else
        if (raw->cpu_avx && !raw->os_ymm) {
            snprintf(buf, cap, "the OS does not save the YMM state (XCR0)");
            return;
        }
        if (isa == TS_ISA_AVX512 && raw->cpu_avx512f && !raw->os_zmm) {
            snprintf(buf, cap, "the OS does not save the ZMM state (XCR0 bits 5-7)");
            return;
        }
        missing(feat, sizeof feat, ci->has_avx2, "avx2");
        missing(feat, sizeof feat, ci->has_fma, "fma");
        missing(feat, sizeof feat, ci->has_f16c, "f16c");
        if (isa == TS_ISA_AVX512) {
            missing(feat, sizeof feat, ci->has_avx512f, "avx512f");
            missing(feat, sizeof feat, ci->has_avx512bw, "avx512bw");
            missing(feat, sizeof feat, ci->has_avx512vl, "avx512vl");
            missing(feat, sizeof feat, ci->has_avx512dq, "avx512dq");
        }
        break;
#endif
    case TS_ISA_NEON:
        missing(feat, sizeof feat, ci->has_neon, "neon");
        break;
    default: return;
    }
    if (feat[0]) snprintf(buf, cap, "CPU lacks %s", feat);
}

bool ts__isa_why_not(ts_isa isa, char *buf, size_t cap) {
    char tmp[160];
    if (!buf || cap == 0) buf = tmp, cap = sizeof tmp;
    buf[0] = '\0';
    if ((unsigned)isa >= TS_ISA_COUNT_) {
        snprintf(buf, cap, "%d is not a ts_isa value", (int)isa);
        return true;
    }
    char cpu[128];
    cpu_why_not(isa, cpu, sizeof cpu);
    if (!ts__isa_compiled(isa)) {
        /* Both reasons when both hold: rebuilding alone would not help. */
        snprintf(buf, cap, "built without %s kernels%s%s", g_names[isa], cpu[0] ? "; " : "", cpu);
        return true;
    }
    if (cpu[0]) {
        snprintf(buf, cap, "%s", cpu);
        return true;
    }
    return false;
}

bool ts__isa_runnable(ts_isa isa) { return !ts__isa_why_not(isa, NULL, 0); }

ts_isa ts__isa_from_env(const char *env, char *warn, size_t cap) {
    char tmp[256];
    if (!warn || cap == 0) warn = tmp, cap = sizeof tmp;
    warn[0] = '\0';
    ts_isa best = ts_get_cpu_info()->best_isa;
    if (!env || !*env || strcmp(env, "auto") == 0 || strcmp(env, "best") == 0) return best;
    int found = -1;
    for (int i = 0; i < TS_ISA_COUNT_; i++)
        if (strcmp(env, g_names[i]) == 0) found = i;
    if (found < 0) {
        snprintf(warn, cap,
                 "tilestack: unknown TS_ISA=\"%.32s\" (known: generic, avx2, avx512, neon, auto); "
                 "using %s",
                 env, g_names[best]);
        return best;
    }
    char why[160];
    if (ts__isa_why_not((ts_isa)found, why, sizeof why)) {
        snprintf(warn, cap, "tilestack: TS_ISA=%s cannot run here (%s); using %s", env, why,
                 g_names[best]);
        return best;
    }
    return (ts_isa)found;
}

static void resolve(void) {
    char warn[256];
    ts_isa pick = ts__isa_from_env(getenv("TS_ISA"), warn, sizeof warn);
    if (warn[0]) fprintf(stderr, "%s\n", warn);
    atomic_store(&g_isa, (int)pick);
}

ts_isa ts__active_isa(void) {
    int v = atomic_load_explicit(&g_isa, memory_order_relaxed);
    if (v >= 0) return (ts_isa)v;
    pthread_once(&g_once, resolve);
    return (ts_isa)atomic_load(&g_isa);
}

ts_isa ts_get_isa(void) { return ts__active_isa(); }

ts_status ts_set_isa(ts_isa isa) {
    if ((unsigned)isa >= TS_ISA_COUNT_)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_set_isa: isa = %d is not a ts_isa value",
                        (int)isa);
    char why[160];
    if (ts__isa_why_not(isa, why, sizeof why))
        return ts__fail(TS_ERR_UNSUPPORTED, "ts_set_isa: isa = %s cannot run here: %s (in use: %s)",
                        g_names[isa], why, g_names[ts__active_isa()]);
    /* Resolve first so a pending lazy resolution (and TS_ISA) cannot overwrite this choice. */
    pthread_once(&g_once, resolve);
    atomic_store(&g_isa, (int)isa);
    return TS_OK;
}
