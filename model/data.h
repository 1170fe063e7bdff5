/* data.h - labelled image data for the model: IDX files (MNIST, Fashion-MNIST).
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
 * The worker trains on its region's shard (worker/data.h splits a data set
 * into shards); the aggregator evaluates global models on a public test set.
 */
#ifndef FA_MODEL_DATA_H
#define FA_MODEL_DATA_H

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

#endif
