#!/usr/bin/env python3
"""Golden vectors for the third batch of TileKernels quantisation kernels in the tile language
(src/kernels/quant_more.tile): per_token_cast_with_sf_only, per_token_cast_with_precomputed_sf
and per_channel_cast_fused.

Reference: numpy re-implementations of the upstream kernels' arithmetic (deepseek-ai/TileKernels
tile_kernels/quant/per_token_cast_kernel.py sf_only / cast_only paths, per_channel_cast_fused_
kernel.py, quant/common.py get_sf_and_inv), one f32 IEEE operation at a time in the order
docs/kernels.md fixes; FP4 / FP8 magnitudes rounded by ml_dtypes (gen_tk_quant2's codecs).
Record format: tests/gen/gen_tilekernels.py (Writer). Plain random inputs come from ts_prng
(the C test regenerates them, params say how); everything else is stored in the file.
Run: python3 tests/gen/gen_tk_quant3.py [outdir]  (writes tk_quant3.bin)"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ts_prng  # noqa: E402
import gen_tk_quant2 as q2  # noqa: E402  (sets gen_tilekernels.KEEP = 2048)
from gen_tilekernels import Writer, bits_f32, f32_bits, from_bf16_bits, to_bf16_bits  # noqa: E402

F32 = np.float32
U32 = np.uint32
IN_BF16, IN_F32, IN_E4M3 = 0, 1, 2
OUT_FP4, OUT_E4M3 = q2.OUT_FP4, q2.OUT_E4M3
cdiv = q2.cdiv


def plain_input(in_kind, seed, T, H, special):
    """(decoded f32 values, raw stored form or None when the C test regenerates it).
    special 0: ts_prng uniform * 4; 1: q2.special_f32 (zeros, inf, NaN, subnormals, 3e38);
    2: only zeros and subnormals (every group clamps to CMIN)."""
    if special == 1:
        xv = q2.special_f32(seed, (T, H), 4.0)
    elif special == 2:
        r = ts_prng.u32(seed, T * H)
        xv = np.where(r % 3 == 0, F32(0), bits_f32((r >> U32(9)) | ((r & U32(1)) << U32(31)))).astype(F32)
        xv = xv.reshape(T, H)
    else:
        xv = (ts_prng.uniform(seed, T * H) * F32(4.0)).astype(F32).reshape(T, H)
    if in_kind == IN_BF16:
        xb = to_bf16_bits(xv)
        return from_bf16_bits(xb), (xb if special else None)
    return xv, (xv if special else None)


def quantise(p, out_kind):
    return q2.pack_fp4(q2.fp4_codes(p)) if out_kind == OUT_FP4 else q2.e4m3_codes(p)


# ---------------------------------------------------------------- per_token_cast_with_sf_only

def sf_only_case(w, in_kind, out_kind, packed, T, H, gs, round_sf, seed, special=0, xstride=0):
    """params: in, out, packed, T, H, gs, round_sf, seed, special, xstride (0: contiguous).
    Arrays: [x raw (special)], sf (f32 [T, ng] or packed words)."""
    round_sf = round_sf or packed
    xv, raw = plain_input(in_kind, seed, T, H, special)
    _, sf, e = q2.per_token_cast_ref(xv, np.ones((T, H), F32), gs, out_kind, round_sf)
    arrays = [(0, raw)] if raw is not None else []
    arrays.append((1, q2.pack_ue8m0(e) if packed else sf))
    w.record("sfo", [in_kind, out_kind, packed, T, H, gs, int(round_sf), seed, special, xstride], arrays)


# ---------------------------------------------------------------- per_token_cast_with_precomputed_sf

def pre_case(w, in_kind, out_kind, packed, T, H, gs, seed, sfkind, special=0, xstride=0):
    """params: in, out, packed, T, H, gs, seed, sfkind, special, xstride.
    sfkind 0: the scales per_token_cast computes with round_sf (so the codes are its codes);
    1: random scales (f32: any magnitude, with 0, inf, NaN, subnormals; packed: any byte
    0..255), so products leave the format's range and saturate.
    Arrays: [x raw (special)], sf (input, stored), out."""
    xv, raw = plain_input(in_kind, seed, T, H, special)
    ng = cdiv(H, gs)
    if sfkind == 0:
        _, sf, e = q2.per_token_cast_ref(xv, np.ones((T, H), F32), gs, out_kind, True)
        e = e & U32(255)  # the packed byte (a NaN group's e = 256 stores 0)
    else:
        r = ts_prng.u32(seed + 7, T * ng).reshape(T, ng)
        if packed:
            e = (r & U32(255)).astype(U32)
            e[0, 0] = 0
            if ng > 1:
                e[0, 1] = 255
        else:
            ex = (U32(100) + (r >> U32(8)) % U32(40)).astype(U32)
            sf = bits_f32((ex << U32(23)) | (r & U32(0x7FFFFF))).astype(F32)
            spec = np.array([0.0, np.inf, np.nan, 1e-40, 1e-30, 3e38, -0.5], F32)
            pick = (r >> U32(24)) % 11 == 0
            sf[pick] = spec[(r[pick] >> U32(4)) % len(spec)]
    with np.errstate(all="ignore"):
        sval = bits_f32((e << U32(23)).astype(U32)) if packed else sf
        inv = (F32(1) / sval).astype(F32)
        p = (xv * inv[:, np.arange(H) // gs]).astype(F32)
    sfraw = q2.pack_ue8m0(e) if packed else sf.astype(F32)
    arrays = [(0, raw)] if raw is not None else []
    arrays += [(0, sfraw), (1, quantise(p, out_kind))]
    w.record("pre", [in_kind, out_kind, packed, T, H, gs, seed, sfkind, special, xstride], arrays)


# ---------------------------------------------------------------- per_channel_cast_fused

def pccf_case(w, in_kind, gather, T, H, P, round_sf, seed, special=0, neg_pct=25):
    """params: in, gather, T, H, P (output rows; = T without gather), round_sf, seed, special.
    Arrays: [x raw (stored unless a plain regenerated bf16/f32 input)], [x_sf (e4m3)],
    [pos_to_token i32 (gather)], out e4m3 [P, H], sf f32 [ceil(P / 128), H]."""
    arrays = []
    if in_kind == IN_E4M3:
        codes = (ts_prng.u32(seed, T * H) & U32(0xFF)).astype(np.uint8).reshape(T, H)
        codes[(codes & 0x7F) == 0x7F] = 0x3C  # no NaN codes in a quantised input
        xr = q2.e4m3_decode(codes)
        r = ts_prng.u32(seed + 1, T * cdiv(H, 128)).reshape(T, cdiv(H, 128))
        xsf = bits_f32(((U32(118) + (r >> U32(8)) % U32(14)) << U32(23)) | (r & U32(0x7FFFFF))).astype(F32)
        arrays += [(0, codes), (0, xsf)]
        xv = (xr * xsf[:, np.arange(H) // 128]).astype(F32)
    else:
        xv, raw = plain_input(in_kind, seed, T, H, special)
        if raw is not None:
            arrays.append((0, raw))
    if gather:
        r = ts_prng.u32(seed + 2, P)
        pos = (r % U32(max(T, 1))).astype(np.int32)
        pos[(r >> U32(16)) % U32(100) < U32(neg_pct)] = -1
        if T == 0:
            pos[:] = -1
        arrays.append((0, pos))
        y = np.zeros((P, H), F32)
        ok = pos >= 0
        y[ok] = xv[pos[ok]]
    else:
        P = T
        y = xv
    st = cdiv(P, 128)
    pad = np.zeros((st * 128, H), np.uint32)
    pad[:P] = f32_bits(y) & U32(0x7FFFFFFF)
    mx = np.maximum(pad.reshape(st, 128, H).max(axis=1), q2.E4M3_CMIN)
    sf, inv, _ = q2.sf_and_inv(mx, 448.0, round_sf)
    with np.errstate(all="ignore"):
        p = (y * inv[np.arange(P) // 128, :]).astype(F32)
    arrays += [(1, q2.e4m3_codes(p)), (1, sf.astype(F32))]
    w.record("pccf", [in_kind, int(gather), T, H, P, int(round_sf), seed, special], arrays)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden")
    w = Writer()
    # sf_only (in, out, packed, T, H, gs, round_sf, seed, special, xstride)
    sf_only_case(w, IN_BF16, OUT_E4M3, 0, 7, 512, 128, 0, 3001)
    sf_only_case(w, IN_BF16, OUT_E4M3, 1, 129, 1000, 64, 1, 3002)        # a partial last group
    sf_only_case(w, IN_F32, OUT_E4M3, 0, 1, 16, 16, 1, 3003)
    sf_only_case(w, IN_F32, OUT_FP4, 0, 4001, 128, 32, 1, 3004)
    sf_only_case(w, IN_BF16, OUT_FP4, 1, 9, 2080, 32, 1, 3005)          # three 1024-channel chunks
    sf_only_case(w, IN_F32, OUT_E4M3, 0, 17, 320, 64, 0, 3006, 1)       # inf, NaN, subnormals
    sf_only_case(w, IN_BF16, OUT_FP4, 1, 7, 200, 16, 1, 3007, 1)
    sf_only_case(w, IN_F32, OUT_FP4, 0, 5, 96, 32, 0, 3008, 2)          # zeros / subnormals: CMIN
    sf_only_case(w, IN_BF16, OUT_E4M3, 0, 7, 256, 128, 1, 3009, 0, 300) # row stride 300
    sf_only_case(w, IN_F32, OUT_FP4, 1, 3, 7168, 128, 1, 3010, 0, 7200)
    # precomputed sf (in, out, packed, T, H, gs, seed, sfkind, special, xstride)
    pre_case(w, IN_BF16, OUT_E4M3, 0, 7, 512, 128, 3101, 0)
    pre_case(w, IN_BF16, OUT_E4M3, 1, 129, 1000, 64, 3102, 0)
    pre_case(w, IN_F32, OUT_E4M3, 0, 9, 256, 32, 3103, 1)               # saturation, 0 / inf / NaN scales
    pre_case(w, IN_F32, OUT_E4M3, 1, 9, 320, 64, 3104, 1)               # bytes 0 and 255
    pre_case(w, IN_BF16, OUT_FP4, 0, 4001, 128, 32, 3105, 0)
    pre_case(w, IN_F32, OUT_FP4, 1, 7, 2080, 32, 3106, 0)
    pre_case(w, IN_BF16, OUT_FP4, 0, 17, 200, 16, 3107, 1)
    pre_case(w, IN_F32, OUT_FP4, 1, 5, 96, 16, 3108, 1)
    pre_case(w, IN_F32, OUT_E4M3, 0, 17, 320, 64, 3109, 0, 1)           # special inputs
    pre_case(w, IN_BF16, OUT_FP4, 1, 7, 200, 16, 3110, 0, 1)
    pre_case(w, IN_BF16, OUT_E4M3, 0, 1, 16, 16, 3111, 0, 0, 40)        # one token, row stride
    pre_case(w, IN_F32, OUT_FP4, 0, 7, 256, 128, 3112, 1, 0, 300)
    # per_channel_cast_fused (in, gather, T, H, P, round_sf, seed, special)
    pccf_case(w, IN_BF16, 0, 256, 256, 0, 0, 3201)
    pccf_case(w, IN_BF16, 0, 129, 200, 0, 1, 3202)                      # partial row group, H % 128
    pccf_case(w, IN_F32, 0, 1, 64, 0, 1, 3203)
    pccf_case(w, IN_F32, 0, 4001, 64, 0, 0, 3204)
    pccf_case(w, IN_E4M3, 0, 300, 256, 0, 1, 3205)
    pccf_case(w, IN_E4M3, 0, 7, 200, 0, 0, 3206)
    pccf_case(w, IN_BF16, 0, 130, 130, 0, 0, 3207, 1)                   # inf, NaN, subnormals
    pccf_case(w, IN_F32, 0, 129, 64, 0, 1, 3208, 2)                     # zeros / subnormals: CMIN
    pccf_case(w, IN_BF16, 1, 100, 128, 4001, 1, 3211)
    pccf_case(w, IN_F32, 1, 7, 384, 16, 0, 3212)
    pccf_case(w, IN_E4M3, 1, 50, 256, 272, 0, 3213)
    pccf_case(w, IN_E4M3, 1, 9, 136, 129, 1, 3214)
    pccf_case(w, IN_BF16, 1, 5, 64, 1, 1, 3215)
    pccf_case(w, IN_F32, 1, 3, 64, 256, 1, 3216, 0, 100)                # every row -1: zeros, CMIN
    pccf_case(w, IN_BF16, 1, 9, 130, 200, 0, 3217, 1)
    with open(os.path.join(out, "tk_quant3.bin"), "wb") as f:
        f.write(w.buf)


if __name__ == "__main__":
    main()
