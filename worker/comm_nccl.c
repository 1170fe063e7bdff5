/* comm_nccl.c - the NCCL backend of fa_comm: one GPU per rank, collectives on
 * device memory, bootstrapped over MPI (docs/architecture.md): rank 0 creates the
 * ncclUniqueId and broadcasts it with MPI, then every rank joins with
 * ncclCommInitRank.  Host-memory calls stage through a device buffer that
 * grows to the largest message; the all-gather of variable blocks is a group
 * of broadcasts, one rooted at each rank (NCCL has no all-gather-v).
 * Built only with FA_HAVE_CUDA. */
#include "worker/comm_internal.h"

#ifdef FA_HAVE_CUDA

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fa_log.h"

typedef struct nccl_impl {
    fa_comm *mpi; /* owned: bootstrap, size exchange and barrier */
    ncclComm_t nccl;
    cudaStream_t stream;
    int device;
    void *dbuf; /* staging buffer on the device */
    size_t dcap;
} nccl_impl;

static nccl_impl *impl_of(fa_comm *c) { return c->impl; }

static int cuda_fail(fa_error *err, cudaError_t e, const char *what)
{
    return fa_errorf(err, FA_ERR_CUDA, "comm: %s failed: %s (%s)", what, cudaGetErrorString(e),
                     cudaGetErrorName(e));
}

static int nccl_fail(fa_error *err, ncclResult_t r, ncclComm_t comm, const char *what)
{
    const char *last = comm ? ncclGetLastError(comm) : NULL;
    return fa_errorf(err, FA_ERR_NCCL, "comm: %s failed: %s%s%s", what, ncclGetErrorString(r),
                     last && *last ? ": " : "", last ? last : "");
}

int fa_comm_nccl_probe(int *ngpu, char *why, size_t why_len)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(why, why_len, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
        /* Clear the sticky error so later CUDA calls in this process are not
         * blamed for it. */
        (void)cudaGetLastError();
        n = 0;
    } else if (n == 0) {
        snprintf(why, why_len, "no CUDA device visible");
    }
    *ngpu = n;
    return 0;
}

static int stage(fa_comm *c, size_t len, fa_error *err)
{
    nccl_impl *m = impl_of(c);
    cudaError_t e;
    if (len <= m->dcap)
        return 0;
    if (m->dbuf)
        cudaFree(m->dbuf);
    m->dbuf = NULL;
    m->dcap = 0;
    e = cudaMalloc(&m->dbuf, len);
    if (e != cudaSuccess)
        return cuda_fail(err, e, "cudaMalloc of the staging buffer");
    m->dcap = len;
    return 0;
}

static int sync_stream(fa_comm *c, fa_error *err)
{
    cudaError_t e = cudaStreamSynchronize(impl_of(c)->stream);
    return e == cudaSuccess ? 0 : cuda_fail(err, e, "cudaStreamSynchronize");
}

static int copy(fa_comm *c, void *dst, const void *src, size_t len, enum cudaMemcpyKind kind,
                fa_error *err)
{
    cudaError_t e = cudaMemcpyAsync(dst, src, len, kind, impl_of(c)->stream);
    return e == cudaSuccess ? 0 : cuda_fail(err, e, "cudaMemcpyAsync");
}

static int nccl_bcast(fa_comm *c, void *buf, size_t len, int root, fa_error *err)
{
    nccl_impl *m = impl_of(c);
    ncclResult_t r;
    int rc = stage(c, len, err);
    if (rc == 0 && c->rank == root)
        rc = copy(c, m->dbuf, buf, len, cudaMemcpyHostToDevice, err);
    if (rc != 0)
        return rc;
    r = ncclBroadcast(m->dbuf, m->dbuf, len, ncclUint8, root, m->nccl, m->stream);
    if (r != ncclSuccess)
        return nccl_fail(err, r, m->nccl, "ncclBroadcast");
    rc = copy(c, buf, m->dbuf, len, cudaMemcpyDeviceToHost, err);
    return rc != 0 ? rc : sync_stream(c, err);
}

static int reduce_dev(fa_comm *c, float *dbuf, size_t n, int is_max, cudaStream_t stream,
                      fa_error *err)
{
    nccl_impl *m = impl_of(c);
    ncclResult_t r = ncclAllReduce(dbuf, dbuf, n, ncclFloat32, is_max ? ncclMax : ncclSum,
                                   m->nccl, stream);
    if (r != ncclSuccess)
        return nccl_fail(err, r, m->nccl, "ncclAllReduce");
    return 0;
}

static int nccl_allreduce_f32(fa_comm *c, float *buf, size_t n, int is_max, fa_error *err)
{
    nccl_impl *m = impl_of(c);
    size_t len = n * sizeof(float);
    int rc = stage(c, len, err);
    if (rc == 0)
        rc = copy(c, m->dbuf, buf, len, cudaMemcpyHostToDevice, err);
    if (rc == 0)
        rc = reduce_dev(c, m->dbuf, n, is_max, m->stream, err);
    if (rc == 0)
        rc = copy(c, buf, m->dbuf, len, cudaMemcpyDeviceToHost, err);
    return rc != 0 ? rc : sync_stream(c, err);
}

static int nccl_allreduce_f32_device(fa_comm *c, float *dbuf, size_t n, void *stream,
                                     fa_error *err)
{
    cudaStream_t st = stream ? (cudaStream_t)stream : impl_of(c)->stream;
    cudaError_t e;
    int rc = reduce_dev(c, dbuf, n, 0, st, err);
    if (rc != 0)
        return rc;
    e = cudaStreamSynchronize(st);
    return e == cudaSuccess ? 0 : cuda_fail(err, e, "cudaStreamSynchronize");
}

static int nccl_allgather_size(fa_comm *c, size_t v, size_t *out, fa_error *err)
{
    fa_comm *mpi = impl_of(c)->mpi;
    return mpi->ops->allgather_size(mpi, v, out, err);
}

static int nccl_allgatherv(fa_comm *c, const void *send, size_t len, void *recv,
                           const size_t *lens, fa_error *err)
{
    nccl_impl *m = impl_of(c);
    size_t total = 0, mine = 0, off;
    ncclResult_t r, r2;
    int rc;

    for (int i = 0; i < c->size; i++) {
        if (i == c->rank)
            mine = total;
        total += lens[i];
    }
    rc = stage(c, total, err);
    if (rc == 0 && len > 0)
        rc = copy(c, (char *)m->dbuf + mine, send, len, cudaMemcpyHostToDevice, err);
    if (rc != 0)
        return rc;
    r = ncclGroupStart();
    off = 0;
    for (int i = 0; i < c->size && r == ncclSuccess; i++) {
        if (lens[i] > 0)
            r = ncclBroadcast((char *)m->dbuf + off, (char *)m->dbuf + off, lens[i], ncclUint8, i,
                              m->nccl, m->stream);
        off += lens[i];
    }
    r2 = ncclGroupEnd();
    if (r != ncclSuccess || r2 != ncclSuccess)
        return nccl_fail(err, r != ncclSuccess ? r : r2, m->nccl, "grouped ncclBroadcast");
    rc = copy(c, recv, m->dbuf, total, cudaMemcpyDeviceToHost, err);
    return rc != 0 ? rc : sync_stream(c, err);
}

static int nccl_barrier(fa_comm *c, fa_error *err)
{
    fa_comm *mpi = impl_of(c)->mpi;
    int rc = sync_stream(c, err);
    return rc != 0 ? rc : mpi->ops->barrier(mpi, err);
}

static void nccl_del(fa_comm *c)
{
    nccl_impl *m = c->impl;
    if (m) {
        if (m->nccl)
            ncclCommDestroy(m->nccl);
        if (m->stream)
            cudaStreamDestroy(m->stream);
        if (m->dbuf)
            cudaFree(m->dbuf);
        fa_comm_del(m->mpi);
        free(m);
    }
    free(c);
}

static const fa_comm_ops nccl_ops = {
    .name = "nccl",
    .kind = FA_COMM_BACKEND_NCCL,
    .bcast = nccl_bcast,
    .allreduce_f32 = nccl_allreduce_f32,
    .allgatherv = nccl_allgatherv,
    .allgather_size = nccl_allgather_size,
    .barrier = nccl_barrier,
    .allreduce_f32_device = nccl_allreduce_f32_device,
    .del = nccl_del,
};

/* Picks this rank's GPU: the (rank on this host) modulo (GPUs it sees), so
 * that one process per GPU works whether every process sees all GPUs or a
 * launcher gives each its own through CUDA_VISIBLE_DEVICES.  Then checks,
 * by PCI bus id across the ranks of this host, that no two ranks share a GPU
 * (NCCL refuses that).  Not collective beyond this host's ranks. */
static int pick_device(int ngpu, int *device, fa_error *err)
{
    MPI_Comm node;
    char bus[32], *all = NULL;
    int lrank = 0, lsize = 1, mrc, rc = 0;
    cudaError_t e;

    mrc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    if (mrc != MPI_SUCCESS)
        return fa_errorf(err, FA_ERR_MPI, "comm: MPI_Comm_split_type failed (error %d)", mrc);
    MPI_Comm_rank(node, &lrank);
    MPI_Comm_size(node, &lsize);
    *device = lrank % ngpu;
    memset(bus, 0, sizeof(bus));
    e = cudaDeviceGetPCIBusId(bus, (int)sizeof(bus) - 1, *device);
    if (e != cudaSuccess) {
        rc = cuda_fail(err, e, "cudaDeviceGetPCIBusId");
        snprintf(bus, sizeof(bus), "error-rank-%d", lrank); /* unique: no false duplicate */
    }
    all = calloc((size_t)lsize, sizeof(bus));
    if (!all) {
        MPI_Comm_free(&node);
        return fa_errorf(err, FA_ERR_NOMEM, "comm: out of memory");
    }
    mrc = MPI_Allgather(bus, (int)sizeof(bus), MPI_CHAR, all, (int)sizeof(bus), MPI_CHAR, node);
    if (mrc != MPI_SUCCESS && rc == 0)
        rc = fa_errorf(err, FA_ERR_MPI, "comm: MPI_Allgather of GPU bus ids failed (error %d)", mrc);
    for (int i = 0; i < lsize && rc == 0 && mrc == MPI_SUCCESS; i++)
        if (i != lrank && strncmp(all + (size_t)i * sizeof(bus), bus, sizeof(bus)) == 0)
            rc = fa_errorf(err, FA_ERR_NCCL,
                           "comm: ranks %d and %d of this host would share GPU %s (%d ranks, %d "
                           "GPU(s) visible to this one); NCCL needs one GPU per rank: start at "
                           "most one rank per GPU, or set device: CPU",
                           lrank, i, bus, lsize, ngpu);
    free(all);
    MPI_Comm_free(&node);
    return rc;
}

int fa_comm_nccl_new(fa_comm **out, fa_comm *mpi, int ngpu, fa_error *err)
{
    nccl_impl *m = NULL;
    fa_comm *c = NULL;
    struct {
        int status;
        ncclUniqueId id;
    } boot;
    ncclUniqueId id;
    ncclResult_t r;
    cudaError_t e;
    int device = 0, rc;
    size_t ok = 0, all_ok = 0;
    fa_error local;

    fa_error_clear(&local);
    rc = pick_device(ngpu, &device, &local);
    ok = rc == 0;
    /* Agree before anyone enters ncclCommInitRank, which would wait forever
     * for a rank that gave up. */
    {
        size_t *flags = calloc((size_t)mpi->size, sizeof(*flags));
        if (!flags) {
            fa_comm_del(mpi);
            return fa_errorf(err, FA_ERR_NOMEM, "comm: out of memory");
        }
        rc = mpi->ops->allgather_size(mpi, ok, flags, err);
        all_ok = 1;
        for (int i = 0; i < mpi->size && rc == 0; i++)
            all_ok &= flags[i] ? 1u : 0u;
        free(flags);
    }
    if (rc != 0) {
        fa_comm_del(mpi);
        return rc;
    }
    if (!all_ok) {
        fa_comm_del(mpi);
        if (local.code != 0) {
            if (err)
                *err = local;
            return local.code;
        }
        return fa_errorf(err, FA_ERR_NCCL, "comm: another rank could not set up its GPU");
    }

    m = calloc(1, sizeof(*m));
    c = fa_comm_alloc(&nccl_ops, mpi->rank, mpi->size);
    if (!m || !c) {
        free(m);
        free(c);
        fa_comm_del(mpi);
        return fa_errorf(err, FA_ERR_NOMEM, "comm: out of memory");
    }
    m->mpi = mpi;
    m->device = device;
    c->impl = m;

    e = cudaSetDevice(m->device);
    if (e != cudaSuccess) {
        rc = cuda_fail(err, e, "cudaSetDevice");
        goto fail;
    }
    e = cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        rc = cuda_fail(err, e, "cudaStreamCreate");
        goto fail;
    }
    /* Rank 0's status travels with the id, so that a failed ncclGetUniqueId
     * stops every rank instead of leaving them waiting in ncclCommInitRank. */
    memset(&boot, 0, sizeof(boot));
    if (c->rank == 0) {
        r = ncclGetUniqueId(&boot.id);
        boot.status = r == ncclSuccess ? 0 : (int)r;
    }
    rc = mpi->ops->bcast(mpi, &boot, sizeof(boot), 0, err);
    if (rc != 0)
        goto fail;
    if (boot.status != 0) {
        rc = nccl_fail(err, (ncclResult_t)boot.status, NULL, "ncclGetUniqueId on rank 0");
        goto fail;
    }
    id = boot.id;
    r = ncclCommInitRank(&m->nccl, c->size, id, c->rank);
    if (r != ncclSuccess) {
        m->nccl = NULL;
        rc = nccl_fail(err, r, NULL, "ncclCommInitRank");
        goto fail;
    }
    if (c->rank == 0) {
        int v = 0;
        ncclGetVersion(&v);
        fa_log_info("local collectives use NCCL on GPUs", "ranks=%d nccl_version=%d", c->size, v);
    }
    *out = c;
    return 0;
fail:
    fa_comm_del(c); /* frees mpi too */
    return rc;
}

#else

/* Built without CUDA: this unit is empty (ISO C wants one declaration). */
typedef int fa_comm_nccl_unused;

#endif
