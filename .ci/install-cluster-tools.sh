#!/usr/bin/env bash
# Install what the launcher tests run for real, when missing: Open MPI's mpirun (openmpi-bin),
# SLURM's daemons and clients (slurm-wlm) and MUNGE (munge), iproute2 and util-linux for the
# two-host test (ip netns, tc, unshare), and PostgreSQL's server (postgresql: initdb and pg_ctl, under
# /usr/lib/postgresql/<version>/bin) for the history tests' throwaway server, and Prometheus (prometheus, with
# promtool), its Pushgateway (prometheus-pushgateway) and node_exporter (prometheus-node-exporter) for the metrics
# tests. Debian/Ubuntu, as root (or through sudo).
# The packages' own services are not started: tests/support/slurm_cluster.py and tests/support/prometheus_stack.py
# run private daemons.
set -euo pipefail

say() { echo "install-cluster-tools: $*" >&2; }

declare -A wanted=([mpirun]=openmpi-bin [slurmctld]=slurm-wlm [slurmd]=slurm-wlm [srun]=slurm-wlm
                   [munged]=munge [ip]=iproute2 [tc]=iproute2 [unshare]=util-linux
                   [prometheus]=prometheus [promtool]=prometheus [prometheus-pushgateway]=prometheus-pushgateway
                   [prometheus-node-exporter]=prometheus-node-exporter)
missing=()
for tool in "${!wanted[@]}"; do
  if ! command -v "$tool" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$tool" ]; then
    missing+=("${wanted[$tool]}")
  fi
done
# initdb is rarely on PATH: Debian keeps it beside the server's version.
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  missing+=(postgresql)
fi
if [ "${#missing[@]}" -eq 0 ]; then
  say "mpirun, slurmctld, slurmd, srun, munged, ip, tc, unshare, initdb, prometheus, promtool, prometheus-pushgateway and prometheus-node-exporter are all installed; nothing to do"
  exit 0
fi
packages=($(printf '%s\n' "${missing[@]}" | sort -u))

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { say "not root and no sudo: install ${packages[*]} as root"; exit 1; }
  sudo=(sudo)
fi
command -v apt-get >/dev/null || { say "no apt-get here: install ${packages[*]} with this system's package manager"; exit 1; }

say "installing ${packages[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
# policy-rc.d 101: the packages' post-install scripts must not start system munged/slurmd/postgresql/prometheus services.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
  "${sudo[@]}" chmod +x "$policy"
  created_policy=1
fi
cleanup() { if [ "$created_policy" -eq 1 ]; then "${sudo[@]}" rm -f "$policy"; fi; }
trap cleanup EXIT
"${sudo[@]}" apt-get install -y -q "${packages[@]}"
say "done: $(mpirun --version 2>/dev/null | head -1 || true); $(srun --version 2>/dev/null || true)"
