/* rng.c - xoshiro256** with splitmix64 seeding; normal and gamma variates. */
#include "model/rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void fa_rng_seed(fa_rng *r, uint64_t seed, uint64_t stream)
{
    /* Mix the stream in through a second splitmix64 so (seed, stream) pairs
     * that differ in either give unrelated states. */
    uint64_t x = seed, y = stream ^ 0x6a09e667f3bcc909ull;
    uint64_t k = splitmix64(&y);
    x ^= k;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t fa_rng_u64(fa_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double fa_rng_uniform(fa_rng *r) { return (double)(fa_rng_u64(r) >> 11) * 0x1.0p-53; }

uint64_t fa_rng_below(fa_rng *r, uint64_t n)
{
    /* Rejection of the short top range: threshold = 2^64 mod n. */
    uint64_t threshold = (0 - n) % n, x;
    do
        x = fa_rng_u64(r);
    while (x < threshold);
    return x % n;
}

double fa_rng_normal(fa_rng *r)
{
    double u, v, s;
    do {
        u = 2.0 * fa_rng_uniform(r) - 1.0;
        v = 2.0 * fa_rng_uniform(r) - 1.0;
        s = u * u + v * v;
    } while (s >= 1.0 || s == 0.0);
    return u * sqrt(-2.0 * log(s) / s);
}

double fa_rng_gamma(fa_rng *r, double shape)
{
    if (shape < 1.0) {
        /* Gamma(a) = Gamma(a + 1) * U^(1/a) (Marsaglia and Tsang, section 6). */
        double u;
        do
            u = fa_rng_uniform(r);
        while (u == 0.0);
        return fa_rng_gamma(r, shape + 1.0) * pow(u, 1.0 / shape);
    }
    double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x, v, u;
        do {
            x = fa_rng_normal(r);
            v = 1.0 + c * x;
        } while (v <= 0.0);
        v = v * v * v;
        u = fa_rng_uniform(r);
        if (u < 1.0 - 0.0331 * (x * x) * (x * x))
            return d * v;
        if (u > 0.0 && log(u) < 0.5 * x * x + d * (1.0 - v + log(v)))
            return d * v;
    }
}

void fa_rng_shuffle_u32(fa_rng *r, uint32_t *idx, uint32_t n)
{
    for (uint32_t i = n; i > 1; i--) {
        uint32_t j = (uint32_t)fa_rng_below(r, i);
        uint32_t t = idx[i - 1];
        idx[i - 1] = idx[j];
        idx[j] = t;
    }
}
