/* external_trainer.h - local rounds by a user's own command (PyTorch, JAX,
 * torchrun...), `trainer { external { command: [...] } }` in the worker
 * config: any safetensors model, described by its tensor table
 * (model/tensors.h).  The contract is docs/trainer-contract.md.
 *
 * Every task (train, or evaluate only) goes like this:
 *
 *   1. <scratch>/external-input.safetensors gets the global model: every
 *      tensor with its name, shape and dtype as downloaded, except that the
 *      tensors the federation does not federate carry this region's own
 *      values from its last successful round when local_path is set
 *      (LOCAL_KEEP, FedBN) and that file matches the model; __metadata__ is
 *      the global's plus "fedagg.round", "fedagg.version", "fedagg.region"
 *      and "fedagg.federated" (fa_tensors_save);
 *   2. the trainer runs the task:
 *        one-shot     the command runs once: argv with "{input}", "{output}"
 *                     and "{result}" replaced, also in the environment as
 *                     FEDAGG_INPUT, FEDAGG_OUTPUT, FEDAGG_RESULT, with
 *                     FEDAGG_TASK, FEDAGG_ROUND, FEDAGG_VERSION, FEDAGG_REGION
 *                     and the configured "KEY=VALUE" entries, its own process
 *                     group, stdin /dev/null, stdout and stderr to
 *                     <scratch>/external-trainer.log, in workdir; after
 *                     timeout_s the group gets SIGTERM, then SIGKILL after
 *                     kill_grace_ms; on a cancel (the worker got SIGTERM:
 *                     preemption) the SIGTERM goes on to the group at once,
 *                     SIGKILL after preempt_grace_ms; once the command has exited (a torchrun
 *                     launcher exits after its ranks) whatever is left of its
 *                     group is killed, so no straggler writes later;
 *        long-lived   worker/trainer_session.h: one process for the whole
 *                     federation, a "round" message per task;
 *   3. train: <scratch>/external-output.safetensors must hold exactly the
 *      model's tensors (fa_tensors_check: the first missing, extra,
 *      reshaped or retyped tensor is named), every federated value finite
 *      (the tensor and flat index of the first NaN/Inf are named); integer
 *      tensors may change.  The results (trainer_result.h) come from
 *      <scratch>/external-result.json (one-shot) or the "done" message;
 *      num_examples from them, else from a decimal "num_examples" in the
 *      output's __metadata__ (older trainers);
 *      delta = output - input over the federated tensors, in float32;
 *      then the output's non-federated tensors are kept in local_path
 *      (atomically) for the next round;
 *   4. evaluate: no output is read; the results must hold "eval".
 *
 * Any failure returns a negative code with a message that names the
 * command, the reason and the tail of its log: the worker then skips the
 * round for its region rather than send garbage.  On failure the caller's
 * delta and local_path are left untouched.
 */
#ifndef FA_WORKER_EXTERNAL_TRAINER_H
#define FA_WORKER_EXTERNAL_TRAINER_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "common/fa_safetensors.h"
#include "model/tensors.h"
#include "worker/local_tensors.h"
#include "worker/trainer_result.h"

struct Fedagg__ExternalTrainer;

/* File names in the scratch directory. */
#define FA_EXTERNAL_INPUT "external-input.safetensors"
#define FA_EXTERNAL_OUTPUT "external-output.safetensors"
#define FA_EXTERNAL_RESULT "external-result.json"
#define FA_EXTERNAL_LOG "external-trainer.log"
/* The log is appended to, each run marked; beyond this size it starts afresh. */
#define FA_EXTERNAL_LOG_MAX (64L << 20)

typedef struct fa_external_opts {
    const char *const *argv; /* the command, argv[0] looked up in PATH */
    size_t argc;
    const char *const *env; /* "KEY=VALUE" entries added to the environment */
    size_t n_env;
    uint32_t timeout_s;       /* >= 1: one task (one-shot: the command; long-lived: the answer) */
    uint32_t kill_grace_ms;   /* SIGTERM to SIGKILL (and shutdown to SIGTERM); default 10000 */
    int long_lived;           /* TRAINER_LONG_LIVED */
    uint32_t start_timeout_s; /* long-lived: connect and hello within; default 600 */
    const char *workdir;      /* NULL: scratch_dir */
    const char *scratch_dir;  /* input, output, result, log; created if missing */
    const char *local_path;   /* LOCAL_KEEP: the region's non-federated tensors; NULL: none */
    const char *region;       /* FEDAGG_REGION; NULL: not set */
    const volatile sig_atomic_t *cancel; /* set (a signal): stop now, FA_ERR_CANCELLED */
    uint32_t preempt_grace_ms; /* on a cancel: SIGTERM to the trainer's group, SIGKILL after
                                  this long (it may save its state); default 20000 */
    char scratch_buf[1024];              /* storage of fa_external_opts_from_proto */
    char workdir_buf[1024];
    char local_buf[1100];
} fa_external_opts;

void fa_external_opts_default(fa_external_opts *o);

/* Points o at the config message's fields (pb must outlive o); a relative
 * workdir is taken relative to state_dir, no workdir means state_dir,
 * scratch_dir is <state_dir>/external, and with local_keep local_path is
 * <state_dir>/FA_LOCAL_TENSORS_FILE.  Returns 0 or FA_ERR_INVAL (empty
 * command, timeout_s or start_timeout_s 0, an env entry without '=', a
 * path too long: the message names the field). */
int fa_external_opts_from_proto(fa_external_opts *o, const struct Fedagg__ExternalTrainer *pb,
                                const char *state_dir, int local_keep, fa_error *err);

/* The global model a task starts from (all borrowed). */
typedef struct fa_external_model {
    const fa_tensors *table;  /* its table: which tensors are federated, their offsets */
    const fa_safetensors *st; /* the downloaded file, opened */
    const float *fed;         /* its federated vector, d = fa_tensors_fed_numel(table) floats */
    uint64_t version;         /* FEDAGG_VERSION */
    uint64_t round;           /* FEDAGG_ROUND */
} fa_external_model;

typedef struct fa_external_result {
    fa_trainer_result r; /* num_examples (train), metrics, eval */
    int exit_status;     /* one-shot: the command's exit status (-1 when it did not exit) */
    double seconds;      /* wall time of the task */
} fa_external_result;

typedef struct fa_external_trainer fa_external_trainer;

/* A trainer for options o (copied; the strings o points to must outlive
 * it).  Nothing runs yet.  Returns 0, FA_ERR_INVAL (as
 * fa_external_opts_from_proto) or FA_ERR_NOMEM. */
int fa_external_trainer_new(fa_external_trainer **out, const fa_external_opts *o, fa_error *err);

/* Ends a long-lived trainer (shutdown, then its group is signalled).  NULL
 * is a no-op. */
void fa_external_trainer_del(fa_external_trainer *x);

/* Trains one round from m: delta gets output - input over the federated
 * tensors (fa_tensors_fed_numel(m->table) floats, written only on
 * success).  res may be NULL.  Returns 0 or
 *   FA_ERR_INVAL     the output's tensors differ from the model's (names the
 *                    first: missing, extra, shape, dtype)
 *   FA_ERR_RANGE     a federated value of the output is NaN or infinite
 *   FA_ERR_CHILD     the command could not be started, exited non-zero or
 *                    died of a signal; a long-lived trainer died, closed its
 *                    socket or answered "error"
 *   FA_ERR_TIMEOUT   it ran past timeout_s (its process group was killed),
 *                    or a long-lived one did not say hello in time
 *   FA_ERR_PROTOCOL  a long-lived trainer broke the protocol
 *   FA_ERR_NOTFOUND  it exited 0 but wrote no output, or no num_examples
 *   FA_ERR_PARSE     the output is not valid safetensors, the results file
 *                    is malformed, or num_examples is not a positive integer
 *   FA_ERR_CANCELLED *o->cancel was set (the group was stopped)
 *   FA_ERR_IO, FA_ERR_NOMEM
 * and in every failure case the round is to be skipped. */
int fa_external_trainer_train(fa_external_trainer *x, const fa_external_model *m, float *delta,
                              fa_external_result *res, fa_error *err);

/* Evaluates m only (task "evaluate"): res->r.eval is present on success.
 * Returns 0, FA_ERR_NOTFOUND (the trainer reported no evaluation), or the
 * errors above. */
int fa_external_trainer_evaluate(fa_external_trainer *x, const fa_external_model *m,
                                 fa_external_result *res, fa_error *err);

/* The process group of the running long-lived trainer (for a signal
 * handler that must not leave it behind), or 0. */
long fa_external_trainer_pid(const fa_external_trainer *x);

#endif
