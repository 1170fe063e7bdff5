/* comm.h - collectives among the local ranks of one region (docs/architecture.md, Inside a region).
 *
 * Ranks are processes started by mpirun (or any MPI launcher), or one process
 * alone (MPI singleton).  Rank 0 leads.  Behind this one small interface sit
 * the backends (curl's vtls habit):
 *
 *   MPI    collectives on host memory over a private duplicate of
 *          MPI_COMM_WORLD; the CPU path, and the bootstrap of NCCL.
 *   NCCL   collectives on device memory, one GPU per rank, bootstrapped by
 *          broadcasting the ncclUniqueId over MPI.  Built when CUDA and NCCL
 *          are found (FA_HAVE_CUDA).  The host-memory calls below stage
 *          through a device buffer, so every caller (the compressors) works on
 *          either backend; fa_comm_allreduce_sum_f32_device() reduces a
 *          gradient that already lives on the GPU without a copy.
 *   LOCAL  n ranks as n threads of one process, for tests and simulations
 *          (fa_comm_local_group_new); same semantics, no MPI.
 *
 * Every collective must be called by all ranks of the communicator in the same
 * order with matching sizes, as in MPI.  Results are bit-identical on every
 * rank.  Each rank counts what it sends (fa_comm_stats).
 */
#ifndef FA_WORKER_COMM_H
#define FA_WORKER_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"

typedef struct fa_comm fa_comm;

/* Which device a worker trains on; the same values as config.proto's Device. */
enum fa_comm_device {
    FA_COMM_DEVICE_AUTO = 0, /* NCCL when every rank has a GPU, else MPI on CPU */
    FA_COMM_DEVICE_CPU = 1,  /* MPI on host memory */
    FA_COMM_DEVICE_GPU = 2,  /* NCCL; falls back to MPI with a warning when no GPU is present */
};

enum fa_comm_backend_kind {
    FA_COMM_BACKEND_MPI = 1,
    FA_COMM_BACKEND_NCCL = 2,
    FA_COMM_BACKEND_LOCAL = 3,
};

/* What one rank sent since the last reset.
 *  payload_bytes  the bytes of this rank's own contribution to each
 *                 collective (its send buffer), whatever the algorithm: the
 *                 figure compressors are compared by, independent of the
 *                 number of ranks.  Counted also when size is 1.
 *  wire_bytes     the bytes this rank puts on the network under the usual
 *                 ring algorithms (all-reduce 2(p-1)/p * B, all-gather
 *                 total - successor's block, broadcast along a chain); 0 when
 *                 size is 1.
 */
typedef struct fa_comm_stats {
    uint64_t collectives;
    uint64_t payload_bytes;
    uint64_t wire_bytes;
} fa_comm_stats;

/* Joins the ranks of this process's MPI job (initialising MPI when nobody
 * did; a process started without mpirun is a job of size 1) and picks the
 * backend for `device` (enum fa_comm_device).  All ranks must pass the same
 * device; they agree on NCCL only when every rank has a GPU.  With no GPU,
 * AUTO logs at info and GPU logs a warning naming the reason, and both use
 * MPI.  Collective: every rank calls it.
 * Returns 0, FA_ERR_INVAL, FA_ERR_MPI, FA_ERR_NCCL, FA_ERR_CUDA or FA_ERR_NOMEM. */
int fa_comm_new(fa_comm **out, int device, fa_error *err);

/* Frees a communicator of any backend; NULL is a no-op.  Does not finalise
 * MPI (a process may create several communicators); see fa_comm_finalize. */
void fa_comm_del(fa_comm *c);

/* Finalises MPI when it is initialised and not yet finalised.  Called once
 * from main before exit (mpirun reports ranks that exit without it), after
 * every communicator is freed.  Idempotent; no communicator can be created
 * afterwards in this process. */
void fa_comm_finalize(void);

/* Creates n communicators of the LOCAL backend, ranks 0..n-1, into comms[]:
 * each is to be driven by its own thread.  Free each with fa_comm_del (the
 * group is released with the last one).  Returns 0, FA_ERR_INVAL or FA_ERR_NOMEM. */
int fa_comm_local_group_new(fa_comm **comms, int n, fa_error *err);

int fa_comm_rank(const fa_comm *c);
int fa_comm_size(const fa_comm *c);
int fa_comm_backend(const fa_comm *c);          /* enum fa_comm_backend_kind */
const char *fa_comm_backend_name(const fa_comm *c); /* "mpi", "nccl", "local" */

/* Rank `root`'s len bytes at buf are copied to buf on every rank.
 * Returns 0, FA_ERR_INVAL (bad root) or a backend error. */
int fa_comm_bcast(fa_comm *c, void *buf, size_t len, int root, fa_error *err);

/* buf[0..n) <- sum over ranks of buf[0..n), on every rank, in place.
 * Returns 0 or a backend error. */
int fa_comm_allreduce_sum_f32(fa_comm *c, float *buf, size_t n, fa_error *err);

/* buf[0..n) <- elementwise max over ranks, in place. */
int fa_comm_allreduce_max_f32(fa_comm *c, float *buf, size_t n, fa_error *err);

/* Variable-size all-gather: every rank contributes len bytes (may differ per
 * rank, may be 0); recv receives all contributions concatenated in rank
 * order and lens[i] (size entries, caller-owned) the length of rank i's.
 * Returns 0, FA_ERR_TOOBIG when the total exceeds cap (on every rank, recv
 * untouched) or a backend error. */
int fa_comm_allgatherv(fa_comm *c, const void *send, size_t len, void *recv, size_t cap,
                       size_t *lens, fa_error *err);

/* Returns when every rank has called it. */
int fa_comm_barrier(fa_comm *c, fa_error *err);

/* Sum-all-reduce of n floats that live in device memory (NCCL backend),
 * queued on cuda_stream (a cudaStream_t, e.g. fa_mlp_cuda_stream(); NULL =
 * the communicator's own stream) so that it follows the work that produced
 * dbuf; returns when it is done.  Returns FA_ERR_UNSUPPORTED on the other
 * backends. */
int fa_comm_allreduce_sum_f32_device(fa_comm *c, float *dbuf, size_t n, void *cuda_stream,
                                     fa_error *err);

/* Non-zero when the backend's native buffers are device memory (NCCL). */
int fa_comm_on_device(const fa_comm *c);

void fa_comm_stats_get(const fa_comm *c, fa_comm_stats *out);
void fa_comm_stats_reset(fa_comm *c);

#endif
