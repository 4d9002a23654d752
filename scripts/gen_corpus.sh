#!/usr/bin/env bash
# Writes a deterministic English-like text corpus for byte-level demo models.
#   scripts/gen_corpus.sh OUT [BYTES] [SEED]     (default 400000 bytes, seed 20240520)
# (another SEED gives different text of the same style: e.g. a validation file)
# Sentences come from a small grammar (subjects, verbs, objects, places, dialogue) driven by
# a Park-Miller generator with a fixed seed, computed exactly in awk's doubles, so every awk
# (mawk, gawk, busybox) writes the same bytes on every machine.
set -euo pipefail
out=${1:?usage: gen_corpus.sh OUT [BYTES]}
bytes=${2:-400000}
seed=${3:-20240520}
case $bytes in ''|*[!0-9]*) echo "gen_corpus.sh: BYTES must be a number, not '$bytes'" >&2; exit 1;; esac
case $seed in ''|*[!0-9]*) echo "gen_corpus.sh: SEED must be a number, not '$seed'" >&2; exit 1;; esac
[ "$seed" -ge 1 ] && [ "$seed" -lt 2147483647 ] || { echo "gen_corpus.sh: SEED must be in 1..2147483646" >&2; exit 1; }

mkdir -p "$(dirname "$out")"
awk -v limit="$bytes" -v seed0="$seed" 'BEGIN {
  seed = seed0 + 0
  n = split("cat dog bird fox child farmer baker sailor teacher king queen miller horse goat river", noun, " ")
  split("little old young quiet brave tired happy small grey clever kind red", adj, " ")
  split("sees finds likes follows helps calls watches carries", verb, " ")
  split("saw found liked followed helped called watched carried", verbp, " ")
  split("sleeps sings runs waits laughs works", intr, " ")
  split("slowly quickly happily quietly again today", adv, " ")
  split("the market|the hill|the village|the sea|the old mill|the garden|the forest|the bridge", place, "|")
  split("Anna Ben Clara David Emma Felix Grace Henry", name, " ")
  split("bread|a song|the gate|some water|the map|a lamp|the key|a letter", thing, "|")
  split("said|asked|called|whispered", say, "|")
  text = ""; total = 0
  while (total < limit) {
    para = ""
    ns = 3 + rnd(5)
    for (s = 0; s < ns; s++) para = para (s ? " " : "") sentence()
    para = para "\n\n"
    total += length(para)
    printf "%s", para
  }
}
function rnd(k) { seed = (seed * 16807) % 2147483647; return int(seed / 2147483647 * k) }
function pick(arr, k) { return arr[1 + rnd(k)] }
function np() { return (rnd(3) ? "the " pick(adj, 12) " " : "the ") pick(noun, n) }
function cap(s) { return toupper(substr(s, 1, 1)) substr(s, 2) }
function sentence(  k) {
  k = rnd(7)
  if (k == 0) return cap(np()) " " pick(verb, 8) " " np() "."
  if (k == 1) return pick(name, 8) " went to " pick(place, 8) " and " pick(verbp, 8) " " np() "."
  if (k == 2) return "When " np() " " pick(intr, 6) ", " np() " " pick(intr, 6) " " pick(adv, 6) "."
  if (k == 3) return "\"Where is " pick(thing, 8) "?\" " pick(say, 4) " " pick(name, 8) "."
  if (k == 4) return cap(np()) " " pick(intr, 6) " by " pick(place, 8) "."
  if (k == 5) return pick(name, 8) " gave " pick(thing, 8) " to " np() ", and " np() " " pick(intr, 6) "."
  return "In the morning " np() " " pick(verbp, 8) " " pick(thing, 8) " near " pick(place, 8) "."
}' > "$out"
