#!/usr/bin/env bash
# A CUDA trainer's `--compile-kernels ARCH` (labels cuda, e2e): the program's kernels compiled by NVRTC
# into the kernel cache with no GPU and no device opened (runtime/cuda/device.c, dev_compile: what
# tests/gpu/pack.sh does so that the GPU machine compiles nothing), then exit:
#   - sm_90a: exit 0, the line "kernels: N for sm_90a with the attention's tile candidates", one cubin
#     (an ELF image) in SHARDRT_CUBIN_CACHE whose name is the cache key and the architecture;
#   - the same again: "already in the cache", no new file;
#   - SHARDRT_ATTN_AUTOTUNE=0 (the compiled tiles alone, as a run with it builds them): another key,
#     a second, smaller cubin;
#   - compute_90: PTX (the driver's JIT input) for that virtual architecture;
#   - a name NVRTC does not use, and the flag on a CPU trainer: a clear error, a non-zero exit, nothing
#     written.
#   cuda_compile_kernels.sh SHARDC
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/../lib.sh"
shardc=$(abspath "$1")
"$shardc" build models/tiny.model -D seq=16 -D micro_batch=4 -D dp=1 -D precision=bf16 --world 1 --target cuda \
  -o "$t/tc" >"$t/build.out" 2>&1 || { cat "$t/build.out"; exit 1; }
"$shardc" build models/tiny.model -D seq=16 -D micro_batch=4 -D dp=1 --world 1 -o "$t/tcpu" >"$t/build.out" 2>&1 ||
  { cat "$t/build.out"; exit 1; }
cache=$t/cache
compile() { # compile NAME ARGS...: the trainer's --compile-kernels into $cache, its stdout in $t/NAME.out
  local name=$1
  shift
  env -u SHARDRT_DEVICE SHARDRT_CUBIN_CACHE="$cache" "$@" >"$t/$name.out" 2>"$t/$name.err"
}
files() { find "$cache" -maxdepth 1 -type f -name "$1" | sort; }

compile first "$t/tc" --compile-kernels sm_90a || { cat "$t/first.out" "$t/first.err"; fail "--compile-kernels sm_90a"; }
grep -qE "^kernels: [0-9]+ for sm_90a with the attention's tile candidates, .* compiled by NVRTC in" "$t/first.out" ||
  { cat "$t/first.out"; fail "no 'kernels:' line for the compile"; }
mapfile -t cubins < <(files '*-sm_90a.cubin')
[ "${#cubins[@]}" -eq 1 ] || fail "want 1 cubin in the cache, found ${#cubins[@]}: ${cubins[*]}"
[[ "$(basename "${cubins[0]}")" =~ ^[0-9a-f]{32}-sm_90a\.cubin$ ]] || fail "cache file name ${cubins[0]}"
[ "$(head -c 4 "${cubins[0]}" | od -An -c | tr -d ' ')" = '177ELF' ] || fail "${cubins[0]} is not an ELF image"
big=$(stat -c %s "${cubins[0]}")

compile again "$t/tc" --compile-kernels sm_90a || { cat "$t/again.err"; fail "second --compile-kernels"; }
grep -q "already in the cache" "$t/again.out" || { cat "$t/again.out"; fail "the second compile did not hit the cache"; }
[ "$(files '*' | wc -l)" -eq 1 ] || fail "the second compile wrote a file"
# the other flags of a run do nothing here: said (they were dropped without a word)
compile others "$t/tc" --steps 3 --compile-kernels sm_90a --data nowhere.bin || { cat "$t/others.err"; fail "--compile-kernels with --steps"; }
grep -q "^warning: --compile-kernels compiles the kernels and exits: --steps, --data do nothing$" "$t/others.err" ||
  { cat "$t/others.err"; fail "no warning for the flags --compile-kernels drops"; }

compile notune env SHARDRT_ATTN_AUTOTUNE=0 "$t/tc" --compile-kernels sm_90a || { cat "$t/notune.err"; fail "without candidates"; }
grep -qE "^kernels: [0-9]+ for sm_90a, .* compiled by NVRTC" "$t/notune.out" || { cat "$t/notune.out"; fail "no-candidates line"; }
mapfile -t cubins < <(files '*-sm_90a.cubin')
[ "${#cubins[@]}" -eq 2 ] || fail "want 2 cubins (with and without the candidates), found ${#cubins[@]}"
small=$(stat -c %s "$(ls -S "${cubins[@]}" | tail -1)")
[ "$small" -lt "$big" ] || fail "the cubin without the tile candidates ($small bytes) is not smaller than with them ($big)"

compile ptx "$t/tc" --compile-kernels compute_90 || { cat "$t/ptx.err"; fail "--compile-kernels compute_90"; }
mapfile -t ptx < <(files '*-compute_90.ptx')
[ "${#ptx[@]}" -eq 1 ] || fail "want 1 PTX file, found ${#ptx[@]}"
grep -q '^\.target sm_90' "${ptx[0]}" || fail "${ptx[0]} is not PTX for sm_90"

n=$(files '*' | wc -l)
if compile bad "$t/tc" --compile-kernels volta; then fail "--compile-kernels volta exited 0"; fi
grep -q "error: --compile-kernels volta: expected an architecture as NVRTC names it" "$t/bad.err" ||
  { cat "$t/bad.err"; fail "the message for an unknown architecture"; }
if compile cpu "$t/tcpu" --compile-kernels sm_90a; then fail "a CPU trainer's --compile-kernels exited 0"; fi
grep -q "this trainer runs on the CPU: it has no GPU kernels to compile" "$t/cpu.err" ||
  { cat "$t/cpu.err"; fail "the message for a CPU trainer"; }
[ "$(files '*' | wc -l)" -eq "$n" ] || fail "a refused --compile-kernels wrote into the cache"
echo "ok: --compile-kernels: cubins with and without the tile candidates ($big, $small bytes), PTX, the cache hit, 2 refusals"
