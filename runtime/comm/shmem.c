/* runtime/comm/shmem.c — memory the local peers can map: rt_comm_mem_alloc.
 *
 * Each allocation is a memfd of its own, mapped shared here. A direct collective
 * (direct.c) publishes, next to its buffers' addresses, the region that holds them: base,
 * size, the memfd's number and an id. A peer opens /proc/<owner pid>/fd/<fd> (the same
 * permission process_vm_readv needs, which direct.c has probed), maps it once, and from
 * then on reads and writes the owner's buffers with plain loads and stores: the reduction
 * reads the peer's data where it lies, and copies are memcpy at memory speed instead of
 * the kernel's page-at-a-time process_vm_readv/writev.
 *
 * Mappings are kept for the life of the comm, keyed by (owner, id). A region that its
 * owner freed is noticed when a new region of that owner overlaps its addresses: the old
 * mapping is dropped then (ids are never reused, so a stale mapping is never used for a
 * new region). A peer that dies leaves its memory mapped here until the comm closes; the
 * collectives notice the death through their messages, as before.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "comm_internal.h"

void rt_shmem_init(RtComm *c) {
  c->shmem_ok = rt_env_switch("SHARDRT_SHMEM", true);
  c->next_region = 1;
}

static size_t page_round(size_t bytes) {
  long pg = sysconf(_SC_PAGESIZE);
  size_t p = pg > 0 ? (size_t)pg : 4096;
  return (bytes + p - 1) / p * p;
}

static void add_region(RtComm *c, RtRegion r) {
  if (c->nregions == c->capregions) {
    int cap = c->capregions ? 2 * c->capregions : 16;
    RtRegion *n = realloc(c->regions, (size_t)cap * sizeof *n);
    if (!n) rt_fatal(RT_EXIT_COMM, "out of memory");
    c->regions = n;
    c->capregions = cap;
  }
  c->regions[c->nregions++] = r;
}

/* A memfd of size bytes mapped here and listed among our regions; NULL (errno set) when
 * none can be made. */
static void *memfd_region(RtComm *c, size_t size) {
  int fd = memfd_create("shardrt-mem", MFD_CLOEXEC);
  if (fd < 0) return NULL;
  if (ftruncate(fd, (off_t)size) == 0) {
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) {
      add_region(c, (RtRegion){.base = (uint64_t)(uintptr_t)p, .size = size, .fd = fd, .id = c->next_region++});
      return p;
    }
  }
  int err = errno;
  close(fd);
  errno = err;
  return NULL;
}

void *rt_comm_mem_alloc(RtComm *c, size_t bytes) {
  size_t size = page_round(bytes ? bytes : 1);
  if (c->shmem_ok) {
    void *p = memfd_region(c, size);
    if (p) return p;
    if (errno == ENOMEM) return NULL;
    /* no memfd (old kernel, seccomp, no space in shmem): plain memory, still correct */
  }
  void *p = NULL;
  if (posix_memalign(&p, 4096, size) != 0) return NULL;
  memset(p, 0, size);
  add_region(c, (RtRegion){.base = (uint64_t)(uintptr_t)p, .size = size, .fd = -1, .id = c->next_region++});
  return p;
}

void *rt_shmem_region(RtComm *c, size_t bytes, RtRegion *r) {
  void *p = memfd_region(c, page_round(bytes));
  *r = p ? rt_shmem_find(c, p) : (RtRegion){.fd = -1};
  return p;
}

void rt_comm_mem_free(RtComm *c, void *p) {
  if (!p) return;
  for (int i = 0; i < c->nregions; i++) {
    RtRegion r = c->regions[i];
    if (r.base != (uint64_t)(uintptr_t)p) continue;
    c->regions[i] = c->regions[--c->nregions];
    if (r.fd < 0) {
      free(p);
      return;
    }
    if (munmap(p, (size_t)r.size) != 0 || close(r.fd) != 0)
      rt_fatal(RT_EXIT_COMM, "rt_comm_mem_free: releasing %llu bytes failed: %s", (unsigned long long)r.size,
               strerror(errno));
    return;
  }
  rt_fatal(RT_EXIT_COMM, "rt_comm_mem_free: %p did not come from rt_comm_mem_alloc (or was freed already)", p);
}

uint64_t rt_comm_mapped_bytes(const RtComm *c) { return c->mapped_bytes; }

int64_t rt_comm_peer_resident(const RtComm *c) {
  if (!c || c->npmaps == 0) return 0;
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return 0;
  char line[512];
  int64_t total = 0;
  int peer = 0; /* the mapping whose fields follow is a peer's */
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    long long kb;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      peer = 0;
      for (int i = 0; i < c->npmaps; i++)
        if (c->pmaps[i].map && (uintptr_t)c->pmaps[i].map == lo) peer = 1;
    } else if (peer && sscanf(line, "Rss: %lld kB", &kb) == 1)
      total += kb * 1024;
  }
  fclose(f);
  return total;
}

RtRegion rt_shmem_find(const RtComm *c, const void *p) {
  uint64_t a = (uint64_t)(uintptr_t)p;
  for (int i = 0; p && i < c->nregions; i++) {
    const RtRegion *r = &c->regions[i];
    if (r->fd >= 0 && a >= r->base && a < r->base + r->size) return *r;
  }
  return (RtRegion){.fd = -1};
}

static void drop_map(RtComm *c, int i) {
  RtPeerMap *m = &c->pmaps[i];
  if (m->map && munmap(m->map, (size_t)m->r.size) != 0)
    rt_fatal(RT_EXIT_COMM, "unmapping rank %d's memory failed: %s", m->rank, strerror(errno));
  c->pmaps[i] = c->pmaps[--c->npmaps];
}

char *rt_shmem_peer(RtComm *c, int rank, const RtRegion *r) {
  if (!r->size || r->fd < 0) return NULL;
  for (int i = 0; i < c->npmaps; i++)
    if (c->pmaps[i].rank == rank && c->pmaps[i].r.id == r->id) return c->pmaps[i].map;
  /* a region of this owner over the same addresses was freed: forget its mapping */
  for (int i = 0; i < c->npmaps;) {
    const RtPeerMap *m = &c->pmaps[i];
    if (m->rank == rank && m->r.base < r->base + r->size && r->base < m->r.base + m->r.size) drop_map(c, i);
    else i++;
  }
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", c->peers[rank].pid, (int)r->fd);
  char *map = NULL;
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd >= 0) {
    void *p = mmap(NULL, (size_t)r->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) map = p;
    close(fd);
  }
  /* (a failure is remembered as NULL: that region goes through process_vm_* from now on) */
  if (c->npmaps == c->cappmaps) {
    int cap = c->cappmaps ? 2 * c->cappmaps : 16;
    RtPeerMap *n = realloc(c->pmaps, (size_t)cap * sizeof *n);
    if (!n) rt_fatal(RT_EXIT_COMM, "out of memory");
    c->pmaps = n;
    c->cappmaps = cap;
  }
  c->pmaps[c->npmaps++] = (RtPeerMap){.rank = rank, .r = *r, .map = map};
  return map;
}

void rt_shmem_close(RtComm *c) {
  while (c->npmaps > 0) drop_map(c, c->npmaps - 1);
  free(c->pmaps);
  c->pmaps = NULL;
  c->cappmaps = 0;
  /* our own regions belong to the caller (freed with rt_comm_mem_free); the table goes */
  free(c->regions);
  c->regions = NULL;
  c->nregions = c->capregions = 0;
}
