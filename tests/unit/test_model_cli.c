/* `fedagg model init`, `inspect`, `diff` and `convert`, run as a user runs
 * them (the binary from $FA_BIN): exit codes, what they print, that the
 * digests they print are the files' SHA-256, the federated tensors under a
 * config's selection or a file's metadata, and every byte `convert`
 * writes. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/fa_safetensors.h"
#include "model/mlp.h"
#include "model/tensors.h"

static char tmpdir[256], fedagg[512];

static int setup(void **state)
{
    const char *bin = getenv("FA_BIN");
    snprintf(fedagg, sizeof(fedagg), "%s/fedagg", bin ? bin : "../bin");
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/fa_test_model_cli.XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Runs `fedagg args`, stdout+stderr into *out (malloc'ed); returns the exit code. */
static int run(char **out, const char *fmt, ...)
{
    char args[2048], cmd[4096], *buf = calloc(1, 1 << 20);
    va_list ap;
    size_t len = 0, r;
    FILE *p;

    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof(cmd), "%s %s 2>&1", fedagg, args);
    p = popen(cmd, "r");
    assert_non_null(p);
    while ((r = fread(buf + len, 1, (1 << 20) - 1 - len, p)) > 0)
        len += r;
    int st = pclose(p);
    *out = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void sha256_of(const char *path, char hex[65])
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "sha256sum %s", path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    assert_int_equal(fscanf(p, "%64s", hex), 1);
    pclose(p);
}

static void test_init_and_inspect(void **state)
{
    char path[512], *out, sha[65];
    fa_error err;

    if (access(fedagg, X_OK) != 0) {
        print_message("SKIPPED: %s not built\n", fedagg);
        skip();
    }
    snprintf(path, sizeof(path), "%s/v0.safetensors", tmpdir);
    assert_int_equal(run(&out, "model init --out %s --arch 20-16-4 --seed 5", path), 0);
    assert_non_null(strstr(out, "MLP 20-16-4, 404 parameters, seed 5"));
    free(out);

    /* the file is the library's He initialisation with that seed */
    fa_mlp_config c;
    fa_mlp_layout l;
    uint32_t h[1] = {16};
    float want[404], got[404];
    fa_mlp_config_make(&c, 20, h, 1, 4, NULL);
    fa_mlp_layout_init(&l, &c, NULL);
    fa_mlp_init_he(&l, want, 5);
    assert_int_equal(fa_mlp_load(path, &l, got, &err), 0);
    assert_memory_equal(want, got, sizeof(want));

    sha256_of(path, sha);
    assert_int_equal(run(&out, "model inspect %s", path), 0);
    assert_non_null(strstr(out, sha));
    assert_non_null(strstr(out, "fc1.weight"));
    assert_non_null(strstr(out, "[16, 20]"));
    assert_non_null(strstr(out, "fedagg.init_seed: 5"));
    assert_non_null(strstr(out, "model: built-in MLP 20-16-4"));
    free(out);

    assert_int_equal(run(&out, "model inspect --json %s", path), 0);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    if (!j)
        fail_msg("not JSON: %s\n%s", je.text, out);
    assert_string_equal(json_string_value(json_object_get(j, "sha256")), sha);
    assert_string_equal(json_string_value(json_object_get(j, "mlp")), "20-16-4");
    json_t *t0 = json_array_get(json_object_get(j, "tensors"), 0);
    assert_string_equal(json_string_value(json_object_get(t0, "name")), "fc1.weight");
    assert_string_equal(json_string_value(json_object_get(t0, "dtype")), "F32");
    assert_int_equal(json_integer_value(json_array_get(json_object_get(t0, "shape"), 0)), 16);
    assert_int_equal(json_integer_value(json_object_get(t0, "bytes")), 16 * 20 * 4);
    /* the tensor digest is SHA-256 of exactly its bytes */
    char tpath[600], tsha[65];
    snprintf(tpath, sizeof(tpath), "%s/fc1.bin", tmpdir);
    FILE *f = fopen(tpath, "wb");
    fwrite(want, 4, 16 * 20, f);
    fclose(f);
    sha256_of(tpath, tsha);
    assert_string_equal(json_string_value(json_object_get(t0, "sha256")), tsha);
    json_decref(j);
    free(out);
}

static void test_inspect_other_files_and_errors(void **state)
{
    char path[512], *out;
    if (access(fedagg, X_OK) != 0)
        skip();

    /* a valid safetensors file that is not the MLP: listed, and said so */
    uint64_t s[2] = {2, 3};
    uint16_t half[6] = {0x3c00, 0x4000, 0x7c00, 0, 0, 0};
    fa_st_view v = {"embed", FA_ST_F16, 2, s, half, NULL, NULL};
    snprintf(path, sizeof(path), "%s/other.safetensors", tmpdir);
    assert_int_equal(fa_st_save(path, 0644, &v, 1, NULL, 0, NULL), 0);
    assert_int_equal(run(&out, "model inspect %s", path), 0);
    assert_non_null(strstr(out, "embed"));
    assert_non_null(strstr(out, "F16"));
    assert_non_null(strstr(out, "(1 non-finite)"));
    assert_non_null(strstr(out, "not the built-in MLP layout"));
    free(out);

    /* a broken one: exit 1 and the validation message naming the tensor */
    const char *hdr = "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,12]}}";
    uint8_t buf[256] = {0};
    size_t n = strlen(hdr);
    buf[0] = (uint8_t)n;
    memcpy(buf + 8, hdr, n);
    snprintf(path, sizeof(path), "%s/bad.safetensors", tmpdir);
    FILE *f = fopen(path, "wb");
    fwrite(buf, 1, 8 + n + 12, f);
    fclose(f);
    assert_int_equal(run(&out, "model inspect %s", path), 1);
    assert_non_null(
        strstr(out, "bad.safetensors: tensor 'w': F32 shape of 4 elements needs 16 bytes"));
    free(out);

    assert_int_equal(run(&out, "model inspect %s/none.safetensors", tmpdir), 1);
    assert_non_null(strstr(out, "No such file"));
    free(out);
    assert_int_equal(run(&out, "model init --arch 784-x-10 --out %s/x", tmpdir), 2);
    assert_non_null(strstr(out, "--arch '784-x-10'"));
    free(out);
    assert_int_equal(run(&out, "model init"), 2);
    free(out);
    assert_int_equal(run(&out, "model --help"), 0);
    assert_non_null(strstr(out, "usage: fedagg model inspect"));
    free(out);
    assert_int_equal(run(&out, "model frobnicate"), 2);
    assert_non_null(strstr(out, "unknown command 'frobnicate'"));
    free(out);
}

/* A file whose names or metadata carry a terminal's escape sequences and
 * newlines: a tensor name so made is refused (exit 1, the name shown
 * escaped), metadata is shown escaped; nothing of either reaches the
 * terminal raw. */
static void write_raw(const char *path, const char *hdr, const uint8_t *data, size_t dlen)
{
    size_t n = strlen(hdr);
    uint8_t len8[8];
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)((uint64_t)n >> (8 * i));
    fwrite(len8, 1, 8, f);
    fwrite(hdr, 1, n, f);
    fwrite(data, 1, dlen, f);
    fclose(f);
}

static void test_inspect_hostile_names(void **state)
{
    char path[512], *out;
    const uint8_t zeros[4] = {0}, bools[2] = {1, 7};
    if (access(fedagg, X_OK) != 0)
        skip();

    snprintf(path, sizeof(path), "%s/esc.safetensors", tmpdir);
    write_raw(path,
              "{\"w\\u001b[2J\\u001b]0;owned\\u0007\\nfake\":{\"dtype\":\"F32\",\"shape\":[1],"
              "\"data_offsets\":[0,4]}}",
              zeros, 4);
    assert_int_equal(run(&out, "model inspect %s", path), 1);
    assert_non_null(strstr(out, "tensor name 'w\\x1b[2J\\x1b]0;owned\\x07\\x0afake'"));
    assert_null(strchr(out, '\x1b'));
    assert_null(strchr(out, '\a'));
    free(out);

    write_raw(path,
              "{\"__metadata__\":{\"k\\u001b[31m\":\"line1\\nlevel=error\\u009b\"},"
              "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
              zeros, 4);
    assert_int_equal(run(&out, "model inspect %s", path), 0);
    assert_non_null(strstr(out, "  k\\x1b[31m: line1\\x0alevel=error\\xc2\\x9b\n"));
    assert_null(strchr(out, '\x1b'));
    assert_null(strstr(out, "\nlevel=error"));
    free(out);

    /* a BOOL of 7: refused (init_file and the workers read with the same reader) */
    write_raw(path, "{\"m\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[0,2]}}", bools, 2);
    assert_int_equal(run(&out, "model inspect %s", path), 1);
    assert_non_null(strstr(out, "tensor 'm' is BOOL but its element 1 is 7"));
    free(out);
}

/* ---------------------------------------------------------------------- */
/* The tensor table: inspect with a config, diff, convert                   */
/* ---------------------------------------------------------------------- */

/* A path in tmpdir; valid for the next 31 calls. */
static const char *tmp(const char *name)
{
    static char buf[32][600];
    static int k;
    k = (k + 1) % 32;
    snprintf(buf[k], sizeof(buf[k]), "%s/%s", tmpdir, name);
    return buf[k];
}

/* An aggregator config: the commented defaults with `edit` replacing the
 * line `line` (e.g. the commented-out include) of model.federated. */
static const char *write_config(const char *name, const char *line, const char *edit,
                                const char *line2, const char *edit2)
{
    char *out, *at;
    const char *path = tmp(name);
    assert_int_equal(run(&out, "config print --type aggregator --defaults"), 0);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (char *p = out; *p; p = at) {
        at = strchr(p, '\n');
        at = at ? at + 1 : p + strlen(p);
        if (line && strncmp(p, line, strlen(line)) == 0 && p[strlen(line)] == '\n')
            fprintf(f, "%s\n", edit);
        else if (line2 && strncmp(p, line2, strlen(line2)) == 0 && p[strlen(line2)] == '\n')
            fprintf(f, "%s\n", edit2);
        else
            fwrite(p, 1, (size_t)(at - p), f);
    }
    fclose(f);
    free(out);
    return path;
}

/* A model of mixed dtypes. */
static float m_w[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, m_rm[4] = {0.5f, 0.25f, 0, 1};
static uint16_t m_lora[8] = {0x3f80, 0x4000, 0x4040, 0x4080, 0xbf80, 0, 0x3f00, 0x3e80};
static uint16_t m_emb[5] = {0x3c00, 0x4000, 0x7c00, 0xbc00, 0};
static int64_t m_steps = 42;
static uint8_t m_mask[3] = {1, 0, 1};
static uint64_t m_s43[2] = {4, 3}, m_s4[1] = {4}, m_s24[2] = {2, 4}, m_s3[1] = {3}, m_s5[1] = {5};

static void write_mixed(const char *path, const char *const *meta, size_t n_meta)
{
    fa_st_view v[] = {
        {"backbone.w", FA_ST_F32, 2, m_s43, m_w, NULL, NULL},
        {"backbone.bn.running_mean", FA_ST_F32, 1, m_s4, m_rm, NULL, NULL},
        {"head.lora_A", FA_ST_BF16, 2, m_s24, m_lora, NULL, NULL},
        {"steps", FA_ST_I64, 0, NULL, &m_steps, NULL, NULL},
        {"mask", FA_ST_BOOL, 1, m_s3, m_mask, NULL, NULL},
        {"emb", FA_ST_F16, 1, m_s5, m_emb, NULL, NULL},
    };
    fa_error err;
    if (fa_st_save(path, 0644, v, 6, meta, n_meta, &err) != 0)
        fail_msg("%s", err.msg);
}

static json_t *run_json(int want_rc, const char *fmt, const char *a, const char *b)
{
    char *out;
    json_error_t je;
    int rc = run(&out, fmt, a, b);
    if (rc != want_rc)
        fail_msg("exit %d, want %d: %s", rc, want_rc, out);
    json_t *j = json_loads(out, 0, &je);
    if (!j)
        fail_msg("not JSON: %s\n%s", je.text, out);
    free(out);
    return j;
}

static void test_inspect_table_and_config(void **state)
{
    char *out;
    if (access(fedagg, X_OK) != 0)
        skip();
    const char *model = tmp("mixed.safetensors");
    write_mixed(model, NULL, 0);

    /* no config, no metadata: the table, totals, federated not known */
    assert_int_equal(run(&out, "model inspect %s", model), 0);
    assert_non_null(strstr(out, "head.lora_A"));
    assert_non_null(strstr(out, "BOOL"));
    assert_non_null(strstr(out, "[4, 3]"));
    assert_non_null(strstr(out, "totals: 6 tensors, 33 parameters, 101 bytes"));
    assert_non_null(strstr(out, "federated: not known (no fedagg.federated metadata; give "
                                "--config AGGREGATOR.textproto)"));
    assert_non_null(strstr(out, "(1 non-finite)")); /* emb's F16 inf */
    free(out);

    /* under a config's selection: FedBN (exclude *bn*) with integers averaged */
    const char *cfg =
        write_config("fedbn.textproto", "    # exclude: []", "    exclude: [\"*bn*\"]",
                     "    integers: INTEGERS_KEEP_GLOBAL", "    integers: INTEGERS_MEAN_DELTA");
    json_t *j = run_json(0, "model inspect --json --config %s %s", cfg, model);
    const char *names[6] = {
        "backbone.w", "backbone.bn.running_mean", "head.lora_A", "steps", "mask", "emb"};
    const int fed[6] = {1, 0, 1, 1, 0, 1};
    json_t *ts = json_object_get(j, "tensors");
    assert_int_equal(json_array_size(ts), 6);
    for (size_t i = 0; i < 6; i++) {
        json_t *t = json_array_get(ts, i);
        assert_string_equal(json_string_value(json_object_get(t, "name")), names[i]);
        if (json_is_true(json_object_get(t, "federated")) != fed[i])
            fail_msg("tensor '%s' federated should be %d", names[i], fed[i]);
    }
    assert_int_equal(json_integer_value(json_object_get(json_array_get(ts, 2), "fed_offset")), 12);
    json_t *tot = json_object_get(j, "totals");
    assert_int_equal(json_integer_value(json_object_get(tot, "tensors")), 6);
    assert_int_equal(json_integer_value(json_object_get(tot, "parameters")), 33);
    assert_int_equal(json_integer_value(json_object_get(tot, "bytes")), 101);
    assert_int_equal(json_integer_value(json_object_get(tot, "federated_tensors")), 4);
    assert_int_equal(json_integer_value(json_object_get(tot, "federated_coordinates")), 26);
    assert_string_equal(json_string_value(json_object_get(j, "federated_from")), cfg);
    json_decref(j);
    assert_int_equal(run(&out, "model inspect %s --config %s", model, cfg), 0);
    assert_non_null(strstr(out, "federated: 4 tensors, 26 coordinates (model.federated of the "
                                "config "));
    assert_non_null(strstr(out, "backbone.bn.running_mean F32   [4]"));
    free(out);

    /* the default selection: floating tensors only */
    cfg = write_config("plain.textproto", NULL, NULL, NULL, NULL);
    assert_int_equal(run(&out, "model inspect %s --config %s", model, cfg), 0);
    assert_non_null(strstr(out, "federated: 4 tensors, 29 coordinates"));
    free(out);

    /* a typo in the config: exit 1, the config and the file named, the
     * nearest names suggested */
    cfg = write_config("typo.textproto", "    # include: []", "    include: [\"haed.*\"]", NULL,
                       NULL);
    assert_int_equal(run(&out, "model inspect %s --config %s", model, cfg), 1);
    assert_non_null(strstr(out, "typo.textproto: model.federated on "));
    assert_non_null(strstr(out, "mixed.safetensors: include pattern 'haed.*' matches no tensor "
                                "of the model (nearest: 'head.lora_A'"));
    free(out);
    /* a config that does not load */
    FILE *f = fopen(tmp("broken.textproto"), "w");
    fputs("model { federated { include: [\"x\" } }\n", f);
    fclose(f);
    assert_int_equal(run(&out, "model inspect %s --config %s", model, tmp("broken.textproto")), 1);
    assert_non_null(strstr(out, "broken.textproto"));
    free(out);
}

static void test_inspect_federated_metadata(void **state)
{
    char *out, *json;
    fa_safetensors *st;
    fa_tensors *t;
    fa_error err;
    if (access(fedagg, X_OK) != 0)
        skip();

    /* a published model: fedagg.federated names the tensors and ranges */
    const char *base = tmp("pub_base.safetensors"), *pub = tmp("pub.safetensors");
    write_mixed(base, NULL, 0);
    assert_int_equal(fa_st_open(&st, base, &err), 0);
    assert_int_equal(fa_tensors_from_st(&t, st, &err), 0);
    const char *exc[] = {"*bn*", "emb"};
    assert_int_equal(fa_tensors_select(t, &(fa_tensor_select){NULL, 0, exc, 2, 0}, &err), 0);
    assert_int_equal(fa_tensors_set_range(t, 0, 0.5f, &err), 0);
    assert_int_equal(fa_tensors_set_range(t, 2, 0.0625f, &err), 0);
    float fed[20];
    for (int i = 0; i < 20; i++)
        fed[i] = (float)i;
    const char *meta[] = {"fedagg.version", "3"};
    assert_int_equal(fa_tensors_save(pub, 0644, t, fed, 20, st, 0, meta, 1, &err), 0);
    assert_int_equal(fa_tensors_meta_encode(t, &json, &err), 0);
    fa_tensors_del(t);
    fa_st_del(st);

    assert_int_equal(run(&out, "model inspect %s", pub), 0);
    assert_non_null(strstr(out, "yes r=0.5"));
    assert_non_null(strstr(out, "yes r=0.0625"));
    assert_non_null(strstr(out, "federated: 2 tensors, 20 coordinates (the file's "
                                "fedagg.federated)"));
    assert_non_null(strstr(out, "fedagg.version: 3"));
    free(out);
    json_t *j = run_json(0, "model inspect --json %s%s", pub, "");
    json_t *fm = json_object_get(j, "fedagg");
    assert_string_equal(json_string_value(json_object_get(fm, "fedagg.version")), "3");
    assert_string_equal(json_string_value(json_object_get(fm, FA_TENSORS_META_KEY)), json);
    json_t *t0 = json_array_get(json_object_get(j, "tensors"), 0);
    assert_true(json_is_true(json_object_get(t0, "federated")));
    assert_true(json_real_value(json_object_get(t0, "range")) == 0.5);
    assert_true(json_is_false(
        json_object_get(json_array_get(json_object_get(j, "tensors"), 5), "federated")));
    json_decref(j);
    free(json);

    /* malformed fedagg.federated: refused, naming the file and the tensor */
    const char *bad = tmp("badmeta.safetensors");
    const char *bm[] = {FA_TENSORS_META_KEY, "{\"mask\": 1}"};
    write_mixed(bad, bm, 1);
    assert_int_equal(run(&out, "model inspect %s", bad), 1);
    assert_non_null(strstr(out, "badmeta.safetensors: fedagg.federated: tensor 'mask' is BOOL"));
    free(out);

    /* a long metadata value is cut in the listing, whole in --json */
    static char longv[4000];
    memset(longv, 'v', sizeof(longv) - 1);
    const char *lm[] = {"notes", longv};
    const char *longp = tmp("longmeta.safetensors");
    write_mixed(longp, lm, 1);
    assert_int_equal(run(&out, "model inspect %s", longp), 0);
    assert_non_null(strstr(out, "... (3999 bytes; --json prints it whole)"));
    free(out);
}

static void write_f32(const char *path, const char *name, const float *v, uint64_t n,
                      const char *name2, fa_st_dtype dt2, const void *v2, uint64_t n2)
{
    uint64_t s1[1] = {n}, s2[1] = {n2};
    fa_st_view views[2] = {{name, FA_ST_F32, 1, s1, v, NULL, NULL},
                           {name2, dt2, 1, s2, v2, NULL, NULL}};
    fa_error err;
    if (fa_st_save(path, 0644, views, name2 ? 2 : 1, NULL, 0, &err) != 0)
        fail_msg("%s", err.msg);
}

static void test_diff(void **state)
{
    char *out;
    if (access(fedagg, X_OK) != 0)
        skip();
    float a[4] = {0, 1, 2, 3}, b[4] = {0, 1.5f, 2, 1}, c[4] = {NAN, 1, 2, 3};
    int32_t ints[2] = {7, 9};
    const char *pa = tmp("da.safetensors"), *pb = tmp("db.safetensors");
    write_f32(pa, "w", a, 4, "n", FA_ST_I32, ints, 2);
    write_f32(pb, "w", b, 4, "n", FA_ST_I32, ints, 2);

    /* same table, values differ: exit 0, max 2 and mean (0.5 + 2) / 4 */
    assert_int_equal(run(&out, "model diff %s %s", pa, pa), 0);
    assert_non_null(strstr(out, "same table: 2 tensors; the values compared are equal"));
    free(out);
    assert_int_equal(run(&out, "model diff %s %s", pa, pb), 0);
    assert_non_null(strstr(out, "same table: 2 tensors; values differ in 1 tensors (largest "
                                "|a-b| 2, in 'w')"));
    free(out);
    json_t *j = run_json(0, "model diff --json %s %s", pa, pb);
    assert_true(json_is_true(json_object_get(j, "same_table")));
    json_t *w = json_array_get(json_object_get(j, "tensors"), 0);
    assert_string_equal(json_string_value(json_object_get(w, "name")), "w");
    assert_true(json_real_value(json_object_get(w, "max_abs_diff")) == 2.0);
    assert_true(json_real_value(json_object_get(w, "mean_abs_diff")) == 0.625);
    json_decref(j);

    /* NaN against NaN is equal; NaN against a number is counted apart */
    const char *pc = tmp("dc.safetensors");
    write_f32(pc, "w", c, 4, "n", FA_ST_I32, ints, 2);
    assert_int_equal(run(&out, "model diff %s %s", pc, pc), 0);
    assert_non_null(strstr(out, "the values compared are equal"));
    free(out);
    assert_int_equal(run(&out, "model diff %s %s", pa, pc), 0);
    assert_non_null(strstr(out, "(1 pairs with NaN/inf differ)"));
    free(out);

    /* tables that differ: exit 1 and why */
    const char *pd = tmp("dd.safetensors"), *pe = tmp("de.safetensors");
    uint16_t h[4] = {0, 0x3c00, 0x4000, 0x4200};
    write_f32(pd, "w2", a, 4, "w", FA_ST_F16, h, 4); /* w retyped, w2 new, n gone */
    assert_int_equal(run(&out, "model diff %s %s", pa, pd), 1);
    assert_non_null(strstr(out, "dtype differs: 'w' is F32 in A, F16 in B"));
    assert_non_null(strstr(out, "only in A: 'n' (I32 [2])"));
    assert_non_null(strstr(out, "only in B: 'w2' (F32 [4])"));
    assert_non_null(strstr(out, "tables differ: 1 tensors only in A, 1 only in B, 1 with another "
                                "shape or dtype; the values compared are equal"));
    free(out);
    write_f32(pe, "w", a, 3, "n", FA_ST_I32, ints, 2);
    assert_int_equal(run(&out, "model diff %s %s", pa, pe), 1);
    assert_non_null(strstr(out, "shape differs: 'w' is [4] in A, [3] in B"));
    free(out);
    j = run_json(1, "model diff --json %s %s", pa, pd);
    assert_true(json_is_false(json_object_get(j, "same_table")));
    assert_string_equal(json_string_value(json_array_get(json_object_get(j, "only_in_a"), 0)), "n");
    assert_string_equal(json_string_value(json_array_get(json_object_get(j, "only_in_b"), 0)),
                        "w2");
    json_t *d0 = json_array_get(json_object_get(j, "different"), 0);
    assert_string_equal(json_string_value(json_object_get(json_object_get(d0, "b"), "dtype")),
                        "F16");
    json_decref(j);

    /* errors: exit 2, the file named */
    assert_int_equal(run(&out, "model diff %s %s/none.safetensors", pa, tmpdir), 2);
    assert_non_null(strstr(out, "none.safetensors: No such file"));
    free(out);
    assert_int_equal(run(&out, "model diff %s", pa), 2);
    assert_non_null(strstr(out, "give two files"));
    free(out);
}

static void test_convert(void **state)
{
    char *out;
    fa_safetensors *st;
    fa_error err;
    if (access(fedagg, X_OK) != 0)
        skip();
    enum { NB = 300001 }; /* over a 1 MiB fill chunk */
    float *big = malloc(NB * 4);
    for (size_t i = 0; i < NB; i++)
        big[i] = (float)i * 0.001f - 7.3f;
    double d64[3] = {0.1, -2.5, 1e300};
    uint16_t h16[2] = {0x3c01, 0x7bff}, b16[2] = {0x3f81, 0xc2f7};
    int64_t steps = -12;
    uint8_t mask[2] = {0, 1};
    uint64_t sb[1] = {NB}, s3[1] = {3}, s2[1] = {2};
    fa_st_view v[] = {
        {"big", FA_ST_F32, 1, sb, big, NULL, NULL},
        {"d", FA_ST_F64, 1, s3, d64, NULL, NULL},
        {"h", FA_ST_F16, 1, s2, h16, NULL, NULL},
        {"b", FA_ST_BF16, 1, s2, b16, NULL, NULL},
        {"steps", FA_ST_I64, 0, NULL, &steps, NULL, NULL},
        {"mask", FA_ST_BOOL, 1, s2, mask, NULL, NULL},
    };
    const char *meta[] = {"format", "pt", FA_TENSORS_META_KEY, "{\"big\":0.5}"};
    const char *in = tmp("conv_in.safetensors");
    assert_int_equal(fa_st_save(in, 0644, v, 6, meta, 2, &err), 0);

    /* to bf16: the F32 tensor only, rounded to nearest even */
    const char *o1 = tmp("conv_bf16.safetensors");
    assert_int_equal(run(&out, "model convert %s %s --dtype bf16", in, o1), 0);
    assert_non_null(strstr(out, "6 tensors, 1 converted to BF16"));
    free(out);
    uint16_t *want = malloc(NB * 2), *got = malloc(NB * 4);
    assert_int_equal(fa_st_open(&st, o1, &err), 0);
    for (size_t i = 0; i < NB; i++)
        want[i] = fa_st_f32_to_bf16(big[i]);
    const fa_st_tensor *x = fa_st_find(st, "big");
    assert_int_equal(x->dtype, FA_ST_BF16);
    assert_int_equal(fa_st_read(st, x, got, NB * 2, &err), 0);
    assert_memory_equal(got, want, NB * 2);
    const char *kept[] = {"d", "h", "b", "steps", "mask"};
    const void *kept_data[] = {d64, h16, b16, &steps, mask};
    for (size_t k = 0; k < 5; k++) {
        x = fa_st_find(st, kept[k]);
        assert_int_equal(x->dtype, v[k + 1].dtype);
        assert_int_equal(fa_st_read(st, x, got, NB * 4, &err), 0);
        assert_memory_equal(got, kept_data[k], x->end - x->begin);
    }
    for (size_t i = 0; i < 6; i++) /* order kept */
        assert_string_equal(fa_st_at(st, i)->name, v[i].name);
    assert_string_equal(fa_st_metadata_get(st, "format"), "pt");
    assert_string_equal(fa_st_metadata_get(st, FA_TENSORS_META_KEY), "{\"big\":0.5}");
    fa_st_del(st);

    /* --all: every floating tensor, F64 and F16 too (through float32) */
    assert_int_equal(run(&out, "model convert %s %s --dtype bf16 --all", in, o1), 0);
    assert_non_null(strstr(out, "6 tensors, 3 converted to BF16"));
    free(out);
    assert_int_equal(fa_st_open(&st, o1, &err), 0);
    x = fa_st_find(st, "d");
    assert_int_equal(x->dtype, FA_ST_BF16);
    assert_int_equal(fa_st_read(st, x, got, 6, &err), 0);
    assert_true(got[0] == fa_st_f32_to_bf16(0.1f) && got[1] == 0xc020 && got[2] == 0x7f80);
    x = fa_st_find(st, "h");
    assert_int_equal(fa_st_read(st, x, got, 4, &err), 0);
    assert_true(got[0] == fa_st_f32_to_bf16(fa_st_f16_to_f32(0x3c01)) && got[1] == 0x4780);
    fa_st_del(st);

    /* to f32: halves widened exactly, F64 kept unless --all */
    const char *o2 = tmp("conv_f32.safetensors");
    assert_int_equal(run(&out, "model convert %s %s --dtype F32", o1, o2), 0);
    assert_non_null(strstr(out, "6 tensors, 4 converted to F32"));
    free(out);
    assert_int_equal(fa_st_open(&st, o2, &err), 0);
    x = fa_st_find(st, "big");
    assert_int_equal(x->dtype, FA_ST_F32);
    float *f = malloc(NB * 4);
    assert_int_equal(fa_st_read(st, x, f, NB * 4, &err), 0);
    for (size_t i = 0; i < NB; i++)
        if (f[i] != fa_st_bf16_to_f32(want[i]))
            fail_msg("big[%zu]: %g", i, f[i]);
    assert_int_equal(fa_st_find(st, "steps")->dtype, FA_ST_I64);
    fa_st_del(st);
    assert_int_equal(run(&out, "model convert %s %s --dtype f32", in, o2), 0);
    assert_non_null(strstr(out, "6 tensors, 2 converted to F32"));
    free(out);
    assert_int_equal(fa_st_open(&st, o2, &err), 0);
    assert_int_equal(fa_st_find(st, "d")->dtype, FA_ST_F64);
    assert_int_equal(fa_st_read(st, fa_st_find(st, "h"), f, 8, &err), 0);
    assert_true(f[0] == fa_st_f16_to_f32(0x3c01) && f[1] == 65504.0f);
    fa_st_del(st);
    assert_int_equal(run(&out, "model convert %s %s --dtype f32 --all", in, o2), 0);
    assert_non_null(strstr(out, "6 tensors, 3 converted to F32"));
    free(out);
    assert_int_equal(fa_st_open(&st, o2, &err), 0);
    assert_int_equal(fa_st_read(st, fa_st_find(st, "d"), f, 12, &err), 0);
    assert_true(f[0] == 0.1f && f[1] == -2.5f && f[2] == INFINITY);
    fa_st_del(st);

    /* to f16, in place (IN = OUT: the output replaces the file atomically) */
    const char *o3 = tmp("conv_inplace.safetensors");
    assert_int_equal(fa_st_save(o3, 0644, v, 6, meta, 2, &err), 0);
    assert_int_equal(run(&out, "model convert %s %s --dtype f16", o3, o3), 0);
    free(out);
    assert_int_equal(fa_st_open(&st, o3, &err), 0);
    x = fa_st_find(st, "big");
    assert_int_equal(x->dtype, FA_ST_F16);
    assert_int_equal(fa_st_read(st, x, got, NB * 2, &err), 0);
    for (size_t i = 0; i < NB; i++)
        if (got[i] != fa_st_f32_to_f16(big[i]))
            fail_msg("big[%zu] as F16: 0x%04x", i, got[i]);
    fa_st_del(st);

    /* errors: the file named; usage errors exit 2 */
    assert_int_equal(run(&out, "model convert %s %s --dtype int8", in, o3), 2);
    assert_non_null(strstr(out, "--dtype 'int8': give bf16, f16 or f32"));
    free(out);
    assert_int_equal(run(&out, "model convert %s %s", in, o3), 2);
    free(out);
    assert_int_equal(run(&out, "model convert %s/none.safetensors %s --dtype f16", tmpdir, o3), 1);
    assert_non_null(strstr(out, "none.safetensors: No such file"));
    free(out);
    assert_int_equal(run(&out, "model convert %s %s/no/dir/x.safetensors --dtype f16", in, tmpdir),
                     1);
    assert_non_null(strstr(out, "no/dir/x.safetensors"));
    free(out);
    free(f);
    free(want);
    free(got);
    free(big);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_and_inspect),
        cmocka_unit_test(test_inspect_other_files_and_errors),
        cmocka_unit_test(test_inspect_hostile_names),
        cmocka_unit_test(test_inspect_table_and_config),
        cmocka_unit_test(test_inspect_federated_metadata),
        cmocka_unit_test(test_diff),
        cmocka_unit_test(test_convert),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
