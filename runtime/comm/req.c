/* runtime/comm/req.c — the bottom layer of the comm: what a request is to every part above it.
 *
 * The layers (each calls only those below it; nothing calls up):
 *   comm.c            the API: groups, requests, progress; picks the algorithm, starts the watchdog
 *   mbox.c, ring.c    the algorithms (ring.c hands one-host requests to direct.c)
 *   direct.c
 *   watchdog.c        a thread over the active requests; what a request waits for comes from
 *                     comm.c as a callback (rt_watchdog_start), so it knows no algorithm
 *   req.c             names, blocks, signatures, describing a request and its mismatch, ending
 *                     a request, whether a local peer's process is gone (this file)
 *   fabric.c, shmem.c the transports
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm_internal.h"

const char *rt_redop_name(RtRedOp op) {
  static const char *const n[RT_REDOP_COUNT] = {"sum", "avg", "max"};
  return op < RT_REDOP_COUNT ? n[op] : "?";
}
const char *rt_op_name(RtOpKind op) {
  static const char *const n[RT_OP_COUNT] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                             "barrier",    "send",           "recv"};
  return op < RT_OP_COUNT ? n[op] : "?";
}

void rt_block(size_t count, int n, int i, size_t *off, size_t *len) {
  size_t base = count / (size_t)n, rem = count % (size_t)n, ui = (size_t)i;
  *len = base + (ui < rem ? 1 : 0);
  *off = ui * base + (ui < rem ? ui : rem);
}

static uint32_t mix(uint32_t h, uint64_t v) {
  for (int i = 0; i < 8; i++) {
    h ^= (uint32_t)(v & 0xff);
    h *= 16777619u;
    v >>= 8;
  }
  return h;
}

uint16_t rt_signature(const RtReq *q) {
  uint32_t h = 2166136261u;
  h = mix(h, q->count);
  h = mix(h, (uint64_t)q->dt);
  h = mix(h, q->op == RT_OP_ALL_REDUCE || q->op == RT_OP_REDUCE_SCATTER ? (uint64_t)q->redop : 0);
  h = mix(h, q->op == RT_OP_BROADCAST ? (uint64_t)q->root : 0);
  uint16_t kind = (uint16_t)(q->op == RT_OP_RECV ? RT_OP_SEND : q->op);
  return (uint16_t)((kind << 13) | (h & 0x1fff));
}

void rt_describe_sig(uint16_t sig, char *buf, size_t len) {
  int op = sig >> 13;
  snprintf(buf, len, "%s", op < RT_OP_COUNT ? rt_op_name((RtOpKind)op) : "?");
}

void rt_describe_req(const RtReq *q, char *buf, size_t len) {
  if (q->user) q = q->user;
  const RtGroup *g = q->g;
  char members[96];
  int k = 0;
  for (int i = 0; i < g->n && k < (int)sizeof members - 16; i++)
    k += snprintf(members + k, sizeof members - (size_t)k, "%s%d", i ? "," : "", g->ranks[i]);
  if (k >= (int)sizeof members - 16) snprintf(members + k, sizeof members - (size_t)k, ",...");
  switch (q->op) {
  case RT_OP_SEND:
  case RT_OP_RECV:
    snprintf(buf, len, "%s #%llu %s rank %d on group %s [%s], %zu bytes, tag %d", rt_op_name(q->op),
             (unsigned long long)q->seq_full, q->op == RT_OP_SEND ? "to" : "from", g->ranks[q->peer], g->name,
             members, q->count, q->utag);
    break;
  default:
    snprintf(buf, len, "%s #%llu on group %s [%s] of %zu %s elements (%zu bytes)%s%s", rt_op_name(q->op),
             (unsigned long long)q->seq_full, g->name, members, q->count, rt_dtype_name(q->dt), q->count * q->esize,
             q->op == RT_OP_ALL_REDUCE || q->op == RT_OP_REDUCE_SCATTER ? ", " : "",
             q->op == RT_OP_ALL_REDUCE || q->op == RT_OP_REDUCE_SCATTER ? rt_redop_name(q->redop) : "");
  }
}

_Noreturn void rt_req_mismatch(RtReq *q, int rank, const char *what) {
  char mine[256];
  rt_describe_req(q, mine, sizeof mine);
  rt_fatal(RT_EXIT_COMM,
           "collective mismatch: this rank called %s, but rank %d %s; every member of a group must issue the "
           "same collectives (op, count, dtype, reduction, root) in the same order",
           mine, rank, what);
}

void rt_req_finished(RtReq *q) {
  RtComm *c = q->c;
  pthread_mutex_lock(&c->lock);
  if (q->in_list) {
    if (q->prev) q->prev->next = q->next;
    else c->active = q->next;
    if (q->next) q->next->prev = q->prev;
    q->in_list = false;
    c->nactive--;
  }
  pthread_mutex_unlock(&c->lock);
}

/* (open / read / close only: the crash guard, watchdog.c, asks from a signal handler) */
static bool process_gone(int pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  char path[32] = "/proc/", buf[256];
  int k = 6;
  char digits[12];
  int nd = 0;
  for (unsigned v = (unsigned)pid; v; v /= 10) digits[nd++] = (char)('0' + v % 10);
  while (nd) path[k++] = digits[--nd];
  memcpy(path + k, "/stat", 6);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false; /* no /proc: rely on kill() */
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = 0;
  const char *p = strrchr(buf, ')'); /* "pid (comm) S ..." */
  return p && (p[2] == 'Z' || p[2] == 'X');
}

bool rt_peer_gone(const RtComm *c, int rank) {
  if (rank == c->rank || strcmp(c->peers[rank].host, c->peers[c->rank].host) != 0) return false;
  return process_gone(c->peers[rank].pid);
}
