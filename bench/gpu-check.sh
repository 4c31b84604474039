#!/usr/bin/env bash
# The GPU check: every NCCL and CUDA path of commbench in one short run (at most 8 minutes on one
# GPU), one summary line per check; CSVs, the log and the charts under $OUT (else a temporary
# folder). See bench/gpu_check.py for the checks.
#
#   bash bench/gpu-check.sh
#
# Without a usable CUDA GPU it says so in one line and exits 0 (CI runs it that way).
set -u
cd "$(dirname "$0")/.."
PY="${PYTHON:-$(command -v python3 || command -v python)}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "gpu-check: no usable CUDA GPU here (or torch is missing or a CPU build): nothing to check; run it on a GPU machine"
  exit 0
fi
exec "$PY" bench/gpu_check.py
