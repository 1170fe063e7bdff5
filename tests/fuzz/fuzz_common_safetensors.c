/* libFuzzer target: the safetensors parser on untrusted bytes (a model
 * downloaded from the aggregator, an external trainer's output).
 *
 * The input is a whole file: fa_st_parse checks the length prefix, parses the
 * JSON header and validates every tensor against the data section.  When it
 * accepts, every tensor is read back (as bytes, and as floats for the float
 * dtypes) and the header is re-serialised by the writer and parsed again:
 * both must agree on names, dtypes and shapes.  An accepted file has only
 * printable names (fa_st_name_check) and BOOL bytes of 0 or 1. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/fa_safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fa_safetensors *st = NULL, *again = NULL;
    fa_st_writer *w = NULL;
    fa_error err;
    const uint8_t *hdr;
    size_t hdr_len;

    if (fa_st_parse(&st, data, size, "fuzz", &err) != 0)
        return 0;
    if (fa_st_writer_new(&w, &err) != 0)
        goto out;
    for (size_t i = 0; i < fa_st_count(st); i++) {
        const fa_st_tensor *t = fa_st_at(st, i);
        size_t len = (size_t)(t->end - t->begin);
        uint8_t *buf = malloc(len ? len : 1);
        size_t bad;
        if (!buf || fa_st_read(st, t, buf, len, &err) != 0 ||
            memcmp(buf, fa_st_data(st, t), len) != 0 || fa_st_name_check(t->name, &bad) != 0)
            abort();
        for (size_t k = 0; t->dtype == FA_ST_BOOL && k < len; k++)
            if (buf[k] > 1)
                abort();
        if (t->dtype == FA_ST_F16 || t->dtype == FA_ST_BF16 || t->dtype == FA_ST_F32) {
            float *f = malloc(t->numel ? t->numel * sizeof(float) : 1);
            if (!f || fa_st_read_f32(st, t, f, (size_t)t->numel, &err) != 0)
                abort();
            free(f);
        }
        free(buf);
        if (fa_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, &err) != 0)
            abort();
    }
    for (size_t i = 0; i < fa_st_metadata_count(st); i++) {
        const char *k, *v;
        fa_st_metadata_at(st, i, &k, &v);
        if (fa_st_writer_metadata(w, k, v, &err) != 0)
            abort();
    }
    if (fa_st_writer_header(w, &hdr, &hdr_len, &err) != 0)
        goto out; /* e.g. a re-serialised header over the size limit */
    if (fa_st_parse_header(&again, hdr + 8, hdr_len - 8, fa_st_data_len(st), "again", &err) != 0)
        abort();
    if (fa_st_count(again) != fa_st_count(st) ||
        fa_st_metadata_count(again) != fa_st_metadata_count(st))
        abort();
    for (size_t i = 0; i < fa_st_count(st); i++) {
        const fa_st_tensor *a = fa_st_at(st, i), *b = fa_st_find(again, a->name);
        if (!b || b->dtype != a->dtype || b->ndim != a->ndim ||
            memcmp(a->shape, b->shape, a->ndim * sizeof(uint64_t)) != 0 ||
            b->end - b->begin != a->end - a->begin)
            abort();
    }
out:
    fa_st_del(again);
    fa_st_writer_del(w);
    fa_st_del(st);
    return 0;
}
