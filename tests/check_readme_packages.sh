#!/usr/bin/env bash
# check_readme_packages.sh — the README's list of the Debian packages
# scripts/setup.sh installs names every one of them (issue: the list had
# drifted from the script). Usage: check_readme_packages.sh SOURCE_DIR
set -euo pipefail
src=$1
pkgs=$(sed -n '/^PACKAGES=(/,/^)/p' "$src/scripts/setup.sh" | sed '1d;$d' | tr -s ' \n' '\n' | grep .)
[[ -n $pkgs ]] || { echo "FAIL: no PACKAGES list in scripts/setup.sh"; exit 1; }
missing=()
for p in $pkgs; do
  grep -q -- "\`$p\`" "$src/README.md" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "FAIL: README.md does not name these packages of scripts/setup.sh (as \`name\`): ${missing[*]}"
  exit 1
fi
echo "README names all $(wc -w <<<"$pkgs") packages of scripts/setup.sh"
