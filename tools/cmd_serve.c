/* `tilestack serve`: the model (in-process, or over --ranks R expert-parallel processes, rank
 * 0 serving), the HTTP server, the scheduler's loop until SIGTERM / SIGINT (docs/serve.md). */
#include "cli.h"
#include "serve.h"

#include "core/atomic_file.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile sig_atomic_t g_stop;

static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
}

static int write_port_file(const char *path, int port) {
    ts__atomic_file af;
    if (ts__atomic_open(&af, path) != TS_OK) return 1;
    fprintf(af.f, "%d\n", port);
    return ts__atomic_commit(&af) == TS_OK ? 0 : 1;
}

/* The id /v1/models lists: --model-id, else DIR's last component, else the model's name. */
static void model_id(const serve_args *a, const ts_model_config *cfg, char *out, size_t cap) {
    if (a->model_id) {
        snprintf(out, cap, "%s", a->model_id);
        return;
    }
    const char *m = a->g.model ? a->g.model : a->g.config ? a->g.config : a->g.weights;
    size_t n = strlen(m);
    while (n > 1 && m[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && m[b - 1] != '/') b--;
    if (n > b && (a->g.model || a->g.config)) snprintf(out, cap, "%.*s", (int)(n - b), m + b);
    else snprintf(out, cap, "%s", cfg->name);
}

/* The page pool: --kv-cache-tokens on rank 0's model (the only one holding rows); a request
 * longer than the pool can never run, so the context is bounded by it too. */
static int setup_pages(const serve_args *a, gen_model *gm, serve_srv *s) {
    ts_model_kv_pages p;
    if (ts_model_get_kv_pages(gm->m, &p) != TS_OK) return 1;
    s->spread = gm->spread > 1 ? gm->spread : 1;
    s->pages_reserved = calloc((size_t)s->spread, sizeof *s->pages_reserved);
    if (!s->pages_reserved) return fprintf(stderr, "tilestack serve: out of memory\n"), 1;
    if (a->kv_tokens && !p.paged) {
        fprintf(stderr, "tilestack serve: --kv-cache-tokens: this model's caches are not paged "
                "(V3 / V3.2 attention: one context per sequence)\n");
        return 2;
    }
    /* spread over ranks, every rank made its own pool (ranks_gen.c) */
    if (a->kv_tokens && s->spread == 1) {
        const int64_t pages = (a->kv_tokens + p.page_tokens - 1) / p.page_tokens;
        if (ts_model_set_kv_pages(gm->m, 0, pages) != TS_OK || ts_model_get_kv_pages(gm->m, &p) != TS_OK) {
            fprintf(stderr, "tilestack serve: --kv-cache-tokens %lld: %s\n", (long long)a->kv_tokens,
                    ts_last_error());
            return 1;
        }
    }
    s->page_tokens = p.page_tokens;
    s->pages_total = p.pages_total;
    s->metrics.pages_total = p.pages_total * s->spread;
    s->metrics.kv_capacity = p.pages_total * p.page_tokens * s->spread;
    /* a request lives on one rank: its pool bounds the context */
    if (s->max_context > p.pages_total * p.page_tokens) s->max_context = p.pages_total * p.page_tokens;
    if (s->max_context < 2) {
        fprintf(stderr, "tilestack serve: --kv-cache-tokens %lld: room for %lld tokens, a request "
                "needs 2 at least\n", (long long)a->kv_tokens, (long long)s->max_context);
        return 2;
    }
    return 0;
}

int ts__cmd_serve(int argc, char **argv) {
    const bool is_rank = gen_ranks_take_token(&argc, argv);
    serve_args a;
    int rc = serve_parse_args(argc, argv, &a);
    if (rc) return rc == 1 ? 0 : rc;
    /* SIGTERM / SIGINT, or SIGUSR1 as the --ranks launcher forwards them through mpirun:
     * rank 0 drains, the others wait for its end */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    gen_model gm;
    gen_ranks rk;
    if ((rc = gen_ranks_open("serve", &a.g, is_rank, argc, argv, &rk, &gm)) || rk.done) return rc;

    serve_srv s;
    memset(&s, 0, sizeof s);
    s.a = &a;
    s.gm = &gm;
    s.vocab = gm.cfg->vocab_size;
    s.max_context = a.max_context ? a.max_context : gm.cfg->max_seq_len;
    s.created = (int64_t)time(NULL);
    s.chat_format = !strncmp(gm.cfg->name, "deepseek_v3", 11) ? TS_CHAT_DEEPSEEK_V3 : TS_CHAT_DEEPSEEK_V4;
    model_id(&a, gm.cfg, s.model_id, sizeof s.model_id);
    if (s.max_context > gm.cfg->max_seq_len) {
        fprintf(stderr, "tilestack serve: --max-context %lld: the model holds %lld tokens per sequence\n",
                (long long)s.max_context, (long long)gm.cfg->max_seq_len);
        return gen_ranks_close(&rk, &gm, 2);
    }
    if ((rc = setup_pages(&a, &gm, &s))) {
        free(s.pages_reserved);
        return gen_ranks_close(&rk, &gm, rc);
    }
    s.slots = calloc((size_t)a.max_batch, sizeof *s.slots);
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.work, NULL);
    pthread_cond_init(&s.progress, NULL);
    serve_http *h = NULL;
    int port = 0;
    if (!s.slots) rc = 1, fprintf(stderr, "tilestack serve: out of memory\n");
    if (!rc) rc = serve_http_start(&s, &h, &port);
    if (!rc && a.port_file && write_port_file(a.port_file, port)) {
        fprintf(stderr, "tilestack serve: --port-file %s: %s\n", a.port_file, ts_last_error());
        rc = 1;
    }
    if (!rc) {
        fprintf(stderr, "tilestack serve: %s on http://%s:%d (batch %lld over %d rank%s, context %lld, "
                "KV cache %lld pages of %lld tokens per rank, %s)\n",
                s.model_id, a.host, port, (long long)a.max_batch, s.spread, s.spread > 1 ? "s" : "",
                (long long)s.max_context, (long long)s.pages_total, (long long)s.page_tokens,
                a.api_key ? "API key required" : "no API key");
        rc = serve_run(&s, &g_stop);
        fprintf(stderr, "tilestack serve: %s\n", rc ? "stopped: the model failed" : "stopped");
    }
    serve_http_stop(h, a.drain_s); /* every request is done: their responses are sent */
    /* a lost rank cannot take part in the model's collective free: end the job */
    if (rc == 1 && s.dead) gen_ranks_abort(&rk, "a rank failed: the server stopped");
    pthread_cond_destroy(&s.progress);
    pthread_cond_destroy(&s.work);
    pthread_mutex_destroy(&s.mu);
    free(s.slots);
    free(s.pages_reserved);
    return gen_ranks_close(&rk, &gm, rc);
}
