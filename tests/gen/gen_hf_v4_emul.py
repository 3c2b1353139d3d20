#!/usr/bin/env python3
"""Greedy decoding of transformers' DeepseekV4ForCausalLM with tilestack's rounding points and
kernel arithmetic patched in (tests/gen/ts_emulation.py), for
model_hf_emulated_greedy_dsv4_tiny in tests/test_model_hf_conformance.c (docs/models.md,
"Against transformers with tilestack's arithmetic patched in"). Not run in CI.

The checkpoint of gen_hf_v4.py (`tilestack export-hf --model dsv4-tiny`, hashes stored) without
its config edit: dsv4-tiny's own index_topk = 8, so the indexer's top-k chooses among the
compressed rows from position 35 on (gen_hf_v4.py raises it because plain transformers scores
the indexer in exact f32; the emulation scores it as tilestack does). Same virtual environment:

    /work/hfvenv/bin/python tests/gen/gen_hf_v4_emul.py --tilestack build/tilestack

The model runs in float64 with ts_emulation installed; a prompt of N_PROMPT tokens (splitmix64
seeded with PROMPT_SEED, token = (z >> 32) mod vocab) is fed one token per step, then N_GEN
greedy steps (argmax, ties to the lower id; the last step's token is not fed): N_PROMPT +
N_GEN - 1 forward steps.

--compare LIBTILESTACK_SO prints tilestack's per-step calc_diff against the emulation (and, with
--float64-sums K, against the emulation with float64 sums in place of kernels K) instead of
writing the golden.

Output tests/golden/hf_v4_tiny_emul.bin, little-endian:
  char magic[8] = "TSHFV4E1"
  u32 version = 1, u32 n_prompt, u32 n_gen, u32 vocab
  u64 fnv1a64(config.json), u64 fnv1a64(model.safetensors), u64 prompt_seed
  char model[32], edit_from[32], edit_to[32]   (as hf_v4_tiny.bin; empty: no edit)
  i32 tokens[n_prompt + n_gen]   (the prompt, then the greedy tokens; tokens[i] is fed at step i
                                  for i < n_prompt + n_gen - 1)
  f32 logits[n_prompt + n_gen - 1][vocab]   (step i's logits; its argmax is tokens[i + 1] from
                                             step n_prompt - 1 on)
"""
import argparse
import os
import struct
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_hf_v4  # noqa: E402
import ts_emulation  # noqa: E402
import ts_prng  # noqa: E402

PROMPT_SEED = 20261202
N_PROMPT = 8
N_GEN = 64


def emulated_run(ckpt, prompt, n_gen, f64_sums=()):
    import torch
    from transformers import DynamicCache
    m = gen_hf_v4.load_hf(ckpt).double()
    ts_emulation.install(m, os.path.join(ckpt, "config.json"), f64_sums=f64_sums)
    cache = DynamicCache(config=m.config)
    tokens = list(prompt)
    logits = []
    with torch.no_grad():
        for i in range(len(prompt) + n_gen - 1):
            out = m(input_ids=torch.tensor([[tokens[i]]]), position_ids=torch.tensor([[i]]),
                    cache=cache, use_cache=True)
            cache = out.cache
            lg = out.logits[0, -1].numpy().astype(np.float32)
            logits.append(lg)
            if i >= len(prompt) - 1:
                tokens.append(int(np.argmax(lg)))  # first maximum: ties to the lower id
            print(f"step {i}", end="\r", file=sys.stderr)
    return tokens, np.array(logits)


def tilestack_greedy(lib_path, ckpt, prompt, n_gen, vocab):
    import ctypes
    lib = ctypes.CDLL(lib_path)
    lib.ts_last_error.restype = ctypes.c_char_p
    m = ctypes.c_void_p()
    if lib.ts_model_load_dir(ckpt.encode(), ctypes.c_int64(1), ctypes.byref(m)) != 0:
        raise RuntimeError(lib.ts_last_error().decode())
    tokens, out = list(prompt), []
    seq = ctypes.c_int64(0)
    for i in range(len(prompt) + n_gen - 1):
        lg = np.zeros(vocab, np.float32)
        tok = ctypes.c_int32(tokens[i])
        if lib.ts_model_decode(m, ctypes.c_int64(1), ctypes.byref(seq), ctypes.byref(tok),
                               lg.ctypes.data_as(ctypes.c_void_p)) != 0:
            raise RuntimeError(lib.ts_last_error().decode())
        out.append(lg)
        if i >= len(prompt) - 1:
            tokens.append(int(np.argmax(lg)))
    lib.ts_model_free(m)
    return tokens, np.array(out)


def report(name, ref_tokens, ref, tokens, lg):
    d = np.array([gen_hf_v4.calc_diff(lg[i], ref[i]) for i in range(len(ref))])
    same = next((i for i in range(len(ref_tokens)) if tokens[i] != ref_tokens[i]), None)
    print(f"{name}: calc_diff max {d.max():.3g} (step {d.argmax()}), mean {d.mean():.3g}; "
          f"tokens {'identical' if same is None else f'differ from index {same}'}")
    print("  per step:", " ".join(f"{x:.1e}" for x in d))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tilestack", default="build/tilestack")
    ap.add_argument("--compare", metavar="LIBTILESTACK_SO")
    ap.add_argument("--float64-sums", action="append", default=[], metavar="KERNELS",
                    help="with --compare: also the emulation with float64 sums for these "
                    "comma-separated kernels (ts_emulation.KERNELS, or all); repeatable")
    ap.add_argument("--gen", type=int, default=N_GEN)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "golden",
                                                  "hf_v4_tiny_emul.bin"))
    args = ap.parse_args()
    import torch
    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp(prefix="ts_hf_v4e_")
    ckpt = os.path.join(tmp, "release")
    gen_hf_v4.export(args.tilestack, ckpt)
    cpath = os.path.join(ckpt, "config.json")
    h_cfg = gen_hf_v4.fnv1a64_file(cpath)
    h_st = gen_hf_v4.fnv1a64_file(os.path.join(ckpt, "model.safetensors"))
    import json
    vocab = json.load(open(cpath))["vocab_size"]
    prompt = [int(v) for v in (ts_prng.next_u64(PROMPT_SEED, N_PROMPT) >> np.uint64(32)) % np.uint64(vocab)]
    tokens, logits = emulated_run(ckpt, prompt, args.gen)
    if args.compare:
        tt, tl = tilestack_greedy(args.compare, ckpt, prompt, args.gen, vocab)
        report("tilestack vs emulated transformers", tokens, logits, tt, tl)
        for ks in args.float64_sums:
            ks = ts_emulation.KERNELS if ks == "all" else tuple(ks.split(","))
            t64, l64 = emulated_run(ckpt, prompt, args.gen, f64_sums=ks)
            report(f"tilestack vs the emulation with float64 sums for {','.join(ks)}", t64, l64, tt, tl)
        return
    n_steps = len(logits)
    with open(args.out, "wb") as f:
        f.write(b"TSHFV4E1")
        f.write(struct.pack("<IIII", 1, N_PROMPT, args.gen, vocab))
        f.write(struct.pack("<QQQ", h_cfg, h_st, PROMPT_SEED))
        f.write(gen_hf_v4.MODEL.encode().ljust(32, b"\0"))
        f.write(b"\0" * 64)  # no config edit
        f.write(np.array(tokens, "<i4").tobytes())
        f.write(logits.astype("<f4").tobytes())
    print(f"wrote {args.out}: {N_PROMPT} prompt + {args.gen} greedy tokens, {n_steps} x {vocab} logits")


if __name__ == "__main__":
    main()
