/* Collectives with a deadline, for the waits on peers outside an EP buffer's own protocol:
 * buffer set-up (ep_buffer.c, mega_moe_buffer.c), the demo runner (tools/demo_comm.c) and
 * the multi-rank test driver (tests/ep). MPI's blocking collectives cannot time out, and a
 * stopped peer keeps the others spinning in them forever; these are built from point-to-point
 * messages that are only polled (MPI_Test*, with the backoff of ep_internal.h, as every EP
 * wait), so a silent peer costs TS_ERR_TIMEOUT naming it:
 *   "<what>: rank 0 waited 5.0 s for rank 1, which did not arrive"
 * Every rank sends its part to every other (R - 1 messages each way): meant for the small
 * values these callers exchange and moderate R. After a timeout the communicator must not be
 * used for these calls again (a late peer's message would match the next call); the demo and
 * the tests then end the job (MPI_Abort). Not thread-safe on one communicator. */
#ifndef TILESTACK_EP_COLL_H
#define TILESTACK_EP_COLL_H

#include "tilestack/core.h"

#include <mpi.h>

/* all[r * bytes, +bytes) = rank r's `mine` (mine may be all + rank * bytes). */
ts_status ts__ep_coll_allgather(const void *mine, int bytes, void *all, MPI_Comm comm,
                                double timeout_s, const char *what);
/* inout = the reduction over ranks in rank order (the same bits on every rank), with any
 * predefined op and datatype (MPI_Reduce_local). */
ts_status ts__ep_coll_allreduce(void *inout, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
                                double timeout_s, const char *what);
ts_status ts__ep_coll_barrier(MPI_Comm comm, double timeout_s, const char *what);
/* A nonblocking collective (MPI_Iallreduce, MPI_Comm_idup, ...) polled to completion, for the
 * communicators of callers, where these point-to-point messages would intrude: who is missing
 * is then unknown ("the other ranks"). After a timeout the request is left to MPI. */
ts_status ts__ep_coll_wait(MPI_Request *req, MPI_Comm comm, double timeout_s, const char *what);
/* The waits' default deadline: TS_EP_TIMEOUT_S, else 100 s. */
double ts__ep_default_timeout_s(void);
/* The ranks per machine (MPI_COMM_TYPE_SHARED), the same on every machine, or
 * TS_ERR_UNSUPPORTED naming the two counts. MPI_Comm_split_type cannot be polled: call a
 * ts__ep_coll_barrier first, so a peer that is already gone is named instead of hanging. */
ts_status ts__ep_ranks_per_machine(MPI_Comm comm, double timeout_s, const char *what, int *per);
/* buf (bytes) from root to every rank. */
ts_status ts__ep_coll_bcast(void *buf, int bytes, int root, MPI_Comm comm, double timeout_s,
                            const char *what);

#endif
