/* Unit tests of crypto/merkle: RFC 6962 / RFC 9162 test vectors (the
 * certificate-transparency reference leaves), and every inclusion and
 * consistency proof of every tree up to 70 leaves compared with a direct
 * recursive transcription of RFC 9162 2.1, plus corrupted proofs. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "common/fa_hex.h"
#include "crypto/merkle.h"

#define H FA_MERKLE_HASH_LEN
#define AT(a, j) ((a) + (size_t)(j)*H)

static void unhex(const char *s, uint8_t *out)
{
    assert_int_equal(fa_hex_decode(out, strlen(s) / 2, s, strlen(s)), 0);
}

static void assert_hash_hex(const uint8_t *h, const char *hex)
{
    uint8_t want[H];
    unhex(hex, want);
    assert_memory_equal(h, want, H);
}

/* The eight leaves of the CT / RFC 6962 reference test data. */
static const char *const ct_leaves[8] = {
    "",
    "00",
    "10",
    "2021",
    "3031",
    "40414243",
    "5051525354555657",
    "606162636465666768696a6b6c6d6e6f",
};
static const char *const ct_roots[8] = {
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
};

static uint8_t ct_leaf_hash[8][H];

static void ct_setup(void)
{
    for (int i = 0; i < 8; i++) {
        uint8_t d[16];
        size_t n = strlen(ct_leaves[i]) / 2;
        unhex(ct_leaves[i], d);
        fa_merkle_leaf_hash(d, n, ct_leaf_hash[i]);
    }
}

/* ---- a node store in memory, filled in post-order as the audit log does ---- */
struct store {
    uint8_t (*nodes)[H];
    uint64_t count, size;
};

static int store_get(void *ctx, unsigned level, uint64_t index, uint8_t out[H])
{
    struct store *s = ctx;
    uint64_t pos;
    /* a perfect subtree must lie inside the tree */
    if (((index + 1) << level) > s->size)
        return -99;
    pos = fa_merkle_node_pos(level, index);
    assert_true(pos < s->count);
    memcpy(out, s->nodes[pos], H);
    return 0;
}

static void store_build(struct store *s, const uint8_t (*leaves)[H], uint64_t n)
{
    fa_merkle_frontier f;
    uint8_t done[64 * H];
    unsigned k;

    s->nodes = calloc(fa_merkle_node_count(n) + 1, H);
    s->count = 0;
    s->size = n;
    fa_merkle_frontier_init(&f);
    for (uint64_t i = 0; i < n; i++) {
        assert_int_equal(fa_merkle_frontier_push(&f, leaves[i], done, &k), 0);
        assert_int_equal(k, 1 + __builtin_ctzll(~i));
        memcpy(s->nodes[s->count], done, (size_t)k * H);
        s->count += k;
    }
    assert_int_equal(s->count, fa_merkle_node_count(n));
}

/* ---- reference: RFC 9162 2.1.1-2.1.4 transcribed recursively ---- */
static uint64_t ref_k(uint64_t n)
{
    uint64_t k = 1;
    while (k * 2 < n)
        k *= 2;
    return k;
}

static void ref_mth(const uint8_t (*d)[H], uint64_t n, uint8_t out[H])
{
    uint8_t l[H], r[H];
    if (n == 0) {
        fa_merkle_empty_root(out);
        return;
    }
    if (n == 1) {
        memcpy(out, d[0], H);
        return;
    }
    uint64_t k = ref_k(n);
    ref_mth(d, k, l);
    ref_mth(d + k, n - k, r);
    fa_merkle_node_hash(l, r, out);
}

/* PATH(m, D[n]) */
static void ref_path(uint64_t m, const uint8_t (*d)[H], uint64_t n, uint8_t *out, size_t *len)
{
    if (n <= 1) {
        *len = 0;
        return;
    }
    uint64_t k = ref_k(n);
    if (m < k) {
        ref_path(m, d, k, out, len);
        ref_mth(d + k, n - k, AT(out, (*len)++));
    } else {
        ref_path(m - k, d + k, n - k, out, len);
        ref_mth(d, k, AT(out, (*len)++));
    }
}

/* SUBPROOF(m, D[n], b) */
static void ref_subproof(uint64_t m, const uint8_t (*d)[H], uint64_t n, int b, uint8_t *out,
                         size_t *len)
{
    if (m == n) {
        *len = 0;
        if (!b)
            ref_mth(d, n, AT(out, (*len)++));
        return;
    }
    uint64_t k = ref_k(n);
    if (m <= k) {
        ref_subproof(m, d, k, b, out, len);
        ref_mth(d + k, n - k, AT(out, (*len)++));
    } else {
        ref_subproof(m - k, d + k, n - k, 0, out, len);
        ref_mth(d, k, AT(out, (*len)++));
    }
}

/* ------------------------------------------------------------------------- */

static void test_empty_and_leaf_hashes(void **state)
{
    uint8_t h[H];
    fa_merkle_empty_root(h);
    assert_hash_hex(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    fa_merkle_root_of(NULL, 0, h);
    assert_hash_hex(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    /* leaf hash of the empty leaf = SHA-256(0x00) */
    fa_merkle_leaf_hash("", 0, h);
    assert_hash_hex(h, "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d");
    /* a leaf larger than the stack buffer takes the streaming path */
    {
        size_t n = 5000;
        uint8_t *big = malloc(n + 1), want[H];
        big[0] = 0x00;
        for (size_t i = 0; i < n; i++)
            big[i + 1] = (uint8_t)(i * 7);
        fa_merkle_leaf_hash(big + 1, n, h);
        crypto_hash_sha256(want, big, n + 1);
        assert_memory_equal(h, want, H);
        /* node hash = SHA-256(0x01 || l || r): domain-separated from a leaf */
        big[0] = 0x01;
        fa_merkle_node_hash(big + 1, big + 33, h);
        crypto_hash_sha256(want, big, 65);
        assert_memory_equal(h, want, H);
        free(big);
    }
}

static void test_ct_roots(void **state)
{
    uint8_t h[H];
    ct_setup();
    for (int n = 1; n <= 8; n++) {
        fa_merkle_root_of(ct_leaf_hash[0], (uint64_t)n, h);
        assert_hash_hex(h, ct_roots[n - 1]);
        ref_mth((const uint8_t(*)[H])ct_leaf_hash, (uint64_t)n, h);
        assert_hash_hex(h, ct_roots[n - 1]);
    }
}

struct vec {
    uint64_t a, b; /* inclusion: leaf index, size; consistency: old, new */
    int n;
    const char *h[3];
};

static void test_ct_inclusion_vectors(void **state)
{
    /* From the RFC 6962 reference data (leaf indexes 0-based). */
    static const struct vec v[] = {
        {0,
         8,
         3,
         {"96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
          "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
          "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"}},
        {5,
         8,
         3,
         {"bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
          "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
          "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"}},
        {2, 3, 1, {"fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"}},
        {1,
         5,
         3,
         {"6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
          "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
          "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"}},
        {0, 1, 0, {NULL}},
    };
    struct store s;
    uint8_t proof[FA_MERKLE_MAX_PROOF * H], root[H];
    size_t len;

    ct_setup();
    store_build(&s, (const uint8_t(*)[H])ct_leaf_hash, 8);
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        s.size = v[i].b;
        assert_int_equal(fa_merkle_inclusion_proof(store_get, &s, v[i].a, v[i].b, proof, &len), 0);
        assert_int_equal(len, (size_t)v[i].n);
        for (int j = 0; j < v[i].n; j++)
            assert_hash_hex(AT(proof, j), v[i].h[j]);
        unhex(ct_roots[v[i].b - 1], root);
        assert_int_equal(
            fa_merkle_verify_inclusion(ct_leaf_hash[v[i].a], v[i].a, v[i].b, proof, len, root), 0);
    }
    s.size = 8;
    assert_int_equal(fa_merkle_inclusion_proof(store_get, &s, 8, 8, proof, &len), FA_ERR_RANGE);
    free(s.nodes);
}

static void test_ct_consistency_vectors(void **state)
{
    static const struct vec v[] = {
        {1,
         8,
         3,
         {"96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
          "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
          "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"}},
        {6,
         8,
         3,
         {"0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
          "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
          "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"}},
        {2,
         5,
         2,
         {"5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
          "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"}},
        {6,
         7,
         3,
         {"0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
          "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
          "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"}},
        {1, 1, 0, {NULL}},
    };
    struct store s;
    uint8_t proof[FA_MERKLE_MAX_PROOF * H], r1[H], r2[H];
    size_t len;

    ct_setup();
    store_build(&s, (const uint8_t(*)[H])ct_leaf_hash, 8);
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        s.size = v[i].b;
        assert_int_equal(fa_merkle_consistency_proof(store_get, &s, v[i].a, v[i].b, proof, &len),
                         0);
        assert_int_equal(len, (size_t)v[i].n);
        for (int j = 0; j < v[i].n; j++)
            assert_hash_hex(AT(proof, j), v[i].h[j]);
        unhex(ct_roots[v[i].a - 1], r1);
        unhex(ct_roots[v[i].b - 1], r2);
        assert_int_equal(fa_merkle_verify_consistency(v[i].a, v[i].b, r1, r2, proof, len), 0);
        if (len)
            assert_int_equal(fa_merkle_verify_consistency(v[i].a, v[i].b, r2, r1, proof, len),
                             FA_ERR_VERIFY);
    }
    s.size = 8;
    assert_int_equal(fa_merkle_consistency_proof(store_get, &s, 9, 8, proof, &len), FA_ERR_RANGE);
    free(s.nodes);
}

static void test_node_positions(void **state)
{
    /* post-order: leaf0 leaf1 n(1,0) leaf2 leaf3 n(1,1) n(2,0) leaf4 ... */
    assert_int_equal(fa_merkle_node_pos(0, 0), 0);
    assert_int_equal(fa_merkle_node_pos(0, 1), 1);
    assert_int_equal(fa_merkle_node_pos(1, 0), 2);
    assert_int_equal(fa_merkle_node_pos(0, 2), 3);
    assert_int_equal(fa_merkle_node_pos(0, 3), 4);
    assert_int_equal(fa_merkle_node_pos(1, 1), 5);
    assert_int_equal(fa_merkle_node_pos(2, 0), 6);
    assert_int_equal(fa_merkle_node_pos(0, 4), 7);
    assert_int_equal(fa_merkle_node_count(0), 0);
    assert_int_equal(fa_merkle_node_count(1), 1);
    assert_int_equal(fa_merkle_node_count(4), 7);
    assert_int_equal(fa_merkle_node_count(5), 8);
    /* every (level, index) of a 100-leaf tree lands on a distinct slot < count */
    {
        uint8_t seen[fa_merkle_node_count(100)];
        memset(seen, 0, sizeof(seen));
        for (unsigned l = 0; l < 7; l++)
            for (uint64_t i = 0; ((i + 1) << l) <= 100; i++) {
                uint64_t p = fa_merkle_node_pos(l, i);
                assert_true(p < sizeof(seen));
                assert_int_equal(seen[p], 0);
                seen[p] = 1;
            }
        for (size_t p = 0; p < sizeof(seen); p++)
            assert_int_equal(seen[p], 1);
    }
}

static void test_range_root(void **state)
{
    struct store s;
    uint8_t leaves[16][H], h[H], want[H];
    for (int i = 0; i < 16; i++)
        fa_merkle_leaf_hash(&i, sizeof(i), leaves[i]);
    store_build(&s, (const uint8_t(*)[H])leaves, 16);
    assert_int_equal(fa_merkle_range_root(store_get, &s, 8, 13, h), 0);
    ref_mth((const uint8_t(*)[H])leaves + 8, 5, want);
    assert_memory_equal(h, want, H);
    assert_int_equal(fa_merkle_range_root(store_get, &s, 0, 16, h), 0);
    ref_mth((const uint8_t(*)[H])leaves, 16, want);
    assert_memory_equal(h, want, H);
    /* unaligned ranges are not subtrees of any split */
    assert_int_equal(fa_merkle_range_root(store_get, &s, 2, 7, h), FA_ERR_INVAL);
    assert_int_equal(fa_merkle_range_root(store_get, &s, 4, 4, h), FA_ERR_INVAL);
    /* the getter's error is passed on */
    s.size = 10;
    assert_int_equal(fa_merkle_range_root(store_get, &s, 8, 12, h), -99);
    free(s.nodes);
}

#define MAXN 70

/* Every proof of every tree up to MAXN leaves equals the reference and
 * verifies; corrupted variants do not. */
static void test_all_sizes_against_reference(void **state)
{
    static uint8_t leaves[MAXN][H];
    uint8_t roots[MAXN + 1][H];
    uint8_t proof[FA_MERKLE_MAX_PROOF * H], ref[FA_MERKLE_MAX_PROOF * H],
        bad[(FA_MERKLE_MAX_PROOF + 1) * H];
    uint8_t r[H];
    struct store s;
    size_t len, rlen;
    fa_merkle_frontier f;

    for (int i = 0; i < MAXN; i++) {
        uint8_t d[3] = {(uint8_t)i, (uint8_t)(i * 31), 0x5a};
        fa_merkle_leaf_hash(d, sizeof(d), leaves[i]);
    }
    fa_merkle_frontier_init(&f);
    for (uint64_t n = 0; n <= MAXN; n++) {
        ref_mth((const uint8_t(*)[H])leaves, n, roots[n]);
        fa_merkle_frontier_root(&f, r);
        assert_memory_equal(r, roots[n], H);
        if (n < MAXN)
            fa_merkle_frontier_push(&f, leaves[n], NULL, NULL);
    }
    store_build(&s, (const uint8_t(*)[H])leaves, MAXN);

    for (uint64_t n = 1; n <= MAXN; n++) {
        s.size = n; /* the getter refuses nodes outside this tree */
        for (uint64_t m = 0; m < n; m++) {
            assert_int_equal(fa_merkle_inclusion_proof(store_get, &s, m, n, proof, &len), 0);
            ref_path(m, (const uint8_t(*)[H])leaves, n, ref, &rlen);
            assert_int_equal(len, rlen);
            assert_memory_equal(proof, ref, len * H);
            assert_int_equal(fa_merkle_verify_inclusion(leaves[m], m, n, proof, len, roots[n]), 0);
            assert_int_equal(fa_merkle_root_from_inclusion(leaves[m], m, n, proof, len, r), 0);
            assert_memory_equal(r, roots[n], H);
            /* wrong leaf, index, size, root; each bit-flipped element; short and long proofs */
            assert_int_not_equal(
                fa_merkle_verify_inclusion(leaves[(m + 1) % MAXN], m, n, proof, len, roots[n]), 0);
            if (n > 1)
                assert_int_not_equal(
                    fa_merkle_verify_inclusion(leaves[m], (m + 1) % n, n, proof, len, roots[n]), 0);
            /* (The tree size itself is bound by the signed checkpoint, not by
             * the path: the path of leaf 0 in a 3-tree also fits a 4-tree.) */
            assert_int_not_equal(
                fa_merkle_verify_inclusion(leaves[m], m, n, proof, len, roots[n - 1]), 0);
            assert_int_not_equal(fa_merkle_verify_inclusion(leaves[m], n, n, proof, len, roots[n]),
                                 0);
            for (size_t j = 0; j < len; j++) {
                memcpy(bad, proof, len * H);
                AT(bad, j)[(m + j) % H] ^= (uint8_t)(1u << (j % 8));
                assert_int_equal(fa_merkle_verify_inclusion(leaves[m], m, n, bad, len, roots[n]),
                                 FA_ERR_VERIFY);
            }
            if (len > 0)
                assert_int_equal(
                    fa_merkle_verify_inclusion(leaves[m], m, n, proof, len - 1, roots[n]),
                    FA_ERR_VERIFY);
            memcpy(bad, proof, len * H);
            memcpy(AT(bad, len), roots[n], H);
            assert_int_equal(fa_merkle_verify_inclusion(leaves[m], m, n, bad, len + 1, roots[n]),
                             FA_ERR_VERIFY);
        }
        for (uint64_t m = 0; m <= n; m++) {
            assert_int_equal(fa_merkle_consistency_proof(store_get, &s, m, n, proof, &len), 0);
            if (m == 0 || m == n) {
                assert_int_equal(len, 0);
            } else {
                ref_subproof(m, (const uint8_t(*)[H])leaves, n, 1, ref, &rlen);
                assert_int_equal(len, rlen);
                assert_memory_equal(proof, ref, len * H);
            }
            assert_int_equal(fa_merkle_verify_consistency(m, n, roots[m], roots[n], proof, len), 0);
            if (m == 0 || m == n)
                continue;
            /* wrong or swapped roots, each bit-flipped element, truncated, extended
             * (sizes are bound by the signed checkpoints) */
            assert_int_not_equal(
                fa_merkle_verify_consistency(m, n, roots[m - 1], roots[n], proof, len), 0);
            assert_int_not_equal(
                fa_merkle_verify_consistency(m, n, roots[m], roots[n - 1], proof, len), 0);
            assert_int_not_equal(fa_merkle_verify_consistency(m, n, roots[n], roots[m], proof, len),
                                 0);
            assert_int_not_equal(fa_merkle_verify_consistency(m, n, roots[m], roots[n], proof, 0),
                                 0);
            for (size_t j = 0; j < len; j++) {
                memcpy(bad, proof, len * H);
                AT(bad, j)[(m + j) % H] ^= (uint8_t)(1u << (j % 8));
                assert_int_equal(fa_merkle_verify_consistency(m, n, roots[m], roots[n], bad, len),
                                 FA_ERR_VERIFY);
            }
            assert_int_equal(fa_merkle_verify_consistency(m, n, roots[m], roots[n], proof, len - 1),
                             FA_ERR_VERIFY);
            memcpy(bad, proof, len * H);
            memcpy(AT(bad, len), roots[m], H);
            assert_int_equal(fa_merkle_verify_consistency(m, n, roots[m], roots[n], bad, len + 1),
                             FA_ERR_VERIFY);
        }
    }
    /* sizes that are always or never consistent */
    assert_int_equal(fa_merkle_verify_consistency(0, 0, roots[0], roots[0], NULL, 0), 0);
    assert_int_equal(fa_merkle_verify_consistency(0, 5, roots[0], roots[5], NULL, 0), 0);
    assert_int_equal(fa_merkle_verify_consistency(3, 3, roots[3], roots[3], NULL, 0), 0);
    assert_int_equal(fa_merkle_verify_consistency(3, 3, roots[3], roots[4], NULL, 0),
                     FA_ERR_VERIFY);
    assert_int_equal(fa_merkle_verify_consistency(4, 3, roots[4], roots[3], NULL, 0),
                     FA_ERR_VERIFY);
    assert_int_equal(fa_merkle_verify_consistency(0, 5, roots[0], roots[5], roots[1], 1),
                     FA_ERR_VERIFY);
    free(s.nodes);
}

/* A large tree: proofs near 2^20 leaves against a frontier root, with a
 * getter that computes nodes on demand (no store), to exercise deep paths. */
static int synth_get(void *ctx, unsigned level, uint64_t index, uint8_t out[H])
{
    /* node (level, index) of a tree whose leaf i has hash H(le64(i)) */
    if (level == 0) {
        uint64_t i = index;
        fa_merkle_leaf_hash(&i, sizeof(i), out);
        return 0;
    }
    uint8_t l[H], r[H];
    synth_get(ctx, level - 1, 2 * index, l);
    synth_get(ctx, level - 1, 2 * index + 1, r);
    fa_merkle_node_hash(l, r, out);
    return 0;
}

static void test_deep_proofs(void **state)
{
    const uint64_t n = 4099; /* 2^12 + 3: right edge has three subtrees */
    fa_merkle_frontier f;
    uint8_t root[H], leaf[H], proof[FA_MERKLE_MAX_PROOF * H], oldroot[H];
    size_t len;

    fa_merkle_frontier_init(&f);
    for (uint64_t i = 0; i < n; i++) {
        fa_merkle_leaf_hash(&i, sizeof(i), leaf);
        fa_merkle_frontier_push(&f, leaf, NULL, NULL);
        if (i + 1 == 1000)
            fa_merkle_frontier_root(&f, oldroot);
    }
    fa_merkle_frontier_root(&f, root);
    {
        uint64_t probe[] = {0, 1, 999, 2048, 4095, 4096, 4097, 4098};
        for (size_t k = 0; k < sizeof(probe) / sizeof(probe[0]); k++) {
            uint64_t i = probe[k];
            assert_int_equal(fa_merkle_inclusion_proof(synth_get, NULL, i, n, proof, &len), 0);
            assert_true(len <= 13);
            fa_merkle_leaf_hash(&i, sizeof(i), leaf);
            assert_int_equal(fa_merkle_verify_inclusion(leaf, i, n, proof, len, root), 0);
        }
    }
    assert_int_equal(fa_merkle_consistency_proof(synth_get, NULL, 1000, n, proof, &len), 0);
    assert_int_equal(fa_merkle_verify_consistency(1000, n, oldroot, root, proof, len), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_and_leaf_hashes),
        cmocka_unit_test(test_ct_roots),
        cmocka_unit_test(test_ct_inclusion_vectors),
        cmocka_unit_test(test_ct_consistency_vectors),
        cmocka_unit_test(test_node_positions),
        cmocka_unit_test(test_range_root),
        cmocka_unit_test(test_all_sizes_against_reference),
        cmocka_unit_test(test_deep_proofs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
