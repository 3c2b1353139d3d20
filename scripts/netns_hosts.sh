#!/usr/bin/env bash
# Simulated hosts on this machine for multi-host EP runs under mpirun (needs root and `ip netns`).
#
#   netns_hosts.sh up N                     N (1..8) hosts h0..h(N-1): each a network namespace
#                                           ts_hK with a veth on the bridge tsbr0 (10.77.0.254/24
#                                           in the root namespace), address 10.77.0.(K+1), lo up,
#                                           and a holder process owning its own UTS namespace
#                                           (hostname hK) and mount namespace (a private tmpfs on
#                                           /dev/shm, /etc/hosts naming every host)
#   netns_hosts.sh down                     kills every process in the hosts, removes the
#                                           namespaces, veths, bridge and state (idempotent)
#   netns_hosts.sh run N RPH [--] CMD...    up N, runs `mpirun <launch options> CMD...` with RPH
#                                           ranks per host, down (always, also on a signal)
#   netns_hosts.sh mpirun_args N RPH        prints the mpirun options `run` uses
#
# scripts/netns_rsh.sh is the rsh agent mpirun uses to start orted inside a host. Host names
# h0.. and the addresses 10.77.0.1.. are both accepted by it. State: $TS_NETNS_STATE
# (default /run/tilestack-netns). Environment for `run`: TS_NETNS_TIMEOUT (seconds, default 300)
# bounds the mpirun; extra mpirun options may be given in TS_NETNS_MPIRUN_ARGS; every TS_*
# variable (but TS_NETNS_*) and ASAN_OPTIONS / LSAN_OPTIONS / UBSAN_OPTIONS reach the ranks (-x).
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
state=${TS_NETNS_STATE:-/run/tilestack-netns}
bridge=tsbr0
net=10.77.0
die() { echo "netns_hosts: $*" >&2; exit 2; }

hosts_up() { [ -f "$state/hosts" ] && wc -l <"$state/hosts" || echo 0; }

down() {
  # holders first: every process inside a host's network namespace is killed (ranks and orted
  # that outlived a killed run too), then the namespaces; a namespace's veth end goes with it
  local ns pids p all=""
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^ts_h[0-9]*$'); do
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      pids=$(ip netns pids "$ns" 2>/dev/null)
      [ -z "$pids" ] && break
      kill -KILL $pids 2>/dev/null
      all="$all $pids"
      sleep 0.1
    done
    ip netns del "$ns" 2>/dev/null
  done
  # until the killed processes are reaped (a zombie has no namespace left to find it by)
  for _ in $(seq 50); do
    for p in $all; do [ -e "/proc/$p" ] && break; p=; done
    [ -z "${p:-}" ] && break
    sleep 0.1
  done
  for ns in $(ls /sys/class/net 2>/dev/null | grep '^tsv[0-9]*$'); do ip link del "$ns" 2>/dev/null; done
  ip link show "$bridge" >/dev/null 2>&1 && ip link del "$bridge"
  rm -rf "$state"
  return 0
}

up() {
  local n=$1 k ns
  [[ "$n" =~ ^[1-8]$ ]] || die "up: N must be 1..8"
  [ "$(id -u)" -eq 0 ] || die "needs root"
  ip netns list >/dev/null 2>&1 || die "ip netns unavailable"
  down
  mkdir -p "$state" || die "cannot create $state"
  {
    echo "127.0.0.1 localhost"
    echo "$net.254 tsroot"
    for ((k = 0; k < n; k++)); do echo "$net.$((k + 1)) h$k"; done
  } >"$state/etc_hosts"
  ip link add "$bridge" type bridge || die "cannot create bridge $bridge"
  ip addr add "$net.254/24" dev "$bridge"
  ip link set "$bridge" up
  for ((k = 0; k < n; k++)); do
    ns=ts_h$k
    ip netns add "$ns" || { down; die "cannot create namespace $ns"; }
    ip link add "tsv$k" type veth peer name eth0 netns "$ns" || { down; die "cannot create veth tsv$k"; }
    ip link set "tsv$k" master "$bridge"
    ip link set "tsv$k" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$net.$((k + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    # The holder owns host k's UTS and mount namespaces for as long as the host is up: every
    # rsh call enters them (nsenter -t), so /dev/shm persists across the calls of one host.
    # Its stdin/out/err are closed so that a caller's pipe is not held open.
    ip netns exec "$ns" unshare --uts --mount --propagation private \
      sh -c 'hostname "$1" && mount -t tmpfs -o size=50%,mode=1777 tmpfs /dev/shm &&
             mount --bind "$2" /etc/hosts && echo $$ >"$3" && exec sleep 2147483647' \
      holder "h$k" "$state/etc_hosts" "$state/h$k.pid" </dev/null >/dev/null 2>"$state/h$k.err" &
    disown
    for _ in $(seq 50); do [ -s "$state/h$k.pid" ] && break; sleep 0.1; done
    [ -s "$state/h$k.pid" ] || { cat "$state/h$k.err" >&2; down; die "holder of h$k did not start"; }
    echo "h$k $net.$((k + 1)) $ns $(cat "$state/h$k.pid")" >>"$state/hosts"
  done
  echo "netns_hosts: $n hosts up:" && cat "$state/hosts"
}

mpirun_args() {
  local n=$1 rph=$2 k list=""
  for ((k = 0; k < n; k++)); do list="${list:+$list,}h$k:$rph"; done
  # plm_rsh_agent: orted is started through netns_rsh.sh in each host; the oob/btl interfaces are
  # pinned to the private network (the HNP reaches the orteds through the bridge's address).
  # routed direct: every orted talks to mpirun, none to another (no tree through the hosts).
  echo --mca plm_rsh_agent "$here/scripts/netns_rsh.sh" --mca plm_rsh_no_tree_spawn 1 \
    --mca routed direct --host "$list" -np $((n * rph)) \
    --mca btl tcp,self,vader --mca btl_tcp_if_include "$net.0/24" --mca oob_tcp_if_include "$net.0/24"
}

run() {
  local n=$1 rph=$2 rc
  shift 2
  [ "${1:-}" = -- ] && shift
  [ $# -gt 0 ] || die "run: no command"
  [[ "$rph" =~ ^[1-9][0-9]*$ ]] || die "run: RANKS_PER_HOST must be a positive number"
  trap 'down' EXIT
  trap 'exit 130' INT TERM
  up "$n" >/dev/null || exit 2
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  # ranks started through the rsh agent see only what mpirun forwards: tilestack's own
  # switches (TS_*, but this script's TS_NETNS_*) and the sanitizers' options, by name
  local v fwd=()
  for v in $(compgen -e | grep -E '^(TS_[A-Za-z0-9_]*|[AL]SAN_OPTIONS|UBSAN_OPTIONS)$' | grep -v '^TS_NETNS_'); do
    fwd+=(-x "$v")
  done
  # mpirun runs in a private mount namespace whose /etc/hosts names the hosts, so h0.. resolve
  # for it as they do inside the hosts; nothing outside changes.
  # shellcheck disable=SC2046,SC2086
  timeout --kill-after=10 "${TS_NETNS_TIMEOUT:-300}" unshare --mount --propagation private \
    sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$state/etc_hosts" \
    mpirun $(mpirun_args "$n" "$rph") "${fwd[@]}" ${TS_NETNS_MPIRUN_ARGS:-} "$@"
  rc=$?
  # what crossed the private network (the root-namespace end of each host's veth)
  local line=""
  for v in /sys/class/net/tsv*; do
    [ -e "$v/statistics/rx_bytes" ] || continue
    line="$line ${v##*/} rx=$(cat "$v/statistics/rx_bytes") tx=$(cat "$v/statistics/tx_bytes")"
  done
  echo "netns_hosts: veth bytes:$line"
  return $rc
}

case "${1:-}" in
  up) [ $# -eq 2 ] || die "usage: up N"; up "$2" ;;
  down) down ;;
  run) [ $# -ge 4 ] || die "usage: run N RANKS_PER_HOST [--] CMD..."; shift; run "$@" ;;
  mpirun_args) [ $# -eq 3 ] || die "usage: mpirun_args N RPH"; mpirun_args "$2" "$3" ;;
  *) die "usage: $0 up N | down | run N RANKS_PER_HOST [--] CMD... | mpirun_args N RPH" ;;
esac
