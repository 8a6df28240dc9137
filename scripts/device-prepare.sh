#!/usr/bin/env bash
# Prepares what scripts/device-check.sh needs on the GPU machine, which has CUDA 13 but no MLIR,
# libonnx, OpenBLAS or Open MPI: builds the runtime-only programs here for sm_90 (the runtime
# links no MLIR; MEGAC_BLAS=OFF gives the CPU reference kernels loop GEMMs, so no OpenBLAS is
# needed there), compiles the plans here with the main build's megac, and stages binaries, any
# library the machine lacks and the plans in .device-carry/ (git-ignored; the device tool
# carries it, 64 MiB at most with the tree).
#
#   scripts/device-prepare.sh            # then, with the device tool:
#   run(command="bash scripts/device-check.sh", carry=[".device-carry"], timeout_s=540)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build-device}
STAGE=.device-carry
ARCH=${CUDA_ARCH:-90} # the lent machine is an H200 (sm_90); one architecture keeps it small

MEGAC=${MEGAC:-build/bin/megac}
if [ ! -x "$MEGAC" ]; then
  echo "device-prepare: $MEGAC is missing: build megac first (make build)"
  exit 1
fi
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEGAC_CUDA=ON -DMEGAC_BLAS=OFF \
  -DCMAKE_CUDA_ARCHITECTURES="$ARCH" \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache >/dev/null
GPU_TESTS="cuda_kernels_elementwise_test cuda_kernels_nn_test cuda_executor_test nccl_comm_test
           cuda_fusion_gpu_test"
# megac-calibrate: `megac calibrate` without MLIR or MPI (device-check.sh's calibration step).
ninja -C "$BUILD" -j "${JOBS:-2}" bench-train-step megac-calibrate $GPU_TESTS

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

du -sh "$STAGE"
echo "tree + carry: $(( ($(git ls-files -z | du -bc --files0-from=- | tail -1 | cut -f1) + \
  $(du -sb "$STAGE" | cut -f1)) / 1048576 )) MiB (limit 64)"
echo "next: run(command=\"bash scripts/device-check.sh\", carry=[\"$STAGE\"], timeout_s=540)"
