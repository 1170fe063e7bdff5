/* evaluator.c - the aggregator's evaluator command.  See evaluator.h. */
#include "aggregator/evaluator.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/fa_file.h"
#include "common/fa_log.h"
#include "common/fa_proc.h"

struct fa_evaluator {
    char **argv;
    size_t argc;
    uint32_t timeout_s;
    char *dir;
    /* The one running. */
    fa_proc *proc;
    uint64_t running_version;
    uint64_t started_ms;
    /* The newest one waiting. */
    int waiting;
    uint64_t waiting_version;
    char *waiting_path;
};

int fa_evaluator_new(fa_evaluator **out, const char *const *argv, size_t argc,
                     uint32_t timeout_s, const char *dir, fa_error *err)
{
    fa_evaluator *ev;
    int rc;

    *out = NULL;
    if (argc == 0 || !argv[0] || !argv[0][0])
        return fa_errorf(err, FA_ERR_INVAL, "evaluation.command is empty");
    rc = fa_file_mkdirs(dir, 0700, err);
    if (rc != 0)
        return rc;
    ev = calloc(1, sizeof(*ev));
    if (!ev || !(ev->argv = calloc(argc + 1, sizeof(char *))) || !(ev->dir = strdup(dir))) {
        fa_evaluator_del(ev);
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < argc; i++) {
        if (!(ev->argv[i] = strdup(argv[i]))) {
            fa_evaluator_del(ev);
            return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        }
        ev->argc = i + 1;
    }
    ev->timeout_s = timeout_s ? timeout_s : 600;
    *out = ev;
    return 0;
}

void fa_evaluator_del(fa_evaluator *ev)
{
    if (!ev)
        return;
    fa_proc_del(ev->proc);
    for (size_t i = 0; i < ev->argc; i++)
        free(ev->argv[i]);
    free(ev->argv);
    free(ev->dir);
    free(ev->waiting_path);
    free(ev);
}

void fa_evaluator_request(fa_evaluator *ev, uint64_t version, const char *model_path,
                          uint64_t now_ms)
{
    char *p = strdup(model_path);
    (void)now_ms;
    if (!p) {
        fa_log(FA_LOG_WARN, "evaluator: out of memory; version not evaluated",
               "version=%" PRIu64, version);
        return;
    }
    free(ev->waiting_path);
    ev->waiting_path = p;
    ev->waiting_version = version;
    ev->waiting = 1;
}

static void path_of(const fa_evaluator *ev, const char *name, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%s", ev->dir, name);
}

/* argv with {input} and {output} replaced (each entry malloc'ed). */
static char **expand_argv(const fa_evaluator *ev, const char *input, const char *output)
{
    char **a = calloc(ev->argc + 1, sizeof(char *));
    for (size_t i = 0; a && i < ev->argc; i++) {
        const char *s = ev->argv[i];
        size_t cap = strlen(s) + 1, len = 0;
        for (const char *q = s; (q = strchr(q, '{')); q++)
            cap += strlen(input) + strlen(output);
        if (!(a[i] = malloc(cap)))
            goto fail;
        while (*s) {
            const char *rep = NULL;
            size_t skip = 0;
            if (!strncmp(s, "{input}", 7))
                rep = input, skip = 7;
            else if (!strncmp(s, "{output}", 8))
                rep = output, skip = 8;
            if (rep) {
                memcpy(a[i] + len, rep, strlen(rep));
                len += strlen(rep);
                s += skip;
            } else {
                a[i][len++] = *s++;
            }
        }
        a[i][len] = '\0';
    }
    return a;
fail:
    for (size_t i = 0; i < ev->argc; i++)
        free(a[i]);
    free(a);
    return NULL;
}

static void free_argv(char **a, size_t n)
{
    for (size_t i = 0; a && i < n; i++)
        free(a[i]);
    free(a);
}

static void start(fa_evaluator *ev, uint64_t now_ms)
{
    char out_path[4200], log_path[4200], env_in[4300], env_out[4300], env_v[64];
    const char *env[3] = {env_in, env_out, env_v};
    char **argv;
    fa_proc_opts o;
    fa_error err;
    int rc;

    path_of(ev, "evaluator-output.json", out_path, sizeof(out_path));
    path_of(ev, "evaluator.log", log_path, sizeof(log_path));
    unlink(out_path);
    snprintf(env_in, sizeof(env_in), "FEDAGG_INPUT=%s", ev->waiting_path);
    snprintf(env_out, sizeof(env_out), "FEDAGG_OUTPUT=%s", out_path);
    snprintf(env_v, sizeof(env_v), "FEDAGG_VERSION=%" PRIu64, ev->waiting_version);
    argv = expand_argv(ev, ev->waiting_path, out_path);
    ev->waiting = 0;
    if (!argv) {
        fa_log(FA_LOG_WARN, "evaluator: out of memory", "version=%" PRIu64, ev->waiting_version);
        return;
    }
    o = (fa_proc_opts){.argv = (const char *const *)argv, .argc = ev->argc, .env = env,
                       .n_env = 3, .workdir = ev->dir, .log_path = log_path};
    fa_error_clear(&err);
    rc = fa_proc_spawn(&ev->proc, &o, &err);
    free_argv(argv, ev->argc);
    if (rc != 0) {
        char q[600];
        fa_log(FA_LOG_WARN, "evaluator command failed to start", "version=%" PRIu64 " error=%s",
               ev->waiting_version, fa_log_quote(q, sizeof(q), fa_error_msg(&err, rc)));
        return;
    }
    ev->running_version = ev->waiting_version;
    ev->started_ms = now_ms;
    fa_log(FA_LOG_INFO, "evaluator started", "version=%" PRIu64 " pid=%d",
           ev->running_version, (int)fa_proc_pid(ev->proc));
}

/* The finished command's result. */
static int collect(fa_evaluator *ev, int status, fa_eval_summary *out)
{
    char out_path[4200], log_path[4200], tail[300], how[96], q[900];
    uint8_t *data = NULL;
    size_t len = 0;
    fa_error err;
    int rc;

    path_of(ev, "evaluator-output.json", out_path, sizeof(out_path));
    path_of(ev, "evaluator.log", log_path, sizeof(log_path));
    fa_error_clear(&err);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fa_proc_describe_status(status, how, sizeof(how));
        fa_proc_log_tail(log_path, tail, sizeof(tail));
        fa_log(FA_LOG_WARN, "evaluator command failed", "version=%" PRIu64 " how=\"%s\" log=%s",
               ev->running_version, how, fa_log_quote(q, sizeof(q), tail));
        return 0;
    }
    rc = fa_file_read_all(out_path, &data, &len, 1 << 20, &err);
    if (rc == 0)
        rc = fa_evaluator_parse((const char *)data, len, out_path, out, &err);
    free(data);
    if (rc != 0) {
        fa_log(FA_LOG_WARN, "evaluator result refused", "version=%" PRIu64 " error=%s",
               ev->running_version, fa_log_quote(q, sizeof(q), fa_error_msg(&err, rc)));
        return 0;
    }
    out->version = ev->running_version;
    out->regions = 1;
    fa_log(FA_LOG_INFO, "model evaluated by the evaluator command",
           "version=%" PRIu64 " examples=%" PRIu64 " accuracy=%.4f loss=%.4f", out->version,
           out->n, out->accuracy, out->loss);
    return 1;
}

int fa_evaluator_poll(fa_evaluator *ev, uint64_t now_ms, fa_eval_summary *out)
{
    int status = 0, r = 0;

    if (ev->proc) {
        int p = fa_proc_poll(ev->proc, &status);
        if (p == 0 && now_ms - ev->started_ms >= (uint64_t)ev->timeout_s * 1000u) {
            fa_proc_kill(ev->proc, 2000);
            fa_log(FA_LOG_WARN, "evaluator command timed out; its process group was killed",
                   "version=%" PRIu64 " timeout_s=%u", ev->running_version, ev->timeout_s);
            fa_proc_del(ev->proc);
            ev->proc = NULL;
        } else if (p != 0) {
            if (p == 1)
                r = collect(ev, status, out);
            fa_proc_del(ev->proc);
            ev->proc = NULL;
        }
    }
    if (!ev->proc && ev->waiting)
        start(ev, now_ms);
    return r;
}

static int get_number(json_t *o, const char *key, double *v, const char *what, fa_error *err)
{
    json_t *x = json_object_get(o, key);
    if (!x)
        return 1;
    if (!json_is_number(x))
        return fa_errorf(err, FA_ERR_INVAL, "%s: \"%s\" is not a number", what, key);
    *v = json_number_value(x);
    return 0;
}

int fa_evaluator_parse(const char *json, size_t len, const char *what, fa_eval_summary *out,
                       fa_error *err)
{
    json_error_t je;
    json_t *o = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je), *m, *v;
    double n = 0;
    const char *key;
    int rc = 0;

    memset(out, 0, sizeof(*out));
    out->loss = out->accuracy = NAN;
    if (!o || !json_is_object(o)) {
        rc = o ? fa_errorf(err, FA_ERR_PARSE, "%s: not a JSON object", what)
               : fa_errorf(err, FA_ERR_PARSE, "%s:%d:%d: %s", what, je.line, je.column, je.text);
        goto out;
    }
    if ((rc = get_number(o, "num_examples", &n, what, err)) < 0)
        goto out;
    if (rc == 1 || !(n >= 1) || n > 1e18 || n != floor(n)) {
        rc = fa_errorf(err, FA_ERR_INVAL, "%s: \"num_examples\" must be a whole number >= 1",
                       what);
        goto out;
    }
    out->n = (uint64_t)n;
    if ((rc = get_number(o, "loss", &out->loss, what, err)) < 0)
        goto out;
    if ((rc = get_number(o, "accuracy", &out->accuracy, what, err)) < 0)
        goto out;
    rc = 0;
    if (!isnan(out->loss) && !isfinite(out->loss)) {
        rc = fa_errorf(err, FA_ERR_INVAL, "%s: \"loss\" is not finite", what);
        goto out;
    }
    if (!isnan(out->accuracy) && !(out->accuracy >= 0 && out->accuracy <= 1)) {
        rc = fa_errorf(err, FA_ERR_INVAL, "%s: \"accuracy\" %g is not in [0, 1]", what,
                       out->accuracy);
        goto out;
    }
    m = json_object_get(o, "metrics");
    if (m && !json_is_object(m)) {
        rc = fa_errorf(err, FA_ERR_INVAL, "%s: \"metrics\" is not an object", what);
        goto out;
    }
    json_object_foreach(m, key, v)
    {
        if (out->n_metrics == FA_EVAL_MAX_METRICS) {
            rc = fa_errorf(err, FA_ERR_INVAL, "%s: more than %d metrics", what,
                           FA_EVAL_MAX_METRICS);
            goto out;
        }
        if (!key[0] || strlen(key) > FA_EVAL_MAX_NAME || !json_is_number(v) ||
            !isfinite(json_number_value(v))) {
            rc = fa_errorf(err, FA_ERR_INVAL,
                           "%s: metric \"%.63s\" needs a name of 1..%d bytes and a finite number",
                           what, key, FA_EVAL_MAX_NAME);
            goto out;
        }
        snprintf(out->names[out->n_metrics], sizeof(out->names[0]), "%s", key);
        out->values[out->n_metrics++] = json_number_value(v);
    }
    out->valid = 1;
out:
    json_decref(o);
    return rc;
}
