/* libFuzzer target: a region's federated-evaluation report
 * (aggregator/eval_reports.h, POST /v1/evaluations) on untrusted bytes.  The
 * signature check comes first, so most inputs stop there; the corpus holds
 * well-signed reports (made with a fixed test key) whose statements the
 * fuzzer mutates to reach the decoding and value checks.  An accepted
 * report must be counted once, and the summary stay within bounds. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "aggregator/eval_reports.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static fa_eval_reports_member m;
    static int ready;
    fa_eval_reports *e = NULL;
    fa_eval_summary s;
    uint8_t sha[32];
    fa_error err;

    if (!ready) {
        uint8_t seed[32], sk[64];
        if (sodium_init() < 0)
            abort();
        memset(seed, 7, sizeof(seed)); /* the corpus's test key */
        crypto_sign_seed_keypair(m.pk, sk, seed);
        m.id = "eu-west";
        ready = 1;
    }
    memset(sha, 0xab, sizeof(sha));
    if (fa_eval_reports_new(&e, "fuzz", &m, 1, 0, &err) != 0)
        return 0;
    fa_eval_reports_begin(e, 3, sha);
    if (fa_eval_reports_submit(e, "eu-west", data, size, &err) == 0) {
        if (fa_eval_reports_count(e) != 1)
            abort();
        fa_eval_reports_summary(e, &s);
        if (!s.valid || s.n < 1 || s.n_metrics > FA_EVAL_MAX_METRICS ||
            (!isnan(s.accuracy) && (s.accuracy < 0 || s.accuracy > 1)))
            abort();
        if (fa_eval_reports_submit(e, "eu-west", data, size, &err) != 0 ||
            fa_eval_reports_count(e) != 1)
            abort(); /* a retry is the same report */
    }
    fa_eval_reports_del(e);
    return 0;
}
