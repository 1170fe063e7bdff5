/* upload_journal.h - the journals of the masked uploads in flight, kept in
 * files rather than in memory (crypto/secagg.h fa_secagg_journal).
 *
 * The secure-aggregation server adds every chunk of a masked upload to the
 * running sum as it arrives and must be able to subtract a broken-off
 * upload again exactly, from the bytes it received (k/8 bytes per
 * coordinate per upload in flight).  Held in memory those journals would
 * cost more than the sum itself for a few uploads in flight; here each
 * upload slot has a file in the storage directory instead, read back only
 * when an upload is removed.
 *
 * The files are unlinked as soon as they are created (O_TMPFILE where the
 * file system has it): a crash leaves nothing behind, and a restart needs
 * nothing from them (a round state is saved only with no upload in
 * flight).  Writes are gathered per slot in a buffer of
 * FA_UPLOAD_JOURNAL_BUF bytes (the transport hands the bytes over a packet
 * at a time), and a cleared slot is truncated, so that pages not written
 * back yet are dropped from the page cache without reaching the disk.
 *
 * Small uploads stay in memory.  Writing through the page cache costs
 * about four times a memcpy; so the first slots, as many as a memory
 * budget holds whole journals (slot_bytes each), keep theirs in memory, in
 * buffers kept from round to round, written around the caches
 * (fa_copy_cold: they are read back only when an upload breaks off).  With
 * a budget of B bytes the journals hold at most B bytes of memory plus a
 * buffer per file slot, whatever the number of uploads in flight; a model
 * whose journal is larger than B puts every journal in a file.
 */
#ifndef FA_AGGREGATOR_UPLOAD_JOURNAL_H
#define FA_AGGREGATOR_UPLOAD_JOURNAL_H

#include <stdint.h>

#include "common/fa_err.h"
#include "crypto/secagg.h"

/* Bytes gathered per slot before a write. */
#define FA_UPLOAD_JOURNAL_BUF ((size_t)1 << 20)

typedef struct fa_upload_journal fa_upload_journal;

/* Journals for `slots` uploads in flight (1..1024) of at most slot_bytes
 * each, in directory dir, the first floor(memory_budget / slot_bytes) slots
 * in memory.  No file is created, no memory allocated, before a slot's
 * first write.  Returns 0, FA_ERR_INVAL or FA_ERR_NOMEM. */
int fa_upload_journal_new(fa_upload_journal **out, const char *dir, uint32_t slots,
                          uint64_t slot_bytes, uint64_t memory_budget, fa_error *err);
/* Closes (and so removes) the files.  NULL is a no-op. */
void fa_upload_journal_del(fa_upload_journal *j);

/* The interface for fa_secagg_server_set_journal; j must outlive the
 * server using it.  Its write returns 0, FA_ERR_IO (the message names the
 * directory: e.g. the disk is full), FA_ERR_INVAL (a write that does not
 * continue the slot's bytes, or a slot out of range) or FA_ERR_NOMEM; its
 * read 0, FA_ERR_IO or FA_ERR_INVAL (bytes never written). */
void fa_upload_journal_iface(fa_upload_journal *j, fa_secagg_journal *out);

/* Bytes held in files now, over every slot (for tests and metrics). */
uint64_t fa_upload_journal_bytes(const fa_upload_journal *j);
/* Slots that keep their journal in memory. */
uint32_t fa_upload_journal_memory_slots(const fa_upload_journal *j);

/* The most memory journals made with these arguments hold: whole journals
 * of the memory slots, a write buffer per file slot. */
uint64_t fa_upload_journal_memory_need(uint32_t slots, uint64_t slot_bytes, uint64_t memory_budget);

#endif
