/* Unit tests of worker/builtin_model: the built-in MLP on a published model
 * in mixed floating dtypes whose file order is not the network's, with one
 * tensor not federated: every value lands in the parameter block by NAME,
 * the delta lands in the federated vector by name, the kept local tensor
 * is written in its own dtype; and any other model is refused with a
 * message that says to use an external trainer. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/mlp.h"
#include "model/tensors.h"
#include "tests/worker/test_model.h"
#include "worker/builtin_model.h"

static char dir[64], mlp_path[128], local_path[128], other_path[128];

/* Element i of tensor name (the same in every dtype used). */
static float value(const char *name, size_t i)
{
    int k = !strcmp(name, "fc1.weight")   ? 1
            : !strcmp(name, "fc1.bias")   ? 2
            : !strcmp(name, "fc2.weight") ? 3
                                          : 4;
    return (float)k * 10.0f + (float)i / 4.0f;
}

/* 3-4-2 MLP, written fc2.bias (F64), fc1.weight (BF16), fc2.weight (F16),
 * fc1.bias (F32); fc2.bias is not federated. */
static int write_mlp(const char *path, fa_st_dtype fc1_bias_dtype)
{
    static const uint64_t s_w1[2] = {4, 3}, s_b1[1] = {4}, s_w2[2] = {2, 4}, s_b2[1] = {2};
    double b2[2];
    uint16_t w1[12], w2[8];
    float b1[4];
    int32_t b1i[4];
    fa_st_view v[4];
    const char *meta[2] = {FA_TENSORS_META_KEY,
                           "{\"fc1.weight\": 1.0, \"fc2.weight\": 1.0, \"fc1.bias\": 1.0}"};
    for (int i = 0; i < 2; i++)
        b2[i] = value("fc2.bias", (size_t)i);
    for (int i = 0; i < 12; i++)
        w1[i] = fa_st_f32_to_bf16(value("fc1.weight", (size_t)i));
    for (int i = 0; i < 8; i++)
        w2[i] = fa_st_f32_to_f16(value("fc2.weight", (size_t)i));
    for (int i = 0; i < 4; i++) {
        b1[i] = value("fc1.bias", (size_t)i);
        b1i[i] = i;
    }
    memset(v, 0, sizeof(v));
    v[0] = (fa_st_view){"fc2.bias", FA_ST_F64, 1, s_b2, b2, NULL, NULL};
    v[1] = (fa_st_view){"fc1.weight", FA_ST_BF16, 2, s_w1, w1, NULL, NULL};
    v[2] = (fa_st_view){"fc2.weight", FA_ST_F16, 2, s_w2, w2, NULL, NULL};
    v[3] = (fa_st_view){"fc1.bias",
                        fc1_bias_dtype,
                        1,
                        s_b1,
                        fc1_bias_dtype == FA_ST_I32 ? (const void *)b1i : (const void *)b1,
                        NULL,
                        NULL};
    /* an integer fc1.bias cannot be federated: then no metadata */
    return fa_st_save(path, 0600, v, 4, meta, fc1_bias_dtype == FA_ST_I32 ? 0 : 1, NULL);
}

static void open_model(const char *path, fa_safetensors **st, fa_tensors **t)
{
    assert_int_equal(fa_st_open(st, path, NULL), 0);
    assert_int_equal(fa_tensors_from_st(t, *st, NULL), 0);
}

static void test_by_name(void **state)
{
    fa_safetensors *st = NULL, *local = NULL;
    fa_tensors *t = NULL;
    fa_mlp_config mc;
    fa_mlp_layout l;
    fa_builtin_map map;
    float fed[24], params[26], pdelta[26], fd[24];
    fa_error err;

    open_model(mlp_path, &st, &t);
    assert_int_equal(fa_tensors_fed_numel(t), 24);
    assert_int_equal(fa_builtin_config(st, &mc, &err), 0);
    assert_int_equal(mc.n_layers, 2);
    assert_int_equal(mc.dims[0], 3);
    assert_int_equal(mc.dims[1], 4);
    assert_int_equal(mc.dims[2], 2);
    assert_int_equal(fa_mlp_layout_init(&l, &mc, NULL), 0);
    assert_int_equal(fa_builtin_map_init(&map, &l, t, &err), 0);
    assert_int_equal(map.d, 24);
    assert_int_equal(fa_tensors_read_fed(t, st, fed, 24, 1, "test", NULL), 0);

    /* the block in layer order, whatever the file's order and dtypes */
    assert_int_equal(fa_builtin_load(&map, t, fed, st, NULL, params, &err), 0);
    for (uint32_t k = 0; k < l.n_tensors; k++)
        for (size_t i = 0; i < l.tensors[k].numel; i++)
            if (params[l.tensors[k].offset + i] != value(l.tensors[k].name, i))
                fail_msg("%s[%zu] = %g, expected %g", l.tensors[k].name, i,
                         params[l.tensors[k].offset + i], value(l.tensors[k].name, i));

    /* the delta of the federated tensors, at the table's offsets */
    for (int j = 0; j < 26; j++)
        pdelta[j] = (float)j;
    for (int j = 0; j < 24; j++)
        fd[j] = -1;
    fa_builtin_fed_delta(&map, pdelta, fd);
    for (size_t i = 0; i < fa_tensors_count(t); i++) {
        const fa_tensor *x = fa_tensors_at(t, i);
        const fa_mlp_tensor *p = fa_mlp_layout_find(&l, x->name);
        if (!x->federated)
            continue;
        for (uint64_t e = 0; e < x->numel; e++)
            assert_true(fd[x->fed_offset + e] == (float)(p->offset + e));
    }

    /* the tensor that is not federated is kept in its own dtype ... */
    params[24] = 100.5f;
    params[25] = -7.25f;
    assert_int_equal(fa_builtin_save_local(&map, t, params, local_path, &err), 0);
    assert_int_equal(fa_st_open(&local, local_path, &err), 0);
    assert_int_equal(fa_st_count(local), 1);
    assert_int_equal(fa_st_find(local, "fc2.bias")->dtype, FA_ST_F64);
    /* ... and comes back from there the next round */
    assert_int_equal(fa_builtin_load(&map, t, fed, st, local, params, &err), 0);
    assert_true(params[24] == 100.5f && params[25] == -7.25f);
    assert_true(params[0] == value("fc1.weight", 0));
    fa_st_del(local);
    fa_st_del(st);
    fa_tensors_del(t);
}

static void test_not_the_mlp(void **state)
{
    fa_safetensors *st = NULL;
    fa_tensors *t = NULL, *t2 = NULL;
    fa_mlp_config mc;
    fa_mlp_layout l;
    fa_builtin_map map;
    fa_error err;
    uint64_t shape[1] = {2};

    /* any other model */
    open_model(other_path, &st, &t);
    assert_int_equal(fa_builtin_config(st, &mc, &err), FA_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "built-in MLP only"));
    assert_non_null(strstr(err.msg, "external trainer"));
    fa_st_del(st);
    fa_tensors_del(t);

    /* an integer tensor where the MLP has a floating one */
    assert_int_equal(write_mlp(other_path, FA_ST_I32), 0);
    open_model(other_path, &st, &t);
    assert_int_equal(fa_builtin_config(st, &mc, &err), FA_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "fc1.bias"));
    fa_st_del(st);
    fa_tensors_del(t);

    /* the table has a tensor the network does not */
    open_model(mlp_path, &st, &t);
    assert_int_equal(fa_builtin_config(st, &mc, NULL), 0);
    assert_int_equal(fa_mlp_layout_init(&l, &mc, NULL), 0);
    assert_int_equal(fa_tensors_clone(&t2, t, NULL), 0);
    assert_int_equal(fa_tensors_add(t2, "bn.weight", FA_ST_F32, 1, shape, NULL), 0);
    assert_int_equal(fa_builtin_map_init(&map, &l, t2, &err), FA_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "tensor 'bn.weight' is not part of it"));
    fa_tensors_del(t2);
    /* ... or another architecture */
    {
        fa_mlp_config c2;
        fa_mlp_layout l2;
        uint32_t hidden[1] = {5};
        assert_int_equal(fa_mlp_config_make(&c2, 3, hidden, 1, 2, NULL), 0);
        assert_int_equal(fa_mlp_layout_init(&l2, &c2, NULL), 0);
        assert_int_equal(fa_builtin_map_init(&map, &l2, t, &err), FA_ERR_UNSUPPORTED);
        assert_non_null(strstr(err.msg, "tensor 'fc1.weight' has shape [4, 3], the network's is "
                                        "[5, 3]"));
    }
    fa_st_del(st);
    fa_tensors_del(t);
}

static int setup(void **state)
{
    snprintf(dir, sizeof(dir), "/tmp/fa_test_builtin.XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(mlp_path, sizeof(mlp_path), "%s/mlp.safetensors", dir);
    snprintf(local_path, sizeof(local_path), "%s/local.safetensors", dir);
    snprintf(other_path, sizeof(other_path), "%s/other.safetensors", dir);
    if (write_mlp(mlp_path, FA_ST_F32) != 0 || tm_write(other_path, NULL, 0) != 0)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_by_name),
        cmocka_unit_test(test_not_the_mlp),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
