/* fa_safetensors.c - safetensors reader and streaming writer (see the header
 * for the format and the validation rules). */
#include "common/fa_safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fa_crc32c.h"
#include "common/fa_endian.h"
#include "common/fa_file.h"
#include "common/fa_json.h"
#include "common/fa_sha256.h"

/* Chunk size of fa_st_view fill callbacks. */
#define ST_FILL_CHUNK ((size_t)1 << 20)

/* ---------------------------------------------------------------------- */
/* dtypes                                                                  */
/* ---------------------------------------------------------------------- */

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    [FA_ST_F32] = {"F32", 4}, [FA_ST_F16] = {"F16", 2}, [FA_ST_BF16] = {"BF16", 2},
    [FA_ST_I32] = {"I32", 4}, [FA_ST_I64] = {"I64", 8}, [FA_ST_U8] = {"U8", 1},
    [FA_ST_BOOL] = {"BOOL", 1}, [FA_ST_F64] = {"F64", 8}, [FA_ST_I8] = {"I8", 1},
    [FA_ST_I16] = {"I16", 2},
};
_Static_assert(sizeof(dtypes) / sizeof(dtypes[0]) == FA_ST_NDTYPES, "one name per dtype");
#define N_DTYPES (sizeof(dtypes) / sizeof(dtypes[0]))

const char *fa_st_dtype_name(fa_st_dtype dtype)
{
    return (unsigned)dtype < N_DTYPES ? dtypes[dtype].name : NULL;
}

size_t fa_st_dtype_size(fa_st_dtype dtype)
{
    return (unsigned)dtype < N_DTYPES ? dtypes[dtype].size : 0;
}

int fa_st_dtype_parse(const char *name, fa_st_dtype *out)
{
    for (unsigned i = 0; i < N_DTYPES; i++)
        if (strcmp(name, dtypes[i].name) == 0) {
            *out = (fa_st_dtype)i;
            return 0;
        }
    return FA_ERR_UNSUPPORTED;
}

/* IEEE 754 binary16 <-> binary32.  Subnormals, infinities and NaN kept. */
float fa_st_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu, bits;
    float f;

    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else {
        /* subnormal: normalise */
        exp = 113;
        while (!(man & 0x400u)) {
            man <<= 1;
            exp--;
        }
        bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t fa_st_f32_to_f16(float f)
{
    uint32_t x, sign, exp, man;
    memcpy(&x, &f, 4);
    sign = (x >> 16) & 0x8000u;
    exp = (x >> 23) & 0xffu;
    man = x & 0x7fffffu;

    if (exp == 0xff) /* inf / nan (keep a quiet nan) */
        return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0));
    int e = (int)exp - 127 + 15;
    if (e >= 0x1f)
        return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10)
            return (uint16_t)sign;
        /* subnormal result: shift the full mantissa, round to nearest even */
        man |= 0x800000u;
        unsigned shift = (unsigned)(14 - e);
        uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t h = sign | ((uint32_t)e << 10) | (man >> 13), rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
        h++; /* may carry into the exponent, which is the correct rounding */
    return (uint16_t)h;
}

float fa_st_bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t fa_st_f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu))
        return (uint16_t)((x >> 16) | 0x40u); /* quiet nan */
    x += 0x7fffu + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

/* ---------------------------------------------------------------------- */
/* Reader                                                                  */
/* ---------------------------------------------------------------------- */

struct fa_safetensors {
    fa_st_tensor *tensors; /* sorted by offset */
    size_t n;
    char **meta;           /* 2 * n_meta strings: key, value */
    size_t n_meta;
    uint64_t data_offset, data_len;
    const uint8_t *buf;    /* in-memory source, or NULL */
    int fd;                /* file source, or -1 */
    char what[256];
};

void fa_st_del(fa_safetensors *st)
{
    if (!st)
        return;
    for (size_t i = 0; i < st->n; i++)
        free((char *)st->tensors[i].name);
    free(st->tensors);
    for (size_t i = 0; i < 2 * st->n_meta; i++)
        free(st->meta[i]);
    free(st->meta);
    if (st->fd >= 0)
        close(st->fd);
    free(st);
}

size_t fa_st_count(const fa_safetensors *st) { return st->n; }

const fa_st_tensor *fa_st_at(const fa_safetensors *st, size_t i)
{
    return i < st->n ? &st->tensors[i] : NULL;
}

const fa_st_tensor *fa_st_find(const fa_safetensors *st, const char *name)
{
    for (size_t i = 0; i < st->n; i++)
        if (strcmp(st->tensors[i].name, name) == 0)
            return &st->tensors[i];
    return NULL;
}

size_t fa_st_metadata_count(const fa_safetensors *st) { return st->n_meta; }

void fa_st_metadata_at(const fa_safetensors *st, size_t i, const char **key, const char **value)
{
    *key = st->meta[2 * i];
    *value = st->meta[2 * i + 1];
}

const char *fa_st_metadata_get(const fa_safetensors *st, const char *key)
{
    for (size_t i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta[2 * i], key) == 0)
            return st->meta[2 * i + 1];
    return NULL;
}

uint64_t fa_st_data_offset(const fa_safetensors *st) { return st->data_offset; }
uint64_t fa_st_data_len(const fa_safetensors *st) { return st->data_len; }

const uint8_t *fa_st_data(const fa_safetensors *st, const fa_st_tensor *t)
{
    return st->buf ? st->buf + st->data_offset + t->begin : NULL;
}

/* The code point of the UTF-8 sequence at s (*len its bytes), or -1 when
 * it is not well-formed (overlong, surrogate, beyond U+10FFFF, cut off). */
static long utf8_next(const unsigned char *s, size_t *len)
{
    unsigned char c = s[0];
    long cp, min;
    size_t n;

    if (c < 0x80) {
        *len = 1;
        return c;
    }
    if (c >= 0xc2 && c <= 0xdf)
        n = 2, cp = c & 0x1f, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef)
        n = 3, cp = c & 0x0f, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 4, cp = c & 0x07, min = 0x10000;
    else
        return -1;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return -1;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return -1;
    *len = n;
    return cp;
}

/* Whether a terminal shows code point cp as itself: not a control (C0,
 * DEL, C1) and not one of the invisible characters that reorder or break
 * the text around it (bidirectional controls, line and paragraph
 * separators, zero-width marks). */
static int printable_cp(long cp)
{
    return !(cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || (cp >= 0x200b && cp <= 0x200f) ||
             (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2060 && cp <= 0x2069) || cp == 0xfeff);
}

int fa_st_name_check(const char *name, size_t *bad_at)
{
    const unsigned char *s = (const unsigned char *)name;
    size_t i = 0, n = strlen(name);

    *bad_at = 0;
    if (n == 0 || n > FA_ST_MAX_NAME)
        return FA_ERR_RANGE;
    while (i < n) {
        size_t len;
        long cp = utf8_next(s + i, &len);
        if (cp < 0 || !printable_cp(cp)) {
            *bad_at = i;
            return FA_ERR_PARSE;
        }
        i += len;
    }
    return 0;
}

char *fa_st_escape(char *out, size_t cap, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0;

    if (cap == 0)
        return out;
    while (*p) {
        size_t len = 1;
        long cp = utf8_next(p, &len);
        char esc[8];
        size_t k;
        if (cp >= 0 && printable_cp(cp) && cp != '\\') {
            if (o + len >= cap)
                break;
            memcpy(out + o, p, len);
            o += len;
            p += len;
            continue;
        }
        if (cp < 0)
            len = 1; /* one byte at a time through a malformed sequence */
        for (size_t b = 0; b < len; b++) {
            if (cp == '\\')
                k = (size_t)snprintf(esc, sizeof(esc), "\\\\");
            else
                k = (size_t)snprintf(esc, sizeof(esc), "\\x%02x", p[b]);
            if (o + k >= cap)
                goto done;
            memcpy(out + o, esc, k);
            o += k;
        }
        p += len;
    }
done:
    out[o] = '\0';
    return out;
}

/* Reads a non-negative JSON integer. */
static int json_u64(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int cmp_offsets(const void *a, const void *b)
{
    const fa_st_tensor *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Parses and checks one tensor entry of the header. */
static int parse_tensor(fa_safetensors *st, const char *name, json_t *v, fa_st_tensor *t,
                        fa_error *err)
{
    const char *w = st->what, *key;
    json_t *dtype = NULL, *shape = NULL, *offs = NULL, *x;
    size_t esize, i;
    uint64_t numel = 1, bytes;

    if (strlen(name) == 0 || strlen(name) > FA_ST_MAX_NAME)
        return fa_errorf(err, FA_ERR_PARSE, "%s: tensor name of %zu bytes (must be 1..%u)", w,
                         strlen(name), FA_ST_MAX_NAME);
    if (fa_st_name_check(name, &i) != 0) {
        char shown[200];
        return fa_errorf(err, FA_ERR_PARSE,
                         "%s: tensor name '%s' has a control or invisible character at byte %zu "
                         "(a name must be printable UTF-8)",
                         w, fa_st_escape(shown, sizeof(shown), name), i);
    }
    if (!json_is_object(v))
        return fa_errorf(err, FA_ERR_PARSE, "%s: tensor '%s': entry is not a JSON object", w, name);
    json_object_foreach(v, key, x) {
        if (strcmp(key, "dtype") == 0)
            dtype = x;
        else if (strcmp(key, "shape") == 0)
            shape = x;
        else if (strcmp(key, "data_offsets") == 0)
            offs = x;
        else
            return fa_errorf(err, FA_ERR_PARSE, "%s: tensor '%s': unknown field '%s'", w, name, key);
    }
    if (!dtype || !shape || !offs)
        return fa_errorf(err, FA_ERR_PARSE, "%s: tensor '%s': missing '%s'", w, name,
                         !dtype ? "dtype" : !shape ? "shape" : "data_offsets");
    if (!json_is_string(dtype))
        return fa_errorf(err, FA_ERR_PARSE, "%s: tensor '%s': dtype is not a string", w, name);
    if (fa_st_dtype_parse(json_string_value(dtype), &t->dtype) != 0)
        return fa_errorf(err, FA_ERR_UNSUPPORTED,
                         "%s: tensor '%s': unsupported dtype '%s' (supported: F32, F16, BF16, I32, "
                         "I64, U8)",
                         w, name, json_string_value(dtype));
    esize = fa_st_dtype_size(t->dtype);

    if (!json_is_array(shape))
        return fa_errorf(err, FA_ERR_PARSE, "%s: tensor '%s': shape is not an array", w, name);
    if (json_array_size(shape) > FA_ST_MAX_DIMS)
        return fa_errorf(err, FA_ERR_PARSE, "%s: tensor '%s': %zu dimensions (at most %d)", w,
                         name, json_array_size(shape), FA_ST_MAX_DIMS);
    t->ndim = (unsigned)json_array_size(shape);
    json_array_foreach(shape, i, x) {
        if (json_u64(x, &t->shape[i]) != 0)
            return fa_errorf(err, FA_ERR_PARSE,
                             "%s: tensor '%s': shape[%zu] is not a non-negative integer", w, name,
                             i);
        if (t->shape[i] != 0 && numel > UINT64_MAX / t->shape[i])
            return fa_errorf(err, FA_ERR_PARSE, "%s: tensor '%s': shape overflows", w, name);
        numel *= t->shape[i];
    }
    if (numel > UINT64_MAX / esize)
        return fa_errorf(err, FA_ERR_PARSE, "%s: tensor '%s': shape overflows", w, name);
    t->numel = numel;
    bytes = numel * esize;

    if (!json_is_array(offs) || json_array_size(offs) != 2 ||
        json_u64(json_array_get(offs, 0), &t->begin) != 0 ||
        json_u64(json_array_get(offs, 1), &t->end) != 0)
        return fa_errorf(err, FA_ERR_PARSE,
                         "%s: tensor '%s': data_offsets is not [begin, end] of non-negative "
                         "integers",
                         w, name);
    if (t->end < t->begin)
        return fa_errorf(err, FA_ERR_PARSE,
                         "%s: tensor '%s': data_offsets [%llu, %llu] end before begin", w, name,
                         (unsigned long long)t->begin, (unsigned long long)t->end);
    if (t->end - t->begin != bytes)
        return fa_errorf(err, FA_ERR_PARSE,
                         "%s: tensor '%s': %s shape of %llu elements needs %llu bytes but "
                         "data_offsets [%llu, %llu] hold %llu",
                         w, name, fa_st_dtype_name(t->dtype), (unsigned long long)numel,
                         (unsigned long long)bytes, (unsigned long long)t->begin,
                         (unsigned long long)t->end, (unsigned long long)(t->end - t->begin));
    if (t->end > st->data_len)
        return fa_errorf(err, FA_ERR_PARSE,
                         "%s: tensor '%s': data_offsets [%llu, %llu] run past the end of the data "
                         "(%llu bytes)",
                         w, name, (unsigned long long)t->begin, (unsigned long long)t->end,
                         (unsigned long long)st->data_len);
    t->name = strdup(name);
    return t->name ? 0 : fa_errorf(err, FA_ERR_NOMEM, "%s: out of memory", w);
}

static int parse_metadata(fa_safetensors *st, json_t *v, fa_error *err)
{
    const char *key;
    json_t *x;
    size_t n = json_object_size(v), i = 0;

    if (!json_is_object(v))
        return fa_errorf(err, FA_ERR_PARSE, "%s: __metadata__ is not a JSON object", st->what);
    st->meta = calloc(2 * n + 1, sizeof(char *));
    if (!st->meta)
        return fa_errorf(err, FA_ERR_NOMEM, "%s: out of memory", st->what);
    json_object_foreach(v, key, x) {
        if (!json_is_string(x))
            return fa_errorf(err, FA_ERR_PARSE, "%s: __metadata__ '%s': value is not a string",
                             st->what, key);
        if (strlen(key) > FA_ST_MAX_NAME)
            return fa_errorf(err, FA_ERR_PARSE, "%s: __metadata__ key of %zu bytes (at most %u)",
                             st->what, strlen(key), FA_ST_MAX_NAME);
        st->meta[2 * i] = strdup(key);
        st->meta[2 * i + 1] = strdup(json_string_value(x));
        st->n_meta = ++i;
        if (!st->meta[2 * i - 2] || !st->meta[2 * i - 1])
            return fa_errorf(err, FA_ERR_NOMEM, "%s: out of memory", st->what);
    }
    return 0;
}

/* Parses the JSON header into st (whose what, data_len are set). */
static int parse_json(fa_safetensors *st, const uint8_t *hdr, size_t hdr_len, fa_error *err)
{
    json_error_t jerr;
    json_t *root, *v;
    const char *key;
    int rc = 0;

    if (hdr_len == 0 || hdr[0] != '{')
        return fa_errorf(err, FA_ERR_PARSE, "%s: header does not start with '{'", st->what);
    root = json_loadb((const char *)hdr, hdr_len, JSON_REJECT_DUPLICATES | JSON_PRESERVE_ORDER,
                      &jerr);
    if (!root && fa_json_out_of_memory(&jerr))
        return fa_errorf(err, FA_ERR_NOMEM, "%s: out of memory reading the header", st->what);
    if (!root)
        return fa_errorf(err, FA_ERR_PARSE, "%s: header is not valid JSON: %s (line %d, column %d)",
                         st->what, jerr.text, jerr.line, jerr.column);
    if (!json_is_object(root)) {
        rc = fa_errorf(err, FA_ERR_PARSE, "%s: header is not a JSON object", st->what);
        goto out;
    }
    st->tensors = calloc(json_object_size(root) + 1, sizeof(fa_st_tensor));
    if (!st->tensors) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "%s: out of memory", st->what);
        goto out;
    }
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0)
            rc = parse_metadata(st, v, err);
        else if ((rc = parse_tensor(st, key, v, &st->tensors[st->n], err)) == 0)
            st->n++;
        if (rc != 0)
            goto out;
    }

    /* The tensors, in offset order, must tile the data section exactly. */
    qsort(st->tensors, st->n, sizeof(fa_st_tensor), cmp_offsets);
    uint64_t pos = 0;
    for (size_t i = 0; i < st->n; i++) {
        const fa_st_tensor *t = &st->tensors[i];
        if (t->begin < pos) {
            rc = fa_errorf(err, FA_ERR_PARSE,
                           "%s: tensor '%s': data_offsets [%llu, %llu] overlap tensor '%s'",
                           st->what, t->name, (unsigned long long)t->begin,
                           (unsigned long long)t->end, st->tensors[i - 1].name);
            goto out;
        }
        if (t->begin > pos) {
            rc = fa_errorf(err, FA_ERR_PARSE,
                           "%s: tensor '%s': data_offsets [%llu, %llu] leave a gap of %llu bytes "
                           "after %s",
                           st->what, t->name, (unsigned long long)t->begin,
                           (unsigned long long)t->end, (unsigned long long)(t->begin - pos),
                           i ? st->tensors[i - 1].name : "the start of the data");
            goto out;
        }
        pos = t->end;
    }
    if (pos != st->data_len)
        rc = fa_errorf(err, FA_ERR_PARSE,
                       "%s: the tensors cover %llu bytes but the data section has %llu "
                       "(truncated file or trailing garbage)",
                       st->what, (unsigned long long)pos, (unsigned long long)st->data_len);
out:
    json_decref(root);
    return rc;
}

static fa_safetensors *st_alloc(const char *what)
{
    fa_safetensors *st = calloc(1, sizeof(*st));
    if (st) {
        st->fd = -1;
        snprintf(st->what, sizeof(st->what), "%s", what ? what : "safetensors");
    }
    return st;
}

int fa_st_parse_header(fa_safetensors **out, const uint8_t *hdr, size_t hdr_len,
                       uint64_t data_len, const char *what, fa_error *err)
{
    fa_safetensors *st;
    int rc;

    *out = NULL;
    if (hdr_len > FA_ST_MAX_HEADER)
        return fa_errorf(err, FA_ERR_TOOBIG, "%s: header of %zu bytes exceeds the limit of %u",
                         what ? what : "safetensors", hdr_len, FA_ST_MAX_HEADER);
    st = st_alloc(what);
    if (!st)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    st->data_offset = 8 + (uint64_t)hdr_len;
    st->data_len = data_len;
    rc = parse_json(st, hdr, hdr_len, err);
    if (rc != 0) {
        fa_st_del(st);
        return rc;
    }
    *out = st;
    return 0;
}

const char *fa_st_foreign_format(const uint8_t *p, size_t n)
{
    /* A safetensors header is a JSON object right after its 8-byte
     * length: with a '{' there the length bytes are one, whatever they
     * look like. */
    if (n >= 9 && p[8] == '{')
        return NULL;
    if (n >= 2 && p[0] == 0x80 && p[1] >= 2 && p[1] <= 5)
        return "a Python pickle (torch.save's legacy format, or pickle.dump)";
    if (n >= 4 && p[0] == 'P' && p[1] == 'K' &&
        ((p[2] == 3 && p[3] == 4) || (p[2] == 5 && p[3] == 6)))
        return "a zip archive (torch.save's format since PyTorch 1.6 is a zip holding a pickle; "
               "also TorchScript and .npz)";
    if (n >= 6 && !memcmp(p, "\x93NUMPY", 6))
        return "a NumPy .npy array";
    if (n >= 8 && !memcmp(p, "\x89HDF\r\n\x1a\n", 8))
        return "an HDF5 file (a Keras model?)";
    if (n >= 4 && !memcmp(p, "GGUF", 4))
        return "a GGUF file";
    if (n >= 2 && p[0] == 0x1f && p[1] == 0x8b)
        return "a gzip stream (decompress it first)";
    return NULL;
}

/* Checks the 8-byte prefix (of the avail >= 8 first bytes at p) against
 * the total size; returns N. */
static int check_prefix(const uint8_t *p, size_t avail, uint64_t total, const char *what,
                        uint64_t *n, fa_error *err)
{
    const char *foreign = fa_st_foreign_format(p, avail);

    if (foreign)
        return fa_errorf(err, FA_ERR_PARSE,
                         "%s is %s, not safetensors: fedagg reads model files as safetensors "
                         "only (loading a pickle can run code); save the state_dict with "
                         "safetensors.torch.save_file (python/fedagg does)",
                         what, foreign);
    *n = fa_le_get_u64(p);
    if (*n > FA_ST_MAX_HEADER)
        return fa_errorf(err, FA_ERR_TOOBIG,
                         "%s: header length %llu exceeds the limit of %u bytes (not a safetensors "
                         "file?)",
                         what, (unsigned long long)*n, FA_ST_MAX_HEADER);
    if (*n > total - 8)
        return fa_errorf(err, FA_ERR_PARSE,
                         "%s: header length %llu runs past the end of the file (%llu bytes)", what,
                         (unsigned long long)*n, (unsigned long long)total);
    return 0;
}

static int pread_full(int fd, void *dst, size_t len, uint64_t off);

/* The first byte of BOOL tensor t other than 0 and 1 in p[0..n) (p holds
 * t's bytes from offset off), as an error naming it. */
static int bool_bytes(const fa_safetensors *st, const fa_st_tensor *t, const uint8_t *p, size_t n,
                      uint64_t off, fa_error *err)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] > 1)
            return fa_errorf(err, FA_ERR_PARSE,
                             "%s: tensor '%s' is BOOL but its element %llu is %u (only 0 and 1 "
                             "are booleans)",
                             st->what, t->name, (unsigned long long)(off + i), p[i]);
    return 0;
}

/* Every BOOL tensor's bytes are 0 or 1 (read from the file in pieces when
 * st is not in memory). */
static int check_bools(const fa_safetensors *st, fa_error *err)
{
    uint8_t buf[1 << 16];
    int rc = 0;

    for (size_t i = 0; i < st->n && rc == 0; i++) {
        const fa_st_tensor *t = &st->tensors[i];
        if (t->dtype != FA_ST_BOOL)
            continue;
        if (st->buf) {
            rc = bool_bytes(st, t, st->buf + st->data_offset + t->begin,
                            (size_t)(t->end - t->begin), 0, err);
            continue;
        }
        for (uint64_t off = 0; off < t->end - t->begin && rc == 0; off += sizeof(buf)) {
            size_t k = t->end - t->begin - off < sizeof(buf) ? (size_t)(t->end - t->begin - off)
                                                             : sizeof(buf);
            int e = pread_full(st->fd, buf, k, st->data_offset + t->begin + off);
            if (e != 0)
                rc = fa_errorf(err, FA_ERR_IO, "%s: tensor '%s': read: %s", st->what, t->name,
                               strerror(-e));
            else
                rc = bool_bytes(st, t, buf, k, off, err);
        }
    }
    return rc;
}

int fa_st_parse(fa_safetensors **out, const uint8_t *buf, size_t len, const char *what,
                fa_error *err)
{
    uint64_t n;
    int rc;

    *out = NULL;
    what = what ? what : "safetensors";
    if (len < 8)
        return fa_errorf(err, FA_ERR_PARSE, "%s: %zu bytes, too short for a safetensors file",
                         what, len);
    if ((rc = check_prefix(buf, len < 9 ? len : 9, len, what, &n, err)) != 0)
        return rc;
    rc = fa_st_parse_header(out, buf + 8, (size_t)n, len - 8 - n, what, err);
    if (rc == 0)
        (*out)->buf = buf;
    if (rc == 0 && (rc = check_bools(*out, err)) != 0) {
        fa_st_del(*out);
        *out = NULL;
    }
    return rc;
}

static int pread_full(int fd, void *dst, size_t len, uint64_t off)
{
    uint8_t *p = dst;
    while (len > 0) {
        ssize_t r = pread(fd, p, len, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r < 0 ? -errno : -EIO;
        p += r;
        len -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

int fa_st_open(fa_safetensors **out, const char *path, fa_error *err)
{
    uint8_t prefix[9], *hdr = NULL;
    struct stat sb;
    uint64_t n;
    int fd, rc, e;

    *out = NULL;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        e = errno;
        return fa_errorf(err, e == ENOENT ? FA_ERR_NOTFOUND : FA_ERR_IO, "%s: %s", path,
                         strerror(e));
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        rc = fa_errorf(err, FA_ERR_IO, "%s: not a regular file", path);
        goto fail;
    }
    if (sb.st_size < 8) {
        rc = fa_errorf(err, FA_ERR_PARSE, "%s: %lld bytes, too short for a safetensors file",
                       path, (long long)sb.st_size);
        goto fail;
    }
    if ((e = pread_full(fd, prefix, sb.st_size > 8 ? 9 : 8, 0)) != 0) {
        rc = fa_errorf(err, FA_ERR_IO, "%s: read: %s", path, strerror(-e));
        goto fail;
    }
    if ((rc = check_prefix(prefix, sb.st_size > 8 ? 9 : 8, (uint64_t)sb.st_size, path, &n, err)) !=
        0)
        goto fail;
    hdr = malloc(n ? n : 1);
    if (!hdr) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "%s: out of memory for a header of %llu bytes", path,
                       (unsigned long long)n);
        goto fail;
    }
    if ((e = pread_full(fd, hdr, n, 8)) != 0) {
        rc = fa_errorf(err, FA_ERR_IO, "%s: read: %s", path, strerror(-e));
        goto fail;
    }
    rc = fa_st_parse_header(out, hdr, n, (uint64_t)sb.st_size - 8 - n, path, err);
    if (rc != 0)
        goto fail;
    (*out)->fd = fd;
    free(hdr);
    if ((rc = check_bools(*out, err)) != 0) {
        fa_st_del(*out); /* closes fd */
        *out = NULL;
    }
    return rc;
fail:
    free(hdr);
    close(fd);
    return rc;
}

int fa_st_read(const fa_safetensors *st, const fa_st_tensor *t, void *dst, size_t dst_len,
               fa_error *err)
{
    uint64_t len = t->end - t->begin;
    int e;

    if (len > dst_len)
        return fa_errorf(err, FA_ERR_INVAL, "%s: tensor '%s' has %llu bytes, buffer holds %zu",
                         st->what, t->name, (unsigned long long)len, dst_len);
    if (st->buf) {
        memcpy(dst, st->buf + st->data_offset + t->begin, (size_t)len);
        return 0;
    }
    if (st->fd < 0)
        return fa_errorf(err, FA_ERR_STATE, "%s: header only, no tensor data to read", st->what);
    if ((e = pread_full(st->fd, dst, (size_t)len, st->data_offset + t->begin)) != 0)
        return fa_errorf(err, FA_ERR_IO, "%s: tensor '%s': read: %s%s", st->what, t->name,
                         strerror(-e), e == -EIO ? " (file shrank while open?)" : "");
    return 0;
}

int fa_st_read_range(const fa_safetensors *st, const fa_st_tensor *t, uint64_t off, void *dst,
                     size_t len, fa_error *err)
{
    uint64_t size = t->end - t->begin;
    int e;

    if (off > size || len > size - off)
        return fa_errorf(err, FA_ERR_INVAL,
                         "%s: tensor '%s': bytes [%llu, %llu) run past its %llu bytes", st->what,
                         t->name, (unsigned long long)off, (unsigned long long)off + len,
                         (unsigned long long)size);
    if (len == 0)
        return 0;
    if (st->buf) {
        memcpy(dst, st->buf + st->data_offset + t->begin + off, len);
        return 0;
    }
    if (st->fd < 0)
        return fa_errorf(err, FA_ERR_STATE, "%s: header only, no tensor data to read", st->what);
    if ((e = pread_full(st->fd, dst, len, st->data_offset + t->begin + off)) != 0)
        return fa_errorf(err, FA_ERR_IO, "%s: tensor '%s': read of bytes [%llu, %llu): %s%s",
                         st->what, t->name, (unsigned long long)off, (unsigned long long)off + len,
                         strerror(-e), e == -EIO ? " (file shrank while open?)" : "");
    return 0;
}

int fa_st_read_f32(const fa_safetensors *st, const fa_st_tensor *t, float *dst, size_t n,
                   fa_error *err)
{
    int rc;

    if (n != t->numel)
        return fa_errorf(err, FA_ERR_INVAL, "%s: tensor '%s' has %llu elements, expected %zu",
                         st->what, t->name, (unsigned long long)t->numel, n);
    if (t->dtype == FA_ST_F32)
        return fa_st_read(st, t, dst, n * sizeof(float), err);
    if (t->dtype != FA_ST_F16 && t->dtype != FA_ST_BF16)
        return fa_errorf(err, FA_ERR_INVAL,
                         "%s: tensor '%s' has dtype %s, expected a float type (F32, F16, BF16)",
                         st->what, t->name, fa_st_dtype_name(t->dtype));
    /* Read the 16-bit values into the upper half of dst, widen in place
     * front to back (element i is read from byte 2n + 2i >= 4i). */
    uint8_t *half = (uint8_t *)dst + 2 * n;
    if ((rc = fa_st_read(st, t, half, 2 * n, err)) != 0)
        return rc;
    for (size_t i = 0; i < n; i++) {
        uint16_t h = (uint16_t)(half[2 * i] | (half[2 * i + 1] << 8));
        dst[i] = t->dtype == FA_ST_F16 ? fa_st_f16_to_f32(h) : fa_st_bf16_to_f32(h);
    }
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Writer                                                                  */
/* ---------------------------------------------------------------------- */

struct wtensor {
    char *name;
    fa_st_dtype dtype;
    unsigned ndim;
    uint64_t shape[FA_ST_MAX_DIMS];
    uint64_t bytes;
    uint64_t start; /* where its bytes begin in the data section */
    uint64_t put;   /* bytes written so far, from its start */
};

enum { W_ADDING, W_HEADER, W_OPEN, W_DONE };

struct fa_st_writer {
    struct wtensor *t;
    size_t n, cap;
    json_t *meta;    /* object, insertion order */
    uint8_t *header; /* prefix + JSON + padding */
    size_t header_len;
    uint64_t data_len, written;
    size_t next; /* the first tensor fa_st_writer_write has not filled */
    fa_atomic_file *file;
    int state;
    /* fa_st_writer_hash_sha256 or _crc32c: the file's digest, in file
     * order.  Bytes are hashed as written while they continue what was
     * hashed; bytes written ahead (a later tensor, by fa_st_writer_put) are
     * read back from the file when the hash reaches their tensor. */
    int hashing, hashed_all; /* 0 or HASH_SHA256 / HASH_CRC32C: hashing, then what hashed all */
    fa_sha256_ctx sha;
    uint32_t crc;
    size_t frontier; /* the tensor being hashed: every earlier one is */
    uint8_t *rbuf;   /* ST_FILL_CHUNK, for reading back */
    uint8_t digest[32];
};

enum { HASH_SHA256 = 1, HASH_CRC32C = 2 };

static void hash_update(fa_st_writer *w, const void *data, size_t len)
{
    if (w->hashing == HASH_CRC32C)
        w->crc = fa_crc32c(w->crc, data, len);
    else
        (void)fa_sha256_update(&w->sha, data, len); /* sticky: final reports */
}

int fa_st_writer_new(fa_st_writer **out, fa_error *err)
{
    fa_st_writer *w = calloc(1, sizeof(*w));
    *out = NULL;
    if (!w || !(w->meta = json_object())) {
        free(w);
        return fa_errorf(err, FA_ERR_NOMEM, "safetensors writer: out of memory");
    }
    *out = w;
    return 0;
}

void fa_st_writer_del(fa_st_writer *w)
{
    if (!w)
        return;
    fa_atomic_file_abort(w->file);
    if (w->hashing == HASH_SHA256)
        fa_sha256_free(&w->sha);
    free(w->rbuf);
    for (size_t i = 0; i < w->n; i++)
        free(w->t[i].name);
    free(w->t);
    json_decref(w->meta);
    free(w->header);
    free(w);
}

int fa_st_writer_add(fa_st_writer *w, const char *name, fa_st_dtype dtype, unsigned ndim,
                     const uint64_t *shape, fa_error *err)
{
    struct wtensor *t;
    uint64_t numel = 1;
    size_t esize = fa_st_dtype_size(dtype), bad;

    if (w->state != W_ADDING)
        return fa_errorf(err, FA_ERR_STATE, "safetensors writer: tensor '%s' added after the header",
                         name);
    if (!name || fa_st_name_check(name, &bad) != 0 || strcmp(name, "__metadata__") == 0) {
        char shown[200];
        return fa_errorf(err, FA_ERR_INVAL,
                         "safetensors writer: invalid tensor name '%s' (1..%u bytes of printable "
                         "UTF-8)",
                         name ? fa_st_escape(shown, sizeof(shown), name) : "(null)",
                         FA_ST_MAX_NAME);
    }
    if (esize == 0)
        return fa_errorf(err, FA_ERR_INVAL, "safetensors writer: tensor '%s': unknown dtype %d",
                         name, (int)dtype);
    if (ndim > FA_ST_MAX_DIMS)
        return fa_errorf(err, FA_ERR_INVAL, "safetensors writer: tensor '%s': %u dimensions (at "
                         "most %d)", name, ndim, FA_ST_MAX_DIMS);
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return fa_errorf(err, FA_ERR_INVAL, "safetensors writer: duplicate tensor '%s'", name);
    for (unsigned i = 0; i < ndim; i++) {
        if (shape[i] > (uint64_t)INT64_MAX || (shape[i] != 0 && numel > UINT64_MAX / shape[i]))
            return fa_errorf(err, FA_ERR_INVAL, "safetensors writer: tensor '%s': shape overflows",
                             name);
        numel *= shape[i];
    }
    if (numel > (UINT64_MAX >> 4) / esize || w->data_len + numel * esize < w->data_len)
        return fa_errorf(err, FA_ERR_INVAL, "safetensors writer: tensor '%s': size overflows",
                         name);
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 16;
        struct wtensor *nt = realloc(w->t, cap * sizeof(*nt));
        if (!nt)
            return fa_errorf(err, FA_ERR_NOMEM, "safetensors writer: out of memory");
        w->t = nt;
        w->cap = cap;
    }
    t = &w->t[w->n];
    memset(t, 0, sizeof(*t));
    if (!(t->name = strdup(name)))
        return fa_errorf(err, FA_ERR_NOMEM, "safetensors writer: out of memory");
    t->dtype = dtype;
    t->ndim = ndim;
    if (ndim)
        memcpy(t->shape, shape, ndim * sizeof(uint64_t));
    t->bytes = numel * esize;
    t->start = w->data_len;
    w->data_len += t->bytes;
    w->n++;
    return 0;
}

int fa_st_writer_metadata(fa_st_writer *w, const char *key, const char *value, fa_error *err)
{
    json_t *s;

    if (w->state != W_ADDING)
        return fa_errorf(err, FA_ERR_STATE, "safetensors writer: metadata '%s' after the header",
                         key);
    if (!key || !value || strlen(key) > FA_ST_MAX_NAME)
        return fa_errorf(err, FA_ERR_INVAL, "safetensors writer: invalid metadata key");
    if (!fa_json_utf8_valid(key))
        return fa_errorf(err, FA_ERR_INVAL,
                         "safetensors writer: metadata key '%s' is not valid UTF-8", key);
    if (!fa_json_utf8_valid(value))
        return fa_errorf(err, FA_ERR_INVAL,
                         "safetensors writer: metadata '%s': value is not valid UTF-8", key);
    if (!(s = json_string(value)) || json_object_set_new(w->meta, key, s) != 0)
        return fa_errorf(err, FA_ERR_NOMEM, "safetensors writer: out of memory");
    return 0;
}

static int build_header(fa_st_writer *w, fa_error *err)
{
    json_t *root = json_object(), *e;
    char *text = NULL;
    uint64_t off = 0;
    size_t len, padded;
    int rc = 0;

    if (!root)
        return fa_errorf(err, FA_ERR_NOMEM, "safetensors writer: out of memory");
    if (json_object_size(w->meta) > 0 && json_object_set(root, "__metadata__", w->meta) != 0)
        goto nomem;
    for (size_t i = 0; i < w->n; i++) {
        const struct wtensor *t = &w->t[i];
        json_t *shape = json_array();
        /* every name is valid UTF-8 (fa_st_writer_add): a failure is memory */
        if (!shape || !(e = json_object()) || json_object_set_new(root, t->name, e) != 0) {
            json_decref(shape);
            goto nomem;
        }
        if (json_object_set_new(e, "shape", shape) != 0)
            goto nomem;
        for (unsigned k = 0; k < t->ndim; k++)
            if (json_array_append_new(shape, json_integer((json_int_t)t->shape[k])) != 0)
                goto nomem;
        if (json_object_set_new(e, "dtype", json_string(fa_st_dtype_name(t->dtype))) != 0 ||
            json_object_set_new(e, "data_offsets",
                                json_pack("[II]", (json_int_t)off, (json_int_t)(off + t->bytes))) !=
                0)
            goto nomem;
        off += t->bytes;
    }
    text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!text)
        goto nomem;
    len = strlen(text);
    padded = (len + 7) & ~(size_t)7; /* 8 + padded is a multiple of 8 */
    if (padded > FA_ST_MAX_HEADER) {
        rc = fa_errorf(err, FA_ERR_TOOBIG, "safetensors writer: header of %zu bytes exceeds %u",
                       padded, FA_ST_MAX_HEADER);
        goto out;
    }
    w->header = malloc(8 + padded);
    if (!w->header)
        goto nomem;
    for (int i = 0; i < 8; i++)
        w->header[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    memcpy(w->header + 8, text, len);
    memset(w->header + 8 + len, ' ', padded - len);
    w->header_len = 8 + padded;
    w->state = W_HEADER;
    goto out;
nomem:
    rc = fa_errorf(err, FA_ERR_NOMEM, "safetensors writer: out of memory");
out:
    free(text);
    json_decref(root);
    return rc;
}

int fa_st_writer_header(fa_st_writer *w, const uint8_t **hdr, size_t *len, fa_error *err)
{
    int rc;
    if (w->state == W_ADDING && (rc = build_header(w, err)) != 0)
        return rc;
    *hdr = w->header;
    *len = w->header_len;
    return 0;
}

uint64_t fa_st_writer_total_size(fa_st_writer *w)
{
    if (w->state == W_ADDING && build_header(w, NULL) != 0)
        return 0;
    return w->header_len + w->data_len;
}

int fa_st_writer_open(fa_st_writer *w, const char *path, unsigned mode, fa_error *err)
{
    return fa_st_writer_open_spare(w, path, NULL, mode, err);
}

int fa_st_writer_open_spare(fa_st_writer *w, const char *path, const char *spare, unsigned mode,
                            fa_error *err)
{
    int rc;

    if (w->state == W_ADDING && (rc = build_header(w, err)) != 0)
        return rc;
    if (w->state != W_HEADER)
        return fa_errorf(err, FA_ERR_STATE, "safetensors writer: %s: already opened", path);
    rc = spare ? fa_atomic_file_open_spare(&w->file, path, spare, mode, err)
               : fa_atomic_file_open(&w->file, path, mode, err);
    if (rc != 0)
        return rc;
    fa_atomic_file_write_back_every(w->file, FA_WRITE_BACK_STEP); /* commit fsyncs it */
    if ((rc = fa_atomic_file_write(w->file, w->header, w->header_len, err)) != 0) {
        fa_atomic_file_abort(w->file);
        w->file = NULL;
        return rc;
    }
    w->state = W_OPEN;
    if (w->hashing) {
        hash_update(w, w->header, w->header_len);
        w->frontier = 0;
        /* past leading empty tensors, so that the first bytes hash as written */
        while (w->frontier < w->n && w->t[w->frontier].bytes == 0)
            w->frontier++;
    }
    return 0;
}

int fa_st_writer_hash_sha256(fa_st_writer *w, fa_error *err)
{
    if (w->state != W_ADDING && w->state != W_HEADER)
        return fa_errorf(err, FA_ERR_STATE, "safetensors writer: hashing asked after open");
    if (w->hashing == HASH_SHA256)
        return 0;
    if (w->hashing)
        return fa_errorf(err, FA_ERR_STATE, "safetensors writer: already hashing with CRC-32C");
    if (fa_sha256_init(&w->sha) != 0) {
        fa_sha256_free(&w->sha);
        return fa_errorf(err, FA_ERR_CRYPTO, "safetensors writer: SHA-256 unavailable");
    }
    w->hashing = HASH_SHA256;
    return 0;
}

int fa_st_writer_hash_crc32c(fa_st_writer *w, fa_error *err)
{
    if (w->state != W_ADDING && w->state != W_HEADER)
        return fa_errorf(err, FA_ERR_STATE, "safetensors writer: hashing asked after open");
    if (w->hashing && w->hashing != HASH_CRC32C)
        return fa_errorf(err, FA_ERR_STATE, "safetensors writer: already hashing with SHA-256");
    w->hashing = HASH_CRC32C;
    w->crc = 0;
    return 0;
}

int fa_st_writer_sha256(const fa_st_writer *w, uint8_t out[32])
{
    if (w->hashed_all != HASH_SHA256)
        return FA_ERR_STATE;
    memcpy(out, w->digest, 32);
    return 0;
}

int fa_st_writer_crc32c(const fa_st_writer *w, uint32_t *out)
{
    if (w->hashed_all != HASH_CRC32C)
        return FA_ERR_STATE;
    *out = w->crc;
    return 0;
}

/* Moves the hash past every tensor written whole, reading back the bytes
 * of the next one that were written ahead of it. */
static int hash_advance(fa_st_writer *w, fa_error *err)
{
    while (w->frontier < w->n && w->t[w->frontier].put == w->t[w->frontier].bytes) {
        const struct wtensor *t;
        w->frontier++;
        if (w->frontier == w->n || (t = &w->t[w->frontier])->put == 0)
            continue;
        if (!w->rbuf && !(w->rbuf = malloc(ST_FILL_CHUNK)))
            return fa_errorf(err, FA_ERR_NOMEM, "safetensors writer: out of memory");
        for (uint64_t off = 0; off < t->put;) {
            size_t m = t->put - off < ST_FILL_CHUNK ? (size_t)(t->put - off) : ST_FILL_CHUNK;
            int rc = fa_atomic_file_pread(w->file, w->rbuf, m, w->header_len + t->start + off, err);
            if (rc != 0)
                return rc;
            hash_update(w, w->rbuf, m);
            off += m;
        }
    }
    return 0;
}

int fa_st_writer_put(fa_st_writer *w, size_t i, uint64_t off, const void *data, size_t len,
                     fa_error *err)
{
    struct wtensor *t;
    int rc;

    if (w->state != W_OPEN)
        return fa_errorf(err, FA_ERR_STATE,
                         "safetensors writer: write before open or after commit");
    if (i >= w->n)
        return fa_errorf(err, FA_ERR_INVAL, "safetensors writer: no tensor %zu (the file has %zu)",
                         i, w->n);
    t = &w->t[i];
    if (off != t->put)
        return fa_errorf(err, FA_ERR_INVAL,
                         "safetensors writer: tensor '%s': bytes at %" PRIu64
                         " written when %" PRIu64 " are (each tensor is written in order)",
                         t->name, off, t->put);
    if (len > t->bytes - t->put)
        return fa_errorf(err, FA_ERR_RANGE,
                         "safetensors writer: tensor '%s': %" PRIu64 " more bytes than it holds",
                         t->name, (uint64_t)len - (t->bytes - t->put));
    if (len == 0)
        return 0;
    rc = fa_atomic_file_pwrite(w->file, data, len, w->header_len + t->start + off, err);
    if (rc != 0)
        return rc;
    if (w->hashing && i == w->frontier)
        hash_update(w, data, len); /* it continues what was hashed */
    t->put += len;
    w->written += len;
    return w->hashing && t->put == t->bytes ? hash_advance(w, err) : 0;
}

int fa_st_writer_write(fa_st_writer *w, const void *data, size_t len, fa_error *err)
{
    if (w->state != W_OPEN)
        return fa_errorf(err, FA_ERR_STATE, "safetensors writer: write before open or after commit");
    if (len > w->data_len - w->written)
        return fa_errorf(err, FA_ERR_RANGE,
                         "safetensors writer: %zu more bytes than the declared tensors hold", len -
                         (size_t)(w->data_len - w->written));
    for (const uint8_t *p = data; len > 0;) {
        const struct wtensor *t;
        size_t m;
        int rc;
        while (w->next < w->n && w->t[w->next].put == w->t[w->next].bytes)
            w->next++;
        if (w->next == w->n) /* the rest was written by fa_st_writer_put */
            return fa_errorf(err, FA_ERR_RANGE,
                             "safetensors writer: %zu more bytes than the declared tensors hold",
                             len);
        t = &w->t[w->next];
        m = t->bytes - t->put < len ? (size_t)(t->bytes - t->put) : len;
        if ((rc = fa_st_writer_put(w, w->next, t->put, p, m, err)) != 0)
            return rc;
        p += m;
        len -= m;
    }
    return 0;
}

int fa_st_writer_commit(fa_st_writer *w, fa_error *err)
{
    int rc, hashed = 0;

    if (w->state != W_OPEN)
        return fa_errorf(err, FA_ERR_STATE, "safetensors writer: commit before open");
    if (w->written != w->data_len) {
        /* name the first tensor not fully written */
        size_t i = 0;
        while (i < w->n && w->t[i].put == w->t[i].bytes)
            i++;
        return fa_errorf(err, FA_ERR_RANGE,
                         "safetensors writer: %llu of %llu data bytes written (tensor '%s' "
                         "incomplete)",
                         (unsigned long long)w->written, (unsigned long long)w->data_len,
                         i < w->n ? w->t[i].name : "?");
    }
    if (w->hashing) {
        /* every tensor is whole, so the hash went through them all */
        hashed = w->hashing;
        rc = 0;
        if (w->hashing == HASH_SHA256) {
            rc = fa_sha256_final(&w->sha, w->digest);
            fa_sha256_free(&w->sha);
        }
        w->hashing = 0;
        if (rc != 0 || w->frontier != w->n) {
            fa_atomic_file_abort(w->file);
            w->file = NULL;
            w->state = W_DONE;
            return fa_errorf(err, FA_ERR_CRYPTO, "safetensors writer: %s failed",
                             hashed == HASH_CRC32C ? "CRC-32C" : "SHA-256");
        }
    }
    rc = fa_atomic_file_commit(w->file, err);
    w->file = NULL; /* freed by commit, on success and failure */
    w->state = W_DONE;
    w->hashed_all = rc == 0 ? hashed : 0;
    return rc;
}

int fa_st_save(const char *path, unsigned mode, const fa_st_view *tensors, size_t n,
               const char *const *meta, size_t n_meta, fa_error *err)
{
    fa_st_writer *w;
    int rc = fa_st_writer_new(&w, err);

    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = fa_st_writer_add(w, tensors[i].name, tensors[i].dtype, tensors[i].ndim,
                              tensors[i].shape, err);
    for (size_t i = 0; rc == 0 && i < n_meta; i++)
        rc = fa_st_writer_metadata(w, meta[2 * i], meta[2 * i + 1], err);
    if (rc == 0)
        rc = fa_st_writer_open(w, path, mode, err);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = fa_st_writer_write_view(w, &tensors[i], err);
    if (rc == 0)
        rc = fa_st_writer_commit(w, err);
    fa_st_writer_del(w);
    return rc;
}

int fa_st_writer_write_view(fa_st_writer *w, const fa_st_view *v, fa_error *err)
{
    uint64_t bytes = 0;
    uint8_t *buf;
    int rc = 0;

    if (!fa_st_dtype_size(v->dtype))
        return fa_errorf(err, FA_ERR_INVAL, "tensor '%s': unknown dtype", v->name);
    bytes = fa_st_dtype_size(v->dtype);
    for (unsigned d = 0; d < v->ndim; d++)
        bytes *= v->shape[d];
    if (!v->fill)
        return bytes ? fa_st_writer_write(w, v->data, (size_t)bytes, err) : 0;
    buf = malloc(bytes < ST_FILL_CHUNK ? (size_t)(bytes ? bytes : 1) : ST_FILL_CHUNK);
    if (!buf)
        return fa_errorf(err, FA_ERR_NOMEM, "tensor '%s': out of memory", v->name);
    for (uint64_t off = 0; rc == 0 && off < bytes;) {
        size_t n = bytes - off < ST_FILL_CHUNK ? (size_t)(bytes - off) : ST_FILL_CHUNK;
        rc = v->fill(v->ctx, v, off, buf, n, err);
        if (rc == 0)
            rc = fa_st_writer_write(w, buf, n, err);
        off += n;
    }
    free(buf);
    return rc;
}
