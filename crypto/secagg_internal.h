/* secagg_internal.h - what the secure-aggregation client and server share:
 * configuration and federation copies, the U1 peer table, the SecAgg+
 * neighbour graph, the canonical byte strings that are signed, hashed or
 * used as associated data, and protobuf helpers (internal to crypto/).
 */
#ifndef FA_CRYPTO_SECAGG_INTERNAL_H
#define FA_CRYPTO_SECAGG_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "common/fa_err.h"
#include "crypto/secagg.h"

#define FA_SECAGG_KEY_BYTES 32 /* X25519 keys, seeds, commitments, shares */
#define FA_SECAGG_SIG_BYTES 64
#define FA_SECAGG_NONCE_BYTES 24 /* XChaCha20-Poly1305 */
#define FA_SECAGG_MAC_BYTES 16
#define FA_SECAGG_SHARE_PLAIN 65 /* x || share of b || share of s_sk */
#define FA_SECAGG_SHARE_CT                                                                         \
    (FA_SECAGG_NONCE_BYTES + FA_SECAGG_SHARE_PLAIN + FA_SECAGG_MAC_BYTES) /* 105 */
#define FA_SECAGG_ID_CAP (FA_SECAGG_MAX_ID_LEN + 1)
#define FA_SECAGG_FED_CAP 256

/* Config with its own copy of the federation id. */
typedef struct fa_secagg_cfg {
    fa_secagg_config c; /* c.federation_id points at fed */
    char fed[FA_SECAGG_FED_CAP];
} fa_secagg_cfg;

/* The federation, sorted by id, ids unique. */
typedef struct fa_secagg_roster_member {
    char id[FA_SECAGG_ID_CAP];
    uint8_t pk[FA_SECAGG_IDENTITY_PK_BYTES];
} fa_secagg_roster_member;

typedef struct fa_secagg_roster {
    fa_secagg_roster_member *m;
    size_t n;
} fa_secagg_roster;

/* One advertisement of U1 (round 0). */
typedef struct fa_secagg_peer {
    char id[FA_SECAGG_ID_CAP];
    uint8_t c_pk[FA_SECAGG_KEY_BYTES];
    uint8_t s_pk[FA_SECAGG_KEY_BYTES];
    uint8_t b_commit[FA_SECAGG_KEY_BYTES];
    uint8_t model_sha[FA_SECAGG_SHA256_BYTES]; /* the model it trained from, signed */
    uint8_t sig[FA_SECAGG_SIG_BYTES];
} fa_secagg_peer;

int fa_secagg_cfg_init(fa_secagg_cfg *out, const fa_secagg_config *cfg, fa_error *err);
int fa_secagg_roster_init(fa_secagg_roster *r, const fa_secagg_member *members, size_t n,
                          fa_error *err);
void fa_secagg_roster_free(fa_secagg_roster *r);
/* Index of id in the roster, or -1. */
int fa_secagg_roster_find(const fa_secagg_roster *r, const char *id);
/* 1 when id is a valid client id (1..63 bytes, printable, no space). */
int fa_secagg_id_valid(const char *id);

/* Shamir threshold and whether u and v (indices of U1) are neighbours.  The
 * graph is the complete graph without SecAgg+ (K = 0 or K >= n - 1), else
 * the Harary graph H_{K,n} (Bell et al. 2020, 3.2): the circulant graph
 * joining each node to the K/2 nearest on either side, over a permutation
 * of U1 fixed by hashing every advertisement (pos[]), so that neither the
 * server nor a client chooses its neighbours. */
typedef struct fa_secagg_graph {
    size_t n;
    uint32_t half;     /* K / 2, or 0 for the complete graph */
    uint32_t shamir_t; /* t, or K/2 + 1 (a majority of the closed neighbourhood) */
    uint8_t pos[FA_SECAGG_MAX_CLIENTS];
} fa_secagg_graph;

int fa_secagg_graph_init(fa_secagg_graph *g, const fa_secagg_cfg *cfg, const fa_secagg_peer *peers,
                         size_t n);
int fa_secagg_graph_adjacent(const fa_secagg_graph *g, size_t u, size_t v); /* u != v, neighbours */
/* The closed neighbourhood (u included), in U1 order. */
size_t fa_secagg_graph_closed(const fa_secagg_graph *g, size_t u, size_t *out);

/* Canonical byte strings (crypto/secagg_common.c documents each).  They
 * return a malloc'ed buffer via fa_wbuf semantics: 0 or FA_ERR_NOMEM. */
int fa_secagg_msg_advertise(const fa_secagg_cfg *cfg, const fa_secagg_peer *p, uint8_t **out,
                            size_t *len);
int fa_secagg_msg_survivors(const fa_secagg_cfg *cfg, const char *signer,
                            const uint8_t model_sha[32], char *const *ids, size_t n, uint8_t **out,
                            size_t *len);
int fa_secagg_msg_upload(const char *fed, uint64_t round, uint32_t attempt, const char *id, int alg,
                         const uint8_t digest[32], uint8_t **out, size_t *len);
int fa_secagg_share_ad(const fa_secagg_cfg *cfg, const char *from, const char *to, uint8_t **out,
                       size_t *len);
/* SHA-256 commitment to a self-mask seed.  Returns 0 or FA_ERR_NOMEM. */
int fa_secagg_b_commit(const fa_secagg_cfg *cfg, const char *id, const uint8_t b[32],
                       uint8_t out[32]);

/* Key agreement + KDF: X25519(sk, peer_pk) with both public keys (in the
 * canonical order of the ids) into HKDF of `purpose`.  Refuses an all-zero
 * agreement (a low-order peer key): FA_ERR_VERIFY. */
int fa_secagg_agree(uint8_t *key, size_t key_len, const char *purpose, const fa_secagg_cfg *cfg,
                    const uint8_t sk[32], const uint8_t my_pk[32], const char *my_id,
                    const uint8_t peer_pk[32], const char *peer_id);

/* AES-128 key of the self mask of `id` from its seed b. */
int fa_secagg_self_mask_key(uint8_t key[16], const fa_secagg_cfg *cfg, const char *id,
                            const uint8_t b[32]);

/* Sign of the pairwise mask that `me` adds for `peer` (Bonawitz et al. 2017,
 * round 2: +1 when me > peer, -1 when me < peer). */
static inline int fa_secagg_pair_sign(const char *me, const char *peer)
{
    return __builtin_strcmp(me, peer) > 0 ? 1 : -1;
}

/* Fills buf from rng (libsodium's randombytes_buf when rng or rng->fill is
 * NULL).  Returns 0 or FA_ERR_CRYPTO (the rng failed). */
int fa_secagg_rng_fill(const fa_secagg_rng *rng, void *buf, size_t len);

/* protobuf-c allocator that wipes every buffer it frees (messages carry
 * shares). */
extern ProtobufCAllocator fa_secagg_pb_alloc;
/* Packs msg into a malloc'ed buffer.  Returns 0 or FA_ERR_NOMEM. */
int fa_secagg_pack(const ProtobufCMessage *msg, uint8_t **out, size_t *len);

/* SHA-256 of the client's whole state (what fa_secagg_client_save seals),
 * for tests that check a refused message changed nothing. */
int fa_secagg_client_state_digest(const fa_secagg_client *c, uint8_t out[32]);

#endif
