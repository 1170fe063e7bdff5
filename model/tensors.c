/* tensors.c - a model as a table of named, typed tensors (see tensors.h):
 * the table and its name hash, tensor selection by glob, the fedagg.federated
 * metadata, the digests, the dtype conversions between a model's tensors and
 * the federated float32 vector, and the views that write a model out. */
#include "model/tensors.h"

#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fa_endian.h"
#include "common/fa_sha256.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "tensors.c moves little-endian tensor bytes with memcpy: port the loads and stores"
#endif

/* Elements converted per step when a tensor is read or widened in pieces
 * (the bounce buffer is at most this x 8 bytes). */
#define CHUNK_ELEMS ((size_t)1 << 17)

/* ---------------------------------------------------------------------- */
/* The table                                                               */
/* ---------------------------------------------------------------------- */

/* One tensor with its name in the same allocation: the fa_tensor a caller
 * holds never moves while the table grows. */
struct entry {
    fa_tensor t;
    uint64_t hash;
    size_t index;
    char name[];
};

struct fa_tensors {
    struct entry **e; /* table order */
    size_t n, cap;
    /* Open addressing, linear probing: slots[h & mask] holds index + 1, or 0
     * when empty; at most half full. */
    uint32_t *slots;
    size_t mask;
    uint64_t fed_numel, total_bytes;
    size_t fed_count;
};

_Static_assert(FA_TENSORS_MAX < UINT32_MAX / 2, "slot indices fit in 32 bits");

/* FNV-1a, 64 bits. */
static uint64_t name_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

static long lookup(const fa_tensors *t, const char *name, uint64_t h)
{
    if (!t->slots)
        return -1;
    for (size_t i = h & t->mask;; i = (i + 1) & t->mask) {
        uint32_t s = t->slots[i];
        if (s == 0)
            return -1;
        const struct entry *e = t->e[s - 1];
        if (e->hash == h && strcmp(e->name, name) == 0)
            return (long)(s - 1);
    }
}

static void slot_put(uint32_t *slots, size_t mask, uint64_t h, size_t index)
{
    size_t i = h & mask;
    while (slots[i])
        i = (i + 1) & mask;
    slots[i] = (uint32_t)(index + 1);
}

/* Room for one more tensor in e[] and in the hash. */
static int reserve_one(fa_tensors *t)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 16;
        struct entry **e = realloc(t->e, cap * sizeof(*e));
        if (!e)
            return FA_ERR_NOMEM;
        t->e = e;
        t->cap = cap;
    }
    if (!t->slots || 2 * (t->n + 1) > t->mask + 1) {
        size_t size = t->slots ? 2 * (t->mask + 1) : 32;
        uint32_t *slots = calloc(size, sizeof(*slots));
        if (!slots)
            return FA_ERR_NOMEM;
        for (size_t i = 0; i < t->n; i++)
            slot_put(slots, size - 1, t->e[i]->hash, i);
        free(t->slots);
        t->slots = slots;
        t->mask = size - 1;
    }
    return 0;
}

/* Federated offsets and the totals, after federated flags changed. */
static void recompute(fa_tensors *t)
{
    uint64_t off = 0;
    size_t count = 0;
    for (size_t i = 0; i < t->n; i++) {
        fa_tensor *x = &t->e[i]->t;
        x->fed_offset = x->federated ? off : 0;
        if (x->federated) {
            off += x->numel;
            count++;
        }
    }
    t->fed_numel = off;
    t->fed_count = count;
}

int fa_tensors_dtype_is_float(fa_st_dtype dtype)
{
    return dtype == FA_ST_F32 || dtype == FA_ST_F16 || dtype == FA_ST_BF16 || dtype == FA_ST_F64;
}

int fa_tensors_new(fa_tensors **out, fa_error *err)
{
    *out = calloc(1, sizeof(**out));
    return *out ? 0 : fa_errorf(err, FA_ERR_NOMEM, "tensor table: out of memory");
}

void fa_tensors_del(fa_tensors *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n; i++)
        free(t->e[i]);
    free(t->e);
    free(t->slots);
    free(t);
}

int fa_tensors_add(fa_tensors *t, const char *name, fa_st_dtype dtype, unsigned ndim,
                   const uint64_t *shape, fa_error *err)
{
    size_t len = name ? strlen(name) : 0, esize = fa_st_dtype_size(dtype);
    uint64_t numel = 1, h;
    struct entry *e;
    size_t bad;

    if (len == 0 || len > FA_ST_MAX_NAME)
        return fa_errorf(err, FA_ERR_INVAL, "tensor name of %zu bytes (must be 1..%u)", len,
                         FA_ST_MAX_NAME);
    /* the names a safetensors file may hold (common/fa_safetensors.h) */
    if (strcmp(name, "__metadata__") == 0 || fa_st_name_check(name, &bad) != 0) {
        char shown[200];
        return fa_errorf(err, FA_ERR_INVAL,
                         "tensor '%s': invalid name (\"__metadata__\", or a control or "
                         "invisible character at byte %zu: a name must be printable UTF-8)",
                         fa_st_escape(shown, sizeof(shown), name), bad);
    }
    if (esize == 0)
        return fa_errorf(err, FA_ERR_INVAL, "tensor '%s': unknown dtype %d", name, (int)dtype);
    if (ndim > FA_ST_MAX_DIMS)
        return fa_errorf(err, FA_ERR_INVAL, "tensor '%s': %u dimensions (at most %d)", name, ndim,
                         FA_ST_MAX_DIMS);
    if (t->n >= FA_TENSORS_MAX)
        return fa_errorf(err, FA_ERR_INVAL, "tensor '%s': more than %u tensors", name,
                         FA_TENSORS_MAX);
    h = name_hash(name);
    if (lookup(t, name, h) >= 0)
        return fa_errorf(err, FA_ERR_INVAL, "duplicate tensor '%s'", name);
    for (unsigned d = 0; d < ndim; d++) {
        if (shape[d] > (uint64_t)INT64_MAX || (shape[d] != 0 && numel > UINT64_MAX / shape[d]))
            return fa_errorf(err, FA_ERR_INVAL, "tensor '%s': shape overflows", name);
        numel *= shape[d];
    }
    /* bytes must fit the int64 offsets of a safetensors header */
    if (numel > (uint64_t)INT64_MAX / esize || numel * esize > (uint64_t)INT64_MAX - t->total_bytes)
        return fa_errorf(err, FA_ERR_INVAL, "tensor '%s': size overflows", name);
    if (reserve_one(t) != 0 || !(e = malloc(sizeof(*e) + len + 1)))
        return fa_errorf(err, FA_ERR_NOMEM, "tensor '%s': out of memory", name);
    memcpy(e->name, name, len + 1);
    memset(&e->t, 0, sizeof(e->t));
    e->t.name = e->name;
    e->t.dtype = dtype;
    e->t.ndim = ndim;
    if (ndim)
        memcpy(e->t.shape, shape, ndim * sizeof(uint64_t));
    e->t.numel = numel;
    e->t.nbytes = numel * esize;
    e->hash = h;
    e->index = t->n;
    t->e[t->n] = e;
    slot_put(t->slots, t->mask, h, t->n);
    t->n++;
    t->total_bytes += e->t.nbytes;
    return 0;
}

int fa_tensors_from_st(fa_tensors **out, const fa_safetensors *st, fa_error *err)
{
    fa_tensors *t = NULL;
    const char *meta;
    int rc;

    *out = NULL;
    if ((rc = fa_tensors_new(&t, err)) != 0)
        return rc;
    for (size_t i = 0; i < fa_st_count(st); i++) {
        const fa_st_tensor *s = fa_st_at(st, i);
        if ((rc = fa_tensors_add(t, s->name, s->dtype, s->ndim, s->shape, err)) != 0)
            goto fail;
    }
    meta = fa_st_metadata_get(st, FA_TENSORS_META_KEY);
    if (meta && (rc = fa_tensors_meta_apply(t, meta, err)) != 0)
        goto fail;
    *out = t;
    return 0;
fail:
    fa_tensors_del(t);
    return rc;
}

int fa_tensors_clone(fa_tensors **out, const fa_tensors *t, fa_error *err)
{
    fa_tensors *c = NULL;
    int rc;

    *out = NULL;
    if ((rc = fa_tensors_new(&c, err)) != 0)
        return rc;
    for (size_t i = 0; i < t->n; i++) {
        const fa_tensor *x = &t->e[i]->t;
        if ((rc = fa_tensors_add(c, x->name, x->dtype, x->ndim, x->shape, err)) != 0) {
            fa_tensors_del(c);
            return rc;
        }
        c->e[i]->t.federated = x->federated;
        c->e[i]->t.range = x->range;
    }
    recompute(c);
    *out = c;
    return 0;
}

size_t fa_tensors_count(const fa_tensors *t)
{
    return t->n;
}

const fa_tensor *fa_tensors_at(const fa_tensors *t, size_t i)
{
    return i < t->n ? &t->e[i]->t : NULL;
}

const fa_tensor *fa_tensors_find(const fa_tensors *t, const char *name)
{
    long i = lookup(t, name, name_hash(name));
    return i >= 0 ? &t->e[i]->t : NULL;
}

long fa_tensors_index(const fa_tensors *t, const char *name)
{
    return lookup(t, name, name_hash(name));
}

uint64_t fa_tensors_fed_numel(const fa_tensors *t)
{
    return t->fed_numel;
}
size_t fa_tensors_fed_count(const fa_tensors *t)
{
    return t->fed_count;
}
uint64_t fa_tensors_total_bytes(const fa_tensors *t)
{
    return t->total_bytes;
}

/* ---------------------------------------------------------------------- */
/* Selection                                                               */
/* ---------------------------------------------------------------------- */

/* The class at p (p[0] == '['): whether c is in it, with *next past its
 * ']'; -1 when it has no closing ']' (then '[' is a literal). */
static int glob_class(const char *p, unsigned char c, const char **next)
{
    const char *first;
    int neg = 0, hit = 0;

    p++;
    if (*p == '!' || *p == '^') {
        neg = 1;
        p++;
    }
    first = p;
    while (*p && (*p != ']' || p == first)) { /* a ']' first is a member */
        unsigned char lo, hi;
        if (*p == '\\' && p[1])
            p++;
        lo = hi = (unsigned char)*p++;
        if (*p == '-' && p[1] && p[1] != ']') {
            p++;
            if (*p == '\\' && p[1])
                p++;
            hi = (unsigned char)*p++;
        }
        if (lo <= c && c <= hi)
            hit = 1;
    }
    if (*p != ']')
        return -1;
    *next = p + 1;
    return hit != neg;
}

/* Whether the one-byte item at p (not '*', not the end) matches c. */
static int glob_one(const char *p, unsigned char c, const char **next)
{
    int r;
    if (*p == '?') {
        *next = p + 1;
        return 1;
    }
    if (*p == '[' && (r = glob_class(p, c, next)) >= 0)
        return r;
    if (*p == '\\' && p[1]) {
        *next = p + 2;
        return c == (unsigned char)p[1];
    }
    *next = p + 1;
    return c == (unsigned char)*p;
}

/* Every other item matches exactly one byte, so on a mismatch it is enough
 * to let the last '*' swallow one more byte: O(|pattern| x |name|). */
int fa_tensors_glob(const char *pattern, const char *name)
{
    const char *p = pattern, *s = name, *star_p = NULL, *star_s = NULL, *next;

    while (*s) {
        if (*p == '*') {
            while (*p == '*')
                p++;
            star_p = p;
            star_s = s;
            continue;
        }
        if (*p && glob_one(p, (unsigned char)*s, &next)) {
            p = next;
            s++;
            continue;
        }
        if (!star_p)
            return 0;
        p = star_p;
        s = ++star_s;
    }
    while (*p == '*')
        p++;
    return *p == 0;
}

/* Edit distance from lit to the closest substring of s (Sellers 1980: a
 * free start and end in s), lit at most 64 bytes. */
static size_t substring_distance(const char *lit, size_t m, const char *s)
{
    size_t col[65], best;

    for (size_t i = 0; i <= m; i++)
        col[i] = i;
    best = m;
    for (; *s; s++) {
        size_t diag = col[0]; /* col[0] stays 0: a match may start anywhere */
        for (size_t i = 1; i <= m; i++) {
            size_t up = col[i];
            size_t v = diag + (lit[i - 1] != *s);
            if (up + 1 < v)
                v = up + 1;
            if (col[i - 1] + 1 < v)
                v = col[i - 1] + 1;
            col[i] = v;
            diag = up;
        }
        if (col[m] < best)
            best = col[m];
    }
    return best;
}

/* Writes "'a', 'b' or 'c'": the (up to) three names of t closest to the
 * literal bytes of pattern (wildcards dropped). */
static void suggest(const fa_tensors *t, const char *pattern, char *buf, size_t cap)
{
    static const char *const sep[2] = {", ", " or "};
    char lit[65];
    size_t m = 0, best[3], dist[3], n = 0, used = 0;

    for (const char *p = pattern; *p && m < sizeof(lit) - 1; p++) {
        if (*p == '*' || *p == '?')
            continue;
        if (*p == '\\' && p[1])
            p++;
        lit[m++] = *p;
    }
    lit[m] = 0;
    for (size_t i = 0; i < t->n; i++) {
        const struct entry *e = t->e[i];
        size_t d = substring_distance(lit, m, e->name), k;
        /* keep the three smallest, earlier names first on ties */
        if (n == 3 && d >= dist[2])
            continue;
        for (k = n < 3 ? n : 2; k > 0 && dist[k - 1] > d; k--) {
            best[k] = best[k - 1];
            dist[k] = dist[k - 1];
        }
        best[k] = i;
        dist[k] = d;
        if (n < 3)
            n++;
    }
    buf[0] = 0;
    for (size_t k = 0; k < n && used < cap; k++)
        used += (size_t)snprintf(buf + used, cap - used, "%s'%s'", k == 0 ? "" : sep[k + 1 == n],
                                 t->e[best[k]]->name);
}

/* FA_ERR_INVAL unless pattern matches some tensor of t. */
static int typo_guard(const fa_tensors *t, const char *kind, const char *pattern, fa_error *err)
{
    char near[400];

    for (size_t i = 0; i < t->n; i++)
        if (fa_tensors_glob(pattern, t->e[i]->name))
            return 0;
    if (t->n == 0)
        return fa_errorf(err, FA_ERR_INVAL, "%s pattern '%s' matches no tensor: the model has none",
                         kind, pattern);
    suggest(t, pattern, near, sizeof(near));
    return fa_errorf(err, FA_ERR_INVAL,
                     "%s pattern '%s' matches no tensor of the model (nearest: %s; patterns match "
                     "whole names: `*` any run, `?` one character)",
                     kind, pattern, near);
}

static int any_match(const char *const *pats, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (fa_tensors_glob(pats[i], name))
            return 1;
    return 0;
}

int fa_tensors_select(fa_tensors *t, const fa_tensor_select *sel, fa_error *err)
{
    static const fa_tensor_select defaults = {NULL, 0, NULL, 0, FA_TENSORS_INT_KEEP};
    uint8_t *fed = NULL;
    size_t count = 0, candidates = 0;
    int rc = 0;

    if (!sel)
        sel = &defaults;
    for (size_t i = 0; i < sel->n_include; i++)
        if ((rc = typo_guard(t, "include", sel->include[i], err)) != 0)
            return rc;
    for (size_t i = 0; i < sel->n_exclude; i++)
        if ((rc = typo_guard(t, "exclude", sel->exclude[i], err)) != 0)
            return rc;
    if (!(fed = calloc(t->n + 1, 1)))
        return fa_errorf(err, FA_ERR_NOMEM, "tensor selection: out of memory");
    for (size_t i = 0; i < t->n; i++) {
        const fa_tensor *x = &t->e[i]->t;
        int cand = fa_tensors_dtype_is_float(x->dtype) ||
                   (sel->integers == FA_TENSORS_INT_MEAN_DELTA && x->dtype != FA_ST_BOOL);
        if (!cand)
            continue;
        candidates++;
        fed[i] = (sel->n_include == 0 || any_match(sel->include, sel->n_include, x->name)) &&
                 !any_match(sel->exclude, sel->n_exclude, x->name);
        count += fed[i];
    }
    if (count == 0) {
        rc = fa_errorf(err, FA_ERR_INVAL,
                       "no tensor would be federated: of %zu tensors, %zu can be (floating%s)%s",
                       t->n, candidates,
                       sel->integers == FA_TENSORS_INT_MEAN_DELTA ? " or integer" : "",
                       candidates ? " and the include/exclude patterns leave none of them" : "");
        goto out;
    }
    for (size_t i = 0; i < t->n; i++) {
        t->e[i]->t.federated = fed[i];
        t->e[i]->t.range = 0;
    }
    recompute(t);
out:
    free(fed);
    return rc;
}

int fa_tensors_set_federated(fa_tensors *t, size_t i, int federated, fa_error *err)
{
    fa_tensor *x;

    if (i >= t->n)
        return fa_errorf(err, FA_ERR_INVAL, "tensor %zu of a table of %zu", i, t->n);
    x = &t->e[i]->t;
    if (federated && x->dtype == FA_ST_BOOL)
        return fa_errorf(err, FA_ERR_INVAL, "tensor '%s' is BOOL: it cannot be federated", x->name);
    if (!!federated != x->federated) {
        x->federated = !!federated;
        x->range = 0;
        recompute(t);
    }
    return 0;
}

int fa_tensors_set_range(fa_tensors *t, size_t i, float range, fa_error *err)
{
    if (i >= t->n)
        return fa_errorf(err, FA_ERR_INVAL, "tensor %zu of a table of %zu", i, t->n);
    if (!t->e[i]->t.federated)
        return fa_errorf(err, FA_ERR_INVAL, "tensor '%s' is not federated: it has no range",
                         t->e[i]->name);
    if (!(range > 0) || !isfinite(range))
        return fa_errorf(err, FA_ERR_INVAL, "tensor '%s': range %g must be finite and > 0",
                         t->e[i]->name, (double)range);
    t->e[i]->t.range = range;
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Digests and metadata                                                    */
/* ---------------------------------------------------------------------- */

int fa_tensors_digest(const fa_tensors *t, uint8_t out[32], fa_error *err)
{
    static const char tag[] = "fedagg-tensors-v1\n";
    fa_sha256_ctx h = {0};
    int rc;

    fa_sha256_init(&h);
    fa_sha256_update(&h, tag, sizeof(tag) - 1);
    for (size_t i = 0; i < t->n; i++) {
        const fa_tensor *x = &t->e[i]->t;
        const char *dn = fa_st_dtype_name(x->dtype);
        uint8_t b[4 + 8 * FA_ST_MAX_DIMS + 1];
        size_t k = 4;
        fa_le_put_u32(b, x->ndim);
        for (unsigned d = 0; d < x->ndim; d++, k += 8)
            fa_le_put_u64(b + k, x->shape[d]);
        b[k++] = x->federated ? 1 : 0;
        fa_sha256_update(&h, x->name, strlen(x->name) + 1);
        fa_sha256_update(&h, dn, strlen(dn) + 1);
        fa_sha256_update(&h, b, k);
    }
    rc = fa_sha256_final(&h, out);
    fa_sha256_free(&h);
    return rc ? fa_errorf(err, rc, "tensor table digest: SHA-256 (OpenSSL) failed") : 0;
}

int fa_tensors_ranges_digest(const fa_tensors *t, uint8_t out[32], fa_error *err)
{
    fa_sha256_ctx h = {0};
    int rc;

    fa_sha256_init(&h);
    for (size_t i = 0; i < t->n; i++) {
        const fa_tensor *x = &t->e[i]->t;
        uint32_t bits;
        uint8_t b[4];
        if (!x->federated)
            continue;
        memcpy(&bits, &x->range, 4);
        fa_le_put_u32(b, bits);
        fa_sha256_update(&h, b, 4);
    }
    rc = fa_sha256_final(&h, out);
    fa_sha256_free(&h);
    return rc ? fa_errorf(err, rc, "tensor ranges digest: SHA-256 (OpenSSL) failed") : 0;
}

int fa_tensors_meta_encode(const fa_tensors *t, char **json, fa_error *err)
{
    json_t *o = json_object();
    int ok = o != NULL;

    *json = NULL;
    for (size_t i = 0; ok && i < t->n; i++) {
        const fa_tensor *x = &t->e[i]->t;
        if (x->federated)
            ok = json_object_set_new(o, x->name, json_real((double)x->range)) == 0;
    }
    /* 9 significant digits name every float32 exactly (IEEE 754 5.12.2) */
    if (ok)
        *json = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
    json_decref(o);
    return *json ? 0 : fa_errorf(err, FA_ERR_NOMEM, FA_TENSORS_META_KEY ": out of memory");
}

int fa_tensors_meta_apply(fa_tensors *t, const char *json, fa_error *err)
{
    json_error_t je;
    json_t *root, *v;
    const char *key;
    uint8_t *fed = NULL;
    float *range = NULL;
    int rc = 0;

    root = json_loads(json, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return fa_errorf(err, FA_ERR_PARSE,
                         FA_TENSORS_META_KEY ": not valid JSON: %s (line %d, column %d)", je.text,
                         je.line, je.column);
    if (!json_is_object(root)) {
        rc = fa_errorf(err, FA_ERR_PARSE,
                       FA_TENSORS_META_KEY ": not a JSON object of tensor names to ranges");
        goto out;
    }
    fed = calloc(t->n + 1, 1);
    range = calloc(t->n + 1, sizeof(float));
    if (!fed || !range) {
        rc = fa_errorf(err, FA_ERR_NOMEM, FA_TENSORS_META_KEY ": out of memory");
        goto out;
    }
    json_object_foreach(root, key, v) {
        long i = fa_tensors_index(t, key);
        double r;
        float f;
        if (i < 0) {
            rc = fa_errorf(err, FA_ERR_INVAL,
                           FA_TENSORS_META_KEY ": tensor '%s' is not in the model", key);
            goto out;
        }
        if (t->e[i]->t.dtype == FA_ST_BOOL) {
            rc = fa_errorf(err, FA_ERR_INVAL,
                           FA_TENSORS_META_KEY ": tensor '%s' is BOOL, which cannot be federated",
                           key);
            goto out;
        }
        if (!json_is_number(v)) {
            rc = fa_errorf(err, FA_ERR_PARSE,
                           FA_TENSORS_META_KEY ": tensor '%s': the range is not a number", key);
            goto out;
        }
        r = json_number_value(v);
        f = (float)r;
        if (!(r >= 0) || !isfinite(f) || (r > 0 && f == 0)) {
            rc = fa_errorf(
                err, FA_ERR_INVAL,
                FA_TENSORS_META_KEY ": tensor '%s': range %g is not a finite float32 >= 0", key, r);
            goto out;
        }
        fed[i] = 1;
        range[i] = f == 0 ? 0.0f : f; /* -0 is 0 */
    }
    for (size_t i = 0; i < t->n; i++) {
        t->e[i]->t.federated = fed[i];
        t->e[i]->t.range = range[i];
    }
    recompute(t);
out:
    free(range);
    free(fed);
    json_decref(root);
    return rc;
}

/* ---------------------------------------------------------------------- */
/* Checking and reading a file against the table                           */
/* ---------------------------------------------------------------------- */

static void shape_str(unsigned ndim, const uint64_t *shape, char *buf, size_t cap)
{
    size_t used = (size_t)snprintf(buf, cap, "[");
    for (unsigned i = 0; i < ndim && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, i ? ", %llu" : "%llu",
                                 (unsigned long long)shape[i]);
    if (used < cap)
        snprintf(buf + used, cap - used, "]");
}

/* map[i] = st's tensor of t's tensor i's name, or NULL; *extra = st's first
 * tensor (file order) that t has not.  O(n) through t's hash. */
static int map_st(const fa_tensors *t, const fa_safetensors *st, const fa_st_tensor ***map,
                  const fa_st_tensor **extra, fa_error *err)
{
    *extra = NULL;
    *map = calloc(t->n + 1, sizeof(**map));
    if (!*map)
        return fa_errorf(err, FA_ERR_NOMEM, "tensor table: out of memory");
    for (size_t j = 0; j < fa_st_count(st); j++) {
        const fa_st_tensor *s = fa_st_at(st, j);
        long i = fa_tensors_index(t, s->name);
        if (i >= 0)
            (*map)[i] = s;
        else if (!*extra)
            *extra = s;
    }
    return 0;
}

/* The message for tensor x of the table against s, st's tensor of that
 * name (NULL: missing); 0 when they agree. */
static int check_one(const fa_tensor *x, const fa_st_tensor *s, const char *what, fa_error *err)
{
    char a[200], b[200];

    if (!s)
        return fa_errorf(err, FA_ERR_INVAL, "%s: missing tensor '%s'", what, x->name);
    if (s->ndim != x->ndim || memcmp(s->shape, x->shape, x->ndim * sizeof(uint64_t)) != 0) {
        shape_str(s->ndim, s->shape, a, sizeof(a));
        shape_str(x->ndim, x->shape, b, sizeof(b));
        return fa_errorf(err, FA_ERR_INVAL, "%s: tensor '%s' has shape %s, the model's is %s", what,
                         x->name, a, b);
    }
    if (s->dtype != x->dtype)
        return fa_errorf(err, FA_ERR_INVAL, "%s: tensor '%s' is %s, the model's is %s", what,
                         x->name, fa_st_dtype_name(s->dtype), fa_st_dtype_name(x->dtype));
    return 0;
}

/* fa_tensors_check, leaving the map for the caller (freed on error). */
static int check_map(const fa_tensors *t, const fa_safetensors *st, const char *what,
                     const fa_st_tensor ***map, fa_error *err)
{
    const fa_st_tensor *extra;
    int rc;

    what = what ? what : "safetensors";
    if ((rc = map_st(t, st, map, &extra, err)) != 0)
        return rc;
    for (size_t i = 0; rc == 0 && i < t->n; i++)
        rc = check_one(&t->e[i]->t, (*map)[i], what, err);
    if (rc == 0 && extra)
        rc = fa_errorf(err, FA_ERR_INVAL, "%s: extra tensor '%s'", what, extra->name);
    if (rc != 0) {
        free(*map);
        *map = NULL;
    }
    return rc;
}

int fa_tensors_check(const fa_tensors *t, const fa_safetensors *st, const char *what, fa_error *err)
{
    const fa_st_tensor **map = NULL;
    int rc = check_map(t, st, what, &map, err);
    free(map);
    return rc;
}

/* Elements [e0, e0 + n) of s (dtype dtype) as float32 into dst: straight
 * from memory when st holds the file, else read in pieces. */
static int read_f32(const fa_safetensors *st, const fa_st_tensor *s, uint64_t e0, float *dst,
                    size_t n, fa_error *err)
{
    size_t es = fa_st_dtype_size(s->dtype);
    const uint8_t *mem = fa_st_data(st, s);
    uint8_t *buf;
    int rc = 0;

    if (mem) {
        fa_tensors_to_f32(s->dtype, mem + e0 * es, dst, n);
        return 0;
    }
    if (s->dtype == FA_ST_F32)
        return fa_st_read_range(st, s, e0 * 4, dst, n * 4, err);
    buf = malloc((n < CHUNK_ELEMS ? (n ? n : 1) : CHUNK_ELEMS) * es);
    if (!buf)
        return fa_errorf(err, FA_ERR_NOMEM, "tensor '%s': out of memory", s->name);
    for (size_t done = 0; rc == 0 && done < n;) {
        size_t k = n - done < CHUNK_ELEMS ? n - done : CHUNK_ELEMS;
        rc = fa_st_read_range(st, s, (e0 + done) * es, buf, k * es, err);
        if (rc == 0)
            fa_tensors_to_f32(s->dtype, buf, dst + done, k);
        done += k;
    }
    free(buf);
    return rc;
}

/* Whether x[0..n) holds a NaN or an infinity: a branch-free scan (it
 * vectorises, see FOR_EACH below). */
static int any_nonfinite(const uint8_t *restrict x, size_t n);

/* Index of the first NaN or infinity of x[0..n), or n. */
static size_t first_nonfinite(const float *x, size_t n)
{
    for (size_t i0 = 0; i0 < n; i0 += 4096) {
        size_t k = n - i0 < 4096 ? n - i0 : 4096;
        if (any_nonfinite((const uint8_t *)(x + i0), k))
            for (size_t i = i0; i < i0 + k; i++)
                if (!isfinite(x[i]))
                    return i;
    }
    return n;
}

int fa_tensors_read_fed(const fa_tensors *t, const fa_safetensors *st, float *fed, size_t n,
                        int check_finite, const char *what, fa_error *err)
{
    const fa_st_tensor **map = NULL;
    int rc;

    what = what ? what : "safetensors";
    if (n != t->fed_numel)
        return fa_errorf(err, FA_ERR_INVAL,
                         "%s: room for %zu federated coordinates, the model has %llu", what, n,
                         (unsigned long long)t->fed_numel);
    if ((rc = check_map(t, st, what, &map, err)) != 0)
        return rc;
    for (size_t i = 0; rc == 0 && i < t->n; i++) {
        const fa_tensor *x = &t->e[i]->t;
        float *dst = fed + x->fed_offset;
        size_t bad;
        const char *what_bad;
        if (!x->federated)
            continue;
        if ((rc = read_f32(st, map[i], 0, dst, (size_t)x->numel, err)) != 0)
            break;
        if (!check_finite || (bad = first_nonfinite(dst, (size_t)x->numel)) == x->numel)
            continue;
        what_bad = isnan(dst[bad]) ? "NaN" : signbit(dst[bad]) ? "-inf" : "+inf";
        rc = fa_errorf(err, FA_ERR_RANGE, "%s: tensor '%s': element %zu is %s", what, x->name, bad,
                       what_bad);
    }
    free(map);
    return rc;
}

/* ---------------------------------------------------------------------- */
/* Element conversions                                                      */
/* ---------------------------------------------------------------------- */

/* The loops below are written for GCC's -O2 vectoriser, whose cost model
 * ("very cheap") takes a loop only when it needs no run-time alias check
 * and leaves no scalar remainder: each loop is a function of its own with
 * restrict parameters (GCC honours restrict on parameters) and runs in
 * blocks of BLOCK elements with a constant trip count, then the tail.
 * Loads and stores go through memcpy (the bytes may be unaligned; each
 * becomes one vector move).  No branch in a body: a float-to-integer
 * conversion is done on an already clamped value, so that it may run for
 * every lane. */
#define BLOCK 32
#define FOR_EACH(i, n, ...)                                                                        \
    do {                                                                                           \
        size_t i##0_ = 0;                                                                          \
        for (; i##0_ + BLOCK <= (n); i##0_ += BLOCK)                                               \
            for (size_t i = i##0_; i < i##0_ + BLOCK; i++) {                                       \
                __VA_ARGS__                                                                        \
            }                                                                                      \
        for (size_t i = i##0_; i < (n); i++) {                                                     \
            __VA_ARGS__                                                                            \
        }                                                                                          \
    } while (0)

static int any_nonfinite(const uint8_t *restrict x, size_t n)
{
    /* an all-ones exponent plus one carries into bit 31; no other does.
     * One accumulator per lane: -O2 vectorises no reduction. */
    uint32_t lane[BLOCK] = {0}, bad = 0, b;
    size_t i0 = 0;
    for (; i0 + BLOCK <= n; i0 += BLOCK)
        for (size_t j = 0; j < BLOCK; j++) {
            memcpy(&b, x + 4 * (i0 + j), 4);
            lane[j] |= (b & 0x7f800000u) + 0x00800000u;
        }
    for (size_t i = i0; i < n; i++) {
        memcpy(&b, x + 4 * i, 4);
        bad |= (b & 0x7f800000u) + 0x00800000u;
    }
    for (size_t j = 0; j < BLOCK; j++)
        bad |= lane[j];
    return (bad >> 31) != 0;
}

/* to_<name>(s, d, n): n elements of ctype at s to float32, each `expr` of v. */
#define DEFINE_TO_F32(name, ctype, expr)                                                           \
    static void to_##name(const uint8_t *restrict s, float *restrict d, size_t n)                  \
    {                                                                                              \
        FOR_EACH(i, n, {                                                                           \
            ctype v;                                                                               \
            memcpy(&v, s + i * sizeof(ctype), sizeof(ctype));                                      \
            d[i] = (expr);                                                                         \
        });                                                                                        \
    }

/* bfloat16 is the top half of a float32: widening is a shift (as
 * fa_st_bf16_to_f32, here inline so that the loop vectorises) */
static inline float bf16_widen(uint16_t h)
{
    uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

DEFINE_TO_F32(f16, uint16_t, fa_st_f16_to_f32(v))
DEFINE_TO_F32(bf16, uint16_t, bf16_widen(v))
DEFINE_TO_F32(f64, double, (float)v)
DEFINE_TO_F32(i32, int32_t, (float)v)
DEFINE_TO_F32(i64, int64_t, (float)v)
DEFINE_TO_F32(i16, int16_t, (float)v)
DEFINE_TO_F32(i8, int8_t, (float)v)
DEFINE_TO_F32(u8, uint8_t, (float)v)
DEFINE_TO_F32(bool, uint8_t, v != 0 ? 1.0f : 0.0f)

void fa_tensors_to_f32(fa_st_dtype dtype, const void *src, float *dst, size_t n)
{
    switch (dtype) {
    case FA_ST_F32: memmove(dst, src, n * 4); break;
    case FA_ST_F16: to_f16(src, dst, n); break;
    case FA_ST_BF16: to_bf16(src, dst, n); break;
    case FA_ST_F64: to_f64(src, dst, n); break;
    case FA_ST_I32: to_i32(src, dst, n); break;
    case FA_ST_I64: to_i64(src, dst, n); break;
    case FA_ST_I16: to_i16(src, dst, n); break;
    case FA_ST_I8: to_i8(src, dst, n); break;
    case FA_ST_U8: to_u8(src, dst, n); break;
    case FA_ST_BOOL: to_bool(src, dst, n); break;
    default:
        /* callers pass validated dtypes; NaN makes a slip visible */
        for (size_t i = 0; i < n; i++)
            dst[i] = NAN;
        break;
    }
}

/* x rounded to an integer, ties to even, as rintf in the default rounding
 * mode but inline: below 2^23, adding and taking away 2^23 rounds away the
 * fraction; from 2^23 up every float is an integer (and 0 is added).  NaN
 * stays NaN. */
static inline float round_even(float x)
{
    float a = fabsf(x), big = a >= 8388608.0f ? 0.0f : 8388608.0f;
    return copysignf((a + big) - big, x);
}

/* from_<name>(s, d, n): n floats to ctype: rounded, NaN -> 0, clamped to
 * [lo, top] where top is the largest float in the type's range, then
 * converted; past top (only for 32 and 64 bits, whose maximum is no
 * float) the maximum itself. */
#define DEFINE_FROM_F32_INT(name, ctype, lo, top, maxv)                                            \
    static void from_##name(const float *restrict s, uint8_t *restrict d, size_t n)                \
    {                                                                                              \
        FOR_EACH(i, n, {                                                                           \
            float r = round_even(s[i]), c = r == r ? r : 0.0f;                                     \
            c = c < (lo) ? (lo) : c;                                                               \
            c = c > (top) ? (top) : c;                                                             \
            ctype v = (ctype)c;                                                                    \
            v = r > (top) ? (maxv) : v;                                                            \
            memcpy(d + i * sizeof(ctype), &v, sizeof(ctype));                                      \
        });                                                                                        \
    }

/* 2147483520 = 2^31 - 2^7 and 2^63 - 2^39: the floats just below 2^31, 2^63 */
DEFINE_FROM_F32_INT(i32, int32_t, -2147483648.0f, 2147483520.0f, INT32_MAX)
DEFINE_FROM_F32_INT(i64, int64_t, -9223372036854775808.0f, 9223371487098961920.0f, INT64_MAX)
DEFINE_FROM_F32_INT(i16, int16_t, -32768.0f, 32767.0f, INT16_MAX)
DEFINE_FROM_F32_INT(i8, int8_t, -128.0f, 127.0f, INT8_MAX)
DEFINE_FROM_F32_INT(u8, uint8_t, 0.0f, 255.0f, UINT8_MAX)

#define DEFINE_FROM_F32(name, ctype, expr)                                                         \
    static void from_##name(const float *restrict s, uint8_t *restrict d, size_t n)                \
    {                                                                                              \
        FOR_EACH(i, n, {                                                                           \
            ctype v = (expr);                                                                      \
            memcpy(d + i * sizeof(ctype), &v, sizeof(ctype));                                      \
        });                                                                                        \
    }

DEFINE_FROM_F32(f16, uint16_t, fa_st_f32_to_f16(s[i]))
DEFINE_FROM_F32(bf16, uint16_t, fa_st_f32_to_bf16(s[i]))
DEFINE_FROM_F32(f64, double, (double)s[i])
DEFINE_FROM_F32(bool, uint8_t, s[i] != 0)

void fa_tensors_from_f32(fa_st_dtype dtype, const float *src, void *dst, size_t n)
{
    switch (dtype) {
    case FA_ST_F32: memmove(dst, src, n * 4); break;
    case FA_ST_F16: from_f16(src, dst, n); break;
    case FA_ST_BF16: from_bf16(src, dst, n); break;
    case FA_ST_F64: from_f64(src, dst, n); break;
    case FA_ST_I32: from_i32(src, dst, n); break;
    case FA_ST_I64: from_i64(src, dst, n); break;
    case FA_ST_I16: from_i16(src, dst, n); break;
    case FA_ST_I8: from_i8(src, dst, n); break;
    case FA_ST_U8: from_u8(src, dst, n); break;
    case FA_ST_BOOL: from_bool(src, dst, n); break;
    default: break; /* callers pass validated dtypes */
    }
}

/* ---------------------------------------------------------------------- */
/* Writing a model                                                          */
/* ---------------------------------------------------------------------- */

struct out_ctx {
    const fa_tensors_out *o;
    const fa_tensor *x;
    const fa_st_tensor *src; /* in base, when not federated */
};

struct fa_tensors_out {
    fa_st_view *views;
    struct out_ctx *ctx;
    size_t n;
    const float *fed;
    const fa_safetensors *base;
};

/* Elements [e0, e0 + k) of view c in its written dtype into dst. */
static int out_elems(const struct out_ctx *c, fa_st_dtype out_dtype, uint64_t e0, size_t k,
                     uint8_t *dst, fa_error *err)
{
    const fa_tensor *x = c->x;

    if (x->federated) {
        fa_tensors_from_f32(out_dtype, c->o->fed + x->fed_offset + e0, dst, k);
        return 0;
    }
    if (out_dtype == x->dtype)
        return fa_st_read_range(c->o->base, c->src, e0 * fa_st_dtype_size(x->dtype), dst,
                                k * fa_st_dtype_size(x->dtype), err);
    if ((uintptr_t)dst % _Alignof(float) == 0)
        return read_f32(c->o->base, c->src, e0, (float *)(void *)dst, k, err);
    /* a chunk that began inside an element: widen through aligned floats */
    for (size_t done = 0; done < k;) {
        float f[256];
        size_t kk = k - done < 256 ? k - done : 256;
        int rc = read_f32(c->o->base, c->src, e0 + done, f, kk, err);
        if (rc != 0)
            return rc;
        memcpy(dst + 4 * done, f, 4 * kk);
        done += kk;
    }
    return 0;
}

/* fa_st_view fill: whole elements straight into buf; an element cut by the
 * chunk's ends goes through a small bounce buffer. */
static int out_fill(void *ctx, const fa_st_view *v, uint64_t off, void *buf, size_t len,
                    fa_error *err)
{
    const struct out_ctx *c = ctx;
    size_t es = fa_st_dtype_size(v->dtype), k;
    uint8_t *b = buf;
    _Alignas(8) uint8_t tmp[8];
    int rc;

    if (off > c->x->numel * es || len > c->x->numel * es - off)
        return fa_errorf(err, FA_ERR_RANGE, "tensor '%s': bytes [%llu, %llu) asked of %llu",
                         c->x->name, (unsigned long long)off, (unsigned long long)(off + len),
                         (unsigned long long)(c->x->numel * es));
    if (len && off % es) {
        size_t skip = (size_t)(off % es);
        k = es - skip < len ? es - skip : len;
        if ((rc = out_elems(c, v->dtype, off / es, 1, tmp, err)) != 0)
            return rc;
        memcpy(b, tmp + skip, k);
        b += k;
        off += k;
        len -= k;
    }
    if ((k = len / es) > 0) {
        if ((rc = out_elems(c, v->dtype, off / es, k, b, err)) != 0)
            return rc;
        b += k * es;
        off += k * es;
        len -= k * es;
    }
    if (len) {
        if ((rc = out_elems(c, v->dtype, off / es, 1, tmp, err)) != 0)
            return rc;
        memcpy(b, tmp, len);
    }
    return 0;
}

void fa_tensors_out_del(fa_tensors_out *o)
{
    if (!o)
        return;
    free(o->views);
    free(o->ctx);
    free(o);
}

int fa_tensors_out_new(fa_tensors_out **out, const fa_tensors *t, const float *fed, size_t d,
                       const fa_safetensors *base, int as_f32, fa_error *err)
{
    const fa_st_tensor **map = NULL, *extra;
    fa_tensors_out *o = NULL;
    int rc = 0;

    *out = NULL;
    if (d != t->fed_numel || (d > 0 && !fed))
        return fa_errorf(err, FA_ERR_INVAL,
                         "model to write: %zu federated coordinates given%s, the table has %llu", d,
                         fed ? "" : " (and no vector)", (unsigned long long)t->fed_numel);
    if (base && (rc = map_st(t, base, &map, &extra, err)) != 0)
        return rc;
    o = calloc(1, sizeof(*o));
    if (!o || !(o->views = calloc(t->n + 1, sizeof(*o->views))) ||
        !(o->ctx = calloc(t->n + 1, sizeof(*o->ctx)))) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "model to write: out of memory");
        goto fail;
    }
    o->n = t->n;
    o->fed = fed;
    o->base = base;
    for (size_t i = 0; i < t->n; i++) {
        const fa_tensor *x = &t->e[i]->t;
        fa_st_view *v = &o->views[i];
        if (!x->federated) {
            if (!base) {
                rc = fa_errorf(err, FA_ERR_INVAL,
                               "model to write: tensor '%s' is not federated and no base model "
                               "was given to copy it from",
                               x->name);
                goto fail;
            }
            if ((rc = check_one(x, map[i], "base model", err)) != 0)
                goto fail;
        }
        o->ctx[i] = (struct out_ctx){o, x, x->federated ? NULL : map[i]};
        v->name = x->name;
        v->dtype =
            as_f32 && (x->federated || fa_tensors_dtype_is_float(x->dtype)) ? FA_ST_F32 : x->dtype;
        v->ndim = x->ndim;
        v->shape = x->shape;
        v->data = NULL;
        v->fill = out_fill;
        v->ctx = &o->ctx[i];
    }
    free(map);
    *out = o;
    return 0;
fail:
    free(map);
    fa_tensors_out_del(o);
    return rc;
}

const fa_st_view *fa_tensors_out_views(const fa_tensors_out *o)
{
    return o->views;
}
size_t fa_tensors_out_count(const fa_tensors_out *o)
{
    return o->n;
}

int fa_tensors_save(const char *path, unsigned mode, const fa_tensors *t, const float *fed,
                    size_t d, const fa_safetensors *base, int as_f32, const char *const *meta,
                    size_t n_meta, fa_error *err)
{
    fa_tensors_out *o = NULL;
    const char **pairs = NULL;
    char *json = NULL;
    size_t np = n_meta;
    int rc;

    if ((rc = fa_tensors_out_new(&o, t, fed, d, base, as_f32, err)) != 0)
        goto out;
    if (t->fed_count > 0 && (rc = fa_tensors_meta_encode(t, &json, err)) != 0)
        goto out;
    pairs = calloc(2 * (n_meta + 1), sizeof(*pairs));
    if (!pairs) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "%s: out of memory", path);
        goto out;
    }
    if (n_meta)
        memcpy(pairs, meta, 2 * n_meta * sizeof(*pairs));
    if (json) { /* after the caller's: a key set twice keeps the last value */
        pairs[2 * np] = FA_TENSORS_META_KEY;
        pairs[2 * np + 1] = json;
        np++;
    }
    rc = fa_st_save(path, mode, o->views, o->n, pairs, np, err);
out:
    free(pairs);
    free(json);
    fa_tensors_out_del(o);
    return rc;
}
