/* The runner's only MPI user. In-process (R = 1) every call is trivial; in rank mode (under
 * mpirun) the step time is the slowest rank's, statuses are agreed on so every rank stops
 * together, and the model is the expert-parallel one of tilestack/model_ep.h.
 *
 * Every wait on a peer has the --timeout deadline: the collectives are the EP library's
 * (src/ep/ep_coll.h, polled, naming the rank that did not arrive), and MPI_Init / MPI_Finalize,
 * which cannot be polled, run under an alarm. A rank whose wait expires prints why and ends
 * the job (MPI_Abort): its peers may be stopped, and mpirun then takes every rank down. */
#include "demo.h"
#include "model/model_internal.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(TILESTACK_HAVE_EP) && defined(__has_include)
#if __has_include("tilestack/model_ep.h")
#define TS__DEMO_EP 1
#endif
#endif

#ifdef TILESTACK_HAVE_EP
#include <mpi.h>
#endif
#ifdef TS__DEMO_EP
#include "ep/ep_coll.h"
#include "ep/ep_internal.h"
#include "tilestack/model_ep.h"
#endif

#include <time.h>

/* The command the messages name ("tilestack demo: rank 1: ..."). */
static const char *g_cmd = "demo";

void ts__demo_comm_set_name(const char *cmd) { g_cmd = cmd; }

bool ts__demo_have_ep(void) {
#ifdef TS__DEMO_EP
    return true;
#else
    return false;
#endif
}

#ifdef TS__DEMO_EP
/* MPI_Init and MPI_Finalize wait for every rank (Open MPI's PMIx fence) and cannot be polled:
 * an alarm bounds them, at least `floor_s` seconds (ranks start one after another, slowly on
 * a loaded machine, whatever --timeout says). The handler only writes a prepared message and
 * exits. */
static char g_alarm_msg[256];
static size_t g_alarm_len;

static void on_alarm(int sig) {
    (void)sig;
    if (write(STDERR_FILENO, g_alarm_msg, g_alarm_len) < 0) { /* nothing left to do */ }
    _exit(1);
}

static void arm(const ts__demo_comm *c, const char *what, double floor_s) {
    const double limit = c->timeout_s > floor_s ? c->timeout_s : floor_s;
    /* before MPI_Init the rank is only known from Open MPI's environment */
    const char *env = getenv("OMPI_COMM_WORLD_RANK");
    char rank[32];
    if (c->rank >= 0) snprintf(rank, sizeof rank, "%d", c->rank);
    else snprintf(rank, sizeof rank, "%s", env ? env : "?");
    g_alarm_len = (size_t)snprintf(g_alarm_msg, sizeof g_alarm_msg,
                                   "tilestack %s: rank %s: %s did not return within %.1f s (a peer "
                                   "stopped or died): TS_ERR_TIMEOUT\n", g_cmd, rank, what, limit);
    if (g_alarm_len >= sizeof g_alarm_msg) g_alarm_len = sizeof g_alarm_msg - 1;
    signal(SIGALRM, on_alarm);
    alarm((unsigned)limit + 1);
}

static void disarm(void) {
    alarm(0);
    signal(SIGALRM, SIG_DFL);
}

/* A wait expired (or a peer could not be reached): say so on this rank and end the job. */
static void fail_job(const ts__demo_comm *c, const char *msg) {
    fflush(stdout);
    fprintf(stderr, "tilestack %s: rank %d: %s\n", g_cmd, c->rank, msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1); /* MPI_Abort does not return; if it did, this rank must still stop */
}

static void check(const ts__demo_comm *c, ts_status st) {
    if (st != TS_OK) fail_job(c, ts_last_error());
}
#endif

ts_status ts__demo_comm_init(ts__demo_comm *c, int *argc, char ***argv, double timeout_s) {
    memset(c, 0, sizeof *c);
    c->size = 1;
    c->timeout_s = timeout_s;
#ifdef TS__DEMO_EP
    int inited = 0;
    MPI_Initialized(&inited);
    c->rank = -1; /* not known before MPI_Init */
    arm(c, "MPI_Init", 60);
    const int rc = inited ? MPI_SUCCESS : MPI_Init(argc, argv);
    disarm();
    if (rc != MPI_SUCCESS) return ts__fail(TS_ERR_INTERNAL, "MPI_Init failed");
    c->mpi = !inited;
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->size);
    /* one progress bar per job: the other ranks share rank 0's terminal */
    if (c->rank != 0) ts_set_progress_handler(NULL, NULL);
    return TS_OK;
#else
    (void)argc, (void)argv;
    return ts__fail(TS_ERR_UNSUPPORTED, "this build has no expert-parallel model (needs MPI and "
                    "tilestack/model_ep.h): run with --ranks 1");
#endif
}

void ts__demo_comm_finalize(ts__demo_comm *c) {
#ifdef TS__DEMO_EP
    if (c->mpi) {
        /* every rank is here or late: a polled barrier names a missing one before the fence */
        if (c->size > 1) check(c, ts__ep_coll_barrier(MPI_COMM_WORLD, c->timeout_s, "tilestack demo: end"));
        arm(c, "MPI_Finalize", 10);
        MPI_Finalize();
        disarm();
    }
#endif
    c->mpi = false;
}

void ts__demo_barrier(const ts__demo_comm *c) {
#ifdef TS__DEMO_EP
    if (c->size > 1) check(c, ts__ep_coll_barrier(MPI_COMM_WORLD, c->timeout_s, "tilestack demo: barrier"));
#else
    (void)c;
#endif
}

void ts__demo_max(const ts__demo_comm *c, double *v, int n) {
#ifdef TS__DEMO_EP
    if (c->size > 1)
        check(c, ts__ep_coll_allreduce(v, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, c->timeout_s,
                                       "tilestack demo: max over ranks"));
#else
    (void)c, (void)v, (void)n;
#endif
}

void ts__demo_sum(const ts__demo_comm *c, double *v, int n) {
#ifdef TS__DEMO_EP
    if (c->size > 1)
        check(c, ts__ep_coll_allreduce(v, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, c->timeout_s,
                                       "tilestack demo: sum over ranks"));
#else
    (void)c, (void)v, (void)n;
#endif
}

void ts__demo_gather(const ts__demo_comm *c, const double *mine, int n, double *all) {
#ifdef TS__DEMO_EP
    if (c->size > 1) {
        /* every rank gets every part (rank 0 needs them; the others ignore them) */
        check(c, ts__ep_coll_allgather(mine, n * (int)sizeof(double), all, MPI_COMM_WORLD, c->timeout_s,
                                       "tilestack demo: gather"));
        return;
    }
#else
    (void)c;
#endif
    memcpy(all, mine, (size_t)n * sizeof(double));
}

void ts__demo_abort(const ts__demo_comm *c, const char *msg) {
#ifdef TS__DEMO_EP
    if (c->mpi || c->size > 1) fail_job(c, msg);
#endif
    fprintf(stderr, "tilestack %s: %s\n", g_cmd, msg);
    exit(1);
}

/* beside ep_coll's TS__EP_TAG_COLL on the world communicator: posts, their payloads, answers */
enum { POST_TAG = 0x7e5d, DATA_TAG = 0x7e5e, BACK_TAG = 0x7e5f };

#ifdef TS__DEMO_EP
/* Rank 0's bytes to every other rank, each send bounded by the timeout. */
static void send_to_all(const ts__demo_comm *c, const void *buf, int64_t bytes, int tag) {
    for (int r = 1; r < c->size; r++) {
        MPI_Request q;
        MPI_Isend(buf, (int)bytes, MPI_BYTE, r, tag, MPI_COMM_WORLD, &q);
        check(c, ts__ep_coll_wait(&q, MPI_COMM_WORLD, c->timeout_s, "posting to the ranks"));
    }
}
#endif

void ts__demo_post(const ts__demo_comm *c, int64_t *v) {
#ifdef TS__DEMO_EP
    if (c->size < 2) return;
    if (c->rank == 0) {
        /* eager-sized: each send completes at once unless a peer is gone */
        send_to_all(c, v, sizeof *v, POST_TAG);
        return;
    }
    /* No deadline: rank 0 may be waiting for its user. A peer that dies takes the job down
     * (mpirun), so this does not wait forever; past the backoff's first second a poll every
     * 10 ms keeps an idle rank off the CPU. */
    MPI_Request q;
    MPI_Irecv(v, (int)sizeof *v, MPI_BYTE, 0, POST_TAG, MPI_COMM_WORLD, &q);
    ts__ep_backoff w = TS__EP_BACKOFF_INIT;
    const double t0 = ts__ep_now_s();
    bool idle = false;
    for (int done = 0;;) {
        MPI_Test(&q, &done, MPI_STATUS_IGNORE);
        if (done) return;
        if (idle) {
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        } else if (ts__ep_backoff_step(&w)) {
            idle = ts__ep_now_s() - t0 > 1.0;
        }
    }
#else
    (void)c, (void)v;
#endif
}

/* The payload of a post (its size is in the post itself), rank 0 to every rank. */
void ts__demo_post_data(const ts__demo_comm *c, void *buf, int64_t bytes) {
#ifdef TS__DEMO_EP
    if (c->size < 2) return;
    if (c->rank == 0) {
        send_to_all(c, buf, bytes, DATA_TAG);
        return;
    }
    /* it follows its post at once */
    MPI_Request q;
    MPI_Irecv(buf, (int)bytes, MPI_BYTE, 0, DATA_TAG, MPI_COMM_WORLD, &q);
    check(c, ts__ep_coll_wait(&q, MPI_COMM_WORLD, c->timeout_s, "a post's data"));
#else
    (void)c, (void)buf, (void)bytes;
#endif
}

void ts__demo_send_back(const ts__demo_comm *c, const void *buf, int64_t bytes) {
#ifdef TS__DEMO_EP
    MPI_Request q;
    MPI_Isend(buf, (int)bytes, MPI_BYTE, 0, BACK_TAG, MPI_COMM_WORLD, &q);
    check(c, ts__ep_coll_wait(&q, MPI_COMM_WORLD, c->timeout_s, "answering rank 0"));
#else
    (void)c, (void)buf, (void)bytes;
#endif
}

ts_status ts__demo_recv_back(const ts__demo_comm *c, int from, void *buf, int64_t bytes) {
#ifdef TS__DEMO_EP
    MPI_Request q;
    MPI_Irecv(buf, (int)bytes, MPI_BYTE, from, BACK_TAG, MPI_COMM_WORLD, &q);
    return ts__ep_coll_wait(&q, MPI_COMM_WORLD, c->timeout_s, "a rank's logits");
#else
    (void)c, (void)from, (void)buf, (void)bytes;
    return TS_OK;
#endif
}

ts_status ts__demo_agree(const ts__demo_comm *c, ts_status st, char *msg, size_t cap) {
#ifdef TS__DEMO_EP
    if (c->size > 1) {
        /* A timeout here means a peer is stopped or dead: agreeing would wait for it again. */
        if (st == TS_ERR_TIMEOUT) fail_job(c, msg && cap ? msg : ts_last_error());
        /* one record per rank: status, then its message; the first failing rank's wins, but a
         * rank's own error before a TS_ERR_PEER that only names it */
        enum { MSG = 512 };
        struct rec {
            int code;
            char msg[MSG];
        } mine, *all = malloc((size_t)c->size * sizeof *all);
        if (!all) fail_job(c, "tilestack demo: out of memory agreeing on a status");
        memset(&mine, 0, sizeof mine);
        mine.code = (int)st;
        if (msg && cap) snprintf(mine.msg, sizeof mine.msg, "%s", msg);
        check(c, ts__ep_coll_allgather(&mine, (int)sizeof mine, all, MPI_COMM_WORLD, c->timeout_s,
                                       "tilestack demo: agreeing on a status"));
        int pick = -1;
        for (int r = 0; r < c->size; r++) {
            if (all[r].code == TS_OK) continue;
            if (pick < 0 || (all[pick].code == TS_ERR_PEER && all[r].code != TS_ERR_PEER)) pick = r;
        }
        const ts_status out = pick < 0 ? TS_OK : (ts_status)all[pick].code;
        if (pick >= 0 && msg && cap) {
            all[pick].msg[MSG - 1] = 0;
            snprintf(msg, cap, "%s", all[pick].msg);
        }
        free(all);
        return out;
    }
#else
    (void)c, (void)msg, (void)cap;
#endif
    return st;
}

ts_status ts__demo_model_create(const ts__demo_comm *c, const ts_model_config *cfg,
                                const char *weights, const char *dir, int64_t max_batch, bool unfused,
                                double timeout_s, ts_model **m) {
#ifdef TS__DEMO_EP
    if (c->mpi || c->size > 1) {
        ts_model_ep_options eo;
        memset(&eo, 0, sizeof eo);
        eo.unfused = unfused;
        eo.timeout_s = timeout_s;
        return dir       ? ts_model_load_dir_ep(dir, MPI_COMM_WORLD, max_batch, &eo, m)
               : weights ? ts_model_load_ep(weights, MPI_COMM_WORLD, max_batch, &eo, m)
                         : ts_model_create_ep(cfg, MPI_COMM_WORLD, max_batch, &eo, m);
    }
#else
    (void)c, (void)timeout_s;
#endif
    (void)unfused; /* in-process: one rank owns every expert, no dispatch to fuse */
    return dir       ? ts_model_load_dir(dir, max_batch, m)
           : weights ? ts_model_load(weights, max_batch, m)
                     : ts_model_create(cfg, max_batch, m);
}

void ts__demo_ep_reset(const ts__demo_comm *c, ts_model *m) {
#ifdef TS__DEMO_EP
    if (c->mpi || c->size > 1) ts_model_ep_reset_stats(m);
#else
    (void)c, (void)m;
#endif
}

void ts__demo_ep_collect(const ts__demo_comm *c, ts_model *m, ts__demo_ep_stats *s) {
    memset(s, 0, sizeof *s);
#ifdef TS__DEMO_EP
    if (!(c->mpi || c->size > 1)) return;
    ts_model_ep_stats es;
    memset(&es, 0, sizeof es);
    if (ts_model_ep_get_stats(m, &es) != TS_OK) return;
    /* bytes and MoE seconds are this rank's: summed here (the report divides by R) */
    double v[4] = {es.moe_sec, es.dispatch_bytes, es.combine_bytes, (double)es.steps};
    ts__demo_sum(c, v, 3);
    s->moe_sec = v[0];
    s->dispatch_bytes = v[1];
    s->combine_bytes = v[2];
    s->steps = es.steps;
    s->num_experts = es.num_experts;
    if (es.expert_tokens && es.num_experts > 0) {
        double *t = malloc((size_t)es.num_experts * sizeof(double));
        if (t) {
            /* already summed over ranks by get_stats */
            for (int64_t e = 0; e < es.num_experts; e++) t[e] = (double)es.expert_tokens[e];
            double mx = 0, sum = 0;
            for (int64_t e = 0; e < es.num_experts; e++) {
                mx = t[e] > mx ? t[e] : mx;
                sum += t[e];
            }
            s->load_max = mx;
            s->load_mean = sum / (double)es.num_experts;
            free(t);
        }
    }
    s->have = true;
#else
    (void)c, (void)m;
#endif
}
