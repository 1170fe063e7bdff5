/* bench_scale.c - `fedagg-bench scale`: secure rounds at growing d, each
 * next to the plaintext round at the same d (docs/history.md, "Bytes and
 * reach").
 *
 * For each d of --points (10^7, 10^8, 5 x 10^8 by default; 10^9 when asked
 * and it fits), with R regions (--regions, 3): the built-in MLP
 * 784-H-10 with H chosen so that it has d parameters (795 H + 10; above
 * 2^20 hidden units, the widest layer a config takes, 784-2^20-B-10: see
 * mlp_for), FedAdam,
 * 16-bit quantisation, the uploads of every region taken at once), run as
 * `fedagg-bench round` runs its e2e part (benchmarks/round_fed.c): the
 * fedagg-aggregator binary with R region clients as threads of this process
 * (fa_round_client_run on a synthetic delta), --rounds (2) secure rounds;
 * then the aggregator stops and the plaintext anchor (round_plain.c, the
 * same transport, codec, optimizer and streaming commit, without secure
 * aggregation) runs the same number of rounds with the same clients and
 * deltas.  The last round of each is the one reported (the first starts
 * from a version without optimizer state: cheaper to step), timed from the
 * barrier that starts every client to the last client's return.  The
 * secure side runs first and its store is removed before the plain side
 * starts, so on a freshly booted virtual machine whose host backs guest
 * memory lazily, the secure side pays the first touch of that memory and
 * the plain side writes into pages the secure store freed (2-core AMD
 * machine, 10^8: 1.36-1.69 on a fresh boot, 1.07-1.18 once 5 x 10^8 had
 * touched the memory); run a point twice to tell.  One JSON
 * line per point:
 *
 *   {"bench":"round_scale","d":...,"regions":3,"secure_s":...,"plain_s":...,
 *    "ratio":...,"aggregator_vmhwm_mib":...,"bytes_per_param":..., ...}
 *
 * bytes_per_param is the aggregator's peak RSS (VmHWM, the whole life of the
 * process: start-up, the version-0 write, every round) over d (target <= 6
 * at 5 x 10^8 with FedAdam); ratio is secure / plain (target <= 1.5 at every
 * d).  Beside them: the CPU seconds of both servers and of all clients,
 * where the secure round's time went (the clients' phases, the aggregator's
 * phases from its log, decode + optimizer + commit + audit after unmask)
 * and the plain server's upload / step-and-commit split, the peak RSS of the
 * plain server and of this process (the clients' deltas: R x 4 d bytes).
 * Then one line with the slope ratio between consecutive points,
 * (t2 / t1) / (d2 / d1), for both modes: 1 when time grows linearly in d.
 *
 * Memory.  Before a point the bench estimates what it needs (the clients'
 * deltas, the larger server, a margin) and compares it with MemAvailable
 * (/proc/meminfo); a point that cannot fit is skipped with a JSON line
 * saying so ({"bench":"round_scale","d":...,"skipped":true,...}), as is a
 * point whose files cannot fit the work directory's disk.  The two servers
 * never run at the same time.  Every point's files are removed after it
 * unless --keep.  Both servers and every client run with a QUIC idle timeout
 * of 15 minutes (a server committing 6 GB is silent for over a minute; the
 * default 60 s would cut the plain anchor's clients off).  A point whose
 * plain part fails is still printed with what its secure part measured
 * (plain_s null) before the error line.
 *
 * Options: --points 1e7,1e8,5e8  --regions 3  --rounds 2  --margin-mib 2048
 * --dir DIR  --keep.  Never fails for being slow; exits 1 when a point
 * could not be measured (with an "error" line).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "benchmarks/measure.h"
#include "benchmarks/round_bench.h"
#include "common/fa_file.h"
#include "common/fa_log.h"
#include "crypto/secagg.h"

const char fa_bench_scale_help[] =
    "secure vs plain rounds at d = 1e7, 1e8, 5e8 with 3 regions: time, aggregator peak RSS per "
    "parameter, time linear in d";

#define MAX_POINTS 8

/* A server busy for over a minute (the commit of a 5 x 10^8 model with its
 * optimizer state: 6 GB written and fsync'ed) must not lose its clients to
 * QUIC's idle timeout (60 s by default): the secure client sends its phase
 * request again, the plain anchor's would fail.  The same on both sides. */
#define SCALE_QUIC "quic { idle_timeout_ms: 900000 }"

struct scale_opts {
    uint64_t points[MAX_POINTS];
    int n_points, regions, rounds, keep;
    uint64_t margin;
    const char *dir;
};

struct point {
    uint64_t d;
    int measured;        /* both modes */
    int secure_measured; /* the secure rounds at least */
    double secure_s, plain_s;
    double secure_all[16], plain_all[16];
    double cpu_agg, cpu_plain_srv, cpu_secure_clients, cpu_plain_clients;
    long agg_kib, plain_kib, bench_kib;
    struct fa_rbench_agg_phases ap;
    struct fa_rbench_plain_phases pp;
    double client_phase[FA_SECAGG_N_PHASES], client_other;
};

/* MemAvailable in bytes, or 0 when unknown. */
static uint64_t mem_available(void)
{
    char line[256];
    unsigned long long kib = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
            break;
    fclose(f);
    return (uint64_t)kib * 1024;
}

static uint64_t disk_available(const char *dir)
{
    struct statvfs v;
    if (statvfs(dir, &v) != 0)
        return 0;
    return (uint64_t)v.f_bavail * (uint64_t)v.f_frsize;
}

/* What a point needs.  Memory: the clients' deltas (4 d each) and their
 * round clients, then the larger of the two servers (the sum, 4 d, and the
 * aggregator's upload journals in memory up to 256 MiB), and the margin.
 * Disk, one store at a time (the secure one is removed before the plain
 * part): three model versions at a commit, the two retained (keep_versions
 * 2) and the new one, each a model, master weights, a delta (4, 4 and 1/2
 * d) and a FedAdam state (8 d: the new one written over the spare of the
 * last version retired), the round's sum file, the journals of the uploads
 * in flight (k/8 bytes per coordinate each) and each region's saved
 * attempt (4 d). */
static void point_need(uint64_t d, int regions, uint64_t margin, uint64_t *mem, uint64_t *disk)
{
    const uint64_t mib = (uint64_t)1 << 20;
    uint64_t masked = fa_secagg_masked_bytes(d + 1, fa_secagg_ring_bits_for(16, (uint32_t)regions));
    uint64_t journals = (uint64_t)regions * masked;
    *mem = (uint64_t)regions * (4 * d + 64 * mib) + 4 * d +
           (journals < 256 * mib ? journals : 256 * mib) + 256 * mib + margin;
    *disk = 3 * (33 * d / 2) + 4 * d + journals + (uint64_t)regions * 4 * d + 2 * 1024 * mib;
}

/* The MLP nearest d parameters: 784-H-10 (795 H + 10 parameters), or, when
 * H would exceed the widest layer a config accepts (2^20), 784-2^20-B-10
 * (785 * 2^20 + B (2^20 + 11) + 10): 10^9 parameters are 784-1048576-169-10.
 * Returns the number of hidden layers (1 or 2) and its parameters in *d. */
#define SCALE_MAX_WIDTH (1u << 20)
static size_t mlp_for(uint64_t want, uint32_t hidden[2], uint64_t *d)
{
    uint64_t h = want > 10 ? (want - 10 + 397) / 795 : 1;
    if (h <= SCALE_MAX_WIDTH) {
        hidden[0] = h ? (uint32_t)h : 1;
        *d = 795 * (uint64_t)hidden[0] + 10;
        return 1;
    }
    const uint64_t a = SCALE_MAX_WIDTH, base = 785 * a + 10;
    uint64_t b = want > base ? (want - base + (a + 11) / 2) / (a + 11) : 1;
    hidden[0] = (uint32_t)a;
    hidden[1] = b ? (uint32_t)b : 1;
    *d = base + (uint64_t)hidden[1] * (a + 11);
    return 2;
}

/* "784-H-10" or "784-A-B-10". */
static void mlp_name(const uint32_t *hidden, size_t nh, char *out, size_t n)
{
    if (nh == 1)
        snprintf(out, n, "784-%u-10", hidden[0]);
    else
        snprintf(out, n, "784-%u-%u-10", hidden[0], hidden[1]);
}

static int run_point(const struct scale_opts *o, const struct fa_rbench_paths *P, char names[][32],
                     struct point *pt)
{
    char agg_cfg[PATH_MAX + 64], plain_cfg[PATH_MAX + 64], agg_log[PATH_MAX + 64],
        plain_log[PATH_MAX + 64], wpath[PATH_MAX + 64], prefix[64], storage[64], pstorage[64],
        addr_p[64], policy[512], msg[600], part[32], path[PATH_MAX + 64];
    uint32_t hidden[2];
    char arch[64];
    int port_s = fa_rbench_free_port(1), port_p = fa_rbench_free_port(1);
    int mport_s = fa_rbench_free_port(0), mport_p = fa_rbench_free_port(0);
    struct fa_rbench_fed *f = calloc(1, sizeof(*f));
    pid_t agg = -1, plain = -1;
    int rc = -1, started = 0;
    fa_error err;

    fa_error_clear(&err);
    snprintf(part, sizeof(part), "scale");
    if (!f) {
        fa_rbench_json_error(part, "out of memory");
        return -1;
    }
    const size_t nh = mlp_for(pt->d, hidden, &pt->d);
    mlp_name(hidden, nh, arch, sizeof(arch));
    snprintf(prefix, sizeof(prefix), "scale%" PRIu64, pt->d);
    snprintf(storage, sizeof(storage), "%s-state", prefix);
    snprintf(pstorage, sizeof(pstorage), "%s-plain-state", prefix);
    snprintf(agg_cfg, sizeof(agg_cfg), "%s/%s-aggregator.textproto", P->dir, prefix);
    snprintf(plain_cfg, sizeof(plain_cfg), "%s/%s-plain.textproto", P->dir, prefix);
    snprintf(agg_log, sizeof(agg_log), "%s/logs/%s-aggregator.log", P->dir, prefix);
    snprintf(plain_log, sizeof(plain_log), "%s/logs/%s-plain.log", P->dir, prefix);
    snprintf(policy, sizeof(policy), "min_regions: 2 max_uploads_in_flight: %d %s", o->regions,
             FA_RBENCH_ROUND);
    struct fa_rbench_agg a = {agg_cfg,
                              port_s,
                              mport_s,
                              names,
                              o->regions,
                              o->rounds + 1, /* never finished (and drained) while measured */
                              hidden,
                              nh,
                              FA_RBENCH_OPT,
                              FA_RBENCH_QUANT,
                              policy,
                              storage,
                              0,
                              1,
                              SCALE_QUIC};
    if (fa_rbench_write_aggregator(&a) != 0) {
        fa_rbench_json_error(part, "cannot write %s", agg_cfg);
        goto out;
    }
    a.path = plain_cfg;
    a.port = port_p;
    a.mport = mport_p;
    a.storage = pstorage;
    if (fa_rbench_write_aggregator(&a) != 0) {
        fa_rbench_json_error(part, "cannot write %s", plain_cfg);
        goto out;
    }
    for (int i = 0; i < o->regions; i++) {
        char state[96];
        snprintf(wpath, sizeof(wpath), "%s/%s-worker-%s.textproto", P->dir, prefix, names[i]);
        snprintf(state, sizeof(state), "%s-workers/%s", prefix, names[i]);
        if (fa_rbench_write_worker(wpath, names[i], port_s, names, o->regions, NULL,
                                   "local_epochs: 1", state, SCALE_QUIC) != 0) {
            fa_rbench_json_error(part, "cannot write %s", wpath);
            goto out;
        }
    }
    fprintf(stderr, "fedagg-bench scale: d = %" PRIu64 " (mlp %s), %d regions: secure\n", pt->d,
            arch, o->regions);

    /* Secure: the aggregator, the clients, the rounds. */
    {
        char agg_bin[PATH_MAX + 32];
        const char *lvl = getenv("FEDAGG_BENCH_LOG_LEVEL");
        snprintf(agg_bin, sizeof(agg_bin), "%s/fedagg-aggregator", P->bin);
        char *argv_a[] = {agg_bin,     "--config", agg_cfg, lvl ? "--log-level" : NULL,
                          (char *)lvl, NULL};
        if (fa_rbench_spawn(&agg, argv_a, agg_log, &err) != 0) {
            fa_rbench_json_error(part, "%s", err.msg);
            goto out;
        }
    }
    if (fa_rbench_wait_log(agg_log, "msg=\"aggregator serving\"", agg, 1800) != 0) {
        fa_rbench_json_error(part, "d=%" PRIu64 ": the aggregator did not start: see %s", pt->d,
                             agg_log);
        goto out;
    }
    f->srv_secure = agg;
    if (fa_rbench_fed_start(f, P, part, prefix, names, o->regions, NULL, (size_t)pt->d) != 0)
        goto out;
    started = 1;
    for (int r = 0; r < o->rounds; r++) {
        double w;
        fa_rbench_settle(f, 0);
        w = fa_rbench_fed_step(f, FA_RBENCH_SECURE, msg, sizeof(msg));
        if (w < 0) {
            fa_rbench_json_error(part, "d=%" PRIu64 " secure round %d: %s", pt->d, r + 1, msg);
            goto out;
        }
        fprintf(stderr, "fedagg-bench scale: d = %" PRIu64 ": secure round %d: %.2f s\n", pt->d,
                r + 1, w);
        pt->secure_all[r] = w;
        pt->secure_s = w;
        pt->cpu_agg = f->cpu_server;
        pt->cpu_secure_clients = f->cpu_clients;
        memset(pt->client_phase, 0, sizeof(pt->client_phase));
        pt->client_other = 0;
        for (int i = 0; i < f->n; i++) {
            double sum = 0;
            for (int k = 0; k < 5; k++) {
                pt->client_phase[k] += f->cl[i].out.phase_seconds[k] / f->n;
                sum += f->cl[i].out.phase_seconds[k];
            }
            pt->client_other += (f->cl[i].t1 - f->cl[i].t0 - sum) / f->n;
        }
    }
    pt->agg_kib = fa_rbench_vmhwm_kib(agg);
    pt->secure_measured = 1;
    fa_rbench_agg_phases_of(agg_log, (uint64_t)o->rounds, &pt->ap);
    fa_rbench_stop(agg, 60000);
    agg = -1;
    f->srv_secure = -1;
    if (!o->keep) { /* its store: tens of GB at 5e8, and the plain one's to come */
        snprintf(path, sizeof(path), "%s/%s", P->dir, storage);
        fa_rbench_rm_rf(path);
    }

    /* Plain: the anchor server, the same clients and deltas. */
    fprintf(stderr, "fedagg-bench scale: d = %" PRIu64 ": plain\n", pt->d);
    {
        char plain_bin[PATH_MAX + 32];
        char *argv_p[] = {(char *)fa_rbench_plain_bin(P, plain_bin, sizeof(plain_bin)), "round",
                          "--serve-plain", plain_cfg, NULL};
        if (fa_rbench_spawn(&plain, argv_p, plain_log, &err) != 0) {
            fa_rbench_json_error(part, "%s", err.msg);
            goto out;
        }
    }
    if (fa_rbench_wait_log(plain_log, "msg=\"plain server serving\"", plain, 1800) != 0) {
        fa_rbench_json_error(part, "d=%" PRIu64 ": the plain server did not start: see %s", pt->d,
                             plain_log);
        goto out;
    }
    f->srv_plain = plain;
    snprintf(addr_p, sizeof(addr_p), "127.0.0.1:%d", port_p);
    if (fa_rbench_fed_connect_plain(f, addr_p, &err) != 0) {
        fa_rbench_json_error(part, "d=%" PRIu64 ": %s", pt->d, err.msg);
        goto out;
    }
    for (int r = 0; r < o->rounds; r++) {
        double w;
        fa_rbench_settle(f, 0);
        w = fa_rbench_fed_step(f, FA_RBENCH_PLAIN, msg, sizeof(msg));
        if (w < 0) {
            fa_rbench_json_error(part, "d=%" PRIu64 " plain round %d: %s", pt->d, r + 1, msg);
            goto out;
        }
        fprintf(stderr, "fedagg-bench scale: d = %" PRIu64 ": plain round %d: %.2f s\n", pt->d,
                r + 1, w);
        pt->plain_all[r] = w;
        pt->plain_s = w;
        pt->cpu_plain_srv = f->cpu_server;
        pt->cpu_plain_clients = f->cpu_clients;
    }
    pt->plain_kib = fa_rbench_vmhwm_kib(plain);
    fa_rbench_plain_phases_of(plain_log, (uint64_t)o->rounds, &pt->pp);
    pt->bench_kib = fa_rbench_vmhwm_kib(getpid());
    pt->measured = 1;
    rc = 0;
out:
    if (started)
        fa_rbench_fed_stop(f);
    for (int i = 0; i < f->n; i++)
        fa_rbench_client_free(&f->cl[i]);
    free(f);
    fa_rbench_stop(agg, 60000);
    fa_rbench_stop(plain, 60000);
    if (!o->keep && rc == 0) {
        /* This point's model stores and saved attempts: tens of GB at 5e8. */
        const char *dirs[] = {storage, pstorage};
        for (size_t i = 0; i < 2; i++) {
            snprintf(path, sizeof(path), "%s/%s", P->dir, dirs[i]);
            fa_rbench_rm_rf(path);
        }
        snprintf(path, sizeof(path), "%s/%s-workers", P->dir, prefix);
        fa_rbench_rm_rf(path);
    }
    return rc;
}

static void print_point(const struct scale_opts *o, const struct point *pt)
{
    char b[12][32], list_s[256] = "", list_p[256] = "", arch[64];
    uint32_t hidden[2];
    uint64_t d;
    double bpp = pt->agg_kib * 1024.0 / (double)pt->d;
    double plain = pt->measured ? pt->plain_s : NAN, ratio = pt->secure_s / plain;

    for (int i = 0; i < o->rounds; i++) {
        snprintf(list_s + strlen(list_s), sizeof(list_s) - strlen(list_s), "%s%.3f", i ? "," : "",
                 pt->secure_all[i]);
        if (pt->plain_all[i] > 0)
            snprintf(list_p + strlen(list_p), sizeof(list_p) - strlen(list_p), "%s%.3f",
                     list_p[0] ? "," : "", pt->plain_all[i]);
    }
    mlp_name(hidden, mlp_for(pt->d, hidden, &d), arch, sizeof(arch));
    printf("{\"bench\":\"round_scale\",\"d\":%" PRIu64 ",\"model\":\"mlp-%s\","
           "\"regions\":%d,\"server_optimizer\":\"fedadam\",\"bits\":16,\"rounds\":%d,"
           "\"secure_s\":%.3f,\"plain_s\":%s,\"ratio\":%s,\"ratio_target\":1.5,"
           "\"ratio_met\":%s,\"secure_rounds_s\":[%s],\"plain_rounds_s\":[%s],"
           "\"aggregator_vmhwm_mib\":%.1f,\"bytes_per_param\":%.2f,"
           "\"bytes_per_param_target\":6,\"bytes_per_param_met\":%s,"
           "\"plain_server_vmhwm_mib\":%.1f,\"bench_clients_vmhwm_mib\":%.1f,",
           pt->d, arch, o->regions, o->rounds, pt->secure_s,
           fa_bench_json_num(b[6], sizeof(b[6]), plain, 3),
           fa_bench_json_num(b[7], sizeof(b[7]), ratio, 3), ratio <= 1.5 ? "true" : "false",
           list_s, list_p, pt->agg_kib / 1024.0, bpp, bpp <= 6.0 ? "true" : "false",
           pt->plain_kib / 1024.0, pt->bench_kib / 1024.0);
    printf("\"cpu_s\":{\"secure_aggregator\":%.2f,\"plain_server\":%.2f,\"secure_clients\":%.2f,"
           "\"plain_clients\":%.2f},",
           pt->cpu_agg, pt->cpu_plain_srv, pt->cpu_secure_clients, pt->cpu_plain_clients);
    printf("\"secure_client_phases_s\":{\"advertise\":%.3f,\"shares\":%.3f,\"masked\":%.3f,"
           "\"consistency\":%.3f,\"unmask\":%.3f,\"other\":%.3f},"
           "\"secure_aggregator_phases_s\":{\"masked\":%s,\"consistency\":%s,\"unmask\":%s,"
           "\"decode_optimizer_commit_audit\":%s},"
           "\"plain_server_s\":{\"upload\":%s,\"decode_optimizer_commit\":%s}}\n",
           pt->client_phase[0], pt->client_phase[1], pt->client_phase[2], pt->client_phase[3],
           pt->client_phase[4], pt->client_other,
           fa_bench_json_num(b[0], sizeof(b[0]), pt->ap.phase[2], 3),
           fa_bench_json_num(b[1], sizeof(b[1]), pt->ap.phase[3], 3),
           fa_bench_json_num(b[2], sizeof(b[2]), pt->ap.phase[4], 3),
           fa_bench_json_num(b[3], sizeof(b[3]), pt->ap.finish, 3),
           fa_bench_json_num(b[4], sizeof(b[4]), pt->pp.upload, 3),
           fa_bench_json_num(b[5], sizeof(b[5]), pt->pp.step_commit, 3));
    fflush(stdout);
}

static void print_slopes(const struct point *pts, int n)
{
    int first = 1;
    printf("{\"bench\":\"round_scale_slope\",\"what\":\"(t2/t1)/(d2/d1) between consecutive "
           "measured points; 1 = time linear in d\",\"pairs\":[");
    for (int i = 0, prev = -1; i < n; i++) {
        if (!pts[i].measured)
            continue;
        if (prev >= 0) {
            double dr = (double)pts[i].d / (double)pts[prev].d;
            printf("%s{\"d_from\":%" PRIu64 ",\"d_to\":%" PRIu64 ",\"secure\":%.3f,\"plain\":%.3f}",
                   first ? "" : ",", pts[prev].d, pts[i].d,
                   pts[i].secure_s / pts[prev].secure_s / dr,
                   pts[i].plain_s / pts[prev].plain_s / dr);
            first = 0;
        }
        prev = i;
    }
    printf("]}\n");
    fflush(stdout);
}

static int parse_points(const char *s, struct scale_opts *o)
{
    char *end;
    o->n_points = 0;
    while (*s && o->n_points < MAX_POINTS) {
        double v = strtod(s, &end);
        if (end == s || !(v >= 1000) || v > 4e9)
            return -1;
        o->points[o->n_points++] = (uint64_t)v;
        if (*end && *end != ',')
            return -1;
        s = *end ? end + 1 : end;
    }
    return o->n_points ? 0 : -1;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: fedagg-bench scale [--points 1e7,1e8,5e8] [--regions 3] [--rounds 2]\n"
               "         [--margin-mib 2048] [--dir DIR] [--keep]\n"
               "JSON lines: round_scale per point (or skipped, with the memory or disk it needs),\n"
               "then round_scale_slope.  See the source's header comment.\n");
}

int fa_bench_scale(int argc, char **argv)
{
    static const struct option lopts[] = {
        {"points", required_argument, NULL, 'p'}, {"regions", required_argument, NULL, 'n'},
        {"rounds", required_argument, NULL, 'r'}, {"margin-mib", required_argument, NULL, 'm'},
        {"dir", required_argument, NULL, 'D'},    {"keep", no_argument, NULL, 'k'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
    };
    struct scale_opts o;
    struct fa_rbench_paths P;
    struct point pts[MAX_POINTS];
    char names[FA_RBENCH_MAX_REGIONS][32], logs[PATH_MAX + 8];
    int c, status = 0;

    memset(&o, 0, sizeof(o));
    memset(&P, 0, sizeof(P));
    memset(pts, 0, sizeof(pts));
    o.points[0] = 10000000;
    o.points[1] = 100000000;
    o.points[2] = 500000000;
    o.n_points = 3;
    o.regions = 3;
    o.rounds = 2;
    o.margin = (uint64_t)2048 << 20;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", lopts, NULL)) != -1) {
        switch (c) {
        case 'p':
            if (parse_points(optarg, &o) != 0) {
                usage(stderr);
                return 2;
            }
            break;
        case 'n': o.regions = atoi(optarg); break;
        case 'r': o.rounds = atoi(optarg); break;
        case 'm': o.margin = strtoull(optarg, NULL, 10) << 20; break;
        case 'D': o.dir = optarg; break;
        case 'k': o.keep = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (o.regions < 2 || o.regions > FA_RBENCH_MAX_REGIONS || o.rounds < 1 || o.rounds > 16) {
        usage(stderr);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    fa_rbench_cleanup_on_signals();
    fa_log_set_level(FA_LOG_WARN);
    if (fa_rbench_locate(&P, "scale", "scale", o.dir) != 0)
        return 1;
    for (int i = 0; i < o.regions; i++)
        fa_rbench_region_name(i, names[i], sizeof(names[i]));
    snprintf(logs, sizeof(logs), "%s/logs", P.dir);
    fa_file_mkdirs(logs, 0700, NULL);
    fprintf(stderr, "fedagg-bench scale: PKI and identity keys of %d regions in %s\n", o.regions,
            P.dir);
    if (fa_rbench_setup_dir(&P, P.dir, names, o.regions, -1, 0) != 0) {
        fa_rbench_json_error("scale", "PKI/keys failed: see %s/setup.log", P.dir);
        status = 1;
        goto out;
    }
    for (int i = 0; i < o.n_points; i++) {
        uint32_t hidden[2];
        uint64_t d, mem, disk;
        (void)mlp_for(o.points[i], hidden, &d);
        uint64_t avail = mem_available(), free_disk = disk_available(P.dir);
        point_need(d, o.regions, o.margin, &mem, &disk);
        pts[i].d = d;
        if (avail == 0 || mem > avail || disk > free_disk) {
            printf("{\"bench\":\"round_scale\",\"d\":%" PRIu64 ",\"regions\":%d,\"skipped\":true,"
                   "\"reason\":\"%s\",\"need_mem_mib\":%.0f,\"mem_available_mib\":%.0f,"
                   "\"need_disk_mib\":%.0f,\"disk_free_mib\":%.0f}\n",
                   d, o.regions,
                   avail == 0    ? "MemAvailable unknown"
                   : mem > avail ? "does not fit the memory available now"
                                 : "does not fit the free disk of the work directory",
                   mem / 1048576.0, avail / 1048576.0, disk / 1048576.0, free_disk / 1048576.0);
            fflush(stdout);
            continue;
        }
        fprintf(stderr,
                "fedagg-bench scale: d = %" PRIu64 " needs ~%.0f MiB (available %.0f), ~%.0f MiB "
                "of disk (free %.0f)\n",
                d, mem / 1048576.0, avail / 1048576.0, disk / 1048576.0, free_disk / 1048576.0);
        if (run_point(&o, &P, names, &pts[i]) != 0)
            status = 1;
        if (pts[i].secure_measured) /* what was measured, even when the rest failed */
            print_point(&o, &pts[i]);
    }
    print_slopes(pts, o.n_points);
out:
    if (o.keep || status != 0 || o.dir)
        fprintf(stderr, "fedagg-bench scale: files kept in %s\n", P.dir);
    else
        fa_rbench_rm_rf(P.dir);
    return status;
}
