/* The runtime table of a JIT-loaded module.
 *
 * Generated code reaches the library through a few internal entry points and the public
 * core / numerics functions. A shared object built at run time cannot link to them: the
 * library may be linked statically into an executable that exports nothing, and its internal
 * symbols are hidden anyway. So the JIT renames every such call in the generated C (a
 * `#define name tsjit__name` prelude), defines each renamed function in the module as a thunk
 * through a table of function pointers, and the library hands the module that table in its
 * init function. Both sides are expanded from the one list below, so they cannot disagree.
 * (The scalar numerics conversions are the exception: see TS__TILE_JIT_NUMERICS_LIST.)
 *
 * X(return type, name, (parameters), (arguments)); V(...) for void functions. ts__fail is
 * variadic and is thunked by hand through `vfail`. Adding an entry changes the table layout:
 * bump TS__TILE_JIT_ABI (it is part of every cache key and checked at init). */
#ifndef TS_TILE_JIT_RT_H
#define TS_TILE_JIT_RT_H

#define TS__TILE_JIT_ABI 2u

#define TS__TILE_JIT_RT_LIST(X, V)                                                          \
    X(ts_status, ts_tensor_check, (const ts_tensor *t, const char *name), (t, name))        \
    X(ts_status, ts_tensor_check_dtype, (const ts_tensor *t, const char *name, ts_dtype d),  \
      (t, name, d))                                                                         \
    X(ts_status, ts_tensor_check_shape,                                                      \
      (const ts_tensor *t, const char *name, int32_t ndim, const int64_t *shape),            \
      (t, name, ndim, shape))                                                               \
    X(ts_status, ts_tensor_check_last_contiguous, (const ts_tensor *t, const char *name),    \
      (t, name))                                                                            \
    X(bool, ts_tensor_is_contiguous, (const ts_tensor *t), (t))                              \
    X(ts_status, ts_tensor_check_aligned, (const ts_tensor *t, const char *name, size_t b),  \
      (t, name, b))                                                                         \
    X(ts_status, ts_mul_overflow_i64, (int64_t a, int64_t b, int64_t *out), (a, b, out))     \
    X(int, ts_get_num_threads, (void), ())                                                  \
    V(ts__parallel_for, (int64_t n, int64_t grain, ts__range_fn fn, void *ctx),              \
      (n, grain, fn, ctx))                                                                  \
    V(ts__parallel_run, (int nthreads, ts__task_fn fn, void *ctx), (nthreads, fn, ctx))      \
    V(ts__parallel_items, (int64_t n, int64_t grab, ts__range_fn fn, void *ctx),             \
      (n, grab, fn, ctx))                                                                   \
    X(void *, ts__scratch, (int tid, size_t bytes), (tid, bytes))                           \
    X(ts_isa, ts__active_isa, (void), ())                                                   \
    X(ts_status, ts_convert,                                                                 \
      (const void *src, ts_dtype sd, void *dst, ts_dtype dd, int64_t n), (src, sd, dst, dd, n))

/* The scalar conversions are not thunked: a call per element (through a table, or even
 * directly into the library) would dominate a cast kernel. Generated C compiled by the JIT or
 * as an AOT variant gets TS__TILE_NUMERICS_PRELUDE first and TS__TILE_NUMERICS_EPILOGUE last:
 * the names are renamed to file-static functions whose definitions come from including
 * src/numerics/convert_scalar.c itself (embedded with the JIT's headers), so they inline, with
 * the library's exact code, and nothing is exported. (A function declared static keeps
 * internal linkage at a later definition without a storage class, C11 6.2.2.) */
#define TS__TILE_JIT_NUMERICS_LIST(X, V)                                                    \
    X(uint16_t, ts_f32_to_bf16, (float x), (x))                                             \
    X(float, ts_bf16_to_f32, (uint16_t h), (h))                                             \
    X(uint16_t, ts_f32_to_f16, (float x), (x))                                              \
    X(float, ts_f16_to_f32, (uint16_t h), (h))                                              \
    X(uint8_t, ts_f32_to_e4m3, (float x), (x))                                              \
    X(uint8_t, ts_f32_to_e4m3_sat, (float x), (x))                                          \
    X(float, ts_e4m3_to_f32, (uint8_t v), (v))                                              \
    X(uint8_t, ts_f32_to_e5m2, (float x), (x))                                              \
    X(uint8_t, ts_f32_to_e5m2_sat, (float x), (x))                                          \
    X(float, ts_e5m2_to_f32, (uint8_t v), (v))                                              \
    X(uint8_t, ts_f32_to_e2m1, (float x), (x))                                              \
    X(float, ts_e2m1_to_f32, (uint8_t c), (c))                                              \
    X(uint8_t, ts_f32_to_e2m1_dg, (float x), (x))                                           \
    X(float, ts_ue8m0_to_f32, (uint8_t e), (e))                                             \
    X(uint8_t, ts_f32_to_ue8m0, (float x), (x))                                             \
    X(float, ts_ceil_to_ue8m0, (float x), (x))                                              \
    X(int32_t, ts_pack_ue8m0x4, (const uint8_t e[4]), (e))                                  \
    V(ts_unpack_ue8m0x4, (int32_t w, uint8_t e[4]), (w, e))                                 \
    X(uint16_t, ts_f32_to_e5m6, (float x), (x))                                             \
    X(float, ts_e5m6_to_f32, (uint16_t v), (v))                                             \
    V(ts_e5m6_pack8, (const uint16_t v[8], uint32_t w[3]), (v, w))                          \
    V(ts_e5m6_unpack8, (const uint32_t w[3], uint16_t v[8]), (w, v))


#define TS__TXT_NUM_RENAME_X(R, N, P, A) "#define " #N " tsnum__" #N "\n"
#define TS__TXT_NUM_RENAME_V(N, P, A) "#define " #N " tsnum__" #N "\n"
#define TS__TXT_NUM_DECL_X(R, N, P, A) "static " #R " " #N #P ";\n"
#define TS__TXT_NUM_DECL_V(N, P, A) "static void " #N #P ";\n"
#define TS__TILE_NUMERICS_PRELUDE                                                           \
    "/* tilestack: the scalar conversions as file-static copies (src/tile/tile_jit_rt.h) */\n" \
    "#include \"tilestack/numerics.h\"\n"                                                   \
    TS__TILE_JIT_NUMERICS_LIST(TS__TXT_NUM_RENAME_X, TS__TXT_NUM_RENAME_V)                  \
    TS__TILE_JIT_NUMERICS_LIST(TS__TXT_NUM_DECL_X, TS__TXT_NUM_DECL_V)
#define TS__TILE_NUMERICS_EPILOGUE                                                          \
    "\n#if defined(__GNUC__)\n#pragma GCC diagnostic ignored \"-Wunused-function\"\n#endif\n" \
    "#include \"numerics/convert_scalar.c\"\n"

#endif
