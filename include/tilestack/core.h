/* tilestack core: status codes, dtypes, tensor views, threads, version.
 *
 * Every public function returns ts_status. A non-OK status leaves outputs untouched and
 * sets a thread-local message readable with ts_last_error(). */
#ifndef TILESTACK_CORE_H
#define TILESTACK_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TS_VERSION_MAJOR 0
#define TS_VERSION_MINOR 1
#define TS_VERSION_PATCH 0
#define TS_VERSION_NUMBER (TS_VERSION_MAJOR * 10000 + TS_VERSION_MINOR * 100 + TS_VERSION_PATCH)
#define TS_VERSION_STRING "0.1.0"

#if defined(_WIN32) && defined(TS_BUILD_SHARED)
#define TS_API __declspec(dllexport)
#elif defined(__GNUC__)
#define TS_API __attribute__((visibility("default")))
#else
#define TS_API
#endif

/* Run-time version: TS_VERSION_NUMBER of the library actually linked. */
TS_API unsigned ts_version_number(void);
TS_API const char *ts_version_string(void);

/* Stable numeric codes: append only, never renumber. */
typedef enum ts_status {
    TS_OK = 0,
    TS_ERR_NULL_POINTER = 1,   /* a required pointer argument (or tensor data) is NULL */
    TS_ERR_INVALID_ARGUMENT = 2, /* a scalar argument is out of its domain */
    TS_ERR_DTYPE = 3,          /* a tensor has a dtype the op does not accept */
    TS_ERR_SHAPE = 4,          /* wrong ndim, or a dim does not match */
    TS_ERR_STRIDE = 5,         /* layout: non-contiguous last dim, wrong majorness, bad strides */
    TS_ERR_ALIGNMENT = 6,      /* a pointer or stride is not aligned as the op requires */
    TS_ERR_OVERFLOW = 7,       /* a size or byte count overflows 64 bits */
    TS_ERR_UNSUPPORTED = 8,    /* valid request this build/ISA does not implement */
    TS_ERR_OUT_OF_MEMORY = 9,
    TS_ERR_NONFINITE = 10,     /* NaN or inf where the op forbids them */
    TS_ERR_IO = 11,            /* file read/write failed */
    TS_ERR_INTERNAL = 12,      /* broken internal invariant (a bug: please report) */
    TS_ERR_PEER = 13,          /* a peer rank died or misbehaved */
    TS_ERR_TIMEOUT = 14,
    TS_ERR_ALIASING = 15,      /* outputs overlap inputs where the op forbids it */
    TS_STATUS_COUNT_
} ts_status;

/* Short fixed name of a code, e.g. "TS_ERR_SHAPE: wrong shape". Never NULL. */
TS_API const char *ts_status_str(ts_status s);
/* Details of the last failure on this thread ("" if none). Valid until the next failing call. */
TS_API const char *ts_last_error(void);
TS_API void ts_clear_error(void);

/* Append only. Packed types count storage units along their packed dim (as torch does):
 *   TS_E2M1X2   one byte = two e2m1 values, element 2i in the low nibble;
 *   TS_UE8M0X4  one int32 = four ue8m0 bytes, byte j (LSB first) = K index 4w+j;
 *   TS_E5M6X8   one byte of a stream where 8 e5m6 values fill 3 little-endian uint32 words. */
typedef enum ts_dtype {
    TS_BOOL = 0,
    TS_I8 = 1,
    TS_I16 = 2,
    TS_I32 = 3,
    TS_I64 = 4,
    TS_U8 = 5,
    TS_F16 = 6,
    TS_BF16 = 7,
    TS_F32 = 8,
    TS_F64 = 9,
    TS_E4M3 = 10,    /* float8_e4m3fn: max 448, NaN 0x7F/0xFF, no inf */
    TS_E5M2 = 11,    /* float8_e5m2: IEEE-like, has inf */
    TS_E2M1X2 = 12,  /* packed fp4 pairs */
    TS_UE8M0 = 13,   /* one exponent byte: 2^(e-127), 255 = NaN */
    TS_UE8M0X4 = 14, /* four ue8m0 in an int32 */
    TS_E5M6X8 = 15,  /* packed 12-bit e5m6 stream */
    TS_DTYPE_COUNT_
} ts_dtype;

TS_API const char *ts_dtype_name(ts_dtype t);  /* "bf16", ...; "?" if invalid */
TS_API size_t ts_dtype_size(ts_dtype t);       /* bytes per storage unit; 0 if invalid */

#define TS_MAX_DIMS 4

/* A non-owning strided view, like DLPack. Strides are in elements (storage units). */
typedef struct ts_tensor {
    void *data;
    ts_dtype dtype;
    int32_t ndim;
    int64_t shape[TS_MAX_DIMS];
    int64_t strides[TS_MAX_DIMS];
} ts_tensor;

/* A row-major contiguous view (shape[0..ndim-1]). */
TS_API ts_tensor ts_tensor_make(void *data, ts_dtype dtype, int32_t ndim, const int64_t *shape);
TS_API ts_tensor ts_tensor_1d(void *data, ts_dtype dtype, int64_t n0);
TS_API ts_tensor ts_tensor_2d(void *data, ts_dtype dtype, int64_t n0, int64_t n1);
TS_API ts_tensor ts_tensor_3d(void *data, ts_dtype dtype, int64_t n0, int64_t n1, int64_t n2);

/* Number of elements; -1 if it overflows int64. */
TS_API int64_t ts_tensor_numel(const ts_tensor *t);

/* Validation helpers. Each returns TS_OK or a specific code with a message naming `name`. */
/* Non-NULL view, valid dtype, 1 <= ndim <= TS_MAX_DIMS, shape >= 0, data non-NULL when
 * numel > 0, and the byte span reachable through shape/strides fits in 63 bits. */
TS_API ts_status ts_tensor_check(const ts_tensor *t, const char *name);
TS_API ts_status ts_tensor_check_dtype(const ts_tensor *t, const char *name, ts_dtype dtype);
/* shape entries < 0 are wildcards. */
TS_API ts_status ts_tensor_check_shape(const ts_tensor *t, const char *name, int32_t ndim,
                                       const int64_t *shape);
/* stride[-1] == 1 (or size of the last dim <= 1). */
TS_API ts_status ts_tensor_check_last_contiguous(const ts_tensor *t, const char *name);
/* Fully row-major contiguous. */
TS_API bool ts_tensor_is_contiguous(const ts_tensor *t);
/* DeepGEMM majorness: K-major means stride[-1] == 1, MN-major means stride[-2] == 1. For an
 * operand [MN, K] the view is K-major; is_mn_major checks the transposed storage. */
TS_API bool ts_tensor_is_k_major(const ts_tensor *t);
TS_API bool ts_tensor_is_mn_major(const ts_tensor *t);
TS_API ts_status ts_tensor_check_major(const ts_tensor *t, const char *name, bool want_k_major);
/* data pointer aligned to `bytes`, and every stride of dims > 1 element a multiple of it. */
TS_API ts_status ts_tensor_check_aligned(const ts_tensor *t, const char *name, size_t bytes);
/* Bytes spanned by the view (max offset + 1 unit); TS_ERR_OVERFLOW if > INT64_MAX. */
TS_API ts_status ts_tensor_nbytes(const ts_tensor *t, int64_t *nbytes);
/* 64-bit checked helpers, usable by callers sizing buffers. */
TS_API ts_status ts_mul_overflow_i64(int64_t a, int64_t b, int64_t *out);

/* Threads: a persistent pool shared by every op. Default: online cores, or TS_NUM_THREADS.
 * Results never depend on the thread count. */
TS_API ts_status ts_set_num_threads(int n);
TS_API int ts_get_num_threads(void);

/* CPU features and the ISA path in use (TS_ISA=generic|avx2|avx512 forces one). */
typedef enum ts_isa {
    TS_ISA_GENERIC = 0,
    TS_ISA_AVX2 = 1,   /* AVX2 + FMA + F16C */
    TS_ISA_AVX512 = 2, /* AVX-512 F/BW/VL/DQ (+ AVX2 + FMA + F16C: it runs the AVX2 kernels
                          wherever no AVX-512 kernel exists yet) */
    TS_ISA_NEON = 3,   /* reserved: no kernels yet */
    TS_ISA_COUNT_
} ts_isa;

typedef struct ts_cpu_info {
    char vendor[16];
    char brand[64];
    bool has_sse42, has_avx, has_avx2, has_fma, has_f16c, has_bmi2;
    bool has_avx512f, has_avx512bw, has_avx512vl, has_avx512bf16, has_avx512vnni;
    bool has_neon, has_asimddp, has_sve;
    int logical_cpus;
    int64_t l1d_bytes, l2_bytes, l3_bytes; /* per core for L1/L2, total visible for L3; 0 unknown */
    ts_isa best_isa;                        /* best path this build can run here */
    int64_t l3_instance_bytes; /* one L3 instance (a CCX or a socket shares it); 0 unknown */
    bool has_avx512dq;         /* appended after l3_instance_bytes: the layout above is ABI */
} ts_cpu_info;

TS_API const ts_cpu_info *ts_get_cpu_info(void);
TS_API ts_isa ts_get_isa(void);            /* path in use */
TS_API ts_status ts_set_isa(ts_isa isa);   /* TS_ERR_UNSUPPORTED if this CPU/build can't run it */
TS_API const char *ts_isa_name(ts_isa isa);

/* Progress of long operations (model creation and loading, weight packing): the library calls
 * the handler from the calling thread, at most a few hundred times per phase, with `done` rising
 * from 0 to `total` (equal at the end) in `unit`s ("B" for bytes, "" for items). No handler
 * (the default, or NULL) = silent; the CLI installs a progress bar on stderr. */
typedef void (*ts_progress_fn)(void *user, const char *phase, double done, double total,
                               const char *unit);
TS_API void ts_set_progress_handler(ts_progress_fn fn, void *user);

#ifdef __cplusplus
}
#endif
#endif
