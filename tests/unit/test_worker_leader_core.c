/* Unit tests of a federation worker's leader decisions (worker/
 * leader_core.h) on a synthetic clock: the steps of a round in order, each
 * outcome of each step (sit the attempt out, look again, resynchronise,
 * back off, stop, fail), a saved attempt resumed after its statement, the
 * update reused by a new attempt of its round, the device's queue under an
 * agent, the state directory's back-off, the configured number of rounds. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "worker/leader_core.h"

#define NONE UINT64_MAX

static fa_leader_view at(uint64_t round, uint32_t attempt, uint64_t model)
{
    fa_leader_view v;
    memset(&v, 0, sizeof(v));
    v.round = round;
    v.attempt = attempt;
    v.model_version = model;
    v.advertising = 1;
    v.have_version = v.delta_version = NONE;
    return v;
}

static fa_leader_step next(const fa_leader_core *c, uint32_t *wait)
{
    uint32_t w;
    fa_leader_step s = fa_leader_core_next(c, &w);
    if (wait)
        *wait = w;
    return s;
}

/* Steps from REFRESH, doing each with OK and the view an edge would have,
 * until the round ran: the steps seen, in order. */
static size_t run_ok(fa_leader_core *c, uint64_t now, fa_leader_view *v, fa_leader_step *seen)
{
    size_t n = 0;
    assert_int_equal(next(c, NULL), FA_LEADER_REFRESH);
    fa_leader_core_info(c, now, v);
    for (;;) {
        fa_leader_step s = next(c, NULL);
        seen[n++] = s;
        if (s == FA_LEADER_REFRESH || s == FA_LEADER_STOP || s == FA_LEADER_FAIL ||
            s == FA_LEADER_FINISH || n == 16)
            return n;
        if (s == FA_LEADER_FETCH)
            v->have_version = v->model_version;
        if (s == FA_LEADER_TRAIN)
            v->delta_version = v->have_version;
        fa_leader_core_done(c, now, FA_LEADER_OK, v);
    }
}

static void test_round_steps(void **state)
{
    fa_leader_core c;
    fa_leader_view v = at(1, 0, 0);
    fa_leader_step seen[16];
    uint32_t wait;

    (void)state;
    fa_leader_core_init(&c, 0);
    assert_int_equal(next(&c, &wait), FA_LEADER_REFRESH);
    assert_int_equal(wait, 0);
    assert_int_equal(run_ok(&c, 0, &v, seen), 5);
    assert_int_equal(seen[0], FA_LEADER_ROOM);
    assert_int_equal(seen[1], FA_LEADER_FETCH);
    assert_int_equal(seen[2], FA_LEADER_TRAIN);
    assert_int_equal(seen[3], FA_LEADER_UPLOAD);
    assert_int_equal(seen[4], FA_LEADER_REFRESH);
    assert_int_equal(fa_leader_core_rounds(&c), 1);
    next(&c, &wait);
    assert_int_equal(wait, 0);
    /* the same attempt again (it has not moved on yet): wait and look again */
    fa_leader_core_info(&c, 0, &v);
    assert_int_equal(next(&c, &wait), FA_LEADER_REFRESH);
    assert_int_equal(wait, 500);
    /* mid-round (not taking advertisements): the same */
    v = at(2, 0, 1);
    v.advertising = 0;
    fa_leader_core_info(&c, 0, &v);
    assert_int_equal(next(&c, &wait), FA_LEADER_REFRESH);
    assert_int_equal(wait, 500);
    /* with privacy and an agent's device: gate, room, fetch, device, train, charge, upload */
    v = at(2, 0, 1);
    v.dp = 1;
    v.device = 1;
    v.have_version = 0;
    v.delta_version = 0;
    assert_int_equal(run_ok(&c, 0, &v, seen), 8);
    assert_int_equal(seen[0], FA_LEADER_GATE);
    assert_int_equal(seen[1], FA_LEADER_ROOM);
    assert_int_equal(seen[2], FA_LEADER_FETCH);
    assert_int_equal(seen[3], FA_LEADER_DEVICE);
    assert_int_equal(seen[4], FA_LEADER_TRAIN);
    assert_int_equal(seen[5], FA_LEADER_CHARGE);
    assert_int_equal(seen[6], FA_LEADER_UPLOAD);
    /* the federation finished */
    v = at(3, 0, 2);
    v.finished = 1;
    fa_leader_core_info(&c, 0, &v);
    assert_int_equal(next(&c, NULL), FA_LEADER_FINISH);
}

/* A new attempt of the same round, on the same model: the update trained
 * for the first is used again (charged once: the charge deduplicates). */
static void test_update_reused(void **state)
{
    fa_leader_core c;
    fa_leader_view v = at(4, 0, 3);
    fa_leader_step seen[16];

    (void)state;
    fa_leader_core_init(&c, 0);
    v.dp = 1;
    fa_leader_core_info(&c, 0, &v);
    fa_leader_core_done(&c, 0, FA_LEADER_OK, &v); /* gate */
    fa_leader_core_done(&c, 0, FA_LEADER_OK, &v); /* room */
    v.have_version = 3;
    fa_leader_core_done(&c, 0, FA_LEADER_OK, &v); /* fetch */
    v.delta_version = 3;
    fa_leader_core_done(&c, 0, FA_LEADER_OK, &v); /* train */
    assert_int_equal(next(&c, NULL), FA_LEADER_CHARGE);
    fa_leader_core_done(&c, 0, FA_LEADER_OK, &v);
    assert_int_equal(next(&c, NULL), FA_LEADER_UPLOAD);
    /* left out of attempt 0: resynchronise; attempt 1 of round 4 */
    fa_leader_core_done(&c, 0, FA_LEADER_REPLAY, &v);
    assert_int_equal(fa_leader_core_rounds(&c), 0);
    v.attempt = 1;
    assert_int_equal(run_ok(&c, 0, &v, seen), 6);
    assert_int_equal(seen[2], FA_LEADER_FETCH); /* held already: the edge downloads nothing */
    assert_int_equal(seen[3], FA_LEADER_CHARGE);
    assert_int_equal(seen[4], FA_LEADER_UPLOAD);
    /* the same attempt again after a refused upload: taken again, not idle */
    v = at(5, 0, 4);
    v.have_version = v.delta_version = 3;
    fa_leader_core_info(&c, 0, &v);
    while (next(&c, NULL) != FA_LEADER_UPLOAD) {
        if (next(&c, NULL) == FA_LEADER_FETCH)
            v.have_version = 4;
        if (next(&c, NULL) == FA_LEADER_TRAIN)
            v.delta_version = 4;
        fa_leader_core_done(&c, 0, FA_LEADER_OK, &v);
    }
    fa_leader_core_done(&c, 0, FA_LEADER_REPLAY, &v);
    fa_leader_core_info(&c, 0, &v);
    assert_int_not_equal(next(&c, NULL), FA_LEADER_REFRESH);
    /* the model moved while the region trained: look again at once */
    fa_leader_core_init(&c, 0);
    v = at(6, 0, 5);
    fa_leader_core_info(&c, 0, &v);
    fa_leader_core_done(&c, 0, FA_LEADER_OK, &v); /* room */
    v.have_version = 5;
    fa_leader_core_done(&c, 0, FA_LEADER_OK, &v); /* fetch */
    v.delta_version = 5;
    v.model_version = 6;
    fa_leader_core_done(&c, 0, FA_LEADER_OK, &v); /* train */
    {
        uint32_t wait;
        assert_int_equal(next(&c, &wait), FA_LEADER_REFRESH);
        assert_int_equal(wait, 0);
    }
}

static void test_saved_attempt(void **state)
{
    fa_leader_core c;
    fa_leader_view v = at(7, 2, 6);
    uint32_t wait;

    (void)state;
    fa_leader_core_init(&c, 1);
    v.has_saved = 1;
    v.advertising = 0; /* resumed in whatever phase the attempt is */
    fa_leader_core_info(&c, 0, &v);
    assert_int_equal(next(&c, NULL), FA_LEADER_RESUME);
    fa_leader_core_done(&c, 0, FA_LEADER_OK, &v);
    assert_int_equal(next(&c, NULL), FA_LEADER_STOP); /* rounds: 1 */
    assert_int_equal(fa_leader_core_rounds(&c), 1);

    /* with privacy, the statement first; refused as out of date: look again */
    fa_leader_core_init(&c, 0);
    v.dp = 1;
    fa_leader_core_info(&c, 0, &v);
    assert_int_equal(next(&c, NULL), FA_LEADER_STATEMENT);
    fa_leader_core_done(&c, 0, FA_LEADER_REPLAY, &v);
    assert_int_equal(next(&c, &wait), FA_LEADER_REFRESH);
    assert_int_equal(wait, 250);
    fa_leader_core_info(&c, 0, &v);
    assert_int_equal(next(&c, NULL), FA_LEADER_STATEMENT);
    fa_leader_core_done(&c, 0, FA_LEADER_OK, &v);
    assert_int_equal(next(&c, NULL), FA_LEADER_RESUME);
    /* not taken: the region sits the attempt out */
    fa_leader_core_init(&c, 0);
    fa_leader_core_info(&c, 0, &v);
    fa_leader_core_done(&c, 0, FA_LEADER_SKIP, &v);
    assert_int_equal(next(&c, &wait), FA_LEADER_REFRESH);
    v.has_saved = 0;
    v.advertising = 1;
    fa_leader_core_info(&c, 0, &v);
    assert_int_equal(next(&c, &wait), FA_LEADER_REFRESH);
    assert_int_equal(wait, 500);
}

/* Each way of sitting an attempt out: it is not tried again, the next is. */
static void test_sit_out(void **state)
{
    static const fa_leader_step where[] = {FA_LEADER_GATE, FA_LEADER_DEVICE, FA_LEADER_TRAIN,
                                           FA_LEADER_CHARGE};
    fa_leader_core c;
    uint32_t wait;

    (void)state;
    for (size_t k = 0; k < sizeof(where) / sizeof(where[0]); k++) {
        fa_leader_view v = at(1, 0, 0);
        v.dp = 1;
        v.device = 1;
        fa_leader_core_init(&c, 0);
        fa_leader_core_info(&c, 0, &v);
        while (next(&c, NULL) != where[k]) {
            if (next(&c, NULL) == FA_LEADER_FETCH)
                v.have_version = 0;
            if (next(&c, NULL) == FA_LEADER_TRAIN)
                v.delta_version = 0;
            fa_leader_core_done(&c, 0, FA_LEADER_OK, &v);
        }
        fa_leader_core_done(&c, 0, FA_LEADER_SKIP, &v);
        assert_int_equal(next(&c, &wait), FA_LEADER_REFRESH);
        assert_int_equal(wait, 0);
        fa_leader_core_info(&c, 0, &v);
        assert_int_equal(next(&c, &wait), FA_LEADER_REFRESH);
        assert_int_equal(wait, 500);
        v.attempt = 1;
        fa_leader_core_info(&c, 0, &v);
        assert_int_not_equal(next(&c, NULL), FA_LEADER_REFRESH);
        /* stopped for good: the budget's PRIVACY_STOP, a signal */
        fa_leader_core_done(&c, 0, FA_LEADER_STOPPED, &v);
        assert_int_equal(next(&c, NULL), FA_LEADER_STOP);
    }
}

static void test_backoffs(void **state)
{
    fa_leader_core c;
    fa_leader_view v = at(1, 0, 0);
    uint64_t t = 1000000;
    uint32_t wait;

    (void)state;
    fa_leader_core_init(&c, 0);
    /* no room: checked again after 1, 2, 4 ... 60 s; attempts sat out meanwhile */
    for (unsigned k = 0; k < 8; k++) {
        uint32_t back = 1000u << k > 60000u ? 60000u : 1000u << k;
        fa_leader_core_info(&c, t, &v);
        assert_int_equal(next(&c, NULL), FA_LEADER_ROOM);
        fa_leader_core_done(&c, t, FA_LEADER_SKIP, &v);
        assert_int_equal(fa_leader_core_room_backoff(&c), back);
        assert_int_equal(next(&c, &wait), FA_LEADER_REFRESH);
        assert_int_equal(wait, 1000);
        fa_leader_core_info(&c, t + back - 1, &v);
        assert_int_equal(next(&c, NULL), FA_LEADER_REFRESH);
        t += back;
    }
    fa_leader_core_info(&c, t, &v);
    fa_leader_core_done(&c, t, FA_LEADER_OK, &v);
    assert_int_equal(fa_leader_core_room_backoff(&c), 0);
    assert_int_equal(next(&c, NULL), FA_LEADER_FETCH);
    /* a download that failed: again after 2 s; one no retry fixes: fail */
    fa_leader_core_done(&c, t, FA_LEADER_AGAIN, &v);
    assert_int_equal(next(&c, &wait), FA_LEADER_REFRESH);
    assert_int_equal(wait, 2000);
    fa_leader_core_info(&c, t, &v);
    fa_leader_core_done(&c, t, FA_LEADER_OK, &v); /* room */
    fa_leader_core_done(&c, t, FA_LEADER_FATAL, &v);
    assert_int_equal(next(&c, NULL), FA_LEADER_FAIL);
    /* failed attempts: 1, 2, 4, 8, 16, 16 s; a round done starts over */
    fa_leader_core_init(&c, 0);
    v.have_version = v.delta_version = 0;
    for (unsigned k = 0; k < 6; k++) {
        v.attempt = k;
        fa_leader_core_info(&c, t, &v);
        assert_int_equal(next(&c, NULL), FA_LEADER_ROOM);
        fa_leader_core_done(&c, t, FA_LEADER_OK, &v);
        fa_leader_core_done(&c, t, FA_LEADER_OK, &v); /* fetch: held */
        assert_int_equal(next(&c, NULL), FA_LEADER_UPLOAD);
        fa_leader_core_done(&c, t, FA_LEADER_FAILED, &v);
        assert_int_equal(next(&c, &wait), FA_LEADER_REFRESH);
        assert_int_equal(wait, 1000u << (k < 4 ? k : 4));
    }
    v.attempt = 9;
    fa_leader_core_info(&c, t, &v);
    fa_leader_core_done(&c, t, FA_LEADER_OK, &v);
    fa_leader_core_done(&c, t, FA_LEADER_OK, &v);
    fa_leader_core_done(&c, t, FA_LEADER_OK, &v);
    v.attempt = 10;
    fa_leader_core_info(&c, t, &v);
    fa_leader_core_done(&c, t, FA_LEADER_OK, &v);
    fa_leader_core_done(&c, t, FA_LEADER_OK, &v);
    fa_leader_core_done(&c, t, FA_LEADER_FAILED, &v);
    next(&c, &wait);
    assert_int_equal(wait, 1000);
    /* refused for good (a certificate, an audit-log alarm): fail */
    fa_leader_core_info(&c, t, &v);
    fa_leader_core_done(&c, t, FA_LEADER_OK, &v);
    fa_leader_core_done(&c, t, FA_LEADER_OK, &v);
    fa_leader_core_done(&c, t, FA_LEADER_FATAL, &v);
    assert_int_equal(next(&c, NULL), FA_LEADER_FAIL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_steps),   cmocka_unit_test(test_update_reused),
        cmocka_unit_test(test_saved_attempt), cmocka_unit_test(test_sit_out),
        cmocka_unit_test(test_backoffs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
