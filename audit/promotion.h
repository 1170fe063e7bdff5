/* promotion.h - the promotion rule of released models (docs/governance.md).
 *
 * Every committed model version is a candidate until its evaluations decide
 * it.  Given the policy (config.proto PromotionPolicy), the candidate's
 * evidence (the figure of the policy's metric over the regions' signed
 * evaluation statements, or the evaluator command's result) and the figures
 * of the versions promoted before it, the rule says:
 *
 *   wait      too little evidence yet (fewer than min_regions statements
 *             carry the metric, or no evaluator result);
 *   expired   the same when no more can come (the round trained from the
 *             candidate is done): not released, no action;
 *   promoted  no baseline yet (the first promotion), or the figure is within
 *             `tolerance` of the baseline or better;
 *   rejected  otherwise; the policy's on_regression says what follows
 *             (rollback, pause, keep).
 *
 * The baseline is the last promoted version's figure, or the best figure of
 * the last `window` promoted versions (all of them for 0).
 *
 * One rule, two users: the aggregator's gate (aggregator/fed_gov.c) decides
 * with it, and `fedagg audit verify` recomputes every recorded decision with
 * it from the statements the record carries and the promoted versions before
 * it (audit/audit_gov.c).  Both compute the evidence from the statements in
 * the order the record holds them, with the same arithmetic.
 *
 * Sans-I/O: values in, a verdict out.
 */
#ifndef FA_AUDIT_PROMOTION_H
#define FA_AUDIT_PROMOTION_H

#include <stddef.h>
#include <stdint.h>

#include "audit.pb-c.h"
#include "common/fa_err.h"
#include "config.pb-c.h"
#include "fedagg.pb-c.h"

#define FA_PROMO_MAX_METRIC 63

/* What a regression does (config RegressionAction). */
enum { FA_PROMO_ROLLBACK = 0, FA_PROMO_PAUSE = 1, FA_PROMO_KEEP = 2 };

/* Outcomes. */
enum { FA_PROMO_WAIT = 0, FA_PROMO_PROMOTED = 1, FA_PROMO_REJECTED = 2, FA_PROMO_EXPIRED = 3 };

/* What the federation does after a decision. */
enum { FA_PROMO_ACT_NONE = 0, FA_PROMO_ACT_ROLLBACK, FA_PROMO_ACT_PAUSE, FA_PROMO_ACT_KEEP };

typedef struct fa_promo_policy {
    char metric[FA_PROMO_MAX_METRIC + 1];
    int central; /* the evaluator command's result, else the regions' statements */
    int higher_is_better;
    int best_of_last;     /* baseline: best of the last `window` promoted, else the last one */
    uint32_t window;      /* 0: all promoted versions */
    double tolerance;     /* >= 0, in the metric's units */
    uint32_t min_regions; /* federated: statements that must carry the metric, >= 1 */
    int on_regression;    /* FA_PROMO_ROLLBACK, FA_PROMO_PAUSE, FA_PROMO_KEEP */
} fa_promo_policy;

/* The candidate's figure.  value NaN: none. */
typedef struct fa_promo_evidence {
    double value;
    uint32_t regions;  /* statements carrying the metric (central: 1 with a result) */
    uint64_t examples; /* examples behind the figure */
} fa_promo_evidence;

/* A promoted version and its figure, oldest first in a history. */
typedef struct fa_promo_entry {
    uint64_t version;
    double value;
} fa_promo_entry;

typedef struct fa_promo_verdict {
    int outcome; /* FA_PROMO_WAIT ... FA_PROMO_EXPIRED */
    int action;  /* FA_PROMO_ACT_*: none unless rejected */
    int has_baseline;
    double baseline;
    uint64_t baseline_version;
    double bound; /* the figure the candidate had to reach (NaN without a baseline) */
    char reason[320];
} fa_promo_verdict;

/* Whether a lower figure is better for metric under DIRECTION_AUTO: "loss",
 * or a name ending in "loss" or "error". */
int fa_promo_lower_is_better(const char *metric);

/* The policy of a config block (checked: a metric name [A-Za-z0-9_.-]{1,63},
 * a finite tolerance >= 0, min_regions >= 1).  Returns 0 or FA_ERR_INVAL
 * naming the field. */
int fa_promo_policy_from_config(fa_promo_policy *out, const Fedagg__PromotionPolicy *cfg,
                                fa_error *err);

/* The rule as a record carries it (strings point at static text and into p,
 * which must outlive out), and back (checked as above; FA_ERR_INVAL names
 * what is wrong). */
void fa_promo_policy_to_pb(const fa_promo_policy *p, Fedagg__PromotionRule *out);
int fa_promo_policy_from_pb(fa_promo_policy *out, const Fedagg__PromotionRule *r, fa_error *err);

/* Names for records and people: "promoted", "rejected", "expired", "wait";
 * "none", "rollback", "pause", "keep". */
const char *fa_promo_outcome_name(int outcome);
const char *fa_promo_action_name(int action);
/* The inverse; -1 for a name that is none of them. */
int fa_promo_outcome_parse(const char *name);
int fa_promo_action_parse(const char *name);

/* Evidence of the federated source: the example-weighted mean of the
 * metric over the statements (decoded EvalStatements, in record order)
 * that carry it: "accuracy" and "loss" their fields when not NaN, any other
 * name the named metric.  value NaN and regions 0 when none does. */
void fa_promo_evidence_federated(const fa_promo_policy *p, const Fedagg__EvalStatement *const *s,
                                 size_t n, fa_promo_evidence *out);

/* Evidence of the central source: the evaluator's summary of the
 * candidate (NULL: none yet). */
void fa_promo_evidence_central(const fa_promo_policy *p, const Fedagg__EvalSummary *central,
                               fa_promo_evidence *out);

/* The decision on a candidate with evidence e, after the promoted versions
 * h[0..n) (oldest first).  final: no more evidence will come (below the
 * quorum the candidate expires instead of waiting).  Never fails; out is
 * always filled, reason with the rule and its figures. */
void fa_promo_decide(const fa_promo_policy *p, const fa_promo_evidence *e, const fa_promo_entry *h,
                     size_t n, int final, fa_promo_verdict *out);

/* Whether `value` passes against `baseline` under p (the comparison
 * fa_promo_decide makes): 1 or 0. */
int fa_promo_passes(const fa_promo_policy *p, double value, double baseline);

#endif
