#!/usr/bin/env bash
# run_main.sh — the main job on a fresh machine: installs dependencies
# (Debian's dataset-fashion-mnist among them), builds Kiln in build/ and
# trains the Fashion-MNIST MLP (examples/fashion_mnist.c). Arguments are
# passed to it (e.g. --epochs 10 --seed 7).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
JOBS=${KILN_JOBS:-2}
bash "$ROOT/scripts/setup.sh"
cmake -S "$ROOT" -B "$ROOT/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_WERROR=ON
cmake --build "$ROOT/build" -j"$JOBS" --target fashion_mnist
"$ROOT/build/examples/fashion_mnist" "$@"
