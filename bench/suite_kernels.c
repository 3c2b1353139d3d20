/* `tilestack bench kernels`: the tile-language kernels.
 *
 *  - JIT: cold compile (a module never seen, fresh cache directory: front end + cc + load)
 *    and cache-hit load (front end + key + entry check + dlopen), targets < 2 s and < 20 ms.
 *  - per_token_cast_e4m3 compiled into the library (AOT) and the same source through the JIT
 *    (which compiles for the active ISA) against the hand-written ts__qh_per_token_cast_to_fp8
 *    (gran 128, f32 scales; same bits): GB/s, share of memcpy bandwidth, hand-written time /
 *    tile time (>= 0.9 wanted).
 *  - The 64 x 4096 rows keep their data in L2 (~0.8 MB in and out): their GB/s is the kernel's
 *    compute bound, the most the DRAM-sized rows could reach (shown against memcpy all the same).
 *  - rmsnorm_forward_and_per_token_cast (AOT) against a hand-written AVX2 version of the same
 *    arithmetic (bench/avx2/rmsnorm_cast_hand_avx2.c; bytes compared first), timed in alternation.
 * TS_BENCH_FILTER selects rows by "name shape" substring. */
#include "bench.h"
#include "core/internal.h"
#include "numerics/quant_hand.h"
#include "tilestack/kernels.h"
#include "tilestack/numerics.h"
#include "tilestack/tile.h"

#include <ftw.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The AOT kernel's source, src/kernels/per_token_cast.tile, embedded by the build
 * (cmake/embed_text.cmake): the CLI may run far from the source tree. */
extern const char ts__bench_ptc_source[];

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(p);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static ts__timing timing_of(double *s, int n) {
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    ts__timing t = {s[n / 2], s[0], n, 1};
    return t;
}

/* Cold compiles: each in a fresh cache dir with a source no cache has seen. Then hits. */
static int jit_rows(const ts__bench_opts *opts, const char *filter, ts_tile_kernel **keep, char *keep_dir) {
    const int ncold = opts->quick ? 3 : 5, nhit = opts->quick ? 10 : 30;
    double cold[5], hit[30];
    int failures = 0;
    const size_t n = strlen(ts__bench_ptc_source) + 65;
    char *src = malloc(n);
    if (!src) return 1;
    ts__bench_row row = {.suite = "kernels", .shape = "per_token_cast", .dtype = "-", .threads = 1};
    for (int i = 0; i < ncold; i++) {
        char dir[64];
        snprintf(dir, sizeof dir, "/tmp/ts_bench_jit_XXXXXX");
        if (!mkdtemp(dir)) {
            failures++;
            break;
        }
        snprintf(src, n, "// cold %d %ld %d\n%s", (int)getpid(), (long)(ts__now_s() * 1e6), i, ts__bench_ptc_source);
        ts_tile_options o = {.cache_dir = dir};
        ts_tile_kernel *k = NULL;
        double t0 = ts__now_s();
        ts_status st = ts_tile_compile(src, &o, &k);
        cold[i] = ts__now_s() - t0;
        if (st != TS_OK) {
            row.name = "jit compile (cold)";
            ts__bench_report_error(opts, &row, ts_last_error());
            failures++;
            nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
            free(src);
            return failures;
        }
        if (i + 1 < ncold) {
            ts_tile_kernel_release(k);
            nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
            continue;
        }
        /* the last one stays: its entry is what the hits load */
        ts_tile_kernel_release(k);
        ts_tile_options oh = {.cache_dir = dir};
        for (int j = 0; j < nhit; j++) {
            k = NULL;
            t0 = ts__now_s();
            st = ts_tile_compile(src, &oh, &k);
            hit[j] = ts__now_s() - t0;
            ts_tile_kernel_info info;
            if (st != TS_OK || ts_tile_kernel_info_get(k, &info) != TS_OK || !info.cache_hit) {
                row.name = "jit load (cache hit)";
                ts__bench_report_error(opts, &row, st != TS_OK ? ts_last_error() : "not a cache hit");
                failures++;
                ts_tile_kernel_release(k);
                k = NULL;
                break;
            }
            if (j + 1 < nhit) ts_tile_kernel_release(k);
        }
        *keep = k;
        snprintf(keep_dir, 64, "%s", dir);
    }
    free(src);
    if (ts__bench_wanted(filter, "jit compile (cold)", row.shape)) {
        row.name = "jit compile (cold)";
        row.t = timing_of(cold, ncold);
        ts__bench_report(opts, &row);
    }
    if (!failures && ts__bench_wanted(filter, "jit load (cache hit)", row.shape)) {
        row.name = "jit load (cache hit)";
        row.t = timing_of(hit, nhit);
        ts__bench_report(opts, &row);
    }
    printf("  targets: cold compile < 2 s, cache hit < 20 ms\n");
    return failures;
}

/* ---- per_token_cast: tile (AOT, JIT) vs hand-written ---- */

typedef struct ptc_ctx {
    ts_tensor x, q, sf;
    const ts_tile_kernel *jit;
    int which; /* 0 hand-written, 1 AOT, 2 JIT, 3 memcpy */
    char *mdst;
    const char *msrc;
    int64_t mbytes;
} ptc_ctx;

static void memcpy_range(void *p, int64_t begin, int64_t end, int tid) {
    (void)tid;
    ptc_ctx *c = p;
    memcpy(c->mdst + begin, c->msrc + begin, (size_t)(end - begin));
}

static ts_status run_ptc(void *p) {
    ptc_ctx *c = p;
    switch (c->which) {
    case 0: return ts__qh_per_token_cast_to_fp8(&c->x, false, 128, false, &c->q, &c->sf);
    case 1: return ts_per_token_cast_e4m3(&c->x, &c->q, &c->sf, false);
    case 2: {
        ts_tile_arg a[4] = {ts_tile_arg_tensor(&c->x), ts_tile_arg_tensor(&c->q), ts_tile_arg_tensor(&c->sf),
                            ts_tile_arg_bool(false)};
        return ts_tile_launch(c->jit, "per_token_cast_e4m3", a, 4);
    }
    default:
        ts__parallel_for(c->mbytes, (int64_t)1 << 16, memcpy_range, c);
        return TS_OK;
    }
}

static int ptc_rows(const ts__bench_opts *opts, const char *filter, const ts_tile_kernel *jit,
                    const int *threads, int nthreads) {
    static const int64_t shapes[][2] = {{64, 4096}, {4001, 4096}, {4001, 7168}, {8001, 4096}, {8001, 7168}};
    const int nshapes = opts->quick ? 3 : 5;
    int failures = 0;
    const int64_t maxe = 8001 * 7168;
    uint16_t *x = ts__aligned_alloc((size_t)maxe * 2);
    uint8_t *q = ts__aligned_alloc((size_t)maxe);
    float *sf = ts__aligned_alloc((size_t)8001 * 56 * 4);
    char *mbuf = ts__aligned_alloc((size_t)maxe * 3);
    if (!x || !q || !sf || !mbuf) {
        fprintf(stderr, "tilestack bench: out of memory\n");
        ts__aligned_free(x), ts__aligned_free(q), ts__aligned_free(sf), ts__aligned_free(mbuf);
        return 1;
    }
    memset(q, 0, (size_t)maxe);
    memset(mbuf, 1, (size_t)maxe * 3);
    /* Two input distributions, because both casts pick their encoder per block from its |x|
     * range: "wide", |x| log-uniform over 2^-8 .. 2^8 inside every block (most blocks have
     * codes in the e4m3 subnormal range: the general encoder), and "gauss", N(0, 1) values
     * (blocks whose products are all e4m3 normals: the short encoder). */
    for (int dist = 0; dist < 2; dist++) {
    ts__bench_rng r = {0x9E3779B97F4A7C15ull};
    for (int64_t i = 0; i < maxe; i++) {
        uint64_t v = ts__bench_rng_next(&r);
        if (dist == 0) {
            x[i] = (uint16_t)(((v >> 16) & 0x8000) | ((119 + (v % 16)) << 7) | (v >> 40 & 0x7F));
            continue;
        }
        /* Box-Muller on two 26-bit uniforms in (0, 1) */
        double u1 = ((double)(v >> 38) + 0.5) / 67108864.0, u2 = ((double)(v & 0x3FFFFFF) + 0.5) / 67108864.0;
        x[i] = ts_f32_to_bf16((float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2)));
    }
    const char *dname = dist ? " gauss" : " wide";
    for (int si = 0; si < (dist ? 2 : nshapes); si++) {
        const int64_t t = shapes[si][0], h = shapes[si][1], ng = h / 128;
        char shape[48];
        snprintf(shape, sizeof shape, "%lldx%lld%s", (long long)t, (long long)h, dname);
        ptc_ctx c = {.x = ts_tensor_2d(x, TS_BF16, t, h), .q = ts_tensor_2d(q, TS_E4M3, t, h),
                     .sf = ts_tensor_2d(sf, TS_F32, t, ng), .jit = jit};
        /* read bf16, write e4m3 + scales */
        const double bytes = 2.0 * (double)(t * h) + (double)(t * h) + 4.0 * (double)(t * ng);
        c.mbytes = (int64_t)(bytes / 2);
        c.msrc = mbuf;
        c.mdst = mbuf + c.mbytes;
        for (int ti = 0; ti < nthreads; ti++) {
            (void)ts_set_num_threads(threads[ti]);
            /* hand-written, AOT, JIT and memcpy in alternation: their ratios are the point */
            ts__timing tt[4] = {0}, tv[4];
            ptc_ctx cv[4];
            void *ctxs[4];
            int nv = 0, slot[4];
            for (int w = 0; w < 4; w++) {
                if (w == 2 && !jit) continue;
                cv[nv] = c, cv[nv].which = w, ctxs[nv] = &cv[nv], slot[nv++] = w;
            }
            ts_status st = ts__bench_time_interleaved(run_ptc, ctxs, nv, opts->quick, tv);
            for (int v = 0; v < nv && st == TS_OK; v++) tt[slot[v]] = tv[v];
            ts__bench_row row = {.suite = "kernels", .shape = shape, .dtype = "bf16->e4m3", .threads = threads[ti],
                                 .bytes = bytes, .roof = TS__ROOF_MEMCPY};
            if (st != TS_OK) {
                row.name = "per_token_cast_e4m3";
                ts__bench_report_error(opts, &row, ts_last_error());
                failures++;
                continue;
            }
            static const char *const names[3] = {"per_token_cast hand-written", "per_token_cast tile AOT",
                                                 "per_token_cast tile JIT"};
            for (int w = 0; w < 3; w++) {
                if (w == 2 && !jit) continue;
                if (!ts__bench_wanted(filter, names[w], shape)) continue;
                row.name = names[w];
                row.t = tt[w];
                row.baseline = w == 0 ? "memcpy" : "hand";
                row.baseline_seconds = w == 0 ? tt[3].median_s : tt[0].median_s;
                ts__bench_report(opts, &row);
            }
        }
    }
    }
    ts__aligned_free(x), ts__aligned_free(q), ts__aligned_free(sf), ts__aligned_free(mbuf);
    return failures;
}

/* rmsnorm + per-token cast: the tile kernel (AOT) against the hand-written AVX2 version in
 * bench/avx2/rmsnorm_cast_hand_avx2.c (same arithmetic; the bytes are compared first). */
int ts__bench_rmsnorm_cast_hand_avx2(const uint16_t *x, const uint16_t *w, int64_t T, int64_t H, float eps,
                                     int64_t gs, bool round_sf, uint8_t *q, float *sf);
typedef struct rms_ctx {
    int which;
    ts_tensor x, w, q, sf;
} rms_ctx;

static ts_status run_rms(void *p) {
    rms_ctx *c = p;
    if (c->which == 1) return ts_rmsnorm_forward_and_per_token_cast(&c->x, &c->w, &c->q, &c->sf, 1e-6f, 128, true);
#ifdef TS_HAVE_AVX2_KERNELS
    int r = ts__bench_rmsnorm_cast_hand_avx2(c->x.data, c->w.data, c->x.shape[0], c->x.shape[1], 1e-6f, 128, true,
                                             c->q.data, c->sf.data);
    return r ? TS_ERR_UNSUPPORTED : TS_OK;
#else
    return TS_ERR_UNSUPPORTED;
#endif
}

static int rms_rows(const ts__bench_opts *opts, const char *filter, const int *threads, int nthreads) {
#ifndef TS_HAVE_AVX2_KERNELS
    (void)opts, (void)filter, (void)threads, (void)nthreads;
    return 0; /* the comparator is AVX2 code */
#else
    if (!ts__isa_avx2_up(ts__active_isa())) return 0;
    static const int64_t shapes[][2] = {{64, 4096}, {4001, 4096}, {4001, 7168}, {8001, 4096}, {8001, 7168}};
    const int nshapes = opts->quick ? 3 : 5;
    const int64_t maxe = 8001 * 7168;
    int failures = 0;
    uint16_t *x = ts__aligned_alloc((size_t)maxe * 2), *w = ts__aligned_alloc(7168 * 2);
    uint8_t *q[2] = {ts__aligned_alloc((size_t)maxe), ts__aligned_alloc((size_t)maxe)};
    float *sf[2] = {ts__aligned_alloc((size_t)8001 * 56 * 4), ts__aligned_alloc((size_t)8001 * 56 * 4)};
    if (!x || !w || !q[0] || !q[1] || !sf[0] || !sf[1]) {
        fprintf(stderr, "tilestack bench: out of memory for rmsnorm+cast\n");
        failures = 1;
        goto out;
    }
    ts__bench_rng r = {0x9E3779B97F4A7C15ull};
    for (int64_t i = 0; i < maxe; i++) { /* |x| ~ 2^-8 .. 2^8, both signs */
        uint64_t v = ts__bench_rng_next(&r);
        x[i] = (uint16_t)(((v >> 16) & 0x8000) | ((119 + (v % 16)) << 7) | ((v >> 40) & 0x7F));
    }
    for (int i = 0; i < 7168; i++) w[i] = ts_f32_to_bf16(0.5f + (float)(i % 17) / 16.0f);
    for (int si = 0; si < nshapes; si++) {
        const int64_t t = shapes[si][0], h = shapes[si][1];
        char shape[32];
        snprintf(shape, sizeof shape, "%lldx%lld", (long long)t, (long long)h);
        if (!ts__bench_wanted(filter, "rmsnorm+cast", shape)) continue;
        rms_ctx c[2];
        void *ctxs[2];
        for (int v = 0; v < 2; v++) {
            c[v] = (rms_ctx){.which = v, .x = ts_tensor_2d(x, TS_BF16, t, h), .w = ts_tensor_1d(w, TS_BF16, h),
                             .q = ts_tensor_2d(q[v], TS_E4M3, t, h), .sf = ts_tensor_2d(sf[v], TS_F32, t, h / 128)};
            ctxs[v] = &c[v];
        }
        const double bytes = 2.0 * (double)(t * h) + (double)(t * h) + 4.0 * (double)(t * h / 128);
        ts__bench_row row = {.suite = "kernels", .shape = shape, .dtype = "bf16->e4m3", .bytes = bytes,
                             .roof = TS__ROOF_MEMCPY, .name = "rmsnorm+cast"};
        ts_status st = run_rms(&c[0]);
        if (st == TS_OK) st = run_rms(&c[1]);
        if (st == TS_OK && (memcmp(q[0], q[1], (size_t)(t * h)) || memcmp(sf[0], sf[1], (size_t)(t * h / 128) * 4))) {
            ts__bench_report_error(opts, &row, "the tile kernel and the hand-written one differ");
            failures++;
            continue;
        }
        for (int ti = 0; ti < nthreads && st == TS_OK; ti++) {
            (void)ts_set_num_threads(threads[ti]);
            ts__timing tt[2];
            st = ts__bench_time_interleaved(run_rms, ctxs, 2, opts->quick, tt);
            if (st != TS_OK) break;
            row.threads = threads[ti];
            static const char *const names[2] = {"rmsnorm+cast hand-written", "rmsnorm+cast tile AOT"};
            for (int v = 0; v < 2; v++) {
                row.name = names[v];
                row.t = tt[v];
                row.baseline = v ? "hand" : NULL;
                row.baseline_seconds = v ? tt[0].median_s : 0;
                ts__bench_report(opts, &row);
            }
        }
        if (st != TS_OK) {
            ts__bench_report_error(opts, &row, ts_last_error());
            failures++;
        }
    }
out:
    ts__aligned_free(x), ts__aligned_free(w);
    for (int v = 0; v < 2; v++) ts__aligned_free(q[v]), ts__aligned_free(sf[v]);
    return failures;
#endif
}

/* The TileKernels rows (bench/suite_kernels_tk.c). */
int ts__suite_kernels_tk(const ts__bench_opts *opts, const char *filter, const int *threads, int nthreads);

int ts__suite_kernels(const ts__bench_opts *opts);
int ts__suite_kernels(const ts__bench_opts *opts) {
    int threads[2];
    const int nthreads = ts__bench_thread_list(opts, threads);
    for (int t = 0; t < nthreads; t++) ts__bench_print_machine(stdout, ts__probe_machine(threads[t], opts->quick));
    const char *filter = getenv("TS_BENCH_FILTER");
    printf("\nsuite kernels (ISA %s); frac = share of the roofline; ratio = baseline time / time "
           "(hand = hand-written ts__qh_per_token_cast_to_fp8)\n", opts->isa_name ? opts->isa_name : "?");
    ts__bench_table_header(stdout);
    const int saved = ts_get_num_threads();
    ts_tile_kernel *jit = NULL;
    char dir[64] = "";
    int failures = jit_rows(opts, filter, &jit, dir);
    failures += ptc_rows(opts, filter, jit, threads, nthreads);
    failures += rms_rows(opts, filter, threads, nthreads);
    failures += ts__suite_kernels_tk(opts, filter, threads, nthreads);
    (void)ts_set_num_threads(saved);
    ts_tile_kernel_release(jit);
    if (dir[0]) nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    return failures ? 1 : 0;
}
