#!/usr/bin/env bash
# Checks `tilestack demo` (docs/demo.md) from the first given build directory that has the CLI:
# its self-test (option errors, TPS@TPOT selection, SVG writer), --check against the float64
# reference and the golden file (2 ranks when MPI is there, so the expert-parallel model must
# give the in-process logits bit for bit), a tiny sweep with --plot (the SVG must parse as
# XML), and bad input (exit code and a message naming the cause, never a hang). Ends with one
# "N passed, N failed" line; exit status non-zero on any failure.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=
for dir in "$@"; do
  [ -x "$dir/tilestack" ] && { bin="$dir/tilestack"; break; }
done
if [ -z "$bin" ]; then
  echo "=== demo checks: no tilestack CLI in $* (built with TS_BUILD_TOOLS=OFF) ==="
  echo "0 passed, 0 failed"
  exit 0
fi
echo "=== demo checks: $bin ==="
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Sanitizer builds under mpirun: Open MPI's own allocations are suppressed as in run_ep_tests.sh.
export LSAN_OPTIONS="suppressions=$here/tests/ep/lsan_openmpi.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export OMPI_MCA_mca_base_component_disable_dlclose=1
if grep -q '^TS_SANITIZE:BOOL=ON' "$(dirname "$bin")/CMakeCache.txt" 2>/dev/null; then
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
fi
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# expect WHAT RC NEEDLE -- ARGS...: runs `tilestack demo ARGS` (at most 300 s), wants exit
# code RC and NEEDLE somewhere in its output.
expect() {
  local what=$1 want=$2 needle=$3 rc
  shift 4
  timeout 300 "$bin" demo "$@" >"$tmp/out" 2>&1
  rc=$?
  if [ "$rc" -eq "$want" ] && grep -qF -- "$needle" "$tmp/out"; then
    pass=$((pass + 1))
    echo "ok   $what"
  else
    fail=$((fail + 1))
    echo "FAIL $what: exit $rc (want $want), output must contain '$needle':"
    tail -n 15 "$tmp/out" | sed 's/^/     /'
  fi
}

expect "selftest" 0 "0 failed" -- --selftest
expect "--check (default ranks)" 0 "check passed" -- --check --golden "$here/tests/golden/dsv4_tiny.bin"
expect "--check, 1 rank" 0 "check passed" -- --check --ranks 1 --golden "$here/tests/golden/dsv32_tiny.bin"
expect "--check both (dsv4-tiny, dsv32-tiny)" 0 "check (dsv4-tiny, dsv32-tiny) passed" -- --check --ranks 1
expect "run dsv32-tiny (attention = v32)" 0 "V3.2 attention" -- --model dsv32-tiny --context 64 \
  --batch 2 --quick --ranks 1 --no-replay
expect "--attention v32 on dsv4-tiny" 0 "656-byte" -- --model dsv4-tiny --attention v32 \
  --context 64 --batch 2 --quick --ranks 1 --no-replay
expect "sweep + plot (dsv4-tiny)" 0 "TPS@TPOT" -- --model dsv4-tiny --context 64 --sweep \
  --batch 4 --quick --ranks 1 --plot "$tmp/p.svg" --json "$tmp/p.json" --tpot-ms 1,5,1000
if command -v python3 >/dev/null 2>&1; then
  if python3 - "$tmp/p.svg" "$tmp/p.json" <<'EOF'
import json, sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
assert root.tag.endswith('svg'), root.tag
texts = [t.text for t in root.iter() if t.tag.endswith('text')]
assert all(f'B={b}' in texts for b in (1, 2, 4)), texts
j = json.load(open(sys.argv[2]))
assert [p['batch'] for p in j['sweep']] == [1, 2, 4], j['sweep']
assert len(j['tps_at_tpot']) == 3
EOF
  then pass=$((pass + 1)); echo "ok   svg parses as XML, json as JSON"
  else fail=$((fail + 1)); echo "FAIL svg / json output malformed"
  fi
fi

# bad input
printf '{"dim": 1024' >"$tmp/trunc.json"
printf '{"dim": 1000}' >"$tmp/dim.json"
printf '{"n_routed_experts": 64, "bogus": 1}' >"$tmp/key.json"
head -c 4096 /dev/urandom >"$tmp/junk.bin"
expect "bad option value" 2 "--batch" -- --batch 0
expect "bad --attention" 2 "--attention" -- --attention v5
expect "unknown option" 2 "unknown option" -- --frobnicate
expect "unknown model" 2 "dsv4-mini" -- --model nope --ranks 1
expect "config file missing" 1 "cannot open" -- --config "$tmp/none.json" --ranks 1
expect "config not JSON" 1 "invalid JSON" -- --config "$tmp/trunc.json" --ranks 1
expect "config bad value" 1 "dim" -- --config "$tmp/dim.json" --ranks 1
expect "config unknown key" 1 "bogus" -- --config "$tmp/key.json" --ranks 1
expect "context beyond the cache" 2 "max_seq_len" -- --context 8190 --ranks 1
expect "weights file junk" 1 "cannot create the model" -- --weights "$tmp/junk.bin" --ranks 1
expect "golden file junk" 1 "magic" -- --check --ranks 1 --golden "$tmp/junk.bin"
expect "--tpot-ms with an empty item" 2 "empty item" -- --tpot-ms 1,,2
expect "--tpot-ms with a trailing comma" 2 "empty item" -- --tpot-ms 1,2,
expect "--sampling topk beyond the top-k limit" 2 "--sampling" -- --sampling topk:100000
expect "--sampling topk beyond the vocabulary" 2 "vocabulary" -- --model dsv4-tiny --ranks 1 \
  --sampling topk:600
# unwritable outputs fail before the run, not after it
expect "--json into a missing directory" 1 "/nonexistent-ts-dir" -- --json /nonexistent-ts-dir/x.json \
  --model dsv4-tiny --ranks 1
expect "--plot into a missing directory" 1 "/nonexistent-ts-dir" -- --plot /nonexistent-ts-dir/x.svg \
  --model dsv4-tiny --ranks 1
expect "--json naming a directory" 1 "is a directory" -- --json "$tmp" --model dsv4-tiny --ranks 1
expect "--json and --plot naming one file" 2 "both write" -- --json "$tmp/same" --plot "$tmp/same"
# a weight file missing a tensor: save dsv4-tiny's, then cut the tensor list short in the header
if "$bin" demo --model dsv4-tiny --save-weights "$tmp/tiny.bin" >/dev/null 2>&1; then
  expect "weights round trip" 0 "tokens/s per rank" -- --weights "$tmp/tiny.bin" --ranks 1 \
    --context 32 --steps 3 --warmup 1 --batch 2
  if command -v python3 >/dev/null 2>&1 && python3 - "$tmp/tiny.bin" "$tmp/miss.bin" <<'EOF'
import json, struct, sys
b = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
victim = next(k for k in h if k.endswith('attn_norm'))
del h[victim]
hb = json.dumps(h).encode()
open(sys.argv[2], 'wb').write(struct.pack('<Q', len(hb)) + hb + b[8 + n:])
EOF
  then
    expect "weights missing a tensor" 1 "attn_norm" -- --weights "$tmp/miss.bin" --ranks 1
  fi
  # outputs that name an input are refused before anything is written
  cp "$tmp/tiny.bin" "$tmp/tiny.copy"
  expect "--json naming the --weights input" 2 "would be overwritten" -- --weights "$tmp/tiny.bin" \
    --json "$tmp/tiny.bin" --ranks 1
  ln -s "$tmp/tiny.bin" "$tmp/tiny.link"
  expect "--plot naming the --weights input via a link" 2 "would be overwritten" -- \
    --weights "$tmp/tiny.bin" --plot "$tmp/tiny.link" --ranks 1
  if cmp -s "$tmp/tiny.bin" "$tmp/tiny.copy"; then pass=$((pass + 1)); echo "ok   the weights file is intact"
  else fail=$((fail + 1)); echo "FAIL the weights file was changed"
  fi
  expect "topk beyond a --weights file's vocabulary" 2 "vocabulary" -- --weights "$tmp/tiny.bin" \
    --ranks 1 --sampling topk:600 --context 8 --steps 1 --warmup 0 --batch 1
fi
# a checkpoint directory (docs/models.md): written by export-hf, run, then broken
if "$bin" export-hf --model dsv4-tiny --out "$tmp/ckpt" >/dev/null 2>&1; then
  expect "--model DIR (a checkpoint directory)" 0 "tokens/s per rank" -- --model "$tmp/ckpt" \
    --context 32 --steps 3 --warmup 1 --batch 2
  if command -v mpirun >/dev/null 2>&1 && [ -x "$(dirname "$bin")/tilestack_ep_tests" ]; then
    # (an MPI build) each rank binds only its experts (ts_model_load_dir_ep): one load line per rank
    expect "--model DIR with --ranks 2" 0 "rank 1 of 2, experts 4..7" -- --model "$tmp/ckpt" \
      --ranks 2 --context 32 --steps 3 --warmup 1 --batch 2
  fi
  mkdir "$tmp/ckpt-bad" && cp "$tmp/ckpt/model.safetensors" "$tmp/ckpt-bad/" &&
    sed 's/"hidden_size": 256/"hidden_size": 384/' "$tmp/ckpt/config.json" >"$tmp/ckpt-bad/config.json"
  expect "--model DIR whose config.json disagrees with its tensors" 1 "embed.weight" -- \
    --model "$tmp/ckpt-bad" --context 32 --steps 3
  sed 's/DeepseekV4ForCausalLM/DeepseekV3ForCausalLM/' "$tmp/ckpt/config.json" >"$tmp/ckpt-bad/config.json"
  expect "--model DIR of another architecture" 1 "DeepseekV3ForCausalLM" -- --model "$tmp/ckpt-bad"
else
  fail=$((fail + 1)); echo "FAIL tilestack export-hf --model dsv4-tiny"
fi
# a DeepSeek-V3.2 checkpoint (tests/gen/gen_hf_v3.py's tiny one, written by tilestack_tests),
# in-process and, with an MPI build, over 2 expert-parallel ranks
if "$(dirname "$bin")/tilestack_tests" --write-hf-v3 hf_v32_tiny.bin "$tmp/ck32" >/dev/null 2>&1; then
  expect "--model DIR (V3.2)" 0 "DeepSeek-V3 MoE decode" -- --model "$tmp/ck32" --context 32 \
    --steps 3 --warmup 1 --batch 2
  if command -v mpirun >/dev/null 2>&1 && [ -x "$(dirname "$bin")/tilestack_ep_tests" ]; then
    expect "--model DIR (V3.2) with --ranks 2" 0 "rank 1 of 2, experts 8..15" -- --model "$tmp/ck32" \
      --ranks 2 --context 32 --steps 3 --warmup 1 --batch 2
  fi
else
  fail=$((fail + 1)); echo "FAIL tilestack_tests --write-hf-v3 hf_v32_tiny.bin"
fi
if command -v mpirun >/dev/null 2>&1 && "$bin" demo --help >/dev/null 2>&1; then
  # E = 64 is not divisible by 3 ranks: refused before any rank starts (or by the EP model)
  timeout 120 "$bin" demo --ranks 3 --quick >"$tmp/out" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ] && grep -qE "n_routed_experts|64|expert-parallel" "$tmp/out"; then
    pass=$((pass + 1)); echo "ok   --ranks 3 with 64 experts refused"
  else
    fail=$((fail + 1)); echo "FAIL --ranks 3: exit $rc"; tail -n 5 "$tmp/out"
  fi
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
