/* bench_model.c - `fedagg-bench model`: any model through the federation (issue "Any
 * model").  Three measurements, each printed as one JSON line; every federation is the
 * real thing on loopback: the fedagg-aggregator process, 3 fedagg-worker processes
 * (regions eu-west, us-east, ap-south) over HTTP/3 with mTLS and secure aggregation,
 * each region running the example's own PyTorch trainer through the Python kit
 * (python/fedagg), set up with deploy/fedlib.sh by benchmarks/bench-model.sh.  Common
 * settings: Fashion-MNIST cut into 3 non-IID shards by `fedagg data split` (Dirichlet
 * alpha 0.5, seed 7); server optimizer FedAvg, lr 1; quantisation at the product's
 * defaults (16 bits, per-tensor adaptive ranges, no L2 clip, weights min(n, 60000) /
 * 60000); min_regions 3 (every round waits for all three); trainers with --holdout 0
 * (the whole shard is trained on; no federated evaluation), --seed 1, one torch
 * thread each.
 *
 * model           Accuracy of the CNN with BatchNorm (examples/pytorch-cnn, version 0
 *                 from its make_init.py --seed 1, F32), --rounds (10) rounds, each
 *                 region one local epoch of the example trainer's defaults (SGD lr
 *                 0.01, momentum 0.9 restarted every round, weight decay 5e-4, batch
 *                 64; settings fixed before any result was seen, not tuned), trainer
 *                 in long-lived mode.  accuracy: the last model version (from the
 *                 aggregator's store) on the 10 000 Fashion-MNIST test images
 *                 (cnn.py evaluate: eval mode, BatchNorm running statistics).  In the
 *                 same run, after the federation (benchmarks/model_ref.py, both at
 *                 once, one thread each):
 *   ref (a)  pytorch_fedavg: the same rounds in PyTorch alone: the example's
 *            CNNTrainer objects, one per region, built from the workers' argv, trained
 *            from the same version 0 on the same shards with the same per-round seeds;
 *            the global state is what fedagg computes by default, exactly and without
 *            quantisation or masks: floating tensors (BatchNorm running statistics
 *            included) averaged as deltas weighted by min(n, 60000) / 60000, server
 *            lr 1; integer counters (num_batches_tracked) keep the global value, each
 *            region's trainer getting its own from its previous round (LOCAL_KEEP).
 *   central  the same CNN from the same version 0 on the pooled shards for the same
 *            number of SGD steps as all regions together (rounds x sum of
 *            ceil(n_u / 64)), same optimizer settings, constant lr, one continuous run.
 *   Targets: accuracy >= 0.90 and |accuracy - ref_accuracy| <= 0.5 points
 *   (diff_points is signed, ours minus ref).  seconds: the federation from the
 *   aggregator's start to the last round's commit seen in its log (PKI, keys and
 *   shards made before); seconds_ref: model_ref.py fedavg's whole run (data loading
 *   and the three regions' training one after the other, on one thread, while the
 *   central run takes the other core; the final evaluation excluded): not a speed
 *   comparison, the federation trains its regions in parallel; train_s: the sum over rounds of the
 * slowest region's training time as its trainer reports it.  clipped_fraction_*: the largest share
 * of a region's update L2 mass the quantiser's ranges cut (worker log "update quantised"), in any
 * round and in the last one.
 *
 * model_upload    Bytes a region uploads per round (the worker's "round done ...
 *                 bytes_up=": QUIC bytes of the whole secure-aggregation round sent
 *                 by the region, mean over --upload-rounds (2) rounds x 3 regions) for
 *                 the LoRA transformer (examples/lora, version 0 from its
 *                 make_init.py --pretrain-examples 0: the bytes do not depend on the
 *                 weights), federating only "*lora_*", next to the same model and
 *                 trainer federating every floating tensor; 10 local steps per round,
 *                 long-lived.  ratio = adapter / full.  The model download of a round
 *                 ("global model downloaded ... bytes=", the whole published model) is
 *                 reported beside it.
 *
 * model_overhead  Seconds per round outside training: the CNN trainer with 50 local
 *                 steps per round, --overhead-rounds (6) rounds in TRAINER_LONG_LIVED
 *                 mode, then as many in the default one-shot mode.  Per round: the
 *                 aggregator's round time ("round completed ... seconds=": from the
 *                 attempt's start, when the round opens for advertisements, to the
 *                 commit of the new version) minus the longest training time any
 *                 region's trainer reported for that round (the kit's metric
 *                 "seconds": the CNN trainer's train_steps alone; the round waits for
 *                 the slowest region).  What remains: noticing the round and
 *                 downloading the model, handing it to the trainer (input file,
 *                 one-shot: a new Python process importing torch and loading its shard
 *                 every round; long-lived: a message on the socket, the process and
 *                 shard kept), the kit reading the input and writing the output, the
 *                 worker's delta, quantisation and the secure-aggregation phases, the
 *                 aggregator's unmasking, optimizer step, commit and audit record.
 *                 Round 1 also holds the workers' start (and the long-lived trainer's
 *                 start).  Median over the rounds, each round's value listed; ratio =
 *                 long-lived / one-shot.  One-shot trainers run under
 *                 benchmarks/bench-model-oneshot.sh, which keeps a copy of each
 *                 round's results (the worker truncates the one-shot trainer's log
 *                 every round): a /bin/sh more per round.
 *
 * Options: --rounds N, --bits B (the accuracy federation's upload width, 16: the
 * default; 12 and 8 measure what fewer bits cost), --quick (2 accuracy rounds of
 * 100 local steps per region,
 * 3 overhead rounds: a smoke run, a few minutes), --only accuracy,upload,overhead,
 * --keep, --dir DIR.  The default run took 30 minutes on 2 cores shared with other
 * builds (load average 6-9), two thirds of it the references.  Exits 0
 * when it measured (targets missed are reported in the JSON), 1 with an "error" JSON
 * line when a part could not run (no torch: said so, nothing run; the interpreter is
 * $FEDAGG_PYTHON when set, else /usr/bin/python3 or python3, whichever imports torch).  The work
 * directory (under /tmp) is deleted unless --keep, --dir or an error.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "benchmarks/measure.h"
#include "common/fa_file.h"

const char fa_bench_model_help[] =
    "any model: CNN+BN accuracy vs PyTorch FedAvg and central, LoRA upload bytes, per-round "
    "overhead long-lived vs one-shot";

extern char **environ;

#define N_REGIONS 3
#define MAX_ROUNDS 256
static const char *const regions[N_REGIONS] = {"eu-west", "us-east", "ap-south"};

#define ACC_TARGET 0.90
#define ACC_TARGET_DIFF_POINTS 0.5
#define QUICK_LOCAL_STEPS 100
#define UPLOAD_LOCAL_STEPS 10
#define OVERHEAD_LOCAL_STEPS 50

struct opts {
    int accuracy, upload, overhead;
    int rounds, upload_rounds, overhead_rounds, acc_steps;
    int bits; /* the accuracy federation's upload width (16, the product's default) */
    int keep;
    const char *dir;
};

struct paths {
    char bin[PATH_MAX];    /* directory of fedagg-bench and its siblings */
    char script[PATH_MAX]; /* benchmarks/bench-model.sh */
    char dir[PATH_MAX];    /* work directory */
};

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */
/* ------------------------------------------------------------------------ */

static void json_error(const char *part, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void json_error(const char *part, const char *fmt, ...)
{
    char head[128];
    va_list ap;
    snprintf(head, sizeof(head), "\"bench\":\"%s\"", part);
    va_start(ap, fmt);
    fa_bench_verror("model", part, head, fmt, ap);
    va_end(ap);
}

static char *read_text(const char *path)
{
    uint8_t *data = NULL;
    size_t len = 0;
    if (fa_file_read_all(path, &data, &len, (size_t)64 << 20, NULL) != 0)
        return NULL;
    return (char *)data; /* NUL-terminated */
}

/* The value of key=value in the line at `line` (logfmt, unquoted values). */
static int kv(const char *line, const char *key, char *out, size_t n)
{
    size_t kl = strlen(key);
    const char *eol = strchr(line, '\n');
    for (const char *p = line; (p = strstr(p, key)) && (!eol || p < eol); p++) {
        if ((p == line || p[-1] == ' ') && p[kl] == '=') {
            size_t i = 0;
            p += kl + 1;
            while (p[i] && p[i] != ' ' && p[i] != '\n' && i + 1 < n) {
                out[i] = p[i];
                i++;
            }
            out[i] = '\0';
            return 1;
        }
    }
    return 0;
}

static double kv_num(const char *line, const char *key)
{
    char v[64];
    return kv(line, key, v, sizeof(v)) ? strtod(v, NULL) : NAN;
}

/* The next line at or after *p that contains needle (start of that line), or NULL;
 * *p moves past it. */
static const char *next_line_with(const char **p, const char *needle)
{
    const char *hit = *p ? strstr(*p, needle) : NULL, *bol, *eol;
    if (!hit)
        return NULL;
    for (bol = hit; bol > *p && bol[-1] != '\n'; bol--)
        ;
    eol = strchr(hit, '\n');
    *p = eol ? eol + 1 : hit + strlen(hit);
    return bol;
}

/* The last line of text that starts with prefix, or NULL. */
static const char *last_line_starting(const char *text, const char *prefix)
{
    const char *found = NULL, *p = text;
    size_t n = strlen(prefix);
    while (p && *p) {
        if (strncmp(p, prefix, n) == 0)
            found = p;
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return found;
}

static const char *json_num(char *buf, size_t n, double v, int prec)
{
    if (!isfinite(v))
        snprintf(buf, n, "null");
    else
        snprintf(buf, n, "%.*f", prec, v);
    return buf;
}

/* "[a,b,...]" of v[0..n) into buf. */
static const char *json_list(char *buf, size_t size, const double *v, int n, int prec)
{
    size_t used = 0;
    char one[32];
    buf[used++] = '[';
    for (int i = 0; i < n && used + 40 < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? "," : "",
                                 json_num(one, sizeof(one), v[i], prec));
    snprintf(buf + used, size - used, "]");
    return buf;
}

/* ------------------------------------------------------------------------ */
/* The script (benchmarks/bench-model.sh), in its own process group          */
/* ------------------------------------------------------------------------ */

/* The group of the script running now, for the signal handler: an interrupted
 * bench must not leave an aggregator, workers or a reference run behind.  The
 * script's TERM trap stops its federation (deploy/fedlib.sh fed_stop_all). */
static volatile pid_t running_group;

static void on_fatal_signal(int sig)
{
    if (running_group > 0)
        kill(-running_group, SIGTERM);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Runs `bench-model.sh args...` with stdout and stderr appended to log; returns its
 * exit status (-1 when it could not start, 128 + signal when killed). */
static int run_script(const struct paths *P, const char *log, const char *const *args)
{
    const char *argv[16];
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    pid_t pid;
    int st, rc, n = 0;

    argv[n++] = P->script;
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
    rc = posix_spawn(&pid, P->script, &fa, &at, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (rc != 0) {
        fprintf(stderr, "fedagg-bench model: cannot start %s: %s\n", P->script, strerror(rc));
        return -1;
    }
    running_group = pid;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) {
            running_group = 0;
            return -1;
        }
    running_group = 0;
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
}

/* The tail of a log for an error message (its last line, at most n - 1 bytes). */
static const char *log_tail(const char *path, char *out, size_t n)
{
    char *t = read_text(path);
    size_t len;
    out[0] = '\0';
    if (!t)
        return out;
    len = strlen(t);
    while (len && (t[len - 1] == '\n' || t[len - 1] == ' '))
        t[--len] = '\0';
    {
        const char *p = strrchr(t, '\n');
        snprintf(out, n, "%s", p ? p + 1 : t);
    }
    free(t);
    return out;
}

/* One federation in DIR/name (bench-model.sh fed ...).  0 or -1 (error line printed). */
static int run_fed(const struct paths *P, const char *part, const char *name, int rounds,
                   const char *model, const char *mode, const char *include, int steps)
{
    char log[PATH_MAX + 64], r[16], s[16], tail[512];
    int rc;
    snprintf(log, sizeof(log), "%s/logs/fed-%s.log", P->dir, name);
    snprintf(r, sizeof(r), "%d", rounds);
    snprintf(s, sizeof(s), "%d", steps);
    fprintf(stderr, "fedagg-bench model: %s: federation '%s': %s, %s trainer, %d rounds, %s\n",
            part, name, model, mode, rounds,
            strcmp(include, "-") ? include : "every floating tensor federated");
    rc = run_script(
        P, log, (const char *[]){"fed", P->dir, P->bin, name, r, model, mode, include, s, NULL});
    if (rc != 0) {
        json_error(part, "federation '%s' failed (exit %d): %s (see %s and %s/%s/logs)", name, rc,
                   log_tail(log, tail, sizeof(tail)), log, P->dir, name);
        return -1;
    }
    return 0;
}

/* The wall time of DIR/name's federation (its "times" file). */
static double fed_seconds(const struct paths *P, const char *name)
{
    char path[PATH_MAX + 64];
    char *t;
    double s = NAN, e = NAN;
    snprintf(path, sizeof(path), "%s/%s/times", P->dir, name);
    if (!(t = read_text(path)))
        return NAN;
    for (const char *p = t; p && *p;) {
        if (strncmp(p, "start=", 6) == 0)
            s = strtod(p + 6, NULL);
        else if (strncmp(p, "end=", 4) == 0)
            e = strtod(p + 4, NULL);
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    free(t);
    return e - s;
}

/* ------------------------------------------------------------------------ */
/* What the logs say                                                         */
/* ------------------------------------------------------------------------ */

/* The aggregator's completed rounds: secs[round - 1] (NAN where missing) and the
 * fewest participants of any round.  Returns how many rounds completed. */
static int agg_rounds(const struct paths *P, const char *name, int rounds, double *secs,
                      int *min_participants)
{
    char path[PATH_MAX + 64];
    char *t;
    const char *p, *line;
    int n = 0;
    for (int i = 0; i < rounds; i++)
        secs[i] = NAN;
    *min_participants = -1;
    snprintf(path, sizeof(path), "%s/%s/logs/aggregator.log", P->dir, name);
    if (!(t = read_text(path)))
        return 0;
    p = t;
    while ((line = next_line_with(&p, "msg=\"round completed\""))) {
        double r = kv_num(line, "round"), parts = kv_num(line, "participants");
        if (!(r >= 1 && r <= rounds))
            continue;
        secs[(int)r - 1] = kv_num(line, "seconds");
        if (*min_participants < 0 || parts < *min_participants)
            *min_participants = (int)parts;
        n++;
    }
    free(t);
    return n;
}

/* Mean over every region's rounds of a number in its worker log's lines holding
 * `msg` (e.g. "round done" bytes_up); *count gets how many lines. */
static double worker_mean(const struct paths *P, const char *name, const char *msg, const char *key,
                          int *count)
{
    char path[PATH_MAX + 64], needle[64];
    double sum = 0;
    *count = 0;
    snprintf(needle, sizeof(needle), "msg=\"%s\"", msg);
    for (int i = 0; i < N_REGIONS; i++) {
        char *t;
        const char *p, *line;
        snprintf(path, sizeof(path), "%s/%s/logs/worker-%s.log", P->dir, name, regions[i]);
        if (!(t = read_text(path)))
            continue;
        p = t;
        while ((line = next_line_with(&p, needle))) {
            double v = kv_num(line, key);
            if (isfinite(v)) {
                sum += v;
                (*count)++;
            }
        }
        free(t);
    }
    return *count ? sum / *count : NAN;
}

/* The largest clipped_fraction of the regions' "update quantised" lines: over all
 * rounds (*all), and of the updates trained from version `last_version` (*last). */
static void clipped_fractions(const struct paths *P, const char *name, int last_version,
                              double *all, double *last)
{
    char path[PATH_MAX + 64];
    *all = *last = NAN;
    for (int i = 0; i < N_REGIONS; i++) {
        char *t;
        const char *p, *line;
        snprintf(path, sizeof(path), "%s/%s/logs/worker-%s.log", P->dir, name, regions[i]);
        if (!(t = read_text(path)))
            continue;
        p = t;
        while ((line = next_line_with(&p, "msg=\"update quantised\""))) {
            double f = kv_num(line, "clipped_fraction"), v = kv_num(line, "version");
            if (!isfinite(f))
                continue;
            if (!isfinite(*all) || f > *all)
                *all = f;
            if (v == last_version && (!isfinite(*last) || f > *last))
                *last = f;
        }
        free(t);
    }
}

/* The trainers' own training time per round, the slowest region's:
 * train[round - 1] = max over regions of the kit's metric "seconds" (NAN when a
 * region did not report that round).  Long-lived: the kit's summary lines in the
 * trainer's log ("fedagg[round N]: trained on ... seconds X in Y s"); one-shot: the
 * results bench-model-oneshot.sh kept ("round=N {... "seconds": X ...}"). */
static void trainer_seconds(const struct paths *P, const char *name, int one_shot, int rounds,
                            double *train)
{
    char path[PATH_MAX + 96];
    int seen[MAX_ROUNDS];
    for (int r = 0; r < rounds; r++) {
        train[r] = -1;
        seen[r] = 0;
    }
    for (int i = 0; i < N_REGIONS; i++) {
        char *t;
        const char *p, *line;
        if (one_shot)
            snprintf(path, sizeof(path), "%s/%s/logs/trainer-results-%s.log", P->dir, name,
                     regions[i]);
        else
            snprintf(path, sizeof(path), "%s/%s/worker-%s/external/external-trainer.log", P->dir,
                     name, regions[i]);
        if (!(t = read_text(path)))
            continue;
        p = t;
        while ((line = next_line_with(&p, one_shot ? "round=" : "fedagg[round "))) {
            const char *eol = strchr(line, '\n'), *s;
            long r;
            double secs;
            if (one_shot) {
                r = strtol(line + 6, NULL, 10);
                s = strstr(line, "\"seconds\":");
                if (s && (!eol || s < eol))
                    s += 10;
            } else {
                r = strtol(line + 13, NULL, 10);
                s = strstr(line, ", seconds ");
                if (!s || (eol && s > eol))
                    s = strstr(line, ": seconds ");
                if (s && (!eol || s < eol))
                    s += 10;
                if (!strstr(line, "trained on") || (eol && strstr(line, "trained on") > eol))
                    s = NULL;
            }
            if (!s || (eol && s > eol) || r < 1 || r > rounds)
                continue;
            secs = strtod(s, NULL);
            if (secs > train[r - 1])
                train[r - 1] = secs;
            seen[r - 1]++;
        }
        free(t);
    }
    for (int r = 0; r < rounds; r++)
        if (seen[r] < N_REGIONS) /* a region that did not say: unknown */
            train[r] = NAN;
}

/* A number from the last line of a helper's output that starts with `first_key=`. */
static double out_num(const char *path, const char *first_key, const char *key)
{
    char prefix[64];
    char *t = read_text(path);
    const char *line;
    double v = NAN;
    if (!t)
        return NAN;
    snprintf(prefix, sizeof(prefix), "%s=", first_key);
    if ((line = last_line_starting(t, prefix)))
        v = kv_num(line, key);
    free(t);
    return v;
}

/* ------------------------------------------------------------------------ */
/* The parts                                                                 */
/* ------------------------------------------------------------------------ */

static int part_accuracy(const struct opts *o, const struct paths *P)
{
    const char *part = "model";
    char log[PATH_MAX + 64], out_a[PATH_MAX + 64], out_c[PATH_MAX + 64], tail[512], b[12][32];
    char r[16], s[16], bits[16];
    double secs[MAX_ROUNDS], train[MAX_ROUNDS], acc, ref_acc, cen_acc, fed_s, ref_s, cen_s,
        train_s = 0, clip_all, clip_last, diff;
    int n, parts, rc, met;

    snprintf(bits, sizeof(bits), "%d", o->bits);
    setenv("BENCH_MODEL_BITS", bits, 1); /* this federation's upload width (bench-model.sh) */
    rc = run_fed(P, part, "accuracy", o->rounds, "cnn", "long-lived", "-", o->acc_steps);
    unsetenv("BENCH_MODEL_BITS");
    if (rc != 0)
        return -1;
    n = agg_rounds(P, "accuracy", o->rounds, secs, &parts);
    if (n != o->rounds || parts != N_REGIONS) {
        json_error(part,
                   "the aggregator's log has %d of %d rounds completed, fewest participants "
                   "%d of %d: see %s/accuracy/logs",
                   n, o->rounds, parts, N_REGIONS, P->dir);
        return -1;
    }
    fed_s = fed_seconds(P, "accuracy");
    trainer_seconds(P, "accuracy", 0, o->rounds, train);
    for (int i = 0; i < o->rounds; i++)
        train_s += train[i];
    clipped_fractions(P, "accuracy", o->rounds - 1, &clip_all, &clip_last);

    snprintf(log, sizeof(log), "%s/logs/eval-accuracy.log", P->dir);
    rc = run_script(P, log, (const char *[]){"eval", P->dir, "accuracy", NULL});
    acc = rc == 0 ? out_num(log, "accuracy", "accuracy") : NAN;
    if (!isfinite(acc)) {
        json_error(part, "evaluating the federation's model failed (exit %d): %s", rc,
                   log_tail(log, tail, sizeof(tail)));
        return -1;
    }
    fprintf(stderr,
            "fedagg-bench model: accuracy %.4f after %d rounds (%.0f s); the references "
            "(PyTorch FedAvg, central) now\n",
            acc, o->rounds, fed_s);
    snprintf(log, sizeof(log), "%s/logs/refs.log", P->dir);
    snprintf(r, sizeof(r), "%d", o->rounds);
    snprintf(s, sizeof(s), "%d", o->acc_steps);
    rc = run_script(P, log, (const char *[]){"refs", P->dir, r, s, NULL});
    snprintf(out_a, sizeof(out_a), "%s/ref-fedavg.out", P->dir);
    snprintf(out_c, sizeof(out_c), "%s/ref-central.out", P->dir);
    ref_acc = out_num(out_a, "accuracy", "accuracy");
    ref_s = out_num(out_a, "accuracy", "seconds");
    cen_acc = out_num(out_c, "accuracy", "accuracy");
    cen_s = out_num(out_c, "accuracy", "seconds");
    if (rc != 0 || !isfinite(ref_acc) || !isfinite(cen_acc)) {
        json_error(part, "the PyTorch references failed (exit %d): %s", rc,
                   log_tail(log, tail, sizeof(tail)));
        return -1;
    }
    diff = (acc - ref_acc) * 100.0;
    met = acc >= ACC_TARGET && fabs(diff) <= ACC_TARGET_DIFF_POINTS;
    printf("{\"bench\":\"model\",\"model\":\"cnn_bn\",\"regions\":%d,\"rounds\":%d,\"alpha\":0.5,"
           "\"accuracy\":%s,\"ref\":\"pytorch_fedavg\",\"ref_accuracy\":%s,\"diff_points\":%s,"
           "\"central_accuracy\":%s,\"target_accuracy\":%.2f,\"target_diff_points\":%.1f,"
           "\"met\":%s,\"seconds\":%s,\"seconds_ref\":%s,\"seconds_central\":%s,\"train_s\":%s,"
           "\"local_epochs\":%d,\"local_steps\":%d,\"local\":\"SGD lr 0.01 momentum 0.9 "
           "(restarted every round) weight decay 5e-4, batch 64, seed "
           "1\",\"trainer_mode\":\"long-lived\",\"server\":\"fedavg lr 1\","
           "\"bits\":%d,\"quantization\":\"adaptive per-tensor ranges, no L2 clip\","
           "\"secure_aggregation\":true,\"split_seed\":7,\"min_participants\":%d,"
           "\"clipped_fraction_max\":%s,\"clipped_fraction_last_round\":%s,"
           "\"central_steps\":%.0f}\n",
           N_REGIONS, o->rounds, json_num(b[0], sizeof(b[0]), acc, 4),
           json_num(b[1], sizeof(b[1]), ref_acc, 4), json_num(b[2], sizeof(b[2]), diff, 2),
           json_num(b[3], sizeof(b[3]), cen_acc, 4), ACC_TARGET, ACC_TARGET_DIFF_POINTS,
           met ? "true" : "false", json_num(b[4], sizeof(b[4]), fed_s, 1),
           json_num(b[5], sizeof(b[5]), ref_s, 1), json_num(b[6], sizeof(b[6]), cen_s, 1),
           json_num(b[7], sizeof(b[7]), train_s, 1), o->acc_steps ? 0 : 1, o->acc_steps, o->bits,
           parts, json_num(b[8], sizeof(b[8]), clip_all, 4),
           json_num(b[9], sizeof(b[9]), clip_last, 4), out_num(out_c, "accuracy", "steps"));
    if (o->acc_steps)
        fprintf(stderr, "fedagg-bench model: (quick: %d local steps per region per round)\n",
                o->acc_steps);
    fflush(stdout);
    return 0;
}

static int part_upload(const struct opts *o, const struct paths *P)
{
    const char *part = "model_upload";
    char log[PATH_MAX + 64], tail[512], b[8][32];
    double secs[MAX_ROUNDS], up[2], down[2], full_params, adapter_params;
    const char *names[2] = {"lora-adapters", "lora-full"}, *incl[2] = {"*lora_*", "-"};
    int rc, parts, count;

    snprintf(log, sizeof(log), "%s/logs/count.log", P->dir);
    rc = run_script(P, log, (const char *[]){"count", P->dir, NULL});
    full_params = out_num(log, "full_params", "full_params");
    adapter_params = out_num(log, "full_params", "adapter_params");
    if (rc != 0 || !isfinite(full_params)) {
        json_error(part, "counting the LoRA model's parameters failed (exit %d): %s", rc,
                   log_tail(log, tail, sizeof(tail)));
        return -1;
    }
    for (int i = 0; i < 2; i++) {
        if (run_fed(P, part, names[i], o->upload_rounds, "lora", "long-lived", incl[i],
                    UPLOAD_LOCAL_STEPS) != 0)
            return -1;
        if (agg_rounds(P, names[i], o->upload_rounds, secs, &parts) != o->upload_rounds) {
            json_error(part, "federation '%s' did not complete its rounds: see %s/%s/logs",
                       names[i], P->dir, names[i]);
            return -1;
        }
        up[i] = worker_mean(P, names[i], "round done", "bytes_up", &count);
        if (count != o->upload_rounds * N_REGIONS) {
            json_error(part,
                       "federation '%s': %d \"round done\" lines in the workers' logs, "
                       "expected %d",
                       names[i], count, o->upload_rounds * N_REGIONS);
            return -1;
        }
        down[i] = worker_mean(P, names[i], "global model downloaded", "bytes", &count);
    }
    printf("{\"bench\":\"model_upload\",\"model\":\"lora_transformer\",\"adapter_params\":%.0f,"
           "\"full_params\":%.0f,\"adapter_bytes_per_round_region\":%s,"
           "\"full_bytes_per_round_region\":%s,\"ratio\":%s,\"params_ratio\":%s,"
           "\"rounds\":%d,\"regions\":%d,\"bits\":16,"
           "\"adapter_download_bytes_per_round_region\":%s,"
           "\"full_download_bytes_per_round_region\":%s}\n",
           adapter_params, full_params, json_num(b[0], sizeof(b[0]), up[0], 0),
           json_num(b[1], sizeof(b[1]), up[1], 0), json_num(b[2], sizeof(b[2]), up[0] / up[1], 4),
           json_num(b[3], sizeof(b[3]), adapter_params / full_params, 4), o->upload_rounds,
           N_REGIONS, json_num(b[4], sizeof(b[4]), down[0], 0),
           json_num(b[5], sizeof(b[5]), down[1], 0));
    fflush(stdout);
    return 0;
}

static int part_overhead(const struct opts *o, const struct paths *P)
{
    const char *part = "model_overhead";
    const char *names[2] = {"overhead-long-lived", "overhead-one-shot"},
               *modes[2] = {"long-lived", "one-shot"};
    double secs[2][MAX_ROUNDS], train[2][MAX_ROUNDS], over[2][MAX_ROUNDS], med[2];
    char b[8][32], l[6][MAX_ROUNDS * 12 + 8];
    int parts;

    for (int m = 0; m < 2; m++) {
        if (run_fed(P, part, names[m], o->overhead_rounds, "cnn", modes[m], "-",
                    OVERHEAD_LOCAL_STEPS) != 0)
            return -1;
        if (agg_rounds(P, names[m], o->overhead_rounds, secs[m], &parts) != o->overhead_rounds ||
            parts != N_REGIONS) {
            json_error(part,
                       "federation '%s' did not complete its rounds with all regions: see "
                       "%s/%s/logs",
                       names[m], P->dir, names[m]);
            return -1;
        }
        trainer_seconds(P, names[m], m == 1, o->overhead_rounds, train[m]);
        for (int r = 0; r < o->overhead_rounds; r++)
            over[m][r] = secs[m][r] - train[m][r];
        med[m] = fa_bench_median(over[m], o->overhead_rounds);
        if (!isfinite(med[m])) {
            json_error(part,
                       "federation '%s': no round with the training time of every region "
                       "(trainer logs)",
                       names[m]);
            return -1;
        }
    }
    printf("{\"bench\":\"model_overhead\",\"mode_long_lived_s\":%s,\"mode_one_shot_s\":%s,"
           "\"ratio\":%s,\"rounds\":%d,\"model\":\"cnn_bn\",\"local_steps\":%d,"
           "\"long_lived_overhead_s\":%s,\"one_shot_overhead_s\":%s,"
           "\"long_lived_round_s\":%s,\"one_shot_round_s\":%s,"
           "\"long_lived_train_s\":%s,\"one_shot_train_s\":%s}\n",
           json_num(b[0], sizeof(b[0]), med[0], 2), json_num(b[1], sizeof(b[1]), med[1], 2),
           json_num(b[2], sizeof(b[2]), med[0] / med[1], 3), o->overhead_rounds,
           OVERHEAD_LOCAL_STEPS, json_list(l[0], sizeof(l[0]), over[0], o->overhead_rounds, 2),
           json_list(l[1], sizeof(l[1]), over[1], o->overhead_rounds, 2),
           json_list(l[2], sizeof(l[2]), secs[0], o->overhead_rounds, 2),
           json_list(l[3], sizeof(l[3]), secs[1], o->overhead_rounds, 2),
           json_list(l[4], sizeof(l[4]), train[0], o->overhead_rounds, 2),
           json_list(l[5], sizeof(l[5]), train[1], o->overhead_rounds, 2));
    fflush(stdout);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Main                                                                      */
/* ------------------------------------------------------------------------ */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: fedagg-bench model [--rounds N] [--bits 16] [--quick]\n"
            "                          [--only accuracy,upload,overhead]\n"
            "                          [--upload-rounds N] [--overhead-rounds N] [--keep] "
            "[--dir DIR]\n"
            "  --rounds N           accuracy: federated rounds, one local epoch each (10)\n"
            "  --bits B             accuracy: the regions' upload width, 2..16 (16: the default)\n"
            "  --quick              smoke run: 2 accuracy rounds of %d local steps per region, 3 "
            "overhead rounds\n"
            "  --upload-rounds N    LoRA rounds per federation (2)\n"
            "  --overhead-rounds N  rounds per trainer mode (6)\n"
            "  --keep, --dir DIR    keep the work directory (DIR is always kept)\n"
            "Needs a python3 with torch and numpy (Debian: python3-torch), the Fashion-MNIST\n"
            "files in /usr/share/datasets/fashion-mnist, and the source tree ($FA_SRC, else the\n"
            "one this binary was built from).\n",
            QUICK_LOCAL_STEPS);
}

/* The source tree's benchmarks/bench-model.sh: $FA_SRC, else the tree this file was
 * compiled from. */
static int find_script(struct paths *P)
{
    const char *env = getenv("FA_SRC");
    if (env && *env) {
        snprintf(P->script, sizeof(P->script), "%s/benchmarks/bench-model.sh", env);
    } else {
        char f[PATH_MAX];
        snprintf(f, sizeof(f), "%s", __FILE__);
        snprintf(P->script, sizeof(P->script), "%s/bench-model.sh", dirname(f));
    }
    return access(P->script, X_OK) == 0 ? 0 : -1;
}

static void rm_rf(const struct paths *P)
{
    pid_t pid;
    int st;
    char *argv[] = {"/bin/rm", "-rf", (char *)P->dir, NULL};
    if (posix_spawn(&pid, argv[0], NULL, NULL, argv, environ) == 0)
        waitpid(pid, &st, 0);
}

int fa_bench_model(int argc, char **argv)
{
    static const struct option lopts[] = {
        {"rounds", required_argument, NULL, 'r'},
        {"bits", required_argument, NULL, 'b'},
        {"quick", no_argument, NULL, 'q'},
        {"only", required_argument, NULL, 'o'},
        {"upload-rounds", required_argument, NULL, 'u'},
        {"overhead-rounds", required_argument, NULL, 'v'},
        {"keep", no_argument, NULL, 'k'},
        {"dir", required_argument, NULL, 'D'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct opts o;
    struct paths P;
    char log[PATH_MAX + 64], tail[512], self[PATH_MAX];
    int c, quick = 0, rounds = 0, overhead_rounds = 0, status = 0, rc;
    ssize_t len;

    memset(&o, 0, sizeof(o));
    memset(&P, 0, sizeof(P));
    o.accuracy = o.upload = o.overhead = 1;
    o.rounds = 10;
    o.bits = 16;
    o.upload_rounds = 2;
    o.overhead_rounds = 6;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", lopts, NULL)) != -1) {
        switch (c) {
        case 'r': rounds = atoi(optarg); break;
        case 'b': o.bits = atoi(optarg); break;
        case 'q': quick = 1; break;
        case 'o':
            o.accuracy = strstr(optarg, "accuracy") != NULL;
            o.upload = strstr(optarg, "upload") != NULL;
            o.overhead = strstr(optarg, "overhead") != NULL;
            break;
        case 'u': o.upload_rounds = atoi(optarg); break;
        case 'v': overhead_rounds = atoi(optarg); break;
        case 'k': o.keep = 1; break;
        case 'D': o.dir = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        usage(stderr);
        return 2;
    }
    if (quick) {
        o.rounds = 2;
        o.acc_steps = QUICK_LOCAL_STEPS;
        o.overhead_rounds = 3;
    }
    if (rounds)
        o.rounds = rounds;
    if (overhead_rounds)
        o.overhead_rounds = overhead_rounds;
    if (o.rounds < 1 || o.rounds > MAX_ROUNDS || o.bits < 2 || o.bits > 16 || o.upload_rounds < 1 ||
        o.upload_rounds > MAX_ROUNDS || o.overhead_rounds < 1 || o.overhead_rounds > MAX_ROUNDS ||
        !(o.accuracy || o.upload || o.overhead)) {
        usage(stderr);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, on_fatal_signal);
    signal(SIGTERM, on_fatal_signal);
    signal(SIGHUP, on_fatal_signal);
    len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len <= 0) {
        json_error("model", "cannot find this program (/proc/self/exe)");
        return 1;
    }
    self[len] = '\0';
    snprintf(P.bin, sizeof(P.bin), "%s", dirname(self));
    if (find_script(&P) != 0) {
        json_error("model",
                   "cannot find benchmarks/bench-model.sh of the source tree (%s); set "
                   "FA_SRC",
                   P.script);
        return 1;
    }
    if (o.dir) {
        snprintf(P.dir, sizeof(P.dir), "%s", o.dir);
        mkdir(P.dir, 0700);
    } else {
        snprintf(P.dir, sizeof(P.dir), "/tmp/fedagg-bench-model.XXXXXX");
        if (!mkdtemp(P.dir)) {
            json_error("model", "mkdtemp: %s", strerror(errno));
            return 1;
        }
    }
    snprintf(log, sizeof(log), "%s/logs", P.dir);
    if (fa_file_mkdirs(log, 0700, NULL) != 0) {
        json_error("model", "cannot create %s", log);
        return 1;
    }

    /* Nothing runs without torch: say so once. */
    snprintf(log, sizeof(log), "%s/logs/python.log", P.dir);
    rc = run_script(&P, log, (const char *[]){"python", NULL});
    if (rc != 0) {
        json_error("model", "%s",
                   rc == 3 ? log_tail(log, tail, sizeof(tail))
                           : "bench-model.sh python failed; see the log in the work directory");
        if (rc == 3 && !o.keep && !o.dir) { /* nothing ran: nothing to look at */
            rm_rf(&P);
            return 1;
        }
        status = 1;
        goto out;
    }
    fprintf(stderr,
            "fedagg-bench model: PKI, keys, the non-IID split and the models' version 0 "
            "in %s/common\n",
            P.dir);
    snprintf(log, sizeof(log), "%s/logs/setup.log", P.dir);
    rc = run_script(&P, log, (const char *[]){"setup", P.dir, P.bin, NULL});
    if (rc != 0) {
        json_error("model", "setup failed (exit %d): %s", rc, log_tail(log, tail, sizeof(tail)));
        status = 1;
        goto out;
    }
    if (o.accuracy && part_accuracy(&o, &P) != 0)
        status = 1;
    if (o.upload && part_upload(&o, &P) != 0)
        status = 1;
    if (o.overhead && part_overhead(&o, &P) != 0)
        status = 1;
out:
    if (o.keep || status != 0 || o.dir)
        fprintf(stderr, "fedagg-bench model: files kept in %s\n", P.dir);
    else
        rm_rf(&P);
    return status;
}
