/* Unit tests of model/data_idx.c and worker/data_split.c: IDX round trips (gzip
 * and plain), every reader error with the file named, Fashion-MNIST as
 * Debian installs it, the Gamma sampler, and the Dirichlet split:
 * determinism, a partition of the data, skew that follows alpha, the files
 * and the manifest. */
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
#include <unistd.h>

#include "common/fa_file.h"
#include "model/rng.h"
#include "worker/data.h"

static char tmpdir[256];

static int setup(void **state)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/fa_test_data.XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void path_of(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", tmpdir, name);
}

static void write_raw(const char *name, const void *data, size_t len)
{
    char p[512];
    path_of(p, sizeof(p), name);
    assert_int_equal(fa_file_write_atomic(p, data, len, 0644, NULL), 0);
}

/* n synthetic 4x3 images with labels i % classes. */
static void make_set(const char *img, const char *lab, uint32_t n, uint32_t classes, int gzip)
{
    fa_idx a = {3, {n, 4, 3}, malloc(n * 12), n * 12};
    fa_idx b = {1, {n}, malloc(n), n};
    char p[512];
    for (uint32_t i = 0; i < n * 12; i++)
        a.data[i] = (uint8_t)(i * 7);
    for (uint32_t i = 0; i < n; i++)
        b.data[i] = (uint8_t)(i % classes);
    path_of(p, sizeof(p), img);
    assert_int_equal(fa_idx_write(p, &a, gzip, NULL), 0);
    path_of(p, sizeof(p), lab);
    assert_int_equal(fa_idx_write(p, &b, gzip, NULL), 0);
    fa_idx_free(&a);
    fa_idx_free(&b);
}

static void test_idx_round_trip(void **state)
{
    char p[512];
    fa_idx a = {3, {5, 2, 3}, malloc(30), 30}, back;
    fa_error err;
    for (int i = 0; i < 30; i++)
        a.data[i] = (uint8_t)(255 - i);
    for (int gz = 0; gz < 2; gz++) {
        path_of(p, sizeof(p), gz ? "a.idx.gz" : "a.idx");
        assert_int_equal(fa_idx_write(p, &a, gz, &err), 0);
        assert_int_equal(fa_idx_read(&back, p, &err), 0);
        assert_int_equal(back.ndim, 3);
        assert_int_equal(back.dims[0], 5);
        assert_int_equal(back.dims[2], 3);
        assert_int_equal(back.size, 30);
        assert_memory_equal(back.data, a.data, 30);
        fa_idx_free(&back);
    }
    /* plain files are byte-exact IDX */
    uint8_t *raw;
    size_t len;
    path_of(p, sizeof(p), "a.idx");
    assert_int_equal(fa_file_read_all(p, &raw, &len, 1000, &err), 0);
    assert_int_equal(len, 4 + 12 + 30);
    uint8_t want_hdr[16] = {0, 0, 8, 3, 0, 0, 0, 5, 0, 0, 0, 2, 0, 0, 0, 3};
    assert_memory_equal(raw, want_hdr, 16);
    free(raw);
    fa_idx bad = {2, {5, 5}, a.data, 30};
    assert_int_equal(fa_idx_write(p, &bad, 0, &err), FA_ERR_INVAL);
    fa_idx_free(&a);
    fa_idx_free(NULL);
}

static void expect_read(const char *name, int code, const char *want)
{
    char p[512];
    fa_idx a;
    fa_error err;
    path_of(p, sizeof(p), name);
    int rc = fa_idx_read(&a, p, &err);
    if (rc != code || !strstr(err.msg, want) || !strstr(err.msg, name))
        fail_msg("%s: got %d '%s', want %d '%s'", name, rc, err.msg, code, want);
    assert_null(a.data);
}

static void test_idx_errors(void **state)
{
    uint8_t wrong_magic[12] = {0x1f, 0x00, 8, 1, 0, 0, 0, 4, 1, 2, 3, 4};
    uint8_t float_type[12] = {0, 0, 0x0d, 1, 0, 0, 0, 1, 0, 0, 0, 0};
    uint8_t short_data[10] = {0, 0, 8, 1, 0, 0, 0, 4, 1, 2};
    uint8_t short_hdr[6] = {0, 0, 8, 2, 0, 0};
    uint8_t trailing[13] = {0, 0, 8, 1, 0, 0, 0, 4, 1, 2, 3, 4, 5};
    uint8_t zero_dim[8] = {0, 0, 8, 1, 0, 0, 0, 0};
    uint8_t huge[20] = {0, 0, 8, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 2};
    write_raw("magic.idx", wrong_magic, sizeof(wrong_magic));
    write_raw("float.idx", float_type, sizeof(float_type));
    write_raw("short.idx", short_data, sizeof(short_data));
    write_raw("shorthdr.idx", short_hdr, sizeof(short_hdr));
    write_raw("trailing.idx", trailing, sizeof(trailing));
    write_raw("zero.idx", zero_dim, sizeof(zero_dim));
    write_raw("huge.idx", huge, sizeof(huge));
    write_raw("empty.idx", "", 0);
    expect_read("magic.idx", FA_ERR_PARSE, "wrong magic 1f 00 08 01");
    expect_read("float.idx", FA_ERR_PARSE, "element type 0x0d is not supported");
    expect_read("short.idx", FA_ERR_CORRUPT, "truncated: the header promises 4 data bytes, the "
                                             "file holds 2");
    expect_read("shorthdr.idx", FA_ERR_CORRUPT, "truncated in the IDX header");
    expect_read("trailing.idx", FA_ERR_CORRUPT, "trailing bytes");
    expect_read("zero.idx", FA_ERR_PARSE, "dimension 0 is 0");
    expect_read("huge.idx", FA_ERR_TOOBIG, "dimensions exceed");
    expect_read("empty.idx", FA_ERR_CORRUPT, "truncated");
    expect_read("missing.idx.gz", FA_ERR_NOTFOUND, "No such file");

    /* A gzip file cut in the middle, and one with a corrupted stream. */
    char p[512];
    uint8_t *raw;
    size_t len;
    make_set("g-images.gz", "g-labels.gz", 500, 10, 1);
    path_of(p, sizeof(p), "g-images.gz");
    assert_int_equal(fa_file_read_all(p, &raw, &len, 1 << 20, NULL), 0);
    assert_true(raw[0] == 0x1f && raw[1] == 0x8b);
    write_raw("cut.gz", raw, len / 2);
    expect_read("cut.gz", FA_ERR_PARSE, "bad gzip stream");
    for (size_t i = 20; i < len - 8; i += 7)
        raw[i] ^= 0x5a;
    write_raw("garbled.gz", raw, len);
    expect_read("garbled.gz", FA_ERR_PARSE, "bad gzip stream");
    free(raw);
}

static void test_data_load(void **state)
{
    char img[512], lab[512], lab2[512];
    fa_data d;
    fa_error err;

    make_set("s-images", "s-labels", 30, 3, 0);
    make_set("t-images.gz", "t-labels.gz", 31, 3, 1);
    path_of(img, sizeof(img), "s-images");
    path_of(lab, sizeof(lab), "s-labels");
    assert_int_equal(fa_data_load(&d, img, lab, &err), 0);
    assert_int_equal(d.ds.n, 30);
    assert_int_equal(d.ds.dim, 12);
    assert_int_equal(d.rows, 4);
    assert_int_equal(d.cols, 3);
    assert_int_equal(d.classes, 3);
    assert_ptr_equal(d.ds.x, d.x);
    assert_true(d.x[1] == 7.0f / 255.0f);
    assert_int_equal(d.y[4], 1);
    fa_data_free(&d);
    fa_data_free(NULL);

    /* 30 images, 31 labels */
    path_of(lab2, sizeof(lab2), "t-labels.gz");
    assert_int_equal(fa_data_load(&d, img, lab2, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "s-images: 30 images but"));
    assert_non_null(strstr(err.msg, "t-labels.gz: 31 labels"));
    assert_null(d.x);
    /* labels given as images and the other way round */
    assert_int_equal(fa_data_load(&d, lab, img, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "s-labels: an image file has 3 dimensions"));
}

static void test_fashion_mnist(void **state)
{
    fa_data d;
    fa_error err;
    int rc = fa_data_load_fashion_mnist(&d, 1, &err);
    if (rc == FA_ERR_NOTFOUND) {
        print_message("SKIPPED: %s\n", err.msg);
        skip();
    }
    assert_int_equal(rc, 0);
    assert_int_equal(d.ds.n, 10000);
    assert_int_equal(d.ds.dim, 784);
    assert_int_equal(d.classes, 10);
    uint32_t hist[10] = {0};
    float mx = 0, mn = 1;
    for (uint32_t i = 0; i < d.ds.n; i++)
        hist[d.y[i]]++;
    for (size_t i = 0; i < (size_t)d.ds.n * 784; i++) {
        mx = d.x[i] > mx ? d.x[i] : mx;
        mn = d.x[i] < mn ? d.x[i] : mn;
    }
    for (int c = 0; c < 10; c++)
        assert_int_equal(hist[c], 1000); /* the test set is balanced */
    assert_true(mn == 0.0f && mx == 1.0f);
    assert_int_equal(d.y[0], 9); /* the first test image is an ankle boot */
    fa_data_free(&d);
}

static void test_gamma_sampler(void **state)
{
    const double shapes[4] = {0.1, 0.5, 1.0, 4.0};
    for (int s = 0; s < 4; s++) {
        fa_rng r;
        double sum = 0, sum2 = 0, a = shapes[s];
        const int n = 200000;
        fa_rng_seed(&r, 77, (uint64_t)s);
        for (int i = 0; i < n; i++) {
            double g = fa_rng_gamma(&r, a);
            assert_true(g >= 0.0);
            sum += g;
            sum2 += g * g;
        }
        double mean = sum / n, var = sum2 / n - mean * mean;
        /* Gamma(a, 1): mean a, variance a; standard error of the mean sqrt(a / n) */
        assert_true(fabs(mean - a) < 5 * sqrt(a / n));
        assert_true(fabs(var / a - 1.0) < 0.05);
    }
}

/* Fraction of a region's examples in its largest class, averaged over regions. */
static double mean_top_share(const uint32_t *region_of, const uint8_t *y, uint32_t n, uint32_t N)
{
    double total = 0;
    for (uint32_t r = 0; r < N; r++) {
        uint32_t h[10] = {0}, k = 0, top = 0;
        for (uint32_t i = 0; i < n; i++)
            if (region_of[i] == r) {
                h[y[i]]++;
                k++;
            }
        for (int c = 0; c < 10; c++)
            top = h[c] > top ? h[c] : top;
        total += k ? (double)top / k : 0;
    }
    return total / N;
}

static void test_dirichlet_split(void **state)
{
    const uint32_t n = 6000, N = 5;
    uint8_t *y = malloc(n);
    uint32_t *a = malloc(n * 4), *b = malloc(n * 4);
    fa_split_opts o;
    fa_error err;

    for (uint32_t i = 0; i < n; i++)
        y[i] = (uint8_t)(i % 10);
    fa_split_opts_default(&o);
    o.regions = N;
    o.alpha = 0.5;
    o.seed = 42;
    assert_int_equal(fa_split_dirichlet(y, n, 10, &o, a, &err), 0);
    assert_int_equal(fa_split_dirichlet(y, n, 10, &o, b, &err), 0);
    assert_memory_equal(a, b, n * 4); /* deterministic */
    /* a partition: every example in exactly one region, each region >= minimum */
    uint32_t count[5] = {0};
    for (uint32_t i = 0; i < n; i++) {
        assert_true(a[i] < N);
        count[a[i]]++;
    }
    for (uint32_t r = 0; r < N; r++)
        assert_true(count[r] >= o.min_per_region);
    o.seed = 43;
    assert_int_equal(fa_split_dirichlet(y, n, 10, &o, b, &err), 0);
    assert_memory_not_equal(a, b, n * 4);

    /* skew follows alpha: near IID for large alpha, near one class for small */
    o.alpha = 1000.0;
    assert_int_equal(fa_split_dirichlet(y, n, 10, &o, a, &err), 0);
    double iid = mean_top_share(a, y, n, N);
    o.alpha = 0.05;
    o.min_per_region = 1;
    assert_int_equal(fa_split_dirichlet(y, n, 10, &o, b, &err), 0);
    double skewed = mean_top_share(b, y, n, N);
    print_message("mean share of a region's top class: alpha 1000 %.3f, alpha 0.05 %.3f\n", iid,
                  skewed);
    assert_true(iid < 0.13);   /* 0.1 is perfectly balanced */
    assert_true(skewed > 0.4);

    /* errors */
    o.alpha = 0.0;
    assert_int_equal(fa_split_dirichlet(y, n, 10, &o, a, &err), FA_ERR_INVAL);
    o.alpha = 0.5;
    o.regions = 0;
    assert_int_equal(fa_split_dirichlet(y, n, 10, &o, a, &err), FA_ERR_INVAL);
    o.regions = 5;
    assert_int_equal(fa_split_dirichlet(y, n, 9, &o, a, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "label 9 of example 9"));
    o.min_per_region = 2000;
    assert_int_equal(fa_split_dirichlet(y, n, 10, &o, a, &err), FA_ERR_RANGE);
    /* Feasible in principle (4 x 1400 <= 6000), but alpha 0.01 hands each class of 600 to
     * one region almost whole, and 10 classes cannot give 4 regions 3 classes each. */
    o.regions = 4;
    o.min_per_region = 1400;
    o.alpha = 0.01;
    assert_int_equal(fa_split_dirichlet(y, n, 10, &o, a, &err), FA_ERR_RANGE);
    assert_non_null(strstr(err.msg, "alpha 0.01 is too small"));
    free(y);
    free(a);
    free(b);
}

static void test_split_files_and_manifest(void **state)
{
    char img[512], lab[512], out1[512], out2[512], p[1024];
    fa_split_opts o;
    fa_error err;
    const char *names[3] = {"eu-west", "us-east", "ap-south"};

    make_set("src-images.gz", "src-labels.gz", 900, 10, 1);
    path_of(img, sizeof(img), "src-images.gz");
    path_of(lab, sizeof(lab), "src-labels.gz");
    path_of(out1, sizeof(out1), "split1");
    path_of(out2, sizeof(out2), "split2");
    fa_split_opts_default(&o);
    o.regions = 3;
    o.alpha = 0.3;
    o.seed = 9;
    assert_int_equal(fa_split_files(img, lab, out1, &o, names, &err), 0);
    assert_int_equal(fa_split_files(img, lab, out2, &o, names, &err), 0);
    /* same seed, same bytes */
    snprintf(p, sizeof(p), "diff -r %s %s > /dev/null", out1, out2);
    assert_int_equal(system(p), 0);

    snprintf(p, sizeof(p), "%s/manifest.json", out1);
    json_error_t je;
    json_t *m = json_load_file(p, 0, &je);
    assert_non_null(m);
    assert_string_equal(json_string_value(json_object_get(m, "format")), "fedagg-split-v1");
    assert_int_equal(json_integer_value(json_object_get(m, "regions")), 3);
    assert_int_equal(json_integer_value(json_object_get(m, "seed")), 9);
    assert_int_equal(json_integer_value(json_object_get(m, "classes")), 10);
    json_t *shards = json_object_get(m, "shards");
    assert_int_equal(json_array_size(shards), 3);
    uint32_t total = 0, hist_total[10] = {0};
    for (size_t r = 0; r < 3; r++) {
        json_t *s = json_array_get(shards, r);
        assert_string_equal(json_string_value(json_object_get(s, "region")), names[r]);
        uint32_t k = (uint32_t)json_integer_value(json_object_get(s, "count")), hsum = 0;
        json_t *h = json_object_get(s, "histogram");
        assert_int_equal(json_array_size(h), 10);
        for (size_t c = 0; c < 10; c++) {
            uint32_t v = (uint32_t)json_integer_value(json_array_get(h, c));
            hsum += v;
            hist_total[c] += v;
        }
        assert_int_equal(hsum, k);
        total += k;

        /* the shard files are what the manifest says; images stay with their labels */
        char si[1024], sl[1024];
        fa_data d;
        snprintf(si, sizeof(si), "%s/%s", out1,
                 json_string_value(json_object_get(s, "images")));
        snprintf(sl, sizeof(sl), "%s/%s", out1,
                 json_string_value(json_object_get(s, "labels")));
        assert_int_equal(fa_data_load(&d, si, sl, &err), 0);
        assert_int_equal(d.ds.n, k);
        for (uint32_t i = 0; i < k; i++) {
            /* make_set: image i starts with byte 12 i * 7, label i % 10 */
            uint8_t first = (uint8_t)lrintf(d.x[i * 12] * 255.0f);
            int found = 0;
            for (uint32_t src = d.y[i]; src < 900 && !found; src += 10)
                found = (uint8_t)(src * 12 * 7) == first;
            assert_true(found);
        }
        fa_data_free(&d);
    }
    assert_int_equal(total, 900);
    for (int c = 0; c < 10; c++)
        assert_int_equal(hist_total[c], 90);
    json_decref(m);

    /* another seed gives other shards; default names are region-<i> */
    o.seed = 10;
    assert_int_equal(fa_split_files(img, lab, out2, &o, NULL, &err), 0);
    snprintf(p, sizeof(p), "%s/region-2/train-labels-idx1-ubyte.gz", out2);
    assert_int_equal(access(p, R_OK), 0);

    const char *bad[3] = {"eu-west", "../x", "z"};
    assert_int_equal(fa_split_files(img, lab, out2, &o, bad, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "'../x'"));
    const char *dup[3] = {"a", "b", "a"};
    assert_int_equal(fa_split_files(img, lab, out2, &o, dup, &err), FA_ERR_INVAL);
    assert_int_equal(fa_split_files(lab, img, out2, &o, NULL, &err), FA_ERR_INVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idx_round_trip),   cmocka_unit_test(test_idx_errors),
        cmocka_unit_test(test_data_load),        cmocka_unit_test(test_fashion_mnist),
        cmocka_unit_test(test_gamma_sampler),    cmocka_unit_test(test_dirichlet_split),
        cmocka_unit_test(test_split_files_and_manifest),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
