/* privacy_audit.c - see privacy_audit.h. */
#include "audit/privacy_audit.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crypto/identity.h"

struct fa_privacy_audit {
    const fa_audit_region_key *keys;
    size_t nkeys;
    void (*report)(void *ctx, int severity, int64_t index, const char *msg);
    void *report_ctx;
    fa_privacy_total *t;
    char **names;
    size_t n, cap;
    uint64_t problems;
};

int fa_privacy_audit_new(fa_privacy_audit **out, const fa_audit_region_key *keys, size_t nkeys,
                         void (*report)(void *ctx, int severity, int64_t index, const char *msg),
                         void *report_ctx, fa_error *err)
{
    fa_privacy_audit *pa = calloc(1, sizeof(*pa));
    *out = NULL;
    if (!pa)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    pa->keys = keys;
    pa->nkeys = nkeys;
    pa->report = report;
    pa->report_ctx = report_ctx;
    *out = pa;
    return 0;
}

void fa_privacy_audit_del(fa_privacy_audit *pa)
{
    if (!pa)
        return;
    for (size_t i = 0; i < pa->n; i++)
        free(pa->names[i]);
    free(pa->names);
    free(pa->t);
    free(pa);
}

static void say(fa_privacy_audit *pa, int severity, int64_t index, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void say(fa_privacy_audit *pa, int severity, int64_t index, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (severity == FA_AUDIT_PROBLEM)
        pa->problems++;
    if (pa->report)
        pa->report(pa->report_ctx, severity, index, msg);
}

static const uint8_t *key_of(const fa_privacy_audit *pa, const char *region)
{
    for (size_t i = 0; i < pa->nkeys; i++)
        if (!strcmp(pa->keys[i].region, region))
            return pa->keys[i].pk;
    return NULL;
}

static fa_privacy_total *total_of(fa_privacy_audit *pa, const char *region)
{
    for (size_t i = 0; i < pa->n; i++)
        if (!strcmp(pa->names[i], region))
            return &pa->t[i];
    if (pa->n == pa->cap) {
        size_t cap = pa->cap ? pa->cap * 2 : 8;
        fa_privacy_total *t = realloc(pa->t, cap * sizeof(*t));
        char **names;
        if (!t)
            return NULL;
        pa->t = t;
        if (!(names = realloc(pa->names, cap * sizeof(*names))))
            return NULL;
        pa->names = names;
        pa->cap = cap;
        for (size_t i = 0; i < pa->n; i++)
            pa->t[i].region = pa->names[i];
    }
    if (!(pa->names[pa->n] = strdup(region)))
        return NULL;
    memset(&pa->t[pa->n], 0, sizeof(pa->t[0]));
    pa->t[pa->n].region = pa->names[pa->n];
    return &pa->t[pa->n++];
}

static int participant(const Fedagg__AuditRecord *r, const char *region)
{
    for (size_t i = 0; i < r->n_participants; i++)
        if (!strcmp(r->participants[i], region))
            return 1;
    return 0;
}

uint64_t fa_privacy_audit_record(fa_privacy_audit *pa, int64_t at, const Fedagg__AuditRecord *r)
{
    uint64_t before = pa->problems;

    for (size_t k = 0; k < r->n_privacy; k++) {
        const Fedagg__SignedPrivacy *sp = r->privacy[k];
        Fedagg__PrivacyStatement *s =
            fedagg__privacy_statement__unpack(NULL, sp->statement.len, sp->statement.data);
        const uint8_t *pk;
        fa_privacy_total *t;
        const double tol = 1e-9;

        if (!s) {
            say(pa, FA_AUDIT_PROBLEM, at, "privacy statement %zu does not decode", k);
            continue;
        }
        if (!s->region || !participant(r, s->region) || !s->federation_id ||
            strcmp(s->federation_id, r->federation_id) || s->round != r->round ||
            s->attempt != r->attempt) {
            say(pa, FA_AUDIT_PROBLEM, at,
                "privacy statement %zu (region %s, round %" PRIu64 " attempt %u) is not of "
                "this record's round %" PRIu64 " attempt %u and its participants",
                k, s->region ? s->region : "?", s->round, s->attempt, r->round, r->attempt);
            fedagg__privacy_statement__free_unpacked(s, NULL);
            continue;
        }
        if (!(t = total_of(pa, s->region))) {
            say(pa, FA_AUDIT_PROBLEM, at, "out of memory");
            fedagg__privacy_statement__free_unpacked(s, NULL);
            break;
        }
        pk = key_of(pa, s->region);
        if (pk && (sp->signature.len != 64 ||
                   fa_identity_verify_statement(pk, FA_IDENTITY_DOMAIN_PRIVACY, sp->statement.data,
                                                sp->statement.len, sp->signature.data) != 0))
            say(pa, FA_AUDIT_PROBLEM, at,
                "region %s: the signature of its privacy statement does not verify with its key",
                s->region);
        else if (pk)
            t->verified++;
        if (t->statements && s->epsilon_total + tol * (1 + t->epsilon) < t->epsilon)
            say(pa, FA_AUDIT_PROBLEM, at,
                "region %s: epsilon_total fell from %g (round %" PRIu64 ") to %g (round %" PRIu64
                "): its accounting does not add up",
                s->region, t->epsilon, t->last_round, s->epsilon_total, s->round);
        if (s->epsilon_total > s->budget_epsilon * (1 + tol) + tol)
            say(pa, FA_AUDIT_PROBLEM, at,
                "region %s: epsilon %g at delta %g exceeds the budget it declared (epsilon %g)",
                s->region, s->epsilon_total, s->delta, s->budget_epsilon);
        if (s->budget_delta > 0 && s->delta > s->budget_delta * (1 + tol))
            say(pa, FA_AUDIT_PROBLEM, at,
                "region %s: delta %g exceeds the budget it declared (delta %g)", s->region,
                s->delta, s->budget_delta);
        if (t->statements && (t->budget_epsilon != s->budget_epsilon ||
                              t->budget_delta != s->budget_delta))
            say(pa, FA_AUDIT_NOTE, at,
                "region %s: its declared budget changed from epsilon %g delta %g to epsilon %g "
                "delta %g",
                s->region, t->budget_epsilon, t->budget_delta, s->budget_epsilon,
                s->budget_delta);
        if (!t->statements)
            t->first_round = s->round;
        t->statements++;
        t->last_round = s->round;
        t->epsilon = s->epsilon_total;
        t->delta = s->delta;
        t->budget_epsilon = s->budget_epsilon;
        t->budget_delta = s->budget_delta;
        snprintf(t->mechanism, sizeof(t->mechanism), "%s", s->mechanism ? s->mechanism : "");
        snprintf(t->accountant, sizeof(t->accountant), "%s", s->accountant ? s->accountant : "");
        fedagg__privacy_statement__free_unpacked(s, NULL);
    }
    return pa->problems - before;
}

size_t fa_privacy_audit_count(const fa_privacy_audit *pa)
{
    return pa->n;
}

const fa_privacy_total *fa_privacy_audit_at(const fa_privacy_audit *pa, size_t i)
{
    return i < pa->n ? &pa->t[i] : NULL;
}

uint64_t fa_privacy_audit_problems(const fa_privacy_audit *pa)
{
    return pa->problems;
}
