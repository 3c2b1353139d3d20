/* Helpers shared by the M- and K-grouped GEMM drivers (internal). */
#ifndef TS_GEMM_GROUPED_H
#define TS_GEMM_GROUPED_H

#include "gemm/gemm_internal.h"

/* The mk alignment in force (gemm_grouped_layout.c). */
int64_t ts__gemm_mk_alignment(void);

/* x[i] as a 2-D view (x has 3 dims; no checks beyond that). */
ts_tensor ts__gemm_slice3(const ts_tensor *x, int64_t i);
/* The transposed view of a 2-D tensor. */
ts_tensor ts__gemm_transpose2(const ts_tensor *x);
/* Checks a TS_I32 vector of n elements (any stride) and returns its base pointer. */
ts_status ts__gemm_check_i32_vector(const ts_tensor *t, const char *name, int64_t n,
                                    const int32_t **data);
/* ts__gemm_check_pow2_scales over every group of a 3-D scale tensor. */
ts_status ts__gemm_check_pow2_scales3(const ts_tensor *sf, const char *name);
/* The shared part of the output checks: dtype bf16 or f32, the given shape, last dim
 * contiguous. Callers add their own no-self-overlap rule. */
ts_status ts__gemm_check_out_shape(const ts_tensor *d, const char *name, int ndim,
                                   const int64_t *shape);
/* Output checks for grouped GEMMs: dtype bf16 or f32, the given shape, last dim contiguous
 * and the other strides large enough that no two elements share memory (so the groups'
 * writes never collide). */
ts_status ts__gemm_check_grouped_out(const ts_tensor *d, const char *name, int ndim,
                                     const int64_t *shape);
/* TS_ERR_ALIASING if d overlaps any non-NULL input. */
ts_status ts__gemm_check_no_overlap(const ts_tensor *d, const ts_tensor *const *inputs,
                                    const char *const *names, int n);
/* The operand moved by r0 rows (op must allow it: not an MN-major packed fp4 operand; scales
 * with gran_mn 1), now r rows long. */
ts__gemm_operand ts__gemm_operand_rows(const ts__gemm_operand *op, int64_t r0, int64_t r);

#endif
