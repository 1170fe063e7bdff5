/* bench_service.c - `fedagg-bench service`: the aggregation service
 * (docs/service.md), many federations in one fedagg-aggregator.  Two
 * measurements, one JSON line each:
 *
 * service_pair   Two federations at once against each alone, on the same
 *                service in the same run.  A service without a default
 *                federation; two federations A and B created through the
 *                admin API, each the built-in MLP 784-H-10 (--hidden, 4096:
 *                d = 3 256 330), FedAdam, 16-bit quantisation, R regions
 *                (--regions, 3) that are region clients as threads of this
 *                process (benchmarks/round_fed.c: fa_round_client_run on a
 *                synthetic delta, over the service's routes of each
 *                federation).  --reps (5) times, interleaved: a round of A
 *                alone (B idle, waiting for its regions), a round of B
 *                alone, then a round of each at once; each timed from the
 *                barrier that starts its clients to the last client's
 *                return, and the aggregator's CPU seconds over it.  Medians:
 *                pair_round_s against alone_a_round_s + alone_b_round_s and
 *                against the longer of the two; pair_cpu_s against
 *                alone_a_cpu_s + alone_b_cpu_s (cpu_ratio, goal <= 1.1:
 *                hosting two costs no more than the two alone).
 *
 * service_many   --federations F (50) small federations (784-16-10, d =
 *                12 730, 2 regions each) created one after the other on one
 *                service: the latency of each create (POST
 *                /v1/admin/federations over an open connection: the file
 *                checked, the store and audit log made, the service log's
 *                record signed; median, p90, max), the aggregator's
 *                resident memory before and after (VmRSS, every federation
 *                idle in its first round's advertise phase), per federation
 *                and beyond what its model and round state hold in memory
 *                (the secure-aggregation sum, 4 (d + 1) bytes; the model's
 *                weights stay in its files) (goal < 5 MiB); then one round
 *                of every federation at once, 2 F region clients, and how
 *                many completed (every federation progressing).
 *
 * Options: --regions 3 --hidden 4096 --reps 5 --federations 50 --only
 * pair|many --dir DIR --keep.  Never fails for being slow; exits 1 when
 * something could not be measured (with an "error" line).
 */
#include <inttypes.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "benchmarks/round_bench.h"
#include "common/fa_file.h"
#include "common/fa_log.h"
#include "common/fa_time.h"
#include "transport/h3.h"

const char fa_bench_service_help[] =
    "the aggregation service: two federations at once vs each alone, 50 small ones on one";

#define MANY_HIDDEN 16
#define MANY_REGIONS 2

struct svc_opts {
    int regions, hidden, reps, feds, keep;
    const char *only, *dir;
};

/* ------------------------------------------------------------------ files */

static int write_service_config(const char *path, const char *dir, int port, int mport)
{
    char text[2048];
    snprintf(text, sizeof(text),
             "# Written by fedagg-bench service: a service without a default federation\n"
             "listen: \"127.0.0.1:%d\"\nmetrics_listen: \"127.0.0.1:%d\"\n"
             "tls { cert_file: \"pki/server.crt\" key_file: \"pki/server.key\" "
             "ca_file: \"pki/ca.crt\" }\n"
             "audit { signing_key_file: \"keys/aggregator.key\" }\n"
             "service { dir: \"%s\" max_federations: 1024 }\n"
             "operators: [\"bench\"]\n"
             /* every region client of the bench comes from 127.0.0.1, where
              * a real service sees one address a region: the per-address
              * caps raised above the 2 x 50 clients of service_many */
             "quic { idle_timeout_ms: 900000 max_connections_per_address: 1024 "
             "max_handshakes_per_address: 256 }\n"
             "dashboard { enabled: false }\n",
             port, mport, dir);
    return fa_rbench_write_text(path, text);
}

/* A federation file: id, regions names[0..n), the MLP 784-hidden-10. */
static char *federation_file(const char *id, char names[][32], int n, int hidden)
{
    char *t = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&t, &len);
    if (!f)
        return NULL;
    fprintf(f, "federation_id: \"%s\"\nteam: \"bench\"\n", id);
    for (int i = 0; i < n; i++)
        fprintf(f, "regions { id: \"%s\" identity_public_key_file: \"../keys/%s.pub\" }\n",
                names[i], names[i]);
    fprintf(f,
            "round { rounds: 0 min_regions: %d threshold: %d max_uploads_in_flight: %d %s }\n"
            "model { input_dim: 784 hidden: [%d] output_dim: 10 init_seed: 7 }\n"
            "optimizer { %s }\nquantization { %s }\nkeep_versions: 2\n",
            n, n, n, FA_RBENCH_ROUND, hidden, FA_RBENCH_OPT, FA_RBENCH_QUANT);
    fclose(f);
    return t;
}

/* The worker configs of the clients of federation id (over the service's
 * routes of it): DIR/<id>-worker-<region>.textproto. */
static int write_workers(const struct fa_rbench_paths *P, const char *id, int port,
                         char names[][32], int n)
{
    for (int i = 0; i < n; i++) {
        char path[PATH_MAX + 96], state[128], extra[256];
        snprintf(path, sizeof(path), "%s/%s-worker-%s.textproto", P->dir, id, names[i]);
        snprintf(state, sizeof(state), "%s-workers/%s", id, names[i]);
        snprintf(extra, sizeof(extra), "service_routes: true\nquic { idle_timeout_ms: 900000 }");
        if (fa_rbench_write_worker(path, names[i], port, names, n, NULL, "local_epochs: 1", state,
                                   extra) != 0)
            return -1;
        /* the federation's own id instead of the bench's */
        {
            char *t = fa_rbench_read_text(path), *at, *fixed;
            const char *old = "federation_id: \"" FA_RBENCH_FED_ID "\"";
            size_t need;
            if (!t || !(at = strstr(t, old))) {
                free(t);
                return -1;
            }
            need = strlen(t) + strlen(id) + 64;
            if (!(fixed = malloc(need))) {
                free(t);
                return -1;
            }
            snprintf(fixed, need, "%.*sfederation_id: \"%s\"%s", (int)(at - t), t, id,
                     at + strlen(old));
            free(t);
            if (fa_rbench_write_text(path, fixed) != 0) {
                free(fixed);
                return -1;
            }
            free(fixed);
        }
    }
    return 0;
}

/* ------------------------------------------------------------- the admin */

static int admin_new(fa_h3_client **out, const struct fa_rbench_paths *P, int port, fa_error *err)
{
    fa_h3_client_config cfg;
    char server[64], ca[PATH_MAX + 32], cert[PATH_MAX + 64], key[PATH_MAX + 64];
    snprintf(server, sizeof(server), "127.0.0.1:%d", port);
    snprintf(ca, sizeof(ca), "%s/pki/ca.crt", P->dir);
    snprintf(cert, sizeof(cert), "%s/pki/operator-bench.crt", P->dir);
    snprintf(key, sizeof(key), "%s/pki/operator-bench.key", P->dir);
    fa_h3_client_config_default(&cfg);
    cfg.server = server;
    cfg.server_name = "localhost";
    cfg.ca_file = ca;
    cfg.cert_file = cert;
    cfg.key_file = key;
    return fa_h3_client_new(out, &cfg, err);
}

/* POST /v1/admin/federations: 0 and its latency in *secs, or -1 (msg). */
static int create(fa_h3_client *h3, const char *text, double *secs, char *msg, size_t n)
{
    fa_h3_header h[] = {{"accept", "application/json"}, {"fedagg-filename", "bench"}};
    fa_h3_client_req req;
    fa_h3_response resp;
    fa_error err;
    double t0 = fa_time_mono_s();
    int rc;

    memset(&req, 0, sizeof(req));
    req.method = "POST";
    req.path = "/v1/admin/federations";
    req.headers = h;
    req.nheaders = 2;
    req.body = text;
    req.body_len = strlen(text);
    req.timeout_ms = 120000;
    fa_error_clear(&err);
    rc = fa_h3_client_request(h3, &req, &resp, &err);
    *secs = fa_time_mono_s() - t0;
    if (rc != 0) {
        snprintf(msg, n, "%s", err.msg);
        return -1;
    }
    if (resp.status != 200) {
        snprintf(msg, n, "HTTP %d: %.*s", resp.status, (int)resp.body_len,
                 resp.body ? (const char *)resp.body : "");
        fa_h3_response_free(&resp);
        return -1;
    }
    fa_h3_response_free(&resp);
    return 0;
}

/* VmRSS of a process, KiB; -1 unknown. */
static long vmrss_kib(pid_t pid)
{
    char path[64], line[256];
    long v = -1;
    FILE *f;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if (!(f = fopen(path, "r")))
        return -1;
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, "VmRSS:", 6)) {
            v = strtol(line + 6, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

/* --------------------------------------------------------------- service */

struct svc {
    char cfg[PATH_MAX + 32], log[PATH_MAX + 32];
    int port, mport;
    pid_t agg;
    fa_h3_client *admin;
};

static int svc_start(struct svc *s, const struct fa_rbench_paths *P, const char *part)
{
    char bin[PATH_MAX + 32];
    fa_error err;

    s->port = fa_rbench_free_port(1);
    s->mport = fa_rbench_free_port(0);
    /* a service of its own for each part */
    snprintf(s->cfg, sizeof(s->cfg), "%s/%s.textproto", P->dir, part);
    snprintf(s->log, sizeof(s->log), "%s/logs/%s-aggregator.log", P->dir, part);
    if (write_service_config(s->cfg, part, s->port, s->mport) != 0) {
        fa_rbench_json_error(part, "cannot write %s", s->cfg);
        return -1;
    }
    snprintf(bin, sizeof(bin), "%s/fedagg-aggregator", P->bin);
    char *argv[] = {bin, "--config", s->cfg, NULL};
    fa_error_clear(&err);
    if (fa_rbench_spawn(&s->agg, argv, s->log, &err) != 0) {
        fa_rbench_json_error(part, "%s", err.msg);
        return -1;
    }
    if (fa_rbench_wait_log(s->log, "msg=\"aggregator serving\"", s->agg, 120) != 0) {
        fa_rbench_json_error(part, "the service did not start: see %s", s->log);
        return -1;
    }
    if (admin_new(&s->admin, P, s->port, &err) != 0) {
        fa_rbench_json_error(part, "admin client: %s", err.msg);
        return -1;
    }
    return 0;
}

static void svc_stop(struct svc *s)
{
    if (s->admin) {
        fa_h3_client_close(s->admin);
        fa_h3_client_del(s->admin);
        s->admin = NULL;
    }
    if (s->agg > 0)
        fa_rbench_stop(s->agg, 60000);
    s->agg = -1;
}

/* ------------------------------------------------------------------ pair */

struct step_arg {
    struct fa_rbench_fed *f;
    double wall;
    char msg[600];
};

static void *step_main(void *arg)
{
    struct step_arg *a = arg;
    a->wall = fa_rbench_fed_step(a->f, FA_RBENCH_SECURE, a->msg, sizeof(a->msg));
    return NULL;
}

static double median(double *v, int n)
{
    return v[fa_rbench_median_index(v, n)];
}

static int run_pair(const struct svc_opts *o, const struct fa_rbench_paths *P)
{
    static const char *const ids[2] = {"bench-a", "bench-b"};
    char names[FA_RBENCH_MAX_REGIONS][32], msg[600];
    double wall[3][16], cpu[3][16], lat;
    struct fa_rbench_fed *f[2] = {calloc(1, sizeof(struct fa_rbench_fed)),
                                  calloc(1, sizeof(struct fa_rbench_fed))};
    struct svc s = {.agg = -1};
    uint64_t d = 784ull * (uint64_t)o->hidden + (uint64_t)o->hidden + 10ull * o->hidden + 10;
    int started[2] = {0, 0}, rc = -1;

    for (int i = 0; i < o->regions; i++)
        fa_rbench_region_name(i, names[i], sizeof(names[i]));
    if (!f[0] || !f[1] || svc_start(&s, P, "service_pair") != 0)
        goto out;
    for (int k = 0; k < 2; k++) {
        char *text = federation_file(ids[k], names, o->regions, o->hidden);
        int c = text ? create(s.admin, text, &lat, msg, sizeof(msg)) : -1;
        free(text);
        if (c != 0) {
            fa_rbench_json_error("service_pair", "create %s: %s", ids[k], msg);
            goto out;
        }
        if (write_workers(P, ids[k], s.port, names, o->regions) != 0) {
            fa_rbench_json_error("service_pair", "cannot write the worker configs");
            goto out;
        }
        f[k]->srv_secure = s.agg;
        if (fa_rbench_fed_start(f[k], P, "service_pair", ids[k], names, o->regions, NULL,
                                (size_t)d) != 0)
            goto out;
        started[k] = 1;
    }
    for (int r = 0; r < o->reps; r++) {
        /* A alone, B alone, both at once */
        for (int m = 0; m < 3; m++) {
            struct step_arg a[2] = {{f[0], 0, ""}, {f[1], 0, ""}};
            pthread_t th[2];
            double c0, t0;
            fa_rbench_settle(f[0], 0);
            c0 = fa_rbench_cpu_seconds(s.agg);
            t0 = fa_time_mono_s();
            if (m < 2) {
                step_main(&a[m]);
            } else {
                pthread_create(&th[0], NULL, step_main, &a[0]);
                pthread_create(&th[1], NULL, step_main, &a[1]);
                pthread_join(th[0], NULL);
                pthread_join(th[1], NULL);
            }
            cpu[m][r] = fa_rbench_cpu_seconds(s.agg) - c0;
            wall[m][r] = m < 2 ? a[m].wall : fa_time_mono_s() - t0;
            for (int k = 0; k < 2; k++)
                if ((m == k || m == 2) && a[k].wall < 0) {
                    fa_rbench_json_error("service_pair", "%s: %s", ids[k], a[k].msg);
                    goto out;
                }
            fprintf(stderr, "fedagg-bench service: rep %d %s: %.3f s, aggregator cpu %.3f s\n",
                    r + 1,
                    m == 0   ? "A alone"
                    : m == 1 ? "B alone"
                             : "A and B",
                    wall[m][r], cpu[m][r]);
        }
    }
    {
        double wa = median(wall[0], o->reps), wb = median(wall[1], o->reps);
        double wp = median(wall[2], o->reps), ca = median(cpu[0], o->reps);
        double cb = median(cpu[1], o->reps), cp = median(cpu[2], o->reps);
        printf("{\"bench\":\"service_pair\",\"d\":%" PRIu64 ",\"regions\":%d,\"reps\":%d,"
               "\"alone_a_round_s\":%.4f,\"alone_b_round_s\":%.4f,\"pair_round_s\":%.4f,"
               "\"round_ratio_sum\":%.3f,\"round_ratio_max\":%.3f,"
               "\"alone_a_cpu_s\":%.4f,\"alone_b_cpu_s\":%.4f,\"pair_cpu_s\":%.4f,"
               "\"cpu_ratio\":%.3f,\"goal_cpu_ratio\":1.1}\n",
               d, o->regions, o->reps, wa, wb, wp, wp / (wa + wb), wp / (wa > wb ? wa : wb), ca, cb,
               cp, cp / (ca + cb));
        fflush(stdout);
    }
    rc = 0;
out:
    for (int k = 0; k < 2; k++) {
        if (started[k])
            fa_rbench_fed_stop(f[k]);
        if (f[k])
            for (int i = 0; i < f[k]->n; i++)
                fa_rbench_client_free(&f[k]->cl[i]);
        free(f[k]);
    }
    svc_stop(&s);
    return rc;
}

/* ------------------------------------------------------------------ many */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int run_many(const struct svc_opts *o, const struct fa_rbench_paths *P)
{
    char names[MANY_REGIONS][32], msg[600];
    const uint64_t d = 784ull * MANY_HIDDEN + MANY_HIDDEN + 10ull * MANY_HIDDEN + 10;
    double *lat = calloc((size_t)o->feds, sizeof(double));
    struct fa_rbench_fed **f = calloc((size_t)o->feds, sizeof(*f));
    struct step_arg *a = calloc((size_t)o->feds, sizeof(*a));
    pthread_t *th = calloc((size_t)o->feds, sizeof(*th));
    struct svc s = {.agg = -1};
    long rss0, rss1;
    double c0, t0, wall, cpu;
    int started = 0, done = 0, rc = -1;

    for (int i = 0; i < MANY_REGIONS; i++)
        fa_rbench_region_name(i, names[i], sizeof(names[i]));
    if (!lat || !f || !a || !th || svc_start(&s, P, "service_many") != 0)
        goto out;
    sleep(1);
    rss0 = vmrss_kib(s.agg);
    for (int k = 0; k < o->feds; k++) {
        char id[32], *text;
        snprintf(id, sizeof(id), "small-%03d", k + 1);
        text = federation_file(id, names, MANY_REGIONS, MANY_HIDDEN);
        if (!text || create(s.admin, text, &lat[k], msg, sizeof(msg)) != 0) {
            free(text);
            fa_rbench_json_error("service_many", "create %s: %s", id, msg);
            goto out;
        }
        free(text);
    }
    sleep(2); /* every federation in its first advertise phase */
    rss1 = vmrss_kib(s.agg);
    fprintf(stderr, "fedagg-bench service: %d federations created; VmRSS %ld -> %ld KiB\n", o->feds,
            rss0, rss1);
    /* Every federation progressing: one round of each, all at once. */
    for (int k = 0; k < o->feds; k++) {
        char id[32];
        snprintf(id, sizeof(id), "small-%03d", k + 1);
        if (!(f[k] = calloc(1, sizeof(**f))) ||
            write_workers(P, id, s.port, names, MANY_REGIONS) != 0) {
            fa_rbench_json_error("service_many", "cannot write the worker configs of %s", id);
            goto out;
        }
        f[k]->srv_secure = s.agg;
        if (fa_rbench_fed_start(f[k], P, "service_many", id, names, MANY_REGIONS, NULL,
                                (size_t)d) != 0)
            goto out;
        started = k + 1;
    }
    c0 = fa_rbench_cpu_seconds(s.agg);
    t0 = fa_time_mono_s();
    for (int k = 0; k < o->feds; k++) {
        a[k].f = f[k];
        pthread_create(&th[k], NULL, step_main, &a[k]);
    }
    for (int k = 0; k < o->feds; k++) {
        pthread_join(th[k], NULL);
        done += a[k].wall >= 0;
        if (a[k].wall < 0)
            fprintf(stderr, "fedagg-bench service: federation %d: %s\n", k + 1, a[k].msg);
    }
    wall = fa_time_mono_s() - t0;
    cpu = fa_rbench_cpu_seconds(s.agg) - c0;
    qsort(lat, (size_t)o->feds, sizeof(double), cmp_double);
    {
        double per = rss0 > 0 && rss1 > 0 ? (double)(rss1 - rss0) / o->feds / 1024.0 : NAN;
        double model = 4.0 * (double)(d + 1) / 1048576.0;
        printf("{\"bench\":\"service_many\",\"federations\":%d,\"d\":%" PRIu64 ",\"regions\":%d,"
               "\"create_median_s\":%.4f,\"create_p90_s\":%.4f,\"create_max_s\":%.4f,"
               "\"aggregator_rss_before_mib\":%.1f,\"aggregator_rss_after_mib\":%.1f,"
               "\"mem_per_federation_mib\":%.3f,\"round_state_per_federation_mib\":%.3f,"
               "\"mem_beyond_model_and_state_mib\":%.3f,\"goal_mib\":5,"
               "\"rounds_completed\":%d,\"all_rounds_s\":%.2f,\"aggregator_cpu_s\":%.2f}\n",
               o->feds, d, MANY_REGIONS, lat[o->feds / 2], lat[(o->feds * 9) / 10],
               lat[o->feds - 1], rss0 / 1024.0, rss1 / 1024.0, per, model, per - model, done, wall,
               cpu);
        fflush(stdout);
    }
    rc = done == o->feds ? 0 : -1;
    if (rc != 0)
        fa_rbench_json_error("service_many", "%d of %d federations completed their round", done,
                             o->feds);
out:
    for (int k = 0; k < started; k++) {
        fa_rbench_fed_stop(f[k]);
        for (int i = 0; i < f[k]->n; i++)
            fa_rbench_client_free(&f[k]->cl[i]);
    }
    for (int k = 0; f && k < o->feds; k++)
        free(f[k]);
    free(f);
    free(a);
    free(th);
    free(lat);
    svc_stop(&s);
    return rc;
}

/* ------------------------------------------------------------------ main */

static void usage(FILE *f)
{
    fprintf(f, "usage: fedagg-bench service [--regions 3] [--hidden 4096] [--reps 5]\n"
               "         [--federations 50] [--only pair|many] [--dir DIR] [--keep]\n"
               "JSON lines service_pair and service_many.  See the source's header comment.\n");
}

int fa_bench_service(int argc, char **argv)
{
    static const struct option lopts[] = {
        {"regions", required_argument, NULL, 'n'},
        {"hidden", required_argument, NULL, 'H'},
        {"reps", required_argument, NULL, 'r'},
        {"federations", required_argument, NULL, 'F'},
        {"only", required_argument, NULL, 'o'},
        {"dir", required_argument, NULL, 'D'},
        {"keep", no_argument, NULL, 'k'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct svc_opts o = {3, 4096, 5, 50, 0, NULL, NULL};
    struct fa_rbench_paths P;
    char names[FA_RBENCH_MAX_REGIONS][32], logs[PATH_MAX + 8], script[PATH_MAX + 64],
        pki[PATH_MAX + 8], log[PATH_MAX + 32];
    int c, status = 0;

    optind = 1;
    while ((c = getopt_long(argc, argv, "h", lopts, NULL)) != -1) {
        switch (c) {
        case 'n': o.regions = atoi(optarg); break;
        case 'H': o.hidden = atoi(optarg); break;
        case 'r': o.reps = atoi(optarg); break;
        case 'F': o.feds = atoi(optarg); break;
        case 'o': o.only = optarg; break;
        case 'D': o.dir = optarg; break;
        case 'k': o.keep = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (o.regions < 2 || o.regions > FA_RBENCH_MAX_REGIONS || o.hidden < 1 || o.reps < 1 ||
        o.reps > 16 || o.feds < 1 || o.feds > 1000 ||
        (o.only && strcmp(o.only, "pair") && strcmp(o.only, "many"))) {
        usage(stderr);
        return 2;
    }
    memset(&P, 0, sizeof(P));
    signal(SIGPIPE, SIG_IGN);
    fa_rbench_cleanup_on_signals();
    fa_log_set_level(FA_LOG_WARN);
    if (fa_rbench_locate(&P, "service", "service", o.dir) != 0)
        return 1;
    for (int i = 0; i < o.regions; i++)
        fa_rbench_region_name(i, names[i], sizeof(names[i]));
    snprintf(logs, sizeof(logs), "%s/logs", P.dir);
    fa_file_mkdirs(logs, 0700, NULL);
    fprintf(stderr, "fedagg-bench service: PKI and keys of %d regions and an operator in %s\n",
            o.regions, P.dir);
    snprintf(script, sizeof(script), "%s/deploy/pki.sh", P.src);
    snprintf(pki, sizeof(pki), "%s/pki", P.dir);
    snprintf(log, sizeof(log), "%s/pki-operator.log", P.dir);
    char *argv_pki[] = {"/bin/bash", script, pki, "--operators", "bench", NULL};
    if (fa_rbench_setup_dir(&P, P.dir, names, o.regions, -1, 0) != 0 ||
        fa_rbench_run(argv_pki, log) != 0) {
        fa_rbench_json_error("service", "PKI/keys failed: see %s", P.dir);
        status = 1;
        goto out;
    }
    if ((!o.only || !strcmp(o.only, "pair")) && run_pair(&o, &P) != 0)
        status = 1;
    if ((!o.only || !strcmp(o.only, "many")) && run_many(&o, &P) != 0)
        status = 1;
out:
    if (o.keep || status != 0 || o.dir)
        fprintf(stderr, "fedagg-bench service: files kept in %s\n", P.dir);
    else
        fa_rbench_rm_rf(P.dir);
    return status;
}
