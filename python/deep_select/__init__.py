"""deep_select (deepseek-ai/DeepSelect) on CPU: top-k over torch CPU tensors via ts_topk.

Same signature, defaults, return convention and eager argument checks as upstream; the
differences (deterministic ties and order, NaN abort raising instead of trapping, no stride
requirement) are listed in docs/python.md and docs/select.md."""
import torch

from _tilestack_py import C

__all__ = ['topk', 'get_stride_requirement']

# Upstream pads the rows of the outputs it allocates to a multiple of 32 bytes, so callers see
# (and may pass downstream) non-contiguous [b, k] views; the same strides are kept here.
_OUT_ROW_BYTES = 32
_MAX_K = 4096


def get_stride_requirement():
    """(input row stride, output row stride) in bytes that topk requires: (1, 1) on a CPU, so
    any stride works (strides that satisfy upstream CUDA's (1024, 32) satisfy this)."""
    return C.get_stride_requirement()


def _padded_empty(b, k, dtype):
    item = dtype.itemsize
    row = -(-k * item // _OUT_ROW_BYTES) * _OUT_ROW_BYTES // item
    return torch.empty_strided((b, k), (row, 1), dtype=dtype)


def topk(input, topk, sorted=False, begin=None, end=None, indices_type=torch.int64,
         sorted_index=False, hint=None, output_idx=None, output_idx_offset=None,
         idx_oob_fill_value=2147483647, value_oob_fill_value=float('-inf'),
         return_value=True, abort_when_nan_found=True):
    """The `topk` largest entries of each row of input [b, N] (bf16 or f32). Returns
    (values [b, topk] or None, indices [b, topk]); a given output_idx is returned itself.
    NaN in a row longer than topk with abort_when_nan_found raises ValueError (upstream traps
    the CUDA context); nothing is written then."""
    fn = 'deep_select.topk'
    # Checked before anything is allocated, as upstream (plain raises: they hold under -O).
    if isinstance(topk, bool) or not isinstance(topk, int):
        raise C.TypeError(f"{fn}: argument 'topk' must be an int, got {type(topk).__name__}")
    if not 1 <= topk <= _MAX_K:
        raise C.ValueError(f"{fn}: topk = {topk} is outside [1, {_MAX_K}]")
    if begin is not None:
        raise C.ValueError(f"{fn}: argument 'begin' is not supported (must be None)")
    if hint is not None:
        raise C.ValueError(f"{fn}: argument 'hint' is not supported (must be None)")
    if indices_type not in (torch.int32, torch.int64):
        raise C.TypeError(f"{fn}: indices_type must be torch.int32 or torch.int64, got {indices_type}")
    if output_idx is not None and getattr(output_idx, 'dtype', None) != indices_type:
        raise C.TypeError(f"{fn}: output_idx has dtype {getattr(output_idx, 'dtype', type(output_idx))}, "
                          f'but indices_type is {indices_type}')
    if not isinstance(input, torch.Tensor):
        raise C.TypeError(f"{fn}: argument 'input' must be a torch tensor, got {type(input).__name__}")
    if input.dim() != 2:
        raise C.ValueError(f"{fn}: argument 'input' must be 2-D [batch, N], got shape {tuple(input.shape)}")
    if not input.is_cpu:
        raise C.ValueError(f"{fn}: argument 'input' must be a CPU tensor, got device {input.device}")
    b = input.shape[0]
    idx = output_idx if output_idx is not None else _padded_empty(b, topk, indices_type)
    values = _padded_empty(b, topk, input.dtype) if return_value else None
    C.topk(input, topk, end, output_idx_offset, values, idx, sorted, sorted_index, return_value,
           abort_when_nan_found, idx_oob_fill_value, value_oob_fill_value)
    return values, idx
