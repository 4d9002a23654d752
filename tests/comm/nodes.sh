#!/bin/sh
# tests/comm/nodes.sh LAYOUT CMD... — runs CMD (one rank under mpirun) as if on the node that
# LAYOUT names for this rank: LAYOUT is a comma list of node ids, one per rank ("a,a,b,b":
# ranks 0-1 on node a, 2-3 on node b). Sets SHARDRT_NODE, which the runtime uses instead of
# the host name to choose the provider per peer (a simulated multi-node job on one machine).
layout=$1; shift
rank=${OMPI_COMM_WORLD_RANK:-${SLURM_PROCID:-0}}
node=$(echo "$layout" | cut -d, -f$((rank + 1)))
[ -n "$node" ] || { echo "nodes.sh: layout '$layout' has no node for rank $rank" >&2; exit 2; }
SHARDRT_NODE=$node exec "$@"
