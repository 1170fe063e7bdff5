/* Unit tests of worker/privacy_budget: what a round costs and whether it
 * fits; a release charged once (the same round, version and update again
 * is free, another update of the round is charged again); refusals beyond
 * the budget leave the state unchanged; the sealed state round-trips bit
 * for bit (the same statement bytes after a restart) and is refused when
 * altered anywhere, truncated, sealed under another identity key or for
 * another region; a changed delta restates the epsilons; the statement's
 * fields; a dataset's accountant shared by two federations (one
 * composition, each federation's own last release, sealed and reopened
 * exactly). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "privacy/accountant.h"
#include "worker/privacy_budget.h"

static const uint8_t SEED[32] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16,
                                 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32};

static fa_privacy_spend spend(double sigma, double q, uint64_t steps)
{
    fa_privacy_spend s;
    memset(&s, 0, sizeof(s));
    strcpy(s.mechanism, FA_PRIVACY_MECHANISM_DPSGD);
    s.noise_multiplier = sigma;
    s.clip = 1.0;
    s.sampling_rate = q;
    s.steps = steps;
    return s;
}

/* epsilon of `steps` steps of (q, sigma) at delta, by the accountant itself */
static double reference(double q, double sigma, uint64_t steps, double delta)
{
    fa_rdp_accountant *a;
    double e;
    assert_int_equal(fa_rdp_accountant_new(&a, NULL, 0, NULL), 0);
    assert_int_equal(fa_rdp_accountant_compose_sgm(a, q, sigma, steps, NULL), 0);
    assert_int_equal(fa_rdp_accountant_epsilon(a, delta, FA_RDP_CONVERSION_TIGHT, &e, NULL, NULL),
                     0);
    fa_rdp_accountant_del(a);
    return e;
}

static void digest_of(uint8_t d[32], int v)
{
    float u[4] = {(float)v, 1, 2, 3};
    fa_privacy_budget_digest(u, sizeof(u), d);
}

static void test_charge_once_and_budget(void **state)
{
    fa_privacy_budget *b;
    fa_privacy_spend sp = spend(1.1, 0.01, 500);
    uint8_t d1[32], d2[32];
    double er, et;
    int charged;
    fa_error err;

    assert_int_equal(fa_privacy_budget_new(&b, "fed", "eu-west", 2.0, 1e-5, &err), 0);
    assert_true(fa_privacy_budget_epsilon(b) == 0.0);
    assert_null(fa_privacy_budget_last(b));
    assert_int_equal(fa_privacy_budget_preview(b, &sp, &er, &et, &err), 0);
    assert_true(er == et);
    assert_true(er == reference(0.01, 1.1, 500, 1e-5));
    print_message("500 steps of q 0.01, sigma 1.1: epsilon %.4f at 1e-5\n", er);

    digest_of(d1, 1);
    assert_int_equal(fa_privacy_budget_charge(b, &sp, 1, 0, d1, &charged, &err), 0);
    assert_int_equal(charged, 1);
    assert_true(fa_privacy_budget_epsilon(b) == er);
    /* the same release again (a new attempt, a resumed finished round): free */
    assert_int_equal(fa_privacy_budget_charge(b, &sp, 1, 0, d1, &charged, &err), 0);
    assert_int_equal(charged, 0);
    assert_int_equal(fa_privacy_budget_rounds(b), 1);
    assert_true(fa_privacy_budget_is_last(b, 1, 0, d1));
    /* another update of round 1 (retrained with fresh noise): charged again */
    digest_of(d2, 2);
    assert_false(fa_privacy_budget_is_last(b, 1, 0, d2));
    assert_int_equal(fa_privacy_budget_charge(b, &sp, 1, 0, d2, &charged, &err), 0);
    assert_int_equal(charged, 1);
    assert_int_equal(fa_privacy_budget_rounds(b), 2);
    assert_int_equal(fa_privacy_budget_steps(b), 1000);
    double two = fa_privacy_budget_epsilon(b);
    assert_true(two == reference(0.01, 1.1, 1000, 1e-5));
    assert_true(fa_privacy_budget_last(b)->epsilon_total == two);
    assert_true(fa_privacy_budget_last(b)->epsilon_round == er);

    /* until the next round would exceed 2.0: refused, nothing changes */
    int r = 2;
    for (;;) {
        uint8_t d[32];
        digest_of(d, 10 + r);
        int rc = fa_privacy_budget_charge(b, &sp, (uint64_t)r, (uint64_t)r, d, &charged, &err);
        if (rc == FA_ERR_RANGE)
            break;
        assert_int_equal(rc, 0);
        r++;
    }
    print_message("refused at round %d: %s\n", r, err.msg);
    assert_non_null(strstr(err.msg, "privacy budget exhausted"));
    assert_non_null(strstr(err.msg, "beyond the budget of 2"));
    assert_int_equal(charged, 0);
    assert_int_equal(fa_privacy_budget_rounds(b), (uint64_t)r);
    assert_true(fa_privacy_budget_epsilon(b) <= 2.0);
    assert_int_equal(fa_privacy_budget_last(b)->round, (uint64_t)r - 1);
    assert_int_equal(fa_privacy_budget_preview(b, &sp, &er, &et, &err), FA_ERR_RANGE);
    assert_true(et > 2.0 && er > 0); /* filled anyway */
    /* a smaller round may still fit */
    fa_privacy_spend small = spend(1.1, 0.01, 1);
    assert_int_equal(fa_privacy_budget_preview(b, &small, NULL, NULL, &err), 0);

    /* what cannot be accounted */
    fa_privacy_spend bad = sp;
    strcpy(bad.mechanism, "laplace");
    assert_int_equal(fa_privacy_budget_preview(b, &bad, NULL, NULL, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "cannot be accounted"));
    bad = sp;
    bad.noise_multiplier = 0;
    assert_int_equal(fa_privacy_budget_preview(b, &bad, NULL, NULL, &err), FA_ERR_INVAL);
    bad = sp;
    bad.sampling_rate = 1.5;
    assert_int_equal(fa_privacy_budget_preview(b, &bad, NULL, NULL, &err), FA_ERR_INVAL);
    bad = sp;
    bad.steps = 0;
    assert_int_equal(fa_privacy_budget_preview(b, &bad, NULL, NULL, &err), FA_ERR_INVAL);
    fa_privacy_budget_del(b);

    /* bad budgets */
    assert_int_equal(fa_privacy_budget_new(&b, "fed", "r", 0, 1e-5, &err), FA_ERR_INVAL);
    assert_int_equal(fa_privacy_budget_new(&b, "fed", "r", 1, 1, &err), FA_ERR_INVAL);
    assert_int_equal(fa_privacy_budget_new(&b, "fed", "", 1, 1e-5, &err), FA_ERR_INVAL);
    fa_privacy_budget_del(NULL);
}

static void pack(const fa_privacy_budget *b, uint64_t round, uint32_t attempt, uint8_t **out,
                 size_t *len)
{
    Fedagg__PrivacyStatement st;
    assert_int_equal(fa_privacy_budget_statement(b, round, attempt, &st, NULL), 0);
    *len = fedagg__privacy_statement__get_packed_size(&st);
    *out = malloc(*len);
    fedagg__privacy_statement__pack(&st, *out);
}

static void test_seal_open_and_statement(void **state)
{
    fa_privacy_budget *b, *c;
    fa_privacy_spend sp = spend(0.9, 0.02, 300);
    Fedagg__PrivacyStatement st;
    uint8_t d[32], *sealed, *s1, *s2, other[32];
    size_t len, l1, l2;
    fa_error err;

    assert_int_equal(fa_privacy_budget_new(&b, "fed", "eu-west", 8.0, 1e-5, &err), 0);
    /* an empty accountant seals and opens too */
    assert_int_equal(fa_privacy_budget_seal(b, SEED, &sealed, &len, &err), 0);
    assert_int_equal(
        fa_privacy_budget_open(&c, "fed", "eu-west", 8.0, 1e-5, sealed, len, SEED, &err), 0);
    assert_int_equal(fa_privacy_budget_rounds(c), 0);
    assert_int_equal(fa_privacy_budget_statement(c, 1, 0, &st, &err), FA_ERR_STATE);
    fa_privacy_budget_del(c);
    free(sealed);

    digest_of(d, 1);
    assert_int_equal(fa_privacy_budget_charge(b, &sp, 4, 3, d, NULL, &err), 0);
    digest_of(d, 2);
    assert_int_equal(fa_privacy_budget_charge(b, &sp, 5, 4, d, NULL, &err), 0);
    assert_int_equal(fa_privacy_budget_statement(b, 5, 2, &st, &err), 0);
    assert_string_equal(st.federation_id, "fed");
    assert_string_equal(st.region, "eu-west");
    assert_int_equal(st.round, 5);
    assert_int_equal(st.attempt, 2);
    assert_string_equal(st.mechanism, "dp-sgd");
    assert_true(st.noise_multiplier == 0.9 && st.clip == 1.0 && st.sampling_rate == 0.02);
    assert_int_equal(st.steps, 300);
    assert_true(st.delta == 1e-5 && st.budget_delta == 1e-5 && st.budget_epsilon == 8.0);
    assert_true(st.epsilon_round == reference(0.02, 0.9, 300, 1e-5));
    assert_true(st.epsilon_total == reference(0.02, 0.9, 600, 1e-5));
    assert_true(st.epsilon_total > st.epsilon_round);
    assert_string_equal(st.accountant, FA_PRIVACY_ACCOUNTANT_NAME);
    assert_string_equal(st.unit, "example");
    assert_int_equal(st.rounds_accounted, 2);
    assert_int_equal(fa_privacy_budget_statement(b, 4, 0, &st, &err), FA_ERR_STATE);
    assert_non_null(strstr(err.msg, "no update of round 4"));

    /* sealed and opened: the same state, the same statement bytes */
    assert_int_equal(fa_privacy_budget_seal(b, SEED, &sealed, &len, &err), 0);
    assert_int_equal(
        fa_privacy_budget_open(&c, "fed", "eu-west", 8.0, 1e-5, sealed, len, SEED, &err), 0);
    assert_true(fa_privacy_budget_epsilon(c) == fa_privacy_budget_epsilon(b));
    assert_int_equal(fa_privacy_budget_rounds(c), 2);
    assert_int_equal(fa_privacy_budget_steps(c), 600);
    assert_true(fa_privacy_budget_is_last(c, 5, 4, d));
    pack(b, 5, 2, &s1, &l1);
    pack(c, 5, 2, &s2, &l2);
    assert_int_equal(l1, l2);
    assert_memory_equal(s1, s2, l1);
    free(s1);
    free(s2);
    /* and it goes on where it was */
    uint8_t d3[32];
    digest_of(d3, 3);
    assert_int_equal(fa_privacy_budget_charge(b, &sp, 6, 5, d3, NULL, &err), 0);
    assert_int_equal(fa_privacy_budget_charge(c, &sp, 6, 5, d3, NULL, &err), 0);
    assert_true(fa_privacy_budget_epsilon(c) == fa_privacy_budget_epsilon(b));
    fa_privacy_budget_del(c);

    /* another delta in the config: the same spending, restated */
    assert_int_equal(
        fa_privacy_budget_open(&c, "fed", "eu-west", 8.0, 1e-6, sealed, len, SEED, &err), 0);
    assert_true(fa_privacy_budget_epsilon(c) == reference(0.02, 0.9, 600, 1e-6));
    assert_true(fa_privacy_budget_last(c)->epsilon_round == reference(0.02, 0.9, 300, 1e-6));
    fa_privacy_budget_del(c);

    /* every byte matters */
    for (size_t i = 0; i < len; i++) {
        sealed[i] ^= 0x40;
        c = (fa_privacy_budget *)1;
        int rc = fa_privacy_budget_open(&c, "fed", "eu-west", 8.0, 1e-5, sealed, len, SEED, &err);
        if (rc == 0)
            fail_msg("a sealed accountant altered at byte %zu of %zu opened", i, len);
        assert_true(rc == FA_ERR_VERIFY || rc == FA_ERR_CORRUPT || rc == FA_ERR_INVAL);
        assert_null(c);
        sealed[i] ^= 0x40;
    }
    assert_int_equal(
        fa_privacy_budget_open(&c, "fed", "eu-west", 8.0, 1e-5, sealed, len - 1, SEED, &err),
        FA_ERR_VERIFY);
    assert_int_equal(
        fa_privacy_budget_open(&c, "fed", "eu-west", 8.0, 1e-5, sealed, 20, SEED, &err),
        FA_ERR_CORRUPT);
    assert_int_equal(fa_privacy_budget_open(&c, "fed", "eu-west", 8.0, 1e-5, sealed, 0, SEED, &err),
                     FA_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "not a sealed privacy accountant"));
    memcpy(other, SEED, 32);
    other[0] ^= 1;
    assert_int_equal(
        fa_privacy_budget_open(&c, "fed", "eu-west", 8.0, 1e-5, sealed, len, other, &err),
        FA_ERR_VERIFY);
    assert_non_null(strstr(err.msg, "does not open with this region's identity key"));
    assert_int_equal(
        fa_privacy_budget_open(&c, "fed", "us-east", 8.0, 1e-5, sealed, len, SEED, &err),
        FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "another region's state directory"));
    assert_int_equal(
        fa_privacy_budget_open(&c, "other", "eu-west", 8.0, 1e-5, sealed, len, SEED, &err),
        FA_ERR_INVAL);
    /* a fresh seal of the same state differs (random nonce) but opens alike */
    uint8_t *again;
    size_t alen;
    assert_int_equal(fa_privacy_budget_seal(b, SEED, &again, &alen, &err), 0);
    assert_int_equal(alen, len + 0);
    free(again);
    free(sealed);
    fa_privacy_budget_del(b);
}

/* The federation's distributed discrete Gaussian as the region's spend:
 * region level, one round per release, the accountant's DDG RDP; refused
 * beyond the budget; its parameters survive the seal. */
static void test_ddg_budget(void **state)
{
    fa_privacy_budget *b, *c;
    fa_privacy_spend sp;
    fa_rdp_accountant *a;
    fa_rdp_ddg_params p;
    Fedagg__PrivacyStatement st;
    uint8_t d[32], *sealed;
    size_t len;
    double one, two, three;
    int charged;
    fa_error err;
    (void)state;

    memset(&sp, 0, sizeof(sp));
    strcpy(sp.mechanism, FA_PRIVACY_MECHANISM_DDG);
    sp.noise_multiplier = 1.0;
    sp.clip = 1.0;
    sp.sampling_rate = 1.0;
    sp.steps = 1;
    sp.ddg_l2_sens = 1100.0;
    sp.ddg_sigma2 = 1100.0 * 1100.0 / 3;
    sp.ddg_regions = 3;
    sp.ddg_dim = 1024;
    memset(&p, 0, sizeof(p));
    p.l2_sens = sp.ddg_l2_sens;
    p.sigma2 = sp.ddg_sigma2;
    p.n_regions = 3;
    p.dim = 1024;
    assert_int_equal(fa_rdp_accountant_new(&a, NULL, 0, NULL), 0);
    assert_int_equal(fa_rdp_accountant_compose_ddg(a, &p, 1, NULL), 0);
    assert_int_equal(fa_rdp_accountant_epsilon(a, 1e-5, FA_RDP_CONVERSION_TIGHT, &one, NULL, NULL),
                     0);
    assert_int_equal(fa_rdp_accountant_compose_ddg(a, &p, 1, NULL), 0);
    assert_int_equal(fa_rdp_accountant_epsilon(a, 1e-5, FA_RDP_CONVERSION_TIGHT, &two, NULL, NULL),
                     0);
    assert_int_equal(fa_rdp_accountant_compose_ddg(a, &p, 1, NULL), 0);
    assert_int_equal(
        fa_rdp_accountant_epsilon(a, 1e-5, FA_RDP_CONVERSION_TIGHT, &three, NULL, NULL), 0);
    fa_rdp_accountant_del(a);
    printf("# DDG z = 1 at 3 regions: epsilon %.4f, %.4f, %.4f after 1, 2, 3 rounds (delta 1e-5)\n",
           one, two, three);

    /* a budget for two rounds, not three */
    assert_int_equal(fa_privacy_budget_new(&b, "fed", "ap-south", (two + three) / 2, 1e-5, &err),
                     0);
    digest_of(d, 1);
    assert_int_equal(fa_privacy_budget_charge(b, &sp, 1, 0, d, &charged, &err), 0);
    assert_int_equal(charged, 1);
    assert_true(fabs(fa_privacy_budget_epsilon(b) - one) < 1e-12);
    assert_int_equal(fa_privacy_budget_charge(b, &sp, 1, 0, d, &charged, &err), 0);
    assert_int_equal(charged, 0); /* the same update again (a new attempt) is free */
    digest_of(d, 2);
    assert_int_equal(fa_privacy_budget_charge(b, &sp, 2, 1, d, &charged, &err), 0);
    assert_true(fabs(fa_privacy_budget_epsilon(b) - two) < 1e-12);
    assert_int_equal(fa_privacy_budget_statement(b, 2, 0, &st, &err), 0);
    assert_string_equal(st.mechanism, "ddg");
    assert_string_equal(st.unit, "region");
    assert_string_equal(st.accountant, FA_PRIVACY_ACCOUNTANT_NAME_DDG);
    assert_true(fabs(st.epsilon_round - one) < 1e-9 && fabs(st.epsilon_total - two) < 1e-12);
    digest_of(d, 3);
    fa_error_clear(&err);
    assert_int_equal(fa_privacy_budget_preview(b, &sp, NULL, NULL, &err), FA_ERR_RANGE);
    assert_non_null(strstr(err.msg, "distributed discrete Gaussian"));
    assert_int_equal(fa_privacy_budget_charge(b, &sp, 3, 2, d, &charged, &err), FA_ERR_RANGE);
    assert_int_equal(fa_privacy_budget_rounds(b), 2);

    /* sealed and opened: the DDG round restated to the same epsilon */
    assert_int_equal(fa_privacy_budget_seal(b, SEED, &sealed, &len, &err), 0);
    assert_int_equal(fa_privacy_budget_open(&c, "fed", "ap-south", (two + three) / 2, 1e-5, sealed,
                                            len, SEED, &err),
                     0);
    assert_true(fa_privacy_budget_epsilon(c) == fa_privacy_budget_epsilon(b));
    assert_true(fa_privacy_budget_last(c)->epsilon_round ==
                fa_privacy_budget_last(b)->epsilon_round);
    assert_true(fa_privacy_budget_last(c)->spend.ddg_sigma2 == sp.ddg_sigma2);
    assert_int_equal(fa_privacy_budget_last(c)->spend.ddg_regions, 3);
    assert_int_equal(fa_privacy_budget_preview(c, &sp, NULL, NULL, NULL), FA_ERR_RANGE);
    free(sealed);
    fa_privacy_budget_del(c);

    /* a DDG spend without its parameters is refused, naming them */
    sp.ddg_regions = 0;
    fa_error_clear(&err);
    assert_int_equal(fa_privacy_budget_preview(b, &sp, NULL, NULL, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "distributed discrete Gaussian"));
    fa_privacy_budget_del(b);
}

/* One dataset, two federations: every release is composed into the one
 * accountant (the total is that of all rounds of both), each federation
 * deduplicates against its own last release, the round that would exceed
 * the budget is refused whichever federation asks, and the sealed state
 * reopens with the same totals and statements. */
static void test_shared_accountant(void **state)
{
    fa_privacy_budget *b, *c;
    fa_privacy_spend sp = spend(1.1, 0.01, 500);
    Fedagg__PrivacyStatement st;
    uint8_t da[32], db[32], *sealed = NULL, *sealed2 = NULL;
    size_t len = 0, len2 = 0;
    double one = reference(0.01, 1.1, 500, 1e-5), two = reference(0.01, 1.1, 1000, 1e-5);
    int charged, rc;
    fa_error err;

    (void)state;
    /* a budget that fits two rounds but not three */
    assert_true(two < 1.8 && reference(0.01, 1.1, 1500, 1e-5) > 1.8);
    assert_int_equal(fa_privacy_budget_new(&b, "dataset:clinics", "eu-west", 1.8, 1e-5, &err), 0);
    digest_of(da, 1);
    digest_of(db, 2);
    assert_int_equal(fa_privacy_budget_charge_for(b, "fed-a", &sp, 1, 0, da, &charged, &err), 0);
    assert_int_equal(charged, 1);
    assert_true(fa_privacy_budget_epsilon(b) == one);
    /* the same update of fed-a again: free; the same bytes from fed-b: a release of its own */
    assert_int_equal(fa_privacy_budget_charge_for(b, "fed-a", &sp, 1, 0, da, &charged, &err), 0);
    assert_int_equal(charged, 0);
    assert_int_equal(fa_privacy_budget_charge_for(b, "fed-b", &sp, 1, 0, da, &charged, &err), 0);
    assert_int_equal(charged, 1);
    assert_true(fa_privacy_budget_epsilon(b) == two);
    assert_int_equal(fa_privacy_budget_rounds(b), 2);
    assert_null(fa_privacy_budget_last(b)); /* the owner (the dataset) released nothing */
    assert_true(fa_privacy_budget_last_for(b, "fed-a")->epsilon_total == one);
    assert_true(fa_privacy_budget_last_for(b, "fed-b")->epsilon_total == two);
    /* the third round is refused whichever federation asks; nothing changes */
    rc = fa_privacy_budget_charge_for(b, "fed-a", &sp, 2, 1, db, &charged, &err);
    assert_int_equal(rc, FA_ERR_RANGE);
    assert_non_null(strstr(err.msg, "exhausted"));
    assert_int_equal(fa_privacy_budget_charge_for(b, "fed-b", &sp, 2, 1, db, &charged, &err),
                     FA_ERR_RANGE);
    assert_int_equal(fa_privacy_budget_rounds(b), 2);
    assert_int_equal(fa_privacy_budget_last_for(b, "fed-a")->round, 1);
    /* statements carry the asking federation and its own release */
    assert_int_equal(fa_privacy_budget_statement_for(b, "fed-a", 1, 3, &st, &err), 0);
    assert_string_equal(st.federation_id, "fed-a");
    assert_int_equal(st.attempt, 3);
    assert_true(st.epsilon_total == one && st.rounds_accounted == 2);
    assert_int_equal(fa_privacy_budget_statement_for(b, "fed-c", 1, 0, &st, &err), FA_ERR_STATE);
    assert_int_equal(fa_privacy_budget_charge_for(b, "", &sp, 1, 0, da, NULL, &err), FA_ERR_INVAL);

    /* sealed and reopened: the same totals, releases and bytes when sealed again */
    assert_int_equal(fa_privacy_budget_seal(b, SEED, &sealed, &len, &err), 0);
    assert_int_equal(fa_privacy_budget_open(&c, "dataset:clinics", "eu-west", 1.8, 1e-5, sealed,
                                            len, SEED, &err),
                     0);
    assert_true(fa_privacy_budget_epsilon(c) == two);
    assert_int_equal(fa_privacy_budget_rounds(c), 2);
    assert_true(fa_privacy_budget_last_for(c, "fed-a")->epsilon_total == one);
    assert_true(fa_privacy_budget_last_for(c, "fed-a")->epsilon_round == one);
    assert_true(fa_privacy_budget_last_for(c, "fed-b")->epsilon_total == two);
    assert_int_equal(fa_privacy_budget_charge_for(c, "fed-b", &sp, 1, 0, da, &charged, &err), 0);
    assert_int_equal(charged, 0);
    assert_int_equal(fa_privacy_budget_charge_for(c, "fed-b", &sp, 2, 1, db, &charged, &err),
                     FA_ERR_RANGE);
    assert_int_equal(fa_privacy_budget_seal(c, SEED, &sealed2, &len2, &err), 0);
    assert_int_equal(len2, len); /* the nonce differs, the layout does not */
    fa_privacy_budget_del(c);
    /* the dataset's accountant is not a federation's */
    assert_int_equal(
        fa_privacy_budget_open(&c, "fed-a", "eu-west", 1.8, 1e-5, sealed, len, SEED, &err),
        FA_ERR_INVAL);
    /* a bit flipped in the table of federations: refused */
    sealed[len - 20] ^= 1;
    assert_int_equal(fa_privacy_budget_open(&c, "dataset:clinics", "eu-west", 1.8, 1e-5, sealed,
                                            len, SEED, &err),
                     FA_ERR_VERIFY);
    free(sealed);
    free(sealed2);
    fa_privacy_budget_del(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_charge_once_and_budget),
        cmocka_unit_test(test_seal_open_and_statement),
        cmocka_unit_test(test_ddg_budget),
        cmocka_unit_test(test_shared_accountant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
