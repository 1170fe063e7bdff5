/* Unit tests of common/fa_safetensors: round trips through the writer and
 * both readers, the float16/bfloat16 conversions, and one test per
 * validation rule with the message a user would see. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fa_crc32c.h"
#include "common/fa_err.h"
#include "common/fa_file.h"
#include "common/fa_safetensors.h"
#include "common/fa_sha256.h"

static char tmpdir[256];

static int setup(void **state)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/fa_test_st.XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* A file image: 8-byte length, the header text, data_len bytes of data. */
static uint8_t *make_raw(const char *json, size_t data_len, size_t *len)
{
    size_t n = strlen(json);
    uint8_t *b = calloc(1, 8 + n + data_len);
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(b + 8, json, n);
    for (size_t i = 0; i < data_len; i++)
        b[8 + n + i] = (uint8_t)i;
    *len = 8 + n + data_len;
    return b;
}

/* Parses json + data_len bytes; asserts the code and that the message holds want. */
static void expect_parse(const char *json, size_t data_len, int code, const char *want)
{
    size_t len;
    uint8_t *b = make_raw(json, data_len, &len);
    fa_safetensors *st = (fa_safetensors *)1;
    fa_error err;

    fa_error_clear(&err);
    int rc = fa_st_parse(&st, b, len, "m.safetensors", &err);
    if (rc != code || (want && !strstr(err.msg, want)))
        fail_msg("header %s: got %d '%s', want %d '%s'", json, rc, err.msg, code, want ? want : "");
    if (code == 0)
        fa_st_del(st);
    else
        assert_null(st);
    free(b);
}

static void test_round_trip_all_dtypes(void **state)
{
    char path[300];
    float f32[6] = {1.5f, -2.0f, 0.0f, 3.25f, 1e-3f, -7.0f};
    uint16_t f16[3] = {0x3c00, 0xc000, 0x7bff}, bf16[2] = {0x3f80, 0xc0a0};
    int32_t i32[4] = {1, -2, 2147483647, -2147483647 - 1};
    int64_t i64[2] = {INT64_MAX, -5};
    uint8_t u8[5] = {0, 1, 2, 254, 255};
    float scalar = 42.0f;
    uint64_t s_f32[2] = {2, 3}, s_f16[1] = {3}, s_bf16[2] = {1, 2}, s_i32[1] = {4},
             s_i64[1] = {2}, s_u8[1] = {5}, s_empty[2] = {0, 7};
    fa_st_view v[] = {
        {"layer.weight", FA_ST_F32, 2, s_f32, f32, NULL, NULL},
        {"half", FA_ST_F16, 1, s_f16, f16, NULL, NULL},
        {"brain", FA_ST_BF16, 2, s_bf16, bf16, NULL, NULL},
        {"ints", FA_ST_I32, 1, s_i32, i32, NULL, NULL},
        {"longs", FA_ST_I64, 1, s_i64, i64, NULL, NULL},
        {"bytes", FA_ST_U8, 1, s_u8, u8, NULL, NULL},
        {"empty", FA_ST_F32, 2, s_empty, NULL, NULL, NULL},
        {"scalar", FA_ST_F32, 0, NULL, &scalar, NULL, NULL},
    };
    const char *meta[] = {"format", "pt", "num_examples", "1234", "note", "h\xc3\xa9llo \"q\""};
    fa_safetensors *st;
    fa_error err;
    uint8_t *raw;
    size_t raw_len;

    snprintf(path, sizeof(path), "%s/rt.safetensors", tmpdir);
    assert_int_equal(fa_st_save(path, 0644, v, 8, meta, 3, &err), 0);

    /* The data section starts 8-byte aligned, the header is padded with spaces. */
    assert_int_equal(fa_file_read_all(path, &raw, &raw_len, 1 << 20, &err), 0);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | raw[i];
    assert_int_equal((8 + n) % 8, 0);
    assert_int_equal(raw[8], '{');

    for (int pass = 0; pass < 2; pass++) {
        if (pass == 0)
            assert_int_equal(fa_st_open(&st, path, &err), 0);
        else
            assert_int_equal(fa_st_parse(&st, raw, raw_len, "mem", &err), 0);
        assert_int_equal(fa_st_count(st), 8);
        assert_int_equal(fa_st_data_offset(st), 8 + n);
        assert_int_equal(fa_st_data_len(st), raw_len - 8 - n);
        /* file (offset) order is the order of writing */
        assert_string_equal(fa_st_at(st, 0)->name, "layer.weight");
        assert_null(fa_st_at(st, 8));
        assert_int_equal(fa_st_metadata_count(st), 3);
        assert_string_equal(fa_st_metadata_get(st, "num_examples"), "1234");
        assert_string_equal(fa_st_metadata_get(st, "note"), "h\xc3\xa9llo \"q\"");
        assert_null(fa_st_metadata_get(st, "missing"));
        const char *k, *val;
        fa_st_metadata_at(st, 0, &k, &val);
        assert_string_equal(k, "format");
        assert_string_equal(val, "pt");

        for (size_t i = 0; i < 8; i++) {
            const fa_st_tensor *t = fa_st_find(st, v[i].name);
            uint8_t buf[64];
            size_t bytes = fa_st_dtype_size(v[i].dtype);
            assert_non_null(t);
            assert_int_equal(t->dtype, v[i].dtype);
            assert_int_equal(t->ndim, v[i].ndim);
            for (unsigned d = 0; d < t->ndim; d++) {
                assert_int_equal(t->shape[d], v[i].shape[d]);
                bytes *= v[i].shape[d];
            }
            assert_int_equal(t->end - t->begin, bytes);
            assert_int_equal(fa_st_read(st, t, buf, sizeof(buf), &err), 0);
            if (bytes)
                assert_memory_equal(buf, v[i].data, bytes);
            if (pass == 1 && bytes)
                assert_memory_equal(fa_st_data(st, t), v[i].data, bytes);
        }
        assert_null(fa_st_find(st, "nope"));
        assert_int_equal(fa_st_find(st, "scalar")->numel, 1);
        assert_int_equal(fa_st_find(st, "empty")->numel, 0);

        /* float conversions on read */
        float out[3];
        assert_int_equal(fa_st_read_f32(st, fa_st_find(st, "half"), out, 3, &err), 0);
        assert_true(out[0] == 1.0f && out[1] == -2.0f && out[2] == 65504.0f);
        assert_int_equal(fa_st_read_f32(st, fa_st_find(st, "brain"), out, 2, &err), 0);
        assert_true(out[0] == 1.0f && out[1] == -5.0f);
        assert_int_equal(fa_st_read_f32(st, fa_st_find(st, "layer.weight"), out, 3, &err),
                         FA_ERR_INVAL);
        assert_non_null(strstr(err.msg, "'layer.weight' has 6 elements"));
        assert_int_equal(fa_st_read_f32(st, fa_st_find(st, "ints"), out, 3, &err), FA_ERR_INVAL);
        assert_int_equal(fa_st_read_f32(st, fa_st_find(st, "ints"), out, 4, &err), FA_ERR_INVAL);
        assert_non_null(strstr(err.msg, "'ints' has dtype I32"));
        uint8_t small[4];
        assert_int_equal(fa_st_read(st, fa_st_find(st, "layer.weight"), small, 4, &err),
                         FA_ERR_INVAL);
        fa_st_del(st);
    }
    free(raw);
}

static void test_streaming_large_file(void **state)
{
    /* 2 tensors, 12 MiB of data written in odd-sized chunks. */
    char path[300];
    size_t n1 = 3u << 20, n2 = 1000;
    uint64_t s1[2] = {3 << 10, 1 << 10}, s2[1] = {n2};
    float *a = malloc(n1 * sizeof(float)), *b = malloc(n2 * sizeof(float));
    float *back = malloc(n1 * sizeof(float));
    fa_st_writer *w;
    fa_safetensors *st;
    fa_error err;
    const uint8_t *hdr;
    size_t hdr_len;

    for (size_t i = 0; i < n1; i++)
        a[i] = (float)i * 0.5f;
    for (size_t i = 0; i < n2; i++)
        b[i] = -(float)i;
    snprintf(path, sizeof(path), "%s/big.safetensors", tmpdir);
    assert_int_equal(fa_st_writer_new(&w, &err), 0);
    assert_int_equal(fa_st_writer_add(w, "a", FA_ST_F32, 2, s1, &err), 0);
    assert_int_equal(fa_st_writer_add(w, "b", FA_ST_F32, 1, s2, &err), 0);
    assert_int_equal(fa_st_writer_header(w, &hdr, &hdr_len, &err), 0);
    assert_int_equal(fa_st_writer_total_size(w), hdr_len + (n1 + n2) * 4);
    assert_int_equal(fa_st_writer_add(w, "c", FA_ST_F32, 1, s2, &err), FA_ERR_STATE);
    assert_int_equal(fa_st_writer_metadata(w, "k", "v", &err), FA_ERR_STATE);
    assert_int_equal(fa_st_writer_write(w, a, 4, &err), FA_ERR_STATE); /* not open */
    assert_int_equal(fa_st_writer_open(w, path, 0600, &err), 0);
    /* concatenated data stream, written in chunks of 999 983 bytes */
    uint8_t *all = malloc((n1 + n2) * 4);
    memcpy(all, a, n1 * 4);
    memcpy(all + n1 * 4, b, n2 * 4);
    for (size_t off = 0; off < (n1 + n2) * 4; off += 999983) {
        size_t len = (n1 + n2) * 4 - off < 999983 ? (n1 + n2) * 4 - off : 999983;
        assert_int_equal(fa_st_writer_write(w, all + off, len, &err), 0);
    }
    assert_int_equal(fa_st_writer_write(w, all, 1, &err), FA_ERR_RANGE);
    assert_int_equal(fa_st_writer_commit(w, &err), 0);
    fa_st_writer_del(w);

    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    assert_int_equal(fa_st_open(&st, path, &err), 0);
    assert_int_equal(fa_st_read_f32(st, fa_st_find(st, "a"), back, n1, &err), 0);
    assert_memory_equal(back, a, n1 * 4);
    assert_int_equal(fa_st_read_f32(st, fa_st_find(st, "b"), back, n2, &err), 0);
    assert_memory_equal(back, b, n2 * 4);
    fa_st_del(st);
    free(all);
    free(a);
    free(b);
    free(back);
}

static void test_writer_errors(void **state)
{
    char path[300];
    uint64_t s[1] = {4}, huge[2] = {1ull << 62, 1ull << 40};
    float d[4] = {0};
    fa_st_writer *w;
    fa_error err;

    snprintf(path, sizeof(path), "%s/short.safetensors", tmpdir);
    assert_int_equal(fa_st_writer_new(&w, &err), 0);
    assert_int_equal(fa_st_writer_add(w, "x", FA_ST_F32, 1, s, &err), 0);
    assert_int_equal(fa_st_writer_add(w, "x", FA_ST_F32, 1, s, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "duplicate tensor 'x'"));
    assert_int_equal(fa_st_writer_add(w, "__metadata__", FA_ST_F32, 1, s, &err), FA_ERR_INVAL);
    assert_int_equal(fa_st_writer_add(w, "", FA_ST_F32, 1, s, &err), FA_ERR_INVAL);
    assert_int_equal(fa_st_writer_add(w, "big", FA_ST_F32, 2, huge, &err), FA_ERR_INVAL);
    assert_int_equal(fa_st_writer_add(w, "bad", (fa_st_dtype)99, 1, s, &err), FA_ERR_INVAL);
    assert_int_equal(fa_st_writer_add(w, "deep", FA_ST_F32, 9, huge, &err), FA_ERR_INVAL);
    assert_int_equal(fa_st_writer_metadata(w, "k", "\xff\xfe", &err), FA_ERR_INVAL);
    assert_int_equal(fa_st_writer_add(w, "y", FA_ST_F32, 1, s, &err), 0);
    assert_int_equal(fa_st_writer_open(w, path, 0644, &err), 0);
    assert_int_equal(fa_st_writer_write(w, d, 16, &err), 0);
    assert_int_equal(fa_st_writer_write(w, d, 8, &err), 0);
    /* y is short: commit refuses and the destination never appears */
    assert_int_equal(fa_st_writer_commit(w, &err), FA_ERR_RANGE);
    assert_non_null(strstr(err.msg, "tensor 'y' incomplete"));
    fa_st_writer_del(w);
    assert_int_equal(access(path, F_OK), -1);

    /* an abandoned writer leaves no file or temporary behind */
    assert_int_equal(fa_st_writer_new(&w, &err), 0);
    assert_int_equal(fa_st_writer_add(w, "x", FA_ST_F32, 1, s, &err), 0);
    assert_int_equal(fa_st_writer_open(w, path, 0644, &err), 0);
    fa_st_writer_del(w);
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "ls %s | grep -q short", tmpdir);
    assert_int_not_equal(system(cmd), 0);
    fa_st_writer_del(NULL);
    fa_st_del(NULL);
}

/* The four tensors of the put tests: a, an empty one, c (the largest) and
 * d, with bytes that differ everywhere. */
static const uint64_t put_shape[4] = {1000, 0, 3000, 10};
static uint8_t put_data[4][3000];

static fa_st_writer *put_writer(int hash)
{
    const char *names[4] = {"a", "e", "c", "d"};
    fa_st_writer *w;
    fa_error err;
    for (int t = 0; t < 4; t++)
        for (int i = 0; i < 3000; i++)
            put_data[t][i] = (uint8_t)(i * 7 + t * 31 + (i >> 8));
    assert_int_equal(fa_st_writer_new(&w, &err), 0);
    for (int t = 0; t < 4; t++)
        assert_int_equal(fa_st_writer_add(w, names[t], FA_ST_U8, 1, &put_shape[t], &err), 0);
    assert_int_equal(fa_st_writer_metadata(w, "k", "v", &err), 0);
    if (hash == 1)
        assert_int_equal(fa_st_writer_hash_sha256(w, &err), 0);
    if (hash == 2)
        assert_int_equal(fa_st_writer_hash_crc32c(w, &err), 0);
    return w;
}

static uint8_t *slurp(const char *path, size_t *len)
{
    uint8_t *b;
    fa_error err;
    assert_int_equal(fa_file_read_all(path, &b, len, 1 << 20, &err), 0);
    return b;
}

/* fa_st_writer_put: tensors written in any order and interleaved, each in
 * order, give the file fa_st_writer_write gives, and the writer's SHA-256
 * is that file's whatever the order (bytes written ahead are read back);
 * over a longer spare the file is cut after the furthest byte. */
static void test_writer_put_any_order(void **state)
{
    char ref[300], path[300], spare[300];
    uint8_t sha[32], want[32], *rb, *b;
    size_t rlen, len;
    fa_st_writer *w;
    fa_error err;
    (void)state;

    snprintf(ref, sizeof(ref), "%s/ref.safetensors", tmpdir);
    w = put_writer(1);
    assert_int_equal(fa_st_writer_open(w, ref, 0644, &err), 0);
    for (int t = 0; t < 4; t++)
        assert_int_equal(fa_st_writer_write(w, put_data[t], put_shape[t], &err), 0);
    assert_int_equal(fa_st_writer_commit(w, &err), 0);
    assert_int_equal(fa_st_writer_sha256(w, sha), 0);
    fa_st_writer_del(w);
    rb = slurp(ref, &rlen);
    assert_int_equal(fa_sha256(want, rb, rlen), 0);
    assert_memory_equal(sha, want, 32);

    /* Orders: c first whole, then a and d interleaved in pieces; d then a
     * then c (each ahead of the hash); a piece of each in turn.  Two of
     * them over a spare three times as long as the file.  Each hashed with
     * SHA-256, then with CRC-32C. */
    for (int order = 0; order < 6; order++) {
        const int kind = order < 3 ? 1 : 2;
        uint32_t crc = 0;
        static const int seq[6][4] = {{2, 0, 3, -1}, {3, 0, 2, -1}, {0, 2, 3, -1},
                                      {2, 0, 3, -1}, {3, 0, 2, -1}, {0, 2, 3, -1}};
        snprintf(path, sizeof(path), "%s/put%d.safetensors", tmpdir, order);
        snprintf(spare, sizeof(spare), "%s/spare%d", tmpdir, order);
        if (order % 3 > 0) {
            uint8_t junk[3 * 4200];
            memset(junk, 0xee, sizeof(junk));
            assert_int_equal(fa_file_write_atomic(spare, junk, sizeof(junk), 0644, &err), 0);
        }
        w = put_writer(kind);
        assert_int_equal(fa_st_writer_open_spare(w, path, order % 3 > 0 ? spare : NULL, 0644, &err),
                         0);
        if (order % 3 == 0) {
            assert_int_equal(fa_st_writer_put(w, 2, 0, put_data[2], 3000, &err), 0);
            for (uint64_t off = 0; off < 1000; off += 100) {
                assert_int_equal(fa_st_writer_put(w, 0, off, put_data[0] + off, 100, &err), 0);
                if (off < 10)
                    assert_int_equal(fa_st_writer_put(w, 3, off, put_data[3] + off, 5, &err), 0);
                if (off == 0)
                    assert_int_equal(fa_st_writer_put(w, 3, 5, put_data[3] + 5, 5, &err), 0);
            }
        } else if (order % 3 == 1) {
            for (int k = 0; seq[order][k] >= 0; k++) {
                int t = seq[order][k];
                assert_int_equal(fa_st_writer_put(w, (size_t)t, 0, put_data[t], put_shape[t], &err),
                                 0);
            }
        } else {
            for (uint64_t off = 0; off < 3000; off += 250)
                for (int t = 0; t < 4; t++)
                    if (off < put_shape[t]) {
                        size_t m = put_shape[t] - off < 250 ? (size_t)(put_shape[t] - off) : 250;
                        assert_int_equal(fa_st_writer_put(w, (size_t)t, off, put_data[t] + off, m,
                                                          &err),
                                         0);
                    }
        }
        assert_int_equal(fa_st_writer_sha256(w, sha), FA_ERR_STATE); /* not committed yet */
        assert_int_equal(fa_st_writer_crc32c(w, &crc), FA_ERR_STATE);
        assert_int_equal(fa_st_writer_commit(w, &err), 0);
        if (kind == 1) {
            assert_int_equal(fa_st_writer_sha256(w, sha), 0);
            assert_memory_equal(sha, want, 32);
            assert_int_equal(fa_st_writer_crc32c(w, &crc), FA_ERR_STATE);
        } else {
            assert_int_equal(fa_st_writer_crc32c(w, &crc), 0);
            assert_int_equal(crc, fa_crc32c(0, rb, rlen));
            assert_int_equal(fa_st_writer_sha256(w, sha), FA_ERR_STATE);
        }
        fa_st_writer_del(w);
        b = slurp(path, &len);
        assert_int_equal(len, rlen);
        assert_memory_equal(b, rb, rlen);
        free(b);
        assert_int_equal(access(spare, F_OK), -1); /* renamed into place */
    }
    free(rb);
    /* one digest a writer */
    w = put_writer(1);
    assert_int_equal(fa_st_writer_hash_crc32c(w, &err), FA_ERR_STATE);
    assert_non_null(strstr(err.msg, "already hashing with SHA-256"));
    fa_st_writer_del(w);
    w = put_writer(2);
    assert_int_equal(fa_st_writer_hash_sha256(w, &err), FA_ERR_STATE);
    assert_non_null(strstr(err.msg, "already hashing with CRC-32C"));
    fa_st_writer_del(w);
}

/* What fa_st_writer_put refuses, each named. */
static void test_writer_put_errors(void **state)
{
    char path[300];
    uint8_t sha[32];
    fa_st_writer *w;
    fa_error err;
    (void)state;

    snprintf(path, sizeof(path), "%s/bad.safetensors", tmpdir);
    w = put_writer(0);
    assert_int_equal(fa_st_writer_put(w, 0, 0, put_data[0], 1, &err), FA_ERR_STATE); /* not open */
    assert_int_equal(fa_st_writer_open(w, path, 0644, &err), 0);
    assert_int_equal(fa_st_writer_hash_sha256(w, &err), FA_ERR_STATE); /* too late */
    assert_int_equal(fa_st_writer_put(w, 4, 0, put_data[0], 1, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "no tensor 4"));
    assert_int_equal(fa_st_writer_put(w, 2, 0, put_data[2], 100, &err), 0);
    assert_int_equal(fa_st_writer_put(w, 2, 50, put_data[2], 10, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "'c': bytes at 50 written when 100 are"));
    assert_int_equal(fa_st_writer_put(w, 3, 0, put_data[3], 11, &err), FA_ERR_RANGE);
    assert_non_null(strstr(err.msg, "'d': 1 more bytes than it holds"));
    /* c and d whole, a not: the commit names a, the first one short */
    assert_int_equal(fa_st_writer_put(w, 2, 100, put_data[2] + 100, 2900, &err), 0);
    assert_int_equal(fa_st_writer_put(w, 3, 0, put_data[3], 10, &err), 0);
    assert_int_equal(fa_st_writer_put(w, 0, 0, put_data[0], 999, &err), 0);
    /* fa_st_writer_write continues the first tensor not whole, a */
    assert_int_equal(fa_st_writer_write(w, put_data[0], 2, &err), FA_ERR_RANGE);
    assert_int_equal(fa_st_writer_commit(w, &err), FA_ERR_RANGE);
    assert_non_null(strstr(err.msg, "tensor 'a' incomplete"));
    assert_int_equal(fa_st_writer_write(w, put_data[0] + 999, 1, &err), 0);
    assert_int_equal(fa_st_writer_commit(w, &err), 0);
    assert_int_equal(fa_st_writer_sha256(w, sha), FA_ERR_STATE); /* it did not hash */
    fa_st_writer_del(w);
}

static void test_header_only(void **state)
{
    const char *h = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    fa_safetensors *st;
    fa_error err;
    float x[2];

    assert_int_equal(fa_st_parse_header(&st, (const uint8_t *)h, strlen(h), 8, "hdr", &err), 0);
    assert_int_equal(fa_st_count(st), 1);
    assert_null(fa_st_data(st, fa_st_at(st, 0)));
    assert_int_equal(fa_st_read(st, fa_st_at(st, 0), x, sizeof(x), &err), FA_ERR_STATE);
    fa_st_del(st);
    assert_int_equal(fa_st_parse_header(&st, (const uint8_t *)h, strlen(h), 9, "hdr", &err),
                     FA_ERR_PARSE);
    assert_non_null(strstr(err.msg, "trailing garbage"));
}

/* fa_st_read_range: any byte range of a tensor, from a file and from memory,
 * equal to the same bytes of fa_st_read; ranges past the tensor refused. */
static void test_read_range(void **state)
{
    char path[300];
    uint8_t a[37], b[300], whole[300], got[300];
    uint64_t sa[1] = {37}, sb[1] = {75};
    fa_st_view v[] = {{"a", FA_ST_U8, 1, sa, a, NULL, NULL},
                      {"b", FA_ST_F32, 1, sb, b, NULL, NULL}};
    fa_safetensors *st;
    fa_error err;
    uint8_t *raw;
    size_t raw_len;

    for (size_t i = 0; i < sizeof(a); i++)
        a[i] = (uint8_t)(200 + i);
    for (size_t i = 0; i < sizeof(b); i++)
        b[i] = (uint8_t)(i * 7 + 1);
    snprintf(path, sizeof(path), "%s/range.safetensors", tmpdir);
    assert_int_equal(fa_st_save(path, 0644, v, 2, NULL, 0, &err), 0);
    assert_int_equal(fa_file_read_all(path, &raw, &raw_len, 1 << 20, &err), 0);
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 0)
            assert_int_equal(fa_st_open(&st, path, &err), 0);
        else
            assert_int_equal(fa_st_parse(&st, raw, raw_len, "mem", &err), 0);
        const fa_st_tensor *tb = fa_st_find(st, "b"), *ta = fa_st_find(st, "a");
        assert_int_equal(fa_st_read(st, tb, whole, sizeof(whole), &err), 0);
        for (uint64_t off = 0; off <= 300; off += 13)
            for (size_t len = 0; off + len <= 300; len += 29) {
                memset(got, 0xee, sizeof(got));
                assert_int_equal(fa_st_read_range(st, tb, off, got, len, &err), 0);
                if (len)
                    assert_memory_equal(got, whole + off, len);
                assert_int_equal(got[len], 0xee); /* nothing past len written */
            }
        assert_int_equal(fa_st_read_range(st, ta, 36, got, 1, &err), 0);
        assert_int_equal(got[0], 236);
        assert_int_equal(fa_st_read_range(st, tb, 299, got, 2, &err), FA_ERR_INVAL);
        assert_non_null(strstr(err.msg, "tensor 'b': bytes [299, 301) run past its 300 bytes"));
        assert_int_equal(fa_st_read_range(st, tb, 301, got, 0, &err), FA_ERR_INVAL);
        assert_int_equal(fa_st_read_range(st, tb, UINT64_MAX, got, 2, &err), FA_ERR_INVAL);
        assert_int_equal(fa_st_read_range(st, ta, 0, got, 38, &err), FA_ERR_INVAL);
        assert_int_equal(fa_st_read_range(st, tb, 300, got, 0, &err), 0);
        fa_st_del(st);
    }
    free(raw);

    /* a file that shrank under the reader: FA_ERR_IO naming the tensor */
    assert_int_equal(fa_st_open(&st, path, &err), 0);
    assert_int_equal(truncate(path, (off_t)(raw_len - 100)), 0);
    assert_int_equal(fa_st_read_range(st, fa_st_find(st, "b"), 250, got, 50, &err), FA_ERR_IO);
    assert_non_null(strstr(err.msg, "tensor 'b': read of bytes [250, 300)"));
    fa_st_del(st);

    /* a header alone has no data */
    const char *h = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    assert_int_equal(fa_st_parse_header(&st, (const uint8_t *)h, strlen(h), 8, "hdr", &err), 0);
    assert_int_equal(fa_st_read_range(st, fa_st_at(st, 0), 0, got, 4, &err), FA_ERR_STATE);
    fa_st_del(st);
}

static void test_validation_errors(void **state)
{
    const char *ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                     "\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[16,19]}}";
    expect_parse(ok, 19, 0, NULL);
    /* padding spaces after the JSON are allowed, and an empty file of tensors */
    expect_parse("{}   ", 0, 0, NULL);
    expect_parse("{\"__metadata__\":{\"k\":\"v\"}}", 0, 0, NULL);

    expect_parse(ok, 18, FA_ERR_PARSE, "tensor 'b': data_offsets [16, 19] run past the end");
    expect_parse(ok, 20, FA_ERR_PARSE, "cover 19 bytes but the data section has 20");
    expect_parse("[1,2]", 0, FA_ERR_PARSE, "does not start with '{'");
    expect_parse("{\"a\":", 0, FA_ERR_PARSE, "not valid JSON");
    expect_parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                 "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                 8, FA_ERR_PARSE, "duplicate");
    expect_parse("{\"a\":{\"dtype\":\"C64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8,
                 FA_ERR_UNSUPPORTED, "tensor 'a': unsupported dtype 'C64'");
    expect_parse("{\"a\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, FA_ERR_PARSE,
                 "tensor 'a': dtype is not a string");
    expect_parse("{\"a\":[1]}", 0, FA_ERR_PARSE, "tensor 'a': entry is not a JSON object");
    expect_parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, FA_ERR_PARSE,
                 "tensor 'a': missing 'data_offsets'");
    expect_parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4,
                 FA_ERR_PARSE, "tensor 'a': unknown field 'x'");
    expect_parse("{\"a\":{\"dtype\":\"F32\",\"shape\":3,\"data_offsets\":[0,12]}}", 12,
                 FA_ERR_PARSE, "tensor 'a': shape is not an array");
    expect_parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
                 FA_ERR_PARSE, "tensor 'a': shape[0] is not a non-negative integer");
    expect_parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", 4,
                 FA_ERR_PARSE, "shape[0]");
    expect_parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                 "\"data_offsets\":[0,4]}}",
                 4, FA_ERR_PARSE, "tensor 'a': 9 dimensions");
    expect_parse("{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,16],"
                 "\"data_offsets\":[0,0]}}",
                 0, FA_ERR_PARSE, "tensor 'a': shape overflows");
    expect_parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4,
                 FA_ERR_PARSE, "tensor 'a': data_offsets is not [begin, end]");
    expect_parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4,
                 FA_ERR_PARSE, "end before begin");
    expect_parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 20,
                 FA_ERR_PARSE, "tensor 'a': F32 shape of 6 elements needs 24 bytes but "
                               "data_offsets [0, 20] hold 20");
    expect_parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                 12, FA_ERR_PARSE, "tensor 'b': data_offsets [4, 12] overlap tensor 'a'");
    expect_parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                 12, FA_ERR_PARSE, "tensor 'b': data_offsets [8, 12] leave a gap of 4 bytes");
    expect_parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
                 FA_ERR_PARSE, "gap of 4 bytes after the start of the data");
    expect_parse("{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                 FA_ERR_PARSE, "tensor name of 0 bytes");
    expect_parse("{\"__metadata__\":[]}", 0, FA_ERR_PARSE, "__metadata__ is not a JSON object");
    expect_parse("{\"__metadata__\":{\"n\":5}}", 0, FA_ERR_PARSE,
                 "__metadata__ 'n': value is not a string");
    expect_parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,99999999999999999999]}}",
                 4, FA_ERR_PARSE, "not valid JSON");
}

/* Names a terminal would not show as they are, from a file anyone may
 * make: refused, and named escaped in the message; printable names of any
 * script are names.  BOOL bytes other than 0 and 1 are refused by both
 * readers. */
static void test_names_and_bools(void **state)
{
    static const struct {
        const char *json_name, *shown;
    } bad[] = {
        {"w\\u001b[2J", "'w\\x1b[2J'"},             /* clears a terminal */
        {"a\\nlevel=error", "'a\\x0alevel=error'"}, /* forges a log line */
        {"del\\u007f", "'del\\x7f'"},
        {"c1\\u009b31m", "'c1\\xc2\\x9b31m'"},            /* C1 CSI */
        {"x\\u202egpj.exe", "'x\\xe2\\x80\\xaegpj.exe'"}, /* right-to-left override */
        {"zw\\u200bsp", "'zw\\xe2\\x80\\x8bsp'"},         /* zero width space */
    };
    char json[300], path[300], out[64];
    size_t len, at;
    uint8_t *b;
    fa_safetensors *st = NULL;
    fa_st_writer *w = NULL;
    fa_error err;
    uint64_t shape[1] = {3};
    (void)state;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(json, sizeof(json),
                 "{\"%s\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                 bad[i].json_name);
        expect_parse(json, 4, FA_ERR_PARSE, bad[i].shown);
        expect_parse(json, 4, FA_ERR_PARSE, "a name must be printable UTF-8");
    }
    expect_parse("{\"caf\\u00e9 \\u6743\\u91cd.w\":{\"dtype\":\"F32\",\"shape\":[1],"
                 "\"data_offsets\":[0,4]}}",
                 4, 0, NULL);
    assert_int_equal(fa_st_name_check("ok.name-1", &at), 0);
    assert_int_equal(fa_st_name_check("", &at), FA_ERR_RANGE);
    assert_int_equal(fa_st_name_check("ab\xc3", &at), FA_ERR_PARSE); /* cut off */
    assert_int_equal(at, 2);
    assert_int_equal(fa_st_name_check("\xc0\x80", &at), FA_ERR_PARSE);     /* overlong NUL */
    assert_int_equal(fa_st_name_check("\xed\xa0\x80", &at), FA_ERR_PARSE); /* a surrogate */
    assert_string_equal(fa_st_escape(out, sizeof(out), "a\\b\x1b\xff\xc3\xa9"),
                        "a\\\\b\\x1b\\xff\xc3\xa9");
    assert_string_equal(fa_st_escape(out, 6,
                                     "ab\x1b"
                                     "cd"),
                        "ab"); /* whole escapes only */
    /* the writer refuses them too */
    assert_int_equal(fa_st_writer_new(&w, &err), 0);
    assert_int_equal(fa_st_writer_add(w, "x\ny", FA_ST_F32, 1, shape, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "'x\\x0ay'"));
    fa_st_writer_del(w);

    /* BOOL: 0 and 1 only, in memory and from a file */
    snprintf(json, sizeof(json),
             "{\"mask\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[0,3]}}");
    b = make_raw(json, 3, &len); /* data bytes 0, 1, 2 */
    assert_int_equal(fa_st_parse(&st, b, len, "m.safetensors", &err), FA_ERR_PARSE);
    assert_null(st);
    assert_non_null(strstr(err.msg, "tensor 'mask' is BOOL but its element 2 is 2"));
    snprintf(path, sizeof(path), "%s/bool.safetensors", tmpdir);
    assert_int_equal(fa_file_write_atomic(path, b, len, 0644, &err), 0);
    assert_int_equal(fa_st_open(&st, path, &err), FA_ERR_PARSE);
    assert_null(st);
    assert_non_null(strstr(err.msg, "element 2 is 2"));
    b[len - 1] = 1;
    assert_int_equal(fa_st_parse(&st, b, len, "m.safetensors", &err), 0);
    fa_st_del(st);
    assert_int_equal(fa_file_write_atomic(path, b, len, 0644, &err), 0);
    assert_int_equal(fa_st_open(&st, path, &err), 0);
    fa_st_del(st);
    free(b);
}

static void test_prefix_errors(void **state)
{
    uint8_t b[16] = {0};
    fa_safetensors *st;
    fa_error err;
    char path[300];

    assert_int_equal(fa_st_parse(&st, b, 7, "t", &err), FA_ERR_PARSE);
    assert_non_null(strstr(err.msg, "too short"));
    /* N = 2^63: bounded before any allocation */
    b[7] = 0x80;
    assert_int_equal(fa_st_parse(&st, b, 16, "t", &err), FA_ERR_TOOBIG);
    assert_non_null(strstr(err.msg, "exceeds the limit"));
    /* N = 100, 8 bytes available */
    memset(b, 0, sizeof(b));
    b[0] = 100;
    assert_int_equal(fa_st_parse(&st, b, 16, "t", &err), FA_ERR_PARSE);
    assert_non_null(strstr(err.msg, "header length 100 runs past the end of the file (16 bytes)"));

    /* the same through a file, and a missing file */
    snprintf(path, sizeof(path), "%s/trunc.safetensors", tmpdir);
    assert_int_equal(fa_file_write_atomic(path, b, 16, 0644, &err), 0);
    assert_int_equal(fa_st_open(&st, path, &err), FA_ERR_PARSE);
    assert_non_null(strstr(err.msg, "trunc.safetensors: header length 100"));
    snprintf(path, sizeof(path), "%s/none.safetensors", tmpdir);
    assert_int_equal(fa_st_open(&st, path, &err), FA_ERR_NOTFOUND);
    assert_int_equal(fa_st_open(&st, tmpdir, &err), FA_ERR_IO);

    /* a file that loses its tail after its header was read */
    float d[4] = {1, 2, 3, 4};
    uint64_t s[1] = {4};
    fa_st_view v = {"w", FA_ST_F32, 1, s, d, NULL, NULL};
    snprintf(path, sizeof(path), "%s/shrink.safetensors", tmpdir);
    assert_int_equal(fa_st_save(path, 0644, &v, 1, NULL, 0, &err), 0);
    assert_int_equal(fa_st_open(&st, path, &err), 0);
    assert_int_equal(truncate(path, (off_t)fa_st_data_offset(st) + 4), 0);
    assert_int_equal(fa_st_read(st, fa_st_at(st, 0), d, sizeof(d), &err), FA_ERR_IO);
    assert_non_null(strstr(err.msg, "tensor 'w'"));
    fa_st_del(st);
}

/* Model files of other formats are named, not parsed: a pickle (what
 * torch.save wrote before PyTorch 1.6; protocol 4 as pickle.dump writes
 * it), a zip (torch.save since 1.6); and a safetensors file whose length
 * bytes look like a pickle's opening is still safetensors. */
static void test_foreign_formats(void **state)
{
    static const uint8_t legacy[] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20};
    static const uint8_t proto4[] = {0x80, 0x04, 0x95, 0x2a, 0, 0, 0, 0, 0, 0, 0, 0x7d};
    static const uint8_t zip[] = {'P', 'K', 3, 4, 0x14, 0, 0, 8, 0, 0, 0, 0};
    fa_safetensors *st;
    fa_error err;
    char path[300];
    uint8_t *buf;
    size_t n;

    (void)state;
    assert_int_equal(fa_st_parse(&st, legacy, sizeof(legacy), "m.pt", &err), FA_ERR_PARSE);
    assert_non_null(strstr(err.msg, "m.pt is a Python pickle"));
    assert_non_null(strstr(err.msg, "safetensors only"));
    assert_int_equal(fa_st_parse(&st, proto4, sizeof(proto4), "m.pkl", &err), FA_ERR_PARSE);
    assert_non_null(strstr(err.msg, "pickle"));
    snprintf(path, sizeof(path), "%s/model.pt", tmpdir);
    assert_int_equal(fa_file_write_atomic(path, zip, sizeof(zip), 0644, &err), 0);
    assert_int_equal(fa_st_open(&st, path, &err), FA_ERR_PARSE);
    assert_non_null(strstr(err.msg, "model.pt is a zip archive (torch.save"));
    assert_non_null(fa_st_foreign_format((const uint8_t *)"\x93NUMPY\x01\x00v\x00", 10));
    assert_non_null(fa_st_foreign_format((const uint8_t *)"\x89HDF\r\n\x1a\n\x00", 9));
    assert_null(fa_st_foreign_format((const uint8_t *)"\x10\x00\x00\x00\x00\x00\x00\x00{", 9));

    /* A header padded to 0x280 bytes: its length opens with 80 02, as a
     * protocol-2 pickle does, and it is read as the safetensors it is. */
    n = 8 + 0x280;
    buf = malloc(n);
    assert_non_null(buf);
    memset(buf, ' ', n);
    memset(buf, 0, 8);
    buf[0] = 0x80;
    buf[1] = 0x02;
    memcpy(buf + 8, "{}", 2);
    assert_int_equal(fa_st_parse(&st, buf, n, "padded", &err), 0);
    assert_int_equal(fa_st_count(st), 0);
    fa_st_del(st);
    free(buf);
}

static void test_half_conversions(void **state)
{
    assert_int_equal(fa_st_f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(fa_st_f32_to_f16(-2.0f), 0xc000);
    assert_int_equal(fa_st_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(fa_st_f32_to_f16(65520.0f), 0x7c00); /* rounds to inf */
    assert_int_equal(fa_st_f32_to_f16(INFINITY), 0x7c00);
    assert_int_equal(fa_st_f32_to_f16(-0.0f), 0x8000);
    assert_int_equal(fa_st_f32_to_f16(6.103515625e-05f), 0x0400); /* smallest normal */
    assert_int_equal(fa_st_f32_to_f16(5.9604644775390625e-08f), 0x0001); /* smallest subnormal */
    assert_int_equal(fa_st_f32_to_f16(1.0f + 1.0f / 2048), 0x3c00);      /* tie to even */
    assert_int_equal(fa_st_f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);      /* tie to even, up */
    assert_true(isnan(fa_st_f16_to_f32(fa_st_f32_to_f16(NAN))));
    assert_true(fa_st_f16_to_f32(0x0001) == 5.9604644775390625e-08f);
    assert_true(fa_st_f16_to_f32(0x03ff) == 6.097555160522461e-05f);
    assert_true(fa_st_f16_to_f32(0xfc00) == -INFINITY);
    /* every finite half survives the round trip */
    for (uint32_t h = 0; h < 0x10000; h++)
        if ((h & 0x7c00) != 0x7c00)
            assert_int_equal(fa_st_f32_to_f16(fa_st_f16_to_f32((uint16_t)h)), h);

    assert_int_equal(fa_st_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(fa_st_f32_to_bf16(-5.0f), 0xc0a0);
    assert_true(fa_st_bf16_to_f32(0x3f80) == 1.0f);
    assert_int_equal(fa_st_f32_to_bf16(1.00390625f), 0x3f80); /* tie to even */
    assert_true(isnan(fa_st_bf16_to_f32(fa_st_f32_to_bf16(NAN))));
    for (uint32_t h = 0; h < 0x10000; h++)
        if ((h & 0x7f80) != 0x7f80)
            assert_int_equal(fa_st_f32_to_bf16(fa_st_bf16_to_f32((uint16_t)h)), h);

    fa_st_dtype d;
    assert_int_equal(fa_st_dtype_parse("BF16", &d), 0);
    assert_int_equal(d, FA_ST_BF16);
    assert_int_equal(fa_st_dtype_parse("bf16", &d), FA_ERR_UNSUPPORTED);
    assert_null(fa_st_dtype_name((fa_st_dtype)42));
    assert_int_equal(fa_st_dtype_size(FA_ST_I64), 8);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_all_dtypes), cmocka_unit_test(test_streaming_large_file),
        cmocka_unit_test(test_writer_errors),         cmocka_unit_test(test_header_only),
        cmocka_unit_test(test_validation_errors),     cmocka_unit_test(test_prefix_errors),
        cmocka_unit_test(test_half_conversions),      cmocka_unit_test(test_read_range),
        cmocka_unit_test(test_writer_put_any_order),  cmocka_unit_test(test_writer_put_errors),
        cmocka_unit_test(test_names_and_bools),       cmocka_unit_test(test_foreign_formats),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
