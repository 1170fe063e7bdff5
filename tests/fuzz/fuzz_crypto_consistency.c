/* libFuzzer target: the text of a consistency proof, as a region reads it
 * from GET /v1/audit/consistency (crypto/checkpoint.h
 * fa_checkpoint_consistency_parse), on any bytes.
 *
 * The region asks for the proof from 3 to 5 records (the seeds' sizes)
 * and, for text that passes, the proof formats back to text that parses to
 * the same hashes; then the Merkle check runs on them (it must refuse or
 * accept without reading past the n hashes). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "crypto/checkpoint.h"
#include "crypto/merkle.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint8_t old_root[32] = {1}, root[32] = {2};
    uint8_t proof[FA_MERKLE_MAX_PROOF * FA_MERKLE_HASH_LEN];
    uint8_t again[FA_MERKLE_MAX_PROOF * FA_MERKLE_HASH_LEN];
    size_t n = 0, m = 0, len = 0;
    char *text = NULL;
    fa_error err;

    if (fa_checkpoint_consistency_parse((const char *)data, size, 3, 5, proof, &n, &err) != 0)
        return 0;
    if (n > FA_MERKLE_MAX_PROOF)
        abort();
    if (fa_checkpoint_consistency_format(3, 5, proof, n, &text, &len, &err) != 0)
        abort();
    if (fa_checkpoint_consistency_parse(text, len, 3, 5, again, &m, &err) != 0 || m != n ||
        memcmp(again, proof, n * FA_MERKLE_HASH_LEN) != 0)
        abort();
    free(text);
    fa_merkle_verify_consistency(3, 5, old_root, root, proof, n);
    return 0;
}
