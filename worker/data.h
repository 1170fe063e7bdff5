/* data.h - a region's training data: IDX files and non-IID shard splitting.
 *
 * IDX is the format of MNIST and Fashion-MNIST (LeCun et al.): a big-endian
 * magic 0x00 0x00 <type> <ndim>, ndim big-endian uint32 dimensions, then the
 * elements, row-major.  We read and write type 0x08 (unsigned byte), the
 * type of every image and label file of these data sets, gzip-compressed
 * (detected by the gzip magic, read through zlib) or plain.
 *
 * Debian's dataset-fashion-mnist installs the data set at
 * FA_FASHION_MNIST_DIR: train-images-idx3-ubyte.gz (60000, 28, 28),
 * train-labels-idx1-ubyte.gz (60000), t10k-images-idx3-ubyte.gz (10000, 28,
 * 28), t10k-labels-idx1-ubyte.gz (10000).
 *
 * `fedagg data split` cuts the training set into one shard per region with
 * label skew drawn from a Dirichlet(alpha) per class (Hsu et al. 2019,
 * "Measuring the effects of non-identical data distribution"); a worker
 * opens only its own shard's files.
 */
#ifndef FA_WORKER_DATA_H
#define FA_WORKER_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "model/mlp.h"

#define FA_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* Largest IDX payload accepted (guards against absurd dimensions). */
#define FA_IDX_MAX_BYTES ((size_t)4 << 30)
#define FA_IDX_MAX_DIMS 4

/* ---------------------------------------------------------------------- */
/* IDX files                                                               */
/* ---------------------------------------------------------------------- */

/* An unsigned-byte IDX array in memory. */
typedef struct fa_idx {
    uint32_t ndim;                  /* 1..FA_IDX_MAX_DIMS */
    uint32_t dims[FA_IDX_MAX_DIMS]; /* dims[0] = items */
    uint8_t *data;                  /* product of dims bytes, row-major; owned */
    size_t size;                    /* bytes at data */
} fa_idx;

/* Reads an IDX file, gzip or plain.  Errors name the file: FA_ERR_NOTFOUND,
 * FA_ERR_IO, FA_ERR_PARSE (wrong magic, element type other than unsigned
 * byte, zero dims, bad gzip stream), FA_ERR_CORRUPT (truncated: fewer bytes
 * than the dimensions promise; or trailing bytes), FA_ERR_TOOBIG, FA_ERR_NOMEM. */
int fa_idx_read(fa_idx *out, const char *path, fa_error *err);

/* Writes a (atomically replacing path; gzip level 6 when gzip is non-zero).
 * Returns 0, FA_ERR_INVAL, FA_ERR_IO or FA_ERR_NOMEM. */
int fa_idx_write(const char *path, const fa_idx *a, int gzip, fa_error *err);

/* Frees a->data and zeroes a.  NULL is a no-op. */
void fa_idx_free(fa_idx *a);

/* ---------------------------------------------------------------------- */
/* A labelled image set for the model                                      */
/* ---------------------------------------------------------------------- */

/* Images as floats for the model: pixel / 255, in [0, 1].  No mean/std
 * standardisation: the MLP trains well on [0, 1] inputs (benchmarks/
 * bench_train.c) and every component (worker, aggregator evaluation,
 * external trainers) sees the same, documented scale. */
typedef struct fa_data {
    fa_dataset ds;    /* the view the model takes: ds.x = x, ds.y = y */
    uint32_t rows, cols;
    float *x;         /* (n, rows * cols) */
    uint8_t *y;       /* (n) */
    uint32_t classes; /* 1 + the largest label present */
} fa_data;

/* Loads an image file (n, rows, cols) and a label file (n).  Errors name the
 * file: those of fa_idx_read, and FA_ERR_INVAL for an image file that is not
 * 3-dimensional, a label file that is not 1-dimensional, or counts that do
 * not match ("train-images...: 60000 images but train-labels...: 59999
 * labels"). */
int fa_data_load(fa_data *d, const char *images, const char *labels, fa_error *err);

/* Fashion-MNIST from FA_FASHION_MNIST_DIR: test = 0 the 60000 training
 * images, test = 1 the 10000 test images.  FA_ERR_NOTFOUND says to install
 * dataset-fashion-mnist. */
int fa_data_load_fashion_mnist(fa_data *d, int test, fa_error *err);

/* Frees d's arrays and zeroes it.  NULL is a no-op. */
void fa_data_free(fa_data *d);

/* ---------------------------------------------------------------------- */
/* Non-IID split (label skew)                                              */
/* ---------------------------------------------------------------------- */

typedef struct fa_split_opts {
    uint32_t regions;        /* N >= 1 */
    double alpha;            /* Dirichlet concentration > 0 (small: skewed; large: near IID) */
    uint64_t seed;
    uint32_t min_per_region; /* redraw (up to 1000 times, deterministically) until every
                                region has at least this many examples; default 10 */
} fa_split_opts;

void fa_split_opts_default(fa_split_opts *o);

/* For every class c: proportions p ~ Dirichlet(alpha, ..., alpha) over the
 * N regions (Gamma draws normalised), the class's examples shuffled and cut
 * into N runs of sizes n_c * p (largest remainder rounding).  Writes the
 * region of every example into region_of[0..n).  Deterministic for a seed.
 * Returns 0, FA_ERR_INVAL (N = 0, alpha <= 0, label >= classes) or
 * FA_ERR_RANGE (min_per_region not reached after 1000 draws). */
int fa_split_dirichlet(const uint8_t *labels, uint32_t n, uint32_t classes,
                       const fa_split_opts *o, uint32_t *region_of, fa_error *err);

/* Reads images and labels (IDX), splits them and writes under out_dir
 *   region-<i>/train-images-idx3-ubyte.gz, region-<i>/train-labels-idx1-ubyte.gz
 * (i = 0..N-1, or the names given in names[i] when names is not NULL), and
 * out_dir/manifest.json:
 *   {"format": "fedagg-split-v1", "alpha": A, "seed": S, "regions": N,
 *    "source": {"images": ..., "labels": ..., "count": n}, "classes": C,
 *    "shards": [{"region": "region-0", "images": "region-0/train-images-idx3-ubyte.gz",
 *                "labels": "...", "count": k, "histogram": [h0, ..., h(C-1)]}, ...]}
 * Each example keeps its order within the source.  Every file is written
 * atomically.  Returns 0 or the errors above, FA_ERR_IO. */
int fa_split_files(const char *images, const char *labels, const char *out_dir,
                   const fa_split_opts *o, const char *const *names, fa_error *err);

#endif
