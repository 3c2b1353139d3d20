#!/usr/bin/env python3
"""Golden logits of Hugging Face transformers' DeepseekV3ForCausalLM on a tiny random checkpoint,
for tests/test_model_hf_v3.c (docs/models.md "V3"). Not run in CI.

Needs torch (CPU), transformers 5.x (models/deepseek_v3), safetensors and numpy:

    /work/hfvenv/bin/python tests/gen/gen_hf_v3.py [--keep DIR]

The checkpoint (~5 MB: kv_lora_rank 512 and rope 64 as the real models, so that tilestack's
FlashMLA decode applies) is too big to commit, so it is defined by a table that the golden
carries and the C test rebuilds it from: every tensor's name, dtype, shape and value rule
(value = base + u * 2^-exp, u the splitmix64 uniform of tests/ts_prng.h seeded with the
tensor's own seed, then rounded to the stored dtype; all of it exact in f32 on both sides).

What it does:
  1. builds the tensors from the table, writes config.json (V3's real keys: YaRN rope_scaling
     factor 40 / original 4096 / mscale 1 / mscale_all_dim 1, group-limited routing, q_lora)
     and model.safetensors in DeepSeek's V3 release names (model.layers.N.mlp.experts.E.
     gate_proj.weight ...: transformers merges the experts itself when it loads);
  2. DeepseekV3ForCausalLM.from_pretrained(DIR, dtype=float32) and checks every parameter
     against the table's values (so transformers read the names as tilestack's table says);
  3. a fixed sequence of N_STEPS tokens (splitmix64 from TOKEN_SEED, (z >> 32) mod vocab),
     teacher-forced one token per forward with the cache; the logits of every step. A
     full-sequence forward must agree (transformers' prefill == its decode).

Output tests/golden/hf_v3_tiny.bin, little-endian:
  char magic[8] = "TSHFV3G1"
  u32 version = 1, n_steps, vocab, n_tensors, config_len, reserved = 0
  u64 token_seed, u64 fnv1a64 over every tensor's stored bytes in table order
  char config[config_len]                  (config.json, as written)
  n_tensors x { char name[96]; u32 dtype; u32 ndim; u64 shape[3]; f32 base; i32 exp; u64 seed }
      dtype 0 BF16, 1 F32: value = base + u x 2^-exp (u: ts_prng_uniform), rounded to the dtype;
      2 F8_E4M3: codes (u32 stream z: z & 0x87 | (5 + (z >> 3 & 3)) << 3);
      3 F32 scale: (1 + u / 4) x 2^-exp
With --fp8 (tests/golden/hf_v3_fp8_tiny.bin): DeepSeek's FP8 release form (fp8_table below).
  i32 tokens[n_steps]
  f32 logits[n_steps][vocab]               (step i consumes tokens[i] at position i)
"""
import argparse
import json
import os
import struct
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ts_prng  # noqa: E402

TOKEN_SEED = 20261202
N_STEPS = 64
BASE_SEED = 0x5EED_0003

CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "vocab_size": 512,
    "hidden_size": 256,
    "intermediate_size": 512,
    "moe_intermediate_size": 64,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "n_shared_experts": 1,
    "n_routed_experts": 16,
    "num_experts_per_tok": 4,
    "n_group": 4,
    "topk_group": 2,
    "routed_scaling_factor": 2.5,
    "norm_topk_prob": True,
    "scoring_func": "sigmoid",
    "topk_method": "noaux_tc",
    "first_k_dense_replace": 1,
    "moe_layer_freq": 1,
    "q_lora_rank": 64,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 32,
    "qk_rope_head_dim": 64,
    "v_head_dim": 32,
    "hidden_act": "silu",
    "max_position_embeddings": 163840,
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000,
    "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                     "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
    "attention_bias": False,
    "attention_dropout": 0.0,
    "tie_word_embeddings": False,
    "num_nextn_predict_layers": 0,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "torch_dtype": "bfloat16",
}


# V3.2 (--v32): V3's keys and values plus the indexer's (DeepSeek-V3.2-Exp's config.json
# shape); index_topk 24 < the 64 steps, so the selection matters from position 24
V32_EXTRA = {"index_n_heads": 8, "index_head_dim": 128, "index_topk": 24}


FP8_RULE = "codes: sign | exponent field 5..8 | mantissa from the tensor's u32 stream (no NaN)"


def fp8_table(tab):
    """The FP8 variant (DeepSeek's release: e4m3 weights + f32 weight_scale_inv per 128x128):
    every linear weight but the embedding, head and router becomes dtype 2 (e4m3 codes drawn as
    FP8_RULE says, |value| in [0.25, 1.875]), followed by its scale tensor (f32, positive:
    2^-exp' x (1 + u/4), exp' = the BF16 rule's exp + 1)."""
    out = []
    for name, dt, shape, base, exp in tab:
        lin = len(shape) == 2 and not any(s in name for s in ("embed_tokens", "lm_head", "mlp.gate."))
        if not lin:
            out.append((name, dt, shape, base, exp))
            continue
        out.append((name, 2, shape, 0.0, 0))
        sshape = [(shape[0] + 127) // 128, (shape[1] + 127) // 128]
        out.append((name + "_scale_inv", 3, sshape, 1.0, exp + 1))
    return out


def e4m3_codes(seed, n):
    u = ts_prng.u32(seed, n)
    return ((u & np.uint32(0x87)) | ((np.uint32(5) + ((u >> np.uint32(3)) & np.uint32(3))) << np.uint32(3))).astype(np.uint8)


def lin_exp(k):
    """2^-exp ~ 1/sqrt(k): a weight of fan-in k keeps activations O(1)."""
    return int(np.floor(np.log2(k) / 2))


def table(c):
    """(name, dtype, shape, base, exp) in file order: DeepSeek-V3's release names."""
    D, H, V = c["hidden_size"], c["num_attention_heads"], c["vocab_size"]
    QL, KL = c["q_lora_rank"], c["kv_lora_rank"]
    NOPE, ROPE, VH = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    I, MI, E = c["intermediate_size"], c["moe_intermediate_size"], c["n_routed_experts"]
    S = c["n_shared_experts"]
    t = [("model.embed_tokens.weight", 0, [V, D], 0.0, 0)]

    def lin(name, n, k):
        t.append((name + ".weight", 0, [n, k], 0.0, lin_exp(k)))

    def norm(name, n):
        t.append((name + ".weight", 0, [n], 1.0, 3))

    for L in range(c["num_hidden_layers"]):
        p = f"model.layers.{L}."
        norm(p + "input_layernorm", D)
        norm(p + "post_attention_layernorm", D)
        a = p + "self_attn."
        lin(a + "q_a_proj", QL, D)
        norm(a + "q_a_layernorm", QL)
        lin(a + "q_b_proj", H * (NOPE + ROPE), QL)
        lin(a + "kv_a_proj_with_mqa", KL + ROPE, D)
        norm(a + "kv_a_layernorm", KL)
        lin(a + "kv_b_proj", H * (NOPE + VH), KL)
        lin(a + "o_proj", D, H * VH)
        if "index_topk" in c:
            # V3.2's lightning indexer (transformers' DeepseekV32Indexer names)
            IH, ID = c["index_n_heads"], c["index_head_dim"]
            x = a + "indexer."
            lin(x + "wq_b", IH * ID, QL)
            lin(x + "wk", ID, D)
            norm(x + "k_norm", ID)
            t.append((x + "k_norm.bias", 0, [ID], 0.0, 3))
            lin(x + "weights_proj", IH, D)
        m = p + "mlp."
        if L < c["first_k_dense_replace"]:
            lin(m + "gate_proj", I, D)
            lin(m + "up_proj", I, D)
            lin(m + "down_proj", D, I)
            continue
        t.append((m + "gate.weight", 0, [E, D], 0.0, 4))
        # the bias decides the choice only: a spread like the real ones' keeps groups apart
        t.append((m + "gate.e_score_correction_bias", 1, [E], 0.0, 3))
        for e in range(E):
            lin(m + f"experts.{e}.gate_proj", MI, D)
            lin(m + f"experts.{e}.up_proj", MI, D)
            lin(m + f"experts.{e}.down_proj", D, MI)
        lin(m + "shared_experts.gate_proj", MI * S, D)
        lin(m + "shared_experts.up_proj", MI * S, D)
        lin(m + "shared_experts.down_proj", D, MI * S)
    norm("model.norm", D)
    lin("lm_head", V, D)
    return t


def tensor_seed(name):
    return ts_prng.fnv1a64(name.encode()) ^ BASE_SEED


def bf16_bits(x):
    """f32 -> bf16 bits, round to nearest even (values are finite)."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = ((u >> np.uint64(16)) & np.uint64(1)) + np.uint64(0x7FFF)
    return ((u + r) >> np.uint64(16)).astype(np.uint16)


def values(name, dtype, shape, base, exp):
    n = int(np.prod(shape))
    if dtype == 2:
        return e4m3_codes(tensor_seed(name), n).reshape(shape)
    u = ts_prng.uniform(tensor_seed(name), n)
    if dtype == 3:  # a scale: 2^-exp x (1 + u/4), stored f32
        return ((np.float32(1) + u * np.float32(0.25)) * np.float32(2.0 ** -exp)).astype(np.float32).reshape(shape)
    v = (np.float32(base) + u * np.float32(2.0 ** -exp)).astype(np.float32)
    if dtype == 0:
        return bf16_bits(v).reshape(shape)
    return v.reshape(shape)


def write_checkpoint(out, cfg, tab):
    import torch
    from safetensors.torch import save_file
    tensors, raw = {}, b""
    for name, dt, shape, base, exp in tab:
        v = values(name, dt, shape, base, exp)
        raw_t = v.tobytes()
        raw += raw_t
        tensors[name] = (torch.from_numpy(v.view(np.int16).copy()).view(torch.bfloat16) if dt == 0
                         else torch.from_numpy(v.copy()).view(torch.float8_e4m3fn) if dt == 2
                         else torch.from_numpy(v.copy()))
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    text = json.dumps(cfg, indent=2) + "\n"
    open(os.path.join(out, "config.json"), "w").write(text)
    return text, ts_prng.fnv1a64(raw), tensors


def check_params(model, tensors, cfg):
    """Every transformers parameter equals the table's values (f32 widening of bf16 is exact)."""
    import torch
    sd = model.state_dict()
    E = cfg["n_routed_experts"]
    seen = 0
    for L in range(cfg["num_hidden_layers"]):
        m = f"model.layers.{L}.mlp."
        if m + "experts.gate_up_proj" in sd:
            gu = torch.stack([torch.cat([tensors[m + f"experts.{e}.gate_proj.weight"],
                                         tensors[m + f"experts.{e}.up_proj.weight"]]) for e in range(E)])
            dn = torch.stack([tensors[m + f"experts.{e}.down_proj.weight"] for e in range(E)])
            assert torch.equal(sd[m + "experts.gate_up_proj"], gu.float()), m
            assert torch.equal(sd[m + "experts.down_proj"], dn.float()), m
            seen += 3 * E
    for k, v in tensors.items():
        if ".experts." in k and ".shared_experts." not in k:
            continue
        assert k in sd, f"transformers has no parameter {k}"
        assert torch.equal(sd[k], v.float()), k
        seen += 1
    assert seen == len(tensors), (seen, len(tensors))


def dequantized_model(cfg, tensors):
    """transformers 5.24 on a CPU refuses to dequantise this FP8 checkpoint ("Weight shape (576,
    256) not divisible by scale grid (5, 2)": kv_a_proj_with_mqa's 576 rows), so the f32 model
    gets code x weight_scale_inv (f32 products, per 128x128 block) here, experts merged as
    transformers merges them, and strict state-dict loading checks the names."""
    import torch
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
    plain = {k: v for k, v in cfg.items() if k != "quantization_config"}
    model = DeepseekV3ForCausalLM(DeepseekV3Config(**plain)).float().eval()
    w = {}
    for k, v in tensors.items():
        if k.endswith("_scale_inv"):
            continue
        if v.dtype == torch.float8_e4m3fn:
            s = tensors[k + "_scale_inv"]
            s = s.repeat_interleave(128, 0).repeat_interleave(128, 1)[: v.shape[0], : v.shape[1]]
            w[k] = v.float() * s
        else:
            w[k] = v.float()
    E = cfg["n_routed_experts"]
    for L in range(cfg["first_k_dense_replace"], cfg["num_hidden_layers"]):
        m = f"model.layers.{L}.mlp.experts."
        w[m + "gate_up_proj"] = torch.stack([torch.cat([w.pop(m + f"{e}.gate_proj.weight"),
                                                        w.pop(m + f"{e}.up_proj.weight")]) for e in range(E)])
        w[m + "down_proj"] = torch.stack([w.pop(m + f"{e}.down_proj.weight") for e in range(E)])
    model.load_state_dict(w, strict=True)
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fp8", action="store_true", help="the FP8 variant (tests/golden/hf_v3_fp8_tiny.bin)")
    ap.add_argument("--v32", action="store_true", help="DeepseekV32ForCausalLM (tests/golden/hf_v32_tiny.bin)")
    ap.add_argument("--out")
    ap.add_argument("--keep", help="write the checkpoint here (else a temporary directory)")
    args = ap.parse_args()
    import torch
    from transformers import DeepseekV3ForCausalLM
    torch.manual_seed(0)
    cfg = dict(CONFIG)
    if args.v32:
        cfg["architectures"] = ["DeepseekV32ForCausalLM"]
        cfg["model_type"] = "deepseek_v32"
        cfg.update(V32_EXTRA)
        from transformers import DeepseekV32ForCausalLM as Model
    else:
        Model = DeepseekV3ForCausalLM
    tab = table(cfg)
    if args.fp8:
        tab = fp8_table(tab)
        cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                      "weight_block_size": [128, 128]}
    out = args.out or os.path.join(os.path.dirname(__file__), "..", "golden",
                                   "hf_v3_fp8_tiny.bin" if args.fp8 else
                                   "hf_v32_tiny.bin" if args.v32 else "hf_v3_tiny.bin")
    ckpt = args.keep or tempfile.mkdtemp(prefix="ts_hf_v3_")
    os.makedirs(ckpt, exist_ok=True)
    text, h_data, tensors = write_checkpoint(ckpt, cfg, tab)
    if args.fp8:
        model = dequantized_model(cfg, tensors)
    else:
        model = Model.from_pretrained(ckpt, dtype=torch.float32).eval()
        check_params(model, tensors, cfg)
    V = cfg["vocab_size"]
    tokens = (ts_prng.next_u64(TOKEN_SEED, N_STEPS) >> np.uint64(32)) % np.uint64(V)
    tokens = tokens.astype(np.int32)
    from transformers import DynamicCache
    cache = DynamicCache(config=model.config)
    logits = []
    with torch.no_grad():
        for i in range(N_STEPS):
            o = model(input_ids=torch.tensor([[int(tokens[i])]]), past_key_values=cache,
                      position_ids=torch.tensor([[i]]), use_cache=True)
            cache = o.past_key_values
            logits.append(o.logits[0, -1].float().numpy())
        full = model(input_ids=torch.from_numpy(tokens.astype(np.int64))[None]).logits[0].numpy()
    logits = np.stack(logits).astype(np.float32)
    err = np.abs(full - logits).max()
    assert err < 1e-4 * np.abs(logits).max(), f"transformers prefill vs decode: {err}"
    with open(out, "wb") as f:
        tb = text.encode()
        f.write(b"TSHFV3G1")
        f.write(struct.pack("<6I", 1, N_STEPS, V, len(tab), len(tb), 0))
        f.write(struct.pack("<2Q", TOKEN_SEED, h_data))
        f.write(tb)
        for name, dt, shape, base, exp in tab:
            s = list(shape) + [0] * (3 - len(shape))
            f.write(name.encode().ljust(96, b"\0"))
            f.write(struct.pack("<2I3QfiQ", dt, len(shape), *s, base, exp, tensor_seed(name)))
        f.write(tokens.astype("<i4").tobytes())
        f.write(logits.astype("<f4").tobytes())
    print(f"{out}: {len(tab)} tensors, {N_STEPS} steps, vocab {V}; checkpoint {ckpt}; "
          f"prefill vs decode max |diff| {err:.3g}")


if __name__ == "__main__":
    main()
