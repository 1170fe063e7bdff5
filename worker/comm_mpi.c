/* comm_mpi.c - the MPI backend of fa_comm: collectives on host memory over a
 * private duplicate of MPI_COMM_WORLD whose errors return instead of aborting. */
#include "worker/comm_internal.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* MPI counts are int: big buffers travel in chunks of this many elements. */
#define FA_MPI_CHUNK ((size_t)1 << 28)

typedef struct mpi_impl {
    MPI_Comm comm;
} mpi_impl;

static int mpi_fail(fa_error *err, int mrc, const char *what)
{
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(mrc, s, &n) != MPI_SUCCESS)
        snprintf(s, sizeof(s), "MPI error %d", mrc);
    return fa_errorf(err, FA_ERR_MPI, "comm: %s failed: %s", what, s);
}

static MPI_Comm comm_of(fa_comm *c) { return ((mpi_impl *)c->impl)->comm; }

int fa_comm_mpi_world(int *rank, int *size, fa_error *err)
{
    int inited = 0, finalized = 0, provided = 0, mrc;

    MPI_Finalized(&finalized);
    if (finalized)
        return fa_errorf(err, FA_ERR_STATE, "comm: MPI was already finalised in this process");
    MPI_Initialized(&inited);
    if (!inited) {
        /* Only the main thread calls MPI (FUNNELED). */
        mrc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
        if (mrc != MPI_SUCCESS)
            return mpi_fail(err, mrc, "MPI_Init_thread");
    }
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    return 0;
}

void fa_comm_finalize(void)
{
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (inited && !finalized)
        MPI_Finalize();
}

static int mpi_bcast(fa_comm *c, void *buf, size_t len, int root, fa_error *err)
{
    for (size_t off = 0; off < len; off += FA_MPI_CHUNK) {
        size_t n = len - off < FA_MPI_CHUNK ? len - off : FA_MPI_CHUNK;
        int mrc = MPI_Bcast((char *)buf + off, (int)n, MPI_BYTE, root, comm_of(c));
        if (mrc != MPI_SUCCESS)
            return mpi_fail(err, mrc, "MPI_Bcast");
    }
    return 0;
}

static int mpi_allreduce_f32(fa_comm *c, float *buf, size_t n, int is_max, fa_error *err)
{
    for (size_t off = 0; off < n; off += FA_MPI_CHUNK) {
        size_t k = n - off < FA_MPI_CHUNK ? n - off : FA_MPI_CHUNK;
        int mrc = MPI_Allreduce(MPI_IN_PLACE, buf + off, (int)k, MPI_FLOAT,
                                is_max ? MPI_MAX : MPI_SUM, comm_of(c));
        if (mrc != MPI_SUCCESS)
            return mpi_fail(err, mrc, "MPI_Allreduce");
    }
    return 0;
}

static int mpi_allgather_size(fa_comm *c, size_t v, size_t *out, fa_error *err)
{
    unsigned long long mine = v, *all;
    int mrc;

    all = calloc((size_t)c->size, sizeof(*all));
    if (!all)
        return fa_errorf(err, FA_ERR_NOMEM, "comm: out of memory");
    mrc = MPI_Allgather(&mine, 1, MPI_UNSIGNED_LONG_LONG, all, 1, MPI_UNSIGNED_LONG_LONG,
                        comm_of(c));
    if (mrc == MPI_SUCCESS)
        for (int i = 0; i < c->size; i++)
            out[i] = (size_t)all[i];
    free(all);
    return mrc == MPI_SUCCESS ? 0 : mpi_fail(err, mrc, "MPI_Allgather");
}

static int mpi_allgatherv(fa_comm *c, const void *send, size_t len, void *recv, const size_t *lens,
                          fa_error *err)
{
    size_t total = 0, off = 0, p = c->size > 0 ? (size_t)c->size : 1;
    int *counts = NULL, *displs = NULL, mrc, rc = 0;

    for (int i = 0; i < c->size; i++)
        total += lens[i];
    if (total <= INT_MAX) {
        counts = calloc(p, sizeof(int));
        displs = calloc(p, sizeof(int));
        if (!counts || !displs) {
            rc = fa_errorf(err, FA_ERR_NOMEM, "comm: out of memory");
            goto out;
        }
        for (int i = 0; i < c->size; i++) {
            counts[i] = (int)lens[i];
            displs[i] = (int)off;
            off += lens[i];
        }
        /* MPI forbids aliasing send and receive; our block is copied by MPI. */
        mrc = MPI_Allgatherv(len ? send : (const void *)"", (int)len, MPI_BYTE, recv, counts,
                             displs, MPI_BYTE, comm_of(c));
        if (mrc != MPI_SUCCESS)
            rc = mpi_fail(err, mrc, "MPI_Allgatherv");
        goto out;
    }
    /* Over 2 GiB in all: one chunked broadcast per rank. */
    for (int i = 0; i < c->size && rc == 0; i++) {
        if (i == c->rank && lens[i] > 0)
            memmove((char *)recv + off, send, lens[i]);
        rc = mpi_bcast(c, (char *)recv + off, lens[i], i, err);
        off += lens[i];
    }
out:
    free(counts);
    free(displs);
    return rc;
}

static int mpi_barrier(fa_comm *c, fa_error *err)
{
    int mrc = MPI_Barrier(comm_of(c));
    return mrc == MPI_SUCCESS ? 0 : mpi_fail(err, mrc, "MPI_Barrier");
}

static void mpi_del(fa_comm *c)
{
    mpi_impl *m = c->impl;
    int finalized = 0;
    if (m) {
        MPI_Finalized(&finalized);
        if (!finalized && m->comm != MPI_COMM_NULL)
            MPI_Comm_free(&m->comm);
        free(m);
    }
    free(c);
}

static const fa_comm_ops mpi_ops = {
    .name = "mpi",
    .kind = FA_COMM_BACKEND_MPI,
    .bcast = mpi_bcast,
    .allreduce_f32 = mpi_allreduce_f32,
    .allgatherv = mpi_allgatherv,
    .allgather_size = mpi_allgather_size,
    .barrier = mpi_barrier,
    .allreduce_f32_device = NULL,
    .del = mpi_del,
};

int fa_comm_mpi_new(fa_comm **out, fa_error *err)
{
    int rank = 0, size = 1, rc, mrc;
    mpi_impl *m;
    fa_comm *c;

    rc = fa_comm_mpi_world(&rank, &size, err);
    if (rc != 0)
        return rc;
    m = calloc(1, sizeof(*m));
    c = fa_comm_alloc(&mpi_ops, rank, size);
    if (!m || !c) {
        free(m);
        free(c);
        return fa_errorf(err, FA_ERR_NOMEM, "comm: out of memory");
    }
    m->comm = MPI_COMM_NULL;
    c->impl = m;
    /* A private communicator keeps our traffic apart from the host program's. */
    mrc = MPI_Comm_dup(MPI_COMM_WORLD, &m->comm);
    if (mrc != MPI_SUCCESS) {
        fa_comm_del(c);
        return mpi_fail(err, mrc, "MPI_Comm_dup");
    }
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    *out = c;
    return 0;
}
