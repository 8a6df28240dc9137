#!/bin/bash
# A scheduler job that stops well and resumes: submit it again (or with --dependency=singleton)
# and it continues from the newest checkpoint in ckpt/.
#
#   sbatch examples/sbatch-train.sh --model gpt:layers=24,hidden=2048,heads=16,seq=2048,vocab=50257 \
#       --data corpus --steps 100000 --global-batch 512 --micro-batch 4 --lr 3e-4 --tp 2 --pp 2
#
# The scheduler sends SIGTERM to this script 5 minutes before the time limit (--signal=B:TERM);
# the script passes it to mpirun as SIGUSR2, which Open MPI forwards to every rank untouched (a
# SIGTERM mpirun would forward itself and follow with SIGKILL about a second later). The ranks
# agree at the next step boundary, save ckpt/step-N and exit 0. --exit-duration-in-mins stops
# the same way on the run's own clock, should the signal come too late.
#
#SBATCH --job-name=megac-train
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --time=24:00:00
#SBATCH --signal=B:TERM@300

MEGAC=${MEGAC:-megac}
RANKS=${RANKS:-${SLURM_NTASKS:-8}}
CKPT=${CKPT:-ckpt}
LOAD=()
[ -e "$CKPT/latest" ] && LOAD=(--load "$CKPT")

# MPIRUN_FLAGS: extra mpirun flags (a hostfile, --oversubscribe, --allow-run-as-root).
# shellcheck disable=SC2086
mpirun -np "$RANKS" $MPIRUN_FLAGS "$MEGAC" train "$@" --save "$CKPT" --save-interval 1000 \
    --keep-last 2 --exit-duration-in-mins 1430 "${LOAD[@]}" &
pid=$!
trap 'kill -USR2 "$pid" 2>/dev/null' TERM INT
# `wait` returns early (status > 128) when a trapped signal arrives: wait again while mpirun
# runs (it takes at least a step and a save after the signal).
while true; do
  wait "$pid"
  status=$?
  if [ "$status" -le 128 ] || ! kill -0 "$pid" 2>/dev/null; then
    break
  fi
done
exit "$status"
