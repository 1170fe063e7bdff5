/* promotion.c - the promotion rule of released models.  See promotion.h. */
#include "audit/promotion.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const outcome_names[] = {"wait", "promoted", "rejected", "expired"};
static const char *const action_names[] = {"none", "rollback", "pause", "keep"};
static const char *const regression_names[] = {"rollback", "pause", "keep"};

const char *fa_promo_outcome_name(int outcome)
{
    return outcome >= 0 && outcome <= FA_PROMO_EXPIRED ? outcome_names[outcome] : "?";
}

const char *fa_promo_action_name(int action)
{
    return action >= 0 && action <= FA_PROMO_ACT_KEEP ? action_names[action] : "?";
}

static int parse_name(const char *name, const char *const *names, int n)
{
    for (int i = 0; name && i < n; i++)
        if (!strcmp(name, names[i]))
            return i;
    return -1;
}

int fa_promo_outcome_parse(const char *name)
{
    return parse_name(name, outcome_names, 4);
}

int fa_promo_action_parse(const char *name)
{
    return parse_name(name, action_names, 4);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

int fa_promo_lower_is_better(const char *metric)
{
    return ends_with(metric, "loss") || ends_with(metric, "error");
}

static int metric_name_ok(const char *m)
{
    size_t n = m ? strlen(m) : 0;
    if (n == 0 || n > FA_PROMO_MAX_METRIC)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = m[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return 0;
    }
    return 1;
}

/* The checks both constructors make. */
static int check_policy(const fa_promo_policy *p, const char *metric, const char *where,
                        fa_error *err)
{
    if (!metric_name_ok(metric))
        return fa_errorf(err, FA_ERR_INVAL,
                         "%s: metric '%.80s' is not a name of [A-Za-z0-9_.-], 1 to %d bytes", where,
                         metric ? metric : "", FA_PROMO_MAX_METRIC);
    if (!isfinite(p->tolerance) || p->tolerance < 0)
        return fa_errorf(err, FA_ERR_INVAL, "%s: tolerance %g must be finite and >= 0", where,
                         p->tolerance);
    if (p->min_regions == 0)
        return fa_errorf(err, FA_ERR_INVAL, "%s: min_regions must be at least 1", where);
    return 0;
}

int fa_promo_policy_from_config(fa_promo_policy *out, const Fedagg__PromotionPolicy *cfg,
                                fa_error *err)
{
    memset(out, 0, sizeof(*out));
    out->central = cfg->source == FEDAGG__PROMOTION_SOURCE__SOURCE_CENTRAL;
    out->best_of_last = cfg->baseline == FEDAGG__PROMOTION_BASELINE__BASELINE_BEST_OF_LAST;
    out->window = cfg->baseline_window;
    out->tolerance = cfg->tolerance;
    out->min_regions = out->central ? 1 : cfg->min_regions;
    out->on_regression =
        cfg->on_regression == FEDAGG__REGRESSION_ACTION__REGRESSION_PAUSE  ? FA_PROMO_PAUSE
        : cfg->on_regression == FEDAGG__REGRESSION_ACTION__REGRESSION_KEEP ? FA_PROMO_KEEP
                                                                           : FA_PROMO_ROLLBACK;
    if (check_policy(out, cfg->metric, "promotion", err) != 0)
        return FA_ERR_INVAL;
    snprintf(out->metric, sizeof(out->metric), "%s", cfg->metric);
    switch (cfg->direction) {
    case FEDAGG__PROMOTION_DIRECTION__HIGHER_IS_BETTER: out->higher_is_better = 1; break;
    case FEDAGG__PROMOTION_DIRECTION__LOWER_IS_BETTER: out->higher_is_better = 0; break;
    default: out->higher_is_better = !fa_promo_lower_is_better(out->metric); break;
    }
    return 0;
}

void fa_promo_policy_to_pb(const fa_promo_policy *p, Fedagg__PromotionRule *out)
{
    fedagg__promotion_rule__init(out);
    out->metric = (char *)p->metric;
    out->source = p->central ? "central" : "federated";
    out->higher_is_better = p->higher_is_better != 0;
    out->baseline = p->best_of_last ? "best-of-last" : "last-promoted";
    out->baseline_window = p->window;
    out->tolerance = p->tolerance;
    out->min_regions = p->min_regions;
    out->on_regression = (char *)regression_names[p->on_regression];
}

int fa_promo_policy_from_pb(fa_promo_policy *out, const Fedagg__PromotionRule *r, fa_error *err)
{
    int reg;

    memset(out, 0, sizeof(*out));
    if (!r)
        return fa_errorf(err, FA_ERR_INVAL, "the decision carries no rule");
    if (!r->source || (strcmp(r->source, "central") && strcmp(r->source, "federated")))
        return fa_errorf(err, FA_ERR_INVAL, "rule source '%.40s' is not federated or central",
                         r->source ? r->source : "");
    if (!r->baseline ||
        (strcmp(r->baseline, "best-of-last") && strcmp(r->baseline, "last-promoted")))
        return fa_errorf(err, FA_ERR_INVAL,
                         "rule baseline '%.40s' is not last-promoted or best-of-last",
                         r->baseline ? r->baseline : "");
    reg = parse_name(r->on_regression, regression_names, 3);
    if (reg < 0)
        return fa_errorf(err, FA_ERR_INVAL,
                         "rule on_regression '%.40s' is not rollback, pause or keep",
                         r->on_regression ? r->on_regression : "");
    out->central = !strcmp(r->source, "central");
    out->higher_is_better = r->higher_is_better;
    out->best_of_last = !strcmp(r->baseline, "best-of-last");
    out->window = r->baseline_window;
    out->tolerance = r->tolerance;
    out->min_regions = r->min_regions;
    out->on_regression = reg;
    if (check_policy(out, r->metric, "rule", err) != 0)
        return FA_ERR_INVAL;
    snprintf(out->metric, sizeof(out->metric), "%s", r->metric);
    return 0;
}

/* The metric's value in one statement, NaN when it has none. */
static double statement_value(const char *metric, const Fedagg__EvalStatement *s)
{
    if (!strcmp(metric, "accuracy"))
        return s->accuracy;
    if (!strcmp(metric, "loss"))
        return s->loss;
    for (size_t i = 0; i < s->n_metrics; i++)
        if (s->metrics[i]->name && !strcmp(s->metrics[i]->name, metric))
            return s->metrics[i]->value;
    return NAN;
}

void fa_promo_evidence_federated(const fa_promo_policy *p, const Fedagg__EvalStatement *const *s,
                                 size_t n, fa_promo_evidence *out)
{
    double sum = 0, w = 0;

    out->value = NAN;
    out->regions = 0;
    out->examples = 0;
    for (size_t i = 0; i < n; i++) {
        double v = statement_value(p->metric, s[i]);
        if (!isfinite(v) || s[i]->num_examples == 0)
            continue;
        sum += (double)s[i]->num_examples * v;
        w += (double)s[i]->num_examples;
        out->regions++;
        out->examples += s[i]->num_examples;
    }
    if (out->regions)
        out->value = sum / w;
}

void fa_promo_evidence_central(const fa_promo_policy *p, const Fedagg__EvalSummary *c,
                               fa_promo_evidence *out)
{
    double v = NAN;

    out->value = NAN;
    out->regions = 0;
    out->examples = 0;
    if (!c)
        return;
    if (!strcmp(p->metric, "accuracy"))
        v = c->accuracy;
    else if (!strcmp(p->metric, "loss"))
        v = c->loss;
    else
        for (size_t i = 0; i < c->n_metrics; i++)
            if (c->metrics[i]->name && !strcmp(c->metrics[i]->name, p->metric))
                v = c->metrics[i]->value;
    if (!isfinite(v))
        return;
    out->value = v;
    out->regions = 1;
    out->examples = c->num_examples;
}

int fa_promo_passes(const fa_promo_policy *p, double value, double baseline)
{
    return p->higher_is_better ? value >= baseline - p->tolerance
                               : value <= baseline + p->tolerance;
}

/* The baseline among h[0..n): the last entry, or the best of the last
 * window entries.  Returns its index. */
static size_t baseline_of(const fa_promo_policy *p, const fa_promo_entry *h, size_t n)
{
    size_t first = 0, best = n - 1;
    if (!p->best_of_last)
        return n - 1;
    if (p->window && n > p->window)
        first = n - p->window;
    for (size_t i = first; i < n; i++)
        if (p->higher_is_better ? h[i].value > h[best].value : h[i].value < h[best].value)
            best = i;
    return best;
}

void fa_promo_decide(const fa_promo_policy *p, const fa_promo_evidence *e, const fa_promo_entry *h,
                     size_t n, int final, fa_promo_verdict *out)
{
    size_t b;

    memset(out, 0, sizeof(*out));
    out->baseline = NAN;
    out->bound = NAN;
    if (isnan(e->value) || e->regions < p->min_regions) {
        out->outcome = final ? FA_PROMO_EXPIRED : FA_PROMO_WAIT;
        if (p->central)
            snprintf(out->reason, sizeof(out->reason), "no %s from the evaluator command%s",
                     p->metric, final ? " before the next version" : " yet");
        else
            snprintf(out->reason, sizeof(out->reason),
                     "%u of the %u regions' statements needed carry %s%s", e->regions,
                     p->min_regions, p->metric, final ? "; no more can come" : " so far");
        return;
    }
    if (n == 0) {
        out->outcome = FA_PROMO_PROMOTED;
        snprintf(out->reason, sizeof(out->reason),
                 "%s %.6g over %u %s (%llu examples); no version promoted before: the first "
                 "baseline",
                 p->metric, e->value, e->regions, p->central ? "result" : "regions",
                 (unsigned long long)e->examples);
        return;
    }
    b = baseline_of(p, h, n);
    out->has_baseline = 1;
    out->baseline = h[b].value;
    out->baseline_version = h[b].version;
    out->bound = p->higher_is_better ? out->baseline - p->tolerance : out->baseline + p->tolerance;
    if (fa_promo_passes(p, e->value, out->baseline)) {
        out->outcome = FA_PROMO_PROMOTED;
    } else {
        out->outcome = FA_PROMO_REJECTED;
        out->action = p->on_regression == FA_PROMO_PAUSE  ? FA_PROMO_ACT_PAUSE
                      : p->on_regression == FA_PROMO_KEEP ? FA_PROMO_ACT_KEEP
                                                          : FA_PROMO_ACT_ROLLBACK;
    }
    {
        char base[96];
        if (p->best_of_last && p->window)
            snprintf(base, sizeof(base), "the best of the last %u promoted, version %llu",
                     p->window, (unsigned long long)out->baseline_version);
        else if (p->best_of_last)
            snprintf(base, sizeof(base), "the best promoted, version %llu",
                     (unsigned long long)out->baseline_version);
        else
            snprintf(base, sizeof(base), "the last promoted, version %llu",
                     (unsigned long long)out->baseline_version);
        char from[96];
        if (p->central)
            snprintf(from, sizeof(from), "the evaluator command, %llu examples",
                     (unsigned long long)e->examples);
        else
            snprintf(from, sizeof(from), "%u regions' statements, %llu examples", e->regions,
                     (unsigned long long)e->examples);
        snprintf(out->reason, sizeof(out->reason), "%s %.6g (%s) %s %.6g = %.6g %s %.6g (%s)",
                 p->metric, e->value, from,
                 out->outcome == FA_PROMO_PROMOTED ? (p->higher_is_better ? ">=" : "<=")
                                                   : (p->higher_is_better ? "<" : ">"),
                 out->bound, out->baseline, p->higher_is_better ? "-" : "+", p->tolerance, base);
    }
}
