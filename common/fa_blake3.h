/* fa_blake3.h - BLAKE3-256 (O'Connor, Aumasson, Neves, Wilcox-O'Hearn,
 * 2020), one-shot and incremental: the commitment hash of the masked
 * uploads (crypto/secagg.h, docs/secure-aggregation.md).
 *
 * Its authors' C implementation underneath (the SSE4.1, AVX2 and AVX-512
 * back ends picked at run time; CMakeLists.txt says where the sources come
 * from).  BLAKE3 is a tree hash: its back ends hash many 1 KiB chunks at
 * once, which needs a long enough run of input at a time; fed the few KB a
 * network read or a packed block gives, it hashes chunk by chunk, no faster
 * than SHA-256.  So the incremental context gathers small updates into
 * runs of FA_BLAKE3_RUN bytes (a copy, cheap next to the hash) and hashes
 * long ones in place.  About 2.5x SHA-256 with the SHA extensions on the
 * machines we run on (fedagg-bench mask prints both).
 *
 * The API is fa_sha256.h's: same returns, a sticky failure, final ends the
 * hash until the next init.
 */
#ifndef FA_BLAKE3_H
#define FA_BLAKE3_H

#include <stddef.h>
#include <stdint.h>

#define FA_BLAKE3_BYTES 32
#define FA_BLAKE3_RUN (64u * 1024u)

/* out = BLAKE3-256(data[0..len)).  data may be NULL when len is 0.
 * Returns 0 or FA_ERR_INVAL (out NULL, or data NULL with len > 0). */
int fa_blake3(uint8_t out[FA_BLAKE3_BYTES], const void *data, size_t len);

struct fa_blake3_state;

/*   fa_blake3_ctx h = {0};
 *   fa_blake3_init(&h);            // FA_ERR_NOMEM: its run buffer
 *   fa_blake3_update(&h, a, alen);
 *   rc = fa_blake3_final(&h, out); // reports any failure since init
 *   fa_blake3_free(&h);
 * The state lives on the heap (the hasher's stack of chaining values and
 * the 64 KiB run buffer); init after final reuses it. */
typedef struct fa_blake3_ctx {
    struct fa_blake3_state *st; /* owned; NULL before init and after free */
    int failed;                 /* 0, or the first error since init */
} fa_blake3_ctx;

int fa_blake3_init(fa_blake3_ctx *c);
int fa_blake3_update(fa_blake3_ctx *c, const void *data, size_t len);
int fa_blake3_final(fa_blake3_ctx *c, uint8_t out[FA_BLAKE3_BYTES]);
void fa_blake3_free(fa_blake3_ctx *c);

#endif
