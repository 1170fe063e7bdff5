/* Unit tests of transport/timer_heap.c against a plain array: inserts,
 * moves earlier and later, removals from the middle, and the order the
 * deadlines come out in. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>

#include "transport/timer_heap_internal.h"

#define N 500

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Every item's idx names its slot, and no parent is later than a child. */
static void check_invariants(const fa_timer_heap *h)
{
    for (size_t i = 0; i < h->len; i++) {
        assert_int_equal(h->v[i]->idx, i);
        if (i)
            assert_true(h->v[(i - 1) / 2]->when <= h->v[i]->when);
    }
}

static void test_empty_and_single(void **state)
{
    fa_timer_heap h;
    fa_timer_item a;

    fa_timer_heap_init(&h);
    fa_timer_item_init(&a);
    assert_null(fa_timer_heap_top(&h));
    assert_false(fa_timer_item_queued(&a));
    fa_timer_heap_remove(&h, &a); /* not queued: no-op */
    assert_int_equal(fa_timer_heap_set(&h, &a, 7), 0);
    assert_true(fa_timer_item_queued(&a));
    assert_ptr_equal(fa_timer_heap_top(&h), &a);
    assert_int_equal(fa_timer_heap_set(&h, &a, 3), 0); /* a move, not a second entry */
    assert_int_equal(h.len, 1);
    assert_int_equal(a.when, 3);
    fa_timer_heap_remove(&h, &a);
    assert_false(fa_timer_item_queued(&a));
    assert_null(fa_timer_heap_top(&h));
    fa_timer_heap_free(&h);
    fa_timer_heap_free(&h);
}

static void test_against_reference(void **state)
{
    static fa_timer_item it[N];
    fa_timer_heap h;
    size_t queued = 0;

    fa_timer_heap_init(&h);
    for (int i = 0; i < N; i++)
        fa_timer_item_init(&it[i]);
    for (int step = 0; step < 20000; step++) {
        fa_timer_item *x = &it[next_rand() % N];
        int op = (int)(next_rand() % 4);
        if (op < 3) {
            /* insert, or move earlier or later; equal deadlines too */
            uint64_t when = next_rand() % 1000;
            if (!fa_timer_item_queued(x))
                queued++;
            assert_int_equal(fa_timer_heap_set(&h, x, when), 0);
            assert_int_equal(x->when, when);
        } else {
            if (fa_timer_item_queued(x))
                queued--;
            fa_timer_heap_remove(&h, x);
            assert_false(fa_timer_item_queued(x));
        }
        assert_int_equal(h.len, queued);
        if (step % 97 == 0)
            check_invariants(&h);
        /* the top is the earliest of all the queued items */
        if (queued) {
            uint64_t min = UINT64_MAX;
            for (int i = 0; i < N; i++)
                if (fa_timer_item_queued(&it[i]) && it[i].when < min)
                    min = it[i].when;
            assert_true(fa_timer_heap_top(&h)->when == min);
        }
    }
    /* drained in order */
    uint64_t last = 0;
    fa_timer_item *top;
    while ((top = fa_timer_heap_top(&h))) {
        assert_true(top->when >= last);
        last = top->when;
        fa_timer_heap_remove(&h, top);
        check_invariants(&h);
    }
    for (int i = 0; i < N; i++)
        assert_false(fa_timer_item_queued(&it[i]));
    fa_timer_heap_free(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_and_single),
        cmocka_unit_test(test_against_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
