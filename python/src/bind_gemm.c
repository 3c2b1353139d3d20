/* The native half of deep_gemm: GEMMs (dense, m-grouped, k-grouped, special), the utils casts,
 * testing.calc_diff and the runtime knobs. The Python wrappers (python/deep_gemm/) take
 * upstream's keywords and defaults and call these with every argument positional. */
#include "tsview.h"

#include "tilestack/gemm.h"
#include "tilestack/quant.h"

/* Packed FP4 travels as torch.int8 (upstream's kPackedFP4): the GEMM operands take it as e2m1. */
static int operand(PyObject *o, const char *fn, const char *arg, ts_tensor *t) {
    if (tsp_view(o, fn, arg, 0, t)) return -1;
    if (t->dtype == TS_I8) t->dtype = TS_E2M1X2;
    return 0;
}

static int flag(PyObject *o, bool *v) {
    int r = PyObject_IsTrue(o);
    if (r < 0) return -1;
    *v = r;
    return 0;
}

/* recipe [3], recipe_a [2], recipe_b [2] from Python; pointers NULL where not given. */
typedef struct {
    int64_t r[3], ra[2], rb[2];
    const int64_t *pr, *pra, *prb;
} recipes;

static int parse_recipes(PyObject *r, PyObject *ra, PyObject *rb, const char *fn, recipes *out) {
    int p0, p1, p2;
    if (tsp_int_tuple(r, fn, "recipe", 3, out->r, &p0) ||
        tsp_int_tuple(ra, fn, "recipe_a", 2, out->ra, &p1) ||
        tsp_int_tuple(rb, fn, "recipe_b", 2, out->rb, &p2))
        return -1;
    out->pr = p0 ? out->r : NULL;
    out->pra = p1 ? out->ra : NULL;
    out->prb = p2 ? out->rb : NULL;
    return 0;
}

#define NARGS(n)                                                                        \
    do {                                                                                \
        if (nargs != (n)) return PyErr_Format(PyExc_TypeError, "%s: %d arguments expected", fn, (n)); \
    } while (0)
#define DONE(st) return (st) != TS_OK ? tsp_raise_status((st), fn) : (Py_INCREF(Py_None), Py_None)

typedef ts_status (*fp8_fn)(const ts_tensor *, const ts_tensor *, const ts_tensor *,
                            const ts_tensor *, ts_tensor *, const ts_tensor *, const int64_t *,
                            const int64_t *, const int64_t *, const char *, bool);
typedef ts_status (*bf16_fn)(const ts_tensor *, const ts_tensor *, ts_tensor *, const ts_tensor *,
                             const char *);

static int layout_arg(PyObject *o, int n, int *v) {
    long x = PyLong_AsLong(o);
    if (x == -1 && PyErr_Occurred()) return -1;
    if (x < 0 || x >= n) {
        PyErr_SetString(PyExc_ValueError, "_tilestack: bad layout index");
        return -1;
    }
    *v = (int)x;
    return 0;
}

/* fp8_gemm(layout, a, sfa, b, sfb, d, c, recipe, recipe_a, recipe_b, compiled_dims, disable) */
PyObject *tsp_fp8_gemm(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static const fp8_fn fns[4] = {ts_fp8_fp4_gemm_nt, ts_fp8_fp4_gemm_nn, ts_fp8_fp4_gemm_tn,
                                  ts_fp8_fp4_gemm_tt};
    static const char *const names[4] = {"deep_gemm.fp8_fp4_gemm_nt", "deep_gemm.fp8_fp4_gemm_nn",
                                         "deep_gemm.fp8_fp4_gemm_tn", "deep_gemm.fp8_fp4_gemm_tt"};
    const char *fn = "deep_gemm.fp8_fp4_gemm";
    (void)self;
    NARGS(12);
    int l;
    if (layout_arg(args[0], 4, &l)) return NULL;
    fn = names[l];
    ts_tensor a, sfa, b, sfb, d, cs;
    const ts_tensor *c;
    recipes rc;
    const char *cd;
    bool dis;
    if (operand(args[1], fn, "a", &a) || tsp_view(args[2], fn, "sfa", 0, &sfa) ||
        operand(args[3], fn, "b", &b) || tsp_view(args[4], fn, "sfb", 0, &sfb) ||
        tsp_view(args[5], fn, "d", TSP_OUTPUT, &d) || tsp_view_opt(args[6], fn, "c", &cs, &c) ||
        parse_recipes(args[7], args[8], args[9], fn, &rc) ||
        tsp_opt_str(args[10], fn, "compiled_dims", &cd) || flag(args[11], &dis))
        return NULL;
    ts_status st;
    TSP_CALL(st, fns[l](&a, &sfa, &b, &sfb, &d, c, rc.pr, rc.pra, rc.prb, cd, dis));
    DONE(st);
}

/* bf16_gemm(layout, a, b, d, c, compiled_dims) */
PyObject *tsp_bf16_gemm(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static const bf16_fn fns[4] = {ts_bf16_gemm_nt, ts_bf16_gemm_nn, ts_bf16_gemm_tn, ts_bf16_gemm_tt};
    static const char *const names[4] = {"deep_gemm.bf16_gemm_nt", "deep_gemm.bf16_gemm_nn",
                                         "deep_gemm.bf16_gemm_tn", "deep_gemm.bf16_gemm_tt"};
    const char *fn = "deep_gemm.bf16_gemm";
    (void)self;
    NARGS(6);
    int l;
    if (layout_arg(args[0], 4, &l)) return NULL;
    fn = names[l];
    ts_tensor a, b, d, cs;
    const ts_tensor *c;
    const char *cd;
    if (tsp_view(args[1], fn, "a", 0, &a) || tsp_view(args[2], fn, "b", 0, &b) ||
        tsp_view(args[3], fn, "d", TSP_OUTPUT, &d) || tsp_view_opt(args[4], fn, "c", &cs, &c) ||
        tsp_opt_str(args[5], fn, "compiled_dims", &cd))
        return NULL;
    ts_status st;
    TSP_CALL(st, fns[l](&a, &b, &d, c, cd));
    DONE(st);
}

static int64_t opt_i64(PyObject *o, int64_t dflt) {
    return o == Py_None ? dflt : (int64_t)PyLong_AsLongLong(o);
}

/* m_grouped_fp8_contiguous(layout 0 nt | 1 nn, a, sfa, b, sfb, d, grouped_layout, recipe,
 *   recipe_a, recipe_b, compiled_dims, disable, use_psum_layout, ensure_zero_padding, expected_m) */
PyObject *tsp_m_grouped_fp8_contiguous(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    const char *fn = "deep_gemm.m_grouped_fp8_fp4_gemm_contiguous";
    (void)self;
    NARGS(15);
    int l;
    if (layout_arg(args[0], 2, &l)) return NULL;
    fn = l ? "deep_gemm.m_grouped_fp8_fp4_gemm_nn_contiguous" : "deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous";
    ts_tensor a, sfa, b, sfb, d, gl;
    recipes rc;
    const char *cd;
    bool dis, psum, zero;
    if (operand(args[1], fn, "a", &a) || tsp_view(args[2], fn, "sfa", 0, &sfa) ||
        operand(args[3], fn, "b", &b) || tsp_view(args[4], fn, "sfb", 0, &sfb) ||
        tsp_view(args[5], fn, "d", TSP_OUTPUT, &d) || tsp_view(args[6], fn, "grouped_layout", 0, &gl) ||
        parse_recipes(args[7], args[8], args[9], fn, &rc) ||
        tsp_opt_str(args[10], fn, "compiled_dims", &cd) || flag(args[11], &dis) ||
        flag(args[12], &psum) || flag(args[13], &zero))
        return NULL;
    int64_t em = opt_i64(args[14], 0);
    if (PyErr_Occurred()) return NULL;
    ts_status st;
    if (l == 0)
        TSP_CALL(st, ts_m_grouped_fp8_fp4_gemm_nt_contiguous(&a, &sfa, &b, &sfb, &d, &gl, rc.pr, rc.pra,
                                                             rc.prb, cd, dis, psum, zero, em));
    else
        TSP_CALL(st, ts_m_grouped_fp8_fp4_gemm_nn_contiguous(&a, &sfa, &b, &sfb, &d, &gl, rc.pr, rc.pra,
                                                             rc.prb, cd, dis, psum, zero));
    DONE(st);
}

/* m_grouped_bf16_contiguous(layout, a, b, d, grouped_layout, compiled_dims, use_psum_layout,
 *   ensure_zero_padding, expected_m) */
PyObject *tsp_m_grouped_bf16_contiguous(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    const char *fn = "deep_gemm.m_grouped_bf16_gemm_contiguous";
    (void)self;
    NARGS(9);
    int l;
    if (layout_arg(args[0], 2, &l)) return NULL;
    fn = l ? "deep_gemm.m_grouped_bf16_gemm_nn_contiguous" : "deep_gemm.m_grouped_bf16_gemm_nt_contiguous";
    ts_tensor a, b, d, gl;
    const char *cd;
    bool psum, zero;
    if (tsp_view(args[1], fn, "a", 0, &a) || tsp_view(args[2], fn, "b", 0, &b) ||
        tsp_view(args[3], fn, "d", TSP_OUTPUT, &d) || tsp_view(args[4], fn, "grouped_layout", 0, &gl) ||
        tsp_opt_str(args[5], fn, "compiled_dims", &cd) || flag(args[6], &psum) || flag(args[7], &zero))
        return NULL;
    int64_t em = opt_i64(args[8], 0);
    if (PyErr_Occurred()) return NULL;
    ts_status st;
    if (l == 0)
        TSP_CALL(st, ts_m_grouped_bf16_gemm_nt_contiguous(&a, &b, &d, &gl, cd, psum, zero, em));
    else
        TSP_CALL(st, ts_m_grouped_bf16_gemm_nn_contiguous(&a, &b, &d, &gl, cd, psum, zero, em));
    DONE(st);
}

/* m_grouped_fp8_masked(a, sfa, b, sfb, d, masked_m, expected_m, recipe, recipe_a, recipe_b,
 *   compiled_dims, disable) */
PyObject *tsp_m_grouped_fp8_masked(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    const char *fn = "deep_gemm.m_grouped_fp8_fp4_gemm_nt_masked";
    (void)self;
    NARGS(12);
    ts_tensor a, sfa, b, sfb, d, mm;
    recipes rc;
    const char *cd;
    bool dis;
    if (operand(args[0], fn, "a", &a) || tsp_view(args[1], fn, "sfa", 0, &sfa) ||
        operand(args[2], fn, "b", &b) || tsp_view(args[3], fn, "sfb", 0, &sfb) ||
        tsp_view(args[4], fn, "d", TSP_OUTPUT, &d) || tsp_view(args[5], fn, "masked_m", 0, &mm) ||
        parse_recipes(args[7], args[8], args[9], fn, &rc) ||
        tsp_opt_str(args[10], fn, "compiled_dims", &cd) || flag(args[11], &dis))
        return NULL;
    int64_t em = PyLong_AsLongLong(args[6]);
    if (PyErr_Occurred()) return NULL;
    ts_status st;
    TSP_CALL(st, ts_m_grouped_fp8_fp4_gemm_nt_masked(&a, &sfa, &b, &sfb, &d, &mm, em, rc.pr, rc.pra,
                                                     rc.prb, cd, dis));
    DONE(st);
}

/* m_grouped_bf16_masked(a, b, d, masked_m, expected_m, compiled_dims) */
PyObject *tsp_m_grouped_bf16_masked(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    const char *fn = "deep_gemm.m_grouped_bf16_gemm_nt_masked";
    (void)self;
    NARGS(6);
    ts_tensor a, b, d, mm;
    const char *cd;
    if (tsp_view(args[0], fn, "a", 0, &a) || tsp_view(args[1], fn, "b", 0, &b) ||
        tsp_view(args[2], fn, "d", TSP_OUTPUT, &d) || tsp_view(args[3], fn, "masked_m", 0, &mm) ||
        tsp_opt_str(args[5], fn, "compiled_dims", &cd))
        return NULL;
    int64_t em = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred()) return NULL;
    ts_status st;
    TSP_CALL(st, ts_m_grouped_bf16_gemm_nt_masked(&a, &b, &d, &mm, em, cd));
    DONE(st);
}

/* ks_cpu: None or a sequence of ints -> malloc'd array (NULL, 0 for None / empty). */
static int parse_ks(PyObject *o, const char *fn, int64_t **ks, int64_t *n) {
    *ks = NULL;
    *n = 0;
    if (o == Py_None) return 0;
    PyObject *seq = PySequence_Fast(o, "ks_cpu must be a list of ints");
    if (!seq) return -1;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
    if (len > 0 && !(*ks = PyMem_Malloc((size_t)len * sizeof **ks))) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *v = PySequence_Fast_GET_ITEM(seq, i);
        long long x = PyLong_Check(v) ? PyLong_AsLongLong(v) : -1;
        if (!PyLong_Check(v) || (x == -1 && PyErr_Occurred())) {
            Py_DECREF(seq);
            PyMem_Free(*ks);
            *ks = NULL;
            if (!PyErr_Occurred())
                PyErr_Format(tsp_TypeError, "%s: argument 'ks_cpu' must hold ints", fn);
            return -1;
        }
        (*ks)[i] = x;
    }
    Py_DECREF(seq);
    *n = len;
    return 0;
}

/* k_grouped_fp8(layout 0 tn | 1 nt, a, sfa, b, sfb, d, ks_cpu, grouped_layout, c, recipe,
 *   compiled_dims, use_psum_layout) */
PyObject *tsp_k_grouped_fp8(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    const char *fn = "deep_gemm.k_grouped_fp8_gemm_contiguous";
    (void)self;
    NARGS(12);
    int l;
    if (layout_arg(args[0], 2, &l)) return NULL;
    fn = l ? "deep_gemm.k_grouped_fp8_gemm_nt_contiguous" : "deep_gemm.k_grouped_fp8_gemm_tn_contiguous";
    ts_tensor a, sfa, b, sfb, d, gls, cs;
    const ts_tensor *gl, *c;
    int64_t r[3];
    int have_r;
    const char *cd;
    bool psum;
    if (tsp_view(args[1], fn, "a", 0, &a) || tsp_view(args[2], fn, "sfa", 0, &sfa) ||
        tsp_view(args[3], fn, "b", 0, &b) || tsp_view(args[4], fn, "sfb", 0, &sfb) ||
        tsp_view(args[5], fn, "d", TSP_OUTPUT, &d) ||
        tsp_view_opt(args[7], fn, "grouped_layout", &gls, &gl) ||
        tsp_view_opt(args[8], fn, "c", &cs, &c) || tsp_int_tuple(args[9], fn, "recipe", 3, r, &have_r) ||
        tsp_opt_str(args[10], fn, "compiled_dims", &cd) || flag(args[11], &psum))
        return NULL;
    int64_t *ks, nks;
    if (parse_ks(args[6], fn, &ks, &nks)) return NULL;
    ts_status st;
    if (l == 0)
        TSP_CALL(st, ts_k_grouped_fp8_gemm_tn_contiguous(&a, &sfa, &b, &sfb, &d, ks, nks, gl, c,
                                                         have_r ? r : NULL, cd, psum));
    else
        TSP_CALL(st, ts_k_grouped_fp8_gemm_nt_contiguous(&a, &sfa, &b, &sfb, &d, ks, nks, gl, c,
                                                         have_r ? r : NULL, cd, psum));
    PyMem_Free(ks);
    DONE(st);
}

/* k_grouped_bf16_tn(a, b, d, ks_cpu, grouped_layout, c, compiled_dims, use_psum_layout) */
PyObject *tsp_k_grouped_bf16(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    const char *fn = "deep_gemm.k_grouped_bf16_gemm_tn_contiguous";
    (void)self;
    NARGS(8);
    ts_tensor a, b, d, gls, cs;
    const ts_tensor *gl, *c;
    const char *cd;
    bool psum;
    if (tsp_view(args[0], fn, "a", 0, &a) || tsp_view(args[1], fn, "b", 0, &b) ||
        tsp_view(args[2], fn, "d", TSP_OUTPUT, &d) ||
        tsp_view_opt(args[4], fn, "grouped_layout", &gls, &gl) ||
        tsp_view_opt(args[5], fn, "c", &cs, &c) || tsp_opt_str(args[6], fn, "compiled_dims", &cd) ||
        flag(args[7], &psum))
        return NULL;
    int64_t *ks, nks;
    if (parse_ks(args[3], fn, &ks, &nks)) return NULL;
    ts_status st;
    TSP_CALL(st, ts_k_grouped_bf16_gemm_tn_contiguous(&a, &b, &d, ks, nks, gl, c, cd, psum));
    PyMem_Free(ks);
    DONE(st);
}

/* einsum(expr, a, b, d, c, use_cublaslt) */
PyObject *tsp_einsum(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    const char *fn = "deep_gemm.einsum";
    (void)self;
    NARGS(6);
    const char *expr;
    ts_tensor a, b, d, cs;
    const ts_tensor *c;
    bool cublas;
    if (tsp_opt_str(args[0], fn, "expr", &expr) || tsp_view(args[1], fn, "a", 0, &a) ||
        tsp_view(args[2], fn, "b", 0, &b) || tsp_view(args[3], fn, "d", TSP_OUTPUT, &d) ||
        tsp_view_opt(args[4], fn, "c", &cs, &c) || flag(args[5], &cublas))
        return NULL;
    ts_status st;
    TSP_CALL(st, ts_einsum(expr, &a, &b, &d, c, cublas));
    DONE(st);
}

/* fp8_einsum(expr, a, sfa, b, sfb, d, c, recipe) */
PyObject *tsp_fp8_einsum(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    const char *fn = "deep_gemm.fp8_einsum";
    (void)self;
    NARGS(8);
    const char *expr;
    ts_tensor a, sfa, b, sfb, d, cs;
    const ts_tensor *c;
    int64_t r[3];
    int have_r;
    if (tsp_opt_str(args[0], fn, "expr", &expr) || tsp_view(args[1], fn, "a", 0, &a) ||
        tsp_view(args[2], fn, "sfa", 0, &sfa) || tsp_view(args[3], fn, "b", 0, &b) ||
        tsp_view(args[4], fn, "sfb", 0, &sfb) || tsp_view(args[5], fn, "d", TSP_OUTPUT, &d) ||
        tsp_view_opt(args[6], fn, "c", &cs, &c) || tsp_int_tuple(args[7], fn, "recipe", 3, r, &have_r))
        return NULL;
    ts_status st;
    TSP_CALL(st, ts_fp8_einsum(expr, &a, &sfa, &b, &sfb, &d, c, have_r ? r : NULL));
    DONE(st);
}

/* tf32_hc_prenorm_gemm(a, b, d, sqr_sum, num_splits or None) */
PyObject *tsp_tf32_hc_prenorm_gemm(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    const char *fn = "deep_gemm.tf32_hc_prenorm_gemm";
    (void)self;
    NARGS(5);
    ts_tensor a, b, d, s;
    if (tsp_view(args[0], fn, "a", 0, &a) || tsp_view(args[1], fn, "b", 0, &b) ||
        tsp_view(args[2], fn, "d", TSP_OUTPUT, &d) || tsp_view(args[3], fn, "sqr_sum", TSP_OUTPUT, &s))
        return NULL;
    int64_t ns = opt_i64(args[4], 0);
    if (PyErr_Occurred()) return NULL;
    ts_status st;
    TSP_CALL(st, ts_tf32_hc_prenorm_gemm(&a, &b, &d, &s, ns));
    DONE(st);
}

/* fp8_gemm_nt_skip_head_mid(a, sfa, b, sfb, d, head_splits, recipe, compiled_dims, disable) */
PyObject *tsp_fp8_gemm_nt_skip_head_mid(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    const char *fn = "deep_gemm.fp8_gemm_nt_skip_head_mid";
    (void)self;
    NARGS(9);
    ts_tensor a, sfa, b, sfb, d;
    int64_t hs[3], r[3];
    int have_hs, have_r;
    const char *cd;
    bool dis;
    if (tsp_view(args[0], fn, "a", 0, &a) || tsp_view(args[1], fn, "sfa", 0, &sfa) ||
        tsp_view(args[2], fn, "b", 0, &b) || tsp_view(args[3], fn, "sfb", 0, &sfb) ||
        tsp_view(args[4], fn, "d", TSP_OUTPUT, &d) ||
        tsp_int_tuple(args[5], fn, "head_splits", 3, hs, &have_hs) ||
        tsp_int_tuple(args[6], fn, "recipe", 3, r, &have_r) ||
        tsp_opt_str(args[7], fn, "compiled_dims", &cd) || flag(args[8], &dis))
        return NULL;
    if (!have_hs) return PyErr_Format(tsp_TypeError, "%s: argument 'head_splits' is required", fn);
    ts_status st;
    TSP_CALL(st, ts_fp8_gemm_nt_skip_head_mid(&a, &sfa, &b, &sfb, &d, hs, have_r ? r : NULL, cd, dis));
    DONE(st);
}

/* ---- deep_gemm.utils casts: kind 0 per-token, 1 per-block, 2 per-channel, 3 per-token fp4.
 * cast(kind, x, use_ue8m0, gran_k, use_packed_ue8m0, out_x, out_sf) */
PyObject *tsp_cast(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static const char *const names[4] = {"deep_gemm.utils.per_token_cast_to_fp8",
                                         "deep_gemm.utils.per_block_cast_to_fp8",
                                         "deep_gemm.utils.per_channel_cast_to_fp8",
                                         "deep_gemm.utils.per_token_cast_to_fp4"};
    const char *fn = "deep_gemm.utils.cast";
    (void)self;
    NARGS(7);
    int kind;
    if (layout_arg(args[0], 4, &kind)) return NULL;
    fn = names[kind];
    ts_tensor x, q, sf;
    bool ue8m0, packed;
    if (tsp_view(args[1], fn, "x", 0, &x) || flag(args[2], &ue8m0) || flag(args[4], &packed) ||
        tsp_view(args[5], fn, "x_q", TSP_OUTPUT, &q) || tsp_view(args[6], fn, "sf", TSP_OUTPUT, &sf))
        return NULL;
    int64_t gk = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred()) return NULL;
    if (q.dtype == TS_I8) q.dtype = TS_E2M1X2;
    ts_status st;
    switch (kind) {
    case 0: TSP_CALL(st, ts_per_token_cast_to_fp8(&x, ue8m0, gk, packed, &q, &sf)); break;
    case 1: TSP_CALL(st, ts_per_block_cast_to_fp8(&x, ue8m0, gk, &q, &sf)); break;
    case 2: TSP_CALL(st, ts_per_channel_cast_to_fp8(&x, ue8m0, gk, &q, &sf)); break;
    default:
        TSP_CALL(st, ts_per_token_cast_to_fp4(&x, ue8m0, gk, packed, TS_FP4_ROUND_DEEPGEMM, &q, &sf));
        break;
    }
    DONE(st);
}

/* cast_back(kind 0 fp8 | 1 fp4, x, sf, gran_mn, gran_k, out) */
PyObject *tsp_cast_back(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    const char *fn = "deep_gemm.utils.cast_back";
    (void)self;
    NARGS(6);
    int kind;
    if (layout_arg(args[0], 2, &kind)) return NULL;
    fn = kind ? "deep_gemm.utils.cast_back_from_fp4" : "deep_gemm.utils.cast_back_from_fp8";
    ts_tensor x, sf, out;
    if (tsp_view(args[1], fn, "x", 0, &x) || tsp_view(args[2], fn, "sf", 0, &sf) ||
        tsp_view(args[5], fn, "out", TSP_OUTPUT, &out))
        return NULL;
    int64_t gmn = PyLong_AsLongLong(args[3]), gk = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred()) return NULL;
    if (x.dtype == TS_I8) x.dtype = TS_E2M1X2;
    ts_status st;
    if (kind)
        TSP_CALL(st, ts_cast_back_from_fp4(&x, &sf, gmn, gk, &out));
    else
        TSP_CALL(st, ts_cast_back_from_fp8(&x, &sf, gmn, gk, &out));
    DONE(st);
}

/* transpose_packed_fp4(a, out) */
PyObject *tsp_transpose_packed_fp4(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    const char *fn = "deep_gemm.utils.transpose_packed_fp4";
    (void)self;
    NARGS(2);
    ts_tensor a, out;
    if (tsp_view(args[0], fn, "a", 0, &a) || tsp_view(args[1], fn, "out", TSP_OUTPUT, &out)) return NULL;
    if (a.dtype == TS_I8) a.dtype = TS_E2M1X2;
    if (out.dtype == TS_I8) out.dtype = TS_E2M1X2;
    ts_status st;
    TSP_CALL(st, ts_transpose_packed_fp4(&a, &out));
    DONE(st);
}

/* calc_diff(x, y) -> float */
PyObject *tsp_calc_diff(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    const char *fn = "deep_gemm.testing.calc_diff";
    (void)self;
    NARGS(2);
    ts_tensor x, y;
    if (tsp_view(args[0], fn, "x", 0, &x) || tsp_view(args[1], fn, "y", 0, &y)) return NULL;
    double diff = 0;
    ts_status st;
    TSP_CALL(st, ts_calc_diff(&x, &y, &diff));
    if (st != TS_OK) return tsp_raise_status(st, fn);
    return PyFloat_FromDouble(diff);
}

/* ---- runtime knobs: set(name, value) / get(name) over a table of the C setters */
PyObject *tsp_set_num_sms(PyObject *self, PyObject *arg) {
    (void)self;
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (n < 0 || n > INT32_MAX) return PyErr_Format(tsp_ValueError, "deep_gemm.set_num_sms: %ld out of range", n);
    ts_status st = ts_set_num_sms((int)n);
    if (st != TS_OK) return tsp_raise_status(st, "deep_gemm.set_num_sms");
    Py_RETURN_NONE;
}

PyObject *tsp_get_num_sms(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    return PyLong_FromLong(ts_get_num_sms());
}

PyObject *tsp_set_tc_util(PyObject *self, PyObject *arg) {
    (void)self;
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    ts_status st = n < INT32_MIN || n > INT32_MAX ? TS_ERR_INVALID_ARGUMENT : ts_set_tc_util((int)n);
    if (st != TS_OK) return tsp_raise_status(st, "deep_gemm.set_tc_util");
    Py_RETURN_NONE;
}

PyObject *tsp_get_tc_util(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    return PyLong_FromLong(ts_get_tc_util());
}

PyObject *tsp_set_mk_alignment(PyObject *self, PyObject *arg) {
    (void)self;
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    ts_status st = n < INT32_MIN || n > INT32_MAX ? TS_ERR_INVALID_ARGUMENT
                                                 : ts_set_mk_alignment_for_contiguous_layout((int)n);
    if (st != TS_OK) return tsp_raise_status(st, "deep_gemm.set_mk_alignment_for_contiguous_layout");
    Py_RETURN_NONE;
}

PyObject *tsp_get_mk_alignment(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    return PyLong_FromLong(ts_get_mk_alignment_for_contiguous_layout());
}

PyObject *tsp_set_pdl(PyObject *self, PyObject *arg) {
    (void)self;
    bool v;
    if (flag(arg, &v)) return NULL;
    ts_status st = ts_set_pdl(v);
    if (st != TS_OK) return tsp_raise_status(st, "deep_gemm.set_pdl");
    Py_RETURN_NONE;
}

PyObject *tsp_get_pdl(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    return PyBool_FromLong(ts_get_pdl());
}

PyObject *tsp_set_ignore_compile_dims(PyObject *self, PyObject *arg) {
    (void)self;
    bool v;
    if (flag(arg, &v)) return NULL;
    ts_status st = ts_set_ignore_compile_dims(v);
    if (st != TS_OK) return tsp_raise_status(st, "deep_gemm.set_ignore_compile_dims");
    Py_RETURN_NONE;
}

/* set_block_size_multiple_of(m_multiple, n_multiple) */
PyObject *tsp_set_block_size_multiple_of(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    const char *fn = "deep_gemm.set_block_size_multiple_of";
    (void)self;
    NARGS(2);
    long m = PyLong_AsLong(args[0]), n = PyLong_AsLong(args[1]);
    if (PyErr_Occurred()) return NULL;
    ts_status st = m < INT32_MIN || m > INT32_MAX || n < INT32_MIN || n > INT32_MAX
                       ? TS_ERR_INVALID_ARGUMENT
                       : ts_set_block_size_multiple_of((int)m, (int)n);
    DONE(st);
}

PyObject *tsp_get_theoretical_mk_alignment(PyObject *self, PyObject *arg) {
    (void)self;
    int64_t em = opt_i64(arg, 0);
    if (PyErr_Occurred()) return NULL;
    return PyLong_FromLong(ts_get_theoretical_mk_alignment_for_contiguous_layout(em));
}
