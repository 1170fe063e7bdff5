/* merkle.h - RFC 6962 / RFC 9162 Merkle tree hashing, inclusion and
 * consistency proofs, and their verification.
 *
 * Hashes (RFC 9162 section 2.1.1):
 *   MTH({})      = SHA-256()
 *   leaf hash    = SHA-256(0x00 || d)
 *   node hash    = SHA-256(0x01 || left || right)
 *   MTH(D[n])    = node(MTH(D[0:k]), MTH(D[k:n])), k the largest power of two < n
 *
 * Pure code: no I/O.  Proofs are computed from the hashes of *perfect*
 * subtrees, which the caller supplies through an fa_merkle_get_fn (the audit
 * log reads them from its node file).  Node (level, index) is the root of the
 * perfect subtree over leaves [index * 2^level, (index + 1) * 2^level); level 0
 * are the leaf hashes.  fa_merkle_node_pos() numbers these nodes in post-order,
 * the order in which fa_merkle_frontier_push() completes them, so a store that
 * appends them in that order finds node (level, index) at a fixed position.
 *
 * Proof generation fetches O(log n) nodes; verification is O(log n) hashes.
 */
#ifndef FA_MERKLE_H
#define FA_MERKLE_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"

#define FA_MERKLE_HASH_LEN 32
/* A proof for a tree of at most 2^64 - 1 leaves has at most 64 hashes. */
#define FA_MERKLE_MAX_PROOF 64

/* Leaf hash SHA-256(0x00 || data). */
void fa_merkle_leaf_hash(const void *data, size_t len, uint8_t out[FA_MERKLE_HASH_LEN]);

/* Interior node hash SHA-256(0x01 || left || right).  out may alias left or right. */
void fa_merkle_node_hash(const uint8_t left[FA_MERKLE_HASH_LEN],
                         const uint8_t right[FA_MERKLE_HASH_LEN], uint8_t out[FA_MERKLE_HASH_LEN]);

/* The root of the empty tree, SHA-256 of the empty string. */
void fa_merkle_empty_root(uint8_t out[FA_MERKLE_HASH_LEN]);

/* MTH over n leaf hashes held in memory (leaf_hashes is (n, 32)).  Uses
 * O(log n) stack space.  For tests, tools and small trees. */
void fa_merkle_root_of(const uint8_t *leaf_hashes, uint64_t n, uint8_t out[FA_MERKLE_HASH_LEN]);

/* Post-order position of perfect-subtree node (level, index): the number of
 * nodes completed before it when leaves are appended one by one.  The tree of
 * n leaves has fa_merkle_node_count(n) = 2n - popcount(n) such nodes. */
uint64_t fa_merkle_node_pos(unsigned level, uint64_t index);
uint64_t fa_merkle_node_count(uint64_t n);

/* ---------------------------------------------------------------------------
 * Frontier: the roots of the perfect subtrees of the binary decomposition of
 * the tree size (a "compact range" [0, n)).  Appending a leaf costs O(log n)
 * hashes amortised O(1), and yields the nodes it completes.
 * ------------------------------------------------------------------------- */
typedef struct fa_merkle_frontier {
    uint64_t size;                        /* leaves so far */
    uint8_t hash[64][FA_MERKLE_HASH_LEN]; /* hash[l]: perfect subtree of 2^l leaves,
                                             valid when bit l of size is set */
} fa_merkle_frontier;

void fa_merkle_frontier_init(fa_merkle_frontier *f);

/* Appends a leaf hash.  When `completed` is not NULL it receives the nodes the
 * leaf completes, level 0 (the leaf hash itself) first, at most 64 of them
 * (contiguous, 32 bytes each), exactly in post-order; *ncompleted is set to their count
 * (1 + the number of trailing one bits of the old size).
 * Returns 0, or FA_ERR_RANGE when the tree is full (2^64 - 1 leaves). */
int fa_merkle_frontier_push(fa_merkle_frontier *f, const uint8_t leaf[FA_MERKLE_HASH_LEN],
                            uint8_t *completed, unsigned *ncompleted);

/* The root MTH of the leaves pushed so far (the empty root for none). */
void fa_merkle_frontier_root(const fa_merkle_frontier *f, uint8_t out[FA_MERKLE_HASH_LEN]);

/* ---------------------------------------------------------------------------
 * Proofs from stored nodes
 * ------------------------------------------------------------------------- */

/* Returns in out the hash of perfect-subtree node (level, index); 0 or a
 * negative FA_ERR_* code (which the proof functions pass on). */
typedef int (*fa_merkle_get_fn)(void *ctx, unsigned level, uint64_t index,
                                uint8_t out[FA_MERKLE_HASH_LEN]);

/* MTH(D[begin:end]) for a range the recursive split of some tree produces:
 * begin is a multiple of a power of two >= end - begin (every sibling in an
 * inclusion or consistency proof is such a range).  Returns 0, FA_ERR_INVAL
 * for another range, or the getter's error. */
int fa_merkle_range_root(fa_merkle_get_fn get, void *ctx, uint64_t begin, uint64_t end,
                         uint8_t out[FA_MERKLE_HASH_LEN]);

/* Inclusion proof of leaf `index` in the tree of `size` leaves (RFC 9162
 * 2.1.3.1, PATH), bottom-up, into proof (room for FA_MERKLE_MAX_PROOF hashes,
 * contiguous, 32 bytes each: every proof in this header has that layout);
 * *len is set to the number of hashes.  Returns 0, FA_ERR_RANGE when
 * index >= size, or the getter's error. */
int fa_merkle_inclusion_proof(fa_merkle_get_fn get, void *ctx, uint64_t index, uint64_t size,
                              uint8_t *proof, size_t *len);

/* Consistency proof between the trees of `old_size` and `size` leaves (RFC
 * 9162 2.1.4.1, PROOF), empty when old_size is 0 or equal to size.  Returns 0,
 * FA_ERR_RANGE when old_size > size, or the getter's error. */
int fa_merkle_consistency_proof(fa_merkle_get_fn get, void *ctx, uint64_t old_size, uint64_t size,
                                uint8_t *proof, size_t *len);

/* ---------------------------------------------------------------------------
 * Verification (RFC 9162 2.1.3.2 and 2.1.4.2)
 * ------------------------------------------------------------------------- */

/* Computes the root implied by an inclusion proof into out.  Returns 0, or
 * FA_ERR_VERIFY when index >= size or the proof has the wrong length. */
int fa_merkle_root_from_inclusion(const uint8_t leaf[FA_MERKLE_HASH_LEN], uint64_t index,
                                  uint64_t size, const uint8_t *proof, size_t len,
                                  uint8_t out[FA_MERKLE_HASH_LEN]);

/* Returns 0 when the proof shows leaf at index in the tree (size, root),
 * FA_ERR_VERIFY otherwise. */
int fa_merkle_verify_inclusion(const uint8_t leaf[FA_MERKLE_HASH_LEN], uint64_t index,
                               uint64_t size, const uint8_t *proof, size_t len,
                               const uint8_t root[FA_MERKLE_HASH_LEN]);

/* Returns 0 when the proof shows that the tree (old_size, old_root) is a
 * prefix of the tree (size, root), FA_ERR_VERIFY otherwise.  old_size 0 is
 * consistent with every tree (empty proof); old_size == size needs an empty
 * proof and equal roots. */
int fa_merkle_verify_consistency(uint64_t old_size, uint64_t size,
                                 const uint8_t old_root[FA_MERKLE_HASH_LEN],
                                 const uint8_t root[FA_MERKLE_HASH_LEN], const uint8_t *proof,
                                 size_t len);

#endif
