/* The runner's only MPI user. In-process (R = 1) every call is trivial; in rank mode (under
 * mpirun) the step time is the slowest rank's, statuses are agreed on so every rank stops
 * together, and the model is the expert-parallel one of tilestack/model_ep.h. */
#include "demo.h"
#include "model/model_internal.h"

#include <stdlib.h>
#include <string.h>

#if defined(TILESTACK_HAVE_EP) && defined(__has_include)
#if __has_include("tilestack/model_ep.h")
#define TS__DEMO_EP 1
#endif
#endif

#ifdef TILESTACK_HAVE_EP
#include <mpi.h>
#endif
#ifdef TS__DEMO_EP
#include "tilestack/model_ep.h"
#endif

bool ts__demo_have_ep(void) {
#ifdef TS__DEMO_EP
    return true;
#else
    return false;
#endif
}

ts_status ts__demo_comm_init(ts__demo_comm *c, int *argc, char ***argv) {
    memset(c, 0, sizeof *c);
    c->size = 1;
#ifdef TS__DEMO_EP
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init(argc, argv) != MPI_SUCCESS)
        return ts__fail(TS_ERR_INTERNAL, "MPI_Init failed");
    c->mpi = !inited;
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->size);
    return TS_OK;
#else
    (void)argc, (void)argv;
    return ts__fail(TS_ERR_UNSUPPORTED, "this build has no expert-parallel model (needs MPI and "
                    "tilestack/model_ep.h): run with --ranks 1");
#endif
}

void ts__demo_comm_finalize(ts__demo_comm *c) {
#ifdef TS__DEMO_EP
    if (c->mpi) MPI_Finalize();
#endif
    c->mpi = false;
}

void ts__demo_barrier(const ts__demo_comm *c) {
#ifdef TS__DEMO_EP
    if (c->size > 1) MPI_Barrier(MPI_COMM_WORLD);
#else
    (void)c;
#endif
}

void ts__demo_max(const ts__demo_comm *c, double *v, int n) {
#ifdef TS__DEMO_EP
    if (c->size > 1) MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
#else
    (void)c, (void)v, (void)n;
#endif
}

void ts__demo_sum(const ts__demo_comm *c, double *v, int n) {
#ifdef TS__DEMO_EP
    if (c->size > 1) MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
#else
    (void)c, (void)v, (void)n;
#endif
}

void ts__demo_gather(const ts__demo_comm *c, const double *mine, int n, double *all) {
#ifdef TS__DEMO_EP
    if (c->size > 1) {
        MPI_Gather(mine, n, MPI_DOUBLE, all, n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        return;
    }
#else
    (void)c;
#endif
    memcpy(all, mine, (size_t)n * sizeof(double));
}

ts_status ts__demo_agree(const ts__demo_comm *c, ts_status st, char *msg, size_t cap) {
#ifdef TS__DEMO_EP
    if (c->size > 1) {
        int first = st != TS_OK ? c->rank : c->size;
        MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (first == c->size) return TS_OK;
        int code = (int)st;
        MPI_Bcast(&code, 1, MPI_INT, first, MPI_COMM_WORLD);
        if (msg && cap > 0) MPI_Bcast(msg, (int)cap, MPI_CHAR, first, MPI_COMM_WORLD);
        if (msg && cap > 0) msg[cap - 1] = 0;
        return (ts_status)code;
    }
#else
    (void)c, (void)msg, (void)cap;
#endif
    return st;
}

ts_status ts__demo_model_create(const ts__demo_comm *c, const ts_model_config *cfg,
                                const char *weights, int64_t max_batch, bool unfused,
                                double timeout_s, ts_model **m) {
#ifdef TS__DEMO_EP
    if (c->mpi || c->size > 1) {
        ts_model_ep_options eo;
        memset(&eo, 0, sizeof eo);
        eo.unfused = unfused;
        eo.timeout_s = timeout_s;
        return weights ? ts_model_load_ep(weights, MPI_COMM_WORLD, max_batch, &eo, m)
                       : ts_model_create_ep(cfg, MPI_COMM_WORLD, max_batch, &eo, m);
    }
#else
    (void)c, (void)timeout_s;
#endif
    (void)unfused; /* in-process: one rank owns every expert, no dispatch to fuse */
    return weights ? ts_model_load(weights, max_batch, m) : ts_model_create(cfg, max_batch, m);
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
