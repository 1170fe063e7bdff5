/* test_model.h - a small "any model" for the worker's unit tests: every
 * kind of tensor the contract names, some federated (with ranges in the
 * fedagg.federated metadata, as the aggregator publishes them), some not.
 *
 *   name                    dtype  shape   federated  range
 *   encoder.weight          F32    [4, 3]  yes        1.0    (i - 6) / 8
 *   encoder.bias            BF16   [4]     yes        0.5    0.5 - i / 4
 *   bn.running_mean         F32    [4]     no                (i + 1) / 8
 *   bn.num_batches_tracked  I64    []      no                7
 *   head.weight             F16    [2, 4]  yes        2.0    i / 4 - 1
 *   head.bias               F64    [2]     yes        1.0    1.5, -2
 *   mask                    BOOL   [3]     no                1, 0, 1
 *
 * Federated vector: encoder.weight [0, 12), encoder.bias [12, 16),
 * head.weight [16, 24), head.bias [24, 26); d = 26.  Every value is
 * exactly representable in its dtype, and so is 0.5 w + 0.25.
 */
#ifndef FA_TESTS_WORKER_TEST_MODEL_H
#define FA_TESTS_WORKER_TEST_MODEL_H

#include <stdint.h>
#include <string.h>

#include "common/fa_safetensors.h"
#include "model/tensors.h"

#define TM_D 26

/* The federated vector of the test model. */
static inline void tm_fed(float fed[TM_D])
{
    for (int i = 0; i < 12; i++)
        fed[i] = (float)(i - 6) / 8.0f;
    for (int i = 0; i < 4; i++)
        fed[12 + i] = 0.5f - (float)i / 4.0f;
    for (int i = 0; i < 8; i++)
        fed[16 + i] = (float)i / 4.0f - 1.0f;
    fed[24] = 1.5f;
    fed[25] = -2.0f;
}

/* Writes the test model to path (with extra metadata pairs meta[2i],
 * meta[2i+1]); returns 0 or an FA_ERR_* code. */
static inline int tm_write(const char *path, const char *const *meta, size_t n_meta)
{
    static const uint64_t s_w[2] = {4, 3}, s_b[1] = {4}, s_h[2] = {2, 4}, s_hb[1] = {2},
                          s_m[1] = {3};
    float fed[TM_D], ew[12], rm[4];
    uint16_t eb[4], hw[8];
    double hb[2];
    int64_t nbt = 7;
    uint8_t mask[3] = {1, 0, 1};
    const char *pairs[32];
    size_t np = 0;
    fa_st_view v[7];

    tm_fed(fed);
    memcpy(ew, fed, sizeof(ew));
    for (int i = 0; i < 4; i++) {
        eb[i] = fa_st_f32_to_bf16(fed[12 + i]);
        rm[i] = (float)(i + 1) / 8.0f;
    }
    for (int i = 0; i < 8; i++)
        hw[i] = fa_st_f32_to_f16(fed[16 + i]);
    hb[0] = fed[24];
    hb[1] = fed[25];
    memset(v, 0, sizeof(v));
    v[0] = (fa_st_view){"encoder.weight", FA_ST_F32, 2, s_w, ew, NULL, NULL};
    v[1] = (fa_st_view){"encoder.bias", FA_ST_BF16, 1, s_b, eb, NULL, NULL};
    v[2] = (fa_st_view){"bn.running_mean", FA_ST_F32, 1, s_b, rm, NULL, NULL};
    v[3] = (fa_st_view){"bn.num_batches_tracked", FA_ST_I64, 0, s_b, &nbt, NULL, NULL};
    v[4] = (fa_st_view){"head.weight", FA_ST_F16, 2, s_h, hw, NULL, NULL};
    v[5] = (fa_st_view){"head.bias", FA_ST_F64, 1, s_hb, hb, NULL, NULL};
    v[6] = (fa_st_view){"mask", FA_ST_BOOL, 1, s_m, mask, NULL, NULL};
    pairs[np++] = "format";
    pairs[np++] = "pt";
    pairs[np++] = "fedagg.version";
    pairs[np++] = "3";
    pairs[np++] = FA_TENSORS_META_KEY;
    pairs[np++] = "{\"encoder.weight\": 1.0, \"encoder.bias\": 0.5, \"head.weight\": 2.0, "
                  "\"head.bias\": 1.0}";
    for (size_t i = 0; i < 2 * n_meta && np < 32; i++)
        pairs[np++] = meta[i];
    return fa_st_save(path, 0600, v, 7, pairs, np / 2, NULL);
}

#endif
