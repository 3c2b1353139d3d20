/* tilestack tile language: the compiler front end (tilec) as a library call.
 *
 * The language is described in docs/tile-language.md. This header declares what exists
 * today: translating a .tile source into its checked AST, its lowered IR (both printed in
 * the surface syntax, re-parseable) or C11; and the JIT: ts_tile_compile builds a module into
 * a shared object with the system C compiler (cached on disk), ts_tile_launch runs one of its
 * kernels with an argument array checked against the kernel's signature. */
#ifndef TILESTACK_TILE_H
#define TILESTACK_TILE_H

#include "tilestack/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ts_tile_emit {
    TS_TILE_EMIT_AST = 0, /* the parsed module, pretty-printed (not checked) */
    TS_TILE_EMIT_IR = 1,  /* checked, macros expanded, tile operations lowered into loops */
    TS_TILE_EMIT_C = 2    /* C11 with one validating ts_status wrapper per kernel */
} ts_tile_emit;

/* Translate `len` bytes of tile-language source. `filename` is used in diagnostics only
 * (NULL: "<input>"); `symbol_prefix` prefixes the generated wrappers (NULL: "ts_").
 * On success *output is a NUL-terminated malloc'd string (free with ts_tile_free).
 * When `diagnostics` is non-NULL it always receives a malloc'd string (possibly empty) with
 * every message as "file:line:col: error: text", the source line and a caret.
 * Errors: TS_ERR_NULL_POINTER (source with len > 0, or output, NULL), TS_ERR_INVALID_ARGUMENT
 * (bad `what`, or the program has errors: ts_last_error() holds the first one),
 * TS_ERR_OUT_OF_MEMORY. *output is NULL on any error. */
TS_API ts_status ts_tile_translate(const char *source, size_t len, const char *filename,
                                   ts_tile_emit what, const char *symbol_prefix, char **output,
                                   char **diagnostics);

/* Free a string returned by ts_tile_translate (or a ts_tile_options log). NULL is fine. */
TS_API void ts_tile_free(void *p);

/* ---- JIT (docs/tile-language.md, "JIT and AOT") ---- */

typedef struct ts_tile_kernel ts_tile_kernel; /* a loaded module: one or more kernels */

enum {
    /* no disk cache: build in a private temporary directory, removed after */
    TS_TILE_JIT_NO_CACHE = 1u << 0,
    /* on the avx512 path, lower vector code to 16 lanes (zmm, compiled with AVX-512 F/BW/VL/DQ)
     * instead of 8 (ymm); same bits either way. Ignored on other paths. */
    TS_TILE_JIT_LANES16 = 1u << 1
};

/* Every field may be 0 / NULL (NULL options = all defaults). */
typedef struct ts_tile_options {
    const char *filename;  /* for diagnostics and messages; NULL: "<jit>" */
    const char *cc;        /* compiler path or name on PATH (run directly, never through a
                            * shell); NULL: $TS_TILE_CC, else "cc" */
    const char *cache_dir; /* NULL: $TS_TILE_CACHE_DIR, else $XDG_CACHE_HOME/tilestack, else
                              $HOME/.cache/tilestack; with none set the JIT fails (TS_ERR_IO)
                              rather than guess a shared path (docs/security.md) */
    unsigned flags;        /* TS_TILE_JIT_* */
    char **log;            /* if non-NULL, receives a malloc'd string (free with ts_tile_free):
                            * the tile diagnostics, or the compiler's output; "" if none */
} ts_tile_options;

/* Compile the NUL-terminated tile-language module `source` and load it.
 * The generated C is compiled with -O3 -fPIC -shared -ffp-contract=off (+ -mavx2 -mfma -mf16c
 * when the active ISA is AVX2) into a shared object cached under the cache dir, keyed by a
 * SHA-256 of the source, the generated C, the options, the compiler's identity and the
 * tilestack version; a valid cached object is loaded without compiling, a corrupt one rebuilt.
 * Errors: TS_ERR_NULL_POINTER, TS_ERR_INVALID_ARGUMENT (the program has errors: first one in
 * ts_last_error(), all in *log; or it defines no kernel), TS_ERR_UNSUPPORTED (compiler not
 * found / not runnable; a kernel with more than 64 parameters), TS_ERR_INTERNAL (the compiler failed: its exit status and the start
 * of its stderr in ts_last_error(), all of it in *log; or the object does not load),
 * TS_ERR_IO (cache directory or files), TS_ERR_OUT_OF_MEMORY. *kernel is NULL on error. */
TS_API ts_status ts_tile_compile(const char *source, const ts_tile_options *options,
                                 ts_tile_kernel **kernel);

/* One launch argument, in the order of the kernel's parameters. Scalars convert to the
 * parameter's type: I64 to any integer type if the value fits, U64 likewise (for u64 beyond
 * INT64_MAX), F64 to f32 (rounded) or f64, BOOL to bool. Anything else is an error. */
typedef enum ts_tile_arg_kind {
    TS_TILE_ARG_TENSOR = 1,
    TS_TILE_ARG_BOOL = 2,
    TS_TILE_ARG_I64 = 3,
    TS_TILE_ARG_U64 = 4,
    TS_TILE_ARG_F64 = 5
} ts_tile_arg_kind;

typedef struct ts_tile_arg {
    ts_tile_arg_kind kind;
    union {
        const ts_tensor *tensor;
        bool b;
        int64_t i;
        uint64_t u;
        double f;
    } v;
} ts_tile_arg;

static inline ts_tile_arg ts_tile_arg_tensor(const ts_tensor *t) {
    ts_tile_arg a;
    a.kind = TS_TILE_ARG_TENSOR;
    a.v.tensor = t;
    return a;
}
static inline ts_tile_arg ts_tile_arg_i64(int64_t i) {
    ts_tile_arg a;
    a.kind = TS_TILE_ARG_I64;
    a.v.i = i;
    return a;
}
static inline ts_tile_arg ts_tile_arg_u64(uint64_t u) {
    ts_tile_arg a;
    a.kind = TS_TILE_ARG_U64;
    a.v.u = u;
    return a;
}
static inline ts_tile_arg ts_tile_arg_f64(double f) {
    ts_tile_arg a;
    a.kind = TS_TILE_ARG_F64;
    a.v.f = f;
    return a;
}
static inline ts_tile_arg ts_tile_arg_bool(bool b) {
    ts_tile_arg a;
    a.kind = TS_TILE_ARG_BOOL;
    a.v.b = b;
    return a;
}

/* Run kernel `name` of the module (NULL: the module's only kernel) with nargs arguments.
 * The argument count and kinds are checked here (TS_ERR_INVALID_ARGUMENT naming the
 * parameter), then the kernel's generated wrapper validates the tensors and checks as an AOT
 * kernel does and returns its status. Unknown name: TS_ERR_INVALID_ARGUMENT. */
TS_API ts_status ts_tile_launch(const ts_tile_kernel *kernel, const char *name,
                                const ts_tile_arg *args, int nargs);

typedef struct ts_tile_kernel_info {
    int nkernels;          /* kernels in the module, in source order */
    bool cache_hit;        /* loaded from the disk cache without running the compiler */
    char key[65];          /* the cache key, hex SHA-256 */
    const char *path;      /* the loaded shared object (valid while the kernel lives) */
} ts_tile_kernel_info;

TS_API ts_status ts_tile_kernel_info_get(const ts_tile_kernel *kernel, ts_tile_kernel_info *info);
/* Name of kernel i (0 <= i < nkernels), or NULL. */
TS_API const char *ts_tile_kernel_name(const ts_tile_kernel *kernel, int i);

/* Unload and free. NULL is fine. Launches must have returned. */
TS_API void ts_tile_kernel_release(ts_tile_kernel *kernel);

#ifdef __cplusplus
}
#endif
#endif
