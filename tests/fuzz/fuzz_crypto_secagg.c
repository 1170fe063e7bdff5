/* libFuzzer target: arbitrary bytes as each secure-aggregation message type,
 * into a server and into a client, each restored from a state saved at the
 * phase that message belongs to; the saved states themselves are fuzzed too
 * (fa_secagg_server_restore with the checksum fixed up, so the parser behind
 * it is reached; fa_secagg_client_restore).
 *
 * Input: byte 0 selects the target (mod TARGETS), byte 1 the authenticated
 * client for server targets, the rest is the message.  A message that is
 * accepted is followed by the phase close, so accepted garbage also goes
 * through what comes after it.
 *
 * Built with -DFA_FUZZ_CORPUS_GEN this file is instead a program that writes
 * the seed corpus (valid messages of a real round) into the directory named
 * by argv[1]: tests/fuzz/corpus/crypto_secagg/. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fa_sha256.h"
#include "crypto/secagg.h"
#include "crypto/secagg_internal.h"
#include "../unit/test_crypto_harness.h"

enum {
    T_SRV_ADVERTISE,
    T_SRV_SHARE_KEYS,
    T_SRV_MASKED,
    T_SRV_CONSISTENCY,
    T_SRV_UNMASK,
    T_CLI_PEER_LIST,
    T_CLI_SHARES,
    T_CLI_SURVIVORS,
    T_CLI_SIGNATURES,
    T_SRV_RESTORE,
    T_CLI_RESTORE,
    TARGETS
};

#define FN 3
#define FLEN 21
#define FK 13

struct blob {
    uint8_t *p;
    size_t n;
};

static struct {
    int ready;
    th_fed f;
    fa_secagg_config cfg;
    th_rng rr;
    fa_secagg_rng rng;
    struct blob srv[5]; /* server saved with phase i open */
    struct blob
        cli[4]; /* client 0 waiting for PeerList, SharesForYou, SurvivorList, SurvivorSignatures */
    struct blob msg[TARGETS]; /* one valid message per target (corpus seeds) */
} g;

static void keep(struct blob *b, uint8_t *p, size_t n)
{
    b->p = p;
    b->n = n;
}

static void copy(struct blob *b, const uint8_t *p, size_t n)
{
    b->p = malloc(n ? n : 1);
    memcpy(b->p, p, n);
    b->n = n;
}

#define OK(expr)                                                                                   \
    do {                                                                                           \
        if ((expr) != 0) {                                                                         \
            fprintf(stderr, "fuzz setup: %s failed\n", #expr);                                     \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* One honest round, saving the server before each phase and client 0 before
 * each message it consumes. */
static void setup(void)
{
    fa_secagg_server *s;
    fa_secagg_client *c[FN];
    uint32_t in[FN][FLEN];
    uint8_t *m, *r, up[FN][64];
    size_t len, rlen, got;

    th_fed_init(&g.f, FN, 1);
    g.cfg = th_cfg(2, FK, FLEN, 0);
    th_rng_init(&g.rr, 2);
    g.rng.fill = th_rng_fill;
    g.rng.ctx = &g.rr;
    th_rng_fill(&g.rr, in, sizeof(in));
    OK(fa_secagg_server_new(&s, &g.cfg, g.f.members, FN, NULL));
    for (int i = 0; i < FN; i++)
        OK(fa_secagg_client_new(&c[i], &g.cfg, g.f.seeds[i], g.f.ids[i], g.f.members, FN, &g.rng,
                                NULL));
    OK(fa_secagg_server_save(s, &g.srv[0].p, &g.srv[0].n, NULL));
    OK(fa_secagg_client_save(c[0], &g.cli[0].p, &g.cli[0].n, NULL));
    for (int i = 0; i < FN; i++) {
        OK(fa_secagg_client_advertise(c[i], &m, &len, NULL));
        OK(fa_secagg_server_advertise(s, g.f.ids[i], m, len, 1, NULL));
        if (i == 0)
            keep(&g.msg[T_SRV_ADVERTISE], m, len);
        else
            free(m);
    }
    OK(fa_secagg_server_close(s, 2, NULL));
    OK(fa_secagg_server_save(s, &g.srv[1].p, &g.srv[1].n, NULL));
    OK(fa_secagg_server_peer_list(s, &r, &rlen, NULL));
    keep(&g.msg[T_CLI_PEER_LIST], r, rlen);
    for (int i = 0; i < FN; i++) {
        OK(fa_secagg_client_peer_list(c[i], r, rlen, 3, NULL));
        OK(fa_secagg_client_share_keys(c[i], &m, &len, NULL));
        OK(fa_secagg_server_share_keys(s, g.f.ids[i], m, len, 3, NULL));
        if (i == 0)
            keep(&g.msg[T_SRV_SHARE_KEYS], m, len);
        else
            free(m);
    }
    OK(fa_secagg_client_save(c[0], &g.cli[1].p, &g.cli[1].n, NULL));
    OK(fa_secagg_server_close(s, 4, NULL));
    OK(fa_secagg_server_save(s, &g.srv[2].p, &g.srv[2].n, NULL));
    for (int i = 0; i < FN; i++) {
        OK(fa_secagg_server_shares_for(s, g.f.ids[i], &r, &rlen, NULL));
        OK(fa_secagg_client_shares(c[i], r, rlen, 5, NULL));
        if (i == 0)
            keep(&g.msg[T_CLI_SHARES], r, rlen);
        else
            free(r);
        OK(fa_secagg_client_set_input_ring(c[i], in[i], FLEN, NULL));
        OK(fa_secagg_client_masked_next(c[i], up[i], sizeof(up[i]), &got, NULL));
        if (i == 0)
            copy(&g.msg[T_SRV_MASKED], up[0], got);
        OK(fa_secagg_server_masked_begin(s, g.f.ids[i], 6, NULL));
        OK(fa_secagg_server_masked_chunk(s, g.f.ids[i], up[i], got, 6, NULL));
        OK(fa_secagg_server_masked_end(s, g.f.ids[i], 6, NULL));
    }
    OK(fa_secagg_client_save(c[0], &g.cli[2].p, &g.cli[2].n, NULL));
    OK(fa_secagg_server_close(s, 7, NULL));
    OK(fa_secagg_server_save(s, &g.srv[3].p, &g.srv[3].n, NULL));
    OK(fa_secagg_server_survivor_list(s, &r, &rlen, NULL));
    keep(&g.msg[T_CLI_SURVIVORS], r, rlen);
    for (int i = 0; i < FN; i++) {
        OK(fa_secagg_client_survivors(c[i], r, rlen, 8, &m, &len, NULL));
        OK(fa_secagg_server_consistency(s, g.f.ids[i], m, len, 8, NULL));
        if (i == 0)
            keep(&g.msg[T_SRV_CONSISTENCY], m, len);
        else
            free(m);
    }
    OK(fa_secagg_client_save(c[0], &g.cli[3].p, &g.cli[3].n, NULL));
    OK(fa_secagg_server_close(s, 9, NULL));
    OK(fa_secagg_server_save(s, &g.srv[4].p, &g.srv[4].n, NULL));
    OK(fa_secagg_server_survivor_signatures(s, &r, &rlen, NULL));
    keep(&g.msg[T_CLI_SIGNATURES], r, rlen);
    for (int i = 0; i < FN; i++) {
        OK(fa_secagg_client_signatures(c[i], r, rlen, 10, &m, &len, NULL));
        OK(fa_secagg_server_unmask(s, g.f.ids[i], m, len, 10, NULL));
        if (i == 0)
            keep(&g.msg[T_SRV_UNMASK], m, len);
        else
            free(m);
    }
    OK(fa_secagg_server_close(s, 11, NULL));
    copy(&g.msg[T_SRV_RESTORE], g.srv[3].p, g.srv[3].n);
    copy(&g.msg[T_CLI_RESTORE], g.cli[2].p, g.cli[2].n);
    for (int i = 0; i < FN; i++)
        fa_secagg_client_del(c[i]);
    fa_secagg_server_del(s);
    g.ready = 1;
}

static fa_secagg_server *srv_at(int phase)
{
    fa_secagg_server *s = NULL;
    OK(fa_secagg_server_restore(&s, g.srv[phase].p, g.srv[phase].n, &g.cfg, g.f.members, FN, NULL));
    return s;
}

static fa_secagg_client *cli_at(int step)
{
    fa_secagg_client *c = NULL;
    OK(fa_secagg_client_restore(&c, g.cli[step].p, g.cli[step].n, g.f.seeds[0], g.f.members, FN,
                                &g.rng, NULL));
    return c;
}

/* After an accepted message: exercise the results of the phase. */
static void srv_after(fa_secagg_server *s)
{
    uint8_t *m = NULL;
    size_t n = 0;
    uint32_t sum[FLEN];
    float avg[FLEN - 1];
    if (fa_secagg_server_close(s, 100, NULL) != 0)
        return;
    fa_secagg_server_peer_list(s, &m, &n, NULL);
    free(m);
    m = NULL;
    fa_secagg_server_shares_for(s, g.f.ids[0], &m, &n, NULL);
    free(m);
    m = NULL;
    fa_secagg_server_survivor_list(s, &m, &n, NULL);
    free(m);
    m = NULL;
    fa_secagg_server_survivor_signatures(s, &m, &n, NULL);
    free(m);
    fa_secagg_server_result_ring(s, sum, FLEN, NULL);
    fa_secagg_server_result_f32(s, avg, FLEN - 1, NULL, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fa_secagg_server *s = NULL;
    fa_secagg_client *c = NULL;
    const char *auth;
    uint8_t *out = NULL;
    size_t out_len = 0;
    int target;

    if (!g.ready)
        setup();
    if (size < 2)
        return 0;
    target = data[0] % TARGETS;
    auth = (data[1] & 0x80) ? "stranger" : g.f.ids[data[1] % FN];
    data += 2;
    size -= 2;
    th_rng_init(&g.rr, 3);
    switch (target) {
    case T_SRV_ADVERTISE:
        s = srv_at(0);
        if (fa_secagg_server_advertise(s, auth, data, size, 1, NULL) == 0)
            srv_after(s);
        break;
    case T_SRV_SHARE_KEYS:
        s = srv_at(1);
        if (fa_secagg_server_share_keys(s, auth, data, size, 1, NULL) == 0)
            srv_after(s);
        break;
    case T_SRV_MASKED: {
        /* the bytes as an upload, cut into chunks of 1 + data[i] % 16 */
        size_t off = 0;
        s = srv_at(2);
        if (fa_secagg_server_masked_begin(s, auth, 1, NULL) != 0)
            break;
        while (off < size) {
            size_t k = 1 + data[off] % 16;
            if (k > size - off)
                k = size - off;
            if (fa_secagg_server_masked_chunk(s, auth, data + off, k, 1, NULL) != 0)
                break;
            off += k;
        }
        if (fa_secagg_server_masked_end(s, auth, 1, NULL) != 0)
            fa_secagg_server_masked_abort(s, auth, 1, NULL);
        break;
    }
    case T_SRV_CONSISTENCY:
        s = srv_at(3);
        if (fa_secagg_server_consistency(s, auth, data, size, 1, NULL) == 0)
            srv_after(s);
        break;
    case T_SRV_UNMASK:
        s = srv_at(4);
        if (fa_secagg_server_unmask(s, auth, data, size, 1, NULL) == 0)
            srv_after(s);
        break;
    case T_CLI_PEER_LIST:
        c = cli_at(0);
        if (fa_secagg_client_peer_list(c, data, size, 1, NULL) == 0 &&
            fa_secagg_client_share_keys(c, &out, &out_len, NULL) == 0)
            free(out);
        break;
    case T_CLI_SHARES: {
        uint32_t in[FLEN] = {0};
        uint8_t up[64];
        size_t n;
        c = cli_at(1);
        if (fa_secagg_client_shares(c, data, size, 1, NULL) == 0 &&
            fa_secagg_client_set_input_ring(c, in, FLEN, NULL) == 0)
            fa_secagg_client_masked_next(c, up, sizeof(up), &n, NULL);
        break;
    }
    case T_CLI_SURVIVORS:
        c = cli_at(2);
        if (fa_secagg_client_survivors(c, data, size, 1, &out, &out_len, NULL) == 0)
            free(out);
        break;
    case T_CLI_SIGNATURES:
        c = cli_at(3);
        if (fa_secagg_client_signatures(c, data, size, 1, &out, &out_len, NULL) == 0)
            free(out);
        break;
    case T_SRV_RESTORE: {
        /* fix up the trailing checksum so that the parser is reached */
        uint8_t *b = malloc(size + 32);
        memcpy(b, data, size);
        if (fa_sha256(b + size, b, size) != 0) {
            free(b);
            break;
        }
        if (fa_secagg_server_restore(&s, b, size + 32, &g.cfg, g.f.members, FN, NULL) == 0)
            srv_after(s);
        free(b);
        break;
    }
    case T_CLI_RESTORE:
        if (fa_secagg_client_restore(&c, data, size, g.f.seeds[0], g.f.members, FN, &g.rng, NULL) ==
            0) {
            uint32_t in[FLEN] = {0};
            uint8_t up[64];
            size_t n;
            if (fa_secagg_client_set_input_ring(c, in, FLEN, NULL) == 0)
                fa_secagg_client_masked_next(c, up, sizeof(up), &n, NULL);
        }
        break;
    }
    fa_secagg_server_del(s);
    fa_secagg_client_del(c);
    return 0;
}

#ifdef FA_FUZZ_CORPUS_GEN
/* Writes one seed per target: the valid message, plus a truncated and a
 * bit-flipped variant. */
int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    setup();
    for (int t = 0; t < TARGETS; t++) {
        for (int v = 0; v < 3; v++) {
            char path[4096];
            const struct blob *b = &g.msg[t];
            size_t n = v == 1 ? b->n / 2 : b->n;
            uint8_t head[2] = {(uint8_t)t, 0};
            FILE *f;
            snprintf(path, sizeof(path), "%s/t%02d-%d", argv[1], t, v);
            f = fopen(path, "wb");
            if (!f)
                return 1;
            fwrite(head, 1, 2, f);
            for (size_t i = 0; i < n; i++) {
                uint8_t byte = b->p[i];
                if (v == 2 && i == n / 3)
                    byte ^= 0x04;
                fputc(byte, f);
            }
            fclose(f);
        }
    }
    return 0;
}
#endif
