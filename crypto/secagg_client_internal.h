/* secagg_client_internal.h - the client's state, shared by its files (internal
 * to crypto/): secagg_client.c runs the rounds, secagg_client_stream.c the
 * masked stream, secagg_client_state.c saves and restores them.  The public face is
 * crypto/secagg.h. */
#ifndef FA_CRYPTO_SECAGG_CLIENT_INTERNAL_H
#define FA_CRYPTO_SECAGG_CLIENT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "common/fa_blake3.h"
#include "crypto/mask_prg_internal.h"
#include "crypto/codec_internal.h"
#include "crypto/ring_internal.h"
#include "crypto/secagg.h"
#include "crypto/secagg_internal.h"

/* Where the client is.  Each consumed server message moves it one step. */
enum {
    CP_CREATED = 0,    /* keys drawn, AdvertiseKeys ready (round 0) */
    CP_PEERS = 1,      /* PeerList U1 accepted */
    CP_SHARED = 2,     /* ShareKeys produced (round 1) */
    CP_GOT_SHARES = 3, /* SharesForYou accepted: may stream the masked input (round 2) */
    CP_SURVIVORS = 4,  /* U3 accepted, SignedSurvivors produced (round 3) */
    CP_UNMASKED = 5,   /* UnmaskShares produced (round 4) */
};

enum { REV_NONE = 0, REV_B = 1, REV_S = 2 };
enum { INPUT_NONE = 0, INPUT_F32 = 1, INPUT_RING = 2 };

/* Everything secret, in one sodium_malloc'ed block (guard pages, wiped on
 * free). */
struct client_secrets {
    uint8_t identity[32];   /* Ed25519 seed */
    uint8_t c_sk[32];       /* X25519, share encryption */
    uint8_t s_sk[32];       /* X25519, pairwise masks */
    uint8_t b[32];          /* self-mask seed b_u */
    uint8_t round_seed[32]; /* stochastic rounding */
};

/* The masked stream: one PRG per mask (the self mask first), the rounding
 * PRG, and one block of output waiting to be copied out. */
struct stream {
    int ready;
    size_t nprg;
    fa_mask_prg *prg;
    int *sign;
    fa_mask_prg round_prg;
    uint64_t pos; /* coordinates produced */
    uint32_t *acc, *scratch, *rnd;
    uint8_t *pending;
    size_t pend_off, pend_len;
    fa_blake3_ctx hash; /* of the masked stream so far */
    int finished;
};

struct fa_secagg_client {
    fa_secagg_cfg cfg;
    fa_secagg_roster roster;
    char id[FA_SECAGG_ID_CAP];
    fa_secagg_rng rng;
    struct client_secrets *sec;
    fa_secagg_peer self; /* own advertisement */
    int phase;
    /* U1 */
    size_t n1;
    fa_secagg_peer *peers; /* sorted by id */
    int me;                /* index in peers */
    fa_secagg_graph graph;
    uint8_t in_u2[FA_SECAGG_MAX_CLIENTS]; /* sent us shares (U2 as seen here; me included) */
    uint8_t in_u3[FA_SECAGG_MAX_CLIENTS];
    uint8_t revealed[FA_SECAGG_MAX_CLIENTS]; /* REV_* per owner, once round 4 ran */
    uint8_t *held; /* sodium_malloc, n1 * 64: share of b_j || share of s_sk_j we hold */
    uint8_t *ck;   /* sodium_malloc, n1 * 32: share-encryption keys from round 1, kept
                      for decrypting in round 2 (not saved: recomputed after a restore) */
    uint8_t ck_have[FA_SECAGG_MAX_CLIENTS];
    uint8_t *sharekeys; /* the ShareKeys message, kept so a retry sends the same bytes */
    size_t sharekeys_len;
    /* input */
    int input_kind;
    int input_bound; /* x or q is set in this process */
    const float *xf;
    const uint32_t *xq;
    double weight;
    fa_codec codec;
    uint8_t input_sha[32];
    int have_input_sha;
    /* output */
    uint8_t upload_digest[32]; /* BLAKE3 of the whole masked stream */
    int upload_done;
    struct stream st;
};

/* A client for cfg and the roster with its secrets allocated (not drawn).
 * Returns 0, or FA_ERR_INVAL, FA_ERR_NOMEM, FA_ERR_CRYPTO. */
int fa_secagg_client_alloc(fa_secagg_client **out, const fa_secagg_config *cfg,
                           const uint8_t identity_sk[32], const char *client_id,
                           const fa_secagg_member *members, size_t n_members,
                           const fa_secagg_rng *rng, fa_error *err);

/* FA_ERR_STATE (with a message naming `what`) unless lo <= c->phase <= hi. */
int fa_secagg_client_check_phase(const fa_secagg_client *c, int lo, int hi, const char *what,
                                 fa_error *err);

/* Frees the masked stream's generators and buffers (wiping the ones that
 * held input) and zeroes *st. */
void fa_secagg_client_stream_free(struct stream *st);

#endif
