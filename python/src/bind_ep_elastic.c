/* _tilestack.ep_elastic_*: the native half of deep_ep.ElasticBuffer / deep_ep.EPHandle
 * (python/deep_ep/elastic.py holds upstream V2's signatures and defaults, allocates the
 * caller-owned combine outputs and maps the communicator). Every collective runs with the GIL
 * released; built only with the EP module (MPI), like bind_ep.c.
 *
 * The buffer and the dispatch handle cross into Python as capsules. Dispatch outputs live in
 * the buffer until its next dispatch and are returned as tsp_describe_mem() descriptions (the
 * wrapper copies them); the handle's arrays, owned by the handle, likewise. */
#include "tsview.h"

#ifdef TSP_HAVE_EP
#include <string.h>

#include "tilestack/ep_elastic.h"

typedef struct {
    ts_ep_elastic_buffer *buf;
} el_buf_rec;
typedef struct {
    ts_ep_elastic_handle *h;
} el_handle_rec;

static const char BUF_CAP[] = "tilestack.ep_elastic_buffer", HANDLE_CAP[] = "tilestack.ep_elastic_handle";

static void buf_free(PyObject *cap) {
    el_buf_rec *r = PyCapsule_GetPointer(cap, BUF_CAP);
    if (!r) {
        PyErr_Clear();
        return;
    }
    if (r->buf) {
        ts_ep_elastic_buffer *b = r->buf;
        r->buf = NULL;
        Py_BEGIN_ALLOW_THREADS
        ts_ep_elastic_destroy(b);
        Py_END_ALLOW_THREADS
    }
    PyMem_Free(r);
}

static void handle_free(PyObject *cap) {
    el_handle_rec *r = PyCapsule_GetPointer(cap, HANDLE_CAP);
    if (!r) {
        PyErr_Clear();
        return;
    }
    ts_ep_elastic_handle_destroy(r->h);
    PyMem_Free(r);
}

static ts_ep_elastic_buffer *get_buf(PyObject *cap, const char *fn) {
    el_buf_rec *r = PyCapsule_GetPointer(cap, BUF_CAP);
    if (!r) return NULL;
    if (!r->buf) {
        PyErr_Format(PyExc_RuntimeError, "%s: the buffer was destroyed", fn);
        return NULL;
    }
    return r->buf;
}

static ts_ep_elastic_handle *get_handle(PyObject *cap) {
    el_handle_rec *r = PyCapsule_GetPointer(cap, HANDLE_CAP);
    return r ? r->h : NULL;
}

static int fits_i32(int64_t v, const char *fn, const char *name) {
    if (v >= INT32_MIN && v <= INT32_MAX) return 0;
    PyErr_Format(tsp_ValueError, "%s: argument '%s' = %lld does not fit int32", fn, name, (long long)v);
    return -1;
}

/* ep_elastic_new(comm_handle, num_bytes, num_max_tokens_per_rank, hidden, num_topk,
 *                use_fp8_dispatch, deterministic, allow_hybrid_mode, allow_multiple_reduction,
 *                prefer_overlap_with_compute, num_allocated_qps, num_cpu_timeout_secs,
 *                ranks_per_node) -> capsule. comm_handle: the C MPI_Comm as an int. */
PyObject *tsp_ep_elastic_new(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static const char fn[] = "deep_ep.ElasticBuffer";
    (void)self;
    if (nargs != 13) return PyErr_Format(PyExc_TypeError, "%s: 13 arguments expected", fn);
    void *comm_ptr = PyLong_AsVoidPtr(args[0]);
    if (!comm_ptr && PyErr_Occurred()) return NULL;
    int err = 0;
    ts_ep_elastic_options o = ts_ep_elastic_default_options();
    o.num_bytes = tsp_arg_i64(args[1], &err);
    o.num_max_tokens_per_rank = tsp_arg_i64(args[2], &err);
    o.hidden = tsp_arg_i64(args[3], &err);
    int64_t k = tsp_arg_i64(args[4], &err);
    o.use_fp8_dispatch = tsp_arg_bool(args[5], &err);
    o.deterministic = tsp_arg_bool(args[6], &err);
    o.allow_hybrid_mode = tsp_arg_bool(args[7], &err);
    o.allow_multiple_reduction = tsp_arg_bool(args[8], &err);
    o.prefer_overlap_with_compute = tsp_arg_bool(args[9], &err);
    int64_t qps = tsp_arg_i64(args[10], &err);
    o.num_cpu_timeout_secs = PyFloat_AsDouble(args[11]);
    if (o.num_cpu_timeout_secs == -1.0 && PyErr_Occurred()) err = 1;
    int64_t rpn = tsp_arg_i64(args[12], &err);
    if (err || fits_i32(k, fn, "num_topk") || fits_i32(qps, fn, "num_allocated_qps") ||
        fits_i32(rpn, fn, "ranks_per_node"))
        return NULL;
    o.num_topk = (int32_t)k;
    o.num_allocated_qps = (int32_t)qps;
    o.ranks_per_node = (int32_t)rpn;
    el_buf_rec *rec;
    PyObject *cap = tsp_new_capsule(sizeof *rec, BUF_CAP, buf_free, (void **)&rec);
    if (!cap) return NULL;
    ts_status st;
    TSP_CALL(st, ts_ep_elastic_create((MPI_Comm)comm_ptr, &o, &rec->buf));
    if (st != TS_OK) {
        rec->buf = NULL;
        Py_DECREF(cap);
        return tsp_raise_status(st, fn);
    }
    return cap;
}

/* ep_elastic_destroy(buf): collective; a second call is a no-op. */
PyObject *tsp_ep_elastic_destroy(PyObject *self, PyObject *cap) {
    (void)self;
    el_buf_rec *r = PyCapsule_GetPointer(cap, BUF_CAP);
    if (!r) return NULL;
    ts_ep_elastic_buffer *b = r->buf;
    r->buf = NULL;
    ts_status st;
    TSP_CALL(st, ts_ep_elastic_destroy(b));
    if (st != TS_OK) return tsp_raise_status(st, "deep_ep.ElasticBuffer.destroy");
    Py_RETURN_NONE;
}

/* ep_elastic_info(buf) -> (rank, num_ranks, num_bytes) */
PyObject *tsp_ep_elastic_info(PyObject *self, PyObject *cap) {
    static const char fn[] = "deep_ep.ElasticBuffer";
    (void)self;
    ts_ep_elastic_buffer *b = get_buf(cap, fn);
    if (!b) return NULL;
    int32_t rank, n;
    int64_t bytes;
    ts_status st = ts_ep_elastic_get_rank(b, &rank, &n);
    if (st == TS_OK) st = ts_ep_elastic_get_num_bytes(b, &bytes);
    if (st != TS_OK) return tsp_raise_status(st, fn);
    return Py_BuildValue("(iiL)", rank, n, (long long)bytes);
}

/* ep_elastic_domain(buf, logical) -> (num_rdma_ranks, num_nvlink_ranks), or with logical
 * (num_scaleout_ranks, num_scaleup_ranks) */
PyObject *tsp_ep_elastic_domain(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "ep_elastic_domain: 2 arguments expected");
    int err = 0, logical = tsp_arg_bool(args[1], &err);
    if (err) return NULL;
    const char *fn = logical ? "deep_ep.ElasticBuffer.get_logical_domain_size"
                             : "deep_ep.ElasticBuffer.get_physical_domain_size";
    ts_ep_elastic_buffer *b = get_buf(args[0], fn);
    if (!b) return NULL;
    int32_t a, c;
    ts_status st = logical ? ts_ep_elastic_get_logical_domain_size(b, &a, &c)
                           : ts_ep_elastic_get_physical_domain_size(b, &a, &c);
    if (st != TS_OK) return tsp_raise_status(st, fn);
    return Py_BuildValue("(ii)", a, c);
}

/* ep_elastic_size_hint(num_ranks, T, hidden, num_topk, use_fp8_dispatch) -> bytes */
PyObject *tsp_ep_elastic_size_hint(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static const char fn[] = "deep_ep.ElasticBuffer.get_buffer_size_hint";
    (void)self;
    if (nargs != 5) return PyErr_Format(PyExc_TypeError, "%s: 5 arguments expected", fn);
    int err = 0;
    int64_t r = tsp_arg_i64(args[0], &err), t = tsp_arg_i64(args[1], &err), h = tsp_arg_i64(args[2], &err),
            k = tsp_arg_i64(args[3], &err);
    int fp8 = tsp_arg_bool(args[4], &err);
    if (err || fits_i32(r, fn, "group size") || fits_i32(k, fn, "num_topk")) return NULL;
    int64_t bytes;
    ts_status st = ts_ep_elastic_get_buffer_size_hint((int32_t)r, t, h, (int32_t)k, fp8, &bytes);
    if (st != TS_OK) return tsp_raise_status(st, fn);
    return PyLong_FromLongLong(bytes);
}

/* ep_elastic_num_sms(buf, num_experts, num_topk) -> threads */
PyObject *tsp_ep_elastic_num_sms(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static const char fn[] = "deep_ep.ElasticBuffer.get_theoretical_num_sms";
    (void)self;
    if (nargs != 3) return PyErr_Format(PyExc_TypeError, "%s: 3 arguments expected", fn);
    ts_ep_elastic_buffer *b = get_buf(args[0], fn);
    if (!b) return NULL;
    int err = 0;
    int64_t e = tsp_arg_i64(args[1], &err), k = tsp_arg_i64(args[2], &err);
    if (err || fits_i32(k, fn, "num_topk")) return NULL;
    int32_t n;
    ts_status st = ts_ep_elastic_get_theoretical_num_sms(b, e, (int32_t)k, &n);
    if (st != TS_OK) return tsp_raise_status(st, fn);
    return PyLong_FromLong(n);
}

/* ep_elastic_num_qps(buf, num_sms) -> QPs */
PyObject *tsp_ep_elastic_num_qps(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static const char fn[] = "deep_ep.ElasticBuffer.get_theoretical_num_qps";
    (void)self;
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "%s: 2 arguments expected", fn);
    ts_ep_elastic_buffer *b = get_buf(args[0], fn);
    if (!b) return NULL;
    int err = 0;
    int64_t s = tsp_arg_i64(args[1], &err);
    if (err || fits_i32(s, fn, "num_sms")) return NULL;
    int32_t n;
    ts_status st = ts_ep_elastic_get_theoretical_num_qps(b, (int32_t)s, &n);
    if (st != TS_OK) return tsp_raise_status(st, fn);
    return PyLong_FromLong(n);
}

/* ep_elastic_barrier(buf): collective */
PyObject *tsp_ep_elastic_barrier(PyObject *self, PyObject *cap) {
    static const char fn[] = "deep_ep.ElasticBuffer.barrier";
    (void)self;
    ts_ep_elastic_buffer *b = get_buf(cap, fn);
    if (!b) return NULL;
    ts_status st;
    TSP_CALL(st, ts_ep_elastic_barrier(b));
    if (st != TS_OK) return tsp_raise_status(st, fn);
    Py_RETURN_NONE;
}

/* t's dtype and shape with no memory: an empty tensor (the wrapper makes it itself). */
static PyObject *describe_empty(const ts_tensor *t) {
    PyObject *shape = tsp_int64_tuple(t->shape, t->ndim), *strides = tsp_int64_tuple(t->strides, t->ndim);
    if (!shape || !strides) {
        Py_XDECREF(shape);
        Py_XDECREF(strides);
        return NULL;
    }
    return Py_BuildValue("(OsNN)", Py_None, ts_dtype_name(t->dtype), shape, strides);
}

/* An output of the call: None when not produced, else its description (an empty one when it
 * has no rows and so possibly no memory). */
static PyObject *describe_out(const ts_tensor *t, int produced) {
    if (!produced && !t->data) Py_RETURN_NONE;
    return t->data ? tsp_describe_mem(t) : describe_empty(t);
}

/* A handle-owned array (cols < 0: 1-D) as a description the wrapper copies. */
static PyObject *describe_array(const void *p, ts_dtype dt, int64_t rows, int64_t cols) {
    ts_tensor t = cols < 0 ? ts_tensor_1d((void *)p, dt, rows) : ts_tensor_2d((void *)p, dt, rows, cols);
    if (!rows || !cols) t.data = NULL;
    return describe_out(&t, 1);
}

/* ep_elastic_dispatch(buf, x, sf, topk_idx, topk_weights, cumulative_local_expert_recv_stats,
 *                     num_experts, num_max_tokens_per_rank, expert_alignment, num_sms, num_qps,
 *                     handle or None, do_cpu_sync, do_expand, do_zero_padding,
 *                     use_tma_aligned_col_major_sf)
 * -> (recv_x, recv_sf, recv_topk_idx, recv_topk_weights, num_recv_tokens, num_expanded_tokens,
 *     new handle capsule or None); tensors as tsp_describe_mem() gives them (None: not produced). */
PyObject *tsp_ep_elastic_dispatch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static const char fn[] = "deep_ep.ElasticBuffer.dispatch";
    (void)self;
    if (nargs != 16) return PyErr_Format(PyExc_TypeError, "%s: 16 arguments expected", fn);
    ts_ep_elastic_buffer *b = get_buf(args[0], fn);
    if (!b) return NULL;
    ts_tensor x, sf_s, idx_s, w_s, stats_s;
    ts_ep_elastic_dispatch_args a;
    memset(&a, 0, sizeof a);
    int have_stats;
    if (tsp_view(args[1], fn, "x", 0, &x) || tsp_view_opt(args[2], fn, "x[1] (sf)", &sf_s, &a.sf) ||
        tsp_view_opt(args[3], fn, "topk_idx", &idx_s, &a.topk_idx) ||
        tsp_view_opt(args[4], fn, "topk_weights", &w_s, &a.topk_weights) ||
        (have_stats = tsp_view(args[5], fn, "cumulative_local_expert_recv_stats", TSP_OPTIONAL | TSP_OUTPUT,
                               &stats_s)) < 0)
        return NULL;
    a.x = &x;
    a.cumulative_local_expert_recv_stats = have_stats == 0 ? &stats_s : NULL;
    int err = 0;
    a.num_experts = tsp_arg_i64(args[6], &err);
    a.num_max_tokens_per_rank = tsp_arg_i64(args[7], &err);
    a.expert_alignment = tsp_arg_i64(args[8], &err);
    int64_t sms = tsp_arg_i64(args[9], &err), qps = tsp_arg_i64(args[10], &err);
    a.do_cpu_sync = tsp_arg_bool(args[12], &err);
    a.do_expand = tsp_arg_bool(args[13], &err);
    a.do_zero_padding = tsp_arg_bool(args[14], &err);
    a.use_tma_aligned_col_major_sf = tsp_arg_bool(args[15], &err);
    if (err || fits_i32(sms, fn, "num_sms") || fits_i32(qps, fn, "num_qps")) return NULL;
    a.num_sms = (int32_t)sms;
    a.num_qps = (int32_t)qps;
    const int cached = args[11] != Py_None;
    if (cached && !(a.handle = get_handle(args[11]))) return NULL;
    el_handle_rec *nh = NULL;
    PyObject *hcap = NULL;
    if (!cached && !(hcap = tsp_new_capsule(sizeof *nh, HANDLE_CAP, handle_free, (void **)&nh))) return NULL;
    ts_ep_elastic_dispatch_result r;
    memset(&r, 0, sizeof r);
    ts_status st;
    TSP_CALL(st, ts_ep_elastic_dispatch(b, &a, &r, cached ? NULL : &nh->h));
    if (st != TS_OK) {
        Py_XDECREF(hcap);
        return tsp_raise_status(st, fn);
    }
    return Py_BuildValue("(NNNNLLN)", describe_out(&r.recv_x, 1), describe_out(&r.recv_sf, a.sf != NULL),
                         describe_out(&r.recv_topk_idx, a.topk_idx != NULL),
                         describe_out(&r.recv_topk_weights, a.topk_weights != NULL),
                         (long long)r.num_recv_tokens, (long long)r.num_expanded_tokens,
                         hcap ? hcap : Py_NewRef(Py_None));
}

/* ep_elastic_handle_info(handle, num_ranks) -> (do_expand, num_experts, expert_alignment,
 *     num_max_tokens_per_rank, num_sms, num_tokens, num_topk, num_recv_tokens,
 *     num_expanded_tokens, topk_idx, psum_num_recv_tokens_per_scaleup_rank,
 *     psum_num_recv_tokens_per_expert, num_recv_tokens_per_expert_list (a list),
 *     num_unaligned_recv_tokens_per_expert, recv_src_metadata); arrays described as
 * describe_array gives them (the memory is the handle's). */
PyObject *tsp_ep_elastic_handle_info(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static const char fn[] = "deep_ep.EPHandle";
    (void)self;
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "%s: 2 arguments expected", fn);
    ts_ep_elastic_handle *h = get_handle(args[0]);
    if (!h) return NULL;
    int err = 0;
    int64_t R = tsp_arg_i64(args[1], &err);
    if (err) return NULL;
    ts_ep_elastic_handle_info i;
    ts_status st = ts_ep_elastic_handle_get_info(h, &i);
    if (st != TS_OK) return tsp_raise_status(st, fn);
    if (R < 1 || i.num_experts % R) return PyErr_Format(tsp_ValueError, "%s: num_ranks %lld out of range", fn, (long long)R);
    const int64_t el = i.num_experts / R;
    PyObject *list = PyList_New(el);
    for (int64_t e = 0; list && e < el; e++) {
        PyObject *o = PyLong_FromLong(i.num_recv_tokens_per_expert_list[e]);
        if (!o) Py_CLEAR(list);
        else PyList_SET_ITEM(list, e, o);
    }
    if (!list) return NULL;
    return Py_BuildValue("(OLLLiLLLLNNNNNN)", i.do_expand ? Py_True : Py_False, (long long)i.num_experts,
                         (long long)i.expert_alignment, (long long)i.num_max_tokens_per_rank, (int)i.num_sms,
                         (long long)i.num_tokens, (long long)i.num_topk, (long long)i.num_recv_tokens,
                         (long long)i.num_expanded_tokens, describe_array(i.topk_idx, TS_I64, i.num_tokens, i.num_topk),
                         describe_array(i.psum_num_recv_tokens_per_scaleup_rank, TS_I32, R, -1),
                         describe_array(i.psum_num_recv_tokens_per_expert, TS_I32, el, -1), list,
                         describe_array(i.num_unaligned_recv_tokens_per_expert, TS_I32, el, -1),
                         describe_array(i.recv_src_metadata, TS_I32, i.num_recv_tokens, 2 + i.num_topk));
}

/* ep_elastic_handle_sort(handle): upstream's deterministic epilogue (the order already is) */
PyObject *tsp_ep_elastic_handle_sort(PyObject *self, PyObject *cap) {
    (void)self;
    ts_ep_elastic_handle *h = get_handle(cap);
    if (!h) return NULL;
    ts_status st = ts_ep_elastic_handle_deterministic_sort(h);
    if (st != TS_OK) return tsp_raise_status(st, "deep_ep.EPHandle.deterministic_sort");
    Py_RETURN_NONE;
}

/* ep_elastic_combine(buf, handle, x, topk_weights, bias0, bias1, num_sms, combined_x,
 *                    combined_topk_weights or None) */
PyObject *tsp_ep_elastic_combine(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static const char fn[] = "deep_ep.ElasticBuffer.combine";
    (void)self;
    if (nargs != 9) return PyErr_Format(PyExc_TypeError, "%s: 9 arguments expected", fn);
    ts_ep_elastic_buffer *b = get_buf(args[0], fn);
    if (!b) return NULL;
    ts_ep_elastic_handle *h = get_handle(args[1]);
    if (!h) return NULL;
    ts_tensor x, ws, b0s, b1s, out, outw_s;
    const ts_tensor *w, *b0, *b1;
    int have_w;
    if (tsp_view(args[2], fn, "x", 0, &x) || tsp_view_opt(args[3], fn, "topk_weights", &ws, &w) ||
        tsp_view_opt(args[4], fn, "bias[0]", &b0s, &b0) || tsp_view_opt(args[5], fn, "bias[1]", &b1s, &b1) ||
        tsp_view(args[7], fn, "combined_x", TSP_OUTPUT, &out) ||
        (have_w = tsp_view(args[8], fn, "combined_topk_weights", TSP_OPTIONAL | TSP_OUTPUT, &outw_s)) < 0)
        return NULL;
    int err = 0;
    int64_t sms = tsp_arg_i64(args[6], &err);
    if (err || fits_i32(sms, fn, "num_sms")) return NULL;
    ts_status st;
    TSP_CALL(st, ts_ep_elastic_combine(b, h, &x, w, b0, b1, (int32_t)sms, &out, have_w == 0 ? &outw_s : NULL));
    if (st != TS_OK) return tsp_raise_status(st, fn);
    Py_RETURN_NONE;
}

/* ep_elastic_unsupported(buf, name): the parts of V2 the C core reports unsupported (Engram,
 * PP, AGRS) by name, so the NotImplementedError carries the core's own message. Those
 * functions read no argument but the buffer, so none is converted. */
PyObject *tsp_ep_elastic_unsupported(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "ep_elastic_unsupported: 2 arguments expected");
    const char *name = PyUnicode_AsUTF8(args[1]);
    if (!name) return NULL;
    char fn[96];
    snprintf(fn, sizeof fn, "deep_ep.ElasticBuffer.%s", name);
    ts_ep_elastic_buffer *b = get_buf(args[0], fn);
    if (!b) return NULL;
    ts_status st;
    if (!strcmp(name, "engram_write")) st = ts_ep_elastic_engram_write(b, NULL, NULL);
    else if (!strcmp(name, "engram_fetch")) st = ts_ep_elastic_engram_fetch(b, NULL, 0, NULL, NULL);
    else if (!strcmp(name, "pp_set_config")) st = ts_ep_elastic_pp_set_config(b, 0, 0);
    else if (!strcmp(name, "pp_send")) st = ts_ep_elastic_pp_send(b, NULL, 0, 0);
    else if (!strcmp(name, "pp_recv")) st = ts_ep_elastic_pp_recv(b, NULL, 0, 0);
    else if (!strcmp(name, "agrs_set_config")) st = ts_ep_elastic_agrs_set_config(b, 0, 0);
    else if (!strcmp(name, "create_agrs_session")) st = ts_ep_elastic_create_agrs_session(b);
    else if (!strcmp(name, "destroy_agrs_session")) st = ts_ep_elastic_destroy_agrs_session(b);
    else if (!strcmp(name, "all_gather")) st = ts_ep_elastic_all_gather(b, NULL, NULL);
    else return PyErr_Format(PyExc_ValueError, "ep_elastic_unsupported: unknown part '%s'", name);
    if (st != TS_OK) return tsp_raise_status(st, fn);
    Py_RETURN_NONE;
}

#define F(name) {#name, (PyCFunction)(void (*)(void))tsp_##name, METH_FASTCALL, NULL}
#define O(name) {#name, (PyCFunction)tsp_##name, METH_O, NULL}
static PyMethodDef ep_elastic_methods[] = {
    F(ep_elastic_new),      O(ep_elastic_destroy),    O(ep_elastic_info),        F(ep_elastic_domain),
    F(ep_elastic_size_hint), F(ep_elastic_num_sms),   F(ep_elastic_num_qps),     O(ep_elastic_barrier),
    F(ep_elastic_dispatch), F(ep_elastic_handle_info), O(ep_elastic_handle_sort), F(ep_elastic_combine),
    F(ep_elastic_unsupported), {NULL, NULL, 0, NULL},
};

int tsp_ep_elastic_init(PyObject *m) {
    return PyModule_AddFunctions(m, ep_elastic_methods);
}
#else
int tsp_ep_elastic_init(PyObject *m) {
    (void)m;
    return 0;
}
#endif
