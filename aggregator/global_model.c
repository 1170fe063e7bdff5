/* global_model.c - the aggregator's global model.  See global_model.h. */
#include "aggregator/global_model.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fa_hex.h"
#include "common/fa_log.h"
#include "model/delta.h"

struct fa_global_model {
    fa_tensors *table; /* the current version's: federated flags, ranges */
    uint64_t d;
    int adaptive; /* RANGE_ADAPTIVE */
    double headroom, initial, floor_rel, min_range, initial_min, fixed;
    /* The model's own __metadata__ (init_file's, e.g. an architecture the
     * trainer reads), carried into every version; not the fedagg.* keys. */
    char **user_meta; /* n_user_meta key/value pairs */
    size_t n_user_meta;
    int need_master; /* a federated tensor is not F32, or the model is published as deltas */
    int delta_on;    /* config model_delta.enabled: versions are delta reconstructions */
    unsigned delta_bits;
    uint32_t delta_block;
    int is_mlp;
    fa_mlp_config mlp;
    uint8_t digest[32];
};

const fa_tensors *fa_global_model_table(const fa_global_model *g)
{
    return g->table;
}
uint64_t fa_global_model_d(const fa_global_model *g) { return g->d; }
const uint8_t *fa_global_model_digest(const fa_global_model *g) { return g->digest; }
int fa_global_model_per_tensor(const fa_global_model *g) { return g->adaptive; }

int fa_global_model_ranges_digest(const fa_global_model *g, uint8_t out[32], fa_error *err)
{
    return fa_tensors_ranges_digest(g->table, out, err);
}

int fa_global_model_mlp(const fa_global_model *g, fa_mlp_config *c)
{
    if (!g->is_mlp)
        return 0;
    if (c)
        *c = g->mlp;
    return 1;
}

/* Largest |x| of n floats (NaN ignored: the caller refused them before). */
static float max_abs(const float *x, uint64_t n)
{
    float m = 0.0f;
    for (uint64_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        m = a > m ? a : m;
    }
    return m;
}

/* A range as a positive finite float32 (the largest float when the
 * formula overflows, e.g. for weights near FLT_MAX). */
static float as_range(double r)
{
    if (!(r > 0))
        return 1.0f;
    return r < 3.0e38 ? (float)r : 3.0e38f;
}

/* The range of a federated tensor for the round that trains from weights
 * whose largest |w| is w_max, after a round whose mean delta had largest
 * |delta| d_max (d_max < 0: the first round, from the weights alone). */
static float range_of(const fa_global_model *g, double w_max, double d_max)
{
    double r;
    if (!g->adaptive) {
        r = g->fixed;
    } else {
        if (d_max < 0) {
            r = g->initial * w_max;
            if (g->initial_min > r)
                r = g->initial_min;
        } else {
            r = g->headroom * d_max;
            if (g->floor_rel * w_max > r)
                r = g->floor_rel * w_max;
            if (g->min_range > r)
                r = g->min_range;
        }
    }
    return as_range(r);
}

/* Ranges of the first round, from the initial weights: fed (the federated
 * vector in table order), or else block (an MLP parameter block in layout
 * order). */
static int set_first_ranges(const fa_global_model *g, fa_tensors *t, const float *fed,
                            const float *block, const fa_mlp_layout *layout, fa_error *err)
{
    for (size_t i = 0; i < fa_tensors_count(t); i++) {
        const fa_tensor *x = fa_tensors_at(t, i);
        const float *w = fed ? fed + x->fed_offset : NULL;
        int rc;
        if (!x->federated)
            continue;
        for (uint32_t j = 0; !w && j < layout->n_tensors; j++)
            if (!strcmp(layout->tensors[j].name, x->name))
                w = block + layout->tensors[j].offset;
        if (!w)
            return fa_errorf(err, FA_ERR_INVAL, "model: tensor '%s' has no initial weights",
                             x->name);
        rc = fa_tensors_set_range(t, i, range_of(g, max_abs(w, x->numel), -1), err);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* The table the configuration describes: init_file's tensors, or the
 * built-in MLP's, with the configured selection.  *init (init_file only)
 * stays open for the caller. */
#define MAX_USER_META 64

static void drop_user_meta(fa_global_model *g)
{
    for (size_t i = 0; i < 2 * g->n_user_meta; i++)
        free(g->user_meta[i]);
    free(g->user_meta);
    g->user_meta = NULL;
    g->n_user_meta = 0;
}

/* Keeps st's metadata but fedagg's own keys and "format" (which fedagg
 * writes), at most MAX_USER_META pairs. */
static int keep_user_meta(fa_global_model *g, const fa_safetensors *st, fa_error *err)
{
    size_t n = fa_st_metadata_count(st), k = 0;
    drop_user_meta(g);
    if (!(g->user_meta = calloc(2 * MAX_USER_META, sizeof(char *))))
        return fa_errorf(err, FA_ERR_NOMEM, "model metadata: out of memory");
    for (size_t i = 0; i < n && k < MAX_USER_META; i++) {
        const char *key, *val;
        fa_st_metadata_at(st, i, &key, &val);
        if (!strncmp(key, "fedagg.", 7) || !strcmp(key, "format"))
            continue;
        if (!(g->user_meta[2 * k] = strdup(key)) || !(g->user_meta[2 * k + 1] = strdup(val))) {
            g->n_user_meta = k + 1;
            drop_user_meta(g);
            return fa_errorf(err, FA_ERR_NOMEM, "model metadata: out of memory");
        }
        k++;
    }
    g->n_user_meta = k;
    return 0;
}

static int config_table(fa_global_model *g, const Fedagg__AggregatorConfig *cfg,
                        fa_tensors **out, fa_safetensors **init, fa_mlp_layout *layout,
                        fa_error *err)
{
    const Fedagg__ModelSpec *ms = cfg->model;
    const Fedagg__TensorSelection *fs = ms ? ms->federated : NULL;
    fa_tensor_select sel = {0};
    fa_tensors *t = NULL;
    int rc;

    *out = NULL;
    *init = NULL;
    if (ms && ms->init_file && ms->init_file[0]) {
        rc = fa_st_open(init, ms->init_file, err);
        if (rc == 0)
            rc = fa_tensors_from_st(&t, *init, err);
        if (rc == 0)
            rc = keep_user_meta(g, *init, err);
        if (rc != 0)
            return fa_error_prefix(err, rc, "model.init_file %s", ms->init_file);
        g->is_mlp = fa_mlp_config_from_st(*init, &g->mlp, NULL) == 0 &&
                    fa_mlp_layout_init(layout, &g->mlp, NULL) == 0;
    } else {
        static const uint32_t default_hidden[] = {256, 128};
        uint32_t input = ms && ms->has_input_dim ? ms->input_dim : 784;
        uint32_t classes = ms && ms->has_output_dim ? ms->output_dim : 10;
        const uint32_t *hidden = ms && ms->n_hidden ? ms->hidden : default_hidden;
        uint32_t nh = ms && ms->n_hidden ? (uint32_t)ms->n_hidden : 2;
        rc = fa_mlp_config_make(&g->mlp, input, hidden, nh, classes, err);
        if (rc == 0)
            rc = fa_mlp_layout_init(layout, &g->mlp, err);
        if (rc != 0)
            return fa_error_prefix(err, rc, "config: model");
        g->is_mlp = 1;
        rc = fa_tensors_new(&t, err);
        for (uint32_t i = 0; rc == 0 && i < layout->n_tensors; i++) {
            const fa_mlp_tensor *m = &layout->tensors[i];
            uint64_t shape[2] = {m->shape[0], m->shape[1]};
            rc = fa_tensors_add(t, m->name, FA_ST_F32, m->ndim, shape, err);
        }
        if (rc != 0) {
            fa_tensors_del(t);
            return rc;
        }
    }
    if (fs) {
        sel.include = (const char *const *)fs->include;
        sel.n_include = fs->n_include;
        sel.exclude = (const char *const *)fs->exclude;
        sel.n_exclude = fs->n_exclude;
        sel.integers = fs->integers == FEDAGG__INTEGER_TENSORS__INTEGERS_MEAN_DELTA
                           ? FA_TENSORS_INT_MEAN_DELTA
                           : FA_TENSORS_INT_KEEP;
    }
    rc = fa_tensors_select(t, &sel, err);
    if (rc != 0) {
        fa_tensors_del(t);
        return fa_error_prefix(err, rc, "config: model.federated");
    }
    *out = t;
    return 0;
}

/* The caller's metadata pairs, then the table's and the MLP's. */
static int make_meta(const fa_global_model *g, const fa_tensors *t, const char *const *meta,
                     size_t n_meta, const char ***out, size_t *n_out, char **json, char *arch,
                     size_t arch_len, fa_error *err)
{
    const char **m = calloc(2 * (n_meta + 2 + g->n_user_meta), sizeof(*m));
    size_t n = 0;
    int rc;

    *out = NULL;
    if (!m)
        return fa_errorf(err, FA_ERR_NOMEM, "model metadata: out of memory");
    rc = fa_tensors_meta_encode(t, json, err);
    if (rc != 0) {
        free(m);
        return rc;
    }
    for (size_t i = 0; i < g->n_user_meta; i++, n++) {
        m[2 * n] = g->user_meta[2 * i];
        m[2 * n + 1] = g->user_meta[2 * i + 1];
    }
    for (size_t i = 0; i < n_meta; i++, n++) {
        m[2 * n] = meta[2 * i];
        m[2 * n + 1] = meta[2 * i + 1];
    }
    m[2 * n] = FA_TENSORS_META_KEY;
    m[2 * n + 1] = *json;
    n++;
    if (g->is_mlp) {
        fa_mlp_config_str(&g->mlp, arch, arch_len);
        m[2 * n] = "fedagg.arch";
        m[2 * n + 1] = arch;
        n++;
    }
    *out = m;
    *n_out = n;
    return 0;
}

/* Writes version 0: t's tensors from fed (federated) and init (the others),
 * or, for the built-in MLP, every tensor F32 straight from its block. */
static int write_initial(fa_global_model *g, fa_model_store *store, const fa_tensors *t,
                         const float *fed, const fa_safetensors *init, const float *block,
                         const fa_mlp_layout *layout, const char *const *meta, size_t n_meta,
                         fa_error *err)
{
    fa_tensors_out *out = NULL, *master = NULL;
    fa_st_view *views = NULL;
    const char **all = NULL;
    size_t n_all = 0;
    char *json = NULL, arch[128];
    uint64_t shapes[2 * FA_MLP_MAX_LAYERS][2];
    fa_model_files files = {0};
    int rc;

    rc = make_meta(g, t, meta, n_meta, &all, &n_all, &json, arch, sizeof(arch), err);
    if (rc != 0)
        goto out;
    if (block) {
        views = calloc(layout->n_tensors, sizeof(*views));
        if (!views) {
            rc = fa_errorf(err, FA_ERR_NOMEM, "model: out of memory");
            goto out;
        }
        for (uint32_t i = 0; i < layout->n_tensors; i++) {
            const fa_mlp_tensor *m = &layout->tensors[i];
            shapes[i][0] = m->shape[0];
            shapes[i][1] = m->shape[1];
            views[i] = (fa_st_view){.name = m->name, .dtype = FA_ST_F32, .ndim = m->ndim,
                                    .shape = shapes[i], .data = block + m->offset};
        }
        files.model = views;
        files.n_model = layout->n_tensors;
    } else {
        rc = fa_tensors_out_new(&out, t, fed, g->d, init, 0, err);
        if (rc == 0 && g->need_master)
            rc = fa_tensors_out_new(&master, t, fed, g->d, init, 1, err);
        if (rc != 0)
            goto out;
        files.model = fa_tensors_out_views(out);
        files.n_model = fa_tensors_out_count(out);
        if (master) {
            files.master = fa_tensors_out_views(master);
            files.n_master = fa_tensors_out_count(master);
            files.master_meta = all;
            files.n_master_meta = n_all;
        }
    }
    files.meta = all;
    files.n_meta = n_all;
    rc = fa_model_store_commit(store, 0, 0, &files, err);
out:
    fa_tensors_out_del(out);
    fa_tensors_out_del(master);
    free(views);
    free(all);
    free(json);
    return rc;
}

/* The first difference between the configured table and the stored one. */
static int check_stored(const fa_tensors *want, const fa_tensors *have,
                        const fa_safetensors *st, const char *path, fa_error *err)
{
    uint8_t a[32], b[32];
    int rc = fa_tensors_check(want, st, path, err);

    if (rc != 0)
        return fa_error_prefix(err, FA_ERR_INVAL,
                               "the model store holds another model than the configured one (was "
                               "model.init_file or the model spec changed?)");
    for (size_t i = 0; i < fa_tensors_count(want); i++) {
        const fa_tensor *w = fa_tensors_at(want, i), *h = fa_tensors_find(have, w->name);
        if (h && !w->federated != !h->federated)
            return fa_errorf(err, FA_ERR_INVAL,
                             "%s: tensor '%s' is %sfederated there but %sfederated under the "
                             "config's model.federated (the selection cannot change during a "
                             "federation)",
                             path, w->name, h->federated ? "" : "not ", w->federated ? "" : "not ");
    }
    if ((rc = fa_tensors_digest(want, a, err)) != 0 || (rc = fa_tensors_digest(have, b, err)) != 0)
        return rc;
    if (memcmp(a, b, 32) != 0)
        return fa_errorf(err, FA_ERR_INVAL,
                         "%s: its tensors are in another order than the configured model's", path);
    return 0;
}

/* The stored current version's table (with ranges), after checking that
 * its weights file holds every federated tensor in float32. */
static int open_stored(fa_global_model *g, fa_model_store *store, const fa_tensors *want,
                       fa_error *err)
{
    struct fa_model_version cur;
    char mpath[4096], wpath[4096];
    fa_safetensors *st = NULL, *ws = NULL;
    fa_tensors *t = NULL;
    int rc;

    fa_model_store_current(store, &cur);
    fa_model_store_model_path(store, cur.version, mpath, sizeof(mpath));
    if (!fa_model_store_weights_path(store, cur.version, wpath, sizeof(wpath)))
        return fa_errorf(err, FA_ERR_CORRUPT, "model store: version %" PRIu64 " not retained",
                         cur.version);
    rc = fa_st_open(&st, mpath, err);
    if (rc == 0)
        rc = fa_tensors_from_st(&t, st, err);
    if (rc == 0)
        rc = check_stored(want, t, st, mpath, err);
    if (rc == 0)
        rc = keep_user_meta(g, st, err);
    for (size_t i = 0; rc == 0 && i < fa_tensors_count(t); i++) {
        const fa_tensor *x = fa_tensors_at(t, i);
        if (x->federated && !(x->range > 0))
            rc = fa_errorf(err, FA_ERR_CORRUPT, "%s: federated tensor '%s' has no range", mpath,
                           x->name);
    }
    if (rc == 0)
        rc = fa_st_open(&ws, wpath, err);
    for (size_t i = 0; rc == 0 && i < fa_tensors_count(t); i++) {
        const fa_tensor *x = fa_tensors_at(t, i);
        const fa_st_tensor *s;
        if (!x->federated)
            continue;
        s = fa_st_find(ws, x->name);
        if (!s || s->numel != x->numel || s->dtype != FA_ST_F32)
            rc = fa_errorf(err, FA_ERR_CORRUPT,
                           "%s: federated tensor '%s' missing, of another size or not F32", wpath,
                           x->name);
    }
    fa_st_del(ws);
    fa_st_del(st);
    if (rc != 0) {
        fa_tensors_del(t);
        return rc;
    }
    g->table = t;
    fa_log(FA_LOG_INFO, "model store opened",
           "version=%" PRIu64 " round=%" PRIu64 " tensors=%zu federated=%zu params=%" PRIu64,
           cur.version, cur.round, fa_tensors_count(t), fa_tensors_fed_count(t), g->d);
    return 0;
}

/* Version 0 from the configuration: the initial weights are held once
 * (init_file's federated tensors read as float32, or the MLP's block), for
 * the ranges and the write. */
static int create_initial(fa_global_model *g, const Fedagg__AggregatorConfig *cfg,
                          fa_model_store *store, fa_tensors *t, fa_safetensors *init,
                          const fa_mlp_layout *layout, const char *const *meta, size_t n_meta,
                          fa_error *err)
{
    const Fedagg__ModelSpec *ms = cfg->model;
    float *w = NULL;
    int rc;

    if (init) {
        if (!(w = malloc((g->d ? g->d : 1) * sizeof(float))))
            return fa_errorf(err, FA_ERR_NOMEM, "model of %" PRIu64 " parameters: out of memory",
                             g->d);
        rc = fa_tensors_read_fed(t, init, w, (size_t)g->d, 1, ms->init_file, err);
        if (rc == 0)
            rc = set_first_ranges(g, t, w, NULL, layout, err);
        if (rc == 0)
            rc = write_initial(g, store, t, w, init, NULL, layout, meta, n_meta, err);
    } else {
        if (!(w = malloc((layout->n_params ? layout->n_params : 1) * sizeof(float))))
            return fa_errorf(err, FA_ERR_NOMEM, "model of %zu parameters: out of memory",
                             (size_t)layout->n_params);
        fa_mlp_init_he(layout, w, ms && ms->has_init_seed ? ms->init_seed : 1);
        rc = set_first_ranges(g, t, NULL, w, layout, err);
        if (rc == 0)
            rc = write_initial(g, store, t, NULL, NULL, w, layout, meta, n_meta, err);
    }
    free(w);
    if (rc == 0)
        fa_log(FA_LOG_INFO, "initial model written",
               "version=0 tensors=%zu federated=%zu params=%" PRIu64 " bytes=%" PRIu64,
               fa_tensors_count(t), fa_tensors_fed_count(t), g->d, fa_tensors_total_bytes(t));
    return rc;
}

int fa_global_model_open(fa_global_model **out, const Fedagg__AggregatorConfig *cfg,
                         fa_model_store *store, const char *const *meta, size_t n_meta,
                         fa_error *err)
{
    Fedagg__Quantization q_default = FEDAGG__QUANTIZATION__INIT;
    const Fedagg__Quantization *q = cfg->quantization ? cfg->quantization : &q_default;
    struct fa_model_version cur;
    fa_global_model *g;
    fa_tensors *want = NULL;
    fa_safetensors *init = NULL;
    fa_mlp_layout layout;
    int rc;

    *out = NULL;
    if (!(g = calloc(1, sizeof(*g))))
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    g->adaptive = q->range == FEDAGG__QUANT_RANGE__RANGE_ADAPTIVE;
    g->headroom = q->range_headroom;
    g->initial = q->range_initial;
    g->floor_rel = q->range_floor;
    g->min_range = q->range_min;
    g->initial_min = q->range_initial_min;
    g->fixed = q->clip_value;
    if (cfg->model_delta && cfg->model_delta->enabled) {
        if (!fa_delta_bits_ok(cfg->model_delta->bits) ||
            !fa_delta_block_ok(cfg->model_delta->block)) {
            rc = fa_errorf(err, FA_ERR_INVAL,
                           "config: model_delta: bits %u block %u (bits 4 or 8 and a "
                           "power-of-two block from %u to %u wanted)",
                           cfg->model_delta->bits, cfg->model_delta->block, FA_DELTA_MIN_BLOCK,
                           FA_DELTA_MAX_BLOCK);
            goto fail;
        }
        g->delta_on = 1;
        g->delta_bits = cfg->model_delta->bits;
        g->delta_block = cfg->model_delta->block;
    }
    memset(&layout, 0, sizeof(layout));
    rc = config_table(g, cfg, &want, &init, &layout, err);
    if (rc != 0)
        goto fail;
    g->d = fa_tensors_fed_numel(want);
    for (size_t i = 0; i < fa_tensors_count(want); i++) {
        const fa_tensor *x = fa_tensors_at(want, i);
        if (x->federated && x->dtype != FA_ST_F32)
            g->need_master = 1;
        /* The published weights trail the master by what the next delta carries. */
        if (x->federated && g->delta_on && fa_tensors_dtype_is_float(x->dtype))
            g->need_master = 1;
    }
    if (fa_model_store_current(store, &cur) == 0) {
        rc = open_stored(g, store, want, err);
        fa_tensors_del(want);
    } else {
        rc = create_initial(g, cfg, store, want, init, &layout, meta, n_meta, err);
        if (rc == 0)
            g->table = want;
        else
            fa_tensors_del(want);
    }
    want = NULL;
    if (rc == 0)
        rc = fa_tensors_digest(g->table, g->digest, err);
    if (rc != 0)
        goto fail;
    fa_st_del(init);
    *out = g;
    return 0;
fail:
    fa_st_del(init);
    fa_global_model_del(g);
    return rc;
}

int fa_global_model_reload(fa_global_model *g, fa_model_store *store, fa_error *err)
{
    fa_tensors *old = g->table;
    int rc = open_stored(g, store, old, err); /* the same tensors, their ranges anew */

    if (rc != 0) {
        g->table = old;
        return rc;
    }
    fa_tensors_del(old);
    return 0;
}

void fa_global_model_del(fa_global_model *g)
{
    if (!g)
        return;
    fa_tensors_del(g->table);
    drop_user_meta(g);
    free(g);
}

/* ---- a round, streamed (fa_global_model_step) -------------------------------- */

/* Coordinates stepped per call: the scratch vectors are 1 MiB each. */
#define STEP_CHUNK ((size_t)1 << 18)

enum { WANT_W = 1, WANT_S0 = 2 }; /* the new weights; state vector i: WANT_S0 << i */

/* Everything a chunk of the new version is computed from. */
struct stepper {
    const fa_global_model *g;
    const fa_tensors *t; /* the table stepped from (its ranges unscale the delta) */
    const fa_server_opt *opt;
    size_t ns;
    fa_global_model_delta_fn delta;
    void *dctx;
    fa_safetensors *wst;     /* the current version's weights: federated tensors in F32 */
    const fa_st_tensor **wt; /* per table index: that tensor in wst (federated ones) */
    fa_safetensors *base;    /* the current version's model file (the other tensors) */
    const fa_st_tensor **bt; /* per table index: that tensor in base (the others) */
    fa_safetensors *sst;     /* the current version's optimizer state */
    const fa_st_tensor *st[FA_SERVER_OPT_MAX_STATE]; /* its state tensors; NULL: fresh */
    size_t *fed;          /* table indices of the federated tensors, in vector order */
    size_t n_fed, cursor; /* cursor: index into fed of the last tensor looked up */
    float *dbuf, *wbuf, *sbuf[FA_SERVER_OPT_MAX_STATE], *nbuf[FA_SERVER_OPT_MAX_STATE];
    uint8_t *raw; /* STEP_CHUNK * 4 bytes: tensors widened to F32 */
    /* Publishing as a delta (g->delta_on): the current version's published
     * model, the bytes a region holds, and the scratch of one chunk of the
     * delta: its base bytes, steps, scales and rebuilt bytes. */
    fa_safetensors *pub;     /* the current model file (may be wst or base) */
    const fa_st_tensor **pt; /* per table index: that tensor in pub (federated floating) */
    uint8_t *pbuf, *obuf;    /* STEP_CHUNK * 8 bytes each */
    int8_t *qbuf;            /* STEP_CHUNK */
    uint8_t *kbuf;           /* STEP_CHUNK: the steps in the file's layout (fa_delta_pack) */
    float *scbuf;            /* STEP_CHUNK / FA_DELTA_MIN_BLOCK + 1 */
    uint8_t *cbuf;           /* STEP_CHUNK * 8: a chunk converted to the dtype written */
};

/* The federated tensor (index into fed) holding coordinate c; calls come in
 * mostly increasing order, so the cursor usually answers. */
static size_t fed_at(struct stepper *sp, uint64_t c)
{
    size_t lo = 0, hi = sp->n_fed;
    const fa_tensor *x = fa_tensors_at(sp->t, sp->fed[sp->cursor]);

    if (c >= x->fed_offset && c < x->fed_offset + x->numel)
        return sp->cursor;
    while (hi - lo > 1) { /* the last tensor whose fed_offset <= c */
        size_t mid = lo + (hi - lo) / 2;
        if (fa_tensors_at(sp->t, sp->fed[mid])->fed_offset <= c)
            lo = mid;
        else
            hi = mid;
    }
    sp->cursor = lo;
    return lo;
}

/* Coordinates [c0, c0 + n) (n <= STEP_CHUNK) of the step: dbuf gets the mean
 * delta in the model's units, then wbuf the new weights (WANT_W) and nbuf[i]
 * the new state vector i (WANT_S0 << i). */
static int step_chunk(struct stepper *sp, uint64_t c0, size_t n, int want, fa_error *err)
{
    float *next[FA_SERVER_OPT_MAX_STATE] = {NULL, NULL};
    int rc, any_next = 0;

    rc = sp->delta(sp->dctx, c0, sp->dbuf, n, err);
    for (uint64_t c = c0; rc == 0 && c < c0 + n;) {
        size_t k = fed_at(sp, c);
        const fa_tensor *x = fa_tensors_at(sp->t, sp->fed[k]);
        uint64_t e = c - x->fed_offset;
        size_t m = (size_t)(x->numel - e < c0 + n - c ? x->numel - e : c0 + n - c);
        if (sp->g->adaptive) {
            /* blocks of a fixed count: the loop vectorises at -O2 */
            float *restrict p = sp->dbuf + (c - c0);
            const float r = x->range;
            size_t i = 0;
            for (; i + 16 <= m; i += 16)
                for (size_t j = i; j < i + 16; j++)
                    p[j] *= r;
            for (; i < m; i++)
                p[i] *= r;
        }
        if (want & WANT_W)
            rc = fa_st_read_range(sp->wst, sp->wt[sp->fed[k]], e * 4, sp->wbuf + (c - c0), m * 4,
                                  err);
        c += m;
    }
    for (size_t i = 0; rc == 0 && i < sp->ns; i++) {
        if (!(want & WANT_W) && !(want & (WANT_S0 << i)))
            continue; /* neither the weights nor this vector's next value need it */
        if (sp->st[i])
            rc = fa_st_read_range(sp->sst, sp->st[i], c0 * 4, sp->sbuf[i], n * 4, err);
        else
            fa_server_opt_state_init(sp->opt, i, sp->sbuf[i], n);
        if (want & (WANT_S0 << i)) {
            next[i] = sp->nbuf[i];
            any_next = 1;
        }
    }
    if (rc == 0)
        fa_server_opt_step(sp->opt, n, (want & WANT_W) ? sp->wbuf : NULL, sp->dbuf,
                           (const float *const *)sp->sbuf, any_next ? next : NULL);
    return rc;
}

/* What a view of the new version holds.  VIEW_FED: a federated tensor's
 * new weights, in the view's dtype; VIEW_PUB: a federated floating tensor
 * of the model as its delta rebuilds it; VIEW_RAW: a tensor of the current
 * model, byte for byte; VIEW_WIDEN: one of its floating tensors in F32. */
enum { VIEW_FED, VIEW_RAW, VIEW_WIDEN, VIEW_PUB };

/* Elements [e, e + m) of federated tensor x (table index ti; e a multiple
 * of STEP_CHUNK, itself a multiple of any block and even; m <= STEP_CHUNK),
 * stepped once, to every file that holds them: the model (as kind says),
 * the master weights, the delta's steps and scales (views dq and dq + 1;
 * its new bytes in view dq for an integer tensor; dq 0: no delta file) and
 * the optimizer state. */
static int write_fed_chunk(struct stepper *sp, fa_model_commit *c, const fa_tensor *x, size_t ti,
                           int kind, size_t dq, uint64_t e, size_t m, fa_error *err)
{
    const size_t es = fa_st_dtype_size(x->dtype);
    const uint32_t block = sp->g->delta_block;
    const unsigned bits = sp->g->delta_bits;
    int want = WANT_W, rc;

    for (size_t i = 0; i < sp->ns; i++)
        want |= WANT_S0 << i;
    rc = step_chunk(sp, x->fed_offset + e, m, want, err);
    if (rc == 0 && kind == VIEW_PUB) {
        /* against the published bytes regions hold (model/delta.h) */
        rc = fa_st_read_range(sp->pub, sp->pt[ti], e * es, sp->pbuf, m * es, err);
        if (rc == 0) {
            fa_delta_encode(x->dtype, sp->pbuf, sp->wbuf, m, block, bits, sp->qbuf, sp->scbuf);
            fa_delta_apply(x->dtype, sp->pbuf, sp->qbuf, sp->scbuf, m, block, sp->obuf);
            fa_delta_pack(bits, sp->qbuf, m, sp->kbuf);
            rc = fa_model_commit_put(c, FA_MODEL_FILE_MODEL, ti, e * es, sp->obuf, m * es, err);
        }
        if (rc == 0)
            rc = fa_model_commit_put(c, FA_MODEL_FILE_DELTA, dq, e / (8 / bits), sp->kbuf,
                                     (size_t)fa_delta_q_bytes(m, bits), err);
        if (rc == 0)
            rc = fa_model_commit_put(c, FA_MODEL_FILE_DELTA, dq + 1, e / block * 4, sp->scbuf,
                                     (size_t)fa_delta_blocks(m, block) * 4, err);
    } else if (rc == 0) {
        fa_tensors_from_f32(x->dtype, sp->wbuf, sp->cbuf, m);
        rc = fa_model_commit_put(c, FA_MODEL_FILE_MODEL, ti, e * es, sp->cbuf, m * es, err);
        if (rc == 0 && dq)
            rc = fa_model_commit_put(c, FA_MODEL_FILE_DELTA, dq, e * es, sp->cbuf, m * es, err);
    }
    if (rc == 0 && sp->g->need_master)
        rc = fa_model_commit_put(c, FA_MODEL_FILE_MASTER, ti, e * 4, sp->wbuf, m * 4, err);
    for (size_t i = 0; rc == 0 && i < sp->ns; i++)
        rc = fa_model_commit_put(c, FA_MODEL_FILE_STATE, i, (x->fed_offset + e) * 4, sp->nbuf[i],
                                 m * 4, err);
    return rc;
}

/* A tensor that is not federated, from the current model to file f: byte
 * for byte, or widened to F32 (VIEW_WIDEN, the master weights). */
static int write_other(struct stepper *sp, fa_model_commit *c, int f, size_t ti, int kind,
                       fa_error *err)
{
    const fa_st_tensor *b = sp->bt[ti];
    const size_t bs = fa_st_dtype_size(b->dtype), per = STEP_CHUNK * 4 / bs;
    int rc = 0;

    for (uint64_t e = 0; rc == 0 && e < b->numel;) {
        size_t m = b->numel - e < per ? (size_t)(b->numel - e) : per;
        rc = fa_st_read_range(sp->base, b, e * bs, sp->raw, m * bs, err);
        if (rc == 0 && kind == VIEW_WIDEN) {
            fa_tensors_to_f32(b->dtype, sp->raw, (float *)(void *)sp->cbuf, m);
            rc = fa_model_commit_put(c, f, ti, e * 4, sp->cbuf, m * 4, err);
        } else if (rc == 0) {
            rc = fa_model_commit_put(c, f, ti, e * bs, sp->raw, m * bs, err);
        }
        e += m;
    }
    return rc;
}

static void stepper_free(struct stepper *sp)
{
    if (sp->pub != sp->wst && sp->pub != sp->base)
        fa_st_del(sp->pub);
    free(sp->pt);
    free(sp->pbuf);
    free(sp->obuf);
    free(sp->qbuf);
    free(sp->kbuf);
    free(sp->scbuf);
    fa_st_del(sp->wst);
    if (sp->base != sp->wst)
        fa_st_del(sp->base);
    fa_st_del(sp->sst);
    free(sp->wt);
    free(sp->bt);
    free(sp->fed);
    free(sp->dbuf);
    free(sp->wbuf);
    for (size_t i = 0; i < FA_SERVER_OPT_MAX_STATE; i++) {
        free(sp->sbuf[i]);
        free(sp->nbuf[i]);
    }
    free(sp->raw);
    free(sp->cbuf);
}

/* The current version's optimizer state file and the tensors of opt's
 * vectors in it (NULL where absent: fresh state; version 0 has none). */
static int open_state(const fa_global_model *g, const fa_model_store *store,
                      const fa_server_opt *opt, fa_safetensors **sst,
                      const fa_st_tensor *st[FA_SERVER_OPT_MAX_STATE], int warn, fa_error *err)
{
    struct fa_model_version cur;
    char path[4096];
    int rc;

    *sst = NULL;
    st[0] = st[1] = NULL;
    if (fa_model_store_current(store, &cur) != 0)
        return fa_errorf(err, FA_ERR_STATE, "model store: no current version");
    fa_model_store_state_path(store, cur.version, path, sizeof(path));
    rc = fa_st_open(sst, path, err);
    for (size_t i = 0; rc == 0 && i < fa_server_opt_state_count(opt); i++) {
        const char *name = fa_server_opt_state_name(opt, i);
        const fa_st_tensor *t = fa_st_find(*sst, name);
        if (!t) {
            /* The optimizer kind changed in the config: start its state anew. */
            if (warn && cur.version > 0)
                fa_log(FA_LOG_WARN,
                       "optimizer state missing from the checkpoint; starting it "
                       "fresh",
                       "file=%s tensor=%s", path, name);
            continue;
        }
        if (t->dtype != FA_ST_F32 || t->numel != g->d)
            rc = fa_errorf(err, FA_ERR_CORRUPT,
                           "%s: optimizer state '%s' is %s of %" PRIu64 " elements; the model has "
                           "%" PRIu64 " federated parameters in F32",
                           path, name, fa_st_dtype_name(t->dtype), t->numel, g->d);
        else
            st[i] = t;
    }
    if (rc != 0) {
        fa_st_del(*sst);
        *sst = NULL;
    }
    return rc;
}

int fa_global_model_check_state(const fa_global_model *g, const fa_model_store *store,
                                const fa_server_opt *opt, uint64_t *steps, fa_error *err)
{
    fa_safetensors *sst = NULL;
    const fa_st_tensor *st[FA_SERVER_OPT_MAX_STATE];
    const char *s;
    int rc = open_state(g, store, opt, &sst, st, 1, err);

    *steps = 0;
    if (rc == 0 && (s = fa_st_metadata_get(sst, "fedagg.steps")) != NULL)
        *steps = strtoull(s, NULL, 10);
    fa_st_del(sst);
    return rc;
}

/* Opens what the step reads: the current version's weights, model and
 * state files, checked against the table; and the scratch vectors. */
static int stepper_open(struct stepper *sp, const fa_global_model *g, const fa_model_store *store,
                        const fa_server_opt *opt, fa_error *err)
{
    struct fa_model_version cur;
    const fa_tensors *t = g->table;
    const size_t nt = fa_tensors_count(t);
    char wpath[4096], mpath[4096];
    int rc;

    sp->g = g;
    sp->t = t;
    sp->opt = opt;
    sp->ns = fa_server_opt_state_count(opt);
    fa_model_store_current(store, &cur);
    fa_model_store_model_path(store, cur.version, mpath, sizeof(mpath));
    if (!fa_model_store_weights_path(store, cur.version, wpath, sizeof(wpath)))
        return fa_errorf(err, FA_ERR_CORRUPT, "model store: version %" PRIu64 " not retained",
                         cur.version);
    sp->wt = calloc(nt, sizeof(*sp->wt));
    sp->bt = calloc(nt, sizeof(*sp->bt));
    sp->fed = calloc(nt, sizeof(*sp->fed));
    sp->dbuf = calloc(STEP_CHUNK, sizeof(float));
    sp->wbuf = calloc(STEP_CHUNK, sizeof(float));
    sp->raw = malloc(STEP_CHUNK * 4);
    sp->cbuf = malloc(STEP_CHUNK * 8);
    for (size_t i = 0; i < sp->ns; i++) {
        sp->sbuf[i] = calloc(STEP_CHUNK, sizeof(float));
        sp->nbuf[i] = calloc(STEP_CHUNK, sizeof(float));
    }
    if (!sp->wt || !sp->bt || !sp->fed || !sp->dbuf || !sp->wbuf || !sp->raw || !sp->cbuf ||
        (sp->ns > 0 && (!sp->sbuf[0] || !sp->nbuf[0])) ||
        (sp->ns > 1 && (!sp->sbuf[1] || !sp->nbuf[1])))
        return fa_errorf(err, FA_ERR_NOMEM, "model step: out of memory");
    rc = fa_st_open(&sp->wst, wpath, err);
    if (rc == 0 && strcmp(wpath, mpath) != 0 && fa_tensors_fed_count(t) < nt)
        rc = fa_st_open(&sp->base, mpath, err);
    else if (rc == 0)
        sp->base = sp->wst;
    for (size_t i = 0; rc == 0 && i < nt; i++) {
        const fa_tensor *x = fa_tensors_at(t, i);
        const fa_st_tensor *s;
        if (x->federated) {
            sp->fed[sp->n_fed++] = i;
            s = fa_st_find(sp->wst, x->name);
            if (!s || s->dtype != FA_ST_F32 || s->numel != x->numel)
                rc = fa_errorf(err, FA_ERR_CORRUPT,
                               "%s: federated tensor '%s' missing, of another size or not F32",
                               wpath, x->name);
            sp->wt[i] = s;
        } else {
            s = fa_st_find(sp->base, x->name);
            if (!s || s->dtype != x->dtype || s->numel != x->numel)
                rc = fa_errorf(err, FA_ERR_CORRUPT,
                               "%s: tensor '%s' missing, or of another dtype or size", mpath,
                               x->name);
            sp->bt[i] = s;
        }
    }
    if (rc == 0 && sp->n_fed == 0)
        rc = fa_errorf(err, FA_ERR_INVAL, "model step: no federated tensor");
    if (rc == 0 && g->delta_on) {
        /* The delta is against the published file regions hold. */
        if (!strcmp(wpath, mpath))
            sp->pub = sp->wst;
        else if (sp->base != sp->wst)
            sp->pub = sp->base;
        else
            rc = fa_st_open(&sp->pub, mpath, err);
        sp->pt = calloc(nt, sizeof(*sp->pt));
        sp->pbuf = malloc(STEP_CHUNK * 8);
        sp->obuf = malloc(STEP_CHUNK * 8);
        sp->qbuf = malloc(STEP_CHUNK);
        sp->kbuf = malloc(STEP_CHUNK);
        sp->scbuf = malloc((STEP_CHUNK / FA_DELTA_MIN_BLOCK + 1) * sizeof(float));
        if (rc == 0 && (!sp->pt || !sp->pbuf || !sp->obuf || !sp->qbuf || !sp->kbuf || !sp->scbuf))
            rc = fa_errorf(err, FA_ERR_NOMEM, "model step: out of memory");
        for (size_t i = 0; rc == 0 && i < nt; i++) {
            const fa_tensor *x = fa_tensors_at(t, i);
            const fa_st_tensor *s;
            if (!x->federated || !fa_tensors_dtype_is_float(x->dtype))
                continue;
            s = fa_st_find(sp->pub, x->name);
            if (!s || s->dtype != x->dtype || s->numel != x->numel)
                rc = fa_errorf(err, FA_ERR_CORRUPT,
                               "%s: tensor '%s' missing, or of another dtype or size", mpath,
                               x->name);
            sp->pt[i] = s;
        }
    }
    if (rc == 0)
        rc = open_state(g, store, opt, &sp->sst, sp->st, 1, err);
    return rc;
}

/* The views of one file of the new version, the model (as_f32 0) or its
 * master weights (1), tensor by tensor in table order, and what each holds. */
static void model_views(struct stepper *sp, const fa_tensors *next, int as_f32, fa_st_view *views,
                        int *kinds)
{
    for (size_t i = 0; i < fa_tensors_count(next); i++) {
        const fa_tensor *x = fa_tensors_at(next, i);
        fa_st_dtype dtype = x->dtype; /* the dtype written */
        if (x->federated && !as_f32 && sp->g->delta_on && fa_tensors_dtype_is_float(x->dtype)) {
            kinds[i] = VIEW_PUB;
        } else if (x->federated) {
            kinds[i] = VIEW_FED;
            dtype = as_f32 ? FA_ST_F32 : x->dtype;
        } else if (as_f32 && fa_tensors_dtype_is_float(x->dtype) && x->dtype != FA_ST_F32) {
            kinds[i] = VIEW_WIDEN;
            dtype = FA_ST_F32;
        } else {
            kinds[i] = VIEW_RAW;
        }
        views[i] =
            (fa_st_view){.name = x->name, .dtype = dtype, .ndim = x->ndim, .shape = x->shape};
    }
}

/* The delta file of the new version (model/delta.h): the model file's
 * header as the store will write it, then per federated tensor its steps
 * and scales (floating) or its new bytes (integer). */
struct delta_out {
    uint8_t *hdr;
    uint64_t hdr_shape[1];
    fa_st_view *views;
    char **names;
    uint64_t *shapes; /* one per view */
    size_t n;
    char from[32], to[32], base[65], bits[8], block[16], size[32];
    const char *meta[14];
};

static void delta_out_free(struct delta_out *d)
{
    for (size_t i = 0; d->names && i < d->n; i++)
        free(d->names[i]);
    free(d->names);
    free(d->views);
    free(d->shapes);
    free(d->hdr);
}

static int delta_out_make(struct delta_out *d, struct stepper *sp, const fa_tensors *next,
                          const fa_model_files *files, const struct fa_model_version *cur,
                          uint64_t version, fa_error *err)
{
    const size_t nt = fa_tensors_count(next);
    const fa_st_dtype qdtype = sp->g->delta_bits == 4 ? FA_ST_U8 : FA_ST_I8; /* model/delta.h */
    fa_st_writer *w = NULL;
    const uint8_t *h;
    size_t h_len, k = 0;
    uint64_t total = 0;
    int rc;

    /* The header bytes the store's writer produces for the model file. */
    rc = fa_st_writer_new(&w, err);
    for (size_t i = 0; rc == 0 && i < files->n_model; i++)
        rc = fa_st_writer_add(w, files->model[i].name, files->model[i].dtype, files->model[i].ndim,
                              files->model[i].shape, err);
    for (size_t i = 0; rc == 0 && i < files->n_meta; i++)
        rc = fa_st_writer_metadata(w, files->meta[2 * i], files->meta[2 * i + 1], err);
    if (rc == 0)
        rc = fa_st_writer_header(w, &h, &h_len, err);
    if (rc == 0) {
        total = fa_st_writer_total_size(w);
        if (!(d->hdr = malloc(h_len)))
            rc = fa_errorf(err, FA_ERR_NOMEM, "model delta: out of memory");
        else
            memcpy(d->hdr, h, h_len);
    }
    fa_st_writer_del(w);
    if (rc != 0)
        return rc;
    d->views = calloc(1 + 2 * nt, sizeof(*d->views));
    d->names = calloc(1 + 2 * nt, sizeof(*d->names));
    d->shapes = calloc(1 + 2 * nt, sizeof(*d->shapes));
    if (!d->views || !d->names || !d->shapes)
        return fa_errorf(err, FA_ERR_NOMEM, "model delta: out of memory");
    d->hdr_shape[0] = h_len;
    d->views[k++] = (fa_st_view){.name = FA_DELTA_HEADER_TENSOR,
                                 .dtype = FA_ST_U8,
                                 .ndim = 1,
                                 .shape = d->hdr_shape,
                                 .data = d->hdr};
    for (size_t i = 0; i < nt; i++) {
        const fa_tensor *x = fa_tensors_at(next, i);
        const int fl = fa_tensors_dtype_is_float(x->dtype);
        if (!x->federated)
            continue; /* copied from the base by the region, as by the store */
        for (int part = 0; part < (fl ? 2 : 1); part++) {
            const char pfx = !fl ? 'r' : part == 0 ? 'q' : 's';
            size_t len = strlen(x->name) + 3;
            if (!(d->names[k] = malloc(len)))
                return fa_errorf(err, FA_ERR_NOMEM, "model delta: out of memory");
            snprintf(d->names[k], len, "%c.%s", pfx, x->name);
            d->shapes[k] = pfx == 's'   ? fa_delta_blocks(x->numel, sp->g->delta_block)
                           : pfx == 'q' ? fa_delta_q_bytes(x->numel, sp->g->delta_bits)
                                        : x->numel;
            d->views[k] = (fa_st_view){.name = d->names[k],
                                       .dtype = !fl         ? x->dtype
                                                : part == 0 ? qdtype
                                                            : FA_ST_F32,
                                       .ndim = fl ? 1 : x->ndim,
                                       .shape = fl ? &d->shapes[k] : x->shape};
            k++;
        }
    }
    d->n = k;
    snprintf(d->from, sizeof(d->from), "%" PRIu64, cur->version);
    snprintf(d->to, sizeof(d->to), "%" PRIu64, version);
    fa_hex_encode(d->base, sizeof(d->base), cur->model_sha256, 32);
    snprintf(d->bits, sizeof(d->bits), "%u", sp->g->delta_bits);
    snprintf(d->block, sizeof(d->block), "%u", sp->g->delta_block);
    snprintf(d->size, sizeof(d->size), "%" PRIu64, total);
    const char *m[] = {FA_DELTA_META_FORMAT, "1",    FA_DELTA_META_FROM,  d->from,
                       FA_DELTA_META_TO,     d->to,  FA_DELTA_META_BASE,  d->base,
                       FA_DELTA_META_BITS,   d->bits, FA_DELTA_META_BLOCK, d->block,
                       FA_DELTA_META_SIZE,   d->size};
    memcpy(d->meta, m, sizeof(m));
    return 0;
}

/* The new version's files in one pass over the table: each chunk of a
 * federated tensor is stepped once and written to every file that holds
 * it.  The state file's later vectors and a delta's scales are written
 * ahead of their file's order; the store reads them back once to hash
 * them (fa_model_commit_put). */
static int write_version(struct stepper *sp, fa_model_commit *c, const fa_tensors *next,
                         const int *kinds, const struct delta_out *dout,
                         fa_error *err)
{
    const size_t nt = fa_tensors_count(next);
    size_t dv = 1; /* the delta file's next view (0: the model file's header) */
    int rc = 0;

    if (dout)
        rc = fa_model_commit_put(c, FA_MODEL_FILE_DELTA, 0, 0, dout->hdr, dout->hdr_shape[0], err);
    for (size_t ti = 0; rc == 0 && ti < nt; ti++) {
        const fa_tensor *x = fa_tensors_at(next, ti);
        size_t dq = 0;
        if (!x->federated) {
            rc = write_other(sp, c, FA_MODEL_FILE_MODEL, ti, kinds[ti], err);
            if (rc == 0 && sp->g->need_master)
                rc = write_other(sp, c, FA_MODEL_FILE_MASTER, ti, kinds[nt + ti], err);
            continue;
        }
        if (dout) { /* steps and scales, or the new bytes of an integer tensor */
            dq = dv;
            dv += fa_tensors_dtype_is_float(x->dtype) ? 2 : 1;
        }
        for (uint64_t e = 0; rc == 0 && e < x->numel;) {
            size_t m = x->numel - e < STEP_CHUNK ? (size_t)(x->numel - e) : STEP_CHUNK;
            rc = write_fed_chunk(sp, c, x, ti, kinds[ti], dq, e, m, err);
            e += m;
        }
    }
    return rc;
}

int fa_global_model_step(fa_global_model *g, fa_model_store *store, uint64_t version,
                         uint64_t round, const fa_server_opt *opt, fa_global_model_delta_fn delta,
                         void *ctx, const char *const *meta, size_t n_meta,
                         const char *const *state_meta, size_t n_state_meta, fa_error *err)
{
    struct stepper sp;
    fa_tensors *next = NULL;
    const size_t nt = fa_tensors_count(g->table);
    fa_st_view *views = NULL, sviews[FA_SERVER_OPT_MAX_STATE];
    int *kinds = NULL; /* per view of the model and master files: what it holds */
    fa_model_commit *commit = NULL;
    uint64_t sshape[1] = {g->d};
    const char **all = NULL;
    size_t n_all = 0;
    char *json = NULL, arch[128];
    fa_model_files files = {0};
    struct delta_out dout;
    struct fa_model_version cur;
    int rc;

    memset(&sp, 0, sizeof(sp));
    memset(&dout, 0, sizeof(dout));
    sp.delta = delta;
    sp.dctx = ctx;
    rc = stepper_open(&sp, g, store, opt, err);
    if (rc == 0)
        rc = fa_tensors_clone(&next, g->table, err);
    /* The next round's ranges, which the model file's header carries before
     * any tensor: from the new weights and the mean delta, a pass of its own
     * (none for one fixed range). */
    for (size_t k = 0; rc == 0 && k < sp.n_fed; k++) {
        if (!g->adaptive) {
            rc = fa_tensors_set_range(next, sp.fed[k], range_of(g, 0, 0), err);
            continue;
        }
        const fa_tensor *x = fa_tensors_at(g->table, sp.fed[k]);
        float w_max = 0.0f, d_max = 0.0f;
        for (uint64_t e = 0; rc == 0 && e < x->numel;) {
            size_t m = x->numel - e < STEP_CHUNK ? (size_t)(x->numel - e) : STEP_CHUNK;
            rc = step_chunk(&sp, x->fed_offset + e, m, WANT_W, err);
            if (rc == 0) {
                float a = max_abs(sp.wbuf, m), b = max_abs(sp.dbuf, m);
                w_max = a > w_max ? a : w_max;
                d_max = b > d_max ? b : d_max;
            }
            e += m;
        }
        if (rc == 0)
            rc = fa_tensors_set_range(next, sp.fed[k], range_of(g, w_max, d_max), err);
    }
    if (rc == 0)
        rc = make_meta(g, next, meta, n_meta, &all, &n_all, &json, arch, sizeof(arch), err);
    if (rc == 0 &&
        (!(views = calloc(2 * nt, sizeof(*views))) || !(kinds = calloc(2 * nt, sizeof(*kinds)))))
        rc = fa_errorf(err, FA_ERR_NOMEM, "model step: out of memory");
    if (rc == 0) {
        model_views(&sp, next, 0, views, kinds);
        files.model = views;
        files.n_model = nt;
        files.meta = all;
        files.n_meta = n_all;
        if (g->need_master) {
            model_views(&sp, next, 1, views + nt, kinds + nt);
            files.master = views + nt;
            files.n_master = nt;
            files.master_meta = all;
            files.n_master_meta = n_all;
        }
        for (size_t i = 0; i < sp.ns; i++)
            sviews[i] = (fa_st_view){.name = fa_server_opt_state_name(opt, i),
                                     .dtype = FA_ST_F32,
                                     .ndim = 1,
                                     .shape = sshape};
        files.state = sviews;
        files.n_state = sp.ns;
        files.state_meta = state_meta;
        files.n_state_meta = n_state_meta;
        if (g->delta_on) {
            rc = fa_model_store_current(store, &cur);
            if (rc == 0)
                rc = delta_out_make(&dout, &sp, next, &files, &cur, version, err);
            files.delta = dout.views;
            files.n_delta = dout.n;
            files.delta_meta = dout.meta;
            files.n_delta_meta = sizeof(dout.meta) / sizeof(dout.meta[0]) / 2;
        }
        if (rc == 0)
            rc = fa_model_store_begin(store, version, round, &files, &commit, err);
        if (rc == 0)
            rc = write_version(&sp, commit, next, kinds, g->delta_on ? &dout : NULL, err);
        if (rc == 0) {
            rc = fa_model_store_finish(commit, err); /* frees it */
            commit = NULL;
        }
        fa_model_commit_abort(commit);
    }
    delta_out_free(&dout);
    stepper_free(&sp);
    free(views);
    free(kinds);
    free(all);
    free(json);
    if (rc != 0) {
        fa_tensors_del(next);
        return rc;
    }
    fa_tensors_del(g->table);
    g->table = next;
    return 0;
}

int fa_global_model_read_mlp(const fa_global_model *g, const fa_model_store *store,
                             uint64_t version, const fa_mlp_layout *l, float *params,
                             fa_error *err)
{
    char path[4096];
    fa_safetensors *st = NULL;
    int rc;

    if (!g->is_mlp)
        return fa_errorf(err, FA_ERR_INVAL, "the model is not the built-in MLP");
    if (!fa_model_store_weights_path(store, version, path, sizeof(path)))
        return fa_errorf(err, FA_ERR_NOTFOUND, "model version %" PRIu64 " is not retained",
                         version);
    /* Published as deltas, the model regions get is not the master: evaluate it. */
    if (g->delta_on)
        fa_model_store_model_path(store, version, path, sizeof(path));
    rc = fa_st_open(&st, path, err);
    for (uint32_t i = 0; rc == 0 && i < l->n_tensors; i++) {
        const fa_st_tensor *s = fa_st_find(st, l->tensors[i].name);
        if (!s)
            rc = fa_errorf(err, FA_ERR_CORRUPT, "%s: no tensor '%s'", path, l->tensors[i].name);
        else
            rc = fa_st_read_f32(st, s, params + l->tensors[i].offset, l->tensors[i].numel, err);
    }
    fa_st_del(st);
    return rc;
}
