/* quantize.c - the federated delta bounded, scaled by the per-tensor ranges
 * and measured against the codec (quantize.h). */
#include "worker/quantize.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "fedagg.pb-c.h"

static int positive(double x)
{
    return isfinite(x) && x > 0;
}

int fa_quantize_params_from_proto(fa_quantize_params *p, const struct Fedagg__QuantParams *q,
                                  fa_error *err)
{
    memset(p, 0, sizeof(*p));
    if (!q)
        return fa_errorf(err, FA_ERR_PROTOCOL, "federation info without quantisation parameters");
    p->per_tensor = q->per_tensor ? 1 : 0;
    p->l2_mode = (int)q->l2_clip_mode;
    p->l2_bound = q->clip_l2_norm;
    p->codec_clip_mode = (int)q->clip_mode;
    p->clip_value = q->clip_value;
    if (q->clip_mode > FA_QUANT_CLIP_NONE)
        return fa_errorf(err, FA_ERR_PROTOCOL, "federation info: quant.clip_mode %u is unknown",
                         q->clip_mode);
    if (p->per_tensor) {
        if (q->l2_clip_mode > FA_QUANT_CLIP_NONE)
            return fa_errorf(err, FA_ERR_PROTOCOL,
                             "federation info: quant.l2_clip_mode %u is unknown", q->l2_clip_mode);
        if ((p->l2_mode == FA_QUANT_CLIP_L2 || p->l2_mode == FA_QUANT_CLIP_BOTH) &&
            !positive(p->l2_bound))
            return fa_errorf(err, FA_ERR_PROTOCOL,
                             "federation info: quant.clip_l2_norm %g must be finite and > 0 with "
                             "an L2 bound",
                             p->l2_bound);
        return 0;
    }
    if (!positive(p->clip_value))
        return fa_errorf(err, FA_ERR_PROTOCOL,
                         "federation info: quant.clip_value %g must be finite and > 0",
                         p->clip_value);
    if (p->codec_clip_mode != FA_QUANT_CLIP_COORDINATE && !positive(p->l2_bound))
        return fa_errorf(err, FA_ERR_PROTOCOL,
                         "federation info: quant.clip_l2_norm %g must be finite and > 0",
                         p->l2_bound);
    return 0;
}

int fa_quantize_prepare(float *fed, size_t d, const fa_tensors *t, const fa_quantize_params *p,
                        fa_quantize_stats *st, fa_error *err)
{
    fa_quantize_stats local;
    size_t nt = fa_tensors_count(t);
    double sq = 0, scale = 1, mass = 0, cut = 0;
    int bound;

    if (!st)
        st = &local;
    memset(st, 0, sizeof(*st));
    st->d = d;
    st->l2_scale = 1;
    if ((uint64_t)d != fa_tensors_fed_numel(t))
        return fa_errorf(err, FA_ERR_INVAL,
                         "quantiser: the update has %zu coordinates, the model's federated "
                         "tensors %" PRIu64,
                         d, fa_tensors_fed_numel(t));
    if (p->per_tensor) {
        for (size_t i = 0; i < nt; i++) {
            const fa_tensor *x = fa_tensors_at(t, i);
            if (x->federated && !positive((double)x->range))
                return fa_errorf(err, FA_ERR_PROTOCOL,
                                 "the federation uses per-tensor ranges but the model gives "
                                 "federated tensor '%s' no range (%g) in its \"%s\" metadata",
                                 x->name, (double)x->range, FA_TENSORS_META_KEY);
        }
    }
    for (size_t i = 0; i < d; i++)
        sq += (double)fed[i] * (double)fed[i];
    st->l2_norm = sqrt(sq);
    if (!isfinite(st->l2_norm))
        return fa_errorf(err, FA_ERR_RANGE,
                         "the update is not finite (its L2 norm overflows): nothing to send");

    if (p->per_tensor)
        bound = p->l2_mode == FA_QUANT_CLIP_L2 || p->l2_mode == FA_QUANT_CLIP_BOTH;
    else /* what crypto/secagg_client.c does before saturating */
        bound = p->codec_clip_mode != FA_QUANT_CLIP_COORDINATE;
    if (bound && st->l2_norm > p->l2_bound)
        scale = p->l2_bound / st->l2_norm;
    st->l2_scale = scale;

    for (size_t i = 0; i < nt; i++) {
        const fa_tensor *x = fa_tensors_at(t, i);
        double r;
        uint64_t clipped = 0;
        float *v;

        if (!x->federated)
            continue;
        r = p->per_tensor ? (double)x->range : p->clip_value;
        v = fed + x->fed_offset;
        for (uint64_t j = 0; j < x->numel; j++) {
            double z = scale * (double)v[j], a = fabs(z);
            mass += z * z;
            if (a > r) {
                clipped++;
                cut += (a - r) * (a - r);
            }
            if (p->per_tensor)
                v[j] = (float)(z / r);
        }
        st->clipped_coords += clipped;
        if (clipped > st->worst_clipped) {
            st->worst_clipped = clipped;
            st->worst_tensor = x->name;
            st->worst_numel = x->numel;
        }
    }
    st->clipped_fraction = mass > 0 ? cut / mass : 0;
    if (st->clipped_fraction > 1)
        st->clipped_fraction = 1;
    return 0;
}
