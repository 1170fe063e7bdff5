/* train.h - the training loop of the built-in trainer, and one local round.
 *
 * One step (rank r of R, each rank holding the SAME data set):
 *
 *   perm = shuffle of 0..n-1, seeded by (seed, epoch): identical on every rank
 *   global batch  = perm[s*B .. s*B + B)                 (B = batch_size; the
 *                                                          last batch of an epoch may be short)
 *   this rank's part = contiguous slice r of R of that batch
 *   forward/backward on the part, grads scaled by 1/|global batch|
 *   allreduce(grads)          <- the hook: must leave the SUM over ranks in grads
 *   SGD step (momentum, weight decay)
 *
 * So 1, 2 or 4 ranks with the same seed and global batch follow the same
 * trajectory up to float summation order.  Without a hook (one process), the
 * local gradient is already the batch mean.
 *
 * The hook is where the distributed worker plugs in its collectives
 * (MPI on host memory, NCCL on device memory) and gradient compression
 * (per layer, using fa_mlp_layout_of(m)->tensors for names/shapes/offsets).
 *
 * DP-SGD (opts.dp; Abadi et al. 2016, "Deep Learning with Differential
 * Privacy", Algorithm 1, with Poisson sampling as its accountant assumes):
 * step t of the run is, on every rank,
 *
 *   batch = {i : u_i(t) < q}, u_i(t) uniform 64-bit words of the run's
 *           sampling stream (ChaCha20 keyed from dp.key, nonce t): every
 *           example independently with probability q, the same on every rank
 *   this rank's part = contiguous slice r of R of the batch (ascending indices)
 *   grads = (1 / (q n)) sum over the part of min(1, C / ||g_i||) g_i
 *           (per-example clipping by ghost norms: fa_mlp_forward_backward_clipped)
 *   rank dp.noise_rank alone: grads += N(0, (sigma C / (q n))^2 I) from the
 *           run's noise stream (ChaCha20 under another key, nonce t)
 *   allreduce(grads)   -> (1/(q n)) (sum over the batch of clipped g_i + N(0, sigma^2 C^2 I))
 *   SGD step
 *
 * so the noise is added once per step for the whole region, whatever the
 * number of ranks, and the sum is normalised by the expected batch size
 * q n (as Opacus does; n, the data set's size, is treated as public).  A
 * pass ("epoch") is ceil(1/q) steps; batch_size is not used; a part larger
 * than the network's max_batch is processed in pieces.  The key is the
 * run's secret: the samples and the noise are functions of it, so it must
 * be fresh from a CSPRNG for every run (a fixed key is for tests).  A run
 * resumed with the same key takes the same steps bit for bit; one resumed
 * with a fresh key (what the worker does, worker/local_round.h) draws other
 * samples and noise for the steps after the resume point, each as valid as
 * the first run's: the update it releases went through the same number of
 * noisy steps.
 *
 * Preemption: a second hook is called between steps with the run's position
 * (fa_train_pos); it may save the run there and stop it.  The parameters,
 * the momentum, that position and the gradient hook's own state are all a
 * run is made of, so a run resumed from them (opts.resume) takes the same
 * steps, bit for bit, as one that was never stopped.
 */
#ifndef FA_MODEL_TRAIN_H
#define FA_MODEL_TRAIN_H

#include <stdint.h>

#include "common/fa_err.h"
#include "model/mlp.h"

/* Gradient all-reduce hook, called after every backward pass and before the
 * optimizer step.  grads is the network's gradient block (n floats, layout
 * fa_mlp_layout_of(m)); on_device says whether it is CUDA device memory
 * (then work must be ordered on fa_mlp_cuda_stream(m) or synchronised before
 * returning).  step counts from 0 over the whole run (the PowerSGD start step).
 * On return grads must hold the SUM over ranks of their gradient blocks
 * (possibly compressed and decompressed).  Returns 0, or a negative FA_ERR_*
 * code (with err filled) that stops training and is returned to the caller. */
typedef int (*fa_train_allreduce_fn)(void *user, fa_mlp *m, float *grads, size_t n,
                                     int on_device, uint64_t step, fa_error *err);

/* Called after every epoch (or, in steps mode, every `report_every` steps and
 * at the end), e.g. to evaluate and log.  A negative return stops training
 * and is returned to the caller. */
typedef int (*fa_train_report_fn)(void *user, fa_mlp *m, uint32_t epoch, uint64_t step,
                                  double mean_loss, fa_error *err);

enum { FA_LR_CONSTANT = 0, FA_LR_COSINE = 1 };

/* Where a run stands between two steps: besides the network's parameters
 * and momentum, all that the rest of the run depends on.  The data position
 * is `step` itself: epoch e's shuffle is a function of (seed, e) and step
 * s of the run is batch s mod steps_per_epoch of epoch s / steps_per_epoch,
 * so no random state needs keeping.  The sums are kept exactly (a resumed
 * run adds the next losses to the same double). */
typedef struct fa_train_pos {
    uint64_t step;       /* optimizer steps taken */
    uint64_t samples;    /* as fa_train_result.samples, so far */
    double pass_loss;    /* this rank's loss sum over the current pass so far */
    uint64_t pass_count; /* and its examples */
} fa_train_pos;

/* fa_train_boundary_fn's answer: go on, or stop the run where it stands. */
enum { FA_TRAIN_GO_ON = 0, FA_TRAIN_STOP = 1 };

/* Called between steps: where the run starts (pos->step 0, or the resumed
 * position), after every step, and once more after the last (pos->step ==
 * total, the run's step count).  The network then holds exactly the state of
 * pos: saved together with pos (and the hook's own gradient compressor), it
 * lets a later run with opts.resume = pos continue the same trajectory bit
 * for bit.  Returns FA_TRAIN_GO_ON, FA_TRAIN_STOP (fa_train_run returns
 * FA_ERR_CANCELLED with the network left at pos, and fills err), or a
 * negative FA_ERR_* (with err filled) that stops training with that error. */
typedef int (*fa_train_boundary_fn)(void *user, fa_mlp *m, const fa_train_pos *pos, uint64_t total,
                                    fa_error *err);

/* DP-SGD's parameters (see the top of this file). */
#define FA_TRAIN_DP_KEY_BYTES 32
typedef struct fa_train_dp {
    double sampling_rate;    /* q in (0, 1]: Poisson sampling probability of each example */
    double clip;             /* C > 0: per-example L2 norm bound */
    double noise_multiplier; /* sigma >= 0: noise stddev sigma C on the clipped sum */
    uint32_t noise_rank;     /* the one rank that adds the noise (default 0) */
    uint8_t key[FA_TRAIN_DP_KEY_BYTES]; /* the run's secret (same on every rank); wipe after */
} fa_train_dp;

typedef struct fa_train_opts {
    uint32_t epochs;        /* passes over the data set; used when steps == 0.  Default 1 */
    uint32_t steps;         /* optimizer steps; 0 = use epochs.  Default 0 */
    uint32_t batch_size;    /* GLOBAL batch across all ranks.  Default 64 */
    fa_sgd sgd;             /* default lr 0.05, momentum 0.9, weight decay 0 */
    int lr_schedule;        /* FA_LR_CONSTANT (default) or FA_LR_COSINE: lr * (1 + cos(pi t/T)) / 2
                               over the run's T steps, after `warmup_steps` of linear warm-up */
    uint32_t warmup_steps;  /* default 0 */
    uint64_t seed;          /* shuffling.  Default 1 */
    uint32_t rank, world;   /* this process's part of each global batch.  Default 0 of 1 */
    fa_train_allreduce_fn allreduce; /* NULL: one process, no all-reduce */
    void *allreduce_user;
    fa_train_report_fn report;       /* optional */
    void *report_user;
    uint32_t report_every;  /* steps mode: report every N steps (0 = only at the end) */
    fa_train_boundary_fn boundary; /* optional: preemption and periodic checkpoints */
    void *boundary_user;
    const fa_train_pos *resume; /* NULL: from step 0.  Else continue a run saved at this
                                   position with the same options and data, the network
                                   (and the hook's state) restored to it by the caller */
    const fa_train_dp *dp;      /* NULL: plain SGD.  Else DP-SGD (borrowed for the run) */
} fa_train_opts;

void fa_train_opts_default(fa_train_opts *o);

typedef struct fa_train_result {
    uint64_t steps;        /* optimizer steps taken */
    uint64_t samples;      /* example-gradients computed, all ranks together (sum of global batches) */
    uint64_t num_examples; /* distinct examples of the data set used: n for >= 1 epoch,
                              min(n, samples) in steps mode (DP-SGD: always n); the
                              FedAvg weight n_u */
    double mean_loss;      /* mean training loss of this rank's examples over the last
                              (in steps mode possibly partial) pass over the data */
    uint64_t clipped;      /* DP-SGD: this rank's examples whose gradient norm exceeded the
                              clip, in the steps this call ran (not those before a resume) */
} fa_train_result;

/* DP-SGD's random streams, as the loop draws them (for tests and tools).
 * fa_train_dp_steps_per_pass: ceil(1/q), the steps of one pass.
 * fa_train_dp_sample: the Poisson batch of step `step` over n examples,
 * written to idx (room for n) in ascending order; returns its size.
 * fa_train_dp_noise: out[0..len) = N(0, stddev^2) noise of step `step`
 * (the ziggurat of Marsaglia and Tsang with Doornik's correction, in double
 * precision, rounded to float).
 * Both are deterministic functions of (key, step). */
uint64_t fa_train_dp_steps_per_pass(double q);
uint32_t fa_train_dp_sample(const uint8_t key[FA_TRAIN_DP_KEY_BYTES], uint64_t step, uint32_t n,
                            double q, uint32_t *idx);
void fa_train_dp_noise(const uint8_t key[FA_TRAIN_DP_KEY_BYTES], uint64_t step, float *out,
                       size_t len, double stddev);

/* Trains m from its current parameters and momentum on data with opts
 * (from opts->resume when set).  res may be NULL.  Returns 0,
 * FA_ERR_INVAL (empty data set, dim or a label not matching the model,
 * batch of 0, rank >= world, a part larger than the network's max_batch, a
 * resume position past the run's end, DP-SGD parameters out of range:
 * message says which), FA_ERR_NOMEM,
 * FA_ERR_CANCELLED (the boundary hook stopped the run), or the hooks' /
 * backend's error. */
int fa_train_run(fa_mlp *m, const fa_dataset *data, const fa_train_opts *opts,
                 fa_train_result *res, fa_error *err);

/* One single-process (or one rank's) local round of federated training:
 *
 *   params = global; momentum = 0; fa_train_run(...); delta = params - global
 *
 * With opts->resume the first two are skipped: the caller has restored the
 * network's parameters and momentum at that position of this same round.
 * global and delta are host arrays of n_params floats (delta may not alias
 * global).  On failure delta is unspecified and res untouched.  Returns as
 * fa_train_run. */
int fa_train_local_round(fa_mlp *m, const float *global, const fa_dataset *data,
                         const fa_train_opts *opts, float *delta, fa_train_result *res,
                         fa_error *err);

#endif
