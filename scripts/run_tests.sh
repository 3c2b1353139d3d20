#!/usr/bin/env bash
# Runs the test binary of each given build directory and ends with one combined
# "N passed, N failed" line. Exit status is non-zero if any build failed a test.
set -uo pipefail
total_pass=0
total_fail=0
status=0
for dir in "$@"; do
  echo "=== tests: $dir ==="
  log=$(mktemp)
  "$dir/tilestack_tests" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -n1)
  rm -f "$log"
  if [ -z "$line" ]; then
    echo "tilestack: $dir/tilestack_tests crashed or printed no summary (exit $rc)" >&2
    total_fail=$((total_fail + 1))
    status=1
    continue
  fi
  p=${line%% passed*}
  f=${line#*passed, }
  f=${f%% failed*}
  total_pass=$((total_pass + p))
  total_fail=$((total_fail + f))
  [ "$rc" -ne 0 ] && status=1
done
# Multi-rank EP tests (mpirun), folded into the same totals.
if command -v mpirun >/dev/null 2>&1; then
  log=$(mktemp)
  "$(dirname "$0")/run_ep_tests.sh" "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -n1)
  rm -f "$log"
  if [ -z "$line" ]; then
    total_fail=$((total_fail + 1))
  else
    p=${line%% passed*}
    f=${line#*passed, }
    f=${f%% failed*}
    total_pass=$((total_pass + p))
    total_fail=$((total_fail + f))
  fi
  [ "$rc" -ne 0 ] && status=1
fi
echo "${total_pass} passed, ${total_fail} failed"
exit $status
