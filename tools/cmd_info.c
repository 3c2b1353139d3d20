/* `tilestack info`: what this binary will run on and with. */
#include "cli.h"
#include "bench.h"
#include "core/internal.h"
#include "gemm/gemm_internal.h"
#include "gemm/gemm_kernels.h"

#include <stdio.h>
#include <string.h>

static void print_size(const char *label, int64_t bytes, const char *suffix) {
    if (bytes <= 0) printf("%s unknown", label);
    else if (bytes >= (1 << 20) && bytes % (1 << 20) == 0)
        printf("%s %lld MiB%s", label, (long long)(bytes >> 20), suffix);
    else printf("%s %lld KiB%s", label, (long long)(bytes >> 10), suffix);
}

int ts__cmd_info(int argc, char **argv) {
    bool probe = false;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--probe")) probe = true;
        else {
            fprintf(stderr, "tilestack info: unknown option '%s' (only --probe)\n", argv[i]);
            return 2;
        }
    }
    const ts_cpu_info *ci = ts_get_cpu_info();
    printf("tilestack   %s (headers %s)\n", ts_version_string(), TS_VERSION_STRING);
#if defined(__VERSION__)
    printf("built with  gcc/clang %s\n", __VERSION__);
#endif
    if (!ci) {
        printf("cpu         unknown (detection failed)\n");
        return 1;
    }
    printf("cpu         %s (%s)\n", ci->brand[0] ? ci->brand : "?", ci->vendor[0] ? ci->vendor : "?");
    printf("features   ");
    const struct { bool on; const char *name; } f[] = {
        {ci->has_sse42, "sse4.2"},     {ci->has_avx, "avx"},           {ci->has_avx2, "avx2"},
        {ci->has_fma, "fma"},          {ci->has_f16c, "f16c"},         {ci->has_bmi2, "bmi2"},
        {ci->has_avx512f, "avx512f"},  {ci->has_avx512bw, "avx512bw"}, {ci->has_avx512vl, "avx512vl"},
        {ci->has_avx512dq, "avx512dq"},
        {ci->has_avx512bf16, "avx512bf16"}, {ci->has_avx512vnni, "avx512vnni"},
        {ci->has_neon, "neon"},        {ci->has_asimddp, "asimddp"},   {ci->has_sve, "sve"},
    };
    int any = 0;
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].on) printf(" %s", f[i].name), any = 1;
    printf("%s\n", any ? "" : " (none detected)");
    /* The library's view (it decides what runs), not this binary's own macros. */
    printf("compiled   ");
    for (int i = 0; i < TS_ISA_COUNT_; i++)
        if (ts__isa_compiled((ts_isa)i)) printf(" %s", ts_isa_name((ts_isa)i));
    printf("%s\n", ts__isa_compiled(TS_ISA_AVX512) ? " (avx512 runs the avx2 kernels where it has none)" : "");
    printf("paths      ");
    for (int i = 0; i < TS_ISA_COUNT_; i++)
        if (ts__isa_runnable((ts_isa)i)) printf(" %s", ts_isa_name((ts_isa)i));
    printf("   (runnable here)\n");
    for (int i = 0; i < TS_ISA_COUNT_; i++) {
        char why[160];
        if (ts__isa_why_not((ts_isa)i, why, sizeof why))
            printf("            %s: not runnable, %s\n", ts_isa_name((ts_isa)i), why);
    }
    printf("isa         %s in use, best here %s (TS_ISA=generic|avx2|avx512 or bench --isa "
           "forces a path)\n",
           ts_isa_name(ts_get_isa()), ts_isa_name(ci->best_isa));
    /* a sub-path of avx512 that isa does not show; same bits either way (docs/gemm.md) */
    if (ts__gemm_select_dp_kernels())
        printf("fp8 gemm    vdpbf16ps kernels (avx512bf16) for FP8 / FP4 GEMMs of more than %d "
               "rows (TS_GEMM_DPBF16=0: the f32 FMA kernels)\n",
               TS__GEMM_SMALL_M);
    else if (ts_get_isa() == TS_ISA_AVX512 && ci->has_avx512bf16)
        printf("fp8 gemm    f32 FMA kernels (the vdpbf16ps ones are slower on the Intel CPUs "
               "measured; TS_GEMM_DPBF16=1 selects them)\n");
    printf("threads     %d in the pool, %d logical CPUs (TS_NUM_THREADS=N sets the pool)\n",
           ts_get_num_threads(), ci->logical_cpus);
    printf("caches     ");
    print_size(" L1d", ci->l1d_bytes, " per core,");
    print_size(" L2", ci->l2_bytes, " per core,");
    print_size(" L3", ci->l3_bytes, " total\n");
    if (probe) {
        int threads[2];
        ts__bench_opts o = {0};
        int nt = ts__bench_thread_list(&o, threads);
        for (int t = 0; t < nt; t++)
            ts__bench_print_machine(stdout, ts__probe_machine(threads[t], false));
    }
    return 0;
}
