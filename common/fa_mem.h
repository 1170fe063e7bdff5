/* fa_mem.h - copying bytes that will not be read again soon.
 *
 * A large copy through the caches reads every destination line before it
 * writes it, and evicts what the process is working on.  Memory that is
 * written once and only rarely read back (the aggregator's upload journals:
 * a copy of every masked byte, read only when an upload breaks off) is
 * better written with non-temporal stores, which send whole lines to memory
 * around the caches: 192 MB in chunks of 20 KB in 15.5 ms against 21 ms
 * for memcpy on the machine we measured (SSE2; AVX2's wider stores gave
 * 13.5 ms, not worth a second path).
 */
#ifndef FA_MEM_H
#define FA_MEM_H

#include <stddef.h>

/* Copies n bytes from src to dst (which do not overlap) around the caches
 * where the CPU can (x86-64), as memcpy elsewhere and for a few bytes.  The
 * bytes are in place for every later load of any thread once it returns. */
void fa_copy_cold(void *dst, const void *src, size_t n);

#endif
