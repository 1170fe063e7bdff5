/* libFuzzer target: the tensor table on untrusted bytes.  The fedagg.federated
 * metadata of every published model, and the header of every model a trainer
 * or a peer hands over, reach model/tensors.c from outside.
 *
 * The first byte chooses what the rest is:
 *
 *   0  a fedagg.federated value, applied to a small fixed table (every
 *      dtype, BOOL included).  Accepted: encoding it again and applying
 *      that to a fresh table gives the same table, bit for bit.  Refused:
 *      the table is exactly as it was (digests, ranges, offsets).
 *   1  8 bytes of data-section length (little-endian), then a safetensors
 *      header: fa_st_parse_header, then fa_tensors_from_st.  Accepted: the
 *      table is the file's (names, dtypes, shapes, in file order),
 *      fa_tensors_check agrees with it, the default selection either
 *      federates the floating tensors or refuses, and the metadata round
 *      trip holds.
 *   2  a glob pattern, NUL, a name: fa_tensors_glob must end (it is
 *      O(|pattern| x |name|)), "*" and the name with every byte escaped
 *      must match the name.
 *
 * Anything else is a defect: abort(). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/fa_safetensors.h"
#include "model/tensors.h"

/* A whole table: what it is and which tensors are federated with which
 * ranges, bit for bit. */
struct state {
    uint8_t digest[32], ranges[32];
    uint64_t fed_numel;
    size_t fed_count;
};

static void take(const fa_tensors *t, struct state *s)
{
    if (fa_tensors_digest(t, s->digest, NULL) != 0 ||
        fa_tensors_ranges_digest(t, s->ranges, NULL) != 0)
        abort();
    s->fed_numel = fa_tensors_fed_numel(t);
    s->fed_count = fa_tensors_fed_count(t);
}

static int same(const struct state *a, const struct state *b)
{
    return memcmp(a->digest, b->digest, 32) == 0 && memcmp(a->ranges, b->ranges, 32) == 0 &&
           a->fed_numel == b->fed_numel && a->fed_count == b->fed_count;
}

/* Offsets consecutive in table order and the totals consistent. */
static void check_offsets(const fa_tensors *t)
{
    uint64_t off = 0, bytes = 0;
    size_t count = 0;
    for (size_t i = 0; i < fa_tensors_count(t); i++) {
        const fa_tensor *x = fa_tensors_at(t, i);
        bytes += x->nbytes;
        if (!x->federated)
            continue;
        if (x->fed_offset != off || x->dtype == FA_ST_BOOL || !(x->range >= 0))
            abort();
        off += x->numel;
        count++;
    }
    if (off != fa_tensors_fed_numel(t) || count != fa_tensors_fed_count(t) ||
        bytes != fa_tensors_total_bytes(t))
        abort();
}

/* meta_encode of t, applied to a copy with nothing federated: t again. */
static void meta_round_trip(const fa_tensors *t)
{
    fa_tensors *c = NULL;
    struct state a, b;
    char *json = NULL;
    fa_error err;

    if (fa_tensors_meta_encode(t, &json, &err) != 0 || fa_tensors_clone(&c, t, &err) != 0 ||
        fa_tensors_meta_apply(c, "{}", &err) != 0 || fa_tensors_meta_apply(c, json, &err) != 0)
        abort();
    take(t, &a);
    take(c, &b);
    if (!same(&a, &b))
        abort();
    free(json);
    fa_tensors_del(c);
}

static fa_tensors *small_table(void)
{
    static const struct {
        const char *name;
        fa_st_dtype dtype;
        unsigned ndim;
        uint64_t shape[3];
    } rows[] = {
        {"a", FA_ST_F32, 2, {3, 4}},     {"b.weight", FA_ST_BF16, 1, {5}},
        {"c.bias", FA_ST_F16, 0, {0}},   {"d", FA_ST_F64, 3, {1, 2, 1}},
        {"mask", FA_ST_BOOL, 1, {2}},    {"steps", FA_ST_I64, 0, {0}},
        {"i32", FA_ST_I32, 1, {2}},      {"u8", FA_ST_U8, 1, {0}},
        {"i8", FA_ST_I8, 1, {1}},        {"i16", FA_ST_I16, 1, {7}},
        {"caf\xc3\xa9", FA_ST_F32, 0, {0}},
    };
    fa_tensors *t;
    if (fa_tensors_new(&t, NULL) != 0)
        abort();
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        if (fa_tensors_add(t, rows[i].name, rows[i].dtype, rows[i].ndim, rows[i].shape, NULL) != 0)
            abort();
    /* something federated to begin with, so that a refusal has a state to keep */
    if (fa_tensors_set_federated(t, 1, 1, NULL) != 0 || fa_tensors_set_range(t, 1, 0.5f, NULL) != 0 ||
        fa_tensors_set_federated(t, 5, 1, NULL) != 0)
        abort();
    return t;
}

static void fuzz_meta(const uint8_t *data, size_t size)
{
    fa_tensors *t = small_table();
    struct state before, after;
    char *json = malloc(size + 1);
    fa_error err;

    if (!json)
        abort();
    memcpy(json, data, size);
    json[size] = 0;
    take(t, &before);
    int rc = fa_tensors_meta_apply(t, json, &err);
    if (rc != 0) {
        if (rc != FA_ERR_PARSE && rc != FA_ERR_INVAL && rc != FA_ERR_NOMEM)
            abort();
        take(t, &after);
        if (!same(&before, &after))
            abort(); /* a refusal changed the table */
    }
    check_offsets(t);
    meta_round_trip(t);
    free(json);
    fa_tensors_del(t);
}

static void fuzz_header(const uint8_t *data, size_t size)
{
    fa_safetensors *st = NULL;
    fa_tensors *t = NULL;
    uint64_t data_len = 0;
    fa_error err;

    if (size < 8)
        return;
    for (int i = 7; i >= 0; i--)
        data_len = (data_len << 8) | data[i];
    if (fa_st_parse_header(&st, data + 8, size - 8, data_len, "fuzz", &err) != 0)
        return;
    if (fa_tensors_from_st(&t, st, &err) != 0)
        goto out;
    if (fa_tensors_count(t) != fa_st_count(st))
        abort();
    for (size_t i = 0; i < fa_st_count(st); i++) {
        const fa_st_tensor *s = fa_st_at(st, i);
        const fa_tensor *x = fa_tensors_at(t, i);
        if (strcmp(x->name, s->name) != 0 || fa_tensors_find(t, s->name) != x ||
            fa_tensors_index(t, s->name) != (long)i || x->dtype != s->dtype ||
            x->ndim != s->ndim || memcmp(x->shape, s->shape, s->ndim * sizeof(uint64_t)) != 0 ||
            x->numel != s->numel || x->nbytes != s->end - s->begin)
            abort();
    }
    if (fa_tensors_check(t, st, "fuzz", &err) != 0)
        abort();
    check_offsets(t);
    meta_round_trip(t);

    /* the default selection: exactly the floating tensors, or a refusal
     * when there are none */
    size_t floats = 0;
    for (size_t i = 0; i < fa_tensors_count(t); i++)
        floats += fa_tensors_dtype_is_float(fa_tensors_at(t, i)->dtype) != 0;
    int rc = fa_tensors_select(t, NULL, &err);
    if ((rc == 0) != (floats > 0) || (rc == 0 && fa_tensors_fed_count(t) != floats))
        abort();
    check_offsets(t);
    meta_round_trip(t);
out:
    fa_tensors_del(t);
    fa_st_del(st);
}

static void fuzz_glob(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    char *pattern, *name, *escaped;
    size_t pl, nl;

    if (!nul)
        return;
    pl = (size_t)(nul - data);
    nl = size - pl - 1;
    pattern = malloc(pl + 1);
    name = malloc(nl + 1);
    escaped = malloc(2 * nl + 1);
    if (!pattern || !name || !escaped)
        abort();
    memcpy(pattern, data, pl);
    pattern[pl] = 0;
    memcpy(name, nul + 1, nl);
    name[nl] = 0;
    nl = strlen(name); /* up to a second NUL */
    (void)fa_tensors_glob(pattern, name);
    for (size_t i = 0; i < nl; i++) {
        escaped[2 * i] = '\\';
        escaped[2 * i + 1] = name[i];
    }
    escaped[2 * nl] = 0;
    if (!fa_tensors_glob("*", name) || !fa_tensors_glob(escaped, name))
        abort();
    free(escaped);
    free(name);
    free(pattern);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    switch (data[0] % 3) {
    case 0: fuzz_meta(data + 1, size - 1); break;
    case 1: fuzz_header(data + 1, size - 1); break;
    default: fuzz_glob(data + 1, size - 1); break;
    }
    return 0;
}
