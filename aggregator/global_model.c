/* global_model.c - the aggregator's global model.  See global_model.h. */
#include "aggregator/global_model.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fa_log.h"

struct fa_global_model {
    fa_tensors *table; /* the current version's: federated flags, ranges */
    float *params;     /* (d) master weights of the federated tensors */
    uint64_t d;
    int adaptive; /* RANGE_ADAPTIVE */
    double headroom, initial, floor_rel, min_range, fixed;
    int need_master; /* a federated tensor is not F32 */
    int is_mlp;
    fa_mlp_config mlp;
    uint8_t digest[32];
};

const fa_tensors *fa_global_model_table(const fa_global_model *g) { return g->table; }
const float *fa_global_model_params(const fa_global_model *g) { return g->params; }
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

/* Ranges of the round that trains from params: from the weights alone
 * (delta NULL: the first round) or from the last aggregate too. */
static int set_ranges(const fa_global_model *g, fa_tensors *t, const float *params,
                      const float *delta, fa_error *err)
{
    for (size_t i = 0; i < fa_tensors_count(t); i++) {
        const fa_tensor *x = fa_tensors_at(t, i);
        double r;
        int rc;
        if (!x->federated)
            continue;
        if (!g->adaptive) {
            r = g->fixed;
        } else {
            double w = max_abs(params + x->fed_offset, x->numel);
            if (!delta) {
                r = g->initial * w;
            } else {
                double dm = max_abs(delta + x->fed_offset, x->numel);
                r = g->headroom * dm;
                if (g->floor_rel * w > r)
                    r = g->floor_rel * w;
            }
            if (g->min_range > r)
                r = g->min_range;
        }
        rc = fa_tensors_set_range(t, i, as_range(r), err);
        if (rc != 0)
            return rc;
    }
    return 0;
}

void fa_global_model_unscale(const fa_global_model *g, float *delta)
{
    if (!g->adaptive)
        return;
    for (size_t i = 0; i < fa_tensors_count(g->table); i++) {
        const fa_tensor *x = fa_tensors_at(g->table, i);
        float *restrict p = delta + x->fed_offset;
        const float r = x->range;
        if (!x->federated)
            continue;
        for (uint64_t k = 0; k < x->numel; k++)
            p[k] *= r;
    }
}

/* The table the configuration describes: init_file's tensors, or the
 * built-in MLP's, with the configured selection.  *init (init_file only)
 * stays open for the caller. */
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
    const char **m = calloc(2 * (n_meta + 2), sizeof(*m));
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

/* Writes a version: t's tensors from params (federated) and base (the
 * others; NULL when block holds every tensor of an MLP in float32). */
static int write_version(fa_global_model *g, fa_model_store *store, uint64_t version,
                         uint64_t round, const fa_tensors *t, const float *params,
                         const fa_safetensors *base, const float *block,
                         const fa_mlp_layout *layout, const char *const *meta, size_t n_meta,
                         const fa_st_view *state, size_t n_state, const char *const *state_meta,
                         size_t n_state_meta, fa_error *err)
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
        /* The built-in MLP's version 0: every tensor F32, straight from its block. */
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
        rc = fa_tensors_out_new(&out, t, params, g->d, base, 0, err);
        if (rc == 0 && g->need_master)
            rc = fa_tensors_out_new(&master, t, params, g->d, base, 1, err);
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
    files.state = state;
    files.n_state = n_state;
    files.state_meta = state_meta;
    files.n_state_meta = n_state_meta;
    rc = fa_model_store_commit(store, version, round, &files, err);
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

/* The stored current version: its table (with ranges) and master weights. */
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
    for (size_t i = 0; rc == 0 && i < fa_tensors_count(t); i++) {
        const fa_tensor *x = fa_tensors_at(t, i);
        if (x->federated && !(x->range > 0))
            rc = fa_errorf(err, FA_ERR_CORRUPT, "%s: federated tensor '%s' has no range", mpath,
                           x->name);
    }
    if (rc == 0 && !(g->params = malloc((g->d ? g->d : 1) * sizeof(float))))
        rc = fa_errorf(err, FA_ERR_NOMEM, "model of %" PRIu64 " parameters: out of memory", g->d);
    if (rc == 0)
        rc = fa_st_open(&ws, wpath, err);
    for (size_t i = 0; rc == 0 && i < fa_tensors_count(t); i++) {
        const fa_tensor *x = fa_tensors_at(t, i);
        const fa_st_tensor *s;
        if (!x->federated)
            continue;
        s = fa_st_find(ws, x->name);
        if (!s || s->numel != x->numel)
            rc = fa_errorf(err, FA_ERR_CORRUPT, "%s: tensor '%s' missing or of another size",
                           wpath, x->name);
        else
            rc = fa_st_read_f32(ws, s, g->params + x->fed_offset, (size_t)x->numel, err);
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

/* Version 0 from the configuration. */
static int create_initial(fa_global_model *g, const Fedagg__AggregatorConfig *cfg,
                          fa_model_store *store, fa_tensors *t, fa_safetensors *init,
                          const fa_mlp_layout *layout, const char *const *meta, size_t n_meta,
                          fa_error *err)
{
    const Fedagg__ModelSpec *ms = cfg->model;
    float *block = NULL;
    int rc = 0;

    if (!(g->params = malloc((g->d ? g->d : 1) * sizeof(float))))
        return fa_errorf(err, FA_ERR_NOMEM, "model of %" PRIu64 " parameters: out of memory",
                         g->d);
    if (init) {
        rc = fa_tensors_read_fed(t, init, g->params, (size_t)g->d, 1, ms->init_file, err);
    } else {
        if (!(block = malloc(layout->n_params * sizeof(float))))
            return fa_errorf(err, FA_ERR_NOMEM, "model: out of memory");
        fa_mlp_init_he(layout, block, ms && ms->has_init_seed ? ms->init_seed : 1);
        for (uint32_t i = 0; i < layout->n_tensors; i++) {
            const fa_mlp_tensor *m = &layout->tensors[i];
            const fa_tensor *x = fa_tensors_find(t, m->name);
            if (x && x->federated)
                memcpy(g->params + x->fed_offset, block + m->offset, m->numel * sizeof(float));
        }
    }
    if (rc == 0)
        rc = set_ranges(g, t, g->params, NULL, err);
    if (rc == 0)
        rc = write_version(g, store, 0, 0, t, g->params, init, init ? NULL : block, layout, meta,
                           n_meta, NULL, 0, NULL, 0, err);
    free(block);
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
    g->fixed = q->clip_value;
    memset(&layout, 0, sizeof(layout));
    rc = config_table(g, cfg, &want, &init, &layout, err);
    if (rc != 0)
        goto fail;
    g->d = fa_tensors_fed_numel(want);
    for (size_t i = 0; i < fa_tensors_count(want); i++) {
        const fa_tensor *x = fa_tensors_at(want, i);
        if (x->federated && x->dtype != FA_ST_F32)
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

void fa_global_model_del(fa_global_model *g)
{
    if (!g)
        return;
    fa_tensors_del(g->table);
    free(g->params);
    free(g);
}

int fa_global_model_commit(fa_global_model *g, fa_model_store *store, uint64_t version,
                           uint64_t round, const float *new_params, const float *mean_delta,
                           const char *const *meta, size_t n_meta, const fa_st_view *state,
                           size_t n_state, const char *const *state_meta, size_t n_state_meta,
                           fa_error *err)
{
    struct fa_model_version cur;
    fa_tensors *next = NULL;
    fa_safetensors *base = NULL;
    char path[4096];
    int rc;

    if (fa_model_store_current(store, &cur) != 0)
        return fa_errorf(err, FA_ERR_STATE, "model store: no current version");
    fa_model_store_model_path(store, cur.version, path, sizeof(path));
    rc = fa_tensors_clone(&next, g->table, err);
    if (rc == 0)
        rc = set_ranges(g, next, new_params, mean_delta, err);
    if (rc == 0 && fa_tensors_fed_count(next) < fa_tensors_count(next))
        rc = fa_st_open(&base, path, err); /* the tensors that are not federated */
    if (rc == 0)
        rc = write_version(g, store, version, round, next, new_params, base, NULL, NULL, meta,
                           n_meta, state, n_state, state_meta, n_state_meta, err);
    fa_st_del(base);
    if (rc != 0) {
        fa_tensors_del(next);
        return rc;
    }
    fa_tensors_del(g->table);
    g->table = next;
    memcpy(g->params, new_params, g->d * sizeof(float));
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
