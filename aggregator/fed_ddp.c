/* fed_ddp.c - distributed differential privacy on the secure sum
 * (config.proto DistributedDp, docs/privacy.md): the parameters the
 * federation publishes, the decoding of a round's noisy ring sum into the
 * mean delta, and the aggregator's region-level account of the rounds.
 *
 * The aggregator only ever sees the sum, with the noise of every region in
 * it; it adds none itself.  What it accounts (the audit record's DdpRound)
 * is the guarantee of the sum it actually unmasked: the noise of the
 * participants of the round (each added its share), against one region's
 * update replaced by zero (sensitivity B).  A round with fewer participants
 * than min_regions carries less noise than the regions charged themselves
 * for: it is logged as a warning and recorded with its true count.  The
 * account is rebuilt from the log at open (fa_fed_ddp_replay), so it
 * survives restarts without a file of its own. */
#include "aggregator/federation_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/fa_log.h"
#include "privacy/accountant.h"

int fa_fed_ddp_open(fa_fed *f, const Fedagg__AggregatorConfig *cfg, fa_error *err)
{
    const Fedagg__DistributedDp *c = cfg->distributed_dp;
    fa_ddg_config dc;
    int rc;

    f->ddp_on = 0;
    if (!c || !c->enabled)
        return 0;
    memset(&dc, 0, sizeof(dc));
    dc.clip = c->clip;
    dc.noise_multiplier = c->noise_multiplier;
    dc.min_regions = c->min_regions   ? c->min_regions
                     : f->min_regions ? f->min_regions
                                      : f->threshold;
    dc.max_regions = (uint32_t)f->n_regions;
    dc.bits = c->bits;
    dc.beta = c->beta;
    dc.beta_wrap = c->beta_wrap;
    dc.dim = f->d;
    if (!(c->delta > 0 && c->delta <= 0.1))
        return fa_errorf(err, FA_ERR_INVAL, "config: distributed_dp.delta %g must be in (0, 0.1]",
                         c->delta);
    if (dc.min_regions > f->threshold)
        fa_log(FA_LOG_WARN,
               "distributed DP: min_regions is above the secure-aggregation threshold; a round "
               "with fewer participants completes with less noise than charged (recorded)",
               "min_regions=%u threshold=%u", dc.min_regions, f->threshold);
    if ((rc = fa_ddg_derive(&f->ddp, &dc, err)) != 0)
        return fa_error_prefix(err, rc, "config");
    if ((rc = fa_rdp_accountant_new(&f->ddp_acc, NULL, 0, err)) != 0)
        return rc;
    f->ddp_delta = c->delta;
    fa_ddg_rotation_seed(f->federation_id, f->ddp_seed);
    f->ddp_on = 1;
    fa_log(FA_LOG_INFO, "distributed DP on the secure sum",
           "clip=%g noise_multiplier=%g min_regions=%u max_regions=%u bits=%u granularity=%.6g "
           "sigma2=%.6g l2_bound=%.2f padded_dim=%" PRIu64 " ring_bits=%u",
           dc.clip, dc.noise_multiplier, dc.min_regions, dc.max_regions, dc.bits, f->ddp.gamma,
           f->ddp.sigma2, f->ddp.bound, f->ddp.padded, f->ddp.ring_bits);
    return 0;
}

void fa_fed_ddp_free(fa_fed *f)
{
    fa_rdp_accountant_del(f->ddp_acc);
    f->ddp_acc = NULL;
    free(f->ddp_mean);
    f->ddp_mean = NULL;
}

void fa_fed_ddp_params_pb(const fa_fed *f, Fedagg__DdpParams *out)
{
    const fa_ddg_params *p = &f->ddp;
    fedagg__ddp_params__init(out);
    out->clip = p->cfg.clip;
    out->noise_multiplier = p->cfg.noise_multiplier;
    out->min_regions = p->cfg.min_regions;
    out->bits = p->cfg.bits;
    out->beta = p->cfg.beta;
    out->beta_wrap = p->cfg.beta_wrap;
    out->max_regions = p->cfg.max_regions;
    out->granularity = p->gamma;
    out->sigma2 = p->sigma2;
    out->l2_bound = p->bound;
    out->padded_dim = p->padded;
    out->ring_bits = p->ring_bits;
}

/* The accountant's parameters of a round with `noisy` regions' noise. */
static fa_rdp_ddg_params round_params(double bound, double sigma2, uint32_t noisy, uint64_t dim)
{
    fa_rdp_ddg_params rp;
    memset(&rp, 0, sizeof(rp));
    rp.l2_sens = bound;
    rp.sigma2 = sigma2;
    rp.n_regions = noisy;
    rp.dim = dim;
    return rp;
}

/* One recorded round into the account: the accountant and the figures the
 * metrics and the status show. */
static int account_round(fa_fed *f, const fa_rdp_ddg_params *rp, const Fedagg__DdpRound *r,
                         fa_error *err)
{
    int rc = fa_rdp_accountant_compose_ddg(f->ddp_acc, rp, 1, err);
    if (rc != 0)
        return rc;
    f->ddp_rounds++;
    f->ddp_eps_total = r->epsilon_total;
    f->ddp_noisy = r->noisy_contributions;
    return 0;
}

int fa_fed_ddp_replay(fa_fed *f, const Fedagg__AuditRecord *r, fa_error *err)
{
    fa_rdp_ddg_params rp;
    int rc;
    if (!f->ddp_on || !r->ddp || !r->ddp->params || r->ddp->noisy_contributions == 0)
        return 0;
    rp = round_params(r->ddp->params->l2_bound, r->ddp->params->sigma2, r->ddp->noisy_contributions,
                      r->ddp->params->padded_dim);
    rc = account_round(f, &rp, r->ddp, err);
    return rc != 0
               ? fa_error_prefix(err, rc, "audit log: round %" PRIu64 "'s distributed DP", r->round)
               : 0;
}

int fa_fed_ddp_round(fa_fed *f, Fedagg__DdpRound *out, Fedagg__DdpParams *params, fa_error *err)
{
    const double *orders, *spent;
    size_t n = fa_rdp_accountant_orders(f->ddp_acc, &orders, &spent);
    uint32_t noisy = (uint32_t)fa_secagg_server_survivor_count(f->sa);
    fa_rdp_ddg_params rp = round_params(f->ddp.bound, f->ddp.sigma2, noisy, f->ddp.padded);
    fa_rdp_accountant *one = NULL, *all = NULL;
    double er = 0, et = 0;
    int rc;

    fa_fed_ddp_params_pb(f, params);
    fedagg__ddp_round__init(out);
    if ((rc = fa_rdp_accountant_new(&one, orders, n, err)) != 0 ||
        (rc = fa_rdp_accountant_compose_ddg(one, &rp, 1, err)) != 0 ||
        (rc = fa_rdp_accountant_epsilon(one, f->ddp_delta, FA_RDP_CONVERSION_TIGHT, &er, NULL,
                                        err)) != 0 ||
        (rc = fa_rdp_accountant_new(&all, orders, n, err)) != 0 ||
        (rc = fa_rdp_accountant_compose_rdp(all, spent, n, 1, err)) != 0 ||
        (rc = fa_rdp_accountant_compose_ddg(all, &rp, 1, err)) != 0 ||
        (rc = fa_rdp_accountant_epsilon(all, f->ddp_delta, FA_RDP_CONVERSION_TIGHT, &et, NULL,
                                        err)) != 0) {
        fa_error_prefix(err, rc, "distributed DP: the round's epsilon");
        goto out;
    }
    out->params = params;
    out->noisy_contributions = noisy;
    out->epsilon_round = er;
    out->epsilon_total = et;
    out->delta = f->ddp_delta;
    out->rounds_accounted = f->ddp_rounds + 1;
out:
    fa_rdp_accountant_del(one);
    fa_rdp_accountant_del(all);
    return rc;
}

int fa_fed_ddp_recorded(fa_fed *f, const Fedagg__DdpRound *r, fa_error *err)
{
    fa_rdp_ddg_params rp =
        round_params(f->ddp.bound, f->ddp.sigma2, r->noisy_contributions, f->ddp.padded);
    int rc = account_round(f, &rp, r, err);
    if (rc != 0)
        return rc;
    fa_log(r->noisy_contributions < f->ddp.cfg.min_regions ? FA_LOG_WARN : FA_LOG_INFO,
           r->noisy_contributions < f->ddp.cfg.min_regions
               ? "distributed DP: fewer regions' noise in the sum than the regions charged for; "
                 "recorded with its true count"
               : "distributed DP accounted",
           "round=%" PRIu64 " noisy_contributions=%u min_regions=%u epsilon_round=%.4f "
           "epsilon_total=%.4f delta=%g rounds=%" PRIu64,
           f->round, r->noisy_contributions, f->ddp.cfg.min_regions, r->epsilon_round,
           r->epsilon_total, r->delta, f->ddp_rounds);
    return 0;
}

int fa_fed_ddp_decode(fa_fed *f, double *count_out, fa_error *err)
{
    const size_t n = (size_t)fa_ddg_vector_len(&f->ddp);
    uint32_t survivors = (uint32_t)fa_secagg_server_survivor_count(f->sa), count = 0;
    uint32_t *sum = malloc(n * sizeof(*sum));
    int rc;

    free(f->ddp_mean);
    f->ddp_mean = malloc((n - 1) * sizeof(float));
    if (!sum || !f->ddp_mean) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "distributed DP: out of memory decoding the sum");
        goto out;
    }
    if ((rc = fa_secagg_server_result_ring(f->sa, sum, n, err)) != 0 ||
        (rc = fa_ddg_decode(&f->ddp, sum, f->ddp_seed, f->round, survivors, f->ddp_mean, &count,
                            err)) != 0)
        goto out;
    /* The mean is over the participants.  Every region counts itself once:
     * a sum that says otherwise holds a region's malformed count. */
    if (count != survivors)
        fa_log(FA_LOG_WARN,
               "distributed DP: the sum's count coordinate differs from the participants; "
               "the mean is over the participants",
               "round=%" PRIu64 " count=%u participants=%u", f->round, count, survivors);
    *count_out = survivors;
out:
    if (rc != 0) {
        free(f->ddp_mean);
        f->ddp_mean = NULL;
    }
    free(sum);
    return rc;
}
