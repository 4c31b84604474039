#!/usr/bin/env bash
# The GPU check: every NCCL and CUDA path of commbench in one short run (at most 5 minutes on one
# GPU), one summary line per step as it ends; CSVs, the log and the charts under $OUT (else a
# temporary folder). See bench/gpu_check.py for the steps and docs/gpu.md for their budgets.
#
#   bash bench/gpu-check.sh
#
# commbench comes from this working tree (PYTHONPATH), nothing is installed. Without a GPU it says
# so in one line and exits 0 (CI runs it that way). With a GPU that torch cannot use (torch missing,
# a CPU build, a CUDA build the driver cannot run) it fails loudly instead, with torch's version,
# its CUDA version and the driver's: a GPU machine must not pass the check having checked nothing.
set -u
cd "$(dirname "$0")/.."
PY="${PYTHON:-$(command -v python3 || command -v python)}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

# A GPU is here if the NVIDIA driver's control device exists or nvidia-smi lists one.
gpu_here() {
  [ -e /dev/nvidiactl ] && return 0
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '
}

driver_version() {
  local v=""
  command -v nvidia-smi >/dev/null 2>&1 &&
    v=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)
  [ -z "$v" ] && [ -r /proc/driver/nvidia/version ] &&
    v=$(sed -n 's/.*Kernel Module *\([0-9.]*\).*/\1/p' /proc/driver/nvidia/version | head -n 1)
  echo "${v:-unknown (nvidia-smi and /proc/driver/nvidia/version give none)}"
}

# One line on stdout: what torch is and why it cannot use a GPU (its own warning, if it gave one).
probe=$("$PY" - 2>/dev/null <<'EOF'
import sys
import warnings

try:
    import torch
except Exception as exc:  # missing, or broken by its libraries
    print(f"torch cannot be imported ({type(exc).__name__}: {exc})".splitlines()[0])
    sys.exit(1)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    usable = torch.cuda.is_available() and torch.cuda.device_count() > 0
what = f"torch {torch.__version__} (CUDA {torch.version.cuda or 'none: a CPU build'})"
if usable:
    print(what)
    sys.exit(0)
why = next((str(w.message).strip().splitlines()[0] for w in caught), "torch.cuda.is_available() is False")
print(f"{what} cannot use it: {why}")
sys.exit(1)
EOF
)
usable=$?
if [ "$usable" -ne 0 ]; then
  if gpu_here; then
    echo "gpu-check: failed: this machine has an NVIDIA GPU (driver $(driver_version)) but ${probe:-$PY did not run}; install a torch built for this driver" >&2
    exit 1
  fi
  echo "gpu-check: no usable CUDA GPU here (or torch is missing or a CPU build): nothing to check; run it on a GPU machine"
  exit 0
fi
exec "$PY" bench/gpu_check.py
