/* local_tensors.c - the region's kept non-federated tensors (local_tensors.h). */
#include "worker/local_tensors.h"

#include "common/fa_log.h"

int fa_local_tensors_table(fa_tensors **out, const fa_tensors *t, fa_error *err)
{
    fa_tensors *l = NULL;
    int rc;

    *out = NULL;
    if (fa_tensors_fed_count(t) == fa_tensors_count(t))
        return 0;
    if ((rc = fa_tensors_new(&l, err)) != 0)
        return rc;
    for (size_t i = 0; i < fa_tensors_count(t); i++) {
        const fa_tensor *x = fa_tensors_at(t, i);
        if (x->federated)
            continue;
        if ((rc = fa_tensors_add(l, x->name, x->dtype, x->ndim, x->shape, err)) != 0) {
            fa_tensors_del(l);
            return rc;
        }
    }
    *out = l;
    return 0;
}

void fa_local_tensors_open(fa_safetensors **out, const char *path, const fa_tensors *lt)
{
    fa_safetensors *st = NULL;
    fa_error e;
    char q[600];
    int rc;

    *out = NULL;
    if (!path || !lt)
        return;
    fa_error_clear(&e);
    rc = fa_st_open(&st, path, &e);
    if (rc == FA_ERR_NOTFOUND)
        return;
    if (rc == 0)
        rc = fa_tensors_check(lt, st, "the region's local tensors", &e);
    if (rc != 0) {
        fa_log_warn("the region's kept local tensors do not fit the model; the published values "
                    "are used",
                    "file=%s reason=%s", path, fa_log_quote(q, sizeof(q), fa_error_msg(&e, rc)));
        fa_st_del(st);
        return;
    }
    *out = st;
}
