/* libFuzzer target: a saved privacy accountant (privacy/accountant.h) on
 * untrusted bytes (the worker's state directory may be damaged or
 * tampered with).  An accepted state saves back to the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "privacy/accountant.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fa_rdp_accountant *a = NULL;
    uint8_t *again = NULL;
    size_t len = 0;
    double eps;
    fa_error err;

    if (fa_rdp_accountant_restore(&a, data, size, &err) != 0)
        return 0;
    if (fa_rdp_accountant_save(a, &again, &len, &err) != 0 || len != size ||
        memcmp(again, data, size) != 0)
        abort();
    (void)fa_rdp_accountant_epsilon(a, 1e-5, 0, &eps, NULL, &err);
    free(again);
    fa_rdp_accountant_del(a);
    return 0;
}
