/* evaluator.h - the aggregator's evaluator command (config Evaluation.command):
 * central evaluation of any model on public test data, beside the server.
 *
 * After each commit the aggregator asks for the new version to be
 * evaluated.  The command runs in its own process group with "{input}"
 * (the model file) and "{output}" (a JSON file it writes) replaced in its
 * argv, and FEDAGG_INPUT, FEDAGG_OUTPUT, FEDAGG_VERSION in its environment;
 * its output goes to <dir>/evaluator.log.  It never blocks the server: the
 * server loop polls it.  One runs at a time; a version asked for while
 * another runs waits, and only the newest waiting one is kept.  A command
 * that fails, times out (its group is killed) or writes a malformed result
 * is logged with the tail of its log and yields no result.
 *
 * The output is a JSON object {"num_examples": N >= 1, "loss": L,
 * "accuracy": A in [0, 1], "metrics": {"name": value, ...}} (loss,
 * accuracy and metrics optional).
 */
#ifndef FA_AGGREGATOR_EVALUATOR_H
#define FA_AGGREGATOR_EVALUATOR_H

#include <stddef.h>
#include <stdint.h>

#include "aggregator/eval_reports.h"
#include "common/fa_err.h"

typedef struct fa_evaluator fa_evaluator;

/* argv (argc entries, copied) runs in dir (created if missing), killed
 * after timeout_s.  Returns 0, FA_ERR_INVAL (empty command) or FA_ERR_NOMEM. */
int fa_evaluator_new(fa_evaluator **out, const char *const *argv, size_t argc, uint32_t timeout_s,
                     const char *dir, fa_error *err);
/* Kills a running command.  NULL is a no-op. */
void fa_evaluator_del(fa_evaluator *ev);

/* Asks for `version` (file model_path) to be evaluated. */
void fa_evaluator_request(fa_evaluator *ev, uint64_t version, const char *model_path,
                          uint64_t now_ms);

/* Drives the command: starts the waiting request, notices its end or its
 * timeout.  Returns 1 when a result became available (*out filled, valid),
 * else 0. */
int fa_evaluator_poll(fa_evaluator *ev, uint64_t now_ms, fa_eval_summary *out);

/* Parses an evaluator's (or a trainer's "eval") JSON object into *out
 * (version left as is).  Returns 0 or FA_ERR_PARSE / FA_ERR_INVAL naming
 * the field; `what` names the source. */
int fa_evaluator_parse(const char *json, size_t len, const char *what, fa_eval_summary *out,
                       fa_error *err);

#endif
