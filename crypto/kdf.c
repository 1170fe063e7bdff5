#include "crypto/kdf_internal.h"

#include <string.h>

#include <sodium.h>

#include "common/fa_err.h"
#include "crypto/wire.h"

static const char kdf_label[] = "fedagg/secagg/v1";

int fa_kdf_derive(uint8_t *out, size_t out_len, const uint8_t *ikm, size_t ikm_len,
                  const char *purpose, const char *federation, uint64_t round, uint32_t attempt,
                  const char *id_a, const char *id_b)
{
    fa_wbuf info;
    int rc;

    fa_wbuf_init(&info, 0);
    fa_wbuf_raw(&info, kdf_label, sizeof(kdf_label) - 1);
    fa_wbuf_str(&info, purpose);
    fa_wbuf_str(&info, federation);
    fa_wbuf_u64(&info, round);
    fa_wbuf_u32(&info, attempt);
    if (id_b && strcmp(id_b, id_a) < 0) {
        const char *tmp = id_a;
        id_a = id_b;
        id_b = tmp;
    }
    fa_wbuf_str(&info, id_a);
    fa_wbuf_str(&info, id_b ? id_b : "");
    if (info.failed) {
        fa_wbuf_free(&info);
        sodium_memzero(out, out_len);
        return FA_ERR_NOMEM;
    }
    rc = fa_hkdf_sha256(out, out_len, (const uint8_t *)kdf_label, sizeof(kdf_label) - 1, ikm,
                        ikm_len, info.p, info.len);
    fa_wbuf_free(&info);
    return rc;
}
