/* round_bench.h - helpers of `fedagg-bench round` (benchmarks/bench_round.c)
 * and `fedagg-bench scale` (benchmarks/bench_scale.c):
 *
 *   round_plain.c  the plaintext anchor: a server that sums unmasked,
 *                  quantised, bit-packed updates streamed over the same
 *                  HTTP/3 transport, and its client
 *   round_fed.c    the federation both run: PKI and configs, region clients
 *                  as threads of the bench, one round of either mode, logs
 *                  and JSON
 *   round_proc.c   child processes (spawn, stop, peak RSS), free ports
 *
 * Nothing here is part of the product; it exists so that the benchmark can
 * measure the product next to an anchor built from the same parts.
 */
#ifndef FA_BENCH_ROUND_H
#define FA_BENCH_ROUND_H

#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "common/fa_err.h"
#include "config.pb-c.h"
#include "fedagg.pb-c.h"
#include "worker/round_client.h"

/* ---- the plaintext anchor (round_plain.c) ------------------------------------ */

/* Runs the plaintext aggregation server described by an aggregator config
 * (its listen address, TLS files, QUIC settings, model spec, optimizer,
 * quantisation, storage dir and number of regions) until SIGTERM/SIGINT.
 * Each round: every region POSTs /plain/upload/<round> with its quantised
 * update bit-packed at the aggregator's ring bits (the same bytes a masked
 * upload has, without the masks); the server sums them as they stream in
 * (fa_ring_unpack_add), and when all regions are in: decodes the weighted
 * mean, applies the server optimizer, commits the version to a model store
 * and answers every upload.  GET /plain/hello answers 200 (to connect).
 * Returns a process exit status. */
int fa_rbench_plain_serve(const char *config_path);

typedef struct fa_rbench_plain_client fa_rbench_plain_client;

/* A client of the plain server at `server` ("127.0.0.1:port") with the TLS
 * files and QUIC settings of the worker config wcfg (the region's
 * certificate).  Returns 0 or an FA_ERR_* code. */
int fa_rbench_plain_client_new(fa_rbench_plain_client **out, const Fedagg__WorkerConfig *wcfg,
                               const char *server, fa_error *err);
void fa_rbench_plain_client_del(fa_rbench_plain_client *c);

/* GET /plain/hello (establishes the connection). */
int fa_rbench_plain_hello(fa_rbench_plain_client *c, fa_error *err);

/* One plaintext round: checks and quantises delta exactly as the secure
 * client does (finite check, L2 clip, stochastic rounding with an AES-CTR
 * generator, the weight as an extra coordinate), streams it bit-packed and
 * waits for the server's answer (sent once the new version is committed).
 * bytes_up/down: QUIC bytes of this round from the client's statistics. */
int fa_rbench_plain_round(fa_rbench_plain_client *c, uint64_t round, const float *delta, size_t d,
                          double weight, const Fedagg__QuantParams *q, uint64_t *bytes_up,
                          uint64_t *bytes_down, fa_error *err);

/* ---- the federation (round_fed.c) ---------------------------------------------- */

#define FA_RBENCH_MAX_REGIONS 32
#define FA_RBENCH_FED_ID "bench"

/* The measured federation's settings: 16-bit quantisation, FedAdam, and
 * deadlines no measured round comes near. */
#define FA_RBENCH_QUANT                                                                            \
    "bits: 16 clip: CLIP_L2 clip_l2_norm: 10.0 clip_value: 0.05 max_examples: 60000"
#define FA_RBENCH_OPT "kind: FEDADAM learning_rate: 0.01 beta1: 0.9 beta2: 0.99 tau: 0.001"
#define FA_RBENCH_ROUND                                                                            \
    "advertise_deadline_ms: 600000 shares_deadline_ms: 120000 masked_deadline_ms: 600000 "         \
    "consistency_deadline_ms: 120000 unmask_deadline_ms: 120000"

struct fa_rbench_paths {
    char bin[PATH_MAX];  /* directory of fedagg-bench and its siblings */
    char src[PATH_MAX];  /* source tree (benchmarks/bench-round-setup.sh) */
    char self[PATH_MAX]; /* this binary */
    char dir[PATH_MAX];  /* work directory */
};

/* An aggregator config (also the plain server's): fa_rbench_write_aggregator. */
struct fa_rbench_agg {
    const char *path; /* config file to write */
    int port, mport;
    char (*names)[32];
    int n;
    int rounds;
    const uint32_t *hidden;
    size_t n_hidden;
    const char *optimizer; /* body of the optimizer block */
    const char *quant;     /* body of the quantization block */
    const char *round;     /* the round block's policy (besides rounds) */
    const char *storage;   /* storage dir, relative to the config */
    int evaluation;
    int keep_versions; /* storage.keep_versions; 0 = 2 */
    const char *extra; /* more of the config (e.g. a quic block), or NULL */
};

/* The region clients, threads of the bench: each runs one round of the mode
 * the main thread sets (fa_rbench_fed_step), secure (fa_round_client_run on
 * a synthetic delta) or plain (fa_rbench_plain_round on the same delta). */
enum { FA_RBENCH_STOP = 0, FA_RBENCH_SECURE = 1, FA_RBENCH_PLAIN = 2 };

struct fa_rbench_fed;

struct fa_rbench_client {
    struct fa_rbench_fed *fed;
    int idx;
    char region[32];
    Fedagg__WorkerConfig *wcfg;
    fa_round_client *rc;
    fa_rbench_plain_client *pc;
    float *delta;
    int delta_mapped; /* delta is the round client's update buffer */
    size_t d;
    double weight;
    pthread_t th;
    /* The step in progress. */
    Fedagg__FederationInfo *info;
    double t0, t1;
    fa_round_outcome out;
    uint64_t up, down;
    int err;
    char msg[512];
};

struct fa_rbench_fed {
    int n;
    struct fa_rbench_client cl[FA_RBENCH_MAX_REGIONS];
    pthread_barrier_t bar;
    int mode;
    uint64_t round_secure, round_plain; /* the round each mode runs next */
    pid_t srv_secure, srv_plain;        /* the server processes */
    double cpu_clients, cpu_server;     /* CPU seconds of the last step */
};

/* One JSON line {"bench":"round_<part>","error":"..."} on stdout (and the
 * message on stderr). */
void fa_rbench_json_error(const char *part, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Writes text to path; 0 or -1. */
int fa_rbench_write_text(const char *path, const char *text);
/* A whole file, NUL-terminated (malloc'ed), or NULL. */
char *fa_rbench_read_text(const char *path);
int fa_rbench_log_has(const char *path, const char *needle);
size_t fa_rbench_log_count(const char *path, const char *needle);
/* Waits until the log of pid has needle: 0, or -1 when pid died or time ran out. */
int fa_rbench_wait_log(const char *path, const char *needle, pid_t pid, double timeout_s);
/* key=value of a logfmt line (unquoted values): 1 and out filled, or 0. */
int fa_rbench_kv(const char *line, const char *key, char *out, size_t n);
double fa_rbench_kv_num(const char *line, const char *key);
/* Seconds of the day of a line's ts=...: NAN when absent. */
double fa_rbench_line_ts(const char *line);
/* Index of the element nearest the median. */
int fa_rbench_median_index(const double *v, int n);
/* "region-01" ... */
void fa_rbench_region_name(int i, char *out, size_t n);
/* PKI and identity keys of names[0..n) in dir (and non-IID shards of
 * Fashion-MNIST with alpha >= 0) by benchmarks/bench-round-setup.sh. */
int fa_rbench_setup_dir(const struct fa_rbench_paths *P, const char *dir, char names[][32], int n,
                        double alpha, int seed);
int fa_rbench_write_aggregator(const struct fa_rbench_agg *a);
/* A worker config for region r (what the client threads load too); extra:
 * more of the config, or NULL. */
int fa_rbench_write_worker(const char *path, const char *r, int port, char names[][32], int n,
                           const char *data_dir, const char *trainer, const char *state_dir,
                           const char *extra);
/* The clients of names[0..n) (config DIR/<prefix>-worker-<region>.textproto,
 * a synthetic delta of d floats each; plain_addr: the plain server to
 * connect to now, or NULL), then their threads.  0, or -1 after a JSON
 * error line for part. */
int fa_rbench_fed_start(struct fa_rbench_fed *f, const struct fa_rbench_paths *P, const char *part,
                        const char *prefix, char names[][32], int n, const char *plain_addr,
                        size_t d);
/* Connects every client to the plain server at plain_server (replacing an
 * earlier connection).  0 or an FA_ERR_* code. */
int fa_rbench_fed_connect_plain(struct fa_rbench_fed *f, const char *plain_server, fa_error *err);
/* CPU seconds of this process and both servers. */
double fa_rbench_cpu_all(const struct fa_rbench_fed *f);
/* Before a round: idle_ms, then until the machine is quiet (at most 10 s). */
void fa_rbench_settle(const struct fa_rbench_fed *f, int idle_ms);
/* One round of mode on every client: the wall time from the first start to
 * the last return, or a negative value (msg filled). */
double fa_rbench_fed_step(struct fa_rbench_fed *f, int mode, char *msg, size_t n);
void fa_rbench_fed_stop(struct fa_rbench_fed *f);
void fa_rbench_client_free(struct fa_rbench_client *c);
/* Where a round's time went, from the aggregator's log (round r) and the
 * plain server's (its r-th "plain round committed" line). */
struct fa_rbench_agg_phases {
    double phase[FA_SECAGG_N_PHASES]; /* aggregator: seconds each phase was open */
    double finish;   /* unmask close -> round completed: decode, optimizer, commit, audit */
};
struct fa_rbench_plain_phases {
    double upload, step_commit; /* step_commit: decode, optimizer and commit, one streamed pass */
};
void fa_rbench_agg_phases_of(const char *log, uint64_t r, struct fa_rbench_agg_phases *ap);
void fa_rbench_plain_phases_of(const char *log, uint64_t r, struct fa_rbench_plain_phases *pp);
/* Raw AES-128-CTR keystream speed (OpenSSL EVP), bytes per thread-CPU second. */
double fa_rbench_aes_ctr_speed(void);
/* The speed of this process's mask generator (crypto/mask_prg_internal.h): n masks
 * through fa_mask_prg_mask over `words` coordinates, mask bytes per thread-CPU
 * second, best of three. */
double fa_rbench_mask_speed(size_t n, size_t words);
/* The source tree into P->src ($FA_SRC, else this file's): 0 or -1. */
int fa_rbench_find_src(struct fa_rbench_paths *P);
/* Fills P->self and P->bin (this binary and its directory), P->src
 * (fa_rbench_find_src) and P->dir (dir when given, else a new
 * /tmp/fedagg-bench-<name>.XXXXXX).  On failure prints the JSON error line
 * of `part` (fa_rbench_json_error) and returns -1. */
int fa_rbench_locate(struct fa_rbench_paths *P, const char *part, const char *name,
                     const char *dir);
int fa_rbench_rm_rf(const char *dir);
/* The binary that serves the plaintext anchor (`round --serve-plain`):
 * fedagg-bench-cpu beside this one when it is there (a CUDA build: the
 * benchmarks without the GPU backend, as the aggregator is built), else
 * this binary. */
const char *fa_rbench_plain_bin(const struct fa_rbench_paths *P, char *buf, size_t n);

/* ---- processes (round_proc.c) ---------------------------------------------- */

/* Starts argv[0] (a path) with stdout and stderr appended to log_path and
 * OPENBLAS_NUM_THREADS=1 in its environment.  Returns 0 or FA_ERR_IO. */
int fa_rbench_spawn(pid_t *pid, char *const argv[], const char *log_path, fa_error *err);

/* Runs argv to completion with output appended to log_path; returns its
 * exit status (or -1 when it could not start or was killed). */
int fa_rbench_run(char *const argv[], const char *log_path);

/* SIGTERM, up to timeout_ms for it to exit, then SIGKILL; reaps it.
 * Returns the exit status (128 + signal when killed by one). */
int fa_rbench_stop(pid_t pid, unsigned timeout_ms);

/* Whether the child is still running (not reaped). */
int fa_rbench_alive(pid_t pid);

/* VmHWM (peak resident set) of a process in KiB, or -1. */
long fa_rbench_vmhwm_kib(pid_t pid);

/* CPU seconds (user + system, all threads) a process has used so far;
 * pid 0 = this process.  -1 when unknown. */
double fa_rbench_cpu_seconds(pid_t pid);

/* A free port on 127.0.0.1 (udp non-zero: UDP, else TCP), or -1. */
int fa_rbench_free_port(int udp);

/* On SIGINT, SIGTERM, SIGHUP: SIGKILL every child still running, then die
 * of the signal. */
void fa_rbench_cleanup_on_signals(void);

#endif
