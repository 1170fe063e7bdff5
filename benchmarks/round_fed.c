/* round_fed.c - the federation that `fedagg-bench round` and `fedagg-bench
 * scale` run: configs, PKI, region clients as threads, one round of either
 * mode, log parsing and JSON helpers.  See round_bench.h. */
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "benchmarks/measure.h"
#include "benchmarks/round_bench.h"
#include "common/fa_file.h"
#include "common/fa_time.h"
#include "fedagg.pb-c.h"
#include "model/data.h"
#include "proto/config_check.h"
#include "worker/round_client.h"

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */
/* ------------------------------------------------------------------------ */

void fa_rbench_json_error(const char *part, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void fa_rbench_json_error(const char *part, const char *fmt, ...)
{
    char head[128];
    va_list ap;
    snprintf(head, sizeof(head), "\"bench\":\"round_%s\"", part);
    va_start(ap, fmt);
    fa_bench_verror("round", part, head, fmt, ap);
    va_end(ap);
}

int fa_rbench_write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs(text, f);
    return fclose(f) == 0 ? 0 : -1;
}

char *fa_rbench_read_text(const char *path)
{
    uint8_t *data = NULL;
    size_t len = 0;
    if (fa_file_read_all(path, &data, &len, (size_t)256 << 20, NULL) != 0)
        return NULL;
    return (char *)data; /* fa_file_read_all NUL-terminates */
}

int fa_rbench_log_has(const char *path, const char *needle)
{
    char *t = fa_rbench_read_text(path);
    int has = t && strstr(t, needle) != NULL;
    free(t);
    return has;
}

size_t fa_rbench_log_count(const char *path, const char *needle)
{
    char *t = fa_rbench_read_text(path), *p = t;
    size_t n = 0;
    while (p && (p = strstr(p, needle))) {
        n++;
        p += strlen(needle);
    }
    free(t);
    return n;
}

/* Waits until the log of pid has `needle`; 0, or -1 when pid died or time ran out. */
int fa_rbench_wait_log(const char *path, const char *needle, pid_t pid, double timeout_s)
{
    double t0 = fa_time_mono_s();
    while (!fa_rbench_log_has(path, needle)) {
        if (!fa_rbench_alive(pid) || fa_time_mono_s() - t0 > timeout_s)
            return -1;
        usleep(50000);
    }
    return 0;
}

/* The value of key=value in a logfmt line (unquoted values). */
int fa_rbench_kv(const char *line, const char *key, char *out, size_t n)
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

double fa_rbench_kv_num(const char *line, const char *key)
{
    char v[64];
    return fa_rbench_kv(line, key, v, sizeof(v)) ? strtod(v, NULL) : NAN;
}

/* Seconds of the day of a line's ts=YYYY-MM-DDTHH:MM:SS.mmmZ. */
double fa_rbench_line_ts(const char *line)
{
    char v[64];
    int h, m;
    double s;
    if (!fa_rbench_kv(line, "ts", v, sizeof(v)) || strlen(v) < 20 ||
        sscanf(v + 11, "%d:%d:%lf", &h, &m, &s) != 3)
        return NAN;
    return h * 3600.0 + m * 60.0 + s;
}

/* Index of the median element of v (the lower one for even n). */
int fa_rbench_median_index(const double *v, int n)
{
    double m = fa_bench_median(v, n);
    int best = 0;
    for (int i = 1; i < n; i++)
        if (fabs(v[i] - m) < fabs(v[best] - m))
            best = i;
    return best;
}

/* ------------------------------------------------------------------------ */
/* The federation's files                                                    */
/* ------------------------------------------------------------------------ */

void fa_rbench_region_name(int i, char *out, size_t n)
{
    snprintf(out, n, "region-%02d", i + 1);
}

/* PKI and keys (and shards with alpha >= 0) with benchmarks/bench-round-setup.sh. */
int fa_rbench_setup_dir(const struct fa_rbench_paths *P, const char *dir, char names[][32], int n,
                        double alpha, int seed)
{
    char script[PATH_MAX + 64], csv[FA_RBENCH_MAX_REGIONS * 32 + 1] = "", log[PATH_MAX + 32], a[32],
                                                                 s[32];
    char *argv[10];
    int argc = 0;

    for (int i = 0; i < n; i++) {
        if (i)
            strcat(csv, ",");
        strcat(csv, names[i]);
    }
    snprintf(script, sizeof(script), "%s/benchmarks/bench-round-setup.sh", P->src);
    snprintf(log, sizeof(log), "%s/setup.log", dir);
    argv[argc++] = "/bin/bash";
    argv[argc++] = script;
    argv[argc++] = (char *)dir;
    argv[argc++] = (char *)P->bin;
    argv[argc++] = csv;
    if (alpha >= 0) {
        snprintf(a, sizeof(a), "%g", alpha);
        snprintf(s, sizeof(s), "%d", seed);
        argv[argc++] = "--split";
        argv[argc++] = a;
        argv[argc++] = s;
    }
    argv[argc] = NULL;
    if (fa_file_mkdirs(dir, 0700, NULL) != 0)
        return -1;
    return fa_rbench_run(argv, log) == 0 ? 0 : -1;
}

int fa_rbench_write_aggregator(const struct fa_rbench_agg *a)
{
    char *t = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&t, &len);
    int rc;
    if (!f)
        return -1;
    fprintf(f,
            "# Written by fedagg-bench round\n"
            "federation_id: \"" FA_RBENCH_FED_ID "\"\n"
            "listen: \"127.0.0.1:%d\"\n"
            "metrics_listen: \"127.0.0.1:%d\"\n"
            "tls { cert_file: \"pki/server.crt\" key_file: \"pki/server.key\" "
            "ca_file: \"pki/ca.crt\" }\n",
            a->port, a->mport);
    for (int i = 0; i < a->n; i++)
        fprintf(f, "regions { id: \"%s\" identity_public_key_file: \"keys/%s.pub\" }\n",
                a->names[i], a->names[i]);
    fprintf(f, "round { rounds: %d %s }\n", a->rounds, a->round);
    fprintf(f, "model { input_dim: 784 hidden: [");
    for (size_t i = 0; i < a->n_hidden; i++)
        fprintf(f, "%s%u", i ? ", " : "", a->hidden[i]);
    fprintf(f, "] output_dim: 10 init_seed: 1 }\n");
    fprintf(f, "optimizer { %s }\n", a->optimizer);
    fprintf(f, "quantization { %s }\n", a->quant);
    fprintf(f, "storage { dir: \"%s\" keep_versions: %d }\n", a->storage,
            a->keep_versions ? a->keep_versions : 2);
    fprintf(f, "audit { signing_key_file: \"keys/aggregator.key\" }\n");
    if (getenv("FEDAGG_BENCH_QLOG"))
        fprintf(f, "quic { qlog_dir: \"%s/agg\" }\n", getenv("FEDAGG_BENCH_QLOG"));
    if (a->evaluation)
        fprintf(f,
                "evaluation { test_images: \"%s/t10k-images-idx3-ubyte.gz\" "
                "test_labels: \"%s/t10k-labels-idx1-ubyte.gz\" }\n",
                FA_FASHION_MNIST_DIR, FA_FASHION_MNIST_DIR);
    if (a->extra)
        fprintf(f, "%s\n", a->extra);
    fclose(f);
    rc = fa_rbench_write_text(a->path, t);
    free(t);
    return rc;
}

/* A worker config for region `r` (also what the bench's client threads load). */
int fa_rbench_write_worker(const char *path, const char *r, int port, char names[][32], int n,
                           const char *data_dir, const char *trainer, const char *state_dir,
                           const char *extra)
{
    char *t = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&t, &len);
    int rc;
    if (!f)
        return -1;
    fprintf(f,
            "# Written by fedagg-bench round\n"
            "region_id: \"%s\"\n"
            "federation_id: \"" FA_RBENCH_FED_ID "\"\n"
            "aggregator: \"127.0.0.1:%d\"\n"
            "tls { cert_file: \"pki/client-%s.crt\" key_file: \"pki/client-%s.key\" "
            "ca_file: \"pki/ca.crt\" server_name: \"localhost\" }\n"
            "identity_key_file: \"keys/%s.key\"\n"
            "aggregator_public_key_file: \"keys/aggregator.pub\"\n",
            r, port, r, r, r);
    for (int i = 0; i < n; i++)
        fprintf(f, "regions { id: \"%s\" identity_public_key_file: \"keys/%s.pub\" }\n", names[i],
                names[i]);
    if (data_dir)
        fprintf(f,
                "data { train_images: \"%s/train-images-idx3-ubyte.gz\" "
                "train_labels: \"%s/train-labels-idx1-ubyte.gz\" }\n",
                data_dir, data_dir);
    else /* the client threads do not train; the config still names data */
        fprintf(f,
                "data { train_images: \"%s/t10k-images-idx3-ubyte.gz\" "
                "train_labels: \"%s/t10k-labels-idx1-ubyte.gz\" }\n",
                FA_FASHION_MNIST_DIR, FA_FASHION_MNIST_DIR);
    fprintf(f, "trainer { builtin { %s } }\ndevice: CPU\nstate_dir: \"%s\"\n", trainer, state_dir);
    if (getenv("FEDAGG_BENCH_QLOG"))
        fprintf(f, "quic { qlog_dir: \"%s/%s\" }\n", getenv("FEDAGG_BENCH_QLOG"), r);
    if (extra)
        fprintf(f, "%s\n", extra);
    fclose(f);
    rc = fa_rbench_write_text(path, t);
    free(t);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Region clients (threads)                                                  */
/* ------------------------------------------------------------------------ */

/* A synthetic delta of d floats, uniform in [-1e-3, 1e-3] (L2 norm ~1.8 for
 * d = 1e7: under the clip, so clipping and quantisation are as for a real
 * update), different per region. */
static void synth_delta(float *x, size_t d, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < d; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        x[i] = (float)((double)(s >> 11) * (2.0 / 9007199254740992.0) - 1.0) * 1e-3f;
    }
}

/* Secure preparation: the federation's position, until it is round
 * `round` in its advertise phase (the aggregator opens it after the last). */
static int secure_prep(struct fa_rbench_client *c, uint64_t round, fa_error *err)
{
    double t0 = fa_time_mono_s();
    if (c->info)
        fedagg__federation_info__free_unpacked(c->info, NULL);
    c->info = NULL;
    for (;;) {
        int rc = fa_round_client_info(c->rc, 60000, &c->info, err);
        if (rc != 0)
            return rc;
        if (c->info->round == round && c->info->phase == FEDAGG__PHASE__PHASE_ADVERTISE &&
            !c->info->finished)
            return 0;
        if (c->info->round > round || c->info->finished || fa_time_mono_s() - t0 > 120) {
            rc = fa_errorf(err, FA_ERR_STATE,
                           "the aggregator is at round %" PRIu64 " phase %d; round %" PRIu64
                           " expected",
                           c->info->round, (int)c->info->phase, round);
            fedagg__federation_info__free_unpacked(c->info, NULL);
            c->info = NULL;
            return rc;
        }
        fedagg__federation_info__free_unpacked(c->info, NULL);
        c->info = NULL;
        usleep(20000);
    }
}

static void *client_main(void *arg)
{
    struct fa_rbench_client *c = arg;
    struct fa_rbench_fed *f = c->fed;
    fa_error err;

    for (;;) {
        int mode;
        pthread_barrier_wait(&f->bar); /* the main thread has set the mode */
        mode = f->mode;
        if (mode == FA_RBENCH_STOP)
            break;
        fa_error_clear(&err);
        c->err = 0;
        c->msg[0] = '\0';
        memset(&c->out, 0, sizeof(c->out));
        c->up = c->down = 0;
        if (mode == FA_RBENCH_SECURE)
            c->err = secure_prep(c, f->round_secure, &err);
        pthread_barrier_wait(&f->bar); /* everyone prepared: go */
        c->t0 = fa_time_mono_s();
        if (c->err == 0 && mode == FA_RBENCH_SECURE) {
            c->err = fa_round_client_run(c->rc, c->info, c->delta, c->d, c->weight, &c->out, &err);
            c->up = c->out.bytes_up;
            c->down = c->out.bytes_down;
        } else if (c->err == 0 && !c->info) {
            c->err = fa_errorf(&err, FA_ERR_STATE, "a plain round needs a secure one first");
        } else if (c->err == 0) {
            c->err = fa_rbench_plain_round(c->pc, f->round_plain, c->delta, c->d, c->weight,
                                           c->info ? c->info->quant : NULL, &c->up, &c->down, &err);
        }
        c->t1 = fa_time_mono_s();
        if (c->err != 0)
            snprintf(c->msg, sizeof(c->msg), "%s: %s", c->region, fa_error_msg(&err, c->err));
        /* c->info stays: the plain rounds use its quantisation parameters. */
        pthread_barrier_wait(&f->bar); /* done */
    }
    return NULL;
}

/* Loads region i's worker config and creates its clients. */
static int client_init(struct fa_rbench_client *c, struct fa_rbench_fed *f, int idx,
                       const char *region, const char *wcfg_path, const char *plain_server,
                       size_t d, fa_error *err)
{
    int rc;
    memset(c, 0, sizeof(*c));
    c->fed = f;
    c->idx = idx;
    snprintf(c->region, sizeof(c->region), "%s", region);
    rc = fa_config_load_worker(wcfg_path, &c->wcfg, NULL, err);
    if (rc == 0)
        rc = fa_file_mkdirs(c->wcfg->state_dir, 0700, err);
    if (rc == 0)
        rc = fa_round_client_new(&c->rc, c->wcfg, err);
    if (rc == 0 && plain_server) {
        rc = fa_rbench_plain_client_new(&c->pc, c->wcfg, plain_server, err);
        if (rc == 0)
            rc = fa_rbench_plain_hello(c->pc, err);
    }
    if (rc != 0)
        return rc;
    c->d = d;
    c->weight = 1.0 / f->n;
    /* where the worker keeps its update: the round client's update buffer
     * (worker/round_client.h) */
    if (fa_round_client_update_buffer(c->rc, d, &c->delta, err) == 0)
        c->delta_mapped = 1;
    else if (!(c->delta = malloc(d * sizeof(float))))
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory for a delta of %zu floats", d);
    synth_delta(c->delta, d, (uint64_t)idx + 1);
    return 0;
}

int fa_rbench_fed_connect_plain(struct fa_rbench_fed *f, const char *plain_server, fa_error *err)
{
    for (int i = 0; i < f->n; i++) {
        struct fa_rbench_client *c = &f->cl[i];
        int rc;
        fa_rbench_plain_client_del(c->pc);
        c->pc = NULL;
        rc = fa_rbench_plain_client_new(&c->pc, c->wcfg, plain_server, err);
        if (rc == 0)
            rc = fa_rbench_plain_hello(c->pc, err);
        if (rc != 0)
            return fa_error_prefix(err, rc, "region %s", c->region);
    }
    return 0;
}

void fa_rbench_client_free(struct fa_rbench_client *c)
{
    if (c->info)
        fedagg__federation_info__free_unpacked(c->info, NULL);
    if (!c->delta_mapped)
        free(c->delta);
    fa_round_client_del(c->rc);
    fa_rbench_plain_client_del(c->pc);
    if (c->wcfg)
        protobuf_c_message_free_unpacked(&c->wcfg->base, NULL);
    memset(c, 0, sizeof(*c));
}

/* The clients of regions names[0..n) (each with its config
 * DIR/<prefix>-worker-<region>.textproto; plain_addr: the plain server, or
 * NULL), then their threads.  0, or -1 after a json_error line for `part`. */
int fa_rbench_fed_start(struct fa_rbench_fed *f, const struct fa_rbench_paths *P, const char *part,
                        const char *prefix, char names[][32], int n, const char *plain_addr,
                        size_t d)
{
    char wpath[PATH_MAX + 64];
    fa_error err;

    fa_error_clear(&err);
    f->n = n;
    f->round_secure = 1;
    f->round_plain = 1;
    for (int i = 0; i < n; i++) {
        snprintf(wpath, sizeof(wpath), "%s/%s-worker-%s.textproto", P->dir, prefix, names[i]);
        if (client_init(&f->cl[i], f, i, names[i], wpath, plain_addr, d, &err) != 0) {
            fa_rbench_json_error(part, "region %s: %s", names[i], err.msg);
            return -1;
        }
    }
    pthread_barrier_init(&f->bar, NULL, (unsigned)n + 1);
    for (int i = 0; i < n; i++)
        if (pthread_create(&f->cl[i].th, NULL, client_main, &f->cl[i]) != 0) {
            /* n threads or none: checked before any barrier */
            fa_rbench_json_error(part, "cannot start the client threads");
            return -1;
        }
    return 0;
}

/* CPU seconds of this process and both servers. */
double fa_rbench_cpu_all(const struct fa_rbench_fed *f)
{
    double c = fa_rbench_cpu_seconds(0);
    if (f->srv_secure > 0)
        c += fa_rbench_cpu_seconds(f->srv_secure);
    if (f->srv_plain > 0)
        c += fa_rbench_cpu_seconds(f->srv_plain);
    return c;
}

/* Before every round: idle_ms of pause (--idle-ms, 0 by default), then
 * until the machine is quiet: dirty pages written back, and neither server
 * nor this process busy (under 5 ms of CPU in 100 ms), at most 10 s.  A
 * round then does not pay for the work the previous one left behind (the
 * other server's post-round trims and deletions, the kernel's writeback),
 * as rounds separated by local training do not. */
void fa_rbench_settle(const struct fa_rbench_fed *f, int idle_ms)
{
    double t0 = fa_time_mono_s();
    if (idle_ms > 0)
        usleep((useconds_t)idle_ms * 1000);
    sync();
    while (fa_time_mono_s() - t0 < 10) {
        double c0 = fa_rbench_cpu_all(f);
        usleep(100 * 1000);
        if (fa_rbench_cpu_all(f) - c0 < 0.005)
            return;
    }
}

/* Runs one round of `mode` on every client; returns the wall time from the
 * first start to the last return, or a negative value on error (msg filled). */
double fa_rbench_fed_step(struct fa_rbench_fed *f, int mode, char *msg, size_t n)
{
    double t0 = INFINITY, t1 = 0, c0, s0;
    pid_t srv = mode == FA_RBENCH_SECURE ? f->srv_secure : f->srv_plain;
    f->mode = mode;
    pthread_barrier_wait(&f->bar);
    pthread_barrier_wait(&f->bar);
    c0 = fa_rbench_cpu_seconds(0);
    s0 = srv > 0 ? fa_rbench_cpu_seconds(srv) : NAN;
    pthread_barrier_wait(&f->bar);
    f->cpu_clients = fa_rbench_cpu_seconds(0) - c0;
    f->cpu_server = srv > 0 ? fa_rbench_cpu_seconds(srv) - s0 : NAN;
    msg[0] = '\0';
    for (int i = 0; i < f->n; i++) {
        if (f->cl[i].err != 0 && !msg[0])
            snprintf(msg, n, "%s", f->cl[i].msg);
        t0 = f->cl[i].t0 < t0 ? f->cl[i].t0 : t0;
        t1 = f->cl[i].t1 > t1 ? f->cl[i].t1 : t1;
    }
    if (mode == FA_RBENCH_SECURE)
        f->round_secure++;
    else
        f->round_plain++;
    return msg[0] ? -1 : t1 - t0;
}

void fa_rbench_fed_stop(struct fa_rbench_fed *f)
{
    f->mode = FA_RBENCH_STOP;
    pthread_barrier_wait(&f->bar);
    for (int i = 0; i < f->n; i++)
        pthread_join(f->cl[i].th, NULL);
    pthread_barrier_destroy(&f->bar);
}

/* The aggregator's view of round r from its log. */
void fa_rbench_agg_phases_of(const char *log, uint64_t r, struct fa_rbench_agg_phases *ap)
{
    char *t = fa_rbench_read_text(log), *line, *save = NULL, rs[32], v[64];
    double unmask_ts = NAN;

    for (int i = 0; i < FA_SECAGG_N_PHASES; i++)
        ap->phase[i] = NAN;
    ap->finish = NAN;
    snprintf(rs, sizeof(rs), "%" PRIu64, r);
    for (line = t ? strtok_r(t, "\n", &save) : NULL; line; line = strtok_r(NULL, "\n", &save)) {
        if (!fa_rbench_kv(line, "round", v, sizeof(v)) || strcmp(v, rs) != 0)
            continue;
        if (strstr(line, "msg=\"phase closed\"") && fa_rbench_kv(line, "phase", v, sizeof(v))) {
            for (int i = 0; i < FA_SECAGG_N_PHASES; i++)
                if (!strcmp(v, fa_secagg_phase_names[i]))
                    ap->phase[i] = fa_rbench_kv_num(line, "seconds");
            if (!strcmp(v, "unmask"))
                unmask_ts = fa_rbench_line_ts(line);
        } else if (strstr(line, "msg=\"round completed\"")) {
            ap->finish = fa_rbench_line_ts(line) - unmask_ts;
        }
    }
    free(t);
}

/* The plain server's n-th "plain round committed" line (1-based round). */
void fa_rbench_plain_phases_of(const char *log, uint64_t r, struct fa_rbench_plain_phases *pp)
{
    char *t = fa_rbench_read_text(log), *line, *save = NULL, rs[32], v[64];
    pp->upload = pp->step_commit = NAN;
    snprintf(rs, sizeof(rs), "%" PRIu64, r);
    for (line = t ? strtok_r(t, "\n", &save) : NULL; line; line = strtok_r(NULL, "\n", &save))
        if (strstr(line, "msg=\"plain round committed\"") &&
            fa_rbench_kv(line, "round", v, sizeof(v)) && !strcmp(v, rs)) {
            pp->upload = fa_rbench_kv_num(line, "upload_s");
            pp->step_commit = fa_rbench_kv_num(line, "step_commit_s");
        }
    free(t);
}

/* The speed of raw AES-128-CTR keystream (OpenSSL EVP, 16 KiB blocks, as
 * the masks are expanded) in bytes per thread-CPU second, best of three
 * runs of 256 MiB: what expanding a region's masks costs at the least. */
double fa_rbench_aes_ctr_speed(void)
{
    enum { BLK = 16384 };
    static uint8_t zeros[BLK], out[BLK];
    const uint64_t bytes = (uint64_t)256 << 20;
    uint8_t key[16] = {1}, iv[16] = {0};
    double best = 0;

    for (int rep = 0; rep < 3; rep++) {
        EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
        struct timespec a, b;
        int outl;
        if (!ctx || EVP_EncryptInit_ex(ctx, EVP_aes_128_ctr(), NULL, key, iv) != 1) {
            EVP_CIPHER_CTX_free(ctx);
            return NAN;
        }
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
        for (uint64_t done = 0; done < bytes; done += BLK)
            EVP_EncryptUpdate(ctx, out, &outl, zeros, BLK);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
        EVP_CIPHER_CTX_free(ctx);
        double t = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
        if (t > 0 && bytes / t > best)
            best = bytes / t;
    }
    return best;
}

/* The speed of the mask generator this process uses (fa_mask_prg_impl: VAES
 * where the CPU has it, else OpenSSL's EVP), as a region runs it
 * (fa_bench_mask_seconds), in mask bytes (4 * words * n) per thread-CPU
 * second, best of three. */
double fa_rbench_mask_speed(size_t n, size_t words)
{
    uint32_t *in = calloc(words ? words : 1, 4);
    double best = NAN;

    for (int rep = 0; rep < 3 && in; rep++) {
        double t = fa_bench_mask_seconds(in, words, n);
        if (t > 0 && (isnan(best) || 4.0 * (double)words * (double)n / t > best))
            best = 4.0 * (double)words * (double)n / t;
    }
    free(in);
    return best;
}

/* The source tree: $FA_SRC, else the one this file was compiled from. */
int fa_rbench_find_src(struct fa_rbench_paths *P)
{
    const char *env = getenv("FA_SRC");
    char probe[PATH_MAX + 64];
    if (env && *env) {
        snprintf(P->src, sizeof(P->src), "%s", env);
    } else {
        char f[PATH_MAX];
        snprintf(f, sizeof(f), "%s", __FILE__);
        snprintf(P->src, sizeof(P->src), "%s/..", dirname(f));
    }
    snprintf(probe, sizeof(probe), "%s/benchmarks/bench-round-setup.sh", P->src);
    return access(probe, R_OK) == 0 ? 0 : -1;
}

int fa_rbench_locate(struct fa_rbench_paths *P, const char *part, const char *name, const char *dir)
{
    ssize_t len = readlink("/proc/self/exe", P->self, sizeof(P->self) - 1);
    char tmp[PATH_MAX];

    if (len <= 0) {
        fa_rbench_json_error(part, "cannot find this program (/proc/self/exe)");
        return -1;
    }
    P->self[len] = '\0';
    snprintf(tmp, sizeof(tmp), "%s", P->self);
    snprintf(P->bin, sizeof(P->bin), "%s", dirname(tmp));
    if (fa_rbench_find_src(P) != 0) {
        fa_rbench_json_error(part, "cannot find the source tree "
                                   "(benchmarks/bench-round-setup.sh); set FA_SRC");
        return -1;
    }
    if (dir) {
        snprintf(P->dir, sizeof(P->dir), "%s", dir);
        return 0;
    }
    snprintf(P->dir, sizeof(P->dir), "/tmp/fedagg-bench-%s.XXXXXX", name);
    if (!mkdtemp(P->dir)) {
        fa_rbench_json_error(part, "mkdtemp %s: %s", P->dir, strerror(errno));
        return -1;
    }
    return 0;
}

const char *fa_rbench_plain_bin(const struct fa_rbench_paths *P, char *buf, size_t n)
{
    snprintf(buf, n, "%s/fedagg-bench-cpu", P->bin);
    return access(buf, X_OK) == 0 ? buf : P->self;
}

int fa_rbench_rm_rf(const char *dir)
{
    char *argv[] = {"/bin/rm", "-rf", (char *)dir, NULL};
    return fa_rbench_run(argv, "/dev/null");
}
