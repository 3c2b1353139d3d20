/* The native half of flash_mla.flash_mla_sparse_fwd (python/flash_mla/__init__.py allocates the
 * outputs with upstream's shapes and calls this). */
#include "tsview.h"

#include "tilestack/flash_mla.h"

/* sparse_fwd(q, kv, indices, sm_scale, d_v, attn_sink, topk_length, out, max_logits, lse) */
PyObject *tsp_flash_mla_sparse_fwd(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static const char fn[] = "flash_mla.flash_mla_sparse_fwd";
    (void)self;
    if (nargs != 10) return PyErr_Format(PyExc_TypeError, "%s: 10 arguments expected", fn);
    ts_tensor q, kv, idx, sink_s, len_s, out, ml, lse;
    const ts_tensor *sink, *len;
    if (tsp_view(args[0], fn, "q", 0, &q) || tsp_view(args[1], fn, "kv", 0, &kv) ||
        tsp_view(args[2], fn, "indices", 0, &idx) ||
        tsp_view_opt(args[5], fn, "attn_sink", &sink_s, &sink) ||
        tsp_view_opt(args[6], fn, "topk_length", &len_s, &len) ||
        tsp_view(args[7], fn, "out", TSP_OUTPUT, &out) ||
        tsp_view(args[8], fn, "max_logits", TSP_OUTPUT, &ml) ||
        tsp_view(args[9], fn, "lse", TSP_OUTPUT, &lse))
        return NULL;
    double scale = PyFloat_AsDouble(args[3]);
    long long d_v = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred()) return NULL;
    ts_status st;
    TSP_CALL(st, ts_flash_mla_sparse_fwd(&q, &kv, &idx, (float)scale, d_v, sink, len, &out, &ml, &lse));
    if (st != TS_OK) return tsp_raise_status(st, fn);
    Py_RETURN_NONE;
}
