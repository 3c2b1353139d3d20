/* The native half of deep_gemm's MQA logits (the lightning indexer, non-paged):
 * python/deep_gemm/attention.py allocates upstream's padded logits and calls these. */
#include "tsview.h"

#include "tilestack/mqa_logits.h"

/* mqa_logits(legacy, q, q_sf, kv, kv_sf, weights, ks, ke, clean_logits, max_seqlen_k, logits) */
PyObject *tsp_mqa_logits(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 11) return PyErr_Format(PyExc_TypeError, "mqa_logits: 11 arguments expected");
    int legacy = PyObject_IsTrue(args[0]);
    if (legacy < 0) return NULL;
    const char *fn = legacy ? "deep_gemm.fp8_mqa_logits" : "deep_gemm.fp8_fp4_mqa_logits";
    ts_tensor q, qsf_s, kv, kv_sf, w, ks, ke, logits;
    const ts_tensor *q_sf;
    if (tsp_view(args[1], fn, "q", 0, &q) || tsp_view_opt(args[2], fn, "q_sf", &qsf_s, &q_sf) ||
        tsp_view(args[3], fn, "kv", 0, &kv) || tsp_view(args[4], fn, "kv_sf", 0, &kv_sf) ||
        tsp_view(args[5], fn, "weights", 0, &w) ||
        tsp_view(args[6], fn, "cu_seq_len_k_start", 0, &ks) ||
        tsp_view(args[7], fn, "cu_seq_len_k_end", 0, &ke) ||
        tsp_view(args[10], fn, "logits", TSP_OUTPUT, &logits))
        return NULL;
    int clean = PyObject_IsTrue(args[8]);
    long msk = PyLong_AsLong(args[9]);
    if (clean < 0 || (msk == -1 && PyErr_Occurred())) return NULL;
    if (msk < 0 || msk > INT32_MAX)
        return PyErr_Format(tsp_ValueError, "%s: max_seqlen_k = %ld out of range", fn, msk);
    /* packed fp4 travels as int8 (upstream's kPackedFP4) */
    if (q.dtype == TS_I8) q.dtype = TS_E2M1X2;
    if (kv.dtype == TS_I8) kv.dtype = TS_E2M1X2;
    ts_status st;
    if (legacy)
        TSP_CALL(st, ts_fp8_mqa_logits(&q, &kv, &kv_sf, &w, &ks, &ke, clean, (int32_t)msk, &logits));
    else
        TSP_CALL(st, ts_fp8_fp4_mqa_logits(&q, q_sf, &kv, &kv_sf, &w, &ks, &ke, clean, (int32_t)msk,
                                           &logits));
    if (st != TS_OK) return tsp_raise_status(st, fn);
    Py_RETURN_NONE;
}

/* mqa_logits_row_stride(seq_len_kv, max_seqlen_k, bf16) -> elements */
PyObject *tsp_mqa_logits_row_stride(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    const char *fn = "deep_gemm.fp8_fp4_mqa_logits";
    if (nargs != 3) return PyErr_Format(PyExc_TypeError, "mqa_logits_row_stride: 3 arguments expected");
    long long skv = PyLong_AsLongLong(args[0]);
    long msk = PyLong_AsLong(args[1]);
    int bf16 = PyObject_IsTrue(args[2]);
    if (PyErr_Occurred() || bf16 < 0) return NULL;
    if (msk < 0 || msk > INT32_MAX)
        return PyErr_Format(tsp_ValueError, "%s: max_seqlen_k = %ld out of range", fn, msk);
    int64_t rs;
    ts_status st = ts_mqa_logits_row_stride(skv, (int32_t)msk, bf16 ? TS_BF16 : TS_F32, &rs);
    if (st != TS_OK) return tsp_raise_status(st, fn);
    return PyLong_FromLongLong(rs);
}

/* paged_mqa_logits(legacy, q, q_sf, kv_cache, weights, context_lens, block_table, schedule_meta,
 *   max_context_len, clean_logits, logits) */
PyObject *tsp_paged_mqa_logits(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 11) return PyErr_Format(PyExc_TypeError, "paged_mqa_logits: 11 arguments expected");
    int legacy = PyObject_IsTrue(args[0]);
    if (legacy < 0) return NULL;
    const char *fn = legacy ? "deep_gemm.fp8_paged_mqa_logits" : "deep_gemm.fp8_fp4_paged_mqa_logits";
    ts_tensor q, qsf_s, kvc, w, cl, bt, meta, logits;
    const ts_tensor *q_sf;
    if (tsp_view(args[1], fn, "q", 0, &q) || tsp_view_opt(args[2], fn, "q_sf", &qsf_s, &q_sf) ||
        tsp_view(args[3], fn, "kv_cache", 0, &kvc) || tsp_view(args[4], fn, "weights", 0, &w) ||
        tsp_view(args[5], fn, "context_lens", 0, &cl) ||
        tsp_view(args[6], fn, "block_table", 0, &bt) ||
        tsp_view(args[7], fn, "schedule_meta", 0, &meta) ||
        tsp_view(args[10], fn, "logits", TSP_OUTPUT, &logits))
        return NULL;
    long mcl = PyLong_AsLong(args[8]);
    int clean = PyObject_IsTrue(args[9]);
    if ((mcl == -1 && PyErr_Occurred()) || clean < 0) return NULL;
    if (mcl < 0 || mcl > INT32_MAX)
        return PyErr_Format(tsp_ValueError, "%s: max_context_len = %ld out of range", fn, mcl);
    if (q.dtype == TS_I8) q.dtype = TS_E2M1X2;
    ts_status st;
    if (legacy)
        TSP_CALL(st, ts_fp8_paged_mqa_logits(&q, &kvc, &w, &cl, &bt, &meta, (int32_t)mcl, clean, &logits));
    else
        TSP_CALL(st, ts_fp8_fp4_paged_mqa_logits(&q, q_sf, &kvc, &w, &cl, &bt, &meta, (int32_t)mcl,
                                                 clean, &logits));
    if (st != TS_OK) return tsp_raise_status(st, fn);
    Py_RETURN_NONE;
}

/* paged_mqa_logits_row_stride(max_context_len, bf16) -> elements */
PyObject *tsp_paged_mqa_logits_row_stride(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    const char *fn = "deep_gemm.fp8_fp4_paged_mqa_logits";
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "paged_mqa_logits_row_stride: 2 arguments expected");
    long mcl = PyLong_AsLong(args[0]);
    int bf16 = PyObject_IsTrue(args[1]);
    if (PyErr_Occurred() || bf16 < 0) return NULL;
    if (mcl < 0 || mcl > INT32_MAX)
        return PyErr_Format(tsp_ValueError, "%s: max_context_len = %ld out of range", fn, mcl);
    int64_t rs;
    ts_status st = ts_paged_mqa_logits_row_stride((int32_t)mcl, bf16 ? TS_BF16 : TS_F32, &rs);
    if (st != TS_OK) return tsp_raise_status(st, fn);
    return PyLong_FromLongLong(rs);
}

/* paged_mqa_logits_metadata(context_lens, block_kv, num_sms, out) */
PyObject *tsp_paged_mqa_logits_metadata(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    const char *fn = "deep_gemm.get_paged_mqa_logits_metadata";
    if (nargs != 4) return PyErr_Format(PyExc_TypeError, "%s: 4 arguments expected", fn);
    ts_tensor cl, out;
    if (tsp_view(args[0], fn, "context_lens", 0, &cl) || tsp_view(args[3], fn, "out", TSP_OUTPUT, &out))
        return NULL;
    long bkv = PyLong_AsLong(args[1]), sms = PyLong_AsLong(args[2]);
    if (PyErr_Occurred()) return NULL;
    if (bkv < INT32_MIN || bkv > INT32_MAX || sms < INT32_MIN || sms > INT32_MAX)
        return PyErr_Format(tsp_ValueError, "%s: block_kv / num_sms out of range", fn);
    ts_status st;
    TSP_CALL(st, ts_get_paged_mqa_logits_metadata(&cl, (int32_t)bkv, (int32_t)sms, &out));
    if (st != TS_OK) return tsp_raise_status(st, fn);
    Py_RETURN_NONE;
}
