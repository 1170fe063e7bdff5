/* bench_recovery.c - `fedagg-bench recovery` (docs/history.md, Recovery): how long a
 * federation takes to come back after a process dies.  One JSON line each:
 *
 * aggregator_restart  The aggregator SIGKILLed at a random point of the
 *                     advertise phase (0.4-1.2 s after a round completed:
 *                     two regions wait in their advertise long-poll while
 *                     the third, which trains 200 times longer, is still
 *                     training) and started again at once on the same
 *                     address, with the same static secret; seconds from its
 *                     start to the next completed round (median of --runs,
 *                     5), and to every worker back in the protocol (a new
 *                     "round done" in each worker's log).
 * aggregator_restart_anchor
 *                     The same with the workers' keep-alive PINGs during
 *                     requests turned off (FEDAGG_QUIC_KEEPALIVE_MS=0): a
 *                     worker waiting in a long-poll learns of the restart
 *                     only at its idle timeout (60 s), which is how every
 *                     restart went before the PINGs and the short stateless
 *                     resets (--anchor-runs, 1: a minute each; 0 = none);
 *                     ratio = anchor / aggregator_restart.
 * worker_restart      A worker SIGKILLed at the same kind of point and
 *                     started again at once; seconds from its start to its
 *                     next "round done" (it resumes the attempt in flight or
 *                     joins the next one), median of --runs, the regions in
 *                     turn.
 *
 * disk_full           The aggregator's storage moved to a tmpfs and filled
 *                     (less than a round needs left): attempts opened per
 *                     minute while it is full (over DISK_WINDOW_S, from the
 *                     first failure), warnings logged per minute, and the
 *                     seconds from freeing the space to the next completed
 *                     round; the anchor is the same aggregator with its
 *                     storage gate switched off (test switch
 *                     fed-storage-gate-off: attempts open whatever the free
 *                     space and a failed save aborts and reopens at once, as
 *                     before the gate).  ratio = ours / anchor.  Needs root
 *                     (mount) and a build with test hooks (the switch);
 *                     otherwise a "skipped" line.
 *
 * The federation: 3 regions on loopback as the multi-process tests run
 * them (benchmarks/bench-recovery-setup.sh: the built-in trainer, 5 local
 * steps, 1000 in one region: rounds of about 2 s, phase deadlines of 8 s, the
 * default QUIC settings), its processes the real fedagg-aggregator and
 * fedagg-worker binaries.  A sample includes the restarted process's own
 * start (loading its state and data), which a deployment pays too.  Timed
 * by polling the logs every 20 ms.  About 2 minutes on 2 cores, most of it
 * the anchor.  Never fails for being slow; exits 1 only when a part could
 * not be measured (an "error" JSON line).  The work directory (under /tmp)
 * is deleted unless --keep or an error.
 */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "benchmarks/measure.h"
#include "benchmarks/round_bench.h"
#include "common/fa_failpoint.h"
#include "common/fa_file.h"
#include "common/fa_time.h"

const char fa_bench_recovery_help[] =
    "seconds from an aggregator restart to the next round (vs the idle-timeout anchor) and from "
    "a worker restart to its next round";

#define N_REGIONS 3
#define MAX_RUNS 64
#define WAIT_S 180.0 /* any single wait; the anchor's takes ~60 s */
#define ROUND_DONE_AGG "msg=\"round completed\""
#define ROUND_DONE_WORKER "msg=\"round done\""

struct fed {
    char src[PATH_MAX], bin[PATH_MAX], dir[PATH_MAX];
    char agg_cfg[PATH_MAX + 32], agg_log[PATH_MAX + 32];
    char region[N_REGIONS][32];
    char wcfg[N_REGIONS][PATH_MAX + 64], wlog[N_REGIONS][PATH_MAX + 64];
    pid_t agg, worker[N_REGIONS];
    int mounted; /* the storage is a tmpfs of ours (disk_full) */
    uint32_t rng;
};

static void json_error(const char *what, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void json_error(const char *what, const char *fmt, ...)
{
    char head[128];
    va_list ap;
    snprintf(head, sizeof(head), "\"bench\":\"recovery\",\"what\":\"%s\"", what);
    va_start(ap, fmt);
    fa_bench_verror("recovery", what, head, fmt, ap);
    va_end(ap);
}

static uint32_t rnd(struct fed *F, uint32_t n)
{
    /* xorshift32: the kill points are a seeded sequence (--seed) */
    F->rng ^= F->rng << 13;
    F->rng ^= F->rng >> 17;
    F->rng ^= F->rng << 5;
    return n ? F->rng % n : 0;
}

/* Lines of the file at path holding needle (0 when it cannot be read). */
static long count_lines(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    char line[8192];
    long n = 0;
    if (!f)
        return 0;
    while (fgets(line, sizeof(line), f))
        if (strstr(line, needle))
            n++;
    fclose(f);
    return n;
}

/* ------------------------------------------------------------ processes */

static int spawn_agg(struct fed *F)
{
    char exe[PATH_MAX + 32];
    char *argv[] = {exe, "--config", F->agg_cfg, NULL};
    fa_error err;
    snprintf(exe, sizeof(exe), "%s/fedagg-aggregator", F->bin);
    if (fa_rbench_spawn(&F->agg, argv, F->agg_log, &err) != 0) {
        F->agg = 0;
        return -1;
    }
    return 0;
}

static int spawn_worker(struct fed *F, int i)
{
    char exe[PATH_MAX + 32];
    char *argv[] = {exe, "--config", F->wcfg[i], NULL};
    fa_error err;
    snprintf(exe, sizeof(exe), "%s/fedagg-worker", F->bin);
    if (fa_rbench_spawn(&F->worker[i], argv, F->wlog[i], &err) != 0) {
        F->worker[i] = 0;
        return -1;
    }
    return 0;
}

/* SIGKILL, as a crash: no drain, no connection close.  Reaps the child. */
static void crash(pid_t *pid)
{
    if (*pid > 0) {
        kill(*pid, SIGKILL);
        (void)fa_rbench_stop(*pid, 0);
    }
    *pid = 0;
}

/* Which process of the federation exited without being killed, or NULL. */
static const char *who_died(struct fed *F)
{
    if (F->agg > 0 && !fa_rbench_alive(F->agg))
        return "the aggregator";
    for (int i = 0; i < N_REGIONS; i++)
        if (F->worker[i] > 0 && !fa_rbench_alive(F->worker[i]))
            return F->region[i];
    return NULL;
}

/* Waits until the log at path holds n lines with needle; *at = when it saw
 * them (monotonic seconds).  Returns 0, or -1 (timeout, or a process died:
 * said in why). */
static int wait_lines(struct fed *F, const char *path, const char *needle, long n, double *at,
                      char *why, size_t whylen)
{
    double start = fa_time_mono_s();
    for (;;) {
        const char *dead;
        if (count_lines(path, needle) >= n) {
            *at = fa_time_mono_s();
            return 0;
        }
        if ((dead = who_died(F)) != NULL) {
            snprintf(why, whylen, "%s exited on its own (see %s/logs)", dead, F->dir);
            return -1;
        }
        if (fa_time_mono_s() - start > WAIT_S) {
            snprintf(why, whylen, "no %ld lines '%s' in %s after %.0f s", n, needle, path, WAIT_S);
            return -1;
        }
        fa_time_sleep_ms(20, NULL);
    }
}

/* Every worker has logged a round done after this call. */
static int wait_workers_round(struct fed *F, char *why, size_t whylen)
{
    double at;
    for (int i = 0; i < N_REGIONS; i++)
        if (wait_lines(F, F->wlog[i], ROUND_DONE_WORKER,
                       count_lines(F->wlog[i], ROUND_DONE_WORKER) + 1, &at, why, whylen) != 0)
            return -1;
    return 0;
}

/* Restarts every worker, with FEDAGG_QUIC_KEEPALIVE_MS=keepalive (NULL =
 * unset), and waits until each has done a round. */
static int restart_workers(struct fed *F, const char *keepalive, char *why, size_t whylen)
{
    long before[N_REGIONS];
    double at;
    if (keepalive)
        setenv("FEDAGG_QUIC_KEEPALIVE_MS", keepalive, 1);
    else
        unsetenv("FEDAGG_QUIC_KEEPALIVE_MS");
    for (int i = 0; i < N_REGIONS; i++) {
        crash(&F->worker[i]);
        before[i] = count_lines(F->wlog[i], ROUND_DONE_WORKER);
        if (spawn_worker(F, i) != 0) {
            snprintf(why, whylen, "cannot start the worker of %s", F->region[i]);
            unsetenv("FEDAGG_QUIC_KEEPALIVE_MS");
            return -1;
        }
    }
    unsetenv("FEDAGG_QUIC_KEEPALIVE_MS");
    for (int i = 0; i < N_REGIONS; i++)
        if (wait_lines(F, F->wlog[i], ROUND_DONE_WORKER, before[i] + 1, &at, why, whylen) != 0)
            return -1;
    return 0;
}

/* --------------------------------------------------------------- samples */

/* A random point of the advertise phase: 0.4-1.2 s after a round
 * completed, while the slow region trains and the other two wait in their
 * advertise long-poll (see bench-recovery-setup.sh). */
static int random_point(struct fed *F, char *why, size_t whylen)
{
    double at;
    if (wait_lines(F, F->agg_log, ROUND_DONE_AGG, count_lines(F->agg_log, ROUND_DONE_AGG) + 1, &at,
                   why, whylen) != 0)
        return -1;
    fa_time_sleep_ms(400 + rnd(F, 801), NULL);
    return 0;
}

static int aggregator_sample(struct fed *F, double *round_s, double *back_s, char *why,
                             size_t whylen)
{
    long rounds, done[N_REGIONS];
    double t0, t, last;

    if (random_point(F, why, whylen) != 0)
        return -1;
    crash(&F->agg);
    rounds = count_lines(F->agg_log, ROUND_DONE_AGG);
    for (int i = 0; i < N_REGIONS; i++)
        done[i] = count_lines(F->wlog[i], ROUND_DONE_WORKER);
    if (spawn_agg(F) != 0) {
        snprintf(why, whylen, "cannot start the aggregator again");
        return -1;
    }
    t0 = fa_time_mono_s();
    if (wait_lines(F, F->agg_log, ROUND_DONE_AGG, rounds + 1, &t, why, whylen) != 0)
        return -1;
    *round_s = t - t0;
    last = t;
    for (int i = 0; i < N_REGIONS; i++) {
        if (wait_lines(F, F->wlog[i], ROUND_DONE_WORKER, done[i] + 1, &t, why, whylen) != 0)
            return -1;
        if (t > last)
            last = t;
    }
    *back_s = last - t0;
    return 0;
}

static int worker_sample(struct fed *F, int i, double *s, char *why, size_t whylen)
{
    long done;
    double t0, t;

    if (random_point(F, why, whylen) != 0)
        return -1;
    crash(&F->worker[i]);
    done = count_lines(F->wlog[i], ROUND_DONE_WORKER);
    if (spawn_worker(F, i) != 0) {
        snprintf(why, whylen, "cannot start the worker of %s again", F->region[i]);
        return -1;
    }
    t0 = fa_time_mono_s();
    if (wait_lines(F, F->wlog[i], ROUND_DONE_WORKER, done + 1, &t, why, whylen) != 0)
        return -1;
    *s = t - t0;
    return 0;
}

/* ------------------------------------------------------------ disk full */

#define DISK_WINDOW_S 30.0
#define ATTEMPT_OPENED "msg=\"round attempt opened\""
#define STORAGE_BLOCKED "msg=\"storage cannot take a round"
#define GATE_OFF_FAILED "msg=\"TEST SWITCH: storage failed"

/* A shell command in the work directory (output to logs/disk.log): 0 or -1. */
static int sh(struct fed *F, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int sh(struct fed *F, const char *fmt, ...)
{
    char cmd[2 * PATH_MAX + 512], log[PATH_MAX + 32];
    char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    va_list ap;
    int n = snprintf(cmd, sizeof(cmd), "set -e; cd '%s'; ", F->dir);
    va_start(ap, fmt);
    vsnprintf(cmd + n, sizeof(cmd) - (size_t)n, fmt, ap);
    va_end(ap);
    snprintf(log, sizeof(log), "%s/logs/disk.log", F->dir);
    return fa_rbench_run(argv, log) == 0 ? 0 : -1;
}

struct disk_sample {
    double opened_per_min, failures_per_min, resumed_s;
};

/* The aggregator is running on the tmpfs: fill it, count over the window
 * from the first failure (failed: the log line that says so), free it and
 * time the next round. */
static int disk_sample(struct fed *F, const char *failed, struct disk_sample *d, char *why,
                       size_t whylen)
{
    long opened, fails, rounds;
    double at, t0;

    if (wait_lines(F, F->agg_log, ROUND_DONE_AGG, count_lines(F->agg_log, ROUND_DONE_AGG) + 1, &at,
                   why, whylen) != 0)
        return -1;
    /* all but about a MiB: less than a round needs, less than a state save */
    if (sh(F, "avail=$(($(stat -f -c '%%a * %%S' state) / 1048576)); "
              "dd if=/dev/zero of=state/filler bs=1M count=$((avail - 1)) status=none || true; "
              "sync") != 0) {
        snprintf(why, whylen, "cannot fill the tmpfs (see %s/logs/disk.log)", F->dir);
        return -1;
    }
    if (wait_lines(F, F->agg_log, failed, count_lines(F->agg_log, failed) + 1, &at, why, whylen) !=
        0)
        return -1;
    opened = count_lines(F->agg_log, ATTEMPT_OPENED);
    fails = count_lines(F->agg_log, failed);
    fa_time_sleep_ms((uint64_t)((DISK_WINDOW_S)*1000), NULL);
    d->opened_per_min =
        (double)(count_lines(F->agg_log, ATTEMPT_OPENED) - opened) * 60.0 / DISK_WINDOW_S;
    d->failures_per_min = (double)(count_lines(F->agg_log, failed) - fails) * 60.0 / DISK_WINDOW_S;
    rounds = count_lines(F->agg_log, ROUND_DONE_AGG);
    if (sh(F, "rm -f state/filler") != 0) {
        snprintf(why, whylen, "cannot free the tmpfs");
        return -1;
    }
    t0 = fa_time_mono_s();
    if (wait_lines(F, F->agg_log, ROUND_DONE_AGG, rounds + 1, &at, why, whylen) != 0)
        return -1;
    d->resumed_s = at - t0;
    return 0;
}

/* Ours, then the anchor; the aggregator is running normally at the end. */
static int disk_full(struct fed *F, struct disk_sample *ours, struct disk_sample *anchor,
                     char *why, size_t whylen)
{
    crash(&F->agg);
    if (sh(F, "mv state state.disk; mkdir state; "
              "mount -t tmpfs -o size=$(($(du -sm state.disk | cut -f1) + 256))m tmpfs state; "
              "cp -a state.disk/. state/; rm -rf state.disk") != 0) {
        snprintf(why, whylen, "cannot move the storage to a tmpfs (see %s/logs/disk.log)",
                 F->dir);
        return -1;
    }
    F->mounted = 1;
    if (spawn_agg(F) != 0 || disk_sample(F, STORAGE_BLOCKED, ours, why, whylen) != 0)
        return -1;
    crash(&F->agg);
    setenv("FEDAGG_FAILPOINTS", "fed-storage-gate-off", 1);
    if (spawn_agg(F) != 0) {
        unsetenv("FEDAGG_FAILPOINTS");
        snprintf(why, whylen, "cannot start the aggregator with its gate off");
        return -1;
    }
    unsetenv("FEDAGG_FAILPOINTS");
    if (disk_sample(F, GATE_OFF_FAILED, anchor, why, whylen) != 0)
        return -1;
    crash(&F->agg);
    if (spawn_agg(F) != 0) {
        snprintf(why, whylen, "cannot start the aggregator again");
        return -1;
    }
    return 0;
}

static void print_samples(const double *v, int n)
{
    printf("[");
    for (int i = 0; i < n; i++)
        printf("%s%.3f", i ? "," : "", v[i]);
    printf("]");
}

/* ---------------------------------------------------------------- setup */

static int find_src(struct fed *F)
{
    const char *env = getenv("FA_SRC");
    char probe[PATH_MAX + 64];
    if (env && *env) {
        snprintf(F->src, sizeof(F->src), "%s", env);
    } else {
        char f[PATH_MAX];
        snprintf(f, sizeof(f), "%s", __FILE__);
        snprintf(F->src, sizeof(F->src), "%s/..", dirname(f));
    }
    snprintf(probe, sizeof(probe), "%s/benchmarks/bench-recovery-setup.sh", F->src);
    return access(probe, R_OK) == 0 ? 0 : -1;
}

static int setup(struct fed *F, char *why, size_t whylen)
{
    char script[PATH_MAX + 64], log[PATH_MAX + 32], logs[PATH_MAX + 8], port[16], mport[16];
    char *argv[] = {"/bin/bash", script, F->dir, F->bin, port, mport, NULL};
    int p = fa_rbench_free_port(1), mp = fa_rbench_free_port(0);

    if (p < 0 || mp < 0) {
        snprintf(why, whylen, "no free port");
        return -1;
    }
    snprintf(port, sizeof(port), "%d", p);
    snprintf(mport, sizeof(mport), "%d", mp);
    snprintf(script, sizeof(script), "%s/benchmarks/bench-recovery-setup.sh", F->src);
    snprintf(logs, sizeof(logs), "%s/logs", F->dir);
    snprintf(log, sizeof(log), "%s/setup.log", F->dir);
    if (fa_file_mkdirs(logs, 0700, NULL) != 0 || fa_rbench_run(argv, log) != 0) {
        snprintf(why, whylen, "setup failed: see %s", log);
        return -1;
    }
    snprintf(F->agg_cfg, sizeof(F->agg_cfg), "%s/aggregator.textproto", F->dir);
    snprintf(F->agg_log, sizeof(F->agg_log), "%s/logs/aggregator.log", F->dir);
    for (int i = 0; i < N_REGIONS; i++) {
        static const char *names[N_REGIONS] = {"eu-west", "us-east", "ap-south"};
        snprintf(F->region[i], sizeof(F->region[i]), "%s", names[i]);
        snprintf(F->wcfg[i], sizeof(F->wcfg[i]), "%s/worker-%s.textproto", F->dir, names[i]);
        snprintf(F->wlog[i], sizeof(F->wlog[i]), "%s/logs/worker-%s.log", F->dir, names[i]);
    }
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: fedagg-bench recovery [--runs N] [--anchor-runs N] [--only LIST] [--seed N]\n"
            "                             [--keep] [--dir DIR]\n"
            "  --runs N         samples of each restart (5)\n"
            "  --anchor-runs N  samples of the anchor, keep-alive off (1; 0 = none)\n"
            "  --only LIST      aggregator,worker,disk (all)\n"
            "  --seed N         the kill points' random sequence (1)\n"
            "  --keep           keep the work directory; --dir DIR: work there\n");
}

int fa_bench_recovery(int argc, char **argv)
{
    static const struct option lopts[] = {
        {"runs", required_argument, NULL, 'r'}, {"anchor-runs", required_argument, NULL, 'a'},
        {"only", required_argument, NULL, 'o'}, {"seed", required_argument, NULL, 's'},
        {"keep", no_argument, NULL, 'k'},       {"dir", required_argument, NULL, 'D'},
        {"help", no_argument, NULL, 'h'},       {NULL, 0, NULL, 0},
    };
    static struct fed F; /* large: paths */
    double agg_round[MAX_RUNS], agg_back[MAX_RUNS], anchor[MAX_RUNS], wrk[MAX_RUNS];
    double agg_median = 0;
    int c, runs = 5, anchor_runs = 1, do_agg = 1, do_worker = 1, do_disk = 1, keep = 0, status = 0;
    const char *dir = NULL;
    char why[1024] = "";
    ssize_t len;

    memset(&F, 0, sizeof(F));
    F.rng = 1;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", lopts, NULL)) != -1) {
        switch (c) {
        case 'r': runs = atoi(optarg); break;
        case 'a': anchor_runs = atoi(optarg); break;
        case 'o':
            do_agg = strstr(optarg, "aggregator") != NULL;
            do_worker = strstr(optarg, "worker") != NULL;
            do_disk = strstr(optarg, "disk") != NULL;
            break;
        case 's': F.rng = (uint32_t)strtoul(optarg, NULL, 10) | 1u; break;
        case 'k': keep = 1; break;
        case 'D': dir = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (runs < 1 || runs > MAX_RUNS || anchor_runs < 0 || anchor_runs > MAX_RUNS ||
        (!do_agg && !do_worker && !do_disk)) {
        usage(stderr);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    fa_rbench_cleanup_on_signals();
    len = readlink("/proc/self/exe", F.bin, sizeof(F.bin) - 1);
    if (len <= 0) {
        json_error("setup", "cannot find this program (/proc/self/exe)");
        return 1;
    }
    F.bin[len] = '\0';
    {
        char tmp[PATH_MAX];
        snprintf(tmp, sizeof(tmp), "%s", F.bin);
        snprintf(F.bin, sizeof(F.bin), "%s", dirname(tmp));
    }
    if (find_src(&F) != 0) {
        json_error("setup", "cannot find the source tree (benchmarks/bench-recovery-setup.sh); "
                            "set FA_SRC");
        return 1;
    }
    if (dir) {
        snprintf(F.dir, sizeof(F.dir), "%s", dir);
    } else {
        snprintf(F.dir, sizeof(F.dir), "/tmp/fedagg-bench-recovery.XXXXXX");
        if (!mkdtemp(F.dir)) {
            json_error("setup", "mkdtemp: %s", strerror(errno));
            return 1;
        }
    }
    fprintf(stderr, "fedagg-bench recovery: a 3-region federation in %s\n", F.dir);
    if (setup(&F, why, sizeof(why)) != 0) {
        json_error("setup", "%s", why);
        status = 1;
        goto out;
    }
    if (spawn_agg(&F) != 0) {
        json_error("setup", "cannot start %s/fedagg-aggregator", F.bin);
        status = 1;
        goto out;
    }
    for (int i = 0; i < N_REGIONS; i++)
        if (spawn_worker(&F, i) != 0) {
            json_error("setup", "cannot start %s/fedagg-worker", F.bin);
            status = 1;
            goto out;
        }
    if (wait_workers_round(&F, why, sizeof(why)) != 0) {
        json_error("setup", "the federation did not start: %s", why);
        status = 1;
        goto out;
    }

    if (do_agg) {
        int ok = 1;
        for (int i = 0; i < runs && ok; i++) {
            ok = aggregator_sample(&F, &agg_round[i], &agg_back[i], why, sizeof(why)) == 0;
            if (ok)
                fprintf(stderr,
                        "fedagg-bench recovery: aggregator restart %d: round %.2f s, "
                        "workers back %.2f s\n",
                        i + 1, agg_round[i], agg_back[i]);
        }
        if (!ok) {
            json_error("aggregator_restart", "%s", why);
            status = 1;
            goto out;
        }
        agg_median = fa_bench_median(agg_round, runs);
        printf("{\"bench\":\"recovery\",\"what\":\"aggregator_restart\",\"median_s\":%.3f,"
               "\"runs\":%d,\"samples\":",
               agg_median, runs);
        print_samples(agg_round, runs);
        printf(",\"workers_back_median_s\":%.3f,\"workers_back_samples\":",
               fa_bench_median(agg_back, runs));
        print_samples(agg_back, runs);
        printf(",\"keepalive_ms\":1000,\"idle_timeout_ms\":60000}\n");
        fflush(stdout);
    }

    if (do_agg && anchor_runs > 0) {
        int ok;
        fprintf(stderr, "fedagg-bench recovery: the anchor: workers without keep-alive PINGs, "
                        "about a minute a sample\n");
        ok = restart_workers(&F, "0", why, sizeof(why)) == 0;
        for (int i = 0; i < anchor_runs && ok; i++) {
            double back;
            ok = aggregator_sample(&F, &anchor[i], &back, why, sizeof(why)) == 0;
            if (ok)
                fprintf(stderr, "fedagg-bench recovery: anchor %d: round %.2f s\n", i + 1,
                        anchor[i]);
        }
        if (ok)
            ok = restart_workers(&F, NULL, why, sizeof(why)) == 0;
        if (!ok) {
            json_error("aggregator_restart_anchor", "%s", why);
            status = 1;
            goto out;
        }
        printf("{\"bench\":\"recovery\",\"what\":\"aggregator_restart_anchor\","
               "\"anchor\":\"workers without keep-alive PINGs (FEDAGG_QUIC_KEEPALIVE_MS=0): a "
               "long-poll learns of the restart at the 60 s idle timeout, as before the fix\","
               "\"median_s\":%.3f,\"runs\":%d,\"samples\":",
               fa_bench_median(anchor, anchor_runs), anchor_runs);
        print_samples(anchor, anchor_runs);
        printf(",\"ratio\":%.1f}\n",
               fa_bench_median(anchor, anchor_runs) / (agg_median > 0 ? agg_median : 1));
        fflush(stdout);
    }

    if (do_worker) {
        int ok = 1;
        for (int i = 0; i < runs && ok; i++) {
            ok = worker_sample(&F, i % N_REGIONS, &wrk[i], why, sizeof(why)) == 0;
            if (ok)
                fprintf(stderr, "fedagg-bench recovery: worker %s restart: next round %.2f s\n",
                        F.region[i % N_REGIONS], wrk[i]);
        }
        if (!ok) {
            json_error("worker_restart", "%s", why);
            status = 1;
            goto out;
        }
        printf("{\"bench\":\"recovery\",\"what\":\"worker_restart\",\"median_s\":%.3f,"
               "\"runs\":%d,\"samples\":",
               fa_bench_median(wrk, runs), runs);
        print_samples(wrk, runs);
        printf("}\n");
        fflush(stdout);
    }

    if (do_disk && geteuid() != 0) {
        printf("{\"bench\":\"recovery\",\"what\":\"disk_full\",\"skipped\":\"mounting a "
               "tmpfs needs root\"}\n");
        fflush(stdout);
    } else if (do_disk && !FA_TEST_HOOKS_COMPILED) {
        printf("{\"bench\":\"recovery\",\"what\":\"disk_full\",\"skipped\":\"the anchor "
               "needs the test switch fed-storage-gate-off: build with "
               "-DFEDAGG_TEST_HOOKS=ON\"}\n");
        fflush(stdout);
    } else if (do_disk) {
        struct disk_sample d_ours, d_anchor;
        fprintf(stderr, "fedagg-bench recovery: the storage full for %.0f s, with the gate and "
                        "without it\n",
                DISK_WINDOW_S);
        if (disk_full(&F, &d_ours, &d_anchor, why, sizeof(why)) != 0) {
            json_error("disk_full", "%s", why);
            status = 1;
            goto out;
        }
        printf("{\"bench\":\"recovery\",\"what\":\"disk_full\",\"window_s\":%.0f,"
               "\"attempts_opened_per_min\":%.1f,\"warnings_per_min\":%.1f,\"resumed_s\":%.3f,"
               "\"ref\":\"the same aggregator with its storage gate off (test switch "
               "fed-storage-gate-off)\",\"ref_attempts_opened_per_min\":%.1f,"
               "\"ref_failures_per_min\":%.1f,\"ref_resumed_s\":%.3f,\"ratio\":%.3f}\n",
               DISK_WINDOW_S, d_ours.opened_per_min, d_ours.failures_per_min, d_ours.resumed_s,
               d_anchor.opened_per_min, d_anchor.failures_per_min, d_anchor.resumed_s,
               d_anchor.opened_per_min > 0 ? d_ours.opened_per_min / d_anchor.opened_per_min : 0.0);
        fflush(stdout);
    }

out:
    for (int i = 0; i < N_REGIONS; i++)
        if (F.worker[i] > 0)
            (void)fa_rbench_stop(F.worker[i], 2000);
    if (F.agg > 0)
        (void)fa_rbench_stop(F.agg, 2000); /* its drain may wait for killed workers */
    if (F.mounted && sh(&F, "umount state") != 0)
        fprintf(stderr, "fedagg-bench recovery: cannot unmount %s/state\n", F.dir);
    if (keep || status != 0 || dir) {
        fprintf(stderr, "fedagg-bench recovery: files kept in %s\n", F.dir);
    } else {
        char *rm[] = {"/bin/rm", "-rf", F.dir, NULL};
        (void)fa_rbench_run(rm, "/dev/null");
    }
    return status;
}
