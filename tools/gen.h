/* `tilestack generate` and `tilestack chat` (docs/models.md, "generate and chat"). One concern
 * per file:
 *   gen_options.c  the shared command line -> gen_args (errors name the option, exit 2)
 *   gen_model.c    gen_open_model: model (built-in, config file, weight file, checkpoint
 *                  directory), tokenizer, EOS id, the ids the tokenizer cannot spell
 *   gen_stop.c     stop strings over the streamed text: what may be printed, where to cut
 *   gen_turn.c     one reply: cache reuse, prefill (ts_model_prefill), the sample / decode
 *                  loop, timings
 *   gen_think.c    a V4 thinking reply split into its reasoning and its answer
 *   gen_json.c     a reply as one JSON object
 *   gen_print.c    the streamed reply on stdout (control characters escaped on a terminal)
 *   ranks_gen.c    --ranks R: the launch, each rank's model, the other ranks' steps (MPI,
 *                  through tools/demo_comm.c; not named gen_*: the CLI's alone)
 *   cmd_generate.c, cmd_chat.c  the commands
 * Everything but the two commands and ranks_gen.c is also linked into tilestack_tests
 * (tests/test_generate.c), so the tests drive the same code the commands run. */
#ifndef TS_TOOLS_GEN_H
#define TS_TOOLS_GEN_H

#include "tilestack/model.h"
#include "tilestack/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define GEN_MAX_STOPS 16
#define GEN_THINK_END "</think>"
#define GEN_MAX_LOGPROBS 100

typedef enum gen_chat { GEN_CHAT_NONE = -1, GEN_CHAT_V4, GEN_CHAT_V4_THINKING, GEN_CHAT_V3 } gen_chat;

/* ---- gen_options.c ---- */
typedef struct gen_args {
    const char *model;     /* --model NAME (built-in) or DIR (a checkpoint directory) */
    const char *config;    /* --config FILE.json */
    const char *weights;   /* --weights FILE (written by `demo --save-weights`) */
    const char *tokenizer; /* --tokenizer FILE; default DIR/tokenizer.json with --model DIR */
    const char *prompt;    /* generate only */
    const char *system;    /* --system TEXT (with a chat format) */
    gen_chat chat;
    ts_sampler_params sp;  /* top_k 0 = no limit */
    uint64_t seed;
    int64_t max_new;       /* -n */
    const char *stops[GEN_MAX_STOPS];
    int n_stops;
    bool json;
    int64_t logprobs;      /* 0: none */
    int threads;           /* 0: the library's default */
    /* generate --dry-run: the memory plan of --model DIR (ts_model_plan_dir), nothing loaded */
    bool dry_run;
    /* --ranks: expert-parallel ranks (0: 1; with --dry-run the R = 1, 2, 4, 8 table);
     * --batch / --context: --dry-run only (0 context: the loader's) */
    int64_t ranks, batch, context;
    /* sequences the model holds (0: 1; `serve --max-batch`) */
    int64_t max_batch;
    /* over ranks, the longest wait on a peer (0: 60 s; `serve --rank-timeout`) */
    double rank_timeout_s;
    /* over ranks, the sequences spread over every rank (serve): slot s on rank s % R as its
     * sequence s / R, each rank's model for ceil(max_batch / R); else rank 0 holds them all */
    bool spread;
    /* with spread: every rank's model gets a page pool of ceil(kv_tokens / R) tokens (0: the
     * default pool) */
    int64_t kv_tokens;
} gen_args;

/* ---- gen_dry_run.c ---- */
/* Prints the plan (a table, or one JSON object with a.json); 0 ok, 1 failure. */
int gen_dry_run(const gen_args *a);

/* Parses argv (without the subcommand). Returns 0 to run, 1 after --help (exit 0), 2 on a bad
 * command line (the message, naming the option, printed to stderr). `generate` requires
 * --prompt, `chat` refuses it. Ranges that need the vocabulary are checked in gen_open_model. */
int gen_parse_args(const char *cmd, int argc, char **argv, gen_args *a);
/* "tilestack CMD: <message>" on stderr; returns 2 (a bad command line). */
int gen_bad(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An option or value in a message: escaped, so a hostile argument cannot drive the terminal
 * (one static buffer: one call per message). */
const char *gen_esc(const char *v);
/* A whole decimal integer in [lo, hi]; a finite decimal number. */
bool gen_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *v);
bool gen_parse_f64(const char *s, double *v);
void gen_usage(const char *cmd, FILE *f);

/* ---- gen_model.c ---- */
typedef struct gen_model {
    ts_model *m;
    const ts_model_config *cfg;
    ts_tokenizer *tok;
    int32_t eos;        /* -1: none (then only -n and stop strings end a reply) */
    int32_t *masked;    /* model ids the tokenizer has no token for: never sampled */
    size_t n_masked;
    float *logits;      /* [vocab] */
    /* Over R ranks, on rank 0 (ranks_gen.c): told before the model's next collective call
     * (one prefill, or one decode step), so that the other ranks take part in it; NULL
     * in-process. */
    void (*announce)(void *ctx, bool prefill);
    void *announce_ctx;
    /* With gen_args.spread over R ranks (rank 0; ranks_gen.c): the sequences' owners. spread
     * ranks hold them (1 in-process or unspread: rank 0 alone, and the calls below are NULL).
     * Each is collective: rank 0 posts it, every rank takes part. decode: n rows of slots
     * (owner slot % spread) and tokens, logits [n][vocab] in row order back on rank 0; prefill:
     * one slot's n tokens, its last logits (NULL: none); reset: the slot's sequence emptied on
     * its owner. */
    int spread;
    ts_status (*spread_decode)(void *ctx, int64_t n, const int64_t *slots, const int32_t *tokens,
                               float *logits);
    ts_status (*spread_prefill)(void *ctx, int64_t slot, int64_t n, const int32_t *tokens,
                                float *last_logits);
    void (*spread_reset)(void *ctx, int64_t slot);
} gen_model;

/* Over R ranks: this rank, and the collectives gen_open_model_on needs. */
typedef struct gen_peers {
    int rank;
    /* the model over every rank: cfg (built-in / --config), else weights or dir */
    ts_status (*create)(void *ctx, const ts_model_config *cfg, const char *weights,
                        const char *dir, ts_model **m);
    /* every rank's exit code and message -> the worst code and the first failing rank's
     * message (msg rewritten; peer: this rank only reports another's failure, TS_ERR_PEER) */
    int (*agree)(void *ctx, int rc, bool peer, char *msg, size_t cap);
    void *ctx;
} gen_peers;

/* Opens what a->model / a->config / a->weights and a->tokenizer name, checks the tokenizer
 * against the model's vocabulary and the vocabulary-dependent options, and sets the thread
 * count. Returns 0, or the exit code (1 failure, 2 bad command line) after printing why,
 * prefixed "tilestack CMD: ". */
int gen_open_model(const char *cmd, const gen_args *a, gen_model *gm);
/* The same on every rank of p (NULL: in-process): rank 0 alone holds the tokenizer and the
 * logits; every rank gets the (collective) model; each phase ends with p->agree, so every rank
 * returns the same code, and only rank 0 prints. */
int gen_open_model_on(const char *cmd, const gen_args *a, const gen_peers *p, gen_model *gm);
void gen_close_model(gen_model *gm); /* zeroed or opened */

/* ---- gen_stop.c ---- */
typedef void (*gen_emit_fn)(void *ctx, const char *text, size_t n);

typedef struct gen_stop {
    const char *const *stops; /* non-empty strings */
    int n_stops;
    char *buf;                /* received, not yet released */
    size_t len, cap;
    bool hit;                 /* a stop string completed: nothing more is released */
} gen_stop;

void gen_stop_init(gen_stop *s, const char *const *stops, int n_stops);
/* Takes the next piece of text and releases through emit what can no longer be part of a stop
 * string: everything but the longest tail that begins one. When a stop string completes (the
 * one that ends first in the text; at equal ends the longer), the text before it is released,
 * the rest dropped, and s->hit set: the same cut whatever the pieces. Returns
 * TS_ERR_OUT_OF_MEMORY or TS_OK. */
ts_status gen_stop_push(gen_stop *s, const char *text, size_t n, gen_emit_fn emit, void *ctx);
/* The end of the text: releases what was held back (unless a stop string hit). */
void gen_stop_finish(gen_stop *s, gen_emit_fn emit, void *ctx);
void gen_stop_free(gen_stop *s);

/* ---- gen_turn.c ---- */
/* The tokens a sequence's cache holds (its position is n), so the next turn can keep the
 * prefix it shares with the new prompt. */
typedef struct gen_seq {
    int64_t seq;
    int32_t *ids;
    size_t n, cap;
} gen_seq;

typedef struct gen_opts {
    ts_sampler_params sp;
    int64_t max_new;
    const char *const *stops;
    int n_stops;
    int64_t logprobs;  /* top-N per step; 0: none */
    bool ignore_eos;   /* EOS is a token like any other (serve's ignore_eos, for benchmarks) */
    gen_emit_fn emit;  /* the reply's text as it is released (NULL: not streamed) */
    void *emit_ctx;
} gen_opts;

typedef struct gen_result {
    int32_t *prompt;       /* the prompt's ids (a copy) */
    size_t n_prompt;
    size_t reused;         /* prompt tokens already in the cache from the previous turn */
    int32_t *out;          /* sampled ids, EOS excluded */
    size_t n_out;
    char *text;            /* what was released: decode(out), cut before a stop string */
    size_t text_len;
    const char *finish;    /* "eos", "stop", "length" (-n), "context" (max_seq_len) */
    double prefill_s;      /* feeding the prompt's new tokens, to their logits */
    double ttft_s;         /* turn start to the first sampled token */
    double decode_s;       /* first sampled token to the last */
    int64_t decode_steps;  /* ts_model_decode calls in decode_s */
    /* logprobs > 0: per output token its log-probability, then the top-N ids and values */
    double *lp;            /* [n_out] */
    int32_t *top_ids;      /* [n_out * logprobs] */
    double *top_lp;
    int64_t top_n;
} gen_result;

/* One reply as a state machine, for callers that run the model themselves (gen_turn; the
 * server's batch, tools/serve_sched.c): begin, then gen_reply_take on each row of logits the
 * model gives (after the prompt, after each decode of the token it returned) until r->finish
 * is set, then end. The same logits and rng give the same reply, whoever drives it. */
typedef struct gen_reply {
    const gen_model *gm;
    const gen_opts *o;
    gen_result *r;
    ts_tokenizer_stream ds;
    gen_stop stop;
    char *piece;
    size_t piece_cap, out_cap, text_cap;
    bool oom;
} gen_reply;

/* *r zeroed, the prompt copied; TS_ERR_OUT_OF_MEMORY. gen_reply_end is due whatever it returns. */
ts_status gen_reply_begin(gen_reply *rp, const gen_model *gm, const gen_opts *o,
                          const int32_t *prompt, size_t n_prompt, gen_result *r);
/* Samples *tok from logits [vocab] (the masked ids set to -inf in place; one draw from *rng
 * unless greedy), streams its text, and sets r->finish when the reply ends: "eos" (*tok is EOS,
 * not recorded), "stop", "length" (o->max_new), "context" (cached, the tokens in the cache,
 * is max_seq_len: no room to decode *tok). Otherwise *tok is the next token to decode. */
ts_status gen_reply_take(gen_reply *rp, float *logits, uint64_t *rng, int64_t cached, int32_t *tok);
/* Flushes the text held back (st == TS_OK) and frees the machine's state; returns st or the
 * first error of the flush. r stays the caller's (gen_result_free). */
ts_status gen_reply_end(gen_reply *rp, ts_status st);
/* TS_ERR_INVALID_ARGUMENT for a prompt of no tokens or longer than ctx - 1, naming both. */
ts_status gen_check_prompt(int64_t ctx, size_t n_prompt);

/* One reply: reuses the sequence's cache when gs->ids is a prefix of the prompt (else resets
 * it), feeds the rest with ts_model_prefill, then samples (one uniform per non-greedy step from
 * *rng) and decodes until EOS, a stop string, max_new tokens or the context's end, streaming
 * text through o->emit. A prompt of no tokens or longer than max_seq_len - 1 is
 * TS_ERR_INVALID_ARGUMENT naming both lengths, before anything runs. On failure the sequence
 * is left empty. *r is filled (free with gen_result_free) on success. */
ts_status gen_turn(gen_model *gm, gen_seq *gs, const int32_t *prompt, size_t n_prompt,
                   const gen_opts *o, uint64_t *rng, gen_result *r);
void gen_result_free(gen_result *r);
void gen_seq_free(gen_seq *gs);
/* The stderr summary: prefill and decode tokens/s, TPOT, finish reason. */
void gen_print_stats(FILE *f, const gen_result *r);

/* ---- gen_print.c ---- */
/* A gen_emit_fn writing to stdout (ctx unused), flushed; on a terminal the C0 controls but \n
 * and \t, and DEL, are written as \xNN. */
void gen_stdout_emit(void *ctx, const char *text, size_t n);
/* Whether stdin / stdout is a terminal: isatty, unless gen_set_tty said otherwise (a rank
 * under mpirun sees pipes; its launcher's terminals are what the user has). */
bool gen_stdin_is_tty(void);
bool gen_stdout_is_tty(void);
void gen_set_tty(bool in, bool out);

/* ---- gen_json.c ---- */
/* One line of compact JSON (malloc'ed, NUL-terminated; NULL when out of memory): prompt_ids,
 * output_ids, text, finish_reason, reused_prompt_tokens, sampler, timings, and with
 * r->top_n > 0 logprobs. */
char *gen_result_json(const gen_result *r, const gen_opts *o, uint64_t seed);

/* ---- ranks_gen.c (the CLI only) ---- */
typedef struct gen_ranks {
    void *comm;   /* the ranks' communicator (tools/demo_comm.c); NULL in-process */
    bool done;    /* a rank other than 0 that has taken part in every step: exit with rc */
} gen_ranks;

/* The commands' start. Not in rank mode with a->ranks > 1: launches the R ranks (this binary
 * under mpirun, chat's stdin passed to rank 0), waits, and returns their exit code with
 * rk->done set. In rank mode (*is_rank, from the launcher's token): MPI, then
 * gen_open_model_on over the ranks; ranks other than 0 then follow rank 0's steps until it
 * ends, and return with rk->done. Otherwise (R = 1) gen_open_model. Returns 0 when the caller
 * is to run the command (on gm), else the exit code. */
/* True in a rank started by the launcher (its token removed from argv; demo_launch.c). */
bool gen_ranks_take_token(int *argc, char **argv);
int gen_ranks_open(const char *cmd, const gen_args *a, bool is_rank, int argc, char **argv,
                   gen_ranks *rk, gen_model *gm);
/* Over ranks, after a collective call failed (a peer lost): ends the whole job (every rank,
 * mpirun non-zero) with msg; in-process a no-op. */
void gen_ranks_abort(gen_ranks *rk, const char *msg);
/* The commands' end (rank 0 or in-process): the other ranks released, the model freed, MPI
 * finalised. Returns rc. */
int gen_ranks_close(gen_ranks *rk, gen_model *gm, int rc);

/* ---- gen_think.c ---- */
/* Of a V4 thinking reply's first n bytes: found: text[0, reasoning) is the reasoning and the
 * answer starts at `answer` (after the first GEN_THINK_END); not found: it is all reasoning, of
 * which text[0, reasoning) can be shown now (done: all; else short of a tail that may begin the
 * marker), and answer = n. */
typedef struct gen_think {
    bool found;
    size_t reasoning, answer;
} gen_think;
void gen_think_split(const char *text, size_t n, bool done, gen_think *out);

#endif
