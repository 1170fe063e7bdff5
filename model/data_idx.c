/* data_idx.c - IDX files (gzip or plain) and the labelled image sets built from
 * them (see data.h). */
#include "model/data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "common/fa_file.h"

#define IDX_UBYTE 0x08

void fa_idx_free(fa_idx *a)
{
    if (!a)
        return;
    free(a->data);
    memset(a, 0, sizeof(*a));
}

/* Reads exactly len bytes (or what there is); returns the count, -1 on a
 * stream error (message in *why). */
static long long gz_read_full(gzFile f, void *dst, size_t len, const char **why)
{
    uint8_t *p = dst;
    size_t got = 0;
    while (got < len) {
        size_t chunk = len - got > (1u << 30) ? (1u << 30) : len - got;
        int r = gzread(f, p + got, (unsigned)chunk);
        if (r < 0) {
            int zerr;
            *why = gzerror(f, &zerr);
            return -1;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    /* zlib reports a cut gzip stream as an error after the short read */
    int zerr;
    const char *msg = gzerror(f, &zerr);
    if (got < len && zerr != Z_OK && zerr != Z_STREAM_END) {
        *why = msg;
        return -1;
    }
    return (long long)got;
}

int fa_idx_read(fa_idx *out, const char *path, fa_error *err)
{
    uint8_t hdr[4 + 4 * FA_IDX_MAX_DIMS], extra;
    const char *why = "";
    fa_idx a = {0};
    struct stat sb;
    gzFile f;
    long long got;
    int rc = 0;

    memset(out, 0, sizeof(*out));
    if (stat(path, &sb) != 0)
        return fa_errorf(err, errno == ENOENT ? FA_ERR_NOTFOUND : FA_ERR_IO, "%s: %s", path,
                         strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return fa_errorf(err, FA_ERR_IO, "%s: not a regular file", path);
    /* gzread reads plain files as they are (zlib's "transparent" mode). */
    f = gzopen(path, "rb");
    if (!f)
        return fa_errorf(err, FA_ERR_IO, "%s: cannot open: %s", path,
                         errno ? strerror(errno) : "out of memory");
    gzbuffer(f, 1u << 17);

    got = gz_read_full(f, hdr, 4, &why);
    if (got < 0) {
        rc = fa_errorf(err, FA_ERR_PARSE, "%s: bad gzip stream: %s", path, why);
        goto out;
    }
    if (got < 4) {
        rc = fa_errorf(err, FA_ERR_CORRUPT, "%s: truncated: %lld bytes, no IDX header", path, got);
        goto out;
    }
    if (hdr[0] != 0 || hdr[1] != 0 || hdr[3] == 0 || hdr[3] > FA_IDX_MAX_DIMS) {
        rc = fa_errorf(err, FA_ERR_PARSE,
                       "%s: wrong magic %02x %02x %02x %02x: not an IDX file (expected 00 00 <type> "
                       "<1..%d dims>)",
                       path, hdr[0], hdr[1], hdr[2], hdr[3], FA_IDX_MAX_DIMS);
        goto out;
    }
    if (hdr[2] != IDX_UBYTE) {
        rc = fa_errorf(err, FA_ERR_PARSE,
                       "%s: IDX element type 0x%02x is not supported (only 0x08, unsigned byte)",
                       path, hdr[2]);
        goto out;
    }
    a.ndim = hdr[3];
    got = gz_read_full(f, hdr + 4, 4 * a.ndim, &why);
    if (got < 0) {
        rc = fa_errorf(err, FA_ERR_PARSE, "%s: bad gzip stream: %s", path, why);
        goto out;
    }
    if (got < 4 * a.ndim) {
        rc = fa_errorf(err, FA_ERR_CORRUPT, "%s: truncated in the IDX header", path);
        goto out;
    }
    a.size = 1;
    for (uint32_t i = 0; i < a.ndim; i++) {
        const uint8_t *p = hdr + 4 + 4 * i;
        a.dims[i] = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
        if (a.dims[i] == 0) {
            rc = fa_errorf(err, FA_ERR_PARSE, "%s: dimension %u is 0", path, i);
            goto out;
        }
        if (a.size > FA_IDX_MAX_BYTES / a.dims[i]) {
            rc = fa_errorf(err, FA_ERR_TOOBIG, "%s: dimensions exceed %zu bytes", path,
                           FA_IDX_MAX_BYTES);
            goto out;
        }
        a.size *= a.dims[i];
    }
    a.data = malloc(a.size);
    if (!a.data) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "%s: out of memory for %zu bytes", path, a.size);
        goto out;
    }
    got = gz_read_full(f, a.data, a.size, &why);
    if (got < 0) {
        rc = fa_errorf(err, FA_ERR_PARSE, "%s: bad gzip stream: %s", path, why);
        goto out;
    }
    if ((size_t)got < a.size) {
        rc = fa_errorf(err, FA_ERR_CORRUPT,
                       "%s: truncated: the header promises %zu data bytes, the file holds %lld",
                       path, a.size, got);
        goto out;
    }
    got = gz_read_full(f, &extra, 1, &why);
    if (got != 0) {
        rc = fa_errorf(err, got < 0 ? FA_ERR_PARSE : FA_ERR_CORRUPT,
                       "%s: %s after the %zu data bytes the header promises", path,
                       got < 0 ? "bad gzip stream" : "trailing bytes", a.size);
        goto out;
    }
out:
    gzclose(f);
    if (rc != 0) {
        fa_idx_free(&a);
        return rc;
    }
    *out = a;
    return 0;
}

int fa_idx_write(const char *path, const fa_idx *a, int gzip, fa_error *err)
{
    size_t hlen = 4 + 4 * (size_t)a->ndim, total, expect = 1;
    uint8_t *buf = NULL, *out = NULL;
    int rc;

    if (a->ndim == 0 || a->ndim > FA_IDX_MAX_DIMS)
        return fa_errorf(err, FA_ERR_INVAL, "%s: %u IDX dimensions (must be 1..%d)", path,
                         a->ndim, FA_IDX_MAX_DIMS);
    for (uint32_t i = 0; i < a->ndim; i++)
        expect *= a->dims[i];
    if (expect != a->size)
        return fa_errorf(err, FA_ERR_INVAL, "%s: dimensions hold %zu bytes, data has %zu", path,
                         expect, a->size);
    total = hlen + a->size;
    buf = malloc(total);
    if (!buf)
        return fa_errorf(err, FA_ERR_NOMEM, "%s: out of memory", path);
    buf[0] = buf[1] = 0;
    buf[2] = IDX_UBYTE;
    buf[3] = (uint8_t)a->ndim;
    for (uint32_t i = 0; i < a->ndim; i++) {
        buf[4 + 4 * i] = (uint8_t)(a->dims[i] >> 24);
        buf[5 + 4 * i] = (uint8_t)(a->dims[i] >> 16);
        buf[6 + 4 * i] = (uint8_t)(a->dims[i] >> 8);
        buf[7 + 4 * i] = (uint8_t)a->dims[i];
    }
    if (a->size)
        memcpy(buf + hlen, a->data, a->size);
    if (!gzip) {
        rc = fa_file_write_atomic(path, buf, total, 0644, err);
        free(buf);
        return rc;
    }

    /* gzip wrapper (windowBits 15 + 16), level 6, one deflate call. */
    z_stream z;
    memset(&z, 0, sizeof(z));
    if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
        free(buf);
        return fa_errorf(err, FA_ERR_NOMEM, "%s: deflateInit2 failed", path);
    }
    size_t cap = deflateBound(&z, (uLong)total);
    out = malloc(cap);
    if (!out) {
        deflateEnd(&z);
        free(buf);
        return fa_errorf(err, FA_ERR_NOMEM, "%s: out of memory", path);
    }
    z.next_in = buf;
    z.avail_in = (uInt)total;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    if (deflate(&z, Z_FINISH) != Z_STREAM_END)
        rc = fa_errorf(err, FA_ERR_IO, "%s: gzip compression failed", path);
    else
        rc = fa_file_write_atomic(path, out, z.total_out, 0644, err);
    deflateEnd(&z);
    free(out);
    free(buf);
    return rc;
}

/* ---------------------------------------------------------------------- */
/* Labelled image sets                                                     */
/* ---------------------------------------------------------------------- */

void fa_data_free(fa_data *d)
{
    if (!d)
        return;
    free(d->x);
    free(d->y);
    memset(d, 0, sizeof(*d));
}

int fa_data_load(fa_data *d, const char *images, const char *labels, fa_error *err)
{
    fa_idx im = {0}, lb = {0};
    int rc;

    memset(d, 0, sizeof(*d));
    if ((rc = fa_idx_read(&im, images, err)) != 0)
        return rc;
    if ((rc = fa_idx_read(&lb, labels, err)) != 0)
        goto out;
    if (im.ndim != 3) {
        rc = fa_errorf(err, FA_ERR_INVAL,
                       "%s: an image file has 3 dimensions (count, rows, cols), this one %u", images,
                       im.ndim);
        goto out;
    }
    if (lb.ndim != 1) {
        rc = fa_errorf(err, FA_ERR_INVAL, "%s: a label file has 1 dimension (count), this one %u",
                       labels, lb.ndim);
        goto out;
    }
    if (im.dims[0] != lb.dims[0]) {
        rc = fa_errorf(err, FA_ERR_INVAL, "%s: %u images but %s: %u labels", images, im.dims[0],
                       labels, lb.dims[0]);
        goto out;
    }
    const size_t n = im.dims[0], dim = (size_t)im.dims[1] * im.dims[2];
    if (dim > UINT32_MAX) {
        rc = fa_errorf(err, FA_ERR_TOOBIG, "%s: images of %zu pixels", images, dim);
        goto out;
    }
    d->x = malloc(n * dim * sizeof(float));
    if (!d->x) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "%s: out of memory for %zu images", images, n);
        goto out;
    }
    /* x = pixel / 255, in [0, 1] */
    for (size_t i = 0; i < n * dim; i++)
        d->x[i] = (float)im.data[i] / 255.0f;
    d->y = lb.data; /* take ownership of the label bytes */
    lb.data = NULL;
    d->rows = im.dims[1];
    d->cols = im.dims[2];
    d->classes = 0;
    for (size_t i = 0; i < n; i++)
        if ((uint32_t)d->y[i] + 1 > d->classes)
            d->classes = (uint32_t)d->y[i] + 1;
    d->ds.n = (uint32_t)n;
    d->ds.dim = (uint32_t)dim;
    d->ds.x = d->x;
    d->ds.y = d->y;
out:
    fa_idx_free(&im);
    fa_idx_free(&lb);
    if (rc != 0)
        fa_data_free(d);
    return rc;
}

int fa_data_load_fashion_mnist(fa_data *d, int test, fa_error *err)
{
    char images[512], labels[512];
    const char *p = test ? "t10k" : "train";
    int rc;

    snprintf(images, sizeof(images), "%s/%s-images-idx3-ubyte.gz", FA_FASHION_MNIST_DIR, p);
    snprintf(labels, sizeof(labels), "%s/%s-labels-idx1-ubyte.gz", FA_FASHION_MNIST_DIR, p);
    rc = fa_data_load(d, images, labels, err);
    if (rc == FA_ERR_NOTFOUND)
        fa_error_prefix(err, rc, "Fashion-MNIST not installed (apt-get install "
                                 "dataset-fashion-mnist)");
    return rc;
}
