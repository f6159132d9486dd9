#!/usr/bin/env bash
# setup.sh — installs what building and testing Kiln needs on Debian 12.
# Idempotent: checks each package with dpkg-query and runs apt-get (update +
# install) only when something is missing. Uses sudo only when not root.
set -euo pipefail

PACKAGES=(
  cmake gcc make pkg-config
  llvm-19-dev libopenblas-dev libcmocka-dev zlib1g-dev libjansson-dev
  python3-numpy python3-pytest python3-hypothesis
  dataset-fashion-mnist
)

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  if [[ "$status" != "install ok installed" ]]; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup.sh: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    echo "setup.sh: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi

echo "setup.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
