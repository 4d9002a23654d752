#!/bin/bash
# tests/cuda/wgmma_emu.sh — the emulator's wgmma model (sk_emu_wgmma.h) on hand-computed cases
# (wgmma_emu_test.cc), then its named barriers and copies (sk_emu_ws.h: ws_emu_test.cc), compiled by the host
# C++ compiler as the emulated kernels are.
# Usage: wgmma_emu.sh KERNELS_DIR CUDA_INCLUDE_DIR WORKDIR
set -euo pipefail
src=$(dirname "$0")/wgmma_emu_test.cc
exe=$3/wgmma_emu_test
${CXX:-c++} -std=c++17 -O1 -DSK_EMU -Wall -Werror -Wno-unknown-pragmas -I"$1" -I"$2" "$src" -o "$exe"
"$exe"
# ... and its model of a warp-specialized kernel's named barriers and copies (sk_emu_ws.h: ws_emu_test.cc)
ws=$3/ws_emu_test
${CXX:-c++} -std=c++17 -O1 -DSK_EMU -Wall -Werror -Wno-unknown-pragmas -I"$1" -I"$2" "$(dirname "$0")/ws_emu_test.cc" -o "$ws"
"$ws"
