#!/usr/bin/env bash
# Runs a command alternately as is and with MXCSR FTZ/DAZ forced by a preloaded constructor
# (build/libts_ftz_daz.so, bench/diag/ftz_daz_preload.c), N times each (default 3), and keeps
# each run's output: the issue-17 check that no hot loop still pays for subnormals. Compare
# the medians yourself (the rows differ per suite).
#   scripts/ftz_compare.sh [-n N] [-b BUILD] -- ./build/tilestack bench gemm --quick --threads 1
set -euo pipefail
n=3
build=build
while [ $# -gt 0 ]; do
  case "$1" in
    -n) n=$2; shift 2 ;;
    -b) build=$2; shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "usage: $0 [-n N] [-b BUILD] -- COMMAND..." >&2; exit 2; }
lib="$(cd "$build" && pwd)/libts_ftz_daz.so"
[ -f "$lib" ] || { echo "$0: $lib missing (build the tools first)" >&2; exit 2; }
for i in $(seq 1 "$n"); do
  echo "=== run $i: plain"
  "$@"
  echo "=== run $i: FTZ/DAZ"
  LD_PRELOAD="$lib${LD_PRELOAD:+:$LD_PRELOAD}" "$@"
done
