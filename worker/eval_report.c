/* eval_report.c - the signed federated-evaluation report (eval_report.h). */
#include "worker/eval_report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "crypto/identity.h"
#include "fedagg.pb-c.h"

/* NaN (not measured) or finite. */
static int nan_or_finite(double x)
{
    return isnan(x) || isfinite(x);
}

int fa_eval_report_sign(const fa_eval_report *r, const uint8_t *seed, uint8_t **out, size_t *len,
                        fa_error *err)
{
    Fedagg__EvalStatement st = FEDAGG__EVAL_STATEMENT__INIT;
    Fedagg__SignedEval se = FEDAGG__SIGNED_EVAL__INIT;
    Fedagg__NamedValue *nv = NULL, **pnv = NULL;
    uint8_t *stmt = NULL, *blob = NULL;
    uint8_t sig[FA_IDENTITY_SIG_BYTES];
    size_t sl, bl;
    int rc = 0;

    *out = NULL;
    *len = 0;
    if (!r->federation_id || !r->federation_id[0] || !r->region || !r->region[0])
        return fa_errorf(err, FA_ERR_INVAL, "evaluation report: no federation or region id");
    if (r->num_examples == 0)
        return fa_errorf(err, FA_ERR_INVAL, "evaluation report: num_examples is 0");
    if (!nan_or_finite(r->loss))
        return fa_errorf(err, FA_ERR_INVAL, "evaluation report: the loss is infinite");
    if (!isnan(r->accuracy) && !(r->accuracy >= 0 && r->accuracy <= 1))
        return fa_errorf(err, FA_ERR_INVAL, "evaluation report: accuracy %g is outside [0, 1]",
                         r->accuracy);
    for (size_t i = 0; i < r->n_metrics; i++) {
        if (!r->metric_names[i] || !r->metric_names[i][0])
            return fa_errorf(err, FA_ERR_INVAL, "evaluation report: metric %zu has no name", i);
        if (!nan_or_finite(r->metric_values[i]))
            return fa_errorf(err, FA_ERR_INVAL, "evaluation report: metric '%s' is infinite",
                             r->metric_names[i]);
    }
    if (r->n_metrics) {
        nv = calloc(r->n_metrics, sizeof(*nv));
        pnv = calloc(r->n_metrics, sizeof(*pnv));
        if (!nv || !pnv) {
            rc = fa_errorf(err, FA_ERR_NOMEM, "evaluation report: out of memory");
            goto out;
        }
        for (size_t i = 0; i < r->n_metrics; i++) {
            fedagg__named_value__init(&nv[i]);
            nv[i].name = (char *)r->metric_names[i];
            nv[i].value = r->metric_values[i];
            pnv[i] = &nv[i];
        }
    }
    st.federation_id = (char *)r->federation_id;
    st.region = (char *)r->region;
    st.model_version = r->version;
    st.model_sha256.data = (uint8_t *)r->model_sha256;
    st.model_sha256.len = 32;
    st.num_examples = r->num_examples;
    st.loss = r->loss;
    st.accuracy = r->accuracy;
    st.n_metrics = r->n_metrics;
    st.metrics = pnv;
    st.unix_ms = r->unix_ms;

    sl = fedagg__eval_statement__get_packed_size(&st);
    stmt = malloc(sl ? sl : 1);
    if (!stmt) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "evaluation report: out of memory");
        goto out;
    }
    fedagg__eval_statement__pack(&st, stmt);
    rc = fa_identity_sign_statement(seed, FA_IDENTITY_DOMAIN_EVAL, stmt, sl, sig);
    if (rc != 0) {
        rc = fa_errorf(err, rc, "evaluation report: signing failed (%s)", fa_strerror(rc));
        goto out;
    }
    se.statement.data = stmt;
    se.statement.len = sl;
    se.signature.data = sig;
    se.signature.len = sizeof(sig);
    bl = fedagg__signed_eval__get_packed_size(&se);
    blob = malloc(bl ? bl : 1);
    if (!blob) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "evaluation report: out of memory");
        goto out;
    }
    fedagg__signed_eval__pack(&se, blob);
    *out = blob;
    *len = bl;
out:
    free(stmt);
    free(pnv);
    free(nv);
    return rc;
}
