#!/usr/bin/env bash
# N hosts on one machine, for multi-node runs without a cluster: network namespaces joined by a
# bridge, each run under its own host name, any of them degradable (network rate, one link, CPU).
#
#   scripts/hosts.sh up N                  create hosts cbh-1 .. cbh-N (198.19.0.1 .. .N) on a bridge; cleans up first
#   scripts/hosts.sh exec HOST CMD...      run CMD on HOST (its network, its host name, its CPU limit)
#   scripts/hosts.sh slow HOST RATE [RAIL] limit HOST's traffic both ways to RATE (tc units: 200mbit), on every
#                                          rail or on RAIL alone (0, 1, ...); RATE off: unlimited
#   scripts/hosts.sh link A B RATE [BASE]  limit the traffic between hosts A and B only, both ways, to RATE, on
#                                          every rail; everything else A and B receive is limited to BASE (default 10gbit)
#   scripts/hosts.sh cpu HOST QUOTA        limit HOST's processes to QUOTA of one CPU (0.25, or 25%); QUOTA off: unlimited
#   scripts/hosts.sh down                  remove everything; safe to repeat
#   scripts/hosts.sh status                the hosts' addresses, shaping, CPU limits and traffic counters
#
# Example, one torchrun node per host, 4 hosts with one slowed to a quarter of the others' rate:
#   sudo scripts/hosts.sh up 4
#   for h in 1 2 3; do sudo scripts/hosts.sh slow cbh-$h 400mbit; done; sudo scripts/hosts.sh slow cbh-4 100mbit
#   for h in 1 2 3 4; do
#     sudo GLOO_SOCKET_IFNAME=eth0 scripts/hosts.sh exec cbh-$h torchrun --nnodes 4 --nproc-per-node 1 \
#          --node-rank $((h - 1)) --master-addr 198.19.0.1 --master-port 29500 -m commbench isolate &
#   done; wait
#
# Isolation: the bridge lives in a namespace of its own (PREFIX-sw), so neither it nor the hosts'
# addresses (from 198.18.0.0/15, reserved for benchmarking) ever exist in this machine's own
# namespace; the hosts have no route but their /24 and loopback, and their own /etc/hosts and an
# empty resolv.conf (through `ip netns exec`'s /etc/netns/NAME/ overlay), so no lookup leaves them.
#
# Shaping: `slow` puts a tbf on the host's veth (what it sends) and on its bridge port (what it
# receives). `link` puts an htb on both hosts' bridge ports with a u32 filter on the other host's
# address, so only that path is limited. `cpu` uses a cgroup v2 cpu.max where the cpu controller is
# on the v2 hierarchy, else the v1 cpu controller's cfs quota; `exec` starts commands in it.
#
# Rails: with HOSTS_RAILS=R (default 1) each host has R interfaces, eth0 .. eth(R-1), interface r on
# bridge br<r> of the switch and on a /24 of its own (HOSTS_NET's third number plus r), as a
# rail-optimised fabric cables NIC r of every host to the switch of rail r; a rank bound to ethr
# (GLOO_SOCKET_IFNAME) sends its exchanges over rail r only.
#
# HOSTS_PREFIX (default cbh-) names the hosts PREFIX1.. PREFIXN, the switch PREFIXsw and the cgroups,
# so a test can run its own cluster beside someone's; HOSTS_NET (default 198.19.0) is their /24.
# Needs root, iproute2 (ip, tc) and util-linux (unshare).
set -euo pipefail

PREFIX="${HOSTS_PREFIX:-cbh-}"
NET="${HOSTS_NET:-198.19.0}"
RAILS="${HOSTS_RAILS:-1}"
SWITCH="${PREFIX}sw"
BURST="${HOSTS_BURST:-32kb}"

say() { echo "hosts: $*" >&2; }
die() { say "$*"; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root (network namespaces); run it with sudo"
for tool in ip tc unshare; do command -v "$tool" >/dev/null || die "no '$tool' here; install iproute2 and util-linux"; done
[[ "$PREFIX" =~ ^[a-z][a-z0-9-]{0,7}$ ]] || die "HOSTS_PREFIX must be 1-8 lowercase letters, digits or '-', starting with a letter"
[[ "$NET" =~ ^198\.1[89]\.[0-9]{1,3}$ ]] || die "HOSTS_NET must be a /24 inside 198.18.0.0/15, e.g. 198.19.0"
[[ "$RAILS" =~ ^[1-8]$ ]] || die "HOSTS_RAILS must be 1 to 8 interfaces per host"
[ $((${NET##*.} + RAILS - 1)) -le 255 ] || die "HOSTS_NET $NET leaves no room for $RAILS rails' /24s; lower its third number"

iface() { echo "eth$1"; }                                 # iface RAIL: the host's interface on that rail
port() { if [ "$2" -eq 0 ]; then echo "p$1"; else echo "p$1r$2"; fi; }  # port INDEX RAIL: its bridge port
net_of() { echo "${NET%.*}.$((${NET##*.} + $1))"; }      # net_of RAIL: that rail's /24
rails_of() { ip -n "$1" -o link show | awk -F': ' '{print $2}' | sed -n 's/^eth\([0-9]\)@.*/\1/p' | sort -n; }

exists() { ip netns list | awk '{print $1}' | grep -qx "$1"; }
hosts() { ip netns list | awk '{print $1}' | grep -E "^${PREFIX}[0-9]+$" | sort -t- -k2 -n || true; }
index_of() {  # index_of HOST: its number, or die
  [[ "$1" =~ ^${PREFIX}([0-9]+)$ ]] || die "unknown host '$1'; hosts are ${PREFIX}1, ${PREFIX}2, ..."
  exists "$1" || die "$1 is not up; run: $0 up N"
  echo "${BASH_REMATCH[1]}"
}

# -- CPU limits: a cgroup per host ---------------------------------------------------------------
cgroup_dir() {  # cgroup_dir HOST: where the host's cgroup is (v2 when it has the cpu controller, else v1)
  if grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    echo "/sys/fs/cgroup/commbench-$1"
  else
    echo "/sys/fs/cgroup/cpu/commbench-$1"
  fi
}

cpu() {
  [ $# -eq 2 ] || die "usage: $0 cpu HOST QUOTA (0.25 or 25% of one CPU, or off)"
  local host="$1" quota="$2" dir period=100000 share
  index_of "$host" >/dev/null
  dir="$(cgroup_dir "$host")"
  if [ "$quota" = "off" ]; then
    [ -d "$dir" ] && { [ -f "$dir/cpu.max" ] && echo "max $period" > "$dir/cpu.max" || echo -1 > "$dir/cpu.cfs_quota_us"; }
    say "$host: CPU unlimited"
    return
  fi
  share="$(awk -v q="${quota%\%}" -v pct="$([[ $quota == *% ]] && echo 1 || echo 0)" \
    'BEGIN { s = pct ? q / 100 : q; if (s <= 0 || s > 1024) exit 1; printf "%d", s * 100000 }')" \
    || die "QUOTA must be a share of one CPU such as 0.25 or 25% (got '$quota')"
  if [ ! -d "$dir" ]; then
    if [[ "$dir" == /sys/fs/cgroup/commbench-* ]]; then
      grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control || echo +cpu > /sys/fs/cgroup/cgroup.subtree_control
    else
      [ -d /sys/fs/cgroup/cpu ] || die "no cgroup cpu controller here (neither v2 nor v1); cannot limit CPU"
    fi
    mkdir "$dir"
  fi
  if [ -f "$dir/cpu.max" ]; then
    echo "$share $period" > "$dir/cpu.max"
  else
    echo "$period" > "$dir/cpu.cfs_period_us"
    echo "$share" > "$dir/cpu.cfs_quota_us"
  fi
  # Processes already running on the host join the limit too.
  local pid
  for pid in $(ip netns pids "$host"); do echo "$pid" > "$dir/cgroup.procs" 2>/dev/null || true; done
  say "$host: CPU limited to $share us per $period us ($dir)"
}

# -- network ---------------------------------------------------------------------------------------
down() {
  local ns pids host
  for ns in $(hosts) $(exists "$SWITCH" && echo "$SWITCH"); do
    # Processes still inside keep the namespace alive after its name is gone: end them first.
    pids="$(ip netns pids "$ns" || true)"
    if [ -n "$pids" ]; then
      kill -TERM $pids 2>/dev/null || true
      sleep 1
      kill -KILL $(ip netns pids "$ns" || true) 2>/dev/null || true
    fi
    ip netns del "$ns"
  done
  for host in /etc/netns/"${PREFIX}"*; do
    [[ "$(basename "$host")" =~ ^${PREFIX}([0-9]+|sw)$ ]] && rm -rf "$host"
  done
  rmdir /etc/netns 2>/dev/null || true  # only when nothing else lives there
  for host in /sys/fs/cgroup/commbench-"${PREFIX}"* /sys/fs/cgroup/cpu/commbench-"${PREFIX}"*; do
    [ -d "$host" ] && rmdir "$host" 2>/dev/null || true
  done
}

up() {
  [ $# -eq 1 ] && [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -ge 2 ] && [ "$1" -le 250 ] || die "usage: $0 up N (2 to 250 hosts)"
  local n="$1" i r host names=""
  down
  ip netns add "$SWITCH"
  ip -n "$SWITCH" link set lo up
  for r in $(seq 0 $((RAILS - 1))); do
    ip -n "$SWITCH" link add "br$r" type bridge
    ip -n "$SWITCH" link set "br$r" up
  done
  for i in $(seq 1 "$n"); do names+="$NET.$i ${PREFIX}$i"$'\n'; done
  for i in $(seq 1 "$n"); do
    host="${PREFIX}$i"
    ip netns add "$host"
    mkdir -p "/etc/netns/$host"
    printf '127.0.0.1 localhost\n%s' "$names" > "/etc/netns/$host/hosts"
    : > "/etc/netns/$host/resolv.conf"
    ip -n "$host" link set lo up
    for r in $(seq 0 $((RAILS - 1))); do
      # Both ends are created inside namespaces: the veth never exists in this machine's own namespace.
      ip link add "$(iface "$r")" netns "$host" type veth peer name "$(port "$i" "$r")" netns "$SWITCH"
      ip -n "$SWITCH" link set "$(port "$i" "$r")" master "br$r" up
      ip -n "$host" addr add "$(net_of "$r").$i/24" dev "$(iface "$r")"
      ip -n "$host" link set "$(iface "$r")" up
    done
  done
  local rails=""
  [ "$RAILS" -gt 1 ] && rails="; $RAILS rails: eth<r> on bridge br<r> ($(net_of 1).x for rail 1, ...)"
  say "up: ${PREFIX}1 .. ${PREFIX}$n ($NET.1 .. $NET.$n) on bridge br0 in namespace $SWITCH$rails"
}

slow() {
  [ $# -ge 2 ] && [ $# -le 3 ] || die "usage: $0 slow HOST RATE [RAIL] (e.g. 100mbit, or off)"
  local host="$1" rate="$2" i r rails
  i="$(index_of "$host")"
  rails="$(rails_of "$host")"
  if [ $# -eq 3 ]; then
    grep -qx "$3" <<< "$rails" || die "$host has no rail '$3' (its rails: $(echo $rails))"
    rails="$3"
  fi
  for r in $rails; do
    if [ "$rate" = "off" ]; then
      tc -n "$host" qdisc del dev "$(iface "$r")" root 2>/dev/null || true
      tc -n "$SWITCH" qdisc del dev "$(port "$i" "$r")" root 2>/dev/null || true
      continue
    fi
    # What the host sends leaves through its veth; what it receives leaves the bridge through its port.
    tc -n "$host" qdisc replace dev "$(iface "$r")" root tbf rate "$rate" burst "$BURST" latency 50ms \
      || die "tc refused rate '$rate' (tc units, e.g. 100mbit)"
    tc -n "$SWITCH" qdisc replace dev "$(port "$i" "$r")" root tbf rate "$rate" burst "$BURST" latency 50ms
  done
  say "$host: $([ "$rate" = off ] && echo unshaped || echo "$rate both ways (tbf)") on rail(s) $(echo $rails)"
}

link() {
  [ $# -ge 3 ] && [ $# -le 4 ] || die "usage: $0 link A B RATE [BASE]"
  local a="$1" b="$2" rate="$3" base="${4:-10gbit}" ia ib r
  ia="$(index_of "$a")"
  ib="$(index_of "$b")"
  [ "$ia" != "$ib" ] || die "a link joins two different hosts"
  # On each end's bridge port (what the host receives): class 1:10 (the rest, at BASE) and class
  # 1:20 (from the other end, at RATE), chosen by a u32 filter on the source address; every rail.
  local dev from
  for r in $(rails_of "$a"); do
    for pair in "$ia:$ib" "$ib:$ia"; do
      dev="$(port "${pair%%:*}" "$r")"
      from="$(net_of "$r").${pair##*:}"
      tc -n "$SWITCH" qdisc replace dev "$dev" root handle 1: htb default 10
      tc -n "$SWITCH" class replace dev "$dev" parent 1: classid 1:10 htb rate "$base" burst "$BURST" quantum 1514
      tc -n "$SWITCH" class replace dev "$dev" parent 1: classid 1:20 htb rate "$rate" burst "$BURST" quantum 1514 \
        || die "tc refused rate '$rate' (tc units, e.g. 100mbit)"
      tc -n "$SWITCH" filter replace dev "$dev" parent 1: protocol ip prio 1 u32 match ip src "$from/32" flowid 1:20
    done
  done
  say "link $a-$b: $rate both ways (htb + u32 on both bridge ports; their other traffic at $base)"
}

run_on() {
  [ $# -ge 2 ] || die "usage: $0 exec HOST CMD..."
  local host="$1" dir
  shift
  index_of "$host" >/dev/null
  dir="$(cgroup_dir "$host")"
  # The host's CPU limit, joined here: `ip netns exec` mounts a /sys of its own, without the cgroups.
  if [ -d "$dir" ]; then echo $$ > "$dir/cgroup.procs"; fi
  # A UTS namespace of its own, so `hostname` (and every rank's provenance) names this host.
  exec ip netns exec "$host" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$host" "$@"
}

status() {
  local host i r
  for host in $(hosts); do
    i="${host#"$PREFIX"}"
    echo "== $host"
    ip -n "$host" -br addr
    for r in $(rails_of "$host"); do
      tc -n "$host" qdisc show dev "$(iface "$r")"
      tc -n "$SWITCH" qdisc show dev "$(port "$i" "$r")"
      ip -n "$host" -s link show "$(iface "$r")" | sed -n '3,6p'
    done
    [ -d "$(cgroup_dir "$host")" ] && echo "cgroup: $(cgroup_dir "$host")"
  done
}

case "${1:-}" in
  up) shift; up "$@" ;;
  down) down; say "down: ${PREFIX}* removed" ;;
  exec) shift; run_on "$@" ;;
  slow) shift; slow "$@" ;;
  link) shift; link "$@" ;;
  cpu) shift; cpu "$@" ;;
  status) status ;;
  *) die "usage: $0 up N | exec HOST CMD... | slow HOST RATE [RAIL] | link A B RATE [BASE] | cpu HOST QUOTA | down | status" ;;
esac
