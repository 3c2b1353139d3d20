/* Async normal-mode calls (upstream's async_finish: the op runs on its own stream while the
 * caller computes). Here a worker thread owned by the buffer runs the ordinary synchronous
 * call; start hands it a copy of the arguments, ts_ep_event_wait joins it and returns the
 * call's status (and message). The results are the synchronous call's, bit for bit. */
#include "ep/ep_internal.h"

#include <pthread.h>
#include <string.h>

enum { IDLE = 0, QUEUED = 1, DONE = 2, QUIT = 3 };
enum { OP_DISPATCH = 1, OP_COMBINE = 2 };

typedef struct ts__ep_async {
    ts_ep_buffer *buf;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic int state;
    int op;
    /* dispatch */
    ts_ep_dispatch_args da;
    ts_tensor dt[8];
    ts_ep_config cfg;
    ts_ep_dispatch_result *result;
    ts_ep_handle **handle_out;
    /* combine */
    const ts_ep_handle *ch;
    ts_tensor ct[7];
    const ts_tensor *cp[7]; /* x, topk_weights, bias0, bias1, combined_x, combined_topk_weights (NULL-able) */
    const ts_ep_config *ccfg;
    ts_status st;
    char msg[512];
} ts__ep_async;

/* The event is the buffer's worker record itself: one async call in flight per buffer. */
struct ts_ep_event {
    ts__ep_async a;
};

static void *worker(void *vp) {
    ts__ep_async *a = vp;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (atomic_load(&a->state) != QUEUED && atomic_load(&a->state) != QUIT) pthread_cond_wait(&a->cv, &a->mu);
        if (atomic_load(&a->state) == QUIT) break;
        pthread_mutex_unlock(&a->mu);
        ts_status st;
        if (a->op == OP_DISPATCH)
            st = ts_ep_dispatch(a->buf, &a->da, a->result, a->handle_out);
        else
            st = ts_ep_combine(a->buf, a->ch, a->cp[0], a->cp[1], a->cp[2], a->cp[3], a->ccfg, (ts_tensor *)a->cp[4],
                               (ts_tensor *)a->cp[5]);
        pthread_mutex_lock(&a->mu);
        a->st = st;
        snprintf(a->msg, sizeof a->msg, "%s", st == TS_OK ? "" : ts_last_error());
        atomic_store(&a->state, DONE);
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

static _Thread_local bool tls_in_worker;

static void *worker_entry(void *vp) {
    tls_in_worker = true;
    return worker(vp);
}

bool ts__ep_async_busy(const ts_ep_buffer *b) {
    return b->async && !tls_in_worker && atomic_load(&b->async->state) != IDLE;
}

void ts__ep_async_stop(ts_ep_buffer *b) {
    ts__ep_async *a = b->async;
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    while (atomic_load(&a->state) == QUEUED) pthread_cond_wait(&a->cv, &a->mu);
    atomic_store(&a->state, QUIT);
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->th, NULL);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    free(a);
    b->async = NULL;
}

/* The worker calls MPI on the buffer's communicator when ranks sit on several nodes: that
 * needs MPI_THREAD_SERIALIZED (and no MPI call by the caller until the wait). Below that
 * level the call runs inside start (the event is complete at once). */
static bool can_run_async(const ts_ep_buffer *b) {
    if (b->num_nodes <= 1) return true;
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    return provided >= MPI_THREAD_SERIALIZED;
}

static ts_status prepare(ts_ep_buffer *b, ts_ep_event **event, const char *what) {
    TS__RETURN_IF_ERROR(ts__ep_check_usable(b, what));
    if (!event) return ts__fail(TS_ERR_NULL_POINTER, "%s: event is NULL", what);
    if (b->async) return TS_OK;
    ts__ep_async *a = calloc(1, sizeof(struct ts_ep_event));
    if (!a) return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: no memory for the async worker", what);
    a->buf = b;
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    if (pthread_create(&a->th, NULL, worker_entry, a) != 0) {
        pthread_cond_destroy(&a->cv);
        pthread_mutex_destroy(&a->mu);
        free(a);
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: cannot start the async worker thread", what);
    }
    b->async = a;
    return TS_OK;
}

static const ts_tensor *keep(ts_tensor *slot, const ts_tensor *t) {
    if (!t) return NULL;
    *slot = *t;
    return slot;
}

static ts_status launch(ts_ep_buffer *b, ts_ep_event **event) {
    ts__ep_async *a = b->async;
    *event = (ts_ep_event *)(void *)a;
    if (!can_run_async(b)) {
        /* run here; the worker only reports */
        tls_in_worker = true;
        ts_status st = a->op == OP_DISPATCH
                           ? ts_ep_dispatch(b, &a->da, a->result, a->handle_out)
                           : ts_ep_combine(b, a->ch, a->cp[0], a->cp[1], a->cp[2], a->cp[3], a->ccfg,
                                           (ts_tensor *)a->cp[4], (ts_tensor *)a->cp[5]);
        tls_in_worker = false;
        a->st = st;
        snprintf(a->msg, sizeof a->msg, "%s", st == TS_OK ? "" : ts_last_error());
        atomic_store(&a->state, DONE);
        return TS_OK;
    }
    pthread_mutex_lock(&a->mu);
    atomic_store(&a->state, QUEUED);
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    return TS_OK;
}

ts_status ts_ep_dispatch_start(ts_ep_buffer *buf, const ts_ep_dispatch_args *args, ts_ep_dispatch_result *result,
                               ts_ep_handle **handle_out, ts_ep_event **event) {
    static const char *what = "ts_ep_dispatch_start";
    TS__RETURN_IF_ERROR(prepare(buf, event, what));
    if (!args) return ts__fail(TS_ERR_NULL_POINTER, "%s: args is NULL", what);
    if (!result) return ts__fail(TS_ERR_NULL_POINTER, "%s: result is NULL", what);
    ts__ep_async *a = buf->async;
    a->op = OP_DISPATCH;
    a->da = *args;
    a->da.x = keep(&a->dt[0], args->x);
    a->da.x_scales = keep(&a->dt[1], args->x_scales);
    a->da.topk_idx = keep(&a->dt[2], args->topk_idx);
    a->da.topk_weights = keep(&a->dt[3], args->topk_weights);
    a->da.num_tokens_per_rank = keep(&a->dt[4], args->num_tokens_per_rank);
    a->da.num_tokens_per_rdma_rank = keep(&a->dt[5], args->num_tokens_per_rdma_rank);
    a->da.num_tokens_per_expert = keep(&a->dt[6], args->num_tokens_per_expert);
    a->da.is_token_in_rank = keep(&a->dt[7], args->is_token_in_rank);
    if (args->config) {
        a->cfg = *args->config;
        a->da.config = &a->cfg;
    }
    a->result = result;
    a->handle_out = handle_out;
    return launch(buf, event);
}

ts_status ts_ep_combine_start(ts_ep_buffer *buf, const ts_ep_handle *handle, const ts_tensor *x,
                              const ts_tensor *topk_weights, const ts_tensor *bias0, const ts_tensor *bias1,
                              const ts_ep_config *config, ts_tensor *combined_x, ts_tensor *combined_topk_weights,
                              ts_ep_event **event) {
    static const char *what = "ts_ep_combine_start";
    TS__RETURN_IF_ERROR(prepare(buf, event, what));
    ts__ep_async *a = buf->async;
    a->op = OP_COMBINE;
    a->ch = handle;
    const ts_tensor *in[6] = {x, topk_weights, bias0, bias1, combined_x, combined_topk_weights};
    for (int i = 0; i < 6; i++) a->cp[i] = keep(&a->ct[i], in[i]);
    a->ccfg = NULL;
    if (config) {
        a->cfg = *config;
        a->ccfg = &a->cfg;
    }
    return launch(buf, event);
}

ts_status ts_ep_event_wait(ts_ep_event *event) {
    if (!event) return ts__fail(TS_ERR_NULL_POINTER, "ts_ep_event_wait: event is NULL");
    ts__ep_async *a = &event->a;
    pthread_mutex_lock(&a->mu);
    if (atomic_load(&a->state) == IDLE) {
        pthread_mutex_unlock(&a->mu);
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_ep_event_wait: the event was already waited for");
    }
    while (atomic_load(&a->state) == QUEUED) pthread_cond_wait(&a->cv, &a->mu);
    const ts_status st = a->st;
    char msg[sizeof a->msg];
    memcpy(msg, a->msg, sizeof msg);
    atomic_store(&a->state, IDLE);
    pthread_mutex_unlock(&a->mu);
    if (st != TS_OK) return ts__fail(st, "%s", msg);
    return TS_OK;
}
