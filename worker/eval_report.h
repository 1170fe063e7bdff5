/* eval_report.h - a region's federated-evaluation report (fedagg.proto
 * EvalStatement inside a SignedEval): what it measured of one global model
 * on its own held-out data, signed with its identity key under the domain
 * FA_IDENTITY_DOMAIN_EVAL (crypto/identity.h), so that neither the
 * aggregator nor another region can forge or replay it as something else.
 * Only aggregates leave the region: n, mean loss, accuracy, named means.
 *
 * Pure: bytes in, bytes out (the round client POSTs them to /v1/evaluations).
 */
#ifndef FA_WORKER_EVAL_REPORT_H
#define FA_WORKER_EVAL_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"

typedef struct fa_eval_report {
    const char *federation_id;
    const char *region;
    uint64_t version;         /* the model version evaluated */
    uint8_t model_sha256[32]; /* of the model file evaluated */
    uint64_t num_examples;    /* >= 1 */
    double loss;              /* mean; NaN when not measured */
    double accuracy;          /* in [0, 1]; NaN when not measured */
    const char *const *metric_names;
    const double *metric_values;
    size_t n_metrics;
    uint64_t unix_ms; /* when it was measured */
} fa_eval_report;

/* The packed SignedEval {statement = packed EvalStatement of r, signature =
 * Ed25519(seed, "fedagg-eval-v1" || 0x00 || statement)} into *out
 * (malloc'ed, *len bytes).  Returns 0, FA_ERR_INVAL (num_examples 0, an
 * empty federation or region id, an empty metric name, a loss or metric that
 * is infinite, an accuracy outside [0, 1]), FA_ERR_CRYPTO or FA_ERR_NOMEM. */
int fa_eval_report_sign(const fa_eval_report *r, const uint8_t *seed, uint8_t **out, size_t *len,
                        fa_error *err);

#endif
