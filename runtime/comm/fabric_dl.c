/* runtime/comm/fabric_dl.c — libfabric loaded on first use (fabric_dl.h says why): dlopen of the library
 * found at build time (SHARDRT_FABRIC_LIB, its directory from pkg-config), else of its soname on the
 * loader's path; a failure stops the rank with the reason. */
#include "fabric_dl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
#include <stdio.h>

#include "comm.h"

#ifndef SHARDRT_FABRIC_LIB
#define SHARDRT_FABRIC_LIB "libfabric.so.1"
#endif

static struct {
  __typeof__(rt_fi_getinfo) *getinfo;
  __typeof__(rt_fi_freeinfo) *freeinfo;
  __typeof__(rt_fi_dupinfo) *dupinfo;
  __typeof__(rt_fi_fabric) *fabric;
  __typeof__(rt_fi_strerror) *strerror;
} fab;
static pthread_once_t fab_once = PTHREAD_ONCE_INIT;

static void *sym(void *lib, const char *name) {
  void *p = dlsym(lib, name);
  if (!p) rt_fatal(RT_EXIT_COMM, "libfabric (%s) has no %s: %s", SHARDRT_FABRIC_LIB, name, dlerror());
  return p;
}

static void load(void) {
  void *lib = dlopen(SHARDRT_FABRIC_LIB, RTLD_NOW | RTLD_GLOBAL);
  if (!lib) lib = dlopen("libfabric.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!lib)
    rt_fatal(RT_EXIT_COMM, "cannot load libfabric (%s, then libfabric.so.1), which a run of several ranks needs: %s",
             SHARDRT_FABRIC_LIB, dlerror());
  *(void **)&fab.getinfo = sym(lib, "fi_getinfo");
  *(void **)&fab.freeinfo = sym(lib, "fi_freeinfo");
  *(void **)&fab.dupinfo = sym(lib, "fi_dupinfo");
  *(void **)&fab.fabric = sym(lib, "fi_fabric");
  *(void **)&fab.strerror = sym(lib, "fi_strerror");
}

static void loaded(void) { pthread_once(&fab_once, load); }

int rt_fi_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags, const struct fi_info *hints,
                  struct fi_info **info) {
  loaded();
  return fab.getinfo(version, node, service, flags, hints, info);
}
void rt_fi_freeinfo(struct fi_info *info) {
  loaded();
  fab.freeinfo(info);
}
struct fi_info *rt_fi_dupinfo(const struct fi_info *info) {
  loaded();
  return fab.dupinfo(info);
}
int rt_fi_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context) {
  loaded();
  return fab.fabric(attr, fabric, context);
}
const char *rt_fi_strerror(int errnum) {
  loaded();
  return fab.strerror(errnum);
}
