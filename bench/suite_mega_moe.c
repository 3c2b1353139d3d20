/* Suite `mega_moe`: the fused Mega MoE (ts_fp8_fp4_mega_moe) against the unfused EP pipeline
 * (ts_mega_moe_unfused: EP dispatch + grouped GEMM + SwiGLU cast + grouped GEMM + EP combine)
 * at decode batch sizes, timed in the same run. Run it under mpirun:
 *   mpirun --oversubscribe -np 2 tilestack bench mega_moe [--quick]
 * Workload: hidden 4096, intermediate 2048, top-6, E = 32 and 64 experts, B tokens per rank
 * with B * R * 6 / E about 1.5 and 6 tokens per expert, and (TS_BENCH_MEGA_MOE_E256=1) E = 256
 * with about 1; and a row with intermediate 128 (small experts: the GEMMs shrink 16x, so the
 * rest of each path -- dispatch, waits, combine -- shows). uniform random distinct experts,
 * weights 1/6; FP4 weights with random codes and ue8m0 scales (packed), FP8 inputs cast with
 * ue8m0 per 32. Threads per rank = max(1, cores / ranks) (or --threads).
 * Time per call = the slowest rank's, median of the samples (every rank runs the same calls).
 * Roofline: per rank, the FP4 weights (+ scales) of the local experts that received tokens,
 * read once from DRAM, against the machine's DRAM read bandwidth shared by the ranks (the thr
 * column counts all ranks' threads), with the GEMM flops as the compute bound. The baseline
 * column is the unfused path; "bits" says whether both gave identical y on every rank.
 * Rows `fused_late_rank` (R >= 2): the last rank starts each call half the aligned unfused
 * time late (as when attention takes longer on one rank); time from the common start to the
 * last rank's return, both paths, so the fused path's overlap of local work with the wait shows.
 * TS_BENCH_FILTER=substring keeps only matching rows (e.g. "E=32"). TS_BENCH_MEGA_MOE_PHASES=1
 * prints each path's per-phase times per rank; TS_BENCH_MEGA_MOE_AB=1 replaces the baseline
 * by the fused call with the grouped GEMM for every expert, to A/B the expert GEMM chosen by
 * TS_MEGA_MOE_GEMM (docs/mega_moe.md). */
#include "bench.h"

#ifdef TILESTACK_HAVE_EP
#include "core/internal.h"
#include "ep/mega_moe_gemm.h"
#include "ep/mega_moe_internal.h"
#include "tilestack/mega_moe.h"
#include "tilestack/numerics.h"
#include "tilestack/quant.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SUITE "mega_moe"

typedef struct mm_bench {
    ts_mega_moe_buffer *buf;
    ts_mega_moe_weights *w;
    ts_tensor y;
    bool fused;
    double skew_s; /* the last rank starts this much later (a rank arriving late from attention) */
} mm_bench;

static ts_status mm_call(mm_bench *b) {
    int me = 0, R = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &R);
    if (b->skew_s > 0 && me == R - 1) {
        const double t0 = ts__now_s();
        while (ts__now_s() - t0 < b->skew_s) {
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
    }
    if (getenv("TS_BENCH_MEGA_MOE_AB")) {
        /* A/B of the fused path's expert GEMM choice (TS_MEGA_MOE_GEMM, e.g. "small"): the
         * baseline is the fused call with the grouped GEMM everywhere (ts__mega_moe_set_gemm_mode
         * 1), alternating call by call */
        ts__mega_moe_set_gemm_mode(b->fused ? -1 : 1);
        const ts_status st = ts_fp8_fp4_mega_moe(&b->y, b->w, b->buf, NULL, NULL, NULL, 10.0f, true);
        ts__mega_moe_set_gemm_mode(-1);
        return st;
    }
    return b->fused ? ts_fp8_fp4_mega_moe(&b->y, b->w, b->buf, NULL, NULL, NULL, 10.0f, true)
                    : ts_mega_moe_unfused(&b->y, b->w, b->buf, NULL, 10.0f, true);
}

static void sort_samples(double *x, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && x[j - 1] > x[j]; j--) {
            const double t = x[j];
            x[j] = x[j - 1];
            x[j - 1] = t;
        }
}

/* The two paths alternate call by call (A/B in one run: the machine's drift hits both); same
 * number of calls on every rank; per-sample time = the slowest rank's. */
static ts_status mm_time2(mm_bench *p[2], bool quick, ts__timing t[2], double phases[2][TS__MM_NPHASE]) {
    const int warm = 1, runs = quick ? 5 : 9;
    double samples[2][16];
    memset(phases, 0, 2 * TS__MM_NPHASE * sizeof(double));
    for (int i = 0; i < warm + runs; i++)
        for (int q = 0; q < 2; q++) {
            MPI_Barrier(MPI_COMM_WORLD);
            const double t0 = ts__now_s();
            ts_status st = mm_call(p[q]);
            double dt = ts__now_s() - t0, mx = 0;
            int bad = st != TS_OK, anybad = 0;
            MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
            if (anybad) return st != TS_OK ? st : TS_ERR_PEER;
            MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            if (i >= warm) {
                samples[q][i - warm] = mx;
                double ph[TS__MM_NPHASE];
                ts__mega_moe_phase_times(p[q]->buf, p[q]->fused || getenv("TS_BENCH_MEGA_MOE_AB"), ph);
                for (int j = 0; j < TS__MM_NPHASE; j++) phases[q][j] += ph[j] / runs;
            }
        }
    for (int q = 0; q < 2; q++) {
        sort_samples(samples[q], runs);
        t[q].median_s = samples[q][runs / 2];
        t[q].min_s = samples[q][0];
        t[q].runs = runs;
        t[q].inner = 1;
    }
    return TS_OK;
}

/* Random FP4 expert weights [El, N, K/2] with packed ue8m0 scales [El, N, K/128]. */
static ts_mega_moe_weights *random_weights(ts__bench_rng *rng, int64_t El, int64_t H, int64_t I) {
    const int64_t n1 = El * 2 * I * H / 2, n2 = El * H * I / 2;
    uint8_t *q1 = malloc((size_t)n1), *q2 = malloc((size_t)n2);
    int32_t *s1 = malloc((size_t)(El * 2 * I * H / 128) * 4), *s2 = malloc((size_t)(El * H * I / 128) * 4);
    ts_mega_moe_weights *w = NULL;
    if (q1 && q2 && s1 && s2) {
        for (int64_t i = 0; i < n1; i += 8) {
            const uint64_t r = ts__bench_rng_next(rng);
            memcpy(q1 + i, &r, (size_t)(n1 - i < 8 ? n1 - i : 8));
        }
        for (int64_t i = 0; i < n2; i += 8) {
            const uint64_t r = ts__bench_rng_next(rng);
            memcpy(q2 + i, &r, (size_t)(n2 - i < 8 ? n2 - i : 8));
        }
        /* scales around 2^-6 (bytes 119..122): outputs of order 1 */
        for (int64_t i = 0; i < El * 2 * I * H / 128; i++) s1[i] = 0x79797979 + (int32_t)(ts__bench_rng_next(rng) & 0x01010101);
        for (int64_t i = 0; i < El * H * I / 128; i++) s2[i] = 0x77777777 + (int32_t)(ts__bench_rng_next(rng) & 0x01010101);
        ts_tensor t1 = ts_tensor_3d(q1, TS_E2M1X2, El, 2 * I, H / 2), t2 = ts_tensor_3d(q2, TS_E2M1X2, El, H, I / 2);
        ts_tensor f1 = ts_tensor_3d(s1, TS_I32, El, 2 * I, H / 128), f2 = ts_tensor_3d(s2, TS_I32, El, H, I / 128);
        if (ts_transform_weights_for_mega_moe(&t1, &f1, &t2, &f2, &w) != TS_OK) w = NULL;
    }
    free(q1), free(q2), free(s1), free(s2);
    return w;
}

static int run_shape(const ts__bench_opts *opts, int R, int me, int threads, int cores,
                     int64_t E, int64_t B, int64_t I) {
    const int64_t H = 4096, K = 6, El = E / R;
    char shape[96];
    snprintf(shape, sizeof shape, "E=%lld,B=%lld,H=%lld,I=%lld,k=%lld", (long long)E, (long long)B, (long long)H,
             (long long)I, (long long)K);
    if (!ts__bench_wanted(getenv("TS_BENCH_FILTER"), "fused", shape)) return 0;
    int rc = 0;
    ts_mega_moe_buffer *buf = NULL;
    ts_status st = ts_get_symm_buffer_for_mega_moe(MPI_COMM_WORLD, E, B, (int32_t)K, H, I, NULL, NULL, NULL, &buf);
    if (st != TS_OK) {
        if (me == 0) printf("mega_moe %s: buffer: %s\n", shape, ts_last_error());
        return 1;
    }
    ts_mega_moe_views v;
    ts_mega_moe_get_views(buf, &v);
    ts__bench_rng rng = {0x9E3779B97F4A7C15ull ^ (uint64_t)(me + 1) * 0x2545F4914F6CDD1Dull ^ (uint64_t)E};
    ts_mega_moe_weights *w = random_weights(&rng, El, H, I);
    float *xf = malloc((size_t)(B * H) * 4);
    uint16_t *yf = malloc((size_t)(B * H) * 2), *yu = malloc((size_t)(B * H) * 2);
    int bad = !w || !xf || !yf || !yu, anybad = 0, allsame = 0;
    double skew_base = 0.0;
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (anybad) {
        if (me == 0) printf("mega_moe %s: out of memory\n", shape);
        rc = 1;
        goto done;
    }
    for (int64_t i = 0; i < B * H; i++)
        xf[i] = (float)((int64_t)(ts__bench_rng_next(&rng) >> 40) - (1 << 23)) * (1.0f / (float)(1 << 23));
    {
        ts_tensor tx = ts_tensor_2d(xf, TS_F32, B, H), tq = ts_tensor_2d(v.x.data, TS_E4M3, B, H),
                  ts = ts_tensor_2d(v.x_sf.data, TS_I32, B, H / 128);
        ts_per_token_cast_to_fp8(&tx, true, 32, true, &tq, &ts);
        int64_t *idx = (int64_t *)v.topk_idx.data;
        float *tw = (float *)v.topk_weights.data;
        for (int64_t t = 0; t < B; t++)
            for (int64_t k = 0; k < K; k++) {
                int64_t e;
                bool dup;
                do {
                    e = (int64_t)(ts__bench_rng_next(&rng) % (uint64_t)E);
                    dup = false;
                    for (int64_t j = 0; j < k; j++) dup |= idx[t * K + j] == e;
                } while (dup);
                idx[t * K + k] = e;
                tw[t * K + k] = 1.0f / 6.0f;
            }
    }
    /* touched local experts and received rows (for the roofline): all ranks' routing */
    int64_t *all = malloc((size_t)(R * B * K) * 8);
    MPI_Allgather(v.topk_idx.data, (int)(B * K), MPI_INT64_T, all, (int)(B * K), MPI_INT64_T, MPI_COMM_WORLD);
    int64_t touched = 0, rows = 0;
    for (int64_t e = (int64_t)me * El; e < (int64_t)(me + 1) * El; e++) {
        int64_t c = 0;
        for (int64_t i = 0; i < R * B * K; i++) c += all[i] == e;
        touched += c > 0;
        rows += c;
    }
    free(all);
    double tot[2] = {(double)touched, (double)rows}, sum[2];
    MPI_Allreduce(tot, sum, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);

    /* aligned starts, then the last rank late by half the unfused time */
    for (int skewed = 0; skewed < 2; skewed++) {
        mm_bench fb = {buf, w, ts_tensor_2d(yf, TS_BF16, B, H), true, 0.0};
        mm_bench ub = {buf, w, ts_tensor_2d(yu, TS_BF16, B, H), false, 0.0};
        ts__timing tf, tu;
        if (skewed) {
            if (R < 2 || !ts__bench_wanted(getenv("TS_BENCH_FILTER"), "fused_late_rank", shape)) break;
            fb.skew_s = ub.skew_s = 0.5 * skew_base;
        }
        mm_bench *pair[2] = {&ub, &fb};
        ts__timing tt[2];
        double ph[2][TS__MM_NPHASE];
        st = mm_time2(pair, opts->quick, tt, ph);
        tu = tt[0], tf = tt[1];
        if (st != TS_OK) {
            if (me == 0) printf("mega_moe %s: %s\n", shape, ts_last_error());
            rc = 1;
            goto done;
        }
        if (!skewed) skew_base = tu.median_s;
        int same = memcmp(yf, yu, (size_t)(B * H) * 2) == 0;
        MPI_Allreduce(&same, &allsame, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (me == 0) {
            ts__bench_row row;
            memset(&row, 0, sizeof row);
            row.suite = SUITE;
            row.name = skewed ? "fused_late_rank" : "fused";
            row.shape = shape;
            row.dtype = "fp8xfp4";
            row.threads = R * threads < cores ? R * threads : cores;
            row.t = tf;
            /* weights of the touched experts (all ranks) + their scales: FP4 0.5 B + 1/32 B per value */
            row.bytes = sum[0] * (double)(3 * H * I) * (0.5 + 1.0 / 32.0);
            row.flops = sum[1] * 2.0 * (double)(3 * H * I);
            row.roof = TS__ROOF_DRAM;
            row.baseline = "unfused";
            row.baseline_seconds = tu.median_s;
            ts__bench_report(opts, &row);
            printf("    %s%s: %.1f tokens/expert, %.0f experts touched of %lld; median unfused %.3f ms, fused %.3f "
                   "ms, %.2fx; best %.3f / %.3f ms, %.2fx; bits %s\n",
                   shape, skewed ? " (last rank late)" : "", sum[1] / (double)E, sum[0], (long long)E,
                   tu.median_s * 1e3, tf.median_s * 1e3, tu.median_s / tf.median_s, tu.min_s * 1e3, tf.min_s * 1e3,
                   tu.min_s / tf.min_s, allsame ? "identical" : "DIFFER");
        }
        if (getenv("TS_BENCH_MEGA_MOE_PHASES")) {
            /* rank by rank, mean over the samples (ms): where each path's time goes */
            for (int r = 0; r < R; r++) {
                MPI_Barrier(MPI_COMM_WORLD);
                if (r != me) continue;
                if (getenv("TS_BENCH_MEGA_MOE_AB"))
                    printf("    rank %d phases (ms) grouped: total %.2f gather %.2f L1 %.2f swiglu %.2f L2 %.2f "
                           "wait %.2f combine %.2f\n",
                           me, ph[0][0] * 1e3, ph[0][1] * 1e3, ph[0][2] * 1e3, ph[0][3] * 1e3, ph[0][4] * 1e3,
                           ph[0][5] * 1e3, ph[0][6] * 1e3);
                else
                    printf("    rank %d phases (ms) unfused: total %.2f dispatch %.2f expand %.2f L1 %.2f swiglu %.2f "
                           "L2 %.2f combine %.2f sum %.2f\n",
                           me, ph[0][0] * 1e3, ph[0][1] * 1e3, ph[0][2] * 1e3, ph[0][3] * 1e3, ph[0][4] * 1e3,
                           ph[0][5] * 1e3, ph[0][6] * 1e3, ph[0][7] * 1e3);
                printf("    rank %d phases (ms) fused:   total %.2f gather %.2f L1 %.2f swiglu %.2f L2 %.2f "
                       "wait %.2f combine %.2f\n",
                       me, ph[1][0] * 1e3, ph[1][1] * 1e3, ph[1][2] * 1e3, ph[1][3] * 1e3, ph[1][4] * 1e3,
                       ph[1][5] * 1e3, ph[1][6] * 1e3);
                fflush(stdout);
            }
            MPI_Barrier(MPI_COMM_WORLD);
        }
        if (!allsame) break;
    }
    if (!allsame) rc = 1;
done:
    ts_mega_moe_weights_destroy(w);
    ts_mega_moe_buffer_destroy(buf);
    free(xf), free(yf), free(yu);
    return rc;
}

int ts__suite_mega_moe(const ts__bench_opts *opts) {
    int inited = 0, we_init = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        MPI_Init(NULL, NULL);
        we_init = 1;
    }
    int R, me;
    MPI_Comm_size(MPI_COMM_WORLD, &R);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    const int cores = ts_get_cpu_info()->logical_cpus > 0 ? ts_get_cpu_info()->logical_cpus : 1;
    const int threads = opts->threads > 0 ? opts->threads : (cores / R > 0 ? cores / R : 1);
    const ts__machine *m = NULL;
    if (me == 0) {
        m = ts__probe_machine(R * threads < cores ? R * threads : cores, opts->quick);
        printf("\n== suite mega_moe: %d ranks x %d threads, hidden 4096, intermediate 2048, top-6 ==\n", R, threads);
        ts__bench_print_machine(stdout, m);
        ts__bench_table_header(stdout);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    ts_set_num_threads(threads);
    int rc = 0;
    /* B * R * 6 / E tokens per expert: about 1.5 and 6 at R = 2 (E = 256: about 1; 1.6 GiB of
     * FP4 weights per rank) */
    const int64_t shapes[][3] = {{32, 4, 2048}, {32, 16, 2048}, {64, 8, 2048}, {64, 32, 2048}, {256, 21, 2048},
                                 {32, 4, 128}};
    const char *e256 = getenv("TS_BENCH_MEGA_MOE_E256");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int64_t E = shapes[i][0];
        if (E == 256 && !(e256 && atoi(e256) > 0)) continue; /* ~3 min of setup and calls */
        const int64_t B = ts__max64(1, shapes[i][1] * 2 / R);
        if (E % R != 0) continue;
        rc |= run_shape(opts, R, me, threads, cores, E, B, shapes[i][2]);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    if (we_init) MPI_Finalize();
    return rc;
}

#else

int ts__suite_mega_moe(const ts__bench_opts *opts) {
    (void)opts;
    printf("suite mega_moe: this build has no MPI (the EP module is not built)\n");
    return 0;
}

#endif
