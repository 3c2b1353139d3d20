/* `tilestack demo`: the decode runner of docs/demo.md. One concern per file:
 *   demo_options.c  command line -> ts__demo_opts (defaults, errors naming the option)
 *   demo_launch.c   R > 1: re-exec under mpirun (argument vector, no shell), wait, exit code
 *   demo_comm.c     the only MPI user: rank mode, barrier, max / sum reductions, EP model calls
 *   demo_run.c      model set-up (create / load / save), prefill, warm-up, timed steps
 *   demo_report.c   the printed report and the --json file
 *   demo_sweep.c    --sweep over B, TPS@TPOT selection, the SVG plot
 *   demo_check.c    --check against the float64 reference and the golden file
 *   demo_selftest.c the pure pieces above checked on synthetic input (--selftest)
 *   cmd_demo.c      the entry: options -> check / launch / run / sweep */
#ifndef TS_TOOLS_DEMO_H
#define TS_TOOLS_DEMO_H

#include "tilestack/model.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define TS__DEMO_MAX_TPOT 16
#define TS__DEMO_MAX_SWEEP 16

typedef struct ts__demo_opts {
    const char *model;        /* built-in name (default dsv4-mini) */
    const char *model_dir;    /* --model DIR: a checkpoint directory (ts_model_load_dir) */
    const char *config_path;  /* --config FILE.json (overrides model) */
    const char *weights_path; /* --weights FILE */
    const char *save_weights_path;
    const char *golden_path;  /* --golden FILE (for --check) */
    int attention;            /* --attention v4 | v32: -1 = the config's (docs/model.md §8) */
    const char *json_path;
    const char *plot_path;
    int ranks;                /* 0: default (2 with MPI + mpirun, else 1) */
    int64_t batch;            /* per rank */
    int64_t context;
    int steps, warmup;
    int threads;              /* per rank; 0: cores / R */
    bool unfused;
    int64_t topk;             /* 1: greedy */
    bool sweep;
    int n_tpot;
    double tpot_ms[TS__DEMO_MAX_TPOT];
    bool check;
    bool quick;
    bool selftest;
    bool rank_mode;           /* this process is one rank under mpirun (set by cmd_demo.c from
                               * the launcher's token, never from the command line) */
    bool replay_warm;         /* --replay-warm: no cache flush before each re-run */
    bool replay, replay_set;  /* --replay / --no-replay: one untimed step re-running every
                               * idempotent kernel standalone (default: on, off in --sweep) */
    double timeout_s;         /* EP collective timeout (a peer that died) */
    bool batch_set, context_set, steps_set, warmup_set;
} ts__demo_opts;

/* demo_options.c: 0 = run, 1 = --help printed (exit 0), 2 = bad command line (message in err). */
int ts__demo_parse(int argc, char **argv, ts__demo_opts *o, char *err, size_t errcap);
void ts__demo_usage(FILE *f);
/* Fills steps / warmup / batch / context left at their defaults (after ranks are known). */
void ts__demo_apply_defaults(ts__demo_opts *o);

/* demo_launch.c */
bool ts__demo_find_program(const char *name, char *path, size_t cap);
/* Runs this binary as `mpirun --oversubscribe -np R <self> demo <args> <token>`; returns the
 * exit code to use (mpirun's, or 1 with a message if it could not start or was killed). A
 * forwarded SIGTERM / SIGINT / SIGHUP ends this process with that signal once mpirun is gone. */
int ts__demo_launch(const ts__demo_opts *o, int argc, char **argv);
/* The same for any command CMD (`demo`, `generate`, `chat`): `threads` per rank is appended as
 * --threads; pass_stdin: this process's stdin reaches rank 0 (else /dev/null). Rank mode gets
 * TS__RANKS_TTY_ENV = two digits: this process's stdin, stdout is a terminal (1) or not (0). */
int ts__launch_ranks(const char *cmd, int ranks, int threads, bool pass_stdin, int argc, char **argv);
#define TS__RANKS_TTY_ENV "TILESTACK_RANKS_TTY"
/* True in a rank started by ts__demo_launch: the last argument is the run's token, which the
 * environment holds too; it is then removed from argv (*argc decremented). */
bool ts__demo_take_rank_token(int *argc, char **argv);
int ts__demo_cores(void);

/* demo_comm.c: the run's communicator (in-process: one rank, every call trivial). */
typedef struct ts__demo_comm {
    int rank, size;
    bool mpi; /* MPI_Init done here (rank mode) */
    double timeout_s; /* --timeout: every wait on a peer; past it the job is ended (MPI_Abort) */
} ts__demo_comm;

bool ts__demo_have_ep(void); /* built with MPI and the EP model */
/* Rank mode: MPI_Init (bounded by timeout_s, as every later wait of the calls below: a rank
 * whose wait expires prints TS_ERR_TIMEOUT naming the missing rank and ends the job). */
ts_status ts__demo_comm_init(ts__demo_comm *c, int *argc, char ***argv, double timeout_s);
void ts__demo_comm_finalize(ts__demo_comm *c);
void ts__demo_barrier(const ts__demo_comm *c);
/* The command the messages of these calls name (default "demo"); before ts__demo_comm_init. */
void ts__demo_comm_set_name(const char *cmd);
/* Prints "tilestack CMD: rank N: msg" and ends the job (MPI_Abort; in-process exit(1)). */
void ts__demo_abort(const ts__demo_comm *c, const char *msg) __attribute__((noreturn));
/* Rank 0's *v to every rank. Rank 0 waits at most timeout_s for each send; the others wait
 * for it without a deadline (rank 0 may be waiting for its user), off the CPU once idle. */
void ts__demo_post(const ts__demo_comm *c, int64_t *v);
/* A post's payload of `bytes` (the ranks know the size from the post): rank 0's buf to every
 * rank, each wait bounded by timeout_s (past it the job ends). */
void ts__demo_post_data(const ts__demo_comm *c, void *buf, int64_t bytes);
/* A rank's answer to rank 0 (job ended past timeout_s), and rank 0's receive of it from rank
 * `from`: TS_ERR_TIMEOUT naming it past timeout_s (the caller decides). */
void ts__demo_send_back(const ts__demo_comm *c, const void *buf, int64_t bytes);
ts_status ts__demo_recv_back(const ts__demo_comm *c, int from, void *buf, int64_t bytes);
void ts__demo_max(const ts__demo_comm *c, double *v, int n); /* in place */
void ts__demo_sum(const ts__demo_comm *c, double *v, int n);
/* Every rank's status -> the first non-OK one (by rank; a TS_ERR_PEER only if no rank has a
 * more specific one), with that rank's msg. */
ts_status ts__demo_agree(const ts__demo_comm *c, ts_status st, char *msg, size_t cap);
/* The model: ts_model_create / _load / _load_dir (a checkpoint directory `dir`), or the EP
 * ones over all ranks. */
ts_status ts__demo_model_create(const ts__demo_comm *c, const ts_model_config *cfg,
                                const char *weights, const char *dir, int64_t max_batch, bool unfused,
                                double timeout_s, ts_model **m);
/* EP statistics since the last reset (zero / NULL in-process). */
typedef struct ts__demo_ep_stats {
    double moe_sec, dispatch_bytes, combine_bytes;
    int64_t steps;
    int64_t num_experts;
    double load_max, load_mean; /* tokens per expert over all ranks' steps */
    bool have;
} ts__demo_ep_stats;
void ts__demo_ep_reset(const ts__demo_comm *c, ts_model *m);
void ts__demo_ep_collect(const ts__demo_comm *c, ts_model *m, ts__demo_ep_stats *s);
/* Rank 0 gathers `n` doubles from every rank into all[size * n] (in-process: a copy). */
void ts__demo_gather(const ts__demo_comm *c, const double *mine, int n, double *all);

/* demo_run.c */
typedef struct ts__demo_kernel {
    const char *name;
    double sec, bytes, flops; /* per step, mean over ranks */
    double calls;
    bool cache_resident; /* no DRAM roofline (its bytes stay in cache) */
    /* the replay step (per step, mean over ranks): standalone time = median of the re-run
     * idempotent calls + the in-step time of the others (kept, part of alone) */
    double alone, kept;
} ts__demo_kernel;

#define TS__DEMO_MAX_KERNELS 24

typedef struct ts__demo_result {
    int64_t B, context;
    int steps, warmup, ranks, threads;
    double *step_s;            /* [steps]: max over ranks, barrier to barrier */
    double mean_s, p50_s, p99_s, min_s;
    double tps_rank, tps_total;
    int n_kernels;
    ts__demo_kernel k[TS__DEMO_MAX_KERNELS];
    double kernel_sum_s;       /* sum of k[].sec */
    bool replayed;             /* k[].alone / kept are set */
    double alone_sum_s, kept_sum_s; /* sums of k[].alone / k[].kept */
    ts__demo_ep_stats ep;
    int64_t expert_tokens_total; /* in-process: routed (token, expert) pairs per step */
    double create_s, prefill_s;
} ts__demo_result;

/* Loads the config (--config / --model / the weight file's). */
ts_status ts__demo_config(const ts__demo_opts *o, ts_model_config *cfg);
/* One measurement on an existing model: prefill B sequences per rank to `context`, warmup
 * untimed steps, then `steps` timed ones with the kernel breakdown on. */
ts_status ts__demo_measure(const ts__demo_comm *c, ts_model *m, const ts__demo_opts *o,
                           int64_t B, int64_t context, int warmup, int steps,
                           ts__demo_result *r);
void ts__demo_result_free(ts__demo_result *r);
double ts__demo_percentile(const double *v, int n, double p); /* p in [0, 100] */

/* demo_report.c */
typedef struct ts__machine ts__machine;
void ts__demo_print_config(FILE *f, const ts_model_config *cfg, const ts__demo_opts *o,
                           int ranks, int threads, const ts__machine *mach);
void ts__demo_print_result(FILE *f, const ts_model_config *cfg, const ts__demo_result *r,
                           const ts__machine *mach);
/* JSON object of one result (no trailing newline). */
void ts__demo_json_result(FILE *f, const ts__demo_result *r, const ts__machine *mach);
void ts__demo_json_config(FILE *f, const ts_model_config *cfg, const ts__demo_opts *o,
                          int ranks, int threads, const ts__machine *mach);

/* demo_sweep.c */
typedef struct ts__demo_point {
    int64_t B;
    double p50_ms, p99_ms, tps_rank;
} ts__demo_point;
/* Index of the point with the largest tps_rank among those with p50_ms <= x (ties: smaller B);
 * -1 if none. */
int ts__demo_best_under(const ts__demo_point *p, int n, double x_ms);
/* Self-contained SVG: tokens/s per rank against TPOT p50, points labelled with B, one vertical
 * line per limit. Returns 0, or -1 if the file could not be written (errno kept). */
int ts__demo_write_svg(const char *path, const char *title, const ts__demo_point *p, int n,
                       const double *x_ms, int nx);
void ts__demo_print_tps_table(FILE *f, const ts__demo_point *p, int n, const double *x_ms,
                              int nx, int ranks);
int ts__demo_sweep(const ts__demo_comm *c, ts_model *m, const ts__demo_opts *o,
                   const ts_model_config *cfg, const ts__machine *mach, FILE *json);

/* demo_check.c: exit code. */
int ts__demo_check(const ts__demo_comm *c, const ts__demo_opts *o);
bool ts__demo_find_golden(const char *given, char *path, size_t cap);

/* demo_selftest.c: exit code. */
int ts__demo_selftest(void);

#endif
