/* The HTTP side of `tilestack serve` (docs/serve.md) on libmicrohttpd, one thread per
 * connection (bounded by MHD's connection limit): routes, the API key, body limits, the
 * non-streamed wait and the server-sent-event stream. A connection thread never calls the
 * model: it tokenises, queues (serve_sched.c) and waits on the request, and notices a client
 * that went away (its socket reads EOF) so that the scheduler frees the sequence at its next
 * step. */
#include "serve.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

struct serve_http {
    struct MHD_Daemon *d;
    serve_srv *s;
};

enum route { R_NONE, R_CHAT, R_COMPLETIONS, R_MODELS, R_HEALTH, R_METRICS };

/* One request's state on its connection. */
typedef struct conn {
    serve_srv *s;
    enum route route;
    char *body;
    size_t len, cap;
    bool too_large;
} conn;

/* A streamed response: its own reference on the request, freed by MHD when done. */
typedef struct stream {
    serve_srv *s;
    serve_req *q;
    int fd;
    size_t sent;      /* bytes of q->out already in events (thinking: or held back as the marker's) */
    bool first, final_sent, done_sent;
    char *pending;    /* the event being written, from pend_off */
    size_t pend_len, pend_off;
} stream;

/* Every response closes its connection ("Connection: close"): a connection holds a thread and
 * one of the connection limit's places, and a client's idle keep-alive connection would hold
 * them until the idle timeout (120 s), so that, once the limit is reached, new clients wait
 * that long (seen: openai clients left to the garbage collector). A new loopback connection
 * per request costs nothing beside a decode step. */
static enum MHD_Result respond(struct MHD_Connection *c, serve_srv *s, int status, char *body,
                               const char *type) {
    if (!body) {
        body = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}");
        status = 500;
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(body ? strlen(body) : 0, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "Connection", "close"); /* see above */
    if (status == 503) MHD_add_response_header(r, "Retry-After", "1");
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    const enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    pthread_mutex_lock(&s->mu);
    serve_metrics_count_status(&s->metrics, status);
    pthread_mutex_unlock(&s->mu);
    return ok;
}

static enum MHD_Result respond_error(struct MHD_Connection *c, serve_srv *s, int status,
                                     const char *msg, const char *type, const char *code) {
    return respond(c, s, status, serve_error_body(msg, type, NULL, code), "application/json");
}

/* Whether the client closed its end: a peek that reads EOF (or a reset). */
static bool client_gone(int fd) {
    if (fd < 0) return false;
    char b;
    const ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* The client went away (s->mu held): the scheduler drops the request at its next step. */
static void cancel(serve_srv *s, serve_req *q) {
    if (q->state == REQ_DONE || q->cancelled) return;
    q->cancelled = true;
    pthread_cond_signal(&s->work);
}

static char *failure_body(const serve_req *q) {
    return serve_error_body(q->fail_msg, q->fail_status == 503 ? "service_unavailable" : "server_error",
                            NULL, NULL);
}

/* ---- the stream: one event per step's text, the final chunk, [DONE] ---- */

/* The next deltas of q's text from st->sent (q->mu held): with thinking, the reasoning's
 * [*r, *r + *rn) and the answer's [*c, *c + *cn), the marker between them skipped and a tail that
 * may begin it held back until more text (or the end) comes; *to: st->sent after them. */
static bool next_delta(const serve_req *q, const stream *st, const char **r, size_t *rn,
                       const char **c, size_t *cn, size_t *to) {
    const char *out = q->out;
    *r = *c = NULL;
    *rn = *cn = 0;
    *to = q->out_len;
    if (!q->thinking) {
        *c = out + st->sent;
        *cn = q->out_len - st->sent;
        return *cn > 0;
    }
    gen_think th;
    gen_think_split(out ? out : "", q->out_len, q->state == REQ_DONE, &th);
    if (st->sent < th.reasoning) *r = out + st->sent, *rn = th.reasoning - st->sent;
    const size_t a = st->sent > th.answer ? st->sent : th.answer;
    if (th.found) *c = out + a, *cn = q->out_len - a;
    else *to = th.reasoning;
    return *rn || *cn;
}
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream *st = cls;
    serve_srv *s = st->s;
    serve_req *q = st->q;
    while (st->pend_off == st->pend_len) {
        free(st->pending);
        st->pending = NULL;
        st->pend_len = st->pend_off = 0;
        if (st->done_sent) return MHD_CONTENT_READER_END_OF_STREAM;
        pthread_mutex_lock(&s->mu);
        const char *rt, *ct;
        size_t rn, cn, to;
        while (q->state != REQ_DONE && !next_delta(q, st, &rt, &rn, &ct, &cn, &to) && !st->first) {
            serve_timed_wait(&s->progress, &s->mu, 0.1);
            if (q->state != REQ_DONE && !next_delta(q, st, &rt, &rn, &ct, &cn, &to) && client_gone(st->fd)) {
                cancel(s, q);
                pthread_mutex_unlock(&s->mu);
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
        }
        char *ev = NULL;
        if (next_delta(q, st, &rt, &rn, &ct, &cn, &to) || st->first) {
            ev = serve_stream_chunk(s, q, rt, rn, ct, cn, st->first, false);
            st->sent = to;
            st->first = false;
        } else if (q->fail_status && !st->final_sent) {
            char *body = failure_body(q);
            if (body && (ev = malloc(strlen(body) + 9))) sprintf(ev, "data: %s\n\n", body);
            free(body);
            st->final_sent = true;
        } else if (!st->final_sent) {
            ev = serve_stream_chunk(s, q, NULL, 0, NULL, 0, false, true);
            if (ev && q->include_usage) {
                char *u = serve_stream_usage(s, q);
                char *both = u ? malloc(strlen(ev) + strlen(u) + 1) : NULL;
                if (both) sprintf(both, "%s%s", ev, u);
                free(u);
                free(ev);
                ev = both;
            }
            st->final_sent = true;
        } else {
            ev = strdup("data: [DONE]\n\n");
            st->done_sent = true;
        }
        pthread_mutex_unlock(&s->mu);
        if (!ev) return MHD_CONTENT_READER_END_WITH_ERROR;
        st->pending = ev;
        st->pend_len = strlen(ev);
    }
    size_t n = st->pend_len - st->pend_off;
    if (n > max) n = max;
    memcpy(buf, st->pending + st->pend_off, n);
    st->pend_off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    stream *st = cls;
    pthread_mutex_lock(&st->s->mu);
    cancel(st->s, st->q); /* a no-op once done */
    serve_req_release(st->s, st->q);
    pthread_mutex_unlock(&st->s->mu);
    free(st->pending);
    free(st);
}

/* ---- the completions endpoints ---- */
static enum MHD_Result completions(struct MHD_Connection *c, conn *cn) {
    serve_srv *s = cn->s;
    serve_req *q;
    char *err;
    const int status = serve_req_from_json(s, cn->route == R_CHAT, cn->body ? cn->body : "", cn->len, &q, &err);
    if (status) return respond(c, s, status, err, "application/json");
    pthread_mutex_lock(&s->mu);
    const int qs = serve_enqueue(s, q);
    pthread_mutex_unlock(&s->mu);
    if (qs) {
        serve_req_release(s, q);
        return respond_error(c, s, 503, s->draining ? "the server is shutting down" : s->dead ? "the model failed"
                             : "the server is at capacity: too many requests waiting; retry later",
                             "service_unavailable", NULL);
    }
    const int fd = conn_fd(c);
    if (q->stream) {
        stream *st = calloc(1, sizeof *st);
        struct MHD_Response *r = st ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, st, stream_free) : NULL;
        if (!r) {
            pthread_mutex_lock(&s->mu);
            cancel(s, q);
            serve_req_release(s, q);
            pthread_mutex_unlock(&s->mu);
            free(st);
            return MHD_NO;
        }
        *st = (stream){.s = s, .q = q, .fd = fd, .first = q->chat};
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        MHD_add_response_header(r, "Connection", "close");
        const enum MHD_Result ok = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        pthread_mutex_lock(&s->mu);
        serve_metrics_count_status(&s->metrics, 200);
        pthread_mutex_unlock(&s->mu);
        return ok;
    }
    pthread_mutex_lock(&s->mu);
    while (q->state != REQ_DONE) {
        serve_timed_wait(&s->progress, &s->mu, 0.1);
        if (q->state != REQ_DONE && client_gone(fd)) {
            cancel(s, q);
            serve_req_release(s, q);
            pthread_mutex_unlock(&s->mu);
            return MHD_NO; /* nobody to answer */
        }
    }
    pthread_mutex_unlock(&s->mu);
    const int fs = q->fail_status;
    char *body = fs ? failure_body(q) : serve_response_json(s, q);
    pthread_mutex_lock(&s->mu);
    serve_req_release(s, q);
    pthread_mutex_unlock(&s->mu);
    return respond(c, s, fs ? fs : 200, body, "application/json");
}

static bool key_ok(struct MHD_Connection *c, const char *key) {
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7)) return false;
    h += 7;
    const size_t n = strlen(key), m = strlen(h);
    unsigned char diff = (unsigned char)(n != m);
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)(key[i] ^ (i < m ? h[i] : 0));
    return !diff; /* compared in time independent of where they differ */
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    serve_srv *s = cls;
    conn *cn = *con_cls;
    if (!cn) {
        /* the headers: route, method, key and declared length before any body is read */
        if (!(cn = calloc(1, sizeof *cn))) return MHD_NO;
        cn->s = s;
        *con_cls = cn;
        pthread_mutex_lock(&s->mu);
        s->open_requests++;
        pthread_mutex_unlock(&s->mu);
        const bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
        struct { const char *path; enum route r; bool post; } routes[] = {
            {"/v1/chat/completions", R_CHAT, true}, {"/v1/completions", R_COMPLETIONS, true},
            {"/v1/models", R_MODELS, false}, {"/health", R_HEALTH, false}, {"/metrics", R_METRICS, false}};
        for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
            if (strcmp(url, routes[i].path)) continue;
            if (routes[i].post ? !post : !get) {
                char msg[96];
                snprintf(msg, sizeof msg, "%s takes %s", routes[i].path, routes[i].post ? "POST" : "GET");
                return respond_error(c, s, 405, msg, "invalid_request_error", "method_not_allowed");
            }
            cn->route = routes[i].r;
        }
        if (cn->route == R_NONE)
            return respond_error(c, s, 404, "no such endpoint (see GET /v1/models)", "not_found_error", "not_found");
        if (s->a->api_key && (cn->route == R_CHAT || cn->route == R_COMPLETIONS || cn->route == R_MODELS) &&
            !key_ok(c, s->a->api_key))
            return respond_error(c, s, 401, "invalid or missing API key (Authorization: Bearer KEY)",
                                 "invalid_request_error", "invalid_api_key");
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > (unsigned long long)s->a->max_body) {
            char msg[128];
            snprintf(msg, sizeof msg, "the body is larger than this server's limit of %lld bytes", (long long)s->a->max_body);
            return respond_error(c, s, 413, msg, "invalid_request_error", "request_too_large");
        }
        return MHD_YES;
    }
    if (*upload_size) {
        /* a body without (or with a false) Content-Length: counted as it comes */
        if (!cn->too_large && cn->len + *upload_size > (size_t)s->a->max_body) cn->too_large = true;
        if (!cn->too_large) {
            if (cn->len + *upload_size + 1 > cn->cap) {
                size_t cap = cn->cap ? cn->cap * 2 : 4096;
                while (cap < cn->len + *upload_size + 1) cap *= 2;
                char *p = realloc(cn->body, cap);
                if (!p) return MHD_NO;
                cn->body = p;
                cn->cap = cap;
            }
            memcpy(cn->body + cn->len, upload, *upload_size);
            cn->len += *upload_size;
            cn->body[cn->len] = 0;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (cn->too_large) {
        char msg[128];
        snprintf(msg, sizeof msg, "the body is larger than this server's limit of %lld bytes", (long long)s->a->max_body);
        return respond_error(c, s, 413, msg, "invalid_request_error", "request_too_large");
    }
    switch (cn->route) {
    case R_HEALTH: {
        pthread_mutex_lock(&s->mu);
        const bool ok = !s->draining && !s->dead;
        pthread_mutex_unlock(&s->mu);
        return respond(c, s, ok ? 200 : 503, strdup(ok ? "{\"status\":\"ok\"}" : "{\"status\":\"unavailable\"}"),
                       "application/json");
    }
    case R_METRICS: {
        pthread_mutex_lock(&s->mu);
        char *t = serve_metrics_text(&s->metrics);
        pthread_mutex_unlock(&s->mu);
        return respond(c, s, 200, t, "text/plain; version=0.0.4");
    }
    case R_MODELS: return respond(c, s, 200, serve_models_json(s), "application/json");
    default: return completions(c, cn);
    }
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)c, (void)toe;
    serve_srv *s = cls;
    conn *cn = *con_cls;
    if (!cn) return;
    free(cn->body);
    free(cn);
    *con_cls = NULL;
    pthread_mutex_lock(&s->mu);
    s->open_requests--;
    pthread_cond_broadcast(&s->progress);
    pthread_mutex_unlock(&s->mu);
}

int serve_http_start(serve_srv *s, serve_http **out, int *port) {
    *out = NULL;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *ai = NULL;
    char pstr[16];
    snprintf(pstr, sizeof pstr, "%d", s->a->port);
    const int gai = getaddrinfo(s->a->host, pstr, &hints, &ai);
    if (gai || !ai) {
        fprintf(stderr, "tilestack serve: --host '%s': %s\n", s->a->host, gai ? gai_strerror(gai) : "no address");
        return 2;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    const unsigned limit = (unsigned)(s->a->max_batch + s->a->max_queue + 32);
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)s->a->port, NULL, NULL, handler, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_CONNECTION_LIMIT, limit, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120,
        MHD_OPTION_NOTIFY_COMPLETED, completed, s, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!d) {
        fprintf(stderr, "tilestack serve: cannot listen on %s:%d: %s\n", s->a->host, s->a->port,
                strerror(errno ? errno : EADDRINUSE));
        return 1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    *port = di ? (int)di->port : s->a->port;
    serve_http *h = calloc(1, sizeof *h);
    if (!h) {
        MHD_stop_daemon(d);
        return 1;
    }
    h->d = d;
    h->s = s;
    *out = h;
    return 0;
}

void serve_http_stop(serve_http *h, double seconds) {
    if (!h) return;
    /* the responses of finished requests may still be on their way to slow readers */
    serve_srv *s = h->s;
    const double t0 = serve_now_s();
    pthread_mutex_lock(&s->mu);
    while (s->open_requests > 0 && serve_now_s() - t0 <= seconds) serve_timed_wait(&s->progress, &s->mu, 0.1);
    pthread_mutex_unlock(&s->mu);
    MHD_stop_daemon(h->d);
    free(h);
}
