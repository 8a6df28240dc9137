#!/usr/bin/env bash
# Prepares what scripts/device-check.sh needs on the GPU machine, which has CUDA 13 but no MLIR,
# libonnx, OpenBLAS or Open MPI: builds the runtime-only programs here for sm_90 (the runtime
# links no MLIR; MEGAC_BLAS=OFF gives the CPU reference kernels loop GEMMs, so no OpenBLAS is
# needed there), compiles the plans here with the main build's megac, and stages binaries
# (stripped), any library the machine lacks and the plans in .device-carry/ (git-ignored; the
# device tool carries it, 64 MiB at most with the tree).
#
# The carry must stay under CARRY_LIMIT_BYTES (60 MiB): the seven programs link the kernels
# statically, each with the whole sm_90 device code (about 81 MiB stripped together), so when
# the plain stage is over the limit it is packed into .device-carry/carry.tar.xz (xz with a
# dictionary larger than any one program, so the copies of the device code shrink to one),
# which device-check.sh unpacks with python3's tarfile. Above the limit even so, or with the tree
# past 64 MiB, this fails (exit 1) naming the sizes. NCCL is never staged (libnccl.so.2 is about
# 208 MiB): the GPU machine's CUDA or its Python's nvidia-nccl-cu13 wheel provides it, and
# device-check.sh's preflight fails in one line when neither does.
#
#   scripts/device-prepare.sh            # then, with the device tool:
#   run(command="bash scripts/device-check.sh", carry=[".device-carry"], timeout_s=540)
#
# SKIP_BUILD=1 stages what $BUILD_DIR/bin already holds; COMPRESS=auto|always|never.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build-device}
STAGE=.device-carry
ARCH=${CUDA_ARCH:-90} # the lent machine is an H200 (sm_90); one architecture keeps it small

LIMIT=${CARRY_LIMIT_BYTES:-$((60 * 1048576))}
TREE_LIMIT=$((64 * 1048576))
COMPRESS=${COMPRESS:-auto}
MEGAC=${MEGAC:-build/bin/megac}
if [ ! -x "$MEGAC" ]; then
  echo "device-prepare: $MEGAC is missing: build megac first (make build)"
  exit 1
fi
GPU_TESTS="cuda_kernels_elementwise_test cuda_kernels_nn_test cuda_executor_test nccl_comm_test
           cuda_fusion_gpu_test"
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEGAC_CUDA=ON -DMEGAC_BLAS=OFF \
    -DCMAKE_CUDA_ARCHITECTURES="$ARCH" \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache >/dev/null
  # megac-calibrate: `megac calibrate` without MLIR or MPI (device-check.sh's calibration step).
  ninja -C "$BUILD" -j "${JOBS:-2}" bench-train-step megac-calibrate $GPU_TESTS
fi

rm -rf "$STAGE"
mkdir -p "$STAGE/bin" "$STAGE/lib" "$STAGE/plans"
for b in bench-train-step megac-calibrate $GPU_TESTS; do
  cp "$BUILD/bin/$b" "$STAGE/bin/"
  strip "$STAGE/bin/$b"
done
# Libraries the GPU machine does not have (OpenBLAS and its Fortran runtime, and anything else
# outside glibc, libstdc++ and CUDA); the C++ runtime there is newer than Debian 12's.
for b in "$STAGE"/bin/*; do
  ldd "$b" | awk '$3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|ld-linux*|libpthread.so*|libdl.so*|librt.so*) ;;
    libcudart.so*|libcublas*|libnvrtc*|libnccl.so*|libcuda.so*) ;;
    *) cp -L "$lib" "$STAGE/lib/" ;;
  esac
done

# Plans: the small training plans of the GPU tests, and the two benchmark models in bf16.
SMALL="gpt:layers=2,hidden=64,heads=4,seq=32,vocab=128"
"$MEGAC" compile --model "$SMALL" --ranks 1 --global-batch 4 --micro-batch 2 \
  -o "$STAGE/plans/gpt-train-f32.mplan"
"$MEGAC" compile --model "$SMALL" --ranks 1 --global-batch 4 --micro-batch 2 --precision bf16 \
  -o "$STAGE/plans/gpt-train-bf16.mplan"
# GPT-2 124M (seq 1024) and a 1.3B GPT (GPT-3 XL shape, seq 2048), bf16 mixed precision.
"$MEGAC" compile --model gpt:layers=12,hidden=768,heads=12,seq=1024,vocab=50257 --ranks 1 \
  --global-batch 16 --micro-batch 16 --precision bf16 -o "$STAGE/plans/gpt2-124m-bf16.mplan"
"$MEGAC" compile --model gpt:layers=24,hidden=2048,heads=16,seq=2048,vocab=50257 --ranks 1 \
  --global-batch 4 --micro-batch 4 --precision bf16 -o "$STAGE/plans/gpt-1.3b-bf16.mplan"

# Sizes: each file, the stage, and the tree that travels with it (tracked files and untracked
# ones git does not ignore).
bytes_of() { du -sb "$@" | awk '{s += $1} END {print s + 0}'; }
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
echo "device-prepare: the staged files"
find "$STAGE" -type f -printf '%s %p\n' | sort -rn | \
  awk '{printf "  %10.1f MiB  %s\n", $1 / 1048576, $2}'
plain=$(bytes_of "$STAGE")
tree=$( (git ls-files -z; git ls-files -z -o --exclude-standard) 2>/dev/null | \
        du -bc --files0-from=- 2>/dev/null | tail -1 | cut -f1 || true)
[ -n "$tree" ] || tree=0
echo "device-prepare: plain stage $(mib "$plain") (bin $(mib "$(bytes_of "$STAGE/bin")"), lib $(mib "$(bytes_of "$STAGE/lib")"), plans $(mib "$(bytes_of "$STAGE/plans")")); limit $(mib "$LIMIT")"
carry=$plain
if [ "$COMPRESS" = always ] || { [ "$COMPRESS" = auto ] && [ "$plain" -gt "$LIMIT" ]; }; then
  # One xz stream, one thread, a dictionary larger than any program: the programs' identical
  # device code is stored once.
  start=$SECONDS
  tar -C "$STAGE" -cf - bin lib plans | \
    xz -T1 --lzma2=preset=6,dict=128MiB >"$STAGE/carry.tar.xz.part"
  mv "$STAGE/carry.tar.xz.part" "$STAGE/carry.tar.xz"
  rm -rf "${STAGE:?}/bin" "${STAGE:?}/lib" "${STAGE:?}/plans"
  carry=$(bytes_of "$STAGE")
  echo "device-prepare: packed into $STAGE/carry.tar.xz: $(mib "$carry") in $((SECONDS - start)) s (device-check.sh unpacks it)"
fi
echo "device-prepare: carry $(mib "$carry") (limit $(mib "$LIMIT")); tree $(mib "$tree"); tree + carry $(mib $((tree + carry))) (the device tool's limit 64 MiB)"
if [ "$carry" -gt "$LIMIT" ]; then
  echo "device-prepare: FAILED: the carry is $(mib "$carry") ($carry bytes; plain $(mib "$plain")), over the $(mib "$LIMIT") limit"
  exit 1
fi
if [ $((tree + carry)) -gt "$TREE_LIMIT" ]; then
  echo "device-prepare: FAILED: tree $(mib "$tree") + carry $(mib "$carry") is over the device tool's 64 MiB"
  exit 1
fi
echo "next: run(command=\"bash scripts/device-check.sh\", carry=[\"$STAGE\"], timeout_s=540)"
