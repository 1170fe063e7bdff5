/* bench_governance.c - `fedagg-bench governance`: the promotion gate
 * against a region whose data goes bad (docs/governance.md).
 *
 * Two federations in the same run, from the same shards, seeds and
 * settings (benchmarks/bench-governance.sh: the real fedagg-aggregator and
 * three fedagg-worker processes on loopback, the built-in MLP, Fashion-
 * MNIST near IID), differing only in the gate: after --bad-after (3)
 * rounds ap-south's label file is shuffled and its worker rejoins; each
 * federation runs --rounds (20) completed rounds.
 *
 *   gate on   promotion: accuracy, baseline the best promoted version,
 *             --tolerance (0.02), 2 regions' statements, ROLLBACK; an
 *             operator drains ap-south once --drain-after (3) candidates
 *             in a row were rejected (the FedaggCandidatesRejected alert;
 *             0: never);
 *   gate off  no gate: every version is released, and nothing tells an
 *             operator to drain (the anchor).
 *
 * Everything is read back from each federation's signed audit log, as an
 * auditor would: the regions' evaluations of every version (federated
 * accuracy on the 10 000 test images), each round's participants and
 * data statements (an update is bad when ap-south stated the shuffled
 * manifest), the decisions and rollbacks.  Per completed round one JSON
 * line: the training head (the version the round made) and the released
 * model (gate on: the last promoted version; gate off: the head) with
 * their accuracies.  Per federation a summary:
 *   rounds_with_bad_update  rounds whose sum holds a bad update
 *   rounds_degraded         rounds after which the released model was more
 *                           than the tolerance below the best released so far
 *   rounds_not_in_release   completed rounds whose update is not in the final
 *                           released model's ancestry (work thrown away)
 *   max_drop_below_best     the released model's largest fall below its best
 *   goal_met                (gate on) max_drop_below_best <= tolerance
 * and a last line comparing the released accuracy at the end, gate on
 * over gate off (ratio).  Accuracies are the regions' example-weighted
 * means as signed into the log.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "audit/audit_log.h"

extern char **environ;

const char fa_bench_governance_help[] =
    "the promotion gate against a region gone bad: accuracy curves with the gate on and off";

#define MAXV 4096

struct run {
    const char *gate;
    /* by version: its federated accuracy (NaN: none), its content parent */
    double acc[MAXV];
    int64_t parent[MAXV];
    /* per completed round */
    size_t n;
    uint64_t round[MAXV], head[MAXV], served[MAXV];
    int bad[MAXV];
    uint64_t rollbacks, rejections, promotions;
    int64_t drained_round; /* the round in flight when ap-south was drained; -1 */
};

static volatile pid_t running_group;

static void on_fatal_signal(int sig)
{
    if (running_group > 0)
        kill(-running_group, SIGTERM);
    signal(sig, SIG_DFL);
    raise(sig);
}

static int run_script(const char *script, const char *log, const char *const *args)
{
    const char *argv[16];
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    pid_t pid;
    int st, rc, n = 0;

    argv[n++] = script;
    while (*args && n < 15)
        argv[n++] = *args++;
    argv[n] = NULL;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawnattr_init(&at);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&at, 0);
    rc = posix_spawn(&pid, script, &fa, &at, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (rc != 0) {
        fprintf(stderr, "fedagg-bench governance: cannot start %s: %s\n", script, strerror(rc));
        return -1;
    }
    running_group = pid;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) {
            running_group = 0;
            return -1;
        }
    running_group = 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

/* ap-south's manifest digest in an aggregation record: 1 when found. */
static int bad_region_manifest(const Fedagg__AuditRecord *r, uint8_t out[32])
{
    for (size_t i = 0; i < r->n_data_statements; i++) {
        Fedagg__DataStatement *s = fedagg__data_statement__unpack(
            NULL, r->data_statements[i]->statement.len, r->data_statements[i]->statement.data);
        int hit = s && s->region && !strcmp(s->region, "ap-south") && s->manifest_sha256.len == 32;
        if (hit)
            memcpy(out, s->manifest_sha256.data, 32);
        if (s)
            fedagg__data_statement__free_unpacked(s, NULL);
        if (hit)
            return 1;
    }
    return 0;
}

/* Reads a federation's log into r.  Returns 0 or -1 (message printed). */
static int read_log(const char *path, struct run *r)
{
    fa_audit_log *log = NULL;
    fa_error err;
    uint8_t good[32], m[32];
    int have_good = 0;
    int64_t served = -1;

    for (size_t v = 0; v < MAXV; v++) {
        r->acc[v] = NAN;
        r->parent[v] = -1;
    }
    r->drained_round = -1;
    if (fa_audit_log_open_readonly(&log, path, NULL, NULL, &err) != 0) {
        fprintf(stderr, "fedagg-bench governance: %s\n", err.msg);
        return -1;
    }
    for (uint64_t i = 0; i < fa_audit_log_size(log); i++) {
        uint8_t *buf = NULL;
        size_t len = 0;
        Fedagg__AuditRecord *a;
        if (fa_audit_log_read(log, i, &buf, &len, &err) != 0 ||
            !(a = fedagg__audit_record__unpack(NULL, len, buf))) {
            free(buf);
            fa_audit_log_close(log);
            fprintf(stderr, "fedagg-bench governance: %s: record %" PRIu64 " unreadable\n", path,
                    i);
            return -1;
        }
        free(buf);
        if (a->new_version >= MAXV) {
            fedagg__audit_record__free_unpacked(a, NULL);
            break;
        }
        if (a->federated_eval && a->federated_eval->model_version < MAXV &&
            isnan(r->acc[a->federated_eval->model_version]))
            r->acc[a->federated_eval->model_version] = a->federated_eval->accuracy;
        if (a->admin && a->admin->action && !strcmp(a->admin->action, "drain") &&
            r->drained_round < 0)
            r->drained_round = (int64_t)a->round;
        if (a->promotion) {
            if (!strcmp(a->promotion->outcome, "promoted")) {
                served = (int64_t)a->new_version;
                r->promotions++;
            } else if (!strcmp(a->promotion->outcome, "rejected")) {
                r->rejections++;
            }
        } else if (a->rollback) {
            r->parent[a->new_version] = (int64_t)a->rollback->to_version;
            r->rollbacks++;
        } else if (!a->admin && a->n_participants && r->n < MAXV) {
            int bad = 0;
            r->parent[a->new_version] = (int64_t)a->prev_version;
            if (bad_region_manifest(a, m)) {
                if (!have_good) {
                    memcpy(good, m, 32);
                    have_good = 1;
                }
                bad = memcmp(good, m, 32) != 0;
            }
            r->round[r->n] = a->round;
            r->head[r->n] = a->new_version;
            r->served[r->n] = strcmp(r->gate, "on") ? a->new_version
                              : served >= 0         ? (uint64_t)served
                                                    : UINT64_MAX;
            r->bad[r->n] = bad;
            r->n++;
        }
        fedagg__audit_record__free_unpacked(a, NULL);
    }
    fa_audit_log_close(log);
    return 0;
}

static void json_num(const char *key, double v)
{
    if (isfinite(v))
        printf(",\"%s\":%.4f", key, v);
    else
        printf(",\"%s\":null", key);
}

/* The per-round lines and the summary; returns the released accuracy at
 * the end. */
static double report(const struct run *r, double tol, int bad_after)
{
    double best = -INFINITY, max_drop = 0, last = NAN;
    size_t degraded = 0, with_bad = 0, lost = 0;
    static char in_release[MAXV];
    int64_t final = -1;

    for (size_t i = 0; i < r->n; i++) {
        double a = r->served[i] < MAXV ? r->acc[r->served[i]] : NAN;
        printf("{\"bench\":\"governance\",\"gate\":\"%s\",\"round\":%" PRIu64
               ",\"head_version\":%" PRIu64,
               r->gate, r->round[i], r->head[i]);
        json_num("head_accuracy", r->acc[r->head[i]]);
        if (r->served[i] < MAXV)
            printf(",\"released_version\":%" PRIu64, r->served[i]);
        else
            printf(",\"released_version\":null");
        json_num("released_accuracy", a);
        printf(",\"bad_update\":%s}\n", r->bad[i] ? "true" : "false");
        with_bad += r->bad[i] != 0;
        if (!isfinite(a))
            continue;
        if (best > -INFINITY && best - a > max_drop)
            max_drop = best - a;
        if (best > -INFINITY && a < best - tol - 1e-12)
            degraded++;
        if (a > best)
            best = a;
        last = a;
        final = (int64_t)r->served[i];
    }
    memset(in_release, 0, sizeof(in_release));
    for (int64_t v = final; v >= 0 && v < MAXV && !in_release[v]; v = r->parent[v])
        in_release[v] = 1;
    for (size_t i = 0; i < r->n; i++)
        lost += !in_release[r->head[i]];
    printf("{\"bench\":\"governance\",\"gate\":\"%s\",\"rounds\":%zu,\"bad_after\":%d,"
           "\"rounds_with_bad_update\":%zu,\"rounds_degraded\":%zu,\"rounds_not_in_release\":%zu,"
           "\"promotions\":%" PRIu64 ",\"rejections\":%" PRIu64 ",\"rollbacks\":%" PRIu64,
           r->gate, r->n, bad_after, with_bad, degraded, lost, r->promotions, r->rejections,
           r->rollbacks);
    if (r->drained_round >= 0)
        printf(",\"drained_in_round\":%" PRId64, r->drained_round);
    else
        printf(",\"drained_in_round\":null");
    json_num("best_released_accuracy", best > -INFINITY ? best : NAN);
    json_num("final_released_accuracy", last);
    json_num("max_drop_below_best", max_drop);
    printf(",\"tolerance\":%g", tol);
    if (!strcmp(r->gate, "on"))
        printf(",\"goal\":\"max_drop_below_best <= tolerance\",\"goal_met\":%s",
               max_drop <= tol + 1e-12 ? "true" : "false");
    printf("}\n");
    fflush(stdout);
    return last;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: fedagg-bench governance [--rounds N] [--bad-after K] [--tolerance T]\n"
               "                               [--drain-after R] [--dir DIR] [--keep]\n"
               "\n"
               "Two real federations on loopback (3 regions, the built-in MLP, Fashion-MNIST),\n"
               "one with the promotion gate and one without, in which ap-south's labels are\n"
               "shuffled after K rounds (3); N completed rounds each (20); tolerance T (0.02);\n"
               "with the gate, an operator drains ap-south after R rejections in a row (3; 0:\n"
               "never).\n"
               "JSON lines per round and per federation (see benchmarks/bench_governance.c).\n"
               "Needs the Fashion-MNIST files in /usr/share/datasets/fashion-mnist and the\n"
               "source tree ($FA_SRC, else the one this binary was built from).\n");
}

int fa_bench_governance(int argc, char **argv)
{
    static struct run runs[2];
    char dir[PATH_MAX] = "", script[PATH_MAX], bin[PATH_MAX], log[PATH_MAX + 32],
         path[PATH_MAX + 64], r_s[16], k_s[16], t_s[32], d_s[16];
    int rounds = 20, bad_after = 3, drain_after = 3, keep = 0, rc = 0;
    double tol = 0.02, final[2];

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--rounds") && v)
            rounds = atoi(v), i++;
        else if (!strcmp(a, "--bad-after") && v)
            bad_after = atoi(v), i++;
        else if (!strcmp(a, "--drain-after") && v)
            drain_after = atoi(v), i++;
        else if (!strcmp(a, "--tolerance") && v)
            tol = atof(v), i++;
        else if (!strcmp(a, "--dir") && v)
            snprintf(dir, sizeof(dir), "%s", v), keep = 1, i++;
        else if (!strcmp(a, "--keep"))
            keep = 1;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (rounds < bad_after + 2 || bad_after < 1 || !(tol >= 0) || rounds > 1000) {
        fprintf(stderr, "fedagg-bench governance: --rounds must exceed --bad-after + 1 (at most "
                        "1000), --bad-after be >= 1 and --tolerance >= 0\n");
        return 2;
    }
    {
        const char *env = getenv("FA_SRC");
        char f[PATH_MAX];
        if (env && *env) {
            snprintf(script, sizeof(script), "%s/benchmarks/bench-governance.sh", env);
        } else {
            snprintf(f, sizeof(f), "%s", __FILE__);
            snprintf(script, sizeof(script), "%s/bench-governance.sh", dirname(f));
        }
        if (access(script, X_OK) != 0) {
            fprintf(stderr, "fedagg-bench governance: no %s (set FA_SRC)\n", script);
            return 1;
        }
    }
    {
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (n <= 0) {
            fprintf(stderr, "fedagg-bench governance: cannot find this binary's directory\n");
            return 1;
        }
        self[n] = '\0';
        snprintf(bin, sizeof(bin), "%s", dirname(self));
    }
    if (!dir[0]) {
        snprintf(dir, sizeof(dir), "/tmp/fedagg-bench-governance.XXXXXX");
        if (!mkdtemp(dir)) {
            fprintf(stderr, "fedagg-bench governance: mkdtemp: %s\n", strerror(errno));
            return 1;
        }
    } else if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "fedagg-bench governance: %s: %s\n", dir, strerror(errno));
        return 1;
    }
    signal(SIGINT, on_fatal_signal);
    signal(SIGTERM, on_fatal_signal);
    snprintf(log, sizeof(log), "%s/bench.log", dir);
    snprintf(r_s, sizeof(r_s), "%d", rounds);
    snprintf(k_s, sizeof(k_s), "%d", bad_after);
    snprintf(t_s, sizeof(t_s), "%g", tol);
    snprintf(d_s, sizeof(d_s), "%d", drain_after);
    fprintf(stderr, "fedagg-bench governance: setting up in %s\n", dir);
    if (run_script(script, log, (const char *[]){"setup", dir, bin, NULL}) != 0) {
        fprintf(stderr, "fedagg-bench governance: setup failed (see %s)\n", log);
        return 1;
    }
    for (int g = 0; g < 2 && rc == 0; g++) {
        const char *gate = g == 0 ? "on" : "off";
        char name[32];
        snprintf(name, sizeof(name), "gate-%s", gate);
        runs[g].gate = gate;
        fprintf(stderr,
                "fedagg-bench governance: federation %s: %d rounds, ap-south bad after "
                "round %d\n",
                name, rounds, bad_after);
        if (run_script(script, log,
                       (const char *[]){"fed", dir, bin, name, gate, r_s, k_s, t_s, d_s, NULL}) !=
            0) {
            fprintf(stderr, "fedagg-bench governance: federation %s failed (see %s)\n", name, log);
            rc = 1;
            break;
        }
        snprintf(path, sizeof(path), "%s/%s/state/audit.log", dir, name);
        if (read_log(path, &runs[g]) != 0) {
            rc = 1;
            break;
        }
        final[g] = report(&runs[g], tol, bad_after);
    }
    if (rc == 0) {
        printf("{\"bench\":\"governance\",\"measure\":\"final_released_accuracy\"");
        json_num("gate_on", final[0]);
        json_num("gate_off", final[1]);
        printf(",\"ref\":\"gate_off\"");
        json_num("ratio", final[0] / final[1]);
        printf("}\n");
    }
    if (!keep && rc == 0) {
        pid_t pid;
        int st;
        char *rm[] = {"/bin/rm", "-rf", dir, NULL};
        if (posix_spawn(&pid, rm[0], NULL, NULL, rm, environ) == 0)
            waitpid(pid, &st, 0);
    } else {
        fprintf(stderr, "fedagg-bench governance: kept %s\n", dir);
    }
    return rc;
}
