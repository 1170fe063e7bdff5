/* Unit tests of worker/privacy_state: the accountant on disk.  A fresh
 * state directory gets an empty accountant written at once; what is spent
 * survives a restart exactly; an altered file, one sealed under another
 * identity key or for another region is refused, never replaced; a file
 * missing from a used state directory is refused unless new_accountant
 * says so; the file is private (0600). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fa_file.h"
#include "crypto/identity.h"
#include "worker/privacy_state.h"

static char dir[] = "/tmp/fa_test_privacy_state.XXXXXX";
static char key_a[300], key_b[300];

static void write_key(const char *path)
{
    uint8_t seed[32], pk[32];
    char text[FA_IDENTITY_SECRET_TEXT_MAX];
    size_t len;
    assert_int_equal(fa_identity_generate(seed, pk, NULL), 0);
    assert_int_equal(fa_identity_format_secret(seed, text, &len), 0);
    assert_int_equal(fa_file_write_atomic(path, text, len, 0600, NULL), 0);
}

static int setup(void **state)
{
    if (!mkdtemp(dir))
        return -1;
    snprintf(key_a, sizeof(key_a), "%s/a.key", dir);
    snprintf(key_b, sizeof(key_b), "%s/b.key", dir);
    write_key(key_a);
    write_key(key_b);
    return 0;
}

static int teardown(void **state)
{
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

typedef struct conf {
    Fedagg__WorkerConfig cfg;
    Fedagg__WorkerPrivacy p;
    char state_dir[300];
} conf;

static void conf_init(conf *c, const char *sub, const char *key, const char *region)
{
    fedagg__worker_config__init(&c->cfg);
    fedagg__worker_privacy__init(&c->p);
    snprintf(c->state_dir, sizeof(c->state_dir), "%s/%s", dir, sub);
    mkdir(c->state_dir, 0700);
    c->cfg.state_dir = c->state_dir;
    c->cfg.identity_key_file = (char *)key;
    c->cfg.region_id = (char *)region;
    c->cfg.federation_id = (char *)"fed";
    c->cfg.privacy = &c->p;
    c->p.target_epsilon = 4.0;
}

static fa_privacy_spend spend(void)
{
    fa_privacy_spend s;
    memset(&s, 0, sizeof(s));
    strcpy(s.mechanism, FA_PRIVACY_MECHANISM_DPSGD);
    s.noise_multiplier = 1.0;
    s.clip = 1.0;
    s.sampling_rate = 0.02;
    s.steps = 200;
    return s;
}

static void test_create_spend_reopen(void **state)
{
    conf c;
    fa_privacy_state *s;
    fa_privacy_spend sp = spend();
    uint8_t d[32] = {1};
    struct stat st;
    int created;
    double eps;
    fa_error err;

    conf_init(&c, "fresh", key_a, "eu-west");
    assert_int_equal(fa_privacy_state_open(&s, &c.cfg, &created, &err), 0);
    assert_int_equal(created, 1);
    /* written at once, private */
    assert_int_equal(stat(fa_privacy_state_path(s), &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(fa_privacy_budget_charge(fa_privacy_state_budget(s), &sp, 1, 0, d, NULL, &err),
                     0);
    eps = fa_privacy_budget_epsilon(fa_privacy_state_budget(s));
    assert_true(eps > 0);
    assert_int_equal(fa_privacy_state_save(s, &err), 0);
    fa_privacy_state_del(s);

    /* a restart keeps what was spent, bit for bit */
    assert_int_equal(fa_privacy_state_open(&s, &c.cfg, &created, &err), 0);
    assert_int_equal(created, 0);
    assert_true(fa_privacy_budget_epsilon(fa_privacy_state_budget(s)) == eps);
    assert_int_equal(fa_privacy_budget_rounds(fa_privacy_state_budget(s)), 1);
    assert_true(fa_privacy_budget_is_last(fa_privacy_state_budget(s), 1, 0, d));
    fa_privacy_state_del(s);
    /* new_accountant is ignored when the file exists */
    c.p.new_accountant = 1;
    assert_int_equal(fa_privacy_state_open(&s, &c.cfg, &created, &err), 0);
    assert_int_equal(created, 0);
    assert_true(fa_privacy_budget_epsilon(fa_privacy_state_budget(s)) == eps);
    fa_privacy_state_del(s);
    fa_privacy_state_del(NULL);
}

static void test_refusals(void **state)
{
    conf c, other;
    fa_privacy_state *s;
    fa_privacy_spend sp = spend();
    uint8_t d[32] = {2}, *data;
    char path[400], mark[400];
    size_t len;
    fa_error err;

    conf_init(&c, "used", key_a, "eu-west");
    assert_int_equal(fa_privacy_state_open(&s, &c.cfg, NULL, &err), 0);
    assert_int_equal(fa_privacy_budget_charge(fa_privacy_state_budget(s), &sp, 1, 0, d, NULL, &err),
                     0);
    assert_int_equal(fa_privacy_state_save(s, &err), 0);
    snprintf(path, sizeof(path), "%s", fa_privacy_state_path(s));
    fa_privacy_state_del(s);

    /* another identity key: refused, the file is kept */
    conf_init(&other, "used", key_b, "eu-west");
    assert_int_equal(fa_privacy_state_open(&s, &other.cfg, NULL, &err), FA_ERR_VERIFY);
    assert_non_null(strstr(err.msg, "refusing to start"));
    assert_non_null(strstr(err.msg, "never reset"));
    assert_int_equal(access(path, F_OK), 0);
    /* another region's directory */
    conf_init(&other, "used", key_a, "us-east");
    assert_int_equal(fa_privacy_state_open(&s, &other.cfg, NULL, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "another region's state directory"));

    /* altered: refused, not reset */
    assert_int_equal(fa_file_read_all(path, &data, &len, 1 << 20, &err), 0);
    data[len - 5] ^= 1;
    assert_int_equal(fa_file_write_atomic(path, data, len, 0600, &err), 0);
    assert_int_equal(fa_privacy_state_open(&s, &c.cfg, NULL, &err), FA_ERR_VERIFY);
    assert_non_null(strstr(err.msg, "altered"));
    data[len - 5] ^= 1;
    assert_int_equal(fa_file_write_atomic(path, data, len, 0600, &err), 0);
    assert_int_equal(fa_privacy_state_open(&s, &c.cfg, NULL, &err), 0);
    fa_privacy_state_del(s);
    free(data);

    /* missing in a used directory: refused, loudly */
    snprintf(mark, sizeof(mark), "%s/global.safetensors", c.state_dir);
    assert_int_equal(fa_file_write_atomic(mark, "x", 1, 0600, &err), 0);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(fa_privacy_state_open(&s, &c.cfg, NULL, &err), FA_ERR_STATE);
    print_message("%s\n", err.msg);
    assert_non_null(strstr(err.msg, "is missing, but this state directory has been used "
                                    "(global.safetensors is there)"));
    assert_int_equal(access(path, F_OK), -1); /* nothing written */
    /* ... unless the operator says the directory never trained under DP */
    int created;
    c.p.new_accountant = 1;
    assert_int_equal(fa_privacy_state_open(&s, &c.cfg, &created, &err), 0);
    assert_int_equal(created, 1);
    assert_true(fa_privacy_budget_epsilon(fa_privacy_state_budget(s)) == 0.0);
    fa_privacy_state_del(s);

    /* no budget, no key file */
    c.p.target_epsilon = 0;
    assert_int_equal(fa_privacy_state_open(&s, &c.cfg, NULL, &err), FA_ERR_INVAL);
    c.p.target_epsilon = 1;
    c.cfg.identity_key_file = (char *)"/nonexistent/key";
    assert_int_equal(fa_privacy_state_open(&s, &c.cfg, NULL, &err), FA_ERR_NOTFOUND);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_spend_reopen),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
