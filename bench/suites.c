/* `tilestack bench`: the suite registry and the command line. A new suite is one line in
 * g_suites plus its ts__suite_* function. */
#include "bench.h"
#include "cli.h"
#include "core/atomic_file.h"
#include "core/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* bench/suite_mega_moe.c (declared here to keep bench.h untouched) */
int ts__suite_mega_moe(const ts__bench_opts *opts);

int ts__suite_kernels(const ts__bench_opts *opts); /* bench/suite_kernels.c */
int ts__suite_dg_quant(const ts__bench_opts *opts); /* bench/suite_dg_quant.c */
int ts__suite_model(const ts__bench_opts *opts);    /* bench/suite_model.c */

typedef struct suite_entry {
    const char *name;
    const char *what;
    ts__suite_fn fn;
} suite_entry;

static const suite_entry g_suites[] = {
    {"numerics", "format conversions (L2-resident decode, DRAM encode) and FP8/FP4 quantisers",
     ts__suite_numerics},
    {"gemm", "dense FP8/FP8xFP4/BF16 GEMM: compute-bound vs FMA peak, decode vs DRAM, vs OpenBLAS",
     ts__suite_gemm},
    {"topk", "DeepSelect top-k: indexer (bf16) and sampler (f32) rows vs L3/DRAM read BW, vs torch-like",
     ts__suite_topk},
    {"attention", "FlashMLA decode/prefill and MQA logits (lightning indexer) vs FMA peak / DRAM BW",
     ts__suite_attention},
    {"ep", "DeepEP dispatch (FP8) / combine (BF16) over shm vs MPI_Alltoallv, vs memcpy BW (mpirun)", ts__suite_ep},
    {"kernels", "tile-language kernels: JIT compile/load time, AOT per_token_cast vs hand-written",
     ts__suite_kernels},
    {"dgquant", "DeepGEMM quantisers: tile kernels vs the hand-written C, vs memcpy BW", ts__suite_dg_quant},
    {"model", "dsv4-mini prompt prefill (512 tokens) vs decode steps at B = 1: tok/s and their ratio",
     ts__suite_model},
    {"mega_moe", "fused Mega MoE (FP8xFP4) vs the unfused EP pipeline at decode sizes (mpirun)", ts__suite_mega_moe},
};
#define N_SUITES (sizeof g_suites / sizeof g_suites[0])

static void list_suites(FILE *f) {
    fprintf(f, "suites:\n");
    for (size_t i = 0; i < N_SUITES; i++)
        fprintf(f, "  %-10s %s\n", g_suites[i].name, g_suites[i].what);
    fprintf(f, "  %-10s every suite above\n", "all");
    fprintf(f, "  %-10s `tilestack serve` under load: saturation against the demo, TPS@TPOT, prefill\n"
               "  %-10s interference, Poisson arrivals (its own options: bench serve --help)\n", "serve", "");
}

static void bench_usage(FILE *f) {
    fprintf(f,
            "usage: tilestack bench <suite|all> [--quick] [--threads N] [--isa NAME] [--json FILE]\n"
            "       tilestack bench --list\n"
            "  --quick      shorter probes and fewer samples (>= 5 either way)\n"
            "  --threads N  run every row at N threads (default: 1 and all cores)\n"
            "  --isa NAME   run the kernels on one path: generic, avx2, avx512, neon\n"
            "               (default: TS_ISA, else the best here; `tilestack info` lists them)\n"
            "  --json FILE  write one JSON object per result row to FILE\n");
}

static bool parse_threads(const char *s, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 1 || v > 256) return false;
    *out = (int)v;
    return true;
}

int ts__cmd_bench(int argc, char **argv) {
    /* the server's load generator has options of its own (tools/serve_bench.c) */
    if (argc > 0 && !strcmp(argv[0], "serve")) return ts__bench_serve(argc - 1, argv + 1);
    ts__bench_opts opts;
    memset(&opts, 0, sizeof opts);
    const char *suite = NULL, *json_path = NULL, *isa_arg = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--quick")) {
            opts.quick = true;
        } else if (!strcmp(a, "--list")) {
            list_suites(stdout);
            return 0;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            bench_usage(stdout);
            list_suites(stdout);
            return 0;
        } else if (!strcmp(a, "--threads") || !strncmp(a, "--threads=", 10)) {
            const char *v = a[9] == '=' ? a + 10 : (i + 1 < argc ? argv[++i] : NULL);
            if (!v || !parse_threads(v, &opts.threads)) {
                fprintf(stderr, "tilestack bench: --threads needs an integer in [1, 256]\n");
                return 2;
            }
        } else if (!strcmp(a, "--isa") || !strncmp(a, "--isa=", 6)) {
            isa_arg = a[5] == '=' ? a + 6 : (i + 1 < argc ? argv[++i] : NULL);
            if (!isa_arg || !*isa_arg) {
                fprintf(stderr, "tilestack bench: --isa needs a path name (generic, avx2, avx512, neon)\n");
                return 2;
            }
        } else if (!strcmp(a, "--json") || !strncmp(a, "--json=", 7)) {
            json_path = a[6] == '=' ? a + 7 : (i + 1 < argc ? argv[++i] : NULL);
            if (!json_path || !*json_path) {
                fprintf(stderr, "tilestack bench: --json needs a file name\n");
                return 2;
            }
        } else if (a[0] == '-') {
            fprintf(stderr, "tilestack bench: unknown option '%s'\n", a);
            bench_usage(stderr);
            return 2;
        } else if (!suite) {
            suite = a;
        } else {
            fprintf(stderr, "tilestack bench: one suite at a time (got '%s' and '%s')\n", suite, a);
            return 2;
        }
    }
    if (!suite) {
        fprintf(stderr, "tilestack bench: which suite?\n");
        bench_usage(stderr);
        list_suites(stderr);
        return 2;
    }
    const bool all = !strcmp(suite, "all");
    const suite_entry *chosen = NULL;
    for (size_t i = 0; i < N_SUITES && !all; i++)
        if (!strcmp(suite, g_suites[i].name)) chosen = &g_suites[i];
    if (!all && !chosen) {
        fprintf(stderr, "tilestack bench: unknown suite '%s'\n", suite);
        list_suites(stderr);
        return 2;
    }

    /* The path before anything is probed or timed: the probes hand out its FMA peak. */
    if (isa_arg) {
        int found = -1;
        for (int i = 0; i < TS_ISA_COUNT_; i++)
            if (!strcmp(isa_arg, ts_isa_name((ts_isa)i))) found = i;
        if (found < 0) {
            fprintf(stderr, "tilestack bench: unknown --isa '%s' (generic, avx2, avx512, neon)\n",
                    isa_arg);
            return 2;
        }
        if (ts_set_isa((ts_isa)found) != TS_OK) {
            fprintf(stderr, "tilestack bench: --isa %s: %s\n", isa_arg, ts_last_error());
            return 2;
        }
    }

    /* written to a temporary file and renamed at the end (src/core/atomic_file.h) */
    ts__atomic_file json_file = {0};
    if (json_path) {
        if (ts__atomic_open(&json_file, json_path) != TS_OK) {
            fprintf(stderr, "tilestack bench: --json: %s\n", ts_last_error());
            return 1;
        }
        opts.json = json_file.f;
    }
    opts.isa_name = ts_isa_name(ts_get_isa());

    const int saved_threads = ts_get_num_threads();
    int rc = 0;
    for (size_t i = 0; i < N_SUITES; i++) {
        if (!all && &g_suites[i] != chosen) continue;
        int r = g_suites[i].fn(&opts);
        if (r > rc) rc = r;
    }
    (void)ts_set_num_threads(saved_threads);
    if (opts.json && ts__atomic_commit(&json_file) != TS_OK) {
        fprintf(stderr, "tilestack bench: --json: %s\n", ts_last_error());
        if (rc == 0) rc = 1;
    }
    return rc;
}
