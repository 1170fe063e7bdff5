/* mkfix.c - writes the C-side fixtures of python/tests/test_safetensors.py
 * with the C safetensors writer (common/fa_safetensors.c): every dtype, a
 * 0-d and an empty tensor, a non-ASCII name, metadata with the characters
 * jansson escapes; and a file holding one F32 scalar.  Not part of the
 * build: the two files are committed next to it.  To make them again:
 *
 *   cmake --build build --target fedagg
 *   cc -std=c11 -D_GNU_SOURCE -I. -o /tmp/mkfix python/tests/data/mkfix.c \
 *      build/common/libfa_common.a $(pkg-config --libs jansson) -lcrypto -lsodium -lz -lm
 *   /tmp/mkfix python/tests/data/c_all_dtypes.safetensors python/tests/data/c_scalar.safetensors
 *
 * (c_mlp_4-3-2.safetensors is `fedagg model init --arch 4-3-2 --seed 1`.) */
#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include <math.h>
#include "common/fa_safetensors.h"

int main(int argc, char **argv)
{
    fa_error err;
    float f32[6] = {0.0f, -1.5f, 3.25f, 1e-30f, 65504.0f, -0.0f};
    uint16_t f16[3], bf16[4];
    float f16src[3] = {1.0f, -2.5f, 0.333333343f};
    float bf16src[4] = {1.0f, 3.14159274f, -1e10f, 1.00390625f};
    for (int i = 0; i < 3; i++) f16[i] = fa_st_f32_to_f16(f16src[i]);
    for (int i = 0; i < 4; i++) bf16[i] = fa_st_f32_to_bf16(bf16src[i]);
    double f64[2] = {1.0 / 3.0, -2.0};
    int64_t i64 = 1234567890123LL; /* 0-d */
    int32_t i32[3] = {-1, 0, 2147483647};
    int16_t i16[2] = {-32768, 7};
    int8_t i8[2] = {-128, 127};
    uint8_t u8[4] = {0, 1, 254, 255};
    uint8_t b[3] = {1, 0, 1};
    uint64_t s_f32[] = {2, 3}, s_f16[] = {3}, s_bf16[] = {2, 2}, s_f64[] = {2}, s_i32[] = {3},
             s_i16[] = {2}, s_i8[] = {1, 2}, s_u8[] = {4}, s_b[] = {3}, s_empty[] = {0, 5};
    fa_st_view v[] = {
        {"layer.weight", FA_ST_F32, 2, s_f32, f32, NULL, NULL},
        {"half", FA_ST_F16, 1, s_f16, f16, NULL, NULL},
        {"brain", FA_ST_BF16, 2, s_bf16, bf16, NULL, NULL},
        {"double", FA_ST_F64, 1, s_f64, f64, NULL, NULL},
        {"bn.num_batches_tracked", FA_ST_I64, 0, NULL, &i64, NULL, NULL},
        {"ints", FA_ST_I32, 1, s_i32, i32, NULL, NULL},
        {"shorts", FA_ST_I16, 1, s_i16, i16, NULL, NULL},
        {"bytes\xc3\xa9", FA_ST_I8, 2, s_i8, i8, NULL, NULL},
        {"u8", FA_ST_U8, 1, s_u8, u8, NULL, NULL},
        {"mask", FA_ST_BOOL, 1, s_b, b, NULL, NULL},
        {"empty", FA_ST_F32, 2, s_empty, "", NULL, NULL},
    };
    const char *meta[] = {"format", "pt", "num_examples", "1234",
                          "note", "h\xc3\xa9llo \"q\" back\\slash /slash\n\t\x01\x1f\x7f \xf0\x9f\x98\x80"};
    if (fa_st_save(argv[1], 0644, v, sizeof(v) / sizeof(v[0]), meta, 3, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    /* a file with no metadata and a single scalar */
    float one = 1.0f;
    fa_st_view w[] = {{"x", FA_ST_F32, 0, NULL, &one, NULL, NULL}};
    if (fa_st_save(argv[2], 0644, w, 1, NULL, 0, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    return 0;
}
