/* The tensor-view layer of the _tilestack extension: torch CPU tensors (and numpy arrays) read
 * as ts_tensor views without copying, argument parsing helpers, and ts_status -> exception.
 *
 * Tensors are read through their own attributes (data_ptr(), dtype, shape, stride(), is_cpu),
 * not through libtorch headers, so the extension is plain C against the CPython API only.
 * Every view borrows the caller's object: the Python call frame holds a reference to each
 * argument for the whole call, including while the kernel runs with the GIL released. */
#ifndef TSPY_TSVIEW_H
#define TSPY_TSVIEW_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "tilestack/core.h"

enum {
    TSP_OPTIONAL = 1, /* None is accepted: the view is reported absent (return 1) */
    TSP_OUTPUT = 2,   /* the op writes it: a read-only numpy array is refused */
};

/* obj -> view. Returns 0 (view filled), 1 (None with TSP_OPTIONAL: view zeroed) or -1 with a
 * Python exception naming `fn` and `arg`: TypeError for None / not a tensor / unsupported
 * dtype, ValueError for a non-CPU device, more than TS_MAX_DIMS dims, or strides that are not
 * whole elements. */
int tsp_view(PyObject *obj, const char *fn, const char *arg, int flags, ts_tensor *out);

/* The same, giving NULL for an absent optional tensor (a pointer the C API takes as "not given"). */
int tsp_view_opt(PyObject *obj, const char *fn, const char *arg, ts_tensor *storage,
                 const ts_tensor **out);

/* A tuple / list of exactly n ints (n in 1..4) -> vals; None -> *present = 0. */
int tsp_int_tuple(PyObject *obj, const char *fn, const char *arg, int n, int64_t *vals,
                  int *present);

/* None or str -> NULL or UTF-8 (borrowed from obj). */
int tsp_opt_str(PyObject *obj, const char *fn, const char *arg, const char **out);

/* Raise the exception for a failed ts_status with ts_last_error()'s text; returns NULL.
 * TS_ERR_DTYPE -> TypeError, argument / shape / layout codes -> ValueError, TS_ERR_UNSUPPORTED
 * -> NotImplementedError, TS_ERR_OUT_OF_MEMORY -> MemoryError, others -> RuntimeError. The
 * TypeError, ValueError and MemoryError raised are subclasses of RuntimeError as well, so code
 * written for upstream's native checks (which raise RuntimeError) keeps catching them. */
PyObject *tsp_raise_status(ts_status st, const char *fn);
/* A capsule `name` owning a zeroed PyMem record of `size` bytes (*rec), freed by d. */
PyObject *tsp_new_capsule(size_t size, const char *name, PyCapsule_Destructor d, void **rec);
/* A tuple of n Python ints. */
PyObject *tsp_int64_tuple(const int64_t *v, int n);
/* The bytes a view t into library memory spans (0 when a dimension is empty). */
Py_ssize_t tsp_span_bytes(const ts_tensor *t);
/* (mv, dtype name, shape, strides): what the Python side makes a tensor view of; steals mv
 * (NULL: the error it raised stands). */
PyObject *tsp_describe(PyObject *mv, const ts_tensor *t);
/* tsp_describe of a view into library memory through a writable memoryview over it; None
 * when t->data is NULL (a tensor the call did not produce). */
PyObject *tsp_describe_mem(const ts_tensor *t);

/* Positional-argument readers of the fixed-order bindings: an int / a truth value; on failure
 * the Python error stands and *err is set (so several reads can be checked at once). */
int64_t tsp_arg_i64(PyObject *o, int *err);
int tsp_arg_bool(PyObject *o, int *err);

/* Module set-up: creates the exception classes and adds them to the module. */
int tsp_init(PyObject *module);

/* Exception classes (new references owned by the module). */
extern PyObject *tsp_ValueError, *tsp_TypeError, *tsp_MemoryError;

/* Seconds the last TSP_CALL spent in its C call (GIL released, timed around the C function
 * only): the overhead bench subtracts it from the Python call's time. */
extern double tsp_last_c_seconds;
double tsp_now(void);

/* Run a C call with the GIL released; the status lands in `st`. */
#define TSP_CALL(st, expr)                       \
    do {                                         \
        Py_BEGIN_ALLOW_THREADS                   \
        double tsp_t0_ = tsp_now();              \
        (st) = (expr);                           \
        tsp_last_c_seconds = tsp_now() - tsp_t0_; \
        Py_END_ALLOW_THREADS                     \
    } while (0)

#endif
