#!/usr/bin/env bash
# Peer loss and launcher death (docs/demo.md "Stopping a run", docs/ep.md "Timeouts"), from the
# first given build directory that has the CLI (and the EP test binary, where built):
#   - `tilestack demo --ranks 2` whose launcher gets SIGTERM, then another whose launcher gets
#     SIGKILL: within a bounded time no process of the run is left (tilestack, mpirun, prterun,
#     orted) and no /dev/shm entry of it;
#   - one rank SIGSTOPped: the other ends the job within the --timeout bound, with
#     TS_ERR_TIMEOUT naming the stopped rank, and nothing is left either;
#   - the EP test driver with its last rank stopped between tests (--stop-test): the same;
#   - the internal rank mode cannot be reached from the command line (--rank-mode: exit 2; the
#     only check without MPI).
# A run's processes are found by a marker in their environment (other runs may share the
# machine); its /dev/shm entries are the ones its ranks map, and any new entry no live process
# maps. Ends with one "N passed, N failed" line; exit status non-zero on any failure.
set -uo pipefail
bin= ep=
for dir in "$@"; do
  [ -z "$bin" ] && [ -x "$dir/tilestack" ] && bin="$dir/tilestack"
  [ -z "$ep" ] && [ -x "$dir/tilestack_ep_tests" ] && ep="$dir/tilestack_ep_tests"
done
if [ -z "$bin" ]; then
  echo "=== peer-loss checks: no tilestack CLI in $* (built with TS_BUILD_TOOLS=OFF) ==="
  echo "0 passed, 0 failed"
  exit 0
fi
echo "=== peer-loss checks: $bin ==="
here=$(cd "$(dirname "$0")/.." && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Sanitizer builds under mpirun: Open MPI's own allocations are suppressed as in run_ep_tests.sh.
export LSAN_OPTIONS="suppressions=$here/tests/ep/lsan_openmpi.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export OMPI_MCA_mca_base_component_disable_dlclose=1
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; [ -f "$tmp/out" ] && tail -n 12 "$tmp/out" | sed 's/^/     /'; }

# Rank mode is internal (every build).
timeout 30 "$bin" demo --rank-mode >"$tmp/out" 2>&1
rc=$?
if [ "$rc" -eq 2 ] && grep -q "unknown option '--rank-mode'" "$tmp/out"; then ok "--rank-mode refused (exit 2)"
else bad "--rank-mode: exit $rc (want 2, unknown option)"; fi
if ! command -v mpirun >/dev/null 2>&1 || ! ldd "$bin" 2>/dev/null | grep -q libmpi; then
  echo "(the multi-rank checks need a CLI built with MPI, and mpirun)"
  echo "$pass passed, $fail failed"
  [ "$fail" -eq 0 ]
  exit
fi

# pids_of MARK: live (not zombie) processes whose environment holds TS_PEER_LOSS_MARK=MARK.
pids_of() {
  local f pid
  for f in $(grep -lxzF "TS_PEER_LOSS_MARK=$1" /proc/[0-9]*/environ 2>/dev/null); do
    pid=${f#/proc/}; pid=${pid%/environ}
    [ "$(ps -o stat= -p "$pid" 2>/dev/null | cut -c1)" = Z ] || echo "$pid"
  done
}
# rank_pid MARK R: the process of rank R.
rank_pid() {
  local pid
  for pid in $(pids_of "$1"); do
    grep -qxzF "OMPI_COMM_WORLD_RANK=$2" "/proc/$pid/environ" 2>/dev/null && { echo "$pid"; return; }
  done
}
shm_list() { ls -A /dev/shm 2>/dev/null | sort; }
# shm_mapped PIDS...: /dev/shm names those processes map.
shm_mapped() {
  local pid
  for pid in "$@"; do
    grep -o '/dev/shm/[^ ]*' "/proc/$pid/maps" 2>/dev/null | sed 's|^/dev/shm/||'
  done | sort -u
}
# leftovers BEFORE_FILE OURS_FILE: entries new since BEFORE that are ours or that no live
# process maps (an entry another live run maps is that run's).
leftovers() {
  local e
  comm -13 "$1" <(shm_list) | while read -r e; do
    [ -n "$e" ] || continue
    if grep -qxF -- "$e" "$2" || ! grep -qsF -- "/dev/shm/$e" /proc/[0-9]*/maps; then echo "$e"; fi
  done
}
# gone MARK SECONDS: waits until no process of the run is left; false after SECONDS.
gone() {
  local end=$((SECONDS + $2))
  while [ "$SECONDS" -lt "$end" ]; do
    [ -z "$(pids_of "$1")" ] && return 0
    sleep 0.1
  done
  [ -z "$(pids_of "$1")" ]
}
# start MARK ARGS...: `tilestack demo --ranks 2 ARGS` in the background (its pid in $launcher),
# then waits (at most 60 s) until both ranks run and have mapped their MPI segments.
start() {
  local mark=$1 r0 r1 end=$((SECONDS + 60))
  shift
  TS_PEER_LOSS_MARK=$mark "$bin" demo --ranks 2 --threads 1 --context 16 --batch 2 \
    --no-replay "$@" >"$tmp/out" 2>&1 &
  launcher=$!
  disown "$launcher" # killed on purpose: no "Killed" notice from bash
  while [ "$SECONDS" -lt "$end" ]; do
    r0=$(rank_pid "$mark" 0) r1=$(rank_pid "$mark" 1)
    if [ -n "$r0" ] && [ -n "$r1" ] && [ -n "$(shm_mapped "$r0" "$r1")" ]; then
      shm_mapped "$r0" "$r1" >"$tmp/ours"
      return 0
    fi
    kill -0 "$launcher" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
# cleanup MARK: ends whatever a failed check left (so later checks and runs are not disturbed).
cleanup() {
  local pid
  for pid in $(pids_of "$1"); do kill -CONT "$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null; done
  wait "$launcher" 2>/dev/null
}

# 1-2. The launcher killed: mpirun and both ranks must go, and their /dev/shm segments.
for sig in TERM KILL; do
  mark="peerloss.$$.$sig.$RANDOM"
  shm_list >"$tmp/before"
  # dsv4-mini, 2000 steps: minutes of work, so orphans would still run at the deadline
  if ! start "$mark" --model dsv4-mini --steps 2000 --warmup 1; then
    bad "launcher SIG$sig: the run did not start"
    cleanup "$mark"
    continue
  fi
  kill -"$sig" "$launcher"
  t0=$SECONDS
  if gone "$mark" 20; then
    ok "launcher SIG$sig: no process of the run left ($((SECONDS - t0)) s)"
  else
    bad "launcher SIG$sig: left running after 20 s: $(ps -o pid=,comm= -p "$(pids_of "$mark" | paste -sd,)" | paste -sd' ')"
  fi
  cleanup "$mark"
  left=$(leftovers "$tmp/before" "$tmp/ours" | paste -sd" ")
  if [ -z "$left" ]; then ok "launcher SIG$sig: no /dev/shm entry of the run left"
  else bad "launcher SIG$sig: left in /dev/shm: $left"; fi
done

# 3. One rank stopped: the other must end the job within the bound, naming it.
mark="peerloss.$$.STOP.$RANDOM"
timeout_s=3
shm_list >"$tmp/before"
if start "$mark" --model dsv4-tiny --steps 200 --warmup 2 --timeout "$timeout_s"; then
  # past model creation, so the stop lands in the timed steps
  end=$((SECONDS + 60))
  while [ "$SECONDS" -lt "$end" ] && ! grep -q "model ready" "$tmp/out"; do sleep 0.1; done
  victim=$(rank_pid "$mark" 1)
  kill -STOP "$victim"
  t0=$SECONDS
  bound=$((3 * timeout_s + 15)) # the wait, MPI_Abort, mpirun's SIGTERM-then-SIGKILL teardown
  if gone "$mark" "$bound"; then
    if grep -Eq "TS_ERR_TIMEOUT|did not arrive" "$tmp/out" && grep -Eq "for rank 1[,) ]|for rank 1$" "$tmp/out"; then
      ok "rank 1 stopped: rank 0 ended the job naming rank 1 ($((SECONDS - t0)) s, --timeout $timeout_s)"
    else
      bad "rank 1 stopped: the job ended without a timeout naming rank 1"
    fi
  else
    bad "rank 1 stopped: the job still runs after $bound s (--timeout $timeout_s)"
  fi
  cleanup "$mark"
  left=$(leftovers "$tmp/before" "$tmp/ours" | paste -sd" ")
  if [ -z "$left" ]; then ok "rank 1 stopped: no /dev/shm entry of the run left"
  else bad "rank 1 stopped: left in /dev/shm: $left"; fi
else
  bad "rank 1 stopped: the run did not start"
  cleanup "$mark"
fi

# 4. The EP test driver: its last rank stops between tests.
if [ -n "$ep" ]; then
  mark="peerloss.$$.EP.$RANDOM"
  t0=$SECONDS
  TS_PEER_LOSS_MARK=$mark TS_EP_TEST_WAIT_S=2 timeout 60 mpirun --oversubscribe -np 2 "$ep" --stop-test \
    >"$tmp/out" 2>&1 &
  launcher=$!
  if gone "$mark" 30 && grep -q "TS_ERR_TIMEOUT.*for rank 1," "$tmp/out"; then
    ok "ep driver, rank 1 stopped: rank 0 ended the job naming rank 1 ($((SECONDS - t0)) s)"
  else
    bad "ep driver, rank 1 stopped: no timeout naming rank 1 within 30 s"
  fi
  cleanup "$mark"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
