/* Bench harness of the `tilestack` CLI: machine probes (the rooflines), timing, the result
 * table and the JSON-lines writer. Suites register in bench/suites.c.
 *
 * Method (design brief, "Performance method"): every run first measures this machine's FP32
 * FMA peak and DRAM / L3 / L2 read and memcpy bandwidth for the thread count in use, then
 * reports each kernel as a fraction of its roofline plus a ratio to a baseline timed in the
 * same run. Times are medians of >= 5 runs after warm-up (the minimum is reported too). */
#ifndef TS_BENCH_H
#define TS_BENCH_H

#include "tilestack/tilestack.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* ---- machine probes (bench/probes.c) ---- */

typedef struct ts__machine {
    int threads;
    ts_isa isa;             /* the kernel path fma_peak_gflops belongs to: the one in use */
    double fma_peak_gflops; /* FP32, all `threads` together, on the `isa` path's widest FMA */
    /* Each path's own FP32 peak (generic C, 12 ymm chains, 24 zmm chains); 0 where the path
     * cannot run here. A row is judged on the peak of the path that ran it. */
    double fma_peak_isa_gflops[TS_ISA_COUNT_];
    /* vdpbf16ps (AVX512_BF16) peak, flops counted as 2 per product: the roofline of the FP8 /
     * FP4 GEMM rows that run the vdpbf16ps kernels; 0 where the CPU or build has none */
    double dpbf16_peak_gflops;
    double dram_read_gbps;  /* read-only reduction over a buffer >= 8x L3 */
    double l3_read_gbps;    /* read-only, ~half of L3 in all */
    double l2_read_gbps;    /* read-only, ~half of L2 per thread */
    double memcpy_gbps;     /* glibc memcpy on DRAM-sized buffers, bytes read + written */
} ts__machine;

/* Probe once per thread count per process (cached); `quick` shortens every probe. Never NULL:
 * a failed allocation leaves the affected bandwidths at 0. The figures are the ones of the
 * ISA path in use at the call (ts_get_isa()): every runnable path's FMA peak is probed once,
 * and `isa` / `fma_peak_gflops` name the active one, so a row timed after ts_set_isa is judged
 * on its own path's peak. */
const ts__machine *ts__probe_machine(int threads, bool quick);

/* Kernels of the probes; the avx2 ones live in bench/avx2/ (compiled with -mavx2 -mfma). Each
 * returns a value derived from every byte/flop so the work cannot be optimised away. */
float ts__probe_fma_generic(int64_t iters);          /* 2*8*8 flops per iteration */
float ts__probe_read_generic(const void *p, size_t bytes); /* bytes % 256 == 0 */
#ifdef TS_HAVE_AVX2_KERNELS
float ts__probe_fma_avx2(int64_t iters);             /* 12 ymm chains: 192 flops/iteration */
float ts__probe_read_avx2(const void *p, size_t bytes);    /* 32-byte aligned, bytes % 256 == 0 */
#endif
#ifdef TS_HAVE_AVX512_KERNELS
#define TS__PROBE_ZMM_CHAINS 24
float ts__probe_fma_avx512(int64_t iters);           /* 24 zmm chains: 768 flops/iteration */
#endif
#ifdef TS_HAVE_AVX512BF16_KERNELS
#define TS__PROBE_DPBF16_CHAINS 24
float ts__probe_dpbf16_avx512bf16(int64_t iters);    /* 24 zmm chains: 1536 flops/iteration */
#endif

/* ---- peers: the oneDNN matmul baseline (bench/baseline_dnnl.c, built with TS_HAVE_DNNL) ---- */
#ifdef TS_HAVE_DNNL
typedef struct ts__dnnl_mm ts__dnnl_mm;
/* D[m, n] = A[m, k] · B_i[n, k]ᵀ, all f32 or all bf16 (f32 accumulation), row-major; each
 * call uses the next of the ncopies weight copies. Created for `threads` (the primitive's
 * parallelisation depends on it). NULL with the reason in why when oneDNN refuses. */
ts__dnnl_mm *ts__dnnl_mm_create(int64_t m, int64_t n, int64_t k, bool bf16, void *a,
                                void *const *b, int ncopies, void *d, int threads, char *why,
                                size_t cap);
ts_status ts__dnnl_mm_run(void *ctx); /* ctx: a ts__dnnl_mm */
const char *ts__dnnl_mm_impl(const ts__dnnl_mm *p); /* e.g. "brg:avx512_core" */
void ts__dnnl_mm_destroy(ts__dnnl_mm *p);
bool ts__dnnl_set_threads(int threads); /* before timing: the count the primitive was made for */
void ts__dnnl_version(char *buf, size_t cap);
#endif

/* ---- timing (bench/bench.c) ---- */

typedef ts_status (*ts__bench_fn)(void *ctx);

typedef struct ts__timing {
    double median_s; /* per call */
    double min_s;
    int runs;        /* timed samples */
    int64_t inner;   /* calls per sample (short kernels are batched above clock noise) */
} ts__timing;

double ts__now_s(void); /* CLOCK_MONOTONIC */

/* Warm up, then time >= 5 samples (more by default, while under a time budget). Stops at
 * the first failing call and returns its status. */
ts_status ts__bench_time(ts__bench_fn fn, void *ctx, bool quick, ts__timing *out);

/* The same for n variants of one job measured in alternation (one call of each per round,
 * after a warm-up of each), so that a slow drift of the machine's speed (other tenants of a
 * shared host) hits all of them alike and their ratios stay meaningful. ctx[i] is passed to
 * fn(ctx[i]); out[i] gets variant i's median and min per call. */
ts_status ts__bench_time_interleaved(ts__bench_fn fn, void *const *ctx, int n, bool quick, ts__timing *out);

/* ---- results ---- */

typedef enum ts__roof {
    TS__ROOF_NONE = 0,
    TS__ROOF_FMA,    /* compute only */
    TS__ROOF_DPBF16, /* compute only, on the vdpbf16ps peak (FP8 / FP4 GEMMs that run it) */
    TS__ROOF_DRAM,   /* bytes / DRAM read BW (with flops: min of both bounds) */
    TS__ROOF_L3,
    TS__ROOF_L2,
    TS__ROOF_MEMCPY, /* bytes read + written / memcpy BW: streaming kernels that also write */
} ts__roof;

const char *ts__roof_name(ts__roof r);
double ts__roof_gbps(const ts__machine *m, ts__roof r);

typedef struct ts__bench_row {
    const char *suite, *name, *shape, *dtype;
    int threads;
    ts__timing t;
    double flops; /* per call; 0 when not a compute kernel */
    double bytes; /* per call, as the roofline counts them; 0 if not applicable */
    ts__roof roof;
    /* Bytes the calls stream through in turn (every weight copy a row rotates over, plus what
     * each call touches besides); 0: `bytes` (one call's set, re-read by the next). A dram_read
     * or memcpy row whose set fits in 2 x L3 is re-read from the cache, so the harness judges
     * it on l3_read instead (ts__bench_roof) unless roof_fixed. */
    double set_bytes;
    bool roof_fixed; /* the suite's roofline stands whatever the set (e.g. EP's memcpy share) */
    const char *baseline;    /* NULL if none */
    double baseline_seconds; /* median per call of the baseline */
    /* Every baseline timed for the row (the strongest of them is `baseline`), for the JSON's
     * "baselines" object; nbaselines = 0 when the row has only `baseline`. */
    int nbaselines;
    const char *baseline_names[4];
    double baseline_all_seconds[4];
} ts__bench_row;

typedef struct ts__bench_opts {
    bool quick;
    int threads;  /* 0: the suite's default thread counts */
    FILE *json;   /* NULL: no JSON */
    const char *isa_name; /* ISA in use, for the table title */
} ts__bench_opts;

/* Fill the derived fields and print one table row (+ one JSON line when opts->json). */
void ts__bench_table_header(FILE *f);
void ts__bench_report(const ts__bench_opts *opts, const ts__bench_row *row);
/* A row that could not run (kernel missing or failing): printed, and written to JSON with
 * "error" set and null figures, so a missing kernel is visible rather than silently absent. */
void ts__bench_report_error(const ts__bench_opts *opts, const ts__bench_row *row,
                            const char *why);
void ts__bench_print_machine(FILE *f, const ts__machine *m);
/* The other runnable paths' peaks, e.g. "avx2 70.3, generic 23.1" ("" if none). */
void ts__bench_machine_peaks(char *buf, size_t cap, const ts__machine *m);

/* The roofline a row is judged on: its own, except that a dram_read / memcpy row whose set
 * (set_bytes, else bytes) is at most 2 x L3 (ts_cpu_info.l3_bytes, 32 MiB if unknown) becomes
 * l3_read: a buffer that fits in L3 and is re-read is not a DRAM measurement. */
ts__roof ts__bench_roof(const ts__bench_row *row);
/* What a row must stream to be a DRAM measurement here: 2 x L3 in all. */
double ts__bench_dram_set_bytes(void);
/* Copies of a `per_copy`-byte working set needed to stream more than 2 x L3 (>= 1, <= max). */
int ts__bench_dram_copies(double per_copy, int max);

/* Derived figures (also used by `tilestack demo`). */
double ts__row_gbps(const ts__bench_row *row);
double ts__row_gflops(const ts__bench_row *row);
/* roofline time / measured time: min of the compute and bandwidth bounds; < 0 if none. */
double ts__row_roofline_frac(const ts__bench_row *row, const ts__machine *m);

/* JSON string literal with escapes (", \, control characters as \uXXXX). */
void ts__json_write_string(FILE *f, const char *s);
/* A finite double, or null (NaN/inf/negative sentinel are not valid JSON numbers). */
void ts__json_write_number(FILE *f, double v);

/* ---- suites (bench/suites.c registry) ---- */

typedef int (*ts__suite_fn)(const ts__bench_opts *opts);
int ts__suite_numerics(const ts__bench_opts *opts);
/* The numerics kernels on a bf16 [m, n] activation at `threads` (for `tilestack demo`). */
int ts__numerics_tour(const ts__bench_opts *opts, int64_t m, int64_t n, int threads);
int ts__suite_gemm(const ts__bench_opts *opts);
/* One dense FP8 GEMM row at `threads` with its OpenBLAS baseline (for `tilestack demo`). */
int ts__gemm_tour(const ts__bench_opts *opts, int threads);
int ts__suite_topk(const ts__bench_opts *opts);
/* MoE grouped GEMM rows of the gemm suite (bench/suite_gemm_moe.c). */
int ts__suite_gemm_moe(const ts__bench_opts *opts, const int *threads, int nthreads);
/* `tilestack bench attention` = the FlashMLA rows then the MQA-logits rows. */
int ts__suite_attention(const ts__bench_opts *opts);
int ts__suite_attention_mla(const ts__bench_opts *opts, const int *threads, int nthreads);
int ts__suite_attention_mqa(const ts__bench_opts *opts, const int *threads, int nthreads);
/* `tilestack bench ep` (run under mpirun): DeepEP dispatch/combine vs MPI_Alltoallv. */
int ts__suite_ep(const ts__bench_opts *opts);

/* Thread counts a suite runs by default: {1, online cores} or {opts->threads}. Returns count. */
int ts__bench_thread_list(const ts__bench_opts *opts, int list[2]);

/* TS_BENCH_FILTER: true when filter is NULL or empty, or "name shape" contains it. */
bool ts__bench_wanted(const char *filter, const char *name, const char *shape);

/* `tilestack bench ...`: returns the process exit code. */
int ts__cmd_bench(int argc, char **argv);

/* Bench input generator (xorshift64): fast and deterministic; bench inputs only need
 * realistic magnitudes, not the test suite's shared splitmix64 stream. */
typedef struct ts__bench_rng { uint64_t s; } ts__bench_rng;
static inline uint64_t ts__bench_rng_next(ts__bench_rng *r) {
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return r->s;
}

#endif
