#!/usr/bin/env python3
"""Golden vectors for the second batch of TileKernels quantisation kernels in the tile language
(src/kernels/quant_fp4.tile, quant_lossless.tile, quant_e5m6.tile, transpose.tile).

Reference: numpy re-implementations of the upstream kernels' arithmetic (deepseek-ai/TileKernels
tile_kernels/quant/{per_token_cast,per_block_cast_lossless,per_token_cast_to_e5m6,cast_back,
per_channel_cast_and_transpose}_kernel.py and quant/common.py get_sf_and_inv), one f32 IEEE
operation at a time in the order docs/kernels.md fixes; FP4 / FP8 magnitudes are rounded by
ml_dtypes (an encoder independent of the kernels' compare chains), E5M6 by a transcription of
upstream's float_to_e5m6 bit recipe. Record format: tests/gen/gen_tilekernels.py (Writer).
Inputs: plain random tensors come from ts_prng (the C test regenerates them, params say how);
quantised inputs and inputs with special values are stored in the file.
Run: python3 tests/gen/gen_tk_quant2.py [outdir]  (writes tk_quant2.bin)"""
import os
import sys

import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ts_prng  # noqa: E402
from gen_tilekernels import Writer, bits_f32, f32_bits, from_bf16_bits, to_bf16_bits  # noqa: E402

F32 = np.float32
U32 = np.uint32

IN_BF16, IN_F32, IN_E4M3, IN_FP4 = 0, 1, 2, 3
OUT_FP4, OUT_E4M3 = 0, 1
FP4_CMIN = U32(0x01C00000)   # bits of 6 * 2^-126
E4M3_CMIN = U32(0x38D1B717)  # bits of fl32(1e-4)


def cdiv(a, b):
    return -(-a // b)


# ---------------------------------------------------------------- element codecs

def fp4_codes(p):
    """RNE onto the e2m1 grid, saturating at 6, sign kept, NaN -> 0x7."""
    p = np.asarray(p, F32)
    a = np.minimum(np.abs(p), F32(6))
    mag = np.where(np.isnan(p), F32(0), a).astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 7
    sign = ((f32_bits(p) >> U32(31)).astype(np.uint8)) << 3
    return np.where(np.isnan(p), np.uint8(7), mag | sign).astype(np.uint8)


def fp4_decode(codes):
    c = np.asarray(codes, np.uint32) & U32(15)
    e = (c >> U32(1)) & U32(3)
    m = c & U32(1)
    mag = np.where(e == 0, m * U32(0x3F000000), ((e + U32(126)) << U32(23)) | (m << U32(22)))
    return bits_f32((mag | ((c & U32(8)) << U32(28))).astype(U32))


def pack_fp4(codes):
    c = codes.reshape(codes.shape[0], -1, 2)
    return (c[..., 0] | (c[..., 1] << 4)).astype(np.uint8)


def unpack_fp4(b):
    b = np.asarray(b, np.uint8)
    out = np.empty((b.shape[0], b.shape[1] * 2), np.uint8)
    out[:, 0::2] = b & 15
    out[:, 1::2] = b >> 4
    return out


def e4m3_codes(p):
    """clamp to +-448 by compares (NaN kept), RNE; NaN -> 0x7F."""
    p = np.asarray(p, F32)
    c = np.where(p > F32(448), F32(448), np.where(p < F32(-448), F32(-448), p)).astype(F32)
    q = c.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    return np.where(np.isnan(p), np.uint8(0x7F), q).astype(np.uint8)


def e4m3_decode(q):
    return np.asarray(q, np.uint8).view(ml_dtypes.float8_e4m3fn).astype(F32)


def pack_ue8m0(e):
    """e: u32 [rows, ng] biased exponents (low byte used) -> int32 words [rows, ceil(ng / 4)]."""
    rows, ng = e.shape
    npk = cdiv(ng, 4)
    b = np.zeros((rows, npk * 4), np.uint32)
    b[:, :ng] = e & U32(255)
    b = b.reshape(rows, npk, 4)
    return (b[..., 0] | (b[..., 1] << 8) | (b[..., 2] << 16) | (b[..., 3] << 24)).astype(U32).view(np.int32)


def unpack_ue8m0(words, ng):
    w = np.asarray(words).view(np.uint32)
    b = np.stack([(w >> U32(8 * k)) & U32(255) for k in range(4)], axis=-1).reshape(w.shape[0], -1)
    return b[:, :ng]


# ---------------------------------------------------------------- get_sf_and_inv

def sf_and_inv(amax_bits, qmax, round_sf):
    """amax_bits: u32 (already max'ed with the clamp bits). Returns sf, inv, e (u32)."""
    amax = bits_f32(amax_bits)
    qmax = F32(qmax)
    with np.errstate(all="ignore"):
        sfv = (amax / qmax).astype(F32)
        e = (((f32_bits(sfv) - U32(1)) >> U32(23)) + U32(1)).astype(U32)
        inv_r = bits_f32(((U32(254) - e) << U32(23)).astype(U32))
        inv = inv_r if round_sf else (qmax / amax).astype(F32)
    sf = bits_f32((e << U32(23)).astype(U32)) if round_sf else sfv
    return sf.astype(F32), inv.astype(F32), e


def group_absmax_bits(y, gs, cmin_bits):
    """max over groups of gs channels of bits(|y|) (u32), channels past H count as 0."""
    t, h = y.shape
    ng = cdiv(h, gs)
    ab = np.zeros((t, ng * gs), np.uint32)
    ab[:, :h] = f32_bits(y) & U32(0x7FFFFFFF)
    return np.maximum(ab.reshape(t, ng, gs).max(axis=-1), cmin_bits).astype(U32)


# ---------------------------------------------------------------- per_token_cast family

def per_token_cast_ref(xv, sin, gs, out_kind, round_sf):
    """xv: decoded input f32 [T, H]; sin: per-element input scale (ones for plain input)."""
    t, h = xv.shape
    with np.errstate(all="ignore"):
        y = (xv * sin).astype(F32)
    qmax, cmin = (6.0, FP4_CMIN) if out_kind == OUT_FP4 else (448.0, E4M3_CMIN)
    mx = group_absmax_bits(y, gs, cmin)
    sf, inv, e = sf_and_inv(mx, qmax, round_sf)
    ge = np.arange(h) // gs
    with np.errstate(all="ignore"):
        fac = (sin * inv[:, ge]).astype(F32)
        p = (xv * fac).astype(F32)
    q = pack_fp4(fp4_codes(p)) if out_kind == OUT_FP4 else e4m3_codes(p)
    return q, sf, e


def special_f32(seed, shape, scale):
    """Random values with zeros, -0, +-inf, NaN, subnormals and huge values sprinkled in."""
    n = int(np.prod(shape))
    v = (ts_prng.uniform(seed, n) * F32(scale)).astype(F32)
    r = ts_prng.u32(seed + 99, n)
    spec = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -3e-39, 3e38, -1e30, 0.25, 0.75, 5.0], F32)
    pick = r % 23 == 0
    v[pick] = spec[(r[pick] >> 8) % len(spec)]
    return v.reshape(shape)


def ptc_case(w, in_kind, out_kind, packed, T, H, gs, round_sf, bh, bw, seed, special=0):
    """params: in, out, packed, T, H, gs, round_sf, bh, bw, seed, stored, special.
    Plain inputs without specials are regenerated by the C test: bf16 (seed, scale 4) or f32
    (seed, scale 4); everything else is stored as array 0 (x, raw) and 1 (x_sf, row-major)."""
    round_sf = round_sf or packed
    arrays = []
    stored = special or in_kind in (IN_E4M3, IN_FP4)
    if in_kind in (IN_BF16, IN_F32):
        if special:
            xv = special_f32(seed, (T, H), 4.0)
        else:
            xv = (ts_prng.uniform(seed, T * H) * F32(4.0)).astype(F32).reshape(T, H)
        if in_kind == IN_BF16:
            xb = to_bf16_bits(xv)
            xv = from_bf16_bits(xb)
            xraw = xb
        else:
            xraw = xv
        sin = np.ones((T, H), F32)
        if stored:
            arrays.append((0, xraw))
    else:
        # a quantised input: codes and power-of-two (or plain f32) scales per (bh, bw) block
        sm, sn = cdiv(T, bh), cdiv(H, bw)
        if in_kind == IN_E4M3:
            codes = (ts_prng.u32(seed, T * H) & U32(0xFF)).astype(np.uint8).reshape(T, H)
            codes[(codes & 0x7F) == 0x7F] = 0x3C  # no NaN codes in a quantised input
            xv = e4m3_decode(codes)
            xraw = codes
        else:
            codes = (ts_prng.u32(seed, T * H) & U32(15)).astype(np.uint8).reshape(T, H)
            xv = fp4_decode(codes)
            xraw = pack_fp4(codes)
        ex = (U32(120) + ts_prng.u32(seed + 1, sm * sn) % U32(12)).astype(U32).reshape(sm, sn)
        if packed:
            xsf_blk = bits_f32(ex << U32(23))
            sfraw = pack_ue8m0(ex)
        else:
            # f32 scales, not all powers of two when round_sf is off
            mant = (ts_prng.u32(seed + 2, sm * sn) & U32(0x7FFFFF)).reshape(sm, sn) if not round_sf else U32(0)
            xsf_blk = bits_f32((ex << U32(23)) | mant)
            sfraw = xsf_blk
        sin = xsf_blk[np.arange(T)[:, None] // bh, np.arange(H)[None, :] // bw].astype(F32)
        arrays.append((0, xraw))
        arrays.append((0, sfraw))
    q, sf, e = per_token_cast_ref(xv, sin, gs, out_kind, round_sf)
    sfo = pack_ue8m0(e) if packed else sf
    arrays.append((1, q))
    arrays.append((1, sfo))
    w.record("ptc", [in_kind, out_kind, packed, T, H, gs, int(round_sf), bh, bw, seed, int(stored), special], arrays)


def cast_back_fp4_case(w, T, H, bh, bw, packed, out_f32, seed):
    """FP4 codes + scales -> bf16 / f32: out = decode(q) * sf (one multiply, RNE to bf16)."""
    sm, sn = cdiv(T, bh), cdiv(H, bw)
    codes = (ts_prng.u32(seed, T * H) & U32(15)).astype(np.uint8).reshape(T, H)
    ex = (U32(110) + ts_prng.u32(seed + 1, sm * sn) % U32(30)).astype(U32).reshape(sm, sn)
    if packed:
        sf = bits_f32(ex << U32(23))
        sfraw = pack_ue8m0(ex)
    else:
        sf = bits_f32((ex << U32(23)) | (ts_prng.u32(seed + 2, sm * sn) & U32(0x7FFFFF)).reshape(sm, sn))
        sfraw = sf
    s = sf[np.arange(T)[:, None] // bh, np.arange(H)[None, :] // bw]
    y = (fp4_decode(codes) * s).astype(F32)
    out = y if out_f32 else to_bf16_bits(y)
    w.record("cbfp4", [T, H, bh, bw, packed, out_f32, seed], [(0, pack_fp4(codes)), (0, sfraw), (1, out)])


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden")
    w = Writer()
    # per_token_cast from bf16 / f32 (in, out, packed, T, H, gs, round_sf, bh, bw, seed, special)
    ptc_case(w, IN_BF16, OUT_FP4, 0, 7, 256, 32, 0, 1, 1, 1001)
    ptc_case(w, IN_BF16, OUT_FP4, 1, 7, 256, 32, 1, 1, 1, 1002)
    ptc_case(w, IN_F32, OUT_FP4, 0, 9, 200, 16, 1, 1, 1, 1003)      # H not a multiple of 128
    ptc_case(w, IN_F32, OUT_FP4, 1, 1, 6, 16, 1, 1, 1, 1004)        # one token, H < one group
    ptc_case(w, IN_BF16, OUT_FP4, 0, 4001, 128, 128, 1, 1, 1, 1005)
    ptc_case(w, IN_BF16, OUT_FP4, 0, 5, 576, 576, 0, 1, 1, 1006)    # whole-row group
    ptc_case(w, IN_F32, OUT_FP4, 0, 33, 320, 64, 0, 1, 1, 1007, 1)  # specials
    ptc_case(w, IN_F32, OUT_FP4, 0, 33, 320, 64, 1, 1, 1, 1008, 1)
    ptc_case(w, IN_F32, OUT_FP4, 1, 33, 336, 32, 1, 1, 1, 1009, 1)
    ptc_case(w, IN_BF16, OUT_E4M3, 0, 7, 512, 128, 0, 1, 1, 1011)
    ptc_case(w, IN_BF16, OUT_E4M3, 1, 17, 1000, 64, 1, 1, 1, 1012)  # 16 groups, a partial last one
    ptc_case(w, IN_F32, OUT_E4M3, 0, 4001, 96, 32, 1, 1, 1, 1013)
    ptc_case(w, IN_F32, OUT_E4M3, 1, 3, 7168, 7168, 1, 1, 1, 1014)
    ptc_case(w, IN_F32, OUT_E4M3, 0, 33, 256, 128, 0, 1, 1, 1015, 1)
    ptc_case(w, IN_BF16, OUT_E4M3, 1, 33, 200, 32, 1, 1, 1, 1016, 1)
    # re-quantising FP8 / FP4 input (blocks bh x bw)
    ptc_case(w, IN_E4M3, OUT_FP4, 0, 130, 256, 32, 1, 128, 128, 1021)
    ptc_case(w, IN_E4M3, OUT_FP4, 1, 33, 256, 32, 1, 32, 32, 1022)
    ptc_case(w, IN_E4M3, OUT_E4M3, 0, 130, 384, 128, 0, 128, 128, 1023)
    ptc_case(w, IN_E4M3, OUT_E4M3, 0, 65, 160, 32, 1, 32, 32, 1024)
    ptc_case(w, IN_E4M3, OUT_E4M3, 1, 1, 256, 128, 1, 128, 128, 1025)
    ptc_case(w, IN_FP4, OUT_FP4, 0, 9, 256, 32, 1, 1, 32, 1031)
    ptc_case(w, IN_FP4, OUT_FP4, 1, 17, 512, 128, 1, 1, 32, 1032)
    ptc_case(w, IN_FP4, OUT_E4M3, 0, 17, 320, 128, 0, 1, 32, 1033)
    ptc_case(w, IN_FP4, OUT_E4M3, 1, 33, 256, 32, 1, 32, 32, 1034)
    # FP4 cast back (T, H, bh, bw, packed, f32 out, seed)
    cast_back_fp4_case(w, 9, 256, 1, 32, 0, 0, 1101)
    cast_back_fp4_case(w, 33, 320, 1, 16, 1, 1, 1102)
    cast_back_fp4_case(w, 130, 128, 128, 128, 0, 1, 1103)
    cast_back_fp4_case(w, 4001, 64, 1, 32, 1, 0, 1104)
    with open(os.path.join(out, "tk_quant2.bin"), "wb") as f:
        f.write(w.buf)


if __name__ == "__main__":
    main()
