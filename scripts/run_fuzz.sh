#!/usr/bin/env bash
# Fuzzes the tile compiler's front end (parse, check, lower, emit C; tests/fuzz/fuzz_tile.c)
# for a bounded time under ASan+UBSan, seeded with src/kernels/*.tile and tests/fuzz/corpus/.
# Uses libFuzzer when clang supports -fsanitize=fuzzer (built here, into <asan dir>/fuzz),
# else the build's own deterministic mutation driver (tilestack_fuzz_tile). Each input has a
# time limit (a hang fails the run); leaks fail it at exit. Ends with the runner's summary
# line. Arguments: the build dirs given to run_tests.sh; the run happens in the sanitizer one
# (TS_SANITIZE=ON in its CMakeCache.txt), else the last. TS_FUZZ_SECONDS (default 20).
# Then fuzzes the weight-file reader (ts_model_load on mutated small weight files;
# tests/fuzz/fuzz_weights.c, seeds and regression inputs in tests/fuzz/weights/) with the
# build's tilestack_fuzz_weights (the built-in driver, under the build's own sanitizers) for
# TS_FUZZ_WEIGHTS_SECONDS (default: TS_FUZZ_SECONDS), and the tokenizer reader (below). The
# summary counts the three fuzzers.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${TS_FUZZ_SECONDS:-20}
dir=""
for d in "$@"; do
  grep -q '^TS_SANITIZE:BOOL=ON' "$d/CMakeCache.txt" 2>/dev/null && dir=$d
done
[ -n "$dir" ] || dir=${!#}
work="$dir/fuzz"
mkdir -p "$work"
seeds=("$root/src/kernels" "$root/tests/fuzz/corpus")
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
# a weight file may ask for a huge model: a failed allocation must come back as
# TS_ERR_OUT_OF_MEMORY (as malloc does in a normal build), not abort the run inside ASan
wasan=${ASAN_OPTIONS}:allocator_may_return_null=1
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

have_libfuzzer() {
  command -v clang >/dev/null 2>&1 || return 1
  printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' \
    > "$work/probe.c"
  clang -fsanitize=fuzzer "$work/probe.c" -o "$work/probe" >/dev/null 2>&1
}

# libfuzzer NAME SECS SEEDS_ARRAY SOURCES... [-lLIB...]: builds $work/fuzz_NAME_libfuzzer from
# the sources (again when one of them or a header is newer) and runs it for SECS over a fresh
# corpus seeded from the directories in the array named SEEDS_ARRAY; failing inputs are saved
# as $work/NAME-*. Returns the fuzzer's exit status.
libfuzzer() {
  local name=$1 secs=$2 f stale=0
  local -n seed_dirs=$3
  shift 3
  local bin="$work/fuzz_${name}_libfuzzer" out="$work/corpus_${name}"
  [ -x "$bin" ] || stale=1
  for f in "$@" "$root"/src/*/*.h "$root"/include/tilestack/*.h; do
    [ -f "$f" ] && [ "$f" -nt "$bin" ] && stale=1
  done
  if [ "$stale" = 1 ]; then
    echo "fuzz: building the $name libFuzzer harness with clang"
    clang -std=c11 -O1 -g -D_GNU_SOURCE -ffp-contract=off -fno-math-errno \
      -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
      -I "$root/include" -I "$root/src" "$@" -lm -lpthread -o "$bin" || { echo "fuzz: $name build failed"; return 1; }
  fi
  rm -rf "$out"
  mkdir -p "$out"
  echo "fuzz: $name, libFuzzer for ${secs}s"
  "$bin" -seed=1 -max_total_time="$secs" -timeout=10 -rss_limit_mb=4096 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$work/$name-" "$out" "${seed_dirs[@]}" 2>&1 |
    grep -v "Uses: [0-9]" | tail -n 25
  return "${PIPESTATUS[0]}"
}

rc=0
if have_libfuzzer; then
  srcs=("$root/tests/fuzz/fuzz_tile.c" "$root/src/core/status.c")
  for f in "$root"/src/tile/tile_*.c; do
    case "$(basename "$f")" in tile_jit*|tile_cache*|tile_sha256*) ;; *) srcs+=("$f") ;; esac
  done
  libfuzzer tile "$secs" seeds "${srcs[@]}"
  rc=$?
else
  echo "fuzz: clang with libFuzzer not found; the built-in mutation driver for ${secs}s"
  "$dir/tilestack_fuzz_tile" -seed=1 -max_total_time="$secs" -timeout=10 -artifact_prefix="$work/tile-" "${seeds[@]}" \
    | grep -v '^1 passed, 0 failed$'
  rc=${PIPESTATUS[0]}
fi
tile_rc=$rc

# The weight-file reader: always the built-in driver (the target spans the whole library; the
# sanitizer build's tilestack_fuzz_weights has it instrumented already).
wsecs=${TS_FUZZ_WEIGHTS_SECONDS:-$secs}
wbin="$dir/tilestack_fuzz_weights"
if [ -x "$wbin" ]; then
  echo "fuzz: the weight-file reader for ${wsecs}s (built-in driver)"
  ASAN_OPTIONS=$wasan "$wbin" -seed=1 -max_total_time="$wsecs" -timeout=20 -artifact_prefix="$work/weights-" \
    "$root/tests/fuzz/weights" | grep -v '^1 passed, 0 failed$'
  wrc=${PIPESTATUS[0]}
else
  echo "fuzz: $wbin is not built" >&2
  wrc=1
fi

# The tokenizer reader (tests/fuzz/fuzz_tokenizer.c: tokenizer.json + text; seeds in
# tests/fuzz/corpus_tokenizer/): libFuzzer over src/text/ when clang has it, else the build's
# tilestack_fuzz_tokenizer, for TS_FUZZ_TOKENIZER_SECONDS (default: TS_FUZZ_SECONDS).
tsecs=${TS_FUZZ_TOKENIZER_SECONDS:-$secs}
tseeds="$root/tests/fuzz/corpus_tokenizer"
tseed_dirs=("$tseeds")
trc=0
if have_libfuzzer; then
  libfuzzer tokenizer "$tsecs" tseed_dirs "$root/tests/fuzz/fuzz_tokenizer.c" "$root/src/core/status.c" \
    "$root/src/core/file_read.c" "$root/src/core/text_escape.c" \
    "$root"/src/text/*.c -lonig -ljansson
  trc=$?
elif [ -x "$dir/tilestack_fuzz_tokenizer" ]; then
  echo "fuzz: the tokenizer reader for ${tsecs}s (built-in driver)"
  "$dir/tilestack_fuzz_tokenizer" -seed=1 -max_total_time="$tsecs" -timeout=10 \
    -artifact_prefix="$work/tokenizer-" "$tseeds" | grep -v '^1 passed, 0 failed$'
  trc=${PIPESTATUS[0]}
else
  echo "fuzz: $dir/tilestack_fuzz_tokenizer is not built" >&2
  trc=1
fi

pass=0
fail=0
if [ "$tile_rc" = 0 ]; then pass=$((pass + 1)); else
  fail=$((fail + 1))
  echo "fuzz: the tile fuzzer FAILED (exit $tile_rc); inputs that failed are saved in $work/tile-*" >&2
fi
if [ "$wrc" = 0 ]; then pass=$((pass + 1)); else
  fail=$((fail + 1))
  echo "fuzz: the weight fuzzer FAILED (exit $wrc); inputs that failed are saved in $work/weights-*" >&2
fi
if [ "$trc" = 0 ]; then pass=$((pass + 1)); else
  fail=$((fail + 1))
  echo "fuzz: the tokenizer fuzzer FAILED (exit $trc); inputs that failed are saved in $work/tokenizer-*" >&2
fi
echo "${pass} passed, ${fail} failed"
[ "$fail" = 0 ]
