#!/usr/bin/env bash
# Two hosts on one machine, for multi-node runs without a cluster: two network namespaces joined
# by a veth pair, each run under its own host name.
#
#   scripts/two-hosts.sh up                 create cbh1 (198.18.0.1) and cbh2 (198.18.0.2); cleans up first
#   scripts/two-hosts.sh run cbh1 CMD...    run CMD on host cbh1 (its own network and host name)
#   scripts/two-hosts.sh down               remove everything; safe to repeat
#   scripts/two-hosts.sh status             show the hosts' addresses, link shaping and traffic counters
#
# Example, one torchrun node per host (run each in its own terminal, or background the first):
#   sudo scripts/two-hosts.sh up
#   sudo GLOO_SOCKET_IFNAME=cb0 scripts/two-hosts.sh run cbh1 torchrun --nnodes 2 --nproc-per-node 2 \
#        --node-rank 0 --master-addr 198.18.0.1 --master-port 29500 -m commbench sweep --op all_gather
#   sudo GLOO_SOCKET_IFNAME=cb0 scripts/two-hosts.sh run cbh2 torchrun ... --node-rank 1 ...
#
# Isolation: the addresses (from 198.18.0.0/15, reserved for benchmarking) exist only inside the
# namespaces, which have no route but 198.18.0.0/24 and loopback, so their traffic cannot leave
# them. Each host also gets its own /etc/hosts naming both hosts and an empty resolv.conf (through
# `ip netns exec`'s /etc/netns/NAME/ overlay), so name lookups never try a DNS server.
#
# The link is shaped with tc netem: TWO_HOSTS_DELAY (default 200us, each way) and TWO_HOSTS_RATE
# (default 1gbit). Where the kernel has no netem (CONFIG_NET_SCH_NETEM off), the rate is applied
# with tbf and the delay is left out, with a warning; TWO_HOSTS_DELAY=0 TWO_HOSTS_RATE= leaves the
# link unshaped. TWO_HOSTS_PREFIX (default cbh) names the hosts PREFIX1 and PREFIX2, so a test can
# use its own pair beside someone's cbh1/cbh2. Needs root, iproute2 (ip, tc) and util-linux (unshare).
set -euo pipefail

PREFIX="${TWO_HOSTS_PREFIX:-cbh}"
DELAY="${TWO_HOSTS_DELAY-200us}"
RATE="${TWO_HOSTS_RATE-1gbit}"
NET="198.18.0"
IFACE="cb0"
HOSTS=("${PREFIX}1" "${PREFIX}2")

say() { echo "two-hosts: $*" >&2; }
die() { say "$*"; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root (network namespaces); run it with sudo"
for tool in ip tc unshare; do command -v "$tool" >/dev/null || die "no '$tool' here; install iproute2 and util-linux"; done
[[ "$PREFIX" =~ ^[a-z][a-z0-9]{0,9}$ ]] || die "TWO_HOSTS_PREFIX must be 1-10 lowercase letters and digits, starting with a letter"

exists() { ip netns list | awk '{print $1}' | grep -qx "$1"; }

down() {
  local host pids
  for host in "${HOSTS[@]}"; do
    if exists "$host"; then
      # Processes still inside keep the namespace alive after its name is gone: end them first.
      pids="$(ip netns pids "$host" || true)"
      if [ -n "$pids" ]; then
        kill -TERM $pids 2>/dev/null || true
        sleep 1
        kill -KILL $(ip netns pids "$host" || true) 2>/dev/null || true
      fi
      ip netns del "$host"  # takes its end of the veth pair, and with it the other end
    fi
    rm -rf "/etc/netns/$host"
  done
  rmdir /etc/netns 2>/dev/null || true  # only when nothing else lives there
}

SHAPED="unshaped"
shape() {  # shape HOST: the qdisc on that host's end of the link; SHAPED says what was applied
  local host="$1"
  if [ "$DELAY" = "0" ] && [ -z "$RATE" ]; then
    return
  fi
  local netem=(netem)
  [ "$DELAY" != "0" ] && netem+=(delay "$DELAY")
  [ -n "$RATE" ] && netem+=(rate "$RATE")
  if tc -n "$host" qdisc add dev "$IFACE" root "${netem[@]}" 2>/dev/null; then
    SHAPED="${netem[*]}"
    return
  fi
  if [ -n "$RATE" ] && tc -n "$host" qdisc add dev "$IFACE" root tbf rate "$RATE" burst 256kb latency 50ms 2>/dev/null; then
    say "warning: this kernel has no netem qdisc: $host's link is limited to $RATE (tbf) with no added delay"
    SHAPED="tbf rate $RATE (no netem: no added delay)"
    return
  fi
  say "warning: could not shape $host's link (no netem qdisc in this kernel, and tbf can apply a rate only): unshaped"
}

up() {
  down
  local i host
  for i in 1 2; do
    host="${HOSTS[$((i - 1))]}"
    ip netns add "$host"
    mkdir -p "/etc/netns/$host"
    printf '127.0.0.1 localhost\n%s.1 %s\n%s.2 %s\n' "$NET" "${HOSTS[0]}" "$NET" "${HOSTS[1]}" > "/etc/netns/$host/hosts"
    : > "/etc/netns/$host/resolv.conf"
  done
  # Both ends are created inside their namespaces: the veth never exists in this machine's own namespace.
  ip link add "$IFACE" netns "${HOSTS[0]}" type veth peer name "$IFACE" netns "${HOSTS[1]}"
  for i in 1 2; do
    host="${HOSTS[$((i - 1))]}"
    ip -n "$host" link set lo up
    ip -n "$host" addr add "$NET.$i/24" dev "$IFACE"
    ip -n "$host" link set "$IFACE" up
    shape "$host"
  done
  say "up: ${HOSTS[0]} ($NET.1) and ${HOSTS[1]} ($NET.2) on $IFACE; link: $SHAPED"
}

run() {
  [ $# -ge 2 ] || die "usage: $0 run HOST CMD..."
  local host="$1"
  shift
  [[ " ${HOSTS[*]} " == *" $host "* ]] || die "unknown host '$host'; one of ${HOSTS[*]}"
  exists "$host" || die "$host is not up; run: $0 up"
  # A UTS namespace of its own, so `hostname` (and every rank's provenance) names this host.
  exec ip netns exec "$host" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$host" "$@"
}

status() {
  local host
  for host in "${HOSTS[@]}"; do
    if exists "$host"; then
      echo "== $host"
      ip -n "$host" -br addr
      ip -n "$host" route
      tc -n "$host" qdisc show dev "$IFACE"
      ip -n "$host" -s link show "$IFACE"
    else
      echo "== $host: down"
    fi
  done
}

case "${1:-}" in
  up) up ;;
  down) down; say "down: ${HOSTS[*]} removed" ;;
  run) shift; run "$@" ;;
  status) status ;;
  *) die "usage: $0 up | down | run HOST CMD... | status" ;;
esac
