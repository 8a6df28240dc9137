#!/usr/bin/env bash
# Preflight of scripts/device-check.sh on the GPU machine: within 10 s, either the staged
# programs can start and see a GPU, or ONE line says why not:
#   preflight: FATAL: <what is wrong, and what was tried>
# and the exit status is 1. Checked in this order (each external command under its own timeout):
#   1. the staged programs (.device-carry/bin) are there;
#   2. the NVIDIA driver: its version from nvidia-smi (else /proc/driver/nvidia/version, else
#      libcuda.so.1's file name); CUDA 13 needs >= 580. An older driver is tried with the
#      forward-compatibility libcuda of $CUDA_COMPAT (/usr/local/cuda/compat) on LD_LIBRARY_PATH;
#   3. every library every staged program needs is found (`ldd` prints no "not found"), with the
#      library path: the staged libraries, CUDA's, and the nvidia/*/lib folders of python3's
#      wheels. NCCL is not among them: megac opens libnccl.so.2 at run time (NcclApi.cpp), so
#      its absence is not fatal; a note says where it was found, or that only the NCCL step and
#      multi-GPU runs will fail (it is not staged: 208 MiB);
#   4. a staged GPU test starts with no tests selected: the CUDA runtime sees a usable device
#      (what every binary does first; a driver too old for the runtime fails here).
# On success the last line is `preflight: ok (...)` and $PREFLIGHT_ENV (if set) receives the
# `export LD_LIBRARY_PATH=...` that device-check.sh sources.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
STAGE=${STAGE:-.device-carry}
MIN_DRIVER=${MIN_DRIVER:-580}
CUDA_COMPAT=${CUDA_COMPAT:-/usr/local/cuda/compat}
BIN="$PWD/$STAGE/bin"

fatal() {
  echo "preflight: FATAL: $*"
  exit 1
}
note() { echo "preflight: $*"; }

# 1. The staged programs.
[ -d "$BIN" ] || fatal "no $STAGE/bin: run scripts/device-prepare.sh here first and carry $STAGE"
programs=()
for b in "$BIN"/*; do
  [ -f "$b" ] && [ -x "$b" ] && programs+=("$b")
done
[ ${#programs[@]} -gt 0 ] || fatal "$STAGE/bin holds no programs: run scripts/device-prepare.sh"

# The library path: staged, CUDA's, and the NVIDIA wheels of the machine's Python (NCCL may
# only be there).
PYLIBS=$(timeout 5 python3 - <<'PY' 2>/dev/null
import glob, os, site
dirs = set()
bases = site.getsitepackages() + [site.getusersitepackages()]
for base in bases:
    for pattern in ("nvidia/*/lib", "nvidia/cu*/lib"):
        dirs.update(glob.glob(os.path.join(base, pattern)))
print(":".join(sorted(dirs)))
PY
)
LIBPATH="$PWD/$STAGE/lib:/usr/local/cuda/lib64${PYLIBS:+:$PYLIBS}"

# 2. The driver.
version_major() { printf '%s' "${1%%.*}"; }
driver="" source_of=""
if command -v nvidia-smi >/dev/null 2>&1; then
  smi=$(timeout 5 nvidia-smi --query-gpu=driver_version,name,memory.total --format=csv,noheader \
        2>&1)
  rc=$?
  if [ $rc -eq 0 ] && [ -n "$smi" ]; then
    driver=$(printf '%s\n' "$smi" | head -1 | cut -d, -f1 | tr -d ' ')
    source_of="nvidia-smi"
    note "GPU: $(printf '%s\n' "$smi" | head -1) ($(printf '%s\n' "$smi" | wc -l) GPU(s))"
  elif [ $rc -eq 124 ]; then
    fatal "nvidia-smi did not answer within 5 s (the driver or the GPU is stuck)"
  elif [ $rc -eq 0 ]; then
    fatal "nvidia-smi lists no GPU"
  else
    note "nvidia-smi failed (exit $rc): $(printf '%s' "$smi" | head -1)"
  fi
fi
if [ -z "$driver" ] && [ -r /proc/driver/nvidia/version ]; then
  driver=$(grep -o 'Kernel Module[^0-9]*[0-9][0-9.]*' /proc/driver/nvidia/version | \
           grep -o '[0-9][0-9.]*$' | head -1)
  source_of="/proc/driver/nvidia/version"
fi
if [ -z "$driver" ]; then
  libcuda=$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 /{print $NF; exit}')
  if [ -n "$libcuda" ]; then
    driver=$(basename "$(readlink -f "$libcuda")" | sed -n 's/^libcuda\.so\.\([0-9][0-9.]*\)$/\1/p')
    source_of="$libcuda"
  fi
fi
[ -n "$driver" ] || fatal "no NVIDIA driver found (no working nvidia-smi, no /proc/driver/nvidia/version, no libcuda.so.1 in ldconfig): no GPU test can run"
case "$(version_major "$driver")" in
  ''|*[!0-9]*) fatal "cannot read the NVIDIA driver version from $source_of: '$driver'" ;;
esac
if [ "$(version_major "$driver")" -lt "$MIN_DRIVER" ]; then
  compat=""
  for lib in "$CUDA_COMPAT"/libcuda.so.*.*; do
    [ -e "$lib" ] && compat=${lib##*/libcuda.so.} && break
  done
  if [ -z "$compat" ]; then
    fatal "NVIDIA driver $driver (from $source_of) is older than CUDA 13 needs (>= $MIN_DRIVER), and $CUDA_COMPAT has no forward-compatibility libcuda.so: every GPU test would exit 77"
  fi
  if [ "$(version_major "$compat")" -lt "$MIN_DRIVER" ]; then
    fatal "NVIDIA driver $driver is older than CUDA 13 needs (>= $MIN_DRIVER), and $CUDA_COMPAT's libcuda is $compat, older too"
  fi
  note "driver $driver < $MIN_DRIVER: trying the forward-compatibility libcuda $compat of $CUDA_COMPAT"
  LIBPATH="$CUDA_COMPAT:$LIBPATH"
else
  note "driver $driver (from $source_of; CUDA 13 needs >= $MIN_DRIVER)"
fi
export LD_LIBRARY_PATH="$LIBPATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# 3. The libraries of every staged program.
declare -A needers=()
for b in "${programs[@]}"; do
  out=$(timeout 5 ldd "$b" 2>&1)
  rc=$?
  [ $rc -eq 124 ] && fatal "ldd $(basename "$b") did not answer within 5 s"
  missing=0
  while read -r lib; do
    [ -n "$lib" ] || continue
    needers[$lib]="${needers[$lib]:+${needers[$lib]}, }$(basename "$b")"
    missing=$((missing + 1))
  done < <(printf '%s\n' "$out" | awk '/not found/ {print $1}')
  if [ $rc -ne 0 ] && [ $missing -eq 0 ]; then
    fatal "ldd $(basename "$b") failed (exit $rc): $(printf '%s' "$out" | head -1)"
  fi
done
if [ ${#needers[@]} -gt 0 ]; then
  what=""
  for lib in "${!needers[@]}"; do
    what="${what:+$what; }$lib (needed by ${needers[$lib]})"
  done
  fatal "libraries not found: $what; searched the staged lib, /usr/local/cuda/lib64, python3's nvidia wheels${PYLIBS:+ ($PYLIBS)} and ldconfig."
fi
note "every library of the ${#programs[@]} staged programs is found"
# NCCL, opened at run time: where dlopen will find it (LD_LIBRARY_PATH, then ldconfig's cache).
nccl=""
IFS=: read -r -a dirs <<<"$LD_LIBRARY_PATH"
for d in "${dirs[@]}"; do
  [ -n "$d" ] && [ -e "$d/libnccl.so.2" ] && { nccl="$d/libnccl.so.2"; break; }
done
[ -n "$nccl" ] || nccl=$(timeout 3 ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 / {print $NF; exit}')
if [ -n "$nccl" ]; then
  note "NCCL: $nccl"
else
  note "NCCL: libnccl.so.2 not found (not fatal: the nccl step fails naming it, everything else runs)"
fi

# 4. The CUDA runtime sees a device (no tests selected: only GpuTestMain's device check runs).
probe="$BIN/cuda_kernels_elementwise_test"
if [ -x "$probe" ]; then
  out=$(timeout 8 "$probe" --gtest_filter=Preflight.NoTestHasThisName 2>&1)
  rc=$?
  case $rc in
    0) note "$(printf '%s\n' "$out" | grep -m1 '^device 0:' || echo 'device 0: (unnamed)')" ;;
    124) fatal "the CUDA runtime did not answer within 8 s ($(basename "$probe") with no tests)" ;;
    77) fatal "$(printf '%s\n' "$out" | grep -m1 '^SKIP: ' | sed 's/^SKIP: //' | grep . ||
                 echo 'no usable CUDA device') (driver $driver, $(basename "$probe") with no tests)" ;;
    *) fatal "$(basename "$probe") with no tests exited $rc: $(printf '%s' "$out" | tail -1)" ;;
  esac
fi

if [ -n "${PREFLIGHT_ENV:-}" ]; then
  printf 'export LD_LIBRARY_PATH=%q\n' "$LD_LIBRARY_PATH" >"$PREFLIGHT_ENV"
fi
note "ok (driver $driver, ${#programs[@]} programs, $SECONDS s)"
exit 0
