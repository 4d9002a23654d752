/* runtime/comm/check.h — checked library calls: file, line and rank on failure. */
#ifndef SHARDRT_CHECK_H
#define SHARDRT_CHECK_H

#include "fabric_dl.h" /* (first: fi_strerror is the loader's) */

#include <rdma/fi_errno.h>

#include "comm.h"

#define FI_CHECK(call)                                                                            \
  do {                                                                                            \
    ssize_t fi_check_rc_ = (ssize_t)(call);                                                       \
    if (fi_check_rc_ < 0)                                                                         \
      rt_fatal(RT_EXIT_COMM, "%s:%d: %s failed: %s (%zd)", __FILE__, __LINE__, #call,             \
               fi_strerror((int)-fi_check_rc_), fi_check_rc_);                                    \
  } while (0)

#define MPI_CHECK(call)                                                                           \
  do {                                                                                            \
    int mpi_check_rc_ = (call);                                                                   \
    if (mpi_check_rc_ != MPI_SUCCESS) {                                                           \
      char mpi_check_msg_[MPI_MAX_ERROR_STRING];                                                  \
      int mpi_check_len_ = 0;                                                                     \
      MPI_Error_string(mpi_check_rc_, mpi_check_msg_, &mpi_check_len_);                           \
      rt_fatal(RT_EXIT_COMM, "%s:%d: %s failed: %s", __FILE__, __LINE__, #call, mpi_check_msg_);  \
    }                                                                                             \
  } while (0)

#endif
