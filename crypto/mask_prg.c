#include "crypto/mask_prg.h"

#include <string.h>

#include <openssl/evp.h>

#include "common/fa_err.h"
#include "crypto/ring.h"

/* Plaintext of the keystream: CTR mode XORs it in, so zeros give the stream. */
static const uint8_t prg_zeros[FA_PRG_BLOCK_WORDS * 4];

static void counter_iv(uint8_t iv[16], uint64_t word)
{
    uint64_t block = word / 4;
    memset(iv, 0, 16);
    for (int i = 0; i < 8; i++)
        iv[15 - i] = (uint8_t)(block >> (8 * i)); /* big-endian 128-bit counter */
}

int fa_prg_init(fa_prg *g, const uint8_t key[FA_PRG_KEY_BYTES], uint64_t word)
{
    uint8_t iv[16];
    g->ctx = NULL;
    if (word % 4)
        return FA_ERR_INVAL;
    counter_iv(iv, word);
    return fa_prg_init_iv(g, key, iv);
}

int fa_prg_init_iv(fa_prg *g, const uint8_t key[FA_PRG_KEY_BYTES], const uint8_t iv[16])
{
    EVP_CIPHER_CTX *ctx;

    g->ctx = NULL;
    ctx = EVP_CIPHER_CTX_new();
    if (!ctx)
        return FA_ERR_NOMEM;
    if (EVP_EncryptInit_ex(ctx, EVP_aes_128_ctr(), NULL, key, iv) != 1) {
        EVP_CIPHER_CTX_free(ctx);
        return FA_ERR_CRYPTO;
    }
    g->ctx = ctx;
    return 0;
}

int fa_prg_seek(fa_prg *g, uint64_t word)
{
    uint8_t iv[16];
    if (word % 4 || !g->ctx)
        return FA_ERR_INVAL;
    counter_iv(iv, word);
    /* NULL cipher and key keep the key schedule; only the counter changes. */
    return EVP_EncryptInit_ex(g->ctx, NULL, NULL, NULL, iv) == 1 ? 0 : FA_ERR_CRYPTO;
}

void fa_prg_free(fa_prg *g)
{
    if (g && g->ctx) {
        EVP_CIPHER_CTX_free(g->ctx); /* cleanses the key schedule */
        g->ctx = NULL;
    }
}

int fa_prg_words(fa_prg *g, uint32_t *out, size_t n)
{
    int outl = 0;
    if (n > FA_PRG_BLOCK_WORDS)
        return FA_ERR_INVAL;
    if (n == 0)
        return 0;
    if (EVP_EncryptUpdate(g->ctx, (uint8_t *)out, &outl, prg_zeros, (int)(n * 4)) != 1 ||
        outl != (int)(n * 4))
        return FA_ERR_CRYPTO;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    for (size_t i = 0; i < n; i++)
        out[i] = __builtin_bswap32(out[i]);
#endif
    return 0;
}

/* The add loops run in chunks of FA_CHUNK words (see crypto/ring.h). */

FA_CLONES
void fa_ring_add(uint32_t *restrict acc, const uint32_t *restrict src, size_t n)
{
    size_t i = 0;
    for (; i + FA_CHUNK <= n; i += FA_CHUNK)
        for (size_t j = 0; j < FA_CHUNK; j++)
            acc[i + j] += src[i + j];
    for (; i < n; i++)
        acc[i] += src[i];
}

FA_CLONES
void fa_ring_sub(uint32_t *restrict acc, const uint32_t *restrict src, size_t n)
{
    size_t i = 0;
    for (; i + FA_CHUNK <= n; i += FA_CHUNK)
        for (size_t j = 0; j < FA_CHUNK; j++)
            acc[i + j] -= src[i + j];
    for (; i < n; i++)
        acc[i] -= src[i];
}

int fa_prg_apply(fa_prg *g, uint32_t *acc, size_t n, int sign, uint32_t *scratch)
{
    int rc = fa_prg_words(g, scratch, n);
    if (rc != 0)
        return rc;
    if (sign > 0)
        fa_ring_add(acc, scratch, n);
    else
        fa_ring_sub(acc, scratch, n);
    return 0;
}
