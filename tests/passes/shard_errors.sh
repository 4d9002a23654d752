#!/usr/bin/env bash
# Plans that cannot work are compile errors naming the constraint and a valid alternative
# (file:line:col, the line, a caret, a note), exit 1; attention tp cannot split is a warning.
# Usage: shard_errors.sh SHARDC   (run from anywhere)
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/../lib.sh"
set +e # every case runs: $status collects the failures
shardc=$(abspath "$1")
status=0
# a degree the command line set: the error quotes that -D, the caret under its value (it pointed at `parallel {`)
expect_shardc 1 "<command line>:1:4: error: the plan uses dp 3 x tp 1 x pp 1 x cp 1 = 3 ranks but the launched world has 4" \
  "    1 | dp=3" "note: use \`dp auto\` (dp 4) or -D dp=4" -- plan models/tiny.model -D dp=3 --world 4
expect_shardc 1 "error: tp 16 does not fit in a node of 8 devices" "note: use tp 8 with pp 2" "-D cross_node_tp=on" \
  -- plan models/gpt2-124m.model -D tp=16 --topology models/topo/p4d-x4.topo
expect_shardc 1 "models/tiny.model:14:7: error: the vocabulary (256) is not divisible by tp 3" "   14 |   x = embed(wte" \
  "note: the vocab-parallel embedding splits its rows over tp; pad the vocabulary" \
  "std/transformer.model:66:9: error: the weight's output dim (256) is not divisible by tp 3" \
  "note: a column-parallel weight needs its 256 columns split 3 ways; use tp 1, 2" \
  -- plan models/tiny.model -D tp=3 --world 3 -D cross_node_tp=on
expect_shardc 0 "std/transformer.model:53:7: warning: attention has 12 heads and 12 kv heads: tp 8 does not divide them" \
  "note: tp that splits the heads too: 1, 2, 4" -- plan models/gpt2-124m.model -D tp=8
expect_shardc 1 "std/transformer.model:53:7: error: attention has 4 heads and 2 kv heads: tp 4 must divide both" \
  "note: tensor parallelism gives each rank whole heads; tp that divides both here: 1, 2" \
  -- plan models/llama3-8b.model -D heads=4 -D kv_heads=2 -D d=64 -D ffn=128 -D vocab=256 -D layers=1 -D seq=16 \
     -D tp=4 -D dp=1 --world 4 -D micro_batch=1
# context parallelism: the sequence must split into 2 x cp chunks
expect_shardc 1 "models/tiny.model:8:10: error: the sequence (24 tokens of input \`tokens\`) does not split into 2 x cp = 16 chunks" \
  "    8 |   input  tokens  : i32[batch, seq]" "note: context parallelism gives each cp rank two of 2 x cp equal chunks" \
  -- plan models/tiny.model -D seq=24 -D cp=8 -D dp=1 --world 8
# (sp with cp, once refused here, compiles: tests/passes/test_cp_equiv.c proves it equal to one rank)
expect_shardc 0 -- plan models/llama3-8b.model -D heads=4 -D kv_heads=2 -D d=64 -D ffn=128 -D vocab=256 -D layers=1 -D seq=16 \
     -D tp=2 -D cp=2 -D sp=on -D dp=1 --world 4 -D micro_batch=1
# (cp on the CUDA target, once refused here, runs: tests/e2e/cuda_multirank.sh cp2*)
[ $status = 0 ] && echo "shard errors: every plan that cannot work is refused with its constraint and an alternative"
exit $status
