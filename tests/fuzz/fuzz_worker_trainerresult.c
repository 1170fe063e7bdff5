/* libFuzzer target: an external trainer's results (worker/trainer_result.h),
 * the JSON object of FEDAGG_RESULT or of a "done" message, on untrusted
 * bytes.  Accepted results must be within the contract's bounds, the privacy
 * object's included. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "worker/trainer_result.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fa_trainer_result r;
    fa_error err;

    if (fa_trainer_result_parse(&r, (const char *)data, size, "fuzz", &err) != 0)
        return 0;
    if (r.metrics.n > FA_TRAINER_MAX_METRICS || r.eval.metrics.n > FA_TRAINER_MAX_METRICS)
        abort();
    if (r.eval.present && r.eval.num_examples < 1)
        abort();
    for (size_t i = 0; i < r.metrics.n; i++)
        if (!isfinite(r.metrics.values[i]))
            abort();
    if (r.privacy.present) {
        const fa_trainer_privacy *p = &r.privacy;
        if (!p->mechanism[0] || strlen(p->mechanism) >= FA_TRAINER_NAME_MAX ||
            strlen(p->accountant) >= FA_TRAINER_NAME_MAX)
            abort();
        if (!isnan(p->sampling_rate) && !(p->sampling_rate > 0 && p->sampling_rate <= 1))
            abort();
        if (!isnan(p->noise_multiplier) && !(p->noise_multiplier >= 0 && isfinite(p->noise_multiplier)))
            abort();
        if (!isnan(p->delta) && !(p->delta > 0 && p->delta < 1))
            abort();
        if (!isnan(p->epsilon) && !(p->epsilon >= 0 && isfinite(p->epsilon)))
            abort();
    }
    (void)fa_trainer_metric(&r.metrics, "loss");
    return 0;
}
