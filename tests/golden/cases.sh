# tests/golden/cases.sh — the golden cases: NAME|MODEL|SHARDC-FLAGS, one `shardc plan --ir` each, whose
# output golden.sh keeps in tests/golden/NAME.ir and ir_roundtrip.sh reads back (with more cases).
# shellcheck shell=bash disable=SC2034 # (the sourcing script's)
golden_cases=(
  "tiny|models/tiny.model"
  "gpt2-124m|models/gpt2-124m.model"
  "gpt2-124m-tp8|models/gpt2-124m.model|-D tp=8"
  "gpt2-124m-dp4-tp8|models/gpt2-124m.model|-D tp=8 --topology models/topo/p4d-x4.topo"
  "llama3-8b|models/llama3-8b.model"
  "gpt3-175b|models/gpt3-175b.model"
)
