/* fa_safetensors.h - reading and writing safetensors files.
 *
 * The Hugging Face safetensors format
 * (https://github.com/huggingface/safetensors, "Format"):
 *
 *   8 bytes   N, unsigned little-endian: the header length
 *   N bytes   UTF-8 JSON object: for every tensor
 *               "name": {"dtype": "F32", "shape": [256, 784], "data_offsets": [begin, end]}
 *             and optionally "__metadata__": {"key": "string value", ...};
 *             may be padded at the end with spaces
 *   rest      the tensor bytes (little-endian, row-major); offsets are
 *             relative to the start of this data section
 *
 * Validation is strict, as the reference implementation's: N is bounded
 * (FA_ST_MAX_HEADER) and inside the file; the header is valid JSON (jansson)
 * with no duplicate names, every name printable (fa_st_name_check); every
 * dtype is known; BOOL bytes are 0 or 1; shape x dtype size equals
 * end - begin without overflow; the tensors, sorted by offset, tile the data
 * section exactly (first begins at 0, each begins where the previous ended,
 * the last ends at the end of the file): no gap, no overlap, nothing outside.
 * Every error message names the file (when known) and the tensor.
 *
 * A reader holds the parsed header and either a caller-owned buffer (the
 * whole file in memory, e.g. an HTTP body) or an open file descriptor (the
 * header alone is read; tensor bytes are read on demand with pread).
 * A writer declares the tensors first, then streams their bytes in order,
 * into an atomically replaced file (fa_atomic_file) or any sink the caller
 * drives with the serialised header.
 */
#ifndef FA_SAFETENSORS_H
#define FA_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"

/* Tensor names are shown to people (fedagg model inspect, every error that
 * names a tensor) and come from files anyone may make: a name must be 1 ..
 * FA_ST_MAX_NAME bytes of well-formed UTF-8 without control characters (C0,
 * DEL, C1) or invisible ones that reorder or hide text (bidirectional
 * controls, zero-width marks, line and paragraph separators), so that no
 * name can rewrite a terminal or forge a line.  The reader refuses a file
 * with another name (FA_ERR_PARSE), the writer refuses to write one.  So
 * is a BOOL tensor whose bytes are not all 0 or 1. */

/* Whether name may name a tensor: 0, FA_ERR_RANGE (its length), or
 * FA_ERR_PARSE with *bad_at the byte offset of the first offending
 * character. */
int fa_st_name_check(const char *name, size_t *bad_at);

/* s as it may be shown: printable UTF-8 as is, a backslash doubled, every
 * other byte as \xNN.  Writes at most cap bytes (terminated, truncated at
 * a whole character); returns out.  For names refused by fa_st_name_check
 * and for metadata, which may hold anything. */
char *fa_st_escape(char *out, size_t cap, const char *s);

/* Largest header accepted (the reference implementation's limit). */
#define FA_ST_MAX_HEADER (100u * 1000u * 1000u)
/* Most dimensions of one tensor. */
#define FA_ST_MAX_DIMS 8
/* Longest tensor name or metadata key, in bytes. */
#define FA_ST_MAX_NAME 1024

typedef enum fa_st_dtype {
    FA_ST_F32 = 0,
    FA_ST_F16 = 1,
    FA_ST_BF16 = 2,
    FA_ST_I32 = 3,
    FA_ST_I64 = 4,
    FA_ST_U8 = 5,
    FA_ST_BOOL = 6, /* one byte, 0 or 1 */
    FA_ST_F64 = 7,
    FA_ST_I8 = 8,
    FA_ST_I16 = 9,
} fa_st_dtype;

/* Number of dtypes (values are 0 .. FA_ST_NDTYPES - 1). */
#define FA_ST_NDTYPES 10

/* "F32", "F16", "BF16", "I32", "I64", "U8", "BOOL", "F64", "I8", "I16";
 * NULL for an unknown value. */
const char *fa_st_dtype_name(fa_st_dtype dtype);
/* Bytes per element (4, 2, 2, 4, 8, 1, 1, 8, 1, 2); 0 for an unknown value. */
size_t fa_st_dtype_size(fa_st_dtype dtype);
/* Parses a dtype name; returns 0 or FA_ERR_UNSUPPORTED. */
int fa_st_dtype_parse(const char *name, fa_st_dtype *out);

/* One tensor of a parsed header.  Pointers stay valid until fa_st_del. */
typedef struct fa_st_tensor {
    const char *name;
    fa_st_dtype dtype;
    unsigned ndim;                   /* 0 for a scalar */
    uint64_t shape[FA_ST_MAX_DIMS];  /* shape[0..ndim) */
    uint64_t numel;                  /* product of the shape (1 for a scalar) */
    uint64_t begin, end;             /* byte offsets in the data section */
} fa_st_tensor;

/* A parsed safetensors file (header, and a data source).  Opaque. */
typedef struct fa_safetensors fa_safetensors;

/* What a model file in another format is, from its first n bytes (9 tell
 * it from a safetensors file whose length bytes happen to look the same: a
 * safetensors header opens with '{' at byte 8): a Python pickle
 * (torch.save's legacy format, pickle.dump), a zip archive (torch.save's
 * format since PyTorch 1.6, a TorchScript archive, a .npz), a NumPy array,
 * an HDF5 file (Keras), a GGUF file, a gzip stream; NULL when it starts as
 * none of them.  fedagg reads models as safetensors only: loading a pickle
 * can run code.  fa_st_parse and fa_st_open refuse such a file with
 * FA_ERR_PARSE and this description. */
const char *fa_st_foreign_format(const uint8_t *p, size_t n);

/* Parses a whole file held in memory (len bytes at buf).  The buffer is
 * borrowed: it must outlive *out.  Returns 0, FA_ERR_PARSE (malformed
 * header: message names the tensor and what is wrong), FA_ERR_UNSUPPORTED
 * (unknown dtype), FA_ERR_TOOBIG (header over FA_ST_MAX_HEADER) or
 * FA_ERR_NOMEM.  `what` names the source in messages (a path, "model v3");
 * NULL means "safetensors". */
int fa_st_parse(fa_safetensors **out, const uint8_t *buf, size_t len, const char *what,
                fa_error *err);

/* Opens a file and reads its header only; tensor data is read later with
 * fa_st_read (but for the BOOL tensors', checked now).  The file size
 * bounds the offsets.  Returns 0, FA_ERR_NOTFOUND,
 * FA_ERR_IO, or the errors of fa_st_parse. */
int fa_st_open(fa_safetensors **out, const char *path, fa_error *err);

/* Parses a header alone: hdr is the JSON text (hdr_len bytes, without the
 * 8-byte length prefix), data_len the length of the data section that
 * follows it.  The result has no data source (fa_st_read fails with
 * FA_ERR_STATE).  For receivers that stream, and for the fuzz target. */
int fa_st_parse_header(fa_safetensors **out, const uint8_t *hdr, size_t hdr_len,
                       uint64_t data_len, const char *what, fa_error *err);

/* Frees st (closes its file).  NULL is a no-op. */
void fa_st_del(fa_safetensors *st);

/* Tensors in file (offset) order. */
size_t fa_st_count(const fa_safetensors *st);
const fa_st_tensor *fa_st_at(const fa_safetensors *st, size_t i);
/* The tensor called name, or NULL. */
const fa_st_tensor *fa_st_find(const fa_safetensors *st, const char *name);

/* __metadata__ entries (string to string), in header order. */
size_t fa_st_metadata_count(const fa_safetensors *st);
/* Key and value of entry i (i < count). */
void fa_st_metadata_at(const fa_safetensors *st, size_t i, const char **key, const char **value);
/* The value of key, or NULL. */
const char *fa_st_metadata_get(const fa_safetensors *st, const char *key);

/* Byte offset of the data section in the file (8 + N), and its length. */
uint64_t fa_st_data_offset(const fa_safetensors *st);
uint64_t fa_st_data_len(const fa_safetensors *st);

/* Pointer to the bytes of t when st came from fa_st_parse (in-memory), else
 * NULL.  The bytes may be unaligned for the dtype: memcpy them. */
const uint8_t *fa_st_data(const fa_safetensors *st, const fa_st_tensor *t);

/* Copies the raw bytes of t (t->end - t->begin of them) into dst, which has
 * room for dst_len bytes.  Returns 0, FA_ERR_INVAL (dst too small),
 * FA_ERR_IO (short read: the file changed), FA_ERR_STATE (no data source). */
int fa_st_read(const fa_safetensors *st, const fa_st_tensor *t, void *dst, size_t dst_len,
               fa_error *err);

/* Copies bytes [off, off + len) of t's raw bytes into dst (for tensors too
 * large to read whole, and for streaming a tensor in chunks).  Returns 0,
 * FA_ERR_INVAL (the range runs past the tensor's t->end - t->begin bytes),
 * FA_ERR_IO (short read: the file changed) or FA_ERR_STATE (no data
 * source). */
int fa_st_read_range(const fa_safetensors *st, const fa_st_tensor *t, uint64_t off, void *dst,
                     size_t len, fa_error *err);

/* Reads t converted to float32 into dst[0..n): F32 as is, F16 and BF16
 * widened exactly.  n must equal t->numel.  Returns 0, FA_ERR_INVAL (n
 * wrong, or an integer dtype: message names the tensor), or fa_st_read's
 * errors. */
int fa_st_read_f32(const fa_safetensors *st, const fa_st_tensor *t, float *dst, size_t n,
                   fa_error *err);

/* Conversions used by the readers and writers (round to nearest even). */
float fa_st_f16_to_f32(uint16_t h);
uint16_t fa_st_f32_to_f16(float f);
float fa_st_bf16_to_f32(uint16_t h);
uint16_t fa_st_f32_to_bf16(float f);

/* ---------------------------------------------------------------------- */
/* Writing                                                                 */
/* ---------------------------------------------------------------------- */

/* A streaming writer.  Opaque.  Usage:
 *
 *   fa_st_writer_new(&w, err);
 *   fa_st_writer_add(w, "fc1.weight", FA_ST_F32, 2, (uint64_t[]){256, 784}, err);
 *   fa_st_writer_add(w, "fc1.bias", FA_ST_F32, 1, (uint64_t[]){256}, err);
 *   fa_st_writer_metadata(w, "format", "pt", err);
 *   fa_st_writer_open(w, "model.safetensors", 0644, err);  // header written
 *   fa_st_writer_write(w, w1, 256 * 784 * 4, err);          // tensor bytes, in
 *   fa_st_writer_write(w, b1, 256 * 4, err);                // declaration order,
 *   fa_st_writer_commit(w, err);                            // in any chunking
 *   fa_st_writer_del(w);
 *
 * The data section holds the tensors in the order they were added; the
 * header is padded with spaces to a multiple of 8 bytes so that the data
 * section starts 8-byte aligned (as the reference implementation does).
 */
typedef struct fa_st_writer fa_st_writer;

int fa_st_writer_new(fa_st_writer **out, fa_error *err);

/* Declares the next tensor (little-endian bytes, row-major).  Returns 0,
 * FA_ERR_INVAL (empty, over-long or duplicate name, "__metadata__", too
 * many dims, size overflow: message names the tensor), FA_ERR_STATE (after
 * the header was produced) or FA_ERR_NOMEM. */
int fa_st_writer_add(fa_st_writer *w, const char *name, fa_st_dtype dtype, unsigned ndim,
                     const uint64_t *shape, fa_error *err);

/* Adds a __metadata__ entry (a key set twice keeps the last value).
 * Returns 0, FA_ERR_INVAL, FA_ERR_STATE or FA_ERR_NOMEM. */
int fa_st_writer_metadata(fa_st_writer *w, const char *key, const char *value, fa_error *err);

/* Produces the serialised header: the 8-byte length prefix, the JSON and
 * its padding (*len bytes at *hdr, owned by w).  After this no tensor or
 * metadata can be added.  For callers that send the file elsewhere than a
 * local file (then they send the tensor bytes after it themselves). */
int fa_st_writer_header(fa_st_writer *w, const uint8_t **hdr, size_t *len, fa_error *err);

/* Total size of the file being written: header plus data. */
uint64_t fa_st_writer_total_size(fa_st_writer *w);

/* Starts the atomic replacement of path (fa_atomic_file, mode e.g. 0644)
 * and writes the header.  Returns 0, FA_ERR_IO, FA_ERR_STATE, FA_ERR_NOMEM. */
int fa_st_writer_open(fa_st_writer *w, const char *path, unsigned mode, fa_error *err);

/* fa_st_writer_open writing over the file spare, when it exists, instead
 * of a new temporary file (fa_atomic_file_open_spare: an unusable spare is
 * left as it is, with a warning; NULL: none). */
int fa_st_writer_open_spare(fa_st_writer *w, const char *path, const char *spare, unsigned mode,
                            fa_error *err);

/* Appends len bytes of tensor data (to the first tensor not yet whole).
 * Returns 0, FA_ERR_IO, FA_ERR_STATE (not open) or FA_ERR_RANGE (more
 * bytes than the declared tensors hold). */
int fa_st_writer_write(fa_st_writer *w, const void *data, size_t len, fa_error *err);

/* Writes bytes [off, off + len) of the data of tensor i (declaration
 * order) at their place in the file.  Each tensor's bytes are written in
 * order (off is what was written of it so far), but tensors may be written
 * in any order and interleaved: a writer that produces several tensors a
 * chunk at a time (the model store's commit) writes each as it goes.
 * Returns 0, FA_ERR_IO, FA_ERR_STATE (not open), FA_ERR_INVAL (no such
 * tensor, or off is not where the tensor continues: the message names it)
 * or FA_ERR_RANGE (past the tensor's end). */
int fa_st_writer_put(fa_st_writer *w, size_t i, uint64_t off, const void *data, size_t len,
                     fa_error *err);

/* Before open: the writer computes the SHA-256 of the whole file as it is
 * written, header first then the tensors in declaration order, whatever
 * the order of the writes (bytes written ahead of the hash are read back
 * from the file when it reaches them: with tensors written in order,
 * nothing is).  fa_st_writer_sha256 gives it after a successful commit.
 * Returns 0, FA_ERR_STATE (already open) or FA_ERR_CRYPTO. */
int fa_st_writer_hash_sha256(fa_st_writer *w, fa_error *err);
/* The same with CRC-32C (common/fa_crc32c.h), for a file whose digest
 * only guards against damage: about six times cheaper than SHA-256.  A
 * writer hashes with one or the other (FA_ERR_STATE for both). */
int fa_st_writer_hash_crc32c(fa_st_writer *w, fa_error *err);
/* The SHA-256 (the CRC-32C) of the committed file; FA_ERR_STATE when the
 * writer did not hash it so or was not committed. */
int fa_st_writer_sha256(const fa_st_writer *w, uint8_t out[32]);
int fa_st_writer_crc32c(const fa_st_writer *w, uint32_t *out);

/* Checks that exactly the declared bytes were written, fsyncs and renames
 * over the destination.  On any failure the destination is untouched.
 * Returns 0, FA_ERR_RANGE (bytes missing), FA_ERR_STATE or FA_ERR_IO. */
int fa_st_writer_commit(fa_st_writer *w, fa_error *err);

/* Frees w; an uncommitted file is removed.  NULL is a no-op. */
void fa_st_writer_del(fa_st_writer *w);

/* One tensor to write, for fa_st_save and the model store: held in memory
 * (data), or produced on demand (fill) so that a large model is never
 * copied whole. */
typedef struct fa_st_view {
    const char *name;
    fa_st_dtype dtype;
    unsigned ndim;
    const uint64_t *shape;
    const void *data; /* numel x dtype size bytes; NULL when fill is set */
    /* Writes bytes [off, off + len) of the tensor's data into buf; returns
     * 0 or a negative FA_ERR_* code with err filled.  Called in increasing
     * off order, in chunks of at most 1 MiB. */
    int (*fill)(void *ctx, const struct fa_st_view *v, uint64_t off, void *buf, size_t len,
                fa_error *err);
    void *ctx;
} fa_st_view;

/* Writes view v's bytes (fill or data) to w in chunks.  Returns 0, the
 * writer's errors, or fill's. */
int fa_st_writer_write_view(fa_st_writer *w, const fa_st_view *v, fa_error *err);

/* One-shot atomic save of n tensors with n_meta metadata pairs
 * (meta[2i] = key, meta[2i+1] = value; meta may be NULL when n_meta is 0).
 * Returns 0 or the errors of the writer functions. */
int fa_st_save(const char *path, unsigned mode, const fa_st_view *tensors, size_t n,
               const char *const *meta, size_t n_meta, fa_error *err);

#endif
