#!/usr/bin/env bash
# Installs every system dependency shardc needs on a fresh Debian 12 machine.
# Idempotent and quiet when everything is already present.
set -euo pipefail

PKGS=(
  build-essential cmake ninja-build pkg-config
  flex bison
  llvm-19-dev libzstd-dev
  libopenblas-dev libopenblas-openmp-dev libblis-dev
  libdnnl-dev ocl-icd-opencl-dev   # dnnl's CMake config requires OpenCL (a Recommends, skipped by --no-install-recommends)
  openmpi-bin libopenmpi-dev
  libfabric-dev libfabric-bin
  clang libclang-rt-14-dev
  python3
  time
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

# Python's safetensors and numpy: only for a reference check in the tests (train_python reads the
# trainer's checkpoints with them; it is skipped without them). Never needed by shardc itself.
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import safetensors, numpy' >/dev/null 2>&1; then
  if ! python3 -m pip --version >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-pip >/dev/null 2>&1 || true
  fi
  export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
  python3 -m pip install -q safetensors numpy >/dev/null 2>&1 ||
    python3 -m pip install -q --break-system-packages safetensors numpy >/dev/null 2>&1 ||
    echo "setup: could not install Python's safetensors (the train_python test will be skipped)"
fi

# NVIDIA's nvdisasm (from PyPI: the Debian machines have the CUDA compiler but not its binary tools):
# the cuda_nvrtc test disassembles the sm_90 cubin and asserts that the attention kernels run on
# tensor cores (HMMA). Only where a CUDA toolkit is; never needed by shardc itself.
if command -v nvcc >/dev/null 2>&1 && ! command -v nvdisasm >/dev/null 2>&1 &&
  ! python3 -c 'import importlib.util as u, os, sys; s = u.find_spec("nvidia"); sys.exit(not s or not any(os.path.exists(os.path.join(p, "cu13/bin/nvdisasm")) for p in s.submodule_search_locations))' >/dev/null 2>&1; then
  export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
  python3 -m pip install -q "nvidia-cuda-nvdisasm==13.2.51" >/dev/null 2>&1 ||
    python3 -m pip install -q --break-system-packages "nvidia-cuda-nvdisasm==13.2.51" >/dev/null 2>&1 ||
    echo "setup: could not install nvidia-cuda-nvdisasm (the cuda_nvrtc test's tensor-core check will fail)"
fi
