/* trainer_proto.c - the long-lived trainer's line protocol, sans I/O
 * (trainer_proto.h). */
#include "worker/trainer_proto.h"

#include "common/fa_json.h"
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

struct fa_trainer_proto {
    fa_trainer_state state;
    uint64_t deadline_ms;     /* of the awaited message; UINT64_MAX: none */
    uint64_t wait_ms;         /* the timeout that set it, for messages */
    uint64_t round;           /* in flight (BUSY), or the last one */
    int train;                /* the round in flight is a "train" task */
    char *buf;                /* buffered bytes [0, len) */
    size_t len, cap, scanned; /* scanned: bytes of buf known to hold no '\n' */
};

int fa_trainer_proto_new(fa_trainer_proto **out, uint64_t now_ms, uint64_t hello_timeout_ms,
                         fa_error *err)
{
    fa_trainer_proto *p = calloc(1, sizeof(*p));
    *out = NULL;
    if (!p)
        return fa_errorf(err, FA_ERR_NOMEM, "trainer protocol: out of memory");
    p->state = FA_TRAINER_AWAIT_HELLO;
    p->wait_ms = hello_timeout_ms;
    p->deadline_ms = now_ms + hello_timeout_ms < now_ms ? UINT64_MAX : now_ms + hello_timeout_ms;
    *out = p;
    return 0;
}

void fa_trainer_proto_del(fa_trainer_proto *p)
{
    if (!p)
        return;
    free(p->buf);
    free(p);
}

fa_trainer_state fa_trainer_proto_state(const fa_trainer_proto *p)
{
    return p->state;
}

uint64_t fa_trainer_proto_round_id(const fa_trainer_proto *p)
{
    return p->round;
}

uint64_t fa_trainer_proto_deadline(const fa_trainer_proto *p)
{
    return p->state == FA_TRAINER_AWAIT_HELLO || p->state == FA_TRAINER_BUSY ? p->deadline_ms
                                                                             : UINT64_MAX;
}

/* Every protocol error leaves the trainer unusable. */
static int broken(fa_trainer_proto *p, int code)
{
    p->state = FA_TRAINER_BROKEN;
    return code;
}

int fa_trainer_proto_check_time(fa_trainer_proto *p, uint64_t now_ms, fa_error *err)
{
    if (now_ms < fa_trainer_proto_deadline(p))
        return 0;
    if (p->state == FA_TRAINER_AWAIT_HELLO) {
        broken(p, 0);
        return fa_errorf(err, FA_ERR_TIMEOUT,
                         "the trainer did not connect to FEDAGG_SOCKET and say hello within "
                         "start_timeout_s=%" PRIu64,
                         p->wait_ms / 1000);
    }
    broken(p, 0);
    return fa_errorf(err, FA_ERR_TIMEOUT,
                     "the trainer did not answer round %" PRIu64 " within timeout_s=%" PRIu64,
                     p->round, p->wait_ms / 1000);
}

int fa_trainer_proto_feed(fa_trainer_proto *p, const void *data, size_t len, fa_error *err)
{
    if (p->state == FA_TRAINER_BROKEN || p->state == FA_TRAINER_SHUTDOWN)
        return fa_errorf(err, FA_ERR_STATE, "trainer protocol: the session is over");
    if (len == 0)
        return 0;
    if (p->len + len > p->cap) {
        size_t cap = p->cap ? p->cap : 4096;
        char *nb;
        while (cap < p->len + len)
            cap *= 2;
        nb = realloc(p->buf, cap);
        if (!nb)
            return fa_errorf(err, FA_ERR_NOMEM, "trainer protocol: out of memory");
        p->buf = nb;
        p->cap = cap;
    }
    memcpy(p->buf + p->len, data, len);
    p->len += len;
    /* A line can only be refused for its length once it is known to be too
     * long; a well-behaved line may arrive in any number of pieces. */
    if (!memchr(p->buf + p->scanned, '\n', p->len - p->scanned)) {
        p->scanned = p->len;
        if (p->len > FA_TRAINER_MAX_LINE)
            return broken(p, fa_errorf(err, FA_ERR_PROTOCOL,
                                       "the trainer sent a line longer than %zu bytes "
                                       "(messages are one JSON object per line)",
                                       FA_TRAINER_MAX_LINE));
    }
    return 0;
}

/* s with control characters replaced, bounded, into buf. */
static void printable(char *buf, size_t n, const char *s)
{
    size_t j = 0;
    for (; s && *s && j + 1 < n; s++)
        buf[j++] = (unsigned char)*s < 0x20 || *s == 0x7f ? ' ' : *s;
    buf[j] = '\0';
}

/* A "round" field that must equal the round in flight. */
static int check_round(fa_trainer_proto *p, const json_t *o, const char *type, fa_error *err)
{
    const json_t *r = json_object_get(o, "round");
    if (!json_is_integer(r))
        return broken(p, fa_errorf(err, FA_ERR_PROTOCOL,
                                   "the trainer's \"%s\" message has no integer \"round\" "
                                   "(round %" PRIu64 " is in flight)",
                                   type, p->round));
    if (json_integer_value(r) < 0 || (uint64_t)json_integer_value(r) != p->round)
        return broken(p, fa_errorf(err, FA_ERR_PROTOCOL,
                                   "the trainer's \"%s\" message is for round %" PRId64
                                   ", the round in flight is %" PRIu64,
                                   type, (int64_t)json_integer_value(r), p->round));
    return 0;
}

static int handle(fa_trainer_proto *p, const char *line, size_t n, fa_trainer_event *ev,
                  fa_error *err)
{
    json_error_t je;
    json_t *o = json_loadb(line, n, JSON_REJECT_DUPLICATES, &je);
    const char *type;
    int rc = 0;

    if (!o && fa_json_out_of_memory(&je))
        return broken(p, fa_errorf(err, FA_ERR_NOMEM, "out of memory reading the trainer's line"));
    if (!o)
        return broken(p, fa_errorf(err, FA_ERR_PROTOCOL,
                                   "the trainer sent a line that is not JSON (column %d: %s)",
                                   je.column, je.text));
    if (!json_is_object(o)) {
        rc = broken(p, fa_errorf(err, FA_ERR_PROTOCOL,
                                 "the trainer sent a JSON value that is not an object"));
        goto out;
    }
    type = json_string_value(json_object_get(o, "type"));
    if (!type) {
        rc = broken(p, fa_errorf(err, FA_ERR_PROTOCOL,
                                 "the trainer sent a message without a string \"type\""));
        goto out;
    }
    if (!strcmp(type, "hello")) {
        const json_t *v = json_object_get(o, "protocol");
        if (p->state != FA_TRAINER_AWAIT_HELLO) {
            rc = broken(p, fa_errorf(err, FA_ERR_PROTOCOL, "the trainer said hello twice"));
            goto out;
        }
        if (!json_is_integer(v)) {
            rc = broken(p, fa_errorf(err, FA_ERR_PROTOCOL,
                                     "the trainer's hello names no protocol (an integer); this "
                                     "worker speaks protocol %d",
                                     FA_TRAINER_PROTOCOL));
            goto out;
        }
        if (json_integer_value(v) != FA_TRAINER_PROTOCOL) {
            rc = broken(p, fa_errorf(err, FA_ERR_PROTOCOL,
                                     "the trainer's hello asks for protocol %" PRId64
                                     "; this worker speaks protocol %d",
                                     (int64_t)json_integer_value(v), FA_TRAINER_PROTOCOL));
            goto out;
        }
        p->state = FA_TRAINER_IDLE;
        ev->kind = FA_TRAINER_EV_HELLO;
    } else if (!strcmp(type, "done") || !strcmp(type, "error")) {
        if (p->state != FA_TRAINER_BUSY) {
            rc = broken(p,
                        fa_errorf(err, FA_ERR_PROTOCOL, "the trainer sent \"%s\" %s", type,
                                  p->state == FA_TRAINER_AWAIT_HELLO ? "before its hello"
                                                                     : "with no round in flight"));
            goto out;
        }
        if ((rc = check_round(p, o, type, err)) != 0)
            goto out;
        ev->round = p->round;
        if (type[0] == 'd') {
            rc = fa_trainer_result_from_json(&ev->result, o, "the trainer's done message", err);
            if (rc != 0) {
                rc = broken(p, FA_ERR_PROTOCOL);
                if (err)
                    err->code = rc;
                goto out;
            }
            if (p->train && ev->result.num_examples == 0) {
                rc = broken(p, fa_errorf(err, FA_ERR_PROTOCOL,
                                         "the trainer's done message for round %" PRIu64
                                         " has no \"num_examples\" (an integer >= 1)",
                                         p->round));
                goto out;
            }
            ev->kind = FA_TRAINER_EV_DONE;
        } else {
            const char *m = json_string_value(json_object_get(o, "message"));
            printable(ev->message, sizeof(ev->message), m ? m : "(no message)");
            ev->kind = FA_TRAINER_EV_ERROR;
        }
        p->state = FA_TRAINER_IDLE;
        p->deadline_ms = UINT64_MAX;
    } else {
        char t[64];
        printable(t, sizeof(t), type);
        rc = broken(p, fa_errorf(err, FA_ERR_PROTOCOL,
                                 "the trainer sent a message of unknown type \"%s\"", t));
    }
out:
    json_decref(o);
    return rc;
}

int fa_trainer_proto_next(fa_trainer_proto *p, fa_trainer_event *ev, fa_error *err)
{
    memset(ev, 0, sizeof(*ev));
    fa_trainer_result_init(&ev->result);
    if (p->state == FA_TRAINER_BROKEN || p->state == FA_TRAINER_SHUTDOWN)
        return fa_errorf(err, FA_ERR_STATE, "trainer protocol: the session is over");
    for (;;) {
        char *nl = p->len ? memchr(p->buf, '\n', p->len) : NULL;
        size_t n, used;
        int rc;

        if (!nl) {
            if (p->len > FA_TRAINER_MAX_LINE)
                return broken(p, fa_errorf(err, FA_ERR_PROTOCOL,
                                           "the trainer sent a line longer than %zu bytes",
                                           FA_TRAINER_MAX_LINE));
            return 0;
        }
        n = (size_t)(nl - p->buf);
        used = n + 1;
        if (n > FA_TRAINER_MAX_LINE)
            return broken(p, fa_errorf(err, FA_ERR_PROTOCOL,
                                       "the trainer sent a line longer than %zu bytes",
                                       FA_TRAINER_MAX_LINE));
        if (n > 0 && p->buf[n - 1] == '\r')
            n--;
        rc = n == 0 ? 0 : handle(p, p->buf, n, ev, err);
        memmove(p->buf, p->buf + used, p->len - used);
        p->len -= used;
        p->scanned = 0;
        if (rc != 0 || ev->kind != FA_TRAINER_EV_NONE)
            return rc;
    }
}

/* o as one compact line with its '\n'. */
static int dump_line(json_t *o, char **line, size_t *len, fa_error *err)
{
    char *s = json_dumps(o, JSON_COMPACT);
    size_t n;
    char *l;
    if (!s)
        return fa_errorf(err, FA_ERR_NOMEM, "trainer protocol: out of memory");
    n = strlen(s);
    l = malloc(n + 2);
    if (!l) {
        free(s);
        return fa_errorf(err, FA_ERR_NOMEM, "trainer protocol: out of memory");
    }
    memcpy(l, s, n);
    l[n] = '\n';
    l[n + 1] = '\0';
    free(s);
    *line = l;
    *len = n + 1;
    return 0;
}

int fa_trainer_proto_round(fa_trainer_proto *p, const fa_trainer_round_msg *m, uint64_t now_ms,
                           uint64_t timeout_ms, char **line, size_t *len, fa_error *err)
{
    json_t *o;
    int rc, bad = 0;

    *line = NULL;
    *len = 0;
    if (p->state != FA_TRAINER_IDLE)
        return fa_errorf(err, FA_ERR_STATE, "trainer protocol: a round can only start when idle");
    if (!m->task || !m->input || (!strcmp(m->task, "train") && !m->output))
        return fa_errorf(err, FA_ERR_INVAL,
                         "trainer protocol: round without task, input or output");
    if (!fa_json_utf8_valid(m->task) || !fa_json_utf8_valid(m->input) ||
        (m->region && !fa_json_utf8_valid(m->region)) ||
        (m->output && !fa_json_utf8_valid(m->output)))
        return fa_errorf(err, FA_ERR_INVAL,
                         "trainer protocol: a path or the region is not valid UTF-8");
    o = json_object();
    if (!o)
        return fa_errorf(err, FA_ERR_NOMEM, "trainer protocol: out of memory");
    bad |= json_object_set_new(o, "type", json_string("round"));
    bad |= json_object_set_new(o, "task", json_string(m->task));
    bad |= json_object_set_new(o, "round", json_integer((json_int_t)m->round));
    bad |= json_object_set_new(o, "version", json_integer((json_int_t)m->version));
    if (m->region)
        bad |= json_object_set_new(o, "region", json_string(m->region));
    bad |= json_object_set_new(o, "input", json_string(m->input));
    if (m->output)
        bad |= json_object_set_new(o, "output", json_string(m->output));
    if (bad) {
        json_decref(o);
        return fa_errorf(err, FA_ERR_NOMEM, "trainer protocol: out of memory");
    }
    rc = dump_line(o, line, len, err);
    json_decref(o);
    if (rc != 0)
        return rc;
    p->state = FA_TRAINER_BUSY;
    p->round = m->round;
    p->train = !strcmp(m->task, "train");
    p->wait_ms = timeout_ms;
    p->deadline_ms = now_ms + timeout_ms < now_ms ? UINT64_MAX : now_ms + timeout_ms;
    return 0;
}

int fa_trainer_proto_shutdown(fa_trainer_proto *p, char **line, size_t *len, fa_error *err)
{
    json_t *o;
    int rc;

    *line = NULL;
    *len = 0;
    if (p->state == FA_TRAINER_BROKEN)
        return fa_errorf(err, FA_ERR_STATE, "trainer protocol: the session is broken");
    o = json_pack("{s:s}", "type", "shutdown");
    if (!o)
        return fa_errorf(err, FA_ERR_NOMEM, "trainer protocol: out of memory");
    rc = dump_line(o, line, len, err);
    json_decref(o);
    if (rc == 0)
        p->state = FA_TRAINER_SHUTDOWN;
    return rc;
}
