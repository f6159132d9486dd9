#!/usr/bin/env bash
# run_main.sh — the main job on a fresh machine: installs dependencies,
# builds Kiln in build/ and runs the quickstart example.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
JOBS=${KILN_JOBS:-2}
bash "$ROOT/scripts/setup.sh"
cmake -S "$ROOT" -B "$ROOT/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_WERROR=ON
cmake --build "$ROOT/build" -j"$JOBS" --target quickstart
"$ROOT/build/examples/quickstart"
