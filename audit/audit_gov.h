/* audit_gov.h - the governance records of the audit log (docs/governance.md)
 * and their replay.
 *
 * Besides aggregations and operators' actions the log holds:
 *   promotion  the gate's decision on a candidate version (the current
 *              model), with the evaluation statements it rests on in the
 *              same record;
 *   rollback   the last promoted version committed again as a new version,
 *              byte for byte (its model digest), after a rejection or by an
 *              operator;
 *   channel    a release channel pointed at a version, by the gate or an
 *              operator;
 * and aggregation records carry the participants' signed data statements
 * (what each trained its update on).
 *
 * The replay (fa_audit_gov) reads records in log order and keeps what they
 * establish: every version the log made (its digest, parent, how it was
 * made, its decision), the promoted history, the channels, the counts.
 * Checking as it goes, it reports every record whose content does not
 * follow from the records before it: a decision whose figures are not
 * those of its statements or whose outcome, baseline or action the rule
 * does not give (audit/promotion.h), a version decided twice, a rollback to
 * anything but the last promoted version, a channel on a version the gate
 * did not promote, a round trained from a version the gate rejected and
 * rolled back, a data statement that does not verify or is not of the
 * record's round and model.  `fedagg audit verify` runs it over the whole
 * log, `fedagg audit lineage` and the aggregator's model cards build on it
 * (audit/lineage.h), and the aggregator replays its own log with it at
 * start.
 *
 * Sans-I/O: decoded records in, findings through a callback.
 */
#ifndef FA_AUDIT_GOV_H
#define FA_AUDIT_GOV_H

#include <stddef.h>
#include <stdint.h>

#include "audit/audit_log.h"
#include "audit/promotion.h"

/* Which governance record r is: 0 (none), or one of these. */
enum { FA_GOV_NONE = 0, FA_GOV_PROMOTION, FA_GOV_ROLLBACK, FA_GOV_CHANNEL };
int fa_audit_gov_kind(const Fedagg__AuditRecord *r);

/* The record rules of a governance record, and of the data statements of
 * an aggregation (sizes, names, the model fields a kind allows).  Returns
 * 0 or FA_ERR_INVAL with why. */
int fa_audit_gov_check(const Fedagg__AuditRecord *r, char *why, size_t why_len);

/* How a version came to be. */
enum { FA_GOV_MADE_INITIAL = 0, FA_GOV_MADE_ROUND, FA_GOV_MADE_ROLLBACK };

/* What the log says of one version. */
typedef struct fa_gov_version {
    uint64_t version;
    uint8_t sha256[32];
    int made;           /* FA_GOV_MADE_* */
    int64_t made_at;    /* the record that made it; -1 for the initial model */
    uint64_t parent;    /* the version its round trained from (made by a round) */
    uint64_t restored;  /* FA_GOV_MADE_ROLLBACK: the promoted version it restores */
    int outcome;        /* FA_PROMO_WAIT (undecided), PROMOTED, REJECTED, EXPIRED */
    int action;         /* of a rejection: FA_PROMO_ACT_* */
    double value;       /* the decision's figure */
    int64_t decided_at; /* the decision record; -1 when undecided */
    int64_t trained_at; /* the aggregation that trained from it; -1 when none */
} fa_gov_version;

/* A channel as the log leaves it. */
typedef struct fa_gov_channel {
    char name[64];
    uint64_t version;
    int64_t moved_at; /* the record that put it there */
    char by[64];      /* the operator, "" for the gate */
} fa_gov_channel;

typedef struct fa_audit_gov fa_audit_gov;

/* Findings: severity FA_AUDIT_PROBLEM or FA_AUDIT_NOTE, the record index. */
typedef void (*fa_audit_gov_finding)(void *ctx, int severity, int64_t index, const char *msg);

/* keys (borrowed: they must outlive g; may be NULL) verify the data
 * statements; a region without one is counted, not checked.  finding may
 * be NULL.  Returns 0 or FA_ERR_NOMEM. */
int fa_audit_gov_new(fa_audit_gov **out, const fa_audit_region_key *keys, size_t nkeys,
                     fa_audit_gov_finding finding, void *ctx, fa_error *err);
void fa_audit_gov_del(fa_audit_gov *g);

/* The model of an empty log: version (the initial model) with its digest,
 * as the first record will name it.  No-op once a record was replayed.
 * Returns 0 or FA_ERR_NOMEM. */
int fa_audit_gov_initial(fa_audit_gov *g, uint64_t version, const uint8_t sha256[32]);

/* Record `index` of the log (every record, in order).  Returns 0, or
 * FA_ERR_NOMEM (the replay is then incomplete). */
int fa_audit_gov_record(fa_audit_gov *g, uint64_t index, const Fedagg__AuditRecord *r);

/* What the replay holds.  Pointers are valid until the next record. */
size_t fa_audit_gov_versions(const fa_audit_gov *g);
const fa_gov_version *fa_audit_gov_version_at(const fa_audit_gov *g, size_t i);
const fa_gov_version *fa_audit_gov_find(const fa_audit_gov *g, uint64_t version);
/* The promoted versions, oldest first (the rule's history). */
size_t fa_audit_gov_promoted(const fa_audit_gov *g, const fa_promo_entry **h);
size_t fa_audit_gov_channels(const fa_audit_gov *g);
const fa_gov_channel *fa_audit_gov_channel_at(const fa_audit_gov *g, size_t i);
const fa_gov_channel *fa_audit_gov_channel(const fa_audit_gov *g, const char *name);

typedef struct fa_gov_counts {
    uint64_t promotions, rejections, expirations, rollbacks, channel_moves;
    uint64_t rejections_in_a_row; /* since the last promotion */
    uint64_t data_signatures;     /* data statements whose signature verified */
    uint64_t data_unknown;        /* data statements of regions without a key */
    int gate_seen;                /* a decision is in the log */
} fa_gov_counts;
void fa_audit_gov_counts(const fa_audit_gov *g, fa_gov_counts *out);

/* The current model: the last record's new version (UINT64_MAX: no record). */
uint64_t fa_audit_gov_current(const fa_audit_gov *g);

/* A channel name: [a-z0-9._-]{1,63}. */
int fa_audit_gov_channel_name_ok(const char *name);

#endif
