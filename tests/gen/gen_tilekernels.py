#!/usr/bin/env python3
"""Golden vectors for the TileKernels kernels written in the tile language (src/kernels/*.tile).

Reference: numpy re-implementations of TileKernels' torch references (tile_kernels/torch/
swiglu.py, cast.py, mhc.py; the rmsnorm test's rmsnorm_ref; the moe kernels' documented
semantics), evaluated in float32 one IEEE operation at a time in the order docs/kernels.md fixes
for each kernel, with the tile language's own exp / log / sigmoid / softplus algorithms
(src/tile/tile_rt.h, transcribed below) and an exactly rounded f32 fma (round-to-odd in
float64). Inputs that are plain random tensors come from ts_prng (the C test regenerates them);
index/mapping inputs are stored in the file.

Files: tests/golden/tk_<family>.bin, a sequence of records:
  u8 name length, name (ascii), u32 nparams, i64 params[nparams], u32 narrays,
  per array: u8 kind (0 input, 1 output), u64 nbytes, u64 checksum, u64 nstored, bytes[nstored]
checksum(b) = sum_i (b_i + 1) * mix(i) mod 2^64 with mix(i) = (i * 0x9E3779B97F4A7C15) ^ (i >> 7) | 1
(cheap in numpy and C). Outputs above 16 KiB keep only their first 16 KiB (for messages).
Run: python3 tests/gen/gen_tilekernels.py [outdir]"""
import os
import struct
import sys

import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ts_prng  # noqa: E402

F32 = np.float32
U32 = np.uint32
KEEP = 16384


# ---------------------------------------------------------------- f32 arithmetic helpers

def f32(x):
    return np.asarray(x, dtype=F32)


def fma32(a, b, c):
    """fmaf(a, b, c) exactly rounded: a*b is exact in f64; the f64 sum is made round-to-odd
    (exact value's truncation with a sticky last bit), whose rounding to f32 is then correct."""
    a = np.asarray(a, F32).astype(np.float64)
    b = np.asarray(b, F32).astype(np.float64)
    c = np.asarray(c, F32).astype(np.float64)
    p = a * b
    s = p + c
    bb = s - p
    err = (p - (s - bb)) + (c - bb)
    bits = s.view(np.int64)
    fix = (err != 0) & ((bits & 1) == 0) & np.isfinite(s)
    s2 = np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return s2.astype(F32)


def bits_f32(u):
    return np.asarray(u, dtype=U32).view(F32)


def f32_bits(x):
    return np.asarray(x, dtype=F32).view(U32)


def ldexp32(p, n):
    n = n.astype(np.int64)
    h = np.trunc(n / 2).astype(np.int64)
    s1 = bits_f32(((h + 127) << 23).astype(U32))
    s2 = bits_f32(((n - h + 127) << 23).astype(U32))
    return (p * s1) * s2


def exp32(x):
    x = f32(x)
    with np.errstate(all="ignore"):
        xs = np.where(np.isfinite(x) & (x <= F32(89)) & (x >= F32(-104)), x, F32(0))
        n = np.rint(xs * F32(1.44269502))
        r = fma32(-n, F32(0.693145751953125), xs)
        r = fma32(-n, F32(1.42860677e-06), r)
        p = F32(1.98412701e-04) * np.ones_like(xs)
        for c in (1.38888892e-03, 8.33333377e-03, 4.16666679e-02, 1.66666672e-01, 0.5, 1.0, 1.0):
            p = fma32(p, r, F32(c))
        y = ldexp32(p, n)
    y = np.where(x > F32(89), F32(np.inf), y)
    y = np.where(x < F32(-104), F32(0), y)
    y = np.where(np.isnan(x), x + x, y)
    return y.astype(F32)


def sigmoid32(x):
    x = f32(x)
    with np.errstate(all="ignore"):
        pos = F32(1) / (F32(1) + exp32(-x))
        e = exp32(x)
        neg = e / (F32(1) + e)
    return np.where(x >= F32(0), pos, neg).astype(F32)


def log_core32(x):
    u = f32_bits(x)
    sub = u < U32(0x00800000)
    x2 = np.where(sub, x * F32(8388608.0), x)
    u = f32_bits(x2)
    e = np.where(sub, -23, 0).astype(np.int64) + (u >> U32(23)).astype(np.int64) - 127
    m = bits_f32((u & U32(0x007FFFFF)) | U32(0x3F800000))
    big = m > F32(1.41421354)
    m = np.where(big, m * F32(0.5), m)
    e = e + big
    f = m - F32(1)
    s = f / (F32(2) + f)
    t = s * s
    p = F32(0.111111112) * np.ones_like(t)
    for c in (0.142857149, 0.2, 0.333333343):
        p = fma32(p, t, F32(c))
    p = p * t
    return fma32(F32(2) * s, p, F32(2) * s), e.astype(F32)


def log32(x):
    x = f32(x)
    with np.errstate(all="ignore"):
        xs = np.where((x > 0) & np.isfinite(x), x, F32(1))
        lm, e = log_core32(xs)
        y = fma32(e, F32(0.693145751953125), fma32(e, F32(1.42860677e-06), lm))
    y = np.where(x == F32(np.inf), x, y)
    y = np.where(x == 0, F32(-np.inf), y)
    y = np.where(x < 0, F32(np.nan), y)
    y = np.where(np.isnan(x), x + x, y)
    return y.astype(F32)


def log1p32(y):
    y = f32(y)
    with np.errstate(all="ignore"):
        u = F32(1) + y
        r = log32(u) * (y / (u - F32(1)))
    r = np.where(u == F32(np.inf), u, r)
    r = np.where(u == F32(1), y, r)
    return r.astype(F32)


def softplus32(x):
    x = f32(x)
    with np.errstate(all="ignore"):
        r = log1p32(exp32(x))
    return np.where(x > F32(20), x, r).astype(F32)


def lanes8_sum(v):
    """The language's reduce<sum> order along the last axis (v: [..., n])."""
    n = v.shape[-1]
    a = [np.full(v.shape[:-1], F32(-0.0), F32) for _ in range(8)]
    for k in range(n):
        a[k % 8] = (a[k % 8] + v[..., k]).astype(F32)
    return (((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))).astype(F32)


def to_bf16_bits(x):
    return f32(x).astype(ml_dtypes.bfloat16).view(np.uint16)


def from_bf16_bits(b):
    return np.asarray(b, np.uint16).view(ml_dtypes.bfloat16).astype(F32)


def to_e4m3(x):
    return f32(x).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def bf16_input(seed, shape, scale):
    u = ts_prng.uniform(seed, int(np.prod(shape))) * F32(scale)
    return to_bf16_bits(u).reshape(shape)


def f32_input(seed, shape, scale):
    return (ts_prng.uniform(seed, int(np.prod(shape))) * F32(scale)).astype(F32).reshape(shape)


# ---------------------------------------------------------------- record writer

def checksum(b: bytes) -> int:
    a = np.frombuffer(b, dtype=np.uint8).astype(np.uint64)
    i = np.arange(a.size, dtype=np.uint64)
    with np.errstate(over="ignore"):
        mix = ((i * np.uint64(0x9E3779B97F4A7C15)) ^ (i >> np.uint64(7))) | np.uint64(1)
        return int(np.sum((a + np.uint64(1)) * mix, dtype=np.uint64))


class Writer:
    def __init__(self):
        self.buf = bytearray()

    def record(self, name, params, arrays):
        self.buf += struct.pack("<B", len(name)) + name.encode()
        self.buf += struct.pack("<I", len(params)) + struct.pack("<%dq" % len(params), *params)
        self.buf += struct.pack("<I", len(arrays))
        for kind, arr in arrays:
            b = np.ascontiguousarray(arr).tobytes()
            keep = len(b) if kind == 0 else min(len(b), KEEP)
            self.buf += struct.pack("<BQQQ", kind, len(b), checksum(b), keep) + b[:keep]


def quant_rows(y, gs, round_sf):
    """TileKernels' per-token cast of y [P, H] with groups of gs: codes, f32 scales."""
    p, h = y.shape
    yg = y.reshape(p, h // gs, gs)
    amax = np.max(np.abs(yg), axis=-1)
    amax = np.maximum(amax, F32(1e-4)).astype(F32)
    sfv = (amax / F32(448)).astype(F32)
    sfr = bits_f32((f32_bits(sfv) + U32(0x7FFFFF)) & U32(0x7F800000))
    sf = sfr if round_sf else sfv
    inv = (F32(1) / sfr) if round_sf else (F32(448) / amax)
    q = np.clip((yg * inv[..., None]).astype(F32), F32(-448), F32(448))
    return to_e4m3(q).reshape(p, h), sf.astype(F32)


def pack_ue8m0(sf):
    p, ng = sf.shape
    npk = -(-ng // 4)
    e = np.zeros((p, npk * 4), np.uint32)
    e[:, :ng] = f32_bits(sf) >> U32(23)
    e = e.reshape(p, npk, 4)
    return (e[..., 0] | (e[..., 1] << 8) | (e[..., 2] << 16) | (e[..., 3] << 24)).astype(U32)


# ---------------------------------------------------------------- quant family

def swiglu_case(w, P, H, gs, use_clamp, clamp_milli, count, mask, weights, round_sf, packed, seed):
    x = from_bf16_bits(bf16_input(seed, (P, 2 * H), 12.0))
    nw = 2 * P + 1
    pe = np.where(ts_prng.u32(seed + 1, P) % 5 == 0, -1, ts_prng.u32(seed + 1, P) % 7).astype(np.int32)
    ptt = (ts_prng.u32(seed + 2, P) % nw).astype(np.int32)
    ptt = np.where((pe < 0) | (ts_prng.u32(seed + 3, P) % 9 == 0), -1, ptt).astype(np.int32)
    tw = f32_input(seed + 4, (nw,), 2.0)
    c = F32(clamp_milli / 1000.0)
    a, b = x[:, :H], x[:, H:]
    ac = np.minimum(a, c) if use_clamp else a
    bc = np.clip(b, -c, c).astype(F32) if use_clamp else b
    y = (ac / (F32(1) + exp32(-ac))).astype(F32)
    y = (y * bc).astype(F32)
    keep = np.ones(P, bool)
    wv = np.ones(P, F32)
    if mask:
        keep &= pe >= 0
    if weights:
        keep &= ptt >= 0
        wv = np.where(ptt >= 0, tw[np.maximum(ptt, 0)], F32(1)).astype(F32)
    y = (y * wv[:, None]).astype(F32)
    y = np.where(keep[:, None], y, F32(0)).astype(F32)
    q, sf = quant_rows(y, gs, round_sf or packed)
    cnt = np.array([np.sum(a > c), np.sum(b > c), np.sum(b < -c)], np.int64) if count else np.zeros(3, np.int64)
    sfo = pack_ue8m0(sf) if packed else sf
    w.record("swiglu", [P, H, gs, use_clamp, clamp_milli, count, mask, weights, round_sf, packed, seed],
             [(0, pe), (0, ptt), (1, q), (1, sfo), (1, cnt)])


def rmsnorm_case(w, T, H, gs, round_sf, packed, seed):
    x = from_bf16_bits(bf16_input(seed, (T, H), 3.0))
    wt = from_bf16_bits(bf16_input(seed + 1, (H,), 2.0))
    eps = F32(1e-6)
    sq = (x * x).astype(F32)
    ss = np.zeros(T, F32)
    for c in range(H // 128):
        ss = (ss + lanes8_sum(sq[:, c * 128:(c + 1) * 128])).astype(F32)
    rstd = (F32(1) / np.sqrt((ss / F32(H) + eps).astype(F32))).astype(F32)
    y = ((x * rstd[:, None]).astype(F32) * wt[None, :]).astype(F32)
    q, sf = quant_rows(y, gs, round_sf or packed)
    sfo = pack_ue8m0(sf) if packed else sf
    w.record("rmsnorm", [T, H, gs, round_sf, packed, seed], [(1, q), (1, sfo)])


# ---------------------------------------------------------------- mHC family (hc = 4)

def mhc_inputs(T, H, seed):
    R = from_bf16_bits(bf16_input(seed, (T, 4, H), 2.0))
    fn = f32_input(seed + 1, (24, 4 * H), 0.05)
    scale = f32_input(seed + 2, (3,), 1.0)
    base = f32_input(seed + 3, (24,), 1.0)
    y = from_bf16_bits(bf16_input(seed + 4, (T, H), 2.0))
    return R, fn, scale, base, y


def prenorm_ref(R, fn, eps):
    T, _, H = R.shape
    K = 4 * H
    a = R.reshape(T, K)
    u = f32_bits(fn) & U32(0xFFFFE000)
    hi = bits_f32(u & U32(0xFFFF0000))
    lo = (bits_f32(u) - hi).astype(F32)
    ph = np.zeros((T, 24), F32)
    pl = np.zeros((T, 24), F32)
    for k in range(K):
        ph = fma32(a[:, k:k + 1], hi[None, :, k], ph)
        pl = fma32(a[:, k:k + 1], lo[None, :, k], pl)
    sl = [np.zeros(T, F32) for _ in range(8)]
    sq = (a * a).astype(F32)
    for k in range(K):
        sl[k % 8] = (sl[k % 8] + sq[:, k]).astype(F32)
    ss = (((sl[0] + sl[1]) + (sl[2] + sl[3])) + ((sl[4] + sl[5]) + (sl[6] + sl[7]))).astype(F32)
    r = (F32(1) / np.sqrt((ss / F32(K) + eps).astype(F32))).astype(F32)
    return ((ph + pl).astype(F32) * r[:, None]).astype(F32)


def split_ref(mix, scale, base, post_mult, pre_eps):
    vp = (mix[:, 0:4] * scale[0] + base[0:4]).astype(F32)
    pre = (sigmoid32(vp) + pre_eps).astype(F32)
    vq = (mix[:, 4:8] * scale[1] + base[4:8]).astype(F32)
    post = (sigmoid32(vq) * post_mult).astype(F32)
    comb = (mix[:, 8:24] * scale[2] + base[8:24]).astype(F32)
    return pre, post, comb


def sinkhorn_ref(x, repeat, eps):
    X = x.reshape(-1, 4, 4).astype(F32).copy()

    def rowsum(X):
        return (((X[:, :, 0] + X[:, :, 1]) + X[:, :, 2]) + X[:, :, 3]).astype(F32)

    def colsum(X):
        return (((X[:, 0, :] + X[:, 1, :]) + X[:, 2, :]) + X[:, 3, :]).astype(F32)

    m = np.maximum(np.maximum(X[:, :, 0], X[:, :, 1]), np.maximum(X[:, :, 2], X[:, :, 3]))
    X = exp32((X - m[:, :, None]).astype(F32))
    X = ((X / rowsum(X)[:, :, None]).astype(F32) + eps).astype(F32)
    X = (X / (colsum(X) + eps)[:, None, :]).astype(F32)
    for _ in range(repeat - 1):
        X = (X / (rowsum(X) + eps)[:, :, None]).astype(F32)
        X = (X / (colsum(X) + eps)[:, None, :]).astype(F32)
    return X.reshape(-1, 16)


def apply_ref(R, pre):
    p = pre
    s = ((R[:, 0] * p[:, 0:1] + R[:, 1] * p[:, 1:2]).astype(F32) + (R[:, 2] * p[:, 2:3]).astype(F32)).astype(F32)
    s = (s + (R[:, 3] * p[:, 3:4]).astype(F32)).astype(F32)
    return to_bf16_bits(s)


def post_ref(y, R, post, comb):
    c = comb.reshape(-1, 4, 4)
    out = np.empty(R.shape, np.uint16)
    for i in range(4):
        s = (c[:, 0, i:i + 1] * R[:, 0]).astype(F32) + (c[:, 1, i:i + 1] * R[:, 1]).astype(F32)
        s = (s.astype(F32) + (c[:, 2, i:i + 1] * R[:, 2]).astype(F32)).astype(F32)
        s = (s + (c[:, 3, i:i + 1] * R[:, 3]).astype(F32)).astype(F32)
        out[:, i] = to_bf16_bits((y * post[:, i:i + 1]).astype(F32) + s)
    return out


def mhc_case(w, T, H, repeat, seed):
    R, fn, scale, base, y = mhc_inputs(T, H, seed)
    norm_eps, pre_eps, post_mult, sk_eps = F32(1e-6), F32(1e-6), F32(2.0), F32(1e-6)
    mix = prenorm_ref(R, fn, norm_eps)
    pre, post, comb = split_ref(mix, scale, base, post_mult, pre_eps)
    combn = sinkhorn_ref(comb, repeat, sk_eps)
    layer_in = apply_ref(R, pre)
    out = post_ref(y, R, post, combn)
    head = (sigmoid32((mix[:, 0:4] * scale[0] + base[0:4]).astype(F32)) + pre_eps).astype(F32)
    w.record("mhc", [T, H, repeat, seed],
             [(1, mix), (1, pre), (1, post), (1, comb), (1, combn), (1, layer_in), (1, out), (1, head)])


# ---------------------------------------------------------------- MoE family

def stable_desc(v):
    """Indices of v (1-D) by descending value, ties to the smaller index."""
    return np.lexsort((np.arange(v.size), -v.astype(np.float64)))


def topk_gate_case(w, T, E, K, seed):
    s = f32_input(seed, (T, E), 1.0)
    s = (np.round(s * F32(8)) / F32(8)).astype(F32)   # many ties
    idx = np.stack([stable_desc(s[t])[:K] for t in range(T)]).astype(np.int64)
    w.record("topk_gate", [T, E, K, seed], [(1, idx)])


def top2_sum_gate_case(w, T, E, K, KP, G, KG, scoring, rsf_milli, use_mask, extra, ep_rank, n_ep,
                       tp_rank, n_tp, seed, use_unmapped=0, use_fix=0, use_map=0):
    LE, ND = E + KP - K, 3
    fix = ((ts_prng.u32(seed + 5, T) % 3 == 0) & bool(use_fix)).astype(np.uint8)
    un_in = (ts_prng.u32(seed + 6, T * K) % E).astype(np.int64).reshape(T, K)
    pmap = (ts_prng.u32(seed + 7, LE * ND) % (E + extra)).astype(np.int32).reshape(LE, ND)
    pcnt = (ts_prng.u32(seed + 8, LE) % ND + 1).astype(np.int32)
    un_out = un_in.copy()
    lg = f32_input(seed, (T, E), 4.0)
    bias = f32_input(seed + 1, (E,), 0.5)
    mask = (ts_prng.u32(seed + 2, T) % 6 != 0).astype(np.uint8)
    rsf = F32(rsf_milli / 1000.0)
    if scoring == 0:
        sc = sigmoid32(lg)
    elif scoring == 1:
        sc = np.sqrt(softplus32(lg)).astype(F32)
    elif scoring == 2:
        m = np.max(lg, axis=1, keepdims=True)
        ex = exp32((lg - m).astype(F32))
        pad = np.zeros((T, 512), F32)
        pad[:, :E] = ex
        sc = (ex / lanes8_sum(pad)[:, None]).astype(F32)
    else:
        sc = lg
    sel = ((lg if scoring == 2 else sc) + bias[None, :]).astype(F32)
    idx = np.zeros((T, KP), np.int64)
    wt = np.zeros((T, KP), F32)
    eg = E // G
    per_rank = (E + extra) // n_ep
    per_dp = per_rank * n_tp
    for t in range(T):
        if use_mask and not mask[t]:
            idx[t] = -1
            if use_unmapped:
                un_out[t] = -1
            continue
        s = sel[t].copy()
        if G != KG:
            gsc = np.zeros(G, F32)
            for g in range(G):
                v = np.sort(s[g * eg:(g + 1) * eg])[::-1]
                gsc[g] = F32(v[0]) + F32(v[1])
            kept = stable_desc(gsc)[:KG]
            keepm = np.zeros(E, bool)
            for g in kept:
                keepm[g * eg:(g + 1) * eg] = True
            s = np.where(keepm, s, F32(-np.inf))
        chosen = stable_desc(s)[:K]
        if fix[t]:
            chosen = un_in[t]
        elif use_unmapped:
            un_out[t] = chosen
        den = F32(1e-20)
        for e in chosen:
            den = F32(den + sc[t, e])
        for k in range(KP):
            if k < K:
                e = int(chosen[k])
                wv = F32(F32(sc[t, e] / den) * rsf)
            else:
                e = E + (k - K)
                wv = F32(1)
            if use_map:
                e = int(pmap[e, (ep_rank + t * 23333) % int(pcnt[e])])
            dst = e // per_rank
            if dst % n_tp != tp_rank:
                e = -1
            else:
                l = e - tp_rank * per_rank
                dp = l // per_dp
                e = l - dp * per_dp + dp * per_rank
                e = -1 if e < 0 else e
            idx[t, k] = e
            wt[t, k] = wv
    w.record("top2_sum_gate", [T, E, K, KP, G, KG, scoring, rsf_milli, use_mask, extra, ep_rank, n_ep,
                               tp_rank, n_tp, seed, use_unmapped, use_fix, use_map],
             [(0, mask), (1, idx), (1, wt), (0, fix), (0, un_in), (0, pmap), (0, pcnt), (1, un_out)])


def fused_mapping(topk_idx, E, align):
    T, K = topk_idx.shape
    counts = [int(np.sum(topk_idx == e)) for e in range(E)]
    starts, p = [], 0
    for e in range(E):
        starts.append(p)
        p += -(-counts[e] // align) * align
    P = p
    pos_to_token = np.full(P, -1, np.int32)
    t2p = np.full((T, K), -1, np.int32)
    fill = list(starts)
    for t in range(T):
        for k in range(K):
            e = topk_idx[t, k]
            if e >= 0:
                pos_to_token[fill[e]] = t
                t2p[t, k] = fill[e]
                fill[e] += 1
    return pos_to_token, t2p


def moe_rows_case(w, T, E, K, H, seed):
    ti = (ts_prng.u32(seed, T * K) % E).astype(np.int64).reshape(T, K)
    ti = np.where(ts_prng.u32(seed + 1, T * K).reshape(T, K) % 7 == 0, -1, ti)
    ptok, t2p = fused_mapping(ti, E, 16)
    P = ptok.size
    wts = f32_input(seed + 2, (T, K), 1.0)
    den = np.full(T, F32(1e-20), F32)
    for k in range(K):
        den = (den + wts[:, k]).astype(F32)
    normw = (wts / den[:, None]).astype(F32)
    counts = np.array([np.sum(ti == e) for e in range(E)], np.int32)
    x = bf16_input(seed + 3, (T, H), 4.0)
    expanded = np.where(ptok[:, None] >= 0, x[np.maximum(ptok, 0)], 0).astype(np.uint16)
    xe = from_bf16_bits(bf16_input(seed + 4, (P, H), 4.0))
    acc = np.zeros((T, H), F32)
    for k in range(K):
        pos = t2p[:, k]
        nxt = fma32(xe[np.maximum(pos, 0)], wts[:, k:k + 1], acc)
        acc = np.where(pos[:, None] >= 0, nxt, acc).astype(F32)
    red = to_bf16_bits(acc)
    w.record("moe_rows", [T, E, K, H, P, seed],
             [(0, ti), (0, ptok), (0, t2p), (1, den), (1, normw), (1, counts), (1, expanded), (1, red)])


def group_topk_case(w, T, G, EG, KG, topk_sum, seed):
    sc = (np.round(f32_input(seed, (T, G, EG), 1.0) * F32(4)) / F32(4)).astype(F32)
    out = np.zeros((T, KG), np.int64)
    for t in range(T):
        gsc = np.zeros(G, F32)
        for g in range(G):
            v = np.sort(sc[t, g])[::-1]
            gsc[g] = F32(v[0] + v[1]) if topk_sum == 2 else v[0]
        out[t] = stable_desc(gsc)[:KG]
    w.record("group_topk", [T, G, EG, KG, topk_sum, seed], [(1, out)])


def moe_misc_case(w, T, K, E, G, ep, tp_rank, tp, naux, seed):
    """Inputs regenerated by the C test: ti = u32(seed) % E (-1 where u32(seed+1) % 7 == 0),
    gi = u32(seed+2) % G (-1 where u32(seed+3) % 9 == 0)."""
    ti = (ts_prng.u32(seed, T * K) % E).astype(np.int64).reshape(T, K)
    ti = np.where(ts_prng.u32(seed + 1, T * K).reshape(T, K) % 7 == 0, -1, ti)
    per_gpu, per_dp = E // ep, tp * (E // ep)
    m = ti.copy()
    for t in range(T):
        for k in range(K):
            v = int(ti[t, k])
            if v < 0 or (v // per_gpu) % tp != tp_rank:
                v = -1
            else:
                v -= tp_rank * per_gpu
                v -= (v // per_dp) * (per_dp - per_gpu)
                v = -1 if v < 0 else v
            m[t, k] = v
    gi = (ts_prng.u32(seed + 2, T * K) % G).astype(np.int64).reshape(T, K)
    gi = np.where(ts_prng.u32(seed + 3, T * K).reshape(T, K) % 9 == 0, -1, gi)
    u = gi.copy()
    for t in range(T):
        seen = set()
        for k in range(K):
            v = int(u[t, k])
            if v >= 0:
                if v in seen:
                    u[t, k] = -1
                else:
                    seen.add(v)
    cnt = np.array([np.sum(ti == e) for e in range(E)], np.int64)
    fi = (F32(1) * (cnt * E).astype(F32) / F32(T * naux)).astype(F32)
    w.record("moe_misc", [T, K, E, G, ep, tp_rank, tp, naux, seed], [(1, m), (1, u), (1, fi)])


def fused_mapping_case(w, T, K, E, align, extra, seed):
    """Inputs regenerated by the C test as in moe_misc_case (ti)."""
    ti = (ts_prng.u32(seed, T * K) % E).astype(np.int64).reshape(T, K)
    ti = np.where(ts_prng.u32(seed + 1, T * K).reshape(T, K) % 7 == 0, -1, ti)
    counts = np.array([np.sum(ti == e) for e in range(E)], np.int64)
    aligned = -(-counts // align) * align
    start = np.concatenate([[0], np.cumsum(aligned)[:-1]]).astype(np.int64)
    P = int(aligned.sum()) + extra
    pe = np.full(P, -1, np.int32)
    pt = np.full(P, -1, np.int32)
    ptk = np.full(P, -1, np.int32)
    t2p = np.full((T, K), -1, np.int32)
    nxt = start.copy()
    for t in range(T):
        for k in range(K):
            e = ti[t, k]
            if e >= 0:
                q = nxt[e]
                nxt[e] += 1
                pe[q], pt[q], ptk[q], t2p[t, k] = e, t, t * K + k, q
    w.record("fused_mapping", [T, K, E, align, P, seed],
             [(1, pe), (1, pt), (1, ptk), (1, t2p), (1, start.astype(np.int32)),
              (1, (start + counts).astype(np.int32)), (1, aligned.astype(np.int32))])


# ---------------------------------------------------------------- RoPE and block/channel casts

def rope_case(w, T, NH, D, hs, pad, S, interleaved, conjugate, use_pos, offset, is_f32, seed):
    NHB, DB = NH + hs, D + pad
    if is_f32:
        buf = f32_input(seed, (T, NHB, DB), 2.0)
        xv = buf[:, :NH, pad:].astype(F32)
    else:
        buf = bf16_input(seed, (T, NHB, DB), 2.0)
        xv = from_bf16_bits(buf[:, :NH, pad:])
    cs = f32_input(seed + 1, (S, D), 1.0)
    pos = (ts_prng.u32(seed + 2, T) % (S - offset)).astype(np.int32)
    rows = offset + (pos.astype(np.int64) if use_pos else np.arange(T))
    half = D // 2
    c = cs[rows, :half][:, None, :]
    n = cs[rows, half:][:, None, :]
    if conjugate:
        n = -n
    if interleaved:
        f, sc = xv[..., 0::2], xv[..., 1::2]
    else:
        f, sc = xv[..., :half], xv[..., half:]
    f2 = fma32(f, c, -(sc * n).astype(F32))
    s2 = fma32(f, n, (sc * c).astype(F32))
    y = np.empty_like(xv)
    if interleaved:
        y[..., 0::2], y[..., 1::2] = f2, s2
    else:
        y[..., :half], y[..., half:] = f2, s2
    out = buf.copy()
    out[:, :NH, pad:] = y if is_f32 else to_bf16_bits(y)
    w.record("rope", [T, NH, D, hs, pad, S, interleaved, conjugate, use_pos, offset, is_f32, seed],
             [(0, pos), (1, out)])


def cast_block(x, bh, bw, round_sf):
    m, n = x.shape
    pm, pn = -(-m // bh) * bh, -(-n // bw) * bw
    xp = np.zeros((pm, pn), F32)
    xp[:m, :n] = x
    q, sf = quant_rows(xp.reshape(pm // bh, bh, pn // bw, bw).transpose(0, 2, 1, 3).reshape(-1, bh * bw), bh * bw,
                       round_sf)
    q = q.reshape(pm // bh, pn // bw, bh, bw).transpose(0, 2, 1, 3).reshape(pm, pn)[:m, :n]
    return np.ascontiguousarray(q), sf.reshape(pm // bh, pn // bw)


def block_cast_case(w, M, N, blk, round_sf, seed):
    x = from_bf16_bits(bf16_input(seed, (M, N), 100.0))
    q, sf = cast_block(x, blk, blk, round_sf)
    w.record("block_cast", [M, N, blk, round_sf, seed], [(1, q), (1, sf)])


def channel_cast_case(w, T, H, round_sf, seed):
    x = from_bf16_bits(bf16_input(seed, (T, H), 100.0))
    q, sf = cast_block(x, 128, 1, round_sf)
    w.record("channel_cast", [T, H, round_sf, seed], [(1, q), (1, sf)])


def cast_back_case(w, M, N, bh, bw, is_f32, seed):
    codes = (ts_prng.u32(seed, M * N) & U32(0xFF)).astype(np.uint8).reshape(M, N)
    codes = np.where((codes & 0x7F) == 0x7F, codes ^ 0x01, codes).astype(np.uint8)
    sm, sn = -(-M // bh), -(-N // bw)
    sf = (np.ldexp(np.abs(f32_input(seed + 1, (sm, sn), 1.0)) + F32(0.5),
                              (ts_prng.u32(seed + 2, sm * sn) % 9).astype(np.int32).reshape(sm, sn) - 4)).astype(F32)
    v = codes.view(ml_dtypes.float8_e4m3fn).astype(F32)
    y = (v * np.repeat(np.repeat(sf, bh, 0), bw, 1)[:M, :N]).astype(F32)
    out = y if is_f32 else to_bf16_bits(y)
    w.record("cast_back", [M, N, bh, bw, is_f32, seed], [(0, codes), (0, sf), (1, out)])


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden")
    # quant: swiglu (P, H, gs, use_clamp, clamp_milli, count, mask, weights, round_sf, packed, seed)
    w = Writer()
    swiglu_case(w, 7, 256, 128, 1, 500, 1, 1, 1, 0, 0, 101)
    swiglu_case(w, 7, 384, 384, 1, 10000, 0, 1, 1, 1, 0, 102)
    swiglu_case(w, 1, 128, 128, 0, 0, 0, 0, 0, 0, 0, 103)
    swiglu_case(w, 33, 640, 128, 1, 10000, 1, 1, 0, 1, 1, 104)
    swiglu_case(w, 9, 1024, 512, 1, 500, 1, 0, 1, 1, 1, 105)
    swiglu_case(w, 4001, 256, 128, 1, 500, 1, 1, 1, 1, 0, 106)
    # rmsnorm (T, H, gs, round_sf, packed, seed)
    rmsnorm_case(w, 1, 128, 128, 0, 0, 201)
    rmsnorm_case(w, 17, 640, 128, 0, 0, 202)
    rmsnorm_case(w, 17, 512, 512, 1, 0, 203)
    rmsnorm_case(w, 7, 7168, 128, 1, 1, 204)
    rmsnorm_case(w, 4001, 256, 128, 1, 0, 205)
    with open(os.path.join(out, "tk_quant.bin"), "wb") as f:
        f.write(w.buf)
    # mhc (T, H, repeat, seed)
    w = Writer()
    mhc_case(w, 1, 64, 20, 301)
    mhc_case(w, 7, 264, 20, 302)
    mhc_case(w, 9, 520, 10, 303)
    with open(os.path.join(out, "tk_mhc.bin"), "wb") as f:
        f.write(w.buf)
    # moe
    w = Writer()
    for T, E, K, seed in ((7, 72, 2, 401), (7, 72, 9, 402), (33, 256, 6, 403), (33, 256, 8, 404), (1, 256, 9, 405)):
        topk_gate_case(w, T, E, K, seed)
    # top2_sum_gate (T, E, K, KP, G, KG, scoring, rsf_milli, use_mask, extra, ep_rank, n_ep, tp_rank, n_tp, seed)
    top2_sum_gate_case(w, 33, 256, 8, 8, 8, 4, 0, 2500, 0, 0, 0, 1, 0, 1, 501)
    top2_sum_gate_case(w, 33, 384, 6, 6, 1, 1, 1, 2500, 1, 0, 0, 1, 0, 1, 502)
    top2_sum_gate_case(w, 17, 72, 6, 7, 8, 4, 2, 1000, 1, 0, 0, 1, 0, 1, 503)
    top2_sum_gate_case(w, 17, 72, 9, 10, 1, 1, 3, 1500, 0, 8, 3, 8, 1, 2, 504)
    top2_sum_gate_case(w, 7, 256, 2, 3, 8, 2, 1, 2500, 1, 0, 0, 8, 0, 2, 505)
    top2_sum_gate_case(w, 17, 256, 8, 9, 8, 4, 0, 2500, 1, 32, 5, 8, 1, 2, 506, 1, 1, 1)
    top2_sum_gate_case(w, 9, 384, 6, 6, 1, 1, 1, 2500, 0, 0, 0, 1, 0, 1, 507, 1, 0, 1)
    # rows kernels (T, E, K, H, seed)
    moe_rows_case(w, 7, 72, 2, 256, 601)
    moe_rows_case(w, 33, 256, 9, 520, 602)
    moe_rows_case(w, 1, 72, 6, 128, 603)
    # group ranking (T, G, EG, KG, topk_sum, seed); tp mask / unique / aux_fi (T, K, E, G, ep, tp_rank, tp, naux, seed)
    group_topk_case(w, 33, 8, 32, 4, 2, 801)
    group_topk_case(w, 7, 8, 9, 3, 1, 802)
    group_topk_case(w, 1, 32, 8, 32, 2, 803)
    moe_misc_case(w, 33, 8, 256, 128, 8, 1, 2, 8, 811)
    moe_misc_case(w, 7, 9, 72, 16, 4, 0, 1, 9, 812)
    moe_misc_case(w, 4001, 6, 72, 72, 8, 3, 4, 6, 813)
    # get_fused_mapping (T, K, E, alignment, extra tail slots, seed)
    fused_mapping_case(w, 7, 2, 72, 16, 5, 821)
    fused_mapping_case(w, 4001, 6, 256, 64, 0, 822)
    fused_mapping_case(w, 33, 9, 72, 1, 3, 823)
    with open(os.path.join(out, "tk_moe.bin"), "wb") as f:
        f.write(w.buf)
    # rope (T, NH, D, head_split, pad, S, interleaved, conjugate, use_pos, offset, is_f32, seed)
    w = Writer()
    rope_case(w, 17, 3, 64, 1, 32, 40, 0, 0, 1, 0, 0, 701)
    rope_case(w, 17, 1, 32, 0, 0, 40, 1, 0, 1, 3, 0, 702)
    rope_case(w, 9, 5, 128, 1, 16, 30, 1, 1, 0, 17, 0, 703)
    rope_case(w, 7, 2, 256, 0, 0, 20, 0, 1, 1, 0, 1, 704)
    rope_case(w, 1, 4, 64, 0, 128, 8, 0, 0, 0, 5, 1, 705)
    # casts: block (M, N, blk, round, seed), channel (T, H, round, seed), back (M, N, bh, bw, f32, seed)
    block_cast_case(w, 130, 300, 128, 0, 711)
    block_cast_case(w, 257, 256, 128, 1, 712)
    block_cast_case(w, 33, 70, 32, 1, 713)
    block_cast_case(w, 1, 7, 32, 0, 714)
    block_cast_case(w, 200, 2100, 128, 1, 715)   # strips of 1024 columns: two whole, one partial
    block_cast_case(w, 40, 1100, 32, 0, 716)
    channel_cast_case(w, 256, 200, 0, 721)
    channel_cast_case(w, 300, 128, 1, 722)
    channel_cast_case(w, 7, 33, 0, 723)
    cast_back_case(w, 130, 300, 128, 128, 0, 731)
    cast_back_case(w, 33, 96, 1, 32, 1, 732)
    cast_back_case(w, 65, 256, 32, 64, 0, 733)
    cast_back_case(w, 5, 2100, 1, 96, 0, 734)    # 1024-value chunks; scale groups across chunk edges
    cast_back_case(w, 3, 2048, 2, 128, 1, 735)
    with open(os.path.join(out, "tk_rope_cast.bin"), "wb") as f:
        f.write(w.buf)


if __name__ == "__main__":
    main()
