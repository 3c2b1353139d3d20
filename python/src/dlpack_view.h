/* The fast path of the view layer: DLPack's C exchange API (DLPack >= 1.2), which torch
 * publishes as the capsule torch.Tensor.__dlpack_c_exchange_api__ ("dlpack_exchange_api").
 * Its dltensor_from_py_object_no_sync fills a caller-owned, non-owning DLTensor straight from
 * the Python object: no Python call, no allocation, no reference taken (the tensor stays owned
 * by the caller's frame), about 10x cheaper than reading five attributes.
 *
 * The structs are declared here from the DLPack specification (dlpack.h, v1.2/1.3): only the
 * fields read are used, and the layout is checked at compile time (DLTensor is 48 bytes on
 * LP64). The API's header version must have major 1 (the spec keeps the struct ABI within a
 * major version); otherwise, and for any object or dtype the path does not cover, the caller
 * falls back to the attribute path, which also produces the error messages. */
#ifndef TSPY_DLPACK_VIEW_H
#define TSPY_DLPACK_VIEW_H
#include <stdint.h>

typedef struct {
    uint32_t major, minor;
} tsp_dl_version;

typedef struct tsp_dl_api_header {
    tsp_dl_version version;
    struct tsp_dl_api_header *prev_api;
} tsp_dl_api_header;

enum { TSP_DL_CPU = 1 }; /* kDLCPU */

/* DLDataTypeCode values this layer maps (kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4,
 * kDLBool 6, kDLFloat8_e4m3fn 10, kDLFloat8_e5m2 12, kDLFloat8_e8m0fnu 14). */
enum {
    TSP_DL_INT = 0,
    TSP_DL_UINT = 1,
    TSP_DL_FLOAT = 2,
    TSP_DL_BFLOAT = 4,
    TSP_DL_BOOL = 6,
    TSP_DL_F8_E4M3FN = 10,
    TSP_DL_F8_E5M2 = 12,
    TSP_DL_F8_E8M0FNU = 14,
};

typedef struct {
    void *data;
    struct {
        int32_t device_type, device_id;
    } device;
    int32_t ndim;
    struct {
        uint8_t code, bits;
        uint16_t lanes;
    } dtype;
    int64_t *shape;
    int64_t *strides; /* in elements; NULL means compact row-major */
    uint64_t byte_offset;
} tsp_dl_tensor;

typedef struct {
    tsp_dl_api_header header;
    void *managed_tensor_allocator;
    void *managed_tensor_from_py_object_no_sync;
    void *managed_tensor_to_py_object_no_sync;
    int (*dltensor_from_py_object_no_sync)(void *py_object, tsp_dl_tensor *out);
    void *current_work_stream;
} tsp_dl_exchange_api;

#if UINTPTR_MAX == UINT64_MAX
_Static_assert(sizeof(tsp_dl_tensor) == 48, "DLTensor layout (DLPack spec)");
_Static_assert(sizeof(tsp_dl_api_header) == 16, "DLPackExchangeAPIHeader layout (DLPack spec)");
#endif

#endif
