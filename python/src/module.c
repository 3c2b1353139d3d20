/* _tilestack: the one CPython extension behind deep_gemm, deep_select, flash_mla, deep_ep and
 * tile_kernels. It holds only argument conversion; every operation is a libtilestack call. The
 * functions take positional arguments in a fixed order (METH_FASTCALL, no keyword parsing): the
 * Python wrappers carry upstream's signatures, keywords and defaults. */
#include "tsview.h"

#define FASTCALL(name) PyObject *tsp_##name(PyObject *, PyObject *const *, Py_ssize_t);
#define ONEARG(name) PyObject *tsp_##name(PyObject *, PyObject *);
FASTCALL(topk)
FASTCALL(tk)
FASTCALL(fp8_gemm)
FASTCALL(bf16_gemm)
FASTCALL(m_grouped_fp8_contiguous)
FASTCALL(m_grouped_bf16_contiguous)
FASTCALL(m_grouped_fp8_masked)
FASTCALL(m_grouped_bf16_masked)
FASTCALL(k_grouped_fp8)
FASTCALL(k_grouped_bf16)
FASTCALL(einsum)
FASTCALL(fp8_einsum)
FASTCALL(tf32_hc_prenorm_gemm)
FASTCALL(fp8_gemm_nt_skip_head_mid)
FASTCALL(cast)
FASTCALL(cast_back)
FASTCALL(transpose_packed_fp4)
FASTCALL(calc_diff)
FASTCALL(transform_sf)
FASTCALL(view_info)
FASTCALL(flash_mla_sparse_fwd)
FASTCALL(flash_mla_with_kvcache)
ONEARG(mla_metadata_new)
FASTCALL(mqa_logits)
FASTCALL(mqa_logits_row_stride)
FASTCALL(paged_mqa_logits)
FASTCALL(paged_mqa_logits_row_stride)
FASTCALL(paged_mqa_logits_metadata)
ONEARG(get_stride_requirement)
ONEARG(set_num_sms)
ONEARG(get_num_sms)
ONEARG(set_tc_util)
ONEARG(get_tc_util)
ONEARG(set_mk_alignment)
ONEARG(get_mk_alignment)
ONEARG(set_pdl)
ONEARG(get_pdl)
ONEARG(set_ignore_compile_dims)
ONEARG(get_theoretical_mk_alignment)
FASTCALL(set_block_size_multiple_of)

/* view_info(obj): (data, dtype name, shape, strides) of the view the layer builds, for tests
 * (no copy: data is the tensor's own pointer). */
PyObject *tsp_view_info(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 1) return PyErr_Format(PyExc_TypeError, "view_info: 1 argument expected");
    ts_tensor t;
    if (tsp_view(args[0], "view_info", "obj", 0, &t)) return NULL;
    PyObject *shape = PyTuple_New(t.ndim), *strides = PyTuple_New(t.ndim);
    if (!shape || !strides) {
        Py_XDECREF(shape);
        Py_XDECREF(strides);
        return NULL;
    }
    for (int i = 0; i < t.ndim; i++) {
        PyTuple_SET_ITEM(shape, i, PyLong_FromLongLong(t.shape[i]));
        PyTuple_SET_ITEM(strides, i, PyLong_FromLongLong(t.strides[i]));
    }
    return Py_BuildValue("(NsNN)", PyLong_FromVoidPtr(t.data), ts_dtype_name(t.dtype), shape, strides);
}

/* A no-op that parses n tensors like a GEMM would and calls nothing: the bench's measure of
 * the binding's own cost. */
static PyObject *tsp_parse_only(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    ts_tensor t;
    for (Py_ssize_t i = 0; i < nargs; i++)
        if (tsp_view(args[i], "parse_only", "arg", TSP_OPTIONAL, &t) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *tsp_last_c_seconds_get(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    return PyFloat_FromDouble(tsp_last_c_seconds);
}

extern int tsp_use_dlpack;

/* _set_dlpack(flag): tests read the same tensors through both paths of the view layer. */
static PyObject *tsp_set_dlpack(PyObject *self, PyObject *arg) {
    (void)self;
    int v = PyObject_IsTrue(arg);
    if (v < 0) return NULL;
    tsp_use_dlpack = v;
    Py_RETURN_NONE;
}

static PyObject *tsp_version(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    return PyUnicode_FromString(ts_version_string());
}

#define F(name) {#name, (PyCFunction)(void (*)(void))tsp_##name, METH_FASTCALL, NULL}
#define O(name) {#name, (PyCFunction)tsp_##name, METH_O, NULL}
#define N(name) {#name, (PyCFunction)tsp_##name, METH_NOARGS, NULL}
static PyMethodDef methods[] = {
    F(topk), F(tk), F(fp8_gemm), F(bf16_gemm), F(m_grouped_fp8_contiguous), F(m_grouped_bf16_contiguous),
    F(m_grouped_fp8_masked), F(m_grouped_bf16_masked), F(k_grouped_fp8), F(k_grouped_bf16),
    F(einsum), F(fp8_einsum), F(tf32_hc_prenorm_gemm), F(fp8_gemm_nt_skip_head_mid), F(cast),
    F(cast_back), F(transpose_packed_fp4), F(calc_diff), F(transform_sf), F(view_info), F(flash_mla_sparse_fwd), F(flash_mla_with_kvcache), N(mla_metadata_new), F(mqa_logits), F(mqa_logits_row_stride),
    F(paged_mqa_logits), F(paged_mqa_logits_row_stride), F(paged_mqa_logits_metadata), F(parse_only),
    N(get_stride_requirement), O(set_num_sms), N(get_num_sms), O(set_tc_util), N(get_tc_util),
    O(set_mk_alignment), N(get_mk_alignment), N(version), {"_set_dlpack", tsp_set_dlpack, METH_O, NULL}, {"last_c_seconds", tsp_last_c_seconds_get, METH_NOARGS, NULL}, O(set_pdl), N(get_pdl),
    O(set_ignore_compile_dims), O(get_theoretical_mk_alignment), F(set_block_size_multiple_of),
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_tilestack", "libtilestack bindings (use deep_gemm, deep_select, ...)",
    -1, methods, NULL, NULL, NULL, NULL,
};

int tsp_ep_init(PyObject *m); /* bind_ep.c: deep_ep's functions, when built with MPI */
int tsp_mega_init(PyObject *m); /* bind_mega.c: deep_gemm.mega's, likewise */
int tsp_ep_elastic_init(PyObject *m); /* bind_ep_elastic.c: deep_ep.ElasticBuffer's, likewise */

PyMODINIT_FUNC PyInit__tilestack(void) {
    PyObject *m = PyModule_Create(&moduledef);
    if (m && (tsp_init(m) < 0 || tsp_ep_init(m) < 0 || tsp_mega_init(m) < 0 ||
              tsp_ep_elastic_init(m) < 0)) Py_CLEAR(m);
    return m;
}
