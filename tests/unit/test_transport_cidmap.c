/* Unit tests of transport/cid_map.c: routing by connection ID through the
 * table's growth, the first owner kept, refusals, and removal of every CID
 * of a connection. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "common/fa_err.h"
#include "transport/cid_map_internal.h"

static void cid_of(uint8_t out[18], uint32_t i)
{
    memset(out, 0xa5, 18);
    memcpy(out, &i, sizeof(i));
}

static void test_add_find_del(void **state)
{
    fa_cid_map m;
    int a, b;
    uint8_t c1[18], c2[8];

    assert_int_equal(fa_cid_map_init(&m, 42), 0);
    cid_of(c1, 1);
    memcpy(c2, c1, 8); /* the same first bytes, another length: another CID */
    assert_null(fa_cid_map_find(&m, c1, 18));
    assert_int_equal(fa_cid_map_add(&m, c1, 18, &a), 0);
    assert_int_equal(fa_cid_map_add(&m, c2, 8, &b), 0);
    assert_ptr_equal(fa_cid_map_find(&m, c1, 18), &a);
    assert_ptr_equal(fa_cid_map_find(&m, c2, 8), &b);
    /* a CID mapped already keeps its first owner */
    assert_int_equal(fa_cid_map_add(&m, c1, 18, &b), FA_ERR_EXISTS);
    assert_ptr_equal(fa_cid_map_find(&m, c1, 18), &a);
    /* refusals */
    assert_int_equal(fa_cid_map_add(&m, c1, 0, &a), FA_ERR_INVAL);
    assert_int_equal(fa_cid_map_add(&m, c1, FA_CID_MAP_MAX_CIDLEN + 1, &a), FA_ERR_INVAL);
    assert_int_equal(fa_cid_map_add(&m, c1, 4, NULL), FA_ERR_INVAL);
    assert_null(fa_cid_map_find(&m, c1, FA_CID_MAP_MAX_CIDLEN + 1));
    assert_int_equal(m.n, 2);
    /* removal needs the owner too */
    fa_cid_map_del(&m, c1, 18, &b);
    assert_ptr_equal(fa_cid_map_find(&m, c1, 18), &a);
    fa_cid_map_del(&m, c1, 18, &a);
    assert_null(fa_cid_map_find(&m, c1, 18));
    assert_ptr_equal(fa_cid_map_find(&m, c2, 8), &b);
    fa_cid_map_del(&m, c1, 18, &a); /* gone already: no-op */
    assert_int_equal(m.n, 1);
    fa_cid_map_free(&m);
    fa_cid_map_free(&m);
}

static void test_growth_and_del_value(void **state)
{
    fa_cid_map m;
    int owner[4];
    uint8_t c[18];
    const uint32_t n = 5000;

    assert_int_equal(fa_cid_map_init(&m, 7), 0);
    assert_int_equal(m.nbuckets, 256);
    for (uint32_t i = 0; i < n; i++) {
        cid_of(c, i);
        assert_int_equal(fa_cid_map_add(&m, c, 18, &owner[i % 4]), 0);
    }
    assert_int_equal(m.n, n);
    assert_true(m.nbuckets >= n / 2); /* grew: at most two entries a bucket */
    for (uint32_t i = 0; i < n; i++) {
        cid_of(c, i);
        assert_ptr_equal(fa_cid_map_find(&m, c, 18), &owner[i % 4]);
    }
    /* a connection that goes takes all its CIDs with it, and only its own */
    fa_cid_map_del_value(&m, &owner[1]);
    assert_int_equal(m.n, n - n / 4);
    for (uint32_t i = 0; i < n; i++) {
        cid_of(c, i);
        if (i % 4 == 1)
            assert_null(fa_cid_map_find(&m, c, 18));
        else
            assert_ptr_equal(fa_cid_map_find(&m, c, 18), &owner[i % 4]);
    }
    fa_cid_map_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_find_del),
        cmocka_unit_test(test_growth_and_del_value),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
