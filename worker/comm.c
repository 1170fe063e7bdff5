/* comm.c - backend selection, argument checks and byte counting of fa_comm.
 * The collectives themselves live in comm_mpi.c, comm_nccl.c, comm_local.c. */
#include "worker/comm_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fa_log.h"

fa_comm *fa_comm_alloc(const fa_comm_ops *ops, int rank, int size)
{
    fa_comm *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->ops = ops;
    c->rank = rank;
    c->size = size;
    return c;
}

/* Every rank learns the smallest of the ranks' v. */
static int agree_min(fa_comm *c, size_t v, size_t *out, fa_error *err)
{
    size_t *all = calloc((size_t)c->size, sizeof(*all));
    int rc;
    if (!all)
        return fa_errorf(err, FA_ERR_NOMEM, "comm: out of memory");
    rc = c->ops->allgather_size(c, v, all, err);
    if (rc == 0) {
        *out = all[0];
        for (int i = 1; i < c->size; i++)
            if (all[i] < *out)
                *out = all[i];
    }
    free(all);
    return rc;
}

int fa_comm_new(fa_comm **out, int device, fa_error *err)
{
    fa_comm *mpi = NULL;
    int rc;

    if (!out)
        return fa_errorf(err, FA_ERR_INVAL, "comm: NULL output");
    *out = NULL;
    if (device < FA_COMM_DEVICE_AUTO || device > FA_COMM_DEVICE_GPU)
        return fa_errorf(err, FA_ERR_INVAL, "comm: device %d is not AUTO, CPU or GPU", device);
    rc = fa_comm_mpi_new(&mpi, err);
    if (rc != 0)
        return rc;
    if (device == FA_COMM_DEVICE_CPU) {
        *out = mpi;
        return 0;
    }
#ifdef FA_HAVE_CUDA
    {
        char why[160] = "";
        int ngpu = 0;
        size_t all_have = 0;
        fa_comm_nccl_probe(&ngpu, why, sizeof(why));
        rc = agree_min(mpi, ngpu > 0 ? 1 : 0, &all_have, err);
        if (rc != 0) {
            fa_comm_del(mpi);
            return rc;
        }
        if (all_have) {
            /* fa_comm_nccl_new owns mpi from here on, on success and failure. */
            return fa_comm_nccl_new(out, mpi, ngpu, err);
        }
        if (mpi->rank == 0 || ngpu == 0) {
            char q[200];
            fa_log(device == FA_COMM_DEVICE_GPU ? FA_LOG_WARN : FA_LOG_INFO,
                   "no GPU device; local collectives use MPI on CPU", "device=%s rank=%d reason=%s",
                   device == FA_COMM_DEVICE_GPU ? "GPU" : "AUTO", mpi->rank,
                   fa_log_quote(q, sizeof(q),
                                ngpu == 0 ? why : "another rank of this region has no GPU"));
        }
    }
#else
    {
        size_t ignored;
        /* Keep the same collective sequence as a CUDA build, so that mixed
         * builds in one job still agree. */
        rc = agree_min(mpi, 0, &ignored, err);
        if (rc != 0) {
            fa_comm_del(mpi);
            return rc;
        }
        if (mpi->rank == 0)
            fa_log(device == FA_COMM_DEVICE_GPU ? FA_LOG_WARN : FA_LOG_INFO,
                   "no GPU device; local collectives use MPI on CPU",
                   "device=%s reason=\"built without CUDA/NCCL (FEDAGG_CUDA=OFF)\"",
                   device == FA_COMM_DEVICE_GPU ? "GPU" : "AUTO");
    }
#endif
    *out = mpi;
    return 0;
}

void fa_comm_del(fa_comm *c)
{
    if (!c)
        return;
    c->ops->del(c);
}

int fa_comm_rank(const fa_comm *c) { return c->rank; }
int fa_comm_size(const fa_comm *c) { return c->size; }
int fa_comm_backend(const fa_comm *c) { return c->ops->kind; }
const char *fa_comm_backend_name(const fa_comm *c) { return c->ops->name; }
int fa_comm_on_device(const fa_comm *c) { return c->ops->kind == FA_COMM_BACKEND_NCCL; }

void fa_comm_stats_get(const fa_comm *c, fa_comm_stats *out) { *out = c->stats; }
void fa_comm_stats_reset(fa_comm *c) { memset(&c->stats, 0, sizeof(c->stats)); }

/* Ring all-reduce: reduce-scatter then all-gather, each (p-1)/p of B. */
static void count_allreduce(fa_comm *c, size_t bytes)
{
    c->stats.collectives++;
    c->stats.payload_bytes += bytes;
    if (c->size > 1)
        c->stats.wire_bytes += 2 * (uint64_t)bytes * (uint64_t)(c->size - 1) / (uint64_t)c->size;
}

int fa_comm_bcast(fa_comm *c, void *buf, size_t len, int root, fa_error *err)
{
    if (root < 0 || root >= c->size)
        return fa_errorf(err, FA_ERR_INVAL, "comm: broadcast root %d outside 0..%d", root,
                         c->size - 1);
    if (len > 0 && !buf)
        return fa_errorf(err, FA_ERR_INVAL, "comm: broadcast of %zu bytes from NULL", len);
    c->stats.collectives++;
    if (c->rank == root)
        c->stats.payload_bytes += len;
    /* A pipelined chain root -> root+1 -> ...: all but the last rank send. */
    if (c->size > 1 && (c->rank - root + c->size) % c->size != c->size - 1)
        c->stats.wire_bytes += len;
    if (c->size == 1 || len == 0)
        return 0;
    return c->ops->bcast(c, buf, len, root, err);
}

int fa_comm_allreduce_sum_f32(fa_comm *c, float *buf, size_t n, fa_error *err)
{
    if (n > 0 && !buf)
        return fa_errorf(err, FA_ERR_INVAL, "comm: all-reduce of %zu floats from NULL", n);
    count_allreduce(c, n * sizeof(float));
    if (c->size == 1 || n == 0)
        return 0;
    return c->ops->allreduce_f32(c, buf, n, 0, err);
}

int fa_comm_allreduce_max_f32(fa_comm *c, float *buf, size_t n, fa_error *err)
{
    if (n > 0 && !buf)
        return fa_errorf(err, FA_ERR_INVAL, "comm: all-reduce of %zu floats from NULL", n);
    count_allreduce(c, n * sizeof(float));
    if (c->size == 1 || n == 0)
        return 0;
    return c->ops->allreduce_f32(c, buf, n, 1, err);
}

int fa_comm_allreduce_sum_f32_device(fa_comm *c, float *dbuf, size_t n, void *cuda_stream,
                                     fa_error *err)
{
    if (!c->ops->allreduce_f32_device)
        return fa_errorf(err, FA_ERR_UNSUPPORTED,
                         "comm: the %s backend has no device-memory all-reduce", c->ops->name);
    if (n > 0 && !dbuf)
        return fa_errorf(err, FA_ERR_INVAL, "comm: all-reduce of %zu floats from NULL", n);
    count_allreduce(c, n * sizeof(float));
    if (c->size == 1 || n == 0)
        return 0;
    return c->ops->allreduce_f32_device(c, dbuf, n, cuda_stream, err);
}

int fa_comm_allgatherv(fa_comm *c, const void *send, size_t len, void *recv, size_t cap,
                       size_t *lens, fa_error *err)
{
    size_t total = 0;
    int rc;

    if ((len > 0 && !send) || !lens || (cap > 0 && !recv))
        return fa_errorf(err, FA_ERR_INVAL, "comm: all-gather with a NULL buffer");
    if (c->size == 1) {
        lens[0] = len;
    } else {
        rc = c->ops->allgather_size(c, len, lens, err);
        if (rc != 0)
            return rc;
    }
    for (int i = 0; i < c->size; i++) {
        if (lens[i] > SIZE_MAX - total)
            return fa_errorf(err, FA_ERR_TOOBIG, "comm: all-gather total overflows");
        total += lens[i];
    }
    /* Every rank sees the same lens, so every rank takes this branch alike. */
    if (total > cap)
        return fa_errorf(err, FA_ERR_TOOBIG,
                         "comm: all-gather of %zu bytes does not fit the %zu-byte buffer", total,
                         cap);
    c->stats.collectives++;
    c->stats.payload_bytes += len;
    if (c->size > 1)
        c->stats.wire_bytes += total - lens[(c->rank + 1) % c->size];
    if (c->size == 1) {
        if (len > 0)
            memmove(recv, send, len);
        return 0;
    }
    return c->ops->allgatherv(c, send, len, recv, lens, err);
}

int fa_comm_barrier(fa_comm *c, fa_error *err)
{
    if (c->size == 1)
        return 0;
    return c->ops->barrier(c, err);
}
