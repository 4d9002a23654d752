#!/usr/bin/env bash
# The front end's answers to hostile input (issue 19's probe): each generated input must be refused
# with its diagnostic and exit 1 — never a crash, a hang or a flood. usage: probes.sh SHARDC
set -u
shardc=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0

# expect NAME WANT_RC PATTERN MAX_STDERR_BYTES -- shardc args...: exit code, a line of stderr, its size
expect() {
  local name=$1 want=$2 pattern=$3 max=$4
  shift 5
  timeout 60 "$shardc" "$@" >/dev/null 2>"$tmp/err"
  local rc=$? size
  size=$(wc -c <"$tmp/err")
  if [ "$rc" != "$want" ] || ! grep -q -- "$pattern" "$tmp/err" || [ "$size" -gt "$max" ]; then
    echo "FAIL $name: exit $rc (want $want), stderr $size bytes (at most $max), pattern '$pattern'"
    head -c 2000 "$tmp/err"
    status=1
  else
    echo "ok   $name"
  fi
}

model() { # model NAME BODY_LINES...: a model m around the lines, into $tmp/NAME.model
  local f=$tmp/$1.model
  shift
  { echo 'model m {'; printf '%s\n' "$@"; echo '}'; } >"$f"
}

# 1. Deep expressions: a 100,000-term constant and a 20,000-term tensor chain overflowed the stack.
model deep_const "  const v = $(python3 -c "print(' + '.join(['1'] * 100000))")" '  input t : f32[2, 4]' '  loss = sum(t) * v'
expect deep_const 1 'error: expression nested too deeply' 4000 -- plan "$tmp/deep_const.model"
model deep_chain '  input t : f32[2, 4]' "  y = $(python3 -c "print(' + '.join(['t'] * 20000))")" '  loss = sum(y)'
expect deep_chain 1 'error: expression nested too deeply' 4000 -- plan "$tmp/deep_chain.model"

# 2. 100,000 syntax errors: the first 50 shown, the rest counted, at once (was quadratic: minutes).
python3 -c "print('model m {'); print('  x = = ;\n' * 100000); print('}')" >"$tmp/errors.model"
expect many_errors 1 'error: 99950 more errors not shown' 20000 -- plan "$tmp/errors.model"
expect many_errors_all 1 'errors.model:100000:7: error' 100000000 -- plan "$tmp/errors.model" --max-errors 0

# 3. A NUL byte ended the file silently (the rest ignored, exit 0).
printf 'model m {\n  input t : f32[2, 4]\n  loss = sum(t)\n}\n\0model n {\n' >"$tmp/nul.model"
expect nul_byte 1 'nul.model:5:1: error: a NUL byte in the source' 2000 -- plan "$tmp/nul.model"

# 4. A 10 MB name was echoed twice in full.
model long_name '  input t : f32[2, 4]' "  y = $(python3 -c "print('a' * 10000000)") + t" '  loss = sum(y)'
expect long_name 1 'more characters)' 4000 -- plan "$tmp/long_name.model"

# 5. --world: 99999999999 and 1e8 hung, 4294967298 wrapped to 2.
for w in 99999999999 1e8 4294967298 -1 0; do
  expect "world_$w" 1 "error: --world needs a whole number from 1 to" 2000 -- plan "$(dirname "$0")/../../models/tiny.model" --world "$w"
done

# 6. An error inside a layer of the standard library names the user's call that led there.
printf 'import "std/transformer.model"\nmodel m {\n  input t : f32[2, 4, 6]\n  loss = sum(attention(t, heads: 4))\n}\n' >"$tmp/heads.model"
expect heads_call 1 'heads.model:4:14: note: in the call of layer `attention` here' 4000 -- plan "$tmp/heads.model"
# 7. Build failures the user caused were blamed on shardc ("a shardc bug: please report it").
tiny="$(dirname "$0")/../../models/tiny.model"
expect out_missing_dir 1 "error: -o $tmp/no/t: cannot write into '$tmp/no'" 2000 -- build "$tiny" --world 1 -o "$tmp/no/t"
expect out_is_dir 1 "error: -o $tmp: is a directory" 2000 -- build "$tiny" --world 1 -o "$tmp"
expect cc_missing 1 'error: the C compiler `no-such-cc` (from --cc) was not found' 2000 -- build "$tiny" --world 1 --cc no-such-cc -o "$tmp/t"
expect cflags_bad 1 'check --cflags (with the default compiler and flags' 4000 -- build "$tiny" --world 1 --cflags -fno-such-flag-here -o "$tmp/t"
expect cc_plan 1 'error: --cc compiles the trainer: use it with `shardc build` or -o FILE' 2000 -- plan "$tiny" --cc gcc
expect cflags_plan 1 'error: --cflags compiles the trainer' 2000 -- plan "$tiny" --cflags -O3 --emit-c "$tmp/e"
# 8. A warning points at what it warns about: bf16 on the CPU target pointed at `train {`.
sed 's/^  precision f32$/  precision bf16/' "$tiny" >"$tmp/bf16.model"
expect bf16_cpu_loc 0 'bf16.model:33:3: warning: precision bf16 on the CPU target' 2000 -- plan "$tmp/bf16.model" -I "$(dirname "$tiny")"
# 8a. An option without its value was an unknown option; a misspelt one gets a hint and no cascade
#     (its value read as a second input file).
expect world_no_value 1 'error: --world needs a value' 2000 -- plan "$tiny" --world
expect option_typo 1 "error: unknown option '--wrld': did you mean '--world'?" 300 -- plan "$tiny" --wrld 2
# 8b. A negative recipe value names which one (it may come from -D): "lr, grad_clip and weight_decay".
expect negative_wd 1 'error: train: `weight_decay` must not be negative, got -0.5' 2000 -- plan "$tiny" --world 1 -D weight_decay=-0.5
# 9. A value assigned and never read was dropped without a word (`y = x + mlp(..)` in a repeat body
#    that carries x: the MLP vanished from the model).
sed 's/^    x = x + mlp(/    y = x + mlp(/' "$tiny" >"$tmp/unread.model"
expect unread_repeat 0 'unread.model:17:5: warning: `y` is assigned but never read' 2000 -- plan "$tmp/unread.model" -I "$(dirname "$tiny")"
sed 's/^  loss = cross_entropy(layernorm(x)/  h = x * 2\n  h = x * 3\n  loss = cross_entropy(layernorm(h)/' "$tiny" >"$tmp/reassigned.model"
expect unread_reassigned 0 'reassigned.model:19:3: warning: `h` is assigned but never read' 2000 -- plan "$tmp/reassigned.model" -I "$(dirname "$tiny")"
sed 's/^    x = x + mlp(/    _y = x + mlp(/' "$tiny" >"$tmp/exempt.model"
if "$shardc" plan "$tmp/exempt.model" -I "$(dirname "$tiny")" 2>&1 >/dev/null | grep -q 'never read'; then
  echo "FAIL unread_exempt: a name starting with _ was reported"
  status=1
else
  echo "ok   unread_exempt"
fi
if "$shardc" plan "$tiny" 2>&1 >/dev/null | grep -q 'never read'; then
  echo "FAIL unread_tiny: models/tiny.model reported"
  status=1
else
  echo "ok   unread_tiny"
fi
# 10. A sequence cp does not split (63 tokens, cp 2) was reported, then the shard pass aborted
#     (internal compiler error) checking the local shapes it had not made.
expect cp_odd_seq 1 'error: the sequence (63 tokens of input `tokens`) does not split into 2 x cp = 4 chunks' 4000 -- plan "$tiny" --world 2 -D cp=2 -D seq=63
# 11. sp on with a sequence tp does not split: sp was dropped without a word (all-reduces instead of
#     reduce-scatters), and under cp x tp (68 tokens: 17 per zigzag chunk) the IR was invalid (abort).
expect sp_odd_seq 1 'error: sp on splits the sequence (63 tokens of input `tokens`) over tp 2: it does not divide them' 4000 -- plan "$tiny" --world 2 -D tp=2 -D sp=on -D seq=63
expect sp_cp_seq 1 'inside each of the 2 x cp = 4 chunks: it does not divide them' 4000 -- plan "$tiny" --world 4 -D cp=2 -D tp=2 -D sp=on -D seq=68
# 12. Recipe values no pass reads, or that make the update wrong, were accepted: eps and momentum
#     negative, min_lr negative (the last steps ran at a negative lr) or above lr, momentum under
#     adamw, beta1 under sgd, min_lr under a constant schedule.
expect eps_negative 1 'error: train: `eps` must not be negative, got -1' 2000 -- plan "$tiny" --world 1 -D eps=-1
expect min_lr_negative 1 'error: train: `min_lr` must not be negative, got -0.1' 2000 -- plan "$tiny" --world 1 -D min_lr=-0.1
expect momentum_negative 1 'error: train: `momentum` must not be negative' 2000 -- plan "$tiny" --world 1 -D optimizer=sgd -D momentum=-1
expect min_lr_above 1 'error: train: `min_lr` 0.01 is above `lr` 0.001: the cosine schedule' 2000 -- plan "$tiny" --world 1 -D min_lr=0.01
expect momentum_adamw 1 'optimizer adamw does not read it' 2000 -- plan "$tiny" --world 1 -D momentum=0.9
expect beta1_sgd 1 'optimizer sgd does not read it' 2000 -- plan "$tiny" --world 1 -D optimizer=sgd -D beta1=0.5
sed 's/^  lr_schedule cosine(.*$/  lr_schedule constant\n  min_lr 1e-5/' "$tiny" >"$tmp/minlr.model"
expect min_lr_constant 1 'minlr.model:32:3: error: `min_lr` is where a linear or cosine schedule decays to: lr_schedule constant does not read it' 2000 -- plan "$tmp/minlr.model" -I "$(dirname "$tiny")" --world 1
# 13. An option of a mesh axis of degree 1 applies to nothing: said (as zero's at dp 1), not kept
#     without a word (sp at tp 1, cp_mode at cp 1, a pipeline schedule at pp 1).
sed 's/^  dp auto$/  dp auto\n  schedule zb/' "$tiny" >"$tmp/sched.model"
expect sched_pp1 0 'sched.model:24:3: note: schedule zb: the plan has one pipeline stage (pp 1): no pipeline to schedule' 2000 -- plan "$tmp/sched.model" -I "$(dirname "$tiny")" --world 1
expect sp_tp1 0 'note: sp on: sequence parallelism splits the sequence over tp, and the plan has tp 1' 2000 -- plan "$tiny" --world 1 -D sp=on
expect cp_mode_cp1 0 '<command line>:2:9: note: cp_mode all2all: the plan has cp 1: no context parallelism to run' 2000 -- plan "$tiny" --world 2 -D tp=2 -D cp_mode=all2all
expect coalesce_zero1 0 '<command line>:2:10: note: coalesce on: it joins ZeRO-3'"'"'s parameter gathers and ZeRO-2/3'"'"'s gradient reduce-scatters; this plan has zero 1, no sharded gradient: nothing to coalesce' 2000 -- plan "$tiny" --world 2 -D zero=1 -D coalesce=on
expect coalesce_dp1 0 'note: coalesce off: it joins ZeRO-3'"'"'s parameter gathers and ZeRO-2/3'"'"'s gradient reduce-scatters; this plan has a data-parallel group of one rank' 2000 -- plan "$tiny" --world 1 -D zero=3 -D coalesce=off
expect coalesce_zero2dp1 0 'note: coalesce on: it joins ZeRO-3'"'"'s parameter gathers and ZeRO-2/3'"'"'s gradient reduce-scatters; this plan has a data-parallel group of one rank' 2000 -- plan "$tiny" --world 1 -D zero=2 -D coalesce=on
expect bucket_dp1 0 '<command line>:1:8: note: bucket 1000000 B: the plan has dp 1 and cp 1: no gradient all-reduce to bucket' 2000 -- plan "$tiny" --world 1 -D bucket=1MB
# 14. shardc options kept without a word: --top / --confirm / --budget / --compile-limit without
#     --search, "3abc" read as 3 seconds, --cpu-kernels c with --target cuda, -v with nothing compiled,
#     a 16th -I dropped.
expect search_flag_alone 1 'error: --top tunes the plan search: use it with --search or --pick' 2000 -- plan "$tiny" --world 1 --top 3
expect budget_trailing 1 "error: --budget needs seconds in (0, 1e+09\], got '3abc'" 2000 -- plan "$tiny" --world 1 --search --budget 3abc
expect cpu_kernels_cuda 1 'error: --cpu-kernels c: the CPU target' 2000 -- plan "$tiny" --world 1 --target cuda --cpu-kernels c
expect verbose_plan 1 "error: -v (the C compiler's command) compiles the trainer" 2000 -- plan "$tiny" --world 1 -v
expect import_dirs 1 'error: -I 16: at most 15 import directories' 2000 -- plan "$tiny" --world 1 $(for i in $(seq 16); do echo -I $i; done)
# 15. zero 1 under sgd without momentum shards nothing (no optimizer state) and adds the parameters'
#     all-gathers: said.
expect zero1_sgd 0 'note: zero 1: sgd without momentum keeps no optimizer state, so nothing is sharded' 2000 -- plan "$tiny" --world 2 -D optimizer=sgd -D zero=1
# 16. bucket's range offered `1 PB`, a unit the language does not have.
expect bucket_range 1 'error: `bucket` must be between 1 B and 1000 TB' 2000 -- plan "$tiny" --world 1 -D bucket=2000TB
# 17. build --search -o T printed the ranking and built nothing, exit 0.
expect search_build 1 'error: --search ranks the plans and builds none: add --pick to build the fastest, or leave out -o' 2000 -- build "$tiny" --search -o "$tmp/never"
# 18. A -D value that a check after parsing refuses was reported at the model's block
#     (tiny.model:22:1, `parallel {`): the definition is quoted, the caret under its value; an error
#     in the model's files that a -D may have caused ends with a note naming the definitions.
expect define_loc 1 '<command line>:1:4: error: tp 3 x pp 1 x cp 1 = 3 ranks per replica does not divide the topology of 2 ranks' 2000 -- plan "$tiny" -D tp=3
expect define_quote 1 '^    1 | tp=3$' 2000 -- plan "$tiny" -D tp=3
expect define_caret 1 '^      |    \^$' 2000 -- plan "$tiny" -D tp=3
expect define_const_note 1 'shardc: note: the model was compiled with -D heads=3 -D zero=1 (the command line' 2000 -- plan "$tiny" -D heads=3 -D zero=1
# 19. -D given twice with two values: the second replaced the first without a word (the last
#     still wins: a script's shared definitions, then its own).
expect define_twice 0 'shardc: note: -D tp=1 replaces the earlier -D tp=2' 2000 -- plan "$tiny" -D tp=2 -D tp=1
expect define_twice_same 0 'note: sp on: sequence parallelism' 2000 -- plan "$tiny" --world 1 -D sp=on -D sp=on
# 20. shardc options: a value option given twice kept the last without a word (now a note, the last
#     still wins), `plan build F` built a trainer, --storage 1e400 was an infinite bandwidth.
expect world_twice 0 'shardc: note: --world 2 replaces the earlier --world 1' 2000 -- plan "$tiny" --world 1 --world 2
expect dump_twice 0 'shardc: note: --dump-ir=mesh replaces the earlier --dump-ir$' 2000 -- plan "$tiny" --world 1 --dump-ir --dump-ir=mesh
expect plan_build 1 'error: `build` after `plan`: one command (plan or build), then the .model file' 2000 -- plan build "$tiny" --world 1
expect storage_inf 1 "error: --storage needs a positive bandwidth in GB/s, got '1e400'" 2000 -- plan "$tiny" --world 1 --storage 1e400
# 21. The optimizer's checks of the recipe's numbers pointed at `train {`: now at the number, in the
#     file (a call's argument, a pair's own item) or on the command line.
sed 's/adamw(lr: 1e-3, betas: (0.9, 0.95)/adamw(lr: 1e-3, betas: (0.9, 1.5)/' "$tiny" >"$tmp/betas.model"
expect betas_loc 1 'betas.model:30:42: error: adamw: betas must lie in \[0, 1), got (0.9, 1.5)' 2000 -- plan "$tmp/betas.model" -I "$(dirname "$tiny")" --world 1
expect lr_neg_loc 1 '<command line>:1:4: error: train: `lr` must not be negative, got -1' 2000 -- plan "$tiny" --world 1 -D lr=-1
expect min_lr_lr_loc 1 '<command line>:1:4: error: train: `min_lr` 0.0001 is above `lr` 0' 2000 -- plan "$tiny" --world 1 -D lr=0
# 22. --compare (and --search without --pick) print a table of quiet compiles: --schedule-svg, --dump-ir=...,
#     --time-passes and --no-verify (compare) did nothing there without a word; --no-outline on a plan
#     without a pipeline changes nothing.
expect compare_svg 1 'error: --schedule-svg concerns the plan shardc compiles and prints; --compare prints a table of quiet compiles: leave it out' 2000 -- plan "$tiny" --world 2 --compare zero=0,1 --schedule-svg "$tmp/s.svg"
expect search_dump 1 'error: --dump-ir=mesh concerns the plan shardc compiles and prints; --search prints a table of quiet compiles: leave it out (or add --pick: the fastest plan)' 2000 -- plan "$tiny" --world 2 --search --dump-ir=mesh
expect compare_time 1 'error: --time-passes concerns the plan' 2000 -- plan "$tiny" --world 2 --compare zero=0,1 --time-passes
expect no_outline_pp1 0 'shardc: note: --no-outline: the plan has no pipeline (pp 1)' 2000 -- plan "$tiny" --world 1 --no-outline --emit-c "$tmp/nooutline"
expect import_dir_missing 0 "shardc: note: -I $tmp/nowhere: no such directory: nothing is imported from it" 2000 -- plan "$tiny" --world 1 -I "$tmp/nowhere"
# 23. A warmup as long as the schedule (the lr never decays) was accepted without a word.
expect warmup_steps 0 'tiny.model:26:1: warning: train: warmup 300 is not shorter than steps 300' 2000 -- plan "$tiny" --world 1 -D warmup=300
if "$shardc" plan "$tiny" --world 1 -D warmup=299 2>&1 >/dev/null | grep -q 'warmup'; then
  echo "FAIL warmup_steps_ok: a warmup shorter than the steps was reported"
  status=1
else
  echo "ok   warmup_steps_ok"
fi
# 24. `shardc frob` (a mistyped command) said it could not read a file "frob".
expect unknown_command 1 "error: unknown command 'frob': shardc build | plan FILE.model, or shardc ckpt" 2000 -- frob "$tiny"
# 25. A missing import listed a directory given twice (-I of the default one) twice.
models=$(cd "$(dirname "$tiny")" && pwd)
printf 'import "topo/nope.topo"\nmodel m {\n  input t : f32[2, 4]\n  loss = sum(t)\n}\n' >"$tmp/imp.model"
expect import_once 1 "note: looked for $tmp/topo/nope.topo, $models/topo/nope.topo\$" 2000 -- plan "$tmp/imp.model" -I "$models"
# 26. A syntax error that drops a declaration was followed by an error at every use of what it
#     declared (a stray ',' in tiny's const list: 6 more, `seq` is not set x 4, unknown name x 2).
sed 's/seq = 64,/seq = 64,,/' "$tiny" >"$tmp/comma.model"
expect syntax_alone 1 'comma.model:6:31: error: syntax error' 400 -- plan "$tmp/comma.model" -I "$models"
# 27. `shardc plan` without a file printed the usage alone.
expect plan_no_file 1 'shardc: error: `plan` needs a .model file: shardc plan FILE.model' 300 -- plan --world 1
# 28. --compare with a file that is not there printed a column 'refused' and exited 0.
expect compare_missing 1 "error: --compare: 'bogus' is neither KEY=V1,V2,... nor a .model file: No such file or directory" 300 -- plan "$tiny" --compare bogus
exit $status
