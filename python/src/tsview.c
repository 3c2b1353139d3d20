/* Tensor views over torch tensors and numpy arrays, and ts_status -> Python exceptions.
 * See tsview.h. */
#include "tsview.h"

#include "dlpack_view.h"

#include <string.h>
#include <time.h>

PyObject *tsp_ValueError, *tsp_TypeError, *tsp_MemoryError;
double tsp_last_c_seconds;

double tsp_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* torch objects, looked up once on first use (torch is imported by the wrappers anyway; the
 * extension itself must import without it, e.g. for numpy-only callers). */
static PyObject *torch_tensor_type; /* torch.Tensor, or NULL when torch is unavailable */
static int torch_looked_up;
static PyObject *s_data_ptr, *s_dtype, *s_shape, *s_stride, *s_is_cpu, *s_device, *s_array_iface;

static const struct {
    const char *name;
    ts_dtype dtype;
} torch_dtype_names[] = {
    {"bool", TS_BOOL},       {"int8", TS_I8},          {"int16", TS_I16},
    {"int32", TS_I32},       {"int64", TS_I64},        {"uint8", TS_U8},
    {"float16", TS_F16},     {"bfloat16", TS_BF16},    {"float32", TS_F32},
    {"float64", TS_F64},     {"float8_e4m3fn", TS_E4M3}, {"float8_e5m2", TS_E5M2},
    {"float8_e8m0fnu", TS_UE8M0},
};
#define N_TORCH_DTYPES (sizeof torch_dtype_names / sizeof torch_dtype_names[0])
static PyObject *torch_dtypes[N_TORCH_DTYPES]; /* NULL where this torch lacks the dtype */

/* torch's DLPack exchange API (dlpack_view.h), NULL when absent or of an unknown major version;
 * tsp_use_dlpack = 0 forces the attribute path (tests compare the two). */
static const tsp_dl_exchange_api *torch_dlpack;
int tsp_use_dlpack = 1;

static void lookup_dlpack(void) {
    PyObject *cap = PyObject_GetAttrString(torch_tensor_type, "__dlpack_c_exchange_api__");
    if (!cap) {
        PyErr_Clear();
        return;
    }
    const tsp_dl_exchange_api *api = PyCapsule_IsValid(cap, "dlpack_exchange_api")
                                         ? PyCapsule_GetPointer(cap, "dlpack_exchange_api")
                                         : NULL;
    /* The capsule lives on the torch.Tensor class for the life of the process. */
    Py_DECREF(cap);
    if (api && api->header.version.major == 1 && api->dltensor_from_py_object_no_sync)
        torch_dlpack = api;
}

static void lookup_torch(void) {
    torch_looked_up = 1;
    PyObject *torch = PyImport_ImportModule("torch");
    if (!torch) {
        PyErr_Clear();
        return;
    }
    torch_tensor_type = PyObject_GetAttrString(torch, "Tensor");
    if (!torch_tensor_type) PyErr_Clear();
    for (size_t i = 0; i < N_TORCH_DTYPES; i++) {
        torch_dtypes[i] = PyObject_GetAttrString(torch, torch_dtype_names[i].name);
        if (!torch_dtypes[i]) PyErr_Clear();
    }
    Py_DECREF(torch);
    if (torch_tensor_type) lookup_dlpack();
}

static int err(PyObject *cls, const char *fn, const char *arg, const char *what) {
    PyErr_Format(cls, "%s: argument '%s' %s", fn, arg, what);
    return -1;
}

/* Python int -> int64 (exact; bool is an int too, as torch shapes never are). */
static int as_i64(PyObject *o, int64_t *v) {
    long long x = PyLong_AsLongLong(o);
    if (x == -1 && PyErr_Occurred()) return -1;
    *v = (int64_t)x;
    return 0;
}

static int fill_dims(PyObject *shape, PyObject *strides, int64_t stride_div, const char *fn,
                     const char *arg, ts_tensor *out) {
    PyObject *sh = PySequence_Fast(shape, "shape");
    if (!sh) return -1;
    Py_ssize_t nd = PySequence_Fast_GET_SIZE(sh);
    if (nd > TS_MAX_DIMS) {
        Py_DECREF(sh);
        PyErr_Format(tsp_ValueError, "%s: argument '%s' has %zd dims, at most %d are supported",
                     fn, arg, nd, TS_MAX_DIMS);
        return -1;
    }
    out->ndim = (int32_t)nd;
    for (Py_ssize_t i = 0; i < nd; i++)
        if (as_i64(PySequence_Fast_GET_ITEM(sh, i), &out->shape[i])) {
            Py_DECREF(sh);
            return -1;
        }
    Py_DECREF(sh);
    if (strides == Py_None) { /* numpy: C-contiguous */
        int64_t s = 1;
        for (Py_ssize_t i = nd - 1; i >= 0; i--) {
            out->strides[i] = s;
            s *= out->shape[i] > 0 ? out->shape[i] : 1;
        }
        return 0;
    }
    PyObject *st = PySequence_Fast(strides, "strides");
    if (!st) return -1;
    if (PySequence_Fast_GET_SIZE(st) != nd) {
        Py_DECREF(st);
        return err(tsp_ValueError, fn, arg, "has strides of another rank than its shape");
    }
    for (Py_ssize_t i = 0; i < nd; i++) {
        int64_t s;
        if (as_i64(PySequence_Fast_GET_ITEM(st, i), &s)) {
            Py_DECREF(st);
            return -1;
        }
        if (s % stride_div) {
            Py_DECREF(st);
            return err(tsp_ValueError, fn, arg, "has a stride that is not a whole number of elements");
        }
        out->strides[i] = s / stride_div;
    }
    Py_DECREF(st);
    return 0;
}

/* obj.name() without creating a bound method object (a measurable share of a small call). */
static PyObject *call_method(PyObject *obj, PyObject *name) {
    PyObject *args[1] = {obj};
    return PyObject_VectorcallMethod(name, args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

static ts_dtype dl_dtype(int code, int bits) {
    switch (code * 256 + bits) {
    case TSP_DL_INT * 256 + 8: return TS_I8;
    case TSP_DL_INT * 256 + 16: return TS_I16;
    case TSP_DL_INT * 256 + 32: return TS_I32;
    case TSP_DL_INT * 256 + 64: return TS_I64;
    case TSP_DL_UINT * 256 + 8: return TS_U8;
    case TSP_DL_FLOAT * 256 + 16: return TS_F16;
    case TSP_DL_FLOAT * 256 + 32: return TS_F32;
    case TSP_DL_FLOAT * 256 + 64: return TS_F64;
    case TSP_DL_BFLOAT * 256 + 16: return TS_BF16;
    case TSP_DL_BOOL * 256 + 8: return TS_BOOL;
    case TSP_DL_F8_E4M3FN * 256 + 8: return TS_E4M3;
    case TSP_DL_F8_E5M2 * 256 + 8: return TS_E5M2;
    case TSP_DL_F8_E8M0FNU * 256 + 8: return TS_UE8M0;
    default: return TS_DTYPE_COUNT_;
    }
}

/* 1: filled through DLPack; 0: not covered here (the attribute path decides, with its messages). */
static int view_dlpack(PyObject *obj, ts_tensor *out) {
    tsp_dl_tensor dl;
    if (torch_dlpack->dltensor_from_py_object_no_sync(obj, &dl) != 0) {
        PyErr_Clear();
        return 0;
    }
    ts_dtype dt = dl_dtype(dl.dtype.code, dl.dtype.bits);
    if (dl.device.device_type != TSP_DL_CPU || dl.dtype.lanes != 1 || dt == TS_DTYPE_COUNT_ ||
        dl.ndim < 0 || dl.ndim > TS_MAX_DIMS)
        return 0;
    out->dtype = dt;
    out->ndim = dl.ndim;
    int64_t s = 1;
    for (int i = dl.ndim - 1; i >= 0; i--) {
        out->shape[i] = dl.shape[i];
        out->strides[i] = dl.strides ? dl.strides[i] : s;
        s *= dl.shape[i] > 0 ? dl.shape[i] : 1;
    }
    out->data = (char *)dl.data + dl.byte_offset;
    return 1;
}

static int view_torch(PyObject *obj, const char *fn, const char *arg, ts_tensor *out) {
    if (torch_dlpack && tsp_use_dlpack && Py_TYPE(obj) == (PyTypeObject *)torch_tensor_type &&
        view_dlpack(obj, out))
        return 0;
    PyObject *is_cpu = PyObject_GetAttr(obj, s_is_cpu);
    if (!is_cpu) return -1;
    int cpu = PyObject_IsTrue(is_cpu);
    Py_DECREF(is_cpu);
    if (cpu != 1) {
        if (cpu < 0) return -1;
        PyObject *dev = PyObject_GetAttr(obj, s_device);
        PyErr_Format(tsp_ValueError, "%s: argument '%s' must be a CPU tensor, got device %S", fn,
                     arg, dev ? dev : Py_None);
        Py_XDECREF(dev);
        return -1;
    }
    PyObject *dt = PyObject_GetAttr(obj, s_dtype);
    if (!dt) return -1;
    size_t i = 0;
    while (i < N_TORCH_DTYPES && torch_dtypes[i] != dt) i++;
    if (i == N_TORCH_DTYPES) {
        PyErr_Format(tsp_TypeError, "%s: argument '%s' has dtype %S, which tilestack does not take",
                     fn, arg, dt);
        Py_DECREF(dt);
        return -1;
    }
    Py_DECREF(dt);
    out->dtype = torch_dtype_names[i].dtype;
    PyObject *shape = PyObject_GetAttr(obj, s_shape);
    if (!shape) return -1;
    PyObject *strides = call_method(obj, s_stride);
    if (!strides) {
        Py_DECREF(shape);
        return -1;
    }
    int rc = fill_dims(shape, strides, 1, fn, arg, out);
    Py_DECREF(shape);
    Py_DECREF(strides);
    if (rc) return -1;
    PyObject *p = call_method(obj, s_data_ptr);
    if (!p) return -1;
    out->data = PyLong_AsVoidPtr(p);
    Py_DECREF(p);
    return PyErr_Occurred() ? -1 : 0;
}

/* numpy (or anything with the array interface, version 3). */
static int view_array(PyObject *iface, const char *fn, const char *arg, int flags, ts_tensor *out) {
    PyObject *typestr = PyDict_GetItemString(iface, "typestr");
    PyObject *data = PyDict_GetItemString(iface, "data");
    PyObject *shape = PyDict_GetItemString(iface, "shape");
    PyObject *strides = PyDict_GetItemString(iface, "strides");
    if (!typestr || !PyUnicode_Check(typestr) || !data || !PyTuple_Check(data) ||
        PyTuple_GET_SIZE(data) != 2 || !shape)
        return err(tsp_TypeError, fn, arg, "has an unreadable __array_interface__");
    if (PyDict_GetItemString(iface, "mask") && PyDict_GetItemString(iface, "mask") != Py_None)
        return err(tsp_TypeError, fn, arg, "is a masked array");
    const char *ts = PyUnicode_AsUTF8(typestr);
    if (!ts) return -1;
    static const struct {
        const char *typestr;
        ts_dtype dtype;
    } map[] = {{"|b1", TS_BOOL}, {"|i1", TS_I8},  {"<i2", TS_I16}, {"<i4", TS_I32},
               {"<i8", TS_I64},  {"|u1", TS_U8},  {"<f2", TS_F16}, {"<f4", TS_F32},
               {"<f8", TS_F64}};
    size_t i = 0;
    while (i < sizeof map / sizeof map[0] && strcmp(map[i].typestr, ts)) i++;
    if (i == sizeof map / sizeof map[0]) {
        PyErr_Format(tsp_TypeError, "%s: argument '%s' has array type '%s', which tilestack does not take",
                     fn, arg, ts);
        return -1;
    }
    out->dtype = map[i].dtype;
    if ((flags & TSP_OUTPUT) && PyObject_IsTrue(PyTuple_GET_ITEM(data, 1)))
        return err(tsp_ValueError, fn, arg, "is a read-only array but is written");
    if (fill_dims(shape, strides ? strides : Py_None, (int64_t)ts_dtype_size(out->dtype), fn, arg, out))
        return -1;
    out->data = PyLong_AsVoidPtr(PyTuple_GET_ITEM(data, 0));
    return PyErr_Occurred() ? -1 : 0;
}

int tsp_view(PyObject *obj, const char *fn, const char *arg, int flags, ts_tensor *out) {
    memset(out, 0, sizeof *out);
    if (obj == Py_None) {
        if (flags & TSP_OPTIONAL) return 1;
        return err(tsp_TypeError, fn, arg, "is None, but a tensor is required");
    }
    if (!torch_looked_up) lookup_torch();
    if (torch_tensor_type && PyObject_TypeCheck(obj, (PyTypeObject *)torch_tensor_type))
        return view_torch(obj, fn, arg, out);
    PyObject *iface = PyObject_GetAttr(obj, s_array_iface);
    if (iface && PyDict_Check(iface)) {
        int rc = view_array(iface, fn, arg, flags, out);
        Py_DECREF(iface);
        return rc;
    }
    Py_XDECREF(iface);
    PyErr_Clear();
    PyErr_Format(tsp_TypeError, "%s: argument '%s' must be a torch tensor, got %s", fn, arg,
                 Py_TYPE(obj)->tp_name);
    return -1;
}

int tsp_view_opt(PyObject *obj, const char *fn, const char *arg, ts_tensor *storage,
                 const ts_tensor **out) {
    int rc = tsp_view(obj, fn, arg, TSP_OPTIONAL, storage);
    *out = rc == 0 ? storage : NULL;
    return rc < 0 ? -1 : 0;
}

int tsp_int_tuple(PyObject *obj, const char *fn, const char *arg, int n, int64_t *vals,
                  int *present) {
    *present = 0;
    if (obj == Py_None) return 0;
    if (!PyTuple_Check(obj) && !PyList_Check(obj)) {
        PyErr_Format(tsp_TypeError, "%s: argument '%s' must be a tuple of %d ints or None, got %s",
                     fn, arg, n, Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (PySequence_Size(obj) != n) {
        PyErr_Format(tsp_ValueError, "%s: argument '%s' must have %d entries, got %zd", fn, arg, n,
                     PySequence_Size(obj));
        return -1;
    }
    for (int i = 0; i < n; i++) {
        PyObject *v = PySequence_Fast_GET_ITEM(obj, i); /* tuple or list: no new reference */
        if (!PyLong_Check(v)) {
            PyErr_Format(tsp_TypeError, "%s: argument '%s' must hold ints, got %s", fn, arg,
                         Py_TYPE(v)->tp_name);
            return -1;
        }
        if (as_i64(v, &vals[i])) return -1;
    }
    *present = 1;
    return 0;
}

int tsp_opt_str(PyObject *obj, const char *fn, const char *arg, const char **out) {
    *out = NULL;
    if (obj == Py_None) return 0;
    if (!PyUnicode_Check(obj)) {
        PyErr_Format(tsp_TypeError, "%s: argument '%s' must be a str, got %s", fn, arg,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    *out = PyUnicode_AsUTF8(obj);
    return *out ? 0 : -1;
}

PyObject *tsp_raise_status(ts_status st, const char *fn) {
    PyObject *cls;
    switch (st) {
    case TS_ERR_DTYPE: cls = tsp_TypeError; break;
    case TS_ERR_NULL_POINTER:
    case TS_ERR_INVALID_ARGUMENT:
    case TS_ERR_SHAPE:
    case TS_ERR_STRIDE:
    case TS_ERR_ALIGNMENT:
    case TS_ERR_OVERFLOW:
    case TS_ERR_NONFINITE:
    case TS_ERR_ALIASING: cls = tsp_ValueError; break;
    case TS_ERR_UNSUPPORTED: cls = PyExc_NotImplementedError; break;
    case TS_ERR_OUT_OF_MEMORY: cls = tsp_MemoryError; break;
    default: cls = PyExc_RuntimeError; break;
    }
    const char *msg = ts_last_error();
    PyErr_Format(cls, "%s: %s%s%s", fn, ts_status_str(st), msg && *msg ? ": " : "", msg ? msg : "");
    return NULL;
}

static PyObject *new_error(PyObject *module, const char *name, PyObject *base, const char *doc) {
    PyObject *bases = PyTuple_Pack(2, base, PyExc_RuntimeError);
    if (!bases) return NULL;
    char qual[64];
    snprintf(qual, sizeof qual, "_tilestack.%s", name);
    PyObject *cls = PyErr_NewExceptionWithDoc(qual, doc, bases, NULL);
    Py_DECREF(bases);
    if (cls && PyModule_AddObjectRef(module, name, cls) < 0) Py_CLEAR(cls);
    return cls;
}

int tsp_init(PyObject *module) {
    tsp_ValueError = new_error(module, "ValueError", PyExc_ValueError,
                               "A bad argument; also a RuntimeError, as upstream's native checks raise.");
    tsp_TypeError = new_error(module, "TypeError", PyExc_TypeError,
                              "A wrong dtype or type; also a RuntimeError, as upstream's native checks raise.");
    tsp_MemoryError = new_error(module, "MemoryError", PyExc_MemoryError,
                                "Out of memory; also a RuntimeError, as torch's OutOfMemoryError.");
    if (!tsp_ValueError || !tsp_TypeError || !tsp_MemoryError) return -1;
#define INTERN(var, s) if (!((var) = PyUnicode_InternFromString(s))) return -1
    INTERN(s_data_ptr, "data_ptr");
    INTERN(s_dtype, "dtype");
    INTERN(s_shape, "shape");
    INTERN(s_stride, "stride");
    INTERN(s_is_cpu, "is_cpu");
    INTERN(s_device, "device");
    INTERN(s_array_iface, "__array_interface__");
#undef INTERN
    return 0;
}

PyObject *tsp_new_capsule(size_t size, const char *name, PyCapsule_Destructor d, void **rec) {
    *rec = PyMem_Calloc(1, size);
    if (!*rec) return PyErr_NoMemory();
    PyObject *cap = PyCapsule_New(*rec, name, d);
    if (!cap) PyMem_Free(*rec);
    return cap;
}

PyObject *tsp_int64_tuple(const int64_t *v, int n) {
    PyObject *t = PyTuple_New(n);
    for (int i = 0; t && i < n; i++) {
        PyObject *x = PyLong_FromLongLong(v[i]);
        if (!x) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, x);
    }
    return t;
}

Py_ssize_t tsp_span_bytes(const ts_tensor *t) {
    int64_t extent = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 0) return 0;
        extent += (t->shape[i] - 1) * t->strides[i];
    }
    return (Py_ssize_t)(extent * (int64_t)ts_dtype_size(t->dtype));
}

PyObject *tsp_describe(PyObject *mv, const ts_tensor *t) {
    if (!mv) return NULL;
    PyObject *shape = tsp_int64_tuple(t->shape, t->ndim), *strides = tsp_int64_tuple(t->strides, t->ndim);
    if (!shape || !strides) {
        Py_DECREF(mv);
        Py_XDECREF(shape);
        Py_XDECREF(strides);
        return NULL;
    }
    return Py_BuildValue("(NsNN)", mv, ts_dtype_name(t->dtype), shape, strides);
}

PyObject *tsp_describe_mem(const ts_tensor *t) {
    if (!t->data) Py_RETURN_NONE;
    return tsp_describe(PyMemoryView_FromMemory(t->data, tsp_span_bytes(t), PyBUF_WRITE), t);
}

int64_t tsp_arg_i64(PyObject *o, int *err) {
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) *err = 1;
    return (int64_t)v;
}

int tsp_arg_bool(PyObject *o, int *err) {
    int v = PyObject_IsTrue(o);
    if (v < 0) *err = 1;
    return v > 0;
}
