/* eval_reports.h - federated evaluation: what the regions measured of a global
 * model version on their own held-out data, as signed statements
 * (fedagg.proto EvalStatement, SignedEval), and their example-weighted means.
 *
 * Each region evaluates every new global model where its data is and sends
 * only aggregates (n, mean loss, accuracy, named metrics), signed with its
 * identity key over FA_IDENTITY_DOMAIN_EVAL (crypto/identity.h).  The
 * aggregator keeps the statements of the current version as they were sent
 * (they go into the next audit record, where an auditor checks every
 * signature) and publishes the means in status and metrics.
 *
 * Sans-I/O: bytes and timestamps in, values out; nothing here reads a clock
 * or a file.  Not thread-safe.
 */
#ifndef FA_AGGREGATOR_EVAL_REPORTS_H
#define FA_AGGREGATOR_EVAL_REPORTS_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "fedagg.pb-c.h"

/* Most named metrics of one report, and the longest name (bytes). */
#define FA_EVAL_MAX_METRICS 32
#define FA_EVAL_MAX_NAME 63
/* Examples one region's report may claim (config
 * evaluation.max_region_examples): the default, and the most that may be
 * configured, 2^44, so that the counts of 255 regions still add up exactly
 * in a double (audit/audit_verify.c recomputes the means so). */
#define FA_EVAL_DEFAULT_MAX_EXAMPLES 1000000000u
#define FA_EVAL_MAX_EXAMPLES ((uint64_t)1 << 44)

/* Means over reports (or one evaluator's result).  A value that no report
 * had is NaN. */
typedef struct fa_eval_summary {
    int valid;        /* 0: nothing to show */
    uint64_t version; /* the model version evaluated */
    uint32_t regions; /* reports averaged (1 for the evaluator command) */
    uint64_t n;       /* examples in all */
    double loss, accuracy;
    size_t n_metrics;
    char names[FA_EVAL_MAX_METRICS][FA_EVAL_MAX_NAME + 1];
    double values[FA_EVAL_MAX_METRICS];
} fa_eval_summary;

/* Fills a protobuf EvalSummary pointing into s (and into the caller's
 * arrays nv / nvp of FA_EVAL_MAX_METRICS entries). */
void fa_eval_summary_to_pb(const fa_eval_summary *s, Fedagg__EvalSummary *pb,
                           Fedagg__NamedValue *nv, Fedagg__NamedValue **nvp);

typedef struct fa_eval_reports fa_eval_reports;

/* One member: region id and its Ed25519 identity public key. */
typedef struct fa_eval_reports_member {
    const char *id;
    uint8_t pk[32];
} fa_eval_reports_member;

/* The members as a ledger of signed statements keeps them (the
 * evaluations here, data_ledger.h, privacy_ledger.h): its own copy of the
 * ids. */
typedef struct fa_eval_reports_roster {
    fa_eval_reports_member *members;
    char **ids;
    size_t n;
} fa_eval_reports_roster;

/* Copies members[0..n) into r.  Returns 0 or FA_ERR_NOMEM, r then empty. */
int fa_eval_reports_roster_copy(fa_eval_reports_roster *r, const fa_eval_reports_member *members,
                                size_t n, fa_error *err);
void fa_eval_reports_roster_free(fa_eval_reports_roster *r);
/* The index of member id; -1 for none (id NULL included). */
long fa_eval_reports_roster_find(const fa_eval_reports_roster *r, const char *id);

/* Copies federation_id and the members; a report may claim at most
 * max_examples examples (0: FA_EVAL_DEFAULT_MAX_EXAMPLES).  Returns 0,
 * FA_ERR_INVAL (max_examples over FA_EVAL_MAX_EXAMPLES) or FA_ERR_NOMEM. */
int fa_eval_reports_new(fa_eval_reports **out, const char *federation_id,
                        const fa_eval_reports_member *members, size_t n, uint64_t max_examples,
                        fa_error *err);
void fa_eval_reports_del(fa_eval_reports *e);

/* From now on reports are for `version` (model file sha256): the reports
 * of the previous version are dropped, their summary stays as the last
 * one (fa_eval_reports_last).  A call with the version already current changes
 * nothing. */
void fa_eval_reports_begin(fa_eval_reports *e, uint64_t version, const uint8_t sha256[32]);

/* A packed SignedEval from `region` (authenticated by mTLS).  Accepted: 0
 * (also for a byte-identical retry).  Refused, with nothing changed:
 * FA_ERR_PARSE (does not decode), FA_ERR_AUTH (not a member, or the
 * statement names another region or federation), FA_ERR_VERIFY (bad
 * signature), FA_ERR_REPLAY (another version or model digest than the
 * current one: the message names both), FA_ERR_EXISTS (a different report
 * of this region for this version), FA_ERR_INVAL (num_examples 0, a loss or
 * metric not finite, an accuracy outside [0, 1], too many or bad metric
 * names), FA_ERR_RANGE (num_examples over the maximum, or values whose
 * weighted sums would overflow the means: the means stay as they were). */
int fa_eval_reports_submit(fa_eval_reports *e, const char *region, const uint8_t *body, size_t len,
                           fa_error *err);

/* A report saved with the round state (a restart): submitted again, in
 * the name of the region its statement names, and checked like any. */
int fa_eval_reports_restore(fa_eval_reports *e, const Fedagg__SignedEval *se, fa_error *err);

/* Reports of the current version, in the order received (for the audit
 * record and the round state): statement and signature bytes, pointers
 * into e valid until it changes. */
size_t fa_eval_reports_count(const fa_eval_reports *e);
void fa_eval_reports_at(const fa_eval_reports *e, size_t i, Fedagg__SignedEval *out);

/* The example-weighted means of the current version's reports (valid = 0
 * when none), and of the previous version's. */
void fa_eval_reports_summary(const fa_eval_reports *e, fa_eval_summary *out);
void fa_eval_reports_last(const fa_eval_reports *e, fa_eval_summary *out);

#endif
