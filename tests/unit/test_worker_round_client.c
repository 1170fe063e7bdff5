/* Unit tests of worker/round_client without a network: the check of a
 * downloaded model's tensor table against what the federation announces
 * (FederationInfo.tensor_table_digest, num_params, num_tensors). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fedagg.pb-c.h"
#include "model/tensors.h"
#include "tests/worker/test_model.h"
#include "worker/round_client.h"

static void test_table_check(void **state)
{
    char dir[64], path[128];
    fa_safetensors *st = NULL;
    fa_tensors *t = NULL, *t2 = NULL;
    uint8_t dig[32];
    Fedagg__FederationInfo info = FEDAGG__FEDERATION_INFO__INIT;
    fa_error err;

    snprintf(dir, sizeof(dir), "/tmp/fa_test_rc.XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/m.safetensors", dir);
    assert_int_equal(tm_write(path, NULL, 0), 0);
    assert_int_equal(fa_st_open(&st, path, NULL), 0);
    assert_int_equal(fa_tensors_from_st(&t, st, NULL), 0);
    assert_int_equal(fa_tensors_digest(t, dig, NULL), 0);

    info.tensor_table_digest.data = dig;
    info.tensor_table_digest.len = 32;
    info.num_params = TM_D;
    info.num_tensors = 7;
    assert_int_equal(fa_round_client_check_table(&info, t, &err), 0);
    info.num_tensors = 0; /* not announced: not checked */
    assert_int_equal(fa_round_client_check_table(&info, t, &err), 0);

    /* the same names with another selection: another table */
    assert_int_equal(fa_tensors_clone(&t2, t, NULL), 0);
    assert_int_equal(fa_tensors_set_federated(t2, 2, 1, NULL), 0); /* bn.running_mean */
    info.num_params = TM_D + 4;
    assert_int_equal(fa_round_client_check_table(&info, t2, &err), FA_ERR_PROTOCOL);
    assert_non_null(strstr(err.msg, "the model's tensor table does not match the federation's"));
    assert_non_null(strstr(err.msg, "7 tensors, 30 federated coordinates"));
    fa_tensors_del(t2);

    /* a digest that matches with the wrong counts; counts with no digest */
    info.num_params = TM_D + 1;
    assert_int_equal(fa_round_client_check_table(&info, t, &err), FA_ERR_PROTOCOL);
    info.num_params = TM_D;
    info.num_tensors = 8;
    assert_int_equal(fa_round_client_check_table(&info, t, &err), FA_ERR_PROTOCOL);
    assert_non_null(strstr(err.msg, "announces 8 tensors"));
    info.num_tensors = 7;
    info.tensor_table_digest.len = 0;
    assert_int_equal(fa_round_client_check_table(&info, t, &err), FA_ERR_PROTOCOL);
    assert_non_null(strstr(err.msg, "digest (none)"));
    dig[5] ^= 1;
    info.tensor_table_digest.len = 32;
    assert_int_equal(fa_round_client_check_table(&info, t, &err), FA_ERR_PROTOCOL);

    fa_tensors_del(t);
    fa_st_del(st);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
