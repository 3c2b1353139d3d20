"""mHC (manifold-constrained hyper-connections) forward ops on CPU, hc = 4 (libtilestack's
mhc.tile, docs/kernels.md "mHC"). Upstream's public functions live in
tile_kernels.modeling.mhc.ops (re-exported there); these are forward only: tilestack has no mHC
backward kernels, so the results carry no autograd graph."""
import torch

from _tilestack_py import C, missing
from ._common import call, tensor

_BF16, _F32 = (torch.bfloat16,), (torch.float32,)


def _mhc(m, fn, arg='mhc_mult'):
    if m != 4:
        raise NotImplementedError(f'{fn}: {arg} = {m} is not available in tilestack (its mHC kernels are hc = 4)')


def _out(out, shape, dtype, like, fn):
    if out is None:
        return torch.empty(shape, dtype=dtype, device=like.device)
    tensor(out, fn, 'out', (dtype,))
    if tuple(out.shape) != tuple(shape) or not out.is_contiguous():
        raise C.ValueError(f"{fn}: argument 'out' must be a contiguous {tuple(shape)} tensor, got "
                           f'{tuple(out.shape)} with strides {out.stride()}')
    return out


def _shape(t, tail, fn, arg):
    if t.dim() < len(tail) or tuple(t.shape[t.dim() - len(tail):]) != tuple(tail):
        raise C.ValueError(f"{fn}: argument '{arg}' must end in {tuple(tail)}, got {tuple(t.shape)}")


def expand_to_mhc(hidden, mhc_mult: int, out=None):
    """[..., H] -> [..., mhc_mult, H]: mhc_mult copies of each row."""
    fn = 'tile_kernels.modeling.mhc.ops.expand_to_mhc'
    tensor(hidden, fn, 'hidden', _BF16)
    _mhc(mhc_mult, fn)
    h = hidden.shape[-1]
    out = _out(out, (*hidden.shape[:-1], mhc_mult, h), torch.bfloat16, hidden, fn)
    if out.numel():  # 2-D / 3-D already: no reshape (0.7 us each, the binding's largest cost here)
        call('expand_to_mhc', fn, ('hidden', 'out'), hidden if hidden.dim() == 2 else hidden.reshape(-1, h),
             out if out.dim() == 3 else out.view(-1, mhc_mult, h))
    return out


def mhc_pre_apply_mix(x, mix, out=None):
    """layer_in[..., :] = sum_i mix[..., i, 0] * x[..., i, :] (x bf16 [..., 4, H], mix f32 [..., 4, 1])."""
    fn = 'tile_kernels.modeling.mhc.ops.mhc_pre_apply_mix'
    tensor(x, fn, 'x', _BF16)
    tensor(mix, fn, 'mix', _F32)
    if x.dim() < 2:
        raise C.ValueError(f"{fn}: argument 'x' must be [..., mhc, hidden], got {tuple(x.shape)}")
    m, h = x.shape[-2:]
    _mhc(m, fn, 'mhc')
    _shape(mix, (m, 1), fn, 'mix')
    out = _out(out, (*x.shape[:-2], h), torch.bfloat16, x, fn)
    if out.numel():
        call('mhc_pre_apply_mix', fn, ('x', 'mix', 'out'), x.reshape(-1, m, h), mix.reshape(-1, m), out.view(-1, h))
    return out


def mhc_post(x, residual, post_layer_mix, comb_res_mix, out=None):
    """out[..., j, :] = post[..., j] * x + sum_i comb[..., i, j] * residual[..., i, :]."""
    fn = 'tile_kernels.modeling.mhc.ops.mhc_post'
    tensor(x, fn, 'x', _BF16)
    tensor(residual, fn, 'residual', _BF16)
    tensor(post_layer_mix, fn, 'post_layer_mix', _F32)
    tensor(comb_res_mix, fn, 'comb_res_mix', _F32)
    if residual.dim() < 2:
        raise C.ValueError(f"{fn}: argument 'residual' must be [..., mhc, hidden], got {tuple(residual.shape)}")
    m, h = residual.shape[-2:]
    _mhc(m, fn, 'mhc')
    lead = tuple(residual.shape[:-2])
    for t, tail, a in ((x, (h,), 'x'), (post_layer_mix, (m, 1), 'post_layer_mix'),
                       (comb_res_mix, (m, m), 'comb_res_mix')):
        if tuple(t.shape) != lead + tail:
            raise C.ValueError(f"{fn}: argument '{a}' must be {lead + tail}, got {tuple(t.shape)}")
    out = _out(out, residual.shape, torch.bfloat16, residual, fn)
    if out.numel():
        call('mhc_post', fn, ('x', 'residual', 'post_layer_mix', 'comb_res_mix', 'out'), x.reshape(-1, h),
             residual.reshape(-1, m, h), post_layer_mix.reshape(-1, m), comb_res_mix.reshape(-1, m * m),
             out.view(-1, m, h))
    return out


def sinkhorn_normalize(x, repeat: int = 10, eps: float = 1e-6):
    """Row softmax + eps, then alternating column / row normalisation of [..., 4, 4] f32."""
    fn = 'tile_kernels.modeling.mhc.ops.sinkhorn_normalize'
    tensor(x, fn, 'x', _F32)
    if x.dim() < 2 or x.shape[-1] != x.shape[-2]:
        raise C.ValueError(f"{fn}: argument 'x' must be [..., mhc, mhc], got {tuple(x.shape)}")
    _mhc(x.shape[-1], fn, 'mhc')
    out = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    if out.numel():
        call('sinkhorn_normalize', fn, ('x', 'out'), x.reshape(-1, 16), out.view(-1, 16), repeat, eps)
    return out


def mhc_head_compute_mix(input_mix, mhc_scale, mhc_base, mhc_pre_eps: float):
    """sigmoid(input_mix * mhc_scale + mhc_base) + mhc_pre_eps for [S, T, 4] f32."""
    fn = 'tile_kernels.modeling.mhc.ops.mhc_head_compute_mix'
    tensor(input_mix, fn, 'input_mix', _F32, 3)
    tensor(mhc_scale, fn, 'mhc_scale', _F32)
    tensor(mhc_base, fn, 'mhc_base', _F32)
    m = input_mix.shape[-1]
    _mhc(m, fn, 'mhc')
    out = torch.empty(input_mix.shape, dtype=torch.float32, device=input_mix.device)
    if out.numel():
        call('mhc_head_compute_mix', fn, ('input_mix', 'mhc_scale', 'mhc_base', 'out'), input_mix.reshape(-1, m),
             mhc_scale.reshape(-1), mhc_base.reshape(-1), out.view(-1, m), mhc_pre_eps)
    return out


def mhc_pre_split_mixes(input_mixes, mhc_scale, mhc_base, mhc_mult: int, mhc_post_mult_value: float,
                        mhc_pre_eps: float):
    """[S, T, 24] mixes -> (pre [S, T, 4, 1], post [S, T, 4, 1], comb [S, T, 4, 4])."""
    fn = 'tile_kernels.modeling.mhc.ops.mhc_pre_split_mixes'
    tensor(input_mixes, fn, 'input_mixes', _F32, 3)
    tensor(mhc_scale, fn, 'mhc_scale', _F32)
    tensor(mhc_base, fn, 'mhc_base', _F32)
    _mhc(mhc_mult, fn)
    lead = tuple(input_mixes.shape[:2])
    m3 = mhc_mult * (mhc_mult + 2)
    if input_mixes.shape[2] != m3:
        raise C.ValueError(f"{fn}: argument 'input_mixes' must end in {m3}, got {tuple(input_mixes.shape)}")
    dev = input_mixes.device
    pre = torch.empty(lead + (mhc_mult, 1), dtype=torch.float32, device=dev)
    post = torch.empty(lead + (mhc_mult, 1), dtype=torch.float32, device=dev)
    comb = torch.empty(lead + (mhc_mult, mhc_mult), dtype=torch.float32, device=dev)
    if pre.numel():
        call('mhc_pre_split_mixes', fn, ('input_mixes', 'mhc_scale', 'mhc_base', 'pre', 'post', 'comb'),
             input_mixes.reshape(-1, m3), mhc_scale.reshape(-1), mhc_base.reshape(-1), pre.view(-1, mhc_mult),
             post.view(-1, mhc_mult), comb.view(-1, mhc_mult * mhc_mult), mhc_post_mult_value, mhc_pre_eps)
    return pre, post, comb


_C_EXISTS = 'the C kernel exists in libtilestack (docs/kernels.md); its Python binding is not written yet'
def _residual(residual, fn, fn_arg, name):
    tensor(residual, name, 'residual', _BF16)
    tensor(fn, name, fn_arg, _F32, 2)
    if residual.dim() < 2:
        raise C.ValueError(f"{name}: argument 'residual' must be [..., mhc, hidden], got {tuple(residual.shape)}")
    m, h = residual.shape[-2:]
    _mhc(m, name, 'mhc')
    if tuple(fn.shape) != (m * (m + 2), m * h):
        raise C.ValueError(f"{name}: argument '{fn_arg}' must be {(m * (m + 2), m * h)}, got {tuple(fn.shape)}")
    return m, h


def _round_to_tf32(fn):
    """Upstream's rounding of fn before its TF32 GEMM (add half a TF32 ulp to the bits); the
    kernel then drops the low 13 bits, as the tensor cores do."""
    return (fn.contiguous().view(torch.int32) + 0x1000).view(torch.float32)


def mhc_pre_norm_fn(residual, mhc_fn, mhc_norm_weight, mhc_norm_eps: float, fuse_grad_acc: bool = True,
                    n_splits: int = 16):
    """mixes[..., :] = (R_flat . tf32(mhc_fn)^T) (mhc_fn rounded to TF32 as upstream) / sqrt(mean(R_flat^2) + eps), R_flat the [..., 4H]
    flattened residual -> f32 [..., 24]. fuse_grad_acc and n_splits (backward / split-K knobs)
    are accepted and ignored."""
    fn = 'tile_kernels.modeling.mhc.ops.mhc_pre_norm_fn'
    m, h = _residual(residual, mhc_fn, 'mhc_fn', fn)
    if mhc_norm_weight is not None:
        raise NotImplementedError(f'{fn}: mhc_norm_weight is not available in tilestack (pre-multiply mhc_fn by it)')
    m3 = m * (m + 2)
    out = torch.empty((*residual.shape[:-2], m3), dtype=torch.float32, device=residual.device)
    if out.numel():
        call('mhc_pre_norm_fn', fn, ('residual', 'mhc_fn', 'out'), residual.reshape(-1, m, h), _round_to_tf32(mhc_fn),
             out.view(-1, m3), mhc_norm_eps)
    return out


def mhc_pre_big_fuse(residual, fn, mhc_scale, mhc_base, rms_eps: float, mhc_pre_eps: float, mhc_sinkhorn_eps: float,
                     mhc_post_mult_value: float, sinkhorn_repeat: int, n_splits: int = 16):
    """norm_fn -> split_mixes -> sinkhorn -> pre_apply_mix in one call -> (post_mix [..., 4, 1],
    comb_mix [..., 4, 4], layer_input bf16 [..., H]); bit-identical to the composition."""
    name = 'tile_kernels.modeling.mhc.ops.mhc_pre_big_fuse'
    m, h = _residual(residual, fn, 'fn', name)
    tensor(mhc_scale, name, 'mhc_scale', _F32)
    tensor(mhc_base, name, 'mhc_base', _F32)
    lead = tuple(residual.shape[:-2])
    dev = residual.device
    post = torch.empty(lead + (m, 1), dtype=torch.float32, device=dev)
    comb = torch.empty(lead + (m, m), dtype=torch.float32, device=dev)
    layer = torch.empty(lead + (h,), dtype=torch.bfloat16, device=dev)
    if layer.numel():
        call('mhc_pre', name, ('residual', 'fn', 'mhc_scale', 'mhc_base', 'layer_input', 'post_mix', 'comb_mix'),
             residual.reshape(-1, m, h), _round_to_tf32(fn), mhc_scale.reshape(-1), mhc_base.reshape(-1), layer.view(-1, h),
             post.view(-1, m), comb.view(-1, m * m), rms_eps, mhc_pre_eps, mhc_post_mult_value, sinkhorn_repeat,
             mhc_sinkhorn_eps)
    return post, comb, layer


mhc_multilayer_recompute = missing('tile_kernels.modeling.mhc.ops.mhc_multilayer_recompute',
                                   'no multilayer recompute kernel in tilestack')
mhc_post_fwd = mhc_post
mhc_post_bwd = missing('tile_kernels.modeling.mhc.ops.mhc_post_bwd', 'no mHC backward kernels in tilestack')


def __getattr__(name):
    if name.startswith('__'):
        raise AttributeError(name)
    return missing(f'tile_kernels.mhc.{name}', 'not in tilestack')
