/* _tilestack.mega_*: the native half of deep_gemm.mega (python/deep_gemm/mega.py holds
 * upstream's signatures and maps the communicator). Collectives run with the GIL released.
 * Built only when libtilestack has the EP module (MPI found), like bind_ep.c.
 *
 * The buffer is a capsule; its input views (x, x_sf, topk_idx, topk_weights) are handed out
 * as memoryviews over a small exporter object that holds the capsule, so a torch tensor made
 * from one keeps the buffer alive, and an explicit destroy is refused while any is alive
 * (never a dangling view). The transformed weights are a capsule of their own: they copy the
 * inputs, so the caller's tensors may be freed. */
#include "tsview.h"

#ifdef TSP_HAVE_EP
#include <math.h>

#include "tilestack/mega_moe.h"

typedef struct {
    ts_mega_moe_buffer *buf;
    Py_ssize_t exports; /* live view exporters */
} mega_buf_rec;
typedef struct {
    ts_mega_moe_weights *w;
    int bf16;
} mega_w_rec;

static const char BUF_CAP[] = "tilestack.mega_moe_buffer", W_CAP[] = "tilestack.mega_moe_weights";

static void buf_free(PyObject *cap) {
    mega_buf_rec *r = PyCapsule_GetPointer(cap, BUF_CAP);
    if (!r) { PyErr_Clear(); return; }
    if (r->buf) {
        ts_mega_moe_buffer *b = r->buf;
        r->buf = NULL;
        Py_BEGIN_ALLOW_THREADS
        ts_mega_moe_buffer_destroy(b);
        Py_END_ALLOW_THREADS
    }
    PyMem_Free(r);
}

static void w_free(PyObject *cap) {
    mega_w_rec *r = PyCapsule_GetPointer(cap, W_CAP);
    if (!r) { PyErr_Clear(); return; }
    ts_mega_moe_weights_destroy(r->w);
    PyMem_Free(r);
}

static mega_buf_rec *get_buf(PyObject *cap, const char *fn) {
    mega_buf_rec *r = PyCapsule_GetPointer(cap, BUF_CAP);
    if (!r) {
        PyErr_Clear();
        PyErr_Format(tsp_TypeError, "%s: argument 'sym_buffer' must be a buffer from get_symm_buffer_for_mega_moe", fn);
        return NULL;
    }
    if (!r->buf) {
        PyErr_Format(PyExc_RuntimeError, "%s: the buffer was destroyed", fn);
        return NULL;
    }
    return r;
}

/* ---- view exporter: a buffer-protocol object over part of the C buffer, holding the capsule */
typedef struct {
    PyObject_HEAD
    PyObject *cap;
    void *data;
    Py_ssize_t len;
} region;

static int region_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    region *r = (region *)self;
    return PyBuffer_FillInfo(view, self, r->data, r->len, 0, flags);
}

static void region_dealloc(PyObject *self) {
    region *r = (region *)self;
    mega_buf_rec *rec = PyCapsule_GetPointer(r->cap, BUF_CAP);
    if (rec) rec->exports--;
    else PyErr_Clear();
    Py_XDECREF(r->cap);
    PyObject_Free(self);
}

static PyBufferProcs region_as_buffer = {region_getbuffer, NULL};
static PyTypeObject region_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_tilestack.MegaMoEBufferRegion",
    .tp_basicsize = sizeof(region),
    .tp_dealloc = region_dealloc,
    .tp_as_buffer = &region_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
};

/* (memoryview, dtype name, shape, strides) of t, the memoryview's exporter holding cap; None
 * for an absent view (x_sf of a bf16 buffer). */
static PyObject *describe(PyObject *cap, mega_buf_rec *rec, const ts_tensor *t) {
    if (!t->data) Py_RETURN_NONE;
    region *r = PyObject_New(region, &region_type);
    if (!r) return NULL;
    Py_INCREF(cap);
    r->cap = cap;
    r->data = t->data;
    r->len = tsp_span_bytes(t);
    rec->exports++;
    PyObject *mv = PyMemoryView_FromObject((PyObject *)r);
    Py_DECREF(r); /* the memoryview holds it now */
    return tsp_describe(mv, t);
}

static int arg_i64(PyObject *o, const char *fn, const char *name, int64_t *v) {
    if (!PyLong_Check(o) || PyBool_Check(o)) {
        PyErr_Format(tsp_TypeError, "%s: argument '%s' must be an int, got %s", fn, name, Py_TYPE(o)->tp_name);
        return -1;
    }
    *v = PyLong_AsLongLong(o);
    return *v == -1 && PyErr_Occurred() ? -1 : 0;
}

/* mega_buffer_new(comm_handle, num_experts, num_max_tokens_per_rank, num_topk, hidden,
 *                 intermediate_hidden, mma_type, activation, timeout_s) -> capsule */
PyObject *tsp_mega_buffer_new(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static const char fn[] = "deep_gemm.get_symm_buffer_for_mega_moe";
    static const char *const names[5] = {"num_experts", "num_max_tokens_per_rank", "num_topk", "hidden",
                                         "intermediate_hidden"};
    (void)self;
    if (nargs != 9) return PyErr_Format(PyExc_TypeError, "%s: 9 arguments expected", fn);
    void *comm_ptr = PyLong_AsVoidPtr(args[0]);
    if (!comm_ptr && PyErr_Occurred()) return NULL;
    int64_t v[5];
    for (int i = 0; i < 5; i++)
        if (arg_i64(args[1 + i], fn, names[i], &v[i])) return NULL;
    if (v[2] < INT32_MIN || v[2] > INT32_MAX)
        return PyErr_Format(tsp_ValueError, "%s: argument 'num_topk' = %lld out of range", fn, (long long)v[2]);
    const char *mma, *act;
    if (tsp_opt_str(args[6], fn, "mma_type", &mma) || tsp_opt_str(args[7], fn, "activation", &act)) return NULL;
    ts_mega_moe_buffer_options o = {PyFloat_AsDouble(args[8])};
    if (PyErr_Occurred()) return NULL;
    mega_buf_rec *rec;
    PyObject *cap = tsp_new_capsule(sizeof *rec, BUF_CAP, buf_free, (void **)&rec);
    if (!cap) return NULL;
    ts_status st;
    MPI_Comm comm = (MPI_Comm)comm_ptr;
    TSP_CALL(st, ts_get_symm_buffer_for_mega_moe(comm, v[0], v[1], (int32_t)v[2], v[3], v[4], mma, act, &o,
                                                 &rec->buf));
    if (st != TS_OK) {
        rec->buf = NULL;
        Py_DECREF(cap);
        return tsp_raise_status(st, fn);
    }
    return cap;
}

/* mega_buffer_views(buf) -> (x, x_sf, topk_idx, topk_weights, (T, E, E_local, hidden, I,
 * num_topk, rank, num_ranks)); each view a description as describe() gives. */
PyObject *tsp_mega_buffer_views(PyObject *self, PyObject *cap) {
    static const char fn[] = "deep_gemm.SymmBuffer";
    (void)self;
    mega_buf_rec *rec = get_buf(cap, fn);
    if (!rec) return NULL;
    ts_mega_moe_views v;
    ts_status st = ts_mega_moe_get_views(rec->buf, &v);
    if (st != TS_OK) return tsp_raise_status(st, fn);
    return Py_BuildValue("(NNNN(LLLLLiii))", describe(cap, rec, &v.x), describe(cap, rec, &v.x_sf),
                         describe(cap, rec, &v.topk_idx), describe(cap, rec, &v.topk_weights),
                         (long long)v.num_max_tokens_per_rank, (long long)v.num_experts,
                         (long long)v.num_local_experts, (long long)v.hidden, (long long)v.intermediate_hidden,
                         v.num_topk, v.rank, v.num_ranks);
}

/* mega_buffer_destroy(buf): collective; refused while a view of the buffer is alive (the
 * memory would go from under it); a second call is a no-op. */
PyObject *tsp_mega_buffer_destroy(PyObject *self, PyObject *cap) {
    static const char fn[] = "deep_gemm.SymmBuffer.destroy";
    (void)self;
    mega_buf_rec *r = PyCapsule_GetPointer(cap, BUF_CAP);
    if (!r) return NULL;
    if (!r->buf) Py_RETURN_NONE;
    if (r->exports > 0)
        return PyErr_Format(PyExc_RuntimeError,
                            "%s: %zd view(s) of the buffer (x / x_sf / topk_idx / topk_weights or tensors made "
                            "from them) are still alive; drop them first", fn, r->exports);
    ts_mega_moe_buffer *b = r->buf;
    r->buf = NULL;
    ts_status st;
    TSP_CALL(st, ts_mega_moe_buffer_destroy(b));
    if (st != TS_OK) return tsp_raise_status(st, fn);
    Py_RETURN_NONE;
}

/* Packed FP4 travels as torch.int8; packed ue8m0 scales as torch.int32. */
static int weight_view(PyObject *o, const char *fn, const char *arg, int flags, ts_tensor *t, const ts_tensor **p) {
    int r = tsp_view(o, fn, arg, flags, t);
    if (r < 0) return -1;
    if (r == 1) { *p = NULL; return 0; }
    if (t->dtype == TS_I8) t->dtype = TS_E2M1X2;
    *p = t;
    return 0;
}

/* mega_weights_new(l1, l1_sf, l2, l2_sf) -> capsule; sf None for bf16 weights. */
PyObject *tsp_mega_weights_new(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static const char fn[] = "deep_gemm.transform_weights_for_mega_moe";
    (void)self;
    if (nargs != 4) return PyErr_Format(PyExc_TypeError, "%s: 4 arguments expected", fn);
    ts_tensor t[4];
    const ts_tensor *p[4];
    static const char *const names[4] = {"l1_weight", "l1_weight_sf", "l2_weight", "l2_weight_sf"};
    for (int i = 0; i < 4; i++)
        if (weight_view(args[i], fn, names[i], i % 2 ? TSP_OPTIONAL : 0, &t[i], &p[i])) return NULL;
    mega_w_rec *rec;
    PyObject *cap = tsp_new_capsule(sizeof *rec, W_CAP, w_free, (void **)&rec);
    if (!cap) return NULL;
    rec->bf16 = t[0].dtype == TS_BF16;
    ts_status st;
    TSP_CALL(st, ts_transform_weights_for_mega_moe(p[0], p[1], p[2], p[3], &rec->w));
    if (st != TS_OK) {
        rec->w = NULL;
        Py_DECREF(cap);
        return tsp_raise_status(st, fn);
    }
    return cap;
}

/* mega_moe(kind 0 fp8_fp4 | 1 bf16 | 2 unfused, y, weights, buf, stats, recipe, activation,
 *          activation_clamp (None = none), fast_math) */
PyObject *tsp_mega_moe(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static const char *const names[3] = {"deep_gemm.fp8_fp4_mega_moe", "deep_gemm.bf16_mega_moe",
                                         "deep_gemm.mega._unfused_mega_moe"};
    const char *fn = "deep_gemm.mega_moe";
    (void)self;
    if (nargs != 9) return PyErr_Format(PyExc_TypeError, "%s: 9 arguments expected", fn);
    long kind = PyLong_AsLong(args[0]);
    if (kind < 0 || kind > 2) return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_ValueError, "bad kind");
    fn = names[kind];
    mega_w_rec *w = PyCapsule_GetPointer(args[2], W_CAP);
    if (!w) {
        PyErr_Clear();
        return PyErr_Format(tsp_TypeError, "%s: arguments 'l1_weight' / 'l2_weight' must come from "
                            "transform_weights_for_mega_moe", fn);
    }
    mega_buf_rec *b = get_buf(args[3], fn);
    if (!b) return NULL;
    ts_tensor y, stats;
    const ts_tensor *pstats;
    int64_t recipe[3];
    int have_recipe;
    const char *act;
    if (tsp_view(args[1], fn, "y", TSP_OUTPUT, &y) ||
        tsp_view_opt(args[4], fn, "cumulative_local_expert_recv_stats", &stats, &pstats) ||
        tsp_int_tuple(args[5], fn, "recipe", 3, recipe, &have_recipe) ||
        tsp_opt_str(args[6], fn, "activation", &act))
        return NULL;
    float clamp = INFINITY;
    if (args[7] != Py_None) {
        double c = PyFloat_AsDouble(args[7]);
        if (c == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            return PyErr_Format(tsp_TypeError, "%s: argument 'activation_clamp' must be a float or None", fn);
        }
        clamp = (float)c;
    }
    int fast = PyObject_IsTrue(args[8]);
    if (fast < 0) return NULL;
    ts_tensor *ps = (ts_tensor *)pstats;
    ts_status st;
    if (kind == 0)
        TSP_CALL(st, ts_fp8_fp4_mega_moe(&y, w->w, b->buf, ps, have_recipe ? recipe : NULL, act, clamp, fast != 0));
    else if (kind == 1)
        TSP_CALL(st, ts_bf16_mega_moe(&y, w->w, b->buf, ps, act, clamp, fast != 0));
    else
        TSP_CALL(st, ts_mega_moe_unfused(&y, w->w, b->buf, ps, clamp, fast != 0));
    if (st != TS_OK) return tsp_raise_status(st, fn);
    Py_RETURN_NONE;
}

#define F(name) {#name, (PyCFunction)(void (*)(void))tsp_##name, METH_FASTCALL, NULL}
#define O(name) {#name, (PyCFunction)tsp_##name, METH_O, NULL}
static PyMethodDef mega_methods[] = {
    F(mega_buffer_new), O(mega_buffer_views), O(mega_buffer_destroy), F(mega_weights_new), F(mega_moe),
    {NULL, NULL, 0, NULL},
};

int tsp_mega_init(PyObject *m) {
    if (PyType_Ready(&region_type) < 0) return -1;
    return PyModule_AddFunctions(m, mega_methods);
}
#else
int tsp_mega_init(PyObject *m) {
    (void)m;
    return 0;
}
#endif
