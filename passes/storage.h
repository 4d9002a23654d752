/* passes/storage.h — the traffic and storage report (issue 18): bytes per step on each link class
 * and the busiest link; per checkpoint the bytes, who writes them and how long the writes take at
 * a storage bandwidth, sharded (every rank writes its own blocks) against rank 0 writing it all.
 *
 * An analysis of the compiled module (after pipeline_run); it changes nothing.
 *   - Traffic: ir/commreport.c's per-rank bus bytes (the ring factors of the plan's table). In
 *     node, each rank's port carries its own bytes; across nodes, a node's network interfaces
 *     (the topology's `inter` link, count x bandwidth) carry one ring edge of each group with
 *     members on the node: a rank's bytes x devices per node / the group's members per node.
 *     The busiest link is the one with the most seconds of traffic per step.
 *   - Checkpoint: the parameters and optimizer state (the PARAM and STATE values, what
 *     runtime/train/ckpt_shard.c saves), each rank's bytes decided by the trainer's own rule,
 *     rt_ckpt_writer (runtime/mesh.h): a tensor's block is written by the ranks at coordinate 0 on
 *     every axis that does not split it, except along dp, where the replica (tensor index mod dp)
 *     writes it, and along pp, where a tensor held on some stages is written by the first; the
 *     tensor index is the trainer's table order (codegen/emit.c: PARAM, STATE and INPUT nodes in
 *     graph order).
 *     Payload bytes (the safetensors headers and index.json, a few KiB, are left out).
 *   - Write time: storage_Bps is the storage system's aggregate bandwidth; a node reaches it over
 *     its network interfaces (the `inter` link; a one-node topology: the storage's bandwidth).
 *     Sharded: max(total / storage, the busiest node's bytes / its network). Rank 0: every byte
 *     gathered to rank 0 (the bytes it does not hold, over its node's network, or its in-node
 *     link on one node) and written through one node: total / min(storage, node network).
 */
#ifndef SHARDC_STORAGE_H
#define SHARDC_STORAGE_H

#include <stdio.h>

#include "cost.h"
#include "module.h"

typedef struct {
  double rank_bytes[2];   /* bus bytes per rank per step: in node [0], across nodes [1] */
  double link_bytes[2];   /* on the busiest physical link of each class: a rank's in-node port, a node's network */
  double link_Bps[2];     /* that link's bandwidth (0: the class is unused or unknown) */
  double link_s[2];       /* seconds of traffic per step on it */
  int busiest;            /* 0 or 1: the class whose link is busiest; -1: no traffic */
} TrafficReport;

typedef struct {
  double total_bytes;     /* one checkpoint: every saved tensor once */
  int ntensors;           /* tensors saved */
  int writers;            /* ranks that write a file with something in it */
  double max_rank_bytes, min_rank_bytes; /* among the writers */
  int max_rank;           /* the rank that writes most */
  double max_node_bytes;  /* the node whose ranks write most, together */
  int writer_nodes;       /* nodes with a writer */
  double rank0_own_bytes; /* what rank 0 holds itself (rank 0 writing all must gather the rest) */
  /* at storage_Bps */
  double storage_Bps, node_Bps; /* the storage system's bandwidth; a node's path to it */
  double sharded_s;       /* every rank writes its own blocks */
  double rank0_gather_s, rank0_write_s; /* rank 0 writes all: gather the rest, then write */
  double interval_s;      /* predicted seconds between checkpoints (every x step); 0: no checkpoint */
  double keep_bytes;      /* storage held by the kept checkpoints */
} CkptReport;

void storage_traffic(const Module *m, const CostDevice *d, TrafficReport *t);
/* step_s: the predicted step (the interval between checkpoints); storage_Bps > 0. */
void storage_ckpt(const Module *m, const CostDevice *d, double storage_Bps, double step_s, CkptReport *c);
/* The warning a Slurm job of the plan needs before its time limit (`--sbatch`'s `#SBATCH --signal=B:USR1@S`): the
 * ranks finish the step in flight, write a checkpoint (every rank its blocks: ckpt_s, CkptReport.sharded_s) and
 * exit, then the launcher requeues the job. Seconds: twice the step and the writes (the margin of a predicted step
 * and of a file system that others load), plus 30 for the exit and the requeue; at least 120 (the script's old
 * fixed figure, which a small model keeps), at most 65535 (Slurm's largest). */
int storage_stop_warning_s(double step_s, double ckpt_s);
/* The report `shardc plan --storage GB/s` prints. */
void storage_print(FILE *f, const Module *m, const TrafficReport *t, const CkptReport *c, double step_s);

#endif
