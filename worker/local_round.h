/* local_round.h - one local round of the built-in trainer across the local
 * ranks of a region (docs/architecture.md, Inside a region): the library entry point the worker daemon
 * and the federation call.
 *
 *   rank 0 holds the global weights  --broadcast-->  every rank
 *   every rank: params = global, momentum = 0, then E epochs or S steps of
 *     data-parallel SGD (model/train.h): rank r computes the gradient of its
 *     slice of each global batch, the gradients are summed through the
 *     compressor (worker/compress.h) over the communicator
 *     (worker/comm.h), and every rank applies the same step
 *   rank 0 returns delta = w_local - w_global and the examples used (n_u)
 *
 * Every rank must hold the same shard (the region's data set; each trains
 * on its slice of every batch) and the same options; this is checked at the
 * start, and a mismatch fails on every rank alike.  With no compression, 1,
 * 2 or 4 ranks with the same global batch follow the same trajectory up to
 * float summation order.
 *
 * The compressor's state (error feedback, PowerSGD's warm-start Q, its step
 * count) lives in the fa_local_round and carries over from one round to
 * the next, so powersgd_start_step counts steps since the worker started.
 *
 * Where the gradient lives: on a CPU model the compressor works in place;
 * on a GPU model with no compression and the NCCL backend the all-reduce runs
 * on the device, on the model's CUDA stream; otherwise the gradient is copied
 * to host memory, compressed, and copied back.  Create the communicator
 * before the model: the NCCL backend selects each rank's GPU.
 *
 * Preemption (fa_local_round_run_resumable, worker/local_checkpoint.h): a
 * stop flag raised on any rank (a SIGTERM) is agreed on at the next step
 * boundary; every rank saves its part of the round (the same parameters and
 * momentum, its own compressor state) and returns FA_ERR_CANCELLED, and the
 * restarted ranks resume it together, or all train it afresh.
 *
 * DP-SGD (opts->dp, model/train.h): rank 0's dp.key is the run's secret
 * and is broadcast to the region's ranks (which need the same Poisson
 * samples); rank 0 alone adds the noise, once per step for the region.  The
 * caller draws the key fresh from a CSPRNG for every call (randombytes_buf)
 * and wipes it after.  A resumed round therefore continues the saved
 * parameters with new samples and noise (the saved file holds no key); its
 * update still went through the round's number of noisy steps.  With more
 * than one rank, compression must be NONE (each rank's part would be
 * compressed before the noise is in the sum).
 *
 * Failure: an error found before training (a rank with another shard size,
 * options or model size) is returned on every rank.  A rank that fails in
 * the middle of a round leaves the others waiting in a collective: the
 * worker then exits and the launcher (mpirun) ends the job.
 */
#ifndef FA_WORKER_LOCAL_ROUND_H
#define FA_WORKER_LOCAL_ROUND_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "model/mlp.h"
#include "model/train.h"
#include "worker/comm.h"
#include "worker/compress.h"

struct Fedagg__BuiltinTrainer;

/* Fills o from the worker config's builtin trainer (NULL: defaults):
 * epochs, steps, global batch size, SGD settings and seed.  Returns 0 or
 * FA_ERR_INVAL naming the field (batch_size 0, learning_rate <= 0 or not
 * finite, momentum outside [0, 1), negative weight_decay). */
int fa_local_round_train_opts_from_proto(fa_train_opts *o, const struct Fedagg__BuiltinTrainer *pb,
                                         fa_error *err);

typedef struct fa_local_round fa_local_round;

/* Creates the round runner of this rank for model m over comm (both
 * borrowed, both must outlive it), compressing with cc (NULL: none).
 * Not collective.  Returns 0, FA_ERR_INVAL or FA_ERR_NOMEM. */
int fa_local_round_new(fa_local_round **out, fa_comm *comm, fa_mlp *m,
                       const fa_compress_config *cc, fa_error *err);

/* NULL is a no-op. */
void fa_local_round_del(fa_local_round *lr);

typedef struct fa_local_round_result {
    uint64_t num_examples;  /* distinct examples of the shard used (the FedAvg weight n_u) */
    uint64_t steps;         /* optimizer steps */
    double mean_loss;       /* mean training loss over the last epoch, over all ranks */
    uint64_t payload_bytes; /* bytes this rank contributed to the gradient all-reduces */
    uint64_t wire_bytes;    /* bytes it put on the wire for them (ring model, comm.h) */
    double seconds;         /* wall time of the round on this rank */
    int resumed;            /* the round continued a saved one (fa_local_round_run_resumable) */
    uint64_t resumed_step;  /* at this step */
    uint32_t saves;         /* times this rank saved the round (periodic, and on a stop) */
    uint64_t samples;       /* example-gradients over the round's batches (DP: Poisson sizes) */
    uint64_t clipped;       /* DP-SGD: of those, clipped, all ranks (in the steps this call ran) */
} fa_local_round_result;

/* Runs one round.  Collective: every rank calls it with the same shard and
 * opts.  global: rank 0's n_params floats (ignored elsewhere; may be NULL).
 * delta: rank 0's output, n_params floats (others may pass NULL; on rank 0
 * it is written only on success).  opts: epochs/steps, batch size (global,
 * across ranks), SGD, seed, schedule, report hook; its rank, world and
 * allreduce fields are set here.  res may be NULL.
 * Returns 0, FA_ERR_INVAL (bad arguments; ranks disagree on the shard size,
 * model size or options; DP-SGD with compression over several ranks: the
 * message says which), FA_ERR_RANGE (the delta
 * is not finite: training diverged, nothing to send), or the errors of the
 * model, the compressor and the communicator. */
int fa_local_round_run(fa_local_round *lr, const float *global, const fa_dataset *shard,
                       const fa_train_opts *opts, float *delta, fa_local_round_result *res,
                       fa_error *err);

/* Preemption and periodic checkpoints of a round (worker/local_checkpoint.h). */
typedef struct fa_local_round_ckpt {
    const char
        *path; /* this rank's file (every rank its own, e.g. <state_dir>/local-round.<rank>) */
    /* Set (by a signal handler, on any rank): the round is saved at the next
     * step boundary and every rank returns FA_ERR_CANCELLED.  May be NULL. */
    const volatile sig_atomic_t *stop;
    double every_s; /* > 0: also saved every every_s seconds of training (rank 0's clock) */
    double (*now)(void *user); /* that clock in seconds; NULL: CLOCK_MONOTONIC */
    void *now_user;
    /* Tests: called on every rank at every step boundary, before the stop
     * flag is read (a test raises SIGTERM after step k).  May be NULL. */
    void (*on_boundary)(void *user, uint64_t step);
    void *on_boundary_user;
    /* What the round belongs to: rank 0's values count, the others get them. */
    uint64_t round;
    uint32_t attempt;
    uint64_t version;
    uint8_t model_sha256[32];
    /* fa_local_ckpt_digest_shard of the shard, computed once by a caller
     * whose data does not change; NULL: computed at every round. */
    const uint8_t *shard_digest;
} fa_local_round_ckpt;

/* fa_local_round_run, resumable.  Before training, every rank looks for its
 * saved round at ck->path bound to this round (its round, model version and
 * digest, the weights it starts from on rank 0, the options, compression,
 * shard, ranks and backend); when every rank has one at the same step, the
 * network and compressor are restored and training continues from there, so
 * the delta is the one an uninterrupted round gives, bit for bit.  A file
 * that is damaged or belongs to something else is logged (what, and why),
 * removed, and the round trained afresh; so is a set that the ranks
 * disagree on.  While training, with *ck->stop set (any rank) the round is
 * saved at the next step boundary (the ranks agree on which through a
 * one-float all-reduce per step) and FA_ERR_CANCELLED returned; with
 * ck->every_s it is also saved periodically.  The finished round is saved
 * too (a worker stopped before its update is in the round client's attempt
 * state resumes it in no steps); the next round removes it.  ck NULL (or
 * ck->path NULL) is fa_local_round_run.
 * Returns as fa_local_round_run, and FA_ERR_CANCELLED (stopped: the message
 * says at which step, and whether the round was saved). */
int fa_local_round_run_resumable(fa_local_round *lr, const float *global, const fa_dataset *shard,
                                 const fa_train_opts *opts, const fa_local_round_ckpt *ck,
                                 float *delta, fa_local_round_result *res, fa_error *err);

/* The compressor (for its statistics). */
const fa_compress *fa_local_round_compressor(const fa_local_round *lr);

#endif
