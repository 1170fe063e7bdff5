/* trainer_result.c - the results of an external trainer's round (trainer_result.h). */
#include "worker/trainer_result.h"

#include "common/fa_json.h"
#include <jansson.h>
#include <math.h>
#include <string.h>

void fa_trainer_result_init(fa_trainer_result *r)
{
    memset(r, 0, sizeof(*r));
    r->eval.loss = NAN;
    r->eval.accuracy = NAN;
    r->privacy.noise_multiplier = NAN;
    r->privacy.sampling_rate = NAN;
    r->privacy.clip = NAN;
    r->privacy.epsilon = NAN;
    r->privacy.delta = NAN;
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

/* A string of 1 to FA_TRAINER_NAME_MAX - 1 bytes into out. */
static int name_of(const json_t *v, char out[FA_TRAINER_NAME_MAX])
{
    size_t n;
    if (!json_is_string(v))
        return -1;
    n = json_string_length(v);
    if (n == 0 || n >= FA_TRAINER_NAME_MAX || memchr(json_string_value(v), '\0', n))
        return -1;
    memcpy(out, json_string_value(v), n + 1);
    return 0;
}

/* A number of privacy (absent or null: *out unchanged); lo/hi bounds, open
 * or closed as lo_open/hi_open say. */
static int number_in(const json_t *p, const char *key, double lo, int lo_open, double hi,
                     int hi_open, double *out)
{
    const json_t *v = json_object_get(p, key);
    double x;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return -1;
    x = json_number_value(v);
    if (!isfinite(x) || (lo_open ? !(x > lo) : !(x >= lo)) || (hi_open ? !(x < hi) : !(x <= hi)))
        return -1;
    *out = x;
    return 0;
}

static int privacy_of(fa_trainer_privacy *p, const json_t *o, const char *what, fa_error *err)
{
    const json_t *v;

    if (!json_is_object(o))
        return fa_errorf(err, FA_ERR_PARSE, "%s: \"privacy\" must be an object", what);
    if (name_of(json_object_get(o, "mechanism"), p->mechanism) != 0)
        return fa_errorf(err, FA_ERR_PARSE,
                         "%s: \"privacy.mechanism\" must be a name of 1 to %d bytes (\"dp-sgd\" "
                         "for DP-SGD with Poisson sampling)",
                         what, FA_TRAINER_NAME_MAX - 1);
    if (number_in(o, "noise_multiplier", 0, 0, INFINITY, 1, &p->noise_multiplier) != 0)
        return fa_errorf(err, FA_ERR_PARSE,
                         "%s: \"privacy.noise_multiplier\" must be a finite number >= 0", what);
    if (number_in(o, "sampling_rate", 0, 1, 1, 0, &p->sampling_rate) != 0)
        return fa_errorf(err, FA_ERR_PARSE, "%s: \"privacy.sampling_rate\" must be in (0, 1]",
                         what);
    if (number_in(o, "clip", 0, 1, INFINITY, 1, &p->clip) != 0)
        return fa_errorf(err, FA_ERR_PARSE, "%s: \"privacy.clip\" must be a finite number > 0",
                         what);
    if (number_in(o, "epsilon", 0, 0, INFINITY, 1, &p->epsilon) != 0)
        return fa_errorf(err, FA_ERR_PARSE,
                         "%s: \"privacy.epsilon\" must be a finite number >= 0", what);
    if (number_in(o, "delta", 0, 1, 1, 1, &p->delta) != 0)
        return fa_errorf(err, FA_ERR_PARSE, "%s: \"privacy.delta\" must be in (0, 1)", what);
    v = json_object_get(o, "steps");
    if (v && !json_is_null(v) && count_of(v, &p->steps) != 0)
        return fa_errorf(err, FA_ERR_PARSE,
                         "%s: \"privacy.steps\" must be an integer >= 1 (this round's noisy "
                         "steps)",
                         what);
    v = json_object_get(o, "accountant");
    if (v && !json_is_null(v) && name_of(v, p->accountant) != 0)
        return fa_errorf(err, FA_ERR_PARSE,
                         "%s: \"privacy.accountant\" must be a name of 1 to %d bytes", what,
                         FA_TRAINER_NAME_MAX - 1);
    p->present = 1;
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
    v = json_object_get(o, "privacy");
    if (v && !json_is_null(v) && (rc = privacy_of(&r->privacy, v, what, err)) != 0)
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
    if (!o && fa_json_out_of_memory(&je))
        return fa_errorf(err, FA_ERR_NOMEM, "%s: out of memory", what);
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
