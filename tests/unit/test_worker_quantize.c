/* Unit tests of worker/quantize: the L2 bound, the per-tensor ranges, the
 * clipping statistics with numbers worked out by hand, and the old path
 * (the codec clips: the vector is left alone). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "fedagg.pb-c.h"
#include "model/tensors.h"
#include "worker/quantize.h"

/* Two federated tensors a (4, range 1) and c (2, range 0.5) around a
 * non-federated b (3): d = 6, a at [0, 4), c at [4, 6). */
static fa_tensors *table(float ra, float rc)
{
    fa_tensors *t = NULL;
    uint64_t s4[1] = {4}, s3[1] = {3}, s2[1] = {2};
    assert_int_equal(fa_tensors_new(&t, NULL), 0);
    assert_int_equal(fa_tensors_add(t, "a", FA_ST_F32, 1, s4, NULL), 0);
    assert_int_equal(fa_tensors_add(t, "b", FA_ST_F32, 1, s3, NULL), 0);
    assert_int_equal(fa_tensors_add(t, "c", FA_ST_F16, 1, s2, NULL), 0);
    assert_int_equal(fa_tensors_set_federated(t, 0, 1, NULL), 0);
    assert_int_equal(fa_tensors_set_federated(t, 2, 1, NULL), 0);
    if (ra > 0)
        assert_int_equal(fa_tensors_set_range(t, 0, ra, NULL), 0);
    if (rc > 0)
        assert_int_equal(fa_tensors_set_range(t, 2, rc, NULL), 0);
    assert_int_equal(fa_tensors_fed_numel(t), 6);
    assert_int_equal(fa_tensors_at(t, 2)->fed_offset, 4);
    return t;
}

static void assert_close(double got, double want)
{
    if (fabs(got - want) > 1e-6 * (1 + fabs(want)))
        fail_msg("got %.9g, expected %.9g", got, want);
}

/* Ranges only: a = [0.5, -2, 0, 1] / 1, c = [0.25, -1] / 0.5.
 *   scaled   a: 0.5 -2 0 1   c: 0.5 -2
 *   clipped  a[1] (|-2| > 1), c[1] (|-2| > 1); a[3] = 1 exactly is not
 *   cut      a[1]: (2 - 1)^2 = 1; c[1]: (1 - 0.5)^2 = 0.25   (model units)
 *   mass     0.25 + 4 + 0 + 1 + 0.0625 + 1 = 6.3125
 *   fraction 1.25 / 6.3125 */
static void test_per_tensor_ranges(void **state)
{
    fa_tensors *t = table(1.0f, 0.5f);
    float fed[6] = {0.5f, -2.0f, 0.0f, 1.0f, 0.25f, -1.0f};
    fa_quantize_params p = {1, FA_QUANT_CLIP_NONE, 10.0, FA_QUANT_CLIP_COORDINATE, 1.0};
    fa_quantize_stats st;
    const float want[6] = {0.5f, -2.0f, 0.0f, 1.0f, 0.5f, -2.0f};

    assert_int_equal(fa_quantize_prepare(fed, 6, t, &p, &st, NULL), 0);
    for (int i = 0; i < 6; i++)
        assert_true(fed[i] == want[i]);
    assert_int_equal(st.clipped_coords, 2);
    assert_close(st.l2_norm, sqrt(6.3125));
    assert_close(st.l2_scale, 1.0);
    assert_close(st.clipped_fraction, 1.25 / 6.3125);
    /* a tie (one each): the first in table order */
    assert_string_equal(st.worst_tensor, "a");
    assert_int_equal(st.worst_clipped, 1);
    assert_int_equal(st.worst_numel, 4);
    fa_tensors_del(t);
}

/* L2 bound first (in model units), then the ranges: fed = [3, 4, 0, 0, 0,
 * 0], ||fed|| = 5, bound 2.5 -> scale 0.5 -> [1.5, 2, 0, 0 | 0, 0]: both
 * beyond range 1; cut 0.25 + 1 over mass 6.25. */
static void test_l2_then_ranges(void **state)
{
    fa_tensors *t = table(1.0f, 0.5f);
    float fed[6] = {3, 4, 0, 0, 0, 0};
    fa_quantize_params p = {1, FA_QUANT_CLIP_L2, 2.5, FA_QUANT_CLIP_COORDINATE, 1.0};
    fa_quantize_stats st;

    assert_int_equal(fa_quantize_prepare(fed, 6, t, &p, &st, NULL), 0);
    assert_true(fed[0] == 1.5f && fed[1] == 2.0f && fed[2] == 0 && fed[5] == 0);
    assert_close(st.l2_norm, 5.0);
    assert_close(st.l2_scale, 0.5);
    assert_int_equal(st.clipped_coords, 2);
    assert_close(st.clipped_fraction, 1.25 / 6.25);
    assert_string_equal(st.worst_tensor, "a");

    /* BOTH bounds too; a bound that does not bind scales nothing */
    {
        float g[6] = {0.3f, 0.4f, 0, 0, 0.1f, 0};
        p.l2_mode = FA_QUANT_CLIP_BOTH;
        assert_int_equal(fa_quantize_prepare(g, 6, t, &p, &st, NULL), 0);
        assert_close(st.l2_scale, 1.0);
        assert_int_equal(st.clipped_coords, 0);
        assert_true(st.clipped_fraction == 0);
        assert_null(st.worst_tensor);
        assert_true(g[4] == 0.2f); /* 0.1 / 0.5 */
    }
    /* COORDINATE and NONE never scale */
    {
        float g[6] = {3, 4, 0, 0, 0, 0};
        p.l2_mode = FA_QUANT_CLIP_COORDINATE;
        assert_int_equal(fa_quantize_prepare(g, 6, t, &p, &st, NULL), 0);
        assert_close(st.l2_scale, 1.0);
        assert_true(g[0] == 3.0f && g[1] == 4.0f);
        assert_close(st.clipped_fraction, (4.0 + 9.0) / 25.0);
    }
    fa_tensors_del(t);
}

/* Without per-tensor ranges the vector is the codec's business: untouched,
 * but measured against clip_value (and the codec's own L2 bound). */
static void test_codec_clips(void **state)
{
    fa_tensors *t = table(0, 0);
    float fed[6] = {0.5f, -3.0f, 0, 0, 0, 2.0f};
    const float orig[6] = {0.5f, -3.0f, 0, 0, 0, 2.0f};
    fa_quantize_params p = {0, 0, 100.0, FA_QUANT_CLIP_COORDINATE, 1.0};
    fa_quantize_stats st;

    assert_int_equal(fa_quantize_prepare(fed, 6, t, &p, &st, NULL), 0);
    assert_memory_equal(fed, orig, sizeof(orig));
    assert_int_equal(st.clipped_coords, 2);
    assert_close(st.clipped_fraction, (4.0 + 1.0) / 13.25);
    assert_string_equal(st.worst_tensor, "a");
    /* the codec's L2 mode: scaled by 1/sqrt(13.25) * 1.0 first: nothing beyond 1 */
    p.codec_clip_mode = FA_QUANT_CLIP_L2;
    p.l2_bound = 1.0;
    assert_int_equal(fa_quantize_prepare(fed, 6, t, &p, &st, NULL), 0);
    assert_memory_equal(fed, orig, sizeof(orig));
    assert_close(st.l2_scale, 1.0 / sqrt(13.25));
    assert_int_equal(st.clipped_coords, 0);
    fa_tensors_del(t);
}

static void test_refusals(void **state)
{
    fa_tensors *t = table(1.0f, 0); /* c has no range */
    float fed[6] = {1, 2, 3, 4, 5, 6};
    const float orig[6] = {1, 2, 3, 4, 5, 6};
    fa_quantize_params p = {1, FA_QUANT_CLIP_NONE, 1.0, FA_QUANT_CLIP_COORDINATE, 1.0};
    fa_error err;

    assert_int_equal(fa_quantize_prepare(fed, 6, t, &p, NULL, &err), FA_ERR_PROTOCOL);
    assert_non_null(strstr(err.msg, "'c'"));
    assert_non_null(strstr(err.msg, "fedagg.federated"));
    assert_memory_equal(fed, orig, sizeof(orig));
    assert_int_equal(fa_quantize_prepare(fed, 5, t, &p, NULL, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "5 coordinates"));
    fa_tensors_del(t);

    t = table(1.0f, 1.0f);
    fed[2] = 3e38f;
    fed[3] = 3e38f; /* large, but its norm is finite in double */
    assert_int_equal(fa_quantize_prepare(fed, 6, t, &p, NULL, &err), 0);
    fed[2] = INFINITY;
    assert_int_equal(fa_quantize_prepare(fed, 6, t, &p, NULL, &err), FA_ERR_RANGE);
    assert_non_null(strstr(err.msg, "not finite"));
    assert_true(isinf(fed[2])); /* unchanged */
    fa_tensors_del(t);
}

static void test_params_from_proto(void **state)
{
    Fedagg__QuantParams q = FEDAGG__QUANT_PARAMS__INIT;
    fa_quantize_params p;
    fa_error err;

    assert_int_equal(fa_quantize_params_from_proto(&p, NULL, &err), FA_ERR_PROTOCOL);
    q.per_tensor = 1;
    q.clip_mode = FA_QUANT_CLIP_COORDINATE;
    q.clip_value = 1.0;
    q.l2_clip_mode = FA_QUANT_CLIP_BOTH;
    q.clip_l2_norm = 3.0;
    assert_int_equal(fa_quantize_params_from_proto(&p, &q, &err), 0);
    assert_int_equal(p.per_tensor, 1);
    assert_int_equal(p.l2_mode, FA_QUANT_CLIP_BOTH);
    assert_true(p.l2_bound == 3.0);
    q.clip_l2_norm = 0;
    assert_int_equal(fa_quantize_params_from_proto(&p, &q, &err), FA_ERR_PROTOCOL);
    assert_non_null(strstr(err.msg, "clip_l2_norm"));
    q.l2_clip_mode = FA_QUANT_CLIP_NONE; /* no bound: its norm does not matter */
    assert_int_equal(fa_quantize_params_from_proto(&p, &q, &err), 0);
    q.l2_clip_mode = 7;
    assert_int_equal(fa_quantize_params_from_proto(&p, &q, &err), FA_ERR_PROTOCOL);
    assert_non_null(strstr(err.msg, "l2_clip_mode 7"));
    q.per_tensor = 0;
    q.clip_value = 0;
    assert_int_equal(fa_quantize_params_from_proto(&p, &q, &err), FA_ERR_PROTOCOL);
    assert_non_null(strstr(err.msg, "clip_value"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_per_tensor_ranges), cmocka_unit_test(test_l2_then_ranges),
        cmocka_unit_test(test_codec_clips),       cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_params_from_proto),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
