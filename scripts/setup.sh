#!/usr/bin/env bash
# Installs every system dependency shardc needs on a fresh Debian 12 machine.
# Idempotent and quiet when everything is already present.
set -euo pipefail

PKGS=(
  build-essential cmake ninja-build pkg-config
  flex bison
  llvm-19-dev libzstd-dev
  libopenblas-dev libopenblas-openmp-dev libblis-dev
  openmpi-bin libopenmpi-dev
  libfabric-dev libfabric-bin
  clang libclang-rt-14-dev
  python3
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >/dev/null
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
