/* trainer_result.h - what an external trainer reports about a round
 * (docs/trainer-contract.md): the results file of the one-shot mode
 * (FEDAGG_RESULT) and the "done" message of the long-lived mode carry the
 * same fields:
 *
 *   {"num_examples": 20000,
 *    "metrics": {"loss": 0.41},
 *    "eval": {"num_examples": 2000, "loss": 0.52, "accuracy": 0.83, "metrics": {}},
 *    "privacy": {"mechanism": "dp-sgd", "noise_multiplier": 1.1, "sampling_rate": 0.0128,
 *                "steps": 79, "clip": 1.0, "epsilon": 0.93, "delta": 1e-5,
 *                "accountant": "opacus-rdp"}}
 *
 * Every field is optional here (the caller decides what a task needs);
 * what is present must be well formed: num_examples an integer >= 1 (a JSON
 * integer, or a real with an integral value), metrics an object of finite
 * numbers with names of at most FA_TRAINER_NAME_MAX - 1 bytes, eval an
 * object whose num_examples is an integer >= 1, loss a finite number,
 * accuracy a number in [0, 1]; privacy (what this round spent of the
 * region's differential-privacy budget: docs/trainer-contract.md,
 * "Privacy") an object with a mechanism string of 1 to
 * FA_TRAINER_NAME_MAX - 1 bytes and, each optional, noise_multiplier a
 * finite number >= 0, sampling_rate in (0, 1], steps an integer >= 1 (this
 * round's), clip a finite number > 0, epsilon a finite number >= 0 (the
 * trainer's own accounting, all its rounds), delta in (0, 1) and an
 * accountant name.  Other keys are ignored (a newer trainer may
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

/* What the round spent (the worker checks it against its budget). */
typedef struct fa_trainer_privacy {
    int present;                           /* a "privacy" object was given */
    char mechanism[FA_TRAINER_NAME_MAX];   /* e.g. "dp-sgd"; non-empty when present */
    double noise_multiplier;               /* NaN when absent */
    double sampling_rate;                  /* NaN when absent */
    uint64_t steps;                        /* 0 when absent */
    double clip;                           /* NaN when absent */
    double epsilon;                        /* the trainer's own total; NaN when absent */
    double delta;                          /* NaN when absent */
    char accountant[FA_TRAINER_NAME_MAX];  /* "" when absent */
} fa_trainer_privacy;

typedef struct fa_trainer_result {
    uint64_t num_examples; /* 0 when absent */
    fa_trainer_metrics metrics;
    fa_trainer_eval eval;
    fa_trainer_privacy privacy;
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
