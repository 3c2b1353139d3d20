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

/* The scheduling handle travels as a capsule owning a ts_mla_metadata (freed with it). Its
 * context pointer marks a call in flight: the handle's workspace must not be shared by two
 * calls at once (flash_mla.h), and with the GIL released two threads could try. */
static const char meta_name[] = "tilestack.mla_metadata";

static void meta_free(PyObject *cap) {
    ts_mla_metadata_free(PyCapsule_GetPointer(cap, meta_name));
}

PyObject *tsp_mla_metadata_new(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    ts_mla_metadata *m = NULL;
    ts_status st = ts_get_mla_metadata(&m);
    if (st != TS_OK) return tsp_raise_status(st, "flash_mla.get_mla_metadata");
    PyObject *cap = PyCapsule_New(m, meta_name, meta_free);
    if (!cap) ts_mla_metadata_free(m);
    return cap;
}

/* with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v, meta, softmax_scale, causal,
 *   is_fp8_kvcache, indices, attn_sink, extra_k_cache, extra_indices_in_kvcache, topk_length,
 *   extra_topk_length, out, lse) */
PyObject *tsp_flash_mla_with_kvcache(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static const char fn[] = "flash_mla.flash_mla_with_kvcache";
    (void)self;
    if (nargs != 17) return PyErr_Format(PyExc_TypeError, "%s: 17 arguments expected", fn);
    ts_tensor q, kc, bt_s, sl_s, idx_s, sink_s, ekc_s, eidx_s, tl_s, etl_s, out, lse;
    ts_flash_mla_kvcache_args a = {0};
    if (tsp_view(args[0], fn, "q", 0, &q) || tsp_view(args[1], fn, "k_cache", 0, &kc) ||
        tsp_view_opt(args[2], fn, "block_table", &bt_s, &a.block_table) ||
        tsp_view_opt(args[3], fn, "cache_seqlens", &sl_s, &a.cache_seqlens) ||
        tsp_view_opt(args[9], fn, "indices", &idx_s, &a.indices) ||
        tsp_view_opt(args[10], fn, "attn_sink", &sink_s, &a.attn_sink) ||
        tsp_view_opt(args[11], fn, "extra_k_cache", &ekc_s, &a.extra_k_cache) ||
        tsp_view_opt(args[12], fn, "extra_indices_in_kvcache", &eidx_s, &a.extra_indices_in_kvcache) ||
        tsp_view_opt(args[13], fn, "topk_length", &tl_s, &a.topk_length) ||
        tsp_view_opt(args[14], fn, "extra_topk_length", &etl_s, &a.extra_topk_length) ||
        tsp_view(args[15], fn, "out", TSP_OUTPUT, &out) || tsp_view(args[16], fn, "lse", TSP_OUTPUT, &lse))
        return NULL;
    if (!PyCapsule_IsValid(args[5], meta_name))
        return PyErr_Format(tsp_TypeError, "%s: argument 'tile_scheduler_metadata' must come from "
                            "flash_mla.get_mla_metadata()", fn);
    PyObject *cap = args[5];
    a.q = &q;
    a.k_cache = &kc;
    a.head_dim_v = PyLong_AsLongLong(args[4]);
    a.softmax_scale = args[6] == Py_None ? 0.0f : (float)PyFloat_AsDouble(args[6]);
    int causal = PyObject_IsTrue(args[7]), fp8 = PyObject_IsTrue(args[8]);
    if (PyErr_Occurred() || causal < 0 || fp8 < 0) return NULL;
    a.causal = causal;
    a.is_fp8_kvcache = fp8;
    if (PyCapsule_GetContext(cap))
        return PyErr_Format(PyExc_RuntimeError, "%s: this tile_scheduler_metadata is in use by another "
                            "call (one handle serves one call at a time)", fn);
    a.tile_scheduler_metadata = PyCapsule_GetPointer(cap, meta_name);
    PyCapsule_SetContext(cap, (void *)1);
    ts_status st;
    TSP_CALL(st, ts_flash_mla_with_kvcache(&a, &out, &lse));
    PyCapsule_SetContext(cap, NULL);
    if (st != TS_OK) return tsp_raise_status(st, fn);
    Py_RETURN_NONE;
}
