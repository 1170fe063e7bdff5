/* libFuzzer target: a region's data statement (aggregator/data_ledger.h,
 * POST /v1/data-statements) on untrusted bytes.  The corpus holds
 * well-signed statements (fixed test key) so that the decoder and the value
 * checks are reached.  An accepted statement is counted once, an identical
 * retry is accepted again without a second copy, and what the ledger hands
 * back is the statement as sent. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "aggregator/data_ledger.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static fa_eval_reports_member m;
    static int ready;
    static uint8_t sha[32];
    fa_data_ledger *l = NULL;
    Fedagg__SignedDataStatement sd;
    const char *who = NULL;
    fa_error err;

    if (!ready) {
        uint8_t seed[32], sk[64];
        if (sodium_init() < 0)
            abort();
        memset(seed, 7, sizeof(seed)); /* the corpus's test key */
        crypto_sign_seed_keypair(m.pk, sk, seed);
        memset(sha, 0xab, sizeof(sha)); /* the corpus's model */
        m.id = "eu-west";
        ready = 1;
    }
    if (fa_data_ledger_new(&l, "fuzz", &m, 1, &err) != 0)
        return 0;
    fa_data_ledger_begin(l, 3, 1, 5, sha);
    if (fa_data_ledger_submit(l, "eu-west", data, size, &err) == 0) {
        if (fa_data_ledger_count(l) != 1 || !fa_data_ledger_has(l, "eu-west", data, size))
            abort();
        fa_data_ledger_at(l, 0, &sd, &who);
        if (!who || strcmp(who, "eu-west") != 0 || sd.signature.len != 64)
            abort();
        if (fa_data_ledger_submit(l, "eu-west", data, size, &err) != 0 ||
            fa_data_ledger_count(l) != 1)
            abort();
    }
    fa_data_ledger_del(l);
    return 0;
}
