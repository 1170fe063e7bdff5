/* The client's masked stream (Bonawitz et al., CCS 2017, Figure 4, round 2):
 * y_u = x_u + PRG(b_u) + sum_v Delta_uv PRG(s_uv), encoded, masked and packed
 * one block at a time into the caller's buffer, hashed as it goes (the
 * upload's digest the client signs in round 3).  The hot path of a worker's
 * upload: no allocation per block, one pass over the input.  See
 * crypto/secagg.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "common/fa_blake3.h"
#include "crypto/kdf_internal.h"
#include "crypto/mask_prg_internal.h"
#include "crypto/codec_internal.h"
#include "crypto/ring_internal.h"
#include "crypto/secagg_client_internal.h"

void fa_secagg_client_stream_free(struct stream *st)
{
    if (st->prg) {
        for (size_t i = 0; i < st->nprg; i++)
            fa_mask_prg_free(&st->prg[i]);
        free(st->prg);
    }
    free(st->sign);
    fa_mask_prg_free(&st->round_prg);
    if (st->acc)
        sodium_free(st->acc); /* holds masked and unmasked input */
    if (st->scratch)
        sodium_free(st->scratch);
    free(st->rnd);
    free(st->pending);
    fa_blake3_free(&st->hash);
    memset(st, 0, sizeof(*st));
}

/* ---- round 2: the masked stream ------------------------------------------------ */

/* The rounding generator of this attempt, at word 0. */
static int rounding_prg_init(const fa_secagg_client *c, fa_mask_prg *g)
{
    uint8_t *key = sodium_malloc(16);
    int rc;
    if (!key)
        return FA_ERR_NOMEM;
    rc = fa_kdf_derive(key, 16, c->sec->round_seed, 32, FA_KDF_ROUNDING, c->cfg.fed, c->cfg.c.round,
                       c->cfg.c.attempt, c->id, NULL);
    if (rc == 0)
        rc = fa_mask_prg_init(g, key, 0);
    sodium_free(key);
    return rc;
}

/* x_u for coordinates [pos, pos + m) into out: the float input through the
 * codec (draws from the rounding generator, which must be at word pos), the
 * weight as the last coordinate; or the ring input as is.  rnd holds m
 * words. */
static int encode_block(const fa_secagg_client *c, fa_mask_prg *round_prg, uint64_t pos, size_t m,
                        uint32_t *rnd, uint32_t *out)
{
    const uint64_t d = c->cfg.c.vector_len - 1;
    size_t mf;
    int rc;
    if (c->input_kind != INPUT_F32) {
        memcpy(out, c->xq + pos, m * sizeof(uint32_t));
        return 0;
    }
    mf = pos < d ? (size_t)(d - pos < m ? d - pos : m) : 0;
    if ((rc = fa_mask_prg_words(round_prg, rnd, m)) != 0)
        return rc;
    fa_codec_encode(&c->codec, c->xf + pos, mf, rnd, out);
    if (pos + m > d) /* the weight coordinate */
        out[d - pos] =
            (uint32_t)fa_codec_round(c->weight * c->codec.qmax, rnd[d - pos], c->codec.qmax);
    return 0;
}

static int stream_setup(fa_secagg_client *c, fa_error *err)
{
    struct stream *st = &c->st;
    uint8_t *key = NULL;
    int rc = 0;

    fa_secagg_client_stream_free(st);
    if (c->input_kind == INPUT_F32 &&
        c->cfg.c.ring_bits < fa_secagg_ring_bits_for(c->cfg.c.quant.bits, (uint32_t)c->n1))
        return fa_errorf(err, FA_ERR_RANGE,
                         "secagg: ring bits %u are too few for %zu clients of %u-bit values (the "
                         "sum could wrap); need %u",
                         c->cfg.c.ring_bits, c->n1, c->cfg.c.quant.bits,
                         fa_secagg_ring_bits_for(c->cfg.c.quant.bits, (uint32_t)c->n1));
    st->prg = calloc(c->n1, sizeof(*st->prg));
    st->sign = calloc(c->n1, sizeof(*st->sign));
    st->acc = sodium_malloc(FA_MASK_PRG_BLOCK_WORDS * sizeof(uint32_t));
    st->scratch = sodium_malloc(FA_MASK_PRG_BLOCK_WORDS * sizeof(uint32_t));
    st->rnd = malloc(FA_MASK_PRG_BLOCK_WORDS * sizeof(uint32_t));
    st->pending = malloc(FA_MASK_PRG_BLOCK_WORDS * sizeof(uint32_t));
    key = sodium_malloc(16);
    if (!st->prg || !st->sign || !st->acc || !st->scratch || !st->rnd || !st->pending || !key) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "secagg masked stream: out of memory");
        goto out;
    }
    /* p_u = PRG(b_u) */
    if ((rc = fa_secagg_self_mask_key(key, &c->cfg, c->id, c->sec->b)) != 0 ||
        (rc = fa_mask_prg_init(&st->prg[0], key, 0)) != 0)
        goto crypto;
    st->sign[0] = 1;
    st->nprg = 1;
    /* p_uv = Delta_uv * PRG(s_uv) for every v of U2 (neighbours with SecAgg+) */
    for (size_t v = 0; v < c->n1; v++) {
        if ((int)v == c->me || !c->in_u2[v] ||
            !fa_secagg_graph_adjacent(&c->graph, (size_t)c->me, v))
            continue;
        if ((rc = fa_secagg_agree(key, 16, FA_KDF_PAIR_MASK, &c->cfg, c->sec->s_sk, c->self.s_pk,
                                  c->id, c->peers[v].s_pk, c->peers[v].id)) != 0 ||
            (rc = fa_mask_prg_init(&st->prg[st->nprg], key, 0)) != 0)
            goto crypto;
        st->sign[st->nprg++] = fa_secagg_pair_sign(c->id, c->peers[v].id);
    }
    if (c->input_kind == INPUT_F32 && (rc = rounding_prg_init(c, &st->round_prg)) != 0)
        goto crypto;
    if ((rc = fa_blake3_init(&st->hash)) != 0)
        goto crypto;
    st->ready = 1;
    goto out;
crypto:
    fa_errorf(err, rc, "secagg masked stream: setting up the masks failed (%s)", fa_strerror(rc));
out:
    if (key)
        sodium_free(key);
    if (rc != 0)
        fa_secagg_client_stream_free(st);
    return rc;
}

/* y_u = x_u + p_u + sum_v p_uv for the next block of coordinates, packed
 * straight into out when it has room (*direct gets the bytes written),
 * else into the pending buffer.  Hashed by the caller, as handed out. */
static int stream_block(fa_secagg_client *c, uint8_t *out, size_t room, size_t *direct)
{
    struct stream *st = &c->st;
    const uint64_t len = c->cfg.c.vector_len, pos = st->pos;
    const size_t m =
        len - pos < FA_MASK_PRG_BLOCK_WORDS ? (size_t)(len - pos) : FA_MASK_PRG_BLOCK_WORDS;
    const size_t bytes = (size_t)fa_ring_packed_bytes(m, c->cfg.c.ring_bits);
    uint8_t *dst = bytes <= room ? out : st->pending;
    const uint32_t *x = st->acc;
    int rc;

    *direct = 0;
    /* A ring input is masked straight from where it lies (fa_mask_prg_mask reads
     * it once, prefetching ahead): copying it into acc first would cost a
     * pass over memory for nothing.  A float input is encoded into acc. */
    if (c->input_kind == INPUT_RING)
        x = c->xq + pos;
    else if ((rc = encode_block(c, &st->round_prg, pos, m, st->rnd, st->acc)) != 0)
        return rc;
    if ((rc = fa_mask_prg_mask(st->prg, st->sign, st->nprg, x, st->acc, m, st->scratch)) != 0)
        return rc;
    fa_ring_pack(dst, st->acc, m, c->cfg.c.ring_bits);
    if (dst == out) {
        *direct = bytes;
    } else {
        st->pend_off = 0;
        st->pend_len = bytes;
    }
    st->pos += m;
    return 0;
}

static int stream_finish(fa_secagg_client *c, fa_error *err)
{
    uint8_t digest[32];
    c->st.finished = 1;
    int rc = fa_blake3_final(&c->st.hash, digest);
    if (rc != 0)
        return fa_errorf(err, rc, "secagg masked stream: BLAKE3 failed");
    if (c->upload_done && memcmp(digest, c->upload_digest, 32) != 0)
        return fa_errorf(err, FA_ERR_STATE,
                         "secagg masked stream of '%s': differs from the stream produced before "
                         "(the input changed while it was being masked)",
                         c->id);
    memcpy(c->upload_digest, digest, 32);
    c->upload_done = 1;
    return 0;
}

int fa_secagg_client_masked_next(fa_secagg_client *c, uint8_t *out, size_t cap, size_t *n,
                                 fa_error *err)
{
    struct stream *st = &c->st;
    size_t done = 0, direct = 0;
    int rc;

    *n = 0;
    if ((rc = fa_secagg_client_check_phase(c, CP_GOT_SHARES, CP_GOT_SHARES, "masked stream",
                                           err)) != 0)
        return rc;
    if (!c->input_bound)
        return fa_errorf(err, FA_ERR_STATE, "masked stream of '%s': no input set", c->id);
    if (cap == 0)
        return fa_errorf(err, FA_ERR_INVAL, "masked stream: zero-sized buffer");
    if (!st->ready && (rc = stream_setup(c, err)) != 0)
        return rc;
    while (done < cap) {
        if (st->pend_off < st->pend_len) {
            size_t k = st->pend_len - st->pend_off;
            if (k > cap - done)
                k = cap - done;
            memcpy(out + done, st->pending + st->pend_off, k);
            st->pend_off += k;
            done += k;
            continue;
        }
        if (st->pos == c->cfg.c.vector_len)
            break;
        if ((rc = stream_block(c, out + done, cap - done, &direct)) != 0) {
            st->ready = 0; /* start again from byte 0 on the next call */
            return fa_errorf(err, rc, "masked stream of '%s': %s", c->id, fa_strerror(rc));
        }
        done += direct;
    }
    /* The bytes handed out, in order, are the upload: hashed here in one
     * run (in place when it is long: no copy into the hash's run buffer). */
    if (done > 0 && (rc = fa_blake3_update(&st->hash, out, done)) != 0) {
        st->ready = 0;
        return fa_errorf(err, rc, "secagg masked stream: BLAKE3 failed");
    }
    /* the last byte is out: the upload's digest is known */
    if (st->pos == c->cfg.c.vector_len && st->pend_off == st->pend_len && !st->finished &&
        (rc = stream_finish(c, err)) != 0)
        return rc;
    *n = done;
    return 0;
}

int fa_secagg_client_masked_rewind(fa_secagg_client *c, fa_error *err)
{
    int rc;
    if ((rc = fa_secagg_client_check_phase(c, CP_GOT_SHARES, CP_GOT_SHARES, "masked stream rewind",
                                           err)) != 0)
        return rc;
    c->st.ready = 0; /* the next masked_next sets every PRG back to word 0 */
    return 0;
}

uint64_t fa_secagg_client_masked_bytes(const fa_secagg_client *c)
{
    return fa_secagg_masked_bytes(c->cfg.c.vector_len, c->cfg.c.ring_bits);
}

int fa_secagg_client_upload_digest(const fa_secagg_client *c,
                                   uint8_t digest[FA_SECAGG_DIGEST_BYTES])
{
    if (!c->upload_done)
        return FA_ERR_STATE;
    memcpy(digest, c->upload_digest, 32);
    return 0;
}

/* ---- the quantised input, for tests and debugging ---------------------------- */

int fa_secagg_client_input_ring(const fa_secagg_client *c, uint32_t *out, size_t n, fa_error *err)
{
    const uint64_t len = c->cfg.c.vector_len;
    uint32_t *rnd = NULL;
    fa_mask_prg prg;
    int rc = 0, have_prg = 0;

    if (!c->input_bound)
        return fa_errorf(err, FA_ERR_STATE, "secagg input of '%s': no input set", c->id);
    if (n != len)
        return fa_errorf(err, FA_ERR_INVAL, "secagg input of '%s': %zu elements, expected %llu",
                         c->id, n, (unsigned long long)len);
    if (c->input_kind != INPUT_F32) {
        memcpy(out, c->xq, n * sizeof(uint32_t));
        return 0;
    }
    /* The same draws as the masked stream (encode_block). */
    rnd = malloc(FA_MASK_PRG_BLOCK_WORDS * sizeof(uint32_t));
    if (!rnd) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "secagg input: out of memory");
        goto out;
    }
    if ((rc = rounding_prg_init(c, &prg)) != 0) {
        rc = fa_errorf(err, rc, "secagg input: rounding generator failed");
        goto out;
    }
    have_prg = 1;
    for (uint64_t pos = 0; pos < len;) {
        size_t m =
            len - pos < FA_MASK_PRG_BLOCK_WORDS ? (size_t)(len - pos) : FA_MASK_PRG_BLOCK_WORDS;
        if ((rc = encode_block(c, &prg, pos, m, rnd, out + pos)) != 0) {
            rc = fa_errorf(err, rc, "secagg input: %s", fa_strerror(rc));
            goto out;
        }
        pos += m;
    }
out:
    if (have_prg)
        fa_mask_prg_free(&prg);
    free(rnd);
    return rc;
}
