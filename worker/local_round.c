/* local_round.c - one data-parallel local round across the region's ranks
 * (local_round.h): broadcast, agreement check, training with the compressed
 * all-reduce as the model's gradient hook, delta on rank 0. */
#include "worker/local_round.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "common/fa_log.h"
#include "common/fa_time.h"
#include "config.pb-c.h"
#include "worker/local_checkpoint.h"

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

/* What every rank must agree on, as rank 0 has it (dp: the bits of DP-SGD's
 * sampling rate, 0 without it). */
typedef struct round_shape {
    uint64_t ok, n_params, n_examples, dim, epochs, steps, batch, seed, kind, world, dp;
} round_shape;

/* ---------------------------------------------------------------------- */
/* Preemption and periodic checkpoints                                      */
/* ---------------------------------------------------------------------- */

/* A run's checkpointing (the boundary hook's user). */
typedef struct ckpt_run {
    fa_local_round *lr;
    const fa_local_round_ckpt *ck;
    fa_local_ckpt_key key;
    uint64_t start_step; /* 0, or the step resumed at */
    double last_save;    /* rank 0's clock */
    uint32_t saves;
    int stopped; /* stopped at stop_step; save_rc: whether its save worked */
    uint64_t stop_step;
    int save_rc;
    fa_error save_err;
    fa_comm_stats ctl; /* sent by the control collectives: not the gradient's */
} ckpt_run;

static double ckpt_now(const fa_local_round_ckpt *ck)
{
    return ck->now ? ck->now(ck->now_user) : fa_time_mono_s();
}

/* A collective of the checkpointing, its traffic counted apart. */
static int ctl_max(ckpt_run *x, float *v, fa_error *err)
{
    fa_comm_stats a, b;
    int rc;
    fa_comm_stats_get(x->lr->comm, &a);
    rc = fa_comm_allreduce_max_f32(x->lr->comm, v, 1, err);
    fa_comm_stats_get(x->lr->comm, &b);
    x->ctl.payload_bytes += b.payload_bytes - a.payload_bytes;
    x->ctl.wire_bytes += b.wire_bytes - a.wire_bytes;
    return rc;
}

static int ctl_bcast(ckpt_run *x, void *buf, size_t len, fa_error *err)
{
    fa_comm_stats a, b;
    int rc;
    fa_comm_stats_get(x->lr->comm, &a);
    rc = fa_comm_bcast(x->lr->comm, buf, len, 0, err);
    fa_comm_stats_get(x->lr->comm, &b);
    x->ctl.payload_bytes += b.payload_bytes - a.payload_bytes;
    x->ctl.wire_bytes += b.wire_bytes - a.wire_bytes;
    return rc;
}

/* Between two steps: every rank learns whether any was asked to stop (2) or
 * rank 0's clock says a periodic save is due (1), and all act alike. */
static int boundary_hook(void *user, fa_mlp *m, const fa_train_pos *pos, uint64_t total,
                         fa_error *err)
{
    ckpt_run *x = user;
    const fa_local_round_ckpt *ck = x->ck;
    const int rank = fa_comm_rank(x->lr->comm);
    float flag = 0.0f;
    double t0;
    int rc;

    if (ck->on_boundary)
        ck->on_boundary(ck->on_boundary_user, pos->step);
    if (ck->stop && *ck->stop)
        flag = 2.0f;
    t0 = ckpt_now(ck);
    if (flag == 0.0f && rank == 0 && ck->every_s > 0 && pos->step > x->start_step &&
        pos->step < total && t0 - x->last_save >= ck->every_s)
        flag = 1.0f;
    if (fa_comm_size(x->lr->comm) > 1 && (rc = ctl_max(x, &flag, err)) != 0)
        return rc;
    /* The finished round is kept too: a worker stopped after training but
     * before the round client has saved its attempt (advertising, sharing
     * keys: network waits a signal ends at once) resumes it in no steps. */
    if (flag == 0.0f && pos->step == total && pos->step > x->start_step)
        flag = 1.0f;
    if (flag == 0.0f)
        return FA_TRAIN_GO_ON;

    fa_error_clear(&x->save_err);
    rc = fa_local_ckpt_save(ck->path, &x->key, pos, total, m, x->lr->cz, &x->save_err);
    if (rc == 0) {
        x->saves++;
        fa_log(flag == 2.0f ? FA_LOG_INFO : FA_LOG_DEBUG,
               flag == 2.0f ? "local round saved to stop" : "local round saved",
               "rank=%d step=%" PRIu64 " steps=%" PRIu64 " seconds=%.3f file=%s", rank, pos->step,
               total, ckpt_now(ck) - t0, ck->path);
    }
    if (rc != 0) {
        char q[600];
        fa_log(flag == 2.0f ? FA_LOG_ERROR : FA_LOG_WARN,
               flag == 2.0f ? "cannot save the local round to stop; a restart trains it afresh"
                            : "cannot save the local round; training goes on",
               "rank=%d step=%" PRIu64 " error=%s", rank, pos->step,
               fa_log_quote(q, sizeof(q), fa_error_msg(&x->save_err, rc)));
    }
    if (flag == 2.0f) {
        x->stopped = 1;
        x->stop_step = pos->step;
        x->save_rc = rc;
        return FA_TRAIN_STOP;
    }
    x->last_save = ckpt_now(ck);
    return FA_TRAIN_GO_ON;
}

/* Feeds one value of the setup into the digest. */
static void setup_u64(crypto_generichash_state *h, uint64_t v)
{
    crypto_generichash_update(h, (const unsigned char *)&v, sizeof(v));
}

static uint64_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static uint64_t f64_bits(double f)
{
    uint64_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

/* Everything besides the starting weights that the update depends on. */
static int setup_digest(const fa_local_round *lr, const fa_dataset *shard, const fa_train_opts *o,
                        const fa_local_round_ckpt *ck, uint8_t out[FA_LOCAL_CKPT_DIGEST])
{
    static const char label[] = "fedagg local round setup 1";
    const fa_mlp_config *mc = &fa_mlp_layout_of(lr->m)->config;
    const fa_compress_config *cc = &lr->cc;
    uint8_t sd[FA_LOCAL_CKPT_DIGEST];
    crypto_generichash_state h;

    if (ck->shard_digest)
        memcpy(sd, ck->shard_digest, sizeof(sd));
    else if (fa_local_ckpt_digest_shard(shard, sd) != 0)
        return FA_ERR_CRYPTO;
    if (crypto_generichash_init(&h, NULL, 0, FA_LOCAL_CKPT_DIGEST) != 0)
        return FA_ERR_CRYPTO;
    crypto_generichash_update(&h, (const unsigned char *)label, sizeof(label));
    setup_u64(&h, lr->n_params);
    setup_u64(&h, mc->n_layers);
    for (uint32_t i = 0; i <= mc->n_layers && i <= FA_MLP_MAX_LAYERS; i++)
        setup_u64(&h, mc->dims[i]);
    setup_u64(&h, (uint64_t)fa_mlp_backend(lr->m));
    setup_u64(&h, (uint64_t)fa_comm_size(lr->comm));
    setup_u64(&h, o->epochs);
    setup_u64(&h, o->steps);
    setup_u64(&h, o->batch_size);
    setup_u64(&h, f32_bits(o->sgd.lr));
    setup_u64(&h, f32_bits(o->sgd.momentum));
    setup_u64(&h, f32_bits(o->sgd.weight_decay));
    setup_u64(&h, (uint64_t)o->lr_schedule);
    setup_u64(&h, o->warmup_steps);
    setup_u64(&h, o->seed);
    setup_u64(&h, (uint64_t)cc->kind);
    setup_u64(&h, cc->powersgd_rank);
    setup_u64(&h, cc->powersgd_start_step);
    setup_u64(&h, cc->min_compress_numel);
    setup_u64(&h, f64_bits(cc->topk_fraction));
    setup_u64(&h, (uint64_t)cc->error_feedback);
    setup_u64(&h, (uint64_t)cc->warm_start);
    setup_u64(&h, cc->seed);
    /* DP-SGD's parameters (not its key: a resumed round gets a fresh one) */
    setup_u64(&h, o->dp != NULL);
    if (o->dp) {
        setup_u64(&h, f64_bits(o->dp->sampling_rate));
        setup_u64(&h, f64_bits(o->dp->clip));
        setup_u64(&h, f64_bits(o->dp->noise_multiplier));
        setup_u64(&h, o->dp->noise_rank);
    }
    setup_u64(&h, shard->n);
    setup_u64(&h, shard->dim);
    crypto_generichash_update(&h, sd, sizeof(sd));
    return crypto_generichash_final(&h, out, FA_LOCAL_CKPT_DIGEST) == 0 ? 0 : FA_ERR_CRYPTO;
}

/* Collective: the key of this round on every rank (rank 0's round, model
 * and starting weights w), then each rank's saved round, resumed when every
 * rank has one at the same step.  *resumed and *pos say so.  Files that do
 * not fit are removed. */
static int try_resume(ckpt_run *x, const float *w, const fa_dataset *shard, const fa_train_opts *o,
                      int *resumed, fa_train_pos *pos, fa_error *err)
{
    fa_local_round *lr = x->lr;
    const fa_local_round_ckpt *ck = x->ck;
    const int rank = fa_comm_rank(lr->comm), world = fa_comm_size(lr->comm);
    fa_local_ckpt *saved = NULL;
    fa_local_ckpt_key found;
    uint64_t mine[2] = {0, 0}, root[2];
    float bad;
    fa_error e;
    int rc = 0, lrc;

    *resumed = 0;
    memset(&x->key, 0, sizeof(x->key));
    if (rank == 0) {
        x->key.round = ck->round;
        x->key.attempt = ck->attempt;
        x->key.version = ck->version;
        memcpy(x->key.model_sha256, ck->model_sha256, 32);
        if (fa_local_ckpt_digest_floats(w, lr->n_params, x->key.start_digest) != 0)
            rc = fa_errorf(err, FA_ERR_CRYPTO, "local round: BLAKE2b failed");
    }
    if ((rc = agree(lr->comm, rc, err)) != 0 ||
        (rc = ctl_bcast(x, &x->key, sizeof(x->key), err)) != 0)
        return rc;
    x->key.rank = (uint32_t)rank;
    x->key.world = (uint32_t)world;
    x->key.n_params = lr->n_params;
    if (setup_digest(lr, shard, o, ck, x->key.setup_digest) != 0)
        rc = fa_errorf(err, FA_ERR_CRYPTO, "local round: BLAKE2b failed");
    if ((rc = agree(lr->comm, rc, err)) != 0)
        return rc;

    fa_error_clear(&e);
    memset(&found, 0, sizeof(found));
    lrc = fa_local_ckpt_load(&saved, ck->path, &x->key, lr->cz, &found, &e);
    if (lrc != 0 && lrc != FA_ERR_NOTFOUND) {
        /* An earlier round's (kept when it finished) is the usual case. */
        int earlier = lrc == FA_ERR_REPLAY && found.round < x->key.round;
        char q[600];
        fa_log(earlier                ? FA_LOG_DEBUG
               : lrc == FA_ERR_REPLAY ? FA_LOG_INFO
                                      : FA_LOG_WARN,
               earlier ? "an earlier round's saved local round is removed"
                       : "saved local round refused; it is removed and the round is trained "
                         "afresh",
               "rank=%d round=%" PRIu64 " version=%" PRIu64 " error=%s", rank, x->key.round,
               x->key.version, fa_log_quote(q, sizeof(q), fa_error_msg(&e, lrc)));
        if (unlink(ck->path) != 0 && errno != ENOENT)
            fa_log(FA_LOG_WARN, "cannot remove the refused saved local round", "file=%s error=%s",
                   ck->path, strerror(errno));
    }
    if (saved) {
        mine[0] = 1;
        mine[1] = fa_local_ckpt_pos(saved)->step;
    }
    memcpy(root, mine, sizeof(root));
    if ((rc = ctl_bcast(x, root, sizeof(root), err)) != 0)
        goto out;
    bad = !saved || !root[0] || root[1] != mine[1] ? 1.0f : 0.0f;
    if ((rc = ctl_max(x, &bad, err)) != 0)
        goto out;
    if (bad != 0.0f) {
        if (saved) {
            fa_log(FA_LOG_WARN,
                   "the region's ranks do not all have this saved local round at the same step; "
                   "the round is trained afresh",
                   "rank=%d step=%" PRIu64 " file=%s", rank, mine[1], ck->path);
            unlink(ck->path);
        }
        goto out;
    }
    rc = fa_local_ckpt_apply(saved, lr->m, lr->cz, err);
    if ((rc = agree(lr->comm, rc, err)) != 0)
        goto out;
    *pos = *fa_local_ckpt_pos(saved);
    *resumed = 1;
    fa_log(FA_LOG_INFO, "saved local round resumed",
           "rank=%d round=%" PRIu64 " version=%" PRIu64 " step=%" PRIu64 " steps=%" PRIu64
           " saved_attempt=%u attempt=%u",
           rank, x->key.round, x->key.version, pos->step, fa_local_ckpt_total(saved),
           fa_local_ckpt_attempt(saved), x->key.attempt);
out:
    fa_local_ckpt_del(saved);
    return rc;
}

int fa_local_round_run(fa_local_round *lr, const float *global, const fa_dataset *shard,
                       const fa_train_opts *opts, float *delta, fa_local_round_result *res,
                       fa_error *err)
{
    return fa_local_round_run_resumable(lr, global, shard, opts, NULL, delta, res, err);
}

int fa_local_round_run_resumable(fa_local_round *lr, const float *global, const fa_dataset *shard,
                                 const fa_train_opts *opts, const fa_local_round_ckpt *ck,
                                 float *delta, fa_local_round_result *res, fa_error *err)
{
    const int rank = fa_comm_rank(lr->comm), world = fa_comm_size(lr->comm);
    const size_t np = lr->n_params;
    round_shape mine, root;
    fa_train_opts o;
    fa_train_result tr;
    fa_comm_stats before, after;
    ckpt_run x;
    fa_train_pos pos;
    fa_train_dp dp;
    float *w = NULL, *d = NULL, stats[2];
    double t0 = fa_time_mono_s();
    int rc = 0, resumed = 0;

    if (ck && !ck->path)
        ck = NULL;
    memset(&x, 0, sizeof(x));
    x.lr = lr;
    x.ck = ck;
    if (!shard || !opts || (rank == 0 && (!global || !delta)))
        rc = fa_errorf(err, FA_ERR_INVAL,
                       "local round: NULL %s", !shard ? "shard" : !opts ? "options" : "global or delta on rank 0");

    /* 1. Same shard, model and options everywhere? */
    memset(&mine, 0, sizeof(mine));
    if (rc == 0) {
        mine = (round_shape){1, np,           shard->n,   shard->dim,         opts->epochs,
                             opts->steps,  opts->batch_size, opts->seed, (uint64_t)lr->cc.kind,
                             (uint64_t)world, opts->dp ? f64_bits(opts->dp->sampling_rate) : 0};
    }
    /* With compression each rank's part is compressed before the sum; the
     * noise (rank 0's) would then not cover the others' parts: the update
     * would not be a post-processing of the noisy sum the accountant
     * charges for. */
    if (rc == 0 && opts->dp && world > 1 && lr->cc.kind != FA_COMPRESS_NONE)
        rc = fa_errorf(err, FA_ERR_INVAL,
                       "local round: DP-SGD over %d ranks needs compression NONE: each rank's "
                       "part would be compressed before the noise is in the sum",
                       world);
    root = mine;
    {
        int brc = fa_comm_bcast(lr->comm, &root, sizeof(root), 0, err);
        if (brc != 0)
            return brc;
    }
    /* (a rank 0 that failed already says so through agree() below) */
    if (rc == 0 && root.ok && mine.dp != root.dp)
        rc = fa_errorf(err, FA_ERR_INVAL,
                       "local round: rank %d and rank 0 disagree on DP-SGD (sampling rate bits "
                       "%016llx and %016llx): every rank needs the region's same config",
                       rank, (unsigned long long)mine.dp, (unsigned long long)root.dp);
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

    /* 2b. DP-SGD: rank 0's fresh key for the run, to every rank (the
     * Poisson samples must agree; only rank 0 adds noise). */
    memset(&dp, 0, sizeof(dp));
    if (opts->dp) {
        dp = *opts->dp;
        dp.noise_rank = 0;
        if ((rc = fa_comm_bcast(lr->comm, dp.key, sizeof(dp.key), 0, err)) != 0)
            goto out;
    }

    /* 3. A saved round of this very round, on every rank? */
    if (ck && (rc = try_resume(&x, w, shard, opts, &resumed, &pos, err)) != 0)
        goto out;

    /* 4. Train: every rank its slice of each global batch. */
    o = *opts;
    o.rank = (uint32_t)rank;
    o.world = (uint32_t)world;
    o.allreduce = allreduce_hook;
    o.allreduce_user = lr;
    o.resume = resumed ? &pos : NULL;
    o.dp = opts->dp ? &dp : NULL;
    if (ck) {
        o.boundary = boundary_hook;
        o.boundary_user = &x;
        x.start_step = resumed ? pos.step : 0;
        x.last_save = ckpt_now(ck);
        memset(&x.ctl, 0, sizeof(x.ctl));
    }
    fa_comm_stats_get(lr->comm, &before);
    rc = fa_train_local_round(lr->m, w, shard, &o, d, &tr, err);
    fa_comm_stats_get(lr->comm, &after);
    if (rc == FA_ERR_CANCELLED && x.stopped) {
        /* every rank stopped at the same step (the flag is agreed on) */
        if (x.save_rc == 0)
            rc = fa_errorf(err, FA_ERR_CANCELLED,
                           "local round stopped at step %" PRIu64 "; it is saved in %s and a "
                           "restarted worker resumes it",
                           x.stop_step, ck->path);
        else
            rc = fa_errorf(err, FA_ERR_CANCELLED,
                           "local round stopped at step %" PRIu64 " but could not be saved (%s); "
                           "a restarted worker trains it afresh",
                           x.stop_step, fa_error_msg(&x.save_err, x.save_rc));
        goto out;
    }
    if (rc != 0) {
        fa_log_error("local round failed", "rank=%d code=%d", rank, rc);
        goto out;
    }

    /* 5. Nothing that is not finite leaves the region. */
    for (size_t i = 0; i < np; i++)
        if (!isfinite(d[i])) {
            rc = fa_errorf(err, FA_ERR_RANGE,
                           "local round: parameter %zu of the delta is not finite after %llu "
                           "steps (training diverged; lower the learning rate)",
                           i, (unsigned long long)tr.steps);
            break;
        }
    stats[0] = (float)tr.mean_loss;
    stats[1] = (float)tr.clipped;
    if ((rc = agree(lr->comm, rc, err)) != 0 ||
        (rc = fa_comm_allreduce_sum_f32(lr->comm, stats, 2, err)) != 0)
        goto out;

    if (rank == 0)
        memcpy(delta, d, np * sizeof(float));
    if (res) {
        res->num_examples = tr.num_examples;
        res->steps = tr.steps;
        res->mean_loss = stats[0] / (float)world;
        res->samples = tr.samples;
        res->clipped = (uint64_t)stats[1];
        res->payload_bytes = after.payload_bytes - before.payload_bytes - x.ctl.payload_bytes;
        res->wire_bytes = after.wire_bytes - before.wire_bytes - x.ctl.wire_bytes;
        res->seconds = fa_time_mono_s() - t0;
        res->resumed = resumed;
        res->resumed_step = resumed ? pos.step : 0;
        res->saves = x.saves;
    }
out:
    sodium_memzero(&dp, sizeof(dp));
    free(w);
    free(d);
    return rc;
}
