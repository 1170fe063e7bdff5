/* mask_prg_vaes_internal.h - AES-128-CTR for the mask generator on the CPU's vector
 * AES instructions (VAES), the keystream added into the ring vector while it
 * is still in registers (internal to crypto/mask_prg.c).
 *
 * The same keystream as OpenSSL's EVP_aes_128_ctr() (a 128-bit big-endian
 * counter, the whole of it incremented), bit for bit: the masks do not
 * depend on which path made them, so a region on one and an aggregator on
 * the other agree.  OpenSSL 3.0's CTR mode runs AES-NI one 128-bit block per
 * instruction; VAES encrypts two (256-bit) or four (512-bit) blocks per
 * instruction, and the add needs no pass over a keystream buffer.
 * tests/unit/test_crypto_prgmask.c compares every path with OpenSSL.
 */
#ifndef FA_CRYPTO_MASK_PRG_VAES_INTERNAL_H
#define FA_CRYPTO_MASK_PRG_VAES_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* The VAES path exists on x86-64 (with GCC's or Clang's intrinsics). */
#if defined(__x86_64__) && defined(__GNUC__)
#define FA_MASK_PRG_HAVE_VAES 1
#else
#define FA_MASK_PRG_HAVE_VAES 0
#endif

/* What a run does with word j of the keystream. */
enum fa_vaes_op {
    FA_VAES_STORE, /* out[j] = ks[j] */
    FA_VAES_ADD,   /* out[j] = base[j] + ks[j] mod 2^32 */
    FA_VAES_SUB,   /* out[j] = base[j] - ks[j] mod 2^32 */
};

/* The widths a CPU can run (0 where it has no VAES). */
enum { FA_VAES_NONE = 0, FA_VAES_256 = 256, FA_VAES_512 = 512 };

struct fa_mask_prg_vaes {
    /* The eleven AES-128 round keys, each repeated to fill a 512-bit row. */
    _Alignas(64) uint8_t rk[11][64];
    uint64_t hi, lo;  /* the counter of the next block: hi:lo, big-endian on the wire */
    uint32_t held[4]; /* the last block made: its last `nheld` words are not used yet */
    unsigned nheld;
    int width; /* FA_VAES_256 or FA_VAES_512 */
};

/* The widest VAES path this CPU and kernel run (FA_VAES_512 needs AVX-512F
 * and BW as well, FA_VAES_256 AVX2), or FA_VAES_NONE. */
int fa_mask_prg_vaes_width(void);

/* Keys v for width (one fa_mask_prg_vaes_width allows) at the counter block iv.  */
void fa_mask_prg_vaes_key(struct fa_mask_prg_vaes *v, int width, const uint8_t key[16],
                          const uint8_t iv[16]);
/* The counter to block hi:lo, nothing held. */
void fa_mask_prg_vaes_seek(struct fa_mask_prg_vaes *v, uint64_t hi, uint64_t lo);
/* The next n keystream words, applied by op to base into out (base unused
 * by FA_VAES_STORE; it may be out itself).  v advances by n words. */
void fa_mask_prg_vaes_run(struct fa_mask_prg_vaes *v, enum fa_vaes_op op, const uint32_t *base,
                          uint32_t *out, size_t n);
/* Wipes the key schedule and the keystream held. */
void fa_mask_prg_vaes_wipe(struct fa_mask_prg_vaes *v);

#endif
