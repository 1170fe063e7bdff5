/* local_round.c - one data-parallel local round across the region's ranks
 * (local_round.h): broadcast, agreement check, training with the compressed
 * all-reduce as the model's gradient hook, delta on rank 0. */
#include "worker/local_round.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/fa_log.h"
#include "config.pb-c.h"

struct fa_local_round {
    fa_comm *comm;
    fa_mlp *m;
    fa_compress *cz;
    fa_compress_config cc;
    size_t n_params;
    float *host; /* (n_params) staging of a device gradient, allocated on first use */
};

int fa_local_round_train_opts_from_proto(fa_train_opts *o, const struct Fedagg__BuiltinTrainer *pb,
                                         fa_error *err)
{
    fa_train_opts_default(o);
    if (!pb)
        return 0;
    o->epochs = pb->local_epochs;
    o->steps = pb->local_steps;
    o->batch_size = pb->batch_size;
    o->sgd.lr = (float)pb->learning_rate;
    o->sgd.momentum = (float)pb->momentum;
    o->sgd.weight_decay = (float)pb->weight_decay;
    o->seed = pb->seed;
    if (o->batch_size == 0)
        return fa_errorf(err, FA_ERR_INVAL, "trainer.builtin.batch_size must be at least 1");
    if (o->steps == 0 && o->epochs == 0)
        return fa_errorf(err, FA_ERR_INVAL,
                         "trainer.builtin: local_epochs and local_steps are both 0");
    if (!(pb->learning_rate > 0.0) || !isfinite(pb->learning_rate))
        return fa_errorf(err, FA_ERR_INVAL, "trainer.builtin.learning_rate must be > 0, not %g",
                         pb->learning_rate);
    if (!(pb->momentum >= 0.0 && pb->momentum < 1.0))
        return fa_errorf(err, FA_ERR_INVAL, "trainer.builtin.momentum must be in [0, 1), not %g",
                         pb->momentum);
    if (!(pb->weight_decay >= 0.0) || !isfinite(pb->weight_decay))
        return fa_errorf(err, FA_ERR_INVAL, "trainer.builtin.weight_decay must be >= 0, not %g",
                         pb->weight_decay);
    return 0;
}

int fa_local_round_new(fa_local_round **out, fa_comm *comm, fa_mlp *m,
                       const fa_compress_config *cc, fa_error *err)
{
    const fa_mlp_layout *l;
    fa_compress_tensor t[2 * FA_MLP_MAX_LAYERS];
    fa_local_round *lr;
    int rc;

    if (!out || !comm || !m)
        return fa_errorf(err, FA_ERR_INVAL, "local round: NULL argument");
    *out = NULL;
    l = fa_mlp_layout_of(m);
    lr = calloc(1, sizeof(*lr));
    if (!lr)
        return fa_errorf(err, FA_ERR_NOMEM, "local round: out of memory");
    lr->comm = comm;
    lr->m = m;
    lr->n_params = l->n_params;
    if (cc)
        lr->cc = *cc;
    else
        fa_compress_config_default(&lr->cc);
    fa_compress_tensors_from_layout(l, t);
    rc = fa_compress_new(&lr->cz, &lr->cc, t, l->n_tensors, l->n_params, fa_comm_rank(comm), err);
    if (rc != 0) {
        free(lr);
        return rc;
    }
    *out = lr;
    return 0;
}

void fa_local_round_del(fa_local_round *lr)
{
    if (!lr)
        return;
    fa_compress_del(lr->cz);
    free(lr->host);
    free(lr);
}

const fa_compress *fa_local_round_compressor(const fa_local_round *lr) { return lr->cz; }

/* The model's gradient hook: leaves the (compressed) sum over ranks in grads. */
static int allreduce_hook(void *user, fa_mlp *m, float *grads, size_t n, int on_device,
                          uint64_t step, fa_error *err)
{
    fa_local_round *lr = user;
    int rc;

    if (!on_device)
        return fa_compress_allreduce(lr->cz, lr->comm, grads, n, err);
    if (lr->cc.kind == FA_COMPRESS_NONE && fa_comm_on_device(lr->comm))
        return fa_comm_allreduce_sum_f32_device(lr->comm, grads, n, fa_mlp_cuda_stream(m), err);
    /* Compression runs on the host: a round trip for the gradient. */
    if (!lr->host) {
        lr->host = malloc(n * sizeof(float));
        if (!lr->host)
            return fa_errorf(err, FA_ERR_NOMEM, "local round: out of memory");
    }
    if ((rc = fa_mlp_grads_to_host(m, lr->host, err)) != 0 ||
        (rc = fa_compress_allreduce(lr->cz, lr->comm, lr->host, n, err)) != 0)
        return rc;
    return fa_mlp_grads_from_host(m, lr->host, err);
}

/* Every rank learns whether any rank failed (a max-reduction of a flag), so
 * that all return an error together instead of some waiting forever. */
static int agree(fa_comm *comm, int rc, fa_error *err)
{
    float flag = rc != 0 ? 1.0f : 0.0f;
    fa_error tmp;
    int crc = fa_comm_allreduce_max_f32(comm, &flag, 1, &tmp);
    if (crc != 0) {
        if (err)
            *err = tmp;
        return crc;
    }
    if (rc != 0)
        return rc;
    if (flag != 0.0f)
        return fa_errorf(err, FA_ERR_STATE,
                         "local round: another rank of this region failed (see its log)");
    return 0;
}

/* What every rank must agree on, as rank 0 has it. */
typedef struct round_shape {
    uint64_t ok, n_params, n_examples, dim, epochs, steps, batch, seed, kind, world;
} round_shape;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int fa_local_round_run(fa_local_round *lr, const float *global, const fa_dataset *shard,
                       const fa_train_opts *opts, float *delta, fa_local_round_result *res,
                       fa_error *err)
{
    const int rank = fa_comm_rank(lr->comm), world = fa_comm_size(lr->comm);
    const size_t np = lr->n_params;
    round_shape mine, root;
    fa_train_opts o;
    fa_train_result tr;
    fa_comm_stats before, after;
    float *w = NULL, *d = NULL, loss;
    double t0 = now_s();
    int rc = 0;

    if (!shard || !opts || (rank == 0 && (!global || !delta)))
        rc = fa_errorf(err, FA_ERR_INVAL,
                       "local round: NULL %s", !shard ? "shard" : !opts ? "options" : "global or delta on rank 0");

    /* 1. Same shard, model and options everywhere? */
    memset(&mine, 0, sizeof(mine));
    if (rc == 0) {
        mine = (round_shape){1, np,           shard->n,   shard->dim,         opts->epochs,
                             opts->steps,  opts->batch_size, opts->seed, (uint64_t)lr->cc.kind,
                             (uint64_t)world};
    }
    root = mine;
    {
        int brc = fa_comm_bcast(lr->comm, &root, sizeof(root), 0, err);
        if (brc != 0)
            return brc;
    }
    /* (a rank 0 that failed already says so through agree() below) */
    if (rc == 0 && root.ok && memcmp(&mine, &root, sizeof(mine)) != 0)
        rc = fa_errorf(err, FA_ERR_INVAL,
                       "local round: rank %d has %llu examples of dim %llu, %llu parameters, "
                       "epochs %llu, steps %llu, batch %llu, seed %llu, compression %llu; rank 0 "
                       "has %llu, %llu, %llu, %llu, %llu, %llu, %llu, %llu: every rank needs "
                       "the region's same shard and config",
                       rank, (unsigned long long)mine.n_examples, (unsigned long long)mine.dim,
                       (unsigned long long)mine.n_params, (unsigned long long)mine.epochs,
                       (unsigned long long)mine.steps, (unsigned long long)mine.batch,
                       (unsigned long long)mine.seed, (unsigned long long)mine.kind,
                       (unsigned long long)root.n_examples, (unsigned long long)root.dim,
                       (unsigned long long)root.n_params, (unsigned long long)root.epochs,
                       (unsigned long long)root.steps, (unsigned long long)root.batch,
                       (unsigned long long)root.seed, (unsigned long long)root.kind);
    if (rc == 0) {
        w = malloc(np * sizeof(float));
        d = malloc(np * sizeof(float));
        if (!w || !d)
            rc = fa_errorf(err, FA_ERR_NOMEM, "local round: out of memory for %zu parameters", np);
    }
    if ((rc = agree(lr->comm, rc, err)) != 0)
        goto out;

    /* 2. The global weights, from the leader to every rank. */
    if (rank == 0)
        memcpy(w, global, np * sizeof(float));
    if ((rc = fa_comm_bcast(lr->comm, w, np * sizeof(float), 0, err)) != 0)
        goto out;

    /* 3. Train: every rank its slice of each global batch. */
    o = *opts;
    o.rank = (uint32_t)rank;
    o.world = (uint32_t)world;
    o.allreduce = allreduce_hook;
    o.allreduce_user = lr;
    fa_comm_stats_get(lr->comm, &before);
    rc = fa_train_local_round(lr->m, w, shard, &o, d, &tr, err);
    fa_comm_stats_get(lr->comm, &after);
    if (rc != 0) {
        fa_log_error("local round failed", "rank=%d code=%d", rank, rc);
        goto out;
    }

    /* 4. Nothing that is not finite leaves the region. */
    for (size_t i = 0; i < np; i++)
        if (!isfinite(d[i])) {
            rc = fa_errorf(err, FA_ERR_RANGE,
                           "local round: parameter %zu of the delta is not finite after %llu "
                           "steps (training diverged; lower the learning rate)",
                           i, (unsigned long long)tr.steps);
            break;
        }
    loss = (float)tr.mean_loss;
    if ((rc = agree(lr->comm, rc, err)) != 0 ||
        (rc = fa_comm_allreduce_sum_f32(lr->comm, &loss, 1, err)) != 0)
        goto out;

    if (rank == 0)
        memcpy(delta, d, np * sizeof(float));
    if (res) {
        res->num_examples = tr.num_examples;
        res->steps = tr.steps;
        res->mean_loss = loss / (float)world;
        res->payload_bytes = after.payload_bytes - before.payload_bytes;
        res->wire_bytes = after.wire_bytes - before.wire_bytes;
        res->seconds = now_s() - t0;
    }
out:
    free(w);
    free(d);
    return rc;
}
