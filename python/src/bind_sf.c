/* deep_gemm.transform_sf_into_required_layout's native half, over
 * ts_transform_sf_into_required_layout. Two steps so the output is a torch tensor Python
 * allocates with upstream's strides (the extension never allocates torch memory itself):
 * out = None asks for the required layout; a tensor of that layout is then filled. */
#include "tsview.h"

#include "tilestack/quant.h"

/* transform_sf(sf, mn, k, gran_mn, gran_k, num_groups, disable_ue8m0_cast, arch, out)
 * out None -> (shape, strides, alloc_elems, is_int): the view the caller must allocate;
 * out a tensor -> fills it (it may be sf where the layout is sf's own), returns None. */
PyObject *tsp_transform_sf(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    const char *fn = "deep_gemm.transform_sf_into_required_layout";
    (void)self;
    if (nargs != 9) return PyErr_Format(PyExc_TypeError, "%s: 9 arguments expected", fn);
    ts_tensor sf, out;
    if (tsp_view(args[0], fn, "sf", 0, &sf)) return NULL;
    int64_t v[6];
    static const char *const names[6] = {"mn", "k", "gran_mn", "gran_k", "num_groups", "arch"};
    const int at[6] = {1, 2, 3, 4, 5, 7};
    for (int i = 0; i < 6; i++) {
        if (!PyLong_Check(args[at[i]]))
            return PyErr_Format(tsp_TypeError, "%s: argument '%s' must be an int, got %s", fn, names[i],
                                Py_TYPE(args[at[i]])->tp_name);
        v[i] = PyLong_AsLongLong(args[at[i]]);
        if (PyErr_Occurred()) return NULL;
    }
    int dis = PyObject_IsTrue(args[6]);
    if (dis < 0) return NULL;
    /* packed ue8m0 scales travel as torch.int32 */
    if (sf.dtype == TS_I32) sf.dtype = TS_UE8M0X4;
    const int want_layout = args[8] == Py_None;
    if (!want_layout) {
        if (tsp_view(args[8], fn, "out", TSP_OUTPUT, &out)) return NULL;
        if (out.dtype == TS_I32) out.dtype = TS_UE8M0X4;
    }
    ts_tensor lay;
    int64_t alloc = 0;
    ts_status st;
    TSP_CALL(st, ts_transform_sf_into_required_layout(&sf, v[0], v[1], v[2], v[3], v[4], dis != 0,
                                                      (ts_sf_arch)v[5], &lay, &alloc,
                                                      want_layout ? NULL : &out));
    if (st != TS_OK) return tsp_raise_status(st, fn);
    if (!want_layout) Py_RETURN_NONE;
    return Py_BuildValue("(NNLO)", tsp_int64_tuple(lay.shape, lay.ndim), tsp_int64_tuple(lay.strides, lay.ndim),
                         (long long)alloc, lay.dtype == TS_F32 ? Py_False : Py_True);
}
