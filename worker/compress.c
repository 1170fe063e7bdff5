/* compress.c - the compressor front end: configuration, the tensor table,
 * error-feedback memory, and the uncompressed all-reduce (NONE). */
#include "worker/compress_internal.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config.pb-c.h"

void fa_compress_config_default(fa_compress_config *c)
{
    memset(c, 0, sizeof(*c));
    c->kind = FA_COMPRESS_NONE;
    c->powersgd_rank = 4;
    c->powersgd_start_step = 10;
    c->min_compress_numel = 1024;
    c->topk_fraction = 0.01;
    c->error_feedback = 1;
    c->warm_start = 1;
    c->seed = 1;
}

static const char *const kind_names[] = {"none", "powersgd", "topk", "qsgd8"};

const char *fa_compress_kind_name(int kind)
{
    if (kind < 0 || kind > FA_COMPRESS_QSGD8)
        return NULL;
    return kind_names[kind];
}

int fa_compress_kind_parse(const char *name, int *kind)
{
    for (int i = 0; i <= FA_COMPRESS_QSGD8; i++)
        if (name && strcasecmp(name, kind_names[i]) == 0) {
            *kind = i;
            return 0;
        }
    return FA_ERR_INVAL;
}

static int check_config(const fa_compress_config *c, fa_error *err)
{
    if (!fa_compress_kind_name(c->kind))
        return fa_errorf(err, FA_ERR_INVAL, "compression.kind %d is not NONE, POWERSGD, TOPK or QSGD8",
                         c->kind);
    if (c->kind == FA_COMPRESS_POWERSGD && (c->powersgd_rank < 1 || c->powersgd_rank > 1024))
        return fa_errorf(err, FA_ERR_INVAL,
                         "compression.powersgd_rank must be in 1..1024, not %u", c->powersgd_rank);
    if (c->kind == FA_COMPRESS_TOPK && !(c->topk_fraction > 0.0 && c->topk_fraction <= 1.0))
        return fa_errorf(err, FA_ERR_INVAL,
                         "compression.topk_fraction must be in (0, 1], not %g", c->topk_fraction);
    return 0;
}

int fa_compress_config_from_proto(fa_compress_config *c, const struct Fedagg__Compression *pb,
                                  uint64_t seed, fa_error *err)
{
    fa_compress_config_default(c);
    c->seed = seed;
    if (pb) {
        /* protobuf-c fills defaults for absent optional fields. */
        c->kind = (int)pb->kind;
        c->powersgd_rank = pb->powersgd_rank;
        c->powersgd_start_step = pb->powersgd_start_step;
        c->min_compress_numel = pb->min_compress_numel;
        c->topk_fraction = pb->topk_fraction;
        c->error_feedback = pb->error_feedback ? 1 : 0;
        c->warm_start = pb->powersgd_warm_start ? 1 : 0;
    }
    return check_config(c, err);
}

void fa_compress_tensors_from_layout(const fa_mlp_layout *l, fa_compress_tensor *tensors)
{
    for (uint32_t i = 0; i < l->n_tensors; i++) {
        const fa_mlp_tensor *t = &l->tensors[i];
        tensors[i].offset = t->offset;
        tensors[i].rows = t->shape[0];
        tensors[i].cols = t->shape[0] ? t->numel / t->shape[0] : 0;
    }
}

static int cmp_offset(const void *a, const void *b)
{
    const fa_compress_tensor *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

void fa_compress_add_error(fa_compress *c, float *grad)
{
    const float *restrict e = c->err;
    if (!c->cfg.error_feedback)
        return;
    for (size_t i = 0; i < c->n; i++)
        grad[i] += e[i];
}

int fa_compress_new(fa_compress **out, const fa_compress_config *cfg,
                    const fa_compress_tensor *tensors, size_t n_tensors, size_t n, int rank,
                    fa_error *err)
{
    fa_compress *c;
    int rc;

    if (!out || !cfg || (n_tensors > 0 && !tensors))
        return fa_errorf(err, FA_ERR_INVAL, "compress: NULL argument");
    *out = NULL;
    rc = check_config(cfg, err);
    if (rc != 0)
        return rc;
    if (n == 0)
        return fa_errorf(err, FA_ERR_INVAL, "compress: empty gradient block");
    c = calloc(1, sizeof(*c));
    if (!c)
        return fa_errorf(err, FA_ERR_NOMEM, "compress: out of memory");
    c->cfg = *cfg;
    c->n = n;
    c->rank = rank;
    fa_rng_seed(&c->rng, cfg->seed, 0x51534744ULL + (uint64_t)rank); /* "QSGD" + rank */
    c->tensors = calloc(n_tensors ? n_tensors : 1, sizeof(*c->tensors));
    c->err = calloc(n, sizeof(float));
    if (!c->tensors || !c->err) {
        fa_compress_del(c);
        return fa_errorf(err, FA_ERR_NOMEM, "compress: out of memory for %zu floats", n);
    }
    if (n_tensors > 0)
        memcpy(c->tensors, tensors, n_tensors * sizeof(*tensors));
    c->n_tensors = n_tensors;
    qsort(c->tensors, n_tensors, sizeof(*c->tensors), cmp_offset);
    for (size_t i = 0; i < n_tensors; i++) {
        const fa_compress_tensor *t = &c->tensors[i];
        size_t end;
        if (t->rows == 0 || t->cols == 0 || t->rows > SIZE_MAX / t->cols ||
            t->offset > n || t->rows * t->cols > n - t->offset) {
            rc = fa_errorf(err, FA_ERR_INVAL,
                           "compress: tensor at offset %zu (%zu x %zu) does not fit the block of %zu floats",
                           t->offset, t->rows, t->cols, n);
            goto fail;
        }
        end = t->offset + t->rows * t->cols;
        if (i + 1 < n_tensors && c->tensors[i + 1].offset < end) {
            rc = fa_errorf(err, FA_ERR_INVAL, "compress: tensors at offsets %zu and %zu overlap",
                           t->offset, c->tensors[i + 1].offset);
            goto fail;
        }
    }
    switch (cfg->kind) {
    case FA_COMPRESS_POWERSGD: c->ops = &fa_compress_powersgd_ops; break;
    case FA_COMPRESS_TOPK: c->ops = &fa_compress_topk_ops; break;
    case FA_COMPRESS_QSGD8: c->ops = &fa_compress_qsgd8_ops; break;
    default: c->ops = NULL; break;
    }
    if (c->ops) {
        rc = c->ops->init(c, err);
        if (rc != 0)
            goto fail;
    }
    *out = c;
    return 0;
fail:
    fa_compress_del(c);
    return rc;
}

void fa_compress_del(fa_compress *c)
{
    if (!c)
        return;
    if (c->ops && c->impl)
        c->ops->free(c);
    free(c->tensors);
    free(c->err);
    free(c);
}

int fa_compress_allreduce(fa_compress *c, fa_comm *comm, float *grad, size_t n, fa_error *err)
{
    int rc;
    if (n != c->n)
        return fa_errorf(err, FA_ERR_INVAL,
                         "compress: gradient of %zu floats, but the compressor was made for %zu", n,
                         c->n);
    if (!c->ops)
        rc = fa_comm_allreduce_sum_f32(comm, grad, n, err);
    else
        rc = c->ops->run(c, comm, grad, err);
    if (rc == 0)
        c->step++;
    return rc;
}

const float *fa_compress_error(const fa_compress *c) { return c->err; }

size_t fa_compress_payload_bytes(const fa_compress *c)
{
    return c->ops ? c->ops->payload(c) : c->n * sizeof(float);
}

uint64_t fa_compress_steps(const fa_compress *c) { return c->step; }

size_t fa_compress_state_parts(fa_compress *c, fa_compress_part *parts)
{
    size_t n = 0;
    parts[n++] = (fa_compress_part){"step", &c->step, sizeof(c->step)};
    parts[n++] = (fa_compress_part){"rng", c->rng.s, sizeof(c->rng.s)};
    /* Without error feedback (or compression) the memory stays zero. */
    if (c->ops && c->cfg.error_feedback)
        parts[n++] = (fa_compress_part){"error", c->err, c->n * sizeof(float)};
    if (c->ops && c->ops->state_parts)
        n += c->ops->state_parts(c, parts + n);
    return n;
}

void fa_compress_reset(fa_compress *c)
{
    memset(c->err, 0, c->n * sizeof(float));
    if (c->ops && c->ops->reset)
        c->ops->reset(c);
}
