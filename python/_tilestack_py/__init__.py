"""Helpers shared by the upstream-named packages (deep_gemm, deep_select, ...): the extension
handle and the stubs for functions that have no CPU implementation yet."""
import _tilestack as C  # noqa: F401  (re-exported: the one native module)


def missing(qualname, what):
    """A stand-in for an upstream function tilestack does not offer yet: calling it raises
    NotImplementedError naming what is missing, so ported code fails loudly, never silently."""
    def stub(*args, **kwargs):
        raise NotImplementedError(f'{qualname} is not available in tilestack: {what}')
    stub.__name__ = qualname.rsplit('.', 1)[-1]
    stub.__qualname__ = stub.__name__
    stub.__doc__ = f'Not available on CPU (tilestack): {what}. Raises NotImplementedError.'
    return stub


def pair(x, fn, arg):
    """Upstream passes quantised operands as (data, scale) pairs."""
    if not isinstance(x, (tuple, list)) or len(x) != 2:
        raise C.TypeError(f"{fn}: argument '{arg}' must be a (tensor, scale factor) pair, "
                          f'got {type(x).__name__}')
    return x[0], x[1]
