/* train.c - the built-in trainer's loop (see train.h for the contract). */
#include "model/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/rng.h"

void fa_train_opts_default(fa_train_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->epochs = 1;
    o->batch_size = 64;
    o->sgd.lr = 0.05f;
    o->sgd.momentum = 0.9f;
    o->sgd.weight_decay = 0.0f;
    o->lr_schedule = FA_LR_CONSTANT;
    o->seed = 1;
    o->world = 1;
}

/* Learning rate of step t of T. */
static float lr_at(const fa_train_opts *o, uint64_t t, uint64_t T)
{
    if (t < o->warmup_steps)
        return o->sgd.lr * (float)(t + 1) / (float)o->warmup_steps;
    if (o->lr_schedule == FA_LR_COSINE && T > o->warmup_steps) {
        double p = (double)(t - o->warmup_steps) / (double)(T - o->warmup_steps);
        return (float)(o->sgd.lr * 0.5 * (1.0 + cos(M_PI * p)));
    }
    return o->sgd.lr;
}

static int check_opts(fa_mlp *m, const fa_dataset *d, const fa_train_opts *o, fa_error *err)
{
    const fa_mlp_config *c = &fa_mlp_layout_of(m)->config;
    const uint32_t C = c->dims[c->n_layers];

    if (d->n == 0)
        return fa_errorf(err, FA_ERR_INVAL, "train: empty data set");
    if (d->dim != c->dims[0])
        return fa_errorf(err, FA_ERR_INVAL, "train: data has %u features, the model takes %u",
                         d->dim, c->dims[0]);
    if (o->batch_size == 0)
        return fa_errorf(err, FA_ERR_INVAL, "train: batch size 0");
    if (o->world == 0 || o->rank >= o->world)
        return fa_errorf(err, FA_ERR_INVAL, "train: rank %u of %u", o->rank, o->world);
    if (o->steps == 0 && o->epochs == 0)
        return fa_errorf(err, FA_ERR_INVAL, "train: neither epochs nor steps given");
    if (o->lr_schedule != FA_LR_CONSTANT && o->lr_schedule != FA_LR_COSINE)
        return fa_errorf(err, FA_ERR_INVAL, "train: unknown learning-rate schedule %d",
                         o->lr_schedule);
    for (uint32_t i = 0; i < d->n; i++)
        if (d->y[i] >= C)
            return fa_errorf(err, FA_ERR_INVAL,
                             "train: label %u of example %u is not below the model's %u classes",
                             d->y[i], i, C);
    return 0;
}

int fa_train_run(fa_mlp *m, const fa_dataset *data, const fa_train_opts *o,
                 fa_train_result *res, fa_error *err)
{
    const uint32_t n = data->n, dim = data->dim, B = o->batch_size;
    uint64_t steps_per_epoch, total, perm_epoch = UINT64_MAX;
    fa_train_pos pos = {0};
    uint32_t *perm = NULL, part_max;
    float *xb = NULL;   /* (part_max, dim) this rank's part of the batch */
    uint8_t *yb = NULL; /* (part_max) */
    int rc;

    if ((rc = check_opts(m, data, o, err)) != 0)
        return rc;
    steps_per_epoch = (n + (uint64_t)B - 1) / B;
    total = o->steps ? o->steps : (uint64_t)o->epochs * steps_per_epoch;
    if (o->resume) {
        if (o->resume->step > total)
            return fa_errorf(err, FA_ERR_INVAL,
                             "train: resuming at step %llu of a run of %llu steps",
                             (unsigned long long)o->resume->step, (unsigned long long)total);
        pos = *o->resume;
    }
    part_max = (uint32_t)(((uint64_t)(B < n ? B : n) + o->world - 1) / o->world);
    perm = malloc((size_t)n * sizeof(*perm));
    xb = malloc((size_t)part_max * dim * sizeof(float));
    yb = malloc(part_max ? part_max : 1);
    if (!perm || !xb || !yb) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "train: out of memory");
        goto out;
    }

    /* Step t is batch s = t mod steps_per_epoch of epoch t / steps_per_epoch. */
    for (;; pos.step++) {
        const uint64_t t = pos.step, epoch = t / steps_per_epoch, s = t % steps_per_epoch;

        if (o->boundary) {
            rc = o->boundary(o->boundary_user, m, &pos, total, err);
            if (rc == FA_TRAIN_STOP)
                rc = fa_errorf(err, FA_ERR_CANCELLED, "train: stopped at step %llu of %llu",
                               (unsigned long long)t, (unsigned long long)total);
            if (rc != 0)
                goto out;
        }
        if (t == total)
            break;
        if (epoch != perm_epoch) {
            /* The same permutation on every rank: seeded by (seed, epoch). */
            fa_rng rng;
            fa_rng_seed(&rng, o->seed, epoch);
            for (uint32_t i = 0; i < n; i++)
                perm[i] = i;
            fa_rng_shuffle_u32(&rng, perm, n);
            perm_epoch = epoch;
        }
        if (s == 0) {
            pos.pass_loss = 0.0;
            pos.pass_count = 0;
        }

        /* Global batch [b0, b0 + bn) of perm; this rank's part [lo, hi). */
        const uint32_t b0 = (uint32_t)(s * B), bn = n - b0 < B ? n - b0 : B;
        const uint32_t lo = b0 + (uint32_t)((uint64_t)bn * o->rank / o->world);
        const uint32_t hi = b0 + (uint32_t)((uint64_t)bn * (o->rank + 1) / o->world);
        fa_mlp_stats st;

        for (uint32_t i = lo; i < hi; i++) {
            memcpy(xb + (size_t)(i - lo) * dim, data->x + (size_t)perm[i] * dim,
                   dim * sizeof(float));
            yb[i - lo] = data->y[perm[i]];
        }
        /* grads = (1/bn) sum over this rank's part */
        if ((rc = fa_mlp_forward_backward(m, xb, yb, hi - lo, bn, &st, err)) != 0)
            goto out;
        /* grads = sum over ranks: the gradient of the batch mean loss */
        if (o->allreduce) {
            int on_device;
            float *g = fa_mlp_grads(m, &on_device);
            if ((rc = o->allreduce(o->allreduce_user, m, g, fa_mlp_layout_of(m)->n_params,
                                   on_device, t, err)) != 0)
                goto out;
        }
        fa_sgd sgd = o->sgd;
        sgd.lr = lr_at(o, t, total);
        if ((rc = fa_mlp_sgd_step(m, &sgd, err)) != 0)
            goto out;

        pos.samples += bn;
        pos.pass_loss += st.loss_sum;
        pos.pass_count += st.n;
        if (o->report && o->steps && o->report_every && (t + 1) % o->report_every == 0 &&
            t + 1 < total &&
            (rc = o->report(o->report_user, m, (uint32_t)epoch, t + 1,
                            pos.pass_count ? pos.pass_loss / pos.pass_count : 0.0, err)) != 0)
            goto out;
        /* End of an epoch, or of the run. */
        if (o->report && (s + 1 == steps_per_epoch || t + 1 == total) &&
            (!o->steps || t + 1 == total) &&
            (rc = o->report(o->report_user, m, (uint32_t)(epoch + 1), t + 1,
                            pos.pass_count ? pos.pass_loss / pos.pass_count : 0.0, err)) != 0)
            goto out;
    }

    if (res) {
        res->steps = pos.step;
        res->samples = pos.samples;
        res->num_examples = o->steps ? (pos.samples < n ? pos.samples : n) : n;
        res->mean_loss = pos.pass_count ? pos.pass_loss / pos.pass_count : 0.0;
    }
out:
    free(perm);
    free(xb);
    free(yb);
    return rc;
}

int fa_train_local_round(fa_mlp *m, const float *global, const fa_dataset *data,
                         const fa_train_opts *opts, float *delta, fa_train_result *res,
                         fa_error *err)
{
    const size_t np = fa_mlp_layout_of(m)->n_params;
    int rc;

    if (!opts->resume && ((rc = fa_mlp_set_params(m, global, err)) != 0 ||
                          (rc = fa_mlp_reset_momentum(m, err)) != 0))
        return rc;
    if ((rc = fa_train_run(m, data, opts, res, err)) != 0 ||
        (rc = fa_mlp_get_params(m, delta, err)) != 0)
        return rc;
    /* delta = w_local - w_global */
    for (size_t i = 0; i < np; i++)
        delta[i] -= global[i];
    return 0;
}
