/* runtime/comm/fabric_dl.h — libfabric, loaded when the first communicator opens (fabric_dl.c), not at
 * the trainer's start: a one-process trainer never loads it. Debian's libfabric needs libpsm_infinipath,
 * whose constructor times the CPU clock by sleeping (0.2 s at every start of every program linking
 * libfabric, used or not), and its providers pull in libibverbs, librdmacm, libefa, libpsm2 and more.
 * The five libfabric functions the runtime calls (the rest are inline calls through the objects'
 * operation tables) are renamed here, before the libfabric headers declare them, to the loader's
 * forwarding functions; include this before any <rdma/...> header. */
#ifndef SHARDRT_FABRIC_DL_H
#define SHARDRT_FABRIC_DL_H

#define fi_getinfo rt_fi_getinfo
#define fi_freeinfo rt_fi_freeinfo
#define fi_dupinfo rt_fi_dupinfo
#define fi_fabric rt_fi_fabric
#define fi_strerror rt_fi_strerror

#endif
