#!/usr/bin/env bash
# setup.sh — installs what building and testing Kiln needs on Debian 12.
# Idempotent: checks each package with dpkg-query and runs apt-get (update +
# install) only when something is missing. Uses sudo only when not root.
set -euo pipefail

PACKAGES=(
  cmake gcc make pkg-config
  llvm-19-dev libopenblas-dev libcmocka-dev zlib1g-dev libjansson-dev
  python3-numpy python3-pytest python3-hypothesis python3-torch
  python3-setuptools python3-pip
  dataset-fashion-mnist fortunes graphviz
  clang-19 libclang-rt-19-dev
  openmpi-bin libopenmpi-dev
  protobuf-c-compiler libprotobuf-c-dev libonnx-dev libonnx-testdata python3-torchvision
)

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  if [[ "$status" != "install ok installed" ]]; then
    missing+=("$p")
  fi
done

# dpkg's status can say "installed" while a file is gone (a missing
# /usr/bin/python3 failed CI once): the interpreter the NumPy tests use must
# import what they need, else Debian's Python packages are reinstalled.
PYTHON_PACKAGES=(python3-minimal python3 python3-numpy python3-pytest python3-hypothesis)
python_ok() { /usr/bin/python3 -c 'import numpy, pytest, hypothesis' >/dev/null 2>&1; }

if ((${#missing[@]} == 0)) && python_ok; then
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

APT=("${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get)
"${APT[@]}" update -q
if ((${#missing[@]})); then
  echo "setup.sh: installing ${missing[*]}"
  "${APT[@]}" install -y -q --no-install-recommends "${missing[@]}"
fi
if ! python_ok; then
  echo "setup.sh: /usr/bin/python3 cannot import numpy, pytest and hypothesis: reinstalling ${PYTHON_PACKAGES[*]}"
  "${APT[@]}" install -y -q --no-install-recommends --reinstall "${PYTHON_PACKAGES[@]}"
  python_ok || {
    echo "setup.sh: /usr/bin/python3 still cannot import numpy, pytest and hypothesis" >&2
    exit 1
  }
fi
