/* fa_prg_mask (the masking hot loop) against a plain scalar reference built
 * from fa_prg_words: random mask counts and signs, odd lengths, in place or
 * from a separate input, and a block split over several calls. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "crypto/mask_prg.h"

static uint64_t rs = 0x243f6a8885a308d3ull;
static uint32_t rnd(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (uint32_t)rs;
}

static void check_case(size_t count, size_t n, int in_place, size_t split)
{
    fa_prg *g = calloc(count ? count : 1, sizeof(*g)), *r = calloc(count ? count : 1, sizeof(*r));
    int *sign = calloc(count ? count : 1, sizeof(int));
    uint32_t *base = malloc((n + 1) * 4), *acc = malloc((n + 1) * 4), *want = malloc((n + 1) * 4);
    uint32_t *scratch = malloc(FA_PRG_BLOCK_WORDS * 4), *ks = malloc(FA_PRG_BLOCK_WORDS * 4);
    uint8_t key[FA_PRG_KEY_BYTES];

    for (size_t j = 0; j < n; j++)
        base[j] = want[j] = rnd();
    for (size_t i = 0; i < count; i++) {
        for (size_t b = 0; b < sizeof(key); b++)
            key[b] = (uint8_t)rnd();
        assert_int_equal(fa_prg_init(&g[i], key, 0), 0);
        assert_int_equal(fa_prg_init(&r[i], key, 0), 0);
        sign[i] = (rnd() & 1) ? 1 : -1;
    }
    /* the reference: word by word */
    for (size_t off = 0; off < n; off += FA_PRG_BLOCK_WORDS) {
        size_t m = n - off < FA_PRG_BLOCK_WORDS ? n - off : FA_PRG_BLOCK_WORDS;
        for (size_t i = 0; i < count; i++) {
            assert_int_equal(fa_prg_words(&r[i], ks, m), 0);
            for (size_t j = 0; j < m; j++)
                want[off + j] += sign[i] < 0 ? (uint32_t)-ks[j] : ks[j];
        }
    }
    /* fa_prg_mask in pieces of at most `split` words (each <= one block) */
    if (in_place)
        memcpy(acc, base, n * 4);
    for (size_t off = 0; off < n;) {
        size_t m = n - off < split ? n - off : split;
        assert_int_equal(fa_prg_mask(g, sign, count, in_place ? acc + off : base + off, acc + off,
                                     m, scratch),
                         0);
        off += m;
    }
    assert_memory_equal(acc, want, n * 4);
    for (size_t i = 0; i < count; i++) {
        fa_prg_free(&g[i]);
        fa_prg_free(&r[i]);
    }
    free(g);
    free(r);
    free(sign);
    free(base);
    free(acc);
    free(want);
    free(scratch);
    free(ks);
}

static void test_against_reference(void **state)
{
    static const size_t lens[] = {1, 3, 4, 17, 1023, 1024, 1025, 4096, 4097, 10007};
    static const size_t counts[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 17};
    for (size_t a = 0; a < sizeof(lens) / sizeof(lens[0]); a++)
        for (size_t b = 0; b < sizeof(counts) / sizeof(counts[0]); b++)
            for (int in_place = 0; in_place < 2; in_place++)
                check_case(counts[b], lens[a], in_place, FA_PRG_BLOCK_WORDS);
}

static void test_split_calls(void **state)
{
    /* a block handed over in uneven pieces gives the same words */
    check_case(5, 9000, 1, 333);
    check_case(4, 9000, 0, 1);
    check_case(6, 4096 * 3, 1, 4095);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_reference),
        cmocka_unit_test(test_split_calls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
