#!/bin/sh
# Runs a test binary under `mpirun -np N` (ctest label mpi); exit 77 (a skip) without mpirun.
# usage: run_mpi.sh N BINARY [ARGS...]
if ! command -v mpirun >/dev/null 2>&1; then
  echo "skipped: mpirun is not installed (Debian: openmpi-bin)"
  exit 77
fi
n="$1"
shift
root=""
[ "$(id -u)" = 0 ] && root="--allow-run-as-root"
exec mpirun $root --oversubscribe -np "$n" "$@"
