/* trainer_result.h - what an external trainer reports about a round
 * (docs/trainer-contract.md): the results file of the one-shot mode
 * (FEDAGG_RESULT) and the "done" message of the long-lived mode carry the
 * same fields:
 *
 *   {"num_examples": 20000,
 *    "metrics": {"loss": 0.41},
 *    "eval": {"num_examples": 2000, "loss": 0.52, "accuracy": 0.83, "metrics": {}}}
 *
 * Every field is optional here (the caller decides what a task needs);
 * what is present must be well formed: num_examples an integer >= 1 (a JSON
 * integer, or a real with an integral value), metrics an object of finite
 * numbers with names of at most FA_TRAINER_NAME_MAX - 1 bytes, eval an
 * object whose num_examples is an integer >= 1, loss a finite number,
 * accuracy a number in [0, 1].  Other keys are ignored (a newer trainer may
 * send more).  Pure: parses bytes or a jansson object.
 */
#ifndef FA_WORKER_TRAINER_RESULT_H
#define FA_WORKER_TRAINER_RESULT_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"

/* Most metrics kept per object (more are refused: a report is aggregates). */
#define FA_TRAINER_MAX_METRICS 32
/* Longest metric name plus its NUL. */
#define FA_TRAINER_NAME_MAX 64

typedef struct fa_trainer_metrics {
    size_t n;
    char names[FA_TRAINER_MAX_METRICS][FA_TRAINER_NAME_MAX];
    double values[FA_TRAINER_MAX_METRICS];
} fa_trainer_metrics;

typedef struct fa_trainer_eval {
    int present;           /* an "eval" object was given */
    uint64_t num_examples; /* >= 1 when present */
    double loss;           /* NaN when absent */
    double accuracy;       /* NaN when absent */
    fa_trainer_metrics metrics;
} fa_trainer_eval;

typedef struct fa_trainer_result {
    uint64_t num_examples; /* 0 when absent */
    fa_trainer_metrics metrics;
    fa_trainer_eval eval;
} fa_trainer_result;

/* An empty result (nothing present, NaNs where the contract says so). */
void fa_trainer_result_init(fa_trainer_result *r);

/* Parses a JSON object held in text[0 .. len).  `what` names the source in
 * messages ("results file /x/external-result.json", "the trainer's done
 * message").  Returns 0, or FA_ERR_PARSE (not a JSON object, or a field
 * malformed: the message names the field and what it must be); r is
 * initialised in every case. */
int fa_trainer_result_parse(fa_trainer_result *r, const char *text, size_t len, const char *what,
                            fa_error *err);

/* The same from a parsed jansson object (json_t *; void * here so that the
 * header needs no jansson). */
int fa_trainer_result_from_json(fa_trainer_result *r, const void *json_object, const char *what,
                                fa_error *err);

/* The value of metric name in m, or NaN. */
double fa_trainer_metric(const fa_trainer_metrics *m, const char *name);

#endif
