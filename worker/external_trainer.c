/* external_trainer.c - one local round by a user's command (external_trainer.h).
 *
 * The command is started with posix_spawnp (safe in a process that already
 * runs MPI, OpenBLAS or CUDA threads: nothing but exec happens in the child),
 * in its own process group with default signal dispositions, and polled with
 * waitpid(WNOHANG) until it exits or the deadline passes. */
#include "worker/external_trainer.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/fa_file.h"
#include "common/fa_log.h"
#include "common/fa_safetensors.h"
#include "config.pb-c.h"

extern char **environ;

#define EXT_INPUT "external-input.safetensors"
#define EXT_OUTPUT "external-output.safetensors"
#define EXT_LOG "external-trainer.log"

void fa_external_opts_default(fa_external_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->timeout_s = 3600;
    o->kill_grace_ms = 2000;
}

static int check_env_entry(const char *e, size_t i, fa_error *err)
{
    const char *eq = e ? strchr(e, '=') : NULL;
    if (!eq || eq == e)
        return fa_errorf(err, FA_ERR_INVAL,
                         "trainer.external.env[%zu] \"%s\" is not KEY=VALUE", i, e ? e : "");
    return 0;
}

int fa_external_opts_from_proto(fa_external_opts *o, const struct Fedagg__ExternalTrainer *pb,
                                const char *state_dir, fa_error *err)
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
        o->workdir = o->workdir_buf;
    } else {
        /* the worker's state directory, as config.proto documents */
        w = snprintf(o->workdir_buf, sizeof(o->workdir_buf), "%s", state_dir);
        if (w < 0 || (size_t)w >= sizeof(o->workdir_buf))
            return fa_errorf(err, FA_ERR_INVAL, "external trainer: state_dir is too long");
        o->workdir = o->workdir_buf;
    }
    return 0;
}

/* ---------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(double ms)
{
    struct timespec ts;
    if (ms <= 0)
        return;
    ts.tv_sec = (time_t)(ms / 1000.0);
    ts.tv_nsec = (long)((ms - (double)ts.tv_sec * 1000.0) * 1e6);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* s with every "{input}" and "{output}" replaced; malloc'ed or NULL. */
static char *substitute(const char *s, const char *input, const char *output)
{
    size_t cap = strlen(s) + 1, len = 0;
    char *out;
    for (const char *p = s; (p = strchr(p, '{')) != NULL; p++)
        cap += strlen(input) + strlen(output); /* generous */
    out = malloc(cap);
    if (!out)
        return NULL;
    while (*s) {
        const char *rep = NULL;
        size_t skip = 0;
        if (strncmp(s, "{input}", 7) == 0) {
            rep = input;
            skip = 7;
        } else if (strncmp(s, "{output}", 8) == 0) {
            rep = output;
            skip = 8;
        }
        if (rep) {
            memcpy(out + len, rep, strlen(rep));
            len += strlen(rep);
            s += skip;
        } else {
            out[len++] = *s++;
        }
    }
    out[len] = '\0';
    return out;
}

/* The command line for messages: argv joined by spaces, shortened. */
static void describe(char *buf, size_t n, char *const *argv)
{
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; argv[i] && len + 1 < n; i++) {
        int w = snprintf(buf + len, n - len, "%s%s", i ? " " : "", argv[i]);
        if (w < 0)
            break;
        len += (size_t)w;
    }
    if (len >= n && n > 4)
        memcpy(buf + n - 4, "...", 4);
}

/* The last lines of the log (up to ~240 bytes), control characters made
 * visible, for an error message. */
static void log_tail(const char *path, char *buf, size_t n)
{
    char raw[241];
    ssize_t got;
    off_t size;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    size_t j = 0;

    buf[0] = '\0';
    if (fd < 0)
        return;
    size = lseek(fd, 0, SEEK_END);
    if (size > 0) {
        off_t from = size > (off_t)(sizeof(raw) - 1) ? size - (off_t)(sizeof(raw) - 1) : 0;
        got = pread(fd, raw, (size_t)(size - from), from);
        if (got > 0) {
            size_t a = 0, b = (size_t)got;
            while (b > 0 && (raw[b - 1] == '\n' || raw[b - 1] == ' ' || raw[b - 1] == '\r'))
                b--;
            for (size_t i = a; i < b && j + 2 < n; i++) {
                unsigned char ch = (unsigned char)raw[i];
                if (ch == '\n') {
                    buf[j++] = ' ';
                    buf[j++] = '|';
                    if (j + 1 < n)
                        buf[j++] = ' ';
                } else {
                    buf[j++] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
                }
            }
            buf[j] = '\0';
        }
    }
    close(fd);
}

/* environ, minus the keys we set, plus ours and the configured ones. */
static char **build_env(const fa_external_opts *o, char *const *ours, size_t n_ours)
{
    size_t n_env = 0, k = 0;
    char **envp;
    while (environ && environ[n_env])
        n_env++;
    envp = calloc(n_env + n_ours + o->n_env + 1, sizeof(char *));
    if (!envp)
        return NULL;
    for (size_t i = 0; i < n_env; i++) {
        int overridden = 0;
        for (size_t j = 0; j < n_ours && !overridden; j++) {
            size_t kl = (size_t)(strchr(ours[j], '=') - ours[j]);
            overridden = strncmp(environ[i], ours[j], kl + 1) == 0;
        }
        for (size_t j = 0; j < o->n_env && !overridden; j++) {
            size_t kl = (size_t)(strchr(o->env[j], '=') - o->env[j]);
            overridden = strncmp(environ[i], o->env[j], kl + 1) == 0;
        }
        if (!overridden)
            envp[k++] = environ[i];
    }
    for (size_t j = 0; j < n_ours; j++)
        envp[k++] = ours[j];
    for (size_t j = 0; j < o->n_env; j++)
        envp[k++] = (char *)o->env[j];
    envp[k] = NULL;
    return envp;
}

/* Waits for pid until deadline; returns 1 when it exited (status filled),
 * 0 on timeout, -errno on a wait error. */
static int wait_until(pid_t pid, int *status, double deadline)
{
    double pause = 1.0;
    for (;;) {
        pid_t r = waitpid(pid, status, WNOHANG);
        double left;
        if (r == pid)
            return 1;
        if (r < 0 && errno != EINTR)
            return -errno;
        left = (deadline - now_s()) * 1000.0;
        if (left <= 0)
            return 0;
        sleep_ms(pause < left ? pause : left);
        if (pause < 50.0)
            pause *= 2;
    }
}

/* Runs the command; returns 0 when it exited with status 0. */
static int run_command(const fa_external_opts *o, char *const *argv, char *const *envp,
                       const char *log_path, const char *workdir, fa_external_result *res,
                       fa_error *err)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    sigset_t none, all;
    pid_t pid = -1;
    int status = 0, w, e, rc = 0;
    double t0 = now_s(), deadline;
    char cmd[160], tail[256];

    describe(cmd, sizeof(cmd), argv);
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawn_file_actions_addchdir_np(&fa, workdir);
    /* Own process group (killed as a whole), default dispositions (a
     * SIGTERM the worker ignores must still stop the trainer), no mask. */
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                        POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setsigmask(&attr, &none);
    sigdelset(&all, SIGKILL);
    sigdelset(&all, SIGSTOP);
    posix_spawnattr_setsigdefault(&attr, &all);

    e = posix_spawnp(&pid, argv[0], &fa, &attr, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (e != 0)
        return fa_errorf(err, FA_ERR_CHILD, "external trainer `%s` could not be started: %s%s",
                         cmd, strerror(e),
                         e == ENOENT ? " (command or working directory not found)" : "");
    fa_log_info("external trainer started", "pid=%d timeout_s=%u", (int)pid, o->timeout_s);

    deadline = t0 + (double)o->timeout_s;
    w = wait_until(pid, &status, deadline);
    if (w == 0) {
        /* Too late: the whole group gets SIGTERM, then SIGKILL. */
        kill(-pid, SIGTERM);
        w = wait_until(pid, &status, now_s() + o->kill_grace_ms / 1000.0);
        if (w == 0) {
            kill(-pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
        }
        kill(-pid, SIGKILL);
        res->seconds = now_s() - t0;
        log_tail(log_path, tail, sizeof(tail));
        return fa_errorf(err, FA_ERR_TIMEOUT,
                         "external trainer `%s` still ran after timeout_s=%u; its process group "
                         "was killed%s%s",
                         cmd, o->timeout_s, tail[0] ? "; last output: " : "", tail);
    }
    /* Stragglers of the group (children it left behind) go too. */
    kill(-pid, SIGKILL);
    res->seconds = now_s() - t0;
    if (w < 0)
        return fa_errorf(err, FA_ERR_CHILD, "external trainer `%s`: waitpid failed: %s", cmd,
                         strerror(-w));
    log_tail(log_path, tail, sizeof(tail));
    if (WIFEXITED(status)) {
        res->exit_status = WEXITSTATUS(status);
        if (res->exit_status != 0)
            rc = fa_errorf(err, FA_ERR_CHILD, "external trainer `%s` exited with status %d%s%s",
                           cmd, res->exit_status, tail[0] ? "; last output: " : "", tail);
    } else if (WIFSIGNALED(status)) {
        rc = fa_errorf(err, FA_ERR_CHILD, "external trainer `%s` was killed by signal %d (%s)%s%s",
                       cmd, WTERMSIG(status), strsignal(WTERMSIG(status)),
                       tail[0] ? "; last output: " : "", tail);
    } else {
        rc = fa_errorf(err, FA_ERR_CHILD, "external trainer `%s` ended with wait status %d", cmd,
                       status);
    }
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

/* Reads and checks the output into updated; fills num_examples. */
static int read_output(const char *path, const fa_mlp_layout *l, float *updated,
                       uint64_t *num_examples, fa_error *err)
{
    fa_safetensors *st = NULL;
    const char *ne;
    struct stat sb;
    int rc;

    if (stat(path, &sb) != 0)
        return fa_errorf(err, FA_ERR_NOTFOUND,
                         "external trainer exited with status 0 but wrote no output %s", path);
    rc = fa_st_open(&st, path, err);
    if (rc != 0) {
        fa_error_prefix(err, rc, "external trainer output");
        /* whatever is wrong with the file (header too big, unknown dtype...)
         * it is not valid safetensors */
        rc = rc == FA_ERR_NOMEM || rc == FA_ERR_IO ? rc : FA_ERR_PARSE;
        if (err)
            err->code = rc;
        return rc;
    }
    rc = fa_mlp_load_st(st, l, updated, err);
    if (rc != 0) {
        fa_error_prefix(err, rc, "external trainer output %s does not match the model", path);
        /* a missing tensor is a mismatch, not a missing file */
        if (rc == FA_ERR_NOTFOUND) {
            rc = FA_ERR_INVAL;
            if (err)
                err->code = rc;
        }
        goto out;
    }
    ne = fa_st_metadata_get(st, "num_examples");
    if (!ne) {
        rc = fa_errorf(err, FA_ERR_NOTFOUND,
                       "external trainer output %s has no \"num_examples\" in __metadata__ "
                       "(the number of examples this round trained on, as a decimal string)",
                       path);
        goto out;
    }
    if (parse_count(ne, num_examples) != 0) {
        rc = fa_errorf(err, FA_ERR_PARSE,
                       "external trainer output %s: __metadata__ num_examples \"%.40s\" is not a "
                       "positive decimal integer",
                       path, ne);
        goto out;
    }
    for (uint32_t t = 0; t < l->n_tensors; t++) {
        const fa_mlp_tensor *ten = &l->tensors[t];
        for (size_t i = 0; i < ten->numel; i++)
            if (!isfinite(updated[ten->offset + i])) {
                rc = fa_errorf(err, FA_ERR_INVAL,
                               "external trainer output %s: %s[%zu] is %s", path, ten->name, i,
                               isnan(updated[ten->offset + i]) ? "NaN" : "infinite");
                goto out;
            }
    }
out:
    fa_st_del(st);
    return rc;
}

int fa_external_round(const fa_external_opts *o, const fa_mlp_layout *l, const float *global,
                      float *delta, fa_external_result *res, fa_error *err)
{
    char scratch[PATH_MAX], in_path[PATH_MAX + 64], out_path[PATH_MAX + 64],
        log_path[PATH_MAX + 64], round_s[32], region_s[160];
    char env_in[PATH_MAX + 80], env_out[PATH_MAX + 80], env_round[64], env_region[192];
    char *ours[4];
    size_t n_ours = 0;
    char **argv = NULL, **envp = NULL;
    float *updated = NULL;
    const char *meta[4];
    size_t n_meta = 0;
    fa_external_result local;
    int rc;

    if (!res)
        res = &local;
    memset(res, 0, sizeof(*res));
    res->exit_status = -1;
    if (!o || !l || !global || !delta)
        return fa_errorf(err, FA_ERR_INVAL, "external trainer: NULL argument");
    if (!o->argv || o->argc == 0 || !o->argv[0] || !o->argv[0][0])
        return fa_errorf(err, FA_ERR_INVAL, "trainer.external.command is empty");
    if (o->timeout_s == 0)
        return fa_errorf(err, FA_ERR_INVAL, "trainer.external.timeout_s must be at least 1");
    if (!o->scratch_dir || !o->scratch_dir[0])
        return fa_errorf(err, FA_ERR_INVAL, "external trainer: no scratch directory");
    for (size_t i = 0; i < o->n_env; i++) {
        rc = check_env_entry(o->env[i], i, err);
        if (rc != 0)
            return rc;
    }

    rc = fa_file_mkdirs(o->scratch_dir, 0700, err);
    if (rc != 0)
        return rc;
    if (!realpath(o->scratch_dir, scratch))
        return fa_errorf(err, FA_ERR_IO, "external trainer: %s: %s", o->scratch_dir,
                         strerror(errno));
    snprintf(in_path, sizeof(in_path), "%s/" EXT_INPUT, scratch);
    snprintf(out_path, sizeof(out_path), "%s/" EXT_OUTPUT, scratch);
    snprintf(log_path, sizeof(log_path), "%s/" EXT_LOG, scratch);

    /* A stale output from an earlier round must never pass for this one. */
    if (unlink(out_path) != 0 && errno != ENOENT)
        return fa_errorf(err, FA_ERR_IO, "external trainer: cannot remove stale %s: %s", out_path,
                         strerror(errno));

    snprintf(round_s, sizeof(round_s), "%llu", (unsigned long long)o->round);
    meta[n_meta++] = "fedagg.round";
    meta[n_meta++] = round_s;
    if (o->region) {
        snprintf(region_s, sizeof(region_s), "%s", o->region);
        meta[n_meta++] = "fedagg.region";
        meta[n_meta++] = region_s;
    }
    rc = fa_mlp_save(in_path, 0600, l, global, meta, n_meta / 2, err);
    if (rc != 0) {
        fa_error_prefix(err, rc, "external trainer: writing the global weights");
        return rc;
    }

    argv = calloc(o->argc + 1, sizeof(char *));
    updated = malloc(l->n_params * sizeof(float));
    if (!argv || !updated) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "external trainer: out of memory");
        goto out;
    }
    for (size_t i = 0; i < o->argc; i++) {
        argv[i] = substitute(o->argv[i] ? o->argv[i] : "", in_path, out_path);
        if (!argv[i]) {
            rc = fa_errorf(err, FA_ERR_NOMEM, "external trainer: out of memory");
            goto out;
        }
    }
    snprintf(env_in, sizeof(env_in), "FEDAGG_INPUT=%s", in_path);
    snprintf(env_out, sizeof(env_out), "FEDAGG_OUTPUT=%s", out_path);
    snprintf(env_round, sizeof(env_round), "FEDAGG_ROUND=%s", round_s);
    ours[n_ours++] = env_in;
    ours[n_ours++] = env_out;
    ours[n_ours++] = env_round;
    if (o->region) {
        snprintf(env_region, sizeof(env_region), "FEDAGG_REGION=%s", o->region);
        ours[n_ours++] = env_region;
    }
    envp = build_env(o, ours, n_ours);
    if (!envp) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "external trainer: out of memory");
        goto out;
    }

    rc = run_command(o, argv, envp, log_path, o->workdir ? o->workdir : scratch, res, err);
    if (rc != 0)
        goto out;
    rc = read_output(out_path, l, updated, &res->num_examples, err);
    if (rc != 0)
        goto out;
    for (size_t i = 0; i < l->n_params; i++)
        delta[i] = updated[i] - global[i];
    fa_log_info("external trainer finished", "seconds=%.3f num_examples=%llu", res->seconds,
                (unsigned long long)res->num_examples);
out:
    if (argv)
        for (size_t i = 0; i < o->argc; i++)
            free(argv[i]);
    free(argv);
    free(envp);
    free(updated);
    return rc;
}
