/* libFuzzer target: a model delta (model/delta.h) from the network.  A region
 * rebuilds its next model from bytes the aggregator sent; they must either
 * rebuild a well-formed file or be refused with nothing left behind.
 *
 * The input is the delta file.  Every occurrence of BASE_MARK (64 bytes) in
 * it is replaced by the hex SHA-256 of the fixed base model this target
 * writes once (w: F32 [300], b: BF16 [4, 5], n: I64 [1], o: F16 [7]), so
 * that seeds can name the base and reach past the digest check.  Seeds
 * cover both widths: 8-bit steps (I8) and 4-bit ones (U8, two a byte; o's
 * odd count ends on a padding nibble).  Accepted: the output is
 * a safetensors file whose SHA-256 is the one returned and whose size the
 * delta announced.  Refused: no output file.  Anything else is a defect:
 * abort(). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fa_file.h"
#include "common/fa_hex.h"
#include "common/fa_safetensors.h"
#include "model/delta.h"

#define BASE_MARK "BASE_SHA256_BASE_SHA256_BASE_SHA256_BASE_SHA256_BASE_SHA256_BASE"

static char dir[64], base[128], delta[128], out[128], base_hex[65];

static void cleanup(void)
{
    unlink(base);
    unlink(delta);
    unlink(out);
    rmdir(dir);
}

static void init_once(void)
{
    static const uint64_t sw[1] = {300}, sb[2] = {4, 5}, sn[1] = {1}, so[1] = {7};
    float w[300];
    uint16_t b[20], o[7];
    int64_t n = 7;
    uint8_t sha[32];

    if (dir[0])
        return;
    snprintf(dir, sizeof(dir), "/tmp/fa_fuzz_delta.XXXXXX");
    if (!mkdtemp(dir))
        abort();
    snprintf(base, sizeof(base), "%s/base.safetensors", dir);
    snprintf(delta, sizeof(delta), "%s/delta.safetensors", dir);
    snprintf(out, sizeof(out), "%s/out.safetensors", dir);
    atexit(cleanup);
    for (int i = 0; i < 300; i++)
        w[i] = (float)i / 300.0f - 0.5f;
    for (int i = 0; i < 20; i++)
        b[i] = (uint16_t)(0x3f80 + i);
    for (int i = 0; i < 7; i++)
        o[i] = (uint16_t)(0x3c00 + 0x100 * i); /* F16 1 to 3 */
    fa_st_view v[4] = {
        {.name = "w", .dtype = FA_ST_F32, .ndim = 1, .shape = sw, .data = w},
        {.name = "b", .dtype = FA_ST_BF16, .ndim = 2, .shape = sb, .data = b},
        {.name = "n", .dtype = FA_ST_I64, .ndim = 1, .shape = sn, .data = &n},
        {.name = "o", .dtype = FA_ST_F16, .ndim = 1, .shape = so, .data = o},
    };
    if (fa_st_save(base, 0600, v, 4, NULL, 0, NULL) != 0 ||
        fa_delta_file_sha256(base, sha, NULL, NULL) != 0)
        abort();
    fa_hex_encode(base_hex, sizeof(base_hex), sha, 32);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf, sha[32], again[32];
    fa_delta_info info;
    fa_safetensors *st = NULL;
    uint64_t got_size;
    int rc;

    init_once();
    if (!(buf = malloc(size ? size : 1)))
        abort();
    memcpy(buf, data, size);
    for (size_t i = 0; i + 64 <= size; i++)
        if (!memcmp(buf + i, BASE_MARK, 64))
            memcpy(buf + i, base_hex, 64);
    if (fa_file_write_atomic(delta, buf, size, 0600, NULL) != 0)
        abort();
    free(buf);
    unlink(out);
    rc = fa_delta_reconstruct(base, delta, out, sha, &info, NULL);
    if (rc != 0) {
        if (access(out, F_OK) == 0)
            abort(); /* a refusal leaves nothing behind */
        return 0;
    }
    if (fa_delta_file_sha256(out, again, &got_size, NULL) != 0 || memcmp(sha, again, 32) != 0 ||
        got_size != info.size || fa_st_open(&st, out, NULL) != 0)
        abort();
    fa_st_del(st);
    unlink(out);
    return 0;
}
