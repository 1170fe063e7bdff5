/* mask_prg_internal.h - the mask generator: AES-128-CTR keystream read as
 * little-endian 32-bit words and added into or subtracted from a ring vector
 * (internal to crypto/).
 *
 * Word i of the mask of key K is bytes [4i, 4i+4) of AES-128-CTR(K, IV = 0)
 * encrypting zeros.  Callers expand masks block by block straight into the
 * running vector with fa_mask_prg_mask, which adds every mask of a block in
 * L1-sized sub-blocks: a whole mask vector is never materialised.
 *
 * Two implementations give the same words: OpenSSL's EVP (AES-NI one block
 * an instruction where the CPU has it) and our VAES kernels
 * (crypto/mask_prg_vaes_internal.h: two or four blocks an instruction, the keystream
 * added while in registers), chosen once per process by the CPU
 * (fa_mask_prg_use).
 */
#ifndef FA_CRYPTO_MASK_PRG_INTERNAL_H
#define FA_CRYPTO_MASK_PRG_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#define FA_MASK_PRG_KEY_BYTES 16
/* Words per block: 16 KiB of keystream. */
#define FA_MASK_PRG_BLOCK_WORDS 4096
/* fa_mask_prg_mask generates up to FA_MASK_PRG_GROUP keystreams of FA_MASK_PRG_SUB_WORDS
 * words each into the scratch block (FA_MASK_PRG_GROUP * FA_MASK_PRG_SUB_WORDS ==
 * FA_MASK_PRG_BLOCK_WORDS), then adds them all to the accumulator in one pass. */
#define FA_MASK_PRG_GROUP 4
#define FA_MASK_PRG_SUB_WORDS (FA_MASK_PRG_BLOCK_WORDS / FA_MASK_PRG_GROUP)

struct fa_mask_prg_vaes;

/* One of the two is set: the implementation in use when it was keyed. */
typedef struct fa_mask_prg {
    void *ctx;                     /* EVP_CIPHER_CTX; holds the key schedule, cleansed when freed */
    struct fa_mask_prg_vaes *vaes; /* the VAES path's key schedule and counter, likewise */
} fa_mask_prg;

/* The implementation generators keyed from now on use: "openssl" (EVP),
 * "vaes256", "vaes512", or "auto" (the widest VAES path this CPU runs, else
 * OpenSSL; the default).  Returns 0, FA_ERR_UNSUPPORTED where this CPU or
 * build cannot run the one named, FA_ERR_INVAL for another name.  For tests
 * and benchmarks; not safe while other threads key generators. */
int fa_mask_prg_use(const char *name);
/* The name of the implementation in use: "openssl", "vaes256" or "vaes512". */
const char *fa_mask_prg_impl(void);
/* The name of the one "auto" picks on this CPU. */
const char *fa_mask_prg_best(void);

/* Keys g and positions it at word `word` (a multiple of 4: one AES block is
 * four words).  Returns 0, FA_ERR_NOMEM or FA_ERR_CRYPTO. */
int fa_mask_prg_init(fa_mask_prg *g, const uint8_t key[FA_MASK_PRG_KEY_BYTES], uint64_t word);
/* Keys g with an explicit 128-bit initial counter block (the known-answer
 * test of NIST SP 800-38A F.5.1 uses one). */
int fa_mask_prg_init_iv(fa_mask_prg *g, const uint8_t key[FA_MASK_PRG_KEY_BYTES],
                        const uint8_t iv[16]);
/* Moves to word `word` (a multiple of 4) of the same key. */
int fa_mask_prg_seek(fa_mask_prg *g, uint64_t word);
/* Frees and wipes; a zeroed fa_mask_prg is a no-op. */
void fa_mask_prg_free(fa_mask_prg *g);

/* The next n (<= FA_MASK_PRG_BLOCK_WORDS) keystream words into out. */
int fa_mask_prg_words(fa_mask_prg *g, uint32_t *out, size_t n);

/* The masking step of a block, for count generators at once:
 *   acc[j] = base[j] + sum_i sign[i] * (word j of the next n words of g[i])
 * mod 2^32, for j in [0, n), sign[i] < 0 subtracting and >= 0 adding; each
 * g[i] advances by n words.  base is either acc itself (the masks are added
 * in place) or an input that does not overlap acc.  n is any length;
 * scratch holds FA_MASK_PRG_BLOCK_WORDS words (it ends up holding keystream: wipe
 * it if that matters).  Returns 0 or FA_ERR_CRYPTO. */
int fa_mask_prg_mask(fa_mask_prg *g, const int *sign, size_t count, const uint32_t *base,
                     uint32_t *acc, size_t n, uint32_t *scratch);

/* acc[0..n) += next n words (sign > 0) or -= them (sign < 0), mod 2^32:
 * fa_mask_prg_mask for one generator. */
int fa_mask_prg_apply(fa_mask_prg *g, uint32_t *acc, size_t n, int sign, uint32_t *scratch);

#endif
