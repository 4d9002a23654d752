/* runtime/comm/fabric.c — the libfabric endpoints: provider choice per peer (one
 * endpoint for peers on this node, one for peers on other nodes), address exchange,
 * registered staging slabs, posting and completion polling. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm_internal.h"

/* "tcp" means tcp under the rxm utility provider (RDM over connected endpoints). */
static const char *canonical_provider(const char *p) {
  if (strcmp(p, "tcp") == 0) return "tcp;ofi_rxm";
  if (strcmp(p, "verbs") == 0) return "verbs;ofi_rxm";
  return p;
}

static struct fi_info *try_provider(const char *prov) {
  struct fi_info *hints = fi_allocinfo();
  if (!hints) rt_fatal(RT_EXIT_COMM, "fi_allocinfo: out of memory");
  hints->caps = FI_TAGGED | FI_DIRECTED_RECV;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_ENDPOINT | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  hints->domain_attr->control_progress = FI_PROGRESS_MANUAL;
  hints->domain_attr->data_progress = FI_PROGRESS_MANUAL;
  hints->fabric_attr->prov_name = strdup(prov);
  struct fi_info *info = NULL;
  int rc = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info);
  fi_freeinfo(hints);
  if (rc != 0) return NULL;
  return info;
}

/* An environment override, or NULL when unset or empty. */
static const char *env_str(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

/* The provider for peers on other nodes when nothing names one. */
static struct fi_info *auto_inter(void) {
  static const char *const across[] = {"efa", "verbs;ofi_rxm", "tcp;ofi_rxm"};
  struct fi_info *info = NULL;
  for (size_t i = 0; !info && i < sizeof across / sizeof across[0]; i++) info = try_provider(across[i]);
  if (!info) rt_fatal(RT_EXIT_COMM, "no libfabric provider (efa, verbs, tcp) offers tagged RDM endpoints across nodes");
  return info;
}

static struct fi_info *named_provider(const char *want, const char *source) {
  want = canonical_provider(want);
  struct fi_info *info = try_provider(want);
  if (!info)
    rt_fatal(RT_EXIT_COMM,
             "libfabric provider '%s' (%s) is not available for tagged RDM endpoints; `fi_info -l` lists the "
             "providers here",
             want, source);
  return info;
}

/* shm names its region in /dev/shm after the pid unless told otherwise; a region left by
 * a killed process (kill -9 leaves it behind) then makes fi_enable of a later process
 * with the same pid fail with EBUSY. A name unique in time avoids that. */
static char own_shm_path[RT_NFAB][80]; /* this process's shm regions as /dev/shm paths (unlink is async-signal-safe) */

static void unlink_own_shm(void) {
  for (int i = 0; i < RT_NFAB; i++)
    if (own_shm_path[i][0]) unlink(own_shm_path[i]);
}

/* mpirun ends the other ranks of a failed job with SIGTERM: their regions go too (kill -9 leaves
 * them, and the surviving peers remove a dead one's: rt_fabric_forget_peer). */
static void term_unlink(int sig) {
  unlink_own_shm();
  signal(sig, SIG_DFL);
  raise(sig);
}

/* Once per process: the regions are removed however it ends short of kill -9 — rt_fatal (its hook),
 * exit (a user error on some rank, atexit) or SIGTERM / SIGINT (when nothing else handles them). */
static void unlink_at_end(void) {
  rt_fatal_hook = unlink_own_shm;
  static int installed; /* (a process-wide registration, made once) */
  if (installed) return;
  installed = 1;
  atexit(unlink_own_shm);
  const int sigs[] = {SIGTERM, SIGINT, SIGHUP};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
    struct sigaction old;
    if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_DFL) signal(sigs[i], term_unlink);
  }
}

void rt_fabric_forget_peer(RtComm *c, int rank) {
  if (c->peers[rank].shm_name[0]) shm_unlink(c->peers[rank].shm_name);
}

/* A region's owner holds a shared flock on it for its whole life (the kernel drops it however the
 * process ends, kill -9 and the OOM killer included), so a region nobody holds a lock on, whose
 * process is gone and which is older than REGION_GRACE_NS, was left by a killed process: each process
 * removes such regions before it makes its own (16 MiB each; a job killed -9 on 8 ranks left 128 MiB
 * of /dev/shm that only a reboot freed). Both tests are needed: the lock keeps the regions of live
 * processes that another pid namespace hides, the pid the regions of runtimes that took no lock. */
#define SHM_PREFIX "shardrt-"
enum { REGION_GRACE_S = 60 };
static int own_shm_lock[RT_NFAB] = {-1, -1}; /* (open for the process's life: closing it drops the lock) */

static void hold_own_region(int slot) {
  int fd = open(own_shm_path[slot], O_RDONLY | O_CLOEXEC);
  if (fd < 0) return; /* (the provider named it otherwise: nothing to hold, nothing swept) */
  if (flock(fd, LOCK_SH | LOCK_NB) != 0) {
    close(fd);
    return;
  }
  own_shm_lock[slot] = fd;
}

/* Removes the regions killed processes left in /dev/shm; returns how many. */
int rt_fabric_sweep_shm(void) {
  DIR *d = opendir("/dev/shm");
  if (!d) return 0;
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  int removed = 0;
  for (struct dirent *e; (e = readdir(d));) {
    int pid, slot, end = 0;
    unsigned long long made;
    if (strncmp(e->d_name, SHM_PREFIX, strlen(SHM_PREFIX)) != 0) continue;
    if (sscanf(e->d_name + strlen(SHM_PREFIX), "%d-%llx-%d%n", &pid, &made, &slot, &end) != 3 ||
        e->d_name[strlen(SHM_PREFIX) + (size_t)end] != 0 || pid <= 0)
      continue;
    if ((long long)now.tv_sec - (long long)(made / 1000000000ull) < REGION_GRACE_S) continue;
    if (kill(pid, 0) == 0 || errno != ESRCH) continue; /* its process lives (or is another user's) */
    int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0 && unlinkat(dirfd(d), e->d_name, 0) == 0) removed++;
    close(fd);
  }
  closedir(d);
  return removed;
}

static void name_shm_endpoint(RtFabric *f, int slot) {
  static int swept;
  if (!swept++) rt_fabric_sweep_shm();
  char name[64];
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  snprintf(name, sizeof name, SHM_PREFIX "%d-%llx-%d", (int)getpid(),
           (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec, slot);
  FI_CHECK(fi_setname(&f->ep->fid, name, strlen(name) + 1));
  snprintf(own_shm_path[slot], sizeof own_shm_path[slot], "/dev/shm/%s", name);
  unlink_at_end();
}

static void open_fabric(RtComm *c, RtFabric *f, struct fi_info *info) {
  f->open = true;
  f->info = info;
  snprintf(f->provider, sizeof f->provider, "%s", info->fabric_attr->prov_name);
  f->mr_local = (info->domain_attr->mr_mode & FI_MR_LOCAL) || (info->mode & FI_LOCAL_MR);
  f->mr_endpoint = (info->domain_attr->mr_mode & FI_MR_ENDPOINT) != 0;
  size_t lim = info->tx_attr->iov_limit < info->rx_attr->iov_limit ? info->tx_attr->iov_limit : info->rx_attr->iov_limit;
  f->iov_limit = f->mr_local || lim < 1 ? 1 : lim > RT_IOV_MAX ? RT_IOV_MAX : (int)lim;
  f->inject = info->tx_attr->inject_size;
  /* SHARDRT_IOV_LIMIT lowers it (a larger value: the provider's limit holds) */
  int il = (int)rt_env_u64("SHARDRT_IOV_LIMIT", (uint64_t)f->iov_limit, 1, 1 << 20);
  if (il < f->iov_limit) f->iov_limit = il;
  if (f->mr_local) c->mr_local = true;
  FI_CHECK(fi_fabric(info->fabric_attr, &f->fabric, NULL));
  FI_CHECK(fi_domain(f->fabric, info, &f->domain, NULL));
  struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED, .size = 0, .wait_obj = FI_WAIT_NONE};
  FI_CHECK(fi_cq_open(f->domain, &cq_attr, &f->cq, NULL));
  struct fi_av_attr av_attr = {.type = FI_AV_TABLE, .count = (size_t)c->world};
  FI_CHECK(fi_av_open(f->domain, &av_attr, &f->av, NULL));
  FI_CHECK(fi_endpoint(f->domain, info, &f->ep, NULL));
  if (strcmp(f->provider, "shm") == 0) name_shm_endpoint(f, (int)(f - c->fab));
  FI_CHECK(fi_ep_bind(f->ep, &f->cq->fid, FI_TRANSMIT | FI_RECV));
  FI_CHECK(fi_ep_bind(f->ep, &f->av->fid, 0));
  FI_CHECK(fi_enable(f->ep));
  if (strcmp(f->provider, "shm") == 0) hold_own_region((int)(f - c->fab));
}

/* Each rank names its provider for a fabric slot (or "" when it has none there); the
 * ranks that talk through the slot (the intra one: ranks on one node; the inter one:
 * everyone) must have chosen the same one. */
static void check_same_provider(RtComm *c, int slot) {
  char mine[64] = {0};
  if (c->fab[slot].open) snprintf(mine, sizeof mine, "%s", c->fab[slot].provider);
  char *all = calloc((size_t)c->world, sizeof mine);
  if (!all) rt_fatal(RT_EXIT_COMM, "out of memory");
  rt_boot_allgather(&c->boot, mine, all, sizeof mine);
  for (int i = 0; i < c->world; i++) {
    const char *theirs = all + (size_t)i * sizeof mine;
    bool talk = slot == RT_FAB_INTER || strcmp(c->peers[i].node, c->peers[c->rank].node) == 0;
    if (talk && *mine && *theirs && strcmp(mine, theirs) != 0)
      rt_fatal(RT_EXIT_COMM,
               "rank %d chose libfabric provider '%s' for peers %s, this rank '%s'; set SHARDRT_FABRIC_%s (or "
               "SHARDRT_FABRIC_PROVIDER) to one provider every node has",
               i, theirs, slot == RT_FAB_INTRA ? "on its node" : "on other nodes", mine,
               slot == RT_FAB_INTRA ? "INTRA" : "INTER");
  }
  free(all);
}

void rt_fabric_open(RtComm *c, const RtCommOptions *opt) {
  RtCommOptions o = {0};
  if (opt) o = *opt;
  bool any_local = false, any_remote = false;
  for (int i = 0; i < c->world; i++) {
    if (i == c->rank) continue;
    if (strcmp(c->peers[i].node, c->peers[c->rank].node) == 0) any_local = true;
    else any_remote = true;
  }
  c->peer_fab = malloc((size_t)c->world * sizeof *c->peer_fab);
  c->addr = calloc((size_t)c->world, sizeof *c->addr);
  if (!c->peer_fab || !c->addr) rt_fatal(RT_EXIT_COMM, "out of memory");

  const char *all = o.provider && *o.provider ? o.provider : env_str("SHARDRT_FABRIC_PROVIDER");
  const char *all_src = o.provider && *o.provider ? "RtCommOptions.provider" : "SHARDRT_FABRIC_PROVIDER";
  bool split = false;
  if (all) {
    open_fabric(c, &c->fab[RT_FAB_INTRA], named_provider(all, all_src));
  } else {
    const char *intra = o.provider_intra && *o.provider_intra ? o.provider_intra : env_str("SHARDRT_FABRIC_INTRA");
    const char *inter = o.provider_inter && *o.provider_inter ? o.provider_inter : env_str("SHARDRT_FABRIC_INTER");
    /* Slots by role, decided from the node table every rank shares: the intra endpoint
     * when this node has another rank (or the world is this rank alone), the inter one
     * when another node has ranks. Even the same provider in both gets two endpoints,
     * so that every rank reaches a peer through the slot that peer opened. */
    if (any_local || !any_remote) {
      struct fi_info *fi = intra ? named_provider(intra, "SHARDRT_FABRIC_INTRA") : try_provider("shm");
      if (!fi) fi = auto_inter(); /* no shm here: the network provider inside the node too */
      open_fabric(c, &c->fab[RT_FAB_INTRA], fi);
    }
    if (any_remote) {
      open_fabric(c, &c->fab[RT_FAB_INTER], inter ? named_provider(inter, "SHARDRT_FABRIC_INTER") : auto_inter());
      split = true;
    }
  }
  for (int i = 0; i < c->world; i++) {
    bool local = strcmp(c->peers[i].node, c->peers[c->rank].node) == 0;
    c->peer_fab[i] = split && !local ? RT_FAB_INTER : RT_FAB_INTRA;
  }

  /* Exchange endpoint names through the bootstrap, one round per fabric slot (every rank
   * takes part; a rank without the slot sends an empty name). */
  char *names = malloc((size_t)c->world * RT_NAME_MAX);
  size_t *lens = malloc((size_t)c->world * sizeof *lens);
  if (!names || !lens) rt_fatal(RT_EXIT_COMM, "out of memory");
  for (int slot = 0; slot < RT_NFAB; slot++) {
    RtFabric *f = &c->fab[slot];
    char mine[RT_NAME_MAX] = {0};
    size_t len = 0;
    if (f->open) {
      len = sizeof mine;
      FI_CHECK(fi_getname(&f->ep->fid, mine, &len));
    }
    rt_boot_allgather(&c->boot, mine, names, RT_NAME_MAX);
    rt_boot_allgather(&c->boot, &len, lens, sizeof len);
    for (int i = 0; i < c->world; i++) {
      if (c->peer_fab[i] != slot || !f->open) continue;
      if (lens[i] == 0)
        rt_fatal(RT_EXIT_COMM, "rank %d (node %s) has no %s endpoint, which this rank (node %s) needs to reach it", i,
                 c->peers[i].node, f->provider, c->peers[c->rank].node);
      if (strcmp(f->provider, "shm") == 0 && i != c->rank)
        snprintf(c->peers[i].shm_name, sizeof c->peers[i].shm_name, "%.63s", names + (size_t)i * RT_NAME_MAX);
      int n = fi_av_insert(f->av, names + (size_t)i * RT_NAME_MAX, 1, &c->addr[i], 0, NULL);
      if (n != 1) rt_fatal(RT_EXIT_COMM, "fi_av_insert of rank %d's %s address failed (%d)", i, f->provider, n);
    }
  }
  free(names);
  free(lens);
  check_same_provider(c, RT_FAB_INTRA);
  check_same_provider(c, RT_FAB_INTER);
  if (c->fab[RT_FAB_INTRA].open && c->fab[RT_FAB_INTER].open)
    snprintf(c->provider, sizeof c->provider, "%s within a node, %s across nodes", c->fab[RT_FAB_INTRA].provider,
             c->fab[RT_FAB_INTER].provider);
  else
    snprintf(c->provider, sizeof c->provider, "%s",
             c->fab[c->fab[RT_FAB_INTRA].open ? RT_FAB_INTRA : RT_FAB_INTER].provider);
}

void rt_fabric_close(RtComm *c) {
  for (int i = 0; i < c->nall; i++) {
    for (int f = 0; c->slab_mrs && f < RT_NFAB; f++)
      if (c->slab_mrs[i * RT_NFAB + f]) FI_CHECK(fi_close(&c->slab_mrs[i * RT_NFAB + f]->fid));
    free(c->all_slabs[i]);
  }
  free(c->all_slabs);
  free(c->slab_mrs);
  free(c->free_slabs);
  free(c->deferred);
  for (int slot = 0; slot < RT_NFAB; slot++) {
    RtFabric *f = &c->fab[slot];
    if (!f->open) continue;
    if (f->ep) FI_CHECK(fi_close(&f->ep->fid));
    if (f->av) FI_CHECK(fi_close(&f->av->fid));
    if (f->cq) FI_CHECK(fi_close(&f->cq->fid));
    if (f->domain) FI_CHECK(fi_close(&f->domain->fid));
    if (f->fabric) FI_CHECK(fi_close(&f->fabric->fid));
    if (f->info) fi_freeinfo(f->info);
  }
  free(c->addr);
  free(c->peer_fab);
}

/* Registers buf for local send/recv when the provider asks for it. */
static struct fid_mr *register_buffer(RtFabric *f, void *buf, size_t len) {
  struct fid_mr *mr = NULL;
  FI_CHECK(fi_mr_reg(f->domain, buf, len ? len : 1, FI_SEND | FI_RECV, 0, 0, 0, &mr, NULL));
  if (f->mr_endpoint) {
    FI_CHECK(fi_mr_bind(mr, &f->ep->fid, 0));
    FI_CHECK(fi_mr_enable(mr));
  }
  return mr;
}

void *rt_slab_get(RtComm *c) {
  if (c->nfree > 0) return c->free_slabs[--c->nfree];
  void *p = NULL;
  if (posix_memalign(&p, 64, c->chunk_bytes) != 0) rt_fatal(RT_EXIT_COMM, "out of memory for staging");
  if (c->nall == c->capall) {
    c->capall = c->capall ? 2 * c->capall : 16;
    c->all_slabs = realloc(c->all_slabs, (size_t)c->capall * sizeof *c->all_slabs);
    c->slab_mrs = realloc(c->slab_mrs, (size_t)c->capall * RT_NFAB * sizeof *c->slab_mrs);
    c->free_slabs = realloc(c->free_slabs, (size_t)c->capall * sizeof *c->free_slabs);
    if (!c->all_slabs || !c->slab_mrs || !c->free_slabs) rt_fatal(RT_EXIT_COMM, "out of memory");
  }
  c->all_slabs[c->nall] = p;
  for (int f = 0; f < RT_NFAB; f++)
    c->slab_mrs[c->nall * RT_NFAB + f] =
        c->fab[f].open && c->fab[f].mr_local ? register_buffer(&c->fab[f], p, c->chunk_bytes) : NULL;
  c->nall++;
  return p;
}

void rt_slab_put(RtComm *c, void *slab) { c->free_slabs[c->nfree++] = slab; }

void *rt_slab_desc(RtComm *c, void *slab, int peer) {
  int f = c->peer_fab[peer];
  if (!c->fab[f].mr_local) return NULL;
  for (int i = c->nall - 1; i >= 0; i--)
    if (c->all_slabs[i] == slab) return fi_mr_desc(c->slab_mrs[i * RT_NFAB + f]);
  return NULL;
}

/* Reads one completion queue into ev (at most max); -FI_EAGAIN when empty. */
static ssize_t read_cq(struct fid_cq *cq, RtCqEvent *ev, int max) {
  struct fi_cq_tagged_entry e[16];
  if (max > 16) max = 16;
  ssize_t n = fi_cq_read(cq, e, (size_t)max);
  if (n == -FI_EAGAIN) return n;
  if (n == -FI_EAVAIL) {
    struct fi_cq_err_entry err = {0};
    FI_CHECK(fi_cq_readerr(cq, &err, 0));
    memset(ev, 0, sizeof *ev);
    ev->e.op_context = err.op_context;
    ev->e.tag = err.tag;
    ev->err = true;
    ev->errcode = err.err < 0 ? -err.err : err.err;
    return 1;
  }
  FI_CHECK(n);
  for (ssize_t i = 0; i < n; i++) {
    memset(&ev[i], 0, sizeof ev[i]);
    ev[i].e = e[i];
  }
  return n;
}

static void defer_completions(RtComm *c) {
  for (int f = 0; f < RT_NFAB; f++) {
    if (!c->fab[f].open) continue;
    for (;;) {
      if (c->ndeferred + 16 > c->capdeferred) {
        c->capdeferred = c->capdeferred ? 2 * c->capdeferred : 64;
        c->deferred = realloc(c->deferred, (size_t)c->capdeferred * sizeof *c->deferred);
        if (!c->deferred) rt_fatal(RT_EXIT_COMM, "out of memory");
      }
      ssize_t n = read_cq(c->fab[f].cq, c->deferred + c->ndeferred, 16);
      if (n == -FI_EAGAIN) break;
      c->ndeferred += (int)n;
    }
  }
}

void rt_post(RtComm *c, RtMsg *m, void *buf, void *desc) {
  m->fab = c->peer_fab[m->peer];
  RtFabric *f = &c->fab[m->fab];
  if (f->mr_local && !desc && m->bytes > 0 && m->niov <= 1) {
    m->mr = register_buffer(f, buf, m->bytes);
    desc = fi_mr_desc(m->mr);
  }
  for (;;) {
    ssize_t rc;
    if (m->niov > 1) /* scattered over user buffers (all_reduce_v): no registration (iov_limit is 1 with mr_local) */
      rc = m->is_recv ? fi_trecvv(f->ep, m->iov, NULL, (size_t)m->niov, c->addr[m->peer], m->tag, RT_TAG_IGNORE, &m->ctx)
                      : fi_tsendv(f->ep, m->iov, NULL, (size_t)m->niov, c->addr[m->peer], m->tag, &m->ctx);
    else
      rc = m->is_recv ? fi_trecv(f->ep, buf, m->bytes, desc, c->addr[m->peer], m->tag, RT_TAG_IGNORE, &m->ctx)
                      : fi_tsend(f->ep, buf, m->bytes, desc, c->addr[m->peer], m->tag, &m->ctx);
    if (rc != -FI_EAGAIN) {
      FI_CHECK(rc);
      if (atomic_load_explicit(&c->post_blocked, memory_order_relaxed)) atomic_store(&c->post_blocked, 0);
      return;
    }
    atomic_store(&c->post_blocked, m->peer + 1); /* for the watchdog: who does not take our message */
    defer_completions(c);
    sched_yield();
  }
}

int rt_poll(RtComm *c, RtCqEvent *ev, int max) {
  if (c->ndeferred > 0) {
    int n = c->ndeferred < max ? c->ndeferred : max;
    memcpy(ev, c->deferred, (size_t)n * sizeof *ev);
    memmove(c->deferred, c->deferred + n, (size_t)(c->ndeferred - n) * sizeof *ev);
    c->ndeferred -= n;
    return n;
  }
  int got = 0;
  for (int f = 0; f < RT_NFAB && got < max; f++) {
    if (!c->fab[f].open) continue;
    ssize_t n = read_cq(c->fab[f].cq, ev + got, max - got);
    if (n > 0) got += (int)n;
  }
  return got;
}
