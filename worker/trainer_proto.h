/* trainer_proto.h - the worker's side of the long-lived trainer protocol
 * (docs/trainer-contract.md, "Long-lived mode"), sans I/O: it takes the
 * bytes read from the trainer's socket and a timestamp, and returns events
 * and the lines to send.  worker/trainer_session.c owns the process and the
 * socket.
 *
 *   trainer -> worker  {"type": "hello", "protocol": 1}            once, first
 *   worker -> trainer  {"type": "round", "task": "train", "round": R, "version": V,
 *                       "region": "...", "input": "...", "output": "..."}
 *   trainer -> worker  {"type": "done", "round": R, "num_examples": n, "metrics": {...},
 *                       "eval": {...}}   or   {"type": "error", "round": R, "message": "..."}
 *   worker -> trainer  {"type": "shutdown"}                        at the end
 *
 * One JSON object per line, '\n'-terminated, UTF-8 (a trailing '\r' and
 * empty lines are tolerated).  States:
 *
 *   AWAIT_HELLO --hello--> IDLE --round--> BUSY --done/error--> IDLE
 *   any --shutdown--> SHUTDOWN;   any --protocol error or timeout--> BROKEN
 *
 * Protocol errors (all FA_ERR_PROTOCOL, and the state becomes BROKEN for
 * good: the session restarts the trainer): a line over FA_TRAINER_MAX_LINE
 * bytes, a line that is not a JSON object, an unknown or missing "type", a
 * message out of turn (anything before hello, a second hello, a done with
 * no round in flight or for another round), a hello with another protocol
 * version, a done whose fields are malformed (trainer_result.h) or that
 * lacks num_examples for a "train" task.  Timeouts (FA_ERR_TIMEOUT, BROKEN
 * too): no hello by the start deadline, no done/error by the round's.
 */
#ifndef FA_WORKER_TRAINER_PROTO_H
#define FA_WORKER_TRAINER_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "worker/trainer_result.h"

#define FA_TRAINER_PROTOCOL 1
/* Longest line accepted from a trainer, bytes (without the '\n'). */
#define FA_TRAINER_MAX_LINE ((size_t)1 << 20)

typedef enum fa_trainer_state {
    FA_TRAINER_AWAIT_HELLO = 0,
    FA_TRAINER_IDLE = 1,
    FA_TRAINER_BUSY = 2,
    FA_TRAINER_SHUTDOWN = 3,
    FA_TRAINER_BROKEN = 4,
} fa_trainer_state;

typedef enum fa_trainer_event_kind {
    FA_TRAINER_EV_NONE = 0,  /* no complete line buffered */
    FA_TRAINER_EV_HELLO = 1, /* the trainer is ready */
    FA_TRAINER_EV_DONE = 2,  /* the round is done: result */
    FA_TRAINER_EV_ERROR = 3, /* the trainer gave the round up: message */
} fa_trainer_event_kind;

typedef struct fa_trainer_event {
    fa_trainer_event_kind kind;
    uint64_t round;           /* DONE, ERROR */
    fa_trainer_result result; /* DONE */
    char message[400];        /* ERROR: the trainer's message (control characters replaced) */
} fa_trainer_event;

/* A round to hand over. */
typedef struct fa_trainer_round_msg {
    const char *task; /* "train" or "evaluate" */
    uint64_t round, version;
    const char *region; /* NULL: omitted */
    const char *input;
    const char *output; /* NULL: omitted (task "evaluate") */
} fa_trainer_round_msg;

typedef struct fa_trainer_proto fa_trainer_proto;

/* A protocol in AWAIT_HELLO whose hello is due by now_ms + hello_timeout_ms.
 * Returns 0 or FA_ERR_NOMEM. */
int fa_trainer_proto_new(fa_trainer_proto **out, uint64_t now_ms, uint64_t hello_timeout_ms,
                         fa_error *err);
/* NULL is a no-op. */
void fa_trainer_proto_del(fa_trainer_proto *p);

fa_trainer_state fa_trainer_proto_state(const fa_trainer_proto *p);
/* The round in flight (BUSY), or the last one handed over. */
uint64_t fa_trainer_proto_round_id(const fa_trainer_proto *p);

/* Buffers len bytes read from the trainer.  Returns 0, FA_ERR_PROTOCOL (an
 * unterminated line already longer than FA_TRAINER_MAX_LINE), FA_ERR_STATE
 * (BROKEN or SHUTDOWN) or FA_ERR_NOMEM. */
int fa_trainer_proto_feed(fa_trainer_proto *p, const void *data, size_t len, fa_error *err);

/* Takes the next complete line: ev->kind is FA_TRAINER_EV_NONE when there
 * is none.  Returns 0, FA_ERR_PROTOCOL (see the top), FA_ERR_STATE. */
int fa_trainer_proto_next(fa_trainer_proto *p, fa_trainer_event *ev, fa_error *err);

/* The "round" line for m (malloc'ed, '\n'-terminated, *len bytes), in
 * IDLE; the state becomes BUSY with the answer due by now_ms + timeout_ms.
 * Returns 0, FA_ERR_STATE (not IDLE), FA_ERR_INVAL (a field missing or not
 * UTF-8), FA_ERR_NOMEM. */
int fa_trainer_proto_round(fa_trainer_proto *p, const fa_trainer_round_msg *m, uint64_t now_ms,
                           uint64_t timeout_ms, char **line, size_t *len, fa_error *err);

/* The "shutdown" line (malloc'ed); the state becomes SHUTDOWN.  Valid in
 * any state but BROKEN (then FA_ERR_STATE: nobody is listening).  Returns
 * 0, FA_ERR_STATE or FA_ERR_NOMEM. */
int fa_trainer_proto_shutdown(fa_trainer_proto *p, char **line, size_t *len, fa_error *err);

/* When the awaited message (hello, or the round's answer) is due, ms;
 * UINT64_MAX when none is awaited. */
uint64_t fa_trainer_proto_deadline(const fa_trainer_proto *p);

/* Returns FA_ERR_TIMEOUT (and the state becomes BROKEN) when now_ms is at
 * or past the deadline, else 0. */
int fa_trainer_proto_check_time(fa_trainer_proto *p, uint64_t now_ms, fa_error *err);

#endif
