/* external_trainer.h - one local round by a user's own command (PyTorch,
 * JAX...), `trainer { external { command: [...] } }` in the worker config.
 *
 *   1. the global weights go to <scratch>/external-input.safetensors (F32,
 *      PyTorch nn.Linear names, as fa_mlp_save writes them; __metadata__
 *      carries "fedagg.round" and "fedagg.region" when given);
 *   2. the command runs: argv with every "{input}" and "{output}" replaced
 *      by the two paths, which are also in the environment as FEDAGG_INPUT
 *      and FEDAGG_OUTPUT (with FEDAGG_ROUND and FEDAGG_REGION), plus the
 *      configured "KEY=VALUE" entries; its own process group; stdin from
 *      /dev/null; stdout and stderr to <scratch>/external-trainer.log; in
 *      the configured working directory;
 *   3. we wait at most timeout_s; past it the whole process group gets
 *      SIGTERM, then SIGKILL after a grace period.  Whatever the outcome,
 *      the group is killed once the command has exited, so no straggler
 *      writes into the scratch directory later;
 *   4. <scratch>/external-output.safetensors must hold exactly the model's
 *      tensors (names, shapes, dtype F32), finite values, and a decimal
 *      "num_examples" >= 1 in __metadata__.
 *
 * Any failure (exit status other than 0, a signal, the timeout, a missing,
 * malformed or mismatched output) returns a negative code with a message
 * that names the command, the reason and the tail of its log: the worker
 * then skips this round for its region rather than send garbage.  On
 * failure the caller's delta is left untouched.
 */
#ifndef FA_WORKER_EXTERNAL_TRAINER_H
#define FA_WORKER_EXTERNAL_TRAINER_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "model/mlp.h"

struct Fedagg__ExternalTrainer;

typedef struct fa_external_opts {
    const char *const *argv; /* the command, argv[0] looked up in PATH */
    size_t argc;
    const char *const *env;  /* "KEY=VALUE" entries added to the environment */
    size_t n_env;
    uint32_t timeout_s;      /* >= 1 */
    uint32_t kill_grace_ms;  /* SIGTERM to SIGKILL; default 2000 */
    const char *workdir;     /* NULL: scratch_dir */
    const char *scratch_dir; /* input, output and log files; created if missing */
    uint64_t round;          /* FEDAGG_ROUND; informational */
    const char *region;      /* FEDAGG_REGION; NULL: not set */
    char scratch_buf[1024];  /* storage of fa_external_opts_from_proto */
    char workdir_buf[1024];
} fa_external_opts;

void fa_external_opts_default(fa_external_opts *o);

/* Points o at the config message's fields (pb must outlive o); a relative
 * workdir is taken relative to state_dir, no workdir means state_dir, and
 * scratch_dir is <state_dir>/external.  Returns 0 or FA_ERR_INVAL (empty
 * command, timeout 0, an env entry without '=', a path too long: the
 * message names the field). */
int fa_external_opts_from_proto(fa_external_opts *o, const struct Fedagg__ExternalTrainer *pb,
                                const char *state_dir, fa_error *err);

/* Result of one external round. */
typedef struct fa_external_result {
    uint64_t num_examples; /* from the output's __metadata__ */
    int exit_status;       /* the command's exit status (-1 when it did not exit) */
    double seconds;        /* wall time of the command */
} fa_external_result;

/* Runs one round: global (l->n_params floats) in, delta = updated - global
 * out (l->n_params floats, written only on success).  Returns 0 or
 *   FA_ERR_INVAL     bad options; output names/shapes/dtypes differ from the
 *                    model, or a value is NaN/infinite
 *   FA_ERR_CHILD     the command could not be started, exited non-zero or
 *                    died of a signal
 *   FA_ERR_TIMEOUT   it ran past timeout_s (its process group was killed)
 *   FA_ERR_NOTFOUND  it exited 0 but wrote no output file, or no num_examples
 *   FA_ERR_PARSE     the output is not valid safetensors, or num_examples is
 *                    not a positive decimal integer
 *   FA_ERR_IO, FA_ERR_NOMEM
 * and in every failure case the round is to be skipped. */
int fa_external_round(const fa_external_opts *o, const fa_mlp_layout *l, const float *global,
                      float *delta, fa_external_result *res, fa_error *err);

#endif
