/* delta.c - quantised model deltas.  See delta.h.
 *
 * Built with -ffp-contract=off (model/CMakeLists.txt): the reconstruction
 * must round the product and the sum separately on every build. */
#include "model/delta.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "common/fa_endian.h"
#include "common/fa_file.h"
#include "common/fa_hex.h"
#include "common/fa_sha256.h"
#include "model/tensors.h"

/* Elements converted at a time inside a block (stack buffers). */
#define PIECE 256

int fa_delta_block_ok(uint64_t block)
{
    return block >= FA_DELTA_MIN_BLOCK && block <= FA_DELTA_MAX_BLOCK && (block & (block - 1)) == 0;
}

uint64_t fa_delta_blocks(uint64_t numel, uint32_t block)
{
    return numel / block + (numel % block != 0);
}

int fa_delta_bits_ok(uint64_t bits)
{
    return bits == 4 || bits == 8;
}

int fa_delta_qmax(unsigned bits)
{
    return (1 << (bits - 1)) - 1;
}

uint64_t fa_delta_q_bytes(uint64_t n, unsigned bits)
{
    return bits == 4 ? n / 2 + (n & 1) : n;
}

void fa_delta_pack(unsigned bits, const int8_t *q, size_t n, uint8_t *out)
{
    if (bits != 4) {
        memcpy(out, q, n);
        return;
    }
    for (size_t j = 0; j < n / 2; j++)
        out[j] = (uint8_t)(((uint8_t)q[2 * j] & 0x0f) | ((uint8_t)q[2 * j + 1] & 0x0f) << 4);
    if (n & 1)
        out[n / 2] = (uint8_t)q[n - 1] & 0x0f; /* the padding nibble 0 */
}

/* A nibble as a step: two's complement in 4 bits (8 is -8, refused before). */
static int8_t nibble_step(unsigned v)
{
    return (int8_t)(v < 8 ? (int)v : (int)v - 16);
}

int fa_delta_unpack(unsigned bits, const uint8_t *in, size_t n, int8_t *q, size_t *bad)
{
    unsigned seen = 0; /* nonzero once a refused value went by: located after */
    if (bits != 4) {
        for (size_t i = 0; i < n; i++)
            seen |= in[i] == 0x80;
        memcpy(q, in, n);
    } else {
        for (size_t j = 0; j < n / 2; j++) {
            const unsigned lo = in[j] & 0x0f, hi = in[j] >> 4;
            seen |= (lo == 8) | (hi == 8);
            q[2 * j] = nibble_step(lo);
            q[2 * j + 1] = nibble_step(hi);
        }
        if (n & 1) {
            const unsigned lo = in[n / 2] & 0x0f, hi = in[n / 2] >> 4;
            seen |= (lo == 8) | (hi != 0);
            q[n - 1] = nibble_step(lo);
        }
    }
    if (!seen)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((bits != 4 && in[i] == 0x80) ||
            (bits == 4 && ((in[i / 2] >> (4 * (i & 1))) & 0x0f) == 8)) {
            *bad = i;
            return FA_ERR_PARSE;
        }
    *bad = n; /* the padding nibble */
    return FA_ERR_PARSE;
}

/* |x| when finite, else 0: NaN and infinities take no part in a scale. */
static inline float finite_abs(float x)
{
    const float a = fabsf(x);
    return a <= FLT_MAX ? a : 0.0f;
}

/* The largest of a[0..n), every one >= 0 and finite (the order does not
 * matter, so it takes four lanes at a time where SSE2 is there). */
static float max_of(const float *a, size_t n)
{
    float m = 0.0f;
    size_t j = 0;
#ifdef __SSE2__
    __m128 v = _mm_setzero_ps();
    for (; j + 4 <= n; j += 4)
        v = _mm_max_ps(v, _mm_loadu_ps(a + j));
    v = _mm_max_ps(v, _mm_shuffle_ps(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    v = _mm_max_ps(v, _mm_shuffle_ps(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
    m = _mm_cvtss_f32(v);
#endif
    for (; j < n; j++)
        m = a[j] > m ? a[j] : m;
    return m;
}

/* Rounds x, |x| <= 2^22, to the nearest integer, ties to even (in the
 * default rounding mode, as nearbyintf): adding 1.5 x 2^23 leaves no bit
 * below the units, and the sum's parity is x's. */
static inline float round_even(float x)
{
    const float k = 12582912.0f;
    return (x + k) - k;
}

void fa_delta_encode(fa_st_dtype dtype, const void *base, const float *target, size_t n,
                     uint32_t block, unsigned bits, int8_t *q, float *scale)
{
    const float qmax = (float)fa_delta_qmax(bits);
    const size_t es = fa_st_dtype_size(dtype);
    const uint8_t *b = base;
    float w[PIECE], a[PIECE];

    for (size_t b0 = 0, k = 0; b0 < n; b0 += block, k++) {
        const size_t bn = n - b0 < block ? n - b0 : block;
        float m = 0.0f, s, inv;
        for (size_t p = 0; p < bn; p += PIECE) { /* the block's largest finite |difference| */
            const size_t pn = bn - p < PIECE ? bn - p : PIECE;
            float pm;
            fa_tensors_to_f32(dtype, b + (b0 + p) * es, w, pn);
            for (size_t j = 0; j < pn; j++)
                a[j] = finite_abs(target[b0 + p + j] - w[j]);
            pm = max_of(a, pn);
            m = pm > m ? pm : m;
        }
        s = m / qmax;
        if (!(s > 0.0f) || !isfinite(s)) {
            scale[k] = 0.0f;
            memset(q + b0, 0, bn);
            continue;
        }
        scale[k] = s;
        inv = 1.0f / s;
        for (size_t p = 0; p < bn; p += PIECE) {
            const size_t pn = bn - p < PIECE ? bn - p : PIECE;
            int8_t *restrict qp = q + b0 + p;
            const float *restrict tp = target + b0 + p;
            fa_tensors_to_f32(dtype, b + (b0 + p) * es, w, pn);
            for (size_t j = 0; j < pn; j++) {
                /* round(clamp(dv)) is clamp(round(dv)): qmax is an integer;
                 * a difference that is not finite gives 0 */
                const float dv = (tp[j] - w[j]) * inv;
                float c = dv > qmax ? qmax : dv;
                c = c < -qmax ? -qmax : c;
                c = fabsf(dv) <= FLT_MAX ? round_even(c) : 0.0f;
                qp[j] = (int8_t)(int)c;
            }
        }
    }
}

void fa_delta_apply(fa_st_dtype dtype, const void *base, const int8_t *q, const float *scale,
                    size_t n, uint32_t block, void *out)
{
    const size_t es = fa_st_dtype_size(dtype);
    const uint8_t *b = base;
    uint8_t *o = out;
    float w[PIECE];

    for (size_t b0 = 0, k = 0; b0 < n; b0 += block, k++) {
        const size_t bn = n - b0 < block ? n - b0 : block;
        const float s = scale[k];
        for (size_t p = 0; p < bn; p += PIECE) {
            const size_t pn = bn - p < PIECE ? bn - p : PIECE;
            fa_tensors_to_f32(dtype, b + (b0 + p) * es, w, pn);
            for (size_t j = 0; j < pn; j++) {
                const float step = (float)q[b0 + p + j] * s; /* rounded to float32 */
                w[j] = w[j] + step;                          /* rounded to float32 */
            }
            fa_tensors_from_f32(dtype, w, o + (b0 + p) * es, pn);
        }
    }
}

int fa_delta_file_sha256(const char *path, uint8_t out[32], uint64_t *size, fa_error *err)
{
    fa_sha256_ctx st = {0};
    uint8_t buf[1 << 16];
    uint64_t total = 0;
    FILE *f = fopen(path, "rb");
    size_t r;
    int rc = 0;

    if (!f)
        return fa_errorf(err, errno == ENOENT ? FA_ERR_NOTFOUND : FA_ERR_IO, "%s: %s", path,
                         strerror(errno));
    if (fa_sha256_init(&st) != 0)
        rc = fa_errorf(err, FA_ERR_CRYPTO, "SHA-256 unavailable");
    while (rc == 0 && (r = fread(buf, 1, sizeof(buf), f)) > 0) {
        (void)fa_sha256_update(&st, buf, r); /* sticky: final reports it */
        total += r;
    }
    if (rc == 0 && ferror(f))
        rc = fa_errorf(err, FA_ERR_IO, "%s: read error", path);
    fclose(f);
    if (rc == 0 && fa_sha256_final(&st, out) != 0)
        rc = fa_errorf(err, FA_ERR_CRYPTO, "%s: SHA-256 failed", path);
    fa_sha256_free(&st);
    if (rc == 0 && size)
        *size = total;
    return rc;
}

/* A decimal u64 metadata value, strictly. */
static int meta_u64(const fa_safetensors *st, const char *path, const char *key, uint64_t *out,
                    fa_error *err)
{
    const char *s = fa_st_metadata_get(st, key);
    char *end;
    if (!s || !s[0] || s[0] == '-' || s[0] == '+')
        return fa_errorf(err, FA_ERR_PARSE, "%s: delta metadata '%s' %s", path, key,
                         s ? "is not a number" : "missing");
    errno = 0;
    *out = strtoull(s, &end, 10);
    if (*end || errno)
        return fa_errorf(err, FA_ERR_PARSE, "%s: delta metadata '%s' = '%s' is not a number", path,
                         key, s);
    return 0;
}

/* How one tensor of the new file is produced. */
enum { FROM_BASE, FROM_QUANT, FROM_RAW };

struct plan {
    int kind;
    const fa_st_tensor *t;  /* in the new header */
    const fa_st_tensor *bt; /* in the base: FROM_BASE, FROM_QUANT */
    const fa_st_tensor *q, *s, *r;
};

static const fa_st_tensor *find_prefixed(const fa_safetensors *st, char p, const char *name)
{
    char key[FA_ST_MAX_NAME + 4];
    if (strlen(name) + 3 > sizeof(key))
        return NULL;
    key[0] = p;
    key[1] = '.';
    strcpy(key + 2, name);
    return fa_st_find(st, key);
}

static int make_plan(const fa_safetensors *h, const fa_safetensors *d, const fa_safetensors *b,
                     const char *dpath, const char *bpath, unsigned bits, uint32_t block,
                     struct plan *pl, uint64_t *quantised, fa_error *err)
{
    const fa_st_dtype qdtype = bits == 4 ? FA_ST_U8 : FA_ST_I8; /* the steps' layout */
    size_t used = 1;                                            /* the header tensor */
    *quantised = 0;
    for (size_t i = 0; i < fa_st_count(h); i++) {
        const fa_st_tensor *t = fa_st_at(h, i);
        struct plan *p = &pl[i];
        memset(p, 0, sizeof(*p));
        p->t = t;
        p->q = find_prefixed(d, 'q', t->name);
        p->s = find_prefixed(d, 's', t->name);
        p->r = find_prefixed(d, 'r', t->name);
        if (p->q || p->s) {
            if (!p->q || !p->s || p->r)
                return fa_errorf(err, FA_ERR_PARSE,
                                 "%s: tensor '%s' needs both q.%s and s.%s and no r.%s", dpath,
                                 t->name, t->name, t->name, t->name);
            if (!fa_tensors_dtype_is_float(t->dtype))
                return fa_errorf(err, FA_ERR_PARSE,
                                 "%s: tensor '%s' is %s: only floating tensors are quantised",
                                 dpath, t->name, fa_st_dtype_name(t->dtype));
            if (p->q->dtype != qdtype || p->q->numel != fa_delta_q_bytes(t->numel, bits))
                return fa_errorf(err, FA_ERR_PARSE,
                                 "%s: q.%s is %s of %" PRIu64 " elements; %" PRIu64
                                 " %s wanted (%u-bit steps of the tensor's %" PRIu64 ")",
                                 dpath, t->name, fa_st_dtype_name(p->q->dtype), p->q->numel,
                                 fa_delta_q_bytes(t->numel, bits), fa_st_dtype_name(qdtype), bits,
                                 t->numel);
            if (p->s->dtype != FA_ST_F32 || p->s->numel != fa_delta_blocks(t->numel, block))
                return fa_errorf(err, FA_ERR_PARSE,
                                 "%s: s.%s is %s of %" PRIu64 " elements; %" PRIu64
                                 " F32 scales wanted (blocks of %u)",
                                 dpath, t->name, fa_st_dtype_name(p->s->dtype), p->s->numel,
                                 fa_delta_blocks(t->numel, block), block);
            p->kind = FROM_QUANT;
            used += 2;
            *quantised += t->numel;
        } else if (p->r) {
            if (p->r->dtype != t->dtype || p->r->numel != t->numel)
                return fa_errorf(err, FA_ERR_PARSE,
                                 "%s: r.%s is %s of %" PRIu64
                                 " elements; the tensor is %s of %" PRIu64,
                                 dpath, t->name, fa_st_dtype_name(p->r->dtype), p->r->numel,
                                 fa_st_dtype_name(t->dtype), t->numel);
            p->kind = FROM_RAW;
            used++;
            continue;
        } else {
            p->kind = FROM_BASE;
        }
        p->bt = fa_st_find(b, t->name);
        if (!p->bt || p->bt->dtype != t->dtype || p->bt->numel != t->numel)
            return fa_errorf(err, FA_ERR_PARSE,
                             "%s: tensor '%s' of the delta's model is %s of %" PRIu64
                             " elements; the base %s %s",
                             dpath, t->name, fa_st_dtype_name(t->dtype), t->numel, bpath,
                             p->bt ? "has another dtype or size" : "does not have it");
    }
    if (used != fa_st_count(d)) {
        for (size_t i = 0; i < fa_st_count(d); i++) {
            const fa_st_tensor *x = fa_st_at(d, i);
            if (strcmp(x->name, FA_DELTA_HEADER_TENSOR) != 0 &&
                (strlen(x->name) < 3 || x->name[1] != '.' ||
                 (x->name[0] != 'q' && x->name[0] != 's' && x->name[0] != 'r') ||
                 !fa_st_find(h, x->name + 2)))
                return fa_errorf(err, FA_ERR_PARSE,
                                 "%s: tensor '%s' belongs to no tensor of the model", dpath,
                                 x->name);
        }
        return fa_errorf(err, FA_ERR_PARSE, "%s: tensors that belong to no tensor of the model",
                         dpath);
    }
    return 0;
}

/* Elements rebuilt at a time: a whole number of blocks. */
#define CHUNK ((size_t)1 << 16)

struct out {
    fa_atomic_file *f;
    fa_sha256_ctx sha;
    uint64_t written;
};

static int out_write(struct out *o, const void *p, size_t n, fa_error *err)
{
    (void)fa_sha256_update(&o->sha, p, n);
    o->written += n;
    return fa_atomic_file_write(o->f, p, n, err);
}

static int copy_tensor(struct out *o, const fa_safetensors *src, const fa_st_tensor *t,
                       uint8_t *buf, size_t cap, fa_error *err)
{
    const uint64_t bytes = t->end - t->begin;
    int rc = 0;
    for (uint64_t off = 0; rc == 0 && off < bytes; off += cap) {
        size_t m = bytes - off < cap ? (size_t)(bytes - off) : cap;
        rc = fa_st_read_range(src, t, off, buf, m, err);
        if (rc == 0)
            rc = out_write(o, buf, m, err);
    }
    return rc;
}

/* The scratch of one chunk of a rebuild. */
struct bufs {
    uint8_t *base, *packed, *out; /* chunk * 8, chunk, chunk * 8 bytes */
    int8_t *q;                    /* chunk */
    float *scale;                 /* chunk / FA_DELTA_MIN_BLOCK + 1 */
};

static int rebuild_tensor(struct out *o, const fa_safetensors *d, const fa_safetensors *b,
                          const struct plan *p, unsigned bits, uint32_t block, const char *dpath,
                          const struct bufs *u, fa_error *err)
{
    const size_t es = fa_st_dtype_size(p->t->dtype);
    const size_t chunk = block > CHUNK ? block : CHUNK; /* even: whole bytes of steps */
    float *sbuf = u->scale;
    int rc = 0;

    for (uint64_t e = 0; rc == 0 && e < p->t->numel; e += chunk) {
        size_t m = p->t->numel - e < chunk ? (size_t)(p->t->numel - e) : chunk;
        size_t nb = (size_t)fa_delta_blocks(m, block), bad;
        rc = fa_st_read_range(b, p->bt, e * es, u->base, m * es, err);
        if (rc == 0)
            rc = fa_st_read_range(d, p->q, fa_delta_q_bytes(e, bits), u->packed,
                                  (size_t)fa_delta_q_bytes(m, bits), err);
        if (rc == 0 && fa_delta_unpack(bits, u->packed, m, u->q, &bad) != 0)
            rc = bad == m /* only the last chunk can be odd */
                     ? fa_errorf(err, FA_ERR_PARSE,
                                 "%s: q.%s: the padding nibble after the last of %" PRIu64
                                 " steps is not 0",
                                 dpath, p->t->name, p->t->numel)
                     : fa_errorf(err, FA_ERR_PARSE,
                                 "%s: q.%s: step %" PRIu64 " is %d (%u-bit steps are in [-%d, %d])",
                                 dpath, p->t->name, e + bad, bits == 4 ? -8 : -128, bits,
                                 fa_delta_qmax(bits), fa_delta_qmax(bits));
        if (rc == 0)
            rc = fa_st_read_range(d, p->s, e / block * 4, sbuf, nb * 4, err);
        for (size_t k = 0; rc == 0 && k < nb; k++) {
            uint32_t le = fa_le_get_u32((uint8_t *)sbuf + 4 * k);
            float s;
            memcpy(&s, &le, 4);
            if (!isfinite(s) || s < 0.0f)
                rc = fa_errorf(err, FA_ERR_PARSE,
                               "%s: s.%s: scale %" PRIu64 " is %g (finite and >= 0 wanted)", dpath,
                               p->t->name, e / block + k, (double)s);
            sbuf[k] = s;
        }
        if (rc == 0) {
            fa_delta_apply(p->t->dtype, u->base, u->q, sbuf, m, block, u->out);
            rc = out_write(o, u->out, m * es, err);
        }
    }
    return rc;
}

int fa_delta_reconstruct(const char *base_path, const char *delta_path, const char *out_path,
                         uint8_t sha256[32], fa_delta_info *info, fa_error *err)
{
    fa_safetensors *d = NULL, *b = NULL, *h = NULL;
    struct plan *pl = NULL;
    struct out o;
    uint8_t *hdr = NULL, have[32];
    struct bufs u = {0};
    const fa_st_tensor *ht;
    const char *s;
    uint64_t block = 0, n_hdr, bits = 0;
    fa_delta_info inf;
    size_t chunk;
    char hx[65], hy[65];
    int rc;

    memset(&o, 0, sizeof(o));
    memset(&inf, 0, sizeof(inf));
    rc = fa_st_open(&d, delta_path, err);
    if (rc != 0)
        goto out;
    s = fa_st_metadata_get(d, FA_DELTA_META_FORMAT);
    if (!s || strcmp(s, "1") != 0) {
        rc = fa_errorf(err, FA_ERR_PARSE, "%s: not a fedagg model delta (metadata %s %s)",
                       delta_path, FA_DELTA_META_FORMAT, s ? "is not \"1\"" : "missing");
        goto out;
    }
    if ((rc = meta_u64(d, delta_path, FA_DELTA_META_BITS, &bits, err)) != 0 ||
        (rc = meta_u64(d, delta_path, FA_DELTA_META_BLOCK, &block, err)) != 0 ||
        (rc = meta_u64(d, delta_path, FA_DELTA_META_FROM, &inf.from, err)) != 0 ||
        (rc = meta_u64(d, delta_path, FA_DELTA_META_TO, &inf.to, err)) != 0 ||
        (rc = meta_u64(d, delta_path, FA_DELTA_META_SIZE, &inf.size, err)) != 0)
        goto out;
    if (!fa_delta_bits_ok(bits)) {
        rc = fa_errorf(err, FA_ERR_UNSUPPORTED,
                       "%s: a delta of %" PRIu64 " bits (4 and 8 are read)", delta_path, bits);
        goto out;
    }
    inf.bits = (uint32_t)bits;
    if (!fa_delta_block_ok(block)) {
        rc = fa_errorf(err, FA_ERR_PARSE,
                       "%s: block %" PRIu64 " (a power of two in [%u, %u] wanted)", delta_path,
                       block, FA_DELTA_MIN_BLOCK, FA_DELTA_MAX_BLOCK);
        goto out;
    }
    inf.block = (uint32_t)block;
    s = fa_st_metadata_get(d, FA_DELTA_META_BASE);
    if (!s || strlen(s) != 64 || fa_hex_decode(inf.base_sha256, 32, s, 64) != 0) {
        rc = fa_errorf(err, FA_ERR_PARSE, "%s: metadata %s missing or not 64 hex digits",
                       delta_path, FA_DELTA_META_BASE);
        goto out;
    }
    rc = fa_delta_file_sha256(base_path, have, NULL, err);
    if (rc != 0)
        goto out;
    if (memcmp(have, inf.base_sha256, 32) != 0) {
        fa_hex_encode(hx, sizeof(hx), inf.base_sha256, 32);
        fa_hex_encode(hy, sizeof(hy), have, 32);
        rc = fa_errorf(err, FA_ERR_VERIFY,
                       "%s: the delta applies to the model with SHA-256 %s, but %s has %s",
                       delta_path, hx, base_path, hy);
        goto out;
    }
    /* The new file's header, verbatim. */
    ht = fa_st_find(d, FA_DELTA_HEADER_TENSOR);
    if (!ht || ht->dtype != FA_ST_U8 || ht->ndim != 1 || ht->numel < 8 ||
        ht->numel > (uint64_t)FA_ST_MAX_HEADER + 8 || ht->numel > inf.size) {
        rc = fa_errorf(err, FA_ERR_PARSE,
                       "%s: tensor '%s' missing, not U8 [N], or of a size no header has",
                       delta_path, FA_DELTA_HEADER_TENSOR);
        goto out;
    }
    if (!(hdr = malloc((size_t)ht->numel))) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "%s: out of memory", delta_path);
        goto out;
    }
    rc = fa_st_read(d, ht, hdr, (size_t)ht->numel, err);
    if (rc != 0)
        goto out;
    n_hdr = fa_le_get_u64(hdr);
    if (n_hdr != ht->numel - 8) {
        rc = fa_errorf(err, FA_ERR_PARSE,
                       "%s: '%s' says %" PRIu64 " header bytes but holds %" PRIu64, delta_path,
                       FA_DELTA_HEADER_TENSOR, n_hdr, ht->numel - 8);
        goto out;
    }
    rc = fa_st_parse_header(&h, hdr + 8, (size_t)n_hdr, inf.size - ht->numel, delta_path, err);
    if (rc != 0) {
        rc = fa_error_prefix(err, rc, "%s: the new model's header", delta_path);
        goto out;
    }
    rc = fa_st_open(&b, base_path, err);
    if (rc != 0)
        goto out;
    chunk = block > CHUNK ? (size_t)block : CHUNK;
    pl = calloc(fa_st_count(h) ? fa_st_count(h) : 1, sizeof(*pl));
    u.base = malloc(chunk * 8);
    u.out = malloc(chunk * 8);
    u.packed = malloc(chunk);
    u.q = malloc(chunk);
    u.scale = malloc((chunk / FA_DELTA_MIN_BLOCK + 1) * sizeof(float));
    if (!pl || !u.base || !u.out || !u.packed || !u.q || !u.scale) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "%s: out of memory", delta_path);
        goto out;
    }
    rc = make_plan(h, d, b, delta_path, base_path, inf.bits, inf.block, pl, &inf.quantised, err);
    if (rc != 0)
        goto out;
    /* Everything checks out as far as headers go: write. */
    if (fa_sha256_init(&o.sha) != 0) {
        rc = fa_errorf(err, FA_ERR_CRYPTO, "SHA-256 unavailable");
        goto out;
    }
    rc = fa_atomic_file_open(&o.f, out_path, 0600, err);
    if (rc == 0) {
        fa_atomic_file_write_back_every(o.f, FA_WRITE_BACK_STEP); /* committed with its fsync */
        rc = out_write(&o, hdr, (size_t)ht->numel, err);
    }
    for (size_t i = 0; rc == 0 && i < fa_st_count(h); i++) {
        const struct plan *p = &pl[i];
        if (p->kind == FROM_BASE)
            rc = copy_tensor(&o, b, p->bt, u.out, chunk * 8, err);
        else if (p->kind == FROM_RAW)
            rc = copy_tensor(&o, d, p->r, u.out, chunk * 8, err);
        else
            rc = rebuild_tensor(&o, d, b, p, inf.bits, inf.block, delta_path, &u, err);
    }
    if (rc == 0 && o.written != inf.size)
        rc = fa_errorf(err, FA_ERR_PARSE, "%s: rebuilt %" PRIu64 " bytes, the delta says %" PRIu64,
                       delta_path, o.written, inf.size);
    if (rc == 0 && fa_sha256_final(&o.sha, sha256) != 0)
        rc = fa_errorf(err, FA_ERR_CRYPTO, "SHA-256 failed");
    if (rc == 0) {
        rc = fa_atomic_file_commit(o.f, err);
        o.f = NULL;
    }
    if (rc == 0 && info)
        *info = inf;
out:
    fa_atomic_file_abort(o.f);
    fa_sha256_free(&o.sha);
    fa_st_del(h);
    fa_st_del(b);
    fa_st_del(d);
    free(pl);
    free(hdr);
    free(u.base);
    free(u.out);
    free(u.packed);
    free(u.q);
    free(u.scale);
    return rc;
}
