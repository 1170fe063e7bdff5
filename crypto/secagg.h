/* secagg.h - secure aggregation: the aggregator learns only the sum of the
 * regions' updates (docs/secure-aggregation.md).
 *
 * Protocol: Bonawitz et al., "Practical Secure Aggregation for Privacy-
 * Preserving Machine Learning", CCS 2017, Figure 4 (the variant secure against
 * an active server: signed key advertisements and the consistency check),
 * optionally with the SecAgg+ neighbour graph of Bell et al., "Secure
 * Single-Server Aggregation with (Poly)Logarithmic Overhead", CCS 2020.
 *
 *   round 0  AdvertiseKeys      client -> server -> PeerList (U1)
 *   round 1  ShareKeys          client -> server -> SharesForYou (U2)
 *   round 2  masked upload      client -> server (bit-packed stream) -> SurvivorList (U3)
 *   round 3  ConsistencyCheck   SignedSurvivors -> server -> SurvivorSignatures (U4)
 *   round 4  Unmasking          UnmaskShares -> server (U5) -> the sum
 *
 * Both ends are sans-I/O state machines: they take the protobuf messages of
 * proto/secagg.proto as packed bytes plus a timestamp, and return packed bytes.
 * Randomness comes from an injectable source.  Nothing here reads a clock,
 * a file or a socket, and nothing is logged.  The caller decides when a
 * phase's deadline has passed (fa_secagg_server_close).  Neither object is
 * thread-safe: serialise the calls on one object.
 *
 * Every function returns 0 or a negative FA_ERR_* code (common/fa_err.h) and,
 * when `err` is not NULL, fills it with a message naming what was wrong and
 * where (client id, round, attempt, field).  A refused message or call leaves
 * the state exactly as it was.
 *
 * Arithmetic: inputs are vectors of `vector_len` elements of the ring
 * Z_{2^k}, k = ring_bits <= 32.  Masks are AES-128-CTR keystream (OpenSSL EVP)
 * added into the running vector block by block; a whole mask vector never
 * exists in memory.  Float inputs go through the fixed-point codec below:
 * clip, scale, unbiased stochastic rounding to b bits, and the region's weight
 * w as one extra coordinate (the client sends w*x and w; the server divides).
 *
 * Secrets (X25519 private keys, the self-mask seed b_u, Shamir shares, the
 * identity key) live in sodium_malloc'ed memory and are wiped when freed.
 * Limits: at most 255 clients per round (shares are over GF(2^8)).
 */
#ifndef FA_SECAGG_H
#define FA_SECAGG_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"

#define FA_SECAGG_MAX_CLIENTS 255
#define FA_SECAGG_MAX_ID_LEN 63        /* bytes of a client id, [a-z0-9-] recommended */
#define FA_SECAGG_IDENTITY_PK_BYTES 32 /* Ed25519 public key */
#define FA_SECAGG_IDENTITY_SK_BYTES 32 /* Ed25519 seed (see crypto/identity.h) */
#define FA_SECAGG_SHA256_BYTES 32
#define FA_SECAGG_DIGEST_BYTES 32 /* a masked upload's commitment digest */
#define FA_SECAGG_SIGNATURE_BYTES 64

/* The hash of a masked upload's commitment (audit.proto UploadDigest); the
 * label of the signed message says which, so a signature over one is never
 * taken for the other. */
enum fa_secagg_upload_digest {
    FA_SECAGG_UPLOAD_SHA256 = 0, /* secagg.proto version 3, and the records it made */
    FA_SECAGG_UPLOAD_BLAKE3 = 1, /* BLAKE3-256 (common/fa_blake3.h): what version 4 makes */
};

/* config.proto ClipMode */
enum fa_secagg_clip {
    FA_SECAGG_CLIP_L2 = 0,         /* scale the whole delta down to clip_l2_norm */
    FA_SECAGG_CLIP_COORDINATE = 1, /* clamp each coordinate to [-clip_value, clip_value] */
    FA_SECAGG_CLIP_BOTH = 2,       /* L2 first, then per coordinate */
};

/* Fixed-point codec of float inputs.  The quantiser covers [-clip_value,
 * clip_value] with 2^(bits-1)-1 steps each side; values beyond it are
 * saturated after the L2 clip (so in CLIP_L2 mode clip_value is still the
 * quantiser's range).  The weight coordinate covers [0, 1] with the same
 * number of steps, so it needs no extra ring bits. */
typedef struct fa_secagg_quant {
    uint32_t bits;       /* b, 2..24 */
    int clip_mode;       /* enum fa_secagg_clip */
    double clip_l2_norm; /* > 0 for CLIP_L2 and CLIP_BOTH */
    double clip_value;   /* > 0 */
} fa_secagg_quant;

/* Parameters of one round attempt; client and server must agree on all of
 * them (the client checks the server's PeerList against its own).
 *
 * model_sha256: the SHA-256 of the model file the client trained from (the
 * global model it downloaded).  The client signs it in its AdvertiseKeys and
 * in its consistency-check signature, and refuses a PeerList in which any
 * peer signed another digest: an aggregator that serves one region a crafted
 * model, to isolate that region's update in the sum (the model-inconsistency
 * attack of Pasquini, Francati, Ateniese, "Eluding Secure Aggregation in
 * Federated Learning via Model Inconsistency", CCS 2022), is caught before
 * any share or masked byte leaves.  The server does not use it: it checks
 * each signature over the digest the advertisement carries and hands the
 * digests on in the PeerList; which digest it accepts is the caller's policy
 * (the aggregator: the current model's, fa_secagg_advertise_model).
 *
 * SecAgg+: with neighbours = K < n - 1 each client masks with, and shares
 * its secrets among, its K neighbours on a Harary graph; the Shamir
 * threshold is then K/2 + 1 (a majority of every closed neighbourhood),
 * while t still bounds the number of clients at every phase. */
typedef struct fa_secagg_config {
    const char *federation_id; /* domain separation of every key and signature; copied */
    uint64_t round;
    uint32_t attempt;      /* fresh keys and seeds for every attempt */
    uint32_t threshold;    /* t: fewest clients at every phase; Shamir threshold */
    uint32_t neighbours;   /* SecAgg+ degree K (even), 0 = every pair (plain Bonawitz) */
    uint64_t vector_len;   /* ring coordinates of one upload: num_params + 1 (weight) */
    uint32_t ring_bits;    /* k, 1..32; at least fa_secagg_ring_bits_for(b, n) */
    fa_secagg_quant quant; /* for float inputs and fa_secagg_server_result_f32 */
    uint8_t model_sha256[FA_SECAGG_SHA256_BYTES]; /* client: the model trained from (above) */
    uint32_t max_uploads_in_flight; /* server: concurrent masked uploads, 0 = 4 (see below) */
    uint32_t unmask_threads;        /* server: threads that remove the masks at unmasking, each
                                     * over its own range of the sum; 0 = one per online CPU
                                     * (at most 16, each range at least 1 MiB); <= 256 */
} fa_secagg_config;

/* One member of the federation: its client id and long-term Ed25519 identity
 * public key (config.proto Region.identity_public_key, decoded). */
typedef struct fa_secagg_member {
    const char *id;
    uint8_t identity_pk[FA_SECAGG_IDENTITY_PK_BYTES];
} fa_secagg_member;

/* Injectable randomness: fill(ctx, buf, len) writes len random bytes and
 * returns 0 (or a negative FA_ERR_* code).  A NULL fill means libsodium's
 * randombytes_buf.  Tests pass a seeded generator to replay a round. */
typedef struct fa_secagg_rng {
    int (*fill)(void *ctx, void *buf, size_t len);
    void *ctx;
} fa_secagg_rng;

/* ----------------------------------------------------------------------------
 * Ring and codec helpers
 * ------------------------------------------------------------------------- */

/* k = b + ceil(log2 n): the ring bits that let the sum of n clients' b-bit
 * quantised inputs (and weights) be decoded without wrap-around.  Returns 0
 * when that exceeds 32 or an argument is 0. */
uint32_t fa_secagg_ring_bits_for(uint32_t quant_bits, uint32_t n_clients);

/* The mask generator this process uses: "vaes512" or "vaes256" (our AES
 * kernels on the CPU's vector AES) or "openssl" (EVP), chosen by the CPU;
 * every one gives the same masks.  For logs. */
const char *fa_secagg_mask_prg(void);
/* FEDAGG_MASK_PRG from the environment, when set and not empty: "auto"
 * (the default), "openssl" (OpenSSL's EVP only: for a deployment that
 * admits no AES but its validated library's), "vaes256" or "vaes512".
 * Returns 0, or FA_ERR_INVAL (a name not among those) or
 * FA_ERR_UNSUPPORTED (this CPU cannot run it) with a message naming the
 * variable.  The daemons call it once at start-up. */
int fa_secagg_mask_prg_from_env(fa_error *err);

/* Bytes of one bit-packed masked upload: ceil(vector_len * ring_bits / 8). */
uint64_t fa_secagg_masked_bytes(uint64_t vector_len, uint32_t ring_bits);

/* Checks a configuration (ranges, threshold, neighbours, codec); fills err
 * with the field at fault.  Returns 0 or FA_ERR_INVAL. */
int fa_secagg_config_check(const fa_secagg_config *cfg, fa_error *err);

/* The model digest an AdvertiseKeys message carries (what its client signed
 * it trained from), for the aggregator's check that it is the current
 * model's.  Does not verify the signature (fa_secagg_server_advertise does).
 * Returns 0, FA_ERR_PARSE (not an AdvertiseKeys) or FA_ERR_PROTOCOL (no
 * 32-byte digest: a client older than secagg.proto version 3). */
int fa_secagg_advertise_model(const uint8_t *msg, size_t len,
                              uint8_t model_sha256[FA_SECAGG_SHA256_BYTES]);

/* The signed upload commitment of the audit log (audit.proto
 * RegionCommitment): verifies `signature` by `identity_pk` over
 * (federation, round, attempt, client_id, digest) under the label of `alg`
 * (enum fa_secagg_upload_digest).  Returns 0, FA_ERR_VERIFY, or
 * FA_ERR_INVAL (an alg it does not know). */
int fa_secagg_commitment_verify(const char *federation_id, uint64_t round, uint32_t attempt,
                                const char *client_id, int alg,
                                const uint8_t digest[FA_SECAGG_DIGEST_BYTES],
                                const uint8_t signature[FA_SECAGG_SIGNATURE_BYTES],
                                const uint8_t identity_pk[FA_SECAGG_IDENTITY_PK_BYTES]);

/* Signs the same message with the region's Ed25519 identity seed
 * (crypto/identity.h), so that fa_secagg_commitment_verify accepts it: what
 * the client does for its upload, for tools, simulations and tests that
 * have no client at hand.  Returns 0, FA_ERR_INVAL (empty or over-long ids,
 * an unknown alg), FA_ERR_NOMEM or FA_ERR_CRYPTO. */
int fa_secagg_commitment_sign(const uint8_t seed[FA_SECAGG_IDENTITY_SK_BYTES],
                              const char *federation_id, uint64_t round, uint32_t attempt,
                              const char *client_id, int alg,
                              const uint8_t digest[FA_SECAGG_DIGEST_BYTES],
                              uint8_t signature[FA_SECAGG_SIGNATURE_BYTES]);

/* ----------------------------------------------------------------------------
 * Client (one region's worker, one round attempt)
 *
 *   fa_secagg_client_new            fresh X25519 keys and self-mask seed
 *   fa_secagg_client_advertise      -> AdvertiseKeys                (round 0)
 *   fa_secagg_client_peer_list      <- PeerList
 *   fa_secagg_client_share_keys     -> ShareKeys                    (round 1)
 *   fa_secagg_client_shares         <- SharesForYou
 *   fa_secagg_client_set_input_*    the update (before or after the above)
 *   fa_secagg_client_masked_next    -> masked stream, chunk by chunk (round 2)
 *   fa_secagg_client_survivors      <- SurvivorList -> SignedSurvivors  (round 3)
 *   fa_secagg_client_signatures     <- SurvivorSignatures -> UnmaskShares (round 4)
 *
 * Output buffers (`uint8_t **out, size_t *out_len`) are malloc'ed; the caller
 * frees them with free().  Producing a message again (a retried request)
 * returns the same bytes.
 * ------------------------------------------------------------------------- */
typedef struct fa_secagg_client fa_secagg_client;

/* Creates the client `client_id` of the round attempt cfg->round/attempt.
 * identity_sk is the client's Ed25519 secret seed (copied into secure
 * memory); members/n_members the federation (must include client_id with the
 * public key matching identity_sk; copied).  rng may be NULL (libsodium).
 * Draws the two X25519 key pairs, the self-mask seed b_u and the stochastic
 * rounding seed: every attempt gets a new client and so new secrets.
 * Returns 0, FA_ERR_INVAL (bad config, unknown id, key mismatch),
 * FA_ERR_NOMEM or FA_ERR_CRYPTO. */
int fa_secagg_client_new(fa_secagg_client **out, const fa_secagg_config *cfg,
                         const uint8_t identity_sk[FA_SECAGG_IDENTITY_SK_BYTES],
                         const char *client_id, const fa_secagg_member *members, size_t n_members,
                         const fa_secagg_rng *rng, fa_error *err);

/* Wipes every secret and frees the client.  NULL is a no-op. */
void fa_secagg_client_del(fa_secagg_client *c);

/* Round 0: the signed AdvertiseKeys message.  Returns 0 or FA_ERR_NOMEM. */
int fa_secagg_client_advertise(fa_secagg_client *c, uint8_t **out, size_t *out_len, fa_error *err);

/* Round 0 result: the PeerList U1.  Checks round and attempt (FA_ERR_REPLAY),
 * threshold, neighbours, ring bits and vector length against the client's
 * config (FA_ERR_PROTOCOL), that the list is sorted, unique, made of
 * federation members only, includes this client's own advertisement
 * unchanged, has distinct keys, every signature verifies (FA_ERR_VERIFY),
 * every peer signed cfg->model_sha256, the model this client trained from
 * (FA_ERR_VERIFY, naming the first peer that signed another and both
 * digests), and |U1| >= t (FA_ERR_THRESHOLD).  FA_ERR_PARSE for undecodable
 * bytes, FA_ERR_STATE when called twice or out of order. */
int fa_secagg_client_peer_list(fa_secagg_client *c, const uint8_t *msg, size_t len, uint64_t now_ms,
                               fa_error *err);

/* Round 1: t-of-n Shamir shares of b_u and s_sk_u, one XChaCha20-Poly1305
 * ciphertext per peer (per neighbour with SecAgg+), as ShareKeys.
 * Returns 0, FA_ERR_STATE (no PeerList yet), FA_ERR_CRYPTO or FA_ERR_NOMEM. */
int fa_secagg_client_share_keys(fa_secagg_client *c, uint8_t **out, size_t *out_len, fa_error *err);

/* Round 1 result: the SharesForYou from U2.  Decrypts and checks every
 * ciphertext (FA_ERR_VERIFY), refuses senders outside U1 or not neighbours,
 * duplicates, wrong lengths (FA_ERR_PROTOCOL), and fewer than t clients
 * (FA_ERR_THRESHOLD). */
int fa_secagg_client_shares(fa_secagg_client *c, const uint8_t *msg, size_t len, uint64_t now_ms,
                            fa_error *err);

/* The update as floats: x[0..d) with d = vector_len - 1, and the region's
 * weight w in [0, 1].  The client encodes w * clip(x) and w with the codec of
 * cfg->quant.  x is borrowed: it must stay valid and unchanged until the
 * masked stream is complete.  Returns 0, FA_ERR_INVAL (wrong length,
 * non-finite value: the index is named) or FA_ERR_STATE (see below). */
int fa_secagg_client_set_input_f32(fa_secagg_client *c, const float *x, size_t d, double weight,
                                   fa_error *err);

/* The update already quantised: vector_len ring elements (only their low
 * ring_bits bits count), the weight coordinate included where the caller
 * wants one.  Borrowed like x above. */
int fa_secagg_client_set_input_ring(fa_secagg_client *c, const uint32_t *q, size_t n,
                                    fa_error *err);

/* The masked upload y_u = x_u + PRG(b_u) + sum_v +-PRG(s_uv) (round 2),
 * bit-packed: writes up to cap bytes to out and their number to *n; *n == 0
 * means the stream is complete.  Needs the SharesForYou and an input
 * (FA_ERR_STATE).  The stream is a deterministic function of the input and
 * of this attempt's secrets, so fa_secagg_client_masked_rewind() produces
 * exactly the same bytes again (for an upload that broke off). */
int fa_secagg_client_masked_next(fa_secagg_client *c, uint8_t *out, size_t cap, size_t *n,
                                 fa_error *err);

/* The quantised input this client masks: vector_len ring elements (the
 * weight coordinate last), exactly what the masked stream adds its masks
 * to.  For tests and the debug dump of the worker (FEDAGG_DEBUG_DUMP_DIR):
 * it is the region's own update and must never leave the region.
 * Returns 0, FA_ERR_STATE (no input set), FA_ERR_INVAL (n wrong),
 * FA_ERR_NOMEM or FA_ERR_CRYPTO. */
int fa_secagg_client_input_ring(const fa_secagg_client *c, uint32_t *out, size_t n, fa_error *err);

/* Restarts the masked stream at byte 0. */
int fa_secagg_client_masked_rewind(fa_secagg_client *c, fa_error *err);

/* Total bytes of the masked stream. */
uint64_t fa_secagg_client_masked_bytes(const fa_secagg_client *c);

/* BLAKE3-256 of the complete masked stream (what the commitment signs,
 * FA_SECAGG_UPLOAD_BLAKE3).  Returns 0 or FA_ERR_STATE until the stream's
 * last byte was produced. */
int fa_secagg_client_upload_digest(const fa_secagg_client *c,
                                   uint8_t digest[FA_SECAGG_DIGEST_BYTES]);

/* Round 2 result -> round 3: consumes the SurvivorList U3 and returns
 * SignedSurvivors: the signature over U3 and the signed commitment to the
 * masked upload.  Refuses U3 with fewer than t clients (FA_ERR_THRESHOLD),
 * one without this client, or with clients outside U2 (FA_ERR_PROTOCOL), and
 * a different U3 than an earlier call (FA_ERR_PROTOCOL).  FA_ERR_STATE
 * before the whole masked stream was produced. */
int fa_secagg_client_survivors(fa_secagg_client *c, const uint8_t *msg, size_t len, uint64_t now_ms,
                               uint8_t **out, size_t *out_len, fa_error *err);

/* Round 3 result -> round 4: consumes the SurvivorSignatures of U4 (every
 * signature must verify over this client's U3 and model: FA_ERR_VERIFY; |U4| >= t:
 * FA_ERR_THRESHOLD) and returns UnmaskShares: the shares of b_v for v in U3
 * and of s_sk_v for v in U2 \ U3, never both for one v. */
int fa_secagg_client_signatures(fa_secagg_client *c, const uint8_t *msg, size_t len,
                                uint64_t now_ms, uint8_t **out, size_t *out_len, fa_error *err);

/* Crash recovery.  fa_secagg_client_save serialises the whole client (keys,
 * seeds, shares received, peer list, survivor set, the input's SHA-256 and
 * codec scale) sealed with XChaCha20-Poly1305 under a key derived from the
 * identity secret key, so the blob may be written to the worker's state_dir
 * as is; it is useless without the identity key.  fa_secagg_client_restore
 * needs the same identity key, members and rng as fa_secagg_client_new.
 *
 * The rule that keeps a restarted worker from masking a different input
 * under the same masks: once an input is set, its SHA-256 is part of the
 * state, and after a restore fa_secagg_client_set_input_* refuses any other
 * input with FA_ERR_STATE ("abandon this attempt").  Save after setting the
 * input and before sending the first masked byte.  The input itself is not
 * saved (the caller keeps it, e.g. as a file in state_dir).
 *
 * restore returns FA_ERR_UNSUPPORTED for a state of an older format (before
 * the model digest was part of the config): such an attempt cannot be
 * resumed, the caller abandons it and joins the next one. */
int fa_secagg_client_save(const fa_secagg_client *c, uint8_t **out, size_t *out_len, fa_error *err);
int fa_secagg_client_restore(fa_secagg_client **out, const uint8_t *blob, size_t len,
                             const uint8_t identity_sk[FA_SECAGG_IDENTITY_SK_BYTES],
                             const fa_secagg_member *members, size_t n_members,
                             const fa_secagg_rng *rng, fa_error *err);

/* ----------------------------------------------------------------------------
 * Server (the aggregator, one round attempt)
 *
 * Each fa_secagg_server_<message> takes the client id that mTLS
 * authenticated (`auth_id`) and refuses a message naming another client
 * (FA_ERR_AUTH), a client outside the federation (FA_ERR_AUTH), a duplicate
 * (FA_ERR_EXISTS), another round or attempt (FA_ERR_REPLAY), a message for
 * another phase (FA_ERR_STATE), bad sizes or contents (FA_ERR_PROTOCOL,
 * FA_ERR_PARSE) and bad signatures (FA_ERR_VERIFY).  The caller closes each
 * phase with fa_secagg_server_close() when its deadline passed or every
 * expected client answered (fa_secagg_server_status); closing with fewer than
 * t clients is refused with FA_ERR_THRESHOLD and changes nothing, after which
 * the caller may wait longer or abandon the attempt.
 * ------------------------------------------------------------------------- */
typedef struct fa_secagg_server fa_secagg_server;

enum fa_secagg_phase {
    FA_SECAGG_ADVERTISE = 0,   /* collecting AdvertiseKeys */
    FA_SECAGG_SHARES = 1,      /* collecting ShareKeys */
    FA_SECAGG_MASKED = 2,      /* collecting masked uploads */
    FA_SECAGG_CONSISTENCY = 3, /* collecting SignedSurvivors */
    FA_SECAGG_UNMASK = 4,      /* collecting UnmaskShares */
    FA_SECAGG_DONE = 5,        /* the sum is available */
    FA_SECAGG_FAILED = 6,      /* an internal failure (out of memory) spoilt the sum */
};

/* The phases a client takes part in, ADVERTISE .. UNMASK.  Their names,
 * indexed by enum fa_secagg_phase, are the last segment of each phase's
 * HTTP path (POST /v1/rounds/{r}/{a}/<name>) and its label in logs,
 * metrics, the admin documents and the dashboard: one table for all. */
#define FA_SECAGG_N_PHASES 5
extern const char *const fa_secagg_phase_names[FA_SECAGG_N_PHASES];

/* The name of phase: fa_secagg_phase_names[phase], "done", "failed", or "?"
 * for a value outside enum fa_secagg_phase. */
const char *fa_secagg_phase_name(int phase);

/* Creates the server of one round attempt.  members are the federation's
 * regions (copied).  Allocates the O(vector_len) running sum.
 * Returns 0, FA_ERR_INVAL or FA_ERR_NOMEM. */
int fa_secagg_server_new(fa_secagg_server **out, const fa_secagg_config *cfg,
                         const fa_secagg_member *members, size_t n_members, fa_error *err);
void fa_secagg_server_del(fa_secagg_server *s);

/* The next attempt's server in place of *s (NULL or a server of any
 * attempt): fa_secagg_server_del then fa_secagg_server_new, except that
 * the running sum's memory is kept when the vector length is the same, and
 * cleared.  Clearing 4 bytes a coordinate of memory already in use costs a
 * tenth of faulting fresh memory in (10^7 coordinates: 3 ms against 30-40
 * ms on the machines we measure on).  On failure *s is NULL; returns what
 * fa_secagg_server_new does. */
int fa_secagg_server_renew(fa_secagg_server **s, const fa_secagg_config *cfg,
                           const fa_secagg_member *members, size_t n_members, fa_error *err);

typedef struct fa_secagg_server_status {
    int phase;                /* enum fa_secagg_phase */
    uint32_t expected;        /* clients that may still answer in this phase */
    uint32_t received;        /* clients that answered (uploads completed) */
    uint32_t in_flight;       /* masked uploads begun and not ended */
    uint64_t phase_opened_ms; /* timestamp of the call that opened the phase */
} fa_secagg_server_status;

void fa_secagg_server_status_get(const fa_secagg_server *s, fa_secagg_server_status *st);

/* Round 0: an AdvertiseKeys. */
int fa_secagg_server_advertise(fa_secagg_server *s, const char *auth_id, const uint8_t *msg,
                               size_t len, uint64_t now_ms, fa_error *err);

/* Round 0: an AdvertiseKeys that replaces the one this client sent before,
 * while the advertise phase is open (a worker that restarted lost the keys
 * of its first one).  Nobody has seen the old keys yet: the PeerList goes out
 * when the phase closes.  Checked as fa_secagg_server_advertise checks (its
 * own old keys aside); refused (FA_ERR_STATE) when the client has not
 * advertised, and on any refusal the old advertisement stands. */
int fa_secagg_server_readvertise(fa_secagg_server *s, const char *auth_id, const uint8_t *msg,
                                 size_t len, uint64_t now_ms, fa_error *err);

/* Round 1: a ShareKeys: exactly one ciphertext of the right size for each
 * other client of U1 (each neighbour with SecAgg+), and nobody else. */
int fa_secagg_server_share_keys(fa_secagg_server *s, const char *auth_id, const uint8_t *msg,
                                size_t len, uint64_t now_ms, fa_error *err);

/* Round 2, streamed.  begin: the client must be in U2 with no upload in flight
 * or done; FA_ERR_AGAIN when max_uploads_in_flight uploads are in flight
 * (hold the stream under flow control and retry after an end or abort).
 * chunk: any split of the bytes; more bytes than the upload has is refused
 * (FA_ERR_TOOBIG).  end: refuses a short stream or nonzero padding bits
 * (FA_ERR_PROTOCOL; then abort).  abort: removes the partial upload from the
 * sum exactly, after which the client may begin again before the phase closes.
 *
 * Why the sum stays exact in O(d): chunks are added into the one running sum
 * as they arrive, and each upload in flight keeps a journal of the packed
 * bytes it added (k/8 bytes per coordinate).  An abort subtracts the journal
 * again; an end drops it.  The received prefix carries the client's input
 * under its self mask, which nobody but the client can recompute, so exact
 * removal needs those bytes: the journals are bounded by
 * max_uploads_in_flight, not by the number of clients, so memory is
 * 4*vector_len + max_uploads_in_flight * masked_bytes (at most), or
 * 4*vector_len alone when the caller keeps the journals elsewhere
 * (fa_secagg_server_set_journal). */
int fa_secagg_server_masked_begin(fa_secagg_server *s, const char *auth_id, uint64_t now_ms,
                                  fa_error *err);
int fa_secagg_server_masked_chunk(fa_secagg_server *s, const char *auth_id, const uint8_t *data,
                                  size_t len, uint64_t now_ms, fa_error *err);
int fa_secagg_server_masked_end(fa_secagg_server *s, const char *auth_id, uint64_t now_ms,
                                fa_error *err);
int fa_secagg_server_masked_abort(fa_secagg_server *s, const char *auth_id, uint64_t now_ms,
                                  fa_error *err);

/* Where the journals of the uploads in flight are kept.  By default the
 * server keeps them in memory (malloc'ed, masked_bytes per slot); a caller
 * with a large vector gives storage of its own (the aggregator: a file per
 * slot), so that its memory is the running sum alone whatever the number of
 * uploads in flight.  A slot is 0 .. max_uploads_in_flight - 1; its journal
 * is written from offset 0 in increasing, contiguous order, read back only
 * to remove an upload that broke off, and cleared when the upload ends or
 * is removed (then written again from 0 by the slot's next upload).
 *   write(ctx, slot, off, data, len)  stores data at [off, off + len)
 *   read(ctx, slot, off, buf, len)    reads [off, off + len) back (all of
 *                                     it written before)
 *   clear(ctx, slot)                  forgets the slot's bytes
 * write and read return 0 or a negative FA_ERR_* code with err filled.  A
 * chunk whose write fails is refused (nothing of it is summed: the caller
 * aborts the upload); a read that fails while an upload is removed spoils
 * the sum (phase FA_SECAGG_FAILED).  The server never does I/O itself. */
typedef struct fa_secagg_journal {
    int (*write)(void *ctx, uint32_t slot, uint64_t off, const uint8_t *data, size_t len,
                 fa_error *err);
    int (*read)(void *ctx, uint32_t slot, uint64_t off, uint8_t *buf, size_t len, fa_error *err);
    void (*clear)(void *ctx, uint32_t slot);
    void *ctx;
} fa_secagg_journal;

/* Uses j (copied; j->ctx must outlive s) for the journals from now on, or
 * the in-memory default again with j NULL.  Only while no upload is in
 * flight: FA_ERR_STATE otherwise. */
int fa_secagg_server_set_journal(fa_secagg_server *s, const fa_secagg_journal *j, fa_error *err);

/* Round 3: a SignedSurvivors: its signature over U3 and its upload
 * commitment (the SHA-256 must equal that of the bytes received). */
int fa_secagg_server_consistency(fa_secagg_server *s, const char *auth_id, const uint8_t *msg,
                                 size_t len, uint64_t now_ms, fa_error *err);
/* Round 4: an UnmaskShares: one b share for every survivor and one s_sk share
 * for every dropout of U2 (within the sender's neighbourhood), nothing else. */
int fa_secagg_server_unmask(fa_secagg_server *s, const char *auth_id, const uint8_t *msg,
                            size_t len, uint64_t now_ms, fa_error *err);

/* Closes the current phase: fixes U1 (advertise), U2 (shares), U3 (masked:
 * uploads still in flight are aborted and removed), U4 (consistency), or U5
 * (unmask: reconstructs b_u of every survivor and s_sk_v of every dropout,
 * checks them against their commitments and public keys, removes the masks
 * from the sum).  FA_ERR_THRESHOLD (unchanged) when fewer than t clients
 * answered or a secret has fewer than t shares; FA_ERR_VERIFY when a
 * secret cannot be rebuilt to match its commitment (too many bad shares:
 * one bad share is found and left out, fa_secagg_server_share_fault). */
int fa_secagg_server_close(fa_secagg_server *s, uint64_t now_ms, fa_error *err);

/* Messages the server sends (after the phase that makes them closed):
 * PeerList (after advertise), SharesForYou for one client of U2 (after
 * shares), SurvivorList (after masked), SurvivorSignatures (after
 * consistency).  FA_ERR_STATE before; FA_ERR_NOTFOUND for a client not in the
 * set the message is for. */
int fa_secagg_server_peer_list(const fa_secagg_server *s, uint8_t **out, size_t *out_len,
                               fa_error *err);
int fa_secagg_server_shares_for(const fa_secagg_server *s, const char *client_id, uint8_t **out,
                                size_t *out_len, fa_error *err);
int fa_secagg_server_survivor_list(const fa_secagg_server *s, uint8_t **out, size_t *out_len,
                                   fa_error *err);
int fa_secagg_server_survivor_signatures(const fa_secagg_server *s, uint8_t **out, size_t *out_len,
                                         fa_error *err);

/* The result (phase DONE).  result_ring: the vector_len ring elements of the
 * sum of the survivors' inputs, mod 2^k.  result_f32: decodes that sum with
 * cfg->quant: out[i] = (sum of w_u * x_u[i]) / (sum of w_u) for the d =
 * vector_len - 1 float coordinates; *weight_sum (may be NULL) receives the
 * decoded sum of the weights.  FA_ERR_RANGE when the weights sum to zero. */
int fa_secagg_server_result_ring(const fa_secagg_server *s, uint32_t *out, size_t n, fa_error *err);
int fa_secagg_server_result_f32(const fa_secagg_server *s, float *out, size_t d, double *weight_sum,
                                fa_error *err);
/* The same decode, of coordinates [off, off + n) of the d floats only (for
 * a caller that consumes the mean chunk by chunk: the same values as
 * result_f32's); result_weight: the decoded sum of the weights.
 * FA_ERR_STATE, FA_ERR_INVAL (range outside the d floats), FA_ERR_RANGE
 * (weights sum to zero). */
int fa_secagg_server_result_f32_range(const fa_secagg_server *s, uint64_t off, float *out, size_t n,
                                      fa_error *err);
int fa_secagg_server_result_weight(const fa_secagg_server *s, double *weight_sum, fa_error *err);

/* Decodes the result in place, once (phase DONE): the running sum becomes
 * the d floats of result_f32 (the same values), so that a caller reading
 * the mean several times, chunk by chunk, neither decodes it again nor
 * holds a second copy.  From then on result_f32_range reads those floats,
 * while result_ring and fa_secagg_server_save fail with FA_ERR_STATE (the
 * ring sum is gone; save_meta still works: it names the masked sum).
 * Returns 0, FA_ERR_STATE or FA_ERR_RANGE (weights sum to zero). */
int fa_secagg_server_decode_in_place(fa_secagg_server *s, double *weight_sum, fa_error *err);

/* The participants: clients of U3 (inputs in the sum) and the dropouts
 * (advertised, i.e. in U1, but not in U3), both sorted.  Valid from phase
 * CONSISTENCY on.  Pointers into s, valid until it changes. */
size_t fa_secagg_server_survivor_count(const fa_secagg_server *s);
const char *fa_secagg_server_survivor(const fa_secagg_server *s, size_t i);
size_t fa_secagg_server_dropout_count(const fa_secagg_server *s);
const char *fa_secagg_server_dropout(const fa_secagg_server *s, size_t i);

/* The clients whose revealed share (round 4) was found bad when the unmask
 * phase closed, in the order found (phase DONE; none before).  The round
 * completes without them: each secret is rebuilt from the shares that agree
 * with one another and with its commitment (b_u) or public key (s_sk_v),
 * and no share of a client found bad is used after.  Found so where at most
 * (m - t) / 2 of the m shares of one secret are bad, or one of t + 1; more
 * bad shares than that fail the close with FA_ERR_VERIFY as before, naming
 * no one.  A client found bad is a survivor (only U4 reveals shares): its
 * own input stays in the sum.  fa_secagg_server_share_fault gives the i-th:
 * the client, the client whose secret the share was of (owner: the first
 * one found; it may also be the owner who dealt inconsistent shares, which
 * the server cannot tell from one bad share), and which secret.  Returns 0
 * or FA_ERR_NOTFOUND; the pointers are into s. */
enum { FA_SECAGG_SHARE_SELF_MASK = 0, FA_SECAGG_SHARE_MASK_KEY = 1 };
size_t fa_secagg_server_share_fault_count(const fa_secagg_server *s);
int fa_secagg_server_share_fault(const fa_secagg_server *s, size_t i, const char **region,
                                 const char **owner, int *kind);

/* Upload commitment of survivor i (same order as fa_secagg_server_survivor):
 * the digest of the bytes the server received and its hash (*alg:
 * FA_SECAGG_UPLOAD_BLAKE3, or FA_SECAGG_UPLOAD_SHA256 for an upload in a
 * state an older version saved), and the client's signature
 * over it if the client sent its SignedSurvivors (*signed_ = 1), else
 * *signed_ = 0 and the signature is zeros. */
int fa_secagg_server_commitment(const fa_secagg_server *s, size_t i, const char **client_id,
                                int *alg, uint8_t digest[FA_SECAGG_DIGEST_BYTES],
                                uint8_t signature[FA_SECAGG_SIGNATURE_BYTES], int *signed_);

/* Crash recovery of the aggregator: the whole server as bytes (the running
 * sum included, so O(vector_len)), at any point with no upload in flight
 * (FA_ERR_STATE otherwise), e.g. at every phase close.  It holds no client
 * secret beyond the shares revealed in round 4, which exist to be combined.
 * fa_secagg_server_restore checks the blob (FA_ERR_CORRUPT) and the config
 * and members it was made with (FA_ERR_INVAL on a mismatch). */
int fa_secagg_server_save(const fa_secagg_server *s, uint8_t **out, size_t *out_len, fa_error *err);
int fa_secagg_server_restore(fa_secagg_server **out, const uint8_t *blob, size_t len,
                             const fa_secagg_config *cfg, const fa_secagg_member *members,
                             size_t n_members, fa_error *err);

/* The same, without the running sum, for a caller that keeps the sum
 * itself (an aggregator that writes 4 bytes per parameter only when they
 * changed, not at every phase close).  The sum changes only when its
 * generation does (fa_secagg_server_sum_generation: 0 = all zeros, as
 * created); fa_secagg_server_sum_words gives its vector_len words.
 * fa_secagg_server_save_meta says in *sum_generation which sum a restore
 * needs: the current one, except after unmasking (FA_SECAGG_DONE), where it
 * is the masked sum of the generation the masked phase closed with (the
 * caller saved it then), and fa_secagg_server_restore_meta unmasks it again
 * from the revealed shares in the state (the same result).  A state made
 * by fa_secagg_server_save names no generation the caller has: its DONE
 * state's masked sum is unknown (UINT64_MAX), so save it whole again.
 * restore_meta takes the sum (sum_len = vector_len words; NULL and 0 when
 * the generation is 0) and also reads fa_secagg_server_save's states. */
int fa_secagg_server_save_meta(const fa_secagg_server *s, uint8_t **out, size_t *out_len,
                               uint64_t *sum_generation, fa_error *err);
uint64_t fa_secagg_server_sum_generation(const fa_secagg_server *s);
const uint32_t *fa_secagg_server_sum_words(const fa_secagg_server *s);
int fa_secagg_server_restore_meta(fa_secagg_server **out, const uint8_t *blob, size_t len,
                                  const uint32_t *sum, uint64_t sum_len,
                                  const fa_secagg_config *cfg, const fa_secagg_member *members,
                                  size_t n_members, fa_error *err);
/* restore_meta for a caller that reads the sum from its own file straight
 * into the server's running sum (no second copy of 4 bytes per
 * coordinate): when the state needs a sum, fill(ctx, words, n, err) is
 * called once to write its n = vector_len words (0 or an FA_ERR_* code,
 * which restore returns). */
int fa_secagg_server_restore_meta_fill(
    fa_secagg_server **out, const uint8_t *blob, size_t len,
    int (*fill)(void *ctx, uint32_t *words, uint64_t n, fa_error *err), void *ctx,
    const fa_secagg_config *cfg, const fa_secagg_member *members, size_t n_members, fa_error *err);

#endif
