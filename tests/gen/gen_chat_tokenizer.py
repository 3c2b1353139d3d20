#!/usr/bin/env python3
"""Writes tests/golden/chat_tokenizer.json: a small byte-level BPE tokenizer.json in the shape
of DeepSeek's (GPT-2 byte alphabet, ByteLevel pre-tokenizer and decoder, the DeepSeek chat
markers as added tokens), small enough for the built-in random models (dsv4-tiny's vocabulary
is 512), for the tests of `tilestack generate` / `chat` (tests/test_generate.c,
scripts/check_generate.sh), which must not need the network.

Ids: byte b's symbol is id b (0..255); the merges' results follow from 256 (to 284); the six
markers right after them (285..290: `tokenizers` renumbers added tokens that would leave a gap
after the vocabulary, so there is none). Model ids from 291 up have no token. The ids were
checked against `tokenizers` 0.23.3. Run: python3 tests/gen/gen_chat_tokenizer.py (no
dependencies)."""
import json
import os


def bytes_to_unicode():
    """GPT-2's byte -> printable character map (the one `tokenizers`' ByteLevel uses)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B = bytes_to_unicode()
vocab = {B[b]: b for b in range(256)}
# a few English merges, left to right as BPE applies them; "Ġ" is the space byte
pairs = ["t h", "h e", "th e", "i n", "Ġ t", "Ġ a", "e r", "a n", "o n", "r e", "Ġt he",
         "Ġ w", "o r", "e n", "in g", "Ġ s", "l l", "e s", "Ġ i", "Ġi n", "a t", "Ġ o", "o u",
         "Ġ c", "e d", "Ġ h", "Ġh e", "l o", "Ġ b"]
merges = []
for p in pairs:
    a, b = p.split(" ")
    if a + b in vocab or p in merges:
        continue
    assert a in vocab and b in vocab, p
    vocab[a + b] = len(vocab)
    merges.append(p)
first = len(vocab)
markers = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
           "<think>", "</think>"]
added = [{"id": first + i, "content": m, "single_word": False, "lstrip": False, "rstrip": False,
          "normalized": False, "special": i < 2} for i, m in enumerate(markers)]
tok = {
    "version": "1.0",
    "truncation": None,
    "padding": None,
    "added_tokens": added,
    "normalizer": None,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                      "use_regex": True},
    "post_processor": None,
    "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                "use_regex": True},
    "model": {"type": "BPE", "dropout": None, "unk_token": None,
              "continuing_subword_prefix": None, "end_of_word_suffix": None,
              "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
              "vocab": vocab, "merges": merges},
}
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden", "chat_tokenizer.json")
with open(out, "w", encoding="utf-8") as f:
    json.dump(tok, f, ensure_ascii=False, indent=1)
    f.write("\n")
print(f"wrote {out}: {len(vocab)} tokens, {len(merges)} merges, markers {first}..{first + 5}")
