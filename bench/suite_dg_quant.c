/* `tilestack bench dgquant`: DeepGEMM's quantisers, the tile kernels
 * (src/kernels/deepgemm_quant.tile through src/numerics/quant_tile.c) against the hand-written
 * C ones (src/numerics/quant_*.c), timed in alternation with a memcpy of the same traffic, at
 * bf16 [4001, 7168] (DRAM-resident), on two inputs: "gauss" N(0, 1) (blocks whose products are
 * all e4m3 normals) and "wide" |x| log-uniform over 2^-8 .. 2^8 in every block (e4m3
 * subnormal codes: the general encoders). The outputs of both paths are compared first.
 * TS_BENCH_FILTER=substring selects rows by name or shape. */
#include "bench.h"

#include "core/internal.h"
#include "numerics/quant_hand.h"
#include "numerics/quant_tile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ts__suite_dg_quant(const ts__bench_opts *opts);

typedef enum { DQ_TOKEN8, DQ_TOKEN8_PK, DQ_BLOCK8, DQ_CHANNEL8, DQ_FP4_DG_PK, DQ_FP4_RNE, DQ_BACK8, DQ_BACK4_PK } dq_op;

typedef struct dq_ctx {
    dq_op op;
    int64_t gk; /* gran_k of the quantisers, sf_gran_k of the cast backs */
    int which;  /* 0 hand-written, 1 tile, 2 memcpy */
    ts_tensor x, q, sf, out;
    char *msrc, *mdst;
    int64_t mbytes;
} dq_ctx;

typedef struct dq_memcpy { char *dst; const char *src; } dq_memcpy;
static void dq_memcpy_range(void *p, int64_t b, int64_t e, int tid) {
    (void)tid;
    dq_memcpy *m = p;
    memcpy(m->dst + b, m->src + b, (size_t)(e - b));
}

static ts_status dq_run(void *p) {
    dq_ctx *c = p;
    if (c->which == 2) {
        dq_memcpy m = {c->mdst, c->msrc};
        ts__parallel_for(c->mbytes, (int64_t)1 << 16, dq_memcpy_range, &m);
        return TS_OK;
    }
    const bool t = c->which == 1;
    const int64_t g = c->gk;
    switch (c->op) {
    case DQ_TOKEN8:
        return t ? ts__tq_per_token_cast_to_fp8(&c->x, false, g, false, &c->q, &c->sf)
                 : ts__qh_per_token_cast_to_fp8(&c->x, false, g, false, &c->q, &c->sf);
    case DQ_TOKEN8_PK:
        return t ? ts__tq_per_token_cast_to_fp8(&c->x, true, g, true, &c->q, &c->sf)
                 : ts__qh_per_token_cast_to_fp8(&c->x, true, g, true, &c->q, &c->sf);
    case DQ_BLOCK8:
        return t ? ts__tq_per_block_cast_to_fp8(&c->x, false, g, &c->q, &c->sf)
                 : ts__qh_per_block_cast_to_fp8(&c->x, false, g, &c->q, &c->sf);
    case DQ_CHANNEL8:
        return t ? ts__tq_per_channel_cast_to_fp8(&c->x, false, g, &c->q, &c->sf)
                 : ts__qh_per_channel_cast_to_fp8(&c->x, false, g, &c->q, &c->sf);
    case DQ_FP4_DG_PK:
        return t ? ts__tq_per_token_cast_to_fp4(&c->x, true, g, true, TS_FP4_ROUND_DEEPGEMM, &c->q, &c->sf)
                 : ts__qh_per_token_cast_to_fp4(&c->x, true, g, true, TS_FP4_ROUND_DEEPGEMM, &c->q, &c->sf);
    case DQ_FP4_RNE:
        return t ? ts__tq_per_token_cast_to_fp4(&c->x, false, g, false, TS_FP4_ROUND_RNE, &c->q, &c->sf)
                 : ts__qh_per_token_cast_to_fp4(&c->x, false, g, false, TS_FP4_ROUND_RNE, &c->q, &c->sf);
    case DQ_BACK8:
        return t ? ts__tq_cast_back_from_fp8(&c->q, &c->sf, 1, g, &c->out)
                 : ts__qh_cast_back_from_fp8(&c->q, &c->sf, 1, g, &c->out);
    case DQ_BACK4_PK:
        return t ? ts__tq_cast_back_from_fp4(&c->q, &c->sf, 1, g, &c->out)
                 : ts__qh_cast_back_from_fp4(&c->q, &c->sf, 1, g, &c->out);
    }
    return TS_ERR_INVALID_ARGUMENT;
}

typedef struct dq_spec {
    const char *name, *dtype;
    dq_op op;
    int64_t gk;
    bool f32; /* f32 source (else bf16) */
} dq_spec;

int ts__suite_dg_quant(const ts__bench_opts *opts) {
    int threads[2];
    const int nthreads = ts__bench_thread_list(opts, threads);
    for (int t = 0; t < nthreads; t++) ts__bench_print_machine(stdout, ts__probe_machine(threads[t], opts->quick));
    const char *filter = getenv("TS_BENCH_FILTER");
    printf("\nsuite dgquant (ISA %s): DeepGEMM quantisers, tile kernel vs hand-written C; ratio = "
           "baseline time / time (hand-written: memcpy; tile: hand-written)\n",
           opts->isa_name ? opts->isa_name : "?");
    ts__bench_table_header(stdout);
    const int64_t m = 4001, n = 7168, e = m * n;
    uint16_t *x = ts__aligned_alloc((size_t)e * 2);
    float *x32 = ts__aligned_alloc((size_t)e * 4);
    uint8_t *q[2] = {ts__aligned_alloc((size_t)e), ts__aligned_alloc((size_t)e)};
    float *sf[2] = {ts__aligned_alloc((size_t)e / 8 * 4), ts__aligned_alloc((size_t)e / 8 * 4)};
    uint16_t *out[2] = {ts__aligned_alloc((size_t)e * 2), ts__aligned_alloc((size_t)e * 2)};
    char *mbuf = ts__aligned_alloc((size_t)e * 6);
    int failures = 0;
    if (!x || !x32 || !q[0] || !q[1] || !sf[0] || !sf[1] || !out[0] || !out[1] || !mbuf) {
        fprintf(stderr, "tilestack bench: out of memory\n");
        failures = 1;
        goto done;
    }
    memset(mbuf, 1, (size_t)e * 6);
    static const dq_spec specs[] = {
        {"per_token_cast_to_fp8", "bf16->e4m3,f32 sf", DQ_TOKEN8, 128, false},
        {"per_token_cast_to_fp8 ue8m0x4", "bf16->e4m3,ue8m0x4", DQ_TOKEN8_PK, 128, false},
        {"per_token_cast_to_fp8 g64", "bf16->e4m3,f32 sf", DQ_TOKEN8, 64, false},
        {"per_token_cast_to_fp8 g112", "bf16->e4m3,f32 sf", DQ_TOKEN8, 112, false},
        {"per_token_cast_to_fp8 f32", "f32->e4m3,f32 sf", DQ_TOKEN8, 128, true},
        {"per_block_cast_to_fp8", "bf16->e4m3 128x128", DQ_BLOCK8, 128, false},
        {"per_block_cast_to_fp8 f32", "f32->e4m3 128x128", DQ_BLOCK8, 128, true},
        {"per_channel_cast_to_fp8", "bf16->e4m3 128x1", DQ_CHANNEL8, 128, false},
        {"per_channel_cast_to_fp8 f32", "f32->e4m3 128x1", DQ_CHANNEL8, 128, true},
        {"per_token_cast_to_fp4", "bf16->e2m1,ue8m0x4 g32", DQ_FP4_DG_PK, 32, false},
        {"per_token_cast_to_fp4 rne", "bf16->e2m1,f32 g32", DQ_FP4_RNE, 32, false},
        {"per_token_cast_to_fp4 g112", "bf16->e2m1,ue8m0x4", DQ_FP4_DG_PK, 112, false},
        {"cast_back_from_fp8", "e4m3,f32->bf16", DQ_BACK8, 128, false},
        {"cast_back_from_fp4", "e2m1,ue8m0x4->bf16", DQ_BACK4_PK, 32, false},
    };
    for (int dist = 0; dist < 2; dist++) {
        ts__bench_rng r = {0x9E3779B97F4A7C15ull};
        for (int64_t i = 0; i < e; i++) {
            uint64_t v = ts__bench_rng_next(&r);
            if (dist == 1) {
                x[i] = (uint16_t)(((v >> 16) & 0x8000) | ((119 + (v % 16)) << 7) | (v >> 40 & 0x7F));
                continue;
            }
            double u1 = ((double)(v >> 38) + 0.5) / 67108864.0, u2 = ((double)(v & 0x3FFFFFF) + 0.5) / 67108864.0;
            x[i] = ts_f32_to_bf16((float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2)));
        }
        for (int64_t i = 0; i < e; i++) x32[i] = ts_bf16_to_f32(x[i]);
        char shape[48];
        snprintf(shape, sizeof shape, "%lldx%lld %s", (long long)m, (long long)n, dist ? "wide" : "gauss");
        for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
            const dq_spec *sp = &specs[s];
            char hname[64], tname[64];
            snprintf(hname, sizeof hname, "%s hand", sp->name);
            snprintf(tname, sizeof tname, "%s tile", sp->name);
            if (!ts__bench_wanted(filter, hname, shape) && !ts__bench_wanted(filter, tname, shape)) continue;
            const bool fp4 = sp->op == DQ_FP4_DG_PK || sp->op == DQ_FP4_RNE || sp->op == DQ_BACK4_PK;
            const bool pk = sp->op == DQ_TOKEN8_PK || sp->op == DQ_FP4_DG_PK || sp->op == DQ_BACK4_PK;
            const int64_t g = sp->gk, nb = (n + g - 1) / g;
            int64_t sr = m, sc = pk ? (nb + 3) / 4 : nb;
            if (sp->op == DQ_BLOCK8) sr = (m + g - 1) / g;
            if (sp->op == DQ_CHANNEL8) sr = 31, sc = n; /* 31 groups of 128 rows: 3968 rows */
            const int64_t mm = sp->op == DQ_CHANNEL8 ? 31 * 128 : m;
            dq_ctx c[3];
            void *ctxs[3];
            double bytes = 0;
            for (int v = 0; v < 3; v++) {
                c[v] = (dq_ctx){.op = sp->op, .gk = g, .which = v};
                c[v].x = sp->f32 ? ts_tensor_2d(x32, TS_F32, mm, n) : ts_tensor_2d(x, TS_BF16, mm, n);
                c[v].q = ts_tensor_2d(q[v & 1], fp4 ? TS_E2M1X2 : TS_E4M3, mm, fp4 ? n / 2 : n);
                c[v].sf = ts_tensor_2d(sf[v & 1], pk ? TS_UE8M0X4 : TS_F32, sr, sc);
                c[v].out = ts_tensor_2d(out[v & 1], TS_BF16, mm, n);
                ctxs[v] = &c[v];
            }
            const double qb = (double)(mm * n) / (fp4 ? 2.0 : 1.0), sb = 4.0 * (double)(sr * sc);
            bytes = (sp->f32 ? 4.0 : 2.0) * (double)(mm * n) + qb + sb;
            ts_status st = TS_OK;
            if (sp->op == DQ_BACK8 || sp->op == DQ_BACK4_PK) {
                /* codes and scales from the quantiser, the same for both paths */
                dq_ctx qc = c[0];
                qc.op = sp->op == DQ_BACK8 ? DQ_TOKEN8 : DQ_FP4_DG_PK; /* the same gk */
                for (int v = 0; v < 2 && st == TS_OK; v++) {
                    qc.q = c[v].q, qc.sf = c[v].sf;
                    st = dq_run(&qc);
                }
            }
            for (int v = 0; v < 2 && st == TS_OK; v++) st = dq_run(&c[v]);
            ts__bench_row row = {.suite = "dgquant", .shape = shape, .dtype = sp->dtype, .bytes = bytes,
                                 .roof = TS__ROOF_MEMCPY, .name = sp->name};
            const bool back = sp->op == DQ_BACK8 || sp->op == DQ_BACK4_PK;
            if (st == TS_OK && (back ? memcmp(out[0], out[1], (size_t)(mm * n) * 2)
                                     : memcmp(q[0], q[1], (size_t)qb) || memcmp(sf[0], sf[1], (size_t)sb))) {
                ts__bench_report_error(opts, &row, "the tile kernel and the hand-written one differ");
                failures++;
                continue;
            }
            c[2].mbytes = (int64_t)(bytes / 2), c[2].msrc = mbuf, c[2].mdst = mbuf + c[2].mbytes;
            for (int ti = 0; ti < nthreads && st == TS_OK; ti++) {
                (void)ts_set_num_threads(threads[ti]);
                ts__timing tt[3];
                st = ts__bench_time_interleaved(dq_run, ctxs, 3, opts->quick, tt);
                if (st != TS_OK) break;
                row.threads = threads[ti];
                for (int v = 0; v < 2; v++) {
                    row.name = v ? tname : hname;
                    row.t = tt[v];
                    row.baseline = v ? "hand" : "memcpy";
                    row.baseline_seconds = v ? tt[0].median_s : tt[2].median_s;
                    ts__bench_report(opts, &row);
                }
            }
            if (st != TS_OK) {
                ts__bench_report_error(opts, &row, ts_last_error());
                failures++;
            }
        }
    }
done:
    ts__aligned_free(x), ts__aligned_free(x32), ts__aligned_free(mbuf);
    for (int v = 0; v < 2; v++) ts__aligned_free(q[v]), ts__aligned_free(sf[v]), ts__aligned_free(out[v]);
    return failures;
}
