#!/usr/bin/env bash
# rsh agent for the simulated hosts of scripts/netns_hosts.sh: `netns_rsh.sh [-x] HOST CMD...`
# runs CMD (joined into one shell command line, as ssh does) inside HOST's network, UTS and
# mount namespaces (those of its holder process). HOST: a name h0.. or an address 10.77.0.1..
# (ssh-style options before HOST, which mpirun may pass, are ignored).
set -u
state=${TS_NETNS_STATE:-/run/tilestack-netns}
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
[ $# -ge 2 ] || { echo "usage: netns_rsh.sh HOST CMD..." >&2; exit 255; }
host=$1
shift
pid=$(awk -v h="$host" '$1 == h || $2 == h { print $4 }' "$state/hosts" 2>/dev/null)
[ -n "$pid" ] || { echo "netns_rsh: no such host: $host (is netns_hosts.sh up?)" >&2; exit 255; }
exec nsenter -t "$pid" --net --uts --mount -- /bin/sh -c "$*"
