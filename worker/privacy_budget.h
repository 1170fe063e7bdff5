/* privacy_budget.h - a region's differential-privacy budget, which it
 * enforces itself (docs/privacy.md, "The region's budget").
 *
 * The region keeps its own RDP accountant (privacy/accountant.h: the
 * Poisson-sampled Gaussian of DP-SGD, default orders, the tight conversion)
 * over every round it ever releases an update of, at example level, and a
 * budget (epsilon, delta) from its config.  Before training a round the
 * worker asks what the round would cost (fa_privacy_budget_preview) and
 * does not train one that would take the total beyond the budget; after
 * training and before anything leaves, it charges the round
 * (fa_privacy_budget_charge), which refuses the same way, and persists the
 * state; then it signs a statement of what it spent (fedagg.proto
 * PrivacyStatement) for every attempt it uploads in.
 *
 * What is charged, and when: a released update, once.  The charge is bound
 * to the round, the model version it was trained from and a BLAKE2b digest
 * of the update's bytes: charging the same (round, version, digest) again
 * (a new attempt of the round, a restarted worker that resumed its finished
 * local round, which gives the same update bit for bit) spends nothing and
 * the statement keeps the same totals; a different update of the same
 * round (trained afresh after a restart, with fresh noise) is another
 * release and is charged again, since the first may have left in an
 * earlier attempt.  Training that is never released (a round stopped and
 * resumed, a round refused) costs nothing.
 *
 * Persistence (the caller's I/O): fa_privacy_budget_seal gives the state as
 * bytes, sealed with XChaCha20-Poly1305 under a key derived from the
 * region's Ed25519 identity seed (libsodium crypto_kdf, context "faprivac",
 * subkey 1), the federation and region in the clear but authenticated;
 * fa_privacy_budget_open refuses bytes that were altered, sealed under
 * another key or for another region or federation.  Nothing in it is
 * secret (it is sealed so that it cannot be edited, e.g. reset), but the
 * key is.  The aggregator cannot reset it: it is the region's own file,
 * and the totals the region signed are in the audit log, where
 * `fedagg audit verify` flags an epsilon that falls.
 *
 * A shared accountant: the region agent keeps one per dataset of its
 * policy (worker/agent_core.h), owned by "dataset:<name>" rather than by a
 * federation, and every federation that trains on the dataset spends from
 * it (the _for functions): the composition is over every release of every
 * federation, in the order charged, so the round that would take the
 * dataset beyond its budget is refused in whichever federation asks; each
 * federation's last release is kept for its own deduplication and
 * statements.
 *
 * Sans-I/O, no clocks; randomness only for the seal's nonce (libsodium).
 * Not thread-safe.
 */
#ifndef FA_WORKER_PRIVACY_BUDGET_H
#define FA_WORKER_PRIVACY_BUDGET_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "fedagg.pb-c.h"

/* The state's file in the worker's state directory. */
#define FA_PRIVACY_BUDGET_FILE "privacy-accountant"
/* The mechanisms accounted: DP-SGD's Poisson-sampled Gaussian (example
 * level), and the federation's distributed discrete Gaussian on the
 * secure sum (worker/ddp.h: one round per update, region level). */
#define FA_PRIVACY_MECHANISM_DPSGD "dp-sgd"
#define FA_PRIVACY_MECHANISM_DDG "ddg"
/* The accountant, as statements name it. */
#define FA_PRIVACY_ACCOUNTANT_NAME "rdp-sgm/tight-conversion"
#define FA_PRIVACY_ACCOUNTANT_NAME_DDG "rdp-ddg/tight-conversion"
#define FA_PRIVACY_MECHANISM_MAX 32

typedef struct fa_privacy_budget fa_privacy_budget;

/* One round's mechanism: `steps` steps of the sampled Gaussian with
 * sampling rate q and noise multiplier sigma (noise sigma * clip on a sum of
 * gradients clipped to clip). */
typedef struct fa_privacy_spend {
    char mechanism[FA_PRIVACY_MECHANISM_MAX]; /* FA_PRIVACY_MECHANISM_DPSGD or _DDG */
    double noise_multiplier;                  /* sigma > 0 (DDG: z, stated) */
    double clip;                              /* > 0 (stated; the accounting is in its units) */
    double sampling_rate;                     /* q in (0, 1] (DDG: 1) */
    uint64_t steps;                           /* >= 1 (DDG: 1 round) */
    /* DDG only (privacy/accountant.h fa_rdp_ddg_params, integer units):
     * the L2 sensitivity B, each region's sigma2, the regions whose noise
     * is charged, the rotated dimension. */
    double ddg_l2_sens, ddg_sigma2;
    uint32_t ddg_regions;
    uint64_t ddg_dim;
} fa_privacy_spend;

/* The last round released: what the statements say. */
typedef struct fa_privacy_release {
    uint64_t round, version;
    uint8_t digest[32]; /* BLAKE2b-256 of the update's bytes */
    fa_privacy_spend spend;
    double epsilon_round; /* the round alone, at the budget's delta */
    double epsilon_total; /* everything released so far, this round included */
} fa_privacy_release;

/* A new, empty accountant for region of federation with budget
 * (epsilon, delta): epsilon > 0 finite, delta in (0, 1).  Returns 0,
 * FA_ERR_INVAL (the budget, an empty id) or FA_ERR_NOMEM. */
int fa_privacy_budget_new(fa_privacy_budget **out, const char *federation, const char *region,
                          double epsilon, double delta, fa_error *err);

/* NULL is a no-op. */
void fa_privacy_budget_del(fa_privacy_budget *b);

/* The state sealed under identity_seed (32 bytes): *out malloc'ed (free()).
 * Returns 0, FA_ERR_NOMEM or FA_ERR_CRYPTO. */
int fa_privacy_budget_seal(const fa_privacy_budget *b, const uint8_t identity_seed[32],
                           uint8_t **out, size_t *out_len, fa_error *err);

/* Opens a sealed state of region of federation with the budget (epsilon,
 * delta) of the current config (the spending is the state's; the budget is
 * the config's).  Returns 0, FA_ERR_CORRUPT (not a sealed accountant, or
 * malformed inside), FA_ERR_VERIFY (it does not open with this identity key:
 * altered, or sealed under another key), FA_ERR_INVAL (sealed for another
 * region or federation; a bad budget) or FA_ERR_NOMEM.  The messages say
 * what, and that the accountant is never reset. */
int fa_privacy_budget_open(fa_privacy_budget **out, const char *federation, const char *region,
                           double epsilon, double delta, const uint8_t *sealed, size_t len,
                           const uint8_t identity_seed[32], fa_error *err);

/* What a round with sp would cost: *eps_round alone, *eps_total with what
 * is spent (both at the budget's delta; either pointer may be NULL).
 * Returns 0, FA_ERR_INVAL (sp out of range: the message names the field) or
 * FA_ERR_RANGE (the total would exceed the budget; both values are still
 * filled, and the message has the numbers). */
int fa_privacy_budget_preview(const fa_privacy_budget *b, const fa_privacy_spend *sp,
                              double *eps_round, double *eps_total, fa_error *err);

/* Charges the release of round's update (trained from version; digest of
 * its bytes) for sp.  The same (round, version, digest) as the last release
 * charges nothing (*charged = 0).  Otherwise the round is composed and
 * becomes the last release (*charged = 1).  charged may be NULL.  Returns
 * 0, FA_ERR_INVAL or FA_ERR_RANGE (beyond the budget: nothing changes). */
int fa_privacy_budget_charge(fa_privacy_budget *b, const fa_privacy_spend *sp, uint64_t round,
                             uint64_t version, const uint8_t digest[32], int *charged,
                             fa_error *err);

/* The same for a release of `federation` on a shared accountant: its last
 * release is the one compared and replaced (NULL or the owner's id: as
 * fa_privacy_budget_charge).  Returns 0, FA_ERR_INVAL (sp; an id longer
 * than 127 bytes), FA_ERR_RANGE or FA_ERR_NOMEM. */
int fa_privacy_budget_charge_for(fa_privacy_budget *b, const char *federation,
                                 const fa_privacy_spend *sp, uint64_t round, uint64_t version,
                                 const uint8_t digest[32], int *charged, fa_error *err);

/* Whether (round, version, digest) is the last release. */
int fa_privacy_budget_is_last(const fa_privacy_budget *b, uint64_t round, uint64_t version,
                              const uint8_t digest[32]);

/* The last release, or NULL when none. */
const fa_privacy_release *fa_privacy_budget_last(const fa_privacy_budget *b);

/* The last release of `federation` (NULL: the owner's), or NULL when none.
 * Its epsilon_total is the accountant's total when it was charged. */
const fa_privacy_release *fa_privacy_budget_last_for(const fa_privacy_budget *b,
                                                     const char *federation);

/* Spent so far, at the budget's delta (0 when nothing was released). */
double fa_privacy_budget_epsilon(const fa_privacy_budget *b);
double fa_privacy_budget_target_epsilon(const fa_privacy_budget *b);
double fa_privacy_budget_delta(const fa_privacy_budget *b);
/* Rounds released (charged) so far. */
uint64_t fa_privacy_budget_rounds(const fa_privacy_budget *b);
/* Noisy steps composed so far. */
uint64_t fa_privacy_budget_steps(const fa_privacy_budget *b);

/* The statement of the last release for attempt `attempt` of its round:
 * every field of st (fedagg__privacy_statement__init is called), strings
 * pointing into b (valid while b is unchanged).  Returns 0, or FA_ERR_STATE
 * when the last release is not of round (or there is none). */
int fa_privacy_budget_statement(const fa_privacy_budget *b, uint64_t round, uint32_t attempt,
                                Fedagg__PrivacyStatement *st, fa_error *err);

/* The statement of the last release of `federation` (NULL: the owner's),
 * whose id it carries (the string is federation itself). */
int fa_privacy_budget_statement_for(const fa_privacy_budget *b, const char *federation,
                                    uint64_t round, uint32_t attempt,
                                    Fedagg__PrivacyStatement *st, fa_error *err);

/* BLAKE2b-256 of an update's bytes, the digest the charge is bound to. */
void fa_privacy_budget_digest(const void *update, size_t len, uint8_t digest[32]);

#endif
