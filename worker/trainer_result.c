/* trainer_result.c - the results of an external trainer's round (trainer_result.h). */
#include "worker/trainer_result.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

void fa_trainer_result_init(fa_trainer_result *r)
{
    memset(r, 0, sizeof(*r));
    r->eval.loss = NAN;
    r->eval.accuracy = NAN;
}

/* An integer >= 1: a JSON integer, or a real holding one exactly. */
static int count_of(const json_t *v, uint64_t *out)
{
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        if (i < 1)
            return -1;
        *out = (uint64_t)i;
        return 0;
    }
    if (json_is_real(v)) {
        double x = json_real_value(v);
        if (!(x >= 1 && x < 18446744073709551616.0) || floor(x) != x)
            return -1;
        *out = (uint64_t)x;
        return 0;
    }
    return -1;
}

static int metrics_of(fa_trainer_metrics *m, const json_t *obj, const char *what, const char *field,
                      fa_error *err)
{
    const char *key;
    json_t *v;

    if (!json_is_object(obj))
        return fa_errorf(err, FA_ERR_PARSE, "%s: \"%s\" must be an object of named numbers", what,
                         field);
    if (json_object_size(obj) > FA_TRAINER_MAX_METRICS)
        return fa_errorf(err, FA_ERR_PARSE, "%s: \"%s\" has %zu entries, at most %d are taken",
                         what, field, json_object_size(obj), FA_TRAINER_MAX_METRICS);
    json_object_foreach((json_t *)obj, key, v)
    {
        size_t kl = strlen(key);
        if (kl == 0 || kl >= FA_TRAINER_NAME_MAX)
            return fa_errorf(err, FA_ERR_PARSE,
                             "%s: metric name \"%.40s\" in \"%s\" must have 1 to %d bytes", what,
                             key, field, FA_TRAINER_NAME_MAX - 1);
        if (!json_is_number(v) || !isfinite(json_number_value(v)))
            return fa_errorf(err, FA_ERR_PARSE,
                             "%s: metric \"%s\" in \"%s\" is not a finite number", what, key,
                             field);
        memcpy(m->names[m->n], key, kl + 1);
        m->values[m->n] = json_number_value(v);
        m->n++;
    }
    return 0;
}

int fa_trainer_result_from_json(fa_trainer_result *r, const void *json_object, const char *what,
                                fa_error *err)
{
    const json_t *o = json_object;
    const json_t *v, *e;
    int rc;

    fa_trainer_result_init(r);
    if (!what)
        what = "trainer results";
    if (!json_is_object(o))
        return fa_errorf(err, FA_ERR_PARSE, "%s: not a JSON object", what);
    v = json_object_get(o, "num_examples");
    if (v && !json_is_null(v) && count_of(v, &r->num_examples) != 0)
        return fa_errorf(err, FA_ERR_PARSE,
                         "%s: \"num_examples\" must be an integer >= 1 (the examples this round "
                         "trained on)",
                         what);
    v = json_object_get(o, "metrics");
    if (v && !json_is_null(v) && (rc = metrics_of(&r->metrics, v, what, "metrics", err)) != 0)
        return rc;
    e = json_object_get(o, "eval");
    if (!e || json_is_null(e))
        return 0;
    if (!json_is_object(e))
        return fa_errorf(err, FA_ERR_PARSE, "%s: \"eval\" must be an object", what);
    v = json_object_get(e, "num_examples");
    if (!v || count_of(v, &r->eval.num_examples) != 0)
        return fa_errorf(err, FA_ERR_PARSE,
                         "%s: \"eval.num_examples\" must be an integer >= 1 (the held-out "
                         "examples evaluated)",
                         what);
    v = json_object_get(e, "loss");
    if (v && !json_is_null(v)) {
        if (!json_is_number(v) || !isfinite(json_number_value(v)))
            return fa_errorf(err, FA_ERR_PARSE, "%s: \"eval.loss\" is not a finite number", what);
        r->eval.loss = json_number_value(v);
    }
    v = json_object_get(e, "accuracy");
    if (v && !json_is_null(v)) {
        double a = json_is_number(v) ? json_number_value(v) : NAN;
        if (!(a >= 0 && a <= 1))
            return fa_errorf(err, FA_ERR_PARSE, "%s: \"eval.accuracy\" must be a number in [0, 1]",
                             what);
        r->eval.accuracy = a;
    }
    v = json_object_get(e, "metrics");
    if (v && !json_is_null(v) &&
        (rc = metrics_of(&r->eval.metrics, v, what, "eval.metrics", err)) != 0)
        return rc;
    r->eval.present = 1;
    return 0;
}

int fa_trainer_result_parse(fa_trainer_result *r, const char *text, size_t len, const char *what,
                            fa_error *err)
{
    json_error_t je;
    json_t *o;
    int rc;

    fa_trainer_result_init(r);
    if (!what)
        what = "trainer results";
    o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!o)
        return fa_errorf(err, FA_ERR_PARSE, "%s:%d:%d: %s", what, je.line, je.column, je.text);
    rc = fa_trainer_result_from_json(r, o, what, err);
    json_decref(o);
    return rc;
}

double fa_trainer_metric(const fa_trainer_metrics *m, const char *name)
{
    for (size_t i = 0; i < m->n; i++)
        if (!strcmp(m->names[i], name))
            return m->values[i];
    return NAN;
}
