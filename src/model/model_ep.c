/* Expert-parallel model lifetime (model_ep.h): create / load keeping only this rank's experts,
 * the ranks' agreement on config and success (point to point with a deadline, so a missing rank
 * is named instead of hanging), the Mega MoE buffer and weights, and the statistics. */
#include "model_ep_internal.h"
#include "ep/ep_coll.h"
#include "ep/mega_moe_internal.h"
#include "hf_v3.h"
#include "hf_v4.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TAG_HELLO 0x7E51
#define TAG_READY 0x7E52

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Creation waits for peers that are still generating or reading weights (local work, slow on
 * a loaded machine): its agreements take at least this long before naming a missing rank. */
#define CREATE_MIN_TIMEOUT_S 100.0

static double create_timeout(double t) { return t > CREATE_MIN_TIMEOUT_S ? t : CREATE_MIN_TIMEOUT_S; }

static double resolve_timeout(const ts_model_ep_options *o) {
    if (o && o->timeout_s > 0) return o->timeout_s;
    const char *s = getenv("TS_EP_TIMEOUT_S");
    if (s && *s) {
        char *end;
        double v = strtod(s, &end);
        if (end != s && v > 0) return v;
    }
    return 100.0;
}

ts_status ts__model_ep_allgather(MPI_Comm comm, const void *mine, void *all, int bytes, int tag,
                                 double timeout_s, const char *what) {
    int R = 0, rank = 0;
    MPI_Comm_size(comm, &R);
    MPI_Comm_rank(comm, &rank);
    MPI_Request *rq = (MPI_Request *)malloc((size_t)(2 * R) * sizeof *rq);
    if (!rq) return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
    for (int r = 0; r < R; r++) {
        MPI_Irecv((char *)all + (size_t)r * (size_t)bytes, bytes, MPI_BYTE, r, tag, comm, &rq[r]);
        MPI_Isend(mine, bytes, MPI_BYTE, r, tag, comm, &rq[R + r]);
    }
    const double deadline = now_s() + timeout_s;
    ts_status st = TS_OK;
    for (;;) {
        int done = 0;
        MPI_Testall(2 * R, rq, &done, MPI_STATUSES_IGNORE);
        if (done) break;
        if (now_s() > deadline) {
            int missing = -1;
            for (int r = 0; r < R && missing < 0; r++) {
                int f = 0;
                MPI_Test(&rq[r], &f, MPI_STATUS_IGNORE);
                if (!f) missing = r;
            }
            st = ts__fail(TS_ERR_TIMEOUT, "%s: rank %d did not take part within %g s (this is "
                          "rank %d)", what, missing, timeout_s, rank);
            for (int i = 0; i < 2 * R; i++)
                if (rq[i] != MPI_REQUEST_NULL) {
                    if (i < R) MPI_Cancel(&rq[i]);
                    MPI_Request_free(&rq[i]);
                }
            break;
        }
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
    free(rq);
    return st;
}

ts_status ts__model_ep_agree(MPI_Comm comm, const ts__ep_hello *mine, int64_t *max_n, int tag,
                             double timeout, const char *fn, bool compare) {
    int R = 0, rank = 0;
    MPI_Comm_size(comm, &R);
    MPI_Comm_rank(comm, &rank);
    ts__ep_hello *all = (ts__ep_hello *)calloc((size_t)R, sizeof *all);
    if (!all) return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    ts_status st = ts__model_ep_allgather(comm, mine, all, (int)sizeof *mine, tag, timeout, fn);
    for (int r = 0; st == TS_OK && r < R; r++)
        if (all[r].status != TS_OK) {
            if (r == rank) st = ts__fail((ts_status)mine->status, "%s", mine->msg);
            else st = ts__fail(TS_ERR_PEER, "%s: rank %d failed (%s: %.*s); this is rank %d", fn, r,
                               ts_status_str((ts_status)all[r].status), (int)sizeof all[r].msg,
                               all[r].msg, rank);
        }
    for (int r = 1; compare && st == TS_OK && r < R; r++) {
        if (all[r].cfg_hash != all[0].cfg_hash)
            st = ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: rank %d's model config differs from rank "
                          "0's (every rank must pass the same config)", fn, r);
        else if (all[r].unfused != all[0].unfused)
            st = ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: rank %d's opts->unfused (%d) differs from "
                          "rank 0's (%d)", fn, r, all[r].unfused, all[0].unfused);
    }
    if (st == TS_OK && max_n) {
        *max_n = 0;
        for (int r = 0; r < R; r++) *max_n = all[r].n > *max_n ? all[r].n : *max_n;
    }
    free(all);
    return st;
}

void ts__model_ep_set_verdict(ts__ep_hello *h, ts_status st) {
    h->status = (int32_t)st;
    if (st != TS_OK) snprintf(h->msg, sizeof h->msg, "%s", ts_last_error());
}

static uint64_t cfg_hash(const ts_model_config *cfg) {
    char buf[8192];
    if (ts_model_config_to_json(cfg, buf, sizeof buf) != TS_OK) return 0;
    return ts__model_fnv1a64(buf, strlen(buf));
}

static void ep_free(ts_model *m) {
    struct ts__model_ep *ep = m->ep;
    if (!ep) return;
    ts_mega_moe_buffer_destroy(ep->buf); /* collective */
    ts_ep_buffer_destroy(ep->ll);        /* collective */
    ts__aligned_free(ep->recv_x);
    for (int64_t L = 0; L < TS_MODEL_MAX_LAYERS; L++) ts_mega_moe_weights_destroy(ep->w[L]);
    ts__aligned_free(ep->routed);
    free(ep->recv);
    free(ep->cnt);
    free(ep->gathered);
    free(ep->layer_tot);
    free(ep->tot);
    if (ep->comm != MPI_COMM_NULL) MPI_Comm_free(&ep->comm);
    free(ep);
    m->ep = NULL;
}

/* Layer L's local experts as Mega MoE weights: l1 = [w1; w3] rows per expert, l2 = w2. */
static ts_status make_weights(ts_model *m, int64_t L) {
    struct ts__model_ep *ep = m->ep;
    const int64_t El = ep->El, H = ep->H, I = ep->I;
    const size_t v1 = (size_t)(I * H / 2), s1 = (size_t)(I * (H / 32)) * 4;
    const size_t v2 = (size_t)(H * I / 2), s2 = (size_t)(H * (I / 32)) * 4;
    uint8_t *l1 = (uint8_t *)malloc(2 * v1 * (size_t)El), *l2 = (uint8_t *)malloc(v2 * (size_t)El);
    uint8_t *f1 = (uint8_t *)malloc(2 * s1 * (size_t)El), *f2 = (uint8_t *)malloc(s2 * (size_t)El);
    ts_status st = (l1 && l2 && f1 && f2) ? TS_OK
                                          : ts__fail(TS_ERR_OUT_OF_MEMORY, "model EP: out of memory");
    static const char *which[3] = {"w1", "w3", "w2"};
    for (int64_t j = 0; st == TS_OK && j < El; j++)
        for (int k = 0; st == TS_OK && k < 3; k++) {
            char nm[96], snm[112];
            snprintf(nm, sizeof nm, "%lld.ffn.experts.%lld.%s", (long long)L,
                     (long long)(ep->lo + j), which[k]);
            snprintf(snm, sizeof snm, "%s.scale", nm);
            const ts__mtensor *q = ts__model_find(m, nm), *s = ts__model_find(m, snm);
            if (!q || !s) {
                st = ts__fail(TS_ERR_INTERNAL, "model EP: tensor %s missing", q ? snm : nm);
                break;
            }
            if (k < 2) {
                memcpy(l1 + (2 * (size_t)j + (size_t)k) * v1, q->data, v1);
                memcpy(f1 + (2 * (size_t)j + (size_t)k) * s1, s->data, s1);
            } else {
                memcpy(l2 + (size_t)j * v2, q->data, v2);
                memcpy(f2 + (size_t)j * s2, s->data, s2);
            }
        }
    if (st == TS_OK) {
        ts_tensor t1 = ts_tensor_3d(l1, TS_E2M1X2, El, 2 * I, H / 2);
        ts_tensor t1s = ts_tensor_3d(f1, TS_F32, El, 2 * I, H / 32);
        ts_tensor t2 = ts_tensor_3d(l2, TS_E2M1X2, El, H, I / 2);
        ts_tensor t2s = ts_tensor_3d(f2, TS_F32, El, H, I / 32);
        st = ts_transform_weights_for_mega_moe(&t1, &t1s, &t2, &t2s, &ep->w[L]);
    }
    free(l1);
    free(l2);
    free(f1);
    free(f2);
    return st;
}

/* The EP state of m (rank's share of the experts, the combine's output, the counters). */
static ts_status ep_init(ts_model *m, int R, int rank, const ts_model_ep_options *opts,
                         double timeout, const char *fn) {
    struct ts__model_ep *ep = (struct ts__model_ep *)calloc(1, sizeof *ep);
    if (!ep) return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    ep->comm = MPI_COMM_NULL;
    m->ep = ep;
    m->ep_free = ep_free;
    const ts_model_config *c = &m->cfg;
    ep->rank = rank;
    ep->R = R;
    ep->E = c->n_routed_experts;
    ep->El = ep->E / R;
    ep->lo = rank * ep->El;
    ep->K = c->n_activated_experts;
    ep->H = c->dim;
    ep->I = c->moe_inter_dim;
    ep->nlayers = c->n_layers;
    ep->unfused = opts && opts->unfused;
    ep->timeout_s = timeout;
    ep->rows_cap = ts__max64(m->max_batch, TS__PREFILL_ROWS);
    ep->routed = (uint16_t *)ts__aligned_alloc((size_t)(ep->rows_cap * ep->H) * 2);
    ep->recv = (int32_t *)calloc((size_t)ep->El, 4);
    ep->cnt = (int64_t *)calloc((size_t)(ep->nlayers * ep->El), 8);
    ep->gathered = (int64_t *)calloc((size_t)(R * ep->nlayers * ep->El), 8);
    ep->layer_tot = (int64_t *)calloc((size_t)(ep->nlayers * ep->E), 8);
    ep->tot = (int64_t *)calloc((size_t)ep->E, 8);
    if (!ep->routed || !ep->recv || !ep->cnt || !ep->gathered || !ep->layer_tot || !ep->tot)
        return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    return TS_OK;
}

/* ts_model_load_dir_ep's layer_fn: layer L bound (its experts left to Mega MoE, even at
 * R = 1), its local experts made Mega MoE weights, then its packed records released, so the
 * load holds one layer's converted expert scales at a time. */
typedef struct ep_stream {
    int R, rank;
    const ts_model_ep_options *opts;
    double timeout;
    const char *fn;
} ep_stream;

static ts_status ep_layer_loaded(void *ctx, ts_model *m, int64_t L) {
    const ep_stream *es = (const ep_stream *)ctx;
    m->local_experts_only = true;
    TS__RETURN_IF_ERROR(ts__model_bind_layer(m, L));
    if (!m->ep) TS__RETURN_IF_ERROR(ep_init(m, es->R, es->rank, es->opts, es->timeout, es->fn));
    TS__RETURN_IF_ERROR(make_weights(m, L));
    ts__model_release_packed(m);
    return TS_OK;
}

/* Everything after the model holds its records (local experts only) on every rank: the EP
 * state and weights, a second agreement, the collective buffer, the hooks. *pm is freed on
 * failure. */
static ts_status finish_ep(ts_model **pm, MPI_Comm comm, ts_status st, const ts__ep_hello *h0,
                           const ts_model_ep_options *opts, double timeout, const char *fn) {
    ts_model *m = *pm;
    int R = 0, rank = 0;
    MPI_Comm_size(comm, &R);
    MPI_Comm_rank(comm, &rank);
    int64_t T = 0;
    const bool v3 = m && m->v3; /* a V3 model is bound already; its experts need no Mega MoE */
    if (st == TS_OK && !v3) st = ts__model_create_from_records(m);
    if (st == TS_OK && !m->ep) st = ep_init(m, R, rank, opts, timeout, fn);
    struct ts__model_ep *ep = m ? m->ep : NULL;
    /* a checkpoint load made some (or all) layers' weights as it read them (ep_layer_loaded) */
    for (int64_t L = 0; st == TS_OK && !v3 && L < m->cfg.n_layers; L++)
        if (!ep->w[L]) st = make_weights(m, L);
    ts__ep_hello h = *h0;
    ts__model_ep_set_verdict(&h, st);
    ts_status ag = ts__model_ep_agree(comm, &h, &T, TAG_READY, create_timeout(timeout), fn, false);
    if (ag != TS_OK) st = ag;
    if (st == TS_OK) { /* every rank was here and well; one may still stop now: a polled dup */
        MPI_Request dup_req;
        if (MPI_Comm_idup(comm, &ep->comm, &dup_req) != MPI_SUCCESS) {
            ep->comm = MPI_COMM_NULL;
            st = ts__fail(TS_ERR_PEER, "%s: MPI_Comm_idup failed", fn);
        } else if ((st = ts__ep_coll_wait(&dup_req, comm, create_timeout(timeout), fn)) != TS_OK) {
            ep->comm = MPI_COMM_NULL; /* MPI may still complete the dup: not ours to free */
        }
    }
    /* T rows per rank: the largest max_batch, and at least a prefill chunk (every rank's
     * rows_cap) */
    T = ts__max64(T, TS__PREFILL_ROWS);
    if (st == TS_OK && v3) {
        ep->T = T;
        st = ts__v3_ep_buffer(m, opts);
    } else if (st == TS_OK) {
        ts_mega_moe_buffer_options bo = {timeout, opts ? opts->ranks_per_node : 0};
        st = ts_get_symm_buffer_for_mega_moe(ep->comm, ep->E, T, (int32_t)ep->K, ep->H, ep->I,
                                             "fp8xfp4", "swiglu", &bo, &ep->buf);
        if (st == TS_OK) st = ts_mega_moe_get_views(ep->buf, &ep->views);
    }
    if (st != TS_OK) {
        if (m && m->ep && !m->ep->buf && !m->ep->ll) { /* no collective teardown needed */
            m->ep_free = NULL;
            ep_free(m);
        }
        ts_model_free(m);
        *pm = NULL;
        return st;
    }
    m->ep_decode = ts__model_ep_decode;
    m->ep_prefill = ts__model_ep_prefill;
    if (v3) {
        m->ep_routed = ts__v3_ep_routed;
        return TS_OK;
    }
    ep->T = ep->views.num_max_tokens_per_rank;
    if (ep->views.num_nodes > 1) ep->unfused = true; /* known alike on every rank */
    m->ep_routed = ts__model_ep_routed;
    return TS_OK;
}

/* Local checks of the common arguments (no communication). */
static ts_status check_common(const char *fn, MPI_Comm comm, int64_t max_batch,
                              const ts_model_ep_options *opts, ts_model **out) {
    if (!out) return ts__fail(TS_ERR_NULL_POINTER, "%s: out is NULL", fn);
    if (comm == MPI_COMM_NULL) return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: comm is MPI_COMM_NULL", fn);
    if (max_batch < 1 || max_batch > (1 << 20))
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: max_batch = %lld is outside [1, 2^20]", fn,
                        (long long)max_batch);
    if (opts && !(opts->timeout_s >= 0))
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: opts->timeout_s = %g must be >= 0 (0 = "
                        "default)", fn, opts->timeout_s);
    return TS_OK;
}

/* The config checks every rank makes alike once the configs agree. */
static ts_status check_config(const char *fn, const ts_model_config *cfg, int R) {
    if (cfg->n_routed_experts % R != 0)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: n_routed_experts = %lld is not divisible by "
                        "the %d ranks of comm", fn, (long long)cfg->n_routed_experts, R);
    TS__RETURN_IF_ERROR(ts_model_config_validate(cfg, R));
    return TS_OK;
}

ts_status ts_model_create_ep(const ts_model_config *cfg, MPI_Comm comm, int64_t max_batch,
                             const ts_model_ep_options *opts, ts_model **out) {
    static const char fn[] = "ts_model_create_ep";
    ts_status st = check_common(fn, comm, max_batch, opts, out);
    if (st != TS_OK) {
        if (comm == MPI_COMM_NULL || !out) return st; /* no collective to join */
    } else if (!cfg) {
        st = ts__fail(TS_ERR_NULL_POINTER, "%s: cfg is NULL", fn);
    }
    const double timeout = resolve_timeout(opts);
    int R = 0;
    MPI_Comm_size(comm, &R);
    ts__ep_hello h;
    memset(&h, 0, sizeof h);
    h.n = max_batch;
    h.unfused = opts && opts->unfused;
    h.cfg_hash = st == TS_OK ? cfg_hash(cfg) : 0;
    ts__model_ep_set_verdict(&h, st);
    TS__RETURN_IF_ERROR(ts__model_ep_agree(comm, &h, NULL, TAG_HELLO, create_timeout(timeout), fn, true));
    /* the configs are equal: these checks fail alike on every rank */
    TS__RETURN_IF_ERROR(check_config(fn, cfg, R));
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    const int64_t El = cfg->n_routed_experts / R, lo = rank * El;
    ts_model *m = NULL;
    st = ts__model_alloc(cfg, max_batch, &m);
    ts__wspec *specs = NULL;
    int64_t ns = 0;
    if (st == TS_OK) {
        m->local_experts_only = true;
        st = ts__model_weight_specs(cfg, &specs, &ns);
    }
    if (st == TS_OK) {
        m->recs = (ts__mtensor *)calloc((size_t)(2 * ns), sizeof *m->recs);
        if (!m->recs) st = ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    for (int64_t i = 0; st == TS_OK && i < ns; i++) {
        const int64_t e = ts__model_expert_of(specs[i].name);
        if (e >= 0 && (e < lo || e >= lo + El)) continue; /* another rank's expert */
        ts__mtensor *rec = &m->recs[m->nrecs];
        const int nr = ts__model_spec_records(&specs[i], rec);
        for (int k = 0; k < nr; k++) {
            rec[k].data = ts__aligned_alloc(rec[k].nbytes ? rec[k].nbytes : 1);
            if (!rec[k].data)
                st = ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: out of memory (%s, %zu bytes)", fn,
                              rec[k].name, rec[k].nbytes);
        }
        m->nrecs += nr;
        if (st == TS_OK) st = ts__model_generate_weight(cfg, &specs[i], rec);
    }
    free(specs);
    st = finish_ep(&m, comm, st, &h, opts, timeout, fn);
    if (st == TS_OK) *out = m;
    return st;
}

ts_status ts_model_load_ep(const char *path, MPI_Comm comm, int64_t max_batch,
                           const ts_model_ep_options *opts, ts_model **out) {
    static const char fn[] = "ts_model_load_ep";
    ts_status st = check_common(fn, comm, max_batch, opts, out);
    if (st != TS_OK && (comm == MPI_COMM_NULL || !out)) return st;
    const double timeout = resolve_timeout(opts);
    int R = 0, rank = 0;
    MPI_Comm_size(comm, &R);
    MPI_Comm_rank(comm, &rank);
    ts_model *m = NULL;
    /* the file's every check; the other ranks' experts are dropped before packing anything
     * (the load keeps them in memory until then) */
    if (st == TS_OK) st = ts_model_load(path, max_batch, &m);
    ts__ep_hello h;
    memset(&h, 0, sizeof h);
    h.n = max_batch;
    h.unfused = opts && opts->unfused;
    h.cfg_hash = st == TS_OK ? cfg_hash(&m->cfg) : 0;
    ts__model_ep_set_verdict(&h, st);
    st = ts__model_ep_agree(comm, &h, NULL, TAG_HELLO, create_timeout(timeout), fn, true);
    if (st == TS_OK) st = check_config(fn, &m->cfg, R);
    if (st != TS_OK) {
        ts_model_free(m);
        return st;
    }
    /* keep this rank's expert records; drop the rest and the full-model expert packing */
    const int64_t El = m->cfg.n_routed_experts / R, lo = rank * El;
    int64_t k = 0;
    for (int64_t i = 0; i < m->nrecs; i++) {
        const int64_t e = ts__model_expert_of(m->recs[i].name);
        if (e >= 0 && (e < lo || e >= lo + El)) {
            ts__mtensor_free(&m->recs[i]);
            continue;
        }
        m->recs[k++] = m->recs[i];
    }
    m->nrecs = k;
    /* ts_model_load bound and allocated everything: unbind and finish as create does */
    ts_model_config cfg = m->cfg;
    ts_model *fresh = NULL;
    st = ts__model_alloc(&cfg, max_batch, &fresh);
    if (st == TS_OK) {
        fresh->recs = m->recs;
        fresh->nrecs = m->nrecs;
        fresh->local_experts_only = true;
        m->recs = NULL;
        m->nrecs = 0;
    }
    ts_model_free(m);
    m = fresh;
    st = finish_ep(&m, comm, st, &h, opts, timeout, fn);
    if (st == TS_OK) *out = m;
    return st;
}

/* The kernels' copies on this rank: the replicated weights' packing and the Mega MoE layout of
 * its own experts. */
static size_t ep_packed_bytes(const ts_model *m) {
    size_t n = ts__model_packed_bytes(m);
    for (int64_t L = 0; L < m->cfg.n_layers; L++)
        if (m->ep->w[L]) n += ts_packed_weight_nbytes(m->ep->w[L]->l1) + ts_packed_weight_nbytes(m->ep->w[L]->l2);
    return n;
}

static ts_status no_tensor(void *ctx, const ts__v3_config *c, const ts__v3_tensor *t,
                           const ts__v3_hold *h) {
    (void)ctx, (void)c, (void)t, (void)h;
    return TS_OK;
}

/* ts_model_load_dir_ep of a V3 / V3.2 directory (model_ep_v3.c runs its experts): config.json
 * and every header checked first (ts__v3_plan reads no tensor data), the ranks agree on the
 * config, then each binds the shared part and its experts. st: the caller's argument checks. */
static ts_status load_dir_v3(const char *dir, MPI_Comm comm, int64_t max_batch,
                             const ts_model_ep_options *opts, double timeout, ts_status st,
                             ts_model **out) {
    static const char fn[] = "ts_model_load_dir_ep";
    int R = 0, rank = 0;
    MPI_Comm_size(comm, &R);
    MPI_Comm_rank(comm, &rank);
    ts__v3_config c;
    memset(&c, 0, sizeof c);
    if (st == TS_OK) st = ts__v3_plan(dir, no_tensor, NULL, &c);
    ts__ep_hello h;
    memset(&h, 0, sizeof h);
    h.n = max_batch;
    h.unfused = opts && opts->unfused;
    if (st == TS_OK) h.cfg_hash = ts__v3_config_hash(&c);
    ts__model_ep_set_verdict(&h, st);
    TS__RETURN_IF_ERROR(ts__model_ep_agree(comm, &h, NULL, TAG_HELLO, create_timeout(timeout), fn, true));
    if (c.n_experts % R != 0) /* the configs are equal: alike on every rank */
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: n_routed_experts = %lld is not divisible by "
                        "the %d ranks of comm", fn, (long long)c.n_experts, R);
    const int64_t El = c.n_experts / R, lo = rank * El;
    char who[96];
    snprintf(who, sizeof who, "rank %d of %d, experts %lld..%lld: ", rank, R, (long long)lo,
             (long long)(lo + El - 1));
    ts_model *m = NULL;
    st = ts__v3_load_dir_experts(dir, max_batch, false, lo, lo + El, who, &m);
    st = finish_ep(&m, comm, st, &h, opts, timeout, fn);
    if (st == TS_OK) *out = m;
    return st;
}

ts_status ts_model_load_dir_ep(const char *dir, MPI_Comm comm, int64_t max_batch,
                               const ts_model_ep_options *opts, ts_model **out) {
    static const char fn[] = "ts_model_load_dir_ep";
    ts_status st = check_common(fn, comm, max_batch, opts, out);
    if (st != TS_OK && (comm == MPI_COMM_NULL || !out)) return st;
    if (st == TS_OK && !dir) st = ts__fail(TS_ERR_NULL_POINTER, "%s: dir is NULL", fn);
    const double timeout = resolve_timeout(opts);
    int R = 0, rank = 0;
    MPI_Comm_size(comm, &R);
    MPI_Comm_rank(comm, &rank);
    if (st == TS_OK && ts__v3_dir_is_v3(dir))
        return load_dir_v3(dir, comm, max_batch, opts, timeout, st, out);
    /* config.json and the headers only: the ranks agree on the config (and on every rank
     * having opened its directory) before any rank binds a tensor */
    ts__hf_v4_loader *l = NULL;
    if (st == TS_OK) st = ts__hf_v4_open(dir, &l);
    ts__ep_hello h;
    memset(&h, 0, sizeof h);
    h.n = max_batch;
    h.unfused = opts && opts->unfused;
    if (st == TS_OK) {
        /* the model's name is the directory's: ranks may read copies at different paths */
        ts_model_config c = *ts__hf_v4_config(l);
        memset(c.name, 0, sizeof c.name);
        h.cfg_hash = cfg_hash(&c);
    }
    ts__model_ep_set_verdict(&h, st);
    st = ts__model_ep_agree(comm, &h, NULL, TAG_HELLO, create_timeout(timeout), fn, true);
    if (st == TS_OK) st = check_config(fn, ts__hf_v4_config(l), R);
    if (st != TS_OK) {
        ts__hf_v4_close(l);
        return st;
    }
    /* the same expert -> rank assignment as ts_model_create_ep (finish_ep's lo) */
    const int64_t El = ts__hf_v4_config(l)->n_routed_experts / R, lo = rank * El;
    ts_model *m = NULL;
    ep_stream es = {R, rank, opts, timeout, fn};
    st = ts__hf_v4_bind(l, max_batch, lo, lo + El, ep_layer_loaded, &es, &m);
    if (st == TS_OK) m->local_experts_only = true; /* packed for Mega MoE (finish_ep), even at R = 1 */
    st = finish_ep(&m, comm, st, &h, opts, timeout, fn);
    if (st == TS_OK) {
        char who[96];
        snprintf(who, sizeof who, "rank %d of %d, experts %lld..%lld: ", rank, R, (long long)lo,
                 (long long)(lo + El - 1));
        ts__model_release_packed(m); /* its experts are in the Mega MoE layout now */
        ts__hf_v4_report(l, who, m, ep_packed_bytes(m));
        *out = m;
    }
    ts__hf_v4_close(l);
    return st;
}

ts_status ts_model_ep_reset_stats(ts_model *m) {
    if (!m) return ts__fail(TS_ERR_NULL_POINTER, "ts_model_ep_reset_stats: m is NULL");
    struct ts__model_ep *ep = m->ep;
    if (!ep) return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts_model_ep_reset_stats: m is not an "
                             "expert-parallel model (ts_model_create_ep / ts_model_load_ep)");
    memset(ep->cnt, 0, (size_t)(ep->nlayers * ep->El) * 8);
    ep->steps = 0;
    ep->moe_sec = ep->dispatch_bytes = ep->combine_bytes = 0;
    return TS_OK;
}

ts_status ts_model_ep_get_stats(ts_model *m, ts_model_ep_stats *out) {
    static const char fn[] = "ts_model_ep_get_stats";
    if (!m) return ts__fail(TS_ERR_NULL_POINTER, "%s: m is NULL", fn);
    if (!out) return ts__fail(TS_ERR_NULL_POINTER, "%s: out is NULL", fn);
    struct ts__model_ep *ep = m->ep;
    if (!ep) return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: m is not an expert-parallel model "
                             "(ts_model_create_ep / ts_model_load_ep)", fn);
    const int64_t NL = ep->nlayers, El = ep->El, E = ep->E;
    TS__RETURN_IF_ERROR(ts__model_ep_allgather(ep->comm, ep->cnt, ep->gathered,
                                               (int)(NL * El * 8), TS__EP_TAG_STATS, ep->timeout_s, fn));
    memset(ep->tot, 0, (size_t)E * 8);
    for (int r = 0; r < ep->R; r++)
        for (int64_t L = 0; L < NL; L++)
            for (int64_t j = 0; j < El; j++) {
                const int64_t v = ep->gathered[((int64_t)r * NL + L) * El + j];
                ep->layer_tot[L * E + r * El + j] = v;
                ep->tot[r * El + j] += v;
            }
    out->steps = ep->steps;
    out->moe_sec = ep->moe_sec;
    out->dispatch_bytes = ep->dispatch_bytes;
    out->combine_bytes = ep->combine_bytes;
    out->expert_tokens = ep->tot;
    out->num_experts = E;
    out->layer_expert_tokens = ep->layer_tot;
    out->num_layers = NL;
    out->rank = ep->rank;
    out->num_ranks = ep->R;
    return TS_OK;
}
