/* runtime/comm/comm_internal.h — what the comm's files share (their layers: req.c's top).
 *
 * Message tags (64 bits; the signature, and for p2p the user tag, are ignored when
 * matching and checked after):
 *   63      p2p flag
 *   62..48  group id (a hash of the member list, 15 bits)
 *   47..32  sequence: the group's collective counter, or for p2p the counter of messages
 *           with this tag between the pair (so sends match receives by (peer, tag), in
 *           posting order among equal tags, whatever the order of different tags)
 *   31..16  collectives: message index (channel << 8 | step); p2p: the user tag
 *   15..0   signature: op (3 bits) and a hash of count, dtype, reduction, root
 * Receives are directed (FI_DIRECTED_RECV) at the expected peer, so two messages can
 * only be confused when they come from the same peer for the same group and sequence.
 */
#ifndef SHARDRT_COMM_INTERNAL_H
#define SHARDRT_COMM_INTERNAL_H

#include "fabric_dl.h" /* (first: libfabric's entry points renamed to the loader's) */

#include <pthread.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <stdatomic.h>
#include <sys/uio.h>

#include "check.h"
#include "comm.h"

#define RT_NAME_MAX 256   /* bytes of an endpoint name */
#define RT_TAG_IGNORE 0xffffull /* the signature is checked, not matched */
#define RT_IOV_MAX 4      /* pieces of one scattered message (all_reduce_v across members) */

typedef struct {
  int pid;                 /* process id */
  char host[64];           /* host name (where the pid is valid) */
  char node[64];           /* node id: env SHARDRT_NODE, else the host name */
  char shm_name[64];       /* its shm region (/dev/shm), "" when not reached through shm */
  uint64_t probe;          /* address of its CMA probe word (direct.c) */
} RtPeer;

/* A region of rt_comm_mem_alloc memory, as its owner publishes it (shmem.c). */
typedef struct {
  uint64_t base;   /* address in the owner */
  uint64_t size;   /* bytes; 0: no region */
  int32_t fd;      /* the owner's memfd, opened by peers through /proc/<pid>/fd; -1: plain memory */
  uint32_t id;     /* unique in the owner, never reused */
} RtRegion;

/* A peer's region mapped here. */
typedef struct {
  int rank;        /* world rank of the owner */
  RtRegion r;      /* as published */
  char *map;       /* its bytes here; NULL: could not be mapped (process_vm_* is used) */
} RtPeerMap;

/* The fabrics: RT_FAB_INTRA for peers on this node, RT_FAB_INTER for peers on other
 * nodes. With one provider for every peer (forced, or both choices equal) only
 * RT_FAB_INTRA is opened and carries everything. */
enum { RT_FAB_INTRA, RT_FAB_INTER, RT_NFAB };

typedef struct {
  bool open;
  char provider[64];     /* the provider's name as fi_info reports it */
  struct fi_info *info;
  struct fid_fabric *fabric;
  struct fid_domain *domain;
  struct fid_av *av;
  struct fid_ep *ep;
  struct fid_cq *cq;
  bool mr_local;         /* provider needs local buffers registered */
  bool mr_endpoint;      /* registrations must be bound to the endpoint */
  int iov_limit;         /* pieces a message may be scattered over (1..RT_IOV_MAX; 1 with mr_local) */
  size_t inject;         /* the provider's inject size: a send up to it completes when posted (no response) */
} RtFabric;

/* A posted message. ctx must come first: providers in FI_CONTEXT mode use it. */
typedef struct RtMsg {
  struct fi_context2 ctx;
  RtReq *req;    /* owner */
  int slot;      /* channel slot in req */
  bool is_recv;
  uint64_t tag;  /* full tag sent / expected */
  int peer;      /* world rank */
  int fab;       /* RT_FAB_*: the fabric that reaches peer */
  size_t bytes;  /* message size */
  struct fid_mr *mr; /* FI_MR_LOCAL registration of a user buffer, else NULL */
  int niov;      /* > 1: the message is scattered over iov (never with mr_local) */
  struct iovec iov[RT_IOV_MAX];
  bool done;     /* completed (false from its posting on) */
} RtMsg;

/* One pipeline channel slot: a column of chunks, one per block, walked through the
 * ring's steps. */
typedef struct {
  int chan;        /* channel number, -1 when the slot is idle */
  int step;        /* step in progress */
  int pending;     /* messages of this step not yet completed */
  bool posted;     /* the step's messages were posted */
  void *stage[2];  /* staging slabs (chunk bytes) for reductions */
  void *pack[2];   /* all_reduce_v: slabs for a send [0] / receive [1] that spans more members than a message may be scattered over */
  bool unpack;     /* the step's receive landed in pack[1] */
  RtMsg send, recv;
} RtSlot;

struct RtReq {
  RtComm *c;
  RtGroup *g;
  RtOpKind op;
  RtDType dt;
  RtRedOp redop;
  const char *send;    /* input (collectives' own contribution, send payload) */
  char *recv;          /* output */
  size_t count;        /* elements (bytes for send/recv) */
  size_t esize;        /* bytes per element */
  int root;            /* broadcast: member index */
  int peer;            /* p2p: member index */
  int utag;            /* p2p: user tag */
  uint16_t seq;        /* the group's (or pair's) sequence number */
  uint64_t seq_full;   /* the same, unwrapped, for messages */
  uint16_t sig;        /* signature of this call */
  int n, me;           /* group size, our index */
  int nsteps;          /* steps per channel */
  size_t chunk;        /* elements per chunk */
  int nchan;           /* channels in all */
  int next_chan;       /* next channel to start */
  int active;          /* slots busy */
  int nslots;
  RtSlot *slots;       /* [nslots] */
  bool done;
  int recvd;           /* receives completed (the watchdog: has a peer joined?) */
  bool in_list;        /* linked in the comm's active list */
  double t_start;      /* seconds, monotonic */
  double t_running;    /* a backend's (RtGroupBackend.state): when the watchdog first saw it running on the device
                          (0: not yet); its timeout counts from there, not from t_start */
  RtReq *prev, *next;  /* the comm's active list */
  void *gpu;           /* backend request (NCCL), else NULL */
  /* all_reduce_v on libfabric: the buffer is the concatenation of members (in place;
   * send and recv are NULL) */
  int nbufs;           /* members, 0 for every other request */
  char **bufs;         /* [nbufs] */
  size_t *bufstart;    /* [nbufs + 1] element offset of each member in the concatenation */
  /* one host, direct reads of the peers' buffers (direct.c) instead of the ring */
  bool direct;
  struct RtDirect *dx; /* its state, NULL for the ring */
  /* a send / receive on this host over shm that cannot be pulled (no cross-memory attach): the sender posts its
   * bytes only once the receiver's zero-byte go-ahead came (ring.c), so no send waits for a receive */
  bool cts;
  /* one node, small: a single round through the members' mailboxes (mbox.c) */
  bool mbox;
  uint64_t mbox_k;     /* the group's mailbox collective number */
  bool mbox_stream;    /* a large all-gather streamed through the mailbox in chunks (mbox.c) */
  bool st_posted;      /* ... its slot header is out */
  size_t st_put;       /* ... chunks of our block posted (MB_PUSH: 1 once our own block is in our output) */
  uint64_t *st_got;    /* ... [n] chunks of each member's block copied out (RT_ST_DONE: all) */
  bool seq_set;        /* seq_full was given (a hierarchical request's part, hier.c) */
  uint16_t sig_as;     /* non-zero: the signature its messages carry (a gather-and-fold's all-gather: its parent's) */
  RtReq *user;         /* the call the user made, described in errors instead of this one (that all-gather's parent) */
  /* a group over several nodes: node, nodes, node (hier.c) */
  struct RtHier *hier; /* its state (also a gather-and-fold's), else NULL */
  RtReq *hier_next;    /* the comm's list of hierarchical requests in flight */
};

/* The world ranks q waits for now (at most max); first[i]: that peer has not joined q. */
typedef int (*RtWaitingFn)(const RtReq *q, int *peers, bool *first, int max);

/* Where a backend's request is on its device (RtGroupBackend.state). */
typedef enum {
  RT_DEV_QUEUED,  /* behind work queued before it (the host runs ahead of the device): not waiting on a peer */
  RT_DEV_RUNNING, /* its turn came: from here on it waits for its peers */
  RT_DEV_DONE     /* finished on the device (the host has not looked yet) */
} RtDevState;

/* A backend that runs a group's operations elsewhere (NCCL on GPU memory). */
typedef struct {
  const char *name;
  bool (*start)(RtReq *q);  /* posts q; false: not supported */
  bool (*test)(RtReq *q);   /* true when finished */
  void (*finish)(RtReq *q); /* releases q->gpu */
  void (*group_free)(void *state);
  /* Where q is on the device, asked by the watchdog's thread under the comm's lock (q is in the active list: not
   * finished; its start may still be running on the host: q->gpu NULL until published under the lock). The
   * watchdog times q from when it first sees it RUNNING, and a DONE or QUEUED one not at all: a step's later
   * collectives wait behind its compute, which may take longer than the timeout. NULL: running from its start. */
  RtDevState (*state)(RtReq *q);
} RtGroupBackend;

/* Messages posted between this rank and one member with one tag. */
typedef struct {
  uint32_t key;  /* (member << 16 | tag) + 1; 0: empty slot */
  uint64_t sent; /* sends posted */
  uint64_t recvd; /* receives posted */
} RtP2pSeq;

struct RtGroup {
  RtComm *c;
  int n;                     /* members */
  int me;                    /* our index */
  int *ranks;                /* [n] world ranks */
  char name[48];             /* for messages */
  uint16_t id;               /* 15-bit hash of ranks */
  uint64_t seq;              /* collectives issued */
  RtP2pSeq *p2p;             /* [p2p_cap] open addressing on (member, tag): messages posted */
  int p2p_cap, p2p_used;     /* slots, slots in use */
  const RtGroupBackend *backend; /* NULL: libfabric on host memory */
  void *backend_state;
  uint64_t hash;             /* 64-bit hash of ranks (the mailbox key, with gen) */
  uint64_t gen;              /* groups with this member list this rank created before */
  struct RtMboxGroup *mbox;  /* mbox.c state, NULL until the first mailbox collective */
  bool one_node;             /* every member runs on this host and node (SHARDRT_NODE) */
  RtGroup *node_g;           /* over several nodes, more members than nodes: our node's members */
  RtGroup *lead_g;           /* ... and the first member of each node, where we are ours (else NULL) */
  RtGroup *node2_g;          /* ... our node's members again, for the last part (its own mailbox; parts start
                                there in the order of their sequence numbers: `started`) */
  uint64_t started;          /* node2_g: parts started */
  RtGroup *rail_g;           /* ... every node with the same number (>= 2) of members: one member per node, the
                                one with our index in its node (our rail), else NULL */
  int *node_of;              /* [n] with node_g: each member's node, numbered in lead_g's order */
  int *local_of;             /* [n] ... each member's index among its node's members (its rail) */
  int nnodes;                /* ... nodes */
};

typedef struct {
  struct fi_cq_tagged_entry e;
  bool err;
  int errcode; /* positive fi errno when err */
} RtCqEvent;

struct RtComm {
  RtBoot boot;           /* copy of the bootstrap */
  int rank, world;
  RtPeer *peers;         /* [world] */
  /* fabrics */
  RtFabric fab[RT_NFAB];
  int *peer_fab;         /* [world] RT_FAB_* that reaches each rank */
  fi_addr_t *addr;       /* [world] address in that fabric's AV */
  bool mr_local;         /* some open fabric needs local registration */
  char provider[160];    /* "shm", or "shm within a node, tcp;ofi_rxm across nodes" */
  /* options */
  double timeout_s;
  size_t chunk_bytes;
  int window;
  int spin;              /* empty completion polls before yielding the core */
  int idle_polls;        /* empty polls in a row */
  /* staging slabs */
  void **free_slabs;     /* stack */
  int nfree, capfree;
  void **all_slabs;
  struct fid_mr **slab_mrs; /* [nall * RT_NFAB] when mr_local: slab i in fabric f at i * RT_NFAB + f */
  int nall, capall;
  /* completions read while posting (FI_EAGAIN) and not yet handled */
  RtCqEvent *deferred;
  int ndeferred, capdeferred;
  /* active requests, shared with the watchdog */
  pthread_mutex_t lock;
  RtReq *active;
  atomic_int post_blocked; /* 1 + the world rank a post is retrying to (FI_EAGAIN: it is not receiving), 0 none */
  pthread_t watchdog;
  RtWaitingFn watch_waiting; /* what a request waits for (comm.c's, given to rt_watchdog_start) */
  atomic_bool stop;
  bool watchdog_running;
  RtGroup *world_group;
  /* direct reads between local ranks (direct.c) */
  bool direct_ok;        /* every rank can read its local peers' memory (and SHARDRT_DIRECT != 0) */
  bool direct_want;      /* SHARDRT_DIRECT (rt_direct_allow_peers) */
  size_t direct_min;     /* bytes: smaller collectives take the ring */
  size_t direct_chunk;   /* bytes of the reduction staging slab */
  bool direct_push;      /* all-gather phases write into the peers instead of reading them */
  void *dstage;          /* [direct_chunk bytes] */
  uint64_t direct_count; /* collectives run by direct reads */
  uint64_t p2p_pulled;   /* sends and receives pulled by the receiver (direct.c) */
  /* memory the peers can map (shmem.c) */
  bool shmem_ok;         /* memfd regions are made (SHARDRT_SHMEM != 0) */
  RtRegion *regions;     /* [nregions] ours, live */
  int nregions, capregions;
  uint32_t next_region;  /* id of the next one */
  RtPeerMap *pmaps;      /* [npmaps] peers' regions mapped here */
  int npmaps, cappmaps;
  uint64_t mapped_bytes; /* bytes of direct collectives moved through mappings */
  /* groups created, per member list (RtGroup.gen) */
  uint64_t *gen_hash;    /* [ngen] member-list hashes */
  uint64_t *gen_count;   /* [ngen] groups created with it */
  int ngen, capgen;
  int nactive;           /* requests in the active list */
  /* single-round collectives through mailboxes in shared memory (mbox.c) */
  bool mbox_ok;          /* every rank maps its local peers' directories (and SHARDRT_MBOX != 0) */
  size_t mbox_max;       /* bytes: collectives up to this size on one node take the mailbox */
  size_t mbox_cap;       /* bytes of one mailbox slot */
  struct RtMboxDir *mbox_dir;        /* ours */
  RtRegion *mbox_dirs;               /* [world] every rank's directory as published */
  struct RtMboxDir **mbox_peer_dir;  /* [world] mapped here (local ranks), else NULL */
  void **mboxes;         /* [nmboxes] our mailboxes (freed with the comm) */
  int nmboxes, capmboxes;
  int mbox_active;       /* mailbox requests in flight */
  uint64_t mbox_count;   /* collectives run through mailboxes */
  bool mbox_stream;      /* larger one-node all-gathers stream through the mailboxes (SHARDRT_MBOX_STREAM) */
  size_t mbox_ag_max;    /* bytes: larger all-gathers are pushed rather than take the single round (SHARDRT_MBOX_AG_MAX) */
  size_t stream_min;
  size_t stream_max;     /* bytes: larger all-gathers are pushed again (SHARDRT_STREAM_MAX) */     /* bytes: smaller all-gathers above mbox_max take the direct reads (SHARDRT_STREAM_MIN) */
  size_t stream_chunk;   /* bytes of one streamed chunk (SHARDRT_STREAM_CHUNK) */
  size_t stream_ring;    /* bytes of the ring of chunks in a slot (SHARDRT_STREAM_RING, at most mbox_cap) */
  uint64_t stream_count; /* all-gathers streamed */
  /* the hierarchical collectives of groups over several nodes (hier.c) */
  bool hier;             /* used (SHARDRT_HIER != 0; rt_comm_tune "hier") */
  size_t hier_max[3];    /* bytes: all-reduce, reduce-scatter, all-gather up to this go hierarchical (hier.c) */
  size_t rail_min[3];    /* bytes: hierarchical all-reduces, reduce-scatters, all-gathers from this size, nodes of
                            equal size, by rails (hier.c) */
  uint64_t rail_count;   /* run so */
  size_t gather_max;     /* bytes: smaller all-reduces and reduce-scatters on the ring gather and fold (hier.c) */
  uint64_t gather_count; /* run so */
  RtReq *hier_active;    /* in flight */
  uint64_t hier_count;   /* run */
};

/* req.c: the bottom layer (see its top for the layers) */
void rt_req_finished(RtReq *q); /* unlinks a finished request from the active list */
void rt_describe_req(const RtReq *q, char *buf, size_t len);
uint16_t rt_signature(const RtReq *q);
void rt_describe_sig(uint16_t sig, char *buf, size_t len);
/* Ends the process: member `rank` issued another collective than q (what it did). */
_Noreturn void rt_req_mismatch(RtReq *q, int rank, const char *what);
/* True when rank runs on this host and its process is gone (or a zombie). */
bool rt_peer_gone(const RtComm *c, int rank);

/* fabric.c */
void rt_fabric_open(RtComm *c, const RtCommOptions *opt);
void rt_fabric_close(RtComm *c);
void *rt_slab_get(RtComm *c);
void rt_slab_put(RtComm *c, void *slab);
void *rt_slab_desc(RtComm *c, void *slab, int peer); /* MR descriptor for a message to peer, or NULL */
/* Posts a message; on FI_EAGAIN reads completions into c->deferred and retries. */
void rt_post(RtComm *c, RtMsg *m, void *buf, void *desc);
/* Reads up to max completions (deferred first); returns how many, 0 when none. */
int rt_poll(RtComm *c, RtCqEvent *ev, int max);

/* ring.c */
void rt_req_begin(RtReq *q);            /* plans q and posts its first messages */
void rt_req_complete_msg(RtMsg *m, const RtCqEvent *ev);
/* The world ranks q waits to receive from now (at most max); first[i]: the wait is for that
 * peer's first message of q, so it has not joined q. Read by the watchdog under the comm's lock. */
int rt_req_waiting(const RtReq *q, int *peers, bool *first, int max);

/* mbox.c */
void rt_mbox_init(RtComm *c); /* after shmem: make and exchange the directories (collective) */
void rt_mbox_close(RtComm *c);
void rt_mbox_group_free(RtGroup *g);
bool rt_mbox_usable(const RtReq *q); /* the same answer on every member */
void rt_mbox_begin(RtReq *q);
bool rt_mbox_progress(RtComm *c); /* true when some mailbox request moved */
/* q's output from every member's contribution (src[p]: member p's input, for all-gather its
 * block), folded in the direct reads' order (also the ring's gather-and-fold, hier.c). */
void rt_mbox_fold(RtReq *q, char *const *src);
/* The world ranks whose data for q is not in their mailbox yet (first[i]: not joined), up to max. */
int rt_mbox_waiting(const RtReq *q, int *peers, bool *first, int max);

/* direct.c */
uint64_t rt_direct_probe_addr(void);
void rt_direct_allow_peers(RtComm *c); /* before the peers' addresses are exchanged: SHARDRT_DIRECT, Yama's ptracer */
void rt_direct_init(RtComm *c);  /* after the fabric is open: probe CMA, read the settings */
void rt_direct_close(RtComm *c);
bool rt_direct_usable(const RtReq *q); /* the same answer on every member */
/* A send / receive whose send the shm provider would complete in order behind this rank's earlier ones: to a rank of
 * this host through shm, over its inject size (the same answer on both sides). */
bool rt_p2p_in_order(const RtReq *q);
bool rt_direct_p2p_usable(const RtReq *q); /* such a one pulled by the receiver (the same answer on both sides) */
int rt_direct_begin(RtReq *q);   /* sets up q->dx; returns the number of steps */
void rt_direct_post(RtReq *q, RtSlot *s,
                    void (*post)(RtReq *, RtSlot *, RtMsg *, bool is_recv, int member, void *buf, size_t bytes, void *desc));
void rt_direct_finish_step(RtReq *q, int step);
void rt_direct_free(RtReq *q);
int rt_direct_waiting(const RtReq *q, int *peers, bool *first, int max); /* rt_req_waiting of a direct request */

/* shmem.c */
void rt_shmem_init(RtComm *c);
/* Shared memory for the runtime's own use (whatever SHARDRT_SHMEM says): zeroed, mapped
 * here, described in *r for the peers; NULL when none can be made. Free with
 * rt_comm_mem_free. */
void *rt_shmem_region(RtComm *c, size_t bytes, RtRegion *r);
void rt_shmem_close(RtComm *c); /* unmaps the peers' regions */
/* Our region holding address p (fd -1 and size 0 when none). */
RtRegion rt_shmem_find(const RtComm *c, const void *p);
/* Peer rank's region r mapped here (mapped on first use); NULL when r is no region or
 * cannot be mapped. */
char *rt_shmem_peer(RtComm *c, int rank, const RtRegion *r);

/* comm.c: requests, for the algorithms composed of requests (hier.c) */
RtReq *rt_req_new(RtGroup *g, RtOpKind op, const void *send, void *recv, size_t count, RtDType dt);
RtReq *rt_req_start(RtReq *q); /* chooses the algorithm and posts q */
void rt_req_free(RtReq *q);

/* hier.c: groups over several nodes (node, nodes, node) and gather-and-fold on the ring; with
 * comm.c the top layer (their requests are made of requests) */
void rt_hier_init(RtComm *c);                       /* settings from the environment */
bool rt_hier_tune(RtComm *c, const char *name, size_t value); /* rt_comm_tune's names of hier.c */
bool rt_same_node(const RtComm *c, int a, int b);
void rt_hier_groups(RtGroup *g);                    /* a new group's parts (node_g, node2_g, lead_g, rail_g) */
bool rt_hier_usable(const RtReq *q);                /* the same answer on every member */
void rt_hier_begin(RtReq *q);
bool rt_gather_usable(const RtReq *q);
void rt_gather_begin(RtReq *q);
bool rt_hier_progress(RtComm *c);                   /* true when a composed request moved */
void rt_hier_free(RtReq *q);                        /* its state */

/* watchdog.c: a leaf over the active requests; `waiting` says what one waits for */
void rt_watchdog_start(RtComm *c, RtWaitingFn waiting);
void rt_watchdog_stop(RtComm *c);

/* fabric.c: removes a dead peer's shm region (kill -9 leaves it in /dev/shm) */
void rt_fabric_forget_peer(RtComm *c, int rank);
/* Removes the /dev/shm regions of processes killed before they could (no owner lock, pid gone, older
 * than a minute); returns how many. Each process runs it once, before it makes its own region. */
int rt_fabric_sweep_shm(void);

#endif
