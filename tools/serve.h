/* `tilestack serve`: an OpenAI-compatible HTTP server over the model (docs/serve.md). One
 * concern per file:
 *   serve_options.c   the command line -> serve_args (errors name the option, exit 2)
 *   serve_request.c   an OpenAI request body -> a serve_req (prompt ids, sampling, stops);
 *                     the response bodies, stream chunks and error bodies (jansson)
 *   serve_http.c      libmicrohttpd: routes, API key, body limits, streaming, disconnects
 *   serve_sched.c     the scheduler: admission, chunked prefill interleaved with batched
 *                     decode steps, sampling per request (gen_reply), cancellation
 *   serve_metrics.c   counters and histograms, /metrics in Prometheus text
 *   cmd_serve.c       the command: the model (over --ranks R), signals, the loop
 * Threads: libmicrohttpd runs one thread per connection; they parse, tokenise and queue
 * requests and wait on them. The main thread alone calls the model. One mutex (srv->mu)
 * guards the queue, every request's shared fields and the metrics. */
#ifndef TS_TOOLS_SERVE_H
#define TS_TOOLS_SERVE_H

#include "gen.h"

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

/* ---- serve_options.c ---- */
typedef struct serve_args {
    gen_args g;              /* the model's options (model, config, weights, tokenizer, threads, ranks) */
    const char *host;        /* default 127.0.0.1 */
    int port;                /* default 8000; 0: any free port (printed) */
    int64_t max_batch;       /* sequences decoded together (default 8) */
    int64_t max_context;     /* prompt + completion per request (default: the model's max_seq_len) */
    int64_t max_queue;       /* requests waiting for a sequence; beyond: 503 (default 64) */
    int64_t kv_tokens;       /* --kv-cache-tokens: the page pool's tokens (0: max_batch x context) */
    int64_t prefill_chunk;   /* prompt tokens fed per scheduler step (default 32) */
    double prefill_share;    /* while requests decode, prompt chunks' share of the time (default 0.15) */
    int64_t max_body;        /* request body bytes; beyond: 413 (default 1 MiB) */
    double drain_s;          /* SIGTERM: how long running requests may take to finish (default 30) */
    const char *api_key;     /* --api-key or TS_SERVE_API_KEY; NULL: no key */
    const char *model_id;    /* the id /v1/models lists (default: the model's name or DIR's) */
    const char *port_file;   /* --port-file FILE: the bound port written there (atomically) */
} serve_args;

int serve_parse_args(int argc, char **argv, serve_args *a);

/* ---- serve_metrics.c ---- */
#define SERVE_HIST_BUCKETS 14

typedef struct serve_hist {
    uint64_t count[SERVE_HIST_BUCKETS + 1]; /* per bucket (not cumulative); the last: +Inf */
    double sum;
    uint64_t n;
} serve_hist;

typedef struct serve_metrics {
    uint64_t requests[6];   /* by status class: 2xx ok, 400, 401, 404/405, 413, 503, see serve_metrics.c */
    uint64_t prompt_tokens, completion_tokens, cancelled;
    serve_hist ttft, tpot, e2e;
    int64_t running, queued;
    int64_t kv_used, kv_capacity; /* tokens in the caches / the pool's (pages x page_tokens) */
    int64_t pages_used, pages_reserved, pages_total; /* the model's page pool */
    int64_t steps, prefill_chunks;
} serve_metrics;

void serve_hist_add(serve_hist *h, double seconds);
void serve_metrics_count_status(serve_metrics *m, int http_status);
/* Prometheus text exposition (malloc'ed; NULL when out of memory). */
char *serve_metrics_text(const serve_metrics *m);

/* ---- requests (serve_request.c fills them, serve_sched.c runs them) ---- */
typedef enum serve_state { REQ_QUEUED, REQ_PREFILL, REQ_DECODE, REQ_DONE } serve_state;

struct serve_srv;

typedef struct serve_req {
    struct serve_srv *srv;
    /* set by the HTTP thread before the request is queued; read-only after */
    bool chat, stream, include_usage, echo;
    bool thinking;                  /* V4 thinking: reasoning_content, then content */
    bool logprobs;                  /* the sampled tokens' log-probabilities in the response */
    int64_t top_logprobs;           /* and the top-N alternatives of each (o.logprobs >= 1) */
    int32_t *prompt;
    size_t n_prompt;
    gen_opts o;                     /* sampler, max_new, stops; emit set by the scheduler */
    char *stops_mem[GEN_MAX_STOPS];
    uint64_t seed;
    char id[48];
    int64_t created;
    double t_arrive;

    /* the scheduler's (main thread) */
    int64_t seq;                    /* its sequence while it holds one, else -1 */
    size_t fed;                     /* prompt tokens in the cache */
    int32_t next_tok;
    gen_reply rp;
    gen_result r;
    uint64_t rng;
    int64_t cached;                 /* tokens in its cache */
    uint64_t order;                 /* admission order (the oldest prefills first) */
    int64_t pages;                  /* cache pages reserved for it while it holds a sequence */

    /* shared, under srv->mu */
    serve_state state;
    char *out;                      /* text released so far */
    size_t out_len, out_cap;
    bool cancelled;                 /* the client went away (or the server is stopping) */
    int fail_status;                /* 0, or the HTTP status of a failure (500, 503) */
    char fail_msg[256];
    const char *finish;             /* OpenAI's finish_reason once done */
    size_t n_completion;            /* tokens sampled (EOS included, as OpenAI counts) */
    double t_first, t_last, t_done;
    int refs;                       /* the HTTP side and the scheduler */
    struct serve_req *next;         /* the queue */
} serve_req;

/* ---- the server's shared state ---- */
typedef struct serve_srv {
    const serve_args *a;
    gen_model *gm;
    int64_t max_context;   /* the effective per-request bound */
    /* the model's page pool (ts_model_get_kv_pages): a request is admitted once the pages for
     * its prompt + max_tokens are free, and reserves them until it ends, so a step never
     * finds the pool empty */
    int64_t page_tokens, pages_total; /* pages_total: each rank's pool (all alike) */
    int64_t *pages_reserved;          /* [ranks holding sequences]: slot s's is s % gm->spread */
    int spread;                       /* those ranks (1: rank 0 alone) */
    int64_t vocab;
    ts_chat_format chat_format;
    char model_id[128];
    int64_t created;

    pthread_mutex_t mu;
    pthread_cond_t work;     /* the scheduler: a request queued or cancelled, a signal */
    pthread_cond_t progress; /* the HTTP threads: text released, a request done */
    serve_req *queue_head, *queue_tail;
    int64_t n_queued;
    serve_req **slots;       /* [max_batch]: the request holding each sequence */
    bool draining;           /* SIGTERM: no new request; the running ones finish */
    bool dead;               /* the model failed (a rank died): every request fails */
    serve_metrics metrics;
    uint64_t next_id;
    int64_t open_requests;   /* HTTP requests between their headers and their last byte sent */
} serve_srv;

/* serve_request.c. Each returns 0, or an HTTP status with an OpenAI-style error body in
 * *err_body (malloc'ed). */
int serve_req_from_json(serve_srv *s, bool chat, const char *body, size_t len, serve_req **out,
                        char **err_body);
void serve_req_release(serve_srv *s, serve_req *q); /* drops a reference (under s->mu) */
char *serve_error_body(const char *message, const char *type, const char *param, const char *code);
/* The whole response of a finished request (non-streamed). */
char *serve_response_json(const serve_srv *s, const serve_req *q);
/* One server-sent event "data: {...}\n\n" carrying text[0..n) (a delta; with thinking, the
 * reasoning's delta reasoning[0..rn) before it), or the final chunk (finish_reason; usage when
 * asked), or with first the chat role chunk. */
char *serve_stream_chunk(const serve_srv *s, const serve_req *q, const char *reasoning, size_t rn,
                         const char *text, size_t n, bool first, bool final);
/* The last stream chunk with stream_options.include_usage: no choices, the usage. */
char *serve_stream_usage(const serve_srv *s, const serve_req *q);
char *serve_models_json(const serve_srv *s);

/* serve_sched.c */
double serve_now_s(void); /* CLOCK_MONOTONIC seconds */
/* pthread_cond_timedwait for `seconds` (mu held). */
void serve_timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, double seconds);
/* Queues q (a reference taken). 0, or 503 when the queue is full or the server is draining
 * (s->mu held by the caller). */
int serve_enqueue(serve_srv *s, serve_req *q);
/* The scheduler's loop on the main thread, until *stop (a signal) and the running requests
 * finish or drain_s passes; returns the exit code (0, 1 when the model failed). */
int serve_run(serve_srv *s, volatile sig_atomic_t *stop);

/* serve_http.c */
typedef struct serve_http serve_http;
/* Starts the server on a->host:a->port (the port actually bound in *port). */
int serve_http_start(serve_srv *s, serve_http **out, int *port);
/* Waits (at most seconds) until every response has been sent, then stops the server. */
void serve_http_stop(serve_http *h, double seconds);

#endif
