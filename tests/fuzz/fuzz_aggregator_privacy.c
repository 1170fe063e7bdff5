/* libFuzzer target: a region's privacy statement (aggregator/privacy_ledger.h,
 * POST /v1/privacy) on untrusted bytes.  As for the evaluation reports, the
 * corpus holds well-signed statements (fixed test key) for the decoder and
 * the value checks to be reached.  An accepted statement is counted once and
 * its totals are within the checks' bounds. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "aggregator/privacy_ledger.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static fa_eval_reports_member m;
    static int ready;
    fa_privacy_ledger *l = NULL;
    double eps, delta, budget;
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
    if (fa_privacy_ledger_new(&l, "fuzz", &m, 1, &err) != 0)
        return 0;
    fa_privacy_ledger_begin(l, 3, 1);
    if (fa_privacy_ledger_submit(l, "eu-west", data, size, &err) == 0) {
        if (fa_privacy_ledger_count(l) != 1 ||
            !fa_privacy_ledger_region(l, "eu-west", &eps, &delta, &budget) || !isfinite(eps) ||
            eps < 0 || !(delta > 0 && delta < 1))
            abort();
        if (fa_privacy_ledger_submit(l, "eu-west", data, size, &err) != 0 ||
            fa_privacy_ledger_count(l) != 1)
            abort();
    }
    fa_privacy_ledger_del(l);
    return 0;
}
