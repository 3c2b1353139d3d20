# Sourced by run_tests.sh and run_ep_tests.sh, which sum the "N passed, N failed" lines of the
# runs they make into total_pass / total_fail.

# fold_summary LOG: adds the last "N passed, N failed" line in the file LOG to total_pass and
# total_fail. Returns 1, adding nothing, when LOG holds no such line (a crash, a hang cut short).
fold_summary() {
  local line p f
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$1" | tail -n1)
  [ -n "$line" ] || return 1
  p=${line%% passed*}
  f=${line#*passed, }
  f=${f%% failed*}
  total_pass=$((total_pass + p))
  total_fail=$((total_fail + f))
}

# run_counted WHAT CMD...: runs CMD with its output shown and folds its summary line. A run
# without one (a crash) counts as one failure, with a message naming WHAT. Sets status=1 when
# that happens or CMD exits non-zero.
run_counted() {
  local what=$1 log rc
  shift
  log=$(mktemp)
  "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  if ! fold_summary "$log"; then
    echo "tilestack: $what crashed or printed no summary (exit $rc)" >&2
    total_fail=$((total_fail + 1))
    status=1
  fi
  rm -f "$log"
  [ "$rc" -eq 0 ] || status=1
}

# verdict NAME OK [WHY]: one check's line ("ok   NAME", or "FAIL NAME: WHY" and status=1) and
# its count in total_pass / total_fail. OK is 1 or 0.
verdict() {
  if [ "$2" = 1 ]; then
    echo "ok   $1"
    total_pass=$((total_pass + 1))
  else
    echo "FAIL $1: $3"
    total_fail=$((total_fail + 1))
    status=1
  fi
}
