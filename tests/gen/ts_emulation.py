"""tilestack's rounding points and kernel arithmetic patched into transformers' DeepSeek-V4
(models/deepseek_v4/modeling_deepseek_v4.py), for tests/gen/gen_hf_v4_emul.py and
docs/models.md "Conformance".

`install(model, config_json)` patches, on a DeepseekV4ForCausalLM loaded in float64, the forward
of its modules so that one decode step (one token, batch 1) rounds where tilestack rounds and,
between rounding points, computes what tilestack's kernels compute:

  * the linear layers by role (docs/model.md §3): FP8 weights -> lin8 (activation cast to e4m3
    per 1x128 with ue8m0 scales, then DeepGEMM's canonical f32 order of docs/gemm.md: per K
    block a sequential f32 sum of exact products, promoted into the f32 accumulator; bf16
    output); routed experts the same with blocks of 32 (activation cast per 32, FP4 weights);
    f32 weights (compressors, router, mHC mixes) -> the 16-lane f32 GEMV of
    src/model/kernels (fmaf per lane, fixed reduction tree); bf16 weights (head, indexer
    weights_proj) -> a sequential f32 sum;
  * RMSNorm -> bf16(x * rms(x) * w) in double; q's unweighted norm and RoPE in double with
    tilestack's f32 cos / sin tables (YaRN for compressed layers), then bf16;
  * mHC: mixes = f32 GEMV of x, times rms(x) in double, sigmoids and Sinkhorn in double, the
    collapse and hc_post rounded to bf16 (the residual streams are bf16);
  * attention: the window ring and the compressed rows stored through the 584-byte MODEL1 FP8
    cache (ts_mla_quantize_kv_cache: e4m3 per 64 with a power-of-two scale, RoPE part bf16); the
    compressors' states in f32, their softmax pool in double; the indexer's q and keys through
    Hadamard-128 and the FP4 cast (e2m1, ue8m0 per 32, DeepGEMM rounding), its scores as the
    FP4 MQA-logits kernel sums them, top-k ties to the lower index, rows in ascending index;
    FlashMLA's sparse decode arithmetic (q.k fma chain, its degree-7 polynomial exp, f32
    softmax sums and PV fma chains, the double finish with the sink), output bf16, inverse RoPE,
    bf16;
  * MoE: sqrt-softplus scores in double, top-k by score + bias (ties: lower id), weights to
    f32; the routed SwiGLU x weight + e4m3 requantisation per 32 in f32 with libm's expf (Mega
    MoE's epilogue, src/numerics/swiglu_cast.c), the routed sum in f32 in top-k order, the
    shared expert's SwiGLU in double;
  * the head: hc_head collapse, norm, linbf.

`f64_sums` names kernels (KERNELS: gemm = FP8 / FP4 GEMMs, bf16 = bf16 GEMMs, gemv = f32 GEMVs,
mla = FlashMLA, mqa = MQA logits) whose emulation is replaced by float64 sums: the rounding
points stay, the accumulation order goes (what the float64 reference src/model_ref/ does); the
generator's --compare shows what that costs.

Only single-token decode steps are emulated (position_ids must be passed, a fresh DynamicCache
per sequence); the emulated caches live on the cache object.
"""
import ctypes
import json
import os
import sys
import types

import ml_dtypes
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_dsv4  # noqa: E402  (bf16, f32, fp8_act, fp4_rows, quant_model1, rope, rope_freqs)

F32, F64 = np.float32, np.float64
_libm = ctypes.CDLL("libm.so.6")
_libm.expf.restype = ctypes.c_float
_libm.expf.argtypes = [ctypes.c_float]

# the kernels whose f32 arithmetic is emulated; install(f64_sums=...) turns some into float64 sums
KERNELS = ("gemm", "bf16", "gemv", "mla", "mqa")
EXACT = dict.fromkeys(KERNELS, True)


# ---- f32 kernel arithmetic ----------------------------------------------------------------

def fma32(a, b, c):
    """fmaf(a, b, c) for f32 arrays: a*b is exact in double (48 bits); the one double rounding
    of the sum can differ from fmaf's single rounding only when it lands on an f32 midpoint."""
    return (a.astype(F64) * b.astype(F64) + c.astype(F64)).astype(F32)


def gemm_blocks(a, Wt, g):
    """DeepGEMM's canonical order (docs/gemm.md) for one row: a [K] dequantised activation,
    Wt [K, N] dequantised weight (transposed), blocks of g along K. Products are exact in f32
    (e4m3 / e2m1 significands); scaling both operands by their powers of two commutes with
    every f32 rounding, so the dequantised values give the codes' bits times sa*sb."""
    if not EXACT["gemm"]:
        return (a.astype(F64) @ Wt.astype(F64)).astype(F32)
    a32, W32 = a.astype(F32), Wt.astype(F32)
    acc = np.zeros(W32.shape[1], F32)
    for k0 in range(0, a32.size, g):
        p = np.zeros_like(acc)
        for k in range(k0, min(k0 + g, a32.size)):
            p = p + a32[k] * W32[k]
        acc = acc + p
    return acc


def gemm_bf16(a, Wt):
    """ts_bf16_gemm_nt: acc = fmaf(a_k, b_k, acc) over k ascending (bf16 products exact)."""
    if not EXACT["bf16"]:
        return (a.astype(F64) @ Wt.astype(F64)).astype(F32)
    a32, W32 = a.astype(F32), Wt.astype(F32)
    acc = np.zeros(W32.shape[1], F32)
    for k in range(a32.size):
        acc = acc + a32[k] * W32[k]
    return acc


def gemv_f32(x, W):
    """ts__model_gemv_f32: 16 fmaf lanes (lane l takes k = 16i + l, the tail from lane 0),
    then ts__model_dot_reduce16's tree. x [K] f32, W [N, K] f32."""
    if not EXACT["gemv"]:
        return (W.astype(F64) @ x.astype(F64)).astype(F32)
    x32, W32 = x.astype(F32), W.astype(F32)
    N, K = W32.shape
    acc = np.zeros((N, 16), F32)
    k16 = K // 16 * 16
    for i in range(0, k16, 16):
        acc = fma32(x32[i:i + 16][None, :], W32[:, i:i + 16], acc)
    for l, i in enumerate(range(k16, K)):
        acc[:, l] = fma32(x32[i], W32[:, i], acc[:, l])
    t = acc[:, :8] + acc[:, 8:]
    return ((t[:, 0] + t[:, 4]) + (t[:, 2] + t[:, 6])) + ((t[:, 1] + t[:, 5]) + (t[:, 3] + t[:, 7]))


def mla_exp(x):
    """FlashMLA's exp (src/attention/kernels/generic/mla_generic.c), f32 in, f32 out."""
    x = x.astype(F32)
    out = np.zeros_like(x)
    ok = x >= F32(-87.0)
    xv = x[ok]
    n = np.rint(xv * F32(1.44269504088896341)).astype(F32)
    r = fma32(n, F32(-0.693359375), xv)
    r = fma32(n, F32(2.12194440e-4), r)
    p = np.full_like(r, F32(1.0) / F32(5040.0))
    for c in (F32(1.0) / F32(720.0), F32(1.0) / F32(120.0), F32(1.0) / F32(24.0),
              F32(1.0) / F32(6.0), F32(0.5), F32(1.0), F32(1.0)):
        p = fma32(p, r, np.full_like(r, c))
    s = ((n.astype(np.int32) + 127).astype(np.uint32) << 23).view(F32)
    out[ok] = p * s
    return out


def flash_mla(q, rows, sink):
    """ts_flash_mla_with_kvcache, sparse decode, one query token: q [H, 512] bf16 values,
    rows [T, 512] the decoded cache rows in slot order (window, then extra), sink [H]. One tile
    of at most 48 tokens (the engine's online softmax over more tiles is not emulated)."""
    H, T = q.shape[0], rows.shape[0]
    scale = F32(1.0 / np.sqrt(512.0))
    if not EXACT["mla"]:
        s = (q @ rows.T) * (1.0 / np.sqrt(512.0))
        mx = s.max(axis=1, keepdims=True)
        e = np.exp(s - mx)
        l = e.sum(axis=1)
        o = (e @ rows) / l[:, None] / (1.0 + np.exp(sink - (mx[:, 0] + np.log(l))))[:, None]
        return gen_dsv4.bf16(o)
    assert T <= 48, "more than one FlashMLA tile"
    q32, k32 = q.astype(F32), rows.astype(F32)
    S = np.zeros((H, T), F32)
    for d in range(512):
        S = S + q32[:, d:d + 1] * k32[None, :, d]  # bf16 x bf16: exact products
    S = S * scale
    mn = S.max(axis=1, keepdims=True)
    P = mla_exp(S - mn)
    l = np.zeros(H, F32)
    for t in range(T):
        l = l + P[:, t]
    O = np.zeros((H, 512), F32)
    for t in range(T):
        O = fma32(P[:, t:t + 1], k32[None, t, :], O)
    lse = mn[:, 0].astype(F64) + np.log(l.astype(F64))
    f = (1.0 / l.astype(F64)) / (1.0 + np.exp(sink.astype(F64) - lse))
    return gen_dsv4.bf16(O * f.astype(F32)[:, None])


def mqa_logits(qv, kv, w):
    """ts_fp8_fp4_mqa_logits (FP4, block-32 ue8m0 scales), docs/mqa_logits.md: per key a
    sequential f32 q.k sum per head (exact products), relu, lane partials fmaf(r, w_h, 0) for
    head h in lane h mod 8 (h < 16 here), then the fixed tree. qv [IH, 128], kv [T, 128]
    dequantised values, w [IH] f32."""
    if not EXACT["mqa"]:
        return (np.maximum(qv @ kv.T, 0.0) * w[:, None].astype(F64)).sum(axis=0)
    IH = qv.shape[0]
    assert IH <= 16
    q32, k32 = qv.astype(F32), kv.astype(F32)
    S = np.zeros((IH, k32.shape[0]), F32)
    for d in range(q32.shape[1]):
        S = S + q32[:, d:d + 1] * k32[None, :, d]
    R = np.maximum(S, F32(0.0))
    part = np.zeros((8, k32.shape[0]), F32)
    for h in range(IH):
        part[h % 8] = fma32(R[h], np.full_like(R[h], w[h]), part[h % 8])
    p = part
    return ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]))


def hadamard128(x):
    """ts__model_hadamard128: the butterfly in double, then / sqrt(128); x [..., 128]."""
    x = np.array(x, F64)
    h = 1
    while h < 128:
        y = x.reshape(*x.shape[:-1], 128 // (2 * h), 2, h)
        a, b = y[..., 0, :].copy(), y[..., 1, :].copy()
        y[..., 0, :], y[..., 1, :] = a + b, a - b
        x = y.reshape(*x.shape)
        h *= 2
    return x / np.sqrt(128.0)


# ---- rounding points ----------------------------------------------------------------------

bf16 = gen_dsv4.bf16


def rms(x, eps):
    x = np.asarray(x, F64)
    return 1.0 / np.sqrt(np.mean(x * x) + float(F32(eps)))


def fp8_act(x, gran):
    return gen_dsv4.fp8_act(np.asarray(x, F64), gran)


def lin8(x, Wt, gran=128):
    """docs/model.md lin8: x bf16 row -> e4m3 per gran -> canonical FP8 GEMM -> bf16."""
    return bf16(gemm_blocks(fp8_act(x, gran), Wt, gran))


def swiglu_weight_cast(g, u, wt, limit):
    """ts__swiglu_weight_cast: f32, IEEE divide and libm expf, then e4m3 (sat) with
    2^ceil(log2(amax / 448)) per 32; returns the dequantised row."""
    g = np.minimum(g.astype(F32), F32(limit))
    u = np.minimum(np.maximum(u.astype(F32), F32(-limit)), F32(limit))
    ex = np.array([_libm.expf(float(-v)) for v in g], F32)
    sig = F32(1.0) / (F32(1.0) + ex)
    act = ((g * sig) * u) * F32(wt)
    out = np.empty(act.size, F64)
    inv448 = F32(1.0 / 448.0)
    for j0 in range(0, act.size, 32):
        blk = act[j0:j0 + 32]
        amax = F32(np.max(np.abs(blk)))
        bits = int(np.array([amax * inv448], F32).view(np.uint32)[0])
        e = ((bits >> 23) & 0xFF) - 127 + ((bits & 0x7FFFFF) != 0)
        e = min(e, 127)
        sf_inv = F32(np.ldexp(1.0, -e)) if -e + 127 >= 0 else F32(0.0)
        codes = np.clip(blk * sf_inv, -448, 448).astype(ml_dtypes.float8_e4m3fn)
        out[j0:j0 + 32] = codes.astype(F64) * np.ldexp(1.0, e)
    return out


# ---- the patched forwards -----------------------------------------------------------------

def _np(t):
    return t.detach().to(torch.float64).numpy()


def _t(a):
    return torch.from_numpy(np.ascontiguousarray(a, dtype=F64))


class Cfg:
    def __init__(self, raw):
        rs = raw.get("rope_scaling") or {}
        self.eps = raw["rms_norm_eps"]
        self.hc_eps = raw["hc_eps"]
        self.iters = raw["hc_sinkhorn_iters"]
        self.window = raw["sliding_window"]
        self.topk = raw["index_topk"]
        self.limit = raw["swiglu_limit"]
        self.route_scale = raw["routed_scaling_factor"]
        self.hash_layers = raw.get("num_hash_layers", 0)
        self.ratios = raw["compress_ratios"]
        self.o_groups = raw["o_groups"]
        rc = dict(rope_theta=raw["rope_theta"], compress_rope_theta=raw["compress_rope_theta"],
                  rope_factor=rs.get("factor", 1.0),
                  original_seq_len=rs.get("original_max_position_embeddings", 0),
                  beta_fast=rs.get("beta_fast", 32), beta_slow=rs.get("beta_slow", 1))
        self.freqs = [gen_dsv4.rope_freqs(rc, False), gen_dsv4.rope_freqs(rc, True)]


CFG = {}


def rope(x, p, compressed, inverse=False):
    return gen_dsv4.rope(x, p, CFG["c"].freqs[1 if compressed else 0], inverse)


def norm_forward(self, x):
    """DeepseekV4RMSNorm -> ts__model_rmsnorm_bf16."""
    a = _np(x)
    w = _np(self.weight)
    out = np.empty_like(a)
    flat, of = a.reshape(-1, a.shape[-1]), out.reshape(-1, a.shape[-1])
    for i in range(flat.shape[0]):
        of[i] = bf16(flat[i] * rms(flat[i], self.variance_epsilon) * w)
    return _t(out)


def _weights(mod, name, fn):
    cache = mod.__dict__.setdefault("_ts_w", {})
    if name not in cache:
        cache[name] = fn()
    return cache[name]


def lin8_forward(self, x):
    Wt = _weights(self, "t", lambda: _np(self.weight).T.copy())
    a = _np(x)
    rows = a.reshape(-1, a.shape[-1])
    return _t(np.stack([lin8(r, Wt) for r in rows]).reshape(*a.shape[:-1], -1))


def linbf_forward(self, x):
    Wt = _weights(self, "t", lambda: _np(self.weight).T.copy())
    a = _np(x)
    rows = a.reshape(-1, a.shape[-1])
    return _t(np.stack([gemm_bf16(bf16(r), Wt) for r in rows]).astype(F64).reshape(*a.shape[:-1], -1))


def lin32_forward(self, x):
    W = _weights(self, "w", lambda: _np(self.weight).astype(F32))
    a = _np(x)
    rows = a.reshape(-1, a.shape[-1])
    return _t(np.stack([gemv_f32(r, W) for r in rows]).astype(F64).reshape(*a.shape[:-1], -1))


def _mixes(X, fn, eps):
    x = X.reshape(-1).astype(F32)
    return gemv_f32(x, fn).astype(F64) * rms(x, eps)


def _collapse(pre, X):
    acc = pre[0] * X[0]
    for s in range(1, X.shape[0]):
        acc = acc + pre[s] * X[s]
    return bf16(acc)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def hc_forward(self, hidden_streams):
    """DeepseekV4HyperConnection -> ts__model_hc_pre (one token)."""
    c = CFG["c"]
    X = _np(hidden_streams)[0, 0]  # [hc, dim], bf16 values
    hc = X.shape[0]
    fn = _weights(self, "fn", lambda: _np(self.fn).astype(F32))
    base, scale = _np(self.base), _np(self.scale).astype(F32).astype(F64)
    m = _mixes(X, fn, c.eps)
    pre = _sigmoid(m[:hc] * scale[0] + base[:hc]) + c.hc_eps
    post = 2.0 * _sigmoid(m[hc:2 * hc] * scale[1] + base[hc:2 * hc])
    M = (m[2 * hc:] * scale[2] + base[2 * hc:]).reshape(hc, hc)
    C = np.exp(M - M.max(axis=1, keepdims=True))
    C = C / C.sum(axis=1, keepdims=True) + c.hc_eps
    for it in range(c.iters):
        if it > 0:
            C = C / (C.sum(axis=1, keepdims=True) + c.hc_eps)
        C = C / (C.sum(axis=0, keepdims=True) + c.hc_eps)
    return _t(post)[None, None], _t(C)[None, None], _t(_collapse(pre, X))[None, None]


def hc_head_forward(self, x):
    """DeepseekV4HyperHead -> ts__model_hc_head."""
    c = CFG["c"]
    X = _np(x)[0, 0]
    fn = _weights(self, "fn", lambda: _np(self.hc_fn).astype(F32))
    m = _mixes(X, fn, c.eps)
    pre = _sigmoid(m * float(F32(_np(self.hc_scale)[0])) + _np(self.hc_base)) + c.hc_eps
    return _t(_collapse(pre, X))[None, None]


def layer_forward(self, hidden_states, input_ids=None, **kwargs):
    """DeepseekV4DecoderLayer's own forward with hc_post's bf16 rounding (the residual streams
    of tilestack are bf16)."""
    post, comb, collapsed = self.attn_hc(hidden_states)
    attn_output, _ = self.self_attn(self.input_layernorm(collapsed), **kwargs)
    hidden_states = _t(bf16(_np(post.unsqueeze(-1) * attn_output.unsqueeze(-2)
                                + torch.matmul(comb.transpose(-1, -2), hidden_states))))
    post, comb, collapsed = self.ffn_hc(hidden_states)
    mlp_output = self.mlp(self.post_attention_layernorm(collapsed), input_ids=input_ids)
    return _t(bf16(_np(post.unsqueeze(-1) * mlp_output.unsqueeze(-2)
                       + torch.matmul(comb.transpose(-1, -2), hidden_states))))


class _Pool:
    """One compressor's state (model_attention.c compress_step): slots of f32 values and f32
    scores (gate + ape), the previous block's kept for the overlap (ratio 4)."""

    def __init__(self, mod, overlap):
        self.mod, self.overlap = mod, overlap
        self.r = mod.position_bias.shape[0]
        self.w = mod.position_bias.shape[1]
        self.k = np.zeros((2, self.r, self.w), F32)  # [previous, current]
        self.s = np.full((2, self.r, self.w), -np.inf, F32)
        self.have_prev = False

    def push(self, a, p):
        m = self.mod
        af = a.astype(F32)
        ape = _weights(m, "ape", lambda: _np(m.position_bias).astype(F32))
        j = p % self.r
        self.k[1, j] = lin32_forward(m.kv_proj, _t(af)).numpy().astype(F32)
        self.s[1, j] = lin32_forward(m.gate_proj, _t(af)).numpy().astype(F32) + ape[j]
        if (p + 1) % self.r:
            return None
        d = self.w // 2 if self.overlap else self.w
        if self.overlap:
            s = np.concatenate([self.s[0, :, :d], self.s[1, :, d:]]) if self.have_prev else self.s[1, :, d:]
            k = np.concatenate([self.k[0, :, :d], self.k[1, :, d:]]) if self.have_prev else self.k[1, :, d:]
            self.k[0], self.s[0], self.have_prev = self.k[1], self.s[1], True
        else:
            s, k = self.s[1], self.k[1]
        s, k = s.astype(F64), k.astype(F64)
        e = np.exp(s - s.max(axis=0, keepdims=True))
        row = bf16((e * k).sum(axis=0) / e.sum(axis=0))
        row = norm_forward(m.kv_norm, _t(row)).numpy()
        t = rope(row[d - 64:], p + 1 - self.r, True)
        return row, t


def _state(cache, layer, attn):
    st = cache.__dict__.setdefault("_ts", {})
    if layer not in st:
        c = CFG["c"]
        r = c.ratios[layer]
        s = dict(window={}, comp=[], idx=[], r=r)
        if r > 0:
            s["pool"] = _Pool(attn.compressor, r == 4)
        if r == 4:
            s["ipool"] = _Pool(attn.compressor.indexer, True)
        st[layer] = s
    return st[layer]


def attention_forward(self, hidden_states, position_embeddings=None, position_ids=None,
                      attention_mask=None, cache=None, **kwargs):
    """DeepseekV4Attention -> ts__model_attention (§4 steps 1-6) for one token."""
    c = CFG["c"]
    assert hidden_states.shape[1] == 1 and cache is not None, "decode steps only"
    p = int(position_ids[0, -1])
    a = _np(hidden_states)[0, 0]
    st = _state(cache, self.layer_idx, self)
    r, H, comp = st["r"], self.num_heads, st["r"] > 0
    # 1. q
    qr = self.q_a_norm(self.q_a_proj(_t(a))).numpy()
    q = self.q_b_proj(_t(qr)).numpy().reshape(H, 512)
    for h in range(H):
        x = q[h] * rms(q[h], c.eps)
        x[448:] = rope(x[448:], p, comp)
        q[h] = bf16(x)
    # 2. kv -> the window ring (MODEL1 FP8 round trip)
    kv = self.kv_norm(self.kv_proj(_t(a))).numpy()
    kv[448:] = bf16(rope(kv[448:], p, comp))
    st["window"][p] = gen_dsv4.quant_model1(kv)
    st["window"].pop(p - c.window, None)
    # 3. compressor, 4. indexer
    sel = []
    if comp:
        got = st["pool"].push(a, p)
        if got is not None:
            row, t = got
            row[448:] = bf16(t)
            st["comp"].append(gen_dsv4.quant_model1(row))
        nc = (p + 1) // r
        sel = list(range(nc))
    if r == 4:
        ind = self.compressor.indexer
        got = st["ipool"].push(a, p)
        if got is not None:
            row, t = got
            row[64:] = t  # not rounded: RoPE -> Hadamard -> FP4 (docs/model.md §4.4)
            st["idx"].append(gen_dsv4.fp4_rows(hadamard128(row)[None, :])[0])
        IH = ind.num_heads
        qi = ind.q_b_proj(_t(qr)).numpy().reshape(IH, 128)
        qi[:, 64:] = rope(qi[:, 64:], p, True)
        qi = gen_dsv4.fp4_rows(hadamard128(qi))
        cw = (1.0 / np.sqrt(128.0)) * (1.0 / np.sqrt(float(IH)))
        wi = (ind.scorer.weights_proj(_t(a)).numpy() * cw).astype(F32)
        if nc:
            score = mqa_logits(qi, np.array(st["idx"][:nc]), wi)
            k = min(c.topk, nc)
            sel = sorted(np.argsort(-score.astype(F64), kind="stable")[:k].tolist())
        else:
            sel = []
    # 5. sparse FlashMLA over window + compressed rows
    rows = [st["window"][t] for t in range(max(0, p - c.window + 1), p + 1)]
    rows += [st["comp"][t] for t in sel]
    o = flash_mla(q, np.array(rows), _np(self.sinks))
    for h in range(H):
        o[h, 448:] = bf16(rope(o[h, 448:], p, comp, inverse=True))
    # 6. grouped output projection (each group's slice cast on its own: 512-aligned)
    G = c.o_groups
    hpg, OL = H // G, self.o_a_proj.weight.shape[0] // G
    Wa = _weights(self.o_a_proj, "t", lambda: _np(self.o_a_proj.weight).T.copy())
    z = np.concatenate([lin8(o[g * hpg:(g + 1) * hpg].reshape(-1), Wa[:, g * OL:(g + 1) * OL])
                        for g in range(G)])
    return self.o_b_proj(_t(z))[None, None], None


def _score(s):
    s = s.astype(F64)
    return np.sqrt(np.where(s > 40.0, s, np.log1p(np.exp(np.minimum(s, 40.0)))))


def moe_forward(self, hidden_states, input_ids=None):
    """DeepseekV4SparseMoeBlock -> ts__model_moe (one token)."""
    c = CFG["c"]
    a = _np(hidden_states)[0, 0]
    gate = self.gate
    gw = _weights(gate, "w", lambda: _np(gate.weight).astype(F32))
    sc = _score(gemv_f32(a.astype(F32), gw))
    K = gate.top_k
    if self.is_hash:
        idx = [int(v) for v in _np(gate.tid2eid)[int(input_ids.reshape(-1)[-1])]]
    else:
        v = sc + _np(gate.e_score_correction_bias).astype(F32).astype(F64)
        idx = [int(i) for i in np.argsort(-v, kind="stable")[:K]]
    w = (sc[idx] / sc[idx].sum() * c.route_scale).astype(F32)
    ex = self.experts
    x8 = fp8_act(a, 32)
    I = ex.intermediate_dim
    acc = np.zeros(a.size, F32)
    for j, e in enumerate(idx):
        gu = _weights(ex, f"gu{e}", lambda: _np(ex.gate_up_proj[e]).T.copy())
        dn = _weights(ex, f"dn{e}", lambda: _np(ex.down_proj[e]).T.copy())
        g = bf16(gemm_blocks(x8, gu[:, :I], 32))
        u = bf16(gemm_blocks(x8, gu[:, I:], 32))
        h8 = swiglu_weight_cast(g, u, w[j], c.limit if c.limit > 0 else np.inf)
        acc = acc + bf16(gemm_blocks(h8, dn, 32)).astype(F32)
    routed = bf16(acc).astype(F32)
    sh = self.shared_experts
    g = sh.gate_proj(_t(a)).numpy()
    u = sh.up_proj(_t(a)).numpy()
    if c.limit > 0:
        g = np.minimum(g, c.limit)
        u = np.clip(u, -c.limit, c.limit)
    so = sh.down_proj(_t(bf16(g / (1.0 + np.exp(-g)) * u))).numpy().astype(F32)
    return _t(bf16(routed + so))[None, None]


def install(model, config_json, f64_sums=()):
    """Patch `model` (DeepseekV4ForCausalLM, float64) in place; config_json: the checkpoint's
    config.json (tilestack's keys are read from it, not from transformers' derived config);
    f64_sums: names from KERNELS computed as float64 sums instead of tilestack's f32 order."""
    from transformers.models.deepseek_v4 import modeling_deepseek_v4 as mv4
    for k in KERNELS:
        EXACT[k] = k not in f64_sums
    CFG["c"] = Cfg(json.load(open(config_json)))
    bind = lambda mod, fn: setattr(mod, "forward", types.MethodType(fn, mod))
    for mod in model.modules():
        if isinstance(mod, mv4.DeepseekV4RMSNorm):
            bind(mod, norm_forward)
        elif isinstance(mod, mv4.DeepseekV4HyperConnection):
            bind(mod, hc_forward)
        elif isinstance(mod, mv4.DeepseekV4HyperHead):
            bind(mod, hc_head_forward)
        elif isinstance(mod, mv4.DeepseekV4DecoderLayer):
            bind(mod, layer_forward)
        elif isinstance(mod, mv4.DeepseekV4Attention):
            bind(mod, attention_forward)
            for n in ("q_a_proj", "q_b_proj", "kv_proj", "o_b_proj"):
                bind(getattr(mod, n), lin8_forward)
            if isinstance(mod.compressor, mv4.DeepseekV4CSACompressor):
                ind = mod.compressor.indexer
                bind(ind.q_b_proj, lin8_forward)
                bind(ind.scorer.weights_proj, linbf_forward)
        elif isinstance(mod, mv4.DeepseekV4SparseMoeBlock):
            bind(mod, moe_forward)
            for n in ("gate_proj", "up_proj", "down_proj"):
                bind(getattr(mod.shared_experts, n), lin8_forward)
    bind(model.lm_head, linbf_forward)
    return model
