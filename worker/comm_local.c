/* comm_local.c - the LOCAL backend of fa_comm: n ranks as n threads of one
 * process, meeting at a barrier and reading each other's buffers.  Used by
 * tests and simulations to run multi-rank code (compressors, error feedback)
 * without mpirun.  Reductions add the ranks in rank order, so every rank gets
 * the same bits, as with MPI. */
#include "worker/comm_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct local_hub {
    pthread_barrier_t barrier;
    pthread_mutex_t lock;
    int n;
    int refs;
    const void **ptr; /* rank i's posted buffer */
    size_t *len;      /* rank i's posted length */
} local_hub;

typedef struct local_impl {
    local_hub *hub;
} local_impl;

static local_hub *hub_of(fa_comm *c) { return ((local_impl *)c->impl)->hub; }

static void post(fa_comm *c, const void *p, size_t len)
{
    local_hub *h = hub_of(c);
    h->ptr[c->rank] = p;
    h->len[c->rank] = len;
    pthread_barrier_wait(&h->barrier);
}

static void done(fa_comm *c) { pthread_barrier_wait(&hub_of(c)->barrier); }

static int local_bcast(fa_comm *c, void *buf, size_t len, int root, fa_error *err)
{
    local_hub *h = hub_of(c);
    post(c, buf, len);
    if (c->rank != root)
        memcpy(buf, h->ptr[root], len);
    done(c);
    return 0;
}

static int local_allreduce_f32(fa_comm *c, float *buf, size_t n, int is_max, fa_error *err)
{
    local_hub *h = hub_of(c);
    float *tmp = malloc(n * sizeof(float));
    int failed = tmp == NULL;

    post(c, buf, n);
    if (tmp) {
        memcpy(tmp, h->ptr[0], n * sizeof(float));
        for (int r = 1; r < h->n; r++) {
            const float *x = h->ptr[r];
            if (is_max) {
                for (size_t i = 0; i < n; i++)
                    tmp[i] = x[i] > tmp[i] ? x[i] : tmp[i];
            } else {
                for (size_t i = 0; i < n; i++)
                    tmp[i] += x[i];
            }
        }
    }
    done(c); /* everyone has read every buffer */
    if (tmp)
        memcpy(buf, tmp, n * sizeof(float));
    free(tmp);
    return failed ? fa_errorf(err, FA_ERR_NOMEM, "comm: out of memory") : 0;
}

static int local_allgather_size(fa_comm *c, size_t v, size_t *out, fa_error *err)
{
    local_hub *h = hub_of(c);
    post(c, NULL, v);
    memcpy(out, h->len, (size_t)h->n * sizeof(size_t));
    done(c);
    return 0;
}

static int local_allgatherv(fa_comm *c, const void *send, size_t len, void *recv,
                            const size_t *lens, fa_error *err)
{
    local_hub *h = hub_of(c);
    size_t off = 0;
    post(c, send, len);
    for (int r = 0; r < h->n; r++) {
        if (lens[r] > 0)
            memcpy((char *)recv + off, h->ptr[r], lens[r]);
        off += lens[r];
    }
    done(c);
    return 0;
}

static int local_barrier(fa_comm *c, fa_error *err)
{
    done(c);
    return 0;
}

static void hub_release(local_hub *h)
{
    int last;
    pthread_mutex_lock(&h->lock);
    last = --h->refs == 0;
    pthread_mutex_unlock(&h->lock);
    if (!last)
        return;
    pthread_barrier_destroy(&h->barrier);
    pthread_mutex_destroy(&h->lock);
    free(h->ptr);
    free(h->len);
    free(h);
}

static void local_del(fa_comm *c)
{
    local_impl *l = c->impl;
    if (l) {
        hub_release(l->hub);
        free(l);
    }
    free(c);
}

static const fa_comm_ops local_ops = {
    .name = "local",
    .kind = FA_COMM_BACKEND_LOCAL,
    .bcast = local_bcast,
    .allreduce_f32 = local_allreduce_f32,
    .allgatherv = local_allgatherv,
    .allgather_size = local_allgather_size,
    .barrier = local_barrier,
    .allreduce_f32_device = NULL,
    .del = local_del,
};

int fa_comm_local_group_new(fa_comm **comms, int n, fa_error *err)
{
    local_hub *h;
    int i;

    if (!comms || n < 1 || n > 4096)
        return fa_errorf(err, FA_ERR_INVAL, "comm: a local group needs 1..4096 ranks, not %d", n);
    h = calloc(1, sizeof(*h));
    if (!h)
        return fa_errorf(err, FA_ERR_NOMEM, "comm: out of memory");
    h->n = n;
    h->ptr = calloc((size_t)n, sizeof(*h->ptr));
    h->len = calloc((size_t)n, sizeof(*h->len));
    if (!h->ptr || !h->len || pthread_barrier_init(&h->barrier, NULL, (unsigned)n) != 0) {
        free(h->ptr);
        free(h->len);
        free(h);
        return fa_errorf(err, FA_ERR_NOMEM, "comm: cannot create a local group of %d", n);
    }
    pthread_mutex_init(&h->lock, NULL);
    for (i = 0; i < n; i++) {
        local_impl *l = calloc(1, sizeof(*l));
        comms[i] = fa_comm_alloc(&local_ops, i, n);
        if (!l || !comms[i]) {
            free(l);
            free(comms[i]);
            break;
        }
        l->hub = h;
        comms[i]->impl = l;
        h->refs++;
    }
    if (i < n) {
        int made = i;
        if (made == 0) {
            h->refs = 1; /* release below frees the hub */
            hub_release(h);
        }
        for (int j = 0; j < made; j++) {
            fa_comm_del(comms[j]);
            comms[j] = NULL;
        }
        return fa_errorf(err, FA_ERR_NOMEM, "comm: out of memory");
    }
    return 0;
}
