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
