/* round_privacy.c - a federation worker's differential privacy, round by
 * round (round_privacy.h). */
#include "worker/round_privacy.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fa_log.h"
#include "worker/ddp.h"
#include "worker/privacy_state.h"

struct fa_round_privacy {
    const Fedagg__WorkerConfig *cfg;
    int external, ddg;
    fa_privacy_spend spend; /* built-in: DP-SGD's round; ddg: the federation's, once known */
    int have_spend;
    fa_agent_link *link;     /* the agent's accountant, or */
    fa_privacy_state *state; /* the worker's own */
    int dirty;               /* own: charged in memory, not yet on disk: nothing leaves */
    fa_worker_metrics *m;
    uint64_t exhausted_round; /* the round last refused for the budget (said once); UINT64_MAX */
    fa_agent_privacy_res res; /* the last answer: the numbers, this federation's last release */
    /* the statement handed out, its strings ours (the next answer replaces res) */
    Fedagg__PrivacyStatement st;
    char st_mechanism[FA_PRIVACY_MECHANISM_MAX], st_accountant[64], st_unit[32];
};

/* The statement of the last answer, kept in p until the next one. */
static void keep_statement(fa_round_privacy *p, Fedagg__PrivacyStatement *st)
{
    p->st = p->res.st;
    snprintf(p->st_mechanism, sizeof(p->st_mechanism), "%s",
             p->st.mechanism ? p->st.mechanism : "");
    snprintf(p->st_accountant, sizeof(p->st_accountant), "%s",
             p->st.accountant ? p->st.accountant : "");
    snprintf(p->st_unit, sizeof(p->st_unit), "%s", p->st.unit ? p->st.unit : "");
    p->st.mechanism = p->st_mechanism;
    p->st.accountant = p->st_accountant;
    p->st.unit = p->st_unit;
    p->st.federation_id = p->st.region = ""; /* the round client sets its own */
    *st = p->st;
}

static void log_err(const char *msg, int rc, const char *detail)
{
    char q[700];
    fa_log(FA_LOG_ERROR, msg, "error=%s",
           fa_log_quote(q, sizeof(q), detail && *detail ? detail : fa_strerror(rc)));
}

/* ---- the accountant, either one --------------------------------------- */

/* The worker's own accountant, answering as the agent's would. */
static int ask_own(fa_round_privacy *p, const fa_agent_privacy_req *q, fa_agent_privacy_res *r)
{
    fa_privacy_budget *b = fa_privacy_state_budget(p->state);
    const fa_privacy_release *l = fa_privacy_budget_last(b);
    fa_error e;
    int rc = 0;

    memset(r, 0, sizeof(*r));
    fa_error_clear(&e);
    if (q->op == FA_AGENT_PRIVACY_PREVIEW) {
        const fa_privacy_spend *sp = q->have_spend ? &q->spend : l ? &l->spend : NULL;
        if (sp)
            rc = fa_privacy_budget_preview(b, sp, &r->eps_round, &r->eps_total, &e);
        else if (!(fa_privacy_budget_epsilon(b) < fa_privacy_budget_target_epsilon(b)))
            rc = fa_errorf(&e, FA_ERR_RANGE, "privacy budget exhausted: epsilon %.4g spent of %g",
                           fa_privacy_budget_epsilon(b), fa_privacy_budget_target_epsilon(b));
    } else if (q->op == FA_AGENT_PRIVACY_CHARGE) {
        rc = fa_privacy_budget_charge(b, &q->spend, q->round, q->version, q->digest, &r->charged,
                                      &e);
        if (rc == 0 && (r->charged || p->dirty)) {
            /* the charge is on disk before the update can leave */
            p->dirty = 1;
            if ((rc = fa_privacy_state_save(p->state, &e)) != 0)
                fa_error_prefix(&e, rc,
                                "cannot save the privacy accountant; nothing is uploaded "
                                "until it is saved");
            else
                p->dirty = 0;
        }
        if (rc == 0)
            rc = fa_privacy_budget_statement(b, q->round, q->attempt, &r->st, &e);
    } else {
        rc = fa_privacy_budget_statement(b, q->round, q->attempt, &r->st, &e);
    }
    if (rc != 0)
        snprintf(r->msg, sizeof(r->msg), "%s", fa_error_msg(&e, rc));
    r->rc = rc;
    r->spent = fa_privacy_budget_epsilon(b);
    r->budget = fa_privacy_budget_target_epsilon(b);
    r->delta = fa_privacy_budget_delta(b);
    r->rounds = fa_privacy_budget_rounds(b);
    l = fa_privacy_budget_last(b);
    if ((r->have_last = l != NULL))
        r->last = *l;
    if (rc == 0 && q->op == FA_AGENT_PRIVACY_CHARGE) {
        r->eps_round = l->epsilon_round;
        r->eps_total = l->epsilon_total;
    }
    return rc;
}

/* One question to the budget; p->res holds the answer and the numbers. */
static int ask(fa_round_privacy *p, fa_agent_privacy_op op, const fa_privacy_spend *sp,
               uint64_t round, uint32_t attempt, uint64_t version, const uint8_t digest[32])
{
    fa_agent_privacy_req q;
    fa_agent_privacy_res r;
    fa_error e;
    int rc;

    memset(&q, 0, sizeof(q));
    q.op = op;
    if (sp) {
        q.have_spend = 1;
        q.spend = *sp;
    }
    q.round = round;
    q.attempt = attempt;
    q.version = version;
    if (digest)
        memcpy(q.digest, digest, 32);
    if (p->link) {
        rc = fa_agent_link_privacy(p->link, &q, &r, &e);
        if (rc != 0 && !r.msg[0])
            snprintf(r.msg, sizeof(r.msg), "the region agent: %s", fa_error_msg(&e, rc));
        if (rc == FA_ERR_IO || rc == FA_ERR_PROTOCOL) { /* no answer: keep the numbers */
            r.spent = p->res.spent;
            r.budget = p->res.budget;
            r.delta = p->res.delta;
            r.rounds = p->res.rounds;
            r.have_last = p->res.have_last;
            r.last = p->res.last;
        }
    } else {
        rc = ask_own(p, &q, &r);
    }
    p->res = r;
    p->m->privacy_epsilon = r.spent;
    p->m->privacy_budget = r.budget;
    return rc;
}

/* The spend the next round is expected to have: the built-in trainer's,
 * the federation's distributed DP, or what the external trainer's last
 * round reported (NULL: none known yet). */
static const fa_privacy_spend *next_spend(const fa_round_privacy *p)
{
    if (p->have_spend)
        return &p->spend;
    if (p->external && p->res.have_last)
        return &p->res.last.spend;
    return NULL;
}

/* The budget would be exceeded: said once per round, in the log and the
 * metrics; what happens next is the config's. */
static fa_round_privacy_verdict exhausted(fa_round_privacy *p, uint64_t round, const char *what,
                                          const char *detail)
{
    const int stop = p->cfg->privacy->on_exhausted == FEDAGG__PRIVACY_EXHAUSTED__PRIVACY_STOP;
    char q[700];

    p->m->privacy_exhausted = 1;
    if (p->exhausted_round != round || stop) {
        fa_log(FA_LOG_WARN, what,
               "round=%" PRIu64 " epsilon_spent=%.4f budget=%g delta=%g rounds_accounted=%" PRIu64
               " on_exhausted=%s detail=%s",
               round, p->res.spent, p->res.budget, p->res.delta, p->res.rounds,
               stop ? "PRIVACY_STOP" : "PRIVACY_SKIP", fa_log_quote(q, sizeof(q), detail));
        p->exhausted_round = round;
    }
    if (stop) {
        fa_log(FA_LOG_INFO,
               "privacy budget exhausted: the worker stops (privacy.on_exhausted PRIVACY_STOP)",
               "round=%" PRIu64, round);
        return FA_PRIV_STOP;
    }
    return FA_PRIV_SKIP;
}

/* privacy.mechanism "ddg": the round's spend from the federation's
 * distributed DP (worker/ddp.h), which it must have; else the round is
 * sat out (said once per round). */
static int ddg_spend(fa_round_privacy *p, const Fedagg__FederationInfo *info)
{
    fa_ddg_params dp;
    fa_error e;
    int rc;

    fa_error_clear(&e);
    if (!info->ddp)
        rc = fa_errorf(&e, FA_ERR_PROTOCOL,
                       "privacy.mechanism is \"ddg\" but the federation has no distributed_dp: "
                       "the update would leave without the noise the budget accounts");
    else if ((rc = fa_ddp_params(&dp, info, &e)) == 0)
        fa_ddp_spend(&dp, &p->spend);
    if (rc == 0) {
        p->have_spend = 1;
        return 0;
    }
    if (p->exhausted_round != info->round)
        log_err("distributed DP cannot be accounted; this region does not train or upload this "
                "round",
                rc, fa_error_msg(&e, rc));
    p->exhausted_round = info->round;
    return rc;
}

/* The external trainer's report as a spend, or why it cannot be accounted. */
static int external_spend(const fa_round_privacy *p, const fa_trainer_privacy *x,
                          fa_privacy_spend *sp, fa_error *err)
{
    const double target = p->cfg->privacy->target_epsilon, delta = p->cfg->privacy->target_delta;

    memset(sp, 0, sizeof(*sp));
    if (!x || !x->present)
        return fa_errorf(err, FA_ERR_INVAL,
                         "the external trainer reported no \"privacy\" object; with privacy "
                         "configured only updates whose cost is known leave the region "
                         "(docs/trainer-contract.md, Privacy)");
    if (strcmp(x->mechanism, FA_PRIVACY_MECHANISM_DPSGD) != 0)
        return fa_errorf(err, FA_ERR_INVAL,
                         "the external trainer's mechanism \"%s\" cannot be accounted (only "
                         "\"%s\": DP-SGD with Poisson sampling)",
                         x->mechanism, FA_PRIVACY_MECHANISM_DPSGD);
    if (isnan(x->noise_multiplier) || isnan(x->sampling_rate) || x->steps == 0 || isnan(x->clip))
        return fa_errorf(err, FA_ERR_INVAL,
                         "the external trainer's privacy report lacks noise_multiplier, "
                         "sampling_rate, steps or clip (all four are needed to account a "
                         "DP-SGD round)");
    if (!isnan(x->delta) && x->delta > delta)
        return fa_errorf(err, FA_ERR_INVAL,
                         "the external trainer accounts at delta %g, above the region's %g",
                         x->delta, delta);
    if (!isnan(x->epsilon) && x->epsilon > target)
        return fa_errorf(err, FA_ERR_RANGE,
                         "privacy budget exhausted: the external trainer's own accounting "
                         "(%s) says epsilon %.4g, beyond the budget of %g",
                         x->accountant[0] ? x->accountant : "unnamed", x->epsilon, target);
    snprintf(sp->mechanism, sizeof(sp->mechanism), "%s", x->mechanism);
    sp->noise_multiplier = x->noise_multiplier;
    sp->clip = x->clip;
    sp->sampling_rate = x->sampling_rate;
    sp->steps = x->steps;
    return 0;
}

/* ---- the checks --------------------------------------------------------- */

int fa_round_privacy_dpsgd(const Fedagg__WorkerPrivacy *p, const fa_train_opts *t,
                           uint64_t examples, int world, int compressed, fa_train_dp *dpo,
                           fa_privacy_spend *spend, fa_error *err)
{
    double q = p->sampling_rate;

    if (q == 0.0)
        q = examples ? (double)t->batch_size / (double)examples : 1.0;
    if (q > 1.0)
        q = 1.0;
    memset(dpo, 0, sizeof(*dpo));
    dpo->sampling_rate = q;
    dpo->clip = p->clip;
    dpo->noise_multiplier = p->noise_multiplier;
    memset(spend, 0, sizeof(*spend));
    snprintf(spend->mechanism, sizeof(spend->mechanism), "%s", FA_PRIVACY_MECHANISM_DPSGD);
    spend->noise_multiplier = p->noise_multiplier;
    spend->clip = p->clip;
    spend->sampling_rate = q;
    spend->steps = t->steps ? t->steps : (uint64_t)t->epochs * fa_train_dp_steps_per_pass(q);
    if (world > 1 && compressed)
        return fa_errorf(err, FA_ERR_INVAL,
                         "privacy: DP-SGD over %d ranks needs compression { kind: NONE } (each "
                         "rank's part would be compressed before rank 0's noise is in the sum)",
                         world);
    return 0;
}

int fa_round_privacy_new(fa_round_privacy **out, const fa_round_privacy_opts *o, fa_error *err)
{
    const Fedagg__WorkerConfig *cfg = o->cfg;
    const char *mech = cfg->privacy->mechanism;
    fa_round_privacy *p;
    int created = 0, rc;

    *out = NULL;
    p = calloc(1, sizeof(*p));
    if (!p)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    p->cfg = cfg;
    p->external = o->external;
    p->ddg = mech && !strcmp(mech, FA_PRIVACY_MECHANISM_DDG);
    p->link = o->link;
    p->m = o->metrics;
    p->exhausted_round = UINT64_MAX;
    if (o->builtin && !p->ddg) {
        p->spend = *o->builtin;
        p->have_spend = 1;
    }
    if (!p->link && (rc = fa_privacy_state_open(&p->state, cfg, &created, err)) != 0)
        goto fail;
    /* what is spent, and this federation's last release */
    rc = ask(p, FA_AGENT_PRIVACY_PREVIEW, next_spend(p), 0, 0, 0, NULL);
    if (rc != 0 && rc != FA_ERR_RANGE) {
        rc = fa_errorf(err, rc, "privacy: %s", p->res.msg);
        goto fail;
    }
    p->m->privacy_exhausted = rc == FA_ERR_RANGE;
    /* one budget, one unit: example-level DP-SGD and region-level DDG do
     * not add up to a bound of either (the agent checks its datasets' own) */
    if (p->res.have_last &&
        (strcmp(p->res.last.spend.mechanism, FA_PRIVACY_MECHANISM_DDG) == 0) != p->ddg) {
        rc = fa_errorf(err, FA_ERR_INVAL,
                       "privacy: the accountant %s accounts mechanism \"%s\", this config says "
                       "privacy.mechanism \"%s\": a budget keeps one mechanism and unit; use "
                       "another state directory",
                       p->state ? fa_privacy_state_path(p->state) : "of the region agent",
                       p->res.last.spend.mechanism,
                       p->ddg ? FA_PRIVACY_MECHANISM_DDG : FA_PRIVACY_MECHANISM_DPSGD);
        goto fail;
    }
    fa_log(FA_LOG_INFO, "differential privacy on",
           "accountant=%s %s epsilon_spent=%.4f budget=%g delta=%g rounds_accounted=%" PRIu64
           " mechanism=%s noise_multiplier=%g clip=%g sampling_rate=%g steps_per_round=%" PRIu64
           " epsilon_per_round=%.4f",
           p->state ? fa_privacy_state_path(p->state) : "agent",
           p->link   ? "(the region agent's, shared by its federations on the dataset)"
           : created ? "(new)"
                     : "(restored)",
           p->res.spent, p->res.budget, p->res.delta, p->res.rounds,
           p->ddg        ? FA_PRIVACY_MECHANISM_DDG
           : p->external ? "reported-by-trainer"
                         : FA_PRIVACY_MECHANISM_DPSGD,
           p->have_spend ? p->spend.noise_multiplier : NAN, p->have_spend ? p->spend.clip : NAN,
           p->have_spend ? p->spend.sampling_rate : NAN, p->have_spend ? p->spend.steps : 0,
           p->have_spend ? p->res.eps_round : NAN);
    *out = p;
    return 0;
fail:
    fa_round_privacy_del(p);
    return rc;
}

void fa_round_privacy_del(fa_round_privacy *p)
{
    if (!p)
        return;
    fa_privacy_state_del(p->state);
    free(p);
}

int fa_round_privacy_stop_at_start(fa_round_privacy *p)
{
    if (p->m->privacy_exhausted != 1 ||
        p->cfg->privacy->on_exhausted != FEDAGG__PRIVACY_EXHAUSTED__PRIVACY_STOP)
        return 0;
    exhausted(p, 0, "privacy budget exhausted at start",
              "privacy budget exhausted: the next round would exceed it");
    return 1;
}

fa_round_privacy_verdict fa_round_privacy_gate(fa_round_privacy *p,
                                               const Fedagg__FederationInfo *info)
{
    int rc;

    if (p->ddg && ddg_spend(p, info) != 0)
        return FA_PRIV_SKIP;
    rc = ask(p, FA_AGENT_PRIVACY_PREVIEW, next_spend(p), 0, 0, 0, NULL);
    /* The update of this round and model may already be paid for (a
     * restarted worker resuming its finished round): the charge decides. */
    if (p->res.have_last && p->res.last.round == info->round &&
        p->res.last.version == info->model_version)
        return FA_PRIV_GO;
    if (rc == 0) {
        p->m->privacy_exhausted = 0;
        return FA_PRIV_GO;
    }
    if (rc != FA_ERR_RANGE) {
        log_err("cannot ask the privacy budget; this region does not train this round", rc,
                p->res.msg);
        return FA_PRIV_SKIP;
    }
    return exhausted(p, info->round,
                     "privacy budget exhausted: this region does not train or upload this round",
                     p->res.msg);
}

fa_round_privacy_verdict
fa_round_privacy_charge(fa_round_privacy *p, const Fedagg__FederationInfo *info, const float *delta,
                        size_t d, uint64_t *delta_version, const fa_trainer_privacy *xpriv,
                        Fedagg__PrivacyStatement *st)
{
    fa_privacy_spend sp;
    uint8_t digest[32];
    char q[64];
    fa_error e;
    int rc;

    fa_error_clear(&e);
    if (p->ddg) {
        if (ddg_spend(p, info) != 0) {
            *delta_version = UINT64_MAX;
            return FA_PRIV_SKIP;
        }
        sp = p->spend;
    } else if (p->external) {
        rc = external_spend(p, xpriv, &sp, &e);
        if (rc == FA_ERR_RANGE) {
            *delta_version = UINT64_MAX;
            return exhausted(p, info->round,
                             "privacy budget exhausted: the trained update is not uploaded",
                             fa_error_msg(&e, rc));
        }
        if (rc != 0) {
            log_err("the external trainer's round cannot be accounted; it is not uploaded", rc,
                    fa_error_msg(&e, rc));
            *delta_version = UINT64_MAX;
            p->m->round_failures_total++;
            return FA_PRIV_SKIP;
        }
    } else {
        sp = p->spend;
    }
    fa_privacy_budget_digest(delta, d * sizeof(float), digest);
    rc = ask(p, FA_AGENT_PRIVACY_CHARGE, &sp, info->round, info->attempt, *delta_version, digest);
    if (rc == FA_ERR_RANGE) {
        *delta_version = UINT64_MAX; /* never sent, never charged: dropped */
        return exhausted(p, info->round,
                         "privacy budget exhausted: the trained update is not uploaded",
                         p->res.msg);
    }
    if (rc != 0) {
        /* charged in memory but not saved (kept, to be saved at the next
         * attempt), or an update the accountant refuses (dropped) */
        const int unsaved = p->dirty;
        log_err(unsaved ? "the privacy accountant is not saved; nothing is uploaded"
                        : "the round cannot be accounted; it is not uploaded",
                rc, p->res.msg);
        if (!unsaved && rc != FA_ERR_IO)
            *delta_version = UINT64_MAX;
        p->m->round_failures_total += unsaved;
        return FA_PRIV_SKIP;
    }
    if (p->res.charged)
        fa_log(FA_LOG_INFO, "privacy spent",
               "round=%" PRIu64 " version=%" PRIu64 " mechanism=%s steps=%" PRIu64
               " noise_multiplier=%g clip=%g sampling_rate=%g epsilon_round=%.4f "
               "epsilon_total=%.4f budget=%g delta=%g rounds_accounted=%" PRIu64
               " trainer_epsilon=%s",
               info->round, *delta_version, sp.mechanism, sp.steps, sp.noise_multiplier, sp.clip,
               sp.sampling_rate, p->res.eps_round, p->res.eps_total, p->res.budget, p->res.delta,
               p->res.rounds,
               p->external && xpriv && !isnan(xpriv->epsilon)
                   ? (snprintf(q, sizeof(q), "%.4f", xpriv->epsilon), q)
                   : "-");
    keep_statement(p, st);
    {
        /* whether the next round would still fit (the metrics) */
        const fa_privacy_spend *nx = p->external ? &sp : next_spend(p);
        p->m->privacy_exhausted =
            nx && ask(p, FA_AGENT_PRIVACY_PREVIEW, nx, 0, 0, 0, NULL) == FA_ERR_RANGE;
    }
    return FA_PRIV_GO;
}

fa_round_privacy_verdict fa_round_privacy_statement(fa_round_privacy *p, uint64_t round,
                                                    uint32_t attempt, Fedagg__PrivacyStatement *st)
{
    int rc = ask(p, FA_AGENT_PRIVACY_STATEMENT, NULL, round, attempt, 0, NULL);
    if (rc != 0) {
        log_err("no privacy statement for this attempt; the region does not upload in it", rc,
                p->res.msg);
        return FA_PRIV_SKIP;
    }
    keep_statement(p, st);
    return FA_PRIV_GO;
}
