/* One measurement (deepseek_model.md §4.3): B sequences per rank prefilled to a context L,
 * W untimed steps, then N timed ones. A step is decode + sampling on every rank, timed from a
 * barrier to the rank's end; the step time is the slowest rank's. The kernel breakdown
 * (model_profile.c) is on during the timed steps only. */
#include "demo.h"
#include "progress_bar.h"
#include "model/hf_v3.h"
#include "model/model_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static char *read_text_file(const char *path, ts_status *st) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        *st = ts__fail(TS_ERR_IO, "--config %s: cannot open (%s)", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 65536;
            if (cap > ((size_t)64 << 20)) {
                fclose(f);
                free(buf);
                *st = ts__fail(TS_ERR_INVALID_ARGUMENT, "--config %s: larger than 64 MiB", path);
                return NULL;
            }
            char *nb = realloc(buf, cap);
            if (!nb) {
                fclose(f);
                free(buf);
                *st = ts__fail(TS_ERR_OUT_OF_MEMORY, "--config %s", path);
                return NULL;
            }
            buf = nb;
        }
        const size_t got = fread(buf + len, 1, 4096, f);
        len += got;
        if (got < 4096) break;
    }
    const bool err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        *st = ts__fail(TS_ERR_IO, "--config %s: read error", path);
        return NULL;
    }
    buf[len] = 0;
    if (strlen(buf) != len) {
        free(buf);
        *st = ts__fail(TS_ERR_INVALID_ARGUMENT, "--config %s: not a text file (NUL byte)", path);
        return NULL;
    }
    *st = TS_OK;
    return buf;
}

ts_status ts__demo_config(const ts__demo_opts *o, ts_model_config *cfg) {
    if (o->config_path) {
        ts_status st;
        char *text = read_text_file(o->config_path, &st);
        if (!text) return st;
        st = ts_model_config_parse_json(text, cfg);
        free(text);
        if (st != TS_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", ts_last_error());
            return ts__fail(st, "--config %s: %s", o->config_path, msg);
        }
    } else {
        TS__RETURN_IF_ERROR(ts_model_config_builtin(o->model, cfg));
    }
    /* --attention: v32 uses none of the V4-only keys (compress_ratios, window, o_groups) */
    if (o->attention >= 0) cfg->attention = (ts_model_attention)o->attention;
    return TS_OK;
}

double ts__demo_percentile(const double *v, int n, double p) {
    if (n <= 0) return 0;
    double *s = malloc((size_t)n * sizeof *s);
    if (!s) return v[0];
    memcpy(s, v, (size_t)n * sizeof *s);
    /* insertion sort: n is a few hundred at most */
    for (int i = 1; i < n; i++) {
        const double x = s[i];
        int j = i - 1;
        while (j >= 0 && s[j] > x) s[j + 1] = s[j], j--;
        s[j + 1] = x;
    }
    /* nearest rank */
    int k = (int)((p / 100.0) * n + 0.999999999);
    if (k < 1) k = 1;
    if (k > n) k = n;
    const double r = s[k - 1];
    free(s);
    return r;
}

void ts__demo_result_free(ts__demo_result *r) {
    free(r->step_s);
    r->step_s = NULL;
}

/* The expert load of the step's last MoE layer (its routing is the model's, not hashed): V4's
 * per-expert row counts, or V3's top-k ids. */
static void count_load(const ts_model *m, int64_t B, double *load) {
    if (m->v3) {
        const int32_t *sel = NULL;
        const float *w = NULL;
        ts__v3_routing(m, &sel, &w);
        for (int64_t i = 0; i < B * m->cfg.n_activated_experts; i++) load[sel[i]]++;
        return;
    }
    for (int64_t e = 0; e < m->cfg.n_routed_experts; e++) load[e] += m->ws->masked_m[e];
}

ts_status ts__demo_measure(const ts__demo_comm *c, ts_model *m, const ts__demo_opts *o,
                           int64_t B, int64_t context, int warmup, int steps,
                           ts__demo_result *r) {
    const ts_model_config *cfg = ts_model_get_config(m);
    const int64_t V = cfg->vocab_size;
    memset(r, 0, sizeof *r);
    r->B = B, r->context = context, r->steps = steps, r->warmup = warmup;
    r->ranks = c->size, r->threads = ts_get_num_threads();
    const int replay = o->replay ? 1 : 0; /* the replay step takes one more position */
    if (context + warmup + steps + replay > cfg->max_seq_len)
        return ts__fail(TS_ERR_INVALID_ARGUMENT,
                        "--context %lld + --warmup %d + --steps %d%s = %lld tokens exceed the "
                        "model's max_seq_len %lld (the cache capacity per sequence)",
                        (long long)context, warmup, steps, replay ? " + 1 (--replay)" : "",
                        (long long)(context + warmup + steps + replay),
                        (long long)cfg->max_seq_len);
    int64_t *seqs = malloc((size_t)B * sizeof *seqs);
    int32_t *toks = malloc((size_t)B * sizeof *toks);
    float *logits = malloc((size_t)(B * V) * sizeof(float));
    double *loc = calloc((size_t)steps, sizeof(double));
    const bool inproc = !c->mpi && c->size == 1;
    double *load = inproc ? calloc((size_t)cfg->n_routed_experts, sizeof(double)) : NULL;
    ts_status st = TS_OK;
    if (!seqs || !toks || !logits || !loc || (inproc && !load))
        st = ts__fail(TS_ERR_OUT_OF_MEMORY, "demo: buffers for B = %lld", (long long)B);
    double t0 = ts__model_now();
    for (int64_t b = 0; st == TS_OK && b < B; b++) {
        seqs[b] = b;
        /* different prompts on every rank and sequence: routing spreads like real traffic */
        const uint64_t id = (uint64_t)c->rank * 65536u + (uint64_t)b;
        toks[b] = (int32_t)((id * 7919u + 13u) % (uint64_t)V);
        st = ts_model_prefill_random(m, b, context, 1000 + id);
        if (c->rank <= 0) ts__progress_bar("filling caches (sequences)", (double)(b + 1), (double)B, "");
    }
    r->prefill_s = ts__model_now() - t0;
    uint64_t rng = 0x5EED0000u + (uint64_t)c->rank;
    for (int i = 0; st == TS_OK && i < warmup; i++) {
        st = ts_model_decode(m, B, seqs, toks, logits);
        if (st == TS_OK) st = ts_model_sample(logits, B, V, o->topk, &rng, toks);
    }
    /* a failure on one rank stops all of them here instead of in the next collective */
    char msg[512];
    snprintf(msg, sizeof msg, "%s", st != TS_OK ? ts_last_error() : "");
    st = ts__demo_agree(c, st, msg, sizeof msg);
    if (st != TS_OK) {
        free(seqs), free(toks), free(logits), free(loc), free(load);
        return ts__fail(st, "%s", msg);
    }

    ts__demo_ep_reset(c, m);
    ts__model_step_breakdown(m, true, NULL);
    double sample_s = 0;
    for (int i = 0; st == TS_OK && i < steps; i++) {
        ts__demo_barrier(c);
        const double s0 = ts__model_now();
        st = ts_model_decode(m, B, seqs, toks, logits);
        const double s1 = ts__model_now();
        if (st == TS_OK) st = ts_model_sample(logits, B, V, o->topk, &rng, toks);
        const double s2 = ts__model_now();
        loc[i] = s2 - s0;
        sample_s += s2 - s1;
        if (c->rank <= 0) ts__progress_bar("timed steps", (double)(i + 1), (double)steps, "");
        if (inproc && st == TS_OK) count_load(m, B, load);
    }
    ts__model_step_breakdown(m, false, NULL);
    snprintf(msg, sizeof msg, "%s", st != TS_OK ? ts_last_error() : "");
    st = ts__demo_agree(c, st, msg, sizeof msg);
    if (st != TS_OK) {
        free(seqs), free(toks), free(logits), free(loc), free(load);
        return ts__fail(st, "%s", msg);
    }

    /* step time = slowest rank's (every rank started from the same barrier) */
    ts__demo_max(c, loc, steps);
    r->step_s = loc;
    double sum = 0, mn = loc[0];
    for (int i = 0; i < steps; i++) sum += loc[i], mn = loc[i] < mn ? loc[i] : mn;
    r->mean_s = sum / steps;
    r->min_s = mn;
    r->p50_s = ts__demo_percentile(loc, steps, 50);
    r->p99_s = ts__demo_percentile(loc, steps, 99);
    r->tps_rank = (double)B / r->mean_s;
    r->tps_total = r->tps_rank * c->size;

    /* kernel table: per step, mean over ranks */
    double tab[4 * (TS__P_COUNT + 1)], kept[TS__P_COUNT + 1];
    for (int i = 0; i < TS__P_COUNT; i++) {
        kept[i] = m->prof.kept[i];
        tab[4 * i + 0] = m->prof.sec[i];
        tab[4 * i + 1] = m->prof.bytes[i];
        tab[4 * i + 2] = m->prof.flops[i];
        tab[4 * i + 3] = (double)m->prof.calls[i];
    }
    tab[4 * TS__P_COUNT + 0] = sample_s;
    tab[4 * TS__P_COUNT + 1] = (double)(B * V) * 4.0 * steps;
    tab[4 * TS__P_COUNT + 2] = 0;
    tab[4 * TS__P_COUNT + 3] = steps;
    kept[TS__P_COUNT] = sample_s; /* sampling advances the RNG: not re-runnable */
    ts__demo_sum(c, tab, 4 * (TS__P_COUNT + 1));
    ts__demo_sum(c, kept, TS__P_COUNT + 1);
    const double div = (double)steps * c->size;
    r->n_kernels = 0;
    r->kernel_sum_s = 0;
    for (int i = 0; i <= TS__P_COUNT; i++) {
        if (tab[4 * i + 3] == 0) continue;
        ts__demo_kernel *k = &r->k[r->n_kernels++];
        k->name = i < TS__P_COUNT ? ts__prof_name((ts__prof_id)i) : "sampling (ts_model_sample)";
        k->sec = tab[4 * i + 0] / div;
        k->bytes = tab[4 * i + 1] / div;
        k->flops = tab[4 * i + 2] / div;
        k->calls = tab[4 * i + 3] / div;
        k->cache_resident = i == TS__P_COUNT; /* sampling reads the logits just written */
        r->kernel_sum_s += k->sec;
    }
    ts__demo_ep_collect(c, m, &r->ep);
    if (replay) {
        /* After the timed steps and their statistics: one more step on every rank in which
         * each idempotent kernel call runs again standalone (median of 5 after one warm-up,
         * caches flushed before each run unless --replay-warm; model_profile.c); the other sections and sampling count with their time in
         * the timed steps (in the replay step they would wait for the peers' replays). */
        double rt[TS__P_COUNT + 1];
        ts__model_step_breakdown(m, true, NULL);
        (void)ts__prof_replay_begin(&m->prof, 5, !o->replay_warm); /* warm if no memory */
        ts__demo_barrier(c);
        st = ts_model_decode(m, B, seqs, toks, logits);
        if (st == TS_OK) st = ts_model_sample(logits, B, V, o->topk, &rng, toks);
        ts__prof_replay_end(&m->prof);
        for (int i = 0; i < TS__P_COUNT; i++) rt[i] = m->prof.alone[i];
        rt[TS__P_COUNT] = 0;
        ts__model_step_breakdown(m, false, NULL);
        snprintf(msg, sizeof msg, "%s", st != TS_OK ? ts_last_error() : "");
        st = ts__demo_agree(c, st, msg, sizeof msg);
        if (st != TS_OK) {
            free(seqs), free(toks), free(logits), free(load);
            free(r->step_s);
            r->step_s = NULL;
            return ts__fail(st, "replay step: %s", msg);
        }
        ts__demo_sum(c, rt, TS__P_COUNT + 1);
        /* the same rows as the table above */
        for (int i = 0, j = 0; i <= TS__P_COUNT; i++) {
            if (tab[4 * i + 3] == 0) continue;
            ts__demo_kernel *k = &r->k[j++];
            k->kept = kept[i] / div;
            k->alone = rt[i] / c->size + k->kept;
            r->alone_sum_s += k->alone;
            r->kept_sum_s += k->kept;
        }
        r->replayed = true;
    }
    if (inproc) {
        double mx = 0, tot = 0;
        for (int64_t e = 0; e < cfg->n_routed_experts; e++) {
            mx = load[e] > mx ? load[e] : mx;
            tot += load[e];
        }
        r->ep.num_experts = cfg->n_routed_experts;
        r->ep.load_max = mx;
        r->ep.load_mean = tot / (double)cfg->n_routed_experts;
        r->expert_tokens_total = (int64_t)(tot / steps + 0.5);
    }
    free(seqs), free(toks), free(logits), free(load);
    return TS_OK;
}
