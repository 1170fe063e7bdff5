/* builtin_model.c - the built-in MLP against a tensor table, by name
 * (builtin_model.h). */
#include "worker/builtin_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char not_mlp[] =
    "the built-in trainer trains the built-in MLP only (fc1.weight, fc1.bias, ... fcL.bias, "
    "floating dtypes); this model needs an external trainer (trainer { external { command: "
    "[...] } })";

int fa_builtin_config(const fa_safetensors *st, fa_mlp_config *mc, fa_error *err)
{
    fa_st_writer *w = NULL;
    fa_safetensors *shadow = NULL;
    const uint8_t *hdr;
    size_t len;
    int rc;

    /* fa_mlp_config_from_st wants F32: it reads the same header with every
     * floating tensor declared F32 (a header only: no bytes are read). */
    rc = fa_st_writer_new(&w, err);
    for (size_t i = 0; rc == 0 && i < fa_st_count(st); i++) {
        const fa_st_tensor *x = fa_st_at(st, i);
        rc =
            fa_st_writer_add(w, x->name, fa_tensors_dtype_is_float(x->dtype) ? FA_ST_F32 : x->dtype,
                             x->ndim, x->shape, err);
    }
    if (rc == 0)
        rc = fa_st_writer_header(w, &hdr, &len, err);
    if (rc == 0)
        rc = fa_st_parse_header(&shadow, hdr + 8, len - 8, fa_st_writer_total_size(w) - len,
                                "the global model", err);
    if (rc == 0) {
        rc = fa_mlp_config_from_st(shadow, mc, err);
        if (rc != 0) {
            fa_error_prefix(err, rc, "%s: the global model does not fit it", not_mlp);
            rc = FA_ERR_UNSUPPORTED;
            if (err)
                err->code = rc;
        }
    }
    fa_st_del(shadow);
    fa_st_writer_del(w);
    return rc;
}

/* "[4, 3]" */
static void shape_str(unsigned ndim, const uint64_t *shape, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    len += (size_t)snprintf(buf, n, "[");
    for (unsigned i = 0; i < ndim && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%llu", i ? ", " : "",
                                (unsigned long long)shape[i]);
    if (len < n)
        snprintf(buf + len, n - len, "]");
}

int fa_builtin_map_init(fa_builtin_map *m, const fa_mlp_layout *l, const fa_tensors *t,
                        fa_error *err)
{
    memset(m, 0, sizeof(*m));
    m->layout = *l;
    m->d = (size_t)fa_tensors_fed_numel(t);
    if (fa_tensors_count(t) != l->n_tensors) {
        for (size_t i = 0; i < fa_tensors_count(t); i++)
            if (!fa_mlp_layout_find(l, fa_tensors_at(t, i)->name))
                return fa_errorf(err, FA_ERR_UNSUPPORTED, "%s: tensor '%s' is not part of it",
                                 not_mlp, fa_tensors_at(t, i)->name);
    }
    for (uint32_t k = 0; k < l->n_tensors; k++) {
        const fa_mlp_tensor *p = &l->tensors[k];
        long i = fa_tensors_index(t, p->name);
        const fa_tensor *x = i >= 0 ? fa_tensors_at(t, (size_t)i) : NULL;
        int same = x && x->ndim == p->ndim;
        for (uint32_t j = 0; same && j < p->ndim; j++)
            same = x->shape[j] == p->shape[j];
        if (!x)
            return fa_errorf(err, FA_ERR_UNSUPPORTED, "%s: the model has no tensor '%s'", not_mlp,
                             p->name);
        if (!fa_tensors_dtype_is_float(x->dtype))
            return fa_errorf(err, FA_ERR_UNSUPPORTED, "%s: tensor '%s' is %s", not_mlp, p->name,
                             fa_st_dtype_name(x->dtype));
        if (!same) {
            char a[96], b[96];
            shape_str(x->ndim, x->shape, a, sizeof(a));
            shape_str(p->ndim, (const uint64_t[2]){p->shape[0], p->shape[1]}, b, sizeof(b));
            return fa_errorf(err, FA_ERR_UNSUPPORTED,
                             "the global model's tensor '%s' has shape %s, the network's is %s",
                             p->name, a, b);
        }
        m->index[k] = i;
        m->federated[k] = x->federated;
        m->fed_offset[k] = x->fed_offset;
    }
    if (fa_tensors_count(t) != l->n_tensors)
        return fa_errorf(err, FA_ERR_UNSUPPORTED, "%s: the model has %zu tensors, the network %u",
                         not_mlp, fa_tensors_count(t), l->n_tensors);
    return 0;
}

/* Tensor name of st, converted to float32 into dst (numel floats). */
static int read_as_f32(const fa_safetensors *st, const char *name, float *dst, size_t numel,
                       fa_error *err)
{
    const fa_st_tensor *x = fa_st_find(st, name);
    size_t nb;
    void *raw;
    int rc;

    if (!x || x->numel != numel)
        return fa_errorf(err, FA_ERR_INVAL, "tensor '%s' is missing or has another size", name);
    nb = (size_t)(x->end - x->begin);
    raw = malloc(nb ? nb : 1);
    if (!raw)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    rc = fa_st_read(st, x, raw, nb, err);
    if (rc == 0)
        fa_tensors_to_f32(x->dtype, raw, dst, numel);
    free(raw);
    return rc;
}

int fa_builtin_load(const fa_builtin_map *m, const fa_tensors *t, const float *fed,
                    const fa_safetensors *st, const fa_safetensors *local, float *params,
                    fa_error *err)
{
    for (uint32_t k = 0; k < m->layout.n_tensors; k++) {
        const fa_mlp_tensor *p = &m->layout.tensors[k];
        float *dst = params + p->offset;
        int rc;

        if (m->federated[k]) {
            memcpy(dst, fed + m->fed_offset[k], p->numel * sizeof(float));
            continue;
        }
        if (local && fa_st_find(local, p->name))
            rc = read_as_f32(local, p->name, dst, p->numel, err);
        else
            rc = read_as_f32(st, p->name, dst, p->numel, err);
        if (rc != 0)
            return rc;
    }
    (void)t;
    return 0;
}

void fa_builtin_fed_delta(const fa_builtin_map *m, const float *pdelta, float *fed_delta)
{
    for (uint32_t k = 0; k < m->layout.n_tensors; k++)
        if (m->federated[k])
            memcpy(fed_delta + m->fed_offset[k], pdelta + m->layout.tensors[k].offset,
                   m->layout.tensors[k].numel * sizeof(float));
}

int fa_builtin_save_local(const fa_builtin_map *m, const fa_tensors *t, const float *params,
                          const char *path, fa_error *err)
{
    fa_st_view v[2 * FA_MLP_MAX_LAYERS];
    void *buf[2 * FA_MLP_MAX_LAYERS];
    size_t n = 0;
    int rc = 0;

    memset(buf, 0, sizeof(buf));
    for (uint32_t k = 0; k < m->layout.n_tensors && rc == 0; k++) {
        const fa_mlp_tensor *p = &m->layout.tensors[k];
        const fa_tensor *x;
        if (m->federated[k])
            continue;
        x = fa_tensors_at(t, (size_t)m->index[k]);
        buf[n] = malloc(x->nbytes ? x->nbytes : 1);
        if (!buf[n]) {
            rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
            break;
        }
        fa_tensors_from_f32(x->dtype, params + p->offset, buf[n], p->numel);
        memset(&v[n], 0, sizeof(v[n]));
        v[n].name = x->name;
        v[n].dtype = x->dtype;
        v[n].ndim = x->ndim;
        v[n].shape = x->shape;
        v[n].data = buf[n];
        n++;
    }
    if (rc == 0 && n > 0)
        rc = fa_st_save(path, 0600, v, n, NULL, 0, err);
    for (size_t i = 0; i < n; i++)
        free(buf[i]);
    return rc;
}
