/* Allocation failures under the safetensors reader (common/fa_safetensors.h),
 * which parses models downloaded from the aggregator and written by
 * external trainers: every allocation failing in turn (support/fail_alloc.h)
 * must give FA_ERR_NOMEM with a message (or, where jansson cannot tell a
 * failed allocation from bad JSON, FA_ERR_PARSE), free everything, and
 * never crash.
 * The inputs are the seeds of fuzz_common_safetensors. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fa_file.h"
#include "common/fa_safetensors.h"
#include "tests/unit/support/fail_alloc.h"

struct input {
    uint8_t *data;
    size_t len;
    fa_failalloc_ref ref;
};

static void load(struct input *in, const char *seed)
{
    char path[4096];
    fa_error err;
    const char *src = getenv("FA_SRC");
    memset(in, 0, sizeof(*in));
    snprintf(path, sizeof(path), "%s/tests/fuzz/corpus/common_safetensors/%s", src ? src : "..",
             seed);
    if (fa_file_read_all(path, &in->data, &in->len, 1 << 24, &err) != 0)
        fail_msg("%s", err.msg);
}

/* Parses the file, reads every tensor back and the header as the writer
 * makes it again: what a region does with a model. */
static int parse_and_read(void *arg, fa_error *err)
{
    struct input *in = arg;
    fa_safetensors *st = NULL;
    fa_st_writer *w = NULL;
    const uint8_t *hdr;
    size_t hdr_len;
    int rc = fa_st_parse(&st, in->data, in->len, "model.safetensors", err);

    if (rc == 0)
        rc = fa_st_writer_new(&w, err);
    for (size_t i = 0; rc == 0 && i < fa_st_count(st); i++) {
        const fa_st_tensor *t = fa_st_at(st, i);
        uint8_t *buf = malloc((size_t)(t->end - t->begin) + 1);
        if (!buf)
            rc = fa_errorf(err, FA_ERR_NOMEM, "test: out of memory");
        else
            rc = fa_st_read(st, t, buf, (size_t)(t->end - t->begin), err);
        free(buf);
        if (rc == 0)
            rc = fa_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, err);
    }
    for (size_t i = 0; rc == 0 && i < fa_st_metadata_count(st); i++) {
        const char *k, *v;
        fa_st_metadata_at(st, i, &k, &v);
        rc = fa_st_writer_metadata(w, k, v, err);
    }
    if (rc == 0)
        rc = fa_st_writer_header(w, &hdr, &hdr_len, err);
    fa_st_writer_del(w);
    fa_st_del(st);
    return rc;
}

static int parse_refused(void *arg, fa_error *err)
{
    struct input *in = arg;
    fa_safetensors *st = NULL;
    int rc = fa_st_parse(&st, in->data, in->len, "model.safetensors", err);
    fa_st_del(st);
    return fa_failalloc_same(&in->ref, rc, err);
}

static void test_reader(void **state)
{
    static const char *const good[] = {"mlp_small", "all_dtypes", "metadata_only", "padded"};
    static const char *const bad[] = {"bad_json", "dup", "overlap", "gap"};
    struct input in;
    (void)state;

    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        load(&in, good[i]);
        /* jansson reports some failed allocations of its lexer as syntax
         * errors (fa_json.h): FA_ERR_PARSE is taken for those */
        fa_failalloc_check(good[i], parse_and_read, &in, FA_ERR_PARSE);
        free(in.data);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        load(&in, bad[i]);
        fa_failalloc_check(bad[i], parse_refused, &in, FA_ERR_PARSE);
        free(in.data);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_reader)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
