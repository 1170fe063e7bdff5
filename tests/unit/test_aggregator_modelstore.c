/* Model store: atomic commits, retention, recovery after an interrupted
 * commit, refusal of damaged files. */
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

#include "aggregator/model_store.h"
#include "common/fa_file.h"

static char dir[256];

static int setup(void **state)
{
    snprintf(dir, sizeof(dir), "/tmp/fa_test_store.XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static int exists(const char *name)
{
    char p[512];
    struct stat st;
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    return stat(p, &st) == 0;
}

/* Commits version v whose weights are all v + 0.5 and whose state is all -v. */
static int commit(fa_model_store *s, uint64_t v, fa_error *err)
{
    float w[6], b[3], m[9];
    uint64_t wshape[2] = {3, 2}, bshape[1] = {3}, mshape[1] = {9};
    char vs[32];
    const char *meta[] = {"fedagg_version", vs};
    const char *smeta[] = {"optimizer", "fedavgm lr=1 momentum=0.9"};
    for (int i = 0; i < 6; i++)
        w[i] = (float)v + 0.5f;
    for (int i = 0; i < 3; i++)
        b[i] = (float)v;
    for (int i = 0; i < 9; i++)
        m[i] = -(float)v;
    snprintf(vs, sizeof(vs), "%llu", (unsigned long long)v);
    fa_st_view model[2] = {{"fc1.weight", FA_ST_F32, 2, wshape, w},
                           {"fc1.bias", FA_ST_F32, 1, bshape, b}};
    fa_st_view st[1] = {{"m", FA_ST_F32, 1, mshape, m}};
    return fa_model_store_commit(s, v, v, model, 2, meta, 1, st, 1, smeta, 1, err);
}

static void test_commit_retain_reopen(void **state)
{
    fa_model_store *s;
    struct fa_model_version cur;
    fa_safetensors *st;
    char path[512];
    float w[6];
    fa_error err;

    assert_int_equal(fa_model_store_open(&s, dir, 2, &err), 0);
    assert_int_equal(fa_model_store_current(s, &cur), FA_ERR_NOTFOUND);
    for (uint64_t v = 0; v < 3; v++)
        assert_int_equal(commit(s, v, &err), 0);
    assert_int_equal(fa_model_store_current(s, &cur), 0);
    assert_int_equal(cur.version, 2);
    assert_false(exists("model-00000000.safetensors"));
    assert_false(exists("state-00000000.safetensors"));
    assert_true(exists("model-00000001.safetensors"));
    assert_true(fa_model_store_has(s, 1) && !fa_model_store_has(s, 0));
    /* versions only grow */
    assert_int_equal(commit(s, 2, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "not after the current 2"));
    fa_model_store_del(s);

    assert_int_equal(fa_model_store_open(&s, dir, 2, &err), 0);
    assert_int_equal(fa_model_store_current(s, &cur), 0);
    assert_int_equal(cur.version, 2);
    fa_model_store_model_path(s, 2, path, sizeof(path));
    assert_int_equal(fa_st_open(&st, path, &err), 0);
    assert_int_equal(fa_st_read_f32(st, fa_st_find(st, "fc1.weight"), w, 6, &err), 0);
    assert_true(w[0] == 2.5f && w[5] == 2.5f);
    assert_string_equal(fa_st_metadata_get(st, "fedagg_version"), "2");
    fa_st_del(st);
    fa_model_store_del(s);
}

static void test_interrupted_commit_is_cleaned(void **state)
{
    fa_model_store *s;
    struct fa_model_version cur;
    char path[512];

    /* a model file of version 3 written, MANIFEST never replaced: crash */
    snprintf(path, sizeof(path), "%s/model-00000003.safetensors", dir);
    assert_int_equal(fa_file_write_atomic(path, "partial", 7, 0644, NULL), 0);
    snprintf(path, sizeof(path), "%s/state-00000003.safetensors.tmp.abcdef", dir);
    assert_int_equal(fa_file_write_atomic(path, "partial", 7, 0644, NULL), 0);
    assert_int_equal(fa_model_store_open(&s, dir, 2, NULL), 0);
    assert_int_equal(fa_model_store_current(s, &cur), 0);
    assert_int_equal(cur.version, 2);
    assert_false(exists("model-00000003.safetensors"));
    assert_false(exists("state-00000003.safetensors.tmp.abcdef"));
    /* and version 3 can still be committed properly */
    assert_int_equal(commit(s, 3, NULL), 0);
    fa_model_store_del(s);
}

static void test_damaged_model_is_refused(void **state)
{
    fa_model_store *s = NULL;
    char path[512];
    uint8_t *data;
    size_t len;
    fa_error err;

    snprintf(path, sizeof(path), "%s/model-00000003.safetensors", dir);
    assert_int_equal(fa_file_read_all(path, &data, &len, 1 << 20, NULL), 0);
    data[len - 1] ^= 0x01;
    assert_int_equal(fa_file_write_atomic(path, data, len, 0644, NULL), 0);
    assert_int_equal(fa_model_store_open(&s, dir, 2, &err), FA_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "model-00000003.safetensors"));
    assert_non_null(strstr(err.msg, "damaged"));
    assert_null(s);
    data[len - 1] ^= 0x01;
    assert_int_equal(fa_file_write_atomic(path, data, len, 0644, NULL), 0);
    free(data);
    assert_int_equal(fa_model_store_open(&s, dir, 2, &err), 0);
    fa_model_store_del(s);

    /* a malformed MANIFEST */
    snprintf(path, sizeof(path), "%s/MANIFEST", dir);
    assert_int_equal(fa_file_read_all(path, &data, &len, 1 << 20, NULL), 0);
    assert_int_equal(fa_file_write_atomic(path, "fedagg-model-store 1\nv 3 x\n", 27, 0644, NULL),
                     0);
    assert_int_equal(fa_model_store_open(&s, dir, 2, &err), FA_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "MANIFEST:2: malformed line"));
    assert_int_equal(fa_file_write_atomic(path, data, len, 0644, NULL), 0);
    free(data);
    assert_int_equal(fa_model_store_open(&s, dir, 0, &err), FA_ERR_INVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commit_retain_reopen),
        cmocka_unit_test(test_interrupted_commit_is_cleaned),
        cmocka_unit_test(test_damaged_model_is_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
