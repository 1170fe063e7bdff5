/* bignum_internal.h - fixed-width unsigned integers for the exact rational arithmetic
 * of the discrete Gaussian sampler (internal to privacy/).
 *
 * FA_BN_LIMBS 32-bit limbs, least significant first: 384 bits, enough for
 * the squared numerators of dgauss.c (< 2^310, see the bounds there).  Every
 * operation that could exceed the width says so by its return value; none
 * allocates.  Values are secret-dependent only through the noise being
 * drawn, and the sampler is not constant-time anyway (docs/privacy.md).
 */
#ifndef FA_PRIVACY_BIGNUM_INTERNAL_H
#define FA_PRIVACY_BIGNUM_INTERNAL_H

#include <stdint.h>

#include "privacy/random_internal.h"

#define FA_BN_LIMBS 12
#define FA_BN_BITS (32 * FA_BN_LIMBS)

typedef struct fa_bn {
    uint32_t w[FA_BN_LIMBS];
} fa_bn;

void fa_bn_set_u64(fa_bn *a, uint64_t v);
int fa_bn_is_zero(const fa_bn *a);
/* -1, 0, 1 as a <, =, > b */
int fa_bn_cmp(const fa_bn *a, const fa_bn *b);
/* number of significant bits (0 for 0) */
unsigned fa_bn_bitlen(const fa_bn *a);
/* r = a * b; returns 0, or FA_ERR_RANGE when the product needs more than
 * FA_BN_BITS bits (r is then unspecified).  r may alias a or b. */
int fa_bn_mul(fa_bn *r, const fa_bn *a, const fa_bn *b);
/* r = a - b for a >= b (r may alias either) */
void fa_bn_sub(fa_bn *r, const fa_bn *a, const fa_bn *b);
/* r = |a - b| */
void fa_bn_absdiff(fa_bn *r, const fa_bn *a, const fa_bn *b);
/* q = floor(a / b) saturated at UINT64_MAX, rem = a mod b (exact); b != 0 */
void fa_bn_divmod(const fa_bn *a, const fa_bn *b, uint64_t *q, fa_bn *rem);
/* out uniform in [0, m), m != 0.  Returns 0 or the source's error. */
int fa_bn_random_below(fa_random *r, const fa_bn *m, fa_bn *out);

#endif
