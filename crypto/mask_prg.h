/* mask_prg.h - the mask generator: AES-128-CTR keystream (OpenSSL EVP, so
 * AES-NI/VAES where the CPU has them) read as little-endian 32-bit words and
 * added into or subtracted from a ring vector (internal to crypto/).
 *
 * Word i of the mask of key K is bytes [4i, 4i+4) of AES-128-CTR(K, IV = 0)
 * encrypting zeros.  Callers expand masks block by block (FA_PRG_BLOCK_WORDS
 * words, sized so that the accumulator block, the keystream block and the
 * zero block all stay in L1/L2) straight into the running vector: a whole
 * mask vector is never materialised.
 */
#ifndef FA_CRYPTO_MASK_PRG_H
#define FA_CRYPTO_MASK_PRG_H

#include <stddef.h>
#include <stdint.h>

#define FA_PRG_KEY_BYTES 16
/* Words per block: 16 KiB of keystream. */
#define FA_PRG_BLOCK_WORDS 4096

typedef struct fa_prg {
    void *ctx; /* EVP_CIPHER_CTX; holds the key schedule, cleansed when freed */
} fa_prg;

/* Keys g and positions it at word `word` (a multiple of 4: one AES block is
 * four words).  Returns 0, FA_ERR_NOMEM or FA_ERR_CRYPTO. */
int fa_prg_init(fa_prg *g, const uint8_t key[FA_PRG_KEY_BYTES], uint64_t word);
/* Keys g with an explicit 128-bit initial counter block (the known-answer
 * test of NIST SP 800-38A F.5.1 uses one). */
int fa_prg_init_iv(fa_prg *g, const uint8_t key[FA_PRG_KEY_BYTES], const uint8_t iv[16]);
/* Moves to word `word` (a multiple of 4) of the same key. */
int fa_prg_seek(fa_prg *g, uint64_t word);
/* Frees and wipes; a zeroed fa_prg is a no-op. */
void fa_prg_free(fa_prg *g);

/* The next n (<= FA_PRG_BLOCK_WORDS) keystream words into out. */
int fa_prg_words(fa_prg *g, uint32_t *out, size_t n);

/* acc[0..n) += next n words (sign > 0) or -= them (sign < 0), mod 2^32.
 * scratch holds FA_PRG_BLOCK_WORDS words; n <= FA_PRG_BLOCK_WORDS. */
int fa_prg_apply(fa_prg *g, uint32_t *acc, size_t n, int sign, uint32_t *scratch);

/* acc[i] += src[i] / -= src[i]: the vectorised add loops, shared with the
 * server's sum. */
void fa_ring_add(uint32_t *restrict acc, const uint32_t *restrict src, size_t n);
void fa_ring_sub(uint32_t *restrict acc, const uint32_t *restrict src, size_t n);

#endif
