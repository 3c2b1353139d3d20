/* Per-kernel time of decode steps, for the demo's breakdown: when enabled, each step adds its
 * kernels' wall time, bytes moved (weights + activations, the roofline's memory side) and
 * flops into a table. */
#include "model_internal.h"

#include <string.h>
#include <time.h>

double ts__model_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *const k_names[TS__P_COUNT] = {
    "mhc (pre/post, sinkhorn, norm)", "rmsnorm", "lin8 (FP8 GEMM)", "lin32 (f32 GEMV)",
    "linbf (bf16 GEMM)", "rope", "kv quantise + store", "compressor pool", "indexer (q, logits)",
    "indexer top-k", "flash_mla sparse", "moe gate + route", "experts (grouped FP8xFP4)",
    "swiglu + FP8 cast", "head (hc, norm, bf16 GEMM)", "other"};

const char *ts__prof_name(ts__prof_id id) {
    return id >= 0 && id < TS__P_COUNT ? k_names[id] : "?";
}

void ts__prof_add_rerunnable(ts__prof *p, ts__prof_id id, double t0, double bytes,
                             double flops) {
    if (!p->on || p->replay) return;
    p->sec[id] += ts__model_now() - t0;
    p->bytes[id] += bytes;
    p->flops[id] += flops;
    p->calls[id]++;
}

void ts__prof_add(ts__prof *p, ts__prof_id id, double t0, double bytes, double flops) {
    /* not re-runnable: its time in the timed steps stands for its standalone time (inside the
     * replay step it would include the peers' replays it waits for) */
    if (!p->on || p->replay) return;
    const double dt = ts__model_now() - t0;
    p->sec[id] += dt;
    p->kept[id] += dt;
    p->bytes[id] += bytes;
    p->flops[id] += flops;
    p->calls[id]++;
}

bool ts__prof_replay_begin(ts__prof *p, int reps, bool cold) {
    memset(p->alone, 0, sizeof p->alone);
    p->replay_reps = reps < 1 ? 1 : reps > TS__PROF_MAX_REPS ? TS__PROF_MAX_REPS : reps;
    p->replay = true;
    if (!cold) return true;
    const ts_cpu_info *ci = ts_get_cpu_info();
    const size_t llc = ci && ci->l3_bytes ? (size_t)ci->l3_bytes : (size_t)32 << 20;
    p->flush_bytes = 2 * llc;
    p->flush = (uint8_t *)ts__aligned_alloc(p->flush_bytes);
    if (!p->flush) {
        p->flush_bytes = 0;
        return false;
    }
    memset(p->flush, 0, p->flush_bytes);
    return true;
}

void ts__prof_flush_caches(ts__prof *p) {
    if (!p->flush) return;
    /* writes, so every line of the last-level cache is replaced by one of the buffer's */
    for (size_t i = 0; i < p->flush_bytes; i += 64) p->flush[i] = (uint8_t)(p->flush[i] + 1);
}

void ts__prof_replay_end(ts__prof *p) {
    p->replay = false;
    ts__aligned_free(p->flush);
    p->flush = NULL;
    p->flush_bytes = 0;
}

void ts__prof_replayed(ts__prof *p, ts__prof_id id, double *t, int n) {
    if (n < 1) return;
    /* insertion sort: n <= TS__PROF_MAX_REPS */
    for (int i = 1; i < n; i++) {
        const double x = t[i];
        int j = i - 1;
        while (j >= 0 && t[j] > x) t[j + 1] = t[j], j--;
        t[j + 1] = x;
    }
    p->alone[id] += n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* enable = true clears the table and starts accumulating; false prints it (when out is not
 * NULL) and stops. Nested timings are disjoint: each section is timed where it runs. */
void ts__model_step_breakdown(ts_model *m, bool enable, FILE *out) {
    if (!m) return;
    if (enable) {
        memset(&m->prof, 0, sizeof m->prof);
        m->prof.on = true;
        return;
    }
    m->prof.on = false;
    if (!out) return;
    double tot = 0;
    for (int i = 0; i < TS__P_COUNT; i++) tot += m->prof.sec[i];
    fprintf(out, "%-32s %10s %8s %7s %10s %10s\n", "kernel", "ms", "share", "calls", "GB/s",
            "GFLOP/s");
    for (int i = 0; i < TS__P_COUNT; i++) {
        const double s = m->prof.sec[i];
        if (m->prof.calls[i] == 0) continue;
        fprintf(out, "%-32s %10.3f %7.1f%% %7lld %10.2f %10.2f\n", k_names[i], s * 1e3,
                tot > 0 ? 100 * s / tot : 0, (long long)m->prof.calls[i],
                s > 0 ? m->prof.bytes[i] / s * 1e-9 : 0, s > 0 ? m->prof.flops[i] / s * 1e-9 : 0);
    }
    fprintf(out, "%-32s %10.3f\n", "total (timed sections)", tot * 1e3);
}

/* Times `steps` decode steps of B sequences (0..B-1) prefilled with `context` random tokens,
 * after one warm-up step; prints per-step time, tokens/s and the kernel breakdown per step.
 * For the demo runner and quick measurements. *step_sec (optional): mean seconds per step. */
ts_status ts__model_time_decode(ts_model *m, int64_t B, int64_t context, int steps, FILE *out,
                                double *step_sec) {
    if (!m) return ts__fail(TS_ERR_NULL_POINTER, "ts__model_time_decode: m is NULL");
    if (B < 1 || B > m->max_batch || steps < 1 || context < 0 ||
        context + steps + 1 > m->cfg.max_seq_len)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "ts__model_time_decode: B = %lld (max %lld), "
                        "context %lld + steps %d must fit max_seq_len %lld", (long long)B,
                        (long long)m->max_batch, (long long)context, steps,
                        (long long)m->cfg.max_seq_len);
    int64_t *seqs = (int64_t *)malloc((size_t)B * sizeof *seqs);
    int32_t *toks = (int32_t *)malloc((size_t)B * sizeof *toks);
    float *logits = (float *)malloc((size_t)(B * m->cfg.vocab_size) * sizeof(float));
    ts_status st = (seqs && toks && logits) ? TS_OK
                                            : ts__fail(TS_ERR_OUT_OF_MEMORY, "ts__model_time_decode");
    for (int64_t b = 0; st == TS_OK && b < B; b++) {
        seqs[b] = b;
        toks[b] = (int32_t)((b * 7919 + 13) % m->cfg.vocab_size);
        st = ts_model_prefill_random(m, b, context, 1000 + (uint64_t)b);
    }
    if (st == TS_OK) st = ts_model_decode(m, B, seqs, toks, logits); /* warm-up */
    double *ts = (double *)calloc((size_t)steps, sizeof(double));
    if (st == TS_OK && !ts) st = ts__fail(TS_ERR_OUT_OF_MEMORY, "ts__model_time_decode");
    if (st == TS_OK) ts__model_step_breakdown(m, true, NULL);
    for (int i = 0; st == TS_OK && i < steps; i++) {
        for (int64_t b = 0; b < B; b++) toks[b] = (int32_t)((toks[b] * 31 + 7) % m->cfg.vocab_size);
        const double t0 = ts__model_now();
        st = ts_model_decode(m, B, seqs, toks, logits);
        ts[i] = ts__model_now() - t0;
    }
    if (st == TS_OK) {
        double sum = 0, mn = ts[0];
        for (int i = 0; i < steps; i++) {
            sum += ts[i];
            mn = ts[i] < mn ? ts[i] : mn;
        }
        const double mean = sum / steps;
        if (step_sec) *step_sec = mean;
        if (out) {
            fprintf(out, "%s: B = %lld, context %lld, %d steps, %d threads: step mean %.2f ms "
                    "(min %.2f), %.1f tokens/s\n", m->cfg.name, (long long)B, (long long)context,
                    steps, ts_get_num_threads(), mean * 1e3, mn * 1e3, (double)B / mean);
            /* the table per step */
            for (int i = 0; i < TS__P_COUNT; i++) {
                m->prof.sec[i] /= steps;
                m->prof.bytes[i] /= steps;
                m->prof.flops[i] /= steps;
            }
            ts__model_step_breakdown(m, false, out);
        } else {
            ts__model_step_breakdown(m, false, NULL);
        }
    } else {
        ts__model_step_breakdown(m, false, NULL);
    }
    free(ts);
    free(seqs);
    free(toks);
    free(logits);
    return st;
}
