#!/usr/bin/env bash
# One task of the fake srun (see srun here): Slurm's variables in place of mpirun's.
export SLURM_PROCID=$OMPI_COMM_WORLD_RANK SLURM_NTASKS=$OMPI_COMM_WORLD_SIZE SLURM_STEP_NUM_TASKS=$OMPI_COMM_WORLD_SIZE
export SLURM_LOCALID=$OMPI_COMM_WORLD_LOCAL_RANK SLURM_NODEID=0
for v in $(env | grep -o '^OMPI_COMM_WORLD[A-Z_]*\|^OMPI_UNIVERSE_SIZE'); do unset "$v"; done
if [ -n "${FAKE_SRUN_CHDIR:-}" ]; then cd "$FAKE_SRUN_CHDIR" || exit 1; fi
exec "$@"
