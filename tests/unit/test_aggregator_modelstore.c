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
#include "common/fa_crc32c.h"
#include "common/fa_file.h"
#include "common/fa_hex.h"
#include "common/fa_sha256.h"

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
    fa_st_view model[2] = {{"fc1.weight", FA_ST_F32, 2, wshape, w, NULL, NULL},
                           {"fc1.bias", FA_ST_F32, 1, bshape, b, NULL, NULL}};
    fa_st_view st[1] = {{"m", FA_ST_F32, 1, mshape, m, NULL, NULL}};
    fa_model_files files = {.model = model, .n_model = 2, .meta = meta, .n_meta = 1,
                            .state = st, .n_state = 1, .state_meta = smeta, .n_state_meta = 1};
    return fa_model_store_commit(s, v, v, &files, err);
}

/* Flips the last bit of the file at path (in place, atomically). */
static void flip_last_bit(const char *path)
{
    uint8_t *data;
    size_t len;
    assert_int_equal(fa_file_read_all(path, &data, &len, 1 << 20, NULL), 0);
    data[len - 1] ^= 1;
    assert_int_equal(fa_file_write_atomic(path, data, len, 0644, NULL), 0);
    free(data);
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

/* Going back to a retained version (fedagg audit repair --store): the newer
 * versions' files and the old MANIFEST move aside, nothing is deleted, the
 * store opens at that version and commits the next one over again; a
 * version no longer retained, or damaged, is refused with nothing moved. */
static void test_rollback(void **state)
{
    fa_model_store *s;
    struct fa_model_version cur;
    char sub[300], aside[400], p[600];
    uint64_t was = 0;
    struct stat st;
    fa_error err;
    (void)state;

    snprintf(sub, sizeof(sub), "%s/rollback", dir);
    snprintf(aside, sizeof(aside), "%s/aside", sub);
    assert_int_equal(fa_model_store_open(&s, sub, 3, &err), 0);
    for (uint64_t v = 0; v < 5; v++)
        assert_int_equal(commit(s, v, &err), 0);
    fa_model_store_del(s);
    /* retained: 2, 3, 4 */
    assert_int_equal(fa_model_store_rollback(sub, 1, aside, 0, &was, &err), FA_ERR_NOTFOUND);
    assert_non_null(strstr(err.msg, "the store keeps 2, 3, 4"));
    assert_int_equal(stat(aside, &st), -1);
    assert_int_equal(fa_model_store_rollback(sub, 4, aside, 0, &was, &err), 0); /* current */
    assert_int_equal(was, 4);
    assert_int_equal(stat(aside, &st), -1);
    assert_int_equal(fa_model_store_rollback(sub, 2, aside, 1, &was, &err), 0); /* dry run */
    assert_int_equal(stat(aside, &st), -1);
    assert_int_equal(fa_model_store_rollback(sub, 2, aside, 0, &was, &err), 0);
    assert_int_equal(was, 4);
    for (uint64_t v = 3; v <= 4; v++) {
        snprintf(p, sizeof(p), "%s/model-%08llu.safetensors", aside, (unsigned long long)v);
        assert_int_equal(stat(p, &st), 0);
        snprintf(p, sizeof(p), "%s/state-%08llu.safetensors", aside, (unsigned long long)v);
        assert_int_equal(stat(p, &st), 0);
        snprintf(p, sizeof(p), "%s/model-%08llu.safetensors", sub, (unsigned long long)v);
        assert_int_equal(stat(p, &st), -1);
    }
    snprintf(p, sizeof(p), "%s/MANIFEST", aside);
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(fa_model_store_open(&s, sub, 3, &err), 0);
    assert_int_equal(fa_model_store_current(s, &cur), 0);
    assert_int_equal(cur.version, 2);
    assert_int_equal(commit(s, 3, &err), 0);
    fa_model_store_del(s);
    /* a damaged version is not gone back to */
    snprintf(p, sizeof(p), "%s/model-%08llu.safetensors", sub, 2ull);
    flip_last_bit(p);
    snprintf(aside, sizeof(aside), "%s/aside2", sub);
    assert_int_equal(fa_model_store_rollback(sub, 2, aside, 0, &was, &err), FA_ERR_CORRUPT);
    assert_int_equal(stat(aside, &st), -1);
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

/* A view whose bytes come from a fill callback: element i is base + i. */
static int fill_ramp(void *ctx, const fa_st_view *v, uint64_t off, void *buf, size_t len,
                     fa_error *err)
{
    const float *base = ctx;
    (void)v;
    (void)err;
    assert_int_equal(off % 4, 0);
    assert_int_equal(len % 4, 0);
    for (size_t i = 0; i < len / 4; i++) {
        float x = *base + (float)(off / 4 + i);
        memcpy((uint8_t *)buf + 4 * i, &x, 4);
    }
    return 0;
}

static int fill_fails(void *ctx, const fa_st_view *v, uint64_t off, void *buf, size_t len,
                      fa_error *err)
{
    (void)ctx;
    (void)buf;
    (void)len;
    return off > 0 ? fa_errorf(err, FA_ERR_IO, "tensor %s: disk gone", v->name) : 0;
}

/* Master files: written, verified on open, retired with their version;
 * views produced by fill callbacks (3 MiB: several chunks); a failed fill
 * leaves no file of the version behind. */
static void test_master_and_fill(void **state)
{
    fa_model_store *s;
    struct fa_model_version cur;
    uint64_t big[1] = {3u << 18}, small[1] = {4};
    uint16_t bf[4] = {0x3f80, 0x4000, 0x4040, 0x4080}; /* 1, 2, 3, 4 in BF16 */
    float b0 = 10.0f, b1 = 0.0f;
    char path[512], wpath[512];
    fa_safetensors *st;
    float got[4];
    fa_error err;
    (void)state;

    char sub[300];
    snprintf(sub, sizeof(sub), "%s/master", dir);
    assert_int_equal(fa_model_store_open(&s, sub, 2, NULL), 0);
    for (uint64_t v = 0; v < 3; v++) {
        fa_st_view model[2] = {{"w", FA_ST_BF16, 1, small, bf, NULL, NULL},
                               {"big", FA_ST_F32, 1, big, NULL, fill_ramp, &b0}};
        fa_st_view master[1] = {{"w", FA_ST_F32, 1, small, NULL, fill_ramp, &b1}};
        fa_model_files files = {.model = model, .n_model = 2, .master = master, .n_master = 1};
        assert_int_equal(fa_model_store_commit(s, v, v, &files, NULL), 0);
    }
    assert_int_equal(fa_model_store_current(s, &cur), 0);
    assert_int_equal(cur.has_master, 1);
    assert_non_null(fa_model_store_weights_path(s, 2, wpath, sizeof(wpath)));
    assert_non_null(strstr(wpath, "master-00000002.safetensors"));
    assert_null(fa_model_store_weights_path(s, 0, wpath, sizeof(wpath))); /* retired */
    assert_false(exists("master/master-00000000.safetensors"));
    assert_true(exists("master/master-00000001.safetensors"));
    fa_model_store_del(s);

    /* The files hold what the views produced. */
    snprintf(path, sizeof(path), "%s/master-00000002.safetensors", sub);
    assert_int_equal(fa_st_open(&st, path, NULL), 0);
    assert_int_equal(fa_st_read_f32(st, fa_st_find(st, "w"), got, 4, NULL), 0);
    for (int i = 0; i < 4; i++)
        assert_true(got[i] == (float)i);
    fa_st_del(st);
    snprintf(path, sizeof(path), "%s/model-00000002.safetensors", sub);
    assert_int_equal(fa_st_open(&st, path, NULL), 0);
    {
        const fa_st_tensor *t = fa_st_find(st, "big");
        float *all = malloc(big[0] * 4);
        assert_non_null(all);
        assert_int_equal(fa_st_read_f32(st, t, all, big[0], NULL), 0);
        for (uint64_t i = 0; i < big[0]; i += 4099)
            assert_true(all[i] == 10.0f + (float)i);
        free(all);
        assert_int_equal(fa_st_read_f32(st, fa_st_find(st, "w"), got, 4, NULL), 0);
        assert_true(got[3] == 4.0f);
    }
    fa_st_del(st);

    /* Reopen verifies the master file too. */
    assert_int_equal(fa_model_store_open(&s, sub, 2, NULL), 0);
    {
        fa_st_view model[1] = {{"big", FA_ST_F32, 1, big, NULL, fill_fails, NULL}};
        fa_model_files files = {.model = model, .n_model = 1};
        assert_int_equal(fa_model_store_commit(s, 3, 3, &files, &err), FA_ERR_IO);
        assert_non_null(strstr(err.msg, "disk gone"));
    }
    assert_int_equal(fa_model_store_current(s, &cur), 0);
    assert_int_equal(cur.version, 2);
    assert_false(exists("master/model-00000003.safetensors"));
    fa_model_store_del(s);
    snprintf(path, sizeof(path), "%s/master-00000002.safetensors", sub);
    flip_last_bit(path);
    assert_int_equal(fa_model_store_open(&s, sub, 2, &err), FA_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "master weights are damaged"));
}

/* Delta files: committed with their version (MANIFEST names their size and
 * digest, with or without a master file), retired with it, left over by an
 * interrupted commit removed, verified at open. */
static void test_delta_files(void **state)
{
    fa_model_store *s;
    struct fa_model_version cur, v1;
    uint64_t shape[1] = {4}, dshape[1] = {2};
    float w[4] = {1, 2, 3, 4}, wm[4] = {1.5f, 2, 3, 4};
    uint8_t dq[2] = {7, 9};
    const char *dmeta[] = {"fedagg.delta", "1"};
    char sub[300], path[512];
    fa_error err;
    (void)state;

    snprintf(sub, sizeof(sub), "%s/delta", dir);
    assert_int_equal(fa_model_store_open(&s, sub, 2, NULL), 0);
    for (uint64_t v = 0; v < 4; v++) {
        fa_st_view model[1] = {{"w", FA_ST_F32, 1, shape, w, NULL, NULL}};
        fa_st_view master[1] = {{"w", FA_ST_F32, 1, shape, wm, NULL, NULL}};
        fa_st_view delta[1] = {{"q.w", FA_ST_U8, 1, dshape, dq, NULL, NULL}};
        fa_model_files files = {.model = model, .n_model = 1};
        if (v > 0) { /* version 0 has no delta; version 2 no master */
            files.delta = delta;
            files.n_delta = 1;
            files.delta_meta = dmeta;
            files.n_delta_meta = 1;
        }
        if (v != 2) {
            files.master = master;
            files.n_master = 1;
        }
        assert_int_equal(fa_model_store_commit(s, v, v, &files, NULL), 0);
    }
    assert_int_equal(fa_model_store_current(s, &cur), 0);
    assert_int_equal(cur.has_delta, 1);
    assert_true(cur.delta_size > 0);
    assert_true(exists("delta/delta-00000003.safetensors"));
    assert_true(exists("delta/delta-00000002.safetensors"));
    assert_false(exists("delta/delta-00000001.safetensors")); /* retired with version 1 */
    fa_model_store_del(s);
    /* reopen: the MANIFEST fields read back (version 2: delta, no master) */
    assert_int_equal(fa_model_store_open(&s, sub, 2, NULL), 0);
    assert_int_equal(fa_model_store_version(s, 2, &v1), 0);
    assert_int_equal(v1.has_delta, 1);
    assert_int_equal(v1.has_master, 0);
    assert_int_equal(fa_model_store_current(s, &v1), 0);
    assert_int_equal(v1.has_master, 1);
    assert_memory_equal(v1.delta_sha256, cur.delta_sha256, 32);
    assert_int_equal(v1.delta_size, cur.delta_size);
    fa_model_store_del(s);
    /* a delta of an uncommitted version is a leftover */
    snprintf(path, sizeof(path), "%s/delta-00000004.safetensors", sub);
    assert_int_equal(fa_file_write_atomic(path, "x", 1, 0644, NULL), 0);
    assert_int_equal(fa_model_store_open(&s, sub, 2, NULL), 0);
    assert_false(exists("delta/delta-00000004.safetensors"));
    fa_model_store_del(s);
    /* a damaged delta of the current version is refused at open */
    snprintf(path, sizeof(path), "%s/delta-00000003.safetensors", sub);
    flip_last_bit(path);
    fa_error_clear(&err);
    assert_int_equal(fa_model_store_open(&s, sub, 2, &err), FA_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "the model delta is damaged"));
    /* a malformed delta field */
    snprintf(path, sizeof(path), "%s/MANIFEST", sub);
    {
        uint8_t *data;
        size_t len;
        char *p;
        assert_int_equal(fa_file_read_all(path, &data, &len, 1 << 20, NULL), 0);
        data = realloc(data, len + 1);
        data[len] = '\0';
        /* the delta field: " d<size>:<hex>" (a digest may start with 'd' too) */
        for (p = strstr((char *)data, " d"); p; p = strstr(p + 1, " d")) {
            size_t k = 2;
            while (p[k] >= '0' && p[k] <= '9')
                k++;
            if (k > 2 && p[k] == ':')
                break;
        }
        assert_non_null(p);
        p[1] = 'x';
        assert_int_equal(fa_file_write_atomic(path, data, len, 0644, NULL), 0);
        free(data);
    }
    fa_error_clear(&err);
    assert_int_equal(fa_model_store_open(&s, sub, 2, &err), FA_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "malformed"));
}

/* A store of versions 0 and 1 (keeping 3) in the directory name under
 * dir, whose path goes to sub. */
static void two_versions(char *sub, size_t n, const char *name)
{
    fa_model_store *s;
    snprintf(sub, n, "%s/%s", dir, name);
    assert_int_equal(fa_model_store_open(&s, sub, 3, NULL), 0);
    assert_int_equal(commit(s, 0, NULL), 0);
    assert_int_equal(commit(s, 1, NULL), 0);
    fa_model_store_del(s);
}

/* A MANIFEST written before master files existed (5 fields a line) opens. */
static void test_old_manifest(void **state)
{
    fa_model_store *s;
    struct fa_model_version cur;
    char path[512], sub[300];
    uint8_t *data;
    size_t len;
    (void)state;

    two_versions(sub, sizeof(sub), "old");
    snprintf(path, sizeof(path), "%s/MANIFEST", sub);
    assert_int_equal(fa_file_read_all(path, &data, &len, 1 << 20, NULL), 0);
    /* strip the " -" master field of every line */
    {
        char *text = malloc(len + 1), *o = text;
        for (size_t i = 0; i < len; i++) {
            if (i + 2 < len && data[i] == ' ' && data[i + 1] == '-' && data[i + 2] == '\n') {
                i++; /* skip " -", keep the newline */
                continue;
            }
            *o++ = (char)data[i];
        }
        *o = '\0';
        assert_null(strstr(text, " -"));
        assert_int_equal(fa_file_write_atomic(path, text, (size_t)(o - text), 0644, NULL), 0);
        free(text);
    }
    free(data);
    assert_int_equal(fa_model_store_open(&s, sub, 3, NULL), 0);
    assert_int_equal(fa_model_store_current(s, &cur), 0);
    assert_int_equal(cur.version, 1);
    assert_int_equal(cur.has_master, 0);
    fa_model_store_del(s);
}

/* The <state> field (the sixth) of MANIFEST line `line` (1-based: 2 is the
 * first version) of the store in sub, into out. */
static void state_field(const char *sub, int line, char *out, size_t n)
{
    char path[512], *save = NULL, *l, *f;
    uint8_t *data;
    size_t len;
    snprintf(path, sizeof(path), "%s/MANIFEST", sub);
    assert_int_equal(fa_file_read_all(path, &data, &len, 1 << 20, NULL), 0);
    l = strtok_r((char *)data, "\n", &save);
    for (int i = 1; i < line; i++)
        l = strtok_r(NULL, "\n", &save);
    assert_non_null(l);
    f = l;
    for (int i = 0; i < 5; i++)
        f = strchr(f, ' ') + 1;
    snprintf(out, n, "%.*s", (int)strcspn(f, " "), f);
    free(data);
}

/* The optimizer state's digest is its CRC-32C (c and 8 hex digits in the
 * MANIFEST), checked at open; a MANIFEST whose lines give the SHA-256, as
 * aggregators before wrote it, still opens and is checked, and the next
 * commit adds a CRC line after them. */
static void test_state_digest(void **state)
{
    fa_model_store *s;
    char sub[300], path[512], field[80], want[80], mpath[512];
    uint8_t *data, sha[32];
    size_t len;
    fa_error err;
    (void)state;

    two_versions(sub, sizeof(sub), "digest");
    /* version 1's field is the CRC-32C of its state file */
    snprintf(path, sizeof(path), "%s/state-00000001.safetensors", sub);
    assert_int_equal(fa_file_read_all(path, &data, &len, 1 << 20, NULL), 0);
    snprintf(want, sizeof(want), "c%08x", (unsigned)fa_crc32c(0, data, len));
    assert_int_equal(fa_sha256(sha, data, len), 0);
    free(data);
    state_field(sub, 3, field, sizeof(field));
    assert_string_equal(field, want);
    /* a damaged state is refused by name */
    flip_last_bit(path);
    assert_int_equal(fa_model_store_open(&s, sub, 3, &err), FA_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "state-00000001.safetensors"));
    assert_non_null(strstr(err.msg, "CRC-32C does not match MANIFEST"));
    flip_last_bit(path);
    /* the MANIFEST as an older aggregator wrote it: the state's SHA-256 */
    snprintf(mpath, sizeof(mpath), "%s/MANIFEST", sub);
    assert_int_equal(fa_file_read_all(mpath, &data, &len, 1 << 20, NULL), 0);
    {
        char *text = calloc(1, len + 200), *at = strstr((char *)data, want), hex[65];
        size_t head = (size_t)(at - (char *)data);
        assert_non_null(at);
        fa_hex_encode(hex, sizeof(hex), sha, 32);
        snprintf(text, len + 200, "%.*s%s%s", (int)head, (char *)data, hex,
                 (char *)data + head + strlen(want));
        assert_int_equal(fa_file_write_atomic(mpath, text, strlen(text), 0644, NULL), 0);
        free(text);
    }
    free(data);
    state_field(sub, 3, field, sizeof(field));
    assert_int_equal(strlen(field), 64);
    flip_last_bit(path);
    assert_int_equal(fa_model_store_open(&s, sub, 3, &err), FA_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "SHA-256 does not match MANIFEST"));
    flip_last_bit(path);
    assert_int_equal(fa_model_store_open(&s, sub, 3, NULL), 0);
    assert_int_equal(commit(s, 2, NULL), 0);
    fa_model_store_del(s);
    state_field(sub, 3, field, sizeof(field));
    assert_int_equal(strlen(field), 64); /* version 1's line as it was */
    state_field(sub, 4, field, sizeof(field));
    assert_int_equal(field[0], 'c');
    assert_int_equal(strlen(field), 9);
    assert_int_equal(fa_model_store_open(&s, sub, 3, NULL), 0);
    fa_model_store_del(s);
    /* a CRC field of the wrong length is a malformed line */
    assert_int_equal(fa_file_read_all(mpath, &data, &len, 1 << 20, NULL), 0);
    {
        char *at = strstr((char *)data, field);
        assert_non_null(at);
        memmove(at + 8, at + 9, len - (size_t)(at + 9 - (char *)data));
        assert_int_equal(fa_file_write_atomic(mpath, data, len - 1, 0644, NULL), 0);
    }
    free(data);
    assert_int_equal(fa_model_store_open(&s, sub, 3, &err), FA_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "MANIFEST:4: malformed line"));
}

/* The inode of the file at path. */
static ino_t inode_of(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return st.st_ino;
}

/* Every value of the state file of version v of store s is -v. */
static void assert_state_is(fa_model_store *s, uint64_t v)
{
    fa_safetensors *st;
    char path[512];
    float m[9];

    fa_model_store_state_path(s, v, path, sizeof(path));
    assert_int_equal(fa_st_open(&st, path, NULL), 0);
    assert_int_equal(fa_st_read_f32(st, fa_st_find(st, "m"), m, 9, NULL), 0);
    for (int i = 0; i < 9; i++)
        assert_true(m[i] == -(float)v);
    fa_st_del(st);
}

/* The optimizer state is written over the state file of the version that
 * retired last (state.spare): its inode, holding the new state; the spare
 * is not a version (reopened, the store neither lists, reads nor removes
 * it, so one torn by a crash while written over changes nothing); one that
 * cannot be used (a directory) is left, and the state goes to a new file. */
static void test_state_written_over_spare(void **state)
{
    fa_model_store *s;
    struct fa_model_version cur;
    char sub[300], spare[512], path[512];
    ino_t retired;
    struct stat st;
    (void)state;

    snprintf(sub, sizeof(sub), "%s/spare", dir);
    assert_int_equal(fa_model_store_open(&s, sub, 2, NULL), 0);
    fa_model_store_spare_state_path(s, spare, sizeof(spare));
    assert_int_equal(commit(s, 0, NULL), 0);
    assert_int_equal(commit(s, 1, NULL), 0);
    assert_int_equal(access(spare, F_OK), -1); /* nothing retired yet */
    /* committing 2 retires 0: its state file becomes the spare */
    retired = inode_of(fa_model_store_state_path(s, 0, path, sizeof(path)));
    assert_int_equal(commit(s, 2, NULL), 0);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(inode_of(spare), retired);
    /* and 3's state is written into it; 1's becomes the spare */
    ino_t next = inode_of(fa_model_store_state_path(s, 1, path, sizeof(path)));
    assert_int_equal(commit(s, 3, NULL), 0);
    assert_int_equal(inode_of(fa_model_store_state_path(s, 3, path, sizeof(path))), retired);
    assert_int_equal(inode_of(spare), next);
    assert_state_is(s, 3);
    assert_state_is(s, 2);
    fa_model_store_del(s);

    /* a spare torn by a crash while written over: reopened, the store is
     * version 3 and keeps the spare, which the next commit writes over */
    assert_int_equal(fa_file_write_atomic(spare, "torn", 4, 0644, NULL), 0);
    assert_int_equal(fa_model_store_open(&s, sub, 2, NULL), 0);
    assert_int_equal(fa_model_store_current(s, &cur), 0);
    assert_int_equal(cur.version, 3);
    assert_true(fa_model_store_has(s, 2) && !fa_model_store_has(s, 1));
    retired = inode_of(spare);
    assert_int_equal(commit(s, 4, NULL), 0);
    assert_int_equal(inode_of(fa_model_store_state_path(s, 4, path, sizeof(path))), retired);
    assert_state_is(s, 4);

    /* a directory where the spare goes: left there, the state a new file */
    assert_int_equal(unlink(spare), 0);
    assert_int_equal(mkdir(spare, 0700), 0);
    assert_int_equal(commit(s, 5, NULL), 0);
    assert_state_is(s, 5);
    assert_int_equal(lstat(spare, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(access(fa_model_store_state_path(s, 3, path, sizeof(path)), F_OK), -1);
    assert_int_equal(rmdir(spare), 0);
    fa_model_store_del(s);
}

/* A commit written a chunk at a time (fa_model_store_begin / put / finish):
 * the files' views interleaved, a state vector written ahead of the other;
 * the MANIFEST's digests are the files' (reopen verifies them) and the
 * files hold what was put.  A put out of order and a view left short are
 * refused, naming it, and leave the store as it was, with no file of the
 * new version. */
static void test_staged_commit(void **state)
{
    enum { N = 300000 };
    static float w[N], m[N], v[N];
    uint64_t shape[1] = {N}, one[1] = {1};
    float bias = 2.5f;
    char sub[300], path[512];
    const char *meta[] = {"fedagg.version", "1"};
    fa_model_store *s;
    fa_model_commit *c;
    struct fa_model_version cur;
    fa_safetensors *st;
    fa_error err;
    (void)state;

    for (int i = 0; i < N; i++) {
        w[i] = (float)i * 0.25f;
        m[i] = -(float)i;
        v[i] = (float)i + 0.5f;
    }
    snprintf(sub, sizeof(sub), "%s/staged", dir);
    assert_int_equal(fa_model_store_open(&s, sub, 2, NULL), 0);
    fa_st_view model[2] = {{"w", FA_ST_F32, 1, shape, NULL, NULL, NULL},
                           {"b", FA_ST_F32, 1, one, NULL, NULL, NULL}};
    fa_st_view sv[2] = {{"m", FA_ST_F32, 1, shape, NULL, NULL, NULL},
                        {"v", FA_ST_F32, 1, shape, NULL, NULL, NULL}};
    fa_model_files files = {.model = model, .n_model = 2, .meta = meta, .n_meta = 1,
                            .state = sv, .n_state = 2};
    for (uint64_t ver = 1; ver <= 2; ver++) {
        assert_int_equal(fa_model_store_begin(s, ver, ver, &files, &c, &err), 0);
        for (size_t e = 0; e < N; e += 65536) {
            size_t k = N - e < 65536 ? N - e : 65536;
            assert_int_equal(fa_model_commit_put(c, FA_MODEL_FILE_STATE, 1, e * 4, v + e, k * 4,
                                                 &err), 0);
            assert_int_equal(fa_model_commit_put(c, FA_MODEL_FILE_MODEL, 0, e * 4, w + e, k * 4,
                                                 &err), 0);
            assert_int_equal(fa_model_commit_put(c, FA_MODEL_FILE_STATE, 0, e * 4, m + e, k * 4,
                                                 &err), 0);
        }
        assert_int_equal(fa_model_commit_put(c, FA_MODEL_FILE_MODEL, 1, 0, &bias, 4, &err), 0);
        assert_int_equal(fa_model_commit_put(c, FA_MODEL_FILE_DELTA, 0, 0, &bias, 4, &err),
                         FA_ERR_INVAL); /* no delta file in this commit */
        assert_int_equal(fa_model_store_finish(c, &err), 0);
    }
    fa_model_store_del(s);
    assert_int_equal(fa_model_store_open(&s, sub, 2, &err), 0); /* verifies the digests */
    assert_int_equal(fa_model_store_current(s, &cur), 0);
    assert_int_equal(cur.version, 2);
    fa_model_store_state_path(s, 2, path, sizeof(path));
    assert_int_equal(fa_st_open(&st, path, NULL), 0);
    {
        float *got = malloc(N * 4);
        assert_non_null(got);
        assert_int_equal(fa_st_read_f32(st, fa_st_find(st, "v"), got, N, NULL), 0);
        assert_memory_equal(got, v, N * 4);
        assert_int_equal(fa_st_read_f32(st, fa_st_find(st, "m"), got, N, NULL), 0);
        assert_memory_equal(got, m, N * 4);
        free(got);
    }
    fa_st_del(st);

    /* Out of order, then short: refused, nothing of version 3 left. */
    assert_int_equal(fa_model_store_begin(s, 3, 3, &files, &c, &err), 0);
    assert_int_equal(fa_model_commit_put(c, FA_MODEL_FILE_MODEL, 0, 0, w, 4000, &err), 0);
    assert_int_equal(fa_model_commit_put(c, FA_MODEL_FILE_MODEL, 0, 8000, w, 4000, &err),
                     FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "'w': bytes at 8000 written when 4000 are"));
    fa_model_commit_abort(c);
    assert_int_equal(fa_model_store_begin(s, 3, 3, &files, &c, &err), 0);
    assert_int_equal(fa_model_commit_put(c, FA_MODEL_FILE_MODEL, 0, 0, w, N * 4, &err), 0);
    assert_int_equal(fa_model_commit_put(c, FA_MODEL_FILE_MODEL, 1, 0, &bias, 4, &err), 0);
    assert_int_equal(fa_model_commit_put(c, FA_MODEL_FILE_STATE, 1, 0, v, N * 4, &err), 0);
    assert_int_equal(fa_model_store_finish(c, &err), FA_ERR_RANGE);
    assert_non_null(strstr(err.msg, "tensor 'm' incomplete"));
    assert_int_equal(fa_model_store_current(s, &cur), 0);
    assert_int_equal(cur.version, 2);
    assert_false(exists("staged/model-00000003.safetensors"));
    assert_false(exists("staged/state-00000003.safetensors"));
    {
        char cmd[600];
        snprintf(cmd, sizeof(cmd), "ls %s | grep -q tmp", sub);
        assert_int_not_equal(system(cmd), 0); /* no temporary file either (grep finds none) */
    }
    assert_int_equal(fa_model_store_begin(s, 2, 2, &files, &c, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "version 2 is not after the current 2"));
    fa_model_store_del(s);
}

/* Pinned versions outlive the window; a restore commits a pinned old
 * version again, byte for byte (digests, state), as the next version; a
 * damaged source is not restored and leaves the store as it was. */
static void test_pin_and_restore(void **state)
{
    fa_model_store *s;
    struct fa_model_version v1, v4, cur;
    char a[512], b[512];
    uint8_t *x, *y;
    size_t nx, ny;
    fa_error err;
    char sub[300];

    (void)state;
    snprintf(sub, sizeof(sub), "%s/pin", dir);
    assert_int_equal(fa_model_store_open(&s, sub, 2, &err), 0);
    for (uint64_t v = 0; v < 2; v++)
        assert_int_equal(commit(s, v, &err), 0);
    assert_int_equal(fa_model_store_pin(s, 1, 1), 0);
    assert_int_equal(fa_model_store_pin(s, 1, 1), 0); /* twice: once */
    for (uint64_t v = 2; v < 4; v++)
        assert_int_equal(commit(s, v, &err), 0);
    /* the window holds 2 and 3; 1 stays, pinned; 0 went */
    assert_true(fa_model_store_has(s, 1));
    assert_false(fa_model_store_has(s, 0));
    assert_true(exists("pin/state-00000001.safetensors"));
    assert_int_equal(fa_model_store_version(s, 1, &v1), 0);
    /* version 4 = version 1 again */
    assert_int_equal(fa_model_store_restore(s, 4, 9, 1, &err), 0);
    assert_int_equal(fa_model_store_current(s, &cur), 0);
    assert_int_equal(cur.version, 4);
    assert_int_equal(cur.round, 9);
    assert_memory_equal(cur.model_sha256, v1.model_sha256, 32);
    assert_int_equal(cur.state_crc32c, v1.state_crc32c);
    assert_int_equal(cur.has_delta, 0);
    fa_model_store_state_path(s, 1, a, sizeof(a));
    fa_model_store_state_path(s, 4, b, sizeof(b));
    assert_int_equal(fa_file_read_all(a, &x, &nx, 1 << 20, NULL), 0);
    assert_int_equal(fa_file_read_all(b, &y, &ny, 1 << 20, NULL), 0);
    assert_int_equal(nx, ny);
    assert_memory_equal(x, y, nx);
    free(x);
    free(y);
    assert_int_equal(fa_model_store_restore(s, 4, 9, 1, &err), FA_ERR_INVAL); /* not after 4 */
    assert_int_equal(fa_model_store_restore(s, 5, 9, 0, &err), FA_ERR_NOTFOUND);
    assert_non_null(strstr(err.msg, "version 0 is not retained"));
    /* unpinned, 1 retires with the next commit */
    assert_int_equal(fa_model_store_pin(s, 1, 0), 0);
    assert_int_equal(commit(s, 5, &err), 0);
    assert_false(fa_model_store_has(s, 1));
    assert_false(exists("pin/model-00000001.safetensors"));
    fa_model_store_del(s);

    /* reopened: the MANIFEST lists what was kept */
    assert_int_equal(fa_model_store_open(&s, sub, 2, &err), 0);
    assert_int_equal(fa_model_store_version(s, 4, &v4), 0);
    assert_memory_equal(v4.model_sha256, v1.model_sha256, 32);
    /* a damaged source is refused and nothing changes */
    fa_model_store_model_path(s, 4, a, sizeof(a));
    flip_last_bit(a);
    assert_int_equal(fa_model_store_restore(s, 6, 10, 4, &err), FA_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "damaged"));
    assert_int_equal(fa_model_store_current(s, &cur), 0);
    assert_int_equal(cur.version, 5);
    assert_false(exists("pin/model-00000006.safetensors"));
    assert_false(exists("pin/state-00000006.safetensors"));
    fa_model_store_del(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commit_retain_reopen),
        cmocka_unit_test(test_interrupted_commit_is_cleaned),
        cmocka_unit_test(test_damaged_model_is_refused),
        cmocka_unit_test(test_state_digest),
        cmocka_unit_test(test_master_and_fill),
        cmocka_unit_test(test_old_manifest),
        cmocka_unit_test(test_delta_files),
        cmocka_unit_test(test_state_written_over_spare),
        cmocka_unit_test(test_staged_commit),
        cmocka_unit_test(test_rollback),
        cmocka_unit_test(test_pin_and_restore),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
