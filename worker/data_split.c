/* data_split.c - non-IID label-skew shards: Dirichlet(alpha) proportions per
 * class (Hsu, Qi and Brown 2019), written as per-region IDX files plus a
 * JSON manifest. */
#include "worker/data.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fa_file.h"
#include "model/rng.h"

#define SPLIT_MAX_DRAWS 1000

void fa_split_opts_default(fa_split_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->regions = 4;
    o->alpha = 0.5;
    o->seed = 1;
    o->min_per_region = 10;
}

/* Cuts total into N integer sizes proportional to p (sum 1): floors, then
 * the remaining units to the largest fractional parts (ties: lower index). */
static void largest_remainder(const double *p, uint32_t N, uint32_t total, uint32_t *sizes,
                              double *frac)
{
    uint32_t used = 0;
    for (uint32_t r = 0; r < N; r++) {
        double want = p[r] * total;
        sizes[r] = (uint32_t)floor(want);
        if (sizes[r] > total - used)
            sizes[r] = total - used;
        used += sizes[r];
        frac[r] = want - sizes[r];
    }
    while (used < total) {
        uint32_t best = 0;
        for (uint32_t r = 1; r < N; r++)
            if (frac[r] > frac[best])
                best = r;
        sizes[best]++;
        frac[best] = -1.0;
        used++;
    }
}

int fa_split_dirichlet(const uint8_t *labels, uint32_t n, uint32_t classes,
                       const fa_split_opts *o, uint32_t *region_of, fa_error *err)
{
    const uint32_t N = o->regions;
    uint32_t *by_class = NULL, *start = NULL, *sizes = NULL, *count = NULL;
    double *p = NULL, *frac = NULL;
    int rc = 0;

    if (N == 0)
        return fa_errorf(err, FA_ERR_INVAL, "split: 0 regions");
    if (!(o->alpha > 0.0) || !isfinite(o->alpha))
        return fa_errorf(err, FA_ERR_INVAL, "split: alpha %g (must be > 0)", o->alpha);
    if (classes == 0 || classes > 256)
        return fa_errorf(err, FA_ERR_INVAL, "split: %u classes (must be 1..256)", classes);
    for (uint32_t i = 0; i < n; i++)
        if (labels[i] >= classes)
            return fa_errorf(err, FA_ERR_INVAL, "split: label %u of example %u is not below %u",
                             labels[i], i, classes);
    if ((uint64_t)N * o->min_per_region > n)
        return fa_errorf(err, FA_ERR_RANGE,
                         "split: %u regions of at least %u examples need %llu, there are %u", N,
                         o->min_per_region, (unsigned long long)N * o->min_per_region, n);

    /* Examples grouped by class, in source order: by_class[start[c] .. start[c+1]). */
    by_class = malloc((n ? n : 1) * sizeof(uint32_t));
    start = calloc(classes + 1, sizeof(uint32_t));
    sizes = malloc(N * sizeof(uint32_t));
    count = malloc(N * sizeof(uint32_t));
    p = malloc(N * sizeof(double));
    frac = malloc(N * sizeof(double));
    if (!by_class || !start || !sizes || !count || !p || !frac) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "split: out of memory");
        goto out;
    }
    for (uint32_t i = 0; i < n; i++)
        start[labels[i] + 1]++;
    for (uint32_t c = 0; c < classes; c++)
        start[c + 1] += start[c];

    for (uint32_t draw = 0; draw < SPLIT_MAX_DRAWS; draw++) {
        fa_rng rng;
        uint32_t fill[257];
        fa_rng_seed(&rng, o->seed, draw);
        memcpy(fill, start, (classes + 1) * sizeof(uint32_t));
        for (uint32_t i = 0; i < n; i++)
            by_class[fill[labels[i]]++] = i;
        memset(count, 0, N * sizeof(uint32_t));

        for (uint32_t c = 0; c < classes; c++) {
            uint32_t *ex = by_class + start[c], nc = start[c + 1] - start[c];
            /* p ~ Dirichlet(alpha 1_N): independent Gamma(alpha) normalised */
            double sum = 0.0;
            for (uint32_t r = 0; r < N; r++)
                sum += p[r] = fa_rng_gamma(&rng, o->alpha);
            if (!(sum > 0.0)) { /* every draw underflowed (tiny alpha): one region takes all */
                memset(p, 0, N * sizeof(double));
                p[fa_rng_below(&rng, N)] = 1.0;
                sum = 1.0;
            }
            for (uint32_t r = 0; r < N; r++)
                p[r] /= sum;
            largest_remainder(p, N, nc, sizes, frac);
            fa_rng_shuffle_u32(&rng, ex, nc);
            for (uint32_t r = 0, k = 0; r < N; r++) {
                for (uint32_t j = 0; j < sizes[r]; j++)
                    region_of[ex[k++]] = r;
                count[r] += sizes[r];
            }
        }
        uint32_t smallest = UINT32_MAX;
        for (uint32_t r = 0; r < N; r++)
            smallest = count[r] < smallest ? count[r] : smallest;
        if (smallest >= o->min_per_region)
            goto out;
    }
    rc = fa_errorf(err, FA_ERR_RANGE,
                   "split: no draw of %d gave every one of %u regions at least %u examples "
                   "(alpha %g is too small for this many regions; raise it or lower the minimum)",
                   SPLIT_MAX_DRAWS, N, o->min_per_region, o->alpha);
out:
    free(by_class);
    free(start);
    free(sizes);
    free(count);
    free(p);
    free(frac);
    return rc;
}

static int valid_name(const char *s)
{
    if (!s || !*s || strcmp(s, ".") == 0 || strcmp(s, "..") == 0 || strlen(s) > 128)
        return 0;
    for (; *s; s++)
        if (*s == '/' || (unsigned char)*s < 0x20)
            return 0;
    return 1;
}

int fa_split_files(const char *images, const char *labels, const char *out_dir,
                   const fa_split_opts *o, const char *const *names, fa_error *err)
{
    fa_idx im = {0}, lb = {0};
    uint32_t *region_of = NULL, classes = 0;
    json_t *manifest = NULL, *shards;
    char *text = NULL;
    int rc;

    for (uint32_t r = 0; names && r < o->regions; r++) {
        if (!valid_name(names[r]))
            return fa_errorf(err, FA_ERR_INVAL, "split: region name '%s' is not a plain file name",
                             names[r] ? names[r] : "(null)");
        for (uint32_t q = 0; q < r; q++)
            if (strcmp(names[q], names[r]) == 0)
                return fa_errorf(err, FA_ERR_INVAL, "split: region name '%s' given twice",
                                 names[r]);
    }
    if ((rc = fa_idx_read(&im, images, err)) != 0 || (rc = fa_idx_read(&lb, labels, err)) != 0)
        goto out;
    if (im.ndim != 3 || lb.ndim != 1) {
        rc = fa_errorf(err, FA_ERR_INVAL, "split: %s must be (count, rows, cols) images and %s "
                       "(count) labels", images, labels);
        goto out;
    }
    if (im.dims[0] != lb.dims[0]) {
        rc = fa_errorf(err, FA_ERR_INVAL, "%s: %u images but %s: %u labels", images, im.dims[0],
                       labels, lb.dims[0]);
        goto out;
    }
    const uint32_t n = lb.dims[0];
    const size_t img = (size_t)im.dims[1] * im.dims[2];
    for (uint32_t i = 0; i < n; i++)
        classes = lb.data[i] + 1u > classes ? lb.data[i] + 1u : classes;
    region_of = malloc((size_t)n * sizeof(uint32_t));
    if (!region_of) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "split: out of memory");
        goto out;
    }
    if ((rc = fa_split_dirichlet(lb.data, n, classes, o, region_of, err)) != 0)
        goto out;
    if ((rc = fa_file_mkdirs(out_dir, 0755, err)) != 0)
        goto out;

    manifest = json_pack("{s:s, s:f, s:I, s:i, s:{s:s, s:s, s:i}, s:i, s:[]}", "format",
                         "fedagg-split-v1", "alpha", o->alpha, "seed", (json_int_t)o->seed,
                         "regions", (int)o->regions, "source", "images", images, "labels", labels,
                         "count", (int)n, "classes", (int)classes, "shards");
    if (!manifest) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "split: out of memory (or non-UTF-8 path)");
        goto out;
    }
    shards = json_object_get(manifest, "shards");

    for (uint32_t r = 0; r < o->regions; r++) {
        char name[160], dir[4096], ipath[4352], lpath[4352], irel[512], lrel[512];
        uint32_t k = 0, hist[256] = {0};
        fa_idx si = {0}, sl = {0};

        if (names)
            snprintf(name, sizeof(name), "%s", names[r]);
        else
            snprintf(name, sizeof(name), "region-%u", r);
        for (uint32_t i = 0; i < n; i++)
            k += region_of[i] == r;
        si.ndim = 3;
        si.dims[0] = k;
        si.dims[1] = im.dims[1];
        si.dims[2] = im.dims[2];
        si.size = (size_t)k * img;
        sl.ndim = 1;
        sl.dims[0] = k;
        sl.size = k;
        si.data = malloc(si.size ? si.size : 1);
        sl.data = malloc(k ? k : 1);
        if (!si.data || !sl.data) {
            fa_idx_free(&si);
            fa_idx_free(&sl);
            rc = fa_errorf(err, FA_ERR_NOMEM, "split: out of memory");
            goto out;
        }
        /* examples keep their source order */
        for (uint32_t i = 0, j = 0; i < n; i++)
            if (region_of[i] == r) {
                memcpy(si.data + (size_t)j * img, im.data + (size_t)i * img, img);
                sl.data[j++] = lb.data[i];
                hist[lb.data[i]]++;
            }
        snprintf(dir, sizeof(dir), "%s/%s", out_dir, name);
        snprintf(irel, sizeof(irel), "%s/train-images-idx3-ubyte.gz", name);
        snprintf(lrel, sizeof(lrel), "%s/train-labels-idx1-ubyte.gz", name);
        snprintf(ipath, sizeof(ipath), "%s/%s", out_dir, irel);
        snprintf(lpath, sizeof(lpath), "%s/%s", out_dir, lrel);
        rc = fa_file_mkdirs(dir, 0755, err);
        if (rc == 0)
            rc = fa_idx_write(ipath, &si, 1, err);
        if (rc == 0)
            rc = fa_idx_write(lpath, &sl, 1, err);
        fa_idx_free(&si);
        fa_idx_free(&sl);
        if (rc != 0)
            goto out;

        json_t *h = json_array();
        for (uint32_t c = 0; c < classes; c++)
            json_array_append_new(h, json_integer(hist[c]));
        json_array_append_new(shards, json_pack("{s:s, s:s, s:s, s:i, s:o}", "region", name,
                                                "images", irel, "labels", lrel, "count", (int)k,
                                                "histogram", h));
    }
    text = json_dumps(manifest, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12));
    if (!text) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "split: out of memory");
        goto out;
    }
    {
        char mpath[4096];
        size_t len = strlen(text);
        snprintf(mpath, sizeof(mpath), "%s/manifest.json", out_dir);
        text[len] = '\0';
        /* a trailing newline, as text files have */
        char *t2 = realloc(text, len + 2);
        if (!t2) {
            rc = fa_errorf(err, FA_ERR_NOMEM, "split: out of memory");
            goto out;
        }
        text = t2;
        text[len] = '\n';
        text[len + 1] = '\0';
        rc = fa_file_write_atomic(mpath, text, len + 1, 0644, err);
    }
out:
    free(text);
    json_decref(manifest);
    free(region_of);
    fa_idx_free(&im);
    fa_idx_free(&lb);
    return rc;
}
