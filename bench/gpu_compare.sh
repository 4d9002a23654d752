#!/usr/bin/env bash
# bench/gpu_compare.sh — on a machine with an NVIDIA GPU: GPT-2 124M (B=16, T=1024, bf16, one GPU)
# trained by shardc's CUDA trainer, llm.c's train_gpt2cu and PyTorch (eager and torch.compile),
# side by side on the same GPU, and the 509M Llama-shaped model (8 layers, d 2048, GQA 16/8,
# SwiGLU, vocab 32000, B=8, T=1024) by shardc and PyTorch. Prints one line per trainer: median ms/step after
# warm-up and tokens/s. Results go to docs/performance.md with the GPU's name.
#
# The trainers are built on any machine with the toolkit (the GPU machine has no flex/bison/MPI):
#   shardc build models/gpt2-124m.model --world 1 --target cuda -D micro_batch=16 -D batch=16 \
#     -D seq=1024 -D zero=0 -o BIN/gpt2_cuda
#   shardc build models/llama3-8b.model --world 1 --target cuda -D vocab=32000 -D layers=8 -D d=2048 \
#     -D heads=16 -D kv_heads=8 -D ffn=5632 -D seq=1024 -D micro_batch=8 -D batch=8 -D zero=0 \
#     -D recompute=none -D tp=1 -D sp=off -o BIN/llama509_cuda
#   llm.c (github.com/karpathy/llm.c): make train_gpt2cu USE_CUDNN=0 NO_MULTI_GPU=1 NO_USE_MPI=1
#     with CUDA 13 on the CPU machine (no GPU, no NVML): GPU_COMPUTE_CAPABILITY=90 as well; cudaMemAdvise's
#     location is a cudaMemLocation now ({cudaMemLocationTypeHost, 0} for cudaCpuDeviceId in llmc/cuda_utils.cuh),
#     and without nvml.h it needs no -lnvidia-ml: nvcc -c train_gpt2.cu (the make line's flags), then
#     nvcc train_gpt2.o -lcublas -lcublasLt -o train_gpt2cu
# tests/gpu/pack.sh builds the two shardc trainers and packs them (.gpu/bin, with LLMC=path/to/train_gpt2cu
# llm.c's too) with their libraries for the GPU machine: source .gpu/env.sh && bench/gpu_compare.sh .gpu/bin
# `llamanofuse`: the Llama trainer built with `--no-fuse residual,swiglu,normres` (llama509_cuda_nofuse, tests/gpu/pack.sh),
# right after `llama`: the three fusions' effect on the same GPU (docs/cuda.md "--no-fuse"); `llamanohfuse`: built
# with `--no-fuse hfuse` (llama509_cuda_nohfuse): the sibling GEMMs' batched launches' effect (passes/hfuse.c)
#   bench/gpu_compare.sh BIN [steps=30] [parts=shardc,perlayer,llama,llamanofuse,llamanohfuse,llmc,torch,torchllama]
set -uo pipefail
cd "$(dirname "$0")/.."
bin=$(cd "${1:?usage: bench/gpu_compare.sh BIN [steps] [parts]}" && pwd)
steps=${2:-30}
parts=${3:-shardc,perlayer,llama,llamanofuse,llamanohfuse,llmc,torch,torchllama}
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
# llm.c's uint16 token shard: a repeated random sequence of 4096 ids below the vocabulary
tokens() { python3 bench/gpt2_tokens.py "$1" 800000 --vocab "$2" --repeat 4096; }
tokens "$t/gpt2.bin" 50257
tokens "$t/llama.bin" 32000
# median ms/step of a shardc trainer's log after its first step
shardc_run() {
  local name=$1 exe=$2 data=$3 tok=$4
  "$exe" --data "$data" --steps "$steps" --eval-every 0 --val-batches 1 --log "$t/$name.jsonl" |
    grep -E "^(device|memory)" | head -3
  python3 - "$t/$name.jsonl" "$name" "$tok" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l]
steady = rows[1:] if len(rows) > 1 else rows
ms = statistics.median(r["ms"] for r in steady)
print("%s: median %.1f ms/step, %.0f tokens/s, MFU %.1f%%, loss %.3f -> %.3f" % (sys.argv[2], ms,
      int(sys.argv[3]) / (ms / 1e3), 100 * statistics.median(r["mfu"] for r in steady), rows[0]["loss"], rows[-1]["loss"]))
PY
}
case ",$parts," in *,shardc,*) shardc_run "shardc gpt2-124m B=16 T=1024" "$bin/gpt2_cuda" "$t/gpt2.bin" 16384 ;; esac
# the same trainers with the weights' bf16 copies cast per layer (weight_copy per_layer), side by side
case ",$parts," in *,perlayer,*) [ -x "$bin/gpt2_cuda_perlayer" ] &&
  shardc_run "shardc gpt2-124m B=16 T=1024 per-layer casts" "$bin/gpt2_cuda_perlayer" "$t/gpt2.bin" 16384 ;; esac
case ",$parts," in *,llama,*) [ -x "$bin/llama509_cuda" ] &&
  shardc_run "shardc llama-509m B=8 T=1024" "$bin/llama509_cuda" "$t/llama.bin" 8192 ;; esac
case ",$parts," in *,llamanofuse,*) [ -x "$bin/llama509_cuda_nofuse" ] &&
  shardc_run "shardc llama-509m B=8 T=1024 --no-fuse residual,swiglu,normres" "$bin/llama509_cuda_nofuse" "$t/llama.bin" 8192 ;; esac
case ",$parts," in *,llamanohfuse,*) [ -x "$bin/llama509_cuda_nohfuse" ] &&
  shardc_run "shardc llama-509m B=8 T=1024 --no-fuse hfuse" "$bin/llama509_cuda_nohfuse" "$t/llama.bin" 8192 ;; esac
case ",$parts," in *,perlayer,*) [ -x "$bin/llama509_cuda_perlayer" ] &&
  shardc_run "shardc llama-509m B=8 T=1024 per-layer casts" "$bin/llama509_cuda_perlayer" "$t/llama.bin" 8192 ;; esac
case ",$parts," in *,llmc,*) if [ -x "$bin/train_gpt2cu" ]; then
  (cd "$t" && "$bin/train_gpt2cu" -e d12 -i gpt2.bin -j gpt2.bin -b 16 -t 1024 -d 16384 -x "$steps" -v 100000 \
    -s 100000 -h 0 -o "$t/llmc" > llmc.txt 2>&1) || tail -5 "$t/llmc.txt"
  python3 - "$t/llmc.txt" <<'PY'
import re, statistics, sys
ms = [float(m.group(1)) for m in re.finditer(r"\| ([0-9.]+) ms \|", open(sys.argv[1]).read())]
steady = ms[1:] if len(ms) > 1 else ms
if steady:
    print("llm.c train_gpt2cu gpt2-124m B=16 T=1024: median %.1f ms/step, %.0f tokens/s" % (
        statistics.median(steady), 16384 / (statistics.median(steady) / 1e3)))
else:
    print("llm.c: no step lines"); print(open(sys.argv[1]).read()[-2000:])
PY
fi ;; esac
case ",$parts," in *,torch,*) python3 bench/peers/gpt2_torch.py --steps "$steps" ;; esac
case ",$parts," in *,torchllama,*) python3 bench/peers/gpt2_torch.py --model llama509 -B 8 --steps "$steps" ;; esac
