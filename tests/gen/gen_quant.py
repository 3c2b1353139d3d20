#!/usr/bin/env python3
"""Golden vectors for the quantisers (tests/test_quant_fp8.c, tests/test_quant_fp4.c).

An independent numpy + ml_dtypes re-implementation of DeepGEMM's deep_gemm/utils/math.py
formulas (per_token / per_block / per_channel cast to fp8, per_token cast to fp4) and of
TileKernels' get_sf_and_inv + RNE e2m1 cast. Inputs come from tests/gen/ts_prng.py, so the
C tests rebuild them; only hashes and small samples of the outputs are stored.

Output: tests/golden/quant_cases.bin, a sequence of 192-byte little-endian records:
  u32 op (0 fp8 per-token, 1 fp8 per-block, 2 fp8 per-channel, 3 fp4 DeepGEMM, 4 fp4 RNE)
  u32 dtype (ts_dtype: 6 f16, 7 bf16, 8 f32)   i64 m, n, gran_k
  u32 flags (1 use_ue8m0, 2 packed sf, 4 special values)   u32 0   u64 seed
  u64 hash_q, hash_sf   u8 q_head[64]   u8 sf_head[64]
hash = fnv1a64 over the concatenated little-endian u64 fnv1a64 of each row (rows of the
contiguous output), so the generator can hash rows in parallel. sf is f32 [rows, blocks] or
packed u32 [rows, ceil(blocks/4)], row-major."""
import os
import struct
import sys

import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ts_prng  # noqa: E402

F32 = np.float32
U32 = np.uint32
CANON_NAN = np.array([0x7FFFFFFF], dtype=U32).view(F32)[0]
DT_CODE = {"f16": 6, "bf16": 7, "f32": 8}
FNV_PRIME = np.uint64(0x100000001B3)
FNV_OFF = np.uint64(0xCBF29CE484222325)


def row_hash(buf2d: np.ndarray) -> int:
    """fnv1a64 of each row's bytes (vectorised across rows), then fnv1a64 of those u64s."""
    b = np.ascontiguousarray(buf2d).view(np.uint8).reshape(buf2d.shape[0], -1)
    h = np.full(b.shape[0], FNV_OFF, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(b.shape[1]):
            h = (h ^ b[:, j].astype(np.uint64)) * FNV_PRIME
    return ts_prng.fnv1a64(h.astype("<u8").tobytes())


def make_input(seed, m, n, dtype, specials):
    """Same construction as make_input() in tests/test_quant_common.h."""
    u = ts_prng.uniform(seed, m * n).reshape(m, n)
    e = (np.arange(m) % 40 - 20).astype(np.int32)
    x = np.ldexp(u, e[:, None]).astype(F32)
    if specials:
        for r in range(m):
            k, c = r % 8, (r * 13) % n
            if k == 1:
                x[r, :] = 0
            elif k == 2:
                x[r, c] = np.nan
            elif k == 3:
                x[r, c] = np.inf
            elif k == 4:
                x[r, c] = -np.inf
            elif k == 5:
                x[r, :] = np.ldexp(x[r, :], 100)
            elif k == 6:
                x[r, :] = np.ldexp(x[r, :], -125)
            elif k == 7:
                x[r, c] = np.array([0xFFC00000], dtype=U32).view(F32)[0]
    if dtype == "bf16":
        return x.astype(ml_dtypes.bfloat16).astype(F32)
    if dtype == "f16":
        with np.errstate(over="ignore"):
            return x.astype(np.float16).astype(F32)
    return x


def canon(a):
    a = a.astype(F32).copy()
    a[np.isnan(a)] = CANON_NAN
    return a


def ceil_to_ue8m0(sf):
    bits = np.abs(sf).view(U32)
    exp = ((bits >> U32(23)) & U32(0xFF)).astype(np.int64) + ((bits & U32(0x7FFFFF)) != 0)
    return (np.clip(exp, 1, 254).astype(U32) << U32(23)).view(F32)


def dg_scale(amax, qmax, ue8m0):
    amax = canon(amax)
    amax = np.where(amax < F32(1e-4), F32(1e-4), amax).astype(F32)
    # torch on CUDA divides a tensor by a Python scalar as a multiply by its f32 reciprocal.
    sf = canon((amax * (F32(1.0) / F32(qmax))).astype(F32))
    return ceil_to_ue8m0(sf) if ue8m0 else sf


def e4m3(y):
    with np.errstate(invalid="ignore", over="ignore"):
        c = y.astype(ml_dtypes.float8_e4m3fn).view(np.uint8).copy()
    # torch's c10 rule and ml_dtypes agree: RNE, 464 ties to 448, above 464 (and inf) is NaN
    c[np.isnan(y)] = 0x7F
    return c


def pad_cols(x, g):
    m, n = x.shape
    pn = -(-n // g) * g
    out = np.zeros((m, pn), dtype=F32)
    out[:, :n] = x
    return out


def absmax_blocks(v, axis):
    a = np.abs(v)
    with np.errstate(invalid="ignore"):
        r = np.max(a, axis=axis)  # NaN propagates, as torch.amax
    return r


def pack_sf(sf):
    b = (sf.view(U32) >> U32(23)).astype(np.uint8)
    m, nb = b.shape
    w = -(-nb // 4)
    p = np.zeros((m, 4 * w), dtype=np.uint8)
    p[:, :nb] = b
    return p.view("<u4")


def fp8_per_token(x, g, ue8m0, packed):
    m, n = x.shape
    xp = pad_cols(x, g)
    v = xp.reshape(m, -1, g)
    sf = dg_scale(absmax_blocks(v, 2), 448.0, ue8m0)
    inv = (F32(1) / sf).astype(F32)
    with np.errstate(invalid="ignore", over="ignore"):
        y = (v * inv[:, :, None]).astype(F32)
    q = e4m3(y).reshape(m, -1)[:, :n]
    return q, (pack_sf(sf) if packed else sf)


def fp8_per_block(x, g, ue8m0):
    m, n = x.shape
    pm, pn = -(-m // g) * g, -(-n // g) * g
    xp = np.zeros((pm, pn), dtype=F32)
    xp[:m, :n] = x
    v = xp.reshape(pm // g, g, pn // g, g)
    sf = dg_scale(absmax_blocks(v, (1, 3)), 448.0, ue8m0)
    inv = (F32(1) / sf).astype(F32)
    with np.errstate(invalid="ignore", over="ignore"):
        y = (v * inv[:, None, :, None]).astype(F32)
    return e4m3(y).reshape(pm, pn)[:m, :n], sf


def fp8_per_channel(x, g, ue8m0):
    m, n = x.shape
    v = x.reshape(m // g, g, n)
    sf = dg_scale(absmax_blocks(v, 1), 448.0, ue8m0)
    inv = (F32(1) / sf).astype(F32)
    with np.errstate(invalid="ignore", over="ignore"):
        y = (v * inv[:, None, :]).astype(F32)
    return e4m3(y).reshape(m, n), sf


def pack_nibbles(codes, n):
    c = codes.astype(np.uint8)
    return ((c[:, 0:n:2] & 0xF) | ((c[:, 1:n:2] & 0xF) << 4)).astype(np.uint8)


def fp4_deepgemm(x, g, ue8m0, packed):
    m, n = x.shape
    v = pad_cols(x, g).reshape(m, -1, g)
    sf = dg_scale(absmax_blocks(v, 2), 6.0, ue8m0)
    inv = (F32(1) / sf).astype(F32)
    with np.errstate(invalid="ignore", over="ignore"):
        y = (v * inv[:, :, None]).astype(F32).reshape(m, -1)
    ax = np.minimum(np.abs(y), F32(6))  # NaN stays NaN
    bounds = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], dtype=F32)
    idx = np.searchsorted(bounds, ax, side="left")  # torch.bucketize(right=False); NaN -> 7
    with np.errstate(invalid="ignore"):
        sign = (y < 0) & (idx != 0)
    codes = idx.astype(np.uint8) | (sign.astype(np.uint8) << 3)
    return pack_nibbles(codes[:, :n], n), (pack_sf(sf) if packed else sf)


def fp4_tilekernels(x, g, ue8m0, packed):
    m, n = x.shape
    v = pad_cols(x, g).reshape(m, -1, g)
    amax = np.fmax.reduce(np.abs(v), axis=2, initial=F32(0))  # fmaxf skips NaN
    amax = np.maximum(amax, F32(6.0 * 2.0 ** -126)).astype(F32)
    sf = (amax / F32(6)).astype(F32)
    if ue8m0:
        bits = sf.view(U32)
        with np.errstate(over="ignore"):
            e = ((bits - U32(1)) >> U32(23)) + U32(1) - U32(127)
            sf = ((U32(127) + e) << U32(23)).view(F32)
            inv = ((U32(127) - e) << U32(23)).view(F32)
            ebyte = ((e + U32(127)) & U32(0xFF)).astype(np.uint8)
    else:
        with np.errstate(divide="ignore"):
            inv = (F32(6) / amax).astype(F32)
    with np.errstate(invalid="ignore", over="ignore"):
        y = (v * inv[:, :, None]).astype(F32).reshape(m, -1)
    nan = np.isnan(y)
    yc = np.clip(np.where(nan, F32(6), y), F32(-6), F32(6))
    codes = yc.astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0xF
    if packed:
        w = -(-ebyte.shape[1] // 4)
        p = np.zeros((m, 4 * w), dtype=np.uint8)
        p[:, : ebyte.shape[1]] = ebyte
        sfo = p.view("<u4")
    else:
        sfo = sf
    return pack_nibbles(codes[:, :n], n), sfo


def record(op, dtype, m, n, g, flags, seed):
    x = make_input(seed, m, n, dtype, flags & 4)
    ue8m0, packed = bool(flags & 1), bool(flags & 2)
    if op == 0:
        q, sf = fp8_per_token(x, g, ue8m0, packed)
    elif op == 1:
        q, sf = fp8_per_block(x, g, ue8m0)
    elif op == 2:
        q, sf = fp8_per_channel(x, g, ue8m0)
    elif op == 3:
        q, sf = fp4_deepgemm(x, g, ue8m0, packed)
    else:
        q, sf = fp4_tilekernels(x, g, ue8m0, packed)
    q = np.ascontiguousarray(q)
    sf = np.ascontiguousarray(sf)
    qh = q.tobytes()[:64].ljust(64, b"\0")
    sh = sf.astype(sf.dtype.newbyteorder("<")).tobytes()[:64].ljust(64, b"\0")
    hq = row_hash(q) if q.size else 0
    hs = row_hash(sf) if sf.size else 0
    return struct.pack("<IIqqqIIQQQ", op, DT_CODE[dtype], m, n, g, flags, 0, seed, hq, hs) + qh + sh


def cases():
    seed = 1000
    shapes = [(1, 576), (127, 7168), (129, 100), (129, 576)]
    for dtype in ("bf16", "f32", "f16"):
        for (m, n) in shapes if dtype != "f16" else [(129, 576)]:
            for g in (128, 32) if (m, n) == (129, 576) else (128,):
                for flags in (0, 1, 3, 4, 5, 7):
                    seed += 1
                    yield (0, dtype, m, n, g, flags, seed)
    for flags in (0, 3, 5):
        seed += 1
        yield (0, "bf16", 4001, 7168, 128, flags, seed)
    for dtype in ("bf16", "f32"):
        for (m, n) in [(1, 576), (129, 100), (257, 576)]:
            for flags in (0, 1, 4, 5):
                seed += 1
                yield (1, dtype, m, n, 128, flags, seed)
        for (m, n, g) in [(128, 576, 128), (256, 100, 128), (64, 129, 32)]:
            for flags in (0, 1, 4, 5):
                seed += 1
                yield (2, dtype, m, n, g, flags, seed)
    for op in (3, 4):
        for dtype in ("bf16", "f32"):
            for (m, n) in [(1, 576), (127, 7168), (129, 100)]:
                for g in (32, 128):
                    for flags in (0, 1, 3, 4, 7):
                        seed += 1
                        yield (op, dtype, m, n, g, flags, seed)
    for op in (3, 4):  # odd gran_k: blocks split bytes
        for flags in (0, 3, 4, 7):
            seed += 1
            yield (op, "bf16", 9, 100, 33, flags, seed)


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden", "quant_cases.bin")
    recs = [record(*c) for c in cases()]
    with open(out, "wb") as f:
        f.write(b"".join(recs))
    print(f"{len(recs)} records -> {os.path.normpath(out)}")


if __name__ == "__main__":
    main()
