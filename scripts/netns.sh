#!/usr/bin/env bash
# Runs a command in a network namespace of its own where 10.64.0.0/10 is local (routed to `lo`):
# the addresses devcluster's pods and test servers take with a real control plane, which refuses
# loopback pod addresses in Endpoints and EndpointSlices. Everything the command starts (brokers
# on 127.0.0.1, the control plane, the pods) shares that namespace. The namespace reaches out
# (package registries, DNS) through a veth pair masqueraded by the host, and nothing outside can
# connect in. The namespace, the veth pair and the NAT table are removed when the command ends.
#
#   scripts/netns.sh CMD [ARGS...]     e.g. DEVCLUSTER_KUBERNETES=v1.34.4 scripts/netns.sh scripts/demo.sh
#
# Needs root, iproute2, nft and nsenter (util-linux). Sets net.ipv4.ip_forward=1 while it runs (back to 0 afterwards
# when it was 0 and no other of these namespaces is left).
set -euo pipefail
[ $# -gt 0 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
ns="kubeless-pods-$$"
host_if="kpods$$"
table="kubeless_pods_$$"
# A /30 for the veth pair, in 172.30.0.0/16, from the PID.
third=$(( ($$ / 64) % 256 )); fourth=$(( ($$ % 64) * 4 ))
net="172.30.$third.$fourth"
host_ip="172.30.$third.$((fourth + 1))"
ns_ip="172.30.$third.$((fourth + 2))"
forward_before="$(cat /proc/sys/net/ipv4/ip_forward)"

cleanup() {
  # Whatever the command left running in the namespace (a killed test's control plane or pods).
  local pids
  pids="$(ip netns pids "$ns" 2>/dev/null || true)"
  if [ -n "$pids" ]; then
    kill $pids 2>/dev/null || true
    sleep 2
    kill -9 $(ip netns pids "$ns" 2>/dev/null) 2>/dev/null || true
  fi
  nft delete table ip "$table" 2>/dev/null || true
  ip link delete "$host_if" 2>/dev/null || true
  ip netns delete "$ns" 2>/dev/null || true
  if [ "$forward_before" = 0 ] && ! ip netns list | grep -q '^kubeless-pods-'; then
    sysctl -qw net.ipv4.ip_forward=0 || true
  fi
}
trap cleanup EXIT

ip netns add "$ns"
ip -n "$ns" link set lo up
ip -n "$ns" route add local 10.64.0.0/10 dev lo
ip link add "$host_if" type veth peer name eth0 netns "$ns"
ip addr add "$host_ip/30" dev "$host_if"
ip link set "$host_if" up
ip -n "$ns" addr add "$ns_ip/30" dev eth0
ip -n "$ns" link set eth0 up
ip -n "$ns" route add default via "$host_ip"
sysctl -qw net.ipv4.ip_forward=1
nft add table ip "$table"
nft add chain ip "$table" post '{ type nat hook postrouting priority srcnat; }'
nft add rule ip "$table" post ip saddr "$net/30" masquerade
rc=0
# nsenter enters the network namespace only: `ip netns exec` would also remount /sys, and with it
# the cgroup mounts podman and buildah need.
nsenter --net="/run/netns/$ns" -- "$@" || rc=$?
exit "$rc"
