#!/usr/bin/env python3
"""Golden vectors for the low-precision formats (include/tilestack/numerics.h).

Oracles: numpy + ml_dtypes, plus independent numpy re-implementations where the library's
rule is not what those packages do (documented in docs/numerics.md):
  - f32 -> f16 NaN: quiet bit set, top payload bits kept (F16C rule; numpy keeps sNaN);
  - f32 -> e2m1 NaN: code 0x7 (ml_dtypes gives 0x8);
  - e2m1 "dg" rule: DeepGEMM _quantize_to_fp4_e2m1 (strict thresholds, bucketize);
  - E5M6: TileKernels float_to_e5m6 (f16 round-toward-zero, then the 17-bit rounding rule).

Output: tests/golden/formats.txt, one case per line, '#' lines are comments:
    <case> <op> <n> <fnv1a64 hex> <sample hex>
  case  : which inputs (regenerated identically in tests/test_formats.c):
          all      every code of the op's source format, ascending (decoders, e5m6 pack);
          bf16all  f32 bit patterns i << 16 for i = 0..65535 (every bf16 value);
          rand     ts_prng bits_f32(RAND_SEED, RAND_N) (all f32 classes);
          bound    rounding boundaries of the op's target format, see boundary_inputs();
  op    : dec_<fmt> or enc_<fmt> (or e5m6_pack8);
  hash  : FNV-1a 64 of the outputs as little-endian bytes of their natural width
          (u8 for fp8/fp4 codes, u16 for bf16/f16/e5m6 codes, u32 for f32 bit patterns);
  sample: the first min(n, SAMPLE_MAX) outputs, each as fixed-width hex (2/4/8 digits).
Run: python3 tests/gen/gen_formats.py   (deterministic; rewrites the file)
"""
import os
import sys

import numpy as np
import ml_dtypes as md

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ts_prng  # noqa: E402

RAND_SEED = 0x5EED0001
RAND_N = 1 << 20
PACK_SEED = 0x5EED0002
PACK_N = 1 << 16  # e5m6 values packed (multiple of 8)
SAMPLE_MAX = 4096

# NaN and edge patterns appended to every boundary list.
SPECIALS = np.array([
    0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001,
    0xFF800001, 0x7FBFFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FC10000, 0xFFC1FFFF, 0x7FA00000,
    0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00800000, 0x00400000, 0x7F7FFFFF,
    0xFF7FFFFF, 0x3F800000, 0xBF800000,
], dtype=np.uint32)

U32 = np.uint32


def f32(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def bits(x):
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def isnan_bits(u):
    return (u & U32(0x7FFFFFFF)) > U32(0x7F800000)


# ---------------- encoders ----------------
def enc_bf16(x):
    return x.astype(md.bfloat16).view(np.uint16)  # NaN -> 0x7FC0 | sign


def enc_f16(x):
    with np.errstate(over="ignore", invalid="ignore"):
        h = x.astype(np.float16).view(np.uint16).copy()
    u = bits(x)
    nan = isnan_bits(u)
    h[nan] = (((u[nan] >> 16) & 0x8000) | 0x7E00 | ((u[nan] >> 13) & 0x3FF)).astype(np.uint16)
    return h


def _enc_md(x, t, sat=None):
    if sat is not None:
        x = np.where(np.isnan(x), x, np.clip(x, -sat, sat)).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(t).view(np.uint8)


def enc_e4m3(x): return _enc_md(x, md.float8_e4m3fn)
def enc_e4m3_sat(x): return _enc_md(x, md.float8_e4m3fn, 448.0)
def enc_e5m2(x): return _enc_md(x, md.float8_e5m2)
def enc_e5m2_sat(x): return _enc_md(x, md.float8_e5m2, 57344.0)


def enc_e2m1(x):
    c = _enc_md(x, md.float4_e2m1fn).copy() & 0xF
    c[np.isnan(x)] = 0x7
    return c


def enc_e2m1_dg(x):
    ax = np.minimum(np.abs(x), np.float32(6.0))  # NaN stays NaN
    mids = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], dtype=np.float32)
    idx = np.searchsorted(mids, ax, side="left").astype(np.uint8)  # NaN sorts last -> 7
    sign = (x < 0) & (idx != 0)
    return idx | (sign.astype(np.uint8) << 3)


def f16_rz_bits(u):
    """CUDA __float2half_rz on f32 bit patterns, written from the PTX/CUDA semantics."""
    u = u.astype(np.int64)
    a = u & 0x7FFFFFFF
    s = (u >> 16) & 0x8000
    e = a >> 23
    m = a & 0x7FFFFF
    out = s.copy()
    normal = (e >= 113) & (e <= 142)
    out = np.where(normal, s | ((e - 112) << 10) | (m >> 13), out)
    sub = (e >= 103) & (e <= 112)
    sh = np.clip(126 - e, 0, 31)
    out = np.where(sub, s | ((0x800000 | m) >> sh), out)
    out = np.where((e > 142) & (a < 0x7F800000), s | 0x7BFF, out)  # finite overflow: max
    out = np.where(a == 0x7F800000, s | 0x7C00, out)
    out = np.where(a > 0x7F800000, 0x7FFF, out)  # canonical NaN, sign dropped
    return out


def enc_e5m6(x):
    u = bits(x).astype(np.int64)
    v = f16_rz_bits(u) >> 4
    v = v + (((v & 1) + (u & 0x1FFFF)) > 0x10000)
    return (v & 0xFFF).astype(np.uint16)


ENCODERS = {
    "bf16": enc_bf16, "f16": enc_f16, "e4m3": enc_e4m3, "e4m3_sat": enc_e4m3_sat,
    "e5m2": enc_e5m2, "e5m2_sat": enc_e5m2_sat, "e2m1": enc_e2m1, "e2m1_dg": enc_e2m1_dg,
    "e5m6": enc_e5m6,
}


# ---------------- decoders ----------------
def dec_md(codes, t):
    return codes.view(t).astype(np.float32).view(np.uint32)


def dec_e2m1(codes):
    return dec_md(codes.astype(np.uint8), md.float4_e2m1fn)


def dec_f16(codes):
    return codes.view(np.float16).astype(np.float32).view(np.uint32)  # exact widening


def dec_e5m6(codes):
    return dec_f16((codes.astype(np.uint16) << 4).astype(np.uint16))


DECODERS = {  # name: (source codes, decoder)
    "e4m3": (np.arange(256, dtype=np.uint8), lambda c: dec_md(c, md.float8_e4m3fn)),
    "e5m2": (np.arange(256, dtype=np.uint8), lambda c: dec_md(c, md.float8_e5m2)),
    "e2m1": (np.arange(16, dtype=np.uint8), dec_e2m1),
    "ue8m0": (np.arange(256, dtype=np.uint8), lambda c: dec_md(c, md.float8_e8m0fnu)),
    "bf16": (np.arange(65536, dtype=np.uint32).astype(np.uint16),
             lambda c: dec_md(c, md.bfloat16)),
    "f16": (np.arange(65536, dtype=np.uint32).astype(np.uint16), dec_f16),
    "e5m6": (np.arange(4096, dtype=np.uint16), dec_e5m6),
}

# Positive finite codes of each target format, ascending, for the boundary sweep.
def finite_codes(fmt):
    if fmt in ("e4m3", "e4m3_sat"):
        return np.arange(0, 0x7F, dtype=np.uint32), DECODERS["e4m3"][1]
    if fmt in ("e5m2", "e5m2_sat"):
        return np.arange(0, 0x7C, dtype=np.uint32), DECODERS["e5m2"][1]
    if fmt in ("e2m1", "e2m1_dg"):
        return np.arange(0, 8, dtype=np.uint32), DECODERS["e2m1"][1]
    if fmt == "bf16":
        return np.arange(0, 0x7F80, dtype=np.uint32), DECODERS["bf16"][1]
    if fmt == "f16":
        return np.arange(0, 0x7C00, dtype=np.uint32), dec_f16
    if fmt == "e5m6":
        return np.arange(0, 0x7C0, dtype=np.uint32), dec_e5m6
    raise KeyError(fmt)


def boundary_inputs(fmt):
    """For every pair of adjacent positive finite codes (plus a virtual code one step past
    the largest) the midpoint m (exact in f32 for these formats) and nextafter(m, 0),
    nextafter(m, inf); each followed by its negation; then SPECIALS. Same order in C."""
    codes, dec = finite_codes(fmt)
    width = {"e4m3": 8, "e5m2": 8, "e2m1": 8, "bf16": 16, "f16": 16, "e5m6": 16}
    w = 8 if fmt.startswith(("e4m3", "e5m2", "e2m1")) else 16
    del width
    vals = f32(dec(codes.astype(np.uint8 if w == 8 else np.uint16))).astype(np.float64)
    nxt = np.append(vals[1:], vals[-1] + (vals[-1] - vals[-2]))
    mid = ((vals + nxt) / 2).astype(np.float32)
    assert np.all(mid.astype(np.float64) == (vals + nxt) / 2), fmt
    lo = np.nextafter(mid, np.float32(0))
    hi = np.nextafter(mid, np.float32(np.inf))
    trip = np.stack([mid, lo, hi], axis=1).reshape(-1)
    both = np.stack([trip, -trip], axis=1).reshape(-1)
    return np.concatenate([both.astype(np.float32), f32(SPECIALS)])


def fnv(arr):
    return ts_prng.fnv1a64(np.ascontiguousarray(arr).tobytes())


def line(case, op, out):
    out = np.ascontiguousarray(out)
    digits = out.dtype.itemsize * 2
    sample = "".join(format(int(v), "0%dx" % digits) for v in out[:SAMPLE_MAX])
    return "%s %s %d %016x %s" % (case, op, out.size, fnv(out), sample)


def main():
    lines = ["# generated by tests/gen/gen_formats.py; see its docstring for the format",
             "# rand: seed 0x%x n %d; e5m6_pack8: u32(0x%x, n) & 0xfff" % (RAND_SEED, RAND_N,
                                                                        PACK_SEED)]
    for name, (codes, dec) in DECODERS.items():
        lines.append(line("all", "dec_" + name, dec(codes)))
    bf16all = f32(np.arange(65536, dtype=np.uint32) << 16)
    rand = ts_prng.bits_f32(RAND_SEED, RAND_N)
    for name, enc in ENCODERS.items():
        lines.append(line("bf16all", "enc_" + name, enc(bf16all)))
        lines.append(line("rand", "enc_" + name, enc(rand)))
        lines.append(line("bound", "enc_" + name, enc(boundary_inputs(name))))
    v = (ts_prng.u32(PACK_SEED, PACK_N) & 0xFFF).astype(np.int64).reshape(-1, 8)
    w0 = (v[:, 0] << 20) | (v[:, 1] << 8) | (v[:, 2] >> 4)
    w1 = (v[:, 2] << 28) | (v[:, 3] << 16) | (v[:, 4] << 4) | (v[:, 5] >> 8)
    w2 = (v[:, 5] << 24) | (v[:, 6] << 12) | v[:, 7]
    words = (np.stack([w0, w1, w2], axis=1) & 0xFFFFFFFF).astype(np.uint32).reshape(-1)
    lines.append(line("all", "e5m6_pack8", words))
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden", "formats.txt")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", os.path.normpath(path), os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
