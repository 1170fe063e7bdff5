/* bignum.c - fixed-width unsigned integer arithmetic (see bignum_internal.h). */
#include "privacy/bignum_internal.h"

#include <string.h>

#include <sodium.h>

void fa_bn_set_u64(fa_bn *a, uint64_t v)
{
    memset(a, 0, sizeof(*a));
    a->w[0] = (uint32_t)v;
    a->w[1] = (uint32_t)(v >> 32);
}

int fa_bn_is_zero(const fa_bn *a)
{
    for (int i = 0; i < FA_BN_LIMBS; i++)
        if (a->w[i])
            return 0;
    return 1;
}

int fa_bn_cmp(const fa_bn *a, const fa_bn *b)
{
    for (int i = FA_BN_LIMBS - 1; i >= 0; i--)
        if (a->w[i] != b->w[i])
            return a->w[i] < b->w[i] ? -1 : 1;
    return 0;
}

unsigned fa_bn_bitlen(const fa_bn *a)
{
    for (int i = FA_BN_LIMBS - 1; i >= 0; i--)
        if (a->w[i]) {
            unsigned n = 0;
            for (uint32_t v = a->w[i]; v; v >>= 1)
                n++;
            return 32u * (unsigned)i + n;
        }
    return 0;
}

int fa_bn_mul(fa_bn *r, const fa_bn *a, const fa_bn *b)
{
    uint32_t t[2 * FA_BN_LIMBS];
    int la = FA_BN_LIMBS, lb = FA_BN_LIMBS;
    while (la > 0 && !a->w[la - 1])
        la--;
    while (lb > 0 && !b->w[lb - 1])
        lb--;
    memset(t, 0, sizeof(t));
    for (int i = 0; i < la; i++) {
        uint64_t carry = 0;
        for (int j = 0; j < lb; j++) {
            uint64_t v = (uint64_t)a->w[i] * b->w[j] + t[i + j] + carry;
            t[i + j] = (uint32_t)v;
            carry = v >> 32;
        }
        t[i + lb] = (uint32_t)carry;
    }
    for (int i = FA_BN_LIMBS; i < 2 * FA_BN_LIMBS; i++)
        if (t[i])
            return FA_ERR_RANGE;
    memcpy(r->w, t, sizeof(r->w));
    return 0;
}

void fa_bn_sub(fa_bn *r, const fa_bn *a, const fa_bn *b)
{
    uint64_t borrow = 0;
    for (int i = 0; i < FA_BN_LIMBS; i++) {
        uint64_t v = (uint64_t)a->w[i] - b->w[i] - borrow;
        r->w[i] = (uint32_t)v;
        borrow = (v >> 32) & 1;
    }
}

void fa_bn_absdiff(fa_bn *r, const fa_bn *a, const fa_bn *b)
{
    if (fa_bn_cmp(a, b) >= 0)
        fa_bn_sub(r, a, b);
    else
        fa_bn_sub(r, b, a);
}

static void shl(fa_bn *r, const fa_bn *a, unsigned s)
{
    fa_bn t;
    unsigned limbs = s / 32, bits = s % 32;
    memset(&t, 0, sizeof(t));
    for (unsigned i = limbs; i < FA_BN_LIMBS; i++) {
        uint64_t v = (uint64_t)a->w[i - limbs] << bits;
        if (bits && i > limbs)
            v |= a->w[i - limbs - 1] >> (32 - bits);
        t.w[i] = (uint32_t)v;
    }
    *r = t;
}

static void shr1(fa_bn *a)
{
    for (int i = 0; i < FA_BN_LIMBS; i++)
        a->w[i] = (a->w[i] >> 1) | (i + 1 < FA_BN_LIMBS ? a->w[i + 1] << 31 : 0);
}

/* Shift-and-subtract long division: as many steps as the quotient has bits,
 * a handful for the sampler's arguments. */
void fa_bn_divmod(const fa_bn *a, const fa_bn *b, uint64_t *q, fa_bn *rem)
{
    unsigned la = fa_bn_bitlen(a), lb = fa_bn_bitlen(b);
    fa_bn r = *a, d;
    uint64_t quot = 0;
    int saturated = 0;
    if (la >= lb) {
        unsigned s = la - lb;
        shl(&d, b, s);
        for (int i = (int)s; i >= 0; i--) {
            if (fa_bn_cmp(&r, &d) >= 0) {
                fa_bn_sub(&r, &r, &d);
                if (i >= 64)
                    saturated = 1;
                else
                    quot |= (uint64_t)1 << i;
            }
            shr1(&d);
        }
    }
    *q = saturated ? UINT64_MAX : quot;
    *rem = r;
}

int fa_bn_random_below(fa_random *r, const fa_bn *m, fa_bn *out)
{
    unsigned bits = fa_bn_bitlen(m), limbs = (bits + 31) / 32, top = bits % 32;
    uint8_t buf[4 * FA_BN_LIMBS];
    int rc;
    do {
        if ((rc = fa_random_bytes(r, buf, 4 * limbs)) != 0)
            return rc;
        memset(out, 0, sizeof(*out));
        for (unsigned i = 0; i < limbs; i++)
            out->w[i] = (uint32_t)buf[4 * i] | (uint32_t)buf[4 * i + 1] << 8 |
                        (uint32_t)buf[4 * i + 2] << 16 | (uint32_t)buf[4 * i + 3] << 24;
        if (top)
            out->w[limbs - 1] &= (UINT32_C(1) << top) - 1;
    } while (fa_bn_cmp(out, m) >= 0); /* accepted with probability > 1/2 */
    sodium_memzero(buf, sizeof(buf));
    return 0;
}
