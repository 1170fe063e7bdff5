/* secagg_server_internal.h - the server's state, shared by its files (internal
 * to crypto/): secagg_server.c runs the rounds, secagg_server_unmask.c
 * removes the masks (round 4), secagg_server_state.c saves and restores.
 * As SQLite's btreeInt.h: the public face is crypto/secagg.h. */
#ifndef FA_CRYPTO_SECAGG_SERVER_INTERNAL_H
#define FA_CRYPTO_SECAGG_SERVER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "common/fa_blake3.h"
#include "crypto/secagg.h"
#include "crypto/secagg_internal.h"

/* What a client has sent.  Once a phase is closed its flag is frozen, so the
 * flag then also means membership: U1 = ADV, U2 = SHARES, U3 = UPLOADED,
 * U4 = SIGNED, U5 = UNMASKED. */
enum {
    CF_ADV = 1,
    CF_SHARES = 2,
    CF_UPLOADED = 4,
    CF_SIGNED = 8,
    CF_UNMASKED = 16,
};

enum { REV_NONE = 0, REV_B = 1, REV_S = 2 };

struct srv_client {
    uint32_t flags;
    int slot; /* upload in flight, or -1 */
    int u1;   /* index in U1, or -1 */
    fa_secagg_peer adv;
    uint8_t upload_digest[32]; /* of upload_alg (enum fa_secagg_upload_digest) */
    int upload_alg;            /* BLAKE3, or SHA-256 in a state an older version saved */
    uint8_t upload_sig[64];
    uint8_t surv_sig[64];
};

/* One masked upload in flight: its bytes go into the sum as they arrive, and
 * into the journal, from which an abort subtracts them again. */
struct upload_slot {
    int client;        /* roster index, -1 when free */
    uint64_t bytes;    /* received so far */
    uint64_t coords;   /* coordinates added to the sum (a multiple of 8) */
    uint8_t carry[32]; /* bytes of a group not complete yet */
    size_t carry_len;
    uint8_t last;       /* the last byte received (its padding bits are checked at the end) */
    fa_blake3_ctx hash; /* of the upload so far */
    uint8_t *journal;   /* in-memory journal: masked_bytes, allocated on first use, reused */
};

/* A revealed share found bad at unmasking (secagg_server_unmask.c). */
struct srv_share_fault {
    int sender; /* U1 index of the client that revealed it */
    int owner;  /* U1 index of the client whose secret it is a share of */
    int kind;   /* REV_B or REV_S */
};

struct fa_secagg_server {
    fa_secagg_cfg cfg;
    fa_secagg_roster roster;
    int phase;
    uint64_t phase_opened_ms;
    struct srv_client *cl; /* roster.n */
    size_t n1;
    int u1[FA_SECAGG_MAX_CLIENTS]; /* U1 index -> roster index (sorted by id) */
    fa_secagg_graph graph;
    uint8_t *ct;         /* [from][to] of U1: FA_SECAGG_SHARE_CT bytes each */
    uint8_t *ct_have;    /* [from][to] */
    uint8_t *rev;        /* [sender][owner] of U1: revealed shares, 32 bytes each */
    uint8_t *rev_kind;   /* [sender][owner]: REV_* */
    uint32_t *sum;       /* vector_len: the running sum, then the result */
    int decoded;         /* the result's d floats are in sum (fa_secagg_server_decode_in_place) */
    uint64_t sum_gen;    /* changes with every change of sum (0: all zeros, as created) */
    uint64_t masked_gen; /* sum_gen when the masked phase closed (the masked sum's) */
    uint64_t masked_bytes;
    struct upload_slot *slots;
    uint32_t in_flight;
    fa_secagg_journal journal; /* the caller's journal storage (ext_journal), see secagg.h */
    int ext_journal;
    /* U3 and the dropouts (U1 \ U3) as roster indices, from CONSISTENCY on */
    size_t n3, ndrop;
    int surv[FA_SECAGG_MAX_CLIENTS], drop[FA_SECAGG_MAX_CLIENTS];
    /* Senders whose revealed share was found bad when the unmask phase
     * closed, in the order found; none of their shares was used for the
     * secrets after (faulty, by U1 index).  Found again by every close. */
    size_t nfault;
    struct srv_share_fault fault[FA_SECAGG_MAX_CLIENTS];
    uint8_t faulty[FA_SECAGG_MAX_CLIENTS];
};

static inline int u1_member(const fa_secagg_server *s, int r)
{
    return s->phase > FA_SECAGG_ADVERTISE && (s->cl[r].flags & CF_ADV);
}
static inline int u2_member(const fa_secagg_server *s, int r)
{
    return s->phase > FA_SECAGG_SHARES && (s->cl[r].flags & CF_SHARES);
}
static inline int u3_member(const fa_secagg_server *s, int r)
{
    return s->phase > FA_SECAGG_MASKED && (s->cl[r].flags & CF_UPLOADED);
}
static inline int u4_member(const fa_secagg_server *s, int r)
{
    return s->phase > FA_SECAGG_CONSISTENCY && (s->cl[r].flags & CF_SIGNED);
}

/* A server for cfg and the roster, in the advertise phase (no tables yet).
 * Returns 0, or FA_ERR_INVAL (cfg, roster), FA_ERR_NOMEM, FA_ERR_CRYPTO. */
int fa_secagg_server_alloc(fa_secagg_server **out, const fa_secagg_config *cfg,
                           const fa_secagg_member *members, size_t n_members, fa_error *err);

/* The [from][to] tables of U1 (n1 x n1).  Returns 0 or FA_ERR_NOMEM. */
int fa_secagg_server_alloc_tables(fa_secagg_server *s);

/* U1 from the advertisements, the graph, the tables.  Returns 0 or an FA_ERR_*. */
int fa_secagg_server_build_u1(fa_secagg_server *s);

/* U3 and the dropouts (U1 \ U3) from the upload flags. */
void fa_secagg_server_build_survivors(fa_secagg_server *s);

/* The checks every message takes (secagg_server.c): its sender is the
 * member the connection authenticated, it is for this round and attempt,
 * and its phase is open.  Each returns 0, or FA_ERR_AUTH / FA_ERR_REPLAY /
 * FA_ERR_STATE with a message; check_sender sets *r to the roster index. */
int fa_secagg_server_check_sender(const fa_secagg_server *s, const char *auth_id,
                                  const char *msg_id, const char *what, int *r, fa_error *err);
int fa_secagg_server_check_round(const fa_secagg_server *s, uint64_t round, uint32_t attempt,
                                 const char *what, const char *who, fa_error *err);
int fa_secagg_server_check_phase(const fa_secagg_server *s, int phase, const char *what,
                                 fa_error *err);

/* Round 4's close (secagg_server_unmask.c): b_u and s_sk_v reconstructed
 * and the masks removed from the sum.  Returns 0 or an FA_ERR_*. */
int fa_secagg_server_close_unmask(fa_secagg_server *s, fa_error *err);

/* The same reconstruction without touching the sum, for the bad shares of
 * a state restored after unmasking (its sum is already the result).
 * Returns 0 or an FA_ERR_*. */
int fa_secagg_server_find_share_faults(fa_secagg_server *s, fa_error *err);

#endif
