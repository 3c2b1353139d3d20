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

void ts__prof_add(ts__prof *p, ts__prof_id id, double t0, double bytes, double flops) {
    if (!p->on) return;
    p->sec[id] += ts__model_now() - t0;
    p->bytes[id] += bytes;
    p->flops[id] += flops;
    p->calls[id]++;
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
