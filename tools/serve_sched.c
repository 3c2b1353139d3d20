/* The server's scheduler (docs/serve.md, "Continuous batching"): on the main thread, the only
 * one that calls the model. Each step:
 *   1. admission: queued requests take free sequences (max_batch of them), first come first
 *      served; requests whose client went away are dropped, their sequence reset;
 *   2. one prefill chunk (at most prefill_chunk prompt tokens) of the oldest request still
 *      feeding its prompt, so a long prompt never stalls the running requests for more than a
 *      chunk, and only while the prefill budget allows (chunks take at most prefill_share of
 *      the time while requests decode); its last chunk gives the first token's logits;
 *   3. one decode step over every request past its prompt, in one ts_model_decode, with the
 *      last few tokens of prompts (SERVE_FEED_TOKENS) riding along as rows while others decode;
 *   4. each request samples its next token from its own row (gen_reply: its own seed, stops
 *      and bounds), and the text is handed to its HTTP thread.
 * ts_model_prefill is bit for bit a run of single-token decodes, and a row of ts_model_decode
 * does not depend on the other rows, so a request's reply is what `tilestack generate` gives
 * for its prompt and seed, whatever else is running (tested: tests/serve/). Over --ranks R,
 * the sequences are spread over the ranks and each model call goes through gen_model's spread
 * hooks (ranks_gen.c). */
#include "serve.h"

#include "core/internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* prompt tokens short enough to ride in the decode batch rather than a prefill chunk */
#define SERVE_FEED_TOKENS 8

double serve_now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void serve_timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, double seconds) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    const long ns = (long)(seconds * 1e9);
    t.tv_sec += ns / 1000000000L;
    t.tv_nsec += ns % 1000000000L;
    if (t.tv_nsec >= 1000000000L) t.tv_sec++, t.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(cv, mu, &t);
}

int serve_enqueue(serve_srv *s, serve_req *q) {
    if (s->draining || s->dead) return 503;
    int64_t free_slots = 0;
    for (int64_t i = 0; i < s->a->max_batch; i++) free_slots += !s->slots[i];
    if (s->n_queued >= s->a->max_queue + free_slots) return 503;
    q->refs++;
    q->state = REQ_QUEUED;
    q->t_arrive = serve_now_s();
    q->next = NULL;
    if (s->queue_tail) s->queue_tail->next = q;
    else s->queue_head = q;
    s->queue_tail = q;
    s->n_queued++;
    s->metrics.queued = s->n_queued;
    pthread_cond_signal(&s->work);
    return 0;
}

/* The reply's text into the request's buffer (gen_reply's emit, on the main thread). */
static void emit_to_request(void *ctx, const char *text, size_t n) {
    serve_req *q = ctx;
    pthread_mutex_lock(&q->srv->mu);
    if (q->out_len + n + 1 > q->out_cap) {
        size_t c = q->out_cap ? q->out_cap * 2 : 256;
        while (c < q->out_len + n + 1) c *= 2;
        char *p = realloc(q->out, c);
        if (!p) {
            q->fail_status = 500;
            snprintf(q->fail_msg, sizeof q->fail_msg, "out of memory holding the reply");
            pthread_mutex_unlock(&q->srv->mu);
            return;
        }
        q->out = p;
        q->out_cap = c;
    }
    memcpy(q->out + q->out_len, text, n);
    q->out_len += n;
    q->out[q->out_len] = 0;
    pthread_mutex_unlock(&q->srv->mu);
}

/* The request is over (s->mu held): its sequence reset and freed, its HTTP thread told, the
 * scheduler's reference dropped. status 0: finished (q->r.finish); else failed with msg. */
static void finish(serve_srv *s, serve_req *q, int status, const char *msg) {
    if (q->seq >= 0) {
        s->pages_reserved[q->seq % s->spread] -= q->pages;
        s->slots[q->seq] = NULL;
        /* not a collective: the owner alone resets (rank 0, or told to) */
        if (s->gm->spread_reset) s->gm->spread_reset(s->gm->announce_ctx, q->seq);
        else ts_model_reset_sequence(s->gm->m, q->seq);
        q->seq = -1;
    }
    q->pages = 0;
    const double t = serve_now_s();
    if (!status && q->fail_status) status = q->fail_status, msg = q->fail_msg;
    if (status) {
        if (!q->fail_status) q->fail_status = status;
        if (msg != q->fail_msg) snprintf(q->fail_msg, sizeof q->fail_msg, "%s", msg);
    } else {
        q->finish = q->r.finish;
        s->metrics.completion_tokens += q->n_completion;
        if (q->n_completion > 1) serve_hist_add(&s->metrics.tpot, (q->t_last - q->t_first) / (double)(q->n_completion - 1));
        serve_hist_add(&s->metrics.e2e, t - q->t_arrive);
    }
    if (q->cancelled && !status) s->metrics.cancelled++;
    q->t_done = t;
    q->state = REQ_DONE;
    pthread_cond_broadcast(&s->progress);
    serve_req_release(s, q);
}

/* Samples request q's next token from its row of logits, outside s->mu. Returns false when
 * the request is over (finished or failed), then with *status / msg set. */
static bool take(serve_req *q, float *row, int *status, char *msg, size_t cap) {
    int32_t tok;
    ts_status st = gen_reply_take(&q->rp, row, &q->rng, q->cached, &tok);
    const double t = serve_now_s();
    if (st == TS_OK) {
        q->n_completion++;
        if (q->n_completion == 1) q->t_first = t;
        q->t_last = t;
        q->next_tok = tok;
        if (!q->r.finish) return true;
    }
    st = gen_reply_end(&q->rp, st);
    *status = st == TS_OK ? 0 : 500;
    if (st != TS_OK) snprintf(msg, cap, "%s", ts_last_error());
    return false;
}

/* The prompt is in the cache: the first token from its logits; the request decodes on, or
 * is over. */
static void first_token(serve_srv *s, serve_req *q, float *row) {
    int status = 0;
    char msg[256] = "";
    const bool go_on = take(q, row, &status, msg, sizeof msg);
    pthread_mutex_lock(&s->mu);
    if (q->n_completion) serve_hist_add(&s->metrics.ttft, q->t_first - q->t_arrive);
    if (go_on) q->state = REQ_DECODE;
    else finish(s, q, status, msg);
    pthread_cond_broadcast(&s->progress);
    pthread_mutex_unlock(&s->mu);
}

/* The cache pages request q can fill: its prompt and every completion token. */
static int64_t pages_for(const serve_srv *s, const serve_req *q) {
    int64_t t = (int64_t)q->n_prompt + q->o.max_new;
    if (t > s->max_context) t = s->max_context;
    return (t + s->page_tokens - 1) / s->page_tokens;
}

/* Queued requests into free sequences while the pool has their pages, first come first served
 * (s->mu held); the cancelled ones are dropped. */
static void admit(serve_srv *s, uint64_t *order) {
    while (s->queue_head) {
        serve_req *q = s->queue_head;
        /* a free sequence on a rank whose pool has the request's pages */
        const int64_t need = pages_for(s, q);
        int64_t slot = -1;
        for (int64_t i = 0; i < s->a->max_batch && slot < 0; i++)
            if (!s->slots[i] && s->pages_reserved[i % s->spread] + need <= s->pages_total) slot = i;
        if (slot < 0 && !q->cancelled) return;
        s->queue_head = q->next;
        if (!s->queue_head) s->queue_tail = NULL;
        s->n_queued--;
        if (q->cancelled) {
            s->metrics.cancelled++;
            finish(s, q, 499, "the client closed the connection");
            continue;
        }
        s->slots[slot] = q;
        q->seq = slot;
        q->pages = need;
        s->pages_reserved[slot % s->spread] += need;
        q->state = REQ_PREFILL;
        q->order = (*order)++;
        q->rng = q->seed;
        q->o.emit = emit_to_request;
        q->o.emit_ctx = q;
        s->metrics.prompt_tokens += q->n_prompt;
        if (gen_reply_begin(&q->rp, s->gm, &q->o, q->prompt, q->n_prompt, &q->r) != TS_OK) {
            gen_reply_end(&q->rp, TS_ERR_OUT_OF_MEMORY);
            finish(s, q, 500, "out of memory starting the reply");
        }
    }
}

/* Fails every request, queued or running (s->mu held). */
static void fail_all(serve_srv *s, int status, const char *msg) {
    for (int64_t i = 0; i < s->a->max_batch; i++) {
        serve_req *q = s->slots[i];
        if (!q) continue;
        gen_reply_end(&q->rp, TS_ERR_INVALID_ARGUMENT); /* frees its state */
        finish(s, q, status, msg);
    }
    while (s->queue_head) {
        serve_req *q = s->queue_head;
        s->queue_head = q->next;
        s->n_queued--;
        finish(s, q, status, msg);
    }
    s->queue_tail = NULL;
}

static void update_gauges(serve_srv *s) {
    int64_t running = 0, kv = 0, used = 0, reserved = 0;
    for (int64_t i = 0; i < s->a->max_batch; i++)
        if (s->slots[i]) {
            running++, kv += s->slots[i]->cached;
            used += (s->slots[i]->cached + s->page_tokens - 1) / s->page_tokens;
        }
    for (int r = 0; r < s->spread; r++) reserved += s->pages_reserved[r];
    s->metrics.running = running;
    s->metrics.queued = s->n_queued;
    s->metrics.kv_used = kv;
    /* the model's own count where it holds every sequence (the pages a step took), else the
     * pages of the positions each owner holds */
    ts_model_kv_pages p;
    if (s->spread == 1 && ts_model_get_kv_pages(s->gm->m, &p) == TS_OK) used = p.pages_total - p.pages_free;
    s->metrics.pages_used = used;
    s->metrics.pages_reserved = reserved;
    s->metrics.pages_total = s->pages_total * s->spread;
}

/* The model call failed: over ranks a lost or failing peer; every request fails with 503. */
static int model_failed(serve_srv *s, const char *what) {
    char msg[256];
    snprintf(msg, sizeof msg, "the model failed (%s): %s", what, ts_last_error());
    fprintf(stderr, "tilestack serve: %s\n", msg);
    pthread_mutex_lock(&s->mu);
    s->dead = true;
    fail_all(s, 503, msg);
    pthread_mutex_unlock(&s->mu);
    return 1;
}

int serve_run(serve_srv *s, volatile sig_atomic_t *stop) {
    const int64_t B = s->a->max_batch, V = s->vocab;
    float *logits = malloc((size_t)B * (size_t)V * sizeof *logits);
    int64_t *seqs = malloc((size_t)B * sizeof *seqs);
    int32_t *toks = malloc((size_t)B * sizeof *toks);
    serve_req **rows = malloc((size_t)B * sizeof *rows);
    if (!logits || !seqs || !toks || !rows) {
        fprintf(stderr, "tilestack serve: out of memory for a batch of %lld rows\n", (long long)B);
        free(logits), free(seqs), free(toks), free(rows);
        return 1;
    }
    gen_model *gm = s->gm;
    uint64_t order = 0;
    double deadline = 0, credit = 0;
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (*stop && !s->draining) {
            /* finish what runs, refuse what waits */
            s->draining = true;
            deadline = serve_now_s() + s->a->drain_s;
            serve_req *q = s->queue_head;
            s->queue_head = s->queue_tail = NULL;
            s->n_queued = 0;
            while (q) {
                serve_req *n = q->next;
                finish(s, q, 503, "the server is shutting down");
                q = n;
            }
        }
        if (s->draining && serve_now_s() > deadline) fail_all(s, 503, "the server is shutting down (drain timeout)");
        admit(s, &order);
        /* requests whose client went away free their sequence now */
        for (int64_t i = 0; i < B; i++) {
            serve_req *q = s->slots[i];
            if (q && q->cancelled) {
                gen_reply_end(&q->rp, TS_ERR_INVALID_ARGUMENT);
                s->metrics.cancelled++;
                finish(s, q, 499, "the client closed the connection");
            }
        }
        update_gauges(s);
        serve_req *pf = NULL;
        int64_t n = 0, n_feed = 0;
        for (int64_t i = 0; i < B; i++)
            if (s->slots[i] && s->slots[i]->state == REQ_DECODE) rows[n++] = s->slots[i];
        /* while requests decode, a prompt's last SERVE_FEED_TOKENS tokens ride in the decode
         * batch, one per step (the same bits as a prefill: ts_model_prefill is a run of
         * single-token decodes), so short prompts never wait for the prefill budget */
        const bool decoding = n > 0;
        for (int64_t i = 0; i < B; i++) {
            serve_req *q = s->slots[i];
            if (!q || q->state != REQ_PREFILL) continue;
            if (decoding && q->n_prompt - q->fed <= SERVE_FEED_TOKENS) {
                if (credit >= 0) rows[n++] = q, n_feed++;
            } else if (!pf || q->order < pf->order) pf = q;
        }
        if (!pf && !n) {
            if (s->draining && !s->queue_head) break;
            serve_timed_wait(&s->work, &s->mu, 0.25);
            continue;
        }
        pthread_mutex_unlock(&s->mu);

        /* prefill budget: while requests decode, prompt chunks take at most prefill_share of
         * the time (a token bucket filled by decode steps), so running requests' TPOT rises
         * by at most 1 / (1 - share); with nothing decoding, prompts run back to back */
        if (!decoding) credit = 0;
        else if (credit < 0) pf = NULL;
        int status = 0;
        char msg[256] = "";
        if (pf) {
            const double tc = serve_now_s();
            /* one chunk of the oldest prompt; the last gives its first token's logits */
            const int64_t left = (int64_t)(pf->n_prompt - pf->fed);
            const int64_t c = left < s->a->prefill_chunk ? left : s->a->prefill_chunk;
            float *last = c == left ? logits : NULL;
            /* over ranks the serve ranks always spread the sequences (serve_options.c) */
            const ts_status st = gm->spread_prefill
                ? gm->spread_prefill(gm->announce_ctx, pf->seq, c, pf->prompt + pf->fed, last)
                : ts_model_prefill(gm->m, pf->seq, c, pf->prompt + pf->fed, last);
            if (st != TS_OK) {
                rc = model_failed(s, "prefill");
                break;
            }
            pf->fed += (size_t)c;
            pf->cached = (int64_t)pf->fed;
            s->metrics.prefill_chunks++;
            if (decoding) credit -= serve_now_s() - tc;
            if (c == left) first_token(s, pf, logits);
        }
        if (n) {
            for (int64_t i = 0; i < n; i++) {
                serve_req *q = rows[i];
                seqs[i] = q->seq;
                toks[i] = q->state == REQ_PREFILL ? q->prompt[q->fed] : q->next_tok;
            }
            const double td = serve_now_s();
            const ts_status st = gm->spread_decode ? gm->spread_decode(gm->announce_ctx, n, seqs, toks, logits)
                                                   : ts_model_decode(gm->m, n, seqs, toks, logits);
            if (st != TS_OK) {
                rc = model_failed(s, "decode");
                break;
            }
            /* the budget pays for the fed prompt rows' share of the step too */
            const double share = s->a->prefill_share, step = serve_now_s() - td;
            const double feed = step * (double)n_feed / (double)n;
            credit += share < 1 ? (step - feed) * share / (1 - share) - feed : INFINITY;
            if (credit > step) credit = step; /* no burst after a quiet spell */
            s->metrics.steps++;
            for (int64_t i = 0; i < n; i++) {
                serve_req *q = rows[i];
                q->cached++;
                if (q->state == REQ_PREFILL) {
                    /* a prompt token fed: its logits matter only after the last one */
                    if (++q->fed == q->n_prompt) first_token(s, q, logits + (size_t)i * (size_t)V);
                    continue;
                }
                const bool go_on = take(q, logits + (size_t)i * (size_t)V, &status, msg, sizeof msg);
                if (go_on) continue;
                pthread_mutex_lock(&s->mu);
                finish(s, q, status, msg);
                pthread_mutex_unlock(&s->mu);
            }
        }
        pthread_mutex_lock(&s->mu);
        pthread_cond_broadcast(&s->progress);
    }
    if (!rc) pthread_mutex_unlock(&s->mu);
    free(logits), free(seqs), free(toks), free(rows);
    return rc;
}
