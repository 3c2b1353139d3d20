/* _tilestack.topk: the native half of deep_select.topk (python/deep_select/__init__.py checks
 * the arguments upstream checks eagerly, allocates the padded outputs and calls this). */
#include "tsview.h"

#include "tilestack/select.h"

/* topk(input, k, end, offset, values, output_idx, sorted, sorted_index, return_value,
 *      abort_when_nan_found, idx_oob_fill_value, value_oob_fill_value) -> None */
PyObject *tsp_topk(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static const char fn[] = "deep_select.topk";
    (void)self;
    if (nargs != 12) return PyErr_Format(PyExc_TypeError, "%s: 12 arguments expected", fn);
    ts_tensor input, end_s, off_s, values, idx;
    const ts_tensor *end, *off;
    if (tsp_view(args[0], fn, "input", 0, &input) || tsp_view_opt(args[2], fn, "end", &end_s, &end) ||
        tsp_view_opt(args[3], fn, "output_idx_offset", &off_s, &off))
        return NULL;
    int have_values = tsp_view(args[4], fn, "values", TSP_OPTIONAL | TSP_OUTPUT, &values);
    if (have_values < 0 || tsp_view(args[5], fn, "output_idx", TSP_OUTPUT, &idx)) return NULL;
    int64_t k = PyLong_AsLongLong(args[1]);
    ts_topk_options o = ts_topk_default_options();
    int flags[4];
    for (int i = 0; i < 4; i++)
        if ((flags[i] = PyObject_IsTrue(args[6 + i])) < 0) return NULL;
    o.sorted = flags[0];
    o.sorted_index = flags[1];
    o.return_value = flags[2];
    o.abort_when_nan_found = flags[3];
    long long fill = PyLong_AsLongLong(args[10]);
    double vfill = PyFloat_AsDouble(args[11]);
    if (PyErr_Occurred()) return NULL;
    if (fill < INT32_MIN || fill > INT32_MAX)
        return PyErr_Format(tsp_ValueError, "%s: idx_oob_fill_value %lld does not fit int32", fn, fill);
    o.idx_oob_fill_value = (int32_t)fill;
    o.value_oob_fill_value = (float)vfill;
    o.indices_type = idx.dtype;
    ts_status st;
    TSP_CALL(st, ts_topk(&input, k, &o, end, off, have_values == 0 ? &values : NULL, &idx));
    if (st != TS_OK) return tsp_raise_status(st, fn);
    Py_RETURN_NONE;
}

PyObject *tsp_get_stride_requirement(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    int64_t in, out;
    ts_status st = ts_get_stride_requirement(&in, &out);
    if (st != TS_OK) return tsp_raise_status(st, "deep_select.get_stride_requirement");
    return Py_BuildValue("(LL)", (long long)in, (long long)out);
}
