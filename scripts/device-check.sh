#!/usr/bin/env bash
# Runs on the GPU machine (one H200, CUDA 13, PyTorch; no MLIR, OpenBLAS, MPI or network), from
# the repository root, after scripts/device-prepare.sh staged .device-carry/ here:
#   1. the GPU tests (kernels against the CPU reference, the executor's training steps against
#      the CPU executor, NCCL on one rank and its watchdog (a withheld rank), fused kernels; the
#      fused SwiGLU kernel by name);
#   2. bench-train-step --backend cuda for GPT-2 124M (seq 1024) and a 1.3B GPT (seq 2048), bf16;
#   3. the same models in PyTorch (bf16 autocast, SDPA, fused AdamW, torch.compile) for the ratio;
#   4. `megac calibrate --backend cuda` (as megac-calibrate, the MLIR-free build): the device spec
#      $OUT/h200-calibrated.json (one GPU: no collectives; the spec says so).
# Everything is logged to $OUT/device-check.log (or /tmp/megac-device/); a summary at the end.
# Each part has its own time limit; the whole stays under 8 minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
STAGE=${STAGE:-.device-carry}
OUT=${OUT:-/tmp/megac-device}
mkdir -p "$OUT"
LOG="$OUT/device-check.log"
RESULTS="$OUT/bench.jsonl"
: >"$LOG"
: >"$RESULTS"
exec > >(tee -a "$LOG") 2>&1
say() { printf '\n== %s (%s)\n' "$*" "$(date +%T)"; }
if [ ! -d "$STAGE/bin" ]; then
  echo "no $STAGE/bin: run scripts/device-prepare.sh here first and carry $STAGE"
  exit 2
fi

# Libraries: the staged ones, CUDA's, and the NVIDIA wheels of the machine's Python (NCCL may
# only be there).
LIBS="$PWD/$STAGE/lib:/usr/local/cuda/lib64"
PYLIBS=$(python3 - <<'PY' 2>/dev/null
import glob, os, site
dirs = set()
for base in site.getsitepackages() + [site.getusersitepackages()]:
    for pattern in ("nvidia/*/lib", "nvidia/cu*/lib"):
        dirs.update(glob.glob(os.path.join(base, pattern)))
print(":".join(sorted(dirs)))
PY
)
export LD_LIBRARY_PATH="$LIBS${PYLIBS:+:$PYLIBS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MEGAC_CACHE_DIR="$OUT/nvrtc-cache"
BIN="$PWD/$STAGE/bin"
PLANS="$PWD/$STAGE/plans"

say "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv || true
for b in "$BIN"/*; do
  missing=$(ldd "$b" | grep "not found" || true)
  [ -n "$missing" ] && echo "$(basename "$b"): $missing"
done

say "GPU tests"
failed=0
export MEGAC_TEST_TRAIN_PLAN="$PLANS/gpt-train-f32.mplan,$PLANS/gpt-train-bf16.mplan"
for t in cuda_kernels_elementwise_test cuda_kernels_nn_test cuda_fusion_gpu_test nccl_comm_test \
         cuda_executor_test; do
  echo "-- $t"
  timeout 180 "$BIN/$t" --gtest_brief=1
  rc=$?
  echo "-- $t: exit $rc"
  [ $rc -ne 0 ] && failed=$((failed + 1))
done

# Issue 16: SwiGLU's silu(gate) * up as one fused kernel (runtime/cuda/Fusion.cpp) against the
# CPU reference (f32, f64, bf16 tolerances in FusedKernelTest.cpp) and the unfused CUDA kernels
# (bit for bit); also part of cuda_fusion_gpu_test above, named here so the summary shows it.
say "fused SwiGLU kernel (silu * mul) numerics"
timeout 60 "$BIN/cuda_fusion_gpu_test" --gtest_brief=1 \
  --gtest_filter='FusedKernel.*Swiglu*:FusedKernel.MatchesTheUnfusedCudaKernelsBitForBit'
rc=$?
echo "-- fused SwiGLU: exit $rc"
[ $rc -ne 0 ] && failed=$((failed + 1))

# Issue 20: NCCL's watchdog (--comm-timeout on the CUDA backend). A world of two ranks whose
# rank 1 withholds its part of the collective that creates it: rank 0 must fail within the 3 s
# timeout, naming the rank, operation and group, after ncclCommAbort, not hang (one GPU: a
# withheld all-reduce between two live ranks needs two devices). Also part of nccl_comm_test.
say "NCCL watchdog: a withheld rank"
timeout 90 "$BIN/nccl_comm_test" --gtest_brief=1 --gtest_filter='NcclWatchdog.*'
rc=$?
echo "-- NCCL watchdog: exit $rc"
[ $rc -ne 0 ] && failed=$((failed + 1))

say "bench-train-step (megac, cuda)"
timeout 120 "$BIN/bench-train-step" --plan "$PLANS/gpt2-124m-bf16.mplan" --backend cuda \
  --steps 10 --warmup 2 --gpt 12,768,1024,50257 --label megac-gpt2-124m --json "$RESULTS"
timeout 200 "$BIN/bench-train-step" --plan "$PLANS/gpt-1.3b-bf16.mplan" --backend cuda \
  --steps 5 --warmup 2 --gpt 24,2048,2048,50257 --label megac-gpt-1.3b --json "$RESULTS"

say "PyTorch on the same models"
timeout 150 python3 bench/torch_train_step_gpu.py --gpt 12,768,12,1024,50257 --micro-batch 16 \
  --steps 10 --label torch-gpt2-124m --json "$RESULTS"
timeout 200 python3 bench/torch_train_step_gpu.py --gpt 24,2048,16,2048,50257 --micro-batch 4 \
  --steps 5 --label torch-gpt-1.3b --json "$RESULTS"

say "megac calibrate --backend cuda"
timeout 240 "$BIN/megac-calibrate" --backend cuda -o "$OUT/h200-calibrated.json"
rc=$?
echo "-- megac-calibrate: exit $rc"
[ $rc -ne 0 ] && failed=$((failed + 1))
[ -f "$OUT/h200-calibrated.json" ] && cat "$OUT/h200-calibrated.json"

say "summary"
echo "GPU test binaries and calibration failed: $failed"
python3 - "$RESULTS" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {r["label"]: r for r in rows}
for r in rows:
    print(f'{r["label"]:>20}: {r["ms_per_step"]:9.2f} ms/step {r["tokens_per_s"]:10.0f} tokens/s '
          f'{r["model_tflops"]:7.1f} TFLOP/s  MFU {100 * r["mfu"]:5.1f}%')
for model in ("gpt2-124m", "gpt-1.3b"):
    m, t = by.get("megac-" + model), by.get("torch-" + model)
    if m and t:
        print(f"{model}: megac / PyTorch tokens/s = {m['tokens_per_s'] / t['tokens_per_s']:.2f}")
PY
exit $failed
