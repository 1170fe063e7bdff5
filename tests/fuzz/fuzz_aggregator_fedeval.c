/* libFuzzer target: a region's federated-evaluation report
 * (aggregator/fed_eval.h, POST /v1/evaluations) on untrusted bytes.  The
 * signature check comes first, so most inputs stop there; the corpus holds
 * well-signed reports (made with a fixed test key) whose statements the
 * fuzzer mutates to reach the decoding and value checks.  An accepted
 * report must be counted once, and the summary stay within bounds. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "aggregator/fed_eval.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static fa_fed_eval_member m;
    static int ready;
    fa_fed_eval *e = NULL;
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
    if (fa_fed_eval_new(&e, "fuzz", &m, 1, 0, &err) != 0)
        return 0;
    fa_fed_eval_begin(e, 3, sha);
    if (fa_fed_eval_submit(e, "eu-west", data, size, &err) == 0) {
        if (fa_fed_eval_count(e) != 1)
            abort();
        fa_fed_eval_summary(e, &s);
        if (!s.valid || s.n < 1 || s.n_metrics > FA_EVAL_MAX_METRICS ||
            (!isnan(s.accuracy) && (s.accuracy < 0 || s.accuracy > 1)))
            abort();
        if (fa_fed_eval_submit(e, "eu-west", data, size, &err) != 0 || fa_fed_eval_count(e) != 1)
            abort(); /* a retry is the same report */
    }
    fa_fed_eval_del(e);
    return 0;
}
