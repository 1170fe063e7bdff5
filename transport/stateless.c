#include "transport/stateless_internal.h"

#include <ngtcp2/ngtcp2_crypto.h>

ngtcp2_ssize fa_stateless_version_negotiation(uint8_t *out, size_t cap,
                                              const ngtcp2_version_cid *vc, fa_stateless_rand rnd)
{
    uint32_t sv[2];
    uint8_t r;

    rnd(&r, 1);
    sv[0] = NGTCP2_PROTO_VER_V1;
    sv[1] = 0x1a2a3a4au;
    return ngtcp2_pkt_write_version_negotiation(out, cap, r, vc->scid, vc->scidlen, vc->dcid,
                                                vc->dcidlen, sv, 2);
}

ngtcp2_ssize fa_stateless_retry(uint8_t *out, size_t cap, const uint8_t token_key[32],
                                const ngtcp2_pkt_hd *hd, const struct sockaddr *from,
                                socklen_t fromlen, size_t rxlen, uint64_t now_ns,
                                fa_stateless_rand rnd)
{
    uint8_t token[NGTCP2_CRYPTO_MAX_RETRY_TOKENLEN];
    ngtcp2_cid scid;
    ngtcp2_ssize tl;

    if (rxlen * 3 < cap)
        cap = rxlen * 3;
    scid.datalen = FA_STATELESS_CIDLEN;
    rnd(scid.data, scid.datalen);
    tl = ngtcp2_crypto_generate_retry_token(token, token_key, 32, hd->version, from, fromlen, &scid,
                                            &hd->dcid, now_ns);
    if (tl < 0)
        return tl;
    return ngtcp2_crypto_write_retry(out, cap, hd->version, &hd->scid, &scid, &hd->dcid, token,
                                     (size_t)tl);
}

ngtcp2_ssize fa_stateless_initial_close(uint8_t *out, size_t cap, const ngtcp2_pkt_hd *hd,
                                        uint64_t code)
{
    return ngtcp2_crypto_write_connection_close(out, cap, hd->version, &hd->scid, &hd->dcid, code,
                                                NULL, 0);
}

ngtcp2_ssize fa_stateless_reset(uint8_t *out, size_t cap, fa_stateless_limit *lim, uint64_t now_ns,
                                const uint8_t reset_key[32], const uint8_t *dcid, size_t dcidlen,
                                size_t rxlen, fa_stateless_rand rnd)
{
    uint8_t token[NGTCP2_STATELESS_RESET_TOKENLEN], r[128];
    ngtcp2_cid cid;
    size_t total, randlen;

    if (rxlen <= NGTCP2_MIN_STATELESS_RESET_RANDLEN + NGTCP2_STATELESS_RESET_TOKENLEN ||
        dcidlen != FA_STATELESS_CIDLEN)
        return 0;
    if (now_ns - lim->window > NGTCP2_SECONDS) {
        lim->window = now_ns;
        lim->sent = 0;
    }
    if (++lim->sent > FA_STATELESS_RESETS_PER_SECOND)
        return 0;
    ngtcp2_cid_init(&cid, dcid, dcidlen);
    if (ngtcp2_crypto_generate_stateless_reset_token(token, reset_key, 32, &cid) != 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    total = rxlen - 1 < sizeof(r) ? rxlen - 1 : sizeof(r);
    randlen = total - NGTCP2_STATELESS_RESET_TOKENLEN;
    rnd(r, randlen);
    return ngtcp2_pkt_write_stateless_reset(out, cap, token, r, randlen);
}
