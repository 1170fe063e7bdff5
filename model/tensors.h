/* tensors.h - a model as a table of named, typed tensors.
 *
 * A model is any safetensors state_dict: tensors with names, shapes (0 to
 * FA_ST_MAX_DIMS dims) and dtypes as the file has them (common/fa_safetensors.h).
 * The table is what the aggregator, the model store, the round client, the
 * external trainer and the tools know of a model; the built-in MLP
 * (model/mlp.h) is one producer of such a table.  Nothing above this layer
 * knows a layer's name.
 *
 * Federated tensors.  A configurable subset of the tensors is federated
 * (fa_tensors_select): by default every floating tensor (F32, F16, BF16,
 * F64), narrowed by include/exclude glob patterns.  Federated tensors are
 * the ones that go through the quantiser, secure aggregation and the server
 * optimizer; together, in table order, they form the federated vector
 *
 *   fed[0 .. d)   d = fa_tensors_fed_numel(t),   float32
 *
 * in which tensor i occupies [at(i)->fed_offset, fed_offset + numel).  Every
 * other tensor is never uploaded; the published model carries it unchanged.
 * The aggregator keeps the federated vector in f32 (master weights) whatever
 * the tensors' dtypes, and publishes each tensor in its own dtype.
 *
 * Ranges.  Each federated tensor has a public quantiser range r > 0 (the
 * same for every region): a region divides its delta of that tensor by r
 * before the codec of crypto/secagg.h quantises [-1, 1].  The table travels
 * with each published model in the __metadata__ entry FA_TENSORS_META_KEY,
 * a JSON object {"<name>": <range>, ...} of the federated tensors in table
 * order (fa_tensors_meta_encode / fa_tensors_meta_apply).
 *
 * The digest (fa_tensors_digest) names a table exactly: SHA-256 over
 *
 *   "fedagg-tensors-v1\n", then for every tensor in table order:
 *   name, 0x00, dtype name, 0x00, ndim (u32 LE), shape[0..ndim) (u64 LE each),
 *   federated (one byte, 0 or 1)
 *
 * Ranges are not part of it: they change every round (the audit record has
 * their own digest, fa_tensors_ranges_digest).
 *
 * Table order is the file's order (by data offset); a table compares with
 * another file by name, so a trainer may write its tensors in any order.
 */
#ifndef FA_MODEL_TENSORS_H
#define FA_MODEL_TENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "common/fa_safetensors.h"

/* The __metadata__ key of the federated tensors and their ranges. */
#define FA_TENSORS_META_KEY "fedagg.federated"
/* Most tensors of one table. */
#define FA_TENSORS_MAX (1u << 20)

/* config.proto IntegerTensors */
enum fa_tensors_integers {
    FA_TENSORS_INT_KEEP = 0,       /* integer tensors are never federated (default) */
    FA_TENSORS_INT_MEAN_DELTA = 1, /* integer tensors are federated like floating ones */
};

/* One tensor of the table.  Pointers stay valid until the table is freed. */
typedef struct fa_tensor {
    const char *name;
    fa_st_dtype dtype;
    unsigned ndim;                  /* 0 for a scalar */
    uint64_t shape[FA_ST_MAX_DIMS]; /* shape[0..ndim) */
    uint64_t numel;                 /* product of the shape (1 for a scalar) */
    uint64_t nbytes;                /* numel x dtype size */
    int federated;                  /* 1: quantised, securely aggregated, optimised */
    uint64_t fed_offset;            /* federated: first coordinate in the federated vector */
    float range;                    /* federated: quantiser range r > 0; 0 when none set */
} fa_tensor;

/* A table.  Opaque. */
typedef struct fa_tensors fa_tensors;

/* Whether a dtype is floating (F32, F16, BF16, F64). */
int fa_tensors_dtype_is_float(fa_st_dtype dtype);

/* An empty table.  Returns 0 or FA_ERR_NOMEM. */
int fa_tensors_new(fa_tensors **out, fa_error *err);

/* Appends a tensor (not federated).  Returns 0, FA_ERR_INVAL (empty,
 * over-long or duplicate name, too many dims or tensors, unknown dtype,
 * size overflow: the message names the tensor) or FA_ERR_NOMEM. */
int fa_tensors_add(fa_tensors *t, const char *name, fa_st_dtype dtype, unsigned ndim,
                   const uint64_t *shape, fa_error *err);

/* The table of every tensor of st, in file order, none federated; then, if
 * st's __metadata__ has FA_TENSORS_META_KEY, fa_tensors_meta_apply of it.
 * Returns 0, FA_ERR_NOMEM, or fa_tensors_meta_apply's errors. */
int fa_tensors_from_st(fa_tensors **out, const fa_safetensors *st, fa_error *err);

/* A deep copy.  Returns 0 or FA_ERR_NOMEM. */
int fa_tensors_clone(fa_tensors **out, const fa_tensors *t, fa_error *err);

/* NULL is a no-op. */
void fa_tensors_del(fa_tensors *t);

size_t fa_tensors_count(const fa_tensors *t);
/* Tensor i < count, in table order. */
const fa_tensor *fa_tensors_at(const fa_tensors *t, size_t i);
/* The tensor called name, or NULL (hashed: O(1)). */
const fa_tensor *fa_tensors_find(const fa_tensors *t, const char *name);
/* Its index, or -1. */
long fa_tensors_index(const fa_tensors *t, const char *name);

/* Federated coordinates d (sum of the federated tensors' numel), federated
 * tensors, and bytes of the whole model in its own dtypes. */
uint64_t fa_tensors_fed_numel(const fa_tensors *t);
size_t fa_tensors_fed_count(const fa_tensors *t);
uint64_t fa_tensors_total_bytes(const fa_tensors *t);

/* Glob match of a whole name: `*` any run (also empty), `?` one byte,
 * `[abc]`, `[a-z]`, `[!a]` / `[^a]` a class, `\x` a literal x.  Returns 1 on
 * a match, else 0 (a malformed class matches literally). */
int fa_tensors_glob(const char *pattern, const char *name);

/* Which tensors are federated. */
typedef struct fa_tensor_select {
    const char *const *include; /* n_include patterns; none: every candidate */
    size_t n_include;
    const char *const *exclude; /* n_exclude patterns, applied after include */
    size_t n_exclude;
    int integers; /* enum fa_tensors_integers */
} fa_tensor_select;

/* Marks as federated exactly the candidates (floating tensors, and integer
 * tensors too with FA_TENSORS_INT_MEAN_DELTA; never BOOL) that match an
 * include pattern (any, when none is given) and no exclude pattern; every
 * other tensor becomes not federated.  Ranges are reset to 0.  sel NULL
 * means the defaults.  Returns 0, or FA_ERR_INVAL (with the table unchanged)
 * when an include or exclude pattern matches no tensor at all (a typo
 * guard: the message names the pattern and suggests the nearest names), or
 * when no tensor ends up federated. */
int fa_tensors_select(fa_tensors *t, const fa_tensor_select *sel, fa_error *err);

/* Marks tensor i federated (1) or not (0) and recomputes the offsets;
 * FA_ERR_INVAL for BOOL tensors. */
int fa_tensors_set_federated(fa_tensors *t, size_t i, int federated, fa_error *err);
/* Sets the range of federated tensor i (finite, > 0; FA_ERR_INVAL else). */
int fa_tensors_set_range(fa_tensors *t, size_t i, float range, fa_error *err);

/* SHA-256 of the table (see the top of this file).  Returns 0 or FA_ERR_CRYPTO. */
int fa_tensors_digest(const fa_tensors *t, uint8_t out[32], fa_error *err);
/* SHA-256 of the federated tensors' ranges, float32 little-endian in table
 * order.  Returns 0 or FA_ERR_CRYPTO. */
int fa_tensors_ranges_digest(const fa_tensors *t, uint8_t out[32], fa_error *err);

/* The FA_TENSORS_META_KEY value: a JSON object of the federated tensors in
 * table order, each name mapped to its range (0 when unset), printed so that
 * it reads back to the same float32.  *json is malloc'ed.  Returns 0 or
 * FA_ERR_NOMEM. */
int fa_tensors_meta_encode(const fa_tensors *t, char **json, fa_error *err);

/* Sets which tensors are federated, and their ranges, from such a value:
 * every name must be in the table and of a dtype that can be federated, no
 * name twice, every range finite and >= 0 (FA_ERR_PARSE for malformed JSON;
 * FA_ERR_INVAL otherwise; the message names the tensor).  On error the
 * table is unchanged. */
int fa_tensors_meta_apply(fa_tensors *t, const char *json, fa_error *err);

/* Checks that st holds exactly the tensors of t: same names, dtypes and
 * shapes (in any order).  `what` names st in messages (e.g. "the trainer's
 * output").  Returns 0 or FA_ERR_INVAL with a message naming the first
 * offending tensor in table order: "missing tensor 'x'", "tensor 'x' has
 * shape [3, 4], the model's is [4, 3]", "tensor 'x' is BF16, the model's is
 * F32"; or, after all of t's tensors, "extra tensor 'y'". */
int fa_tensors_check(const fa_tensors *t, const fa_safetensors *st, const char *what,
                     fa_error *err);

/* Reads the federated tensors of st (a file with t's tensors: see
 * fa_tensors_check) as float32 into fed[0 .. d), d = fa_tensors_fed_numel(t):
 * floating dtypes widened (F64 rounded to nearest), integers converted.
 * With check_finite, a NaN or infinity is refused with FA_ERR_RANGE naming
 * the tensor and the flat index of the first one.  Returns 0, FA_ERR_INVAL
 * (n != d, a tensor missing or different), FA_ERR_RANGE, or fa_st_read's
 * errors. */
int fa_tensors_read_fed(const fa_tensors *t, const fa_safetensors *st, float *fed, size_t n,
                        int check_finite, const char *what, fa_error *err);

/* Element conversions, n elements.  To float32: floats widened exactly (F64
 * rounded to nearest even), integers and BOOL converted (rounded to nearest
 * even beyond 2^24).  From float32: F16/BF16 rounded to nearest even (F16
 * saturating to +-inf beyond its range, as IEEE), F64 exact, integers
 * rounded to nearest even and saturated to the type's range (NaN -> 0),
 * BOOL = (x != 0).  src and dst are little-endian bytes, possibly unaligned. */
void fa_tensors_to_f32(fa_st_dtype dtype, const void *src, float *dst, size_t n);
void fa_tensors_from_f32(fa_st_dtype dtype, const float *src, void *dst, size_t n);

/* ---------------------------------------------------------------------- */
/* Writing a model                                                          */
/* ---------------------------------------------------------------------- */

/* The tensors of a model to write, as views for fa_st_save or the model
 * store (common/fa_safetensors.h fa_st_view with a fill callback: no copy of
 * the model is made).  View i is tensor i of t, in table order:
 *   federated      from fed[fed_offset ..] (d floats), converted to the
 *                  tensor's dtype (fa_tensors_from_f32), or float32 when as_f32;
 *   not federated  from base (a file with t's tensors, fa_tensors_check):
 *                  its bytes as they are, or widened to float32 when as_f32
 *                  and the tensor is floating (integers stay as they are).
 * fed, base and t are borrowed and must outlive the views; base may be NULL
 * when every tensor is federated.  Returns 0, FA_ERR_INVAL (base NULL or
 * missing a tensor that is needed) or FA_ERR_NOMEM. */
typedef struct fa_tensors_out fa_tensors_out;

int fa_tensors_out_new(fa_tensors_out **out, const fa_tensors *t, const float *fed, size_t d,
                       const fa_safetensors *base, int as_f32, fa_error *err);
void fa_tensors_out_del(fa_tensors_out *o);
const fa_st_view *fa_tensors_out_views(const fa_tensors_out *o);
size_t fa_tensors_out_count(const fa_tensors_out *o);

/* fa_tensors_out_new + fa_st_save: an atomic file at path (mode e.g. 0644)
 * with metadata pairs meta[2i], meta[2i+1] and FA_TENSORS_META_KEY (from t)
 * added when any tensor is federated. */
int fa_tensors_save(const char *path, unsigned mode, const fa_tensors *t, const float *fed,
                    size_t d, const fa_safetensors *base, int as_f32, const char *const *meta,
                    size_t n_meta, fa_error *err);

#endif
