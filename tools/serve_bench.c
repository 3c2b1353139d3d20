/* `tilestack bench serve` (docs/serve.md, "Benchmark"): starts `tilestack serve` on the given
 * model and drives it over loopback with streamed /v1/completions requests (ignore_eos, so
 * every request decodes exactly its max_tokens):
 *   saturation    B clients back to back, one-word prompts: the server's tokens/s (output,
 *                 and with the prompts' tokens, which take rows of the same steps), against
 *                 `tilestack demo` on the same model, batch and ranks (decode steps alone, at
 *                 the mean context), alternated, best of each;
 *   sweep         1, 2, 4 .. B clients with short prompts: tokens/s against TPOT p50 (the
 *                 demo's TPS@TPOT curve, through the server; --plot FILE.svg);
 *   prefill       B - 1 long replies alone, then with long prompts arriving: TPOT p50 ratio;
 *   poisson       requests at three arrival rates (Poisson), prompt and output lengths uniform
 *                 in [L/2, 3L/2]: throughput, TTFT and TPOT p50 / p99.
 * Requests are HTTP/1.0, so the stream is the body up to the close (no chunked framing);
 * events are parsed with jansson. TTFT: request sent to first text; TPOT: (last text - first
 * text) / (completion tokens - 1), per request. */
#include "cli.h"
#include "demo.h"
#include "serve.h"

#include "core/atomic_file.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct breq {
    int prompt_words, max_tokens;
    uint64_t seed;
    double t_send, t_first, t_last;
    int64_t prompt_tokens, completion_tokens;
    bool ok;
} breq;

/* One event's JSON: text seen (timestamps), usage. */
static void on_event(breq *r, const char *data, size_t n, double t) {
    if (n == 6 && !memcmp(data, "[DONE]", 6)) {
        r->ok = true;
        return;
    }
    json_t *j = json_loadb(data, n, 0, NULL);
    if (!j) return;
    const json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
    const json_t *text = json_object_get(ch, "text");
    if (json_is_string(text) && json_string_length(text)) {
        if (r->t_first == 0) r->t_first = t;
        r->t_last = t;
    }
    const json_t *u = json_object_get(j, "usage");
    if (json_is_object(u)) {
        r->prompt_tokens = json_integer_value(json_object_get(u, "prompt_tokens"));
        r->completion_tokens = json_integer_value(json_object_get(u, "completion_tokens"));
    }
    json_decref(j);
}

static void run_request(int port, breq *r) {
    char body[1 << 16];
    int n = snprintf(body, sizeof body, "{\"prompt\": \"");
    uint64_t x = r->seed * 0x9e3779b97f4a7c15ull + 1;
    for (int w = 0; w < r->prompt_words && n < (int)sizeof body - 256; w++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        n += snprintf(body + n, sizeof body - (size_t)n, "%s%c%c%c", w ? " " : "", 'a' + (int)(x % 26),
                      'a' + (int)((x >> 8) % 26), 'a' + (int)((x >> 16) % 26));
    }
    n += snprintf(body + n, sizeof body - (size_t)n,
                  "\", \"max_tokens\": %d, \"seed\": %llu, \"temperature\": 0, \"stream\": true, \"ignore_eos\": true, "
                  "\"stream_options\": {\"include_usage\": true}}", r->max_tokens, (unsigned long long)r->seed);
    char head[256];
    const int hn = snprintf(head, sizeof head, "POST /v1/completions HTTP/1.0\r\nHost: 127.0.0.1\r\n"
                            "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n", n);
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    r->t_send = serve_now_s();
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) || write(fd, head, (size_t)hn) != hn ||
        write(fd, body, (size_t)n) != n) {
        if (fd >= 0) close(fd);
        return;
    }
    /* the body starts after the headers; events end in a blank line */
    size_t cap = 1 << 16, len = 0, scan = 0;
    char *buf = malloc(cap);
    bool in_body = false;
    for (;;) {
        if (len + 4096 > cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) break;
            buf = nb;
        }
        const ssize_t got = read(fd, buf + len, cap - len - 1);
        if (got <= 0) break;
        len += (size_t)got;
        buf[len] = 0;
        const double t = serve_now_s();
        if (!in_body) {
            char *e = strstr(buf, "\r\n\r\n");
            if (!e) continue;
            if (strncmp(buf, "HTTP/1.", 7) || strncmp(buf + 9, "200", 3)) break;
            in_body = true;
            scan = (size_t)(e + 4 - buf);
        }
        char *e;
        while ((e = strstr(buf + scan, "\n\n"))) {
            if (!strncmp(buf + scan, "data: ", 6)) on_event(r, buf + scan + 6, (size_t)(e - buf - (ptrdiff_t)scan - 6), t);
            scan = (size_t)(e + 2 - buf);
        }
    }
    free(buf);
    close(fd);
}

/* GET path's body (HTTP/1.0), malloc'ed; NULL on failure. */
static char *http_get(int port, const char *path) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    char req[256];
    const int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) || write(fd, req, (size_t)n) != n) {
        if (fd >= 0) close(fd);
        return NULL;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    ssize_t got;
    while (buf && len + 1 < cap && (got = read(fd, buf + len, cap - len - 1)) > 0) len += (size_t)got;
    close(fd);
    if (!buf) return NULL;
    buf[len] = 0;
    char *body = strstr(buf, "\r\n\r\n");
    char *out = body ? strdup(body + 4) : NULL;
    free(buf);
    return out;
}

/* The server's context per request (/v1/models' max_model_len). */
static int64_t server_context(int port) {
    char *b = http_get(port, "/v1/models");
    json_t *j = b ? json_loads(b, 0, NULL) : NULL;
    free(b);
    const int64_t v = json_integer_value(json_object_get(json_array_get(json_object_get(j, "data"), 0), "max_model_len"));
    json_decref(j);
    return v;
}

/* ---- load shapes ---- */
typedef struct load {
    int port;
    breq *r;
    int n;
    int next;              /* closed loop: the next request to run */
    pthread_mutex_t mu;
    volatile bool *stop;   /* the prefill hammer: until set */
    int hammer_words;
} load;

static void *closed_worker(void *p) {
    load *l = p;
    for (;;) {
        pthread_mutex_lock(&l->mu);
        const int i = l->next < l->n ? l->next++ : -1;
        pthread_mutex_unlock(&l->mu);
        if (i < 0) return NULL;
        run_request(l->port, &l->r[i]);
    }
}

static void run_closed(load *l, int clients) {
    pthread_t th[256];
    l->next = 0;
    pthread_mutex_init(&l->mu, NULL);
    if (clients > 256) clients = 256;
    for (int i = 0; i < clients; i++) pthread_create(&th[i], NULL, closed_worker, l);
    for (int i = 0; i < clients; i++) pthread_join(th[i], NULL);
    pthread_mutex_destroy(&l->mu);
}

typedef struct one {
    int port;
    breq *r;
} one;

static void *one_worker(void *p) {
    one *o = p;
    run_request(o->port, o->r);
    return NULL;
}

/* Poisson arrivals at `rate` requests/s (one thread per request in flight). */
static void run_poisson(int port, breq *r, int n, double rate, uint64_t seed) {
    pthread_t *th = calloc((size_t)n, sizeof *th);
    one *o = calloc((size_t)n, sizeof *o);
    uint64_t x = seed | 1;
    double t = serve_now_s();
    for (int i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const double u = ((double)(x >> 11) + 0.5) / 9007199254740992.0;
        t += -log(u) / rate;
        const double wait = t - serve_now_s();
        if (wait > 0) {
            struct timespec ts = {(time_t)wait, (long)((wait - floor(wait)) * 1e9)};
            nanosleep(&ts, NULL);
        }
        o[i] = (one){port, &r[i]};
        pthread_create(&th[i], NULL, one_worker, &o[i]);
    }
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    free(th);
    free(o);
}

static void *hammer(void *p) {
    load *l = p;
    for (uint64_t k = 1; !*l->stop; k++) {
        breq r = {.prompt_words = l->hammer_words, .max_tokens = 1, .seed = 777 + k};
        run_request(l->port, &r);
    }
    return NULL;
}

/* ---- statistics ---- */
static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(double *v, int n, double q) {
    if (n <= 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    int i = (int)ceil(q * n) - 1;
    return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

typedef struct stats {
    int ok, n;
    double tok_s, req_s, ttft50, ttft99, tpot50, tpot99, mean_prompt;
    double all_tok_s; /* prompt + completion tokens: each a row of some model call */
} stats;

static stats summarise(const breq *r, int n) {
    stats s = {.n = n};
    double *ttft = calloc((size_t)n, sizeof *ttft), *tpot = calloc((size_t)n, sizeof *tpot);
    double t0 = INFINITY, t1 = 0, toks = 0, prompt = 0;
    int nt = 0;
    for (int i = 0; i < n; i++) {
        if (!r[i].ok || r[i].t_first == 0) continue;
        s.ok++;
        t0 = fmin(t0, r[i].t_send);
        t1 = fmax(t1, r[i].t_last);
        toks += (double)r[i].completion_tokens;
        prompt += (double)r[i].prompt_tokens;
        ttft[s.ok - 1] = r[i].t_first - r[i].t_send;
        if (r[i].completion_tokens > 1)
            tpot[nt++] = (r[i].t_last - r[i].t_first) / (double)(r[i].completion_tokens - 1);
    }
    if (s.ok && t1 > t0) {
        s.tok_s = toks / (t1 - t0);
        s.all_tok_s = (toks + prompt) / (t1 - t0);
        s.req_s = s.ok / (t1 - t0);
    }
    s.mean_prompt = s.ok ? prompt / s.ok : 0;
    s.ttft50 = pct(ttft, s.ok, 0.5), s.ttft99 = pct(ttft, s.ok, 0.99);
    s.tpot50 = pct(tpot, nt, 0.5), s.tpot99 = pct(tpot, nt, 0.99);
    free(ttft);
    free(tpot);
    return s;
}

/* ---- the server and the demo as child processes ---- */
typedef struct bench_args {
    const char *model_opt, *model; /* --model / --config / --weights and its value */
    const char *tokenizer;
    int64_t ranks, batch, prompt_words, output_len, requests, threads;
    double rates[3];
    int n_rates;
    const char *plot, *json;
    bool quick;
} bench_args;

static int self_path(char *out, size_t cap) {
    const ssize_t n = readlink("/proc/self/exe", out, cap - 1);
    if (n <= 0) return -1;
    out[n] = 0;
    return 0;
}

static pid_t start_server(const bench_args *a, const char *port_file, int *port) {
    char self[4096], b[32], r[32], t[32];
    if (self_path(self, sizeof self)) return -1;
    snprintf(b, sizeof b, "%lld", (long long)a->batch);
    snprintf(r, sizeof r, "%lld", (long long)a->ranks);
    snprintf(t, sizeof t, "%lld", (long long)a->threads);
    const char *av[32];
    int k = 0;
    av[k++] = self, av[k++] = "serve", av[k++] = a->model_opt, av[k++] = a->model;
    if (a->tokenizer) av[k++] = "--tokenizer", av[k++] = a->tokenizer;
    av[k++] = "--port", av[k++] = "0", av[k++] = "--port-file", av[k++] = port_file;
    av[k++] = "--max-batch", av[k++] = b, av[k++] = "--max-queue", av[k++] = "4096";
    if (a->ranks > 1) av[k++] = "--ranks", av[k++] = r;
    if (a->threads) av[k++] = "--threads", av[k++] = t;
    av[k] = NULL;
    unlink(port_file);
    const pid_t pid = fork();
    if (pid == 0) {
        execv(self, (char *const *)av);
        _exit(127);
    }
    for (int i = 0; pid > 0 && i < 1200; i++) {
        FILE *f = fopen(port_file, "r");
        if (f) {
            const int ok = fscanf(f, "%d", port) == 1;
            fclose(f);
            if (ok) return pid;
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) return -1;
        usleep(100000);
    }
    if (pid > 0) kill(pid, SIGKILL), waitpid(pid, NULL, 0);
    return -1;
}

/* The demo's --batch for the server's: the demo's is per rank, the server's spread over the
 * ranks, so the same sequences in all are B / R per rank. */
static int64_t demo_batch(const bench_args *a) {
    const int64_t b = (a->batch + a->ranks - 1) / a->ranks;
    return b > 0 ? b : 1;
}

/* `tilestack demo` on the same model, sequences, ranks at `context`: its tokens/s (total). */
static double demo_tokens_per_s(const bench_args *a, int64_t context) {
    char self[4096], b[32], r[32], c[32], t[32], json[] = "/tmp/ts-bench-serve-demo-XXXXXX";
    if (self_path(self, sizeof self)) return NAN;
    const int fd = mkstemp(json);
    if (fd < 0) return NAN;
    close(fd);
    snprintf(b, sizeof b, "%lld", (long long)demo_batch(a));
    snprintf(r, sizeof r, "%lld", (long long)a->ranks);
    snprintf(c, sizeof c, "%lld", (long long)context);
    snprintf(t, sizeof t, "%lld", (long long)a->threads);
    const char *av[32];
    int k = 0;
    av[k++] = self, av[k++] = "demo", av[k++] = a->model_opt, av[k++] = a->model;
    av[k++] = "--batch", av[k++] = b, av[k++] = "--ranks", av[k++] = r, av[k++] = "--context", av[k++] = c;
    av[k++] = "--steps", av[k++] = a->quick ? "20" : "60", av[k++] = "--no-replay", av[k++] = "--json", av[k++] = json;
    if (a->threads) av[k++] = "--threads", av[k++] = t;
    av[k] = NULL;
    const pid_t pid = fork();
    if (pid == 0) {
        const int nul = open("/dev/null", O_WRONLY);
        if (nul >= 0) dup2(nul, STDOUT_FILENO), dup2(nul, STDERR_FILENO);
        execv(self, (char *const *)av);
        _exit(127);
    }
    int st = 1;
    if (pid > 0) waitpid(pid, &st, 0);
    double v = NAN;
    json_t *j = st == 0 ? json_load_file(json, 0, NULL) : NULL;
    const json_t *res = json_object_get(j, "result");
    if (json_is_number(json_object_get(res, "tokens_per_s_total")))
        v = json_number_value(json_object_get(res, "tokens_per_s_total"));
    json_decref(j);
    unlink(json);
    return v;
}

static breq *requests(int n, int words, int out, uint64_t seed, bool vary) {
    breq *r = calloc((size_t)n, sizeof *r);
    uint64_t x = seed * 2654435761u + 7;
    for (int i = 0; r && i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        /* vary: uniform in [L/2, 3L/2] */
        r[i].prompt_words = vary ? words / 2 + (int)(x % (uint64_t)(words + 1)) : words;
        r[i].max_tokens = vary ? out / 2 + (int)((x >> 20) % (uint64_t)(out + 1)) : out;
        if (r[i].prompt_words < 1) r[i].prompt_words = 1;
        if (r[i].max_tokens < 2) r[i].max_tokens = 2;
        r[i].seed = seed + (uint64_t)i;
    }
    return r;
}

static void usage(FILE *f) {
    fprintf(f, "usage: tilestack bench serve (--model NAME|DIR | --config FILE | --weights FILE)\n"
               "                             [--tokenizer FILE] [options]\n"
               "Drives `tilestack serve` over loopback (docs/serve.md, \"Benchmark\").\n"
               "  --ranks R          expert-parallel ranks of the server and the demo (default 1)\n"
               "  --batch B          the server's --max-batch (default 8); the demo runs as many\n"
               "                     sequences in all (--batch B / R per rank)\n"
               "  --threads T        threads of the server and the demo (default: theirs)\n"
               "  --prompt-words P   prompt length in 3-letter words (default 32)\n"
               "  --output-len O     completion tokens per request (default 64)\n"
               "  --requests N       requests per Poisson rate (default 48; --quick 16)\n"
               "  --rates R1,R2,R3   arrival rates in requests/s (default 0.3, 0.6, 0.9 x the\n"
               "                     measured saturation rate)\n"
               "  --plot FILE.svg    the sweep's tokens/s against TPOT p50\n"
               "  --json FILE        the results as JSON\n"
               "  --quick            fewer requests\n");
}

static int parse(int argc, char **argv, bench_args *a) {
    memset(a, 0, sizeof *a);
    a->ranks = 1, a->batch = 8, a->prompt_words = 32, a->output_len = 64, a->requests = 0;
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) return usage(stdout), 1;
        if (!strcmp(o, "--quick")) {
            a->quick = true;
            continue;
        }
        if (i + 1 >= argc) return fprintf(stderr, "tilestack bench serve: %s needs a value\n", o), 2;
        const char *v = argv[++i];
        const struct { const char *name; int64_t lo, hi; int64_t *dst; } ints[] = {
            {"--ranks", 1, 64, &a->ranks}, {"--batch", 1, 256, &a->batch}, {"--threads", 1, 1024, &a->threads},
            {"--prompt-words", 1, 4000, &a->prompt_words}, {"--output-len", 2, 1 << 16, &a->output_len},
            {"--requests", 1, 10000, &a->requests}};
        bool done = false;
        for (size_t k = 0; k < sizeof ints / sizeof *ints && !done; k++) {
            if (strcmp(o, ints[k].name)) continue;
            if (!gen_parse_i64(v, ints[k].lo, ints[k].hi, ints[k].dst))
                return fprintf(stderr, "tilestack bench serve: %s: not an integer in [%lld, %lld]\n", o,
                               (long long)ints[k].lo, (long long)ints[k].hi), 2;
            done = true;
        }
        if (done) continue;
        if (!strcmp(o, "--model") || !strcmp(o, "--config") || !strcmp(o, "--weights")) a->model_opt = o, a->model = v;
        else if (!strcmp(o, "--tokenizer")) a->tokenizer = v;
        else if (!strcmp(o, "--plot")) a->plot = v;
        else if (!strcmp(o, "--json")) a->json = v;
        else if (!strcmp(o, "--rates")) {
            char *end;
            const char *p = v;
            for (a->n_rates = 0; a->n_rates < 3 && *p; a->n_rates++) {
                a->rates[a->n_rates] = strtod(p, &end);
                if (end == p || !(a->rates[a->n_rates] > 0)) return fprintf(stderr, "tilestack bench serve: --rates: positive numbers, comma-separated\n"), 2;
                p = *end == ',' ? end + 1 : end;
            }
        } else return fprintf(stderr, "tilestack bench serve: unknown option '%.64s'\n", o), 2;
    }
    if (!a->model) return fprintf(stderr, "tilestack bench serve: give --model, --config or --weights\n"), 2;
    if (!a->requests) a->requests = a->quick ? 16 : 48;
    return 0;
}

static void print_stats(const char *what, const stats *s) {
    printf("%-28s %3d/%-3d ok  %8.1f tok/s  %6.2f req/s  TTFT p50 %7.1f p99 %7.1f ms  TPOT p50 %6.2f p99 %6.2f ms\n",
           what, s->ok, s->n, s->tok_s, s->req_s, 1e3 * s->ttft50, 1e3 * s->ttft99, 1e3 * s->tpot50, 1e3 * s->tpot99);
}

static json_t *stats_json(const stats *s) {
    return json_pack("{s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f}", "ok", s->ok, "requests", s->n, "tokens_per_s", s->tok_s,
                     "requests_per_s", s->req_s, "ttft_p50_ms", 1e3 * s->ttft50, "ttft_p99_ms", 1e3 * s->ttft99,
                     "tpot_p50_ms", 1e3 * s->tpot50, "tpot_p99_ms", 1e3 * s->tpot99);
}

int ts__bench_serve(int argc, char **argv) {
    bench_args a;
    int rc = parse(argc, argv, &a);
    if (rc) return rc == 1 ? 0 : rc;
    char port_file[] = "/tmp/ts-bench-serve-port-XXXXXX";
    const int pfd = mkstemp(port_file);
    if (pfd >= 0) close(pfd);
    int port = 0;
    const pid_t srv = start_server(&a, port_file, &port);
    unlink(port_file);
    if (srv < 0) {
        fprintf(stderr, "tilestack bench serve: the server did not start\n");
        return 1;
    }
    const int B = (int)a.batch, W = (int)a.prompt_words, O = (int)a.output_len;
    json_t *out = json_object();
    printf("bench serve: %s %s, batch %d, ranks %lld, prompts %d words, outputs %d tokens\n", a.model_opt,
           a.model, B, (long long)a.ranks, W, O);
    /* warm-up: the step workspace and the allocator */
    breq *r = requests(B, W, 8, 1, false);
    load l = {.port = port, .r = r, .n = B};
    run_closed(&l, B);
    free(r);

    const int64_t ctx = server_context(port);
    /* saturation: short prompts, so the server's tokens/s is decode's, as the demo's is;
     * alternated with the demo (best of each: this machine's noise only slows runs down) */
    const int ns = a.quick ? 2 * B : 4 * B, rounds = a.quick ? 2 : 3;
    stats sat = {0};
    double demo = NAN;
    for (int round = 0; round < rounds; round++) {
        r = requests(ns, 1, O, 100, false);
        l = (load){.port = port, .r = r, .n = ns};
        run_closed(&l, B);
        const stats st = summarise(r, ns);
        free(r);
        print_stats("saturation (B clients)", &st);
        if (st.tok_s > sat.tok_s || round == 0) sat = st;
        const double d = demo_tokens_per_s(&a, (int64_t)(st.mean_prompt + O / 2.0));
        printf("demo at batch %lld per rank, context %lld: %.1f tok/s\n", (long long)demo_batch(&a),
               (long long)(st.mean_prompt + O / 2.0), d);
        if (isfinite(d) && !(d <= demo)) demo = d;
    }
    /* a prompt token takes a row of a model call as an output token does, and yields none */
    printf("best of %d: server %.1f output tok/s (%.1f with the prompts' tokens), demo %.1f tok/s; "
           "server / demo = %.3f output, %.3f with the prompts\n", rounds, sat.tok_s, sat.all_tok_s, demo,
           sat.tok_s / demo, sat.all_tok_s / demo);
    json_object_set_new(out, "saturation", stats_json(&sat));
    json_object_set_new(out, "demo_tokens_per_s", json_real(isfinite(demo) ? demo : 0));
    json_object_set_new(out, "server_over_demo", json_real(isfinite(demo) ? sat.tok_s / demo : 0));
    json_object_set_new(out, "server_with_prompts_over_demo", json_real(isfinite(demo) ? sat.all_tok_s / demo : 0));

    /* sweep: TPS@TPOT through the server */
    /* tokens per W-word prompt, for the phases that must fit the context */
    r = requests(1, W, 2, 150, false);
    run_request(port, r);
    const double sweep_prompt_tokens = r->prompt_tokens > 0 ? (double)r->prompt_tokens : W;
    free(r);
    ts__demo_point pts[16];
    int np = 0;
    json_t *sweep = json_array();
    for (int c = 1; c <= B && np < 16; c = c < B && 2 * c > B ? B : 2 * c) {
        /* short prompts, as the saturation's: the decode curve, as the demo's */
        r = requests(3 * c, 2, O, 200 + (uint64_t)c, false);
        l = (load){.port = port, .r = r, .n = 3 * c};
        run_closed(&l, c);
        const stats s = summarise(r, 3 * c);
        free(r);
        pts[np++] = (ts__demo_point){.B = c, .p50_ms = 1e3 * s.tpot50, .p99_ms = 1e3 * s.tpot99,
                                     .tps_rank = s.tok_s / (double)a.ranks};
        char what[32];
        snprintf(what, sizeof what, "sweep: %d clients", c);
        print_stats(what, &s);
        json_t *js = stats_json(&s);
        json_object_set_new(js, "clients", json_integer(c));
        json_array_append_new(sweep, js);
        if (c == B) break;
    }
    json_object_set_new(out, "sweep", sweep);
    const double limits[] = {25, 50, 100, 200};
    ts__demo_print_tps_table(stdout, pts, np, limits, 4, (int)a.ranks);
    if (a.plot && ts__demo_write_svg(a.plot, "tilestack serve: tokens/s per rank against TPOT p50", pts, np, limits, 4))
        fprintf(stderr, "tilestack bench serve: --plot %s: %s\n", a.plot, strerror(errno));

    /* prefill interference: B - 1 long replies, alone and with long prompts arriving */
    if (B > 1) {
        stats alone, mixed;
        /* tokens per prompt word, from the sweep's prompts; the long replies and prompts fit
         * the server's context */
        const double tpw = sweep_prompt_tokens / (double)W;
        int64_t long_out = 4 * O, long_words = 8 * W;
        if (long_out > ctx - (int64_t)(2 * tpw) - 2) long_out = ctx - (int64_t)(2 * tpw) - 2;
        if (long_words * tpw > (double)(ctx - 2)) long_words = (int64_t)((double)(ctx - 2) / tpw);
        for (int pass = 0; pass < 2; pass++) {
            r = requests(B - 1, 2, (int)long_out, 300, false);
            l = (load){.port = port, .r = r, .n = B - 1};
            volatile bool stop = false;
            load h = {.port = port, .stop = &stop, .hammer_words = (int)long_words};
            pthread_t ht;
            if (pass) pthread_create(&ht, NULL, hammer, &h);
            run_closed(&l, B - 1);
            stop = true;
            if (pass) pthread_join(ht, NULL);
            (pass ? &mixed : &alone)[0] = summarise(r, B - 1);
            free(r);
        }
        printf("prefill interference: %d replies of %lld tokens; prompts of %lld words arriving\n", B - 1,
               (long long)long_out, (long long)long_words);
        print_stats("running, no prefill", &alone);
        print_stats("running, prompts arriving", &mixed);
        printf("TPOT p50 while prompts are prefilled / without: %.3f\n", mixed.tpot50 / alone.tpot50);
        json_object_set_new(out, "tpot_ratio_while_prefilling", json_real(mixed.tpot50 / alone.tpot50));
    }

    /* Poisson arrivals at three rates */
    if (!a.n_rates) {
        const double sat_rate = sat.req_s > 0 ? sat.req_s : 1;
        a.rates[0] = 0.3 * sat_rate, a.rates[1] = 0.6 * sat_rate, a.rates[2] = 0.9 * sat_rate;
        a.n_rates = 3;
    }
    json_t *pois = json_array();
    for (int k = 0; k < a.n_rates; k++) {
        r = requests((int)a.requests, W, O, 400 + (uint64_t)k, true);
        for (int i = 0; i < (int)a.requests; i++) {
            /* within the context: the prompt's estimated tokens and the reply */
            const int64_t room = ctx - (int64_t)(r[i].prompt_words * sweep_prompt_tokens / W) - 4;
            if (r[i].max_tokens > room) r[i].max_tokens = room < 2 ? 2 : (int)room;
        }
        run_poisson(port, r, (int)a.requests, a.rates[k], 99 + (uint64_t)k);
        const stats s = summarise(r, (int)a.requests);
        free(r);
        char what[48];
        snprintf(what, sizeof what, "poisson %.2f req/s", a.rates[k]);
        print_stats(what, &s);
        json_t *js = stats_json(&s);
        json_object_set_new(js, "rate", json_real(a.rates[k]));
        json_array_append_new(pois, js);
    }
    json_object_set_new(out, "poisson", pois);
    kill(srv, SIGTERM);
    int st = 0;
    waitpid(srv, &st, 0);
    ts__atomic_file af;
    if (a.json && (ts__atomic_open(&af, a.json) != TS_OK || json_dumpf(out, af.f, JSON_INDENT(1)) ||
                   ts__atomic_commit(&af) != TS_OK)) {
        ts__atomic_abort(&af);
        fprintf(stderr, "tilestack bench serve: --json %s: cannot write\n", a.json);
        rc = 1;
    }
    json_decref(out);
    if (!WIFEXITED(st) || WEXITSTATUS(st)) {
        fprintf(stderr, "tilestack bench serve: the server did not exit cleanly\n");
        rc = 1;
    }
    return rc || sat.ok < ns ? 1 : 0;
}
