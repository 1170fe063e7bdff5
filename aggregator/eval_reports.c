/* eval_reports.c - federated evaluation reports.  See eval_reports.h. */
#include "aggregator/eval_reports.h"

#include <inttypes.h>
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fa_sha256.h"
#include "crypto/identity.h"

struct report {
    size_t member;
    uint8_t *statement, *signature; /* as sent */
    size_t statement_len;
    uint8_t body_sha[32]; /* of the whole request body: identical retries */
    uint64_t n;
    double loss, accuracy;
    size_t n_metrics;
    char names[FA_EVAL_MAX_METRICS][FA_EVAL_MAX_NAME + 1];
    double values[FA_EVAL_MAX_METRICS];
};

struct fa_eval_reports {
    char *federation_id;
    fa_eval_reports_roster roster;
    int have_version;
    uint64_t version;
    uint8_t sha256[32];
    struct report *reports;
    size_t n_reports;
    fa_eval_summary last;
    uint64_t max_examples; /* what one report may claim */
};

void fa_eval_summary_to_pb(const fa_eval_summary *s, Fedagg__EvalSummary *pb,
                           Fedagg__NamedValue *nv, Fedagg__NamedValue **nvp)
{
    fedagg__eval_summary__init(pb);
    pb->model_version = s->version;
    pb->regions = s->regions;
    pb->num_examples = s->n;
    pb->loss = s->loss;
    pb->accuracy = s->accuracy;
    for (size_t i = 0; i < s->n_metrics; i++) {
        fedagg__named_value__init(&nv[i]);
        nv[i].name = (char *)s->names[i];
        nv[i].value = s->values[i];
        nvp[i] = &nv[i];
    }
    pb->n_metrics = s->n_metrics;
    pb->metrics = nvp;
}

int fa_eval_reports_new(fa_eval_reports **out, const char *federation_id,
                        const fa_eval_reports_member *members, size_t n, uint64_t max_examples,
                        fa_error *err)
{
    fa_eval_reports *e;

    *out = NULL;
    if (max_examples > FA_EVAL_MAX_EXAMPLES)
        return fa_errorf(err, FA_ERR_INVAL,
                         "evaluation.max_region_examples %" PRIu64 " is over %" PRIu64,
                         max_examples, (uint64_t)FA_EVAL_MAX_EXAMPLES);
    if (!(e = calloc(1, sizeof(*e))))
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    e->max_examples = max_examples ? max_examples : FA_EVAL_DEFAULT_MAX_EXAMPLES;
    if (!(e->federation_id = strdup(federation_id)) ||
        fa_eval_reports_roster_copy(&e->roster, members, n, err) != 0) {
        fa_eval_reports_del(e);
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    }
    *out = e;
    return 0;
}

int fa_eval_reports_roster_copy(fa_eval_reports_roster *r, const fa_eval_reports_member *members,
                                size_t n, fa_error *err)
{
    memset(r, 0, sizeof(*r));
    if (!(r->members = calloc(n ? n : 1, sizeof(*r->members))) ||
        !(r->ids = calloc(n ? n : 1, sizeof(char *)))) {
        fa_eval_reports_roster_free(r);
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    }
    for (; r->n < n; r->n++) {
        if (!(r->ids[r->n] = strdup(members[r->n].id))) {
            fa_eval_reports_roster_free(r);
            return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        }
        r->members[r->n].id = r->ids[r->n];
        memcpy(r->members[r->n].pk, members[r->n].pk, 32);
    }
    return 0;
}

void fa_eval_reports_roster_free(fa_eval_reports_roster *r)
{
    for (size_t i = 0; i < r->n; i++)
        free(r->ids[i]);
    free(r->ids);
    free(r->members);
    memset(r, 0, sizeof(*r));
}

long fa_eval_reports_roster_find(const fa_eval_reports_roster *r, const char *id)
{
    for (size_t i = 0; id && i < r->n; i++)
        if (!strcmp(r->members[i].id, id))
            return (long)i;
    return -1;
}

static void drop_reports(fa_eval_reports *e)
{
    for (size_t i = 0; i < e->n_reports; i++) {
        free(e->reports[i].statement);
        free(e->reports[i].signature);
    }
    free(e->reports);
    e->reports = NULL;
    e->n_reports = 0;
}

void fa_eval_reports_del(fa_eval_reports *e)
{
    if (!e)
        return;
    drop_reports(e);
    fa_eval_reports_roster_free(&e->roster);
    free(e->federation_id);
    free(e);
}

void fa_eval_reports_begin(fa_eval_reports *e, uint64_t version, const uint8_t sha256[32])
{
    if (e->have_version && e->version == version && !memcmp(e->sha256, sha256, 32))
        return;
    if (e->have_version)
        fa_eval_reports_summary(e, &e->last);
    drop_reports(e);
    e->have_version = 1;
    e->version = version;
    memcpy(e->sha256, sha256, 32);
}

/* The values of a decoded statement into r, checked. */
static int take_values(const fa_eval_reports *e, const Fedagg__EvalStatement *s, struct report *r,
                       const char *region, fa_error *err)
{
    if (s->num_examples == 0)
        return fa_errorf(err, FA_ERR_INVAL, "evaluation report of %s: num_examples is 0", region);
    /* The count weights the region's values in the federated means: one
     * region claiming more examples than it can have would steer them. */
    if (s->num_examples > e->max_examples)
        return fa_errorf(err, FA_ERR_RANGE,
                         "evaluation report of %s: num_examples %" PRIu64
                         " is more than a region may claim (%" PRIu64
                         ", the aggregator's evaluation.max_region_examples)",
                         region, s->num_examples, e->max_examples);
    if (!isfinite(s->loss) && !isnan(s->loss))
        return fa_errorf(err, FA_ERR_INVAL, "evaluation report of %s: loss %g is not finite",
                         region, s->loss);
    if (!isnan(s->accuracy) && !(s->accuracy >= 0 && s->accuracy <= 1))
        return fa_errorf(err, FA_ERR_INVAL, "evaluation report of %s: accuracy %g is not in [0, 1]",
                         region, s->accuracy);
    if (s->n_metrics > FA_EVAL_MAX_METRICS)
        return fa_errorf(err, FA_ERR_INVAL,
                         "evaluation report of %s: %zu metrics; at most %d are taken", region,
                         s->n_metrics, FA_EVAL_MAX_METRICS);
    r->n = s->num_examples;
    r->loss = s->loss;
    r->accuracy = s->accuracy;
    r->n_metrics = s->n_metrics;
    for (size_t i = 0; i < s->n_metrics; i++) {
        const char *name = s->metrics[i]->name;
        size_t len = name ? strlen(name) : 0;
        if (len == 0 || len > FA_EVAL_MAX_NAME)
            return fa_errorf(err, FA_ERR_INVAL,
                             "evaluation report of %s: metric %zu has an empty name or one over "
                             "%d bytes",
                             region, i, FA_EVAL_MAX_NAME);
        for (size_t k = 0; k < len; k++) {
            char c = name[k];
            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '.' || c == '-'))
                return fa_errorf(err, FA_ERR_INVAL,
                                 "evaluation report of %s: metric name '%.63s' has a character "
                                 "other than [A-Za-z0-9_.-]",
                                 region, name);
        }
        for (size_t k = 0; k < i; k++)
            if (!strcmp(r->names[k], name))
                return fa_errorf(err, FA_ERR_INVAL,
                                 "evaluation report of %s: metric '%s' given twice", region, name);
        if (!isfinite(s->metrics[i]->value))
            return fa_errorf(err, FA_ERR_INVAL,
                             "evaluation report of %s: metric '%s' is not finite", region, name);
        snprintf(r->names[i], sizeof(r->names[i]), "%s", name);
        r->values[i] = s->metrics[i]->value;
    }
    return 0;
}

/* The example-weighted means of reports[0..n) (the first `extra` of them
 * included once more, as a candidate): 0, or FA_ERR_RANGE when a count or a
 * weighted sum overflows (a sum of counts over 2^64, a mean that is not
 * finite although its values are), naming what in *what. */
static int summarize(const struct report *reports, size_t n, const struct report *extra,
                     fa_eval_summary *out, const char **what)
{
    double wl = 0, wa = 0, sl = 0, sa = 0;
    size_t total = n + (extra != NULL);

    memset(out, 0, sizeof(*out));
    *what = NULL;
    if (total == 0)
        return 0;
    out->valid = 1;
    out->regions = (uint32_t)total;
    for (size_t i = 0; i < total; i++) {
        const struct report *r = i < n ? &reports[i] : extra;
        if (__builtin_add_overflow(out->n, r->n, &out->n)) {
            *what = "num_examples";
            return FA_ERR_RANGE;
        }
        if (!isnan(r->loss)) {
            sl += (double)r->n * r->loss;
            wl += (double)r->n;
        }
        if (!isnan(r->accuracy)) {
            sa += (double)r->n * r->accuracy;
            wa += (double)r->n;
        }
    }
    out->loss = wl > 0 ? sl / wl : NAN;
    out->accuracy = wa > 0 ? sa / wa : NAN;
    if (wl > 0 && !isfinite(out->loss)) {
        *what = "loss";
        return FA_ERR_RANGE;
    }
    if (wa > 0 && !isfinite(out->accuracy)) {
        *what = "accuracy";
        return FA_ERR_RANGE;
    }
    /* Each metric over the reports that have it, in order of first sight. */
    for (size_t i = 0; i < total; i++) {
        const struct report *ri = i < n ? &reports[i] : extra;
        for (size_t k = 0; k < ri->n_metrics; k++) {
            const char *name = ri->names[k];
            size_t j = 0;
            while (j < out->n_metrics && strcmp(out->names[j], name))
                j++;
            if (j == out->n_metrics && j < FA_EVAL_MAX_METRICS) {
                double s = 0, w = 0;
                for (size_t q = i; q < total; q++) {
                    const struct report *rq = q < n ? &reports[q] : extra;
                    for (size_t p = 0; p < rq->n_metrics; p++)
                        if (!strcmp(rq->names[p], name)) {
                            s += (double)rq->n * rq->values[p];
                            w += (double)rq->n;
                        }
                }
                snprintf(out->names[j], sizeof(out->names[j]), "%s", name);
                out->values[j] = w > 0 ? s / w : NAN;
                out->n_metrics++;
                if (w > 0 && !isfinite(out->values[j])) {
                    *what = ri->names[k];
                    return FA_ERR_RANGE;
                }
            }
        }
    }
    return 0;
}

/* Whether the means stay finite with r added: the report whose weighted
 * values would overflow them is refused, and the means stand as they were. */
static int check_means(const fa_eval_reports *e, const struct report *r, const char *region,
                       fa_error *err)
{
    fa_eval_summary sum;
    const char *what;

    if (summarize(e->reports, e->n_reports, r, &sum, &what) == 0)
        return 0;
    return fa_errorf(err, FA_ERR_RANGE,
                     "evaluation report of %s: its %s over %" PRIu64
                     " examples would make the federated mean overflow; not taken",
                     region, what, r->n);
}

int fa_eval_reports_submit(fa_eval_reports *e, const char *region, const uint8_t *body, size_t len,
                           fa_error *err)
{
    Fedagg__SignedEval *se = NULL;
    Fedagg__EvalStatement *s = NULL;
    struct report r, *grown;
    long m = fa_eval_reports_roster_find(&e->roster, region);
    int rc = 0;

    memset(&r, 0, sizeof(r));
    if (m < 0)
        return fa_errorf(err, FA_ERR_AUTH, "region '%s' is not a member of federation %s",
                         region ? region : "", e->federation_id);
    if (!e->have_version)
        return fa_errorf(err, FA_ERR_REPLAY, "no model version is being evaluated");
    if (fa_sha256(r.body_sha, body, len) != 0)
        return fa_errorf(err, FA_ERR_CRYPTO, "evaluation report: SHA-256 failed");
    for (size_t i = 0; i < e->n_reports; i++)
        if (e->reports[i].member == (size_t)m) {
            if (!sodium_memcmp(e->reports[i].body_sha, r.body_sha, 32))
                return 0; /* a retry */
            return fa_errorf(err, FA_ERR_EXISTS,
                             "region %s already reported a different evaluation of version "
                             "%" PRIu64,
                             region, e->version);
        }
    se = fedagg__signed_eval__unpack(NULL, len, body);
    if (!se || se->signature.len != 64 || se->statement.len == 0) {
        rc = fa_errorf(err, FA_ERR_PARSE,
                       "evaluation report of %s does not decode as a SignedEval with a 64-byte "
                       "signature",
                       region);
        goto out;
    }
    rc = fa_identity_verify_statement(e->roster.members[m].pk, FA_IDENTITY_DOMAIN_EVAL,
                                      se->statement.data, se->statement.len, se->signature.data);
    if (rc == FA_ERR_NOMEM) {
        rc = fa_errorf(err, rc, "evaluation report of %s: out of memory", region);
        goto out;
    }
    if (rc != 0) {
        rc = fa_errorf(err, FA_ERR_VERIFY,
                       "evaluation report of %s: the signature does not verify with the "
                       "region's identity key",
                       region);
        goto out;
    }
    s = fedagg__eval_statement__unpack(NULL, se->statement.len, se->statement.data);
    if (!s) {
        rc = fa_errorf(err, FA_ERR_PARSE, "evaluation report of %s: the statement does not decode",
                       region);
        goto out;
    }
    if (!s->region || strcmp(s->region, region) != 0 || !s->federation_id ||
        strcmp(s->federation_id, e->federation_id) != 0) {
        rc = fa_errorf(err, FA_ERR_AUTH,
                       "evaluation report sent by %s names region '%s' of federation '%s'", region,
                       s->region ? s->region : "", s->federation_id ? s->federation_id : "");
        goto out;
    }
    if (s->model_version != e->version || s->model_sha256.len != 32 ||
        memcmp(s->model_sha256.data, e->sha256, 32) != 0) {
        rc = fa_errorf(err, FA_ERR_REPLAY,
                       "evaluation report of %s is of model version %" PRIu64
                       " (or another file); reports are taken for version %" PRIu64,
                       region, s->model_version, e->version);
        goto out;
    }
    rc = take_values(e, s, &r, region, err);
    if (rc == 0)
        rc = check_means(e, &r, region, err);
    if (rc != 0)
        goto out;
    r.member = (size_t)m;
    r.statement = malloc(se->statement.len);
    r.signature = malloc(64);
    grown = realloc(e->reports, (e->n_reports + 1) * sizeof(*grown));
    if (!r.statement || !r.signature || !grown) {
        free(r.statement);
        free(r.signature);
        if (grown)
            e->reports = grown;
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto out;
    }
    memcpy(r.statement, se->statement.data, se->statement.len);
    r.statement_len = se->statement.len;
    memcpy(r.signature, se->signature.data, 64);
    e->reports = grown;
    e->reports[e->n_reports++] = r;
out:
    if (s)
        fedagg__eval_statement__free_unpacked(s, NULL);
    if (se)
        fedagg__signed_eval__free_unpacked(se, NULL);
    return rc;
}

size_t fa_eval_reports_count(const fa_eval_reports *e)
{
    return e->n_reports;
}

void fa_eval_reports_at(const fa_eval_reports *e, size_t i, Fedagg__SignedEval *out)
{
    fedagg__signed_eval__init(out);
    out->statement.data = e->reports[i].statement;
    out->statement.len = e->reports[i].statement_len;
    out->signature.data = e->reports[i].signature;
    out->signature.len = 64;
}

void fa_eval_reports_summary(const fa_eval_reports *e, fa_eval_summary *out)
{
    const char *what;

    /* every report taken passed check_means: the sums do not overflow */
    summarize(e->reports, e->n_reports, NULL, out, &what);
    out->version = e->version;
    if (!e->have_version)
        out->valid = 0;
}

void fa_eval_reports_last(const fa_eval_reports *e, fa_eval_summary *out)
{
    *out = e->last;
}

int fa_eval_reports_restore(fa_eval_reports *e, const Fedagg__SignedEval *se, fa_error *err)
{
    Fedagg__EvalStatement *s =
        fedagg__eval_statement__unpack(NULL, se->statement.len, se->statement.data);
    size_t len = fedagg__signed_eval__get_packed_size(se);
    uint8_t *body = malloc(len ? len : 1);
    int rc;

    if (!s || !body) {
        rc = s ? fa_errorf(err, FA_ERR_NOMEM, "out of memory")
               : fa_errorf(err, FA_ERR_PARSE, "a saved evaluation report does not decode");
    } else {
        fedagg__signed_eval__pack(se, body);
        rc = fa_eval_reports_submit(e, s->region, body, len, err);
    }
    free(body);
    if (s)
        fedagg__eval_statement__free_unpacked(s, NULL);
    return rc;
}
