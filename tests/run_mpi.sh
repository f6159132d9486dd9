#!/usr/bin/env bash
# run_mpi.sh — runs a test program under mpirun on this machine (ctest's
# dist_mpi* tests, tests/CMakeLists.txt).
#
#   run_mpi.sh ok   NP PROGRAM [ARGS...]   the job must succeed
#   run_mpi.sh hang NP PROGRAM   rank 1 never joins a collective
#                                (KILN_TEST_DIST_MODE=hang): the others must
#                                report the timeout and end the job within
#                                KILN_DIST_TIMEOUT (3 s here) + a margin
#   run_mpi.sh exit NP PROGRAM   rank 1 exits early (KILN_TEST_DIST_MODE=exit):
#                                the job must end, well before the timeout
#   run_mpi.sh kill NP PROGRAM   rank 1 is killed (SIGKILL) amid a run of
#                                all-reduces (KILN_TEST_DIST_MODE=kill): the
#                                job must end within KILN_DIST_TIMEOUT (10 s)
#                                + a margin, with a clear error naming the
#                                killed rank or the timeout
#
# Exits 77 (ctest SKIP_RETURN_CODE) when mpirun is absent. Local only:
# shared memory (btl self,vader), no ssh (plm_rsh_agent false), more
# ranks than cores allowed (--oversubscribe), and root allowed (CI
# containers run as root).
set -uo pipefail
mode=$1 np=$2 prog=$3
shift 3 # the rest: the program's arguments
command -v mpirun >/dev/null 2>&1 || { echo "run_mpi.sh: no mpirun: skipped"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
MPIRUN=(mpirun -n "$np" --oversubscribe --mca btl self,vader --mca plm_rsh_agent false)

case "$mode" in
  ok)
    exec "${MPIRUN[@]}" "$prog" "$@"
    ;;
  hang|exit|kill)
    out=$(mktemp)
    trap 'rm -f "$out"' EXIT
    case $mode in hang) limit=3 ;; kill) limit=10 ;; *) limit=60 ;; esac
    start=$(date +%s)
    KILN_DIST_TIMEOUT=$limit KILN_TEST_DIST_MODE=$mode timeout 120 "${MPIRUN[@]}" "$prog" >"$out" 2>&1
    rc=$?
    took=$(($(date +%s) - start))
    cat "$out"
    if ((rc == 0 || rc == 124)); then
      echo "run_mpi.sh: $mode: the job should have failed and ended (exit $rc after $took s)"
      exit 1
    fi
    if [[ $mode == hang ]] && ! grep -q "did not complete within KILN_DIST_TIMEOUT=3 s on rank 0" "$out"; then
      echo "run_mpi.sh: hang: no timeout message from rank 0"
      exit 1
    fi
    if [[ $mode == kill ]] && ! grep -Eq "exited on signal 9|KILN_DIST_TIMEOUT" "$out"; then
      echo "run_mpi.sh: kill: no error that says rank 1 died or the collective timed out"
      exit 1
    fi
    if ((took > 40)); then
      echo "run_mpi.sh: $mode: the job took $took s to end"
      exit 1
    fi
    echo "run_mpi.sh: $mode: the job ended in $took s (exit $rc), as expected"
    ;;
  *) echo "run_mpi.sh: unknown mode $mode" >&2; exit 2 ;;
esac
