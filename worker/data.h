/* data.h - a region's training data: non-IID shard splitting (the IDX
 * reader and the labelled data set are in model/data.h).
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
#include "model/data.h"

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
