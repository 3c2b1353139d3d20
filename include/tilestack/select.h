/* tilestack select: DeepSelect top-k (deepseek-ai/DeepSelect `deep_select.topk`) on CPU.
 *
 * Semantics follow upstream (docs/select.md has the details and the differences):
 *   row i has length L = end[i] (or N); c = min(L, k) real slots, then fills.
 *   L <= k ("short row"): indices 0..L-1 ascending (+offset), values copied, never NaN-checked;
 *     slots L..k-1 get idx_oob_fill_value / value_oob_fill_value (rounded RNE to bf16 for bf16).
 *   L > k: exactly k distinct indices of the k largest values of row[0, L).
 * tilestack is deterministic where upstream is not: values compare as IEEE numbers (-0 == +0),
 * and among equal values the lower index wins, so the selected set is unique; it never depends
 * on the thread count or the ISA path.
 * Output order: `sorted` -> descending values (ties: ascending index); otherwise ascending
 * index (upstream leaves the unsorted order unspecified; sorted_index asks for this order).
 * NaN in a row with L > k: abort_when_nan_found -> TS_ERR_NONFINITE (upstream: TS_ERR_NAN in
 *   the issue text; upstream CUDA traps) naming the row, and NOTHING is written to any row;
 *   otherwise output_idx[row][0] = 0x3F3F3F3F (no offset) and the rest of that row, and its
 *   values, are left unwritten, as upstream CUDA does. */
#ifndef TILESTACK_SELECT_H
#define TILESTACK_SELECT_H

#include "tilestack/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TS_TOPK_MAX_K 4096
/* Index written at [row][0] of a NaN row when abort_when_nan_found is false (upstream value). */
#define TS_TOPK_NAN_SENTINEL 0x3F3F3F3F

/* Upstream keyword arguments; ts_topk_default_options() gives upstream's defaults. */
typedef struct ts_topk_options {
    bool sorted;              /* descending values; f32 only, needs return_value, excludes sorted_index */
    bool sorted_index;        /* ascending indices (tilestack's order anyway when !sorted) */
    bool return_value;        /* false: `values` is ignored and never written */
    bool abort_when_nan_found;
    ts_dtype indices_type;    /* TS_I32 or TS_I64; must equal output_idx->dtype */
    int32_t idx_oob_fill_value;   /* default INT32_MAX */
    float value_oob_fill_value;   /* default -inf */
} ts_topk_options;

TS_API ts_topk_options ts_topk_default_options(void);

/* input      [batch, N] bf16 or f32, last dim contiguous, any row stride; N <= INT32_MAX.
 * k          1..TS_TOPK_MAX_K (k > N allowed: the rest is filled).
 * end        optional i32 [batch], 0 <= end[i] <= N (validated: TS_ERR_INVALID_ARGUMENT).
 * output_idx_offset optional i32 [batch], added to real indices in the output width
 *            (i64: no wrap; i32: two's-complement wrap).
 * values     [batch, k] of the input dtype, last dim contiguous; required iff return_value.
 * output_idx [batch, k] of opts->indices_type, last dim contiguous (caller-owned).
 * opts       NULL = defaults.
 * Errors (outputs untouched): TS_ERR_NULL_POINTER, TS_ERR_DTYPE (input not bf16/f32, index
 * type, values dtype, end/offset not i32), TS_ERR_SHAPE (ndim, outputs not [batch, k], end/offset
 * not [batch], N too large), TS_ERR_STRIDE (last dims not contiguous), TS_ERR_INVALID_ARGUMENT
 * (k range, sorted with sorted_index or without return_value, end out of range),
 * TS_ERR_UNSUPPORTED (sorted with bf16, as upstream), TS_ERR_ALIASING (output rows overlap:
 * |row stride| < k), TS_ERR_NONFINITE (NaN, abort mode),
 * TS_ERR_OUT_OF_MEMORY (scratch). */
TS_API ts_status ts_topk(const ts_tensor *input, int64_t k, const ts_topk_options *opts,
                         const ts_tensor *end, const ts_tensor *output_idx_offset,
                         ts_tensor *values, ts_tensor *output_idx);

/* Upstream get_stride_requirement(): (input row stride, output row stride) in bytes. The CPU
 * needs no alignment, so both are 1 here: any row stride works (upstream CUDA says 1024, 32;
 * strides that satisfy those satisfy this). */
TS_API ts_status ts_get_stride_requirement(int64_t *input_row_stride_bytes,
                                           int64_t *output_row_stride_bytes);

#ifdef __cplusplus
}
#endif
#endif
