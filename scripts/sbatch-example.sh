#!/usr/bin/env bash
# scripts/sbatch-example.sh — an sbatch script for a shardc trainer on a Slurm cluster (an example
# to copy and edit; submit with `sbatch scripts/sbatch-example.sh`).
#
# The trainer is compiled for the job's world: nodes x tasks per node = the plan's ranks
# (`shardc plan` prints them; `shardc build MODEL --topology TOPO -o train` says "a trainer for N
# ranks"). One task per GPU (or per CPU socket for CPU trainers); the runtime reads its rank from
# SLURM_PROCID / SLURM_NTASKS and bootstraps through srun's PMI. scripts/launch.sh restarts the
# step from the newest complete checkpoint after a failure (a node lost, a rank killed), with
# --resume auto; checkpoints (sharded: every rank writes its blocks) must be on a file system
# every node sees.
#SBATCH --job-name=shardc-train
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-task=1
#SBATCH --cpus-per-task=12
#SBATCH --time=24:00:00
#SBATCH --output=%x-%j.out
set -euo pipefail
export SHARDRT_TIMEOUT=${SHARDRT_TIMEOUT:-300} # a collective stuck this long ends the step (then a restart)
TRAINER=${TRAINER:-./train_32}
CKPT=${CKPT:-/shared/ckpt/$SLURM_JOB_NAME}
scripts/launch.sh --np "$SLURM_NTASKS" --max-restarts 5 \
  --launcher "srun --kill-on-bad-exit=1 --ntasks-per-node=$SLURM_NTASKS_PER_NODE --gpus-per-task=1" \
  -- "$TRAINER" --data "/shared/data/fineweb_train_*.bin" --val "/shared/data/fineweb_val_*.bin" \
  --steps 20000 --save-to "$CKPT" --ckpt-every 500 --keep 3 --log "$CKPT/log.jsonl"
