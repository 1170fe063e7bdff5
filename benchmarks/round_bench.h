/* round_bench.h - helpers of `fedagg-bench round` (benchmarks/bench_round.c):
 *
 *   round_plain.c  the plaintext anchor: a server that sums unmasked,
 *                  quantised, bit-packed updates streamed over the same
 *                  HTTP/3 transport, and its client
 *   round_proc.c   child processes (spawn, stop, peak RSS), free ports
 *
 * Nothing here is part of the product; it exists so that the benchmark can
 * measure the product next to an anchor built from the same parts.
 */
#ifndef FA_BENCH_ROUND_H
#define FA_BENCH_ROUND_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/fa_err.h"
#include "config.pb-c.h"
#include "fedagg.pb-c.h"

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

/* Monotonic seconds. */
double fa_rbench_now(void);

#endif
