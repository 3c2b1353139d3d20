#!/usr/bin/env bash
# Runs the multi-rank EP tests of each given build directory under mpirun at 1, 2, 4 and 8
# ranks (sanitizer builds: 1 and 2), again with the internode path forced
# (TS_EP_RANKS_PER_NODE), then the fault drill (normal and low-latency buffers) on one node and
# with every rank its own node (a rank is SIGKILLed after creating its buffer; no shared-memory segment may be left in
# /dev/shm). Ends with one combined
# "N passed, N failed" line; exit status non-zero on any failure. Directories without
# tilestack_ep_tests (built without MPI) are skipped.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/scripts/test_summary.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Open MPI keeps allocations until exit; the suppressions match only its own stacks, which the
# slow unwinder can see (Open MPI has no frame pointers) once plugins stay loaded.
export LSAN_OPTIONS="suppressions=$here/tests/ep/lsan_openmpi.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export OMPI_MCA_mca_base_component_disable_dlclose=1
total_pass=0
total_fail=0
status=0
shm_entries() { ls /dev/shm 2>/dev/null | grep '^tilestack_ep\.' | sort; }
for dir in "$@"; do
  bin="$dir/tilestack_ep_tests"
  [ -x "$bin" ] || { echo "=== ep tests: $dir (not built: no MPI) ==="; continue; }
  ranks="1 2 4 8"
  asan_opts=${ASAN_OPTIONS:-}
  if grep -q '^TS_SANITIZE:BOOL=ON' "$dir/CMakeCache.txt" 2>/dev/null; then
    ranks="1 2"
    asan_opts="${asan_opts:+$asan_opts:}fast_unwind_on_malloc=0"
  fi
  # The last entry runs the generic kernels (TS_ISA=generic) against the same oracle.
  for np in $ranks 2g; do
    isa=${TS_ISA:-}
    if [ "$np" = 2g ]; then np=2; isa=generic; fi
    echo "=== ep tests: $dir, $np ranks${isa:+, TS_ISA=$isa} ==="
    run_counted "$bin at $np ranks" env TS_ISA="$isa" ASAN_OPTIONS="$asan_opts" \
      timeout 300 mpirun --oversubscribe -np "$np" "$bin"
  done
  # The internode path forced on this machine: nodes of k consecutive ranks (k = 1: every
  # rank its own node) reach each other through MPI. Only the ep_ tests (normal mode and
  # low latency both take the internode path).
  internode="1:2 1:4 2:4 1:8 2:8"
  [ "$ranks" = "1 2" ] && internode="1:2"
  for kn in $internode; do
    k=${kn%%:*} np=${kn##*:}
    echo "=== ep tests: $dir, $np ranks, TS_EP_RANKS_PER_NODE=$k ==="
    run_counted "$bin at $np ranks, $k per node" env TS_EP_RANKS_PER_NODE="$k" ASAN_OPTIONS="$asan_opts" \
      timeout 300 mpirun --oversubscribe -np "$np" "$bin" ep_
  done
  # normal mode and low latency (mode "ll"), each on one node and with every rank its own node
  for km in 3: 1: 3:ll 1:ll; do
    k=${km%%:*} mode=${km##*:}
    echo "=== ep fault drill: $dir (rank 2 of 3 killed, TS_EP_RANKS_PER_NODE=$k${mode:+, $mode}) ==="
    before=$(shm_entries)
    # Survivors must report TS_ERR_TIMEOUT naming the dead rank (not hang), then exit.
    drill=$(TS_EP_RANKS_PER_NODE=$k ASAN_OPTIONS=$asan_opts:detect_leaks=0 timeout 120 mpirun --oversubscribe \
      --mca orte_abort_on_non_zero_status 0 -np 3 "$bin" --kill-test $mode 2>&1)
    after=$(shm_entries)
    timeouts=$(echo "$drill" | grep -c 'TS_ERR_TIMEOUT.*for rank 2')
    verdict "ep_kill_survivors_time_out ($k per node${mode:+, $mode})" "$([ "$timeouts" -eq 2 ] && echo 1)" \
      "$timeouts of 2 survivors reported the timeout"
    [ "$timeouts" -eq 2 ] || echo "$drill" | tail -n 20
    # Names are tilestack_ep.<pid>.<serial>.<rank>: a segment of a live process is another run's
    # buffer being created right now (other test runs may share the machine), not a leak.
    leftover=$(comm -13 <(echo "$before") <(echo "$after") | grep . | while read -r seg; do
      pid=${seg#tilestack_ep.}; pid=${pid%%.*}
      kill -0 "$pid" 2>/dev/null || echo "$seg"
    done || true)
    verdict "ep_kill_leaves_no_segment ($k per node${mode:+, $mode})" "$([ -z "$leftover" ] && echo 1)" \
      "left in /dev/shm: $leftover"
  done
  # Where the machine allows it (root, ip netns; TS_EP_NETNS=0 turns it off): the whole
  # multi-rank suite across simulated hosts (scripts/netns_hosts.sh: network namespaces on a
  # private bridge, each with its own hostname and /dev/shm), so the machines' own split finds
  # the nodes and the internode traffic goes over TCP on 10.77.0.0/24. Tests that force nodes
  # fit them to the machines found (g_ep_machine_ranks): the one-node comparisons take the
  # machines as nodes, the fused Mega MoE calls are checked to refuse and the unfused pipeline
  # takes their checks. netns_hosts.sh run tears the hosts down on any exit (trap) and bounds
  # mpirun (timeout).
  netns_why=
  if [ "${TS_EP_NETNS:-1}" = 0 ]; then netns_why="TS_EP_NETNS=0"
  elif [ "$(id -u)" -ne 0 ]; then netns_why="needs root"
  elif ! ip netns list >/dev/null 2>&1 || ! command -v nsenter >/dev/null || ! command -v unshare >/dev/null; then
    netns_why="ip netns / nsenter / unshare unavailable"
  elif [ "$ranks" = "1 2" ]; then netns_why="sanitizer build"
  elif ! probe_err=$("$here/scripts/netns_hosts.sh" up 1 2>&1 >/dev/null); then
    netns_why="a namespace host cannot be made here: $(echo "$probe_err" | tail -n1)"
    "$here/scripts/netns_hosts.sh" down >/dev/null 2>&1
  else "$here/scripts/netns_hosts.sh" down >/dev/null 2>&1
  fi
  if [ -n "$netns_why" ]; then
    echo "=== ep tests across network-namespace hosts: $dir: skipped ($netns_why) ==="
  else
    # the ranks see the launcher's TS_* switches (netns_hosts.sh forwards them)
    probe=$(TS_EP_NETNS_PROBE=fwd$$ TS_NETNS_TIMEOUT=60 "$here/scripts/netns_hosts.sh" run 2 1 -- \
      sh -c 'echo "probe $(hostname) $TS_EP_NETNS_PROBE"' 2>&1 | grep -c "^probe h[01] fwd$$\$")
    verdict ep_netns_env_forwarded "$([ "$probe" -eq 2 ] && echo 1)" "$probe of 2 ranks saw TS_EP_NETNS_PROBE"
    for hr in 2:1 2:2 4:1 4:2; do
      h=${hr%%:*} r=${hr##*:}
      echo "=== ep tests: $dir, $h network-namespace hosts x $r ranks ==="
      log=$(mktemp)
      # shellcheck disable=SC2016
      run_counted "$bin on $h netns hosts x $r" bash -c 'set -o pipefail; "$@" 2>&1 | tee "$0"' "$log" \
        env TS_NETNS_TIMEOUT=540 "$here/scripts/netns_hosts.sh" run "$h" "$r" -- "$bin"
      # every host's veth carried traffic: the ranks talked over the private network
      quiet=$(grep '^netns_hosts: veth bytes:' "$log" | tail -n1 | tr ' ' '\n' | grep -c '^rx=[0-9]\{1,5\}$')
      verdict "ep_netns_traffic_on_private_net ($h x $r)" \
        "$(grep -q '^netns_hosts: veth bytes: tsv' "$log" && [ "$quiet" -eq 0 ] && echo 1)" \
        "a veth carried under 100 kB or none was read"
      rm -f "$log"
    done
  fi
done
echo "${total_pass} passed, ${total_fail} failed"
exit $status
