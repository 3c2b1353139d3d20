/* The ISA path in use: the best one this build and CPU can run, or the one TS_ISA forces,
 * resolved on first use. ts_set_isa may switch it at any time between ops (tests compare
 * paths that way); an op reads it once at its start, so switching during an op running on
 * another thread affects only later ops. */
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

/* A path is runnable when this build has its kernels and this CPU (and OS) supports them. */
static int isa_runnable(ts_isa isa) {
    const ts_cpu_info *ci = ts_get_cpu_info();
    (void)ci; /* unused when this build has no SIMD kernels */
    switch (isa) {
    case TS_ISA_GENERIC: return 1;
    case TS_ISA_AVX2:
#if defined(TS_HAVE_AVX2_KERNELS)
        return ci->has_avx2 && ci->has_fma && ci->has_f16c;
#else
        return 0;
#endif
    case TS_ISA_AVX512:
#if defined(TS_HAVE_AVX512_KERNELS)
        return ci->has_avx512f && ci->has_avx512bw && ci->has_avx512vl;
#else
        return 0;
#endif
    case TS_ISA_NEON:
#if defined(TS_HAVE_NEON_KERNELS)
        return ci->has_neon;
#else
        return 0;
#endif
    default: return 0;
    }
}

static void resolve(void) {
    ts_isa best = ts_get_cpu_info()->best_isa;
    ts_isa pick = best;
    const char *env = getenv("TS_ISA");
    if (env && *env && strcmp(env, "auto") != 0 && strcmp(env, "best") != 0) {
        int found = -1;
        for (int i = 0; i < TS_ISA_COUNT_; i++)
            if (strcmp(env, g_names[i]) == 0) found = i;
        if (found < 0)
            fprintf(stderr,
                    "tilestack: unknown TS_ISA=\"%s\" (known: generic, avx2, avx512, neon, auto); "
                    "using %s\n",
                    env, g_names[best]);
        else if (!isa_runnable((ts_isa)found))
            fprintf(stderr, "tilestack: TS_ISA=%s cannot run on this CPU/build; using %s\n", env,
                    g_names[best]);
        else
            pick = (ts_isa)found;
    }
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
    if (!isa_runnable(isa))
        return ts__fail(TS_ERR_UNSUPPORTED,
                        "ts_set_isa: isa = %s cannot run here (this build or CPU lacks it)",
                        g_names[isa]);
    /* Resolve first so a pending lazy resolution (and TS_ISA) cannot overwrite this choice. */
    pthread_once(&g_once, resolve);
    atomic_store(&g_isa, (int)isa);
    return TS_OK;
}
