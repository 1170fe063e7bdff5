/* fa_crc32c.h - CRC-32C (Castagnoli; iSCSI, RFC 3720 appendix B.4), for
 * files that must detect damage, not an adversary.
 *
 * The reflected polynomial 0x82F63B78, initial value and final XOR
 * 0xFFFFFFFF: fa_crc32c(0, "123456789", 9) == 0xE3069283.  Incremental as
 * zlib's crc32: pass the previous result to go on,
 *
 *   uint32_t c = fa_crc32c(0, a, alen);
 *   c = fa_crc32c(c, b, blen);          // == fa_crc32c(0, a||b, alen+blen)
 *
 * On x86-64 with SSE4.2 the CPU's crc32 instruction computes it (about
 * 8 bytes a cycle: a 40 MB file in a few ms, where SHA-256 takes ~30),
 * elsewhere a table; both give the same value.
 */
#ifndef FA_CRC32C_H
#define FA_CRC32C_H

#include <stddef.h>
#include <stdint.h>

uint32_t fa_crc32c(uint32_t crc, const void *data, size_t len);

/* The table version, whatever the CPU (for tests). */
uint32_t fa_crc32c_portable(uint32_t crc, const void *data, size_t len);

#endif
