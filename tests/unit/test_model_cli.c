/* `fedagg model init` and `fedagg model inspect`, run as a user runs them
 * (the binary from $FA_BIN): exit codes, what they print, and that the
 * digests they print are the files' SHA-256. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/fa_safetensors.h"
#include "model/mlp.h"

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
    fa_st_view v = {"embed", FA_ST_F16, 2, s, half};
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
    assert_non_null(strstr(out, "bad.safetensors: tensor 'w': F32 shape of 4 elements needs 16 bytes"));
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_and_inspect),
        cmocka_unit_test(test_inspect_other_files_and_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
