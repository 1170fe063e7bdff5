/* libFuzzer target: arbitrary bytes as a PREFIX.key and as a PREFIX.pub
 * (crypto/identity.h); a key that parses must print back to a text that
 * parses to the same seed. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "crypto/identity.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t seed[FA_IDENTITY_SEED_BYTES], again[FA_IDENTITY_SEED_BYTES];
    uint8_t pk[FA_IDENTITY_PK_BYTES];
    char text[FA_IDENTITY_SECRET_TEXT_MAX];
    fa_error err;
    size_t n;

    if (fa_identity_parse_secret(data, size, seed, &err) == 0) {
        if (fa_identity_format_secret(seed, text, &n) != 0 ||
            fa_identity_parse_secret((const uint8_t *)text, n, again, NULL) != 0 ||
            memcmp(seed, again, sizeof(seed)) != 0)
            abort();
    }
    fa_identity_parse_public(data, size, pk, &err);
    return 0;
}
