/* libFuzzer target: the long-lived trainer's line protocol (worker/trainer_proto.h)
 * on untrusted bytes, as a trainer process could write them to its socket.
 *
 * The first byte picks a state to fuzz from (awaiting hello; a round in
 * flight after a well-formed hello) and how the rest is split into reads;
 * every complete line is taken.  A protocol error must leave the protocol
 * BROKEN and refuse any further feed; nothing may crash or leak. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "worker/trainer_proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fa_trainer_proto *p = NULL;
    fa_trainer_event ev;
    fa_error err;
    char *line = NULL;
    size_t len, chunk;
    int mode;

    if (size < 1)
        return 0;
    mode = data[0];
    data++;
    size--;
    if (fa_trainer_proto_new(&p, 0, 1000, &err) != 0)
        return 0;
    if (mode & 1) {
        static const char hello[] = "{\"type\": \"hello\", \"protocol\": 1}\n";
        fa_trainer_round_msg m = {"train", 7, 6, "eu-west", "/in", "/out"};
        if (fa_trainer_proto_feed(p, hello, sizeof(hello) - 1, &err) != 0 ||
            fa_trainer_proto_next(p, &ev, &err) != 0 || ev.kind != FA_TRAINER_EV_HELLO)
            abort();
        if (fa_trainer_proto_round(p, &m, 0, 1000, &line, &len, &err) != 0)
            abort();
        free(line);
        line = NULL;
    }
    chunk = (size_t)(mode >> 1) + 1;
    for (size_t off = 0; off < size; off += chunk) {
        size_t n = size - off < chunk ? size - off : chunk;
        if (fa_trainer_proto_feed(p, data + off, n, &err) != 0)
            break;
        for (;;) {
            int rc = fa_trainer_proto_next(p, &ev, &err);
            if (rc != 0) {
                if (fa_trainer_proto_state(p) != FA_TRAINER_BROKEN &&
                    fa_trainer_proto_state(p) != FA_TRAINER_SHUTDOWN)
                    abort(); /* a refusal breaks the protocol for good */
                break;
            }
            if (ev.kind == FA_TRAINER_EV_NONE)
                break;
        }
        if (fa_trainer_proto_state(p) == FA_TRAINER_BROKEN) {
            if (fa_trainer_proto_feed(p, "x", 1, &err) == 0)
                abort();
            break;
        }
    }
    if (fa_trainer_proto_shutdown(p, &line, &len, &err) == 0)
        free(line);
    fa_trainer_proto_del(p);
    return 0;
}
