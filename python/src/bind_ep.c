/* _tilestack.ep_*: the native half of deep_ep.Buffer (python/deep_ep/__init__.py holds
 * upstream's signatures, allocates caller-owned outputs and maps the communicator). Every
 * collective runs with the GIL released. Built only when libtilestack has the EP module
 * (MPI found); otherwise tsp_ep_init adds nothing and deep_ep reports the module missing.
 *
 * Objects crossing into Python are capsules over small records: the buffer (destroyed with the
 * capsule unless destroyed before), a dispatch handle, a low-latency handle and a one-shot
 * hook. Dispatch outputs, which live in the buffer until its next dispatch, are returned as
 * (memoryview, dtype, shape, strides) descriptions; the wrapper copies them into fresh tensors. */
#include "tsview.h"

#ifdef TSP_HAVE_EP
#include <string.h>

#include "tilestack/ep.h"

typedef struct {
    ts_ep_buffer *buf;
} ep_buf_rec;
typedef struct {
    ts_ep_handle *h;
} ep_handle_rec;
typedef struct {
    ts_ep_ll_handle *h;
} ep_ll_handle_rec;
typedef struct {
    ts_ep_ll_hook *hook;
    int spent;
} ep_hook_rec;

static const char BUF_CAP[] = "tilestack.ep_buffer", HANDLE_CAP[] = "tilestack.ep_handle",
                  LL_HANDLE_CAP[] = "tilestack.ep_ll_handle", HOOK_CAP[] = "tilestack.ep_ll_hook";

static void buf_free(PyObject *cap) {
    ep_buf_rec *r = PyCapsule_GetPointer(cap, BUF_CAP);
    if (!r) {
        PyErr_Clear();
        return;
    }
    if (r->buf) {
        ts_ep_buffer *b = r->buf;
        r->buf = NULL;
        Py_BEGIN_ALLOW_THREADS
        ts_ep_buffer_destroy(b);
        Py_END_ALLOW_THREADS
    }
    PyMem_Free(r);
}

static void handle_free(PyObject *cap) {
    ep_handle_rec *r = PyCapsule_GetPointer(cap, HANDLE_CAP);
    if (!r) {
        PyErr_Clear();
        return;
    }
    ts_ep_handle_destroy(r->h);
    PyMem_Free(r);
}

static void ll_handle_free(PyObject *cap) {
    ep_ll_handle_rec *r = PyCapsule_GetPointer(cap, LL_HANDLE_CAP);
    if (!r) {
        PyErr_Clear();
        return;
    }
    ts_ep_ll_handle_destroy(r->h);
    PyMem_Free(r);
}

/* A never-run hook lives in the buffer, which releases it at destroy. */
static void hook_free(PyObject *cap) {
    void *r = PyCapsule_GetPointer(cap, HOOK_CAP);
    if (!r) PyErr_Clear();
    PyMem_Free(r);
}

static ts_ep_buffer *get_buf(PyObject *cap, const char *fn) {
    ep_buf_rec *r = PyCapsule_GetPointer(cap, BUF_CAP);
    if (!r) return NULL;
    if (!r->buf) {
        PyErr_Format(PyExc_RuntimeError, "%s: the buffer was destroyed", fn);
        return NULL;
    }
    return r->buf;
}

/* None or a 5-tuple of ints -> config (NULL for None). */
static int arg_config(PyObject *o, const char *fn, ts_ep_config *c, const ts_ep_config **out) {
    *out = NULL;
    if (o == Py_None) return 0;
    int64_t v[5];
    PyObject *seq = PySequence_Fast(o, "config");
    if (!seq) return -1;
    if (PySequence_Fast_GET_SIZE(seq) != 5) {
        Py_DECREF(seq);
        PyErr_Format(tsp_ValueError, "%s: argument 'config' must hold 5 ints", fn);
        return -1;
    }
    int err = 0;
    for (int i = 0; i < 5; i++) v[i] = tsp_arg_i64(PySequence_Fast_GET_ITEM(seq, i), &err);
    Py_DECREF(seq);
    if (err) return -1;
    for (int i = 0; i < 5; i++)
        if (v[i] < INT32_MIN || v[i] > INT32_MAX) {
            PyErr_Format(tsp_ValueError, "%s: config value %lld does not fit int32", fn, (long long)v[i]);
            return -1;
        }
    c->num_sms = (int32_t)v[0];
    c->num_max_nvl_chunked_send_tokens = (int32_t)v[1];
    c->num_max_nvl_chunked_recv_tokens = (int32_t)v[2];
    c->num_max_rdma_chunked_send_tokens = (int32_t)v[3];
    c->num_max_rdma_chunked_recv_tokens = (int32_t)v[4];
    *out = c;
    return 0;
}

/* ep_buffer_new(comm_handle, num_nvl_bytes, num_rdma_bytes, low_latency_mode, num_qps_per_rank,
 *               timeout_s, ranks_per_node) -> capsule. comm_handle: the C MPI_Comm as an int
 * (mpi4py's MPI._handleof). */
PyObject *tsp_ep_buffer_new(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static const char fn[] = "deep_ep.Buffer";
    (void)self;
    if (nargs != 7) return PyErr_Format(PyExc_TypeError, "%s: 7 arguments expected", fn);
    void *comm_ptr = PyLong_AsVoidPtr(args[0]);
    if (!comm_ptr && PyErr_Occurred()) return NULL;
    int err = 0;
    int64_t nvl = tsp_arg_i64(args[1], &err), rdma = tsp_arg_i64(args[2], &err);
    int ll = tsp_arg_bool(args[3], &err);
    int64_t qps = tsp_arg_i64(args[4], &err);
    double timeout = PyFloat_AsDouble(args[5]);
    if (timeout == -1.0 && PyErr_Occurred()) err = 1;
    int64_t rpn = tsp_arg_i64(args[6], &err);
    if (err) return NULL;
    if (qps < INT32_MIN || qps > INT32_MAX || rpn < 0 || rpn > INT32_MAX)
        return PyErr_Format(tsp_ValueError, "%s: num_qps_per_rank / ranks_per_node out of range", fn);
    ts_ep_buffer_options o = ts_ep_default_buffer_options();
    o.num_qps_per_rank = (int32_t)qps;
    o.timeout_s = timeout;
    o.ranks_per_node = (int32_t)rpn;
    ep_buf_rec *rec;
    PyObject *cap = tsp_new_capsule(sizeof *rec, BUF_CAP, buf_free, (void **)&rec);
    if (!cap) return NULL;
    ts_status st;
    MPI_Comm comm = (MPI_Comm)comm_ptr;
    TSP_CALL(st, ts_ep_buffer_create(comm, nvl, rdma, ll, &o, &rec->buf));
    if (st != TS_OK) {
        rec->buf = NULL;
        Py_DECREF(cap);
        return tsp_raise_status(st, fn);
    }
    return cap;
}

/* ep_buffer_destroy(buf): collective; a second call is a no-op. */
PyObject *tsp_ep_buffer_destroy(PyObject *self, PyObject *cap) {
    (void)self;
    ep_buf_rec *r = PyCapsule_GetPointer(cap, BUF_CAP);
    if (!r) return NULL;
    ts_ep_buffer *b = r->buf;
    r->buf = NULL;
    ts_status st;
    TSP_CALL(st, ts_ep_buffer_destroy(b));
    if (st != TS_OK) return tsp_raise_status(st, "deep_ep.Buffer.destroy");
    Py_RETURN_NONE;
}

/* ep_buffer_info(buf) -> (rank, num_ranks, ranks_per_node) */
PyObject *tsp_ep_buffer_info(PyObject *self, PyObject *cap) {
    (void)self;
    ts_ep_buffer *b = get_buf(cap, "deep_ep.Buffer");
    if (!b) return NULL;
    int32_t rank, n, rpn;
    ts_status st = ts_ep_buffer_get_rank(b, &rank, &n);
    if (st == TS_OK) st = ts_ep_buffer_get_ranks_per_node(b, &rpn);
    if (st != TS_OK) return tsp_raise_status(st, "deep_ep.Buffer");
    return Py_BuildValue("(iii)", rank, n, rpn);
}

/* ep_config(kind, num_ranks) -> 5-tuple; kind 0 = dispatch, 1 = combine. */
PyObject *tsp_ep_config(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "ep_config: 2 arguments expected");
    int err = 0;
    int64_t kind = tsp_arg_i64(args[0], &err), r = tsp_arg_i64(args[1], &err);
    if (err) return NULL;
    const char *fn = kind ? "deep_ep.Buffer.get_combine_config" : "deep_ep.Buffer.get_dispatch_config";
    if (r < INT32_MIN || r > INT32_MAX) return PyErr_Format(tsp_ValueError, "%s: num_ranks out of range", fn);
    ts_ep_config c;
    ts_status st = kind ? ts_ep_get_combine_config((int32_t)r, &c) : ts_ep_get_dispatch_config((int32_t)r, &c);
    if (st != TS_OK) return tsp_raise_status(st, fn);
    return Py_BuildValue("(iiiii)", c.num_sms, c.num_max_nvl_chunked_send_tokens, c.num_max_nvl_chunked_recv_tokens,
                         c.num_max_rdma_chunked_send_tokens, c.num_max_rdma_chunked_recv_tokens);
}

/* ep_size_hint(num_ranks, T, hidden, num_topk, num_scales, use_fp8) -> bytes */
PyObject *tsp_ep_size_hint(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static const char fn[] = "deep_ep.Buffer.get_buffer_size_hint";
    (void)self;
    if (nargs != 6) return PyErr_Format(PyExc_TypeError, "%s: 6 arguments expected", fn);
    int err = 0;
    int64_t r = tsp_arg_i64(args[0], &err), t = tsp_arg_i64(args[1], &err), h = tsp_arg_i64(args[2], &err),
            k = tsp_arg_i64(args[3], &err), s = tsp_arg_i64(args[4], &err);
    int fp8 = tsp_arg_bool(args[5], &err);
    if (err) return NULL;
    if (r < 0 || r > INT32_MAX || k < 0 || k > INT32_MAX)
        return PyErr_Format(tsp_ValueError, "%s: num_ranks / num_topk out of range", fn);
    int64_t bytes;
    ts_status st = ts_ep_get_buffer_size_hint((int32_t)r, t, h, (int32_t)k, s, fp8, &bytes);
    if (st != TS_OK) return tsp_raise_status(st, fn);
    return PyLong_FromLongLong(bytes);
}

/* ep_ll_size_hint(T, hidden, num_ranks, num_experts) -> bytes */
PyObject *tsp_ep_ll_size_hint(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static const char fn[] = "deep_ep.Buffer.get_low_latency_rdma_size_hint";
    (void)self;
    if (nargs != 4) return PyErr_Format(PyExc_TypeError, "%s: 4 arguments expected", fn);
    int err = 0;
    int64_t t = tsp_arg_i64(args[0], &err), h = tsp_arg_i64(args[1], &err), r = tsp_arg_i64(args[2], &err),
            e = tsp_arg_i64(args[3], &err);
    if (err) return NULL;
    if (r < INT32_MIN || r > INT32_MAX) return PyErr_Format(tsp_ValueError, "%s: num_ranks out of range", fn);
    int64_t bytes;
    ts_status st = ts_ep_get_low_latency_rdma_size_hint(t, h, (int32_t)r, e, &bytes);
    if (st != TS_OK) return tsp_raise_status(st, fn);
    return PyLong_FromLongLong(bytes);
}

/* ep_layout(buf, topk_idx, num_experts, num_tokens_per_rank, num_tokens_per_rdma_rank or None,
 *           num_tokens_per_expert, is_token_in_rank) -> None (outputs allocated by the wrapper) */
PyObject *tsp_ep_layout(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static const char fn[] = "deep_ep.Buffer.get_dispatch_layout";
    (void)self;
    if (nargs != 7) return PyErr_Format(PyExc_TypeError, "%s: 7 arguments expected", fn);
    ts_ep_buffer *b = get_buf(args[0], fn);
    if (!b) return NULL;
    ts_tensor topk, ntpr, ntprdma_s, ntpe, itir;
    int have_rdma;
    if (tsp_view(args[1], fn, "topk_idx", 0, &topk) || tsp_view(args[3], fn, "num_tokens_per_rank", TSP_OUTPUT, &ntpr) ||
        (have_rdma = tsp_view(args[4], fn, "num_tokens_per_rdma_rank", TSP_OPTIONAL | TSP_OUTPUT, &ntprdma_s)) < 0 ||
        tsp_view(args[5], fn, "num_tokens_per_expert", TSP_OUTPUT, &ntpe) ||
        tsp_view(args[6], fn, "is_token_in_rank", TSP_OUTPUT, &itir))
        return NULL;
    int err = 0;
    int64_t e = tsp_arg_i64(args[2], &err);
    if (err) return NULL;
    ts_status st;
    TSP_CALL(st, ts_ep_get_dispatch_layout(b, &topk, e, &ntpr, have_rdma == 0 ? &ntprdma_s : NULL, &ntpe, &itir));
    if (st != TS_OK) return tsp_raise_status(st, fn);
    Py_RETURN_NONE;
}

/* ep_dispatch(buf, x, x_scales, topk_idx, topk_weights, num_tokens_per_rank,
 *             num_tokens_per_rdma_rank, num_tokens_per_expert, is_token_in_rank,
 *             expert_alignment, num_worst_tokens, config, handle)
 * -> (recv_x, recv_x_scales, recv_topk_idx, recv_topk_weights, recv_src_idx,
 *     num_recv_tokens_per_expert list or None, num_recv_tokens, new handle capsule or None);
 * tensors as tsp_describe_mem() gives them. */
PyObject *tsp_ep_dispatch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static const char fn[] = "deep_ep.Buffer.dispatch";
    (void)self;
    if (nargs != 13) return PyErr_Format(PyExc_TypeError, "%s: 13 arguments expected", fn);
    ts_ep_buffer *b = get_buf(args[0], fn);
    if (!b) return NULL;
    ts_tensor x, s[7];
    ts_ep_dispatch_args a;
    memset(&a, 0, sizeof a);
    static const char *names[7] = {"x_scales", "topk_idx", "topk_weights", "num_tokens_per_rank",
                                   "num_tokens_per_rdma_rank", "num_tokens_per_expert", "is_token_in_rank"};
    const ts_tensor *p[7];
    if (tsp_view(args[1], fn, "x", 0, &x)) return NULL;
    for (int i = 0; i < 7; i++)
        if (tsp_view_opt(args[2 + i], fn, names[i], &s[i], &p[i])) return NULL;
    a.x = &x;
    a.x_scales = p[0];
    a.topk_idx = p[1];
    a.topk_weights = p[2];
    a.num_tokens_per_rank = p[3];
    a.num_tokens_per_rdma_rank = p[4];
    a.num_tokens_per_expert = p[5];
    a.is_token_in_rank = p[6];
    int err = 0;
    a.expert_alignment = tsp_arg_i64(args[9], &err);
    a.num_worst_tokens = tsp_arg_i64(args[10], &err);
    if (err) return NULL;
    ts_ep_config cfg;
    if (arg_config(args[11], fn, &cfg, &a.config)) return NULL;
    int cached = args[12] != Py_None;
    if (cached) {
        ep_handle_rec *hr = PyCapsule_GetPointer(args[12], HANDLE_CAP);
        if (!hr) return NULL;
        a.handle = hr->h;
    }
    ep_handle_rec *nh = NULL;
    PyObject *hcap = NULL;
    if (!cached && !(hcap = tsp_new_capsule(sizeof *nh, HANDLE_CAP, handle_free, (void **)&nh))) return NULL;
    ts_ep_dispatch_result r;
    memset(&r, 0, sizeof r);
    ts_status st;
    TSP_CALL(st, ts_ep_dispatch(b, &a, &r, cached ? NULL : &nh->h));
    if (st != TS_OK) {
        Py_XDECREF(hcap);
        return tsp_raise_status(st, fn);
    }
    PyObject *list;
    if (cached) {
        list = Py_NewRef(Py_None);
    } else {
        int64_t n = r.num_recv_tokens_per_expert.ndim ? r.num_recv_tokens_per_expert.shape[0] : 0;
        if (!r.num_recv_tokens_per_expert.data) n = 0;
        list = PyList_New(n);
        for (int64_t i = 0; list && i < n; i++) {
            const int32_t *v = r.num_recv_tokens_per_expert.data;
            PyObject *o = PyLong_FromLong(v[i * r.num_recv_tokens_per_expert.strides[0]]);
            if (!o) Py_CLEAR(list);
            else PyList_SET_ITEM(list, i, o);
        }
    }
    if (!list) {
        Py_XDECREF(hcap);
        return NULL;
    }
    return Py_BuildValue("(NNNNNNLN)", tsp_describe_mem(&r.recv_x), tsp_describe_mem(&r.recv_x_scales),
                         tsp_describe_mem(&r.recv_topk_idx), tsp_describe_mem(&r.recv_topk_weights),
                         tsp_describe_mem(&r.recv_src_idx), list,
                         (long long)r.num_recv_tokens, hcap ? hcap : Py_NewRef(Py_None));
}

/* ep_handle_info(handle, num_ranks) -> (num_recv_tokens, [offsets R+1]) */
PyObject *tsp_ep_handle_info(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "ep_handle_info: 2 arguments expected");
    ep_handle_rec *hr = PyCapsule_GetPointer(args[0], HANDLE_CAP);
    if (!hr) return NULL;
    int err = 0;
    int64_t r = tsp_arg_i64(args[1], &err);
    if (err) return NULL;
    if (r < 1 || r > (1 << 20)) return PyErr_Format(tsp_ValueError, "ep_handle_info: num_ranks out of range");
    int64_t n, *off = PyMem_Malloc((size_t)(r + 1) * sizeof *off);
    if (!off) return PyErr_NoMemory();
    ts_status st = ts_ep_handle_get_num_recv_tokens(hr->h, &n);
    if (st == TS_OK) st = ts_ep_handle_get_recv_rank_offsets(hr->h, off, r + 1);
    if (st != TS_OK) {
        PyMem_Free(off);
        return tsp_raise_status(st, "deep_ep handle");
    }
    PyObject *list = PyList_New(r + 1);
    for (int64_t i = 0; list && i <= r; i++) {
        PyObject *o = PyLong_FromLongLong(off[i]);
        if (!o) Py_CLEAR(list);
        else PyList_SET_ITEM(list, i, o);
    }
    PyMem_Free(off);
    if (!list) return NULL;
    return Py_BuildValue("(LN)", (long long)n, list);
}

/* ep_combine(buf, handle, x, topk_weights, bias0, bias1, config, combined_x, combined_topk_weights) */
PyObject *tsp_ep_combine(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static const char fn[] = "deep_ep.Buffer.combine";
    (void)self;
    if (nargs != 9) return PyErr_Format(PyExc_TypeError, "%s: 9 arguments expected", fn);
    ts_ep_buffer *b = get_buf(args[0], fn);
    if (!b) return NULL;
    ep_handle_rec *hr = PyCapsule_GetPointer(args[1], HANDLE_CAP);
    if (!hr) return NULL;
    ts_tensor x, ws, b0s, b1s, out, outw_s;
    const ts_tensor *w, *b0, *b1;
    int have_w;
    if (tsp_view(args[2], fn, "x", 0, &x) || tsp_view_opt(args[3], fn, "topk_weights", &ws, &w) ||
        tsp_view_opt(args[4], fn, "bias[0]", &b0s, &b0) || tsp_view_opt(args[5], fn, "bias[1]", &b1s, &b1) ||
        tsp_view(args[7], fn, "combined_x", TSP_OUTPUT, &out) ||
        (have_w = tsp_view(args[8], fn, "combined_topk_weights", TSP_OPTIONAL | TSP_OUTPUT, &outw_s)) < 0)
        return NULL;
    ts_ep_config cfg;
    const ts_ep_config *c;
    if (arg_config(args[6], fn, &cfg, &c)) return NULL;
    ts_status st;
    TSP_CALL(st, ts_ep_combine(b, hr->h, &x, w, b0, b1, c, &out, have_w == 0 ? &outw_s : NULL));
    if (st != TS_OK) return tsp_raise_status(st, fn);
    Py_RETURN_NONE;
}

/* ep_clean_ll(buf, T, hidden, num_experts) */
PyObject *tsp_ep_clean_ll(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static const char fn[] = "deep_ep.Buffer.clean_low_latency_buffer";
    (void)self;
    if (nargs != 4) return PyErr_Format(PyExc_TypeError, "%s: 4 arguments expected", fn);
    ts_ep_buffer *b = get_buf(args[0], fn);
    if (!b) return NULL;
    int err = 0;
    int64_t t = tsp_arg_i64(args[1], &err), h = tsp_arg_i64(args[2], &err), e = tsp_arg_i64(args[3], &err);
    if (err) return NULL;
    ts_status st;
    TSP_CALL(st, ts_ep_clean_low_latency_buffer(b, t, h, e));
    if (st != TS_OK) return tsp_raise_status(st, fn);
    Py_RETURN_NONE;
}

/* Copy a LL handle's src_info / layout_range into caller tensors (contiguous i32 [E/R, S],
 * i64 [E/R, R]). */
static int ll_copy_info(const ts_ep_ll_handle *h, PyObject *src_obj, PyObject *lay_obj, int64_t num_ranks,
                        const char *fn) {
    ts_tensor si, lr;
    if (tsp_view(src_obj, fn, "src_info", TSP_OUTPUT, &si) || tsp_view(lay_obj, fn, "layout_range", TSP_OUTPUT, &lr))
        return -1;
    const int32_t *src;
    const int64_t *lay;
    int64_t t, hidden, e;
    ts_status st = ts_ep_ll_handle_info(h, &src, &lay, &t, &hidden, &e);
    if (st != TS_OK) {
        tsp_raise_status(st, fn);
        return -1;
    }
    int64_t el = e / num_ranks, s = num_ranks * t;
    if (si.dtype != TS_I32 || si.ndim != 2 || si.shape[0] != el || si.shape[1] != s || si.strides[1] != 1 ||
        si.strides[0] != s || lr.dtype != TS_I64 || lr.ndim != 2 || lr.shape[0] != el || lr.shape[1] != num_ranks ||
        lr.strides[1] != 1 || lr.strides[0] != num_ranks) {
        PyErr_Format(tsp_ValueError, "%s: internal: handle tensors of the wrong layout", fn);
        return -1;
    }
    if (el * s > 0) memcpy(si.data, src, (size_t)(el * s) * sizeof *src);
    if (el * num_ranks > 0) memcpy(lr.data, lay, (size_t)(el * num_ranks) * sizeof *lay);
    return 0;
}

static PyObject *hook_capsule(ts_ep_ll_hook *hook) {
    ep_hook_rec *hr;
    PyObject *cap = tsp_new_capsule(sizeof *hr, HOOK_CAP, hook_free, (void **)&hr);
    if (cap) hr->hook = hook;
    return cap;
}

/* ep_ll_dispatch(buf, x, topk_idx, T, E, cum_stats, wait_stats, use_fp8, round_scale, use_ue8m0,
 *                return_recv_hook, recv_x, recv_x_scales, recv_count, src_info, layout_range,
 *                num_ranks) -> (ll handle capsule, hook capsule or None). Without a hook the
 * handle's arrays are copied into src_info / layout_range at once; with one, by ep_ll_hook_run. */
PyObject *tsp_ep_ll_dispatch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static const char fn[] = "deep_ep.Buffer.low_latency_dispatch";
    (void)self;
    if (nargs != 17) return PyErr_Format(PyExc_TypeError, "%s: 17 arguments expected", fn);
    ts_ep_buffer *b = get_buf(args[0], fn);
    if (!b) return NULL;
    ts_tensor x, topk, cum_s, wait_s, rx, rs_s, rc;
    int have_cum, have_wait, have_rs;
    if (tsp_view(args[1], fn, "x", 0, &x) || tsp_view(args[2], fn, "topk_idx", 0, &topk) ||
        (have_cum = tsp_view(args[5], fn, "cumulative_local_expert_recv_stats", TSP_OPTIONAL | TSP_OUTPUT, &cum_s)) < 0 ||
        (have_wait = tsp_view(args[6], fn, "dispatch_wait_recv_cost_stats", TSP_OPTIONAL | TSP_OUTPUT, &wait_s)) < 0 ||
        tsp_view(args[11], fn, "recv_x", TSP_OUTPUT, &rx) ||
        (have_rs = tsp_view(args[12], fn, "recv_x_scales", TSP_OPTIONAL | TSP_OUTPUT, &rs_s)) < 0 ||
        tsp_view(args[13], fn, "recv_count", TSP_OUTPUT, &rc))
        return NULL;
    int err = 0;
    ts_ep_ll_dispatch_args a;
    memset(&a, 0, sizeof a);
    a.x = &x;
    a.topk_idx = &topk;
    a.num_max_dispatch_tokens_per_rank = tsp_arg_i64(args[3], &err);
    a.num_experts = tsp_arg_i64(args[4], &err);
    a.cumulative_local_expert_recv_stats = have_cum == 0 ? &cum_s : NULL;
    a.dispatch_wait_recv_cost_stats = have_wait == 0 ? &wait_s : NULL;
    a.use_fp8 = tsp_arg_bool(args[7], &err);
    a.round_scale = tsp_arg_bool(args[8], &err);
    a.use_ue8m0 = tsp_arg_bool(args[9], &err);
    a.return_recv_hook = tsp_arg_bool(args[10], &err);
    int64_t num_ranks = tsp_arg_i64(args[16], &err);
    if (err) return NULL;
    ts_ep_ll_dispatch_out o = {&rx, have_rs == 0 ? &rs_s : NULL, &rc};
    ep_ll_handle_rec *hr;
    PyObject *hcap = tsp_new_capsule(sizeof *hr, LL_HANDLE_CAP, ll_handle_free, (void **)&hr);
    if (!hcap) return NULL;
    ts_ep_ll_hook *hook = NULL;
    ts_status st;
    TSP_CALL(st, ts_ep_low_latency_dispatch(b, &a, &o, &hr->h, a.return_recv_hook ? &hook : NULL));
    if (st != TS_OK) {
        Py_DECREF(hcap);
        return tsp_raise_status(st, fn);
    }
    if (!a.return_recv_hook) {
        if (ll_copy_info(hr->h, args[14], args[15], num_ranks, fn)) {
            Py_DECREF(hcap);
            return NULL;
        }
        return Py_BuildValue("(NO)", hcap, Py_None);
    }
    PyObject *kcap = hook_capsule(hook);
    if (!kcap) {
        Py_DECREF(hcap);
        return NULL;
    }
    return Py_BuildValue("(NN)", hcap, kcap);
}

/* ep_ll_hook_run(hook, ll_handle or None, src_info, layout_range, num_ranks): the receive phase,
 * once; a dispatch hook then copies the handle's arrays. */
PyObject *tsp_ep_ll_hook_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static const char fn[] = "deep_ep hook";
    (void)self;
    if (nargs != 5) return PyErr_Format(PyExc_TypeError, "%s: 5 arguments expected", fn);
    ep_hook_rec *k = PyCapsule_GetPointer(args[0], HOOK_CAP);
    if (!k) return NULL;
    if (k->spent) return PyErr_Format(PyExc_RuntimeError, "%s: a receive hook runs only once", fn);
    k->spent = 1;
    ts_status st;
    TSP_CALL(st, ts_ep_ll_hook_run(k->hook));
    if (st != TS_OK) return tsp_raise_status(st, fn);
    if (args[1] != Py_None) {
        ep_ll_handle_rec *hr = PyCapsule_GetPointer(args[1], LL_HANDLE_CAP);
        int err = 0;
        int64_t r = tsp_arg_i64(args[4], &err);
        if (!hr || err || ll_copy_info(hr->h, args[2], args[3], r, fn)) return NULL;
    }
    Py_RETURN_NONE;
}

/* ep_ll_combine(buf, x (None with zero_copy), topk_idx, topk_weights, ll_handle, use_logfmt, zero_copy,
 *               return_recv_hook, out, combine_wait_recv_cost_stats) -> hook capsule or None */
PyObject *tsp_ep_ll_combine(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static const char fn[] = "deep_ep.Buffer.low_latency_combine";
    (void)self;
    if (nargs != 10) return PyErr_Format(PyExc_TypeError, "%s: 10 arguments expected", fn);
    ts_ep_buffer *b = get_buf(args[0], fn);
    if (!b) return NULL;
    ts_tensor xs, topk, w, out, wait_s;
    const ts_tensor *x;
    int have_wait;
    if (tsp_view_opt(args[1], fn, "x", &xs, &x) || tsp_view(args[2], fn, "topk_idx", 0, &topk) ||
        tsp_view(args[3], fn, "topk_weights", 0, &w) || tsp_view(args[8], fn, "out", TSP_OUTPUT, &out) ||
        (have_wait = tsp_view(args[9], fn, "combine_wait_recv_cost_stats", TSP_OPTIONAL | TSP_OUTPUT, &wait_s)) < 0)
        return NULL;
    ep_ll_handle_rec *hr = PyCapsule_GetPointer(args[4], LL_HANDLE_CAP);
    if (!hr) return NULL;
    int err = 0;
    ts_ep_ll_combine_args a;
    memset(&a, 0, sizeof a);
    a.x = x;
    a.topk_idx = &topk;
    a.topk_weights = &w;
    a.handle = hr->h;
    a.use_logfmt = tsp_arg_bool(args[5], &err);
    a.zero_copy = tsp_arg_bool(args[6], &err);
    a.return_recv_hook = tsp_arg_bool(args[7], &err);
    a.combine_wait_recv_cost_stats = have_wait == 0 ? &wait_s : NULL;
    if (err) return NULL;
    ts_ep_ll_hook *hook = NULL;
    ts_status st;
    TSP_CALL(st, ts_ep_low_latency_combine(b, &a, &out, a.return_recv_hook ? &hook : NULL));
    if (st != TS_OK) return tsp_raise_status(st, fn);
    if (!a.return_recv_hook) Py_RETURN_NONE;
    return hook_capsule(hook);
}

/* ep_ll_next_combine_buffer(buf, ll_handle) -> tsp_describe_mem() of the zero-copy view */
PyObject *tsp_ep_ll_next_combine_buffer(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static const char fn[] = "deep_ep.Buffer.get_next_low_latency_combine_buffer";
    (void)self;
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "%s: 2 arguments expected", fn);
    ts_ep_buffer *b = get_buf(args[0], fn);
    if (!b) return NULL;
    ep_ll_handle_rec *hr = PyCapsule_GetPointer(args[1], LL_HANDLE_CAP);
    if (!hr) return NULL;
    ts_tensor t;
    memset(&t, 0, sizeof t);
    ts_status st = ts_ep_get_next_low_latency_combine_buffer(b, hr->h, &t);
    if (st != TS_OK) return tsp_raise_status(st, fn);
    return tsp_describe_mem(&t);
}

#define F(name) {#name, (PyCFunction)(void (*)(void))tsp_##name, METH_FASTCALL, NULL}
#define O(name) {#name, (PyCFunction)tsp_##name, METH_O, NULL}
static PyMethodDef ep_methods[] = {
    F(ep_buffer_new), O(ep_buffer_destroy), O(ep_buffer_info), F(ep_config), F(ep_size_hint),
    F(ep_ll_size_hint), F(ep_layout), F(ep_dispatch), F(ep_handle_info), F(ep_combine),
    F(ep_clean_ll), F(ep_ll_dispatch), F(ep_ll_hook_run), F(ep_ll_combine), F(ep_ll_next_combine_buffer),
    {NULL, NULL, 0, NULL},
};

int tsp_ep_init(PyObject *m) {
    if (PyModule_AddFunctions(m, ep_methods) < 0) return -1;
    return PyModule_AddIntConstant(m, "have_ep", 1);
}
#else
int tsp_ep_init(PyObject *m) {
    return PyModule_AddIntConstant(m, "have_ep", 0);
}
#endif
