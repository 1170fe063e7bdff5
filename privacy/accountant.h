/* accountant.h - Renyi differential privacy (RDP) accounting for the
 * Poisson-sampled Gaussian mechanism and the distributed discrete Gaussian,
 * and its conversion to (epsilon, delta).
 *
 * What is computed
 *
 *   The sampled Gaussian mechanism (SGM) adds N(0, sigma^2 I) to a sum of
 *   records clipped to L2 norm 1, each record in the sum independently with
 *   probability q.  Its RDP at order alpha > 1 under add/remove-one adjacency
 *   is log(A_alpha) / (alpha - 1) with
 *       A_alpha = E_{z ~ N(0, s^2)} [((1 - q) + q exp((2z - 1) / (2 s^2)))^alpha]
 *   (Mironov, Talwar, Zhang 2019, "Renyi Differential Privacy of the Sampled
 *   Gaussian Mechanism", arXiv:1908.10530, Section 3.3): the finite binomial
 *   sum for integer alpha, and for fractional alpha the two convergent series
 *   split at z0 = s^2 log(1/q - 1) + 1/2, both evaluated in log space
 *   (log-sum-exp, log binomials by running products, log erfc with its
 *   asymptotic expansion in the far tail).  q = 1 is the Gaussian mechanism,
 *   alpha / (2 sigma^2); q = 0 is 0; sigma = 0 is +inf.
 *
 *   RDP composes by addition at every order (Mironov 2017, Proposition 1), so
 *   an accountant is a vector of orders and a vector of running totals.
 *
 *   (epsilon, delta) from RDP, minimised over the orders:
 *     FA_RDP_CONVERSION_TIGHT   epsilon = rdp + log((alpha-1)/alpha)
 *                                         - (log delta + log alpha)/(alpha-1)
 *         Balle, Barthe, Gaboardi, Hsu, Sato 2020 (AISTATS, Theorem 21 of
 *         arXiv:1905.09982) = Canonne, Kamath, Steinke 2020 (arXiv:2004.00010,
 *         Proposition 12 of v4), used for alpha > 1.01 only (it is unstable as
 *         alpha -> 1), together with the bound delta <= sqrt(1 - exp(-rdp))
 *         (Bretagnolle-Huber, as rdp at any order >= 1 bounds the KL
 *         divergence), which gives epsilon = 0 when delta is large enough.
 *     FA_RDP_CONVERSION_CLASSIC epsilon = rdp + log(1/delta)/(alpha-1)
 *         (Mironov 2017, "Renyi Differential Privacy", Proposition 3), kept
 *         for comparison with published figures that used it.
 *   The returned epsilon is never below 0.
 *
 * Limits
 *   - Poisson sampling with add/remove-one adjacency only (not sampling
 *     without replacement, not replace-one).
 *   - Orders must be > 1 (an order of exactly 1 is accepted for q = 1 and
 *     q = 0, where the closed forms hold, and reported as +inf otherwise) and
 *     at most FA_RDP_MAX_ORDER; +inf is accepted and gives +inf.
 *   - The fractional series is summed until its terms fall below e^-30 of the
 *     total and decrease (the tail then alternates in sign, so the error is at
 *     most the first omitted term); if that does not happen within
 *     FA_RDP_MAX_SERIES_TERMS terms, or cancellation makes the sum unusable,
 *     that order's RDP is +inf: the conversion then ignores the order, which
 *     is safe (a larger epsilon), never optimistic.
 *
 * Everything here is a pure function of its arguments or of the accountant
 * object: no I/O, no clocks, no randomness, no global state.  Functions
 * return 0 or a negative FA_ERR_* code (common/fa_err.h) and, when `err` is
 * not NULL, describe what was wrong (which argument, which order).  A call
 * that fails leaves the accountant unchanged.
 */
#ifndef FA_PRIVACY_ACCOUNTANT_H
#define FA_PRIVACY_ACCOUNTANT_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"

#define FA_RDP_MAX_ORDERS 65536        /* orders of one accountant */
#define FA_RDP_MAX_ORDER 1e6           /* largest finite order computed for 0 < q < 1 */
#define FA_RDP_MAX_SERIES_TERMS 100000 /* terms of the fractional-order series */

enum fa_rdp_conversion {
    FA_RDP_CONVERSION_TIGHT = 0,   /* Balle et al. 2020 / Canonne, Kamath, Steinke 2020 */
    FA_RDP_CONVERSION_CLASSIC = 1, /* Mironov 2017, Proposition 3 */
};

/* The default orders: the set of TF Privacy's compute_dp_sgd_privacy_lib and
 * dp_accounting users, 1.25, 1.5, 1.75, 2, 2.25, 2.5, 3, 3.5, 4, 4.5,
 * 5, 6, ..., 63, 128, 256, 512 (72 orders, increasing).  Sets *orders to a
 * static constant array and returns its length. */
size_t fa_rdp_default_orders(const double **orders);

/* ----------------------------------------------------------------------------
 * The sampled Gaussian mechanism
 * ------------------------------------------------------------------------- */

/* log(A_alpha) of one step (see above) for 0 < q < 1, sigma > 0, finite
 * alpha >= 1 (integer alpha: the binomial sum; otherwise the series of
 * Section 3.3).  *log_a = +inf when the series did not converge.
 * Returns 0 or FA_ERR_INVAL (q outside (0, 1), sigma <= 0, alpha < 1, not
 * finite or above FA_RDP_MAX_ORDER). */
int fa_rdp_sgm_log_a(double q, double sigma, double alpha, double *log_a);

/* RDP of one step of the SGM with sampling rate q in [0, 1] and noise
 * multiplier sigma >= 0 at each of the n orders: rdp[i] for orders[i].
 * Returns 0 or FA_ERR_INVAL (q or sigma out of range or NaN, an order < 1 or
 * NaN: the index is named). */
int fa_rdp_sgm(double q, double sigma, const double *orders, size_t n, double *rdp, fa_error *err);

/* ----------------------------------------------------------------------------
 * The distributed discrete Gaussian (Kairouz, Liu, Steinke, ICML 2021, "The
 * Distributed Discrete Gaussian Mechanism for Federated Learning with Secure
 * Aggregation", arXiv:2102.06387): n regions each add N_Z(0, sigma2)^d to
 * integer vectors whose difference between neighbouring inputs has L2 norm at
 * most l2_sens and L1 norm at most l1_sens; the server sees only the sum.
 * With tau = 10 * sum_{k=1}^{n-1} exp(-2 pi^2 sigma2 k / (k + 1)) (Theorem 1)
 * and s2 = l2_sens / sqrt(n sigma2), s1 = l1_sens / sqrt(n sigma2), the RDP at
 * order alpha is (Proposition 14)
 *   min( alpha/2 s2^2 + tau d,
 *        alpha/2 (s2^2 + 2 s1 tau + tau^2 d),
 *        alpha/2 (s2 + sqrt(d) tau)^2 ).
 * There is no sampling amplification here (every selected region takes part;
 * q = 1).  The formula is the one google-research/federated applies
 * (distributed_dp/accounting_utils.py, compute_rdp_dgaussian with q = 1); the
 * side conditions of the paper's Theorem 1 on sigma2 and n are not checked
 * here: keep sigma2 >= 1 (integer units), where tau is tiny anyway.  The integer units are those
 * after scaling and rounding (privacy/rotation_internal.h gives l2_sens as
 * fa_rotation_rounded_bound).
 * ------------------------------------------------------------------------- */
typedef struct fa_rdp_ddg_params {
    double l2_sens;     /* > 0, in integer units */
    double l1_sens;     /* >= 0; 0 = l2_sens * min(sqrt(d), l2_sens) (integer vectors) */
    double sigma2;      /* each region's discrete Gaussian parameter, > 0, integer units */
    uint32_t n_regions; /* >= 1: regions whose noise is in the sum */
    uint64_t dim;       /* d >= 1, padded dimension */
} fa_rdp_ddg_params;

/* tau of Theorem 1 (0 for one region). */
double fa_rdp_ddg_tau(double sigma2, uint32_t n_regions);

/* RDP of one round of the distributed discrete Gaussian at each order
 * (orders > 1).  Returns 0 or FA_ERR_INVAL. */
int fa_rdp_ddg(const fa_rdp_ddg_params *p, const double *orders, size_t n, double *rdp,
               fa_error *err);

/* ----------------------------------------------------------------------------
 * Conversion to (epsilon, delta)
 * ------------------------------------------------------------------------- */

/* The smallest epsilon over the orders such that the mechanism with RDP
 * rdp[i] at orders[i] is (epsilon, delta)-DP; *order (may be NULL) gets the
 * order that attains it (the first on ties; 0 when delta = 0).  delta in
 * [0, 1]; delta = 0 gives +inf unless every rdp is 0.  +inf when no order gives a finite bound.
 * Orders >= 1, rdp >= 0 or +inf (a negative rdp from rounding counts as 0). Returns 0 or
 * FA_ERR_INVAL (delta, conversion, an order or rdp NaN). */
int fa_rdp_epsilon(const double *orders, const double *rdp, size_t n, double delta, int conversion,
                   double *epsilon, double *order, fa_error *err);

/* The smallest delta over the orders for a given epsilon >= 0; at most 1.
 * Returns 0 or FA_ERR_INVAL. */
int fa_rdp_delta(const double *orders, const double *rdp, size_t n, double epsilon, int conversion,
                 double *delta, double *order, fa_error *err);

/* ----------------------------------------------------------------------------
 * The accountant: a fixed vector of orders and the RDP spent at each.
 * ------------------------------------------------------------------------- */
typedef struct fa_rdp_accountant fa_rdp_accountant;

/* A new accountant with nothing spent.  orders (copied) must be distinct,
 * >= 1 and finite or +inf; they are kept sorted increasingly.  orders = NULL
 * (n = 0) selects fa_rdp_default_orders.  Returns 0, FA_ERR_INVAL (an order
 * out of range, a duplicate, more than FA_RDP_MAX_ORDERS) or FA_ERR_NOMEM. */
int fa_rdp_accountant_new(fa_rdp_accountant **out, const double *orders, size_t n, fa_error *err);

/* Frees the accountant.  NULL is a no-op. */
void fa_rdp_accountant_del(fa_rdp_accountant *a);

/* Composes `steps` steps of the SGM (q, sigma).  Steps with different q or
 * sigma are composed by calling this once for each (q, sigma).  steps = 0
 * changes nothing but is still counted as an event.  Returns 0 or
 * FA_ERR_INVAL (q, sigma out of range). */
int fa_rdp_accountant_compose_sgm(fa_rdp_accountant *a, double q, double sigma, uint64_t steps,
                                  fa_error *err);

/* Composes `count` rounds of the distributed discrete Gaussian. */
int fa_rdp_accountant_compose_ddg(fa_rdp_accountant *a, const fa_rdp_ddg_params *p, uint64_t count,
                                  fa_error *err);

/* Composes `count` times a mechanism whose RDP at the accountant's orders
 * (in the order fa_rdp_accountant_orders returns them) is rdp[0..n).
 * Returns 0 or FA_ERR_INVAL (n differs from the accountant's, a value NaN or
 * negative). */
int fa_rdp_accountant_compose_rdp(fa_rdp_accountant *a, const double *rdp, size_t n, uint64_t count,
                                  fa_error *err);

/* The accountant's sorted orders and the RDP spent at each (pointers into a,
 * valid until it changes); returns their number. */
size_t fa_rdp_accountant_orders(const fa_rdp_accountant *a, const double **orders,
                                const double **rdp);

/* Number of compose calls, and total SGM steps plus DDG rounds composed
 * (saturating at UINT64_MAX). */
uint64_t fa_rdp_accountant_events(const fa_rdp_accountant *a);
uint64_t fa_rdp_accountant_steps(const fa_rdp_accountant *a);

/* fa_rdp_epsilon / fa_rdp_delta of what the accountant has spent. */
int fa_rdp_accountant_epsilon(const fa_rdp_accountant *a, double delta, int conversion,
                              double *epsilon, double *order, fa_error *err);
int fa_rdp_accountant_delta(const fa_rdp_accountant *a, double epsilon, int conversion,
                            double *delta, double *order, fa_error *err);

/* The budget questions, on top of what the accountant has already spent.
 *
 * max_steps: the largest number of further SGM steps (q, sigma) after which
 * the accountant is still (epsilon, delta)-DP; UINT64_MAX when any number of
 * steps is (q = 0).  Binary search on the step count (epsilon grows with the
 * steps).  Returns 0, FA_ERR_RANGE (the budget is already exceeded: *steps =
 * 0) or FA_ERR_INVAL.
 *
 * min_noise: the smallest noise multiplier sigma such that `steps` further
 * steps at rate q keep (epsilon, delta), to within a relative tolerance
 * rel_tol (0 = 1e-6): the returned sigma itself satisfies the budget, and
 * sigma * (1 - rel_tol) may or may not.  Binary search (epsilon decreases as
 * sigma grows).  Returns 0, FA_ERR_RANGE (no sigma up to 1e6 suffices: the
 * budget is already spent or too small) or FA_ERR_INVAL. */
int fa_rdp_accountant_max_steps(const fa_rdp_accountant *a, double q, double sigma, double epsilon,
                                double delta, int conversion, uint64_t *steps, fa_error *err);
int fa_rdp_accountant_min_noise(const fa_rdp_accountant *a, double q, uint64_t steps,
                                double epsilon, double delta, int conversion, double rel_tol,
                                double *sigma, fa_error *err);

/* Serialisation, exact to the bit (the doubles are stored as their IEEE 754
 * bit patterns, little-endian):
 *   "FARDPv1\0" | u32 n | u32 0 | u64 events | u64 steps |
 *   n x (f64 order, f64 rdp) | BLAKE2b-256 of everything before it.
 * save: *out is malloc'ed (free()).  Returns 0 or FA_ERR_NOMEM.
 * restore: Returns 0, FA_ERR_CORRUPT (wrong size, magic, checksum, or
 * orders/values that new would refuse) or FA_ERR_NOMEM. */
int fa_rdp_accountant_save(const fa_rdp_accountant *a, uint8_t **out, size_t *out_len,
                           fa_error *err);
int fa_rdp_accountant_restore(fa_rdp_accountant **out, const uint8_t *buf, size_t len,
                              fa_error *err);

#endif
