/* runtime/comm/bootstrap.c — rank discovery and the MPI bootstrap exchanges. */
#include "bootstrap.h"

#include <dirent.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base.h"
#include "check.h"

/* Integer from the environment, or -1 when unset or malformed. */
static int env_int(const char *name) {
  const char *s = getenv(name);
  if (!s || !*s) return -1;
  char *end;
  long v = strtol(s, &end, 10);
  if (*end || v < 0 || v > 1 << 30) return -1;
  return (int)v;
}

const char *rt_launcher_name(RtLauncher l) {
  switch (l) {
  case RT_LAUNCH_SINGLE: return "single process";
  case RT_LAUNCH_MPIRUN: return "mpirun";
  case RT_LAUNCH_SRUN: return "srun";
  }
  return "?";
}

/* libfabric reads its providers' settings once, when it is first used — which MPI_Init may do
 * (OpenMPI's ofi components) — so defaults of ours go into the environment here, before it, and
 * only where the user set nothing. tcp;ofi_rxm sends up to FI_OFI_RXM_EAGER_LIMIT bytes in one
 * eager message, larger ones in 16 KiB bounce-buffer segments (to 128 KiB) or by rendezvous (a
 * round trip more); the ring's messages are up to a chunk (1 MiB), and at the default of 16 KiB a
 * 64 KiB all-reduce over tcp took 88-131 us against 35-61 us eager (docs/performance.md); at 1 MiB
 * the 512 KiB-1 MiB messages of a 1-4 MiB collective copied through eager buffers lost to rendezvous
 * on a quiet machine (all-gather 1 MiB 0.47-0.50x OpenMPI at 1 MiB, 0.81x at 256 KiB). Over
 * verbs rxm needs the eager limit equal to its buffer size, so not where the host has RDMA
 * devices or a provider setting names verbs. */
static void libfabric_defaults(void) {
  const char *names[] = {"SHARDRT_FABRIC_PROVIDER", "SHARDRT_FABRIC_INTER", "SHARDRT_FABRIC_INTRA", "FI_PROVIDER"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    const char *v = getenv(names[i]);
    if (v && strstr(v, "verbs")) return;
  }
  if (access("/sys/class/infiniband", F_OK) == 0) {
    DIR *d = opendir("/sys/class/infiniband");
    struct dirent *e;
    bool any = false;
    while (d && (e = readdir(d)))
      if (e->d_name[0] != '.') any = true;
    if (d) closedir(d);
    if (any) return;
  }
  setenv("FI_OFI_RXM_EAGER_LIMIT", "262144", 0);
}

RtLauncher rt_boot_launcher(void) {
  int k = rt_launch_kind(); /* (runtime/base.c: 1 mpirun, 2 srun) */
  return k == 1 ? RT_LAUNCH_MPIRUN : k == 2 ? RT_LAUNCH_SRUN : RT_LAUNCH_SINGLE;
}

bool rt_boot_init(RtBoot *b, int *argc, char ***argv) {
  memset(b, 0, sizeof *b);
  libfabric_defaults();
  b->pid = (int)getpid();
  if (gethostname(b->host, sizeof b->host - 1) != 0) snprintf(b->host, sizeof b->host, "unknown");
  b->world = 1;
  b->local_world = 1;
  b->launcher = rt_boot_launcher();
  if (b->launcher == RT_LAUNCH_MPIRUN) {
    b->rank = env_int("OMPI_COMM_WORLD_RANK");
    b->world = env_int("OMPI_COMM_WORLD_SIZE");
    b->local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK");
    b->local_world = env_int("OMPI_COMM_WORLD_LOCAL_SIZE");
  } else if (b->launcher == RT_LAUNCH_SRUN) {
    b->rank = env_int("SLURM_PROCID");
    b->world = env_int("SLURM_NTASKS");
    b->local_rank = env_int("SLURM_LOCALID");
    b->local_world = -1;
  }
  if (b->rank < 0 || b->rank >= b->world) {
    fprintf(stderr, "shardrt: %s gave rank %d of %d: not a valid rank\n", rt_launcher_name(b->launcher), b->rank,
            b->world);
    return false;
  }
  if (b->local_rank < 0) b->local_rank = 0;
  rt_log_rank = b->rank;
  if (b->launcher == RT_LAUNCH_SINGLE) return true;

  int inited = 0;
  MPI_CHECK(MPI_Initialized(&inited));
  if (!inited) {
    MPI_CHECK(MPI_Init(argc, argv));
    b->mpi = true;
  }
  int rank = -1, world = -1;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
  if (rank != b->rank || world != b->world) {
    fprintf(stderr, "shardrt: %s says rank %d of %d but MPI says rank %d of %d\n", rt_launcher_name(b->launcher),
            b->rank, b->world, rank, world);
    return false;
  }
  if (b->local_world < 1) {
    /* srun does not say how many tasks share the node: count equal host names. */
    char *hosts = malloc((size_t)world * sizeof b->host);
    if (!hosts) rt_fatal(RT_EXIT_COMM, "out of memory");
    rt_boot_allgather(b, b->host, hosts, sizeof b->host);
    b->local_world = 0;
    for (int i = 0; i < world; i++)
      if (strncmp(hosts + (size_t)i * sizeof b->host, b->host, sizeof b->host) == 0) b->local_world++;
    free(hosts);
  }
  return true;
}

void rt_boot_free(RtBoot *b) {
  if (b->mpi) MPI_CHECK(MPI_Finalize());
  b->mpi = false;
}

void rt_boot_allgather(const RtBoot *b, const void *mine, void *all, size_t bytes) {
  if (b->launcher == RT_LAUNCH_SINGLE) {
    memmove(all, mine, bytes);
    return;
  }
  MPI_CHECK(MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, MPI_COMM_WORLD));
}

void rt_boot_barrier(const RtBoot *b) {
  if (b->launcher != RT_LAUNCH_SINGLE) MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
}

bool rt_boot_check_mesh(const RtBoot *b, const MeshMap *m) {
  if (m->world == b->world) return true;
  if (b->rank == 0 && m->world == 1) /* ("needs 1 ranks ...: launch it with mpirun -np 1" was) */
    fprintf(stderr,
            "shardrt: this trainer was built for a single process (1 rank) but %s started %d; run it without a "
            "launcher (./TRAINER), or rebuild it for %d ranks (shardc build ... --world %d)\n",
            rt_launcher_name(b->launcher), b->world, b->world, b->world);
  else if (b->rank == 0) {
    fprintf(stderr,
            "shardrt: the plan needs %d ranks (dp %d x pp %d x cp %d x tp %d) but %s started %d; "
            "launch it with %s %d, or rebuild it for %d rank%s (shardc build ... --world %d)\n",
            m->world, m->dim[RT_AX_DP], m->dim[RT_AX_PP], m->dim[RT_AX_CP], m->dim[RT_AX_TP],
            rt_launcher_name(b->launcher), b->world, b->launcher == RT_LAUNCH_SRUN ? "srun -n" : "mpirun -np",
            m->world, b->world, b->world == 1 ? "" : "s", b->world);
    fflush(stderr);
  }
  /* every rank takes this path; none exits before rank 0 has said why (an early exit made mpirun
     kill rank 0 before its message was written) */
  rt_boot_barrier(b);
  return false;
}
