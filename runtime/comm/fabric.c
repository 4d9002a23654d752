/* runtime/comm/fabric.c — the libfabric endpoint: provider choice, address exchange,
 * registered staging slabs, posting and completion polling. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void rt_fabric_open(RtComm *c, const char *provider) {
  const char *want = provider;
  if (!want || !*want) want = getenv("SHARDRT_FABRIC_PROVIDER");
  struct fi_info *info = NULL;
  if (want && *want) {
    want = canonical_provider(want);
    info = try_provider(want);
    if (!info)
      rt_fatal(RT_EXIT_COMM,
               "libfabric provider '%s' (SHARDRT_FABRIC_PROVIDER) is not available for tagged RDM endpoints; "
               "`fi_info -l` lists the providers here",
               want);
  } else {
    bool one_host = true;
    for (int i = 1; i < c->world; i++)
      if (strcmp(c->peers[i].host, c->peers[0].host) != 0) one_host = false;
    static const char *const across[] = {"efa", "verbs;ofi_rxm", "tcp;ofi_rxm"};
    if (one_host) info = try_provider("shm");
    for (size_t i = 0; !info && i < sizeof across / sizeof across[0]; i++) info = try_provider(across[i]);
    if (!info) rt_fatal(RT_EXIT_COMM, "no libfabric provider (shm, efa, verbs, tcp) offers tagged RDM endpoints");
  }
  c->info = info;
  snprintf(c->provider, sizeof c->provider, "%s", info->fabric_attr->prov_name);
  c->mr_local = (info->domain_attr->mr_mode & FI_MR_LOCAL) || (info->mode & FI_LOCAL_MR);
  c->mr_endpoint = (info->domain_attr->mr_mode & FI_MR_ENDPOINT) != 0;

  FI_CHECK(fi_fabric(info->fabric_attr, &c->fabric, NULL));
  FI_CHECK(fi_domain(c->fabric, info, &c->domain, NULL));
  struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED, .size = 0, .wait_obj = FI_WAIT_NONE};
  FI_CHECK(fi_cq_open(c->domain, &cq_attr, &c->cq, NULL));
  struct fi_av_attr av_attr = {.type = FI_AV_TABLE, .count = (size_t)c->world};
  FI_CHECK(fi_av_open(c->domain, &av_attr, &c->av, NULL));
  FI_CHECK(fi_endpoint(c->domain, info, &c->ep, NULL));
  FI_CHECK(fi_ep_bind(c->ep, &c->cq->fid, FI_TRANSMIT | FI_RECV));
  FI_CHECK(fi_ep_bind(c->ep, &c->av->fid, 0));
  FI_CHECK(fi_enable(c->ep));

  /* Exchange endpoint names through the bootstrap. */
  RtPeer *me = &c->peers[c->rank];
  me->namelen = sizeof me->name;
  FI_CHECK(fi_getname(&c->ep->fid, me->name, &me->namelen));
  char *names = malloc((size_t)c->world * RT_NAME_MAX);
  size_t *lens = malloc((size_t)c->world * sizeof *lens);
  c->addr = malloc((size_t)c->world * sizeof *c->addr);
  if (!names || !lens || !c->addr) rt_fatal(RT_EXIT_COMM, "out of memory");
  rt_boot_allgather(&c->boot, me->name, names, RT_NAME_MAX);
  rt_boot_allgather(&c->boot, &me->namelen, lens, sizeof *lens);
  for (int i = 0; i < c->world; i++) {
    memcpy(c->peers[i].name, names + (size_t)i * RT_NAME_MAX, RT_NAME_MAX);
    c->peers[i].namelen = lens[i];
    int n = fi_av_insert(c->av, c->peers[i].name, 1, &c->addr[i], 0, NULL);
    if (n != 1) rt_fatal(RT_EXIT_COMM, "fi_av_insert of rank %d's address failed (%d)", i, n);
  }
  free(names);
  free(lens);
}

void rt_fabric_close(RtComm *c) {
  for (int i = 0; i < c->nall; i++) {
    if (c->slab_mrs && c->slab_mrs[i]) FI_CHECK(fi_close(&c->slab_mrs[i]->fid));
    free(c->all_slabs[i]);
  }
  free(c->all_slabs);
  free(c->slab_mrs);
  free(c->free_slabs);
  free(c->deferred);
  if (c->ep) FI_CHECK(fi_close(&c->ep->fid));
  if (c->av) FI_CHECK(fi_close(&c->av->fid));
  if (c->cq) FI_CHECK(fi_close(&c->cq->fid));
  if (c->domain) FI_CHECK(fi_close(&c->domain->fid));
  if (c->fabric) FI_CHECK(fi_close(&c->fabric->fid));
  if (c->info) fi_freeinfo(c->info);
  free(c->addr);
}

/* Registers buf for local send/recv when the provider asks for it. */
static struct fid_mr *register_buffer(RtComm *c, void *buf, size_t len) {
  struct fid_mr *mr = NULL;
  FI_CHECK(fi_mr_reg(c->domain, buf, len ? len : 1, FI_SEND | FI_RECV, 0, 0, 0, &mr, NULL));
  if (c->mr_endpoint) {
    FI_CHECK(fi_mr_bind(mr, &c->ep->fid, 0));
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
    c->slab_mrs = realloc(c->slab_mrs, (size_t)c->capall * sizeof *c->slab_mrs);
    c->free_slabs = realloc(c->free_slabs, (size_t)c->capall * sizeof *c->free_slabs);
    if (!c->all_slabs || !c->slab_mrs || !c->free_slabs) rt_fatal(RT_EXIT_COMM, "out of memory");
  }
  c->all_slabs[c->nall] = p;
  c->slab_mrs[c->nall] = c->mr_local ? register_buffer(c, p, c->chunk_bytes) : NULL;
  c->nall++;
  return p;
}

void rt_slab_put(RtComm *c, void *slab) { c->free_slabs[c->nfree++] = slab; }

void *rt_slab_desc(RtComm *c, void *slab) {
  if (!c->mr_local) return NULL;
  for (int i = c->nall - 1; i >= 0; i--)
    if (c->all_slabs[i] == slab) return fi_mr_desc(c->slab_mrs[i]);
  return NULL;
}

static void defer_completions(RtComm *c) {
  for (;;) {
    if (c->ndeferred + 16 > c->capdeferred) {
      c->capdeferred = c->capdeferred ? 2 * c->capdeferred : 64;
      c->deferred = realloc(c->deferred, (size_t)c->capdeferred * sizeof *c->deferred);
      if (!c->deferred) rt_fatal(RT_EXIT_COMM, "out of memory");
    }
    struct fi_cq_tagged_entry e[16];
    ssize_t n = fi_cq_read(c->cq, e, 16);
    if (n == -FI_EAGAIN) return;
    if (n == -FI_EAVAIL) {
      struct fi_cq_err_entry err = {0};
      FI_CHECK(fi_cq_readerr(c->cq, &err, 0));
      RtCqEvent *ev = &c->deferred[c->ndeferred++];
      memset(ev, 0, sizeof *ev);
      ev->e.op_context = err.op_context;
      ev->e.tag = err.tag;
      ev->err = true;
      ev->errcode = err.err < 0 ? -err.err : err.err;
      continue;
    }
    FI_CHECK(n);
    for (ssize_t i = 0; i < n; i++) {
      RtCqEvent *ev = &c->deferred[c->ndeferred++];
      memset(ev, 0, sizeof *ev);
      ev->e = e[i];
    }
  }
}

void rt_post(RtComm *c, RtMsg *m, void *buf, void *desc) {
  if (c->mr_local && !desc && m->bytes > 0) {
    m->mr = register_buffer(c, buf, m->bytes);
    desc = fi_mr_desc(m->mr);
  }
  for (;;) {
    ssize_t rc = m->is_recv
                     ? fi_trecv(c->ep, buf, m->bytes, desc, c->addr[m->peer], m->tag, RT_TAG_IGNORE, &m->ctx)
                     : fi_tsend(c->ep, buf, m->bytes, desc, c->addr[m->peer], m->tag, &m->ctx);
    if (rc != -FI_EAGAIN) {
      FI_CHECK(rc);
      return;
    }
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
  struct fi_cq_tagged_entry e[16];
  if (max > 16) max = 16;
  ssize_t n = fi_cq_read(c->cq, e, (size_t)max);
  if (n == -FI_EAGAIN) return 0;
  if (n == -FI_EAVAIL) {
    struct fi_cq_err_entry err = {0};
    FI_CHECK(fi_cq_readerr(c->cq, &err, 0));
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
  return (int)n;
}
