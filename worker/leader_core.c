/* leader_core.c - a federation worker's leader, its decisions (leader_core.h). */
#include "worker/leader_core.h"

#include <assert.h>
#include <string.h>

/* Waits before looking at the federation again: mid-round or the attempt
 * done (500 ms), a statement or upload refused as out of date (250 ms:
 * whatever refused may still hold, never spin), a failed download (2 s),
 * no room in the state directory (1 s doubling to 60 s), a failed attempt
 * (1 s doubling to 16 s). */
#define WAIT_IDLE_MS 500u
#define WAIT_RESYNC_MS 250u
#define WAIT_FETCH_MS 2000u
#define ROOM_MIN_MS 1000u
#define ROOM_MAX_MS 60000u
#define FAIL_MIN_MS 1000u
#define FAIL_MAX_SHIFT 4u

void fa_leader_core_init(fa_leader_core *c, uint64_t rounds_limit)
{
    memset(c, 0, sizeof(*c));
    c->next = FA_LEADER_REFRESH;
    c->last_round = UINT64_MAX;
    c->last_attempt = UINT32_MAX;
    c->rounds_limit = rounds_limit;
}

fa_leader_step fa_leader_core_next(const fa_leader_core *c, uint32_t *wait_ms)
{
    if (wait_ms)
        *wait_ms = c->next == FA_LEADER_REFRESH ? c->wait_ms : 0;
    return c->next;
}

uint64_t fa_leader_core_rounds(const fa_leader_core *c)
{
    return c->rounds_done;
}

uint32_t fa_leader_core_room_backoff(const fa_leader_core *c)
{
    return c->room_backoff_ms;
}

static void refresh(fa_leader_core *c, uint32_t wait_ms)
{
    c->next = FA_LEADER_REFRESH;
    c->wait_ms = wait_ms;
}

/* This attempt is over for this region (it took part, or sits it out). */
static void attempt_done(fa_leader_core *c)
{
    c->last_round = c->v.round;
    c->last_attempt = c->v.attempt;
}

/* A new attempt of the same round may take this region again. */
static void attempt_open(fa_leader_core *c)
{
    c->last_attempt = UINT32_MAX;
}

/* After the model is held: train unless the update of this model is
 * there already (a new attempt of the same round reuses it). */
static void after_fetch(fa_leader_core *c)
{
    if (c->v.delta_version != c->v.have_version)
        c->next = c->v.device ? FA_LEADER_DEVICE : FA_LEADER_TRAIN;
    else if (c->v.model_version != c->v.delta_version)
        refresh(c, 0); /* the model moved while we trained */
    else
        c->next = c->v.dp ? FA_LEADER_CHARGE : FA_LEADER_UPLOAD;
}

void fa_leader_core_info(fa_leader_core *c, uint64_t now_ms, const fa_leader_view *v)
{
    assert(c->next == FA_LEADER_REFRESH);
    c->v = *v;
    if (v->finished) {
        c->next = FA_LEADER_FINISH;
    } else if (v->has_saved) {
        /* a restarted worker: its update was charged before it was saved */
        c->next = v->dp ? FA_LEADER_STATEMENT : FA_LEADER_RESUME;
    } else if (!v->advertising || (v->round == c->last_round && v->attempt == c->last_attempt)) {
        refresh(c, WAIT_IDLE_MS); /* mid-round, or this attempt is done for us */
    } else if (v->dp) {
        c->next = FA_LEADER_GATE; /* a round the budget cannot pay for is not even downloaded */
    } else if (c->room_backoff_ms && now_ms < c->room_next) {
        refresh(c, 1000); /* no room: sit attempts out until the next check */
    } else {
        c->next = FA_LEADER_ROOM;
    }
}

/* The attempt ran (or was resumed): its outcome. */
static void ran(fa_leader_core *c, fa_leader_outcome o)
{
    attempt_done(c);
    switch (o) {
    case FA_LEADER_OK:
        c->rounds_done++;
        c->failures = 0;
        if (c->rounds_limit && c->rounds_done >= c->rounds_limit)
            c->next = FA_LEADER_STOP;
        else
            refresh(c, 0);
        break;
    case FA_LEADER_REPLAY:
        attempt_open(c);
        refresh(c, WAIT_RESYNC_MS);
        break;
    case FA_LEADER_FAILED:
    case FA_LEADER_AGAIN:
    case FA_LEADER_SKIP:
        refresh(c, FAIL_MIN_MS << (c->failures < FAIL_MAX_SHIFT ? c->failures : FAIL_MAX_SHIFT));
        c->failures++;
        break;
    case FA_LEADER_STOPPED: c->next = FA_LEADER_STOP; break;
    case FA_LEADER_FATAL: c->next = FA_LEADER_FAIL; break;
    }
}

void fa_leader_core_done(fa_leader_core *c, uint64_t now_ms, fa_leader_outcome o,
                         const fa_leader_view *v)
{
    fa_leader_step step = c->next;

    c->v = *v;
    if (o == FA_LEADER_FATAL) {
        c->next = FA_LEADER_FAIL;
        return;
    }
    if (o == FA_LEADER_STOPPED) {
        c->next = FA_LEADER_STOP;
        return;
    }
    switch (step) {
    case FA_LEADER_STATEMENT:
        if (o == FA_LEADER_OK)
            c->next = FA_LEADER_RESUME;
        else if (o == FA_LEADER_SKIP) {
            attempt_done(c);
            refresh(c, 0);
        } else {
            refresh(c, WAIT_RESYNC_MS);
        }
        break;
    case FA_LEADER_RESUME:
    case FA_LEADER_UPLOAD: ran(c, o); break;
    case FA_LEADER_GATE:
        if (o == FA_LEADER_OK) {
            if (c->room_backoff_ms && now_ms < c->room_next)
                refresh(c, 1000);
            else
                c->next = FA_LEADER_ROOM;
        } else {
            attempt_done(c);
            refresh(c, 0);
        }
        break;
    case FA_LEADER_ROOM:
        if (o == FA_LEADER_OK) {
            c->room_backoff_ms = 0;
            c->next = FA_LEADER_FETCH;
        } else {
            /* no room to download, train or save an attempt: sit it out */
            c->room_backoff_ms = c->room_backoff_ms ? c->room_backoff_ms * 2 : ROOM_MIN_MS;
            if (c->room_backoff_ms > ROOM_MAX_MS)
                c->room_backoff_ms = ROOM_MAX_MS;
            c->room_next = now_ms + c->room_backoff_ms;
            refresh(c, 1000);
        }
        break;
    case FA_LEADER_FETCH:
        if (o == FA_LEADER_OK)
            after_fetch(c);
        else
            refresh(c, WAIT_FETCH_MS);
        break;
    case FA_LEADER_DEVICE:
        if (o == FA_LEADER_OK) {
            c->next = FA_LEADER_TRAIN;
        } else {
            /* the queue would make the round late: skip it */
            attempt_done(c);
            refresh(c, 0);
        }
        break;
    case FA_LEADER_TRAIN:
        if (o == FA_LEADER_OK) {
            after_fetch(c);
        } else {
            /* a failed round (a trainer's error, a diverged update): this
             * region skips it rather than send garbage */
            attempt_done(c);
            refresh(c, 0);
        }
        break;
    case FA_LEADER_CHARGE:
        if (o == FA_LEADER_OK) {
            c->next = FA_LEADER_UPLOAD;
        } else if (o == FA_LEADER_REPLAY || o == FA_LEADER_AGAIN) {
            attempt_open(c); /* as a refused upload: resynchronise */
            refresh(c, WAIT_RESYNC_MS);
        } else {
            attempt_done(c);
            refresh(c, 0);
        }
        break;
    case FA_LEADER_REFRESH:
    case FA_LEADER_FINISH:
    case FA_LEADER_STOP:
    case FA_LEADER_FAIL:
        /* a GET that failed (FATAL, handled above); nothing else reports here */
        refresh(c, WAIT_FETCH_MS);
        break;
    }
}
