#!/usr/bin/env bash
# check_main_job_mpi.sh FASHION_MNIST — the main job data-parallel on 2
# ranks (mpirun, local): 5 epochs of global batch 128 (64 per rank),
# gradients averaged with kiln_all_reduce_; checks that the parameters end
# bit-identical on both ranks and the test accuracy is ≥ 85 %. Skips (77)
# without mpirun, or outside CI without the dataset.
set -uo pipefail
BIN=$1
DATA=/usr/share/datasets/fashion-mnist
command -v mpirun >/dev/null 2>&1 || { echo "main_job_mpi2 skipped: no mpirun"; exit 77; }
if [[ ! -f $DATA/train-images-idx3-ubyte.gz && -z "${CI:-}" ]]; then
  echo "main_job_mpi2 skipped: $DATA missing (run scripts/setup.sh)"
  exit 77
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(KILN_DIST_TIMEOUT=120 mpirun -n 2 --oversubscribe --mca btl self,vader --mca plm_rsh_agent false "$BIN" --epochs 5 2>&1)
rc=$?
echo "$out"
((rc == 0)) || { echo "FAIL: exit $rc"; exit 1; }
grep -q "^parameters bit-identical on all 2 ranks$" <<<"$out" || { echo "FAIL: parameters not checked identical"; exit 1; }
final=$(sed -n 's/^final test accuracy \(.*\)%$/\1/p' <<<"$out")
[[ -n "$final" ]] || { echo "FAIL: no final accuracy"; exit 1; }
awk -v a="$final" 'BEGIN { exit !(a >= 85) }' || { echo "FAIL: final test accuracy $final% < 85%"; exit 1; }
echo "main_job_mpi2: $final% after 5 epochs on 2 ranks, parameters bit-identical"
