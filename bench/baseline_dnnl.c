/* The oneDNN matmul baseline of the gemm suite (optional: TS_HAVE_DNNL, when CMake finds
 * libdnnl and <oneapi/dnnl/dnnl.h>). D[m, n] = A[m, k] · B[n, k]ᵀ, f32 x f32 -> f32 or
 * bf16 x bf16 -> bf16 (f32 accumulation), the weights given as the same row-major [n, k]
 * matrices the kernels read (oneDNN's "ba" layout of a [k, n] weight, no reorder), rotating
 * over copies like the OpenBLAS baseline.
 *
 * oneDNN 2.x (op descriptors) and 3.x (primitive-descriptor constructors) are both handled.
 * Threads: with the OpenMP runtime (Debian's build) the count is set through
 * omp_set_num_threads, looked up at run time so this file needs no -fopenmp; a sequential
 * build only runs at 1 thread; a TBB or threadpool build is not driven (no baseline). */
#include "bench.h"

#ifdef TS_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#define TS__DNNL_MAX_COPIES 72 /* the gemm suite's MAX_COPIES */

struct ts__dnnl_mm {
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dnnl_memory_t a, d, b[TS__DNNL_MAX_COPIES];
    int ncopies, next;
    char impl[64];
};

static bool set_threads(int threads, char *why, size_t cap) {
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
    /* libgomp is loaded with libdnnl */
    void (*set)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "omp_set_num_threads");
    if (!set) {
        snprintf(why, cap, "omp_set_num_threads not found");
        return false;
    }
    set(threads);
    return true;
#elif DNNL_CPU_RUNTIME == DNNL_RUNTIME_SEQ
    if (threads == 1) return true;
    snprintf(why, cap, "sequential oneDNN build");
    return false;
#else
    (void)threads;
    snprintf(why, cap, "oneDNN threading runtime not driven by the bench");
    return false;
#endif
}

bool ts__dnnl_set_threads(int threads) {
    char why[64];
    return set_threads(threads, why, sizeof why);
}

void ts__dnnl_mm_destroy(ts__dnnl_mm *p) {
    if (!p) return;
    for (int i = 0; i < p->ncopies; i++)
        if (p->b[i]) dnnl_memory_destroy(p->b[i]);
    if (p->a) dnnl_memory_destroy(p->a);
    if (p->d) dnnl_memory_destroy(p->d);
    if (p->prim) dnnl_primitive_destroy(p->prim);
    if (p->pd) dnnl_primitive_desc_destroy(p->pd);
    if (p->stream) dnnl_stream_destroy(p->stream);
    if (p->eng) dnnl_engine_destroy(p->eng);
    free(p);
}

#if DNNL_VERSION_MAJOR >= 3
typedef dnnl_memory_desc_t ts__md; /* an opaque handle */
static dnnl_status_t md_make(ts__md *md, int64_t d0, int64_t d1, dnnl_data_type_t dt,
                             dnnl_format_tag_t tag) {
    dnnl_dims_t dims = {d0, d1};
    return dnnl_memory_desc_create_with_tag(md, 2, dims, dt, tag);
}
#define TS__MD(x) (x)
static void md_free(ts__md md) { dnnl_memory_desc_destroy(md); }
#else
typedef dnnl_memory_desc_t ts__md; /* a struct */
static dnnl_status_t md_make(ts__md *md, int64_t d0, int64_t d1, dnnl_data_type_t dt,
                             dnnl_format_tag_t tag) {
    dnnl_dims_t dims = {d0, d1};
    return dnnl_memory_desc_init_by_tag(md, 2, dims, dt, tag);
}
#define TS__MD(x) (&(x))
static void md_free(ts__md md) { (void)md; }
#endif

ts__dnnl_mm *ts__dnnl_mm_create(int64_t m, int64_t n, int64_t k, bool bf16, void *a,
                                void *const *b, int ncopies, void *d, int threads, char *why,
                                size_t cap) {
    why[0] = '\0';
    if (ncopies < 1 || ncopies > TS__DNNL_MAX_COPIES) {
        snprintf(why, cap, "bad copy count");
        return NULL;
    }
    if (!set_threads(threads, why, cap)) return NULL;
    ts__dnnl_mm *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(why, cap, "out of memory");
        return NULL;
    }
    const dnnl_data_type_t dt = bf16 ? dnnl_bf16 : dnnl_f32;
    ts__md amd, bmd, dmd;
    bool have_md = false;
    dnnl_status_t st = dnnl_engine_create(&p->eng, dnnl_cpu, 0);
    if (st == dnnl_success) st = dnnl_stream_create(&p->stream, p->eng, dnnl_stream_default_flags);
    if (st == dnnl_success) st = md_make(&amd, m, k, dt, dnnl_ab);
    if (st == dnnl_success) st = md_make(&bmd, k, n, dt, dnnl_ba); /* [k, n] stored as [n, k] */
    if (st == dnnl_success) st = md_make(&dmd, m, n, dt, dnnl_ab);
    if (st == dnnl_success) {
        have_md = true;
#if DNNL_VERSION_MAJOR >= 3
        st = dnnl_matmul_primitive_desc_create(&p->pd, p->eng, amd, bmd, NULL, dmd, NULL);
#else
        dnnl_matmul_desc_t desc;
        st = dnnl_matmul_desc_init(&desc, &amd, &bmd, NULL, &dmd);
        if (st == dnnl_success) st = dnnl_primitive_desc_create(&p->pd, &desc, NULL, p->eng, NULL);
#endif
    }
    if (st == dnnl_success) st = dnnl_primitive_create(&p->prim, p->pd);
    if (st == dnnl_success) st = dnnl_memory_create(&p->a, TS__MD(amd), p->eng, a);
    if (st == dnnl_success) st = dnnl_memory_create(&p->d, TS__MD(dmd), p->eng, d);
    for (int i = 0; i < ncopies && st == dnnl_success; i++) {
        st = dnnl_memory_create(&p->b[i], TS__MD(bmd), p->eng, b[i]);
        if (st == dnnl_success) p->ncopies = i + 1;
    }
    if (have_md) md_free(amd), md_free(bmd), md_free(dmd);
    if (st != dnnl_success) {
        snprintf(why, cap, "oneDNN status %d (%s matmul [%lld,%lld,%lld])", (int)st,
                 bf16 ? "bf16" : "f32", (long long)m, (long long)n, (long long)k);
        ts__dnnl_mm_destroy(p);
        return NULL;
    }
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(p->pd, dnnl_query_impl_info_str, 0, (void *)&impl) ==
            dnnl_success && impl)
        snprintf(p->impl, sizeof p->impl, "%s", impl);
    return p;
}

const char *ts__dnnl_mm_impl(const ts__dnnl_mm *p) { return p->impl; }

ts_status ts__dnnl_mm_run(void *ctx) {
    ts__dnnl_mm *p = (ts__dnnl_mm *)ctx;
    dnnl_exec_arg_t args[3] = {
        {DNNL_ARG_SRC, p->a}, {DNNL_ARG_WEIGHTS, p->b[p->next]}, {DNNL_ARG_DST, p->d}};
    p->next = (p->next + 1) % p->ncopies;
    if (dnnl_primitive_execute(p->prim, p->stream, 3, args) != dnnl_success) return TS_ERR_INTERNAL;
    return dnnl_stream_wait(p->stream) == dnnl_success ? TS_OK : TS_ERR_INTERNAL;
}

void ts__dnnl_version(char *buf, size_t cap) {
    const dnnl_version_t *v = dnnl_version();
    snprintf(buf, cap, "oneDNN %d.%d.%d (%s)", v->major, v->minor, v->patch,
             v->cpu_runtime == DNNL_RUNTIME_OMP   ? "OpenMP"
             : v->cpu_runtime == DNNL_RUNTIME_SEQ ? "sequential"
                                                  : "other runtime");
}
#endif
