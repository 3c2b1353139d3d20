/* `tilestack demo`: until the decode engine exists, a short tour of what runs today: this
 * machine's measured limits, then each available kernel once on a DeepSeek-sized shape with
 * its fraction of the roofline. */
#include "cli.h"
#include "bench.h"

#include <stdio.h>
#include <string.h>

int ts__cmd_demo(int argc, char **argv) {
    bool quick = false;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = true;
        else {
            fprintf(stderr, "tilestack demo: unknown option '%s' (only --quick)\n", argv[i]);
            return 2;
        }
    }
    const double t0 = ts__now_s();
    const ts_cpu_info *ci = ts_get_cpu_info();
    const int threads = ts_get_num_threads();
    /* DeepSeek V3/V4 hidden size 7168; a 4096-token prefill chunk (2048 with --quick, still larger than L3). */
    const int64_t m = quick ? 2048 : 4096, n = 7168;

    printf("tilestack %s demo: a tour of the kernels that exist today (the end-to-end decode\n"
           "engine comes later). Everything runs on this CPU; nothing is precomputed.\n\n",
           ts_version_string());
    printf("cpu: %s, %d logical CPUs, kernel path %s\n\n", ci && ci->brand[0] ? ci->brand : "?",
           ci ? ci->logical_cpus : 0, ts_isa_name(ts_get_isa()));

    printf("1. This machine's limits, measured now (the rooflines below):\n");
    ts__bench_print_machine(stdout, ts__probe_machine(1, quick));
    if (threads > 1) ts__bench_print_machine(stdout, ts__probe_machine(threads, quick));

    printf("\n2. Kernels on a bf16 [%lld, %lld] activation (DeepSeek hidden size) at %d "
           "thread%s;\n   decodes at 1 thread on L2-resident buffers (in + out = L2/2). frac = roofline time / "
           "measured time\n   (memcpy bandwidth for the streaming casts, L2 read bandwidth for "
           "decodes);\n   ratio = baseline time / kernel time (baseline: memcpy of the same "
           "bytes, or the generic C path).\n\n",
           (long long)m, (long long)n, threads, threads == 1 ? "" : "s");
    ts__bench_opts opts = {0};
    opts.quick = true;
    opts.isa_name = ts_isa_name(ts_get_isa());
    int rc = ts__numerics_tour(&opts, m, n, threads);
    (void)ts_set_num_threads(threads);

    printf("\n3. Dense FP8 GEMM D[256, 2048] = A[256, 2048] * B[2048, 2048]^T (e4m3, f32 scales\n"
           "   (1,128,128), bf16 D) at %d thread%s; frac = share of the FMA peak, ratio = OpenBLAS\n"
           "   sgemm time on f32 copies of the operands / our time.\n\n",
           threads, threads == 1 ? "" : "s");
    int rc_gemm = ts__gemm_tour(&opts, threads);
    if (rc_gemm > rc) rc = rc_gemm;
    (void)ts_set_num_threads(threads);

    printf("\nMore: `tilestack bench numerics` / `gemm` (full suites, 1 and %d threads), `tilestack info`.\n"
           "demo took %.1f s.\n", ci ? ci->logical_cpus : threads, ts__now_s() - t0);
    return rc;
}
