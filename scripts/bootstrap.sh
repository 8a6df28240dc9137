#!/usr/bin/env bash
# Installs every system package megac needs on Debian 12, idempotently; says what it installs.
set -euo pipefail

# One line per package, grouped by what needs it.
PACKAGES=(
  # toolchain
  g++ make cmake ninja-build ccache python3
  # compiler: MLIR/LLVM 22 (lit, FileCheck and not come with llvm-22-tools)
  libmlir-22-dev mlir-22-tools llvm-22-dev llvm-22-tools
  # ONNX frontend (libonnx + protobuf) and the ONNX backend node tests
  libonnx-dev libprotobuf-dev protobuf-compiler libonnx-testdata
  # support/: JSON (nlohmann/json); checkpoints' CRC32 (zlib); tools/megac's flags (CLI11)
  nlohmann-json3-dev zlib1g-dev libcli11-dev
  # TensorBoard event files' CRC-32C (Boost.CRC, header-only)
  libboost-dev
  # plans (FlatBuffers) and the CPU runtime (OpenBLAS)
  libflatbuffers-dev flatbuffers-compiler libopenblas-dev libopenmpi-dev openmpi-bin
  # unit tests
  libgtest-dev googletest
  # test oracles: PyTorch and onnx for /usr/bin/python3, and venv for the test venv
  python3-torch python3-onnx python3-numpy python3-venv
  # the Python package (python/, docs/python.md): optional for the CLI; CMake builds the module
  # when pybind11 is found (MEGAC_PYTHON), against python3-dev's headers
  pybind11-dev python3-dev
)

# The test venv (.venv, over /usr/bin/python3 with its site packages): transformers,
# onnxruntime and tensorboard from PyPI, pinned in scripts/requirements-test.txt.
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="$ROOT/.venv"
venv_ok() {
  "$VENV/bin/python" -c "import transformers, onnxruntime, tensorboard" >/dev/null 2>&1
}
make_venv() {
  echo "bootstrap: creating $VENV (pip: $(grep -v '^#' "$ROOT/scripts/requirements-test.txt" | xargs))"
  /usr/bin/python3 -m venv --system-site-packages "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$ROOT/scripts/requirements-test.txt"
}
# A venv that still cannot import its packages after make_venv fails the bootstrap here, naming
# the error: otherwise every test that needs it would skip and CI would pass without them.
ensure_venv() {
  venv_ok && return 0
  make_venv
  if ! venv_ok; then
    echo "bootstrap: the test venv $VENV was created but cannot import transformers," \
      "onnxruntime and tensorboard:" >&2
    "$VENV/bin/python" -c "import transformers, onnxruntime, tensorboard" 2>&1 | tail -n 3 >&2 ||
      true
    exit 1
  fi
}

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ "${1:-}" = "--check" ]; then
  if [ ${#missing[@]} -ne 0 ]; then
    echo "bootstrap: missing packages: ${missing[*]}"
    exit 1
  fi
  # The multi-rank tests launch ranks with mpirun (openmpi-bin): it must run, not just be listed.
  if ! mpirun --version >/dev/null 2>&1; then
    echo "bootstrap: mpirun (openmpi-bin) is installed but does not run"
    exit 1
  fi
  if ! venv_ok; then
    echo "bootstrap: the test venv $VENV lacks transformers/onnxruntime/tensorboard"
    exit 1
  fi
  exit 0
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "bootstrap: all ${#PACKAGES[@]} packages already installed"
  ensure_venv
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "bootstrap: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
ensure_venv
echo "bootstrap: done"
