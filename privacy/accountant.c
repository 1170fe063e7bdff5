/* accountant.c - RDP of the sampled Gaussian mechanism and of the distributed
 * discrete Gaussian, composition, conversion to (epsilon, delta), budgets.
 * The mathematics and its sources are stated in accountant.h. */
#include "privacy/accountant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "common/fa_endian.h"

#define LOG_SQRT_PI 0.57236494292470008707 /* log(pi) / 2 */
#define LN_HALF (-0.69314718055994530942)
#define PI 3.14159265358979323846
#define TIGHT_MIN_ORDER 1.01 /* the tight conversion is unstable as alpha -> 1 */
#define MIN_NOISE_MAX_SIGMA 1e6

static const double default_orders[] = {
    1.25, 1.5, 1.75, 2,  2.25, 2.5, 3,  3.5, 4,  4.5, 5,  6,  7,  8,  9,  10,  11,  12,
    13,   14,  15,   16, 17,   18,  19, 20,  21, 22,  23, 24, 25, 26, 27, 28,  29,  30,
    31,   32,  33,   34, 35,   36,  37, 38,  39, 40,  41, 42, 43, 44, 45, 46,  47,  48,
    49,   50,  51,   52, 53,   54,  55, 56,  57, 58,  59, 60, 61, 62, 63, 128, 256, 512,
};

size_t fa_rdp_default_orders(const double **orders)
{
    *orders = default_orders;
    return sizeof(default_orders) / sizeof(default_orders[0]);
}

/* ---- log-space arithmetic ------------------------------------------------ */

/* A running log-sum-exp: the value is m + log(s), s in [1, terms]; empty is
 * s == 0 (the value -inf). */
typedef struct lse {
    double m, s;
} lse;

static void lse_add(lse *a, double t)
{
    if (t == -INFINITY)
        return;
    if (a->s == 0) {
        a->m = t;
        a->s = 1;
    } else if (t <= a->m) {
        a->s += exp(t - a->m);
    } else {
        a->s = a->s * exp(a->m - t) + 1;
        a->m = t;
    }
}

static double lse_value(const lse *a)
{
    return a->s == 0 ? -INFINITY : a->m + log(a->s);
}

/* log(erfc(x)), accurate in the far right tail where erfc underflows:
 * erfc(x) = exp(-x^2) / (x sqrt(pi)) * (1 - 1/(2x^2) + 3/(2x^2)^2 - 15/(2x^2)^3
 * + ...), truncated after the 1/x^10 term (relative error < 1e-13 for x >= 26;
 * glibc's erfc is itself accurate to a few ulp below that). */
static double log_erfc(double x)
{
    if (x < 26.0)
        return log(erfc(x));
    double x2 = x * x, r = 1.0 / (2.0 * x2);
    double s = 1.0 - r * (1.0 - 3.0 * r * (1.0 - 5.0 * r * (1.0 - 7.0 * r * (1.0 - 9.0 * r))));
    return -x2 - log(x) - LOG_SQRT_PI + log(s);
}

static int is_integer(double a)
{
    return a == floor(a) && a <= 9007199254740992.0; /* 2^53 */
}

/* ---- the sampled Gaussian mechanism (Mironov, Talwar, Zhang 2019, 3.3) --- */

/* Integer alpha: A = sum_{k=0}^{alpha} C(alpha,k) (1-q)^(alpha-k) q^k
 * exp((k^2 - k) / (2 sigma^2)).  log C(alpha, k) by the running product
 * C(alpha, k) = C(alpha, k-1) (alpha - k + 1) / k. */
static double log_a_int(double q, double sigma, double alpha)
{
    double lq = log(q), l1q = log1p(-q), inv = 1.0 / (2.0 * sigma * sigma), lc = 0.0;
    lse acc = {-INFINITY, 0.0};
    for (double k = 0; k <= alpha; k += 1.0) {
        if (k > 0)
            lc += log(alpha - k + 1.0) - log(k);
        lse_add(&acc, lc + k * lq + (alpha - k) * l1q + k * (k - 1.0) * inv);
    }
    return lse_value(&acc);
}

/* Fractional alpha: A = A0 + A1, the integral over z <= z0 expanded in powers
 * of q exp((2z-1)/(2 sigma^2)) / (1 - q) < 1 and the one over z > z0 in the
 * inverse ratio:
 *   A0 = sum_i C(alpha,i) q^i (1-q)^(alpha-i) exp((i^2-i)/(2s^2)) erfc((i - z0)/(sqrt2 s))/2
 *   A1 = sum_i C(alpha,i) q^(alpha-i) (1-q)^i exp((j^2-j)/(2s^2)) erfc((z0 - j)/(sqrt2 s))/2,
 * j = alpha - i.  C(alpha, i) changes sign for i > alpha, so the positive and
 * the negative terms are summed apart in log space and subtracted once. */
static double log_a_frac(double q, double sigma, double alpha)
{
    double lq = log(q), l1q = log1p(-q), s2 = sigma * sigma, inv = 1.0 / (2.0 * s2);
    double z0 = s2 * (l1q - lq) + 0.5, rs = 1.0 / (sqrt(2.0) * sigma);
    double lc = 0.0, last0 = INFINITY, last1 = INFINITY;
    int sign = 1, converged = 0;
    lse pos = {-INFINITY, 0.0}, neg = {-INFINITY, 0.0};
    for (long i = 0; i < FA_RDP_MAX_SERIES_TERMS; i++) {
        double fi = (double)i, j = alpha - fi;
        double ls0 =
            lc + fi * lq + j * l1q + fi * (fi - 1.0) * inv + LN_HALF + log_erfc((fi - z0) * rs);
        double ls1 =
            lc + j * lq + fi * l1q + j * (j - 1.0) * inv + LN_HALF + log_erfc((z0 - j) * rs);
        lse *acc = sign > 0 ? &pos : &neg;
        lse_add(acc, ls0);
        lse_add(acc, ls1);
        if (ls0 < last0 && ls1 < last1 && fmax(ls0, ls1) < lse_value(&pos) - 30.0) {
            converged = 1;
            break;
        }
        last0 = ls0;
        last1 = ls1;
        double f = alpha - fi; /* C(alpha, i+1) = C(alpha, i) (alpha - i) / (i + 1) */
        if (f == 0.0) {        /* an integer alpha: every further term is 0 */
            converged = 1;
            break;
        }
        lc += log(fabs(f)) - log(fi + 1.0);
        if (f < 0)
            sign = -sign;
    }
    double p = lse_value(&pos), n = lse_value(&neg);
    if (!converged || !(n < p))
        return INFINITY;
    return p + log1p(-exp(n - p));
}

int fa_rdp_sgm_log_a(double q, double sigma, double alpha, double *log_a)
{
    if (!(q > 0 && q < 1) || !(sigma > 0) || !isfinite(sigma) || !(alpha >= 1) ||
        !(alpha <= FA_RDP_MAX_ORDER))
        return FA_ERR_INVAL;
    *log_a = is_integer(alpha) ? log_a_int(q, sigma, alpha) : log_a_frac(q, sigma, alpha);
    return 0;
}

/* The special cases in the order that makes each one right: no record is
 * ever sampled (q = 0) beats no noise; infinite noise is no information. */
static double sgm_rdp_one(double q, double sigma, double alpha)
{
    double log_a;
    if (q == 0 || isinf(sigma))
        return 0.0;
    if (sigma == 0 || isinf(alpha))
        return INFINITY;
    if (q == 1)
        return alpha / (2.0 * sigma * sigma);
    if (alpha == 1 || alpha > FA_RDP_MAX_ORDER)
        return INFINITY;
    fa_rdp_sgm_log_a(q, sigma, alpha, &log_a);
    return log_a / (alpha - 1.0);
}

static int check_orders(const double *orders, size_t n, double min, fa_error *err)
{
    if (n > 0 && !orders)
        return fa_errorf(err, FA_ERR_INVAL, "orders is NULL with n = %zu", n);
    for (size_t i = 0; i < n; i++)
        if (!(orders[i] >= min))
            return fa_errorf(err, FA_ERR_INVAL, "orders[%zu] = %g: an RDP order must be >= %g", i,
                             orders[i], min);
    return 0;
}

int fa_rdp_sgm(double q, double sigma, const double *orders, size_t n, double *rdp, fa_error *err)
{
    int rc;
    if (!(q >= 0 && q <= 1))
        return fa_errorf(err, FA_ERR_INVAL, "sampling rate q = %g is outside [0, 1]", q);
    if (!(sigma >= 0))
        return fa_errorf(err, FA_ERR_INVAL, "noise multiplier sigma = %g is negative or NaN",
                         sigma);
    if ((rc = check_orders(orders, n, 1.0, err)) != 0)
        return rc;
    for (size_t i = 0; i < n; i++)
        rdp[i] = sgm_rdp_one(q, sigma, orders[i]);
    return 0;
}

/* ---- the distributed discrete Gaussian (Kairouz, Liu, Steinke 2021) ------ */

double fa_rdp_ddg_tau(double sigma2, uint32_t n_regions)
{
    double tau = 0.0;
    /* The terms fall with k, from exp(-pi^2 sigma2) towards exp(-2 pi^2 sigma2). */
    if (n_regions < 2 || exp(-PI * PI * sigma2) == 0.0)
        return 0.0;
    for (uint32_t k = 1; k < n_regions; k++)
        tau += exp(-2.0 * PI * PI * sigma2 * ((double)k / (double)(k + 1)));
    return 10.0 * tau;
}

int fa_rdp_ddg(const fa_rdp_ddg_params *p, const double *orders, size_t n, double *rdp,
               fa_error *err)
{
    int rc;
    if (!p || !(p->l2_sens > 0) || !isfinite(p->l2_sens) || !(p->l1_sens >= 0) ||
        !isfinite(p->l1_sens) || !(p->sigma2 > 0) || !isfinite(p->sigma2) || p->n_regions == 0 ||
        p->dim == 0)
        return fa_errorf(err, FA_ERR_INVAL,
                         "distributed discrete Gaussian: l2_sens > 0, l1_sens >= 0, sigma2 > 0 "
                         "(all finite), n_regions >= 1 and dim >= 1 are needed");
    if ((rc = check_orders(orders, n, 1.0, err)) != 0)
        return rc;
    double d = (double)p->dim, tau = fa_rdp_ddg_tau(p->sigma2, p->n_regions);
    double l1 = p->l1_sens > 0 ? p->l1_sens : p->l2_sens * fmin(sqrt(d), p->l2_sens);
    double scale = sqrt((double)p->n_regions * p->sigma2);
    double s2 = p->l2_sens / scale, s1 = l1 / scale;
    for (size_t i = 0; i < n; i++) {
        double a = orders[i];
        if (a == 1 || isinf(a)) {
            rdp[i] = INFINITY;
            continue;
        }
        double t1 = a / 2.0 * s2 * s2 + tau * d;
        double t2 = a / 2.0 * (s2 * s2 + 2.0 * s1 * tau + tau * tau * d);
        double t3 = a / 2.0 * (s2 + sqrt(d) * tau) * (s2 + sqrt(d) * tau);
        rdp[i] = fmin(t1, fmin(t2, t3));
    }
    return 0;
}

/* ---- conversion ------------------------------------------------------------ */

static double eps_one(double a, double r, double delta, int conversion)
{
    if (isinf(r))
        return INFINITY;
    if (r < 0) /* rounding below an exact 0 */
        r = 0;
    if (conversion == FA_RDP_CONVERSION_CLASSIC) {
        if (isinf(a))
            return r;
        return a > 1 ? r - log(delta) / (a - 1.0) : INFINITY;
    }
    /* delta >= sqrt(1 - exp(-KL)) >= total variation: (0, delta)-DP */
    if (delta * delta + expm1(-r) > 0)
        return 0.0;
    if (isinf(a))
        return r;
    if (a > TIGHT_MIN_ORDER)
        return r + log1p(-1.0 / a) - (log(delta) + log(a)) / (a - 1.0);
    return INFINITY;
}

static double log_delta_one(double a, double r, double eps, int conversion)
{
    if (r < 0)
        r = 0;
    if (conversion == FA_RDP_CONVERSION_CLASSIC) {
        if (isinf(r) || a == 1)
            return 0.0;
        if (isinf(a))
            return r <= eps ? -INFINITY : 0.0;
        return (a - 1.0) * (r - eps);
    }
    double ld = r == 0 ? -INFINITY : 0.5 * log1p(-exp(-r));
    if (isinf(r))
        return 0.0;
    if (isinf(a))
        return r <= eps ? -INFINITY : ld;
    if (a > TIGHT_MIN_ORDER)
        ld = fmin(ld, (a - 1.0) * (r - eps + log1p(-1.0 / a)) - log(a));
    return ld;
}

static int check_conversion(const double *orders, const double *rdp, size_t n, int conversion,
                            fa_error *err)
{
    int rc;
    if (conversion != FA_RDP_CONVERSION_TIGHT && conversion != FA_RDP_CONVERSION_CLASSIC)
        return fa_errorf(err, FA_ERR_INVAL, "unknown RDP conversion %d", conversion);
    if ((rc = check_orders(orders, n, 1.0, err)) != 0)
        return rc;
    for (size_t i = 0; i < n; i++)
        if (isnan(rdp[i]))
            return fa_errorf(err, FA_ERR_INVAL, "rdp[%zu] (order %g) is NaN", i, orders[i]);
    return 0;
}

int fa_rdp_epsilon(const double *orders, const double *rdp, size_t n, double delta, int conversion,
                   double *epsilon, double *order, fa_error *err)
{
    int rc;
    if (!(delta >= 0 && delta <= 1))
        return fa_errorf(err, FA_ERR_INVAL, "delta = %g is outside [0, 1]", delta);
    if ((rc = check_conversion(orders, rdp, n, conversion, err)) != 0)
        return rc;
    double best = INFINITY, best_order = n ? orders[0] : 0.0;
    if (delta == 0) {
        int all_zero = 1;
        for (size_t i = 0; i < n; i++)
            all_zero &= rdp[i] <= 0;
        *epsilon = all_zero ? 0.0 : INFINITY;
        if (order)
            *order = 0.0;
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        double e = eps_one(orders[i], rdp[i], delta, conversion);
        if (e < best) {
            best = e;
            best_order = orders[i];
        }
    }
    *epsilon = best > 0 ? best : 0.0;
    if (order)
        *order = best_order;
    return 0;
}

int fa_rdp_delta(const double *orders, const double *rdp, size_t n, double epsilon, int conversion,
                 double *delta, double *order, fa_error *err)
{
    int rc;
    if (!(epsilon >= 0))
        return fa_errorf(err, FA_ERR_INVAL, "epsilon = %g is negative or NaN", epsilon);
    if ((rc = check_conversion(orders, rdp, n, conversion, err)) != 0)
        return rc;
    double best = 0.0, best_order = n ? orders[0] : 0.0;
    for (size_t i = 0; i < n; i++) {
        double ld = log_delta_one(orders[i], rdp[i], epsilon, conversion);
        if (ld < best) {
            best = ld;
            best_order = orders[i];
        }
    }
    *delta = fmin(exp(best), 1.0);
    if (order)
        *order = best_order;
    return 0;
}

/* ---- the accountant -------------------------------------------------------- */

struct fa_rdp_accountant {
    size_t n;
    uint64_t events, steps;
    double *orders; /* (n) increasing */
    double *rdp;    /* (n) spent at each order */
};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int accountant_alloc(fa_rdp_accountant **out, const double *orders, size_t n, fa_error *err)
{
    fa_rdp_accountant *a;
    int rc;
    if (n == 0 || n > FA_RDP_MAX_ORDERS)
        return fa_errorf(err, FA_ERR_INVAL, "an accountant needs 1..%d orders, not %zu",
                         FA_RDP_MAX_ORDERS, n);
    if ((rc = check_orders(orders, n, 1.0, err)) != 0)
        return rc;
    if (!(a = calloc(1, sizeof(*a) + 2 * n * sizeof(double))))
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory for an accountant of %zu orders", n);
    a->n = n;
    a->orders = (double *)(a + 1);
    a->rdp = a->orders + n;
    memcpy(a->orders, orders, n * sizeof(double));
    qsort(a->orders, n, sizeof(double), cmp_double);
    for (size_t i = 1; i < n; i++)
        if (a->orders[i] == a->orders[i - 1]) {
            rc = fa_errorf(err, FA_ERR_INVAL, "order %g is given twice", a->orders[i]);
            free(a);
            return rc;
        }
    *out = a;
    return 0;
}

int fa_rdp_accountant_new(fa_rdp_accountant **out, const double *orders, size_t n, fa_error *err)
{
    if (!orders)
        n = fa_rdp_default_orders(&orders);
    return accountant_alloc(out, orders, n, err);
}

void fa_rdp_accountant_del(fa_rdp_accountant *a)
{
    free(a);
}

static uint64_t sat_add(uint64_t x, uint64_t y)
{
    return x > UINT64_MAX - y ? UINT64_MAX : x + y;
}

/* count as a double no smaller than count (the totals must not be rounded
 * down, however many steps). */
static double count_up(uint64_t count)
{
    double c = (double)count;
    if (c < 18446744073709551616.0 && (uint64_t)c < count)
        c = nextafter(c, INFINITY);
    return c;
}

static void add_scaled(fa_rdp_accountant *a, const double *rdp, uint64_t count)
{
    double c = count_up(count);
    if (count == 0)
        return;
    for (size_t i = 0; i < a->n; i++)
        if (rdp[i] > 0)
            a->rdp[i] += c * rdp[i];
}

int fa_rdp_accountant_compose_sgm(fa_rdp_accountant *a, double q, double sigma, uint64_t steps,
                                  fa_error *err)
{
    double *tmp;
    int rc;
    if (!(tmp = malloc(a->n * sizeof(double))))
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    if ((rc = fa_rdp_sgm(q, sigma, a->orders, a->n, tmp, err)) == 0) {
        add_scaled(a, tmp, steps);
        a->events = sat_add(a->events, 1);
        a->steps = sat_add(a->steps, steps);
    }
    free(tmp);
    return rc;
}

int fa_rdp_accountant_compose_ddg(fa_rdp_accountant *a, const fa_rdp_ddg_params *p, uint64_t count,
                                  fa_error *err)
{
    double *tmp;
    int rc;
    if (!(tmp = malloc(a->n * sizeof(double))))
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    if ((rc = fa_rdp_ddg(p, a->orders, a->n, tmp, err)) == 0) {
        add_scaled(a, tmp, count);
        a->events = sat_add(a->events, 1);
        a->steps = sat_add(a->steps, count);
    }
    free(tmp);
    return rc;
}

int fa_rdp_accountant_compose_rdp(fa_rdp_accountant *a, const double *rdp, size_t n, uint64_t count,
                                  fa_error *err)
{
    if (n != a->n)
        return fa_errorf(err, FA_ERR_INVAL, "%zu RDP values for an accountant of %zu orders", n,
                         a->n);
    for (size_t i = 0; i < n; i++)
        if (!(rdp[i] >= 0))
            return fa_errorf(err, FA_ERR_INVAL, "rdp[%zu] = %g (order %g) is negative or NaN", i,
                             rdp[i], a->orders[i]);
    add_scaled(a, rdp, count);
    a->events = sat_add(a->events, 1);
    a->steps = sat_add(a->steps, count);
    return 0;
}

size_t fa_rdp_accountant_orders(const fa_rdp_accountant *a, const double **orders,
                                const double **rdp)
{
    if (orders)
        *orders = a->orders;
    if (rdp)
        *rdp = a->rdp;
    return a->n;
}

uint64_t fa_rdp_accountant_events(const fa_rdp_accountant *a)
{
    return a->events;
}

uint64_t fa_rdp_accountant_steps(const fa_rdp_accountant *a)
{
    return a->steps;
}

int fa_rdp_accountant_epsilon(const fa_rdp_accountant *a, double delta, int conversion,
                              double *epsilon, double *order, fa_error *err)
{
    return fa_rdp_epsilon(a->orders, a->rdp, a->n, delta, conversion, epsilon, order, err);
}

int fa_rdp_accountant_delta(const fa_rdp_accountant *a, double epsilon, int conversion,
                            double *delta, double *order, fa_error *err)
{
    return fa_rdp_delta(a->orders, a->rdp, a->n, epsilon, conversion, delta, order, err);
}

/* ---- budgets ----------------------------------------------------------------- */

/* epsilon of spent + count * step, in the scratch vector tot. */
static double eps_after(const fa_rdp_accountant *a, const double *step, double count, double *tot,
                        double delta, int conversion)
{
    double eps;
    for (size_t i = 0; i < a->n; i++)
        tot[i] = a->rdp[i] + (step[i] > 0 ? count * step[i] : 0.0);
    fa_rdp_epsilon(a->orders, tot, a->n, delta, conversion, &eps, NULL, NULL);
    return eps;
}

static int check_budget(double epsilon, double delta, int conversion, fa_error *err)
{
    if (!(epsilon >= 0) || !(delta > 0 && delta <= 1))
        return fa_errorf(err, FA_ERR_INVAL,
                         "a budget needs epsilon >= 0 and 0 < delta <= 1 (got %g, %g)", epsilon,
                         delta);
    if (conversion != FA_RDP_CONVERSION_TIGHT && conversion != FA_RDP_CONVERSION_CLASSIC)
        return fa_errorf(err, FA_ERR_INVAL, "unknown RDP conversion %d", conversion);
    return 0;
}

int fa_rdp_accountant_max_steps(const fa_rdp_accountant *a, double q, double sigma, double epsilon,
                                double delta, int conversion, uint64_t *steps, fa_error *err)
{
    double *step = NULL, *tot;
    int rc;
    *steps = 0;
    if ((rc = check_budget(epsilon, delta, conversion, err)) != 0)
        return rc;
    if (!(step = malloc(2 * a->n * sizeof(double))))
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    tot = step + a->n;
    if ((rc = fa_rdp_sgm(q, sigma, a->orders, a->n, step, err)) != 0)
        goto out;
    if (eps_after(a, step, 0, tot, delta, conversion) > epsilon) {
        rc = fa_errorf(err, FA_ERR_RANGE,
                       "the budget (epsilon %g, delta %g) is already exceeded before any step",
                       epsilon, delta);
        goto out;
    }
    int any = 0;
    for (size_t i = 0; i < a->n; i++)
        any |= step[i] > 0;
    if (!any) {
        *steps = UINT64_MAX;
        goto out;
    }
    /* lo fits, hi does not: grow hi by doubling, then bisect. */
    uint64_t lo = 0, hi = 1;
    while (eps_after(a, step, (double)hi, tot, delta, conversion) <= epsilon) {
        lo = hi;
        if (hi >= (UINT64_C(1) << 62)) {
            *steps = UINT64_MAX;
            goto out;
        }
        hi *= 2;
    }
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (eps_after(a, step, count_up(mid), tot, delta, conversion) <= epsilon)
            lo = mid;
        else
            hi = mid;
    }
    *steps = lo;
out:
    free(step);
    return rc;
}

int fa_rdp_accountant_min_noise(const fa_rdp_accountant *a, double q, uint64_t steps,
                                double epsilon, double delta, int conversion, double rel_tol,
                                double *sigma, fa_error *err)
{
    double *step = NULL, *tot;
    int rc;
    *sigma = 0;
    if ((rc = check_budget(epsilon, delta, conversion, err)) != 0)
        return rc;
    if (!(q >= 0 && q <= 1))
        return fa_errorf(err, FA_ERR_INVAL, "sampling rate q = %g is outside [0, 1]", q);
    if (rel_tol == 0)
        rel_tol = 1e-6;
    if (!(rel_tol > 0 && rel_tol < 1))
        return fa_errorf(err, FA_ERR_INVAL, "relative tolerance %g is outside (0, 1)", rel_tol);
    if (!(step = malloc(2 * a->n * sizeof(double))))
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    tot = step + a->n;
    double c = count_up(steps), lo = 0.0, hi = 1.0;
#define EPS_AT(s)                                                                                  \
    (fa_rdp_sgm(q, (s), a->orders, a->n, step, NULL), eps_after(a, step, c, tot, delta, conversion))
    while (EPS_AT(hi) > epsilon) {
        lo = hi;
        hi *= 2.0;
        if (hi > MIN_NOISE_MAX_SIGMA) {
            rc = fa_errorf(err, FA_ERR_RANGE,
                           "no noise multiplier up to %g keeps (epsilon %g, delta %g) over %llu "
                           "steps at q = %g",
                           MIN_NOISE_MAX_SIGMA, epsilon, delta, (unsigned long long)steps, q);
            goto out;
        }
    }
    while (hi - lo > rel_tol * hi) {
        double mid = lo + (hi - lo) / 2.0;
        if (EPS_AT(mid) <= epsilon)
            hi = mid;
        else
            lo = mid;
    }
#undef EPS_AT
    *sigma = hi;
out:
    free(step);
    return rc;
}

/* ---- serialisation --------------------------------------------------------- */

#define SAVE_MAGIC "FARDPv1"
#define SAVE_HEAD 32
#define SAVE_TAIL crypto_generichash_BYTES

static void put_f64(uint8_t *p, double d)
{
    uint64_t v;
    memcpy(&v, &d, 8);
    fa_le_put_u64(p, v);
}

static double get_f64(const uint8_t *p)
{
    uint64_t v = fa_le_get_u64(p);
    double d;
    memcpy(&d, &v, 8);
    return d;
}

int fa_rdp_accountant_save(const fa_rdp_accountant *a, uint8_t **out, size_t *out_len,
                           fa_error *err)
{
    size_t len = SAVE_HEAD + 16 * a->n + SAVE_TAIL;
    uint8_t *b;
    if (sodium_init() < 0)
        return fa_errorf(err, FA_ERR_CRYPTO, "libsodium failed to initialise");
    if (!(b = malloc(len)))
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory for %zu bytes", len);
    memcpy(b, SAVE_MAGIC, 8); /* with its NUL */
    fa_le_put_u32(b + 8, (uint32_t)a->n);
    fa_le_put_u32(b + 12, 0);
    fa_le_put_u64(b + 16, a->events);
    fa_le_put_u64(b + 24, a->steps);
    for (size_t i = 0; i < a->n; i++) {
        put_f64(b + SAVE_HEAD + 16 * i, a->orders[i]);
        put_f64(b + SAVE_HEAD + 16 * i + 8, a->rdp[i]);
    }
    crypto_generichash(b + len - SAVE_TAIL, SAVE_TAIL, b, len - SAVE_TAIL, NULL, 0);
    *out = b;
    *out_len = len;
    return 0;
}

int fa_rdp_accountant_restore(fa_rdp_accountant **out, const uint8_t *buf, size_t len,
                              fa_error *err)
{
    uint8_t sum[SAVE_TAIL];
    fa_rdp_accountant *a = NULL;
    double *orders = NULL;
    int rc;
    if (sodium_init() < 0)
        return fa_errorf(err, FA_ERR_CRYPTO, "libsodium failed to initialise");
    if (len < SAVE_HEAD + SAVE_TAIL || memcmp(buf, SAVE_MAGIC, 8) != 0)
        return fa_errorf(err, FA_ERR_CORRUPT, "not an RDP accountant state (%zu bytes)", len);
    uint32_t n = fa_le_get_u32(buf + 8);
    if (fa_le_get_u32(buf + 12) != 0 || n == 0 || n > FA_RDP_MAX_ORDERS ||
        len != SAVE_HEAD + 16 * (size_t)n + SAVE_TAIL)
        return fa_errorf(err, FA_ERR_CORRUPT,
                         "RDP accountant state: %zu bytes do not hold %u orders", len, n);
    crypto_generichash(sum, SAVE_TAIL, buf, len - SAVE_TAIL, NULL, 0);
    if (sodium_memcmp(sum, buf + len - SAVE_TAIL, SAVE_TAIL) != 0)
        return fa_errorf(err, FA_ERR_CORRUPT, "RDP accountant state: checksum mismatch");
    if (!(orders = malloc(n * sizeof(double))))
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; i < n; i++)
        orders[i] = get_f64(buf + SAVE_HEAD + 16 * i);
    for (uint32_t i = 1; i < n; i++)
        if (!(orders[i] > orders[i - 1])) {
            rc = fa_errorf(err, FA_ERR_CORRUPT, "RDP accountant state: orders not increasing");
            goto out;
        }
    if ((rc = accountant_alloc(&a, orders, n, err)) != 0) {
        if (rc != FA_ERR_NOMEM) {
            fa_error_prefix(err, FA_ERR_CORRUPT, "RDP accountant state");
            if (err)
                err->code = FA_ERR_CORRUPT;
            rc = FA_ERR_CORRUPT;
        }
        goto out;
    }
    for (uint32_t i = 0; i < n; i++) {
        a->rdp[i] = get_f64(buf + SAVE_HEAD + 16 * i + 8);
        if (!(a->rdp[i] >= 0)) {
            rc = fa_errorf(err, FA_ERR_CORRUPT, "RDP accountant state: rdp[%u] = %g", i, a->rdp[i]);
            fa_rdp_accountant_del(a);
            goto out;
        }
    }
    a->events = fa_le_get_u64(buf + 16);
    a->steps = fa_le_get_u64(buf + 24);
    *out = a;
out:
    free(orders);
    return rc;
}
