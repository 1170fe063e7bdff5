/* Saving and restoring the server's state between phases (the
 * aggregator's crash recovery): a versioned, checksummed byte string bound
 * to the config and the roster it was made with.  See crypto/secagg.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fa_endian.h"
#include "common/fa_sha256.h"
#include "crypto/secagg_server_internal.h"
#include "crypto/wire.h"

/* ---- save / restore ---------------------------------------------------------- */

/* Version 2: the sum is preceded by a byte saying whether it is all zeros. */
/* Saved states: version 6 holds the sum; version 7 (save_meta) holds its
 * generation instead, the caller keeping the words.  Each client's upload
 * digest is followed by the hash it is of.  Versions 4 and 5 are the same
 * without that byte, every digest a SHA-256 (secagg.proto version 3): read
 * as such, so a round in flight across the upgrade records each commitment
 * with the hash it was made with (its regions, upgraded, then fail the
 * digest check and it is retried; a finished one completes).
 * Versions 2 and 3 are 4 and 5 without the advertisements' model digests:
 * they are read with zero digests (the clients' checks then fail in the
 * same way). */
#define SRV_V_SUM 6
#define SRV_V_META 7
#define SRV_V_SUM_SHA256 4
#define SRV_V_META_SHA256 5
#define SRV_V_SUM_NOMODEL 2
#define SRV_V_META_NOMODEL 3

static int state_has_sum(uint8_t version)
{
    return version == SRV_V_SUM || version == SRV_V_SUM_SHA256 || version == SRV_V_SUM_NOMODEL;
}

static int state_has_model(uint8_t version)
{
    return version >= SRV_V_SUM_SHA256;
}

static int state_has_upload_alg(uint8_t version)
{
    return version >= SRV_V_SUM;
}
static const uint8_t srv_magic[7] = {'F', 'A', 'S', 'A', 'S', 'R', 'V'};

static void put_cfg(fa_wbuf *w, const fa_secagg_cfg *cfg)
{
    const fa_secagg_config *c = &cfg->c;
    fa_wbuf_str(w, cfg->fed);
    fa_wbuf_u64(w, c->round);
    fa_wbuf_u32(w, c->attempt);
    fa_wbuf_u32(w, c->threshold);
    fa_wbuf_u32(w, c->neighbours);
    fa_wbuf_u64(w, c->vector_len);
    fa_wbuf_u32(w, c->ring_bits);
    fa_wbuf_u32(w, c->quant.bits);
    fa_wbuf_u32(w, (uint32_t)c->quant.clip_mode);
    fa_wbuf_f64(w, c->quant.clip_l2_norm);
    fa_wbuf_f64(w, c->quant.clip_value);
}

static void put_roster(fa_wbuf *w, const fa_secagg_roster *r)
{
    fa_wbuf_u32(w, (uint32_t)r->n);
    for (size_t i = 0; i < r->n; i++) {
        fa_wbuf_str(w, r->m[i].id);
        fa_wbuf_raw(w, r->m[i].pk, 32);
    }
}

/* The state before the sum, as both versions write it. */
static void put_state(fa_wbuf *w, const fa_secagg_server *s, uint8_t version)
{
    fa_wbuf_raw(w, srv_magic, sizeof(srv_magic));
    fa_wbuf_u8(w, version);
    put_cfg(w, &s->cfg);
    put_roster(w, &s->roster);
    fa_wbuf_u32(w, (uint32_t)s->phase);
    fa_wbuf_u64(w, s->phase_opened_ms);
    for (size_t i = 0; i < s->roster.n; i++) {
        const struct srv_client *c = &s->cl[i];
        fa_wbuf_u32(w, c->flags);
        fa_wbuf_raw(w, c->adv.c_pk, 32);
        fa_wbuf_raw(w, c->adv.s_pk, 32);
        fa_wbuf_raw(w, c->adv.b_commit, 32);
        if (state_has_model(version))
            fa_wbuf_raw(w, c->adv.model_sha, 32);
        fa_wbuf_raw(w, c->adv.sig, 64);
        fa_wbuf_raw(w, c->upload_digest, 32);
        fa_wbuf_u8(w, (uint8_t)c->upload_alg);
        fa_wbuf_raw(w, c->upload_sig, 64);
        fa_wbuf_raw(w, c->surv_sig, 64);
    }
    if (s->phase > FA_SECAGG_ADVERTISE) {
        for (size_t c = 0; c < s->n1 * s->n1; c++) {
            fa_wbuf_u8(w, s->ct_have[c]);
            if (s->ct_have[c])
                fa_wbuf_raw(w, s->ct + c * FA_SECAGG_SHARE_CT, FA_SECAGG_SHARE_CT);
            fa_wbuf_u8(w, s->rev_kind[c]);
            if (s->rev_kind[c])
                fa_wbuf_raw(w, s->rev + c * 32, 32);
        }
    }
}

static int save_check(const fa_secagg_server *s, fa_error *err)
{
    if (s->in_flight)
        return fa_errorf(err, FA_ERR_STATE,
                         "secagg save: %u masked uploads in flight; save at a phase boundary",
                         s->in_flight);
    if (s->phase == FA_SECAGG_FAILED)
        return fa_errorf(err, FA_ERR_STATE, "secagg save: the round failed");
    return 0;
}

/* Appends the SHA-256 of everything before it and hands the buffer out. */
static int save_finish(fa_wbuf *w, uint8_t **out, size_t *out_len, fa_error *err)
{
    uint8_t *p = fa_wbuf_reserve(w, 32);
    int rc;
    if (w->failed) {
        fa_wbuf_free(w);
        return fa_errorf(err, FA_ERR_NOMEM, "secagg save: out of memory");
    }
    if ((rc = fa_sha256(p, w->p, w->len - 32)) != 0) {
        fa_wbuf_free(w);
        return fa_errorf(err, rc, "secagg save: the checksum (SHA-256) failed");
    }
    *out = w->p;
    *out_len = w->len;
    return 0;
}

int fa_secagg_server_save(const fa_secagg_server *s, uint8_t **out, size_t *out_len, fa_error *err)
{
    fa_wbuf w;
    uint8_t *p;
    int rc;

    if ((rc = save_check(s, err)) != 0)
        return rc;
    if (s->decoded)
        return fa_errorf(err, FA_ERR_STATE, "secagg save: the sum was decoded in place");
    fa_wbuf_init(&w, 1);
    put_state(&w, s, SRV_V_SUM);
    /* The sum: one byte saying whether it is all zeros (as it is at every
     * boundary before the masked phase closes), then its words if not, so
     * that the early phase closes save kilobytes rather than 4 bytes per
     * coordinate. */
    {
        int zero = 1; /* a sum never changed is all zeros */
        for (uint64_t i = 0; i < s->cfg.c.vector_len && zero && s->sum_gen; i++)
            zero = s->sum[i] == 0;
        fa_wbuf_u8(&w, (uint8_t)!zero);
        p = zero ? NULL : fa_wbuf_reserve(&w, (size_t)s->cfg.c.vector_len * 4);
        if (p)
            for (uint64_t i = 0; i < s->cfg.c.vector_len; i++)
                fa_le_put_u32(p + 4 * i, s->sum[i]);
    }
    return save_finish(&w, out, out_len, err);
}

int fa_secagg_server_save_meta(const fa_secagg_server *s, uint8_t **out, size_t *out_len,
                               uint64_t *sum_generation, fa_error *err)
{
    fa_wbuf w;
    int redo = s->phase == FA_SECAGG_DONE;
    int rc;

    if ((rc = save_check(s, err)) != 0)
        return rc;
    fa_wbuf_init(&w, 1);
    put_state(&w, s, SRV_V_META);
    fa_wbuf_u64(&w, s->sum_gen);
    fa_wbuf_u64(&w, s->masked_gen);
    fa_wbuf_u8(&w, (uint8_t)redo);
    rc = save_finish(&w, out, out_len, err);
    if (rc == 0)
        *sum_generation = redo ? s->masked_gen : s->sum_gen;
    return rc;
}

/* Every version; `sum` (sum_len words) is the sum a save_meta state names. */
static int restore_impl(fa_secagg_server **out, const uint8_t *blob, size_t len,
                        const uint32_t *sum_words, uint64_t sum_len,
                        int (*fill)(void *, uint32_t *, uint64_t, fa_error *), void *fill_ctx,
                        const fa_secagg_config *cfg, const fa_secagg_member *members,
                        size_t n_members, fa_error *err)
{
    fa_secagg_server *s = NULL;
    fa_wbuf expect;
    fa_rbuf r;
    uint8_t sum[32];
    const uint8_t *p;
    uint32_t phase;
    uint8_t version;
    int rc, redo = 0;

    *out = NULL;
    if (len < sizeof(srv_magic) + 1 + 32 || memcmp(blob, srv_magic, sizeof(srv_magic)) != 0 ||
        (blob[sizeof(srv_magic)] != SRV_V_SUM && blob[sizeof(srv_magic)] != SRV_V_META &&
         blob[sizeof(srv_magic)] != SRV_V_SUM_SHA256 &&
         blob[sizeof(srv_magic)] != SRV_V_META_SHA256 &&
         blob[sizeof(srv_magic)] != SRV_V_SUM_NOMODEL &&
         blob[sizeof(srv_magic)] != SRV_V_META_NOMODEL))
        return fa_errorf(err, FA_ERR_CORRUPT, "secagg restore: not a saved secagg server state");
    version = blob[sizeof(srv_magic)];
    if ((rc = fa_sha256(sum, blob, len - 32)) != 0)
        return fa_errorf(err, rc, "secagg restore: the checksum (SHA-256) failed");
    if (memcmp(sum, blob + len - 32, 32) != 0)
        return fa_errorf(err, FA_ERR_CORRUPT, "secagg restore: the state fails its checksum");
    if ((rc = fa_secagg_server_alloc(&s, cfg, members, n_members, err)) != 0)
        return rc;
    /* The blob must have been made with exactly this config and federation. */
    fa_wbuf_init(&expect, 0);
    fa_wbuf_raw(&expect, srv_magic, sizeof(srv_magic));
    fa_wbuf_u8(&expect, version);
    put_cfg(&expect, &s->cfg);
    put_roster(&expect, &s->roster);
    if (expect.failed) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "secagg restore: out of memory");
        goto fail;
    }
    if (len - 32 < expect.len || memcmp(blob, expect.p, expect.len) != 0) {
        rc = fa_errorf(err, FA_ERR_INVAL,
                       "secagg restore: the state was saved with another configuration, round, "
                       "attempt or federation");
        goto fail;
    }
    fa_rbuf_init(&r, blob, len - 32);
    r.off = expect.len;
    phase = fa_rbuf_u32(&r);
    s->phase_opened_ms = fa_rbuf_u64(&r);
    if (phase > FA_SECAGG_DONE)
        r.failed = 1;
    s->phase = (int)phase;
    for (size_t i = 0; i < s->roster.n && !r.failed; i++) {
        struct srv_client *c = &s->cl[i];
        c->flags = fa_rbuf_u32(&r);
        snprintf(c->adv.id, sizeof(c->adv.id), "%s", s->roster.m[i].id);
        fa_rbuf_copy(&r, c->adv.c_pk, 32);
        fa_rbuf_copy(&r, c->adv.s_pk, 32);
        fa_rbuf_copy(&r, c->adv.b_commit, 32);
        if (state_has_model(version))
            fa_rbuf_copy(&r, c->adv.model_sha, 32);
        fa_rbuf_copy(&r, c->adv.sig, 64);
        fa_rbuf_copy(&r, c->upload_digest, 32);
        c->upload_alg = state_has_upload_alg(version) ? fa_rbuf_u8(&r) : FA_SECAGG_UPLOAD_SHA256;
        if (c->upload_alg != FA_SECAGG_UPLOAD_SHA256 && c->upload_alg != FA_SECAGG_UPLOAD_BLAKE3)
            r.failed = 1;
        fa_rbuf_copy(&r, c->upload_sig, 64);
        fa_rbuf_copy(&r, c->surv_sig, 64);
        /* Each set is inside the one before (U5 in U4 in ... in U1). */
        for (uint32_t f = CF_SHARES; f <= CF_UNMASKED; f <<= 1)
            if ((c->flags & f) && !(c->flags & (f >> 1)))
                r.failed = 1;
        if (c->flags >= (CF_UNMASKED << 1))
            r.failed = 1;
    }
    if (!r.failed && s->phase > FA_SECAGG_ADVERTISE) {
        if (fa_secagg_server_build_u1(s) != 0 || fa_secagg_server_alloc_tables(s) != 0) {
            rc = fa_errorf(err, FA_ERR_CORRUPT, "secagg restore: no advertisements in the state");
            goto fail;
        }
        for (size_t c = 0; c < s->n1 * s->n1 && !r.failed; c++) {
            s->ct_have[c] = fa_rbuf_u8(&r);
            if (s->ct_have[c] > 1)
                r.failed = 1;
            if (s->ct_have[c])
                fa_rbuf_copy(&r, s->ct + c * FA_SECAGG_SHARE_CT, FA_SECAGG_SHARE_CT);
            s->rev_kind[c] = fa_rbuf_u8(&r);
            if (s->rev_kind[c] > REV_S)
                r.failed = 1;
            if (s->rev_kind[c])
                fa_rbuf_copy(&r, s->rev + c * 32, 32);
        }
    }
    if (state_has_sum(version)) {
        switch (fa_rbuf_u8(&r)) {
        case 0: /* an all-zero sum: server_alloc zeroed it */ break;
        case 1:
            p = fa_rbuf_raw(&r, (size_t)s->cfg.c.vector_len * 4);
            if (p)
                for (uint64_t i = 0; i < s->cfg.c.vector_len; i++)
                    s->sum[i] = fa_le_get_u32(p + 4 * i);
            s->sum_gen = 1;
            break;
        default: r.failed = 1;
        }
        /* the masked sum of a finished round is not in the state */
        s->masked_gen = s->phase == FA_SECAGG_DONE    ? UINT64_MAX
                        : s->phase > FA_SECAGG_MASKED ? s->sum_gen
                                                      : 0;
        if (sum_words || fill) {
            rc = fa_errorf(err, FA_ERR_INVAL, "secagg restore: the state holds its sum");
            goto fail;
        }
    } else {
        uint64_t need;
        s->sum_gen = fa_rbuf_u64(&r);
        s->masked_gen = fa_rbuf_u64(&r);
        redo = fa_rbuf_u8(&r);
        if (redo > 1 || (redo && s->phase != FA_SECAGG_DONE) ||
            (!redo && s->phase == FA_SECAGG_DONE))
            r.failed = 1;
        need = redo ? s->masked_gen : s->sum_gen;
        if (!r.failed && need != 0 && fill) {
            if ((rc = fill(fill_ctx, s->sum, s->cfg.c.vector_len, err)) != 0)
                goto fail;
        } else if (!r.failed && need != 0) {
            if (!sum_words || sum_len != s->cfg.c.vector_len) {
                rc = fa_errorf(err, FA_ERR_INVAL,
                               "secagg restore: the state needs its sum (%llu words, generation "
                               "%llu)",
                               (unsigned long long)s->cfg.c.vector_len, (unsigned long long)need);
                goto fail;
            }
            memcpy(s->sum, sum_words, (size_t)sum_len * sizeof(uint32_t));
        }
    }
    if (r.failed || r.off != r.len) {
        rc = fa_errorf(err, FA_ERR_CORRUPT, "secagg restore: the state is truncated or malformed");
        goto fail;
    }
    if (redo) {
        /* Saved after unmasking, over the masked sum: unmask again (the same
         * shares give the same secrets, so the same result). */
        uint64_t gen = s->sum_gen;
        s->phase = FA_SECAGG_UNMASK;
        fa_secagg_server_build_survivors(s);
        if ((rc = fa_secagg_server_close_unmask(s, err)) != 0) {
            fa_error_prefix(err, rc, "secagg restore");
            goto fail;
        }
        s->phase = FA_SECAGG_DONE;
        s->sum_gen = gen;
    } else if (s->phase == FA_SECAGG_DONE) {
        /* the result itself was saved: find the bad shares again (the
         * same shares, the same ones) for the caller's record */
        fa_secagg_server_build_survivors(s);
        if ((rc = fa_secagg_server_find_share_faults(s, err)) != 0) {
            fa_error_prefix(err, rc, "secagg restore");
            goto fail;
        }
    }
    if (s->phase > FA_SECAGG_MASKED)
        fa_secagg_server_build_survivors(s);
    if (s->phase > FA_SECAGG_MASKED)
        for (uint32_t i = 0; i < s->cfg.c.max_uploads_in_flight; i++) {
            free(s->slots[i].journal);
            s->slots[i].journal = NULL;
        }
    fa_wbuf_free(&expect);
    *out = s;
    return 0;
fail:
    fa_wbuf_free(&expect);
    fa_secagg_server_del(s);
    return rc;
}

int fa_secagg_server_restore(fa_secagg_server **out, const uint8_t *blob, size_t len,
                             const fa_secagg_config *cfg, const fa_secagg_member *members,
                             size_t n_members, fa_error *err)
{
    return restore_impl(out, blob, len, NULL, 0, NULL, NULL, cfg, members, n_members, err);
}

int fa_secagg_server_restore_meta(fa_secagg_server **out, const uint8_t *blob, size_t len,
                                  const uint32_t *sum, uint64_t sum_len,
                                  const fa_secagg_config *cfg, const fa_secagg_member *members,
                                  size_t n_members, fa_error *err)
{
    return restore_impl(out, blob, len, sum, sum_len, NULL, NULL, cfg, members, n_members, err);
}

int fa_secagg_server_restore_meta_fill(
    fa_secagg_server **out, const uint8_t *blob, size_t len,
    int (*fill)(void *ctx, uint32_t *words, uint64_t n, fa_error *err), void *ctx,
    const fa_secagg_config *cfg, const fa_secagg_member *members, size_t n_members, fa_error *err)
{
    if (!fill)
        return fa_errorf(err, FA_ERR_INVAL, "secagg restore: no fill function");
    return restore_impl(out, blob, len, NULL, 0, fill, ctx, cfg, members, n_members, err);
}
