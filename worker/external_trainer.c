/* external_trainer.c - local rounds by a user's command, any model
 * (external_trainer.h).  The input and output files and their checks are
 * here; the process is worker/trainer_process.c, the long-lived session
 * worker/trainer_session.c. */
#include "worker/external_trainer.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fa_file.h"
#include "common/fa_log.h"
#include "common/fa_time.h"
#include "config.pb-c.h"
#include "worker/local_tensors.h"
#include "worker/trainer_process.h"
#include "worker/trainer_session.h"

#define MAX_RESULT_BYTES ((size_t)1 << 20)

struct fa_external_trainer {
    fa_external_opts o;
    fa_trainer_session *session; /* long-lived, created on the first task */
    char scratch[PATH_MAX];
    char in_path[PATH_MAX + 64], out_path[PATH_MAX + 64], res_path[PATH_MAX + 64],
        log_path[PATH_MAX + 64];
};

void fa_external_opts_default(fa_external_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->timeout_s = 3600;
    o->kill_grace_ms = 10000; /* a trainer tearing a torchrun group down takes a while */
    o->preempt_grace_ms = 20000;
    o->start_timeout_s = 600;
}

static int check_env_entry(const char *e, size_t i, fa_error *err)
{
    const char *eq = e ? strchr(e, '=') : NULL;
    if (!eq || eq == e)
        return fa_errorf(err, FA_ERR_INVAL, "trainer.external.env[%zu] \"%s\" is not KEY=VALUE", i,
                         e ? e : "");
    return 0;
}

static int check_opts(const fa_external_opts *o, fa_error *err)
{
    if (!o->argv || o->argc == 0 || !o->argv[0] || !o->argv[0][0])
        return fa_errorf(err, FA_ERR_INVAL,
                         "trainer.external.command is empty: give the argv of the command, e.g. "
                         "command: [\"python3\", \"train.py\", \"{input}\", \"{output}\"]");
    if (o->timeout_s == 0)
        return fa_errorf(err, FA_ERR_INVAL, "trainer.external.timeout_s must be at least 1");
    if (o->long_lived && o->start_timeout_s == 0)
        return fa_errorf(err, FA_ERR_INVAL, "trainer.external.start_timeout_s must be at least 1");
    if (!o->scratch_dir || !o->scratch_dir[0])
        return fa_errorf(err, FA_ERR_INVAL, "external trainer: no scratch directory");
    for (size_t i = 0; i < o->n_env; i++) {
        int rc = check_env_entry(o->env[i], i, err);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int fa_external_opts_from_proto(fa_external_opts *o, const struct Fedagg__ExternalTrainer *pb,
                                const char *state_dir, int local_keep, fa_error *err)
{
    int w;

    fa_external_opts_default(o);
    if (!pb || pb->n_command == 0 || !pb->command[0] || !pb->command[0][0])
        return fa_errorf(err, FA_ERR_INVAL,
                         "trainer.external.command is empty: give the argv of the command, e.g. "
                         "command: [\"python3\", \"train.py\", \"{input}\", \"{output}\"]");
    if (!state_dir || !state_dir[0])
        return fa_errorf(err, FA_ERR_INVAL, "external trainer: state_dir is not set");
    o->argv = (const char *const *)pb->command;
    o->argc = pb->n_command;
    o->env = (const char *const *)pb->env;
    o->n_env = pb->n_env;
    for (size_t i = 0; i < o->n_env; i++) {
        int rc = check_env_entry(o->env[i], i, err);
        if (rc != 0)
            return rc;
    }
    o->timeout_s = pb->timeout_s;
    if (o->timeout_s == 0)
        return fa_errorf(err, FA_ERR_INVAL, "trainer.external.timeout_s must be at least 1");
    o->long_lived = pb->mode == FEDAGG__TRAINER_MODE__TRAINER_LONG_LIVED;
    o->start_timeout_s = pb->start_timeout_s;
    if (o->long_lived && o->start_timeout_s == 0)
        return fa_errorf(err, FA_ERR_INVAL, "trainer.external.start_timeout_s must be at least 1");
    w = snprintf(o->scratch_buf, sizeof(o->scratch_buf), "%s/external", state_dir);
    if (w < 0 || (size_t)w >= sizeof(o->scratch_buf))
        return fa_errorf(err, FA_ERR_INVAL, "external trainer: state_dir is too long");
    o->scratch_dir = o->scratch_buf;
    if (pb->workdir && pb->workdir[0]) {
        if (pb->workdir[0] == '/')
            w = snprintf(o->workdir_buf, sizeof(o->workdir_buf), "%s", pb->workdir);
        else
            w = snprintf(o->workdir_buf, sizeof(o->workdir_buf), "%s/%s", state_dir, pb->workdir);
        if (w < 0 || (size_t)w >= sizeof(o->workdir_buf))
            return fa_errorf(err, FA_ERR_INVAL, "trainer.external.workdir is too long");
    } else {
        /* the worker's state directory, as config.proto documents */
        w = snprintf(o->workdir_buf, sizeof(o->workdir_buf), "%s", state_dir);
        if (w < 0 || (size_t)w >= sizeof(o->workdir_buf))
            return fa_errorf(err, FA_ERR_INVAL, "external trainer: state_dir is too long");
    }
    o->workdir = o->workdir_buf;
    if (local_keep) {
        w = snprintf(o->local_buf, sizeof(o->local_buf), "%s/" FA_LOCAL_TENSORS_FILE, state_dir);
        if (w < 0 || (size_t)w >= sizeof(o->local_buf))
            return fa_errorf(err, FA_ERR_INVAL, "external trainer: state_dir is too long");
        o->local_path = o->local_buf;
    }
    return 0;
}

int fa_external_trainer_new(fa_external_trainer **out, const fa_external_opts *o, fa_error *err)
{
    fa_external_trainer *x;
    int rc;

    *out = NULL;
    if (!o)
        return fa_errorf(err, FA_ERR_INVAL, "external trainer: no options");
    if ((rc = check_opts(o, err)) != 0)
        return rc;
    x = calloc(1, sizeof(*x));
    if (!x)
        return fa_errorf(err, FA_ERR_NOMEM, "external trainer: out of memory");
    x->o = *o;
    /* the copies of the buffers, not the caller's */
    if (o->scratch_dir == o->scratch_buf)
        x->o.scratch_dir = x->o.scratch_buf;
    if (o->workdir == o->workdir_buf)
        x->o.workdir = x->o.workdir_buf;
    if (o->local_path == o->local_buf)
        x->o.local_path = x->o.local_buf;
    *out = x;
    return 0;
}

void fa_external_trainer_del(fa_external_trainer *x)
{
    if (!x)
        return;
    fa_trainer_session_del(x->session);
    free(x);
}

/* ---------------------------------------------------------------------- */
/* Files                                                                   */
/* ---------------------------------------------------------------------- */

/* The scratch directory and the paths in it; no stale output or results. */
static int prepare_scratch(fa_external_trainer *x, fa_error *err)
{
    int rc = fa_file_mkdirs(x->o.scratch_dir, 0700, err);
    if (rc != 0)
        return rc;
    if (!realpath(x->o.scratch_dir, x->scratch))
        return fa_errorf(err, FA_ERR_IO, "external trainer: %s: %s", x->o.scratch_dir,
                         strerror(errno));
    snprintf(x->in_path, sizeof(x->in_path), "%s/" FA_EXTERNAL_INPUT, x->scratch);
    snprintf(x->out_path, sizeof(x->out_path), "%s/" FA_EXTERNAL_OUTPUT, x->scratch);
    snprintf(x->res_path, sizeof(x->res_path), "%s/" FA_EXTERNAL_RESULT, x->scratch);
    snprintf(x->log_path, sizeof(x->log_path), "%s/" FA_EXTERNAL_LOG, x->scratch);
    /* A stale output from an earlier round must never pass for this one. */
    if (unlink(x->out_path) != 0 && errno != ENOENT)
        return fa_errorf(err, FA_ERR_IO, "external trainer: cannot remove stale %s: %s",
                         x->out_path, strerror(errno));
    if (unlink(x->res_path) != 0 && errno != ENOENT)
        return fa_errorf(err, FA_ERR_IO, "external trainer: cannot remove stale %s: %s",
                         x->res_path, strerror(errno));
    return 0;
}

/* <scratch>/external-input.safetensors: the global model, non-federated
 * tensors from local when given. */
static int write_input(fa_external_trainer *x, const fa_external_model *m,
                       const fa_safetensors *local, fa_error *err)
{
    size_t nm = fa_st_metadata_count(m->st), n = 0;
    const char **meta = calloc(2 * (nm + 3), sizeof(char *));
    char round_s[32], version_s[32];
    int rc;

    if (!meta)
        return fa_errorf(err, FA_ERR_NOMEM, "external trainer: out of memory");
    for (size_t i = 0; i < nm; i++) {
        const char *k, *v;
        fa_st_metadata_at(m->st, i, &k, &v);
        if (!strcmp(k, FA_TENSORS_META_KEY))
            continue; /* fa_tensors_save writes it from the table */
        meta[2 * n] = k;
        meta[2 * n + 1] = v;
        n++;
    }
    snprintf(round_s, sizeof(round_s), "%" PRIu64, m->round);
    snprintf(version_s, sizeof(version_s), "%" PRIu64, m->version);
    meta[2 * n] = "fedagg.round";
    meta[2 * n + 1] = round_s;
    n++;
    meta[2 * n] = "fedagg.version";
    meta[2 * n + 1] = version_s;
    n++;
    if (x->o.region) {
        meta[2 * n] = "fedagg.region";
        meta[2 * n + 1] = x->o.region;
        n++;
    }
    rc = fa_tensors_save(x->in_path, 0600, m->table, m->fed, (size_t)fa_tensors_fed_numel(m->table),
                         local ? local : m->st, 0, meta, n, err);
    if (rc != 0)
        fa_error_prefix(err, rc, "external trainer: writing the global model for the trainer");
    free(meta);
    return rc;
}

/* A positive decimal integer, digits only. */
static int parse_count(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (!s || !*s || strlen(s) > 20)
        return -1;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
            return -1;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (v == 0)
        return -1;
    *out = v;
    return 0;
}

/* Opens and checks the output; fed gets its federated tensors. */
static int read_output(const fa_external_trainer *x, const fa_tensors *t, float *fed,
                       fa_safetensors **out, fa_error *err)
{
    fa_safetensors *st = NULL;
    struct stat sb;
    int rc;

    *out = NULL;
    if (stat(x->out_path, &sb) != 0)
        return fa_errorf(err, FA_ERR_NOTFOUND,
                         "external trainer exited with status 0 but wrote no output %s",
                         x->out_path);
    rc = fa_st_open(&st, x->out_path, err);
    if (rc != 0) {
        fa_error_prefix(err, rc, "external trainer output");
        /* whatever is wrong with the file (header too big, unknown dtype...)
         * it is not valid safetensors */
        rc = rc == FA_ERR_NOMEM || rc == FA_ERR_IO ? rc : FA_ERR_PARSE;
        if (err)
            err->code = rc;
        return rc;
    }
    rc = fa_tensors_check(t, st, "the trainer's output", err);
    if (rc == 0)
        rc = fa_tensors_read_fed(t, st, fed, (size_t)fa_tensors_fed_numel(t), 1,
                                 "the trainer's output", err);
    if (rc != 0) {
        fa_error_prefix(err, rc, "external trainer output %s refused", x->out_path);
        fa_st_del(st);
        return rc;
    }
    *out = st;
    return 0;
}

/* The results file of a one-shot task, when the trainer wrote one. */
static int read_results(const fa_external_trainer *x, fa_trainer_result *r, int *present,
                        fa_error *err)
{
    uint8_t *data = NULL;
    size_t len = 0;
    char what[PATH_MAX + 80];
    int rc;

    fa_trainer_result_init(r);
    *present = 0;
    rc = fa_file_read_all(x->res_path, &data, &len, MAX_RESULT_BYTES, err);
    if (rc == FA_ERR_NOTFOUND)
        return 0;
    if (rc != 0)
        return fa_error_prefix(err, rc, "external trainer results");
    snprintf(what, sizeof(what), "external trainer results %s", x->res_path);
    rc = fa_trainer_result_parse(r, (const char *)data, len, what, err);
    free(data);
    *present = rc == 0;
    return rc;
}

/* ---------------------------------------------------------------------- */
/* Running a task                                                          */
/* ---------------------------------------------------------------------- */

static void free_argv(char **argv, size_t n)
{
    if (!argv)
        return;
    for (size_t i = 0; i < n; i++)
        free(argv[i]);
    free(argv);
}

static char **make_argv(const fa_external_trainer *x, const char *result)
{
    char **argv = calloc(x->o.argc + 1, sizeof(char *));
    if (!argv)
        return NULL;
    for (size_t i = 0; i < x->o.argc; i++) {
        argv[i] = fa_trainer_substitute(x->o.argv[i] ? x->o.argv[i] : "", x->in_path, x->out_path,
                                        result);
        if (!argv[i]) {
            free_argv(argv, x->o.argc);
            return NULL;
        }
    }
    return argv;
}

/* One-shot: the command runs the task once. */
static int run_once(fa_external_trainer *x, const char *task, const fa_external_model *m,
                    fa_external_result *res, fa_error *err)
{
    char env_in[PATH_MAX + 96], env_out[PATH_MAX + 96], env_res[PATH_MAX + 96], env_task[64],
        env_round[64], env_version[64], env_region[192], end[128], tail[256];
    char *ours[7];
    size_t n_ours = 0;
    char **argv = NULL, **envp = NULL;
    fa_trainer_proc p;
    double deadline;
    int rc, w;

    argv = make_argv(x, x->res_path);
    snprintf(env_in, sizeof(env_in), "FEDAGG_INPUT=%s", x->in_path);
    snprintf(env_out, sizeof(env_out), "FEDAGG_OUTPUT=%s", x->out_path);
    snprintf(env_res, sizeof(env_res), "FEDAGG_RESULT=%s", x->res_path);
    snprintf(env_task, sizeof(env_task), "FEDAGG_TASK=%s", task);
    snprintf(env_round, sizeof(env_round), "FEDAGG_ROUND=%" PRIu64, m->round);
    snprintf(env_version, sizeof(env_version), "FEDAGG_VERSION=%" PRIu64, m->version);
    ours[n_ours++] = env_in;
    ours[n_ours++] = env_out;
    ours[n_ours++] = env_res;
    ours[n_ours++] = env_task;
    ours[n_ours++] = env_round;
    ours[n_ours++] = env_version;
    if (x->o.region) {
        snprintf(env_region, sizeof(env_region), "FEDAGG_REGION=%s", x->o.region);
        ours[n_ours++] = env_region;
    }
    envp = argv ? fa_trainer_env(ours, n_ours, x->o.env, x->o.n_env) : NULL;
    if (!argv || !envp) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "external trainer: out of memory");
        goto out;
    }
    {
        /* One log over the rounds, a mark before each (the kit prints a
         * summary per round); started afresh beyond FA_EXTERNAL_LOG_MAX. */
        struct stat lst;
        FILE *lf;
        if (stat(x->log_path, &lst) == 0 && lst.st_size > FA_EXTERNAL_LOG_MAX)
            unlink(x->log_path);
        if ((lf = fopen(x->log_path, "a")) != NULL) {
            fprintf(lf, "--- fedagg-worker: %s, round %" PRIu64 ", model version %" PRIu64 " ---\n",
                    task, m->round, m->version);
            fclose(lf);
        }
    }
    rc = fa_trainer_proc_spawn(&p, argv, envp, x->o.workdir ? x->o.workdir : x->scratch,
                               x->log_path, 1, err);
    if (rc != 0)
        goto out;
    fa_log_info("external trainer started", "pid=%d task=%s timeout_s=%u", (int)p.pid, task,
                x->o.timeout_s);
    deadline = p.started + (double)x->o.timeout_s;
    w = fa_trainer_proc_wait(&p, deadline, x->o.cancel);
    if (w == 0) {
        /* Too late, or stopped: the whole group gets SIGTERM, then SIGKILL.
         * A stop is the worker's SIGTERM forwarded (preemption), with the
         * grace the trainer has to save its own state. */
        int cancelled = x->o.cancel && *x->o.cancel;
        if (cancelled)
            fa_log_info("forwarding SIGTERM to the external trainer", "pid=%d grace_ms=%u",
                        (int)p.pid, x->o.preempt_grace_ms);
        fa_trainer_proc_stop(&p, cancelled ? x->o.preempt_grace_ms : x->o.kill_grace_ms);
        res->seconds = fa_time_mono_s() - p.started;
        fa_trainer_log_tail(x->log_path, tail, sizeof(tail));
        if (cancelled) {
            fa_trainer_proc_describe_end(&p, end, sizeof(end), NULL);
            rc = fa_errorf(err, FA_ERR_CANCELLED,
                           "external trainer `%s` stopped: the worker is shutting down; after "
                           "the forwarded SIGTERM it %s",
                           p.cmd, end);
        } else
            rc = fa_errorf(err, FA_ERR_TIMEOUT,
                           "external trainer `%s` still ran after timeout_s=%u; its process "
                           "group was killed%s%s",
                           p.cmd, x->o.timeout_s, tail[0] ? "; last output: " : "", tail);
        goto out;
    }
    /* The command has exited (a launcher such as torchrun after its ranks);
     * stragglers of its group go now. */
    fa_trainer_proc_finish(&p);
    res->seconds = fa_time_mono_s() - p.started;
    if (w < 0) {
        rc = fa_errorf(err, FA_ERR_CHILD, "external trainer `%s`: waitpid failed: %s", p.cmd,
                       strerror(-w));
        goto out;
    }
    fa_trainer_proc_describe_end(&p, end, sizeof(end), &res->exit_status);
    if (res->exit_status != 0) {
        fa_trainer_log_tail(x->log_path, tail, sizeof(tail));
        rc = fa_errorf(err, FA_ERR_CHILD, "external trainer `%s` %s%s%s", p.cmd, end,
                       tail[0] ? "; last output: " : "", tail);
    }
out:
    free_argv(argv, x->o.argc);
    free(envp);
    return rc;
}

/* Long-lived: the session's trainer runs the task. */
static int run_session(fa_external_trainer *x, const char *task, const fa_external_model *m,
                       fa_external_result *res, fa_error *err)
{
    fa_trainer_round_msg msg;
    double t0 = fa_time_mono_s();
    int rc;

    if (!x->session) {
        char env_in[PATH_MAX + 96], env_out[PATH_MAX + 96], env_region[192];
        char **env = calloc(x->o.n_env + 3, sizeof(char *));
        char **argv = make_argv(x, NULL);
        fa_trainer_session_opts so;
        size_t n = 0;

        if (!env || !argv) {
            free(env);
            free_argv(argv, x->o.argc);
            return fa_errorf(err, FA_ERR_NOMEM, "external trainer: out of memory");
        }
        /* the paths are the same every round: also in the environment */
        snprintf(env_in, sizeof(env_in), "FEDAGG_INPUT=%s", x->in_path);
        snprintf(env_out, sizeof(env_out), "FEDAGG_OUTPUT=%s", x->out_path);
        env[n++] = env_in;
        env[n++] = env_out;
        if (x->o.region) {
            snprintf(env_region, sizeof(env_region), "FEDAGG_REGION=%s", x->o.region);
            env[n++] = env_region;
        }
        for (size_t i = 0; i < x->o.n_env; i++)
            env[n++] = (char *)x->o.env[i];
        memset(&so, 0, sizeof(so));
        so.argv = argv;
        so.env = env;
        so.n_env = n;
        so.workdir = x->o.workdir ? x->o.workdir : x->scratch;
        so.scratch_dir = x->scratch;
        so.log_path = x->log_path;
        so.start_timeout_s = x->o.start_timeout_s;
        so.timeout_s = x->o.timeout_s;
        so.kill_grace_ms = x->o.kill_grace_ms;
        so.cancel = x->o.cancel;
        so.preempt_grace_ms = x->o.preempt_grace_ms;
        rc = fa_trainer_session_new(&x->session, &so, err); /* copies */
        free(env);
        free_argv(argv, x->o.argc);
        if (rc != 0)
            return rc;
    }
    memset(&msg, 0, sizeof(msg));
    msg.task = task;
    msg.round = m->round;
    msg.version = m->version;
    msg.region = x->o.region;
    msg.input = x->in_path;
    msg.output = !strcmp(task, "train") ? x->out_path : NULL;
    rc = fa_trainer_session_round(x->session, &msg, &res->r, err);
    res->seconds = fa_time_mono_s() - t0;
    return rc;
}

/* Writes the input and runs task; for one-shot the results file is read. */
static int run_task(fa_external_trainer *x, const char *task, const fa_external_model *m,
                    fa_external_result *res, fa_tensors **lt, fa_error *err)
{
    fa_safetensors *local = NULL;
    int rc, present = 0;

    if (!m || !m->table || !m->st || (!m->fed && fa_tensors_fed_numel(m->table) > 0))
        return fa_errorf(err, FA_ERR_INVAL, "external trainer: no model");
    if ((rc = prepare_scratch(x, err)) != 0)
        return rc;
    if ((rc = fa_local_tensors_table(lt, m->table, err)) != 0)
        return rc;
    fa_local_tensors_open(&local, x->o.local_path, *lt);
    rc = write_input(x, m, local, err);
    fa_st_del(local);
    if (rc != 0)
        return rc;
    if (x->o.long_lived)
        return run_session(x, task, m, res, err);
    rc = run_once(x, task, m, res, err);
    if (rc == 0)
        rc = read_results(x, &res->r, &present, err);
    return rc;
}

int fa_external_trainer_train(fa_external_trainer *x, const fa_external_model *m, float *delta,
                              fa_external_result *res, fa_error *err)
{
    fa_external_result local;
    fa_tensors *lt = NULL;
    fa_safetensors *out = NULL;
    float *updated = NULL;
    size_t d;
    int rc;

    if (!res)
        res = &local;
    memset(res, 0, sizeof(*res));
    fa_trainer_result_init(&res->r);
    res->exit_status = -1;
    if (!x || !delta)
        return fa_errorf(err, FA_ERR_INVAL, "external trainer: NULL argument");
    rc = run_task(x, "train", m, res, &lt, err);
    if (rc != 0)
        goto out;
    d = (size_t)fa_tensors_fed_numel(m->table);
    updated = malloc(d ? d * sizeof(float) : 1);
    if (!updated) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "external trainer: out of memory");
        goto out;
    }
    if ((rc = read_output(x, m->table, updated, &out, err)) != 0)
        goto out;
    if (res->r.num_examples == 0) {
        const char *ne = fa_st_metadata_get(out, "num_examples");
        if (!ne) {
            rc = fa_errorf(err, FA_ERR_NOTFOUND,
                           "external trainer: no num_examples (the examples this round trained "
                           "on), neither in the results file %s nor in the output's "
                           "__metadata__",
                           x->res_path);
            goto out;
        }
        if (parse_count(ne, &res->r.num_examples) != 0) {
            rc = fa_errorf(err, FA_ERR_PARSE,
                           "external trainer output %s: __metadata__ num_examples \"%.40s\" is "
                           "not a positive decimal integer",
                           x->out_path, ne);
            goto out;
        }
    }
    for (size_t i = 0; i < d; i++)
        delta[i] = updated[i] - m->fed[i];
    if (lt && x->o.local_path) {
        fa_error e;
        fa_error_clear(&e);
        /* FedBN: this region's own statistics go into its next round */
        if (fa_tensors_save(x->o.local_path, 0600, lt, NULL, 0, out, 0, NULL, 0, &e) != 0) {
            char q[600];
            fa_log_warn("cannot keep the region's local tensors; the next round gets the "
                        "published ones",
                        "file=%s error=%s", x->o.local_path,
                        fa_log_quote(q, sizeof(q), fa_error_msg(&e, e.code)));
        }
    }
    fa_log_info("external trainer finished", "seconds=%.3f num_examples=%" PRIu64, res->seconds,
                res->r.num_examples);
out:
    fa_st_del(out);
    fa_tensors_del(lt);
    free(updated);
    return rc;
}

int fa_external_trainer_evaluate(fa_external_trainer *x, const fa_external_model *m,
                                 fa_external_result *res, fa_error *err)
{
    fa_external_result local;
    fa_tensors *lt = NULL;
    int rc;

    if (!res)
        res = &local;
    memset(res, 0, sizeof(*res));
    fa_trainer_result_init(&res->r);
    res->exit_status = -1;
    if (!x)
        return fa_errorf(err, FA_ERR_INVAL, "external trainer: NULL argument");
    rc = run_task(x, "evaluate", m, res, &lt, err);
    fa_tensors_del(lt);
    if (rc == 0 && !res->r.eval.present)
        rc = fa_errorf(err, FA_ERR_NOTFOUND,
                       "external trainer: the evaluate task reported no \"eval\" (one-shot: in "
                       "FEDAGG_RESULT; long-lived: in the done message)");
    return rc;
}

long fa_external_trainer_pid(const fa_external_trainer *x)
{
    long pid = x && x->session ? fa_trainer_session_pid(x->session) : -1;
    return pid > 0 ? pid : 0;
}
