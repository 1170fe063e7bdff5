/* comm_internal.h - the backend interface behind fa_comm (comm.h).
 *
 * A backend fills fa_comm_ops; comm.c checks arguments, counts bytes and
 * dispatches.  Buffers passed to the ops are host memory, except
 * allreduce_sum_f32_device.  Every op returns 0 or a negative FA_ERR_*.
 */
#ifndef FA_WORKER_COMM_INTERNAL_H
#define FA_WORKER_COMM_INTERNAL_H

#include "worker/comm.h"

typedef struct fa_comm_ops {
    const char *name;
    int kind; /* enum fa_comm_backend_kind */
    int (*bcast)(fa_comm *c, void *buf, size_t len, int root, fa_error *err);
    int (*allreduce_f32)(fa_comm *c, float *buf, size_t n, int is_max, fa_error *err);
    /* lens[] is already filled (all ranks' lengths) and the total fits recv. */
    int (*allgatherv)(fa_comm *c, const void *send, size_t len, void *recv, const size_t *lens,
                      fa_error *err);
    /* Exchanges one size_t per rank: out[i] = rank i's v.  Used by allgatherv. */
    int (*allgather_size)(fa_comm *c, size_t v, size_t *out, fa_error *err);
    int (*barrier)(fa_comm *c, fa_error *err);
    int (*allreduce_f32_device)(fa_comm *c, float *dbuf, size_t n, void *stream,
                                fa_error *err); /* may be NULL */
    void (*del)(fa_comm *c);
} fa_comm_ops;

struct fa_comm {
    const fa_comm_ops *ops;
    void *impl; /* backend state */
    int rank;
    int size;
    fa_comm_stats stats;
};

/* Backends' constructors.  fa_comm_mpi_world() initialises MPI when
 * needed and returns the world rank and size. */
int fa_comm_mpi_world(int *rank, int *size, fa_error *err);
int fa_comm_mpi_new(fa_comm **out, fa_error *err);

#ifdef FA_HAVE_CUDA
/* Returns 0 and sets *ngpu (0 when none, with the reason in why). */
int fa_comm_nccl_probe(int *ngpu, char *why, size_t why_len);
/* Creates the NCCL backend over the ranks of mpi (which it keeps for the
 * ncclUniqueId exchange and variable sizes); takes ownership of mpi. */
int fa_comm_nccl_new(fa_comm **out, fa_comm *mpi, int ngpu, fa_error *err);
#endif

/* Allocates a zeroed fa_comm with ops; impl left NULL. */
fa_comm *fa_comm_alloc(const fa_comm_ops *ops, int rank, int size);

#endif
