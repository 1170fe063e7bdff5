/* audit_gov.c - governance records: their rules and their replay.  See
 * audit_gov.h. */
#include "audit/audit_gov.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit/audit_internal.h"
#include "crypto/identity.h"

#define MAX_STATEMENT (64u << 10)

int fa_audit_gov_kind(const Fedagg__AuditRecord *r)
{
    return r->promotion  ? FA_GOV_PROMOTION
           : r->rollback ? FA_GOV_ROLLBACK
           : r->channel  ? FA_GOV_CHANNEL
                         : FA_GOV_NONE;
}

int fa_audit_gov_channel_name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > 63)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* ---------------------------------------------------------------------------
 * Record rules
 * ------------------------------------------------------------------------- */

static int same_model(const Fedagg__AuditRecord *r)
{
    return r->prev_version == r->new_version && r->prev_model_sha256.len == 32 &&
           r->new_model_sha256.len == 32 &&
           memcmp(r->prev_model_sha256.data, r->new_model_sha256.data, 32) == 0;
}

int fa_audit_gov_check(const Fedagg__AuditRecord *r, char *why, size_t why_len)
{
#define BAD(...)                                                                                   \
    do {                                                                                           \
        snprintf(why, why_len, __VA_ARGS__);                                                       \
        return FA_ERR_INVAL;                                                                       \
    } while (0)
    int kinds = (r->promotion != NULL) + (r->rollback != NULL) + (r->channel != NULL);

    if (kinds == 0) {
        /* an aggregation's data statements */
        for (size_t i = 0; i < r->n_data_statements; i++) {
            const Fedagg__SignedDataStatement *d = r->data_statements[i];
            if (d->statement.len == 0 || d->statement.len > MAX_STATEMENT)
                BAD("data statement %zu has %zu bytes", i, d->statement.len);
            if (d->signature.len != FA_ED25519_SIG_LEN)
                BAD("data statement %zu: signature has %zu bytes, not 64", i, d->signature.len);
        }
        if (r->n_data_statements > r->n_participants)
            BAD("%zu data statements for %zu participants", r->n_data_statements,
                r->n_participants);
        return 0;
    }
    if (kinds > 1 || r->admin)
        BAD("a record is one of an aggregation, an operator's action, a decision, a rollback "
            "and a channel move, not several");
    if (r->n_participants || r->n_commitments || r->n_dropped || r->n_data_statements ||
        r->n_privacy)
        BAD("a governance record has participants or statements of a round");
    if (r->config_digest.len != 32)
        BAD("config_digest has %zu bytes, not 32", r->config_digest.len);
    for (size_t i = 0; i < r->n_evaluations; i++)
        if (r->evaluations[i]->signature.len != FA_ED25519_SIG_LEN)
            BAD("evaluation %zu: signature has %zu bytes, not 64", i,
                r->evaluations[i]->signature.len);
    if (r->promotion) {
        const Fedagg__PromotionDecision *d = r->promotion;
        int outcome = fa_promo_outcome_parse(d->outcome);
        if (!same_model(r))
            BAD("a decision changes the model");
        if (outcome <= FA_PROMO_WAIT)
            BAD("decision outcome '%.40s' is not promoted, rejected or expired",
                d->outcome ? d->outcome : "");
        if (fa_promo_action_parse(d->action) < 0)
            BAD("decision action '%.40s' is not none, rollback, pause or keep",
                d->action ? d->action : "");
        if (!d->rule)
            BAD("a decision without its rule");
        if (outcome != FA_PROMO_EXPIRED && !isfinite(d->value))
            BAD("a %s decision without a finite figure", d->outcome);
        if (d->has_baseline && !isfinite(d->baseline))
            BAD("a decision's baseline is not finite");
        return 0;
    }
    if (r->rollback) {
        const Fedagg__ModelRollback *b = r->rollback;
        if (r->new_version != r->prev_version + 1 || r->prev_model_sha256.len != 32 ||
            r->new_model_sha256.len != 32)
            BAD("a rollback commits version %" PRIu64 " after %" PRIu64 ", not the next one",
                r->new_version, r->prev_version);
        if (b->to_model_sha256.len != 32 ||
            memcmp(b->to_model_sha256.data, r->new_model_sha256.data, 32) != 0)
            BAD("a rollback's new model is not the model of the version it restores");
        if (b->rejected_version != r->prev_version)
            BAD("a rollback from version %" PRIu64 " recorded after version %" PRIu64,
                b->rejected_version, r->prev_version);
        if (b->to_version >= r->prev_version)
            BAD("a rollback to version %" PRIu64 ", not an earlier one than %" PRIu64,
                b->to_version, r->prev_version);
        return 0;
    }
    if (!same_model(r))
        BAD("a channel move changes the model");
    if (!fa_audit_gov_channel_name_ok(r->channel->channel))
        BAD("channel name '%.80s' is not [a-z0-9._-]{1,63}",
            r->channel->channel ? r->channel->channel : "");
    if (r->channel->model_sha256.len != 32)
        BAD("channel %s: model_sha256 has %zu bytes, not 32", r->channel->channel,
            r->channel->model_sha256.len);
    if (r->channel->version > r->new_version)
        BAD("channel %s points at version %" PRIu64 ", after the current %" PRIu64,
            r->channel->channel, r->channel->version, r->new_version);
    return 0;
#undef BAD
}

/* ---------------------------------------------------------------------------
 * Replay
 * ------------------------------------------------------------------------- */

struct fa_audit_gov {
    const fa_audit_region_key *keys;
    size_t nkeys;
    fa_audit_gov_finding finding;
    void *ctx;
    fa_gov_version *v; /* ascending by version */
    size_t nv, capv;
    fa_promo_entry *h;
    size_t nh, caph;
    fa_gov_channel *ch;
    size_t nch, capch;
    fa_gov_counts counts;
    int have_current;
    uint64_t current;
};

static void say(fa_audit_gov *g, int severity, int64_t index, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void say(fa_audit_gov *g, int severity, int64_t index, const char *fmt, ...)
{
    char msg[480];
    va_list ap;
    if (!g->finding)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    g->finding(g->ctx, severity, index, msg);
}

int fa_audit_gov_new(fa_audit_gov **out, const fa_audit_region_key *keys, size_t nkeys,
                     fa_audit_gov_finding finding, void *ctx, fa_error *err)
{
    fa_audit_gov *g = calloc(1, sizeof(*g));
    *out = NULL;
    if (!g)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    g->keys = keys;
    g->nkeys = nkeys;
    g->finding = finding;
    g->ctx = ctx;
    *out = g;
    return 0;
}

void fa_audit_gov_del(fa_audit_gov *g)
{
    if (!g)
        return;
    free(g->v);
    free(g->h);
    free(g->ch);
    free(g);
}

static fa_gov_version *find(const fa_audit_gov *g, uint64_t version)
{
    size_t lo = 0, hi = g->nv;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (g->v[mid].version == version)
            return &g->v[mid];
        if (g->v[mid].version < version)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* Adds version (made at index, or the initial model) with its digest;
 * versions arrive ascending.  Returns it, or NULL (out of memory). */
static fa_gov_version *add_version(fa_audit_gov *g, uint64_t version, const uint8_t sha[32],
                                   int made, int64_t at)
{
    fa_gov_version *nv, *v;
    if ((v = find(g, version)) != NULL)
        return v;
    if (g->nv && version < g->v[g->nv - 1].version)
        return NULL; /* the record rules keep versions ascending */
    if (g->nv == g->capv) {
        size_t cap = g->capv ? 2 * g->capv : 16;
        if (!(nv = realloc(g->v, cap * sizeof(*nv))))
            return NULL;
        g->v = nv;
        g->capv = cap;
    }
    v = &g->v[g->nv++];
    memset(v, 0, sizeof(*v));
    v->version = version;
    memcpy(v->sha256, sha, 32);
    v->made = made;
    v->made_at = at;
    v->outcome = FA_PROMO_WAIT;
    v->value = NAN;
    v->decided_at = -1;
    v->trained_at = -1;
    return v;
}

static int push_promoted(fa_audit_gov *g, uint64_t version, double value)
{
    if (g->nh == g->caph) {
        size_t cap = g->caph ? 2 * g->caph : 16;
        fa_promo_entry *n = realloc(g->h, cap * sizeof(*n));
        if (!n)
            return FA_ERR_NOMEM;
        g->h = n;
        g->caph = cap;
    }
    g->h[g->nh].version = version;
    g->h[g->nh].value = value;
    g->nh++;
    return 0;
}

static fa_gov_channel *channel_slot(fa_audit_gov *g, const char *name, int create)
{
    for (size_t i = 0; i < g->nch; i++)
        if (!strcmp(g->ch[i].name, name))
            return &g->ch[i];
    if (!create)
        return NULL;
    if (g->nch == g->capch) {
        size_t cap = g->capch ? 2 * g->capch : 4;
        fa_gov_channel *n = realloc(g->ch, cap * sizeof(*n));
        if (!n)
            return NULL;
        g->ch = n;
        g->capch = cap;
    }
    memset(&g->ch[g->nch], 0, sizeof(g->ch[0]));
    snprintf(g->ch[g->nch].name, sizeof(g->ch[0].name), "%s", name);
    g->ch[g->nch].moved_at = -1;
    return &g->ch[g->nch++];
}

/* The data statements of an aggregation: each of a participant, of this
 * round and attempt and of the model it trained from, one per region,
 * signed by its region. */
static void replay_data(fa_audit_gov *g, int64_t at, const Fedagg__AuditRecord *r)
{
    char **seen = calloc(r->n_data_statements ? r->n_data_statements : 1, sizeof(char *));

    for (size_t i = 0; i < r->n_data_statements; i++) {
        const Fedagg__SignedDataStatement *sd = r->data_statements[i];
        Fedagg__DataStatement *s =
            fedagg__data_statement__unpack(NULL, sd->statement.len, sd->statement.data);
        const uint8_t *pk;
        int dup = 0;
        if (!s) {
            say(g, FA_AUDIT_PROBLEM, at, "data statement %zu does not decode", i);
            continue;
        }
        for (size_t k = 0; seen && s->region && k < i; k++)
            dup |= seen[k] && !strcmp(seen[k], s->region);
        if (seen && s->region)
            seen[i] = strdup(s->region);
        if (!s->region || !fa_audit_in_sorted(r->participants, r->n_participants, s->region)) {
            say(g, FA_AUDIT_PROBLEM, at, "data statement %zu is of region '%s', not a participant",
                i, s->region ? s->region : "");
        } else if (dup) {
            say(g, FA_AUDIT_PROBLEM, at, "region %s has two data statements", s->region);
        } else if (!s->federation_id || strcmp(s->federation_id, r->federation_id) ||
                   s->round != r->round || s->attempt != r->attempt ||
                   s->model_version != r->prev_version || s->model_sha256.len != 32 ||
                   memcmp(s->model_sha256.data, r->prev_model_sha256.data, 32) != 0) {
            say(g, FA_AUDIT_PROBLEM, at,
                "the data statement of region %s is of round %" PRIu64 " attempt %u, model "
                "version %" PRIu64 " of federation %s, not of this record's",
                s->region, s->round, s->attempt, s->model_version,
                s->federation_id ? s->federation_id : "");
        } else if (!(pk = fa_audit_region_key_find(g->keys, g->nkeys, s->region))) {
            g->counts.data_unknown++;
        } else if (fa_identity_verify_statement(pk, FA_IDENTITY_DOMAIN_DATA, sd->statement.data,
                                                sd->statement.len, sd->signature.data) != 0) {
            say(g, FA_AUDIT_PROBLEM, at,
                "region %s: the signature of its data statement does not verify with its key",
                s->region);
        } else {
            g->counts.data_signatures++;
        }
        fedagg__data_statement__free_unpacked(s, NULL);
    }
    for (size_t i = 0; seen && i < r->n_data_statements; i++)
        free(seen[i]);
    free(seen);
}

/* The decision of record at on its candidate, recomputed. */
static void replay_decision(fa_audit_gov *g, int64_t at, const Fedagg__AuditRecord *r)
{
    const Fedagg__PromotionDecision *d = r->promotion;
    fa_gov_version *v = find(g, r->new_version);
    Fedagg__EvalStatement **st = NULL;
    fa_promo_policy p;
    fa_promo_evidence e;
    fa_promo_verdict want;
    fa_error err;
    int outcome = fa_promo_outcome_parse(d->outcome), action = fa_promo_action_parse(d->action);
    size_t ns = 0;

    g->counts.gate_seen = 1;
    if (!v) {
        say(g, FA_AUDIT_PROBLEM, at, "a decision on version %" PRIu64 ", which the log never made",
            r->new_version);
        return;
    }
    if (memcmp(v->sha256, r->new_model_sha256.data, 32) != 0) {
        say(g, FA_AUDIT_PROBLEM, at,
            "a decision on version %" PRIu64 " with another model digest than the log's",
            r->new_version);
        return;
    }
    if (v->decided_at >= 0) {
        say(g, FA_AUDIT_PROBLEM, at, "version %" PRIu64 " was decided already (record %" PRId64 ")",
            v->version, v->decided_at);
        return;
    }
    if (fa_promo_policy_from_pb(&p, d->rule, &err) != 0) {
        say(g, FA_AUDIT_PROBLEM, at, "decision on version %" PRIu64 ": %s", v->version, err.msg);
        return;
    }
    if (p.central) {
        const Fedagg__EvalSummary *c = r->central_eval;
        if (c && c->model_version != v->version) {
            say(g, FA_AUDIT_PROBLEM, at,
                "decision on version %" PRIu64 " rests on an evaluator result of version %" PRIu64,
                v->version, c->model_version);
            return;
        }
        fa_promo_evidence_central(&p, c, &e);
    } else {
        st = calloc(r->n_evaluations ? r->n_evaluations : 1, sizeof(*st));
        if (!st)
            return;
        for (size_t i = 0; i < r->n_evaluations; i++) {
            const Fedagg__SignedEval *se = r->evaluations[i];
            /* verify_evaluations (audit_verify.c) checks each statement's
             * signature and model; the figure uses every one that decodes,
             * as the gate did */
            if ((st[ns] = fedagg__eval_statement__unpack(NULL, se->statement.len,
                                                         se->statement.data)) != NULL)
                ns++;
        }
        fa_promo_evidence_federated(&p, (const Fedagg__EvalStatement *const *)st, ns, &e);
    }
    fa_promo_decide(&p, &e, g->h, g->nh, 1, &want);
    if (e.regions != d->regions || e.examples != d->examples ||
        (isnan(e.value) ? !isnan(d->value)
                        : !(fabs(d->value - e.value) <= 1e-9 * (1 + fabs(e.value))))) {
        say(g, FA_AUDIT_PROBLEM, at,
            "decision on version %" PRIu64 ": its figure %s %.9g over %u regions and %" PRIu64
            " examples is not that of its statements (%.9g over %u and %" PRIu64 ")",
            v->version, p.metric, d->value, d->regions, d->examples, e.value, e.regions,
            e.examples);
    } else if (want.has_baseline != d->has_baseline ||
               (want.has_baseline &&
                (want.baseline != d->baseline || want.baseline_version != d->baseline_version))) {
        say(g, FA_AUDIT_PROBLEM, at,
            "decision on version %" PRIu64 ": baseline %s%.9g (version %" PRIu64
            "), but the promoted versions before it give %s%.9g (version %" PRIu64 ")",
            v->version, d->has_baseline ? "" : "none ", d->baseline, d->baseline_version,
            want.has_baseline ? "" : "none ", want.baseline, want.baseline_version);
    } else {
        /* The outcome from the recorded figure (equal to the recomputed
         * one within rounding) and the baseline. */
        int follows;
        if (want.outcome == FA_PROMO_EXPIRED)
            follows = outcome == FA_PROMO_EXPIRED;
        else if (!d->has_baseline)
            follows = outcome == FA_PROMO_PROMOTED;
        else
            follows = outcome == (fa_promo_passes(&p, d->value, d->baseline) ? FA_PROMO_PROMOTED
                                                                             : FA_PROMO_REJECTED);
        if (!follows)
            say(g, FA_AUDIT_PROBLEM, at,
                "decision on version %" PRIu64 ": %s does not follow from its statements and "
                "the rule (%s)",
                v->version, d->outcome, want.reason);
        else if (action != (outcome == FA_PROMO_REJECTED ? want.action : FA_PROMO_ACT_NONE))
            say(g, FA_AUDIT_PROBLEM, at,
                "decision on version %" PRIu64 ": action %s, but the rule's on_regression is %s",
                v->version, d->action, d->rule->on_regression);
    }
    for (size_t i = 0; i < ns; i++)
        fedagg__eval_statement__free_unpacked(st[i], NULL);
    free(st);

    v->outcome = outcome;
    v->action = action;
    v->value = d->value;
    v->decided_at = at;
    switch (outcome) {
    case FA_PROMO_PROMOTED:
        g->counts.promotions++;
        g->counts.rejections_in_a_row = 0;
        if (push_promoted(g, v->version, d->value) != 0)
            say(g, FA_AUDIT_PROBLEM, at, "out of memory");
        break;
    case FA_PROMO_REJECTED:
        g->counts.rejections++;
        g->counts.rejections_in_a_row++;
        break;
    default: g->counts.expirations++; break;
    }
}

static void replay_rollback(fa_audit_gov *g, int64_t at, const Fedagg__AuditRecord *r)
{
    const Fedagg__ModelRollback *b = r->rollback;
    const fa_gov_version *to = find(g, b->to_version), *from = find(g, r->prev_version);
    fa_gov_version *nv;

    if (g->nh == 0 || g->h[g->nh - 1].version != b->to_version) {
        say(g, FA_AUDIT_PROBLEM, at,
            "a rollback to version %" PRIu64 ", which is not the last promoted version (%s%" PRIu64
            ")",
            b->to_version, g->nh ? "" : "none; ", g->nh ? g->h[g->nh - 1].version : 0);
    } else if (!to || memcmp(to->sha256, b->to_model_sha256.data, 32) != 0) {
        say(g, FA_AUDIT_PROBLEM, at, "a rollback restores a model other than version %" PRIu64 "'s",
            b->to_version);
    } else if ((!b->operator_ || !b->operator_[0]) &&
               (!from || from->outcome != FA_PROMO_REJECTED ||
                from->action != FA_PROMO_ACT_ROLLBACK)) {
        say(g, FA_AUDIT_PROBLEM, at,
            "the gate rolled back version %" PRIu64 ", which no decision rejected with a "
            "rollback",
            r->prev_version);
    }
    nv = add_version(g, r->new_version, r->new_model_sha256.data, FA_GOV_MADE_ROLLBACK, at);
    if (!nv) {
        say(g, FA_AUDIT_PROBLEM, at, "out of memory");
        return;
    }
    nv->parent = r->prev_version;
    nv->restored = b->to_version;
    g->counts.rollbacks++;
}

static void replay_channel(fa_audit_gov *g, int64_t at, const Fedagg__AuditRecord *r)
{
    const Fedagg__ChannelMove *m = r->channel;
    const fa_gov_version *v = find(g, m->version);
    fa_gov_channel *c = channel_slot(g, m->channel, 0);
    int gate = !m->operator_ || !m->operator_[0];

    if (!v || memcmp(v->sha256, m->model_sha256.data, 32) != 0)
        say(g, FA_AUDIT_PROBLEM, at,
            "channel %s moved to version %" PRIu64 ", which the log does not hold with that "
            "model digest",
            m->channel, m->version);
    else if ((gate || g->counts.gate_seen) && v->outcome != FA_PROMO_PROMOTED)
        say(g, FA_AUDIT_PROBLEM, at, "channel %s moved to version %" PRIu64 ", which the gate %s",
            m->channel, m->version,
            v->outcome == FA_PROMO_REJECTED  ? "rejected"
            : v->outcome == FA_PROMO_EXPIRED ? "did not decide (too few evaluations)"
                                             : "has not promoted");
    if ((c != NULL) != (m->had_previous != 0) || (c && c->version != m->previous_version))
        say(g, FA_AUDIT_PROBLEM, at,
            "channel %s: the move names its previous version as %s%" PRIu64
            ", the log as %s%" PRIu64,
            m->channel, m->had_previous ? "" : "none ", m->previous_version, c ? "" : "none ",
            c ? c->version : 0);
    if (!c && !(c = channel_slot(g, m->channel, 1))) {
        say(g, FA_AUDIT_PROBLEM, at, "out of memory");
        return;
    }
    c->version = m->version;
    c->moved_at = at;
    snprintf(c->by, sizeof(c->by), "%s", gate ? "" : m->operator_);
    g->counts.channel_moves++;
}

int fa_audit_gov_initial(fa_audit_gov *g, uint64_t version, const uint8_t sha256[32])
{
    if (g->have_current)
        return 0;
    if (!add_version(g, version, sha256, FA_GOV_MADE_INITIAL, -1))
        return FA_ERR_NOMEM;
    g->have_current = 1;
    g->current = version;
    return 0;
}

int fa_audit_gov_record(fa_audit_gov *g, uint64_t index, const Fedagg__AuditRecord *r)
{
    int64_t at = (int64_t)index;
    int kind = fa_audit_gov_kind(r);

    if (r->prev_model_sha256.len != 32 || r->new_model_sha256.len != 32)
        return 0; /* the record rules report it */
    /* The first record names the model the log starts from. */
    if (!g->have_current &&
        !add_version(g, r->prev_version, r->prev_model_sha256.data, FA_GOV_MADE_INITIAL, -1))
        return FA_ERR_NOMEM;
    g->have_current = 1;
    g->current = r->new_version;
    switch (kind) {
    case FA_GOV_PROMOTION: replay_decision(g, at, r); return 0;
    case FA_GOV_ROLLBACK: replay_rollback(g, at, r); return 0;
    case FA_GOV_CHANNEL: replay_channel(g, at, r); return 0;
    default: break;
    }
    if (r->admin || r->n_participants == 0)
        return 0; /* an operator's action (or another record between rounds) */
    {
        fa_gov_version *from = find(g, r->prev_version), *nv;
        if (from) {
            if (from->outcome == FA_PROMO_REJECTED && from->action == FA_PROMO_ACT_ROLLBACK)
                say(g, FA_AUDIT_PROBLEM, at,
                    "round %" PRIu64 " trained from version %" PRIu64
                    ", which the gate rejected and rolled back (record %" PRId64 ")",
                    r->round, from->version, from->decided_at);
            if (from->trained_at < 0)
                from->trained_at = at;
        }
        replay_data(g, at, r);
        nv = add_version(g, r->new_version, r->new_model_sha256.data, FA_GOV_MADE_ROUND, at);
        if (!nv)
            return FA_ERR_NOMEM;
        nv->parent = r->prev_version;
    }
    return 0;
}

size_t fa_audit_gov_versions(const fa_audit_gov *g)
{
    return g->nv;
}

const fa_gov_version *fa_audit_gov_version_at(const fa_audit_gov *g, size_t i)
{
    return i < g->nv ? &g->v[i] : NULL;
}

const fa_gov_version *fa_audit_gov_find(const fa_audit_gov *g, uint64_t version)
{
    return find(g, version);
}

size_t fa_audit_gov_promoted(const fa_audit_gov *g, const fa_promo_entry **h)
{
    *h = g->h;
    return g->nh;
}

size_t fa_audit_gov_channels(const fa_audit_gov *g)
{
    return g->nch;
}

const fa_gov_channel *fa_audit_gov_channel_at(const fa_audit_gov *g, size_t i)
{
    return i < g->nch ? &g->ch[i] : NULL;
}

const fa_gov_channel *fa_audit_gov_channel(const fa_audit_gov *g, const char *name)
{
    for (size_t i = 0; name && i < g->nch; i++)
        if (!strcmp(g->ch[i].name, name))
            return &g->ch[i];
    return NULL;
}

void fa_audit_gov_counts(const fa_audit_gov *g, fa_gov_counts *out)
{
    *out = g->counts;
}

uint64_t fa_audit_gov_current(const fa_audit_gov *g)
{
    return g->have_current ? g->current : UINT64_MAX;
}
