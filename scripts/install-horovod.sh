#!/usr/bin/env bash
# Build and install Horovod 0.28.1 into the current Python environment, against the torch that is
# already installed. Horovod's CMake files pin C++14, but torch >= 2.1 headers need C++17, so we
# build through a compiler wrapper that rewrites -std=c++14 into -std=c++17.
# Gloo/CPU by default; NCCL ops as well when nvcc/CUDA is found. pip caches the built wheel.
set -euo pipefail

HOROVOD_VERSION="${HOROVOD_VERSION:-0.28.1}"
PY="${PYTHON:-python}"

die() { echo "install-horovod: $*" >&2; exit 1; }
say() { echo "install-horovod: $*" >&2; }

command -v "$PY" >/dev/null || die "no '$PY' on PATH; activate the environment commbench is installed in"
"$PY" -c "import torch" 2>/dev/null \
  || die "torch is not installed in $("$PY" -c 'import sys; print(sys.prefix)'); install it first (pip install torch==2.13.0)"
CXX_REAL="${CXX_REAL:-$(command -v g++ || command -v c++ || true)}"
[ -n "$CXX_REAL" ] || die "no C++ compiler found (g++); install one (apt-get install g++)"
command -v gcc >/dev/null || die "no C compiler found (gcc); install one (apt-get install gcc)"
include="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
[ -f "$include/Python.h" ] || die "no Python headers in $include; install them (apt-get install python3-dev, or a full Python build)"

reinstall=()
if "$PY" -c "import horovod.torch as hvd, sys; sys.exit(0 if hvd.gloo_built() else 1)" 2>/dev/null; then
  say "horovod.torch already importable with Gloo: $("$PY" -c 'import horovod; print(horovod.__version__)'); nothing to do"
  exit 0
elif "$PY" -c "import horovod" 2>/dev/null; then
  # Installed, but its extension does not load (built against another torch) or lacks Gloo:
  # rebuild from source against this torch rather than reuse a cached, mismatched wheel.
  say "horovod is installed but horovod.torch does not import with Gloo here; rebuilding it against torch $("$PY" -c 'import torch; print(torch.__version__)')"
  reinstall=(--force-reinstall --no-deps --no-cache-dir)
fi

say "installing build prerequisites (cmake<4, packaging, wheel)"
"$PY" -m pip install -q "cmake>=3.13,<4" packaging wheel

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cat > "$work/cxx17" <<WRAP
#!/usr/bin/env bash
args=()
for a in "\$@"; do
  case "\$a" in -std=c++14|-std=gnu++14) a=-std=c++17 ;; esac
  args+=("\$a")
done
exec "$CXX_REAL" "\${args[@]}"
WRAP
chmod +x "$work/cxx17"

export CXX="$work/cxx17" CC="${CC:-gcc}"
export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1
export HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1
export CMAKE_POLICY_VERSION_MINIMUM=3.5
if [ -n "${HOROVOD_GPU_OPERATIONS:-}${HOROVOD_CPU_OPERATIONS:-}" ]; then
  say "using your HOROVOD_GPU_OPERATIONS='${HOROVOD_GPU_OPERATIONS:-}' HOROVOD_CPU_OPERATIONS='${HOROVOD_CPU_OPERATIONS:-}'"
elif "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null && command -v nvcc >/dev/null; then
  say "CUDA found: building with NCCL ops (HOROVOD_GPU_OPERATIONS=NCCL)"
  export HOROVOD_GPU_OPERATIONS=NCCL
else
  say "no CUDA: building the CPU/Gloo flavour"
  export HOROVOD_CPU_OPERATIONS=GLOO
fi

say "building horovod==$HOROVOD_VERSION (about 7 minutes on 2 cores the first time; pip caches the wheel)"
MAKEFLAGS="-j$(nproc)" "$PY" -m pip install --no-build-isolation ${reinstall[@]+"${reinstall[@]}"} "horovod==$HOROVOD_VERSION" \
  || die "the build failed; see pip's output above"

"$PY" - <<'CHECK' || die "horovod installed but horovod.torch does not import or lacks Gloo"
import horovod.torch as hvd
assert hvd.gloo_built(), "built without Gloo"
print("install-horovod: ok, horovod", __import__("horovod").__version__, "with Gloo")
CHECK
