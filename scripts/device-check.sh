#!/usr/bin/env bash
# Runs on the GPU machine (one H200, CUDA 13, PyTorch; no MLIR, OpenBLAS, MPI or network), from
# the repository root, after scripts/device-prepare.sh staged .device-carry/ here:
#
#   run(command="bash scripts/device-check.sh", carry=[".device-carry"], timeout_s=540)
#
# One call, one deadline: everything ends DEADLINE (520) seconds after the start (bash SECONDS),
# leaving the 540 s call 20 s for the transfers; each step's time limit is
# min(its own cap, DEADLINE - elapsed - RESERVE), a step with under MIN_STEP seconds left is
# SKIPPED-no-time, and the summary is printed by an EXIT trap (also on TERM/INT/HUP) and
# rewritten to $OUT/summary.txt after every step, so a kill still leaves it. Steps, by value:
#   1. preflight (scripts/device-preflight.sh, 10 s): driver >= 580 (else /usr/local/cuda/compat),
#      every library found (NCCL from the machine), the CUDA runtime sees the GPU; if it fails,
#      its one line and the summary end the run;
#   2. the kernel tests against the CPU reference (elementwise, NN incl. attention, fused); then
#      communication overlap on one GPU (nccl-overlap, 45 s): an all-reduce runs while a kernel
#      runs on the compute stream, a send/recv to itself never touches host memory, the MoE
#      token exchange of one rank against the CPU's;
#   3. the executor against the CPU executor with MEGAC_CUDA_SYNC_EACH=1 (a stream
#      synchronisation after each instruction, so a device fault names its instruction);
#   4. one training step of a small GPT plan by bench-train-step on the CPU and on the GPU: the
#      losses agree; and the executor's GPT training steps at full speed (no per-instruction sync);
#   5. NCCL on one rank and its watchdog (a withheld rank);
#   6. `megac calibrate --backend cuda --quick` (megac-calibrate): $OUT/h200-calibrated.json;
#   7. the benchmark: bench-train-step for GPT-2 124M (seq 1024) and a 1.3B GPT (seq 2048) in
#      bf16, each next to PyTorch (bench/torch_train_step_gpu.py); every run's first loss must be
#      within LOSS_TOL (15%) of ln V and its last finite and not above the first (+LOSS_RISE_TOL
#      nats: random labels make each step's loss noisy by about 0.5/sqrt(tokens));
#      then the 1.3B GPT's GPU time per opcode (bench-train-step --profile); then, optional, the
#      Megatron-LM README's 1.7B GPT (seq 4096, vocabulary 131072) in PyTorch, a planner anchor
#      (bench/device_runs.json);
#   8. compute-sanitizer --tool racecheck on one attention test, when the tool exists and
#      RACECHECK_MIN seconds are left.
# SKIP_TORCH=1 leaves out the PyTorch runs of step 7 (SKIPPED-asked, not a failure): a rerun
# whose reference numbers are already known.
# Statuses: PASS, FAIL (exit code shown; 77 = the binary found no usable device), TIMEOUT (killed
# at its limit), SKIPPED-no-time, SKIPPED-no-tool and SKIPPED-asked (not failures). The exit
# status is the number of FAIL, TIMEOUT and SKIPPED-no-time steps and failed checks (0: all ran
# and passed).
# Logs: $OUT/device-check.log, $OUT/summary.txt, $OUT/bench.jsonl (OUT defaults to
# /tmp/megac-device); each step's own output is in $WORK (not brought back) and is copied into
# the log when the step ends.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
STAGE=${STAGE:-.device-carry}
OUT=${OUT:-/tmp/megac-device}
WORK=${WORK:-/tmp/megac-device-work}
DEADLINE=${DEADLINE:-520}
RESERVE=${RESERVE:-10}         # the kill grace and the summary, inside DEADLINE
KILL_GRACE=${KILL_GRACE:-5}    # TERM at the limit, KILL this much later
MIN_STEP=${MIN_STEP:-5}
CAP_MAX=${CAP_MAX:-600}        # clamps every step's own cap (a quick run, the dry-run test)
PREFLIGHT_LIMIT=${PREFLIGHT_LIMIT:-10}
RACECHECK_MIN=${RACECHECK_MIN:-60}
LOSS_TOL=${LOSS_TOL:-0.15}
LOSS_RISE_TOL=${LOSS_RISE_TOL:-0.02}
OPTIONAL="bench-torch-readme-1.7b racecheck-attention" # "when time allows": skipping them fails nothing
mkdir -p "$OUT" "$WORK"
LOG="$OUT/device-check.log"
SUMMARY="$OUT/summary.txt"
RESULTS="$OUT/bench.jsonl"
: >"$LOG"
: >"$RESULTS"
exec 3>&1 4>&2 # the caller's own output: the summary goes there even if the tee below dies
exec > >(tee -a "$LOG") 2>&1
TEE_PID=$!
say() { printf '\n== %s (%s, %d s)\n' "$*" "$(date +%T)" "$SECONDS"; }

NAMES=() STATUS=() RCS=() SECS=() LIMITS=() NOTES=()
CURRENT="" CURRENT_PID="" CURRENT_LOG="" CURRENT_START=0 CURRENT_LIMIT=0
FAILED=0

record() { # name status rc secs limit note
  NAMES+=("$1") STATUS+=("$2") RCS+=("$3") SECS+=("$4") LIMITS+=("$5") NOTES+=("${6:-}")
  case "$2" in
    FAIL|TIMEOUT|INTERRUPTED) FAILED=$((FAILED + 1)) ;;
    SKIPPED-no-time) [[ " $OPTIONAL " == *" $1 "* ]] || FAILED=$((FAILED + 1)) ;;
  esac
  write_summary >"$SUMMARY.tmp" && mv -f "$SUMMARY.tmp" "$SUMMARY"
}

write_summary() {
  printf 'device-check summary: %d s elapsed of a %d s deadline\n' "$SECONDS" "$DEADLINE"
  printf '%-34s %-16s %5s %6s %6s  %s\n' step status rc secs limit note
  local i
  for i in "${!NAMES[@]}"; do
    printf '%-34s %-16s %5s %6s %6s  %s\n' "${NAMES[$i]}" "${STATUS[$i]}" "${RCS[$i]}" \
      "${SECS[$i]}" "${LIMITS[$i]}" "${NOTES[$i]}"
  done
  if [ -n "$CURRENT" ]; then
    printf '%-34s %-16s %5s %6s %6s  %s\n' "$CURRENT" RUNNING - $((SECONDS - CURRENT_START)) \
      "$CURRENT_LIMIT" "(when this summary was written)"
  fi
}

# The step's time limit now, or empty when under MIN_STEP.
limit_for() {
  local cap=$1 left=$((DEADLINE - SECONDS - RESERVE))
  [ "$CAP_MAX" -lt "$cap" ] && cap=$CAP_MAX
  [ "$left" -lt "$cap" ] && cap=$left
  [ "$cap" -ge "$MIN_STEP" ] && echo "$cap"
}

# step NAME CAP COMMAND...: runs COMMAND under its limit, in the background so that a signal to
# this script is handled at once; output to $WORK/NAME.log, then into the log. Returns its rc.
step() {
  local name=$1 cap=$2 limit rc start note=""
  shift 2
  limit=$(limit_for "$cap")
  if [ -z "$limit" ]; then
    record "$name" SKIPPED-no-time - 0 "$cap" "$((DEADLINE - SECONDS)) s left"
    say "$name: skipped, $((DEADLINE - SECONDS)) s left"
    return 200
  fi
  say "$name (limit $limit s)"
  CURRENT=$name CURRENT_LOG="$WORK/$name.log" CURRENT_START=$SECONDS CURRENT_LIMIT=$limit
  start=$SECONDS
  timeout -k "$KILL_GRACE" "$limit" "$@" >"$CURRENT_LOG" 2>&1 </dev/null 3>&- 4>&- &
  CURRENT_PID=$!
  wait "$CURRENT_PID"
  rc=$?
  CURRENT_PID=""
  cat "$CURRENT_LOG"
  local secs=$((SECONDS - start)) status=FAIL
  case $rc in
    0) status=PASS ;;
    124|137) status=TIMEOUT note="killed at $limit s" ;;
    77) note="exit 77: no usable CUDA device" ;;
  esac
  # gtest: name the failed tests; racecheck: its count.
  local failed
  failed=$(grep -o '^\[  FAILED  \] [A-Za-z0-9_./]*' "$CURRENT_LOG" | sed 's/^\[  FAILED  \] //' | \
           sort -u | head -5 | paste -sd' ' -)
  [ -n "$failed" ] && note="${note:+$note; }failed: $failed"
  local hazards
  hazards=$(grep -m1 -o 'RACECHECK SUMMARY: .*' "$CURRENT_LOG")
  [ -n "$hazards" ] && note="${note:+$note; }$hazards"
  if [[ $name == racecheck-* ]] && [ -z "$hazards" ] && [ "$rc" -ne 0 ]; then
    note="${note:+$note; }the sanitizer did not finish: $(grep -m1 -i 'error' "$CURRENT_LOG" | cut -c1-120)"
  fi
  local fatal
  fatal=$(grep -m1 '^preflight: FATAL: ' "$CURRENT_LOG" | sed 's/^preflight: FATAL: //')
  [ -n "$fatal" ] && note="${note:+$note; }$fatal"
  CURRENT=""
  record "$name" "$status" "$rc" "$secs" "$limit" "$note"
  echo "-- $name: $status (exit $rc, $secs s)"
  return "$rc"
}

# check NAME OK|FAIL NOTE: a verdict that is not a command.
check() {
  record "$1" "$2" - - - "$3"
  echo "-- $1: $2 $3"
}

# The first and last loss of a training run's log ("loss A -> B") against ln V.
loss_check() { # name log vocab
  local verdict
  verdict=$(python3 - "$2" "$3" "$LOSS_TOL" "$LOSS_RISE_TOL" <<'PY'
import math, re, sys
path, vocab, tol, rise = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
found = re.findall(r"loss (\S+) -> (\S+)", open(path, errors="replace").read())
if not found:
    print("FAIL no 'loss A -> B' line in the output"); sys.exit()
first, last = (float(v.rstrip(",;")) for v in found[-1])
ln_v = math.log(vocab)
problems = []
if not (math.isfinite(first) and abs(first - ln_v) <= tol * ln_v):
    problems.append(f"first loss {first:.4f} not within {100 * tol:.0f}% of ln V = {ln_v:.4f}")
if not math.isfinite(last):
    problems.append(f"last loss {last} is not finite")
elif last > first + rise:
    problems.append(f"last loss {last:.4f} above the first {first:.4f}")
print(("FAIL " + "; ".join(problems)) if problems else
      f"PASS first {first:.4f} (ln V {ln_v:.4f}), last {last:.4f}")
PY
)
  check "loss $1" "${verdict%% *}" "${verdict#* }"
}

finish() {
  local rc=$?
  trap - EXIT TERM INT HUP
  trap '' PIPE
  if [ -n "$CURRENT_PID" ]; then
    # timeout passes TERM on to the step's process group and KILLs it KILL_GRACE later.
    kill -TERM "$CURRENT_PID" 2>/dev/null
    wait "$CURRENT_PID" 2>/dev/null
  fi
  if [ -n "$CURRENT" ]; then
    [ -f "$CURRENT_LOG" ] && cat "$CURRENT_LOG"
    local name=$CURRENT
    CURRENT=""
    record "$name" INTERRUPTED - $((SECONDS - CURRENT_START)) "$CURRENT_LIMIT" \
      "the script was stopped (${SIGNAL:-exit $rc})"
  fi
  write_summary >"$SUMMARY.tmp" && mv -f "$SUMMARY.tmp" "$SUMMARY"
  # Stop the log's tee (a TERM to the whole group may have killed it already) and print the rest
  # to the caller's output and the log directly.
  exec 1>&3 2>&4
  local i
  for i in 1 2 3 4 5 6 7 8 9 10; do
    kill -0 "$TEE_PID" 2>/dev/null || break
    sleep 0.1
  done
  local code=$FAILED
  [ "$code" -eq 0 ] && [ "$rc" -ne 0 ] && code=$rc
  [ "$code" -gt 125 ] && code=125
  {
    say "summary"
    cat "$SUMMARY"
    [ -s "$RESULTS" ] && timeout 10 python3 - "$RESULTS" <<'PY'
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
    echo "device-check: $FAILED of ${#NAMES[@]} steps and checks did not pass; exit $code"
  } 2>&1 | tee -a "$LOG"
  exit "$code"
}
on_signal() {
  SIGNAL=$1
  exit 143
}
trap finish EXIT
trap 'on_signal TERM' TERM
trap 'on_signal INT' INT
trap 'on_signal HUP' HUP

say "device-check: deadline $DEADLINE s, reserve $RESERVE s"

# A compressed carry (device-prepare.sh compresses when the plain one passes 60 MiB).
if [ -f "$STAGE/carry.tar.xz" ] && [ ! -d "$STAGE/bin" ]; then
  step unpack 60 python3 -c '
import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    try:
        t.extractall(sys.argv[2], filter="data")
    except TypeError:  # a Python without extraction filters
        t.extractall(sys.argv[2])
' "$STAGE/carry.tar.xz" "$STAGE" || exit
fi

# 1. Preflight: one line and the end when something is fatal.
PREFLIGHT_ENV="$WORK/preflight.env"
rm -f "$PREFLIGHT_ENV"
if ! step preflight "$PREFLIGHT_LIMIT" env PREFLIGHT_ENV="$PREFLIGHT_ENV" STAGE="$STAGE" \
     bash scripts/device-preflight.sh; then
  echo "device-check: stopped at the preflight (its line above); nothing else was run"
  exit 1
fi
# shellcheck disable=SC1090
. "$PREFLIGHT_ENV"
export PYTHONUNBUFFERED=1 # a killed PyTorch run still leaves its lines in the step's log
export MEGAC_CACHE_DIR="$WORK/nvrtc-cache" # many files: not under $OUT (8 files come back)
BIN="$ROOT/$STAGE/bin"
PLANS="$ROOT/$STAGE/plans"
export MEGAC_TEST_TRAIN_PLAN="$PLANS/gpt-train-f32.mplan,$PLANS/gpt-train-bf16.mplan"

# 2. Kernels against the CPU reference.
step kernels-elementwise 90 "$BIN/cuda_kernels_elementwise_test" --gtest_brief=1
step kernels-nn 120 "$BIN/cuda_kernels_nn_test" --gtest_brief=1
# The flash kernels, which the GEMM path (the default where a head's scores fit its scratch)
# leaves to long sequences: tested on every shape.
step kernels-attention-flash 60 env MEGAC_CUDA_ATTENTION=flash "$BIN/cuda_kernels_nn_test" \
  --gtest_brief=1 --gtest_filter='Attention.*'
# The GEMM path cut into chunks of heads and of query rows (a 64 KiB scratch cap), as long
# sequences are at the default 1 GiB.
step kernels-attention-chunked 60 env MEGAC_CUDA_ATTENTION_SCRATCH=65536 \
  "$BIN/cuda_kernels_nn_test" --gtest_brief=1 --gtest_filter='Attention.*'
step kernels-fused 90 "$BIN/cuda_fusion_gpu_test" --gtest_brief=1
# Overlap: a collective beside a kernel on two streams (a handshake that times out on the device
# in 2 s if either stream waits for the other), the pipeline's device-to-device send/recv on a
# send to itself (one GPU cannot run two NCCL ranks), MoeAllToAll over NCCL.
step nccl-overlap 45 "$BIN/nccl_comm_test" --gtest_brief=1 --gtest_filter='NcclAsyncGpu.*'

# 3. The executor, each instruction synchronised (a fault names its instruction).
step executor-sync-each 150 env MEGAC_CUDA_SYNC_EACH=1 "$BIN/cuda_executor_test" --gtest_brief=1

# 4. One training step on the CPU and on the GPU (bench-train-step, the benchmark's program),
# then the executor's GPT training steps at full speed.
SMALL_GPT=2,64,32,128 # layers, hidden, seq, vocab of device-prepare.sh's small plans
for backend in cpu cuda; do
  step "train-step-$backend" 60 "$BIN/bench-train-step" --plan "$PLANS/gpt-train-f32.mplan" \
    --backend "$backend" --steps 1 --warmup 0 --gpt "$SMALL_GPT" --label "small-$backend"
done
if [ -f "$WORK/train-step-cpu.log" ] && [ -f "$WORK/train-step-cuda.log" ]; then
  verdict=$(python3 - "$WORK/train-step-cpu.log" "$WORK/train-step-cuda.log" <<'PY'
import math, re, sys
def loss(path):
    m = re.findall(r"loss (\S+) -> ", open(path, errors="replace").read())
    return float(m[-1]) if m else None
cpu, gpu = loss(sys.argv[1]), loss(sys.argv[2])
if cpu is None or gpu is None:
    print("FAIL a run printed no loss"); sys.exit()
ok = math.isfinite(gpu) and abs(gpu - cpu) <= 1e-4 * max(1.0, abs(cpu))
print(f"{'PASS' if ok else 'FAIL'} step-1 loss cuda {gpu:.6f} vs cpu {cpu:.6f} (f32, rtol 1e-4)")
PY
)
  check "train-step cuda vs cpu" "${verdict%% *}" "${verdict#* }"
  loss_check small-gpt "$WORK/train-step-cuda.log" 128
fi
step executor-train-steps 90 "$BIN/cuda_executor_test" --gtest_brief=1 \
  --gtest_filter='CudaExecutor.FiveGptTrainingStepsAgreeWithTheCpu:CudaExecutor.TrainingStepsAgreeWithTheCpu'

# 5. NCCL on one rank; its watchdog: a world whose second rank never joins fails in 3 s.
step nccl 90 "$BIN/nccl_comm_test" --gtest_brief=1 --gtest_filter='-NcclAsyncGpu.*'

# 6. Calibration, quick.
step calibrate-quick 120 "$BIN/megac-calibrate" --backend cuda --quick -o "$OUT/h200-calibrated.json"
[ -f "$OUT/h200-calibrated.json" ] && head -c 4000 "$OUT/h200-calibrated.json" && echo

# 7. The benchmark, megac next to PyTorch, model by model.
bench() { # label cap vocab command...
  local label=$1 cap=$2 vocab=$3
  shift 3
  if [ "${SKIP_TORCH:-0}" = 1 ] && [[ $label == torch-* ]]; then
    record "bench-$label" SKIPPED-asked - 0 "$cap" "SKIP_TORCH=1"
    return 0
  fi
  step "bench-$label" "$cap" "$@" && loss_check "$label" "$WORK/bench-$label.log" "$vocab"
}
bench megac-gpt2-124m 120 50257 "$BIN/bench-train-step" --plan "$PLANS/gpt2-124m-bf16.mplan" \
  --backend cuda --steps 10 --warmup 2 --gpt 12,768,1024,50257 --label megac-gpt2-124m \
  --json "$RESULTS"
bench torch-gpt2-124m 150 50257 python3 bench/torch_train_step_gpu.py --gpt 12,768,12,1024,50257 \
  --micro-batch 16 --steps 10 --label torch-gpt2-124m --json "$RESULTS"
bench megac-gpt-1.3b 200 50257 "$BIN/bench-train-step" --plan "$PLANS/gpt-1.3b-bf16.mplan" \
  --backend cuda --steps 5 --warmup 2 --gpt 24,2048,2048,50257 --label megac-gpt-1.3b \
  --json "$RESULTS"
# Where the 1.3B step's GPU time goes, per opcode (MEGAC_CUDA_PROFILE; a separate run, so the
# timed one above carries no events).
step profile-megac-gpt-1.3b 90 "$BIN/bench-train-step" --plan "$PLANS/gpt-1.3b-bf16.mplan" \
  --backend cuda --steps 2 --warmup 1 --gpt 24,2048,2048,50257 --label profile-gpt-1.3b --profile
bench torch-gpt-1.3b 200 50257 python3 bench/torch_train_step_gpu.py --gpt 24,2048,16,2048,50257 \
  --micro-batch 4 --steps 5 --label torch-gpt-1.3b --json "$RESULTS"
# The Megatron-LM README's 1.7B GPT (24 x 2048, 16 heads, seq 4096, vocabulary 131072, untied
# there; micro-batch 1) in PyTorch on this GPU: with bench/device_runs.json's other rows, how
# much of the planner's -28% on that published run is the kernel rates of its shapes and how
# much Megatron-Core's step (docs/planner.md). Optional: skipped when the time is short.
bench torch-readme-1.7b 150 131072 python3 bench/torch_train_step_gpu.py \
  --gpt 24,2048,16,4096,131072 --micro-batch 1 --steps 5 --label torch-readme-1.7b \
  --json "$RESULTS"

# 8. Races in the WMMA attention kernels, when the tool and the time are there.
if ! command -v compute-sanitizer >/dev/null 2>&1; then
  record racecheck-attention SKIPPED-no-tool - 0 - "no compute-sanitizer on PATH"
elif [ $((DEADLINE - SECONDS - RESERVE)) -lt "$RACECHECK_MIN" ]; then
  record racecheck-attention SKIPPED-no-time - 0 - "under $RACECHECK_MIN s left"
else
  step racecheck-attention 120 compute-sanitizer --tool racecheck --error-exitcode 99 \
    "$BIN/cuda_kernels_nn_test" --gtest_brief=1 --gtest_filter='Attention.FusedAndWideHeadsMatchCpu'
fi
exit 0
