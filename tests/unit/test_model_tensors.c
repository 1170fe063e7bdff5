/* Unit tests of model/tensors: the table read from safetensors files of
 * every dtype and rank, the digests against the byte layout the header
 * specifies (hashed here independently, with libsodium), tensor selection
 * and its typo guard, the fedagg.federated metadata (exact round trip,
 * every refusal leaving the table as it was), checking and reading a file
 * against the table, every element conversion against known values, the
 * views that write a model (every byte of the result), and a table of
 * 10^5 tensors. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <jansson.h>
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/fa_file.h"
#include "common/fa_safetensors.h"
#include "model/tensors.h"

static char tmpdir[256];

static int setup(void **state)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/fa_test_tensors.XXXXXX");
    return mkdtemp(tmpdir) && sodium_init() >= 0 ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *tpath(const char *name)
{
    static char buf[4][400];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof(buf[k]), "%s/%s", tmpdir, name);
    return buf[k];
}

static float f32_of(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static uint32_t bits_of(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

/* A small deterministic generator for test data. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Writes views[0..n) to name in tmpdir and opens the file. */
static fa_safetensors *save_open(const char *name, const fa_st_view *v, size_t n,
                                 const char *const *meta, size_t n_meta)
{
    fa_safetensors *st;
    fa_error err;
    if (fa_st_save(tpath(name), 0644, v, n, meta, n_meta, &err) != 0)
        fail_msg("save %s: %s", name, err.msg);
    if (fa_st_open(&st, tpath(name), &err) != 0)
        fail_msg("open %s: %s", name, err.msg);
    return st;
}

/* A table of (name, dtype, ndim, shape) rows. */
struct row {
    const char *name;
    fa_st_dtype dtype;
    unsigned ndim;
    uint64_t shape[FA_ST_MAX_DIMS];
};

static fa_tensors *table_of(const struct row *r, size_t n)
{
    fa_tensors *t;
    fa_error err;
    assert_int_equal(fa_tensors_new(&t, &err), 0);
    for (size_t i = 0; i < n; i++)
        if (fa_tensors_add(t, r[i].name, r[i].dtype, r[i].ndim, r[i].shape, &err) != 0)
            fail_msg("add %s: %s", r[i].name, err.msg);
    return t;
}

/* Federated flags and ranges of every tensor, to show a table unchanged. */
struct snap {
    size_t n;
    int fed[64];
    uint32_t range[64];
    uint64_t off[64];
    uint8_t digest[32];
};

static void take(const fa_tensors *t, struct snap *s)
{
    s->n = fa_tensors_count(t);
    assert_true(s->n <= 64);
    for (size_t i = 0; i < s->n; i++) {
        s->fed[i] = fa_tensors_at(t, i)->federated;
        s->range[i] = bits_of(fa_tensors_at(t, i)->range);
        s->off[i] = fa_tensors_at(t, i)->fed_offset;
    }
    assert_int_equal(fa_tensors_digest(t, s->digest, NULL), 0);
}

static void assert_unchanged(const fa_tensors *t, const struct snap *s)
{
    struct snap now;
    take(t, &now);
    assert_int_equal(now.n, s->n);
    assert_memory_equal(now.fed, s->fed, s->n * sizeof(int));
    assert_memory_equal(now.range, s->range, s->n * sizeof(uint32_t));
    assert_memory_equal(now.off, s->off, s->n * sizeof(uint64_t));
    assert_memory_equal(now.digest, s->digest, 32);
}

/* call fails with code and a message (in err) containing want. */
#define ASSERT_ERR(call, code, want)                                                               \
    do {                                                                                           \
        memset(&err, 0, sizeof(err));                                                              \
        int rc_ = (call);                                                                          \
        if (rc_ != (code) || !strstr(err.msg, (want)))                                             \
            fail_msg("%s: got %d '%s', want %d '%s'", #call, rc_, err.msg, (code), (want));        \
    } while (0)

/* ---------------------------------------------------------------------- */

/* Every dtype, every rank 0..8: the table is the file's, in file order. */
static void test_from_st_every_dtype_and_rank(void **state)
{
    fa_st_view v[FA_ST_NDTYPES * (FA_ST_MAX_DIMS + 1)];
    uint64_t shapes[FA_ST_NDTYPES * (FA_ST_MAX_DIMS + 1)][FA_ST_MAX_DIMS];
    char names[FA_ST_NDTYPES * (FA_ST_MAX_DIMS + 1)][32];
    static uint8_t data[FA_ST_NDTYPES * (FA_ST_MAX_DIMS + 1)][8 * 64];
    size_t n = 0;
    uint64_t total = 0;
    fa_tensors *t;
    fa_error err;

    for (int dt = 0; dt < FA_ST_NDTYPES; dt++)
        for (unsigned nd = 0; nd <= FA_ST_MAX_DIMS; nd++, n++) {
            uint64_t numel = 1;
            for (unsigned d = 0; d < nd; d++) {
                shapes[n][d] = d < 3 ? d + 2 - (dt % 2) : 1; /* 1..3, then 1s */
                numel *= shapes[n][d];
            }
            snprintf(names[n], sizeof(names[n]), "t.%s.%u", fa_st_dtype_name((fa_st_dtype)dt), nd);
            for (size_t b = 0; b < sizeof(data[n]); b++)
                data[n][b] = dt == FA_ST_BOOL ? (uint8_t)(b & 1) : (uint8_t)(b * 31 + n);
            v[n] = (fa_st_view){names[n], (fa_st_dtype)dt, nd, shapes[n], data[n], NULL, NULL};
            total += numel * fa_st_dtype_size((fa_st_dtype)dt);
        }
    fa_safetensors *st = save_open("every.safetensors", v, n, NULL, 0);
    assert_int_equal(fa_tensors_from_st(&t, st, &err), 0);
    assert_int_equal(fa_tensors_count(t), n);
    assert_int_equal(fa_tensors_total_bytes(t), total);
    assert_int_equal(fa_tensors_fed_numel(t), 0);
    assert_int_equal(fa_tensors_fed_count(t), 0);
    for (size_t i = 0; i < n; i++) {
        const fa_tensor *x = fa_tensors_at(t, i);
        uint64_t numel = 1;
        assert_string_equal(x->name, names[i]); /* file order is writing order */
        assert_int_equal(x->dtype, v[i].dtype);
        assert_int_equal(x->ndim, v[i].ndim);
        for (unsigned d = 0; d < x->ndim; d++) {
            assert_int_equal(x->shape[d], shapes[i][d]);
            numel *= shapes[i][d];
        }
        assert_int_equal(x->numel, numel);
        assert_int_equal(x->nbytes, numel * fa_st_dtype_size(x->dtype));
        assert_int_equal(x->federated, 0);
        assert_true(x->range == 0);
        assert_ptr_equal(fa_tensors_find(t, names[i]), x);
        assert_int_equal(fa_tensors_index(t, names[i]), (long)i);
    }
    assert_null(fa_tensors_at(t, n));
    assert_null(fa_tensors_find(t, "t.F32"));
    assert_int_equal(fa_tensors_index(t, "nope"), -1);
    assert_int_equal(fa_tensors_check(t, st, "file", &err), 0);
    fa_tensors_del(t);
    fa_st_del(st);

    /* with fedagg.federated in the metadata: applied */
    const char *meta[] = {"format", "pt", FA_TENSORS_META_KEY,
                          "{\"t.F32.2\": 0.5, \"t.I16.0\": 0, \"t.BF16.8\": 2}"};
    st = save_open("every_meta.safetensors", v, n, meta, 2);
    assert_int_equal(fa_tensors_from_st(&t, st, &err), 0);
    assert_int_equal(fa_tensors_fed_count(t), 3);
    assert_true(fa_tensors_find(t, "t.F32.2")->range == 0.5f);
    assert_int_equal(fa_tensors_find(t, "t.I16.0")->federated, 1);
    assert_int_equal(fa_tensors_fed_numel(t), fa_tensors_find(t, "t.F32.2")->numel +
                                                  fa_tensors_find(t, "t.I16.0")->numel +
                                                  fa_tensors_find(t, "t.BF16.8")->numel);
    fa_tensors_del(t);
    fa_st_del(st);

    /* bad metadata: the table is refused with meta_apply's message */
    const char *bad[] = {FA_TENSORS_META_KEY, "{\"t.BOOL.1\": 1}"};
    st = save_open("every_bad.safetensors", v, n, bad, 1);
    t = (fa_tensors *)tmpdir; /* any non-NULL: must come back NULL */
    ASSERT_ERR(fa_tensors_from_st(&t, st, &err), FA_ERR_INVAL, "tensor 't.BOOL.1' is BOOL");
    assert_null(t);
    fa_st_del(st);
}

static void test_add_errors_and_clone(void **state)
{
    fa_tensors *t, *c;
    fa_error err;
    char longname[FA_ST_MAX_NAME + 2];
    uint64_t s9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1}, big[2] = {1ull << 40, 1ull << 40};
    uint64_t s2[2] = {3, 4};

    assert_int_equal(fa_tensors_new(&t, &err), 0);
    assert_int_equal(fa_tensors_add(t, "a", FA_ST_F32, 2, s2, &err), 0);
    ASSERT_ERR(fa_tensors_add(t, "", FA_ST_F32, 0, NULL, &err), FA_ERR_INVAL, "0 bytes");
    ASSERT_ERR(fa_tensors_add(t, NULL, FA_ST_F32, 0, NULL, &err), FA_ERR_INVAL, "0 bytes");
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = 0;
    ASSERT_ERR(fa_tensors_add(t, longname, FA_ST_F32, 0, NULL, &err), FA_ERR_INVAL, "1025 bytes");
    longname[FA_ST_MAX_NAME] = 0;
    assert_int_equal(fa_tensors_add(t, longname, FA_ST_F32, 0, NULL, &err), 0);
    ASSERT_ERR(fa_tensors_add(t, "a", FA_ST_I8, 0, NULL, &err), FA_ERR_INVAL,
               "duplicate tensor 'a'");
    ASSERT_ERR(fa_tensors_add(t, "__metadata__", FA_ST_F32, 0, NULL, &err), FA_ERR_INVAL,
               "tensor '__metadata__': invalid name");
    ASSERT_ERR(fa_tensors_add(t, "bad\xff", FA_ST_F32, 0, NULL, &err), FA_ERR_INVAL,
               "tensor 'bad\\xff': invalid name");
    /* names a terminal would not show as they are: refused, and shown
     * escaped in the message */
    ASSERT_ERR(fa_tensors_add(t, "w\x1b[2Jx", FA_ST_F32, 0, NULL, &err), FA_ERR_INVAL,
               "tensor 'w\\x1b[2Jx': invalid name");
    ASSERT_ERR(fa_tensors_add(t, "a\nlevel=error", FA_ST_F32, 0, NULL, &err), FA_ERR_INVAL,
               "character at byte 1: a name must be printable UTF-8");
    ASSERT_ERR(fa_tensors_add(t,
                              "rtl\xe2\x80\xae"
                              "evil",
                              FA_ST_F32, 0, NULL, &err),
               FA_ERR_INVAL, "character at byte 3");
    ASSERT_ERR(fa_tensors_add(t, "c1\xc2\x9b", FA_ST_F32, 0, NULL, &err), FA_ERR_INVAL,
               "character at byte 2");
    ASSERT_ERR(fa_tensors_add(t, "deep", FA_ST_F32, 9, s9, &err), FA_ERR_INVAL,
               "tensor 'deep': 9 dimensions (at most 8)");
    ASSERT_ERR(fa_tensors_add(t, "odd", (fa_st_dtype)FA_ST_NDTYPES, 0, NULL, &err), FA_ERR_INVAL,
               "tensor 'odd': unknown dtype");
    ASSERT_ERR(fa_tensors_add(t, "huge", FA_ST_F32, 2, big, &err), FA_ERR_INVAL,
               "tensor 'huge': shape overflows");
    uint64_t s1[1] = {1ull << 61};
    ASSERT_ERR(fa_tensors_add(t, "wide", FA_ST_F64, 1, s1, &err), FA_ERR_INVAL,
               "tensor 'wide': size overflows");
    assert_int_equal(fa_tensors_count(t), 2);
    assert_int_equal(fa_tensors_add(t, "caf\xc3\xa9", FA_ST_BOOL, 1, s2, &err), 0);
    assert_int_equal(fa_tensors_add(t, "zero", FA_ST_BF16, 2, (uint64_t[]){0, 5}, &err), 0);
    assert_int_equal(fa_tensors_find(t, "zero")->numel, 0);
    assert_int_equal(fa_tensors_total_bytes(t), 48 + 4 + 3);

    assert_int_equal(fa_tensors_set_federated(t, 0, 1, &err), 0);
    assert_int_equal(fa_tensors_set_range(t, 0, 0.25f, &err), 0);
    assert_int_equal(fa_tensors_clone(&c, t, &err), 0);
    fa_tensors_del(t);
    assert_int_equal(fa_tensors_count(c), 4);
    assert_int_equal(fa_tensors_find(c, "a")->federated, 1);
    assert_true(fa_tensors_find(c, "a")->range == 0.25f);
    assert_int_equal(fa_tensors_fed_numel(c), 12);
    assert_int_equal(fa_tensors_index(c, "caf\xc3\xa9"), 2);
    assert_int_equal(fa_tensors_find(c, "caf\xc3\xa9")->dtype, FA_ST_BOOL);
    fa_tensors_del(c);
    fa_tensors_del(NULL);
    /* printable UTF-8 of any script, and spaces, make names */
    assert_int_equal(fa_tensors_new(&t, &err), 0);
    assert_int_equal(
        fa_tensors_add(t, "caf\xc3\xa9.weight \xe6\x9d\x83\xe9\x87\x8d", FA_ST_F32, 0, NULL, &err),
        0);
    fa_tensors_del(t);
}

/* ---------------------------------------------------------------------- */
/* Digests                                                                 */
/* ---------------------------------------------------------------------- */

/* The digest input exactly as tensors.h spells it, built byte by byte. */
static size_t put(uint8_t *p, const void *s, size_t n)
{
    memcpy(p, s, n);
    return n;
}

static void test_digests(void **state)
{
    struct row r[] = {
        {"fc.weight", FA_ST_F32, 2, {3, 2}},
        {"steps", FA_ST_I64, 0, {0}},
        {"emb", FA_ST_BF16, 1, {258}},
    };
    fa_tensors *t = table_of(r, 3), *e;
    uint8_t got[32], want[32], buf[512];
    size_t k = 0;
    fa_error err;

    assert_int_equal(fa_tensors_set_federated(t, 0, 1, &err), 0);
    assert_int_equal(fa_tensors_set_federated(t, 2, 1, &err), 0);
    k += put(buf + k, "fedagg-tensors-v1\n", 18);
    k += put(buf + k, "fc.weight\0F32\0", 14);
    k += put(buf + k, "\x02\x00\x00\x00", 4);
    k += put(buf + k, "\x03\x00\x00\x00\x00\x00\x00\x00", 8);
    k += put(buf + k, "\x02\x00\x00\x00\x00\x00\x00\x00", 8);
    k += put(buf + k, "\x01", 1);
    k += put(buf + k, "steps\0I64\0", 10);
    k += put(buf + k, "\x00\x00\x00\x00", 4);
    k += put(buf + k, "\x00", 1);
    k += put(buf + k, "emb\0BF16\0", 9);
    k += put(buf + k, "\x01\x00\x00\x00", 4);
    k += put(buf + k, "\x02\x01\x00\x00\x00\x00\x00\x00", 8); /* 258 */
    k += put(buf + k, "\x01", 1);
    crypto_hash_sha256(want, buf, k);
    assert_int_equal(fa_tensors_digest(t, got, &err), 0);
    assert_memory_equal(got, want, 32);

    /* federated is part of it; ranges are not */
    assert_int_equal(fa_tensors_set_range(t, 0, 3.0f, &err), 0);
    assert_int_equal(fa_tensors_digest(t, got, &err), 0);
    assert_memory_equal(got, want, 32);
    assert_int_equal(fa_tensors_set_federated(t, 2, 0, &err), 0);
    assert_int_equal(fa_tensors_digest(t, got, &err), 0);
    buf[k - 1] = 0;
    crypto_hash_sha256(want, buf, k);
    assert_memory_equal(got, want, 32);

    /* ranges digest: float32 LE of the federated tensors' ranges */
    assert_int_equal(fa_tensors_set_federated(t, 2, 1, &err), 0);
    assert_int_equal(fa_tensors_set_range(t, 2, 0.1f, &err), 0);
    uint8_t rb[8] = {0x00, 0x00, 0x40, 0x40, 0xcd, 0xcc, 0xcc, 0x3d}; /* 3.0f, 0.1f */
    crypto_hash_sha256(want, rb, 8);
    assert_int_equal(fa_tensors_ranges_digest(t, got, &err), 0);
    assert_memory_equal(got, want, 32);

    /* the empty table: the tag alone; no federated tensor: SHA-256("") */
    assert_int_equal(fa_tensors_new(&e, &err), 0);
    assert_int_equal(fa_tensors_digest(e, got, &err), 0);
    crypto_hash_sha256(want, (const uint8_t *)"fedagg-tensors-v1\n", 18);
    assert_memory_equal(got, want, 32);
    assert_int_equal(fa_tensors_ranges_digest(e, got, &err), 0);
    crypto_hash_sha256(want, (const uint8_t *)"", 0);
    assert_memory_equal(got, want, 32);
    fa_tensors_del(e);

    /* order, shape and dtype each change it */
    struct row r2[] = {r[1], r[0], r[2]};
    e = table_of(r2, 3);
    uint8_t a[32], b[32];
    fa_tensors_del(t);
    t = table_of(r, 3);
    assert_int_equal(fa_tensors_digest(t, a, &err), 0);
    assert_int_equal(fa_tensors_digest(e, b, &err), 0);
    assert_memory_not_equal(a, b, 32);
    fa_tensors_del(e);
    r2[0] = r[0];
    r2[1] = r[1];
    r2[0].shape[0] = 2;
    r2[0].shape[1] = 3;
    e = table_of(r2, 3);
    assert_int_equal(fa_tensors_digest(e, b, &err), 0);
    assert_memory_not_equal(a, b, 32);
    fa_tensors_del(e);
    r2[0] = r[0];
    r2[0].dtype = FA_ST_F16;
    e = table_of(r2, 3);
    assert_int_equal(fa_tensors_digest(e, b, &err), 0);
    assert_memory_not_equal(a, b, 32);
    fa_tensors_del(e);
    fa_tensors_del(t);
}

/* ---------------------------------------------------------------------- */
/* Selection                                                               */
/* ---------------------------------------------------------------------- */

static void test_glob(void **state)
{
    static const struct {
        const char *p, *s;
        int m;
    } cases[] = {
        {"*", "", 1},
        {"*", "anything.at.all", 1},
        {"", "", 1},
        {"", "a", 0},
        {"a", "a", 1},
        {"a", "ab", 0},
        {"ab", "a", 0},
        {"*lora_*", "model.layers.0.q_proj.lora_A.weight", 1},
        {"*lora_*", "model.layers.0.q_proj.weight", 0},
        {"*lora_*", "lora_", 1},
        {"*bn*", "layer1.0.bn1.running_mean", 1},
        {"*bn*", "layer1.0.conv1.weight", 0},
        {"backbone.*", "backbone.conv.weight", 1},
        {"backbone.*", "backbone.", 1},
        {"backbone.*", "backbone", 0},
        {"backbone.*", "head.backbone.x", 0},
        {"fc?.weight", "fc1.weight", 1},
        {"fc?.weight", "fc12.weight", 0},
        {"fc?.weight", "fc.weight", 0},
        {"fc[12].bias", "fc1.bias", 1},
        {"fc[12].bias", "fc3.bias", 0},
        {"fc[0-9].bias", "fc7.bias", 1},
        {"fc[0-9].bias", "fcx.bias", 0},
        {"fc[!0-9].bias", "fcx.bias", 1},
        {"fc[!0-9].bias", "fc7.bias", 0},
        {"fc[^0-9].bias", "fcx.bias", 1},
        {"[]]", "]", 1},
        {"[!]]", "]", 0},
        {"[a-]", "-", 1},
        {"[\\]]", "]", 1},
        {"a[bc", "a[bc", 1}, /* malformed class: literal */
        {"a[bc", "ab", 0},
        {"weird\\*name", "weird*name", 1},
        {"weird\\*name", "weirdXname", 0},
        {"q\\?", "q?", 1},
        {"q\\?", "qx", 0},
        {"back\\slash", "backslash", 1},
        {"tail\\", "tail\\", 1},
        {"**a**b**", "xxaxxbxx", 1},
        {"*a*b", "ab_ba", 0},
        {"*a*b", "ab_ab", 1},
        {"a*a*a*a*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 0},
        {"*.weight", "fc1.weight", 1},
        {"*.weight", "fc1.weights", 0},
        {"caf\xc3\xa9*", "caf\xc3\xa9.x", 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        if (fa_tensors_glob(cases[i].p, cases[i].s) != cases[i].m)
            fail_msg("glob('%s', '%s') should be %d", cases[i].p, cases[i].s, cases[i].m);
}

static const struct row model_rows[] = {
    {"backbone.conv1.weight", FA_ST_F32, 4, {8, 3, 3, 3}},
    {"backbone.bn1.weight", FA_ST_F32, 1, {8}},
    {"backbone.bn1.running_mean", FA_ST_F32, 1, {8}},
    {"backbone.bn1.num_batches_tracked", FA_ST_I64, 0, {0}},
    {"head.lora_A.weight", FA_ST_BF16, 2, {4, 8}},
    {"head.lora_B.weight", FA_ST_BF16, 2, {10, 4}},
    {"head.weight", FA_ST_F16, 2, {10, 8}},
    {"head.bias", FA_ST_F64, 1, {10}},
    {"head.mask", FA_ST_BOOL, 1, {10}},
    {"codes", FA_ST_U8, 1, {5}},
    {"offsets", FA_ST_I32, 1, {3}},
    {"small", FA_ST_I8, 1, {2}},
    {"mid", FA_ST_I16, 1, {2}},
    {"weird*name", FA_ST_F32, 0, {0}},
    {"weirdXname", FA_ST_F32, 0, {0}},
};
#define N_MODEL (sizeof(model_rows) / sizeof(model_rows[0]))

/* Which of model_rows are federated, as a string of 0/1. */
static void fed_str(const fa_tensors *t, char *out)
{
    size_t i;
    for (i = 0; i < fa_tensors_count(t); i++)
        out[i] = fa_tensors_at(t, i)->federated ? '1' : '0';
    out[i] = 0;
}

static void expect_select(fa_tensors *t, const char *const *inc, size_t ni, const char *const *exc,
                          size_t ne, int integers, const char *want)
{
    fa_tensor_select sel = {inc, ni, exc, ne, integers};
    fa_error err;
    char got[64];
    if (fa_tensors_select(t, &sel, &err) != 0)
        fail_msg("select (%s...): %s", ni ? inc[0] : ne ? exc[0] : "-", err.msg);
    fed_str(t, got);
    if (strcmp(got, want) != 0)
        fail_msg("select (%s / %s): got %s want %s", ni ? inc[0] : "-", ne ? exc[0] : "-", got,
                 want);
    /* offsets: consecutive in table order; ranges reset */
    uint64_t off = 0;
    for (size_t i = 0; i < fa_tensors_count(t); i++) {
        const fa_tensor *x = fa_tensors_at(t, i);
        assert_true(x->range == 0);
        if (x->federated) {
            assert_int_equal(x->fed_offset, off);
            off += x->numel;
        }
    }
    assert_int_equal(fa_tensors_fed_numel(t), off);
}

static void test_select(void **state)
{
    fa_tensors *t = table_of(model_rows, N_MODEL);
    fa_error err;
    struct snap s;

    /* defaults: floating tensors only */
    assert_int_equal(fa_tensors_select(t, NULL, &err), 0);
    char got[64];
    fed_str(t, got);
    assert_string_equal(got, "111011110000011");
    assert_int_equal(fa_tensors_fed_count(t), 9);
    assert_int_equal(fa_tensors_fed_numel(t), 216 + 8 + 8 + 32 + 40 + 80 + 10 + 1 + 1);
    expect_select(t, NULL, 0, NULL, 0, FA_TENSORS_INT_KEEP, "111011110000011");
    /* integers with MEAN_DELTA; BOOL never */
    expect_select(t, NULL, 0, NULL, 0, FA_TENSORS_INT_MEAN_DELTA, "111111110111111");
    const char *all[] = {"*"};
    expect_select(t, all, 1, NULL, 0, FA_TENSORS_INT_MEAN_DELTA, "111111110111111");

    const char *lora[] = {"*lora_*"}, *bn[] = {"*bn*"}, *bb[] = {"backbone.*"};
    expect_select(t, lora, 1, NULL, 0, 0, "000011000000000");
    expect_select(t, NULL, 0, bn, 1, 0, "100011110000011");
    expect_select(t, NULL, 0, bn, 1, FA_TENSORS_INT_MEAN_DELTA, "100011110111111");
    expect_select(t, NULL, 0, bb, 1, 0, "000011110000011");
    const char *head[] = {"head.*"}, *lo_b[] = {"*lora_B*", "*.bias"};
    expect_select(t, head, 1, lo_b, 2, 0, "000010100000000");
    const char *cls[] = {"head.lora_[AB].weight"}, *neg[] = {"[!bh]*"}, *q[] = {"head.?ias"};
    expect_select(t, cls, 1, NULL, 0, 0, "000011000000000");
    expect_select(t, neg, 1, NULL, 0, 0, "000000000000011");
    expect_select(t, neg, 1, NULL, 0, 1, "000000000111111");
    expect_select(t, q, 1, NULL, 0, 0, "000000010000000");
    const char *esc[] = {"weird\\*name"}, *star[] = {"weird*name"};
    expect_select(t, esc, 1, NULL, 0, 0, "000000000000010");
    expect_select(t, star, 1, NULL, 0, 0, "000000000000011");
    /* a pattern matching a BOOL or integer tensor alone, under the defaults:
     * nothing federated, refused */
    take(t, &s);
    const char *mask[] = {"head.mask"}, *nbt[] = {"*num_batches*"};
    ASSERT_ERR(fa_tensors_select(t, &(fa_tensor_select){mask, 1, NULL, 0, 1}, &err), FA_ERR_INVAL,
               "no tensor would be federated: of 15 tensors, 14 can be");
    ASSERT_ERR(fa_tensors_select(t, &(fa_tensor_select){nbt, 1, NULL, 0, 0}, &err), FA_ERR_INVAL,
               "no tensor would be federated: of 15 tensors, 9 can be (floating) and the "
               "include/exclude patterns leave none of them");
    assert_unchanged(t, &s);
    expect_select(t, nbt, 1, NULL, 0, 1, "000100000000000");

    /* typo guard: the pattern and the nearest names; the table unchanged */
    assert_int_equal(fa_tensors_set_range(t, 3, 2.0f, &err), 0);
    take(t, &s);
    const char *typo[] = {"*lroa_*"};
    ASSERT_ERR(fa_tensors_select(t, &(fa_tensor_select){typo, 1, NULL, 0, 0}, &err), FA_ERR_INVAL,
               "include pattern '*lroa_*' matches no tensor of the model (nearest: "
               "'head.lora_A.weight', 'head.lora_B.weight' or ");
    assert_unchanged(t, &s);
    const char *typo2[] = {"backbone.bn1.runing_mean"};
    ASSERT_ERR(fa_tensors_select(t, &(fa_tensor_select){NULL, 0, typo2, 1, 0}, &err), FA_ERR_INVAL,
               "exclude pattern 'backbone.bn1.runing_mean' matches no tensor of the model "
               "(nearest: 'backbone.bn1.running_mean'");
    assert_unchanged(t, &s);
    /* one good and one bad include: still refused, naming the bad one */
    const char *mixed[] = {"head.*", "haed.*"};
    ASSERT_ERR(fa_tensors_select(t, &(fa_tensor_select){mixed, 2, NULL, 0, 0}, &err), FA_ERR_INVAL,
               "include pattern 'haed.*' matches no tensor");
    assert_unchanged(t, &s);
    /* a successful selection resets the ranges (tensor 3 had one) */
    expect_select(t, NULL, 0, NULL, 0, FA_TENSORS_INT_MEAN_DELTA, "111111110111111");
    fa_tensors_del(t);

    /* an empty table */
    assert_int_equal(fa_tensors_new(&t, &err), 0);
    ASSERT_ERR(fa_tensors_select(t, NULL, &err), FA_ERR_INVAL, "of 0 tensors, 0 can be");
    ASSERT_ERR(fa_tensors_select(t, &(fa_tensor_select){all, 1, NULL, 0, 0}, &err), FA_ERR_INVAL,
               "include pattern '*' matches no tensor: the model has none");
    fa_tensors_del(t);
}

static void test_set_federated_and_range(void **state)
{
    fa_tensors *t = table_of(model_rows, N_MODEL);
    fa_error err;

    ASSERT_ERR(fa_tensors_set_federated(t, 8, 1, &err), FA_ERR_INVAL,
               "tensor 'head.mask' is BOOL: it cannot be federated");
    assert_int_equal(fa_tensors_set_federated(t, 8, 0, &err), 0);
    ASSERT_ERR(fa_tensors_set_federated(t, N_MODEL, 1, &err), FA_ERR_INVAL,
               "tensor 15 of a table of 15");
    assert_int_equal(fa_tensors_set_federated(t, 6, 1, &err), 0);
    assert_int_equal(fa_tensors_set_federated(t, 1, 1, &err), 0);
    assert_int_equal(fa_tensors_set_federated(t, 3, 1, &err), 0); /* an integer: allowed */
    assert_int_equal(fa_tensors_at(t, 1)->fed_offset, 0);
    assert_int_equal(fa_tensors_at(t, 3)->fed_offset, 8);
    assert_int_equal(fa_tensors_at(t, 6)->fed_offset, 9);
    assert_int_equal(fa_tensors_fed_numel(t), 89);
    assert_int_equal(fa_tensors_fed_count(t), 3);
    ASSERT_ERR(fa_tensors_set_range(t, 0, 1.0f, &err), FA_ERR_INVAL,
               "tensor 'backbone.conv1.weight' is not federated");
    ASSERT_ERR(fa_tensors_set_range(t, 1, 0.0f, &err), FA_ERR_INVAL, "must be finite and > 0");
    ASSERT_ERR(fa_tensors_set_range(t, 1, -1.0f, &err), FA_ERR_INVAL, "range -1");
    ASSERT_ERR(fa_tensors_set_range(t, 1, NAN, &err), FA_ERR_INVAL, "'backbone.bn1.weight'");
    ASSERT_ERR(fa_tensors_set_range(t, 1, INFINITY, &err), FA_ERR_INVAL, "must be finite");
    ASSERT_ERR(fa_tensors_set_range(t, 99, 1.0f, &err), FA_ERR_INVAL, "tensor 99");
    assert_int_equal(fa_tensors_set_range(t, 1, 1e-40f, &err), 0); /* subnormal: > 0 */
    assert_int_equal(fa_tensors_set_range(t, 6, 4.0f, &err), 0);
    /* re-marking keeps the range; unmarking drops it */
    assert_int_equal(fa_tensors_set_federated(t, 6, 1, &err), 0);
    assert_true(fa_tensors_at(t, 6)->range == 4.0f);
    assert_int_equal(fa_tensors_set_federated(t, 6, 0, &err), 0);
    assert_true(fa_tensors_at(t, 6)->range == 0);
    assert_int_equal(fa_tensors_set_federated(t, 1, 0, &err), 0);
    assert_int_equal(fa_tensors_at(t, 3)->fed_offset, 0);
    assert_int_equal(fa_tensors_fed_numel(t), 1);
    fa_tensors_del(t);
}

/* ---------------------------------------------------------------------- */
/* Metadata                                                                */
/* ---------------------------------------------------------------------- */

static void test_meta_round_trip(void **state)
{
    fa_tensors *t = table_of(model_rows, N_MODEL), *u;
    fa_error err;
    char *json;
    const float ranges[] = {0.1f, FLT_MAX,     1e-45f /* the least subnormal */, 1.17549435e-38f,
                            3.0f, 16777217.0f, 0.3333333432674407958984375f,     1.0000001f};
    const size_t fed_idx[] = {0, 1, 2, 3, 4, 5, 6, 7};

    assert_int_equal(fa_tensors_select(t, &(fa_tensor_select){NULL, 0, NULL, 0, 1}, &err), 0);
    for (size_t k = 0; k < 8; k++)
        assert_int_equal(fa_tensors_set_range(t, fed_idx[k], ranges[k], &err), 0);
    /* 'small' (I8) federated with range 0: unset */
    assert_int_equal(fa_tensors_meta_encode(t, &json, &err), 0);

    /* the JSON names the federated tensors in table order */
    json_error_t je;
    json_t *o = json_loads(json, JSON_REJECT_DUPLICATES, &je);
    assert_non_null(o);
    assert_int_equal(json_object_size(o), fa_tensors_fed_count(t));
    const char *key;
    json_t *v;
    size_t i = 0;
    json_object_foreach(o, key, v) {
        while (!fa_tensors_at(t, i)->federated)
            i++;
        assert_string_equal(key, fa_tensors_at(t, i)->name);
        assert_true(json_is_number(v));
        i++;
    }
    json_decref(o);
    assert_null(strstr(json, "\"head.mask\""));

    /* applied to a fresh table: the same federated set, bit-exact ranges */
    u = table_of(model_rows, N_MODEL);
    assert_int_equal(fa_tensors_meta_apply(u, json, &err), 0);
    for (i = 0; i < N_MODEL; i++) {
        const fa_tensor *a = fa_tensors_at(t, i), *b = fa_tensors_at(u, i);
        assert_int_equal(a->federated, b->federated);
        assert_int_equal(bits_of(a->range), bits_of(b->range));
        assert_int_equal(a->fed_offset, b->fed_offset);
    }
    uint8_t d1[32], d2[32];
    assert_int_equal(fa_tensors_ranges_digest(t, d1, &err), 0);
    assert_int_equal(fa_tensors_ranges_digest(u, d2, &err), 0);
    assert_memory_equal(d1, d2, 32);
    assert_int_equal(fa_tensors_digest(t, d1, &err), 0);
    assert_int_equal(fa_tensors_digest(u, d2, &err), 0);
    assert_memory_equal(d1, d2, 32);
    free(json);

    /* applying replaces: tensors not named become not federated; any order,
     * integers and reals both accepted */
    assert_int_equal(fa_tensors_meta_apply(u, "{\"head.bias\": 2, \"codes\": 0.5}", &err), 0);
    char got[64];
    fed_str(u, got);
    assert_string_equal(got, "000000010100000");
    assert_true(fa_tensors_find(u, "head.bias")->range == 2.0f);
    assert_int_equal(fa_tensors_find(u, "head.bias")->fed_offset, 0);
    assert_int_equal(fa_tensors_find(u, "codes")->fed_offset, 10);
    assert_int_equal(fa_tensors_meta_apply(u, " { } ", &err), 0);
    assert_int_equal(fa_tensors_fed_count(u), 0);
    assert_int_equal(fa_tensors_meta_encode(u, &json, &err), 0);
    assert_string_equal(json, "{}");
    free(json);
    fa_tensors_del(u);
    fa_tensors_del(t);

    /* random float32 ranges, every binade: exact through text */
    struct row rr[64];
    char names[64][16];
    for (size_t k = 0; k < 64; k++) {
        snprintf(names[k], sizeof(names[k]), "w%zu", k);
        rr[k] = (struct row){names[k], FA_ST_F32, 1, {1}};
    }
    t = table_of(rr, 64);
    u = table_of(rr, 64);
    assert_int_equal(fa_tensors_select(t, NULL, &err), 0);
    for (int round = 0; round < 2000; round++) {
        for (size_t k = 0; k < 64; k++) {
            float r;
            do
                r = f32_of((uint32_t)rnd() & 0x7fffffffu);
            while (!isfinite(r) || r == 0);
            assert_int_equal(fa_tensors_set_range(t, k, r, &err), 0);
        }
        assert_int_equal(fa_tensors_meta_encode(t, &json, &err), 0);
        assert_int_equal(fa_tensors_meta_apply(u, json, &err), 0);
        for (size_t k = 0; k < 64; k++)
            if (bits_of(fa_tensors_at(t, k)->range) != bits_of(fa_tensors_at(u, k)->range))
                fail_msg("range %.9g read back as %.9g from %s", fa_tensors_at(t, k)->range,
                         fa_tensors_at(u, k)->range, json);
        free(json);
    }
    fa_tensors_del(u);
    fa_tensors_del(t);
}

static void test_meta_refusals(void **state)
{
    static const struct {
        const char *json;
        int code;
        const char *msg;
    } bad[] = {
        {"", FA_ERR_PARSE, FA_TENSORS_META_KEY ": not valid JSON"},
        {"{\"head.bias\": 1", FA_ERR_PARSE, "not valid JSON"},
        {"[1, 2]", FA_ERR_PARSE, "not a JSON object of tensor names to ranges"},
        {"1.5", FA_ERR_PARSE, "not valid JSON"}, /* jansson: a top-level scalar */
        {"{\"head.bias\": \"1\"}", FA_ERR_PARSE, "tensor 'head.bias': the range is not a number"},
        {"{\"head.bias\": null}", FA_ERR_PARSE, "tensor 'head.bias': the range is not a number"},
        {"{\"head.bias\": [1]}", FA_ERR_PARSE, "tensor 'head.bias'"},
        {"{\"head.bias\": true}", FA_ERR_PARSE, "tensor 'head.bias'"},
        {"{\"head.bias\": -1}", FA_ERR_INVAL, "tensor 'head.bias': range -1 is not a finite"},
        {"{\"head.bias\": -0.0001}", FA_ERR_INVAL, "tensor 'head.bias': range -0.0001"},
        {"{\"head.bias\": 1e39}", FA_ERR_INVAL, "tensor 'head.bias': range 1e+39"},
        {"{\"head.bias\": 3.5e38}", FA_ERR_INVAL, "tensor 'head.bias'"},
        {"{\"head.bias\": 1e-50}", FA_ERR_INVAL, "tensor 'head.bias': range 1e-50"},
        {"{\"head.bias\": 1e400}", FA_ERR_PARSE, "not valid JSON"},
        {"{\"head.bias\": NaN}", FA_ERR_PARSE, "not valid JSON"},
        {"{\"head.bias\": Infinity}", FA_ERR_PARSE, "not valid JSON"},
        {"{\"head.bias\": 1, \"nope\": 1}", FA_ERR_INVAL, "tensor 'nope' is not in the model"},
        {"{\"head.mask\": 1}", FA_ERR_INVAL,
         "tensor 'head.mask' is BOOL, which cannot be federated"},
        {"{\"head.bias\": 1, \"head.bias\": 2}", FA_ERR_PARSE, "duplicate"},
        {"{\"head.bias\": 1} x", FA_ERR_PARSE, "not valid JSON"},
        {"{\"head.bias\\u0000\": 1}", FA_ERR_PARSE, "not valid JSON"},
    };
    fa_tensors *t = table_of(model_rows, N_MODEL);
    fa_error err;
    struct snap s;

    assert_int_equal(fa_tensors_select(t, NULL, &err), 0);
    assert_int_equal(fa_tensors_set_range(t, 0, 0.75f, &err), 0);
    assert_int_equal(fa_tensors_set_range(t, 7, 1.5f, &err), 0);
    take(t, &s);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(&err, 0, sizeof(err));
        int rc = fa_tensors_meta_apply(t, bad[i].json, &err);
        if (rc != bad[i].code || !strstr(err.msg, bad[i].msg))
            fail_msg("meta_apply(%s): got %d '%s', want %d '%s'", bad[i].json, rc, err.msg,
                     bad[i].code, bad[i].msg);
        assert_unchanged(t, &s);
    }
    /* and the table still takes a good one */
    assert_int_equal(fa_tensors_meta_apply(t, "{\"head.bias\": 1e-45}", &err), 0);
    assert_int_equal(fa_tensors_fed_count(t), 1);
    fa_tensors_del(t);
}

/* ---------------------------------------------------------------------- */
/* Checking and reading files                                              */
/* ---------------------------------------------------------------------- */

static void test_check(void **state)
{
    static float z[64];
    uint64_t s34[2] = {3, 4}, s43[2] = {4, 3}, s5[1] = {5};
    fa_st_view model[] = {
        {"x", FA_ST_F32, 2, s34, z, NULL, NULL},
        {"y", FA_ST_BF16, 1, s5, z, NULL, NULL},
        {"z", FA_ST_I64, 0, NULL, z, NULL, NULL},
    };
    fa_safetensors *st = save_open("check_model.safetensors", model, 3, NULL, 0), *o;
    fa_tensors *t;
    fa_error err;

    assert_int_equal(fa_tensors_from_st(&t, st, &err), 0);
    fa_st_del(st);

    /* the same tensors in another order: accepted */
    fa_st_view same[] = {model[2], model[0], model[1]};
    o = save_open("check_same.safetensors", same, 3, NULL, 0);
    assert_int_equal(fa_tensors_check(t, o, "out", &err), 0);
    fa_st_del(o);

    fa_st_view missing[] = {model[0], model[2]};
    o = save_open("check_missing.safetensors", missing, 2, NULL, 0);
    ASSERT_ERR(fa_tensors_check(t, o, "the trainer's output", &err), FA_ERR_INVAL,
               "the trainer's output: missing tensor 'y'");
    fa_st_del(o);

    fa_st_view reshaped[] = {{"x", FA_ST_F32, 2, s43, z, NULL, NULL}, model[1], model[2]};
    o = save_open("check_reshaped.safetensors", reshaped, 3, NULL, 0);
    ASSERT_ERR(fa_tensors_check(t, o, "out", &err), FA_ERR_INVAL,
               "out: tensor 'x' has shape [4, 3], the model's is [3, 4]");
    fa_st_del(o);

    fa_st_view retyped[] = {model[0], {"y", FA_ST_F32, 1, s5, z, NULL, NULL}, model[2]};
    o = save_open("check_retyped.safetensors", retyped, 3, NULL, 0);
    ASSERT_ERR(fa_tensors_check(t, o, "out", &err), FA_ERR_INVAL,
               "out: tensor 'y' is F32, the model's is BF16");
    fa_st_del(o);

    fa_st_view scalar[] = {model[0], model[1], {"z", FA_ST_I64, 1, (uint64_t[]){1}, z, NULL, NULL}};
    o = save_open("check_scalar.safetensors", scalar, 3, NULL, 0);
    ASSERT_ERR(fa_tensors_check(t, o, "out", &err), FA_ERR_INVAL,
               "out: tensor 'z' has shape [1], the model's is []");
    fa_st_del(o);

    fa_st_view extra[] = {{"w", FA_ST_F32, 0, NULL, z, NULL, NULL},
                          model[0],
                          model[1],
                          model[2],
                          {"v", FA_ST_F32, 0, NULL, z, NULL, NULL}};
    o = save_open("check_extra.safetensors", extra, 5, NULL, 0);
    ASSERT_ERR(fa_tensors_check(t, o, "out", &err), FA_ERR_INVAL, "out: extra tensor 'w'");
    fa_st_del(o);

    /* the first offending tensor in table order, extras only after all:
     * x reshaped comes before y missing, which comes before the extra w */
    fa_st_view several[] = {{"w", FA_ST_F32, 0, NULL, z, NULL, NULL},
                            model[2],
                            {"x", FA_ST_F32, 2, s43, z, NULL, NULL}};
    o = save_open("check_several.safetensors", several, 3, NULL, 0);
    ASSERT_ERR(fa_tensors_check(t, o, "out", &err), FA_ERR_INVAL,
               "out: tensor 'x' has shape [4, 3], the model's is [3, 4]");
    fa_st_del(o);
    fa_st_view several2[] = {{"w", FA_ST_F32, 0, NULL, z, NULL, NULL}, model[0], model[2]};
    o = save_open("check_several2.safetensors", several2, 3, NULL, 0);
    ASSERT_ERR(fa_tensors_check(t, o, "out", &err), FA_ERR_INVAL, "out: missing tensor 'y'");
    fa_st_del(o);
    fa_st_view several3[] = {{"w", FA_ST_F32, 0, NULL, z, NULL, NULL},
                             model[0],
                             model[1],
                             {"z", FA_ST_I32, 0, NULL, z, NULL, NULL}};
    o = save_open("check_several3.safetensors", several3, 4, NULL, 0);
    ASSERT_ERR(fa_tensors_check(t, o, "out", &err), FA_ERR_INVAL,
               "out: tensor 'z' is I32, the model's is I64");
    fa_st_del(o);
    /* NULL what */
    o = save_open("check_missing2.safetensors", missing, 2, NULL, 0);
    ASSERT_ERR(fa_tensors_check(t, o, NULL, &err), FA_ERR_INVAL, "missing tensor 'y'");
    fa_st_del(o);
    fa_tensors_del(t);
}

static void test_read_fed(void **state)
{
    float a[6] = {1.5f, -2.0f, 0.0f, 3.25f, 1e-3f, -7.0f};
    uint16_t b[4] = {0x3f80, 0xc0a0, 0x0001, 0x7f7f}; /* BF16 1, -5, tiny, 3.39e38 */
    uint16_t h[3] = {0x3c00, 0x7bff, 0x0001};         /* F16 1, 65504, 2^-24 */
    double f64[3] = {0.1, 1e300, -1e-300};
    int32_t i32[2] = {16777217, -3};
    uint8_t flags[2] = {1, 0};
    uint64_t s6[1] = {6}, s4[1] = {4}, s3[1] = {3}, s2[1] = {2};
    fa_st_view v[] = {
        {"a", FA_ST_F32, 1, s6, a, NULL, NULL},          {"b", FA_ST_BF16, 1, s4, b, NULL, NULL},
        {"flags", FA_ST_BOOL, 1, s2, flags, NULL, NULL}, {"h", FA_ST_F16, 1, s3, h, NULL, NULL},
        {"d", FA_ST_F64, 1, s3, f64, NULL, NULL},        {"i", FA_ST_I32, 1, s2, i32, NULL, NULL},
    };
    fa_safetensors *st = save_open("fed.safetensors", v, 6, NULL, 0);
    fa_tensors *t;
    fa_error err;
    float fed[18];

    assert_int_equal(fa_tensors_from_st(&t, st, &err), 0);
    assert_int_equal(fa_tensors_select(t, &(fa_tensor_select){NULL, 0, NULL, 0, 1}, &err), 0);
    assert_int_equal(fa_tensors_fed_numel(t), 18);
    memset(fed, 0xff, sizeof(fed));
    assert_int_equal(fa_tensors_read_fed(t, st, fed, 18, 0, "out", &err), 0);
    const float want[18] = {1.5f,
                            -2.0f,
                            0.0f,
                            3.25f,
                            1e-3f,
                            -7.0f,
                            1.0f,
                            -5.0f,
                            f32_of(0x00010000),
                            f32_of(0x7f7f0000),
                            1.0f,
                            65504.0f,
                            0x1p-24f,
                            0.1f,
                            INFINITY,
                            -0.0f,
                            16777216.0f,
                            -3.0f};
    assert_memory_equal(fed, want, sizeof(want));

    /* check_finite: F64 1e300 is +inf as float32, at element 1 of 'd' */
    ASSERT_ERR(fa_tensors_read_fed(t, st, fed, 18, 1, "the trainer's output", &err), FA_ERR_RANGE,
               "the trainer's output: tensor 'd': element 1 is +inf");
    /* n != d */
    ASSERT_ERR(fa_tensors_read_fed(t, st, fed, 17, 0, "out", &err), FA_ERR_INVAL,
               "out: room for 17 federated coordinates, the model has 18");
    fa_st_del(st);

    /* NaN and -inf, named by flat index; in-memory files too */
    a[4] = NAN;
    f64[1] = 1.0;
    st = save_open("fed_nan.safetensors", v, 6, NULL, 0);
    ASSERT_ERR(fa_tensors_read_fed(t, st, fed, 18, 1, "out", &err), FA_ERR_RANGE,
               "out: tensor 'a': element 4 is NaN");
    assert_int_equal(fa_tensors_read_fed(t, st, fed, 18, 0, "out", &err), 0);
    assert_true(isnan(fed[4]));
    fa_st_del(st);
    a[4] = 1e-3f;
    b[3] = 0xff80; /* -inf */
    assert_int_equal(fa_st_save(tpath("fed_inf.safetensors"), 0644, v, 6, NULL, 0, &err), 0);
    uint8_t *raw;
    size_t raw_len;
    assert_int_equal(fa_file_read_all(tpath("fed_inf.safetensors"), &raw, &raw_len, 1 << 20, &err),
                     0);
    assert_int_equal(fa_st_parse(&st, raw, raw_len, "mem", &err), 0);
    ASSERT_ERR(fa_tensors_read_fed(t, st, fed, 18, 1, "out", &err), FA_ERR_RANGE,
               "out: tensor 'b': element 3 is -inf");
    b[3] = 0x7f7f;
    fa_st_del(st);
    free(raw);

    /* a file with another table: fa_tensors_check's message */
    st = save_open("fed_short.safetensors", v, 5, NULL, 0);
    ASSERT_ERR(fa_tensors_read_fed(t, st, fed, 18, 0, "out", &err), FA_ERR_INVAL,
               "out: missing tensor 'i'");
    fa_st_del(st);

    /* a header alone has no data: fa_st_read's error */
    st = save_open("fed_hdr.safetensors", v, 6, NULL, 0);
    fa_safetensors *hdr;
    const uint8_t *hb = NULL;
    fa_st_writer *w;
    size_t hl;
    assert_int_equal(fa_st_writer_new(&w, &err), 0);
    for (size_t i = 0; i < 6; i++)
        assert_int_equal(fa_st_writer_add(w, v[i].name, v[i].dtype, v[i].ndim, v[i].shape, &err),
                         0);
    assert_int_equal(fa_st_writer_header(w, &hb, &hl, &err), 0);
    assert_int_equal(fa_st_parse_header(&hdr, hb + 8, hl - 8, fa_st_data_len(st), "hdr", &err), 0);
    fa_st_writer_del(w);
    assert_int_equal(fa_tensors_read_fed(t, hdr, fed, 18, 0, "out", &err), FA_ERR_STATE);
    fa_st_del(hdr);
    fa_st_del(st);
    fa_tensors_del(t);

    /* a tensor larger than one read: converted in pieces from the file,
     * and a NaN past the first piece found at its index */
    size_t n = 300007;
    uint16_t *big = malloc(n * 2);
    float *out = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        big[i] = (uint16_t)(0x3f80 + (i % 97));
    uint64_t sb[2] = {n, 1};
    fa_st_view bv = {"big", FA_ST_BF16, 2, sb, big, NULL, NULL};
    st = save_open("fed_big.safetensors", &bv, 1, NULL, 0);
    assert_int_equal(fa_tensors_from_st(&t, st, &err), 0);
    assert_int_equal(fa_tensors_select(t, NULL, &err), 0);
    assert_int_equal(fa_tensors_read_fed(t, st, out, n, 1, "out", &err), 0);
    for (size_t i = 0; i < n; i++)
        if (bits_of(out[i]) != (uint32_t)big[i] << 16)
            fail_msg("big[%zu]", i);
    fa_st_del(st);
    big[250001] = 0x7fc1;
    st = save_open("fed_big_nan.safetensors", &bv, 1, NULL, 0);
    ASSERT_ERR(fa_tensors_read_fed(t, st, out, n, 1, "out", &err), FA_ERR_RANGE,
               "out: tensor 'big': element 250001 is NaN");
    fa_st_del(st);
    fa_tensors_del(t);
    free(out);
    free(big);
}

/* ---------------------------------------------------------------------- */
/* Conversions                                                             */
/* ---------------------------------------------------------------------- */

static void test_half_patterns(void **state)
{
    static uint16_t in[65536], back[65536];
    static float f[65536];

    for (uint32_t i = 0; i < 65536; i++)
        in[i] = (uint16_t)i;
    /* F16: widened exactly (as the common conversion), back bit for bit */
    fa_tensors_to_f32(FA_ST_F16, in, f, 65536);
    fa_tensors_from_f32(FA_ST_F16, f, back, 65536);
    for (uint32_t i = 0; i < 65536; i++) {
        int nan = (i & 0x7c00) == 0x7c00 && (i & 0x3ff);
        if (bits_of(f[i]) != bits_of(fa_st_f16_to_f32((uint16_t)i)))
            fail_msg("F16 0x%04x widened to 0x%08x", i, bits_of(f[i]));
        if (nan ? !isnan(f[i]) || (back[i] & 0x7c00) != 0x7c00 || !(back[i] & 0x3ff) ||
                      (back[i] & 0x8000) != (i & 0x8000)
                : back[i] != i)
            fail_msg("F16 0x%04x came back as 0x%04x", i, back[i]);
    }
    /* spot values */
    assert_true(f[0x3c00] == 1.0f && f[0xc000] == -2.0f && f[0x7bff] == 65504.0f);
    assert_true(f[0x0001] == 0x1p-24f && f[0x03ff] == 0x3ffp-24f && f[0x0400] == 0x1p-14f);
    assert_true(f[0x7c00] == INFINITY && f[0xfc00] == -INFINITY);
    assert_int_equal(bits_of(f[0x8000]), 0x80000000u);

    /* BF16: the top half of a float32, back bit for bit (NaN stays NaN) */
    fa_tensors_to_f32(FA_ST_BF16, in, f, 65536);
    fa_tensors_from_f32(FA_ST_BF16, f, back, 65536);
    for (uint32_t i = 0; i < 65536; i++) {
        int nan = (i & 0x7f80) == 0x7f80 && (i & 0x7f);
        if (bits_of(f[i]) != i << 16)
            fail_msg("BF16 0x%04x widened to 0x%08x", i, bits_of(f[i]));
        if (nan ? (back[i] & 0x7f80) != 0x7f80 || !(back[i] & 0x7f) ||
                      (back[i] & 0x8000) != (i & 0x8000)
                : back[i] != i)
            fail_msg("BF16 0x%04x came back as 0x%04x", i, back[i]);
    }
}

static uint16_t one_from(fa_st_dtype dt, float x)
{
    uint16_t h;
    fa_tensors_from_f32(dt, &x, &h, 1);
    return h;
}

static void test_float_narrowing(void **state)
{
    /* BF16: ties to even at 1 + 2^-8 (between 1 and 1 + 2^-7) and
     * 1 + 3 * 2^-8 (between 1 + 2^-7 and 1 + 2^-6) */
    assert_int_equal(one_from(FA_ST_BF16, 1.0f + 0x1p-8f), 0x3f80);
    assert_int_equal(one_from(FA_ST_BF16, 1.0f + 0x3p-8f), 0x3f82);
    assert_int_equal(one_from(FA_ST_BF16, 1.0f + 0x1p-8f + 0x1p-23f), 0x3f81);
    assert_int_equal(one_from(FA_ST_BF16, 1.0f + 0x3p-8f - 0x1p-23f), 0x3f81);
    assert_int_equal(one_from(FA_ST_BF16, -1.0f - 0x1p-8f), 0xbf80);
    assert_int_equal(one_from(FA_ST_BF16, FLT_MAX), 0x7f80); /* rounds up to inf */
    assert_int_equal(one_from(FA_ST_BF16, f32_of(0x7f7f7fff)), 0x7f7f);
    assert_int_equal(one_from(FA_ST_BF16, INFINITY), 0x7f80);
    assert_int_equal(one_from(FA_ST_BF16, -0.0f), 0x8000);
    assert_int_equal(one_from(FA_ST_BF16, f32_of(0x00008000)), 0x0000); /* subnormal tie */
    assert_int_equal(one_from(FA_ST_BF16, f32_of(0x00018000)), 0x0002);
    uint16_t q = one_from(FA_ST_BF16, f32_of(0x7f800001)); /* a NaN whose payload is low */
    assert_true((q & 0x7f80) == 0x7f80 && (q & 0x7f) != 0);
    q = one_from(FA_ST_BF16, f32_of(0xffffffff));
    assert_true((q & 0xff80) == 0xff80 && (q & 0x7f) != 0);

    /* F16: ties to even, overflow to inf as IEEE, subnormals */
    assert_int_equal(one_from(FA_ST_F16, 1.0f + 0x1p-11f), 0x3c00);
    assert_int_equal(one_from(FA_ST_F16, 1.0f + 0x3p-11f), 0x3c02);
    assert_int_equal(one_from(FA_ST_F16, 1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
    assert_int_equal(one_from(FA_ST_F16, 65504.0f), 0x7bff);
    assert_int_equal(one_from(FA_ST_F16, 65519.0f), 0x7bff);
    assert_int_equal(one_from(FA_ST_F16, 65520.0f), 0x7c00); /* the tie rounds to even: inf */
    assert_int_equal(one_from(FA_ST_F16, 1e6f), 0x7c00);
    assert_int_equal(one_from(FA_ST_F16, -1e6f), 0xfc00);
    assert_int_equal(one_from(FA_ST_F16, 0x1p-24f), 0x0001);
    assert_int_equal(one_from(FA_ST_F16, 0x1p-25f), 0x0000); /* tie to even: 0 */
    assert_int_equal(one_from(FA_ST_F16, 0x3p-25f), 0x0002); /* tie to even: 2 */
    assert_int_equal(one_from(FA_ST_F16, 0x1.000002p-25f), 0x0001);
    assert_int_equal(one_from(FA_ST_F16, 0x1p-30f), 0x0000);
    assert_int_equal(one_from(FA_ST_F16, -0x1p-30f), 0x8000);
    assert_int_equal(one_from(FA_ST_F16, 0x1.ff8p-15f), 0x03ff); /* the largest subnormal */
    assert_int_equal(one_from(FA_ST_F16, 0x1.ffap-15f), 0x03ff);
    assert_int_equal(one_from(FA_ST_F16, 0x1.ffcp-15f), 0x0400); /* tie: even, the least normal */
    q = one_from(FA_ST_F16, NAN);
    assert_true((q & 0x7c00) == 0x7c00 && (q & 0x3ff) != 0);

    /* F64 both ways: widening exact, narrowing rounds to nearest even */
    float fs[5] = {0.1f, -FLT_MAX, 0x1p-149f, 1.0f + 0x1p-23f, -0.0f};
    double ds[5];
    fa_tensors_from_f32(FA_ST_F64, fs, ds, 5);
    for (int i = 0; i < 5; i++)
        assert_int_equal(bits_of((float)ds[i]), bits_of(fs[i]));
    assert_true(ds[0] == (double)0.1f);
    double dn[8] = {1.0 + 0x1p-24, 1.0 + 0x3p-24, 1e300, -1e300, 1e-300, NAN, 0x1p-149, 0x1p-150};
    float fo[8];
    fa_tensors_to_f32(FA_ST_F64, dn, fo, 8);
    assert_true(fo[0] == 1.0f);
    assert_true(fo[1] == 1.0f + 0x1p-22f);
    assert_true(fo[2] == INFINITY && fo[3] == -INFINITY && fo[4] == 0.0f && isnan(fo[5]));
    assert_true(fo[6] == 0x1p-149f && fo[7] == 0.0f);
}

/* The reference: rintf, then saturation, NaN -> 0. */
static int64_t ref_int(float x, int64_t lo, int64_t hi)
{
    if (isnan(x))
        return 0;
    double r = rint((double)x); /* x is a float: exact in double */
    if (r <= (double)lo)
        return lo;
    if (r >= (double)hi)
        return hi;
    return (int64_t)r;
}

static int64_t load_int(fa_st_dtype dt, const uint8_t *p)
{
    switch (dt) {
    case FA_ST_I8: return (int8_t)p[0];
    case FA_ST_U8: return p[0];
    case FA_ST_I16: {
        int16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case FA_ST_I32: {
        int32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    case FA_ST_I64: {
        int64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    default: fail(); return 0;
    }
}

static void test_integer_conversions(void **state)
{
    static const struct {
        fa_st_dtype dt;
        int64_t lo, hi;
    } types[] = {
        {FA_ST_I8, INT8_MIN, INT8_MAX},    {FA_ST_U8, 0, UINT8_MAX},
        {FA_ST_I16, INT16_MIN, INT16_MAX}, {FA_ST_I32, INT32_MIN, INT32_MAX},
        {FA_ST_I64, INT64_MIN, INT64_MAX},
    };
    const float probes[] = {
        0.0f,          -0.0f,          0.5f,           1.5f,        2.5f,
        -0.5f,         -1.5f,          -2.5f,          3.49f,       3.5f,
        0.49999997f,   126.5f,         127.4f,         127.5f,      128.0f,
        -128.5f,       -129.0f,        254.5f,         255.5f,      256.0f,
        -3.0f,         300.0f,         32766.5f,       32767.5f,    -32768.5f,
        4194304.5f,    8388607.5f,     8388608.0f,     16777216.0f, 2147483520.0f,
        2147483648.0f, -2147483648.0f, -2147483904.0f, 0x1p62f,     9223371487098961920.0f,
        0x1p63f,       -0x1p63f,       -0x1p64f,       1e30f,       -1e30f,
        FLT_MAX,       -FLT_MAX,       INFINITY,       -INFINITY,   NAN,
        -NAN,          0x1p-149f};
    const size_t np = sizeof(probes) / sizeof(probes[0]);
    uint8_t out[64 * 8 + 1];

    for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
        fa_st_dtype dt = types[k].dt;
        size_t es = fa_st_dtype_size(dt);
        /* from an unaligned destination, n not a multiple of the block */
        fa_tensors_from_f32(dt, probes, out + 1, np);
        for (size_t i = 0; i < np; i++) {
            int64_t got = load_int(dt, out + 1 + i * es),
                    want = ref_int(probes[i], types[k].lo, types[k].hi);
            if (got != want)
                fail_msg("%s from %.9g: got %lld, want %lld", fa_st_dtype_name(dt), probes[i],
                         (long long)got, (long long)want);
        }
        /* random floats across every binade and the type's range */
        static float xs[10007];
        static uint8_t buf[10007 * 8];
        for (size_t i = 0; i < 10007; i++) {
            uint64_t r = rnd();
            xs[i] = i % 2 ? f32_of((uint32_t)r)
                          : (float)((double)(int64_t)r / 9223372036854775808.0 *
                                    (double)types[k].hi * 1.01);
        }
        fa_tensors_from_f32(dt, xs, buf, 10007);
        for (size_t i = 0; i < 10007; i++) {
            int64_t got = load_int(dt, buf + i * es),
                    want = ref_int(xs[i], types[k].lo, types[k].hi);
            if (got != want)
                fail_msg("%s from %.9g: got %lld, want %lld", fa_st_dtype_name(dt), xs[i],
                         (long long)got, (long long)want);
        }
    }
    /* spot checks a reader can see */
    int8_t i8[4];
    fa_tensors_from_f32(FA_ST_I8, (float[]){2.5f, -2.5f, 200.0f, NAN}, i8, 4);
    assert_true(i8[0] == 2 && i8[1] == -2 && i8[2] == 127 && i8[3] == 0);
    int32_t i32[3];
    fa_tensors_from_f32(FA_ST_I32, (float[]){3e9f, -3e9f, 8388607.5f}, i32, 3);
    assert_true(i32[0] == INT32_MAX && i32[1] == INT32_MIN && i32[2] == 8388608);
    int64_t i64[3];
    fa_tensors_from_f32(FA_ST_I64, (float[]){0x1p63f, -0x1p63f, -INFINITY}, i64, 3);
    assert_true(i64[0] == INT64_MAX && i64[1] == INT64_MIN && i64[2] == INT64_MIN);

    /* to float32: exact below 2^24, nearest even beyond */
    int32_t si[5] = {16777217, 16777219, -16777217, INT32_MAX, INT32_MIN};
    float f[8];
    fa_tensors_to_f32(FA_ST_I32, si, f, 5);
    assert_true(f[0] == 16777216.0f && f[1] == 16777220.0f && f[2] == -16777216.0f);
    assert_true(f[3] == 2147483648.0f && f[4] == -2147483648.0f);
    int64_t sl[4] = {INT64_MAX, INT64_MIN, (1ll << 53) + 1, -5};
    fa_tensors_to_f32(FA_ST_I64, sl, f, 4);
    assert_true(f[0] == 0x1p63f && f[1] == -0x1p63f && f[2] == 0x1p53f && f[3] == -5.0f);
    int16_t ss[2] = {INT16_MIN, INT16_MAX};
    fa_tensors_to_f32(FA_ST_I16, ss, f, 2);
    assert_true(f[0] == -32768.0f && f[1] == 32767.0f);
    int8_t sc[2] = {-128, 127};
    fa_tensors_to_f32(FA_ST_I8, sc, f, 2);
    assert_true(f[0] == -128.0f && f[1] == 127.0f);
    uint8_t su[2] = {0, 255};
    fa_tensors_to_f32(FA_ST_U8, su, f, 2);
    assert_true(f[0] == 0.0f && f[1] == 255.0f);
    uint8_t sb[4] = {0, 1, 2, 255};
    fa_tensors_to_f32(FA_ST_BOOL, sb, f, 4);
    assert_true(f[0] == 0.0f && f[1] == 1.0f && f[2] == 1.0f && f[3] == 1.0f);
    uint8_t bo[6];
    fa_tensors_from_f32(FA_ST_BOOL, (float[]){0.0f, -0.0f, 0.1f, -3.0f, NAN, 1e-45f}, bo, 6);
    assert_memory_equal(bo, ((uint8_t[]){0, 0, 1, 1, 1, 1}), 6);

    /* every dtype from unaligned source bytes, with tails of each length */
    for (int dt = 0; dt < FA_ST_NDTYPES; dt++) {
        size_t es = fa_st_dtype_size((fa_st_dtype)dt);
        for (size_t n = 0; n < 70; n += 7) {
            uint8_t src[8 * 70 + 3];
            float a[70], b[70];
            for (size_t i = 0; i < n; i++)
                a[i] = (float)((int)(i % 9) - 4) * (dt == FA_ST_BOOL ? 1.0f : 3.0f);
            if (dt == FA_ST_BOOL)
                for (size_t i = 0; i < n; i++)
                    a[i] = a[i] != 0;
            if (dt == FA_ST_U8)
                for (size_t i = 0; i < n; i++)
                    a[i] = fabsf(a[i]);
            memset(src, 0xa5, sizeof(src));
            fa_tensors_from_f32((fa_st_dtype)dt, a, src + 3, n);
            assert_int_equal(src[3 + n * es], 0xa5); /* nothing written past n */
            fa_tensors_to_f32((fa_st_dtype)dt, src + 3, b, n);
            for (size_t i = 0; i < n; i++)
                if (a[i] != b[i])
                    fail_msg("%s n=%zu [%zu]: %g -> %g", fa_st_dtype_name((fa_st_dtype)dt), n, i,
                             a[i], b[i]);
        }
    }
}

/* ---------------------------------------------------------------------- */
/* Writing                                                                 */
/* ---------------------------------------------------------------------- */

static void expect_tensor(const fa_safetensors *st, const char *name, fa_st_dtype dt,
                          const void *bytes, size_t len)
{
    const fa_st_tensor *x = fa_st_find(st, name);
    uint8_t *buf = malloc(len ? len : 1);
    fa_error err;
    if (!x)
        fail_msg("no tensor '%s' in the written file", name);
    if (x->dtype != dt)
        fail_msg("'%s' is %s, want %s", name, fa_st_dtype_name(x->dtype), fa_st_dtype_name(dt));
    assert_int_equal(x->end - x->begin, len);
    assert_int_equal(fa_st_read(st, x, buf, len, &err), 0);
    if (len && memcmp(buf, bytes, len) != 0) {
        for (size_t i = 0; i < len; i++)
            if (buf[i] != ((const uint8_t *)bytes)[i])
                fail_msg("'%s' byte %zu: 0x%02x, want 0x%02x", name, i, buf[i],
                         ((const uint8_t *)bytes)[i]);
    }
    free(buf);
}

static void test_out_views_and_save(void **state)
{
    /* a base model: BF16 weights and F16 scale (federated), an F32 norm and
     * a BF16 frozen embedding (excluded), an I64 counter and a BOOL mask */
    enum { NE = 15, NS = 2, NN = 5, NF = 300001, NM = 4 };
    uint16_t emb[NE], scale[NS], *frozen = malloc(NF * 2);
    float norm[NN] = {1.0f, 0.5f, -0.25f, 3.0f, 1e-20f};
    int64_t count = 123456789012345ll;
    uint8_t mask[NM] = {1, 0, 0, 1};
    uint64_t se[2] = {3, 5}, ss[1] = {NS}, sn[1] = {NN}, sf[1] = {NF}, sm[1] = {NM};
    for (int i = 0; i < NE; i++)
        emb[i] = fa_st_f32_to_bf16((float)i / 7.0f);
    for (int i = 0; i < NS; i++)
        scale[i] = fa_st_f32_to_f16(2.0f + (float)i);
    for (size_t i = 0; i < NF; i++)
        frozen[i] = (uint16_t)(0x3c00 + (i * 7919) % 4096);
    fa_st_view base_v[] = {
        {"emb", FA_ST_BF16, 2, se, emb, NULL, NULL},
        {"norm", FA_ST_F32, 1, sn, norm, NULL, NULL},
        {"count", FA_ST_I64, 0, NULL, &count, NULL, NULL},
        {"frozen", FA_ST_BF16, 1, sf, frozen, NULL, NULL},
        {"scale", FA_ST_F16, 1, ss, scale, NULL, NULL},
        {"mask", FA_ST_BOOL, 1, sm, mask, NULL, NULL},
    };
    const char *base_meta[] = {"format", "pt"};
    fa_safetensors *base = save_open("base.safetensors", base_v, 6, base_meta, 1), *st;
    fa_tensors *t;
    fa_error err;

    assert_int_equal(fa_tensors_from_st(&t, base, &err), 0);
    const char *exc[] = {"norm", "frozen"};
    assert_int_equal(fa_tensors_select(t, &(fa_tensor_select){NULL, 0, exc, 2, 0}, &err), 0);
    assert_int_equal(fa_tensors_fed_numel(t), NE + NS);
    assert_int_equal(fa_tensors_set_range(t, 0, 0.125f, &err), 0);
    float fed[NE + NS];
    for (int i = 0; i < NE + NS; i++)
        fed[i] = (float)i * 0.3f - 2.0f + 1e-3f * (float)(i % 3);
    fed[3] = 1.0f + 0x1p-8f; /* a BF16 tie */

    /* the model in its own dtypes */
    const char *meta[] = {"fedagg.version", "7", "format", "pt"};
    assert_int_equal(
        fa_tensors_save(tpath("out.safetensors"), 0644, t, fed, NE + NS, base, 0, meta, 2, &err),
        0);
    assert_int_equal(fa_st_open(&st, tpath("out.safetensors"), &err), 0);
    assert_int_equal(fa_st_count(st), 6);
    for (size_t i = 0; i < 6; i++) /* table order */
        assert_string_equal(fa_st_at(st, i)->name, base_v[i].name);
    uint16_t want16[NE];
    for (int i = 0; i < NE; i++)
        want16[i] = fa_st_f32_to_bf16(fed[i]);
    assert_int_equal(want16[3], 0x3f80);
    expect_tensor(st, "emb", FA_ST_BF16, want16, NE * 2);
    for (int i = 0; i < NS; i++)
        want16[i] = fa_st_f32_to_f16(fed[NE + i]);
    expect_tensor(st, "scale", FA_ST_F16, want16, NS * 2);
    expect_tensor(st, "norm", FA_ST_F32, norm, NN * 4);
    expect_tensor(st, "count", FA_ST_I64, &count, 8);
    expect_tensor(st, "frozen", FA_ST_BF16, frozen, NF * 2);
    expect_tensor(st, "mask", FA_ST_BOOL, mask, NM);
    assert_string_equal(fa_st_metadata_get(st, "fedagg.version"), "7");
    assert_string_equal(fa_st_metadata_get(st, "format"), "pt");
    char *json;
    assert_int_equal(fa_tensors_meta_encode(t, &json, &err), 0);
    assert_string_equal(fa_st_metadata_get(st, FA_TENSORS_META_KEY), json);
    assert_int_equal(fa_st_metadata_count(st), 3);
    free(json);
    /* and it reads back as the same table */
    fa_tensors *back;
    uint8_t d1[32], d2[32];
    assert_int_equal(fa_tensors_from_st(&back, st, &err), 0);
    assert_int_equal(fa_tensors_digest(t, d1, &err), 0);
    assert_int_equal(fa_tensors_digest(back, d2, &err), 0);
    assert_memory_equal(d1, d2, 32);
    assert_true(fa_tensors_at(back, 0)->range == 0.125f);
    fa_tensors_del(back);
    fa_st_del(st);

    /* as float32: floating tensors widened, federated ones exactly fed,
     * integers and BOOL as they are */
    assert_int_equal(
        fa_tensors_save(tpath("out32.safetensors"), 0644, t, fed, NE + NS, base, 1, NULL, 0, &err),
        0);
    assert_int_equal(fa_st_open(&st, tpath("out32.safetensors"), &err), 0);
    expect_tensor(st, "emb", FA_ST_F32, fed, NE * 4);
    expect_tensor(st, "scale", FA_ST_F32, fed + NE, NS * 4);
    expect_tensor(st, "norm", FA_ST_F32, norm, NN * 4);
    expect_tensor(st, "count", FA_ST_I64, &count, 8);
    expect_tensor(st, "mask", FA_ST_BOOL, mask, NM);
    float *wide = malloc(NF * 4);
    for (size_t i = 0; i < NF; i++)
        wide[i] = fa_st_bf16_to_f32(frozen[i]);
    expect_tensor(st, "frozen", FA_ST_F32, wide, NF * 4);
    assert_int_equal(fa_st_metadata_count(st), 1);
    fa_st_del(st);

    /* the views' fill asked for chunks that cut elements: the same bytes,
     * from a file base and from an in-memory one */
    uint8_t *raw;
    size_t raw_len;
    fa_safetensors *mem;
    assert_int_equal(fa_file_read_all(tpath("base.safetensors"), &raw, &raw_len, 1 << 24, &err), 0);
    assert_int_equal(fa_st_parse(&mem, raw, raw_len, "mem", &err), 0);
    assert_int_equal(fa_st_open(&st, tpath("out32.safetensors"), &err), 0);
    for (int pass = 0; pass < 2; pass++) {
        fa_tensors_out *o;
        assert_int_equal(fa_tensors_out_new(&o, t, fed, NE + NS, pass ? mem : base, 1, &err), 0);
        assert_int_equal(fa_tensors_out_count(o), 6);
        const fa_st_view *v = fa_tensors_out_views(o);
        for (size_t i = 0; i < 6; i++) {
            const fa_st_tensor *x = fa_st_find(st, v[i].name);
            size_t len = (size_t)(x->end - x->begin);
            uint8_t *want = malloc(len), *got = malloc(len + 1);
            assert_int_equal(v[i].dtype, x->dtype);
            assert_int_equal(fa_st_read(st, x, want, len, &err), 0);
            size_t steps[] = {1, 3, 5, 7, 4096 + 3};
            for (size_t k = 0; k < 5; k++) {
                if (len > 100000 && steps[k] < 4096)
                    continue; /* the big tensor: large steps only */
                memset(got, 0xcc, len + 1);
                for (size_t off = 0; off < len; off += steps[k]) {
                    size_t n = len - off < steps[k] ? len - off : steps[k];
                    if (v[i].fill(v[i].ctx, &v[i], off, got + off, n, &err) != 0)
                        fail_msg("fill %s [%zu, +%zu): %s", v[i].name, off, n, err.msg);
                }
                assert_memory_equal(got, want, len);
                assert_int_equal(got[len], 0xcc);
            }
            assert_int_equal(v[i].fill(v[i].ctx, &v[i], len - 1, got, 2, &err), FA_ERR_RANGE);
            free(want);
            free(got);
        }
        fa_tensors_out_del(o);
    }
    fa_st_del(st);
    fa_st_del(mem);
    free(raw);
    fa_tensors_out_del(NULL);

    /* errors: no base for a tensor that needs one, a base without it, the
     * wrong number of coordinates */
    fa_tensors_out *o = NULL;
    ASSERT_ERR(fa_tensors_out_new(&o, t, fed, NE + NS, NULL, 0, &err), FA_ERR_INVAL,
               "tensor 'norm' is not federated and no base model was given");
    assert_null(o);
    ASSERT_ERR(fa_tensors_out_new(&o, t, fed, NE + NS - 1, base, 0, &err), FA_ERR_INVAL,
               "16 federated coordinates given, the table has 17");
    ASSERT_ERR(fa_tensors_out_new(&o, t, NULL, NE + NS, base, 0, &err), FA_ERR_INVAL, "no vector");
    fa_safetensors *short_base = save_open("short_base.safetensors", base_v, 3, NULL, 0);
    ASSERT_ERR(fa_tensors_save(tpath("never.safetensors"), 0644, t, fed, NE + NS, short_base, 0,
                               NULL, 0, &err),
               FA_ERR_INVAL, "base model: missing tensor 'frozen'");
    assert_int_not_equal(access(tpath("never.safetensors"), F_OK), 0);
    fa_st_del(short_base);
    fa_st_view other_v[6];
    memcpy(other_v, base_v, sizeof(other_v));
    other_v[1].dtype = FA_ST_I32;
    fa_safetensors *other = save_open("other_base.safetensors", other_v, 6, NULL, 0);
    ASSERT_ERR(fa_tensors_out_new(&o, t, fed, NE + NS, other, 0, &err), FA_ERR_INVAL,
               "base model: tensor 'norm' is I32, the model's is F32");
    fa_st_del(other);

    /* all but the BOOL federated (an integer too): the BOOL still needs the
     * base; the federated integer is rounded to the nearest even */
    assert_int_equal(fa_tensors_meta_apply(t,
                                           "{\"emb\":1,\"norm\":1,\"count\":1,\"frozen\":1,"
                                           "\"scale\":1}",
                                           &err),
                     0);
    ASSERT_ERR(fa_tensors_out_new(&o, t, NULL, 0, NULL, 0, &err), FA_ERR_INVAL,
               "0 federated coordinates given (and no vector), the table has 300024");
    size_t d = (size_t)fa_tensors_fed_numel(t);
    float *all = calloc(d, sizeof(float));
    for (size_t i = 0; i < d; i++)
        all[i] = (float)(i % 1000) - 500.25f;
    ASSERT_ERR(
        fa_tensors_save(tpath("nobase.safetensors"), 0644, t, all, d, NULL, 0, NULL, 0, &err),
        FA_ERR_INVAL, "tensor 'mask' is not federated");
    assert_int_equal(
        fa_tensors_save(tpath("withbase.safetensors"), 0644, t, all, d, base, 0, NULL, 0, &err), 0);
    assert_int_equal(fa_st_open(&st, tpath("withbase.safetensors"), &err), 0);
    int64_t cnt = (int64_t)rintf(all[NE + NN]); /* rounded to the nearest even integer */
    expect_tensor(st, "count", FA_ST_I64, &cnt, 8);
    expect_tensor(st, "mask", FA_ST_BOOL, mask, NM);
    uint16_t *fz = malloc(NF * 2);
    for (size_t i = 0; i < NF; i++)
        fz[i] = fa_st_f32_to_bf16(all[NE + NN + 1 + i]);
    expect_tensor(st, "frozen", FA_ST_BF16, fz, NF * 2);
    free(fz);
    fa_st_del(st);
    /* none federated: no fedagg.federated metadata */
    assert_int_equal(fa_tensors_meta_apply(t, "{}", &err), 0);
    assert_int_equal(
        fa_tensors_save(tpath("none.safetensors"), 0644, t, NULL, 0, base, 1, NULL, 0, &err), 0);
    assert_int_equal(fa_st_open(&st, tpath("none.safetensors"), &err), 0);
    assert_null(fa_st_metadata_get(st, FA_TENSORS_META_KEY));
    expect_tensor(st, "frozen", FA_ST_F32, wide, NF * 4);
    fa_st_del(st);
    free(all);
    free(wide);
    fa_tensors_del(t);
    fa_st_del(base);
    free(frozen);

    /* every tensor federated: no base needed */
    struct row r[] = {{"p", FA_ST_F32, 1, {3}}, {"q", FA_ST_BF16, 2, {1, 2}}};
    float pq[5] = {1, 2, 3, 4, 5};
    uint16_t q16[2] = {0x4080, 0x40a0};
    t = table_of(r, 2);
    assert_int_equal(fa_tensors_select(t, NULL, &err), 0);
    assert_int_equal(
        fa_tensors_save(tpath("allfed.safetensors"), 0600, t, pq, 5, NULL, 0, NULL, 0, &err), 0);
    assert_int_equal(fa_st_open(&st, tpath("allfed.safetensors"), &err), 0);
    expect_tensor(st, "p", FA_ST_F32, pq, 12);
    expect_tensor(st, "q", FA_ST_BF16, q16, 4);
    assert_string_equal(fa_st_metadata_get(st, FA_TENSORS_META_KEY), "{\"p\":0.0,\"q\":0.0}");
    fa_st_del(st);
    fa_tensors_del(t);
}

/* ---------------------------------------------------------------------- */
/* A large table                                                           */

/* CPU-time bounds of the 10^5-tensor test: far above what the hash table
 * and the typo guard take, far below what a quadratic algorithm would (a
 * linear scan per lookup: minutes).  The sanitizer build checks every
 * memory access and runs several times slower (CI measured 2 s for the
 * typo guard there once), so its bound is wider. */
#if defined(__SANITIZE_ADDRESS__)
#define CPU_BOUND_S 10.0
#else
#define CPU_BOUND_S 2.0
#endif

/* ---------------------------------------------------------------------- */

static void test_large_table(void **state)
{
    enum { N = 100000 };
    fa_tensors *t, *c;
    fa_error err;
    char name[64];
    clock_t t0;

    assert_int_equal(fa_tensors_new(&t, &err), 0);
    t0 = clock();
    for (size_t i = 0; i < N; i++) {
        uint64_t shape[2] = {i % 7 + 1, i % 5 + 1};
        snprintf(name, sizeof(name), "model.layers.%zu.%s", i / 4,
                 (const char *[]){"q.weight", "k.weight", "norm.bias", "steps"}[i % 4]);
        assert_int_equal(
            fa_tensors_add(t, name, i % 4 == 3 ? FA_ST_I64 : FA_ST_BF16, 2, shape, &err), 0);
    }
    /* every name found at its index; lookups of names not in the table miss */
    for (size_t i = 0; i < N; i++) {
        snprintf(name, sizeof(name), "model.layers.%zu.%s", i / 4,
                 (const char *[]){"q.weight", "k.weight", "norm.bias", "steps"}[i % 4]);
        const fa_tensor *x = fa_tensors_find(t, name);
        if (!x || fa_tensors_index(t, name) != (long)i || strcmp(x->name, name) != 0)
            fail_msg("find(%s)", name);
        assert_int_equal(x->shape[0], i % 7 + 1);
        snprintf(name, sizeof(name), "model.layers.%zu.v.weight", i);
        assert_null(fa_tensors_find(t, name));
    }
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    print_message("      10^5 adds and 2 x 10^5 finds: %.3f s\n", secs);
    assert_true(secs < CPU_BOUND_S); /* a linear scan would take minutes */

    const char *exc[] = {"*.norm.*"};
    assert_int_equal(fa_tensors_select(t, &(fa_tensor_select){NULL, 0, exc, 1, 0}, &err), 0);
    assert_int_equal(fa_tensors_fed_count(t), N / 2);
    for (size_t i = 0; i < N; i++)
        if (fa_tensors_at(t, i)->federated)
            assert_int_equal(fa_tensors_set_range(t, i, f32_of(0x3c000000u + (uint32_t)i), &err),
                             0);
    char *json;
    assert_int_equal(fa_tensors_meta_encode(t, &json, &err), 0);
    assert_int_equal(fa_tensors_clone(&c, t, &err), 0);
    assert_int_equal(fa_tensors_select(c, NULL, &err), 0);
    assert_int_equal(fa_tensors_fed_count(c), 3 * N / 4);
    assert_int_equal(fa_tensors_meta_apply(c, json, &err), 0);
    free(json);
    uint8_t a[32], b[32];
    assert_int_equal(fa_tensors_digest(t, a, &err), 0);
    assert_int_equal(fa_tensors_digest(c, b, &err), 0);
    assert_memory_equal(a, b, 32);
    assert_int_equal(fa_tensors_ranges_digest(t, a, &err), 0);
    assert_int_equal(fa_tensors_ranges_digest(c, b, &err), 0);
    assert_memory_equal(a, b, 32);
    assert_int_equal(fa_tensors_fed_numel(c), fa_tensors_fed_numel(t));

    /* the typo guard's suggestions over 10^5 names */
    const char *typo[] = {"model.layers.99.q.wieght"};
    t0 = clock();
    ASSERT_ERR(fa_tensors_select(c, &(fa_tensor_select){typo, 1, NULL, 0, 0}, &err), FA_ERR_INVAL,
               "nearest: 'model.layers.99.q.weight'");
    secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    print_message("      the typo guard over 10^5 names: %.3f s\n", secs);
    assert_true(secs < CPU_BOUND_S);
    fa_tensors_del(c);
    fa_tensors_del(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_from_st_every_dtype_and_rank),
        cmocka_unit_test(test_add_errors_and_clone),
        cmocka_unit_test(test_digests),
        cmocka_unit_test(test_glob),
        cmocka_unit_test(test_select),
        cmocka_unit_test(test_set_federated_and_range),
        cmocka_unit_test(test_meta_round_trip),
        cmocka_unit_test(test_meta_refusals),
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_read_fed),
        cmocka_unit_test(test_half_patterns),
        cmocka_unit_test(test_float_narrowing),
        cmocka_unit_test(test_integer_conversions),
        cmocka_unit_test(test_out_views_and_save),
        cmocka_unit_test(test_large_table),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
