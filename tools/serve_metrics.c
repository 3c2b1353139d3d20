/* The server's counters and histograms, and /metrics in Prometheus' text exposition format
 * (docs/serve.md, "Metrics"). Updated under the server's mutex. */
#include "serve.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* upper bounds in seconds: 1 ms .. 60 s */
static const double bounds[SERVE_HIST_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                  0.25, 0.5, 1, 2.5, 5, 10, 60};

void serve_hist_add(serve_hist *h, double seconds) {
    int b = 0;
    while (b < SERVE_HIST_BUCKETS && seconds > bounds[b]) b++;
    h->count[b]++;
    h->sum += seconds;
    h->n++;
}

/* requests[] slots */
static const struct { int status; const char *code; } classes[6] = {
    {200, "200"}, {400, "400"}, {401, "401"}, {404, "404"}, {413, "413"}, {503, "503"}};

void serve_metrics_count_status(serve_metrics *m, int http_status) {
    for (int i = 0; i < 6; i++)
        if (classes[i].status == http_status) {
            m->requests[i]++;
            return;
        }
    m->requests[1]++; /* other 4xx (405, 499) and 500 are counted with the client errors */
}

typedef struct buf {
    char *p;
    size_t len, cap;
    bool oom;
} buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        const int n = b->oom ? 0 : vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (b->oom || n < 0) return;
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        char *np = realloc(b->p, b->cap * 2);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap *= 2;
    }
}

static void hist(buf *b, const char *name, const char *help, const serve_hist *h) {
    put(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < SERVE_HIST_BUCKETS; i++) {
        cum += h->count[i];
        put(b, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[i], (unsigned long long)cum);
    }
    cum += h->count[SERVE_HIST_BUCKETS];
    put(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", name,
        (unsigned long long)cum, name, h->sum, name, (unsigned long long)h->n);
}

char *serve_metrics_text(const serve_metrics *m) {
    buf b = {.p = malloc(4096), .cap = 4096};
    if (!b.p) return NULL;
    b.p[0] = 0;
    put(&b, "# HELP tilestack_requests_total HTTP requests answered, by status\n"
            "# TYPE tilestack_requests_total counter\n");
    for (int i = 0; i < 6; i++)
        put(&b, "tilestack_requests_total{status=\"%s\"} %llu\n", classes[i].code,
            (unsigned long long)m->requests[i]);
    put(&b, "# HELP tilestack_requests_cancelled_total requests whose client went away\n"
            "# TYPE tilestack_requests_cancelled_total counter\n"
            "tilestack_requests_cancelled_total %llu\n", (unsigned long long)m->cancelled);
    put(&b, "# HELP tilestack_prompt_tokens_total prompt tokens admitted\n"
            "# TYPE tilestack_prompt_tokens_total counter\ntilestack_prompt_tokens_total %llu\n",
        (unsigned long long)m->prompt_tokens);
    put(&b, "# HELP tilestack_generation_tokens_total completion tokens of finished requests\n"
            "# TYPE tilestack_generation_tokens_total counter\ntilestack_generation_tokens_total %llu\n",
        (unsigned long long)m->completion_tokens);
    put(&b, "# HELP tilestack_decode_steps_total batched decode steps\n"
            "# TYPE tilestack_decode_steps_total counter\ntilestack_decode_steps_total %lld\n",
        (long long)m->steps);
    put(&b, "# HELP tilestack_prefill_chunks_total prompt chunks fed\n"
            "# TYPE tilestack_prefill_chunks_total counter\ntilestack_prefill_chunks_total %lld\n",
        (long long)m->prefill_chunks);
    put(&b, "# HELP tilestack_batch_size requests holding a sequence\n"
            "# TYPE tilestack_batch_size gauge\ntilestack_batch_size %lld\n", (long long)m->running);
    put(&b, "# HELP tilestack_queue_length requests waiting for a sequence\n"
            "# TYPE tilestack_queue_length gauge\ntilestack_queue_length %lld\n", (long long)m->queued);
    put(&b, "# HELP tilestack_kv_cache_tokens tokens held in the caches\n"
            "# TYPE tilestack_kv_cache_tokens gauge\ntilestack_kv_cache_tokens %lld\n"
            "# HELP tilestack_kv_cache_capacity_tokens tokens the caches can hold\n"
            "# TYPE tilestack_kv_cache_capacity_tokens gauge\ntilestack_kv_cache_capacity_tokens %lld\n"
            "# HELP tilestack_kv_cache_usage_ratio tokens held / capacity\n"
            "# TYPE tilestack_kv_cache_usage_ratio gauge\ntilestack_kv_cache_usage_ratio %.6f\n",
        (long long)m->kv_used, (long long)m->kv_capacity,
        m->kv_capacity ? (double)m->kv_used / (double)m->kv_capacity : 0.0);
    put(&b, "# HELP tilestack_kv_cache_pages_used cache pages holding rows\n"
            "# TYPE tilestack_kv_cache_pages_used gauge\ntilestack_kv_cache_pages_used %lld\n"
            "# HELP tilestack_kv_cache_pages_reserved cache pages reserved by running requests\n"
            "# TYPE tilestack_kv_cache_pages_reserved gauge\ntilestack_kv_cache_pages_reserved %lld\n"
            "# HELP tilestack_kv_cache_pages cache pages in the pool\n"
            "# TYPE tilestack_kv_cache_pages gauge\ntilestack_kv_cache_pages %lld\n",
        (long long)m->pages_used, (long long)m->pages_reserved, (long long)m->pages_total);
    hist(&b, "tilestack_time_to_first_token_seconds", "arrival to the first sampled token", &m->ttft);
    hist(&b, "tilestack_time_per_output_token_seconds", "per request: (last token - first) / (tokens - 1)", &m->tpot);
    hist(&b, "tilestack_request_duration_seconds", "arrival to the last token", &m->e2e);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
