/* test_crypto_harness.h - an in-process secure-aggregation round for the
 * crypto unit tests, the fuzz target and the benchmarks: a federation of n
 * clients with seeded identity keys, a seeded random source, and a driver
 * that runs every phase with chosen dropouts.  Header-only (static
 * functions), included by one test file each. */
#ifndef FA_TEST_CRYPTO_HARNESS_H
#define FA_TEST_CRYPTO_HARNESS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "crypto/identity.h"
#include "crypto/secagg.h"
#include "secagg.pb-c.h"

/* ---- a seeded random source (ChaCha20 keystream) ---------------------------- */

typedef struct th_rng {
    uint8_t key[32];
    uint64_t ctr;
} th_rng;

static __attribute__((unused)) int th_rng_fill(void *ctx, void *buf, size_t len)
{
    th_rng *r = ctx;
    uint8_t nonce[8];
    for (int i = 0; i < 8; i++)
        nonce[i] = (uint8_t)(r->ctr >> (8 * i));
    r->ctr++;
    crypto_stream_chacha20(buf, len, nonce, r->key);
    return 0;
}

static __attribute__((unused)) void th_rng_init(th_rng *r, uint64_t seed)
{
    memset(r, 0, sizeof(*r));
    for (int i = 0; i < 8; i++)
        r->key[i] = (uint8_t)(seed >> (8 * i));
    r->key[31] = 0x5a;
}

static __attribute__((unused)) uint32_t th_rand(th_rng *r)
{
    uint32_t v;
    th_rng_fill(r, &v, sizeof(v));
    return v;
}

/* uniform in [0, n) */
static __attribute__((unused)) uint32_t th_below(th_rng *r, uint32_t n)
{
    return n ? th_rand(r) % n : 0;
}

/* ---- a federation -------------------------------------------------------------- */

typedef struct th_fed {
    size_t n;
    char ids[FA_SECAGG_MAX_CLIENTS][16];
    uint8_t seeds[FA_SECAGG_MAX_CLIENTS][32];
    fa_secagg_member members[FA_SECAGG_MAX_CLIENTS];
} th_fed;

static __attribute__((unused)) void th_fed_init(th_fed *f, size_t n, uint64_t seed)
{
    th_rng r;
    fa_secagg_rng rng = {th_rng_fill, &r};
    th_rng_init(&r, seed ^ 0xfed);
    if (sodium_init() < 0)
        abort();
    memset(f, 0, sizeof(*f));
    f->n = n;
    for (size_t i = 0; i < n; i++) {
        snprintf(f->ids[i], sizeof(f->ids[i]), "region-%03zu", i);
        fa_identity_generate(f->seeds[i], f->members[i].identity_pk, &rng);
        f->members[i].id = f->ids[i];
    }
}

static __attribute__((unused)) fa_secagg_config th_cfg(uint32_t t, uint32_t k, uint64_t len,
                                                       uint32_t neighbours)
{
    fa_secagg_config c;
    memset(&c, 0, sizeof(c));
    c.federation_id = "test-federation";
    c.round = 7;
    c.attempt = 1;
    c.threshold = t;
    c.neighbours = neighbours;
    c.vector_len = len;
    c.ring_bits = k;
    c.quant.bits = k < 8 ? 2 : k - 6 > 24 ? 24 : k - 6;
    c.quant.clip_mode = FA_SECAGG_CLIP_L2;
    c.quant.clip_l2_norm = 10.0;
    c.quant.clip_value = 1.0;
    /* the model every client trained from (secagg.h model_sha256) */
    for (int i = 0; i < FA_SECAGG_SHA256_BYTES; i++)
        c.model_sha256[i] = (uint8_t)(0x6d ^ i);
    return c;
}

/* ---- one round ------------------------------------------------------------------- */

enum {
    TH_STAY = 0,
    TH_DROP_ADVERTISE = 1,   /* never advertises */
    TH_DROP_SHARES = 2,      /* gets the PeerList, sends no ShareKeys */
    TH_DROP_MASKED = 3,      /* no complete upload */
    TH_DROP_CONSISTENCY = 4, /* uploads, does not sign the survivors */
    TH_DROP_UNMASK = 5,      /* signs, sends no UnmaskShares */
};

/* How a TH_DROP_MASKED client fails: never begins, begins and is aborted
 * midway, or is still in flight when the phase closes. */
enum { TH_UPLOAD_NONE = 0, TH_UPLOAD_ABORT = 1, TH_UPLOAD_HANG = 2 };

/* How a client lies in its UnmaskShares (round 4): not at all, one byte of
 * its first revealed share flipped, or every share it reveals replaced by
 * other bytes. */
enum { TH_HONEST = 0, TH_BAD_ONE_SHARE = 1, TH_BAD_ALL_SHARES = 2 };

typedef struct th_run {
    /* in */
    const uint32_t *const *ring; /* per client: vector_len ring elements, or NULL */
    const float *const *xf;      /* per client: vector_len - 1 floats (used when ring is NULL) */
    const double *weight;        /* per client, for xf */
    const int *drop;             /* per client TH_*, NULL = everyone stays */
    const int *upload_style;     /* per client TH_UPLOAD_*, for TH_DROP_MASKED */
    int retry_uploads;           /* survivors first abort an upload midway, then resend */
    size_t max_chunk;            /* largest chunk of the masked stream, 0 = 4096 */
    uint32_t *const *ring_out;   /* per client: receives its quantised input, or NULL */
    const fa_secagg_journal *journal; /* the server's upload journals, NULL = in memory */
    const int *lie;                   /* per client TH_HONEST / TH_BAD_*, NULL = all honest */
    uint64_t seed;
    /* out */
    int rc;         /* 0 or the first error */
    int fail_phase; /* enum fa_secagg_phase the close of which failed, or -1 */
    fa_error err;
    fa_secagg_server *server; /* left for inspection; th_run_free */
} th_run;

static __attribute__((unused)) void th_run_free(th_run *run)
{
    fa_secagg_server_del(run->server);
    run->server = NULL;
}

#define TH_CHECK(expr)                                                                             \
    do {                                                                                           \
        int th_rc_ = (expr);                                                                       \
        if (th_rc_ != 0) {                                                                         \
            fprintf(stderr, "%s:%d: %s -> %d (%s)\n", __FILE__, __LINE__, #expr, th_rc_,           \
                    run->err.msg);                                                                 \
            run->rc = th_rc_;                                                                      \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

static __attribute__((unused)) int th_dropped_by(const th_run *run, size_t i, int phase_drop)
{
    return run->drop && run->drop[i] != TH_STAY && run->drop[i] <= phase_drop;
}

/* Sends `limit` bytes (or the whole stream when limit is UINT64_MAX) of
 * client i's masked stream to the server in random chunks. */
static __attribute__((unused)) int th_stream(th_run *run, th_rng *r, fa_secagg_client *c,
                                             const char *id, uint64_t limit, uint8_t *buf,
                                             size_t max_chunk)
{
    uint64_t sent = 0;
    int rc;
    for (;;) {
        size_t cap = 1 + th_below(r, (uint32_t)max_chunk), n = 0;
        if (limit != UINT64_MAX && limit - sent < cap)
            cap = (size_t)(limit - sent);
        if (cap == 0)
            return 0;
        if ((rc = fa_secagg_client_masked_next(c, buf, cap, &n, &run->err)) != 0)
            return rc;
        if (n == 0)
            return 0;
        if ((rc = fa_secagg_server_masked_chunk(run->server, id, buf, n, 1000, &run->err)) != 0)
            return rc;
        sent += n;
    }
}

/* A client's UnmaskShares as a lying client sends it (TH_BAD_*): packed
 * again into *msg (malloc'ed, the old one freed).  0 or FA_ERR_*. */
static __attribute__((unused)) int th_lie(int how, uint8_t **msg, size_t *len)
{
    Fedagg__UnmaskShares *m = fedagg__unmask_shares__unpack(NULL, *len, *msg);
    int done = 0;
    if (!m)
        return FA_ERR_PARSE;
    for (int kind = 0; kind < 2; kind++) {
        size_t n = kind == 0 ? m->n_self_mask_shares : m->n_key_shares;
        Fedagg__RevealedShare **list = kind == 0 ? m->self_mask_shares : m->key_shares;
        for (size_t x = 0; x < n; x++) {
            if (how == TH_BAD_ONE_SHARE && done)
                break;
            if (how == TH_BAD_ONE_SHARE)
                list[x]->share.data[x % 32] ^= 0x01;
            else
                for (size_t b = 0; b < list[x]->share.len; b++)
                    list[x]->share.data[b] = (uint8_t)(list[x]->share.data[b] * 7 + 11);
            done = 1;
        }
    }
    free(*msg);
    *len = fedagg__unmask_shares__get_packed_size(m);
    *msg = malloc(*len ? *len : 1);
    if (*msg)
        fedagg__unmask_shares__pack(m, *msg);
    fedagg__unmask_shares__free_unpacked(m, NULL);
    return *msg ? 0 : FA_ERR_NOMEM;
}

/* Runs the round; returns run->rc.  A close that fails is recorded in
 * fail_phase (and the round stops there, the server left as it was). */
static __attribute__((unused)) int th_round(const th_fed *f, const fa_secagg_config *cfg,
                                            th_run *run)
{
    fa_secagg_client *cl[FA_SECAGG_MAX_CLIENTS] = {0};
    th_rng rr, pick;
    fa_secagg_rng rng = {th_rng_fill, &rr};
    uint8_t *msg = NULL, *reply = NULL, *buf = NULL;
    size_t len = 0, rlen = 0, n = f->n;
    size_t max_chunk = run->max_chunk ? run->max_chunk : 4096;
    const uint64_t total = fa_secagg_masked_bytes(cfg->vector_len, cfg->ring_bits);

    run->rc = 0;
    run->fail_phase = -1;
    fa_error_clear(&run->err);
    th_rng_init(&rr, run->seed);
    th_rng_init(&pick, run->seed ^ 0x9e3779b97f4a7c15ull);
    buf = malloc(max_chunk);
    TH_CHECK(buf ? 0 : FA_ERR_NOMEM);
    /* a server left from an earlier round of this run is renewed, as the
     * aggregator renews its server for every attempt */
    TH_CHECK(fa_secagg_server_renew(&run->server, cfg, f->members, n, &run->err));
    if (run->journal)
        TH_CHECK(fa_secagg_server_set_journal(run->server, run->journal, &run->err));
    for (size_t i = 0; i < n; i++)
        TH_CHECK(fa_secagg_client_new(&cl[i], cfg, f->seeds[i], f->ids[i], f->members, n, &rng,
                                      &run->err));
    /* Round 0: AdvertiseKeys */
    for (size_t i = 0; i < n; i++) {
        if (th_dropped_by(run, i, TH_DROP_ADVERTISE))
            continue;
        TH_CHECK(fa_secagg_client_advertise(cl[i], &msg, &len, &run->err));
        TH_CHECK(fa_secagg_server_advertise(run->server, f->ids[i], msg, len, 1000, &run->err));
        free(msg);
        msg = NULL;
    }
    if ((run->rc = fa_secagg_server_close(run->server, 1001, &run->err)) != 0) {
        run->fail_phase = FA_SECAGG_ADVERTISE;
        goto out;
    }
    /* Round 1: ShareKeys */
    TH_CHECK(fa_secagg_server_peer_list(run->server, &reply, &rlen, &run->err));
    for (size_t i = 0; i < n; i++) {
        if (th_dropped_by(run, i, TH_DROP_ADVERTISE))
            continue;
        TH_CHECK(fa_secagg_client_peer_list(cl[i], reply, rlen, 1002, &run->err));
        if (th_dropped_by(run, i, TH_DROP_SHARES))
            continue;
        TH_CHECK(fa_secagg_client_share_keys(cl[i], &msg, &len, &run->err));
        TH_CHECK(fa_secagg_server_share_keys(run->server, f->ids[i], msg, len, 1003, &run->err));
        free(msg);
        msg = NULL;
    }
    free(reply);
    reply = NULL;
    if ((run->rc = fa_secagg_server_close(run->server, 1004, &run->err)) != 0) {
        run->fail_phase = FA_SECAGG_SHARES;
        goto out;
    }
    /* Round 2: masked inputs.  Survivors first, then the dropouts, so that
     * uploads left hanging do not hold every slot. */
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < n; i++) {
            int dropper = th_dropped_by(run, i, TH_DROP_MASKED);
            int style = dropper && run->upload_style ? run->upload_style[i] : TH_UPLOAD_NONE;
            if (th_dropped_by(run, i, TH_DROP_SHARES) || dropper != pass)
                continue;
            TH_CHECK(fa_secagg_server_shares_for(run->server, f->ids[i], &reply, &rlen, &run->err));
            TH_CHECK(fa_secagg_client_shares(cl[i], reply, rlen, 1005, &run->err));
            free(reply);
            reply = NULL;
            if (run->ring && run->ring[i])
                TH_CHECK(fa_secagg_client_set_input_ring(cl[i], run->ring[i],
                                                         (size_t)cfg->vector_len, &run->err));
            else
                TH_CHECK(fa_secagg_client_set_input_f32(
                    cl[i], run->xf[i], (size_t)cfg->vector_len - 1, run->weight[i], &run->err));
            if (run->ring_out && run->ring_out[i])
                TH_CHECK(fa_secagg_client_input_ring(cl[i], run->ring_out[i],
                                                     (size_t)cfg->vector_len, &run->err));
            if (dropper && style == TH_UPLOAD_NONE)
                continue;
            if (dropper) {
                /* every slot held by hanging uploads: this one never starts */
                int rc = fa_secagg_server_masked_begin(run->server, f->ids[i], 1006, &run->err);
                if (rc == FA_ERR_AGAIN)
                    continue;
                TH_CHECK(rc);
            } else {
                TH_CHECK(fa_secagg_server_masked_begin(run->server, f->ids[i], 1006, &run->err));
            }
            if (dropper || run->retry_uploads) {
                uint64_t cut = th_below(&pick, (uint32_t)(total < UINT32_MAX ? total : UINT32_MAX));
                TH_CHECK(th_stream(run, &pick, cl[i], f->ids[i], cut, buf, max_chunk));
                if (dropper && style == TH_UPLOAD_HANG)
                    continue;
                TH_CHECK(fa_secagg_server_masked_abort(run->server, f->ids[i], 1007, &run->err));
                if (dropper)
                    continue;
                TH_CHECK(fa_secagg_client_masked_rewind(cl[i], &run->err));
                TH_CHECK(fa_secagg_server_masked_begin(run->server, f->ids[i], 1008, &run->err));
            }
            TH_CHECK(th_stream(run, &pick, cl[i], f->ids[i], UINT64_MAX, buf, max_chunk));
            TH_CHECK(fa_secagg_server_masked_end(run->server, f->ids[i], 1009, &run->err));
        }
    }
    if ((run->rc = fa_secagg_server_close(run->server, 1010, &run->err)) != 0) {
        run->fail_phase = FA_SECAGG_MASKED;
        goto out;
    }
    /* Round 3: consistency check */
    TH_CHECK(fa_secagg_server_survivor_list(run->server, &reply, &rlen, &run->err));
    for (size_t i = 0; i < n; i++) {
        if (th_dropped_by(run, i, TH_DROP_CONSISTENCY))
            continue;
        TH_CHECK(fa_secagg_client_survivors(cl[i], reply, rlen, 1011, &msg, &len, &run->err));
        TH_CHECK(fa_secagg_server_consistency(run->server, f->ids[i], msg, len, 1012, &run->err));
        free(msg);
        msg = NULL;
    }
    free(reply);
    reply = NULL;
    if ((run->rc = fa_secagg_server_close(run->server, 1013, &run->err)) != 0) {
        run->fail_phase = FA_SECAGG_CONSISTENCY;
        goto out;
    }
    /* Round 4: unmasking */
    TH_CHECK(fa_secagg_server_survivor_signatures(run->server, &reply, &rlen, &run->err));
    for (size_t i = 0; i < n; i++) {
        if (th_dropped_by(run, i, TH_DROP_UNMASK))
            continue;
        TH_CHECK(fa_secagg_client_signatures(cl[i], reply, rlen, 1014, &msg, &len, &run->err));
        if (run->lie && run->lie[i] != TH_HONEST)
            TH_CHECK(th_lie(run->lie[i], &msg, &len));
        TH_CHECK(fa_secagg_server_unmask(run->server, f->ids[i], msg, len, 1015, &run->err));
        free(msg);
        msg = NULL;
    }
    if ((run->rc = fa_secagg_server_close(run->server, 1016, &run->err)) != 0) {
        run->fail_phase = FA_SECAGG_UNMASK;
        goto out;
    }
out:
    free(msg);
    free(reply);
    free(buf);
    for (size_t i = 0; i < n; i++)
        fa_secagg_client_del(cl[i]);
    return run->rc;
}

/* Whether client i's input is in the sum for these dropouts. */
static __attribute__((unused)) int th_survives(const th_run *run, size_t i)
{
    return !run->drop || run->drop[i] == TH_STAY || run->drop[i] >= TH_DROP_CONSISTENCY;
}

#endif
