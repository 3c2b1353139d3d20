#!/usr/bin/env python3
"""Golden shapes, strides and values for the scale-factor layout helpers (test_quant_layout.c).

Reference: a numpy transcription of DeepGEMM's torch implementations (tests/test_layout.py
get_mn_major_tma_aligned_packed_ue8m0_tensor_torch_impl, csrc/jit_kernels/impls/smxx_layout.hpp
get_mn_major_tma_aligned_tensor, csrc/apis/layout.hpp transform_sf_into_required_layout's
SM100 broadcast). Inputs: sf = ceil_to_ue8m0(ldexp(u + 1.5, e)) with u, e from ts_prng.

tests/golden/quant_layout.bin: records of 16 little-endian i64
  kind (0 mn-major f32, 1 packed ue8m0, 2 transform SM100 f32 -> packed), groups (0 = 2-D),
  mn, k (sf columns; for kind 2 the GEMM k), gran_mn, gran_k, seed, ndim, shape[3], strides[3],
  alloc_elems (torch empty_strided storage size), nvalues
followed by nvalues u32: the output's elements in row-major order of its shape."""
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ts_prng  # noqa: E402


def align(x, y):
    return -(-x // y) * y


def ceil_to_ue8m0(x):
    bits = np.abs(x).astype(np.float32).view(np.uint32)
    exp = ((bits >> 23) & 0xFF).astype(np.int64) + ((bits & 0x7FFFFF) != 0)
    return (np.clip(exp, 1, 254).astype(np.uint32) << 23).view(np.float32)


def make_sf(seed, g, mn, k):
    cnt = max(g, 1) * mn * k
    u = ts_prng.uniform(seed, cnt)
    e = (ts_prng.u32(seed + 1, cnt) % 41).astype(np.int32) - 20
    v = ceil_to_ue8m0(np.ldexp(u + np.float32(1.5), e).astype(np.float32))
    return v.reshape((g, mn, k) if g else (mn, k))


def storage(shape, strides):
    if any(s == 0 for s in shape):
        return 0
    return 1 + sum((a - 1) * b for a, b in zip(shape, strides))


def packed_ref(sf):
    """get_mn_major_tma_aligned_packed_ue8m0_tensor_torch_impl: values and (shape, strides)."""
    x = sf if sf.ndim == 3 else sf[None]
    b, mn, k = x.shape
    amn, ak = align(mn, 4), align(k, 4)
    padded = np.zeros((b, amn, ak), dtype=np.uint8)
    padded[:, :mn, :k] = (x.view(np.int32) >> 23).astype(np.uint8)
    words = padded.reshape(-1).view("<u4").reshape(b, amn, ak // 4)[:, :mn, :]
    shape, strides = (b, mn, ak // 4), (amn * (ak // 4), 1, amn)
    if sf.ndim == 2:
        return words[0], shape[1:], strides[1:]
    return words, shape, strides


def mn_major_ref(sf):
    x = sf if sf.ndim == 3 else sf[None]
    b, mn, k = x.shape
    amn = align(mn, 4)
    shape, strides = (b, mn, k), (amn * k, 1, amn)
    vals = sf.view(np.uint32)
    return (vals, shape[1:], strides[1:]) if sf.ndim == 2 else (vals, shape, strides)


def rec(kind, g, mn, k, gmn, gk, seed):
    if kind == 2:
        sf = make_sf(seed, g, -(-mn // gmn), -(-k // gk))
        idx = np.arange(mn) // gmn
        words, shape, strides = packed_ref(sf[..., idx, :])
    else:
        sf = make_sf(seed, g, mn, k)
        words, shape, strides = (mn_major_ref if kind == 0 else packed_ref)(sf)
    shape, strides = list(shape), list(strides)
    nd = len(shape)
    vals = np.ascontiguousarray(words).astype("<u4").reshape(-1)
    hdr = [kind, g, mn, k, gmn, gk, seed, nd] + (shape + [0] * 3)[:3] + (strides + [0] * 3)[:3] + [
        storage(shape, strides), vals.size]
    return struct.pack("<16q", *hdr) + vals.tobytes()


def cases():
    seed = 500
    for kind in (0, 1):
        for g, mn, k in [(0, 1, 1), (0, 7, 3), (0, 129, 4), (0, 128, 56), (0, 1001, 5), (3, 129, 7), (2, 6, 13), (1, 5, 8)]:
            seed += 2
            yield (kind, g, mn, k, 1, 1, seed)
    for g in (0, 2):
        for gk in (32, 128):
            for gmn, mn, k in [(1, 129, 512), (128, 129, 512), (128, 200, 2048), (1, 3, 100)]:
                seed += 2
                yield (2, g, mn, k, gmn, gk, seed)


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden", "quant_layout.bin")
    data = b"".join(rec(*c) for c in cases())
    with open(out, "wb") as f:
        f.write(data)
    print(f"{len(data)} bytes -> {os.path.normpath(out)}")


if __name__ == "__main__":
    main()
