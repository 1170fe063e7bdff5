/* mlp.c - MLP architecture, parameter layout, He initialisation,
 * safetensors I/O, and the front of the compute backends. */
#include "model/mlp.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fa_log.h"
#include "model/backend.h"
#include "model/rng.h"

/* ---------------------------------------------------------------------- */
/* Architecture and layout                                                 */
/* ---------------------------------------------------------------------- */

void fa_mlp_config_default(fa_mlp_config *c)
{
    memset(c, 0, sizeof(*c));
    c->n_layers = 3;
    c->dims[0] = 784;
    c->dims[1] = 256;
    c->dims[2] = 128;
    c->dims[3] = 10;
}

static int config_check(const fa_mlp_config *c, fa_error *err)
{
    if (c->n_layers < 1 || c->n_layers > FA_MLP_MAX_LAYERS)
        return fa_errorf(err, FA_ERR_INVAL, "mlp: %u linear layers (must be 1..%d)", c->n_layers,
                         FA_MLP_MAX_LAYERS);
    for (uint32_t i = 0; i <= c->n_layers; i++)
        if (c->dims[i] == 0 || c->dims[i] > FA_MLP_MAX_DIM)
            return fa_errorf(err, FA_ERR_INVAL, "mlp: layer width %u at position %u (must be 1..%u)",
                             c->dims[i], i, FA_MLP_MAX_DIM);
    if (c->dims[c->n_layers] > FA_MLP_MAX_CLASSES || c->dims[c->n_layers] < 2)
        return fa_errorf(err, FA_ERR_INVAL, "mlp: %u classes (must be 2..%d)",
                         c->dims[c->n_layers], FA_MLP_MAX_CLASSES);
    return 0;
}

int fa_mlp_config_make(fa_mlp_config *c, uint32_t input, const uint32_t *hidden,
                       uint32_t n_hidden, uint32_t classes, fa_error *err)
{
    memset(c, 0, sizeof(*c));
    if (n_hidden + 1 > FA_MLP_MAX_LAYERS)
        return fa_errorf(err, FA_ERR_INVAL, "mlp: %u hidden layers (at most %d)", n_hidden,
                         FA_MLP_MAX_LAYERS - 1);
    c->n_layers = n_hidden + 1;
    c->dims[0] = input;
    for (uint32_t i = 0; i < n_hidden; i++)
        c->dims[i + 1] = hidden[i];
    c->dims[n_hidden + 1] = classes;
    return config_check(c, err);
}

char *fa_mlp_config_str(const fa_mlp_config *c, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i <= c->n_layers && i <= FA_MLP_MAX_LAYERS && used < n; i++) {
        int w = snprintf(buf + used, n - used, i ? "-%u" : "%u", c->dims[i]);
        if (w < 0)
            break;
        used += (size_t)w;
    }
    return buf;
}

int fa_mlp_layout_init(fa_mlp_layout *l, const fa_mlp_config *c, fa_error *err)
{
    size_t off = 0;
    int rc;

    memset(l, 0, sizeof(*l));
    if ((rc = config_check(c, err)) != 0)
        return rc;
    l->config = *c;
    for (uint32_t i = 0; i < c->n_layers; i++) {
        fa_mlp_tensor *w = &l->tensors[2 * i], *b = w + 1;
        snprintf(w->name, sizeof(w->name), "fc%u.weight", i + 1);
        w->layer = i;
        w->ndim = 2;
        w->shape[0] = c->dims[i + 1];
        w->shape[1] = c->dims[i];
        w->numel = (size_t)c->dims[i + 1] * c->dims[i];
        w->offset = off;
        off += w->numel;
        snprintf(b->name, sizeof(b->name), "fc%u.bias", i + 1);
        b->layer = i;
        b->is_bias = 1;
        b->ndim = 1;
        b->shape[0] = c->dims[i + 1];
        b->numel = c->dims[i + 1];
        b->offset = off;
        off += b->numel;
    }
    l->n_tensors = 2 * c->n_layers;
    l->n_params = off;
    return 0;
}

const fa_mlp_tensor *fa_mlp_layout_find(const fa_mlp_layout *l, const char *name)
{
    for (uint32_t i = 0; i < l->n_tensors; i++)
        if (strcmp(l->tensors[i].name, name) == 0)
            return &l->tensors[i];
    return NULL;
}

void fa_mlp_init_he(const fa_mlp_layout *l, float *params, uint64_t seed)
{
    for (uint32_t i = 0; i < l->n_tensors; i++) {
        const fa_mlp_tensor *t = &l->tensors[i];
        float *p = params + t->offset;
        if (t->is_bias) {
            memset(p, 0, t->numel * sizeof(float));
            continue;
        }
        /* One stream per layer: a layer's values do not depend on the others' sizes. */
        fa_rng r;
        double stddev = sqrt(2.0 / (double)t->shape[1]);
        fa_rng_seed(&r, seed, t->layer);
        for (size_t k = 0; k < t->numel; k++)
            p[k] = (float)(stddev * fa_rng_normal(&r));
    }
}

/* ---------------------------------------------------------------------- */
/* safetensors                                                              */
/* ---------------------------------------------------------------------- */

int fa_mlp_save(const char *path, unsigned mode, const fa_mlp_layout *l, const float *params,
                const char *const *meta, size_t n_meta, fa_error *err)
{
    fa_st_writer *w = NULL;
    char arch[128];
    int rc = fa_st_writer_new(&w, err);

    for (uint32_t i = 0; rc == 0 && i < l->n_tensors; i++) {
        const fa_mlp_tensor *t = &l->tensors[i];
        uint64_t shape[2] = {t->shape[0], t->shape[1]};
        rc = fa_st_writer_add(w, t->name, FA_ST_F32, t->ndim, shape, err);
    }
    if (rc == 0)
        rc = fa_st_writer_metadata(w, "format", "pt", err);
    if (rc == 0)
        rc = fa_st_writer_metadata(w, "fedagg.arch",
                                   fa_mlp_config_str(&l->config, arch, sizeof(arch)), err);
    for (size_t i = 0; rc == 0 && i < n_meta; i++)
        rc = fa_st_writer_metadata(w, meta[2 * i], meta[2 * i + 1], err);
    if (rc == 0)
        rc = fa_st_writer_open(w, path, mode, err);
    /* The block is already in file order: one write. */
    if (rc == 0)
        rc = fa_st_writer_write(w, params, l->n_params * sizeof(float), err);
    if (rc == 0)
        rc = fa_st_writer_commit(w, err);
    fa_st_writer_del(w);
    return rc;
}

static void shape_str(char *buf, size_t n, unsigned ndim, const uint64_t *shape)
{
    size_t used = (size_t)snprintf(buf, n, "[");
    for (unsigned i = 0; i < ndim && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, i ? ", %" PRIu64 : "%" PRIu64, shape[i]);
    if (used < n)
        snprintf(buf + used, n - used, "]");
}

int fa_mlp_load_st(const fa_safetensors *st, const fa_mlp_layout *l, float *params,
                   fa_error *err)
{
    char arch[128], have[128], want[128];
    int rc;

    fa_mlp_config_str(&l->config, arch, sizeof(arch));
    for (size_t i = 0; i < fa_st_count(st); i++) {
        const char *name = fa_st_at(st, i)->name;
        if (!fa_mlp_layout_find(l, name))
            return fa_errorf(err, FA_ERR_INVAL,
                             "unexpected tensor '%s' (the %s model has fc1..fc%u .weight/.bias)",
                             name, arch, l->config.n_layers);
    }
    for (uint32_t i = 0; i < l->n_tensors; i++) {
        const fa_mlp_tensor *m = &l->tensors[i];
        const fa_st_tensor *t = fa_st_find(st, m->name);
        uint64_t shape[2] = {m->shape[0], m->shape[1]};
        if (!t)
            return fa_errorf(err, FA_ERR_NOTFOUND, "tensor '%s' of the %s model is missing",
                             m->name, arch);
        if (t->dtype != FA_ST_F32)
            return fa_errorf(err, FA_ERR_INVAL,
                             "tensor '%s': dtype %s, the model is F32 (in PyTorch: "
                             "tensor.float())",
                             m->name, fa_st_dtype_name(t->dtype));
        if (t->ndim != m->ndim || t->shape[0] != shape[0] || (m->ndim == 2 && t->shape[1] != shape[1])) {
            shape_str(have, sizeof(have), t->ndim, t->shape);
            shape_str(want, sizeof(want), m->ndim, shape);
            return fa_errorf(err, FA_ERR_INVAL,
                             "tensor '%s': shape %s, the %s model needs %s%s", m->name, have, arch,
                             want, m->is_bias ? "" : " (out_features, in_features)");
        }
        if ((rc = fa_st_read(st, t, params + m->offset, m->numel * sizeof(float), err)) != 0)
            return rc;
    }
    return 0;
}

int fa_mlp_load(const char *path, const fa_mlp_layout *l, float *params, fa_error *err)
{
    fa_safetensors *st;
    int rc = fa_st_open(&st, path, err);
    if (rc != 0)
        return rc;
    rc = fa_mlp_load_st(st, l, params, err);
    fa_st_del(st);
    if (rc != 0)
        fa_error_prefix(err, rc, "%s", path);
    return rc;
}

int fa_mlp_config_from_st(const fa_safetensors *st, fa_mlp_config *c, fa_error *err)
{
    size_t n = fa_st_count(st);
    uint32_t L = (uint32_t)(n / 2);

    memset(c, 0, sizeof(*c));
    if (n == 0 || n % 2 != 0 || L > FA_MLP_MAX_LAYERS)
        return fa_errorf(err, FA_ERR_INVAL,
                         "%zu tensors: an MLP has fc<l>.weight and fc<l>.bias for l = 1..L "
                         "(L <= %d)",
                         n, FA_MLP_MAX_LAYERS);
    c->n_layers = L;
    for (uint32_t l = 1; l <= L; l++) {
        char wn[32], bn[32];
        snprintf(wn, sizeof(wn), "fc%u.weight", l);
        snprintf(bn, sizeof(bn), "fc%u.bias", l);
        const fa_st_tensor *w = fa_st_find(st, wn), *b = fa_st_find(st, bn);
        if (!w || !b)
            return fa_errorf(err, FA_ERR_INVAL, "tensor '%s' is missing", !w ? wn : bn);
        if (w->dtype != FA_ST_F32 || b->dtype != FA_ST_F32)
            return fa_errorf(err, FA_ERR_INVAL, "tensor '%s': dtype %s, expected F32",
                             w->dtype != FA_ST_F32 ? wn : bn,
                             fa_st_dtype_name(w->dtype != FA_ST_F32 ? w->dtype : b->dtype));
        if (w->ndim != 2 || w->shape[0] == 0 || w->shape[0] > FA_MLP_MAX_DIM ||
            w->shape[1] == 0 || w->shape[1] > FA_MLP_MAX_DIM)
            return fa_errorf(err, FA_ERR_INVAL, "tensor '%s': not a 2-D (out, in) weight", wn);
        if (b->ndim != 1 || b->shape[0] != w->shape[0])
            return fa_errorf(err, FA_ERR_INVAL, "tensor '%s': shape must be [%" PRIu64 "]", bn,
                             w->shape[0]);
        if (l == 1)
            c->dims[0] = (uint32_t)w->shape[1];
        else if (w->shape[1] != c->dims[l - 1])
            return fa_errorf(err, FA_ERR_INVAL,
                             "tensor '%s': in_features %" PRIu64 " but fc%u has %u outputs", wn,
                             w->shape[1], l - 1, c->dims[l - 1]);
        c->dims[l] = (uint32_t)w->shape[0];
    }
    return config_check(c, err);
}

/* ---------------------------------------------------------------------- */
/* The network on a backend                                                 */
/* ---------------------------------------------------------------------- */

struct fa_mlp {
    fa_mlp_layout layout;
    fa_mlp_opts opts;
    const struct fa_backend_ops *ops;
    fa_backend *be;
};

void fa_mlp_opts_default(fa_mlp_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->backend = FA_MLP_AUTO;
    o->gpu = -1;
    o->max_batch = 256;
    o->cpu_threads = 0;
}

#ifdef FA_HAVE_CUDA
/* Stand-ins for the GPU backend in a program that does not link it
 * (model/CMakeLists.txt): backend_cuda.cu's definitions replace these. */
__attribute__((weak)) const struct fa_backend_ops fa_backend_gpu;
__attribute__((weak)) int fa_backend_gpu_count(char *why, size_t n)
{
    snprintf(why, n, "this program is built without the GPU backend (the worker, the benchmarks "
                     "and the tests carry it)");
    return 0;
}
#endif

int fa_mlp_gpu_count(void)
{
#ifdef FA_HAVE_CUDA
    char why[256];
    return fa_backend_gpu_count(why, sizeof(why));
#else
    return 0;
#endif
}

int fa_mlp_new(fa_mlp **out, const fa_mlp_config *c, const fa_mlp_opts *opts, fa_error *err)
{
    fa_mlp *m;
    int rc;

    *out = NULL;
    m = calloc(1, sizeof(*m));
    if (!m)
        return fa_errorf(err, FA_ERR_NOMEM, "mlp: out of memory");
    if (opts)
        m->opts = *opts;
    else
        fa_mlp_opts_default(&m->opts);
    if (m->opts.max_batch == 0 || m->opts.max_batch > (1u << 20)) {
        rc = fa_errorf(err, FA_ERR_INVAL, "mlp: max_batch %u (must be 1..%u)", m->opts.max_batch,
                       1u << 20);
        goto fail;
    }
    if ((rc = fa_mlp_layout_init(&m->layout, c, err)) != 0)
        goto fail;

    m->ops = &fa_backend_cpu;
    if (m->opts.backend == FA_MLP_GPU || m->opts.backend == FA_MLP_AUTO) {
#ifdef FA_HAVE_CUDA
        char why[256] = "";
        if (fa_backend_gpu_count(why, sizeof(why)) > 0) {
            m->ops = &fa_backend_gpu;
        } else if (m->opts.backend == FA_MLP_GPU) {
            rc = fa_errorf(err, FA_ERR_NODEVICE, "mlp: GPU backend requested but no GPU device: %s",
                           why);
            goto fail;
        } else {
            fa_log(FA_LOG_INFO, "no GPU device, training on the CPU", "reason=\"%s\"", why);
        }
#else
        if (m->opts.backend == FA_MLP_GPU) {
            rc = fa_errorf(err, FA_ERR_UNSUPPORTED,
                           "mlp: GPU backend requested but this build has no CUDA support "
                           "(configure with -DFEDAGG_CUDA=ON)");
            goto fail;
        }
#endif
    } else if (m->opts.backend != FA_MLP_CPU) {
        rc = fa_errorf(err, FA_ERR_INVAL, "mlp: unknown backend %d", m->opts.backend);
        goto fail;
    }
    if ((rc = m->ops->create(&m->be, &m->layout, &m->opts, err)) != 0)
        goto fail;
    *out = m;
    return 0;
fail:
    free(m);
    return rc;
}

void fa_mlp_del(fa_mlp *m)
{
    if (!m)
        return;
    m->ops->destroy(m->be);
    free(m);
}

const fa_mlp_layout *fa_mlp_layout_of(const fa_mlp *m) { return &m->layout; }
int fa_mlp_backend(const fa_mlp *m) { return m->ops->kind; }
const char *fa_mlp_backend_name(const fa_mlp *m) { return m->ops->name; }

int fa_mlp_set_params(fa_mlp *m, const float *params, fa_error *err)
{
    return m->ops->set_params(m->be, params, err);
}

int fa_mlp_get_params(fa_mlp *m, float *params, fa_error *err)
{
    return m->ops->get_params(m->be, params, err);
}

int fa_mlp_init(fa_mlp *m, uint64_t seed, fa_error *err)
{
    float *p = malloc(m->layout.n_params * sizeof(float));
    int rc;
    if (!p)
        return fa_errorf(err, FA_ERR_NOMEM, "mlp: out of memory");
    fa_mlp_init_he(&m->layout, p, seed);
    rc = fa_mlp_set_params(m, p, err);
    free(p);
    return rc;
}

static int check_batch(const fa_mlp *m, const uint8_t *y, uint32_t n, fa_error *err)
{
    const uint32_t C = m->layout.config.dims[m->layout.config.n_layers];
    if (n > m->opts.max_batch)
        return fa_errorf(err, FA_ERR_INVAL, "mlp: batch of %u examples exceeds max_batch %u", n,
                         m->opts.max_batch);
    for (uint32_t i = 0; i < n; i++)
        if (y[i] >= C)
            return fa_errorf(err, FA_ERR_INVAL, "mlp: label %u of example %u is not below %u classes",
                             y[i], i, C);
    return 0;
}

int fa_mlp_forward_backward(fa_mlp *m, const float *x, const uint8_t *y, uint32_t n,
                            uint32_t scale_n, fa_mlp_stats *stats, fa_error *err)
{
    int rc;
    if ((rc = check_batch(m, y, n, err)) != 0)
        return rc;
    if (scale_n == 0 || scale_n < n)
        return fa_errorf(err, FA_ERR_INVAL, "mlp: gradient scale over %u examples for a part of %u",
                         scale_n, n);
    return m->ops->run(m->be, x, y, n, 1, 1.0f / (float)scale_n, NULL, stats, err);
}

int fa_mlp_forward_backward_clipped(fa_mlp *m, const float *x, const uint8_t *y, uint32_t n,
                                    float clip, float scale, int accumulate, float *norms,
                                    fa_mlp_stats *stats, fa_error *err)
{
    int rc;
    if ((rc = check_batch(m, y, n, err)) != 0)
        return rc;
    if (!(clip > 0.0f) || !isfinite(clip) || !isfinite(scale))
        return fa_errorf(err, FA_ERR_INVAL, "mlp: clip %g, scale %g (clip must be finite and > 0)",
                         clip, scale);
    return m->ops->run_dp(m->be, x, y, n, clip, scale, accumulate, norms, stats, err);
}

int fa_mlp_grads_add_host(fa_mlp *m, const float *v, fa_error *err)
{
    return m->ops->grads_add_host(m->be, v, err);
}

uint32_t fa_mlp_max_batch(const fa_mlp *m) { return m->opts.max_batch; }

int fa_mlp_forward(fa_mlp *m, const float *x, const uint8_t *y, uint32_t n, float *logits,
                   fa_mlp_stats *stats, fa_error *err)
{
    int rc;
    if ((rc = check_batch(m, y, n, err)) != 0)
        return rc;
    return m->ops->run(m->be, x, y, n, 0, 0.0f, logits, stats, err);
}

float *fa_mlp_grads(fa_mlp *m, int *on_device)
{
    if (on_device)
        *on_device = m->ops->kind == FA_MLP_GPU;
    return m->ops->grads(m->be);
}

int fa_mlp_grads_to_host(fa_mlp *m, float *dst, fa_error *err)
{
    return m->ops->grads_to_host(m->be, dst, err);
}

int fa_mlp_grads_from_host(fa_mlp *m, const float *src, fa_error *err)
{
    return m->ops->grads_from_host(m->be, src, err);
}

void *fa_mlp_cuda_stream(fa_mlp *m) { return m->ops->stream(m->be); }

int fa_mlp_sgd_step(fa_mlp *m, const fa_sgd *opt, fa_error *err)
{
    if (!(opt->lr >= 0.0f) || !(opt->momentum >= 0.0f) || !(opt->weight_decay >= 0.0f))
        return fa_errorf(err, FA_ERR_INVAL, "sgd: lr %g, momentum %g, weight decay %g (must be >= 0)",
                         opt->lr, opt->momentum, opt->weight_decay);
    return m->ops->sgd_step(m->be, opt, err);
}

int fa_mlp_reset_momentum(fa_mlp *m, fa_error *err) { return m->ops->reset_momentum(m->be, err); }

int fa_mlp_get_momentum(fa_mlp *m, float *host, fa_error *err)
{
    return m->ops->get_momentum(m->be, host, err);
}

int fa_mlp_set_momentum(fa_mlp *m, const float *host, fa_error *err)
{
    return m->ops->set_momentum(m->be, host, err);
}

int fa_mlp_evaluate(fa_mlp *m, const fa_dataset *d, fa_mlp_eval *out, fa_error *err)
{
    double loss = 0.0;
    uint64_t correct = 0;
    int rc;

    memset(out, 0, sizeof(*out));
    if (d->dim != m->layout.config.dims[0])
        return fa_errorf(err, FA_ERR_INVAL, "evaluate: data has %u features, the model takes %u",
                         d->dim, m->layout.config.dims[0]);
    if (d->n == 0)
        return fa_errorf(err, FA_ERR_INVAL, "evaluate: empty data set");
    for (uint32_t i = 0; i < d->n; i += m->opts.max_batch) {
        uint32_t n = d->n - i < m->opts.max_batch ? d->n - i : m->opts.max_batch;
        fa_mlp_stats st;
        if ((rc = check_batch(m, d->y + i, n, err)) != 0)
            return fa_error_prefix(err, rc, "evaluate: examples %u..", i);
        if ((rc = m->ops->run(m->be, d->x + (size_t)i * d->dim, d->y + i, n, 0, 0.0f, NULL, &st,
                              err)) != 0)
            return rc;
        loss += st.loss_sum;
        correct += st.correct;
    }
    out->n = d->n;
    out->accuracy = (double)correct / d->n;
    out->mean_loss = loss / d->n;
    return 0;
}
