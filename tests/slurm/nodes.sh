#!/usr/bin/env bash
# tests/slurm/nodes.sh [SHARDC] — a job on 2 Slurm nodes through the --sbatch script,
# scripts/launch.sh and the trainer, against a REAL Slurm (on demand: not in ctest, not in CI).
# Needs a slurmctld with at least 2 idle nodes that share this machine's temporary folder:
# `tests/slurm/local_cluster.sh start 2` brings up node1 and node2 on this host (two slurmd,
# Slurm's multiple-slurmd support); its SLURM_CONF is used when SLURM_CONF is unset. Skips
# (status 0, "SKIP") without one. SHARDC defaults to build/shardc. About 1.5-2.5 min.
#   - the dp=2 trainer built for a topology of 2 nodes x 1 CPU rank: job.sh asks --nodes=2
#     --ntasks=2 --ntasks-per-node=1; srun's tasks of that allocation run one on each node
#     (SLURMD_NODENAME node1 / node2, SLURM_NODEID 0 / 1, SLURM_LOCALID 0 on both);
#   - the job, its ranks held before step 3 (SHARDRT_FAULT_WAIT): both ranks train "via srun"
#     over tcp (the two nodes share one host here: each task's SHARDRT_NODE is its Slurm node, so
#     the runtime takes them for two nodes and picks the network provider between them); `scancel
#     --signal=USR1 --batch` stops both after step 3 with its checkpoint, the launcher requeues the
#     job, and its rerun (let start at once) resumes from step 3 to every loss and the step-12
#     checkpoint of an undisturbed mpirun run, bit-identical;
#   - the same job without --signal, at its time limit (--time=1): Slurm's SIGTERM on both nodes
#     (Reason=TimeLimit), the same stop, a requeue and a bit-identical resume.
if [ -z "${SLURM_CONF:-}" ] && [ -f "${SHARDC_SLURM_DIR:-/tmp/shardc-slurm}/slurm.conf" ]; then
  export SLURM_CONF=${SHARDC_SLURM_DIR:-/tmp/shardc-slurm}/slurm.conf
fi
skip() { echo "nodes.sh: SKIP: $* (tests/slurm/local_cluster.sh start 2 brings up 2 nodes on this host)"; exit 0; }
for b in sbatch scontrol scancel srun sinfo; do command -v $b >/dev/null || skip "no $b on PATH"; done
ping=$(scontrol ping 2>&1) || true
grep -q "is UP" <<<"$ping" || skip "no slurmctld answers (scontrol ping: $(head -1 <<<"$ping"))"
idle=$(sinfo -h -N -t idle -o %N | sort -u | wc -l)
[ "$idle" -ge 2 ] || skip "fewer than 2 idle nodes ($(sinfo -h -N -o '%N %t' | tr '\n' ' '))"
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/../lib.sh"
here=$(abspath "$(dirname "$0")")
shardc=$(abspath "${1:-build/shardc}")
# shellcheck source=tests/codegen/lib.sh
source tests/codegen/lib.sh
# shellcheck source=tests/slurm/lib.sh
source "$here/lib.sh"
jobs_started=()
cleanup() {
  local j
  for j in "${jobs_started[@]}"; do scancel "$j" 2>/dev/null; done
  rm -rf "$t"
}
trap cleanup EXIT
echo "nodes.sh: $(sinfo -V) ($SLURM_CONF), nodes: $(sinfo -h -N -o '%N %c CPUs %t' | tr '\n' ';')"

t0=$(date +%s)
cat >"$t/two.topo" <<'TOPO'
# two nodes of one CPU rank each (tests/slurm/nodes.sh)
topology two_nodes {
  nodes 2
  node {
    cpu x 1 { memory 8 GiB  bf16 116 GFLOPS  f32 116 GFLOPS  hbm 20 GB/s }
    link shm 6 GB/s latency 1 us
    host memory 24 GiB
  }
  network ethernet 3 GB/s latency 50 us
}
TOPO
"$shardc" build models/tiny.model -D seq=32 -D micro_batch=4 -D dp=2 -D tp=1 --world 2 --topology "$t/two.topo" \
  -o "$t/dp2" --sbatch "$t/job.sh" 2>"$t/build.err" >/dev/null || { cat "$t/build.err"; fail "build --sbatch"; }
for l in "#SBATCH --nodes=2" "#SBATCH --ntasks=2" "#SBATCH --ntasks-per-node=1"; do
  grep -qxF -- "$l" "$t/job.sh" || { cat "$t/job.sh"; fail "'$l' not in job.sh"; }
done
ck=(--steps 12 --ckpt-every 4 --threads 1)
"${mpi[@]}" -np 2 "$t/dp2" "${run[@]}" "${ck[@]}" --save-to "$t/A" --log "$t/a.jsonl" >"$t/a.out" 2>&1 || { cat "$t/a.out"; fail "the mpirun run"; }
cd "$t"

# where srun puts the tasks of job.sh's allocation
{
  grep '^#!' job.sh
  grep '^#SBATCH' job.sh | grep -v -- '--output\|--signal\|--requeue'
  echo '#SBATCH --output=env-%j.out'
  echo 'srun -n 2 --mpi=pmix bash -c '\''echo "$SLURM_PROCID $SLURMD_NODENAME $SLURM_NODEID $SLURM_LOCALID" >"$0/task.$SLURM_PROCID"'\'' "$1"'
} >env.sh
sbatch --wait env.sh "$t" >/dev/null || { cat env-*.out; fail "the environment job"; }
[ "$(cat task.0)" = "0 node1 0 0" ] && [ "$(cat task.1)" = "1 node2 1 0" ] || { cat task.*; fail "the tasks are not one per node"; }
echo "tasks: rank 0 on node1 (SLURM_NODEID 0), rank 1 on node2 (SLURM_NODEID 1), SLURM_LOCALID 0 on both"

# each task's node is its Slurm node (SHARDRT_NODE; on a real cluster the host names differ already)
printf '#!/usr/bin/env bash\nexport SHARDRT_NODE=$SLURMD_NODENAME\nexec %q "$@"\n' "$t/dp2" >node-trainer
chmod +x node-trainer
id=$(SHARDC_TRAINER=$t/node-trainer submit N)
jobs_started+=("$id")
wait_for 60 held "$id" || { cat "$t/shardc-tiny-$id.out"; fail "job $id: the ranks were not held before step 3"; }
grep -q "^ranks: 2 (dp 2 x pp 1 x cp 1 x tp 1) via srun, tcp" "shardc-tiny-$id.out" || { cat "shardc-tiny-$id.out"; fail "job $id: not via srun over tcp"; }
scancel --signal=USR1 --batch "$id"
requeued N "$id" "2 nodes, scancel --signal=USR1 --batch" now
grep -q "node1: task 0: Exited with exit code 75" "shardc-tiny-$id.out" && grep -q "node2: task 1: Exited with exit code 75" "shardc-tiny-$id.out" ||
  { cat "shardc-tiny-$id.out"; fail "job $id: the stop was not on node1 and node2"; }
echo "job $id on node1 + node2 (via srun, tcp): scancel --signal=USR1 --batch stopped both ranks after step 3 (75), requeued, $rerun, resumed: bit-identical"
# the time limit without --signal on 2 nodes: SIGTERM to every process of the job on both nodes,
# Reason=TimeLimit: stopped, requeued, resumed
grep -v -- '^#SBATCH --signal' job.sh >job-nosig.sh
t1=$(date +%s)
id=$(script=job-nosig.sh SHARDC_TRAINER=$t/node-trainer submit T --time=1)
jobs_started+=("$id")
wait_for 60 held "$id" || { cat "$t/shardc-tiny-$id.out"; fail "job $id: the ranks were not held before step 3"; }
requeued T "$id" "2 nodes, the time limit without --signal" now SIGTERM
grep -q "launch.sh: --requeue: the SIGTERM was Slurm's at the job's time limit (Reason=TimeLimit" "shardc-tiny-$id.out" ||
  { cat "shardc-tiny-$id.out"; fail "job $id: not requeued as a time limit"; }
echo "job $id on node1 + node2, --time=1 without --signal: SIGTERM at the limit $((requeue_at - t1)) s after sbatch, stopped after step 3 (75), requeued, $rerun, resumed: bit-identical"
echo "nodes.sh: ok ($(($(date +%s) - t0)) s)"
