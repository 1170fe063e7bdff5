/* fa_file.h - whole-file reads and crash-safe (atomic) file replacement.
 *
 * An atomic write goes to a temporary file in the same directory, is fsync'ed,
 * renamed over the destination, and the directory is fsync'ed: after a crash
 * the destination holds either the old or the new content, never a mix.
 */
#ifndef FA_FILE_H
#define FA_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"

/* A file being written atomically.  Opaque. */
typedef struct fa_atomic_file fa_atomic_file;

/* Starts an atomic replacement of `path` (created with `mode`, e.g. 0644;
 * 0600 for secrets).  Returns 0, FA_ERR_IO or FA_ERR_NOMEM. */
int fa_atomic_file_open(fa_atomic_file **out, const char *path, unsigned mode, fa_error *err);

/* Like fa_atomic_file_open, but when the file `spare` exists (a regular
 * file of one name: an earlier file of the same kind, renamed there rather
 * than removed) it is written over from its start instead of a new
 * temporary file, and cut to what was written at commit; the commit
 * renames it over `path`, the abort removes it.  Until that rename it is
 * not `path`, so a crash leaves `path` as it was.  Over the spare's pages,
 * still in the page cache, a write costs a copy; a new file's pages must be
 * allocated and mapped first, 2-3 times that on the machines we measured.
 * The commit cuts the spare after the furthest byte written through
 * fa_atomic_file_write or fa_atomic_file_pwrite (a write straight to the
 * descriptor of fa_atomic_file_fd counts only when it leaves the file
 * offset at its end).
 * Returns 0, FA_ERR_IO or FA_ERR_NOMEM. */
int fa_atomic_file_open_reusing(fa_atomic_file **out, const char *path, const char *spare,
                                unsigned mode, fa_error *err);

/* fa_atomic_file_open_reusing for a spare that only saves work: one that
 * cannot be used (refused as above, or not opened) is left as it is, a
 * warning naming it and why is logged, and a new temporary file is written
 * instead, so that a stray link or directory there never stops a write.
 * Returns 0, FA_ERR_IO or FA_ERR_NOMEM. */
int fa_atomic_file_open_spare(fa_atomic_file **out, const char *path, const char *spare,
                              unsigned mode, fa_error *err);

/* The bytes of disk a file of at most cap bytes written over spare reuses:
 * the spare's blocks, at most cap; 0 when there is none, or one that
 * fa_atomic_file_open_reusing would refuse (for free-space checks). */
uint64_t fa_atomic_file_spare_bytes(const char *spare, uint64_t cap);

/* Appends len bytes.  Returns 0 or FA_ERR_IO. */
int fa_atomic_file_write(fa_atomic_file *f, const void *data, size_t len, fa_error *err);

/* Writes len bytes at offset off of the new file, whatever was written
 * before (fa_atomic_file_write's position does not move); a spare is cut at
 * commit to the end of the furthest write of either kind.  Returns 0,
 * FA_ERR_IO or FA_ERR_INVAL (an offset past any file). */
int fa_atomic_file_pwrite(fa_atomic_file *f, const void *data, size_t len, uint64_t off,
                          fa_error *err);
/* Reads len bytes at offset off of the new file back (what was written
 * there).  Returns 0 or FA_ERR_IO (also for bytes past its end). */
int fa_atomic_file_pread(fa_atomic_file *f, void *buf, size_t len, uint64_t off, fa_error *err);
/* The file descriptor of the temporary file (for writers that need one). */
int fa_atomic_file_fd(const fa_atomic_file *f);

/* Starts the kernel writing the new file to disk every `step` bytes
 * written (sync_file_range, SYNC_FILE_RANGE_WRITE: it does not wait), so
 * that the fsync of fa_atomic_file_commit finds most of it on disk already
 * instead of writing it all then: the disk works while the writer goes on
 * computing the rest, and while the files after it are written.  For a
 * file that will be committed with its fsync; 0 turns it off (the
 * default).  A failed write-back shows at that fsync. */
void fa_atomic_file_write_back_every(fa_atomic_file *f, uint64_t step);
#define FA_WRITE_BACK_STEP (8u << 20) /* bytes; a few ms of a disk's writing */

/* fsync, rename over the destination, fsync the directory, free f.
 * On failure the destination is untouched and f is freed.  Returns 0 or FA_ERR_IO. */
int fa_atomic_file_commit(fa_atomic_file *f, fa_error *err);

/* Like fa_atomic_file_commit but without the fsyncs: the rename is still
 * atomic, so a process crash (SIGKILL) never leaves a mix, but a machine
 * crash may lose the new content (the old one, or none, is found).  For
 * state that is rewritten often and whose loss only costs work. */
int fa_atomic_file_commit_nosync(fa_atomic_file *f, fa_error *err);

/* Removes the temporary file and frees f.  NULL is a no-op. */
void fa_atomic_file_abort(fa_atomic_file *f);

/* One-shot atomic write of a buffer. */
int fa_file_write_atomic(const char *path, const void *data, size_t len, unsigned mode,
                         fa_error *err);

/* Reads a whole regular file into a malloc'ed buffer (NUL-terminated for
 * convenience, the NUL not counted in *len).  Refuses files over max_len
 * bytes with FA_ERR_TOOBIG.  Returns 0, FA_ERR_IO, FA_ERR_NOTFOUND,
 * FA_ERR_TOOBIG or FA_ERR_NOMEM. */
int fa_file_read_all(const char *path, uint8_t **data, size_t *len, size_t max_len, fa_error *err);

/* fsyncs the directory containing path.  Returns 0 or FA_ERR_IO. */
int fa_file_sync_dir(const char *path, fa_error *err);

/* Creates a directory and its parents (like mkdir -p) with mode.  Returns 0 or FA_ERR_IO. */
int fa_file_mkdirs(const char *path, unsigned mode, fa_error *err);

/* Removes path and, when it is a directory, everything under it (like rm
 * -rf; symbolic links are removed, never followed).  A path that does not
 * exist is no error.  Returns 0 or FA_ERR_IO naming the first entry that
 * could not be removed. */
int fa_file_remove_tree(const char *path, fa_error *err);

/* Returns 0 when the file at path is not readable or writable by group or
 * others (a key file), FA_ERR_AUTH with a message otherwise, FA_ERR_NOTFOUND
 * when missing. */
int fa_file_check_private(const char *path, fa_error *err);

#endif
